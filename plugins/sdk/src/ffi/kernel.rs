//! Kernels at the boundary (ABI 1.1): the host's `register_kernel` and `attr_*` functions
//! (and, from ABI 1.4, `allocate_temp`), the `compute` trampolines, and the kernel context's
//! views of the host's tensors.
//!
//! A kernel's `kernel_data` is a boxed [`KernelEntry`] (the plugin's closure, its op name and
//! the host it was registered with). The host keeps it until shutdown; `HostShared` owns it
//! and frees it in `retire` (shutdown, or a failed init that the host rolled back).

use std::any::TypeId;
use std::ffi::{c_char, c_void, CString};
use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, offset_of, size_of};
use std::ops::Deref;
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
    op: &'a str,
    inputs: Tensors<'a>,
    outputs: Tensors<'a>,
    attrs: *const c_void,
    /// The host's context, as the host passed it (`allocate_temp` wants it back).
    context: *const abi::dpp_kernel_context_t,
    host: &'a Arc<HostShared>,
}

impl<'a> KernelArgs<'a> {
    /// # Safety
    /// `raw` is the host's kernel context of at least the ABI 1.1 size, valid for `'a`.
    unsafe fn new(
        raw: &'a abi::dpp_kernel_context_t,
        op: &'a str,
        host: &'a Arc<HostShared>,
    ) -> Result<KernelArgs<'a>> {
        Ok(KernelArgs {
            op,
            // SAFETY: the host's arrays, valid during the call.
            inputs: unsafe { Tensors::new(raw.inputs, raw.num_inputs, "inputs", op) }?,
            // SAFETY: as above.
            outputs: unsafe { Tensors::new(raw.outputs, raw.num_outputs, "outputs", op) }?,
            attrs: raw.attrs,
            context: ptr::from_ref(raw),
            host,
        })
    }

    /// The op the kernel was registered for.
    pub fn op(&self) -> &'a str {
        self.op
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
                self.op, self.inputs.len
            ))
        })
    }

    /// Output `i`; an `InvalidArgument` error naming the op when there is none.
    pub fn output(&self, i: usize) -> Result<Tensor<'a>> {
        self.outputs.get(i).ok_or_else(|| {
            Error::invalid_argument(format!(
                "kernel {}: no output {i} (the op got {})",
                self.op, self.outputs.len
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
            self.op, self.inputs.len, self.outputs.len
        )))
    }

    /// A logger (usable from stream work, any thread, until shutdown).
    pub fn logger(&self) -> Logger {
        Logger::new(Arc::clone(self.host))
    }

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
    pub fn attr_int(&self, name: &str) -> Result<i64> {
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
    pub fn attr_float(&self, name: &str) -> Result<f64> {
        let mut out = 0f64;
        self.read_attr(name, "float", |n| {
            let f = self.host.kernel_fns.attr_float?;
            // SAFETY: as in attr_int.
            Some(unsafe { f(self.attrs, n, &mut out) })
        })?;
        Ok(out)
    }

    /// A bool attribute. Errors as [`Self::attr_int`].
    pub fn attr_bool(&self, name: &str) -> Result<bool> {
        let mut out = 0i32;
        self.read_attr(name, "bool", |n| {
            let f = self.host.kernel_fns.attr_bool?;
            // SAFETY: as in attr_int.
            Some(unsafe { f(self.attrs, n, &mut out) })
        })?;
        Ok(out != 0)
    }

    /// An integer-list attribute, valid during the kernel call. Errors as [`Self::attr_int`].
    pub fn attr_ints(&self, name: &str) -> Result<&'a [i64]> {
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
    pub fn attr_string(&self, name: &str) -> Result<&'a str> {
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
    pub fn attr_dtype(&self, name: &str) -> Result<DType> {
        let mut out = 0i32;
        self.read_attr(name, "dtype", |n| {
            let f = self.host.kernel_fns.attr_dtype?;
            // SAFETY: as in attr_int.
            Some(unsafe { f(self.attrs, n, &mut out) })
        })?;
        Ok(DType::from_code(out))
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
        let op = self.op;
        let Some(f) = self.host.kernel_fns.allocate_temp else {
            let (major, minor) = self.host.abi_version();
            return Err(Error::unimplemented(format!(
                "kernel {op}: the host has no allocate_temp function (plugin ABI \
                 {major}.{minor}, a {}-byte dpp_host_api_t); temporary memory needs ABI 1.4",
                self.host.table_size()
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
            .field("op", &self.op)
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

/// The context and the entry of a compute call; `Err(status)` when they are unusable.
///
/// # Safety
/// `ctx` is NULL or the host's kernel context, valid during the call, whose `kernel_data` is
/// what `register` gave the host for a `KernelEntry<F>` (the host passes each kernel its own).
unsafe fn entry_of<'a, F>(
    ctx: *const abi::dpp_kernel_context_t,
) -> std::result::Result<(&'a abi::dpp_kernel_context_t, &'a KernelEntry<F>), abi::dpp_status_t> {
    if ctx.is_null() {
        return Err(abi::DPP_INVALID_ARGUMENT);
    }
    // SAFETY: non-NULL; `struct_size` first.
    let size = unsafe { ptr::addr_of!((*ctx).struct_size).read() };
    if size < abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1 {
        // Too short to hold kernel_data: no way to reach the host to say why.
        return Err(abi::DPP_ABI_MISMATCH);
    }
    // SAFETY: at least the ABI 1.1 size.
    let raw = unsafe { &*ctx };
    let entry = raw.kernel_data.cast_const().cast::<KernelEntry<F>>();
    // SAFETY: per the caller; `magic` is the first field of every KernelEntry.
    if entry.is_null() || unsafe { ptr::addr_of!((*entry).magic).read() } != KERNEL_MAGIC {
        return Err(abi::DPP_INVALID_ARGUMENT);
    }
    // SAFETY: a live entry (freed only after the host can no longer call the kernel).
    Ok((raw, unsafe { &*entry }))
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
        entry.host.call(|| {
            // SAFETY: a context of at least the 1.1 size (checked), valid during the call.
            let args = unsafe { KernelArgs::new(raw, &entry.op, &entry.host) }?;
            // SAFETY: the kernel is bound to a platform of this plugin whose devices are `D`
            // (checked at registration), so the host passes one of its devices (the type is
            // checked again).
            let state = unsafe { device_state::<D>(raw.device) }.ok_or_else(|| {
                Error::internal(format!(
                    "kernel {}: the context's device is not a device of this plugin's platform",
                    entry.op
                ))
            })?;
            // SAFETY: the device's default stream: a stream handle this device created.
            let stream = unsafe { state.stream(raw.stream, &entry.what) }?;
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
        entry.host.call(|| {
            // SAFETY: a context of at least the 1.1 size (checked), valid during the call.
            let args = unsafe { KernelArgs::new(raw, &entry.op, &entry.host) }?;
            (entry.compute)(&args)
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
    register::<F>(shared, spec, compute, compute_bound::<D, F>)
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
    register::<F>(shared, &spec, compute, compute_any::<F>)
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

fn register<F: Send + Sync + 'static>(
    shared: &Arc<HostShared>,
    spec: &KernelSpec<'_>,
    compute: F,
    trampoline: ComputeFn,
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
        create: None,
        destroy: None,
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
