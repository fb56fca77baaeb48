//! The allocator of platforms that opt out of the suballocator (`DPP_PLATFORM_NO_SUBALLOCATOR`):
//! every allocation goes to the platform as it is, and every free goes back at once. The core
//! still checks frees, enforces the memory limit and keeps the same statistics as the
//! suballocator's, so hosts see one interface whichever a platform chose.
//!
//! A platform opts out when it has its own caching allocator (CUDA's stream-ordered pools,
//! a vendor's arena) or when its memory must not be carved (e.g. each allocation maps a
//! separate object). Addresses are then aligned as the platform aligns them.
//!
//! As in the suballocator, the platform is never called with the lock held (its calls may wait
//! for work that frees memory); the bytes of an allocation under way count against the limit.
//! The limit lives under the same lock, so it can change at any time
//! ([`DirectAllocator::set_limit`]); nothing is cached, so there is nothing to give back when it
//! is lowered: allocations are refused until enough is freed.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{DevicePtr, MemoryStats, RawAllocator};
use crate::error::{Error, Result};

/// Pass-through allocation with exact statistics and an optional byte limit.
pub struct DirectAllocator {
    raw: Arc<dyn RawAllocator>,
    state: Mutex<DirectState>,
}

#[derive(Default)]
struct DirectState {
    /// The most bytes that may be in use (and under way); `None`: no limit.
    limit: Option<u64>,
    /// Live allocations: address → the size asked of the platform.
    live: HashMap<u64, u64>,
    bytes_in_use: u64,
    /// Bytes of allocations under way (asked of the platform, without the lock).
    pending: u64,
    peak_bytes_in_use: u64,
    num_allocs: u64,
    largest_alloc_size: u64,
}

impl DirectAllocator {
    /// An allocator that passes every request to `raw`, refusing those that would take its
    /// bytes in use over `limit`.
    pub fn new(raw: Arc<dyn RawAllocator>, limit: Option<u64>) -> DirectAllocator {
        DirectAllocator {
            raw,
            state: Mutex::new(DirectState {
                limit,
                ..DirectState::default()
            }),
        }
    }

    /// Sets the limit (`None`: no limit). Allocations taking the lock after it obey it; below
    /// the bytes in use, every allocation is refused until enough is freed (nothing in use is
    /// touched, and nothing is cached to give back).
    pub fn set_limit(&self, limit: Option<u64>) {
        self.state.lock().limit = limit;
    }

    /// The limit in force, if any.
    pub fn limit(&self) -> Option<u64> {
        self.state.lock().limit
    }

    /// Allocates `size` bytes from the platform (size 0 asks for 1 byte, so that every
    /// allocation has a distinct address). `RESOURCE_EXHAUSTED` when the limit does not leave
    /// room; the platform's error as it is otherwise.
    pub fn allocate(&self, size: u64) -> Result<DevicePtr> {
        let size = size.max(1);
        {
            let mut state = self.state.lock();
            if let Some(limit) = state.limit {
                if size > limit.saturating_sub(state.bytes_in_use + state.pending) {
                    return Err(Error::resource_exhausted(format!(
                        "device memory limit exceeded: requested {size} bytes, {} in use, \
                         limit {limit}",
                        state.bytes_in_use
                    )));
                }
            }
            state.pending += size;
        }
        let got = self.raw.raw_allocate(size);
        let mut state = self.state.lock();
        state.pending -= size;
        let ptr = got?;
        if state.live.insert(ptr.0, size).is_some() {
            // The platform handed out an address that is still live: a plugin bug. Keep the
            // first owner's record and refuse the second.
            return Err(Error::internal(format!(
                "the platform returned {:#x}, an address still in use",
                ptr.0
            )));
        }
        state.bytes_in_use += size;
        state.peak_bytes_in_use = state.peak_bytes_in_use.max(state.bytes_in_use);
        state.num_allocs += 1;
        state.largest_alloc_size = state.largest_alloc_size.max(size);
        Ok(ptr)
    }

    /// Returns an allocation to the platform. An address that is not live gives
    /// `INVALID_ARGUMENT` and nothing is freed.
    pub fn deallocate(&self, ptr: DevicePtr) -> Result<()> {
        let size = {
            let mut state = self.state.lock();
            let Some(size) = state.live.remove(&ptr.0) else {
                return Err(Error::invalid_argument(format!(
                    "deallocate: {:#x} is not a live allocation of this device",
                    ptr.0
                )));
            };
            state.bytes_in_use -= size;
            size
        };
        self.raw.raw_deallocate(ptr, size);
        Ok(())
    }

    /// The statistics; nothing is cached, so the bytes reserved are the bytes in use and no
    /// free block is held.
    pub fn stats(&self) -> MemoryStats {
        let state = self.state.lock();
        MemoryStats {
            bytes_in_use: state.bytes_in_use,
            peak_bytes_in_use: state.peak_bytes_in_use,
            num_allocs: state.num_allocs,
            active_allocs: state.live.len() as u64,
            largest_alloc_size: state.largest_alloc_size,
            bytes_limit: state.limit,
            bytes_reserved: state.bytes_in_use,
            largest_free_block: 0,
        }
    }

    /// Starts the peak of bytes in use again from the bytes in use now.
    pub fn reset_peak(&self) {
        let mut state = self.state.lock();
        state.peak_bytes_in_use = state.bytes_in_use;
    }
}

impl Drop for DirectAllocator {
    fn drop(&mut self) {
        for (ptr, size) in self.state.get_mut().live.drain() {
            self.raw.raw_deallocate(DevicePtr(ptr), size);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A platform that hands out increasing fake addresses and records frees.
    #[derive(Default)]
    struct Fake {
        next: Mutex<u64>,
        freed: Mutex<Vec<(u64, u64)>>,
    }

    impl RawAllocator for Fake {
        fn raw_allocate(&self, size: u64) -> Result<DevicePtr> {
            let mut n = self.next.lock();
            *n += 0x1000 + size;
            Ok(DevicePtr(*n))
        }
        fn raw_deallocate(&self, ptr: DevicePtr, size: u64) {
            self.freed.lock().push((ptr.0, size));
        }
    }

    #[test]
    fn passes_through_with_exact_statistics_and_a_limit() {
        let fake = Arc::new(Fake::default());
        let a = DirectAllocator::new(fake.clone(), Some(1000));
        let p = a.allocate(600).unwrap();
        let q = a.allocate(0).unwrap();
        assert_ne!(p, q);
        let st = a.stats();
        assert_eq!(
            (st.bytes_in_use, st.active_allocs, st.num_allocs),
            (601, 2, 2)
        );
        assert_eq!(st.bytes_reserved, 601);
        let e = a.allocate(500).unwrap_err();
        assert_eq!(e.code, crate::Code::ResourceExhausted);
        // Raised: it fits; lowered below the bytes in use: refused, nothing freed.
        a.set_limit(Some(1200));
        let r = a.allocate(500).unwrap();
        a.set_limit(Some(200));
        assert_eq!(a.limit(), Some(200));
        assert_eq!(a.stats().bytes_limit, Some(200));
        let e = a.allocate(1).unwrap_err();
        assert!(e.message.contains("limit 200"), "{e}");
        assert!(fake.freed.lock().is_empty());
        a.deallocate(r).unwrap();
        fake.freed.lock().clear();
        a.set_limit(Some(1000));
        a.deallocate(p).unwrap();
        // Freed at once, with the size that was asked for.
        assert_eq!(fake.freed.lock().as_slice(), &[(p.0, 600)]);
        assert_eq!(
            a.deallocate(p).unwrap_err().code,
            crate::Code::InvalidArgument
        );
        assert_eq!(a.stats().peak_bytes_in_use, 1101);
        a.reset_peak();
        assert_eq!(a.stats().peak_bytes_in_use, 1);
        drop(a);
        // What was still live goes back when the allocator goes.
        assert_eq!(fake.freed.lock().len(), 2);
    }

    /// A platform whose allocation reads the allocator's statistics from another thread
    /// (standing for work that frees memory while the platform waits for it).
    struct Probe {
        allocator: std::sync::OnceLock<std::sync::Weak<DirectAllocator>>,
        fake: Fake,
    }

    impl RawAllocator for Probe {
        fn raw_allocate(&self, size: u64) -> Result<DevicePtr> {
            let a = self.allocator.get().and_then(std::sync::Weak::upgrade);
            let a = a.expect("the allocator is alive while it allocates");
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(a.stats());
            });
            let stats = rx.recv_timeout(std::time::Duration::from_secs(20));
            let stats = stats.map_err(|_| Error::internal("called with the lock held"))?;
            assert_eq!(
                stats.bytes_in_use, 0,
                "an allocation under way is not in use yet"
            );
            self.fake.raw_allocate(size)
        }
        fn raw_deallocate(&self, ptr: DevicePtr, size: u64) {
            self.fake.raw_deallocate(ptr, size)
        }
    }

    #[test]
    fn the_platform_is_called_without_the_lock() {
        let probe = Arc::new(Probe {
            allocator: std::sync::OnceLock::new(),
            fake: Fake::default(),
        });
        let a = Arc::new(DirectAllocator::new(probe.clone(), Some(1000)));
        probe.allocator.set(Arc::downgrade(&a)).unwrap();
        let p = a.allocate(600).expect("allocated without the lock");
        assert_eq!(a.stats().bytes_in_use, 600);
        a.deallocate(p).unwrap();
    }
}
