//! The CPU device's streams and events.
//!
//! A stream the host creates is a [`WorkQueue`]: an ordered queue run by its own worker
//! thread. The default stream is [`CpuStream::Inline`]: work runs on the calling thread at
//! once, which is what makes cheap eager ops possible. Events are generation counters: a
//! record bumps the generation, and the queue marks that generation complete when it gets
//! there.
//!
//! A queue's worker, and a thread waiting for a queue, poll for [`SPIN`] before they sleep: a
//! task that arrives, or completes, within it is taken up without a wake-up (a futex call and a
//! context switch on each side, ≈ 5 µs apiece). Who sleeps is known, so nobody is woken who
//! is not asleep.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

type Task = Box<dyn FnOnce() + Send + 'static>;

/// A CPU stream: inline (the default stream) or an asynchronous ordered queue.
pub enum CpuStream {
    Inline,
    Queue(Arc<WorkQueue>),
}

impl CpuStream {
    /// Runs `task` in stream order.
    pub fn submit(&self, task: Task) -> Result<()> {
        match self {
            CpuStream::Inline => {
                task();
                Ok(())
            }
            CpuStream::Queue(q) => q.submit(task),
        }
    }

    pub fn synchronize(&self) {
        if let CpuStream::Queue(q) = self {
            q.synchronize();
        }
    }
}

/// How long a queue's worker and a thread waiting for a queue poll before they sleep.
const SPIN: Duration = Duration::from_micros(20);

/// Polls `ready` for up to [`SPIN`]; whether it became true.
fn spin_until(mut ready: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        if ready() {
            return true;
        }
        polls = polls.wrapping_add(1);
        if polls.is_multiple_of(64) {
            if start.elapsed() >= SPIN {
                return false;
            }
            // Let a thread that shares this core run (the one that would make us ready).
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
}

struct QueueState {
    tasks: VecDeque<Task>,
    submitted: u64,
    completed: u64,
    shutting_down: bool,
    /// The worker sleeps on `work`: a submit must wake it.
    worker_asleep: bool,
    /// Threads sleeping on `done`.
    waiters: usize,
}

struct QueueShared {
    state: Mutex<QueueState>,
    /// Signals the worker that a task arrived (or shutdown).
    work: Condvar,
    /// Signals waiters that `completed` advanced.
    done: Condvar,
    /// Copies of `submitted` and `completed`, polled without the lock.
    submitted: AtomicU64,
    completed: AtomicU64,
}

/// An ordered queue with one worker thread.
pub struct WorkQueue {
    shared: Arc<QueueShared>,
    worker: Option<JoinHandle<()>>,
}

impl WorkQueue {
    pub fn new(name: String) -> Result<WorkQueue> {
        let shared = Arc::new(QueueShared {
            state: Mutex::new(QueueState {
                tasks: VecDeque::new(),
                submitted: 0,
                completed: 0,
                shutting_down: false,
                worker_asleep: false,
                waiters: 0,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name(name)
            .spawn(move || run_worker(&s))
            .map_err(|e| Error::resource_exhausted(format!("cannot start a stream thread: {e}")))?;
        Ok(WorkQueue {
            shared,
            worker: Some(worker),
        })
    }

    pub fn submit(&self, task: Task) -> Result<()> {
        let mut st = self.shared.state.lock();
        st.tasks.push_back(task);
        st.submitted += 1;
        self.shared.submitted.store(st.submitted, Ordering::Release);
        let wake = st.worker_asleep;
        drop(st);
        if wake {
            self.shared.work.notify_one();
        }
        Ok(())
    }

    /// Blocks until every task submitted before the call has run.
    pub fn synchronize(&self) {
        let target = self.shared.submitted.load(Ordering::Acquire);
        let reached = || self.shared.completed.load(Ordering::Acquire) >= target;
        if spin_until(reached) {
            return;
        }
        let mut st = self.shared.state.lock();
        st.waiters += 1;
        while st.completed < target {
            self.shared.done.wait(&mut st);
        }
        st.waiters -= 1;
    }
}

fn run_worker(shared: &QueueShared) {
    loop {
        let task = {
            let mut st = shared.state.lock();
            loop {
                if let Some(t) = st.tasks.pop_front() {
                    break t;
                }
                if st.shutting_down {
                    return;
                }
                // Poll a while for the next task before sleeping.
                let seen = st.submitted;
                drop(st);
                spin_until(|| shared.submitted.load(Ordering::Acquire) != seen);
                st = shared.state.lock();
                if st.tasks.is_empty() && !st.shutting_down {
                    st.worker_asleep = true;
                    while st.tasks.is_empty() && !st.shutting_down {
                        shared.work.wait(&mut st);
                    }
                    st.worker_asleep = false;
                }
            }
        };
        // A panicking task must not take the stream down; its panic is reported by the
        // task itself where it matters (tasks are runtime closures that do not panic).
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
        let mut st = shared.state.lock();
        st.completed += 1;
        shared.completed.store(st.completed, Ordering::Release);
        let wake = st.waiters > 0;
        drop(st);
        if wake {
            shared.done.notify_all();
        }
    }
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        // A queue dropped by its own worker (a callback that held the last reference) cannot
        // wait for itself: it lets the worker drain the queue and end on its own.
        let on_worker = self
            .worker
            .as_ref()
            .is_some_and(|w| w.thread().id() == std::thread::current().id());
        if !on_worker {
            self.synchronize();
        }
        self.shared.state.lock().shutting_down = true;
        self.shared.work.notify_all();
        if let Some(w) = self.worker.take() {
            if !on_worker {
                let _ = w.join();
            }
        }
    }
}

struct EventState {
    /// Bumped by each record.
    recorded: u64,
    /// The highest generation reached.
    reached: u64,
    /// When the stream reached generation `reached`.
    reached_at: Option<Instant>,
}

/// A CPU event.
#[derive(Clone)]
pub struct CpuEvent {
    inner: Arc<(Mutex<EventState>, Condvar)>,
}

impl Default for CpuEvent {
    fn default() -> Self {
        CpuEvent {
            inner: Arc::new((
                Mutex::new(EventState {
                    recorded: 0,
                    reached: 0,
                    reached_at: None,
                }),
                Condvar::new(),
            )),
        }
    }
}

impl CpuEvent {
    /// Records the event on `stream`.
    pub fn record(&self, stream: &CpuStream) -> Result<()> {
        let generation = {
            let mut st = self.inner.0.lock();
            st.recorded += 1;
            st.recorded
        };
        let me = self.clone();
        stream.submit(Box::new(move || me.reach(generation)))
    }

    fn reach(&self, generation: u64) {
        let now = Instant::now(); // not under the lock waiters and recorders take
        let mut st = self.inner.0.lock();
        if generation > st.reached {
            st.reached = generation;
            st.reached_at = Some(now);
        }
        drop(st);
        self.inner.1.notify_all();
    }

    pub fn is_complete(&self) -> bool {
        let st = self.inner.0.lock();
        st.reached >= st.recorded
    }

    /// When the stream reached the latest record: `FAILED_PRECONDITION` when the event was
    /// never recorded or the latest record is not reached yet.
    pub fn reached_at(&self) -> Result<Instant> {
        let st = self.inner.0.lock();
        match st.reached_at {
            _ if st.recorded == 0 => {
                Err(Error::failed_precondition("the event was never recorded"))
            }
            Some(at) if st.reached >= st.recorded => Ok(at),
            _ => Err(Error::failed_precondition(
                "the event is still pending: its stream has not reached the latest record",
            )),
        }
    }

    /// Blocks until the generation recorded last (at the time of the call) is reached.
    pub fn synchronize(&self) {
        let mut st = self.inner.0.lock();
        let target = st.recorded;
        self.wait_for(&mut st, target);
    }

    fn wait_for(&self, st: &mut parking_lot::MutexGuard<'_, EventState>, generation: u64) {
        while st.reached < generation {
            self.inner.1.wait(st);
        }
    }

    /// Makes `stream` wait for the generation recorded last at the time of the call.
    pub fn wait_on(&self, stream: &CpuStream) -> Result<()> {
        let target = self.inner.0.lock().recorded;
        let me = self.clone();
        stream.submit(Box::new(move || {
            let mut st = me.inner.0.lock();
            me.wait_for(&mut st, target);
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn queue_runs_tasks_in_order_off_thread() {
        let q = CpuStream::Queue(Arc::new(WorkQueue::new("t".into()).unwrap()));
        let log = Arc::new(Mutex::new(Vec::new()));
        let caller = std::thread::current().id();
        for i in 0..100 {
            let log = log.clone();
            q.submit(Box::new(move || {
                assert_ne!(std::thread::current().id(), caller);
                log.lock().push(i);
            }))
            .unwrap();
        }
        q.synchronize();
        assert_eq!(*log.lock(), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn inline_stream_runs_at_once() {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        CpuStream::Inline
            .submit(Box::new(move || {
                h.fetch_add(1, Ordering::SeqCst);
            }))
            .unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn event_orders_two_queues() {
        let a = CpuStream::Queue(Arc::new(WorkQueue::new("a".into()).unwrap()));
        let b = CpuStream::Queue(Arc::new(WorkQueue::new("b".into()).unwrap()));
        let value = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        // a: wait for the gate, then write 7, then record.
        let g = gate.clone();
        a.submit(Box::new(move || {
            let mut open = g.0.lock();
            while !*open {
                g.1.wait(&mut open);
            }
        }))
        .unwrap();
        let v = value.clone();
        a.submit(Box::new(move || v.store(7, Ordering::SeqCst)))
            .unwrap();
        let ev = CpuEvent::default();
        assert!(ev.is_complete(), "a never-recorded event is complete");
        ev.record(&a).unwrap();
        assert!(!ev.is_complete());
        ev.wait_on(&b).unwrap();
        let seen = Arc::new(AtomicUsize::new(99));
        let (v, s) = (value.clone(), seen.clone());
        b.submit(Box::new(move || {
            s.store(v.load(Ordering::SeqCst), Ordering::SeqCst)
        }))
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(seen.load(Ordering::SeqCst), 99, "b must still be waiting");
        *gate.0.lock() = true;
        gate.1.notify_all();
        b.synchronize();
        assert_eq!(seen.load(Ordering::SeqCst), 7);
        ev.synchronize();
        assert!(ev.is_complete());
    }

    #[test]
    fn a_panicking_task_does_not_stop_the_queue() {
        let q = WorkQueue::new("p".into()).unwrap();
        q.submit(Box::new(|| panic!("task panic"))).unwrap();
        let hit = Arc::new(AtomicUsize::new(0));
        let h = hit.clone();
        q.submit(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
        q.synchronize();
        assert_eq!(hit.load(Ordering::SeqCst), 1);
    }
}
