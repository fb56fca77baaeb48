//! A Rust host with the Rust example plugin (RSIM, built with the plugin SDK): it loads
//! through the same loader as C and C++ plugins, and a panic in its init is an error.

use devplug_core::{Code, Tensor};
use devplug_tests::{plugin_path, record_placements, runtime};

#[test]
fn rsim_devices_work_through_the_loader() {
    let rt = runtime();
    let info = rt
        .load_plugin(plugin_path("devplug_rust_example"), &[("devices", "2")])
        .unwrap();
    assert_eq!(info.platforms, ["RSIM"]);
    let (n0, n1) = (
        rt.find_device("NPU:0").unwrap(),
        rt.find_device("RSIM:1").unwrap(),
    );
    assert!(!n0.host_visible());
    let t = Tensor::from_slice(&n0, &[4], &[1i64, -2, 3, -4]).unwrap();
    let u = t.copy_to(&n1).unwrap();
    assert_eq!(u.to_vec::<i64>().unwrap(), [1, -2, 3, -4]);
    let (s0, s1) = (n0.create_stream().unwrap(), n1.create_stream().unwrap());
    let a = n0.allocate(1 << 16).unwrap();
    let b = n1.allocate(1 << 16).unwrap();
    s0.memset(&a, 0, 0x5A, 1 << 16).unwrap();
    let ev = n0.create_event().unwrap();
    ev.record(&s0).unwrap();
    s1.wait_event(&ev).unwrap();
    s1.copy(&b, 0, &a, 0, 1 << 16).unwrap();
    s1.synchronize().unwrap();
    let mut out = vec![0u8; 1 << 16];
    b.read(0, &mut out).unwrap();
    assert!(out.iter().all(|x| *x == 0x5A));
}

/// RSIM's Add takes f16 from this host (ABI ≥ 1.3): on RSIM's device it runs RSIM's kernel, not
/// a fallback, and its sums equal the CPU's bit for bit (both round the f32 sum once).
#[test]
fn rsims_f16_add_runs_natively_and_equals_the_cpus() {
    use devplug_core::half::f16;
    use devplug_core::{Attrs, RunOptions};
    use std::sync::Arc;
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_rust_example"), &[])
        .unwrap();
    let (cpu, npu) = (rt.cpu_device().unwrap(), rt.find_device("NPU:0").unwrap());
    let log = record_placements(&rt);
    // Values whose sums round: f16 has 11 bits, so 2049 + 1 and 0.1 + 0.2 are inexact.
    let x: Vec<f16> = [2049.0, 0.1, -7.25, 65504.0, 1e-7, 3.0]
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let y: Vec<f16> = [1.0f32, 0.2, 7.25, 65504.0, 1e-7, -0.5]
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let run = |d: &Arc<devplug_core::Device>| {
        let a = Tensor::from_slice(d, &[2, 3], &x).unwrap();
        let b = Tensor::from_slice(d, &[2, 3], &y).unwrap();
        let strict = RunOptions {
            device: Some(d.clone()),
            soft_placement: Some(false),
        };
        let out = rt
            .run_named("Add", &[a, b], &Attrs::new(), &strict)
            .unwrap();
        out[0].to_vec::<f16>().unwrap()
    };
    let (on_npu, on_cpu) = (run(&npu), run(&cpu));
    let bits = |v: &[f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&on_npu), bits(&on_cpu));
    assert!(on_npu[3].is_infinite(), "65504 + 65504 overflows f16");
    let events = log.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.op == "Add" && e.device == "RSIM:0" && e.detail.contains("rust_example")),
        "{events:?}"
    );
}

#[test]
fn a_panic_in_init_is_an_error_not_an_abort() {
    let rt = runtime();
    let e = rt
        .load_plugin(
            plugin_path("devplug_rust_example"),
            &[("panic_in_init", "1")],
        )
        .unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(e.message.contains("panic"), "{e}");
    assert_eq!(rt.plugin_failures().len(), 1);
    // the same library loads fine afterwards
    rt.load_plugin(plugin_path("devplug_rust_example"), &[])
        .unwrap();
    assert!(rt.find_device("RSIM").is_ok());
}

/// RSIM's Cast keeps a kernel state (plugin ABI 1.5) through the runtime: one `create` per
/// input dtype and `dtype` attribute on the device however often it runs, the CPU's results,
/// and every state destroyed by the time the runtime is gone, none left for RSIM to report at
/// `destroy_device`. RSIM logs its states (`log_kernel_states=1`) through the process-wide log;
/// the lines of this test's own platform name are picked out.
#[test]
fn rsims_cast_keeps_a_state_per_dtype_pair_and_equals_the_cpu() {
    use devplug_core::log::{self, Level, Record};
    use devplug_core::{Attrs, DType, RunOptions};
    use std::sync::{Arc, Mutex};

    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    log::set_level(Some(Level::Info));
    log::set_callback(Some(Arc::new(move |r: &Record| {
        if r.message.starts_with("RSTATE:") {
            s.lock().unwrap().push(r.message.to_string())
        }
    })));
    // (created?, live after) of each state line.
    let states = || -> Vec<(bool, u64)> {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|m| m.starts_with("RSTATE:0: kernel Cast: state "))
            .map(|m| {
                let live = m
                    .rsplit("; ")
                    .next()
                    .and_then(|t| t.strip_suffix(" live"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("no live count in {m:?}"));
                (m.contains("state created"), live)
            })
            .collect()
    };
    let rt = runtime();
    rt.load_plugin(
        plugin_path("devplug_rust_example"),
        &[("platform", "RSTATE"), ("log_kernel_states", "1")],
    )
    .unwrap();
    let (cpu, dev) = (
        rt.cpu_device().unwrap(),
        rt.find_device("RSTATE:0").unwrap(),
    );
    let placements = record_placements(&rt);
    let cast = rt.op("Cast").unwrap();
    let to = |dtype: DType| Attrs::new().with("dtype", dtype);
    let (on_dev, on_cpu) = (RunOptions::on(&dev).strict(), RunOptions::on(&cpu));
    // A result as f64 values, cast on the CPU (exact for these values).
    let values = |t: &Tensor| {
        rt.run1(&cast, &[t.copy_to(&cpu).unwrap()], &to(DType::F64), &on_cpu)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    };
    let x_cpu =
        Tensor::from_slice(&cpu, &[2, 3], &[1.5f32, -2.7, 300.0, 0.0, 65504.0, 1e-8]).unwrap();
    let x = x_cpu.copy_to(&dev).unwrap();

    // Five attribute sets, each run twice: five states.
    let targets = [DType::I64, DType::U8, DType::Bool, DType::F16, DType::F64];
    for round in 0..2 {
        for dtype in targets {
            let y = rt
                .run1(&cast, std::slice::from_ref(&x), &to(dtype), &on_dev)
                .unwrap();
            let want = rt
                .run1(&cast, std::slice::from_ref(&x_cpu), &to(dtype), &on_cpu)
                .unwrap();
            assert_eq!(y.dtype(), dtype);
            assert_eq!(values(&y), values(&want), "f32 -> {dtype:?}, round {round}");
        }
    }
    // Another input dtype: another state.
    let i = Tensor::from_slice(&dev, &[3], &[7i64, -1, 1 << 40]).unwrap();
    let f = rt.run1(&cast, &[i], &to(DType::F32), &on_dev).unwrap();
    assert_eq!(f.to_vec::<f32>().unwrap(), [7.0, -1.0, (1u64 << 40) as f32]);
    dev.synchronize().unwrap();
    assert_eq!(
        states(),
        (1..=6).map(|n| (true, n)).collect::<Vec<_>>(),
        "one create per dtype pair, all kept"
    );
    assert!(
        placements
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.op == "Cast" && e.device == "RSTATE:0" && e.detail.contains("rust_example")),
        "RSIM's own kernel ran"
    );

    // The runtime and every handle gone (the device with them): every state destroyed.
    drop((x, x_cpu, f, on_dev, on_cpu, cast, dev, cpu));
    drop(rt);
    let all = states();
    assert_eq!(all.len(), 12, "{all:?}");
    assert_eq!(all.iter().filter(|(created, _)| !created).count(), 6);
    assert_eq!(all.last(), Some(&(false, 0)));
    let leaks: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains("never destroyed"))
        .cloned()
        .collect();
    assert!(leaks.is_empty(), "{leaks:?}");
    log::set_callback(None);
}
