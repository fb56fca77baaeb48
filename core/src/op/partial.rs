//! Partial shape inference: what a graph knows of a tensor before running — its dtype, its
//! rank, some of its dimensions — from what it knows of the op's inputs.
//!
//! A placeholder declared `f32 [-1, 784]` (a dynamic batch) has a known dtype and rank and one
//! dimension of unknown size (`-1`). Every basis op and composite has a rule that carries such
//! knowledge through: `MatMul(f32 [-1, 784], f32 [784, 128])` is `f32 [-1, 128]`, and inputs
//! that no size of the unknown dimensions could make right (`MatMul([-1, 784], [100, 10])`, an
//! `f32` added to an `i32`) are refused when the node is added. An op defined in text carries
//! it through its body's statements; an op a host built in code has its outputs' dtypes from
//! its signature, and their shapes once every input is fully known (its shape function takes
//! whole shapes only).
//!
//! The rules are sound: a dimension a rule gives is the one every run whose inputs fit the
//! partial specs produces, and a rule refuses only inputs no run could accept (tested against
//! the exact shape functions).

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::op::basis::{BINARY, COMPARE, REDUCE, UNARY};
use crate::op::shape;
use crate::op::{
    bind_types, check_arity, declared_dtype, smallvec, Attrs, InferContext, OpEntry, SmallVec,
    SpecRef, TensorSpec,
};
use crate::tensor::{DType, Shape, MAX_RANK};

/// What is known of a tensor before it exists: its dtype, and its shape with `-1` for a
/// dimension of unknown size — or nothing of the shape (not even the rank).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartialSpec {
    /// The element type, where known.
    pub dtype: Option<DType>,
    /// The dimensions (`-1`: unknown size), where the rank is known.
    pub shape: Option<Shape>,
}

impl PartialSpec {
    /// Nothing known.
    pub const UNKNOWN: PartialSpec = PartialSpec {
        dtype: None,
        shape: None,
    };

    /// A partial spec; `INVALID_ARGUMENT` for a rank above [`MAX_RANK`] or a dimension below
    /// `-1`.
    pub fn new(dtype: Option<DType>, shape: Option<&[i64]>) -> Result<PartialSpec> {
        let shape = match shape {
            Some(s) if s.iter().any(|&d| d < -1) => {
                return Err(Error::invalid_argument(format!(
                    "shape {s:?}: a dimension is a size ≥ 0, or -1 for an unknown size"
                )))
            }
            Some(s) => Some(Shape::from_slice(s)?),
            None => None,
        };
        Ok(PartialSpec { dtype, shape })
    }

    /// Everything known.
    pub fn full(spec: TensorSpec) -> PartialSpec {
        PartialSpec {
            dtype: Some(spec.dtype),
            shape: Some(spec.shape),
        }
    }

    /// The whole spec, when the dtype and every dimension are known.
    pub fn to_full(&self) -> Option<TensorSpec> {
        match (self.dtype, self.shape) {
            (Some(dtype), Some(shape)) if shape.iter().all(|&d| d >= 0) => {
                Some(TensorSpec { dtype, shape })
            }
            _ => None,
        }
    }

    /// Whether a tensor of `dtype` and `shape` fits: the known dtype, rank and dimensions.
    pub fn admits(&self, dtype: DType, shape: &[i64]) -> bool {
        self.dtype.is_none_or(|d| d == dtype)
            && self.shape.as_ref().is_none_or(|s| {
                s.len() == shape.len() && s.iter().zip(shape).all(|(&w, &d)| w == -1 || w == d)
            })
    }
}

/// `f32 [-1, 784]`; `? [2]` for an unknown dtype, `f32 (any shape)` for an unknown rank.
impl fmt::Display for PartialSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype {
            Some(d) => write!(f, "{d}")?,
            None => f.write_str("?")?,
        }
        match &self.shape {
            Some(s) => write!(f, " {:?}", &s[..]),
            None => f.write_str(" (any shape)"),
        }
    }
}

/// What a partial shape rule sees: the inputs as far as known (their dtypes passed the
/// signature's checks), and the complete attributes.
pub(crate) struct PartialContext<'a> {
    pub(crate) op: &'a str,
    pub(crate) inputs: &'a [PartialSpec],
    pub(crate) attrs: &'a Attrs,
}

impl PartialContext<'_> {
    /// An `InferContext` without inputs, for the shape module's attribute checks (they take
    /// the rank as an argument) and its error messages.
    fn attrs_only(&self) -> InferContext<'_> {
        InferContext {
            op: self.op,
            inputs: &[],
            attrs: self.attrs,
        }
    }

    fn error(&self, message: impl fmt::Display) -> Error {
        self.attrs_only().error(message)
    }
}

/// The outputs' shapes as far as known, one per output.
pub(crate) type Shapes = SmallVec<[Option<Shape>; 1]>;

/// A partial shape rule: what an op's outputs' shapes are, given partial inputs.
pub(crate) type PartialRule = Arc<dyn Fn(&PartialContext) -> Result<Shapes> + Send + Sync>;

impl OpEntry {
    /// What the op's outputs are, given what is known of its inputs; `INVALID_ARGUMENT`
    /// naming the op where no run could accept them. With every input fully known this is
    /// exactly what a run checks and infers.
    pub(crate) fn infer_partial(
        &self,
        inputs: &[PartialSpec],
        attrs: &Attrs,
    ) -> Result<SmallVec<[PartialSpec; 1]>> {
        let def = &self.def;
        let full: Option<Vec<TensorSpec>> = inputs.iter().map(PartialSpec::to_full).collect();
        if let Some(full) = full {
            let refs: Vec<SpecRef> = full.iter().map(SpecRef::from).collect();
            self.check_inputs(&refs)?;
            let complete = attrs.complete(&def.name, &def.attrs)?;
            let out = (def.shape_fn)(&InferContext {
                op: &def.name,
                inputs: &refs,
                attrs: &complete,
            })?;
            if self.check_specs {
                crate::op::check_specs(def, &refs, &complete, &out)?;
            }
            return Ok(out.into_iter().map(PartialSpec::full).collect());
        }
        check_arity(def, inputs.len())?;
        let bound = bind_types(def, inputs.len(), |i| inputs[i].dtype)?;
        let complete = attrs.complete(&def.name, &def.attrs)?;
        let shapes = match &self.partial {
            Some(rule) => {
                let shapes = rule(&PartialContext {
                    op: &def.name,
                    inputs,
                    attrs: &complete,
                })?;
                if shapes.len() != def.outputs.len() {
                    return Err(Error::internal(format!(
                        "{}: the partial shape rule gave {} output(s) of {}",
                        def.name,
                        shapes.len(),
                        def.outputs.len()
                    )));
                }
                shapes
            }
            None => smallvec![None; def.outputs.len()],
        };
        Ok(def
            .outputs
            .iter()
            .zip(shapes)
            .map(|(out, shape)| PartialSpec {
                dtype: declared_dtype(&out.ty, &complete, |v| bound.get(v)),
                shape,
            })
            .collect())
    }
}

/// The rule of a basis op or composite (by name: their names are the only ones without a
/// namespace); `None` for other names, and for Fill and Iota, which take no inputs (so
/// always have their outputs fully known).
pub(crate) fn basis_rule(name: &str) -> Option<PartialRule> {
    type RuleFn = fn(&PartialContext) -> Result<Shapes>;
    let rule: RuleFn = match name {
        n if BINARY.contains(&n) || COMPARE.contains(&n) => binary,
        n if UNARY.contains(&n) => same,
        n if REDUCE.contains(&n) => reduce,
        "Cast" | "Relu" | "Gelu" => same,
        "Softmax" | "LogSoftmax" => same_along_axis,
        "Select" => select,
        "MatMul" => matmul,
        "Gemm" => gemm,
        "BroadcastTo" => broadcast_to,
        "Reshape" => reshape,
        "Transpose" => transpose,
        "Concat" => concat,
        "Slice" => slice,
        "AddN" => add_n,
        _ => return None,
    };
    Some(Arc::new(rule))
}

fn one(shape: Option<Shape>) -> Result<Shapes> {
    Ok(smallvec![shape])
}

/// One dimension of a broadcast: `None` when the two cannot be broadcast whatever the unknown
/// sizes are. An unknown size against a known `n > 1` must be 1 or `n`: the result is `n`.
fn broadcast_dim(x: i64, y: i64) -> Option<i64> {
    match (x, y) {
        (x, y) if x == y => Some(x),
        (x, 1) => Some(x),
        (1, y) => Some(y),
        // One known size `n > 1` against an unknown one (which must be 1 or `n`).
        (-1, y) => Some(y),
        (x, -1) => Some(x),
        _ => None,
    }
}

/// NumPy broadcasting of two shapes with unknown sizes.
fn broadcast_dims(a: &[i64], b: &[i64]) -> Option<Shape> {
    let rank = a.len().max(b.len());
    let at = |s: &[i64], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    let mut out = Shape::scalar();
    for i in 0..rank {
        out.push(broadcast_dim(at(a, i), at(b, i))?).ok()?;
    }
    Some(out)
}

/// The inputs whose rank is known, combined left to right by `merge`; `None` when no input's
/// rank is known. Where `merge` finds two shapes that cannot go together, `refuse(first, acc,
/// i, shape)` says why: `first` is the first known input, `acc` what the ones before input `i`
/// combined to.
fn fold_known(
    cx: &PartialContext,
    merge: impl Fn(&Shape, &Shape) -> Option<Shape>,
    refuse: impl Fn(usize, &Shape, usize, &Shape) -> Error,
) -> Result<Option<Shape>> {
    let mut acc: Option<(usize, Shape)> = None;
    for (i, s) in cx.inputs.iter().enumerate() {
        let Some(s) = &s.shape else { continue };
        acc = Some(match acc {
            None => (i, *s),
            Some((first, shape)) => {
                let next = merge(&shape, s).ok_or_else(|| refuse(first, &shape, i, s))?;
                (first, next)
            }
        });
    }
    Ok(acc.map(|(_, s)| s))
}

/// The broadcast of every input whose rank is known (`names`: the operands, for messages);
/// unknown when one input's rank is.
fn broadcast_all(cx: &PartialContext, names: &[&str]) -> Result<Option<Shape>> {
    let name = |i: usize, or: &'static str| names.get(i).copied().unwrap_or(or);
    let shape = fold_known(
        cx,
        |a, b| broadcast_dims(a, b),
        |first, acc, i, s| {
            cx.error(format!(
                "shapes {:?} ('{}') and {:?} ('{}') cannot be broadcast together (-1: a size \
                 known only when the graph runs)",
                &acc[..],
                name(first, "x"),
                &s[..],
                name(i, "y"),
            ))
        },
    )?;
    let unknown_rank = cx.inputs.iter().any(|s| s.shape.is_none());
    Ok(shape.filter(|_| !unknown_rank))
}

fn binary(cx: &PartialContext) -> Result<Shapes> {
    one(broadcast_all(cx, &["x", "y"])?)
}

fn select(cx: &PartialContext) -> Result<Shapes> {
    one(broadcast_all(cx, &["condition", "x", "y"])?)
}

fn same(cx: &PartialContext) -> Result<Shapes> {
    one(cx.inputs[0].shape)
}

fn same_along_axis(cx: &PartialContext) -> Result<Shapes> {
    if let Some(s) = &cx.inputs[0].shape {
        shape::axes(&cx.attrs_only(), &[cx.attrs.int("axis")?], s.len(), "axis")?;
    }
    same(cx)
}

/// MatMul's product from `a` and `b` (rank ≥ 2 each where known).
fn product(cx: &PartialContext, a: Option<&Shape>, b: Option<&Shape>) -> Result<Option<Shape>> {
    for (s, name) in [(a, "a"), (b, "b")] {
        if let Some(s) = s.filter(|s| s.len() < 2) {
            return Err(cx.error(format!(
                "inputs must have rank >= 2, got '{name}' {:?}",
                &s[..]
            )));
        }
    }
    let (Some(a), Some(b)) = (a, b) else {
        return Ok(None);
    };
    let (ta, tb) = (cx.attrs.bool("transpose_a")?, cx.attrs.bool("transpose_b")?);
    let (ra, rb) = (a.len(), b.len());
    let (m, ka) = if ta {
        (a[ra - 1], a[ra - 2])
    } else {
        (a[ra - 2], a[ra - 1])
    };
    let (kb, n) = if tb {
        (b[rb - 1], b[rb - 2])
    } else {
        (b[rb - 2], b[rb - 1])
    };
    if ka != kb && ka != -1 && kb != -1 {
        return Err(cx.error(format!(
            "inner dimensions differ: 'a' {:?}{} has {ka}, 'b' {:?}{} has {kb}",
            &a[..],
            if ta { " (transposed)" } else { "" },
            &b[..],
            if tb { " (transposed)" } else { "" }
        )));
    }
    let mut shape = broadcast_dims(&a[..ra - 2], &b[..rb - 2]).ok_or_else(|| {
        cx.error(format!(
            "batch dimensions of 'a' {:?} and 'b' {:?} cannot be broadcast",
            &a[..],
            &b[..]
        ))
    })?;
    shape.push(m)?;
    shape.push(n)?;
    Ok(Some(shape))
}

fn matmul(cx: &PartialContext) -> Result<Shapes> {
    one(product(
        cx,
        cx.inputs[0].shape.as_ref(),
        cx.inputs[1].shape.as_ref(),
    )?)
}

/// Gemm: `a` and `b` are 2-D (so an unknown one is `[-1, -1]`), `c` broadcasts to `[m, n]`.
fn gemm(cx: &PartialContext) -> Result<Shapes> {
    let two_d = |i: usize, name: &str| -> Result<Shape> {
        match &cx.inputs[i].shape {
            Some(s) if s.len() != 2 => Err(cx.error(format!(
                "inputs 'a' and 'b' must be 2-D, got '{name}' {:?}",
                &s[..]
            ))),
            Some(s) => Ok(*s),
            None => Shape::from_slice(&[-1, -1]),
        }
    };
    let (a, b) = (two_d(0, "a")?, two_d(1, "b")?);
    let mn = product(cx, Some(&a), Some(&b))?.expect("both shapes are known");
    if let Some(c) = &cx.inputs[2].shape {
        let fits = c.len() <= 2
            && c.iter()
                .rev()
                .zip(mn.iter().rev())
                .all(|(&d, &t)| d == t || d == 1 || d == -1 || t == -1);
        if !fits {
            return Err(cx.error(format!(
                "input 'c' {:?} does not broadcast to the product's shape {:?}",
                &c[..],
                &mn[..]
            )));
        }
    }
    one(Some(mn))
}

fn reduce(cx: &PartialContext) -> Result<Shapes> {
    let keep = cx.attrs.bool("keep_dims")?;
    let Some(s) = &cx.inputs[0].shape else {
        // All axes, dropped: a scalar whatever the rank.
        let all = cx.attrs.ints("axes")?.is_empty();
        return one((all && !keep).then(Shape::scalar));
    };
    let axes = shape::reduce_axes(&cx.attrs_only(), s.len())?;
    let mut out = Shape::scalar();
    for (i, &d) in s.iter().enumerate() {
        match (axes.contains(&i), keep) {
            (true, true) => out.push(1)?,
            (true, false) => {}
            (false, _) => out.push(d)?,
        }
    }
    one(Some(out))
}

fn broadcast_to(cx: &PartialContext) -> Result<Shapes> {
    let target = cx.attrs.ints("shape")?;
    shape::check_shape(&cx.attrs_only(), "shape", target)?;
    if let Some(s) = &cx.inputs[0].shape {
        let fits = s.len() <= target.len()
            && s.iter()
                .rev()
                .zip(target.iter().rev())
                .all(|(&d, &t)| d == t || d == 1 || d == -1);
        if !fits {
            return Err(cx.error(format!(
                "shape {:?} cannot be broadcast to {:?}",
                &s[..],
                target
            )));
        }
    }
    one(Some(Shape::from_slice(target)?))
}

fn reshape(cx: &PartialContext) -> Result<Shapes> {
    let target = cx.attrs.ints("shape")?;
    let (wild, known) = shape::reshape_target(&cx.attrs_only(), target)?;
    // The input has `p · k` elements: `p` the product of its known dimensions, `k` of its
    // unknown ones (any size ≥ 0, so 0 too).
    let p: i64 = cx.inputs[0].shape.as_ref().map_or(1, |s| {
        s.iter()
            .filter(|&&d| d != -1)
            .fold(1i64, |p, &d| p.saturating_mul(d))
    });
    let possible = match wild {
        Some(_) => known != 0,
        None if p == 0 => known == 0,
        None => known % p == 0,
    };
    if !possible {
        return Err(cx.error(format!(
            "cannot reshape {} to {target:?} whatever the unknown sizes are",
            cx.inputs[0]
        )));
    }
    // The -1 of the target stays unknown: the element count is.
    one(Some(Shape::from_slice(target)?))
}

fn transpose(cx: &PartialContext) -> Result<Shapes> {
    let raw = cx.attrs.ints("perm")?;
    let Some(s) = &cx.inputs[0].shape else {
        if raw.is_empty() {
            return one(None);
        }
        // The permutation gives the rank.
        shape::perm(&cx.attrs_only(), raw.len())?;
        return one(Some(Shape::from_slice(&vec![-1; raw.len()])?));
    };
    let mut out = Shape::scalar();
    for i in shape::perm(&cx.attrs_only(), s.len())? {
        out.push(s[i])?;
    }
    one(Some(out))
}

fn concat(cx: &PartialContext) -> Result<Shapes> {
    let known: Vec<(usize, &Shape)> = cx
        .inputs
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.shape.as_ref().map(|s| (i, s)))
        .collect();
    let Some(&(first, shape0)) = known.first() else {
        return one(None);
    };
    let axis = shape::concat_axis(&cx.attrs_only(), shape0.len())?;
    let mut out = *shape0;
    for &(i, s) in &known[1..] {
        let merged = (s.len() == out.len())
            .then(|| merge_dims(&out, s, Some(axis)))
            .flatten();
        let Some(merged) = merged else {
            return Err(cx.error(format!(
                "input 'inputs[{i}]' has shape {:?}, which does not match 'inputs[{first}]' \
                 {:?} outside axis {axis}",
                &s[..],
                &shape0[..]
            )));
        };
        out = merged;
    }
    // The known sizes along the axis, summed (past i64::MAX no run could succeed); the
    // output's is that sum where every input's is known.
    let mut all_known = true;
    let mut sum = 0i64;
    for s in cx.inputs {
        match s.shape.as_ref().map(|s| s[axis]).filter(|&d| d != -1) {
            Some(d) => {
                sum = sum.checked_add(d).ok_or_else(|| {
                    cx.error(format!(
                        "the inputs' sizes along axis {axis} add up to more than {}",
                        i64::MAX
                    ))
                })?
            }
            None => all_known = false,
        }
    }
    out[axis] = if all_known { sum } else { -1 };
    one(Some(out))
}

/// Two shapes of one rank that must be equal (but at `except`): the known size of each
/// dimension; `None` where two known sizes differ.
fn merge_dims(a: &[i64], b: &[i64], except: Option<usize>) -> Option<Shape> {
    let mut out = Shape::scalar();
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let d = match (x, y) {
            _ if Some(i) == except => x,
            (x, y) if x == y => x,
            (-1, y) => y,
            (x, -1) => x,
            _ => return None,
        };
        out.push(d).ok()?;
    }
    Some(out)
}

fn add_n(cx: &PartialContext) -> Result<Shapes> {
    let shape = fold_known(
        cx,
        |a, b| {
            (a.len() == b.len())
                .then(|| merge_dims(a, b, None))
                .flatten()
        },
        |first, acc, i, s| {
            cx.error(format!(
                "input 'inputs[{i}]' has shape {:?} but 'inputs[{first}]' has {:?}; AddN does \
                 not broadcast",
                &s[..],
                &acc[..]
            ))
        },
    )?;
    // Every input has the output's shape: one known rank is enough.
    one(shape)
}

fn slice(cx: &PartialContext) -> Result<Shapes> {
    let (begin, size) = (cx.attrs.ints("begin")?, cx.attrs.ints("size")?);
    let rank = cx.inputs[0].shape.as_ref().map(|s| s.len());
    if begin.len() != size.len() || rank.is_some_and(|r| r != begin.len()) {
        return Err(cx.error(format!(
            "attributes 'begin' {begin:?} and 'size' {size:?} need one entry per axis of {}",
            cx.inputs[0]
        )));
    }
    if begin.len() > MAX_RANK {
        return Err(cx.error(format!(
            "attribute 'begin' has rank {} > {MAX_RANK}",
            begin.len()
        )));
    }
    let mut out = Shape::scalar();
    for i in 0..begin.len() {
        let (b, s) = (begin[i], size[i]);
        let d = cx.inputs[0].shape.as_ref().map_or(-1, |sh| sh[i]);
        let n = match (s, d) {
            (-1, -1) => -1,
            (-1, d) => d - b,
            (s, _) => s,
        };
        if b < 0 || (n < 0 && !(s == -1 && d == -1)) || (d != -1 && b.saturating_add(n) > d) {
            return Err(cx.error(format!(
                "slice begin {b} size {s} is out of bounds for axis {i} of size {}",
                if d == -1 {
                    "-1 (unknown)".into()
                } else {
                    d.to_string()
                }
            )));
        }
        out.push(n)?;
    }
    one(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::OpRegistry;
    use crate::testing::Mutator;

    /// Random inputs and attributes for the basis ops, valid or not: small dimensions (0 to
    /// 3), shapes often derived from one another so that many cases are valid.
    struct Gen(Mutator);

    impl Gen {
        fn below(&mut self, n: usize) -> usize {
            self.0.below(n)
        }
        fn chance(&mut self, percent: usize) -> bool {
            self.below(100) < percent
        }
        fn dim(&mut self) -> i64 {
            [0, 1, 1, 2, 2, 3, 3, 3][self.below(8)]
        }
        fn shape(&mut self, min_rank: usize, max_rank: usize) -> Vec<i64> {
            let rank = min_rank + self.below(max_rank - min_rank + 1);
            (0..rank).map(|_| self.dim()).collect()
        }
        /// `s` with some dimensions set to 1 or another size, some leading ones dropped.
        fn related(&mut self, s: &[i64]) -> Vec<i64> {
            let drop = if s.is_empty() { 0 } else { self.below(s.len()) };
            let mut out: Vec<i64> = s[if self.chance(30) { drop } else { 0 }..].to_vec();
            for d in out.iter_mut() {
                if self.chance(25) {
                    *d = 1;
                } else if self.chance(10) {
                    *d = self.dim();
                }
            }
            out
        }
        fn axes(&mut self, rank: usize) -> Vec<i64> {
            let r = rank as i64;
            (0..self.below(rank + 2))
                .map(|_| self.below(2 * rank + 3) as i64 - r - 1)
                .collect()
        }

        /// Inputs (dtype, shape) and attributes for `op`.
        fn case(&mut self, op: &str) -> (Vec<(DType, Vec<i64>)>, Attrs) {
            let f = DType::F32;
            let mut attrs = Attrs::new();
            let x = self.shape(0, 3);
            let inputs = match op {
                n if BINARY.contains(&n) || COMPARE.contains(&n) => {
                    let y = self.related(&x);
                    if self.chance(50) {
                        vec![(f, x), (f, y)]
                    } else {
                        vec![(f, y), (f, x)]
                    }
                }
                "Select" => {
                    let (c, y) = (self.related(&x), self.related(&x));
                    vec![(DType::Bool, c), (f, x), (f, y)]
                }
                "Cast" => {
                    attrs.set("dtype", DType::ALL[self.below(DType::ALL.len())]);
                    vec![(f, x)]
                }
                "Softmax" | "LogSoftmax" => {
                    attrs.set("axis", self.below(9) as i64 - 4);
                    vec![(f, x)]
                }
                "MatMul" | "Gemm" => {
                    let (ta, tb) = (self.chance(50), self.chance(50));
                    attrs.set("transpose_a", ta);
                    attrs.set("transpose_b", tb);
                    let gemm = op == "Gemm";
                    let (m, k, n) = (self.dim(), self.dim(), self.dim());
                    let k2 = if self.chance(80) { k } else { self.dim() };
                    let batch = if gemm { vec![] } else { self.shape(0, 2) };
                    let mut a = batch.clone();
                    a.extend(if ta { [k, m] } else { [m, k] });
                    let mut b = if gemm { vec![] } else { self.related(&batch) };
                    b.extend(if tb { [n, k2] } else { [k2, n] });
                    if self.chance(5) {
                        a.truncate(1);
                    }
                    let mut inputs = vec![(f, a), (f, b)];
                    if gemm {
                        let mut c = self.related(&[m, n]);
                        if self.chance(5) {
                            c.insert(0, 1);
                        }
                        inputs.push((f, c));
                    }
                    inputs
                }
                n if REDUCE.contains(&n) => {
                    attrs.set("axes", self.axes(x.len()));
                    attrs.set("keep_dims", self.chance(50));
                    vec![(f, x)]
                }
                "BroadcastTo" => {
                    let mut target = self.shape(0, 2);
                    target.extend(x.iter().map(|&d| if d == 1 { self.dim() } else { d }));
                    if self.chance(20) {
                        target = self.shape(0, 3);
                    }
                    attrs.set("shape", target);
                    vec![(f, x)]
                }
                "Reshape" => {
                    let count: i64 = x.iter().product();
                    let mut target = match self.below(3) {
                        0 => vec![count],
                        1 => vec![1, count, 1],
                        _ => self.shape(0, 3),
                    };
                    if !target.is_empty() && self.chance(40) {
                        let w = self.below(target.len());
                        target[w] = -1;
                    }
                    attrs.set("shape", target);
                    vec![(f, x)]
                }
                "Transpose" => {
                    let mut perm: Vec<i64> = (0..x.len() as i64).collect();
                    for i in (1..perm.len()).rev() {
                        perm.swap(i, self.below(i + 1));
                    }
                    if self.chance(20) {
                        perm.clear();
                    } else if self.chance(10) {
                        perm.push(0);
                    }
                    attrs.set("perm", perm);
                    vec![(f, x)]
                }
                "Concat" | "AddN" => {
                    let axis = self.below(2 * x.len() + 3) as i64 - x.len() as i64 - 1;
                    if op == "Concat" {
                        attrs.set("axis", axis);
                    }
                    let norm = if axis < 0 {
                        axis + x.len() as i64
                    } else {
                        axis
                    };
                    (0..1 + self.below(3))
                        .map(|_| {
                            let mut s = x.clone();
                            for (i, d) in s.iter_mut().enumerate() {
                                if (i as i64 == norm && op == "Concat") || self.chance(5) {
                                    *d = self.dim();
                                }
                            }
                            (f, s)
                        })
                        .collect()
                }
                "Slice" => {
                    let mut begin = Vec::new();
                    let mut size = Vec::new();
                    for &d in &x {
                        let b = self.below(d as usize + 2) as i64;
                        begin.push(b);
                        size.push(self.below((d - b).max(0) as usize + 3) as i64 - 1);
                    }
                    if self.chance(5) {
                        begin.push(0);
                    }
                    attrs.set("begin", begin);
                    attrs.set("size", size);
                    vec![(f, x)]
                }
                _ => vec![(f, x)],
            };
            (inputs, attrs)
        }

        /// `s` with part of it forgotten: dimensions, the rank, the dtype.
        fn forget(&mut self, dtype: DType, s: &[i64]) -> PartialSpec {
            let shape = if self.chance(15) {
                None
            } else {
                let dims: Vec<i64> = s
                    .iter()
                    .map(|&d| if self.chance(40) { -1 } else { d })
                    .collect();
                Some(Shape::from_slice(&dims).unwrap())
            };
            PartialSpec {
                dtype: (!self.chance(15)).then_some(dtype),
                shape,
            }
        }
    }

    /// Soundness against the exact shape functions: for random inputs a run accepts, the same
    /// inputs with part of them forgotten are accepted too, and every output dimension and
    /// dtype the partial rule claims is the one the run has.
    #[test]
    fn partial_rules_agree_with_the_exact_shape_functions() {
        let reg = OpRegistry::with_basis();
        let mut gen = Gen(Mutator::new(0x5eed_5a9e));
        for name in reg.names() {
            let op = reg.find(&name).unwrap();
            if op.def().inputs.is_empty() {
                assert!(op.0.partial.is_none(), "{name}");
                continue;
            }
            assert!(op.0.partial.is_some(), "{name} has no partial rule");
            let (mut valid, mut partial_known) = (0, 0);
            for _ in 0..600 {
                let (inputs, attrs) = gen.case(&name);
                let full: Vec<PartialSpec> = inputs
                    .iter()
                    .map(|(d, s)| PartialSpec::new(Some(*d), Some(s)).unwrap())
                    .collect();
                let Ok(exact) = op.0.infer_partial(&full, &attrs) else {
                    continue;
                };
                valid += 1;
                for _ in 0..6 {
                    let forgotten: Vec<PartialSpec> =
                        inputs.iter().map(|(d, s)| gen.forget(*d, s)).collect();
                    let got = op.0.infer_partial(&forgotten, &attrs).unwrap_or_else(|e| {
                        panic!("{name} {attrs:?}: {forgotten:?} refused ({e}), {inputs:?} runs")
                    });
                    for (g, e) in got.iter().zip(&exact) {
                        let e = e.to_full().unwrap();
                        assert!(
                            g.admits(e.dtype, &e.shape),
                            "{name} {attrs:?}: {forgotten:?} gives {g}, {inputs:?} gives {e:?}"
                        );
                        partial_known += usize::from(g.shape.is_some());
                    }
                }
            }
            assert!(valid >= 50, "{name}: only {valid} valid cases");
            assert!(partial_known > 0, "{name}: nothing ever inferred");
        }
    }

    fn spec(dtype: DType, shape: &[i64]) -> PartialSpec {
        PartialSpec::new(Some(dtype), Some(shape)).unwrap()
    }

    fn infer(op: &str, inputs: &[PartialSpec], attrs: &Attrs) -> Result<PartialSpec> {
        let reg = OpRegistry::with_basis();
        Ok(reg.find(op)?.0.infer_partial(inputs, attrs)?[0])
    }

    /// What a dynamic batch carries through, and the mistakes refused although a size is
    /// unknown.
    #[test]
    fn unknown_sizes_are_carried_through_and_certain_mistakes_refused() {
        let f = DType::F32;
        let none = Attrs::new();
        let x = spec(f, &[-1, 784]);
        let h = infer("MatMul", &[x, spec(f, &[784, 128])], &none).unwrap();
        assert_eq!(h, spec(f, &[-1, 128]));
        assert_eq!(
            infer("Add", &[h, spec(f, &[128])], &none).unwrap(),
            spec(f, &[-1, 128])
        );
        let e = infer("MatMul", &[x, spec(f, &[100, 10])], &none).unwrap_err();
        assert_eq!(
            e.message,
            "MatMul: inner dimensions differ: 'a' [-1, 784] has 784, 'b' [100, 10] has 100"
        );
        let e = infer("Add", &[spec(f, &[-1, 3]), spec(f, &[4])], &none).unwrap_err();
        assert!(e.message.contains("cannot be broadcast"), "{}", e.message);
        // A dtype mismatch is known without any shape.
        let e = infer(
            "Add",
            &[
                PartialSpec::new(Some(f), None).unwrap(),
                spec(DType::I32, &[2]),
            ],
            &none,
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "Add: input 'y' is i32 but 'x' is f32; both have type T"
        );
        // An unknown size against 1 stays unknown; against 3 it must be 3.
        assert_eq!(
            infer("Mul", &[spec(f, &[-1, -1]), spec(f, &[1, 3])], &none).unwrap(),
            spec(f, &[-1, 3])
        );
        // Reductions: all axes dropped is a scalar whatever the rank.
        let any = PartialSpec::new(Some(f), None).unwrap();
        assert_eq!(infer("ReduceSum", &[any], &none).unwrap(), spec(f, &[]));
        let keep = Attrs::new()
            .with("axes", vec![1i64])
            .with("keep_dims", true);
        assert_eq!(infer("ReduceMax", &[x], &keep).unwrap(), spec(f, &[-1, 1]));
        // Reshape keeps the target's -1 unknown; an impossible count is refused.
        let r = Attrs::new().with("shape", vec![-1i64, 28, 28]);
        assert_eq!(infer("Reshape", &[x], &r).unwrap(), spec(f, &[-1, 28, 28]));
        let r = Attrs::new().with("shape", vec![5i64, 5]);
        let e = infer("Reshape", &[x], &r).unwrap_err();
        assert!(
            e.message.contains("cannot reshape f32 [-1, 784]"),
            "{}",
            e.message
        );
        // Cast: the dtype from the attribute, the shape as it was.
        let c = Attrs::new().with("dtype", DType::F16);
        assert_eq!(
            infer("Cast", &[x], &c).unwrap(),
            spec(DType::F16, &[-1, 784])
        );
        // Concat along the batch: unknown; across: summed.
        let cat = Attrs::new().with("axis", 1i64);
        assert_eq!(
            infer("Concat", &[x, spec(f, &[-1, 16])], &cat).unwrap(),
            spec(f, &[-1, 800])
        );
        // Transpose of an unknown rank with a permutation: the rank is the permutation's.
        let t = Attrs::new().with("perm", vec![1i64, 0]);
        assert_eq!(infer("Transpose", &[any], &t).unwrap(), spec(f, &[-1, -1]));
        assert_eq!(x.to_string(), "f32 [-1, 784]");
        assert_eq!(PartialSpec::UNKNOWN.to_string(), "? (any shape)");
    }
}
