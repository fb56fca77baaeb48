//! devplug's C API: `libdevplug.so` / `libdevplug.a` and the generated header
//! `include/devplug/devplug.h`.
//!
//! Every export checks its pointers, validates enums and sizes, and runs behind a panic
//! boundary ([`status::guard`]); raw pointers become references only in [`handle`].
#![allow(non_camel_case_types)]

pub mod graph;
pub mod handle;
mod host_fn;
pub mod kernel;
pub mod log;
pub mod memory;
pub mod op;
pub mod op_def;
pub mod platform;
pub mod plugin;
pub mod runtime;
pub mod scope;
pub mod status;
pub mod stream;
pub mod tensor;
pub mod trace;
pub mod version;
