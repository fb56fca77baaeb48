//! Vector instruction sets chosen at run time for the compute-bound loops.
//!
//! The core is built for the x86-64 baseline, whose widest vectors are SSE2's four f32 lanes.
//! A loop that does real arithmetic per element (`exp`, `tanh`, the softmax row, …) runs
//! several times faster with AVX2 (eight lanes) or AVX-512 (sixteen), so [`dispatch`] runs its
//! closure compiled a second and a third time, for x86-64-v3 (AVX2, FMA) and x86-64-v4
//! (AVX-512 F/BW/CD/DQ/VL), and picks the widest the CPU has, found once per process. The gemm
//! crate picks its micro-kernels the same way. Loops that only move memory gain little and are
//! left alone, which keeps the code (and the build) from tripling; the one exception is the
//! transpose block ([`transpose_block`], of 4- and 8-byte elements), written with AVX2 (and,
//! for 8-byte elements, AVX-512) intrinsics because the compiler does not vectorize the
//! portable one (256 scalar moves a block).
//!
//! Results are the same bit for bit at every level: Rust never contracts `a * b + c` into a
//! fused multiply-add, so the wider code does the same IEEE operations on more lanes (the
//! tests compare the levels bit for bit). `DEVPLUG_CPU_ISA=base|v3|v4` caps the level, for
//! comparing them or ruling them out; a level the CPU lacks is never used.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level, ordered from the narrowest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Isa {
    /// The build's baseline (SSE2 on x86-64; any other architecture).
    Base,
    /// x86-64-v3: AVX, AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE.
    V3,
    /// x86-64-v4: v3 plus AVX-512 F, BW, CD, DQ, VL.
    V4,
}

/// The level the CPU supports capped by `DEVPLUG_CPU_ISA`, and the level it supports: found
/// once each.
static LEVEL: AtomicU8 = AtomicU8::new(UNKNOWN);
static SUPPORTED: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = u8::MAX;

/// The level in `cell`, found with `find` the first time.
#[inline]
fn cached(cell: &AtomicU8, find: impl FnOnce() -> Isa) -> Isa {
    match cell.load(Ordering::Relaxed) {
        0 => Isa::Base,
        1 => Isa::V3,
        2 => Isa::V4,
        _ => {
            let level = find();
            cell.store(level as u8, Ordering::Relaxed);
            level
        }
    }
}

/// The widest level this CPU supports, capped by `DEVPLUG_CPU_ISA` (found once).
#[inline]
pub(crate) fn level() -> Isa {
    cached(&LEVEL, || {
        let cap = match std::env::var("DEVPLUG_CPU_ISA").as_deref() {
            Ok("base") => Isa::Base,
            Ok("v3") => Isa::V3,
            _ => Isa::V4,
        };
        supported().min(cap)
    })
}

/// The widest level the CPU supports (detected anew: see `SUPPORTED` for the cached one).
pub(crate) fn supported() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let v3 = has!("avx")
            && has!("avx2")
            && has!("fma")
            && has!("bmi1")
            && has!("bmi2")
            && has!("f16c")
            && has!("lzcnt")
            && has!("movbe");
        let v4 = v3
            && has!("avx512f")
            && has!("avx512bw")
            && has!("avx512cd")
            && has!("avx512dq")
            && has!("avx512vl");
        if v4 {
            return Isa::V4;
        }
        if v3 {
            return Isa::V3;
        }
    }
    Isa::Base
}

/// Runs `f` compiled for [`level`]. `f` should be `#[inline(always)]` and call only
/// `#[inline(always)]` code in its loop, so that all of it is compiled at the chosen level.
#[inline(always)]
pub(crate) fn dispatch<R>(f: impl FnOnce() -> R) -> R {
    dispatch_at(level(), f)
}

/// [`dispatch`] at `isa` or the widest level the CPU supports, whichever is narrower.
#[inline(always)]
pub(crate) fn dispatch_at<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        let isa = isa.min(cached(&SUPPORTED, supported));
        if isa == Isa::V4 {
            // SAFETY: the CPU supports every feature v4 enables (checked by `supported`).
            return unsafe { x86::v4(f) };
        }
        if isa == Isa::V3 {
            // SAFETY: as above, for v3.
            return unsafe { x86::v3(f) };
        }
    }
    let _ = isa;
    f()
}

/// Side of the blocks [`transpose_block`] transposes.
pub(crate) const BLOCK: usize = 16;

/// One [`BLOCK`] x [`BLOCK`] block of a transpose of `size`-byte elements, `dst[d0 + i * ds +
/// j] = src[s0 + i + j * ss]` for `i, j < 16` (offsets and strides in elements of bytes `src`
/// and `dst`), in vector registers: four 8 x 8 transposes of 4-byte elements in AVX2 registers;
/// for 8-byte elements four 8 x 8 transposes in AVX-512 registers (one 64-byte load or store a
/// row) or, with AVX2 only, sixteen 4 x 4. Sub-blocks sharing source rows come one after the
/// other, so that each row of the block is read or written whole while it is in cache. About
/// twice the portable block's speed, or more. False, having done nothing, for other sizes and
/// where [`level`] is below AVX2.
///
/// # Panics
/// When a block of 4- or 8-byte elements does not lie inside `src` or `dst`.
#[inline]
pub(crate) fn transpose_block(
    size: usize,
    src: &[u8],
    s0: usize,
    ss: usize,
    dst: &mut [u8],
    d0: usize,
    ds: usize,
) -> bool {
    transpose_block_at(level(), size, src, s0, ss, dst, d0, ds)
}

/// [`transpose_block`] at `isa` (at most the CPU's level: see [`level`]).
#[allow(clippy::too_many_arguments)]
#[inline]
fn transpose_block_at(
    isa: Isa,
    size: usize,
    src: &[u8],
    s0: usize,
    ss: usize,
    dst: &mut [u8],
    d0: usize,
    ds: usize,
) -> bool {
    if size != 4 && size != 8 {
        return false;
    }
    let last = |o: usize, stride: usize| (o + (BLOCK - 1) * stride + BLOCK) * size;
    assert!(
        last(s0, ss) <= src.len() && last(d0, ds) <= dst.len(),
        "a transpose block outside its tensors"
    );
    debug_assert!(isa <= supported());
    #[cfg(target_arch = "x86_64")]
    if isa >= Isa::V3 {
        // Rows of a sub-block a register holds: 512 bits for 8-byte elements at AVX-512, 256
        // bits otherwise (a 16 x 16 AVX-512 transpose of 4-byte elements, tried, was 10 %
        // faster at 1024² and 10 % slower at 1040² than four AVX2 8 x 8s).
        let wide = isa == Isa::V4 && size == 8;
        let sub = if wide { 64 } else { 32 } / size;
        for dj in (0..BLOCK).step_by(sub) {
            for di in (0..BLOCK).step_by(sub) {
                let (from, to) = ((s0 + di + dj * ss) * size, (d0 + di * ds + dj) * size);
                // SAFETY: the level's features are there (`isa` is at most the CPU's); the
                // `sub` rows read, from s0 + di + (dj + k) * ss, and the `sub` written, from
                // d0 + (di + k) * ds + dj, `sub` elements each, lie inside the block asserted
                // above.
                unsafe {
                    let (sp, dp) = (src.as_ptr().add(from), dst.as_mut_ptr().add(to));
                    match (wide, size) {
                        (true, _) => x86::transpose_8x8_8byte(sp, ss, dp, ds),
                        (false, 4) => x86::transpose_8x8_4byte(sp, ss, dp, ds),
                        _ => x86::transpose_4x4_8byte(sp, ss, dp, ds),
                    }
                }
            }
        }
        return true;
    }
    let _ = isa;
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    /// `dst[k * ds + c] = src[c * ss + k]` for 4 x 4 elements of 8 bytes (strides in elements).
    ///
    /// # Safety
    /// AVX2 is available; the 4 rows of 4 elements at `src` (stride `ss`) are readable and
    /// those at `dst` (stride `ds`) writable.
    #[target_feature(enable = "avx,avx2")]
    pub(super) unsafe fn transpose_4x4_8byte(src: *const u8, ss: usize, dst: *mut u8, ds: usize) {
        use std::arch::x86_64::*;
        let (s, d) = (src.cast::<f64>(), dst.cast::<f64>());
        // SAFETY (all loads and stores): inside the rows the caller vouches for.
        let r = |k: usize| unsafe { _mm256_loadu_pd(s.add(k * ss)) };
        let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
        // Rows interleaved in pairs (each 128-bit lane then holds two elements of a column),
        // then the lanes put together.
        let (t0, t1) = (_mm256_unpacklo_pd(r0, r1), _mm256_unpackhi_pd(r0, r1));
        let (t2, t3) = (_mm256_unpacklo_pd(r2, r3), _mm256_unpackhi_pd(r2, r3));
        let w = |k: usize, v: __m256d| unsafe { _mm256_storeu_pd(d.add(k * ds), v) };
        w(0, _mm256_permute2f128_pd::<0x20>(t0, t2));
        w(1, _mm256_permute2f128_pd::<0x20>(t1, t3));
        w(2, _mm256_permute2f128_pd::<0x31>(t0, t2));
        w(3, _mm256_permute2f128_pd::<0x31>(t1, t3));
    }

    /// `dst[k * ds + c] = src[c * ss + k]` for 8 x 8 elements of 4 bytes (strides in elements).
    ///
    /// # Safety
    /// AVX2 is available; the 8 rows of 8 elements at `src` (stride `ss`) are readable and
    /// those at `dst` (stride `ds`) writable.
    #[target_feature(enable = "avx,avx2")]
    pub(super) unsafe fn transpose_8x8_4byte(src: *const u8, ss: usize, dst: *mut u8, ds: usize) {
        use std::arch::x86_64::*;
        let (s, d) = (src.cast::<f32>(), dst.cast::<f32>());
        // SAFETY (all loads and stores): inside the rows the caller vouches for.
        let r = |k: usize| unsafe { _mm256_loadu_ps(s.add(k * ss)) };
        let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
        let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
        // Pairs of rows interleaved, then pairs of pairs: each 128-bit lane holds four
        // elements of one column; the lanes are then put together.
        let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
        let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
        let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
        let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        let w = |k: usize, v: __m256| unsafe { _mm256_storeu_ps(d.add(k * ds), v) };
        w(0, _mm256_permute2f128_ps::<0x20>(u0, u4));
        w(1, _mm256_permute2f128_ps::<0x20>(u1, u5));
        w(2, _mm256_permute2f128_ps::<0x20>(u2, u6));
        w(3, _mm256_permute2f128_ps::<0x20>(u3, u7));
        w(4, _mm256_permute2f128_ps::<0x31>(u0, u4));
        w(5, _mm256_permute2f128_ps::<0x31>(u1, u5));
        w(6, _mm256_permute2f128_ps::<0x31>(u2, u6));
        w(7, _mm256_permute2f128_ps::<0x31>(u3, u7));
    }

    /// `dst[k * ds + c] = src[c * ss + k]` for 8 x 8 elements of 8 bytes (strides in
    /// elements), in AVX-512 registers.
    ///
    /// # Safety
    /// AVX-512 F is available; the 8 rows of 8 elements at `src` (stride `ss`) are readable and
    /// those at `dst` (stride `ds`) writable.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn transpose_8x8_8byte(src: *const u8, ss: usize, dst: *mut u8, ds: usize) {
        use std::arch::x86_64::*;
        let (s, d) = (src.cast::<f64>(), dst.cast::<f64>());
        // SAFETY (all loads and stores): inside the rows the caller vouches for.
        let r = |k: usize| unsafe { _mm512_loadu_pd(s.add(k * ss)) };
        let (r0, r1, r2, r3) = (r(0), r(1), r(2), r(3));
        let (r4, r5, r6, r7) = (r(4), r(5), r(6), r(7));
        // Rows interleaved in pairs: each 128-bit lane then holds two rows of one column.
        let (t0, t1) = (_mm512_unpacklo_pd(r0, r1), _mm512_unpackhi_pd(r0, r1));
        let (t2, t3) = (_mm512_unpacklo_pd(r2, r3), _mm512_unpackhi_pd(r2, r3));
        let (t4, t5) = (_mm512_unpacklo_pd(r4, r5), _mm512_unpackhi_pd(r4, r5));
        let (t6, t7) = (_mm512_unpacklo_pd(r6, r7), _mm512_unpackhi_pd(r6, r7));
        // Lanes gathered twice: even lanes (0x88) or odd lanes (0xDD) of two registers.
        let (u0, u1) = (
            _mm512_shuffle_f64x2::<0x88>(t0, t2),
            _mm512_shuffle_f64x2::<0xDD>(t0, t2),
        );
        let (u2, u3) = (
            _mm512_shuffle_f64x2::<0x88>(t1, t3),
            _mm512_shuffle_f64x2::<0xDD>(t1, t3),
        );
        let (u4, u5) = (
            _mm512_shuffle_f64x2::<0x88>(t4, t6),
            _mm512_shuffle_f64x2::<0xDD>(t4, t6),
        );
        let (u6, u7) = (
            _mm512_shuffle_f64x2::<0x88>(t5, t7),
            _mm512_shuffle_f64x2::<0xDD>(t5, t7),
        );
        let w = |k: usize, v: __m512d| unsafe { _mm512_storeu_pd(d.add(k * ds), v) };
        w(0, _mm512_shuffle_f64x2::<0x88>(u0, u4));
        w(4, _mm512_shuffle_f64x2::<0xDD>(u0, u4));
        w(2, _mm512_shuffle_f64x2::<0x88>(u1, u5));
        w(6, _mm512_shuffle_f64x2::<0xDD>(u1, u5));
        w(1, _mm512_shuffle_f64x2::<0x88>(u2, u6));
        w(5, _mm512_shuffle_f64x2::<0xDD>(u2, u6));
        w(3, _mm512_shuffle_f64x2::<0x88>(u3, u7));
        w(7, _mm512_shuffle_f64x2::<0xDD>(u3, u7));
    }

    #[target_feature(enable = "avx,avx2,fma,bmi1,bmi2,f16c,lzcnt,movbe")]
    pub(super) unsafe fn v3<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    #[target_feature(
        enable = "avx,avx2,fma,bmi1,bmi2,f16c,lzcnt,movbe,avx512f,avx512bw,avx512cd,avx512dq,avx512vl"
    )]
    pub(super) unsafe fn v4<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_and_capped_by_the_cpu() {
        assert!(Isa::Base < Isa::V3 && Isa::V3 < Isa::V4);
        assert!(level() <= supported());
        // A level above the CPU's runs at the CPU's: the closure runs either way.
        assert_eq!(dispatch_at(Isa::V4, || 7), 7);
        assert_eq!(dispatch_at(Isa::Base, || 8), 8);
    }

    /// The AVX2 and AVX-512 blocks move every element to its place, bit patterns kept (NaN payloads,
    /// signaling NaNs, negative zero), at offsets and strides that are not multiples of 8, and
    /// touch nothing outside the block; out-of-bounds blocks panic.
    #[test]
    fn a_transpose_block_moves_every_element_and_nothing_else() {
        let levels = [Isa::Base, Isa::V3, Isa::V4];
        for (isa, size) in levels
            .into_iter()
            .filter(|&l| l <= supported())
            .flat_map(|l| [(l, 4), (l, 8)])
        {
            let block = |src: &[u8], s0, ss, dst: &mut [u8], d0, ds| {
                transpose_block_at(isa, size, src, s0, ss, dst, d0, ds)
            };
            let (ss, ds) = (37usize, 21usize);
            let (s0, d0) = (5usize, 3usize);
            let words: Vec<u64> = (0..s0 + 15 * ss + 16 + 7)
                .map(|i| match (size, i % 5) {
                    (4, 0) => 0x7f80_0001 + i as u64, // f32 signaling NaNs with payloads
                    (8, 0) => 0x7ff0_0000_0000_0001 + i as u64, // and f64's
                    (4, 1) => 0x8000_0000,            // -0.0
                    (8, 1) => 0x8000_0000_0000_0000,
                    _ => (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                })
                .collect();
            let bytes = |w: u64| w.to_ne_bytes()[..size].to_vec();
            let src: Vec<u8> = words.iter().flat_map(|&w| bytes(w)).collect();
            let mut dst = vec![0xAAu8; (d0 + 15 * ds + 16 + 9) * size];
            let done = block(&src, s0, ss, &mut dst, d0, ds);
            assert_eq!(done, isa >= Isa::V3);
            if done {
                for k in 0..dst.len() / size {
                    let got = &dst[k * size..(k + 1) * size];
                    let (i, j) = ((k.wrapping_sub(d0)) / ds, (k.wrapping_sub(d0)) % ds);
                    if k >= d0 && i < BLOCK && j < BLOCK {
                        let want = bytes(words[s0 + i + j * ss]);
                        assert_eq!(got, &want[..], "{isa:?}, {size}-byte element ({i}, {j})");
                    } else {
                        assert!(
                            got.iter().all(|&b| b == 0xAA),
                            "{size}: element {k} written"
                        );
                    }
                }
            }
            let short = std::panic::catch_unwind(|| {
                let mut d = vec![0u8; (15 * ds + 15) * size];
                block(&src, 0, ss, &mut d, 0, ds)
            });
            assert!(short.is_err(), "a block past the end of dst must panic");
        }
    }
}
