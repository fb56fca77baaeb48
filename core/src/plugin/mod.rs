//! Device plugins: loading a library, checking what it hands over, and turning its platforms
//! into the core's [`Platform`](crate::platform::Platform)s.
//!
//! The host's rule (RELIABILITY.md): a broken plugin costs that plugin and nothing else. Every
//! refusal names the plugin, the struct and the field; the runtime keeps a list of failures.

mod discovery;
pub(crate) mod elf;
mod executor;
mod host;
mod kernel;
pub(crate) mod kernel_state;

use std::ffi::c_void;
use std::path::Path;
use std::sync::{Arc, Weak};

use devplug_plugin_abi as abi;

use crate::error::{Code, Error, Result};
use crate::kernel::KernelDef;
use crate::op::TypeVar;
pub use discovery::{
    plugin_path_from_env, process_is_elevated, search_path_candidates, trusted_env, PLUGIN_PATH_ENV,
};
pub(crate) use executor::PluginPlatform;
use host::{bounded_str, take_plugin_error, HostContext};
pub(crate) use host::{ExistingPlatform, LoadedPlugin};
pub use host::{PluginFailure, PluginInfo};

/// A plugin just loaded: the library with its init done, its platforms and its kernels (not yet
/// added to any runtime).
/// What a successful init registered: the plugin, its platforms, its kernels and its ops (as
/// text, parsed when the runtime commits them).
pub(crate) type Loaded = (
    Arc<LoadedPlugin>,
    Vec<Arc<PluginPlatform>>,
    Vec<KernelDef>,
    Vec<crate::op::text::OpText>,
);

/// The newest plugin ABI minor, the one a host speaks by default. A host may speak any older
/// minor N instead (`RuntimeOptions::plugin_abi_minor`, for conformance checks): it then hands
/// out and reads each versioned struct as ABI 1.N defines it, as a real 1.N host would (see
/// `HostContext::host_minor` and where it is read).
pub(crate) const NEWEST_ABI_MINOR: u32 = abi::DPP_ABI_MINOR;

/// `dpp_host_api_t::struct_size` in ABI 1.`minor`.
pub(crate) const fn host_api_struct_size(minor: u32) -> usize {
    match minor {
        0 => abi::DPP_HOST_API_STRUCT_SIZE_1_0,
        1 => abi::DPP_HOST_API_STRUCT_SIZE_1_1,
        2 | 3 => abi::DPP_HOST_API_STRUCT_SIZE_1_2,
        _ => abi::DPP_HOST_API_STRUCT_SIZE_1_4,
    }
}

/// The library at `path`, opened, with the static description its entry returned (non-NULL,
/// holding at least `struct_size`, `ext` and the version) and that description's
/// `struct_size`.
struct Opened {
    library: libloading::os::unix::Library,
    api: *const abi::dpp_plugin_api_t,
    size: usize,
}

/// The end of the version fields of `dpp_plugin_api_t`: struct_size, ext, abi_major, abi_minor.
const VERSION_END: usize = 24;

/// Opens the library at `path` and calls its entry (no other plugin code runs).
fn open(path: &Path, shown: &str) -> Result<Opened> {
    if !path.is_absolute() {
        return Err(Error::invalid_argument(format!(
            "plugin path '{shown}' is relative; relative plugin paths are never resolved against the working directory"
        )));
    }
    if !path.exists() {
        return Err(Error::not_found(format!("plugin '{shown}': no such file")));
    }
    elf::check(path).map_err(|why| {
        Error::invalid_argument(format!("plugin '{shown}': cannot load the library: {why}"))
    })?;
    // Called as a function below: data there (a Rust `static`, a C table exported under the
    // entry's name) would be executed.
    if elf::symbol_kind(path, abi::DPP_ENTRY_SYMBOL) == Some(elf::SymbolKind::Data) {
        return Err(Error::invalid_argument(format!(
            "plugin '{shown}': its '{entry}' is data, not a function: export `const \
             dpp_plugin_api_t *{entry}(void)` returning the table (as the C++ and Rust \
             SDKs' plugin macros do)",
            entry = abi::DPP_ENTRY_SYMBOL
        )));
    }
    // SAFETY: opening a library runs its initializers; that is what loading a plugin means.
    // RTLD_LOCAL keeps its symbols out of the global namespace; RTLD_NOW finds missing
    // symbols now rather than mid-call.
    let library = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
    }
    .map_err(|e| {
        // libloading's Display says only "dlopen failed"; the reason is its source.
        let why = std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string());
        Error::invalid_argument(format!("plugin '{shown}': cannot load the library: {why}"))
    })?;
    // SAFETY: the symbol's type is the ABI's entry type (a C function without arguments).
    let entry: abi::dpp_entry_fn = match unsafe {
        library.get::<unsafe extern "C" fn() -> *const abi::dpp_plugin_api_t>(
            abi::DPP_ENTRY_SYMBOL.as_bytes(),
        )
    } {
        Ok(f) => Some(*f),
        Err(_) => {
            return Err(Error::not_found(format!(
                "plugin '{shown}': no devplug entry point: the library does not export '{}'",
                abi::DPP_ENTRY_SYMBOL
            )))
        }
    };
    let entry = entry.ok_or_else(|| Error::internal("entry symbol vanished"))?;
    // SAFETY: the plugin's entry function, as the ABI defines it.
    let api = unsafe { entry() };
    if api.is_null() {
        return Err(Error::invalid_argument(format!(
            "plugin '{shown}': {}() returned NULL",
            abi::DPP_ENTRY_SYMBOL
        )));
    }
    // SAFETY: non-NULL; struct_size is the first field of every ABI struct.
    let size = unsafe { *(api as *const usize) };
    if size < VERSION_END {
        return Err(Error::invalid_argument(format!(
            "plugin '{shown}': dpp_plugin_api_t.struct_size is {size}, smaller than the smallest supported size {}",
            abi::DPP_PLUGIN_API_STRUCT_SIZE
        )));
    }
    Ok(Opened { library, api, size })
}

/// The plugin ABI version `(major, minor)` the plugin at `path` declares in its
/// `dpp_plugin_api_t`, read without running its `init` (the library is opened, its entry
/// called, and the library closed again).
pub(crate) fn declared_version(path: &Path) -> Result<(u32, u32)> {
    let shown = path.display().to_string();
    let opened = open(path, &shown)?;
    // SAFETY: `open` checked that the version fields are present.
    let version = unsafe { ((*opened.api).abi_major, (*opened.api).abi_minor) };
    drop(opened.library);
    Ok(version)
}

/// Opens `path`, checks the plugin's version and description, runs its `init` with
/// `options`, and returns its platforms (not yet added to any runtime). On any failure,
/// whatever the plugin registered is rolled back and the library is closed.
///
/// The host speaks plugin ABI 1.`host_minor` (at most [`NEWEST_ABI_MINOR`]): it refuses a
/// plugin of a newer minor, and hands out and reads every versioned struct as that minor
/// defines it.
pub(crate) fn load(
    path: &Path,
    options: &[(String, String)],
    existing: Vec<ExistingPlatform>,
    host_minor: u32,
) -> Result<Loaded> {
    let shown = path.display().to_string();
    let Opened { library, api, size } = open(path, &shown)?;
    // SAFETY: at least the version fields are present (checked by `open`).
    let (major, minor) = unsafe { ((*api).abi_major, (*api).abi_minor) };
    if major != abi::DPP_ABI_MAJOR || minor > host_minor {
        let why = if major != abi::DPP_ABI_MAJOR {
            "the major versions differ"
        } else {
            "the plugin's minor version is newer"
        };
        return Err(Error::new(
            Code::AbiMismatch,
            format!(
                "plugin '{shown}': built against plugin ABI {major}.{minor}, but this host implements ABI {}.{host_minor} ({why})",
                abi::DPP_ABI_MAJOR,
            ),
        ));
    }
    if size < abi::DPP_PLUGIN_API_STRUCT_SIZE {
        return Err(Error::invalid_argument(format!(
            "plugin '{shown}': dpp_plugin_api_t.struct_size is {size}, smaller than the ABI 1.0 size {}",
            abi::DPP_PLUGIN_API_STRUCT_SIZE
        )));
    }
    // SAFETY: the whole ABI 1.0 struct is present; it is static in the library.
    let api = unsafe { &*api };
    let field_err = |field: &str, why: &str| {
        Error::invalid_argument(format!("plugin '{shown}': dpp_plugin_api_t.{field} {why}"))
    };
    if api.name.is_null() {
        return Err(field_err("name", "is NULL"));
    }
    // SAFETY: a string from the plugin, read up to a bound.
    let name = unsafe { bounded_str(api.name, 64) }
        .ok_or_else(|| field_err("name", "is not NUL-terminated within 64 bytes"))?;
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(field_err(
            "name",
            &format!("'{name}' is invalid: it must match [A-Za-z0-9_.-]+"),
        ));
    }
    let version = if api.version.is_null() {
        String::new()
    } else {
        // SAFETY: as above.
        unsafe { bounded_str(api.version, 64) }
            .ok_or_else(|| field_err("version", "is not NUL-terminated within 64 bytes"))?
    };
    let init = api
        .init
        .ok_or_else(|| field_err("init", "is NULL (required)"))?;

    let context = Box::new(HostContext::new(
        name.clone(),
        minor,
        host_minor,
        options,
        existing,
    )?);
    let host_api = Box::new(context.host_api());
    let mut plugin = LoadedPlugin {
        name: name.clone(),
        version,
        path: path.to_path_buf(),
        shutdown: api.shutdown,
        plugin_data: std::ptr::null_mut(),
        initialized: false,
        host_api,
        context,
        _library: library,
    };
    plugin.context.set_in_init(true);
    let _ = take_plugin_error();
    let mut data: *mut c_void = std::ptr::null_mut();
    // SAFETY: the plugin's init with a host table that outlives the plugin.
    let status = unsafe { init(&*plugin.host_api, &mut data) };
    plugin.context.set_in_init(false);
    let message = take_plugin_error();
    let pending = std::mem::take(&mut *plugin.context.pending.lock());
    let pending_kernels = std::mem::take(&mut *plugin.context.pending_kernels.lock());
    let pending_ops = std::mem::take(&mut *plugin.context.pending_ops.lock());
    if status != abi::DPP_OK {
        for p in &pending {
            if let Some(f) = p.table.destroy_platform {
                // SAFETY: rolls back a platform the failed init registered.
                unsafe { f(p.table.platform_data) };
            }
        }
        let _ = take_plugin_error();
        let refused = std::mem::take(&mut *plugin.context.refused.lock());
        let more = refused.len().saturating_sub(1);
        let refused = refused.into_iter().next().map(|mut first| {
            if more > 0 {
                first.message.push_str(&format!(
                    " (and {more} more refused registration{})",
                    if more == 1 { "" } else { "s" }
                ));
            }
            first
        });
        let code = match Code::from_i32(status) {
            Some(Code::Ok) | None => Code::Internal,
            Some(c) => c,
        };
        let unknown = if Code::from_i32(status).is_none() {
            format!(" (the plugin returned the unknown status {status})")
        } else {
            String::new()
        };
        return Err(match (refused, message) {
            (Some(r), Some(m)) => {
                Error::new(r.code, format!("{} (init then failed: {m})", r.message))
            }
            (Some(r), None) => r,
            (None, m) => Error::new(
                code,
                format!(
                    "plugin '{name}' ({shown}): init failed: {}{unknown}",
                    m.unwrap_or_else(|| format!("status {status} and no message"))
                ),
            ),
        });
    }
    // Options the plugin never asked for are most likely misspelt (`device_count` for
    // `devices`): a plugin reads the options it knows during init.
    let unread = plugin.context.options_not_read();
    if !unread.is_empty() {
        crate::log::warn(&format!(
            "plugin '{name}' ({shown}) did not read the load option{} {} during init: a typo? \
             (a plugin reads the options it knows while it initializes; it documents them)",
            if unread.len() == 1 { "" } else { "s" },
            unread
                .iter()
                .map(|k| format!("'{k}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // The plugin went on without what was refused: say so, once each.
    for e in std::mem::take(&mut *plugin.context.refused.lock()) {
        crate::log::warn(&format!(
            "plugin '{name}' ({shown}) loaded without a registration the host refused: {}",
            e.message
        ));
    }
    plugin.plugin_data = data;
    plugin.initialized = true;
    let plugin = Arc::new(plugin);
    let platforms = pending
        .into_iter()
        .map(|p| {
            Arc::new_cyclic(|me: &Weak<PluginPlatform>| PluginPlatform {
                me: me.clone(),
                info: p.info,
                plugin: plugin.clone(),
                table: p.table,
            })
        })
        .collect();
    let kernels = pending_kernels
        .into_iter()
        .map(|k| kernel::kernel_def(&plugin, k))
        .collect();
    Ok((plugin, platforms, kernels, pending_ops))
}

/// Checks a plugin's kernels against their ops when its load commits (the ops are known only
/// then: a kernel may be for an op the plugin registered after it). `op_type_var(op)` gives
/// the op's first type variable, the one kernels are chosen by (its name and the dtypes it
/// takes; `None` for an op without one, like Fill), or the error for an unknown op.
///
/// A dtype the kernel names that the op does not take is refused, naming the kernel, the op,
/// the dtype and the dtypes the op takes (like TensorFlow's check of a kernel's type
/// constraint): such a kernel could never run. A kernel for every dtype (an empty list) from a
/// plugin older than ABI 1.3 takes the dtypes of its ABI (no f16, no bf16) that the op takes.
pub(crate) fn commit_kernels(
    plugin: &LoadedPlugin,
    kernels: &mut [KernelDef],
    op_type_var: &dyn Fn(&str) -> Result<Option<TypeVar>>,
) -> Result<()> {
    use crate::tensor::DType;
    for k in kernels.iter_mut() {
        let type_var = op_type_var(&k.op)?;
        if k.dtypes.is_empty() && plugin.context.abi_minor < 3 {
            // Every dtype of its ABI: the six before the halves, those of them the op takes.
            let known = DType::BEFORE_HALVES.iter().copied();
            k.dtypes = match &type_var {
                Some(var) => known.filter(|d| var.allowed.contains(d)).collect(),
                None => known.collect(),
            };
            if k.dtypes.is_empty() {
                // The op takes only dtypes the plugin does not know (halves): a list no
                // tensor of the op matches, so the kernel never runs.
                k.dtypes = DType::BEFORE_HALVES.to_vec();
            }
            continue;
        }
        let Some(var) = type_var else {
            continue;
        };
        if let Some((i, d)) = var.first_not_taken(&k.dtypes) {
            return Err(Error::invalid_argument(format!(
                "plugin '{}': kernel {} on {}: dpp_kernel_t.dtypes[{i}] is {}, which op {} does \
                 not take (its type variable {} takes {}): list only dtypes the op takes",
                plugin.name,
                k.op,
                k.device_type,
                d.name(),
                k.op,
                var.name,
                var.allowed_names()
            )));
        }
    }
    Ok(())
}

/// The identity of a file (device and inode), so that one file reached through two paths is
/// loaded once.
pub(crate) fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
