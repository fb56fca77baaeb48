//! Device memory: a host arena behind fake device addresses, with a first-fit allocator
//! that coalesces free blocks.

use std::collections::BTreeMap;
use std::ops::Range;

use devplug_plugin_sdk::{DeviceAddr, Error, MemoryUsage, Result};

/// Allocations are aligned (and rounded) to this many bytes.
pub const ALIGN: u64 = 256;

/// One device's memory.
pub struct Memory {
    /// Device address of arena byte 0: never a host address the host could mistake.
    base: u64,
    bytes: Vec<u8>,
    /// Free blocks: offset → length (multiples of ALIGN, coalesced).
    free: BTreeMap<u64, u64>,
    /// Live allocations: offset → requested size.
    allocs: BTreeMap<u64, u64>,
    in_use: u64,
}

impl Memory {
    /// `size` bytes of memory for device `ordinal`. The arena is reserved now (an error,
    /// not an abort, when the host cannot give it).
    pub fn new(ordinal: i32, size: u64) -> Result<Memory> {
        let usable = size - size % ALIGN;
        let len = usize::try_from(usable).map_err(|_| {
            Error::resource_exhausted(format!("{size} bytes of device memory do not fit the host"))
        })?;
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(len).map_err(|e| {
            Error::resource_exhausted(format!(
                "cannot reserve {len} bytes of host memory for the device: {e}"
            ))
        })?;
        bytes.resize(len, 0);
        let mut free = BTreeMap::new();
        if usable > 0 {
            free.insert(0, usable);
        }
        Ok(Memory {
            base: (0xD000 + u64::from(ordinal.unsigned_abs())) << 32,
            bytes,
            free,
            allocs: BTreeMap::new(),
            in_use: 0,
        })
    }

    /// Bytes of memory.
    pub fn total(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Free and total bytes (allocations count with their rounding).
    pub fn usage(&self) -> MemoryUsage {
        MemoryUsage {
            free: self.total() - self.in_use,
            total: self.total(),
        }
    }

    fn largest_free(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// First fit.
    pub fn allocate(&mut self, size: u64) -> Result<DeviceAddr> {
        let rounded = size.checked_next_multiple_of(ALIGN).ok_or_else(|| {
            Error::resource_exhausted(format!("{size} bytes is more than the device has"))
        })?;
        let found = self
            .free
            .iter()
            .find(|&(_, &len)| len >= rounded)
            .map(|(&off, &len)| (off, len));
        let Some((off, len)) = found else {
            return Err(Error::resource_exhausted(format!(
                "out of device memory: {size} bytes asked, largest free block {} of {} bytes",
                self.largest_free(),
                self.total()
            )));
        };
        self.free.remove(&off);
        if len > rounded {
            self.free.insert(off + rounded, len - rounded);
        }
        self.allocs.insert(off, size);
        self.in_use += rounded;
        Ok(DeviceAddr(self.base + off))
    }

    /// Frees an allocation; an address that is not one is an error (logged by the SDK).
    pub fn deallocate(&mut self, addr: DeviceAddr, size: u64) -> Result<()> {
        let off = addr
            .get()
            .checked_sub(self.base)
            .filter(|off| self.allocs.get(off) == Some(&size))
            .ok_or_else(|| {
                Error::invalid_argument(format!("deallocate({addr}, {size}): not an allocation"))
            })?;
        self.allocs.remove(&off);
        let mut start = off;
        let mut len = size.next_multiple_of(ALIGN);
        self.in_use -= len;
        // Coalesce with the free neighbours.
        if let Some((&prev, &plen)) = self.free.range(..start).next_back() {
            if prev + plen == start {
                self.free.remove(&prev);
                start = prev;
                len += plen;
            }
        }
        if let Some(&nlen) = self.free.get(&(start + len)) {
            self.free.remove(&(start + len));
            len += nlen;
        }
        self.free.insert(start, len);
        Ok(())
    }

    /// The arena range of `[addr, addr + len)`, which must lie inside one live allocation.
    pub fn range(&self, addr: DeviceAddr, len: u64) -> Result<Range<usize>> {
        if len == 0 {
            return Ok(0..0);
        }
        let bad = || {
            Error::invalid_argument(format!(
                "[{addr}, +{len}) is not inside a live allocation of this device"
            ))
        };
        let off = addr.get().checked_sub(self.base).ok_or_else(bad)?;
        let (&start, &size) = self.allocs.range(..=off).next_back().ok_or_else(bad)?;
        let end = off.checked_add(len).ok_or_else(bad)?;
        if end > start + size {
            return Err(bad());
        }
        // In the arena, so it fits usize.
        Ok(off as usize..end as usize)
    }

    /// The bytes of a range from [`Memory::range`].
    pub fn bytes(&self, r: Range<usize>) -> &[u8] {
        &self.bytes[r]
    }

    /// The bytes of a range from [`Memory::range`].
    pub fn bytes_mut(&mut self, r: Range<usize>) -> &mut [u8] {
        &mut self.bytes[r]
    }

    /// Copies within the arena (ranges may overlap).
    pub fn copy_within(&mut self, src: Range<usize>, dst: usize) {
        self.bytes.copy_within(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_rounds_and_coalesces() {
        let mut m = Memory::new(0, 4 * ALIGN).expect("memory");
        let a = m.allocate(1).expect("a");
        let b = m.allocate(ALIGN + 1).expect("b");
        assert_eq!(b.get() - a.get(), ALIGN);
        assert_eq!(m.usage().free, ALIGN);
        assert!(m.allocate(2 * ALIGN).is_err());
        m.deallocate(a, 1).expect("free a");
        m.deallocate(b, ALIGN + 1).expect("free b");
        assert_eq!(m.usage().free, 4 * ALIGN);
        let all = m.allocate(4 * ALIGN).expect("coalesced");
        assert_eq!(all, a);
        assert!(m.deallocate(DeviceAddr(all.get() + 1), 4 * ALIGN).is_err());
        assert!(m.range(all, 4 * ALIGN).is_ok());
        assert!(m.range(all, 4 * ALIGN + 1).is_err());
        assert!(m.range(DeviceAddr(5), 1).is_err());
    }
}
