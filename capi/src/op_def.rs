//! `dp_runtime_register_op`: ops a host defines, in the text notation plugins use
//! (`dpp_op_def_t`, `core/src/op/text.rs`).

use std::ffi::c_char;

use devplug_core::OpText;

use crate::handle::{self, write_out};
use crate::op::{dp_op_t, OpObj};
use crate::runtime::{dp_runtime_t, runtime_obj};
use crate::status::{dp_status_t, guard};

/// An op a host defines: the fields of a plugin's `dpp_op_def_t`, in the same notation
/// (TensorFlow's `REGISTER_OP` for the signature; a body of statements `out = Op(args,
/// attr=value)` over ops the runtime has, which is the op's shape function and its
/// decomposition). Set `struct_size` to `sizeof(dp_op_def_t)`; the strings are read during
/// [`dp_runtime_register_op`] only. See docs/c-api.md ("Ops of your own").
#[repr(C)]
#[derive(Clone, Copy)]
pub struct dp_op_def_t {
    /// `sizeof(dp_op_def_t)`.
    pub struct_size: usize,
    /// Required: `namespace.Name`, e.g. `"app.Scale"` (a namespace is required).
    pub name: *const c_char,
    /// `"x: T, y: T"`: name and dtype (`f32`, …) or type variable; NULL or `""` for none.
    pub inputs: *const c_char,
    /// Required: `"z: T"`.
    pub outputs: *const c_char,
    /// `"T: {f32, f64}"`; NULL or `""` for none.
    pub type_vars: *const c_char,
    /// `"k: float = 2.0; mode: string = \"fast\""`; NULL or `""` for none.
    pub attrs: *const c_char,
    /// Required: `"z = Mul(x, @k)"`, statements separated by `;` or newlines.
    pub body: *const c_char,
}

/// Registers op `def` with the runtime; `*out_op` (when `out_op` is not NULL) gets its handle,
/// as `dp_runtime_find_op` would. The op runs on every device: a kernel for it
/// runs where one exists (a plugin's), its body everywhere else. `DP_INVALID_ARGUMENT` naming
/// the op, the field and, in the body, the statement, for a mistake; `DP_ALREADY_EXISTS` for
/// a name the runtime has (a basis op, a plugin's, one registered before). Nothing is
/// registered on failure.
///
/// # Safety
/// `runtime` is a runtime handle; `def` points to a `dp_op_def_t` with `struct_size` set and
/// NUL-terminated strings (or NULL where allowed); `out_op` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_register_op(
    runtime: *mut dp_runtime_t,
    def: *const dp_op_def_t,
    out_op: *mut *mut dp_op_t,
) -> dp_status_t {
    guard("dp_runtime_register_op", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        let empty = dp_op_def_t {
            struct_size: 0,
            name: std::ptr::null(),
            inputs: std::ptr::null(),
            outputs: std::ptr::null(),
            type_vars: std::ptr::null(),
            attrs: std::ptr::null(),
            body: std::ptr::null(),
        };
        // SAFETY: the caller's contract.
        let d =
            unsafe { handle::read_sized(def, empty, std::mem::size_of::<dp_op_def_t>(), "def")? };
        let text = |field: &str, ptr: *const c_char, required: bool| {
            if ptr.is_null() && !required {
                return Ok(String::new());
            }
            // SAFETY: the caller's contract: NUL-terminated.
            unsafe { handle::c_str(ptr, &format!("def->{field}")) }.map(str::to_string)
        };
        let text = OpText {
            name: text("name", d.name, true)?,
            inputs: text("inputs", d.inputs, false)?,
            outputs: text("outputs", d.outputs, true)?,
            type_vars: text("type_vars", d.type_vars, false)?,
            attrs: text("attrs", d.attrs, false)?,
            body: text("body", d.body, true)?,
        };
        let op = rt.runtime().register_op_text(&text)?;
        if out_op.is_null() {
            return Ok(());
        }
        let h = rt.op_handle(op.name(), |op| handle::new::<dp_op_t>(OpObj::new(op)))?;
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { write_out(out_op, "out_op", h) }
    })
}
