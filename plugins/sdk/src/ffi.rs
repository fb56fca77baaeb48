//! The boundary with the host: every `extern "C"` trampoline, and all of the SDK's `unsafe`
//! code (the rest of the crate is safe Rust).
//!
//! Every trampoline runs the plugin's code inside `catch_unwind`: an `Err` becomes
//! `host.set_error(message)` + its code, a panic becomes `DPP_INTERNAL` with the panic message.
//! The trampolines are generic over the plugin's types, so the host calls the plugin's
//! methods directly (no second dynamic dispatch); handles the host passes back are checked
//! (NULL, wrong kind, another device) before they are used.
//!
//! `AssertUnwindSafe` everywhere: after a panic the plugin object may be half-updated; the
//! host sees `INTERNAL` and decides what to do with the device. Nothing of the SDK's own
//! state is left inconsistent by a panic in plugin code.

use std::any::{Any, TypeId};
use std::ffi::{c_char, c_void, CStr, CString};
use std::fmt;
use std::mem::{offset_of, size_of};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use devplug_plugin_abi as abi;
use parking_lot::{Mutex, RwLock};

use crate::device::{AllocatorStats, Device, DeviceAddr, EventStatus, MemoryUsage};
use crate::error::{Error, Result, Status};
use crate::host::{Host, LogLevel};
use crate::platform::Platform;

pub(crate) mod kernel;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

// ---------------------------------------------------------------------------------------------
// Panics

/// The text of a panic payload. Drops the payload without letting a panicking `Drop` escape.
pub(crate) fn panic_text(payload: Box<dyn Any + Send>) -> String {
    let text = if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    };
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
    text
}

/// Runs `f`; a panic (in the SDK's own code around the plugin's, which has its own, more
/// precise handler) yields `fallback`.
fn boundary<R>(fallback: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let _ = panic_text(payload);
            fallback
        }
    }
}

/// A C string from `s`; interior NULs (which C cannot carry) become `\0`.
fn c_string_lossy(s: &str) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The host

type SetErrorFn = unsafe extern "C" fn(abi::dpp_host_context_t, *const c_char);
type LogFn = unsafe extern "C" fn(abi::dpp_host_context_t, i32, *const c_char);
type GetOptionFn = unsafe extern "C" fn(abi::dpp_host_context_t, *const c_char) -> *const c_char;
type RegisterPlatformFn =
    unsafe extern "C" fn(abi::dpp_host_context_t, *const abi::dpp_platform_t) -> abi::dpp_status_t;

/// A platform this plugin registered (for the binding checks of kernel registration).
pub(crate) struct OwnPlatform {
    pub(crate) name: String,
    pub(crate) device_type: String,
    /// `TypeId` of the platform's `Device` type.
    pub(crate) device: TypeId,
    pub(crate) device_name: &'static str,
}

/// Something the plugin handed the host that must live until shutdown (a kernel's
/// `kernel_data`): a pointer and the function that frees it.
pub(crate) struct Owned {
    ptr: *mut c_void,
    free: unsafe fn(*mut c_void),
}

// SAFETY: the pointee is a boxed `Send + Sync` kernel entry (see `kernel::register`).
unsafe impl Send for Owned {}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: `free` is the function that matches how `ptr` was made (a Box of a known
        // type), called once: `Owned` is neither Clone nor Copy.
        unsafe { (self.free)(self.ptr) };
    }
}

/// What the SDK keeps of the host table: one per successful `init`, shared (`Arc`) by the
/// plugin data, every platform, device, kernel and [`Logger`](crate::Logger) of that init.
pub(crate) struct HostShared {
    plugin: &'static str,
    context: abi::dpp_host_context_t,
    abi_version: (u32, u32),
    /// The host table's `struct_size` (1.0: 64 bytes, without the kernel functions).
    table_size: usize,
    set_error: Option<SetErrorFn>,
    log: Option<LogFn>,
    get_option: Option<GetOptionFn>,
    register_platform: Option<RegisterPlatformFn>,
    /// The functions of ABI 1.1 and later: `None` when the host's table is too small to hold
    /// them.
    kernel_fns: kernel::HostKernelFns,
    /// The platforms registered through this host (during init).
    platforms: Mutex<Vec<OwnPlatform>>,
    /// Kernel data the host holds until shutdown (freed by `retire`).
    owned: Mutex<Vec<Owned>>,
    /// False once the host table may be gone (after `shutdown`, or after a failed `init`):
    /// `set_error` and `log` then do nothing. Held for reading during each call into the host.
    alive: RwLock<bool>,
}

// SAFETY: `context` is the host's opaque pointer; the ABI lets `set_error`, `log` and the
// `attr_*` readers be called from any thread at any time while the table is valid, which
// `alive` guards. `get_option`, `register_platform` and `register_kernel` are only reachable
// through `Host`, which is neither Send nor Sync and lives only during the init call.
unsafe impl Send for HostShared {}
// SAFETY: as above; all fields are immutable except `alive`, `platforms` and `owned`, which
// are behind locks.
unsafe impl Sync for HostShared {}

impl HostShared {
    /// Reads the host table.
    ///
    /// # Safety
    /// `host` is non-NULL and points to a host table valid for `struct_size` bytes.
    unsafe fn from_raw(
        host: *const abi::dpp_host_api_t,
        plugin: &'static str,
    ) -> std::result::Result<HostShared, abi::dpp_status_t> {
        // SAFETY: the caller guarantees `host` is readable at least up to its `struct_size`
        // field, which every version of the table starts with.
        let size = unsafe { ptr::addr_of!((*host).struct_size).read() };
        if size < abi::DPP_HOST_API_STRUCT_SIZE_1_0 {
            if size >= offset_of!(abi::dpp_host_api_t, set_error) + size_of::<Option<SetErrorFn>>()
            {
                // SAFETY: `set_error` and `context` lie within `size` bytes.
                let (set_error, context) = unsafe {
                    (
                        ptr::addr_of!((*host).set_error).read(),
                        ptr::addr_of!((*host).context).read(),
                    )
                };
                if let Some(set_error) = set_error {
                    let msg = c_string_lossy(&format!(
                        "the host's dpp_host_api_t.struct_size is {size}, smaller than ABI 1.0's {}",
                        abi::DPP_HOST_API_STRUCT_SIZE_1_0
                    ));
                    // SAFETY: a host function with its own context and a NUL-terminated string.
                    unsafe { set_error(context, msg.as_ptr()) };
                }
            }
            return Err(abi::DPP_ABI_MISMATCH);
        }
        // Fields are read one by one: the host's table may be an ABI 1.0 one, shorter than
        // this crate's `dpp_host_api_t` (no reference to the whole struct is made).
        macro_rules! field {
            ($name:ident) => {
                // SAFETY: every ABI 1.0 field lies within `size` (checked above).
                unsafe { ptr::addr_of!((*host).$name).read() }
            };
        }
        let shared = HostShared {
            plugin,
            context: field!(context),
            abi_version: (field!(abi_major), field!(abi_minor)),
            table_size: size,
            set_error: field!(set_error),
            log: field!(log),
            get_option: field!(get_option),
            register_platform: field!(register_platform),
            // SAFETY: `host` is valid for `size` bytes.
            kernel_fns: unsafe { kernel::HostKernelFns::read(host, size) },
            platforms: Mutex::new(Vec::new()),
            owned: Mutex::new(Vec::new()),
            alive: RwLock::new(true),
        };
        let (major, minor) = shared.abi_version;
        if major != abi::DPP_ABI_MAJOR {
            shared.set_error(&format!(
                "built for plugin ABI {}.{}, the host has {major}.{minor}",
                abi::DPP_ABI_MAJOR,
                abi::DPP_ABI_MINOR,
            ));
            return Err(abi::DPP_ABI_MISMATCH);
        }
        Ok(shared)
    }

    pub(crate) fn plugin_name(&self) -> &'static str {
        self.plugin
    }

    pub(crate) fn abi_version(&self) -> (u32, u32) {
        self.abi_version
    }

    /// The host table's `struct_size`.
    pub(crate) fn table_size(&self) -> usize {
        self.table_size
    }

    /// Whether the host's table has `register_kernel` (ABI 1.1).
    pub(crate) fn supports_kernels(&self) -> bool {
        self.kernel_fns.supports_kernels()
    }

    /// Whether the host's table has `register_op` (ABI 1.2).
    pub(crate) fn supports_ops(&self) -> bool {
        self.kernel_fns.register_op.is_some()
    }

    /// Frees what the host held until now (kernel data), then stops all calls into the host
    /// (the table may be gone from now on). Called once the host can no longer call the
    /// plugin's kernels: at shutdown, or when init failed (the host rolled back).
    fn retire(&self) {
        let owned = std::mem::take(&mut *self.owned.lock());
        // A kernel closure's Drop may panic: it must not escape.
        self.call_void("drop of the kernels", move || drop(owned));
        self.platforms.lock().clear();
        *self.alive.write() = false;
    }

    pub(crate) fn set_error(&self, message: &str) {
        let alive = self.alive.read();
        if let (true, Some(set_error)) = (*alive, self.set_error) {
            let msg = c_string_lossy(message);
            // SAFETY: the table is valid while `alive`; the host copies the string.
            unsafe { set_error(self.context, msg.as_ptr()) };
        }
    }

    pub(crate) fn log(&self, level: LogLevel, message: &str) {
        let alive = self.alive.read();
        if let (true, Some(log)) = (*alive, self.log) {
            let msg = c_string_lossy(message);
            // SAFETY: the table is valid while `alive`; the host copies the string.
            unsafe { log(self.context, level as i32, msg.as_ptr()) };
        }
    }

    pub(crate) fn get_option(&self, key: &str) -> Option<String> {
        let get_option = self.get_option?;
        let key = CString::new(key).ok()?;
        // SAFETY: called during init (only `Host` reaches this), with a NUL-terminated key.
        let value = unsafe { get_option(self.context, key.as_ptr()) };
        if value.is_null() {
            return None;
        }
        // SAFETY: the host returns a NUL-terminated string valid during init; copied at once.
        Some(
            unsafe { CStr::from_ptr(value) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// Writes the error through `set_error` and returns its code.
    fn report(&self, error: &Error) -> abi::dpp_status_t {
        self.set_error(error.message());
        error.code().code()
    }

    /// Reports a panic of plugin code through `set_error`. The host puts the plugin's name and
    /// the function in front of the message (`plugin 'x': memset: `), so it says neither.
    fn report_panic(&self, payload: Box<dyn Any + Send>) -> abi::dpp_status_t {
        self.report(&Error::from_panic(payload))
    }

    /// Logs a panic of plugin code in `what`. The host puts the plugin's name in front of a
    /// log line (`plugin 'x': `), not the function, so the line names `what`.
    fn log_panic(&self, what: &str, payload: Box<dyn Any + Send>) {
        self.log(
            LogLevel::Error,
            &format!("panic in {what}: {}", panic_text(payload)),
        );
    }

    /// A registration the SDK refuses itself, before asking the host: logs it as a warning
    /// now (the host never hears of it otherwise, so a plugin that ignores the `Err` would
    /// go on without it unseen) and returns the error for the plugin.
    pub(crate) fn refuse(&self, error: Error) -> Error {
        self.log(
            LogLevel::Warn,
            &format!(
                "registration refused by the SDK, nothing was registered: {}",
                error.message()
            ),
        );
        error
    }

    /// Runs plugin code `f` for a host call: its result or its panic as a status.
    fn call(&self, f: impl FnOnce() -> Result<()>) -> abi::dpp_status_t {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(())) => abi::DPP_OK,
            Ok(Err(e)) => self.report(&e),
            Err(payload) => self.report_panic(payload),
        }
    }

    /// [`call`](Self::call) for a kernel's `compute` or `create` of op `op`: the host puts
    /// `kernel <op>: ` (and `create: `) in front of the message, so a message that begins so
    /// (the SDK's own, `KernelArgs`'s, or the plugin's) is passed without it, not doubled.
    fn call_kernel(&self, op: &str, f: impl FnOnce() -> Result<()>) -> abi::dpp_status_t {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(Ok(())) => abi::DPP_OK,
            Ok(Err(e)) => {
                let m = e.message();
                let m = m
                    .strip_prefix("kernel ")
                    .and_then(|m| m.strip_prefix(op))
                    .and_then(|m| m.strip_prefix(": "))
                    .map_or(m, |m| m.strip_prefix("create: ").unwrap_or(m));
                self.set_error(m);
                e.code().code()
            }
            Err(payload) => self.report_panic(payload),
        }
    }

    /// Runs plugin code `f` for the host call `what`, which cannot fail: a panic is logged.
    fn call_void(&self, what: &str, f: impl FnOnce()) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
            self.log_panic(what, payload);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The plugin table and its init / shutdown

/// What `devplug_plugin!` defines for a plugin.
#[doc(hidden)]
pub trait PluginDef: 'static {
    const NAME: &'static str;
    const C_NAME: &'static CStr;
    const C_VERSION: &'static CStr;
    /// The ABI minor the plugin declares (at most `abi::DPP_ABI_MINOR`).
    const ABI_MINOR: u32;
    fn init(host: &Host) -> Result<()>;
}

/// `s` (which ends in its NUL) as a C string, at compile time: a name must match
/// `[A-Za-z0-9_.-]+`; any string must have no interior NUL.
#[doc(hidden)]
pub const fn plugin_c_str(s: &'static str, is_name: bool) -> &'static CStr {
    let bytes = s.as_bytes();
    if is_name {
        if bytes.len() < 2 {
            panic!("devplug_plugin!: the plugin name is empty");
        }
        let mut i = 0;
        while i + 1 < bytes.len() {
            let b = bytes[i];
            if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-') {
                panic!("devplug_plugin!: the plugin name must match [A-Za-z0-9_.-]+");
            }
            i += 1;
        }
    }
    match CStr::from_bytes_with_nul(bytes) {
        Ok(c) => c,
        Err(_) => panic!("devplug_plugin!: a NUL inside the name or version"),
    }
}

/// The plugin's static `dpp_plugin_api_t`.
#[doc(hidden)]
#[repr(transparent)]
pub struct PluginApi(abi::dpp_plugin_api_t);

// SAFETY: the table is immutable; its pointers are to 'static C strings and to functions.
unsafe impl Sync for PluginApi {}

impl PluginApi {
    pub const fn new<P: PluginDef>() -> PluginApi {
        if P::ABI_MINOR > abi::DPP_ABI_MINOR {
            panic!("devplug_plugin!: abi_minor is newer than this SDK's plugin ABI");
        }
        PluginApi(abi::dpp_plugin_api_t {
            struct_size: size_of::<abi::dpp_plugin_api_t>(),
            ext: ptr::null_mut(),
            abi_major: abi::DPP_ABI_MAJOR,
            abi_minor: P::ABI_MINOR,
            name: P::C_NAME.as_ptr(),
            version: P::C_VERSION.as_ptr(),
            init: Some(plugin_init::<P>),
            shutdown: Some(plugin_shutdown),
        })
    }

    pub const fn as_ptr(&'static self) -> *const abi::dpp_plugin_api_t {
        &self.0
    }
}

unsafe extern "C" fn plugin_init<P: PluginDef>(
    host: *const abi::dpp_host_api_t,
    out_plugin_data: *mut *mut c_void,
) -> abi::dpp_status_t {
    boundary(abi::DPP_INTERNAL, || {
        if host.is_null() {
            return abi::DPP_INVALID_ARGUMENT;
        }
        // SAFETY: the host passes its table, valid from init until after shutdown.
        let shared = match unsafe { HostShared::from_raw(host, P::NAME) } {
            Ok(shared) => Arc::new(shared),
            Err(status) => return status,
        };
        if out_plugin_data.is_null() {
            shared.set_error("out_plugin_data is NULL");
            shared.retire();
            return abi::DPP_INVALID_ARGUMENT;
        }
        let host_obj = Host::new(Arc::clone(&shared));
        let status = shared.call(|| P::init(&host_obj));
        drop(host_obj);
        if status == abi::DPP_OK {
            // SAFETY: checked non-NULL; the host passes a writable pointer. The Arc is
            // released in `plugin_shutdown`.
            unsafe { out_plugin_data.write(Arc::into_raw(shared).cast_mut().cast()) };
        } else {
            // The host rolls back what init registered (each platform holds its own Arc) and
            // will not call shutdown: no more calls into the host from loggers.
            shared.retire();
        }
        status
    })
}

unsafe extern "C" fn plugin_shutdown(plugin_data: *mut c_void) {
    boundary((), || {
        if plugin_data.is_null() {
            return;
        }
        // SAFETY: `plugin_data` is what `plugin_init` wrote: an `Arc<HostShared>` turned into
        // a raw pointer, released here exactly once.
        let shared = unsafe { Arc::from_raw(plugin_data.cast_const().cast::<HostShared>()) };
        shared.retire();
    })
}

// ---------------------------------------------------------------------------------------------
// Handles: platforms, devices, streams, events

const PLATFORM_MAGIC: u64 = u64::from_be_bytes(*b"dpPLATFM");
const DEVICE_MAGIC: u64 = u64::from_be_bytes(*b"dpDEVICE");
const STREAM_MAGIC: u64 = u64::from_be_bytes(*b"dpSTREAM");
const EVENT_MAGIC: u64 = u64::from_be_bytes(*b"dpEVENT_");
const DEAD_MAGIC: u64 = u64::from_be_bytes(*b"dpDEAD__");

/// `platform_data` of a registered platform. `repr(C)` keeps `magic` first for every `P`.
#[repr(C)]
struct PlatformEntry<P: Platform> {
    magic: u64,
    host: Arc<HostShared>,
    device_count: i32,
    platform: P,
}

/// `device_data` of a device; its address is the stream/event owner check. `repr(C)` keeps
/// `magic` and `device_type` at the same offsets for every `D`.
#[repr(C)]
struct DeviceState<D: Device> {
    magic: u64,
    /// `TypeId::of::<D>()`: a kernel checks the device it is given is of its type.
    device_type: TypeId,
    host: Arc<HostShared>,
    se: abi::dpp_stream_executor_t,
    /// hardware_name, vendor, pci_bus_id: the device struct points into these.
    _strings: Vec<CString>,
    device: D,
}

/// A stream or an event, as the host holds it.
#[repr(C)]
struct HandleBox<T> {
    magic: u64,
    owner: *const c_void,
    value: T,
}

fn handle_kind(magic: u64) -> &'static str {
    if magic == STREAM_MAGIC {
        "stream"
    } else {
        "event"
    }
}

/// The value behind a stream/event handle of device `owner`.
///
/// # Safety
/// `handle` is NULL or a pointer the host received from this SDK (possibly of another kind,
/// another device, or destroyed: those are detected while the memory is still mapped).
unsafe fn handle_ref<'a, T>(
    handle: *mut c_void,
    magic: u64,
    owner: *const c_void,
    what: &str,
) -> Result<&'a T> {
    let kind = handle_kind(magic);
    if handle.is_null() {
        return Err(Error::invalid_argument(format!(
            "{what}: the {kind} is NULL"
        )));
    }
    let b = handle.cast::<HandleBox<T>>();
    // SAFETY: per the caller, `handle` points to an SDK handle box; `magic` is its first
    // field (repr(C)) in every kind of box, so reading it is valid before the kind is known.
    let found = unsafe { ptr::addr_of!((*b).magic).read() };
    if found != magic {
        return Err(Error::invalid_argument(format!(
            "{what}: the {kind} handle is not a live {kind} (destroyed, or another kind of handle)"
        )));
    }
    // SAFETY: the magic says this is a live HandleBox<T> of this kind.
    let b = unsafe { &*b };
    if b.owner != owner {
        return Err(Error::invalid_argument(format!(
            "{what}: the {kind} belongs to another device"
        )));
    }
    Ok(&b.value)
}

/// Takes back a stream/event handle (for destroy).
///
/// # Safety
/// As [`handle_ref`]; and no other call uses the handle concurrently.
unsafe fn handle_take<T>(
    handle: *mut c_void,
    magic: u64,
    owner: *const c_void,
    what: &str,
) -> Result<T> {
    // SAFETY: forwarded.
    unsafe { handle_ref::<T>(handle, magic, owner, what) }?;
    // SAFETY: checked live and ours: a box from `handle_new`, released here once.
    let mut b = unsafe { Box::from_raw(handle.cast::<HandleBox<T>>()) };
    b.magic = DEAD_MAGIC;
    Ok(b.value)
}

fn handle_new<T>(value: T, magic: u64, owner: *const c_void) -> *mut c_void {
    Box::into_raw(Box::new(HandleBox {
        magic,
        owner,
        value,
    }))
    .cast()
}

/// The device behind `device_data`.
///
/// # Safety
/// `device` is NULL or the `device_data` of a device this SDK created (the host passes each
/// table's own devices to it, and a kernel bound to a platform of this plugin that platform's
/// devices). Its `Device` type is checked.
unsafe fn device_state<'a, D: Device>(device: *mut c_void) -> Option<&'a DeviceState<D>> {
    if device.is_null() {
        return None;
    }
    let state = device.cast::<DeviceState<D>>();
    // SAFETY: per the caller; `magic` is the first field.
    if unsafe { ptr::addr_of!((*state).magic).read() } != DEVICE_MAGIC {
        return None;
    }
    // SAFETY: a live DeviceState of some device type; `device_type` has the same offset in
    // every DeviceState (repr(C), after a u64).
    if unsafe { ptr::addr_of!((*state).device_type).read() } != TypeId::of::<D>() {
        return None;
    }
    // SAFETY: a live DeviceState<D>.
    Some(unsafe { &*state })
}

/// Runs `f` on the device for a host call.
///
/// # Safety
/// As [`device_state`].
unsafe fn device_call<D: Device>(
    device: *mut c_void,
    f: impl FnOnce(&DeviceState<D>) -> Result<()>,
) -> abi::dpp_status_t {
    boundary(abi::DPP_INTERNAL, || {
        // SAFETY: forwarded from the caller.
        match unsafe { device_state::<D>(device) } {
            Some(state) => state.host.call(|| f(state)),
            None => abi::DPP_INVALID_ARGUMENT,
        }
    })
}

/// Like [`device_call`] for functions that cannot fail: errors and panics are logged.
///
/// # Safety
/// As [`device_state`].
unsafe fn device_call_void<D: Device>(
    device: *mut c_void,
    what: &str,
    f: impl FnOnce(&DeviceState<D>) -> Result<()>,
) {
    boundary((), || {
        // SAFETY: forwarded from the caller.
        if let Some(state) = unsafe { device_state::<D>(device) } {
            state.host.call_void(what, || {
                if let Err(e) = f(state) {
                    state
                        .host
                        .log(LogLevel::Error, &format!("{what}: {}", e.message()));
                }
            });
        }
    })
}

impl<D: Device> DeviceState<D> {
    fn owner(&self) -> *const c_void {
        ptr::from_ref(self).cast()
    }

    /// # Safety
    /// As [`handle_ref`].
    unsafe fn stream<'a>(&'a self, stream: *mut c_void, what: &str) -> Result<&'a D::Stream> {
        // SAFETY: forwarded.
        unsafe { handle_ref(stream, STREAM_MAGIC, self.owner(), what) }
    }

    /// # Safety
    /// As [`handle_ref`].
    unsafe fn event<'a>(&'a self, event: *mut c_void, what: &str) -> Result<&'a D::Event> {
        // SAFETY: forwarded.
        unsafe { handle_ref(event, EVENT_MAGIC, self.owner(), what) }
    }
}

// ---------------------------------------------------------------------------------------------
// Platforms

/// Registers `platform` with the host (see [`Host::register_platform`]).
pub(crate) fn register_platform<P: Platform>(shared: &Arc<HostShared>, platform: P) -> Result<()> {
    let register = shared.register_platform.ok_or_else(|| {
        shared.refuse(Error::failed_precondition(format!(
            "platform {}: the host table has no register_platform",
            platform.name()
        )))
    })?;
    let c = |what: &str, s: &str| {
        CString::new(s).map_err(|_| {
            shared.refuse(Error::invalid_argument(format!(
                "platform {what} {s:?} contains a NUL"
            )))
        })
    };
    let name_str = platform.name().to_owned();
    let device_type_str = platform.device_type().to_owned();
    let name = c("name", &name_str)?;
    let device_type = c("device_type", &device_type_str)?;
    let vendor = platform.vendor().map(|v| c("vendor", v)).transpose()?;
    let version = platform.version().map(|v| c("version", v)).transpose()?;
    let priority = platform.priority();
    let flags = platform.flags().bits();
    let device_count = platform.device_count();

    let entry = Box::into_raw(Box::new(PlatformEntry {
        magic: PLATFORM_MAGIC,
        host: Arc::clone(shared),
        device_count,
        platform,
    }));
    let desc = abi::dpp_platform_t {
        struct_size: size_of::<abi::dpp_platform_t>(),
        ext: ptr::null_mut(),
        name: name.as_ptr(),
        device_type: device_type.as_ptr(),
        priority,
        flags,
        vendor: vendor.as_ref().map_or(ptr::null(), |v| v.as_ptr()),
        version: version.as_ref().map_or(ptr::null(), |v| v.as_ptr()),
        device_count,
        platform_data: entry.cast(),
        create_device: Some(platform_create_device::<P>),
        destroy_device: Some(platform_destroy_device::<P>),
        destroy_platform: Some(platform_destroy::<P>),
    };
    // SAFETY: during init (only `Host` reaches this); `desc` and its strings outlive the call.
    let status = unsafe { register(shared.context, &desc) };
    if status == abi::DPP_OK {
        // The host owns `entry` now and releases it through `destroy_platform`.
        shared.platforms.lock().push(OwnPlatform {
            name: name_str,
            device_type: device_type_str,
            device: TypeId::of::<P::Device>(),
            device_name: std::any::type_name::<P::Device>(),
        });
        return Ok(());
    }
    // Refused: the host keeps nothing of it.
    // SAFETY: `entry` came from Box::into_raw above and the host did not take it.
    let entry = unsafe { Box::from_raw(entry) };
    shared.call_void("drop of a refused platform", move || drop(entry));
    let code = Status::from_code(status).unwrap_or(Status::Internal);
    Err(Error::new(
        code,
        format!("the host refused platform {name_str} ({code}, status {status})"),
    ))
}

/// Hands an op definition to the host (`register_op`, ABI 1.2).
pub(crate) fn register_op(shared: &HostShared, def: &crate::op::OpDef<'_>) -> Result<()> {
    let Some(register) = shared.kernel_fns.register_op else {
        return Err(shared.refuse(Error::unimplemented(format!(
            "cannot register op {}: the host's dpp_host_api_t is {} bytes, without \
             register_op; ops need plugin ABI 1.2",
            def.name, shared.table_size
        ))));
    };
    let c = |field: &str, s: &str| {
        CString::new(s).map_err(|_| {
            shared.refuse(Error::invalid_argument(format!(
                "op {}: {field} contains a NUL",
                def.name
            )))
        })
    };
    let name = c("name", def.name)?;
    let inputs = c("inputs", def.inputs)?;
    let outputs = c("outputs", def.outputs)?;
    let type_vars = c("type_vars", def.type_vars)?;
    let attrs = c("attrs", def.attrs)?;
    let body = c("body", def.body)?;
    let desc = abi::dpp_op_def_t {
        struct_size: size_of::<abi::dpp_op_def_t>(),
        ext: ptr::null_mut(),
        name: name.as_ptr(),
        inputs: inputs.as_ptr(),
        outputs: outputs.as_ptr(),
        type_vars: type_vars.as_ptr(),
        attrs: attrs.as_ptr(),
        body: body.as_ptr(),
    };
    // SAFETY: during init (only `Host` reaches this); `desc` and its strings outlive the call
    // (the host copies them).
    let status = unsafe { register(shared.context, &desc) };
    if status == abi::DPP_OK {
        return Ok(());
    }
    let code = Status::from_code(status).unwrap_or(Status::Internal);
    Err(Error::new(
        code,
        format!("the host refused op {} ({code}, status {status})", def.name),
    ))
}

/// # Safety
/// `platform_data` is NULL or what `register_platform` gave the host for a `P`.
unsafe fn platform_entry<'a, P: Platform>(
    platform_data: *mut c_void,
) -> Option<&'a PlatformEntry<P>> {
    if platform_data.is_null() {
        return None;
    }
    let entry = platform_data.cast::<PlatformEntry<P>>();
    // SAFETY: per the caller; `magic` is the first field.
    if unsafe { ptr::addr_of!((*entry).magic).read() } != PLATFORM_MAGIC {
        return None;
    }
    // SAFETY: a live PlatformEntry<P>.
    Some(unsafe { &*entry })
}

unsafe extern "C" fn platform_create_device<P: Platform>(
    platform_data: *mut c_void,
    ordinal: i32,
    device: *mut abi::dpp_device_t,
) -> abi::dpp_status_t {
    boundary(abi::DPP_INTERNAL, || {
        // SAFETY: the host passes the platform_data it registered.
        let Some(entry) = (unsafe { platform_entry::<P>(platform_data) }) else {
            return abi::DPP_INVALID_ARGUMENT;
        };
        entry.host.call(|| {
            if device.is_null() {
                return Err(Error::invalid_argument("create_device: device is NULL"));
            }
            // SAFETY: non-NULL; the host allocated the struct and set its `struct_size`.
            let size = unsafe { ptr::addr_of!((*device).struct_size).read() };
            if size < abi::DPP_DEVICE_STRUCT_SIZE {
                return Err(Error::invalid_argument(format!(
                    "create_device: dpp_device_t.struct_size is {size}, smaller than ABI 1.0's {}",
                    abi::DPP_DEVICE_STRUCT_SIZE
                )));
            }
            if ordinal < 0 || ordinal >= entry.device_count {
                return Err(Error::invalid_argument(format!(
                    "create_device: ordinal {ordinal} out of range (the platform has {} devices)",
                    entry.device_count
                )));
            }
            let dev = entry.platform.create_device(ordinal)?;
            let info = dev.info();
            let mut strings = Vec::new();
            let mut keep = |what: &str, s: Option<String>| -> Result<*const c_char> {
                match s {
                    None => Ok(ptr::null()),
                    Some(s) => {
                        let c = CString::new(s).map_err(|_| {
                            Error::invalid_argument(format!("device {what} contains a NUL"))
                        })?;
                        let p = c.as_ptr();
                        strings.push(c);
                        Ok(p)
                    }
                }
            };
            let hardware_name = keep("hardware_name", info.hardware_name)?;
            let vendor = keep("vendor", info.vendor)?;
            let pci_bus_id = keep("pci_bus_id", info.pci_bus_id)?;
            let se = executor_table::<P::Device>(&dev);
            let state = Box::into_raw(Box::new(DeviceState {
                magic: DEVICE_MAGIC,
                device_type: TypeId::of::<P::Device>(),
                host: Arc::clone(&entry.host),
                se,
                _strings: strings,
                device: dev,
            }));
            // SAFETY: `device` is a host-allocated dpp_device_t of at least the ABI 1.0 size
            // (checked); `state` stays valid until destroy_device, and so do the strings
            // (moved into it: a CString's buffer does not move) and `se` (boxed).
            unsafe {
                let d = &mut *device;
                d.device_data = state.cast();
                d.hardware_name = hardware_name;
                d.vendor = vendor;
                d.pci_bus_id = pci_bus_id;
                d.total_memory = info.total_memory;
                d.numa_node = info.numa_node.unwrap_or(-1);
                d.compute_units = info.compute_units;
                d.se = ptr::addr_of!((*state).se);
            }
            Ok(())
        })
    })
}

unsafe extern "C" fn platform_destroy_device<P: Platform>(
    platform_data: *mut c_void,
    device: *mut abi::dpp_device_t,
) {
    boundary((), || {
        // SAFETY: the host passes the platform_data it registered.
        let Some(entry) = (unsafe { platform_entry::<P>(platform_data) }) else {
            return;
        };
        if device.is_null() {
            return;
        }
        // SAFETY: non-NULL: the host's dpp_device_t that create_device filled.
        let data = unsafe { ptr::addr_of!((*device).device_data).read() };
        // SAFETY: the device_data create_device wrote (or NULL / already destroyed: refused).
        if unsafe { device_state::<P::Device>(data) }.is_none() {
            entry
                .host
                .log(LogLevel::Error, "destroy_device: not a live device");
            return;
        }
        // SAFETY: a live DeviceState from Box::into_raw in create_device, released once.
        let mut state = unsafe { Box::from_raw(data.cast::<DeviceState<P::Device>>()) };
        state.magic = DEAD_MAGIC;
        // SAFETY: the host's struct; the device is gone, so is its data pointer.
        unsafe { ptr::addr_of_mut!((*device).device_data).write(ptr::null_mut()) };
        entry.host.call_void("destroy_device", move || drop(state));
    })
}

unsafe extern "C" fn platform_destroy<P: Platform>(platform_data: *mut c_void) {
    boundary((), || {
        // SAFETY: the host passes the platform_data it registered.
        if unsafe { platform_entry::<P>(platform_data) }.is_none() {
            return;
        }
        // SAFETY: a live PlatformEntry from Box::into_raw in register_platform, released once.
        let mut entry = unsafe { Box::from_raw(platform_data.cast::<PlatformEntry<P>>()) };
        entry.magic = DEAD_MAGIC;
        let host = Arc::clone(&entry.host);
        host.call_void("destroy_platform", move || drop(entry));
    })
}

// ---------------------------------------------------------------------------------------------
// Host memory handed to stream operations

/// Host memory a stream-ordered copy reads (`memcpy_htod_async`'s `src`).
///
/// The host guarantees that the memory stays valid and unchanged until the stream reaches
/// the copy. `Send`, so it can travel to a worker thread.
pub struct HostBuf {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the host hands the memory over to the stream; any thread may execute the stream.
unsafe impl Send for HostBuf {}

impl HostBuf {
    /// Bytes to copy.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is nothing to copy.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host address (NULL possible when empty).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The bytes.
    ///
    /// # Safety
    /// Only while the stream executes this copy: after all work enqueued earlier on the
    /// stream has finished and before the stream lets anything later run, signals an event,
    /// calls a host callback or reports itself synchronized. Never after the method that
    /// received the buffer returned an error (the host may have freed it).
    pub unsafe fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: non-empty buffers are non-NULL (checked when built); valid and unchanged
        // while the stream executes the copy, per the caller.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl fmt::Debug for HostBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuf")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// Host memory a stream-ordered copy writes (`memcpy_dtoh_async`'s `dst`).
///
/// The host guarantees that the memory stays valid, and that it neither reads nor writes it,
/// until the stream reaches the copy. `Send`, so it can travel to a worker thread.
pub struct HostBufMut {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the host hands the memory over to the stream; any thread may execute the stream.
unsafe impl Send for HostBufMut {}

impl HostBufMut {
    /// Bytes to copy.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is nothing to copy.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The host address (NULL possible when empty).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// The bytes, to fill (they may hold anything before the copy: write, do not read).
    ///
    /// # Safety
    /// As [`HostBuf::as_slice`]: only while the stream executes this copy, never after the
    /// method that received the buffer returned an error.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: non-empty buffers are non-NULL (checked when built); valid and not used by
        // the host while the stream executes the copy, per the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl fmt::Debug for HostBufMut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBufMut")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

fn host_len(size: u64, null: bool, what: &str) -> Result<usize> {
    let len = usize::try_from(size)
        .ok()
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid_argument(format!("{what}: size {size} exceeds the address space"))
        })?;
    if null && len > 0 {
        return Err(Error::invalid_argument(format!(
            "{what}: the host pointer is NULL"
        )));
    }
    Ok(len)
}

/// # Safety
/// `ptr` is valid for reads of `size` bytes for `'a` (unless `size` is 0).
unsafe fn host_slice<'a>(ptr: *const c_void, size: u64, what: &str) -> Result<&'a [u8]> {
    let len = host_len(size, ptr.is_null(), what)?;
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-NULL, valid for `len` bytes per the caller.
    Ok(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
}

/// # Safety
/// `ptr` is valid for writes of `size` bytes for `'a` and nothing else uses it (unless
/// `size` is 0).
unsafe fn host_slice_mut<'a>(ptr: *mut c_void, size: u64, what: &str) -> Result<&'a mut [u8]> {
    let len = host_len(size, ptr.is_null(), what)?;
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: non-NULL, valid and exclusive for `len` bytes per the caller.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u8>(), len) })
}

// ---------------------------------------------------------------------------------------------
// Host callbacks

const CB_CALLED: u8 = 1;
const CB_DROPPED: u8 = 2;
const CB_ACCEPTED: u8 = 4;
const CB_REFUSED: u8 = 8;

struct CallbackInner {
    func: unsafe extern "C" fn(*mut c_void),
    arg: *mut c_void,
    state: Arc<AtomicU8>,
    host: Arc<HostShared>,
}

/// A host function that a stream calls once it has done all earlier work (`host_callback`).
///
/// Call it with [`HostCallback::call`] once the stream has done all work enqueued before it,
/// on any thread, holding no lock that your device's methods take (the host's function may
/// call back into the device). That may be inside the
/// [`Device::host_callback`](crate::Device::host_callback) call that received it, when the
/// stream's earlier work is already done (a synchronous stream, or one you synchronized
/// first), as the ABI allows; otherwise call it later, from the stream's worker.
///
/// The SDK keeps the ABI's promise to the host that its function runs exactly once if
/// `host_callback` succeeded and never if it failed:
/// - dropped without being called after `host_callback` returned `Ok` (a stream that
///   discards its queue), it is called by the drop, with a warning in the log;
/// - dropped without being called before `host_callback` returned `Ok`, the SDK turns the
///   `Ok` into an `INTERNAL` error and does not call it;
/// - called after `host_callback` returned `Err`, the call does nothing (and logs an error);
/// - called before `host_callback` returned (inline, or by another thread), and then
///   `host_callback` returns `Err`: a bug in the plugin, since the function already ran. The
///   host is told `DPP_OK` (an error would make it clean up a second time), and the error
///   is logged at error level, saying so. Once you called it, return `Ok`.
pub struct HostCallback {
    inner: Option<CallbackInner>,
}

// SAFETY: the ABI lets the host function run on any thread; `arg` is the host's, passed back
// unchanged.
unsafe impl Send for HostCallback {}

impl HostCallback {
    /// Calls the host's function (once: this consumes the callback).
    pub fn call(mut self) {
        if let Some(inner) = self.inner.take() {
            let prev = inner.state.fetch_or(CB_CALLED, Ordering::AcqRel);
            if prev & CB_REFUSED != 0 {
                inner.host.log(
                    LogLevel::Error,
                    "a host callback was called after its host_callback call returned an error; \
                     not calling the host's function (after an error it must never run)",
                );
                return;
            }
            // SAFETY: the host's function with its own argument, called exactly once (this
            // is the only path that sets CB_CALLED, and `inner` was taken).
            unsafe { (inner.func)(inner.arg) };
        }
    }
}

impl Drop for HostCallback {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let prev = inner.state.fetch_or(CB_DROPPED, Ordering::AcqRel);
            if prev & CB_ACCEPTED != 0 {
                inner.host.log(
                    LogLevel::Warn,
                    "a host callback was dropped without being called after host_callback \
                     returned Ok; calling it now",
                );
                // SAFETY: accepted and never called (`inner` was still here): the host's
                // function with its own argument, exactly once.
                unsafe { (inner.func)(inner.arg) };
            }
            // Otherwise: still inside host_callback (the trampoline turns its Ok into an
            // error) or refused; the host's function must not run.
        }
    }
}

impl fmt::Debug for HostCallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostCallback").finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// The StreamExecutor table

fn executor_table<D: Device>(dev: &D) -> abi::dpp_stream_executor_t {
    let host_memory = dev.provides_host_memory();
    let unified = dev.provides_unified_memory();
    abi::dpp_stream_executor_t {
        struct_size: size_of::<abi::dpp_stream_executor_t>(),
        ext: ptr::null_mut(),
        allocate: Some(se_allocate::<D>),
        deallocate: Some(se_deallocate::<D>),
        host_allocate: if host_memory {
            Some(se_host_allocate::<D>)
        } else {
            None
        },
        host_deallocate: if host_memory {
            Some(se_host_deallocate::<D>)
        } else {
            None
        },
        unified_allocate: if unified {
            Some(se_unified_allocate::<D>)
        } else {
            None
        },
        unified_deallocate: if unified {
            Some(se_unified_deallocate::<D>)
        } else {
            None
        },
        memory_usage: if dev.provides_memory_usage() {
            Some(se_memory_usage::<D>)
        } else {
            None
        },
        allocator_stats: if dev.provides_allocator_stats() {
            Some(se_allocator_stats::<D>)
        } else {
            None
        },
        memcpy_htod: Some(se_memcpy_htod::<D>),
        memcpy_dtoh: Some(se_memcpy_dtoh::<D>),
        memcpy_dtod: Some(se_memcpy_dtod::<D>),
        memset: Some(se_memset::<D>),
        create_stream: Some(se_create_stream::<D>),
        destroy_stream: Some(se_destroy_stream::<D>),
        synchronize_stream: Some(se_synchronize_stream::<D>),
        stream_wait_stream: Some(se_stream_wait_stream::<D>),
        memcpy_htod_async: Some(se_memcpy_htod_async::<D>),
        memcpy_dtoh_async: Some(se_memcpy_dtoh_async::<D>),
        memcpy_dtod_async: Some(se_memcpy_dtod_async::<D>),
        memset_async: Some(se_memset_async::<D>),
        host_callback: Some(se_host_callback::<D>),
        create_event: Some(se_create_event::<D>),
        destroy_event: Some(se_destroy_event::<D>),
        record_event: Some(se_record_event::<D>),
        event_status: Some(se_event_status::<D>),
        stream_wait_event: Some(se_stream_wait_event::<D>),
        event_synchronize: Some(se_event_synchronize::<D>),
        synchronize_all: Some(se_synchronize_all::<D>),
        event_elapsed_ns: if dev.provides_event_timing() {
            Some(se_event_elapsed_ns::<D>)
        } else {
            None
        },
    }
}

fn out_null(what: &str, name: &str) -> Error {
    Error::invalid_argument(format!("{what}: {name} is NULL"))
}

fn zero_size(what: &str) -> Error {
    Error::invalid_argument(format!("{what}: size is 0"))
}

// The se_* functions: the host calls them with the `device_data` of a device of this table,
// with handles it got from this device's create_stream / create_event and with out-pointers
// and host buffers it owns, as the ABI requires. Their `device_call` blocks rely on that
// ("SAFETY: the ABI's calling contract").

unsafe extern "C" fn se_allocate<D: Device>(
    device: *mut c_void,
    size: u64,
    out_addr: *mut abi::dpp_addr_t,
) -> abi::dpp_status_t {
    const W: &str = "allocate";
    let f = |s: &DeviceState<D>| {
        if out_addr.is_null() {
            return Err(out_null(W, "out_addr"));
        }
        if size == 0 {
            return Err(zero_size(W));
        }
        let addr = s.device.allocate(size)?;
        if addr.get() == 0 {
            return Err(Error::internal(format!(
                "{}: allocate({size}) returned address 0",
                s.host.plugin
            )));
        }
        // SAFETY: a non-NULL out-pointer of the host.
        unsafe { out_addr.write(addr.get()) };
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_deallocate<D: Device>(
    device: *mut c_void,
    addr: abi::dpp_addr_t,
    size: u64,
) {
    let f = |s: &DeviceState<D>| {
        if addr != 0 {
            s.device.deallocate(DeviceAddr(addr), size);
        }
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call_void(device, "deallocate", f) }
}

unsafe extern "C" fn se_host_allocate<D: Device>(
    device: *mut c_void,
    size: u64,
    out_ptr: *mut *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "host_allocate";
    let f = |s: &DeviceState<D>| {
        if out_ptr.is_null() {
            return Err(out_null(W, "out_ptr"));
        }
        if size == 0 {
            return Err(zero_size(W));
        }
        let p = s.device.host_allocate(size)?;
        // SAFETY: a non-NULL out-pointer of the host.
        unsafe { out_ptr.write(p.as_ptr().cast()) };
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_host_deallocate<D: Device>(
    device: *mut c_void,
    ptr: *mut c_void,
    size: u64,
) {
    let f = |s: &DeviceState<D>| {
        if let Some(p) = NonNull::new(ptr.cast::<u8>()) {
            s.device.host_deallocate(p, size);
        }
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call_void(device, "host_deallocate", f) }
}

unsafe extern "C" fn se_unified_allocate<D: Device>(
    device: *mut c_void,
    size: u64,
    out_ptr: *mut *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "unified_allocate";
    let f = |s: &DeviceState<D>| {
        if out_ptr.is_null() {
            return Err(out_null(W, "out_ptr"));
        }
        if size == 0 {
            return Err(zero_size(W));
        }
        let p = s.device.unified_allocate(size)?;
        // SAFETY: a non-NULL out-pointer of the host.
        unsafe { out_ptr.write(p.as_ptr().cast()) };
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_unified_deallocate<D: Device>(
    device: *mut c_void,
    ptr: *mut c_void,
    size: u64,
) {
    let f = |s: &DeviceState<D>| {
        if let Some(p) = NonNull::new(ptr.cast::<u8>()) {
            s.device.unified_deallocate(p, size);
        }
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call_void(device, "unified_deallocate", f) }
}

unsafe extern "C" fn se_memory_usage<D: Device>(
    device: *mut c_void,
    out_free: *mut u64,
    out_total: *mut u64,
) -> abi::dpp_status_t {
    const W: &str = "memory_usage";
    let f = |s: &DeviceState<D>| {
        if out_free.is_null() || out_total.is_null() {
            return Err(out_null(W, "out_free or out_total"));
        }
        let MemoryUsage { free, total } = s.device.memory_usage()?;
        // SAFETY: non-NULL out-pointers of the host.
        unsafe {
            out_free.write(free);
            out_total.write(total);
        }
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_allocator_stats<D: Device>(
    device: *mut c_void,
    out: *mut abi::dpp_allocator_stats_t,
) -> abi::dpp_status_t {
    const W: &str = "allocator_stats";
    let f = |s: &DeviceState<D>| {
        if out.is_null() {
            return Err(out_null(W, "out_stats"));
        }
        let st: AllocatorStats = s.device.allocator_stats()?;
        // SAFETY: non-NULL; the host set `struct_size`, which every version starts with.
        let size = unsafe { ptr::addr_of!((*out).struct_size).read() };
        // Only the fields within the host's struct_size are written.
        macro_rules! put {
            ($($field:ident),*) => {$(
                if offset_of!(abi::dpp_allocator_stats_t, $field) + size_of::<u64>() <= size {
                    // SAFETY: the field lies within the host's `struct_size`.
                    unsafe { ptr::addr_of_mut!((*out).$field).write(st.$field) };
                }
            )*};
        }
        put!(
            num_allocs,
            bytes_in_use,
            peak_bytes_in_use,
            largest_alloc_size,
            bytes_limit,
            bytes_reserved,
            largest_free_block
        );
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_memcpy_htod<D: Device>(
    device: *mut c_void,
    dst: abi::dpp_addr_t,
    src: *const c_void,
    size: u64,
) -> abi::dpp_status_t {
    const W: &str = "memcpy_htod";
    let f = |s: &DeviceState<D>| {
        // SAFETY: the host's `src` is readable for `size` bytes during this call.
        let src = unsafe { host_slice(src, size, W) }?;
        s.device.memcpy_htod(DeviceAddr(dst), src)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_memcpy_dtoh<D: Device>(
    device: *mut c_void,
    dst: *mut c_void,
    src: abi::dpp_addr_t,
    size: u64,
) -> abi::dpp_status_t {
    const W: &str = "memcpy_dtoh";
    let f = |s: &DeviceState<D>| {
        // SAFETY: the host's `dst` is writable for `size` bytes, and left to us, during this call.
        let dst = unsafe { host_slice_mut(dst, size, W) }?;
        s.device.memcpy_dtoh(dst, DeviceAddr(src))
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_memcpy_dtod<D: Device>(
    device: *mut c_void,
    dst: abi::dpp_addr_t,
    src: abi::dpp_addr_t,
    size: u64,
) -> abi::dpp_status_t {
    let f = |s: &DeviceState<D>| s.device.memcpy_dtod(DeviceAddr(dst), DeviceAddr(src), size);
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_memset<D: Device>(
    device: *mut c_void,
    dst: abi::dpp_addr_t,
    value: u8,
    size: u64,
) -> abi::dpp_status_t {
    let f = |s: &DeviceState<D>| s.device.memset(DeviceAddr(dst), value, size);
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_create_stream<D: Device>(
    device: *mut c_void,
    out_stream: *mut *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "create_stream";
    let f = |s: &DeviceState<D>| {
        if out_stream.is_null() {
            return Err(out_null(W, "out_stream"));
        }
        let stream = s.device.create_stream()?;
        // SAFETY: a non-NULL out-pointer of the host.
        unsafe { out_stream.write(handle_new(stream, STREAM_MAGIC, s.owner())) };
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_destroy_stream<D: Device>(device: *mut c_void, stream: *mut c_void) {
    const W: &str = "destroy_stream";
    let f = |s: &DeviceState<D>| {
        if stream.is_null() {
            return Ok(());
        }
        // SAFETY: a handle of the host, destroyed once, with no other call on it in flight.
        let stream = unsafe { handle_take::<D::Stream>(stream, STREAM_MAGIC, s.owner(), W) }?;
        s.device.destroy_stream(stream);
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call_void(device, W, f) }
}

unsafe extern "C" fn se_synchronize_stream<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "synchronize_stream";
    let f = |s: &DeviceState<D>| {
        // SAFETY: a stream handle of the host.
        let stream = unsafe { s.stream(stream, W) }?;
        s.device.synchronize_stream(stream)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_stream_wait_stream<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
    other: *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "stream_wait_stream";
    let f = |s: &DeviceState<D>| {
        // SAFETY: stream handles of the host.
        let (stream, other) = unsafe { (s.stream(stream, W)?, s.stream(other, W)?) };
        s.device.stream_wait_stream(stream, other)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_memcpy_htod_async<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
    dst: abi::dpp_addr_t,
    src: *const c_void,
    size: u64,
) -> abi::dpp_status_t {
    const W: &str = "memcpy_htod_async";
    let f = |s: &DeviceState<D>| {
        // SAFETY: a stream handle of the host.
        let stream = unsafe { s.stream(stream, W) }?;
        let len = host_len(size, src.is_null(), W)?;
        // The host keeps `src` valid and unchanged until the stream reaches the copy.
        let src = HostBuf {
            ptr: src.cast(),
            len,
        };
        s.device.memcpy_htod_async(stream, DeviceAddr(dst), src)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_memcpy_dtoh_async<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
    dst: *mut c_void,
    src: abi::dpp_addr_t,
    size: u64,
) -> abi::dpp_status_t {
    const W: &str = "memcpy_dtoh_async";
    let f = |s: &DeviceState<D>| {
        // SAFETY: a stream handle of the host.
        let stream = unsafe { s.stream(stream, W) }?;
        let len = host_len(size, dst.is_null(), W)?;
        // The host keeps `dst` valid and untouched until the stream reaches the copy.
        let dst = HostBufMut {
            ptr: dst.cast(),
            len,
        };
        s.device.memcpy_dtoh_async(stream, dst, DeviceAddr(src))
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_memcpy_dtod_async<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
    dst: abi::dpp_addr_t,
    src: abi::dpp_addr_t,
    size: u64,
) -> abi::dpp_status_t {
    const W: &str = "memcpy_dtod_async";
    let f = |s: &DeviceState<D>| {
        // SAFETY: a stream handle of the host.
        let stream = unsafe { s.stream(stream, W) }?;
        s.device
            .memcpy_dtod_async(stream, DeviceAddr(dst), DeviceAddr(src), size)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_memset_async<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
    dst: abi::dpp_addr_t,
    value: u8,
    size: u64,
) -> abi::dpp_status_t {
    const W: &str = "memset_async";
    let f = |s: &DeviceState<D>| {
        // SAFETY: a stream handle of the host.
        let stream = unsafe { s.stream(stream, W) }?;
        s.device.memset_async(stream, DeviceAddr(dst), value, size)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_host_callback<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
    func: abi::dpp_host_fn,
    arg: *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "host_callback";
    let f = |s: &DeviceState<D>| {
        // SAFETY: a stream handle of the host.
        let stream = unsafe { s.stream(stream, W) }?;
        let func = func.ok_or_else(|| out_null(W, "func"))?;
        host_callback_on(s, stream, func, arg)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

/// Enqueues `func(arg)` on `stream` with the device's `host_callback`, keeping the ABI's promise
/// about it: after `Ok` it runs exactly once (once the stream reached its earlier work), after
/// `Err` never. For the host's callbacks, and for the SDK's own (a kernel state dropped in
/// stream order).
fn host_callback_on<D: Device>(
    s: &DeviceState<D>,
    stream: &D::Stream,
    func: unsafe extern "C" fn(*mut c_void),
    arg: *mut c_void,
) -> Result<()> {
    let state = Arc::new(AtomicU8::new(0));
    let callback = HostCallback {
        inner: Some(CallbackInner {
            func,
            arg,
            state: Arc::clone(&state),
            host: Arc::clone(&s.host),
        }),
    };
    // Caught here (not only by device_call) to settle the callback's state first.
    let result = match catch_unwind(AssertUnwindSafe(|| {
        s.device.host_callback(stream, callback)
    })) {
        Ok(r) => r,
        Err(payload) => Err(Error::from_panic(payload)),
    };
    match result {
        Ok(()) => {
            let prev = state.fetch_or(CB_ACCEPTED, Ordering::AcqRel);
            if prev & (CB_DROPPED | CB_CALLED) == CB_DROPPED {
                state.fetch_or(CB_REFUSED, Ordering::AcqRel);
                return Err(Error::internal(
                    "the plugin dropped the callback without calling it and returned Ok \
                     (call it once the stream's earlier work is done, or return Err)",
                ));
            }
            Ok(())
        }
        Err(e) => {
            let prev = state.fetch_or(CB_REFUSED, Ordering::AcqRel);
            if prev & CB_CALLED != 0 {
                // The host's function already ran: failing now would make the host clean
                // up `arg` a second time. The ABI's exactly-once promise wins; the error
                // is the plugin's bug, said as such.
                s.host.log(
                    LogLevel::Error,
                    &format!(
                        "host_callback: a bug in the plugin: it called the callback, then \
                         returned an error ({}: {}); the host's function ran, so the host \
                         is told the call succeeded and the error is dropped. Return Ok \
                         once the callback was called (an error means it never runs)",
                        e.code(),
                        e.message()
                    ),
                );
                return Ok(());
            }
            Err(e)
        }
    }
}

unsafe extern "C" fn se_create_event<D: Device>(
    device: *mut c_void,
    out_event: *mut *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "create_event";
    let f = |s: &DeviceState<D>| {
        if out_event.is_null() {
            return Err(out_null(W, "out_event"));
        }
        let event = s.device.create_event()?;
        // SAFETY: a non-NULL out-pointer of the host.
        unsafe { out_event.write(handle_new(event, EVENT_MAGIC, s.owner())) };
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_destroy_event<D: Device>(device: *mut c_void, event: *mut c_void) {
    const W: &str = "destroy_event";
    let f = |s: &DeviceState<D>| {
        if event.is_null() {
            return Ok(());
        }
        // SAFETY: a handle of the host, destroyed once, with no other call on it in flight.
        let event = unsafe { handle_take::<D::Event>(event, EVENT_MAGIC, s.owner(), W) }?;
        s.device.destroy_event(event);
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call_void(device, W, f) }
}

unsafe extern "C" fn se_record_event<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
    event: *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "record_event";
    let f = |s: &DeviceState<D>| {
        // SAFETY: handles of the host.
        let (stream, event) = unsafe { (s.stream(stream, W)?, s.event(event, W)?) };
        s.device.record_event(stream, event)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_event_status<D: Device>(
    device: *mut c_void,
    event: *mut c_void,
    out_status: *mut i32,
) -> abi::dpp_status_t {
    const W: &str = "event_status";
    let f = |s: &DeviceState<D>| {
        // SAFETY: an event handle of the host.
        let event = unsafe { s.event(event, W) }?;
        if out_status.is_null() {
            return Err(out_null(W, "out_status"));
        }
        let status = match s.device.event_status(event)? {
            EventStatus::Pending => abi::DPP_EVENT_PENDING,
            EventStatus::Complete => abi::DPP_EVENT_COMPLETE,
            EventStatus::Error => abi::DPP_EVENT_ERROR,
        };
        // SAFETY: a non-NULL out-pointer of the host.
        unsafe { out_status.write(status) };
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_stream_wait_event<D: Device>(
    device: *mut c_void,
    stream: *mut c_void,
    event: *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "stream_wait_event";
    let f = |s: &DeviceState<D>| {
        // SAFETY: handles of the host.
        let (stream, event) = unsafe { (s.stream(stream, W)?, s.event(event, W)?) };
        s.device.stream_wait_event(stream, event)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_event_synchronize<D: Device>(
    device: *mut c_void,
    event: *mut c_void,
) -> abi::dpp_status_t {
    const W: &str = "event_synchronize";
    let f = |s: &DeviceState<D>| {
        // SAFETY: an event handle of the host.
        let event = unsafe { s.event(event, W) }?;
        s.device.event_synchronize(event)
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_event_elapsed_ns<D: Device>(
    device: *mut c_void,
    start: *mut c_void,
    end: *mut c_void,
    out_ns: *mut i64,
) -> abi::dpp_status_t {
    const W: &str = "event_elapsed_ns";
    let f = |s: &DeviceState<D>| {
        // SAFETY: event handles of the host.
        let (start, end) = unsafe {
            (
                s.event(start, "event_elapsed_ns (start)")?,
                s.event(end, "event_elapsed_ns (end)")?,
            )
        };
        if out_ns.is_null() {
            return Err(out_null(W, "out_ns"));
        }
        let ns = s.device.event_elapsed_ns(start, end)?;
        // SAFETY: a non-NULL out-pointer of the host.
        unsafe { out_ns.write(ns) };
        Ok(())
    };
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}

unsafe extern "C" fn se_synchronize_all<D: Device>(device: *mut c_void) -> abi::dpp_status_t {
    let f = |s: &DeviceState<D>| s.device.synchronize_all();
    // SAFETY: the ABI's calling contract.
    unsafe { device_call(device, f) }
}
