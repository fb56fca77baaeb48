//! Batched matrix multiplication.
//!
//! f32 and f64 go through the `gemm` crate (runtime CPU detection: AVX2/FMA, AVX-512), which
//! takes transposes as strides, so no operand is copied; tiny products use a plain loop,
//! cheaper than gemm's set-up. Integers use a cache-blocked `i-p-j` loop that wraps.

use std::borrow::Cow;

use gemm::Parallelism;

use crate::error::Result;
use crate::tensor::DType;

use super::common::{check_dtype, check_len, invalid, par_rows, typed, with_mut, Num};
use super::walk::Walk;
use super::{CpuContext, View, ViewMut};

/// Products with at most this many multiply-adds use the plain loop, not gemm.
const TINY: usize = 4096;
/// Multiply-adds of one product above which gemm splits it across threads.
const PAR_FLOPS: usize = 1 << 18;

/// One matrix product's geometry: `[m, k] x [k, n]`, each operand maybe stored transposed.
#[derive(Clone, Copy, Debug)]
struct Geom {
    m: usize,
    n: usize,
    k: usize,
    ta: bool,
    tb: bool,
}

impl Geom {
    /// Element `(i, p)` of a is at `i * a_rs + p * a_cs`.
    fn a_strides(&self) -> (usize, usize) {
        if self.ta {
            (1, self.m)
        } else {
            (self.k, 1)
        }
    }
    /// Element `(p, j)` of b is at `p * b_rs + j * b_cs`.
    fn b_strides(&self) -> (usize, usize) {
        if self.tb {
            (1, self.k)
        } else {
            (self.n, 1)
        }
    }
}

pub(crate) fn matmul(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    ta: bool,
    tb: bool,
    out: ViewMut<'_>,
) -> Result<()> {
    check_len("a", a.data.len(), a.dtype, a.shape)?;
    check_len("b", b.data.len(), b.dtype, b.shape)?;
    check_len("out", out.data.len(), out.dtype, out.shape)?;
    check_dtype("b's dtype", b.dtype, a.dtype)?;
    check_dtype("out's dtype", out.dtype, a.dtype)?;
    let (ra, rb, ro) = (a.shape.len(), b.shape.len(), out.shape.len());
    if ra < 2 || rb < 2 || ro < 2 {
        return Err(invalid(format!(
            "matmul needs a, b and out of rank >= 2; their shapes are {:?}, {:?} and {:?}",
            a.shape, b.shape, out.shape
        )));
    }
    let (m, k) = if ta {
        (a.shape[ra - 1], a.shape[ra - 2])
    } else {
        (a.shape[ra - 2], a.shape[ra - 1])
    };
    let (k2, n) = if tb {
        (b.shape[rb - 1], b.shape[rb - 2])
    } else {
        (b.shape[rb - 2], b.shape[rb - 1])
    };
    if k != k2 {
        return Err(invalid(format!(
            "matmul of a {:?}{} and b {:?}{}: the inner dimensions {k} and {k2} differ",
            a.shape,
            if ta { " (transposed)" } else { "" },
            b.shape,
            if tb { " (transposed)" } else { "" },
        )));
    }
    if out.shape[ro - 2..] != [m, n] {
        return Err(invalid(format!(
            "out has shape {:?}, but its last two dimensions must be [{m}, {n}]",
            out.shape
        )));
    }
    let batch = &out.shape[..ro - 2];
    let w = Walk::<2>::broadcast(
        batch,
        [&a.shape[..ra - 2], &b.shape[..rb - 2]],
        ["a's batch dimensions", "b's batch dimensions"],
        true,
    )?;
    let nb: usize = batch.iter().product();
    if nb == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        out.data.fill(0);
        return Ok(());
    }
    // Matrix index pairs (a, b) of each output matrix.
    let mut pairs = Vec::with_capacity(nb);
    let (sa, sb) = (w.inner_stride(0), w.inner_stride(1));
    w.for_each_run(0, nb, |[x, y], _, len| {
        pairs.extend((0..len).map(|i| (x + i * sa, y + i * sb)));
    });
    let g = Geom { m, n, k, ta, tb };
    // A shared b and a batch of whole a's: one product of [nb * m, k] x [k, n].
    let a_batch: usize = a.shape[..ra - 2].iter().product();
    let b_batch: usize = b.shape[..rb - 2].iter().product();
    let fold = !ta && nb > 1 && a_batch == nb && b_batch == 1;
    match a.dtype {
        DType::F32 => float_matmul::<f32>(ctx, a, b, out, g, &pairs, fold),
        DType::F64 => float_matmul::<f64>(ctx, a, b, out, g, &pairs, fold),
        DType::I32 => int_matmul::<i32>(ctx, a, b, out, g, &pairs),
        DType::I64 => int_matmul::<i64>(ctx, a, b, out, g, &pairs),
        DType::U8 => int_matmul::<u8>(ctx, a, b, out, g, &pairs),
        DType::Bool => return Err(invalid("matmul is not defined for bool")),
    }
    Ok(())
}

fn float_matmul<T: Num>(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
    g: Geom,
    pairs: &[(usize, usize)],
    fold: bool,
) {
    let (av, bv) = (typed::<T>(a.data), typed::<T>(b.data));
    let (sa, sb, so) = (g.m * g.k, g.k * g.n, g.m * g.n);
    let threads = ctx.threads.max(1);
    let flops = so.saturating_mul(g.k);
    with_mut::<T, _>(out.data, |o| {
        if fold {
            let gf = Geom {
                m: g.m * pairs.len(),
                ..g
            };
            let work = flops.saturating_mul(pairs.len());
            let par = if threads > 1 && work >= PAR_FLOPS {
                Parallelism::Rayon(threads)
            } else {
                Parallelism::None
            };
            product(gf, &av, &bv[..sb], o, par);
            return;
        }
        if pairs.len() == 1 || flops >= PAR_FLOPS {
            // Few or large products: one after another, each split across threads.
            let par = if threads > 1 && flops >= PAR_FLOPS {
                Parallelism::Rayon(threads)
            } else {
                Parallelism::None
            };
            for (oc, &(ia, ib)) in o.chunks_mut(so).zip(pairs) {
                let (am, bm) = (&av[ia * sa..(ia + 1) * sa], &bv[ib * sb..(ib + 1) * sb]);
                product(g, am, bm, oc, par);
            }
            return;
        }
        // Many small products: whole products per thread.
        let work = flops.saturating_mul(pairs.len());
        let parts = if threads > 1 && work >= PAR_FLOPS {
            threads
        } else {
            1
        };
        par_rows(o, so, parts, |i0, chunk| {
            for (i, oc) in chunk.chunks_mut(so).enumerate() {
                let (ia, ib) = pairs[i0 + i];
                let (am, bm) = (&av[ia * sa..(ia + 1) * sa], &bv[ib * sb..(ib + 1) * sb]);
                product(g, am, bm, oc, Parallelism::None);
            }
        });
    });
}

/// `out = a x b` for one product of floats (`a`, `b`, `out` are exactly its matrices).
fn product<T: Num>(g: Geom, a: &[T], b: &[T], out: &mut [T], par: Parallelism) {
    let Geom { m, n, k, .. } = g;
    if m.saturating_mul(n).saturating_mul(k) <= TINY {
        plain(g, a, b, out);
        return;
    }
    let (a_rs, a_cs) = g.a_strides();
    let (b_rs, b_cs) = g.b_strides();
    let ok = a.len() >= m * k && b.len() >= k * n && out.len() >= m * n;
    if !ok {
        // Unreachable: the caller slices exact matrices. Refuse rather than pass bad extents.
        debug_assert!(ok, "matmul extents");
        return;
    }
    // SAFETY: `a`, `b` and `out` hold the m*k, k*n and m*n elements the strides address
    // (the largest offset of a is (m-1)*a_rs + (k-1)*a_cs < m*k, likewise for b and out);
    // `out` is a unique borrow, so it aliases neither input. With `read_dst` false gemm
    // writes every element of `out` without reading it. T is f32 or f64, which gemm supports.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            par,
        );
    }
}

/// The plain triple loop, `i-p-j` order (any element type; for tiny products).
fn plain<T: Num>(g: Geom, a: &[T], b: &[T], out: &mut [T]) {
    let Geom { n, k, .. } = g;
    let (a_rs, a_cs) = g.a_strides();
    let (b_rs, b_cs) = g.b_strides();
    for (i, row) in out.chunks_mut(n).enumerate() {
        row.fill(T::ZERO);
        for p in 0..k {
            let x = a[i * a_rs + p * a_cs];
            let br = p * b_rs;
            for (j, y) in row.iter_mut().enumerate() {
                *y = y.add(x.mul(b[br + j * b_cs]));
            }
        }
    }
}

fn int_matmul<T: Num>(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
    g: Geom,
    pairs: &[(usize, usize)],
) {
    let Geom { m, n, k, .. } = g;
    let av = typed::<T>(a.data);
    // b in [k, n] layout, so that the inner loop runs along its rows.
    let bv: Cow<'_, [T]> = if g.tb {
        let src = typed::<T>(b.data);
        let mut t = vec![T::ZERO; src.len()];
        for (bt, bs) in t.chunks_mut(k * n).zip(src.chunks(k * n)) {
            for j in 0..n {
                for p in 0..k {
                    bt[p * n + j] = bs[j * k + p];
                }
            }
        }
        Cow::Owned(t)
    } else {
        typed::<T>(b.data)
    };
    let gn = Geom { tb: false, ..g };
    let (sa, sb) = (m * k, k * n);
    let work = (m * n).saturating_mul(k).saturating_mul(pairs.len());
    let parts = if ctx.threads > 1 && work >= PAR_FLOPS {
        ctx.threads
    } else {
        1
    };
    with_mut::<T, _>(out.data, |o| {
        // Rows of all the output matrices, split across threads.
        par_rows(o, n, parts, |r0, chunk| {
            let rows = chunk.len() / n;
            let mut r = r0;
            while r < r0 + rows {
                let (mat, i0) = (r / m, r % m);
                let i1 = m.min(i0 + (r0 + rows - r));
                let (ia, ib) = pairs[mat];
                let dst = &mut chunk[(r - r0) * n..(r - r0 + i1 - i0) * n];
                int_rows(
                    gn,
                    &av[ia * sa..(ia + 1) * sa],
                    &bv[ib * sb..(ib + 1) * sb],
                    i0,
                    dst,
                );
                r += i1 - i0;
            }
        });
    });
}

/// Rows `i0..` of one integer product into `out` (whole rows); b is `[k, n]`.
fn int_rows<T: Num>(g: Geom, a: &[T], b: &[T], i0: usize, out: &mut [T]) {
    let Geom { n, k, .. } = g;
    let (a_rs, a_cs) = g.a_strides();
    // Blocks of b's rows that stay in L2 while every output row passes over them.
    let kb = ((256 << 10) / (n * std::mem::size_of::<T>()).max(1)).clamp(1, k.max(1));
    out.fill(T::ZERO);
    let mut p0 = 0;
    while p0 < k {
        let p1 = (p0 + kb).min(k);
        for (di, row) in out.chunks_mut(n).enumerate() {
            let i = i0 + di;
            for p in p0..p1 {
                let x = a[i * a_rs + p * a_cs];
                let br = &b[p * n..(p + 1) * n];
                for (y, &v) in row.iter_mut().zip(br) {
                    *y = y.add(x.mul(v));
                }
            }
        }
        p0 = p1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;

    /// The reference product in f64 (floats) or wrapping i128 (integers).
    fn reference(a: &Tensor, b: &Tensor, ta: bool, tb: bool, so: &[usize]) -> Vec<f64> {
        let (ra, rb, ro) = (a.shape.len(), b.shape.len(), so.len());
        let (m, n) = (so[ro - 2], so[ro - 1]);
        let k = if ta { a.shape[ra - 2] } else { a.shape[ra - 1] };
        let batch = &so[..ro - 2];
        let nb: usize = batch.iter().product();
        let mut v = Vec::new();
        for bi in 0..nb {
            let idx = unravel(bi, batch);
            let ia = bcast_index(&idx, &a.shape[..ra - 2]);
            let ib = bcast_index(&idx, &b.shape[..rb - 2]);
            for i in 0..m {
                for j in 0..n {
                    let mut sf = 0.0f64;
                    let mut si = 0i128;
                    for p in 0..k {
                        let ae = ia * m * k + if ta { p * m + i } else { i * k + p };
                        let be = ib * k * n + if tb { j * k + p } else { p * n + j };
                        sf += a.get(ae) * b.get(be);
                        si = wrap(a.dtype, si + a.get_i128(ae) * b.get_i128(be));
                    }
                    v.push(if a.dtype.is_float() { sf } else { si as f64 });
                }
            }
        }
        v
    }

    fn stored(shape: &[usize], t: bool) -> Vec<usize> {
        let mut s = shape.to_vec();
        if t {
            let r = s.len();
            s.swap(r - 1, r - 2);
        }
        s
    }

    fn check(dt: DType, sa: &[usize], sb: &[usize], ta: bool, tb: bool, ctx: &CpuContext) {
        let (sa, sb) = (stored(sa, ta), stored(sb, tb));
        let a = Tensor::sample(dt, &sa, 1);
        let b = Tensor::sample(dt, &sb, 2);
        let (ra, rb) = (sa.len(), sb.len());
        let m = if ta { sa[ra - 1] } else { sa[ra - 2] };
        let n = if tb { sb[rb - 2] } else { sb[rb - 1] };
        let mut so = broadcast_shape(&sa[..ra - 2], &sb[..rb - 2]);
        so.extend([m, n]);
        let mut out = Tensor::zeros(dt, &so);
        matmul(ctx, a.view(), b.view(), ta, tb, out.view_mut())
            .unwrap_or_else(|e| panic!("{dt} {sa:?} {sb:?} {ta} {tb}: {e}"));
        let want = reference(&a, &b, ta, tb, &so);
        let k = if ta { sa[ra - 2] } else { sa[ra - 1] };
        let what = format!("matmul {dt} {sa:?} {sb:?} ta {ta} tb {tb}");
        assert_close_tol(&out, &want, &what, 4.0 * (1.0 + k as f64));
    }

    #[test]
    fn shapes_transposes_and_dtypes() {
        // (a as [.., m, k], b as [.., k, n]) before any transpose.
        let cases: [(&[usize], &[usize]); 12] = [
            (&[1, 1], &[1, 1]),
            (&[2, 3], &[3, 4]),
            (&[5, 1], &[1, 7]),
            (&[1, 9], &[9, 1]),
            (&[17, 33], &[33, 20]),
            (&[40, 70], &[70, 30]),
            (&[3, 4, 5], &[3, 5, 6]),
            (&[3, 4, 5], &[5, 6]),
            (&[4, 5], &[2, 5, 6]),
            (&[2, 1, 20, 30], &[3, 30, 25]),
            (&[3, 0, 5], &[5, 4]),
            (&[0, 4, 5], &[5, 4]),
        ];
        for dt in [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8] {
            for (sa, sb) in cases {
                for ta in [false, true] {
                    for tb in [false, true] {
                        check(dt, sa, sb, ta, tb, &CpuContext::SINGLE);
                    }
                }
            }
        }
    }

    #[test]
    fn zero_inner_dimension_gives_zeros() {
        let a = Tensor::zeros(DType::F32, &[3, 0]);
        let b = Tensor::zeros(DType::F32, &[0, 2]);
        let mut out = Tensor::from_f32(&[3, 2], &[1.0; 6]);
        matmul(
            &CpuContext::SINGLE,
            a.view(),
            b.view(),
            false,
            false,
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_f64(), [0.0; 6]);
    }

    #[test]
    fn large_products_through_gemm() {
        // Above the tiny threshold and the parallel threshold; folded and batched paths.
        let combos = [(false, false), (true, false), (false, true), (true, true)];
        for (ctx, combos) in [
            (CpuContext::SINGLE, &combos[..]),
            (CpuContext { threads: 3 }, &combos[..1]),
        ] {
            for &(ta, tb) in combos {
                check(DType::F32, &[70, 90], &[90, 65], ta, tb, &ctx);
                check(DType::F64, &[3, 20, 30], &[30, 10], ta, tb, &ctx);
                check(DType::F32, &[2, 70, 64], &[2, 64, 70], ta, tb, &ctx);
                check(DType::I32, &[2, 70, 64], &[64, 70], ta, tb, &ctx);
            }
        }
    }

    #[test]
    fn threads_give_the_same_results() {
        for dt in [DType::F32, DType::I64] {
            for (sa, sb) in [
                (vec![130, 120], vec![120, 110]),
                (vec![50, 20, 30], vec![30, 20]),
            ] {
                let a = Tensor::sample(dt, &sa, 1);
                let b = Tensor::sample(dt, &sb, 2);
                let mut so = broadcast_shape(&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
                so.extend([sa[sa.len() - 2], sb[sb.len() - 1]]);
                let mut one = Tensor::zeros(dt, &so);
                let mut par = Tensor::zeros(dt, &so);
                matmul(
                    &CpuContext::SINGLE,
                    a.view(),
                    b.view(),
                    false,
                    false,
                    one.view_mut(),
                )
                .unwrap();
                matmul(
                    &CpuContext { threads: 4 },
                    a.view(),
                    b.view(),
                    false,
                    false,
                    par.view_mut(),
                )
                .unwrap();
                assert_eq!(one.data, par.data, "{dt} {sa:?} {sb:?}");
            }
        }
    }

    #[test]
    fn bad_arguments() {
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let b = Tensor::zeros(DType::F32, &[4, 5]);
        let mut out = Tensor::zeros(DType::F32, &[2, 5]);
        let e = matmul(
            &CpuContext::SINGLE,
            a.view(),
            b.view(),
            false,
            false,
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("inner dimensions 3 and 4"), "{e}");
        let b = Tensor::zeros(DType::F32, &[3, 5]);
        let mut wrong = Tensor::zeros(DType::F32, &[5, 2]);
        let e = matmul(
            &CpuContext::SINGLE,
            a.view(),
            b.view(),
            false,
            false,
            wrong.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("[2, 5]"), "{e}");
        let v = Tensor::zeros(DType::F32, &[3]);
        let e = matmul(
            &CpuContext::SINGLE,
            a.view(),
            v.view(),
            false,
            false,
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("rank >= 2"), "{e}");
        let b3 = Tensor::zeros(DType::F32, &[2, 3, 5]);
        let a3 = Tensor::zeros(DType::F32, &[3, 2, 3]);
        let mut o3 = Tensor::zeros(DType::F32, &[3, 2, 5]);
        let e = matmul(
            &CpuContext::SINGLE,
            a3.view(),
            b3.view(),
            false,
            false,
            o3.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("batch"), "{e}");
        let bi = Tensor::zeros(DType::F64, &[3, 5]);
        let e = matmul(
            &CpuContext::SINGLE,
            a.view(),
            bi.view(),
            false,
            false,
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("b's dtype is f64"), "{e}");
        let ab = Tensor::zeros(DType::Bool, &[2, 3]);
        let bb = Tensor::zeros(DType::Bool, &[3, 5]);
        let mut ob = Tensor::zeros(DType::Bool, &[2, 5]);
        let e = matmul(
            &CpuContext::SINGLE,
            ab.view(),
            bb.view(),
            false,
            false,
            ob.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("bool"), "{e}");
    }
}
