//! Write devplug device plugins in safe Rust.
//!
//! A plugin is a `cdylib` that implements [`Platform`] and [`Device`] and exports itself with
//! [`devplug_plugin!`]. The SDK owns the whole C boundary (`devplug/plugin.h`, crate
//! `devplug-plugin-abi`): the exported entry symbol and its static table, struct sizes, the
//! `extern "C"` trampolines of the StreamExecutor table, handle checks, and turning every
//! `Err` and every panic into a status code plus a message for the host. No panic ever
//! unwinds into the host (the SDK catches it; build with `panic = "unwind"`, the default: with
//! `panic = "abort"` a panic aborts the process before anything can catch it).
//!
//! ```text
//! use devplug_plugin_sdk::{devplug_plugin, Host, Platform, Result};
//!
//! fn init(host: &Host) -> Result<()> {
//!     let devices = host.option_or("devices", 1)?;
//!     host.register_platform(MyPlatform::new(devices, host.logger()))
//! }
//!
//! devplug_plugin!(name: "my_plugin", version: env!("CARGO_PKG_VERSION"), init: init);
//! ```
//!
//! Kernels (plugin ABI 1.1): after registering a platform, init may register kernels for ops
//! with [`Host::register_kernel`]: a closure that receives a [`KernelContext`] with the
//! platform's typed device, its default stream, the inputs and outputs ([`Tensor`] views) and
//! typed attribute readers. An `Err` or a panic in a kernel reaches the host as a status and
//! a message. A kernel with a state (plugin ABI 1.5) is registered with
//! [`Host::register_kernel_with_state`]: its `create` ([`CreateArgs`]) runs once per device,
//! input dtypes and attributes, its compute gets the state. See the [`kernel`] module.
//!
//! Kernels' shape rules (NumPy broadcasting, reductions over `axes` with `keep_dims`, rank 0,
//! dimensions of size 0): the [`shape`] module checks them with the runtime's messages and walks
//! the tensors in runs, for fast inner loops.
//!
//! Ops of the plugin's own (plugin ABI 1.2): init may define ops with [`Host::register_op`]
//! (an [`OpDef`]: a signature and a body in other ops, which runs wherever the op has no
//! kernel), then register kernels for them.
//!
//! Streams and events for devices that run their work on host threads (simulators, devices
//! whose memory the host can reach): the [`worker`] module has a worker-thread stream, an
//! event and a stream registry that implement what [`Device`] needs of them, so such a device
//! writes only its memory and kernels.
//!
//! All `unsafe` code of the SDK lives in one module (`ffi`, private); the rest is safe Rust.
//! With the `testing` feature, the `testing` module offers an in-process fake host that loads a
//! plugin's table and drives it, for plugin unit tests without the runtime.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod device;
mod error;
mod ffi;
mod host;
pub mod kernel;
mod op;
mod platform;
pub mod shape;
pub mod worker;

pub use device::{
    AllocatorStats, Device, DeviceAddr, DeviceInfo, EventStatus, HostBuf, HostBufMut, HostCallback,
    MemoryUsage,
};
pub use error::{Error, Result, Status};
pub use host::{Host, LogLevel, Logger};
pub use kernel::{CreateArgs, DType, KernelArgs, KernelContext, KernelSpec, Tensor, Tensors};
pub use op::OpDef;
pub use platform::{Platform, PlatformFlags};

/// The raw ABI (`devplug-plugin-abi`), for what the SDK does not wrap.
pub use devplug_plugin_abi as abi;

#[cfg(any(test, feature = "testing"))]
pub use ffi::testing;

#[cfg(test)]
mod tests;

/// Implementation details of [`devplug_plugin!`]; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::ffi::{plugin_c_str, PluginApi, PluginDef};
}

/// Exports the plugin: defines the entry symbol `devplug_plugin_entry` and the plugin's
/// static `dpp_plugin_api_t`.
///
/// ```text
/// devplug_plugin!(name: "rust_example", version: env!("CARGO_PKG_VERSION"), init: my_init);
/// ```
///
/// - `name`: a string literal (or `env!`/`concat!`), `[A-Za-z0-9_.-]+`: checked at compile
///   time.
/// - `version`: likewise, free-form.
/// - `abi_minor` (optional): the plugin ABI minor the plugin declares, the **oldest** host it
///   loads into (a host refuses a plugin of a newer minor). Default: this SDK's
///   (`abi::DPP_ABI_MINOR`). The SDK reaches every function added after 1.0 by the host's
///   `struct_size`, so a plugin may declare `abi_minor: 1` (it needs kernels) and use what 1.2
///   added only when [`Host::supports_ops`] says so. A minor newer than the SDK's is a
///   compile-time error.
/// - `init`: a `fn(&Host) -> Result<()>` (a path or a closure). It reads load options and
///   registers the plugin's platforms. An `Err` reaches the host with its code and message, a
///   panic as `INTERNAL` with the panic message; either way the host rolls back what init
///   registered.
///
/// ```text
/// devplug_plugin!(name: "mydev", version: "1.0", abi_minor: 1, init: my_init);
/// ```
///
/// Use it once per library, at any module level; the function it defines is `pub`, so tests
/// can hand it to `testing::TestHost::load` (feature `testing`).
#[macro_export]
macro_rules! devplug_plugin {
    (name: $name:expr, version: $version:expr, init: $init:expr $(,)?) => {
        $crate::devplug_plugin!(
            name: $name,
            version: $version,
            abi_minor: $crate::abi::DPP_ABI_MINOR,
            init: $init
        );
    };
    (name: $name:expr, version: $version:expr, abi_minor: $minor:expr, init: $init:expr $(,)?) => {
        /// The devplug plugin entry point: returns this plugin's static description.
        #[no_mangle]
        pub extern "C" fn devplug_plugin_entry() -> *const $crate::abi::dpp_plugin_api_t {
            struct __DevplugPlugin;
            impl $crate::__private::PluginDef for __DevplugPlugin {
                const NAME: &'static str = $name;
                const C_NAME: &'static ::core::ffi::CStr =
                    $crate::__private::plugin_c_str(::core::concat!($name, "\0"), true);
                const C_VERSION: &'static ::core::ffi::CStr =
                    $crate::__private::plugin_c_str(::core::concat!($version, "\0"), false);
                const ABI_MINOR: u32 = $minor;
                fn init(host: &$crate::Host) -> $crate::Result<()> {
                    ($init)(host)
                }
            }
            static __DEVPLUG_PLUGIN_API: $crate::__private::PluginApi =
                $crate::__private::PluginApi::new::<__DevplugPlugin>();
            __DEVPLUG_PLUGIN_API.as_ptr()
        }
    };
}
