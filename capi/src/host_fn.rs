//! A host's function pointer with its user data and optional drop function, as every C API
//! callback that outlives the call installing it carries them (placement log, device setters,
//! the log callback).

use std::ffi::c_void;

use crate::op::dp_drop_fn;

/// `func` with `user_data`; `drop(user_data)` runs exactly once, when this is dropped.
pub(crate) struct HostFn<F: Copy> {
    pub(crate) func: F,
    pub(crate) user_data: *mut c_void,
    drop: dp_drop_fn,
}

// SAFETY: the host promises, on every function that installs a callback, that it may run on
// any thread with its user data (and be dropped on any thread).
unsafe impl<F: Copy> Send for HostFn<F> {}
// SAFETY: as above.
unsafe impl<F: Copy> Sync for HostFn<F> {}

impl<F: Copy> HostFn<F> {
    pub(crate) fn new(func: F, user_data: *mut c_void, drop: dp_drop_fn) -> HostFn<F> {
        HostFn {
            func,
            user_data,
            drop,
        }
    }
}

impl<F: Copy> Drop for HostFn<F> {
    fn drop(&mut self) {
        if let Some(d) = self.drop {
            // SAFETY: the host's drop function, called exactly once.
            unsafe { d(self.user_data) };
        }
    }
}
