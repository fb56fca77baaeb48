//! f16 and bf16: computed in f32, each result rounded once to the dtype.
//!
//! A kernel given a tensor of a half dtype validates it as it does any other (byte lengths,
//! dtype agreement, shapes), then hands it here, with the f32 computation to run:
//!
//! - [`blockwise`], for elementwise ops whose operands all have the output's shape (the common
//!   case), widens blocks of [`BLOCK`] elements of each half input to f32 (exactly: f32 holds
//!   every f16 and bf16 value), runs the f32 kernel on the block and rounds the block's result
//!   into the output, so the f32 copies stay in the L1 cache and the op moves the bytes of its
//!   half tensors only;
//! - [`via_f32`], for everything else (broadcasting, products, reductions, softmax), widens
//!   whole tensors into scratch buffers the thread keeps between calls (up to
//!   [`SCRATCH_KEPT`] bytes; fresh pages cost a fault each), runs the f32 kernel and rounds its
//!   result.
//!
//! Rounding is to nearest, ties to even. For Add, Sub, Mul, Div and Sqrt the result is the
//! correctly rounded one (f32 has more than twice the precision of either format, plus two
//! bits), as with native half arithmetic; sums, products and means accumulate in f32, as BLAS
//! libraries and PyTorch's CPU kernels do. The conversions are branch-free loops compiled for
//! the CPU's widest vectors (`isa`), and its F16C instructions for f16 where it has them; both
//! give the `half` crate's bits (tests).

use std::cell::RefCell;

use smallvec::SmallVec;

use crate::error::Result;
use crate::tensor::DType;

use super::common::{as_bytes, as_bytes_mut, parts_for, same_shape, typed, with_mut, PAR_CHUNK};
use super::isa;
use super::{CpuContext, View, ViewMut};

/// Elements per block of [`blockwise`]: four f32 blocks (three inputs and a result) take 32 KB.
pub(crate) const BLOCK: usize = 2048;

/// Runs the elementwise f32 computation `f` over `inputs` and `out`, which all hold the same
/// number of elements in the same order (equal shapes), block by block: half inputs are widened
/// to f32 per block, other inputs (a bool condition) are passed as they are, and a half `out`
/// gets each block's f32 result rounded into it. `f` sees 1-D views of one block. The caller
/// has validated the views.
pub(crate) fn blockwise(
    ctx: &CpuContext,
    inputs: &[View<'_>],
    out: ViewMut<'_>,
    f: impl Fn(&[View<'_>], ViewMut<'_>) -> Result<()> + Sync,
) -> Result<()> {
    let osz = out.dtype.size();
    let n = out.data.len() / osz;
    let parts = parts_for(ctx, n, PAR_CHUNK);
    let out_dtype = out.dtype;
    let run_part = |start: usize, part: &mut [u8]| -> Result<()> {
        let len = part.len() / osz;
        // A small op gets small buffers.
        let cap = BLOCK.min(len);
        let mut wide: Vec<Vec<f32>> = inputs
            .iter()
            .map(|v| {
                if v.dtype.is_half() {
                    vec![0.0; cap]
                } else {
                    Vec::new()
                }
            })
            .collect();
        let mut result = if out_dtype.is_half() {
            vec![0f32; cap]
        } else {
            Vec::new()
        };
        let mut b = 0;
        while b < len {
            let m = BLOCK.min(len - b);
            let (g, shape) = (start + b, [m]);
            let mut views: SmallVec<[View<'_>; 4]> = SmallVec::new();
            for (v, w) in inputs.iter().zip(wide.iter_mut()) {
                let isz = v.dtype.size();
                let bytes = &v.data[g * isz..(g + m) * isz];
                views.push(if v.dtype.is_half() {
                    widen_into(v.dtype, bytes, &mut w[..m]);
                    View {
                        data: as_bytes(&w[..m]),
                        dtype: DType::F32,
                        shape: &shape,
                    }
                } else {
                    View {
                        data: bytes,
                        dtype: v.dtype,
                        shape: &shape,
                    }
                });
            }
            let out_block = &mut part[b * osz..(b + m) * osz];
            if out_dtype.is_half() {
                f(
                    &views,
                    ViewMut {
                        data: as_bytes_mut(&mut result[..m]),
                        dtype: DType::F32,
                        shape: &shape,
                    },
                )?;
                narrow_into(out_dtype, &result[..m], out_block);
            } else {
                f(
                    &views,
                    ViewMut {
                        data: out_block,
                        dtype: out_dtype,
                        shape: &shape,
                    },
                )?;
            }
            b += m;
        }
        Ok(())
    };
    if parts <= 1 {
        return run_part(0, out.data);
    }
    // Pieces of whole cache lines of the output, one per thread.
    let per = n.div_ceil(parts).next_multiple_of(64);
    use rayon::prelude::*;
    out.data
        .par_chunks_mut(per * osz)
        .enumerate()
        .try_for_each(|(i, part)| run_part(i * per, part))
}

/// An elementwise op in a half dtype: [`blockwise`] when every input has `out`'s shape,
/// otherwise (broadcasting) [`via_f32`].
pub(crate) fn elementwise(
    ctx: &CpuContext,
    inputs: &[View<'_>],
    out: ViewMut<'_>,
    f: impl Fn(&[View<'_>], ViewMut<'_>) -> Result<()> + Sync,
) -> Result<()> {
    if inputs.iter().all(|v| same_shape(v.shape, out.shape)) {
        blockwise(ctx, inputs, out, f)
    } else {
        via_f32(ctx, inputs, out, f)
    }
}

/// Runs `f` on f32 copies of `inputs` (those of a half dtype; the others as they are) and,
/// when `out` is of a half dtype, an f32 output that is then rounded into `out`. The caller has
/// validated the views: their byte lengths match their shapes.
pub(crate) fn via_f32(
    ctx: &CpuContext,
    inputs: &[View<'_>],
    out: ViewMut<'_>,
    f: impl FnOnce(&[View<'_>], ViewMut<'_>) -> Result<()>,
) -> Result<()> {
    let wide: Vec<Option<Scratch>> = inputs
        .iter()
        .map(|v| v.dtype.is_half().then(|| widen(ctx, v)))
        .collect();
    let views: Vec<View<'_>> = inputs
        .iter()
        .zip(&wide)
        .map(|(v, w)| match w {
            Some(bytes) => View {
                data: bytes.bytes(),
                dtype: DType::F32,
                shape: v.shape,
            },
            None => *v,
        })
        .collect();
    if !out.dtype.is_half() {
        return f(&views, out);
    }
    let mut result = Scratch::take(out.data.len() * 2);
    f(
        &views,
        ViewMut {
            data: result.bytes_mut(),
            dtype: DType::F32,
            shape: out.shape,
        },
    )?;
    narrow(ctx, result.bytes(), out);
    Ok(())
}

/// The f32 values of `v` (a half dtype), as bytes in a scratch buffer.
pub(crate) fn widen(ctx: &CpuContext, v: &View<'_>) -> Scratch {
    let n = v.data.len() / 2;
    let mut wide = Scratch::take(n * 4);
    let parts = parts_for(ctx, n, PAR_CHUNK);
    with_mut::<f32, _>(wide.bytes_mut(), |w| {
        super::common::par_chunks(w, parts, |start, chunk| {
            widen_into(
                v.dtype,
                &v.data[start * 2..(start + chunk.len()) * 2],
                chunk,
            )
        })
    });
    wide
}

/// Rounds the f32 values in `wide` (as bytes) into `out` (a half dtype).
pub(crate) fn narrow(ctx: &CpuContext, wide: &[u8], out: ViewMut<'_>) {
    let src = typed::<f32>(wide);
    let parts = parts_for(ctx, src.len(), PAR_CHUNK);
    // Pieces of `out`'s bytes are multiples of 64 bytes: whole elements.
    super::common::par_chunks(out.data, parts, |start, chunk| {
        narrow_into(out.dtype, &src[start / 2..(start + chunk.len()) / 2], chunk)
    });
}

/// Rounds the f64 values in `wide` (as bytes) into `out` (a half dtype), once: through f32
/// rounded to odd ([`round_to_odd`](crate::tensor::round_to_odd)), never through f32 rounded
/// to nearest, which would round twice. (The `half` crate's f64 conversions are not used: they round through f32 to nearest
/// where the CPU has F16C, and otherwise drop the f64's last 32 bits before rounding; either
/// can turn a value just off a tie into the tie.)
pub(crate) fn narrow_f64(wide: &[u8], out: ViewMut<'_>) {
    let src = typed::<f64>(wide);
    let mut odd = [0f32; BLOCK];
    for (s, o) in src.chunks(BLOCK).zip(out.data.chunks_mut(BLOCK * 2)) {
        for (d, &x) in odd.iter_mut().zip(s) {
            *d = crate::tensor::round_to_odd(x);
        }
        narrow_into(out.dtype, &odd[..s.len()], o);
    }
}

/// `bits` (the bytes of `dtype` values, f16 or bf16) widened into `dst`.
fn widen_into(dtype: DType, bits: &[u8], dst: &mut [f32]) {
    let src = typed::<u16>(bits);
    if dtype == DType::BF16 {
        convert_all(&src, dst, bf16_to_f32)
    } else {
        #[cfg(target_arch = "x86_64")]
        if isa::level() >= isa::Isa::V3 {
            // SAFETY: the CPU has F16C and AVX (level V3 or above).
            return unsafe { f16c::widen(&src, dst) };
        }
        convert_all(&src, dst, f16_to_f32)
    }
}

/// `src` rounded into `dst` (the bytes of `dtype` values, f16 or bf16).
fn narrow_into(dtype: DType, src: &[f32], dst: &mut [u8]) {
    with_mut::<u16, _>(dst, |o| {
        if dtype == DType::BF16 {
            convert_all(src, o, f32_to_bf16)
        } else {
            #[cfg(target_arch = "x86_64")]
            if isa::level() >= isa::Isa::V3 {
                // SAFETY: the CPU has F16C and AVX (level V3 or above).
                return unsafe { f16c::narrow(src, o) };
            }
            convert_all(src, o, f32_to_f16)
        }
    });
}

/// f16 conversions with the CPU's F16C instructions, eight elements each (the rest, and CPUs
/// without F16C, use the portable conversions, which give the same bits: tests).
#[cfg(target_arch = "x86_64")]
mod f16c {
    use std::arch::x86_64::{
        __m128i, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_loadu_ps, _mm256_storeu_ps,
        _mm_loadu_si128, _mm_storeu_si128, _MM_FROUND_TO_NEAREST_INT,
    };

    /// `dst[i]` = the f16 `src[i]` as f32, for `min(len)` elements.
    ///
    /// # Safety
    /// The CPU has F16C and AVX.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn widen(src: &[u16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: elements i..i + 8 are in bounds of both slices; unaligned loads/stores.
            unsafe {
                let h = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
                _mm256_storeu_ps(dst.as_mut_ptr().add(i), _mm256_cvtph_ps(h));
            }
            i += 8;
        }
        for j in i..n {
            dst[j] = super::f16_to_f32(src[j]);
        }
    }

    /// `dst[i]` = `src[i]` rounded to the nearest f16 (ties to even), for `min(len)` elements.
    ///
    /// # Safety
    /// The CPU has F16C and AVX.
    #[target_feature(enable = "avx,f16c")]
    pub(super) unsafe fn narrow(src: &[f32], dst: &mut [u16]) {
        let n = src.len().min(dst.len());
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: as in `widen`.
            unsafe {
                let x = _mm256_loadu_ps(src.as_ptr().add(i));
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
                _mm_storeu_si128(dst.as_mut_ptr().add(i).cast::<__m128i>(), h);
            }
            i += 8;
        }
        for j in i..n {
            dst[j] = super::f32_to_f16(src[j]);
        }
    }
}

/// `dst[i] = f(src[i])`, the loop compiled for the widest vectors the CPU has (`f` is one of
/// the conversions below, inlined).
#[inline(always)]
fn convert_all<S: Copy, D>(src: &[S], dst: &mut [D], f: impl Fn(S) -> D + Copy) {
    isa::dispatch(
        #[inline(always)]
        || {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = f(s);
            }
        },
    )
}

// The conversions, one element each, without branches so that the loops above vectorize
// (compiled for the widest vectors the CPU has, `isa`). They equal the `half` crate's `to_f32`
// and `from_f32` bit for bit on numbers (tests), and NaN stays NaN, quiet.

/// An f16 encoding as the f32 of the same value (exact).
#[inline(always)]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    // Normal numbers: the fields moved into place and the exponent rebiased (15 -> 127);
    // infinity and NaN get the exponent 255.
    let normal = (em << 13) + ((127 - 15) << 23);
    let normal = if em >= 0x7c00 {
        normal + ((128 - 16) << 23)
    } else {
        normal
    };
    // Zero and subnormals: em units of 2^-24, exact in f32.
    let small = (em as f32 * f32::from_bits(0x3380_0000)).to_bits();
    f32::from_bits(if em < 0x400 { small } else { normal } | sign)
}

/// `x` rounded to the nearest f16 (ties to even), as its encoding.
#[inline(always)]
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    let u = x.to_bits();
    let sign = (u >> 16) & 0x8000;
    let a = u & 0x7fff_ffff;
    // 65520 and above round to infinity; NaN stays NaN (quiet, the payload's top bits kept).
    let big = if a > 0x7f80_0000 {
        0x7e00 | ((a >> 13) & 0x3ff)
    } else {
        0x7c00
    };
    // Normal results: rebias the exponent (127 -> 15) and round the 13 bits dropped.
    let n = a.wrapping_sub((127 - 15) << 23);
    let normal = (n.wrapping_add(0xfff + ((n >> 13) & 1))) >> 13;
    // Below 2^-14: adding 0.5 (whose unit in the last place is 2^-24, f16's smallest
    // subnormal) makes the FPU round to the f16 subnormal; its bits are the encoding.
    let small = (f32::from_bits(a) + 0.5)
        .to_bits()
        .wrapping_sub(0x3f00_0000);
    let r = if a >= 0x477f_f000 {
        big
    } else if a >= 0x3880_0000 {
        normal
    } else {
        small
    };
    (r | sign) as u16
}

/// A bf16 encoding as the f32 of the same value (its upper half).
#[inline(always)]
pub(crate) fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

/// `x` rounded to the nearest bf16 (ties to even), as its encoding; NaN stays NaN, quiet.
#[inline(always)]
pub(crate) fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    let rounded = (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16;
    if u & 0x7fff_ffff > 0x7f80_0000 {
        ((u >> 16) | 0x40) as u16
    } else {
        rounded
    }
}

/// The most bytes of scratch buffers a thread keeps between calls.
const SCRATCH_KEPT: usize = 64 << 20;

thread_local! {
    /// Buffers given back by earlier calls on this thread, largest last.
    static SCRATCH: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// A scratch buffer of f32s (so 4-byte aligned), taken from the thread's kept buffers and
/// given back when dropped; its bytes are whatever an earlier use left (every user overwrites
/// all of them).
pub(crate) struct Scratch {
    buf: Vec<f32>,
    bytes: usize,
}

impl Scratch {
    pub(crate) fn take(bytes: usize) -> Scratch {
        let n = bytes.div_ceil(4);
        let mut buf = SCRATCH
            .try_with(|s| {
                let mut s = s.borrow_mut();
                let i = s.iter().position(|b| b.len() >= n);
                i.map(|i| s.remove(i)).or_else(|| s.pop())
            })
            .ok()
            .flatten()
            .unwrap_or_default();
        if buf.len() < n {
            buf.resize(n, 0.0);
        }
        Scratch { buf, bytes }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &as_bytes(&self.buf)[..self.bytes]
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut as_bytes_mut(&mut self.buf)[..self.bytes]
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // During the thread's teardown the kept buffers may be gone: the buffer is then freed.
        let _ = SCRATCH.try_with(|s| {
            let mut s = s.borrow_mut();
            let kept: usize = s.iter().map(|b| b.len() * 4).sum();
            if kept + buf.len() * 4 <= SCRATCH_KEPT {
                s.push(buf);
                s.sort_by_key(|b| b.len());
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;
    use crate::error::Code;

    const HALVES: [DType; 2] = [DType::F16, DType::BF16];

    /// `t` (a half dtype) as exact f64 values.
    fn exact(t: &Tensor) -> Tensor {
        Tensor::from_f64(&t.shape, &t.to_f64())
    }

    /// The f64 kernel's result on the exact values of `inputs`, rounded once to `dtype`: what
    /// a half kernel must give, within one unit in the last place.
    fn reference(
        dtype: DType,
        inputs: &[&Tensor],
        shape: &[usize],
        run: impl FnOnce(&[View<'_>], ViewMut<'_>),
    ) -> Vec<f64> {
        let wide: Vec<Tensor> = inputs.iter().map(|t| exact(t)).collect();
        let views: Vec<View<'_>> = wide.iter().map(|t| t.view()).collect();
        let mut out = Tensor::zeros(DType::F64, shape);
        run(&views, out.view_mut());
        out.to_f64()
            .into_iter()
            .map(|x| round_to(dtype, x))
            .collect()
    }

    const C: CpuContext = CpuContext::SINGLE;

    /// The element conversions against the `half` crate's (an independent implementation):
    /// every f16 and bf16 encoding into f32, and every 251st f32 encoding (all exponents, both
    /// signs, subnormals) plus the rounding boundaries into each; NaN as NaN.
    #[test]
    fn conversions_equal_the_half_crates_bit_for_bit() {
        use super::super::common::as_bytes;
        use super::super::half_float::{
            bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, narrow_into, widen_into,
        };
        use half::{bf16, f16};
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let every: Vec<u16> = (0..=u16::MAX).collect();
        // The slice conversions (F16C's where the CPU has it) and the element ones.
        let (mut wide_h, mut wide_b) = (vec![0f32; every.len()], vec![0f32; every.len()]);
        widen_into(DType::F16, as_bytes(&every), &mut wide_h);
        widen_into(DType::BF16, as_bytes(&every), &mut wide_b);
        for &h in &every {
            let want = f16::from_bits(h).to_f32();
            assert!(same(f16_to_f32(h), want), "f16 {h:#06x}");
            assert!(same(wide_h[h as usize], want), "f16 {h:#06x} (slice)");
            let want = bf16::from_bits(h).to_f32();
            assert!(same(bf16_to_f32(h), want), "bf16 {h:#06x}");
            assert!(same(wide_b[h as usize], want), "bf16 {h:#06x} (slice)");
        }
        let boundaries = [
            65504.0,
            65519.996,
            65520.0,
            5.960_464_5e-8,
            2.980_232_2e-8,
            -0.0,
        ];
        let xs: Vec<f32> = (0..=u32::MAX)
            .step_by(251)
            .map(f32::from_bits)
            .chain(boundaries)
            .collect();
        let (mut hs, mut bs) = (vec![0u8; xs.len() * 2], vec![0u8; xs.len() * 2]);
        narrow_into(DType::F16, &xs, &mut hs);
        narrow_into(DType::BF16, &xs, &mut bs);
        for (i, &x) in xs.iter().enumerate() {
            let (h, b) = (f32_to_f16(x), f32_to_bf16(x));
            let slice_h = u16::from_ne_bytes([hs[2 * i], hs[2 * i + 1]]);
            let slice_b = u16::from_ne_bytes([bs[2 * i], bs[2 * i + 1]]);
            if x.is_nan() {
                assert!(f16_to_f32(h).is_nan() && bf16_to_f32(b).is_nan(), "{x}");
                assert!(
                    f16_to_f32(slice_h).is_nan() && bf16_to_f32(slice_b).is_nan(),
                    "{x}"
                );
                continue;
            }
            let want = f16::from_f32(x).to_bits();
            assert_eq!(h, want, "f16 of {x:e} ({:#010x})", x.to_bits());
            assert_eq!(slice_h, want, "f16 of {x:e} ({:#010x}), slice", x.to_bits());
            let want = bf16::from_f32(x).to_bits();
            assert_eq!(b, want, "bf16 of {x:e} ({:#010x})", x.to_bits());
            assert_eq!(
                slice_b,
                want,
                "bf16 of {x:e} ({:#010x}), slice",
                x.to_bits()
            );
        }
    }

    #[test]
    fn binary_ops_round_the_exact_result_once() {
        // Pow is not correctly rounded: it is checked within a tolerance, below.
        let ops: Vec<BinaryOp> = BinaryOp::ALL
            .into_iter()
            .filter(|&op| op != BinaryOp::Pow)
            .collect();
        for dt in HALVES {
            let (a, b) = (
                Tensor::sample(dt, &[3, 5], 1),
                Tensor::positive(dt, &[5], 2),
            );
            for &op in &ops {
                let mut out = Tensor::zeros(dt, &[3, 5]);
                binary(&C, op, a.view(), b.view(), out.view_mut()).unwrap();
                let want = reference(dt, &[&a, &b], &[3, 5], |v, o| {
                    binary(&C, op, v[0], v[1], o).unwrap()
                });
                // Correctly rounded: f32 holds more than twice the bits of either format.
                assert_eq!(out.to_f64(), want, "{op:?} {dt}");
            }
            let (base, exp) = (
                Tensor::pow_base(dt, &[7], 3),
                Tensor::pow_exponent(dt, &[7], 4),
            );
            let mut out = Tensor::zeros(dt, &[7]);
            binary(&C, BinaryOp::Pow, base.view(), exp.view(), out.view_mut()).unwrap();
            let want = reference(dt, &[&base, &exp], &[7], |v, o| {
                binary(&C, BinaryOp::Pow, v[0], v[1], o).unwrap()
            });
            assert_close(&out, &want, &format!("Pow {dt}"));
        }
    }

    #[test]
    fn unary_compare_and_select_agree_with_f64() {
        let ops = UnaryOp::ALL;
        for dt in HALVES {
            let a = Tensor::positive(dt, &[2, 9], 5);
            for op in ops {
                let mut out = Tensor::zeros(dt, &[2, 9]);
                unary(&C, op, a.view(), out.view_mut()).unwrap();
                let want = reference(dt, &[&a], &[2, 9], |v, o| unary(&C, op, v[0], o).unwrap());
                assert_close(&out, &want, &format!("{op:?} {dt}"));
            }
            let (x, y) = (
                Tensor::small_ints(dt, &[4, 3], 6),
                Tensor::small_ints(dt, &[3], 7),
            );
            let mut less = Tensor::zeros(DType::Bool, &[4, 3]);
            compare(&C, CompareOp::Less, x.view(), y.view(), less.view_mut()).unwrap();
            let want: Vec<f64> = (0..12)
                .map(|i| f64::from(u8::from(x.get(i) < y.get(i % 3))))
                .collect();
            assert_eq!(less.to_f64(), want, "Less {dt}");
            let mut picked = Tensor::zeros(dt, &[4, 3]);
            select(&C, less.view(), x.view(), y.view(), picked.view_mut()).unwrap();
            let want: Vec<f64> = (0..12)
                .map(|i| {
                    if want[i] != 0.0 {
                        x.get(i)
                    } else {
                        y.get(i % 3)
                    }
                })
                .collect();
            assert_eq!(picked.to_f64(), want, "Select {dt}");
        }
    }

    #[test]
    fn sums_and_products_accumulate_in_f32() {
        for dt in HALVES {
            // 3000 ones: an f16 accumulator stops at 2048 (2049 is not an f16), a bf16 one at
            // 256 (257 is not a bf16). In f32 the sum is exact; rounded once it is 3000 in f16
            // and 3008 in bf16.
            let ones = Tensor::from_values(dt, &[3000], &[1.0; 3000]);
            let mut sum = Tensor::zeros(dt, &[]);
            reduce(&C, ReduceOp::Sum, ones.view(), &[0], sum.view_mut()).unwrap();
            assert_eq!(sum.to_f64(), [round_to(dt, 3000.0)], "ReduceSum {dt}");
            let row = Tensor::from_values(dt, &[1, 3000], &[1.0; 3000]);
            let col = Tensor::from_values(dt, &[3000, 1], &[1.0; 3000]);
            let mut dot = Tensor::zeros(dt, &[1, 1]);
            matmul(&C, row.view(), col.view(), false, false, dot.view_mut()).unwrap();
            assert_eq!(dot.to_f64(), [round_to(dt, 3000.0)], "MatMul {dt}");

            let a = Tensor::sample(dt, &[4, 6, 5], 8);
            for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean] {
                let mut out = Tensor::zeros(dt, &[4, 5]);
                reduce(&C, op, a.view(), &[1], out.view_mut()).unwrap();
                let want = reference(dt, &[&a], &[4, 5], |v, o| {
                    reduce(&C, op, v[0], &[1], o).unwrap()
                });
                assert_close(&out, &want, &format!("{op:?} {dt}"));
            }
            let (x, w) = (
                Tensor::sample(dt, &[2, 3, 7], 9),
                Tensor::sample(dt, &[4, 7], 10),
            );
            let mut out = Tensor::zeros(dt, &[2, 3, 4]);
            matmul(&C, x.view(), w.view(), false, true, out.view_mut()).unwrap();
            let want = reference(dt, &[&x, &w], &[2, 3, 4], |v, o| {
                matmul(&C, v[0], v[1], false, true, o).unwrap()
            });
            assert_close_tol(&out, &want, &format!("MatMul {dt}"), 4.0);
            let (a2, b2, c2) = (
                Tensor::sample(dt, &[3, 7], 11),
                Tensor::sample(dt, &[7, 4], 12),
                Tensor::sample(dt, &[4], 13),
            );
            let mut out = Tensor::zeros(dt, &[3, 4]);
            let g = |a: View<'_>, b: View<'_>, c: View<'_>, o: ViewMut<'_>| {
                gemm(&C, a, b, c, false, false, 0.5, 2.0, true, o)
            };
            g(a2.view(), b2.view(), c2.view(), out.view_mut()).unwrap();
            let want = reference(dt, &[&a2, &b2, &c2], &[3, 4], |v, o| {
                g(v[0], v[1], v[2], o).unwrap()
            });
            assert_close_tol(&out, &want, &format!("Gemm {dt}"), 4.0);
            let mut out = Tensor::zeros(dt, &[3, 7]);
            softmax(&C, a2.view(), 1, false, out.view_mut()).unwrap();
            let want = reference(dt, &[&a2], &[3, 7], |v, o| {
                softmax(&C, v[0], 1, false, o).unwrap()
            });
            assert_close(&out, &want, &format!("Softmax {dt}"));
            let (p, q) = (Tensor::sample(dt, &[5], 14), Tensor::sample(dt, &[5], 15));
            let mut out = Tensor::zeros(dt, &[5]);
            add_n(&C, &[p.view(), q.view(), p.view()], out.view_mut()).unwrap();
            let want = reference(dt, &[&p, &q], &[5], |v, o| {
                add_n(&C, &[v[0], v[1], v[0]], o).unwrap()
            });
            assert_close(&out, &want, &format!("AddN {dt}"));
        }
    }

    /// Work split across threads (the widening, the rounding, the blocks) gives the bits of
    /// one thread.
    #[test]
    fn threads_give_the_bits_of_one_thread() {
        let many = CpuContext { threads: 4 };
        for dt in HALVES {
            let (a, b) = (
                Tensor::sample(dt, &[300, 400], 20),
                Tensor::sample(dt, &[400], 21),
            );
            let (mut one, mut four) = (
                Tensor::zeros(dt, &[300, 400]),
                Tensor::zeros(dt, &[300, 400]),
            );
            binary(&C, BinaryOp::Mul, a.view(), b.view(), one.view_mut()).unwrap();
            binary(&many, BinaryOp::Mul, a.view(), b.view(), four.view_mut()).unwrap();
            assert_eq!(one.bytes(), four.bytes(), "broadcast Mul {dt}");
            unary(&C, UnaryOp::Tanh, a.view(), one.view_mut()).unwrap();
            unary(&many, UnaryOp::Tanh, a.view(), four.view_mut()).unwrap();
            assert_eq!(one.bytes(), four.bytes(), "Tanh {dt}");
        }
    }

    #[test]
    fn layout_ops_move_two_byte_elements() {
        for dt in HALVES {
            let a = Tensor::sample(dt, &[2, 3], 16);
            let v = a.to_f64();
            let mut t = Tensor::zeros(dt, &[3, 2]);
            transpose(&C, a.view(), &[1, 0], t.view_mut()).unwrap();
            assert_eq!(
                t.to_f64(),
                [v[0], v[3], v[1], v[4], v[2], v[5]],
                "Transpose {dt}"
            );
            let mut s = Tensor::zeros(dt, &[2, 2]);
            slice(&C, a.view(), &[0, 1], s.view_mut()).unwrap();
            assert_eq!(s.to_f64(), [v[1], v[2], v[4], v[5]], "Slice {dt}");
            let mut c = Tensor::zeros(dt, &[4, 3]);
            concat(&C, &[a.view(), a.view()], 0, c.view_mut()).unwrap();
            assert_eq!(c.to_f64(), [v.clone(), v.clone()].concat(), "Concat {dt}");
            let mut bc = Tensor::zeros(dt, &[2, 2, 3]);
            broadcast_to(&C, a.view(), bc.view_mut()).unwrap();
            assert_eq!(
                bc.to_f64(),
                [v.clone(), v.clone()].concat(),
                "BroadcastTo {dt}"
            );
            let value = Tensor::from_values(dt, &[], &[2.5]);
            let mut f = Tensor::zeros(dt, &[3]);
            fill(&C, value.view(), f.view_mut()).unwrap();
            assert_eq!(f.to_f64(), [2.5; 3], "Fill {dt}");
            let mut io = Tensor::zeros(dt, &[2, 3]);
            iota(&C, 1, io.view_mut()).unwrap();
            assert_eq!(io.to_f64(), [0.0, 1.0, 2.0, 0.0, 1.0, 2.0], "Iota {dt}");
        }
    }

    #[test]
    fn casts_round_once_and_specials_survive() {
        // Just off a tie: 1 + 2^-11 (f16) and 1 + 2^-8 (bf16) are ties; the added 2^-40 lies
        // in the f64's last 32 bits, and rounding to nearest f32 first lands on the tie.
        let off_tie = 2f64.powi(-40);
        let values = [
            0.1,
            -2.5,
            65504.0,
            70000.0,
            1e-8,
            f64::INFINITY,
            f64::NAN,
            3.0e38,
            1.0 + 2f64.powi(-11) + off_tie,
            -(1.0 + 2f64.powi(-8) + off_tie),
        ];
        let src = Tensor::from_f64(&[values.len()], &values);
        for dt in HALVES {
            let mut h = Tensor::zeros(dt, &[values.len()]);
            cast(&C, src.view(), h.view_mut()).unwrap();
            let want: Vec<f64> = values.iter().map(|&x| round_to(dt, x)).collect();
            for (g, w) in h.to_f64().iter().zip(&want) {
                assert!(
                    g == w || (g.is_nan() && w.is_nan()),
                    "f64 -> {dt}: {g} != {w}"
                );
            }
            // Back to i32: truncation and saturation of the half value, as from f32.
            let mut i = Tensor::zeros(DType::I32, &[values.len()]);
            cast(&C, h.view(), i.view_mut()).unwrap();
            let want: Vec<f64> = want.iter().map(|&x| x as i32 as f64).collect();
            assert_eq!(i.to_f64(), want, "{dt} -> i32");
        }
        // Off the ties, away from the even neighbours: f16's 1 + 2^-10, bf16's -(1 + 2^-7).
        let mut h = Tensor::zeros(DType::F16, &[values.len()]);
        cast(&C, src.view(), h.view_mut()).unwrap();
        assert_eq!(h.get(8), 1.0 + 2f64.powi(-10));
        let mut b = Tensor::zeros(DType::BF16, &[values.len()]);
        cast(&C, src.view(), b.view_mut()).unwrap();
        assert_eq!(b.get(9), -(1.0 + 2f64.powi(-7)));
        // f16 overflows past 65504 (70000 is infinite), bf16 keeps f32's range.
        assert_eq!(h.get(3), f64::INFINITY);
        cast(&C, h.view(), b.view_mut()).unwrap();
        assert_eq!(b.get(2), 65536.0, "65504 rounds to bf16's 65536");
        assert!(b.get(7).is_infinite(), "f16's infinity stays infinite");
    }

    #[test]
    fn mismatched_and_short_half_tensors_are_refused() {
        let a = Tensor::sample(DType::F16, &[4], 17);
        let b = Tensor::sample(DType::F32, &[4], 18);
        let c = Tensor::sample(DType::BF16, &[4], 19);
        let mut out = Tensor::zeros(DType::F16, &[4]);
        for other in [&b, &c] {
            let e = binary(&C, BinaryOp::Add, a.view(), other.view(), out.view_mut()).unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(e.message.contains("b's dtype"), "{e}");
        }
        let short = View {
            data: &a.data[..6],
            dtype: DType::F16,
            shape: &[4],
        };
        let e = unary(&C, UnaryOp::Exp, short, out.view_mut()).unwrap_err();
        assert!(e.message.contains("holds 8 bytes; the data has 6"), "{e}");
        let mut wrong_out = Tensor::zeros(DType::BF16, &[4]);
        let e = matmul(&C, a.view(), a.view(), false, false, wrong_out.view_mut()).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
    }
}
