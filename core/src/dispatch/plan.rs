//! Plans: what dispatch does for one (op, device, dtype), and the per-runtime cache of them.
//!
//! The cache is read on every eager op, so its hit path takes no lock and touches no shared
//! counter: a direct-mapped table of pointers to immutable entries, each tagged with its key
//! and the kernel registry's generation. An entry, once published, is never freed or changed
//! while the cache lives (a newer one may take its slot; the old one stays owned by the
//! cache), so a reader may use what it loaded for as long as it borrows the cache. Entries are
//! added only when a plan is computed: at most one per slot and registry generation, so memory
//! stays bounded by the table size times the (rare) kernel registrations. Keys that collide
//! with a current entry go to a locked overflow map.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::kernel::KernelDef;

/// What to do for one (op, device, dtype).
#[derive(Clone, Debug)]
pub(crate) enum Plan {
    Native(Arc<KernelDef>),
    Decompose,
    /// No kernel and no decomposition on the device; this CPU kernel could run it.
    SoftPlace(Arc<KernelDef>),
    Missing,
}

/// Slots of the lock-free table (a power of two).
const SLOTS: usize = 512;

struct Entry {
    key: u64,
    generation: u64,
    plan: Plan,
}

/// An entry the cache owns.
struct Owned(*mut Entry);
// SAFETY: entries are immutable after publication, and `Plan` is `Send + Sync`.
unsafe impl Send for Owned {}

/// Off the hot path (keys that collide in the table), so the standard hasher does.
type Overflow = HashMap<u64, Plan>;

/// The per-runtime cache of plans.
pub(crate) struct Plans {
    slots: Box<[AtomicPtr<Entry>]>,
    /// Every entry ever published, from `Box::into_raw` (what the slots point to stays alive
    /// until the cache goes; freed in `drop`).
    owned: Mutex<Vec<Owned>>,
    /// Plans whose slot a current entry of another key holds, with the generation they are of.
    overflow: RwLock<(u64, Overflow)>,
}

impl Default for Plans {
    fn default() -> Plans {
        Plans {
            slots: (0..SLOTS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            owned: Mutex::new(Vec::new()),
            overflow: RwLock::new((0, Overflow::default())),
        }
    }
}

fn slot_of(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (SLOTS - 1)
}

impl Plans {
    /// The plan for `key` under registry `generation`, computed with `compute` and cached on a
    /// miss. On a hit nothing is locked, no reference count changes and nothing is copied:
    /// the plan is borrowed from the cache (returned rather than handed to a continuation, so
    /// that no closure stands between the caller and the plan).
    #[inline]
    pub(crate) fn get(
        &self,
        key: u64,
        generation: u64,
        compute: impl FnOnce() -> Plan,
    ) -> Cow<'_, Plan> {
        let p = self.slots[slot_of(key)].load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: non-null slot pointers come from `owned`, whose entries are neither
            // freed nor changed while `self` is borrowed (see the module docs); `Acquire`
            // pairs with the `Release` store that published the entry.
            let e = unsafe { &*p };
            if e.key == key && e.generation == generation {
                return Cow::Borrowed(&e.plan);
            }
        }
        Cow::Owned(self.miss(key, generation, compute))
    }

    /// The plan of a key the table does not hold (a copy: running a plan may dispatch, in a
    /// decomposition, and miss again; nothing stays locked meanwhile).
    #[cold]
    fn miss(&self, key: u64, generation: u64, compute: impl FnOnce() -> Plan) -> Plan {
        {
            let o = self.overflow.read();
            if o.0 == generation {
                if let Some(p) = o.1.get(&key) {
                    return p.clone();
                }
            }
        }
        let plan = compute();
        let slot = &self.slots[slot_of(key)];
        let mut owned = self.owned.lock();
        let cur = slot.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        let taken = !cur.is_null() && unsafe { (*cur).generation } == generation;
        if taken {
            // Another key of this generation holds the slot: keep this one aside.
            drop(owned);
            let mut o = self.overflow.write();
            if o.0 != generation {
                *o = (generation, Overflow::default());
            }
            o.1.insert(key, plan.clone());
        } else {
            let ptr = Box::into_raw(Box::new(Entry {
                key,
                generation,
                plan: plan.clone(),
            }));
            owned.push(Owned(ptr));
            slot.store(ptr, Ordering::Release);
        }
        plan
    }
}

impl Drop for Plans {
    fn drop(&mut self) {
        for Owned(p) in self.owned.get_mut().drain(..) {
            // SAFETY: from `Box::into_raw`, freed once, here; no reader is left (`&mut self`).
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn missing_count(plans: &Plans, key: u64, generation: u64) -> (bool, usize) {
        let mut computed = false;
        let plan = plans.get(key, generation, || {
            computed = true;
            Plan::Missing
        });
        (computed, usize::from(matches!(*plan, Plan::Missing)))
    }

    #[test]
    fn plans_are_computed_once_per_key_and_generation() {
        let plans = Plans::default();
        assert_eq!(missing_count(&plans, 7, 1), (true, 1));
        assert_eq!(missing_count(&plans, 7, 1), (false, 1));
        // A new registry generation recomputes.
        assert_eq!(missing_count(&plans, 7, 2), (true, 1));
        assert_eq!(missing_count(&plans, 7, 2), (false, 1));
    }

    #[test]
    fn colliding_keys_are_kept_in_the_overflow_map() {
        let plans = Plans::default();
        // Far more keys than slots: most collide, and every one is still cached.
        let keys: Vec<u64> = (0..(4 * SLOTS as u64)).map(|i| i << 8).collect();
        for &k in &keys {
            assert!(missing_count(&plans, k, 1).0);
        }
        for &k in &keys {
            assert!(!missing_count(&plans, k, 1).0, "key {k} was not cached");
        }
        // Entries are bounded by the slots, whatever the number of keys.
        assert!(plans.owned.lock().len() <= SLOTS);
    }
}
