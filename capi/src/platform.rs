//! `dp_runtime_platform_count` and `dp_runtime_platform_info`: listing a runtime's platforms
//! (the built-in `HOST` and those plugins registered), with or without devices.

use std::ffi::c_char;

use crate::handle::{self, check_out, cstring};
use crate::runtime::{dp_runtime_t, runtime_obj};
use crate::status::{dp_status_t, guard};

/// A platform, as [`dp_runtime_platform_info`] reports it. Set `struct_size` before the call;
/// the runtime fills the fields that fit. Strings stay valid until the runtime is destroyed.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_platform_info_t {
    /// Set by the caller: `sizeof(dp_platform_info_t)`.
    pub struct_size: usize,
    /// The platform's name, e.g. `"HOST"`, `"SIM"`, `"CUDA"`; `"NAME:i"` names its devices.
    pub name: *const c_char,
    /// The device type users place on, e.g. `"CPU"`, `"GPU"`.
    pub device_type: *const c_char,
    /// Who makes the devices (free text).
    pub vendor: *const c_char,
    /// The platform's own version (free text).
    pub version: *const c_char,
    /// The name of the plugin that registered it (as `dp_plugin_info_t.name`), or
    /// `"built-in"` for the runtime's own `HOST` platform.
    pub plugin: *const c_char,
    /// Among the platforms of one device type, the highest priority is what `"TYPE:i"` means.
    pub priority: i32,
    /// 1 when this is that platform: `"TYPE:i"` resolves to its devices.
    pub is_active: u32,
    /// How many devices it has; 0 is possible (e.g. the CUDA plugin on a machine without a
    /// GPU). They are among `dp_runtime_device`'s, as `"NAME:0"` … `"NAME:<count - 1>"`.
    pub device_count: usize,
    /// 1 when its device memory is host memory.
    pub host_visible: u32,
}

/// Writes the number of platforms of the runtime into `*out_count`: the built-in `HOST` and
/// every platform a plugin registered, those without devices included.
///
/// # Safety
/// `runtime` is a runtime handle; `out_count` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_platform_count(
    runtime: *const dp_runtime_t,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_runtime_platform_count", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_count, "out_count")?;
        let n = rt.runtime().platforms().len();
        // SAFETY: the caller's contract.
        unsafe { handle::write_out(out_count, "out_count", n) }
    })
}

/// Describes platform `index` into `*out_info` (whose `struct_size` the caller set; at least
/// `sizeof(size_t)`). Platforms are in registration order: `HOST` is 0, then the platforms of
/// each plugin in the order the plugins loaded (a plugin's own in the order it registered
/// them) — the order `dp_runtime_device` lists their devices in. Platforms are never removed
/// and a plugin loaded later appends its own, so an index names the same platform for the
/// runtime's life. `DP_OUT_OF_RANGE` past the end; nothing is written on failure.
///
/// # Safety
/// `runtime` is a runtime handle; `out_info` points to a `dp_platform_info_t` with
/// `struct_size` set, writable for that many bytes.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_platform_info(
    runtime: *const dp_runtime_t,
    index: usize,
    out_info: *mut dp_platform_info_t,
) -> dp_status_t {
    guard("dp_runtime_platform_info", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_info, "out_info")?;
        let platforms = rt.runtime().platforms();
        let p = platforms.get(index).ok_or_else(|| {
            let n = platforms.len();
            let s = if n == 1 { "" } else { "s" };
            handle::past_the_end(
                "platform",
                index,
                format!("the runtime has {n} platform{s}"),
            )
        })?;
        let i = &p.info;
        // Platform names are unique in a runtime: the plugin that registered this name.
        let plugin = rt
            .runtime()
            .plugins()
            .into_iter()
            .find(|pl| pl.platforms.contains(&i.name))
            .map_or_else(|| "built-in".to_string(), |pl| pl.name);
        let [name, device_type, vendor, version, plugin] = rt.keep([
            cstring(&i.name),
            cstring(&i.device_type),
            cstring(&i.vendor),
            cstring(&i.version),
            cstring(&plugin),
        ]);
        let info = dp_platform_info_t {
            struct_size: std::mem::size_of::<dp_platform_info_t>(),
            name,
            device_type,
            vendor,
            version,
            plugin,
            priority: i.priority,
            is_active: p.is_active() as u32,
            device_count: p.platform.device_count(),
            host_visible: i.host_visible as u32,
        };
        // SAFETY: the caller's contract.
        unsafe { handle::write_sized(out_info, info, std::mem::size_of::<usize>(), "out_info") }
    })
}
