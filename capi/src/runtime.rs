//! `dp_runtime_*` and `dp_device_*`: the runtime object and its devices.

use std::ffi::{c_char, CString};
use std::sync::Arc;

use parking_lot::RwLock;

use devplug_core::{Device, Error, Runtime, RuntimeOptions};

use crate::handle::{self, check_out, cstring, get, handle, write_out};
use crate::host_fn::Waits;
use crate::status::{bad_arg, dp_status_t, guard, guard_value, guard_void};
use crate::stream::{default_stream_handle, destroy_default_stream_handle, dp_stream_t};

/// Options of [`dp_runtime_create`]. Initialize with [`dp_runtime_options_init`], then change
/// fields. Fields are only ever appended; `struct_size` says which the caller knows.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_runtime_options_t {
    /// `sizeof(dp_runtime_options_t)` as the caller was compiled; set by the init function.
    pub struct_size: usize,
    /// Logical devices of the built-in `HOST` platform (device type `CPU`): 1 to 64; default 1.
    pub cpu_device_count: u32,
    /// Bytes each CPU device may hold; 0 (the default) means no limit. Past the limit,
    /// allocations fail with `DP_RESOURCE_EXHAUSTED`.
    pub cpu_memory_limit: u64,
    /// Plugins to load at creation: a `:`-separated list of absolute files or folders (NULL
    /// for none). Failures do not fail the creation; see `dp_runtime_plugin_failure`.
    pub plugin_path: *const c_char,
    /// 1 (the default): also load the plugins named by the `DEVPLUG_PLUGIN_PATH` environment
    /// variable, which is ignored when the process runs with elevated privileges. 0: do not.
    pub discover_plugins: u32,
    /// Threads a CPU kernel may use; 0 (the default): the machine's available parallelism.
    pub intra_op_threads: u32,
    /// 1 (the default): ops a device cannot run fall back to the CPU; 0: strict mode.
    pub soft_placement: u32,
}

impl Default for dp_runtime_options_t {
    fn default() -> Self {
        dp_runtime_options_t {
            struct_size: std::mem::size_of::<dp_runtime_options_t>(),
            cpu_device_count: 1,
            cpu_memory_limit: 0,
            plugin_path: std::ptr::null(),
            discover_plugins: 1,
            intra_op_threads: 0,
            soft_placement: 1,
        }
    }
}

/// Sets `*options` to the defaults and `struct_size` to `struct_size`, which the caller
/// passes as `sizeof(dp_runtime_options_t)` as it was compiled: only that many bytes are
/// written, so a program built against an older, shorter struct is safe with a newer library.
/// NULL, or a size too small to hold `struct_size`, is a no-op.
///
/// # Safety
/// `options` is NULL or writable for `struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_options_init(
    options: *mut dp_runtime_options_t,
    struct_size: usize,
) {
    // SAFETY: the caller's contract.
    unsafe { handle::init_sized(options, dp_runtime_options_t::default(), struct_size) }
}

#[doc(hidden)]
pub struct RuntimeObj {
    runtime: Runtime,
    /// The device handles, in the runtime's device order.
    devices: RwLock<Vec<DevicePtr>>,
    /// The handle of `CPU:0`, the default device (the first; it never changes).
    cpu0: DevicePtr,
    /// Strings handed out (plugin names, failure messages), valid until the runtime goes.
    strings: parking_lot::Mutex<Vec<CString>>,
    /// The op handles handed out, by name (one per op), destroyed with the runtime.
    ops: parking_lot::Mutex<Vec<(String, OpPtr)>>,
}

/// An op handle's address; handles live until their runtime is destroyed.
#[derive(Clone, Copy)]
pub(crate) struct OpPtr(pub *mut crate::op::dp_op_t);
// SAFETY: as for `DevicePtr`: immutable after creation, only dereferenced through handle::get.
unsafe impl Send for OpPtr {}
// SAFETY: as above.
unsafe impl Sync for OpPtr {}

/// A device handle's address; handles live until their runtime is destroyed.
#[derive(Clone, Copy)]
pub(crate) struct DevicePtr(pub *mut dp_device_t);
// SAFETY: a device handle is immutable after creation and its value is Send + Sync; the
// pointer is only dereferenced through `handle::get`.
unsafe impl Send for DevicePtr {}
// SAFETY: as above.
unsafe impl Sync for DevicePtr {}

handle!(
    /// The runtime: owns platforms, devices and their memory. Create with
    /// [`dp_runtime_create`], destroy with [`dp_runtime_destroy`].
    dp_runtime_t,
    RuntimeObj,
    0x6470_5254_0000_0001
);

#[doc(hidden)]
pub struct DeviceObj {
    pub(crate) device: Arc<Device>,
    /// `TYPE:ordinal` and `PLATFORM:ordinal`; [`DeviceObj::name`] picks the one that
    /// addresses the device now.
    type_name: CString,
    qualified_name: CString,
    device_type: CString,
    platform: CString,
    vendor: CString,
    hardware_name: CString,
    /// The handle of the device's default stream, owned by this device handle.
    pub(crate) default_stream: StreamPtr,
}

/// The address of a default stream's handle, owned by its device handle.
#[derive(Clone, Copy)]
pub(crate) struct StreamPtr(pub *mut dp_stream_t);
// SAFETY: as for `DevicePtr`.
unsafe impl Send for StreamPtr {}
// SAFETY: as for `DevicePtr`.
unsafe impl Sync for StreamPtr {}

handle!(
    /// A device, borrowed from its runtime: valid until the runtime is destroyed; never
    /// destroyed by the host.
    dp_device_t,
    DeviceObj,
    0x6470_4456_0000_0002
);

impl DeviceObj {
    /// The name that addresses the device now (see `Device::name`).
    fn name(&self) -> &CString {
        if self.device.platform().is_active() {
            &self.type_name
        } else {
            &self.qualified_name
        }
    }
}

impl RuntimeObj {
    pub(crate) fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Brings the device handles up to date after plugins registered devices.
    pub(crate) fn refresh(&self) {
        self.sync_devices();
    }

    /// The handle of op `name`, made by `make` the first time.
    pub(crate) fn op_handle(
        &self,
        name: &str,
        make: impl FnOnce(devplug_core::OpHandle) -> *mut crate::op::dp_op_t,
    ) -> devplug_core::Result<*mut crate::op::dp_op_t> {
        let mut ops = self.ops.lock();
        if let Some((_, p)) = ops.iter().find(|(n, _)| n == name) {
            return Ok(p.0);
        }
        let op = self.runtime.op(name)?;
        let p = make(op);
        ops.push((name.to_string(), OpPtr(p)));
        Ok(p)
    }

    /// Keeps strings alive until the runtime is destroyed; returns their addresses. A string
    /// kept before is handed out again, so that asking repeatedly does not grow the list.
    pub(crate) fn keep<const N: usize>(&self, strings: [CString; N]) -> [*const c_char; N] {
        let mut kept = self.strings.lock();
        strings.map(|s| {
            if let Some(k) = kept.iter().find(|k| **k == s) {
                return k.as_ptr();
            }
            let p = s.as_ptr();
            kept.push(s);
            p
        })
    }

    /// Makes handles for devices the runtime has and the list does not yet.
    fn sync_devices(&self) {
        let devices = self.runtime.devices();
        let mut handles = self.devices.write();
        for d in devices.into_iter().skip(handles.len()) {
            let p = d.properties();
            let h = handle::new::<dp_device_t>(DeviceObj {
                type_name: cstring(d.type_name()),
                qualified_name: cstring(&d.qualified_name()),
                device_type: cstring(&p.device_type),
                platform: cstring(&p.platform),
                vendor: cstring(&p.description.vendor),
                hardware_name: cstring(&p.description.hardware_name),
                default_stream: StreamPtr(std::ptr::null_mut()),
                device: d.clone(),
            });
            let stream = default_stream_handle(&d, h);
            // SAFETY: `h` was just made and is not shared yet.
            unsafe { set_default_stream(h, stream) };
            handles.push(DevicePtr(h));
        }
    }

    /// The handle of the default device (`CPU:0`).
    pub(crate) fn default_device_handle(&self) -> *mut dp_device_t {
        self.cpu0.0
    }

    /// The handle of `device`, which belongs to this runtime.
    pub(crate) fn handle_of(&self, device: &Arc<Device>) -> Option<*mut dp_device_t> {
        // Handles are made in the runtime's device order, so a device's index is its slot.
        let p = self.devices.read().get(device.index())?.0;
        // SAFETY: the list holds live device handles of this runtime.
        unsafe { get(p, "device") }
            .is_ok_and(|o| Arc::ptr_eq(&o.device, device))
            .then_some(p)
    }
}

/// # Safety
/// `h` is a device handle not yet shared with any other code.
unsafe fn set_default_stream(h: *mut dp_device_t, stream: *mut dp_stream_t) {
    // SAFETY: forwarded; the handle is exclusively ours.
    if let Ok(obj) = unsafe { handle::get_mut(h) } {
        obj.default_stream = StreamPtr(stream);
    }
}

/// Creates a runtime. `options` may be NULL for the defaults.
///
/// # Safety
/// `options` is NULL or a `dp_runtime_options_t` whose `struct_size` is right;
/// `out_runtime` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_create(
    options: *const dp_runtime_options_t,
    out_runtime: *mut *mut dp_runtime_t,
) -> dp_status_t {
    guard("dp_runtime_create", || {
        check_out(out_runtime, "out_runtime")?;
        // SAFETY: the caller's contract.
        let o: dp_runtime_options_t = unsafe {
            handle::read_options(
                options,
                // The 0.1 layout without the plugin fields is still accepted.
                std::mem::offset_of!(dp_runtime_options_t, plugin_path),
                "options",
            )?
        };
        let plugin_path = if o.plugin_path.is_null() {
            None
        } else {
            // SAFETY: a NUL-terminated string by the caller's contract.
            Some(unsafe { handle::c_str(o.plugin_path, "options->plugin_path")? }.to_string())
        };
        if o.discover_plugins > 1 {
            return Err(bad_arg(
                "options->discover_plugins",
                &format!("is {}, not 0 or 1", o.discover_plugins),
            ));
        }
        if o.soft_placement > 1 {
            return Err(bad_arg(
                "options->soft_placement",
                &format!("is {}, not 0 or 1", o.soft_placement),
            ));
        }
        if o.intra_op_threads > 1024 {
            return Err(bad_arg(
                "options->intra_op_threads",
                &format!("is {}, more than 1024", o.intra_op_threads),
            ));
        }
        let defaults = RuntimeOptions::default();
        let runtime = Runtime::new(RuntimeOptions {
            cpu_device_count: o.cpu_device_count as usize,
            cpu_memory_limit: (o.cpu_memory_limit != 0).then_some(o.cpu_memory_limit),
            plugin_path,
            discover_from_env: o.discover_plugins == 1,
            soft_placement: o.soft_placement == 1,
            intra_op_threads: if o.intra_op_threads == 0 {
                defaults.intra_op_threads
            } else {
                o.intra_op_threads as usize
            },
            // Not in the C API: an older plugin ABI is for conformance checks (devplug check).
            plugin_abi_minor: None,
        })?;
        let mut obj = RuntimeObj {
            runtime,
            devices: RwLock::new(Vec::new()),
            cpu0: DevicePtr(std::ptr::null_mut()),
            strings: parking_lot::Mutex::new(Vec::new()),
            ops: parking_lot::Mutex::new(Vec::new()),
        };
        obj.sync_devices();
        obj.cpu0 = obj
            .devices
            .read()
            .first()
            .copied()
            .unwrap_or(DevicePtr(std::ptr::null_mut()));
        // SAFETY: checked above.
        unsafe { write_out(out_runtime, "out_runtime", handle::new::<dp_runtime_t>(obj)) }
    })
}

/// Destroys a runtime after waiting for all its work. Its device handles become invalid;
/// buffers, tensors and streams the host still holds stay usable until released. NULL is a
/// no-op; so is a call from inside a callback devplug runs (a host callback, a device setter,
/// the log or placement callback), whose caller still uses the runtime: it is logged.
///
/// # Safety
/// `runtime` is NULL or a runtime handle no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_destroy(runtime: *mut dp_runtime_t) {
    guard_void("dp_runtime_destroy", || {
        if !runtime.is_null() {
            crate::host_fn::refuse_inside(Waits::Runtime)?;
        }
        // SAFETY: the caller's contract.
        let (devices, ops): (Vec<DevicePtr>, Vec<OpPtr>) =
            match unsafe { handle::get(runtime, "runtime") } {
                Ok(obj) => (
                    obj.devices.read().clone(),
                    obj.ops.lock().iter().map(|(_, p)| *p).collect(),
                ),
                Err(_) if runtime.is_null() => return Ok(()),
                Err(e) => return Err(e),
            };
        // SAFETY: the caller's contract.
        unsafe { handle::destroy(runtime, "runtime")? };
        for op in ops {
            // SAFETY: the op handles belonged to the runtime just destroyed.
            unsafe { handle::destroy(op.0, "op")? };
        }
        for d in devices {
            // SAFETY: the device handles (and their default streams' handles) belonged to the
            // runtime just destroyed.
            unsafe {
                if let Ok(obj) = get(d.0, "device") {
                    destroy_default_stream_handle(obj.default_stream.0);
                }
                handle::destroy(d.0, "device")?;
            }
        }
        Ok(())
    });
}

#[inline]
pub(crate) unsafe fn runtime_obj<'a>(
    runtime: *const dp_runtime_t,
) -> devplug_core::Result<&'a RuntimeObj> {
    // SAFETY: forwarded.
    unsafe { get(runtime, "runtime") }
}

#[inline]
pub(crate) unsafe fn device<'a>(
    device: *const dp_device_t,
    arg: &str,
) -> devplug_core::Result<&'a Arc<Device>> {
    // SAFETY: forwarded.
    Ok(&unsafe { get(device, arg) }?.device)
}

/// The handle of `of`'s device that a tensor, buffer, stream or variable kept (`handle`),
/// while it still is that device's handle: its runtime destroys its device handles with it,
/// and the memory may have gone to another handle since, so it is checked like an argument
/// and compared with the device `of` lives on. For the error, `what` names the holder and
/// `still` what it can still do (`"read, copied and used"`).
///
/// # Safety
/// `handle` was a device handle made by this library (live or destroyed since).
pub(crate) unsafe fn kept_device_handle(
    handle: DevicePtr,
    of: &Arc<Device>,
    what: &str,
    still: &str,
) -> devplug_core::Result<*mut dp_device_t> {
    // SAFETY: forwarded; a destroyed handle or one of another kind is refused.
    match unsafe { get::<dp_device_t>(handle.0, "device") } {
        Ok(obj) if Arc::ptr_eq(&obj.device, of) => Ok(handle.0),
        _ => Err(devplug_core::Error::failed_precondition(format!(
            "the runtime of the {what}'s device {} was destroyed, and its device handles with it \
             (the {what} can still be {still})",
            of.qualified_name()
        ))),
    }
}

/// [`device`] for an optional device argument: NULL is `None`.
///
/// # Safety
/// As for [`device`].
pub(crate) unsafe fn optional_device<'a>(
    device: *const dp_device_t,
    arg: &str,
) -> devplug_core::Result<Option<&'a Arc<Device>>> {
    if device.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded.
    Ok(Some(unsafe { self::device(device, arg)? }))
}

/// Writes the number of devices of all platforms into `*out_count`.
///
/// # Safety
/// `runtime` is a runtime handle; `out_count` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_device_count(
    runtime: *const dp_runtime_t,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_runtime_device_count", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        rt.sync_devices();
        let n = rt.devices.read().len();
        // SAFETY: the caller's contract.
        unsafe { write_out(out_count, "out_count", n) }
    })
}

/// Writes device `index` (in platform registration order, then ordinal) into `*out_device`;
/// `DP_OUT_OF_RANGE` past the end.
///
/// # Safety
/// `runtime` is a runtime handle; `out_device` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_device(
    runtime: *const dp_runtime_t,
    index: usize,
    out_device: *mut *mut dp_device_t,
) -> dp_status_t {
    guard("dp_runtime_device", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_device, "out_device")?;
        rt.sync_devices();
        // One read guard: taking a second while it is held could wait forever behind a
        // writer queued in between.
        let d = {
            let devices = rt.devices.read();
            devices.get(index).copied().ok_or_else(|| {
                let n = devices.len();
                handle::past_the_end("device", index, format!("the runtime has {n} device(s)"))
            })?
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(out_device, "out_device", d.0) }
    })
}

/// Finds a device by spec: `"CPU"`, `"cpu:1"`, `"/device:CPU:0"` (a device type and ordinal:
/// the active platform of that type) or `"HOST:0"` (a platform name and ordinal).
/// `DP_INVALID_ARGUMENT` for a malformed spec, `DP_NOT_FOUND` when no such device exists.
///
/// # Safety
/// `runtime` is a runtime handle; `spec` is a NUL-terminated string; `out_device` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_find_device(
    runtime: *const dp_runtime_t,
    spec: *const c_char,
    out_device: *mut *mut dp_device_t,
) -> dp_status_t {
    guard("dp_runtime_find_device", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        // SAFETY: the caller's contract.
        let spec = unsafe { handle::c_str(spec, "spec")? };
        check_out(out_device, "out_device")?;
        let d = rt.runtime.find_device(spec)?;
        rt.sync_devices();
        let h = rt
            .handle_of(&d)
            .ok_or_else(|| Error::internal(format!("device {} has no handle", d.name())))?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_device, "out_device", h) }
    })
}

/// Waits for all work on all devices of the runtime (each one, even after one failed), and
/// returns the first failure, as `dp_device_synchronize` does for one device.
///
/// # Safety
/// `runtime` is a runtime handle.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_synchronize(runtime: *mut dp_runtime_t) -> dp_status_t {
    guard("dp_runtime_synchronize", || {
        // SAFETY: the caller's contract.
        unsafe { runtime_obj(runtime)? }.runtime.synchronize()
    })
}

/// A device's properties. Set `struct_size = sizeof(dp_device_properties_t)` before calling
/// [`dp_device_get_properties`]; the runtime fills the fields that fit. Strings stay valid
/// until the runtime is destroyed.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_device_properties_t {
    /// Set by the caller.
    pub struct_size: usize,
    /// The name that addresses the device now (see `dp_device_name`), e.g. `"CPU:0"`.
    pub name: *const c_char,
    /// The device type, e.g. `"CPU"`.
    pub device_type: *const c_char,
    /// The platform's name, e.g. `"HOST"`.
    pub platform: *const c_char,
    pub vendor: *const c_char,
    pub hardware_name: *const c_char,
    pub ordinal: i32,
    /// The platform's priority among platforms of its device type.
    pub priority: i32,
    /// 1 when `"TYPE:i"` resolves to this device's platform.
    pub is_active_platform: u32,
    /// 1 when device memory is host memory.
    pub host_visible: u32,
    /// Bytes: the memory limit if one is set, else the device's physical memory.
    pub total_memory: u64,
}

/// Fills `*out_properties` (whose `struct_size` the caller set).
///
/// # Safety
/// `device` is a device handle; `out_properties` points to a `dp_device_properties_t` with
/// `struct_size` set.
#[no_mangle]
pub unsafe extern "C" fn dp_device_get_properties(
    device: *const dp_device_t,
    out_properties: *mut dp_device_properties_t,
) -> dp_status_t {
    guard("dp_device_get_properties", || {
        // SAFETY: the caller's contract.
        let obj = unsafe { get(device, "device")? };
        let p = obj.device.properties();
        let props = dp_device_properties_t {
            struct_size: std::mem::size_of::<dp_device_properties_t>(),
            name: obj.name().as_ptr(),
            device_type: obj.device_type.as_ptr(),
            platform: obj.platform.as_ptr(),
            vendor: obj.vendor.as_ptr(),
            hardware_name: obj.hardware_name.as_ptr(),
            ordinal: p.ordinal as i32,
            priority: p.priority,
            is_active_platform: p.is_active_platform as u32,
            host_visible: p.host_visible as u32,
            total_memory: p.total_memory,
        };
        // SAFETY: the caller's contract.
        unsafe {
            handle::write_sized(
                out_properties,
                props,
                std::mem::size_of::<usize>(),
                "out_properties",
            )
        }
    })
}

/// The name that addresses the device now, e.g. `"CPU:0"`, `"GPU:0"` — or `"SIMCUDA:0"` once a
/// platform of higher priority became the active one of its type (then `"GPU:0"` names
/// another device). Valid until the runtime is destroyed; NULL for an invalid handle.
///
/// # Safety
/// `device` is a device handle.
#[no_mangle]
pub unsafe extern "C" fn dp_device_name(device: *const dp_device_t) -> *const c_char {
    guard_value("dp_device_name", std::ptr::null(), || {
        // SAFETY: the caller's contract.
        Ok(unsafe { get(device, "device")? }.name().as_ptr())
    })
}

/// Memory statistics of a device's allocator. Set `struct_size` before calling.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct dp_memory_stats_t {
    /// Set by the caller: `sizeof(dp_memory_stats_t)`.
    pub struct_size: usize,
    /// Bytes of live allocations (rounded to the allocator's granularity).
    pub bytes_in_use: u64,
    /// The most bytes in use at once.
    pub peak_bytes_in_use: u64,
    /// Allocations ever made.
    pub num_allocs: u64,
    /// Live allocations.
    pub active_allocs: u64,
    /// The largest allocation made.
    pub largest_alloc_size: u64,
    /// The memory limit; 0 when there is none.
    pub bytes_limit: u64,
    /// Bytes held from the device (in use or cached).
    pub bytes_reserved: u64,
    /// The largest free block among the reserved bytes.
    pub largest_free_block: u64,
}

/// Fills `*out_stats` (whose `struct_size` the caller set).
///
/// # Safety
/// `device` is a device handle; `out_stats` points to a `dp_memory_stats_t` with
/// `struct_size` set.
#[no_mangle]
pub unsafe extern "C" fn dp_device_memory_stats(
    device: *const dp_device_t,
    out_stats: *mut dp_memory_stats_t,
) -> dp_status_t {
    guard("dp_device_memory_stats", || {
        // SAFETY: the caller's contract.
        let s = unsafe { self::device(device, "device")? }.memory_stats();
        let stats = dp_memory_stats_t {
            struct_size: std::mem::size_of::<dp_memory_stats_t>(),
            bytes_in_use: s.bytes_in_use,
            peak_bytes_in_use: s.peak_bytes_in_use,
            num_allocs: s.num_allocs,
            active_allocs: s.active_allocs,
            largest_alloc_size: s.largest_alloc_size,
            bytes_limit: s.bytes_limit.unwrap_or(0),
            bytes_reserved: s.bytes_reserved,
            largest_free_block: s.largest_free_block,
        };
        // SAFETY: the caller's contract.
        unsafe { handle::write_sized(out_stats, stats, std::mem::size_of::<usize>(), "out_stats") }
    })
}

/// Writes how many bytes of the device's memory this runtime could still allocate into
/// `*out_free` and how many it may use at all into `*out_total` (TensorFlow's
/// `DeviceMemoryUsage`): the platform's free memory, which counts other users of the device,
/// plus what the runtime holds cached but unused, and the platform's total — both capped by
/// the device's memory limit when one was set. On the CPU device: the host's available and
/// total memory. `DP_UNIMPLEMENTED` for a plugin device whose plugin does not report its
/// memory (its stream executor has no `memory_usage`); nothing is written on failure.
///
/// # Safety
/// `device` is a device handle; `out_free` and `out_total` are writable.
#[no_mangle]
pub unsafe extern "C" fn dp_device_memory_usage(
    device: *const dp_device_t,
    out_free: *mut u64,
    out_total: *mut u64,
) -> dp_status_t {
    guard("dp_device_memory_usage", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        check_out(out_free, "out_free")?;
        check_out(out_total, "out_total")?;
        let usage = d.memory_usage()?;
        // SAFETY: the caller's contract (both checked non-NULL).
        unsafe {
            write_out(out_free, "out_free", usage.free)?;
            write_out(out_total, "out_total", usage.total)
        }
    })
}

/// Sets the most bytes the runtime's allocator for the device may hold from its platform
/// (TensorFlow's `memory_limit`, PyTorch's `set_per_process_memory_fraction`); 0 removes the
/// limit. Any device, at any time, from any thread; on a CPU device it replaces
/// `cpu_memory_limit`, its initial value (other devices start without a limit).
///
/// An allocation that would take the device past the limit fails with
/// `DP_RESOURCE_EXHAUSTED`, the message naming the device and the limit. A limit below what is
/// held now is allowed: cached free memory is given back to the platform as far as needed,
/// memory in use is never touched, and allocations that need more fail until enough is freed.
/// `dp_device_memory_usage`, `dp_device_memory_stats` (`bytes_limit`) and
/// `dp_device_get_properties` (`total_memory`) follow it.
///
/// # Safety
/// `device` is a device handle.
#[no_mangle]
pub unsafe extern "C" fn dp_device_set_memory_limit(
    device: *mut dp_device_t,
    bytes: u64,
) -> dp_status_t {
    guard("dp_device_set_memory_limit", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        d.set_memory_limit((bytes != 0).then_some(bytes))
    })
}

/// Writes the device's memory limit in bytes into `*out_bytes` (0 when there is none; see
/// [`dp_device_set_memory_limit`]).
///
/// # Safety
/// `device` is a device handle; `out_bytes` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_device_memory_limit(
    device: *const dp_device_t,
    out_bytes: *mut u64,
) -> dp_status_t {
    guard("dp_device_memory_limit", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        check_out(out_bytes, "out_bytes")?;
        let limit = d.memory_limit().unwrap_or(0);
        // SAFETY: the caller's contract (checked non-NULL).
        unsafe { write_out(out_bytes, "out_bytes", limit) }
    })
}

/// Waits for all work on all streams of the device. Returns the first failure on any of them
/// not reported yet (see `dp_stream_synchronize`), once.
///
/// # Safety
/// `device` is a device handle.
#[no_mangle]
pub unsafe extern "C" fn dp_device_synchronize(device: *mut dp_device_t) -> dp_status_t {
    guard("dp_device_synchronize", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        crate::host_fn::refuse_inside(Waits::Device(device as usize))?;
        d.synchronize()
    })
}

/// Allocates `size` bytes of pinned host memory of the device's platform (fast for
/// stream-ordered copies). Free with [`dp_device_host_free`] on the same device.
///
/// # Safety
/// `device` is a device handle; `out_ptr` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_device_host_allocate(
    device: *mut dp_device_t,
    size: usize,
    out_ptr: *mut *mut std::ffi::c_void,
) -> dp_status_t {
    guard("dp_device_host_allocate", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        check_out(out_ptr, "out_ptr")?;
        let p = d.host_allocate(size as u64)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_ptr, "out_ptr", p.cast()) }
    })
}

/// Frees memory from [`dp_device_host_allocate`]; `DP_INVALID_ARGUMENT` for a pointer this
/// device did not allocate (or freed already).
///
/// # Safety
/// `device` is a device handle.
#[no_mangle]
pub unsafe extern "C" fn dp_device_host_free(
    device: *mut dp_device_t,
    ptr: *mut std::ffi::c_void,
) -> dp_status_t {
    guard("dp_device_host_free", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        if ptr.is_null() {
            return Err(bad_arg("ptr", "is NULL"));
        }
        d.host_free(ptr.cast())
    })
}

/// Returns cached, wholly free device memory to the platform.
///
/// # Safety
/// `device` is a device handle.
#[no_mangle]
pub unsafe extern "C" fn dp_device_release_cached_memory(device: *mut dp_device_t) -> dp_status_t {
    guard("dp_device_release_cached_memory", || {
        // SAFETY: the caller's contract.
        unsafe { self::device(device, "device")? }.release_cached_memory();
        Ok(())
    })
}
