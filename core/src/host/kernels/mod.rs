//! CPU compute kernels: pure computations on contiguous, row-major tensors in host memory.
//!
//! Dispatch calls these once it has chosen the `HOST` platform's kernel for an op; they know
//! nothing of devices, streams or registries. Each function validates what it relies on (byte
//! lengths against shapes, dtype agreement, shape rules) and returns
//! [`Error::invalid_argument`](crate::error::Error::invalid_argument) naming the problem: no
//! input makes them panic or read out of bounds.
//!
//! # Memory
//!
//! A [`View`] is the bytes of a whole tensor, `numel * dtype.size()` of them, row-major. The
//! kernels read and write them as typed slices when the bytes are aligned to the element size
//! (the runtime's buffers are 256-byte aligned, so they always are there); a misaligned view
//! still works, through a copy. `out` never aliases an input (Rust's borrow rules see to it).
//! A `bool` element is one byte: kernels write only 0 or 1, and read any non-zero byte as true.
//!
//! # Dtypes
//!
//! | op | dtypes | notes |
//! | --- | --- | --- |
//! | `binary` Add, Sub, Mul, Div, Pow | f32 f64 i32 i64 u8 | integer ops wrap; integer `x / 0` is 0 (never a panic) and `i32::MIN / -1` wraps to `i32::MIN`; integer Pow with a negative exponent is 0, except for bases 1 (→ 1) and -1 (→ ±1) |
//! | `binary` Maximum, Minimum | f32 f64 i32 i64 u8 bool | floats propagate NaN (like NumPy's `maximum`); on bool they are `or` / `and` |
//! | `compare` | f32 f64 i32 i64 u8; bool for Equal/NotEqual only | IEEE: NaN compares unequal to everything; output bool |
//! | `unary` Neg, Abs | f32 f64 i32 i64; u8 Abs only (identity) | integer Neg/Abs wrap (`abs(i32::MIN) == i32::MIN`) |
//! | `unary` Exp, Log, Tanh, Sqrt, Rsqrt, Sigmoid | f32 f64 | f32 Exp/Log/Tanh/Sigmoid are branch-free vectorized polynomials (Cephes), within 1.5 ulps of exact over their whole range, subnormals, ±inf and NaN included; f64 uses the standard library |
//! | `select` | cond bool; a, b, out any one dtype | |
//! | `cast` | any → any | float → int truncates toward zero and saturates, NaN → 0 (Rust `as`); int → narrower int wraps (`as`); x → bool is `x != 0` (NaN → true); bool → x is 0 or 1 |
//! | `matmul` | f32 f64 (through the `gemm` crate) i32 i64 u8 (wrapping) | |
//! | `reduce` Sum, Max, Min, Mean | f32 f64 i32 i64 u8 | float sums are pairwise (error grows like log n); integer Sum wraps; integer Mean is the exact sum's mean truncated toward zero; Max/Min propagate NaN; an empty Max/Min is an error, an empty Sum is 0, an empty Mean is NaN for floats and an error for integers |
//! | `broadcast_to`, `transpose`, `concat`, `slice`, `fill` | all | byte copies; dtypes must agree |
//! | `iota` | f32 f64 i32 i64 u8 | u8 wraps past 255 |
//! | `add_n` | f32 f64 i32 i64 u8 | wrapping for integers; at least one input |
//!
//! f16 and bf16 are taken wherever f32 is (and by the byte-copying kernels): they are computed
//! in f32 and each result is rounded once to the dtype (module `half_float`), so sums and
//! products accumulate in f32. Casts to them round once from the source's exact value.
//!
//! # Shapes
//!
//! Ranks up to [`MAX_RANK`] (8). Broadcasting follows NumPy: shapes are aligned on the right
//! and a dimension of 1 stretches. For `binary`, `compare` and `select` the output's shape must
//! be exactly the broadcast of the inputs' shapes; `broadcast_to` takes any output shape the
//! input broadcasts to. Zero-sized dimensions are allowed everywhere.
//!
//! # Vector instructions
//!
//! The compute-bound loops (f32/f64 Exp, Log, Tanh, Sigmoid, Sqrt, Rsqrt, the softmax row, the
//! ReLU epilogue of a product) are compiled for the build's baseline and again for AVX2 and
//! AVX-512; the widest the CPU has is chosen at run time (module `isa`), with the same results bit
//! for bit. `DEVPLUG_CPU_ISA=base|v3|v4` caps the level.
//!
//! # Threads
//!
//! [`CpuContext::threads`] bounds how many pieces one call splits into. Work below about 64 K
//! elements (less for transcendental functions) stays on the calling thread with no overhead;
//! larger work runs on rayon's global pool (its size is `available_parallelism`, or
//! `RAYON_NUM_THREADS`), which the `gemm` crate uses too; a `threads` above the pool's size
//! only makes more pieces. Kernels may be called from several threads at once, including from
//! inside rayon tasks. Results do not depend on the thread count: float reductions split at
//! the same points whatever it is, elementwise pieces do not interact, and gemm splits a
//! product over blocks of the output, not over `k` (the tests check equality bit for bit).

// Index loops over several parallel per-axis arrays read better than zipped iterators here,
// and the polynomial coefficients of `math` are quoted as published.
#[allow(clippy::needless_range_loop)]
mod cast;
mod common;
mod elementwise;
mod half_float;
mod isa;
#[allow(clippy::needless_range_loop)]
mod layout;
#[allow(clippy::excessive_precision)]
mod math;
mod matmul;
#[allow(clippy::needless_range_loop)]
mod reduce;
mod softmax;
#[allow(clippy::needless_range_loop)]
mod walk;

#[cfg(test)]
#[allow(clippy::wrong_self_convention)]
mod testutil;

use crate::error::Result;
use crate::tensor::DType;

pub use common::MAX_RANK;

/// A contiguous, row-major tensor in host memory (bool = 1 byte, 0 or 1).
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub data: &'a [u8],
    pub dtype: DType,
    pub shape: &'a [usize],
}

/// A contiguous, row-major output tensor in host memory.
#[derive(Debug)]
pub struct ViewMut<'a> {
    pub data: &'a mut [u8],
    pub dtype: DType,
    pub shape: &'a [usize],
}

impl ViewMut<'_> {
    /// A shorter-lived `ViewMut` of the same tensor.
    pub fn reborrow(&mut self) -> ViewMut<'_> {
        ViewMut {
            data: self.data,
            dtype: self.dtype,
            shape: self.shape,
        }
    }

    /// A read-only view of the same tensor.
    pub fn as_view(&self) -> View<'_> {
        View {
            data: self.data,
            dtype: self.dtype,
            shape: self.shape,
        }
    }
}

/// Intra-op parallelism: how many threads a kernel may use (1 = the calling thread only).
#[derive(Clone, Copy, Debug)]
pub struct CpuContext {
    pub threads: usize,
}

impl CpuContext {
    /// The calling thread only.
    pub const SINGLE: CpuContext = CpuContext { threads: 1 };

    /// As many threads as the machine has (`std::thread::available_parallelism`).
    pub fn all_threads() -> CpuContext {
        CpuContext {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// Elementwise binary operations (see the module docs for their dtypes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    Pow,
}

/// Elementwise unary operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Tanh,
    Sqrt,
    Rsqrt,
    Sigmoid,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Pow,
    ];
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 8] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Sigmoid,
    ];
}

/// Elementwise comparisons; their output is bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
}

/// Reductions over a set of axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
    Mean,
}

/// `out = a op b` with NumPy broadcasting; `a`, `b` and `out` have one dtype and `out.shape` is
/// the broadcast of `a.shape` and `b.shape`.
pub fn binary(
    ctx: &CpuContext,
    op: BinaryOp,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
) -> Result<()> {
    elementwise::binary(ctx, op, a, b, out)
}

/// `out = op(a)`; `a` and `out` have the same shape and dtype.
pub fn unary(ctx: &CpuContext, op: UnaryOp, a: View<'_>, out: ViewMut<'_>) -> Result<()> {
    elementwise::unary(ctx, op, a, out)
}

/// `out = a op b` with broadcasting, as in [`binary`]; `out` is bool.
pub fn compare(
    ctx: &CpuContext,
    op: CompareOp,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
) -> Result<()> {
    elementwise::compare(ctx, op, a, b, out)
}

/// `out = cond ? a : b`, elementwise; `cond` is bool, `a`, `b` and `out` share a dtype, and
/// `out.shape` is the broadcast of the three shapes.
pub fn select(
    ctx: &CpuContext,
    cond: View<'_>,
    a: View<'_>,
    b: View<'_>,
    out: ViewMut<'_>,
) -> Result<()> {
    elementwise::select(ctx, cond, a, b, out)
}

/// Converts every element of `a` to `out.dtype`; the shapes are equal.
pub fn cast(ctx: &CpuContext, a: View<'_>, out: ViewMut<'_>) -> Result<()> {
    cast::cast(ctx, a, out)
}

/// Batched matrix product: `[.., m, k] x [.., k, n] -> [.., m, n]`, each operand transposed
/// first (its last two axes swapped) when asked. Both ranks are at least 2 and the batch
/// dimensions broadcast.
pub fn matmul(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    transpose_a: bool,
    transpose_b: bool,
    out: ViewMut<'_>,
) -> Result<()> {
    matmul::matmul(ctx, a, b, transpose_a, transpose_b, out)
}

/// `out = relu?(alpha * a' x b' + beta * c)` for 2-D f32/f64 (ONNX's Gemm; ReLU fused when
/// `relu`): `a'`, `b'` are `a`, `b` transposed when asked; `c` broadcasts to `[m, n]`.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    ctx: &CpuContext,
    a: View<'_>,
    b: View<'_>,
    c: View<'_>,
    transpose_a: bool,
    transpose_b: bool,
    alpha: f64,
    beta: f64,
    relu: bool,
    out: ViewMut<'_>,
) -> Result<()> {
    matmul::gemm_fused(
        ctx,
        a,
        b,
        c,
        transpose_a,
        transpose_b,
        alpha,
        beta,
        relu,
        out,
    )
}

/// Softmax (or LogSoftmax when `log`) of f32/f64 `a` along `axis` (`0 <= axis < rank`).
pub fn softmax(
    ctx: &CpuContext,
    a: View<'_>,
    axis: usize,
    log: bool,
    out: ViewMut<'_>,
) -> Result<()> {
    softmax::softmax(ctx, a, axis, log, out)
}

/// Reduces `a` over `axes` (sorted, unique). `out.shape` is `a.shape` without those axes, or
/// with them as 1 (keep_dims); both are accepted.
pub fn reduce(
    ctx: &CpuContext,
    op: ReduceOp,
    a: View<'_>,
    axes: &[usize],
    out: ViewMut<'_>,
) -> Result<()> {
    reduce::reduce(ctx, op, a, axes, out)
}

/// Broadcasts `a` to `out.shape` (NumPy rules).
pub fn broadcast_to(ctx: &CpuContext, a: View<'_>, out: ViewMut<'_>) -> Result<()> {
    layout::broadcast_to(ctx, a, out)
}

/// `out` axis `i` is `a` axis `perm[i]`.
pub fn transpose(ctx: &CpuContext, a: View<'_>, perm: &[usize], out: ViewMut<'_>) -> Result<()> {
    layout::transpose(ctx, a, perm, out)
}

/// Joins `inputs` along `axis`; they agree with `out` on every other axis.
pub fn concat(ctx: &CpuContext, inputs: &[View<'_>], axis: usize, out: ViewMut<'_>) -> Result<()> {
    layout::concat(ctx, inputs, axis, out)
}

/// `out = a[starts[0] .. starts[0] + out.shape[0], ...]` (unit strides).
pub fn slice(ctx: &CpuContext, a: View<'_>, starts: &[usize], out: ViewMut<'_>) -> Result<()> {
    layout::slice(ctx, a, starts, out)
}

/// Sets every element of `out` to `value`, a one-element tensor of `out`'s dtype.
pub fn fill(ctx: &CpuContext, value: View<'_>, out: ViewMut<'_>) -> Result<()> {
    layout::fill(ctx, value, out)
}

/// Sets every element of `out` to its index along `axis`.
pub fn iota(ctx: &CpuContext, axis: usize, out: ViewMut<'_>) -> Result<()> {
    layout::iota(ctx, axis, out)
}

/// `out = inputs[0] + inputs[1] + ...`; all of one shape and dtype, at least one input.
pub fn add_n(ctx: &CpuContext, inputs: &[View<'_>], out: ViewMut<'_>) -> Result<()> {
    elementwise::add_n(ctx, inputs, out)
}
