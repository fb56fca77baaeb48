//! Stream-ordered reuse of device memory: what lets the host drop a tensor while the device's
//! default stream may still be working on it, without holding a reference per launch.
//!
//! Plugin kernels run on their device's default stream, asynchronously: when a launch returns,
//! the stream may not have reached it yet, and the host may already drop its inputs and
//! outputs. Their memory must not be reused by work the stream does not order after them, nor
//! handed back to the platform, until the stream got there. CUDA's caching allocators (the one
//! of PyTorch, `cudaMallocAsync`) solve this without bookkeeping per launch, and so does this:
//!
//! - every launch is counted **after** its enqueue ([`StreamOrder::launched`]) and marks the
//!   buffers it uses ([`Buffer::mark_stream_use`](crate::memory::Buffer));
//! - the count the stream has **reached** advances when the default stream is synchronized, and
//!   when a marker runs that the host enqueues every [`MARKER_EVERY`] launches while a free waits
//!   (a host callback: callbacks run in stream order; none while nothing waits, since a marker
//!   costs the launching thread about as much as a few launches on a plugin's stream);
//! - a marked buffer dropped while `reached < launched` waits for the count `launched` had then:
//!   its launches were all counted before the drop (the launching thread held it until then), and
//!   a marker or synchronize that reaches the count was enqueued after them;
//! - in the buffer pool it may be taken at once for a **kernel's output** on the same device: that
//!   kernel is enqueued on the same stream later, so the stream runs it after every earlier use
//!   (this is what makes an eager loop of small ops reuse one buffer instead of allocating);
//! - every other taker (raw allocations a host may hand to a user stream or copy into) takes pooled
//!   buffers only while the stream has reached every launch, and a marked buffer the pool does not
//!   keep is freed only once its count is reached ([`StreamOrder::defer`]): the free waits in a
//!   list that the next launch or synchronize empties.
//!
//! Why the count is taken after the enqueue: a marker enqueued by a thread whose own count is `n`
//! is then behind every launch counted `<= n`, on every thread (their enqueue happened before
//! their count, which happened before ours).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::memory::DevicePtr;

/// While a free waits, a marker is enqueued behind every this many launches. Memory the pool
/// cannot keep (large buffers) waits at most about this many launches past its last use before it
/// is freed; a marker (one host callback) costs a few launches, so this many make it cheap.
pub(crate) const MARKER_EVERY: u64 = 32;

/// The launch counts of one device's default stream, and the frees that wait for them.
pub(crate) struct StreamOrder {
    /// Launches counted so far (after each enqueue).
    launched: AtomicU64,
    /// The highest count the stream is known to have reached (markers hold a clone).
    reached: Arc<AtomicU64>,
    /// Frees that wait for a count, oldest (smallest count) first.
    deferred: Mutex<VecDeque<(u64, DevicePtr)>>,
    /// The count the oldest deferred free waits for, `u64::MAX` when none waits (read without the
    /// lock on every launch).
    oldest_deferred: AtomicU64,
}

impl Default for StreamOrder {
    fn default() -> StreamOrder {
        StreamOrder {
            launched: AtomicU64::new(0),
            reached: Arc::new(AtomicU64::new(0)),
            deferred: Mutex::new(VecDeque::new()),
            oldest_deferred: AtomicU64::new(u64::MAX),
        }
    }
}

impl StreamOrder {
    /// Counts one launch, after its enqueue succeeded; its count.
    #[inline]
    pub(crate) fn launched(&self) -> u64 {
        self.launched.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The count everything enqueued so far is covered by (taken before a synchronize, to
    /// [`reach`](Self::reach) once it returned).
    #[inline]
    pub(crate) fn current(&self) -> u64 {
        self.launched.load(Ordering::Acquire)
    }

    /// The count a marked buffer dropped now must wait for; `None` if the stream has reached
    /// every launch counted so far.
    #[inline]
    pub(crate) fn pending(&self) -> Option<u64> {
        let launched = self.launched.load(Ordering::Acquire);
        (self.reached.load(Ordering::Acquire) < launched).then_some(launched)
    }

    /// Notes that the stream has run everything counted up to `count`.
    pub(crate) fn reach(&self, count: u64) {
        self.reached.fetch_max(count, Ordering::AcqRel);
    }

    /// What a marker enqueued behind the launch counted `count` runs on the stream.
    pub(crate) fn marker(&self, count: u64) -> impl FnOnce() + Send + 'static {
        let reached = self.reached.clone();
        move || {
            reached.fetch_max(count, Ordering::AcqRel);
        }
    }

    /// Keeps `ptr` from being freed until the stream reached `count` (from [`pending`]).
    ///
    /// [`pending`]: Self::pending
    pub(crate) fn defer(&self, count: u64, ptr: DevicePtr) {
        let mut deferred = self.deferred.lock();
        // Counts only grow, so the list stays sorted; a thread that read its count earlier but
        // got here later is put in order.
        let at = deferred.partition_point(|&(c, _)| c <= count);
        deferred.insert(at, (count, ptr));
        self.oldest_deferred.store(
            deferred.front().map_or(u64::MAX, |e| e.0),
            Ordering::Release,
        );
    }

    /// True if some deferred free's count has been reached (cheap: two loads).
    #[inline]
    pub(crate) fn has_due(&self) -> bool {
        self.oldest_deferred.load(Ordering::Acquire) <= self.reached.load(Ordering::Acquire)
    }

    /// Takes the deferred frees whose count has been reached, for the caller to free.
    pub(crate) fn take_due(&self) -> Vec<DevicePtr> {
        let reached = self.reached.load(Ordering::Acquire);
        let mut deferred = self.deferred.lock();
        let due = deferred.partition_point(|&(c, _)| c <= reached);
        let out = deferred.drain(..due).map(|(_, p)| p).collect();
        self.oldest_deferred.store(
            deferred.front().map_or(u64::MAX, |e| e.0),
            Ordering::Release,
        );
        out
    }

    /// True if any free waits (for a synchronize before an allocation is allowed to fail).
    pub(crate) fn has_deferred(&self) -> bool {
        self.oldest_deferred.load(Ordering::Acquire) != u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::StreamOrder;
    use crate::memory::DevicePtr;

    #[test]
    fn frees_wait_for_the_count_they_were_deferred_at() {
        let o = StreamOrder::default();
        assert_eq!(o.pending(), None, "nothing launched");
        let a = o.launched();
        let b = o.launched();
        assert_eq!((a, b), (1, 2));
        assert_eq!(o.pending(), Some(2));
        o.defer(2, DevicePtr(0x20));
        o.defer(1, DevicePtr(0x10)); // a thread that read its count earlier
        assert!(!o.has_due());
        o.marker(1)();
        assert!(o.has_due());
        assert_eq!(o.take_due(), vec![DevicePtr(0x10)]);
        assert!(!o.has_due() && o.has_deferred());
        o.reach(o.current());
        assert_eq!(o.pending(), None);
        assert_eq!(o.take_due(), vec![DevicePtr(0x20)]);
        assert!(!o.has_deferred());
        o.reach(1); // an older marker running late changes nothing
        assert_eq!(o.pending(), None);
    }
}
