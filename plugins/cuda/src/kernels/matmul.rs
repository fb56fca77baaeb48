//! MatMul through cuBLAS (f32, f64, f16, bf16), batched and broadcast, with transposes.
//!
//! Row-major `C = op(A) · op(B)` is column-major `C^T = op(B)^T · op(A)^T`, so cuBLAS gets B
//! first: `gemm(op_b, op_a, n, m, k, B, ldb, A, lda, C, n)`.

use devplug_plugin_sdk::Result;

use super::plan::{Batches, MatMul};
use super::{dtype_size, elements, Cx, Launcher};
use crate::blas::Gemm;

pub(crate) fn matmul(cx: &Cx<'_>) -> Result<()> {
    cx.check_arity(2, 1)?;
    let (a, b, c) = (cx.input(0)?, cx.input(1)?, cx.output(0)?);
    if elements(c.shape()) == 0 {
        return Ok(());
    }
    let l = Launcher::new(cx)?;
    let plan = MatMul::new(
        a.shape(),
        b.shape(),
        cx.attr_bool("transpose_a")?,
        cx.attr_bool("transpose_b")?,
    );
    if plan.k == 0 {
        return l.memset(c.addr().0, 0, c.byte_size());
    }
    let size = dtype_size(a.dtype())?;
    let (m, n) = (plan.m, plan.n);
    let gemm = |a_off: i64, b_off: i64, c_off: i64, stride_a, stride_b, batch| Gemm {
        dtype: a.dtype(),
        transpose_a: plan.transpose_b,
        transpose_b: plan.transpose_a,
        m: n,
        n: m,
        k: plan.k,
        a: b.addr().0 + (b_off as u64) * size,
        lda: plan.ldb,
        stride_a: stride_b,
        b: a.addr().0 + (a_off as u64) * size,
        ldb: plan.lda,
        stride_b: stride_a,
        c: c.addr().0 + (c_off as u64) * size,
        ldc: n,
        stride_c: m * n,
        batch,
        tf32: false,
    };
    l.with_blas(|blas, bound, stream, tf32| match &plan.batches {
        Batches::Strided {
            count,
            stride_a,
            stride_b,
        } => blas.gemm(
            bound,
            &stream.raw,
            &Gemm {
                tf32,
                ..gemm(0, 0, 0, *stride_a, *stride_b, *count)
            },
        ),
        Batches::List(pairs) => {
            for (i, &(a_off, b_off)) in pairs.iter().enumerate() {
                let g = Gemm {
                    tf32,
                    ..gemm(a_off, b_off, i as i64 * m * n, 0, 0, 1)
                };
                blas.gemm(bound, &stream.raw, &g)?;
            }
            Ok(())
        }
    })
}
