//! The runtime: the host object owning platforms and devices. There is no process-wide
//! state: two runtimes in one process are independent.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::device::{set_active, Device, PlatformEntry};
use crate::dispatch::{KernelChoice, Plans, RunOptions};
use crate::error::{Code, Error, Result};
use crate::host::HostPlatform;
use crate::kernel::{Binding, KernelDef, KernelRegistry};
use crate::op::{Attrs, OpDef, OpHandle, OpRegistry, Outputs};
use crate::placement::{PlacementCallback, PlacementLog};
use crate::platform::{validate_name, Platform};
use crate::plugin::{self, ExistingPlatform, LoadedPlugin, PluginFailure, PluginInfo};
use crate::scope::{DeviceScope, OpInfo};
use crate::spec::DeviceSpec;
use crate::tensor::{DType, Tensor};
use crate::trace::{Trace, Tracer};

/// The most logical CPU devices a runtime may have.
pub const MAX_CPU_DEVICES: usize = 64;

/// Options of [`Runtime::new`].
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Logical devices of the built-in `HOST` platform (1..=64).
    pub cpu_device_count: usize,
    /// Bytes each CPU device may hold; `None` for no limit. The initial value of the CPU
    /// devices' [`Device::set_memory_limit`](crate::Device::set_memory_limit).
    pub cpu_memory_limit: Option<u64>,
    /// Plugin search path (`:`-separated files or folders, absolute), loaded at creation.
    pub plugin_path: Option<String>,
    /// Also load plugins from `DEVPLUG_PLUGIN_PATH` (ignored under elevated privileges).
    pub discover_from_env: bool,
    /// Ops without a kernel or decomposition on their device run on the CPU (default true);
    /// false is strict mode: they fail.
    pub soft_placement: bool,
    /// Threads a CPU kernel may use (default: the machine's available parallelism).
    pub intra_op_threads: usize,
    /// The plugin ABI minor this runtime speaks to the plugins it loads: `None` (the default)
    /// for the newest, [`PLUGIN_ABI_MINOR`]; `Some(n)` to act as a host of ABI 1.n, for
    /// conformance testing (`devplug check` runs a plugin that declares an older minor once
    /// more as a host of that minor). Such a runtime does what a real 1.n host does: it
    /// refuses a plugin that declares a newer minor (`ABI_MISMATCH`, quoting both versions);
    /// its host table reports ABI 1.n and that minor's `struct_size` (64 for 1.0, 112 for 1.1,
    /// 128 for 1.2 and 1.3, 136 since 1.4), the functions of later minors NULL; it reads
    /// `dpp_kernel_t` only as far as 1.n defines it (before 1.5: 80 bytes, so a kernel's
    /// `create` and `destroy` are ignored and never called) and passes kernel contexts of
    /// 1.n's size (80 bytes before 1.5; the `state` slot past them, which such a host does not
    /// have, holds a non-NULL value no `create` made, so that a plugin reading it without
    /// checking `struct_size` is caught); it reads the stream executor table only to 240 bytes
    /// before 1.4 (no event timing); before 1.3 it knows no f16 or bf16 (a kernel naming them
    /// is refused as an unknown dtype, and no half tensor reaches a plugin). Built-in kernels
    /// and platforms are not affected. A minor newer than [`PLUGIN_ABI_MINOR`] is
    /// `INVALID_ARGUMENT`.
    pub plugin_abi_minor: Option<u32>,
}

/// The newest plugin ABI minor, the one a runtime speaks to plugins unless
/// [`RuntimeOptions::plugin_abi_minor`] names an older one (the ABI's major is 1).
pub const PLUGIN_ABI_MINOR: u32 = plugin::NEWEST_ABI_MINOR;

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            cpu_device_count: 1,
            cpu_memory_limit: None,
            plugin_path: None,
            discover_from_env: true,
            soft_placement: true,
            intra_op_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            plugin_abi_minor: None,
        }
    }
}

/// A loaded plugin, as the runtime keeps it.
struct PluginRecord {
    plugin: Arc<LoadedPlugin>,
    identity: Option<(u64, u64)>,
    platforms: Vec<String>,
    ops: Vec<String>,
}

/// The host object: the platforms and their devices, the ops, the kernels, the placement log
/// and the loaded plugins. There is no process-wide state; two runtimes are independent.
///
/// `Send` and `Sync`: share one runtime between threads by reference or in an `Arc`; every
/// method takes `&self`.
///
/// Dropping it waits for the work queued on every device (a failure nobody synchronized with
/// is logged), then lets go of its devices, platforms and plugins. Objects that hold a device
/// keep it alive: an `Arc<Device>`, a [`Tensor`], a [`Buffer`](crate::Buffer), a
/// [`Stream`](crate::Stream) or a [`Variable`](crate::Variable) stays usable after the
/// runtime is gone (a plugin's library stays loaded until the last object of it is dropped).
/// What only the runtime can do (running ops, placing, loading plugins) goes with it; another
/// runtime refuses its devices and op handles, and takes its tensors as inputs (copied).
///
/// The guide for Rust hosts is `docs/rust-host.md` in the repository.
pub struct Runtime {
    platforms: RwLock<Vec<Arc<PlatformEntry>>>,
    devices: RwLock<Vec<Arc<Device>>>,
    plugins: Mutex<Vec<PluginRecord>>,
    /// Held while ops, kernels or platforms are registered, and across a plugin load's commit
    /// (its checks and registrations), so that a host registering at the same moment cannot
    /// take a name between a plugin's checks and its registration. Not held while a plugin's
    /// init runs.
    registering: Mutex<()>,
    failures: Mutex<Vec<PluginFailure>>,
    ops: OpRegistry,
    kernels: KernelRegistry,
    plans: Plans,
    placement: PlacementLog,
    /// Shared with the devices (their copies and waits are traced too).
    tracer: Arc<Tracer>,
    /// `DEVPLUG_TRACE`: where the trace of the runtime's whole life is written when it is
    /// destroyed.
    trace_file: Option<std::path::PathBuf>,
    soft_placement: bool,
    /// The plugin ABI minor spoken to plugins ([`RuntimeOptions::plugin_abi_minor`]).
    plugin_abi_minor: u32,
    cpu0: Arc<Device>,
    /// Unique in the process: what the device scopes entered on a thread are keyed by.
    id: u64,
}

static NEXT_RUNTIME_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Runtime {
    /// Creates a runtime: the `HOST` platform with `options.cpu_device_count` CPU devices
    /// (`CPU:0`…), then the plugins of `options.plugin_path` and, with
    /// `options.discover_from_env`, of `DEVPLUG_PLUGIN_PATH`. A plugin that fails to load does
    /// not fail the creation: it is logged and kept in [`Runtime::plugin_failures`].
    /// `INVALID_ARGUMENT` for a CPU device count outside 1..=[`MAX_CPU_DEVICES`] and for a
    /// `plugin_abi_minor` newer than [`PLUGIN_ABI_MINOR`].
    ///
    /// ```
    /// use devplug_core::{Runtime, RuntimeOptions};
    /// let rt = Runtime::new(RuntimeOptions { cpu_device_count: 2, ..Default::default() })?;
    /// assert_eq!(rt.find_device("CPU:1")?.name(), "CPU:1");
    /// # Ok::<(), devplug_core::Error>(())
    /// ```
    pub fn new(options: RuntimeOptions) -> Result<Runtime> {
        if !(1..=MAX_CPU_DEVICES).contains(&options.cpu_device_count) {
            return Err(Error::invalid_argument(format!(
                "cpu_device_count is {}; it must be between 1 and {MAX_CPU_DEVICES}",
                options.cpu_device_count
            )));
        }
        let plugin_abi_minor = match options.plugin_abi_minor {
            None => PLUGIN_ABI_MINOR,
            Some(n) if n <= PLUGIN_ABI_MINOR => n,
            Some(n) => {
                return Err(Error::invalid_argument(format!(
                    "plugin_abi_minor is {n}: this host speaks plugin ABI 1.0 to \
                     1.{PLUGIN_ABI_MINOR} (None for the newest)"
                )))
            }
        };
        let host = Arc::new(HostPlatform::new(options.cpu_device_count));
        let host_entry = Arc::new(PlatformEntry {
            info: host.info().clone(),
            platform: host.clone(),
            owner: "built-in".into(),
            active: AtomicBool::new(true),
        });
        let id = NEXT_RUNTIME_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tracer = Arc::new(Tracer::default());
        let mut devices = Vec::with_capacity(options.cpu_device_count);
        for ordinal in 0..options.cpu_device_count {
            devices.push(Arc::new(Device::new(
                id,
                ordinal,
                host_entry.clone(),
                ordinal,
                options.cpu_memory_limit,
                tracer.clone(),
            )?));
        }
        let rt = Runtime {
            cpu0: devices[0].clone(),
            platforms: RwLock::new(vec![host_entry]),
            devices: RwLock::new(devices),
            plugins: Mutex::new(Vec::new()),
            registering: Mutex::new(()),
            failures: Mutex::new(Vec::new()),
            ops: OpRegistry::with_basis(),
            kernels: KernelRegistry::default(),
            plans: Plans::default(),
            placement: PlacementLog::default(),
            tracer,
            trace_file: trace_file_from_env(),
            soft_placement: options.soft_placement,
            plugin_abi_minor,
            id,
        };
        if rt.trace_file.is_some() {
            rt.tracer.start();
        }
        crate::host::register_kernels(&rt, options.intra_op_threads)?;
        if let Some(path) = &options.plugin_path {
            rt.load_search_path(path);
        }
        if options.discover_from_env {
            if let Some(path) = plugin::plugin_path_from_env(plugin::process_is_elevated()) {
                rt.load_search_path(&path);
            }
        }
        Ok(rt)
    }

    /// Registers a platform the host implements in Rust and creates its devices.
    ///
    /// Refused (nothing registered) when the name is taken, when another platform of the
    /// same device type has the same priority, or when a device cannot be created.
    pub fn register_platform(
        &self,
        platform: Arc<dyn Platform>,
        memory_limit: Option<u64>,
    ) -> Result<()> {
        let _registering = self.registering.lock();
        self.register_platforms(vec![platform], "built-in", memory_limit)
    }

    /// Registers platforms all or nothing.
    fn register_platforms(
        &self,
        new: Vec<Arc<dyn Platform>>,
        owner: &str,
        memory_limit: Option<u64>,
    ) -> Result<()> {
        let mut platforms = self.platforms.write();
        let mut entries: Vec<Arc<PlatformEntry>> = Vec::new();
        for platform in new {
            let info = platform.info().clone();
            validate_name("platform name", &info.name)?;
            validate_name("device type", &info.device_type)?;
            for p in platforms.iter().chain(entries.iter()) {
                if p.info.name == info.name {
                    return Err(Error::already_exists(format!(
                        "{owner}: platform name '{}' is already registered by {}",
                        info.name, p.owner
                    )));
                }
                if p.info.device_type == info.device_type && p.info.priority == info.priority {
                    return Err(Error::already_exists(format!(
                        "{owner}: platform '{}' has device type '{}' and priority {}, the same as platform '{}' of {}; platforms of one device type need distinct priorities",
                        info.name, info.device_type, info.priority, p.info.name, p.owner
                    )));
                }
            }
            entries.push(Arc::new(PlatformEntry {
                info,
                platform,
                owner: owner.to_string(),
                active: AtomicBool::new(false),
            }));
        }
        let mut new_devices = Vec::new();
        let first_index = self.devices.read().len();
        for entry in &entries {
            for ordinal in 0..entry.platform.device_count() {
                let index = first_index + new_devices.len();
                new_devices.push(Arc::new(Device::new(
                    self.id,
                    index,
                    entry.clone(),
                    ordinal,
                    memory_limit,
                    self.tracer.clone(),
                )?));
            }
        }
        for entry in entries {
            let device_type = entry.info.device_type.clone();
            platforms.push(entry);
            update_active(&platforms, &device_type);
        }
        self.devices.write().extend(new_devices);
        Ok(())
    }

    /// Loads a device plugin from an absolute path, with `key=value` load options.
    ///
    /// Loading the same file again (also through another path) with the same options (in any
    /// order) returns the plugin already loaded; with other options it is `ALREADY_EXISTS`
    /// (a library is loaded once per runtime, so the options could not apply). A failure
    /// costs only this plugin: it is returned, and also kept in [`Runtime::plugin_failures`]
    /// (and logged at `info`: the caller has the error; failures of the plugins a search path
    /// finds are logged as warnings).
    pub fn load_plugin(
        &self,
        path: impl AsRef<Path>,
        options: &[(&str, &str)],
    ) -> Result<PluginInfo> {
        self.load_plugin_reporting(path.as_ref(), options, crate::log::Level::Info)
    }

    /// [`Runtime::load_plugin`], logging a failure at `level`.
    fn load_plugin_reporting(
        &self,
        path: &Path,
        options: &[(&str, &str)],
        level: crate::log::Level,
    ) -> Result<PluginInfo> {
        let result = self.load_plugin_inner(path, options);
        if let Err(e) = &result {
            crate::log::log(level, &e.message);
            self.failures.lock().push(PluginFailure {
                path: path.to_path_buf(),
                error: e.clone(),
            });
        }
        result
    }

    fn load_plugin_inner(&self, path: &Path, options: &[(&str, &str)]) -> Result<PluginInfo> {
        let identity = plugin::file_identity(path);
        let mut plugins = self.plugins.lock();
        if let Some(r) = plugins
            .iter()
            .find(|r| identity.is_some() && r.identity == identity)
        {
            let had: Vec<(&str, &str)> = r.plugin.context.options().collect();
            let mut given = options.to_vec();
            let mut kept = had.clone();
            given.sort_unstable();
            kept.sort_unstable();
            if given != kept {
                return Err(Error::new(
                    Code::AlreadyExists,
                    format!(
                        "plugin '{}' ({}) is loaded already, with the options {had:?}; it \
                         cannot be loaded again with the options {options:?} (a library is \
                         loaded once per runtime: give the options at the first load, or use \
                         another runtime)",
                        r.plugin.name,
                        path.display()
                    ),
                ));
            }
            return Ok(info_of(r));
        }
        let existing: Vec<ExistingPlatform> = self
            .platforms
            .read()
            .iter()
            .map(|p| ExistingPlatform {
                name: p.info.name.clone(),
                device_type: p.info.device_type.clone(),
                priority: p.info.priority,
                owner: p.owner.clone(),
            })
            .collect();
        let options: Vec<(String, String)> = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (loaded, platforms, mut kernels, op_texts) =
            plugin::load(path, &options, existing, self.plugin_abi_minor)?;
        let _registering = self.registering.lock();
        let ops = self
            .plugin_ops(&op_texts)
            .map_err(|e| e.context(format!("plugin '{}' ({})", loaded.name, path.display())))?;
        let type_var = |def: &OpDef| def.type_vars.first().cloned();
        let op_type_var = |op: &str| match ops.iter().find(|p| p.def.name == op) {
            Some(p) => Ok(type_var(&p.def)),
            None => self.ops.find(op).map(|h| type_var(h.def())).map_err(|e| {
                let hint = if op.contains('.') {
                    " (an op of the plugin's own needs its register_op call in init)"
                } else {
                    ""
                };
                e.context(format!(
                    "plugin '{}' ({}) registered a kernel for an unknown op{hint}",
                    loaded.name,
                    path.display()
                ))
            }),
        };
        plugin::commit_kernels(&loaded, &mut kernels, &op_type_var)?;
        self.kernels
            .check_all(&kernels)
            .map_err(|e| e.context(format!("plugin '{}' ({})", loaded.name, path.display())))?;
        let names: Vec<String> = platforms.iter().map(|p| p.info.name.clone()).collect();
        let owner = format!("plugin '{}'", loaded.name);
        let dyn_platforms: Vec<Arc<dyn Platform>> = platforms
            .into_iter()
            .map(|p| p as Arc<dyn Platform>)
            .collect();
        self.register_platforms(dyn_platforms, &owner, None)
            .map_err(|e| e.context(format!("plugin '{}' ({})", loaded.name, path.display())))?;
        let op_names: Vec<String> = ops.iter().map(|p| p.def.name.clone()).collect();
        for op in ops {
            // Names were checked free under `registering`, which every registration holds.
            self.ops
                .register_text(op)
                .map_err(|e| e.context(format!("plugin '{}' ({})", loaded.name, path.display())))?;
        }
        self.kernels
            .register_all(kernels)
            .map_err(|e| e.context(format!("plugin '{}' ({})", loaded.name, path.display())))?;
        let record = PluginRecord {
            plugin: loaded,
            identity,
            platforms: names,
            ops: op_names,
        };
        let info = info_of(&record);
        plugins.push(record);
        Ok(info)
    }

    /// Parses the ops a plugin registered, in order (each may use the ones before it), and
    /// checks that their names are free.
    fn plugin_ops(
        &self,
        texts: &[crate::op::text::OpText],
    ) -> Result<Vec<crate::op::text::Parsed>> {
        let mut defs: Vec<OpHandle> = Vec::new();
        let mut parsed = Vec::new();
        for t in texts {
            let lookup = |name: &str| {
                defs.iter()
                    .find(|d| d.name() == name)
                    .cloned()
                    .or_else(|| self.ops.find(name).ok())
            };
            let op = crate::op::text::parse_op(t, &lookup)?;
            if self.ops.find(&op.def.name).is_ok() {
                return Err(Error::already_exists(format!(
                    "op '{}' is already registered (by the runtime or another plugin)",
                    op.def.name
                )));
            }
            defs.push(OpHandle::provisional(
                op.def.clone(),
                Some(op.partial.clone()),
                op.body,
            ));
            parsed.push(op);
        }
        Ok(parsed)
    }

    /// Loads every plugin of a `:`-separated search path (files or folders, absolute).
    /// Failures are kept in [`Runtime::plugin_failures`]; the others load regardless.
    pub fn load_search_path(&self, search_path: &str) -> Vec<PluginInfo> {
        let mut loaded = Vec::new();
        for candidate in plugin::search_path_candidates(search_path) {
            match candidate {
                Ok(path) => {
                    if let Ok(info) =
                        self.load_plugin_reporting(&path, &[], crate::log::Level::Warn)
                    {
                        loaded.push(info);
                    }
                }
                Err((path, why)) => {
                    crate::log::warn(&format!(
                        "plugin search path entry '{}' dropped: {why}",
                        path.display()
                    ));
                    self.failures.lock().push(PluginFailure {
                        path,
                        error: Error::invalid_argument(why),
                    });
                }
            }
        }
        loaded
    }

    /// The plugins loaded, in load order.
    pub fn plugins(&self) -> Vec<PluginInfo> {
        self.plugins.lock().iter().map(info_of).collect()
    }

    /// Every plugin load that failed, with its reason, in order.
    pub fn plugin_failures(&self) -> Vec<PluginFailure> {
        self.failures.lock().clone()
    }

    /// Every device, in platform registration order then by ordinal.
    pub fn devices(&self) -> Vec<Arc<Device>> {
        self.devices.read().clone()
    }

    /// How many devices the runtime has (CPUs and plugins' devices together).
    pub fn device_count(&self) -> usize {
        self.devices.read().len()
    }

    /// The device at `index` in [`Runtime::devices`]' order ([`Device::index`]); `None` past
    /// the end.
    pub fn device(&self, index: usize) -> Option<Arc<Device>> {
        self.devices.read().get(index).cloned()
    }

    /// The registered platforms, in registration order (`HOST` first, then the plugins' in
    /// load order: the order of [`Runtime::devices`]), those without devices included. Each
    /// entry has its [`PlatformInfo`](crate::platform::PlatformInfo) (`info`: name, device
    /// type, priority, vendor, version, host_visible), its `owner` (`built-in` or
    /// `plugin 'NAME'`), its device count (`platform.device_count()`) and
    /// [`is_active`](PlatformEntry::is_active).
    pub fn platforms(&self) -> Vec<Arc<PlatformEntry>> {
        self.platforms.read().clone()
    }

    /// Resolves a device spec: `TYPE:i` is device i of the active platform of that type;
    /// `PLATFORM:i` is device i of that platform. Case-insensitive; the ordinal defaults to 0;
    /// TensorFlow's `/device:CPU:1` form is accepted. `INVALID_ARGUMENT` for a malformed spec,
    /// `NOT_FOUND` (listing the known types and platforms) for an unknown name or ordinal.
    pub fn find_device(&self, spec: &str) -> Result<Arc<Device>> {
        let spec = DeviceSpec::parse(spec)?;
        self.resolve(&spec)
    }

    /// [`Runtime::find_device`] for a spec parsed already ([`DeviceSpec::parse`]).
    pub fn resolve(&self, spec: &DeviceSpec) -> Result<Arc<Device>> {
        let platform = {
            let platforms = self.platforms.read();
            platforms
                .iter()
                .find(|p| p.info.device_type == spec.name && p.is_active())
                .or_else(|| platforms.iter().find(|p| p.info.name == spec.name))
                .cloned()
        };
        let Some(platform) = platform else {
            let known: Vec<String> = self
                .platforms
                .read()
                .iter()
                .map(|p| format!("{} (platform {})", p.info.device_type, p.info.name))
                .collect();
            return Err(Error::not_found(format!(
                "no device type or platform named '{}'; known: {}",
                spec.name,
                known.join(", ")
            )));
        };
        self.devices
            .read()
            .iter()
            .find(|d| std::ptr::eq(d.platform(), &*platform) && d.ordinal() == spec.ordinal)
            .cloned()
            .ok_or_else(|| {
                Error::not_found(format!(
                    "device {spec} does not exist: platform {} has {} device(s)",
                    platform.info.name,
                    platform.platform.device_count()
                ))
            })
    }

    /// The op registry (the basis set plus what hosts and plugins added).
    pub fn ops(&self) -> &OpRegistry {
        &self.ops
    }

    /// The kernel registry.
    pub fn kernels(&self) -> &KernelRegistry {
        &self.kernels
    }

    pub(crate) fn plans(&self) -> &Plans {
        &self.plans
    }

    /// The placement log (see [`crate::placement`]); hosts install a callback with
    /// [`Runtime::set_placement_callback`].
    pub fn placement(&self) -> &PlacementLog {
        &self.placement
    }

    pub(crate) fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    /// Starts a trace of what dispatch runs (see [`crate::trace`]); a trace already on starts
    /// over.
    pub fn start_trace(&self) {
        self.tracer.start();
    }

    /// Stops the trace and returns it; empty when none was on. With `DEVPLUG_TRACE` set, the
    /// trace the runtime started is the one this stops: the file gets the trace that is on
    /// when the runtime is destroyed, if one is.
    pub fn stop_trace(&self) -> Trace {
        self.tracer.stop()
    }

    /// Whether a trace is on.
    pub fn tracing(&self) -> bool {
        self.tracer.on()
    }

    /// Whether ops fall back to the CPU when their device cannot run them.
    pub fn soft_placement(&self) -> bool {
        self.soft_placement
    }

    /// `CPU:0`, the default device and the target of soft placement.
    pub fn cpu_device(&self) -> Result<Arc<Device>> {
        Ok(self.cpu0.clone())
    }

    /// The device ops run on when none is given: `CPU:0`, borrowed.
    pub fn default_device(&self) -> &Arc<Device> {
        &self.cpu0
    }

    /// A scope that places ops on `device` (see [`crate::scope`]); `INVALID_ARGUMENT` for a
    /// device of another runtime.
    pub fn device_scope(&self, device: &Arc<Device>) -> Result<DeviceScope> {
        if !self.owns(device) {
            return Err(Error::invalid_argument(format!(
                "device scope: {} is a device of another runtime",
                device.qualified_name()
            )));
        }
        Ok(DeviceScope::device(self.id, device.clone()))
    }

    /// A scope whose `setter` places each op (see [`crate::scope`]): it returns a device of
    /// this runtime, `Ok(None)` to leave the choice to the scopes around it, or an error that
    /// fails the op.
    pub fn setter_scope(
        &self,
        setter: impl Fn(&OpInfo) -> Result<Option<Arc<Device>>> + Send + Sync + 'static,
    ) -> DeviceScope {
        DeviceScope::setter(self.id, Arc::new(setter))
    }

    /// The placement context in force on this thread, captured as one scope: entered later
    /// (on any thread) it places ops as they would have been placed here, whatever scopes are
    /// entered around it then.
    pub fn current_scope(&self) -> DeviceScope {
        crate::scope::capture(self.id)
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether `device` is one of this runtime's (a compare: no lock).
    pub fn owns(&self, device: &Device) -> bool {
        device.runtime_id() == self.id
    }

    /// Whether `op` was resolved by this runtime (a compare: no lock). An op handle of another
    /// runtime may name another op at the same position of its registry.
    pub fn owns_op(&self, op: &OpHandle) -> bool {
        self.ops.owns(op)
    }

    /// Resolves an op name once; run it by handle afterwards.
    pub fn op(&self, name: &str) -> Result<OpHandle> {
        self.ops.find(name)
    }

    /// Registers an op built in code ([`OpDef`]; [`Runtime::register_op_text`] takes the text
    /// notation). `ALREADY_EXISTS` for a name the runtime has; `INVALID_ARGUMENT` for a name
    /// that is not `namespace.Name` (e.g. `app.Swish`) or an inconsistent definition (a name
    /// declared twice, a type variable allowing no dtype, a default of another type than its
    /// attribute). Its shape function and decomposition are the op's contract: every run checks
    /// the dtypes the shape function gives against the signature, and what the decomposition
    /// returns against the shape function (`INVALID_ARGUMENT` naming the output otherwise).
    pub fn register_op(&self, def: OpDef) -> Result<OpHandle> {
        let _registering = self.registering.lock();
        self.refuse_taken_op_name(&def.name)?;
        if !crate::op::is_namespaced(&def.name) {
            return Err(Error::invalid_argument(format!(
                "op definition '{}': the name must be `namespace.Name` (letters, digits, `_`; \
                 a namespace is required, e.g. `app.Swish`)",
                def.name
            )));
        }
        self.ops.register_unchecked(def)
    }

    /// `ALREADY_EXISTS` for the name of an op the runtime has, before any other check of a
    /// definition (a basis name is taken, whatever else is wrong with the definition).
    fn refuse_taken_op_name(&self, name: &str) -> Result<()> {
        if self.ops.find(name).is_ok() {
            return Err(Error::already_exists(format!(
                "op '{name}' is already registered"
            )));
        }
        Ok(())
    }

    /// Registers an op defined in text, the notation plugins use ([`crate::op::text`]): a
    /// signature and a body in ops the runtime has, which is the op's shape function and its
    /// decomposition, so it runs on every device. `INVALID_ARGUMENT` naming the op, the field
    /// and the statement for a mistake; `ALREADY_EXISTS` for a name the runtime has.
    pub fn register_op_text(&self, text: &crate::op::text::OpText) -> Result<OpHandle> {
        self.refuse_taken_op_name(text.name.trim())?;
        let op = crate::op::text::parse_op(text, &|name| self.ops.find(name).ok())?;
        let _registering = self.registering.lock();
        self.ops.register_text(op)
    }

    /// Registers a kernel for an existing op. `NOT_FOUND` for an unknown op; `INVALID_ARGUMENT`
    /// for a malformed device type or platform name, a platform of another device type than
    /// the kernel's (a platform not registered yet is taken: a plugin may bring it later), or a
    /// dtype the op's type variable does not take;
    /// `ALREADY_EXISTS`, naming both sources, for a kernel of equal priority for the same op,
    /// device type, binding and an overlapping dtype.
    pub fn register_kernel(&self, def: KernelDef) -> Result<()> {
        let _registering = self.registering.lock();
        let op = self
            .ops
            .find(&def.op)
            .map_err(|e| e.context(format!("registering a kernel from {}", def.source)))?;
        validate_name("device type", &def.device_type)?;
        // A binding that could never match: a name no platform may have, or a platform of
        // another device type. A platform not registered yet is taken (a plugin may load it
        // later).
        if let Binding::Platform(p) = &def.binding {
            validate_name("platform", p).map_err(|e| {
                e.context(format!(
                    "kernel {} on {} from {}",
                    def.op, def.device_type, def.source
                ))
            })?;
            if let Some(entry) = self.platforms().into_iter().find(|e| e.info.name == *p) {
                if entry.info.device_type != def.device_type {
                    return Err(Error::invalid_argument(format!(
                        "kernel {} on {} from {}: platform {p} has device type {}, so a kernel \
                         for {} bound to it would never run",
                        def.op,
                        def.device_type,
                        def.source,
                        entry.info.device_type,
                        def.device_type
                    )));
                }
            }
        }
        // A dtype the op's type variable does not take could never reach the kernel: refused,
        // as a plugin's kernel is when its load commits.
        if let Some(var) = op.def().type_vars.first() {
            if let Some((_, d)) = var.first_not_taken(&def.dtypes) {
                return Err(Error::invalid_argument(format!(
                    "kernel {} on {} from {}: dtype {} is not one op {} takes (its type \
                     variable {} takes {})",
                    def.op,
                    def.device_type,
                    def.source,
                    d.name(),
                    def.op,
                    var.name,
                    var.allowed_names()
                )));
            }
        }
        self.kernels.register(def)
    }

    /// How `op` would run on `device` for `dtype`, before anything runs: with a kernel of the
    /// device (which, and from whom), its decomposition there, soft placement to the CPU's
    /// kernel, or not at all ([`KernelChoice`]) — the choice [`Runtime::run`] makes for inputs
    /// of that dtype, what a framework that partitions its own graph asks. `dtype` is the one
    /// of the op's first type variable (required when it has one); for an op without type
    /// variables (`Fill`, `Iota`), its output's, or `None` for any. `INVALID_ARGUMENT` for an
    /// op or device of another runtime, or a dtype the op does not take.
    pub fn kernel_choice(
        &self,
        op: &OpHandle,
        device: &Device,
        dtype: Option<DType>,
    ) -> Result<KernelChoice> {
        crate::dispatch::kernel_choice(self, op, device, dtype)
    }

    /// Runs an op: on `options.device` or the default device, with the fallback order
    /// native kernel → decomposition → soft placement to the CPU → error. `op` and
    /// `options.device` must be this runtime's (`INVALID_ARGUMENT` otherwise); inputs may
    /// live anywhere (those on other devices are copied).
    ///
    /// The outputs live on the device that ran the op: the device asked for, or `CPU:0` when
    /// the op was soft-placed. On an asynchronous device they may still be being computed;
    /// reading them ([`Tensor::to_vec`]) or copying them waits. A panic in host code the run
    /// calls (a setter, a Rust kernel, a shape function, a decomposition, the placement
    /// callback) unwinds out of this call; the runtime stays consistent (no scope left
    /// entered, later ops run normally).
    pub fn run(
        &self,
        op: &OpHandle,
        inputs: &[Tensor],
        attrs: &Attrs,
        options: &RunOptions,
    ) -> Result<Outputs> {
        let mut out = Outputs::new();
        crate::dispatch::run(self, op, inputs, attrs, options, &mut out)?;
        Ok(out)
    }

    /// [`Runtime::run`] for an op with one output (every basis op): returns it.
    /// `INVALID_ARGUMENT` for an op with several outputs (use [`Runtime::run`]).
    pub fn run1(
        &self,
        op: &OpHandle,
        inputs: &[Tensor],
        attrs: &Attrs,
        options: &RunOptions,
    ) -> Result<Tensor> {
        let n = op.def().outputs.len();
        if n != 1 {
            return Err(Error::invalid_argument(format!(
                "{}: run1 returns one output, but the op has {n}; use run",
                op.name()
            )));
        }
        let mut out = Outputs::new();
        crate::dispatch::run(self, op, inputs, attrs, options, &mut out)?;
        out.pop()
            .ok_or_else(|| Error::internal(format!("{}: the run returned no output", op.name())))
    }

    /// [`Runtime::run`] appending the outputs to `out` (nothing is appended on error): lets a
    /// host reuse one output list across runs.
    pub fn run_into(
        &self,
        op: &OpHandle,
        inputs: &[Tensor],
        attrs: &Attrs,
        options: &RunOptions,
        out: &mut Outputs,
    ) -> Result<()> {
        crate::dispatch::run(self, op, inputs, attrs, options, out)
    }

    /// [`Runtime::run_into`] with the options' fields given apart, the device borrowed: for
    /// bindings that hold devices by reference (the C API), which then run on an explicit
    /// device without cloning its `Arc` (two atomic read-modify-writes per op).
    pub fn run_into_on(
        &self,
        op: &OpHandle,
        inputs: &[Tensor],
        attrs: &Attrs,
        device: Option<&Arc<Device>>,
        soft_placement: Option<bool>,
        out: &mut Outputs,
    ) -> Result<()> {
        crate::dispatch::run_on(self, op, inputs, attrs, device, soft_placement, out)
    }

    /// [`Runtime::run`] by op name (looks the name up; hold an [`OpHandle`] on hot paths).
    pub fn run_named(
        &self,
        op: &str,
        inputs: &[Tensor],
        attrs: &Attrs,
        options: &RunOptions,
    ) -> Result<Outputs> {
        let h = self.op(op)?;
        self.run(&h, inputs, attrs, options)
    }

    /// Installs (or, with `None`, removes) the host's placement-log callback: it receives every
    /// placement decision ([`PlacementEvent`](crate::PlacementEvent), whose `Display` is the
    /// line `DEVPLUG_LOG_PLACEMENT=1` prints, e.g. `Add on HOST:0: default (kernel from
    /// built-in)`) — ops, the input copies and soft placements they cause, the ops a
    /// decomposition runs, graph nodes and variables.
    ///
    /// - **Thread:** it runs synchronously on the thread that runs the op (the caller of
    ///   [`Runtime::run`], [`Graph::run`](crate::Graph::run), [`Runtime::variable`], …), during
    ///   that call; calls from several threads may overlap, so it must be `Send + Sync`.
    /// - **Calling back:** no lock of the runtime is held while it runs, so it may call any
    ///   method of the runtime, this one included. The ops it runs are not reported to it
    ///   (they would call it again, without end; `DEVPLUG_LOG_PLACEMENT=1` still prints
    ///   them); another runtime's callback sees the ops it runs there. A callback that owns
    ///   an `Arc<Runtime>` keeps the runtime alive (the runtime holds the callback): capture a
    ///   `Weak` instead.
    /// - **Panics:** a panic in it unwinds out of the call that logged the event (the op's
    ///   outputs are lost); the runtime stays consistent and later ops run normally.
    ///
    /// It costs nothing when none is installed (one atomic load per op).
    pub fn set_placement_callback(&self, callback: Option<PlacementCallback>) {
        self.placement.set_callback(callback);
    }

    /// Waits for all work on all devices.
    pub fn synchronize(&self) -> Result<()> {
        // Every device, even after one failed: a synchronize also releases what a device keeps
        // alive for its default stream (buffers that hold their device), so stopping early
        // would leave the later devices' memory held. The first error is returned.
        let mut first = Ok(());
        for d in self.devices() {
            let r = d.synchronize();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

fn info_of(r: &PluginRecord) -> PluginInfo {
    PluginInfo {
        name: r.plugin.name.clone(),
        version: r.plugin.version.clone(),
        path: r.plugin.path.clone(),
        platforms: r.platforms.clone(),
        ops: r.ops.clone(),
    }
}

/// Marks the highest-priority platform of `device_type` active and the others not.
fn update_active(platforms: &[Arc<PlatformEntry>], device_type: &str) {
    let best = platforms
        .iter()
        .filter(|p| p.info.device_type == device_type)
        .max_by_key(|p| p.info.priority);
    for p in platforms
        .iter()
        .filter(|p| p.info.device_type == device_type)
    {
        set_active(p, best.is_some_and(|b| Arc::ptr_eq(b, p)));
    }
}

/// The file `DEVPLUG_TRACE` names, unless the process runs with elevated privileges (a file
/// the environment names is then never written).
fn trace_file_from_env() -> Option<std::path::PathBuf> {
    plugin::trusted_env(TRACE_ENV, plugin::process_is_elevated()).map(Into::into)
}

/// The environment variable that traces a runtime's whole life into a file.
pub const TRACE_ENV: &str = "DEVPLUG_TRACE";

impl Drop for Runtime {
    fn drop(&mut self) {
        // Work that failed and that no one synchronized with: nothing can return it now, so it
        // is logged rather than lost.
        if let Err(e) = self.synchronize() {
            crate::log::warn(&format!(
                "a device's work failed and was not reported before the runtime was destroyed: \
                 {e}"
            ));
        }
        if let Some(path) = &self.trace_file {
            if self.tracer.on() {
                if let Err(e) = self.tracer.stop().write_chrome_json(path) {
                    crate::log::warn(&format!("{TRACE_ENV}: {e}"));
                }
            }
        }
        // A trace still on holds events of the devices' (kernels to time): let them go first.
        self.tracer.discard_device_spans();
        for d in self.devices.read().iter() {
            d.close_buffer_pool();
        }
        // Devices first (they hold their platforms and plugins), then platforms, then the
        // plugins' own records: a library closes after the last object of it. Each list is
        // taken out of its lock before it is dropped, so no plugin function (a free, a
        // device's or platform's destruction) runs with a lock of the runtime held.
        let devices = std::mem::take(&mut *self.devices.write());
        drop(devices);
        let platforms = std::mem::take(&mut *self.platforms.write());
        drop(platforms);
        let plugins = std::mem::take(&mut *self.plugins.lock());
        drop(plugins);
    }
}
