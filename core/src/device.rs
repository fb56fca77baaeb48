//! Devices: a platform and an ordinal, with the executor that drives it, its memory
//! allocator and its default stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::memory::{
    Buffer, BufferPool, DeviceAllocator, DevicePtr, DirectAllocator, MemoryStats, RawAllocator,
    StreamOrder, Suballocator, SuballocatorOptions, MARKER_EVERY,
};
use crate::platform::{DeviceDescription, Platform, PlatformInfo, RawStream, StreamExecutor};
use crate::plugin::kernel_state::KernelStates;
use crate::stream::{AsyncError, Event, Stream, WeakAsyncError};
use crate::tensor::Tensor;
use crate::trace::{traced, SpanKind, Tracer};

/// A platform as the runtime holds it.
pub struct PlatformEntry {
    /// What the platform says about itself: its name, device type, priority, vendor.
    pub info: PlatformInfo,
    /// The implementation (the built-in `HOST`, a plugin's adapter, or a host's own).
    pub platform: Arc<dyn Platform>,
    /// Who registered it: `built-in` or `plugin 'NAME'`.
    pub owner: String,
    /// True while this platform is the one `TYPE:i` resolves to.
    pub(crate) active: AtomicBool,
}

impl PlatformEntry {
    /// Whether this platform is the one its device type resolves to (`GPU:0`): the one of
    /// highest priority among the platforms of that type.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }
}

/// A device's properties, as the C API reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProperties {
    /// [`Device::name`]: `TYPE:i` while its platform is active, else `PLATFORM:i`.
    pub name: String,
    /// The device type (`CPU`, `GPU`).
    pub device_type: String,
    /// The platform's name (`HOST`, `SIM`).
    pub platform: String,
    /// The device's number within its platform.
    pub ordinal: usize,
    /// The platform's priority among the platforms of its device type.
    pub priority: i32,
    /// Whether the platform is the active one of its type ([`PlatformEntry::is_active`]).
    pub is_active_platform: bool,
    /// Whether device memory is host memory (the CPU's is; SIM's is not).
    pub host_visible: bool,
    /// The memory limit if one is set (see [`Device::set_memory_limit`]), else the device's
    /// physical memory.
    pub total_memory: u64,
    /// What the device says about itself (hardware name, vendor, PCI bus, compute units).
    pub description: DeviceDescription,
}

/// Raw allocations from an executor, for the suballocator.
struct ExecutorMemory(Arc<dyn StreamExecutor>);

impl RawAllocator for ExecutorMemory {
    fn raw_allocate(&self, size: u64) -> Result<DevicePtr> {
        self.0.allocate(size)
    }
    fn raw_deallocate(&self, ptr: DevicePtr, size: u64) {
        self.0.deallocate(ptr, size)
    }
}

/// A plugin device's `device_data` and its default stream's plugin handle: what plugin kernels
/// receive on every launch, looked up once.
#[derive(Clone, Copy)]
pub(crate) struct KernelHandles {
    pub(crate) device: *mut std::ffi::c_void,
    pub(crate) stream: *mut std::ffi::c_void,
}
// SAFETY: opaque plugin handles the core never dereferences; the ABI lets any thread pass them
// back to the plugin.
unsafe impl Send for KernelHandles {}
// SAFETY: as above; they are never written after the device is created.
unsafe impl Sync for KernelHandles {}

/// One device: a platform and an ordinal, with its memory, its default stream and the
/// streams and events made on it.
///
/// Runtimes hand devices out as `Arc<Device>` ([`Runtime::find_device`](crate::Runtime::find_device),
/// [`Runtime::devices`](crate::Runtime::devices)); clone the `Arc` freely. `Send` and `Sync`.
/// A device lives as long as something holds it: a tensor, a buffer, a stream or an `Arc`
/// keeps it (and its plugin's library) alive after its runtime is dropped, and memory,
/// copies and streams keep working. Ops cannot run on it then, and another runtime refuses
/// it (`INVALID_ARGUMENT: ... is a device of another runtime`).
pub struct Device {
    /// Position in the runtime's device list (a key of the dispatch cache).
    index: usize,
    /// The id of the runtime the device belongs to (see [`Device::runtime_id`]).
    runtime: u64,
    /// `TYPE:ordinal` (what addresses it while its platform is the active one of its type).
    name: String,
    /// `PLATFORM:ordinal` (always addresses it).
    qualified: String,
    platform: Arc<PlatformEntry>,
    ordinal: usize,
    executor: Arc<dyn StreamExecutor>,
    allocator: DeviceAllocator,
    /// Small buffers tensors let go of, for the next allocation (see `memory::pool`).
    pool: BufferPool,
    default_stream: RawStream,
    /// The default stream runs work inline (the CPU's).
    default_stream_inline: bool,
    /// For a plugin's device: the handles its kernels receive.
    kernel_handles: Option<KernelHandles>,
    /// Work may be pending on the default stream: set before and again after anything is
    /// enqueued there, cleared by a synchronize of it before it waits.
    default_stream_dirty: AtomicBool,
    /// Synchronizes of the default stream that cleared `default_stream_dirty` and are still
    /// waiting: while one is, a clear flag does not yet mean that the work is done.
    default_stream_syncs: AtomicUsize,
    /// Launches on the default stream and how far it got, for stream-ordered reuse of the
    /// memory they use (see `memory::stream_order`).
    order: StreamOrder,
    /// The first failure of host work the runtime enqueued on the default stream, until a
    /// synchronize of it reports it (see `stream::AsyncError`).
    default_stream_error: AsyncError,
    /// The same for the streams created on the device, for its synchronize.
    owned_stream_errors: Mutex<Vec<WeakAsyncError>>,
    /// Pinned host allocations: address → size.
    host_allocations: Mutex<HashMap<usize, u64>>,
    /// The platform's allocator statistics failed once (said once, as a warning).
    allocator_stats_failed: AtomicBool,
    /// The runtime's tracer: the host's copies and waits on this device are traced.
    tracer: Arc<Tracer>,
    /// The states plugin kernels' `create` made for this device (ABI 1.5).
    kernel_states: KernelStates,
}

/// A device's free and total memory as a runtime sees it (see [`Device::memory_usage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Bytes the runtime could still allocate.
    pub free: u64,
    /// Bytes the runtime may use at all.
    pub total: u64,
}

impl Device {
    pub(crate) fn new(
        runtime: u64,
        index: usize,
        platform: Arc<PlatformEntry>,
        ordinal: usize,
        memory_limit: Option<u64>,
        tracer: Arc<Tracer>,
    ) -> Result<Device> {
        let name = format!("{}:{ordinal}", platform.info.device_type);
        let executor = platform.platform.create_executor(ordinal).map_err(|e| {
            e.context(format!(
                "creating device {ordinal} of platform {}",
                platform.info.name
            ))
        })?;
        let default_stream = executor
            .create_default_stream()
            .map_err(|e| e.context(format!("creating the default stream of {name}")))?;
        let default_stream_inline = executor.stream_is_synchronous(&default_stream);
        let kernel_handles = executor
            .plugin_handles(&default_stream)
            .map(|(device, stream)| KernelHandles { device, stream });
        let raw = Arc::new(ExecutorMemory(executor.clone()));
        let allocator = if platform.info.use_suballocator {
            DeviceAllocator::Sub(Suballocator::new(
                raw,
                SuballocatorOptions {
                    limit: memory_limit,
                    ..SuballocatorOptions::default()
                },
            ))
        } else {
            // The platform opted out (`DPP_PLATFORM_NO_SUBALLOCATOR`): its own allocator sees
            // every request; the core still checks frees, the limit and the statistics.
            DeviceAllocator::Direct(DirectAllocator::new(raw, memory_limit))
        };
        Ok(Device {
            index,
            runtime,
            tracer,
            qualified: format!("{}:{ordinal}", platform.info.name),
            name,
            platform,
            ordinal,
            executor,
            pool: BufferPool::new(allocator.pool_granule()),
            allocator,
            default_stream_inline,
            kernel_handles,
            default_stream,
            default_stream_dirty: AtomicBool::new(false),
            default_stream_syncs: AtomicUsize::new(0),
            allocator_stats_failed: AtomicBool::new(false),
            order: StreamOrder::default(),
            default_stream_error: AsyncError::default(),
            owned_stream_errors: Mutex::new(Vec::new()),
            host_allocations: Mutex::new(HashMap::new()),
            kernel_states: KernelStates::default(),
        })
    }

    /// Position in the runtime's device list.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The id of the runtime the device belongs to: unique in the process, so that dispatch
    /// can refuse another runtime's device without a lock (its `index` means another device
    /// there).
    pub(crate) fn runtime_id(&self) -> u64 {
        self.runtime
    }

    /// The name that addresses this device now: `TYPE:ordinal` (e.g. `GPU:0`) while its
    /// platform is the active one of its type, `PLATFORM:ordinal` (e.g. `SIMCUDA:0`) once a
    /// platform of higher priority took the type over — `GPU:0` then means another device.
    pub fn name(&self) -> &str {
        if self.platform.is_active() {
            &self.name
        } else {
            &self.qualified
        }
    }

    /// `TYPE:ordinal` whether or not the platform is active.
    pub fn type_name(&self) -> &str {
        &self.name
    }

    /// `PLATFORM:ordinal`, e.g. `HOST:0`: always addresses this device.
    pub fn qualified_name(&self) -> String {
        self.qualified.clone()
    }

    pub(crate) fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// The device's number within its platform (`1` for `SIM:1`).
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The platform the device belongs to.
    pub fn platform(&self) -> &PlatformEntry {
        &self.platform
    }

    /// The device type (`CPU`, `GPU`, `SIM`): what specs such as `GPU:0` name.
    pub fn device_type(&self) -> &str {
        &self.platform.info.device_type
    }

    /// Whether the device's memory is host memory (the CPU's is; a discrete device's is not).
    pub fn host_visible(&self) -> bool {
        self.platform.info.host_visible
    }

    /// The device's executor: the raw memory, stream and event interface its platform
    /// implements. For platforms and bindings; hosts use the device, [`Stream`] and [`Event`].
    pub fn executor(&self) -> &Arc<dyn StreamExecutor> {
        &self.executor
    }

    /// The default stream's raw handle.
    pub(crate) fn default_raw_stream(&self) -> &RawStream {
        &self.default_stream
    }

    /// For a plugin's device: its `device_data` and default stream handle, for kernels.
    #[inline]
    pub(crate) fn kernel_handles(&self) -> Option<KernelHandles> {
        self.kernel_handles
    }

    /// The states of plugin kernels on this device (ABI 1.5).
    pub(crate) fn kernel_states(&self) -> &KernelStates {
        &self.kernel_states
    }

    /// The device's name, type, platform, priority, memory and description, in one value.
    pub fn properties(&self) -> DeviceProperties {
        let description = self.executor.description().clone();
        DeviceProperties {
            name: self.name().to_string(),
            device_type: self.platform.info.device_type.clone(),
            platform: self.platform.info.name.clone(),
            ordinal: self.ordinal,
            priority: self.platform.info.priority,
            is_active_platform: self.platform.is_active(),
            host_visible: self.platform.info.host_visible,
            total_memory: self.allocator.limit().unwrap_or(description.total_memory),
            description,
        }
    }

    /// Allocates `size` bytes of device memory, for any use: a user stream or a synchronous
    /// copy may write it next.
    #[inline]
    pub fn allocate(self: &Arc<Self>, size: u64) -> Result<Arc<Buffer>> {
        // A pooled buffer a kernel used may still be in use by the default stream (see
        // `memory::stream_order`): it is handed out only if the stream has reached every launch
        // counted so far — checked after taking it, since a launch counted before the buffer
        // was pooled is then visible — else it goes back for kernel outputs.
        if let Some(b) = self.pool.take(size) {
            if !b.stream_used() || self.order.pending().is_none() {
                b.clear_stream_use();
                return Ok(b);
            }
            // Refused by a full pool: dropped, its free waits for the stream.
            drop(self.pool.put(b));
        }
        self.allocate_new(size)
    }

    /// Allocates `size` bytes for the output of a kernel about to run on this device: written
    /// next by work on the default stream (or synchronously, after it), so a pooled buffer that
    /// earlier work on the stream may still use is as good as a new one.
    #[inline]
    pub(crate) fn allocate_output(self: &Arc<Self>, size: u64) -> Result<Arc<Buffer>> {
        match self.pool.take(size) {
            Some(b) => Ok(b),
            None => self.allocate_new(size),
        }
    }

    /// Allocates from the allocator; before failing, gives back what the pool holds and what
    /// waits for the default stream.
    fn allocate_new(self: &Arc<Self>, size: u64) -> Result<Arc<Buffer>> {
        let mut r = self.allocator.allocate(size);
        if r.is_err() && self.pool.flush() {
            r = self.allocator.allocate(size);
        }
        if r.is_err() && self.order.has_deferred() {
            // Frees wait for the stream: let it finish them.
            self.synchronize_default_stream_now()?;
            r = self.allocator.allocate(size);
        }
        let ptr =
            r.map_err(|e| e.context(format!("allocating {size} bytes on {}", self.name())))?;
        Ok(Arc::new(Buffer::new(self.clone(), ptr, size)))
    }

    /// The pool of small buffers that tensors let go of.
    pub(crate) fn buffer_pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Frees the pooled buffers and pools nothing more (the runtime is being destroyed; pooled
    /// buffers hold their device, which would otherwise never be dropped).
    pub(crate) fn close_buffer_pool(&self) {
        self.pool.close();
    }

    /// Frees memory a kernel on the default stream used, once the stream is past it.
    pub(crate) fn free_in_stream_order(&self, ptr: DevicePtr) {
        match self.order.pending() {
            Some(count) => self.order.defer(count, ptr),
            None => self.free(ptr),
        }
    }

    /// Frees what waited for the default stream and need wait no more.
    fn free_due(&self) {
        if self.order.has_due() {
            for ptr in self.order.take_due() {
                self.free(ptr);
            }
        }
    }

    pub(crate) fn free(&self, ptr: DevicePtr) {
        // A failure here means the core handed back an address it did not get: a bug, which
        // the suballocator reports; freeing must not panic inside a destructor.
        if let Err(e) = self.allocator.deallocate(ptr) {
            crate::log::error(&format!("{}: {e}", self.name()));
        }
    }

    /// How much of the device's memory this runtime could still allocate, and how much it may
    /// use at all (TensorFlow's `DeviceMemoryUsage`): the platform's free memory (which counts
    /// other users of the device) plus what the runtime holds cached but unused, and the
    /// platform's total; both capped by the device's memory limit, if one is set
    /// ([`Device::set_memory_limit`]). On the CPU
    /// device, the host's available and total memory. `UNIMPLEMENTED` for a plugin device whose
    /// plugin does not report its memory (no `memory_usage`).
    pub fn memory_usage(&self) -> Result<MemoryUsage> {
        let (platform_free, platform_total) = self
            .executor
            .memory_usage()
            .map_err(|e| e.context(format!("the memory usage of {}", self.name())))?;
        let stats = self.allocator.stats();
        let cached = stats.bytes_reserved.saturating_sub(stats.bytes_in_use);
        let mut usage = MemoryUsage {
            free: platform_free.saturating_add(cached).min(platform_total),
            total: platform_total,
        };
        if let Some(limit) = self.allocator.limit() {
            usage.total = usage.total.min(limit);
            usage.free = usage.free.min(limit.saturating_sub(stats.bytes_in_use));
        }
        Ok(usage)
    }

    /// The allocator's statistics for this device: bytes in use, reserved from the platform,
    /// peak, allocation counts (see [`MemoryStats`]).
    pub fn memory_stats(&self) -> MemoryStats {
        self.pool.flush();
        let mut stats = self.allocator.stats();
        if matches!(self.allocator, DeviceAllocator::Direct(_)) {
            // The platform allocates for itself: what it holds beyond what the host asked
            // (its cache) and its largest free block only it knows.
            match self.executor.allocator_figures() {
                Some(Ok(f)) => {
                    stats.bytes_reserved = f.bytes_reserved.max(stats.bytes_in_use);
                    stats.largest_free_block = f.largest_free_block;
                }
                // A plugin's defect, said once per device: stats may be polled often.
                Some(Err(e)) if !self.allocator_stats_failed.swap(true, Ordering::Relaxed) => {
                    crate::log::warn(&format!(
                        "{}: allocator_stats failed, the host's own figures stand (said once): {e}",
                        self.name()
                    ));
                }
                Some(Err(_)) => {}
                None => {}
            }
        }
        stats
    }

    /// Sets the most bytes the runtime's allocator for this device may hold from its platform
    /// (`None`: no limit), at any time and from any thread — TensorFlow's
    /// `set_logical_device_configuration(memory_limit=...)`, PyTorch's
    /// `set_per_process_memory_fraction`. On a CPU device it replaces
    /// [`RuntimeOptions::cpu_memory_limit`](crate::RuntimeOptions::cpu_memory_limit), its
    /// initial value; other devices start without a limit.
    ///
    /// The limit caps the caching suballocator's regions (in use or cached), or, on a platform
    /// that opted out of it (`DPP_PLATFORM_NO_SUBALLOCATOR`), the bytes in use. An allocation
    /// that would take the allocator past it fails with `RESOURCE_EXHAUSTED` naming the device
    /// and the limit. A limit below what is held now is allowed: cached free memory is given
    /// back to the platform as far as needed to meet it, memory in use is never touched, and
    /// allocations that need more memory from the platform fail until enough is freed.
    /// [`Device::memory_usage`], [`Device::memory_stats`] (`bytes_limit`) and
    /// [`Device::properties`] (`total_memory`) follow it. Allocations on other threads see the
    /// old or the new limit (an allocation already asking the platform for memory under the old
    /// one completes). `INVALID_ARGUMENT` for `Some(0)`: use `None` for no limit.
    pub fn set_memory_limit(&self, limit: Option<u64>) -> Result<()> {
        if limit == Some(0) {
            return Err(Error::invalid_argument(format!(
                "{}: a memory limit of 0 bytes; use None for no limit",
                self.name()
            )));
        }
        self.allocator.set_limit(limit);
        if limit.is_some() {
            // Pooled buffers are live allocations of the allocator, so they count as held:
            // flushed, their chunks are free again and the regions they kept can go back to
            // the platform, so that a lowered limit can be met. (Without the flush they would
            // only go when an allocation fails; the pool refills by itself.)
            if self.pool.flush() {
                self.allocator.trim_to_limit();
            }
        }
        Ok(())
    }

    /// The limit [`Device::set_memory_limit`] set (or `cpu_memory_limit` for a CPU device), if
    /// any.
    pub fn memory_limit(&self) -> Option<u64> {
        self.allocator.limit()
    }

    /// Returns cached, wholly free memory regions to the platform; the bytes released.
    pub fn release_cached_memory(&self) -> u64 {
        self.pool.flush();
        self.allocator.release_cached()
    }

    /// Allocates pinned host memory of this device's platform.
    pub fn host_allocate(&self, size: u64) -> Result<*mut u8> {
        let p = self.executor.host_allocate(size)?;
        self.host_allocations.lock().insert(p as usize, size);
        Ok(p)
    }

    /// Frees memory from [`Device::host_allocate`]. Safe: a pointer this device did not hand
    /// out (or freed already) is refused without being touched.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    pub fn host_free(&self, ptr: *mut u8) -> Result<()> {
        let size = self
            .host_allocations
            .lock()
            .remove(&(ptr as usize))
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "{ptr:p} is not host memory allocated by {} (or was freed already)",
                    self.name()
                ))
            })?;
        // SAFETY: the pointer came from this executor's `host_allocate(size)` and was removed
        // from the table, so it is freed once.
        unsafe { self.executor.host_deallocate(ptr, size) };
        Ok(())
    }

    /// The device's default stream. On the CPU it runs work inline on the calling thread.
    pub fn default_stream(self: &Arc<Self>) -> Stream {
        Stream::default_of(self.clone())
    }

    /// A new stream on the device: an ordered queue of work that runs asynchronously (on a
    /// worker thread for the CPU and for plugins whose streams run on host threads), destroyed
    /// when dropped (after its work). Ops run on the device's default stream, not on these.
    pub fn create_stream(self: &Arc<Self>) -> Result<Stream> {
        Stream::create(self.clone())
    }

    /// A new event on the device, to record in its streams ([`Event::record`]) and wait for
    /// from any device's stream or from the host.
    pub fn create_event(self: &Arc<Self>) -> Result<Event> {
        Event::create(self.clone())
    }

    /// Waits for all work on all streams of the device. Returns the first failure on any of
    /// them since it was last reported (see [`Stream::synchronize`]).
    pub fn synchronize(&self) -> Result<()> {
        traced(self, "synchronize device", SpanKind::Wait, 0, || {
            self.synchronize_default_stream_now()?;
            self.executor.synchronize_all()?;
            // Failures of host work on the streams created here, reported by this call instead.
            let mut live = Vec::new();
            self.owned_stream_errors
                .lock()
                .retain(|e| e.upgrade().map(|a| live.push(a)).is_some());
            live.iter().try_for_each(AsyncError::take)
        })
    }

    /// Notes a stream created on this device, whose failures its synchronize reports too.
    pub(crate) fn track_stream_error(&self, error: &AsyncError) {
        let mut errors = self.owned_stream_errors.lock();
        errors.retain(|e| e.upgrade().is_some());
        errors.push(error.downgrade());
    }

    /// Waits for the work on the default stream (what synchronous copies are ordered after).
    ///
    /// Costs two loads when nothing was enqueued there since the last synchronize finished.
    /// Both are needed: a synchronize clears the flag before it waits, so while another thread
    /// is still waiting, a clear flag does not mean that this thread's work is done.
    pub(crate) fn synchronize_default_stream(&self) -> Result<()> {
        if !self.default_stream_dirty.load(Ordering::Acquire)
            && self.default_stream_syncs.load(Ordering::Acquire) == 0
        {
            return Ok(());
        }
        self.synchronize_default_stream_now()
    }

    /// Waits for the work on the default stream, whether or not any was noted, and frees what
    /// waited for it.
    pub(crate) fn synchronize_default_stream_now(&self) -> Result<()> {
        /// Counts a synchronize in flight from before it clears the flag until its wait ended
        /// (however it ends).
        struct InFlight<'a>(&'a AtomicUsize);
        impl Drop for InFlight<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.default_stream_syncs.fetch_add(1, Ordering::AcqRel);
        let in_flight = InFlight(&self.default_stream_syncs);
        // Cleared before the wait: what is enqueued from now on sets it again.
        self.default_stream_dirty.store(false, Ordering::Release);
        let count = self.order.current();
        let result = self.executor.synchronize_stream(&self.default_stream);
        // The stream has run everything counted before the wait, error or not (an executor's
        // synchronize returns the stream's error after waiting).
        self.order.reach(count);
        drop(in_flight);
        self.free_due();
        // Then a failure of host work the runtime enqueued there (kept for the next
        // synchronize if the executor had its own to report).
        result.and_then(|()| self.default_stream_error.take())
    }

    /// Where host work on the default stream records its failure.
    pub(crate) fn default_stream_error(&self) -> &AsyncError {
        &self.default_stream_error
    }

    /// Notes a kernel just enqueued on the default stream that uses the tensors in `used`:
    /// their memory is then reused and freed in stream order (see `memory::stream_order`).
    /// Call it after the enqueue succeeded.
    #[inline]
    pub(crate) fn launched_on_default_stream(&self, used: &[&[Tensor]]) {
        for tensors in used {
            for t in *tensors {
                t.buffer().mark_stream_use();
            }
        }
        let count = self.order.launched();
        // Again (it was set before the enqueue): a synchronize that ran in between cleared
        // it, maybe before this op was enqueued.
        self.default_stream_dirty.store(true, Ordering::Release);
        // A marker only while a free waits for one: nothing else needs `reached` to move while
        // launches continue (a raw allocation takes a stream-used buffer only once the stream
        // reached every launch, which a marker behind older launches does not show), and a
        // marker costs the host a few launches' time on a plugin's stream.
        if count.is_multiple_of(MARKER_EVERY) && self.order.has_deferred() {
            let marker = Box::new(self.order.marker(count));
            if let Err(e) = self.executor.host_callback(&self.default_stream, marker) {
                // Nothing is lost: what waits for this count waits for a later marker or a
                // synchronize.
                crate::log::warn(&format!(
                    "{}: cannot enqueue a stream-order marker on the default stream: {e}",
                    self.name()
                ));
            }
        }
        self.free_due();
    }

    /// Notes that work is about to be enqueued on the default stream (unless it runs inline).
    pub(crate) fn default_stream_used(&self) {
        if !self.default_stream_inline {
            self.default_stream_dirty.store(true, Ordering::Release);
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({} = {})", self.name, self.qualified_name())
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Also frees what waits for the default stream.
        let _ = self.synchronize();
        // Its kernels' states, now that no work uses them, before the plugin destroys the
        // device (destroy_device comes with the executor).
        self.kernel_states.release_all();
        let default_stream = std::mem::replace(&mut self.default_stream, Box::new(()));
        self.executor.destroy_stream(default_stream);
        for (p, size) in self.host_allocations.get_mut().drain() {
            // SAFETY: each pointer came from this executor's `host_allocate(size)`; the host
            // cannot use it once its device is gone.
            unsafe { self.executor.host_deallocate(p as *mut u8, size) };
        }
    }
}

pub(crate) fn set_active(entry: &PlatformEntry, active: bool) {
    entry.active.store(active, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::{Device, MARKER_EVERY};
    use crate::runtime::{Runtime, RuntimeOptions};
    use crate::tensor::{DType, Tensor};

    fn runtime() -> Runtime {
        Runtime::new(RuntimeOptions {
            discover_from_env: false,
            ..Default::default()
        })
        .expect("runtime")
    }

    /// Memory a kernel on the default stream used is reused in stream order: a dropped buffer
    /// becomes the next kernel output at once, but no other allocation takes it, and memory the
    /// pool does not keep is freed only once the stream got there (a marker or a synchronize).
    #[test]
    fn stream_used_memory_is_reused_and_freed_in_stream_order() {
        let rt = runtime();
        let cpu = rt.find_device("CPU").expect("CPU");
        let active = |d: &Device| d.allocator.stats().active_allocs;
        let bytes = |n: i64| Tensor::unwritten(&cpu, DType::U8, &[n]).expect("alloc");
        let launch = |t: &Tensor| cpu.launched_on_default_stream(&[std::slice::from_ref(t)]);
        let b = bytes(64);
        let ptr = b.buffer().ptr();
        launch(&b);
        drop(b); // back to the pool
        let other = cpu.allocate(64).expect("alloc");
        assert_ne!(other.ptr(), ptr, "a raw allocation waits for the stream");
        let output = cpu.allocate_output(64).expect("alloc");
        assert_eq!(output.ptr(), ptr, "a kernel output reuses it at once");
        let output = Tensor::from_buffer(output, DType::U8, &[64]).expect("tensor");

        // Too large for the pool: the free waits for the stream.
        let big = bytes(4 << 20);
        launch(&big);
        let before = active(&cpu);
        drop(big);
        assert_eq!(active(&cpu), before, "freed only once the stream got there");
        cpu.synchronize().expect("sync");
        assert_eq!(active(&cpu), before - 1, "freed by the synchronize");

        // While a free waits, a marker every MARKER_EVERY launches (the CPU's stream runs it
        // inline) lets the launch after it free what waited.
        let big = bytes(4 << 20);
        launch(&big);
        drop(big);
        let before = active(&cpu);
        for _ in 0..MARKER_EVERY {
            launch(&output);
        }
        assert_eq!(active(&cpu), before - 1, "freed after the marker");

        // Once the stream reached every launch, raw allocations take pooled buffers again,
        // unmarked.
        let ptr = output.buffer().ptr();
        drop(output);
        cpu.synchronize().expect("sync");
        let again = cpu.allocate(64).expect("alloc");
        assert_eq!(again.ptr(), ptr);
        assert!(!again.stream_used());
        drop((other, again));
    }

    /// Pooled buffers are held memory: setting a limit frees them at once, so that the regions
    /// they kept go back to the platform (not only when an allocation would fail).
    #[test]
    fn setting_a_limit_flushes_the_buffer_pool() {
        let rt = runtime();
        let cpu = rt.find_device("CPU").expect("CPU");
        let before = cpu.memory_stats();
        let b = cpu.allocate(1024).expect("alloc");
        assert!(cpu.buffer_pool().put(b).is_none(), "pooled");
        let held = cpu.allocator.stats();
        assert_eq!(held.active_allocs, before.active_allocs + 1);
        assert!(held.bytes_reserved > before.bytes_reserved);
        cpu.set_memory_limit(Some(before.bytes_reserved.max(256)))
            .expect("limit");
        let after = cpu.allocator.stats();
        assert_eq!(
            after.active_allocs, before.active_allocs,
            "the pool was flushed"
        );
        assert!(
            after.bytes_reserved <= before.bytes_reserved.max(256),
            "{after:?}"
        );
        assert!(cpu.buffer_pool().take(1024).is_none());
        let e = cpu
            .set_memory_limit(Some(0))
            .expect_err("0 is no limit in C only");
        assert_eq!(e.code, crate::Code::InvalidArgument);
        assert_eq!(cpu.memory_limit(), Some(before.bytes_reserved.max(256)));
    }

    /// The pool without a lock: threads taking and keeping buffers at once lose none and free
    /// none twice (every allocation is back once the pool is flushed), and a closed pool keeps
    /// nothing.
    #[test]
    fn the_buffer_pool_is_shared_by_threads_and_closes() {
        let rt = runtime();
        let cpu = rt.find_device("CPU").expect("CPU");
        let before = cpu.memory_stats().active_allocs;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let cpu = &cpu;
                s.spawn(move || {
                    for i in 0..2000u64 {
                        let size = 64 * (1 + (t + i) % 3);
                        let b = cpu.allocate(size).expect("alloc");
                        assert_eq!(b.size(), size);
                        drop(cpu.buffer_pool().put(b));
                    }
                });
            }
        });
        let pooled = cpu.buffer_pool().take(64).expect("a pooled buffer");
        drop(cpu.buffer_pool().put(pooled));
        assert_eq!(
            cpu.memory_stats().active_allocs,
            before,
            "flushed: nothing held"
        );

        cpu.close_buffer_pool();
        let b = cpu.allocate(64).expect("alloc");
        let refused = cpu.buffer_pool().put(b);
        assert!(refused.is_some(), "a closed pool keeps nothing");
        assert!(cpu.buffer_pool().take(64).is_none());
    }
}
