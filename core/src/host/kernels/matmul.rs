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
use super::half_float::via_f32;
use super::isa;
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
        DType::F16 | DType::BF16 => {
            return via_f32(ctx, &[a, b], out, |v, o| matmul(ctx, v[0], v[1], ta, tb, o))
        }
        DType::F32 => float_matmul::<f32>(ctx, a, b, out, g, &pairs, fold),
        DType::F64 => float_matmul::<f64>(ctx, a, b, out, g, &pairs, fold),
        DType::I32 => int_matmul::<i32>(ctx, a, b, out, g, &pairs),
        DType::I64 => int_matmul::<i64>(ctx, a, b, out, g, &pairs),
        DType::U8 => int_matmul::<u8>(ctx, a, b, out, g, &pairs),
        DType::Bool => return Err(invalid("matmul is not defined for bool")),
    }
    Ok(())
}

/// `out = activation(alpha * a' x b' + beta * c)` for 2-D floats (ONNX's Gemm, with ReLU
/// fused as ONNX Runtime's FusedGemm does): `a'` and `b'` are `a` and `b`, transposed when
/// asked; `c` broadcasts to `[m, n]` (rank <= 2, each dimension equal or 1). `out` is filled
/// with `beta * c` first and gemm adds the product to it; ReLU is applied to each row block
/// while it is in cache.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_fused(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    c: View<'_>,
    ta: bool,
    tb: bool,
    alpha: f64,
    beta: f64,
    relu: bool,
    out: ViewMut<'_>,
) -> Result<()> {
    check_len("a", a.data.len(), a.dtype, a.shape)?;
    check_len("b", b.data.len(), b.dtype, b.shape)?;
    check_len("c", c.data.len(), c.dtype, c.shape)?;
    check_len("out", out.data.len(), out.dtype, out.shape)?;
    for (what, d) in [
        ("b's dtype", b.dtype),
        ("c's dtype", c.dtype),
        ("out's dtype", out.dtype),
    ] {
        check_dtype(what, d, a.dtype)?;
    }
    if a.shape.len() != 2 || b.shape.len() != 2 || out.shape.len() != 2 {
        return Err(invalid(format!(
            "gemm needs 2-D a, b and out; their shapes are {:?}, {:?} and {:?}",
            a.shape, b.shape, out.shape
        )));
    }
    let (m, k) = if ta {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let (k2, n) = if tb {
        (b.shape[1], b.shape[0])
    } else {
        (b.shape[0], b.shape[1])
    };
    if k != k2 || out.shape != [m, n] {
        return Err(invalid(format!(
            "gemm of a {:?} (transposed: {ta}) and b {:?} (transposed: {tb}) into out {:?}: \
             the inner dimensions or the output shape do not match",
            a.shape, b.shape, out.shape
        )));
    }
    // c's strides over [m, n]: 0 along a dimension it broadcasts.
    let (cr, cc) = match *c.shape {
        [] => (1, 1),
        [x] => (1, x),
        [r, x] => (r, x),
        _ => (0, 0),
    };
    if !(cr == 1 || cr == m) || !(cc == 1 || cc == n) {
        return Err(invalid(format!(
            "gemm's c has shape {:?}, which does not broadcast to [{m}, {n}]",
            c.shape
        )));
    }
    let (rs, cs) = (if cr == 1 { 0 } else { cc }, usize::from(cc != 1));
    let g = Geom { m, n, k, ta, tb };
    match a.dtype {
        DType::F16 | DType::BF16 => {
            return via_f32(ctx, &[a, b, c], out, |v, o| {
                gemm_fused(ctx, v[0], v[1], v[2], ta, tb, alpha, beta, relu, o)
            })
        }
        DType::F32 => fused::<f32>(
            ctx,
            a,
            b,
            c,
            g,
            (rs, cs),
            alpha as f32,
            beta as f32,
            relu,
            out,
        ),
        DType::F64 => fused::<f64>(ctx, a, b, c, g, (rs, cs), alpha, beta, relu, out),
        d => {
            return Err(invalid(format!(
                "gemm is defined for f32, f64, f16 and bf16, not {d}"
            )))
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn fused<T: Num>(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    c: View<'_>,
    g: Geom,
    (rs, cs): (usize, usize),
    alpha: T,
    beta: T,
    relu: bool,
    out: ViewMut<'_>,
) {
    let (av, bv, cv) = (typed::<T>(a.data), typed::<T>(b.data), typed::<T>(c.data));
    let threads = ctx.threads.max(1);
    let par = if threads > 1 && g.m * g.n * g.k >= PAR_FLOPS {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    with_mut::<T, _>(out.data, |o| {
        if g.m == 0 || g.n == 0 {
            return;
        }
        for (i, row) in o.chunks_mut(g.n).enumerate() {
            let c = &cv[i * rs..];
            if cs == 0 {
                row.fill(beta.mul(c[0]));
            } else {
                for (y, x) in row.iter_mut().zip(&c[..g.n]) {
                    *y = beta.mul(*x);
                }
            }
        }
        let e = Epilogue {
            accumulate: true,
            scale: alpha,
            relu,
        };
        if g.k == 0 {
            for row in o.chunks_mut(g.n) {
                e.finish(row);
            }
            return;
        }
        product(g, &av, &bv, o, par, e);
    });
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
            product(gf, &av, &bv[..sb], o, par, Epilogue::NONE);
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
                product(g, am, bm, oc, par, Epilogue::NONE);
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
                product(g, am, bm, oc, Parallelism::None, Epilogue::NONE);
            }
        });
    });
}

/// `out = a x b` for one product of floats (`a`, `b`, `out` are exactly its matrices).
///
/// f32 products of two shapes are split into row blocks, because of how gemm 0.19 works
/// inside (measured in docs/performance.md, "MatMul shapes"):
/// - a narrow product (n <= [`NARROW`]) with `a` not transposed runs as blocks of at most
///   [`DOT_OUTPUTS`] outputs, which gemm computes as dot products along k — when b is stored
///   transposed, as is; otherwise after copying b transposed (k * n elements, cheap next to
///   the product). 2-3x faster for e.g. `[64, 512] x [512, 10]`;
/// - on one thread, a product of a few rows (up to [`ROW_BLOCK`] * 4) whose b fits in the L2 cache runs in
///   blocks of [`ROW_BLOCK`] rows, below which gemm reads b in place instead of repacking it
///   on every call. ~10% faster for e.g. `[64, 256] x [256, 512]`.
fn product<T: Num>(g: Geom, a: &[T], b: &[T], out: &mut [T], par: Parallelism, e: Epilogue<T>) {
    let Geom { m, n, k, .. } = g;
    if m.saturating_mul(n).saturating_mul(k) <= TINY {
        plain(g, a, b, out, e);
        return;
    }
    let f32 = std::mem::size_of::<T>() == 4;
    if f32 && !g.ta && n <= NARROW && m * n > DOT_OUTPUTS {
        narrow(g, a, b, out, par, e);
        return;
    }
    let b_bytes = k * n * std::mem::size_of::<T>();
    let single = matches!(par, Parallelism::None);
    if f32 && single && !g.ta && m > ROW_BLOCK && m <= 4 * ROW_BLOCK && b_bytes <= B_IN_CACHE {
        for (r, oc) in out.chunks_mut(ROW_BLOCK * n).enumerate() {
            let mb = oc.len() / n;
            let ab = &a[r * ROW_BLOCK * k..(r * ROW_BLOCK + mb) * k];
            gemm_product(Geom { m: mb, ..g }, ab, b, oc, par, e);
        }
        return;
    }
    gemm_product(g, a, b, out, par, e);
}

/// A narrow product (see [`product`]) as blocks of dot products; on several threads, whole
/// blocks per thread, so that the result is the same for any thread count.
fn narrow<T: Num>(g: Geom, a: &[T], b: &[T], out: &mut [T], par: Parallelism, e: Epilogue<T>) {
    let Geom { n, k, .. } = g;
    let scratch: Vec<T>;
    let bt: &[T] = if g.tb {
        b
    } else {
        if k * n > NARROW_COPY {
            return gemm_product(g, a, b, out, par, e);
        }
        scratch = transposed(b, k, n);
        &scratch
    };
    let rows = (DOT_OUTPUTS / n).max(1);
    let threads = match par {
        Parallelism::Rayon(t) => t.max(1),
        _ => 1,
    };
    let gt = Geom { tb: true, ..g };
    par_rows(out, rows * n, threads, |b0, chunk| {
        for (r, oc) in chunk.chunks_mut(rows * n).enumerate() {
            let (row0, mb) = ((b0 + r) * rows, oc.len() / n);
            let ab = &a[row0 * k..(row0 + mb) * k];
            gemm_product(Geom { m: mb, ..gt }, ab, bt, oc, Parallelism::None, e);
        }
    });
}

/// `b` (`k` x `n`, row-major) transposed: row j holds column j. In 4 x 4 tiles, each read
/// as four rows and written as four rows, which the compiler turns into vector shuffles.
fn transposed<T: Num>(b: &[T], k: usize, n: usize) -> Vec<T> {
    let mut t = vec![T::ZERO; k * n];
    let (k4, n4) = (k / 4 * 4, n / 4 * 4);
    for p in (0..k4).step_by(4) {
        for j in (0..n4).step_by(4) {
            let mut tile = [[T::ZERO; 4]; 4];
            for (r, row) in tile.iter_mut().enumerate() {
                row.copy_from_slice(&b[(p + r) * n + j..(p + r) * n + j + 4]);
            }
            for c in 0..4 {
                let dst = &mut t[(j + c) * k + p..(j + c) * k + p + 4];
                for (r, d) in dst.iter_mut().enumerate() {
                    *d = tile[r][c];
                }
            }
        }
    }
    // The edges: the last n % 4 columns, and the last k % 4 rows.
    for j in 0..n {
        let from = if j < n4 { k4 } else { 0 };
        for p in from..k {
            t[j * k + p] = b[p * n + j];
        }
    }
    t
}

/// Output columns up to which a product counts as narrow (see [`product`]).
const NARROW: usize = 32;
/// gemm computes a product of at most this many outputs as dot products.
const DOT_OUTPUTS: usize = 256;
/// The most elements of b copied to make it transposed.
const NARROW_COPY: usize = 1 << 16;
/// Rows above which gemm repacks b on every call (8 x its 6-column f32 micro-kernel).
const ROW_BLOCK: usize = 48;
/// The bytes of b read in place by row blocks: the L2 cache of a server core.
const B_IN_CACHE: usize = 1 << 20;

/// What a float product does with `out`: `out = scale * (a x b) (+ out, when accumulating)`,
/// then ReLU when asked — applied block by block while the block is in cache.
#[derive(Clone, Copy)]
struct Epilogue<T> {
    accumulate: bool,
    scale: T,
    relu: bool,
}

impl<T: Num> Epilogue<T> {
    const NONE: Epilogue<T> = Epilogue {
        accumulate: false,
        scale: T::ONE,
        relu: false,
    };

    fn finish(&self, out: &mut [T]) {
        if self.relu {
            // A select, not a conditional store, so that the loop vectorizes (at the widest
            // vectors the CPU has: the block is in cache, so the loop is bound by its
            // instructions). NaN stays NaN.
            isa::dispatch(
                #[inline(always)]
                || {
                    for x in out {
                        *x = if *x < T::ZERO { T::ZERO } else { *x };
                    }
                },
            )
        }
    }
}

/// One gemm call for `out = a x b` (`a`, `b`, `out` are exactly its matrices), with `e`.
fn gemm_product<T: Num>(
    g: Geom,
    a: &[T],
    b: &[T],
    out: &mut [T],
    par: Parallelism,
    e: Epilogue<T>,
) {
    let Geom { m, n, k, .. } = g;
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
    // `out` is a unique borrow, so it aliases neither input; it is initialized, so gemm may
    // read it (`read_dst`: out = 1 * out + scale * a x b) or not (out = scale * a x b). T is
    // f32 or f64, which gemm supports.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            n as isize,
            e.accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            if e.accumulate { T::ONE } else { T::ZERO },
            e.scale,
            false,
            false,
            false,
            par,
        );
    }
    e.finish(&mut out[..m * n]);
}

/// The plain triple loop, `i-p-j` order (any element type; for tiny products), with `e`.
fn plain<T: Num>(g: Geom, a: &[T], b: &[T], out: &mut [T], e: Epilogue<T>) {
    let Geom { n, k, .. } = g;
    let (a_rs, a_cs) = g.a_strides();
    let (b_rs, b_cs) = g.b_strides();
    for (i, row) in out.chunks_mut(n).enumerate() {
        if !e.accumulate {
            row.fill(T::ZERO);
        }
        for p in 0..k {
            let x = e.scale.mul(a[i * a_rs + p * a_cs]);
            let br = p * b_rs;
            for (j, y) in row.iter_mut().enumerate() {
                *y = y.add(x.mul(b[br + j * b_cs]));
            }
        }
        e.finish(row);
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
    fn single_thread_row_blocks() {
        // The shapes `product` splits on one thread: narrow (b transposed or copied so, with a
        // last block of fewer rows) and few rows with a small b (one or several row blocks,
        // the last one short), also as batches and folded batches; and the shapes just
        // outside (a transposed, too many rows, too wide).
        let cases: [(&[usize], &[usize]); 9] = [
            (&[64, 512], &[512, 10]),
            (&[61, 40], &[40, 32]),
            (&[3, 30, 50], &[50, 9]),
            (&[64, 256], &[256, 512]),
            (&[97, 33], &[33, 70]),
            (&[2, 50, 20], &[2, 20, 40]),
            (&[200, 20], &[20, 40]),
            (&[40, 20], &[20, 33]),
            (&[100, 70], &[70, 1]),
        ];
        for (sa, sb) in cases {
            for ta in [false, true] {
                for tb in [false, true] {
                    check(DType::F32, sa, sb, ta, tb, &CpuContext::SINGLE);
                }
            }
        }
    }

    #[test]
    fn gemm_with_bias_scales_and_relu() {
        // (m, k, n) covering the tiny loop, the narrow path and the row blocks; every bias
        // shape that broadcasts to [m, n]; f32 and f64; one thread and three.
        for (m, k, n) in [(2, 3, 4), (64, 40, 10), (70, 30, 50)] {
            let biases: [Vec<usize>; 6] =
                [vec![], vec![1], vec![n], vec![1, n], vec![m, 1], vec![m, n]];
            for dt in [DType::F32, DType::F64] {
                for c_shape in &biases {
                    for (ta, tb, relu) in [
                        (false, false, true),
                        (true, true, false),
                        (false, true, true),
                    ] {
                        for ctx in [CpuContext::SINGLE, CpuContext { threads: 3 }] {
                            let sa = stored(&[m, k], ta);
                            let sb = stored(&[k, n], tb);
                            let (a, b) = (Tensor::sample(dt, &sa, 1), Tensor::sample(dt, &sb, 2));
                            let c = Tensor::sample(dt, c_shape, 3);
                            let (alpha, beta) = (0.5, -2.0);
                            let mut out = Tensor::zeros(dt, &[m, n]);
                            gemm(
                                &ctx,
                                a.view(),
                                b.view(),
                                c.view(),
                                ta,
                                tb,
                                alpha,
                                beta,
                                relu,
                                out.view_mut(),
                            )
                            .unwrap();
                            let p = reference(&a, &b, ta, tb, &[m, n]);
                            let (cr, cc) = match c_shape[..] {
                                [] => (1, 1),
                                [x] => (1, x),
                                [r, x] => (r, x),
                                _ => unreachable!(),
                            };
                            let want: Vec<f64> = (0..m * n)
                                .map(|e| {
                                    let (i, j) = (e / n, e % n);
                                    let ci = if cr == 1 { 0 } else { i } * cc
                                        + if cc == 1 { 0 } else { j };
                                    let v = alpha * p[e] + beta * c.get(ci);
                                    if relu {
                                        v.max(0.0)
                                    } else {
                                        v
                                    }
                                })
                                .collect();
                            let what = format!(
                                "gemm {dt} {m}x{k}x{n} c {c_shape:?} ta {ta} tb {tb} relu {relu}"
                            );
                            assert_close_tol(&out, &want, &what, 8.0 * (1.0 + k as f64));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn gemm_refuses_what_does_not_fit() {
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let b = Tensor::zeros(DType::F32, &[3, 4]);
        let mut out = Tensor::zeros(DType::F32, &[2, 4]);
        for bad in [vec![3], vec![2, 2], vec![1, 2, 4]] {
            let c = Tensor::zeros(DType::F32, &bad);
            let e = gemm(
                &CpuContext::SINGLE,
                a.view(),
                b.view(),
                c.view(),
                false,
                false,
                1.0,
                1.0,
                false,
                out.view_mut(),
            )
            .unwrap_err();
            assert!(e.message.contains("broadcast"), "{bad:?}: {e}");
        }
        let i = Tensor::zeros(DType::I32, &[2, 3]);
        let c = Tensor::zeros(DType::I32, &[4]);
        let mut oi = Tensor::zeros(DType::I32, &[2, 4]);
        let bi = Tensor::zeros(DType::I32, &[3, 4]);
        assert!(gemm(
            &CpuContext::SINGLE,
            i.view(),
            bi.view(),
            c.view(),
            false,
            false,
            1.0,
            1.0,
            false,
            oi.view_mut()
        )
        .is_err());
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
