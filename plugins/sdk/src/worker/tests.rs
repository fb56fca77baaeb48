//! Tests of the worker streams and events: directly, and as a device's streams driven by the
//! fake host of [`crate::testing`].

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use super::{WorkerEvent, WorkerStream, WorkerStreams};
use crate::testing::TestHost;
use crate::{
    Device, DeviceAddr, Error, EventStatus, Host, HostBuf, HostBufMut, HostCallback, Platform,
    Result, Status,
};

/// Long enough for a worker that is not held back to run what it was given.
const SETTLE: Duration = Duration::from_millis(50);

/// Holds `stream` on a job until the returned sender is used (or dropped).
fn gate(stream: &WorkerStream) -> mpsc::Sender<()> {
    let (release, wait) = mpsc::channel::<()>();
    stream
        .enqueue(move || {
            let _ = wait.recv();
            Ok(())
        })
        .expect("gate");
    release
}

fn pushes(log: &Arc<Mutex<Vec<u32>>>, value: u32) -> impl FnOnce() -> Result<()> + Send + 'static {
    let log = Arc::clone(log);
    move || {
        log.lock().push(value);
        Ok(())
    }
}

#[test]
fn jobs_run_in_order_after_the_call_returns() {
    let s = WorkerStream::new("order").expect("stream");
    let release = gate(&s);
    let log = Arc::new(Mutex::new(Vec::new()));
    // From several threads at once: each thread's jobs keep their order.
    thread::scope(|scope| {
        for t in 0..4u32 {
            let (s, log) = (&s, &log);
            scope.spawn(move || {
                for i in 0..250u32 {
                    s.enqueue(pushes(log, t * 1000 + i)).expect("enqueue");
                }
            });
        }
    });
    thread::sleep(SETTLE);
    assert!(log.lock().is_empty(), "nothing runs before the gate opens");
    release.send(()).expect("release");
    s.synchronize().expect("synchronize");
    let log = log.lock().clone();
    assert_eq!(log.len(), 1000, "synchronize waited for all of it");
    for t in 0..4u32 {
        let mine: Vec<u32> = log.iter().copied().filter(|v| v / 1000 == t).collect();
        assert_eq!(mine, (0..250).map(|i| t * 1000 + i).collect::<Vec<_>>());
    }
}

#[test]
fn the_first_error_is_kept_reported_once_and_later_jobs_still_run() {
    let s = WorkerStream::new("errors").expect("stream");
    let ran = Arc::new(AtomicUsize::new(0));
    let r = Arc::clone(&ran);
    s.enqueue(|| Err(Error::invalid_argument("first")))
        .expect("enqueue");
    s.enqueue(|| Err(Error::resource_exhausted("second")))
        .expect("enqueue");
    s.enqueue(move || {
        r.fetch_add(1, Ordering::SeqCst);
        Ok(())
    })
    .expect("enqueue");
    let e = s.synchronize().expect_err("the stream failed");
    assert_eq!((e.code(), e.message()), (Status::InvalidArgument, "first"));
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "the job after the errors ran"
    );
    s.synchronize().expect("reported once, then cleared");
    // A new error after the clear is kept again.
    s.enqueue(|| Err(Error::internal("third")))
        .expect("enqueue");
    assert_eq!(s.synchronize().expect_err("again").message(), "third");
    s.synchronize().expect("clear");
}

#[test]
fn an_event_reached_after_an_error_reports_error() {
    let s = WorkerStream::new("events").expect("stream");
    let ev = WorkerEvent::new();
    assert_eq!(ev.status(), EventStatus::Complete, "never recorded");
    ev.synchronize().expect("nothing to wait for");
    let before = WorkerEvent::new();

    let release = gate(&s);
    s.record(&before).expect("record");
    s.enqueue(|| Err(Error::internal("broken")))
        .expect("enqueue");
    s.record(&ev).expect("record");
    assert_eq!(ev.status(), EventStatus::Pending);
    assert_eq!(before.status(), EventStatus::Pending);
    release.send(()).expect("release");
    // Reached after the error: its synchronize returns the stream's error (the ABI's rule).
    let e = ev.synchronize().expect_err("event synchronize");
    assert_eq!(
        (e.code(), e.message()),
        (
            Status::Internal,
            "the stream failed before reaching the event: broken"
        )
    );
    before.synchronize().expect("reached before the error");
    assert_eq!(
        before.status(),
        EventStatus::Complete,
        "reached before the error"
    );
    assert_eq!(ev.status(), EventStatus::Error, "reached after the error");
    assert!(s.synchronize().is_err());
    // Cleared: a new record completes; the latest record counts.
    s.record(&ev).expect("record");
    s.synchronize().expect("clean");
    assert_eq!(ev.status(), EventStatus::Complete);
}

/// `stream.synchronize()`, failing the test instead of hanging it when the stream never
/// gets there (a worker killed by a panic).
fn synchronize_within(stream: &Arc<WorkerStream>, limit: Duration) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    let s = Arc::clone(stream);
    thread::spawn(move || {
        let _ = tx.send(s.synchronize());
    });
    rx.recv_timeout(limit)
        .expect("synchronize returns (the worker is alive)")
}

#[test]
fn a_panicking_job_becomes_the_streams_error_and_the_stream_goes_on() {
    let s = Arc::new(WorkerStream::new("panics").expect("stream"));
    let log = Arc::new(Mutex::new(Vec::new()));
    s.enqueue(pushes(&log, 1)).expect("enqueue");
    s.enqueue(|| panic!("job exploded")).expect("enqueue");
    s.enqueue(pushes(&log, 2)).expect("enqueue");
    let ev = WorkerEvent::new();
    s.record(&ev).expect("record");
    let e = synchronize_within(&s, Duration::from_secs(10))
        .expect_err("the panic is the stream's error");
    assert_eq!(
        (e.code(), e.message()),
        (Status::Internal, "panicked: job exploded")
    );
    assert_eq!(
        *log.lock(),
        [1, 2],
        "the worker survived and ran later work"
    );
    assert_eq!(ev.status(), EventStatus::Error);
    s.enqueue(pushes(&log, 3)).expect("enqueue");
    synchronize_within(&s, Duration::from_secs(10)).expect("the stream works again");
    assert_eq!(*log.lock(), [1, 2, 3]);
}

#[test]
fn wait_stream_waits_for_the_other_streams_work_so_far_only() {
    let (s1, s2) = (
        WorkerStream::new("s1").unwrap(),
        WorkerStream::new("s2").unwrap(),
    );
    let release = gate(&s1);
    let done = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&done);
    s1.enqueue(move || {
        d.store(true, Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    s2.wait_stream(&s1).expect("wait");
    // Work enqueued on s1 after the wait is not waited for: hold s1 again behind it.
    let later = gate(&s1);
    let seen = Arc::new(Mutex::new(None));
    let (d, sn) = (Arc::clone(&done), Arc::clone(&seen));
    s2.enqueue(move || {
        *sn.lock() = Some(d.load(Ordering::SeqCst));
        Ok(())
    })
    .unwrap();
    thread::sleep(SETTLE);
    assert_eq!(*seen.lock(), None, "s2 is held by s1's gate");
    release.send(()).unwrap();
    s2.synchronize()
        .expect("s2 finishes although s1 is held by later work");
    assert_eq!(*seen.lock(), Some(true), "s2's job ran after s1's");
    // A stream waiting on itself, or on an empty stream, does not block.
    s2.wait_stream(&s2).expect("self");
    let empty = WorkerStream::new("empty").unwrap();
    s2.wait_stream(&empty).expect("empty");
    s2.synchronize().expect("no deadlock");
    // The wait does not pass s1's error on.
    s1.enqueue(|| Err(Error::internal("s1 failed"))).unwrap();
    s2.wait_stream(&s1).unwrap();
    later.send(()).unwrap();
    s2.synchronize().expect("s1's error stays s1's");
    assert!(s1.synchronize().is_err());
}

#[test]
fn wait_event_waits_for_the_record_as_of_the_call() {
    let (s1, s2) = (
        WorkerStream::new("s1").unwrap(),
        WorkerStream::new("s2").unwrap(),
    );
    let ev = WorkerEvent::new();
    s2.wait_event(&ev)
        .expect("never recorded: nothing to wait for");
    s2.synchronize().expect("not blocked");

    let release = gate(&s1);
    let log = Arc::new(Mutex::new(Vec::new()));
    s1.enqueue(pushes(&log, 1)).unwrap();
    s1.record(&ev).unwrap();
    s2.wait_event(&ev).unwrap();
    s2.enqueue(pushes(&log, 2)).unwrap();
    // A new record (on a held stream) does not change what s2 waits for...
    let again = gate(&s1);
    s1.record(&ev).unwrap();
    thread::sleep(SETTLE);
    assert!(log.lock().is_empty());
    release.send(()).unwrap();
    s2.synchronize()
        .expect("s2 waited for the first record only");
    assert_eq!(*log.lock(), [1, 2]);
    // ...but the event's status follows the latest record.
    assert_eq!(ev.status(), EventStatus::Pending);
    again.send(()).unwrap();
    ev.synchronize().unwrap();
    assert_eq!(ev.status(), EventStatus::Complete);
}

#[test]
fn synchronize_from_the_streams_own_worker_fails_instead_of_deadlocking() {
    let s = Arc::new(WorkerStream::new("self").unwrap());
    let streams = Arc::new(WorkerStreams::new("dev"));
    let other = streams.create().unwrap();
    let (tx, rx) = mpsc::channel();
    let (s2, st) = (Arc::clone(&s), Arc::clone(&streams));
    other
        .enqueue(move || {
            tx.send((
                s2.is_worker_thread(),
                s2.synchronize(),
                st.synchronize_all(),
            ))
            .unwrap();
            Ok(())
        })
        .unwrap();
    let (on_worker, own, all) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("no deadlock");
    assert!(!on_worker);
    own.expect("another stream's worker may synchronize this one");
    assert_eq!(all.expect_err("its own").code(), Status::FailedPrecondition);
    let s2 = Arc::clone(&s);
    let (tx, rx) = mpsc::channel();
    s.enqueue(move || {
        tx.send((s2.is_worker_thread(), s2.synchronize())).unwrap();
        Ok(())
    })
    .unwrap();
    let (on_worker, own) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("no deadlock");
    assert!(on_worker);
    assert_eq!(own.expect_err("itself").code(), Status::FailedPrecondition);
    s.synchronize().expect("that was not the stream's error");
}

#[test]
fn dropping_a_stream_runs_its_queued_work_also_from_its_own_worker() {
    let s = WorkerStream::new("drop").unwrap();
    let release = gate(&s);
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..10 {
        let r = Arc::clone(&ran);
        s.enqueue(move || {
            r.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
        .unwrap();
    }
    let dropper = thread::spawn(move || drop(s));
    thread::sleep(SETTLE);
    release.send(()).unwrap();
    dropper.join().unwrap();
    assert_eq!(
        ran.load(Ordering::SeqCst),
        10,
        "the drop joined after the queue"
    );

    // Dropped inside one of its own jobs: no self-join, the queue still drains.
    let holder = Arc::new(Mutex::new(Some(WorkerStream::new("self-drop").unwrap())));
    let (tx, rx) = mpsc::channel();
    {
        let guard = holder.lock();
        let s = guard.as_ref().unwrap();
        let h = Arc::clone(&holder);
        s.enqueue(move || {
            drop(h.lock().take());
            Ok(())
        })
        .unwrap();
        s.enqueue(move || {
            tx.send(()).unwrap();
            Ok(())
        })
        .unwrap();
    }
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the job after the drop ran");
    assert!(holder.lock().is_none());
}

#[test]
fn synchronize_all_covers_live_streams_and_returns_the_first_error() {
    let streams = WorkerStreams::new("dev");
    let (a, b) = (streams.create().unwrap(), streams.create().unwrap());
    assert_eq!(a.name(), "dev-stream0");
    assert_eq!(b.name(), "dev-stream1");
    let dropped = streams.create().unwrap();
    assert_eq!(streams.len(), 3);
    drop(dropped);
    assert_eq!(streams.len(), 2, "a dropped stream is forgotten");
    let release = gate(&b);
    let done = Arc::new(AtomicBool::new(false));
    let d = Arc::clone(&done);
    b.enqueue(move || {
        d.store(true, Ordering::SeqCst);
        Err(Error::internal("b failed"))
    })
    .unwrap();
    a.enqueue(|| Err(Error::invalid_argument("a failed")))
        .unwrap();
    let r = thread::scope(|scope| {
        let h = scope.spawn(|| streams.synchronize_all());
        thread::sleep(SETTLE);
        assert!(!h.is_finished(), "waits for b");
        release.send(()).unwrap();
        h.join().unwrap()
    });
    assert!(done.load(Ordering::SeqCst));
    assert_eq!(r.expect_err("errors").message(), "a failed");
    a.synchronize().expect("cleared");
    b.synchronize().expect("cleared too");
    streams.synchronize_all().expect("clean");
}

#[test]
fn events_are_timed_from_their_latest_record() {
    let s = WorkerStream::new("timing").unwrap();
    let (start, end) = (WorkerEvent::new(), WorkerEvent::new());
    let e = start.elapsed_ns(&end).expect_err("never recorded");
    assert_eq!(e.code(), Status::FailedPrecondition);
    assert_eq!(e.message(), "the start event was never recorded");
    s.record(&start).unwrap();
    s.enqueue(|| {
        thread::sleep(Duration::from_millis(20));
        Ok(())
    })
    .unwrap();
    s.record(&end).unwrap();
    s.synchronize().unwrap();
    let ns = start.elapsed_ns(&end).expect("elapsed");
    assert!(ns >= 20_000_000, "{ns}");
    assert_eq!(end.elapsed_ns(&start).unwrap(), -ns);
    assert_eq!(start.elapsed_ns(&start).unwrap(), 0);

    let release = gate(&s);
    s.record(&end).unwrap();
    let e = start.elapsed_ns(&end).expect_err("pending");
    assert_eq!(e.message(), "the end event is still pending");
    release.send(()).unwrap();
    s.enqueue(|| Err(Error::internal("x"))).unwrap();
    s.record(&start).unwrap();
    s.synchronize().unwrap_err();
    let e = start.elapsed_ns(&end).expect_err("error");
    assert_eq!(
        e.message(),
        "the start event was reached after its stream failed"
    );
}

// ---- as a device's streams, through the fake host --------------------------------------------

const BASE: u64 = 0x1000;

/// A device of host memory: one arena with a bump allocator, the streams and events of this
/// module.
struct WDevice {
    memory: Arc<Mutex<Vec<u8>>>,
    next: Mutex<u64>,
    streams: WorkerStreams,
}

impl WDevice {
    fn range(memory: &[u8], addr: DeviceAddr, size: u64) -> Result<std::ops::Range<usize>> {
        let start = addr.get().checked_sub(BASE);
        match start.and_then(|s| s.checked_add(size).map(|e| (s, e))) {
            Some((s, e)) if e <= memory.len() as u64 => Ok(s as usize..e as usize),
            _ => Err(Error::invalid_argument(format!(
                "[{addr}, +{size}) is not memory"
            ))),
        }
    }
}

impl Device for WDevice {
    type Stream = WorkerStream;
    type Event = WorkerEvent;

    fn allocate(&self, size: u64) -> Result<DeviceAddr> {
        let mut next = self.next.lock();
        let addr = BASE + *next;
        if *next + size > self.memory.lock().len() as u64 {
            return Err(Error::resource_exhausted("full"));
        }
        *next += size.div_ceil(256) * 256;
        Ok(DeviceAddr(addr))
    }
    fn deallocate(&self, _: DeviceAddr, _: u64) {}
    fn memcpy_htod(&self, dst: DeviceAddr, src: &[u8]) -> Result<()> {
        let mut m = self.memory.lock();
        let r = Self::range(&m, dst, src.len() as u64)?;
        m[r].copy_from_slice(src);
        Ok(())
    }
    fn memcpy_dtoh(&self, dst: &mut [u8], src: DeviceAddr) -> Result<()> {
        let m = self.memory.lock();
        dst.copy_from_slice(&m[Self::range(&m, src, dst.len() as u64)?]);
        Ok(())
    }
    fn memcpy_dtod(&self, dst: DeviceAddr, src: DeviceAddr, size: u64) -> Result<()> {
        let mut m = self.memory.lock();
        let (s, d) = (Self::range(&m, src, size)?, Self::range(&m, dst, size)?);
        m.copy_within(s, d.start);
        Ok(())
    }
    fn memset(&self, dst: DeviceAddr, value: u8, size: u64) -> Result<()> {
        let mut m = self.memory.lock();
        let r = Self::range(&m, dst, size)?;
        m[r].fill(value);
        Ok(())
    }
    fn create_stream(&self) -> Result<WorkerStream> {
        self.streams.create()
    }
    fn synchronize_stream(&self, stream: &WorkerStream) -> Result<()> {
        stream.synchronize()
    }
    fn stream_wait_stream(&self, stream: &WorkerStream, other: &WorkerStream) -> Result<()> {
        stream.wait_stream(other)
    }
    fn memcpy_htod_async(
        &self,
        stream: &WorkerStream,
        dst: DeviceAddr,
        src: HostBuf,
    ) -> Result<()> {
        Self::range(&self.memory.lock(), dst, src.len() as u64)?;
        let memory = Arc::clone(&self.memory);
        stream.enqueue(move || {
            let mut m = memory.lock();
            let r = Self::range(&m, dst, src.len() as u64)?;
            // SAFETY: the stream is executing this copy.
            m[r].copy_from_slice(unsafe { src.as_slice() });
            Ok(())
        })
    }
    fn memcpy_dtoh_async(
        &self,
        stream: &WorkerStream,
        mut dst: HostBufMut,
        src: DeviceAddr,
    ) -> Result<()> {
        Self::range(&self.memory.lock(), src, dst.len() as u64)?;
        let memory = Arc::clone(&self.memory);
        stream.enqueue(move || {
            let m = memory.lock();
            let r = Self::range(&m, src, dst.len() as u64)?;
            // SAFETY: the stream is executing this copy.
            unsafe { dst.as_mut_slice() }.copy_from_slice(&m[r]);
            Ok(())
        })
    }
    fn memcpy_dtod_async(
        &self,
        stream: &WorkerStream,
        dst: DeviceAddr,
        src: DeviceAddr,
        size: u64,
    ) -> Result<()> {
        let memory = Arc::clone(&self.memory);
        stream.enqueue(move || {
            let mut m = memory.lock();
            let (s, d) = (Self::range(&m, src, size)?, Self::range(&m, dst, size)?);
            m.copy_within(s, d.start);
            Ok(())
        })
    }
    fn memset_async(
        &self,
        stream: &WorkerStream,
        dst: DeviceAddr,
        value: u8,
        size: u64,
    ) -> Result<()> {
        // Deliberately unchecked: a bad address becomes the stream's error.
        let memory = Arc::clone(&self.memory);
        stream.enqueue(move || {
            let mut m = memory.lock();
            let r = Self::range(&m, dst, size)?;
            m[r].fill(value);
            Ok(())
        })
    }
    fn host_callback(&self, stream: &WorkerStream, callback: HostCallback) -> Result<()> {
        stream.host_callback(callback)
    }
    fn create_event(&self) -> Result<WorkerEvent> {
        Ok(WorkerEvent::new())
    }
    fn record_event(&self, stream: &WorkerStream, event: &WorkerEvent) -> Result<()> {
        stream.record(event)
    }
    fn event_status(&self, event: &WorkerEvent) -> Result<EventStatus> {
        Ok(event.status())
    }
    fn stream_wait_event(&self, stream: &WorkerStream, event: &WorkerEvent) -> Result<()> {
        stream.wait_event(event)
    }
    fn event_synchronize(&self, event: &WorkerEvent) -> Result<()> {
        event.synchronize()
    }
    fn provides_event_timing(&self) -> bool {
        true
    }
    fn event_elapsed_ns(&self, start: &WorkerEvent, end: &WorkerEvent) -> Result<i64> {
        start.elapsed_ns(end)
    }
    fn synchronize_all(&self) -> Result<()> {
        self.streams.synchronize_all()
    }
}

struct WPlatform;

impl Platform for WPlatform {
    type Device = WDevice;

    fn name(&self) -> &str {
        "WORKER"
    }
    fn device_type(&self) -> &str {
        "WTEST"
    }
    fn device_count(&self) -> i32 {
        1
    }
    fn create_device(&self, ordinal: i32) -> Result<WDevice> {
        Ok(WDevice {
            memory: Arc::new(Mutex::new(vec![0; 1 << 16])),
            next: Mutex::new(0),
            streams: WorkerStreams::new(format!("worker:{ordinal}")),
        })
    }
}

/// The entry of a plugin with [`WDevice`]s (what `devplug_plugin!` expands to, without the
/// exported symbol: the crate's other test plugin has it).
extern "C" fn entry() -> *const crate::abi::dpp_plugin_api_t {
    struct Def;
    impl crate::__private::PluginDef for Def {
        const NAME: &'static str = "worker_test";
        const C_NAME: &'static CStr = crate::__private::plugin_c_str("worker_test\0", true);
        const C_VERSION: &'static CStr = crate::__private::plugin_c_str("1.0\0", false);
        const ABI_MINOR: u32 = crate::abi::DPP_ABI_MINOR;
        fn init(host: &Host) -> Result<()> {
            host.register_platform(WPlatform)
        }
    }
    static API: crate::__private::PluginApi = crate::__private::PluginApi::new::<Def>();
    API.as_ptr()
}

#[test]
fn host_callbacks_run_exactly_once_in_stream_order_through_the_host() {
    let host = TestHost::new();
    let plugin = host.load(entry).expect("load");
    let dev = plugin.create_device("WORKER", 0).expect("device");
    let a = dev.allocate(64).unwrap();
    let s = dev.create_stream().unwrap();
    let (release, wait) = mpsc::channel::<()>();
    let wait = std::sync::Mutex::new(wait);
    s.host_callback(move || {
        let _ = wait.lock().map(|w| w.recv());
    })
    .unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    for i in 0..20u32 {
        let c = Arc::clone(&calls);
        s.host_callback(move || c.lock().push(i)).unwrap();
        s.memset_async(a, i as u8, 64).unwrap();
    }
    // A failing operation in the middle does not skip the callbacks after it.
    s.memset_async(DeviceAddr(8), 0, 8).unwrap();
    let c = Arc::clone(&calls);
    s.host_callback(move || c.lock().push(99)).unwrap();
    let t = s.memcpy_dtoh_async(a, 4).unwrap();
    assert!(calls.lock().is_empty(), "held behind the first callback");
    release.send(()).unwrap();
    let e = s.synchronize().expect_err("the bad memset");
    assert_eq!(e.code(), Status::InvalidArgument);
    let mut want: Vec<u32> = (0..20).collect();
    want.push(99);
    assert_eq!(*calls.lock(), want, "each once, in order");
    assert_eq!(s.take_read(t).unwrap(), [19; 4]);

    // Callbacks still queued when the stream is destroyed run, once, before it is gone.
    let (release, wait) = mpsc::channel::<()>();
    let wait = std::sync::Mutex::new(wait);
    s.host_callback(move || {
        let _ = wait.lock().map(|w| w.recv());
    })
    .unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        let c = Arc::clone(&count);
        s.host_callback(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    }
    let opener = thread::spawn(move || {
        thread::sleep(SETTLE);
        release.send(()).unwrap();
    });
    drop(s);
    opener.join().unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 5);
    thread::sleep(SETTLE);
    assert_eq!(count.load(Ordering::SeqCst), 5, "never twice");
    dev.synchronize_all().expect("no streams left with errors");
}

#[test]
fn a_device_of_worker_streams_orders_work_across_streams_through_the_host() {
    let host = TestHost::new();
    let plugin = host.load(entry).expect("load");
    let dev = plugin.create_device("WORKER", 0).expect("device");
    let (a, b) = (dev.allocate(256).unwrap(), dev.allocate(256).unwrap());
    let (s1, s2) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
    let (start, ev) = (dev.create_event().unwrap(), dev.create_event().unwrap());
    let (release, wait) = mpsc::channel::<()>();
    let wait = std::sync::Mutex::new(wait);
    s1.host_callback(move || {
        let _ = wait.lock().map(|w| w.recv());
    })
    .unwrap();
    s1.record(&start).unwrap();
    s1.memcpy_htod_async(a, &[7; 256]).unwrap();
    s1.record(&ev).unwrap();
    s1.memset_async(a, 1, 256).unwrap(); // after the event: s2 must not wait for it
    s2.wait_event(&ev).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sn = Arc::clone(&seen);
    s2.memcpy_dtod_async(b, a, 256).unwrap();
    s2.host_callback(move || sn.lock().push("s2 after the event"))
        .unwrap();
    assert_eq!(ev.status().unwrap(), EventStatus::Pending);
    let e = start.elapsed_ns(&ev).expect_err("pending");
    assert_eq!(e.code(), Status::FailedPrecondition);
    release.send(()).unwrap();
    s2.synchronize().unwrap();
    s1.synchronize().unwrap();
    assert_eq!(*seen.lock(), ["s2 after the event"]);
    assert!(start.elapsed_ns(&ev).unwrap() >= 0);
    let mut out = [0u8; 256];
    dev.memcpy_dtoh(&mut out, b).unwrap();
    // Either 7 (copied before s1's memset) or 1 would be possible without the event's
    // order; with it, the copy saw the htod, and the memset may or may not have run yet.
    assert!(out == [7; 256] || out == [1; 256], "{:?}", &out[..4]);
    // stream_wait_stream through the host.
    s1.memset_async(a, 3, 256).unwrap();
    s2.wait_stream(&s1).unwrap();
    let t = s2.memcpy_dtoh_async(a, 4).unwrap();
    s2.synchronize().unwrap();
    assert_eq!(s2.take_read(t).unwrap(), [3; 4]);
    dev.synchronize_all().unwrap();
}
