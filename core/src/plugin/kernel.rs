//! Plugin kernels (ABI 1.1): turning a kernel a plugin registered into a [`KernelDef`] whose
//! code calls the plugin's `compute`, and the `attr_*` functions of the host table.

use std::ffi::{c_char, c_void, CStr};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use devplug_plugin_abi as abi;

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::device::Device;
use crate::error::Result;
use crate::kernel::{KernelContext, KernelDef, KernelFn};
use crate::op::{AttrValue, Attrs};
use crate::plugin::executor::check_with;
use crate::plugin::host::{LoadedPlugin, PendingKernel};
use crate::plugin::kernel_state::{Destroy, State, StateKey};
use crate::tensor::{DType, Tensor};

/// What a plugin kernel's closure owns.
struct PluginKernel {
    plugin: Arc<LoadedPlugin>,
    name: String,
    /// Unique in the process: the key of its states on each device.
    id: u64,
    kernel_data: *mut c_void,
    compute: unsafe extern "C" fn(*const abi::dpp_kernel_context_t) -> abi::dpp_status_t,
    /// (1.5) Makes a state per device, input dtypes and attributes.
    create: Option<
        unsafe extern "C" fn(
            *const abi::dpp_kernel_create_context_t,
            *mut *mut c_void,
        ) -> abi::dpp_status_t,
    >,
    destroy: Option<Destroy>,
    /// `dpp_kernel_context_t::struct_size` as the host's ABI minor has it: 88, or 80 from a
    /// host speaking 1.4 or older (`HostContext::host_minor`).
    context_size: usize,
    /// What the context's `state` holds without a state: NULL, or, from a host speaking 1.4 or
    /// older, [`STATE_PAST_THE_END`] (the slot lies past such a context's `struct_size`).
    no_state: *mut c_void,
    /// Whether the plugin knows f16 and bf16 (ABI 1.3): it declares 1.3 or newer, or named
    /// them in this kernel's dtypes (having read the host's version), and the host speaks 1.3
    /// or newer. The kernel's dtypes constrain only its type variable's dtype, so an op may
    /// still bring a half tensor elsewhere (Cast to f16); such a launch is refused.
    knows_half: bool,
}
// SAFETY: kernel data belongs to the plugin, whose compute may run on any thread (ABI rule).
unsafe impl Send for PluginKernel {}
// SAFETY: as above; the host never mutates it.
unsafe impl Sync for PluginKernel {}

fn describe(t: &Tensor) -> abi::dpp_tensor_t {
    abi::dpp_tensor_t {
        struct_size: abi::DPP_TENSOR_STRUCT_SIZE,
        ext: std::ptr::null_mut(),
        dtype: t.dtype() as i32,
        rank: t.rank() as i32,
        shape: t.shape().as_ptr(),
        data: t.buffer().ptr().0,
        byte_size: t.byte_size(),
    }
}

/// Tensors described on the stack up to this many inputs and outputs together; more go to a
/// `Vec`.
const INLINE_TENSORS: usize = 6;

/// Calls `f` with the ABI descriptions of `inputs` and of `outputs`, without allocating (or
/// initializing more than is used) for up to [`INLINE_TENSORS`] of them.
fn with_described<R>(
    inputs: &[Tensor],
    outputs: &[Tensor],
    f: impl FnOnce(&[abi::dpp_tensor_t], &[abi::dpp_tensor_t]) -> R,
) -> R {
    let n = inputs.len() + outputs.len();
    if n <= INLINE_TENSORS {
        let mut inline = [const { MaybeUninit::<abi::dpp_tensor_t>::uninit() }; INLINE_TENSORS];
        for (i, t) in inputs.iter().enumerate() {
            inline[i].write(describe(t));
        }
        for (i, t) in outputs.iter().enumerate() {
            inline[inputs.len() + i].write(describe(t));
        }
        // SAFETY: the first `n` entries were written just above (`n <= INLINE_TENSORS`);
        // `dpp_tensor_t` has no destructor.
        let described = unsafe { std::slice::from_raw_parts(inline.as_ptr().cast(), n) };
        let (i, o) = described.split_at(inputs.len());
        f(i, o)
    } else {
        let described: Vec<abi::dpp_tensor_t> =
            inputs.iter().chain(outputs).map(describe).collect();
        let (i, o) = described.split_at(inputs.len());
        f(i, o)
    }
}

/// What a plugin kernel's `context->attrs` points to during one launch: the attributes (read by
/// the `attr_*` functions) and what `allocate_temp` needs.
struct KernelLaunch<'a> {
    /// [`LAUNCH_TAG`]: `allocate_temp` refuses a pointer that does not start so.
    tag: u64,
    attrs: &'a Attrs,
    device: &'a Arc<Device>,
    /// Temporary memory the kernel asked for (ABI 1.4).
    temps: Mutex<Temps>,
}

impl KernelLaunch<'_> {
    /// The call it served returned: a copy of the context a plugin kept and uses later is
    /// refused by the cleared tag (unless the stack slot is a newer launch's by then, whose
    /// record it then reaches: no crash either way).
    fn end(&mut self) {
        // Volatile: the record is not read again, and a plain store would be elided.
        // SAFETY: a valid, exclusively borrowed field.
        unsafe { std::ptr::write_volatile(&mut self.tag, 0) };
    }
}

/// A launch's temporary memory.
#[derive(Default)]
struct Temps {
    /// As byte tensors: marked used by the launch on the stream, then dropped, like the
    /// kernel's inputs and outputs.
    tensors: Vec<Tensor>,
    /// Why the host last refused one: added to the kernel's error when it fails, in case the
    /// plugin's own message (an SDK's, say) replaced the host's.
    refused: Option<String>,
}

/// What a host speaking plugin ABI 1.4 or older puts in the `state` slot of the kernel context
/// it passes: the slot lies past the context's `struct_size` (80), where a real 1.4 host's
/// context has ended, so a plugin that reads `state` without checking `struct_size` sees a
/// value its `create` never made (non-NULL and, on 64-bit targets, no valid address: not
/// canonical on x86-64), which it can tell apart, or crashes on, instead of reading memory
/// that is not its own unnoticed (`devplug check` runs such a host for a plugin that declares
/// an older minor).
const STATE_PAST_THE_END: usize = 0xD0D0_D0D0_D0D0_D0D0_u64 as usize;

const LAUNCH_TAG: u64 = u64::from_le_bytes(*b"dpLaunch");
/// The tag of the record `create` reads attributes from: `allocate_temp` refuses it.
const CREATE_TAG: u64 = u64::from_le_bytes(*b"dpCreate");

impl PluginKernel {
    /// The kernel's state for this launch's device, input dtypes and attributes: the one the
    /// device keeps, or a new one from the plugin's `create`. `None` without `create`.
    fn state_for(&self, cx: &KernelContext) -> Result<Option<Arc<State>>> {
        let Some(create) = self.create else {
            return Ok(None);
        };
        let device = cx.device;
        let dtypes: SmallVec<[DType; 4]> = cx.inputs.iter().map(|t| t.dtype()).collect();
        if let Some(s) = device.kernel_states().find(self.id, &dtypes, cx.attrs) {
            return Ok(Some(s));
        }
        let handles = device.kernel_handles().ok_or_else(|| {
            crate::Error::internal(format!("kernel {}: not a plugin device", self.name))
        })?;
        let codes: SmallVec<[i32; 4]> = dtypes.iter().map(|d| *d as i32).collect();
        let op = std::ffi::CString::new(self.name.as_str()).unwrap_or_default();
        let mut record = KernelLaunch {
            tag: CREATE_TAG,
            attrs: cx.attrs,
            device,
            temps: Mutex::new(Temps::default()),
        };
        let context = abi::dpp_kernel_create_context_t {
            struct_size: abi::DPP_KERNEL_CREATE_CONTEXT_STRUCT_SIZE,
            ext: std::ptr::null_mut(),
            device: handles.device,
            op: op.as_ptr(),
            num_inputs: codes.len(),
            input_dtypes: codes.as_ptr(),
            attrs: &record as *const KernelLaunch as *const c_void,
            kernel_data: self.kernel_data,
        };
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: the plugin's create with a context valid for the call and a writable slot.
        let status = unsafe { create(&context, &mut ptr) };
        record.end();
        check_with(
            &self.plugin,
            || format!("kernel {}: create", self.name),
            status,
        )?;
        let state = State::new(ptr, self.destroy, device);
        let key = StateKey {
            kernel: self.id,
            dtypes,
            attrs: cx.attrs.clone(),
        };
        Ok(Some(device.kernel_states().keep(key, state)))
    }

    /// `UNIMPLEMENTED` when a tensor of the launch is f16 or bf16, which the plugin does not
    /// know (its ABI is older than 1.3): it would read dtype 7 or 8 as a value it never heard of.
    #[cold]
    fn refuse_half(&self, cx: &KernelContext) -> Result<()> {
        let inputs = cx.inputs.iter().enumerate().map(|(i, t)| ("input", i, t));
        let outputs = cx.outputs.iter().enumerate().map(|(i, t)| ("output", i, t));
        match inputs.chain(outputs).find(|(_, _, t)| t.dtype().is_half()) {
            None => Ok(()),
            Some((what, i, t)) => Err(crate::Error::unimplemented(format!(
                "plugin '{}' (ABI {}.{}): kernel {} cannot take its {what} {i}, a {} tensor: \
                 f16 and bf16 arrived in plugin ABI 1.3",
                self.plugin.name,
                abi::DPP_ABI_MAJOR,
                self.plugin
                    .context
                    .abi_minor
                    .min(self.plugin.context.host_minor),
                self.name,
                t.dtype()
            ))),
        }
    }

    fn run(&self, cx: &KernelContext) -> Result<()> {
        let device = cx.device;
        let handles = device.kernel_handles().ok_or_else(|| {
            crate::Error::internal(format!(
                "plugin '{}': kernel {} was dispatched to {}, which is not a plugin device",
                self.plugin.name,
                self.name,
                device.name()
            ))
        })?;
        if !self.knows_half {
            self.refuse_half(cx)?;
        }
        // Held until compute returned; dropping the last reference destroys it in stream order.
        let state = self.state_for(cx)?;
        device.default_stream_used();
        let mut launch = KernelLaunch {
            tag: LAUNCH_TAG,
            attrs: cx.attrs,
            device,
            temps: Mutex::new(Temps::default()),
        };
        let status = with_described(cx.inputs, cx.outputs, |inputs, outputs| {
            // The whole struct of the newest minor backs the context also for an older host,
            // whose `struct_size` ends before `state`: the slot then holds `no_state`.
            let context = abi::dpp_kernel_context_t {
                struct_size: self.context_size,
                ext: std::ptr::null_mut(),
                device: handles.device,
                stream: handles.stream,
                num_inputs: inputs.len(),
                inputs: inputs.as_ptr(),
                num_outputs: outputs.len(),
                outputs: outputs.as_ptr(),
                attrs: &launch as *const KernelLaunch as *const c_void,
                kernel_data: self.kernel_data,
                state: state.as_ref().map_or(self.no_state, |s| s.ptr()),
            };
            // SAFETY: the plugin's compute with a context valid for the call (the tensor
            // descriptions and the shapes they point to outlive it).
            unsafe { (self.compute)(&context) }
        });
        launch.end();
        let Temps {
            tensors: temps,
            refused,
        } = launch.temps.into_inner();
        if let Err(mut e) = check_with(&self.plugin, || format!("kernel {}", self.name), status) {
            // Work the kernel enqueued before it failed (or declined: UNIMPLEMENTED, after
            // which dispatch goes on with the fallback order and new outputs) may still use
            // them: they are reused in stream order.
            device.launched_on_default_stream(&[cx.inputs, cx.outputs, &temps]);
            if let Some(why) = refused.filter(|why| !e.message.contains(why.as_str())) {
                e.message = format!("{} (the host had refused: {why})", e.message);
            }
            return Err(e);
        }
        // The stream may still be working on these: their memory is reused and freed in
        // stream order from now on.
        device.launched_on_default_stream(&[cx.inputs, cx.outputs, &temps]);
        Ok(())
    }
}

/// The kernel definition of a plugin kernel.
pub(crate) fn kernel_def(plugin: &Arc<LoadedPlugin>, k: PendingKernel) -> KernelDef {
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    // A host speaking 1.4 or older never read `create` and `destroy` (`register_kernel`), so
    // they are None, and passes contexts of that minor's size.
    let (context_size, no_state) = if plugin.context.host_minor >= 5 {
        (abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE, std::ptr::null_mut())
    } else {
        (
            abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE_1_1,
            std::ptr::without_provenance_mut(STATE_PAST_THE_END),
        )
    };
    let pk = PluginKernel {
        plugin: plugin.clone(),
        name: k.op.clone(),
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        kernel_data: k.kernel_data,
        compute: k.compute,
        create: k.create,
        destroy: k.destroy.map(|func| Destroy {
            func,
            kernel_data: k.kernel_data,
        }),
        context_size,
        no_state,
        knows_half: plugin.context.host_minor >= 3
            && (plugin.context.abi_minor >= 3 || k.dtypes.iter().any(|d| d.is_half())),
    };
    let func: KernelFn = Arc::new(move |cx: &KernelContext| pk.run(cx));
    KernelDef {
        op: k.op,
        device_type: k.device_type,
        binding: k.binding,
        dtypes: k.dtypes,
        priority: k.priority,
        source: format!("plugin '{}'", plugin.name),
        func,
    }
}

/// # Safety
/// `attrs` is the `attrs` of a live kernel context; `name` is NULL or a C string.
unsafe fn lookup<'a>(
    attrs: *const c_void,
    name: *const c_char,
) -> std::result::Result<&'a AttrValue, abi::dpp_status_t> {
    if attrs.is_null() || name.is_null() {
        return Err(abi::DPP_INVALID_ARGUMENT);
    }
    // SAFETY: the caller's contract: `attrs` points to the running kernel's launch (or
    // create); anything else is refused by its tag, as far as a read can tell (the host's own
    // context mistaken for it, a launch that ended: its tag was cleared).
    let launch = unsafe { &*(attrs as *const KernelLaunch) };
    if launch.tag != LAUNCH_TAG && launch.tag != CREATE_TAG {
        crate::plugin::host::set_thread_error(
            "attr_*: `attrs` is not the attrs of a running compute or create (pass \
             context->attrs, during the call)",
        );
        return Err(abi::DPP_INVALID_ARGUMENT);
    }
    let attrs = launch.attrs;
    // SAFETY: a NUL-terminated name from the plugin.
    let name = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| abi::DPP_INVALID_ARGUMENT)?;
    attrs.get(name).ok_or(abi::DPP_NOT_FOUND)
}

/// Writes `value` to `out` (checked non-NULL).
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn put<T>(out: *mut T, value: T) -> abi::dpp_status_t {
    if out.is_null() {
        return abi::DPP_INVALID_ARGUMENT;
    }
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { out.write(value) };
    abi::DPP_OK
}

pub(crate) unsafe extern "C" fn attr_int(
    attrs: *const c_void,
    name: *const c_char,
    out: *mut i64,
) -> abi::dpp_status_t {
    // SAFETY: the ABI's contract for attr functions.
    match unsafe { lookup(attrs, name) } {
        // SAFETY: as above.
        Ok(AttrValue::Int(v)) => unsafe { put(out, *v) },
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

pub(crate) unsafe extern "C" fn attr_float(
    attrs: *const c_void,
    name: *const c_char,
    out: *mut f64,
) -> abi::dpp_status_t {
    // SAFETY: the ABI's contract for attr functions.
    match unsafe { lookup(attrs, name) } {
        // SAFETY: as above.
        Ok(AttrValue::Float(v)) => unsafe { put(out, *v) },
        // SAFETY: as above.
        Ok(AttrValue::Int(v)) => unsafe { put(out, *v as f64) },
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

pub(crate) unsafe extern "C" fn attr_bool(
    attrs: *const c_void,
    name: *const c_char,
    out: *mut i32,
) -> abi::dpp_status_t {
    // SAFETY: the ABI's contract for attr functions.
    match unsafe { lookup(attrs, name) } {
        // SAFETY: as above.
        Ok(AttrValue::Bool(v)) => unsafe { put(out, i32::from(*v)) },
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

pub(crate) unsafe extern "C" fn attr_ints(
    attrs: *const c_void,
    name: *const c_char,
    out_data: *mut *const i64,
    out_len: *mut usize,
) -> abi::dpp_status_t {
    if out_data.is_null() || out_len.is_null() {
        return abi::DPP_INVALID_ARGUMENT;
    }
    // SAFETY: the ABI's contract for attr functions.
    match unsafe { lookup(attrs, name) } {
        Ok(AttrValue::Ints(v)) => {
            // SAFETY: both out-pointers are non-NULL and writable (the ABI's contract); the
            // data lives in the kernel's Attrs for the duration of compute.
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

pub(crate) unsafe extern "C" fn attr_string(
    attrs: *const c_void,
    name: *const c_char,
    out_data: *mut *const c_char,
    out_len: *mut usize,
) -> abi::dpp_status_t {
    if out_data.is_null() || out_len.is_null() {
        return abi::DPP_INVALID_ARGUMENT;
    }
    // SAFETY: the ABI's contract for attr functions.
    match unsafe { lookup(attrs, name) } {
        Ok(AttrValue::Str(v)) => {
            // SAFETY: both out-pointers are non-NULL and writable (the ABI's contract); the
            // bytes live in the kernel's Attrs for the duration of compute.
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

pub(crate) unsafe extern "C" fn attr_dtype(
    attrs: *const c_void,
    name: *const c_char,
    out: *mut i32,
) -> abi::dpp_status_t {
    // SAFETY: the ABI's contract for attr functions.
    match unsafe { lookup(attrs, name) } {
        // SAFETY: as above.
        Ok(AttrValue::DType(d)) => unsafe { put(out, *d as i32) },
        Ok(_) => abi::DPP_INVALID_ARGUMENT,
        Err(s) => s,
    }
}

/// `dpp_host_api_t::allocate_temp` (ABI 1.4): device memory for one launch of a kernel, taken
/// back in stream order after it.
///
/// # Safety
/// `context` is NULL or the context of a running `compute` (or a copy of it); `out_addr` is
/// NULL or writable.
pub(crate) unsafe extern "C" fn allocate_temp(
    context: *const abi::dpp_kernel_context_t,
    size: u64,
    out_addr: *mut abi::dpp_addr_t,
) -> abi::dpp_status_t {
    // SAFETY: NULL or a kernel context, by the caller's contract; its `attrs` then points to a
    // live KernelLaunch, and anything else is refused by its tag (as far as a read can tell).
    let launch = unsafe {
        context
            .as_ref()
            .and_then(|c| (c.attrs as *const KernelLaunch).as_ref())
    }
    .filter(|l| l.tag == LAUNCH_TAG);
    // SAFETY: the caller's contract for `out_addr`.
    let result = match launch {
        Some(launch) => unsafe { temp_for(launch, size, out_addr) },
        None => Err((
            abi::DPP_INVALID_ARGUMENT,
            "the context is NULL or not one the host passed to compute".to_owned(),
        )),
    };
    match result {
        Ok(()) => abi::DPP_OK,
        Err((status, why)) => {
            // As set_error would; kept by the launch too, for the kernel's error.
            let why = format!("allocate_temp: {why}");
            crate::plugin::host::set_thread_error(&why);
            if let Some(l) = launch {
                l.temps.lock().refused = Some(why);
            }
            status
        }
    }
}

/// `size` bytes of temporary memory for `launch`, its address written to `out_addr`; the
/// status and reason of a refusal.
///
/// # Safety
/// `out_addr` is NULL or writable.
unsafe fn temp_for(
    launch: &KernelLaunch,
    size: u64,
    out_addr: *mut abi::dpp_addr_t,
) -> std::result::Result<(), (abi::dpp_status_t, String)> {
    if size == 0 {
        return Err((abi::DPP_INVALID_ARGUMENT, "size is 0".into()));
    }
    if out_addr.is_null() {
        return Err((abi::DPP_INVALID_ARGUMENT, "out_addr is NULL".into()));
    }
    let len = i64::try_from(size).map_err(|_| {
        let why = format!("{size} bytes are more than a device can hold");
        (abi::DPP_RESOURCE_EXHAUSTED, why)
    })?;
    // The ABI's status values are the host API's codes; the message says "allocating N bytes
    // on DEVICE: …".
    let t = Tensor::output(launch.device, DType::U8, &[len])
        .map_err(|e| (e.code as abi::dpp_status_t, e.message))?;
    // SAFETY: non-NULL and writable by the caller's contract.
    unsafe { out_addr.write(t.buffer().ptr().0) };
    launch.temps.lock().tensors.push(t);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context that is NULL, or whose `attrs` is not a launch the host made, is refused
    /// with nothing written and the reason on the thread.
    #[test]
    fn allocate_temp_refuses_a_context_the_host_did_not_pass() {
        let foreign = [0u64; 8];
        let context = abi::dpp_kernel_context_t {
            struct_size: abi::DPP_KERNEL_CONTEXT_STRUCT_SIZE,
            ext: std::ptr::null_mut(),
            device: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            num_inputs: 0,
            inputs: std::ptr::null(),
            num_outputs: 0,
            outputs: std::ptr::null(),
            attrs: foreign.as_ptr().cast(),
            kernel_data: std::ptr::null_mut(),
            state: std::ptr::null_mut(),
        };
        for cx in [std::ptr::null(), &context as *const _] {
            let mut addr: abi::dpp_addr_t = 7;
            // SAFETY: NULL, or a context whose attrs points to readable memory.
            let status = unsafe { allocate_temp(cx, 64, &mut addr) };
            assert_eq!((status, addr), (abi::DPP_INVALID_ARGUMENT, 7));
            let why = crate::plugin::host::take_plugin_error().unwrap_or_default();
            assert!(why.contains("not one the host passed to compute"), "{why}");
        }
    }

    /// The `attr_*` readers take the attrs of a running launch or create only: a pointer to
    /// other memory (the host's own context, mistaken for it) and a launch that ended are
    /// refused, with nothing written and the reason on the thread.
    #[test]
    fn attribute_readers_refuse_what_is_no_running_launch() {
        let rt = crate::Runtime::new(crate::RuntimeOptions {
            discover_from_env: false,
            ..Default::default()
        })
        .unwrap();
        let cpu = rt.cpu_device().unwrap();
        let attrs = Attrs::new().with("k", 3i64);
        let mut launch = KernelLaunch {
            tag: LAUNCH_TAG,
            attrs: &attrs,
            device: &cpu,
            temps: Mutex::new(Temps::default()),
        };
        let read = |p: *const c_void| {
            let mut v = -1i64;
            // SAFETY: `p` points to readable memory; the name is a C string.
            let status = unsafe { attr_int(p, c"k".as_ptr(), &mut v) };
            (status, v)
        };
        let live = &launch as *const KernelLaunch as *const c_void;
        assert_eq!(read(live), (abi::DPP_OK, 3));
        let foreign = [0u64; 8];
        assert_eq!(
            read(foreign.as_ptr().cast()),
            (abi::DPP_INVALID_ARGUMENT, -1)
        );
        let why = crate::plugin::host::take_plugin_error().unwrap_or_default();
        assert!(
            why.contains("not the attrs of a running compute or create"),
            "{why}"
        );
        launch.end();
        let ended = &launch as *const KernelLaunch as *const c_void;
        assert_eq!(read(ended), (abi::DPP_INVALID_ARGUMENT, -1));
    }
}
