//! Opaque handles: how C pointers map to Rust objects, and how wrong, destroyed or NULL
//! handles are caught.
//!
//! Every handle is a heap object whose first field is a `magic` word naming its kind. A
//! handle of the wrong kind is caught by that word. A destroyed handle gets the `DEAD` word
//! and is kept allocated in a bounded quarantine (the most recent [`QUARANTINE`] handles
//! destroyed by each thread; per thread so that releasing a handle takes no lock), so using it
//! soon after is caught without reading freed memory; beyond that window (or after the
//! destroying thread exits) detection is best effort, as in the Vulkan loader. This is the
//! only module of the C API that turns raw pointers into references.

use std::alloc::Layout;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use devplug_core::Result;

use crate::status::bad_arg;

/// Handles kept allocated after destruction, per destroying thread.
pub(crate) const QUARANTINE: usize = 4096;

const DEAD: u64 = 0xdead_dead_dead_dead;

thread_local! {
    static BLOCKS: RefCell<Blocks> = const {
        RefCell::new(Blocks {
            quarantine: VecDeque::new(),
            spare: Vec::new(),
        })
    };
}

/// A block of handle memory whose value was dropped: what is left is an [`Object`] holding no
/// value, with the `DEAD` word, which needs no drop — only freeing with its layout.
type Block = (Layout, NonNull<u8>);

/// # Safety
/// `block` came from the global allocator with its layout, holds no live value, and is owned
/// by the caller alone.
unsafe fn free_block((layout, p): Block) {
    // SAFETY: the caller's contract.
    unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
}

/// This thread's dead handles' memory (one thread-local, so that destroying a handle and
/// making the next touch it once each).
struct Blocks {
    /// The quarantine: the most recent [`QUARANTINE`] handles destroyed, oldest first.
    quarantine: VecDeque<Block>,
    /// Memory of handles that left the quarantine, kept (at most [`SPARE_BLOCKS`]) for the
    /// next handle of the same layout, so that a handle made and released per op costs no
    /// `malloc`/`free`. Reusing it is what `free` + `malloc` would allow too: the block is no
    /// longer in the quarantine window either way.
    spare: Vec<Block>,
}

const SPARE_BLOCKS: usize = 64;

impl Drop for Blocks {
    fn drop(&mut self) {
        for b in self.quarantine.drain(..).chain(self.spare.drain(..)) {
            // SAFETY: these blocks are dead handles owned by this list alone.
            unsafe { free_block(b) };
        }
    }
}

/// Quarantines a dead handle's memory; the block leaving the quarantine is kept for reuse or
/// freed.
///
/// # Safety
/// As for [`free_block`].
unsafe fn bury(block: Block) {
    let evicted = BLOCKS.try_with(|blocks| {
        let mut blocks = blocks.borrow_mut();
        blocks.quarantine.push_back(block);
        if blocks.quarantine.len() <= QUARANTINE {
            return None;
        }
        let old = blocks.quarantine.pop_front()?;
        if blocks.spare.len() < SPARE_BLOCKS {
            blocks.spare.push(old);
            return None;
        }
        Some(old)
    });
    match evicted {
        Ok(None) => {}
        // SAFETY: evicted from the quarantine, which owned it, and not kept.
        Ok(Some(old)) => unsafe { free_block(old) },
        // During thread teardown the lists may be gone: the block is freed at once.
        // SAFETY: the caller's contract.
        Err(_) => unsafe { free_block(block) },
    }
}

/// A spare block of `layout`, if this thread has one.
#[inline]
fn take_spare(layout: Layout) -> Option<NonNull<u8>> {
    BLOCKS
        .try_with(|blocks| {
            let mut blocks = blocks.borrow_mut();
            let spare = &mut blocks.spare;
            // Most recent first (in a steady state, the last block has the layout asked for).
            let i = spare.iter().rposition(|(l, _)| *l == layout)?;
            Some(spare.swap_remove(i).1)
        })
        .ok()
        .flatten()
}

/// The kind names by magic word, for messages about handles of the wrong kind.
static KINDS: Mutex<Vec<(u64, &'static str)>> = Mutex::new(Vec::new());

fn kind_name(magic: u64) -> Option<&'static str> {
    KINDS
        .lock()
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, n)| *n)
}

/// The layout every handle shares: the magic word first.
#[repr(C)]
pub struct Object<T> {
    magic: AtomicU64,
    refs: AtomicUsize,
    value: Option<T>,
}

/// A handle kind: its magic word and its C name.
pub trait Kind: Sized + Send + 'static {
    const MAGIC: u64;
    const NAME: &'static str;
    type Value: Send + 'static;
    /// Whether the kind's name was added to the table of kind names.
    fn registered() -> &'static std::sync::atomic::AtomicBool;
    fn wrap(o: Object<Self::Value>) -> Self;
    fn object(&self) -> &Object<Self::Value>;
    fn object_mut(&mut self) -> &mut Object<Self::Value>;
}

/// Declares a C handle type `$name` holding a `$value`.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $value:ty, $magic:expr) => {
        $(#[$doc])*
        #[repr(C)]
        pub struct $name(crate::handle::Object<$value>);
        impl crate::handle::Kind for $name {
            const MAGIC: u64 = $magic;
            const NAME: &'static str = stringify!($name);
            type Value = $value;
            fn registered() -> &'static std::sync::atomic::AtomicBool {
                static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
                &REGISTERED
            }
            fn wrap(o: crate::handle::Object<$value>) -> Self {
                $name(o)
            }
            fn object(&self) -> &crate::handle::Object<$value> {
                &self.0
            }
            fn object_mut(&mut self) -> &mut crate::handle::Object<$value> {
                &mut self.0
            }
        }
    };
}
pub(crate) use handle;

/// Makes a new handle with one reference.
pub fn new<K: Kind>(value: K::Value) -> *mut K {
    if !K::registered().load(Ordering::Acquire) {
        let mut kinds = KINDS.lock();
        if !kinds.iter().any(|(m, _)| *m == K::MAGIC) {
            kinds.push((K::MAGIC, K::NAME));
        }
        K::registered().store(true, Ordering::Release);
    }
    let handle = K::wrap(Object {
        magic: AtomicU64::new(K::MAGIC),
        refs: AtomicUsize::new(1),
        value: Some(value),
    });
    match take_spare(Layout::new::<K>()) {
        Some(p) => {
            let p = p.as_ptr() as *mut K;
            // SAFETY: a block of exactly `K`'s layout from the global allocator, owned by no
            // one (see `Blocks`); blocks are freed with `K`'s layout, which `Box<K>` uses too.
            unsafe { p.write(handle) };
            p
        }
        None => Box::into_raw(Box::new(handle)),
    }
}

/// Checks `ptr` and returns the handle's value. `arg` names the argument in errors.
///
/// # Safety
/// `ptr` is NULL or points to memory at least 8 bytes long that devplug handed out as a
/// handle (of any kind), destroyed or not; the value is borrowed for as long as the caller
/// keeps the handle alive (the C API contract).
#[inline(always)]
pub unsafe fn get<'a, K: Kind>(ptr: *const K, arg: &str) -> Result<&'a K::Value> {
    // SAFETY: forwarded.
    let obj = unsafe { check::<K>(ptr, arg)? };
    obj.value
        .as_ref()
        .ok_or_else(|| bad_arg(arg, &format!("is a destroyed {}", K::NAME)))
}

/// The value of a live handle that no other code holds yet, for finishing its construction.
///
/// # Safety
/// `ptr` was just made by [`new`] and is not shared.
pub unsafe fn get_mut<'a, K: Kind>(ptr: *mut K) -> Result<&'a mut K::Value> {
    // SAFETY: forwarded: a fresh, unshared handle.
    let obj = unsafe { &mut *ptr }.object_mut();
    obj.value
        .as_mut()
        .ok_or_else(|| bad_arg("handle", &format!("is a destroyed {}", K::NAME)))
}

/// The value of a live handle, mutably, for handles the host changes in place (attribute
/// sets).
///
/// # Safety
/// As for [`get`]; besides, no other thread uses the handle while the reference lives.
pub unsafe fn get_mut_shared<'a, K: Kind>(ptr: *mut K, arg: &str) -> Result<&'a mut K::Value> {
    // SAFETY: forwarded: validates kind and liveness.
    unsafe { check::<K>(ptr, arg)? };
    // SAFETY: a live handle of kind K, used by this thread alone (the caller's contract).
    let obj = unsafe { &mut *ptr }.object_mut();
    obj.value
        .as_mut()
        .ok_or_else(|| bad_arg(arg, &format!("is a destroyed {}", K::NAME)))
}

/// Writes `value` (a versioned struct, `struct_size` first) into the caller's struct of
/// `struct_size` bytes: only that many bytes are written, so a program built against an older,
/// shorter struct is safe with a newer library; `struct_size` is set to the caller's size. NULL
/// or a size too small to hold `struct_size` is a no-op.
///
/// # Safety
/// `ptr` is NULL or writable for `struct_size` bytes; `T` is a plain C struct.
pub unsafe fn init_sized<T: Copy>(ptr: *mut T, value: T, struct_size: usize) {
    if ptr.is_null() || struct_size < std::mem::size_of::<usize>() {
        return;
    }
    let n = struct_size.min(std::mem::size_of::<T>());
    // SAFETY: the caller's struct holds `struct_size >= n` writable bytes; `value` is a plain
    // C struct of at least `n` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(&value as *const T as *const u8, ptr as *mut u8, n);
        (ptr as *mut usize).write(struct_size);
    }
}

/// # Safety
/// As for [`get`].
#[inline(always)]
unsafe fn check<'a, K: Kind>(ptr: *const K, arg: &str) -> Result<&'a Object<K::Value>> {
    if !ptr.is_null() && (ptr as usize).is_multiple_of(std::mem::align_of::<AtomicU64>()) {
        // SAFETY: every handle starts with the magic word (`Object` is `repr(C)`, and handles
        // are `repr(C)` wrappers of it); the caller guarantees the memory is a devplug handle.
        let magic = unsafe { &*(ptr as *const AtomicU64) }.load(Ordering::Acquire);
        if magic == K::MAGIC {
            // SAFETY: the magic word says this is a live `K`.
            return Ok(unsafe { &*ptr }.object());
        }
    }
    // SAFETY: forwarded.
    Err(unsafe { check_failed::<K>(ptr, arg) })
}

/// The error for a handle [`check`] refused (kept out of the inlined fast path).
///
/// # Safety
/// As for [`get`].
#[cold]
#[inline(never)]
unsafe fn check_failed<K: Kind>(ptr: *const K, arg: &str) -> devplug_core::Error {
    if ptr.is_null() {
        return bad_arg(arg, &format!("is NULL (expected a {})", K::NAME));
    }
    if !(ptr as usize).is_multiple_of(std::mem::align_of::<AtomicU64>()) {
        return bad_arg(arg, &format!("is not a valid {} handle", K::NAME));
    }
    // SAFETY: as in `check`.
    let magic = unsafe { &*(ptr as *const AtomicU64) }.load(Ordering::Acquire);
    if magic == DEAD {
        return bad_arg(arg, &format!("is a destroyed or released {}", K::NAME));
    }
    match kind_name(magic) {
        Some(other) => bad_arg(arg, &format!("is a {other}, not a {}", K::NAME)),
        None => bad_arg(arg, &format!("is not a valid {} handle", K::NAME)),
    }
}

/// Destroys a handle: drops its value and quarantines its memory. NULL is a no-op; an
/// invalid handle is an error and nothing is done.
///
/// # Safety
/// As for [`get`]; no other thread uses the handle concurrently.
pub unsafe fn destroy<K: Kind>(ptr: *mut K, arg: &str) -> Result<()> {
    if ptr.is_null() {
        return Ok(());
    }
    // SAFETY: forwarded; validates the kind and liveness before taking ownership.
    unsafe { check::<K>(ptr, arg)? };
    // SAFETY: `ptr` is a live handle made by `new::<K>` (a block of `K`'s layout from the
    // global allocator); the caller gives up its use. Its memory goes to the quarantine, not
    // back to the allocator.
    let obj = unsafe { &mut *ptr }.object_mut();
    obj.magic.store(DEAD, Ordering::Release);
    // Dropped in place (no move of the value out of the block).
    obj.value = None;
    // `K` is a `repr(C)` wrapper of an `Object` whose value is now `None`: nothing in it needs
    // dropping any more, so the block is kept and later freed by its layout alone.
    // SAFETY: a dead handle from the global allocator, owned here (see above).
    unsafe { bury((Layout::new::<K>(), NonNull::new_unchecked(ptr.cast::<u8>()))) };
    Ok(())
}

/// Adds a reference to a shared handle.
///
/// # Safety
/// As for [`get`].
pub unsafe fn retain<K: Kind>(ptr: *const K, arg: &str) -> Result<()> {
    // SAFETY: forwarded.
    let obj = unsafe { check::<K>(ptr, arg)? };
    obj.refs.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Drops a reference to a shared handle, destroying it with the last. NULL is a no-op.
///
/// # Safety
/// As for [`destroy`] when this is the last reference.
pub unsafe fn release<K: Kind>(ptr: *mut K, arg: &str) -> Result<()> {
    if ptr.is_null() {
        return Ok(());
    }
    // SAFETY: forwarded.
    let obj = unsafe { check::<K>(ptr, arg)? };
    // The last reference (the common case: an op's output released once) needs no atomic
    // read-modify-write: no other thread holds a reference it could retain or release
    // meanwhile, and `Acquire` orders the other threads' earlier releases before the destroy.
    if obj.refs.load(Ordering::Acquire) == 1 || obj.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        // SAFETY: that was the last reference.
        unsafe { destroy(ptr, arg) }
    } else {
        Ok(())
    }
}

/// Writes an out-parameter after checking it is not NULL.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub unsafe fn write_out<T>(out: *mut T, arg: &str, value: T) -> Result<()> {
    if out.is_null() {
        return Err(bad_arg(arg, "is NULL"));
    }
    // SAFETY: non-NULL, and valid by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// `DP_OUT_OF_RANGE` for `index` past the end of a list of `what`s, `how_many` saying how
/// long it is: `plugin index 3 is past the end: 2 loaded`.
pub fn past_the_end(what: &str, index: usize, how_many: String) -> devplug_core::Error {
    devplug_core::Error::out_of_range(format!("{what} index {index} is past the end: {how_many}"))
}

/// Checks an out-parameter before work is done, so that a NULL one fails early.
pub fn check_out<T>(out: *mut T, arg: &str) -> Result<()> {
    if out.is_null() {
        Err(bad_arg(arg, "is NULL"))
    } else {
        Ok(())
    }
}

/// A host memory range from C as a slice.
///
/// # Safety
/// `ptr` is NULL or valid for reads of `len` bytes for `'a`.
pub unsafe fn bytes<'a>(ptr: *const u8, len: usize, arg: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(bad_arg(arg, &format!("is NULL but the size is {len}")));
    }
    if isize::try_from(len).is_err() {
        return Err(bad_arg(arg, &format!("has an impossible size {len}")));
    }
    // SAFETY: non-NULL, valid by the caller's contract, size within isize.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A writable host memory range from C as a slice.
///
/// # Safety
/// `ptr` is NULL or valid for writes of `len` bytes for `'a`, and not aliased.
pub unsafe fn bytes_mut<'a>(ptr: *mut u8, len: usize, arg: &str) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if ptr.is_null() {
        return Err(bad_arg(arg, &format!("is NULL but the size is {len}")));
    }
    if isize::try_from(len).is_err() {
        return Err(bad_arg(arg, &format!("has an impossible size {len}")));
    }
    // SAFETY: non-NULL, valid and unaliased by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// `s` as a C string for the host to read: an interior NUL (which Rust strings may hold and C
/// strings cannot) is dropped rather than failing the call.
pub(crate) fn cstring(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s.replace('\0', "")).unwrap_or_default()
}

/// A NUL-terminated string from C.
///
/// # Safety
/// `ptr` is NULL or a NUL-terminated string.
pub unsafe fn c_str<'a>(ptr: *const std::ffi::c_char, arg: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(bad_arg(arg, "is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| bad_arg(arg, "is not valid UTF-8"))
}

/// Reads a caller's versioned struct (`struct_size` first): at least `min` bytes must be
/// declared; fields past what the caller declared keep their defaults.
///
/// # Safety
/// `ptr` is NULL or points to a struct whose first field is a `size_t` giving its size, valid
/// for reads of that many bytes.
#[inline]
pub unsafe fn read_sized<T: Copy>(ptr: *const T, default: T, min: usize, arg: &str) -> Result<T> {
    if ptr.is_null() {
        return Err(bad_arg(arg, "is NULL"));
    }
    // SAFETY: the first field is a size_t (the caller's contract).
    let declared = unsafe { *(ptr as *const usize) };
    if declared == std::mem::size_of::<T>() {
        // This header's struct (the common case): read whole, without a call to memcpy.
        // SAFETY: the caller's struct holds `size_of::<T>()` bytes; `T` is a plain C struct.
        return Ok(unsafe { ptr.read_unaligned() });
    }
    if declared < min {
        return Err(bad_arg(
            arg,
            &format!("has struct_size {declared}, smaller than the smallest supported size {min}"),
        ));
    }
    let n = declared.min(std::mem::size_of::<T>());
    let mut out = default;
    // SAFETY: both sides hold at least `n` bytes; `T` is a plain C struct.
    unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, &mut out as *mut T as *mut u8, n) };
    Ok(out)
}

/// The caller's optional options struct: its defaults when `ptr` is NULL, else as
/// [`read_sized`] reads it.
///
/// # Safety
/// As for [`read_sized`].
#[inline]
pub unsafe fn read_options<T: Copy + Default>(ptr: *const T, min: usize, arg: &str) -> Result<T> {
    if ptr.is_null() {
        return Ok(T::default());
    }
    // SAFETY: forwarded.
    unsafe { read_sized(ptr, T::default(), min, arg) }
}

/// Writes a versioned struct into the caller's, up to the size the caller declared (at least
/// `min`): a caller built against an older, shorter struct gets the fields it knows. The
/// caller's `struct_size` is left as it was.
///
/// # Safety
/// As for [`read_sized`], for writes.
pub unsafe fn write_sized<T: Copy>(ptr: *mut T, value: T, min: usize, arg: &str) -> Result<()> {
    if ptr.is_null() {
        return Err(bad_arg(arg, "is NULL"));
    }
    // SAFETY: the first field is a size_t (the caller's contract).
    let declared = unsafe { *(ptr as *const usize) };
    if declared < min {
        return Err(bad_arg(
            arg,
            &format!("has struct_size {declared}, smaller than the smallest supported size {min}"),
        ));
    }
    let n = declared.min(std::mem::size_of::<T>());
    let skip = std::mem::size_of::<usize>();
    // SAFETY: both sides hold at least `n` bytes; the caller's struct_size is not overwritten.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&value as *const T as *const u8).add(skip),
            (ptr as *mut u8).add(skip),
            n - skip,
        )
    };
    Ok(())
}
