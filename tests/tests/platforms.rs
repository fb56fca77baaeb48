//! `Runtime::platforms`: the built-in `HOST` platform, SIM loaded from its built path with the
//! plugin that provides it, the CUDA plugin with no devices (listed all the same), in
//! registration order — the order of `Runtime::devices`.

use devplug_core::{Runtime, RuntimeOptions};
use devplug_tests::{options, plugin_path};

#[test]
fn host_is_the_built_in_cpu_platform_with_a_device_per_cpu_device_count() {
    let rt = Runtime::new(RuntimeOptions {
        cpu_device_count: 3,
        ..options()
    })
    .unwrap();
    let ps = rt.platforms();
    assert_eq!(ps.len(), 1);
    let host = &ps[0];
    assert_eq!(
        (host.info.name.as_str(), host.info.device_type.as_str()),
        ("HOST", "CPU")
    );
    assert_eq!(host.owner, "built-in");
    assert_eq!(host.platform.device_count(), 3);
    assert!(host.is_active() && host.info.host_visible);
    assert!(!host.info.vendor.is_empty() && !host.info.version.is_empty());
    assert_eq!(
        host.info.priority,
        rt.cpu_device().unwrap().properties().priority
    );
}

#[test]
fn plugins_platforms_follow_in_load_order_with_or_without_devices() {
    let rt = Runtime::new(RuntimeOptions {
        cpu_device_count: 2,
        ..options()
    })
    .unwrap();
    let sim = rt
        .load_plugin(plugin_path("devplug_sim"), &[("devices", "2")])
        .unwrap();
    let cuda = rt
        .load_plugin(plugin_path("devplug_cuda"), &[("devices", "0")])
        .unwrap();
    let ps = rt.platforms();
    let names: Vec<&str> = ps.iter().map(|p| p.info.name.as_str()).collect();
    assert_eq!(names, ["HOST", "SIM", "CUDA"]);
    let counts: Vec<usize> = ps.iter().map(|p| p.platform.device_count()).collect();
    assert_eq!(counts, [2, 2, 0]);
    assert_eq!(ps[1].owner, format!("plugin '{}'", sim.name));
    assert_eq!(sim.name, "devplug_sim");
    assert_eq!(ps[2].owner, format!("plugin '{}'", cuda.name));
    assert_eq!(ps[2].info.device_type, "GPU");
    assert!(ps[1].is_active() && !ps[1].info.host_visible);
    // The devices are the platforms' devices, in the same order.
    let of: Vec<String> = rt
        .devices()
        .iter()
        .map(|d| d.platform().info.name.clone())
        .collect();
    assert_eq!(of, ["HOST", "HOST", "SIM", "SIM"]);
}
