//! `dp_stream_*` and `dp_event_*`: ordered work queues of one device, and markers in them.

use std::ffi::c_void;

use devplug_core::{Code, Error, Event, EventStatus, Stream};

use crate::handle::{self, check_out, get, handle, write_out};
use crate::host_fn::Waits;
use crate::memory::{buffer, dp_buffer_t};
use crate::runtime::{device, dp_device_t, kept_device_handle, DevicePtr};
use crate::status::{bad_arg, dp_status_t, guard, guard_value, guard_void};

#[doc(hidden)]
pub struct StreamObj {
    stream: Stream,
    device: DevicePtr,
}

handle!(
    /// A stream: an ordered queue of work on one device. Created streams are owned
    /// ([`dp_stream_destroy`]); a device's default stream is borrowed from the device.
    dp_stream_t,
    StreamObj,
    0x6470_5354_0000_0003
);

#[doc(hidden)]
pub struct EventObj {
    event: Event,
}

handle!(
    /// An event: a marker recorded in a stream that other streams and the host can wait for.
    dp_event_t,
    EventObj,
    0x6470_4556_0000_0004
);

/// Makes the handle of a device's default stream (owned by the device handle).
pub(crate) fn default_stream_handle(
    device: &std::sync::Arc<devplug_core::Device>,
    handle: *mut dp_device_t,
) -> *mut dp_stream_t {
    handle::new::<dp_stream_t>(StreamObj {
        stream: device.default_stream(),
        device: DevicePtr(handle),
    })
}

/// Destroys a default stream's handle along with its device handle.
///
/// # Safety
/// `stream` was made by [`default_stream_handle`] and is not used afterwards.
pub(crate) unsafe fn destroy_default_stream_handle(stream: *mut dp_stream_t) {
    // SAFETY: forwarded.
    let _ = unsafe { handle::destroy(stream, "stream") };
}

unsafe fn stream<'a>(s: *const dp_stream_t, arg: &str) -> devplug_core::Result<&'a StreamObj> {
    // SAFETY: forwarded.
    unsafe { get(s, arg) }
}

unsafe fn event<'a>(e: *const dp_event_t, arg: &str) -> devplug_core::Result<&'a EventObj> {
    // SAFETY: forwarded.
    unsafe { get(e, arg) }
}

/// Creates a stream on `device`: an asynchronous ordered queue.
///
/// # Safety
/// `device` is a device handle; `out_stream` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_create(
    device: *mut dp_device_t,
    out_stream: *mut *mut dp_stream_t,
) -> dp_status_t {
    guard("dp_stream_create", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        check_out(out_stream, "out_stream")?;
        let s = d.create_stream()?;
        let h = handle::new::<dp_stream_t>(StreamObj {
            stream: s,
            device: DevicePtr(device),
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_stream, "out_stream", h) }
    })
}

/// Destroys a stream after its enqueued work is done. NULL, and a device's default stream,
/// are no-ops.
///
/// # Safety
/// `stream` is NULL or a stream handle no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_destroy(stream: *mut dp_stream_t) {
    guard_void("dp_stream_destroy", || {
        if stream.is_null() {
            return Ok(());
        }
        // SAFETY: the caller's contract.
        if unsafe { self::stream(stream, "stream")? }
            .stream
            .is_default()
        {
            return Ok(());
        }
        crate::host_fn::refuse_inside(Waits::Stream(
            stream as usize,
            "destroying it waits for its work, this callback included",
        ))?;
        // SAFETY: the caller's contract.
        unsafe { handle::destroy(stream, "stream") }
    });
}

/// Writes the device's default stream (borrowed: valid until the runtime is destroyed) into
/// `*out_stream`. On the CPU it runs work inline on the calling thread.
///
/// # Safety
/// `device` is a device handle; `out_stream` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_device_default_stream(
    device: *mut dp_device_t,
    out_stream: *mut *mut dp_stream_t,
) -> dp_status_t {
    guard("dp_device_default_stream", || {
        // SAFETY: the caller's contract.
        let obj = unsafe { get(device, "device")? };
        // SAFETY: the caller's contract.
        unsafe { write_out(out_stream, "out_stream", obj.default_stream.0) }
    })
}

/// The stream's device; NULL for an invalid handle, and NULL (the error says why) for a
/// created stream once the device's runtime was destroyed: its device handles went with it,
/// though the stream can still take work and be synchronized and destroyed. (A default
/// stream's handle goes with the runtime too.)
///
/// # Safety
/// `stream` is a stream handle.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_device(stream: *const dp_stream_t) -> *mut dp_device_t {
    // SAFETY: the caller's contract.
    guard_value("dp_stream_device", std::ptr::null_mut(), || {
        let s = unsafe { self::stream(stream, "stream")? };
        // SAFETY: a device handle this library made, kept by the stream.
        unsafe {
            kept_device_handle(
                s.device,
                s.stream.device(),
                "stream",
                "given work, synchronized and destroyed",
            )
        }
    })
}

/// Writes the stream's id into `*out_id`: 0 for a device's default stream; streams created
/// with `dp_stream_create` are numbered from 1 in the order they were created in this
/// process. A trace names a stream's device track by it (`SIM:0 stream 3`; docs/placement.md).
///
/// # Safety
/// `stream` is a stream handle; `out_id` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_id(stream: *const dp_stream_t, out_id: *mut u32) -> dp_status_t {
    guard("dp_stream_id", || {
        // SAFETY: the caller's contract.
        let s = unsafe { self::stream(stream, "stream")? };
        check_out(out_id, "out_id")?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_id, "out_id", s.stream.id()) }
    })
}

/// Blocks until all work enqueued on the stream so far is done. Returns the stream's first
/// failure since its last synchronize, also that of work that failed after its call had
/// returned (a copy between devices, a wait for another device's event), once.
///
/// # Safety
/// `stream` is a stream handle.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_synchronize(stream: *mut dp_stream_t) -> dp_status_t {
    guard("dp_stream_synchronize", || {
        // SAFETY: the caller's contract.
        let s = unsafe { self::stream(stream, "stream")? };
        crate::host_fn::refuse_inside(Waits::Stream(
            stream as usize,
            "waiting for it would never return",
        ))?;
        s.stream.synchronize()
    })
}

/// Work enqueued on `stream` after this call waits until `event` is reached. The event may
/// belong to another device (the stream then waits on the host side).
///
/// # Safety
/// `stream` is a stream handle; `event` an event handle.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_wait_event(
    stream: *mut dp_stream_t,
    event: *mut dp_event_t,
) -> dp_status_t {
    guard("dp_stream_wait_event", || {
        // SAFETY: the caller's contract.
        let (s, e) = unsafe {
            (
                self::stream(stream, "stream")?,
                self::event(event, "event")?,
            )
        };
        s.stream.wait_event(&e.event)
    })
}

/// Work enqueued on `stream` after this call waits for the work enqueued on `other` before
/// it. Both streams must belong to one device (`DP_INVALID_ARGUMENT` otherwise; use an event).
///
/// # Safety
/// `stream` and `other` are stream handles.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_wait_stream(
    stream: *mut dp_stream_t,
    other: *mut dp_stream_t,
) -> dp_status_t {
    guard("dp_stream_wait_stream", || {
        // SAFETY: the caller's contract.
        let (s, o) = unsafe {
            (
                self::stream(stream, "stream")?,
                self::stream(other, "other")?,
            )
        };
        s.stream.wait_stream(&o.stream)
    })
}

/// A host function run by a stream.
pub type dp_host_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

struct UserData(*mut c_void);
// SAFETY: the host promises (documented on `dp_stream_host_callback`) that its callback may
// run on another thread with this pointer.
unsafe impl Send for UserData {}

/// Runs `fn(user_data)` exactly once, after all earlier work of the stream: on a runtime
/// worker thread, or inline on the calling thread for a synchronous stream (the CPU's default
/// stream). The function must not destroy or synchronize the stream that runs it. If the
/// call fails, `fn` is not run.
///
/// # Safety
/// `stream` is a stream handle; `fn` may be called from another thread with `user_data`.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_host_callback(
    stream: *mut dp_stream_t,
    r#fn: dp_host_fn,
    user_data: *mut c_void,
) -> dp_status_t {
    guard("dp_stream_host_callback", || {
        // SAFETY: the caller's contract.
        let s = unsafe { self::stream(stream, "stream")? };
        let f = r#fn.ok_or_else(|| bad_arg("fn", "is NULL"))?;
        let data = UserData(user_data);
        let on = Some((stream as usize, s.device.0 as usize));
        s.stream.host_callback(Box::new(move || {
            let data = data;
            // SAFETY: the host gave this function and data for exactly this call.
            crate::host_fn::calling(on, || unsafe { f(data.0) })
        }))
    })
}

/// A host function run by a stream that can fail: it returns `DP_OK` or the status to report.
pub type dp_host_status_fn = Option<unsafe extern "C" fn(user_data: *mut c_void) -> dp_status_t>;

/// As `dp_stream_host_callback`, for a function that can fail: when `fn` returns anything but
/// `DP_OK`, the stream's next `dp_stream_synchronize` (or `dp_device_synchronize`) returns that
/// status, once, with a message naming it — on a synchronous stream (the CPU's default stream),
/// this call does. A value that is no `dp_status_t` is reported as `DP_INTERNAL`.
///
/// # Safety
/// As for `dp_stream_host_callback`.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_host_callback_with_status(
    stream: *mut dp_stream_t,
    r#fn: dp_host_status_fn,
    user_data: *mut c_void,
) -> dp_status_t {
    guard("dp_stream_host_callback_with_status", || {
        // SAFETY: the caller's contract.
        let s = unsafe { self::stream(stream, "stream")? };
        let f = r#fn.ok_or_else(|| bad_arg("fn", "is NULL"))?;
        let data = UserData(user_data);
        let on = Some((stream as usize, s.device.0 as usize));
        s.stream.host_callback_with_status(move || {
            let data = data;
            // SAFETY: the host gave this function and data for exactly this call.
            let status = crate::host_fn::calling(on, || unsafe { f(data.0) });
            if status == 0 {
                return Ok(());
            }
            Err(match Code::from_i32(status) {
                Some(code) => Error::new(
                    code,
                    format!("a host callback returned {} ({status})", code.name()),
                ),
                None => Error::internal(format!(
                    "a host callback returned {status}, which is no dp_status_t"
                )),
            })
        })
    })
}

/// Enqueues a copy of `size` bytes of host memory into `dst` at `dst_offset`. `src` must stay
/// valid until the stream reaches the copy. `dst` must live on the stream's device.
///
/// # Safety
/// `stream` and `dst` are handles; `src` is readable for `size` bytes until the copy ran.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_write(
    stream: *mut dp_stream_t,
    dst: *mut dp_buffer_t,
    dst_offset: usize,
    src: *const c_void,
    size: usize,
) -> dp_status_t {
    guard("dp_stream_write", || {
        // SAFETY: the caller's contract.
        let (s, b) = unsafe { (self::stream(stream, "stream")?, buffer(dst, "dst")?) };
        b.buffer.range(dst_offset as u64, size as u64)?;
        // SAFETY: checks NULL and size; the memory stays valid by the caller's contract.
        let data = unsafe { handle::bytes(src.cast(), size, "src")? };
        // SAFETY: as above, until the stream reaches the copy.
        unsafe {
            s.stream
                .write_raw(&b.buffer, dst_offset as u64, data.as_ptr(), size as u64)
        }
    })
}

/// Enqueues a copy of `size` bytes of `src` at `src_offset` into host memory. `dst` must stay
/// valid, and unread, until the stream reaches the copy (synchronize the stream or an event
/// recorded after it). `src` must live on the stream's device.
///
/// # Safety
/// `stream` and `src` are handles; `dst` is writable for `size` bytes until the copy ran.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_read(
    stream: *mut dp_stream_t,
    src: *const dp_buffer_t,
    src_offset: usize,
    dst: *mut c_void,
    size: usize,
) -> dp_status_t {
    guard("dp_stream_read", || {
        // SAFETY: the caller's contract.
        let (s, b) = unsafe { (self::stream(stream, "stream")?, buffer(src, "src")?) };
        b.buffer.range(src_offset as u64, size as u64)?;
        // SAFETY: checks NULL and size; the memory stays valid by the caller's contract.
        let out = unsafe { handle::bytes_mut(dst.cast(), size, "dst")? };
        // SAFETY: as above, until the stream reaches the copy.
        unsafe {
            s.stream
                .read_raw(&b.buffer, src_offset as u64, out.as_mut_ptr(), size as u64)
        }
    })
}

/// Enqueues a copy between buffers. One of them must live on the stream's device; the other
/// may live on any device. A copy between devices runs when the stream gets there; if it fails
/// then, the stream's next synchronize returns the error (on the CPU's default stream, which
/// runs it at once, this call does).
///
/// # Safety
/// `stream`, `dst` and `src` are handles.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_copy(
    stream: *mut dp_stream_t,
    dst: *mut dp_buffer_t,
    dst_offset: usize,
    src: *const dp_buffer_t,
    src_offset: usize,
    size: usize,
) -> dp_status_t {
    guard("dp_stream_copy", || {
        // SAFETY: the caller's contract.
        let (s, d, b) = unsafe {
            (
                self::stream(stream, "stream")?,
                buffer(dst, "dst")?,
                buffer(src, "src")?,
            )
        };
        s.stream.copy(
            &d.buffer,
            dst_offset as u64,
            &b.buffer,
            src_offset as u64,
            size as u64,
        )
    })
}

/// Enqueues setting `size` bytes of `dst` at `offset` to `value`.
///
/// # Safety
/// `stream` and `dst` are handles.
#[no_mangle]
pub unsafe extern "C" fn dp_stream_memset(
    stream: *mut dp_stream_t,
    dst: *mut dp_buffer_t,
    offset: usize,
    value: u8,
    size: usize,
) -> dp_status_t {
    guard("dp_stream_memset", || {
        // SAFETY: the caller's contract.
        let (s, d) = unsafe { (self::stream(stream, "stream")?, buffer(dst, "dst")?) };
        s.stream
            .memset(&d.buffer, offset as u64, value, size as u64)
    })
}

/// Creates an event on `device`.
///
/// # Safety
/// `device` is a device handle; `out_event` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_event_create(
    device: *mut dp_device_t,
    out_event: *mut *mut dp_event_t,
) -> dp_status_t {
    guard("dp_event_create", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        check_out(out_event, "out_event")?;
        let h = handle::new::<dp_event_t>(EventObj {
            event: d.create_event()?,
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_event, "out_event", h) }
    })
}

/// Destroys an event. NULL is a no-op. Streams already waiting for it still see it reached.
///
/// # Safety
/// `event` is NULL or an event handle no other thread is using.
#[no_mangle]
pub unsafe extern "C" fn dp_event_destroy(event: *mut dp_event_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_event_destroy", || unsafe {
        handle::destroy(event, "event")
    });
}

/// Records the event at the current end of `stream`, which must belong to the event's
/// device (`DP_INVALID_ARGUMENT` otherwise).
///
/// # Safety
/// `event` and `stream` are handles.
#[no_mangle]
pub unsafe extern "C" fn dp_event_record(
    event: *mut dp_event_t,
    stream: *mut dp_stream_t,
) -> dp_status_t {
    guard("dp_event_record", || {
        // SAFETY: the caller's contract.
        let (e, s) = unsafe {
            (
                self::event(event, "event")?,
                self::stream(stream, "stream")?,
            )
        };
        e.event.record(&s.stream)
    })
}

/// Writes 1 into `*out_complete` when the event was reached (or never recorded), else 0.
/// Returns the failure instead (writing nothing) when the event is marked failed: the stream
/// failed before reaching it — the platform's work, or host work the runtime ran there whose
/// failure was not reported yet (see `dp_event_synchronize`).
///
/// # Safety
/// `event` is an event handle; `out_complete` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_event_query(
    event: *const dp_event_t,
    out_complete: *mut i32,
) -> dp_status_t {
    guard("dp_event_query", || {
        // SAFETY: the caller's contract.
        let e = unsafe { self::event(event, "event")? };
        check_out(out_complete, "out_complete")?;
        let done = match e.event.status()? {
            EventStatus::Complete => 1,
            EventStatus::Pending => 0,
            EventStatus::Error => {
                // Reached and failed: its synchronize returns at once, with the failure.
                e.event.synchronize()?;
                return Err(Error::internal(
                    "the stream failed before reaching the event",
                ));
            }
        };
        // SAFETY: the caller's contract.
        unsafe { write_out(out_complete, "out_complete", done) }
    })
}

/// Blocks until the event is reached. Returns the failure the event is marked with when its
/// stream failed before reaching it: the platform's, or that of host work the runtime ran on
/// the stream before the record (a `dp_stream_copy` between devices, a wait for another
/// device's event, a `dp_stream_host_callback_with_status` callback) that the stream's
/// synchronize had not reported when the stream got there. The stream's synchronize still
/// reports it, once; the event keeps the mark until it is recorded again.
///
/// # Safety
/// `event` is an event handle.
#[no_mangle]
pub unsafe extern "C" fn dp_event_synchronize(event: *mut dp_event_t) -> dp_status_t {
    // SAFETY: the caller's contract.
    guard("dp_event_synchronize", || {
        unsafe { self::event(event, "event")? }.event.synchronize()
    })
}

/// Writes into `*out_ns` the device's time in nanoseconds from reaching `start` to reaching
/// `end` (negative when `end` was reached first): how work on a device is timed, as with
/// `cudaEventElapsedTime`. Both events belong to the same device and were recorded and reached
/// (on any of its streams); the clock is the device's, as fine as it can tell.
///
/// Errors (nothing written): `DP_INVALID_ARGUMENT` for events of two devices;
/// `DP_FAILED_PRECONDITION` when either event was never recorded, is still pending
/// (`dp_event_synchronize` it first) or is marked failed; `DP_UNIMPLEMENTED` when the device's
/// platform does not time events (a plugin without ABI 1.4's `event_elapsed_ns`).
///
/// # Safety
/// `start` and `end` are event handles; `out_ns` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_event_elapsed_ns(
    start: *const dp_event_t,
    end: *const dp_event_t,
    out_ns: *mut i64,
) -> dp_status_t {
    guard("dp_event_elapsed_ns", || {
        // SAFETY: the caller's contract.
        let (s, e) = unsafe { (self::event(start, "start")?, self::event(end, "end")?) };
        check_out(out_ns, "out_ns")?;
        let ns = s.event.elapsed_ns(&e.event)?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_ns, "out_ns", ns) }
    })
}
