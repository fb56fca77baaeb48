//! `dp_op_*`, `dp_attrs_*` and the placement log: running operations eagerly.

use std::ffi::{c_char, c_void, CString};
use std::mem::MaybeUninit;
use std::sync::Arc;

use devplug_core::{AttrValue, Attrs, Error, OpHandle, PlacementEvent, Reason, Tensor};

use crate::handle::{self, check_out, get, handle, write_out};
use crate::host_fn::HostFn;
use crate::runtime::{dp_device_t, dp_runtime_t, optional_device, runtime_obj, DevicePtr};
use crate::status::{bad_arg, dp_status_t, guard, guard_value, guard_void};
use crate::tensor::{dp_tensor_t, dtype, tensor, TensorObj};

#[doc(hidden)]
pub struct OpObj {
    pub(crate) op: OpHandle,
    name: CString,
    signature: CString,
}

impl OpObj {
    pub(crate) fn new(op: OpHandle) -> OpObj {
        OpObj {
            name: CString::new(op.name()).unwrap_or_default(),
            signature: CString::new(op.def().signature()).unwrap_or_default(),
            op,
        }
    }
}

handle!(
    /// An op of a runtime (e.g. `Add`), resolved once by name with
    /// [`dp_runtime_find_op`]. Borrowed: valid until the runtime is destroyed.
    dp_op_t,
    OpObj,
    0x6470_4f50_0000_0007
);

handle!(
    /// Attribute values for an op run. Owned: [`dp_attrs_create`] / [`dp_attrs_destroy`].
    dp_attrs_t,
    Attrs,
    0x6470_4154_0000_0008
);

/// Looks an op up by name; the handle stays valid until the runtime is destroyed. Hosts
/// resolve names once and keep the handle: running by handle looks nothing up by string.
/// `DP_NOT_FOUND` for an unknown op.
///
/// # Safety
/// `runtime` is a runtime handle; `name` a NUL-terminated string; `out_op` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_find_op(
    runtime: *const dp_runtime_t,
    name: *const c_char,
    out_op: *mut *mut dp_op_t,
) -> dp_status_t {
    guard("dp_runtime_find_op", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        // SAFETY: the caller's contract.
        let name = unsafe { handle::c_str(name, "name")? };
        check_out(out_op, "out_op")?;
        let h = rt.op_handle(name, |op| handle::new::<dp_op_t>(OpObj::new(op)))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_op, "out_op", h) }
    })
}

/// The number of ops the runtime has: the basis set, the composite ops, and those hosts and
/// plugins registered so far. With [`dp_runtime_op_at`], how a host lists them.
///
/// # Safety
/// `runtime` is a runtime handle; `out_count` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_op_count(
    runtime: *const dp_runtime_t,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_runtime_op_count", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_count, "out_count")?;
        let n = rt.runtime().ops().len();
        // SAFETY: the caller's contract.
        unsafe { write_out(out_count, "out_count", n) }
    })
}

/// The op at `index` of the runtime's ops sorted by name (`0 ≤ index <`
/// [`dp_runtime_op_count`]), as the handle [`dp_runtime_find_op`] gives for its name; its
/// name is [`dp_op_name`]. An op registered meanwhile shifts the indexes after it.
/// `DP_OUT_OF_RANGE` for an index past the end; nothing is written on failure.
///
/// # Safety
/// `runtime` is a runtime handle; `out_op` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_op_at(
    runtime: *const dp_runtime_t,
    index: usize,
    out_op: *mut *mut dp_op_t,
) -> dp_status_t {
    guard("dp_runtime_op_at", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_op, "out_op")?;
        let ops = rt.runtime().ops();
        let op = ops.at(index).ok_or_else(|| {
            handle::past_the_end("op", index, format!("the runtime has {} op(s)", ops.len()))
        })?;
        let h = rt.op_handle(op.name(), |op| handle::new::<dp_op_t>(OpObj::new(op)))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_op, "out_op", h) }
    })
}

/// The op's name; NULL for an invalid handle.
///
/// # Safety
/// `op` is an op handle.
#[no_mangle]
pub unsafe extern "C" fn dp_op_name(op: *const dp_op_t) -> *const c_char {
    // SAFETY: the caller's contract.
    guard_value("dp_op_name", std::ptr::null(), || {
        Ok(unsafe { get(op, "op")? }.name.as_ptr())
    })
}

/// The op's signature on one line, in the notation of op definitions (docs/c-api.md, "Ops
/// of your own"): inputs, attributes after `;` with their defaults, outputs, and the dtypes
/// each type variable takes, e.g. `MatMul(a: T, b: T; transpose_a: bool = false, transpose_b:
/// bool = false) -> (product: T) where T: {f32, f64, i32, i64, u8, f16, bf16}`. A variadic
/// input ends in `...`; an output whose dtype an attribute gives reads `@attr`. Valid as long
/// as the handle; NULL for an invalid handle.
///
/// # Safety
/// `op` is an op handle.
#[no_mangle]
pub unsafe extern "C" fn dp_op_signature(op: *const dp_op_t) -> *const c_char {
    // SAFETY: the caller's contract.
    guard_value("dp_op_signature", std::ptr::null(), || {
        Ok(unsafe { get(op, "op")? }.signature.as_ptr())
    })
}

/// The number of outputs the op returns: the room [`dp_op_run`] and `dp_graph_add_op` need
/// (`capacity`). Every op has a fixed number of outputs (at least one).
///
/// # Safety
/// `op` is an op handle; `out_count` writable.
#[no_mangle]
pub unsafe extern "C" fn dp_op_num_outputs(
    op: *const dp_op_t,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_op_num_outputs", || {
        // SAFETY: the caller's contract.
        let op = unsafe { get(op, "op")? };
        check_out(out_count, "out_count")?;
        let n = op.op.def().outputs.len();
        // SAFETY: the caller's contract.
        unsafe { write_out(out_count, "out_count", n) }
    })
}

/// Creates an empty attribute set.
///
/// # Safety
/// `out_attrs` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_attrs_create(out_attrs: *mut *mut dp_attrs_t) -> dp_status_t {
    guard("dp_attrs_create", || {
        check_out(out_attrs, "out_attrs")?;
        // SAFETY: the caller's contract.
        unsafe {
            write_out(
                out_attrs,
                "out_attrs",
                handle::new::<dp_attrs_t>(Attrs::new()),
            )
        }
    })
}

/// Destroys an attribute set. NULL is a no-op.
///
/// # Safety
/// `attrs` is NULL or an attrs handle no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn dp_attrs_destroy(attrs: *mut dp_attrs_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_attrs_destroy", || unsafe {
        handle::destroy(attrs, "attrs")
    });
}

/// # Safety
/// `attrs` is an attrs handle used by this thread only; `name` a C string.
unsafe fn set(
    attrs: *mut dp_attrs_t,
    name: *const c_char,
    value: AttrValue,
) -> devplug_core::Result<()> {
    // SAFETY: the caller's contract.
    let name = unsafe { handle::c_str(name, "name")? };
    if name.is_empty() {
        return Err(bad_arg("name", "is empty"));
    }
    // SAFETY: the caller's contract (no other thread uses the set while it is changed).
    let a = unsafe { handle::get_mut_shared(attrs, "attrs")? };
    a.set(name, value);
    Ok(())
}

/// Sets an integer attribute (adds or replaces).
///
/// # Safety
/// `attrs` is an attrs handle not used by another thread meanwhile; `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn dp_attrs_set_int(
    attrs: *mut dp_attrs_t,
    name: *const c_char,
    value: i64,
) -> dp_status_t {
    // SAFETY: the caller's contract.
    guard("dp_attrs_set_int", || unsafe {
        set(attrs, name, AttrValue::Int(value))
    })
}

/// Sets a float attribute.
///
/// # Safety
/// As for [`dp_attrs_set_int`].
#[no_mangle]
pub unsafe extern "C" fn dp_attrs_set_float(
    attrs: *mut dp_attrs_t,
    name: *const c_char,
    value: f64,
) -> dp_status_t {
    // SAFETY: the caller's contract.
    guard("dp_attrs_set_float", || unsafe {
        set(attrs, name, AttrValue::Float(value))
    })
}

/// Sets a bool attribute (`value` 0 or 1).
///
/// # Safety
/// As for [`dp_attrs_set_int`].
#[no_mangle]
pub unsafe extern "C" fn dp_attrs_set_bool(
    attrs: *mut dp_attrs_t,
    name: *const c_char,
    value: i32,
) -> dp_status_t {
    guard("dp_attrs_set_bool", || {
        if value != 0 && value != 1 {
            return Err(bad_arg("value", &format!("is {value}, not 0 or 1")));
        }
        // SAFETY: the caller's contract.
        unsafe { set(attrs, name, AttrValue::Bool(value == 1)) }
    })
}

/// Sets an integer-list attribute (`count` values; `values` may be NULL when `count` is 0).
///
/// # Safety
/// As for [`dp_attrs_set_int`]; `values` is readable for `count` values.
#[no_mangle]
pub unsafe extern "C" fn dp_attrs_set_ints(
    attrs: *mut dp_attrs_t,
    name: *const c_char,
    values: *const i64,
    count: usize,
) -> dp_status_t {
    guard("dp_attrs_set_ints", || {
        if count > 0 && values.is_null() {
            return Err(bad_arg("values", &format!("is NULL but count is {count}")));
        }
        if count > 1 << 20 {
            return Err(bad_arg(
                "count",
                &format!("is {count}, more than an attribute may hold"),
            ));
        }
        let v = if count == 0 {
            Vec::new()
        } else {
            // SAFETY: non-NULL and `count` values long (the caller's contract).
            unsafe { std::slice::from_raw_parts(values, count) }.to_vec()
        };
        // SAFETY: the caller's contract.
        unsafe { set(attrs, name, AttrValue::Ints(v)) }
    })
}

/// Sets a dtype attribute (`DP_DTYPE_*`).
///
/// # Safety
/// As for [`dp_attrs_set_int`].
#[no_mangle]
pub unsafe extern "C" fn dp_attrs_set_dtype(
    attrs: *mut dp_attrs_t,
    name: *const c_char,
    value: crate::tensor::dp_dtype_t,
) -> dp_status_t {
    guard("dp_attrs_set_dtype", || {
        let d = dtype(value, "value")?;
        // SAFETY: the caller's contract.
        unsafe { set(attrs, name, AttrValue::DType(d)) }
    })
}

/// Sets a string attribute: `value` is a NUL-terminated UTF-8 string, copied
/// (`DP_INVALID_ARGUMENT` when it is not UTF-8). No basis op takes one; ops that hosts or
/// libraries register may.
///
/// # Safety
/// As for [`dp_attrs_set_int`]; `value` is a C string.
#[no_mangle]
pub unsafe extern "C" fn dp_attrs_set_string(
    attrs: *mut dp_attrs_t,
    name: *const c_char,
    value: *const c_char,
) -> dp_status_t {
    guard("dp_attrs_set_string", || {
        // SAFETY: the caller's contract.
        let v = unsafe { handle::c_str(value, "value")? };
        // SAFETY: the caller's contract.
        unsafe { set(attrs, name, AttrValue::Str(v.to_string())) }
    })
}

/// Soft placement for one run: the runtime's setting.
pub const DP_SOFT_PLACEMENT_DEFAULT: i32 = -1;
/// Strict: an op its device cannot run fails.
pub const DP_SOFT_PLACEMENT_OFF: i32 = 0;
/// An op its device cannot run falls back to the CPU.
pub const DP_SOFT_PLACEMENT_ON: i32 = 1;

/// Checks that a caller's output list (`capacity` entries; `is_null`: its pointer is NULL)
/// holds `op`'s outputs; returns how many it has. Inlined (it is on every `dp_op_run`); the
/// errors are built out of line.
#[inline]
pub(crate) fn output_room(
    op: &OpObj,
    is_null: bool,
    capacity: usize,
) -> devplug_core::Result<usize> {
    let n = op.op.def().outputs.len();
    if capacity < n || (n > 0 && is_null) {
        return Err(no_output_room(op, n, capacity));
    }
    Ok(n)
}

/// The error of [`output_room`]: `capacity` is below the op's `n` outputs, or else the list is
/// NULL.
#[cold]
#[inline(never)]
fn no_output_room(op: &OpObj, n: usize, capacity: usize) -> devplug_core::Error {
    if capacity < n {
        return bad_arg(
            "capacity",
            &format!("is {capacity}, but {} has {n} output(s)", op.op.name()),
        );
    }
    bad_arg("outputs", "is NULL")
}

/// An options struct's `soft_placement` (`DP_SOFT_PLACEMENT_*`) as the core takes it.
#[inline]
pub(crate) fn soft_placement(v: i32) -> devplug_core::Result<Option<bool>> {
    match v {
        DP_SOFT_PLACEMENT_DEFAULT => Ok(None),
        DP_SOFT_PLACEMENT_OFF => Ok(Some(false)),
        DP_SOFT_PLACEMENT_ON => Ok(Some(true)),
        other => Err(bad_soft_placement(other)),
    }
}

#[cold]
#[inline(never)]
fn bad_soft_placement(v: i32) -> devplug_core::Error {
    bad_arg(
        "options->soft_placement",
        &format!("is {v}, not a DP_SOFT_PLACEMENT_* value"),
    )
}

/// Options of [`dp_op_run`]. Initialize with [`dp_run_options_init`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_run_options_t {
    /// Set by the init function.
    pub struct_size: usize,
    /// The device to run on; NULL: the runtime's default device (`CPU:0`).
    pub device: *mut dp_device_t,
    /// `DP_SOFT_PLACEMENT_DEFAULT` (default), `_OFF` (strict) or `_ON`.
    pub soft_placement: i32,
}

impl Default for dp_run_options_t {
    fn default() -> Self {
        dp_run_options_t {
            struct_size: std::mem::size_of::<dp_run_options_t>(),
            device: std::ptr::null_mut(),
            soft_placement: DP_SOFT_PLACEMENT_DEFAULT,
        }
    }
}

/// Sets `*options` to the defaults, writing at most `struct_size` bytes (the caller's
/// `sizeof(dp_run_options_t)`). NULL or a too small size is a no-op.
///
/// # Safety
/// `options` is NULL or writable for `struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn dp_run_options_init(options: *mut dp_run_options_t, struct_size: usize) {
    // SAFETY: the caller's contract.
    unsafe { handle::init_sized(options, dp_run_options_t::default(), struct_size) }
}

/// Runs `op` eagerly on `num_inputs` input tensors with `attrs` (NULL: none), on
/// `options->device` or the default device, with the fallback order native kernel →
/// decomposition → soft placement to the CPU → error. Inputs on other devices are copied.
/// On success the op's outputs (new references the caller releases) are written to
/// `outputs[0..n]`, where `n` is the op's output count (at most `capacity`), and `n` to
/// `*out_count` (may be NULL). Errors: `DP_INVALID_ARGUMENT` for wrong arity, dtypes, shapes,
/// unknown attributes (naming the op and operand), and for an `op` or `options->device` of
/// another runtime (resolve handles with the runtime that runs them); `DP_NOT_FOUND` when no
/// device can run it (listing where kernels exist); a kernel's own error when it fails, e.g.
/// `DP_UNIMPLEMENTED` when the device's kernel declined the inputs and nothing else may run
/// them (strict mode, or no CPU kernel).
///
/// # Safety
/// `runtime` is a runtime handle and `op` an op handle (of any runtime: another's is
/// refused); `inputs` holds `num_inputs` tensor handles (may be NULL when 0); `attrs` NULL or
/// an attrs handle; `options` NULL or initialized; `outputs` writable for `capacity` handles.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dp_op_run(
    runtime: *mut dp_runtime_t,
    op: *const dp_op_t,
    inputs: *const *mut dp_tensor_t,
    num_inputs: usize,
    attrs: *const dp_attrs_t,
    options: *const dp_run_options_t,
    outputs: *mut *mut dp_tensor_t,
    capacity: usize,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_op_run", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        // SAFETY: the caller's contract.
        let op = unsafe { get(op, "op")? };
        if num_inputs > 0 && inputs.is_null() {
            return Err(bad_arg(
                "inputs",
                &format!("is NULL but num_inputs is {num_inputs}"),
            ));
        }
        if num_inputs > 4096 {
            return Err(bad_arg(
                "num_inputs",
                &format!("is {num_inputs}, more than an op may take"),
            ));
        }
        // The inputs are borrowed from their handles, not cloned: no reference count is
        // touched. The bitwise copies live in `MaybeUninit` slots, which are never dropped;
        // the handles keep the tensors alive for the whole call (the caller's contract). Up
        // to four inputs sit on the stack.
        let mut small: [MaybeUninit<Tensor>; 4] = [const { MaybeUninit::uninit() }; 4];
        let mut large: Vec<MaybeUninit<Tensor>> = Vec::new();
        let slots: &mut [MaybeUninit<Tensor>] = if num_inputs <= small.len() {
            &mut small[..num_inputs]
        } else {
            large.resize_with(num_inputs, MaybeUninit::uninit);
            &mut large
        };
        for (i, slot) in slots.iter_mut().enumerate() {
            // SAFETY: `inputs` holds `num_inputs` handles (the caller's contract).
            let h = unsafe { *inputs.add(i) };
            // SAFETY: the caller's contract.
            let t = unsafe { tensor(h, "inputs[i]") }.map_err(|e| {
                Error::new(
                    e.code,
                    e.message.replace("inputs[i]", &format!("inputs[{i}]")),
                )
            })?;
            // SAFETY: a bitwise copy that is never dropped (see above) and only read through
            // shared references while the handle's tensor is alive.
            slot.write(unsafe { std::ptr::read(&t.tensor) });
        }
        // SAFETY: every slot was written above (an error returned before this line), and
        // `MaybeUninit<Tensor>` has `Tensor`'s layout.
        let ins: &[Tensor] =
            unsafe { std::slice::from_raw_parts(slots.as_ptr().cast::<Tensor>(), slots.len()) };
        static EMPTY: Attrs = Attrs::new();
        let attrs = if attrs.is_null() {
            &EMPTY
        } else {
            // SAFETY: the caller's contract.
            unsafe { get(attrs, "attrs")? }
        };
        // SAFETY: the caller's contract.
        let o = unsafe {
            handle::read_options(options, std::mem::size_of::<dp_run_options_t>(), "options")?
        };
        // The device is borrowed from its handle: no `Arc` clone per op. Dispatch refuses a
        // device of another runtime (a compare, no lock).
        // SAFETY: the caller's contract.
        let run_device = unsafe { optional_device(o.device, "options->device")? };
        let soft_placement = soft_placement(o.soft_placement)?;
        let n = output_room(op, outputs.is_null(), capacity)?;
        // The handle of the device the op was placed on, known without a lookup; outputs
        // elsewhere (soft placement) are looked up.
        let placed = match run_device {
            Some(d) => (d, o.device),
            None => (rt.runtime().default_device(), rt.default_device_handle()),
        };
        let mut results = devplug_core::Outputs::new();
        rt.runtime()
            .run_into_on(&op.op, ins, attrs, run_device, soft_placement, &mut results)?;
        // Dispatch returns exactly the op's outputs; last to first, so that each tensor is
        // moved out of the list once, into its handle.
        debug_assert_eq!(results.len(), n, "{}: output count", op.op.name());
        if results.len() > n {
            results.truncate(n);
        }
        while let Some(t) = results.pop() {
            let dev = if Arc::ptr_eq(t.device(), placed.0) {
                placed.1
            } else {
                rt.handle_of(t.device()).unwrap_or(std::ptr::null_mut())
            };
            let h = handle::new::<dp_tensor_t>(TensorObj {
                tensor: t,
                device: DevicePtr(dev),
            });
            // SAFETY: `outputs` is writable for `capacity >= n > results.len()` handles.
            unsafe { outputs.add(results.len()).write(h) };
        }
        if !out_count.is_null() {
            // SAFETY: non-NULL and writable (the caller's contract).
            unsafe { out_count.write(n) };
        }
        Ok(())
    })
}

/// `dp_placement_event_t.reason_code`: the caller named the device.
pub const DP_PLACEMENT_EXPLICIT: i32 = 0;
/// No device was named: the runtime's default device.
pub const DP_PLACEMENT_DEFAULT: i32 = 1;
/// No device was named: the innermost device scope entered on the thread.
pub const DP_PLACEMENT_SCOPE: i32 = 2;
/// No device was named: a device setter of a scope entered on the thread chose it.
pub const DP_PLACEMENT_SETTER: i32 = 3;
/// The device has no kernel for the op; its decomposition ran there instead.
pub const DP_PLACEMENT_DECOMPOSED: i32 = 4;
/// Neither a kernel nor a decomposition on the device; the op ran on the CPU.
pub const DP_PLACEMENT_SOFT_PLACED: i32 = 5;
/// An input lived on another device and was copied.
pub const DP_PLACEMENT_INPUT_COPIED: i32 = 6;

/// The `DP_PLACEMENT_*` value of `reason`.
fn reason_code(reason: Reason) -> i32 {
    match reason {
        Reason::Explicit => DP_PLACEMENT_EXPLICIT,
        Reason::Default => DP_PLACEMENT_DEFAULT,
        Reason::Scope => DP_PLACEMENT_SCOPE,
        Reason::Setter => DP_PLACEMENT_SETTER,
        Reason::Decomposed => DP_PLACEMENT_DECOMPOSED,
        Reason::SoftPlaced => DP_PLACEMENT_SOFT_PLACED,
        Reason::InputCopied => DP_PLACEMENT_INPUT_COPIED,
    }
}

/// One placement decision, as the placement callback receives it. Strings are valid during
/// the call only. Fields after `detail` arrived later: read one only when `struct_size` covers
/// it (a library older than your header passes a shorter event).
#[repr(C)]
pub struct dp_placement_event_t {
    /// `sizeof(dp_placement_event_t)` as the library was compiled.
    pub struct_size: usize,
    /// The op, e.g. `"Add"`.
    pub op: *const c_char,
    /// The device it ran on (platform and ordinal, e.g. `"SIMCUDA:0"`).
    pub device: *const c_char,
    /// `"explicit"`, `"scope"`, `"setter"`, `"default"`, `"decomposed"`, `"soft-placed"` or
    /// `"input copied"`.
    pub reason: *const c_char,
    /// What ran it: `"kernel from built-in"`, `"kernel from plugin 'devplug_sim'"` (the source
    /// of the kernel), or a note (a decomposition, a soft placement, a copy). Never NULL.
    pub detail: *const c_char,
    /// `reason` as a `DP_PLACEMENT_*` value, to count or switch on without comparing strings.
    pub reason_code: i32,
}

/// A placement-log callback; runs on the thread that ran the op.
pub type dp_placement_fn =
    Option<unsafe extern "C" fn(event: *const dp_placement_event_t, user_data: *mut c_void)>;
/// Called exactly once when a callback is replaced or its runtime destroyed.
pub type dp_drop_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

type Callback = HostFn<unsafe extern "C" fn(*const dp_placement_event_t, *mut c_void)>;

/// Calls the host's placement callback with `e`.
fn call(cb: &Callback, e: &PlacementEvent) {
    let c = crate::handle::cstring;
    let (op, device, reason, detail) = (
        c(&e.op),
        c(&e.device),
        c(&e.reason.to_string()),
        c(&e.detail),
    );
    let ev = dp_placement_event_t {
        struct_size: std::mem::size_of::<dp_placement_event_t>(),
        op: op.as_ptr(),
        device: device.as_ptr(),
        reason: reason.as_ptr(),
        detail: detail.as_ptr(),
        reason_code: reason_code(e.reason),
    };
    // SAFETY: the host's callback with an event valid for the call.
    crate::host_fn::calling(None, || unsafe { (cb.func)(&ev, cb.user_data) });
}

/// Installs the placement-log callback (`fn` NULL removes it). The previous callback's `drop`
/// is called. The log is also written to standard error when `DEVPLUG_LOG_PLACEMENT=1`. The
/// callback may run ops; theirs are not reported to it (they would call it again, without
/// end).
///
/// # Safety
/// `runtime` is a runtime handle; `fn` may be called from any thread that runs ops, with
/// `user_data`, until replaced or the runtime is destroyed.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_set_placement_callback(
    runtime: *mut dp_runtime_t,
    r#fn: dp_placement_fn,
    user_data: *mut c_void,
    drop: dp_drop_fn,
) -> dp_status_t {
    guard("dp_runtime_set_placement_callback", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        let cb = r#fn.map(|func| {
            let c = Arc::new(Callback::new(func, user_data, drop));
            let f: devplug_core::placement::PlacementCallback =
                Arc::new(move |e: &PlacementEvent| call(&c, e));
            f
        });
        if cb.is_none() {
            if let Some(d) = drop {
                // SAFETY: no callback was installed with this data: drop it at once.
                unsafe { d(user_data) };
            }
        }
        rt.runtime().set_placement_callback(cb);
        Ok(())
    })
}
