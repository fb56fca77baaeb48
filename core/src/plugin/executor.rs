//! The adapter from a plugin's `dpp_stream_executor_t` to the core's [`StreamExecutor`] and
//! [`Platform`] traits. Every call into plugin code goes through [`call`], which turns a
//! status and the plugin's `set_error` message into an [`Error`].

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use devplug_plugin_abi as abi;

use crate::error::{Code, Error, Result};
use crate::memory::DevicePtr;
use crate::platform::{
    AllocatorFigures, DeviceDescription, EventStatus, HostFn, Platform, PlatformInfo, RawEvent,
    RawStream, StreamExecutor,
};
use crate::plugin::host::{take_plugin_error, LoadedPlugin};

/// Converts a plugin's status into a result, with the message it gave through `set_error`.
pub(crate) fn check(
    plugin: &LoadedPlugin,
    function: &str,
    status: abi::dpp_status_t,
) -> Result<()> {
    check_with(plugin, || function, status)
}

/// [`check`], naming the function only when there is an error to report (for hot paths that
/// would otherwise format the name on every call).
#[inline]
pub(crate) fn check_with<S: std::fmt::Display>(
    plugin: &LoadedPlugin,
    function: impl FnOnce() -> S,
    status: abi::dpp_status_t,
) -> Result<()> {
    let message = take_plugin_error();
    if status == abi::DPP_OK {
        return Ok(());
    }
    Err(plugin_error(plugin, &function(), status, message))
}

#[cold]
fn plugin_error(
    plugin: &LoadedPlugin,
    function: &dyn std::fmt::Display,
    status: abi::dpp_status_t,
    message: Option<String>,
) -> Error {
    let (code, note) = match Code::from_i32(status) {
        Some(Code::Ok) | None => (
            Code::Internal,
            format!(" (the plugin returned the unknown status {status})"),
        ),
        // A version disagreement is the host's to find when it loads a plugin, not an
        // outcome of a device call.
        Some(Code::AbiMismatch) => (
            Code::Internal,
            " (the plugin returned DPP_ABI_MISMATCH, a status of the host's version checks)"
                .to_string(),
        ),
        Some(c) => (c, String::new()),
    };
    let message = message.unwrap_or_else(|| "no message given".into());
    Error::new(
        code,
        format!("plugin '{}': {function}: {message}{note}", plugin.name),
    )
}

/// A plugin's stream or event handle.
struct Handle(*mut c_void);
// SAFETY: the ABI requires every executor function to be callable from any thread, so the
// plugin's handles may travel between threads.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

/// One registered plugin platform.
pub(crate) struct PluginPlatform {
    /// This platform itself, for the executors it creates.
    pub(crate) me: std::sync::Weak<PluginPlatform>,
    pub(crate) info: PlatformInfo,
    pub(crate) plugin: Arc<LoadedPlugin>,
    pub(crate) table: PlatformTable,
}

/// The plugin's `dpp_platform_t` function pointers and data, copied at registration.
pub(crate) struct PlatformTable {
    pub(crate) device_count: usize,
    pub(crate) platform_data: *mut c_void,
    pub(crate) create_device:
        unsafe extern "C" fn(*mut c_void, i32, *mut abi::dpp_device_t) -> abi::dpp_status_t,
    pub(crate) destroy_device: unsafe extern "C" fn(*mut c_void, *mut abi::dpp_device_t),
    pub(crate) destroy_platform: Option<unsafe extern "C" fn(*mut c_void)>,
}
// SAFETY: the platform data is owned by the plugin, whose functions may be called from any
// thread (ABI rule).
unsafe impl Send for PlatformTable {}
// SAFETY: as above.
unsafe impl Sync for PlatformTable {}

impl Drop for PluginPlatform {
    fn drop(&mut self) {
        if let Some(f) = self.table.destroy_platform {
            // SAFETY: the plugin's own function and data; every device of the platform was
            // destroyed already (devices hold the platform alive).
            unsafe { f(self.table.platform_data) };
            let _ = take_plugin_error();
        }
    }
}

impl Platform for PluginPlatform {
    fn info(&self) -> &PlatformInfo {
        &self.info
    }
    fn device_count(&self) -> usize {
        self.table.device_count
    }
    fn create_executor(&self, ordinal: usize) -> Result<Arc<dyn StreamExecutor>> {
        let me = self.me.upgrade().ok_or_else(|| {
            Error::internal(format!("platform {} is being destroyed", self.info.name))
        })?;
        create_device(&me, ordinal)
    }
}

/// The executor functions of a plugin device, all required ones present (checked at
/// creation).
pub(crate) struct PluginExecutor {
    platform: Arc<PluginPlatform>,
    device: Box<abi::dpp_device_t>,
    /// The plugin's table as far as its `struct_size` reaches; later fields NULL.
    se: abi::dpp_stream_executor_t,
    description: DeviceDescription,
    /// Set once `allocate` returned an address off [`ALIGNMENT`] (warned about once).
    misaligned: AtomicBool,
}

/// The alignment the guide asks of device addresses of platforms under the host's
/// suballocator (its own alignment).
pub(crate) const ALIGNMENT: u64 = 256;

// SAFETY: the device struct and its table are owned by the plugin and callable from any
// thread (ABI rule); the host never mutates them after creation.
unsafe impl Send for PluginExecutor {}
// SAFETY: as above.
unsafe impl Sync for PluginExecutor {}

macro_rules! required {
    ($se:expr, $field:ident) => {
        // Checked non-NULL at creation (`validate_executor`).
        match $se.$field {
            Some(f) => f,
            None => {
                return Err(Error::internal(concat!(
                    "dpp_stream_executor_t.",
                    stringify!($field),
                    " is NULL"
                )))
            }
        }
    };
}

/// The executor table fields that must not be NULL.
pub(crate) const REQUIRED: &[&str] = &[
    "allocate",
    "deallocate",
    "memcpy_htod",
    "memcpy_dtoh",
    "memcpy_dtod",
    "memset",
    "create_stream",
    "destroy_stream",
    "synchronize_stream",
    "stream_wait_stream",
    "memcpy_htod_async",
    "memcpy_dtoh_async",
    "memcpy_dtod_async",
    "memset_async",
    "host_callback",
    "create_event",
    "destroy_event",
    "record_event",
    "event_status",
    "stream_wait_event",
    "event_synchronize",
    "synchronize_all",
];

fn field_present(se: &abi::dpp_stream_executor_t, name: &str) -> bool {
    match name {
        "allocate" => se.allocate.is_some(),
        "deallocate" => se.deallocate.is_some(),
        "memcpy_htod" => se.memcpy_htod.is_some(),
        "memcpy_dtoh" => se.memcpy_dtoh.is_some(),
        "memcpy_dtod" => se.memcpy_dtod.is_some(),
        "memset" => se.memset.is_some(),
        "create_stream" => se.create_stream.is_some(),
        "destroy_stream" => se.destroy_stream.is_some(),
        "synchronize_stream" => se.synchronize_stream.is_some(),
        "stream_wait_stream" => se.stream_wait_stream.is_some(),
        "memcpy_htod_async" => se.memcpy_htod_async.is_some(),
        "memcpy_dtoh_async" => se.memcpy_dtoh_async.is_some(),
        "memcpy_dtod_async" => se.memcpy_dtod_async.is_some(),
        "memset_async" => se.memset_async.is_some(),
        "host_callback" => se.host_callback.is_some(),
        "create_event" => se.create_event.is_some(),
        "destroy_event" => se.destroy_event.is_some(),
        "record_event" => se.record_event.is_some(),
        "event_status" => se.event_status.is_some(),
        "stream_wait_event" => se.stream_wait_event.is_some(),
        "event_synchronize" => se.event_synchronize.is_some(),
        "synchronize_all" => se.synchronize_all.is_some(),
        _ => false,
    }
}

fn plugin_str(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the plugin hands over NUL-terminated strings valid until destroy_device; read
    // at most 256 bytes.
    unsafe { crate::plugin::host::bounded_str(p, 256) }.unwrap_or_default()
}

/// Checks what `create_device` filled in.
fn validate_device(
    device: &abi::dpp_device_t,
    se: Option<&abi::dpp_stream_executor_t>,
    platform: &PluginPlatform,
) -> Result<()> {
    let (plugin, name, ordinal) = (&platform.plugin.name, &platform.info.name, device.ordinal);
    let err = |why: String| {
        Err(Error::invalid_argument(format!(
            "plugin '{plugin}': platform {name}: device {ordinal}: {why}"
        )))
    };
    let Some(se) = se else {
        return err("dpp_device_t.se is NULL".into());
    };
    if se.struct_size < abi::DPP_STREAM_EXECUTOR_STRUCT_SIZE_1_0 {
        return err(format!(
            "dpp_stream_executor_t.struct_size is {}, smaller than the ABI 1.0 size {}",
            se.struct_size,
            abi::DPP_STREAM_EXECUTOR_STRUCT_SIZE_1_0
        ));
    }
    if let Some(missing) = REQUIRED.iter().find(|f| !field_present(se, f)) {
        return err(format!(
            "required function dpp_stream_executor_t.{missing} is NULL"
        ));
    }
    if se.host_allocate.is_some() != se.host_deallocate.is_some() {
        return err("dpp_stream_executor_t.host_allocate and host_deallocate must both be set or both be NULL".into());
    }
    // The host does not allocate unified memory yet (docs/porting.md, "Gaps"); a table that
    // offers half of it is still malformed, as the header says.
    if se.unified_allocate.is_some() != se.unified_deallocate.is_some() {
        return err("dpp_stream_executor_t.unified_allocate and unified_deallocate must both be set or both be NULL".into());
    }
    Ok(())
}

/// Creates device `ordinal` of a plugin platform and checks everything the plugin filled in.
pub(crate) fn create_device(
    platform: &Arc<PluginPlatform>,
    ordinal: usize,
) -> Result<Arc<dyn StreamExecutor>> {
    let plugin = &platform.plugin;
    let mut device = Box::new(abi::dpp_device_t {
        struct_size: abi::DPP_DEVICE_STRUCT_SIZE,
        ext: std::ptr::null_mut(),
        ordinal: ordinal as i32,
        device_data: std::ptr::null_mut(),
        hardware_name: std::ptr::null(),
        vendor: std::ptr::null(),
        pci_bus_id: std::ptr::null(),
        total_memory: 0,
        numa_node: -1,
        compute_units: 0,
        se: std::ptr::null(),
    });
    // SAFETY: the plugin's own function and data, with a device struct the host owns.
    let status = unsafe {
        (platform.table.create_device)(platform.table.platform_data, ordinal as i32, &mut *device)
    };
    check(plugin, &format!("create_device({ordinal})"), status)?;
    // SAFETY: the plugin keeps a non-NULL table valid until destroy_device.
    let se = unsafe { read_executor_table(device.se, plugin.context.host_minor) };
    if let Err(e) = validate_device(&device, se.as_ref(), platform) {
        // SAFETY: undo the creation the plugin just did.
        unsafe { (platform.table.destroy_device)(platform.table.platform_data, &mut *device) };
        let _ = take_plugin_error();
        return Err(e);
    }
    let se = se.expect("validated non-NULL");
    let description = DeviceDescription {
        hardware_name: plugin_str(device.hardware_name),
        vendor: plugin_str(device.vendor),
        pci_bus_id: plugin_str(device.pci_bus_id),
        total_memory: device.total_memory,
        numa_node: device.numa_node,
        compute_units: device.compute_units,
    };
    Ok(Arc::new(PluginExecutor {
        platform: platform.clone(),
        device,
        se,
        description,
        misaligned: AtomicBool::new(false),
    }))
}

impl Drop for PluginExecutor {
    fn drop(&mut self) {
        // SAFETY: the plugin's own function; every stream, event and allocation of the device
        // is gone (they hold the executor alive).
        unsafe {
            (self.platform.table.destroy_device)(
                self.platform.table.platform_data,
                &mut *self.device,
            )
        };
        let _ = take_plugin_error();
    }
}

/// A copy of the plugin's executor table: the `struct_size` bytes it filled, as far as the
/// host's ABI minor `host_minor` defines the table (240 bytes before 1.4: a host speaking 1.3
/// or older has no `event_elapsed_ns`), the fields past either NULL. `None` when `se` is NULL.
///
/// # Safety
/// `se` is NULL or points to a table of at least `struct_size` bytes (and at least
/// `struct_size` itself).
unsafe fn read_executor_table(
    se: *const abi::dpp_stream_executor_t,
    host_minor: u32,
) -> Option<abi::dpp_stream_executor_t> {
    if se.is_null() {
        return None;
    }
    // SAFETY: every table starts with its size.
    let filled = unsafe { std::ptr::read_unaligned(se as *const usize) };
    let known = if host_minor >= 4 {
        std::mem::size_of::<abi::dpp_stream_executor_t>()
    } else {
        abi::DPP_STREAM_EXECUTOR_STRUCT_SIZE_1_0
    };
    let n = filled.min(known);
    // SAFETY: all-zero is a valid table (a size, a NULL pointer and `None` functions).
    let mut table: abi::dpp_stream_executor_t = unsafe { std::mem::zeroed() };
    // SAFETY: the plugin's table holds `filled` ≥ `n` bytes; the copy holds `n` or more.
    unsafe { std::ptr::copy_nonoverlapping(se as *const u8, &mut table as *mut _ as *mut u8, n) };
    Some(table)
}

fn handle<'a>(raw: &'a (dyn std::any::Any + Send + Sync), what: &str) -> Result<&'a Handle> {
    crate::platform::downcast::<Handle>(raw, what)
}

/// Host functions plugins hold (given to their `host_callback`, not run yet), by ticket. A
/// plugin gets the ticket as the callback's argument, not a pointer to the function: one that
/// runs a callback twice, or runs it and then returns an error (after which the host drops
/// it), finds nothing the second time, which is logged, instead of running freed memory.
/// Sharded by ticket, so that streams calling back at once rarely meet on a lock.
struct PendingHostFns {
    shards: [Mutex<HashMap<u64, HostFn>>; 16],
    next: AtomicU64,
}

static PENDING: LazyLock<PendingHostFns> = LazyLock::new(|| PendingHostFns {
    shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
    // 0 is never a ticket: the argument is never NULL.
    next: AtomicU64::new(1),
});

impl PendingHostFns {
    fn shard(&self, ticket: u64) -> &Mutex<HashMap<u64, HostFn>> {
        &self.shards[(ticket % 16) as usize]
    }

    fn hold(&self, f: HostFn) -> u64 {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        self.shard(ticket).lock().insert(ticket, f);
        ticket
    }

    fn take(&self, ticket: u64) -> Option<HostFn> {
        self.shard(ticket).lock().remove(&ticket)
    }
}

/// Calls back `HostFn`s the plugin runs on its stream (`arg`: the ticket `host_callback` gave).
unsafe extern "C" fn run_host_fn(arg: *mut c_void) {
    match PENDING.take(arg.addr() as u64) {
        Some(f) => {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err() {
                crate::log::error("a host callback panicked on a plugin stream");
            }
        }
        None => crate::log::error(&format!(
            "a plugin ran a host callback ({arg:p}) that it had run already, or that its \
             host_callback had refused: ignored (each runs exactly once, and never after an \
             error)"
        )),
    }
}

impl PluginExecutor {
    fn dev(&self) -> *mut c_void {
        self.device.device_data
    }

    fn check(&self, function: &str, status: abi::dpp_status_t) -> Result<()> {
        check(&self.platform.plugin, function, status)
    }
}

impl StreamExecutor for PluginExecutor {
    fn description(&self) -> &DeviceDescription {
        &self.description
    }

    fn allocate(&self, size: u64) -> Result<DevicePtr> {
        let f = required!(self.se, allocate);
        let mut addr: abi::dpp_addr_t = 0;
        // SAFETY: the plugin's function with its device data and a valid out-pointer.
        self.check("allocate", unsafe { f(self.dev(), size, &mut addr) })?;
        if addr == 0 {
            return Err(Error::internal(format!(
                "plugin '{}': allocate({size}) returned address 0",
                self.platform.plugin.name
            )));
        }
        if !addr.is_multiple_of(ALIGNMENT)
            && self.platform.info.use_suballocator
            && !self.misaligned.swap(true, Ordering::Relaxed)
        {
            crate::log::warn(&format!(
                "plugin '{}': platform {}: device {}: allocate({size}) returned {addr:#x}, not \
                 {ALIGNMENT}-byte aligned as device addresses must be; the host frees such \
                 regions and allocates {ALIGNMENT} bytes more to align inside them (each region \
                 is then allocated twice; said once per device)",
                self.platform.plugin.name, self.platform.info.name, self.device.ordinal
            ));
        }
        Ok(DevicePtr(addr))
    }

    fn deallocate(&self, ptr: DevicePtr, size: u64) {
        if let Some(f) = self.se.deallocate {
            // SAFETY: frees what allocate(size) returned.
            unsafe { f(self.dev(), ptr.0, size) };
            let _ = take_plugin_error();
        }
    }

    fn host_allocate(&self, size: u64) -> Result<*mut u8> {
        match self.se.host_allocate {
            Some(f) => {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: the plugin's function with a valid out-pointer.
                self.check("host_allocate", unsafe { f(self.dev(), size, &mut p) })?;
                Ok(p.cast())
            }
            None => crate::host::host_memory_allocate(size),
        }
    }

    unsafe fn host_deallocate(&self, ptr: *mut u8, size: u64) {
        match self.se.host_deallocate {
            // SAFETY: the pointer came from the plugin's host_allocate(size).
            Some(f) => unsafe { f(self.dev(), ptr.cast(), size) },
            // SAFETY: the pointer came from host_memory_allocate(size).
            None => unsafe { crate::host::host_memory_free(ptr, size) },
        }
    }

    fn memory_usage(&self) -> Result<(u64, u64)> {
        match self.se.memory_usage {
            Some(f) => {
                let (mut free, mut total) = (0u64, 0u64);
                // SAFETY: valid out-pointers.
                self.check("memory_usage", unsafe {
                    f(self.dev(), &mut free, &mut total)
                })?;
                Ok((free, total))
            }
            None => Err(Error::unimplemented(format!(
                "plugin '{}' does not report its memory usage (no memory_usage in its stream executor)",
                self.platform.plugin.name
            ))),
        }
    }

    fn allocator_figures(&self) -> Option<Result<AllocatorFigures>> {
        let f = self.se.allocator_stats?;
        // SAFETY: plain data; every field is written by the plugin or stays zero.
        let mut stats: abi::dpp_allocator_stats_t = unsafe { std::mem::zeroed() };
        stats.struct_size = std::mem::size_of::<abi::dpp_allocator_stats_t>();
        // SAFETY: a valid out-pointer to a struct of the size it says.
        let status = unsafe { f(self.dev(), &mut stats) };
        Some(
            self.check("allocator_stats", status)
                .map(|()| AllocatorFigures {
                    bytes_reserved: stats.bytes_reserved,
                    largest_free_block: stats.largest_free_block,
                }),
        )
    }

    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: *const u8, size: u64) -> Result<()> {
        let f = required!(self.se, memcpy_htod);
        // SAFETY: `src` is readable (the caller's contract); `dst` lies in a live allocation.
        self.check("memcpy_htod", unsafe {
            f(self.dev(), dst.0, src.cast(), size)
        })
    }

    unsafe fn memcpy_dtoh(&self, dst: *mut u8, src: DevicePtr, size: u64) -> Result<()> {
        let f = required!(self.se, memcpy_dtoh);
        // SAFETY: `dst` is writable (the caller's contract).
        self.check("memcpy_dtoh", unsafe {
            f(self.dev(), dst.cast(), src.0, size)
        })
    }

    fn memcpy_dtod(&self, dst: DevicePtr, src: DevicePtr, size: u64) -> Result<()> {
        let f = required!(self.se, memcpy_dtod);
        // SAFETY: device addresses only.
        self.check("memcpy_dtod", unsafe { f(self.dev(), dst.0, src.0, size) })
    }

    fn memset(&self, dst: DevicePtr, value: u8, size: u64) -> Result<()> {
        let f = required!(self.se, memset);
        // SAFETY: device addresses only.
        self.check("memset", unsafe { f(self.dev(), dst.0, value, size) })
    }

    fn create_stream(&self) -> Result<RawStream> {
        let f = required!(self.se, create_stream);
        let mut s: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        self.check("create_stream", unsafe { f(self.dev(), &mut s) })?;
        Ok(Box::new(Handle(s)))
    }

    fn destroy_stream(&self, stream: RawStream) {
        if let (Ok(h), Some(f)) = (handle(stream.as_ref(), "stream"), self.se.destroy_stream) {
            // SAFETY: a stream of this device, destroyed once.
            unsafe { f(self.dev(), h.0) };
            let _ = take_plugin_error();
        }
    }

    fn synchronize_stream(&self, stream: &RawStream) -> Result<()> {
        let f = required!(self.se, synchronize_stream);
        let h = handle(stream.as_ref(), "stream")?;
        // SAFETY: a stream of this device.
        self.check("synchronize_stream", unsafe { f(self.dev(), h.0) })
    }

    fn stream_wait_stream(&self, stream: &RawStream, other: &RawStream) -> Result<()> {
        let f = required!(self.se, stream_wait_stream);
        let (a, b) = (
            handle(stream.as_ref(), "stream")?,
            handle(other.as_ref(), "stream")?,
        );
        // SAFETY: streams of this device.
        self.check("stream_wait_stream", unsafe { f(self.dev(), a.0, b.0) })
    }

    unsafe fn memcpy_htod_async(
        &self,
        stream: &RawStream,
        dst: DevicePtr,
        src: *const u8,
        size: u64,
    ) -> Result<()> {
        let f = required!(self.se, memcpy_htod_async);
        let h = handle(stream.as_ref(), "stream")?;
        // SAFETY: the caller keeps `src` valid until the stream reaches the copy.
        self.check("memcpy_htod_async", unsafe {
            f(self.dev(), h.0, dst.0, src.cast(), size)
        })
    }

    unsafe fn memcpy_dtoh_async(
        &self,
        stream: &RawStream,
        dst: *mut u8,
        src: DevicePtr,
        size: u64,
    ) -> Result<()> {
        let f = required!(self.se, memcpy_dtoh_async);
        let h = handle(stream.as_ref(), "stream")?;
        // SAFETY: the caller keeps `dst` valid until the stream reaches the copy.
        self.check("memcpy_dtoh_async", unsafe {
            f(self.dev(), h.0, dst.cast(), src.0, size)
        })
    }

    fn memcpy_dtod_async(
        &self,
        stream: &RawStream,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
    ) -> Result<()> {
        let f = required!(self.se, memcpy_dtod_async);
        let h = handle(stream.as_ref(), "stream")?;
        // SAFETY: device addresses only.
        self.check("memcpy_dtod_async", unsafe {
            f(self.dev(), h.0, dst.0, src.0, size)
        })
    }

    fn memset_async(&self, stream: &RawStream, dst: DevicePtr, value: u8, size: u64) -> Result<()> {
        let f = required!(self.se, memset_async);
        let h = handle(stream.as_ref(), "stream")?;
        // SAFETY: device addresses only.
        self.check("memset_async", unsafe {
            f(self.dev(), h.0, dst.0, value, size)
        })
    }

    fn host_callback(&self, stream: &RawStream, func: HostFn) -> Result<()> {
        let f = required!(self.se, host_callback);
        let h = handle(stream.as_ref(), "stream")?;
        let ticket = PENDING.hold(func);
        let arg = std::ptr::without_provenance_mut(ticket as usize);
        // SAFETY: a stream of this device; the argument is a ticket, never dereferenced.
        let status = unsafe { f(self.dev(), h.0, Some(run_host_fn), arg) };
        let result = self.check("host_callback", status);
        if result.is_err() {
            // Refused: the plugin must not run it now; one that did already is told.
            if PENDING.take(ticket).is_none() {
                crate::log::error(&format!(
                    "plugin '{}': host_callback ran the callback and then returned an error \
                     (a refused callback must never run)",
                    self.platform.plugin.name
                ));
            }
        }
        result
    }

    fn create_event(&self) -> Result<RawEvent> {
        let f = required!(self.se, create_event);
        let mut e: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        self.check("create_event", unsafe { f(self.dev(), &mut e) })?;
        Ok(Box::new(Handle(e)))
    }

    fn destroy_event(&self, event: RawEvent) {
        if let (Ok(h), Some(f)) = (handle(event.as_ref(), "event"), self.se.destroy_event) {
            // SAFETY: an event of this device, destroyed once.
            unsafe { f(self.dev(), h.0) };
            let _ = take_plugin_error();
        }
    }

    fn record_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()> {
        let f = required!(self.se, record_event);
        let (s, e) = (
            handle(stream.as_ref(), "stream")?,
            handle(event.as_ref(), "event")?,
        );
        // SAFETY: a stream and an event of this device.
        self.check("record_event", unsafe { f(self.dev(), s.0, e.0) })
    }

    fn event_status(&self, event: &RawEvent) -> Result<EventStatus> {
        let f = required!(self.se, event_status);
        let e = handle(event.as_ref(), "event")?;
        let mut st = -1;
        // SAFETY: an event of this device and a valid out-pointer.
        self.check("event_status", unsafe { f(self.dev(), e.0, &mut st) })?;
        match st {
            abi::DPP_EVENT_PENDING => Ok(EventStatus::Pending),
            abi::DPP_EVENT_COMPLETE => Ok(EventStatus::Complete),
            abi::DPP_EVENT_ERROR => Ok(EventStatus::Error),
            other => Err(Error::internal(format!(
                "plugin '{}': event_status wrote {other}, not a DPP_EVENT_* value",
                self.platform.plugin.name
            ))),
        }
    }

    fn stream_wait_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()> {
        let f = required!(self.se, stream_wait_event);
        let (s, e) = (
            handle(stream.as_ref(), "stream")?,
            handle(event.as_ref(), "event")?,
        );
        // SAFETY: a stream and an event of this device.
        self.check("stream_wait_event", unsafe { f(self.dev(), s.0, e.0) })
    }

    fn event_synchronize(&self, event: &RawEvent) -> Result<()> {
        let f = required!(self.se, event_synchronize);
        let e = handle(event.as_ref(), "event")?;
        // SAFETY: an event of this device.
        self.check("event_synchronize", unsafe { f(self.dev(), e.0) })
    }

    fn times_events(&self) -> bool {
        self.se.event_elapsed_ns.is_some()
    }

    fn event_elapsed_ns(&self, start: &RawEvent, end: &RawEvent) -> Result<i64> {
        let Some(f) = self.se.event_elapsed_ns else {
            let host_minor = self.platform.plugin.context.host_minor;
            let why = if host_minor < 4 {
                format!(
                    "this host speaks plugin ABI {}.{host_minor}, before timed events",
                    abi::DPP_ABI_MAJOR
                )
            } else if self.se.struct_size < abi::DPP_STREAM_EXECUTOR_STRUCT_SIZE {
                "its table is of ABI 1.0–1.3, before timed events".to_string()
            } else {
                "its event_elapsed_ns is NULL".to_string()
            };
            return Err(Error::unimplemented(format!(
                "plugin '{}' does not time events ({why})",
                self.platform.plugin.name
            )));
        };
        let (s, e) = (
            handle(start.as_ref(), "event")?,
            handle(end.as_ref(), "event")?,
        );
        let mut ns = 0i64;
        // SAFETY: two events of this device and a valid out-pointer.
        self.check("event_elapsed_ns", unsafe {
            f(self.dev(), s.0, e.0, &mut ns)
        })?;
        Ok(ns)
    }

    fn plugin_handles(&self, stream: &RawStream) -> Option<(*mut c_void, *mut c_void)> {
        handle(stream.as_ref(), "stream")
            .ok()
            .map(|h| (self.dev(), h.0))
    }

    fn synchronize_all(&self) -> Result<()> {
        let f = required!(self.se, synchronize_all);
        // SAFETY: the plugin's own device.
        self.check("synchronize_all", unsafe { f(self.dev()) })
    }
}
