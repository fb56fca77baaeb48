//! Devices: a platform and an ordinal, with the executor that drives it, its memory
//! allocator and its default stream.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::memory::{
    Buffer, BufferPool, DeviceAllocator, DevicePtr, DirectAllocator, MemoryStats, RawAllocator,
    Suballocator, SuballocatorOptions,
};
use crate::platform::{DeviceDescription, Platform, PlatformInfo, RawStream, StreamExecutor};
use crate::stream::{Event, Stream};

/// A platform as the runtime holds it.
pub struct PlatformEntry {
    pub info: PlatformInfo,
    pub platform: Arc<dyn Platform>,
    /// Who registered it: `built-in` or `plugin 'NAME'`.
    pub owner: String,
    /// True while this platform is the one `TYPE:i` resolves to.
    pub(crate) active: AtomicBool,
}

impl PlatformEntry {
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }
}

/// A device's properties, as the C API reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceProperties {
    pub name: String,
    pub device_type: String,
    pub platform: String,
    pub ordinal: usize,
    pub priority: i32,
    pub is_active_platform: bool,
    pub host_visible: bool,
    /// The memory limit if one is set, else the device's physical memory.
    pub total_memory: u64,
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

/// How many ops of plugin kernels make one keep-alive batch (see [`KeepAlive`]). Small, so
/// that the outputs of eager ops come back to the buffer pool (whose depth per size class is
/// 32) soon after the stream passed them, instead of being freed for real: one host callback
/// per batch is cheaper than an allocation per op.
const KEEP_ALIVE_BATCH_OPS: usize = 8;
/// How many of the latest keep-alive entries a launch's buffers are compared with.
const KEEP_ALIVE_DEDUP_WINDOW: usize = 4;

/// The buffers of work enqueued on the default stream that the stream may not have reached
/// yet (plugin kernels), kept alive without a queue entry per op:
///
/// - every op's buffers are appended to `filling`, after the op was enqueued;
/// - a synchronize of the default stream takes everything held before it waits and releases
///   it after (what was appended before the synchronize began was enqueued before it, so the
///   stream has run it);
/// - so that a host that never synchronizes does not hold memory without bound, every
///   [`KEEP_ALIVE_BATCH_OPS`] ops the filling batch is sealed with a sequence number and ONE
///   host callback is enqueued behind it that records the number in `Device::keep_alive_reached`
///   (callbacks run in stream order, after the ops before them). The next kernel launch
///   releases the sealed batches whose number the stream reached (so frees happen on the host
///   thread, not on the plugin's worker, and the callback itself is trivial); a synchronize
///   releases everything. Released buffers nothing else holds go back to the buffer pool (an
///   eager op's output, dropped by the host while in flight, becomes a later op's output).
///
/// A batch sealed later than another was sealed after every op of the earlier one had been
/// enqueued, so reaching any callback releases every batch sealed before it too; a callback the
/// plugin refused only delays the release to the next callback or synchronize.
#[derive(Default)]
struct KeepAlive {
    filling: Vec<Arc<Buffer>>,
    filling_ops: usize,
    /// Sealed batches, oldest first, with their sequence numbers (from 1).
    sealed: VecDeque<(u64, Vec<Arc<Buffer>>)>,
    last_seq: u64,
}

/// What a synchronize took from a [`KeepAlive`], released once the stream is drained.
type Held = (Vec<Arc<Buffer>>, VecDeque<(u64, Vec<Arc<Buffer>>)>);

/// Lets go of kept-alive buffers the stream has passed: the last reference to a small buffer
/// goes back to its device's buffer pool (like a tensor's), for the next op's outputs.
fn release_kept(buffers: impl IntoIterator<Item = Arc<Buffer>>) {
    for b in buffers {
        b.recycle();
    }
}

/// Releases what a synchronize took, once the stream has run it.
fn release_held((filling, sealed): Held) {
    release_kept(filling);
    for (_, batch) in sealed {
        release_kept(batch);
    }
}

/// One device.
pub struct Device {
    /// Position in the runtime's device list (a key of the dispatch cache).
    index: usize,
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
    memory_limit: Option<u64>,
    default_stream: RawStream,
    /// Work may be pending on the default stream (set before anything is enqueued there).
    default_stream_dirty: AtomicBool,
    /// Buffers of plugin kernels the default stream may not have reached yet.
    keep_alive: Mutex<KeepAlive>,
    /// The highest keep-alive batch number the default stream has reached.
    keep_alive_reached: Arc<AtomicU64>,
    /// Pinned host allocations: address → size.
    host_allocations: Mutex<HashMap<usize, u64>>,
}

impl Device {
    pub(crate) fn new(
        index: usize,
        platform: Arc<PlatformEntry>,
        ordinal: usize,
        memory_limit: Option<u64>,
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
            qualified: format!("{}:{ordinal}", platform.info.name),
            name,
            platform,
            ordinal,
            executor,
            pool: BufferPool::new(allocator.pool_granule()),
            allocator,
            memory_limit,
            default_stream,
            default_stream_dirty: AtomicBool::new(false),
            keep_alive: Mutex::new(KeepAlive::default()),
            keep_alive_reached: Arc::new(AtomicU64::new(0)),
            host_allocations: Mutex::new(HashMap::new()),
        })
    }

    /// Position in the runtime's device list.
    pub fn index(&self) -> usize {
        self.index
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

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    pub fn platform(&self) -> &PlatformEntry {
        &self.platform
    }

    pub fn device_type(&self) -> &str {
        &self.platform.info.device_type
    }

    pub fn host_visible(&self) -> bool {
        self.platform.info.host_visible
    }

    pub fn executor(&self) -> &Arc<dyn StreamExecutor> {
        &self.executor
    }

    /// The default stream's raw handle (kernels enqueue there).
    pub(crate) fn default_raw_stream(&self) -> &RawStream {
        &self.default_stream
    }

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
            total_memory: self.memory_limit.unwrap_or(description.total_memory),
            description,
        }
    }

    /// Allocates `size` bytes of device memory.
    #[inline]
    pub fn allocate(self: &Arc<Self>, size: u64) -> Result<Arc<Buffer>> {
        if let Some(b) = self.pool.take(size) {
            return Ok(b);
        }
        let ptr = match self.allocator.allocate(size) {
            // Memory the pool holds is free: give it back before failing.
            Err(_) if self.pool.flush() => self.allocator.allocate(size),
            r => r,
        }
        .map_err(|e| e.context(format!("allocating {size} bytes on {}", self.name())))?;
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

    pub(crate) fn free(&self, ptr: DevicePtr) {
        // A failure here means the core handed back an address it did not get: a bug, which
        // the suballocator reports; freeing must not panic inside a destructor.
        if let Err(e) = self.allocator.deallocate(ptr) {
            crate::log::error(&format!("{}: {e}", self.name()));
        }
    }

    pub fn memory_stats(&self) -> MemoryStats {
        self.pool.flush();
        self.allocator.stats()
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

    pub fn create_stream(self: &Arc<Self>) -> Result<Stream> {
        Stream::create(self.clone())
    }

    pub fn create_event(self: &Arc<Self>) -> Result<Event> {
        Event::create(self.clone())
    }

    /// Waits for all work on all streams of the device.
    pub fn synchronize(&self) -> Result<()> {
        self.default_stream_dirty.store(false, Ordering::Release);
        let held = self.take_kept_alive();
        let result = self.executor.synchronize_stream(&self.default_stream);
        // The stream has run everything enqueued before `held` was taken, error or not (an
        // executor's synchronize returns the stream's error after waiting).
        release_held(held);
        result?;
        self.executor.synchronize_all()
    }

    /// Waits for the work on the default stream (what synchronous copies are ordered after).
    ///
    /// Costs nothing when nothing was enqueued there since the last time.
    pub(crate) fn synchronize_default_stream(&self) -> Result<()> {
        if !self.default_stream_dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        self.synchronize_default_stream_now()
    }

    /// Waits for the work on the default stream, whether or not any was noted, and releases
    /// what was kept alive for it.
    pub(crate) fn synchronize_default_stream_now(&self) -> Result<()> {
        let held = self.take_kept_alive();
        let result = self.executor.synchronize_stream(&self.default_stream);
        release_held(held);
        result
    }

    /// Takes everything the keep-alive list holds (to release once the stream is drained).
    fn take_kept_alive(&self) -> Held {
        let mut ka = self.keep_alive.lock();
        ka.filling_ops = 0;
        (
            std::mem::take(&mut ka.filling),
            std::mem::take(&mut ka.sealed),
        )
    }

    /// Keeps `buffers` alive until the default stream has run the op just enqueued there that
    /// uses them. Call it after the enqueue succeeded. See [`KeepAlive`].
    pub(crate) fn keep_alive_on_default_stream<'a>(
        &self,
        buffers: impl Iterator<Item = &'a Arc<Buffer>>,
    ) {
        let reached = self.keep_alive_reached.load(Ordering::Acquire);
        let mut ka = self.keep_alive.lock();
        // A buffer the last few entries of the filling batch hold already (an input launch
        // after launch uses, a weight, an op reading one tensor twice) needs no second entry:
        // the batch is released as a whole, after this op too. Saves two reference-count
        // updates per repeated buffer.
        let recent = ka.filling.len().saturating_sub(KEEP_ALIVE_DEDUP_WINDOW);
        for b in buffers {
            if !ka.filling[recent..].iter().any(|k| Arc::ptr_eq(k, b)) {
                ka.filling.push(b.clone());
            }
        }
        ka.filling_ops += 1;
        // Batches the stream has passed (usually none or one; allocates only for more).
        let mut done: SmallVec<[Vec<Arc<Buffer>>; 2]> = SmallVec::new();
        while ka.sealed.front().is_some_and(|(seq, _)| *seq <= reached) {
            if let Some((_, batch)) = ka.sealed.pop_front() {
                done.push(batch);
            }
        }
        let seal = if ka.filling_ops >= KEEP_ALIVE_BATCH_OPS {
            let batch = std::mem::replace(
                &mut ka.filling,
                Vec::with_capacity(KEEP_ALIVE_BATCH_OPS * 3),
            );
            ka.filling_ops = 0;
            ka.last_seq += 1;
            let seq = ka.last_seq;
            ka.sealed.push_back((seq, batch));
            Some(seq)
        } else {
            None
        };
        drop(ka);
        // Again (it was set before the enqueue): a synchronize that ran in between cleared
        // it, maybe before this op was enqueued, and the buffers just added must not wait for
        // a synchronize that returns at once.
        self.default_stream_dirty.store(true, Ordering::Release);
        for batch in done {
            release_kept(batch);
        }
        if let Some(seq) = seal {
            let reached = self.keep_alive_reached.clone();
            let marker = Box::new(move || {
                reached.fetch_max(seq, Ordering::AcqRel);
            });
            if let Err(e) = self.executor.host_callback(&self.default_stream, marker) {
                // Nothing is lost: the batch stays held until a later callback or synchronize.
                crate::log::warn(&format!(
                    "{}: cannot enqueue the keep-alive marker on the default stream: {e}",
                    self.name()
                ));
            }
        }
    }

    /// Notes that work is about to be enqueued on the default stream (unless it runs inline).
    pub(crate) fn default_stream_used(&self) {
        if !self.executor.stream_is_synchronous(&self.default_stream) {
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
        // Also releases what the keep-alive list holds (buffers of other devices, since a
        // buffer of this one keeps it alive), after the stream ran it.
        let _ = self.synchronize();
        let default_stream = std::mem::replace(&mut self.default_stream, Box::new(()));
        self.executor.destroy_stream(default_stream);
        for (p, size) in self.host_allocations.lock().drain() {
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
    use crate::runtime::{Runtime, RuntimeOptions};

    use super::KEEP_ALIVE_BATCH_OPS;

    fn runtime() -> Runtime {
        Runtime::new(RuntimeOptions {
            discover_from_env: false,
            ..Default::default()
        })
        .expect("runtime")
    }

    /// Buffers the keep-alive list lets go of go back to the buffer pool, for the next ops'
    /// outputs: after a synchronize, and batch by batch once the stream passed a batch.
    #[test]
    fn kept_alive_buffers_go_back_to_the_pool() {
        let rt = runtime();
        let cpu = rt.find_device("CPU").expect("CPU");
        let b = cpu.allocate(64).expect("alloc");
        let ptr = b.ptr();
        cpu.keep_alive_on_default_stream([&b].into_iter());
        drop(b);
        assert!(cpu.buffer_pool().take(64).is_none(), "still kept alive");
        cpu.synchronize().expect("sync");
        let again = cpu
            .buffer_pool()
            .take(64)
            .expect("pooled after the synchronize");
        assert_eq!(again.ptr(), ptr);
        drop(again);

        // A full batch, then one more launch: the CPU's stream ran the batch's marker inline,
        // so that launch releases the batch.
        let mut ptrs = Vec::new();
        for _ in 0..KEEP_ALIVE_BATCH_OPS {
            let b = cpu.allocate(128).expect("alloc");
            ptrs.push(b.ptr());
            cpu.keep_alive_on_default_stream([&b].into_iter());
        }
        assert!(cpu.buffer_pool().take(128).is_none(), "still kept alive");
        let last = cpu.allocate(128).expect("alloc");
        cpu.keep_alive_on_default_stream([&last].into_iter());
        let mut back = Vec::new();
        while let Some(b) = cpu.buffer_pool().take(128) {
            back.push(b.ptr());
        }
        back.sort_by_key(|p| p.0);
        ptrs.sort_by_key(|p| p.0);
        assert_eq!(back, ptrs, "the batch the stream passed is pooled");
        cpu.synchronize().expect("sync");
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
