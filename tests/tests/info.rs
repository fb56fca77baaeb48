//! `devplug info`, the installed tool: what a runtime sees with the plugins named on the command
//! line (and DEVPLUG_PLUGIN_PATH's), the plugins that failed with why, and the plugins' own
//! account of what they found (the CUDA plugin says why it has no device).

use devplug_tests::{devplug_tool as devplug, plugin_path, zoo_path};

#[test]
fn info_lists_platforms_devices_and_plugins() {
    let sim = plugin_path("devplug_sim");
    let (code, out) = devplug(&["info", sim.to_str().unwrap(), "-o", "devices=2"]);
    assert_eq!(code, 0, "{out}");
    for line in [
        "devplug 0.1.0 (plugin ABI 1.",
        "  HOST       type CPU    priority 0     built-in             1 device, active (CPU:i)",
        "  SIM        type SIM    priority 0     plugin 'devplug_sim' 2 devices, active (SIM:i)",
        "  SIM:1      devplug SIM simulated accelerator (SIM)",
        "  devplug_sim 0.1.0 (",
        "): platforms SIM; 4 kernels",
    ] {
        assert!(out.contains(line), "missing {line:?}:\n{out}");
    }
    assert!(!out.contains("not loaded:"), "{out}");
}

#[test]
fn info_shows_why_the_cuda_plugin_has_no_device_and_what_failed() {
    let cuda = plugin_path("devplug_cuda");
    let zoo = zoo_path("abi_major");
    let (code, out) = devplug(&["info", cuda.to_str().unwrap(), zoo.to_str().unwrap()]);
    // A plugin named on the command line failed to load: exit status 1, the reason listed.
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not loaded:"), "{out}");
    assert!(out.contains("libzoo_abi_major.so: ABI_MISMATCH"), "{out}");
    assert!(out.contains("  CUDA       type GPU"), "{out}");
    match devplug_cuda_probe(&out) {
        Some(0) => assert!(
            out.contains("cuda: no devices: "),
            "the plugin says why:\n{out}"
        ),
        _ => assert!(out.contains("CUDA:0"), "{out}"),
    }
}

/// The number of devices `info` says the CUDA platform has.
fn devplug_cuda_probe(out: &str) -> Option<usize> {
    let line = out.lines().find(|l| l.trim_start().starts_with("CUDA "))?;
    let n = line
        .split("plugin 'cuda'")
        .nth(1)?
        .split_whitespace()
        .next()?;
    n.parse().ok()
}

#[test]
fn info_usage_errors() {
    for (args, why) in [
        (&["info", "-o", "a=1"][..], "before any PLUGIN"),
        (&["info", "--frobnicate"][..], "unknown option"),
        (&["info", "/no/such/plugin.so"][..], "/no/such/plugin.so"),
    ] {
        let (code, out) = devplug(args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(out.contains(why), "{args:?}: {out}");
    }
}
