//! cuBLAS, for MatMul: a handle per device and the one call the plugin makes,
//! `cublasGemmStridedBatchedEx`. With `driver.rs`, the only module that calls CUDA libraries
//! directly.

use std::ffi::c_void;

use cudarc::cublas::result as blas;
use cudarc::cublas::sys;
use devplug_plugin_sdk::{DType, Error, Result};

use crate::driver::{Bound, Stream};

/// A cuBLAS handle of one device's context (not thread-safe: the device keeps it under a lock).
pub(crate) struct Blas(sys::cublasHandle_t);

// SAFETY: a cuBLAS handle may move between threads; the device uses it from one thread at a
// time (it lives in a mutex).
unsafe impl Send for Blas {}

fn blas_error(call: &str, e: blas::CublasError) -> Error {
    Error::internal(format!("{call}: {e}"))
}

/// One strided-batched GEMM in cuBLAS's column-major terms:
/// `C[i] = op_a(A[i]) · op_b(B[i])` for `i < batch`, `C` of `m × n` with leading dimension `ldc`.
pub(crate) struct Gemm {
    pub dtype: DType,
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub a: u64,
    pub lda: i64,
    pub stride_a: i64,
    pub b: u64,
    pub ldb: i64,
    pub stride_b: i64,
    pub c: u64,
    pub ldc: i64,
    pub stride_c: i64,
    pub batch: i64,
    /// f32 products on the tensor cores in TF32 (about 10 bits of mantissa per product).
    pub tf32: bool,
}

fn int(v: i64, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        Error::unimplemented(format!(
            "MatMul: {what} = {v} is larger than cuBLAS takes (2^31 - 1)"
        ))
    })
}

impl Blas {
    /// A handle for the context bound on this thread.
    pub(crate) fn new(_: &Bound<'_>) -> Result<Blas> {
        blas::create_handle()
            .map(Blas)
            .map_err(|e| blas_error("cublasCreate", e))
    }

    /// Enqueues `g` on `stream`.
    ///
    /// The caller guarantees that `a`, `b` and `c` address device memory of the handle's
    /// context large enough for the matrices `g` describes (the host allocated them with the
    /// shapes the op's shape function gave).
    pub(crate) fn gemm(&mut self, _: &Bound<'_>, stream: &Stream, g: &Gemm) -> Result<()> {
        use sys::cublasComputeType_t as Compute;
        use sys::cudaDataType as Ty;
        let (ty, compute) = match g.dtype {
            DType::F32 if g.tf32 => (Ty::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F_FAST_TF32),
            DType::F32 => (Ty::CUDA_R_32F, Compute::CUBLAS_COMPUTE_32F),
            DType::F64 => (Ty::CUDA_R_64F, Compute::CUBLAS_COMPUTE_64F),
            DType::F16 => (Ty::CUDA_R_16F, Compute::CUBLAS_COMPUTE_32F),
            DType::BF16 => (Ty::CUDA_R_16BF, Compute::CUBLAS_COMPUTE_32F),
            other => {
                return Err(Error::unimplemented(format!(
                    "MatMul of {other} is not implemented on CUDA"
                )))
            }
        };
        let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
        let (alpha, beta): (*const c_void, *const c_void) = if g.dtype == DType::F64 {
            (
                (&one64 as *const f64).cast(),
                (&zero64 as *const f64).cast(),
            )
        } else {
            (
                (&one32 as *const f32).cast(),
                (&zero32 as *const f32).cast(),
            )
        };
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (m, n, k) = (int(g.m, "m")?, int(g.n, "n")?, int(g.k, "k")?);
        let (lda, ldb, ldc) = (int(g.lda, "lda")?, int(g.ldb, "ldb")?, int(g.ldc, "ldc")?);
        let batch = int(g.batch, "the batch count")?;
        // SAFETY: a live handle; the stream belongs to the handle's context (the caller's
        // device); alpha and beta are host scalars of the compute type that outlive the call;
        // the matrices are valid per the caller's contract.
        unsafe {
            blas::set_stream(self.0, stream.raw().cast())
                .map_err(|e| blas_error("cublasSetStream", e))?;
            blas::gemm_strided_batched_ex(
                self.0,
                op(g.transpose_a),
                op(g.transpose_b),
                m,
                n,
                k,
                alpha,
                g.a as usize as *const c_void,
                ty,
                lda,
                g.stride_a,
                g.b as usize as *const c_void,
                ty,
                ldb,
                g.stride_b,
                beta,
                g.c as usize as *mut c_void,
                ty,
                ldc,
                g.stride_c,
                batch,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
            .map_err(|e| blas_error("cublasGemmStridedBatchedEx", e))
        }
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, with its context bound (the device drops
        // it while bound, after synchronizing).
        let _ = unsafe { blas::destroy_handle(self.0) };
    }
}
