//! Devices: the StreamExecutor a plugin implements (memory, copies, streams, events, host
//! callbacks), as one safe trait.

use std::fmt;
use std::ptr::NonNull;

use crate::error::{Error, Result};
pub use crate::ffi::{HostBuf, HostBufMut, HostCallback};

/// An address in a device's memory (`dpp_addr_t`). Offsets are meaningful: for an
/// allocation at `a` of `n` bytes, `a + k` (k < n) addresses its byte k. 0 is never a valid
/// allocation. Opaque to the host unless the platform is `HOST_VISIBLE`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct DeviceAddr(pub u64);

impl DeviceAddr {
    /// The raw address.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// `self + offset`, or `None` on overflow.
    pub const fn checked_add(self, offset: u64) -> Option<DeviceAddr> {
        match self.0.checked_add(offset) {
            Some(a) => Some(DeviceAddr(a)),
            None => None,
        }
    }
}

impl fmt::Debug for DeviceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceAddr({:#x})", self.0)
    }
}

impl fmt::Display for DeviceAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// What the host learns about a device when it is created (`dpp_device_t`'s descriptive
/// fields). Strings must not contain NUL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceInfo {
    /// E.g. the chip's marketing name.
    pub hardware_name: Option<String>,
    /// The vendor.
    pub vendor: Option<String>,
    /// `domain:bus:device.function`.
    pub pci_bus_id: Option<String>,
    /// Bytes of device memory (0 when unknown).
    pub total_memory: u64,
    /// `None` when unknown.
    pub numa_node: Option<i32>,
    /// Cores, SMs, … (0 when unknown).
    pub compute_units: u32,
}

/// Free and total bytes of device memory (`memory_usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryUsage {
    /// Free bytes.
    pub free: u64,
    /// Total bytes.
    pub total: u64,
}

/// Statistics of a plugin's own allocator (`dpp_allocator_stats_t`), for platforms with
/// `NO_SUBALLOCATOR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocatorStats {
    /// Number of allocations made.
    pub num_allocs: u64,
    /// Bytes in use now.
    pub bytes_in_use: u64,
    /// Highest `bytes_in_use` seen.
    pub peak_bytes_in_use: u64,
    /// Largest single allocation.
    pub largest_alloc_size: u64,
    /// 0 = no limit.
    pub bytes_limit: u64,
    /// Bytes reserved from the system.
    pub bytes_reserved: u64,
    /// Largest free block.
    pub largest_free_block: u64,
}

/// The state of an event (`DPP_EVENT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventStatus {
    /// Recorded, not yet reached.
    Pending,
    /// Reached, or never recorded.
    Complete,
    /// The stream failed before reaching it.
    Error,
}

fn unimplemented(what: &str) -> Error {
    Error::unimplemented(format!("{what} is not implemented by this device"))
}

/// One device: the StreamExecutor of the plugin ABI (`dpp_stream_executor_t`), as safe Rust.
///
/// Every method may be called from any thread, concurrently; a method that returns `Err`
/// reaches the host as the error's code and message, a method that panics as `INTERNAL` with
/// the panic message. Nothing a method does can unwind into the host.
///
/// Streams and events are the associated types: the SDK boxes what `create_stream` /
/// `create_event` return, hands the host an opaque handle, checks every handle the host
/// passes back (NULL, another kind of handle, a handle of another device) and gives the
/// methods a typed reference. They are dropped by `destroy_stream` / `destroy_event`.
///
/// Optional ABI functions (pinned host memory, unified memory, memory usage, allocator
/// statistics, event timing) are left NULL in the function table unless the matching
/// `provides_*` method returns `true` (asked once, when the device is created); their methods
/// default to `Unimplemented`.
///
/// The `*_async` methods and `host_callback` enqueue work on a stream: it must run after all
/// earlier work of that stream, and it may run on any thread. Host memory they receive comes
/// as [`HostBuf`] / [`HostBufMut`], whose contents may be touched only when the stream reaches
/// the copy (see their docs).
pub trait Device: Send + Sync + 'static {
    /// An ordered queue of work, asynchronous to the host.
    type Stream: Send + Sync + 'static;
    /// A marker in a stream.
    type Event: Send + Sync + 'static;

    /// The description the host receives (asked once, when the device is created).
    fn info(&self) -> DeviceInfo {
        DeviceInfo::default()
    }

    // ---- memory ------------------------------------------------------------------------

    /// Allocates `size` bytes (> 0, checked by the SDK) of device memory. Never returns
    /// address 0.
    fn allocate(&self, size: u64) -> Result<DeviceAddr>;

    /// Frees what `allocate(size)` returned.
    fn deallocate(&self, addr: DeviceAddr, size: u64);

    /// Whether the device provides pinned host memory (`host_allocate`/`host_deallocate`).
    fn provides_host_memory(&self) -> bool {
        false
    }

    /// Allocates `size` bytes of pinned host memory.
    fn host_allocate(&self, size: u64) -> Result<NonNull<u8>> {
        let _ = size;
        Err(unimplemented("host_allocate"))
    }

    /// Frees what `host_allocate(size)` returned.
    fn host_deallocate(&self, ptr: NonNull<u8>, size: u64) {
        let _ = (ptr, size);
    }

    /// Whether the device provides unified memory (`unified_allocate`/`unified_deallocate`).
    fn provides_unified_memory(&self) -> bool {
        false
    }

    /// Allocates `size` bytes that both the host and the device can address.
    fn unified_allocate(&self, size: u64) -> Result<NonNull<u8>> {
        let _ = size;
        Err(unimplemented("unified_allocate"))
    }

    /// Frees what `unified_allocate(size)` returned.
    fn unified_deallocate(&self, ptr: NonNull<u8>, size: u64) {
        let _ = (ptr, size);
    }

    /// Whether the device reports `memory_usage`.
    fn provides_memory_usage(&self) -> bool {
        false
    }

    /// Free and total bytes of device memory.
    fn memory_usage(&self) -> Result<MemoryUsage> {
        Err(unimplemented("memory_usage"))
    }

    /// Whether the device reports `allocator_stats` (for `NO_SUBALLOCATOR` platforms).
    fn provides_allocator_stats(&self) -> bool {
        false
    }

    /// Statistics of the plugin's own allocator.
    fn allocator_stats(&self) -> Result<AllocatorStats> {
        Err(unimplemented("allocator_stats"))
    }

    // ---- synchronous copies (they act at once and do not wait for streams) -------------

    /// Copies `src` to device address `dst`, synchronously.
    fn memcpy_htod(&self, dst: DeviceAddr, src: &[u8]) -> Result<()>;

    /// Copies `dst.len()` bytes from device address `src` into `dst`, synchronously.
    ///
    /// `dst` is host memory the host handed over for writing; it may hold anything before
    /// the copy, so fill it, do not read it.
    fn memcpy_dtoh(&self, dst: &mut [u8], src: DeviceAddr) -> Result<()>;

    /// Copies `size` bytes within the device (the ranges may overlap), synchronously.
    fn memcpy_dtod(&self, dst: DeviceAddr, src: DeviceAddr, size: u64) -> Result<()>;

    /// Sets `size` bytes at `dst` to `value`, synchronously.
    fn memset(&self, dst: DeviceAddr, value: u8, size: u64) -> Result<()>;

    // ---- streams -----------------------------------------------------------------------

    /// Creates a stream.
    fn create_stream(&self) -> Result<Self::Stream>;

    /// Waits for the stream's work, then destroys it. The default synchronizes (ignoring
    /// the stream's error) and drops it.
    fn destroy_stream(&self, stream: Self::Stream) {
        let _ = self.synchronize_stream(&stream);
        drop(stream);
    }

    /// Blocks until the stream's work is done; returns the first error it met and clears it.
    /// (ABI: a stream keeps its first error, later operations still run, events it reaches
    /// after the error report [`EventStatus::Error`].)
    fn synchronize_stream(&self, stream: &Self::Stream) -> Result<()>;

    /// Later work on `stream` waits for the work enqueued on `other` so far. `stream` and
    /// `other` may be the same stream.
    fn stream_wait_stream(&self, stream: &Self::Stream, other: &Self::Stream) -> Result<()>;

    /// Enqueues a copy of `src` to device address `dst`.
    fn memcpy_htod_async(&self, stream: &Self::Stream, dst: DeviceAddr, src: HostBuf)
        -> Result<()>;

    /// Enqueues a copy of `dst.len()` bytes from device address `src` into `dst`.
    fn memcpy_dtoh_async(
        &self,
        stream: &Self::Stream,
        dst: HostBufMut,
        src: DeviceAddr,
    ) -> Result<()>;

    /// Enqueues a copy of `size` bytes within the device.
    fn memcpy_dtod_async(
        &self,
        stream: &Self::Stream,
        dst: DeviceAddr,
        src: DeviceAddr,
        size: u64,
    ) -> Result<()>;

    /// Enqueues a memset.
    fn memset_async(
        &self,
        stream: &Self::Stream,
        dst: DeviceAddr,
        value: u8,
        size: u64,
    ) -> Result<()>;

    /// Enqueues `callback`: [`HostCallback::call`] it once the stream has done all earlier
    /// work, on any thread, holding no lock your methods take. Calling it inside this method
    /// (then return `Ok`) is allowed when the stream's earlier work is already done, e.g. on
    /// a synchronous stream; otherwise call it later, from the stream's worker. Returning
    /// `Err` means the host's function never runs: return `Err` only if you have not called
    /// it. See [`HostCallback`] for what the SDK does when it is dropped instead, or called
    /// and then followed by an `Err`.
    fn host_callback(&self, stream: &Self::Stream, callback: HostCallback) -> Result<()>;

    // ---- events ------------------------------------------------------------------------

    /// Creates an event (never recorded: `Complete`).
    fn create_event(&self) -> Result<Self::Event>;

    /// Destroys an event. The default drops it.
    fn destroy_event(&self, event: Self::Event) {
        drop(event);
    }

    /// Marks the current end of `stream` in `event`.
    fn record_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;

    /// The event's state.
    fn event_status(&self, event: &Self::Event) -> Result<EventStatus>;

    /// Later work on `stream` waits until `event` (as recorded now) is reached.
    fn stream_wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;

    /// Blocks until `event` is reached.
    fn event_synchronize(&self, event: &Self::Event) -> Result<()>;

    /// Whether the device times its events (`event_elapsed_ns`, plugin ABI 1.4). When `false`
    /// the table's entry is NULL and the host reports `UNIMPLEMENTED` to its users.
    fn provides_event_timing(&self) -> bool {
        false
    }

    /// The device's time, in nanoseconds, from when its stream reached `start` to when its
    /// stream reached `end` (negative when `end` was reached first; the two may be of
    /// different streams, and may be the same event). Each event counts from its latest
    /// record.
    ///
    /// Errors: `FailedPrecondition` when either event was never recorded, is still pending,
    /// or was reached after its stream failed (what [`event_status`](Self::event_status)
    /// reports as [`EventStatus::Error`]); the message should say which event and why. The
    /// SDK has checked both handles (and the out-pointer) before this is called.
    fn event_elapsed_ns(&self, start: &Self::Event, end: &Self::Event) -> Result<i64> {
        let _ = (start, end);
        Err(unimplemented("event timing (event_elapsed_ns)"))
    }

    /// Blocks until all work of all streams of the device is done; returns (and clears) the
    /// first stream error, like `synchronize_stream`.
    fn synchronize_all(&self) -> Result<()>;
}
