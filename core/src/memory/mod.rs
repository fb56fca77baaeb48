//! Device memory: the address type, buffers, and the caching suballocator that the core
//! puts over each platform's raw allocation.

mod buffer;
mod suballocator;

pub(crate) use buffer::copy_between;
pub use buffer::Buffer;
pub use suballocator::{MemoryStats, RawAllocator, Suballocator, SuballocatorOptions};

/// An address in one device's memory space.
///
/// Opaque to the runtime unless the platform is host-visible: the runtime never dereferences
/// it for other platforms. Offsets are meaningful: for an allocation at `p` of `n` bytes,
/// `p + k` (k < n) addresses its byte `k`, as CUDA device pointers do. This is what lets the
/// suballocator carve one raw allocation into many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `offset` bytes further on.
    pub fn offset(self, offset: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(offset))
    }
}
