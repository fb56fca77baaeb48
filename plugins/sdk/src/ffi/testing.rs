//! An in-process fake host (feature `testing`): loads a plugin from its entry function and
//! drives its tables through safe methods, the way the runtime's loader would, so that a
//! plugin can be unit-tested without the runtime.
//!
//! ```text
//! use devplug_plugin_sdk::testing::TestHost;
//!
//! let host = TestHost::new().with_option("devices", "2");
//! let plugin = host.load(my_plugin::devplug_plugin_entry)?;
//! let dev = plugin.create_device("RSIM", 0)?;
//! let addr = dev.allocate(64)?;
//! dev.memcpy_htod(addr, &[1; 64])?;
//! ```
//!
//! It checks what the runtime checks (ABI version, struct sizes, required function pointers,
//! duplicate platform names, kernel bindings and conflicts), keeps `set_error` messages per
//! thread and returns them in the [`Error`] of a failed call, records log lines, owns the host
//! buffers of stream-ordered copies and the kernels' temporary device memory until the stream
//! is synchronized, and tears everything down in order on drop (events and streams, devices,
//! platforms, then `shutdown`). It works with any plugin that speaks the ABI, not only
//! SDK-built ones.
//!
//! Kernels (ABI 1.1) are listed by [`TestPlugin::kernels`] and run with
//! [`TestStream::run_kernel`], which picks the kernel as the runtime does (op, device type,
//! the device's platform or `ANY`, the first input's dtype, the highest priority) and calls
//! it with that stream as the device's default stream, with the attributes the test gives
//! ([`TestAttrs`]: the runtime would fill in the op's attribute defaults, this host does not,
//! so give every attribute the kernel reads). A kernel's `allocate_temp` (ABI 1.4)
//! allocates with the device's own `allocate`; the stream frees those allocations
//! (`deallocate`) when it is next synchronized, or destroyed:
//!
//! ```text
//! let s = dev.create_stream()?;
//! let x = KernelTensor::new(DType::F32, &[2], dev.allocate(8)?);
//! // … upload x and y, allocate z …
//! s.run_kernel("Add", &[x, y], &[z.clone()], &TestAttrs::new())?;
//! // Transpose declares `perm` (default []): give it, as the runtime would.
//! let perm = TestAttrs::new().with("perm", AttrValue::Ints(vec![1, 0]));
//! s.run_kernel("Transpose", &[m], &[mt.clone()], &perm)?;
//! s.synchronize()?;
//! ```
//!
//! Kernels with a state (ABI 1.5, `Host::register_kernel_with_state`, or a C kernel's
//! `create`/`destroy`): as the runtime, `run_kernel` calls the kernel's `create` before the
//! first launch of each new combination of device, input dtypes and attributes (compared as
//! sets: the order the test gives them in does not matter), keeps the state for the device and
//! passes it to every launch with that combination. A failed `create` fails the run with
//! `kernel <op>: create: <message>` and keeps nothing (the next run calls it again). Unlike the
//! runtime, which keeps at most 64 per kernel and device, this host keeps every state until
//! [`TestDevice::release_kernel_states`] (which lets them go as the runtime's bound would) or
//! the device's drop, which destroys them before `destroy_device`;
//! [`TestDevice::kernel_states`] counts them. Acting as a host older than 1.5
//! ([`TestHost::with_abi_minor`]), it never calls `create` and passes 80-byte contexts without
//! `state`.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::thread::{self, ThreadId};

use devplug_plugin_abi as abi;
use parking_lot::Mutex;

use super::{boundary, panic_text};
use crate::device::{AllocatorStats, DeviceAddr, DeviceInfo, EventStatus, MemoryUsage};
use crate::error::{Error, Result, Status};
use crate::kernel::DType;
use crate::platform::PlatformFlags;

type ComputeFn = unsafe extern "C" fn(*const abi::dpp_kernel_context_t) -> abi::dpp_status_t;
type CreateFn = unsafe extern "C" fn(
    *const abi::dpp_kernel_create_context_t,
    *mut *mut c_void,
) -> abi::dpp_status_t;
type DestroyFn = unsafe extern "C" fn(*mut c_void, *mut c_void);

/// The type of a plugin's entry function, as `devplug_plugin!` defines it.
pub type EntryFn = extern "C" fn() -> *const abi::dpp_plugin_api_t;

struct RegisteredPlatform {
    desc: PlatformDesc,
    platform_data: *mut c_void,
    create_device:
        unsafe extern "C" fn(*mut c_void, i32, *mut abi::dpp_device_t) -> abi::dpp_status_t,
    destroy_device: unsafe extern "C" fn(*mut c_void, *mut abi::dpp_device_t),
    destroy_platform: Option<unsafe extern "C" fn(*mut c_void)>,
}

/// A registered platform's description, as the host copied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformDesc {
    /// Name.
    pub name: String,
    /// Device type.
    pub device_type: String,
    /// Priority.
    pub priority: i32,
    /// Flags.
    pub flags: PlatformFlags,
    /// Vendor.
    pub vendor: Option<String>,
    /// Version.
    pub version: Option<String>,
    /// Device count.
    pub device_count: i32,
}

/// A kernel a plugin registered, as the host copied it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelDesc {
    /// The op.
    pub op: String,
    /// The device type.
    pub device_type: String,
    /// The platform it is bound to (resolved when the plugin gave NULL), or `ANY`.
    pub platform: String,
    /// The dtypes it accepts (empty: all).
    pub dtypes: Vec<DType>,
    /// Its priority.
    pub priority: i32,
}

/// An op a plugin defined (ABI 1.2), as the host copied it. The fake host checks the fields
/// are there and the name is free; it does not parse the text (the runtime does when it
/// commits the load: test an op's definition with the runtime, e.g. `devplug check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpDesc {
    /// `namespace.Name`.
    pub name: String,
    /// The inputs, as given.
    pub inputs: String,
    /// The outputs, as given.
    pub outputs: String,
    /// The type variables, as given.
    pub type_vars: String,
    /// The attributes, as given.
    pub attrs: String,
    /// The body, as given.
    pub body: String,
}

impl KernelDesc {
    /// Whether two kernels would be ambiguous (the runtime refuses the second).
    fn conflicts_with(&self, other: &KernelDesc) -> bool {
        self.op == other.op
            && self.device_type == other.device_type
            && self.platform == other.platform
            && self.priority == other.priority
            && (self.dtypes.is_empty()
                || other.dtypes.is_empty()
                || self.dtypes.iter().any(|d| other.dtypes.contains(d)))
    }
}

struct RegisteredKernel {
    desc: KernelDesc,
    kernel_data: *mut c_void,
    compute: ComputeFn,
    /// ABI 1.5 (read from a host of 1.5 or newer only).
    create: Option<CreateFn>,
    destroy: Option<DestroyFn>,
}

/// An attribute value of [`TestAttrs`].
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// `attr_int` (and `attr_float`, converted).
    Int(i64),
    /// `attr_float`.
    Float(f64),
    /// `attr_bool`.
    Bool(bool),
    /// `attr_ints`.
    Ints(Vec<i64>),
    /// `attr_dtype`.
    DType(DType),
    /// `attr_string` (ABI 1.2).
    Str(String),
}

/// The attributes a kernel run by [`TestStream::run_kernel`] reads with the host's `attr_*`
/// functions (which follow the runtime: `NOT_FOUND` for a missing name, `INVALID_ARGUMENT`
/// for another type; an int reads as a float).
///
/// **No defaults.** The runtime checks a run's attributes against the op's signature and
/// fills in each one the caller left out with its default (Transpose's `perm` is `[]`)
/// before your kernel runs, so a kernel always finds every attribute the op declares. The
/// fake host knows no op signatures: the kernel sees exactly the attributes the test gives,
/// and reading any other is `NOT_FOUND`. Give every attribute the kernel reads, defaults
/// included, with the type the op declares:
///
/// ```
/// use devplug_plugin_sdk::testing::{AttrValue, TestAttrs};
/// // Transpose with its default perm (reverse the axes), as the runtime would pass it.
/// let attrs = TestAttrs::new().with("perm", AttrValue::Ints(vec![]));
/// # let _ = attrs;
/// ```
#[derive(Debug, Clone, Default)]
pub struct TestAttrs {
    values: Vec<(CString, AttrValue)>,
}

impl TestAttrs {
    /// No attributes.
    pub fn new() -> TestAttrs {
        TestAttrs::default()
    }

    /// Adds attribute `name` (without NUL).
    pub fn with(mut self, name: &str, value: AttrValue) -> TestAttrs {
        let name = CString::new(name.replace('\0', "")).unwrap_or_default();
        self.values.push((name, value));
        self
    }
}

/// An input or output of a kernel run by [`TestStream::run_kernel`]: device memory the test
/// allocated (and keeps alive until the stream is synchronized).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelTensor {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<i64>,
    /// First element.
    pub addr: DeviceAddr,
    /// Bytes (set by [`KernelTensor::new`] from dtype and shape; change it to test checks).
    pub byte_size: u64,
}

impl KernelTensor {
    /// A dense tensor at `addr`; `byte_size` = elements × dtype size (0 for an unknown dtype).
    pub fn new(dtype: DType, shape: &[i64], addr: DeviceAddr) -> KernelTensor {
        let n: u64 = shape.iter().map(|&d| d.max(0) as u64).product();
        KernelTensor {
            dtype,
            shape: shape.to_vec(),
            addr,
            byte_size: n * dtype.size().unwrap_or(0) as u64,
        }
    }

    fn raw(&self) -> abi::dpp_tensor_t {
        abi::dpp_tensor_t {
            struct_size: std::mem::size_of::<abi::dpp_tensor_t>(),
            ext: ptr::null_mut(),
            dtype: self.dtype.code(),
            rank: self.shape.len() as i32,
            shape: if self.shape.is_empty() {
                ptr::null()
            } else {
                self.shape.as_ptr()
            },
            data: self.addr.get(),
            byte_size: self.byte_size,
        }
    }
}

struct HostState {
    options: Vec<(CString, CString)>,
    errors: Mutex<HashMap<ThreadId, String>>,
    logs: Mutex<Vec<(i32, String)>>,
    /// Some during an init call: the platforms it registered so far.
    registering: Mutex<Option<Vec<RegisteredPlatform>>>,
    /// Some during an init call: the kernels it registered so far.
    registering_kernels: Mutex<Option<Vec<RegisteredKernel>>>,
    /// Some during an init call: the ops it defined so far.
    registering_ops: Mutex<Option<Vec<OpDesc>>>,
    /// The kernels of every loaded plugin (for conflict checks).
    kernels: Mutex<Vec<KernelDesc>>,
    /// The first refused registration of the current init (like the runtime, the host keeps
    /// it apart from the plugin's own `set_error` message and reports both).
    refused: Mutex<Option<Error>>,
    names: Mutex<Vec<String>>,
    /// The ABI minor this host acts as ([`TestHost::with_abi_minor`]): below 3 it knows no
    /// half dtypes and refuses them in kernels, as hosts of 1.0–1.2 do.
    abi_minor: std::sync::atomic::AtomicU32,
}

/// A fake host. Set load options with [`TestHost::with_option`], then [`TestHost::load`]
/// plugins (several, as the runtime may).
pub struct TestHost {
    state: Box<HostState>,
    api: Box<abi::dpp_host_api_t>,
}

// SAFETY: the state is behind locks; `api` is an immutable table whose context points to
// `state`.
unsafe impl Send for TestHost {}
// SAFETY: as above.
unsafe impl Sync for TestHost {}

/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        // SAFETY: per the caller.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// # Safety
/// `context` is the `HostState` of a live `TestHost`.
unsafe fn host_state<'a>(context: abi::dpp_host_context_t) -> &'a HostState {
    // SAFETY: per the caller.
    unsafe { &*context.cast_const().cast::<HostState>() }
}

unsafe extern "C" fn th_set_error(context: abi::dpp_host_context_t, message: *const c_char) {
    boundary((), || {
        // SAFETY: the context of this host's table; a C string from the plugin.
        let (state, message) = unsafe { (host_state(context), string(message)) };
        let message = message.unwrap_or_else(|| "(NULL message)".to_owned());
        state.errors.lock().insert(thread::current().id(), message);
    })
}

unsafe extern "C" fn th_log(context: abi::dpp_host_context_t, level: i32, message: *const c_char) {
    boundary((), || {
        // SAFETY: the context of this host's table; a C string from the plugin.
        let (state, message) = unsafe { (host_state(context), string(message)) };
        state.logs.lock().push((level, message.unwrap_or_default()));
    })
}

unsafe extern "C" fn th_get_option(
    context: abi::dpp_host_context_t,
    key: *const c_char,
) -> *const c_char {
    boundary(ptr::null(), || {
        // SAFETY: the context of this host's table; a C string from the plugin.
        let state = unsafe { host_state(context) };
        if key.is_null() {
            return ptr::null();
        }
        // SAFETY: a NUL-terminated key.
        let key = unsafe { CStr::from_ptr(key) };
        state
            .options
            .iter()
            .find(|(k, _)| k.as_c_str() == key)
            .map_or(ptr::null(), |(_, v)| v.as_ptr())
    })
}

unsafe extern "C" fn th_register_platform(
    context: abi::dpp_host_context_t,
    platform: *const abi::dpp_platform_t,
) -> abi::dpp_status_t {
    boundary(abi::DPP_INTERNAL, || {
        // SAFETY: the context of this host's table.
        let state = unsafe { host_state(context) };
        let fail = |code: Status, msg: String| {
            state
                .refused
                .lock()
                .get_or_insert_with(|| Error::new(code, msg));
            code.code()
        };
        let mut registering = state.registering.lock();
        let Some(list) = registering.as_mut() else {
            return fail(
                Status::FailedPrecondition,
                "register_platform outside init".into(),
            );
        };
        if platform.is_null() {
            return fail(
                Status::InvalidArgument,
                "register_platform: platform is NULL".into(),
            );
        }
        // SAFETY: non-NULL; `struct_size` first.
        let size = unsafe { ptr::addr_of!((*platform).struct_size).read() };
        if size < abi::DPP_PLATFORM_STRUCT_SIZE {
            return fail(
                Status::InvalidArgument,
                format!("dpp_platform_t.struct_size is {size}"),
            );
        }
        // SAFETY: the plugin's struct of at least the ABI 1.0 size, valid during the call.
        let p = unsafe { &*platform };
        // SAFETY: C strings from the plugin, valid during the call.
        let (name, device_type, vendor, version) = unsafe {
            (
                string(p.name),
                string(p.device_type),
                string(p.vendor),
                string(p.version),
            )
        };
        let (Some(name), Some(device_type)) = (name, device_type) else {
            return fail(
                Status::InvalidArgument,
                "dpp_platform_t.name or .device_type is NULL".into(),
            );
        };
        let (Some(create_device), Some(destroy_device)) = (p.create_device, p.destroy_device)
        else {
            return fail(
                Status::InvalidArgument,
                format!("platform {name}: dpp_platform_t.create_device or .destroy_device is NULL"),
            );
        };
        let mut names = state.names.lock();
        if names.contains(&name) || list.iter().any(|r| r.desc.name == name) {
            return fail(
                Status::AlreadyExists,
                format!("platform {name} is already registered"),
            );
        }
        names.push(name.clone());
        list.push(RegisteredPlatform {
            desc: PlatformDesc {
                name,
                device_type,
                priority: p.priority,
                flags: PlatformFlags::from_bits(p.flags),
                vendor,
                version,
                device_count: p.device_count,
            },
            platform_data: p.platform_data,
            create_device,
            destroy_device,
            destroy_platform: p.destroy_platform,
        });
        abi::DPP_OK
    })
}

unsafe extern "C" fn th_register_op(
    context: abi::dpp_host_context_t,
    def: *const abi::dpp_op_def_t,
) -> abi::dpp_status_t {
    boundary(abi::DPP_INTERNAL, || {
        // SAFETY: the context of this host's table.
        let state = unsafe { host_state(context) };
        let fail = |code: Status, msg: String| {
            state
                .refused
                .lock()
                .get_or_insert_with(|| Error::new(code, msg));
            code.code()
        };
        let mut registering = state.registering_ops.lock();
        let Some(list) = registering.as_mut() else {
            return fail(
                Status::FailedPrecondition,
                "register_op outside init".into(),
            );
        };
        if def.is_null() {
            return fail(Status::InvalidArgument, "register_op: def is NULL".into());
        }
        // SAFETY: non-NULL; `struct_size` first.
        let size = unsafe { ptr::addr_of!((*def).struct_size).read() };
        if size < abi::DPP_OP_DEF_STRUCT_SIZE {
            return fail(
                Status::InvalidArgument,
                format!("dpp_op_def_t.struct_size is {size}"),
            );
        }
        // SAFETY: the plugin's struct of at least the ABI 1.2 size, valid during the call.
        let d = unsafe { &*def };
        // SAFETY: C strings from the plugin (or NULL), valid during the call.
        let field = |p: *const c_char| unsafe { string(p) };
        let (Some(name), Some(outputs), Some(body)) =
            (field(d.name), field(d.outputs), field(d.body))
        else {
            return fail(
                Status::InvalidArgument,
                "dpp_op_def_t.name, .outputs or .body is NULL".into(),
            );
        };
        if !name.contains('.') {
            return fail(
                Status::InvalidArgument,
                format!("op {name}: the name needs a namespace (`mydev.{name}`)"),
            );
        }
        if list.iter().any(|o| o.name == name) {
            return fail(
                Status::AlreadyExists,
                format!("op {name} is registered twice"),
            );
        }
        list.push(OpDesc {
            name,
            inputs: field(d.inputs).unwrap_or_default(),
            outputs,
            type_vars: field(d.type_vars).unwrap_or_default(),
            attrs: field(d.attrs).unwrap_or_default(),
            body,
        });
        abi::DPP_OK
    })
}

unsafe extern "C" fn th_register_kernel(
    context: abi::dpp_host_context_t,
    kernel: *const abi::dpp_kernel_t,
) -> abi::dpp_status_t {
    boundary(abi::DPP_INTERNAL, || {
        // SAFETY: the context of this host's table.
        let state = unsafe { host_state(context) };
        let fail = |code: Status, msg: String| {
            state
                .refused
                .lock()
                .get_or_insert_with(|| Error::new(code, msg));
            code.code()
        };
        let platforms = state.registering.lock();
        let mut registering = state.registering_kernels.lock();
        let (Some(platforms), Some(list)) = (platforms.as_ref(), registering.as_mut()) else {
            return fail(
                Status::FailedPrecondition,
                "register_kernel outside init".into(),
            );
        };
        if kernel.is_null() {
            return fail(
                Status::InvalidArgument,
                "register_kernel: kernel is NULL".into(),
            );
        }
        // SAFETY: non-NULL; `struct_size` first.
        let size = unsafe { ptr::addr_of!((*kernel).struct_size).read() };
        if size < abi::DPP_KERNEL_STRUCT_SIZE_1_1 {
            return fail(
                Status::InvalidArgument,
                format!("dpp_kernel_t.struct_size is {size}"),
            );
        }
        // A copy, as far as the plugin's struct reaches and this host's ABI knows it: a host
        // older than 1.5 reads the 80 bytes of ABI 1.1 (no `create`, no `destroy`); fields
        // past that stay NULL.
        let host_minor = state.abi_minor.load(std::sync::atomic::Ordering::Relaxed);
        let known = if host_minor >= 5 {
            std::mem::size_of::<abi::dpp_kernel_t>()
        } else {
            abi::DPP_KERNEL_STRUCT_SIZE_1_1
        };
        let mut copy = abi::dpp_kernel_t {
            struct_size: 0,
            ext: ptr::null_mut(),
            op: ptr::null(),
            device_type: ptr::null(),
            platform: ptr::null(),
            dtypes: ptr::null(),
            num_dtypes: 0,
            priority: 0,
            kernel_data: ptr::null_mut(),
            compute: None,
            create: None,
            destroy: None,
        };
        // SAFETY: the plugin's `size` (≥ n) readable bytes into a struct of at least n bytes;
        // its fields are integers, raw pointers and nullable function pointers, for which
        // the bytes of the plugin's struct of the same layout are valid.
        unsafe {
            ptr::copy_nonoverlapping(
                kernel.cast::<u8>(),
                ptr::from_mut(&mut copy).cast::<u8>(),
                size.min(known),
            )
        };
        let k = &copy;
        // SAFETY: C strings from the plugin, valid during the call.
        let (op, device_type, platform) =
            unsafe { (string(k.op), string(k.device_type), string(k.platform)) };
        let (Some(op), Some(device_type)) = (op, device_type) else {
            return fail(
                Status::InvalidArgument,
                "dpp_kernel_t.op or .device_type is NULL".into(),
            );
        };
        let Some(compute) = k.compute else {
            return fail(
                Status::InvalidArgument,
                format!("kernel {op}: dpp_kernel_t.compute is NULL"),
            );
        };
        if k.destroy.is_some() && k.create.is_none() {
            return fail(
                Status::InvalidArgument,
                format!(
                    "kernel {op}: dpp_kernel_t.destroy is set but create is NULL (destroy frees \
                     what create made)"
                ),
            );
        }
        let own: Vec<&str> = platforms
            .iter()
            .filter(|p| p.desc.device_type == device_type)
            .map(|p| p.desc.name.as_str())
            .collect();
        let platform = match platform {
            Some(p) if p == "ANY" || own.contains(&p.as_str()) => p,
            Some(p) => {
                return fail(
                    Status::InvalidArgument,
                    format!("kernel {op}: platform {p} is neither ANY nor a platform of type {device_type} of this plugin"),
                )
            }
            None if own.len() == 1 => own[0].to_owned(),
            None => {
                return fail(
                    Status::InvalidArgument,
                    format!("kernel {op}: platform is NULL, but the plugin registered {} platforms of type {device_type}", own.len()),
                )
            }
        };
        if k.num_dtypes > 0 && k.dtypes.is_null() {
            return fail(
                Status::InvalidArgument,
                format!(
                    "kernel {op}: dtypes is NULL but num_dtypes is {}",
                    k.num_dtypes
                ),
            );
        }
        let mut dtypes = Vec::new();
        for i in 0..k.num_dtypes.min(64) {
            // SAFETY: `num_dtypes` values (non-NULL, checked).
            let d = DType::from_code(unsafe { *k.dtypes.add(i) });
            let half = matches!(d, DType::F16 | DType::BF16);
            if !d.is_known() || (half && host_minor < 3) {
                return fail(
                    Status::InvalidArgument,
                    format!(
                        "kernel {op}: dtypes[{i}] is {}, not a DPP_DTYPE_* value",
                        d.code()
                    ),
                );
            }
            dtypes.push(d);
        }
        let desc = KernelDesc {
            op,
            device_type,
            platform,
            dtypes,
            priority: k.priority,
        };
        let mut all = state.kernels.lock();
        if let Some(other) = all
            .iter()
            .chain(list.iter().map(|r| &r.desc))
            .find(|o| o.conflicts_with(&desc))
        {
            return fail(
                Status::AlreadyExists,
                format!(
                    "kernel {} for {} on {} (priority {}, dtypes {:?}) conflicts with one already registered (dtypes {:?})",
                    desc.op, desc.device_type, desc.platform, desc.priority, desc.dtypes, other.dtypes
                ),
            );
        }
        all.push(desc.clone());
        list.push(RegisteredKernel {
            desc,
            kernel_data: k.kernel_data,
            compute,
            create: k.create,
            destroy: k.destroy,
        });
        abi::DPP_OK
    })
}

/// What a kernel context's `attrs` points to while [`TestStream::run_kernel`] runs a kernel:
/// the test's attributes (read by the `attr_*` functions) and what `allocate_temp` needs.
struct Launch<'a> {
    attrs: &'a TestAttrs,
    device: &'a TestDevice<'a>,
    /// The launch's temporary memory: `(address from allocate, its size)`, for `deallocate`.
    temps: Mutex<Vec<(DeviceAddr, u64)>>,
}

/// The addresses of the [`Launch`]es whose kernel is running: `allocate_temp` takes no other
/// `attrs` (a context the host did not pass, or one of a launch that has ended).
static LAUNCHES: Mutex<Vec<usize>> = Mutex::new(Vec::new());

impl Launch<'_> {
    /// `size` bytes (> 0) on the device, 256-byte aligned as the ABI promises: the device's
    /// own allocation when it is aligned, else one of `size + 255` bytes, aligned up.
    /// Returns `(address for the kernel, allocation, its size)`.
    fn allocate(&self, size: u64) -> Result<(DeviceAddr, DeviceAddr, u64)> {
        const ALIGN: u64 = 256;
        let dev = self.device;
        let a = dev.allocate(size)?;
        if a.get().is_multiple_of(ALIGN) {
            return Ok((a, a, size));
        }
        dev.deallocate(a, size);
        let padded = size.checked_add(ALIGN - 1).ok_or_else(|| {
            Error::resource_exhausted(format!("{size} bytes do not fit the address space"))
        })?;
        let base = dev.allocate(padded)?;
        // The next multiple of 256 is at most 255 bytes on: `size` bytes from it fit.
        match base.get().checked_next_multiple_of(ALIGN) {
            Some(x) => Ok((DeviceAddr(x), base, padded)),
            None => {
                dev.deallocate(base, padded);
                Err(Error::internal(format!(
                    "the device's allocate gave {base} for {padded} bytes, at the end of the \
                     address space"
                )))
            }
        }
    }
}

unsafe extern "C" fn th_allocate_temp(
    context: *const abi::dpp_kernel_context_t,
    size: u64,
    out_addr: *mut abi::dpp_addr_t,
) -> abi::dpp_status_t {
    boundary(abi::DPP_INTERNAL, || {
        if context.is_null() {
            return abi::DPP_INVALID_ARGUMENT;
        }
        // SAFETY: non-NULL: a kernel context, by the ABI's contract; `struct_size` first.
        let context_size = unsafe { ptr::addr_of!((*context).struct_size).read() };
        if context_size < abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1 {
            return abi::DPP_INVALID_ARGUMENT;
        }
        // SAFETY: a context of at least the ABI 1.1 size, which holds `attrs`.
        let attrs = unsafe { ptr::addr_of!((*context).attrs).read() };
        // Held until the end: the launch stays listed, hence alive, meanwhile.
        let launches = LAUNCHES.lock();
        if !launches.contains(&(attrs as usize)) {
            return abi::DPP_INVALID_ARGUMENT;
        }
        // SAFETY: a listed launch: `compute_with` lists it while the kernel runs and delists
        // it (under this lock) before it drops it.
        let launch = unsafe { &*attrs.cast::<Launch<'_>>() };
        let refuse = |code: Status, why: String| {
            // Like the runtime, the host says why on the calling thread.
            launch
                .device
                .host()
                .state
                .errors
                .lock()
                .insert(thread::current().id(), format!("allocate_temp: {why}"));
            code.code()
        };
        if size == 0 {
            return refuse(Status::InvalidArgument, "size is 0".into());
        }
        if out_addr.is_null() {
            return refuse(Status::InvalidArgument, "out_addr is NULL".into());
        }
        match launch.allocate(size) {
            Ok((addr, base, len)) => {
                // SAFETY: non-NULL and writable, by the ABI's contract.
                unsafe { out_addr.write(addr.get()) };
                launch.temps.lock().push((base, len));
                abi::DPP_OK
            }
            Err(e) => refuse(e.code(), format!("{size} bytes: {}", e.message())),
        }
    })
}

/// # Safety
/// `attrs` is NULL or the `Launch` of a kernel context of this host; `name` is NULL or a C
/// string.
unsafe fn attr_lookup<'a>(
    attrs: *const c_void,
    name: *const c_char,
) -> std::result::Result<&'a AttrValue, abi::dpp_status_t> {
    if attrs.is_null() || name.is_null() {
        return Err(abi::DPP_INVALID_ARGUMENT);
    }
    // SAFETY: per the caller.
    let (launch, name) = unsafe { (&*attrs.cast::<Launch<'a>>(), CStr::from_ptr(name)) };
    launch
        .attrs
        .values
        .iter()
        .find(|(n, _)| n.as_c_str() == name)
        .map(|(_, v)| v)
        .ok_or(abi::DPP_NOT_FOUND)
}

/// Writes `value` to the out-pointer `out`.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn attr_put<T>(out: *mut T, value: T) -> abi::dpp_status_t {
    if out.is_null() {
        return abi::DPP_INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL, writable per the caller.
    unsafe { out.write(value) };
    abi::DPP_OK
}

unsafe extern "C" fn th_attr_int(
    attrs: *const c_void,
    name: *const c_char,
    out: *mut i64,
) -> abi::dpp_status_t {
    // SAFETY: the ABI's contract for attr functions (the plugin passes the context's attrs).
    match unsafe { attr_lookup(attrs, name) } {
        // SAFETY: the plugin's out-pointer.
        Ok(AttrValue::Int(v)) => unsafe { attr_put(out, *v) },
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

unsafe extern "C" fn th_attr_float(
    attrs: *const c_void,
    name: *const c_char,
    out: *mut f64,
) -> abi::dpp_status_t {
    // SAFETY: as in th_attr_int.
    match unsafe { attr_lookup(attrs, name) } {
        // SAFETY: the plugin's out-pointer.
        Ok(AttrValue::Float(v)) => unsafe { attr_put(out, *v) },
        // SAFETY: the plugin's out-pointer.
        Ok(AttrValue::Int(v)) => unsafe { attr_put(out, *v as f64) },
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

unsafe extern "C" fn th_attr_bool(
    attrs: *const c_void,
    name: *const c_char,
    out: *mut i32,
) -> abi::dpp_status_t {
    // SAFETY: as in th_attr_int.
    match unsafe { attr_lookup(attrs, name) } {
        // SAFETY: the plugin's out-pointer.
        Ok(AttrValue::Bool(v)) => unsafe { attr_put(out, i32::from(*v)) },
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

unsafe extern "C" fn th_attr_ints(
    attrs: *const c_void,
    name: *const c_char,
    out_data: *mut *const i64,
    out_len: *mut usize,
) -> abi::dpp_status_t {
    if out_data.is_null() || out_len.is_null() {
        return abi::DPP_INVALID_ARGUMENT;
    }
    // SAFETY: as in th_attr_int.
    match unsafe { attr_lookup(attrs, name) } {
        Ok(AttrValue::Ints(v)) => {
            // SAFETY: non-NULL out-pointers of the plugin; the values live in the TestAttrs,
            // which outlive the kernel call.
            unsafe {
                out_data.write(v.as_ptr());
                out_len.write(v.len());
            }
            abi::DPP_OK
        }
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

unsafe extern "C" fn th_attr_string(
    attrs: *const c_void,
    name: *const c_char,
    out_data: *mut *const c_char,
    out_len: *mut usize,
) -> abi::dpp_status_t {
    if out_data.is_null() || out_len.is_null() {
        return abi::DPP_INVALID_ARGUMENT;
    }
    // SAFETY: as in th_attr_int.
    match unsafe { attr_lookup(attrs, name) } {
        Ok(AttrValue::Str(v)) => {
            // SAFETY: non-NULL out-pointers of the plugin; the bytes live in the TestAttrs,
            // which outlive the kernel call.
            unsafe {
                out_data.write(v.as_ptr().cast());
                out_len.write(v.len());
            }
            abi::DPP_OK
        }
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

unsafe extern "C" fn th_attr_dtype(
    attrs: *const c_void,
    name: *const c_char,
    out: *mut i32,
) -> abi::dpp_status_t {
    // SAFETY: as in th_attr_int.
    match unsafe { attr_lookup(attrs, name) } {
        // SAFETY: the plugin's out-pointer.
        Ok(AttrValue::DType(d)) => unsafe { attr_put(out, d.code()) },
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

impl Default for TestHost {
    fn default() -> TestHost {
        TestHost::new()
    }
}

impl TestHost {
    /// A host with no load options.
    pub fn new() -> TestHost {
        let state = Box::new(HostState {
            options: Vec::new(),
            errors: Mutex::new(HashMap::new()),
            logs: Mutex::new(Vec::new()),
            registering: Mutex::new(None),
            registering_kernels: Mutex::new(None),
            registering_ops: Mutex::new(None),
            kernels: Mutex::new(Vec::new()),
            refused: Mutex::new(None),
            names: Mutex::new(Vec::new()),
            abi_minor: std::sync::atomic::AtomicU32::new(abi::DPP_ABI_MINOR),
        });
        let api = Box::new(abi::dpp_host_api_t {
            struct_size: std::mem::size_of::<abi::dpp_host_api_t>(),
            ext: ptr::null_mut(),
            abi_major: abi::DPP_ABI_MAJOR,
            abi_minor: abi::DPP_ABI_MINOR,
            context: ptr::from_ref::<HostState>(&state).cast_mut().cast(),
            set_error: Some(th_set_error),
            log: Some(th_log),
            get_option: Some(th_get_option),
            register_platform: Some(th_register_platform),
            register_kernel: Some(th_register_kernel),
            attr_int: Some(th_attr_int),
            attr_float: Some(th_attr_float),
            attr_bool: Some(th_attr_bool),
            attr_ints: Some(th_attr_ints),
            attr_dtype: Some(th_attr_dtype),
            register_op: Some(th_register_op),
            attr_string: Some(th_attr_string),
            allocate_temp: Some(th_allocate_temp),
        });
        TestHost { state, api }
    }

    /// Adds load option `key=value` (keys and values must not contain NUL).
    pub fn with_option(mut self, key: &str, value: &str) -> TestHost {
        let c = |s: &str| CString::new(s.replace('\0', "")).unwrap_or_default();
        self.state.options.push((c(key), c(value)));
        self
    }

    /// Acts as a host of plugin ABI `1.minor` (0 to 5), as the runtime of that version
    /// would: its table declares that version and ends where that version's table ends (the
    /// functions added later are out of the plugin's reach), it refuses a plugin that
    /// declares a newer minor, below 1.3 it refuses kernels that name the half dtypes it
    /// does not know, and below 1.5 it reads a kernel's `dpp_kernel_t` only as far as
    /// `compute` (it never calls `create`) and passes kernels contexts of the 80 bytes of ABI
    /// 1.1, without `state`. Tests that a plugin loads, and degrades as it documents, in older
    /// hosts.
    ///
    /// # Panics
    /// For a minor this SDK does not know.
    pub fn with_abi_minor(mut self, minor: u32) -> TestHost {
        self.api.struct_size = match minor {
            0 => abi::DPP_HOST_API_STRUCT_SIZE_1_0,
            1 => abi::DPP_HOST_API_STRUCT_SIZE_1_1,
            2 | 3 => abi::DPP_HOST_API_STRUCT_SIZE_1_2,
            4 | 5 => abi::DPP_HOST_API_STRUCT_SIZE,
            _ => panic!("TestHost::with_abi_minor({minor}): this SDK knows plugin ABI 1.0 to 1.5"),
        };
        self.api.abi_minor = minor;
        self.state
            .abi_minor
            .store(minor, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Log lines the plugins wrote, `(DPP_LOG_* level, message)`.
    pub fn logs(&self) -> Vec<(i32, String)> {
        self.state.logs.lock().clone()
    }

    /// The message of the last `set_error` on this thread, if any (kept).
    pub fn last_error(&self) -> Option<String> {
        self.state
            .errors
            .lock()
            .get(&thread::current().id())
            .cloned()
    }

    fn clear_error(&self) {
        self.state.errors.lock().remove(&thread::current().id());
    }

    /// The ABI minor this host acts as.
    fn abi_minor(&self) -> u32 {
        self.state
            .abi_minor
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `Ok` for `DPP_OK`; otherwise an error with the status and this thread's message.
    fn check(&self, what: &str, status: abi::dpp_status_t) -> Result<()> {
        let message = self.state.errors.lock().remove(&thread::current().id());
        if status == abi::DPP_OK {
            return Ok(());
        }
        let message = message.unwrap_or_else(|| format!("{what} failed without a message"));
        Err(match Status::from_code(status) {
            Some(code) => Error::new(code, message),
            None => Error::internal(format!("{what}: unknown status {status}: {message}")),
        })
    }

    /// Loads a plugin from its entry function: checks its table and runs its `init`. On
    /// failure, what init registered is rolled back (as the runtime does) and the error
    /// carries the plugin's code and message; when the host refused a registration during
    /// init, its code, and its message followed by `(init then failed: <plugin's message>)`.
    pub fn load(&self, entry: EntryFn) -> Result<TestPlugin<'_>> {
        let api = entry();
        if api.is_null() {
            return Err(Error::invalid_argument("the entry function returned NULL"));
        }
        // SAFETY: a plugin's static table; `struct_size` first.
        let size = unsafe { ptr::addr_of!((*api).struct_size).read() };
        if size < abi::DPP_PLUGIN_API_STRUCT_SIZE {
            return Err(Error::new(
                Status::AbiMismatch,
                format!("dpp_plugin_api_t.struct_size is {size}"),
            ));
        }
        // SAFETY: a static table of at least the ABI 1.0 size.
        let a = unsafe { &*api };
        if a.abi_major != abi::DPP_ABI_MAJOR || a.abi_minor > self.api.abi_minor {
            // What a real host of that version does; say how to test the older path.
            let advice = if a.abi_major == abi::DPP_ABI_MAJOR {
                format!(
                    ": a {}.{} host refuses a plugin of a newer minor, as this test host does; \
                     to test your plugin with such a host, declare `abi_minor: {},` in \
                     devplug_plugin! (a build of the plugin that loads into {}.{} hosts)",
                    abi::DPP_ABI_MAJOR,
                    self.api.abi_minor,
                    self.api.abi_minor,
                    abi::DPP_ABI_MAJOR,
                    self.api.abi_minor
                )
            } else {
                String::new()
            };
            return Err(Error::new(
                Status::AbiMismatch,
                format!(
                    "plugin ABI {}.{}, host ABI {}.{}{advice}",
                    a.abi_major,
                    a.abi_minor,
                    abi::DPP_ABI_MAJOR,
                    self.api.abi_minor
                ),
            ));
        }
        // SAFETY: static C strings of the plugin (or NULL).
        let (name, version) = unsafe { (string(a.name), string(a.version)) };
        let init = a
            .init
            .ok_or_else(|| Error::invalid_argument("dpp_plugin_api_t.init is NULL"))?;

        *self.state.registering.lock() = Some(Vec::new());
        *self.state.registering_kernels.lock() = Some(Vec::new());
        *self.state.registering_ops.lock() = Some(Vec::new());
        *self.state.refused.lock() = None;
        self.clear_error();
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: our host table, valid while `self` lives (the plugin is dropped first).
        let status = unsafe { init(&*self.api, &mut data) };
        let platforms = self.state.registering.lock().take().unwrap_or_default();
        let kernels = self
            .state
            .registering_kernels
            .lock()
            .take()
            .unwrap_or_default();
        let ops = self.state.registering_ops.lock().take().unwrap_or_default();
        let plugin = TestPlugin {
            host: self,
            api,
            data,
            initialized: status == abi::DPP_OK,
            platforms,
            kernels,
            ops,
            name: name.unwrap_or_default(),
            version: version.unwrap_or_default(),
        };
        let refused = self.state.refused.lock().take();
        match (self.check("init", status), refused) {
            (Ok(()), _) => Ok(plugin),
            (Err(own), None) => Err(own),
            (Err(own), Some(r)) => Err(Error::new(
                r.code(),
                format!("{} (init then failed: {})", r.message(), own.message()),
            )),
        }
    }
}

impl std::fmt::Debug for TestHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestHost").finish_non_exhaustive()
    }
}

/// A loaded plugin. Dropping it destroys its platforms and shuts it down (its devices
/// borrow it, so they are gone first).
pub struct TestPlugin<'h> {
    host: &'h TestHost,
    api: *const abi::dpp_plugin_api_t,
    data: *mut c_void,
    initialized: bool,
    platforms: Vec<RegisteredPlatform>,
    kernels: Vec<RegisteredKernel>,
    ops: Vec<OpDesc>,
    name: String,
    version: String,
}

// SAFETY: the ABI lets every plugin function be called from any thread.
unsafe impl Send for TestPlugin<'_> {}
// SAFETY: as above; the plugin's platform functions may be called concurrently.
unsafe impl Sync for TestPlugin<'_> {}

impl<'h> TestPlugin<'h> {
    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The platforms it registered.
    pub fn platforms(&self) -> Vec<PlatformDesc> {
        self.platforms.iter().map(|p| p.desc.clone()).collect()
    }

    /// The kernels it registered, in order.
    pub fn kernels(&self) -> Vec<KernelDesc> {
        self.kernels.iter().map(|k| k.desc.clone()).collect()
    }

    /// The ops it defined (ABI 1.2), in order.
    pub fn ops(&self) -> &[OpDesc] {
        &self.ops
    }

    /// The host.
    pub fn host(&self) -> &'h TestHost {
        self.host
    }

    /// Creates device `ordinal` of platform `platform` and checks its function table.
    pub fn create_device(&self, platform: &str, ordinal: i32) -> Result<TestDevice<'_>> {
        let reg = self
            .platforms
            .iter()
            .find(|p| p.desc.name == platform)
            .ok_or_else(|| Error::not_found(format!("no platform {platform}")))?;
        let mut raw = Box::new(abi::dpp_device_t {
            struct_size: std::mem::size_of::<abi::dpp_device_t>(),
            ext: ptr::null_mut(),
            ordinal,
            device_data: ptr::null_mut(),
            hardware_name: ptr::null(),
            vendor: ptr::null(),
            pci_bus_id: ptr::null(),
            total_memory: 0,
            numa_node: -1,
            compute_units: 0,
            se: ptr::null(),
        });
        self.host.clear_error();
        // SAFETY: the plugin's function with its platform_data and our device struct.
        let status = unsafe { (reg.create_device)(reg.platform_data, ordinal, &mut *raw) };
        self.host.check("create_device", status)?;
        let device = TestDevice {
            plugin: self,
            platform_data: reg.platform_data,
            destroy_device: reg.destroy_device,
            raw,
            states: Mutex::new(Vec::new()),
        };
        device.validate()?;
        Ok(device)
    }
}

impl Drop for TestPlugin<'_> {
    fn drop(&mut self) {
        {
            let mut all = self.host.state.kernels.lock();
            for k in self.kernels.drain(..) {
                if let Some(i) = all.iter().position(|d| *d == k.desc) {
                    all.remove(i);
                }
            }
        }
        for p in self.platforms.drain(..).rev() {
            if let Some(destroy) = p.destroy_platform {
                // SAFETY: the plugin's function with its platform_data, once, after its devices.
                unsafe { destroy(p.platform_data) };
            }
            self.host.state.names.lock().retain(|n| *n != p.desc.name);
        }
        if self.initialized {
            // SAFETY: a static table checked at load.
            if let Some(shutdown) = unsafe { (*self.api).shutdown } {
                // SAFETY: once, after every platform was destroyed.
                unsafe { shutdown(self.data) };
            }
        }
    }
}

impl std::fmt::Debug for TestPlugin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPlugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("platforms", &self.platforms())
            .finish_non_exhaustive()
    }
}

/// A device. Dropping it destroys the kernel states kept for it (ABI 1.5), then the device.
pub struct TestDevice<'p> {
    plugin: &'p TestPlugin<'p>,
    platform_data: *mut c_void,
    destroy_device: unsafe extern "C" fn(*mut c_void, *mut abi::dpp_device_t),
    raw: Box<abi::dpp_device_t>,
    /// The states kernels' `create` made for this device (ABI 1.5), kept until
    /// [`TestDevice::release_kernel_states`] or the drop.
    states: Mutex<Vec<Arc<KeptState>>>,
}

/// A kernel state the fake host keeps for a device (ABI 1.5): what a kernel's `create` made for
/// one list of input dtypes and one set of attributes. Dropping it (the last holder: the
/// device's list, or a launch that used it) calls the kernel's `destroy`.
struct KeptState {
    kernel_data: *mut c_void,
    dtypes: Vec<DType>,
    attrs: TestAttrs,
    ptr: *mut c_void,
    destroy: Option<DestroyFn>,
}

// SAFETY: the ABI lets the host pass states to compute, and call `destroy`, on any thread.
unsafe impl Send for KeptState {}
// SAFETY: as above; the host never dereferences the state.
unsafe impl Sync for KeptState {}

impl KeptState {
    /// Made by the kernel with `kernel_data` for these dtypes and these attributes (equal as
    /// sets, in whatever order the test gave them, as the runtime compares them).
    fn is_for(&self, kernel_data: *mut c_void, dtypes: &[DType], attrs: &TestAttrs) -> bool {
        let (a, b) = (&self.attrs.values, &attrs.values);
        self.kernel_data == kernel_data
            && self.dtypes == dtypes
            && a.len() == b.len()
            && a.iter().all(|x| b.contains(x))
            && b.iter().all(|x| a.contains(x))
    }
}

impl Drop for KeptState {
    fn drop(&mut self) {
        if let Some(destroy) = self.destroy {
            // SAFETY: the kernel's destroy with its kernel_data (valid until the plugin shuts
            // down, after its devices) and a state its create made, once (dropped once).
            unsafe { destroy(self.kernel_data, self.ptr) };
        }
    }
}

// SAFETY: the ABI lets every executor function be called from any thread, concurrently.
unsafe impl Send for TestDevice<'_> {}
// SAFETY: as above.
unsafe impl Sync for TestDevice<'_> {}

/// Calls executor function `$f` of `$dev` with the device's data first.
macro_rules! se_call {
    ($dev:expr, $f:ident $(, $arg:expr)*) => {{
        let dev = $dev;
        match dev.executor().$f {
            None => Err(Error::unimplemented(concat!("dpp_stream_executor_t.", stringify!($f), " is NULL"))),
            Some(f) => {
                dev.host().clear_error();
                // SAFETY: the plugin's function with its device data and arguments that are
                // valid for the call (built by the safe wrappers below).
                let status = unsafe { f(dev.raw.device_data $(, $arg)*) };
                dev.host().check(stringify!($f), status)
            }
        }
    }};
}

/// Calls a `void` executor function.
macro_rules! se_call_void {
    ($dev:expr, $f:ident $(, $arg:expr)*) => {{
        let dev = $dev;
        if let Some(f) = dev.executor().$f {
            // SAFETY: as in se_call.
            unsafe { f(dev.raw.device_data $(, $arg)*) };
        }
    }};
}

impl<'p> TestDevice<'p> {
    fn host(&self) -> &'p TestHost {
        self.plugin.host
    }

    /// The platform that created this device.
    fn platform(&self) -> Result<&'p RegisteredPlatform> {
        self.plugin
            .platforms
            .iter()
            .find(|p| p.platform_data == self.platform_data)
            .ok_or_else(|| Error::internal("the device's platform is gone"))
    }

    /// The raw `device_data` (what kernel contexts carry).
    pub fn device_data(&self) -> *mut c_void {
        self.raw.device_data
    }

    fn validate(&self) -> Result<()> {
        if self.raw.se.is_null() {
            return Err(Error::invalid_argument("dpp_device_t.se is NULL"));
        }
        let se = self.executor();
        if se.struct_size < abi::DPP_STREAM_EXECUTOR_STRUCT_SIZE {
            return Err(Error::invalid_argument(format!(
                "dpp_stream_executor_t.struct_size is {}",
                se.struct_size
            )));
        }
        let required = [
            ("allocate", se.allocate.is_some()),
            ("deallocate", se.deallocate.is_some()),
            ("memcpy_htod", se.memcpy_htod.is_some()),
            ("memcpy_dtoh", se.memcpy_dtoh.is_some()),
            ("memcpy_dtod", se.memcpy_dtod.is_some()),
            ("memset", se.memset.is_some()),
            ("create_stream", se.create_stream.is_some()),
            ("destroy_stream", se.destroy_stream.is_some()),
            ("synchronize_stream", se.synchronize_stream.is_some()),
            ("stream_wait_stream", se.stream_wait_stream.is_some()),
            ("memcpy_htod_async", se.memcpy_htod_async.is_some()),
            ("memcpy_dtoh_async", se.memcpy_dtoh_async.is_some()),
            ("memcpy_dtod_async", se.memcpy_dtod_async.is_some()),
            ("memset_async", se.memset_async.is_some()),
            ("host_callback", se.host_callback.is_some()),
            ("create_event", se.create_event.is_some()),
            ("destroy_event", se.destroy_event.is_some()),
            ("record_event", se.record_event.is_some()),
            ("event_status", se.event_status.is_some()),
            ("stream_wait_event", se.stream_wait_event.is_some()),
            ("event_synchronize", se.event_synchronize.is_some()),
            ("synchronize_all", se.synchronize_all.is_some()),
            (
                "host_deallocate (with host_allocate)",
                se.host_allocate.is_none() || se.host_deallocate.is_some(),
            ),
            (
                "unified_deallocate (with unified_allocate)",
                se.unified_allocate.is_none() || se.unified_deallocate.is_some(),
            ),
        ];
        let missing: Vec<&str> = required
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| *n)
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Error::invalid_argument(format!(
                "dpp_stream_executor_t: required functions are NULL: {}",
                missing.join(", ")
            )))
        }
    }

    /// The device's function table (to check which optional entries are NULL).
    pub fn executor(&self) -> &abi::dpp_stream_executor_t {
        // SAFETY: checked non-NULL at creation; valid until destroy_device (in our Drop).
        unsafe { &*self.raw.se }
    }

    /// The ordinal.
    pub fn ordinal(&self) -> i32 {
        self.raw.ordinal
    }

    /// The description the plugin filled in.
    pub fn info(&self) -> DeviceInfo {
        // SAFETY: strings the plugin keeps valid until destroy_device (or NULL).
        let (hardware_name, vendor, pci_bus_id) = unsafe {
            (
                string(self.raw.hardware_name),
                string(self.raw.vendor),
                string(self.raw.pci_bus_id),
            )
        };
        DeviceInfo {
            hardware_name,
            vendor,
            pci_bus_id,
            total_memory: self.raw.total_memory,
            numa_node: (self.raw.numa_node >= 0).then_some(self.raw.numa_node),
            compute_units: self.raw.compute_units,
        }
    }

    /// `allocate`.
    pub fn allocate(&self, size: u64) -> Result<DeviceAddr> {
        let mut addr: abi::dpp_addr_t = 0;
        se_call!(self, allocate, size, &mut addr)?;
        Ok(DeviceAddr(addr))
    }

    /// `deallocate`.
    pub fn deallocate(&self, addr: DeviceAddr, size: u64) {
        se_call_void!(self, deallocate, addr.get(), size);
    }

    /// `host_allocate`.
    pub fn host_allocate(&self, size: u64) -> Result<NonNull<u8>> {
        let mut p: *mut c_void = ptr::null_mut();
        se_call!(self, host_allocate, size, &mut p)?;
        NonNull::new(p.cast()).ok_or_else(|| Error::internal("host_allocate returned NULL"))
    }

    /// `host_deallocate`.
    pub fn host_deallocate(&self, ptr: NonNull<u8>, size: u64) {
        se_call_void!(self, host_deallocate, ptr.as_ptr().cast(), size);
    }

    /// `memory_usage`.
    pub fn memory_usage(&self) -> Result<MemoryUsage> {
        let (mut free, mut total) = (0u64, 0u64);
        se_call!(self, memory_usage, &mut free, &mut total)?;
        Ok(MemoryUsage { free, total })
    }

    /// `allocator_stats`.
    pub fn allocator_stats(&self) -> Result<AllocatorStats> {
        let mut s = abi::dpp_allocator_stats_t {
            struct_size: std::mem::size_of::<abi::dpp_allocator_stats_t>(),
            ext: ptr::null_mut(),
            num_allocs: 0,
            bytes_in_use: 0,
            peak_bytes_in_use: 0,
            largest_alloc_size: 0,
            bytes_limit: 0,
            bytes_reserved: 0,
            largest_free_block: 0,
        };
        se_call!(self, allocator_stats, &mut s)?;
        Ok(AllocatorStats {
            num_allocs: s.num_allocs,
            bytes_in_use: s.bytes_in_use,
            peak_bytes_in_use: s.peak_bytes_in_use,
            largest_alloc_size: s.largest_alloc_size,
            bytes_limit: s.bytes_limit,
            bytes_reserved: s.bytes_reserved,
            largest_free_block: s.largest_free_block,
        })
    }

    /// `memcpy_htod`.
    pub fn memcpy_htod(&self, dst: DeviceAddr, src: &[u8]) -> Result<()> {
        se_call!(
            self,
            memcpy_htod,
            dst.get(),
            src.as_ptr().cast(),
            src.len() as u64
        )
    }

    /// `memcpy_dtoh`.
    pub fn memcpy_dtoh(&self, dst: &mut [u8], src: DeviceAddr) -> Result<()> {
        se_call!(
            self,
            memcpy_dtoh,
            dst.as_mut_ptr().cast(),
            src.get(),
            dst.len() as u64
        )
    }

    /// `memcpy_dtod`.
    pub fn memcpy_dtod(&self, dst: DeviceAddr, src: DeviceAddr, size: u64) -> Result<()> {
        se_call!(self, memcpy_dtod, dst.get(), src.get(), size)
    }

    /// `memset`.
    pub fn memset(&self, dst: DeviceAddr, value: u8, size: u64) -> Result<()> {
        se_call!(self, memset, dst.get(), value, size)
    }

    /// `create_stream`.
    pub fn create_stream(&self) -> Result<TestStream<'_>> {
        let mut handle: *mut c_void = ptr::null_mut();
        se_call!(self, create_stream, &mut handle)?;
        Ok(TestStream {
            device: self,
            handle,
            state: Mutex::new(StreamBuffers::default()),
        })
    }

    /// `create_event`.
    pub fn create_event(&self) -> Result<TestEvent<'_>> {
        let mut handle: *mut c_void = ptr::null_mut();
        se_call!(self, create_event, &mut handle)?;
        Ok(TestEvent {
            device: self,
            handle,
        })
    }

    /// `synchronize_all`.
    pub fn synchronize_all(&self) -> Result<()> {
        se_call!(self, synchronize_all)
    }

    /// How many kernel states (ABI 1.5) the host keeps for this device: one per kernel, list
    /// of input dtypes and set of attributes that ran on it since the last
    /// [`TestDevice::release_kernel_states`].
    pub fn kernel_states(&self) -> usize {
        self.states.lock().len()
    }

    /// Lets go of the kernel states kept for this device, as the runtime does when it lets a
    /// state go (its least recently used, beyond its bound): waits for the device's work
    /// (`synchronize_all`), then calls each kernel's `destroy` (a state a launch running now
    /// uses is destroyed when that launch returns). The next launch of each combination calls
    /// `create` again. The states left are destroyed with the device.
    pub fn release_kernel_states(&self) -> Result<()> {
        let r = self.synchronize_all();
        drop(std::mem::take(&mut *self.states.lock()));
        r
    }
}

impl std::fmt::Debug for TestDevice<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDevice")
            .field("ordinal", &self.ordinal())
            .field("device_data", &self.raw.device_data)
            .finish_non_exhaustive()
    }
}

impl Drop for TestDevice<'_> {
    fn drop(&mut self) {
        // The kernels' states first, as the runtime does: the device's streams borrow it, so
        // they are gone and their work is done.
        drop(std::mem::take(self.states.get_mut()));
        // SAFETY: the plugin's function, once, with the struct it filled; the device's
        // streams and events borrow it, so they are gone.
        unsafe { (self.destroy_device)(self.platform_data, &mut *self.raw) };
    }
}

/// A host buffer handed to a stream: heap memory owned through a raw pointer (no `Box`
/// while the plugin may write it).
struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

impl RawBuf {
    fn new(data: &[u8]) -> RawBuf {
        let b: Box<[u8]> = data.into();
        let len = b.len();
        RawBuf {
            ptr: Box::into_raw(b).cast::<u8>(),
            len,
        }
    }

    fn into_vec(self) -> Vec<u8> {
        let s = std::mem::ManuallyDrop::new(self);
        // SAFETY: from Box::into_raw in `new`, released once (ManuallyDrop skips Drop).
        unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(s.ptr, s.len)) }.into_vec()
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        // SAFETY: from Box::into_raw in `new`, released once.
        drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}

/// A pending device → host copy of a [`TestStream`]; its bytes are available after the
/// stream is synchronized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadTicket(u64);

#[derive(Default)]
struct StreamBuffers {
    next_ticket: u64,
    /// Buffers the stream may still read or write.
    in_flight: Vec<RawBuf>,
    reads: Vec<(ReadTicket, RawBuf)>,
    done: HashMap<ReadTicket, Vec<u8>>,
    /// The kernels' temporary device memory (`allocate_temp`): `(address, size)` to
    /// `deallocate` once the stream has reached the work that uses it.
    temps: Vec<(DeviceAddr, u64)>,
}

/// A stream. Host memory of its copies, and the device memory its kernels took with
/// `allocate_temp`, is owned here until [`TestStream::synchronize`] (or the drop, which
/// destroys the stream first).
pub struct TestStream<'d> {
    device: &'d TestDevice<'d>,
    handle: *mut c_void,
    state: Mutex<StreamBuffers>,
}

// SAFETY: executor functions may be called from any thread; the buffers are behind a lock.
unsafe impl Send for TestStream<'_> {}
// SAFETY: as above.
unsafe impl Sync for TestStream<'_> {}

type BoxedCallback = Box<dyn FnOnce() + Send>;

unsafe extern "C" fn run_callback(arg: *mut c_void) {
    // SAFETY: `arg` is the Box<BoxedCallback> of `host_callback`, called at most once.
    let f = unsafe { Box::from_raw(arg.cast::<BoxedCallback>()) };
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        let _ = panic_text(payload);
    }
}

impl<'d> TestStream<'d> {
    /// The raw handle.
    pub fn handle(&self) -> *mut c_void {
        self.handle
    }

    /// `memcpy_htod_async` of a copy of `data`.
    pub fn memcpy_htod_async(&self, dst: DeviceAddr, data: &[u8]) -> Result<()> {
        let buf = RawBuf::new(data);
        se_call!(
            self.device,
            memcpy_htod_async,
            self.handle,
            dst.get(),
            buf.ptr.cast_const().cast(),
            buf.len as u64
        )?;
        self.state.lock().in_flight.push(buf);
        Ok(())
    }

    /// `memcpy_dtoh_async` of `len` bytes; [`TestStream::take_read`] gives them after
    /// [`TestStream::synchronize`].
    pub fn memcpy_dtoh_async(&self, src: DeviceAddr, len: usize) -> Result<ReadTicket> {
        let buf = RawBuf::new(&vec![0u8; len]);
        se_call!(
            self.device,
            memcpy_dtoh_async,
            self.handle,
            buf.ptr.cast(),
            src.get(),
            len as u64
        )?;
        let mut st = self.state.lock();
        let ticket = ReadTicket(st.next_ticket);
        st.next_ticket += 1;
        st.reads.push((ticket, buf));
        Ok(ticket)
    }

    /// The bytes of a finished device → host copy (once); `None` before this stream's
    /// [`synchronize`](Self::synchronize) (an event's synchronize does not hand them over:
    /// the test stream owns the buffer until its own synchronize), and after they were taken.
    pub fn take_read(&self, ticket: ReadTicket) -> Option<Vec<u8>> {
        self.state.lock().done.remove(&ticket)
    }

    /// `memcpy_dtod_async`.
    pub fn memcpy_dtod_async(&self, dst: DeviceAddr, src: DeviceAddr, size: u64) -> Result<()> {
        se_call!(
            self.device,
            memcpy_dtod_async,
            self.handle,
            dst.get(),
            src.get(),
            size
        )
    }

    /// `memset_async`.
    pub fn memset_async(&self, dst: DeviceAddr, value: u8, size: u64) -> Result<()> {
        se_call!(
            self.device,
            memset_async,
            self.handle,
            dst.get(),
            value,
            size
        )
    }

    /// `host_callback` with `f` (never run if the call fails).
    pub fn host_callback(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let arg = Box::into_raw(Box::new(Box::new(f) as BoxedCallback));
        let r = se_call!(
            self.device,
            host_callback,
            self.handle,
            Some(run_callback),
            arg.cast()
        );
        if r.is_err() {
            // SAFETY: refused, so the plugin will not call it: ours to free.
            drop(unsafe { Box::from_raw(arg) });
        }
        r
    }

    /// Runs the kernel the runtime would pick for `op` on this stream's device, with this
    /// stream as the device's default stream: the one registered for `op` and the device's
    /// type, bound to its platform or `ANY`, accepting the first input's dtype (the first
    /// output's when there are no inputs), with the highest priority (a platform-bound one
    /// before an `ANY` one). `NotFound` when there is none. The tensors' memory must stay
    /// alive until the stream is synchronized (the test owns it); the kernel's temporary
    /// memory (`allocate_temp`) is freed when the stream is next synchronized (or destroyed),
    /// whether the kernel succeeded or not. `attrs` are all the kernel sees: unlike the
    /// runtime, this host fills in no attribute defaults (see [`TestAttrs`]).
    pub fn run_kernel(
        &self,
        op: &str,
        inputs: &[KernelTensor],
        outputs: &[KernelTensor],
        attrs: &TestAttrs,
    ) -> Result<()> {
        let platform = self.device.platform()?;
        let dtype = inputs.first().or(outputs.first()).map(|t| t.dtype);
        let kernel = self
            .device
            .plugin
            .kernels
            .iter()
            .filter(|k| {
                let d = &k.desc;
                d.op == op
                    && d.device_type == platform.desc.device_type
                    && (d.platform == platform.desc.name || d.platform == "ANY")
                    && (d.dtypes.is_empty() || dtype.is_some_and(|t| d.dtypes.contains(&t)))
            })
            .max_by_key(|k| (k.desc.priority, k.desc.platform != "ANY"))
            .ok_or_else(|| {
                Error::not_found(format!(
                    "no kernel for {op} ({}) on platform {} (type {})",
                    dtype.map_or_else(|| "no tensors".to_owned(), |d| d.to_string()),
                    platform.desc.name,
                    platform.desc.device_type
                ))
            })?;
        self.compute_with(kernel, op, inputs, outputs, attrs)
    }

    /// The state of `kernel` for these inputs' dtypes and these attributes (ABI 1.5): the one
    /// the device keeps, or a new one from the kernel's `create`, kept from now on. `None`
    /// for a kernel without `create` (or a host older than 1.5, which never read it).
    fn state_for(
        &self,
        kernel: &RegisteredKernel,
        op: &str,
        inputs: &[KernelTensor],
        attrs: &TestAttrs,
    ) -> Result<Option<Arc<KeptState>>> {
        let Some(create) = kernel.create else {
            return Ok(None);
        };
        let dev = self.device;
        let dtypes: Vec<DType> = inputs.iter().map(|t| t.dtype).collect();
        let kept = || {
            dev.states
                .lock()
                .iter()
                .find(|s| s.is_for(kernel.kernel_data, &dtypes, attrs))
                .cloned()
        };
        if let Some(s) = kept() {
            return Ok(Some(s));
        }
        let codes: Vec<i32> = dtypes.iter().map(|d| d.code()).collect();
        let c_op = CString::new(op.replace('\0', "")).unwrap_or_default();
        // What the attr_* functions read; not a launch (never listed), so allocate_temp
        // refuses it.
        let record = Launch {
            attrs,
            device: dev,
            temps: Mutex::new(Vec::new()),
        };
        let context = abi::dpp_kernel_create_context_t {
            struct_size: std::mem::size_of::<abi::dpp_kernel_create_context_t>(),
            ext: ptr::null_mut(),
            device: dev.raw.device_data,
            op: c_op.as_ptr(),
            num_inputs: codes.len(),
            input_dtypes: if codes.is_empty() {
                ptr::null()
            } else {
                codes.as_ptr()
            },
            attrs: ptr::from_ref(&record).cast(),
            kernel_data: kernel.kernel_data,
        };
        let mut out: *mut c_void = ptr::null_mut();
        dev.host().clear_error();
        // SAFETY: the plugin's create with its own kernel_data, a context (the dtypes, the op's
        // name, the attributes) valid for the call and a writable out-pointer; no lock held.
        let status = unsafe { create(&context, &mut out) };
        // As the runtime says it: the op run fails with the kernel's create named.
        dev.host()
            .check("create", status)
            .map_err(|e| Error::new(e.code(), format!("kernel {op}: create: {}", e.message())))?;
        let made = Arc::new(KeptState {
            kernel_data: kernel.kernel_data,
            dtypes: dtypes.clone(),
            attrs: attrs.clone(),
            ptr: out,
            destroy: kernel.destroy,
        });
        // Another thread may have made one meanwhile: the first kept wins, the other is
        // destroyed (outside the lock), unused.
        if let Some(s) = kept() {
            drop(made);
            return Ok(Some(s));
        }
        dev.states.lock().push(Arc::clone(&made));
        Ok(Some(made))
    }

    fn compute_with(
        &self,
        kernel: &RegisteredKernel,
        op: &str,
        inputs: &[KernelTensor],
        outputs: &[KernelTensor],
        attrs: &TestAttrs,
    ) -> Result<()> {
        // Held until compute returned (the device keeps it too).
        let state = self.state_for(kernel, op, inputs, attrs)?;
        let ins: Vec<abi::dpp_tensor_t> = inputs.iter().map(KernelTensor::raw).collect();
        let outs: Vec<abi::dpp_tensor_t> = outputs.iter().map(KernelTensor::raw).collect();
        let launch = Launch {
            attrs,
            device: self.device,
            temps: Mutex::new(Vec::new()),
        };
        let key = ptr::from_ref(&launch) as usize;
        let ctx = abi::dpp_kernel_context_t {
            struct_size: std::mem::size_of::<abi::dpp_kernel_context_t>(),
            ext: ptr::null_mut(),
            device: self.device.raw.device_data,
            stream: self.handle,
            num_inputs: ins.len(),
            inputs: ins.as_ptr(),
            num_outputs: outs.len(),
            outputs: outs.as_ptr(),
            attrs: ptr::from_ref(&launch).cast(),
            kernel_data: kernel.kernel_data,
            state: state.as_ref().map_or(ptr::null_mut(), |s| s.ptr),
        };
        // A host older than 1.5 passes the 80 bytes of ABI 1.1, without `state`: exactly
        // that many, so that a plugin reading further reads past the host's struct.
        const WORDS_1_1: usize = abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1 / 8;
        let mut short = [0u64; WORDS_1_1];
        let context: *const abi::dpp_kernel_context_t = if self.device.host().abi_minor() < 5 {
            let old = abi::dpp_kernel_context_t {
                struct_size: abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1,
                ..ctx
            };
            // SAFETY: the first 80 bytes of a larger struct into 80 bytes of 8-byte aligned
            // storage (the struct's alignment).
            unsafe {
                ptr::copy_nonoverlapping(
                    ptr::from_ref(&old).cast::<u8>(),
                    short.as_mut_ptr().cast::<u8>(),
                    abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1,
                )
            };
            short.as_ptr().cast()
        } else {
            &ctx
        };
        self.device.host().clear_error();
        LAUNCHES.lock().push(key);
        // SAFETY: the plugin's compute with its own kernel_data and a context (arrays, shapes,
        // attributes, the launch, the state) valid for the call. (It cannot unwind:
        // `extern "C"`.)
        let status = unsafe { (kernel.compute)(context) };
        {
            let mut launches = LAUNCHES.lock();
            if let Some(i) = launches.iter().position(|&k| k == key) {
                launches.swap_remove(i);
            }
        }
        // Work the kernel enqueued may use them, even when it then failed.
        let temps = launch.temps.into_inner();
        self.state.lock().temps.extend(temps);
        drop(state);
        // As the runtime does: the kernel named in front of the plugin's message.
        self.device
            .host()
            .check(&format!("kernel {op}"), status)
            .map_err(|e| Error::new(e.code(), format!("kernel {op}: {}", e.message())))
    }

    /// `stream_wait_stream(self, other)`.
    pub fn wait_stream(&self, other: &TestStream<'_>) -> Result<()> {
        se_call!(self.device, stream_wait_stream, self.handle, other.handle)
    }

    /// `record_event(self, event)`.
    pub fn record(&self, event: &TestEvent<'_>) -> Result<()> {
        se_call!(self.device, record_event, self.handle, event.handle)
    }

    /// `stream_wait_event(self, event)`.
    pub fn wait_event(&self, event: &TestEvent<'_>) -> Result<()> {
        se_call!(self.device, stream_wait_event, self.handle, event.handle)
    }

    /// `synchronize_stream`; afterwards the buffers of the work so far are released, the
    /// kernels' temporary memory is deallocated and the reads are available. (Holds the
    /// stream's buffer lock meanwhile: a host callback of this stream must not call into the
    /// same `TestStream`.)
    pub fn synchronize(&self) -> Result<()> {
        let mut st = self.state.lock();
        let r = se_call!(self.device, synchronize_stream, self.handle);
        // Done either way: synchronize_stream returns once the stream's work has finished.
        st.in_flight.clear();
        for (ticket, buf) in std::mem::take(&mut st.reads) {
            st.done.insert(ticket, buf.into_vec());
        }
        for (addr, size) in std::mem::take(&mut st.temps) {
            self.device.deallocate(addr, size);
        }
        r
    }
}

impl std::fmt::Debug for TestStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestStream")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl Drop for TestStream<'_> {
    fn drop(&mut self) {
        // destroy_stream waits for the work; the buffers are freed after it (field drop), and
        // so is the kernels' temporary memory.
        se_call_void!(self.device, destroy_stream, self.handle);
        for (addr, size) in std::mem::take(&mut self.state.get_mut().temps) {
            self.device.deallocate(addr, size);
        }
    }
}

/// An event. Dropping it destroys it.
pub struct TestEvent<'d> {
    device: &'d TestDevice<'d>,
    handle: *mut c_void,
}

// SAFETY: executor functions may be called from any thread.
unsafe impl Send for TestEvent<'_> {}
// SAFETY: as above.
unsafe impl Sync for TestEvent<'_> {}

impl TestEvent<'_> {
    /// The raw handle.
    pub fn handle(&self) -> *mut c_void {
        self.handle
    }

    /// `event_status`.
    pub fn status(&self) -> Result<EventStatus> {
        let mut s: i32 = -1;
        se_call!(self.device, event_status, self.handle, &mut s)?;
        match s {
            abi::DPP_EVENT_PENDING => Ok(EventStatus::Pending),
            abi::DPP_EVENT_COMPLETE => Ok(EventStatus::Complete),
            abi::DPP_EVENT_ERROR => Ok(EventStatus::Error),
            other => Err(Error::internal(format!("event_status wrote {other}"))),
        }
    }

    /// `event_synchronize`.
    pub fn synchronize(&self) -> Result<()> {
        se_call!(self.device, event_synchronize, self.handle)
    }

    /// `event_elapsed_ns(self, end)`: the device's nanoseconds from this event to `end`
    /// (`Unimplemented` when the table's entry is NULL).
    pub fn elapsed_ns(&self, end: &TestEvent<'_>) -> Result<i64> {
        let mut ns: i64 = 0;
        se_call!(
            self.device,
            event_elapsed_ns,
            self.handle,
            end.handle,
            &mut ns
        )?;
        Ok(ns)
    }
}

impl std::fmt::Debug for TestEvent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEvent")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl Drop for TestEvent<'_> {
    fn drop(&mut self) {
        se_call_void!(self.device, destroy_event, self.handle);
    }
}

/// Calls the table with handles of the wrong kind and with NULLs (needs raw pointers, hence
/// here).
#[cfg(test)]
mod abuse_tests {
    use super::*;
    use crate::kernel::DType;
    use crate::tests::{devplug_plugin_entry as test_entry, OP_NS, TEST_PLATFORM};

    #[test]
    fn bad_handles_are_errors_not_crashes() {
        let host = TestHost::new();
        let plugin = host.load(test_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let other = plugin.create_device(TEST_PLATFORM, 1).expect("device 1");
        let stream = dev.create_stream().expect("stream");
        let event = dev.create_event().expect("event");
        let foreign = other.create_stream().expect("stream of device 1");
        let se = dev.executor();
        let data = dev.raw.device_data;
        let sync = se.synchronize_stream.expect("required");
        let status_fn = se.event_status.expect("required");

        // SAFETY (all calls below): the SDK's trampolines with live handles of this plugin,
        // of the wrong kind or device, or NULL: exactly what they must detect.
        let st = unsafe { sync(data, event.handle()) };
        assert_eq!(st, abi::DPP_INVALID_ARGUMENT);
        assert!(
            host.last_error()
                .unwrap_or_default()
                .contains("not a live stream"),
            "{:?}",
            host.last_error()
        );

        // SAFETY: as above: a trampoline with a bad argument it must detect.
        let st = unsafe { sync(data, ptr::null_mut()) };
        assert_eq!(st, abi::DPP_INVALID_ARGUMENT);
        assert!(host.last_error().unwrap_or_default().contains("NULL"));

        // SAFETY: as above: a trampoline with a bad argument it must detect.
        let st = unsafe { sync(data, foreign.handle()) };
        assert_eq!(st, abi::DPP_INVALID_ARGUMENT);
        assert!(host
            .last_error()
            .unwrap_or_default()
            .contains("another device"));

        let mut out = 0;
        // SAFETY: as above: a trampoline with a bad argument it must detect.
        let st = unsafe { status_fn(data, stream.handle(), &mut out) };
        assert_eq!(st, abi::DPP_INVALID_ARGUMENT);
        // SAFETY: as above: a trampoline with a bad argument it must detect.
        let st = unsafe { status_fn(data, event.handle(), ptr::null_mut()) };
        assert_eq!(st, abi::DPP_INVALID_ARGUMENT);

        // A NULL device: no host to tell, just the code.
        // SAFETY: as above: a trampoline with a bad argument it must detect.
        let st = unsafe { sync(ptr::null_mut(), stream.handle()) };
        assert_eq!(st, abi::DPP_INVALID_ARGUMENT);

        // NULL out-pointers and a zero size.
        let alloc = se.allocate.expect("required");
        assert_eq!(
            // SAFETY: as above: a trampoline with a bad argument it must detect.
            unsafe { alloc(data, 16, ptr::null_mut()) },
            abi::DPP_INVALID_ARGUMENT
        );
        let mut addr = 0;
        assert_eq!(
            // SAFETY: as above: a trampoline with a bad argument it must detect.
            unsafe { alloc(data, 0, &mut addr) },
            abi::DPP_INVALID_ARGUMENT
        );
        assert_eq!(addr, 0, "out-parameters are written only on success");

        // A NULL host pointer with a size.
        let htod = se.memcpy_htod.expect("required");
        let a = dev.allocate(16).expect("allocate");
        assert_eq!(
            // SAFETY: as above: a trampoline with a bad argument it must detect.
            unsafe { htod(data, a.get(), ptr::null(), 4) },
            abi::DPP_INVALID_ARGUMENT
        );
        // SAFETY: as above: a trampoline with a bad argument it must detect.
        assert_eq!(unsafe { htod(data, a.get(), ptr::null(), 0) }, abi::DPP_OK);
        dev.deallocate(a, 16);
    }

    #[test]
    fn bad_event_elapsed_arguments_are_errors_not_crashes() {
        let host = TestHost::new().with_option("timing", "1");
        let plugin = host.load(test_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let other = plugin.create_device(TEST_PLATFORM, 1).expect("device 1");
        let stream = dev.create_stream().expect("stream");
        let (start, end) = (
            dev.create_event().expect("start"),
            dev.create_event().expect("end"),
        );
        stream.record(&start).expect("record");
        stream.record(&end).expect("record");
        stream.synchronize().expect("sync");
        let foreign = other.create_event().expect("event of device 1");
        let elapsed = dev
            .executor()
            .event_elapsed_ns
            .expect("the device times events");
        let data = dev.raw.device_data;
        let mut out: i64 = -7;
        let call = |s: *mut c_void, e: *mut c_void, out: *mut i64| {
            host.clear_error();
            // SAFETY: the SDK's trampoline with live handles of this plugin, of the wrong kind
            // or device, or NULL, and an out-pointer that is valid or NULL: exactly what it
            // must detect.
            let status = unsafe { elapsed(data, s, e, out) };
            (status, host.last_error().unwrap_or_default())
        };
        let cases = [
            (
                call(start.handle(), end.handle(), ptr::null_mut()),
                "event_elapsed_ns: out_ns is NULL",
            ),
            (
                call(ptr::null_mut(), end.handle(), &mut out),
                "event_elapsed_ns (start): the event is NULL",
            ),
            (
                call(start.handle(), stream.handle(), &mut out),
                "event_elapsed_ns (end): the event handle is not a live event (destroyed, or \
                 another kind of handle)",
            ),
            (
                call(foreign.handle(), end.handle(), &mut out),
                "event_elapsed_ns (start): the event belongs to another device",
            ),
        ];
        for ((status, message), want) in cases {
            assert_eq!(status, abi::DPP_INVALID_ARGUMENT, "{want}");
            assert_eq!(message, want);
        }
        assert_eq!(out, -7, "out-parameters are written only on success");
        // SAFETY: the trampoline with a NULL device: no host to tell, just the code.
        let st = unsafe { elapsed(ptr::null_mut(), start.handle(), end.handle(), &mut out) };
        assert_eq!(st, abi::DPP_INVALID_ARGUMENT);
        let (status, _) = call(start.handle(), end.handle(), &mut out);
        assert_eq!(status, abi::DPP_OK);
        assert_eq!(out, OP_NS, "end was reached one operation after start");
    }

    #[test]
    fn ordinals_out_of_range_and_small_structs_are_refused() {
        let host = TestHost::new();
        let plugin = host.load(test_entry).expect("load");
        let err = plugin
            .create_device(TEST_PLATFORM, 99)
            .expect_err("out of range");
        assert_eq!(err.code(), Status::InvalidArgument);
        assert!(err.message().contains("ordinal 99"), "{err}");

        let reg = &plugin.platforms[0];
        let mut small = abi::dpp_device_t {
            struct_size: 8,
            ext: ptr::null_mut(),
            ordinal: 0,
            device_data: ptr::null_mut(),
            hardware_name: ptr::null(),
            vendor: ptr::null(),
            pci_bus_id: ptr::null(),
            total_memory: 0,
            numa_node: -1,
            compute_units: 0,
            se: ptr::null(),
        };
        // SAFETY: the plugin's create_device with a struct that says it is too small.
        let st = unsafe { (reg.create_device)(reg.platform_data, 0, &mut small) };
        assert_eq!(st, abi::DPP_INVALID_ARGUMENT);
        assert!(
            small.device_data.is_null() && small.se.is_null(),
            "nothing written on failure"
        );
        assert!(host
            .last_error()
            .unwrap_or_default()
            .contains("struct_size"));
    }

    /// A raw kernel context over `inputs` (for calling compute functions directly).
    fn context(
        device: *mut c_void,
        stream: *mut c_void,
        inputs: &[abi::dpp_tensor_t],
        kernel_data: *mut c_void,
    ) -> abi::dpp_kernel_context_t {
        abi::dpp_kernel_context_t {
            struct_size: abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE,
            ext: ptr::null_mut(),
            device,
            stream,
            num_inputs: inputs.len(),
            inputs: inputs.as_ptr(),
            num_outputs: 0,
            outputs: ptr::null(),
            attrs: ptr::null(),
            kernel_data,
            state: ptr::null_mut(),
        }
    }

    #[test]
    fn bad_kernel_contexts_are_errors_not_crashes() {
        let host = TestHost::new().with_option("kernels", "1");
        let plugin = host.load(test_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let other = plugin.create_device(TEST_PLATFORM, 1).expect("device 1");
        let stream = dev.create_stream().expect("stream");
        let foreign = other.create_stream().expect("stream of device 1");
        let add = plugin
            .kernels
            .iter()
            .find(|k| k.desc.op == "Refuse")
            .expect("Refuse");
        let (compute, data) = (add.compute, add.kernel_data);
        let shape = [2i64, -3];
        let good = KernelTensor::new(DType::F32, &[2], DeviceAddr(0x1000)).raw();
        let run = |ctx: &abi::dpp_kernel_context_t| {
            host.clear_error();
            // SAFETY: the plugin's compute with a context whose pointers are valid for the
            // call (its contents are what it must detect).
            let status = unsafe { compute(ctx) };
            (status, host.last_error().unwrap_or_default())
        };

        // SAFETY: NULL is what it must detect.
        assert_eq!(unsafe { compute(ptr::null()) }, abi::DPP_INVALID_ARGUMENT);
        let mut ctx = context(dev.device_data(), stream.handle(), &[], data);
        ctx.struct_size = 16;
        assert_eq!(run(&ctx).0, abi::DPP_ABI_MISMATCH);
        let ctx = context(dev.device_data(), stream.handle(), &[], ptr::null_mut());
        assert_eq!(run(&ctx).0, abi::DPP_INVALID_ARGUMENT, "no kernel data");

        let ctx = context(dev.device_data(), stream.handle(), &[], data);
        let (status, message) = run(&ctx);
        assert_eq!(
            status,
            abi::DPP_UNIMPLEMENTED,
            "a good context reaches the kernel"
        );
        assert_eq!(message, "Refuse refuses on purpose on Test Chip");

        let ctx = context(dev.device_data(), foreign.handle(), &[], data);
        let (status, message) = run(&ctx);
        assert_eq!(status, abi::DPP_INVALID_ARGUMENT);
        assert!(message.contains("belongs to another device"), "{message}");

        let mut ctx = context(dev.device_data(), stream.handle(), &[], data);
        ctx.num_inputs = 2;
        ctx.inputs = ptr::null();
        let (status, message) = run(&ctx);
        assert_eq!(status, abi::DPP_INVALID_ARGUMENT);
        assert_eq!(message, "inputs: the array of 2 tensors is NULL");

        let cases: [(abi::dpp_tensor_t, &str); 4] = [
            (
                abi::dpp_tensor_t { rank: -1, ..good },
                "inputs: tensor 1: rank -1 is negative",
            ),
            (
                abi::dpp_tensor_t {
                    rank: 2,
                    shape: ptr::null(),
                    ..good
                },
                "inputs: tensor 1: rank 2 but the shape is NULL",
            ),
            (
                abi::dpp_tensor_t {
                    rank: 2,
                    shape: shape.as_ptr(),
                    ..good
                },
                "inputs: tensor 1: shape [2, -3] has a negative dimension -3",
            ),
            (
                abi::dpp_tensor_t {
                    struct_size: 8,
                    ..good
                },
                "inputs: tensor 1: dpp_tensor_t.struct_size is 8",
            ),
        ];
        for (bad, expected) in cases {
            let inputs = [
                KernelTensor::new(DType::F32, &[2], DeviceAddr(0x1000)).raw(),
                bad,
            ];
            let ctx = context(dev.device_data(), stream.handle(), &inputs, data);
            let (status, message) = run(&ctx);
            assert_eq!(status, abi::DPP_INVALID_ARGUMENT, "{expected}");
            assert_eq!(message, expected);
        }
    }

    #[test]
    fn an_abi_1_0_host_gets_no_kernels_but_loads_the_plugin() {
        let mut host = TestHost::new().with_option("kernels", "1");
        host.api.struct_size = abi::DPP_HOST_API_STRUCT_SIZE_1_0;
        let err = host.load(test_entry).expect_err("no register_kernel");
        assert_eq!(err.code(), Status::Unimplemented);
        assert_eq!(
            err.message(),
            format!(
                "cannot register kernel Add for TPU: the host has plugin ABI 1.{} (a \
                 64-byte dpp_host_api_t without register_kernel); kernels need ABI 1.1",
                abi::DPP_ABI_MINOR
            )
        );
        let mut host = TestHost::new().with_option("ops", "1");
        host.api.struct_size = abi::DPP_HOST_API_STRUCT_SIZE_1_1;
        let err = host.load(test_entry).expect_err("no register_op");
        assert_eq!(err.code(), Status::Unimplemented);
        assert_eq!(
            err.message(),
            "cannot register op sdk_test.Swish: the host's dpp_host_api_t is 112 bytes, \
             without register_op; ops need plugin ABI 1.2"
        );
        // Refused by the SDK, not the host: logged as a warning as it happened.
        assert!(
            host.logs()
                .iter()
                .any(|(level, m)| *level == abi::DPP_LOG_WARN
                    && m == "registration refused by the SDK, nothing was registered: cannot \
                         register op sdk_test.Swish: the host's dpp_host_api_t is 112 bytes, \
                         without register_op; ops need plugin ABI 1.2"),
            "{:?}",
            host.logs()
        );
        let mut host = TestHost::new();
        host.api.struct_size = abi::DPP_HOST_API_STRUCT_SIZE_1_0;
        let plugin = host
            .load(test_entry)
            .expect("a plugin without kernels loads");
        assert!(plugin.kernels().is_empty());
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        dev.allocate(8).expect("works");
    }

    /// The state trampolines of a kernel with a state (ABI 1.5) called directly: a state that
    /// is not the kernel's, a NULL or short create context, a NULL out-pointer or input list
    /// are refused; `destroy` ignores NULL, refuses (and logs) what is not a live state of the
    /// kernel, and frees a state once.
    #[test]
    fn bad_kernel_states_are_errors_not_crashes() {
        let tag = "kstate_abuse";
        let host = TestHost::new()
            .with_option("kernels", "state")
            .with_option("tag", tag);
        let plugin = host.load(test_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let stream = dev.create_stream().expect("stream");
        let scale = plugin
            .kernels
            .iter()
            .find(|k| k.desc.op == "Scale")
            .expect("Scale");
        let (compute, data) = (scale.compute, scale.kernel_data);
        let create = scale.create.expect("a 1.5 host reads create");
        let destroy = scale.destroy.expect("and destroy");
        let probe = crate::tests::probe(tag);

        // Not a state (of this kernel).
        let mut bogus = [0u64; 4];
        let mut ctx = context(dev.device_data(), stream.handle(), &[], data);
        ctx.state = bogus.as_mut_ptr().cast();
        host.clear_error();
        // SAFETY: the SDK's compute with a context valid for the call whose state is not one
        // its create made: what it must detect.
        assert_eq!(unsafe { compute(&ctx) }, abi::DPP_INVALID_ARGUMENT);
        assert_eq!(
            host.last_error().as_deref(),
            Some(
                "the context's state is not a live state of this kernel (destroyed, or made \
                 by another kernel's create)"
            )
        );

        let attrs = TestAttrs::new().with("factor", AttrValue::Float(2.0));
        let launch = Launch {
            attrs: &attrs,
            device: &dev,
            temps: Mutex::new(Vec::new()),
        };
        let dtypes = [DType::F32.code()];
        let mut cc = abi::dpp_kernel_create_context_t {
            struct_size: abi::DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE,
            ext: ptr::null_mut(),
            device: dev.device_data(),
            op: c"Scale".as_ptr(),
            num_inputs: 1,
            input_dtypes: dtypes.as_ptr(),
            attrs: ptr::from_ref(&launch).cast(),
            kernel_data: data,
        };
        let call = |cc: *const abi::dpp_kernel_create_context_t, out: *mut *mut c_void| {
            host.clear_error();
            // SAFETY: the SDK's create with a context and an out-pointer that are NULL or
            // valid for the call: what it must sort out.
            let status = unsafe { create(cc, out) };
            (status, host.last_error())
        };
        let mut out: *mut c_void = ptr::null_mut();
        assert_eq!(
            call(ptr::null(), &mut out),
            (abi::DPP_INVALID_ARGUMENT, None)
        );
        assert_eq!(
            call(&cc, ptr::null_mut()),
            (
                abi::DPP_INVALID_ARGUMENT,
                Some("out_state is NULL".to_owned())
            )
        );
        cc.struct_size = 16;
        assert_eq!(call(&cc, &mut out), (abi::DPP_ABI_MISMATCH, None));
        cc.struct_size = abi::DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE;
        cc.num_inputs = 2;
        cc.input_dtypes = ptr::null();
        assert_eq!(
            call(&cc, &mut out),
            (
                abi::DPP_INVALID_ARGUMENT,
                Some(
                    "the host's input_dtypes is NULL (or too long) with \
                     num_inputs 2"
                        .to_owned()
                )
            )
        );
        assert!(out.is_null(), "nothing written on failure");
        cc.num_inputs = 1;
        cc.input_dtypes = dtypes.as_ptr();
        assert_eq!(call(&cc, &mut out).0, abi::DPP_OK);
        assert!(!out.is_null());

        // The state reaches compute (which then finds no input).
        ctx.state = out;
        host.clear_error();
        // SAFETY: the SDK's compute with a context valid for the call and a state it made.
        assert_eq!(unsafe { compute(&ctx) }, abi::DPP_INVALID_ARGUMENT);
        assert_eq!(*probe.states_used.lock(), [1]);

        // SAFETY (the three calls): the SDK's destroy with this kernel's data and a NULL, a
        // bogus and a live state: it ignores, refuses and frees them.
        unsafe { destroy(data, ptr::null_mut()) };
        unsafe { destroy(data, bogus.as_mut_ptr().cast()) };
        assert!(host
            .logs()
            .iter()
            .any(|(level, m)| *level == abi::DPP_LOG_ERROR
                && m == "kernel Scale: destroy: the state is not a live state of this kernel \
                     (destroyed twice, or made by another kernel's create); not freed"));
        assert_eq!(
            probe.state_drops.load(std::sync::atomic::Ordering::SeqCst),
            0
        );
        // SAFETY: as above, the live state, once.
        unsafe { destroy(data, out) };
        assert_eq!(
            probe.state_drops.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
    }

    /// A table that ends before attr_string (1.2): reading a string attribute is
    /// Unimplemented, the other attributes read as before.
    #[test]
    fn a_string_attribute_without_attr_string_is_unimplemented() {
        let mut host = TestHost::new()
            .with_option("tag", "kattrs11")
            .with_option("kernels", "1");
        host.api.struct_size = abi::DPP_HOST_API_STRUCT_SIZE_1_2 - 8;
        let plugin = host.load(test_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let s = dev.create_stream().expect("stream");
        let attrs = TestAttrs::new()
            .with("i", AttrValue::Int(3))
            .with("s", AttrValue::Str("SAME".into()));
        s.run_kernel("Attrs", &[], &[], &attrs).expect("Attrs");
        let reads = crate::tests::probe("kattrs11").attr_reads.lock().clone();
        assert_eq!(reads[0], "i=Ok(3)");
        let line = reads.iter().find(|r| r.starts_with("s=")).expect("s read");
        assert!(
            line.contains("Unimplemented")
                && line.contains("kernel Attrs: the host has no attr_string function"),
            "{line}"
        );
    }

    /// The host's `allocate_temp` called directly: it refuses a NULL or foreign context, a
    /// launch that has ended, a size of 0 and a NULL out-pointer (writing nothing), says why
    /// on the thread, and records what it gives for the stream to free.
    #[test]
    fn allocate_temp_refuses_bad_arguments() {
        let host = TestHost::new();
        let plugin = host.load(test_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let stream = dev.create_stream().expect("stream");
        let f = host.api.allocate_temp.expect("a 1.4 table");
        let attrs = TestAttrs::new();
        let launch = Launch {
            attrs: &attrs,
            device: &dev,
            temps: Mutex::new(Vec::new()),
        };
        let mut ctx = context(dev.device_data(), stream.handle(), &[], ptr::null_mut());
        let call = |ctx: *const abi::dpp_kernel_context_t, size: u64, out: *mut u64| {
            host.clear_error();
            // SAFETY: the host's function with a context that is NULL or valid for the call
            // and an out-pointer that is NULL or writable: what it must sort out.
            let status = unsafe { f(ctx, size, out) };
            (status, host.last_error())
        };
        let mut out: u64 = 7;
        assert_eq!(
            call(ptr::null(), 8, &mut out),
            (abi::DPP_INVALID_ARGUMENT, None)
        );
        assert_eq!(
            call(&ctx, 8, &mut out).0,
            abi::DPP_INVALID_ARGUMENT,
            "NULL attrs"
        );
        // The launch, not yet (or no longer) running.
        ctx.attrs = ptr::from_ref(&launch).cast();
        assert_eq!(
            call(&ctx, 8, &mut out).0,
            abi::DPP_INVALID_ARGUMENT,
            "not running"
        );
        ctx.struct_size = 16;
        assert_eq!(
            call(&ctx, 8, &mut out).0,
            abi::DPP_INVALID_ARGUMENT,
            "short context"
        );
        ctx.struct_size = abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE;

        let key = ptr::from_ref(&launch) as usize;
        LAUNCHES.lock().push(key);
        let (status, message) = call(&ctx, 0, &mut out);
        let (status_null, message_null) = call(&ctx, 8, ptr::null_mut());
        let (huge, message_huge) = call(&ctx, 1 << 30, &mut out);
        assert_eq!(out, 7, "nothing written on failure");
        let (ok, _) = call(&ctx, 8, &mut out);
        // A copy of the context names the same launch.
        let copy = ctx;
        let mut out2: u64 = 0;
        let (ok2, _) = call(&copy, 300, &mut out2);
        LAUNCHES.lock().retain(|&k| k != key);

        assert_eq!(status, abi::DPP_INVALID_ARGUMENT);
        assert_eq!(message.as_deref(), Some("allocate_temp: size is 0"));
        assert_eq!(status_null, abi::DPP_INVALID_ARGUMENT);
        assert_eq!(
            message_null.as_deref(),
            Some("allocate_temp: out_addr is NULL")
        );
        assert_eq!(huge, abi::DPP_RESOURCE_EXHAUSTED);
        assert!(message_huge
            .unwrap_or_default()
            .starts_with("allocate_temp: 1073741824 bytes: out of device memory"));
        assert_eq!((ok, ok2), (abi::DPP_OK, abi::DPP_OK));
        assert!(out != 7 && out.is_multiple_of(256) && out2.is_multiple_of(256) && out != out2);
        let temps = launch.temps.into_inner();
        assert_eq!(temps, [(DeviceAddr(out), 8), (DeviceAddr(out2), 300)]);
        for (a, n) in temps {
            dev.deallocate(a, n);
        }
        assert_eq!(
            dev.memory_usage().expect("usage").free,
            dev.info().total_memory
        );
    }

    /// A full-size table whose allocate_temp is NULL: `Unimplemented`, as from an older host.
    #[test]
    fn a_null_allocate_temp_is_unimplemented() {
        let mut host = TestHost::new()
            .with_option("kernels", "temp")
            .with_option("tag", "ktemp_null");
        host.api.allocate_temp = None;
        let plugin = host.load(test_entry).expect("load");
        let dev = plugin.create_device(TEST_PLATFORM, 0).expect("device");
        let s = dev.create_stream().expect("stream");
        let t = KernelTensor::new(DType::U8, &[4], dev.allocate(4).expect("x"));
        let err = s
            .run_kernel(
                "TempCopy",
                std::slice::from_ref(&t),
                std::slice::from_ref(&t),
                &TestAttrs::new(),
            )
            .expect_err("no allocate_temp");
        assert_eq!(err.code(), Status::Unimplemented);
        assert_eq!(
            err.message(),
            format!(
                "kernel TempCopy: the host has no allocate_temp function (plugin ABI 1.{}, a \
                 136-byte dpp_host_api_t); temporary memory needs ABI 1.4",
                abi::DPP_ABI_MINOR
            )
        );
    }
}
