//! Buffers: reference-counted device memory, and the synchronous copies between buffers and
//! host memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::memory::{BufferPool, DevicePtr};
use crate::trace::{traced, SpanKind};

/// A block of one device's memory. Freed (back to the device's suballocator) when the last
/// reference goes; user streams hold references to the buffers their pending work uses, and
/// kernels on the default stream mark them for stream-ordered reuse (`memory::stream_order`).
pub struct Buffer {
    device: Arc<Device>,
    ptr: DevicePtr,
    size: u64,
    /// A kernel on the device's default stream used it (maybe still does): its memory is
    /// reused or freed in stream order.
    stream_use: AtomicBool,
}

impl Buffer {
    pub(crate) fn new(device: Arc<Device>, ptr: DevicePtr, size: u64) -> Buffer {
        Buffer {
            device,
            ptr,
            size,
            stream_use: AtomicBool::new(false),
        }
    }

    /// Notes that a kernel just enqueued on the default stream uses this buffer.
    #[inline]
    pub(crate) fn mark_stream_use(&self) {
        // A load first: the flag stays set across reuses, and a store each launch would make
        // the cache line dirty for nothing.
        if !self.stream_use.load(Ordering::Relaxed) {
            self.stream_use.store(true, Ordering::Relaxed);
        }
    }

    /// True if a kernel on the default stream used it since it was last handed out unmarked.
    #[inline]
    pub(crate) fn stream_used(&self) -> bool {
        self.stream_use.load(Ordering::Relaxed)
    }

    /// Hands out a pooled buffer whose stream uses are all over as unmarked.
    pub(crate) fn clear_stream_use(&self) {
        self.stream_use.store(false, Ordering::Relaxed);
    }

    /// The device whose memory this is.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Reuses a pooled buffer for a request of `size` bytes of the same size class.
    pub(crate) fn set_size(&mut self, size: u64) {
        self.size = size;
    }

    /// Lets go of a reference: the last reference to a small buffer goes back to its device's
    /// buffer pool (memory and object, for the next allocation of that size); any other is
    /// dropped as usual.
    #[inline]
    pub(crate) fn recycle(self: Arc<Self>) {
        let pool: *const BufferPool = self.device.buffer_pool();
        // SAFETY: the pool lives in the device, which `self` keeps alive while `put` holds it.
        // Once `put` stored `self` in a slot, a flush on another thread may drop it — and with
        // it perhaps the device and the pool — but `put` touches the pool no more after that
        // store (see `BufferPool`). A buffer `put` refuses comes back and is dropped here,
        // after the call.
        let refused = unsafe { &*pool }.put(self);
        drop(refused);
    }

    /// The device address. Only host-visible platforms' addresses may be dereferenced.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Checks that `[offset, offset + size)` lies inside the buffer; returns its address.
    pub fn range(&self, offset: u64, size: u64) -> Result<DevicePtr> {
        match offset.checked_add(size) {
            Some(end) if end <= self.size => Ok(self.ptr.offset(offset)),
            _ => Err(Error::out_of_range(format!(
                "range [{offset}, {offset} + {size}) lies outside a buffer of {} bytes on {}",
                self.size,
                self.device.name()
            ))),
        }
    }

    /// Copies host bytes into the buffer at `offset`, after the device's default stream.
    pub fn write(&self, offset: u64, src: &[u8]) -> Result<()> {
        let dst = self.range(offset, src.len() as u64)?;
        traced(
            &self.device,
            "write",
            SpanKind::Copy,
            src.len() as u64,
            || {
                self.device.synchronize_default_stream()?;
                // SAFETY: `src` is a live slice of exactly that many bytes.
                unsafe {
                    self.device
                        .executor()
                        .memcpy_htod(dst, src.as_ptr(), src.len() as u64)
                }
            },
        )
    }

    /// Copies buffer bytes at `offset` into `dst`, after the device's default stream.
    pub fn read(&self, offset: u64, dst: &mut [u8]) -> Result<()> {
        let src = self.range(offset, dst.len() as u64)?;
        let bytes = dst.len() as u64;
        traced(&self.device, "read", SpanKind::Copy, bytes, || {
            self.device.synchronize_default_stream()?;
            // SAFETY: `dst` is a live, exclusively borrowed slice of exactly that many bytes.
            unsafe {
                self.device
                    .executor()
                    .memcpy_dtoh(dst.as_mut_ptr(), src, dst.len() as u64)
            }
        })
    }

    /// Sets `size` bytes at `offset` to `value`.
    pub fn memset(&self, offset: u64, value: u8, size: u64) -> Result<()> {
        let dst = self.range(offset, size)?;
        self.device.synchronize_default_stream()?;
        self.device.executor().memset(dst, value, size)
    }

    /// Copies `size` bytes from `src` at `src_offset` into this buffer at `dst_offset`; the
    /// buffers may live on any devices (staged through host memory where neither platform
    /// can reach the other).
    pub fn copy_from(
        &self,
        dst_offset: u64,
        src: &Buffer,
        src_offset: u64,
        size: u64,
    ) -> Result<()> {
        let d = self.range(dst_offset, size)?;
        let s = src.range(src_offset, size)?;
        traced(&self.device, "copy", SpanKind::Copy, size, || {
            self.device.synchronize_default_stream()?;
            if !Arc::ptr_eq(&self.device, &src.device) {
                src.device.synchronize_default_stream()?;
            }
            copy_between(&self.device, d, &src.device, s, size)
        })
    }
}

/// Copies device memory between any two devices, synchronously.
pub(crate) fn copy_between(
    dst_dev: &Arc<Device>,
    dst: DevicePtr,
    src_dev: &Arc<Device>,
    src: DevicePtr,
    size: u64,
) -> Result<()> {
    if size == 0 {
        return Ok(());
    }
    if Arc::ptr_eq(dst_dev, src_dev) {
        return dst_dev.executor().memcpy_dtod(dst, src, size);
    }
    if src_dev.host_visible() {
        // SAFETY: a host-visible platform's device addresses are host addresses; the range
        // was checked against a live buffer.
        return unsafe {
            dst_dev
                .executor()
                .memcpy_htod(dst, src.0 as *const u8, size)
        };
    }
    if dst_dev.host_visible() {
        // SAFETY: as above, for the destination.
        return unsafe { src_dev.executor().memcpy_dtoh(dst.0 as *mut u8, src, size) };
    }
    let len = usize::try_from(size).map_err(|_| {
        Error::resource_exhausted(format!("cannot stage {size} bytes in host memory"))
    })?;
    let mut staging = vec![0u8; len];
    // SAFETY: `staging` is a live vector of `size` bytes, used only by these two calls.
    unsafe {
        src_dev
            .executor()
            .memcpy_dtoh(staging.as_mut_ptr(), src, size)?;
        dst_dev.executor().memcpy_htod(dst, staging.as_ptr(), size)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if *self.stream_use.get_mut() {
            self.device.free_in_stream_order(self.ptr);
        } else {
            self.device.free(self.ptr);
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} bytes on {})", self.size, self.device.name())
    }
}
