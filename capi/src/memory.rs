//! `dp_buffer_*`: device memory and synchronous copies.

use std::ffi::c_void;
use std::sync::Arc;

use devplug_core::Buffer;

use crate::handle::{self, check_out, get, handle, write_out};
use crate::runtime::{device, dp_device_t, kept_device_handle, DevicePtr};
use crate::status::{dp_status_t, guard, guard_value, guard_void};

#[doc(hidden)]
pub struct BufferObj {
    pub(crate) buffer: Arc<Buffer>,
    pub(crate) device: DevicePtr,
}

handle!(
    /// Device memory, shared: [`dp_buffer_retain`] adds a reference, [`dp_buffer_release`]
    /// drops one; the memory is freed with the last reference (and once no enqueued work
    /// uses it).
    dp_buffer_t,
    BufferObj,
    0x6470_4246_0000_0005
);

pub(crate) unsafe fn buffer<'a>(
    b: *const dp_buffer_t,
    arg: &str,
) -> devplug_core::Result<&'a BufferObj> {
    // SAFETY: forwarded.
    unsafe { get(b, arg) }
}

/// Allocates `size` bytes of device memory (contents unspecified).
/// `DP_RESOURCE_EXHAUSTED` past the device's memory limit.
///
/// # Safety
/// `device` is a device handle; `out_buffer` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_allocate(
    device: *mut dp_device_t,
    size: usize,
    out_buffer: *mut *mut dp_buffer_t,
) -> dp_status_t {
    guard("dp_buffer_allocate", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        check_out(out_buffer, "out_buffer")?;
        let buffer = d.allocate(size as u64)?;
        let h = handle::new::<dp_buffer_t>(BufferObj {
            buffer,
            device: DevicePtr(device),
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_buffer, "out_buffer", h) }
    })
}

/// Adds a reference to a buffer.
///
/// # Safety
/// `buffer` is a buffer handle.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_retain(buffer: *mut dp_buffer_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_buffer_retain", || unsafe {
        handle::retain(buffer, "buffer")
    });
}

/// Drops a reference to a buffer. NULL is a no-op.
///
/// # Safety
/// `buffer` is NULL or a buffer handle.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_release(buffer: *mut dp_buffer_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_buffer_release", || unsafe {
        handle::release(buffer, "buffer")
    });
}

/// The buffer's size in bytes; 0 for an invalid handle.
///
/// # Safety
/// `buffer` is a buffer handle.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_size(buffer: *const dp_buffer_t) -> usize {
    // SAFETY: the caller's contract.
    guard_value("dp_buffer_size", 0, || {
        Ok(unsafe { self::buffer(buffer, "buffer")? }.buffer.size() as usize)
    })
}

/// The device the buffer lives on; NULL for an invalid handle, and NULL (the error says why)
/// once the device's runtime was destroyed: its device handles went with it, though the
/// buffer can still be read and written.
///
/// # Safety
/// `buffer` is a buffer handle.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_device(buffer: *const dp_buffer_t) -> *mut dp_device_t {
    // SAFETY: the caller's contract.
    guard_value("dp_buffer_device", std::ptr::null_mut(), || {
        let b = unsafe { self::buffer(buffer, "buffer")? };
        // SAFETY: a device handle this library made, kept by the buffer.
        unsafe {
            kept_device_handle(
                b.device,
                b.buffer.device(),
                "buffer",
                "read, written and copied",
            )
        }
    })
}

/// Copies `size` bytes of host memory into the buffer at `dst_offset`, after the work on the
/// device's default stream. `DP_OUT_OF_RANGE` when the range leaves the buffer.
///
/// # Safety
/// `dst` is a buffer handle; `src` is readable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_write(
    dst: *mut dp_buffer_t,
    dst_offset: usize,
    src: *const c_void,
    size: usize,
) -> dp_status_t {
    guard("dp_buffer_write", || {
        // SAFETY: the caller's contract.
        let b = unsafe { buffer(dst, "dst")? };
        b.buffer.range(dst_offset as u64, size as u64)?;
        // SAFETY: the caller's contract.
        let data = unsafe { handle::bytes(src.cast(), size, "src")? };
        b.buffer.write(dst_offset as u64, data)
    })
}

/// Copies `size` bytes of the buffer at `src_offset` into host memory, after the work on the
/// device's default stream.
///
/// # Safety
/// `src` is a buffer handle; `dst` is writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_read(
    src: *const dp_buffer_t,
    src_offset: usize,
    dst: *mut c_void,
    size: usize,
) -> dp_status_t {
    guard("dp_buffer_read", || {
        // SAFETY: the caller's contract.
        let b = unsafe { buffer(src, "src")? };
        b.buffer.range(src_offset as u64, size as u64)?;
        // SAFETY: the caller's contract.
        let out = unsafe { handle::bytes_mut(dst.cast(), size, "dst")? };
        b.buffer.read(src_offset as u64, out)
    })
}

/// Copies `size` bytes between two buffers on any devices (through host memory where the
/// platforms cannot reach each other).
///
/// # Safety
/// `dst` and `src` are buffer handles.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_copy(
    dst: *mut dp_buffer_t,
    dst_offset: usize,
    src: *const dp_buffer_t,
    src_offset: usize,
    size: usize,
) -> dp_status_t {
    guard("dp_buffer_copy", || {
        // SAFETY: the caller's contract.
        let (d, s) = unsafe { (buffer(dst, "dst")?, buffer(src, "src")?) };
        d.buffer
            .copy_from(dst_offset as u64, &s.buffer, src_offset as u64, size as u64)
    })
}

/// Sets `size` bytes of the buffer at `offset` to `value`.
///
/// # Safety
/// `dst` is a buffer handle.
#[no_mangle]
pub unsafe extern "C" fn dp_buffer_memset(
    dst: *mut dp_buffer_t,
    offset: usize,
    value: u8,
    size: usize,
) -> dp_status_t {
    guard("dp_buffer_memset", || {
        // SAFETY: the caller's contract.
        unsafe { buffer(dst, "dst")? }
            .buffer
            .memset(offset as u64, value, size as u64)
    })
}
