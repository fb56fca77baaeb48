//! Plumbing shared by the kernel families: typed views of byte buffers, validation, the split
//! across threads, and the element traits the kernels are generic over.

use std::borrow::Cow;
use std::mem::size_of;

use crate::error::{Error, Result};
use crate::tensor::DType;

use super::CpuContext;

/// The largest rank the kernels accept (the runtime's own limit).
pub const MAX_RANK: usize = 8;

/// The smallest piece of cheap elementwise work handed to one thread (so work below 64 K
/// elements runs on the calling thread).
pub(crate) const PAR_CHUNK: usize = 1 << 15;
/// The smallest piece of expensive (transcendental) elementwise work handed to one thread.
pub(crate) const PAR_CHUNK_HEAVY: usize = 1 << 12;

pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::invalid_argument(message)
}

/// Plain element types.
///
/// # Safety
/// Implementors are `Copy`, have no padding and no invalid bit patterns, so any initialized
/// bytes of the right size and alignment are a valid value.
pub(crate) unsafe trait Pod: Copy + Default + Send + Sync + 'static {}

// SAFETY: primitive numbers: no padding, every bit pattern valid.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for u16 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}
// SAFETY: as above.
unsafe impl Pod for i32 {}
// SAFETY: as above.
unsafe impl Pod for i64 {}
// SAFETY: as above.
unsafe impl Pod for i128 {}
// SAFETY: as above.
unsafe impl Pod for f32 {}
// SAFETY: as above.
unsafe impl Pod for f64 {}
// SAFETY: `B8` is `repr(transparent)` over `u8`.
unsafe impl Pod for B8 {}

/// A stored bool: one byte, any non-zero value reads as true, kernels write 0 or 1.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct B8(pub u8);

impl B8 {
    #[inline(always)]
    pub fn get(self) -> bool {
        self.0 != 0
    }
    #[inline(always)]
    pub fn new(v: bool) -> B8 {
        B8(v as u8)
    }
}

pub(crate) fn as_bytes<T: Pod>(v: &[T]) -> &[u8] {
    // SAFETY: `T: Pod` has no padding, so all of its bytes are initialized.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

pub(crate) fn as_bytes_mut<T: Pod>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; any bytes written are a valid `T` (`Pod`).
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// `bytes` as a slice of `T`: borrowed when aligned, otherwise copied.
#[inline(always)]
pub(crate) fn typed<T: Pod>(bytes: &[u8]) -> Cow<'_, [T]> {
    let size = size_of::<T>();
    if (bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
        && bytes.len().is_multiple_of(size)
    {
        // SAFETY: the pointer is aligned for `T` and the bytes hold `len / size` whole `T`s,
        // initialized; `T: Pod`, so they are valid values.
        let s =
            unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) };
        return Cow::Borrowed(s);
    }
    Cow::Owned(copied(bytes))
}

#[cold]
#[inline(never)]
fn copied<T: Pod>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / size_of::<T>();
    let mut v = vec![T::default(); n];
    as_bytes_mut(&mut v).copy_from_slice(&bytes[..n * size_of::<T>()]);
    v
}

/// Runs `f` on `bytes` as a mutable slice of `T`: in place when aligned, otherwise on a copy
/// that is written back afterwards.
#[inline(always)]
pub(crate) fn with_mut<T: Pod, R>(bytes: &mut [u8], f: impl FnOnce(&mut [T]) -> R) -> R {
    let size = size_of::<T>();
    if (bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
        && bytes.len().is_multiple_of(size)
    {
        // SAFETY: as in `typed`; the slice is borrowed uniquely, and whatever `f` writes into
        // it is valid bytes.
        let s = unsafe {
            std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<T>(), bytes.len() / size)
        };
        return f(s);
    }
    let mut tmp: Vec<T> = copied(bytes);
    let r = f(&mut tmp);
    let nb = tmp.len() * size;
    bytes[..nb].copy_from_slice(as_bytes(&tmp));
    r
}

/// The element count of `shape`, checked for overflow.
pub(crate) fn numel(what: &str, shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| invalid(format!("{what}: shape {shape:?} has too many elements")))
}

/// Checks that `len` bytes hold a `dtype` tensor of `shape`; returns its element count.
#[inline(always)]
pub(crate) fn check_len(what: &str, len: usize, dtype: DType, shape: &[usize]) -> Result<usize> {
    if shape.len() <= MAX_RANK {
        let mut n = 1usize;
        let mut ok = true;
        for &d in shape {
            match n.checked_mul(d) {
                Some(v) => n = v,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && n.checked_mul(dtype.size()) == Some(len) {
            return Ok(n);
        }
    }
    Err(len_error(what, len, dtype, shape))
}

#[cold]
#[inline(never)]
fn len_error(what: &str, len: usize, dtype: DType, shape: &[usize]) -> Error {
    if shape.len() > MAX_RANK {
        return invalid(format!(
            "{what}: rank {} exceeds the maximum rank {MAX_RANK}",
            shape.len()
        ));
    }
    match numel(what, shape).map(|n| n.checked_mul(dtype.size())) {
        Ok(Some(bytes)) => invalid(format!(
            "{what}: a {dtype} tensor of shape {shape:?} holds {bytes} bytes; the data has {len}"
        )),
        Ok(None) => invalid(format!("{what}: shape {shape:?} has too many elements")),
        Err(e) => e,
    }
}

/// Checks that `got` is `want`.
#[inline(always)]
pub(crate) fn check_dtype(what: &str, got: DType, want: DType) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(dtype_error(what, got, want))
    }
}

#[cold]
#[inline(never)]
fn dtype_error(what: &str, got: DType, want: DType) -> Error {
    invalid(format!("{what} is {got} but must be {want}"))
}

/// Shape equality, inlined (slice `==` calls `memcmp`, which costs more for short shapes).
#[inline(always)]
pub(crate) fn same_shape(a: &[usize], b: &[usize]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// How many pieces to split `n` units of work into: 1 unless there are threads and at least
/// two pieces of `min_chunk`.
#[inline]
pub(crate) fn parts_for(ctx: &CpuContext, n: usize, min_chunk: usize) -> usize {
    if ctx.threads <= 1 || n < 2 * min_chunk {
        1
    } else {
        ctx.threads.min(n / min_chunk).max(1)
    }
}

/// Calls `f(start, piece)` for `parts` contiguous pieces of `out` (in parallel when `parts` >
/// 1); `start` is the piece's offset in `out`.
#[inline]
pub(crate) fn par_chunks<T: Send>(out: &mut [T], parts: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if parts <= 1 || out.len() < 2 {
        f(0, out);
        return;
    }
    // Pieces are a multiple of 64 elements so that no two threads write one cache line.
    let chunk = out.len().div_ceil(parts).next_multiple_of(64);
    use rayon::prelude::*;
    out.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, c)| f(i * chunk, c));
}

/// Like [`par_chunks`], but pieces are whole rows of `row` elements.
pub(crate) fn par_rows<T: Send>(
    out: &mut [T],
    row: usize,
    parts: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let rows = out.len().checked_div(row).unwrap_or(0);
    if parts <= 1 || rows < 2 {
        f(0, out);
        return;
    }
    let per = rows.div_ceil(parts.min(rows));
    use rayon::prelude::*;
    out.par_chunks_mut(per * row)
        .enumerate()
        .for_each(|(i, c)| f(i * per, c));
}

/// Numbers the arithmetic kernels work on: f32, f64, i32, i64, u8.
pub(crate) trait Num: Pod + PartialOrd + PartialEq + std::fmt::Debug {
    const ZERO: Self;
    const ONE: Self;
    /// The smallest value (-inf for floats).
    const LOWEST: Self;
    /// The largest value (+inf for floats).
    const HIGHEST: Self;
    const IS_FLOAT: bool;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn pow(self, o: Self) -> Self;
    /// The larger; NaN if either is NaN.
    fn max(self, o: Self) -> Self;
    /// The smaller; NaN if either is NaN.
    fn min(self, o: Self) -> Self;
    /// `i as Self` (wrapping for u8).
    fn from_index(i: usize) -> Self;
    /// `self as i128`.
    fn to_i128(self) -> i128;
    /// `v as Self` (wrapping for integers).
    fn from_i128(v: i128) -> Self;
}

/// Signed numbers: Neg and Abs.
pub(crate) trait Signed: Num {
    fn neg(self) -> Self;
    fn abs(self) -> Self;
}

/// f32 and f64.
pub(crate) trait Float: Signed {
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn tanh(self) -> Self;
    fn sqrt(self) -> Self;
    fn recip(self) -> Self;
    fn sigmoid(self) -> Self;
}

macro_rules! impl_float {
    ($t:ty, $exp:expr, $ln:expr, $tanh:expr, $sigmoid:expr) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            const IS_FLOAT: bool = true;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                self / o
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                self.powf(o)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                if self > o || self.is_nan() {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                if self < o || self.is_nan() {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn from_index(i: usize) -> Self {
                i as $t
            }
            #[inline(always)]
            fn to_i128(self) -> i128 {
                self as i128
            }
            #[inline(always)]
            fn from_i128(v: i128) -> Self {
                v as $t
            }
        }
        impl Signed for $t {
            #[inline(always)]
            fn neg(self) -> Self {
                -self
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
        }
        impl Float for $t {
            #[inline(always)]
            fn exp(self) -> Self {
                $exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                $ln(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                $tanh(self)
            }
            #[inline(always)]
            fn sigmoid(self) -> Self {
                $sigmoid(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn recip(self) -> Self {
                1.0 / self
            }
        }
    };
}
impl_float!(
    f32,
    super::math::exp_f32,
    super::math::ln_f32,
    super::math::tanh_f32,
    super::math::sigmoid_f32
);
impl_float!(f64, f64::exp, f64::ln, f64::tanh, |x: f64| 1.0
    / (1.0 + (-x).exp()));

macro_rules! impl_int {
    ($t:ty, $pow:ident) => {
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            const IS_FLOAT: bool = false;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                $pow(self, o)
            }
            #[inline(always)]
            fn max(self, o: Self) -> Self {
                if self >= o {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn min(self, o: Self) -> Self {
                if self <= o {
                    self
                } else {
                    o
                }
            }
            #[inline(always)]
            fn from_index(i: usize) -> Self {
                i as $t
            }
            #[inline(always)]
            fn to_i128(self) -> i128 {
                self as i128
            }
            #[inline(always)]
            fn from_i128(v: i128) -> Self {
                v as $t
            }
        }
    };
}

/// `base ^ exp` by squaring, wrapping.
#[inline]
fn upow<T: Copy>(base: T, mut exp: u64, one: T, mul: impl Fn(T, T) -> T) -> T {
    let mut acc = one;
    let mut b = base;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = mul(acc, b);
        }
        exp >>= 1;
        if exp > 0 {
            b = mul(b, b);
        }
    }
    acc
}

macro_rules! signed_pow {
    ($name:ident, $t:ty) => {
        fn $name(base: $t, exp: $t) -> $t {
            if exp < 0 {
                match base {
                    1 => 1,
                    -1 => {
                        if exp & 1 == 0 {
                            1
                        } else {
                            -1
                        }
                    }
                    _ => 0,
                }
            } else {
                upow(base, exp as u64, 1, <$t>::wrapping_mul)
            }
        }
    };
}
signed_pow!(pow_i32, i32);
signed_pow!(pow_i64, i64);

fn pow_u8(base: u8, exp: u8) -> u8 {
    upow(base, exp as u64, 1, u8::wrapping_mul)
}

impl_int!(i32, pow_i32);
impl_int!(i64, pow_i64);
impl_int!(u8, pow_u8);

macro_rules! impl_signed_int {
    ($t:ty) => {
        impl Signed for $t {
            #[inline(always)]
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline(always)]
            fn abs(self) -> Self {
                self.wrapping_abs()
            }
        }
    };
}
impl_signed_int!(i32);
impl_signed_int!(i64);

/// The error of a typed loop reached with f16 or bf16, which every kernel computes through f32
/// ([`half_float::via_f32`](super::half_float::via_f32)) before it gets there: a bug, reported
/// as an internal error instead of a panic.
#[cold]
pub(crate) fn half_unrouted(dtype: DType) -> Error {
    Error::internal(format!(
        "a {dtype} tensor reached a typed CPU loop instead of its f32 path"
    ))
}

/// Runs `$body` with `$T` the Rust type of the numeric dtype `$dt` (f32, f64, i32, i64, u8);
/// evaluates `$bool` for bool. f16 and bf16 return [`half_unrouted`]: kernels send them through
/// f32 first.
macro_rules! num_dispatch {
    ($dt:expr, $T:ident => $body:expr, bool => $bool:expr) => {
        match $dt {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::Bool => $bool,
            DType::F16 | DType::BF16 => {
                return Err($crate::host::kernels::common::half_unrouted($dt))
            }
        }
    };
}
pub(crate) use num_dispatch;

/// Runs `$body` with `$T` the storage type of `$dt`: the numeric types, and `B8` for bool.
macro_rules! any_dispatch {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::Bool => {
                type $T = B8;
                $body
            }
            DType::F16 | DType::BF16 => {
                return Err($crate::host::kernels::common::half_unrouted($dt))
            }
        }
    };
}
pub(crate) use any_dispatch;

/// Runs `$body` with `$T` an unsigned carrier of `$size` bytes (1, 4 or 8), for dtype-agnostic
/// copies.
macro_rules! size_dispatch {
    ($size:expr, $T:ident => $body:expr) => {
        match $size {
            1 => {
                type $T = u8;
                $body
            }
            2 => {
                type $T = u16;
                $body
            }
            4 => {
                type $T = u32;
                $body
            }
            _ => {
                type $T = u64;
                $body
            }
        }
    };
}
pub(crate) use size_dispatch;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misaligned_bytes_are_copied() {
        let v: Vec<u32> = vec![0, 1, 2, 3, 4];
        let bytes = as_bytes(&v);
        let shifted = &bytes[1..17];
        let t = typed::<u32>(shifted);
        assert!(matches!(t, Cow::Owned(_)));
        assert_eq!(t.len(), 4);
        let aligned = typed::<u32>(&bytes[4..20]);
        assert!(matches!(aligned, Cow::Borrowed(_)));
        assert_eq!(&*aligned, &[1, 2, 3, 4]);

        let mut w: Vec<u32> = vec![0; 5];
        let wb = as_bytes_mut(&mut w);
        with_mut::<u32, _>(&mut wb[1..9], |s| {
            s[0] = 0x01020304;
            s[1] = 0x05060708;
        });
        let mut expect = [0u8; 8];
        expect[..4].copy_from_slice(&0x01020304u32.to_ne_bytes());
        expect[4..].copy_from_slice(&0x05060708u32.to_ne_bytes());
        assert_eq!(&as_bytes(&w)[1..9], &expect);
    }

    #[test]
    fn integer_pow_rules() {
        assert_eq!(2i32.pow(10), 1024);
        assert_eq!(Num::pow(2i32, -1), 0);
        assert_eq!(Num::pow(1i32, -5), 1);
        assert_eq!(Num::pow(-1i32, -5), -1);
        assert_eq!(Num::pow(-1i64, -4), 1);
        assert_eq!(Num::pow(0i64, -4), 0);
        assert_eq!(Num::pow(3i32, 40), 3i32.wrapping_pow(40));
        assert_eq!(
            Num::pow(3i64, i64::MAX),
            upow(3i64, i64::MAX as u64, 1, i64::wrapping_mul)
        );
        assert_eq!(Num::pow(2u8, 9), 0);
        assert_eq!(Num::pow(7u8, 0), 1);
    }

    #[test]
    fn parts_stay_one_for_small_work() {
        let ctx = CpuContext { threads: 8 };
        assert_eq!(parts_for(&ctx, 16, PAR_CHUNK), 1);
        assert_eq!(parts_for(&CpuContext { threads: 1 }, 1 << 24, PAR_CHUNK), 1);
        assert!(parts_for(&ctx, 1 << 20, PAR_CHUNK) > 1);
    }
}
