//! The caching best-fit suballocator (BFC-style) that the core puts over each platform's raw
//! device allocation.
//!
//! The suballocator reserves large *regions* from a [`RawAllocator`] and carves them into
//! *chunks*. Every chunk is either in use (handed out by [`Suballocator::allocate`]) or free.
//! Chunks of one region are linked in address order, so a freed chunk is merged with its free
//! neighbours at once (never across regions). Free chunks are indexed by size in power-of-two
//! bins, each ordered by `(size, address)` (a sorted vector while the bin is small, a B-tree
//! when it grows large), so the best fit (the smallest free chunk that fits, the lowest address
//! among equals) is one or two ordered look-ups away, as in TensorFlow's `BFCAllocator`. Live
//! allocations are found by address in a hash map; the hot path allocates nothing once warm.
//!
//! When no free chunk fits, a new region is reserved: the larger of the request and the growth
//! size, which starts at [`SuballocatorOptions::min_region_size`] and doubles with each region.
//! A byte limit caps what is held from the device in total; when it would be exceeded, wholly
//! free regions are given back first, and if the request still does not fit the result is a
//! [`Code::ResourceExhausted`](crate::error::Code::ResourceExhausted) error, never an abort.
//! The limit may change at any time ([`Suballocator::set_limit`]); lowered below what is held,
//! wholly free regions are given back until it is met (or none is left), chunks in use are
//! never touched, and no region is reserved until enough is freed to fit under it again.
//!
//! Device addresses are opaque `u64`s: the suballocator never dereferences them.
//!
//! Small frees are cached: a freed chunk of at most [`CACHE_CLASSES`] alignment units goes on a
//! per-size list (at most [`CACHE_DEPTH`] each, [`CACHE_BYTES`] in all) without being merged,
//! and the next allocation of that size takes it back without searching the free index — the
//! eager-op pattern of "allocate an output, free it soon after". Cached chunks count as free in
//! every statistic; they are merged back (the cache flushed) before statistics are taken, before
//! cached regions are released, and before a new region would be reserved, so the cache never
//! makes an allocation fail or a figure inexact.
//!
//! One [`parking_lot::Mutex`] guards the whole state. The raw allocator is never called with
//! that lock held: a platform's allocation may block (CUDA's `cuMemAlloc` and `cuMemFree` wait
//! for the device's streams), and work those streams run — a host callback that drops a
//! buffer — may need the lock. The bytes of a region being reserved count against the limit
//! while the lock is released (`pending`), so the limit stays exact; regions given back are
//! taken out of the state under the lock and returned to the raw allocator after it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::DevicePtr;
use crate::error::{Error, Result};

/// The platform side of the suballocator: raw allocations from the device.
///
/// Implemented by the core's device layer over each platform's allocation functions. Neither
/// method is called with the suballocator's lock held: both may block, and may wait for work
/// that calls back into the suballocator.
pub trait RawAllocator: Send + Sync {
    /// Allocates `size` bytes of device memory. A failure is returned as is; the suballocator
    /// releases its cached regions, retries once and then passes the error on with context.
    ///
    /// An address that is not a multiple of the suballocator's alignment is accepted: the
    /// suballocator then asks once more for `size + alignment` bytes and aligns inside them.
    fn raw_allocate(&self, size: u64) -> Result<DevicePtr>;

    /// Returns memory that [`raw_allocate`](RawAllocator::raw_allocate) gave out; `size` is
    /// the size that was asked for then.
    fn raw_deallocate(&self, ptr: DevicePtr, size: u64);
}

/// The default alignment of addresses and chunk sizes, in bytes.
const DEFAULT_ALIGNMENT: u64 = 256;
/// The default size of the first region, in bytes.
const DEFAULT_MIN_REGION_SIZE: u64 = 1 << 20;

/// How a [`Suballocator`] reserves and carves device memory.
#[derive(Clone, Debug)]
pub struct SuballocatorOptions {
    /// Bytes the suballocator may hold from the device in total; `None` means unlimited.
    /// The initial value: [`Suballocator::set_limit`] changes it.
    pub limit: Option<u64>,
    /// Every returned address and every chunk size is a multiple of this (default 256). A
    /// value that is not a power of two is rounded up to the next one (0 becomes 1).
    pub alignment: u64,
    /// The smallest raw allocation (default 1 MiB). Regions grow (each one twice the size of
    /// the one before) as more memory is needed, capped by what the limit leaves.
    pub min_region_size: u64,
    /// Cache small frees for the next allocation of the same size (default `true`; see the
    /// module docs). Off, every allocation is a best fit in address order.
    pub cache_small_frees: bool,
}

impl Default for SuballocatorOptions {
    fn default() -> SuballocatorOptions {
        SuballocatorOptions {
            limit: None,
            alignment: DEFAULT_ALIGNMENT,
            min_region_size: DEFAULT_MIN_REGION_SIZE,
            cache_small_frees: true,
        }
    }
}

/// A snapshot of a suballocator's statistics. All figures are exact at the time of the call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// The sum of the (rounded) sizes of the live allocations.
    pub bytes_in_use: u64,
    /// The highest `bytes_in_use` since creation or the last [`Suballocator::reset_peak`].
    pub peak_bytes_in_use: u64,
    /// Successful allocations ever made.
    pub num_allocs: u64,
    /// Live allocations now.
    pub active_allocs: u64,
    /// The largest (rounded) allocation ever made.
    pub largest_alloc_size: u64,
    /// The limit in force, if any (from the options or the last
    /// [`Suballocator::set_limit`]).
    pub bytes_limit: Option<u64>,
    /// Bytes currently held from the raw allocator.
    pub bytes_reserved: u64,
    /// The largest free chunk inside the reserved regions.
    pub largest_free_block: u64,
}

/// A caching best-fit suballocator over a [`RawAllocator`]. Thread-safe: every method takes
/// `&self`.
///
/// Dropping it returns every region to the raw allocator, including those that still hold
/// live allocations.
pub struct Suballocator {
    raw: Arc<dyn RawAllocator>,
    state: Mutex<State>,
    /// Signalled when pending bytes settle (a region reserved or given back).
    settled: Condvar,
}

impl Suballocator {
    /// A suballocator that reserves its regions from `raw`. Nothing is reserved until the
    /// first allocation.
    pub fn new(raw: Arc<dyn RawAllocator>, options: SuballocatorOptions) -> Suballocator {
        let alignment = options.alignment.max(1).checked_next_power_of_two();
        // A request for an alignment above 2^63 cannot be honoured; use the largest there is.
        let alignment = alignment.unwrap_or(1 << 63);
        let min_region = round_up(options.min_region_size.max(1), alignment).unwrap_or(alignment);
        let config = Config {
            limit: options.limit,
            alignment,
            min_region,
            cache: options.cache_small_frees,
        };
        Suballocator {
            raw,
            state: Mutex::new(State::new(config)),
            settled: Condvar::new(),
        }
    }

    /// Allocates `size` bytes, rounded up to the alignment. Size 0 is allowed and returns a
    /// distinct chunk of the minimum size.
    ///
    /// Fails with `RESOURCE_EXHAUSTED` when the limit does not leave room for the request
    /// (after giving back cached regions), or with the raw allocator's error when the device
    /// refuses a new region.
    pub fn allocate(&self, size: u64) -> Result<DevicePtr> {
        // Under the lock: a cached or free chunk, or what to do to get one. The raw allocator
        // is called between two holds of the lock (see the module docs).
        let mut limit_released = false;
        let mut exact = false;
        loop {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            let Some(rounded) = round_up(size.max(1), state.config.alignment) else {
                drop(guard);
                return Err(Error::resource_exhausted(format!(
                    "cannot allocate {size} bytes: the size exceeds the address space"
                )));
            };
            if state.over_limit {
                // Rare: the limit was lowered below what chunks in use hold.
                if state.trim_due {
                    // A region became wholly free since: it goes back first.
                    let regions = state.detach_over_limit();
                    if !regions.is_empty() {
                        drop(guard);
                        self.give_back(regions);
                        continue;
                    }
                }
                state.check_over_limit(size, rounded)?;
            }
            if let Some(ptr) = state.take_cached(rounded) {
                return Ok(ptr);
            }
            if let Some(id) = state.free.best_fit(rounded) {
                return Ok(state.take(id, rounded));
            }
            state.flush_cache();
            if let Some(id) = state.free.best_fit(rounded) {
                return Ok(state.take(id, rounded));
            }
            let region_size = match state.plan_growth(size, rounded, limit_released, exact)? {
                Growth::Wait => {
                    self.settled.wait(&mut guard);
                    continue;
                }
                Growth::Release(regions) => {
                    drop(guard);
                    self.give_back(regions);
                    limit_released = true;
                    continue;
                }
                Growth::Reserve(region_size) => region_size,
            };
            let alignment = state.config.alignment;
            drop(guard);
            let reserved = self.reserve_raw(region_size, alignment);
            let mut guard = self.state.lock();
            let state = &mut *guard;
            // Pending until here: the region's bytes, padding included.
            state.pending -= reserved.as_ref().map_or(region_size, |r| r.raw_size);
            self.settled.notify_all();
            match reserved {
                Ok(raw) => match state.add_region(raw, region_size) {
                    Ok(id) => {
                        if !exact {
                            state.growth = state
                                .growth
                                .saturating_mul(2)
                                .min(MAX_GROWTH)
                                .max(state.config.min_region);
                        }
                        return Ok(state.take(id, rounded));
                    }
                    Err(e) => {
                        drop(guard);
                        self.raw
                            .raw_deallocate(DevicePtr(raw.raw_ptr), raw.raw_size);
                        return Err(e);
                    }
                },
                Err(e) if exact => {
                    return Err(e.context(format!(
                        "reserving a {rounded}-byte region ({} bytes in use, {} reserved)",
                        state.bytes_in_use, state.bytes_reserved
                    )));
                }
                Err(_) => {
                    // The device may be short of memory that cached regions hold, or of a
                    // region as large as the growth size: give back what is cached and ask for
                    // no more than the request needs. Growth backs off so later regions ask
                    // for less.
                    if region_size > rounded {
                        state.growth = (state.growth / 2).max(state.config.min_region);
                    }
                    let regions = state.detach_free_regions();
                    drop(guard);
                    self.give_back(regions);
                    exact = true;
                }
            }
        }
    }

    /// Asks the raw allocator for a region of `size` bytes (whose bytes the caller counted as
    /// pending), without the lock; an address off the alignment is given back and asked for
    /// again with room to align inside (the unit of padding is then pending too, until the
    /// caller takes the region's `raw_size` off).
    fn reserve_raw(&self, size: u64, alignment: u64) -> Result<RawRegion> {
        let ptr = self.raw.raw_allocate(size)?;
        if ptr.0 & (alignment - 1) == 0 {
            return Ok(RawRegion {
                raw_ptr: ptr.0,
                raw_size: size,
                base: ptr.0,
            });
        }
        // Misaligned: ask for one alignment unit more and align inside it.
        self.raw.raw_deallocate(ptr, size);
        let Some(padded) = size.checked_add(alignment) else {
            return Err(Error::resource_exhausted(format!(
                "cannot reserve {size} bytes aligned to {alignment}: size overflow"
            )));
        };
        {
            let mut state = self.state.lock();
            if let Some(limit) = state.config.limit {
                // `size` is already pending; the unit of padding must fit as well.
                if alignment > limit.saturating_sub(state.bytes_reserved + state.pending) {
                    return Err(Error::resource_exhausted(format!(
                        "device memory limit exceeded: the raw allocator returned an address \
                         not aligned to {alignment}, and {padded} bytes to align {size} do not \
                         fit the limit {limit} ({} reserved)",
                        state.bytes_reserved
                    )));
                }
            }
            state.pending += alignment;
        }
        let ptr = match self.raw.raw_allocate(padded) {
            Ok(ptr) => ptr,
            Err(e) => {
                self.state.lock().pending -= alignment;
                self.settled.notify_all();
                return Err(e);
            }
        };
        Ok(RawRegion {
            raw_ptr: ptr.0,
            raw_size: padded,
            base: round_up(ptr.0, alignment).unwrap_or(0),
        })
    }

    /// Returns regions taken out of the state to the raw allocator (without the lock); their
    /// bytes count as pending until then.
    fn give_back(&self, regions: Vec<RawRegion>) -> u64 {
        if regions.is_empty() {
            return 0;
        }
        let mut released = 0;
        for r in regions {
            released += r.raw_size;
            self.raw.raw_deallocate(DevicePtr(r.raw_ptr), r.raw_size);
        }
        self.state.lock().pending -= released;
        self.settled.notify_all();
        released
    }

    /// Frees an allocation made by [`allocate`](Suballocator::allocate).
    ///
    /// An address that is not a live allocation of this suballocator (never allocated, already
    /// freed, or not the start of an allocation) gives `INVALID_ARGUMENT` and changes nothing.
    pub fn deallocate(&self, ptr: DevicePtr) -> Result<()> {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        match state.live.remove(&ptr.0) {
            Some(id) => {
                if !state.cache(id) {
                    state.release(id);
                }
                Ok(())
            }
            None => {
                drop(guard);
                Err(Error::invalid_argument(format!(
                    "deallocate: {:#x} is not a live allocation of this suballocator \
                     (never allocated, already freed, or not the start of an allocation)",
                    ptr.0
                )))
            }
        }
    }

    /// The rounded size of the live allocation at `ptr`, or `None` if there is none.
    pub fn size_of(&self, ptr: DevicePtr) -> Option<u64> {
        let state = self.state.lock();
        state.live.get(&ptr.0).map(|&id| state.chunk(id).size)
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> MemoryStats {
        let mut state = self.state.lock();
        state.flush_cache();
        MemoryStats {
            bytes_in_use: state.bytes_in_use,
            peak_bytes_in_use: state.peak_bytes_in_use,
            num_allocs: state.num_allocs,
            active_allocs: state.live.len() as u64,
            largest_alloc_size: state.largest_alloc_size,
            bytes_limit: state.config.limit,
            bytes_reserved: state.bytes_reserved,
            largest_free_block: state.free.largest(),
        }
    }

    /// Returns every wholly free region to the raw allocator and the number of bytes given
    /// back.
    pub fn release_cached(&self) -> u64 {
        let regions = self.state.lock().detach_free_regions();
        self.give_back(regions)
    }

    /// Sets the limit on the bytes held from the raw allocator (`None`: no limit) and returns
    /// the bytes given back to meet it.
    ///
    /// Takes effect at once for every allocation that takes the lock after it (allocations
    /// read the limit under the lock, so a concurrent one sees either the old or the new
    /// value; a region already being reserved under the old limit is still added). When the
    /// suballocator holds more than the new limit, wholly free regions (cached frees merged
    /// first) are given back until it holds no more than the limit or none is left; chunks in
    /// use are never touched. While it still holds more, a request is `RESOURCE_EXHAUSTED`
    /// unless it fits under the limit beside the bytes in use, small frees are not cached, and
    /// a region that a free leaves wholly free is given back by the next allocation.
    pub fn set_limit(&self, limit: Option<u64>) -> u64 {
        let regions = {
            let mut state = self.state.lock();
            state.config.limit = limit;
            state.limit_changed = true;
            state.update_over_limit();
            state.detach_over_limit()
        };
        // A waiter at the old limit looks again: a raised limit may make room.
        self.settled.notify_all();
        self.give_back(regions)
    }

    /// Gives back wholly free regions while more than the limit is held (after frees that
    /// followed a lowered limit); the bytes given back.
    pub fn trim_to_limit(&self) -> u64 {
        let regions = self.state.lock().detach_over_limit();
        self.give_back(regions)
    }

    /// The limit in force, if any.
    pub fn limit(&self) -> Option<u64> {
        self.state.lock().config.limit
    }

    /// The alignment of addresses and chunk sizes: every request is rounded up to it.
    pub fn alignment(&self) -> u64 {
        self.state.lock().config.alignment
    }

    /// Sets the peak to the bytes in use now.
    pub fn reset_peak(&self) {
        let mut state = self.state.lock();
        state.peak_bytes_in_use = state.bytes_in_use;
    }
}

impl Drop for Suballocator {
    fn drop(&mut self) {
        let state = self.state.get_mut();
        for region in state.regions.drain(..) {
            self.raw
                .raw_deallocate(DevicePtr(region.raw_ptr), region.raw_size);
        }
        state.bytes_reserved = 0;
    }
}

impl fmt::Debug for Suballocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Suballocator")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// `value` rounded up to a multiple of `alignment` (a power of two), or `None` on overflow.
fn round_up(value: u64, alignment: u64) -> Option<u64> {
    let mask = alignment - 1;
    value.checked_add(mask).map(|v| v & !mask)
}

/// Freed chunks of at most this many alignment units are cached (see the module docs).
const CACHE_CLASSES: usize = 16;
/// At most this many chunks are cached per size (outputs of a few hundred ops in flight on an
/// asynchronous stream)…
const CACHE_DEPTH: usize = 256;
/// …and at most this many bytes in all.
const CACHE_BYTES: u64 = 1 << 20;

/// The growth size stops doubling here (a multiple of every alignment up to 2^62).
const MAX_GROWTH: u64 = 1 << 62;

/// The options after normalisation.
#[derive(Clone, Copy, Debug)]
struct Config {
    limit: Option<u64>,
    alignment: u64,
    min_region: u64,
    cache: bool,
}

/// An index into [`State::chunks`].
type ChunkId = u32;
/// The absent link.
const NONE: ChunkId = ChunkId::MAX;

/// A piece of one region, in use or free.
#[derive(Clone, Copy, Debug)]
struct Chunk {
    addr: u64,
    size: u64,
    /// The chunk just below in the same region, or [`NONE`].
    prev: ChunkId,
    /// The chunk just above in the same region, or [`NONE`].
    next: ChunkId,
    in_use: bool,
}

/// One raw allocation.
#[derive(Clone, Copy, Debug)]
struct Region {
    /// What the raw allocator returned and was asked for: what goes back to it.
    raw_ptr: u64,
    raw_size: u64,
    /// The usable, aligned part.
    size: u64,
    /// The chunk at the region's base. Merges always keep the lower chunk, so this never
    /// changes for the life of the region.
    first: ChunkId,
}

/// Everything behind the lock.
struct State {
    config: Config,
    /// The chunks; slots on `spare` are unused.
    chunks: Vec<Chunk>,
    spare: Vec<ChunkId>,
    /// Live allocations: address to chunk.
    live: HashMap<u64, ChunkId, BuildHasherDefault<AddrHasher>>,
    free: FreeIndex,
    regions: Vec<Region>,
    /// The size of the next region, unless the request needs more.
    growth: u64,
    bytes_in_use: u64,
    peak_bytes_in_use: u64,
    num_allocs: u64,
    largest_alloc_size: u64,
    bytes_reserved: u64,
    /// Bytes of regions being reserved, or given back, while the lock is released; they count
    /// against the limit as if reserved.
    pending: u64,
    /// Freed small chunks by size class (`size / alignment - 1`), still marked in use so that
    /// no neighbour merges with them, but not live and not counted in `bytes_in_use`.
    cached: [Vec<ChunkId>; CACHE_CLASSES],
    /// `false` only when every class of `cached` is empty (a hint that skips the cache).
    any_cached: bool,
    /// The bytes of the chunks in `cached`.
    cached_bytes: u64,
    /// The limit was changed after creation, so more than it may be held (chunks in use when
    /// it was lowered); only the invariant check reads it.
    limit_changed: bool,
    /// More than the limit is reserved (it was lowered below what chunks in use held): frees
    /// are not cached, so that regions become wholly free.
    over_limit: bool,
    /// While over the limit, a region became wholly free: the next allocation gives it back
    /// (frees never call the raw allocator, see the module docs).
    trim_due: bool,
}

impl State {
    fn new(config: Config) -> State {
        State {
            config,
            chunks: Vec::new(),
            spare: Vec::new(),
            live: HashMap::default(),
            free: FreeIndex::new(),
            regions: Vec::new(),
            growth: config.min_region,
            bytes_in_use: 0,
            peak_bytes_in_use: 0,
            num_allocs: 0,
            largest_alloc_size: 0,
            bytes_reserved: 0,
            pending: 0,
            cached: std::array::from_fn(|_| Vec::new()),
            any_cached: false,
            cached_bytes: 0,
            limit_changed: false,
            over_limit: false,
            trim_due: false,
        }
    }

    /// While more than a lowered limit is held, a request is refused unless it fits under the
    /// limit beside the chunks in use (free chunks of the regions still held may serve it).
    fn check_over_limit(&self, size: u64, rounded: u64) -> Result<()> {
        match self.config.limit {
            Some(limit) if rounded > limit.saturating_sub(self.bytes_in_use) => {
                Err(Error::resource_exhausted(format!(
                    "device memory limit exceeded: requested {size} bytes, {} in use, \
                     limit {limit} ({} reserved; the limit was lowered below what is held: \
                     free memory first)",
                    self.bytes_in_use, self.bytes_reserved
                )))
            }
            _ => Ok(()),
        }
    }

    /// Notes whether more than the limit is reserved.
    fn update_over_limit(&mut self) {
        self.over_limit = matches!(self.config.limit, Some(limit) if self.bytes_reserved > limit);
        self.trim_due &= self.over_limit;
    }

    /// The cache class of a chunk size, if chunks of that size are cached.
    fn cache_class(&self, size: u64) -> Option<usize> {
        if !self.config.cache {
            return None;
        }
        let units = size >> self.config.alignment.trailing_zeros();
        (1..=CACHE_CLASSES as u64)
            .contains(&units)
            .then(|| units as usize - 1)
    }

    /// Hands out a cached chunk of exactly `rounded` bytes, if there is one.
    fn take_cached(&mut self, rounded: u64) -> Option<DevicePtr> {
        if !self.any_cached {
            return None;
        }
        let class = self.cache_class(rounded)?;
        let id = self.cached[class].pop()?;
        let Chunk { addr, size, .. } = *self.chunk(id);
        self.cached_bytes -= size;
        self.live.insert(addr, id);
        self.account_alloc(size);
        Some(DevicePtr(addr))
    }

    /// Caches the in-use chunk `id` (already removed from `live`) instead of freeing it;
    /// `false` when it is not cacheable (too large, or its list is full).
    fn cache(&mut self, id: ChunkId) -> bool {
        let size = self.chunk(id).size;
        let Some(class) = self.cache_class(size) else {
            return false;
        };
        if self.cached[class].len() >= CACHE_DEPTH
            || self.cached_bytes + size > CACHE_BYTES
            || self.over_limit
        {
            return false;
        }
        self.cached[class].push(id);
        self.any_cached = true;
        self.cached_bytes += size;
        self.bytes_in_use -= size;
        true
    }

    /// Frees every cached chunk for real (merging it with its free neighbours).
    fn flush_cache(&mut self) {
        if !self.any_cached {
            return;
        }
        for class in 0..CACHE_CLASSES {
            while let Some(id) = self.cached[class].pop() {
                self.coalesce(id);
            }
        }
        self.any_cached = false;
        self.cached_bytes = 0;
    }

    fn account_alloc(&mut self, size: u64) {
        self.bytes_in_use += size;
        self.peak_bytes_in_use = self.peak_bytes_in_use.max(self.bytes_in_use);
        self.num_allocs += 1;
        self.largest_alloc_size = self.largest_alloc_size.max(size);
    }

    fn chunk(&self, id: ChunkId) -> &Chunk {
        &self.chunks[id as usize]
    }

    fn chunk_mut(&mut self, id: ChunkId) -> &mut Chunk {
        &mut self.chunks[id as usize]
    }

    /// Stores a chunk in a spare slot or a new one; `None` when every id is taken.
    fn new_chunk(&mut self, chunk: Chunk) -> Option<ChunkId> {
        if let Some(id) = self.spare.pop() {
            self.chunks[id as usize] = chunk;
            return Some(id);
        }
        let id = ChunkId::try_from(self.chunks.len())
            .ok()
            .filter(|&id| id != NONE)?;
        self.chunks.push(chunk);
        Some(id)
    }

    fn drop_chunk(&mut self, id: ChunkId) {
        self.spare.push(id);
    }

    /// Hands out the free chunk `id` (at least `rounded` bytes) for `rounded` bytes, splitting
    /// off the rest as a new free chunk.
    fn take(&mut self, id: ChunkId, rounded: u64) -> DevicePtr {
        let Chunk {
            addr, size, next, ..
        } = *self.chunk(id);
        self.free.remove(size, addr);
        // All sizes are multiples of the alignment, so a remainder is at least one unit.
        if size > rounded {
            let rest = Chunk {
                addr: addr + rounded,
                size: size - rounded,
                prev: id,
                next,
                in_use: false,
            };
            // Without a free id (4 billion chunks) the whole chunk is handed out instead.
            if let Some(rest_id) = self.new_chunk(rest) {
                if next != NONE {
                    self.chunk_mut(next).prev = rest_id;
                }
                let chunk = self.chunk_mut(id);
                chunk.next = rest_id;
                chunk.size = rounded;
                self.free.insert(rest.size, rest.addr, rest_id);
            }
        }
        let chunk = self.chunk_mut(id);
        chunk.in_use = true;
        let size = chunk.size;
        self.live.insert(addr, id);
        self.account_alloc(size);
        DevicePtr(addr)
    }

    /// Frees the in-use chunk `id` (already removed from `live`), merges it with its free
    /// neighbours and indexes the result.
    fn release(&mut self, id: ChunkId) {
        self.bytes_in_use -= self.chunk(id).size;
        self.coalesce(id);
    }

    /// Marks the chunk `id` free, merges it with its free neighbours and indexes the result
    /// (the byte counts are the caller's).
    fn coalesce(&mut self, id: ChunkId) {
        let chunk = self.chunk_mut(id);
        chunk.in_use = false;
        let (prev, next) = (chunk.prev, chunk.next);
        let mut id = id;
        if next != NONE {
            let upper = *self.chunk(next);
            if !upper.in_use {
                self.free.remove(upper.size, upper.addr);
                self.merge(id, next);
            }
        }
        if prev != NONE {
            let lower = *self.chunk(prev);
            if !lower.in_use {
                self.free.remove(lower.size, lower.addr);
                self.merge(prev, id);
                id = prev;
            }
        }
        let chunk = *self.chunk(id);
        self.free.insert(chunk.size, chunk.addr, id);
        if self.over_limit && chunk.prev == NONE && chunk.next == NONE {
            self.trim_due = true;
        }
    }

    /// Merges the chunk `upper` into `lower`, its neighbour just below; neither is indexed.
    fn merge(&mut self, lower: ChunkId, upper: ChunkId) {
        let up = *self.chunk(upper);
        let chunk = self.chunk_mut(lower);
        chunk.size += up.size;
        chunk.next = up.next;
        if up.next != NONE {
            self.chunk_mut(up.next).prev = lower;
        }
        self.drop_chunk(upper);
    }

    /// What to do for a request of `rounded` bytes that no free chunk fits. When the limit
    /// leaves no room: wait while other threads reserve or give back regions (either may make
    /// room), then give back the wholly free regions (once), then fail. Else reserve a region
    /// (its bytes are counted as pending from here on). `exact`: a larger region was refused
    /// already; ask for no more than the request.
    fn plan_growth(
        &mut self,
        size: u64,
        rounded: u64,
        limit_released: bool,
        exact: bool,
    ) -> Result<Growth> {
        let held = self.bytes_reserved + self.pending;
        if let Some(limit) = self.config.limit {
            if rounded > limit.saturating_sub(held) {
                if self.pending > 0 {
                    return Ok(Growth::Wait);
                }
                if !limit_released {
                    return Ok(Growth::Release(self.detach_free_regions()));
                }
                return Err(Error::resource_exhausted(format!(
                    "device memory limit exceeded: requested {size} bytes, {} in use, \
                     limit {limit} ({} reserved, largest free block {})",
                    self.bytes_in_use,
                    self.bytes_reserved,
                    self.free.largest()
                )));
            }
        }
        let wanted = if exact {
            rounded
        } else {
            rounded.max(self.growth)
        };
        let region_size = match self.config.limit {
            Some(limit) if wanted > limit - held => rounded,
            _ => wanted,
        };
        self.pending += region_size;
        Ok(Growth::Reserve(region_size))
    }

    /// Adds the region `raw` (of `size` usable bytes) and returns its single free chunk,
    /// indexed.
    fn add_region(&mut self, raw: RawRegion, size: u64) -> Result<ChunkId> {
        let RawRegion {
            raw_ptr,
            raw_size,
            base,
        } = raw;
        // A region must lie within the address space (and `base` be a real aligned address).
        let fits = base >= raw_ptr && base.checked_add(size).is_some();
        let chunk = Chunk {
            addr: base,
            size,
            prev: NONE,
            next: NONE,
            in_use: false,
        };
        let Some(id) = fits.then(|| self.new_chunk(chunk)).flatten() else {
            return Err(Error::internal(format!(
                "cannot track a {size}-byte region at {raw_ptr:#x}"
            )));
        };
        self.regions.push(Region {
            raw_ptr,
            raw_size,
            size,
            first: id,
        });
        self.bytes_reserved += raw_size;
        self.free.insert(size, base, id);
        // Over only for a region reserved under a limit lowered since.
        self.update_over_limit();
        Ok(id)
    }

    /// Takes every wholly free region out of the state, for the caller to give back to the
    /// raw allocator once the lock is released ([`Suballocator::give_back`]); their bytes
    /// count as pending until then.
    fn detach_free_regions(&mut self) -> Vec<RawRegion> {
        self.detach_free_regions_down_to(0)
    }

    /// Takes wholly free regions out of the state (as [`State::detach_free_regions`]) while
    /// more than the limit is held; none without a limit or under it.
    fn detach_over_limit(&mut self) -> Vec<RawRegion> {
        match self.config.limit {
            Some(limit) if self.bytes_reserved > limit => self.detach_free_regions_down_to(limit),
            _ => Vec::new(),
        }
    }

    /// Takes wholly free regions out of the state (as [`State::detach_free_regions`]) until
    /// no more than `target` bytes are reserved or none is left.
    fn detach_free_regions_down_to(&mut self, target: u64) -> Vec<RawRegion> {
        self.flush_cache();
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.regions.len() && self.bytes_reserved > target {
            let region = self.regions[i];
            let first = *self.chunk(region.first);
            if first.in_use || first.size != region.size {
                i += 1;
                continue;
            }
            self.free.remove(first.size, first.addr);
            self.drop_chunk(region.first);
            self.regions.swap_remove(i);
            self.bytes_reserved -= region.raw_size;
            self.pending += region.raw_size;
            out.push(RawRegion {
                raw_ptr: region.raw_ptr,
                raw_size: region.raw_size,
                base: region.raw_ptr,
            });
        }
        // Still over the limit only if no wholly free region is left.
        self.trim_due = false;
        self.update_over_limit();
        out
    }
}

/// What [`State::plan_growth`] asks the caller to do.
enum Growth {
    /// Wait until pending bytes settle, then look again.
    Wait,
    /// Give these regions back, then look again.
    Release(Vec<RawRegion>),
    /// Reserve a region of this many bytes (counted as pending).
    Reserve(u64),
}

/// A raw allocation for a region: what goes back to the raw allocator, and the aligned base.
#[derive(Clone, Copy, Debug)]
struct RawRegion {
    raw_ptr: u64,
    raw_size: u64,
    base: u64,
}

#[cfg(test)]
impl State {
    /// Panics unless every structural invariant holds.
    fn check_invariants(&self) {
        let alignment = self.config.alignment;
        let (mut free_chunks, mut live_chunks, mut in_use, mut reserved) = (0, 0, 0, 0);
        let mut cached_chunks = 0;
        for region in &self.regions {
            reserved += region.raw_size;
            let base = self.chunk(region.first).addr;
            assert_eq!(base % alignment, 0, "region base {base:#x} misaligned");
            assert!(
                base >= region.raw_ptr && base + region.size <= region.raw_ptr + region.raw_size
            );
            let (mut id, mut prev, mut addr, mut prev_free) = (region.first, NONE, base, false);
            while id != NONE {
                let c = *self.chunk(id);
                assert_eq!(c.addr, addr, "chunks not contiguous");
                assert_eq!(c.prev, prev, "broken prev link");
                assert!(
                    c.size > 0 && c.size & (alignment - 1) == 0,
                    "bad chunk size {}",
                    c.size
                );
                if c.in_use && self.cached.iter().any(|l| l.contains(&id)) {
                    cached_chunks += 1;
                    assert!(!self.live.contains_key(&c.addr), "cached chunk still live");
                } else if c.in_use {
                    assert_eq!(self.live.get(&c.addr), Some(&id), "in-use chunk not live");
                    in_use += c.size;
                    live_chunks += 1;
                } else {
                    assert!(!prev_free, "two adjacent free chunks at {addr:#x}");
                    let bin = &self.free.bins[FreeIndex::bin(c.size)];
                    assert_eq!(bin.get(c.size, c.addr), Some(id), "free chunk not indexed");
                    free_chunks += 1;
                }
                prev_free = !c.in_use;
                addr += c.size;
                prev = id;
                id = c.next;
            }
            assert_eq!(addr, base + region.size, "chunks do not cover the region");
        }
        assert_eq!(live_chunks, self.live.len());
        assert_eq!(in_use, self.bytes_in_use);
        assert_eq!(reserved, self.bytes_reserved);
        if let Some(limit) = self.config.limit {
            // Over the limit only once it was lowered below what chunks in use hold, and then
            // no wholly free region is kept unless the next allocation is to give it back.
            let wholly_free = self.regions.iter().any(|r| {
                let first = self.chunk(r.first);
                !first.in_use && first.size == r.size
            });
            assert!(
                reserved <= limit || (self.limit_changed && (!wholly_free || self.trim_due)),
                "reserved {reserved} over limit {limit}"
            );
            assert_eq!(self.over_limit, reserved > limit, "over_limit stale");
        }
        let indexed: usize = self.free.bins.iter().map(Bin::len).sum();
        assert_eq!(indexed, free_chunks, "stale entries in the free index");
        for (b, bin) in self.free.bins.iter().enumerate() {
            match bin {
                Bin::Sorted(v) => assert!(v.windows(2).all(|w| w[0].key() < w[1].key())),
                Bin::Tree(t) => assert!(t.len() >= SORTED_BELOW, "a small tree bin"),
            }
            assert_eq!(
                self.free.nonempty & (1 << b) != 0,
                !bin.is_empty(),
                "bin mask"
            );
        }
        let mut spare = self.spare.clone();
        spare.sort_unstable();
        spare.dedup();
        assert_eq!(spare.len(), self.spare.len(), "a spare slot listed twice");
        assert_eq!(
            self.chunks.len(),
            free_chunks + live_chunks + cached_chunks + spare.len(),
            "leaked chunk slots"
        );
        assert_eq!(
            cached_chunks,
            self.cached.iter().map(Vec::len).sum::<usize>(),
            "a cached chunk outside the regions"
        );
        assert!(self.any_cached || cached_chunks == 0, "cache flag");
        let cached_bytes: u64 = self
            .cached
            .iter()
            .flatten()
            .map(|&id| self.chunk(id).size)
            .sum();
        assert_eq!(cached_bytes, self.cached_bytes, "cached byte count");
        assert!(cached_bytes <= CACHE_BYTES);
    }
}

/// Free chunks by size: bin `b` holds the chunks whose size has its highest set bit at `b`,
/// ordered by `(size, address)`.
struct FreeIndex {
    bins: [Bin; 64],
    /// Bit `b` is set when bin `b` is not empty.
    nonempty: u64,
}

impl FreeIndex {
    fn new() -> FreeIndex {
        FreeIndex {
            bins: std::array::from_fn(|_| Bin::Sorted(Vec::new())),
            nonempty: 0,
        }
    }

    /// The bin of a size (> 0).
    fn bin(size: u64) -> usize {
        63 - size.leading_zeros() as usize
    }

    fn insert(&mut self, size: u64, addr: u64, id: ChunkId) {
        let b = FreeIndex::bin(size);
        self.bins[b].insert(FreeEntry { size, addr, id });
        self.nonempty |= 1 << b;
    }

    fn remove(&mut self, size: u64, addr: u64) {
        let b = FreeIndex::bin(size);
        let bin = &mut self.bins[b];
        bin.remove(size, addr);
        if bin.is_empty() {
            self.nonempty &= !(1 << b);
        }
    }

    /// The smallest free chunk of at least `size` bytes, the lowest address among equals.
    fn best_fit(&self, size: u64) -> Option<ChunkId> {
        let b = FreeIndex::bin(size);
        if self.nonempty & (1 << b) != 0 {
            if let Some(id) = self.bins[b].first_at_least(size) {
                return Some(id);
            }
        }
        // Every chunk in a higher bin is larger than any in bin `b`: the first one wins.
        let higher = self.nonempty & (u64::MAX << b << 1);
        if higher == 0 {
            return None;
        }
        self.bins[higher.trailing_zeros() as usize].first_at_least(0)
    }

    /// The size of the largest free chunk, 0 if there is none.
    fn largest(&self) -> u64 {
        if self.nonempty == 0 {
            return 0;
        }
        self.bins[63 - self.nonempty.leading_zeros() as usize].largest()
    }
}

/// A free chunk as the index keeps it.
#[derive(Clone, Copy, Debug)]
struct FreeEntry {
    size: u64,
    addr: u64,
    id: ChunkId,
}

impl FreeEntry {
    fn key(&self) -> (u64, u64) {
        (self.size, self.addr)
    }
}

/// A bin holding more entries than this becomes a tree.
const TREE_ABOVE: usize = 64;
/// A tree holding fewer entries than this becomes a sorted vector again.
const SORTED_BELOW: usize = 16;

/// One size bin, ordered by `(size, address)`. Most bins hold few chunks: a sorted vector
/// (binary search, and no allocation once its capacity is there) is then the fastest. A bin
/// that grows large becomes a tree, so insertion and removal stay logarithmic.
#[derive(Debug)]
enum Bin {
    Sorted(Vec<FreeEntry>),
    Tree(BTreeMap<(u64, u64), ChunkId>),
}

impl Bin {
    fn insert(&mut self, entry: FreeEntry) {
        match self {
            Bin::Sorted(v) => {
                let key = entry.key();
                let at = v.partition_point(|e| e.key() < key);
                v.insert(at, entry);
                if v.len() > TREE_ABOVE {
                    let tree = v.iter().map(|e| (e.key(), e.id)).collect();
                    *self = Bin::Tree(tree);
                }
            }
            Bin::Tree(t) => {
                t.insert(entry.key(), entry.id);
            }
        }
    }

    fn remove(&mut self, size: u64, addr: u64) {
        match self {
            Bin::Sorted(v) => {
                if let Ok(at) = v.binary_search_by(|e| e.key().cmp(&(size, addr))) {
                    v.remove(at);
                }
            }
            Bin::Tree(t) => {
                t.remove(&(size, addr));
                if t.len() < SORTED_BELOW {
                    let mut v = Vec::with_capacity(TREE_ABOVE + 1);
                    v.extend(
                        t.iter()
                            .map(|(&(size, addr), &id)| FreeEntry { size, addr, id }),
                    );
                    *self = Bin::Sorted(v);
                }
            }
        }
    }

    /// The first chunk (in `(size, address)` order) of at least `size` bytes.
    fn first_at_least(&self, size: u64) -> Option<ChunkId> {
        match self {
            Bin::Sorted(v) => v.get(v.partition_point(|e| e.size < size)).map(|e| e.id),
            Bin::Tree(t) => t.range((size, 0)..).next().map(|(_, &id)| id),
        }
    }

    fn largest(&self) -> u64 {
        match self {
            Bin::Sorted(v) => v.last().map_or(0, |e| e.size),
            Bin::Tree(t) => t.last_key_value().map_or(0, |(&(size, _), _)| size),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn len(&self) -> usize {
        match self {
            Bin::Sorted(v) => v.len(),
            Bin::Tree(t) => t.len(),
        }
    }

    #[cfg(test)]
    fn get(&self, size: u64, addr: u64) -> Option<ChunkId> {
        match self {
            Bin::Sorted(v) => v
                .binary_search_by(|e| e.key().cmp(&(size, addr)))
                .ok()
                .map(|at| v[at].id),
            Bin::Tree(t) => t.get(&(size, addr)).copied(),
        }
    }
}

/// A fast hasher for device addresses (which have their low bits zero): a folded 64×64→128
/// multiply, so high and low bits of the hash both depend on every bit of the address.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let p = u128::from(x ^ 0x243f_6a88_85a3_08d3) * 0x9e37_79b9_7f4a_7c15;
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;

    /// A fake device: each raw region is a real `Vec<u8>` at a fake address, with gaps between
    /// regions so that they are never contiguous.
    struct FakeDevice {
        state: Mutex<FakeState>,
    }

    struct FakeState {
        regions: BTreeMap<u64, Vec<u8>>,
        next_slot: u64,
        /// Bytes handed out and not yet returned.
        outstanding: u64,
        /// Device memory size: raw allocations beyond it fail.
        capacity: u64,
        /// How many of the next raw allocations fail.
        fail_next: u32,
        /// Added to every returned address (to test misaligned raw allocators).
        misalign: u64,
        /// Sizes of the successful raw allocations, in order.
        allocations: Vec<u64>,
        /// The most bytes ever outstanding at once.
        peak: u64,
        deallocations: u64,
        /// Deallocations that did not match a live raw allocation (address and size).
        bad_frees: u64,
    }

    impl FakeDevice {
        fn new() -> Arc<FakeDevice> {
            Arc::new(FakeDevice {
                state: Mutex::new(FakeState {
                    regions: BTreeMap::new(),
                    next_slot: 1,
                    outstanding: 0,
                    capacity: 1 << 30,
                    fail_next: 0,
                    misalign: 0,
                    allocations: Vec::new(),
                    peak: 0,
                    deallocations: 0,
                    bad_frees: 0,
                }),
            })
        }

        fn outstanding(&self) -> u64 {
            self.state.lock().outstanding
        }

        fn allocations(&self) -> Vec<u64> {
            self.state.lock().allocations.clone()
        }

        fn raw_allocs(&self) -> usize {
            self.state.lock().allocations.len()
        }

        fn deallocations(&self) -> u64 {
            self.state.lock().deallocations
        }

        fn bad_frees(&self) -> u64 {
            self.state.lock().bad_frees
        }

        /// The region bytes `[addr, addr + len)`, which must lie inside one raw region.
        fn with_bytes<R>(&self, addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
            let mut state = self.state.lock();
            let (&base, bytes) = state
                .regions
                .range_mut(..=addr)
                .next_back()
                .expect("address below every region");
            let offset = (addr - base) as usize;
            assert!(
                offset + len <= bytes.len(),
                "{addr:#x}+{len} outside its region"
            );
            f(&mut bytes[offset..offset + len])
        }

        fn write(&self, addr: u64, data: &[u8]) {
            self.with_bytes(addr, data.len(), |b| b.copy_from_slice(data));
        }

        fn holds(&self, addr: u64, data: &[u8]) -> bool {
            self.with_bytes(addr, data.len(), |b| *b == *data)
        }
    }

    impl RawAllocator for FakeDevice {
        fn raw_allocate(&self, size: u64) -> Result<DevicePtr> {
            let mut s = self.state.lock();
            if s.fail_next > 0 {
                s.fail_next -= 1;
                return Err(Error::new(Code::Unavailable, "fake device refused"));
            }
            if s.outstanding + size > s.capacity {
                return Err(Error::new(Code::Unavailable, "fake device is full"));
            }
            let addr = 0x1000_0000 * s.next_slot + s.misalign;
            // One empty slot at least between regions.
            s.next_slot += size / 0x1000_0000 + 2;
            s.regions.insert(addr, vec![0; size as usize]);
            s.outstanding += size;
            s.peak = s.peak.max(s.outstanding);
            s.allocations.push(size);
            Ok(DevicePtr(addr))
        }

        fn raw_deallocate(&self, ptr: DevicePtr, size: u64) {
            let mut s = self.state.lock();
            s.deallocations += 1;
            match s.regions.remove(&ptr.0) {
                Some(bytes) if bytes.len() as u64 == size => s.outstanding -= size,
                Some(bytes) => {
                    s.bad_frees += 1;
                    s.regions.insert(ptr.0, bytes);
                }
                None => s.bad_frees += 1,
            }
        }
    }

    /// xorshift64*: deterministic, no crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// 0 ..= 2 MiB, mostly small: half below 4 KiB, 40 % below 64 KiB, 10 % up to 2 MiB.
        fn size(&mut self) -> u64 {
            match self.below(10) {
                0..=4 => self.below(4 * KIB + 1),
                5..=8 => self.below(64 * KIB + 1),
                _ => self.below(2 * MIB + 1),
            }
        }
    }

    /// The bytes an allocation holds: its id at the start of every 256-byte granule (so an
    /// overlap of at least a granule shows), a byte derived from the id elsewhere.
    fn canary(id: u64, len: u64) -> Vec<u8> {
        let len = len as usize;
        let fill = (id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 | 1;
        let mut bytes = vec![fill; len];
        let tag = id.to_le_bytes();
        for start in (0..len).step_by(256) {
            let n = (len - start).min(8);
            bytes[start..start + n].copy_from_slice(&tag[..n]);
        }
        bytes
    }

    fn rounded(size: u64) -> u64 {
        round_up(size.max(1), 256).unwrap()
    }

    fn options(limit: Option<u64>) -> SuballocatorOptions {
        SuballocatorOptions {
            limit,
            ..SuballocatorOptions::default()
        }
    }

    fn new_sub(limit: Option<u64>) -> (Arc<FakeDevice>, Suballocator) {
        let dev = FakeDevice::new();
        let sub = Suballocator::new(dev.clone(), options(limit));
        (dev, sub)
    }

    /// A suballocator without the small-free cache: every choice is the best fit.
    fn new_uncached_sub() -> (Arc<FakeDevice>, Suballocator) {
        let dev = FakeDevice::new();
        let sub = Suballocator::new(
            dev.clone(),
            SuballocatorOptions {
                cache_small_frees: false,
                ..SuballocatorOptions::default()
            },
        );
        (dev, sub)
    }

    #[test]
    fn small_frees_are_cached_and_statistics_stay_exact() {
        let (dev, sub) = new_sub(None);
        let guard = sub.allocate(100).unwrap();
        let a = sub.allocate(1000).unwrap();
        sub.deallocate(a).unwrap();
        // The freed chunk is handed out again for the same rounded size, with no search.
        let b = sub.allocate(1024).unwrap();
        assert_eq!(a, b);
        sub.check();
        sub.deallocate(b).unwrap();
        sub.check();
        // Cached bytes are free bytes: nothing in use but the guard, and the free memory is
        // one merged block again once the statistics are taken.
        let st = sub.stats();
        assert_eq!(st.bytes_in_use, 256);
        assert_eq!(st.active_allocs, 1);
        assert_eq!(st.largest_free_block, MIB - 256);
        sub.check();
        // A cached chunk is not live: freeing it twice is still refused.
        let c = sub.allocate(512).unwrap();
        sub.deallocate(c).unwrap();
        assert!(sub.deallocate(c).is_err());
        assert_eq!(sub.size_of(c), None);
        // A full list frees for real.
        let many: Vec<_> = (0..CACHE_DEPTH + 8)
            .map(|_| sub.allocate(256).unwrap())
            .collect();
        for p in &many {
            sub.deallocate(*p).unwrap();
        }
        sub.check();
        sub.deallocate(guard).unwrap();
        assert_eq!(sub.release_cached(), MIB);
        assert_eq!(dev.raw_allocs(), 1);
        sub.check();
    }

    #[test]
    fn cached_small_frees_never_make_an_allocation_fail() {
        // A 1 MiB limit, filled with small chunks that are then freed into the cache: a request
        // for the whole region must still succeed (the cache is merged back first).
        let (_dev, sub) = new_sub(Some(MIB));
        let small: Vec<_> = (0..16)
            .map(|i| sub.allocate(256 * (i % 4 + 1)).unwrap())
            .collect();
        for p in small {
            sub.deallocate(p).unwrap();
        }
        let all = sub.allocate(MIB).unwrap();
        sub.check();
        sub.deallocate(all).unwrap();
        sub.check();
    }

    impl Suballocator {
        fn check(&self) {
            self.state.lock().check_invariants();
        }
    }

    /// What the statistics must say, kept independently.
    #[derive(Default)]
    struct Model {
        in_use: u64,
        peak: u64,
        allocs: u64,
        active: u64,
        largest: u64,
    }

    impl Model {
        fn alloc(&mut self, rounded: u64) {
            self.in_use += rounded;
            self.peak = self.peak.max(self.in_use);
            self.allocs += 1;
            self.active += 1;
            self.largest = self.largest.max(rounded);
        }

        fn free(&mut self, rounded: u64) {
            self.in_use -= rounded;
            self.active -= 1;
        }

        fn check(&self, sub: &Suballocator, dev: &FakeDevice) {
            let s = sub.stats();
            assert_eq!(s.bytes_in_use, self.in_use);
            assert_eq!(s.peak_bytes_in_use, self.peak);
            assert_eq!(s.num_allocs, self.allocs);
            assert_eq!(s.active_allocs, self.active);
            assert_eq!(s.largest_alloc_size, self.largest);
            assert_eq!(s.bytes_reserved, dev.outstanding());
            assert!(s.bytes_in_use + s.largest_free_block <= s.bytes_reserved);
        }
    }

    struct Live {
        ptr: DevicePtr,
        id: u64,
        size: u64,
    }

    fn run_random(seed: u64, steps: u64, limit: Option<u64>) {
        run_random_limits(seed, steps, limit, false)
    }

    /// As [`run_random`]; with `change_limit`, the limit changes every 100 steps (lowered
    /// below what is held, raised, removed).
    fn run_random_limits(seed: u64, steps: u64, mut limit: Option<u64>, change_limit: bool) {
        let (dev, sub) = new_sub(limit);
        let mut rng = Rng(seed);
        let mut model = Model::default();
        let mut live: Vec<Live> = Vec::new();
        for step in 0..steps {
            if change_limit && step % 100 == 99 {
                limit = [None, Some(2 * MIB), Some(8 * MIB), Some(24 * MIB)][rng.below(4) as usize];
                let before = sub.stats().bytes_reserved;
                let released = sub.set_limit(limit);
                let after = sub.stats().bytes_reserved;
                assert_eq!(before - after, released);
                assert_eq!(dev.outstanding(), after);
                sub.check();
            }
            // Mostly growing in the first half, mostly shrinking in the second.
            let alloc_percent = if step < steps / 2 { 65 } else { 35 };
            if live.is_empty() || rng.below(100) < alloc_percent {
                let size = rng.size();
                let ptr = match sub.allocate(size) {
                    Ok(ptr) => ptr,
                    Err(e) if limit.is_some() => {
                        assert_eq!(e.code, Code::ResourceExhausted, "{e}");
                        continue;
                    }
                    Err(e) => panic!("allocate({size}): {e}"),
                };
                assert_eq!(ptr.0 % 256, 0, "{ptr:?} misaligned");
                assert_eq!(sub.size_of(ptr), Some(rounded(size)));
                dev.write(ptr.0, &canary(step, size));
                model.alloc(rounded(size));
                live.push(Live {
                    ptr,
                    id: step,
                    size,
                });
            } else {
                let a = live.swap_remove(rng.below(live.len() as u64) as usize);
                assert!(
                    dev.holds(a.ptr.0, &canary(a.id, a.size)),
                    "canary of {} broken",
                    a.id
                );
                sub.deallocate(a.ptr).unwrap();
                assert_eq!(sub.size_of(a.ptr), None);
                model.free(rounded(a.size));
            }
            model.check(&sub, &dev);
            sub.check();
        }
        for a in live.drain(..) {
            assert!(
                dev.holds(a.ptr.0, &canary(a.id, a.size)),
                "canary of {} broken",
                a.id
            );
            sub.deallocate(a.ptr).unwrap();
            model.free(rounded(a.size));
        }
        model.check(&sub, &dev);
        let stats = sub.stats();
        assert_eq!(stats.bytes_in_use, 0);
        assert_eq!(stats.active_allocs, 0);
        let reserved = stats.bytes_reserved;
        assert!(reserved > 0);
        assert_eq!(sub.release_cached(), reserved);
        let stats = sub.stats();
        assert_eq!(stats.bytes_reserved, 0);
        assert_eq!(stats.largest_free_block, 0);
        assert_eq!(dev.outstanding(), 0, "leaked raw memory");
        sub.check();
        drop(sub);
        assert_eq!(dev.bad_frees(), 0);
    }

    #[test]
    fn random_sequences_keep_canaries_and_exact_stats() {
        for seed in [0x1234_5678_9abc_def1, 42, 0xdead_beef] {
            run_random(seed, 1500, None);
        }
    }

    #[test]
    fn random_sequences_under_a_changing_limit() {
        for seed in [3, 0xfeed_f00d] {
            run_random_limits(seed, 1500, Some(16 * MIB), true);
        }
    }

    #[test]
    fn random_sequences_under_a_limit() {
        run_random(7, 1500, Some(24 * MIB));
    }

    #[test]
    fn drop_returns_every_region() {
        let (dev, sub) = new_sub(None);
        let a = sub.allocate(100).unwrap();
        let _b = sub.allocate(3 * MIB).unwrap();
        let _c = sub.allocate(600 * KIB).unwrap();
        sub.deallocate(a).unwrap();
        assert!(dev.outstanding() > 0);
        drop(sub);
        assert_eq!(dev.outstanding(), 0);
        assert_eq!(dev.bad_frees(), 0);
    }

    #[test]
    fn addresses_and_sizes_are_aligned() {
        for (alignment, expect) in [(256, 256), (4096, 4096), (300, 512), (0, 1), (1, 1)] {
            let dev = FakeDevice::new();
            let sub = Suballocator::new(
                dev.clone(),
                SuballocatorOptions {
                    alignment,
                    ..SuballocatorOptions::default()
                },
            );
            let mut rng = Rng(alignment + 1);
            let mut ptrs = Vec::new();
            for _ in 0..200 {
                let size = rng.below(10_000);
                let p = sub.allocate(size).unwrap();
                assert_eq!(p.0 % expect, 0, "{p:?} not aligned to {expect}");
                let got = sub.size_of(p).unwrap();
                assert_eq!(got % expect, 0);
                assert!(got >= size.max(1) && got < size.max(1) + expect);
                ptrs.push(p);
            }
            sub.check();
            for p in ptrs {
                sub.deallocate(p).unwrap();
            }
            sub.check();
        }
    }

    #[test]
    fn zero_size_gives_distinct_minimum_chunks() {
        let (_dev, sub) = new_sub(None);
        let a = sub.allocate(0).unwrap();
        let b = sub.allocate(0).unwrap();
        assert_ne!(a, b);
        assert_eq!(sub.size_of(a), Some(256));
        assert_eq!(sub.size_of(b), Some(256));
        assert_eq!(sub.stats().bytes_in_use, 512);
        sub.deallocate(a).unwrap();
        sub.deallocate(b).unwrap();
        assert_eq!(sub.stats().bytes_in_use, 0);
        sub.check();
    }

    #[test]
    fn adjacent_free_chunks_coalesce_in_any_order() {
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        for order in orders {
            let (dev, sub) = new_sub(None);
            let chunks: Vec<DevicePtr> = (0..3).map(|_| sub.allocate(64 * KIB).unwrap()).collect();
            // A guard after C keeps the region's free tail apart from C.
            let guard = sub.allocate(256).unwrap();
            assert_eq!(chunks[1].0, chunks[0].0 + 64 * KIB);
            assert_eq!(chunks[2].0, chunks[1].0 + 64 * KIB);
            for i in order {
                sub.deallocate(chunks[i]).unwrap();
                sub.check();
            }
            let raw_before = dev.raw_allocs();
            let all = sub.allocate(3 * 64 * KIB).unwrap();
            assert_eq!(all, chunks[0], "order {order:?}: merged chunk not reused");
            assert_eq!(dev.raw_allocs(), raw_before, "a new region was reserved");
            sub.deallocate(all).unwrap();
            sub.deallocate(guard).unwrap();
            // Everything merged back into one free chunk: the region is wholly free.
            assert_eq!(sub.stats().largest_free_block, MIB);
            assert_eq!(sub.release_cached(), MIB);
            sub.check();
        }
    }

    #[test]
    fn chunks_never_coalesce_across_regions() {
        let (dev, sub) = new_sub(None);
        let a = sub.allocate(MIB).unwrap(); // region 1, exactly
        let b = sub.allocate(2 * MIB).unwrap(); // region 2, exactly
        assert_eq!(dev.allocations(), vec![MIB, 2 * MIB]);
        sub.deallocate(a).unwrap();
        sub.deallocate(b).unwrap();
        sub.check();
        assert_eq!(sub.stats().largest_free_block, 2 * MIB);
        // 3 MiB fits neither region: a third one is needed.
        let c = sub.allocate(3 * MIB).unwrap();
        assert_eq!(dev.raw_allocs(), 3);
        sub.deallocate(c).unwrap();
        sub.check();
    }

    #[test]
    fn best_fit_takes_the_smallest_fitting_chunk_then_the_lowest_address() {
        let (_dev, sub) = new_uncached_sub();
        let sizes = [4096, 1024, 2048, 1024];
        let mut holes = Vec::new();
        let mut guards = Vec::new();
        for size in sizes {
            holes.push(sub.allocate(size).unwrap());
            guards.push(sub.allocate(256).unwrap());
        }
        for w in holes.windows(2) {
            assert!(w[0] < w[1]);
        }
        for &h in &holes {
            sub.deallocate(h).unwrap();
        }
        sub.check();
        // Two 1 KiB holes: the lower one first, then the other.
        assert_eq!(sub.allocate(1000).unwrap(), holes[1]);
        assert_eq!(sub.allocate(1024).unwrap(), holes[3]);
        // 1.5 KiB: the 2 KiB hole (split), not the 4 KiB one nor the large tail.
        assert_eq!(sub.allocate(1500).unwrap(), holes[2]);
        // The 512-byte rest of the 2 KiB hole is now the best fit for 300 bytes.
        assert_eq!(sub.allocate(300).unwrap(), holes[2].offset(1536));
        assert_eq!(sub.allocate(3000).unwrap(), holes[0]);
        sub.check();
    }

    #[test]
    fn a_crowded_bin_becomes_a_tree_and_back_with_the_same_choices() {
        let (dev, sub) = new_uncached_sub();
        // 200 free 512-byte holes and 100 free 768-byte holes (all in bin 9), kept apart by
        // guards.
        let mut holes = Vec::new();
        let mut guards = Vec::new();
        for i in 0..300 {
            holes.push(sub.allocate(if i % 3 == 2 { 768 } else { 512 }).unwrap());
            guards.push(sub.allocate(256).unwrap());
        }
        for &h in &holes {
            sub.deallocate(h).unwrap();
        }
        let bin_is_tree = |sub: &Suballocator| {
            matches!(
                sub.state.lock().free.bins[FreeIndex::bin(512)],
                Bin::Tree(_)
            )
        };
        assert!(bin_is_tree(&sub));
        sub.check();
        // Best fit in address order: first every 512-byte hole, lowest first, then 768.
        let (h512, h768): (Vec<usize>, Vec<usize>) = (0..300).partition(|i| i % 3 != 2);
        let mut again = Vec::new();
        for (n, &i) in h512.iter().chain(&h768).enumerate() {
            let p = sub
                .allocate(if n < h512.len() { 400 } else { 700 })
                .unwrap();
            assert_eq!(p, holes[i], "allocation {n}");
            again.push(p);
            if n % 50 == 0 {
                sub.check();
            }
        }
        assert!(!bin_is_tree(&sub));
        assert_eq!(dev.raw_allocs(), 1);
        for p in again.into_iter().chain(guards) {
            sub.deallocate(p).unwrap();
        }
        sub.check();
        assert_eq!(sub.stats().largest_free_block, MIB);
    }

    #[test]
    fn regions_double_in_size() {
        let (dev, sub) = new_sub(None);
        let _a = sub.allocate(MIB).unwrap(); // 1 MiB region
        let _b = sub.allocate(MIB).unwrap(); // 2 MiB region
        let _c = sub.allocate(MIB).unwrap(); // rest of the 2 MiB region
        let _d = sub.allocate(256).unwrap(); // 4 MiB region
        let _e = sub.allocate(10 * MIB).unwrap(); // larger than the 8 MiB growth size
        assert_eq!(dev.allocations(), vec![MIB, 2 * MIB, 4 * MIB, 10 * MIB]);
        assert_eq!(sub.stats().bytes_reserved, 17 * MIB);
    }

    #[test]
    fn exceeding_the_limit_is_resource_exhausted_until_memory_is_freed() {
        let (dev, sub) = new_sub(Some(4 * MIB));
        let a = sub.allocate(3 * MIB).unwrap();
        let before = sub.stats();
        let err = sub.allocate(2 * MIB).unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted);
        assert!(
            err.message
                .contains("device memory limit exceeded: requested 2097152 bytes")
                && err.message.contains("3145728 in use")
                && err.message.contains("limit 4194304"),
            "{err}"
        );
        assert_eq!(
            sub.stats(),
            before,
            "a failed allocation changed the statistics"
        );
        let err = sub.allocate(u64::MAX).unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted);
        let err = sub.allocate(u64::MAX - 300).unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted);
        sub.deallocate(a).unwrap();
        let b = sub.allocate(2 * MIB).unwrap();
        assert_eq!(b, a, "the cached region is reused");
        assert_eq!(dev.raw_allocs(), 1);
        sub.check();
    }

    #[test]
    fn the_limit_releases_cached_regions_and_reuses_the_room() {
        let (dev, sub) = new_sub(Some(4 * MIB));
        let a = sub.allocate(MIB).unwrap();
        let b = sub.allocate(2 * MIB).unwrap();
        sub.deallocate(a).unwrap();
        sub.deallocate(b).unwrap();
        assert_eq!(sub.stats().bytes_reserved, 3 * MIB);
        // Fits no cached chunk, and only 1 MiB is left under the limit: both cached regions
        // go back, then one 4 MiB region (the growth size) is reserved.
        let c = sub.allocate(3 * MIB).unwrap();
        assert_eq!(dev.deallocations(), 2);
        assert_eq!(dev.allocations(), vec![MIB, 2 * MIB, 4 * MIB]);
        assert_eq!(sub.stats().bytes_reserved, 4 * MIB);
        assert_eq!(dev.outstanding(), 4 * MIB);
        sub.deallocate(c).unwrap();
        let d = sub.allocate(3 * MIB).unwrap();
        assert_eq!(dev.raw_allocs(), 3, "the cached region is reused");
        sub.deallocate(d).unwrap();
        sub.check();
    }

    /// The limit changes while memory is held: lowered, free regions go back as far as needed
    /// (no further), nothing in use is touched, requests are refused until enough is freed;
    /// raised or removed, growth goes on.
    #[test]
    fn the_limit_can_change_while_memory_is_held() {
        let (dev, sub) = new_sub(None);
        let a = sub.allocate(MIB).unwrap(); // 1 MiB region
        let b = sub.allocate(2 * MIB).unwrap(); // 2 MiB region
        let c = sub.allocate(MIB).unwrap(); // 4 MiB region, 3 MiB of it free
        sub.deallocate(a).unwrap();
        sub.deallocate(b).unwrap();
        assert_eq!(sub.stats().bytes_reserved, 7 * MIB);
        // 6 MiB: one free region is enough to meet it, and only one goes back.
        assert_eq!(sub.set_limit(Some(6 * MIB)), MIB);
        assert_eq!(dev.deallocations(), 1);
        assert_eq!(sub.limit(), Some(6 * MIB));
        assert_eq!(sub.stats().bytes_limit, Some(6 * MIB));
        // 2 MiB, below what is held: the other free region goes back, c's stays.
        assert_eq!(sub.set_limit(Some(2 * MIB)), 2 * MIB);
        let st = sub.stats();
        assert_eq!((st.bytes_reserved, st.bytes_in_use), (4 * MIB, MIB));
        assert_eq!(dev.outstanding(), 4 * MIB);
        sub.check();
        // Over the limit: a request that fits beside what is in use is served from the free
        // part of c's region; one that does not is refused, though the region has room.
        let e = sub.allocate(2 * MIB).unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted);
        assert!(e.message.contains("limit 2097152"), "{e}");
        let x = sub.allocate(MIB).unwrap();
        assert_eq!(dev.raw_allocs(), 3);
        let e = sub.allocate(256).unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted);
        sub.check();
        // Freed: the next allocation gives the wholly free region back and fits under the
        // limit.
        sub.deallocate(x).unwrap();
        sub.deallocate(c).unwrap();
        sub.check();
        let d = sub.allocate(MIB).unwrap();
        assert_eq!(sub.stats().bytes_reserved, MIB);
        assert_eq!(dev.outstanding(), MIB);
        sub.check();
        // Raised, then removed: growth goes on.
        assert_eq!(sub.set_limit(Some(3 * MIB)), 0);
        let e = sub.allocate(3 * MIB).unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted);
        let f = sub.allocate(2 * MIB).unwrap();
        sub.set_limit(None);
        assert_eq!(sub.stats().bytes_limit, None);
        let g = sub.allocate(16 * MIB).unwrap();
        sub.check();
        // Lowered again, then frees above the limit: trim gives the free regions back.
        sub.set_limit(Some(2 * MIB));
        for p in [d, f, g] {
            sub.deallocate(p).unwrap();
        }
        assert!(sub.stats().bytes_reserved > 2 * MIB);
        sub.trim_to_limit();
        assert!(sub.stats().bytes_reserved <= 2 * MIB);
        assert_eq!(dev.outstanding(), sub.stats().bytes_reserved);
        sub.check();
    }

    #[test]
    fn near_the_limit_a_region_is_just_what_is_needed() {
        let limit = 2 * MIB + MIB / 2;
        let (dev, sub) = new_sub(Some(limit));
        let _a = sub.allocate(MIB).unwrap(); // 1 MiB region; growth now 2 MiB
        let _b = sub.allocate(MIB).unwrap(); // 1.5 MiB left < 2 MiB: exactly 1 MiB
        let _c = sub.allocate(300).unwrap(); // 512 bytes
        assert_eq!(dev.allocations(), vec![MIB, MIB, 512]);
        let stats = sub.stats();
        assert_eq!(stats.bytes_reserved, 2 * MIB + 512);
        assert_eq!(stats.bytes_limit, Some(limit));
        let err = sub.allocate(MIB / 2).unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted);
        let _d = sub.allocate(MIB / 2 - 512).unwrap(); // exactly what is left
        assert_eq!(sub.stats().bytes_reserved, limit);
        sub.check();
    }

    #[test]
    fn raw_failure_is_an_error_and_the_next_allocation_succeeds() {
        let (dev, sub) = new_sub(None);
        dev.state.lock().fail_next = 2; // the attempt and the retry
        let err = sub.allocate(1000).unwrap_err();
        assert_eq!(
            err.code,
            Code::Unavailable,
            "the raw allocator's code is kept"
        );
        assert!(
            err.message.contains("fake device refused")
                && err.message.contains("reserving a 1024-byte region"),
            "{err}"
        );
        assert_eq!(sub.stats(), MemoryStats::default());
        let p = sub.allocate(1000).unwrap();
        assert_eq!(sub.size_of(p), Some(1024));
        sub.check();
    }

    #[test]
    fn raw_failure_releases_cached_regions_and_retries_once() {
        let (dev, sub) = new_sub(None);
        let a = sub.allocate(256).unwrap();
        sub.deallocate(a).unwrap(); // a cached 1 MiB region
        dev.state.lock().capacity = 3 * MIB;
        // 2 MiB + 256 does not fit next to the cached region on the device.
        let b = sub.allocate(2 * MIB + 256).unwrap();
        assert_eq!(dev.deallocations(), 1);
        assert_eq!(dev.outstanding(), 2 * MIB + 256);
        assert_eq!(sub.stats().bytes_reserved, 2 * MIB + 256);
        sub.deallocate(b).unwrap();
        // A first failure alone is absorbed by the retry, which asks only for the request.
        dev.state.lock().fail_next = 1;
        let c = sub.allocate(3 * MIB).unwrap();
        assert_eq!(dev.allocations().last(), Some(&(3 * MIB)));
        sub.deallocate(c).unwrap();
        sub.check();
    }

    #[test]
    fn double_free_and_unknown_pointers_are_invalid_arguments() {
        let (_dev, sub) = new_sub(None);
        let p = sub.allocate(1024).unwrap();
        let q = sub.allocate(1024).unwrap();
        let before = sub.stats();
        for bad in [DevicePtr(0xdead_bee0), p.offset(256), DevicePtr(0)] {
            let err = sub.deallocate(bad).unwrap_err();
            assert_eq!(err.code, Code::InvalidArgument);
            assert!(err.message.contains(&format!("{:#x}", bad.0)), "{err}");
        }
        assert_eq!(sub.stats(), before);
        sub.deallocate(p).unwrap();
        let err = sub.deallocate(p).unwrap_err();
        assert_eq!(err.code, Code::InvalidArgument);
        assert!(err.message.contains(&format!("{:#x}", p.0)), "{err}");
        assert_eq!(sub.size_of(q), Some(1024));
        sub.deallocate(q).unwrap();
        assert_eq!(sub.stats().active_allocs, 0);
        sub.check();
    }

    #[test]
    fn largest_free_block_and_bytes_reserved_follow_the_regions() {
        let (dev, sub) = new_sub(Some(64 * MIB));
        assert_eq!(
            sub.stats(),
            MemoryStats {
                bytes_limit: Some(64 * MIB),
                ..MemoryStats::default()
            }
        );
        let a = sub.allocate(1000).unwrap();
        let s = sub.stats();
        assert_eq!((s.bytes_reserved, s.largest_free_block), (MIB, MIB - 1024));
        let b = sub.allocate(2 * MIB).unwrap(); // a second region, used whole
        let s = sub.stats();
        assert_eq!(
            (s.bytes_reserved, s.largest_free_block),
            (3 * MIB, MIB - 1024)
        );
        sub.deallocate(b).unwrap();
        let s = sub.stats();
        assert_eq!((s.bytes_reserved, s.largest_free_block), (3 * MIB, 2 * MIB));
        assert_eq!(sub.release_cached(), 2 * MIB);
        let s = sub.stats();
        assert_eq!((s.bytes_reserved, s.largest_free_block), (MIB, MIB - 1024));
        sub.deallocate(a).unwrap();
        assert_eq!(sub.stats().largest_free_block, MIB);
        assert_eq!(sub.release_cached(), MIB);
        assert_eq!(sub.release_cached(), 0);
        let s = sub.stats();
        assert_eq!((s.bytes_reserved, s.largest_free_block), (0, 0));
        assert_eq!(dev.outstanding(), 0);
        sub.check();
    }

    #[test]
    fn release_cached_keeps_regions_in_use() {
        let (dev, sub) = new_sub(None);
        let a = sub.allocate(MIB).unwrap(); // region 1
        let b = sub.allocate(256).unwrap(); // region 2 (2 MiB)
        sub.deallocate(a).unwrap();
        assert_eq!(sub.release_cached(), MIB);
        assert_eq!(dev.outstanding(), 2 * MIB);
        assert_eq!(sub.size_of(b), Some(256));
        sub.deallocate(b).unwrap();
        sub.check();
    }

    #[test]
    fn size_of_and_reset_peak() {
        let (_dev, sub) = new_sub(None);
        let a = sub.allocate(5000).unwrap();
        let b = sub.allocate(100).unwrap();
        assert_eq!(sub.size_of(a), Some(5120));
        assert_eq!(sub.size_of(DevicePtr(a.0 + 256)), None);
        sub.deallocate(a).unwrap();
        assert_eq!(sub.size_of(a), None);
        let s = sub.stats();
        assert_eq!((s.bytes_in_use, s.peak_bytes_in_use), (256, 5376));
        assert_eq!(
            (s.largest_alloc_size, s.num_allocs, s.active_allocs),
            (5120, 2, 1)
        );
        sub.reset_peak();
        assert_eq!(sub.stats().peak_bytes_in_use, 256);
        sub.deallocate(b).unwrap();
        assert_eq!(sub.stats().peak_bytes_in_use, 256);
    }

    #[test]
    fn misaligned_raw_addresses_are_aligned_inside_a_padded_region() {
        let dev = FakeDevice::new();
        dev.state.lock().misalign = 16;
        let sub = Suballocator::new(dev.clone(), SuballocatorOptions::default());
        let ptrs: Vec<DevicePtr> = (0..20)
            .map(|i| sub.allocate(i * 100 * KIB).unwrap())
            .collect();
        for (i, &p) in ptrs.iter().enumerate() {
            assert_eq!(p.0 % 256, 0);
            dev.write(p.0, &canary(i as u64, i as u64 * 100 * KIB));
        }
        for (i, &p) in ptrs.iter().enumerate() {
            assert!(dev.holds(p.0, &canary(i as u64, i as u64 * 100 * KIB)));
        }
        assert_eq!(sub.stats().bytes_reserved, dev.outstanding());
        sub.check();
        drop(sub);
        assert_eq!(dev.outstanding(), 0);
        assert_eq!(dev.bad_frees(), 0);
    }

    #[test]
    fn huge_requests_are_errors_without_a_limit() {
        let (_dev, sub) = new_sub(None);
        assert!(sub.allocate(u64::MAX).is_err());
        assert!(sub.allocate(1 << 62).is_err());
        assert_eq!(sub.stats().num_allocs, 0);
        assert!(sub.allocate(1).is_ok());
        sub.check();
    }

    #[test]
    fn threads_share_one_suballocator() {
        let dev = FakeDevice::new();
        let sub = Arc::new(Suballocator::new(
            dev.clone(),
            SuballocatorOptions::default(),
        ));
        const THREADS: u64 = 4;
        const OPS: u64 = 2000;
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (dev, sub) = (dev.clone(), sub.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(0x9e37_79b9 + t);
                    let mut live: Vec<Live> = Vec::new();
                    let mut allocs = 0;
                    for op in 0..OPS {
                        if live.is_empty() || rng.below(2) == 0 {
                            let size = rng.size() / 4;
                            let ptr = sub.allocate(size).unwrap();
                            let id = t << 32 | op;
                            dev.write(ptr.0, &canary(id, size));
                            live.push(Live { ptr, id, size });
                            allocs += 1;
                        } else {
                            let a = live.swap_remove(rng.below(live.len() as u64) as usize);
                            assert!(dev.holds(a.ptr.0, &canary(a.id, a.size)));
                            sub.deallocate(a.ptr).unwrap();
                        }
                    }
                    for a in live {
                        assert!(dev.holds(a.ptr.0, &canary(a.id, a.size)));
                        sub.deallocate(a.ptr).unwrap();
                    }
                    allocs
                })
            })
            .collect();
        let allocs: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        let s = sub.stats();
        assert_eq!(
            (s.bytes_in_use, s.active_allocs, s.num_allocs),
            (0, 0, allocs)
        );
        sub.check();
        assert_eq!(sub.release_cached(), s.bytes_reserved);
        assert_eq!(dev.outstanding(), 0);
    }

    /// A raw allocator that checks, on every call, that the suballocator's lock is free: another
    /// thread takes it (reads the statistics) while the call waits.
    struct LockProbe {
        dev: Arc<FakeDevice>,
        sub: std::sync::OnceLock<std::sync::Weak<Suballocator>>,
        calls: Mutex<(u32, u32)>,
    }

    impl LockProbe {
        fn probe(&self) {
            let Some(sub) = self.sub.get().and_then(std::sync::Weak::upgrade) else {
                return; // the suballocator is being dropped
            };
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(sub.stats());
            });
            let free = rx.recv_timeout(std::time::Duration::from_secs(20)).is_ok();
            let mut calls = self.calls.lock();
            calls.0 += 1;
            calls.1 += u32::from(!free);
        }
    }

    impl RawAllocator for LockProbe {
        fn raw_allocate(&self, size: u64) -> Result<DevicePtr> {
            self.probe();
            self.dev.raw_allocate(size)
        }
        fn raw_deallocate(&self, ptr: DevicePtr, size: u64) {
            self.probe();
            self.dev.raw_deallocate(ptr, size)
        }
    }

    /// A platform's allocation may wait for work that needs the suballocator (CUDA's
    /// `cuMemFree` waits for every stream, and a stream's host callback may drop a buffer), so
    /// no raw call may happen with the lock held: not when growing, not on the retry after a
    /// refusal, not when the limit gives cached regions back, not for a misaligned address,
    /// not in `release_cached`.
    #[test]
    fn the_raw_allocator_is_called_without_the_lock() {
        let dev = FakeDevice::new();
        let probe = Arc::new(LockProbe {
            dev: dev.clone(),
            sub: std::sync::OnceLock::new(),
            calls: Mutex::new((0, 0)),
        });
        let sub = Arc::new(Suballocator::new(
            probe.clone(),
            SuballocatorOptions {
                limit: Some(4 * MIB),
                ..Default::default()
            },
        ));
        probe.sub.set(Arc::downgrade(&sub)).unwrap();
        let a = sub.allocate(MIB).unwrap(); // grows
        let b = sub.allocate(MIB).unwrap(); // grows again
        sub.deallocate(b).unwrap();
        dev.state.lock().fail_next = 1;
        // Refused, then the free region is given back and the request retried exactly.
        let c = sub.allocate(2 * MIB).unwrap();
        sub.deallocate(c).unwrap();
        // The limit: only giving back the free regions makes room.
        let d = sub.allocate(3 * MIB).unwrap();
        sub.deallocate(d).unwrap();
        sub.deallocate(a).unwrap();
        dev.state.lock().misalign = 16;
        assert!(sub.release_cached() > 0);
        let e = sub.allocate(1000).unwrap();
        assert_eq!(e.0 % 256, 0);
        sub.deallocate(e).unwrap();
        sub.check();
        let (calls, locked) = *probe.calls.lock();
        assert!(calls >= 8, "only {calls} raw calls");
        assert_eq!(locked, 0, "{locked} of {calls} raw calls held the lock");
    }

    /// The bytes of a region being reserved without the lock count against the limit, so
    /// threads growing at once never hold more than it.
    #[test]
    fn threads_growing_at_once_stay_under_the_limit() {
        let dev = FakeDevice::new();
        const LIMIT: u64 = 6 * MIB;
        let sub = Arc::new(Suballocator::new(
            dev.clone(),
            SuballocatorOptions {
                limit: Some(LIMIT),
                min_region_size: 256 * KIB,
                ..Default::default()
            },
        ));
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let sub = sub.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(0x51ed_2701 + t);
                    let mut live = Vec::new();
                    let mut refused = 0;
                    for _ in 0..1500 {
                        if live.len() < 4 && rng.below(3) != 0 {
                            match sub.allocate(rng.below(MIB) + 1) {
                                Ok(p) => live.push(p),
                                Err(e) => {
                                    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
                                    refused += 1;
                                }
                            }
                        } else if let Some(p) = live.pop() {
                            sub.deallocate(p).unwrap();
                        }
                        if rng.below(50) == 0 {
                            sub.release_cached();
                        }
                    }
                    for p in live {
                        sub.deallocate(p).unwrap();
                    }
                    refused
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        sub.check();
        let peak = dev.state.lock().peak;
        assert!(peak <= LIMIT, "held {peak} bytes at once, limit {LIMIT}");
        assert!(peak > 0);
        sub.release_cached();
        assert_eq!(dev.outstanding(), 0);
        assert_eq!(dev.bad_frees(), 0);
    }

    /// A raw allocator whose frees wait at a gate.
    struct GatedFrees {
        dev: Arc<FakeDevice>,
        gate: Mutex<bool>,
        opened: Condvar,
        waiting: std::sync::atomic::AtomicU32,
    }

    impl RawAllocator for GatedFrees {
        fn raw_allocate(&self, size: u64) -> Result<DevicePtr> {
            self.dev.raw_allocate(size)
        }
        fn raw_deallocate(&self, ptr: DevicePtr, size: u64) {
            self.waiting
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut open = self.gate.lock();
            while !*open {
                self.opened.wait(&mut open);
            }
            drop(open);
            self.dev.raw_deallocate(ptr, size)
        }
    }

    /// At the limit, an allocation waits for regions another thread is giving back instead of
    /// failing while their bytes are in flight.
    #[test]
    fn an_allocation_at_the_limit_waits_for_regions_being_given_back() {
        let dev = FakeDevice::new();
        let gated = Arc::new(GatedFrees {
            dev: dev.clone(),
            gate: Mutex::new(false),
            opened: Condvar::new(),
            waiting: Default::default(),
        });
        let sub = Arc::new(Suballocator::new(
            gated.clone(),
            SuballocatorOptions {
                limit: Some(2 * MIB),
                ..Default::default()
            },
        ));
        let a = sub.allocate(2 * MIB).unwrap();
        sub.deallocate(a).unwrap();
        let releaser = {
            let sub = sub.clone();
            std::thread::spawn(move || sub.release_cached())
        };
        while gated.waiting.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        // The region is on its way back: this needs its room.
        let allocator = {
            let sub = sub.clone();
            std::thread::spawn(move || sub.allocate(2 * MIB))
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !allocator.is_finished(),
            "did not wait for the region in flight"
        );
        *gated.gate.lock() = true;
        gated.opened.notify_all();
        assert_eq!(releaser.join().unwrap(), 2 * MIB);
        let b = allocator
            .join()
            .unwrap()
            .expect("room once the region is back");
        assert!(dev.state.lock().peak <= 2 * MIB);
        sub.deallocate(b).unwrap();
        sub.check();
    }

    #[test]
    fn suballocator_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Suballocator>();
        assert_send_sync::<Arc<dyn RawAllocator>>();
    }
}
