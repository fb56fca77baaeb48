//! Streams and events as the host sees them: ordered work queues of one device, and markers
//! in them.
//!
//! Stream-ordered operations keep the buffers they touch alive until the stream has reached
//! them, so a host may drop its references right after enqueueing.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{copy_between, Buffer};
use crate::platform::{EventStatus, RawEvent, RawStream};
use crate::trace::{traced, DeviceSpanStart, Span, SpanKind};

enum StreamKind {
    /// The device's default stream (owned by the device).
    Default,
    /// A stream the host created; destroyed with this object.
    Owned(RawStream),
}

/// A stream being enqueued on. For the default stream, the device notes that work may be
/// pending there before the enqueue and again when this is dropped after it: a synchronize of
/// the default stream that ran in between cleared the note, maybe before the work was enqueued
/// (see `Device::synchronize_default_stream`).
struct Enqueue<'a>(&'a Stream);

impl std::ops::Deref for Enqueue<'_> {
    type Target = RawStream;
    fn deref(&self) -> &RawStream {
        self.0.raw_stream()
    }
}

impl Drop for Enqueue<'_> {
    fn drop(&mut self) {
        if let StreamKind::Default = self.0.kind {
            self.0.device.default_stream_used();
        }
    }
}

/// The first failure of host work the runtime enqueued on a stream (a copy between devices,
/// a wait for another device's event), kept until a synchronize of that stream reports it —
/// as CUDA reports an asynchronous error at the next synchronize. Later failures before then
/// are dropped: the first is the cause. Events recorded on the stream while it holds one are
/// marked failed (see [`Event::record`]).
#[derive(Clone, Default)]
pub(crate) struct AsyncError(Arc<AsyncErrorInner>);

#[derive(Default)]
struct AsyncErrorInner {
    error: Mutex<Option<Error>>,
    /// Host work that can fail was enqueued on the stream at some time (until then, recording
    /// an event needs no look at `error`).
    used: AtomicBool,
}

/// An [`AsyncError`] its device looks at without keeping it (an owned stream's, for the
/// device's synchronize).
pub(crate) struct WeakAsyncError(Weak<AsyncErrorInner>);

impl WeakAsyncError {
    /// The error, while its stream lives.
    pub(crate) fn upgrade(&self) -> Option<AsyncError> {
        self.0.upgrade().map(AsyncError)
    }
}

impl AsyncError {
    pub(crate) fn downgrade(&self) -> WeakAsyncError {
        WeakAsyncError(Arc::downgrade(&self.0))
    }

    fn set(&self, e: Error) {
        self.0.error.lock().get_or_insert(e);
    }

    /// The failure recorded since the last call, as an error.
    pub(crate) fn take(&self) -> Result<()> {
        match self.0.error.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The failure not reported yet, left for the synchronize that reports it.
    fn peek(&self) -> Option<Error> {
        self.0.error.lock().clone()
    }

    /// Notes that host work that can fail is about to be enqueued.
    fn note_use(&self) {
        if !self.0.used.load(Ordering::Relaxed) {
            self.0.used.store(true, Ordering::Release);
        }
    }

    fn used(&self) -> bool {
        self.0.used.load(Ordering::Acquire)
    }
}

/// An ordered queue of work on one device: copies, memsets, host callbacks, event records
/// and waits. Work enqueued on one stream runs in order; streams run independently of each
/// other unless ordered by [`Stream::wait_event`] or [`Stream::wait_stream`].
///
/// A device's default stream ([`Device::default_stream`]) is where ops run; on the CPU it is
/// synchronous (work runs inline, on the calling thread). Streams made with
/// [`Device::create_stream`] are asynchronous: enqueueing returns at once, and a failure is
/// reported by the next [`Stream::synchronize`] (or the device's). Dropping a created stream
/// waits for its work; a failure nobody synchronized with is then logged. `Send` and `Sync`:
/// several threads may enqueue on one stream (each thread's work keeps its order).
pub struct Stream {
    device: Arc<Device>,
    kind: StreamKind,
    /// 0 for a device's default stream; streams the host creates are numbered from 1, in the
    /// order they were created in this process (their device tracks in a trace).
    id: u32,
    /// Where host work the runtime enqueued records its failure (the device's, for its
    /// default stream).
    error: AsyncError,
}

impl Stream {
    pub(crate) fn default_of(device: Arc<Device>) -> Stream {
        Stream {
            error: device.default_stream_error().clone(),
            device,
            kind: StreamKind::Default,
            id: 0,
        }
    }

    pub(crate) fn create(device: Arc<Device>) -> Result<Stream> {
        let raw = device
            .executor()
            .create_stream()
            .map_err(|e| e.context(format!("creating a stream on {}", device.name())))?;
        let error = AsyncError::default();
        device.track_stream_error(&error);
        static NEXT_ID: AtomicU32 = AtomicU32::new(1);
        Ok(Stream {
            device,
            kind: StreamKind::Owned(raw),
            error,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// 0 for a device's default stream; streams the host creates are numbered from 1, in the
    /// order they were created in this process.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Whether this is the device's default stream.
    pub fn is_default(&self) -> bool {
        matches!(self.kind, StreamKind::Default)
    }

    /// The raw stream, to enqueue work on (see [`Enqueue`]): lives to the end of the statement
    /// that enqueues, so that the default stream is marked used before and after the enqueue.
    fn raw(&self) -> Enqueue<'_> {
        if let StreamKind::Default = self.kind {
            self.device.default_stream_used();
        }
        Enqueue(self)
    }

    /// The raw stream, to ask about (nothing is enqueued).
    fn raw_stream(&self) -> &RawStream {
        match &self.kind {
            StreamKind::Default => self.device.default_raw_stream(),
            StreamKind::Owned(r) => r,
        }
    }

    pub(crate) fn is_synchronous(&self) -> bool {
        self.device
            .executor()
            .stream_is_synchronous(self.raw_stream())
    }

    fn check_device(&self, buffer: &Buffer, what: &str) -> Result<()> {
        if Arc::ptr_eq(buffer.device(), &self.device) {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "{what} lives on {} but the stream belongs to {}",
                buffer.device().name(),
                self.device.name()
            )))
        }
    }

    /// Enqueues the work `enqueue` enqueues on this stream, bracketed by two events while a
    /// trace is on and the device times them: a device span named `name` (see
    /// [`crate::trace`]).
    fn on_device_traced(
        &self,
        name: &str,
        bytes: u64,
        enqueue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let tracer = self.device.tracer();
        if !tracer.on() {
            return enqueue();
        }
        let begun = std::time::Instant::now();
        let start = DeviceSpanStart::begin(self);
        enqueue()?;
        if let Some(start) = start {
            let device = self.device.qualified_name();
            start.end(
                self,
                begun,
                Span::host(name, SpanKind::Device, &device, bytes),
            );
        }
        Ok(())
    }

    /// Keeps `keep` alive until the stream has reached this point.
    fn hold<T: Send + 'static>(&self, keep: T) -> Result<()> {
        if self.is_synchronous() {
            return Ok(());
        }
        self.host_callback(move || drop(keep))
    }

    /// Enqueues a copy of host memory into `dst` at `offset`.
    ///
    /// # Safety
    /// `src` must be valid for reads of `size` bytes until the stream reaches the copy.
    pub unsafe fn write_raw(
        &self,
        dst: &Arc<Buffer>,
        offset: u64,
        src: *const u8,
        size: u64,
    ) -> Result<()> {
        self.check_device(dst, "the destination buffer")?;
        let d = dst.range(offset, size)?;
        self.on_device_traced("write", size, || {
            // SAFETY: forwarded from the caller.
            unsafe {
                self.device
                    .executor()
                    .memcpy_htod_async(&self.raw(), d, src, size)
            }
        })?;
        self.hold(dst.clone())
    }

    /// Enqueues a copy of `src` at `offset` into host memory.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `size` bytes until the stream reaches the copy, and
    /// not be read before then.
    pub unsafe fn read_raw(
        &self,
        src: &Arc<Buffer>,
        offset: u64,
        dst: *mut u8,
        size: u64,
    ) -> Result<()> {
        self.check_device(src, "the source buffer")?;
        let s = src.range(offset, size)?;
        self.on_device_traced("read", size, || {
            // SAFETY: forwarded from the caller.
            unsafe {
                self.device
                    .executor()
                    .memcpy_dtoh_async(&self.raw(), dst, s, size)
            }
        })?;
        self.hold(src.clone())
    }

    /// Enqueues a copy of owned host bytes into `dst` at `offset` (safe: the stream owns them).
    pub fn write(&self, dst: &Arc<Buffer>, offset: u64, data: Vec<u8>) -> Result<()> {
        let data: Arc<[u8]> = data.into();
        // SAFETY: the bytes are kept alive below until the stream has reached the copy.
        unsafe { self.write_raw(dst, offset, data.as_ptr(), data.len() as u64)? };
        self.hold(data)
    }

    /// Enqueues a device-to-device copy. One of the buffers must live on this stream's
    /// device; the other may live anywhere (a copy between devices is done when the stream
    /// gets there, through host memory where needed).
    pub fn copy(
        &self,
        dst: &Arc<Buffer>,
        dst_offset: u64,
        src: &Arc<Buffer>,
        src_offset: u64,
        size: u64,
    ) -> Result<()> {
        let d = dst.range(dst_offset, size)?;
        let s = src.range(src_offset, size)?;
        let on_dst = Arc::ptr_eq(dst.device(), &self.device);
        let on_src = Arc::ptr_eq(src.device(), &self.device);
        if on_dst && on_src {
            self.on_device_traced("copy", size, || {
                self.device
                    .executor()
                    .memcpy_dtod_async(&self.raw(), d, s, size)
            })?;
            return self.hold((dst.clone(), src.clone()));
        }
        if !on_dst && !on_src {
            return Err(Error::invalid_argument(format!(
                "neither buffer of the copy lives on the stream's device {} (source on {}, destination on {})",
                self.device.name(),
                src.device().name(),
                dst.device().name()
            )));
        }
        let (dst, src) = (dst.clone(), src.clone());
        self.on_device_traced("copy", size, || {
            self.host_callback_with_status(move || {
                let other = if on_dst { src.device() } else { dst.device() };
                other
                    .synchronize_default_stream()
                    .and_then(|_| copy_between(dst.device(), d, src.device(), s, size))
                    .map_err(|e| {
                        e.context(format!(
                            "stream copy of {size} bytes from {} to {}",
                            src.device().name(),
                            dst.device().name()
                        ))
                    })
            })
        })
    }

    /// Enqueues setting `size` bytes of `dst` at `offset` to `value`.
    pub fn memset(&self, dst: &Arc<Buffer>, offset: u64, value: u8, size: u64) -> Result<()> {
        self.check_device(dst, "the buffer")?;
        let d = dst.range(offset, size)?;
        self.on_device_traced("memset", size, || {
            self.device
                .executor()
                .memset_async(&self.raw(), d, value, size)
        })?;
        self.hold(dst.clone())
    }

    /// Runs `f` once all earlier work of the stream is done (on a worker thread, or inline
    /// for a synchronous stream). A panic in `f` on a worker thread becomes the stream's error
    /// (`INTERNAL`, `a host callback panicked: <message>`), reported by its next synchronize;
    /// on a synchronous stream (the CPU's default stream) it reaches the caller.
    ///
    /// `f` runs exactly once, unless this returns an error (then it never runs). Later work on
    /// the stream waits for it: keep it short, and do not synchronize or drop the stream that
    /// runs it from inside it (that waits for itself).
    pub fn host_callback(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        if self.is_synchronous() {
            return self
                .device
                .executor()
                .host_callback(&self.raw(), Box::new(f));
        }
        let error = self.error.clone();
        error.note_use();
        let f = move || {
            if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                let text = p
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| p.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("a panic payload that is not a string");
                error.set(Error::internal(format!("a host callback panicked: {text}")));
            }
        };
        // `f` may hold the last reference to this device (a buffer kept alive until the stream
        // got here, the host having dropped everything else). Dropping a device waits for its
        // streams, which from inside one of them — on the device's own thread — waits forever.
        // So the callback holds the device as well, and when it is left with the last
        // reference, the device is dropped on a thread of its own once the callback returned.
        let device = self.device.clone();
        self.device.executor().host_callback(
            &self.raw(),
            Box::new(move || {
                f();
                if let Some(last) = Arc::into_inner(device) {
                    let (tx, rx) = std::sync::mpsc::channel::<Device>();
                    let spawned = std::thread::Builder::new()
                        .name("devplug-device-drop".into())
                        .spawn(move || drop(rx.recv()));
                    match spawned {
                        Ok(_) => drop(tx.send(last)),
                        Err(e) => {
                            crate::log::error(&format!(
                                "cannot start a thread to destroy device {}: {e}; destroying \
                                 it on its own stream's thread, which may never return",
                                last.qualified_name()
                            ));
                            drop(last);
                        }
                    }
                }
            }),
        )
    }

    /// [`host_callback`](Self::host_callback) for a function that can fail: its error is
    /// reported by the stream's next synchronize (or the device's), once — at once, by this
    /// call, on a synchronous stream.
    pub fn host_callback_with_status(
        &self,
        f: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Result<()> {
        if self.is_synchronous() {
            return f();
        }
        let error = self.error.clone();
        error.note_use();
        self.host_callback(move || {
            if let Err(e) = f() {
                error.set(e);
            }
        })
    }

    /// Work enqueued after this call waits for `event` (which may belong to any device).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        if Arc::ptr_eq(&event.device, &self.device) {
            return self
                .device
                .executor()
                .stream_wait_event(&self.raw(), event.raw());
        }
        // Another device's event: block this stream in a host callback until it is reached.
        let ev = event.snapshot();
        self.host_callback_with_status(move || {
            ev.synchronize()
                .map_err(|e| e.context(format!("waiting for an event of {}", ev.device().name())))
        })
    }

    /// Work enqueued on this stream after this call waits for the work enqueued on `other`
    /// before it. Both streams must belong to the same device.
    pub fn wait_stream(&self, other: &Stream) -> Result<()> {
        if !Arc::ptr_eq(&other.device, &self.device) {
            return Err(Error::invalid_argument(format!(
                "streams of different devices cannot wait for each other ({} and {}); record an event instead",
                self.device.name(),
                other.device.name()
            )));
        }
        self.device
            .executor()
            .stream_wait_stream(&self.raw(), other.raw_stream())
    }

    /// Blocks until all work enqueued so far is done. Returns the stream's first failure
    /// since the last synchronize: the executor's, or else that of host work the runtime
    /// enqueued (a copy between devices, a wait for another device's event).
    pub fn synchronize(&self) -> Result<()> {
        traced(
            &self.device,
            "synchronize stream",
            SpanKind::Wait,
            0,
            || {
                match &self.kind {
                    // Also frees what waited for the default stream (stream-ordered reuse), and
                    // reports the device's record of host work there.
                    StreamKind::Default => self.device.synchronize_default_stream_now(),
                    StreamKind::Owned(raw) => {
                        self.device.executor().synchronize_stream(raw)?;
                        self.error.take()
                    }
                }
            },
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let StreamKind::Owned(raw) = std::mem::replace(&mut self.kind, StreamKind::Default) {
            self.device.executor().destroy_stream(raw);
            // Nobody synchronizes it any more: the failure can only be logged.
            if let Err(e) = self.error.take() {
                crate::log::error(&format!(
                    "a stream of {} was destroyed with an unreported failure: {e}",
                    self.device.name()
                ));
            }
        }
    }
}

/// A marker recorded in a stream; others can wait for it: a stream of any device
/// ([`Stream::wait_event`]) or the host ([`Event::synchronize`]). Recorded again, it marks the
/// new point. Two events recorded on one device time the work between them
/// ([`Event::elapsed_ns`]). `Send` and `Sync`.
pub struct Event {
    device: Arc<Device>,
    raw: Arc<RawEventHolder>,
    /// What the latest record found when its stream reached it.
    outcome: Mutex<RecordOutcome>,
}

/// The failure of earlier host work that a stream held unreported when it reached a record of
/// an event (set then, by a host callback enqueued just before the record), if any.
#[derive(Clone, Default)]
struct RecordOutcome(Arc<Mutex<Option<Error>>>);

impl RecordOutcome {
    fn failure(&self) -> Option<Error> {
        self.0.lock().clone()
    }
}

/// Keeps a raw event alive while waits on other devices still need it.
struct RawEventHolder {
    device: Arc<Device>,
    raw: RawEvent,
}

impl Drop for RawEventHolder {
    fn drop(&mut self) {
        let raw = std::mem::replace(&mut self.raw, Box::new(()));
        self.device.executor().destroy_event(raw);
    }
}

impl Event {
    pub(crate) fn create(device: Arc<Device>) -> Result<Event> {
        let raw = device
            .executor()
            .create_event()
            .map_err(|e| e.context(format!("creating an event on {}", device.name())))?;
        Ok(Event {
            raw: Arc::new(RawEventHolder {
                device: device.clone(),
                raw,
            }),
            device,
            outcome: Mutex::new(RecordOutcome::default()),
        })
    }

    /// The device the event belongs to (it is recorded on that device's streams only).
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    fn raw(&self) -> &RawEvent {
        &self.raw.raw
    }

    /// A handle to the same event, as recorded now, that may travel to another thread.
    fn snapshot(&self) -> Event {
        Event {
            device: self.device.clone(),
            raw: self.raw.clone(),
            outcome: Mutex::new(self.outcome.lock().clone()),
        }
    }

    /// Marks the current end of `stream`, which must belong to the event's device.
    ///
    /// If host work the runtime ran on the stream before this point failed and the failure is
    /// not reported yet when the stream gets here (see [`Stream::synchronize`]), the event is
    /// marked failed: [`status`](Self::status) says [`EventStatus::Error`] and
    /// [`synchronize`](Self::synchronize) returns that failure — as a platform marks its events
    /// when its own work failed. The stream's synchronize still reports it, once.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        if !Arc::ptr_eq(&stream.device, &self.device) {
            return Err(Error::invalid_argument(format!(
                "the event and the stream belong to different devices (event: {}, stream: {})",
                self.device.name(),
                stream.device.name()
            )));
        }
        let outcome = RecordOutcome::default();
        // Only streams that ever ran such host work can hold a failure (and a synchronous
        // stream returns it from the call that failed).
        if stream.error.used() && !stream.is_synchronous() {
            let (error, found) = (stream.error.clone(), outcome.clone());
            stream.host_callback(move || *found.0.lock() = error.peek())?;
        }
        self.device
            .executor()
            .record_event(&stream.raw(), self.raw())?;
        *self.outcome.lock() = outcome;
        Ok(())
    }

    /// Whether the stream has reached the last record, without waiting:
    /// [`EventStatus::Pending`], [`EventStatus::Complete`] (also for an event never recorded)
    /// or [`EventStatus::Error`] (see [`record`](Self::record)).
    pub fn status(&self) -> Result<EventStatus> {
        match self.device.executor().event_status(self.raw())? {
            EventStatus::Complete if self.outcome.lock().failure().is_some() => {
                Ok(EventStatus::Error)
            }
            status => Ok(status),
        }
    }

    /// The device's time, in nanoseconds, from when its stream reached this event's latest
    /// record to when `end`'s stream reached `end`'s (negative when `end` came first): the
    /// way to time work on a device, as `cudaEventElapsedTime` is on CUDA. Both events are of
    /// the same device, recorded and reached (their streams may differ).
    ///
    /// Errors: `INVALID_ARGUMENT` for events of two devices; `FAILED_PRECONDITION` when either
    /// was never recorded, is still pending (synchronize it first) or was marked failed (see
    /// [`record`](Self::record)); `UNIMPLEMENTED` when the device's platform does not time
    /// events (a plugin without ABI 1.4's `event_elapsed_ns`).
    pub fn elapsed_ns(&self, end: &Event) -> Result<i64> {
        if !Arc::ptr_eq(&end.device, &self.device) {
            return Err(Error::invalid_argument(format!(
                "timing events of two devices ({} and {}): a device's clock only measures its own events",
                self.device.name(),
                end.device.name()
            )));
        }
        let context = || format!("timing events of {}", self.device.name());
        for (which, event) in [("start", self), ("end", end)] {
            if let Some(e) = event.outcome.lock().failure() {
                return Err(Error::failed_precondition(format!(
                    "{}: the {which} event is marked failed: work on its stream before the record failed ({})",
                    context(),
                    e.message
                )));
            }
        }
        self.device
            .executor()
            .event_elapsed_ns(self.raw(), end.raw())
            .map_err(|e| e.context(context()))
    }

    /// Blocks until the stream has reached the last record. Returns the failure the event was
    /// marked with (see [`record`](Self::record)).
    pub fn synchronize(&self) -> Result<()> {
        traced(&self.device, "synchronize event", SpanKind::Wait, 0, || {
            self.device.executor().event_synchronize(self.raw())
        })?;
        if let Some(e) = self.outcome.lock().failure() {
            return Err(e.context(format!(
                "an event of {}: work on its stream before the record failed",
                self.device.name()
            )));
        }
        // A platform may report its stream's failure through the event's status alone (its
        // `event_synchronize` returning once the event is reached, failed or not): what
        // `status` says must be what this says.
        match self.device.executor().event_status(self.raw())? {
            EventStatus::Error => Err(Error::internal(format!(
                "an event of {}: its stream failed before reaching it (the platform marks the \
                 event failed; synchronizing the stream reports the failure)",
                self.device.name()
            ))),
            _ => Ok(()),
        }
    }
}
