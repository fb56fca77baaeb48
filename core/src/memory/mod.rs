//! Device memory: the address type, buffers, and the caching suballocator that the core
//! puts over each platform's raw allocation (or, for a platform that opts out, the direct
//! allocator).

mod buffer;
mod direct;
mod pool;
mod stream_order;
mod suballocator;

pub(crate) use buffer::copy_between;
pub use buffer::Buffer;
pub use direct::DirectAllocator;
pub(crate) use pool::BufferPool;
pub(crate) use stream_order::{StreamOrder, MARKER_EVERY};
pub use suballocator::{MemoryStats, RawAllocator, Suballocator, SuballocatorOptions};

/// A device's allocator: the suballocator, unless the platform opted out.
// One per device, never moved after creation: boxing the large variant would only add an
// indirection on the allocation path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum DeviceAllocator {
    Sub(Suballocator),
    Direct(DirectAllocator),
}

impl DeviceAllocator {
    #[inline]
    pub(crate) fn allocate(&self, size: u64) -> crate::Result<DevicePtr> {
        match self {
            DeviceAllocator::Sub(s) => s.allocate(size),
            DeviceAllocator::Direct(d) => d.allocate(size),
        }
    }

    #[inline]
    pub(crate) fn deallocate(&self, ptr: DevicePtr) -> crate::Result<()> {
        match self {
            DeviceAllocator::Sub(s) => s.deallocate(ptr),
            DeviceAllocator::Direct(d) => d.deallocate(ptr),
        }
    }

    /// The width of the pool's size classes: the suballocator's alignment, to which it rounds
    /// every request; `None` without the suballocator (nothing is pooled then).
    pub(crate) fn pool_granule(&self) -> Option<u64> {
        match self {
            DeviceAllocator::Sub(s) => Some(s.alignment()),
            DeviceAllocator::Direct(_) => None,
        }
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        match self {
            DeviceAllocator::Sub(s) => s.stats(),
            DeviceAllocator::Direct(d) => d.stats(),
        }
    }

    /// Cached memory given back to the platform, in bytes (nothing is cached without the
    /// suballocator).
    pub(crate) fn release_cached(&self) -> u64 {
        match self {
            DeviceAllocator::Sub(s) => s.release_cached(),
            DeviceAllocator::Direct(_) => 0,
        }
    }

    /// Sets the limit on what the allocator holds from the platform, giving back cached free
    /// memory as far as needed to meet it.
    pub(crate) fn set_limit(&self, limit: Option<u64>) {
        match self {
            DeviceAllocator::Sub(s) => {
                s.set_limit(limit);
            }
            DeviceAllocator::Direct(d) => d.set_limit(limit),
        }
    }

    /// Gives back cached free memory while more than the limit is held (after frees that
    /// followed a lowered limit).
    pub(crate) fn trim_to_limit(&self) {
        if let DeviceAllocator::Sub(s) = self {
            s.trim_to_limit();
        }
    }

    /// The limit in force, if any.
    pub(crate) fn limit(&self) -> Option<u64> {
        match self {
            DeviceAllocator::Sub(s) => s.limit(),
            DeviceAllocator::Direct(d) => d.limit(),
        }
    }
}

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
