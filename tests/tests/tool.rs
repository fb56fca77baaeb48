//! The installed tool's `info` and `bench` (`check` has tests/tests/check.rs): what a runtime
//! sees with the plugins named on the command line (and DEVPLUG_PLUGIN_PATH's), the plugins that
//! failed with why, the plugins' own account of what they found (the CUDA plugin says why it has
//! no device); a plugin's costs next to the CPU device's.

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
fn info_ops_lists_signatures_and_where_kernels_are() {
    let sim = plugin_path("devplug_sim");
    let (code, out) = devplug(&["info", "--no-env", "--ops", sim.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let after = |line: &str| -> String {
        let i = out
            .find(line)
            .unwrap_or_else(|| panic!("missing {line:?}:\n{out}"));
        out[i + line.len()..]
            .lines()
            .nth(1)
            .unwrap_or("")
            .trim()
            .to_string()
    };
    assert_eq!(
        after("  Add(x: T, y: T) -> (z: T) where T: {f32, f64, i32, i64, u8, f16, bf16}"),
        "kernels: CPU on HOST (built-in), SIM on SIM (plugin 'devplug_sim'; f32, f64, i32, i64)"
    );
    assert_eq!(
        after("  Gelu(x: T) -> (y: T) where T: {f32, f64, f16, bf16}"),
        "no kernel: runs as its decomposition"
    );
    assert_eq!(
        after("  Relu(x: T) -> (y: T) where T: {f32, f64, i32, i64, f16, bf16}"),
        "kernels: CPU on HOST (built-in); elsewhere: its decomposition"
    );
    assert!(out.contains("ops ("), "{out}");
    // Without --ops, no op list.
    let (_, plain) = devplug(&["info", "--no-env", sim.to_str().unwrap()]);
    assert!(!plain.contains("ops ("), "{plain}");
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

#[test]
fn bench_measures_a_plugin_next_to_the_cpu() {
    let sim = plugin_path("devplug_sim");
    let (code, out) = devplug(&["bench", sim.to_str().unwrap(), "-o", "devices=2"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("SIM:0 (devplug SIM simulated accelerator"),
        "{out}"
    );
    assert!(
        !out.contains("SIM:1"),
        "the first device of each platform only:\n{out}"
    );
    for row in [
        "copy host -> device, 64 MiB",
        "copy device -> host, 64 MiB",
        "eager Add, 16 f32, per op",
        "MatMul 256^3 f32",
        "MatMul 256^3 f32, device's clock",
    ] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(row))
            .unwrap_or_else(|| panic!("no row {row:?}:\n{out}"));
        assert!(line.contains(" ratio "), "{line}");
    }
    // A device without a kernel for an op says so (SIM with kernels=0 runs nothing natively).
    let (code, out) = devplug(&["bench", sim.to_str().unwrap(), "-o", "kernels=0"]);
    assert_eq!(code, 0, "{out}");
    let add = out
        .lines()
        .find(|l| l.trim_start().starts_with("eager Add"))
        .unwrap_or_else(|| panic!("no Add row:\n{out}"));
    assert!(add.ends_with("no kernel on this device"), "{out}");
}

#[test]
fn bench_without_devices_or_with_a_bad_plugin() {
    let cuda = plugin_path("devplug_cuda");
    let (code, out) = devplug(&["bench", cuda.to_str().unwrap(), "-o", "devices=0"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("registered no device: nothing to measure"),
        "{out}"
    );
    let zoo = zoo_path("init_error");
    let (code, out) = devplug(&["bench", zoo.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("devplug bench: "), "{out}");
    let (code, out) = devplug(&["bench"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("needs the path of a plugin"), "{out}");
}

/// Output piped into a reader that stops early (`devplug check PLUGIN | head -2`): the tool
/// ends as `ls` would, by SIGPIPE, without a panic or a poisoned lock on its standard error.
#[test]
fn a_closed_pipe_ends_the_tool_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let sim = plugin_path("devplug_sim");
    // SIM's slow streams keep the report coming for a second or two, well after the reader
    // has stopped.
    let mut child = Command::new(devplug_tests::tool())
        .args(["check", sim.to_str().unwrap(), "-o", "latency_us=20000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("devplug check "), "{first}");
    // The read end is closed here, with most of the report still to come.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.signal(), Some(13), "{:?}: {err}", out.status);
}
