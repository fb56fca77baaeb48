//! Dtype conversion, every pair: Rust `as` between numbers (float → int truncates toward zero
//! and saturates, NaN → 0; int → int wraps), `x != 0` into bool, 0/1 out of bool.
//!
//! f16 and bf16 are rounded to once, to nearest, ties to even: from f32 directly, from any other
//! dtype through its f64 value (exact for every dtype but i64, whose values beyond 2^53 — far
//! outside f16's range — round twice). Out of them, the value is widened to f32 (exact) and
//! converted from there as an f32 would be.

use crate::error::Result;
use crate::tensor::DType;

use super::common::{any_dispatch, check_len, invalid, Pod, B8, PAR_CHUNK};
use super::elementwise::map;
use super::half_float::{blockwise, narrow_f64, Scratch};
use super::{CpuContext, View, ViewMut};

/// A conversion of one element.
trait CastTo<D>: Copy {
    fn cast(self) -> D;
}

macro_rules! numeric_casts {
    ($s:ty => $($d:ty),*) => {
        $(impl CastTo<$d> for $s {
            #[inline(always)]
            fn cast(self) -> $d {
                self as $d
            }
        })*
        impl CastTo<B8> for $s {
            #[inline(always)]
            fn cast(self) -> B8 {
                B8::new(self != 0 as $s)
            }
        }
        impl CastTo<$s> for B8 {
            #[inline(always)]
            fn cast(self) -> $s {
                self.get() as u8 as $s
            }
        }
    };
}
numeric_casts!(f32 => f32, f64, i32, i64, u8);
numeric_casts!(f64 => f32, f64, i32, i64, u8);
numeric_casts!(i32 => f32, f64, i32, i64, u8);
numeric_casts!(i64 => f32, f64, i32, i64, u8);
numeric_casts!(u8 => f32, f64, i32, i64, u8);

impl CastTo<B8> for B8 {
    #[inline(always)]
    fn cast(self) -> B8 {
        B8::new(self.get())
    }
}

pub(crate) fn cast(ctx: &CpuContext, a: View<'_>, out: ViewMut<'_>) -> Result<()> {
    let n = check_len("a", a.data.len(), a.dtype, a.shape)?;
    check_len("out", out.data.len(), out.dtype, out.shape)?;
    if a.shape != out.shape {
        return Err(invalid(format!(
            "out has shape {:?} but a has shape {:?}; they must be equal",
            out.shape, a.shape
        )));
    }
    if a.dtype == out.dtype && a.dtype != DType::Bool {
        out.data.copy_from_slice(a.data);
        return Ok(());
    }
    if a.dtype.is_half() || out.dtype.is_half() {
        return cast_half(ctx, a, out);
    }
    any_dispatch!(a.dtype, S => any_dispatch!(out.dtype, D => cast_t::<S, D>(ctx, a, out, n)))
}

/// [`cast`] from or to f16 or bf16 (validated; the dtypes differ). From a half dtype, and from
/// f32, block by block through f32 (exact, so the one rounding is f32's to the target);
/// from anything else into a half, through the f64 value, rounded once.
fn cast_half(ctx: &CpuContext, a: View<'_>, out: ViewMut<'_>) -> Result<()> {
    if a.dtype.is_half() || a.dtype == DType::F32 {
        return blockwise(ctx, &[a], out, |v, o| cast(&CpuContext::SINGLE, v[0], o));
    }
    let mut wide = Scratch::take(out.data.len() * 4);
    let as_f64 = ViewMut {
        data: wide.bytes_mut(),
        dtype: DType::F64,
        shape: out.shape,
    };
    cast(ctx, a, as_f64)?;
    narrow_f64(wide.bytes(), out);
    Ok(())
}

fn cast_t<S: Pod + CastTo<D>, D: Pod>(
    ctx: &CpuContext,
    a: View<'_>,
    out: ViewMut<'_>,
    n: usize,
) -> Result<()> {
    map(ctx, a, out, n, PAR_CHUNK, |x: S| x.cast())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;

    /// The reference: Rust `as` through the f64 value, except that i64 sources keep all their
    /// bits (they go through i128).
    fn ref_cast(src: &Tensor, i: usize, to: DType) -> f64 {
        let (mut x, mut xi) = (src.get(i), src.get_i128(i));
        if src.dtype == DType::Bool {
            (x, xi) = ((x != 0.0) as u8 as f64, (xi != 0) as i128);
        }
        let int_src = !src.dtype.is_float();
        match to {
            DType::F32 => {
                if int_src {
                    xi as f32 as f64
                } else {
                    x as f32 as f64
                }
            }
            DType::F64 => {
                if int_src {
                    xi as f64
                } else {
                    x
                }
            }
            DType::I32 => (if int_src { xi as i32 } else { x as i32 }) as f64,
            DType::I64 => (if int_src { xi as i64 } else { x as i64 }) as f64,
            DType::U8 => (if int_src { xi as u8 } else { x as u8 }) as f64,
            DType::Bool => (x != 0.0) as u8 as f64,
            // Rounded once from the exact value (an i64 through f64, as the kernel does).
            DType::F16 | DType::BF16 => round_to(to, if int_src { xi as f64 } else { x }),
        }
    }

    #[test]
    fn all_pairs() {
        let specials = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.5,
            -0.5,
            0.0,
            0.7,
            255.9,
            256.0,
            -129.0,
            3e9,
            -3e9,
            1e20,
            -1e20,
            16_777_217.0,
        ];
        for from in DType::ALL {
            let mut src = Tensor::sample(from, &[4, 25], 7);
            if from.is_float() {
                for (i, &v) in specials.iter().enumerate() {
                    src.set(i, v);
                }
            }
            if from == DType::I64 {
                src.set(0, i64::MAX as f64);
                src.set(1, i64::MIN as f64);
                src.set(2, 4_294_967_296.0 + 7.0);
            }
            if from == DType::Bool {
                // Any non-zero byte reads as true.
                src.data[3] = 9;
            }
            for to in DType::ALL {
                let mut out = Tensor::zeros(to, &[4, 25]);
                cast(&CpuContext::SINGLE, src.view(), out.view_mut()).unwrap();
                let want: Vec<f64> = (0..src.len()).map(|i| ref_cast(&src, i, to)).collect();
                if to.is_float() {
                    assert_close(&out, &want, &format!("{from} -> {to}"));
                } else {
                    assert_eq!(out.to_f64(), want, "{from} -> {to}");
                }
            }
        }
    }

    #[test]
    fn saturation_and_truncation() {
        let src = Tensor::from_f32(
            &[7],
            &[
                f32::NAN,
                f32::INFINITY,
                -f32::INFINITY,
                -1.9,
                2.9,
                1e10,
                -300.0,
            ],
        );
        let mut out = Tensor::zeros(DType::I32, &[7]);
        cast(&CpuContext::SINGLE, src.view(), out.view_mut()).unwrap();
        assert_eq!(
            out.to_i64(),
            [
                0,
                i32::MAX as i64,
                i32::MIN as i64,
                -1,
                2,
                i32::MAX as i64,
                -300
            ]
        );
        let mut out = Tensor::zeros(DType::U8, &[7]);
        cast(&CpuContext::SINGLE, src.view(), out.view_mut()).unwrap();
        assert_eq!(out.to_i64(), [0, 255, 0, 0, 2, 255, 0]);
        let mut out = Tensor::zeros(DType::Bool, &[7]);
        cast(&CpuContext::SINGLE, src.view(), out.view_mut()).unwrap();
        assert_eq!(out.bytes(), [1, 1, 1, 1, 1, 1, 1]);
        // Negative integers into u8 wrap.
        let src = Tensor::from_i32(&[3], &[-1, 256, 300]);
        let mut out = Tensor::zeros(DType::U8, &[3]);
        cast(&CpuContext::SINGLE, src.view(), out.view_mut()).unwrap();
        assert_eq!(out.to_i64(), [255, 0, 44]);
    }

    #[test]
    fn shapes_and_lengths_are_checked() {
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let mut out = Tensor::zeros(DType::I32, &[3, 2]);
        let e = cast(&CpuContext::SINGLE, a.view(), out.view_mut()).unwrap_err();
        assert!(e.message.contains("must be equal"), "{e}");
        let mut out = Tensor::zeros(DType::I32, &[2, 3]);
        let short = ViewMut {
            data: &mut out.data[..8],
            dtype: DType::I32,
            shape: &[2, 3],
        };
        let e = cast(&CpuContext::SINGLE, a.view(), short).unwrap_err();
        assert!(e.message.contains("out: a i32 tensor"), "{e}");
        // Empty and rank-0 tensors.
        let a = Tensor::zeros(DType::F64, &[0, 3]);
        let mut out = Tensor::zeros(DType::U8, &[0, 3]);
        cast(&CpuContext::SINGLE, a.view(), out.view_mut()).unwrap();
        let a = Tensor::from_f64(&[], &[-2.5]);
        let mut out = Tensor::zeros(DType::I64, &[]);
        cast(&CpuContext::SINGLE, a.view(), out.view_mut()).unwrap();
        assert_eq!(out.to_i64(), [-2]);
    }

    #[test]
    fn threads_give_the_same_results() {
        let a = Tensor::sample(DType::F64, &[200_000], 3);
        let mut one = Tensor::zeros(DType::I32, &[200_000]);
        let mut par = Tensor::zeros(DType::I32, &[200_000]);
        cast(&CpuContext::SINGLE, a.view(), one.view_mut()).unwrap();
        cast(&CpuContext { threads: 3 }, a.view(), par.view_mut()).unwrap();
        assert_eq!(one.data, par.data);
    }
}
