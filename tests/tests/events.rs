//! Timing work on a device with two events (`Event::elapsed_ns`, ABI 1.4's `event_elapsed_ns`)
//! as a Rust host sees it: on the built-in CPU device, on SIM (a plugin that times its events)
//! and on plugins that do not.

use std::sync::Arc;
use std::time::Duration;

use devplug_core::{Code, Device, Runtime};
use devplug_tests::{hold_stream, plugin_path, runtime, zoo_path};

const SLEEP: Duration = Duration::from_millis(20);

/// Records `a`, sleeps `SLEEP` on the stream, records `b`; then checks what the device's clock
/// says, both ways, and that an event measured against itself is zero.
fn times_a_sleep_on(dev: &Arc<Device>) {
    let q = dev.create_stream().unwrap();
    let (a, b) = (dev.create_event().unwrap(), dev.create_event().unwrap());
    a.record(&q).unwrap();
    q.host_callback(Box::new(|| std::thread::sleep(SLEEP)))
        .unwrap();
    b.record(&q).unwrap();
    b.synchronize().unwrap();
    let ns = a.elapsed_ns(&b).unwrap();
    let name = dev.name();
    assert!(
        ns >= SLEEP.as_nanos() as i64 - 1_000_000 && ns < 10 * SLEEP.as_nanos() as i64,
        "{name}: {ns} ns around a {SLEEP:?} sleep"
    );
    // The other way round: the same time, negative (devices may round each way alike).
    let back = b.elapsed_ns(&a).unwrap();
    assert!(
        (back + ns).abs() <= 1_000,
        "{name}: {ns} one way, {back} back"
    );
    assert_eq!(a.elapsed_ns(&a).unwrap(), 0, "{name}");

    // Events of two streams of the device share its clock.
    let q2 = dev.create_stream().unwrap();
    let c = dev.create_event().unwrap();
    q2.wait_event(&b).unwrap();
    c.record(&q2).unwrap();
    c.synchronize().unwrap();
    assert!(a.elapsed_ns(&c).unwrap() >= ns, "{name}: c came after b");
}

#[test]
fn events_time_the_work_between_them_on_the_cpu_and_sim() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[("latency_us", "50")])
        .unwrap();
    times_a_sleep_on(&rt.find_device("CPU").unwrap());
    times_a_sleep_on(&rt.find_device("SIM").unwrap());
}

/// Never recorded, still pending, marked failed, of two devices: each a clear error naming
/// what is wrong, and nothing else disturbed.
#[test]
fn events_that_cannot_be_timed_say_why() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let (cpu, sim) = (
        rt.find_device("CPU").unwrap(),
        rt.find_device("SIM").unwrap(),
    );
    for dev in [&cpu, &sim] {
        let name = dev.name();
        let q = dev.create_stream().unwrap();
        let (a, never) = (dev.create_event().unwrap(), dev.create_event().unwrap());
        a.record(&q).unwrap();
        a.synchronize().unwrap();
        for e in [
            a.elapsed_ns(&never).unwrap_err(),
            never.elapsed_ns(&a).unwrap_err(),
        ] {
            assert_eq!(e.code, Code::FailedPrecondition, "{name}: {e}");
            assert!(e.message.contains("never recorded"), "{name}: {e}");
            assert!(e.message.contains(name), "{name}: {e}");
        }

        let open = hold_stream(&q);
        let pending = dev.create_event().unwrap();
        pending.record(&q).unwrap();
        let e = a.elapsed_ns(&pending).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{name}: {e}");
        assert!(e.message.contains("pending"), "{name}: {e}");
        open.send(()).unwrap();
        pending.synchronize().unwrap();
        assert!(a.elapsed_ns(&pending).unwrap() >= 0, "{name}");

        // An event recorded after failed host work is marked failed: it has no time.
        q.host_callback_with_status(|| Err(devplug_core::Error::new(Code::DataLoss, "bad frame")))
            .unwrap();
        let failed = dev.create_event().unwrap();
        failed.record(&q).unwrap();
        assert!(failed.synchronize().is_err());
        let e = a.elapsed_ns(&failed).unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{name}: {e}");
        assert!(e.message.contains("marked failed"), "{name}: {e}");
        assert!(e.message.contains("bad frame"), "{name}: {e}");
        assert_eq!(q.synchronize().unwrap_err().code, Code::DataLoss);
    }
    let (c, s) = (cpu.create_event().unwrap(), sim.create_event().unwrap());
    let e = c.elapsed_ns(&s).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("two devices"), "{e}");
}

/// A plugin whose table has no `event_elapsed_ns` (NULL, or a table of ABI 1.0–1.3 that ends
/// before it) loads and works; timing its events is UNIMPLEMENTED, naming the plugin and why.
#[test]
fn plugins_that_do_not_time_events_report_unimplemented() {
    for (variant, why) in [
        ("good", "event_elapsed_ns is NULL"),
        ("se_size_1_0", "ABI 1.0–1.3"),
    ] {
        let rt: Runtime = runtime();
        rt.load_plugin(zoo_path(variant), &[])
            .unwrap_or_else(|e| panic!("zoo {variant}: {e}"));
        let dev = rt.find_device("ZOO").unwrap();
        let q = dev.create_stream().unwrap();
        let (a, b) = (dev.create_event().unwrap(), dev.create_event().unwrap());
        a.record(&q).unwrap();
        b.record(&q).unwrap();
        b.synchronize().unwrap();
        let e = a.elapsed_ns(&b).unwrap_err();
        assert_eq!(e.code, Code::Unimplemented, "zoo {variant}: {e}");
        assert!(
            e.message.contains("does not time events"),
            "zoo {variant}: {e}"
        );
        assert!(e.message.contains(why), "zoo {variant}: {e}");
    }
}
