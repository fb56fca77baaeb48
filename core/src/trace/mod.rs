//! The trace: a timeline of what dispatch ran, where and for how long, for a profiler.
//!
//! While a trace is on, every kernel launch and every decomposition is recorded as a span: the
//! op, the device it ran on, why it ran there, who provided the kernel, the host thread, and the
//! host-side start and duration (a decomposition's span contains the spans of its ops). So are
//! the host's synchronous copies (a buffer's `read`, `write`, `copy_from`: what tensors' reads
//! and `copy_to` use) and its waits (a device's, a stream's or an event's `synchronize`). A trace
//! is started and stopped by the host ([`Runtime::start_trace`](crate::Runtime::start_trace)),
//! or runs for the runtime's whole life when `DEVPLUG_TRACE=<file>` is set (written when the
//! runtime is destroyed). [`Trace::to_chrome_json`] writes the Trace Event Format that
//! `chrome://tracing`, Perfetto and Speedscope open.
//!
//! Spans are host time. On the CPU device's default stream a kernel runs inline, so its span is
//! the kernel; on an asynchronous device (a plugin's GPU) it is the launch, and when the
//! device's platform times events (ABI 1.4) the kernel as the device ran it is a second span,
//! of kind [`SpanKind::Device`], on the device's own track (see `device_spans`), as are the
//! copies and memsets the host enqueues on the device's streams. Off, tracing costs one atomic
//! load per kernel, copy, wait or stream operation.

mod device_spans;

use std::cell::Cell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Code, Error, Result};
use crate::placement::Reason;

pub(crate) use device_spans::DeviceSpanStart;
use device_spans::PendingDeviceSpan;

/// Spans kept per trace; later ones are counted as dropped (about 200 bytes each).
pub const MAX_EVENTS: usize = 1 << 20;

/// What a span covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// A kernel: its inputs copied to the device if they lived elsewhere, its outputs
    /// allocated, the kernel run (or launched, on an asynchronous device).
    Kernel,
    /// An op that ran as its decomposition; the spans of its ops lie inside this one.
    Decomposition,
    /// A synchronous copy the host asked for (`read`, `write`, `copy`), after the device's
    /// default stream.
    Copy,
    /// A wait the host asked for (`synchronize` of a device, a stream or an event).
    Wait,
    /// Work as its asynchronous device ran it, by the device's clock (devices whose platform
    /// times events): a kernel, from when the device's default stream reached it to when it
    /// finished; or a copy (`write`, `read`, `copy`, with its bytes) or `memset` the host
    /// enqueued on one of the device's streams. On the track of the device and stream;
    /// `thread` is 0.
    Device,
}

impl SpanKind {
    /// The name of the kind in the JSON (`cat`).
    pub fn name(self) -> &'static str {
        match self {
            SpanKind::Kernel => "kernel",
            SpanKind::Decomposition => "decomposition",
            SpanKind::Copy => "copy",
            SpanKind::Wait => "wait",
            SpanKind::Device => "device",
        }
    }
}

/// One span of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// The op; for a copy `read`, `write` or `copy`; for a wait `synchronize device`,
    /// `synchronize stream` or `synchronize event`.
    pub name: String,
    /// What the span is: a kernel, a decomposition, a copy, a wait, a device's own span.
    pub kind: SpanKind,
    /// The device it ran on (`PLATFORM:ordinal`); for a copy, its destination.
    pub device: String,
    /// Why an op ran there (as in the placement log); `None` for copies and waits.
    pub reason: Option<Reason>,
    /// Who provided the kernel (`built-in`, `plugin 'sim'`); empty but for kernels.
    pub kernel_source: String,
    /// The bytes a copy moved; 0 for other spans.
    pub bytes: u64,
    /// The host thread, numbered from 1 in the order threads first traced something; 0 for a
    /// [`SpanKind::Device`] span.
    pub thread: u64,
    /// For a [`SpanKind::Device`] span, the stream it ran on ([`Stream::id`](crate::Stream::id):
    /// 0 for the device's default stream, where kernels run); 0 for the host's spans.
    pub stream: u32,
    /// Decomposition depth: 0 for an op the host ran.
    pub depth: u32,
    /// Since the trace started.
    pub start: Duration,
    /// How long it took.
    pub duration: Duration,
}

/// A finished trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The host's spans in the order they ended, then the devices' ([`SpanKind::Device`]) in
    /// the order they ended.
    pub events: Vec<TraceEvent>,
    /// Spans not kept (beyond [`MAX_EVENTS`]), and device spans that could not be timed
    /// (their stream failed before it reached them).
    pub dropped: u64,
}

impl Trace {
    /// The trace in the Trace Event Format (JSON; complete events, times in microseconds): the
    /// host's spans in process 1, one track per host thread; the devices' spans in process 2,
    /// one track per device.
    pub fn to_chrome_json(&self) -> String {
        let mut s = String::with_capacity(64 + self.events.len() * 200);
        s.push_str("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"devplug\",");
        let _ = write!(s, "\"dropped_events\":{}}},\"traceEvents\":[", self.dropped);
        s.push_str(
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\
             \"args\":{\"name\":\"devplug\"}}",
        );
        let on_device = |e: &&TraceEvent| e.kind == SpanKind::Device;
        let mut threads: Vec<u64> = self
            .events
            .iter()
            .filter(|e| !on_device(e))
            .map(|e| e.thread)
            .collect();
        threads.sort_unstable();
        threads.dedup();
        for t in threads {
            let _ = write!(
                s,
                ",{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{t},\
                 \"args\":{{\"name\":\"host thread {t}\"}}}}"
            );
        }
        // One track per device and stream.
        let mut devices: Vec<(&str, u32)> = self
            .events
            .iter()
            .filter(on_device)
            .map(|e| (e.device.as_str(), e.stream))
            .collect();
        devices.sort_unstable();
        devices.dedup();
        if !devices.is_empty() {
            s.push_str(
                ",{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"tid\":0,\
                 \"args\":{\"name\":\"devices\"}}",
            );
        }
        for (i, (d, stream)) in devices.iter().enumerate() {
            let _ = write!(
                s,
                ",{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":2,\"tid\":{},\"args\":{{\"name\":",
                i + 1
            );
            if *stream == 0 {
                json_string(&mut s, d);
            } else {
                json_string(&mut s, &format!("{d} stream {stream}"));
            }
            s.push_str("}}");
        }
        for e in &self.events {
            s.push_str(",{\"name\":");
            json_string(&mut s, &e.name);
            let cat = e.kind.name();
            let (pid, tid) = match devices.binary_search(&(e.device.as_str(), e.stream)) {
                Ok(i) if e.kind == SpanKind::Device => (2, i as u64 + 1),
                _ => (1, e.thread),
            };
            let _ = write!(
                s,
                ",\"cat\":\"{cat}\",\"ph\":\"X\",\"pid\":{pid},\"tid\":{tid},\"ts\":{:.3},\"dur\":{:.3},\
                 \"args\":{{\"device\":",
                e.start.as_nanos() as f64 / 1e3,
                e.duration.as_nanos() as f64 / 1e3
            );
            json_string(&mut s, &e.device);
            if let Some(reason) = e.reason {
                s.push_str(",\"reason\":");
                json_string(&mut s, &reason.to_string());
            }
            if e.kind == SpanKind::Kernel || (e.kind == SpanKind::Device && e.reason.is_some()) {
                s.push_str(",\"kernel\":");
                json_string(&mut s, &e.kernel_source);
            }
            if e.kind == SpanKind::Copy || (e.kind == SpanKind::Device && e.reason.is_none()) {
                let _ = write!(s, ",\"bytes\":{}", e.bytes);
            }
            if e.kind == SpanKind::Device {
                let _ = write!(s, ",\"stream\":{}", e.stream);
            }
            let _ = write!(s, ",\"depth\":{}}}}}", e.depth);
        }
        s.push_str("]}\n");
        s
    }

    /// Writes [`to_chrome_json`](Trace::to_chrome_json) to `path`.
    pub fn write_chrome_json(&self, path: &std::path::Path) -> Result<()> {
        std::fs::write(path, self.to_chrome_json()).map_err(|e| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => Code::NotFound,
                std::io::ErrorKind::PermissionDenied => Code::PermissionDenied,
                _ => Code::Unavailable,
            };
            Error::new(
                code,
                format!("cannot write the trace to {}: {e}", path.display()),
            )
        })
    }
}

/// `v` as a JSON string.
fn json_string(s: &mut String, v: &str) {
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
}

/// The runtime's tracer.
pub struct Tracer {
    on: AtomicBool,
    state: Mutex<State>,
}

struct State {
    epoch: Instant,
    events: Vec<TraceEvent>,
    /// Work on asynchronous devices, to be timed when the trace stops.
    device_spans: Vec<PendingDeviceSpan>,
    dropped: u64,
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer {
            on: AtomicBool::new(false),
            state: Mutex::new(State {
                epoch: Instant::now(),
                events: Vec::new(),
                device_spans: Vec::new(),
                dropped: 0,
            }),
        }
    }
}

impl Tracer {
    /// True while a trace is on (check before taking times).
    #[inline]
    pub fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Starts a trace, discarding what a trace still running had recorded.
    pub fn start(&self) {
        let mut st = self.state.lock();
        st.epoch = Instant::now();
        st.events.clear();
        let discarded = std::mem::take(&mut st.device_spans);
        st.dropped = 0;
        self.on.store(true, Ordering::Relaxed);
        drop(st);
        drop(discarded); // their events' destruction calls the plugins: not under the lock
    }

    /// Stops the trace and returns it (empty when none was on). Kernels on asynchronous
    /// devices that time events are timed now: this waits for those devices' default streams.
    pub fn stop(&self) -> Trace {
        let mut st = self.state.lock();
        let was_on = self.on.swap(false, Ordering::Relaxed);
        if !was_on {
            return Trace::default();
        }
        let mut trace = Trace {
            events: std::mem::take(&mut st.events),
            dropped: std::mem::replace(&mut st.dropped, 0),
        };
        let (pending, epoch) = (std::mem::take(&mut st.device_spans), st.epoch);
        // Waiting for streams, and their host callbacks, must not find the lock held.
        drop(st);
        let (device_events, untimed) = device_spans::resolve(pending, epoch);
        trace.events.extend(device_events);
        trace.dropped += untimed;
        trace
    }

    /// Drops the spans still waiting to be timed, without waiting for their devices: what a
    /// runtime does before it destroys its devices (the spans' events hold them).
    pub(crate) fn discard_device_spans(&self) {
        let discarded = std::mem::take(&mut self.state.lock().device_spans);
        drop(discarded);
    }

    /// Keeps a device span to time when the trace stops (ignored, as
    /// [`record`](Self::record), if the trace stopped or restarted since `begun`).
    fn record_device(&self, begun: Instant, span: PendingDeviceSpan) {
        let mut st = self.state.lock();
        if st.admit(self.on(), begun) {
            st.device_spans.push(span);
        } else {
            drop(st); // its events' destruction calls the plugin: not under the lock
            drop(span);
        }
    }

    /// Records a span that began at `begun` and ends now (ignored if the trace stopped, or was
    /// restarted, in between).
    pub(crate) fn record(&self, begun: Instant, span: Span<'_>) {
        let end = Instant::now();
        let thread = thread_number();
        let mut st = self.state.lock();
        if st.admit(self.on(), begun) {
            let start = begun - st.epoch;
            st.events.push(span.event(thread, 0, start, end - begun));
        }
    }
}

impl State {
    /// Whether a span that began at `begun` belongs in the trace (it is `on` and was not
    /// restarted since) and there is room for it; a span beyond [`MAX_EVENTS`] is counted
    /// as dropped.
    fn admit(&mut self, on: bool, begun: Instant) -> bool {
        if !on || begun < self.epoch {
            return false;
        }
        if self.events.len() + self.device_spans.len() >= MAX_EVENTS {
            self.dropped += 1;
            return false;
        }
        true
    }
}

/// What [`Tracer::record`] is told about a span.
#[derive(Clone, Copy)]
pub(crate) struct Span<'a> {
    pub name: &'a str,
    pub kind: SpanKind,
    pub device: &'a str,
    pub reason: Option<Reason>,
    pub kernel_source: &'a str,
    pub bytes: u64,
    pub depth: u32,
}

impl Span<'_> {
    /// A kernel's or a decomposition's span (no bytes).
    pub(crate) fn op<'a>(
        name: &'a str,
        kind: SpanKind,
        device: &'a str,
        reason: Reason,
        kernel_source: &'a str,
        depth: usize,
    ) -> Span<'a> {
        Span {
            name,
            kind,
            device,
            reason: Some(reason),
            kernel_source,
            bytes: 0,
            depth: depth as u32,
        }
    }

    /// A copy or wait span of the host's (no reason, no kernel, depth 0).
    pub(crate) fn host<'a>(name: &'a str, kind: SpanKind, device: &'a str, bytes: u64) -> Span<'a> {
        Span {
            name,
            kind,
            device,
            reason: None,
            kernel_source: "",
            bytes,
            depth: 0,
        }
    }

    /// The span as a trace keeps it.
    fn event(&self, thread: u64, stream: u32, start: Duration, duration: Duration) -> TraceEvent {
        TraceEvent {
            name: self.name.to_owned(),
            kind: self.kind,
            device: self.device.to_owned(),
            reason: self.reason,
            kernel_source: self.kernel_source.to_owned(),
            bytes: self.bytes,
            thread,
            stream,
            depth: self.depth,
            start,
            duration,
        }
    }
}

/// Runs `f`, recorded as a copy or wait span of `device`'s when a trace is on.
pub(crate) fn traced<R>(
    device: &crate::Device,
    name: &str,
    kind: SpanKind,
    bytes: u64,
    f: impl FnOnce() -> R,
) -> R {
    let tracer = device.tracer();
    if !tracer.on() {
        return f();
    }
    let begun = Instant::now();
    let r = f();
    tracer.record(
        begun,
        Span::host(name, kind, &device.qualified_name(), bytes),
    );
    r
}

/// This thread's number in traces.
fn thread_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NUMBER: Cell<u64> = const { Cell::new(0) };
    }
    NUMBER.with(|n| {
        if n.get() == 0 {
            n.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        n.get()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(name: &str) -> Span<'_> {
        Span {
            name,
            kind: SpanKind::Kernel,
            device: "CPU:0",
            reason: Some(Reason::Explicit),
            kernel_source: "built-in",
            bytes: 0,
            depth: 0,
        }
    }

    #[test]
    fn records_only_while_on_and_restarts_empty() {
        let t = Tracer::default();
        t.record(Instant::now(), span("Add"));
        assert!(t.stop().events.is_empty(), "recorded while off");
        t.start();
        let begun = Instant::now();
        t.record(begun, span("Add"));
        let old = Instant::now();
        t.start(); // a restart drops what was recorded, and spans begun before it
        t.record(old, span("Mul"));
        t.record(Instant::now(), span("Sub"));
        let trace = t.stop();
        assert_eq!(trace.events.len(), 1, "{trace:?}");
        assert_eq!(trace.events[0].name, "Sub");
        assert!(t.stop().events.is_empty(), "a second stop has nothing");
    }

    #[test]
    fn the_json_escapes_names_and_lists_threads() {
        let trace = Trace {
            events: vec![TraceEvent {
                name: "My\"Op\\\n".into(),
                kind: SpanKind::Decomposition,
                device: "SIM:0".into(),
                reason: Some(Reason::Decomposed),
                kernel_source: String::new(),
                bytes: 0,
                thread: 3,
                stream: 0,
                depth: 1,
                start: Duration::from_nanos(1500),
                duration: Duration::from_nanos(250),
            }],
            dropped: 2,
        };
        let j = trace.to_chrome_json();
        assert!(j.contains(r#""name":"My\"Op\\\u000a""#), "{j}");
        assert!(
            j.contains(r#""cat":"decomposition","ph":"X","pid":1,"tid":3,"ts":1.500,"dur":0.250"#),
            "{j}"
        );
        assert!(j.contains(r#""args":{"name":"host thread 3"}"#), "{j}");
        assert!(j.contains(r#""dropped_events":2"#), "{j}");
        assert!(
            !j.contains("\"kernel\""),
            "a decomposition has no kernel: {j}"
        );
    }

    #[test]
    fn spans_beyond_the_cap_are_counted_not_kept() {
        let t = Tracer::default();
        t.start();
        t.state.lock().events.resize(
            MAX_EVENTS,
            TraceEvent {
                name: "Add".into(),
                kind: SpanKind::Kernel,
                device: "CPU:0".into(),
                reason: Some(Reason::Explicit),
                kernel_source: "built-in".into(),
                bytes: 0,
                thread: 1,
                stream: 0,
                depth: 0,
                start: Duration::ZERO,
                duration: Duration::ZERO,
            },
        );
        t.record(Instant::now(), span("Mul"));
        let trace = t.stop();
        assert_eq!((trace.events.len(), trace.dropped), (MAX_EVENTS, 1));
    }
}
