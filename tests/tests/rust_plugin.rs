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
