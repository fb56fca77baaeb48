//! Work as its device ran it: while a trace is on, a kernel launched on an asynchronous device
//! whose platform times events (the CPU's created streams, SIM, CUDA; ABI 1.4's
//! `event_elapsed_ns`) is bracketed by two events on the device's default stream, and so is
//! a copy or memset the host enqueues on one of the device's streams. When the trace stops,
//! the runtime waits for the last of those events, and the device's clock says when its
//! streams reached each of them; those times are placed on the host's timeline through one
//! more event per device (an *anchor*), recorded then on its default stream and waited for: the
//! host reads its clock when the wait returns, which is when the device reached the anchor,
//! give or take a wake-up. The spans land on a track of their own per device and stream.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Span, SpanKind, TraceEvent};
use crate::device::Device;
use crate::stream::{Event, Stream};

/// The event recorded on a stream before work whose device span is timed.
pub(crate) struct DeviceSpanStart(Event);

impl DeviceSpanStart {
    /// Records the start of work on `stream`; `None` when the stream runs work inline (the
    /// host's span is the work) or its device does not time events, or the event could not be
    /// made.
    pub(crate) fn begin(stream: &Stream) -> Option<DeviceSpanStart> {
        let device = stream.device();
        if stream.is_synchronous() || !device.executor().times_events() {
            return None;
        }
        let e = device.create_event().ok()?;
        e.record(stream).ok()?;
        Some(DeviceSpanStart(e))
    }

    /// Records the end of the work, once it is enqueued on `stream` (the one given to
    /// [`begin`](Self::begin)), and keeps the span for the trace to time when it stops: as
    /// `span` says (of kind [`SpanKind::Device`], on `stream`'s track), ignored if the trace
    /// stopped or restarted since `begun`.
    pub(crate) fn end(self, stream: &Stream, begun: Instant, span: Span<'_>) {
        let device = stream.device();
        let Some(end) = device
            .create_event()
            .ok()
            .filter(|e| e.record(stream).is_ok())
        else {
            return;
        };
        let span = Span {
            kind: SpanKind::Device,
            ..span
        };
        let pending = PendingDeviceSpan {
            start: self.0,
            end,
            event: span.event(0, stream.id(), Duration::ZERO, Duration::ZERO),
        };
        device.tracer().record_device(begun, pending);
    }
}

/// A span's two events, waiting for the trace to stop.
pub(crate) struct PendingDeviceSpan {
    start: Event,
    end: Event,
    /// The span but its times.
    event: TraceEvent,
}

/// The device spans of `pending`, on the timeline that began at `epoch`; and how many could
/// not be timed (a stream that failed before reaching an event, a device that failed to say).
/// Waits for the streams the spans are on.
pub(super) fn resolve(pending: Vec<PendingDeviceSpan>, epoch: Instant) -> (Vec<TraceEvent>, u64) {
    let mut events = Vec::with_capacity(pending.len());
    // Every span's end reached (so before its device's anchor, recorded after this).
    let (mut rest, failed): (Vec<_>, Vec<_>) = pending
        .into_iter()
        .partition(|p| p.end.synchronize().is_ok());
    let mut untimed = failed.len() as u64;
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
                        start,
                        duration: Duration::from_nanos((before_start - before_end) as u64),
                        ..p.event
                    });
                }
                _ => untimed += 1,
            }
        }
    }
    events.sort_by_key(|e| e.start + e.duration);
    (events, untimed)
}

/// An event the device's default stream reached after everything enqueued on it before (and
/// after the spans' ends, which were waited for), and the host's time when it did; `None`
/// when the stream failed.
fn anchor(device: &Arc<Device>) -> Option<(Event, Instant)> {
    let anchor = device.create_event().ok()?;
    anchor.record(&device.default_stream()).ok()?;
    anchor.synchronize().ok()?;
    Some((anchor, Instant::now()))
}
