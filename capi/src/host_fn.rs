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

/// What this thread is running of a host's callbacks: how many, nested, and the stream and
/// device (C handles) of the innermost stream host callback.
#[derive(Clone, Copy, Default)]
struct Running {
    depth: u32,
    stream: usize,
    device: usize,
}

thread_local! {
    static RUNNING: std::cell::Cell<Running> = std::cell::Cell::new(Running::default());
}

/// Restores what the thread was running when a callback returns (or unwinds).
struct Restore(Running);

impl Drop for Restore {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(self.0));
    }
}

/// Runs `f`, a call of one of the host's callbacks (a stream's host function, when `on` names
/// its stream and device handles; a device setter, the log or placement callback otherwise),
/// noting that this thread is inside it: what must not happen there — destroying the runtime
/// that runs it, waiting for the stream that runs it — is refused instead of freeing what the
/// caller of the callback still uses, or waiting forever.
pub(crate) fn calling<R>(on: Option<(usize, usize)>, f: impl FnOnce() -> R) -> R {
    let before = RUNNING.with(|r| r.get());
    let _restore = Restore(before);
    let (stream, device) = on.unwrap_or((before.stream, before.device));
    RUNNING.with(|r| {
        r.set(Running {
            depth: before.depth + 1,
            stream,
            device,
        })
    });
    f()
}

/// What a call from inside a callback would wait for or free, refused by [`refuse_inside`].
pub(crate) enum Waits<'a> {
    /// Anything: destroying the runtime, whose callback this is, whichever it is.
    Runtime,
    /// The stream (a C handle): synchronizing or destroying it; `why` says which.
    Stream(usize, &'a str),
    /// The device (a C handle): synchronizing it.
    Device(usize),
}

/// `FAILED_PRECONDITION` when this thread is inside a callback devplug runs and `what` would
/// wait for that callback to return, or free what its caller still uses.
pub(crate) fn refuse_inside(what: Waits) -> devplug_core::Result<()> {
    let r = RUNNING.with(|r| r.get());
    let in_stream = |s: usize| r.depth > 0 && r.stream != 0 && r.stream == s;
    let why = match what {
        Waits::Runtime if r.depth > 0 => {
            "called from inside a callback devplug runs (a host callback, a device setter, the \
             log or placement callback), whose caller still uses the runtime: destroy it after \
             that call returned"
                .to_string()
        }
        Waits::Stream(s, why) if in_stream(s) => {
            format!("called from a host callback the stream is running: {why}")
        }
        Waits::Device(d) if r.depth > 0 && r.stream != 0 && r.device == d => {
            "called from a host callback one of the device's streams is running: waiting for \
             the device would never return"
                .to_string()
        }
        _ => return Ok(()),
    };
    Err(devplug_core::Error::failed_precondition(why))
}
