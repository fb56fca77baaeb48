//! The host as a plugin sees it: load options, logging and platform registration.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::ffi::{self, HostShared};
use crate::kernel::{CreateArgs, KernelArgs, KernelContext, KernelSpec};
use crate::op::OpDef;
use crate::platform::Platform;

/// Log levels (`DPP_LOG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `DPP_LOG_ERROR`.
    Error = 1,
    /// `DPP_LOG_WARN`.
    Warn = 2,
    /// `DPP_LOG_INFO`.
    Info = 3,
    /// `DPP_LOG_DEBUG`.
    Debug = 4,
}

/// The host during `init`: what the plugin's init function receives.
///
/// It exists only for the duration of the init call (the plugin gets `&Host` and cannot keep
/// it): load options, `register_platform` and `register_kernel` are valid during init only. For logging later,
/// keep a [`Logger`] ([`Host::logger`]).
///
/// Neither `Send` nor `Sync`: the host's option and registration functions belong to the init
/// call's thread.
pub struct Host {
    shared: Arc<HostShared>,
    _init_call_only: PhantomData<*const ()>,
}

impl Host {
    pub(crate) fn new(shared: Arc<HostShared>) -> Host {
        Host {
            shared,
            _init_call_only: PhantomData,
        }
    }

    /// The plugin's name (as given to `devplug_plugin!`).
    pub fn plugin_name(&self) -> &'static str {
        self.shared.plugin_name()
    }

    /// The host's ABI version `(major, minor)`.
    pub fn abi_version(&self) -> (u32, u32) {
        self.shared.abi_version()
    }

    /// The value of load option `key`, or `None` when the host did not give it.
    /// A value that is not UTF-8 is converted lossily.
    pub fn option(&self, key: &str) -> Option<String> {
        self.shared.get_option(key)
    }

    /// Load option `key` parsed as `T`: `Ok(None)` when absent, an `InvalidArgument` error
    /// naming the option and the value when it does not parse.
    pub fn option_parse<T>(&self, key: &str) -> Result<Option<T>>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        match self.option(key) {
            None => Ok(None),
            Some(value) => value.trim().parse::<T>().map(Some).map_err(|e| {
                Error::invalid_argument(format!(
                    "load option `{key}`: invalid value {value:?}: {e}"
                ))
            }),
        }
    }

    /// Load option `key` parsed as `T`, or `default` when absent.
    pub fn option_or<T>(&self, key: &str, default: T) -> Result<T>
    where
        T: FromStr,
        T::Err: fmt::Display,
    {
        Ok(self.option_parse(key)?.unwrap_or(default))
    }

    /// Load option `key` as a switch: `false` when absent; `true` for `1`, `true`, `yes` or
    /// `on` and `false` for `0`, `false`, `no` or `off` (any case), as the sample plugins'
    /// switches (`-o no_suballocator=1`); anything else is an `InvalidArgument` naming the
    /// option. (`option_or::<bool>` takes only `true` and `false`.)
    pub fn option_flag(&self, key: &str) -> Result<bool> {
        let Some(value) = self.option(key) else {
            return Ok(false);
        };
        match value.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(Error::invalid_argument(format!(
                "load option `{key}`: invalid value {value:?}: a switch takes 1, true, yes or \
                 on, or 0, false, no or off"
            ))),
        }
    }

    /// Writes a log line through the host.
    pub fn log(&self, level: LogLevel, message: impl fmt::Display) {
        self.shared.log(level, &message.to_string());
    }

    /// A logging handle the plugin may keep (in its platforms and devices) and use from any
    /// thread until the plugin is shut down.
    pub fn logger(&self) -> Logger {
        Logger {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Registers `platform` with the host. The host copies its name, type, vendor and version
    /// now; the platform object lives until the host destroys the platform (its `Drop` runs
    /// then). If the host refuses it (a name already taken, an equal priority on the same
    /// type, an invalid name…) the platform is dropped at once and the error carries the
    /// host's code; the host keeps its own account of why (the runtime reports it together
    /// with the plugin's message when init then fails).
    pub fn register_platform<P: Platform>(&self, platform: P) -> Result<()> {
        ffi::register_platform(&self.shared, platform)
    }

    /// Whether the host can take kernels (plugin ABI 1.1 or newer: its table has
    /// `register_kernel`).
    pub fn supports_kernels(&self) -> bool {
        self.shared.supports_kernels()
    }

    /// Registers `compute` as the kernel for `spec.op` on devices of type `spec.device_type`
    /// of one of this plugin's platforms (ABI 1.1); see [`crate::kernel`].
    ///
    /// The platform is `spec.platform`, or, when `None`, the one platform of that device type
    /// this plugin registered (register it first). Its devices must be `D`:
    /// `compute` receives a [`KernelContext`] with the device, its default stream (where the
    /// work goes), the inputs and outputs and the op's attributes. It may be called from any
    /// thread, concurrently, until the plugin shuts down; it is dropped then.
    ///
    /// A host older than ABI 1.3 knows no f16 or bf16: with one, those dtypes are left out of
    /// `spec.dtypes`, and a kernel that takes nothing else is not registered (`Ok`, an info
    /// log says so, `compute` is dropped at once).
    ///
    /// Errors, before asking the host: `InvalidArgument` when the platform is not one of
    /// this plugin's of that type (e.g. a kernel registered before its platform), its devices
    /// are not `D`, or `spec.platform` is `"ANY"` (use [`Host::register_any_kernel`]);
    /// `Unimplemented` when the host is older than ABI 1.1 ([`Host::supports_kernels`]). The
    /// SDK also logs each of these through the host as a warning naming the kernel, when it
    /// refuses, so a refusal is seen even if init drops the `Err` (`let _ = …`) and loads
    /// without the kernel. When the host refuses (e.g. `AlreadyExists` for a kernel with the
    /// same op, type, binding, overlapping dtypes and priority; it keeps, and reports, its own
    /// account of why), the error carries its code and `compute` is dropped at once. The
    /// host's messages name the C struct's fields: its `dpp_kernel_t.dtypes[i]` is
    /// `spec.dtypes[i]`.
    ///
    /// ```text
    /// host.register_kernel(KernelSpec::new("Add", "NPU").dtypes(&[DType::F32]),
    ///     |cx: &KernelContext<'_, MyDevice>| my_add(cx))?;
    /// ```
    pub fn register_kernel<D, F>(&self, spec: KernelSpec<'_>, compute: F) -> Result<()>
    where
        D: Device,
        F: Fn(&KernelContext<'_, D>) -> Result<()> + Send + Sync + 'static,
    {
        crate::ffi::kernel::register_kernel::<D, F>(&self.shared, &spec, compute)
    }

    /// Registers a kernel with a **state** (plugin ABI 1.5's `create`/`destroy`): what every
    /// launch with the same device, input dtypes and attributes can share (attributes read and
    /// checked once, a variant picked for the dtypes, a descriptor), made once by `create` and
    /// handed to each `compute` as `&S`. Otherwise as [`Host::register_kernel`] (same
    /// refusals).
    ///
    /// - `create` gets a [`CreateArgs`]: the device, the op, the input dtypes and the same
    ///   attribute readers as the [`KernelContext`] (no shapes: one state serves every shape).
    ///   An `Err` fails that op run with its code and message (the host names the kernel); a
    ///   panic fails it with `INTERNAL`; the next run with that combination calls `create`
    ///   again.
    /// - The host calls `create` before the first launch of each new combination and keeps
    ///   the state (a bounded number per kernel and device: 64 for devplug's, the least
    ///   recently used go first, so `create` may run again for a combination seen before). The
    ///   SDK boxes it; `S` is dropped exactly once per `create`, in stream order (once the
    ///   device's default stream reached every launch that used it) and before the device is
    ///   destroyed, on any thread. Several launches may use it at once: it is shared (`Sync`);
    ///   lock what you change.
    /// - **Work enqueued on the stream holds what it needs.** `compute` gets `&S` for the call
    ///   only: copy values out of it, or clone `Arc`s it holds, into the stream's closures (the
    ///   borrow checker sees to it). A state that owns device resources may free them in `Drop`:
    ///   it runs only after the stream reached the launches that used it.
    /// - From a host older than ABI 1.5 (it never calls `create` and passes no state; a plugin
    ///   that declares `abi_minor` below 5 may meet one) the SDK calls `create` itself before
    ///   every launch and drops that state once the stream reached the launch's work (with the
    ///   device's `host_callback`; when the device refuses it, after synchronizing the stream).
    ///   Correct everywhere, only slower there: `create` should be cheap enough to run per
    ///   launch.
    ///
    /// ```text
    /// struct Scale { factor: f32 }
    /// host.register_kernel_with_state(
    ///     KernelSpec::new("Scale", "NPU").dtypes(&[DType::F32]),
    ///     |args: &CreateArgs<'_, MyDevice>| Ok(Scale { factor: args.attr_float("factor")? as f32 }),
    ///     |cx: &KernelContext<'_, MyDevice>, s: &Scale| {
    ///         let factor = s.factor; // copied into the work
    ///         cx.device().enqueue_scale(cx.stream(), cx.input(0)?, cx.output(0)?, factor)
    ///     },
    /// )?;
    /// ```
    pub fn register_kernel_with_state<D, S, C, F>(
        &self,
        spec: KernelSpec<'_>,
        create: C,
        compute: F,
    ) -> Result<()>
    where
        D: Device,
        S: Send + Sync + 'static,
        C: Fn(&CreateArgs<'_, D>) -> Result<S> + Send + Sync + 'static,
        F: Fn(&KernelContext<'_, D>, &S) -> Result<()> + Send + Sync + 'static,
    {
        crate::ffi::kernel::register_kernel_with_state::<D, S, C, F>(
            &self.shared,
            &spec,
            create,
            compute,
        )
    }

    /// Whether the host can take ops of the plugin's own (plugin ABI 1.2 or newer: its table
    /// has `register_op`).
    pub fn supports_ops(&self) -> bool {
        self.shared.supports_ops()
    }

    /// Defines an op of the plugin's own (ABI 1.2; see [`OpDef`]): its signature and a body
    /// in other ops, which the runtime runs on every device with no kernel for it. Register
    /// it before the kernels for it (a kernel for `def.name` is then registered as for any
    /// op). The host copies the text now and checks it when it commits the plugin's
    /// registrations after init: a mistake (a syntax error, an unknown op in the body, a name
    /// taken) fails the load with a message naming the op and the statement.
    ///
    /// Errors: `Unimplemented` when the host is older than ABI 1.2 ([`Host::supports_ops`]);
    /// `InvalidArgument` when a field contains a NUL; the host's code when it refuses (e.g.
    /// `AlreadyExists` for a name this plugin registered twice).
    pub fn register_op(&self, def: &OpDef<'_>) -> Result<()> {
        ffi::register_op(&self.shared, def)
    }

    /// Registers a memory-agnostic kernel, bound to `ANY`: it would run on devices of type
    /// `spec.device_type` of every platform, other plugins' included, so it sees no device
    /// and no stream, only the [`KernelArgs`] (it does its work at once, on memory it can
    /// reach some other way: e.g. a host-visible platform's). `spec.platform` must be `None`
    /// or `"ANY"`. Otherwise as [`Host::register_kernel`].
    ///
    /// **devplug 0.1 refuses it**: its hosts (every plugin ABI so far, 1.1 to 1.5) bind a
    /// plugin's kernels to the plugin's own platforms, so this returns the host's
    /// `InvalidArgument` (`dpp_kernel_t.platform is "ANY": …`), and init fails if it passes
    /// the error on. It exists for a later ABI and for test hosts (`testing::TestHost`
    /// accepts it); on devplug 0.1 use [`Host::register_kernel`].
    pub fn register_any_kernel<F>(&self, spec: KernelSpec<'_>, compute: F) -> Result<()>
    where
        F: Fn(&KernelArgs<'_>) -> Result<()> + Send + Sync + 'static,
    {
        crate::ffi::kernel::register_any_kernel::<F>(&self.shared, &spec, compute)
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("plugin", &self.plugin_name())
            .field("abi_version", &self.abi_version())
            .finish_non_exhaustive()
    }
}

/// Writes log lines through the host, from any thread. Cheap to clone.
///
/// Valid until the plugin is shut down; after that (or after a failed init) it writes
/// nothing, so a logger that outlives the plugin is harmless.
#[derive(Clone)]
pub struct Logger {
    shared: Arc<HostShared>,
}

impl Logger {
    pub(crate) fn new(shared: Arc<HostShared>) -> Logger {
        Logger { shared }
    }

    /// Writes `message` at `level`.
    pub fn log(&self, level: LogLevel, message: impl fmt::Display) {
        self.shared.log(level, &message.to_string());
    }

    /// Writes at `LogLevel::Error`.
    pub fn error(&self, message: impl fmt::Display) {
        self.log(LogLevel::Error, message);
    }

    /// Writes at `LogLevel::Warn`.
    pub fn warn(&self, message: impl fmt::Display) {
        self.log(LogLevel::Warn, message);
    }

    /// Writes at `LogLevel::Info`.
    pub fn info(&self, message: impl fmt::Display) {
        self.log(LogLevel::Info, message);
    }

    /// Writes at `LogLevel::Debug`.
    pub fn debug(&self, message: impl fmt::Display) {
        self.log(LogLevel::Debug, message);
    }
}

impl fmt::Debug for Logger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Logger")
            .field("plugin", &self.shared.plugin_name())
            .finish_non_exhaustive()
    }
}
