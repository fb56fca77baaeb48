//! Kernel states (plugin ABI 1.5): what a plugin kernel's `create` made for one device, one list
//! of input dtypes and one set of attributes, passed to every `compute` with them
//! (TensorFlow's kernel create/compute/delete, XLA FFI's instantiate).
//!
//! A device keeps the states of its kernels ([`KernelStates`]): at most [`STATES_PER_KERNEL`]
//! per kernel, the least recently used let go first. A state is destroyed in stream order:
//! when its last holder lets go (the device's list, or a launch that used it once compute
//! returned), the plugin's `destroy` is enqueued on the device's default stream, behind every
//! launch that may use it. States the device still keeps when it goes are destroyed after its
//! work is done and before the plugin destroys the device.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::device::Device;
use crate::op::{AttrValue, Attrs};
use crate::tensor::DType;

/// The most states a device keeps for one kernel (workloads whose attributes change on every
/// run, a `Slice` with moving bounds, would otherwise keep one per run).
pub(crate) const STATES_PER_KERNEL: usize = 64;

/// A plugin's `destroy` and what it is called with.
#[derive(Clone, Copy)]
pub(crate) struct Destroy {
    pub(crate) func: unsafe extern "C" fn(*mut c_void, *mut c_void),
    pub(crate) kernel_data: *mut c_void,
}

/// A state a plugin made, owned by the host until it calls the plugin's `destroy` on it.
pub(crate) struct State {
    ptr: *mut c_void,
    destroy: Option<Destroy>,
    /// Whose default stream orders the destroy (not kept alive by its states).
    device: Weak<Device>,
}
// SAFETY: the ABI lets the host pass states (and call `destroy`) on any thread.
unsafe impl Send for State {}
// SAFETY: as above; the host never dereferences the pointer.
unsafe impl Sync for State {}

/// A state and its `destroy`, moved to where it is destroyed: dropping it destroys the state,
/// so it is destroyed exactly once even when a host callback carrying it is dropped unrun.
struct Doomed(*mut c_void, Destroy);
// SAFETY: as for `State`.
unsafe impl Send for Doomed {}

impl Drop for Doomed {
    fn drop(&mut self) {
        // SAFETY: a state `create` made, destroyed once (its `State` was dropped once, and this
        // `Doomed` is dropped once), with the kernel's data; no lock of the host is held.
        unsafe { (self.1.func)(self.1.kernel_data, self.0) };
    }
}

impl State {
    pub(crate) fn new(ptr: *mut c_void, destroy: Option<Destroy>, device: &Arc<Device>) -> State {
        State {
            ptr,
            destroy,
            device: Arc::downgrade(device),
        }
    }

    pub(crate) fn ptr(&self) -> *mut c_void {
        self.ptr
    }
}

impl Drop for State {
    fn drop(&mut self) {
        let Some(d) = self.destroy else {
            return;
        };
        let doomed = Doomed(self.ptr, d);
        // A device going away (`release_all`) has done its work: destroy now.
        let Some(device) = self.device.upgrade() else {
            drop(doomed);
            return;
        };
        // Launches already enqueued may use it: destroy it once the stream reached them.
        let slot = Arc::new(Mutex::new(Some(doomed)));
        let queued = slot.clone();
        let enqueued = device
            .default_stream()
            .host_callback(move || drop(queued.lock().take()));
        if let Err(e) = enqueued {
            crate::log::warn(&format!(
                "{}: cannot destroy a kernel state in stream order ({e}); synchronizing first",
                device.name()
            ));
            let _ = device.synchronize();
            drop(slot.lock().take());
        }
    }
}

/// What a state is for.
#[derive(PartialEq)]
pub(crate) struct StateKey {
    /// The kernel (a number unique in the process).
    pub(crate) kernel: u64,
    pub(crate) dtypes: SmallVec<[DType; 4]>,
    pub(crate) attrs: Attrs,
}

impl StateKey {
    fn matches(&self, kernel: u64, dtypes: &[DType], attrs: &Attrs) -> bool {
        self.kernel == kernel && self.dtypes[..] == *dtypes && same_attrs(&self.attrs, attrs)
    }
}

/// Equal attribute sets, in whatever order their names were set. Floats compare by their bits:
/// a NaN attribute finds its state again, and `0.0` and `-0.0` (which a kernel may tell apart)
/// get one each.
fn same_attrs(a: &Attrs, b: &Attrs) -> bool {
    let same = |x: &AttrValue, y: &AttrValue| match (x, y) {
        (AttrValue::Float(x), AttrValue::Float(y)) => x.to_bits() == y.to_bits(),
        _ => x == y,
    };
    a.iter().count() == b.iter().count()
        && a.iter().all(|(n, v)| b.get(n).is_some_and(|w| same(v, w)))
}

struct Entry {
    key: StateKey,
    state: Arc<State>,
    last_use: u64,
}

/// The kernel states of one device.
#[derive(Default)]
pub(crate) struct KernelStates {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// By kernel: a launch compares attributes with its own kernel's states only.
    entries: HashMap<u64, Vec<Entry>>,
    /// Counts lookups, for least-recently-used order.
    clock: u64,
}

impl KernelStates {
    /// The state for `kernel` with these dtypes and attributes, if the device keeps one.
    pub(crate) fn find(&self, kernel: u64, dtypes: &[DType], attrs: &Attrs) -> Option<Arc<State>> {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        let e = inner
            .entries
            .get_mut(&kernel)?
            .iter_mut()
            .find(|e| e.key.matches(kernel, dtypes, attrs))?;
        e.last_use = now;
        Some(e.state.clone())
    }

    /// Keeps `state`, made for `key`, and returns the state to use: `state`, or one another
    /// thread kept for the same key meanwhile (then `state`, never used, is let go). When the
    /// kernel has [`STATES_PER_KERNEL`] states already, its least recently used one is let go
    /// (destroyed in stream order, see the module docs).
    pub(crate) fn keep(&self, key: StateKey, state: State) -> Arc<State> {
        let mut inner = self.inner.lock();
        inner.clock += 1;
        let now = inner.clock;
        let mine = inner.entries.entry(key.kernel).or_default();
        let (kept, unused) = if let Some(e) = mine
            .iter_mut()
            .find(|e| e.key.matches(key.kernel, &key.dtypes, &key.attrs))
        {
            e.last_use = now;
            (e.state.clone(), Some(Arc::new(state)))
        } else {
            let mut evicted = None;
            if mine.len() >= STATES_PER_KERNEL {
                let lru = mine
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.last_use)
                    .map(|(i, _)| i);
                evicted = lru.map(|i| mine.swap_remove(i).state);
            }
            let state = Arc::new(state);
            mine.push(Entry {
                key,
                state: state.clone(),
                last_use: now,
            });
            (state, evicted)
        };
        drop(inner);
        // Outside the lock: a last reference enqueues the plugin's `destroy`.
        drop(unused);
        kept
    }

    /// Lets every state go, from the device's drop (its work done, no launch left): the plugin
    /// destroys them now, before the device (their `Weak` to it no longer upgrades).
    pub(crate) fn release_all(&mut self) {
        drop(std::mem::take(&mut self.inner.get_mut().entries));
    }
}
