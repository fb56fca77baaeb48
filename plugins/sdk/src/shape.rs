//! Shape helpers for kernels: NumPy broadcasting, reductions over axes, element counts.
//!
//! The runtime's ops follow NumPy's rules, and `devplug check` tests the edge cases: rank-0
//! tensors, dimensions of size 0 and 1, broadcasting in both directions, negative axes,
//! `keep_dims`. These helpers implement the rules once, with the runtime's error wording, so a
//! kernel checks its shapes and walks its tensors without writing them again:
//!
//! - [`num_elements`]: the element count of a shape, checked (negative dimensions, overflow);
//! - [`broadcast_shapes`] / [`broadcast_all`]: the broadcast shape of two / several shapes;
//! - [`Broadcast`]: a plan for an elementwise op, the output walked in row-major order with
//!   each input's element offset, in **runs** (innermost stretches with a constant stride per
//!   input), so the kernel's inner loop is a plain loop;
//! - [`reduce_axes`] / [`reduced_shape`]: a reduction's `axes` attribute normalized, and its
//!   output shape (with or without `keep_dims`);
//! - [`Reduction`]: a plan for a reduction: for each output element, the input elements it
//!   reduces over, again in runs.
//!
//! Offsets and lengths count **elements**, not bytes (multiply by the dtype's size). The
//! tensors are dense and row-major, as the host passes them. Errors are
//! [`Status::InvalidArgument`](crate::Status::InvalidArgument) with a message in the runtime's
//! words; add the op's name with [`Error::context`].
//!
//! An elementwise kernel (`z = x + y`, f32, on host-addressable memory):
//!
//! ```
//! use devplug_plugin_sdk::shape::Broadcast;
//! # fn main() -> devplug_plugin_sdk::Result<()> {
//! let (x, y) = ([1f32, 2., 3., 4., 5., 6.], [10f32, 20., 30.]);
//! let mut z = [0f32; 6];
//! // Checks that the output is exactly the broadcast of the inputs ([2, 3] + [3] -> [2, 3]).
//! let plan = Broadcast::exact(&[2, 3], [&[2, 3], &[3]])?;
//! plan.for_each_run(|run| {
//!     let (zs, [xs, ys]) = (&mut z[run.out..run.out + run.len], run.strides);
//!     for (i, z) in zs.iter_mut().enumerate() {
//!         *z = x[run.offsets[0] + i * xs] + y[run.offsets[1] + i * ys];
//!     }
//! });
//! assert_eq!(z, [11., 22., 33., 14., 25., 36.]);
//! # Ok(())
//! # }
//! ```
//!
//! A reduction (`ReduceSum` over `axes = [0]`, `keep_dims = false`):
//!
//! ```
//! use devplug_plugin_sdk::shape::Reduction;
//! # fn main() -> devplug_plugin_sdk::Result<()> {
//! let x = [1f32, 2., 3., 4., 5., 6.]; // [2, 3]
//! let plan = Reduction::new(&[2, 3], &[0], false)?;
//! assert_eq!(plan.out_shape(), &[3]);
//! let mut y = vec![0f32; plan.out_len()];
//! plan.for_each_output(|out, group| {
//!     let mut sum = 0f32;
//!     group.for_each_run(|offset, len, stride| {
//!         for i in 0..len {
//!             sum += x[offset + i * stride];
//!         }
//!     });
//!     y[out] = sum; // a mean divides by group.len(), which may be 0
//! });
//! assert_eq!(y, [5., 7., 9.]);
//! # Ok(())
//! # }
//! ```

use std::ops::Range;

use crate::error::{Error, Result};

/// The number of elements of `shape` (1 for rank 0, 0 when a dimension is 0).
///
/// `INVALID_ARGUMENT` when a dimension is negative or the product of the dimensions (of the
/// non-zero ones, so that every shape this accepts has strides that fit) overflows `usize`.
pub fn num_elements(shape: &[i64]) -> Result<usize> {
    let mut n = 1usize;
    let mut empty = false;
    for (i, &d) in shape.iter().enumerate() {
        let d = usize::try_from(d).map_err(|_| {
            Error::invalid_argument(format!("dimension {i} of shape {shape:?} is negative"))
        })?;
        if d == 0 {
            empty = true;
        } else {
            n = n.checked_mul(d).ok_or_else(|| {
                Error::invalid_argument(format!("shape {shape:?} has too many elements"))
            })?;
        }
    }
    Ok(if empty { 0 } else { n })
}

/// The NumPy broadcast of `a` and `b`: aligned at the last dimension, each pair of dimensions
/// equal or one of them 1 (`[2, 3]` and `[3]` give `[2, 3]`, `[4, 1]` and `[1, 5]` give
/// `[4, 5]`, `[0, 1]` and `[3]` give `[0, 3]`, `[]` and `s` give `s`).
///
/// `INVALID_ARGUMENT` `shapes [2, 3] and [2] cannot be broadcast together` when they do not
/// broadcast, or when a dimension is negative.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Result<Vec<i64>> {
    check_dims(a)?;
    check_dims(b)?;
    broadcast_pair(a, b).ok_or_else(|| {
        Error::invalid_argument(format!(
            "shapes {a:?} and {b:?} cannot be broadcast together"
        ))
    })
}

/// The NumPy broadcast of all of `shapes` (`[]` for none).
///
/// `INVALID_ARGUMENT` naming the first two shapes that do not broadcast (and, with more than
/// two shapes, their positions: `shapes [2, 3] and [4] cannot be broadcast together (inputs 0
/// and 2)`), or a negative dimension.
pub fn broadcast_all(shapes: &[&[i64]]) -> Result<Vec<i64>> {
    let mut out: Vec<i64> = Vec::new();
    for (i, s) in shapes.iter().enumerate() {
        check_dims(s)?;
        match broadcast_pair(&out, s) {
            Some(next) => out = next,
            None => {
                // Pairwise compatible shapes are compatible together, so an earlier shape
                // conflicts with this one: name it.
                let j = (0..i)
                    .find(|&j| broadcast_pair(shapes[j], s).is_none())
                    .unwrap_or(0);
                let which = if shapes.len() > 2 {
                    format!(" (inputs {j} and {i})")
                } else {
                    String::new()
                };
                return Err(Error::invalid_argument(format!(
                    "shapes {:?} and {s:?} cannot be broadcast together{which}",
                    shapes[j]
                )));
            }
        }
    }
    Ok(out)
}

fn check_dims(shape: &[i64]) -> Result<()> {
    match shape.iter().position(|&d| d < 0) {
        Some(i) => Err(Error::invalid_argument(format!(
            "dimension {i} of shape {shape:?} is negative"
        ))),
        None => Ok(()),
    }
}

fn broadcast_pair(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[i64], i: usize| {
        if i + s.len() >= rank {
            s[i + s.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// Normalizes a reduction's `axes` attribute against `rank`: negative axes count from the
/// end (`-1` is the last), the result is sorted; `[]` means every axis (`0..rank`, none for
/// rank 0).
///
/// `INVALID_ARGUMENT` in the runtime's words: `axis 2 is out of range for rank 2`,
/// `axis 1 appears twice`, `axis 1 and axis -1 are the same axis (1) of rank 2`.
pub fn reduce_axes(rank: usize, axes: &[i64]) -> Result<Vec<usize>> {
    if axes.is_empty() {
        return Ok((0..rank).collect());
    }
    let r = i64::try_from(rank)
        .map_err(|_| Error::invalid_argument(format!("rank {rank} is too large")))?;
    let mut out: Vec<usize> = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = if a < 0 { a.checked_add(r) } else { Some(a) };
        let n = match n {
            Some(n) if (0..r).contains(&n) => n as usize,
            _ => {
                return Err(Error::invalid_argument(format!(
                    "axis {a} is out of range for rank {rank}"
                )))
            }
        };
        if let Some(j) = out.iter().position(|&o| o == n) {
            let first = axes[j];
            return Err(Error::invalid_argument(if first == a {
                format!("axis {a} appears twice")
            } else {
                format!("axis {first} and axis {a} are the same axis ({n}) of rank {rank}")
            }));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

/// The output shape of a reduction of `shape` over `axes` (normalized: from [`reduce_axes`]):
/// the reduced dimensions dropped, or kept as 1 with `keep_dims` (`[2, 3]` over `[1]`: `[2]`,
/// or `[2, 1]`). Axes out of range are ignored.
pub fn reduced_shape(shape: &[i64], axes: &[usize], keep_dims: bool) -> Vec<i64> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keep_dims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Row-major element strides of `shape` (which [`num_elements`] accepted).
fn contiguous_strides(shape: &[i64]) -> Vec<usize> {
    let mut s = vec![0usize; shape.len()];
    let mut acc = 1usize;
    for (st, &d) in s.iter_mut().zip(shape).rev() {
        *st = acc;
        acc = acc.wrapping_mul(d as usize);
    }
    s
}

/// Row-major iteration over a shape with `N` strided operands: dimensions of size 1 dropped,
/// adjacent dimensions that are contiguous for every operand merged (so the innermost run is
/// as long as it can be).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Walk<const N: usize> {
    /// At least one dimension (`[1]` for a single element, `[0]` for none).
    dims: Vec<usize>,
    strides: Vec<[usize; N]>,
    len: usize,
}

impl<const N: usize> Walk<N> {
    /// `dims`: (size, each operand's stride) in row-major order; the product of the sizes
    /// fits in `usize`.
    fn new(dims: impl IntoIterator<Item = (usize, [usize; N])>) -> Walk<N> {
        let mut w = Walk {
            dims: Vec::new(),
            strides: Vec::new(),
            len: 1,
        };
        for (size, st) in dims {
            w.len *= size;
            if size == 1 {
                continue;
            }
            if let (Some(last), Some(lst)) = (w.dims.last_mut(), w.strides.last_mut()) {
                if (0..N).all(|k| lst[k] == st[k].wrapping_mul(size)) {
                    *last *= size;
                    *lst = st;
                    continue;
                }
            }
            w.dims.push(size);
            w.strides.push(st);
        }
        // No element or one: a single dimension, strides 1 (which nothing reads).
        if w.len == 0 {
            w.dims = vec![0];
            w.strides = vec![[1; N]];
        } else if w.dims.is_empty() {
            w.dims = vec![1];
            w.strides = vec![[1; N]];
        }
        w
    }

    fn inner_strides(&self) -> [usize; N] {
        self.strides[self.strides.len() - 1]
    }

    /// Calls `f(offsets, pos, len)` for each innermost run within positions `range`;
    /// `offsets[k]` is operand `k`'s offset (plus `base[k]`) of the run's first element.
    #[inline]
    fn for_each_run(
        &self,
        range: Range<usize>,
        base: [usize; N],
        mut f: impl FnMut([usize; N], usize, usize),
    ) {
        let end = range.end.min(self.len);
        let start = range.start;
        if start >= end {
            return;
        }
        let r = self.dims.len();
        let inner = self.dims[r - 1];
        let inner_st = self.strides[r - 1];
        if r == 1 {
            let offs = std::array::from_fn(|k| base[k] + start * inner_st[k]);
            f(offs, start, end - start);
            return;
        }
        // The odometer over the outer dimensions, on the stack for the usual ranks.
        let mut small = [0usize; 8];
        let mut large = Vec::new();
        let idx: &mut [usize] = if r - 1 <= small.len() {
            &mut small[..r - 1]
        } else {
            large.resize(r - 1, 0);
            &mut large
        };
        let mut rem = start / inner;
        let mut offs = base;
        for d in (0..r - 1).rev() {
            idx[d] = rem % self.dims[d];
            rem /= self.dims[d];
            for (k, o) in offs.iter_mut().enumerate() {
                *o += idx[d] * self.strides[d][k];
            }
        }
        let mut j = start % inner;
        let mut pos = start;
        loop {
            let len = (inner - j).min(end - pos);
            let run = std::array::from_fn(|k| offs[k] + j * inner_st[k]);
            f(run, pos, len);
            pos += len;
            if pos >= end {
                return;
            }
            j = 0;
            let mut d = r - 1;
            loop {
                d -= 1;
                idx[d] += 1;
                if idx[d] < self.dims[d] {
                    for (k, o) in offs.iter_mut().enumerate() {
                        *o += self.strides[d][k];
                    }
                    break;
                }
                for (k, o) in offs.iter_mut().enumerate() {
                    *o -= self.strides[d][k] * (self.dims[d] - 1);
                }
                idx[d] = 0;
            }
        }
    }
}

/// One innermost run of a [`Broadcast`]: output elements `out..out + len`; output element
/// `out + i` reads element `offsets[k] + i * strides[k]` of input `k`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run<const N: usize> {
    /// The output element (row-major index) of the run's first element.
    pub out: usize,
    /// The number of elements in the run (at least 1).
    pub len: usize,
    /// Each input's element offset of the run's first element.
    pub offsets: [usize; N],
    /// Each input's element stride along the run: 1 (contiguous) or 0 (one element repeated:
    /// the input is broadcast along the output's innermost dimension).
    pub strides: [usize; N],
}

impl<const N: usize> Run<N> {
    /// Input `k`'s element offset for output element `out + i`.
    #[inline]
    pub fn input(&self, k: usize, i: usize) -> usize {
        self.offsets[k] + i * self.strides[k]
    }
}

/// A plan for an elementwise op over `N` inputs broadcast to an output: the output's elements
/// in row-major order, with each input's element offset (0 strides along broadcast
/// dimensions).
///
/// Dimensions of size 1 are dropped and dimensions that are contiguous for every input are
/// merged, so [`for_each_run`](Broadcast::for_each_run) hands out runs as long as they can be:
/// inputs of the output's shape give one run over everything, `[2, 3] + [3]` two runs of 3.
/// A plan is plain data (`Clone + Send + Sync`): build it in the kernel (errors at once) and
/// move it into the work enqueued on the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broadcast<const N: usize> {
    out_shape: Vec<i64>,
    walk: Walk<N>,
}

impl<const N: usize> Broadcast<N> {
    /// A plan for `inputs` broadcast to `out`: each input's shape must broadcast to `out`
    /// (NumPy rules, as `BroadcastTo`); `out` may be larger than their broadcast.
    ///
    /// `INVALID_ARGUMENT`: `input 1 of shape [2] does not broadcast to shape [2, 3]`; a
    /// negative dimension; an output with more elements than `usize` holds.
    pub fn new(out: &[i64], inputs: [&[i64]; N]) -> Result<Broadcast<N>> {
        num_elements(out)?;
        let r = out.len();
        let mut strides = vec![[0usize; N]; r];
        for (k, s) in inputs.iter().enumerate() {
            if s.len() > r {
                return Err(Error::invalid_argument(format!(
                    "input {k} of shape {s:?} does not broadcast to shape {out:?}: its rank is larger"
                )));
            }
            let own = contiguous_strides(s);
            let lead = r - s.len();
            for (i, &dim) in s.iter().enumerate() {
                if dim == out[lead + i] {
                    strides[lead + i][k] = own[i];
                } else if dim != 1 {
                    return Err(Error::invalid_argument(format!(
                        "input {k} of shape {s:?} does not broadcast to shape {out:?}"
                    )));
                }
            }
        }
        let dims = out.iter().map(|&d| d as usize).zip(strides);
        Ok(Broadcast {
            out_shape: out.to_vec(),
            walk: Walk::new(dims),
        })
    }

    /// A plan whose output is the broadcast of `inputs` ([`broadcast_all`]).
    pub fn of(inputs: [&[i64]; N]) -> Result<Broadcast<N>> {
        let out = broadcast_all(&inputs)?;
        Broadcast::new(&out, inputs)
    }

    /// A plan for an elementwise op whose output `out` must be exactly the broadcast of
    /// `inputs` (as the host allocates it for `Add`, `Mul`, `Equal`, …).
    ///
    /// `INVALID_ARGUMENT`: [`broadcast_all`]'s error (`shapes [2, 3] and [2] cannot be
    /// broadcast together`), or `the output has shape [2], not the broadcast shape [2, 3]`.
    pub fn exact(out: &[i64], inputs: [&[i64]; N]) -> Result<Broadcast<N>> {
        let want = broadcast_all(&inputs)?;
        if want != out {
            return Err(Error::invalid_argument(format!(
                "the output has shape {out:?}, not the broadcast shape {want:?}"
            )));
        }
        Broadcast::new(out, inputs)
    }

    /// The output's shape.
    pub fn out_shape(&self) -> &[i64] {
        &self.out_shape
    }

    /// The number of output elements.
    pub fn len(&self) -> usize {
        self.walk.len
    }

    /// Whether the output has no elements (a dimension of size 0): nothing to compute.
    pub fn is_empty(&self) -> bool {
        self.walk.len == 0
    }

    /// Whether every input has the output's elements in the output's order (no
    /// broadcasting): one run over everything, all strides 1, so a kernel may use one flat
    /// loop (`z[i] = x[i] + y[i]`).
    pub fn is_flat(&self) -> bool {
        self.walk.dims.len() == 1 && self.walk.inner_strides().iter().all(|&s| s == 1)
    }

    /// Calls `f` for each run of the output, in row-major order: a loop over
    /// `0..run.len` with constant input strides inside, the odometer outside. No call for an
    /// empty output; one run of length 1 for a rank-0 output.
    #[inline]
    pub fn for_each_run(&self, f: impl FnMut(Run<N>)) {
        self.for_each_run_in(0..self.walk.len, f)
    }

    /// [`for_each_run`](Broadcast::for_each_run) restricted to output elements `range`
    /// (clamped to [`len`](Broadcast::len)): to split the work between threads.
    #[inline]
    pub fn for_each_run_in(&self, range: Range<usize>, mut f: impl FnMut(Run<N>)) {
        let strides = self.walk.inner_strides();
        self.walk.for_each_run(range, [0; N], |offsets, out, len| {
            f(Run {
                out,
                len,
                offsets,
                strides,
            })
        });
    }

    /// Calls `f(out, offsets)` for every output element, in order: `offsets[k]` is input
    /// `k`'s element. Simple; [`for_each_run`](Broadcast::for_each_run) gives faster loops.
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(usize, [usize; N])) {
        self.for_each_run(|run| {
            for i in 0..run.len {
                f(run.out + i, std::array::from_fn(|k| run.input(k, i)))
            }
        });
    }
}

/// The input elements one output element of a [`Reduction`] reduces over.
#[derive(Clone, Copy, Debug)]
pub struct Group<'a> {
    base: usize,
    walk: &'a Walk<1>,
}

impl Group<'_> {
    /// The number of input elements (the same for every output element; 0 when a reduced
    /// dimension is 0: a sum is then 0, a mean 0/0).
    pub fn len(&self) -> usize {
        self.walk.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.walk.len == 0
    }

    /// Calls `f(offset, len, stride)` for each run of the group, in the input's row-major
    /// order: input elements `offset + i * stride` for `i` in `0..len`.
    #[inline]
    pub fn for_each_run(&self, mut f: impl FnMut(usize, usize, usize)) {
        let [stride] = self.walk.inner_strides();
        self.walk
            .for_each_run(0..self.walk.len, [self.base], |[offset], _, len| {
                f(offset, len, stride)
            });
    }

    /// Calls `f(offset)` for each input element of the group, in order.
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(usize)) {
        self.for_each_run(|offset, len, stride| {
            for i in 0..len {
                f(offset + i * stride)
            }
        });
    }
}

/// A plan for a reduction (`ReduceSum`, `ReduceMax`, `ReduceMin`, `ReduceMean`) of an input
/// over some of its axes: the output shape, and for each output element (row-major) the input
/// elements it reduces over ([`Group`]).
///
/// Plain data, like [`Broadcast`]: build it in the kernel, move it into the stream's work.
///
/// To walk the input in memory order instead (better for a leading axis of a large tensor),
/// accumulate through a [`Broadcast`] of the output's `keep_dims` shape to the input's:
/// `Broadcast::new(x_shape, [&kept])`, where `kept` is `reduced_shape(x_shape, &axes, true)`,
/// gives for each input element (`run.out + i`) the output element it goes into
/// (`run.input(0, i)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reduction {
    axes: Vec<usize>,
    out_shape: Vec<i64>,
    outer: Walk<1>,
    inner: Walk<1>,
}

impl Reduction {
    /// A plan for reducing `shape` over `axes` (the op's attribute: [`reduce_axes`]'s rules,
    /// `[]` = every axis), with the reduced axes kept as 1 when `keep_dims`.
    ///
    /// `INVALID_ARGUMENT`: [`reduce_axes`]'s errors, a negative dimension, an input with more
    /// elements than `usize` holds.
    pub fn new(shape: &[i64], axes: &[i64], keep_dims: bool) -> Result<Reduction> {
        num_elements(shape)?;
        let axes = reduce_axes(shape.len(), axes)?;
        let strides = contiguous_strides(shape);
        let reduced_axes = &axes;
        let dims = |reduced: bool| {
            shape
                .iter()
                .zip(&strides)
                .enumerate()
                .filter(move |(i, _)| reduced_axes.contains(i) == reduced)
                .map(|(_, (&d, &s))| (d as usize, [s]))
        };
        let (outer, inner) = (Walk::new(dims(false)), Walk::new(dims(true)));
        Ok(Reduction {
            out_shape: reduced_shape(shape, &axes, keep_dims),
            axes,
            outer,
            inner,
        })
    }

    /// The reduced axes, normalized (sorted, non-negative).
    pub fn axes(&self) -> &[usize] {
        &self.axes
    }

    /// The output's shape (what the host allocated the output with).
    pub fn out_shape(&self) -> &[i64] {
        &self.out_shape
    }

    /// The number of output elements.
    pub fn out_len(&self) -> usize {
        self.outer.len
    }

    /// The number of input elements per output element (the divisor of a mean; 0 when a
    /// reduced dimension is 0).
    pub fn group_len(&self) -> usize {
        self.inner.len
    }

    /// Calls `f(out, group)` for each output element, in row-major order, with the input
    /// elements it reduces over. No call when the output has no elements; a call with an
    /// empty group when a reduced dimension is 0 (write the reduction's identity).
    #[inline]
    pub fn for_each_output(&self, mut f: impl FnMut(usize, Group<'_>)) {
        let [stride] = self.outer.inner_strides();
        self.outer
            .for_each_run(0..self.outer.len, [0], |[base], out, len| {
                for i in 0..len {
                    f(
                        out + i,
                        Group {
                            base: base + i * stride,
                            walk: &self.inner,
                        },
                    )
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    fn message<T: std::fmt::Debug>(r: Result<T>) -> String {
        let e = r.expect_err("an error");
        assert_eq!(e.code(), Status::InvalidArgument);
        e.message().to_owned()
    }

    fn elements<const N: usize>(b: &Broadcast<N>) -> Vec<(usize, [usize; N])> {
        let mut v = Vec::new();
        b.for_each(|o, offs| v.push((o, offs)));
        v
    }

    fn runs<const N: usize>(b: &Broadcast<N>) -> Vec<Run<N>> {
        let mut v = Vec::new();
        b.for_each_run(|r| v.push(r));
        v
    }

    /// The obvious per-element computation of a broadcast's input offsets.
    fn naive(out: &[i64], input: &[i64], o: usize) -> usize {
        let mut rem = o;
        let mut idx = vec![0usize; out.len()];
        for d in (0..out.len()).rev() {
            idx[d] = rem % out[d] as usize;
            rem /= out[d] as usize;
        }
        let lead = out.len() - input.len();
        let mut off = 0;
        for (i, &dim) in input.iter().enumerate() {
            off = off * dim as usize + if dim == 1 { 0 } else { idx[lead + i] };
        }
        off
    }

    #[test]
    fn element_counts() {
        assert_eq!(num_elements(&[]).unwrap(), 1);
        assert_eq!(num_elements(&[2, 3, 4]).unwrap(), 24);
        assert_eq!(num_elements(&[2, 0, 4]).unwrap(), 0);
        assert_eq!(
            message(num_elements(&[2, -1])),
            "dimension 1 of shape [2, -1] is negative"
        );
        let huge = [i64::MAX, i64::MAX];
        assert_eq!(
            message(num_elements(&huge)),
            format!("shape {huge:?} has too many elements")
        );
        assert!(num_elements(&[0, i64::MAX, i64::MAX]).is_err());
    }

    #[test]
    fn shapes_broadcast_like_numpy() {
        let ok = |a: &[i64], b: &[i64]| broadcast_shapes(a, b).unwrap();
        assert_eq!(ok(&[2, 3], &[3]), [2, 3]);
        assert_eq!(ok(&[3], &[2, 3]), [2, 3]);
        assert_eq!(ok(&[4, 1], &[1, 5]), [4, 5]);
        assert_eq!(ok(&[], &[2]), [2]);
        assert_eq!(ok(&[], &[]), Vec::<i64>::new());
        assert_eq!(ok(&[0, 1], &[3]), [0, 3]);
        assert_eq!(ok(&[1], &[0]), [0]);
        assert_eq!(ok(&[5, 1, 1], &[1, 1]), [5, 1, 1]);
        assert_eq!(
            message(broadcast_shapes(&[2, 3], &[2])),
            "shapes [2, 3] and [2] cannot be broadcast together"
        );
        assert_eq!(
            message(broadcast_shapes(&[0], &[3])),
            "shapes [0] and [3] cannot be broadcast together"
        );
        assert_eq!(
            message(broadcast_shapes(&[-1], &[-1])),
            "dimension 0 of shape [-1] is negative"
        );
    }

    #[test]
    fn many_shapes_broadcast() {
        assert_eq!(broadcast_all(&[]).unwrap(), Vec::<i64>::new());
        assert_eq!(broadcast_all(&[&[3]]).unwrap(), [3]);
        assert_eq!(
            broadcast_all(&[&[2, 1, 1], &[4, 1], &[5]]).unwrap(),
            [2, 4, 5]
        );
        assert_eq!(
            message(broadcast_all(&[&[2, 3], &[2]])),
            "shapes [2, 3] and [2] cannot be broadcast together"
        );
        assert_eq!(
            message(broadcast_all(&[&[2, 1], &[1, 3], &[4]])),
            "shapes [1, 3] and [4] cannot be broadcast together (inputs 1 and 2)"
        );
    }

    #[test]
    fn axes_normalize_like_the_runtime() {
        assert_eq!(reduce_axes(3, &[]).unwrap(), [0, 1, 2]);
        assert_eq!(reduce_axes(0, &[]).unwrap(), Vec::<usize>::new());
        assert_eq!(reduce_axes(3, &[-1, 0]).unwrap(), [0, 2]);
        assert_eq!(reduce_axes(2, &[-2]).unwrap(), [0]);
        assert_eq!(
            message(reduce_axes(2, &[2])),
            "axis 2 is out of range for rank 2"
        );
        assert_eq!(
            message(reduce_axes(2, &[-3])),
            "axis -3 is out of range for rank 2"
        );
        assert_eq!(
            message(reduce_axes(0, &[0])),
            "axis 0 is out of range for rank 0"
        );
        assert_eq!(
            message(reduce_axes(2, &[i64::MIN])),
            format!("axis {} is out of range for rank 2", i64::MIN)
        );
        assert_eq!(message(reduce_axes(2, &[1, 1])), "axis 1 appears twice");
        assert_eq!(
            message(reduce_axes(2, &[1, -1])),
            "axis 1 and axis -1 are the same axis (1) of rank 2"
        );
    }

    #[test]
    fn reduced_shapes() {
        assert_eq!(reduced_shape(&[2, 3], &[1], false), [2]);
        assert_eq!(reduced_shape(&[2, 3], &[1], true), [2, 1]);
        assert_eq!(reduced_shape(&[2, 3], &[0, 1], false), Vec::<i64>::new());
        assert_eq!(reduced_shape(&[2, 3], &[0, 1], true), [1, 1]);
        assert_eq!(reduced_shape(&[], &[], true), Vec::<i64>::new());
        assert_eq!(reduced_shape(&[0, 3], &[0], false), [3]);
    }

    #[test]
    fn a_broadcast_walks_rows_and_columns() {
        // [2, 1] + [3] -> [2, 3]: broadcast both ways.
        let b = Broadcast::new(&[2, 3], [&[2, 1], &[3]]).unwrap();
        assert_eq!(b.len(), 6);
        assert!(!b.is_flat());
        assert_eq!(
            elements(&b),
            [
                (0, [0, 0]),
                (1, [0, 1]),
                (2, [0, 2]),
                (3, [1, 0]),
                (4, [1, 1]),
                (5, [1, 2])
            ]
        );
        assert_eq!(
            runs(&b),
            [
                Run {
                    out: 0,
                    len: 3,
                    offsets: [0, 0],
                    strides: [0, 1]
                },
                Run {
                    out: 3,
                    len: 3,
                    offsets: [1, 0],
                    strides: [0, 1]
                }
            ]
        );
    }

    #[test]
    fn same_shapes_are_one_flat_run() {
        let b = Broadcast::exact(&[2, 3, 4], [&[2, 3, 4], &[2, 3, 4]]).unwrap();
        assert!(b.is_flat());
        assert_eq!(
            runs(&b),
            [Run {
                out: 0,
                len: 24,
                offsets: [0, 0],
                strides: [1, 1]
            }]
        );
        // Size-1 dimensions do not split runs.
        let b = Broadcast::exact(&[2, 1, 3], [&[2, 1, 3], &[1, 3]]).unwrap();
        assert_eq!(runs(&b).len(), 2);
        let b = Broadcast::exact(&[2, 1, 3], [&[2, 1, 3], &[2, 1, 3]]).unwrap();
        assert!(b.is_flat());
    }

    #[test]
    fn rank_0_and_empty() {
        // Rank 0: one element.
        let b = Broadcast::of([&[], &[]]).unwrap();
        assert_eq!(b.out_shape(), &[] as &[i64]);
        assert_eq!(elements(&b), [(0, [0, 0])]);
        assert!(b.is_flat());
        // A scalar broadcast over a vector: stride 0.
        let b = Broadcast::exact(&[4], [&[], &[4]]).unwrap();
        assert_eq!(
            runs(&b),
            [Run {
                out: 0,
                len: 4,
                offsets: [0, 0],
                strides: [0, 1]
            }]
        );
        // Zero-size dimensions: nothing to walk, in either direction of broadcasting.
        for (out, a, c) in [
            (&[0][..], &[0][..], &[1][..]),
            (&[2, 0], &[2, 1], &[0]),
            (&[0, 3], &[0, 3], &[3]),
        ] {
            let b = Broadcast::exact(out, [a, c]).unwrap();
            assert!(b.is_empty());
            assert_eq!(b.len(), 0);
            assert!(runs(&b).is_empty());
        }
    }

    #[test]
    fn broadcasts_match_a_naive_walk() {
        let cases: [(&[i64], &[i64]); 7] = [
            (&[2, 3, 4], &[3, 1]),
            // 12 dimensions that do not merge: the odometer outgrows its stack buffer.
            (
                &[2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1],
                &[1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2],
            ),
            (&[3, 1, 5], &[1, 4, 1]),
            (&[1, 4, 1, 2], &[3, 1, 5, 1]),
            (&[5], &[2, 3, 1]),
            (&[2, 1, 2, 1, 2, 1, 2, 1, 2, 1], &[2, 1, 2, 1, 2]),
            (&[], &[2, 2]),
        ];
        for (a, c) in cases {
            let b = Broadcast::of([a, c]).unwrap();
            let out = b.out_shape().to_vec();
            let want: Vec<(usize, [usize; 2])> = (0..b.len())
                .map(|o| (o, [naive(&out, a, o), naive(&out, c, o)]))
                .collect();
            assert_eq!(elements(&b), want, "{a:?} {c:?}");
            // Any sub-range gives the same elements.
            for (s, e) in [(0, 1), (1, b.len() - 1), (b.len() / 2, b.len() + 7)] {
                let mut got = Vec::new();
                b.for_each_run_in(s..e, |r| {
                    assert!(r.len >= 1);
                    assert!(r.strides.iter().all(|&st| st <= 1), "{r:?}");
                    for i in 0..r.len {
                        got.push((r.out + i, [r.input(0, i), r.input(1, i)]));
                    }
                });
                assert_eq!(got, want[s..e.min(b.len())], "{a:?} {c:?} {s}..{e}");
            }
        }
    }

    #[test]
    fn bad_broadcasts() {
        assert_eq!(
            message(Broadcast::exact(&[2, 3], [&[2, 3], &[2]])),
            "shapes [2, 3] and [2] cannot be broadcast together"
        );
        assert_eq!(
            message(Broadcast::exact(&[2], [&[2, 3], &[2, 3]])),
            "the output has shape [2], not the broadcast shape [2, 3]"
        );
        assert_eq!(
            message(Broadcast::exact(&[5, 3], [&[1, 3], &[3]])),
            "the output has shape [5, 3], not the broadcast shape [1, 3]"
        );
        // `new` broadcasts to a larger output (BroadcastTo), `exact` does not.
        assert_eq!(Broadcast::new(&[5, 3], [&[1, 3], &[3]]).unwrap().len(), 15);
        assert_eq!(
            message(Broadcast::new(&[2, 3], [&[2, 3], &[2]])),
            "input 1 of shape [2] does not broadcast to shape [2, 3]"
        );
        assert_eq!(
            message(Broadcast::new(&[3], [&[1, 3]])),
            "input 0 of shape [1, 3] does not broadcast to shape [3]: its rank is larger"
        );
        assert_eq!(
            message(Broadcast::new(&[2, -3], [&[2, 1]])),
            "dimension 1 of shape [2, -3] is negative"
        );
    }

    fn reduce(shape: &[i64], axes: &[i64], keep: bool, x: &[i64]) -> (Vec<i64>, Vec<i64>) {
        let plan = Reduction::new(shape, axes, keep).unwrap();
        let mut y = vec![-1; plan.out_len()];
        plan.for_each_output(|o, g| {
            let mut sum = 0;
            let mut n = 0;
            g.for_each(|i| {
                sum += x[i];
                n += 1;
            });
            assert_eq!(n, g.len());
            y[o] = sum;
        });
        (plan.out_shape().to_vec(), y)
    }

    #[test]
    fn reductions() {
        let x: Vec<i64> = (1..=6).collect(); // [[1, 2, 3], [4, 5, 6]]
        assert_eq!(reduce(&[2, 3], &[0], false, &x), (vec![3], vec![5, 7, 9]));
        assert_eq!(reduce(&[2, 3], &[1], false, &x), (vec![2], vec![6, 15]));
        assert_eq!(reduce(&[2, 3], &[-1], true, &x), (vec![2, 1], vec![6, 15]));
        assert_eq!(
            reduce(&[2, 3], &[-2], true, &x),
            (vec![1, 3], vec![5, 7, 9])
        );
        assert_eq!(reduce(&[2, 3], &[], false, &x), (vec![], vec![21]));
        assert_eq!(reduce(&[2, 3], &[], true, &x), (vec![1, 1], vec![21]));
        assert_eq!(reduce(&[2, 3], &[1, 0], false, &x), (vec![], vec![21]));
        // Rank 0: reduces to itself.
        assert_eq!(reduce(&[], &[], false, &[7]), (vec![], vec![7]));
        assert_eq!(reduce(&[], &[], true, &[7]), (vec![], vec![7]));
        // A reduced axis of size 0: every output is a sum of nothing.
        assert_eq!(reduce(&[0, 3], &[0], false, &[]), (vec![3], vec![0, 0, 0]));
        // A kept axis of size 0: no outputs.
        assert_eq!(reduce(&[0, 3], &[1], false, &[]), (vec![0], vec![]));
        assert_eq!(reduce(&[0, 3], &[1], true, &[]), (vec![0, 1], vec![]));
        // Size-1 axes, reduced or not.
        assert_eq!(reduce(&[2, 1, 3], &[1], false, &x), (vec![2, 3], x.clone()));
        assert_eq!(reduce(&[1, 6], &[0], true, &x), (vec![1, 6], x.clone()));
        // Middle axis of a 3-D tensor: runs with a stride.
        let x: Vec<i64> = (0..24).collect();
        let (s, y) = reduce(&[2, 3, 4], &[1], false, &x);
        assert_eq!(s, [2, 4]);
        assert_eq!(y, [12, 15, 18, 21, 48, 51, 54, 57]);
        let (s, y) = reduce(&[2, 3, 4], &[0, 2], true, &x);
        assert_eq!(s, [1, 3, 1]);
        assert_eq!(y, [60, 92, 124]);
        let plan = Reduction::new(&[2, 3, 4], &[0, -1], false).unwrap();
        assert_eq!((plan.axes(), plan.group_len()), (&[0usize, 2][..], 8));
        let mut runs = Vec::new();
        plan.for_each_output(|_, g| g.for_each_run(|o, l, s| runs.push((o, l, s))));
        // Per output: two runs of 4 contiguous elements (axis 2), 12 apart (axis 0).
        assert_eq!(&runs[..2], &[(0, 4, 1), (12, 4, 1)]);
        assert_eq!(&runs[2..4], &[(4, 4, 1), (16, 4, 1)]);
    }

    #[test]
    fn reductions_accumulate_through_a_broadcast() {
        // The memory-order alternative that Reduction's docs describe.
        let x: Vec<i64> = (0..24).collect();
        let shape = [2, 3, 4];
        let axes = reduce_axes(3, &[0, 2]).unwrap();
        let kept = reduced_shape(&shape, &axes, true);
        let walk = Broadcast::new(&shape, [&kept]).unwrap();
        let mut y = vec![0; num_elements(&kept).unwrap()];
        walk.for_each_run(|r| {
            for i in 0..r.len {
                y[r.input(0, i)] += x[r.out + i];
            }
        });
        assert_eq!(y, [60, 92, 124]);
    }

    #[test]
    fn bad_reductions() {
        assert_eq!(
            message(Reduction::new(&[2, 3], &[2], false)),
            "axis 2 is out of range for rank 2"
        );
        assert_eq!(
            message(Reduction::new(&[2, 3], &[0, -2], false)),
            "axis 0 and axis -2 are the same axis (0) of rank 2"
        );
        assert_eq!(
            message(Reduction::new(&[-2, 3], &[0], false)),
            "dimension 0 of shape [-2, 3] is negative"
        );
    }

    #[test]
    fn plans_are_send_and_sync() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Broadcast<3>>();
        check::<Reduction>();
    }
}
