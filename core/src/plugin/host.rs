//! The host side of a loaded plugin: the library, the host table handed to it, and the
//! functions of that table (`set_error`, `log`, `get_option`, `register_platform`).

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};

use devplug_plugin_abi as abi;
use parking_lot::Mutex;

use crate::error::Error;
use crate::platform::{validate_name, PlatformInfo};
use crate::plugin::executor::PlatformTable;

thread_local! {
    /// What the plugin said through `set_error` on this thread, until the host reads it.
    static PLUGIN_ERROR: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Says why a host function the plugin called failed, as if the plugin had said it through
/// `set_error`: a plugin that passes the status on passes the reason on too (one it sets
/// itself afterwards wins).
pub(crate) fn set_thread_error(message: &str) {
    PLUGIN_ERROR.with(|e| *e.borrow_mut() = Some(message.to_owned()));
}

/// Takes the message the plugin last gave on this thread.
pub(crate) fn take_plugin_error() -> Option<String> {
    PLUGIN_ERROR.with(|e| e.borrow_mut().take())
}

/// Reads a NUL-terminated string of at most `max` bytes.
///
/// # Safety
/// `p` is non-NULL and readable up to its NUL or `max` bytes, whichever comes first.
pub(crate) unsafe fn bounded_str(p: *const c_char, max: usize) -> Option<String> {
    let mut len = 0;
    // SAFETY: reads byte by byte, stopping at the NUL or the bound (the caller's contract).
    while len <= max && unsafe { *p.add(len) } != 0 {
        len += 1;
    }
    if len > max {
        return None;
    }
    // SAFETY: `len` bytes followed by a NUL were just read.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    Some(String::from_utf8_lossy(bytes).into_owned())
}

/// A platform that was registered during `init` and not yet added to the runtime.
pub(crate) struct PendingPlatform {
    pub(crate) info: PlatformInfo,
    pub(crate) table: PlatformTable,
}

/// A platform the runtime has already, for conflict checks during registration.
#[derive(Clone)]
pub(crate) struct ExistingPlatform {
    pub(crate) name: String,
    pub(crate) device_type: String,
    pub(crate) priority: i32,
    pub(crate) owner: String,
}

/// What the host table's functions work on (`dpp_host_api_t::context`).
pub(crate) struct HostContext {
    pub(crate) plugin: String,
    /// The ABI minor the plugin was built against: which dtypes it knows of.
    pub(crate) abi_minor: u32,
    /// The ABI minor this host speaks to the plugin (at least `abi_minor`): the newest, or an
    /// older one a host asked for (`RuntimeOptions::plugin_abi_minor`). Every versioned struct
    /// the host hands out or reads follows it: the host table's version, size and functions
    /// (`host_api`), how far a `dpp_kernel_t` is read and which dtypes it may name
    /// (`register_kernel`), the kernel context's size and whether `create` is ever called
    /// (`plugin::kernel`), and how far the stream executor table is read
    /// (`plugin::executor::read_executor_table`).
    pub(crate) host_minor: u32,
    options: Vec<(CString, CString)>,
    /// Whether the plugin asked for each of `options` (by index) during init.
    options_read: Vec<AtomicBool>,
    existing: Vec<ExistingPlatform>,
    in_init: AtomicBool,
    pub(crate) pending: Mutex<Vec<PendingPlatform>>,
    pub(crate) pending_kernels: Mutex<Vec<PendingKernel>>,
    /// Ops registered during init (ABI 1.2), as text: parsed when the load commits, against
    /// the runtime's ops and the ones before them.
    pub(crate) pending_ops: Mutex<Vec<crate::op::text::OpText>>,
    /// Registrations refused during init, in order: the first is the load's error if init
    /// then fails; if it succeeds, each is logged once (see `refuse`).
    pub(crate) refused: Mutex<Vec<Error>>,
}

/// A loaded, initialized plugin library. Dropped after every object of it: calls the
/// plugin's `shutdown`, then closes the library.
pub(crate) struct LoadedPlugin {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) path: std::path::PathBuf,
    pub(crate) shutdown: Option<unsafe extern "C" fn(*mut c_void)>,
    pub(crate) plugin_data: *mut c_void,
    pub(crate) initialized: bool,
    pub(crate) host_api: Box<abi::dpp_host_api_t>,
    pub(crate) context: Box<HostContext>,
    /// Kept open for as long as any object of the plugin lives; closed last (field order is
    /// drop order).
    pub(crate) _library: libloading::os::unix::Library,
}

// SAFETY: the plugin data and the host table are only passed back to the plugin, whose
// functions may be called from any thread (ABI rule); the context is Sync.
unsafe impl Send for LoadedPlugin {}
// SAFETY: as above.
unsafe impl Sync for LoadedPlugin {}

impl Drop for LoadedPlugin {
    fn drop(&mut self) {
        if self.initialized {
            if let Some(f) = self.shutdown {
                // SAFETY: every platform and device of the plugin is gone (they hold this
                // object alive); shutdown is called once.
                unsafe { f(self.plugin_data) };
                let _ = take_plugin_error();
            }
        }
        // The library is closed when `library` drops, after this body.
    }
}

impl HostContext {
    pub(crate) fn new(
        plugin: String,
        abi_minor: u32,
        host_minor: u32,
        options: &[(String, String)],
        existing: Vec<ExistingPlatform>,
    ) -> crate::Result<HostContext> {
        let mut opts = Vec::with_capacity(options.len());
        for (k, v) in options {
            let bad = || Error::invalid_argument(format!("load option '{k}' contains a NUL byte"));
            opts.push((
                CString::new(k.as_str()).map_err(|_| bad())?,
                CString::new(v.as_str()).map_err(|_| bad())?,
            ));
        }
        Ok(HostContext {
            plugin,
            abi_minor,
            host_minor,
            options_read: opts.iter().map(|_| AtomicBool::new(false)).collect(),
            options: opts,
            existing,
            in_init: AtomicBool::new(false),
            pending: Mutex::new(Vec::new()),
            pending_kernels: Mutex::new(Vec::new()),
            pending_ops: Mutex::new(Vec::new()),
            refused: Mutex::new(Vec::new()),
        })
    }

    /// The load options, as given.
    pub(crate) fn options(&self) -> impl Iterator<Item = (&str, &str)> {
        self.options
            .iter()
            .map(|(k, v)| (k.to_str().unwrap_or("?"), v.to_str().unwrap_or("?")))
    }

    /// The keys of the load options the plugin never asked for (`get_option`) during init.
    pub(crate) fn options_not_read(&self) -> Vec<&str> {
        self.options()
            .zip(&self.options_read)
            .filter(|(_, read)| !read.load(Ordering::Relaxed))
            .map(|((k, _), _)| k)
            .collect()
    }

    pub(crate) fn set_in_init(&self, v: bool) {
        self.in_init.store(v, Ordering::Release);
    }

    /// Notes a refused registration. During init it is kept for the end of the load, which
    /// reports it once (as its error, or in the log if the plugin went on without it); outside
    /// init nothing else will, so it is logged now.
    fn refuse(&self, e: Error) {
        if self.in_init.load(Ordering::Acquire) {
            self.refused.lock().push(e);
        } else {
            crate::log::warn(&e.message);
        }
    }

    /// Builds the host table pointing at this context, as a host of ABI 1.`host_minor` has
    /// it: that minor's version and `struct_size`, and the functions of later minors NULL
    /// (the table a real older host hands out ends before them).
    pub(crate) fn host_api(&self) -> abi::dpp_host_api_t {
        let since = |minor: u32| self.host_minor >= minor;
        abi::dpp_host_api_t {
            struct_size: crate::plugin::host_api_struct_size(self.host_minor),
            ext: std::ptr::null_mut(),
            abi_major: abi::DPP_ABI_MAJOR,
            abi_minor: self.host_minor,
            context: self as *const HostContext as *mut c_void,
            set_error: Some(host_set_error),
            log: Some(host_log),
            get_option: Some(host_get_option),
            register_platform: Some(host_register_platform),
            register_kernel: since(1).then_some(host_register_kernel as _),
            attr_int: since(1).then_some(crate::plugin::kernel::attr_int as _),
            attr_float: since(1).then_some(crate::plugin::kernel::attr_float as _),
            attr_bool: since(1).then_some(crate::plugin::kernel::attr_bool as _),
            attr_ints: since(1).then_some(crate::plugin::kernel::attr_ints as _),
            attr_dtype: since(1).then_some(crate::plugin::kernel::attr_dtype as _),
            register_op: since(2).then_some(host_register_op as _),
            attr_string: since(2).then_some(crate::plugin::kernel::attr_string as _),
            allocate_temp: since(4).then_some(crate::plugin::kernel::allocate_temp as _),
        }
    }

    fn register(&self, p: *const abi::dpp_platform_t) -> crate::Result<()> {
        let plugin = &self.plugin;
        let err = |field: &str, why: String| {
            Error::invalid_argument(format!("plugin '{plugin}': dpp_platform_t.{field} {why}"))
        };
        if !self.in_init.load(Ordering::Acquire) {
            return Err(Error::failed_precondition(format!(
                "plugin '{plugin}': register_platform may only be called during init"
            )));
        }
        if p.is_null() {
            return Err(Error::invalid_argument(format!(
                "plugin '{plugin}': register_platform got a NULL dpp_platform_t"
            )));
        }
        // SAFETY: non-NULL; the first field of every ABI struct is its size.
        let size = unsafe { *(p as *const usize) };
        if size < abi::DPP_PLATFORM_STRUCT_SIZE {
            return Err(err(
                "struct_size",
                format!(
                    "is {size}, smaller than the ABI 1.0 size {}",
                    abi::DPP_PLATFORM_STRUCT_SIZE
                ),
            ));
        }
        // SAFETY: the plugin declared at least the 1.0 size.
        let p = unsafe { &*p };
        let text = |field: &str, ptr: *const c_char, required: bool| -> crate::Result<String> {
            if ptr.is_null() {
                return if required {
                    Err(err(field, "is NULL".into()))
                } else {
                    Ok(String::new())
                };
            }
            // SAFETY: a string the plugin handed over, read up to a bound.
            unsafe { bounded_str(ptr, 256) }
                .ok_or_else(|| err(field, "is not NUL-terminated within 256 bytes".into()))
        };
        let name = text("name", p.name, true)?;
        validate_name("platform name", &name)
            .map_err(|e| err("name", format!("is invalid: {}", e.message)))?;
        let device_type = text("device_type", p.device_type, true)?;
        validate_name("device type", &device_type)
            .map_err(|e| err("device_type", format!("is invalid: {}", e.message)))?;
        if !(0..=1024).contains(&p.device_count) {
            return Err(err(
                "device_count",
                format!("is {}, not between 0 and 1024", p.device_count),
            ));
        }
        let create_device = p
            .create_device
            .ok_or_else(|| err("create_device", "is NULL (required)".into()))?;
        let destroy_device = p
            .destroy_device
            .ok_or_else(|| err("destroy_device", "is NULL (required)".into()))?;
        let known = abi::DPP_PLATFORM_HOST_VISIBLE | abi::DPP_PLATFORM_NO_SUBALLOCATOR;
        if p.flags & !known != 0 {
            return Err(err(
                "flags",
                format!("has unknown bits {:#x}", p.flags & !known),
            ));
        }
        let info = PlatformInfo {
            name,
            device_type,
            priority: p.priority,
            vendor: text("vendor", p.vendor, false)?,
            version: text("version", p.version, false)?,
            host_visible: p.flags & abi::DPP_PLATFORM_HOST_VISIBLE != 0,
            use_suballocator: p.flags & abi::DPP_PLATFORM_NO_SUBALLOCATOR == 0,
        };
        let mut pending = self.pending.lock();
        let others =
            self.existing
                .iter()
                .cloned()
                .chain(pending.iter().map(|q| ExistingPlatform {
                    name: q.info.name.clone(),
                    device_type: q.info.device_type.clone(),
                    priority: q.info.priority,
                    owner: format!("plugin '{plugin}'"),
                }));
        for o in others {
            if o.name == info.name {
                return Err(Error::already_exists(format!(
                    "plugin '{plugin}': platform name '{}' is already registered by {}",
                    info.name, o.owner
                )));
            }
            if o.device_type == info.device_type && o.priority == info.priority {
                return Err(Error::already_exists(format!(
                    "plugin '{plugin}': platform '{}' has device type '{}' and priority {}, the same as platform '{}' of {}; \
                     platforms of one device type need distinct priorities",
                    info.name, info.device_type, info.priority, o.name, o.owner
                )));
            }
        }
        pending.push(PendingPlatform {
            info,
            table: PlatformTable {
                device_count: p.device_count as usize,
                platform_data: p.platform_data,
                create_device,
                destroy_device,
                destroy_platform: p.destroy_platform,
            },
        });
        Ok(())
    }
}

/// A kernel registered during `init`, added to the runtime with the plugin's platforms.
pub(crate) struct PendingKernel {
    pub(crate) op: String,
    pub(crate) device_type: String,
    pub(crate) binding: crate::kernel::Binding,
    pub(crate) dtypes: Vec<crate::tensor::DType>,
    pub(crate) priority: i32,
    pub(crate) kernel_data: *mut c_void,
    pub(crate) compute: unsafe extern "C" fn(*const abi::dpp_kernel_context_t) -> abi::dpp_status_t,
    /// (1.5) Makes the kernel's state per device, input dtypes and attributes.
    pub(crate) create: Option<
        unsafe extern "C" fn(
            *const abi::dpp_kernel_create_context_t,
            *mut *mut c_void,
        ) -> abi::dpp_status_t,
    >,
    /// (1.5) Frees a state `create` made.
    pub(crate) destroy: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
}
// SAFETY: kernel data belongs to the plugin, whose compute functions may be called from any
// thread (ABI rule).
unsafe impl Send for PendingKernel {}

impl HostContext {
    /// The platforms this plugin registered so far, for messages: `ACME (type NPU), …`, or
    /// `none`.
    fn own_platforms(&self) -> String {
        let pending = self.pending.lock();
        if pending.is_empty() {
            return "none".into();
        }
        pending
            .iter()
            .map(|p| format!("{} (type {})", p.info.name, p.info.device_type))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn register_kernel(&self, k: *const abi::dpp_kernel_t) -> crate::Result<()> {
        let plugin = &self.plugin;
        if !self.in_init.load(Ordering::Acquire) {
            return Err(Error::failed_precondition(format!(
                "plugin '{plugin}': register_kernel may only be called during init"
            )));
        }
        if k.is_null() {
            return Err(Error::invalid_argument(format!(
                "plugin '{plugin}': register_kernel got a NULL dpp_kernel_t"
            )));
        }
        // SAFETY: non-NULL; struct_size is the first field.
        let size = unsafe { *(k as *const usize) };
        if size < abi::DPP_KERNEL_STRUCT_SIZE_1_1 {
            // Nothing past struct_size may be read, the op's name included.
            return Err(Error::invalid_argument(format!(
                "plugin '{plugin}': a kernel's dpp_kernel_t.struct_size is {size}, smaller than \
                 the ABI 1.1 size {} (its op is not read; set struct_size = \
                 DPP_KERNEL_STRUCT_SIZE)",
                abi::DPP_KERNEL_STRUCT_SIZE_1_1
            )));
        }
        // As far as the plugin's struct reaches (a plugin older than 1.5 has no `create` and
        // `destroy`), and as far as this host's minor defines it (a host speaking 1.4 or older
        // reads 80 bytes: a plugin's `create` and `destroy` are ignored, not refused): the
        // fields past it stay NULL.
        // SAFETY: all-zero is a valid dpp_kernel_t (NULL pointers, no functions).
        let mut copy: abi::dpp_kernel_t = unsafe { std::mem::zeroed() };
        let known = if self.host_minor >= 5 {
            std::mem::size_of::<abi::dpp_kernel_t>()
        } else {
            abi::DPP_KERNEL_STRUCT_SIZE_1_1
        };
        let n = size.min(known);
        // SAFETY: the plugin declared `size >= n` readable bytes at `k`.
        unsafe { std::ptr::copy_nonoverlapping(k as *const u8, &mut copy as *mut _ as *mut u8, n) };
        let k = &copy;
        // A string from the plugin, read up to a bound: `Err` with why it is unreadable.
        let text = |ptr: *const c_char| -> std::result::Result<Option<String>, String> {
            if ptr.is_null() {
                return Ok(None);
            }
            // SAFETY: a string from the plugin, read up to a bound.
            unsafe { bounded_str(ptr, 256) }
                .map(Some)
                .ok_or_else(|| "is not NUL-terminated within 256 bytes".to_string())
        };
        // Every refusal names the kernel, as far as its op and device type are readable.
        let (op, device_type) = (text(k.op), text(k.device_type));
        let who = format!(
            "kernel {} on {}",
            match &op {
                Ok(Some(op)) => op.as_str(),
                _ => "(op unreadable)",
            },
            match &device_type {
                Ok(Some(t)) if validate_name("device type", t).is_ok() => t.clone(),
                Ok(Some(t)) => format!("'{t}'"),
                _ => "(device type unreadable)".to_string(),
            }
        );
        let err = |field: &str, why: String| {
            Error::invalid_argument(format!(
                "plugin '{plugin}': {who}: dpp_kernel_t.{field} {why}"
            ))
        };
        let op = op
            .map_err(|why| err("op", why))?
            .ok_or_else(|| err("op", "is NULL".into()))?;
        let device_type = device_type
            .map_err(|why| err("device_type", why))?
            .ok_or_else(|| err("device_type", "is NULL".into()))?;
        validate_name("device type", &device_type)
            .map_err(|e| err("device_type", format!("is invalid: {}", e.message)))?;
        let compute = k
            .compute
            .ok_or_else(|| err("compute", "is NULL (required)".into()))?;
        if k.destroy.is_some() && k.create.is_none() {
            return Err(err(
                "destroy",
                "is set but create is NULL (destroy frees what create made)".into(),
            ));
        }
        if k.create.is_some() && k.destroy.is_none() {
            crate::log::warn(&format!(
                "plugin '{plugin}': {who}: dpp_kernel_t.create is set but destroy is NULL: the \
                 host cannot free the states create makes (each one leaks unless it is NULL)"
            ));
        }
        let (own, of_type): (Vec<String>, Option<String>) = {
            let pending = self.pending.lock();
            let own = pending
                .iter()
                .filter(|p| p.info.device_type == device_type)
                .map(|p| p.info.name.clone())
                .collect();
            let platform = text(k.platform).ok().flatten();
            let of_type = platform.and_then(|name| {
                pending
                    .iter()
                    .find(|p| p.info.name == name)
                    .map(|p| p.info.device_type.clone())
            });
            (own, of_type)
        };
        let register_first = || {
            format!(
                "register the platform before its kernels (it registered: {})",
                self.own_platforms()
            )
        };
        let binding = match text(k.platform).map_err(|why| err("platform", why))? {
            Some(p) if p == "ANY" => {
                return Err(err(
                    "platform",
                    "is \"ANY\": a plugin's kernels are bound to its own platforms (\"ANY\" is reserved \
                     for kernels the host registers, which need no device handles)"
                        .into(),
                ))
            }
            Some(p) if own.contains(&p) => crate::kernel::Binding::Platform(p),
            Some(p) => {
                let why = match &of_type {
                    Some(t) => format!(
                        "is '{p}', a platform of type {t}, not {device_type}: give the kernel its \
                         platform's device type"
                    ),
                    None => format!(
                        "is '{p}', but this plugin has registered no platform '{p}' (yet): {}",
                        register_first()
                    ),
                };
                return Err(err("platform", why));
            }
            None if own.len() == 1 => crate::kernel::Binding::Platform(own[0].clone()),
            None if own.is_empty() => {
                return Err(err(
                    "platform",
                    format!(
                        "is NULL, and this plugin has registered no platform of type \
                         {device_type} (yet): {}",
                        register_first()
                    ),
                ))
            }
            None => {
                return Err(err(
                    "platform",
                    format!(
                        "is NULL, but this plugin registered {} platforms of type {device_type} \
                         ({}): name one",
                        own.len(),
                        own.join(", ")
                    ),
                ))
            }
        };
        if k.num_dtypes > 0 && k.dtypes.is_null() {
            return Err(err(
                "dtypes",
                format!("is NULL but num_dtypes is {}", k.num_dtypes),
            ));
        }
        if k.num_dtypes > 64 {
            return Err(err(
                "num_dtypes",
                format!("is {}, more than there are dtypes", k.num_dtypes),
            ));
        }
        let mut dtypes = Vec::with_capacity(k.num_dtypes);
        for i in 0..k.num_dtypes {
            // SAFETY: `dtypes` holds `num_dtypes` values (checked non-NULL above).
            let d = unsafe { *k.dtypes.add(i) };
            let dtype = crate::tensor::DType::from_i32(d)
                // F16 and BF16 arrived in ABI 1.3: a host of an older minor does not know
                // them, and refuses them as it refuses any value that is no DPP_DTYPE_*.
                .filter(|d| self.host_minor >= 3 || !d.is_half());
            dtypes.push(dtype.ok_or_else(|| {
                let why = if self.host_minor < 3 && crate::tensor::DType::from_i32(d).is_some() {
                    format!(
                        " of ABI {}.{} (f16 and bf16, 7 and 8, arrived in ABI 1.3)",
                        abi::DPP_ABI_MAJOR,
                        self.host_minor
                    )
                } else {
                    String::new()
                };
                err(
                    &format!("dtypes[{i}]"),
                    format!("is {d}, not a DPP_DTYPE_* value{why}"),
                )
            })?);
        }
        // An empty list takes every dtype of the op; from a plugin older than ABI 1.3, every
        // one but f16 and bf16 (`crate::plugin::commit_kernels` says which, when the load
        // commits and the op is known).
        self.pending_kernels.lock().push(PendingKernel {
            op,
            device_type,
            binding,
            dtypes,
            priority: k.priority,
            kernel_data: k.kernel_data,
            compute,
            create: k.create,
            destroy: k.destroy,
        });
        Ok(())
    }
}

unsafe extern "C" fn host_register_kernel(
    context: *mut c_void,
    kernel: *const abi::dpp_kernel_t,
) -> abi::dpp_status_t {
    // SAFETY: see `context`.
    let Some(ctx) = (unsafe { self::context(context) }) else {
        return abi::DPP_INVALID_ARGUMENT;
    };
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.register_kernel(kernel)))
            .unwrap_or_else(|_| Err(Error::internal("register_kernel panicked")));
    match result {
        Ok(()) => abi::DPP_OK,
        Err(e) => {
            let code = e.code;
            ctx.refuse(e);
            code as abi::dpp_status_t
        }
    }
}

/// The longest text of one field of a `dpp_op_def_t` (a body of many statements).
const OP_TEXT_MAX: usize = 64 * 1024;

impl HostContext {
    fn register_op(&self, d: *const abi::dpp_op_def_t) -> crate::Result<()> {
        let plugin = &self.plugin;
        let err = |field: &str, why: String| {
            Error::invalid_argument(format!("plugin '{plugin}': dpp_op_def_t.{field} {why}"))
        };
        if !self.in_init.load(Ordering::Acquire) {
            return Err(Error::failed_precondition(format!(
                "plugin '{plugin}': register_op may only be called during init"
            )));
        }
        if d.is_null() {
            return Err(Error::invalid_argument(format!(
                "plugin '{plugin}': register_op got a NULL dpp_op_def_t"
            )));
        }
        // SAFETY: non-NULL; struct_size is the first field.
        let size = unsafe { *(d as *const usize) };
        if size < abi::DPP_OP_DEF_STRUCT_SIZE {
            return Err(err(
                "struct_size",
                format!(
                    "is {size}, smaller than the ABI 1.2 size {}",
                    abi::DPP_OP_DEF_STRUCT_SIZE
                ),
            ));
        }
        // SAFETY: the plugin declared at least the 1.2 size.
        let d = unsafe { &*d };
        let text = |field: &str, ptr: *const c_char, required: bool| -> crate::Result<String> {
            if ptr.is_null() {
                return if required {
                    Err(err(field, "is NULL".into()))
                } else {
                    Ok(String::new())
                };
            }
            // SAFETY: a string from the plugin, read up to a bound.
            unsafe { bounded_str(ptr, OP_TEXT_MAX) }.ok_or_else(|| {
                err(
                    field,
                    format!("is not NUL-terminated within {OP_TEXT_MAX} bytes"),
                )
            })
        };
        let op = crate::op::text::OpText {
            name: text("name", d.name, true)?,
            inputs: text("inputs", d.inputs, false)?,
            outputs: text("outputs", d.outputs, true)?,
            type_vars: text("type_vars", d.type_vars, false)?,
            attrs: text("attrs", d.attrs, false)?,
            body: text("body", d.body, true)?,
        };
        let mut pending = self.pending_ops.lock();
        if pending.iter().any(|p| p.name.trim() == op.name.trim()) {
            return Err(Error::already_exists(format!(
                "plugin '{plugin}': op '{}' is registered twice",
                op.name.trim()
            )));
        }
        pending.push(op);
        Ok(())
    }
}

unsafe extern "C" fn host_register_op(
    context: *mut c_void,
    op: *const abi::dpp_op_def_t,
) -> abi::dpp_status_t {
    // SAFETY: see `context`.
    let Some(ctx) = (unsafe { self::context(context) }) else {
        return abi::DPP_INVALID_ARGUMENT;
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.register_op(op)))
        .unwrap_or_else(|_| Err(Error::internal("register_op panicked")));
    match result {
        Ok(()) => abi::DPP_OK,
        Err(e) => {
            let code = e.code;
            ctx.refuse(e);
            code as abi::dpp_status_t
        }
    }
}

/// # Safety
/// `context` is the `HostContext` of the plugin's host table.
unsafe fn context<'a>(context: *mut c_void) -> Option<&'a HostContext> {
    // SAFETY: the host table's context is a live HostContext (it lives as long as the
    // plugin); NULL is tolerated.
    unsafe { (context as *const HostContext).as_ref() }
}

unsafe extern "C" fn host_set_error(_context: *mut c_void, message: *const c_char) {
    let text = if message.is_null() {
        "(NULL message)".to_string()
    } else {
        // SAFETY: a string from the plugin, read up to a bound.
        unsafe { bounded_str(message, 4096) }
            .unwrap_or_else(|| "(message not NUL-terminated)".into())
    };
    PLUGIN_ERROR.with(|e| *e.borrow_mut() = Some(text));
}

unsafe extern "C" fn host_log(context: *mut c_void, level: i32, message: *const c_char) {
    let level = match level {
        abi::DPP_LOG_ERROR => crate::log::Level::Error,
        abi::DPP_LOG_WARN => crate::log::Level::Warn,
        abi::DPP_LOG_INFO => crate::log::Level::Info,
        _ => crate::log::Level::Debug,
    };
    if message.is_null() || !crate::log::enabled(level) {
        return;
    }
    // SAFETY: see `context`.
    let plugin = unsafe { self::context(context) }.map_or("?", |c| c.plugin.as_str());
    // SAFETY: a string from the plugin, read up to a bound.
    let text = unsafe { bounded_str(message, 4096) }.unwrap_or_default();
    crate::log::log_from(level, &format!("plugin '{plugin}'"), &text);
}

unsafe extern "C" fn host_get_option(context: *mut c_void, key: *const c_char) -> *const c_char {
    // SAFETY: see `context`.
    let Some(ctx) = (unsafe { self::context(context) }) else {
        return std::ptr::null();
    };
    if key.is_null() {
        return std::ptr::null();
    }
    // SAFETY: a NUL-terminated key from the plugin.
    let key = unsafe { CStr::from_ptr(key) };
    let Some(i) = ctx.options.iter().position(|(k, _)| k.as_c_str() == key) else {
        return std::ptr::null();
    };
    ctx.options_read[i].store(true, Ordering::Relaxed);
    ctx.options[i].1.as_ptr()
}

unsafe extern "C" fn host_register_platform(
    context: *mut c_void,
    platform: *const abi::dpp_platform_t,
) -> abi::dpp_status_t {
    // SAFETY: see `context`.
    let Some(ctx) = (unsafe { self::context(context) }) else {
        return abi::DPP_INVALID_ARGUMENT;
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.register(platform)))
        .unwrap_or_else(|_| Err(Error::internal("register_platform panicked")));
    match result {
        Ok(()) => abi::DPP_OK,
        Err(e) => {
            let code = e.code;
            ctx.refuse(e);
            code as abi::dpp_status_t
        }
    }
}

/// A loaded plugin as hosts see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    /// The name the plugin gave itself (`devplug_sim`): the kernel source `plugin 'NAME'`.
    pub name: String,
    /// The version the plugin reports.
    pub version: String,
    /// The file it was loaded from.
    pub path: std::path::PathBuf,
    /// The platforms it registered.
    pub platforms: Vec<String>,
    /// The ops it defined (plugin ABI 1.2), in order.
    pub ops: Vec<String>,
}

/// A plugin that failed to load, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginFailure {
    /// The file (or search-path entry) that failed.
    pub path: std::path::PathBuf,
    /// Why: its code and message, as the load returned it.
    pub error: Error,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table a host of each minor hands out: that minor's version and size, and exactly
    /// the functions that lie within that size set (the ones after it NULL, as a real host of
    /// that minor has no such fields).
    #[test]
    fn the_host_table_is_the_one_of_the_hosts_minor() {
        use std::mem::offset_of;
        type T = abi::dpp_host_api_t;
        let sizes = [64, 112, 128, 128, 136, 136];
        assert_eq!(sizes.len() as u32, crate::plugin::NEWEST_ABI_MINOR + 1);
        assert_eq!(sizes[sizes.len() - 1], abi::DPP_HOST_API_STRUCT_SIZE);
        for minor in 0..=crate::plugin::NEWEST_ABI_MINOR {
            let cx = HostContext::new("t".into(), 0, minor, &[], Vec::new()).unwrap();
            let t = cx.host_api();
            assert_eq!((t.abi_major, t.abi_minor), (abi::DPP_ABI_MAJOR, minor));
            assert_eq!(t.struct_size, sizes[minor as usize], "1.{minor}");
            let set = [
                (offset_of!(T, set_error), t.set_error.is_some()),
                (offset_of!(T, log), t.log.is_some()),
                (offset_of!(T, get_option), t.get_option.is_some()),
                (
                    offset_of!(T, register_platform),
                    t.register_platform.is_some(),
                ),
                (offset_of!(T, register_kernel), t.register_kernel.is_some()),
                (offset_of!(T, attr_int), t.attr_int.is_some()),
                (offset_of!(T, attr_float), t.attr_float.is_some()),
                (offset_of!(T, attr_bool), t.attr_bool.is_some()),
                (offset_of!(T, attr_ints), t.attr_ints.is_some()),
                (offset_of!(T, attr_dtype), t.attr_dtype.is_some()),
                (offset_of!(T, register_op), t.register_op.is_some()),
                (offset_of!(T, attr_string), t.attr_string.is_some()),
                (offset_of!(T, allocate_temp), t.allocate_temp.is_some()),
            ];
            for (i, (offset, is_set)) in set.into_iter().enumerate() {
                let within = offset + std::mem::size_of::<usize>() <= t.struct_size;
                assert_eq!(is_set, within, "1.{minor}: function {i} at offset {offset}");
            }
        }
    }
}
