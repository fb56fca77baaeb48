//! Devices: a platform and an ordinal, with the executor that drives it, its memory
//! allocator and its default stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::memory::{
    Buffer, DevicePtr, MemoryStats, RawAllocator, Suballocator, SuballocatorOptions,
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

/// One device.
pub struct Device {
    /// Position in the runtime's device list (a key of the dispatch cache).
    index: usize,
    name: String,
    platform: Arc<PlatformEntry>,
    ordinal: usize,
    executor: Arc<dyn StreamExecutor>,
    allocator: Suballocator,
    memory_limit: Option<u64>,
    default_stream: RawStream,
    /// Work may be pending on the default stream (set before anything is enqueued there).
    default_stream_dirty: AtomicBool,
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
        let allocator = Suballocator::new(
            Arc::new(ExecutorMemory(executor.clone())),
            SuballocatorOptions {
                limit: memory_limit,
                ..SuballocatorOptions::default()
            },
        );
        Ok(Device {
            index,
            name,
            platform,
            ordinal,
            executor,
            allocator,
            memory_limit,
            default_stream,
            default_stream_dirty: AtomicBool::new(false),
            host_allocations: Mutex::new(HashMap::new()),
        })
    }

    /// Position in the runtime's device list.
    pub fn index(&self) -> usize {
        self.index
    }

    /// `TYPE:ordinal` of the platform's device type, e.g. `CPU:0`. For a platform that is
    /// not the active one of its type, [`Device::qualified_name`] is what addresses it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `PLATFORM:ordinal`, e.g. `HOST:0`: always addresses this device.
    pub fn qualified_name(&self) -> String {
        format!("{}:{}", self.platform.info.name, self.ordinal)
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
            name: self.name.clone(),
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
    pub fn allocate(self: &Arc<Self>, size: u64) -> Result<Arc<Buffer>> {
        let ptr = self
            .allocator
            .allocate(size)
            .map_err(|e| e.context(format!("allocating {size} bytes on {}", self.name)))?;
        Ok(Arc::new(Buffer::new(self.clone(), ptr, size)))
    }

    pub(crate) fn free(&self, ptr: DevicePtr) {
        // A failure here means the core handed back an address it did not get: a bug, which
        // the suballocator reports; freeing must not panic inside a destructor.
        if let Err(e) = self.allocator.deallocate(ptr) {
            crate::log::error(&format!("{}: {e}", self.name));
        }
    }

    pub fn memory_stats(&self) -> MemoryStats {
        self.allocator.stats()
    }

    /// Returns cached, wholly free memory regions to the platform; the bytes released.
    pub fn release_cached_memory(&self) -> u64 {
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
                    self.name
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
        self.executor.synchronize_stream(&self.default_stream)?;
        self.executor.synchronize_all()
    }

    /// Waits for the work on the default stream (what synchronous copies are ordered after).
    ///
    /// Costs nothing when nothing was enqueued there since the last time.
    pub(crate) fn synchronize_default_stream(&self) -> Result<()> {
        if !self.default_stream_dirty.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        self.executor.synchronize_stream(&self.default_stream)
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
