//! A Rust host with the CUDA plugin, through the runtime's loader.
//!
//! Without a GPU (CI), the plugin must load, register its platform with no devices and refuse
//! bad load options; its kernel table must name real ops and dtypes they take. With a GPU
//! (`devplug check` and the tests below), it must pass the conformance checks, agree with the
//! CPU device op by op, keep stream order (pageable and page-locked host memory, events, host
//! callbacks that call back into CUDA), and fail cleanly where it should. The GPU tests print
//! "skipped: no CUDA device" and return when there is none.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use devplug_core::check::{check_plugin, Step};
use devplug_core::half::{bf16, f16};
use devplug_core::{
    AttrValue, Attrs, Code, DType, Device, EventStatus, PlacementEvent, Reason, RunOptions,
    Runtime, RuntimeOptions, Tensor,
};

/// The plugin under test: `DEVPLUG_CUDA_PLUGIN`, or the cdylib cargo built beside this test.
fn plugin() -> PathBuf {
    if let Some(p) = std::env::var_os("DEVPLUG_CUDA_PLUGIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("a folder");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("libdevplug_cuda.so");
        if p.is_file() {
            return p;
        }
    }
    panic!("libdevplug_cuda.so not found next to {}", exe.display());
}

fn runtime() -> Runtime {
    Runtime::new(RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    })
    .expect("a runtime")
}

/// Set in the child process that runs the GPU tests on the fake driver.
const ON_FAKE: &str = "DEVPLUG_CUDA_FAKE";

/// A runtime with the plugin loaded and its first GPU, or `None` (after saying why) when the
/// machine has none. On the fake driver there must be one.
fn gpu() -> Option<(Runtime, Arc<Device>)> {
    if let Err(why) = devplug_cuda::probe().gpus {
        assert!(
            std::env::var_os(ON_FAKE).is_none(),
            "the fake driver gives no device: {why}"
        );
        eprintln!("skipped: no CUDA device ({why})");
        return None;
    }
    let rt = runtime();
    rt.load_plugin(plugin(), &[])
        .expect("the CUDA plugin loads");
    let Ok(dev) = rt.find_device("CUDA:0") else {
        eprintln!("skipped: no CUDA device (the driver reports none)");
        return None;
    };
    Some((rt, dev))
}

fn strict(dev: &Arc<Device>) -> RunOptions {
    RunOptions {
        device: Some(dev.clone()),
        soft_placement: Some(false),
    }
}

fn log_placements(rt: &Runtime) -> Arc<Mutex<Vec<PlacementEvent>>> {
    let log: Arc<Mutex<Vec<PlacementEvent>>> = Arc::default();
    let l = log.clone();
    rt.set_placement_callback(Some(Arc::new(move |e: &PlacementEvent| {
        l.lock().unwrap().push(e.clone())
    })));
    log
}

// ---- without a GPU too ----------------------------------------------------------------------

#[test]
fn loads_everywhere_and_has_a_device_per_gpu() {
    let rt = runtime();
    let info = rt
        .load_plugin(plugin(), &[])
        .expect("loads without CUDA too");
    assert_eq!(info.name, "cuda");
    assert_eq!(info.platforms, ["CUDA"]);
    let platform = rt
        .platforms()
        .into_iter()
        .find(|p| p.info.name == "CUDA")
        .expect("the CUDA platform is registered");
    assert_eq!(platform.info.device_type, "GPU");
    let gpus = rt
        .devices()
        .into_iter()
        .filter(|d| d.platform().info.name == "CUDA")
        .count();
    match devplug_cuda::probe().gpus {
        Ok(n) => assert_eq!(gpus, n as usize),
        Err(why) => {
            assert!(!why.is_empty());
            assert_eq!(gpus, 0);
            let e = rt.find_device("CUDA:0").unwrap_err();
            assert_eq!(e.code, Code::NotFound, "{e}");
            let e = rt.find_device("GPU:0").unwrap_err();
            assert_eq!(e.code, Code::NotFound, "{e}");
            // No device, so no kernels either: ops keep running on the CPU.
            assert!(rt
                .kernels()
                .all()
                .iter()
                .all(|k| k.source != "plugin 'cuda'"));
        }
    }
    // The runtime goes on working next to it.
    let cpu = rt.cpu_device().unwrap();
    let x = Tensor::from_slice(&cpu, &[2], &[1.0f32, 2.0]).unwrap();
    let y = rt
        .run_named(
            "Add",
            &[x.clone(), x],
            &Attrs::new(),
            &RunOptions::default(),
        )
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [2.0, 4.0]);
}

#[test]
fn bad_load_options_fail_the_load_and_name_the_option() {
    let rt = runtime();
    for (key, value) in [
        ("devices", "-1"),
        ("devices", "2000"),
        ("devices", "many"),
        ("kernels", "2"),
        ("tf32", "yes"),
        ("priority", "high"),
    ] {
        let e = rt.load_plugin(plugin(), &[(key, value)]).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{key}={value}: {e}");
        assert!(e.message.contains(key), "{key}={value}: {e}");
        assert!(rt.platforms().iter().all(|p| p.info.name != "CUDA"));
    }
    assert!(!rt.plugin_failures().is_empty());
    // A good load after the bad ones.
    rt.load_plugin(plugin(), &[("devices", "0"), ("platform", "MYCUDA")])
        .unwrap();
    assert!(rt.find_device("MYCUDA:0").is_err());
}

#[test]
fn the_kernel_table_names_real_ops_and_dtypes_they_take() {
    let rt = runtime();
    let mut ops = std::collections::HashSet::new();
    for e in devplug_cuda::kernels::TABLE {
        assert!(ops.insert(e.op), "{} twice", e.op);
        let def = rt
            .op(e.op)
            .unwrap_or_else(|err| panic!("{}: {err}", e.op))
            .def()
            .clone();
        match def.type_vars.first() {
            None => assert!(e.dtypes.is_empty(), "{} has no type variable", e.op),
            Some(var) => {
                assert!(!e.dtypes.is_empty(), "{}: name its dtypes", e.op);
                for d in e.dtypes {
                    let d = DType::from_i32(d.code()).unwrap();
                    assert!(var.allowed.contains(&d), "{} does not take {d:?}", e.op);
                }
            }
        }
    }
    // Every basis op with a CPU kernel has one here too (composites run as decompositions).
    for op in [
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Maximum",
        "Minimum",
        "Pow",
        "Neg",
        "Abs",
        "Exp",
        "Log",
        "Tanh",
        "Sqrt",
        "Rsqrt",
        "Sigmoid",
        "Equal",
        "NotEqual",
        "Less",
        "LessEqual",
        "Greater",
        "GreaterEqual",
        "Select",
        "Cast",
        "MatMul",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceMean",
        "BroadcastTo",
        "Reshape",
        "Transpose",
        "Concat",
        "Slice",
        "Fill",
        "Iota",
        "AddN",
    ] {
        assert!(ops.contains(op), "no CUDA kernel for {op}");
    }
}

#[test]
fn devplug_check_passes() {
    // Without a GPU it checks the load and unload; with one, every device function and every
    // kernel in every dtype on the sample and edge shapes, against the CPU.
    let mut failed = Vec::new();
    let mut passed = 0;
    let ok = check_plugin(&plugin(), &[], &mut |s| match s {
        Step::End(name, Err(e)) => failed.push(format!("{name}: {e}")),
        Step::End(..) => passed += 1,
        Step::Note(n) | Step::Unchecked(n) => eprintln!("note: {n}"),
        Step::Begin(_) => {}
    });
    eprintln!("devplug check: {passed} passed, {} failed", failed.len());
    assert!(ok && failed.is_empty(), "{}", failed.join("\n"));
}

/// Every GPU test and `devplug check` again, in a child process on the fake CUDA driver,
/// cuBLAS and NVRTC (plugins/cuda/fake): with their semantics — streams asynchronous on worker
/// threads, pageable copies taken at once, host functions on one driver thread that may not
/// call CUDA, a context required — and the plugin's own kernels run on the host. So they run
/// on every machine; on one with a GPU they run for real as well.
#[test]
fn the_gpu_tests_pass_on_the_fake_driver() {
    if std::env::var_os(ON_FAKE).is_some() {
        return; // the child
    }
    let path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(p) if !p.is_empty() => format!("{}:{p}", devplug_cuda_fake::LIB_DIR),
        _ => devplug_cuda_fake::LIB_DIR.to_owned(),
    };
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "gpu_",
            "devplug_check_passes",
            "--test-threads=1",
            "--nocapture",
        ])
        .env("LD_LIBRARY_PATH", path)
        .env(ON_FAKE, "1")
        .env("DEVPLUG_CUDA_CACHE", "off")
        .env("DEVPLUG_CUDA_PLUGIN", plugin())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut v);
            }
            v
        })
    };
    let stdout = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let stderr = drain(child.stderr.take().map(|r| Box::new(r) as _));
    // A deadlock (what the fake driver's waiting allocations and frees are there to show) must
    // fail the test, not hang it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout.join().unwrap()),
        String::from_utf8_lossy(&stderr.join().unwrap())
    );
    let Some(status) = status else {
        panic!("the tests on the fake driver hung (killed after 10 minutes):\n{text}");
    };
    assert!(status.success(), "on the fake driver:\n{text}");
    assert!(!text.contains("skipped"), "{text}");
    let ran = text.matches(" ... ok").count();
    assert!(ran >= 8, "only {ran} tests ran on the fake driver:\n{text}");
    assert!(
        text.contains("devplug check: ") && text.contains(" 0 failed"),
        "{text}"
    );
}

// ---- with a GPU -----------------------------------------------------------------------------

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read_all(b: &Arc<devplug_core::Buffer>) -> Vec<u8> {
    let mut v = vec![0u8; b.size() as usize];
    b.read(0, &mut v).unwrap();
    v
}

/// The plugin declares ABI 1.1 (it needs kernels): hosts of 1.1 to 1.4 load it, and below
/// 1.3, where a host knows no half dtypes and refuses kernels that name them, its kernels name
/// none; a 1.0 host refuses it. (The kernels register only with a device, hence a GPU test.)
#[test]
fn gpu_the_plugin_loads_into_hosts_of_older_abis() {
    use devplug_plugin_sdk::testing::TestHost;
    use devplug_plugin_sdk::DType as SdkDType;
    if gpu().is_none() {
        return;
    }
    for minor in 1..=4 {
        let host = TestHost::new().with_abi_minor(minor);
        let plugin = host
            .load(devplug_cuda::devplug_plugin_entry)
            .unwrap_or_else(|e| panic!("a host of ABI 1.{minor}: {e}"));
        let kernels = plugin.kernels();
        assert!(kernels.len() >= 30, "1.{minor}: {} kernels", kernels.len());
        let halves = kernels
            .iter()
            .filter(|k| {
                k.dtypes
                    .iter()
                    .any(|d| matches!(*d, SdkDType::F16 | SdkDType::BF16))
            })
            .count();
        if minor >= 3 {
            assert!(halves >= 20, "1.{minor}: {halves} kernels take halves");
        } else {
            assert_eq!(halves, 0, "1.{minor}");
        }
    }
    let old = TestHost::new().with_abi_minor(0);
    let Err(e) = old.load(devplug_cuda::devplug_plugin_entry) else {
        panic!("a 1.0 host refuses a 1.1 plugin");
    };
    assert!(e.message().contains("plugin ABI 1.1, host ABI 1.0"), "{e}");
}

#[test]
fn gpu_memory_copies_streams_and_events_keep_order() {
    let Some((rt, gpu)) = gpu() else { return };
    let p = gpu.properties();
    assert_eq!(
        (p.platform.as_str(), p.device_type.as_str()),
        ("CUDA", "GPU")
    );
    assert!(!p.host_visible);
    let cpu = rt.cpu_device().unwrap();
    const N: usize = 8 << 20;
    let data = pattern(N, 3);
    let a = gpu.allocate(N as u64).unwrap();
    let b = gpu.allocate(N as u64).unwrap();
    let (s1, s2) = (gpu.create_stream().unwrap(), gpu.create_stream().unwrap());
    // Pageable host memory, stream-ordered: write, then on another stream after an event, copy.
    s1.write(&a, 0, data.clone()).unwrap();
    s1.memset(&a, 10, 0xAB, 100).unwrap();
    let ev = gpu.create_event().unwrap();
    ev.record(&s1).unwrap();
    s2.wait_event(&ev).unwrap();
    s2.copy(&b, 0, &a, 0, N as u64).unwrap();
    s2.synchronize().unwrap();
    assert_eq!(ev.status().unwrap(), EventStatus::Complete);
    let mut want = data.clone();
    want[10..110].fill(0xAB);
    assert!(
        read_all(&b) == want,
        "8 MiB through two streams and an event"
    );

    // A device-to-host read then a host-to-device write of the same host bytes, in order.
    let mut bounce = vec![0u8; 4096];
    let c = gpu.allocate(4096).unwrap();
    // SAFETY: `bounce` lives until the stream is synchronized below and is not touched before.
    unsafe {
        s1.read_raw(&b, 0, bounce.as_mut_ptr(), 4096).unwrap();
        s1.write_raw(&c, 0, bounce.as_ptr(), 4096).unwrap();
    }
    s1.synchronize().unwrap();
    assert_eq!(read_all(&c), want[..4096]);
    assert_eq!(bounce, want[..4096]);

    // Page-locked host memory from the device.
    let pinned = gpu.host_allocate(1 << 16).unwrap();
    // SAFETY: 64 KiB just allocated; used only until host_free below, after synchronize.
    unsafe {
        std::ptr::write_bytes(pinned, 0x5C, 1 << 16);
        s2.write_raw(&c, 0, pinned, 4096).unwrap();
        s2.read_raw(&a, 0, pinned.add(8192), 4096).unwrap();
    }
    s2.synchronize().unwrap();
    assert_eq!(read_all(&c), vec![0x5C; 4096]);
    // SAFETY: as above.
    let back = unsafe { std::slice::from_raw_parts(pinned.add(8192), 4096) }.to_vec();
    assert_eq!(back, want[..4096]);
    gpu.host_free(pinned).unwrap();

    // Overlapping device-to-device copies move like memmove.
    let d = gpu.allocate(1024).unwrap();
    d.write(0, &pattern(1024, 9)).unwrap();
    d.copy_from(1, &d, 0, 1000).unwrap();
    let got = read_all(&d);
    let src = pattern(1024, 9);
    assert_eq!(got[1..1001], src[..1000]);
    assert_eq!(got[0], src[0]);

    // Copies between the GPU and the CPU on a stream go through a host callback, which itself
    // calls CUDA: it must run (on the callback thread) and keep the stream's order.
    let h = cpu.allocate(N as u64).unwrap();
    s1.copy(&h, 0, &b, 0, N as u64).unwrap();
    s1.memset(&b, 0, 0, N as u64).unwrap();
    s1.copy(&b, 0, &h, 0, 4096).unwrap();
    s1.synchronize().unwrap();
    assert!(read_all(&h) == want);
    let got = read_all(&b);
    assert_eq!(got[..4096], want[..4096]);
    assert!(got[4096..].iter().all(|&x| x == 0));

    // Host callbacks run in stream order.
    let order: Arc<Mutex<Vec<i32>>> = Arc::default();
    for i in 0..20 {
        let o = order.clone();
        s2.host_callback(Box::new(move || o.lock().unwrap().push(i)))
            .unwrap();
    }
    s2.synchronize().unwrap();
    assert_eq!(*order.lock().unwrap(), (0..20).collect::<Vec<_>>());

    let usage = gpu.memory_usage().unwrap();
    assert!(usage.total > 0 && usage.free <= usage.total, "{usage:?}");
}

/// Runs `f` on a thread of its own and fails if it has not returned within two minutes: what a
/// deadlock looks like.
fn within_two_minutes(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            // Stuck streams would hang the runtime's teardown too: end the process.
            eprintln!("{what}: deadlocked (no return in two minutes)");
            std::process::exit(101);
        }
    }
}

/// CUDA's allocations and frees may wait for every stream (the fake driver's always do), and
/// a stream stays blocked while a host callback runs. So memory freed *inside* a callback, and
/// memory allocated while a callback waits for the allocator, must not deadlock.
#[test]
fn gpu_callbacks_that_free_and_allocations_beside_them_do_not_deadlock() {
    let Some((_rt, gpu)) = gpu() else { return };
    let g = gpu.clone();
    within_two_minutes("page-locked memory freed in a host callback", move || {
        let gpu = g;
        let s = gpu.create_stream().unwrap();
        let a = gpu.allocate(1 << 20).unwrap();
        let pinned = gpu.host_allocate(1 << 20).unwrap();
        // SAFETY: 1 MiB just allocated, freed by the callback after the copy read it.
        unsafe {
            std::ptr::write_bytes(pinned, 0x3C, 1 << 20);
            s.write_raw(&a, 0, pinned, 1 << 20).unwrap();
        }
        let (g, p) = (gpu.clone(), pinned as usize);
        s.host_callback(Box::new(move || g.host_free(p as *mut u8).unwrap()))
            .unwrap();
        s.synchronize().unwrap();
        assert_eq!(read_all(&a), vec![0x3C; 1 << 20]);
        let e = gpu.host_free(pinned).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "freed once: {e}");
    });

    let g = gpu.clone();
    within_two_minutes("device memory released in a host callback", move || {
        let gpu = g;
        // What is free counts what the host holds cached: the same before and after, unless
        // memory the callback gave back never reaches CUDA.
        let free_at_start = gpu.memory_usage().unwrap().free;
        drop(gpu.allocate(64 << 20).unwrap()); // a region the allocator keeps
        assert!(gpu.memory_stats().bytes_reserved >= 64 << 20);
        let s = gpu.create_stream().unwrap();
        let released = Arc::new(Mutex::new(0));
        let (g, r) = (gpu.clone(), released.clone());
        s.host_callback(Box::new(move || {
            *r.lock().unwrap() = g.release_cached_memory()
        }))
        .unwrap();
        s.synchronize().unwrap();
        assert!(*released.lock().unwrap() >= 64 << 20);
        // Given back to CUDA by now (after the callback, before the host looks).
        assert!(gpu.memory_usage().unwrap().free >= free_at_start);
    });

    let g = gpu.clone();
    within_two_minutes("an allocation while a callback drops a buffer", move || {
        let gpu = g;
        let s = gpu.create_stream().unwrap();
        let kept = gpu.allocate(1 << 20).unwrap();
        // The callback drops the buffer — into the allocator — a moment after the host starts
        // an allocation that needs a new region (which waits for every stream, this one too).
        s.host_callback(Box::new(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(kept);
        }))
        .unwrap();
        let big = gpu.allocate(256 << 20).unwrap();
        s.synchronize().unwrap();
        big.memset(0, 7, 16).unwrap();
        let mut head = [0u8; 16];
        big.read(0, &mut head).unwrap();
        assert_eq!(head, [7; 16]);
    });
}

/// A host callback left holding the last reference to its device (the runtime and every
/// handle dropped while a copy was queued behind a gate) must not destroy the device on the
/// device's own callback thread, where waiting for the stream waits for itself. Seen from a
/// second runtime: the device's memory goes back to CUDA.
#[test]
fn gpu_a_device_released_by_its_own_callback_is_destroyed() {
    let Some((rt, gpu)) = gpu() else { return };
    within_two_minutes(
        "a device released by its own stream's callback",
        move || {
            let rt2 = runtime();
            rt2.load_plugin(plugin(), &[])
                .expect("the CUDA plugin loads");
            let observer = rt2.find_device("CUDA:0").unwrap();
            let free_at_start = observer.memory_usage().unwrap().free;
            let buf = gpu.allocate(8 << 20).unwrap();
            assert!(observer.memory_usage().unwrap().free < free_at_start);
            drop(rt); // waits for everything; the device lives on in `gpu` and `buf`
            let stream = gpu.default_stream();
            // A first copy leaves a staging buffer in the plugin's pool: the copy behind the gate
            // then allocates no page-locked memory (which would wait for the gated stream).
            stream.write(&buf, 0, vec![0u8; 4096]).unwrap();
            stream.synchronize().unwrap();
            let (open, gate) = std::sync::mpsc::channel::<()>();
            stream
                .host_callback(Box::new(move || {
                    let _ = gate.recv();
                }))
                .unwrap();
            stream.write(&buf, 0, vec![1u8; 4096]).unwrap();
            drop((stream, buf, gpu)); // only the copy's callbacks hold the device now
            open.send(()).unwrap();
            while observer.memory_usage().unwrap().free < free_at_start {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        },
    );
}

/// Events time the device's work (`cuEventElapsedTime`, through the runtime's
/// `Event::elapsed_ns`): never negative in stream order, one clock for every stream (a then b
/// then c: ab + bc = ac within the f32 milliseconds' resolution), at least as long as a host
/// callback that holds the stream; FAILED_PRECONDITION, saying which event and why, for an
/// event never recorded or still pending.
#[test]
fn gpu_events_time_the_work_between_them() {
    let Some((_rt, gpu)) = gpu() else { return };
    let refused = |r: devplug_core::Result<i64>, want: &str| {
        let e = r.expect_err(want);
        assert_eq!(e.code, Code::FailedPrecondition, "{e}");
        assert!(e.message.contains(want), "wanted {want:?}: {e}");
    };
    let (s1, s2) = (gpu.create_stream().unwrap(), gpu.create_stream().unwrap());
    const N: u64 = 64 << 20;
    let buf = gpu.allocate(N).unwrap();
    let event = || gpu.create_event().unwrap();
    let (a, b, c, d, never) = (event(), event(), event(), event(), event());
    refused(a.elapsed_ns(&b), "the start event was never recorded");

    a.record(&s1).unwrap();
    s1.memset(&buf, 0, 1, N).unwrap();
    b.record(&s1).unwrap();
    s1.host_callback(Box::new(|| {
        std::thread::sleep(std::time::Duration::from_millis(20))
    }))
    .unwrap();
    c.record(&s1).unwrap();
    s1.synchronize().unwrap();
    refused(a.elapsed_ns(&never), "the end event was never recorded");
    let (ab, bc, ac) = (
        a.elapsed_ns(&b).unwrap(),
        b.elapsed_ns(&c).unwrap(),
        a.elapsed_ns(&c).unwrap(),
    );
    assert!(
        ab >= 0 && bc >= 0,
        "in stream order: ab {ab} ns, bc {bc} ns"
    );
    assert!(
        (19_000_000..10_000_000_000).contains(&bc),
        "a callback held the stream for 20 ms between b and c: {bc} ns"
    );
    // Each is f32 milliseconds (about 7 digits) of the same clock, rounded to ns.
    let tolerance = 2 + ac / 1_000_000;
    assert!(
        (ab + bc - ac).abs() <= tolerance,
        "ab {ab} + bc {bc} = ac {ac} ns (± {tolerance})"
    );
    let ca = c.elapsed_ns(&a).unwrap();
    assert!((ca + ac).abs() <= tolerance, "ca {ca} ns = -ac {ac} ns");
    assert_eq!(a.elapsed_ns(&a).unwrap(), 0);

    // Another stream, after c: the device's one clock.
    s2.wait_event(&c).unwrap();
    s2.memset(&buf, 0, 2, 1 << 20).unwrap();
    d.record(&s2).unwrap();
    s2.synchronize().unwrap();
    let ad = a.elapsed_ns(&d).unwrap();
    assert!(ad + tolerance >= ac, "d after c: ad {ad} ns, ac {ac} ns");

    // Pending: b recorded again behind a callback that waits for a gate.
    within_two_minutes("timing a pending event", move || {
        let (open, gate) = std::sync::mpsc::channel::<()>();
        s1.host_callback(Box::new(move || {
            let _ = gate.recv();
        }))
        .unwrap();
        b.record(&s1).unwrap();
        assert_eq!(b.status().unwrap(), EventStatus::Pending);
        refused(a.elapsed_ns(&b), "the end event is still pending");
        refused(b.elapsed_ns(&c), "the start event is still pending");
        open.send(()).unwrap();
        s1.synchronize().unwrap();
        let ab = a.elapsed_ns(&b).unwrap();
        assert!(
            ab + tolerance >= ac,
            "b again, after c: ab {ab} ns, ac {ac} ns"
        );
    });
}

/// The driver's rules for timing events, on which the plugin's `event_elapsed_ns` relies and
/// which the fake driver keeps (on a GPU this holds the fake to CUDA): an event never recorded
/// or created with `CU_EVENT_DISABLE_TIMING` is `CUDA_ERROR_INVALID_HANDLE`, one still pending
/// `CUDA_ERROR_NOT_READY`; the time runs while a host function holds the stream.
#[test]
fn gpu_the_driver_times_only_timed_recorded_reached_events() {
    use cudarc::driver::{result as cu, sys};
    use sys::CUresult as R;
    if let Err(why) = devplug_cuda::probe().gpus {
        assert!(std::env::var_os(ON_FAKE).is_none(), "{why}");
        eprintln!("skipped: no CUDA device ({why})");
        return;
    }
    type ElapsedFn = unsafe extern "C" fn(*mut f32, sys::CUevent, sys::CUevent) -> sys::CUresult;
    // SAFETY: the driver library opens (probe); only looks the symbols up, which have this
    // signature (the plugin's lookup: `_v2` from CUDA 12.8, else the older name).
    let elapsed: ElapsedFn = unsafe {
        let lib = sys::culib();
        *lib.get::<ElapsedFn>(b"cuEventElapsedTime_v2\0")
            .or_else(|_| lib.get::<ElapsedFn>(b"cuEventElapsedTime\0"))
            .expect("the driver exports cuEventElapsedTime")
    };
    let time = |start, end| {
        let mut ms = f32::NAN;
        // SAFETY: events of the current context (or never recorded) and a valid out-pointer.
        let r = unsafe { elapsed(&mut ms, start, end) };
        (r, ms)
    };
    unsafe extern "C" fn hold_200_ms(_: *mut std::ffi::c_void) {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    cu::init().unwrap();
    let dev = cu::device::get(0).unwrap();
    // SAFETY: a device handle the driver just gave; the context is released at the end.
    let ctx = unsafe { cu::primary_ctx::retain(dev) }.unwrap();
    // SAFETY: a retained context.
    unsafe { cu::ctx::set_current(ctx) }.unwrap();
    let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking).unwrap();
    let timed = || cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap();
    let (a, b) = (timed(), timed());
    let untimed = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).unwrap();
    assert_eq!(time(a, b).0, R::CUDA_ERROR_INVALID_HANDLE, "never recorded");
    // SAFETY: live events and stream; the host function touches nothing and calls no CUDA.
    unsafe {
        cu::event::record(a, stream).unwrap();
        cu::stream::launch_host_function(stream, hold_200_ms, std::ptr::null_mut()).unwrap();
        cu::event::record(b, stream).unwrap();
        cu::event::record(untimed, stream).unwrap();
    }
    assert_eq!(
        time(a, b).0,
        R::CUDA_ERROR_NOT_READY,
        "b waits behind 200 ms"
    );
    // SAFETY: a live stream.
    unsafe { cu::stream::synchronize(stream) }.unwrap();
    let (r, ms) = time(a, b);
    assert_eq!(r, R::CUDA_SUCCESS);
    assert!((190.0..10_000.0).contains(&ms), "a to b: {ms} ms");
    let (r, back) = time(b, a);
    assert_eq!(r, R::CUDA_SUCCESS);
    assert!(
        (back + ms).abs() <= ms * 1e-6,
        "b to a: {back} ms, a to b: {ms} ms"
    );
    assert_eq!(
        time(a, untimed).0,
        R::CUDA_ERROR_INVALID_HANDLE,
        "without timing"
    );
    assert_eq!(
        time(untimed, a).0,
        R::CUDA_ERROR_INVALID_HANDLE,
        "without timing"
    );
    // SAFETY: created above, destroyed once, nothing pending; then the context retained above
    // (no longer current).
    unsafe {
        for e in [a, b, untimed] {
            cu::event::destroy(e).unwrap();
        }
        cu::stream::destroy(stream).unwrap();
        cu::ctx::set_current(std::ptr::null_mut()).unwrap();
        cu::primary_ctx::release(dev).unwrap();
    }
}

#[test]
fn gpu_allocation_failure_is_an_error_and_the_device_goes_on() {
    let Some((_rt, gpu)) = gpu() else { return };
    let total = gpu.memory_usage().unwrap().total;
    let e = gpu.allocate(total * 4).unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
    let ok = gpu.allocate(1 << 20).unwrap();
    ok.memset(0, 1, 1 << 20).unwrap();
    assert_eq!(read_all(&ok)[..4], [1, 1, 1, 1]);
}

/// Runs `op` on the GPU (strictly: its kernel must exist) and on the CPU; returns both outputs
/// as f64.
fn both(
    rt: &Runtime,
    gpu: &Arc<Device>,
    op: &str,
    inputs: &[Tensor],
    attrs: &Attrs,
) -> (Vec<f64>, Vec<f64>) {
    let cpu = rt.cpu_device().unwrap();
    let on = |d: &Arc<Device>| {
        let ins: Vec<Tensor> = inputs.iter().map(|t| t.copy_to(d).unwrap()).collect();
        let out = rt
            .run_named(op, &ins, attrs, &strict(d))
            .unwrap_or_else(|e| panic!("{op} on {}: {e}", d.name()));
        assert_eq!(out[0].device().name(), d.name());
        let t = out[0].copy_to(&cpu).unwrap();
        let as_f64 = rt
            .run_named(
                "Cast",
                &[t],
                &Attrs::new().with("dtype", AttrValue::DType(DType::F64)),
                &RunOptions::default(),
            )
            .unwrap();
        as_f64[0].to_vec::<f64>().unwrap()
    };
    (on(gpu), on(&cpu))
}

fn assert_close(got: &[f64], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= rel * w.abs().max(1.0);
        assert!(ok, "{what}: element {i}: {g} vs {w}");
    }
}

/// Deterministic values in [-4, 4).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect()
}

#[test]
fn gpu_large_ops_agree_with_the_cpu() {
    let Some((rt, gpu)) = gpu() else { return };
    let cpu = rt.cpu_device().unwrap();
    let t = |shape: &[i64], seed| {
        let n = shape.iter().product::<i64>() as usize;
        Tensor::from_slice(&cpu, shape, &values(n, seed)).unwrap()
    };
    let none = Attrs::new();
    // Broadcasting over a million elements, and a long reduction (a block per output).
    let (g, c) = both(
        &rt,
        &gpu,
        "Mul",
        &[t(&[512, 2048], 1), t(&[2048], 2)],
        &none,
    );
    assert_close(&g, &c, 0.0, "Mul [512, 2048] x [2048]");
    let sum_rows = Attrs::new().with("axes", AttrValue::Ints(vec![1]));
    let (g, c) = both(&rt, &gpu, "ReduceSum", &[t(&[64, 100_000], 3)], &sum_rows);
    // f32 sums in another order: the error scales with the sum of magnitudes (≈ 2 · 10^5 per
    // row here), not with the (cancelling) result; a wrong index would be off by far more.
    let rows = values(64 * 100_000, 3);
    for (i, (g, c)) in g.iter().zip(&c).enumerate() {
        let magnitude: f64 = rows[i * 100_000..(i + 1) * 100_000]
            .iter()
            .map(|v| v.abs() as f64)
            .sum();
        assert!(
            (g - c).abs() <= 1e-6 * magnitude,
            "ReduceSum row {i}: {g} vs {c}"
        );
    }
    let (g, c) = both(&rt, &gpu, "ReduceMax", &[t(&[1 << 20], 4)], &none);
    assert_close(&g, &c, 0.0, "ReduceMax of 1M");
    // MatMul: batched, transposed, a shared right-hand side.
    for (a, b, ta, tb) in [
        (vec![256i64, 512], vec![512i64, 128], false, false),
        (vec![3, 64, 96], vec![3, 80, 64], true, true),
        (vec![4, 2, 33, 17], vec![17, 9], false, false),
        (vec![2, 1, 5, 6], vec![1, 3, 6, 4], false, false),
    ] {
        let attrs = Attrs::new()
            .with("transpose_a", AttrValue::Bool(ta))
            .with("transpose_b", AttrValue::Bool(tb));
        let (g, c) = both(&rt, &gpu, "MatMul", &[t(&a, 5), t(&b, 6)], &attrs);
        assert_close(&g, &c, 1e-4, &format!("MatMul {a:?} {b:?} {ta} {tb}"));
    }
    // Transpose of a large 3-D tensor, Slice, Concat.
    let perm = Attrs::new().with("perm", AttrValue::Ints(vec![2, 0, 1]));
    let (g, c) = both(&rt, &gpu, "Transpose", &[t(&[64, 96, 130], 7)], &perm);
    assert_close(&g, &c, 0.0, "Transpose");
    let slice = Attrs::new()
        .with("begin", AttrValue::Ints(vec![3, 10]))
        .with("size", AttrValue::Ints(vec![50, -1]));
    let (g, c) = both(&rt, &gpu, "Slice", &[t(&[100, 300], 8)], &slice);
    assert_close(&g, &c, 0.0, "Slice");
    let cat = Attrs::new().with("axis", AttrValue::Int(-1));
    let (g, c) = both(
        &rt,
        &gpu,
        "Concat",
        &[t(&[30, 7], 9), t(&[30, 1], 10), t(&[30, 0], 11)],
        &cat,
    );
    assert_close(&g, &c, 0.0, "Concat");
    // Composites run as decompositions into kernels that all exist on the GPU.
    let (g, c) = both(&rt, &gpu, "Softmax", &[t(&[64, 1000], 12)], &none);
    assert_close(&g, &c, 1e-5, "Softmax");
    let (g, c) = both(&rt, &gpu, "Gelu", &[t(&[4096], 13)], &none);
    assert_close(&g, &c, 1e-5, "Gelu");
}

#[test]
fn gpu_halves_agree_with_the_cpu() {
    let Some((rt, gpu)) = gpu() else { return };
    let cpu = rt.cpu_device().unwrap();
    let v = values(4096, 21);
    let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
    let b: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x * 3.0)).collect();
    let none = Attrs::new();
    let th = Tensor::from_slice(&cpu, &[64, 64], &h).unwrap();
    let tb = Tensor::from_slice(&cpu, &[64, 64], &b).unwrap();
    for op in ["Add", "Mul", "Div", "Sub"] {
        let (g, c) = both(&rt, &gpu, op, &[th.clone(), th.clone()], &none);
        assert_close(&g, &c, 0.0, &format!("{op} f16 (correctly rounded)"));
        let (g, c) = both(&rt, &gpu, op, &[tb.clone(), tb.clone()], &none);
        assert_close(&g, &c, 0.0, &format!("{op} bf16 (correctly rounded)"));
    }
    let (g, c) = both(&rt, &gpu, "MatMul", &[th.clone(), th.clone()], &none);
    assert_close(&g, &c, 4e-3, "MatMul f16");
    let (g, c) = both(&rt, &gpu, "MatMul", &[tb.clone(), tb], &none);
    assert_close(&g, &c, 3e-2, "MatMul bf16");
    for to in [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::U8,
        DType::Bool,
        DType::BF16,
    ] {
        let attrs = Attrs::new().with("dtype", AttrValue::DType(to));
        let (g, c) = both(&rt, &gpu, "Cast", std::slice::from_ref(&th), &attrs);
        assert_close(&g, &c, 0.0, &format!("Cast f16 -> {to:?}"));
    }
}

#[test]
fn gpu_placement_is_native_and_falls_back_where_it_must() {
    let Some((rt, gpu)) = gpu() else { return };
    let log = log_placements(&rt);
    let a = Tensor::from_slice(&gpu, &[2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let out = rt
        .run_named("Add", &[a.clone(), a.clone()], &Attrs::new(), &strict(&gpu))
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0, 8.0]);
    let events = log.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|e| e.op == "Add" && e.device == "CUDA:0" && e.detail.contains("cuda")),
        "{events:?}"
    );
    // GPU:0 means CUDA:0 (the only GPU platform here).
    assert_eq!(rt.find_device("GPU:0").unwrap().name(), gpu.name());
    // Integer MatMul has no CUDA kernel: strict mode says where kernels exist; soft placement
    // runs it on the CPU and logs it.
    let i = Tensor::from_slice(&gpu, &[2, 2], &[1i32, 2, 3, 4]).unwrap();
    let e = rt
        .run_named(
            "MatMul",
            &[i.clone(), i.clone()],
            &Attrs::new(),
            &strict(&gpu),
        )
        .unwrap_err();
    assert_eq!(e.code, Code::NotFound, "{e}");
    assert!(e.message.contains("CPU"), "{e}");
    log.lock().unwrap().clear();
    let soft = RunOptions {
        device: Some(gpu.clone()),
        soft_placement: Some(true),
    };
    let out = rt
        .run_named("MatMul", &[i.clone(), i], &Attrs::new(), &soft)
        .unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), [7, 10, 15, 22]);
    let events = log.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.reason == Reason::SoftPlaced),
        "{events:?}"
    );
}

#[test]
fn gpu_empty_reductions_and_kernel_errors_are_clear() {
    let Some((rt, gpu)) = gpu() else { return };
    let empty = Tensor::from_slice::<f32>(&gpu, &[0, 3], &[]).unwrap();
    let axes0 = Attrs::new().with("axes", AttrValue::Ints(vec![0]));
    let sum = rt
        .run_named(
            "ReduceSum",
            std::slice::from_ref(&empty),
            &axes0,
            &strict(&gpu),
        )
        .unwrap();
    assert_eq!(sum[0].to_vec::<f32>().unwrap(), [0.0; 3]);
    let mean = rt
        .run_named(
            "ReduceMean",
            std::slice::from_ref(&empty),
            &axes0,
            &strict(&gpu),
        )
        .unwrap();
    assert!(mean[0].to_vec::<f32>().unwrap().iter().all(|x| x.is_nan()));
    let e = rt
        .run_named("ReduceMax", &[empty], &axes0, &strict(&gpu))
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("empty"), "{e}");
    // The device goes on.
    let x = Tensor::from_slice(&gpu, &[3], &[1i64, 2, 3]).unwrap();
    let y = rt
        .run_named("ReduceSum", &[x], &Attrs::new(), &strict(&gpu))
        .unwrap();
    assert_eq!(y[0].to_vec::<i64>().unwrap(), [6]);
}

#[test]
fn gpu_ops_from_many_threads() {
    let Some((rt, gpu)) = gpu() else { return };
    let rt = Arc::new(rt);
    let threads: Vec<_> = (0..8)
        .map(|k| {
            let (rt, gpu) = (rt.clone(), gpu.clone());
            std::thread::spawn(move || {
                let x = Tensor::from_slice(&gpu, &[1000], &vec![k as f32; 1000]).unwrap();
                let mut acc = x.clone();
                for _ in 0..50 {
                    acc = rt
                        .run_named("Add", &[acc, x.clone()], &Attrs::new(), &strict(&gpu))
                        .unwrap()
                        .remove(0);
                }
                let got = acc.to_vec::<f32>().unwrap();
                let bad: Vec<(usize, f32)> = got
                    .iter()
                    .copied()
                    .enumerate()
                    .filter(|&(_, v)| v != 51.0 * k as f32)
                    .collect();
                assert!(
                    bad.is_empty(),
                    "thread {k}: {} wrong, first {:?}",
                    bad.len(),
                    &bad[..bad.len().min(8)]
                );
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
