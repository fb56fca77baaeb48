//! The trace (core/src/trace.rs) as a Rust host sees it: what ran where, nested as dispatch ran
//! it, on the CPU and on SIM (native kernels, a decomposition mixing SIM's kernels with ops
//! soft-placed on the CPU), from several threads, and as Trace Event JSON a profiler opens.

use std::sync::Arc;

use devplug_core::{
    Attrs, Device, Reason, RunOptions, Runtime, SpanKind, Tensor, Trace, TraceEvent,
};
use devplug_tests::{plugin_path, runtime};

fn on(d: &Arc<Device>) -> RunOptions {
    RunOptions {
        device: Some(d.clone()),
        soft_placement: Some(true),
    }
}

fn run(rt: &Runtime, op: &str, inputs: &[Tensor], d: &Arc<Device>) -> Tensor {
    rt.run_named(op, inputs, &Attrs::new(), &on(d))
        .unwrap()
        .remove(0)
}

fn end(e: &TraceEvent) -> std::time::Duration {
    e.start + e.duration
}

fn is_op(e: &TraceEvent) -> bool {
    matches!(e.kind, SpanKind::Kernel | SpanKind::Decomposition)
}

/// A runtime with SIM loaded, its CPU:0 and SIM:0, and `values` as an f32 tensor on the CPU.
fn with_sim(values: &[f32]) -> (Runtime, Arc<Device>, Arc<Device>, Tensor) {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let cpu = rt.cpu_device().unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let x = Tensor::from_slice(&cpu, &[values.len() as i64], values).unwrap();
    (rt, cpu, sim, x)
}

#[test]
fn a_trace_shows_each_op_where_it_ran_and_why() {
    let (rt, cpu, sim, x) = with_sim(&[0.5, -1.0, 2.0, 3.0]);
    let xs = x.copy_to(&sim).unwrap();

    // Off: nothing is recorded.
    run(&rt, "Add", &[x.clone(), x.clone()], &cpu);
    assert!(!rt.tracing());
    assert!(rt.stop_trace().events.is_empty());

    rt.start_trace();
    assert!(rt.tracing());
    run(&rt, "Add", &[x.clone(), x.clone()], &cpu);
    run(&rt, "Mul", &[xs.clone(), xs.clone()], &sim);
    // Gelu has no SIM kernel: its decomposition runs on SIM, with Tanh soft-placed on the CPU.
    run(&rt, "Gelu", std::slice::from_ref(&xs), &sim);
    let trace = rt.stop_trace();
    assert!(!rt.tracing());
    // The ops' spans (tensors written and decompositions' scalars are copy spans besides).
    let ev: Vec<&TraceEvent> = trace.events.iter().filter(|e| is_op(e)).collect();
    assert_eq!(trace.dropped, 0);

    let add = &ev[0];
    assert_eq!(
        (add.name.as_str(), add.kind, add.device.as_str(), add.reason),
        ("Add", SpanKind::Kernel, "HOST:0", Some(Reason::Explicit)),
        "{add:?}"
    );
    assert_eq!((add.kernel_source.as_str(), add.depth), ("built-in", 0));
    let mul = &ev[1];
    assert_eq!(
        (mul.name.as_str(), mul.device.as_str(), mul.depth),
        ("Mul", "SIM:0", 0),
        "{mul:?}"
    );
    assert_eq!(mul.kernel_source, "plugin 'devplug_sim'");
    assert!(mul.start >= end(add), "spans follow the order ops ran in");

    // The decomposition ends last; its ops lie inside it, one level down.
    let parent = *ev.last().unwrap();
    assert_eq!(
        (parent.name.as_str(), parent.kind, parent.device.as_str()),
        ("Gelu", SpanKind::Decomposition, "SIM:0"),
        "{parent:?}"
    );
    assert_eq!((parent.reason, parent.depth), (Some(Reason::Explicit), 0));
    let inner = &ev[2..ev.len() - 1];
    assert!(inner.len() >= 4, "{inner:#?}");
    for e in inner {
        assert_eq!(e.depth, 1, "{e:?}");
        assert!(
            e.start >= parent.start && end(e) <= end(parent),
            "{e:?} outside {parent:?}"
        );
    }
    let tanh = inner
        .iter()
        .find(|e| e.name == "Tanh")
        .expect("Tanh in Gelu");
    assert_eq!(
        (
            tanh.device.as_str(),
            tanh.reason,
            tanh.kernel_source.as_str()
        ),
        ("HOST:0", Some(Reason::SoftPlaced), "built-in"),
        "{tanh:?}"
    );
    assert!(
        inner.iter().any(|e| e.name == "Mul"
            && e.device == "SIM:0"
            && e.reason == Some(Reason::Decomposed)),
        "{inner:#?}"
    );

    let json = trace.to_chrome_json();
    for needle in [
        r#""name":"Gelu","cat":"decomposition","ph":"X""#,
        r#""args":{"device":"HOST:0","reason":"soft-placed","kernel":"built-in","depth":1}"#,
        r#""kernel":"plugin 'devplug_sim'""#,
        r#""name":"thread_name""#,
    ] {
        assert!(json.contains(needle), "{needle} not in {json}");
    }
    assert_eq!(
        json.matches(r#""ph":"X""#).count(),
        trace.events.len(),
        "one complete event per span"
    );
}

#[test]
fn threads_get_their_own_tracks_and_a_restart_begins_anew() {
    let rt = Arc::new(runtime());
    let cpu = rt.cpu_device().unwrap();
    rt.start_trace();
    run(
        &rt,
        "Neg",
        &[Tensor::from_slice(&cpu, &[1], &[1.0f32]).unwrap()],
        &cpu,
    );
    rt.start_trace(); // starts over
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let (rt, cpu) = (rt.clone(), cpu.clone());
            std::thread::spawn(move || {
                let x = Tensor::from_slice(&cpu, &[2], &[1.0f32, 2.0]).unwrap();
                for _ in 0..10 {
                    run(&rt, "Exp", std::slice::from_ref(&x), &cpu);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let Trace { events, .. } = rt.stop_trace();
    let events: Vec<TraceEvent> = events.into_iter().filter(is_op).collect();
    assert_eq!(events.len(), 30, "{events:#?}");
    assert!(
        events.iter().all(|e| e.name == "Exp"),
        "the restart kept an older span"
    );
    let mut tracks: Vec<u64> = events.iter().map(|e| e.thread).collect();
    tracks.sort_unstable();
    tracks.dedup();
    assert_eq!(tracks.len(), 3, "{tracks:?}");
}

#[test]
fn a_trace_is_written_to_a_file_and_an_unwritable_path_is_an_error() {
    let rt = runtime();
    let cpu = rt.cpu_device().unwrap();
    rt.start_trace();
    run(
        &rt,
        "Sqrt",
        &[Tensor::from_slice(&cpu, &[1], &[4.0f32]).unwrap()],
        &cpu,
    );
    let trace = rt.stop_trace();
    let dir = std::env::temp_dir().join(format!("devplug-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("t.json");
    trace.write_chrome_json(&file).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with('{') && text.contains(r#""name":"Sqrt""#),
        "{text}"
    );
    let e = trace
        .write_chrome_json(&dir.join("no/such/folder/t.json"))
        .unwrap_err();
    assert_eq!(e.code, devplug_core::Code::NotFound, "{e}");
    assert!(e.message.contains("no/such/folder/t.json"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `DEVPLUG_TRACE=<file>`: the runtime traces its whole life and writes the file when it is
/// destroyed. Run in a child process (the variable is read by every runtime created).
#[test]
fn devplug_trace_writes_the_runtimes_whole_life_to_a_file() {
    if let Some(file) = std::env::var_os("DEVPLUG_TRACE") {
        // The child: one runtime, two ops, then the runtime goes.
        let rt = runtime();
        assert!(rt.tracing());
        let cpu = rt.cpu_device().unwrap();
        let x = Tensor::from_slice(&cpu, &[3], &[1.0f32, 2.0, 3.0]).unwrap();
        run(&rt, "Abs", std::slice::from_ref(&x), &cpu);
        run(&rt, "Tanh", &[x], &cpu);
        drop(rt);
        assert!(std::path::Path::new(&file).is_file());
        return;
    }
    let file = std::env::temp_dir().join(format!("devplug-env-trace-{}.json", std::process::id()));
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "devplug_trace_writes_the_runtimes_whole_life_to_a_file",
            "--exact",
            "--nocapture",
        ])
        .env("DEVPLUG_TRACE", &file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("the trace file");
    std::fs::remove_file(&file).unwrap();
    assert!(
        text.contains(r#""name":"Abs""#) && text.contains(r#""name":"Tanh""#),
        "{text}"
    );
    assert_eq!(text.matches(r#""cat":"kernel""#).count(), 2, "{text}");
}

/// The host's own copies and waits are spans too: reads, writes and copies with their bytes,
/// synchronizes of a device, a stream and an event.
#[test]
fn copies_and_waits_are_spans_with_their_bytes() {
    let (rt, _cpu, sim, x) = with_sim(&[1.0, 2.0, 3.0, 4.0]);
    rt.start_trace();
    let xs = x.copy_to(&sim).unwrap(); // a copy of 16 bytes to SIM:0
    let y = run(&rt, "Mul", &[xs.clone(), xs], &sim);
    assert_eq!(y.to_vec::<f32>().unwrap(), [1.0, 4.0, 9.0, 16.0]); // a read of 16 bytes
    let buf = sim.allocate(64).unwrap();
    buf.write(0, &[7u8; 64]).unwrap();
    let stream = sim.create_stream().unwrap();
    let event = sim.create_event().unwrap();
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    stream.synchronize().unwrap();
    sim.synchronize().unwrap();
    let trace = rt.stop_trace();
    let find = |name: &str| {
        trace
            .events
            .iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no {name} span in {:#?}", trace.events))
    };
    let copy = find("copy");
    assert_eq!(
        (copy.kind, copy.device.as_str(), copy.bytes, copy.reason),
        (SpanKind::Copy, "SIM:0", 16, None),
        "{copy:?}"
    );
    let read = find("read");
    assert_eq!(
        (read.kind, read.device.as_str(), read.bytes),
        (SpanKind::Copy, "SIM:0", 16)
    );
    assert!(read.start >= end(find("Mul")), "the read follows the Mul");
    assert_eq!(find("write").bytes, 64);
    for wait in [
        "synchronize event",
        "synchronize stream",
        "synchronize device",
    ] {
        let w = find(wait);
        assert_eq!(
            (w.kind, w.device.as_str(), w.bytes),
            (SpanKind::Wait, "SIM:0", 0),
            "{w:?}"
        );
    }
    let json = trace.to_chrome_json();
    assert!(json.contains(r#""name":"read","cat":"copy""#), "{json}");
    assert!(
        json.contains(r#""args":{"device":"SIM:0","bytes":16,"depth":0}"#),
        "{json}"
    );
    assert!(
        json.contains(r#""name":"synchronize device","cat":"wait""#),
        "{json}"
    );
}

/// On a device whose platform times events (SIM, ABI 1.4), each kernel is also a span of kind
/// Device: when the device ran it, by its clock, on the device's own track. It begins after
/// its launch began and lasts at least SIM's latency. The CPU's kernels, inline, have none; nor
/// do those of a plugin that does not time events.
#[test]
fn kernels_on_a_device_that_times_events_are_spans_on_its_track() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[("latency_us", "300")])
        .unwrap();
    rt.load_plugin(devplug_tests::zoo_path("kernel_all_dtypes"), &[])
        .unwrap();
    let cpu = rt.cpu_device().unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let x = Tensor::from_slice(&cpu, &[4], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let (xs, xz) = (x.copy_to(&sim).unwrap(), x.copy_to(&zoo).unwrap());

    rt.start_trace();
    run(&rt, "Add", &[x.clone(), x.clone()], &cpu);
    for _ in 0..3 {
        run(&rt, "Add", &[xs.clone(), xs.clone()], &sim);
    }
    run(&rt, "Mul", &[xs.clone(), xs.clone()], &sim);
    run(&rt, "Add", &[xz.clone(), xz.clone()], &zoo);
    let trace = rt.stop_trace();
    assert_eq!(trace.dropped, 0);

    let device: Vec<&TraceEvent> = trace
        .events
        .iter()
        .filter(|e| e.kind == SpanKind::Device)
        .collect();
    let names: Vec<(&str, &str)> = device
        .iter()
        .map(|e| (e.name.as_str(), e.device.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("Add", "SIM:0"),
            ("Add", "SIM:0"),
            ("Add", "SIM:0"),
            ("Mul", "SIM:0")
        ],
        "one device span per SIM kernel, in the order the device ran them: {device:#?}"
    );
    let launches: Vec<&TraceEvent> = trace
        .events
        .iter()
        .filter(|e| e.kind == SpanKind::Kernel && e.device == "SIM:0")
        .collect();
    assert_eq!(launches.len(), 4);
    // The host reads the device's clock through one wait: allow it a millisecond.
    let slack = std::time::Duration::from_millis(1);
    for (d, launch) in device.iter().zip(&launches) {
        assert!(d.duration >= std::time::Duration::from_micros(300), "{d:?}");
        assert!(
            d.start + slack >= launch.start,
            "{d:?} began before {launch:?}"
        );
        assert_eq!(
            (d.reason, d.kernel_source.as_str(), d.depth, d.thread),
            (Some(Reason::Explicit), "plugin 'devplug_sim'", 0, 0),
            "{d:?}"
        );
    }
    for w in device.windows(2) {
        assert!(
            w[1].start + slack >= end(w[0]),
            "a stream runs one kernel at a time: {w:#?}"
        );
    }

    let json = trace.to_chrome_json();
    for needle in [
        r#"{"name":"process_name","ph":"M","pid":2,"tid":0,"args":{"name":"devices"}}"#,
        r#"{"name":"thread_name","ph":"M","pid":2,"tid":1,"args":{"name":"SIM:0"}}"#,
        r#""name":"Mul","cat":"device","ph":"X","pid":2,"tid":1,"#,
    ] {
        assert!(json.contains(needle), "{needle} not in {json}");
    }
}

/// A trace left on holds the events of the kernels it would time, and so their devices: a
/// runtime destroyed with it on still destroys its devices (nothing keeps them alive in a
/// cycle through the tracer they share).
#[test]
fn a_runtime_destroyed_with_a_trace_on_releases_its_devices() {
    let (rt, _cpu, sim, x) = with_sim(&[1.0, 2.0]);
    let xs = x.copy_to(&sim).unwrap();
    rt.start_trace();
    let y = run(&rt, "Add", &[xs.clone(), xs.clone()], &sim);
    assert_eq!(y.to_vec::<f32>().unwrap(), [2.0, 4.0]);
    let weak = Arc::downgrade(&sim);
    drop((y, xs, x, sim));
    assert!(rt.tracing());
    drop(rt);
    assert!(weak.upgrade().is_none(), "SIM:0 outlived its runtime");
}

/// Threads launching on SIM while another starts and stops traces: every trace stops, each
/// device span lies within its trace, and nothing deadlocks (stop waits for SIM's stream,
/// whose launches keep coming).
#[test]
fn traces_stopped_while_threads_launch_on_a_timed_device_stay_consistent() {
    let (rt, _cpu, sim, x) = with_sim(&[1.0; 16]);
    let rt = Arc::new(rt);
    let xs = x.copy_to(&sim).unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (rt, sim, xs, stop) = (rt.clone(), sim.clone(), xs.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    run(&rt, "Add", &[xs.clone(), xs.clone()], &sim);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut device_spans = 0;
    for _ in 0..20 {
        let before = std::time::Instant::now();
        rt.start_trace();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let trace = rt.stop_trace();
        let length = before.elapsed();
        for e in trace.events.iter().filter(|e| e.kind == SpanKind::Device) {
            device_spans += 1;
            assert_eq!((e.name.as_str(), e.device.as_str()), ("Add", "SIM:0"));
            // Ended before the stop read the device's clock, by which time it was reached.
            assert!(
                e.start + e.duration <= length,
                "{e:?} ends after its trace ({length:?})"
            );
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let launched: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(
        launched > 0 && device_spans > 0,
        "{launched} launches, {device_spans} device spans"
    );
    sim.synchronize().unwrap();
}

/// Copies and memsets the host enqueues on a stream of a device that times events are device
/// spans too, with their bytes, on the track of that device and stream, in the order the
/// stream ran them; a copy to another device (host work on the stream) as well.
#[test]
fn work_enqueued_on_a_stream_is_device_spans_on_the_streams_track() {
    let (rt, cpu, sim, _x) = with_sim(&[1.0]);
    let q = sim.create_stream().unwrap();
    assert!(q.id() > 0 && sim.default_stream().id() == 0);
    let (b, c) = (sim.allocate(4096).unwrap(), sim.allocate(4096).unwrap());
    let h = cpu.allocate(4096).unwrap();
    let mut back = vec![0u8; 4096];
    rt.start_trace();
    q.write(&b, 0, vec![7u8; 4096]).unwrap();
    q.memset(&b, 0, 1, 100).unwrap();
    q.copy(&c, 0, &b, 0, 4096).unwrap();
    q.copy(&h, 0, &c, 0, 4096).unwrap();
    // SAFETY: `back` is neither read nor moved before the synchronize below.
    unsafe { q.read_raw(&c, 0, back.as_mut_ptr(), 4096).unwrap() };
    q.synchronize().unwrap();
    let trace = rt.stop_trace();
    assert_eq!(trace.dropped, 0);
    assert_eq!(back[..100], [1u8; 100]);
    assert_eq!(back[100..], [7u8; 3996]);

    let spans: Vec<&TraceEvent> = trace
        .events
        .iter()
        .filter(|e| e.kind == SpanKind::Device)
        .collect();
    let got: Vec<(&str, &str, u64, u32)> = spans
        .iter()
        .map(|e| (e.name.as_str(), e.device.as_str(), e.bytes, e.stream))
        .collect();
    let id = q.id();
    assert_eq!(
        got,
        [
            ("write", "SIM:0", 4096, id),
            ("memset", "SIM:0", 100, id),
            ("copy", "SIM:0", 4096, id),
            ("copy", "SIM:0", 4096, id),
            ("read", "SIM:0", 4096, id),
        ],
        "{spans:#?}"
    );
    let slack = std::time::Duration::from_millis(1);
    for w in spans.windows(2) {
        assert!(
            w[1].start + slack >= end(w[0]),
            "one at a time, in order: {w:#?}"
        );
    }
    assert!(spans
        .iter()
        .all(|e| e.reason.is_none() && e.kernel_source.is_empty()));

    let json = trace.to_chrome_json();
    for needle in [
        format!(r#""args":{{"name":"SIM:0 stream {id}"}}"#),
        r#""cat":"device","ph":"X","pid":2,"tid":1,"#.to_string(),
        format!(r#""args":{{"device":"SIM:0","bytes":100,"stream":{id},"depth":0}}"#),
    ] {
        assert!(json.contains(&needle), "{needle} not in {json}");
    }
}
