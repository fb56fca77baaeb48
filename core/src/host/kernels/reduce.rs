//! Reductions (Sum, Max, Min, Mean) over any set of axes.
//!
//! The input's dimensions are merged into alternating groups of kept and reduced dimensions.
//! Each pass reduces the last reduced group, seen as `[outer, reduced, inner]`: a row reduction
//! when `inner` is 1 (pairwise over the contiguous row, 16 lanes at the leaves), otherwise a
//! column reduction (pairwise over the rows, each step a vectorized add of whole rows). A
//! pattern with several reduced groups takes several passes. Float sums are thus pairwise
//! throughout (error growing like log n, not n), and the split points never depend on the
//! thread count, so neither do the results.

use crate::error::Result;
use crate::tensor::DType;

use super::common::{
    check_dtype, check_len, invalid, num_dispatch, par_chunks, par_rows, parts_for, typed,
    with_mut, Num, Pod, MAX_RANK, PAR_CHUNK,
};
use super::half_float::via_f32;
use super::{CpuContext, ReduceOp, View, ViewMut};

pub(crate) fn reduce(
    ctx: &CpuContext,
    op: ReduceOp,
    a: View<'_>,
    axes: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    check_len("a", a.data.len(), a.dtype, a.shape)?;
    let n_out = check_len("out", out.data.len(), out.dtype, out.shape)?;
    check_dtype("out's dtype", out.dtype, a.dtype)?;
    let r = a.shape.len();
    let mut reduced = [false; MAX_RANK];
    for (i, &ax) in axes.iter().enumerate() {
        if ax >= r {
            return Err(invalid(format!(
                "reduction axis {ax} is out of range for a of rank {r}"
            )));
        }
        if i > 0 && ax <= axes[i - 1] {
            return Err(invalid(format!(
                "reduction axes {axes:?} must be sorted and unique"
            )));
        }
        reduced[ax] = true;
    }
    let dropped = (0..r).filter(|&d| !reduced[d]).map(|d| a.shape[d]);
    let kept_ones = (0..r).map(|d| if reduced[d] { 1 } else { a.shape[d] });
    if !out.shape.iter().copied().eq(dropped.clone()) && !out.shape.iter().copied().eq(kept_ones) {
        return Err(invalid(format!(
            "out has shape {:?}, but reducing a of shape {:?} over axes {axes:?} gives {:?} \
             (or the same with the reduced axes kept as 1)",
            out.shape,
            a.shape,
            dropped.collect::<Vec<_>>()
        )));
    }
    // Each product is part of a's checked element count (or of a shape holding a 0).
    let count: usize = (0..r)
        .filter(|&d| reduced[d])
        .map(|d| a.shape[d])
        .fold(1usize, |p, d| p.saturating_mul(d));
    let mut groups = Groups::default();
    for d in 0..r {
        groups.push(a.shape[d], reduced[d]);
    }
    if a.dtype.is_half() {
        return via_f32(ctx, &[a], out, |v, o| reduce(ctx, op, v[0], axes, o));
    }
    num_dispatch!(a.dtype, T => {
        let av = typed::<T>(a.data);
        with_mut::<T, _>(out.data, |o| reduce_t::<T>(ctx, op, &av, &groups, count, n_out, o))
    }, bool => Err(invalid(format!("{op:?} is not defined for bool"))))
}

/// Merged dimensions: (size, reduced?), adjacent groups of one kind merged, sizes of 1 dropped.
#[derive(Clone, Copy, Default, Debug)]
struct Groups {
    n: usize,
    g: [(usize, bool); MAX_RANK],
}

impl Groups {
    fn push(&mut self, size: usize, red: bool) {
        if size == 1 {
            return;
        }
        if self.n > 0 && self.g[self.n - 1].1 == red {
            self.g[self.n - 1].0 *= size;
        } else {
            self.g[self.n] = (size, red);
            self.n += 1;
        }
    }

    fn reduced_groups(&self) -> usize {
        self.g[..self.n].iter().filter(|g| g.1).count()
    }

    /// `(outer, reduced, inner)` around the last reduced group, and the groups without it.
    fn split_last(&self) -> (usize, usize, usize, Groups) {
        let j = (0..self.n).rev().find(|&j| self.g[j].1).unwrap_or(0);
        let outer = self.g[..j].iter().map(|g| g.0).product();
        let inner = self.g[j + 1..self.n].iter().map(|g| g.0).product();
        let mut rest = Groups::default();
        for (i, &(s, red)) in self.g[..self.n].iter().enumerate() {
            if i != j {
                rest.push(s, red);
            }
        }
        (outer, self.g[j].0, inner, rest)
    }
}

fn reduce_t<T: Num>(
    ctx: &CpuContext,
    op: ReduceOp,
    a: &[T],
    groups: &Groups,
    count: usize,
    n_out: usize,
    out: &mut [T],
) -> Result<()> {
    if n_out == 0 {
        return Ok(());
    }
    if count == 0 {
        let v = match op {
            ReduceOp::Sum => T::ZERO,
            ReduceOp::Mean if T::IS_FLOAT => T::ZERO.div(T::ZERO),
            _ => {
                return Err(invalid(format!(
                    "{op:?} of an empty set of {} elements is undefined",
                    if T::IS_FLOAT { "float" } else { "integer" }
                )))
            }
        };
        out.fill(v);
        return Ok(());
    }
    if groups.reduced_groups() == 0 {
        // Only axes of size 1 are reduced: every op is the identity.
        out.copy_from_slice(&a[..n_out]);
        return Ok(());
    }
    let id = |x: T| x;
    match op {
        ReduceOp::Sum => run(ctx, a, groups, out, id, T::add, T::ZERO, id),
        ReduceOp::Max => run(ctx, a, groups, out, id, T::max, T::LOWEST, id),
        ReduceOp::Min => run(ctx, a, groups, out, id, T::min, T::HIGHEST, id),
        ReduceOp::Mean if T::IS_FLOAT => {
            let c = T::from_index(count);
            run(ctx, a, groups, out, id, T::add, T::ZERO, move |s: T| {
                s.div(c)
            })
        }
        ReduceOp::Mean => {
            // The exact sum (i128 holds 2^64 sums of i64s), then the truncated quotient.
            let c = count as i128;
            run(
                ctx,
                a,
                groups,
                out,
                T::to_i128,
                i128::wrapping_add,
                0i128,
                move |s: i128| T::from_i128(s / c),
            )
        }
    }
    Ok(())
}

/// Runs the passes: `load` maps inputs into the accumulator type `A`, `combine` is the
/// reduction, `store` maps the final accumulators into the output.
#[allow(clippy::too_many_arguments)]
fn run<T: Pod, A: Pod, Y: Pod>(
    ctx: &CpuContext,
    a: &[T],
    groups: &Groups,
    out: &mut [Y],
    load: impl Fn(T) -> A + Sync + Copy,
    combine: impl Fn(A, A) -> A + Sync + Copy,
    identity: A,
    store: impl Fn(A) -> Y + Sync + Copy,
) {
    let (o, r, w, mut rest) = groups.split_last();
    if rest.reduced_groups() == 0 {
        pass(ctx, a, o, r, w, load, combine, identity, store, out);
        return;
    }
    let keep = |x: A| x;
    let mut cur = vec![identity; o * w];
    pass(ctx, a, o, r, w, load, combine, identity, keep, &mut cur);
    loop {
        let (o, r, w, next) = rest.split_last();
        if next.reduced_groups() == 0 {
            pass(ctx, &cur, o, r, w, keep, combine, identity, store, out);
            return;
        }
        let mut nxt = vec![identity; o * w];
        pass(ctx, &cur, o, r, w, keep, combine, identity, keep, &mut nxt);
        cur = nxt;
        rest = next;
    }
}

/// Reduces `x`, seen as `[o, r, w]`, over its middle axis into `out` (`[o, w]`).
#[allow(clippy::too_many_arguments)]
fn pass<X: Pod, A: Pod, Y: Pod>(
    ctx: &CpuContext,
    x: &[X],
    o: usize,
    r: usize,
    w: usize,
    load: impl Fn(X) -> A + Sync + Copy,
    combine: impl Fn(A, A) -> A + Sync + Copy,
    identity: A,
    store: impl Fn(A) -> Y + Sync + Copy,
    out: &mut [Y],
) {
    let parts = parts_for(ctx, o * r * w, PAR_CHUNK);
    let out = &mut out[..o * w];
    if w == 1 {
        let row = |i: usize| &x[i * r..(i + 1) * r];
        if o >= parts {
            par_rows(out, 1, parts, |s, oc| {
                for (i, y) in oc.iter_mut().enumerate() {
                    *y = store(pairwise(row(s + i), load, combine, identity));
                }
            });
        } else {
            // Few long rows: split each row's pairwise tree across threads.
            let depth = usize::BITS - (parts - 1).leading_zeros();
            for (i, y) in out.iter_mut().enumerate() {
                *y = store(pairwise_par(row(i), depth, load, combine, identity));
            }
        }
        return;
    }
    let plane = |i: usize| &x[i * r * w..(i + 1) * r * w];
    // Rows summed in sequence at a leaf of the tree: fewer for wide rows (where the tree's
    // overhead is small), never dependent on how the columns are split.
    let leaf = (2048 / w.min(COL_BLOCK)).clamp(16, 128);
    if o >= parts {
        par_rows(out, w, parts, |s, oc| {
            for (i, oy) in oc.chunks_mut(w).enumerate() {
                columns(
                    plane(s + i),
                    w,
                    r,
                    leaf,
                    0,
                    oy,
                    load,
                    combine,
                    identity,
                    store,
                );
            }
        });
    } else {
        let parts = parts.min(w / 64).max(1);
        for (i, oy) in out.chunks_mut(w).enumerate() {
            par_chunks(oy, parts, |c0, oc| {
                columns(plane(i), w, r, leaf, c0, oc, load, combine, identity, store)
            });
        }
    }
}

/// Elements per leaf of the pairwise tree of a row.
const ROW_LEAF: usize = 256;
/// Independent accumulators at a leaf (for vectorization and instruction-level parallelism).
const LANES: usize = 16;

/// Where the pairwise tree splits a row of `n` > ROW_LEAF elements.
#[inline(always)]
fn split_point(n: usize) -> usize {
    (n / 2) / LANES * LANES
}

#[inline]
fn pairwise<X: Pod, A: Pod>(
    x: &[X],
    load: impl Fn(X) -> A + Copy,
    combine: impl Fn(A, A) -> A + Copy,
    identity: A,
) -> A {
    if x.len() <= ROW_LEAF {
        let mut acc = [identity; LANES];
        let chunks = x.chunks_exact(LANES);
        let rem = chunks.remainder();
        for c in chunks {
            for l in 0..LANES {
                acc[l] = combine(acc[l], load(c[l]));
            }
        }
        for (l, &v) in rem.iter().enumerate() {
            acc[l] = combine(acc[l], load(v));
        }
        let mut width = LANES;
        while width > 1 {
            width /= 2;
            for l in 0..width {
                acc[l] = combine(acc[l], acc[l + width]);
            }
        }
        return acc[0];
    }
    let h = split_point(x.len());
    combine(
        pairwise(&x[..h], load, combine, identity),
        pairwise(&x[h..], load, combine, identity),
    )
}

/// [`pairwise`] with the top `depth` levels of the tree run in parallel; the tree is the same.
fn pairwise_par<X: Pod, A: Pod>(
    x: &[X],
    depth: u32,
    load: impl Fn(X) -> A + Sync + Copy,
    combine: impl Fn(A, A) -> A + Sync + Copy,
    identity: A,
) -> A {
    if depth == 0 || x.len() < 2 * PAR_CHUNK {
        return pairwise(x, load, combine, identity);
    }
    let h = split_point(x.len());
    let (l, r) = rayon::join(
        || pairwise_par(&x[..h], depth - 1, load, combine, identity),
        || pairwise_par(&x[h..], depth - 1, load, combine, identity),
    );
    combine(l, r)
}

/// Columns per block of a column reduction (the block's accumulators stay in L1).
const COL_BLOCK: usize = 256;

/// `out[j] = reduce over rows i of x[i * stride + c0 + j]`, for the `out.len()` columns from
/// `c0`, over `r` rows, with leaves of `leaf` rows.
#[allow(clippy::too_many_arguments)]
fn columns<X: Pod, A: Pod, Y: Pod>(
    x: &[X],
    stride: usize,
    r: usize,
    leaf: usize,
    c0: usize,
    out: &mut [Y],
    load: impl Fn(X) -> A + Copy,
    combine: impl Fn(A, A) -> A + Copy,
    identity: A,
    store: impl Fn(A) -> Y + Copy,
) {
    let width = out.len().min(COL_BLOCK);
    if width == 0 {
        return;
    }
    let mut depth = 0;
    let mut n = r;
    while n > leaf {
        n = n.div_ceil(2);
        depth += 1;
    }
    let mut scratch = vec![identity; (depth + 1) * width];
    for (b, ob) in out.chunks_mut(COL_BLOCK).enumerate() {
        let bw = ob.len();
        let (acc, rest) = scratch.split_at_mut(width);
        let acc = &mut acc[..bw];
        let cols = Cols {
            x,
            stride,
            c0: c0 + b * COL_BLOCK,
            bw,
            leaf,
        };
        cols.rec(0, r, acc, rest, load, combine);
        for (y, &s) in ob.iter_mut().zip(acc.iter()) {
            *y = store(s);
        }
    }
}

struct Cols<'a, X> {
    x: &'a [X],
    stride: usize,
    c0: usize,
    bw: usize,
    leaf: usize,
}

impl<X: Pod> Cols<'_, X> {
    fn row(&self, i: usize) -> &[X] {
        let s = i * self.stride + self.c0;
        &self.x[s..s + self.bw]
    }

    /// `acc` = the reduction of rows `r0..r1` (non-empty); `scratch` holds a row of
    /// accumulators per remaining tree level.
    fn rec<A: Pod>(
        &self,
        r0: usize,
        r1: usize,
        acc: &mut [A],
        scratch: &mut [A],
        load: impl Fn(X) -> A + Copy,
        combine: impl Fn(A, A) -> A + Copy,
    ) {
        let n = r1 - r0;
        if n <= self.leaf {
            for (a, &v) in acc.iter_mut().zip(self.row(r0)) {
                *a = load(v);
            }
            for i in r0 + 1..r1 {
                for (a, &v) in acc.iter_mut().zip(self.row(i)) {
                    *a = combine(*a, load(v));
                }
            }
            return;
        }
        let h = n / 2;
        self.rec(r0, r0 + h, acc, scratch, load, combine);
        let (tmp, rest) = scratch.split_at_mut(self.bw);
        self.rec(r0 + h, r1, tmp, rest, load, combine);
        for (a, &t) in acc.iter_mut().zip(tmp.iter()) {
            *a = combine(*a, t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;
    use crate::error::Code;

    const NUMERIC: [DType; 5] = [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8];
    const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean];

    /// Flat positions of a's elements, grouped by the output element they reduce into.
    fn groups(a: &Tensor, axes: &[usize]) -> Vec<Vec<usize>> {
        let kept: Vec<usize> = (0..a.shape.len()).filter(|d| !axes.contains(d)).collect();
        let n_out: usize = kept.iter().map(|&d| a.shape[d]).product();
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); n_out];
        for p in 0..a.len() {
            let idx = unravel(p, &a.shape);
            let mut q = 0;
            for &d in &kept {
                q = q * a.shape[d] + idx[d];
            }
            groups[q].push(p);
        }
        groups
    }

    /// The reference: straightforward loops in f64 (floats) or i128 (integers).
    fn reference(op: ReduceOp, a: &Tensor, groups: &[Vec<usize>]) -> Vec<f64> {
        let fl = a.dtype.is_float();
        groups
            .iter()
            .map(|g| {
                let n = g.len();
                if fl {
                    let v: Vec<f64> = g.iter().map(|&p| a.get(p)).collect();
                    let r = match op {
                        ReduceOp::Sum => v.iter().sum(),
                        ReduceOp::Mean => v.iter().sum::<f64>() / n as f64,
                        ReduceOp::Max => v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                        ReduceOp::Min => v.iter().copied().fold(f64::INFINITY, f64::min),
                    };
                    round_to(a.dtype, r)
                } else {
                    let v: Vec<i128> = g.iter().map(|&p| a.get_i128(p)).collect();
                    let r = match op {
                        ReduceOp::Sum => wrap(a.dtype, v.iter().sum()),
                        ReduceOp::Mean => v.iter().sum::<i128>() / n as i128,
                        ReduceOp::Max => *v.iter().max().unwrap(),
                        ReduceOp::Min => *v.iter().min().unwrap(),
                    };
                    r as f64
                }
            })
            .collect()
    }

    fn all_axis_sets(rank: usize) -> Vec<Vec<usize>> {
        (0..1u32 << rank)
            .map(|m| (0..rank).filter(|&d| m & (1 << d) != 0).collect())
            .collect()
    }

    /// Checks every op, with and without keep_dims.
    fn check(a: &Tensor, axes: &[usize], ctx: &CpuContext) {
        let g = groups(a, axes);
        for keep in [false, true] {
            let out_shape: Vec<usize> = (0..a.shape.len())
                .filter_map(|d| {
                    if axes.contains(&d) {
                        keep.then_some(1)
                    } else {
                        Some(a.shape[d])
                    }
                })
                .collect();
            for op in OPS {
                let mut out = Tensor::zeros(a.dtype, &out_shape);
                reduce(ctx, op, a.view(), axes, out.view_mut())
                    .unwrap_or_else(|e| panic!("{op:?} {} {:?} {axes:?}: {e}", a.dtype, a.shape));
                let want = reference(op, a, &g);
                let what = format!("{op:?} {} {:?} axes {axes:?} keep {keep}", a.dtype, a.shape);
                // Sums of many terms: allow for the different (pairwise) order.
                assert_close_tol(&out, &want, &what, 4.0);
            }
        }
    }

    #[test]
    fn every_axis_set_op_and_dtype() {
        let shapes: [&[usize]; 6] = [
            &[],
            &[7],
            &[3, 5],
            &[2, 3, 4],
            &[4, 1, 3, 5],
            &[2, 3, 2, 1, 3],
        ];
        for dt in NUMERIC {
            for shape in shapes {
                let a = Tensor::sample(dt, shape, 11);
                for axes in all_axis_sets(shape.len()) {
                    check(&a, &axes, &CpuContext::SINGLE);
                }
            }
        }
    }

    #[test]
    fn long_rows_and_columns() {
        // Rows longer than a leaf, columns wider than a block, several passes.
        for dt in NUMERIC {
            for (shape, axes) in [
                (vec![3, 1000], vec![1]),
                (vec![1000, 3], vec![0]),
                (vec![700, 300], vec![0]),
                (vec![5, 200, 301], vec![1]),
                (vec![30, 7, 40, 9], vec![0, 2]),
                (vec![30, 7, 40, 9], vec![1, 3]),
                (vec![4099], vec![0]),
            ] {
                let a = Tensor::sample(dt, &shape, 5);
                check(&a, &axes, &CpuContext::SINGLE);
            }
        }
    }

    #[test]
    fn float_sums_are_pairwise() {
        // 1e7 ones in f32: a running sum would stop at 2^24.
        let n = 10_000_000;
        let a = Tensor::from_f32(&[n], &vec![1.0f32; n]);
        let mut out = Tensor::zeros(DType::F32, &[]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_f64(), [n as f64]);
        // 0.1 is inexact: the pairwise sum stays within a few ulps of the true sum.
        let a = Tensor::from_f32(&[n], &vec![0.1f32; n]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        let exact = 0.1f32 as f64 * n as f64;
        assert!(
            (out.to_f64()[0] - exact).abs() / exact < 1e-6,
            "{:?}",
            out.to_f64()
        );
        // The same along columns.
        let rows = 2_000_000;
        let a = Tensor::from_f32(&[rows, 3], &vec![0.1f32; rows * 3]);
        let mut out = Tensor::zeros(DType::F32, &[3]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        let exact = 0.1f32 as f64 * rows as f64;
        for v in out.to_f64() {
            assert!((v - exact).abs() / exact < 1e-6, "{v}");
        }
    }

    #[test]
    fn integer_sums_wrap_and_means_truncate() {
        let a = Tensor::from_u8(&[3], &[200, 100, 7]);
        let mut out = Tensor::zeros(DType::U8, &[]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [51]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Mean,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [102]);
        let a = Tensor::from_i32(&[3], &[i32::MAX, i32::MAX, -7]);
        let mut out = Tensor::zeros(DType::I32, &[]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [(i32::MAX as i64 * 2 - 7) as i32 as i64]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Mean,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [(i32::MAX as i64 * 2 - 7) / 3]);
        let a = Tensor::from_i64(&[2], &[i64::MAX, i64::MAX - 2]);
        let mut out = Tensor::zeros(DType::I64, &[]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Mean,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [i64::MAX - 1]);
        let a = Tensor::from_i32(&[2], &[-3, -4]);
        let mut out = Tensor::zeros(DType::I32, &[]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Mean,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [-3]);
    }

    #[test]
    fn nan_propagates_through_max_and_min() {
        let a = Tensor::from_f32(&[2, 3], &[1.0, f32::NAN, 3.0, 4.0, 5.0, 6.0]);
        for op in [ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum] {
            let mut out = Tensor::zeros(DType::F32, &[2]);
            reduce(&CpuContext::SINGLE, op, a.view(), &[1], out.view_mut()).unwrap();
            let v = out.to_f64();
            assert!(v[0].is_nan() && !v[1].is_nan(), "{op:?} {v:?}");
        }
    }

    #[test]
    fn empty_reductions() {
        let a = Tensor::zeros(DType::F32, &[0, 3]);
        let mut out = Tensor::zeros(DType::F32, &[3]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_f64(), [0.0; 3]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Mean,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert!(out.to_f64().iter().all(|v| v.is_nan()));
        for op in [ReduceOp::Max, ReduceOp::Min] {
            let e = reduce(&CpuContext::SINGLE, op, a.view(), &[0], out.view_mut()).unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument);
            assert!(e.message.contains("empty"), "{e}");
        }
        let a = Tensor::zeros(DType::I32, &[0]);
        let mut out = Tensor::zeros(DType::I32, &[]);
        reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [0]);
        let e = reduce(
            &CpuContext::SINGLE,
            ReduceOp::Mean,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("empty"), "{e}");
        // Nothing to compute: an empty output is fine for every op.
        let a = Tensor::zeros(DType::F64, &[3, 0]);
        let mut out = Tensor::zeros(DType::F64, &[0]);
        for op in OPS {
            reduce(&CpuContext::SINGLE, op, a.view(), &[0], out.view_mut()).unwrap();
        }
    }

    #[test]
    fn bad_arguments() {
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let mut out = Tensor::zeros(DType::F32, &[2]);
        let e = reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[2],
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("out of range"), "{e}");
        let mut out0 = Tensor::zeros(DType::F32, &[]);
        let e = reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[1, 0],
            out0.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("sorted"), "{e}");
        let e = reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[0],
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("gives [3]"), "{e}");
        let mut oi = Tensor::zeros(DType::I32, &[2]);
        let e = reduce(
            &CpuContext::SINGLE,
            ReduceOp::Sum,
            a.view(),
            &[1],
            oi.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("dtype"), "{e}");
        let b = Tensor::zeros(DType::Bool, &[2, 3]);
        let mut ob = Tensor::zeros(DType::Bool, &[2]);
        let e = reduce(
            &CpuContext::SINGLE,
            ReduceOp::Max,
            b.view(),
            &[1],
            ob.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("bool"), "{e}");
    }

    #[test]
    fn threads_give_the_same_results() {
        let many = CpuContext { threads: 4 };
        for (shape, axes) in [
            (vec![1_000_003], vec![0]),
            (vec![2, 300_001], vec![1]),
            (vec![300, 1001], vec![1]),
            (vec![1001, 300], vec![0]),
            (vec![3, 40_000, 3], vec![1]),
            (vec![2, 500, 300], vec![0, 2]),
        ] {
            for dt in [DType::F32, DType::I64] {
                let a = Tensor::sample(dt, &shape, 9);
                let out_shape: Vec<usize> = (0..shape.len())
                    .filter(|d| !axes.contains(d))
                    .map(|d| shape[d])
                    .collect();
                for op in OPS {
                    let mut one = Tensor::zeros(dt, &out_shape);
                    let mut par = Tensor::zeros(dt, &out_shape);
                    reduce(&CpuContext::SINGLE, op, a.view(), &axes, one.view_mut()).unwrap();
                    reduce(&many, op, a.view(), &axes, par.view_mut()).unwrap();
                    assert_eq!(one.data, par.data, "{op:?} {dt} {shape:?} {axes:?}");
                }
            }
        }
    }
}
