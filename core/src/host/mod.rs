//! The built-in `HOST` platform: device type `CPU`, a configurable number of logical devices
//! whose memory is host memory.

// Public for the benchmarks (core/benches, capi/benches), hidden from the docs: hosts run ops
// through `Runtime::run`.
#[doc(hidden)]
pub mod kernels;
mod ops;
mod queue;

use std::alloc::Layout;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::memory::DevicePtr;
use crate::platform::{
    downcast, DeviceDescription, EventStatus, HostFn, Platform, PlatformInfo, RawEvent, RawStream,
    StreamExecutor,
};

pub(crate) use ops::register_kernels;
use queue::{CpuEvent, CpuStream, WorkQueue};

/// Alignment of every raw CPU device allocation (a cache line is 64; 256 matches the
/// suballocator's granularity and is what vector kernels like).
const DEVICE_ALIGN: usize = 256;
/// Alignment of pinned host allocations.
const HOST_ALIGN: usize = 64;

/// The `HOST` platform.
pub struct HostPlatform {
    info: PlatformInfo,
    device_count: usize,
}

impl HostPlatform {
    /// The platform's name, as device names like `HOST:0` show it.
    pub const NAME: &'static str = "HOST";
    /// Its device type: `CPU:0` is its first device.
    pub const DEVICE_TYPE: &'static str = "CPU";

    /// The platform with `device_count` CPU devices (the runtime's `cpu_device_count`).
    pub fn new(device_count: usize) -> HostPlatform {
        HostPlatform {
            info: PlatformInfo {
                name: Self::NAME.into(),
                device_type: Self::DEVICE_TYPE.into(),
                priority: 0,
                vendor: "devplug".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                host_visible: true,
                use_suballocator: true,
            },
            device_count,
        }
    }
}

impl Platform for HostPlatform {
    fn info(&self) -> &PlatformInfo {
        &self.info
    }
    fn device_count(&self) -> usize {
        self.device_count
    }
    fn create_executor(&self, ordinal: usize) -> Result<Arc<dyn StreamExecutor>> {
        Ok(Arc::new(HostExecutor::new(ordinal)))
    }
}

/// One logical CPU device.
pub struct HostExecutor {
    ordinal: usize,
    description: DeviceDescription,
    /// The queues of the streams created on this device, for `synchronize_all`.
    queues: Mutex<Vec<Weak<WorkQueue>>>,
}

impl HostExecutor {
    fn new(ordinal: usize) -> HostExecutor {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        HostExecutor {
            ordinal,
            description: DeviceDescription {
                hardware_name: cpu_model_name(),
                vendor: "devplug".into(),
                pci_bus_id: String::new(),
                total_memory: physical_memory(),
                numa_node: -1,
                compute_units: cores as u32,
            },
            queues: Mutex::new(Vec::new()),
        }
    }

    fn stream<'a>(&self, s: &'a RawStream) -> Result<&'a CpuStream> {
        downcast::<CpuStream>(s.as_ref(), "stream")
    }

    fn event<'a>(&self, e: &'a RawEvent) -> Result<&'a CpuEvent> {
        downcast::<CpuEvent>(e.as_ref(), "event")
    }
}

fn layout(size: u64, align: usize) -> Result<Layout> {
    let size = usize::try_from(size.max(1)).map_err(|_| {
        Error::resource_exhausted(format!("{size} bytes do not fit the address space"))
    })?;
    Layout::from_size_align(size, align)
        .map_err(|_| Error::resource_exhausted(format!("cannot allocate {size} bytes")))
}

/// Host memory for platforms that bring no pinned allocator of their own; zeroed, as the CPU
/// device's memory is.
pub(crate) fn host_memory_allocate(size: u64) -> Result<*mut u8> {
    let l = layout(size, HOST_ALIGN)?;
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(l) };
    if p.is_null() {
        return Err(Error::resource_exhausted(format!(
            "the system allocator refused {size} bytes of host memory"
        )));
    }
    Ok(p)
}

/// Frees memory from [`host_memory_allocate`].
///
/// # Safety
/// `ptr` came from `host_memory_allocate(size)` and is not used afterwards.
pub(crate) unsafe fn host_memory_free(ptr: *mut u8, size: u64) {
    if let Ok(l) = layout(size, HOST_ALIGN) {
        // SAFETY: the caller's contract.
        unsafe { std::alloc::dealloc(ptr, l) }
    }
}

/// A host address that may travel to a stream's worker thread.
#[derive(Clone, Copy)]
struct SendPtr(usize);

impl StreamExecutor for HostExecutor {
    fn description(&self) -> &DeviceDescription {
        &self.description
    }

    fn allocate(&self, size: u64) -> Result<DevicePtr> {
        let l = layout(size, DEVICE_ALIGN)?;
        // Zeroed: safe code reads this memory (`Tensor::to_vec` of an output a host's Rust
        // kernel left unwritten, say), and uninitialized bytes must never reach it. The
        // buffer pool and the suballocator reuse what was freed (written bytes), so the hot
        // path allocates nothing and pays nothing for this.
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(l) };
        if p.is_null() {
            return Err(Error::resource_exhausted(format!(
                "CPU:{}: the system allocator refused {size} bytes",
                self.ordinal
            )));
        }
        Ok(DevicePtr(p as u64))
    }

    fn deallocate(&self, ptr: DevicePtr, size: u64) {
        if let Ok(l) = layout(size, DEVICE_ALIGN) {
            // SAFETY: the core hands back exactly what `allocate(size)` returned.
            unsafe { std::alloc::dealloc(ptr.0 as *mut u8, l) }
        }
    }

    fn host_allocate(&self, size: u64) -> Result<*mut u8> {
        host_memory_allocate(size)
    }

    unsafe fn host_deallocate(&self, ptr: *mut u8, size: u64) {
        // SAFETY: the caller guarantees `ptr` came from `host_allocate(size)`.
        unsafe { host_memory_free(ptr, size) }
    }

    fn memory_usage(&self) -> Result<(u64, u64)> {
        let total = self.description.total_memory;
        Ok((available_memory().min(total), total))
    }

    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: *const u8, size: u64) -> Result<()> {
        // SAFETY: `src` is readable (caller) and `dst` is a live allocation of at least `size`
        // bytes (checked by the core); host memory and device memory may overlap only if the
        // caller passes a device address as host memory, hence `copy`, not the
        // non-overlapping variant.
        unsafe { std::ptr::copy(src, dst.0 as *mut u8, size as usize) };
        Ok(())
    }

    unsafe fn memcpy_dtoh(&self, dst: *mut u8, src: DevicePtr, size: u64) -> Result<()> {
        // SAFETY: as in `memcpy_htod`, the other way round.
        unsafe { std::ptr::copy(src.0 as *const u8, dst, size as usize) };
        Ok(())
    }

    fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, size: u64) -> Result<()> {
        // SAFETY: both ranges lie in live allocations of this host-visible device (checked by
        // the core); `copy` allows them to overlap.
        unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, size as usize) };
        Ok(())
    }

    fn memset(&self, dst: DevicePtr, value: u8, size: u64) -> Result<()> {
        // SAFETY: the range lies in a live allocation (checked by the core).
        unsafe { std::ptr::write_bytes(dst.0 as *mut u8, value, size as usize) };
        Ok(())
    }

    fn create_stream(&self) -> Result<RawStream> {
        let q = Arc::new(WorkQueue::new(format!(
            "devplug-cpu{}-stream",
            self.ordinal
        ))?);
        let mut queues = self.queues.lock();
        queues.retain(|w| w.strong_count() > 0);
        queues.push(Arc::downgrade(&q));
        Ok(Box::new(CpuStream::Queue(q)))
    }

    fn create_default_stream(&self) -> Result<RawStream> {
        Ok(Box::new(CpuStream::Inline))
    }

    fn destroy_stream(&self, stream: RawStream) {
        if let Ok(s) = self.stream(&stream) {
            s.synchronize();
        }
    }

    fn stream_is_synchronous(&self, stream: &RawStream) -> bool {
        matches!(self.stream(stream), Ok(CpuStream::Inline))
    }

    fn synchronize_stream(&self, stream: &RawStream) -> Result<()> {
        self.stream(stream)?.synchronize();
        Ok(())
    }

    fn stream_wait_stream(&self, stream: &RawStream, other: &RawStream) -> Result<()> {
        let (s, o) = (self.stream(stream)?, self.stream(other)?);
        let ev = CpuEvent::default();
        ev.record(o)?;
        ev.wait_on(s)
    }

    unsafe fn memcpy_htod_async(
        &self,
        stream: &RawStream,
        dst: DevicePtr,
        src: *const u8,
        size: u64,
    ) -> Result<()> {
        let src = SendPtr(src as usize);
        self.stream(stream)?.submit(Box::new(move || {
            let src = src;
            // SAFETY: the caller keeps `src` valid until the stream reaches this copy; `dst`
            // is kept alive by the core for as long.
            unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, size as usize) }
        }))
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        stream: &RawStream,
        dst: *mut u8,
        src: DevicePtr,
        size: u64,
    ) -> Result<()> {
        let dst = SendPtr(dst as usize);
        self.stream(stream)?.submit(Box::new(move || {
            let dst = dst;
            // SAFETY: as in `memcpy_htod_async`, the other way round.
            unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, size as usize) }
        }))
    }

    fn memcpy_dtod_async(
        &self,
        stream: &RawStream,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
    ) -> Result<()> {
        self.stream(stream)?.submit(Box::new(move || {
            // SAFETY: both ranges lie in allocations the core keeps alive until the stream
            // reaches this copy.
            unsafe { std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, size as usize) }
        }))
    }

    fn memset_async(&self, stream: &RawStream, dst: DevicePtr, value: u8, size: u64) -> Result<()> {
        self.stream(stream)?.submit(Box::new(move || {
            // SAFETY: the range lies in an allocation the core keeps alive until then.
            unsafe { std::ptr::write_bytes(dst.0 as *mut u8, value, size as usize) }
        }))
    }

    fn host_callback(&self, stream: &RawStream, f: HostFn) -> Result<()> {
        self.stream(stream)?.submit(f)
    }

    fn create_event(&self) -> Result<RawEvent> {
        Ok(Box::new(CpuEvent::default()))
    }

    fn destroy_event(&self, _event: RawEvent) {}

    fn record_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()> {
        self.event(event)?.record(self.stream(stream)?)
    }

    fn event_status(&self, event: &RawEvent) -> Result<EventStatus> {
        Ok(if self.event(event)?.is_complete() {
            EventStatus::Complete
        } else {
            EventStatus::Pending
        })
    }

    fn stream_wait_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()> {
        let (s, e) = (self.stream(stream)?, self.event(event)?);
        match s {
            // The inline stream runs what follows at once, so it must wait now.
            CpuStream::Inline => {
                e.synchronize();
                Ok(())
            }
            CpuStream::Queue(_) => e.wait_on(s),
        }
    }

    fn event_synchronize(&self, event: &RawEvent) -> Result<()> {
        self.event(event)?.synchronize();
        Ok(())
    }

    fn times_events(&self) -> bool {
        true
    }

    fn event_elapsed_ns(&self, start: &RawEvent, end: &RawEvent) -> Result<i64> {
        let start = self
            .event(start)?
            .reached_at()
            .map_err(|e| e.context("start"))?;
        let end = self
            .event(end)?
            .reached_at()
            .map_err(|e| e.context("end"))?;
        Ok(match end.checked_duration_since(start) {
            Some(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            None => -i64::try_from(start.duration_since(end).as_nanos()).unwrap_or(i64::MAX),
        })
    }

    fn synchronize_all(&self) -> Result<()> {
        let live: Vec<Arc<WorkQueue>> = self
            .queues
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for q in live {
            q.synchronize();
        }
        Ok(())
    }
}

fn meminfo(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The machine's memory; read once per process (it does not change, and reading `/proc` is
/// most of what creating a runtime costs).
fn physical_memory() -> u64 {
    static TOTAL: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| meminfo("MemTotal:").unwrap_or(0))
}

fn available_memory() -> u64 {
    meminfo("MemAvailable:").unwrap_or(0)
}

/// The CPU's model name, read once per process (as [`physical_memory`]).
fn cpu_model_name() -> String {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(read_cpu_model_name).clone()
}

fn read_cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}
