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
    assert!(
        err.message()
            .contains("rust_example: panic in init: panic_in_init=1"),
        "{err}"
    );
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
