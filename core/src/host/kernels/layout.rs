//! Layout kernels: broadcast_to, transpose, concat, slice, fill, iota.
//!
//! All but iota move elements without looking at them, so they work on unsigned carriers of
//! the element's size (u8, u32, u64) and serve every dtype.

use crate::error::Result;
use crate::tensor::DType;

use super::common::{
    as_bytes, as_bytes_mut, check_dtype, check_len, invalid, num_dispatch, par_chunks, par_rows,
    parts_for, size_dispatch, typed, with_mut, Num, Pod, B8, MAX_RANK, PAR_CHUNK,
};
use super::half_float::via_f32;
use super::isa;
use super::walk::{contiguous_strides, Walk};
use super::{CpuContext, View, ViewMut};

/// Bytes moved below which a copy stays on the calling thread.
const PAR_COPY_BYTES: usize = 1 << 18;

fn copy_parts(ctx: &CpuContext, n: usize, size: usize) -> usize {
    parts_for(ctx, n.saturating_mul(size), PAR_COPY_BYTES)
}

/// `out[p] = src[base + offset of p in w]`, run by run.
fn copy_runs<T: Pod>(src: &[T], w: &Walk<1>, base: usize, out: &mut [T], parts: usize) {
    let st = w.inner_stride(0);
    par_chunks(out, parts, |s, oc| {
        w.for_each_run(s, s + oc.len(), |[x], p, len| {
            let oo = &mut oc[p - s..p - s + len];
            let x = base + x;
            match st {
                1 => oo.copy_from_slice(&src[x..x + len]),
                0 => oo.fill(src[x]),
                _ => {
                    for (i, o) in oo.iter_mut().enumerate() {
                        *o = src[x + i * st];
                    }
                }
            }
        })
    });
}

fn check_same_dtype(a: &View<'_>, out: &ViewMut<'_>) -> Result<(usize, usize)> {
    let na = check_len("a", a.data.len(), a.dtype, a.shape)?;
    let no = check_len("out", out.data.len(), out.dtype, out.shape)?;
    check_dtype("out's dtype", out.dtype, a.dtype)?;
    Ok((na, no))
}

pub(crate) fn broadcast_to(ctx: &CpuContext, a: View<'_>, out: ViewMut<'_>) -> Result<()> {
    let (_, n) = check_same_dtype(&a, &out)?;
    let w = Walk::<1>::broadcast(out.shape, [a.shape], ["a"], false)?;
    if n == 0 {
        return Ok(());
    }
    let parts = copy_parts(ctx, n, a.dtype.size());
    size_dispatch!(a.dtype.size(), T => {
        let av = typed::<T>(a.data);
        with_mut::<T, _>(out.data, |o| copy_runs(&av, &w, 0, o, parts));
    });
    Ok(())
}

pub(crate) fn transpose(
    ctx: &CpuContext,
    a: View<'_>,
    perm: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let (_, n) = check_same_dtype(&a, &out)?;
    let r = a.shape.len();
    let mut seen = [false; MAX_RANK];
    let is_perm = perm.len() == r
        && perm
            .iter()
            .all(|&p| p < r && !std::mem::replace(&mut seen[p], true));
    if !is_perm {
        return Err(invalid(format!(
            "perm {perm:?} is not a permutation of the {r} axes of a"
        )));
    }
    if out.shape.len() != r || (0..r).any(|i| out.shape[i] != a.shape[perm[i]]) {
        let want: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
        return Err(invalid(format!(
            "out has shape {:?}, but a of shape {:?} transposed by {perm:?} has shape {want:?}",
            out.shape, a.shape
        )));
    }
    if n == 0 {
        return Ok(());
    }
    let own = contiguous_strides(a.shape);
    let mut ps = [0usize; MAX_RANK];
    for i in 0..r {
        ps[i] = own[perm[i]];
    }
    let w = Walk::<1>::new(out.shape, [&ps[..r]]);
    let parts = copy_parts(ctx, n, a.dtype.size());
    size_dispatch!(a.dtype.size(), T => {
        let av = typed::<T>(a.data);
        with_mut::<T, _>(out.data, |o| {
            // The output axis that reads the input contiguously, other than the innermost.
            let q = (0..w.rank - 1).find(|&d| w.strides[0][d] == 1);
            match q {
                Some(q) if w.inner_stride(0) != 1 => tiled(&av, &w, q, o, parts),
                _ => copy_runs(&av, &w, 0, o, parts),
            }
        });
    });
    Ok(())
}

/// Side of the square tiles of a blocked transpose. Within a tile, [`tile`] moves 16 x 16
/// blocks whose every line is read and written whole, so a tile need not fit in cache; large
/// tiles keep a strip of 16 output rows written as long runs, which the hardware prefetches
/// (256 against 32: 1.3–1.6× on 2048² f32 and 1040² f64; docs/performance.md).
const TILE: usize = 256;

/// A transpose whose innermost output axis reads the input with a stride, while output axis
/// `q` reads it contiguously: square tiles over those two axes.
fn tiled<T: Pod>(src: &[T], w: &Walk<1>, q: usize, out: &mut [T], parts: usize) {
    let r = w.rank;
    let last = r - 1;
    let os = contiguous_strides(&w.shape[..r]);
    let is = &w.strides[0];
    let (nq, nl) = (w.shape[q], w.shape[last]);
    let rows0 = w.shape[0];
    par_rows(out, os[0], parts.min(rows0), |r0, chunk| {
        let r1 = r0 + chunk.len() / os[0].max(1);
        let out_base = r0 * os[0];
        // The other axes (not q, not last), walked as an odometer; axis 0 limited to r0..r1.
        let others: Vec<usize> = (0..last).filter(|&d| d != q).collect();
        let mut idx = [0usize; MAX_RANK];
        idx[0] = r0;
        let (q_lo, q_hi) = if q == 0 { (r0, r1) } else { (0, nq) };
        loop {
            let mut ib = 0;
            let mut ob = 0;
            for &d in &others {
                ib += idx[d] * is[d];
                ob += idx[d] * os[d];
            }
            let mut i0 = q_lo;
            while i0 < q_hi {
                let i1 = (i0 + TILE).min(q_hi);
                let ni = i1 - i0;
                let mut j0 = 0;
                while j0 < nl {
                    let j1 = (j0 + TILE).min(nl);
                    let nj = j1 - j0;
                    let s = ib + i0 + j0 * is[last];
                    let o = ob + i0 * os[q] - out_base + j0;
                    tile(src, s, is[last], chunk, o, os[q], ni, nj);
                    j0 = j1;
                }
                i0 = i1;
            }
            // Next combination of the other axes.
            let mut k = others.len();
            loop {
                if k == 0 {
                    return;
                }
                k -= 1;
                let d = others[k];
                idx[d] += 1;
                let hi = if d == 0 { r1 } else { w.shape[d] };
                if idx[d] < hi {
                    break;
                }
                idx[d] = if d == 0 { r0 } else { 0 };
            }
        }
    });
}

/// Side of the blocks [`tile`] transposes whole: a cache line of f32 per row.
const SUB: usize = isa::BLOCK;

/// `dst[d0 + i * ds + j] = src[s0 + i + j * ss]` for `i < ni`, `j < nj`: one tile of a
/// transpose, in SUB x SUB blocks (every line is read and written in full while it is in
/// cache), the edges element by element. Blocks of 4- and 8-byte elements are transposed in
/// AVX2 registers where the CPU has it ([`isa::transpose_block`]: about twice
/// the portable block's speed, which the compiler does not vectorize); the portable block reads
/// SUB whole rows into a local block and writes SUB whole rows.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tile<T: Pod>(
    src: &[T],
    s0: usize,
    ss: usize,
    dst: &mut [T],
    d0: usize,
    ds: usize,
    ni: usize,
    nj: usize,
) {
    let (fi, fj) = (ni / SUB * SUB, nj / SUB * SUB);
    for i in (0..fi).step_by(SUB) {
        for j in (0..fj).step_by(SUB) {
            let (s, d) = (s0 + i + j * ss, d0 + i * ds + j);
            if isa::transpose_block(
                size_of::<T>(),
                as_bytes(src),
                s,
                ss,
                as_bytes_mut(dst),
                d,
                ds,
            ) {
                continue;
            }
            let mut t = [[T::default(); SUB]; SUB];
            for (jj, row) in t.iter_mut().enumerate() {
                let s = s0 + i + (j + jj) * ss;
                row.copy_from_slice(&src[s..s + SUB]);
            }
            for ii in 0..SUB {
                let d = d0 + (i + ii) * ds + j;
                let out: &mut [T; SUB] = (&mut dst[d..d + SUB]).try_into().expect("SUB");
                for jj in 0..SUB {
                    out[jj] = t[jj][ii];
                }
            }
        }
    }
    // The edges: the last nj % SUB columns of every row, the last ni % SUB rows.
    for i in 0..ni {
        let from = if i < fi { fj } else { 0 };
        for j in from..nj {
            dst[d0 + i * ds + j] = src[s0 + i + j * ss];
        }
    }
}

pub(crate) fn concat(
    ctx: &CpuContext,
    inputs: &[View<'_>],
    axis: usize,
    out: ViewMut<'_>,
) -> Result<()> {
    let n = check_len("out", out.data.len(), out.dtype, out.shape)?;
    let r = out.shape.len();
    if axis >= r {
        return Err(invalid(format!(
            "concat axis {axis} is out of range for out of rank {r}"
        )));
    }
    if inputs.is_empty() {
        return Err(invalid("concat needs at least one input"));
    }
    let mut total = 0usize;
    for (i, x) in inputs.iter().enumerate() {
        let what = format!("inputs[{i}]");
        check_len(&what, x.data.len(), x.dtype, x.shape)?;
        check_dtype(&format!("{what}'s dtype"), x.dtype, out.dtype)?;
        if x.shape.len() != r || (0..r).any(|d| d != axis && x.shape[d] != out.shape[d]) {
            return Err(invalid(format!(
                "{what} has shape {:?}, which does not match out's shape {:?} except along axis \
                 {axis}",
                x.shape, out.shape
            )));
        }
        total = total.saturating_add(x.shape[axis]);
    }
    if total != out.shape[axis] {
        return Err(invalid(format!(
            "the inputs' sizes along axis {axis} add up to {total}, but out's is {}",
            out.shape[axis]
        )));
    }
    if n == 0 {
        return Ok(());
    }
    let size = out.dtype.size();
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product::<usize>() * size;
    let out_row = out.shape[axis] * inner;
    let parts = copy_parts(ctx, n, size);
    if outer == 1 {
        let mut rest = &mut *out.data;
        for x in inputs {
            let (dst, tail) = std::mem::take(&mut rest).split_at_mut(x.data.len());
            par_chunks(dst, parts, |s, c| {
                c.copy_from_slice(&x.data[s..s + c.len()])
            });
            rest = tail;
        }
        return Ok(());
    }
    par_rows(out.data, out_row, parts, |o0, chunk| {
        for (k, row) in chunk.chunks_mut(out_row).enumerate() {
            let o = o0 + k;
            let mut off = 0;
            for x in inputs {
                let len = x.shape[axis] * inner;
                row[off..off + len].copy_from_slice(&x.data[o * len..(o + 1) * len]);
                off += len;
            }
        }
    });
    Ok(())
}

pub(crate) fn slice(
    ctx: &CpuContext,
    a: View<'_>,
    starts: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    let (_, n) = check_same_dtype(&a, &out)?;
    let r = a.shape.len();
    if out.shape.len() != r || starts.len() != r {
        return Err(invalid(format!(
            "slice of a of rank {r} needs {r} starts and an out of rank {r}; got {} starts and \
             out of shape {:?}",
            starts.len(),
            out.shape
        )));
    }
    for d in 0..r {
        if !matches!(starts[d].checked_add(out.shape[d]), Some(e) if e <= a.shape[d]) {
            return Err(invalid(format!(
                "slice [{}, {}+{}) is out of bounds along axis {d} of a of shape {:?}",
                starts[d], starts[d], out.shape[d], a.shape
            )));
        }
    }
    if n == 0 {
        return Ok(());
    }
    let strides = contiguous_strides(a.shape);
    let base: usize = (0..r).map(|d| starts[d] * strides[d]).sum();
    let w = Walk::<1>::new(out.shape, [&strides[..r]]);
    let parts = copy_parts(ctx, n, a.dtype.size());
    size_dispatch!(a.dtype.size(), T => {
        let av = typed::<T>(a.data);
        with_mut::<T, _>(out.data, |o| copy_runs(&av, &w, base, o, parts));
    });
    Ok(())
}

pub(crate) fn fill(ctx: &CpuContext, value: View<'_>, out: ViewMut<'_>) -> Result<()> {
    let nv = check_len("value", value.data.len(), value.dtype, value.shape)?;
    let n = check_len("out", out.data.len(), out.dtype, out.shape)?;
    check_dtype("value's dtype", value.dtype, out.dtype)?;
    if nv != 1 {
        return Err(invalid(format!(
            "value must hold one element, but its shape is {:?}",
            value.shape
        )));
    }
    let parts = copy_parts(ctx, n, out.dtype.size());
    if out.dtype == DType::Bool {
        let v = B8::new(value.data[0] != 0).0;
        par_chunks(out.data, parts, |_, c| c.fill(v));
        return Ok(());
    }
    size_dispatch!(out.dtype.size(), T => {
        let v = typed::<T>(value.data)[0];
        with_mut::<T, _>(out.data, |o| par_chunks(o, parts, |_, c| c.fill(v)));
    });
    Ok(())
}

pub(crate) fn iota(ctx: &CpuContext, axis: usize, out: ViewMut<'_>) -> Result<()> {
    let n = check_len("out", out.data.len(), out.dtype, out.shape)?;
    let r = out.shape.len();
    if axis >= r {
        return Err(invalid(format!(
            "iota axis {axis} is out of range for out of rank {r}"
        )));
    }
    if n == 0 {
        return Ok(());
    }
    let len = out.shape[axis];
    let inner: usize = out.shape[axis + 1..].iter().product();
    let parts = parts_for(ctx, n, PAR_CHUNK);
    if out.dtype.is_half() {
        return via_f32(ctx, &[], out, |_, o| iota(ctx, axis, o));
    }
    num_dispatch!(out.dtype, T => {
        with_mut::<T, _>(out.data, |o| {
            par_rows(o, inner, parts, |r0, chunk| {
                for (k, row) in chunk.chunks_mut(inner).enumerate() {
                    row.fill(T::from_index((r0 + k) % len));
                }
            })
        });
        Ok(())
    }, bool => Err(invalid("iota is not defined for bool")))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;

    #[test]
    fn broadcast_to_every_dtype() {
        let cases: [(&[usize], &[usize]); 7] = [
            (&[], &[2, 3]),
            (&[3], &[2, 3]),
            (&[2, 1], &[2, 3]),
            (&[1, 3, 1], &[2, 3, 4]),
            (&[2, 3], &[2, 3]),
            (&[1, 1], &[0, 4]),
            (&[3, 1], &[5, 3, 7]),
        ];
        for dt in DType::ALL {
            for (sa, so) in cases {
                let a = Tensor::sample(dt, sa, 1);
                let mut out = Tensor::zeros(dt, so);
                broadcast_to(&CpuContext::SINGLE, a.view(), out.view_mut())
                    .unwrap_or_else(|e| panic!("{dt} {sa:?} -> {so:?}: {e}"));
                let n: usize = so.iter().product();
                let want: Vec<f64> = (0..n)
                    .map(|p| a.get(bcast_index(&unravel(p, so), sa)))
                    .collect();
                assert_close(&out, &want, &format!("broadcast_to {dt} {sa:?} -> {so:?}"));
            }
        }
        let a = Tensor::zeros(DType::F32, &[3]);
        let mut out = Tensor::zeros(DType::F32, &[2, 4]);
        let e = broadcast_to(&CpuContext::SINGLE, a.view(), out.view_mut()).unwrap_err();
        assert!(e.message.contains("does not broadcast"), "{e}");
        let a = Tensor::zeros(DType::F32, &[1]);
        let mut out = Tensor::zeros(DType::F32, &[]);
        let e = broadcast_to(&CpuContext::SINGLE, a.view(), out.view_mut()).unwrap_err();
        assert!(e.message.contains("rank"), "{e}");
    }

    fn ref_transpose(a: &Tensor, perm: &[usize]) -> (Vec<usize>, Vec<f64>) {
        let so: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
        let n: usize = so.iter().product();
        let v = (0..n)
            .map(|p| {
                let oi = unravel(p, &so);
                let mut ai = vec![0; perm.len()];
                for (i, &pi) in perm.iter().enumerate() {
                    ai[pi] = oi[i];
                }
                a.get(bcast_index(&ai, &a.shape))
            })
            .collect();
        (so, v)
    }

    fn permutations(r: usize) -> Vec<Vec<usize>> {
        if r == 0 {
            return vec![vec![]];
        }
        let mut v = Vec::new();
        for p in permutations(r - 1) {
            for i in 0..=p.len() {
                let mut q = p.clone();
                q.insert(i, r - 1);
                v.push(q);
            }
        }
        v
    }

    #[test]
    fn transpose_every_permutation_and_dtype() {
        let shapes: [&[usize]; 7] = [
            &[],
            &[5],
            &[3, 4],
            &[40, 70],
            &[2, 3, 4],
            &[3, 1, 33, 5],
            &[2, 0, 3],
        ];
        for dt in DType::ALL {
            for shape in shapes {
                let a = Tensor::sample(dt, shape, 3);
                for perm in permutations(shape.len()) {
                    let (so, want) = ref_transpose(&a, &perm);
                    let mut out = Tensor::zeros(dt, &so);
                    transpose(&CpuContext::SINGLE, a.view(), &perm, out.view_mut()).unwrap();
                    assert_close(&out, &want, &format!("transpose {dt} {shape:?} {perm:?}"));
                }
            }
        }
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let mut out = Tensor::zeros(DType::F32, &[3, 2]);
        for bad in [&[0, 0][..], &[0], &[1, 2], &[0, 1, 2]] {
            let e = transpose(&CpuContext::SINGLE, a.view(), bad, out.view_mut()).unwrap_err();
            assert!(e.message.contains("not a permutation"), "{e}");
        }
        let e = transpose(&CpuContext::SINGLE, a.view(), &[0, 1], out.view_mut()).unwrap_err();
        assert!(e.message.contains("has shape [2, 3]"), "{e}");
    }

    #[test]
    fn concat_on_each_axis() {
        for dt in DType::ALL {
            let base = [2usize, 3, 4];
            for axis in 0..3 {
                let sizes = [1usize, 0, 3, 2];
                let ins: Vec<Tensor> = sizes
                    .iter()
                    .enumerate()
                    .map(|(i, &s)| {
                        let mut sh = base;
                        sh[axis] = s;
                        Tensor::sample(dt, &sh, i as u64)
                    })
                    .collect();
                let mut so = base;
                so[axis] = sizes.iter().sum();
                let mut out = Tensor::zeros(dt, &so);
                let views: Vec<View<'_>> = ins.iter().map(|t| t.view()).collect();
                concat(&CpuContext::SINGLE, &views, axis, out.view_mut()).unwrap();
                let n: usize = so.iter().product();
                let want: Vec<f64> = (0..n)
                    .map(|p| {
                        let mut idx = unravel(p, &so);
                        let mut k = 0;
                        while idx[axis] >= sizes[k] {
                            idx[axis] -= sizes[k];
                            k += 1;
                        }
                        ins[k].get(bcast_index(&idx, &ins[k].shape))
                    })
                    .collect();
                assert_close(&out, &want, &format!("concat {dt} axis {axis}"));
            }
        }
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let b = Tensor::zeros(DType::F32, &[3, 3]);
        let mut out = Tensor::zeros(DType::F32, &[5, 3]);
        concat(
            &CpuContext::SINGLE,
            &[a.view(), b.view()],
            0,
            out.view_mut(),
        )
        .unwrap();
        let e = concat(
            &CpuContext::SINGLE,
            &[a.view(), b.view()],
            1,
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("inputs[0] has shape [2, 3]"), "{e}");
        let e = concat(
            &CpuContext::SINGLE,
            &[a.view(), a.view()],
            0,
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("add up to 4"), "{e}");
        let e = concat(&CpuContext::SINGLE, &[a.view()], 2, out.view_mut()).unwrap_err();
        assert!(e.message.contains("out of range"), "{e}");
        let c = Tensor::zeros(DType::I32, &[3, 3]);
        let e = concat(
            &CpuContext::SINGLE,
            &[a.view(), c.view()],
            0,
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("inputs[1]'s dtype is i32"), "{e}");
    }

    #[test]
    fn slice_at_edges() {
        let shape = [4usize, 5, 6];
        for dt in DType::ALL {
            let a = Tensor::sample(dt, &shape, 2);
            let cases: [([usize; 3], [usize; 3]); 7] = [
                ([0, 0, 0], [4, 5, 6]),
                ([0, 0, 0], [1, 1, 1]),
                ([3, 4, 5], [1, 1, 1]),
                ([1, 2, 3], [3, 3, 3]),
                ([0, 0, 2], [4, 5, 4]),
                ([2, 0, 0], [2, 5, 6]),
                ([4, 5, 6], [0, 0, 0]),
            ];
            for (st, so) in cases {
                let mut out = Tensor::zeros(dt, &so);
                slice(&CpuContext::SINGLE, a.view(), &st, out.view_mut()).unwrap();
                let n: usize = so.iter().product();
                let want: Vec<f64> = (0..n)
                    .map(|p| {
                        let idx: Vec<usize> =
                            unravel(p, &so).iter().zip(st).map(|(i, s)| i + s).collect();
                        a.get(bcast_index(&idx, &shape))
                    })
                    .collect();
                assert_close(&out, &want, &format!("slice {dt} {st:?} {so:?}"));
            }
        }
        let a = Tensor::zeros(DType::F32, &[4]);
        let mut out = Tensor::zeros(DType::F32, &[2]);
        let e = slice(&CpuContext::SINGLE, a.view(), &[3], out.view_mut()).unwrap_err();
        assert!(e.message.contains("out of bounds"), "{e}");
        let e = slice(&CpuContext::SINGLE, a.view(), &[usize::MAX], out.view_mut()).unwrap_err();
        assert!(e.message.contains("out of bounds"), "{e}");
        let e = slice(&CpuContext::SINGLE, a.view(), &[0, 0], out.view_mut()).unwrap_err();
        assert!(e.message.contains("starts"), "{e}");
        let s = Tensor::from_f32(&[], &[7.0]);
        let mut o = Tensor::zeros(DType::F32, &[]);
        slice(&CpuContext::SINGLE, s.view(), &[], o.view_mut()).unwrap();
        assert_eq!(o.to_f64(), [7.0]);
    }

    #[test]
    fn fill_every_dtype() {
        for dt in DType::ALL {
            let v = Tensor::sample(dt, &[1, 1], 5);
            for shape in [vec![], vec![7], vec![3, 0], vec![70, 300]] {
                let mut out = Tensor::sample(dt, &shape, 9);
                fill(&CpuContext::SINGLE, v.view(), out.view_mut()).unwrap();
                let n: usize = shape.iter().product();
                assert_close(&out, &vec![v.get(0); n], &format!("fill {dt} {shape:?}"));
            }
        }
        let v = Tensor::from_bytes(DType::Bool, &[], &[5]);
        let mut out = Tensor::zeros(DType::Bool, &[3]);
        fill(&CpuContext::SINGLE, v.view(), out.view_mut()).unwrap();
        assert_eq!(out.bytes(), [1, 1, 1]);
        let v = Tensor::zeros(DType::F32, &[2]);
        let mut out = Tensor::zeros(DType::F32, &[3]);
        let e = fill(&CpuContext::SINGLE, v.view(), out.view_mut()).unwrap_err();
        assert!(e.message.contains("one element"), "{e}");
        let v = Tensor::zeros(DType::F64, &[]);
        let e = fill(&CpuContext::SINGLE, v.view(), out.view_mut()).unwrap_err();
        assert!(e.message.contains("dtype"), "{e}");
    }

    #[test]
    fn iota_on_each_axis() {
        for dt in [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8] {
            let shape = [3usize, 4, 300];
            for axis in 0..3 {
                let mut out = Tensor::zeros(dt, &shape);
                iota(&CpuContext::SINGLE, axis, out.view_mut()).unwrap();
                let want: Vec<f64> = (0..out.len())
                    .map(|p| {
                        let i = unravel(p, &shape)[axis];
                        if dt == DType::U8 {
                            (i % 256) as f64
                        } else {
                            i as f64
                        }
                    })
                    .collect();
                assert_close(&out, &want, &format!("iota {dt} axis {axis}"));
            }
        }
        let mut out = Tensor::zeros(DType::I32, &[0, 3]);
        iota(&CpuContext::SINGLE, 1, out.view_mut()).unwrap();
        let mut out = Tensor::zeros(DType::I32, &[]);
        assert!(iota(&CpuContext::SINGLE, 0, out.view_mut()).is_err());
        let mut out = Tensor::zeros(DType::Bool, &[2]);
        let e = iota(&CpuContext::SINGLE, 0, out.view_mut()).unwrap_err();
        assert!(e.message.contains("bool"), "{e}");
    }

    #[test]
    fn threads_give_the_same_results() {
        let many = CpuContext { threads: 4 };
        let a = Tensor::sample(DType::F32, &[300, 500], 1);
        for perm in [[1, 0], [0, 1]] {
            let so = [a.shape[perm[0]], a.shape[perm[1]]];
            let mut one = Tensor::zeros(DType::F32, &so);
            let mut par = Tensor::zeros(DType::F32, &so);
            transpose(&CpuContext::SINGLE, a.view(), &perm, one.view_mut()).unwrap();
            transpose(&many, a.view(), &perm, par.view_mut()).unwrap();
            assert_eq!(one.data, par.data);
            let (_, want) = ref_transpose(&a, &perm);
            assert_close(&par, &want, "threaded transpose");
        }
        let b = Tensor::sample(DType::I64, &[6, 50, 70, 3], 2);
        let perm = [2, 0, 3, 1];
        let (so, want) = ref_transpose(&b, &perm);
        let mut par = Tensor::zeros(DType::I64, &so);
        transpose(&many, b.view(), &perm, par.view_mut()).unwrap();
        assert_close(&par, &want, "threaded 4-d transpose");

        let c = Tensor::sample(DType::F64, &[3, 200, 100], 3);
        let views = [a.view(), a.view()];
        let mut one = Tensor::zeros(DType::F32, &[600, 500]);
        let mut par = Tensor::zeros(DType::F32, &[600, 500]);
        concat(&CpuContext::SINGLE, &views, 0, one.view_mut()).unwrap();
        concat(&many, &views, 0, par.view_mut()).unwrap();
        assert_eq!(one.data, par.data);
        let mut one = Tensor::zeros(DType::F32, &[300, 1000]);
        let mut par = Tensor::zeros(DType::F32, &[300, 1000]);
        concat(&CpuContext::SINGLE, &views, 1, one.view_mut()).unwrap();
        concat(&many, &views, 1, par.view_mut()).unwrap();
        assert_eq!(one.data, par.data);
        let mut one = Tensor::zeros(DType::F64, &[2, 150, 99]);
        let mut par = Tensor::zeros(DType::F64, &[2, 150, 99]);
        slice(&CpuContext::SINGLE, c.view(), &[1, 50, 1], one.view_mut()).unwrap();
        slice(&many, c.view(), &[1, 50, 1], par.view_mut()).unwrap();
        assert_eq!(one.data, par.data);
        let mut one = Tensor::zeros(DType::I32, &[4, 300, 100]);
        let mut par = Tensor::zeros(DType::I32, &[4, 300, 100]);
        iota(&CpuContext::SINGLE, 1, one.view_mut()).unwrap();
        iota(&many, 1, par.view_mut()).unwrap();
        assert_eq!(one.data, par.data);
    }
}
