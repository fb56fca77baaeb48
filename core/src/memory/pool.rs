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
//! that would show: before memory statistics are read, before cached memory is released, when
//! a memory limit is set (pooled buffers are held memory), and before an allocation is allowed
//! to fail. It is bounded ([`POOL_DEPTH`] buffers per class, [`POOL_BYTES`] bytes in all),
//! takes no lock, is used only over the suballocator (a platform that opted out of it sees
//! every request), and is closed when the runtime is destroyed: pooled buffers hold their
//! device, so a pool left open would keep the device alive.

use std::sync::atomic::{fence, AtomicPtr, Ordering};
use std::sync::Arc;

use crate::memory::Buffer;

/// Buffers of at most this many size classes are pooled.
const POOL_CLASSES: usize = 16;
/// At most this many buffers are pooled per class…
const POOL_DEPTH: usize = 32;
/// …and at most this many bytes in all (each class gets an equal share).
const POOL_BYTES: u64 = 512 << 10;

/// What a closed pool's slots hold: a dangling pointer, never a live buffer's address and never
/// null, so that no buffer can be put into a closed slot.
const CLOSED: *mut Buffer = std::ptr::dangling_mut::<Buffer>();

/// A pool of buffers without a lock: per size class, a row of slots, each null, [`CLOSED`] or
/// a pooled buffer (from `Arc::into_raw`, its one reference owned by the slot). Taking a buffer
/// is one compare-and-swap of a slot to null, keeping one is one compare-and-swap of a null slot
/// to the buffer — one atomic read-modify-write each, where a mutex costs two (lock, unlock),
/// and these run on every eager op. Once `put` has stored a buffer, it touches the pool no more
/// (another thread may take or flush it at once). Closing swaps every slot to `CLOSED`, so a
/// `put` racing with `close` either lands first (and `close` frees it) or fails.
pub(crate) struct BufferPool {
    /// `log2` of the class width (the allocator's alignment); `None`: pooling is off.
    shift: Option<u32>,
    /// The slots used per class: [`POOL_DEPTH`], fewer for classes whose share of
    /// [`POOL_BYTES`] holds fewer buffers.
    depth: [u8; POOL_CLASSES],
    slots: [[AtomicPtr<Buffer>; POOL_DEPTH]; POOL_CLASSES],
}

impl BufferPool {
    /// A pool whose classes are `granule` bytes wide (a power of two: the allocator rounds
    /// every request up to a multiple of it, so buffers of one class have room for any request
    /// of that class); `None` disables pooling.
    pub(crate) fn new(granule: Option<u64>) -> BufferPool {
        let shift = granule
            .filter(|g| g.is_power_of_two())
            .map(u64::trailing_zeros);
        let share = POOL_BYTES / POOL_CLASSES as u64;
        let mut depth = [0u8; POOL_CLASSES];
        if let Some(shift) = shift {
            for (class, d) in depth.iter_mut().enumerate() {
                let bytes = (class as u64 + 1).checked_shl(shift).unwrap_or(u64::MAX);
                *d = (share / bytes).min(POOL_DEPTH as u64) as u8;
            }
        }
        BufferPool {
            shift,
            depth,
            slots: std::array::from_fn(|_| {
                std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut()))
            }),
        }
    }

    /// The slots of the class of a request of `size` bytes, if such requests are pooled.
    #[inline]
    fn slots(&self, size: u64) -> Option<&[AtomicPtr<Buffer>]> {
        let shift = self.shift?;
        // Size 0 is allocated as one granule, like size 1.
        let class = ((size.max(1) - 1) >> shift) as usize;
        if class >= POOL_CLASSES {
            return None;
        }
        Some(&self.slots[class][..self.depth[class] as usize])
    }

    /// A pooled buffer with room for `size` bytes, its size set to `size`.
    #[inline]
    pub(crate) fn take(&self, size: u64) -> Option<Arc<Buffer>> {
        for slot in self.slots(size)? {
            let p = slot.load(Ordering::Relaxed);
            if p.is_null() || p == CLOSED {
                continue;
            }
            // If the slot still holds `p`, it is ours. (Had `p` been taken and put back
            // meanwhile, it is pooled again, and as good to take.)
            if slot
                .compare_exchange(
                    p,
                    std::ptr::null_mut(),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                // SAFETY: the slot owned this reference (from `Arc::into_raw` in `put`); the
                // exchange moved it to us.
                let mut buffer = unsafe { Arc::from_raw(p) };
                if buffer.size() != size {
                    // Pooled buffers are referenced nowhere else (see `put`).
                    Arc::get_mut(&mut buffer)?.set_size(size);
                }
                return Some(buffer);
            }
        }
        None
    }

    /// Keeps `buffer` if nothing else references it and there is room; otherwise hands it
    /// back, for the caller to drop (which frees it unless it is still shared). Once the
    /// buffer is kept, this touches the pool no more.
    #[inline]
    pub(crate) fn put(&self, buffer: Arc<Buffer>) -> Option<Arc<Buffer>> {
        // Unique now means unique for good: no other strong reference exists, and no weak one
        // that could be upgraded (a new one could only be made from `buffer`), so no one can
        // clone it meanwhile. The
        // fence orders the other holders' last uses (their `Release` decrements) before the
        // buffer is reused — what `Arc::get_mut` does, without its read-modify-write.
        if Arc::strong_count(&buffer) != 1 || Arc::weak_count(&buffer) != 0 {
            return Some(buffer);
        }
        fence(Ordering::Acquire);
        let Some(slots) = self.slots(buffer.size()) else {
            return Some(buffer);
        };
        let p = Arc::into_raw(buffer).cast_mut();
        for slot in slots {
            if slot.load(Ordering::Relaxed).is_null()
                && slot
                    .compare_exchange(
                        std::ptr::null_mut(),
                        p,
                        Ordering::Release,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                return None;
            }
        }
        // SAFETY: `p` came from `Arc::into_raw` above and no slot took it.
        Some(unsafe { Arc::from_raw(p) })
    }

    /// Frees every pooled buffer; true if there was any.
    pub(crate) fn flush(&self) -> bool {
        self.sweep(std::ptr::null_mut())
    }

    /// Frees every pooled buffer and pools nothing from now on (the runtime is going away).
    pub(crate) fn close(&self) {
        self.sweep(CLOSED);
    }

    /// Swaps every slot to `to`, freeing the buffers they held; true if there was any.
    fn sweep(&self, to: *mut Buffer) -> bool {
        let mut any = false;
        for slot in self.slots.iter().flatten() {
            let p = slot.swap(to, Ordering::AcqRel);
            if !p.is_null() && p != CLOSED {
                // SAFETY: the slot owned this reference; the swap moved it here. The caller
                // holds the device (and so this pool) alive, whatever this buffer held.
                drop(unsafe { Arc::from_raw(p) });
                any = true;
            }
        }
        any
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        // A pooled buffer holds its device, and with it this pool: when the pool goes, no
        // slot can hold one any more. Swept all the same, so that nothing could leak.
        self.flush();
    }
}
