//! devplug-core: the devplug runtime.
//!
//! Start at [`Runtime`]: it owns the platforms (the built-in `HOST` platform with its `CPU`
//! devices, and those plugins register) and their [`Device`]s. Devices allocate
//! [`Buffer`]s, run [`Stream`]s and [`Event`]s, and hold [`Tensor`]s.
//!
//! ```
//! use devplug_core::{Runtime, RuntimeOptions, Tensor};
//! let rt = Runtime::new(RuntimeOptions { cpu_device_count: 2, ..Default::default() })?;
//! let cpu1 = rt.find_device("cpu:1")?;
//! let t = Tensor::from_slice(&cpu1, &[2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
//! assert_eq!(t.copy_to(&rt.find_device("CPU:0")?)?.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
//! # Ok::<(), devplug_core::Error>(())
//! ```

pub mod check;
pub mod device;
pub mod dispatch;
pub mod error;
#[cfg(feature = "fuzzing")]
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
pub use dispatch::RunOptions;
pub use error::{Code, Error, Result};
pub use graph::{Graph, GraphRunOptions, NodeOutput};
/// The `half` crate, whose `f16` and `bf16` are the element types of [`DType::F16`] and
/// [`DType::BF16`] tensors.
pub use half;
pub use kernel::{Binding, KernelContext, KernelDef};
pub use memory::{Buffer, DevicePtr, MemoryStats};
pub use op::text::OpText;
pub use op::{AttrValue, Attrs, OpDef, OpHandle, Outputs};
pub use placement::{PlacementEvent, Reason};
pub use platform::{EventStatus, Platform, PlatformInfo, StreamExecutor};
pub use plugin::{PluginFailure, PluginInfo};
pub use runtime::{Runtime, RuntimeOptions};
pub use scope::{DeviceScope, DeviceSetter, OpInfo, OpKind, ScopeGuard};
pub use spec::DeviceSpec;
pub use stream::{Event, Stream};
pub use tensor::{DType, Element, Shape, Tensor};
pub use trace::{SpanKind, Trace, TraceEvent};
pub use variable::Variable;
