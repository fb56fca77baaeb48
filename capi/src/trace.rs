//! The trace (`devplug_core::trace`): a timeline of what dispatch ran, for a profiler.

use std::ffi::c_char;

use crate::handle::{c_str, write_out};
use crate::runtime::{dp_runtime_t, runtime_obj};
use crate::status::{dp_status_t, guard};

/// Starts a trace of what dispatch runs: from now on, every kernel launch and every
/// decomposition on any thread is recorded as a span (op, device, reason, kernel source, host
/// thread, host-side start and duration; on an asynchronous device a kernel's span is its
/// launch), and so are the host's synchronous copies (`dp_buffer_read`/`_write`/`_copy`,
/// tensor reads and copies) and waits (`dp_*_synchronize`). A trace already on starts over.
/// `DEVPLUG_TRACE=<file>` traces a runtime's whole life without a call (written when it is
/// destroyed). Off, tracing costs one atomic load per kernel, copy or wait.
///
/// # Safety
/// `runtime` is a runtime handle.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_trace_start(runtime: *mut dp_runtime_t) -> dp_status_t {
    guard("dp_runtime_trace_start", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        rt.runtime().start_trace();
        Ok(())
    })
}

/// Stops the trace and writes it to the file `path` in the Trace Event Format (JSON that
/// `chrome://tracing`, Perfetto and Speedscope open), replacing the file; `path` NULL discards
/// it. `out_span_count` (may be NULL) gets the number of spans. Stopping when no trace is on
/// writes an empty trace. A file that cannot be written gives `DP_NOT_FOUND` (no such folder),
/// `DP_PERMISSION_DENIED` or `DP_UNAVAILABLE`, with the path in the message; the trace is
/// stopped either way.
///
/// # Safety
/// `runtime` is a runtime handle; `path` is NULL or a NUL-terminated string; `out_span_count`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn dp_runtime_trace_stop(
    runtime: *mut dp_runtime_t,
    path: *const c_char,
    out_span_count: *mut usize,
) -> dp_status_t {
    guard("dp_runtime_trace_stop", || {
        // SAFETY: the caller's contract.
        let rt = unsafe { runtime_obj(runtime)? };
        let path = if path.is_null() {
            None
        } else {
            // SAFETY: non-NULL, and NUL-terminated by the caller's contract.
            Some(unsafe { c_str(path, "path")? })
        };
        let trace = rt.runtime().stop_trace();
        if let Some(p) = path {
            trace.write_chrome_json(std::path::Path::new(p))?;
        }
        if !out_span_count.is_null() {
            // SAFETY: non-NULL and writable by the caller's contract.
            unsafe { write_out(out_span_count, "out_span_count", trace.events.len())? };
        }
        Ok(())
    })
}
