//! Kernels at the boundary (ABI 1.1): the host's `register_kernel` and `attr_*` functions
//! (and, from ABI 1.4, `allocate_temp`), the `compute` trampolines, and the kernel context's
//! views of the host's tensors.
//!
//! A kernel's `kernel_data` is a boxed [`KernelEntry`] (the plugin's closure, its op name and
//! the host it was registered with). The host keeps it until shutdown; `HostShared` owns it
//! and frees it in `retire` (shutdown, or a failed init that the host rolled back).
//!
//! A kernel with a state (ABI 1.5) also has `create` and `destroy` trampolines: a state is a
//! boxed [`StateBox`] the host owns from `create` to `destroy`. From a host that passes no
//! state (older than 1.5), its compute trampoline makes one for the launch and drops it in
//! stream order behind the launch's work.

use std::any::TypeId;
use std::ffi::{c_char, c_void, CString};
use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, offset_of, size_of};
use std::ops::Deref;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Arc;

use devplug_plugin_abi as abi;

use super::{boundary, device_state, HostShared, Owned};
use crate::device::{Device, DeviceAddr};
use crate::error::{Error, Result, Status};
use crate::host::{LogLevel, Logger};
use crate::kernel::{DType, KernelSpec, Tensor};

type RegisterKernelFn =
    unsafe extern "C" fn(abi::dpp_host_context_t, *const abi::dpp_kernel_t) -> abi::dpp_status_t;
type AttrIntFn = unsafe extern "C" fn(*const c_void, *const c_char, *mut i64) -> abi::dpp_status_t;
type AttrFloatFn =
    unsafe extern "C" fn(*const c_void, *const c_char, *mut f64) -> abi::dpp_status_t;
type AttrI32Fn = unsafe extern "C" fn(*const c_void, *const c_char, *mut i32) -> abi::dpp_status_t;
type AttrIntsFn = unsafe extern "C" fn(
    *const c_void,
    *const c_char,
    *mut *const i64,
    *mut usize,
) -> abi::dpp_status_t;
type AttrStringFn = unsafe extern "C" fn(
    *const c_void,
    *const c_char,
    *mut *const c_char,
    *mut usize,
) -> abi::dpp_status_t;
type AllocateTempFn = unsafe extern "C" fn(
    *const abi::dpp_kernel_context_t,
    u64,
    *mut abi::dpp_addr_t,
) -> abi::dpp_status_t;
type ComputeFn = unsafe extern "C" fn(*const abi::dpp_kernel_context_t) -> abi::dpp_status_t;
type CreateFn = unsafe extern "C" fn(
    *const abi::dpp_kernel_create_context_t,
    *mut *mut c_void,
) -> abi::dpp_status_t;
type DestroyFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

/// The functions added to the host table after ABI 1.0, each `None` when the host's table is
/// too short to hold it (an older host) or the host left it NULL.
#[derive(Default)]
pub(crate) struct HostKernelFns {
    register_kernel: Option<RegisterKernelFn>,
    attr_int: Option<AttrIntFn>,
    attr_float: Option<AttrFloatFn>,
    attr_bool: Option<AttrI32Fn>,
    attr_ints: Option<AttrIntsFn>,
    attr_dtype: Option<AttrI32Fn>,
    /// ABI 1.2.
    pub(crate) register_op: Option<RegisterOpFn>,
    /// ABI 1.2.
    attr_string: Option<AttrStringFn>,
    /// ABI 1.4.
    allocate_temp: Option<AllocateTempFn>,
}

type RegisterOpFn =
    unsafe extern "C" fn(abi::dpp_host_context_t, *const abi::dpp_op_def_t) -> abi::dpp_status_t;

impl HostKernelFns {
    /// Reads the functions that lie within the host's `size` bytes.
    ///
    /// # Safety
    /// `host` points to a host table valid for `size` bytes.
    pub(crate) unsafe fn read(host: *const abi::dpp_host_api_t, size: usize) -> HostKernelFns {
        macro_rules! field {
            ($name:ident) => {
                if offset_of!(abi::dpp_host_api_t, $name) + size_of::<usize>() <= size {
                    // SAFETY: the field lies within the host's `size` bytes (checked).
                    unsafe { ptr::addr_of!((*host).$name).read() }
                } else {
                    None
                }
            };
        }
        HostKernelFns {
            register_kernel: field!(register_kernel),
            attr_int: field!(attr_int),
            attr_float: field!(attr_float),
            attr_bool: field!(attr_bool),
            attr_ints: field!(attr_ints),
            attr_dtype: field!(attr_dtype),
            register_op: field!(register_op),
            attr_string: field!(attr_string),
            allocate_temp: field!(allocate_temp),
        }
    }

    pub(crate) fn supports_kernels(&self) -> bool {
        self.register_kernel.is_some()
    }
}

// ---------------------------------------------------------------------------------------------
// Tensors

/// The inputs or the outputs of a kernel call: views of the host's `dpp_tensor_t` array,
/// checked when the call began (struct sizes, shapes). Cheap to copy.
#[derive(Clone, Copy)]
pub struct Tensors<'a> {
    base: *const u8,
    /// Bytes from one element to the next: the `struct_size` of the host's elements (the
    /// size of this SDK's `dpp_tensor_t` for an ABI 1.1 host, larger for a newer one).
    stride: usize,
    len: usize,
    _host: PhantomData<&'a abi::dpp_tensor_t>,
}

impl<'a> Tensors<'a> {
    const EMPTY: Tensors<'static> = Tensors {
        base: ptr::null(),
        stride: 0,
        len: 0,
        _host: PhantomData,
    };

    /// Checks the host's array of `len` tensors at `ptr`.
    ///
    /// # Safety
    /// `ptr` is NULL or points to `len` host tensors, each `struct_size` bytes apart (the first
    /// one's `struct_size`), valid with their shapes for `'a`.
    unsafe fn new(
        ptr: *const abi::dpp_tensor_t,
        len: usize,
        what: &str,
        op: &str,
    ) -> Result<Tensors<'a>> {
        if len == 0 {
            return Ok(Tensors::EMPTY);
        }
        let bad = |why: String| Error::invalid_argument(format!("kernel {op}: {what}: {why}"));
        if ptr.is_null() {
            return Err(bad(format!("the array of {len} tensors is NULL")));
        }
        // SAFETY: non-NULL and, per the caller, the first element is readable.
        let stride = unsafe { ptr::addr_of!((*ptr).struct_size).read() };
        if stride < abi::DPP_TENSOR_STRUCT_SIZE || stride % align_of::<abi::dpp_tensor_t>() != 0 {
            return Err(bad(format!(
                "dpp_tensor_t.struct_size is {stride}, not a valid size (ABI 1.1: {})",
                abi::DPP_TENSOR_STRUCT_SIZE
            )));
        }
        if !matches!(len.checked_mul(stride), Some(n) if n <= isize::MAX as usize) {
            return Err(bad(format!("{len} tensors do not fit the address space")));
        }
        let t = Tensors {
            base: ptr.cast(),
            stride,
            len,
            _host: PhantomData,
        };
        for i in 0..len {
            // SAFETY: element i lies within the array (the caller's contract, stride checked).
            let raw = unsafe { &*t.raw(i) };
            if raw.struct_size < abi::DPP_TENSOR_STRUCT_SIZE {
                return Err(bad(format!(
                    "tensor {i}: dpp_tensor_t.struct_size is {}",
                    raw.struct_size
                )));
            }
            let rank = usize::try_from(raw.rank)
                .map_err(|_| bad(format!("tensor {i}: rank {} is negative", raw.rank)))?;
            if rank > 0 && raw.shape.is_null() {
                return Err(bad(format!(
                    "tensor {i}: rank {rank} but the shape is NULL"
                )));
            }
            // SAFETY: `rank` dimensions at `shape` (non-NULL when rank > 0), per the caller.
            let shape = unsafe { shape_slice(raw.shape, rank) };
            if let Some(d) = shape.iter().find(|&&d| d < 0) {
                return Err(bad(format!(
                    "tensor {i}: shape {shape:?} has a negative dimension {d}"
                )));
            }
        }
        Ok(t)
    }

    /// Element `i` of the host's array (i < len).
    fn raw(&self, i: usize) -> *const abi::dpp_tensor_t {
        // The offset stays within the array (i < len, len * stride checked at construction);
        // wrapping_add keeps this function safe to call.
        self.base.wrapping_add(i * self.stride).cast()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tensor `i`, or `None` when `i >= len()`.
    pub fn get(&self, i: usize) -> Option<Tensor<'a>> {
        if i >= self.len {
            return None;
        }
        // SAFETY: i < len: an element checked at construction, valid for 'a.
        let raw = unsafe { &*self.raw(i) };
        Some(Tensor {
            dtype: DType::from_code(raw.dtype),
            // SAFETY: checked at construction (rank ≥ 0, shape non-NULL when rank > 0).
            shape: unsafe { shape_slice(raw.shape, raw.rank as usize) },
            addr: DeviceAddr(raw.data),
            byte_size: raw.byte_size,
        })
    }

    /// The tensors in order.
    pub fn iter(&self) -> TensorsIter<'a> {
        TensorsIter {
            tensors: *self,
            next: 0,
        }
    }
}

impl<'a> IntoIterator for Tensors<'a> {
    type Item = Tensor<'a>;
    type IntoIter = TensorsIter<'a>;
    fn into_iter(self) -> TensorsIter<'a> {
        self.iter()
    }
}

impl fmt::Debug for Tensors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// An iterator over [`Tensors`].
#[derive(Clone)]
pub struct TensorsIter<'a> {
    tensors: Tensors<'a>,
    next: usize,
}

impl<'a> Iterator for TensorsIter<'a> {
    type Item = Tensor<'a>;
    fn next(&mut self) -> Option<Tensor<'a>> {
        let t = self.tensors.get(self.next)?;
        self.next += 1;
        Some(t)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.tensors.len - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for TensorsIter<'_> {}

/// # Safety
/// `rank` is 0, or `shape` points to `rank` values valid for `'a`.
unsafe fn shape_slice<'a>(shape: *const i64, rank: usize) -> &'a [i64] {
    if rank == 0 {
        &[]
    } else {
        // SAFETY: per the caller.
        unsafe { std::slice::from_raw_parts(shape, rank) }
    }
}

// ---------------------------------------------------------------------------------------------
// Kernel contexts

/// What every kernel gets: its inputs and outputs, the op's attributes, temporary device
/// memory, and logging. Valid during the kernel call only.
pub struct KernelArgs<'a> {
    inputs: Tensors<'a>,
    outputs: Tensors<'a>,
    attrs: AttrReader<'a>,
    /// The host's context, as the host passed it (`allocate_temp` wants it back).
    context: *const abi::dpp_kernel_context_t,
}

/// Reads the op's attributes with the host's `attr_*` functions: for `compute`
/// ([`KernelArgs`]) and for `create` ([`CreateArgs`]), whose contexts both carry an `attrs`
/// for them.
#[derive(Clone, Copy)]
struct AttrReader<'a> {
    op: &'a str,
    /// The context's `attrs`, valid for `'a`.
    attrs: *const c_void,
    host: &'a Arc<HostShared>,
}

impl<'a> AttrReader<'a> {
    /// Calls an `attr_*` function of the host. `call` gets the host function (or `None` when
    /// the host has none) and the name; the host's status becomes an error naming the op.
    fn read_attr(
        &self,
        name: &str,
        kind: &str,
        call: impl FnOnce(*const c_char) -> Option<abi::dpp_status_t>,
    ) -> Result<()> {
        let op = self.op;
        let c_name = CString::new(name).map_err(|_| {
            Error::invalid_argument(format!(
                "kernel {op}: attribute name {name:?} contains a NUL"
            ))
        })?;
        let status = call(c_name.as_ptr()).ok_or_else(|| {
            Error::unimplemented(format!(
                "kernel {op}: the host has no attr_{kind} function (ABI {}.{})",
                self.host.abi_version().0,
                self.host.abi_version().1
            ))
        })?;
        match status {
            abi::DPP_OK => Ok(()),
            abi::DPP_NOT_FOUND => Err(Error::not_found(format!(
                "kernel {op}: the op has no attribute `{name}`"
            ))),
            abi::DPP_INVALID_ARGUMENT => Err(Error::invalid_argument(format!(
                "kernel {op}: attribute `{name}` is not of type {kind}"
            ))),
            other => {
                let code = Status::from_code(other).unwrap_or(Status::Internal);
                Err(Error::new(
                    code,
                    format!(
                        "kernel {op}: reading attribute `{name}` failed ({code}, status {other})"
                    ),
                ))
            }
        }
    }

    /// An integer attribute. `NotFound` when the op has no attribute `name`,
    /// `InvalidArgument` when it has another type.
    fn attr_int(&self, name: &str) -> Result<i64> {
        let mut out = 0i64;
        self.read_attr(name, "int", |n| {
            let f = self.host.kernel_fns.attr_int?;
            // SAFETY: the host's function with the context's attrs, a C string and an
            // out-pointer valid for the call.
            Some(unsafe { f(self.attrs, n, &mut out) })
        })?;
        Ok(out)
    }

    /// A float attribute (an integer attribute converts). Errors as [`Self::attr_int`].
    fn attr_float(&self, name: &str) -> Result<f64> {
        let mut out = 0f64;
        self.read_attr(name, "float", |n| {
            let f = self.host.kernel_fns.attr_float?;
            // SAFETY: as in attr_int.
            Some(unsafe { f(self.attrs, n, &mut out) })
        })?;
        Ok(out)
    }

    /// A bool attribute. Errors as [`Self::attr_int`].
    fn attr_bool(&self, name: &str) -> Result<bool> {
        let mut out = 0i32;
        self.read_attr(name, "bool", |n| {
            let f = self.host.kernel_fns.attr_bool?;
            // SAFETY: as in attr_int.
            Some(unsafe { f(self.attrs, n, &mut out) })
        })?;
        Ok(out != 0)
    }

    /// An integer-list attribute, valid during the kernel call. Errors as [`Self::attr_int`].
    fn attr_ints(&self, name: &str) -> Result<&'a [i64]> {
        let mut data: *const i64 = ptr::null();
        let mut len = 0usize;
        self.read_attr(name, "ints", |n| {
            let f = self.host.kernel_fns.attr_ints?;
            // SAFETY: as in attr_int.
            Some(unsafe { f(self.attrs, n, &mut data, &mut len) })
        })?;
        if len == 0 {
            return Ok(&[]);
        }
        if data.is_null() || len > isize::MAX as usize / size_of::<i64>() {
            return Err(Error::internal(format!(
                "kernel {}: the host's attr_ints gave {len} values at NULL",
                self.op
            )));
        }
        // SAFETY: the host's `len` values, valid during compute (the ABI's contract for
        // attr_ints); 'a is the kernel call.
        Ok(unsafe { std::slice::from_raw_parts(data, len) })
    }

    /// A string attribute, valid during the kernel call (ABI 1.2: `Unimplemented` from an
    /// older host). Errors as [`Self::attr_int`]; `Internal` when the host's bytes are not
    /// UTF-8.
    fn attr_string(&self, name: &str) -> Result<&'a str> {
        let mut data: *const c_char = ptr::null();
        let mut len = 0usize;
        self.read_attr(name, "string", |n| {
            let f = self.host.kernel_fns.attr_string?;
            // SAFETY: as in attr_int.
            Some(unsafe { f(self.attrs, n, &mut data, &mut len) })
        })?;
        if len == 0 {
            return Ok("");
        }
        if data.is_null() || len > isize::MAX as usize {
            return Err(Error::internal(format!(
                "kernel {}: the host's attr_string gave {len} bytes at NULL",
                self.op
            )));
        }
        // SAFETY: the host's `len` bytes, valid during compute (the ABI's contract for
        // attr_string); 'a is the kernel call.
        let bytes = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) };
        std::str::from_utf8(bytes).map_err(|_| {
            Error::internal(format!(
                "kernel {}: the host's string attribute `{name}` is not UTF-8",
                self.op
            ))
        })
    }

    /// A dtype attribute. Errors as [`Self::attr_int`].
    fn attr_dtype(&self, name: &str) -> Result<DType> {
        let mut out = 0i32;
        self.read_attr(name, "dtype", |n| {
            let f = self.host.kernel_fns.attr_dtype?;
            // SAFETY: as in attr_int.
            Some(unsafe { f(self.attrs, n, &mut out) })
        })?;
        Ok(DType::from_code(out))
    }
}

impl<'a> KernelArgs<'a> {
    /// # Safety
    /// `raw` is a copy of the host's kernel context `context` (see [`copy_context`]), whose
    /// arrays and attributes are valid for `'a`.
    unsafe fn new(
        raw: &abi::dpp_kernel_context_t,
        context: *const abi::dpp_kernel_context_t,
        op: &'a str,
        host: &'a Arc<HostShared>,
    ) -> Result<KernelArgs<'a>> {
        Ok(KernelArgs {
            // SAFETY: the host's arrays, valid during the call.
            inputs: unsafe { Tensors::new(raw.inputs, raw.num_inputs, "inputs", op) }?,
            // SAFETY: as above.
            outputs: unsafe { Tensors::new(raw.outputs, raw.num_outputs, "outputs", op) }?,
            attrs: AttrReader {
                op,
                attrs: raw.attrs,
                host,
            },
            context,
        })
    }

    /// The op the kernel was registered for.
    pub fn op(&self) -> &'a str {
        self.attrs.op
    }

    /// The inputs.
    pub fn inputs(&self) -> Tensors<'a> {
        self.inputs
    }

    /// The outputs (allocated by the host with the shapes of the op's shape function).
    pub fn outputs(&self) -> Tensors<'a> {
        self.outputs
    }

    /// Input `i`; an `InvalidArgument` error naming the op when there is none.
    pub fn input(&self, i: usize) -> Result<Tensor<'a>> {
        self.inputs.get(i).ok_or_else(|| {
            Error::invalid_argument(format!(
                "kernel {}: no input {i} (the op got {})",
                self.attrs.op, self.inputs.len
            ))
        })
    }

    /// Output `i`; an `InvalidArgument` error naming the op when there is none.
    pub fn output(&self, i: usize) -> Result<Tensor<'a>> {
        self.outputs.get(i).ok_or_else(|| {
            Error::invalid_argument(format!(
                "kernel {}: no output {i} (the op got {})",
                self.attrs.op, self.outputs.len
            ))
        })
    }

    /// `Ok` when there are `inputs` inputs and `outputs` outputs; otherwise an
    /// `InvalidArgument` error that says so.
    pub fn check_arity(&self, inputs: usize, outputs: usize) -> Result<()> {
        if self.inputs.len == inputs && self.outputs.len == outputs {
            return Ok(());
        }
        Err(Error::invalid_argument(format!(
            "kernel {}: expects {inputs} input(s) and {outputs} output(s), got {} and {}",
            self.attrs.op, self.inputs.len, self.outputs.len
        )))
    }

    /// A logger (usable from stream work, any thread, until shutdown).
    pub fn logger(&self) -> Logger {
        Logger::new(Arc::clone(self.attrs.host))
    }

    /// An integer attribute. `NotFound` when the op has no attribute `name`,
    /// `InvalidArgument` when it has another type.
    pub fn attr_int(&self, name: &str) -> Result<i64> {
        self.attrs.attr_int(name)
    }

    /// A float attribute (an integer attribute converts). Errors as [`Self::attr_int`].
    pub fn attr_float(&self, name: &str) -> Result<f64> {
        self.attrs.attr_float(name)
    }

    /// A bool attribute. Errors as [`Self::attr_int`].
    pub fn attr_bool(&self, name: &str) -> Result<bool> {
        self.attrs.attr_bool(name)
    }

    /// An integer-list attribute, valid during the kernel call. Errors as [`Self::attr_int`].
    pub fn attr_ints(&self, name: &str) -> Result<&'a [i64]> {
        self.attrs.attr_ints(name)
    }

    /// A string attribute, valid during the kernel call (ABI 1.2: `Unimplemented` from an
    /// older host). Errors as [`Self::attr_int`]; `Internal` when the host's bytes are not
    /// UTF-8.
    pub fn attr_string(&self, name: &str) -> Result<&'a str> {
        self.attrs.attr_string(name)
    }

    /// A dtype attribute. Errors as [`Self::attr_int`].
    pub fn attr_dtype(&self, name: &str) -> Result<DType> {
        self.attrs.attr_dtype(name)
    }

    /// `size` bytes of device memory on the kernel's device, 256-byte aligned, for this
    /// launch's own use (scratch space; TensorFlow's `allocate_temp`). Use it in the work the
    /// kernel enqueues now on its stream ([`KernelContext::stream`]), like the inputs and
    /// outputs: the host takes it back by itself once the stream has reached that work
    /// (stream order; later work on the stream may reuse it), so do not free it, and do not
    /// keep the address past that work. It comes from the host's allocator and counts against
    /// the device's memory limit. Plugin ABI 1.4 (the host's `allocate_temp`).
    ///
    /// ```text
    /// let scratch = cx.allocate_temp(n)?;
    /// cx.device().memcpy_dtod_async(cx.stream(), scratch, x.addr(), n)?;
    /// // … work that reads and writes `scratch`, then fills the output, on cx.stream() …
    /// ```
    ///
    /// Errors, each naming the op: `Unimplemented` from a host older than ABI 1.4 (a kernel
    /// that must run there too can fall back to the device's own allocation, freed by stream
    /// work of its own); `InvalidArgument` for a size of 0; `ResourceExhausted` when the
    /// device has no memory left; another code when the host refuses otherwise. Nothing is
    /// allocated on failure.
    pub fn allocate_temp(&self, size: u64) -> Result<DeviceAddr> {
        let op = self.attrs.op;
        let Some(f) = self.attrs.host.kernel_fns.allocate_temp else {
            let (major, minor) = self.attrs.host.abi_version();
            return Err(Error::unimplemented(format!(
                "kernel {op}: the host has no allocate_temp function (plugin ABI \
                 {major}.{minor}, a {}-byte dpp_host_api_t); temporary memory needs ABI 1.4",
                self.attrs.host.table_size()
            )));
        };
        if size == 0 {
            return Err(Error::invalid_argument(format!(
                "kernel {op}: allocate_temp: the size is 0"
            )));
        }
        let mut addr: abi::dpp_addr_t = 0;
        // SAFETY: the host's function with the context the host passed to this compute call
        // (valid during it: 'a) and an out-pointer valid for the call.
        let status = unsafe { f(self.context, size, &mut addr) };
        match status {
            abi::DPP_OK => Ok(DeviceAddr(addr)),
            abi::DPP_RESOURCE_EXHAUSTED => Err(Error::resource_exhausted(format!(
                "kernel {op}: allocate_temp: the device has no {size} bytes free for \
                 temporary memory"
            ))),
            other => {
                let code = Status::from_code(other).unwrap_or(Status::Internal);
                Err(Error::new(
                    code,
                    format!(
                        "kernel {op}: allocate_temp of {size} bytes failed ({code}, status \
                         {other})"
                    ),
                ))
            }
        }
    }
}

impl fmt::Debug for KernelArgs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelArgs")
            .field("op", &self.attrs.op)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

/// What a kernel bound to a platform of this plugin gets: the device (the platform's
/// `Device` type), its default stream, and (through `Deref`) the [`KernelArgs`].
/// Valid during the kernel call only.
pub struct KernelContext<'a, D: Device> {
    args: KernelArgs<'a>,
    device: &'a D,
    stream: &'a D::Stream,
}

impl<'a, D: Device> KernelContext<'a, D> {
    /// The device the kernel runs on.
    pub fn device(&self) -> &'a D {
        self.device
    }

    /// The device's default stream: enqueue the kernel's work here. The host keeps the
    /// memory of the inputs and outputs from other uses until the stream reaches what is
    /// enqueued now (later work on this stream may reuse it, in stream order).
    pub fn stream(&self) -> &'a D::Stream {
        self.stream
    }

    /// The inputs, outputs and attributes.
    pub fn args(&self) -> &KernelArgs<'a> {
        &self.args
    }
}

impl<'a, D: Device> Deref for KernelContext<'a, D> {
    type Target = KernelArgs<'a>;
    fn deref(&self) -> &KernelArgs<'a> {
        &self.args
    }
}

impl<D: Device> fmt::Debug for KernelContext<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.args, f)
    }
}

// ---------------------------------------------------------------------------------------------
// Registration and the compute trampolines

const KERNEL_MAGIC: u64 = u64::from_be_bytes(*b"dpKERNEL");

/// A kernel's `kernel_data`. `repr(C)` keeps `magic` first for every `F`.
#[repr(C)]
struct KernelEntry<F> {
    magic: u64,
    host: Arc<HostShared>,
    op: String,
    /// `kernel <op>`: for the stream handle check's message.
    what: String,
    compute: F,
}

/// Frees a `KernelEntry<F>` made by `register`.
///
/// # Safety
/// `p` came from `Box::into_raw(Box<KernelEntry<F>>)` and is freed once.
unsafe fn free_entry<F>(p: *mut c_void) {
    // SAFETY: per the caller.
    let mut entry = unsafe { Box::from_raw(p.cast::<KernelEntry<F>>()) };
    entry.magic = super::DEAD_MAGIC;
    drop(entry);
}

/// A kernel context with every field NULL or 0 (what `copy_context` fills from the host's).
const EMPTY_CONTEXT: abi::dpp_kernel_context_t = abi::dpp_kernel_context_t {
    struct_size: 0,
    ext: ptr::null_mut(),
    device: ptr::null_mut(),
    stream: ptr::null_mut(),
    num_inputs: 0,
    inputs: ptr::null(),
    num_outputs: 0,
    outputs: ptr::null(),
    attrs: ptr::null(),
    kernel_data: ptr::null_mut(),
    state: ptr::null_mut(),
};

/// A copy of the host's kernel context, as far as its `struct_size` reaches: a host older than
/// ABI 1.5 passes the 80 bytes of ABI 1.1, without `state`, which stays NULL in the copy. No
/// reference to the host's struct is formed (it may be shorter than this SDK's).
/// `Err(status)` when it is too short to hold `kernel_data`.
///
/// # Safety
/// `ctx` is non-NULL and readable for its `struct_size` bytes.
unsafe fn copy_context(
    ctx: *const abi::dpp_kernel_context_t,
) -> std::result::Result<abi::dpp_kernel_context_t, abi::dpp_status_t> {
    // SAFETY: non-NULL (the caller's contract); `struct_size` first.
    let size = unsafe { ptr::addr_of!((*ctx).struct_size).read() };
    if size < abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1 {
        // Too short to hold kernel_data: no way to reach the host to say why.
        return Err(abi::DPP_ABI_MISMATCH);
    }
    let mut copy = EMPTY_CONTEXT;
    let n = size.min(size_of::<abi::dpp_kernel_context_t>());
    // SAFETY: the host's `size >= n` readable bytes into a struct of at least `n` bytes; the
    // fields are integers and raw pointers, for which any bytes the host wrote are valid.
    unsafe { ptr::copy_nonoverlapping(ctx.cast::<u8>(), ptr::from_mut(&mut copy).cast(), n) };
    Ok(copy)
}

/// The entry behind `kernel_data`; `None` when it is NULL or not a live `KernelEntry`.
///
/// # Safety
/// `kernel_data` is NULL or what `register` gave the host for a `KernelEntry<F>` (the host
/// passes each kernel its own).
unsafe fn entry_at<'a, F>(kernel_data: *mut c_void) -> Option<&'a KernelEntry<F>> {
    let entry = kernel_data.cast_const().cast::<KernelEntry<F>>();
    // SAFETY: per the caller; `magic` is the first field of every KernelEntry.
    if entry.is_null() || unsafe { ptr::addr_of!((*entry).magic).read() } != KERNEL_MAGIC {
        return None;
    }
    // SAFETY: a live entry (freed only after the host can no longer call the kernel).
    Some(unsafe { &*entry })
}

/// The context (copied, see [`copy_context`]) and the entry of a compute call; `Err(status)`
/// when they are unusable.
///
/// # Safety
/// `ctx` is NULL or the host's kernel context, valid during the call, whose `kernel_data` is
/// what `register` gave the host for a `KernelEntry<F>` (the host passes each kernel its own).
unsafe fn entry_of<'a, F>(
    ctx: *const abi::dpp_kernel_context_t,
) -> std::result::Result<(abi::dpp_kernel_context_t, &'a KernelEntry<F>), abi::dpp_status_t> {
    if ctx.is_null() {
        return Err(abi::DPP_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL, valid for its struct_size bytes (the caller's contract).
    let raw = unsafe { copy_context(ctx) }?;
    // SAFETY: per the caller.
    let entry = unsafe { entry_at::<F>(raw.kernel_data) }.ok_or(abi::DPP_INVALID_ARGUMENT)?;
    Ok((raw, entry))
}

/// The device and its default stream of a compute call.
///
/// # Safety
/// `raw` is the context of a compute call of a kernel bound to a platform of this plugin
/// whose devices are `D` (checked at registration), so the host passes one of its devices (the
/// type is checked again) and that device's default stream.
unsafe fn device_and_stream<'a, D: Device>(
    raw: &abi::dpp_kernel_context_t,
    op: &str,
    what: &str,
) -> Result<(&'a super::DeviceState<D>, &'a D::Stream)> {
    // SAFETY: per the caller.
    let state = unsafe { device_state::<D>(raw.device) }.ok_or_else(|| {
        Error::internal(format!(
            "kernel {op}: the context's device is not a device of this plugin's platform"
        ))
    })?;
    // SAFETY: the device's default stream: a stream handle this device created.
    let stream = unsafe { state.stream(raw.stream, what) }?;
    Ok((state, stream))
}

unsafe extern "C" fn compute_bound<D, F>(ctx: *const abi::dpp_kernel_context_t) -> abi::dpp_status_t
where
    D: Device,
    F: Fn(&KernelContext<'_, D>) -> Result<()> + Send + Sync + 'static,
{
    boundary(abi::DPP_INTERNAL, || {
        // SAFETY: the host calls compute with its context and this kernel's kernel_data.
        let (raw, entry) = match unsafe { entry_of::<F>(ctx) } {
            Ok(x) => x,
            Err(status) => return status,
        };
        entry.host.call_kernel(&entry.op, || {
            // SAFETY: a copy of the host's context, whose arrays are valid during the call.
            let args = unsafe { KernelArgs::new(&raw, ctx, &entry.op, &entry.host) }?;
            // SAFETY: the context of a compute call of this kernel, bound to `D`'s platform.
            let (state, stream) = unsafe { device_and_stream::<D>(&raw, &entry.op, &entry.what) }?;
            let cx = KernelContext {
                args,
                device: &state.device,
                stream,
            };
            (entry.compute)(&cx)
        })
    })
}

unsafe extern "C" fn compute_any<F>(ctx: *const abi::dpp_kernel_context_t) -> abi::dpp_status_t
where
    F: Fn(&KernelArgs<'_>) -> Result<()> + Send + Sync + 'static,
{
    boundary(abi::DPP_INTERNAL, || {
        // SAFETY: the host calls compute with its context and this kernel's kernel_data.
        let (raw, entry) = match unsafe { entry_of::<F>(ctx) } {
            Ok(x) => x,
            Err(status) => return status,
        };
        entry.host.call_kernel(&entry.op, || {
            // SAFETY: a copy of the host's context, whose arrays are valid during the call.
            let args = unsafe { KernelArgs::new(&raw, ctx, &entry.op, &entry.host) }?;
            (entry.compute)(&args)
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Kernel states (ABI 1.5): `create`, `destroy` and the compute of a kernel with a state

/// A kernel with a state: the `F` of its `KernelEntry`.
struct Stateful<C, F> {
    create: C,
    compute: F,
}

const STATE_MAGIC: u64 = u64::from_be_bytes(*b"dpKSTATE");

/// What the host holds as a kernel state (`*out_state`): the plugin's state, boxed.
/// `repr(C)` keeps `magic` first for every `S`.
#[repr(C)]
struct StateBox<S> {
    magic: u64,
    /// The `KernelEntry` of the kernel whose `create` made it (a state passed to another
    /// kernel is refused).
    owner: *const c_void,
    value: S,
}

/// The state behind a context's `state`, checked (a live state of this kernel).
///
/// # Safety
/// `state` is non-NULL and what this SDK's `create` returned to the host (possibly for another
/// kernel, or destroyed: detected while the memory is still mapped).
unsafe fn state_ref<'a, S>(state: *mut c_void, owner: *const c_void, op: &str) -> Result<&'a S> {
    let b = state.cast_const().cast::<StateBox<S>>();
    // SAFETY: per the caller; `magic` and `owner` are read before the type is trusted.
    let (magic, found) = unsafe {
        (
            ptr::addr_of!((*b).magic).read(),
            ptr::addr_of!((*b).owner).read(),
        )
    };
    if magic != STATE_MAGIC || found != owner {
        return Err(Error::invalid_argument(format!(
            "kernel {op}: the context's state is not a live state of this kernel (destroyed, or \
             made by another kernel's create)"
        )));
    }
    // SAFETY: the magic and the owner say this is a live StateBox<S> of this kernel.
    Ok(unsafe { &(*b).value })
}

/// What a kernel's `create` gets (ABI 1.5; see
/// [`Host::register_kernel_with_state`](crate::Host::register_kernel_with_state)): the device,
/// the op, the input dtypes and the op's attributes the state is made for. Valid during the
/// call only; the state it returns keeps nothing of it (copy what you need: an attribute list
/// borrowed from the host is valid during the call only).
///
/// No shapes: one state serves launches of every shape.
pub struct CreateArgs<'a, D: Device> {
    attrs: AttrReader<'a>,
    device: &'a D,
    input_dtypes: Vec<DType>,
}

impl<'a, D: Device> CreateArgs<'a, D> {
    /// The arguments of a `create` the SDK calls for one launch (a host that keeps no states).
    fn for_launch(cx: &KernelContext<'a, D>) -> CreateArgs<'a, D> {
        CreateArgs {
            attrs: cx.args.attrs,
            device: cx.device,
            input_dtypes: cx.args.inputs.iter().map(|t| t.dtype()).collect(),
        }
    }

    /// The device the state is for.
    pub fn device(&self) -> &'a D {
        self.device
    }

    /// The op the kernel was registered for.
    pub fn op(&self) -> &'a str {
        self.attrs.op
    }

    /// The inputs' dtypes, one per input.
    pub fn input_dtypes(&self) -> &[DType] {
        &self.input_dtypes
    }

    /// The dtype of input `i`; an `InvalidArgument` error naming the op when there is none.
    pub fn input_dtype(&self, i: usize) -> Result<DType> {
        self.input_dtypes.get(i).copied().ok_or_else(|| {
            Error::invalid_argument(format!(
                "kernel {}: no input {i} (the op got {})",
                self.attrs.op,
                self.input_dtypes.len()
            ))
        })
    }

    /// An integer attribute, as [`KernelArgs::attr_int`].
    pub fn attr_int(&self, name: &str) -> Result<i64> {
        self.attrs.attr_int(name)
    }

    /// A float attribute, as [`KernelArgs::attr_float`].
    pub fn attr_float(&self, name: &str) -> Result<f64> {
        self.attrs.attr_float(name)
    }

    /// A bool attribute, as [`KernelArgs::attr_bool`].
    pub fn attr_bool(&self, name: &str) -> Result<bool> {
        self.attrs.attr_bool(name)
    }

    /// An integer-list attribute, valid during the `create` call (copy it into the state), as
    /// [`KernelArgs::attr_ints`].
    pub fn attr_ints(&self, name: &str) -> Result<&'a [i64]> {
        self.attrs.attr_ints(name)
    }

    /// A string attribute, valid during the `create` call (copy it into the state), as
    /// [`KernelArgs::attr_string`].
    pub fn attr_string(&self, name: &str) -> Result<&'a str> {
        self.attrs.attr_string(name)
    }

    /// A dtype attribute, as [`KernelArgs::attr_dtype`].
    pub fn attr_dtype(&self, name: &str) -> Result<DType> {
        self.attrs.attr_dtype(name)
    }

    /// A logger (usable from the state and stream work, any thread, until shutdown).
    pub fn logger(&self) -> Logger {
        Logger::new(Arc::clone(self.attrs.host))
    }
}

impl<D: Device> fmt::Debug for CreateArgs<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreateArgs")
            .field("op", &self.attrs.op)
            .field("input_dtypes", &self.input_dtypes)
            .finish_non_exhaustive()
    }
}

/// The host's `input_dtypes` of a create context, checked.
///
/// # Safety
/// `dtypes` is NULL or points to `len` values valid during the call.
unsafe fn dtype_list(dtypes: *const i32, len: usize, op: &str) -> Result<Vec<DType>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if dtypes.is_null() || len > isize::MAX as usize / size_of::<i32>() {
        return Err(Error::invalid_argument(format!(
            "kernel {op}: create: the host's input_dtypes is NULL (or too long) with \
             num_inputs {len}"
        )));
    }
    // SAFETY: per the caller, `len` values (non-NULL, checked).
    let codes = unsafe { std::slice::from_raw_parts(dtypes, len) };
    Ok(codes.iter().map(|&c| DType::from_code(c)).collect())
}

unsafe extern "C" fn create_bound<D, S, C, F>(
    ctx: *const abi::dpp_kernel_create_context_t,
    out_state: *mut *mut c_void,
) -> abi::dpp_status_t
where
    D: Device,
    S: Send + Sync + 'static,
    C: Fn(&CreateArgs<'_, D>) -> Result<S> + Send + Sync + 'static,
    F: Fn(&KernelContext<'_, D>, &S) -> Result<()> + Send + Sync + 'static,
{
    boundary(abi::DPP_INTERNAL, || {
        if ctx.is_null() {
            return abi::DPP_INVALID_ARGUMENT;
        }
        // SAFETY: non-NULL; `struct_size` first.
        let size = unsafe { ptr::addr_of!((*ctx).struct_size).read() };
        if size < abi::DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE {
            // Too short to hold kernel_data: no way to reach the host to say why.
            return abi::DPP_ABI_MISMATCH;
        }
        // SAFETY: the host's struct of at least this SDK's size (checked), valid during the
        // call: read whole (a newer host's longer struct, as far as this SDK knows it).
        let raw = unsafe { ptr::read(ctx) };
        // SAFETY: the host calls create with this kernel's kernel_data.
        let Some(entry) = (unsafe { entry_at::<Stateful<C, F>>(raw.kernel_data) }) else {
            return abi::DPP_INVALID_ARGUMENT;
        };
        let op = entry.op.as_str();
        entry.host.call_kernel(&entry.op, || {
            if out_state.is_null() {
                return Err(Error::invalid_argument(format!(
                    "kernel {op}: create: out_state is NULL"
                )));
            }
            // SAFETY: a kernel bound to a platform of this plugin whose devices are `D`
            // (checked at registration): the host passes one of its devices (the type is
            // checked again).
            let device = unsafe { device_state::<D>(raw.device) }.ok_or_else(|| {
                Error::internal(format!(
                    "kernel {op}: create: the context's device is not a device of this \
                     plugin's platform"
                ))
            })?;
            let args = CreateArgs {
                attrs: AttrReader {
                    op,
                    attrs: raw.attrs,
                    host: &entry.host,
                },
                device: &device.device,
                // SAFETY: the host's `num_inputs` dtypes, valid during the call.
                input_dtypes: unsafe { dtype_list(raw.input_dtypes, raw.num_inputs, op) }?,
            };
            let value = (entry.compute.create)(&args)?;
            let state = Box::into_raw(Box::new(StateBox {
                magic: STATE_MAGIC,
                owner: ptr::from_ref(entry).cast(),
                value,
            }));
            // SAFETY: a non-NULL out-pointer of the host; the host owns the state until it
            // passes it to `destroy`.
            unsafe { out_state.write(state.cast()) };
            Ok(())
        })
    })
}

unsafe extern "C" fn destroy_bound<S, C, F>(kernel_data: *mut c_void, state: *mut c_void)
where
    S: Send + Sync + 'static,
{
    boundary((), || {
        // SAFETY: the host calls destroy with this kernel's kernel_data.
        let Some(entry) = (unsafe { entry_at::<Stateful<C, F>>(kernel_data) }) else {
            return;
        };
        if state.is_null() {
            return;
        }
        let b = state.cast::<StateBox<S>>();
        // SAFETY: a state this kernel's create returned (the ABI's contract), checked before
        // it is taken: `magic` and `owner` are read first.
        let (magic, owner) = unsafe {
            (
                ptr::addr_of!((*b).magic).read(),
                ptr::addr_of!((*b).owner).read(),
            )
        };
        if magic != STATE_MAGIC || owner != ptr::from_ref(entry).cast() {
            entry.host.log(
                LogLevel::Error,
                &format!(
                    "kernel {}: destroy: the state is not a live state of this kernel \
                     (destroyed twice, or made by another kernel's create); not freed",
                    entry.op
                ),
            );
            return;
        }
        // SAFETY: a live StateBox<S> from create_bound, released here once (the host destroys
        // each state once; a second destroy finds DEAD_MAGIC while the memory is mapped).
        let mut b = unsafe { Box::from_raw(b) };
        b.magic = super::DEAD_MAGIC;
        entry
            .host
            .call_void(&format!("drop of kernel {}'s state", entry.op), move || {
                drop(b)
            });
    })
}

/// A state made for one launch (from a host that keeps none), on its way to its drop.
struct Doomed<S> {
    value: S,
    host: Arc<HostShared>,
    what: String,
}

/// Drops a `Doomed<S>` (a host callback of the device's stream).
unsafe extern "C" fn drop_doomed<S>(arg: *mut c_void) {
    boundary((), || {
        // SAFETY: the Box<Doomed<S>> of `drop_in_stream_order`, passed to this function once.
        let doomed = unsafe { Box::from_raw(arg.cast::<Doomed<S>>()) };
        let Doomed { value, host, what } = *doomed;
        host.call_void(&what, move || drop(value));
    })
}

/// Drops `value`, a state made for one launch, once `stream` has reached the work the launch
/// enqueued (as a host that keeps states destroys them): behind it, with the device's
/// `host_callback`. When the device refuses that, after synchronizing the stream.
fn drop_in_stream_order<D: Device, S: Send + 'static>(
    device: &super::DeviceState<D>,
    stream: &D::Stream,
    op: &str,
    value: S,
) {
    let what = format!("drop of kernel {op}'s state");
    let arg = Box::into_raw(Box::new(Doomed {
        value,
        host: Arc::clone(&device.host),
        what,
    }));
    let Err(e) = super::host_callback_on(device, stream, drop_doomed::<S>, arg.cast()) else {
        return;
    };
    // SAFETY: refused, so `drop_doomed` never runs: the box is ours again.
    let Doomed { value, host, what } = *unsafe { Box::from_raw(arg) };
    host.log(
        LogLevel::Warn,
        &format!(
            "kernel {op}: cannot drop the launch's state in stream order (the device's \
             host_callback failed: {e}); synchronizing the stream first"
        ),
    );
    if let Err(e) = device.device.synchronize_stream(stream) {
        host.log(
            LogLevel::Error,
            &format!("kernel {op}: synchronizing the stream to drop a state: {e}"),
        );
    }
    host.call_void(&what, move || drop(value));
}

unsafe extern "C" fn compute_stateful<D, S, C, F>(
    ctx: *const abi::dpp_kernel_context_t,
) -> abi::dpp_status_t
where
    D: Device,
    S: Send + Sync + 'static,
    C: Fn(&CreateArgs<'_, D>) -> Result<S> + Send + Sync + 'static,
    F: Fn(&KernelContext<'_, D>, &S) -> Result<()> + Send + Sync + 'static,
{
    boundary(abi::DPP_INTERNAL, || {
        // SAFETY: the host calls compute with its context and this kernel's kernel_data.
        let (raw, entry) = match unsafe { entry_of::<Stateful<C, F>>(ctx) } {
            Ok(x) => x,
            Err(status) => return status,
        };
        entry.host.call_kernel(&entry.op, || {
            let op = entry.op.as_str();
            // SAFETY: a copy of the host's context, whose arrays are valid during the call.
            let args = unsafe { KernelArgs::new(&raw, ctx, op, &entry.host) }?;
            // SAFETY: the context of a compute call of this kernel, bound to `D`'s platform.
            let (device, stream) = unsafe { device_and_stream::<D>(&raw, op, &entry.what) }?;
            let cx = KernelContext {
                args,
                device: &device.device,
                stream,
            };
            let kernel = &entry.compute;
            if !raw.state.is_null() {
                // SAFETY: a non-NULL state from the host: one this SDK's create made.
                let state = unsafe { state_ref::<S>(raw.state, ptr::from_ref(entry).cast(), op) }?;
                return (kernel.compute)(&cx, state);
            }
            // No state from the host (older than ABI 1.5: its 80-byte context has none): one
            // for this launch, dropped in stream order after it, as a 1.5 host would.
            let value = (kernel.create)(&CreateArgs::for_launch(&cx))?;
            let result = catch_unwind(AssertUnwindSafe(|| (kernel.compute)(&cx, &value)));
            drop_in_stream_order(device, stream, op, value);
            result.unwrap_or_else(|payload| Err(Error::from_panic(payload)))
        })
    })
}

/// Checks that `spec` binds to a platform of this plugin whose devices are `D`; returns its
/// name.
fn bound_platform<D: Device>(shared: &HostShared, spec: &KernelSpec<'_>) -> Result<String> {
    let op = spec.op;
    let ty = spec.device_type;
    let platforms = shared.platforms.lock();
    let own: Vec<_> = platforms.iter().filter(|p| p.device_type == ty).collect();
    let p = match spec.platform {
        Some("ANY") => {
            return Err(Error::invalid_argument(format!(
                "kernel {op} for {ty}: a kernel bound to ANY runs on other plugins' devices; \
                 register it with register_any_kernel"
            )))
        }
        Some(name) => *own.iter().find(|p| p.name == name).ok_or_else(|| {
            Error::invalid_argument(format!(
                "kernel {op} for {ty}: platform {name} is not a platform of type {ty} that this \
                 plugin registered (register the platform first)"
            ))
        })?,
        None => match own.as_slice() {
            [p] => *p,
            [] => {
                return Err(Error::invalid_argument(format!(
                    "kernel {op} for {ty}: this plugin registered no platform of type {ty} \
                     (register the platform first)"
                )))
            }
            many => {
                let names: Vec<&str> = many.iter().map(|p| p.name.as_str()).collect();
                return Err(Error::invalid_argument(format!(
                    "kernel {op} for {ty}: this plugin registered {} platforms of type {ty} ({}); \
                     name one in KernelSpec::platform",
                    many.len(),
                    names.join(", ")
                )));
            }
        },
    };
    if p.device != TypeId::of::<D>() {
        return Err(Error::invalid_argument(format!(
            "kernel {op} for {ty}: platform {}'s devices are {}, but the kernel takes a \
             KernelContext of {}",
            p.name,
            p.device_name,
            std::any::type_name::<D>()
        )));
    }
    Ok(p.name.clone())
}

/// Registers the kernel `compute` (called with contexts of devices `D`).
pub(crate) fn register_kernel<D, F>(
    shared: &Arc<HostShared>,
    spec: &KernelSpec<'_>,
    compute: F,
) -> Result<()>
where
    D: Device,
    F: Fn(&KernelContext<'_, D>) -> Result<()> + Send + Sync + 'static,
{
    check_host(shared, spec)
        .and_then(|()| bound_platform::<D>(shared, spec))
        .map_err(|e| shared.refuse(e))?;
    register::<F>(shared, spec, compute, compute_bound::<D, F>, None)
}

/// Registers the kernel `compute` with a state made by `create` (ABI 1.5; see
/// [`Host::register_kernel_with_state`](crate::Host::register_kernel_with_state)).
pub(crate) fn register_kernel_with_state<D, S, C, F>(
    shared: &Arc<HostShared>,
    spec: &KernelSpec<'_>,
    create: C,
    compute: F,
) -> Result<()>
where
    D: Device,
    S: Send + Sync + 'static,
    C: Fn(&CreateArgs<'_, D>) -> Result<S> + Send + Sync + 'static,
    F: Fn(&KernelContext<'_, D>, &S) -> Result<()> + Send + Sync + 'static,
{
    check_host(shared, spec)
        .and_then(|()| bound_platform::<D>(shared, spec))
        .map_err(|e| shared.refuse(e))?;
    let fns = StateFns {
        create: create_bound::<D, S, C, F>,
        destroy: destroy_bound::<S, C, F>,
    };
    register::<Stateful<C, F>>(
        shared,
        spec,
        Stateful { create, compute },
        compute_stateful::<D, S, C, F>,
        Some(fns),
    )?;
    let (major, minor) = shared.abi_version();
    if (major, minor) < (1, 5) {
        shared.log(
            LogLevel::Debug,
            &format!(
                "kernel {} for {}: a host of plugin ABI {major}.{minor} keeps no kernel states: \
                 the SDK makes one for each launch",
                spec.op, spec.device_type
            ),
        );
    }
    Ok(())
}

/// Registers the memory-agnostic kernel `compute` (bound to `ANY`).
pub(crate) fn register_any_kernel<F>(
    shared: &Arc<HostShared>,
    spec: &KernelSpec<'_>,
    compute: F,
) -> Result<()>
where
    F: Fn(&KernelArgs<'_>) -> Result<()> + Send + Sync + 'static,
{
    check_host(shared, spec).map_err(|e| shared.refuse(e))?;
    if spec.platform.is_some_and(|p| p != "ANY") {
        return Err(shared.refuse(Error::invalid_argument(format!(
            "kernel {} for {}: register_any_kernel binds to ANY, not to platform {}; use \
             register_kernel",
            spec.op,
            spec.device_type,
            spec.platform.unwrap_or_default()
        ))));
    }
    let spec = KernelSpec {
        platform: Some("ANY"),
        ..*spec
    };
    register::<F>(shared, &spec, compute, compute_any::<F>, None)
}

fn check_host(shared: &HostShared, spec: &KernelSpec<'_>) -> Result<()> {
    if shared.kernel_fns.supports_kernels() {
        return Ok(());
    }
    let (major, minor) = shared.abi_version();
    Err(Error::unimplemented(format!(
        "cannot register kernel {} for {}: the host has plugin ABI {major}.{minor} \
         (a {}-byte dpp_host_api_t without register_kernel); kernels need ABI 1.1",
        spec.op,
        spec.device_type,
        shared.table_size()
    )))
}

/// A kernel's `create` and `destroy` (ABI 1.5).
struct StateFns {
    create: CreateFn,
    destroy: DestroyFn,
}

fn register<F: Send + Sync + 'static>(
    shared: &Arc<HostShared>,
    spec: &KernelSpec<'_>,
    compute: F,
    trampoline: ComputeFn,
    state: Option<StateFns>,
) -> Result<()> {
    let register = shared
        .kernel_fns
        .register_kernel
        .ok_or_else(|| shared.refuse(Error::internal("register_kernel vanished")))?;
    let c = |what: &str, s: &str| {
        CString::new(s).map_err(|_| {
            shared.refuse(Error::invalid_argument(format!(
                "kernel {what} {s:?} contains a NUL (KernelSpec::{what})"
            )))
        })
    };
    let op = c("op", spec.op)?;
    let device_type = c("device_type", spec.device_type)?;
    let platform = spec.platform.map(|p| c("platform", p)).transpose()?;
    // A host older than ABI 1.3 knows no half dtypes (and never has such tensors): the kernel
    // goes in without them, or not at all when it took nothing else.
    let (major, minor) = shared.abi_version();
    let halves = (major, minor) >= (1, 3);
    let dtypes: Vec<i32> = spec
        .dtypes
        .iter()
        .filter(|d| halves || !matches!(**d, DType::F16 | DType::BF16))
        .map(|d| d.code())
        .collect();
    if dtypes.is_empty() && !spec.dtypes.is_empty() {
        shared.log(
            LogLevel::Info,
            &format!(
                "kernel {} for {} takes only f16/bf16, which a host of plugin ABI \
                 {major}.{minor} does not know: not registered",
                spec.op, spec.device_type
            ),
        );
        shared.call_void("drop of a kernel left out", move || drop(compute));
        return Ok(());
    }
    let entry = Box::into_raw(Box::new(KernelEntry {
        magic: KERNEL_MAGIC,
        host: Arc::clone(shared),
        op: spec.op.to_owned(),
        what: format!("kernel {}", spec.op),
        compute,
    }));
    let desc = abi::dpp_kernel_t {
        struct_size: size_of::<abi::dpp_kernel_t>(),
        ext: ptr::null_mut(),
        op: op.as_ptr(),
        device_type: device_type.as_ptr(),
        platform: platform.as_ref().map_or(ptr::null(), |p| p.as_ptr()),
        dtypes: if dtypes.is_empty() {
            ptr::null()
        } else {
            dtypes.as_ptr()
        },
        num_dtypes: dtypes.len(),
        priority: spec.priority,
        kernel_data: entry.cast(),
        compute: Some(trampoline),
        // A host older than 1.5 reads the struct only as far as `compute` and never calls these.
        create: state.as_ref().map(|s| s.create),
        destroy: state.as_ref().map(|s| s.destroy),
    };
    // SAFETY: during init (only `Host` reaches this); `desc` and what it points to outlive
    // the call; `kernel_data` and `compute` stay valid until shutdown (owned below).
    let status = unsafe { register(shared.context, &desc) };
    let owned = Owned {
        ptr: entry.cast(),
        free: free_entry::<F>,
    };
    if status == abi::DPP_OK {
        shared.owned.lock().push(owned);
        return Ok(());
    }
    // Refused: the host keeps nothing of it.
    shared.call_void("drop of a refused kernel", move || drop(owned));
    let code = Status::from_code(status).unwrap_or(Status::Internal);
    let binding = spec.platform.unwrap_or("this plugin's platform");
    // The host's own account of why names the C struct's fields; say which Rust ones they are.
    let fields = if dtypes.len() == spec.dtypes.len() {
        "dpp_kernel_t.dtypes[i] is KernelSpec::dtypes[i]"
    } else {
        "dpp_kernel_t.dtypes is KernelSpec::dtypes without f16 and bf16, which this host does \
         not know"
    };
    Err(Error::new(
        code,
        format!(
            "the host refused kernel {} for {} on {binding} ({code}, status {status}; the \
             host's dpp_kernel_t is the KernelSpec: {fields})",
            spec.op, spec.device_type
        ),
    ))
}
