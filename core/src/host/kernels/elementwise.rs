//! Elementwise kernels: binary arithmetic, comparisons, select, unary math, AddN.
//!
//! Each kernel dispatches on dtype and op once, then runs a monomorphized loop: a plain zip
//! when the shapes are equal, a scalar against a tensor, or the general broadcast walk whose
//! innermost run is a zip (row broadcast), a scalar (column broadcast) or a fill.

use std::borrow::Cow;

use crate::error::Result;
use crate::tensor::DType;

use super::common::{
    check_dtype, check_len, invalid, num_dispatch, par_chunks, parts_for, same_shape, typed,
    with_mut, Float, Num, Pod, Signed, B8, PAR_CHUNK, PAR_CHUNK_HEAVY,
};
use super::half_float::{blockwise, elementwise};
use super::isa::{self, Isa};
use super::walk::Walk;
use super::{BinaryOp, CompareOp, CpuContext, UnaryOp, View, ViewMut};

#[inline(always)]
fn zip2<A: Copy, B: Copy, O>(o: &mut [O], a: &[A], b: &[B], f: impl Fn(A, B) -> O) {
    let n = o.len();
    let (a, b) = (&a[..n], &b[..n]);
    for i in 0..n {
        o[i] = f(a[i], b[i]);
    }
}

#[inline(always)]
fn map1<A: Copy, O>(o: &mut [O], a: &[A], f: impl Fn(A) -> O) {
    let n = o.len();
    let a = &a[..n];
    for i in 0..n {
        o[i] = f(a[i]);
    }
}

/// `out = f(a, b)` with broadcasting; lengths and dtypes are already checked.
#[inline(always)]
fn bcast2<A: Pod, B: Pod, O: Pod>(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
    n: usize,
    min_chunk: usize,
    f: impl Fn(A, B) -> O + Sync + Copy,
) -> Result<()> {
    if same_shape(a.shape, out.shape) && same_shape(b.shape, out.shape) {
        // The common case, kept small: no broadcasting, usually no threads.
        let (av, bv) = (typed::<A>(a.data), typed::<B>(b.data));
        let parts = parts_for(ctx, n, min_chunk);
        with_mut::<O, _>(out.data, |o| {
            if parts == 1 {
                zip2(o, &av, &bv, f)
            } else {
                par_chunks(o, parts, |s, oc| zip2(oc, &av[s..], &bv[s..], f))
            }
        });
        return Ok(());
    }
    bcast2_general(ctx, a, b, out, n, min_chunk, f)
}

#[inline(never)]
fn bcast2_general<A: Pod, B: Pod, O: Pod>(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
    n: usize,
    min_chunk: usize,
    f: impl Fn(A, B) -> O + Sync + Copy,
) -> Result<()> {
    let same_a = same_shape(a.shape, out.shape);
    let same_b = same_shape(b.shape, out.shape);
    let rank = out.shape.len();
    let parts = parts_for(ctx, n, min_chunk);
    if same_b && a.shape.len() <= rank && a.data.len() == a.dtype.size() {
        let x = typed::<A>(a.data)[0];
        let bv = typed::<B>(b.data);
        with_mut::<O, _>(out.data, |o| {
            par_chunks(o, parts, |s, oc| map1(oc, &bv[s..], |y| f(x, y)))
        });
        return Ok(());
    }
    if same_a && b.shape.len() <= rank && b.data.len() == b.dtype.size() {
        let y = typed::<B>(b.data)[0];
        let av = typed::<A>(a.data);
        with_mut::<O, _>(out.data, |o| {
            par_chunks(o, parts, |s, oc| map1(oc, &av[s..], |x| f(x, y)))
        });
        return Ok(());
    }
    let w = Walk::<2>::broadcast(out.shape, [a.shape, b.shape], ["a", "b"], true)?;
    if n == 0 {
        return Ok(());
    }
    let (av, bv) = (typed::<A>(a.data), typed::<B>(b.data));
    let (sa, sb) = (w.inner_stride(0), w.inner_stride(1));
    with_mut::<O, _>(out.data, |o| {
        par_chunks(o, parts, |s, oc| {
            w.for_each_run(s, s + oc.len(), |[x, y], p, len| {
                let oo = &mut oc[p - s..p - s + len];
                match (sa, sb) {
                    (1, 1) => zip2(oo, &av[x..], &bv[y..], f),
                    (0, 1) => {
                        let xv = av[x];
                        map1(oo, &bv[y..], |v| f(xv, v))
                    }
                    (1, 0) => {
                        let yv = bv[y];
                        map1(oo, &av[x..], |v| f(v, yv))
                    }
                    _ => {
                        for (i, o) in oo.iter_mut().enumerate() {
                            *o = f(av[x + i * sa], bv[y + i * sb]);
                        }
                    }
                }
            })
        })
    });
    Ok(())
}

/// Checks the lengths of `a`, `b`, `out` and that all three share `a`'s dtype (`out` may have
/// `out_dtype` instead); returns out's element count.
#[inline(always)]
fn check_binary(a: &View<'_>, b: &View<'_>, out: &ViewMut<'_>, out_dtype: DType) -> Result<usize> {
    if a.dtype == b.dtype
        && out.dtype == out_dtype
        && same_shape(a.shape, out.shape)
        && same_shape(b.shape, out.shape)
    {
        // One shape: one element count to check.
        let n = check_len("out", out.data.len(), out.dtype, out.shape)?;
        if n.checked_mul(a.dtype.size()) == Some(a.data.len()) && b.data.len() == a.data.len() {
            return Ok(n);
        }
    }
    check_binary_full(a, b, out, out_dtype)
}

#[inline(never)]
fn check_binary_full(
    a: &View<'_>,
    b: &View<'_>,
    out: &ViewMut<'_>,
    out_dtype: DType,
) -> Result<usize> {
    check_len("a", a.data.len(), a.dtype, a.shape)?;
    check_len("b", b.data.len(), b.dtype, b.shape)?;
    let n = check_len("out", out.data.len(), out.dtype, out.shape)?;
    check_dtype("b's dtype", b.dtype, a.dtype)?;
    check_dtype("out's dtype", out.dtype, out_dtype)?;
    Ok(n)
}

pub(crate) fn binary(
    ctx: &CpuContext,
    op: BinaryOp,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
) -> Result<()> {
    let n = check_binary(&a, &b, &out, a.dtype)?;
    if a.dtype.is_half() {
        return elementwise(ctx, &[a, b], out, |v, o| binary(ctx, op, v[0], v[1], o));
    }
    num_dispatch!(a.dtype, T => binary_num::<T>(ctx, op, a, b, out, n), bool => {
        let f = match op {
            BinaryOp::Maximum => |x: B8, y: B8| B8::new(x.get() | y.get()),
            BinaryOp::Minimum => |x: B8, y: B8| B8::new(x.get() & y.get()),
            _ => {
                return Err(invalid(format!(
                    "{op:?} is not defined for bool (only Maximum and Minimum are)"
                )))
            }
        };
        bcast2(ctx, a, b, out, n, PAR_CHUNK, f)
    })
}

fn binary_num<T: Num>(
    ctx: &CpuContext,
    op: BinaryOp,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
    n: usize,
) -> Result<()> {
    let c = PAR_CHUNK;
    match op {
        BinaryOp::Add => bcast2(ctx, a, b, out, n, c, T::add),
        BinaryOp::Sub => bcast2(ctx, a, b, out, n, c, T::sub),
        BinaryOp::Mul => bcast2(ctx, a, b, out, n, c, T::mul),
        BinaryOp::Div => bcast2(ctx, a, b, out, n, c, T::div),
        BinaryOp::Maximum => bcast2(ctx, a, b, out, n, c, T::max),
        BinaryOp::Minimum => bcast2(ctx, a, b, out, n, c, T::min),
        BinaryOp::Pow => bcast2(ctx, a, b, out, n, PAR_CHUNK_HEAVY, T::pow),
    }
}

pub(crate) fn compare(
    ctx: &CpuContext,
    op: CompareOp,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
) -> Result<()> {
    let n = check_binary(&a, &b, &out, DType::Bool)?;
    if a.dtype.is_half() {
        return elementwise(ctx, &[a, b], out, |v, o| compare(ctx, op, v[0], v[1], o));
    }
    num_dispatch!(a.dtype, T => compare_num::<T>(ctx, op, a, b, out, n), bool => {
        let f = match op {
            CompareOp::Equal => |x: B8, y: B8| B8::new(x.get() == y.get()),
            CompareOp::NotEqual => |x: B8, y: B8| B8::new(x.get() != y.get()),
            _ => {
                return Err(invalid(format!(
                    "{op:?} is not defined for bool (only Equal and NotEqual are)"
                )))
            }
        };
        bcast2(ctx, a, b, out, n, PAR_CHUNK, f)
    })
}

fn compare_num<T: Num>(
    ctx: &CpuContext,
    op: CompareOp,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
    n: usize,
) -> Result<()> {
    let c = PAR_CHUNK;
    match op {
        CompareOp::Equal => bcast2(ctx, a, b, out, n, c, |x: T, y: T| B8::new(x == y)),
        CompareOp::NotEqual => bcast2(ctx, a, b, out, n, c, |x: T, y: T| B8::new(x != y)),
        CompareOp::Less => bcast2(ctx, a, b, out, n, c, |x: T, y: T| B8::new(x < y)),
        CompareOp::LessEqual => bcast2(ctx, a, b, out, n, c, |x: T, y: T| B8::new(x <= y)),
        CompareOp::Greater => bcast2(ctx, a, b, out, n, c, |x: T, y: T| B8::new(x > y)),
        CompareOp::GreaterEqual => bcast2(ctx, a, b, out, n, c, |x: T, y: T| B8::new(x >= y)),
    }
}

pub(crate) fn unary(ctx: &CpuContext, op: UnaryOp, a: View<'_>, out: ViewMut<'_>) -> Result<()> {
    let n = check_len("a", a.data.len(), a.dtype, a.shape)?;
    check_len("out", out.data.len(), out.dtype, out.shape)?;
    check_dtype("out's dtype", out.dtype, a.dtype)?;
    if a.shape != out.shape {
        return Err(invalid(format!(
            "out has shape {:?} but a has shape {:?}; they must be equal",
            out.shape, a.shape
        )));
    }
    let unsupported = || {
        Err(invalid(format!(
            "{op:?} is not defined for {} (see the kernels' dtype table)",
            a.dtype
        )))
    };
    match (op, a.dtype) {
        (_, DType::F16 | DType::BF16) => blockwise(ctx, &[a], out, |v, o| unary(ctx, op, v[0], o)),
        (_, DType::F32) => unary_float::<f32>(ctx, op, a, out, n),
        (_, DType::F64) => unary_float::<f64>(ctx, op, a, out, n),
        (UnaryOp::Neg, DType::I32) => map(ctx, a, out, n, PAR_CHUNK, <i32 as Signed>::neg),
        (UnaryOp::Abs, DType::I32) => map(ctx, a, out, n, PAR_CHUNK, <i32 as Signed>::abs),
        (UnaryOp::Neg, DType::I64) => map(ctx, a, out, n, PAR_CHUNK, <i64 as Signed>::neg),
        (UnaryOp::Abs, DType::I64) => map(ctx, a, out, n, PAR_CHUNK, <i64 as Signed>::abs),
        (UnaryOp::Abs, DType::U8) => map(ctx, a, out, n, PAR_CHUNK, |x: u8| x),
        _ => unsupported(),
    }
}

fn unary_float<T: Float>(
    ctx: &CpuContext,
    op: UnaryOp,
    a: View<'_>,
    out: ViewMut<'_>,
    n: usize,
) -> Result<()> {
    unary_float_at::<T>(isa::level(), ctx, op, a, out, n)
}

/// [`unary_float`] with its compute-bound loops compiled for `level` (or the CPU's widest,
/// when narrower).
fn unary_float_at<T: Float>(
    level: Isa,
    ctx: &CpuContext,
    op: UnaryOp,
    a: View<'_>,
    out: ViewMut<'_>,
    n: usize,
) -> Result<()> {
    let (c, h) = (PAR_CHUNK, PAR_CHUNK_HEAVY);
    match op {
        UnaryOp::Neg => map(ctx, a, out, n, c, T::neg),
        UnaryOp::Abs => map(ctx, a, out, n, c, T::abs),
        UnaryOp::Exp => map_wide(level, ctx, a, out, n, h, T::exp),
        UnaryOp::Log => map_wide(level, ctx, a, out, n, h, T::ln),
        UnaryOp::Tanh => map_wide(level, ctx, a, out, n, h, T::tanh),
        UnaryOp::Sqrt => map_wide(level, ctx, a, out, n, c, T::sqrt),
        UnaryOp::Rsqrt => map_wide(level, ctx, a, out, n, c, |x: T| x.sqrt().recip()),
        UnaryOp::Sigmoid => map_wide(level, ctx, a, out, n, h, T::sigmoid),
    }
}

/// [`map`] for a compute-bound `f` (which must be `#[inline(always)]` all the way down): the
/// loop compiled for the widest vectors the CPU has, up to `level` (see [`isa`]).
fn map_wide<A: Pod, O: Pod>(
    level: Isa,
    ctx: &CpuContext,
    a: View<'_>,
    out: ViewMut<'_>,
    n: usize,
    min_chunk: usize,
    f: impl Fn(A) -> O + Sync + Copy,
) -> Result<()> {
    map_chunks(ctx, a, out, n, min_chunk, |oc, av| {
        isa::dispatch_at(
            level,
            #[inline(always)]
            || map1(oc, av, f),
        )
    })
}

/// `out = f(a)` over equal shapes.
pub(crate) fn map<A: Pod, O: Pod>(
    ctx: &CpuContext,
    a: View<'_>,
    out: ViewMut<'_>,
    n: usize,
    min_chunk: usize,
    f: impl Fn(A) -> O + Sync + Copy,
) -> Result<()> {
    map_chunks(ctx, a, out, n, min_chunk, |oc, av| map1(oc, av, f))
}

/// Runs `body(out chunk, the input from the chunk's start)` over the pieces `ctx` allows.
#[inline(always)]
fn map_chunks<A: Pod, O: Pod>(
    ctx: &CpuContext,
    a: View<'_>,
    out: ViewMut<'_>,
    n: usize,
    min_chunk: usize,
    body: impl Fn(&mut [O], &[A]) + Sync,
) -> Result<()> {
    let av = typed::<A>(a.data);
    let parts = parts_for(ctx, n, min_chunk);
    with_mut::<O, _>(out.data, |o| {
        par_chunks(o, parts, |s, oc| body(oc, &av[s..]))
    });
    Ok(())
}

pub(crate) fn select(
    ctx: &CpuContext,
    cond: View<'_>,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
) -> Result<()> {
    check_len("cond", cond.data.len(), cond.dtype, cond.shape)?;
    let n = check_binary(&a, &b, &out, a.dtype)?;
    check_dtype("cond's dtype", cond.dtype, DType::Bool)?;
    match a.dtype.size() {
        1 => select_t::<u8>(ctx, cond, a, b, out, n),
        2 => select_t::<u16>(ctx, cond, a, b, out, n),
        4 => select_t::<u32>(ctx, cond, a, b, out, n),
        _ => select_t::<u64>(ctx, cond, a, b, out, n),
    }
}

fn select_t<T: Pod>(
    ctx: &CpuContext,
    cond: View<'_>,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
    n: usize,
) -> Result<()> {
    let parts = parts_for(ctx, n, PAR_CHUNK);
    let (cv, av, bv) = (
        typed::<B8>(cond.data),
        typed::<T>(a.data),
        typed::<T>(b.data),
    );
    if cond.shape == out.shape && a.shape == out.shape && b.shape == out.shape {
        with_mut::<T, _>(out.data, |o| {
            par_chunks(o, parts, |s, oc| {
                let m = oc.len();
                let (c, x, y) = (&cv[s..s + m], &av[s..s + m], &bv[s..s + m]);
                for i in 0..m {
                    oc[i] = if c[i].get() { x[i] } else { y[i] };
                }
            })
        });
        return Ok(());
    }
    let w = Walk::<3>::broadcast(
        out.shape,
        [cond.shape, a.shape, b.shape],
        ["cond", "a", "b"],
        true,
    )?;
    if n == 0 {
        return Ok(());
    }
    let (sc, sa, sb) = (w.inner_stride(0), w.inner_stride(1), w.inner_stride(2));
    with_mut::<T, _>(out.data, |o| {
        par_chunks(o, parts, |s, oc| {
            w.for_each_run(s, s + oc.len(), |[c, x, y], p, len| {
                let oo = &mut oc[p - s..p - s + len];
                if sc == 0 {
                    // One condition for the whole run: a copy or a fill.
                    let (src, st, off) = if cv[c].get() {
                        (&av, sa, x)
                    } else {
                        (&bv, sb, y)
                    };
                    if st == 1 {
                        oo.copy_from_slice(&src[off..off + len]);
                    } else {
                        oo.fill(src[off]);
                    }
                } else {
                    for (i, o) in oo.iter_mut().enumerate() {
                        *o = if cv[c + i * sc].get() {
                            av[x + i * sa]
                        } else {
                            bv[y + i * sb]
                        };
                    }
                }
            })
        })
    });
    Ok(())
}

pub(crate) fn add_n(ctx: &CpuContext, inputs: &[View<'_>], out: ViewMut<'_>) -> Result<()> {
    let n = check_len("out", out.data.len(), out.dtype, out.shape)?;
    if inputs.is_empty() {
        return Err(invalid("add_n needs at least one input"));
    }
    for (i, x) in inputs.iter().enumerate() {
        check_len(&format!("inputs[{i}]"), x.data.len(), x.dtype, x.shape)?;
        check_dtype(&format!("inputs[{i}]'s dtype"), x.dtype, out.dtype)?;
        if x.shape != out.shape {
            return Err(invalid(format!(
                "inputs[{i}] has shape {:?} but out has shape {:?}; they must be equal",
                x.shape, out.shape
            )));
        }
    }
    if out.dtype.is_half() {
        // One rounding at the end, as for every other half result.
        return blockwise(ctx, inputs, out, |v, o| add_n(ctx, v, o));
    }
    num_dispatch!(out.dtype, T => {
        let ins: Vec<Cow<'_, [T]>> = inputs.iter().map(|x| typed::<T>(x.data)).collect();
        let parts = parts_for(ctx, n.saturating_mul(inputs.len()), PAR_CHUNK);
        with_mut::<T, _>(out.data, |o| par_chunks(o, parts, |s, oc| add_n_block(&ins, s, oc)));
        Ok(())
    }, bool => Err(invalid("add_n is not defined for bool")))
}

fn add_n_block<T: Num>(ins: &[Cow<'_, [T]>], start: usize, out: &mut [T]) {
    // Blocks small enough that `out`'s part stays in L1 across all inputs.
    const BLOCK: usize = 2048;
    let mut b0 = 0;
    while b0 < out.len() {
        let b1 = (b0 + BLOCK).min(out.len());
        let o = &mut out[b0..b1];
        let g = start + b0;
        match ins {
            [x] => o.copy_from_slice(&x[g..g + o.len()]),
            [x, y, rest @ ..] => {
                zip2(o, &x[g..], &y[g..], T::add);
                for z in rest {
                    let z = &z[g..g + o.len()];
                    for i in 0..o.len() {
                        o[i] = o[i].add(z[i]);
                    }
                }
            }
            [] => {}
        }
        b0 = b1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::*;
    use super::{isa, unary_float_at, Isa};
    use crate::error::Code;

    const NUMERIC: [DType; 5] = [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8];

    fn ref_binary(op: BinaryOp, dt: DType, x: f64, y: f64) -> f64 {
        match dt {
            DType::F32 | DType::F64 => {
                let r = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => x / y,
                    BinaryOp::Maximum => x.max(y),
                    BinaryOp::Minimum => x.min(y),
                    BinaryOp::Pow => x.powf(y),
                };
                round_to(dt, r)
            }
            _ => {
                let (x, y) = (x as i128, y as i128);
                let r: i128 = match op {
                    BinaryOp::Add => x + y,
                    BinaryOp::Sub => x - y,
                    BinaryOp::Mul => x * y,
                    BinaryOp::Div => {
                        if y == 0 {
                            0
                        } else {
                            x / y
                        }
                    }
                    BinaryOp::Maximum => x.max(y),
                    BinaryOp::Minimum => x.min(y),
                    BinaryOp::Pow => {
                        if y < 0 {
                            match x {
                                1 => 1,
                                -1 => {
                                    if y % 2 == 0 {
                                        1
                                    } else {
                                        -1
                                    }
                                }
                                _ => 0,
                            }
                        } else {
                            let mut acc: i128 = 1;
                            for _ in 0..y {
                                acc = wrap(dt, acc * x);
                            }
                            acc
                        }
                    }
                };
                wrap(dt, r) as f64
            }
        }
    }

    /// Shape pairs covering same-shape, scalar, row, column, both-sides, rank-different and
    /// zero-sized broadcasting.
    fn shape_cases() -> Vec<(Vec<usize>, Vec<usize>)> {
        vec![
            (vec![7], vec![7]),
            (vec![2, 3], vec![2, 3]),
            (vec![], vec![]),
            (vec![], vec![3, 4]),
            (vec![3, 4], vec![]),
            (vec![1, 1], vec![3, 4]),
            (vec![3, 4], vec![4]),
            (vec![4], vec![3, 4]),
            (vec![3, 4], vec![3, 1]),
            (vec![3, 1], vec![1, 4]),
            (vec![2, 1, 5], vec![3, 1]),
            (vec![2, 3, 4, 5], vec![3, 1, 5]),
            (vec![0, 4], vec![4]),
            (vec![0, 4], vec![1, 1]),
            (vec![2, 0], vec![2, 1]),
            (vec![5, 1, 3], vec![1, 0, 1]),
        ]
    }

    #[test]
    fn binary_all_ops_dtypes_and_broadcasts() {
        let ops = BinaryOp::ALL;
        for dt in NUMERIC {
            for (sa, sb) in shape_cases() {
                let so = broadcast_shape(&sa, &sb);
                for op in ops {
                    let a = if op == BinaryOp::Pow {
                        Tensor::pow_base(dt, &sa, 1)
                    } else {
                        Tensor::sample(dt, &sa, 1)
                    };
                    let b = if op == BinaryOp::Pow {
                        Tensor::pow_exponent(dt, &sb, 2)
                    } else {
                        Tensor::sample(dt, &sb, 2)
                    };
                    let mut out = Tensor::zeros(dt, &so);
                    binary(&CpuContext::SINGLE, op, a.view(), b.view(), out.view_mut())
                        .unwrap_or_else(|e| panic!("{op:?} {dt} {sa:?} {sb:?}: {e}"));
                    let want = ref_broadcast2(&a, &b, &so, |x, y| ref_binary(op, dt, x, y));
                    assert_close(&out, &want, &format!("{op:?} {dt} {sa:?} {sb:?}"));
                }
            }
        }
    }

    #[test]
    fn integer_division_and_pow_edges() {
        let a = Tensor::from_i32(&[6], &[7, -7, 5, i32::MIN, 0, i32::MAX]);
        let b = Tensor::from_i32(&[6], &[0, 2, -1, -1, 0, -2]);
        let mut out = Tensor::zeros(DType::I32, &[6]);
        binary(
            &CpuContext::SINGLE,
            BinaryOp::Div,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(
            out.to_i64(),
            [0, -3, -5, i32::MIN as i64, 0, -(i32::MAX as i64 / 2)]
        );
        let base = Tensor::from_i32(&[6], &[2, 1, -1, -1, 0, 3]);
        let exp = Tensor::from_i32(&[6], &[-1, -7, -3, -4, -1, 31]);
        binary(
            &CpuContext::SINGLE,
            BinaryOp::Pow,
            base.view(),
            exp.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [0, 1, -1, 1, 0, 3i32.wrapping_pow(31) as i64]);
        let a = Tensor::from_u8(&[3], &[250, 3, 0]);
        let b = Tensor::from_u8(&[3], &[10, 5, 0]);
        let mut out = Tensor::zeros(DType::U8, &[3]);
        binary(
            &CpuContext::SINGLE,
            BinaryOp::Add,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [4, 8, 0]);
        binary(
            &CpuContext::SINGLE,
            BinaryOp::Sub,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [240, 254, 0]);
        binary(
            &CpuContext::SINGLE,
            BinaryOp::Div,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.to_i64(), [25, 0, 0]);
    }

    #[test]
    fn float_maximum_propagates_nan() {
        let a = Tensor::from_f32(&[3], &[f32::NAN, 1.0, 2.0]);
        let b = Tensor::from_f32(&[3], &[1.0, f32::NAN, 3.0]);
        let mut out = Tensor::zeros(DType::F32, &[3]);
        for op in [BinaryOp::Maximum, BinaryOp::Minimum] {
            binary(&CpuContext::SINGLE, op, a.view(), b.view(), out.view_mut()).unwrap();
            let v = out.to_f64();
            assert!(v[0].is_nan() && v[1].is_nan(), "{op:?} {v:?}");
        }
    }

    #[test]
    fn bool_binary_is_or_and_and_normalizes() {
        let a = Tensor::from_bytes(DType::Bool, &[4], &[0, 0, 1, 7]);
        let b = Tensor::from_bytes(DType::Bool, &[4], &[0, 1, 0, 1]);
        let mut out = Tensor::zeros(DType::Bool, &[4]);
        binary(
            &CpuContext::SINGLE,
            BinaryOp::Maximum,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.bytes(), [0, 1, 1, 1]);
        binary(
            &CpuContext::SINGLE,
            BinaryOp::Minimum,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.bytes(), [0, 0, 0, 1]);
        let e = binary(
            &CpuContext::SINGLE,
            BinaryOp::Add,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(e.message.contains("bool"), "{e}");
    }

    #[test]
    fn compare_all_ops_dtypes_and_broadcasts() {
        let ops = [
            CompareOp::Equal,
            CompareOp::NotEqual,
            CompareOp::Less,
            CompareOp::LessEqual,
            CompareOp::Greater,
            CompareOp::GreaterEqual,
        ];
        for dt in NUMERIC {
            for (sa, sb) in shape_cases() {
                let so = broadcast_shape(&sa, &sb);
                // Few distinct values, so that equality happens.
                let a = Tensor::small_ints(dt, &sa, 3);
                let b = Tensor::small_ints(dt, &sb, 5);
                for op in ops {
                    let mut out = Tensor::zeros(DType::Bool, &so);
                    compare(&CpuContext::SINGLE, op, a.view(), b.view(), out.view_mut()).unwrap();
                    let want = ref_broadcast2(&a, &b, &so, |x, y| {
                        let r = match op {
                            CompareOp::Equal => x == y,
                            CompareOp::NotEqual => x != y,
                            CompareOp::Less => x < y,
                            CompareOp::LessEqual => x <= y,
                            CompareOp::Greater => x > y,
                            CompareOp::GreaterEqual => x >= y,
                        };
                        r as u8 as f64
                    });
                    assert_close(&out, &want, &format!("{op:?} {dt} {sa:?} {sb:?}"));
                }
            }
        }
        // NaN is unequal to everything, itself included.
        let a = Tensor::from_f64(&[2], &[f64::NAN, 1.0]);
        let mut out = Tensor::zeros(DType::Bool, &[2]);
        compare(
            &CpuContext::SINGLE,
            CompareOp::Equal,
            a.view(),
            a.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.bytes(), [0, 1]);
        compare(
            &CpuContext::SINGLE,
            CompareOp::NotEqual,
            a.view(),
            a.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.bytes(), [1, 0]);
    }

    #[test]
    fn compare_bool_only_equality() {
        let a = Tensor::from_bytes(DType::Bool, &[3], &[0, 1, 2]);
        let b = Tensor::from_bytes(DType::Bool, &[1], &[1]);
        let mut out = Tensor::zeros(DType::Bool, &[3]);
        compare(
            &CpuContext::SINGLE,
            CompareOp::Equal,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.bytes(), [0, 1, 1]);
        compare(
            &CpuContext::SINGLE,
            CompareOp::NotEqual,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(out.bytes(), [1, 0, 0]);
        let e = compare(
            &CpuContext::SINGLE,
            CompareOp::Less,
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("bool"), "{e}");
    }

    #[test]
    fn unary_float_ops_give_the_same_bits_at_every_instruction_set_level() {
        // Values over every function's range, its edges and specials, an odd count so that
        // the vector loops' remainders run too.
        let mut xs: Vec<f64> = (0..4099).map(|i| -110.0 + i as f64 * 0.0537).collect();
        xs.extend([
            0.0,
            -0.0,
            1e-40,
            -1e-40,
            1e-30,
            88.7,
            88.8,
            89.0,
            -104.0,
            -105.0,
            0.625,
            -0.625,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MAX,
            f64::MIN_POSITIVE,
        ]);
        // The ops compiled per level (Neg and Abs are not).
        let ops: Vec<UnaryOp> = UnaryOp::ALL
            .into_iter()
            .filter(|op| !matches!(op, UnaryOp::Neg | UnaryOp::Abs))
            .collect();
        let mut wider = 0;
        for dt in [DType::F32, DType::F64] {
            let a = Tensor::from_values(dt, &[xs.len()], &xs);
            for &op in &ops {
                let run = |level: Isa| {
                    let mut out = Tensor::zeros(dt, &[xs.len()]);
                    let (ctx, n) = (&CpuContext::SINGLE, xs.len());
                    let r = if dt == DType::F32 {
                        unary_float_at::<f32>(level, ctx, op, a.view(), out.view_mut(), n)
                    } else {
                        unary_float_at::<f64>(level, ctx, op, a.view(), out.view_mut(), n)
                    };
                    r.unwrap();
                    out.bytes()
                };
                let base = run(Isa::Base);
                for level in [Isa::V3, Isa::V4] {
                    if level <= isa::supported() {
                        wider += 1;
                    }
                    assert!(
                        run(level) == base,
                        "{op:?} {dt}: {level:?} differs from the baseline"
                    );
                }
            }
        }
        // Through the public entry too (at the process's level).
        let a = Tensor::from_values(DType::F32, &[xs.len()], &xs);
        let mut out = Tensor::zeros(DType::F32, &[xs.len()]);
        unary(&CpuContext::SINGLE, UnaryOp::Exp, a.view(), out.view_mut()).unwrap();
        let mut base = Tensor::zeros(DType::F32, &[xs.len()]);
        let n = xs.len();
        unary_float_at::<f32>(
            Isa::Base,
            &CpuContext::SINGLE,
            UnaryOp::Exp,
            a.view(),
            base.view_mut(),
            n,
        )
        .unwrap();
        assert!(out.bytes() == base.bytes());
        eprintln!("instruction-set levels compared with the baseline: {wider} op/dtype/level runs (CPU: {:?})", isa::supported());
    }

    #[test]
    fn unary_all_ops_and_dtypes() {
        let ops = UnaryOp::ALL;
        for dt in DType::ALL {
            for shape in [vec![], vec![5], vec![3, 7], vec![0, 3]] {
                let a = if dt.is_float() {
                    Tensor::positive(dt, &shape, 4)
                } else {
                    Tensor::sample(dt, &shape, 4)
                };
                for op in ops {
                    let mut out = Tensor::zeros(dt, &shape);
                    let r = unary(&CpuContext::SINGLE, op, a.view(), out.view_mut());
                    let supported = match dt {
                        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => true,
                        DType::I32 | DType::I64 => matches!(op, UnaryOp::Neg | UnaryOp::Abs),
                        DType::U8 => op == UnaryOp::Abs,
                        DType::Bool => false,
                    };
                    if !supported {
                        let e = r.unwrap_err();
                        assert_eq!(e.code, Code::InvalidArgument);
                        assert!(e.message.contains(dt.name()), "{e}");
                        continue;
                    }
                    r.unwrap();
                    let want: Vec<f64> = a
                        .to_f64()
                        .iter()
                        .map(|&x| {
                            let r = match op {
                                UnaryOp::Neg => -x,
                                UnaryOp::Abs => x.abs(),
                                UnaryOp::Exp => x.exp(),
                                UnaryOp::Log => x.ln(),
                                UnaryOp::Tanh => x.tanh(),
                                UnaryOp::Sqrt => x.sqrt(),
                                UnaryOp::Rsqrt => 1.0 / x.sqrt(),
                                UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
                            };
                            if dt.is_float() {
                                round_to(dt, r)
                            } else {
                                wrap(dt, r as i128) as f64
                            }
                        })
                        .collect();
                    assert_close(&out, &want, &format!("{op:?} {dt} {shape:?}"));
                }
            }
        }
        // Wrapping integer Neg/Abs; float specials.
        let a = Tensor::from_i32(&[2], &[i32::MIN, -3]);
        let mut out = Tensor::zeros(DType::I32, &[2]);
        unary(&CpuContext::SINGLE, UnaryOp::Abs, a.view(), out.view_mut()).unwrap();
        assert_eq!(out.to_i64(), [i32::MIN as i64, 3]);
        unary(&CpuContext::SINGLE, UnaryOp::Neg, a.view(), out.view_mut()).unwrap();
        assert_eq!(out.to_i64(), [i32::MIN as i64, 3]);
        let a = Tensor::from_f32(&[4], &[-1.0, 0.0, -1000.0, 1000.0]);
        let mut out = Tensor::zeros(DType::F32, &[4]);
        unary(&CpuContext::SINGLE, UnaryOp::Log, a.view(), out.view_mut()).unwrap();
        let v = out.to_f64();
        assert!(v[0].is_nan() && v[1] == f64::NEG_INFINITY);
        unary(
            &CpuContext::SINGLE,
            UnaryOp::Sigmoid,
            a.view(),
            out.view_mut(),
        )
        .unwrap();
        assert_eq!(&out.to_f64()[2..], [0.0, 1.0]);
    }

    #[test]
    fn select_all_dtypes_and_broadcasts() {
        let cases: Vec<(Vec<usize>, Vec<usize>, Vec<usize>)> = vec![
            (vec![6], vec![6], vec![6]),
            (vec![], vec![2, 3], vec![2, 3]),
            (vec![2, 3], vec![], vec![]),
            (vec![2, 1], vec![1, 3], vec![3]),
            (vec![3], vec![2, 3], vec![2, 1]),
            (vec![4, 1, 3], vec![2, 1], vec![]),
            (vec![0, 3], vec![3], vec![1]),
        ];
        for dt in DType::ALL {
            for (sc, sa, sb) in &cases {
                let so = broadcast_shape(&broadcast_shape(sc, sa), sb);
                let c = Tensor::sample(DType::Bool, sc, 9);
                let a = Tensor::sample(dt, sa, 1);
                let b = Tensor::sample(dt, sb, 2);
                let mut out = Tensor::zeros(dt, &so);
                select(
                    &CpuContext::SINGLE,
                    c.view(),
                    a.view(),
                    b.view(),
                    out.view_mut(),
                )
                .unwrap_or_else(|e| panic!("{dt} {sc:?} {sa:?} {sb:?}: {e}"));
                let want = ref_broadcast3(&c, &a, &b, &so, |c, x, y| if c != 0.0 { x } else { y });
                assert_close(&out, &want, &format!("select {dt} {sc:?} {sa:?} {sb:?}"));
            }
        }
        let c = Tensor::from_bytes(DType::Bool, &[2], &[0, 1]);
        let a = Tensor::from_f32(&[2], &[1.0, 2.0]);
        let b = Tensor::from_f64(&[2], &[1.0, 2.0]);
        let mut out = Tensor::zeros(DType::F32, &[2]);
        let e = select(
            &CpuContext::SINGLE,
            c.view(),
            a.view(),
            b.view(),
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("f64"), "{e}");
        let e = select(
            &CpuContext::SINGLE,
            a.view(),
            a.view(),
            a.view(),
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("cond"), "{e}");
    }

    #[test]
    fn add_n_all_dtypes() {
        for dt in NUMERIC {
            for shape in [vec![], vec![5], vec![3, 1000], vec![0]] {
                for k in 1..5 {
                    let ins: Vec<Tensor> = (0..k)
                        .map(|i| Tensor::sample(dt, &shape, i as u64 + 1))
                        .collect();
                    let views: Vec<View<'_>> = ins.iter().map(|t| t.view()).collect();
                    let mut out = Tensor::zeros(dt, &shape);
                    add_n(&CpuContext::SINGLE, &views, out.view_mut()).unwrap();
                    let vals: Vec<Vec<f64>> = ins.iter().map(|t| t.to_f64()).collect();
                    let want: Vec<f64> = (0..out.len())
                        .map(|i| {
                            let s: f64 = vals.iter().map(|v| v[i]).sum();
                            if dt.is_float() {
                                s
                            } else {
                                wrap(dt, s as i128) as f64
                            }
                        })
                        .collect();
                    assert_close(&out, &want, &format!("add_n {dt} {shape:?} x{k}"));
                }
            }
        }
        let mut out = Tensor::zeros(DType::F32, &[2]);
        assert!(add_n(&CpuContext::SINGLE, &[], out.view_mut()).is_err());
        let a = Tensor::zeros(DType::F32, &[3]);
        let e = add_n(&CpuContext::SINGLE, &[a.view()], out.view_mut()).unwrap_err();
        assert!(e.message.contains("inputs[0]"), "{e}");
        let bools = Tensor::zeros(DType::Bool, &[2]);
        let mut out = Tensor::zeros(DType::Bool, &[2]);
        assert!(add_n(&CpuContext::SINGLE, &[bools.view()], out.view_mut()).is_err());
    }

    #[test]
    fn errors_name_the_problem() {
        let a = Tensor::zeros(DType::F32, &[2, 3]);
        let b = Tensor::zeros(DType::F32, &[3]);
        let mut out = Tensor::zeros(DType::F32, &[2, 3]);
        // Wrong byte length.
        let short = View {
            data: &a.data[..20],
            ..a.view()
        };
        let e = binary(
            &CpuContext::SINGLE,
            BinaryOp::Add,
            short,
            b.view(),
            out.view_mut(),
        )
        .unwrap_err();
        assert!(
            e.message
                .contains("a: a f32 tensor of shape [2, 3] holds 24 bytes; the data has 20"),
            "{e}"
        );
        // Dtype mismatch.
        let bi = Tensor::zeros(DType::I32, &[3]);
        let e = binary(
            &CpuContext::SINGLE,
            BinaryOp::Add,
            a.view(),
            bi.view(),
            out.view_mut(),
        )
        .unwrap_err();
        assert!(
            e.message.contains("b's dtype is i32 but must be f32"),
            "{e}"
        );
        // Shapes that do not broadcast; an output of the wrong shape.
        let c = Tensor::zeros(DType::F32, &[2]);
        let e = binary(
            &CpuContext::SINGLE,
            BinaryOp::Add,
            a.view(),
            c.view(),
            out.view_mut(),
        )
        .unwrap_err();
        assert!(e.message.contains("does not broadcast"), "{e}");
        let mut wrong = Tensor::zeros(DType::F32, &[3, 2]);
        let e = binary(
            &CpuContext::SINGLE,
            BinaryOp::Add,
            a.view(),
            b.view(),
            wrong.view_mut(),
        )
        .unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        let mut bo = Tensor::zeros(DType::F32, &[2, 3]);
        let e = compare(
            &CpuContext::SINGLE,
            CompareOp::Less,
            a.view(),
            b.view(),
            bo.view_mut(),
        )
        .unwrap_err();
        assert!(
            e.message.contains("out's dtype is f32 but must be bool"),
            "{e}"
        );
        // Rank above the maximum.
        let shape = [1usize; 9];
        let big = View {
            data: &a.data[..4],
            dtype: DType::F32,
            shape: &shape,
        };
        let e = unary(&CpuContext::SINGLE, UnaryOp::Neg, big, out.view_mut()).unwrap_err();
        assert!(e.message.contains("maximum rank"), "{e}");
        // Unary with different shapes.
        let e = unary(&CpuContext::SINGLE, UnaryOp::Neg, b.view(), out.view_mut()).unwrap_err();
        assert!(e.message.contains("must be equal"), "{e}");
    }

    #[test]
    fn misaligned_views_work() {
        let a = Tensor::sample(DType::F64, &[3, 5], 1);
        let b = Tensor::sample(DType::F64, &[5], 2);
        let mut want = Tensor::zeros(DType::F64, &[3, 5]);
        binary(
            &CpuContext::SINGLE,
            BinaryOp::Mul,
            a.view(),
            b.view(),
            want.view_mut(),
        )
        .unwrap();
        let mut abuf = vec![0u8; a.data.len() + 1];
        abuf[1..].copy_from_slice(&a.data);
        let mut obuf = vec![0u8; want.data.len() + 3];
        let av = View {
            data: &abuf[1..],
            ..a.view()
        };
        let ov = ViewMut {
            data: &mut obuf[3..],
            dtype: DType::F64,
            shape: &[3, 5],
        };
        binary(&CpuContext::SINGLE, BinaryOp::Mul, av, b.view(), ov).unwrap();
        assert_eq!(&obuf[3..], &want.data[..]);
    }

    #[test]
    fn threads_give_the_same_results() {
        let many = CpuContext { threads: 4 };
        for (sa, sb) in [
            (vec![300_001], vec![300_001]),
            (vec![300, 1001], vec![1001]),
            (vec![300, 1001], vec![300, 1]),
            (vec![1], vec![200_003]),
            (vec![77, 1, 997], vec![1, 5, 997]),
        ] {
            let so = broadcast_shape(&sa, &sb);
            let a = Tensor::sample(DType::F32, &sa, 1);
            let b = Tensor::sample(DType::F32, &sb, 2);
            let mut one = Tensor::zeros(DType::F32, &so);
            let mut par = Tensor::zeros(DType::F32, &so);
            binary(
                &CpuContext::SINGLE,
                BinaryOp::Sub,
                a.view(),
                b.view(),
                one.view_mut(),
            )
            .unwrap();
            binary(&many, BinaryOp::Sub, a.view(), b.view(), par.view_mut()).unwrap();
            assert_eq!(one.data, par.data, "{sa:?} {sb:?}");
            let want = ref_broadcast2(&a, &b, &so, |x, y| round_to(DType::F32, x - y));
            assert_close(&par, &want, "threaded sub");
            let c = Tensor::sample(DType::Bool, &sa, 3);
            select(
                &CpuContext::SINGLE,
                c.view(),
                a.view(),
                b.view(),
                one.view_mut(),
            )
            .unwrap();
            select(&many, c.view(), a.view(), b.view(), par.view_mut()).unwrap();
            assert_eq!(one.data, par.data, "select {sa:?} {sb:?}");
        }
        let a = Tensor::positive(DType::F64, &[100_000], 1);
        let mut one = Tensor::zeros(DType::F64, &[100_000]);
        let mut par = Tensor::zeros(DType::F64, &[100_000]);
        unary(&CpuContext::SINGLE, UnaryOp::Tanh, a.view(), one.view_mut()).unwrap();
        unary(&many, UnaryOp::Tanh, a.view(), par.view_mut()).unwrap();
        assert_eq!(one.data, par.data);
        let ins: Vec<Tensor> = (0..3)
            .map(|i| Tensor::sample(DType::I64, &[70_000], i))
            .collect();
        let views: Vec<View<'_>> = ins.iter().map(|t| t.view()).collect();
        let mut one = Tensor::zeros(DType::I64, &[70_000]);
        let mut par = Tensor::zeros(DType::I64, &[70_000]);
        add_n(&CpuContext::SINGLE, &views, one.view_mut()).unwrap();
        add_n(&many, &views, par.view_mut()).unwrap();
        assert_eq!(one.data, par.data);
    }
}
