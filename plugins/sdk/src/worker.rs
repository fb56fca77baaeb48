//! Ready-made streams and events for devices that run their work on host threads.
//!
//! Most of a [`Device`](crate::Device) for a simulator, or for a device whose memory the host
//! can reach, is the same plumbing: an ordered queue per stream run by a worker thread, the
//! stream's first error, events, host callbacks, waits between streams, `synchronize_all`,
//! and panics in the worker. This module is that plumbing, written once to the ABI's rules
//! (plugin guide §1, "Streams, events and errors"):
//!
//! - [`WorkerStream`]: an ordered queue run by its own thread. Work is a closure
//!   ([`WorkerStream::enqueue`]) that returns a [`Result`]; the stream keeps the **first**
//!   error, later work still runs, and [`WorkerStream::synchronize`] returns the error once and
//!   clears it. A job that panics does not kill the worker: the panic becomes the stream's
//!   error (`INTERNAL`, `panicked: <text>`) and the stream goes on.
//! - [`WorkerEvent`]: a marker in a stream, re-recordable (the latest record counts); it
//!   reports [`EventStatus::Error`] when its stream reached it while in error, and it is
//!   timed (the instant the stream reached it), for
//!   [`Device::event_elapsed_ns`](crate::Device::event_elapsed_ns).
//! - [`WorkerStreams`]: the streams of one device, for
//!   [`Device::synchronize_all`](crate::Device::synchronize_all).
//!
//! With them the stream and event methods of [`Device`](crate::Device) are one line each
//! (`type Stream = WorkerStream; type Event = WorkerEvent;`); you write memory, the
//! synchronous copies, the four `*_async` operations (check the arguments at once, enqueue
//! the work) and kernels.
//!
//! **When to use it:** devices that do their work on host threads — simulators, reference
//! devices, devices whose memory the host can address, or hardware driven synchronously from
//! the host. **When not to:** real accelerators with queues of their own (CUDA streams and
//! events, a command queue): map the trait's streams and events onto those, as the CUDA
//! plugin does; a worker thread per stream in front of an asynchronous queue only adds a hop.
//!
//! Threads: each stream owns one thread, joined when the stream is dropped (the host destroys
//! every stream before its device and the plugin, so no worker outlives the library). A stream
//! dropped from its own worker (the host destroyed it inside one of its host callbacks) cannot
//! join itself: its thread runs what is queued and ends by itself.
//!
//! # Example
//!
//! The stream and event half of a device (the memory half is elided; see the plugin guide §5
//! for a whole device):
//!
//! ```
//! use devplug_plugin_sdk::worker::{WorkerEvent, WorkerStream, WorkerStreams};
//! use devplug_plugin_sdk::{
//!     Device, DeviceAddr, EventStatus, HostBuf, HostBufMut, HostCallback, Result,
//! };
//!
//! struct MyDevice {
//!     streams: WorkerStreams, // WorkerStreams::new("mydev:0")
//! }
//!
//! impl Device for MyDevice {
//!     type Stream = WorkerStream;
//!     type Event = WorkerEvent;
//!
//!     fn create_stream(&self) -> Result<WorkerStream> {
//!         self.streams.create()
//!     }
//!     fn synchronize_stream(&self, stream: &WorkerStream) -> Result<()> {
//!         stream.synchronize()
//!     }
//!     fn stream_wait_stream(&self, stream: &WorkerStream, other: &WorkerStream) -> Result<()> {
//!         stream.wait_stream(other)
//!     }
//!     fn host_callback(&self, stream: &WorkerStream, callback: HostCallback) -> Result<()> {
//!         stream.host_callback(callback)
//!     }
//!     fn create_event(&self) -> Result<WorkerEvent> {
//!         Ok(WorkerEvent::new())
//!     }
//!     fn record_event(&self, stream: &WorkerStream, event: &WorkerEvent) -> Result<()> {
//!         stream.record(event)
//!     }
//!     fn event_status(&self, event: &WorkerEvent) -> Result<EventStatus> {
//!         Ok(event.status())
//!     }
//!     fn stream_wait_event(&self, stream: &WorkerStream, event: &WorkerEvent) -> Result<()> {
//!         stream.wait_event(event)
//!     }
//!     fn event_synchronize(&self, event: &WorkerEvent) -> Result<()> {
//!         event.synchronize()
//!     }
//!     fn provides_event_timing(&self) -> bool {
//!         true // optional: the events are timed anyway
//!     }
//!     fn event_elapsed_ns(&self, start: &WorkerEvent, end: &WorkerEvent) -> Result<i64> {
//!         start.elapsed_ns(end)
//!     }
//!     fn synchronize_all(&self) -> Result<()> {
//!         self.streams.synchronize_all()
//!     }
//!
//!     // Asynchronous work: check the arguments now (an error fails the call), then enqueue.
//!     fn memset_async(&self, stream: &WorkerStream, dst: DeviceAddr, value: u8, size: u64)
//!         -> Result<()>
//!     {
//!         self.check(dst, size)?;
//!         stream.enqueue(move || {
//!             // ... set the bytes; an Err here becomes the stream's error ...
//! #           let _ = (dst, value, size);
//!             Ok(())
//!         })
//!     }
//! #   fn memcpy_htod_async(&self, _: &WorkerStream, _: DeviceAddr, _: HostBuf) -> Result<()> {
//! #       Ok(())
//! #   }
//! #   fn memcpy_dtoh_async(&self, _: &WorkerStream, _: HostBufMut, _: DeviceAddr) -> Result<()> {
//! #       Ok(())
//! #   }
//! #   fn memcpy_dtod_async(&self, _: &WorkerStream, _: DeviceAddr, _: DeviceAddr, _: u64)
//! #       -> Result<()> { Ok(()) }
//! #   fn allocate(&self, _: u64) -> Result<DeviceAddr> { Ok(DeviceAddr(256)) }
//! #   fn deallocate(&self, _: DeviceAddr, _: u64) {}
//! #   fn memcpy_htod(&self, _: DeviceAddr, _: &[u8]) -> Result<()> { Ok(()) }
//! #   fn memcpy_dtoh(&self, _: &mut [u8], _: DeviceAddr) -> Result<()> { Ok(()) }
//! #   fn memcpy_dtod(&self, _: DeviceAddr, _: DeviceAddr, _: u64) -> Result<()> { Ok(()) }
//! #   fn memset(&self, _: DeviceAddr, _: u8, _: u64) -> Result<()> { Ok(()) }
//!     // ... memory, synchronous copies, the other *_async operations ...
//! }
//! # impl MyDevice {
//! #     fn check(&self, _: DeviceAddr, _: u64) -> Result<()> { Ok(()) }
//! # }
//! ```
//!
//! The types work on their own too:
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use devplug_plugin_sdk::worker::{WorkerEvent, WorkerStream};
//! use devplug_plugin_sdk::{Error, EventStatus, Status};
//!
//! let (s1, s2) = (WorkerStream::new("s1")?, WorkerStream::new("s2")?);
//! let log = Arc::new(Mutex::new(Vec::new()));
//! let l = Arc::clone(&log);
//! s1.enqueue(move || {
//!     l.lock().unwrap().push("s1");
//!     Err(Error::invalid_argument("bad job"))
//! })?;
//! let done = WorkerEvent::new();
//! s1.record(&done)?;
//! s2.wait_event(&done)?; // s2's later work runs after s1's first job
//! let l = Arc::clone(&log);
//! s2.enqueue(move || {
//!     l.lock().unwrap().push("s2");
//!     Ok(())
//! })?;
//! s2.synchronize()?;
//! assert_eq!(*log.lock().unwrap(), ["s1", "s2"]);
//! assert_eq!(done.status(), EventStatus::Error); // s1 reached it after its error
//! let e = s1.synchronize().unwrap_err(); // the first error, reported once
//! assert_eq!((e.code(), e.message()), (Status::InvalidArgument, "bad job"));
//! s1.synchronize()?;
//! # Ok::<(), Error>(())
//! ```

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock, Weak};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::{Error, EventStatus, HostCallback, Result};

/// A job as the worker runs it: its argument says whether the stream holds an error (one
/// not yet reported by `synchronize`).
type Job = Box<dyn FnOnce(Option<&Error>) -> Result<()> + Send>;

#[derive(Default)]
struct Progress {
    /// Jobs enqueued so far (the ticket of the latest).
    submitted: u64,
    /// Jobs done so far (in order: job `k` is done when `completed >= k`).
    completed: u64,
    /// The first error not yet reported by `synchronize`.
    error: Option<Error>,
}

/// What a stream shares with its worker, with work of other streams waiting on it, and with
/// its [`WorkerStreams`].
struct Shared {
    name: String,
    progress: Mutex<Progress>,
    changed: Condvar,
    worker: OnceLock<ThreadId>,
}

impl Shared {
    fn on_worker(&self) -> bool {
        self.worker.get() == Some(&thread::current().id())
    }

    /// Blocks until the stream has done its first `ticket` jobs.
    fn wait_for(&self, ticket: u64) {
        let mut p = self.progress.lock();
        while p.completed < ticket {
            self.changed.wait(&mut p);
        }
    }

    fn synchronize(&self) -> Result<()> {
        if self.on_worker() {
            // Waiting here would wait for the job that is waiting.
            return Err(Error::failed_precondition(format!(
                "stream {:?} synchronized from its own worker thread (inside its work or one of \
                 its host callbacks): it would wait for itself",
                self.name
            )));
        }
        let mut p = self.progress.lock();
        let ticket = p.submitted;
        while p.completed < ticket {
            self.changed.wait(&mut p);
        }
        p.error.take().map_or(Ok(()), Err)
    }
}

fn run(shared: &Shared, receiver: &mpsc::Receiver<Job>) {
    // Ends when the stream is dropped (its sender with it) and the queue is empty.
    while let Ok(job) = receiver.recv() {
        // The stream's error so far (cloned only while it holds one), for an event's record.
        let failed = shared.progress.lock().error.clone();
        // A panicking job must not kill the worker (the host would wait forever for the
        // stream): it becomes the stream's error, like an Err.
        let result = catch_unwind(AssertUnwindSafe(|| job(failed.as_ref())))
            .unwrap_or_else(|payload| Err(Error::from_panic(payload)));
        let mut p = shared.progress.lock();
        if let Err(e) = result {
            p.error.get_or_insert(e);
        }
        p.completed += 1;
        shared.changed.notify_all();
    }
}

/// A stream whose work runs in order on a thread of its own.
///
/// Each job is a closure returning [`Result`]; the first `Err` (or panic) becomes the
/// stream's error, which [`synchronize`](WorkerStream::synchronize) returns once and clears.
/// Later jobs still run (the ABI's rule), and events the stream reaches while it holds an
/// error report [`EventStatus::Error`].
///
/// Every method may be called from any thread, concurrently. Dropping the stream runs what is
/// queued, then joins the worker (see the [module docs](self) for a drop from the worker
/// itself).
pub struct WorkerStream {
    shared: Arc<Shared>,
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl WorkerStream {
    /// Starts a stream; `name` names its worker thread (Linux keeps the first 15 bytes) and
    /// appears in its messages.
    ///
    /// Errors: `RESOURCE_EXHAUSTED` when the thread cannot be started.
    pub fn new(name: impl Into<String>) -> Result<WorkerStream> {
        let name = name.into();
        let shared = Arc::new(Shared {
            name: name.clone(),
            progress: Mutex::new(Progress::default()),
            changed: Condvar::new(),
            worker: OnceLock::new(),
        });
        let (sender, receiver) = mpsc::channel::<Job>();
        let worker_shared = Arc::clone(&shared);
        let worker = thread::Builder::new()
            .name(name)
            .spawn(move || run(&worker_shared, &receiver))
            .map_err(|e| {
                Error::resource_exhausted(format!("cannot start a stream worker thread: {e}"))
            })?;
        // Set before any job can be enqueued (no one else has the stream yet).
        let _ = shared.worker.set(worker.thread().id());
        Ok(WorkerStream {
            shared,
            sender: Mutex::new(Some(sender)),
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The name given to [`new`](WorkerStream::new).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Whether the calling thread is this stream's worker (inside one of its jobs or host
    /// callbacks).
    pub fn is_worker_thread(&self) -> bool {
        self.shared.on_worker()
    }

    /// Enqueues `job`, to run on the worker after all earlier work of the stream.
    ///
    /// An `Err` it returns, or a panic, becomes the stream's error if the stream holds none;
    /// later work still runs. `job` runs with no lock of the stream held, so it may call
    /// anything (another stream's methods, a [`HostCallback`]), except
    /// [`synchronize`](WorkerStream::synchronize) of this stream, which would wait for
    /// itself (it fails instead).
    ///
    /// Check what can be checked **before** enqueuing (a bad address should fail the
    /// `*_async` call itself, not the stream).
    ///
    /// Errors: `UNAVAILABLE` if the worker is gone (it is not, while the stream lives); the
    /// job is then dropped without running.
    pub fn enqueue(&self, job: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
        self.submit(Box::new(move |_| job())).map(drop)
    }

    /// Enqueues `job`; returns its ticket (the stream has done it when `completed >=
    /// ticket`). If it cannot be enqueued it is dropped, not run.
    fn submit(&self, job: Job) -> Result<u64> {
        // Ticket order = queue order: both under the progress lock.
        let mut p = self.shared.progress.lock();
        let sender = self.sender.lock();
        match sender.as_ref().map(|s| s.send(job)) {
            Some(Ok(())) => {
                p.submitted += 1;
                Ok(p.submitted)
            }
            _ => Err(Error::unavailable(format!(
                "stream {:?}: its worker thread is gone",
                self.shared.name
            ))),
        }
    }

    /// [`Device::host_callback`](crate::Device::host_callback): enqueues
    /// [`callback.call()`](HostCallback::call), so the host's function runs exactly once, on
    /// the worker, after all earlier work, holding no lock, and later work waits for it to
    /// return. An `Err` means it was not enqueued (and will never run).
    pub fn host_callback(&self, callback: HostCallback) -> Result<()> {
        self.enqueue(move || {
            callback.call();
            Ok(())
        })
    }

    /// [`Device::synchronize_stream`](crate::Device::synchronize_stream): blocks until the
    /// work enqueued so far is done; returns the stream's first error and clears it.
    ///
    /// Errors: the stream's error; `FAILED_PRECONDITION` when called from the stream's own
    /// worker (inside one of its jobs or host callbacks), where it would wait for itself.
    pub fn synchronize(&self) -> Result<()> {
        self.shared.synchronize()
    }

    /// [`Device::stream_wait_stream`](crate::Device::stream_wait_stream): later work on this
    /// stream waits until `other` has done the work enqueued on it so far. `other` may be
    /// this stream (nothing to do) or a stream of another device: any two `WorkerStream`s
    /// can wait for each other. Waiting does not pass `other`'s error on.
    pub fn wait_stream(&self, other: &WorkerStream) -> Result<()> {
        if Arc::ptr_eq(&self.shared, &other.shared) {
            return Ok(());
        }
        let ticket = other.shared.progress.lock().submitted;
        if ticket == 0 {
            return Ok(());
        }
        let other = Arc::clone(&other.shared);
        self.enqueue(move || {
            other.wait_for(ticket);
            Ok(())
        })
    }

    /// [`Device::record_event`](crate::Device::record_event): marks the current end of this
    /// stream in `event` (replacing its earlier record). The event is pending until the
    /// stream gets there, then complete, or [`EventStatus::Error`] if the stream holds an
    /// error then.
    pub fn record(&self, event: &WorkerEvent) -> Result<()> {
        let generation = event.begin_record();
        let marker = event.clone();
        let result = self.submit(Box::new(move |failed| {
            marker.reach(generation, failed.cloned(), Some(Instant::now()));
            Ok(())
        }));
        if let Err(e) = &result {
            // Never reached by the stream: do not leave the event pending forever.
            event.reach(generation, Some(e.clone()), None);
        }
        result.map(drop)
    }

    /// [`Device::stream_wait_event`](crate::Device::stream_wait_event): later work on this
    /// stream waits until `event`, as recorded now, is reached (nothing to wait for if it was
    /// never recorded). Events of any `WorkerStream` work, of any device.
    pub fn wait_event(&self, event: &WorkerEvent) -> Result<()> {
        let generation = event.0.state.lock().recorded;
        if generation == 0 {
            return Ok(());
        }
        let event = event.clone();
        self.enqueue(move || {
            event.wait_for(generation);
            Ok(())
        })
    }
}

impl Drop for WorkerStream {
    fn drop(&mut self) {
        // Closing the channel ends the worker once it has run what is queued.
        self.sender.lock().take();
        if let Some(worker) = self.worker.lock().take() {
            // Dropped from its own worker (inside a host callback): the thread ends by itself
            // once this job returns; it cannot join itself.
            if worker.thread().id() != thread::current().id() {
                let _ = worker.join();
            }
        }
    }
}

impl fmt::Debug for WorkerStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.shared.progress.lock();
        f.debug_struct("WorkerStream")
            .field("name", &self.shared.name)
            .field("submitted", &p.submitted)
            .field("completed", &p.completed)
            .field("error", &p.error)
            .finish()
    }
}

#[derive(Default)]
struct EventState {
    /// Generation of the latest record (0: never recorded).
    recorded: u64,
    /// Highest generation reached.
    reached: u64,
    /// The stream's error when it reached `reached`, if it held one.
    error: Option<Error>,
    /// When the stream reached `reached` (`None`: not reached by a stream).
    reached_at: Option<Instant>,
}

#[derive(Default)]
struct EventInner {
    state: Mutex<EventState>,
    changed: Condvar,
}

/// An event: a marker in a [`WorkerStream`], re-recordable (the latest record counts).
///
/// Never recorded, it is [`EventStatus::Complete`] (the ABI's rule). Clones share the same
/// event.
#[derive(Clone, Default)]
pub struct WorkerEvent(Arc<EventInner>);

impl WorkerEvent {
    /// A new event, never recorded (complete).
    pub fn new() -> WorkerEvent {
        WorkerEvent::default()
    }

    fn begin_record(&self) -> u64 {
        let mut s = self.0.state.lock();
        s.recorded += 1;
        s.recorded
    }

    /// The stream reached record `generation` (holding `error` or none) at `at`.
    fn reach(&self, generation: u64, error: Option<Error>, at: Option<Instant>) {
        let mut s = self.0.state.lock();
        // Records on different streams may be reached out of order: the latest counts.
        if generation >= s.reached {
            s.reached = generation;
            s.error = error;
            s.reached_at = at;
        }
        self.0.changed.notify_all();
    }

    fn wait_for(&self, generation: u64) {
        let mut s = self.0.state.lock();
        while s.reached < generation {
            self.0.changed.wait(&mut s);
        }
    }

    /// [`Device::event_status`](crate::Device::event_status): pending until its stream
    /// reaches the latest record; then complete, or error if the stream held an error then.
    pub fn status(&self) -> EventStatus {
        let s = self.0.state.lock();
        if s.reached < s.recorded {
            EventStatus::Pending
        } else if s.error.is_some() {
            EventStatus::Error
        } else {
            EventStatus::Complete
        }
    }

    /// [`Device::event_synchronize`](crate::Device::event_synchronize): blocks until the
    /// event, as recorded now, is reached. Errors: the stream's error when the stream failed
    /// before reaching it, as the ABI asks (its code; its message after "the stream failed
    /// before reaching the event: "); the stream still reports it too, once, from its own
    /// `synchronize`.
    pub fn synchronize(&self) -> Result<()> {
        let generation = self.0.state.lock().recorded;
        self.wait_for(generation);
        let s = self.0.state.lock();
        match &s.error {
            Some(e) if s.reached >= generation => Err(Error::new(
                e.code(),
                format!(
                    "the stream failed before reaching the event: {}",
                    e.message()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// [`Device::event_elapsed_ns`](crate::Device::event_elapsed_ns): nanoseconds from when
    /// the stream reached `self` to when a stream reached `end` (negative when `end` was
    /// reached first), each from its latest record.
    ///
    /// Errors: `FAILED_PRECONDITION` when either event was never recorded, is still pending,
    /// or was reached after its stream failed.
    pub fn elapsed_ns(&self, end: &WorkerEvent) -> Result<i64> {
        let start = self.reached_at("start")?;
        let end = end.reached_at("end")?;
        Ok(if end >= start {
            i64::try_from(end.duration_since(start).as_nanos()).unwrap_or(i64::MAX)
        } else {
            -i64::try_from(start.duration_since(end).as_nanos()).unwrap_or(i64::MAX)
        })
    }

    fn reached_at(&self, which: &str) -> Result<Instant> {
        let s = self.0.state.lock();
        let why = if s.recorded == 0 {
            "was never recorded"
        } else if s.reached < s.recorded {
            "is still pending"
        } else if s.error.is_some() {
            "was reached after its stream failed"
        } else {
            return s.reached_at.ok_or_else(|| {
                Error::failed_precondition(format!("the {which} event was never reached"))
            });
        };
        Err(Error::failed_precondition(format!(
            "the {which} event {why}"
        )))
    }
}

impl fmt::Debug for WorkerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WorkerEvent").field(&self.status()).finish()
    }
}

/// The streams of one device, for
/// [`Device::synchronize_all`](crate::Device::synchronize_all).
///
/// [`create`](WorkerStreams::create) starts a stream and remembers it (weakly: a dropped
/// stream is forgotten); [`synchronize_all`](WorkerStreams::synchronize_all) synchronizes
/// every live one.
pub struct WorkerStreams {
    name: String,
    next: AtomicU64,
    streams: Mutex<Vec<Weak<Shared>>>,
}

impl WorkerStreams {
    /// No streams yet; `name` (e.g. the device's, `"mydev:0"`) names their threads
    /// `<name>-stream<n>`.
    pub fn new(name: impl Into<String>) -> WorkerStreams {
        WorkerStreams {
            name: name.into(),
            next: AtomicU64::new(0),
            streams: Mutex::new(Vec::new()),
        }
    }

    /// [`Device::create_stream`](crate::Device::create_stream): starts a
    /// [`WorkerStream`] named `<name>-stream<n>` and remembers it.
    pub fn create(&self) -> Result<WorkerStream> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let stream = WorkerStream::new(format!("{}-stream{n}", self.name))?;
        let mut streams = self.streams.lock();
        streams.retain(|s| s.strong_count() > 0); // forget dropped streams
        streams.push(Arc::downgrade(&stream.shared));
        Ok(stream)
    }

    /// How many streams made by [`create`](WorkerStreams::create) are alive.
    pub fn len(&self) -> usize {
        self.live().len()
    }

    /// Whether no stream made by [`create`](WorkerStreams::create) is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn live(&self) -> Vec<Arc<Shared>> {
        self.streams
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// [`Device::synchronize_all`](crate::Device::synchronize_all): synchronizes every live
    /// stream; returns the first error met (every stream's error is cleared).
    ///
    /// Called from the worker of one of these streams (inside its work or a host callback),
    /// it would wait for itself: it fails with `FAILED_PRECONDITION` and changes nothing.
    pub fn synchronize_all(&self) -> Result<()> {
        let streams = self.live();
        if let Some(own) = streams.iter().find(|s| s.on_worker()) {
            return Err(Error::failed_precondition(format!(
                "synchronize_all called from the worker thread of stream {:?} (inside its work \
                 or one of its host callbacks): it would wait for itself",
                own.name
            )));
        }
        let mut first = Ok(());
        for s in streams {
            let r = s.synchronize();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl fmt::Debug for WorkerStreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerStreams")
            .field("name", &self.name)
            .field("live", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
