//! Stream-ordered copies between the device and ordinary (pageable) host memory.
//!
//! The driver copies pageable memory at once (host to device) or synchronously (device to
//! host), not in stream order, which the plugin ABI asks for. So such a copy goes through a
//! page-locked staging buffer, and the host halves run as host functions in stream order:
//! - host to device: [fill the staging buffer from the host's memory] → DMA to the device →
//!   [return the buffer to the pool];
//! - device to host: DMA into the staging buffer → [copy it into the host's memory and return
//!   the buffer].
//!
//! The bracketed steps are host functions on the driver's thread; they only copy bytes and
//! touch the pool's lock, never the CUDA API. Buffers come from a pool per device (page-locked
//! allocation costs far more than a copy), which keeps at most [`POOL_BYTES`] idle.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

use devplug_plugin_sdk::{HostBuf, HostBufMut, Result};
use parking_lot::Mutex;

use crate::driver::{self, Bound, Context, CuResult, Stream};

/// Idle staging bytes the pool keeps; beyond it, returned buffers are freed.
pub const POOL_BYTES: usize = 64 << 20;
/// The smallest staging buffer (small copies share sizes).
const MIN_BUFFER: usize = 64 << 10;

/// A page-locked buffer.
struct Pinned {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: plain memory, owned by one holder at a time.
unsafe impl Send for Pinned {}

#[derive(Default)]
struct Lists {
    idle: Vec<Pinned>,
    idle_bytes: usize,
    /// Returned while the pool was full: freed by the next caller on an ordinary thread (host
    /// functions may not call CUDA, and a callback thread may not free: its stream is blocked).
    excess: Vec<Pinned>,
}

/// The staging buffers of one device.
pub(crate) struct StagingPool {
    ctx: Arc<Context>,
    lists: Mutex<Lists>,
}

impl StagingPool {
    pub(crate) fn new(ctx: Arc<Context>) -> StagingPool {
        StagingPool {
            ctx,
            lists: Mutex::new(Lists::default()),
        }
    }

    /// A buffer of at least `len` bytes.
    fn take(&self, b: &Bound<'_>, len: usize) -> CuResult<Pinned> {
        let excess = {
            let mut l = self.lists.lock();
            let best = l
                .idle
                .iter()
                .enumerate()
                .filter(|(_, p)| p.size >= len)
                .min_by_key(|(_, p)| p.size)
                .map(|(i, _)| i);
            if let Some(i) = best {
                let p = l.idle.swap_remove(i);
                l.idle_bytes -= p.size;
                return Ok(p);
            }
            if crate::callbacks::on_callback_thread() {
                Vec::new()
            } else {
                std::mem::take(&mut l.excess)
            }
        };
        for p in excess {
            let _ = driver::host_free(b, p.ptr);
        }
        let size = len.max(MIN_BUFFER).next_power_of_two();
        Ok(Pinned {
            ptr: driver::host_alloc(b, size as u64)?,
            size,
        })
    }

    /// Takes `p` back (callable from a host function: no CUDA call).
    fn give(&self, p: Pinned) {
        let mut l = self.lists.lock();
        if l.idle_bytes + p.size <= POOL_BYTES {
            l.idle_bytes += p.size;
            l.idle.push(p);
        } else {
            l.excess.push(p);
        }
    }

    /// Enqueues a copy of `src` (pageable host memory) to device address `dst` on `stream`.
    pub(crate) fn htod(
        self: &Arc<Self>,
        b: &Bound<'_>,
        stream: &Stream,
        dst: u64,
        src: HostBuf,
    ) -> Result<()> {
        let len = src.len();
        let buf = self.take(b, len)?;
        let staging = buf.ptr;
        let fill = Arc::new(Fill {
            state: Mutex::new(Some(src)),
            staging,
        });
        // Step 1: fill the buffer when the stream gets there.
        let arg = Arc::into_raw(Arc::clone(&fill)) as *mut c_void;
        // SAFETY: `fill_staging` takes back this reference once, copies bytes and calls no
        // CUDA function.
        if let Err(e) = unsafe { stream.launch_host_fn(b, fill_staging, arg) } {
            // SAFETY: refused, so never run: the reference is ours again.
            drop(unsafe { Arc::from_raw(arg as *const Fill) });
            self.give(buf);
            return Err(e.into());
        }
        // Steps 2 and 3: the DMA, then the buffer goes back to the pool.
        // SAFETY: the staging buffer is page-locked and stays allocated until `release_staging`
        // runs after the copy in stream order.
        let rest = match unsafe { stream.memcpy_htod(b, dst, staging.as_ptr(), len) } {
            // No DMA was enqueued: the buffer can go back at once (step 1 writes nothing once
            // its state is taken below).
            Err(e) => Err((e, Some(buf))),
            // `release_after` keeps the buffer whatever happens.
            Ok(()) => self.release_after(b, stream, buf).map_err(|e| (e, None)),
        };
        if let Err((e, buf)) = rest {
            // Step 1 must not read the host's memory once this call has failed (the host may
            // free it): take it away, waiting for a fill already running.
            fill.state.lock().take();
            if let Some(buf) = buf {
                self.give(buf);
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Enqueues a copy of `len` bytes from device address `src` into `dst` (pageable host
    /// memory) on `stream`.
    pub(crate) fn dtoh(
        self: &Arc<Self>,
        b: &Bound<'_>,
        stream: &Stream,
        dst: HostBufMut,
        src: u64,
    ) -> Result<()> {
        let len = dst.len();
        let buf = self.take(b, len)?;
        let staging = buf.ptr;
        // SAFETY: page-locked, kept until `drain_staging` has run (or the stream is idle).
        if let Err(e) = unsafe { stream.memcpy_dtoh(b, staging.as_ptr(), src, len) } {
            self.give(buf);
            return Err(e.into());
        }
        let drain = Box::into_raw(Box::new(Drain {
            dst,
            buf: Some(buf),
            pool: Arc::clone(self),
        }));
        // SAFETY: `drain_staging` takes back the box once, copies bytes and calls no CUDA
        // function.
        if let Err(e) = unsafe { stream.launch_host_fn(b, drain_staging, drain.cast()) } {
            // SAFETY: refused, so never run: the box is ours again.
            let mut d = unsafe { Box::from_raw(drain) };
            // The DMA into the buffer may still be pending.
            let _ = stream.synchronize(b);
            if let Some(buf) = d.buf.take() {
                self.give(buf);
            }
            return Err(e.into());
        }
        Ok(())
    }

    /// Enqueues returning `buf` to the pool once the stream has passed this point.
    fn release_after(
        self: &Arc<Self>,
        b: &Bound<'_>,
        stream: &Stream,
        buf: Pinned,
    ) -> CuResult<()> {
        let release = Box::into_raw(Box::new(Release {
            buf,
            pool: Arc::clone(self),
        }));
        // SAFETY: `release_staging` takes back the box once and calls no CUDA function.
        let r = unsafe { stream.launch_host_fn(b, release_staging, release.cast()) };
        if r.is_err() {
            // SAFETY: refused, so never run: the box is ours again. The DMA may still read
            // the buffer: wait for the stream before reusing it.
            let rel = unsafe { Box::from_raw(release) };
            let _ = stream.synchronize(b);
            self.give(rel.buf);
        }
        r
    }
}

impl Drop for StagingPool {
    fn drop(&mut self) {
        let l = std::mem::take(&mut *self.lists.lock());
        if let Ok(b) = self.ctx.bind() {
            for p in l.idle.into_iter().chain(l.excess) {
                let _ = driver::host_free(&b, p.ptr);
            }
        }
    }
}

/// Step 1 of a host-to-device copy. `state` is taken by whoever comes first: the stream (to
/// copy) or a failing enqueue (so that the stream copies nothing).
struct Fill {
    state: Mutex<Option<HostBuf>>,
    staging: NonNull<u8>,
}

// SAFETY: the staging pointer is page-locked memory owned by the copy in flight.
unsafe impl Send for Fill {}
// SAFETY: as above; the host buffer is behind the mutex.
unsafe impl Sync for Fill {}

unsafe extern "C" fn fill_staging(arg: *mut c_void) {
    // SAFETY: the reference leaked by `htod`, handed to this function once.
    let fill = unsafe { Arc::from_raw(arg as *const Fill) };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let guard = fill.state.lock();
        if let Some(src) = guard.as_ref() {
            // SAFETY: the stream is executing this copy, and `htod` succeeded (else it would
            // have taken `src` first, under this lock); the staging buffer holds `len` bytes
            // and is used by nothing else until it is released after the DMA.
            unsafe {
                let bytes = src.as_slice();
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), fill.staging.as_ptr(), bytes.len());
            }
        }
    }));
}

/// The last step of a host-to-device copy.
struct Release {
    buf: Pinned,
    pool: Arc<StagingPool>,
}

unsafe extern "C" fn release_staging(arg: *mut c_void) {
    // SAFETY: the box leaked by `release_after`, handed to this function once.
    let r = unsafe { Box::from_raw(arg.cast::<Release>()) };
    let _ = catch_unwind(AssertUnwindSafe(move || {
        let Release { buf, pool } = *r;
        pool.give(buf);
    }));
}

/// The last step of a device-to-host copy.
struct Drain {
    dst: HostBufMut,
    buf: Option<Pinned>,
    pool: Arc<StagingPool>,
}

unsafe extern "C" fn drain_staging(arg: *mut c_void) {
    // SAFETY: the box leaked by `dtoh`, handed to this function once.
    let mut d = unsafe { Box::from_raw(arg.cast::<Drain>()) };
    let _ = catch_unwind(AssertUnwindSafe(move || {
        if let Some(buf) = d.buf.take() {
            // SAFETY: the stream has done the DMA into the buffer (stream order) and is
            // executing this copy; `dtoh` succeeded; the buffer holds at least `len` bytes.
            unsafe {
                let out = d.dst.as_mut_slice();
                std::ptr::copy_nonoverlapping(buf.ptr.as_ptr(), out.as_mut_ptr(), out.len());
            }
            d.pool.give(buf);
        }
    }));
}
