//! Tensors: a dtype, a shape, and a reference-counted buffer on one device.

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::Buffer;

/// Element types. The numeric values are the C API's `DP_DTYPE_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum DType {
    /// IEEE 754 binary32 (`f32`).
    F32 = 1,
    /// IEEE 754 binary64 (`f64`).
    F64 = 2,
    /// Signed 32-bit integers (`i32`); integer arithmetic wraps.
    I32 = 3,
    /// Signed 64-bit integers (`i64`).
    I64 = 4,
    /// Unsigned bytes (`u8`).
    U8 = 5,
    /// One byte per element, 0 or 1.
    Bool = 6,
    /// IEEE 754 binary16 (`half::f16`).
    F16 = 7,
    /// bfloat16: f32's exponent, 8 bits of precision (`half::bf16`).
    BF16 = 8,
}

impl DType {
    /// Every dtype, in numeric order.
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
        DType::F16,
        DType::BF16,
    ];

    /// The dtypes of plugin ABI 1.0–1.2 (f16 and bf16 came with 1.3).
    pub const BEFORE_HALVES: [DType; 6] = [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::Bool,
    ];

    /// The dtype of a C API value (`DP_DTYPE_*`), if any.
    pub fn from_i32(v: i32) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| *d as i32 == v)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::U8 | DType::Bool => 1,
        }
    }

    /// The lower-case name (`f32`, `bf16`, `bool`), as messages and op signatures write it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// The bytes of one element of this dtype holding `value`, converted as Rust's `as` does
    /// (f16 and bf16 rounded to nearest once, ties to even; bool is `value != 0`).
    pub fn scalar_bytes(self, value: f64) -> Vec<u8> {
        match self {
            DType::F32 => (value as f32).to_ne_bytes().to_vec(),
            DType::F64 => value.to_ne_bytes().to_vec(),
            DType::I32 => (value as i32).to_ne_bytes().to_vec(),
            DType::I64 => (value as i64).to_ne_bytes().to_vec(),
            DType::U8 => vec![value as u8],
            DType::Bool => vec![u8::from(value != 0.0)],
            DType::F16 => {
                let v = round_to_odd(value);
                half::f16::from_f32(v).to_ne_bytes().to_vec()
            }
            DType::BF16 => {
                let v = round_to_odd(value);
                half::bf16::from_f32(v).to_ne_bytes().to_vec()
            }
        }
    }

    /// True for f16 and bf16, the dtypes the CPU device computes in f32 (each result rounded
    /// once to the dtype).
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// True for the floating-point dtypes.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `x` rounded to f32 toward zero, with the last bit set when that was inexact ("round to
/// odd"). Rounding the result to f16 or bf16 to nearest, ties to even, gives the correctly
/// rounded `x`: f32 keeps at least two more bits than either format, down to their smallest
/// subnormals, and an odd last bit stands for "something below was not zero".
#[inline]
pub(crate) fn round_to_odd(x: f64) -> f32 {
    let t = x as f32;
    if x.is_nan() || f64::from(t) == x {
        return t;
    }
    let mut bits = t.to_bits();
    if f64::from(t).abs() > x.abs() {
        // Rounded away from zero (to infinity, too): one step back toward it.
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

mod sealed {
    /// Keeps [`Element`](super::Element) closed: tensors are read into and written from
    /// slices of these types as raw bytes, which is sound only for types without padding whose
    /// every bit pattern is a value of `DTYPE`'s size (`bool` is checked on the way out).
    pub trait Sealed {}
}

/// Rust element types of tensors: `f32`, `f64`, `i32`, `i64`, `u8`, `bool`, [`half::f16`] and
/// [`half::bf16`], each with its [`DType`]. Sealed: no other type can be one (tensors are
/// read and written as raw bytes of these types), so this does not compile:
///
/// ```compile_fail
/// use devplug_core::{DType, Element};
/// #[derive(Clone, Copy)]
/// struct Ptr(&'static u64);
/// impl Element for Ptr {
///     const DTYPE: DType = DType::I64;
/// }
/// ```
pub trait Element: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The tensor dtype this Rust type holds.
    const DTYPE: DType;
}

impl sealed::Sealed for f32 {}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
}
impl sealed::Sealed for f64 {}
impl Element for f64 {
    const DTYPE: DType = DType::F64;
}
impl sealed::Sealed for i32 {}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
}
impl sealed::Sealed for i64 {}
impl Element for i64 {
    const DTYPE: DType = DType::I64;
}
impl sealed::Sealed for u8 {}
impl Element for u8 {
    const DTYPE: DType = DType::U8;
}
impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
}
impl sealed::Sealed for half::f16 {}
impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
}
impl sealed::Sealed for half::bf16 {}
impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
}

/// The largest rank a tensor may have.
pub const MAX_RANK: usize = 8;

/// Checks a shape and returns its element count.
pub fn num_elements(shape: &[i64]) -> Result<u64> {
    if shape.len() > MAX_RANK {
        return Err(Error::invalid_argument(format!(
            "rank {} exceeds the maximum rank {MAX_RANK}",
            shape.len()
        )));
    }
    let mut n: u64 = 1;
    for (i, &d) in shape.iter().enumerate() {
        let d = u64::try_from(d).map_err(|_| {
            Error::invalid_argument(format!("dimension {i} of shape {shape:?} is negative"))
        })?;
        n = n.checked_mul(d).ok_or_else(|| {
            Error::invalid_argument(format!("shape {shape:?} has too many elements"))
        })?;
    }
    Ok(n)
}

/// A shape of at most [`MAX_RANK`] dimensions, stored inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: [i64; MAX_RANK],
    rank: u8,
}

impl Shape {
    /// The shape `dims`; the rank was checked by [`num_elements`] before.
    fn new(dims: &[i64]) -> Shape {
        let mut s = Shape {
            dims: [0; MAX_RANK],
            rank: dims.len().min(MAX_RANK) as u8,
        };
        s.dims[..s.rank as usize].copy_from_slice(&dims[..s.rank as usize]);
        s
    }

    /// The shape `dims`, or `INVALID_ARGUMENT` when it has more than [`MAX_RANK`] dimensions.
    /// Dimensions are not checked here (see [`num_elements`]).
    pub fn from_slice(dims: &[i64]) -> Result<Shape> {
        if dims.len() > MAX_RANK {
            return Err(Error::invalid_argument(format!(
                "rank {} exceeds the maximum rank {MAX_RANK}",
                dims.len()
            )));
        }
        Ok(Shape::new(dims))
    }

    /// The scalar shape `[]`.
    pub const fn scalar() -> Shape {
        Shape {
            dims: [0; MAX_RANK],
            rank: 0,
        }
    }

    /// Appends a dimension; `INVALID_ARGUMENT` when the shape already has [`MAX_RANK`].
    pub fn push(&mut self, dim: i64) -> Result<()> {
        let r = self.rank as usize;
        if r == MAX_RANK {
            return Err(Error::invalid_argument(format!(
                "rank exceeds the maximum rank {MAX_RANK}"
            )));
        }
        self.dims[r] = dim;
        self.rank += 1;
        Ok(())
    }
}

impl Default for Shape {
    fn default() -> Shape {
        Shape::scalar()
    }
}

impl std::ops::DerefMut for Shape {
    fn deref_mut(&mut self) -> &mut [i64] {
        &mut self.dims[..self.rank as usize]
    }
}

impl std::ops::Deref for Shape {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        &self.dims[..self.rank as usize]
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

// `Tensor::dims` views a shape's `i64`s as `usize`s.
const _: () = assert!(
    std::mem::size_of::<usize>() == std::mem::size_of::<i64>()
        && std::mem::align_of::<usize>() == std::mem::align_of::<i64>(),
    "devplug needs a 64-bit target"
);

/// A dense, row-major tensor on one device. Cloning shares the buffer (and allocates nothing).
/// Dropping the last reference to a small buffer returns it to its device's buffer pool.
///
/// Tensors are values: no op changes its inputs, and ops return new tensors.
/// [`Tensor::write_slice`] and writes through [`Tensor::buffer`] are the exceptions, seen by
/// every clone. A tensor holds its device (an `Arc`), so it stays readable after the
/// [`Runtime`](crate::Runtime) that made it is dropped; another runtime takes it as an input
/// (copied to where the op runs). `Send` and `Sync`.
///
/// ```
/// use devplug_core::{DType, Runtime, RuntimeOptions, Tensor};
/// let rt = Runtime::new(RuntimeOptions::default())?;
/// let t = Tensor::from_slice(rt.default_device(), &[2, 2], &[1i32, 2, 3, 4])?;
/// assert_eq!((t.dtype(), t.shape()), (DType::I32, &[2i64, 2][..]));
/// assert_eq!(t.to_vec::<i32>()?, [1, 2, 3, 4]);
/// # Ok::<(), devplug_core::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Shape,
    /// The contents' size in bytes (elements × the dtype's size), known when the tensor is
    /// made: kernels ask for it on every op.
    bytes: u64,
    /// Taken out only in `drop`.
    buffer: ManuallyDrop<Arc<Buffer>>,
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: `buffer` is not used again: this is the tensor's destructor.
        let buffer = unsafe { ManuallyDrop::take(&mut self.buffer) };
        buffer.recycle();
    }
}

impl Tensor {
    /// A tensor of zeros.
    pub fn zeros(device: &Arc<Device>, dtype: DType, shape: &[i64]) -> Result<Tensor> {
        let t = Tensor::unwritten(device, dtype, shape)?;
        t.buffer.memset(0, 0, t.buffer.size())?;
        Ok(t)
    }

    /// A tensor whose memory is allocated and not written: what the allocator gave, possibly
    /// never initialized, possibly a dropped tensor's contents. For tests of allocation and
    /// for outputs a kernel or a copy fills next; [`Tensor::zeros`] otherwise.
    ///
    /// # Safety
    /// Write every byte (a kernel, [`Buffer::write`](crate::Buffer::write), a copy into it)
    /// before anything reads it (`to_vec`, `to_bytes`, a copy from it, an op taking it).
    pub unsafe fn uninit(device: &Arc<Device>, dtype: DType, shape: &[i64]) -> Result<Tensor> {
        Tensor::unwritten(device, dtype, shape)
    }

    /// [`Tensor::uninit`] inside the crate, for tensors written before anything reads them.
    pub(crate) fn unwritten(device: &Arc<Device>, dtype: DType, shape: &[i64]) -> Result<Tensor> {
        let bytes = byte_size(dtype, shape)?;
        Ok(Tensor {
            dtype,
            shape: Shape::new(shape),
            bytes,
            buffer: ManuallyDrop::new(device.allocate(bytes)?),
        })
    }

    /// A kernel's output, about to be written by a kernel on `device` (its memory may be reused
    /// in stream order, see `memory::stream_order`).
    pub(crate) fn output(device: &Arc<Device>, dtype: DType, shape: &[i64]) -> Result<Tensor> {
        let bytes = byte_size(dtype, shape)?;
        Ok(Tensor {
            dtype,
            shape: Shape::new(shape),
            bytes,
            buffer: ManuallyDrop::new(device.allocate_output(bytes)?),
        })
    }

    /// A tensor holding `data`: row-major bytes, exactly `num_elements * dtype.size()` of them.
    pub fn from_bytes(
        device: &Arc<Device>,
        dtype: DType,
        shape: &[i64],
        data: &[u8],
    ) -> Result<Tensor> {
        let bytes = byte_size(dtype, shape)?;
        if data.len() as u64 != bytes {
            return Err(Error::invalid_argument(format!(
                "a {dtype} tensor of shape {shape:?} holds {bytes} bytes; the data has {}",
                data.len()
            )));
        }
        if dtype == DType::Bool {
            if let Some(i) = data.iter().position(|b| *b > 1) {
                return Err(Error::invalid_argument(format!(
                    "bool element {i} is {}, not 0 or 1",
                    data[i]
                )));
            }
        }
        let t = Tensor::unwritten(device, dtype, shape)?;
        t.buffer.write(0, data)?;
        Ok(t)
    }

    /// A tensor holding `data` in row-major order.
    pub fn from_slice<T: Element>(
        device: &Arc<Device>,
        shape: &[i64],
        data: &[T],
    ) -> Result<Tensor> {
        Tensor::from_bytes(device, T::DTYPE, shape, as_bytes(data))
    }

    /// Writes `data` over the whole tensor, in row-major order, synchronously (what a Rust
    /// kernel does with its outputs: `cx.outputs[0].write_slice(&values)`).
    /// `INVALID_ARGUMENT` when `T` is not the tensor's dtype or `data` does not hold exactly
    /// its elements. Every tensor sharing the buffer sees the new values.
    pub fn write_slice<T: Element>(&self, data: &[T]) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(Error::invalid_argument(format!(
                "the tensor holds {} elements, not {}",
                self.dtype,
                T::DTYPE
            )));
        }
        if data.len() as u64 != self.num_elements() {
            return Err(Error::invalid_argument(format!(
                "the tensor of shape {:?} holds {} elements; the slice has {}",
                self.shape(),
                self.num_elements(),
                data.len()
            )));
        }
        self.buffer.write(0, as_bytes(data))
    }

    /// A tensor over an existing buffer, which must be at least as large as the shape needs.
    pub fn from_buffer(buffer: Arc<Buffer>, dtype: DType, shape: &[i64]) -> Result<Tensor> {
        let bytes = byte_size(dtype, shape)?;
        if bytes > buffer.size() {
            return Err(Error::invalid_argument(format!(
                "a {dtype} tensor of shape {shape:?} needs {bytes} bytes; the buffer has {}",
                buffer.size()
            )));
        }
        Ok(Tensor {
            dtype,
            shape: Shape::new(shape),
            bytes,
            buffer: ManuallyDrop::new(buffer),
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The dimensions, outermost first (`[]` for a scalar).
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }

    /// The shape as `usize`s (no copy: dimensions are never negative).
    pub fn dims(&self) -> &[usize] {
        let s: &[i64] = &self.shape;
        // SAFETY: `usize` and `i64` have the same size and alignment (asserted above), every
        // bit pattern is a valid `usize`, and a shape's dimensions are non-negative, so each
        // reads as the same number.
        unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<usize>(), s.len()) }
    }

    /// The number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.shape.rank as usize
    }

    /// The number of elements: the product of the dimensions (1 for a scalar).
    pub fn num_elements(&self) -> u64 {
        self.shape.iter().map(|d| *d as u64).product()
    }

    /// The size of the contents in bytes: elements × [`DType::size`].
    pub fn byte_size(&self) -> u64 {
        self.bytes
    }

    /// Where the contents start in host memory, [`Tensor::byte_size`] bytes; `None` when the
    /// device's memory is not host-visible (the host may not dereference its addresses: read
    /// such a tensor with [`Tensor::read_bytes`], or copy it to the CPU).
    ///
    /// A host reads and writes the elements there without a copy (C's `dp_tensor_data`): the
    /// address is valid while a reference to the tensor (or its buffer) lives; what is written
    /// there changes the tensor for every holder (clones, graphs that hold it as a constant);
    /// and a device that runs its work on streams (a plugin's host-visible device) may still
    /// be writing an op's output: synchronize it first. The CPU device's ops are done when
    /// they return. Dereferencing the pointer is `unsafe`, as for any raw pointer. The CPU
    /// kernels and [`KernelContext`](crate::KernelContext)'s slices use it too.
    pub fn host_ptr(&self) -> Option<*mut u8> {
        self.device()
            .host_visible()
            .then(|| self.buffer.ptr().0 as usize as *mut u8)
    }

    /// The device the tensor lives on.
    pub fn device(&self) -> &Arc<Device> {
        self.buffer.device()
    }

    /// The device memory holding the contents (shared by clones; it may be larger than
    /// [`Tensor::byte_size`] for a tensor made by [`Tensor::from_buffer`]).
    pub fn buffer(&self) -> &Arc<Buffer> {
        &self.buffer
    }

    /// Reads the contents into `dst`, which must have exactly `byte_size()` bytes.
    pub fn read_bytes(&self, dst: &mut [u8]) -> Result<()> {
        if dst.len() as u64 != self.byte_size() {
            return Err(Error::invalid_argument(format!(
                "the tensor holds {} bytes but the destination has {}",
                self.byte_size(),
                dst.len()
            )));
        }
        self.buffer.read(0, dst)
    }

    /// The contents as row-major bytes (see [`Tensor::read_bytes`]).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.byte_size() as usize];
        self.read_bytes(&mut v)?;
        Ok(v)
    }

    /// The elements, in row-major order. `T` must match the dtype (`INVALID_ARGUMENT`
    /// otherwise); f16 and bf16 read as [`half::f16`] and [`half::bf16`]. Like every read, it
    /// waits for the work queued on the device's default stream (the ops that produced the
    /// tensor), not for streams the host created: synchronize those first.
    pub fn to_vec<T: Element + Default>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::invalid_argument(format!(
                "the tensor holds {} elements, not {}",
                self.dtype,
                T::DTYPE
            )));
        }
        let mut v = vec![T::default(); self.num_elements() as usize];
        if self.dtype == DType::Bool {
            // Device memory may hold any byte; only 0 and 1 are valid `bool`s.
            let bytes = self.to_bytes()?;
            if let Some(i) = bytes.iter().position(|b| *b > 1) {
                return Err(Error::new(
                    crate::error::Code::DataLoss,
                    format!("bool element {i} holds {}, not 0 or 1", bytes[i]),
                ));
            }
            as_bytes_mut(&mut v).copy_from_slice(&bytes);
        } else {
            self.buffer.read(0, as_bytes_mut(&mut v))?;
        }
        Ok(v)
    }

    /// A copy of this tensor on `device` (any device, of any runtime; the same device makes a
    /// copy too). Synchronous: it returns once the copy is done, after the work queued on both
    /// devices' default streams.
    pub fn copy_to(&self, device: &Arc<Device>) -> Result<Tensor> {
        let t = Tensor::unwritten(device, self.dtype, &self.shape)?;
        t.buffer.copy_from(0, &self.buffer, 0, self.byte_size())?;
        Ok(t)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({} {:?} on {})",
            self.dtype,
            self.shape,
            self.device().name()
        )
    }
}

/// The bytes a tensor of `dtype` and `shape` holds; `INVALID_ARGUMENT` past what a tensor may.
pub(crate) fn byte_size(dtype: DType, shape: &[i64]) -> Result<u64> {
    num_elements(shape)?
        .checked_mul(dtype.size() as u64)
        .filter(|b| *b <= isize::MAX as u64)
        .ok_or_else(|| {
            Error::invalid_argument(format!(
                "a {dtype} tensor of shape {shape:?} has too many elements"
            ))
        })
}

fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: `Element` is sealed to plain value types without padding (f32, f64, i32, i64,
    // u8, bool, f16, bf16); viewing their memory as bytes is valid for the slice's length.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

fn as_bytes_mut<T: Element>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; every bit pattern is a valid f32/f64/i32/i64/u8/f16/bf16, and
    // callers write only 0 or 1 into the bytes of a `bool` (see `Tensor::to_vec`).
    unsafe {
        std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data))
    }
}
