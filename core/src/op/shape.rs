//! Shape functions of the basis ops, and the broadcasting rule (NumPy's).

use crate::error::{Error, Result};
use crate::op::{smallvec, InferContext, Specs, TensorSpec};

use crate::tensor::{DType, Shape, MAX_RANK};

/// NumPy broadcasting of two shapes; `None` when they are incompatible.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let mut out = vec![0i64; a.len().max(b.len())];
    broadcast_into(a, b, &mut out)?;
    Some(out)
}

/// [`broadcast_shapes`] writing into `out`, which has the larger rank of the two.
fn broadcast_into(a: &[i64], b: &[i64], out: &mut [i64]) -> Option<()> {
    let rank = out.len();
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(())
}

/// The broadcast shape of all inputs (no allocation).
#[inline]
fn broadcast_all(cx: &InferContext, names: &[&str]) -> Result<Shape> {
    let first = cx.inputs[0].shape;
    // An element loop, not `==` on slices (a `memcmp` call): shapes are a few dimensions.
    let same = |s: &[i64]| s.len() == first.len() && s.iter().zip(first).all(|(x, y)| x == y);
    if first.len() <= MAX_RANK && cx.inputs[1..].iter().all(|s| same(s.shape)) {
        // The common eager case: every input has the same shape.
        return Ok(Shape::from_slice(first).unwrap_or_default());
    }
    broadcast_general(cx, names)
}

#[inline(never)]
fn broadcast_general(cx: &InferContext, names: &[&str]) -> Result<Shape> {
    let mut shape = Shape::from_slice(cx.inputs[0].shape).map_err(|e| cx.error(e.message))?;
    for (i, s) in cx.inputs.iter().enumerate().skip(1) {
        if s.shape == &*shape {
            continue;
        }
        let prev = shape;
        let mut next = Shape::from_slice(if s.shape.len() > prev.len() {
            s.shape
        } else {
            &prev
        })
        .map_err(|e| cx.error(e.message))?;
        shape = broadcast_into(&prev, s.shape, &mut next)
            .map(|()| next)
            .ok_or_else(|| {
                cx.error(format!(
                    "shapes {:?} ('{}') and {:?} ('{}') cannot be broadcast together",
                    cx.inputs[0].shape,
                    names.first().copied().unwrap_or("x"),
                    s.shape,
                    names.get(i).copied().unwrap_or("y")
                ))
            })?;
    }
    Ok(shape)
}

pub(crate) fn binary(cx: &InferContext) -> Result<Specs> {
    Ok(smallvec![TensorSpec {
        dtype: cx.inputs[0].dtype,
        shape: broadcast_all(cx, &["x", "y"])?,
    }])
}

pub(crate) fn compare(cx: &InferContext) -> Result<Specs> {
    Ok(smallvec![TensorSpec {
        dtype: DType::Bool,
        shape: broadcast_all(cx, &["x", "y"])?,
    }])
}

pub(crate) fn select(cx: &InferContext) -> Result<Specs> {
    Ok(smallvec![TensorSpec {
        dtype: cx.inputs[1].dtype,
        shape: broadcast_all(cx, &["condition", "x", "y"])?,
    }])
}

pub(crate) fn same(cx: &InferContext) -> Result<Specs> {
    Ok(smallvec![cx.inputs[0].to_spec()?])
}

/// [`same`], for ops that work along one axis of their input (`axis`, negative counting from
/// the end): the axis is checked here, before any device runs the op, so that every device
/// and every decomposition refuses it alike.
pub(crate) fn same_along_axis(cx: &InferContext) -> Result<Specs> {
    let axis = cx.attrs.int("axis")?;
    axes(cx, &[axis], cx.inputs[0].shape.len(), "axis")?;
    same(cx)
}

pub(crate) fn cast(cx: &InferContext) -> Result<Specs> {
    Ok(smallvec![TensorSpec::new(
        cx.attrs.dtype("dtype")?,
        cx.inputs[0].shape
    )?])
}

pub(crate) fn add_n(cx: &InferContext) -> Result<Specs> {
    let first = &cx.inputs[0];
    for (i, s) in cx.inputs.iter().enumerate().skip(1) {
        if s.shape != first.shape {
            return Err(cx.error(format!(
                "input 'inputs[{i}]' has shape {:?} but 'inputs[0]' has {:?}; AddN does not broadcast",
                s.shape, first.shape
            )));
        }
    }
    Ok(smallvec![first.to_spec()?])
}

pub(crate) fn matmul(cx: &InferContext) -> Result<Specs> {
    let (a, b) = (cx.inputs[0].shape, cx.inputs[1].shape);
    if a.len() < 2 || b.len() < 2 {
        return Err(cx.error(format!(
            "inputs must have rank >= 2, got 'a' {:?} and 'b' {:?}",
            a, b
        )));
    }
    let (ta, tb) = (cx.attrs.bool("transpose_a")?, cx.attrs.bool("transpose_b")?);
    let (m, ka) = if ta {
        (a[a.len() - 1], a[a.len() - 2])
    } else {
        (a[a.len() - 2], a[a.len() - 1])
    };
    let (kb, n) = if tb {
        (b[b.len() - 1], b[b.len() - 2])
    } else {
        (b[b.len() - 2], b[b.len() - 1])
    };
    if ka != kb {
        return Err(cx.error(format!(
            "inner dimensions differ: 'a' {:?}{} has {ka}, 'b' {:?}{} has {kb}",
            a,
            if ta { " (transposed)" } else { "" },
            b,
            if tb { " (transposed)" } else { "" }
        )));
    }
    let batch = broadcast_shapes(&a[..a.len() - 2], &b[..b.len() - 2]).ok_or_else(|| {
        cx.error(format!(
            "batch dimensions of 'a' {:?} and 'b' {:?} cannot be broadcast",
            a, b
        ))
    })?;
    let mut shape = batch;
    shape.extend([m, n]);
    Ok(smallvec![
        TensorSpec::new(cx.inputs[0].dtype, &shape).map_err(|e| cx.error(e.message))?
    ])
}

/// Gemm: 2-D `a` and `b` as for MatMul; `c` broadcasts to the product's `[m, n]` (rank at
/// most 2, each dimension equal to the product's or 1).
pub(crate) fn gemm(cx: &InferContext) -> Result<Specs> {
    let (a, b, c) = (cx.inputs[0].shape, cx.inputs[1].shape, cx.inputs[2].shape);
    if a.len() != 2 || b.len() != 2 {
        return Err(cx.error(format!(
            "inputs 'a' and 'b' must be 2-D, got {a:?} and {b:?}"
        )));
    }
    let out = matmul(cx)?;
    let mn = &out[0].shape;
    let fits = c.len() <= 2
        && c.iter()
            .rev()
            .zip(mn.iter().rev())
            .all(|(&d, &t)| d == t || d == 1);
    if !fits {
        return Err(cx.error(format!(
            "input 'c' {c:?} does not broadcast to the product's shape {:?}",
            &mn[..]
        )));
    }
    Ok(out)
}

/// Normalizes possibly negative axes against `rank`: sorted, unique, in range.
pub(crate) fn axes(cx: &InferContext, raw: &[i64], rank: usize, what: &str) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(raw.len());
    for &a in raw {
        let r = rank as i64;
        let n = if a < 0 { a + r } else { a };
        if n < 0 || n >= r {
            return Err(cx.error(format!("{what} {a} is out of range for rank {rank}")));
        }
        if let Some(j) = out.iter().position(|&o| o == n as usize) {
            let first = raw[j];
            return Err(cx.error(if first == a {
                format!("{what} {a} appears twice")
            } else {
                format!("{what} {first} and {what} {a} are the same axis ({n}) of rank {rank}")
            }));
        }
        out.push(n as usize);
    }
    out.sort_unstable();
    Ok(out)
}

/// The axes a reduction of an input of `rank` runs over (`axes = []` means all of them).
pub(crate) fn reduce_axes(cx: &InferContext, rank: usize) -> Result<Vec<usize>> {
    let raw = cx.attrs.ints("axes")?;
    if raw.is_empty() {
        return Ok((0..rank).collect());
    }
    axes(cx, raw, rank, "axis")
}

pub(crate) fn reduce(cx: &InferContext) -> Result<Specs> {
    let axes = reduce_axes(cx, cx.inputs[0].shape.len())?;
    let keep = cx.attrs.bool("keep_dims")?;
    let mut shape = Shape::scalar();
    for (i, d) in cx.inputs[0].shape.iter().enumerate() {
        match (axes.contains(&i), keep) {
            (true, true) => shape.push(1)?,
            (true, false) => {}
            (false, _) => shape.push(*d)?,
        }
    }
    Ok(smallvec![TensorSpec {
        dtype: cx.inputs[0].dtype,
        shape,
    }])
}

/// Checks a shape attribute: rank, dimensions ≥ 0, element count.
pub(crate) fn check_shape(cx: &InferContext, name: &str, shape: &[i64]) -> Result<()> {
    if shape.len() > MAX_RANK {
        return Err(cx.error(format!(
            "attribute '{name}' has rank {} > {MAX_RANK}",
            shape.len()
        )));
    }
    if let Some(d) = shape.iter().find(|d| **d < 0) {
        return Err(cx.error(format!(
            "attribute '{name}' {:?} has the negative dimension {d}",
            shape
        )));
    }
    crate::tensor::num_elements(shape).map_err(|e| cx.error(e.message))?;
    Ok(())
}

pub(crate) fn broadcast_to(cx: &InferContext) -> Result<Specs> {
    let target = cx.attrs.ints("shape")?;
    check_shape(cx, "shape", target)?;
    match broadcast_shapes(cx.inputs[0].shape, target) {
        Some(s) if s == target => Ok(smallvec![TensorSpec::new(cx.inputs[0].dtype, target)?]),
        _ => Err(cx.error(format!(
            "shape {:?} cannot be broadcast to {:?}",
            cx.inputs[0].shape, target
        ))),
    }
}

/// Checks Reshape's `shape` attribute (rank, at most one -1 and no other negative) and returns
/// the position of its -1, if any, and the product of its other dimensions.
pub(crate) fn reshape_target(cx: &InferContext, shape: &[i64]) -> Result<(Option<usize>, i64)> {
    if shape.len() > MAX_RANK {
        return Err(cx.error(format!(
            "attribute 'shape' has rank {} > {MAX_RANK}",
            shape.len()
        )));
    }
    let mut wild = (0..shape.len()).filter(|&i| shape[i] == -1);
    let first = wild.next();
    if wild.next().is_some() || shape.iter().any(|d| *d < -1) {
        return Err(cx.error(format!(
            "attribute 'shape' {:?} may hold one -1 and no other negative",
            shape
        )));
    }
    let known = shape
        .iter()
        .filter(|d| **d != -1)
        .try_fold(1i64, |p, &d| p.checked_mul(d))
        .ok_or_else(|| cx.error(format!("attribute 'shape' {shape:?} has too many elements")))?;
    Ok((first, known))
}

pub(crate) fn reshape(cx: &InferContext) -> Result<Specs> {
    let input = &cx.inputs[0];
    let count: i64 = input.shape.iter().product();
    let mut shape = cx.attrs.ints("shape")?.to_vec();
    let (wild, known) = reshape_target(cx, &shape)?;
    if let Some(w) = wild {
        if known == 0 || count % known != 0 {
            return Err(cx.error(format!(
                "cannot reshape {:?} ({count} elements) to {:?}",
                input.shape, shape
            )));
        }
        shape[w] = count / known;
    } else if known != count {
        return Err(cx.error(format!(
            "cannot reshape {:?} ({count} elements) to {:?}",
            input.shape, shape
        )));
    }
    Ok(smallvec![TensorSpec::new(input.dtype, &shape)?])
}

/// The permutation of a transpose of an input of `rank` (`perm = []` reverses the axes).
pub(crate) fn perm(cx: &InferContext, rank: usize) -> Result<Vec<usize>> {
    let raw = cx.attrs.ints("perm")?;
    if raw.is_empty() {
        return Ok((0..rank).rev().collect());
    }
    if raw.len() != rank {
        return Err(cx.error(format!(
            "attribute 'perm' {:?} has {} entries for rank {rank}",
            raw,
            raw.len()
        )));
    }
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(rank);
    for &p in raw {
        if p < 0 || p as usize >= rank || seen[p as usize] {
            return Err(cx.error(format!(
                "attribute 'perm' {:?} is not a permutation of 0..{rank}",
                raw
            )));
        }
        seen[p as usize] = true;
        out.push(p as usize);
    }
    Ok(out)
}

pub(crate) fn transpose(cx: &InferContext) -> Result<Specs> {
    let p = perm(cx, cx.inputs[0].shape.len())?;
    let mut shape = Shape::scalar();
    for &i in &p {
        shape.push(cx.inputs[0].shape[i])?;
    }
    Ok(smallvec![TensorSpec {
        dtype: cx.inputs[0].dtype,
        shape,
    }])
}

/// The concat axis of inputs of `rank`, normalized.
pub(crate) fn concat_axis(cx: &InferContext, rank: usize) -> Result<usize> {
    if rank == 0 {
        return Err(cx.error("inputs must have rank >= 1 to be concatenated"));
    }
    Ok(axes(cx, &[cx.attrs.int("axis")?], rank, "axis")?[0])
}

pub(crate) fn concat(cx: &InferContext) -> Result<Specs> {
    let axis = concat_axis(cx, cx.inputs[0].shape.len())?;
    let first = cx.inputs[0].shape;
    let mut shape = first.to_vec();
    for (i, s) in cx.inputs.iter().enumerate().skip(1) {
        let fits = s.shape.len() == first.len()
            && s.shape
                .iter()
                .zip(first.iter())
                .enumerate()
                .all(|(d, (x, y))| d == axis || x == y);
        if !fits {
            return Err(cx.error(format!(
                "input 'inputs[{i}]' has shape {:?}, which does not match 'inputs[0]' {:?} outside axis {axis}",
                s.shape, first
            )));
        }
        shape[axis] = shape[axis].checked_add(s.shape[axis]).ok_or_else(|| {
            cx.error(format!(
                "the inputs' sizes along axis {axis} add up to more than {}",
                i64::MAX
            ))
        })?;
    }
    Ok(smallvec![TensorSpec::new(cx.inputs[0].dtype, &shape)?])
}

/// The slice's start and size per axis (`size -1` = to the end).
pub(crate) fn slice_bounds(cx: &InferContext) -> Result<(Vec<usize>, Vec<i64>)> {
    let shape = cx.inputs[0].shape;
    let (begin, size) = (cx.attrs.ints("begin")?, cx.attrs.ints("size")?);
    if begin.len() != shape.len() || size.len() != shape.len() {
        return Err(cx.error(format!(
            "attributes 'begin' {:?} and 'size' {:?} need one entry per axis of {:?}",
            begin, size, shape
        )));
    }
    let mut starts = Vec::with_capacity(shape.len());
    let mut sizes = Vec::with_capacity(shape.len());
    for i in 0..shape.len() {
        let (b, s, d) = (begin[i], size[i], shape[i]);
        let s = if s == -1 { d - b } else { s };
        if b < 0 || s < 0 || b.saturating_add(s) > d {
            return Err(cx.error(format!(
                "slice begin {} size {} is out of bounds for axis {i} of size {d}",
                begin[i], size[i]
            )));
        }
        starts.push(b as usize);
        sizes.push(s);
    }
    Ok((starts, sizes))
}

pub(crate) fn slice(cx: &InferContext) -> Result<Specs> {
    let (_, sizes) = slice_bounds(cx)?;
    Ok(smallvec![TensorSpec::new(cx.inputs[0].dtype, &sizes)?])
}

pub(crate) fn fill(cx: &InferContext) -> Result<Specs> {
    let shape = cx.attrs.ints("shape")?;
    check_shape(cx, "shape", shape)?;
    Ok(smallvec![TensorSpec::new(cx.attrs.dtype("dtype")?, shape)?])
}

pub(crate) fn iota(cx: &InferContext) -> Result<Specs> {
    let out = fill(cx)?;
    let rank = out[0].shape.len();
    if rank == 0 {
        return Err(cx.error("attribute 'shape' must have rank >= 1"));
    }
    axes(cx, &[cx.attrs.int("axis")?], rank, "axis")?;
    if out[0].dtype == DType::Bool {
        return Err(Error::invalid_argument(format!(
            "{}: dtype bool is not allowed",
            cx.op
        )));
    }
    Ok(out)
}
