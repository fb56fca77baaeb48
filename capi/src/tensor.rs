//! `dp_tensor_*` and `dp_dtype_*`: typed, shaped device memory.

use std::ffi::{c_char, c_void};

use devplug_core::tensor::MAX_RANK;
use devplug_core::{DType, Tensor};

use crate::handle::{self, check_out, get, handle, write_out};
use crate::memory::{dp_buffer_t, BufferObj};
use crate::runtime::{device, dp_device_t, kept_device_handle, DevicePtr};
use crate::status::{bad_arg, dp_status_t, guard, guard_value, guard_void};

/// An element type: one of the `DP_DTYPE_*` values.
pub type dp_dtype_t = i32;
/// 32-bit IEEE float.
pub const DP_DTYPE_F32: dp_dtype_t = 1;
/// 64-bit IEEE float.
pub const DP_DTYPE_F64: dp_dtype_t = 2;
/// 32-bit signed integer.
pub const DP_DTYPE_I32: dp_dtype_t = 3;
/// 64-bit signed integer.
pub const DP_DTYPE_I64: dp_dtype_t = 4;
/// 8-bit unsigned integer.
pub const DP_DTYPE_U8: dp_dtype_t = 5;
/// Boolean, one byte per element holding 0 or 1.
pub const DP_DTYPE_BOOL: dp_dtype_t = 6;
/// IEEE 754 half precision (binary16), two bytes per element. The CPU device computes it in
/// f32, each result rounded once.
pub const DP_DTYPE_F16: dp_dtype_t = 7;
/// bfloat16 (the upper 16 bits of an f32), two bytes per element; computed as f16 is.
pub const DP_DTYPE_BF16: dp_dtype_t = 8;
/// The largest rank a tensor may have.
pub const DP_MAX_RANK: usize = 8;

pub(crate) fn dtype(v: dp_dtype_t, arg: &str) -> devplug_core::Result<DType> {
    DType::from_i32(v).ok_or_else(|| bad_arg(arg, &format!("is {v}, not a DP_DTYPE_* value")))
}

/// Bytes per element of `dtype`; 0 for an invalid dtype.
#[no_mangle]
pub extern "C" fn dp_dtype_size(dtype: dp_dtype_t) -> usize {
    guard_value("dp_dtype_size", 0, || {
        Ok(self::dtype(dtype, "dtype")?.size())
    })
}

/// The name of `dtype` (`"f32"`, …) as a static string; NULL for an invalid dtype.
#[no_mangle]
pub extern "C" fn dp_dtype_name(dtype: dp_dtype_t) -> *const c_char {
    guard_value("dp_dtype_name", std::ptr::null(), || {
        let name: &'static [u8] = match self::dtype(dtype, "dtype")? {
            DType::F32 => b"f32\0",
            DType::F64 => b"f64\0",
            DType::I32 => b"i32\0",
            DType::I64 => b"i64\0",
            DType::U8 => b"u8\0",
            DType::Bool => b"bool\0",
            DType::F16 => b"f16\0",
            DType::BF16 => b"bf16\0",
        };
        Ok(name.as_ptr().cast())
    })
}

#[doc(hidden)]
pub struct TensorObj {
    pub(crate) tensor: Tensor,
    pub(crate) device: DevicePtr,
}

handle!(
    /// A tensor, shared: [`dp_tensor_retain`] adds a reference, [`dp_tensor_release`] drops
    /// one.
    dp_tensor_t,
    TensorObj,
    0x6470_5453_0000_0006
);

#[inline]
pub(crate) unsafe fn tensor<'a>(
    t: *const dp_tensor_t,
    arg: &str,
) -> devplug_core::Result<&'a TensorObj> {
    // SAFETY: forwarded.
    unsafe { get(t, arg) }
}

pub(crate) unsafe fn shape<'a>(shape: *const i64, rank: usize) -> devplug_core::Result<&'a [i64]> {
    if rank > MAX_RANK {
        return Err(bad_arg(
            "rank",
            &format!("is {rank}, more than DP_MAX_RANK ({MAX_RANK})"),
        ));
    }
    if rank > 0 && shape.is_null() {
        return Err(bad_arg("shape", &format!("is NULL but the rank is {rank}")));
    }
    if rank == 0 {
        return Ok(&[]);
    }
    // SAFETY: non-NULL, and `rank` elements long by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(shape, rank) })
}

/// Creates a tensor on `device` of `dtype` and `shape[0..rank]` (row-major). With `data`, its
/// `data_size` bytes (which must equal the tensor's byte size) are copied in; with NULL data
/// (and `data_size` 0) the tensor holds zeros. `rank` may be 0 (a scalar); dimensions may be 0.
///
/// # Safety
/// `device` is a device handle; `shape` holds `rank` values; `data` is NULL or readable for
/// `data_size` bytes; `out_tensor` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_create(
    device: *mut dp_device_t,
    dtype: dp_dtype_t,
    shape: *const i64,
    rank: usize,
    data: *const c_void,
    data_size: usize,
    out_tensor: *mut *mut dp_tensor_t,
) -> dp_status_t {
    guard("dp_tensor_create", || {
        // SAFETY: the caller's contract.
        let d = unsafe { self::device(device, "device")? };
        let dt = self::dtype(dtype, "dtype")?;
        // SAFETY: the caller's contract.
        let sh = unsafe { self::shape(shape, rank)? };
        check_out(out_tensor, "out_tensor")?;
        let t = if data.is_null() {
            if data_size != 0 {
                return Err(bad_arg(
                    "data",
                    &format!("is NULL but data_size is {data_size}"),
                ));
            }
            Tensor::zeros(d, dt, sh)?
        } else {
            // SAFETY: the caller's contract.
            let bytes = unsafe { handle::bytes(data.cast(), data_size, "data")? };
            Tensor::from_bytes(d, dt, sh, bytes)?
        };
        let h = handle::new::<dp_tensor_t>(TensorObj {
            tensor: t,
            device: DevicePtr(device),
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_tensor, "out_tensor", h) }
    })
}

/// Adds a reference to a tensor.
///
/// # Safety
/// `tensor` is a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_retain(tensor: *mut dp_tensor_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_tensor_retain", || unsafe {
        handle::retain(tensor, "tensor")
    });
}

/// Drops a reference to a tensor. NULL is a no-op.
///
/// # Safety
/// `tensor` is NULL or a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_release(tensor: *mut dp_tensor_t) {
    // SAFETY: the caller's contract.
    guard_void("dp_tensor_release", || unsafe {
        handle::release(tensor, "tensor")
    });
}

/// The tensor's dtype; 0 for an invalid handle.
///
/// # Safety
/// `tensor` is a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_dtype(tensor: *const dp_tensor_t) -> dp_dtype_t {
    // SAFETY: the caller's contract.
    guard_value("dp_tensor_dtype", 0, || {
        Ok(unsafe { self::tensor(tensor, "tensor")? }.tensor.dtype() as i32)
    })
}

/// The tensor's rank; 0 for an invalid handle (check `dp_tensor_dtype` to tell).
///
/// # Safety
/// `tensor` is a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_rank(tensor: *const dp_tensor_t) -> usize {
    // SAFETY: the caller's contract.
    guard_value("dp_tensor_rank", 0, || {
        Ok(unsafe { self::tensor(tensor, "tensor")? }.tensor.rank())
    })
}

/// Writes the tensor's dimensions into `out_shape[0..rank]`; `capacity` must be at least the
/// rank (`DP_INVALID_ARGUMENT` otherwise). `out_shape` may be NULL for a scalar.
///
/// # Safety
/// `tensor` is a tensor handle; `out_shape` is writable for `capacity` values.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_shape(
    tensor: *const dp_tensor_t,
    out_shape: *mut i64,
    capacity: usize,
) -> dp_status_t {
    guard("dp_tensor_shape", || {
        // SAFETY: the caller's contract.
        let t = unsafe { self::tensor(tensor, "tensor")? };
        let shape = t.tensor.shape();
        if capacity < shape.len() {
            return Err(bad_arg(
                "capacity",
                &format!("is {capacity}, less than the tensor's rank {}", shape.len()),
            ));
        }
        if shape.is_empty() {
            return Ok(());
        }
        if out_shape.is_null() {
            return Err(bad_arg("out_shape", "is NULL"));
        }
        // SAFETY: non-NULL and writable for `capacity >= rank` values by the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(shape.as_ptr(), out_shape, shape.len()) };
        Ok(())
    })
}

/// The number of elements; -1 for an invalid handle.
///
/// # Safety
/// `tensor` is a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_num_elements(tensor: *const dp_tensor_t) -> i64 {
    // SAFETY: the caller's contract.
    guard_value("dp_tensor_num_elements", -1, || {
        Ok(unsafe { self::tensor(tensor, "tensor")? }
            .tensor
            .num_elements() as i64)
    })
}

/// The size of the tensor's contents in bytes; 0 for an invalid handle.
///
/// # Safety
/// `tensor` is a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_byte_size(tensor: *const dp_tensor_t) -> usize {
    // SAFETY: the caller's contract.
    guard_value("dp_tensor_byte_size", 0, || {
        Ok(unsafe { self::tensor(tensor, "tensor")? }
            .tensor
            .byte_size() as usize)
    })
}

/// The device the tensor lives on; NULL for an invalid handle, and NULL (the error says why)
/// once the device's runtime was destroyed: its device handles went with it, though the
/// tensor can still be read, copied and used as an input.
///
/// # Safety
/// `tensor` is a tensor handle.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_device(tensor: *const dp_tensor_t) -> *mut dp_device_t {
    // SAFETY: the caller's contract.
    guard_value("dp_tensor_device", std::ptr::null_mut(), || {
        let t = unsafe { self::tensor(tensor, "tensor")? };
        // SAFETY: a device handle this library made, kept by the tensor.
        unsafe {
            kept_device_handle(
                t.device,
                t.tensor.device(),
                "tensor",
                "read, copied and used as an input",
            )
        }
    })
}

/// Copies the tensor's contents into `dst`; `dst_size` must equal its byte size.
///
/// # Safety
/// `tensor` is a tensor handle; `dst` is writable for `dst_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_read(
    tensor: *const dp_tensor_t,
    dst: *mut c_void,
    dst_size: usize,
) -> dp_status_t {
    guard("dp_tensor_read", || {
        // SAFETY: the caller's contract.
        let t = unsafe { self::tensor(tensor, "tensor")? };
        if dst_size as u64 != t.tensor.byte_size() {
            return Err(bad_arg(
                "dst_size",
                &format!(
                    "is {dst_size}, but the tensor holds {} bytes",
                    t.tensor.byte_size()
                ),
            ));
        }
        // SAFETY: the caller's contract.
        let out = unsafe { handle::bytes_mut(dst.cast(), dst_size, "dst")? };
        t.tensor.read_bytes(out)
    })
}

/// Copies the tensor to `device`, writing the new tensor into `*out_tensor`.
///
/// # Safety
/// `tensor` and `device` are handles; `out_tensor` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_copy_to(
    tensor: *const dp_tensor_t,
    device: *mut dp_device_t,
    out_tensor: *mut *mut dp_tensor_t,
) -> dp_status_t {
    guard("dp_tensor_copy_to", || {
        // SAFETY: the caller's contract.
        let (t, d) = unsafe {
            (
                self::tensor(tensor, "tensor")?,
                self::device(device, "device")?,
            )
        };
        check_out(out_tensor, "out_tensor")?;
        let copy = t.tensor.copy_to(d)?;
        let h = handle::new::<dp_tensor_t>(TensorObj {
            tensor: copy,
            device: DevicePtr(device),
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_tensor, "out_tensor", h) }
    })
}

/// Writes the tensor's buffer, with a new reference the caller releases, into `*out_buffer`.
///
/// # Safety
/// `tensor` is a tensor handle; `out_buffer` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_buffer(
    tensor: *const dp_tensor_t,
    out_buffer: *mut *mut dp_buffer_t,
) -> dp_status_t {
    guard("dp_tensor_buffer", || {
        // SAFETY: the caller's contract.
        let t = unsafe { self::tensor(tensor, "tensor")? };
        check_out(out_buffer, "out_buffer")?;
        let h = handle::new::<dp_buffer_t>(BufferObj {
            buffer: t.tensor.buffer().clone(),
            device: t.device,
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_buffer, "out_buffer", h) }
    })
}

/// Makes a tensor of `dtype` and `shape[0..rank]` over `buffer`'s memory, from its start, and
/// writes it, with a reference the caller releases, into `*out_tensor`: no copy; the tensor
/// and the buffer share the memory (the tensor holds a reference to the buffer). The buffer
/// must hold at least the tensor's byte size (`DP_INVALID_ARGUMENT` otherwise); it may hold
/// more. The tensor lives on the buffer's device.
///
/// # Safety
/// `buffer` is a buffer handle; `shape` holds `rank` values; `out_tensor` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_from_buffer(
    buffer: *mut dp_buffer_t,
    dtype: dp_dtype_t,
    shape: *const i64,
    rank: usize,
    out_tensor: *mut *mut dp_tensor_t,
) -> dp_status_t {
    guard("dp_tensor_from_buffer", || {
        // SAFETY: the caller's contract.
        let b = unsafe { handle::get::<dp_buffer_t>(buffer, "buffer")? };
        let dt = self::dtype(dtype, "dtype")?;
        // SAFETY: the caller's contract.
        let sh = unsafe { self::shape(shape, rank)? };
        check_out(out_tensor, "out_tensor")?;
        let t = Tensor::from_buffer(b.buffer.clone(), dt, sh)?;
        let h = handle::new::<dp_tensor_t>(TensorObj {
            tensor: t,
            device: b.device,
        });
        // SAFETY: the caller's contract.
        unsafe { write_out(out_tensor, "out_tensor", h) }
    })
}

/// Writes the host address of the tensor's elements (its `dp_tensor_byte_size` bytes,
/// row-major) into `*out_data`, when its device's memory is host memory (the CPU device, a
/// plugin platform with `host_visible`): read and write the elements there, without a copy.
/// `DP_FAILED_PRECONDITION` for a device whose memory the host cannot touch (read such a
/// tensor with `dp_tensor_read`, or copy it to a CPU device first); nothing is written then.
///
/// The address stays valid while a reference to the tensor, or to its buffer, lives. What you
/// write changes the tensor for every holder: retained references, a graph that holds it as a
/// constant. An op's output on a device that runs its work on streams (a plugin's host-visible
/// device) may still be being written when `dp_op_run` returns: `dp_device_synchronize` first.
/// The CPU device's ops are done when they return.
///
/// # Safety
/// `tensor` is a tensor handle; `out_data` is writable.
#[no_mangle]
pub unsafe extern "C" fn dp_tensor_data(
    tensor: *const dp_tensor_t,
    out_data: *mut *mut c_void,
) -> dp_status_t {
    guard("dp_tensor_data", || {
        // SAFETY: the caller's contract.
        let t = unsafe { self::tensor(tensor, "tensor")? };
        check_out(out_data, "out_data")?;
        let ptr = t.tensor.host_ptr().ok_or_else(|| {
            devplug_core::Error::failed_precondition(format!(
                "the tensor is on {}, whose memory the host cannot touch: read it with \
                 dp_tensor_read, or copy it to a CPU device first",
                t.tensor.device().qualified_name()
            ))
        })?;
        // SAFETY: the caller's contract.
        unsafe { write_out(out_data, "out_data", ptr.cast::<c_void>()) }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn max_rank_matches_the_core() {
        assert_eq!(super::DP_MAX_RANK, super::MAX_RANK);
    }
}
