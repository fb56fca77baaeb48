//! How a kernel walks its tensors, worked out on the host before a launch: element strides of
//! broadcast inputs, dimensions merged where every operand is contiguous across them, the split
//! of a reduction into kept and reduced dimensions, and the batch layout of a matrix product.
//!
//! Pure functions over shapes, tested on the CPU (the structs are the kernels' parameter
//! blocks, `#[repr(C)]` with the layouts of `cuda/prelude.cuh`, `reduce.cu` and `copy.cu`).

/// The most dimensions a tensor has (`DP_MAX_RANK`).
pub const MAX_RANK: usize = 8;

/// Row-major element strides of `shape`.
pub fn contiguous_strides(shape: &[i64]) -> Vec<i64> {
    let mut st = vec![0i64; shape.len()];
    let mut step = 1i64;
    for (s, &d) in st.iter_mut().zip(shape).rev() {
        *s = step;
        step = step.saturating_mul(d.max(1));
    }
    st
}

/// The strides of an input of shape `input` read as if broadcast to `out` (NumPy rules: the
/// input is aligned to the right; its dimensions of size 1 get stride 0). The caller has
/// checked that the shapes broadcast.
pub fn broadcast_strides(input: &[i64], out: &[i64]) -> Vec<i64> {
    let own = contiguous_strides(input);
    let pad = out.len() - input.len();
    (0..out.len())
        .map(|d| {
            if d < pad || input[d - pad] == 1 {
                0
            } else {
                own[d - pad]
            }
        })
        .collect()
}

/// Element count of `shape`.
pub fn num_elements(shape: &[i64]) -> i64 {
    shape.iter().product()
}

/// Merges dimensions: drops those of size 1 and joins a dimension with the next inner one when,
/// for every stride list, `stride[outer] == stride[inner] * shape[inner]`. Returns the merged
/// shape and stride lists (empty for a single element). Walking the result visits the same
/// offsets in the same order.
fn coalesce(shape: &[i64], strides: &[Vec<i64>]) -> (Vec<i64>, Vec<Vec<i64>>) {
    let mut out_shape: Vec<i64> = Vec::new();
    let mut out_st: Vec<Vec<i64>> = vec![Vec::new(); strides.len()];
    // From the innermost dimension outwards; reversed at the end.
    for d in (0..shape.len()).rev() {
        if shape[d] == 1 {
            continue;
        }
        if let Some(&inner) = out_shape.last() {
            let joins = strides
                .iter()
                .zip(&out_st)
                .all(|(st, merged)| st[d] == merged[merged.len() - 1] * inner);
            if joins {
                *out_shape.last_mut().expect("non-empty") *= shape[d];
                continue;
            }
        }
        out_shape.push(shape[d]);
        for (st, merged) in strides.iter().zip(out_st.iter_mut()) {
            merged.push(st[d]);
        }
    }
    out_shape.reverse();
    for st in &mut out_st {
        st.reverse();
    }
    (out_shape, out_st)
}

fn fixed(v: &[i64]) -> [i64; MAX_RANK] {
    let mut a = [0i64; MAX_RANK];
    a[..v.len()].copy_from_slice(v);
    a
}

/// An elementwise walk (`struct Geo`): output element `i` (row-major over `shape`) reads
/// operand `k` at element offset `sum(coord[d] * st[k][d])`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geo {
    pub n: i64,
    pub rank: i32,
    pub pad: i32,
    pub shape: [i64; MAX_RANK],
    pub st: [[i64; MAX_RANK]; 3],
}

impl Geo {
    /// The walk of up to three inputs broadcast to `out` (inputs' shapes broadcast to it).
    pub fn broadcast(out: &[i64], inputs: &[&[i64]]) -> Geo {
        assert!(inputs.len() <= 3 && out.len() <= MAX_RANK);
        let mut strides: Vec<Vec<i64>> = inputs.iter().map(|s| broadcast_strides(s, out)).collect();
        strides.push(contiguous_strides(out));
        let (shape, st) = coalesce(out, &strides);
        let mut geo = Geo {
            n: num_elements(out),
            rank: shape.len() as i32,
            pad: 0,
            shape: fixed(&shape),
            st: [[0; MAX_RANK]; 3],
        };
        for (k, s) in st.iter().take(inputs.len()).enumerate() {
            geo.st[k] = fixed(s);
        }
        geo
    }

    /// Whether every operand is contiguous with the output (after merging: one dimension of
    /// stride 1 for each input, or a single element): the `_c` kernels apply.
    pub fn is_contiguous(&self, inputs: usize) -> bool {
        self.rank == 0 || (self.rank == 1 && (0..inputs).all(|k| self.st[k][0] == 1))
    }

    /// The element offsets of output element `i` (what the kernel computes), for tests.
    pub fn offsets(&self, mut i: i64) -> [i64; 3] {
        let mut off = [0i64; 3];
        for d in (0..self.rank as usize).rev() {
            let c = i % self.shape[d];
            i /= self.shape[d];
            for (k, o) in off.iter_mut().enumerate() {
                *o += c * self.st[k][d];
            }
        }
        off
    }
}

/// A strided copy (`struct Walk`): element `i` of the walk (row-major over `shape`) moves from
/// element offset `sum(coord * src)` to `sum(coord * dst)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    pub n: i64,
    pub rank: i32,
    pub pad: i32,
    pub shape: [i64; MAX_RANK],
    pub src: [i64; MAX_RANK],
    pub dst: [i64; MAX_RANK],
}

impl Walk {
    /// A walk over `shape` with the given element strides on each side.
    pub fn new(shape: &[i64], src: &[i64], dst: &[i64]) -> Walk {
        assert!(shape.len() <= MAX_RANK && src.len() == shape.len() && dst.len() == shape.len());
        let (merged, st) = coalesce(shape, &[src.to_vec(), dst.to_vec()]);
        Walk {
            n: num_elements(shape),
            rank: merged.len() as i32,
            pad: 0,
            shape: fixed(&merged),
            src: fixed(&st[0]),
            dst: fixed(&st[1]),
        }
    }

    /// Transpose: output dimension `d` is input dimension `perm[d]`.
    pub fn transpose(input: &[i64], perm: &[usize]) -> Walk {
        let in_st = contiguous_strides(input);
        let out_shape: Vec<i64> = perm.iter().map(|&p| input[p]).collect();
        let src: Vec<i64> = perm.iter().map(|&p| in_st[p]).collect();
        Walk::new(&out_shape, &src, &contiguous_strides(&out_shape))
    }

    /// BroadcastTo `out`.
    pub fn broadcast(input: &[i64], out: &[i64]) -> Walk {
        Walk::new(
            out,
            &broadcast_strides(input, out),
            &contiguous_strides(out),
        )
    }

    /// Slice of `input` starting at `begin`, of shape `out`: the walk, and the element offset
    /// of the first element read.
    pub fn slice(input: &[i64], begin: &[i64], out: &[i64]) -> (Walk, i64) {
        let in_st = contiguous_strides(input);
        let base = begin.iter().zip(&in_st).map(|(b, s)| b * s).sum();
        (Walk::new(out, &in_st, &contiguous_strides(out)), base)
    }

    /// One input of a Concat along `axis` into `out`, placed at `offset` along that axis: the
    /// walk, and the element offset of its first element in the output.
    pub fn concat_part(input: &[i64], out: &[i64], axis: usize, offset: i64) -> (Walk, i64) {
        let out_st = contiguous_strides(out);
        (
            Walk::new(input, &contiguous_strides(input), &out_st),
            offset * out_st[axis],
        )
    }

    /// The (source, destination) offsets of element `i`, for tests.
    pub fn offsets(&self, mut i: i64) -> (i64, i64) {
        let (mut s, mut d) = (0, 0);
        for k in (0..self.rank as usize).rev() {
            let c = i % self.shape[k];
            i /= self.shape[k];
            s += c * self.src[k];
            d += c * self.dst[k];
        }
        (s, d)
    }
}

/// A reduction (`struct Red`): output element `o` (row-major over the kept dimensions) reduces
/// the inputs at `kept(o) + reduced(r)`, `r < count`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Red {
    pub n_out: i64,
    pub count: i64,
    pub kr: i32,
    pub rr: i32,
    pub kshape: [i64; MAX_RANK],
    pub kst: [i64; MAX_RANK],
    pub rshape: [i64; MAX_RANK],
    pub rst: [i64; MAX_RANK],
}

impl Red {
    /// Reducing the dimensions of `shape` marked in `reduced`.
    pub fn new(shape: &[i64], reduced: &[bool]) -> Red {
        let st = contiguous_strides(shape);
        let pick = |want: bool| {
            let dims: Vec<usize> = (0..shape.len()).filter(|&d| reduced[d] == want).collect();
            let s: Vec<i64> = dims.iter().map(|&d| shape[d]).collect();
            let t: Vec<i64> = dims.iter().map(|&d| st[d]).collect();
            let (s, t) = coalesce(&s, &[t]);
            (s, t.into_iter().next().unwrap_or_default())
        };
        let (ks, kt) = pick(false);
        let (rs, rt) = pick(true);
        let count = (0..shape.len())
            .filter(|&d| reduced[d])
            .map(|d| shape[d])
            .product();
        let n_out = (0..shape.len())
            .filter(|&d| !reduced[d])
            .map(|d| shape[d])
            .product();
        Red {
            n_out,
            count,
            kr: ks.len() as i32,
            rr: rs.len() as i32,
            kshape: fixed(&ks),
            kst: fixed(&kt),
            rshape: fixed(&rs),
            rst: fixed(&rt),
        }
    }

    /// The input offset of reduced element `r` of output `o`, for tests.
    pub fn offset(&self, o: i64, r: i64) -> i64 {
        let walk = |mut i: i64, rank: i32, shape: &[i64], st: &[i64]| {
            let mut off = 0;
            for d in (0..rank as usize).rev() {
                off += (i % shape[d]) * st[d];
                i /= shape[d];
            }
            off
        };
        walk(o, self.kr, &self.kshape, &self.kst) + walk(r, self.rr, &self.rshape, &self.rst)
    }
}

/// The reduced dimensions of a tensor of rank `rank` for the `axes` attribute (negative axes
/// count from the end; empty means all); `None` names an axis out of range.
pub fn reduced_axes(rank: usize, axes: &[i64]) -> Option<Vec<bool>> {
    let mut reduced = vec![axes.is_empty(); rank];
    for &a in axes {
        let a = if a < 0 { a + rank as i64 } else { a };
        if !(0..rank as i64).contains(&a) {
            return None;
        }
        reduced[a as usize] = true;
    }
    Some(reduced)
}

/// The batches of a MatMul: one strided sequence when each operand's batch is either the whole
/// output batch or a single matrix, else one (a, b) element offset pair per output matrix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Batches {
    /// `count` products; operand matrices `stride_a` and `stride_b` elements apart (0: the same
    /// matrix for every product).
    Strided {
        count: i64,
        stride_a: i64,
        stride_b: i64,
    },
    /// The element offsets of `a` and `b` for each product, in output order.
    List(Vec<(i64, i64)>),
}

/// A MatMul of row-major `a` and `b` (with their transpose flags), as the column-major GEMM
/// cuBLAS computes: `C^T = op(B)^T · op(A)^T`, i.e. `gemm(op_b, op_a, n, m, k, B, ldb, A, lda, C, n)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatMul {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub transpose_a: bool,
    pub transpose_b: bool,
    /// Leading dimension of `a` as stored (row-major: its last dimension).
    pub lda: i64,
    /// Leading dimension of `b` as stored.
    pub ldb: i64,
    pub batches: Batches,
}

impl MatMul {
    /// The plan for shapes `a` and `b` (rank >= 2, inner dimensions equal, batch dimensions
    /// broadcasting: checked by the op's shape function).
    pub fn new(a: &[i64], b: &[i64], transpose_a: bool, transpose_b: bool) -> MatMul {
        let (ra, rb) = (a.len(), b.len());
        let (m, k) = if transpose_a {
            (a[ra - 1], a[ra - 2])
        } else {
            (a[ra - 2], a[ra - 1])
        };
        let n = if transpose_b { b[rb - 2] } else { b[rb - 1] };
        let (ab, bb) = (&a[..ra - 2], &b[..rb - 2]);
        let rank = ab.len().max(bb.len());
        let out: Vec<i64> = (0..rank)
            .map(|i| {
                let dim = |s: &[i64]| {
                    if i + s.len() >= rank {
                        s[i + s.len() - rank]
                    } else {
                        1
                    }
                };
                dim(ab).max(dim(bb))
            })
            .collect();
        let count = num_elements(&out);
        let (size_a, size_b) = (m * k, k * n);
        let stride = |batch: &[i64], size: i64| {
            let pad = out.len() - batch.len();
            if num_elements(batch) == 1 {
                Some(0)
            } else if out[..pad].iter().all(|&d| d == 1) && out[pad..] == *batch {
                Some(size)
            } else {
                None
            }
        };
        let batches = match (stride(ab, size_a), stride(bb, size_b)) {
            (Some(stride_a), Some(stride_b)) => Batches::Strided {
                count,
                stride_a,
                stride_b,
            },
            _ => {
                let (sa, sb) = (broadcast_strides(ab, &out), broadcast_strides(bb, &out));
                let walk = Geo::broadcast_strides_walk(&out, &sa, &sb);
                Batches::List(
                    (0..count)
                        .map(|i| {
                            let (oa, ob) = walk(i);
                            (oa * size_a, ob * size_b)
                        })
                        .collect(),
                )
            }
        };
        MatMul {
            m,
            n,
            k,
            transpose_a,
            transpose_b,
            lda: a[ra - 1],
            ldb: b[rb - 1],
            batches,
        }
    }
}

impl Geo {
    /// The offsets (into two stride lists over `shape`) of element `i`, as a closure.
    fn broadcast_strides_walk<'a>(
        shape: &'a [i64],
        sa: &'a [i64],
        sb: &'a [i64],
    ) -> impl Fn(i64) -> (i64, i64) + 'a {
        move |mut i| {
            let (mut oa, mut ob) = (0, 0);
            for d in (0..shape.len()).rev() {
                let c = i % shape[d];
                i /= shape[d];
                oa += c * sa[d];
                ob += c * sb[d];
            }
            (oa, ob)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row-major coordinates of element `i` of `shape`.
    fn coords(shape: &[i64], mut i: i64) -> Vec<i64> {
        let mut c = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            c[d] = i % shape[d];
            i /= shape[d];
        }
        c
    }

    /// The offset of output coordinate `c` in a broadcast input, the naive way.
    fn naive_offset(input: &[i64], out: &[i64], c: &[i64]) -> i64 {
        let pad = out.len() - input.len();
        let st = contiguous_strides(input);
        (0..input.len())
            .map(|d| if input[d] == 1 { 0 } else { c[d + pad] * st[d] })
            .sum()
    }

    #[test]
    fn broadcast_walks_visit_what_numpy_would() {
        let cases: &[(&[i64], &[i64], &[i64])] = &[
            (&[2, 3, 4], &[2, 3, 4], &[2, 3, 4]),
            (&[2, 3, 4], &[4], &[2, 3, 4]),
            (&[2, 1, 4], &[3, 1], &[2, 3, 4]),
            (&[], &[5, 2], &[5, 2]),
            (&[1], &[1], &[1]),
            (&[7, 1, 1, 3], &[1, 5, 2, 1], &[7, 5, 2, 3]),
            (&[2, 0, 3], &[3], &[2, 0, 3]),
            (&[1, 1, 6], &[1, 1, 6], &[1, 1, 6]),
        ];
        for &(a, b, out) in cases {
            let g = Geo::broadcast(out, &[a, b]);
            assert_eq!(g.n, num_elements(out));
            assert!(g.rank as usize <= out.len().max(1));
            for i in 0..g.n {
                let c = coords(out, i);
                let off = g.offsets(i);
                assert_eq!(
                    off[0],
                    naive_offset(a, out, &c),
                    "{a:?} {b:?} {out:?} at {i}"
                );
                assert_eq!(
                    off[1],
                    naive_offset(b, out, &c),
                    "{a:?} {b:?} {out:?} at {i}"
                );
            }
        }
    }

    #[test]
    fn same_shapes_merge_into_one_contiguous_dimension() {
        let g = Geo::broadcast(&[4, 5, 6], &[&[4, 5, 6], &[4, 5, 6]]);
        assert_eq!((g.rank, g.shape[0]), (1, 120));
        assert!(g.is_contiguous(2));
        let scalar = Geo::broadcast(&[], &[&[], &[]]);
        assert_eq!((scalar.n, scalar.rank), (1, 0));
        assert!(scalar.is_contiguous(2));
        let bcast = Geo::broadcast(&[4, 5], &[&[4, 5], &[5]]);
        assert!(!bcast.is_contiguous(2));
        // A row broadcast along the outer dimension keeps two dimensions.
        assert_eq!(bcast.rank, 2);
    }

    #[test]
    fn copy_walks_transpose_broadcast_slice_and_concat() {
        // Transpose [2, 3, 4] by [2, 0, 1]: out[c0, c1, c2] = in[c1, c2, c0].
        let input = [2i64, 3, 4];
        let w = Walk::transpose(&input, &[2, 0, 1]);
        let out = [4i64, 2, 3];
        let ist = contiguous_strides(&input);
        for i in 0..w.n {
            let c = coords(&out, i);
            let (s, d) = w.offsets(i);
            assert_eq!(d, i);
            assert_eq!(s, c[1] * ist[0] + c[2] * ist[1] + c[0] * ist[2]);
        }
        // An identity permutation merges into one contiguous dimension.
        let id = Walk::transpose(&input, &[0, 1, 2]);
        assert_eq!((id.rank, id.src[0], id.dst[0]), (1, 1, 1));

        let w = Walk::broadcast(&[3, 1], &[2, 3, 4]);
        for i in 0..w.n {
            let c = coords(&[2, 3, 4], i);
            assert_eq!(w.offsets(i), (c[1], i));
        }

        let (w, base) = Walk::slice(&[4, 5], &[1, 2], &[2, 3]);
        assert_eq!(base, 7);
        let got: Vec<i64> = (0..w.n).map(|i| base + w.offsets(i).0).collect();
        assert_eq!(got, [7, 8, 9, 12, 13, 14]);

        // Concat of [2, 1] and [2, 2] along axis 1 into [2, 3]: the second input's elements
        // land at columns 1 and 2.
        let (w, base) = Walk::concat_part(&[2, 2], &[2, 3], 1, 1);
        let got: Vec<i64> = (0..w.n).map(|i| base + w.offsets(i).1).collect();
        assert_eq!(got, [1, 2, 4, 5]);
    }

    #[test]
    fn reductions_split_kept_and_reduced_dimensions() {
        let shape = [2i64, 3, 4, 5];
        for mask in 0u32..16 {
            let reduced: Vec<bool> = (0..4).map(|d| mask & (1 << d) != 0).collect();
            let r = Red::new(&shape, &reduced);
            let kept: Vec<usize> = (0..4).filter(|&d| !reduced[d]).collect();
            let red: Vec<usize> = (0..4).filter(|&d| reduced[d]).collect();
            let kshape: Vec<i64> = kept.iter().map(|&d| shape[d]).collect();
            let rshape: Vec<i64> = red.iter().map(|&d| shape[d]).collect();
            assert_eq!(r.n_out, num_elements(&kshape));
            assert_eq!(r.count, num_elements(&rshape));
            let st = contiguous_strides(&shape);
            for o in 0..r.n_out {
                let ko = coords(&kshape, o);
                for j in 0..r.count {
                    let ro = coords(&rshape, j);
                    let mut want = 0;
                    for (i, &d) in kept.iter().enumerate() {
                        want += ko[i] * st[d];
                    }
                    for (i, &d) in red.iter().enumerate() {
                        want += ro[i] * st[d];
                    }
                    assert_eq!(r.offset(o, j), want, "mask {mask} o {o} r {j}");
                }
            }
        }
        // Adjacent reduced dimensions merge.
        let r = Red::new(&shape, &[false, true, true, false]);
        assert_eq!((r.kr, r.rr, r.rshape[0], r.rst[0]), (2, 1, 12, 5));
    }

    #[test]
    fn axes_attribute() {
        assert_eq!(reduced_axes(3, &[]), Some(vec![true, true, true]));
        assert_eq!(reduced_axes(3, &[-1, 0]), Some(vec![true, false, true]));
        assert_eq!(reduced_axes(2, &[2]), None);
        assert_eq!(reduced_axes(2, &[-3]), None);
    }

    #[test]
    fn matmul_batches() {
        let p = MatMul::new(&[4, 2, 3], &[4, 3, 5], false, false);
        assert_eq!((p.m, p.n, p.k, p.lda, p.ldb), (2, 5, 3, 3, 5));
        assert_eq!(
            p.batches,
            Batches::Strided {
                count: 4,
                stride_a: 6,
                stride_b: 15
            }
        );
        // b shared by every product.
        let p = MatMul::new(&[2, 4, 2, 3], &[3, 5], false, false);
        assert_eq!(
            p.batches,
            Batches::Strided {
                count: 8,
                stride_a: 6,
                stride_b: 0
            }
        );
        // Transposes: a is [k, m], b is [n, k].
        let p = MatMul::new(&[3, 2], &[5, 3], true, true);
        assert_eq!((p.m, p.n, p.k, p.lda, p.ldb), (2, 5, 3, 2, 3));
        // Both sides broadcast: one pair per product.
        let p = MatMul::new(&[2, 1, 2, 3], &[1, 3, 3, 4], false, false);
        let want: Vec<(i64, i64)> = (0..6).map(|i| ((i / 3) * 6, (i % 3) * 12)).collect();
        assert_eq!(p.batches, Batches::List(want));
        // a's batch [3] against the output's [2, 3]: not the whole batch, so a list.
        let p = MatMul::new(&[3, 2, 2], &[2, 1, 2, 2], false, false);
        let want: Vec<(i64, i64)> = (0..6).map(|i| ((i % 3) * 4, (i / 3) * 4)).collect();
        assert_eq!(p.batches, Batches::List(want));
    }
}
