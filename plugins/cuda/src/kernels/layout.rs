//! Data-movement kernels: Reshape (a copy), Transpose, BroadcastTo, Slice and Concat (strided
//! copies by element size, whatever the dtype).

use devplug_plugin_sdk::{Error, Result};

use super::plan::Walk;
use super::{axis_index, check_rank, dtype_size, sized_name, Cx, Launcher, Unit};

/// Enqueues the strided copy `walk` of elements of `size` bytes from `src` to `dst`.
fn copy_walk(l: &Launcher<'_>, walk: &Walk, size: u64, src: u64, dst: u64) -> Result<()> {
    if walk.n == 0 {
        return Ok(());
    }
    let contiguous = walk.rank == 0 || (walk.rank == 1 && walk.src[0] == 1 && walk.dst[0] == 1);
    if contiguous {
        return l.copy(dst, src, walk.n as u64 * size);
    }
    let name = sized_name("copy", size);
    l.run(Unit::COPY, &name, walk.n, &[walk, &src, &dst])
}

/// A new shape over the same elements.
pub(crate) fn reshape(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    Launcher::new(cx)?.copy(y.addr().0, x.addr().0, y.byte_size())
}

/// Output dimension `d` is input dimension `perm[d]` (`perm = []`: reversed).
pub(crate) fn transpose(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    check_rank(x.shape())?;
    let rank = x.rank();
    let attr = cx.attr_ints("perm")?;
    let perm: Vec<usize> = if attr.is_empty() {
        (0..rank).rev().collect()
    } else {
        attr.iter()
            .map(|&p| if p < 0 { p + rank as i64 } else { p } as usize)
            .collect()
    };
    let mut seen = vec![false; rank];
    if perm.len() != rank
        || perm
            .iter()
            .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
    {
        return Err(Error::invalid_argument(format!(
            "Transpose: perm {attr:?} is not a permutation of {rank} axes"
        )));
    }
    let walk = Walk::transpose(x.shape(), &perm);
    let l = Launcher::new(cx)?;
    copy_walk(&l, &walk, dtype_size(x.dtype())?, x.addr().0, y.addr().0)
}

/// `x` broadcast to the output's shape.
pub(crate) fn broadcast_to(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    check_rank(y.shape())?;
    let walk = Walk::broadcast(x.shape(), y.shape());
    let l = Launcher::new(cx)?;
    copy_walk(&l, &walk, dtype_size(x.dtype())?, x.addr().0, y.addr().0)
}

/// The block of `x` starting at `begin`, of the output's shape.
pub(crate) fn slice(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    check_rank(x.shape())?;
    let begin = cx.attr_ints("begin")?;
    if begin.len() != x.rank() {
        return Err(Error::invalid_argument(format!(
            "Slice: begin {begin:?} does not have one entry per axis of {:?}",
            x.shape()
        )));
    }
    let size = dtype_size(x.dtype())?;
    let (walk, base) = Walk::slice(x.shape(), begin, y.shape());
    let l = Launcher::new(cx)?;
    copy_walk(&l, &walk, size, x.addr().0 + base as u64 * size, y.addr().0)
}

/// The inputs joined along `axis`.
pub(crate) fn concat(cx: &Cx<'_>) -> Result<()> {
    let y = cx.output(0)?;
    check_rank(y.shape())?;
    let axis = axis_index("Concat", cx.attr_int("axis")?, y.rank())?;
    let l = Launcher::new(cx)?;
    let mut offset = 0i64;
    for x in cx.inputs().iter() {
        let size = dtype_size(x.dtype())?;
        let (walk, base) = Walk::concat_part(x.shape(), y.shape(), axis, offset);
        copy_walk(&l, &walk, size, x.addr().0, y.addr().0 + base as u64 * size)?;
        offset += x.shape()[axis];
    }
    Ok(())
}
