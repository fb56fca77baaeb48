//! Kernels as their device ran them: while a trace is on, a kernel launched on an
//! asynchronous device whose platform times events (the CPU's created streams, SIM, CUDA;
//! ABI 1.4's `event_elapsed_ns`) is bracketed by two events on the device's default stream.
//! When the trace stops, the device's clock says when the stream reached each of them; those
//! times are placed on the host's timeline through one more event per device (an *anchor*),
//! recorded at the stop and waited for: the host reads the clock when the wait returns, which
//! is when the device reached the anchor, give or take a wake-up. The spans land on a track of
//! their own per device.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{SpanKind, TraceEvent};
use crate::device::Device;
use crate::placement::Reason;
use crate::stream::Event;

/// The event recorded before a kernel's launch, on a device whose kernel spans are timed.
pub(crate) struct DeviceSpanStart(Event);

impl DeviceSpanStart {
    /// Records the start of a kernel on `device`'s default stream; `None` when the device's
    /// kernels run inline (their host span is the kernel) or its events are not timed, or the
    /// event could not be made.
    pub(crate) fn begin(device: &Arc<Device>) -> Option<DeviceSpanStart> {
        if device.default_stream_is_inline() || !device.executor().times_events() {
            return None;
        }
        let e = device.create_event().ok()?;
        e.record(&device.default_stream()).ok()?;
        Some(DeviceSpanStart(e))
    }

    /// Records the end of the kernel, after its launch.
    pub(crate) fn end(self, span: DeviceSpanInfo) -> Option<PendingDeviceSpan> {
        let device = self.0.device().clone();
        let end = device.create_event().ok()?;
        end.record(&device.default_stream()).ok()?;
        Some(PendingDeviceSpan {
            start: self.0,
            end,
            info: span,
        })
    }
}

/// What a device span says besides its times (as the host span of the same kernel).
pub(crate) struct DeviceSpanInfo {
    pub name: String,
    pub device: String,
    pub reason: Option<Reason>,
    pub kernel_source: String,
    pub depth: u32,
}

/// A kernel's two events, waiting for the trace to stop.
pub(crate) struct PendingDeviceSpan {
    start: Event,
    end: Event,
    info: DeviceSpanInfo,
}

/// The device spans of `pending`, on the timeline that began at `epoch`; and how many could
/// not be timed (a stream that failed before reaching an event, a device that failed to say).
/// Waits for each device's default stream.
pub(super) fn resolve(pending: Vec<PendingDeviceSpan>, epoch: Instant) -> (Vec<TraceEvent>, u64) {
    let mut events = Vec::with_capacity(pending.len());
    let mut untimed = 0u64;
    let mut rest = pending;
    while let Some(first) = rest.first() {
        let device = first.start.device().clone();
        let (mine, others): (Vec<_>, Vec<_>) = rest
            .into_iter()
            .partition(|p| Arc::ptr_eq(p.start.device(), &device));
        rest = others;
        let Some((anchor, anchor_at)) = anchor(&device) else {
            untimed += mine.len() as u64;
            continue;
        };
        for p in mine {
            // Nanoseconds from each event to the anchor, which the stream reached after both.
            let times = p
                .start
                .elapsed_ns(&anchor)
                .and_then(|s| Ok((s, p.end.elapsed_ns(&anchor)?)));
            match times {
                Ok((before_start, before_end)) if before_start >= before_end && before_end >= 0 => {
                    let start = anchor_at
                        .checked_sub(Duration::from_nanos(before_start as u64))
                        .map_or(Duration::ZERO, |t| t.saturating_duration_since(epoch));
                    events.push(TraceEvent {
                        name: p.info.name,
                        kind: SpanKind::Device,
                        device: p.info.device,
                        reason: p.info.reason,
                        kernel_source: p.info.kernel_source,
                        bytes: 0,
                        thread: 0,
                        depth: p.info.depth,
                        start,
                        duration: Duration::from_nanos((before_start - before_end) as u64),
                    });
                }
                _ => untimed += 1,
            }
        }
    }
    events.sort_by_key(|e| e.start + e.duration);
    (events, untimed)
}

/// An event the device's default stream reached after everything enqueued on it before, and
/// the host's time when it did; `None` when the stream failed.
fn anchor(device: &Arc<Device>) -> Option<(Event, Instant)> {
    let anchor = device.create_event().ok()?;
    anchor.record(&device.default_stream()).ok()?;
    anchor.synchronize().ok()?;
    Some((anchor, Instant::now()))
}
