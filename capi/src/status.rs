//! Status codes, the thread-local error message, and the panic boundary every export sits
//! behind.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use devplug_core::{Code, Error, Result};

/// A status code: `DP_OK` (0) or one of the `DP_*` error codes.
pub type dp_status_t = i32;

/// Success.
pub const DP_OK: dp_status_t = 0;
/// The operation was cancelled.
pub const DP_CANCELLED: dp_status_t = 1;
/// An error that fits no other code.
pub const DP_UNKNOWN: dp_status_t = 2;
/// An argument is invalid: NULL, a wrong or destroyed handle, a bad enum value, a bad size.
pub const DP_INVALID_ARGUMENT: dp_status_t = 3;
/// A deadline passed.
pub const DP_DEADLINE_EXCEEDED: dp_status_t = 4;
/// A named thing (device, platform, op) does not exist.
pub const DP_NOT_FOUND: dp_status_t = 5;
/// A thing with that name or identity exists already.
pub const DP_ALREADY_EXISTS: dp_status_t = 6;
/// Not allowed.
pub const DP_PERMISSION_DENIED: dp_status_t = 7;
/// Out of memory or another resource; a memory limit was reached.
pub const DP_RESOURCE_EXHAUSTED: dp_status_t = 8;
/// The system is not in a state the operation needs.
pub const DP_FAILED_PRECONDITION: dp_status_t = 9;
/// The operation was aborted.
pub const DP_ABORTED: dp_status_t = 10;
/// An offset, size or index lies past the end.
pub const DP_OUT_OF_RANGE: dp_status_t = 11;
/// Not implemented (the message says what is missing).
pub const DP_UNIMPLEMENTED: dp_status_t = 12;
/// A bug in devplug or a plugin (the message says where).
pub const DP_INTERNAL: dp_status_t = 13;
/// Temporarily unavailable.
pub const DP_UNAVAILABLE: dp_status_t = 14;
/// Data was lost or corrupted.
pub const DP_DATA_LOSS: dp_status_t = 15;
/// A plugin's ABI version is incompatible with the host's.
pub const DP_ABI_MISMATCH: dp_status_t = 100;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(message: String) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

pub(crate) fn report(function: &str, e: &Error) -> dp_status_t {
    set_last_error(format!("{function}: {}", e.message));
    e.code as dp_status_t
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs an export's body: errors become a status plus the thread's message; a panic becomes
/// `DP_INTERNAL` and never crosses into C.
pub(crate) fn guard(function: &str, body: impl FnOnce() -> Result<()>) -> dp_status_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => DP_OK,
        Ok(Err(e)) => report(function, &e),
        Err(p) => {
            set_last_error(format!(
                "{function}: internal error (panic): {}",
                panic_message(&*p)
            ));
            DP_INTERNAL
        }
    }
}

/// [`guard`] for exports that return nothing (releases, destroys): no caller sees a status,
/// so an error (a double release, a handle of another kind) is also logged as a warning, where
/// the host's log shows its bug; the thread's last error is set as for any call.
pub(crate) fn guard_void(function: &str, body: impl FnOnce() -> Result<()>) {
    if guard(function, body) != DP_OK {
        let message = LAST_ERROR.with(|m| m.borrow().to_string_lossy().into_owned());
        devplug_core::log::warn(&format!("{message} (the call did nothing)"));
    }
}

/// Like [`guard`] for exports that return a value instead of a status; `invalid` is what
/// they return on failure.
pub(crate) fn guard_value<T>(function: &str, invalid: T, body: impl FnOnce() -> Result<T>) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            report(function, &e);
            invalid
        }
        Err(p) => {
            set_last_error(format!(
                "{function}: internal error (panic): {}",
                panic_message(&*p)
            ));
            invalid
        }
    }
}

/// The name of a status code, e.g. `"INVALID_ARGUMENT"`; `"UNKNOWN_STATUS"` for a value that
/// is not a code. The string is static.
#[no_mangle]
pub extern "C" fn dp_status_str(status: dp_status_t) -> *const c_char {
    let name: &'static [u8] = match Code::from_i32(status) {
        Some(Code::Ok) => b"OK\0",
        Some(Code::Cancelled) => b"CANCELLED\0",
        Some(Code::Unknown) => b"UNKNOWN\0",
        Some(Code::InvalidArgument) => b"INVALID_ARGUMENT\0",
        Some(Code::DeadlineExceeded) => b"DEADLINE_EXCEEDED\0",
        Some(Code::NotFound) => b"NOT_FOUND\0",
        Some(Code::AlreadyExists) => b"ALREADY_EXISTS\0",
        Some(Code::PermissionDenied) => b"PERMISSION_DENIED\0",
        Some(Code::ResourceExhausted) => b"RESOURCE_EXHAUSTED\0",
        Some(Code::FailedPrecondition) => b"FAILED_PRECONDITION\0",
        Some(Code::Aborted) => b"ABORTED\0",
        Some(Code::OutOfRange) => b"OUT_OF_RANGE\0",
        Some(Code::Unimplemented) => b"UNIMPLEMENTED\0",
        Some(Code::Internal) => b"INTERNAL\0",
        Some(Code::Unavailable) => b"UNAVAILABLE\0",
        Some(Code::DataLoss) => b"DATA_LOSS\0",
        Some(Code::AbiMismatch) => b"ABI_MISMATCH\0",
        None => b"UNKNOWN_STATUS\0",
    };
    name.as_ptr().cast()
}

/// The message of the last call on this thread that failed (`""` if none has). The string
/// stays valid until the next failing devplug call on this thread; successful calls leave it
/// alone.
#[no_mangle]
pub extern "C" fn dp_last_error_message() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// An invalid-argument error naming the argument.
pub(crate) fn bad_arg(arg: &str, why: &str) -> Error {
    Error::invalid_argument(format!("`{arg}` {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_match_the_core() {
        for c in Code::ALL {
            // SAFETY: dp_status_str returns a static NUL-terminated string.
            let s = unsafe { std::ffi::CStr::from_ptr(dp_status_str(c as i32)) };
            assert_eq!(s.to_str().unwrap(), c.name());
        }
    }
}
