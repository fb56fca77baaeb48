//! Strided iteration: the output of an op walked in row-major order, with the matching offsets
//! into `N` inputs. Dimensions of size 1 are dropped and adjacent dimensions that are
//! contiguous for every operand are merged, so the innermost run is as long as it can be.

use crate::error::Result;

use super::common::{invalid, MAX_RANK};

/// The output shape (merged) and each input's element strides along it (0 where broadcast).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Walk<const N: usize> {
    /// Number of dimensions, at least 1.
    pub rank: usize,
    pub shape: [usize; MAX_RANK],
    pub strides: [[usize; MAX_RANK]; N],
}

/// Row-major strides of `shape`.
pub(crate) fn contiguous_strides(shape: &[usize]) -> [usize; MAX_RANK] {
    let mut s = [0usize; MAX_RANK];
    let mut acc = 1usize;
    for d in (0..shape.len().min(MAX_RANK)).rev() {
        s[d] = acc;
        acc = acc.wrapping_mul(shape[d]);
    }
    s
}

impl<const N: usize> Walk<N> {
    /// A walk over `shape` (rank <= MAX_RANK) with the given strides per input.
    pub fn new(shape: &[usize], strides: [&[usize]; N]) -> Walk<N> {
        let mut w = Walk {
            rank: 0,
            shape: [1; MAX_RANK],
            strides: [[0; MAX_RANK]; N],
        };
        for d in 0..shape.len().min(MAX_RANK) {
            let size = shape[d];
            if size == 1 {
                continue;
            }
            if w.rank > 0 {
                let p = w.rank - 1;
                let mergeable = (0..N).all(|k| w.strides[k][p] == strides[k][d] * size);
                if mergeable {
                    w.shape[p] *= size;
                    for k in 0..N {
                        w.strides[k][p] = strides[k][d];
                    }
                    continue;
                }
            }
            w.shape[w.rank] = size;
            for k in 0..N {
                w.strides[k][w.rank] = strides[k][d];
            }
            w.rank += 1;
        }
        if w.rank == 0 {
            w.rank = 1;
        }
        w
    }

    /// The walk of `N` inputs broadcast to `out` (NumPy rules). With `exact`, `out` must be
    /// exactly the broadcast of the inputs' shapes (as for binary ops), not merely a shape they
    /// broadcast to.
    pub fn broadcast(
        out: &[usize],
        inputs: [&[usize]; N],
        names: [&str; N],
        exact: bool,
    ) -> Result<Walk<N>> {
        let r = out.len();
        let mut strides = [[0usize; MAX_RANK]; N];
        let mut covered = [false; MAX_RANK];
        for k in 0..N {
            let s = inputs[k];
            if s.len() > r {
                return Err(invalid(format!(
                    "{} of shape {s:?} does not broadcast to shape {out:?}: its rank is larger",
                    names[k]
                )));
            }
            let own = contiguous_strides(s);
            let lead = r - s.len();
            for (i, &dim) in s.iter().enumerate() {
                let d = lead + i;
                if dim == out[d] {
                    strides[k][d] = own[i];
                    covered[d] = true;
                } else if dim != 1 {
                    return Err(invalid(format!(
                        "{} of shape {s:?} does not broadcast to shape {out:?}",
                        names[k]
                    )));
                }
            }
        }
        if exact && (0..r).any(|d| out[d] != 1 && !covered[d]) {
            let mut want = vec![1usize; r];
            for s in inputs {
                for (i, &dim) in s.iter().enumerate() {
                    let d = r - s.len() + i;
                    if dim != 1 {
                        want[d] = dim;
                    }
                }
            }
            return Err(invalid(format!(
                "the output has shape {out:?}, but the inputs broadcast to {want:?}"
            )));
        }
        let refs: [&[usize]; N] = std::array::from_fn(|k| &strides[k][..r]);
        Ok(Walk::new(out, refs))
    }

    /// The innermost dimension's size.
    #[inline]
    pub fn inner(&self) -> usize {
        self.shape[self.rank - 1]
    }

    /// Input `k`'s stride along the innermost dimension.
    #[inline]
    pub fn inner_stride(&self, k: usize) -> usize {
        self.strides[k][self.rank - 1]
    }

    /// Calls `f(offsets, out_pos, len)` for each run of the innermost dimension within output
    /// positions `start..end` (row-major order); `offsets[k]` is input `k`'s element offset of
    /// the run's first element, and the run continues with stride [`Self::inner_stride`].
    #[inline]
    pub fn for_each_run(
        &self,
        start: usize,
        end: usize,
        mut f: impl FnMut([usize; N], usize, usize),
    ) {
        if start >= end {
            return;
        }
        let r = self.rank;
        let inner = self.inner();
        if inner == 0 {
            return;
        }
        let mut idx = [0usize; MAX_RANK];
        let mut rem = start / inner;
        for d in (0..r - 1).rev() {
            idx[d] = rem % self.shape[d];
            rem /= self.shape[d];
        }
        let mut offs = [0usize; N];
        for (k, o) in offs.iter_mut().enumerate() {
            *o = (0..r - 1).map(|d| idx[d] * self.strides[k][d]).sum();
        }
        let mut j = start % inner;
        let mut pos = start;
        loop {
            let len = (inner - j).min(end - pos);
            let mut o = offs;
            for (k, ok) in o.iter_mut().enumerate() {
                *ok += j * self.strides[k][r - 1];
            }
            f(o, pos, len);
            pos += len;
            if pos >= end {
                return;
            }
            j = 0;
            // Next outer index (odometer).
            let mut d = r - 1;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < self.shape[d] {
                    for (k, ok) in offs.iter_mut().enumerate() {
                        *ok += self.strides[k][d];
                    }
                    break;
                }
                for (k, ok) in offs.iter_mut().enumerate() {
                    *ok -= self.strides[k][d] * (self.shape[d] - 1);
                }
                idx[d] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs<const N: usize>(
        w: &Walk<N>,
        start: usize,
        end: usize,
    ) -> Vec<([usize; N], usize, usize)> {
        let mut v = Vec::new();
        w.for_each_run(start, end, |o, p, l| v.push((o, p, l)));
        v
    }

    #[test]
    fn merges_and_broadcasts() {
        // [2,3,4] + [4]: a is fully contiguous (merged), b repeats every row.
        let w = Walk::<2>::broadcast(&[2, 3, 4], [&[2, 3, 4], &[4]], ["a", "b"], true).unwrap();
        assert_eq!(w.rank, 2);
        assert_eq!(&w.shape[..2], &[6, 4]);
        assert_eq!(w.strides[0][..2], [4, 1]);
        assert_eq!(w.strides[1][..2], [0, 1]);
        // Column broadcast [3,1] against [3,4].
        let w = Walk::<2>::broadcast(&[3, 4], [&[3, 4], &[3, 1]], ["a", "b"], true).unwrap();
        assert_eq!(w.inner_stride(1), 0);
        assert_eq!(runs(&w, 5, 11), vec![([5, 1], 5, 3), ([8, 2], 8, 3)]);
        // Scalars and size-1 dims vanish.
        let w = Walk::<1>::broadcast(&[1, 1], [&[]], ["a"], false).unwrap();
        assert_eq!((w.rank, w.inner()), (1, 1));
    }

    #[test]
    fn rejects_bad_broadcasts() {
        let e = Walk::<2>::broadcast(&[3, 4], [&[3, 4], &[3]], ["a", "b"], true).unwrap_err();
        assert!(e.message.contains("b of shape [3]"), "{e}");
        let e = Walk::<2>::broadcast(&[5, 4], [&[1, 4], &[4]], ["a", "b"], true).unwrap_err();
        assert!(e.message.contains("broadcast to [1, 4]"), "{e}");
        assert!(Walk::<2>::broadcast(&[5, 4], [&[1, 4], &[4]], ["a", "b"], false).is_ok());
        let e = Walk::<1>::broadcast(&[4], [&[1, 4]], ["a"], false).unwrap_err();
        assert!(e.message.contains("rank"), "{e}");
    }

    #[test]
    fn runs_cover_ranges_exactly() {
        let w = Walk::<1>::new(&[3, 5, 7], [&[70, 1, 10]]);
        let mut seen = vec![];
        for (s, e) in [(0, 105), (0, 1), (13, 50), (104, 105), (20, 20)] {
            seen.clear();
            w.for_each_run(s, e, |o, p, l| {
                for i in 0..l {
                    seen.push((p + i, o[0] + i * w.inner_stride(0)));
                }
            });
            let want: Vec<_> = (s..e)
                .map(|p| (p, (p / 35) * 70 + ((p / 7) % 5) + (p % 7) * 10))
                .collect();
            assert_eq!(seen, want);
        }
    }
}
