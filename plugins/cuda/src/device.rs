//! A CUDA device: the SDK's `Device` (the StreamExecutor) over one GPU's primary context.
//!
//! - Memory: `cuMemAlloc` (the host's caching suballocator sits on top), page-locked host
//!   memory, managed memory where the GPU has it, `cuMemGetInfo` for memory usage.
//! - Synchronous copies and memsets run on a stream of the device's own and wait for it (they
//!   never wait for the host's streams).
//! - Streams are CUDA streams that do not synchronize with the legacy default stream; a copy
//!   from or to pageable host memory is staged ([`crate::staging`]) so that it happens in
//!   stream order; host callbacks run on the device's callback thread ([`crate::callbacks`]).
//! - Events the host creates are CUDA events with timing (`CU_EVENT_DEFAULT`), so that
//!   `event_elapsed_ns` can ask `cuEventElapsedTime`; the plugin's own ordering events
//!   (`stream_wait_stream`) are without.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use devplug_plugin_sdk::{
    Device, DeviceAddr, DeviceInfo, Error, EventStatus, HostBuf, HostBufMut, HostCallback, Logger,
    MemoryUsage, Result,
};

use crate::callbacks::{on_callback_thread, CallbackThread};
use crate::driver::{self, Attribute, Bound, Context, Event, Stream};
use crate::kernels::DeviceKernels;
use crate::staging::StagingPool;

/// A stream of a CUDA device.
pub struct CudaStream {
    pub(crate) raw: Stream,
}

/// An event of a CUDA device.
pub struct CudaEvent {
    raw: Event,
    /// Whether a `record_event` of it succeeded: CUDA answers a never-recorded event with
    /// `CUDA_ERROR_INVALID_HANDLE`, as it does a bad handle, so the plugin keeps this itself.
    recorded: AtomicBool,
}

/// A free asked for on a callback thread, done later on another thread (see
/// [`CudaDevice::free_deferred`]).
#[derive(Clone, Copy, Debug)]
enum Free {
    Device(u64),
    Host(usize),
    Managed(usize),
}

impl std::fmt::Display for Free {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Free::Device(a) => write!(f, "deallocate({a:#x})"),
            Free::Host(p) => write!(f, "host_deallocate({p:#x})"),
            Free::Managed(p) => write!(f, "unified_deallocate({p:#x})"),
        }
    }
}

/// One GPU.
pub struct CudaDevice {
    name: String,
    info: DeviceInfo,
    managed_memory: bool,
    logger: Logger,
    callbacks: CallbackThread,
    pub(crate) kernels: DeviceKernels,
    /// Where synchronous copies and memsets run.
    sync: Stream,
    staging: Arc<StagingPool>,
    /// Frees asked for on a callback thread, and whether there are any (checked cheaply).
    deferred: Mutex<Vec<Free>>,
    any_deferred: AtomicBool,
    /// Last: everything above lives in this context.
    ctx: Arc<Context>,
}

/// What the platform chose for its devices.
#[derive(Clone, Copy, Debug)]
pub struct DeviceOptions {
    /// f32 MatMul on the tensor cores in TF32.
    pub tf32: bool,
}

impl CudaDevice {
    /// Device `ordinal` of platform `platform`.
    pub fn new(
        platform: &str,
        ordinal: i32,
        options: DeviceOptions,
        logger: Logger,
    ) -> Result<CudaDevice> {
        let name = format!("{platform}:{ordinal}");
        let err = |e: driver::CuError| Error::from(e).context(&name);
        let ctx = Arc::new(Context::new(ordinal).map_err(err)?);
        // The context is current on this thread from here on (the stream needs it).
        let sync = Stream::new(&ctx.bind().map_err(err)?).map_err(err)?;
        let attr = |a| ctx.attribute(a).map_err(err);
        let (major, minor) = (
            attr(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let managed_memory = attr(Attribute::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)? == 1;
        let info = DeviceInfo {
            hardware_name: ctx.name().ok(),
            vendor: Some("NVIDIA".to_owned()),
            pci_bus_id: ctx.pci_bus_id().ok(),
            total_memory: ctx.total_memory().map_err(err)?,
            numa_node: None,
            compute_units: attr(Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        };
        logger.debug(format!(
            "{name}: {} (compute capability {major}.{minor}, {} SMs, {} bytes)",
            info.hardware_name.as_deref().unwrap_or("unknown GPU"),
            info.compute_units,
            info.total_memory
        ));
        Ok(CudaDevice {
            kernels: DeviceKernels::new(
                &name,
                (major * 10 + minor) as u32,
                options.tf32,
                logger.clone(),
            ),
            callbacks: CallbackThread::new(&name, logger.clone()),
            staging: Arc::new(StagingPool::new(Arc::clone(&ctx))),
            deferred: Mutex::new(Vec::new()),
            any_deferred: AtomicBool::new(false),
            name,
            info,
            managed_memory,
            logger,
            sync,
            ctx,
        })
    }

    /// The device's name, `CUDA:0`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Makes the device's context current on this thread.
    pub(crate) fn bind(&self) -> Result<Bound<'_>> {
        self.ctx.bind().map_err(|e| self.err(e))
    }

    /// `e` with the device's name in front.
    pub(crate) fn err(&self, e: impl Into<Error>) -> Error {
        e.into().context(&self.name)
    }

    /// Frees now, or later when called on a callback thread: there the callback's stream is
    /// blocked, and CUDA's frees wait for every stream. A free has no status to return: a
    /// failure is logged.
    fn free(&self, free: Free) {
        if on_callback_thread() {
            self.deferred.lock().push(free);
            self.any_deferred.store(true, Ordering::Release);
            return;
        }
        self.free_deferred();
        self.free_now(free);
    }

    fn free_now(&self, free: Free) {
        let r = self.bind().and_then(|b| {
            match free {
                Free::Device(addr) => driver::free(&b, addr),
                Free::Host(p) => driver::host_free(&b, non_null(p)),
                Free::Managed(p) => driver::managed_free(&b, non_null(p)),
            }
            .map_err(Error::from)
        });
        if let Err(e) = r {
            self.logger.error(format!("{}: {free}: {e}", self.name));
        }
    }

    /// Does the frees deferred from callback threads, unless called on one. Called by every
    /// allocation, every free, memory usage, `synchronize_all` and teardown: memory a callback
    /// freed is back before the host next allocates or looks at what is free.
    fn free_deferred(&self) {
        if !self.any_deferred.load(Ordering::Acquire) || on_callback_thread() {
            return;
        }
        let frees = {
            let mut d = self.deferred.lock();
            self.any_deferred.store(false, Ordering::Release);
            std::mem::take(&mut *d)
        };
        for f in frees {
            self.free_now(f);
        }
    }

    /// Runs `f` on the synchronous-copy stream and waits for it.
    fn sync_op(&self, f: impl FnOnce(&Bound<'_>, &Stream) -> driver::CuResult<()>) -> Result<()> {
        let b = self.bind()?;
        f(&b, &self.sync)
            .and_then(|()| self.sync.synchronize(&b))
            .map_err(|e| self.err(e))
    }

    /// Enqueues a device-to-device copy on `stream`, through a temporary buffer when the ranges
    /// overlap (CUDA's copies do not allow that).
    fn copy_within(
        &self,
        b: &Bound<'_>,
        stream: &Stream,
        dst: u64,
        src: u64,
        size: u64,
    ) -> driver::CuResult<()> {
        if size == 0 || dst == src {
            return Ok(());
        }
        if dst.abs_diff(src) >= size {
            return stream.memcpy_dtod(b, dst, src, size);
        }
        let tmp = stream.alloc(b, size)?;
        let r = stream
            .memcpy_dtod(b, tmp, src, size)
            .and_then(|()| stream.memcpy_dtod(b, dst, tmp, size));
        let freed = stream.free(b, tmp);
        r.and(freed)
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Finish everything (host functions included) before the streams, modules and buffers
        // go; the context stays current on this thread while the fields drop.
        if let Ok(b) = self.ctx.bind() {
            if let Err(e) = self.ctx.synchronize(&b) {
                self.logger
                    .warn(format!("{}: synchronize before destroy: {e}", self.name));
            }
        }
        self.callbacks.stop();
        self.free_deferred();
    }
}

impl Device for CudaDevice {
    type Stream = CudaStream;
    type Event = CudaEvent;

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn allocate(&self, size: u64) -> Result<DeviceAddr> {
        self.free_deferred();
        let b = self.bind()?;
        driver::alloc(&b, size)
            .map(DeviceAddr)
            .map_err(|e| self.err(Error::from(e).context(format!("allocate({size})"))))
    }

    fn deallocate(&self, addr: DeviceAddr, _size: u64) {
        self.free(Free::Device(addr.0));
    }

    fn provides_host_memory(&self) -> bool {
        true
    }

    fn host_allocate(&self, size: u64) -> Result<NonNull<u8>> {
        self.free_deferred();
        let b = self.bind()?;
        driver::host_alloc(&b, size).map_err(|e| self.err(e))
    }

    fn host_deallocate(&self, ptr: NonNull<u8>, _size: u64) {
        self.free(Free::Host(ptr.as_ptr() as usize));
    }

    fn provides_unified_memory(&self) -> bool {
        self.managed_memory
    }

    fn unified_allocate(&self, size: u64) -> Result<NonNull<u8>> {
        self.free_deferred();
        let b = self.bind()?;
        driver::managed_alloc(&b, size).map_err(|e| self.err(e))
    }

    fn unified_deallocate(&self, ptr: NonNull<u8>, _size: u64) {
        self.free(Free::Managed(ptr.as_ptr() as usize));
    }

    fn provides_memory_usage(&self) -> bool {
        true
    }

    fn memory_usage(&self) -> Result<MemoryUsage> {
        self.free_deferred();
        let b = self.bind()?;
        let (free, total) = self.ctx.memory_info(&b).map_err(|e| self.err(e))?;
        Ok(MemoryUsage { free, total })
    }

    fn memcpy_htod(&self, dst: DeviceAddr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: `src` is borrowed for this call, which waits for the copy.
        self.sync_op(|b, s| unsafe { s.memcpy_htod(b, dst.0, src.as_ptr(), src.len()) })
    }

    fn memcpy_dtoh(&self, dst: &mut [u8], src: DeviceAddr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` is borrowed mutably for this call, which waits for the copy.
        self.sync_op(|b, s| unsafe { s.memcpy_dtoh(b, dst.as_mut_ptr(), src.0, dst.len()) })
    }

    fn memcpy_dtod(&self, dst: DeviceAddr, src: DeviceAddr, size: u64) -> Result<()> {
        self.sync_op(|b, s| self.copy_within(b, s, dst.0, src.0, size))
    }

    fn memset(&self, dst: DeviceAddr, value: u8, size: u64) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        self.sync_op(|b, s| s.memset(b, dst.0, value, size))
    }

    fn create_stream(&self) -> Result<CudaStream> {
        let b = self.bind()?;
        Stream::new(&b)
            .map(|raw| CudaStream { raw })
            .map_err(|e| self.err(e))
    }

    fn destroy_stream(&self, stream: CudaStream) {
        if let Ok(b) = self.bind() {
            let _ = stream.raw.synchronize(&b);
            drop(stream);
        }
    }

    fn synchronize_stream(&self, stream: &CudaStream) -> Result<()> {
        let b = self.bind()?;
        stream.raw.synchronize(&b).map_err(|e| self.err(e))
    }

    fn stream_wait_stream(&self, stream: &CudaStream, other: &CudaStream) -> Result<()> {
        if std::ptr::eq(stream, other) {
            return Ok(());
        }
        let b = self.bind()?;
        let marker = Event::new(&b).map_err(|e| self.err(e))?;
        marker
            .record(&b, &other.raw)
            .and_then(|()| stream.raw.wait(&b, &marker))
            .map_err(|e| self.err(e))
        // The event is destroyed here; the driver keeps what the wait needs.
    }

    fn memcpy_htod_async(&self, stream: &CudaStream, dst: DeviceAddr, src: HostBuf) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let b = self.bind()?;
        if driver::is_pinned(&b, src.as_ptr(), src.len()) {
            // SAFETY: the host keeps `src` valid and unchanged until the stream reaches the
            // copy (HostBuf's contract), and page-locked memory is read in stream order.
            unsafe { stream.raw.memcpy_htod(&b, dst.0, src.as_ptr(), src.len()) }
                .map_err(|e| self.err(e))
        } else {
            self.staging
                .htod(&b, &stream.raw, dst.0, src)
                .map_err(|e| self.err(e))
        }
    }

    fn memcpy_dtoh_async(
        &self,
        stream: &CudaStream,
        mut dst: HostBufMut,
        src: DeviceAddr,
    ) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let b = self.bind()?;
        let (ptr, len) = (dst.as_mut_ptr(), dst.len());
        if driver::is_pinned(&b, ptr, len) {
            // SAFETY: the host keeps `dst` valid and untouched until the stream reaches the
            // copy (HostBufMut's contract), and page-locked memory is written in stream order.
            unsafe { stream.raw.memcpy_dtoh(&b, ptr, src.0, len) }.map_err(|e| self.err(e))
        } else {
            self.staging
                .dtoh(&b, &stream.raw, dst, src.0)
                .map_err(|e| self.err(e))
        }
    }

    fn memcpy_dtod_async(
        &self,
        stream: &CudaStream,
        dst: DeviceAddr,
        src: DeviceAddr,
        size: u64,
    ) -> Result<()> {
        let b = self.bind()?;
        self.copy_within(&b, &stream.raw, dst.0, src.0, size)
            .map_err(|e| self.err(e))
    }

    fn memset_async(
        &self,
        stream: &CudaStream,
        dst: DeviceAddr,
        value: u8,
        size: u64,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let b = self.bind()?;
        stream
            .raw
            .memset(&b, dst.0, value, size)
            .map_err(|e| self.err(e))
    }

    fn host_callback(&self, stream: &CudaStream, callback: HostCallback) -> Result<()> {
        let b = self.bind()?;
        self.callbacks
            .enqueue(&b, &stream.raw, callback)
            .map_err(|e| self.err(e))
    }

    fn create_event(&self) -> Result<CudaEvent> {
        let b = self.bind()?;
        Event::timed(&b)
            .map(|raw| CudaEvent {
                raw,
                recorded: AtomicBool::new(false),
            })
            .map_err(|e| self.err(e))
    }

    fn destroy_event(&self, event: CudaEvent) {
        if let Ok(_b) = self.bind() {
            drop(event);
        }
    }

    fn record_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        let b = self.bind()?;
        event.raw.record(&b, &stream.raw).map_err(|e| self.err(e))?;
        event.recorded.store(true, Ordering::Release);
        Ok(())
    }

    fn event_status(&self, event: &CudaEvent) -> Result<EventStatus> {
        let b = self.bind()?;
        Ok(match event.raw.query(&b) {
            Ok(true) => EventStatus::Complete,
            Ok(false) => EventStatus::Pending,
            Err(e) => {
                self.logger
                    .debug(format!("{}: event status: {e}", self.name));
                EventStatus::Error
            }
        })
    }

    fn stream_wait_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        let b = self.bind()?;
        stream.raw.wait(&b, &event.raw).map_err(|e| self.err(e))
    }

    fn event_synchronize(&self, event: &CudaEvent) -> Result<()> {
        let b = self.bind()?;
        event.raw.synchronize(&b).map_err(|e| self.err(e))
    }

    fn provides_event_timing(&self) -> bool {
        driver::can_time_events()
    }

    fn event_elapsed_ns(&self, start: &CudaEvent, end: &CudaEvent) -> Result<i64> {
        let refuse = |which: &str, why: &dyn std::fmt::Display| {
            self.err(Error::failed_precondition(format!(
                "event_elapsed_ns: the {which} event {why}"
            )))
        };
        let events = [("start", start), ("end", end)];
        for (which, event) in events {
            if !event.recorded.load(Ordering::Acquire) {
                return Err(refuse(which, &"was never recorded"));
            }
        }
        let b = self.bind()?;
        // Pending or failed, as event_status reports it (cuEventElapsedTime_v2 need not report
        // an error of earlier work, and says NOT_READY without saying which event).
        for (which, event) in events {
            match event.raw.query(&b) {
                Ok(true) => {}
                Ok(false) => return Err(refuse(which, &"is still pending (synchronize it first)")),
                Err(e) => return Err(refuse(which, &format_args!("reports an error ({e})"))),
            }
        }
        start
            .raw
            .elapsed_ms(&b, &end.raw)
            .map(ms_to_ns)
            .map_err(|e| self.err(e))
    }

    fn synchronize_all(&self) -> Result<()> {
        let b = self.bind()?;
        let r = self.ctx.synchronize(&b).map_err(|e| self.err(e));
        self.free_deferred();
        r
    }
}

/// `cuEventElapsedTime`'s milliseconds (an f32: about 7 significant digits, on a clock of
/// about half a microsecond) as whole nanoseconds.
fn ms_to_ns(ms: f32) -> i64 {
    // `as` saturates (and maps NaN to 0), which no real interval reaches.
    (f64::from(ms) * 1e6).round() as i64
}

/// A pointer from [`Free`] (never null: it came from a `NonNull`).
fn non_null(p: usize) -> NonNull<u8> {
    NonNull::new(p as *mut u8).expect("a freed pointer is not null")
}
