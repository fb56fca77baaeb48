//! A Rust host with the Rust example plugin (RSIM, built with the plugin SDK): it loads
//! through the same loader as C and C++ plugins, and a panic in its init is an error.

use devplug_core::{Code, Tensor};
use devplug_tests::{plugin_path, runtime};

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
