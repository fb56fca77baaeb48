//! Device scopes and device setters (see `devplug_core::scope`): scope handles, and entering
//! and exiting them on the calling thread.

use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use devplug_core::{Code, DeviceScope, Error, OpInfo, OpKind, ScopeGuard};

use crate::handle::{self, check_out, get, handle, write_out};
use crate::host_fn::HostFn;
use crate::op::dp_drop_fn;
use crate::runtime::{device, dp_device_t, dp_runtime_t, runtime_obj};
use crate::status::{bad_arg, dp_status_t, guard, guard_void, DP_OK};

/// An op computing outputs from inputs: every eager op and graph op node.
pub const DP_OP_KIND_COMPUTE: i32 = 0;
/// The creation of a variable (`dp_variable_create`): the query's `name` is the
/// variable's, its `op` is `"Variable"`.
pub const DP_OP_KIND_VARIABLE: i32 = 1;

/// What a device setter is asked about. Strings are valid during the call only.
#[repr(C)]
pub struct dp_placement_query_t {
    /// `sizeof(dp_placement_query_t)` as the library was compiled.
    pub struct_size: usize,
    /// The op's name in the program; an eager op's is its type.
    pub name: *const c_char,
    /// The op's type (`"MatMul"`, `"vendor.op"`).
    pub op: *const c_char,
    /// `DP_OP_KIND_COMPUTE` or `DP_OP_KIND_VARIABLE`.
    pub kind: i32,
}

/// A device setter. Writes the device the op should run on into `*out_device` (a device of
/// the scope's runtime), or leaves it NULL for no opinion (the scopes around decide), and
/// returns `DP_OK`; any other status fails the op with it. Runs on the thread that runs the
/// op, for every op the scope places.
pub type dp_device_setter_fn = Option<
    unsafe extern "C" fn(
        query: *const dp_placement_query_t,
        user_data: *mut c_void,
        out_device: *mut *mut dp_device_t,
    ) -> dp_status_t,
>;

#[doc(hidden)]
pub struct ScopeObj {
    scope: DeviceScope,
    /// How many threads have it entered (it is not destroyed while any has).
    entered: Arc<AtomicUsize>,
}

handle!(
    /// A device scope: a device or a device setter, or a captured placement context. Create
    /// with `dp_scope_create_device`, `dp_scope_create_setter` or `dp_scope_capture`;
    /// destroy with `dp_scope_destroy`.
    dp_scope_t,
    ScopeObj,
    0x6470_5343_0000_000a
);

/// A scope entered on this thread through the C API: exited when dropped (also when the
/// thread exits).
struct Entered {
    handle: usize,
    entered: Arc<AtomicUsize>,
    _guard: ScopeGuard,
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.entered.fetch_sub(1, Ordering::AcqRel);
    }
}

thread_local! {
    static ENTERED: RefCell<Vec<Entered>> = const { RefCell::new(Vec::new()) };
}

type Setter = HostFn<
    unsafe extern "C" fn(
        *const dp_placement_query_t,
        *mut c_void,
        *mut *mut dp_device_t,
    ) -> dp_status_t,
>;

impl Setter {
    fn call(&self, op: &OpInfo) -> devplug_core::Result<Option<Arc<devplug_core::Device>>> {
        let c = crate::handle::cstring;
        let (name, op_type) = (c(op.name), c(op.op));
        let query = dp_placement_query_t {
            struct_size: std::mem::size_of::<dp_placement_query_t>(),
            name: name.as_ptr(),
            op: op_type.as_ptr(),
            kind: match op.kind {
                OpKind::Compute => DP_OP_KIND_COMPUTE,
                OpKind::Variable => DP_OP_KIND_VARIABLE,
            },
        };
        let mut out: *mut dp_device_t = std::ptr::null_mut();
        // SAFETY: the host's setter with a query valid for the call and a writable out slot.
        let status = crate::host_fn::calling(None, || unsafe {
            (self.func)(&query, self.user_data, &mut out)
        });
        if status != DP_OK {
            // The status is the error's code, so the message does not repeat it (the core
            // adds "<op>: the device setter failed"); only a value that is no code is named.
            return Err(match Code::from_i32(status) {
                Some(code) => Error::new(code, String::new()),
                None => Error::new(
                    Code::Unknown,
                    format!("it returned {status}, which is not a status code"),
                ),
            });
        }
        if out.is_null() {
            return Ok(None);
        }
        // SAFETY: the setter's contract: a device handle (checked for kind and liveness).
        let d = unsafe { device(out, "the setter's *out_device") }?;
        Ok(Some(d.clone()))
    }
}

/// Creates a scope that places ops on `device`, a device of `runtime`.
///
/// # Safety
/// `runtime` and `device` are handles; `out_scope` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_scope_create_device(
    runtime: *mut dp_runtime_t,
    device: *mut dp_device_t,
    out_scope: *mut *mut dp_scope_t,
) -> dp_status_t {
    guard("dp_scope_create_device", || {
        // SAFETY: the caller's contract.
        let (rt, d) = unsafe { (runtime_obj(runtime)?, self::device(device, "device")?) };
        check_out(out_scope, "out_scope")?;
        let scope = rt.runtime().device_scope(d)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_scope, "out_scope", new_scope(scope)) }
    })
}

/// Creates a scope whose `setter` places each op (see `dp_device_setter_fn`). `drop`, if not
/// NULL, is called with `user_data` exactly once, when the scope is destroyed and no captured
/// scope holds the setter any more (or at once when creating it fails).
///
/// # Safety
/// `runtime` is a handle; `setter` may be called from any thread that runs ops with
/// `user_data` until `drop` is called; `out_scope` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_scope_create_setter(
    runtime: *mut dp_runtime_t,
    setter: dp_device_setter_fn,
    user_data: *mut c_void,
    drop: dp_drop_fn,
    out_scope: *mut *mut dp_scope_t,
) -> dp_status_t {
    let owned = Setter::new(setter.unwrap_or(noop_setter), user_data, drop);
    guard("dp_scope_create_setter", move || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_scope, "out_scope")?;
        if setter.is_none() {
            return Err(bad_arg("setter", "is NULL"));
        }
        let scope = rt.runtime().setter_scope(move |op| owned.call(op));
        // SAFETY: the caller's contract.
        unsafe { write_out(out_scope, "out_scope", new_scope(scope)) }
    })
}

/// Stands in for a NULL setter, which is refused before anything calls it.
unsafe extern "C" fn noop_setter(
    _: *const dp_placement_query_t,
    _: *mut c_void,
    _: *mut *mut dp_device_t,
) -> dp_status_t {
    DP_OK
}

/// Captures the placement context in force for `runtime` on the calling thread (every scope
/// it entered, innermost last) as one scope. Entered later, on any thread, it places ops as
/// they would have been placed here, whatever scopes are entered around it then. Captured with
/// no scope entered, it places ops on the runtime's default device.
///
/// # Safety
/// `runtime` is a handle; `out_scope` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_scope_capture(
    runtime: *mut dp_runtime_t,
    out_scope: *mut *mut dp_scope_t,
) -> dp_status_t {
    guard("dp_scope_capture", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        check_out(out_scope, "out_scope")?;
        let scope = rt.runtime().current_scope();
        // SAFETY: the caller's contract.
        unsafe { write_out(out_scope, "out_scope", new_scope(scope)) }
    })
}

fn new_scope(scope: DeviceScope) -> *mut dp_scope_t {
    handle::new::<dp_scope_t>(ScopeObj {
        scope,
        entered: Arc::default(),
    })
}

/// Enters `scope` on the calling thread: ops this thread runs on the scope's runtime without
/// an explicit device are placed by it (and the scopes around it) until `dp_scope_exit`. A
/// scope may be entered several times and on several threads at once.
///
/// # Safety
/// `scope` is a scope handle.
#[no_mangle]
pub unsafe extern "C" fn dp_scope_enter(scope: *mut dp_scope_t) -> dp_status_t {
    guard("dp_scope_enter", || {
        // SAFETY: the caller's contract.
        let s = unsafe { get(scope, "scope")? };
        s.entered.fetch_add(1, Ordering::AcqRel);
        let entered = Entered {
            handle: scope as usize,
            entered: s.entered.clone(),
            _guard: s.scope.enter(),
        };
        ENTERED.with(|e| e.borrow_mut().push(entered));
        Ok(())
    })
}

/// Exits `scope`, which must be the innermost scope the calling thread entered through
/// `dp_scope_enter` and has not exited (`DP_FAILED_PRECONDITION` otherwise, and nothing
/// changes).
///
/// # Safety
/// `scope` is a scope handle.
#[no_mangle]
pub unsafe extern "C" fn dp_scope_exit(scope: *mut dp_scope_t) -> dp_status_t {
    guard("dp_scope_exit", || {
        // SAFETY: the caller's contract.
        unsafe { get(scope, "scope")? };
        let exited = ENTERED.with(|e| {
            let mut e = e.borrow_mut();
            match e.last() {
                Some(top) if top.handle == scope as usize => Ok(e.pop()),
                Some(_) => Err(Error::new(
                    Code::FailedPrecondition,
                    "`scope` is not the innermost scope this thread entered: exit the scopes \
                     entered after it first",
                )),
                None => Err(Error::new(
                    Code::FailedPrecondition,
                    "`scope` is not entered on this thread",
                )),
            }
        })?;
        // The guard drops outside the borrow (a setter's drop function may run host code).
        drop(exited);
        Ok(())
    })
}

/// Destroys a scope. NULL is a no-op. A scope still entered on some thread is not destroyed:
/// the call logs an error and leaves the handle valid (exit it, then destroy it). Scopes
/// captured while it was entered keep what they need of it.
///
/// # Safety
/// `scope` is NULL or a scope handle no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn dp_scope_destroy(scope: *mut dp_scope_t) {
    guard_void("dp_scope_destroy", || {
        if scope.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        let s = unsafe { get(scope, "scope")? };
        let n = s.entered.load(Ordering::Acquire);
        if n > 0 {
            // Logged (a warning) by `guard_void`, as every void call that did nothing.
            return Err(Error::new(
                Code::FailedPrecondition,
                format!(
                    "the scope is still entered ({n} time(s)); exit it first — it was not \
                     destroyed"
                ),
            ));
        }
        // SAFETY: the caller's contract.
        unsafe { handle::destroy(scope, "scope") }
    });
}
