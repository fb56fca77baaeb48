//! f16 and bf16: computed in f32, each result rounded once to the dtype.
//!
//! A kernel given a tensor of a half dtype validates it as it does any other (byte lengths,
//! dtype agreement, shapes), then hands it here: [`via_f32`] widens the half inputs to f32
//! (exactly: f32 holds every f16 and bf16 value), runs the kernel's f32 path, and rounds the
//! f32 result to the output's dtype (to nearest, ties to even). For Add, Sub, Mul, Div and Sqrt
//! this is the correctly rounded result (f32 has more than twice the precision of either
//! format, plus two bits), as with native half arithmetic; sums, products and means accumulate
//! in f32, as BLAS libraries and PyTorch's CPU kernels do. The widening and rounding loops are
//! the `half` crate's slice conversions, which use the CPU's conversion instructions (F16C)
//! where it has them.

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use half::{bf16, f16};

use crate::error::Result;
use crate::tensor::DType;

use super::common::{par_chunks, parts_for, typed, with_mut, PAR_CHUNK};
use super::{CpuContext, View, ViewMut};

/// Runs `f` on f32 copies of `inputs` (those of a half dtype; the others as they are) and,
/// when `out` is of a half dtype, an f32 output that is then rounded into `out`. The caller has
/// validated the views: their byte lengths match their shapes.
pub(crate) fn via_f32(
    ctx: &CpuContext,
    inputs: &[View<'_>],
    out: ViewMut<'_>,
    f: impl FnOnce(&[View<'_>], ViewMut<'_>) -> Result<()>,
) -> Result<()> {
    let wide: Vec<Option<Vec<u8>>> = inputs
        .iter()
        .map(|v| v.dtype.is_half().then(|| widen(ctx, v)))
        .collect();
    let views: Vec<View<'_>> = inputs
        .iter()
        .zip(&wide)
        .map(|(v, w)| match w {
            Some(bytes) => View {
                data: bytes,
                dtype: DType::F32,
                shape: v.shape,
            },
            None => *v,
        })
        .collect();
    if !out.dtype.is_half() {
        return f(&views, out);
    }
    let mut result = vec![0u8; out.data.len() * 2];
    f(
        &views,
        ViewMut {
            data: &mut result,
            dtype: DType::F32,
            shape: out.shape,
        },
    )?;
    narrow(ctx, &result, out);
    Ok(())
}

/// The f32 values of `v` (a half dtype), as bytes.
pub(crate) fn widen(ctx: &CpuContext, v: &View<'_>) -> Vec<u8> {
    let n = v.data.len() / 2;
    let mut wide = vec![0u8; n * 4];
    let parts = parts_for(ctx, n, PAR_CHUNK);
    let bits = typed::<u16>(v.data);
    with_mut::<f32, _>(&mut wide, |w| {
        par_chunks(w, parts, |start, chunk| {
            let src = &bits[start..start + chunk.len()];
            match v.dtype {
                DType::BF16 => src.reinterpret_cast::<bf16>().convert_to_f32_slice(chunk),
                _ => src.reinterpret_cast::<f16>().convert_to_f32_slice(chunk),
            }
        })
    });
    wide
}

/// Rounds the f32 values in `wide` (as bytes) into `out` (a half dtype).
pub(crate) fn narrow(ctx: &CpuContext, wide: &[u8], out: ViewMut<'_>) {
    let src = typed::<f32>(wide);
    let parts = parts_for(ctx, src.len(), PAR_CHUNK);
    let dtype = out.dtype;
    with_mut::<u16, _>(out.data, |o| {
        par_chunks(o, parts, |start, chunk| {
            let src = &src[start..start + chunk.len()];
            match dtype {
                DType::BF16 => chunk
                    .reinterpret_cast_mut::<bf16>()
                    .convert_from_f32_slice(src),
                _ => chunk
                    .reinterpret_cast_mut::<f16>()
                    .convert_from_f32_slice(src),
            }
        })
    });
}

/// Rounds the f64 values in `wide` (as bytes) into `out` (a half dtype), once (not through
/// f32, which would round twice).
pub(crate) fn narrow_f64(ctx: &CpuContext, wide: &[u8], out: ViewMut<'_>) {
    let src = typed::<f64>(wide);
    let parts = parts_for(ctx, src.len(), PAR_CHUNK);
    let dtype = out.dtype;
    with_mut::<u16, _>(out.data, |o| {
        par_chunks(o, parts, |start, chunk| {
            let src = &src[start..start + chunk.len()];
            match dtype {
                DType::BF16 => chunk
                    .reinterpret_cast_mut::<bf16>()
                    .convert_from_f64_slice(src),
                _ => chunk
                    .reinterpret_cast_mut::<f16>()
                    .convert_from_f64_slice(src),
            }
        })
    });
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

    #[test]
    fn binary_ops_round_the_exact_result_once() {
        let ops = [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Maximum,
            BinaryOp::Minimum,
        ];
        for dt in HALVES {
            let (a, b) = (
                Tensor::sample(dt, &[3, 5], 1),
                Tensor::positive(dt, &[5], 2),
            );
            for op in ops {
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
        let ops = [
            UnaryOp::Neg,
            UnaryOp::Abs,
            UnaryOp::Exp,
            UnaryOp::Log,
            UnaryOp::Tanh,
            UnaryOp::Sqrt,
            UnaryOp::Rsqrt,
            UnaryOp::Sigmoid,
        ];
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
        let values = [
            0.1,
            -2.5,
            65504.0,
            70000.0,
            1e-8,
            f64::INFINITY,
            f64::NAN,
            3.0e38,
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
        // f16 overflows past 65504 (70000 is infinite), bf16 keeps f32's range.
        let mut h = Tensor::zeros(DType::F16, &[values.len()]);
        cast(&C, src.view(), h.view_mut()).unwrap();
        assert_eq!(h.get(3), f64::INFINITY);
        let mut b = Tensor::zeros(DType::BF16, &[values.len()]);
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
        assert!(e.message.contains("holds 8 bytes, but 6 were given"), "{e}");
        let mut wrong_out = Tensor::zeros(DType::BF16, &[4]);
        let e = matmul(&C, a.view(), a.view(), false, false, wrong_out.view_mut()).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
    }
}
