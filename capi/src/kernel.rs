//! `dp_op_kernel_choice`: how the runtime would run an op on a device, asked before running
//! (what a framework that partitions its own graph needs to know).

use std::ffi::c_char;

use devplug_core::KernelChoice;

use crate::handle::{self, cstring, get};
use crate::op::dp_op_t;
use crate::runtime::{dp_device_t, dp_runtime_t, optional_device, runtime_obj};
use crate::status::{dp_status_t, guard};
use crate::tensor::{dp_dtype_t, dtype};

/// `dp_kernel_choice_t.kind`: a kernel of the device runs the op (`source`, `priority`).
pub const DP_KERNEL_NATIVE: i32 = 0;
/// The device has no kernel for it; its decomposition runs there, each of its ops chosen the
/// same way when it runs.
pub const DP_KERNEL_DECOMPOSITION: i32 = 1;
/// No kernel or decomposition on the device: soft placement runs it with the CPU's kernel
/// (`source`); in strict mode the run fails.
pub const DP_KERNEL_SOFT_PLACEMENT: i32 = 2;
/// No kernel on the device or the CPU and no decomposition: a run fails (`DP_NOT_FOUND`).
pub const DP_KERNEL_UNAVAILABLE: i32 = 3;

/// The `dtype` of [`dp_op_kernel_choice`] for an op without type variables (`Fill`, `Iota`):
/// any output dtype.
pub const DP_KERNEL_ANY_DTYPE: dp_dtype_t = 0;

/// What [`dp_op_kernel_choice`] writes. Set `struct_size` to `sizeof(dp_kernel_choice_t)`;
/// the runtime writes the fields that fit.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_kernel_choice_t {
    /// `sizeof(dp_kernel_choice_t)` as the caller was compiled (the caller sets it).
    pub struct_size: usize,
    /// `DP_KERNEL_NATIVE`, `_DECOMPOSITION`, `_SOFT_PLACEMENT` or `_UNAVAILABLE`.
    pub kind: i32,
    /// The kernel's priority for `DP_KERNEL_NATIVE`; 0 otherwise.
    pub priority: i32,
    /// Who registered the kernel that would run (`"built-in"`, `"plugin 'devplug_sim'"`,
    /// `"host"`) for `DP_KERNEL_NATIVE` and `DP_KERNEL_SOFT_PLACEMENT`; `""` otherwise. Valid
    /// until the runtime is destroyed.
    pub source: *const c_char,
}

/// How `op` would run on `device` (NULL: the runtime's default device) for `dtype`, the dtype
/// of the op's first type variable (`DP_KERNEL_ANY_DTYPE` for an op without one): the choice
/// [`crate::op::dp_op_run`] makes for inputs of that dtype, before anything runs. A kernel may
/// still decline a run's inputs (`DP_UNIMPLEMENTED`), which goes on to the next step then.
/// `DP_INVALID_ARGUMENT` for a dtype the op does not take (or none for an op with a type
/// variable) and an op or device of another runtime.
///
/// # Safety
/// `runtime`, `op` and `device` (unless NULL) are handles; `out_choice` points to a
/// `dp_kernel_choice_t` whose `struct_size` is set.
#[no_mangle]
pub unsafe extern "C" fn dp_op_kernel_choice(
    runtime: *const dp_runtime_t,
    op: *const dp_op_t,
    device: *const dp_device_t,
    dtype: dp_dtype_t,
    out_choice: *mut dp_kernel_choice_t,
) -> dp_status_t {
    guard("dp_op_kernel_choice", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        // SAFETY: the caller's contract.
        let op = unsafe { get(op, "op")? };
        // SAFETY: the caller's contract.
        let device = unsafe { optional_device(device, "device")? };
        let device = device.unwrap_or_else(|| rt.runtime().default_device());
        let dtype = match dtype {
            DP_KERNEL_ANY_DTYPE => None,
            d => Some(self::dtype(d, "dtype")?),
        };
        let (kind, priority, source) = match rt.runtime().kernel_choice(&op.op, device, dtype)? {
            KernelChoice::Native { source, priority } => (DP_KERNEL_NATIVE, priority, source),
            KernelChoice::Decomposition => (DP_KERNEL_DECOMPOSITION, 0, String::new()),
            KernelChoice::SoftPlacement { source } => (DP_KERNEL_SOFT_PLACEMENT, 0, source),
            KernelChoice::Unavailable => (DP_KERNEL_UNAVAILABLE, 0, String::new()),
        };
        let [source] = rt.keep([cstring(&source)]);
        let choice = dp_kernel_choice_t {
            struct_size: std::mem::size_of::<dp_kernel_choice_t>(),
            kind,
            priority,
            source,
        };
        // SAFETY: the caller's contract.
        unsafe {
            handle::write_sized(
                out_choice,
                choice,
                std::mem::size_of::<dp_kernel_choice_t>(),
                "out_choice",
            )
        }
    })
}
