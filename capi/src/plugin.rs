//! `dp_runtime_load_plugin` and friends: loading device plugins and listing what loaded and
//! what failed.

use std::ffi::c_char;

use crate::handle::{self, check_out, cstring};
use crate::runtime::{dp_runtime_t, runtime_obj};
use crate::status::{bad_arg, dp_status_t, guard};

/// A loaded plugin, as [`dp_runtime_plugin_info`] reports it. Set `struct_size` before the
/// call. Strings stay valid until the runtime is destroyed.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_plugin_info_t {
    /// Set by the caller: `sizeof(dp_plugin_info_t)`.
    pub struct_size: usize,
    /// The plugin's name.
    pub name: *const c_char,
    /// The plugin's version string.
    pub version: *const c_char,
    /// The path it was loaded from.
    pub path: *const c_char,
    /// Number of platforms it registered.
    pub platform_count: usize,
    /// Number of ops it defined (plugin ABI 1.2); their names: [`dp_runtime_plugin_op`].
    /// Written only when `struct_size` covers it (callers built before it was added get the
    /// fields above).
    pub op_count: usize,
}

/// A failed plugin load, as [`dp_runtime_plugin_failure`] reports it. Set `struct_size`
/// before the call. Strings stay valid until the runtime is destroyed.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_plugin_failure_t {
    /// Set by the caller: `sizeof(dp_plugin_failure_t)`.
    pub struct_size: usize,
    /// The path (or search path entry) that failed.
    pub path: *const c_char,
    /// Why, as a status code.
    pub status: dp_status_t,
    /// Why, in words: names the plugin, and the struct and field at fault.
    pub message: *const c_char,
}

/// Loads a device plugin from an absolute `path`. `options` holds `option_count` strings of
/// the form `"key=value"` handed to the plugin (may be NULL when the count is 0). Loading the
/// same file again with the same options (in any order) returns `DP_OK` and changes nothing;
/// with other options it is `DP_ALREADY_EXISTS` (a library is loaded once per runtime, so they
/// could not apply). On failure only this plugin is lost: the runtime keeps working and lists
/// the failure (see [`dp_runtime_plugin_failure`]); the failure is logged at `info` only (the
/// caller has the status and message).
///
/// # Safety
/// `runtime` is a runtime handle; `path` a NUL-terminated string; `options` NULL or
/// `option_count` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_load_plugin(
    runtime: *mut dp_runtime_t,
    path: *const c_char,
    options: *const *const c_char,
    option_count: usize,
) -> dp_status_t {
    guard("dp_runtime_load_plugin", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        // SAFETY: the caller's contract.
        let path = unsafe { handle::c_str(path, "path")? };
        if option_count > 0 && options.is_null() {
            return Err(bad_arg(
                "options",
                &format!("is NULL but option_count is {option_count}"),
            ));
        }
        let mut pairs: Vec<(String, String)> = Vec::with_capacity(option_count);
        for i in 0..option_count {
            // SAFETY: `options` holds `option_count` entries (the caller's contract).
            let entry = unsafe { *options.add(i) };
            // SAFETY: each entry is a NUL-terminated string.
            let text = unsafe { handle::c_str(entry, &format!("options[{i}]"))? };
            let (k, v) = text.split_once('=').ok_or_else(|| {
                bad_arg(
                    &format!("options[{i}]"),
                    &format!("is '{text}', not of the form key=value"),
                )
            })?;
            pairs.push((k.to_string(), v.to_string()));
        }
        let refs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let result = rt.runtime().load_plugin(path, &refs).map(|_| ());
        rt.refresh();
        result
    })
}

/// Loads every plugin of a `:`-separated search path of absolute files or folders (folders:
/// their `*.so` files, sorted). Returns `DP_OK` even when some fail; they are listed by
/// [`dp_runtime_plugin_failure`].
///
/// # Safety
/// `runtime` is a runtime handle; `search_path` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_load_plugin_path(
    runtime: *mut dp_runtime_t,
    search_path: *const c_char,
) -> dp_status_t {
    guard("dp_runtime_load_plugin_path", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        // SAFETY: the caller's contract.
        let path = unsafe { handle::c_str(search_path, "search_path")? };
        rt.runtime().load_search_path(path);
        rt.refresh();
        Ok(())
    })
}

/// Writes the number of loaded plugins into `*out_count`.
///
/// # Safety
/// `runtime` is a runtime handle; `out_count` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_plugin_count(
    runtime: *const dp_runtime_t,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_runtime_plugin_count", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        let n = rt.runtime().plugins().len();
        // SAFETY: the caller's contract.
        unsafe { handle::write_out(out_count, "out_count", n) }
    })
}

/// Describes loaded plugin `index` (load order); `DP_OUT_OF_RANGE` past the end.
///
/// # Safety
/// `runtime` is a runtime handle; `out_info` points to a `dp_plugin_info_t` with
/// `struct_size` set.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_plugin_info(
    runtime: *const dp_runtime_t,
    index: usize,
    out_info: *mut dp_plugin_info_t,
) -> dp_status_t {
    guard("dp_runtime_plugin_info", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_info, "out_info")?;
        let plugins = rt.runtime().plugins();
        let p = plugins.get(index).ok_or_else(|| {
            handle::past_the_end("plugin", index, format!("{} loaded", plugins.len()))
        })?;
        let [name, version, path] = rt.keep([
            cstring(&p.name),
            cstring(&p.version),
            cstring(&p.path.display().to_string()),
        ]);
        let info = dp_plugin_info_t {
            struct_size: std::mem::size_of::<dp_plugin_info_t>(),
            name,
            version,
            path,
            platform_count: p.platforms.len(),
            op_count: p.ops.len(),
        };
        // SAFETY: the caller's contract.
        unsafe { handle::write_sized(out_info, info, std::mem::size_of::<usize>(), "out_info") }
    })
}

/// Writes the name of op `op_index` that loaded plugin `plugin_index` defined (in the order
/// it registered them; see `dp_plugin_info_t.op_count`) into `*out_name`, a string valid
/// until the runtime is destroyed. Run it by that name (`dp_runtime_find_op`).
/// `DP_OUT_OF_RANGE` when either index is past the end; nothing is written on failure.
///
/// # Safety
/// `runtime` is a runtime handle; `out_name` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_plugin_op(
    runtime: *const dp_runtime_t,
    plugin_index: usize,
    op_index: usize,
    out_name: *mut *const c_char,
) -> dp_status_t {
    guard("dp_runtime_plugin_op", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_name, "out_name")?;
        let plugins = rt.runtime().plugins();
        let p = plugins.get(plugin_index).ok_or_else(|| {
            handle::past_the_end("plugin", plugin_index, format!("{} loaded", plugins.len()))
        })?;
        let op = p.ops.get(op_index).ok_or_else(|| {
            let defined = format!("plugin '{}' defined {} op(s)", p.name, p.ops.len());
            handle::past_the_end("op", op_index, defined)
        })?;
        let [name] = rt.keep([cstring(op)]);
        // SAFETY: the caller's contract.
        unsafe { handle::write_out(out_name, "out_name", name) }
    })
}

/// Writes the number of failed plugin loads into `*out_count`.
///
/// # Safety
/// `runtime` is a runtime handle; `out_count` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_plugin_failure_count(
    runtime: *const dp_runtime_t,
    out_count: *mut usize,
) -> dp_status_t {
    guard("dp_runtime_plugin_failure_count", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        let n = rt.runtime().plugin_failures().len();
        // SAFETY: the caller's contract.
        unsafe { handle::write_out(out_count, "out_count", n) }
    })
}

/// Describes failed load `index` (in order); `DP_OUT_OF_RANGE` past the end.
///
/// # Safety
/// `runtime` is a runtime handle; `out_failure` points to a `dp_plugin_failure_t` with
/// `struct_size` set.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_plugin_failure(
    runtime: *const dp_runtime_t,
    index: usize,
    out_failure: *mut dp_plugin_failure_t,
) -> dp_status_t {
    guard("dp_runtime_plugin_failure", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_failure, "out_failure")?;
        let failures = rt.runtime().plugin_failures();
        let f = failures.get(index).ok_or_else(|| {
            handle::past_the_end("failure", index, format!("{} recorded", failures.len()))
        })?;
        let [path, message] = rt.keep([
            cstring(&f.path.display().to_string()),
            cstring(&f.error.message),
        ]);
        let out = dp_plugin_failure_t {
            struct_size: std::mem::size_of::<dp_plugin_failure_t>(),
            path,
            status: f.error.code as dp_status_t,
            message,
        };
        // SAFETY: the caller's contract.
        unsafe {
            handle::write_sized(
                out_failure,
                out,
                std::mem::size_of::<usize>(),
                "out_failure",
            )
        }
    })
}
