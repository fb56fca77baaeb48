//! Platforms and the StreamExecutor interface.
//!
//! A [`Platform`] is one implementation of devices: the built-in `HOST` platform (device type
//! `CPU`) or one registered by a plugin. Each of its devices is driven through a
//! [`StreamExecutor`], the per-device interface of DESIGN.md: memory, copies, streams, events,
//! host callbacks and properties. The core builds everything else (suballocation, buffers,
//! tensors, dispatch) on top of these two traits.

use std::any::Any;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::memory::DevicePtr;

/// What a platform says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformInfo {
    /// Unique name, `[A-Z][A-Z0-9_]*` (e.g. `HOST`, `SIM`, `CUDA`).
    pub name: String,
    /// The device type users place on, `[A-Z][A-Z0-9_]*` (e.g. `CPU`, `GPU`).
    pub device_type: String,
    /// Among platforms of one device type, the highest priority is what `TYPE:i` means.
    pub priority: i32,
    /// Who makes the devices (free text, e.g. `devplug`, `NVIDIA`).
    pub vendor: String,
    /// The platform's own version (free text, e.g. `0.1.0` or a driver version).
    pub version: String,
    /// Device memory is host memory: the runtime may dereference device pointers.
    pub host_visible: bool,
    /// The core puts its caching suballocator over the platform's raw allocations.
    pub use_suballocator: bool,
}

/// What a device says about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceDescription {
    /// The hardware's name (e.g. `NVIDIA H100 80GB HBM3`, the CPU's model name).
    pub hardware_name: String,
    /// Who makes the hardware.
    pub vendor: String,
    /// The PCI bus id (`0000:3b:00.0`), empty when there is none.
    pub pci_bus_id: String,
    /// Physical memory in bytes (0 when unknown).
    pub total_memory: u64,
    /// NUMA node, or -1 when unknown.
    pub numa_node: i32,
    /// Compute units (cores, SMs), 0 when unknown.
    pub compute_units: u32,
}

/// One implementation of devices.
pub trait Platform: Send + Sync {
    /// Its name, device type, priority and flags; the same value for the platform's life.
    fn info(&self) -> &PlatformInfo;
    /// How many devices it has (fixed when the runtime registers the platform).
    fn device_count(&self) -> usize;
    /// Creates the executor of device `ordinal` (`0..device_count()`); called once per device.
    fn create_executor(&self, ordinal: usize) -> Result<Arc<dyn StreamExecutor>>;
}

/// A platform's own stream object. Executors downcast it to their type.
pub type RawStream = Box<dyn Any + Send + Sync>;
/// A platform's own event object. Executors downcast it to their type.
pub type RawEvent = Box<dyn Any + Send + Sync>;
/// Work run by a stream once everything enqueued before it is done.
pub type HostFn = Box<dyn FnOnce() + Send + 'static>;

/// What only a platform's own allocator knows (its `allocator_stats`): the memory it holds,
/// cached blocks included, and its largest free block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorFigures {
    /// Bytes the allocator holds from the device, in use or cached.
    pub bytes_reserved: u64,
    /// The largest allocation that could succeed now without asking the device for more.
    pub largest_free_block: u64,
}

/// The state of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventStatus {
    /// Recorded and not yet reached by its stream.
    Pending,
    /// Reached, or never recorded.
    Complete,
    /// The stream failed before reaching it.
    Error,
}

/// The per-device interface a platform implements (TensorFlow's `SP_StreamExecutor`).
///
/// Host pointers handed to the `unsafe` methods must be valid for `size` bytes; for the
/// `_async` ones until the stream has reached the operation. Device pointers and sizes have
/// been checked by the caller against live allocations.
pub trait StreamExecutor: Send + Sync {
    /// What the device says about itself; the same value for the executor's life.
    fn description(&self) -> &DeviceDescription;

    // ---- memory ----
    /// `size` bytes of device memory; `RESOURCE_EXHAUSTED` when the device has
    /// no room.
    fn allocate(&self, size: u64) -> Result<DevicePtr>;
    /// Frees what [`allocate`](Self::allocate) returned for `size`; no stream uses it any
    /// more (the core orders frees after the work that used the memory).
    fn deallocate(&self, ptr: DevicePtr, size: u64);
    /// Pinned host memory usable for fast async copies.
    fn host_allocate(&self, size: u64) -> Result<*mut u8>;
    /// # Safety
    /// `ptr` came from `host_allocate(size)` of this executor and is not used afterwards.
    unsafe fn host_deallocate(&self, ptr: *mut u8, size: u64);
    /// Free and total device memory in bytes (`UNIMPLEMENTED` when the platform cannot tell).
    fn memory_usage(&self) -> Result<(u64, u64)>;
    /// What the platform's own allocator holds, for a platform the host does not suballocate
    /// for (`DPP_PLATFORM_NO_SUBALLOCATOR`); `None` when it does not say.
    fn allocator_figures(&self) -> Option<Result<AllocatorFigures>> {
        None
    }

    // ---- synchronous copies ----
    /// # Safety
    /// `src` is valid for reads of `size` bytes.
    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: *const u8, size: u64) -> Result<()>;
    /// # Safety
    /// `dst` is valid for writes of `size` bytes.
    unsafe fn memcpy_dtoh(&self, dst: *mut u8, src: DevicePtr, size: u64) -> Result<()>;
    /// Copies `size` bytes between two allocations of this device, done when it returns.
    fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, size: u64) -> Result<()>;
    /// Sets `size` bytes at `dst` to `value`, done when it returns.
    fn memset(&self, dst: DevicePtr, value: u8, size: u64) -> Result<()>;

    // ---- streams ----
    /// A new stream: work enqueued on it runs in order, asynchronously to the caller.
    fn create_stream(&self) -> Result<RawStream>;
    /// The device's default stream. Platforms may make it synchronous.
    fn create_default_stream(&self) -> Result<RawStream> {
        self.create_stream()
    }
    /// Waits for the stream's work, then releases it.
    fn destroy_stream(&self, stream: RawStream);
    /// True when work enqueued on this stream has completed by the time the call returns.
    fn stream_is_synchronous(&self, _stream: &RawStream) -> bool {
        false
    }
    /// Waits until the stream has reached everything enqueued on it; the stream's first
    /// error, if any.
    fn synchronize_stream(&self, stream: &RawStream) -> Result<()>;
    /// Work enqueued on `stream` after this call waits for all work enqueued on `other` before it.
    fn stream_wait_stream(&self, stream: &RawStream, other: &RawStream) -> Result<()>;
    /// # Safety
    /// `src` is valid for reads of `size` bytes until the stream reaches the copy.
    unsafe fn memcpy_htod_async(
        &self,
        stream: &RawStream,
        dst: DevicePtr,
        src: *const u8,
        size: u64,
    ) -> Result<()>;
    /// # Safety
    /// `dst` is valid for writes of `size` bytes until the stream reaches the copy.
    unsafe fn memcpy_dtoh_async(
        &self,
        stream: &RawStream,
        dst: *mut u8,
        src: DevicePtr,
        size: u64,
    ) -> Result<()>;
    /// [`memcpy_dtod`](Self::memcpy_dtod) in stream order.
    fn memcpy_dtod_async(
        &self,
        stream: &RawStream,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
    ) -> Result<()>;
    /// [`memset`](Self::memset) in stream order.
    fn memset_async(&self, stream: &RawStream, dst: DevicePtr, value: u8, size: u64) -> Result<()>;
    /// Runs `f` exactly once after all earlier work of `stream`. When enqueueing fails the
    /// executor drops `f` without running it and returns the error.
    fn host_callback(&self, stream: &RawStream, f: HostFn) -> Result<()>;

    // ---- events ----
    /// A new event, [`Complete`](EventStatus::Complete) until recorded.
    fn create_event(&self) -> Result<RawEvent>;
    /// Releases an event; a stream may still have its record or a wait for it queued.
    fn destroy_event(&self, event: RawEvent);
    /// Marks the point of `stream` reached after everything enqueued on it so far: the event
    /// is [`Pending`](EventStatus::Pending) until the stream gets there.
    fn record_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()>;
    /// Whether the stream reached the event's last record.
    fn event_status(&self, event: &RawEvent) -> Result<EventStatus>;
    /// Work enqueued on `stream` after this call waits until the event is reached.
    fn stream_wait_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()>;
    /// Waits until the event is reached; an error when its stream failed before it.
    fn event_synchronize(&self, event: &RawEvent) -> Result<()>;
    /// Whether [`event_elapsed_ns`](Self::event_elapsed_ns) can succeed (the trace brackets
    /// kernels with events only on devices that time them).
    fn times_events(&self) -> bool {
        false
    }
    /// The device's time, in nanoseconds, from reaching `start` to reaching `end` (negative
    /// when `end` was reached first). `FAILED_PRECONDITION` when either was never recorded or
    /// is not reached yet; `UNIMPLEMENTED` when the device does not time its events.
    fn event_elapsed_ns(&self, _start: &RawEvent, _end: &RawEvent) -> Result<i64> {
        Err(Error::unimplemented("its platform does not time events"))
    }

    /// Waits for all work on all streams of this device.
    fn synchronize_all(&self) -> Result<()>;

    /// For a plugin's device: its `device_data` and the plugin's handle of `stream`, which
    /// plugin kernels receive. `None` for devices the core implements.
    fn plugin_handles(
        &self,
        _stream: &RawStream,
    ) -> Option<(*mut std::ffi::c_void, *mut std::ffi::c_void)> {
        None
    }
}

/// Downcasts a raw stream or event to the executor's own type, or explains the mix-up.
pub fn downcast<'a, T: 'static>(raw: &'a (dyn Any + Send + Sync), what: &str) -> Result<&'a T> {
    raw.downcast_ref::<T>()
        .ok_or_else(|| Error::invalid_argument(format!("{what} belongs to a different platform")))
}

/// Checks a platform or device-type name against `[A-Z][A-Z0-9_]*` (at most 64 characters).
pub fn validate_name(what: &str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok = name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "invalid {what} '{name}': must match [A-Z][A-Z0-9_]* and be at most 64 characters"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_pattern() {
        for good in ["CPU", "GPU", "SIM_CUDA2", "X"] {
            validate_name("platform name", good).unwrap();
        }
        for bad in ["", "cpu", "1GPU", "GPU-X", "G P U", &"A".repeat(65)] {
            let e = validate_name("platform name", bad).unwrap_err();
            assert!(e.message.contains("platform name"), "{e}");
        }
    }
}
