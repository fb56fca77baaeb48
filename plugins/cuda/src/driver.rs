//! The CUDA driver API as the rest of the plugin uses it: the one module that calls into
//! `libcuda` (through cudarc's dynamically loaded bindings), so that every other module is safe
//! Rust over the handles and functions defined here.
//!
//! Every call needs the device's context current on the calling thread. [`Context::bind`] makes
//! it so and returns a [`Bound`] guard that the functions taking device memory or streams ask
//! for, so that "bound first" is checked by the compiler rather than by review.

use std::ffi::{c_void, CStr, CString};
use std::fmt;
use std::marker::PhantomData;
use std::ptr;
use std::sync::OnceLock;

use cudarc::driver::result::{self as cu, DriverError};
use cudarc::driver::sys;
use devplug_plugin_sdk::{Error, Status};

pub(crate) use sys::CUdevice_attribute as Attribute;

/// A failed driver call: which call, and the driver's code.
#[derive(Clone, Copy)]
pub(crate) struct CuError {
    call: &'static str,
    code: sys::CUresult,
}

impl CuError {
    fn new(call: &'static str, e: DriverError) -> CuError {
        CuError { call, code: e.0 }
    }

    /// Whether the driver said "not ready" (an event or stream still pending).
    pub(crate) fn is_not_ready(&self) -> bool {
        self.code == sys::CUresult::CUDA_ERROR_NOT_READY
    }

    /// The status the host sees for this code.
    fn status(&self) -> Status {
        use sys::CUresult as R;
        match self.code {
            R::CUDA_ERROR_OUT_OF_MEMORY => Status::ResourceExhausted,
            R::CUDA_ERROR_INVALID_VALUE | R::CUDA_ERROR_INVALID_DEVICE => Status::InvalidArgument,
            R::CUDA_ERROR_NOT_SUPPORTED => Status::Unimplemented,
            R::CUDA_ERROR_NO_DEVICE
            | R::CUDA_ERROR_NOT_INITIALIZED
            | R::CUDA_ERROR_DEINITIALIZED
            | R::CUDA_ERROR_DEVICE_UNAVAILABLE
            | R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => Status::Unavailable,
            _ => Status::Internal,
        }
    }
}

impl fmt::Display for CuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = DriverError(self.code);
        let name = e
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("CUresult {}", self.code as i32));
        match e.error_string() {
            Ok(s) => write!(f, "{}: {name} ({})", self.call, s.to_string_lossy()),
            Err(_) => write!(f, "{}: {name}", self.call),
        }
    }
}

impl From<CuError> for Error {
    fn from(e: CuError) -> Error {
        Error::new(e.status(), e.to_string())
    }
}

/// Driver results.
pub(crate) type CuResult<T> = std::result::Result<T, CuError>;

trait Call<T> {
    fn call(self, name: &'static str) -> CuResult<T>;
}

impl<T> Call<T> for std::result::Result<T, DriverError> {
    fn call(self, name: &'static str) -> CuResult<T> {
        self.map_err(|e| CuError::new(name, e))
    }
}

/// How many CUDA devices this process can use, or why none: the driver library is missing,
/// `cuInit` fails (no device, driver too old for these bindings' calls), …
pub(crate) fn probe() -> std::result::Result<i32, String> {
    // SAFETY: only asks whether the library can be opened.
    if !unsafe { sys::is_culib_present() } {
        return Err("the CUDA driver library (libcuda.so) was not found".to_owned());
    }
    let r = std::panic::catch_unwind(|| {
        cu::init().call("cuInit")?;
        cu::device::get_count().call("cuDeviceGetCount")
    });
    match r {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the CUDA driver library lacks an entry point this plugin calls".to_owned()),
    }
}

/// Whether `libnvrtc` (CUDA's run-time compiler) can be opened.
pub(crate) fn nvrtc_present() -> bool {
    // SAFETY: only asks whether the library can be opened.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Whether `libcublas` can be opened.
pub(crate) fn cublas_present() -> bool {
    // SAFETY: only asks whether the library can be opened.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

// ---------------------------------------------------------------------------------------------
// Contexts

/// A device's primary context, retained for the life of this value.
pub(crate) struct Context {
    device: sys::CUdevice,
    ctx: sys::CUcontext,
}

// SAFETY: a CUDA context may be made current on, and used from, any thread.
unsafe impl Send for Context {}
// SAFETY: as above; the driver synchronizes its own state.
unsafe impl Sync for Context {}

/// Proof that a context is current on this thread (not `Send`: it is about this thread).
pub(crate) struct Bound<'a> {
    _ctx: PhantomData<&'a Context>,
    _this_thread: PhantomData<*const ()>,
}

impl Context {
    /// Retains the primary context of device `ordinal`.
    pub(crate) fn new(ordinal: i32) -> CuResult<Context> {
        let device = cu::device::get(ordinal).call("cuDeviceGet")?;
        // SAFETY: a device handle the driver just gave.
        let ctx = unsafe { cu::primary_ctx::retain(device) }.call("cuDevicePrimaryCtxRetain")?;
        Ok(Context { device, ctx })
    }

    /// Makes the context current on this thread (a no-op when it is already).
    #[inline]
    pub(crate) fn bind(&self) -> CuResult<Bound<'_>> {
        let current = cu::ctx::get_current().call("cuCtxGetCurrent")?;
        if current != Some(self.ctx) {
            // SAFETY: a context retained by this value.
            unsafe { cu::ctx::set_current(self.ctx) }.call("cuCtxSetCurrent")?;
        }
        Ok(Bound {
            _ctx: PhantomData,
            _this_thread: PhantomData,
        })
    }

    /// The device's name.
    pub(crate) fn name(&self) -> CuResult<String> {
        cu::device::get_name(self.device).call("cuDeviceGetName")
    }

    /// Bytes of device memory.
    pub(crate) fn total_memory(&self) -> CuResult<u64> {
        // SAFETY: a valid device handle.
        unsafe { cu::device::total_mem(self.device) }
            .map(|n| n as u64)
            .call("cuDeviceTotalMem")
    }

    /// A device attribute.
    pub(crate) fn attribute(&self, attr: Attribute) -> CuResult<i32> {
        // SAFETY: a valid device handle.
        unsafe { cu::device::get_attribute(self.device, attr) }.call("cuDeviceGetAttribute")
    }

    /// The PCI bus id, `domain:bus:device.function`.
    pub(crate) fn pci_bus_id(&self) -> CuResult<String> {
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates within them.
        unsafe { sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, self.device) }
            .result()
            .call("cuDeviceGetPCIBusId")?;
        // SAFETY: NUL-terminated by the driver (checked above that it succeeded).
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// Free and total bytes of device memory.
    pub(crate) fn memory_info(&self, _: &Bound<'_>) -> CuResult<(u64, u64)> {
        cu::mem_get_info()
            .map(|(f, t)| (f as u64, t as u64))
            .call("cuMemGetInfo")
    }

    /// Waits for all work of the context.
    pub(crate) fn synchronize(&self, _: &Bound<'_>) -> CuResult<()> {
        cu::ctx::synchronize().call("cuCtxSynchronize")
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: retained in `new`, released once.
        let _ = unsafe { cu::primary_ctx::release(self.device) };
    }
}

// ---------------------------------------------------------------------------------------------
// Memory

/// Allocates `size` bytes of device memory.
pub(crate) fn alloc(_: &Bound<'_>, size: u64) -> CuResult<u64> {
    // SAFETY: the memory is only handed out as an address; nothing reads it here.
    unsafe { cu::malloc_sync(size as usize) }.call("cuMemAlloc")
}

/// Frees what [`alloc`] returned.
pub(crate) fn free(_: &Bound<'_>, addr: u64) -> CuResult<()> {
    // SAFETY: the caller passes an address `alloc` returned, once (the host's contract).
    unsafe { cu::free_sync(addr) }.call("cuMemFree")
}

/// Allocates `size` bytes of pinned host memory, usable from every context.
pub(crate) fn host_alloc(_: &Bound<'_>, size: u64) -> CuResult<ptr::NonNull<u8>> {
    // SAFETY: fresh memory, handed out as a pointer.
    let p = unsafe { cu::malloc_host(size as usize, sys::CU_MEMHOSTALLOC_PORTABLE) }
        .call("cuMemHostAlloc")?;
    ptr::NonNull::new(p.cast::<u8>()).ok_or(CuError {
        call: "cuMemHostAlloc",
        code: sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
    })
}

/// Frees what [`host_alloc`] returned.
pub(crate) fn host_free(_: &Bound<'_>, p: ptr::NonNull<u8>) -> CuResult<()> {
    // SAFETY: the caller passes a pointer `host_alloc` returned, once.
    unsafe { cu::free_host(p.as_ptr().cast()) }.call("cuMemFreeHost")
}

/// Allocates `size` bytes of managed (unified) memory.
pub(crate) fn managed_alloc(_: &Bound<'_>, size: u64) -> CuResult<ptr::NonNull<u8>> {
    // SAFETY: fresh memory, handed out as a pointer.
    let p =
        unsafe { cu::malloc_managed(size as usize, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL) }
            .call("cuMemAllocManaged")?;
    ptr::NonNull::new(p as usize as *mut u8).ok_or(CuError {
        call: "cuMemAllocManaged",
        code: sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY,
    })
}

/// Frees what [`managed_alloc`] returned.
pub(crate) fn managed_free(b: &Bound<'_>, p: ptr::NonNull<u8>) -> CuResult<()> {
    free(b, p.as_ptr() as usize as u64)
}

/// Whether `[p, p + len)` is page-locked host memory the driver knows (so that an
/// asynchronous copy can read or write it directly, in stream order).
pub(crate) fn is_pinned(_: &Bound<'_>, p: *const u8, len: usize) -> bool {
    let is_host = |addr: usize| {
        let mut kind: u32 = 0;
        // SAFETY: the driver writes one `CUmemorytype` (an unsigned int) for this attribute;
        // it only looks the address up and never dereferences it.
        let r = unsafe {
            sys::cuPointerGetAttribute(
                (&mut kind as *mut u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                addr as sys::CUdeviceptr,
            )
        };
        r == sys::CUresult::CUDA_SUCCESS && kind == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
    };
    len > 0 && is_host(p as usize) && is_host(p as usize + (len - 1))
}

// ---------------------------------------------------------------------------------------------
// Streams and events

/// A CUDA stream that does not synchronize with the legacy default stream.
pub(crate) struct Stream(sys::CUstream);

// SAFETY: a CUDA stream may be used from any thread.
unsafe impl Send for Stream {}
// SAFETY: as above; the driver serializes operations on a stream.
unsafe impl Sync for Stream {}

impl Stream {
    pub(crate) fn new(_: &Bound<'_>) -> CuResult<Stream> {
        cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map(Stream)
            .call("cuStreamCreate")
    }

    /// The raw handle (for cuBLAS).
    pub(crate) fn raw(&self) -> sys::CUstream {
        self.0
    }

    /// Blocks until the stream's work is done.
    pub(crate) fn synchronize(&self, _: &Bound<'_>) -> CuResult<()> {
        // SAFETY: a live stream of this value.
        unsafe { cu::stream::synchronize(self.0) }.call("cuStreamSynchronize")
    }

    /// Later work waits until `event` (as recorded now) is reached.
    pub(crate) fn wait(&self, _: &Bound<'_>, event: &Event) -> CuResult<()> {
        // SAFETY: live stream and event.
        unsafe {
            cu::stream::wait_event(
                self.0,
                event.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .call("cuStreamWaitEvent")
    }

    /// Enqueues `f(arg)` on the driver's host-function thread, in stream order. `f` must not
    /// call the CUDA API.
    ///
    /// # Safety
    /// `arg` must stay valid until `f` runs; `f` must not unwind and must not call CUDA.
    pub(crate) unsafe fn launch_host_fn(
        &self,
        _: &Bound<'_>,
        f: unsafe extern "C" fn(*mut c_void),
        arg: *mut c_void,
    ) -> CuResult<()> {
        // SAFETY: forwarded from the caller.
        unsafe { cu::stream::launch_host_function(self.0, f, arg) }.call("cuLaunchHostFunc")
    }

    /// Enqueues a copy of `len` bytes from host memory `src` to device address `dst`.
    ///
    /// # Safety
    /// `src` must stay valid for reads of `len` bytes until the stream has done the copy. (It
    /// should be page-locked: the driver copies pageable memory at once, out of stream order.)
    pub(crate) unsafe fn memcpy_htod(
        &self,
        _: &Bound<'_>,
        dst: u64,
        src: *const u8,
        len: usize,
    ) -> CuResult<()> {
        // SAFETY: forwarded from the caller.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, self.0) }
            .result()
            .call("cuMemcpyHtoDAsync")
    }

    /// Enqueues a copy of `len` bytes from device address `src` to host memory `dst`.
    ///
    /// # Safety
    /// `dst` must stay valid for writes of `len` bytes until the stream has done the copy. (It
    /// should be page-locked: for pageable memory the driver waits for the stream.)
    pub(crate) unsafe fn memcpy_dtoh(
        &self,
        _: &Bound<'_>,
        dst: *mut u8,
        src: u64,
        len: usize,
    ) -> CuResult<()> {
        // SAFETY: forwarded from the caller.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, self.0) }
            .result()
            .call("cuMemcpyDtoHAsync")
    }

    /// Enqueues a copy of `len` bytes between device addresses (the ranges must not overlap).
    pub(crate) fn memcpy_dtod(&self, _: &Bound<'_>, dst: u64, src: u64, len: u64) -> CuResult<()> {
        // SAFETY: device addresses are checked by the device (a bad one is a CUDA error, not
        // host memory corruption).
        unsafe { cu::memcpy_dtod_async(dst, src, len as usize, self.0) }.call("cuMemcpyDtoDAsync")
    }

    /// Enqueues setting `len` bytes at `dst` to `value`.
    pub(crate) fn memset(&self, _: &Bound<'_>, dst: u64, value: u8, len: u64) -> CuResult<()> {
        // SAFETY: as memcpy_dtod.
        unsafe { cu::memset_d8_async(dst, value, len as usize, self.0) }.call("cuMemsetD8Async")
    }

    /// Enqueues a device allocation of `len` bytes (stream-ordered allocator).
    pub(crate) fn alloc(&self, _: &Bound<'_>, len: u64) -> CuResult<u64> {
        // SAFETY: fresh memory, handed out as an address.
        unsafe { cu::malloc_async(self.0, len as usize) }.call("cuMemAllocAsync")
    }

    /// Enqueues freeing what [`Stream::alloc`] returned.
    pub(crate) fn free(&self, _: &Bound<'_>, addr: u64) -> CuResult<()> {
        // SAFETY: an address from `alloc`, freed once, after the work enqueued before.
        unsafe { cu::free_async(addr, self.0) }.call("cuMemFreeAsync")
    }

    /// Enqueues kernel `f` over `grid` blocks of `block` threads, with `args` as its
    /// parameters (in order; each a value of the parameter's type).
    pub(crate) fn launch(
        &self,
        _: &Bound<'_>,
        f: &Function,
        grid: u32,
        block: u32,
        args: &[&dyn Param],
    ) -> CuResult<()> {
        let mut params = [ptr::null_mut::<c_void>(); 8];
        if args.len() > params.len() {
            return Err(CuError {
                call: "cuLaunchKernel",
                code: sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            });
        }
        for (p, a) in params.iter_mut().zip(args) {
            *p = (*a as *const dyn Param).cast::<c_void>().cast_mut();
        }
        // SAFETY: each pointer addresses a live `Param` value (plain data laid out as the
        // kernel parameter; `args` outlives the call) and the driver only reads them, during
        // the call. A kernel touches device memory only, so arguments that do not match its
        // signature fault the device (an error of the stream), not the host.
        unsafe {
            cu::launch_kernel(
                f.0,
                (grid, 1, 1),
                (block, 1, 1),
                0,
                self.0,
                &mut params[..args.len()],
            )
        }
        .call("cuLaunchKernel")
    }
}

/// A kernel parameter: plain data (`#[repr(C)]` or a primitive) whose bytes are the parameter.
///
/// # Safety
/// Implementors hold no references and have exactly the layout of the CUDA parameter type they
/// are passed as.
pub(crate) unsafe trait Param {}

// SAFETY: primitives, the same layout in Rust and CUDA C++.
unsafe impl Param for i64 {}
// SAFETY: as above (device addresses are `u64`, CUDA pointers are 64-bit).
unsafe impl Param for u64 {}
// SAFETY: as above.
unsafe impl Param for u32 {}
// SAFETY: as above.
unsafe impl Param for u16 {}
// SAFETY: as above.
unsafe impl Param for u8 {}
// SAFETY: `#[repr(C)]` mirrors of `struct Geo` / `Walk` / `Red` in the CUDA sources, i64 and i32
// fields only.
unsafe impl Param for crate::kernels::plan::Geo {}
// SAFETY: as above.
unsafe impl Param for crate::kernels::plan::Walk {}
// SAFETY: as above.
unsafe impl Param for crate::kernels::plan::Red {}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once. The driver finishes its work first.
        let _ = unsafe { cu::stream::destroy(self.0) };
    }
}

/// A CUDA event: without timing ([`Event::new`], for the plugin's own ordering) or with it
/// ([`Event::timed`], the host's events).
pub(crate) struct Event(sys::CUevent);

// SAFETY: a CUDA event may be used from any thread.
unsafe impl Send for Event {}
// SAFETY: as above.
unsafe impl Sync for Event {}

impl Event {
    /// An event without timing (cheaper to record and wait for).
    pub(crate) fn new(_: &Bound<'_>) -> CuResult<Event> {
        cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map(Event)
            .call("cuEventCreate")
    }

    /// An event that records the device's time when its stream reaches it
    /// (`CU_EVENT_DEFAULT`), for [`Event::elapsed_ms`].
    pub(crate) fn timed(_: &Bound<'_>) -> CuResult<Event> {
        cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map(Event)
            .call("cuEventCreate")
    }

    /// Milliseconds of the device's time from `self` to `end` (`cuEventElapsedTime`): both
    /// timed, recorded and reached, else `CUDA_ERROR_INVALID_HANDLE` (never recorded, or
    /// without timing) or `CUDA_ERROR_NOT_READY` (pending).
    pub(crate) fn elapsed_ms(&self, _: &Bound<'_>, end: &Event) -> CuResult<f32> {
        const CALL: &str = "cuEventElapsedTime";
        let f = elapsed_time_fn().ok_or(CuError {
            call: CALL,
            code: sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
        })?;
        let mut ms = 0f32;
        // SAFETY: live events and a valid out-pointer; the function has this signature in
        // every driver that exports it.
        unsafe { f(&mut ms, self.0, end.0) }.result().call(CALL)?;
        Ok(ms)
    }

    /// Marks the current end of `stream`.
    pub(crate) fn record(&self, _: &Bound<'_>, stream: &Stream) -> CuResult<()> {
        // SAFETY: live event and stream.
        unsafe { cu::event::record(self.0, stream.0) }.call("cuEventRecord")
    }

    /// `Ok(true)` when reached (or never recorded), `Ok(false)` when pending.
    pub(crate) fn query(&self, _: &Bound<'_>) -> CuResult<bool> {
        // SAFETY: a live event.
        match unsafe { cu::event::query(self.0) }.call("cuEventQuery") {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_ready() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Blocks until the event is reached.
    pub(crate) fn synchronize(&self, _: &Bound<'_>) -> CuResult<()> {
        // SAFETY: a live event.
        unsafe { cu::event::synchronize(self.0) }.call("cuEventSynchronize")
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created in `new` or `timed`, destroyed once (the driver releases it once
        // reached).
        let _ = unsafe { cu::event::destroy(self.0) };
    }
}

type ElapsedTimeFn = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;

/// The driver's `cuEventElapsedTime_v2` (CUDA 12.8 and newer) or else `cuEventElapsedTime`
/// (every CUDA 12 driver), looked up once. Not cudarc's `event::elapsed`: its 13.0 bindings
/// call only `_v2`, which drivers before 12.8 lack (the plugin runs on every CUDA 12 driver).
/// CUDA documents the same rules for both, except that `_v2` need not report errors of earlier
/// work, which the caller asks `cuEventQuery` for anyway.
fn elapsed_time_fn() -> Option<ElapsedTimeFn> {
    static F: OnceLock<Option<ElapsedTimeFn>> = OnceLock::new();
    *F.get_or_init(|| {
        // SAFETY: only asks whether the library can be opened.
        if !unsafe { sys::is_culib_present() } {
            return None;
        }
        // SAFETY: the library opens (checked above, so this does not panic); only looks the
        // symbols up.
        let lib = unsafe { sys::culib() };
        [&b"cuEventElapsedTime_v2\0"[..], b"cuEventElapsedTime\0"]
            .into_iter()
            // SAFETY: both symbols have this signature (CUDA's cuda.h).
            .find_map(|name| unsafe { lib.get::<ElapsedTimeFn>(name) }.ok().map(|f| *f))
    })
}

/// Whether the driver can time events (it exports `cuEventElapsedTime`).
pub(crate) fn can_time_events() -> bool {
    elapsed_time_fn().is_some()
}

// ---------------------------------------------------------------------------------------------
// Modules and kernels

/// A loaded module (compiled kernels) of one context.
pub(crate) struct Module(sys::CUmodule);

// SAFETY: a module's functions may be launched from any thread.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

/// A kernel of a [`Module`]; valid while the module is loaded (the module owner keeps both).
#[derive(Clone, Copy)]
pub(crate) struct Function(sys::CUfunction);

// SAFETY: as Module.
unsafe impl Send for Function {}
// SAFETY: as Module.
unsafe impl Sync for Function {}

impl Module {
    /// Loads a compiled image (a CUBIN, or PTX that the driver compiles for the device) into the
    /// current context.
    pub(crate) fn load(_: &Bound<'_>, image: &crate::nvrtc::Image) -> CuResult<Module> {
        // SAFETY: a complete CUBIN or NUL-terminated PTX image that outlives the call.
        unsafe { cu::module::load_data(image.as_ptr()) }
            .map(Module)
            .call("cuModuleLoadData")
    }

    /// The kernel called `name`.
    pub(crate) fn function(&self, name: &str) -> CuResult<Function> {
        let name = CString::new(name).map_err(|_| CuError {
            call: "cuModuleGetFunction",
            code: sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        })?;
        // SAFETY: a loaded module and a NUL-terminated name.
        unsafe { cu::module::get_function(self.0, name) }
            .map(Function)
            .call("cuModuleGetFunction")
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded in `load`, unloaded once, after the owner's last launch finished
        // (the device synchronizes before it drops its modules).
        let _ = unsafe { cu::module::unload(self.0) };
    }
}
