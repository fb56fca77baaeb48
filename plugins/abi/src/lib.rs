//! The devplug plugin ABI, version 1.5: every type that crosses between the host and a device
//! plugin. `include/devplug/plugin.h` is generated from this file by the pinned cbindgen and
//! committed (the `header` test fails when it is stale).
//!
//! Rules (see docs/plugin-guide.md and docs/plugin-abi-changelog.md):
//! - A plugin exports one symbol, [`DPP_ENTRY_SYMBOL`] (`devplug_plugin_entry`), of type
//!   [`dpp_entry_fn`]. It returns a static [`dpp_plugin_api_t`] saying which ABI version the
//!   plugin was built against; the host checks it (same major, plugin minor ≤ host minor)
//!   before it runs any other plugin code.
//! - Every struct starts with `struct_size` and a reserved `ext` pointer (NULL). Fields are
//!   only appended; readers check `struct_size` before reading a field; `DPP_*_STRUCT_SIZE`
//!   constants give the size of each struct in this header's version (`..._1_0` where a struct
//!   grew): check against the size of the version that introduced the fields you read, never
//!   against the newest size. Arrays of structs (`dpp_kernel_context_t::inputs`) are plain C
//!   arrays of this header's struct; a struct that is passed in an array never grows.
//! - Every function returns a [`dpp_status_t`]; on failure the plugin may first call
//!   `host->set_error(host->context, message)` to say why (per thread).
//! - No Rust panic or C++ exception may cross the boundary.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

/// The ABI major version this header describes. Plugins of another major are refused.
pub const DPP_ABI_MAJOR: u32 = 1;
/// The ABI minor version this header describes. A host refuses plugins with a newer minor.
/// 1.1 appended kernel registration, 1.2 op registration, 1.3 the f16 and bf16 dtypes, 1.4
/// timed events and temporary memory for kernels, 1.5 kernel state (`create`/`destroy`; see
/// docs/plugin-abi-changelog.md).
pub const DPP_ABI_MINOR: u32 = 5;

/// A status code. The values are the host API's `DP_*` codes.
pub type dpp_status_t = i32;
/// Success.
pub const DPP_OK: dpp_status_t = 0;
/// An argument is invalid.
pub const DPP_INVALID_ARGUMENT: dpp_status_t = 3;
/// A named thing does not exist.
pub const DPP_NOT_FOUND: dpp_status_t = 5;
/// A thing with that name exists already.
pub const DPP_ALREADY_EXISTS: dpp_status_t = 6;
/// Out of memory or another resource.
pub const DPP_RESOURCE_EXHAUSTED: dpp_status_t = 8;
/// The state does not allow the operation.
pub const DPP_FAILED_PRECONDITION: dpp_status_t = 9;
/// Not implemented.
pub const DPP_UNIMPLEMENTED: dpp_status_t = 12;
/// A bug.
pub const DPP_INTERNAL: dpp_status_t = 13;
/// The device is unavailable.
pub const DPP_UNAVAILABLE: dpp_status_t = 14;
/// Incompatible ABI versions.
pub const DPP_ABI_MISMATCH: dpp_status_t = 100;

/// Log levels of `dpp_host_api_t::log`.
pub const DPP_LOG_ERROR: i32 = 1;
/// Warning.
pub const DPP_LOG_WARN: i32 = 2;
/// Information.
pub const DPP_LOG_INFO: i32 = 3;
/// Debugging detail.
pub const DPP_LOG_DEBUG: i32 = 4;

/// Element types (`dpp_tensor_t::dtype`, kernel dtype constraints); the host API's
/// `DP_DTYPE_*` values.
pub const DPP_DTYPE_F32: i32 = 1;
/// 64-bit float.
pub const DPP_DTYPE_F64: i32 = 2;
/// 32-bit signed integer.
pub const DPP_DTYPE_I32: i32 = 3;
/// 64-bit signed integer.
pub const DPP_DTYPE_I64: i32 = 4;
/// 8-bit unsigned integer.
pub const DPP_DTYPE_U8: i32 = 5;
/// Boolean, one byte holding 0 or 1.
pub const DPP_DTYPE_BOOL: i32 = 6;
/// (1.3) IEEE 754 half precision (binary16), two bytes.
pub const DPP_DTYPE_F16: i32 = 7;
/// (1.3) bfloat16 (the upper half of an f32), two bytes.
pub const DPP_DTYPE_BF16: i32 = 8;

/// Platform flag: device memory is host memory (the host may dereference device addresses).
pub const DPP_PLATFORM_HOST_VISIBLE: u32 = 1;
/// Platform flag: the host must not put its caching suballocator over `allocate`.
pub const DPP_PLATFORM_NO_SUBALLOCATOR: u32 = 2;

/// Event state reported by `event_status`: recorded, not yet reached.
pub const DPP_EVENT_PENDING: i32 = 0;
/// Reached, or never recorded.
pub const DPP_EVENT_COMPLETE: i32 = 1;
/// The stream failed before reaching it.
pub const DPP_EVENT_ERROR: i32 = 2;

/// An address in a device's memory. Offsets are meaningful: for an allocation at `a` of `n`
/// bytes, `a + k` (k < n) addresses its byte k. Opaque to the host unless the platform is
/// `DPP_PLATFORM_HOST_VISIBLE`. 0 is never a valid allocation.
pub type dpp_addr_t = u64;

/// The host's context, passed back to every host function. Opaque.
pub type dpp_host_context_t = *mut c_void;

/// A host function a stream must call exactly once, after all earlier work of the stream.
pub type dpp_host_fn = Option<unsafe extern "C" fn(arg: *mut c_void)>;

/// Functions the host offers the plugin. Filled by the host; valid from `init` until after
/// `shutdown` returns (the plugin may keep the pointer).
#[repr(C)]
pub struct dpp_host_api_t {
    /// The size the host filled: `DPP_HOST_API_STRUCT_SIZE_1_0` or more. A host of an older
    /// minor fills less than this header's `DPP_HOST_API_STRUCT_SIZE`: check that it covers a
    /// member added after 1.0 before using it, and never require the full size.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// The host's ABI version.
    pub abi_major: u32,
    /// The host's ABI minor version: functions added in later minors are absent (check
    /// `struct_size`) in older hosts.
    pub abi_minor: u32,
    /// Passed back as the first argument of every function below.
    pub context: dpp_host_context_t,
    /// Says why the call the plugin is about to fail failed (per thread; the last one wins).
    /// May be called from any thread, at any time.
    pub set_error:
        Option<unsafe extern "C" fn(context: dpp_host_context_t, message: *const c_char)>,
    /// Writes a log line (`DPP_LOG_*`). Any thread, any time.
    pub log: Option<
        unsafe extern "C" fn(context: dpp_host_context_t, level: i32, message: *const c_char),
    >,
    /// The value of load option `key` (NULL when not given). The string is valid during
    /// `init` only. Keys and values are free-form; the plugin documents its own.
    pub get_option: Option<
        unsafe extern "C" fn(context: dpp_host_context_t, key: *const c_char) -> *const c_char,
    >,
    /// Registers a platform. Only during `init`. The host copies the strings and keeps the
    /// `dpp_platform_t`'s function pointers and `platform_data` until shutdown.
    pub register_platform: Option<
        unsafe extern "C" fn(
            context: dpp_host_context_t,
            platform: *const dpp_platform_t,
        ) -> dpp_status_t,
    >,

    // ---- ABI 1.1 ----
    /// (1.1) Registers a kernel for an op. Only during `init`, after the platform it binds to
    /// was registered. The host copies everything but `kernel_data` and `compute`, which must
    /// stay valid until shutdown. The fields are checked here; whether the op exists and
    /// whether the kernel conflicts with one already registered (same op, device type,
    /// binding, overlapping dtypes and priority) is checked when the host commits the plugin's
    /// registrations after `init` returns: the load then fails (`DPP_NOT_FOUND` /
    /// `DPP_ALREADY_EXISTS`, naming both sources) and everything is rolled back.
    pub register_kernel: Option<
        unsafe extern "C" fn(
            context: dpp_host_context_t,
            kernel: *const dpp_kernel_t,
        ) -> dpp_status_t,
    >,
    /// (1.1) Reads an integer attribute of the op a kernel runs (`attrs` from the kernel
    /// context). `DPP_NOT_FOUND` when the op has no such attribute, `DPP_INVALID_ARGUMENT` when
    /// it has another type. Any thread, during `compute`.
    pub attr_int: Option<
        unsafe extern "C" fn(
            attrs: *const c_void,
            name: *const c_char,
            out: *mut i64,
        ) -> dpp_status_t,
    >,
    /// (1.1) Reads a float attribute (an integer attribute converts).
    pub attr_float: Option<
        unsafe extern "C" fn(
            attrs: *const c_void,
            name: *const c_char,
            out: *mut f64,
        ) -> dpp_status_t,
    >,
    /// (1.1) Reads a bool attribute as 0 or 1.
    pub attr_bool: Option<
        unsafe extern "C" fn(
            attrs: *const c_void,
            name: *const c_char,
            out: *mut i32,
        ) -> dpp_status_t,
    >,
    /// (1.1) Reads an integer-list attribute: `*out_data` points to `*out_len` values valid
    /// during `compute`.
    pub attr_ints: Option<
        unsafe extern "C" fn(
            attrs: *const c_void,
            name: *const c_char,
            out_data: *mut *const i64,
            out_len: *mut usize,
        ) -> dpp_status_t,
    >,
    /// (1.1) Reads a dtype attribute (`DPP_DTYPE_*`).
    pub attr_dtype: Option<
        unsafe extern "C" fn(
            attrs: *const c_void,
            name: *const c_char,
            out: *mut i32,
        ) -> dpp_status_t,
    >,
    /// (1.2) Registers an op (see `dpp_op_def_t`): only during `init`, before the kernels
    /// for it. The host copies the strings at once (`DPP_INVALID_ARGUMENT` for a NULL
    /// required field, `DPP_ALREADY_EXISTS` for a name this plugin registered before) and
    /// checks the text when it commits the plugin's registrations after `init`: a mistake in
    /// it, or a name the runtime already has, fails the load with a message naming the op,
    /// the field and, in the body, the statement.
    pub register_op: Option<
        unsafe extern "C" fn(context: dpp_host_context_t, op: *const dpp_op_def_t) -> dpp_status_t,
    >,
    /// (1.2) Reads a string attribute: `*out_data` points to `*out_len` bytes of UTF-8,
    /// valid during `compute` and **not** NUL-terminated (use the length). Errors as
    /// `attr_int`.
    pub attr_string: Option<
        unsafe extern "C" fn(
            attrs: *const c_void,
            name: *const c_char,
            out_data: *mut *const c_char,
            out_len: *mut usize,
        ) -> dpp_status_t,
    >,
    /// (1.4) Allocates `size` bytes (> 0) of device memory on the kernel's device, for the
    /// kernel's own use during one launch: call it during `compute`, with the context `compute`
    /// got, and use the memory in the work `compute` enqueues on `context->stream`. The host
    /// takes it back by itself once the stream has reached that work (stream order, like the
    /// inputs and outputs; do not free it); it comes from the host's allocator for the device,
    /// as outputs do. `DPP_RESOURCE_EXHAUSTED` when there is no memory,
    /// `DPP_INVALID_ARGUMENT` for a size of 0, a NULL out-pointer or a context the host did
    /// not pass (nothing written on failure). `*out_addr` is 256-byte aligned.
    pub allocate_temp: Option<
        unsafe extern "C" fn(
            context: *const dpp_kernel_context_t,
            size: u64,
            out_addr: *mut dpp_addr_t,
        ) -> dpp_status_t,
    >,
}

/// (1.2) An op a plugin defines, in text (the notation of TensorFlow's `REGISTER_OP`), with a
/// *body* that computes it from other ops: the decomposition that runs on every device with
/// no kernel for it, so that a program using the op runs everywhere. Filled by the plugin;
/// the strings are copied during `register_op`. See docs/plugin-guide.md ("Ops of your own").
#[repr(C)]
pub struct dpp_op_def_t {
    /// `DPP_OP_DEF_STRUCT_SIZE` or more.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// `namespace.Name`, e.g. `"mydev.Swish"`: a namespace is required.
    pub name: *const c_char,
    /// The inputs, `"name: TYPE, ..."`; a TYPE is a type variable of `type_vars` or a dtype
    /// (`f32`, `f64`, `i32`, `i64`, `u8`, `bool`). NULL or `""`: none.
    pub inputs: *const c_char,
    /// The outputs, as `inputs` (at least one).
    pub outputs: *const c_char,
    /// The type variables, `"T: {f32, f64}; U: {i32, i64}"`. NULL or `""`: none.
    pub type_vars: *const c_char,
    /// The attributes, `"alpha: float = 1.0; axes: ints = [1]; keep: bool = false; n: int;
    /// to: dtype = f32"` (no default: required). NULL or `""`: none.
    pub attrs: *const c_char,
    /// The body: statements `name = Op(arg, ..., attr=value, ...)` separated by `;` or new
    /// lines, over the inputs and the names assigned before; it must assign every output. An
    /// argument is a name or a number (a scalar of the dtype of the statement's first tensor
    /// argument); an attribute value is a literal (`1`, `0.5`, `true`, `[0, 1]`, `f32`) or
    /// `@name`, the op's own attribute. `Op` is a basis op or an op registered before.
    pub body: *const c_char,
}

/// (1.1) A tensor a kernel reads or writes: device memory of the kernel's device. Filled by
/// the host; valid during `compute`.
#[repr(C)]
pub struct dpp_tensor_t {
    /// `DPP_TENSOR_STRUCT_SIZE` or more.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// `DPP_DTYPE_*`.
    pub dtype: i32,
    /// Number of dimensions (0 for a scalar).
    pub rank: i32,
    /// `rank` dimensions, row-major.
    pub shape: *const i64,
    /// The first element, in the device's memory (dense, row-major).
    pub data: dpp_addr_t,
    /// Bytes of the tensor's elements.
    pub byte_size: u64,
}

/// (1.1) What a kernel's `compute` gets. Filled by the host; valid during the call.
#[repr(C)]
pub struct dpp_kernel_context_t {
    /// `DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_5` or more from a 1.5 host; a 1.1 to 1.4 host passes
    /// `DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1` (80: no `state`).
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// The `device_data` of the device the kernel runs on.
    pub device: *mut c_void,
    /// The device's default stream (the plugin's handle): enqueue the work there. The host
    /// keeps the inputs' and outputs' memory from other uses until the stream reaches what was
    /// enqueued; it may reuse it at once for later work on this same stream (stream-ordered
    /// reuse), so run the work in this stream's order.
    pub stream: *mut c_void,
    /// Number of inputs.
    pub num_inputs: usize,
    /// The inputs, on the kernel's device.
    pub inputs: *const dpp_tensor_t,
    /// Number of outputs.
    pub num_outputs: usize,
    /// The outputs, allocated by the host on the kernel's device with the shapes the op's
    /// shape function gave; the kernel writes them.
    pub outputs: *const dpp_tensor_t,
    /// The op's attributes (defaults filled in), read with the host's `attr_*` functions.
    pub attrs: *const c_void,
    /// `dpp_kernel_t::kernel_data`.
    pub kernel_data: *mut c_void,
    /// (1.5; read it when `struct_size >= DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_5`) What the kernel's
    /// `create` stored for this device, these input dtypes and these attributes; NULL when
    /// the kernel has no `create` or its `create` stored NULL (or left `*out_state` alone).
    pub state: *mut c_void,
}

/// (1.5) What a kernel's `create` gets: the device, the input dtypes and the attributes a
/// state is made for. Valid during the call only.
#[repr(C)]
pub struct dpp_kernel_create_context_t {
    /// `DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE` or more.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// The `device_data` of the device the state is for.
    pub device: *mut c_void,
    /// The op's name.
    pub op: *const c_char,
    /// Number of inputs.
    pub num_inputs: usize,
    /// The inputs' dtypes (`DPP_DTYPE_*`), `num_inputs` of them.
    pub input_dtypes: *const i32,
    /// The op's attributes (defaults filled in), read with the host's `attr_*` functions as in
    /// `compute`. `allocate_temp` refuses it (there is no launch).
    pub attrs: *const c_void,
    /// `dpp_kernel_t::kernel_data`.
    pub kernel_data: *mut c_void,
}

/// (1.1) A kernel a plugin registers with `register_kernel`. Filled by the plugin.
#[repr(C)]
pub struct dpp_kernel_t {
    /// `DPP_KERNEL_STRUCT_SIZE` or more.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// The op's name, e.g. `Add` (an op the runtime knows).
    pub op: *const c_char,
    /// The device type the kernel runs on, e.g. `GPU`.
    pub device_type: *const c_char,
    /// The platform whose memory it works on: one this plugin registered (of `device_type`).
    /// NULL: the plugin's own platform of `device_type` (there must be exactly one). `"ANY"` is
    /// refused (ABI 1.1 to 1.5): the host reserves it for its own memory-agnostic kernels.
    pub platform: *const c_char,
    /// The dtypes of the op's first type variable it accepts (`DPP_DTYPE_*`); NULL/0: all (for
    /// a plugin built against ABI 1.0–1.2: all but f16 and bf16, which it does not know).
    pub dtypes: *const i32,
    /// Number of entries of `dtypes`.
    pub num_dtypes: usize,
    /// Among kernels for one op, device type and binding, the highest priority wins.
    pub priority: i32,
    /// Passed back in the kernel context.
    pub kernel_data: *mut c_void,
    /// Required. Runs the op: enqueue the work on `context->stream` (or do it at once); return
    /// a status (after `set_error`) when the inputs cannot be handled.
    pub compute: Option<unsafe extern "C" fn(context: *const dpp_kernel_context_t) -> dpp_status_t>,
    /// (1.5) Optional; read by the host when `struct_size >= DPP_KERNEL_STRUCT_SIZE`
    /// (`DPP_KERNEL_STRUCT_SIZE_1_1` before). Makes the kernel's state for one device, one list
    /// of input dtypes and one set of attributes (TensorFlow's kernel `create`, XLA FFI's
    /// instantiate): read and check the attributes, build what every launch with them can
    /// share (a compiled variant, a descriptor, normalized parameters) and store it in
    /// `*out_state`, which the host sets to NULL before the call (NULL is allowed). The host calls it before the first `compute` with a
    /// new combination and passes the state in `dpp_kernel_context_t::state` to every
    /// `compute` with it; a failure (after `set_error`) fails that op run, and the next run
    /// calls `create` again. The host keeps a bounded number of states per kernel and device
    /// (64, the least recently used go first), so `create` may run again for a combination
    /// whose state was destroyed. Any thread; no lock of the host is held.
    pub create: Option<
        unsafe extern "C" fn(
            context: *const dpp_kernel_create_context_t,
            out_state: *mut *mut c_void,
        ) -> dpp_status_t,
    >,
    /// (1.5) Optional (with `create`: the host warns at load when a kernel has `create` and no
    /// `destroy`, as its states could never be freed). Frees a state
    /// `create` made (what it stored in `*out_state`, NULL included), once for each: after the device's stream reached every launch that used
    /// it, and before the device is destroyed. Any thread (a stream's worker, when the host
    /// lets a state go while its work is queued); no lock of the host is held.
    pub destroy: Option<unsafe extern "C" fn(kernel_data: *mut c_void, state: *mut c_void)>,
}

/// What a device plugin is. Filled by the plugin: a static object returned by the entry
/// symbol; it must stay valid while the library is loaded.
#[repr(C)]
pub struct dpp_plugin_api_t {
    /// `DPP_PLUGIN_API_STRUCT_SIZE` (as compiled by the plugin).
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// `DPP_ABI_MAJOR` as the plugin was compiled.
    pub abi_major: u32,
    /// `DPP_ABI_MINOR` as the plugin was compiled.
    pub abi_minor: u32,
    /// The plugin's name, `[A-Za-z0-9_.-]+`, for messages. Static.
    pub name: *const c_char,
    /// The plugin's version, free-form. Static.
    pub version: *const c_char,
    /// Required. Registers the plugin's platforms through `host`. `*out_plugin_data` is
    /// passed to `shutdown`. On failure, everything it registered is rolled back by the host.
    pub init: Option<
        unsafe extern "C" fn(
            host: *const dpp_host_api_t,
            out_plugin_data: *mut *mut c_void,
        ) -> dpp_status_t,
    >,
    /// Optional. Called once, after every device and platform of the plugin was destroyed.
    pub shutdown: Option<unsafe extern "C" fn(plugin_data: *mut c_void)>,
}

/// The entry symbol's type: returns the plugin's static description (never NULL).
pub type dpp_entry_fn = Option<unsafe extern "C" fn() -> *const dpp_plugin_api_t>;

/// The name of the one symbol a plugin exports (also `#define DPP_ENTRY_SYMBOL` in plugin.h).
pub const DPP_ENTRY_SYMBOL: &str = "devplug_plugin_entry";

/// A platform: one implementation of devices. Filled by the plugin and passed to
/// `register_platform`; the host copies the strings during the call.
#[repr(C)]
pub struct dpp_platform_t {
    /// `DPP_PLATFORM_STRUCT_SIZE` or more.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// Unique name, `[A-Z][A-Z0-9_]*`, at most 64 characters (e.g. `SIM`).
    pub name: *const c_char,
    /// The device type users place on, same pattern (e.g. `GPU`, `NPU`).
    pub device_type: *const c_char,
    /// Among platforms of one device type, the highest priority is what `TYPE:i` means.
    /// Equal priorities on one type are refused.
    pub priority: i32,
    /// `DPP_PLATFORM_*` flags.
    pub flags: u32,
    /// Free-form vendor name (may be NULL).
    pub vendor: *const c_char,
    /// Free-form version (may be NULL).
    pub version: *const c_char,
    /// Number of devices, 0 to 1024.
    pub device_count: i32,
    /// Passed to the functions below.
    pub platform_data: *mut c_void,
    /// Required. Fills `*device` (whose `struct_size` the host set) for device `ordinal`.
    pub create_device: Option<
        unsafe extern "C" fn(
            platform_data: *mut c_void,
            ordinal: i32,
            device: *mut dpp_device_t,
        ) -> dpp_status_t,
    >,
    /// Required. Releases what `create_device` made. The host has waited for the device's
    /// work and freed its memory first.
    pub destroy_device:
        Option<unsafe extern "C" fn(platform_data: *mut c_void, device: *mut dpp_device_t)>,
    /// Optional. Called after the platform's last device was destroyed (or when a
    /// registration is rolled back).
    pub destroy_platform: Option<unsafe extern "C" fn(platform_data: *mut c_void)>,
}

/// One device. The host allocates it and sets `struct_size`; the plugin's `create_device`
/// fills the rest. Strings and `se` stay valid until `destroy_device`.
#[repr(C)]
pub struct dpp_device_t {
    /// Set by the host: `DPP_DEVICE_STRUCT_SIZE` or more.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    /// Set by the host.
    pub ordinal: i32,
    /// The plugin's per-device state, passed as `device` to every executor function.
    pub device_data: *mut c_void,
    /// May be NULL.
    pub hardware_name: *const c_char,
    /// May be NULL.
    pub vendor: *const c_char,
    /// May be NULL.
    pub pci_bus_id: *const c_char,
    /// Bytes of device memory (0 when unknown).
    pub total_memory: u64,
    /// -1 when unknown.
    pub numa_node: i32,
    /// Cores, SMs, … (0 when unknown).
    pub compute_units: u32,
    /// Required: the device's function table.
    pub se: *const dpp_stream_executor_t,
}

/// Allocator statistics a platform with `DPP_PLATFORM_NO_SUBALLOCATOR` may report.
#[repr(C)]
pub struct dpp_allocator_stats_t {
    /// Set by the host.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,
    pub num_allocs: u64,
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: u64,
    pub largest_alloc_size: u64,
    /// 0 = no limit.
    pub bytes_limit: u64,
    pub bytes_reserved: u64,
    pub largest_free_block: u64,
}

/// The StreamExecutor: a device's function table. Filled by the plugin; valid until
/// `destroy_device`. `device` is the device's `device_data`; `stream` and `event` are what
/// the plugin's `create_stream` / `create_event` returned, never NULL. Functions marked
/// required must not be NULL. Every function may be called from any thread.
///
/// Semantics the host relies on:
/// - Synchronous copies and memset act at once; they do not wait for streams (the host
///   orders them itself).
/// - A stream keeps the first error an operation on it met; later operations still run; the
///   next `synchronize_stream` (or `synchronize_all`) returns that error and clears it. An
///   event the stream reached after the error reports `DPP_EVENT_ERROR`.
/// - `host_callback`'s `func` is never NULL.
#[repr(C)]
pub struct dpp_stream_executor_t {
    /// `DPP_STREAM_EXECUTOR_STRUCT_SIZE` or more.
    pub struct_size: usize,
    /// Reserved; NULL.
    pub ext: *mut c_void,

    /// Required. Allocates `size` bytes (> 0) of device memory.
    pub allocate: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            size: u64,
            out_addr: *mut dpp_addr_t,
        ) -> dpp_status_t,
    >,
    /// Required. Frees what `allocate(size)` returned.
    pub deallocate: Option<unsafe extern "C" fn(device: *mut c_void, addr: dpp_addr_t, size: u64)>,
    /// Optional: pinned host memory. When NULL the host uses its own allocator.
    pub host_allocate: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            size: u64,
            out_ptr: *mut *mut c_void,
        ) -> dpp_status_t,
    >,
    /// Required when `host_allocate` is given.
    pub host_deallocate:
        Option<unsafe extern "C" fn(device: *mut c_void, ptr: *mut c_void, size: u64)>,
    /// Optional: memory both sides can address.
    pub unified_allocate: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            size: u64,
            out_ptr: *mut *mut c_void,
        ) -> dpp_status_t,
    >,
    /// Required when `unified_allocate` is given.
    pub unified_deallocate:
        Option<unsafe extern "C" fn(device: *mut c_void, ptr: *mut c_void, size: u64)>,
    /// Optional: free and total bytes.
    pub memory_usage: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            out_free: *mut u64,
            out_total: *mut u64,
        ) -> dpp_status_t,
    >,
    /// Optional: statistics of the plugin's own allocator (for `DPP_PLATFORM_NO_SUBALLOCATOR`).
    pub allocator_stats: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            out_stats: *mut dpp_allocator_stats_t,
        ) -> dpp_status_t,
    >,

    /// Required. Synchronous copy host → device.
    pub memcpy_htod: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            dst: dpp_addr_t,
            src: *const c_void,
            size: u64,
        ) -> dpp_status_t,
    >,
    /// Required. Synchronous copy device → host.
    pub memcpy_dtoh: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            dst: *mut c_void,
            src: dpp_addr_t,
            size: u64,
        ) -> dpp_status_t,
    >,
    /// Required. Synchronous copy within the device (ranges may overlap).
    pub memcpy_dtod: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            dst: dpp_addr_t,
            src: dpp_addr_t,
            size: u64,
        ) -> dpp_status_t,
    >,
    /// Required. Synchronous memset.
    pub memset: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            dst: dpp_addr_t,
            value: u8,
            size: u64,
        ) -> dpp_status_t,
    >,

    /// Required. Creates a stream: an ordered queue, asynchronous to the host.
    pub create_stream: Option<
        unsafe extern "C" fn(device: *mut c_void, out_stream: *mut *mut c_void) -> dpp_status_t,
    >,
    /// Required. Waits for the stream's work, then destroys it.
    pub destroy_stream: Option<unsafe extern "C" fn(device: *mut c_void, stream: *mut c_void)>,
    /// Required. Blocks until the stream's work is done; returns the first error it met.
    pub synchronize_stream:
        Option<unsafe extern "C" fn(device: *mut c_void, stream: *mut c_void) -> dpp_status_t>,
    /// Required. Later work on `stream` waits for the work enqueued on `other` so far. Both are
    /// streams of `device` (`other` may be `stream` itself).
    pub stream_wait_stream: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            stream: *mut c_void,
            other: *mut c_void,
        ) -> dpp_status_t,
    >,
    /// Required. `src` stays valid until the stream reaches the copy.
    pub memcpy_htod_async: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            stream: *mut c_void,
            dst: dpp_addr_t,
            src: *const c_void,
            size: u64,
        ) -> dpp_status_t,
    >,
    /// Required. `dst` stays valid until the stream reaches the copy.
    pub memcpy_dtoh_async: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            stream: *mut c_void,
            dst: *mut c_void,
            src: dpp_addr_t,
            size: u64,
        ) -> dpp_status_t,
    >,
    /// Required.
    pub memcpy_dtod_async: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            stream: *mut c_void,
            dst: dpp_addr_t,
            src: dpp_addr_t,
            size: u64,
        ) -> dpp_status_t,
    >,
    /// Required.
    pub memset_async: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            stream: *mut c_void,
            dst: dpp_addr_t,
            value: u8,
            size: u64,
        ) -> dpp_status_t,
    >,
    /// Required. Calls `func(arg)` exactly once after all earlier work of the stream, on any
    /// thread: later (from the stream's worker, say), or before this call returns when the
    /// stream's earlier work is already done (a synchronous stream), and then returns
    /// `DPP_OK`. Never while holding a lock that the plugin's own functions take: `func` may
    /// call back into the plugin. If it returns an error, `func` must not be called.
    pub host_callback: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            stream: *mut c_void,
            func: dpp_host_fn,
            arg: *mut c_void,
        ) -> dpp_status_t,
    >,

    /// Required.
    pub create_event: Option<
        unsafe extern "C" fn(device: *mut c_void, out_event: *mut *mut c_void) -> dpp_status_t,
    >,
    /// Required. The host may destroy an event while a record of it or a wait for it is still
    /// queued on a stream (as CUDA allows): keep what that queued work needs alive until it ran.
    pub destroy_event: Option<unsafe extern "C" fn(device: *mut c_void, event: *mut c_void)>,
    /// Required. Marks the current end of `stream`.
    pub record_event: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            stream: *mut c_void,
            event: *mut c_void,
        ) -> dpp_status_t,
    >,
    /// Required. Writes `DPP_EVENT_*`.
    pub event_status: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            event: *mut c_void,
            out_status: *mut i32,
        ) -> dpp_status_t,
    >,
    /// Required. Later work on `stream` waits until `event` is reached.
    pub stream_wait_event: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            stream: *mut c_void,
            event: *mut c_void,
        ) -> dpp_status_t,
    >,
    /// Required. Blocks until `event` is reached. When its stream failed before reaching it,
    /// return that failure (status and `set_error`), as `event_status` reports
    /// `DPP_EVENT_ERROR` for it; the host also asks `event_status` after a `DPP_OK`, so an
    /// event marked failed is never reported reached.
    pub event_synchronize:
        Option<unsafe extern "C" fn(device: *mut c_void, event: *mut c_void) -> dpp_status_t>,
    /// Required. Blocks until all work of all streams of the device is done.
    pub synchronize_all: Option<unsafe extern "C" fn(device: *mut c_void) -> dpp_status_t>,
    /// (1.4) Optional: the device's time from reaching `start` to reaching `end`, in
    /// nanoseconds, into `*out_ns` (negative when `end` was reached first; the events may be
    /// of different streams of the device). Both must have been recorded and reached without
    /// an error: `DPP_FAILED_PRECONDITION` when either was never recorded, is still pending or
    /// reports `DPP_EVENT_ERROR`. The clock is the device's own, as fine as it can tell (CUDA's
    /// events: about half a microsecond). When NULL (or `struct_size` is
    /// `DPP_STREAM_EXECUTOR_STRUCT_SIZE_1_0`) the host reports `DP_UNIMPLEMENTED` to its users.
    pub event_elapsed_ns: Option<
        unsafe extern "C" fn(
            device: *mut c_void,
            start: *mut c_void,
            end: *mut c_void,
            out_ns: *mut i64,
        ) -> dpp_status_t,
    >,
}

/// Size of `dpp_host_api_t` in ABI 1.0 (what a 1.0 plugin may rely on).
pub const DPP_HOST_API_STRUCT_SIZE_1_0: usize = 64;
/// Size of `dpp_host_api_t` in ABI 1.1 (what a 1.1 plugin may rely on).
pub const DPP_HOST_API_STRUCT_SIZE_1_1: usize = 112;
/// Size of `dpp_host_api_t` in ABI 1.2 and 1.3 (what a plugin may rely on for `register_op`
/// and `attr_string`).
pub const DPP_HOST_API_STRUCT_SIZE_1_2: usize = 128;
/// Size of `dpp_host_api_t` in ABI 1.4 and 1.5 (what a plugin may rely on for
/// `allocate_temp`): compare with this, not with `DPP_HOST_API_STRUCT_SIZE`, which grows with
/// the header.
pub const DPP_HOST_API_STRUCT_SIZE_1_4: usize = 136;
/// Size of `dpp_host_api_t` in this header (ABI 1.5; unchanged since 1.4).
pub const DPP_HOST_API_STRUCT_SIZE: usize = 136;
/// Size of `dpp_op_def_t` since ABI 1.2 (unchanged since).
pub const DPP_OP_DEF_STRUCT_SIZE: usize = 64;
/// Size of `dpp_tensor_t` in ABI 1.1.
pub const DPP_TENSOR_STRUCT_SIZE: usize = 48;
/// Size of `dpp_kernel_context_t` in ABI 1.1 to 1.4 (no `state`).
pub const DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1: usize = 80;
/// Size of `dpp_kernel_context_t` in ABI 1.5, the first with `state`: read `state` when
/// `struct_size` is at least this (not [`DPP_KERNEL_CONTEXT_STRUCT_SIZE`], which grows with
/// the header).
pub const DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_5: usize = 88;
/// Size of `dpp_kernel_context_t` in this header's ABI (`state`).
pub const DPP_KERNEL_CONTEXT_STRUCT_SIZE: usize = 88;
/// Size of `dpp_kernel_create_context_t` in ABI 1.5.
pub const DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE: usize = 64;
/// Size of `dpp_kernel_t` in ABI 1.1 to 1.4 (what a plugin built against them fills).
pub const DPP_KERNEL_STRUCT_SIZE_1_1: usize = 80;
/// Size of `dpp_kernel_t` in ABI 1.5 (`create`, `destroy`).
pub const DPP_KERNEL_STRUCT_SIZE: usize = 96;
/// Size of `dpp_plugin_api_t` in ABI 1.0.
pub const DPP_PLUGIN_API_STRUCT_SIZE: usize = 56;
/// Size of `dpp_platform_t` in ABI 1.0.
pub const DPP_PLATFORM_STRUCT_SIZE: usize = 96;
/// Size of `dpp_device_t` in ABI 1.0.
pub const DPP_DEVICE_STRUCT_SIZE: usize = 80;
/// Size of `dpp_allocator_stats_t` in ABI 1.0.
pub const DPP_ALLOCATOR_STATS_STRUCT_SIZE: usize = 72;
/// Size of `dpp_stream_executor_t` in ABI 1.0 to 1.3 (what a plugin built against them fills).
pub const DPP_STREAM_EXECUTOR_STRUCT_SIZE_1_0: usize = 240;
/// Size of `dpp_stream_executor_t` in ABI 1.4.
pub const DPP_STREAM_EXECUTOR_STRUCT_SIZE: usize = 248;

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The size constants are the end of each struct's last field (64-bit targets).
    #[test]
    fn struct_sizes_match_the_constants() {
        assert_eq!(
            DPP_HOST_API_STRUCT_SIZE_1_0,
            offset_of!(dpp_host_api_t, register_platform) + 8
        );
        assert_eq!(
            DPP_HOST_API_STRUCT_SIZE_1_1,
            offset_of!(dpp_host_api_t, attr_dtype) + 8
        );
        assert_eq!(
            DPP_HOST_API_STRUCT_SIZE_1_2,
            offset_of!(dpp_host_api_t, attr_string) + 8
        );
        assert_eq!(
            DPP_HOST_API_STRUCT_SIZE_1_4,
            offset_of!(dpp_host_api_t, allocate_temp) + 8
        );
        assert_eq!(DPP_HOST_API_STRUCT_SIZE, size_of::<dpp_host_api_t>());
        assert_eq!(DPP_OP_DEF_STRUCT_SIZE, offset_of!(dpp_op_def_t, body) + 8);
        assert_eq!(
            DPP_TENSOR_STRUCT_SIZE,
            offset_of!(dpp_tensor_t, byte_size) + 8
        );
        assert_eq!(
            DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1,
            offset_of!(dpp_kernel_context_t, kernel_data) + 8
        );
        assert_eq!(
            DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_5,
            offset_of!(dpp_kernel_context_t, state) + 8
        );
        assert_eq!(
            DPP_KERNEL_CONTEXT_STRUCT_SIZE,
            size_of::<dpp_kernel_context_t>()
        );
        assert_eq!(
            DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE,
            offset_of!(dpp_kernel_create_context_t, kernel_data) + 8
        );
        assert_eq!(
            DPP_KERNEL_STRUCT_SIZE_1_1,
            offset_of!(dpp_kernel_t, compute) + 8
        );
        assert_eq!(
            DPP_KERNEL_STRUCT_SIZE,
            offset_of!(dpp_kernel_t, destroy) + 8
        );
        assert_eq!(
            DPP_PLUGIN_API_STRUCT_SIZE,
            offset_of!(dpp_plugin_api_t, shutdown) + 8
        );
        assert_eq!(
            DPP_PLATFORM_STRUCT_SIZE,
            offset_of!(dpp_platform_t, destroy_platform) + 8
        );
        assert_eq!(DPP_DEVICE_STRUCT_SIZE, offset_of!(dpp_device_t, se) + 8);
        assert_eq!(
            DPP_ALLOCATOR_STATS_STRUCT_SIZE,
            offset_of!(dpp_allocator_stats_t, largest_free_block) + 8
        );
        assert_eq!(
            DPP_STREAM_EXECUTOR_STRUCT_SIZE_1_0,
            offset_of!(dpp_stream_executor_t, synchronize_all) + 8
        );
        assert_eq!(
            DPP_STREAM_EXECUTOR_STRUCT_SIZE,
            offset_of!(dpp_stream_executor_t, event_elapsed_ns) + 8
        );
        assert_eq!(
            size_of::<dpp_stream_executor_t>(),
            DPP_STREAM_EXECUTOR_STRUCT_SIZE
        );
    }
}
