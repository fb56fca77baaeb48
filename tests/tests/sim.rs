//! A Rust host with the SIM reference plugin (C): device memory the host cannot dereference,
//! asynchronous streams on worker threads, load options and injected faults.

use std::sync::Arc;

use devplug_core::{AttrValue, Attrs, Code, Device, EventStatus, RunOptions, Runtime, Tensor};
use devplug_tests::{plugin_path, runtime};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read_all(d: &Arc<devplug_core::Buffer>) -> Vec<u8> {
    let mut v = vec![0u8; d.size() as usize];
    d.read(0, &mut v).unwrap();
    v
}

#[test]
fn sim_devices_work_like_the_cpu_across_devices_and_streams() {
    let rt = runtime();
    let info = rt
        .load_plugin(
            plugin_path("devplug_sim"),
            &[("devices", "2"), ("latency_us", "300")],
        )
        .unwrap();
    assert_eq!(info.platforms, ["SIM"]);
    let (s0, s1, cpu) = (
        rt.find_device("SIM:0").unwrap(),
        rt.find_device("sim:1").unwrap(),
        rt.find_device("CPU").unwrap(),
    );
    let p = s0.properties();
    assert_eq!(
        (p.platform.as_str(), p.device_type.as_str(), p.host_visible),
        ("SIM", "SIM", false)
    );
    assert!(p.is_active_platform);

    // host → SIM:0 on a stream, event, SIM:1's stream waits, copies SIM:0 → SIM:1, then CPU.
    const N: usize = 1 << 20;
    let data = pattern(N, 7);
    let a = s0.allocate(N as u64).unwrap();
    let b = s1.allocate(N as u64).unwrap();
    let c = cpu.allocate(N as u64).unwrap();
    let q0 = s0.create_stream().unwrap();
    let q1 = s1.create_stream().unwrap();
    q0.write(&a, 0, data.clone()).unwrap();
    let ev = s0.create_event().unwrap();
    ev.record(&q0).unwrap();
    q1.wait_event(&ev).unwrap();
    q1.copy(&b, 0, &a, 0, N as u64).unwrap();
    q1.synchronize().unwrap();
    assert_eq!(ev.status().unwrap(), EventStatus::Complete);
    c.copy_from(0, &b, 0, N as u64).unwrap();
    assert_eq!(
        read_all(&c),
        data,
        "every byte through SIM:0, SIM:1 and the CPU"
    );

    // memset with an offset, on the default stream, read back synchronously.
    a.memset(100, 0xEE, 50).unwrap();
    let got = read_all(&a);
    assert!(got[100..150].iter().all(|x| *x == 0xEE));
    assert_eq!(got[..100], data[..100]);
    assert_eq!(got[150..], data[150..]);

    // tensors move between the CPU and SIM
    let t = Tensor::from_slice(&cpu, &[2, 3], &[1i32, 2, 3, 4, 5, 6]).unwrap();
    let on_sim = t.copy_to(&s1).unwrap();
    assert_eq!(
        on_sim.copy_to(&s0).unwrap().to_vec::<i32>().unwrap(),
        [1, 2, 3, 4, 5, 6]
    );

    // memory statistics come from the core's suballocator over SIM's memory
    assert!(s0.memory_stats().bytes_in_use >= N as u64);
}

#[test]
fn a_missing_wait_is_visible_and_the_event_fixes_it() {
    // SIM's streams really are asynchronous: without the event, stream r reads too early.
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[("latency_us", "20000")])
        .unwrap();
    let d = rt.find_device("SIM").unwrap();
    let buf = d.allocate(4096).unwrap();
    buf.memset(0, 0, 4096).unwrap();
    let (w, r) = (d.create_stream().unwrap(), d.create_stream().unwrap());
    let read_on_r = || {
        let out = Arc::new(slot::Slot::default());
        let (b2, o2) = (buf.clone(), out.clone());
        r.host_callback(Box::new(move || o2.set(read_all(&b2))))
            .unwrap();
        r.synchronize().unwrap();
        out.take()
    };
    // Without a wait, r does not wait for w: with w held behind a gate, r reads the memory
    // before w's memset ran.
    let open = devplug_tests::hold_stream(&w);
    w.memset(&buf, 0, 7, 4096).unwrap();
    assert_eq!(
        read_on_r(),
        vec![0u8; 4096],
        "r waited for w without an event"
    );
    open.send(()).unwrap();
    w.synchronize().unwrap();
    // With the event: r reads what w wrote.
    w.memset(&buf, 0, 9, 4096).unwrap();
    let ev = d.create_event().unwrap();
    ev.record(&w).unwrap();
    r.wait_event(&ev).unwrap();
    assert_eq!(read_on_r(), vec![9u8; 4096]);
}

#[test]
fn injected_faults_surface_as_errors_and_the_runtime_goes_on() {
    let rt = runtime();
    rt.load_plugin(
        plugin_path("devplug_sim"),
        &[("fail_alloc_after", "1"), ("memory", "4M")],
    )
    .unwrap();
    let d = rt.find_device("SIM").unwrap();
    let _first = d.allocate(1024).unwrap(); // SIM's one allowed raw allocation: a 1 MiB region
                                            // The suballocator serves from that cached region while it can…
    let _second = d.allocate(2048).unwrap();
    // …and needs a new raw allocation for this one, which SIM refuses.
    let e = d.allocate(2 << 20).unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
    assert!(e.message.contains("plugin"), "{e}");
    // the CPU is untouched
    let cpu = rt.find_device("CPU").unwrap();
    Tensor::from_slice(&cpu, &[1], &[1u8]).unwrap();
}

/// A copy between devices on a worker stream runs as host work there; when it fails (SIM's
/// injected copy failure) the stream's next synchronize says so, once, and names the copy.
#[test]
fn a_failed_copy_between_devices_is_reported_by_the_next_synchronize() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[("fail_copy_after", "1")])
        .unwrap();
    let sim = rt.find_device("SIM").unwrap();
    let cpu = rt.find_device("CPU").unwrap();
    let on_sim = sim.allocate(64).unwrap();
    on_sim.write(0, &pattern(64, 1)).unwrap(); // SIM's one allowed copy
    let on_cpu = cpu.allocate(64).unwrap();
    on_cpu.write(0, &[0u8; 64]).unwrap();

    // A CPU worker stream: the copy (SIM -> CPU) runs on its thread and fails there.
    let q = cpu.create_stream().unwrap();
    q.copy(&on_cpu, 0, &on_sim, 0, 64).unwrap();
    let e = q.synchronize().unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
    assert!(e.message.contains("injected copy failure"), "{e}");
    assert!(
        e.message
            .contains("stream copy of 64 bytes from SIM:0 to CPU:0"),
        "{e}"
    );
    // Reported once; the destination was not written; the stream goes on working.
    q.synchronize().unwrap();
    assert_eq!(read_all(&on_cpu), vec![0u8; 64]);
    q.write(&on_cpu, 0, vec![5u8; 64]).unwrap();
    q.synchronize().unwrap();
    assert_eq!(read_all(&on_cpu), vec![5u8; 64]);
    // The device's synchronize waits for every stream of it and reports their failures too
    // (then the stream has nothing left to report).
    q.copy(&on_cpu, 0, &on_sim, 0, 64).unwrap();
    let e = cpu.synchronize().unwrap_err();
    assert!(e.message.contains("from SIM:0 to CPU:0"), "{e}");
    q.synchronize().unwrap();
    cpu.synchronize().unwrap();

    // The same on SIM's default stream (asynchronous): reported by the device's synchronize.
    let from_cpu = cpu.allocate(64).unwrap();
    from_cpu.write(0, &pattern(64, 2)).unwrap();
    sim.default_stream()
        .copy(&on_sim, 0, &from_cpu, 0, 64)
        .unwrap();
    let e = sim.synchronize().unwrap_err();
    assert!(e.message.contains("injected copy failure"), "{e}");
    assert!(e.message.contains("from CPU:0 to SIM:0"), "{e}");
    sim.synchronize().unwrap();

    // On the CPU's default stream, which runs work at once, the call itself fails.
    let e = cpu
        .default_stream()
        .copy(&on_cpu, 0, &on_sim, 0, 64)
        .unwrap_err();
    assert!(e.message.contains("injected copy failure"), "{e}");
    cpu.synchronize().unwrap();
}

/// A Rust host's fallible host callback on SIM's asynchronous default stream: its error comes
/// back from the next synchronize, once, and the stream's later work still runs.
#[test]
fn a_failing_host_callback_is_reported_by_the_next_synchronize() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = rt.find_device("SIM").unwrap();
    let s = sim.default_stream();
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = ran.clone();
    s.host_callback_with_status(move || {
        r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Err(devplug_core::Error::new(
            Code::DataLoss,
            "decoder: truncated frame",
        ))
    })
    .unwrap();
    let r = ran.clone();
    s.host_callback_with_status(move || {
        r.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    })
    .unwrap();
    let e = s.synchronize().unwrap_err();
    assert_eq!(e.code, Code::DataLoss, "{e}");
    assert!(e.message.contains("truncated frame"), "{e}");
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 2);
    s.synchronize().unwrap();
    sim.synchronize().unwrap();
}

/// A host callback that panics on a stream's worker (SIM's streams, a CPU stream the host
/// created) fails the stream: its next synchronize reports the panic once, and the stream's
/// later work still runs.
#[test]
fn a_panicking_host_callback_is_reported_by_the_next_synchronize() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = rt.find_device("SIM").unwrap();
    let cpu = rt.find_device("CPU").unwrap();
    let cpu_stream = cpu.create_stream().unwrap();
    let sim_stream = sim.create_stream().unwrap();
    for s in [&sim.default_stream(), &sim_stream, &cpu_stream] {
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        s.host_callback(Box::new(|| panic!("decoder exploded")))
            .unwrap();
        let r = ran.clone();
        s.host_callback(Box::new(move || {
            r.store(true, std::sync::atomic::Ordering::SeqCst)
        }))
        .unwrap();
        let e = s.synchronize().unwrap_err();
        assert_eq!(e.code, Code::Internal, "{e}");
        assert!(
            e.message
                .contains("a host callback panicked: decoder exploded"),
            "{e}"
        );
        assert!(
            ran.load(std::sync::atomic::Ordering::SeqCst),
            "later work ran"
        );
        s.synchronize().unwrap();
    }
    sim.synchronize().unwrap();
    cpu.synchronize().unwrap();
}

/// An event recorded after host work that failed is marked failed once its stream gets there
/// (status Error, synchronize returns the failure), as a platform marks its events after its
/// own work failed; a stream of another device waiting for it fails too; the stream's own
/// synchronize still reports the failure once, and events recorded before it, or after the
/// report, are fine.
#[test]
fn an_event_recorded_after_failed_host_work_is_marked_failed() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = rt.find_device("SIM").unwrap();
    let cpu = rt.find_device("CPU").unwrap();
    let broken = || {
        Err(devplug_core::Error::new(
            Code::DataLoss,
            "decoder: truncated frame",
        ))
    };
    for dev in [&cpu, &sim] {
        let q = dev.create_stream().unwrap();
        let before = dev.create_event().unwrap();
        before.record(&q).unwrap();
        q.host_callback_with_status(broken).unwrap();
        let after = dev.create_event().unwrap();
        after.record(&q).unwrap();
        let e = after.synchronize().unwrap_err();
        assert_eq!(e.code, Code::DataLoss, "{e}");
        assert!(e.message.contains("truncated frame"), "{e}");
        assert!(e.message.contains("before the record failed"), "{e}");
        assert_eq!(after.status().unwrap(), EventStatus::Error);
        before.synchronize().unwrap();
        assert_eq!(before.status().unwrap(), EventStatus::Complete);

        // A stream of the other device that waits for it fails at its synchronize.
        let other = if Arc::ptr_eq(dev, &cpu) { &sim } else { &cpu };
        let w = other.create_stream().unwrap();
        w.wait_event(&after).unwrap();
        let e = w.synchronize().unwrap_err();
        assert_eq!(e.code, Code::DataLoss, "{e}");
        assert!(e.message.contains("waiting for an event of"), "{e}");

        // The stream itself reports the failure once; the failed event keeps its mark; an
        // event recorded after the report is fine.
        let e = q.synchronize().unwrap_err();
        assert!(e.message.contains("truncated frame"), "{e}");
        q.synchronize().unwrap();
        assert!(after.synchronize().is_err());
        after.record(&q).unwrap();
        after.synchronize().unwrap();
        assert_eq!(after.status().unwrap(), EventStatus::Complete);
    }
}

#[test]
fn sim_load_options_are_validated() {
    let rt = runtime();
    let e = rt
        .load_plugin(plugin_path("devplug_sim"), &[("devices", "zero")])
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("devices"), "{e}");
    let e = rt
        .load_plugin(plugin_path("devplug_sim"), &[("fail_init", "1")])
        .unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(e.message.contains("injected init failure"), "{e}");
    for bad in ["0", "-1", "x"] {
        let e = rt
            .load_plugin(plugin_path("devplug_sim"), &[("fail_alloc_at", bad)])
            .unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
        assert!(
            e.message.contains("fail_alloc_at") && e.message.contains("a positive integer"),
            "{e}"
        );
    }
    assert_eq!(rt.plugin_failures().len(), 5);
    assert!(rt.plugins().is_empty());
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    assert_eq!(rt.plugins().len(), 1);
}

#[test]
fn two_runtimes_load_sim_independently() {
    let a = runtime();
    let b = runtime();
    a.load_plugin(plugin_path("devplug_sim"), &[("devices", "1")])
        .unwrap();
    b.load_plugin(plugin_path("devplug_sim"), &[("devices", "3")])
        .unwrap();
    assert_eq!(
        a.devices()
            .iter()
            .filter(|d| d.platform().info.name == "SIM")
            .count(),
        1
    );
    assert_eq!(
        b.devices()
            .iter()
            .filter(|d| d.platform().info.name == "SIM")
            .count(),
        3
    );
    drop(a);
    let d: Arc<Device> = b.find_device("SIM:2").unwrap();
    let t = Tensor::from_slice(&d, &[3], &[1.0f64, 2.0, 3.0]).unwrap();
    assert_eq!(t.to_vec::<f64>().unwrap(), [1.0, 2.0, 3.0]);
}

/// Runs SIM's native Add on `device` (strict: no fallback), without synchronizing.
fn sim_add(rt: &Runtime, device: &Arc<Device>, x: &Tensor, y: &Tensor) -> Tensor {
    let options = RunOptions {
        device: Some(device.clone()),
        soft_placement: Some(false),
    };
    rt.run_named("Add", &[x.clone(), y.clone()], &Attrs::new(), &options)
        .unwrap()
        .into_iter()
        .next()
        .expect("Add has one output")
}

/// Runs `op` on `d` with soft placement on: its one output.
fn sim_op(
    rt: &Runtime,
    d: &Arc<Device>,
    op: &str,
    ins: &[&Tensor],
    attrs: Attrs,
) -> devplug_core::Result<Tensor> {
    let options = RunOptions {
        device: Some(d.clone()),
        soft_placement: Some(true),
    };
    let ins: Vec<Tensor> = ins.iter().map(|t| (*t).clone()).collect();
    Ok(rt.run_named(op, &ins, &attrs, &options)?.remove(0))
}

fn f32s(device: &Arc<Device>, v: &[f32]) -> Tensor {
    Tensor::from_slice(device, &[v.len() as i64], v).unwrap()
}

#[test]
fn plugin_kernels_keep_the_tensors_the_host_dropped_alive_until_the_stream_ran_them() {
    // The default stream lags behind (20 slow ops queued before the Add): if the Add's inputs
    // went back to the allocator when the host dropped them, the buffer allocated next would
    // reuse one of them, and a write to it on another stream (not ordered with the default
    // stream) would land before the Add read it.
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[("latency_us", "5000")])
        .unwrap();
    let d = rt.find_device("SIM").unwrap();
    // (Created first: a write from the host waits for the default stream.)
    let ones = f32s(&d, &[1.0; 16]);
    let (x, y) = (f32s(&d, &[2.0; 16]), f32s(&d, &[3.0; 16]));
    let mut busy = Vec::new();
    for _ in 0..20 {
        busy.push(sim_add(&rt, &d, &ones, &ones));
    }
    let sum = sim_add(&rt, &d, &x, &y);
    drop((x, y));
    let other = d.create_stream().unwrap();
    let reused: Vec<_> = (0..4).map(|_| d.allocate(64).unwrap()).collect();
    for b in &reused {
        other.memset(b, 0, 0xFF, 64).unwrap(); // NaNs, if it is the memory of x or y
    }
    other.synchronize().unwrap();
    assert_eq!(sum.to_vec::<f32>().unwrap(), [5.0; 16]);
    assert!(busy.iter().all(|t| t.to_vec::<f32>().unwrap() == [2.0; 16]));
}

#[test]
fn memory_dropped_in_flight_is_bounded_without_a_synchronize_and_freed_by_one() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let d = rt.find_device("SIM").unwrap();
    let x = f32s(&d, &[1.0; 16]);
    d.synchronize().unwrap();
    let idle = d.memory_stats().bytes_in_use;
    let chunk = 256; // one 64-byte output, rounded up by the suballocator

    // A host that never synchronizes: 3000 launches whose outputs it drops at once. Small
    // outputs go back to the buffer pool at once and become the next outputs (stream order).
    for _ in 0..3000 {
        sim_add(&rt, &d, &x, &x);
    }
    // Wait for the stream without synchronizing (an event), then launch once more.
    let ev = d.create_event().unwrap();
    ev.record(&d.default_stream()).unwrap();
    ev.synchronize().unwrap();
    sim_add(&rt, &d, &x, &x);
    let held = d.memory_stats().bytes_in_use - idle;
    assert!(
        held <= 4 * chunk,
        "{held} bytes of dropped outputs are still held (3000 launches: {} bytes)",
        3000 * chunk
    );

    // Outputs too large for the pool are freed once a marker behind them ran (one every 32
    // launches): what is held stays within about one marker interval.
    let n = 1 << 16;
    let big = f32s(&d, &vec![1.0; n]);
    d.synchronize().unwrap();
    let idle_big = d.memory_stats().bytes_in_use;
    for _ in 0..300 {
        sim_add(&rt, &d, &big, &big);
    }
    ev.record(&d.default_stream()).unwrap();
    ev.synchronize().unwrap();
    sim_add(&rt, &d, &big, &big);
    let held = d.memory_stats().bytes_in_use - idle_big;
    let out = 4 * n as u64;
    assert!(
        held <= 34 * out,
        "{} outputs of 300 are still held",
        held / out
    );

    // A synchronize frees everything, whichever way the default stream is synchronized.
    d.synchronize().unwrap();
    assert_eq!(d.memory_stats().bytes_in_use, idle_big);
    drop(big);
    assert_eq!(d.memory_stats().bytes_in_use, idle);
    sim_add(&rt, &d, &x, &x);
    d.default_stream().synchronize().unwrap();
    assert_eq!(d.memory_stats().bytes_in_use, idle);
    let kept = sim_add(&rt, &d, &x, &x);
    sim_add(&rt, &d, &x, &x);
    assert_eq!(kept.to_vec::<f32>().unwrap(), [2.0; 16]); // a read waits for the stream too
    assert_eq!(d.memory_stats().bytes_in_use, idle + chunk);
    drop(kept);
    assert_eq!(d.memory_stats().bytes_in_use, idle);
}

#[test]
fn back_to_back_launches_run_in_order_while_their_outputs_cycle_through_the_pool() {
    // Each Add reads the previous one's output, which the host drops at once: outputs go
    // back to the buffer pool and out again as outputs (stream-ordered reuse) while the
    // stream may still be behind. With latency the worker does not poll and the stream lags
    // far behind the host; without, launches come back to back (the worker polls for them),
    // and after pauses long enough for it to doze and to fall asleep.
    for (options, launches, pauses_us) in [
        (&[("latency_us", "100")][..], 40, &[0u64, 0][..]),
        (&[][..], 700, &[0, 30, 2000, 0][..]),
    ] {
        let rt = runtime();
        rt.load_plugin(plugin_path("devplug_sim"), options).unwrap();
        let d = rt.find_device("SIM").unwrap();
        let one = f32s(&d, &[1.0; 16]);
        let mut acc = f32s(&d, &[0.0; 16]);
        let mut n = 0.0f32;
        for &pause_us in pauses_us {
            for _ in 0..launches {
                acc = sim_add(&rt, &d, &acc, &one);
                n += 1.0;
            }
            std::thread::sleep(std::time::Duration::from_micros(pause_us));
        }
        assert_eq!(acc.to_vec::<f32>().unwrap(), [n; 16], "{options:?}");
    }
}

#[test]
fn plugin_kernel_errors_surface_at_launch_and_at_synchronize() {
    // SIM's memory is freed behind the runtime's back (the executor directly): the only way
    // to make a kernel the runtime validated fail. The first allocation of a fresh device
    // starts a region of the suballocator, so its address is one SIM can free.
    for at_launch in [true, false] {
        let rt = runtime();
        rt.load_plugin(plugin_path("devplug_sim"), &[("latency_us", "20000")])
            .unwrap();
        let d = rt.find_device("SIM").unwrap();
        let x = f32s(&d, &[1.0; 16]);
        let y = f32s(&d, &[2.0; 16]);
        let region = x.buffer().ptr();
        let e = if at_launch {
            d.executor().deallocate(region, 1 << 20);
            let options = RunOptions {
                device: Some(d.clone()),
                soft_placement: Some(false),
            };
            rt.run_named("Add", &[x.clone(), y.clone()], &Attrs::new(), &options)
                .unwrap_err()
        } else {
            let _sum = sim_add(&rt, &d, &x, &y); // checked and queued; runs in 20 ms
            d.executor().deallocate(region, 1 << 20);
            d.synchronize().unwrap_err()
        };
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
        assert!(e.message.contains("plugin 'devplug_sim'"), "{e}");
        assert!(e.message.contains("kernel Add"), "{e}");
        assert!(e.message.contains("input 'x'"), "{e}");
        assert!(e.message.contains("not inside a live allocation"), "{e}");
        // The error was reported once; the device goes on.
        d.synchronize().unwrap();
    }
}

#[test]
fn launched_work_runs_without_a_synchronize() {
    // SIM's worker does not wake for every launch (see sim.c, "Launch overhead"); work left
    // for it must still run by itself. Watched through synchronous copies, which do not wait
    // for streams.
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let d = rt.find_device("SIM").unwrap();
    let x = f32s(&d, &[1.0; 16]);
    for round in 0..20 {
        d.synchronize().unwrap(); // the worker ran out of work just now
        let outs: Vec<Tensor> = (0..=round % 3).map(|_| sim_add(&rt, &d, &x, &x)).collect();
        let last = outs.last().unwrap();
        let start = std::time::Instant::now();
        loop {
            let mut got = [0f32; 16];
            // SAFETY: 64 writable bytes; the source is a live 64-byte allocation of `d`.
            unsafe {
                d.executor()
                    .memcpy_dtoh(got.as_mut_ptr().cast(), last.buffer().ptr(), 64)
                    .unwrap()
            };
            if got == [2.0; 16] {
                break;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(5),
                "round {round}: a launch did not run without a synchronize"
            );
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
}

#[test]
fn a_runtime_dropped_with_launches_pending_frees_its_sim_device() {
    // Held buffers keep their device alive: the runtime's teardown must release them.
    for latency in ["0", "200"] {
        let device = {
            let rt = runtime();
            rt.load_plugin(plugin_path("devplug_sim"), &[("latency_us", latency)])
                .unwrap();
            let d = rt.find_device("SIM").unwrap();
            let x = f32s(&d, &[1.0; 16]);
            let mut kept = Vec::new();
            for i in 0..600 {
                let t = sim_add(&rt, &d, &x, &x);
                if i % 100 == 0 {
                    kept.push(t);
                }
            }
            Arc::downgrade(&d)
        };
        assert!(
            device.upgrade().is_none(),
            "the SIM device (latency_us={latency}) outlived its runtime"
        );
    }
}

/// A tiny take-once cell, to hand a result out of a host callback.
mod slot {
    use std::sync::Mutex;

    #[derive(Default)]
    pub struct Slot(Mutex<Option<Vec<u8>>>);

    impl Slot {
        pub fn set(&self, v: Vec<u8>) {
            *self.0.lock().unwrap() = Some(v);
        }
        pub fn take(&self) -> Vec<u8> {
            self.0.lock().unwrap().take().expect("the callback ran")
        }
    }
}

/// A synchronous read waits for the kernels that wrote what it reads even while another
/// thread's synchronize of the default stream is under way: that synchronize clears the
/// device's "work pending" note before it waits, so the note alone said "nothing to wait for"
/// and the read ran ahead of the kernel (seen as wrong sums from the CUDA plugin's
/// many-thread test). The stream is held behind a host callback until the end, so that the
/// other synchronize is surely waiting when the read starts.
#[test]
fn a_read_waits_for_its_kernel_while_another_thread_synchronizes() {
    let rt = Arc::new(runtime());
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let dev = rt.find_device("SIM").unwrap();
    let x = f32s(&dev, &[1.0, 2.0, 3.0]);
    let open = devplug_tests::hold_stream(&dev.default_stream());
    let sum = sim_add(&rt, &dev, &x, &x); // queued behind the gate
    let syncing = {
        let dev = dev.clone();
        std::thread::spawn(move || dev.synchronize())
    };
    std::thread::sleep(std::time::Duration::from_millis(100)); // it cleared the note and waits
    let (done, read) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || done.send(sum.to_vec::<f32>()).unwrap());
    let early = read.recv_timeout(std::time::Duration::from_millis(200));
    assert!(
        early.is_err(),
        "the read returned while its kernel was still queued: {early:?}"
    );
    open.send(()).unwrap();
    assert_eq!(read.recv().unwrap().unwrap(), [2.0, 4.0, 6.0]);
    reader.join().unwrap();
    syncing.join().unwrap().unwrap();
}

/// Stress (RELIABILITY.md, "many threads dispatch, load and create/destroy concurrently"): eight
/// threads run chains of ops on SIM's two devices (native kernels, a decomposition, soft
/// placement to the CPU, copies between the devices) and check every result, while another
/// thread synchronizes the devices over and over, and another creates runtimes that load SIM
/// and drop them. Nothing may be lost, mixed up or deadlock. (The read-ahead race fixed with
/// `a_read_waits_for_its_kernel_while_another_thread_synchronizes` failed this test too.)
#[test]
fn threads_dispatch_synchronize_and_load_at_once() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 100;
    let rt = Arc::new(runtime());
    rt.load_plugin(plugin_path("devplug_sim"), &[("devices", "2")])
        .unwrap();
    let devs = [
        rt.find_device("SIM:0").unwrap(),
        rt.find_device("SIM:1").unwrap(),
    ];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let syncer = {
        let (devs, stop) = (devs.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                devs[(n % 2) as usize].synchronize().unwrap();
                n += 1;
            }
            n
        })
    };
    let loader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let other = runtime();
                other.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
                let d = other.find_device("SIM").unwrap();
                let t = f32s(&d, &[1.0, 2.0]);
                assert_eq!(
                    sim_add(&other, &d, &t, &t).to_vec::<f32>().unwrap(),
                    [2.0, 4.0]
                );
                n += 1;
            }
            n
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|k| {
            let (rt, devs) = (rt.clone(), devs.clone());
            std::thread::spawn(move || {
                let base: Vec<f32> = (0..257).map(|i| (i % 7) as f32 + k as f32).collect();
                for r in 0..ROUNDS {
                    let (d, other) = (&devs[(k + r) % 2], &devs[(k + r + 1) % 2]);
                    let x = Tensor::from_slice(d, &[257], &base).unwrap();
                    // Add and Mul are SIM's own kernels; Relu is decomposed there; what SIM
                    // lacks (Relu's Maximum, Neg) goes to the CPU by soft placement.
                    let op = |name: &str, d, ins: &[&Tensor]| {
                        sim_op(&rt, d, name, ins, Attrs::new()).unwrap()
                    };
                    let y = op("Add", d, &[&x, &x]);
                    let y = op("Mul", d, &[&y, &x]);
                    let y = op("Relu", d, &[&y]);
                    let moved = y.copy_to(other).unwrap();
                    let e = op("Neg", other, &[&moved]);
                    let got = e.to_vec::<f32>().unwrap();
                    for (i, (g, b)) in got.iter().zip(&base).enumerate() {
                        assert_eq!(*g, -(2.0 * b * b), "thread {k}, round {r}, element {i}");
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (syncs, loads) = (syncer.join().unwrap(), loader.join().unwrap());
    assert!(
        syncs > 0 && loads > 0,
        "{syncs} synchronizes, {loads} loads"
    );
}

/// One step of [`alloc_fault_workload`]: the results so far in, one new tensor on SIM out.
type Step = fn(&Runtime, &Arc<Device>, &[Tensor]) -> devplug_core::Result<Tensor>;

/// A workload whose every step allocates on SIM: an upload, native kernels, a decomposition,
/// soft placement, a copy back.
const ALLOC_FAULT_STEPS: [(&str, Step); 6] = [
    ("upload", |_, d, _| {
        let v: Vec<f32> = (0..64).map(|i| (i % 5) as f32 - 2.0).collect();
        Tensor::from_slice(d, &[8, 8], &v)
    }),
    ("Add", |rt, d, t| {
        sim_op(rt, d, "Add", &[&t[0], &t[0]], Attrs::new())
    }),
    ("MatMul", |rt, d, t| {
        sim_op(rt, d, "MatMul", &[&t[1], &t[0]], Attrs::new())
    }),
    ("Relu", |rt, d, t| {
        sim_op(rt, d, "Relu", &[&t[2]], Attrs::new())
    }),
    ("ReduceSum", |rt, d, t| {
        let axes = Attrs::new().with("axes", devplug_core::AttrValue::Ints(vec![1]));
        sim_op(rt, d, "ReduceSum", &[&t[3]], axes)
    }),
    ("copy back", |rt, d, t| {
        t[4].copy_to(&rt.find_device("CPU")?)?.copy_to(d)
    }),
];

/// Runs the steps on a fresh runtime whose SIM fails the allocation `fail_at` (if any). A step
/// that fails must fail with RESOURCE_EXHAUSTED naming the injected fault, and succeed when
/// tried again. Returns the final values, the number of steps that failed, SIM's allocation
/// count, and that nothing is left allocated on SIM once the tensors are gone.
fn alloc_fault_workload(fail_at: Option<u64>) -> (Vec<f32>, usize, u64, bool) {
    let rt = runtime();
    let at = fail_at.map(|n| n.to_string());
    let mut options = vec![("no_suballocator", "1")];
    if let Some(at) = &at {
        options.push(("fail_alloc_at", at));
    }
    rt.load_plugin(plugin_path("devplug_sim"), &options)
        .unwrap();
    let d = rt.find_device("SIM").unwrap();
    let mut results: Vec<Tensor> = Vec::new();
    let mut failed = 0;
    for (name, step) in ALLOC_FAULT_STEPS {
        let t = match step(&rt, &d, &results) {
            Ok(t) => t,
            Err(e) => {
                assert_eq!(
                    e.code,
                    Code::ResourceExhausted,
                    "{name} with fail_alloc_at={at:?}: {e}"
                );
                assert!(
                    e.message.contains("injected allocation failure"),
                    "{name}: {e}"
                );
                failed += 1;
                step(&rt, &d, &results).unwrap_or_else(|e| panic!("{name} again: {e}"))
            }
        };
        results.push(t);
    }
    let values = results.last().unwrap().to_vec::<f32>().unwrap();
    let allocs = d.memory_stats().num_allocs;
    drop(results);
    d.synchronize().unwrap();
    let empty = d.memory_stats().active_allocs == 0;
    (values, failed, allocs, empty)
}

/// An injected allocation failure at any point of a workload (RELIABILITY.md: "plugin
/// allocation fails, at any point"): the step that needed the memory fails with
/// RESOURCE_EXHAUSTED — or the runtime recovers by itself, giving back what it caches — the
/// same step then succeeds, the results are those of a run without the fault, and nothing is
/// left allocated.
#[test]
fn an_allocation_failure_at_any_point_costs_one_step_and_leaks_nothing() {
    let (want, failed, allocs, empty) = alloc_fault_workload(None);
    assert_eq!(failed, 0);
    assert!(empty, "a clean run left allocations");
    assert!(
        allocs >= ALLOC_FAULT_STEPS.len() as u64,
        "{allocs} allocations"
    );
    let mut surfaced = 0;
    for n in 1..=allocs {
        let (got, failed, _, empty) = alloc_fault_workload(Some(n));
        assert_eq!(got, want, "fail_alloc_at={n}");
        assert!(failed <= 1, "fail_alloc_at={n}: {failed} steps failed");
        assert!(empty, "fail_alloc_at={n}: allocations left on SIM");
        surfaced += failed;
    }
    assert!(
        surfaced > 0,
        "no injected failure reached the host in {allocs} runs"
    );
}

/// An op's attribute is checked before any device runs it: Softmax with an axis out of range
/// is refused alike on the CPU (a native kernel) and on SIM (which has none and would run the
/// decomposition), naming the op the user called, not an op of its decomposition.
#[test]
fn an_attribute_out_of_range_is_refused_alike_on_every_device() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let (sim, cpu) = (
        rt.find_device("SIM").unwrap(),
        rt.find_device("CPU").unwrap(),
    );
    let axis = |a: i64| Attrs::new().with("axis", AttrValue::Int(a));
    for d in [&cpu, &sim] {
        let x = Tensor::from_slice(d, &[2, 3], &[1.0f32; 6]).unwrap();
        for op in ["Softmax", "LogSoftmax"] {
            let e = sim_op(&rt, d, op, &[&x], axis(5)).unwrap_err();
            assert_eq!(e.code, Code::InvalidArgument, "{e}");
            assert!(e.message.starts_with(op), "{e}");
            assert!(
                e.message.contains("axis 5 is out of range for rank 2"),
                "{e}"
            );
            assert!(!e.message.contains("Reduce"), "{e}");
        }
        // In range (negative counts from the end), it runs.
        let y = sim_op(&rt, d, "Softmax", &[&x], axis(-2)).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.5f32; 6]);
    }
}

/// `Tensor::host_ptr`: a CPU tensor's elements are in host memory, where a host reads and
/// writes them without a copy; SIM's memory is not, and has no host address.
#[test]
fn only_host_memory_has_a_host_address() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let cpu = rt.find_device("CPU:0").unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let x = Tensor::from_slice(&cpu, &[3], &[1f32, 2., 3.]).unwrap();
    let p = x
        .host_ptr()
        .expect("CPU memory is host memory")
        .cast::<f32>();
    // SAFETY: three f32 elements at an aligned address, held by `x`; nothing else uses them.
    unsafe { *p.add(1) = 20.0 };
    assert_eq!(x.to_vec::<f32>().unwrap(), [1., 20., 3.]);
    let y = rt
        .run_named(
            "Add",
            &[x.clone(), x.clone()],
            &Attrs::new(),
            &RunOptions::on(&cpu),
        )
        .unwrap();
    let q = y[0].host_ptr().unwrap().cast::<f32>();
    // SAFETY: the output's three elements; the CPU's ops are done when they return.
    assert_eq!(unsafe { std::slice::from_raw_parts(q, 3) }, [2., 40., 6.]);
    assert!(x.copy_to(&sim).unwrap().host_ptr().is_none());
}
