//! The buffer pool: small buffers that tensors let go of, kept whole — the device memory and
//! the [`Buffer`] object around it — for the next allocation of the same size class.
//!
//! An eager op allocates its outputs and the host releases them soon after; for small tensors
//! the suballocator's bookkeeping and the buffer object's heap allocation cost more than the
//! kernel. A tensor whose buffer nobody else references (no other tensor, no stream keeping it
//! alive, no C handle) gives it to its device's pool instead ([`Buffer::recycle`]), and
//! [`Device::allocate`](crate::device::Device::allocate) takes from the pool first.
//!
//! The pool hides memory that is free, so it is flushed (its buffers freed for real) wherever
//! that would show: before memory statistics are read, before cached memory is released, and
//! before an allocation is allowed to fail. It is bounded ([`POOL_DEPTH`] buffers per class,
//! [`POOL_BYTES`] bytes in all), used only over the suballocator (a platform that opted out of
//! it sees every request), and closed when the runtime is destroyed: pooled buffers hold their
//! device, so a pool left open would keep the device alive.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::memory::Buffer;

/// Buffers of at most this many size classes are pooled.
const POOL_CLASSES: usize = 16;
/// At most this many buffers are pooled per class…
const POOL_DEPTH: usize = 32;
/// …and at most this many bytes in all.
const POOL_BYTES: u64 = 512 << 10;

/// All state sits behind the mutex, so that a `&BufferPool` is interior-mutable throughout:
/// [`Buffer::recycle`] reaches the pool through the buffer it hands over (see there).
pub(crate) struct BufferPool {
    state: Mutex<State>,
}

struct State {
    /// `log2` of the class width (the allocator's alignment); `None`: pooling is off.
    shift: Option<u32>,
    closed: bool,
    bytes: u64,
    classes: [Vec<Arc<Buffer>>; POOL_CLASSES],
}

impl State {
    /// The class of a request of `size` bytes, if such requests are pooled.
    #[inline]
    fn class(&self, size: u64) -> Option<usize> {
        let shift = self.shift?;
        // Size 0 is allocated as one granule, like size 1.
        let class = (size.max(1) - 1) >> shift;
        (class < POOL_CLASSES as u64).then_some(class as usize)
    }

    /// The bytes the allocator set aside for a request of `class`.
    #[inline]
    fn class_bytes(&self, class: usize) -> u64 {
        (class as u64 + 1) << self.shift.unwrap_or(0)
    }
}

impl BufferPool {
    /// A pool whose classes are `granule` bytes wide (a power of two: the allocator rounds
    /// every request up to a multiple of it, so buffers of one class have room for any request
    /// of that class); `None` disables pooling.
    pub(crate) fn new(granule: Option<u64>) -> BufferPool {
        BufferPool {
            state: Mutex::new(State {
                shift: granule
                    .filter(|g| g.is_power_of_two())
                    .map(u64::trailing_zeros),
                closed: false,
                bytes: 0,
                classes: Default::default(),
            }),
        }
    }

    /// A pooled buffer with room for `size` bytes, its size set to `size`.
    #[inline]
    pub(crate) fn take(&self, size: u64) -> Option<Arc<Buffer>> {
        let mut buffer = {
            let mut state = self.state.lock();
            let class = state.class(size)?;
            let b = state.classes[class].pop()?;
            state.bytes -= state.class_bytes(class);
            b
        };
        if buffer.size() != size {
            // Pooled buffers are referenced nowhere else (see `put`).
            Arc::get_mut(&mut buffer)?.set_size(size);
        }
        Some(buffer)
    }

    /// Keeps `buffer` if nothing else references it and there is room; otherwise hands it
    /// back, for the caller to drop (which frees it unless it is still shared). Once the
    /// buffer is kept, this touches the pool no more than to unlock it.
    #[inline]
    pub(crate) fn put(&self, mut buffer: Arc<Buffer>) -> Option<Arc<Buffer>> {
        // Unique now means unique for good: no other strong or weak reference exists, and
        // `buffer` itself is not shared, so no one can clone it meanwhile.
        if Arc::get_mut(&mut buffer).is_none() {
            return Some(buffer);
        }
        let mut state = self.state.lock();
        let Some(class) = state.class(buffer.size()) else {
            return Some(buffer);
        };
        let bytes = state.class_bytes(class);
        if state.closed
            || state.classes[class].len() >= POOL_DEPTH
            || state.bytes + bytes > POOL_BYTES
        {
            return Some(buffer);
        }
        state.bytes += bytes;
        state.classes[class].push(buffer);
        None
    }

    /// Frees every pooled buffer; true if there was any.
    pub(crate) fn flush(&self) -> bool {
        let taken = self.take_all();
        let any = taken.iter().any(|c| !c.is_empty());
        drop(taken); // Freed outside the lock.
        any
    }

    /// Frees every pooled buffer and pools nothing from now on (the runtime is going away).
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
        self.flush();
    }

    fn take_all(&self) -> [Vec<Arc<Buffer>>; POOL_CLASSES] {
        let mut state = self.state.lock();
        if state.bytes == 0 {
            return Default::default();
        }
        state.bytes = 0;
        std::mem::take(&mut state.classes)
    }
}
