//! RSIM driven through its exported table by the SDK's fake host.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use devplug_plugin_sdk::testing::TestHost;
use devplug_plugin_sdk::{DeviceAddr, EventStatus, PlatformFlags, Status};
use devplug_rust_example::{devplug_plugin_entry, DEFAULT_MEMORY};

#[test]
fn defaults() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    assert_eq!(plugin.name(), "rust_example");
    assert_eq!(plugin.version(), env!("CARGO_PKG_VERSION"));
    let p = plugin.platforms();
    assert_eq!(p.len(), 1);
    assert_eq!(
        (p[0].name.as_str(), p[0].device_type.as_str()),
        ("RSIM", "NPU")
    );
    assert_eq!(p[0].priority, 0);
    assert_eq!(p[0].device_count, 1);
    assert_eq!(p[0].flags, PlatformFlags::NONE, "not host-visible");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    assert_eq!(dev.info().total_memory, DEFAULT_MEMORY);
    assert_eq!(dev.memory_usage().expect("usage").free, DEFAULT_MEMORY);
    assert!(
        dev.executor().host_allocate.is_none(),
        "the host uses its own pinned memory"
    );
    assert!(plugin.create_device("RSIM", 1).is_err(), "one device");
}

/// RSIM declares plugin ABI 1.1: a 1.1 host loads it and runs its kernels; a 1.0 host
/// refuses it, quoting both versions.
#[test]
fn it_loads_into_an_abi_1_1_host() {
    // SAFETY: the entry returns the plugin's static table.
    let declared = unsafe { (*devplug_plugin_entry()).abi_minor };
    assert_eq!(declared, 1);
    let host = TestHost::new().with_abi_minor(1);
    let plugin = host
        .load(devplug_plugin_entry)
        .expect("a 1.1 host loads it");
    let add = plugin
        .kernels()
        .into_iter()
        .find(|k| k.op == "Add")
        .unwrap();
    // A 1.1 host has no f16: the SDK leaves it out of the list RSIM gives.
    assert_eq!(add.dtypes, [DType::F32, DType::I64]);
    let new_host = TestHost::new();
    let current = new_host.load(devplug_plugin_entry).expect("load");
    let add = current
        .kernels()
        .into_iter()
        .find(|k| k.op == "Add")
        .unwrap();
    assert_eq!(add.dtypes, [DType::F32, DType::I64, DType::F16]);
    let old = TestHost::new().with_abi_minor(0);
    let e = old
        .load(devplug_plugin_entry)
        .expect_err("a 1.0 host refuses it");
    assert_eq!(e.code(), Status::AbiMismatch);
    assert!(
        e.message()
            .starts_with("plugin ABI 1.1, host ABI 1.0: a 1.0 host refuses"),
        "{e}"
    );
}

#[test]
fn load_options() {
    let host = TestHost::new()
        .with_option("platform", "RSIM2")
        .with_option("device_type", "GPU")
        .with_option("priority", "-5")
        .with_option("devices", "3")
        .with_option("memory", "1M");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let p = &plugin.platforms()[0];
    assert_eq!(
        (
            p.name.as_str(),
            p.device_type.as_str(),
            p.priority,
            p.device_count
        ),
        ("RSIM2", "GPU", -5, 3)
    );
    let dev = plugin.create_device("RSIM2", 2).expect("device 2");
    assert_eq!(dev.info().total_memory, 1 << 20);
}

#[test]
fn bad_options_are_errors() {
    for (key, value) in [
        ("memory", "lots"),
        ("memory", "0"),
        ("devices", "-1"),
        ("priority", "high"),
    ] {
        let host = TestHost::new().with_option(key, value);
        let err = host.load(devplug_plugin_entry).expect_err("refused");
        assert_eq!(err.code(), Status::InvalidArgument, "{key}={value}: {err}");
        assert!(err.message().contains(key), "{key}={value}: {err}");
    }
}

#[test]
fn a_panic_in_init_is_an_error_not_an_abort() {
    let host = TestHost::new().with_option("panic_in_init", "1");
    let err = host.load(devplug_plugin_entry).expect_err("refused");
    assert_eq!(err.code(), Status::Internal);
    assert!(err.message().contains("panicked: panic_in_init=1"), "{err}");
}

#[test]
fn addresses_are_fake_and_checked() {
    let host = TestHost::new().with_option("devices", "2");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let d0 = plugin.create_device("RSIM", 0).expect("d0");
    let d1 = plugin.create_device("RSIM", 1).expect("d1");
    let a0 = d0.allocate(100).expect("a0");
    let a1 = d1.allocate(100).expect("a1");
    assert!(a0.get() >= 0xD000_0000_0000 && a0 != a1, "{a0} {a1}");
    let err = d0
        .memcpy_htod(a1, &[1; 4])
        .expect_err("another device's address");
    assert_eq!(err.code(), Status::InvalidArgument);
    assert!(err.message().starts_with("RSIM:0: "), "{err}");
    let err = d0
        .memcpy_htod(DeviceAddr(a0.get() + 98), &[1; 4])
        .expect_err("past the end");
    assert_eq!(err.code(), Status::InvalidArgument);
}

#[test]
fn memory_runs_out_with_an_error_and_coalesces() {
    let host = TestHost::new().with_option("memory", "64K");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    let parts: Vec<_> = (0..4)
        .map(|_| dev.allocate(16 << 10).expect("quarter"))
        .collect();
    let err = dev.allocate(1).expect_err("full");
    assert_eq!(err.code(), Status::ResourceExhausted);
    assert!(err.message().contains("out of device memory"), "{err}");
    for p in parts.iter().rev() {
        dev.deallocate(*p, 16 << 10);
    }
    let all = dev.allocate(64 << 10).expect("coalesced");
    dev.deallocate(all, 64 << 10);
}

#[test]
fn synchronous_copies() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    let a = dev.allocate(1000).expect("a");
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    dev.memcpy_htod(a, &data).expect("htod");
    // Overlapping device-to-device copy.
    dev.memcpy_dtod(DeviceAddr(a.get() + 10), a, 500)
        .expect("dtod");
    dev.memset(a, 0xAB, 5).expect("memset");
    let mut out = vec![0u8; 1000];
    dev.memcpy_dtoh(&mut out, a).expect("dtoh");
    let mut want = data.clone();
    want.copy_within(0..500, 10);
    want[..5].fill(0xAB);
    assert_eq!(out, want);
    dev.deallocate(a, 1000);
}

#[test]
fn streams_events_and_callbacks_keep_order() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    let a = dev.allocate(4096).expect("a");
    let b = dev.allocate(4096).expect("b");
    let s1 = dev.create_stream().expect("s1");
    let s2 = dev.create_stream().expect("s2");
    let ev = dev.create_event().expect("event");

    // Hold s1 on a host callback, so that everything behind it is observably pending.
    let (release, gate) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    s1.host_callback(move || {
        let _ = gate.lock().map(|g| g.recv());
    })
    .expect("gate");
    s1.memcpy_htod_async(a, &[3; 4096]).expect("htod");
    s1.memset_async(a, 4, 16).expect("memset");
    s1.record(&ev).expect("record");
    assert_eq!(ev.status().expect("status"), EventStatus::Pending);

    // s2 copies a → b only after the event: the right data although s1 is held.
    s2.wait_event(&ev).expect("wait event");
    s2.memcpy_dtod_async(b, a, 4096).expect("dtod");
    let t = s2.memcpy_dtoh_async(b, 4096).expect("dtoh");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..5 {
        let o = Arc::clone(&order);
        s2.host_callback(move || o.lock().expect("order").push(i))
            .expect("callback");
    }
    assert_eq!(ev.status().expect("status"), EventStatus::Pending);
    release.send(()).expect("release s1");
    s2.synchronize().expect("sync s2");
    assert_eq!(ev.status().expect("status"), EventStatus::Complete);
    let mut want = vec![3u8; 4096];
    want[..16].fill(4);
    assert_eq!(s2.take_read(t).expect("read"), want);
    assert_eq!(*order.lock().expect("order"), vec![0, 1, 2, 3, 4]);

    // stream_wait_stream.
    s1.memset_async(a, 9, 4096).expect("memset");
    s2.wait_stream(&s1).expect("wait stream");
    let t = s2.memcpy_dtoh_async(a, 8).expect("dtoh");
    s2.synchronize().expect("sync s2");
    assert_eq!(s2.take_read(t).expect("read"), vec![9; 8]);
    ev.synchronize().expect("event sync");
    dev.synchronize_all().expect("sync all");
    drop((s1, s2, ev));
    dev.deallocate(a, 4096);
    dev.deallocate(b, 4096);
}

#[test]
fn a_failed_stream_reports_once_and_marks_its_events() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let ev = dev.create_event().expect("event");
    let a = dev.allocate(64).expect("a");
    let b = dev.allocate(64).expect("b");

    // Freed between enqueue and execution: the stream meets the error.
    let (release, gate) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    s.host_callback(move || {
        let _ = gate.lock().map(|g| g.recv());
    })
    .expect("gate");
    s.memset_async(a, 1, 64).expect("checked now, fails later");
    s.record(&ev).expect("record");
    // Later work still runs.
    s.memset_async(b, 5, 64).expect("memset b");
    let later = s.memcpy_dtoh_async(b, 64).expect("dtoh b");
    let calls = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&calls);
    s.host_callback(move || {
        c.fetch_add(1, Ordering::SeqCst);
    })
    .expect("callback");
    dev.deallocate(a, 64);
    release.send(()).expect("release");

    let err = s.synchronize().expect_err("the stream failed");
    assert_eq!(err.code(), Status::InvalidArgument);
    assert!(
        err.message().contains("not inside a live allocation"),
        "{err}"
    );
    assert_eq!(ev.status().expect("status"), EventStatus::Error);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "callbacks still run, once");
    assert_eq!(
        s.take_read(later).expect("read"),
        vec![5; 64],
        "later work ran"
    );
    // Reported once; the stream works again.
    s.synchronize().expect("clean");
    s.record(&ev).expect("record");
    s.synchronize().expect("sync");
    assert_eq!(ev.status().expect("status"), EventStatus::Complete);
    dev.deallocate(b, 64);
}

#[test]
fn a_bad_free_is_logged() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    dev.deallocate(DeviceAddr(0xD000_0000_0100), 8);
    assert!(
        host.logs().iter().any(|(level, m)| *level == 1
            && m.contains("RSIM:0: deallocate(0xd00000000100, 8): not an allocation")),
        "{:?}",
        host.logs()
    );
}

#[test]
fn many_threads_with_their_own_streams() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let dev = &dev;
            scope.spawn(move || {
                let s = dev.create_stream().expect("stream");
                for i in 0..25u8 {
                    let a = dev.allocate(256).expect("a");
                    s.memset_async(a, t ^ i, 256).expect("memset");
                    let r = s.memcpy_dtoh_async(a, 256).expect("dtoh");
                    s.synchronize().expect("sync");
                    assert_eq!(s.take_read(r).expect("read"), vec![t ^ i; 256]);
                    dev.deallocate(a, 256);
                }
            });
        }
    });
    dev.synchronize_all().expect("sync all");
}

// ---- kernels ----------------------------------------------------------------------------------

use devplug_plugin_sdk::testing::{AttrValue, KernelDesc, KernelTensor, TestAttrs, TestDevice};
use devplug_plugin_sdk::DType;

fn upload(dev: &TestDevice<'_>, dtype: DType, shape: &[i64], bytes: &[u8]) -> KernelTensor {
    let t = KernelTensor::new(dtype, shape, DeviceAddr(0));
    let addr = dev.allocate(t.byte_size.max(1)).expect("allocate");
    dev.memcpy_htod(addr, bytes).expect("upload");
    KernelTensor { addr, ..t }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

#[test]
fn add_and_cast_are_registered_for_rsim_and_kernels_0_registers_none() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    assert_eq!(
        plugin.kernels(),
        vec![
            KernelDesc {
                op: "Add".into(),
                device_type: "NPU".into(),
                platform: "RSIM".into(),
                dtypes: vec![DType::F32, DType::I64, DType::F16],
                priority: 0,
            },
            KernelDesc {
                op: "Cast".into(),
                device_type: "NPU".into(),
                platform: "RSIM".into(),
                dtypes: DType::ALL.to_vec(),
                priority: 0,
            }
        ]
    );
    drop(plugin);
    let host = TestHost::new()
        .with_option("kernels", "0")
        .with_option("device_type", "GPU");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    assert!(plugin.kernels().is_empty());
    let host = TestHost::new()
        .with_option("platform", "RSIM9")
        .with_option("device_type", "GPU");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let k = plugin.kernels();
    assert_eq!(
        (k[0].device_type.as_str(), k[0].platform.as_str()),
        ("GPU", "RSIM9")
    );
}

#[test]
fn add_broadcasts_on_the_stream_worker() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    let s = dev.create_stream().expect("stream");

    // f32 [2, 3] + [3] -> [2, 3]; the stream is held, so the result is not there before.
    let x = upload(
        &dev,
        DType::F32,
        &[2, 3],
        &f32_bytes(&[1., 2., 3., 4., 5., 6.]),
    );
    let y = upload(&dev, DType::F32, &[3], &f32_bytes(&[10., 20., 30.]));
    let z = upload(&dev, DType::F32, &[2, 3], &f32_bytes(&[0.; 6]));
    let (release, gate) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    s.host_callback(move || {
        let _ = gate.lock().map(|g| g.recv());
    })
    .expect("gate");
    s.run_kernel(
        "Add",
        &[x.clone(), y.clone()],
        std::slice::from_ref(&z),
        &TestAttrs::new(),
    )
    .expect("Add f32");
    let mut out = vec![0u8; 24];
    dev.memcpy_dtoh(&mut out, z.addr).expect("read");
    assert_eq!(out, f32_bytes(&[0.; 6]), "asynchronous: not yet computed");
    release.send(()).expect("release");
    s.synchronize().expect("sync");
    dev.memcpy_dtoh(&mut out, z.addr).expect("read");
    assert_eq!(out, f32_bytes(&[11., 22., 33., 14., 25., 36.]));

    // i64 [4, 1] + [1, 2] -> [4, 2], with wrapping overflow; a scalar + [2].
    let a = upload(&dev, DType::I64, &[4, 1], &i64_bytes(&[1, 2, 3, i64::MAX]));
    let b = upload(&dev, DType::I64, &[1, 2], &i64_bytes(&[100, 1]));
    let c = upload(&dev, DType::I64, &[4, 2], &i64_bytes(&[0; 8]));
    s.run_kernel(
        "Add",
        &[a.clone(), b.clone()],
        std::slice::from_ref(&c),
        &TestAttrs::new(),
    )
    .expect("Add i64");
    let k = upload(&dev, DType::I64, &[], &i64_bytes(&[-5]));
    let v = upload(&dev, DType::I64, &[2], &i64_bytes(&[100, 1]));
    let d = upload(&dev, DType::I64, &[2], &i64_bytes(&[0; 2]));
    s.run_kernel(
        "Add",
        &[k.clone(), v.clone()],
        std::slice::from_ref(&d),
        &TestAttrs::new(),
    )
    .expect("scalar + vector");
    s.synchronize().expect("sync");
    let mut out = vec![0u8; 64];
    dev.memcpy_dtoh(&mut out, c.addr).expect("read");
    assert_eq!(
        out,
        i64_bytes(&[101, 2, 102, 3, 103, 4, i64::MIN + 99, i64::MIN])
    );
    let mut out = vec![0u8; 16];
    dev.memcpy_dtoh(&mut out, d.addr).expect("read");
    assert_eq!(out, i64_bytes(&[95, -4]));
    for t in [x, y, z, a, b, c, k, v, d] {
        dev.deallocate(t.addr, t.byte_size.max(1));
    }
}

#[test]
fn add_checks_its_arguments_with_messages() {
    let host = TestHost::new();
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let x = upload(&dev, DType::F32, &[2, 3], &f32_bytes(&[0.; 6]));
    let y = upload(&dev, DType::F32, &[2], &f32_bytes(&[0.; 2]));
    let z = upload(&dev, DType::F32, &[2, 3], &f32_bytes(&[0.; 6]));
    let run = |inputs: &[KernelTensor], outputs: &[KernelTensor]| {
        s.run_kernel("Add", inputs, outputs, &TestAttrs::new())
            .expect_err("refused")
    };
    let err = run(&[x.clone(), y.clone()], std::slice::from_ref(&z));
    assert_eq!(err.code(), Status::InvalidArgument);
    assert_eq!(
        err.message(),
        "kernel Add: RSIM:0: shapes [2, 3] and [2] cannot be broadcast together"
    );
    let err = run(&[x.clone(), x.clone()], std::slice::from_ref(&y));
    assert_eq!(
        err.message(),
        "kernel Add: RSIM:0: the output has shape [2], not the broadcast shape [2, 3]"
    );
    let err = run(
        &[
            x.clone(),
            KernelTensor {
                dtype: DType::I64,
                ..x.clone()
            },
        ],
        std::slice::from_ref(&z),
    );
    assert_eq!(
        err.message(),
        "kernel Add: RSIM:0: dtypes f32 + i64 -> f32: RSIM adds f32, i64 or f16 tensors of one dtype"
    );
    let err = run(std::slice::from_ref(&x), std::slice::from_ref(&z));
    assert_eq!(
        err.message(),
        "kernel Add: expects 2 input(s) and 1 output(s), got 1 and 1"
    );
    // Memory that is not (or no longer) the device's fails the call itself.
    let gone = KernelTensor {
        addr: DeviceAddr(0xD000_0010_0000),
        ..z.clone()
    };
    let err = run(&[x.clone(), x.clone()], &[gone]);
    assert!(
        err.message().contains("is not inside a live allocation"),
        "{err}"
    );
    // No kernel for i32 (not among Add's dtypes): the host would fall back.
    let i = KernelTensor::new(DType::I32, &[2, 3], x.addr);
    let err = s
        .run_kernel(
            "Add",
            &[i.clone(), i],
            std::slice::from_ref(&z),
            &TestAttrs::new(),
        )
        .expect_err("no kernel");
    assert_eq!(err.code(), Status::NotFound);
    s.synchronize().expect("nothing was enqueued");
    for t in [x, y, z] {
        dev.deallocate(t.addr, t.byte_size);
    }
}

// ---- Cast: a kernel with a state (ABI 1.5) ----------------------------------------------------

/// RSIM's log lines about Cast's states: `(created?, live after)`.
fn cast_states(host: &TestHost) -> Vec<(bool, usize)> {
    host.logs()
        .iter()
        .filter(|(_, m)| m.starts_with("RSIM:0: kernel Cast: state "))
        .map(|(_, m)| {
            let live = m
                .rsplit("; ")
                .next()
                .and_then(|t| t.strip_suffix(" live"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no live count in {m:?}"));
            (m.contains("state created"), live)
        })
        .collect()
}

fn cast_to(dtype: DType) -> TestAttrs {
    TestAttrs::new().with("dtype", AttrValue::DType(dtype))
}

/// Cast converts as the runtime's CPU does; its `create` runs once per input dtype and `dtype`
/// attribute (the device keeps the state), and every state is dropped with the device.
#[test]
fn cast_converts_with_one_state_per_dtype_pair() {
    let host = TestHost::new().with_option("log_kernel_states", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let x = upload(
        &dev,
        DType::F32,
        &[2, 2],
        &f32_bytes(&[1.5, -2.7, 300.0, f32::NAN]),
    );
    let out = |dtype: DType| {
        let t = KernelTensor::new(dtype, &[2, 2], DeviceAddr(0));
        let addr = dev.allocate(t.byte_size).expect("allocate");
        KernelTensor { addr, ..t }
    };
    let (to_i64, to_u8, to_bool) = (out(DType::I64), out(DType::U8), out(DType::BOOL));
    let cast = |x: &KernelTensor, y: &KernelTensor| {
        s.run_kernel(
            "Cast",
            std::slice::from_ref(x),
            std::slice::from_ref(y),
            &cast_to(y.dtype),
        )
        .expect("Cast")
    };
    for y in [&to_i64, &to_u8, &to_bool, &to_i64, &to_u8] {
        cast(&x, y);
    }
    // From i64 back to f32: another pair, another state.
    let back = out(DType::F32);
    cast(&to_i64, &back);
    s.synchronize().expect("sync");
    let read = |t: &KernelTensor| {
        let mut b = vec![0u8; t.byte_size as usize];
        dev.memcpy_dtoh(&mut b, t.addr).expect("read");
        b
    };
    assert_eq!(read(&to_i64), i64_bytes(&[1, -2, 300, 0]));
    assert_eq!(read(&to_u8), [1, 0, 255, 0], "saturated, NaN to 0");
    assert_eq!(read(&to_bool), [1, 1, 1, 1], "NaN is not 0");
    assert_eq!(read(&back), f32_bytes(&[1.0, -2.0, 300.0, 0.0]));
    assert_eq!(
        cast_states(&host),
        [(true, 1), (true, 2), (true, 3), (true, 4)],
        "one create per pair"
    );
    assert_eq!(dev.kernel_states(), 4);

    // The kernel's own checks.
    let err = s
        .run_kernel(
            "Cast",
            std::slice::from_ref(&x),
            &[KernelTensor::new(DType::I64, &[4], to_i64.addr)],
            &cast_to(DType::I64),
        )
        .expect_err("shapes");
    assert_eq!(
        err.message(),
        "kernel Cast: RSIM:0: the output has shape [4], not the input's [2, 2]"
    );
    let err = s
        .run_kernel(
            "Cast",
            std::slice::from_ref(&x),
            std::slice::from_ref(&to_i64),
            &TestAttrs::new(),
        )
        .expect_err("no dtype");
    assert_eq!(err.code(), Status::NotFound);
    assert_eq!(
        err.message(),
        "kernel Cast: create: the op has no attribute `dtype`"
    );

    drop(s);
    for t in [&x, &to_i64, &to_u8, &to_bool, &back] {
        dev.deallocate(t.addr, t.byte_size);
    }
    drop(dev);
    let states = cast_states(&host);
    assert_eq!(states.len(), 8, "{states:?}");
    assert_eq!(
        states.last(),
        Some(&(false, 0)),
        "all dropped with the device"
    );
    assert!(
        !host
            .logs()
            .iter()
            .any(|(_, m)| m.contains("never destroyed")),
        "{:?}",
        host.logs()
    );
}

/// RSIM declares ABI 1.1: in a host older than 1.5 (no kernel states) the SDK makes Cast's
/// state for each launch and drops it once the stream has run the launch's work.
#[test]
fn cast_in_an_abi_1_4_host_makes_a_state_per_launch() {
    let host = TestHost::new()
        .with_abi_minor(4)
        .with_option("log_kernel_states", "1");
    let plugin = host.load(devplug_plugin_entry).expect("load");
    let dev = plugin.create_device("RSIM", 0).expect("device");
    let s = dev.create_stream().expect("stream");
    let x = upload(&dev, DType::I64, &[3], &i64_bytes(&[7, -1, 1 << 40]));
    let y = upload(&dev, DType::F64, &[3], &[0; 24]);
    let (release, gate) = mpsc::channel::<()>();
    let gate = std::sync::Mutex::new(gate);
    s.host_callback(move || {
        let _ = gate.lock().map(|g| g.recv());
    })
    .expect("gate");
    for _ in 0..2 {
        s.run_kernel(
            "Cast",
            std::slice::from_ref(&x),
            std::slice::from_ref(&y),
            &cast_to(DType::F64),
        )
        .expect("Cast");
    }
    assert_eq!(
        cast_states(&host),
        [(true, 1), (true, 2)],
        "made per launch, kept until the stream ran the launches"
    );
    assert_eq!(dev.kernel_states(), 0, "the host keeps none");
    release.send(()).expect("release");
    s.synchronize().expect("sync");
    assert_eq!(
        cast_states(&host),
        [(true, 1), (true, 2), (false, 1), (false, 0)]
    );
    let mut out = vec![0u8; 24];
    dev.memcpy_dtoh(&mut out, y.addr).expect("read");
    let want: Vec<u8> = [7.0f64, -1.0, (1u64 << 40) as f64]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    assert_eq!(out, want);
}
