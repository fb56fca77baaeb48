//! Streams (an ordered queue per stream, run by its own worker thread) and events.
//!
//! As the ABI says: a stream keeps the first error a job met, later jobs still run, an event
//! the stream reaches after the error reports `Error`, and the next `synchronize` returns the
//! error and clears it.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use devplug_plugin_sdk::{Error, EventStatus, Result};
use parking_lot::{Condvar, Mutex};

/// A unit of stream work. Its argument says whether the stream is in error (holds an error
/// not yet reported by `synchronize`).
pub type Job = Box<dyn FnOnce(bool) -> Result<()> + Send>;

#[derive(Default)]
struct Progress {
    submitted: u64,
    completed: u64,
    error: Option<Error>,
}

/// What a stream shares with its worker and with the work of other streams that waits on it.
#[derive(Default)]
pub struct StreamShared {
    progress: Mutex<Progress>,
    changed: Condvar,
}

impl StreamShared {
    /// Blocks until the stream has completed `ticket` jobs.
    pub fn wait_for(&self, ticket: u64) {
        let mut p = self.progress.lock();
        while p.completed < ticket {
            self.changed.wait(&mut p);
        }
    }

    /// Blocks until everything enqueued so far is done; returns (and clears) the stream's
    /// first error.
    pub fn synchronize(&self) -> Result<()> {
        let mut p = self.progress.lock();
        let ticket = p.submitted;
        while p.completed < ticket {
            self.changed.wait(&mut p);
        }
        p.error.take().map_or(Ok(()), Err)
    }

    /// How many jobs were enqueued so far.
    pub fn submitted(&self) -> u64 {
        self.progress.lock().submitted
    }
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}

/// A stream: jobs run in order on a worker thread.
pub struct Stream {
    shared: Arc<StreamShared>,
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    worker: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Stream {
    /// Starts a stream named `name` (the worker thread's name).
    pub fn new(name: String) -> Result<Stream> {
        let shared = Arc::new(StreamShared::default());
        let (sender, receiver) = mpsc::channel::<Job>();
        let worker_shared = Arc::clone(&shared);
        let worker = thread::Builder::new()
            .name(name)
            .spawn(move || run(&worker_shared, &receiver))
            .map_err(|e| {
                Error::resource_exhausted(format!("cannot start a stream worker thread: {e}"))
            })?;
        Ok(Stream {
            shared,
            sender: Mutex::new(Some(sender)),
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The part other streams' work may wait on.
    pub fn shared(&self) -> &Arc<StreamShared> {
        &self.shared
    }

    /// Enqueues `job`; returns its ticket (the stream has reached it when `completed >=
    /// ticket`). If the job cannot be enqueued it is dropped, not run.
    pub fn enqueue(&self, job: Job) -> Result<u64> {
        // Ticket order = queue order: both under the progress lock.
        let mut p = self.shared.progress.lock();
        let sender = self.sender.lock();
        let sent = sender.as_ref().map(|s| s.send(job));
        match sent {
            Some(Ok(())) => {
                p.submitted += 1;
                Ok(p.submitted)
            }
            _ => Err(Error::unavailable("the stream's worker thread is gone")),
        }
    }
}

fn run(shared: &StreamShared, receiver: &mpsc::Receiver<Job>) {
    while let Ok(job) = receiver.recv() {
        let failed = shared.progress.lock().error.is_some();
        let result = catch_unwind(AssertUnwindSafe(|| job(failed))).unwrap_or_else(|payload| {
            Err(Error::internal(format!(
                "panic in stream work: {}",
                panic_text(&*payload)
            )))
        });
        let mut p = shared.progress.lock();
        if let Err(e) = result {
            p.error.get_or_insert(e);
        }
        p.completed += 1;
        shared.changed.notify_all();
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Closing the channel ends the worker once it has run what is queued.
        self.sender.lock().take();
        if let Some(worker) = self.worker.lock().take() {
            // Destroyed from its own worker (inside a host callback): the thread ends by
            // itself once this job returns; it cannot join itself.
            if worker.thread().id() != thread::current().id() {
                let _ = worker.join();
            }
        }
    }
}

#[derive(Default)]
struct EventState {
    /// Generation of the latest record (0: never recorded).
    recorded: u64,
    /// Highest generation reached.
    reached: u64,
    /// The stream was in error when the latest reached generation was reached.
    errored: bool,
}

/// An event: a marker in a stream, re-recordable (the latest record counts).
#[derive(Default)]
pub struct Event {
    state: Mutex<EventState>,
    changed: Condvar,
}

impl Event {
    /// Starts a new record; returns its generation.
    pub fn begin_record(&self) -> u64 {
        let mut s = self.state.lock();
        s.recorded += 1;
        s.recorded
    }

    /// The stream reached generation `generation` (in error or not).
    pub fn reach(&self, generation: u64, errored: bool) {
        let mut s = self.state.lock();
        if generation >= s.reached {
            s.reached = generation;
            s.errored = errored;
        }
        self.changed.notify_all();
    }

    /// The generation the current record will reach (0 when never recorded).
    pub fn generation(&self) -> u64 {
        self.state.lock().recorded
    }

    /// Pending, complete, or error.
    pub fn status(&self) -> EventStatus {
        let s = self.state.lock();
        if s.reached < s.recorded {
            EventStatus::Pending
        } else if s.errored {
            EventStatus::Error
        } else {
            EventStatus::Complete
        }
    }

    /// Blocks until `generation` is reached.
    pub fn wait_for(&self, generation: u64) {
        let mut s = self.state.lock();
        while s.reached < generation {
            self.changed.wait(&mut s);
        }
    }
}
