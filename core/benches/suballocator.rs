//! Allocate+free on the suballocator against malloc+free, in the same process.
//!
//! For each size, a warm suballocator (its region already reserved) and the system allocator
//! (`std::alloc::alloc`/`dealloc` with 256-byte alignment, which is malloc underneath) each run
//! allocate+free pairs; the table shows the median ns per pair over a few repetitions and the
//! ratio. The goal is a ratio of at most 2.0. A last row ("mixed") churns a pool of live
//! allocations of random sizes, 256 B to 1 MiB, so that best fit works among many free chunks.
//!
//! Run with `cargo bench -p devplug-core --bench suballocator`.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use devplug_core::error::Result;
use devplug_core::memory::{DevicePtr, RawAllocator, Suballocator, SuballocatorOptions};

/// A device whose memory is only addresses: raw allocation is a bump of a counter.
struct AddressSpace {
    next: AtomicU64,
}

impl RawAllocator for AddressSpace {
    fn raw_allocate(&self, size: u64) -> Result<DevicePtr> {
        let span = size.div_ceil(1 << 30).max(1) << 30;
        Ok(DevicePtr(self.next.fetch_add(span, Ordering::Relaxed)))
    }

    fn raw_deallocate(&self, _ptr: DevicePtr, _size: u64) {}
}

const REPS: usize = 7;
/// The time each repetition aims at.
const REP_TIME: Duration = Duration::from_millis(25);
const GOAL: f64 = 2.0;

/// Median ns per call of `op`, which does `iters` calls per invocation of the closure.
fn measure(mut op: impl FnMut(u64) -> Result<()>) -> Result<f64> {
    // Calibrate the number of iterations so that one repetition takes about REP_TIME.
    let mut iters = 1_000u64;
    loop {
        let start = Instant::now();
        op(iters)?;
        let elapsed = start.elapsed();
        if elapsed >= REP_TIME / 4 || iters >= 1 << 26 {
            let per_iter = elapsed.as_secs_f64() / iters as f64;
            iters = ((REP_TIME.as_secs_f64() / per_iter.max(1e-12)) as u64).max(1_000);
            break;
        }
        iters *= 4;
    }
    let mut samples = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let start = Instant::now();
        op(iters)?;
        samples.push(start.elapsed().as_nanos() as f64 / iters as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[REPS / 2])
}

fn suballocator() -> Suballocator {
    let raw = Arc::new(AddressSpace {
        next: AtomicU64::new(1 << 32),
    });
    Suballocator::new(raw, SuballocatorOptions::default())
}

fn malloc_free(layout: Layout) {
    // SAFETY: `layout` has a non-zero size (at least 256 bytes here).
    let p = unsafe { alloc(layout) };
    if p.is_null() {
        handle_alloc_error(layout);
    }
    let p = black_box(p);
    // SAFETY: `p` came from `alloc` with this same layout and is freed once.
    unsafe { dealloc(p, layout) };
}

/// Allocate+free of one size on both allocators: (suballocator ns, malloc ns).
fn bench_size(size: u64) -> Result<(f64, f64)> {
    let sub = suballocator();
    // Warm: the first allocation reserves the region, which stays cached after the free.
    sub.deallocate(sub.allocate(size)?)?;
    let sub_ns = measure(|iters| {
        for _ in 0..iters {
            let p = sub.allocate(black_box(size))?;
            sub.deallocate(black_box(p))?;
        }
        Ok(())
    })?;
    let layout = Layout::from_size_align(size as usize, 256)
        .map_err(|e| devplug_core::error::Error::invalid_argument(e.to_string()))?;
    let malloc_ns = measure(|iters| {
        for _ in 0..iters {
            malloc_free(layout);
        }
        Ok(())
    })?;
    Ok((sub_ns, malloc_ns))
}

/// xorshift64*, for the mixed workload.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Sizes log-uniform between 256 B and 1 MiB, as a fixed table so both sides see the same.
fn mixed_sizes() -> Vec<u64> {
    let mut rng = 0x0123_4567_89ab_cdefu64;
    (0..4096)
        .map(|_| {
            let shift = 8 + next(&mut rng) % 12; // 2^8 ..= 2^19
            (1 << shift) + next(&mut rng) % (1 << shift)
        })
        .collect()
}

/// A pool of 64 live allocations; each step frees a random one and allocates a new size.
fn bench_mixed() -> Result<(f64, f64)> {
    const POOL: usize = 64;
    let sizes = mixed_sizes();
    let sub = suballocator();
    let mut live: Vec<DevicePtr> = Vec::with_capacity(POOL);
    for &size in sizes.iter().take(POOL) {
        live.push(sub.allocate(size)?);
    }
    let mut k = 0usize;
    let sub_ns = measure(|iters| {
        for _ in 0..iters {
            k = k.wrapping_add(1);
            let slot = k.wrapping_mul(37) % POOL;
            sub.deallocate(live[slot])?;
            live[slot] = sub.allocate(sizes[k % sizes.len()])?;
        }
        Ok(())
    })?;
    for p in live.drain(..) {
        sub.deallocate(p)?;
    }

    let layout_of = |size: u64| {
        Layout::from_size_align(size as usize, 256)
            .map_err(|e| devplug_core::error::Error::invalid_argument(e.to_string()))
    };
    let mut pool: Vec<(*mut u8, Layout)> = Vec::with_capacity(POOL);
    for &size in sizes.iter().take(POOL) {
        let layout = layout_of(size)?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc(layout) };
        if p.is_null() {
            handle_alloc_error(layout);
        }
        pool.push((p, layout));
    }
    let mut k = 0usize;
    let malloc_ns = measure(|iters| {
        for _ in 0..iters {
            k = k.wrapping_add(1);
            let slot = k.wrapping_mul(37) % POOL;
            let (p, layout) = pool[slot];
            // SAFETY: `p` came from `alloc` with `layout` and is freed once (then replaced).
            unsafe { dealloc(p, layout) };
            let layout = layout_of(sizes[k % sizes.len()])?;
            // SAFETY: the layout has a non-zero size.
            let p = unsafe { alloc(layout) };
            if p.is_null() {
                handle_alloc_error(layout);
            }
            pool[slot] = (black_box(p), layout);
        }
        Ok(())
    })?;
    for (p, layout) in pool {
        // SAFETY: each pointer came from `alloc` with its layout and is freed once.
        unsafe { dealloc(p, layout) };
    }
    Ok((sub_ns, malloc_ns))
}

fn row(name: &str, (sub_ns, malloc_ns): (f64, f64)) {
    let ratio = sub_ns / malloc_ns;
    let verdict = if ratio <= GOAL { "ok" } else { "MISSED" };
    println!(
        "{name:>8} {sub_ns:>16.1} {malloc_ns:>14.1} {ratio:>8.2}×   goal ≤ {GOAL:.1}× {verdict}"
    );
}

fn main() -> Result<()> {
    println!("suballocator allocate+free vs malloc+free (std::alloc, align 256); median of {REPS}");
    println!(
        "{:>8} {:>16} {:>14} {:>9}",
        "size", "suballoc ns/op", "malloc ns/op", "ratio"
    );
    for (size, name) in [
        (256, "256 B"),
        (4 << 10, "4 KiB"),
        (64 << 10, "64 KiB"),
        (1 << 20, "1 MiB"),
    ] {
        row(name, bench_size(size)?);
    }
    row("mixed", bench_mixed()?);
    Ok(())
}
