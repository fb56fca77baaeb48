//! `dp_log_*`: where devplug's log goes (standard error, or the host's callback) and how much of
//! it. Process-wide, as `DEVPLUG_LOG` is (see `devplug_core::log`).

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use devplug_core::log::{self, Level, Record};

use crate::host_fn::HostFn;
use crate::op::dp_drop_fn;
use crate::status::{bad_arg, dp_status_t, guard};

/// `dp_log_set_level`: back to what `DEVPLUG_LOG` says (default: warnings and errors).
pub const DP_LOG_DEFAULT: i32 = 0;
/// An error: something failed.
pub const DP_LOG_ERROR: i32 = 1;
/// A warning: something went wrong and the runtime went on (a plugin that failed to load).
pub const DP_LOG_WARN: i32 = 2;
/// What the runtime and its plugins found (`cuda: no devices: …`).
pub const DP_LOG_INFO: i32 = 3;
/// Details for debugging.
pub const DP_LOG_DEBUG: i32 = 4;
/// Everything.
pub const DP_LOG_TRACE: i32 = 5;

/// One log message, as the log callback receives it. The strings are valid during the call
/// only.
#[repr(C)]
pub struct dp_log_record_t {
    /// `sizeof(dp_log_record_t)` as the library was compiled.
    pub struct_size: usize,
    /// `DP_LOG_ERROR` … `DP_LOG_TRACE`.
    pub level: i32,
    /// Who said it: `"devplug"` for the runtime, `"plugin 'devplug_sim'"` for a plugin (its
    /// name).
    pub source: *const c_char,
    /// The message, without a trailing newline.
    pub message: *const c_char,
}

/// A log callback. It runs on the thread that logs, which may be any thread (a plugin's worker,
/// a stream's); it may call devplug, but what those calls log while it runs goes to standard
/// error instead of back into it.
pub type dp_log_fn =
    Option<unsafe extern "C" fn(record: *const dp_log_record_t, user_data: *mut c_void)>;

type Callback = HostFn<unsafe extern "C" fn(*const dp_log_record_t, *mut c_void)>;

/// Calls the host's log callback with `r`.
fn call(cb: &Callback, r: &Record) {
    let c = crate::handle::cstring;
    let (source, message) = (c(r.source), c(r.message));
    let record = dp_log_record_t {
        struct_size: std::mem::size_of::<dp_log_record_t>(),
        level: r.level as i32,
        source: source.as_ptr(),
        message: message.as_ptr(),
    };
    // SAFETY: the host's callback with a record valid for the call.
    crate::host_fn::calling(None, || unsafe { (cb.func)(&record, cb.user_data) });
}

/// Sends devplug's log (the runtime's and its plugins' messages at or above the level,
/// `dp_log_set_level`) to `fn` instead of standard error, for the whole process; `fn` NULL
/// returns it to standard error. The previous callback's `drop` is called once no thread runs
/// it any more; this one's when it is replaced (or at once, when `fn` is NULL).
///
/// # Safety
/// `fn` may be called from any thread with `user_data` until replaced.
#[no_mangle]
pub unsafe extern "C" fn dp_log_set_callback(
    r#fn: dp_log_fn,
    user_data: *mut c_void,
    drop: dp_drop_fn,
) -> dp_status_t {
    guard("dp_log_set_callback", || {
        let cb = match r#fn {
            Some(func) => {
                let c = Arc::new(Callback::new(func, user_data, drop));
                let f: log::LogCallback = Arc::new(move |r: &Record| call(&c, r));
                Some(f)
            }
            None => {
                if let Some(d) = drop {
                    // SAFETY: no callback was installed with this data: drop it at once.
                    unsafe { d(user_data) };
                }
                None
            }
        };
        // The old callback is dropped here (its `drop` runs) unless a call on another thread
        // still holds it; then when that call returns.
        std::mem::drop(log::set_callback(cb));
        Ok(())
    })
}

/// Sets the level for the whole process: messages at it and more severe are logged
/// (`DP_LOG_ERROR` … `DP_LOG_TRACE`); `DP_LOG_DEFAULT` returns to `DEVPLUG_LOG`'s (default
/// `DP_LOG_WARN`). `DP_INVALID_ARGUMENT` for another value.
#[no_mangle]
pub extern "C" fn dp_log_set_level(level: i32) -> dp_status_t {
    guard("dp_log_set_level", || {
        let l = match level {
            DP_LOG_DEFAULT => None,
            other => Some(Level::from_i32(other).ok_or_else(|| {
                bad_arg(
                    "level",
                    &format!("is {other}, not DP_LOG_DEFAULT or a DP_LOG_* level"),
                )
            })?),
        };
        log::set_level(l);
        Ok(())
    })
}

/// The level in force (`DP_LOG_ERROR` … `DP_LOG_TRACE`).
#[no_mangle]
pub extern "C" fn dp_log_level() -> i32 {
    log::level() as i32
}
