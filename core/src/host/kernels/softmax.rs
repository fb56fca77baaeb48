//! Softmax and LogSoftmax along one axis, in one pass per row (the CPU's native kernels for
//! the composite ops, which other devices run as their decomposition into five basis ops).
//!
//! Each row is shifted by its maximum before `exp`, so no element overflows; the sum of the
//! exponentials is accumulated in f64.

use crate::error::Result;
use crate::tensor::DType;

use super::common::{check_dtype, check_len, invalid, par_rows, parts_for, typed, with_mut, Float};
use super::half_float::via_f32;
use super::isa;
use super::{CpuContext, View, ViewMut};

/// `out = softmax(a)` (or `log_softmax(a)` when `log`) along `axis` (`0 <= axis < rank`).
pub(crate) fn softmax(
    ctx: &CpuContext,
    a: View<'_>,
    axis: usize,
    log: bool,
    out: ViewMut<'_>,
) -> Result<()> {
    check_len("a", a.data.len(), a.dtype, a.shape)?;
    check_len("out", out.data.len(), out.dtype, out.shape)?;
    check_dtype("out's dtype", out.dtype, a.dtype)?;
    if a.shape != out.shape {
        return Err(invalid(format!(
            "softmax: out has shape {:?}, a has {:?}",
            out.shape, a.shape
        )));
    }
    if axis >= a.shape.len() {
        return Err(invalid(format!(
            "softmax: axis {axis} is out of range for shape {:?}",
            a.shape
        )));
    }
    let len = a.shape[axis];
    let inner: usize = a.shape[axis + 1..].iter().product();
    match a.dtype {
        DType::F16 | DType::BF16 => {
            return via_f32(ctx, &[a], out, |v, o| softmax(ctx, v[0], axis, log, o))
        }
        DType::F32 => run::<f32>(ctx, a, len, inner, log, out),
        DType::F64 => run::<f64>(ctx, a, len, inner, log, out),
        d => {
            return Err(invalid(format!(
                "softmax is defined for f32, f64, f16 and bf16, not {d}"
            )))
        }
    }
    Ok(())
}

fn run<T: Float + Into<f64> + FromF64>(
    ctx: &CpuContext,
    a: View<'_>,
    len: usize,
    inner: usize,
    log: bool,
    out: ViewMut<'_>,
) {
    let av = typed::<T>(a.data);
    let block = len * inner;
    if block == 0 {
        return;
    }
    with_mut::<T, _>(out.data, |o| {
        let parts = parts_for(ctx, o.len(), 1 << 14);
        par_rows(o, block, parts, |b0, chunk| {
            for (bi, ob) in chunk.chunks_mut(block).enumerate() {
                let ab = &av[(b0 + bi) * block..(b0 + bi + 1) * block];
                for j in 0..inner {
                    // The row's loops at the widest vectors the CPU has (exp is
                    // compute-bound).
                    isa::dispatch(
                        #[inline(always)]
                        || row::<T>(ab, ob, j, inner, len, log),
                    );
                }
            }
        });
    });
}

/// One row: elements `j, j + inner, ...` (`len` of them) of `a` into the same places of `o`.
#[inline(always)]
fn row<T: Float + Into<f64> + FromF64>(
    a: &[T],
    o: &mut [T],
    j: usize,
    inner: usize,
    len: usize,
    log: bool,
) {
    if inner == 1 {
        // Contiguous: separate loops, so that the exponentials vectorize (the f64 sum cannot).
        let (a, o) = (&a[..len], &mut o[..len]);
        let max = a.iter().fold(T::LOWEST, |m, &x| m.max(x));
        for (y, &x) in o.iter_mut().zip(a) {
            *y = x.sub(max).exp();
        }
        let sum: f64 = o.iter().map(|&e| e.into()).sum();
        if log {
            let ls = T::from_f64(sum.ln());
            for (y, &x) in o.iter_mut().zip(a) {
                *y = x.sub(max).sub(ls);
            }
        } else {
            let r = T::from_f64(1.0 / sum);
            for y in o.iter_mut() {
                *y = y.mul(r);
            }
        }
        return;
    }
    let idx = |i: usize| j + i * inner;
    let mut max = T::LOWEST;
    for i in 0..len {
        max = max.max(a[idx(i)]);
    }
    let mut sum = 0f64;
    for i in 0..len {
        let e = a[idx(i)].sub(max).exp();
        o[idx(i)] = e;
        sum += e.into();
    }
    if log {
        let ls = T::from_f64(sum.ln());
        for i in 0..len {
            o[idx(i)] = a[idx(i)].sub(max).sub(ls);
        }
    } else {
        let r = T::from_f64(1.0 / sum);
        for i in 0..len {
            o[idx(i)] = o[idx(i)].mul(r);
        }
    }
}

/// `f64 as Self`.
pub(crate) trait FromF64 {
    fn from_f64(v: f64) -> Self;
}

impl FromF64 for f32 {
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
}

impl FromF64 for f64 {
    fn from_f64(v: f64) -> f64 {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;

    fn reference(a: &Tensor, axis: usize, log: bool) -> Vec<f64> {
        let s = &a.shape;
        let len = s[axis];
        let inner: usize = s[axis + 1..].iter().product();
        let outer: usize = s[..axis].iter().product();
        let mut v = vec![0.0; a.len()];
        for o in 0..outer {
            for j in 0..inner {
                let at = |i: usize| o * len * inner + i * inner + j;
                let max = (0..len).map(|i| a.get(at(i))).fold(f64::MIN, f64::max);
                let sum: f64 = (0..len).map(|i| (a.get(at(i)) - max).exp()).sum();
                for i in 0..len {
                    let x = a.get(at(i)) - max;
                    v[at(i)] = if log { x - sum.ln() } else { x.exp() / sum };
                }
            }
        }
        v
    }

    #[test]
    fn softmax_and_log_softmax_along_each_axis() {
        for dt in [DType::F32, DType::F64] {
            for shape in [vec![5], vec![4, 10], vec![3, 4, 5], vec![2, 0, 3]] {
                for axis in 0..shape.len() {
                    for log in [false, true] {
                        for ctx in [CpuContext::SINGLE, CpuContext { threads: 2 }] {
                            let mut a = Tensor::sample(dt, &shape, 7);
                            // Large values: the shift by the maximum keeps exp finite.
                            if a.len() > 0 {
                                a.set(0, 500.0);
                            }
                            let mut out = Tensor::zeros(dt, &shape);
                            softmax(&ctx, a.view(), axis, log, out.view_mut()).unwrap();
                            let what = format!("softmax {dt} {shape:?} axis {axis} log {log}");
                            assert_close_tol(&out, &reference(&a, axis, log), &what, 8.0);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bad_arguments() {
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let mut out = Tensor::zeros(DType::F32, &[2, 3]);
        assert!(softmax(&CpuContext::SINGLE, a.view(), 2, false, out.view_mut()).is_err());
        let i = Tensor::zeros(DType::I32, &[2, 3]);
        let mut oi = Tensor::zeros(DType::I32, &[2, 3]);
        assert!(softmax(&CpuContext::SINGLE, i.view(), 0, false, oi.view_mut()).is_err());
        let mut wrong = Tensor::zeros(DType::F32, &[3, 2]);
        assert!(softmax(&CpuContext::SINGLE, a.view(), 0, false, wrong.view_mut()).is_err());
    }
}
