//! devplug-core: the devplug runtime, used directly by Rust hosts.
//!
//! Start at [`Runtime`]: it owns the platforms (the built-in `HOST` platform with its `CPU`
//! devices, and those plugins register) and their [`Device`]s. Devices allocate
//! [`Buffer`]s, run [`Stream`]s and [`Event`]s, and hold [`Tensor`]s. Ops run through the
//! runtime, by handle:
//!
//! ```
//! use devplug_core::{Attrs, Runtime, RuntimeOptions, RunOptions, Tensor};
//! let rt = Runtime::new(RuntimeOptions::default())?;
//! let cpu = rt.default_device();
//! let x = Tensor::from_slice(cpu, &[2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
//! let y = Tensor::from_slice(cpu, &[2], &[10.0f32, 20.0])?; // broadcast over the rows
//! let add = rt.op("Add")?; // resolve the name once, run by handle
//! let z = rt.run1(&add, &[x, y], &Attrs::new(), &RunOptions::default())?;
//! assert_eq!(z.to_vec::<f32>()?, [11.0, 22.0, 13.0, 24.0]);
//! # Ok::<(), devplug_core::Error>(())
//! ```
//!
//! Devices are named by type or platform (see [`Runtime::find_device`]); tensors move between
//! them with [`Tensor::copy_to`]:
//!
//! ```
//! use devplug_core::{Runtime, RuntimeOptions, Tensor};
//! let rt = Runtime::new(RuntimeOptions { cpu_device_count: 2, ..Default::default() })?;
//! let cpu1 = rt.find_device("cpu:1")?;
//! let t = Tensor::from_slice(&cpu1, &[2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
//! assert_eq!(t.copy_to(&rt.find_device("CPU:0")?)?.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
//! # Ok::<(), devplug_core::Error>(())
//! ```
//!
//! The guide for Rust hosts is `docs/rust-host.md` in the devplug repository: the dependency,
//! devices, tensors, ops and attributes, placement, plugins, streams, ops of your own, graphs,
//! errors, lifetimes and threads. Every op, with its inputs, dtypes and attributes, is in the
//! table of `docs/plugin-guide.md`, section 6 ("Ops and kernels"); at run time,
//! `rt.op("MatMul")?.def().signature()` says the same.
//!
//! **Optimize it in debug builds.** A debug build of your crate builds devplug-core and the
//! GEMM it uses unoptimized too, and ops run tens of times slower. Put this in your
//! `Cargo.toml` (the workspace root's):
//!
//! ```toml
//! [profile.dev.package."*"]
//! opt-level = 3
//! ```

// Every public item says what it is for: the crate is the Rust host's API (docs/rust-host.md).
#![warn(missing_docs)]

#[doc(hidden)]
pub mod check;
pub mod device;
pub mod dispatch;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod graph;
pub mod host;
pub mod kernel;
pub mod log;
pub mod memory;
pub mod op;
pub mod placement;
pub mod platform;
pub mod plugin;
pub mod runtime;
pub mod scope;
pub mod spec;
pub mod stream;
pub mod tensor;
#[cfg(test)]
mod testing;
pub mod trace;
pub mod variable;

pub use device::{Device, DeviceProperties, MemoryUsage, PlatformEntry};
pub use dispatch::{KernelChoice, RunOptions};
pub use error::{Code, Error, Result};
pub use graph::{Graph, GraphRunOptions, NodeOutput};
/// The `half` crate, whose `f16` and `bf16` are the element types of [`DType::F16`] and
/// [`DType::BF16`] tensors.
pub use half;
pub use kernel::{Binding, KernelContext, KernelDef};
pub use memory::{Buffer, DevicePtr, MemoryStats};
pub use op::text::OpText;
pub use op::{AttrValue, Attrs, OpDef, OpHandle, Outputs, PartialSpec};
pub use placement::{PlacementEvent, Reason};
pub use platform::{EventStatus, Platform, PlatformInfo, StreamExecutor};
pub use plugin::{PluginFailure, PluginInfo};
pub use runtime::{Runtime, RuntimeOptions, PLUGIN_ABI_MINOR};
pub use scope::{DeviceScope, DeviceSetter, OpInfo, OpKind, ScopeGuard};
pub use spec::DeviceSpec;
pub use stream::{Event, Stream};
pub use tensor::{DType, Element, Shape, Tensor};
pub use trace::{SpanKind, Trace, TraceEvent};
pub use variable::Variable;
