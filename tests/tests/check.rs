//! `devplug check`, as a vendor runs it: the tool installed with the SDK (`bin/devplug`), on
//! the sample plugins (which conform) and on zoo plugins that do not — wrong kernel results, a
//! crash, a hang, a failing init — and with bad arguments.

use std::path::Path;

use devplug_tests::{devplug_tool as devplug, plugin_path, zoo_path};

fn check(plugin: &Path, extra: &[&str]) -> (i32, String) {
    let mut args = vec!["check", plugin.to_str().unwrap()];
    args.extend_from_slice(extra);
    devplug(&args)
}

#[test]
fn the_sample_plugins_conform() {
    let (code, out) = check(&plugin_path("devplug_sim"), &["-o", "devices=2"]);
    assert_eq!(code, 0, "{out}");
    for line in [
        "ok      load",
        "ok      SIM:0: synchronous copies and memset",
        "ok      SIM:0: streams, host callbacks and events",
        "ok      SIM:1: memory usage",
        "ok      SIM:1: event timing",
        "ok      SIM:0: kernel Add (f32) agrees with the CPU",
        "ok      SIM:1: kernel ReduceSum (i64) agrees with the CPU",
        "ok      SIM:0: kernel MatMul (f64) agrees with the CPU on edge shapes (batched [2, 2, 3] x [3, 4], \
         transpose_a, transpose_b, transpose_a and transpose_b, k = 0: [2, 0] x [0, 3], m = 0: \
         [0, 3] x [3, 4])",
        // Reductions of empty and rank-0 inputs.
        "ok      SIM:1: kernel ReduceSum (i32) agrees with the CPU on edge shapes (every axis, \
         axis 0 kept (keep_dims), a negative axis of a 3-D input, rank 0, [0, 3] over axis 1, \
         [0, 3] over axis 0)",
        "ok      SIM:0: kernel Add (i32) agrees with the CPU on edge shapes",
        "ok      unload",
        " 0 failed: conforms",
    ] {
        assert!(out.contains(line), "missing {line:?}:\n{out}");
    }
    // SIM declares the newest minor: one pass.
    assert!(out.contains("\nas an ABI 1.5 host:\n"), "{out}");
    assert!(!out.contains("declared minor"), "{out}");
    for (plugin, line) in [
        // RSIM, SIMDML and the CUDA plugin declare ABI 1.1: they conform as a 1.1 host too.
        (
            "devplug_rust_example",
            "as an ABI 1.1 host (the plugin's declared minor):",
        ),
        (
            "devplug_simdml",
            "as an ABI 1.1 host (the plugin's declared minor):",
        ),
        (
            "devplug_cuda",
            "as an ABI 1.1 host (the plugin's declared minor):",
        ),
        (
            "devplug_rust_example",
            "ok      NPU:0: kernel Add (f32) agrees with the CPU",
        ),
        // RSIM's f16 Add (it names f16 because this host has ABI 1.3 or newer), edge shapes included.
        (
            "devplug_rust_example",
            "ok      NPU:0: kernel Add (f16) agrees with the CPU on edge shapes",
        ),
        (
            "devplug_simdml",
            "ok      GPU:0: kernel Relu (f64) agrees with the CPU",
        ),
        ("devplug_simdml", "ok      GPU:0: event timing"),
        // SIMDML's own op: its body runs, and its kernel is compared with the body.
        (
            "devplug_simdml",
            "ok      op simdml.Swish (f64): its body runs on the CPU",
        ),
        (
            "devplug_simdml",
            "ok      GPU:0: kernel simdml.Swish (f32) agrees with its decomposition on the CPU\n",
        ),
        (
            "devplug_simdml",
            "ok      GPU:0: kernel simdml.Swish (f32) agrees with its decomposition on the CPU with \
             beta = 1.75",
        ),
        (
            "devplug_simdml",
            "ok      GPU:0: kernel simdml.Swish (f32) agrees with the CPU on edge shapes (rank 0, [0, \
             3])",
        ),
        // The CUDA plugin conforms with a GPU (every device function and kernel) and without
        // one (it loads with no devices and unloads).
        ("devplug_cuda", " 0 failed: conforms"),
    ] {
        let (code, out) = check(&plugin_path(plugin), &[]);
        assert_eq!(code, 0, "{plugin}: {out}");
        assert!(out.contains(line), "{plugin}: {out}");
    }
}

#[test]
fn an_optional_function_left_out_is_noted_not_failed() {
    let (code, out) = check(&zoo_path("se_memory_usage_null"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("note    ZOO:0: memory_usage is not provided (optional)"),
        "{out}"
    );
    // Event timing (ABI 1.4) is optional too: zoo plugins leave it out.
    assert!(
        out.contains("note    ZOO:0: event_elapsed_ns is not provided (optional, ABI 1.4)"),
        "{out}"
    );
    // A function left out is noted, not said to pass: no "ok" for either check.
    for check in ["ZOO:0: event timing", "ZOO:0: memory usage"] {
        assert!(
            !out.contains(&format!("ok      {check}")),
            "{check}:\n{out}"
        );
    }
}

/// Device addresses off the 256-byte alignment the guide requires (of a platform under the
/// host's suballocator) fail the check, although the host works around them.
#[test]
fn misaligned_device_addresses_fail_their_check() {
    let (code, out) = check(&zoo_path("misaligned"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: allocate returns 256-byte aligned addresses: INTERNAL: allocate(1) \
             returned 0x"
        ) && out.contains("8, not 256-byte aligned"),
        "{out}"
    );
    // The rest works, through the host's workaround.
    assert!(
        out.contains("ok      ZOO:0: synchronous copies and memset"),
        "{out}"
    );
    assert!(out.contains("1 failed: does NOT conform"), "{out}");
    // Sizes rounded to 64 bytes: the first address is aligned, the next one (made while the
    // first is held) is not.
    let (code, out) = check(&zoo_path("align_64"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: allocate returns 256-byte aligned addresses: INTERNAL: allocate(100) \
             returned 0x"
        ) && out.contains("40, not 256-byte aligned"),
        "{out}"
    );
    assert!(out.contains("1 failed: does NOT conform"), "{out}");
    let (code, out) = check(&zoo_path("good"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("ok      ZOO:0: allocate returns 256-byte aligned addresses"),
        "{out}"
    );
}

/// A reduction kernel right on ordinary shapes but wrong on an input of no elements (42s for a
/// sum over the empty axis of `[0, 3]`) or on a rank-0 input (-1) fails its edge-shape check,
/// naming the case; a right one passes every edge shape.
#[test]
fn a_reduction_wrong_on_empty_or_rank_0_inputs_fails_its_edge_check() {
    let edges = "ZOO:0: kernel ReduceSum (f32) agrees with the CPU on edge shapes (every axis, \
                 axis 0 kept (keep_dims), a negative axis of a 3-D input, rank 0, [0, 3] over \
                 axis 1, [0, 3] over axis 0)";
    let (code, out) = check(&zoo_path("reduce_sum"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("ok      {edges}")), "{out}");
    for (variant, why) in [
        (
            "reduce_sum_empty_bug",
            "[0, 3] over axis 0: output 0[0] is 42, the CPU's 0",
        ),
        (
            "reduce_sum_rank0_bug",
            "rank 0: output 0[0] is -1, the CPU's 1",
        ),
    ] {
        let (code, out) = check(&zoo_path(variant), &[]);
        assert_eq!(code, 1, "{variant}: {out}");
        assert!(
            out.contains(&format!("FAILED  {edges}: INTERNAL: {why}")),
            "{variant}: {out}"
        );
        assert!(
            out.contains("ok      ZOO:0: kernel ReduceSum (f32) agrees with the CPU\n"),
            "{variant}: {out}"
        );
        assert!(
            out.contains("1 failed: does NOT conform"),
            "{variant}: {out}"
        );
    }
}

/// A kernel may decline inputs (UNIMPLEMENTED): the check notes each declined case, neither
/// passed nor failed (the host runs them elsewhere), checks the rest, and the plugin conforms.
#[test]
fn cases_a_kernel_declines_are_noted_and_the_rest_checked() {
    let (code, out) = check(&zoo_path("reduce_sum_declines"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 failed: conforms"), "{out}");
    // The edge shapes that reduce to one element ran and agree; the others were declined.
    assert!(
        out.contains(
            "note    ZOO:0: kernel ReduceSum (f32) declined edge shapes (axis 0 kept (keep_dims), \
             a negative axis of a 3-D input, [0, 3] over axis 0), which the host then runs \
             elsewhere"
        ),
        "{out}"
    );
    assert!(
        out.contains("ok      ZOO:0: kernel ReduceSum (f32) agrees with the CPU on edge shapes"),
        "{out}"
    );
    // The ordinary sample reduces to two elements: declined, noted, not run.
    assert!(
        out.contains(
            "note    ZOO:0: kernel ReduceSum (f32) declined the sample inputs, which the host \
             then runs elsewhere: plugin 'zoo_reduce_sum_declines': kernel ReduceSum: zoo: \
             ReduceSum: more than 1 output elements\n"
        ),
        "{out}"
    );
    // Only the edge shapes that ran are named in the passed check.
    assert!(
        out.contains(
            "ok      ZOO:0: kernel ReduceSum (f32) agrees with the CPU on edge shapes (every \
             axis, rank 0, [0, 3] over axis 1)\n"
        ),
        "{out}"
    );
}

/// A kernel that declines every sample conforms (it gives no wrong answer), but the summary
/// says that a kernel check compared nothing.
#[test]
fn a_kernel_that_declines_every_sample_is_said_to_be_unchecked() {
    let (code, out) = check(&zoo_path("kernel_declines_all"), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "note    ZOO:0: kernel Add (f32) declined every sample: the check compared none of \
             its results with the CPU's (test it with inputs it takes)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "0 failed: conforms, but 1 kernel check(s) compared nothing (the kernel declined \
             every sample: see the notes)"
        ),
        "{out}"
    );
    // --require-compared makes that a failure, for CI.
    let (code, out) = check(&zoo_path("kernel_declines_all"), &["--require-compared"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "0 failed: does NOT conform with --require-compared: 1 kernel check(s) compared \
             nothing"
        ),
        "{out}"
    );
    let (code, out) = check(&zoo_path("good"), &["--require-compared"]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_kernel_with_wrong_results_fails_its_check() {
    let (code, out) = check(&zoo_path("kernel_zeros"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Add (f32) agrees with the CPU: INTERNAL: inputs [2, 3] and [3]: \
             output 0[0] is 0, the CPU's"
        ),
        "{out}"
    );
    // So does its edge-shape check, naming the shapes that failed first.
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Add (f32) agrees with the CPU on edge shapes ([2, 3] and [2, 3], \
             rank 0 and [2, 3], [2, 1] and [1, 3], [0, 3] and [3], signed fractions, halfway \
             cases): INTERNAL: \
             [2, 3] and [2, 3]: output 0[0] is 0"
        ),
        "{out}"
    );
    // The rest of the device conforms, and is said to.
    assert!(
        out.contains("ok      ZOO:0: synchronous copies and memset"),
        "{out}"
    );
    assert!(out.contains("2 failed: does NOT conform"), "{out}");
}

/// A plugin with two kernels for one op: each is checked alone and named by its priority, so
/// a wrong kernel below a right one fails (dispatch would run it only where the one above
/// declines, which the check cannot count on).
#[test]
fn each_of_several_kernels_for_one_op_is_checked_alone() {
    let (code, out) = check(&zoo_path("zeros_below_copy"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("ok      ZOO:0: kernel Reshape (f32, priority 10) agrees with the CPU\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Reshape (f32, priority 0) agrees with the CPU: INTERNAL: \
             input [2, 3]: output 0[0] is 0, the CPU's"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "ok      ZOO:0: kernel Reshape (f32, priority 10) agrees with the CPU on edge shapes"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Reshape (f32, priority 0) agrees with the CPU on edge shapes"
        ),
        "{out}"
    );
    assert!(out.contains("2 failed: does NOT conform"), "{out}");
}

/// An f16 kernel right on whole numbers but truncating its sums instead of rounding them to
/// nearest fails on the signed fractions, which f16 and bf16 elementwise arithmetic must give
/// bit for bit as the CPU does.
#[test]
fn an_f16_kernel_that_rounds_wrongly_fails_on_signed_fractions() {
    let (code, out) = check(&zoo_path("f16_add_truncates"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Add (f16) agrees with the CPU on edge shapes ([2, 3] and [2, \
             3], signed fractions, halfway cases): INTERNAL: signed fractions: output 0["
        ),
        "{out}"
    );
    assert!(out.contains("1 failed: does NOT conform"), "{out}");
}

/// ... and so must f32 results of those ops: an f32 Add that truncates its sums (one ulp off,
/// within any tolerance) fails too.
#[test]
fn an_f32_kernel_that_rounds_wrongly_fails_too() {
    let (code, out) = check(&zoo_path("f32_add_truncates"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Add (f32) agrees with the CPU on edge shapes ([2, 3] and [2, \
             3], signed fractions, halfway cases): INTERNAL: signed fractions: output 0["
        ),
        "{out}"
    );
    assert!(out.contains("1 failed: does NOT conform"), "{out}");
}

/// A device of little memory conforms too: the allocation checks fit a quarter of it, and
/// the host's allocator gives back what it keeps before the check that calls the plugin's
/// `allocate` directly (before, a SIM of 4 MiB failed there, out of memory).
#[test]
fn a_device_of_little_memory_conforms() {
    for memory in ["memory=4194304", "memory=1048576"] {
        let (code, out) = check(&plugin_path("devplug_sim"), &["-o", memory]);
        assert_eq!(code, 0, "{memory}:\n{out}");
        assert!(
            out.contains("ok      SIM:0: allocate returns 256-byte aligned addresses"),
            "{out}"
        );
    }
}

/// A kernel that writes past the end of its output corrupts whatever the host placed after it
/// (device memory is carved out of large regions, so no sanitizer sees it): the check puts
/// guard bytes after each output and fails a kernel that changed them. One that writes into
/// its input fails too.
#[test]
fn a_kernel_that_writes_past_its_output_or_into_its_input_fails() {
    let (code, out) = check(&zoo_path("kernel_writes_past_output"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Reshape (f32) agrees with the CPU: INTERNAL: input [2, 3]: \
             output 0 (f32 [3, 2]): the kernel wrote past the end of the output: 16 of the 256 \
             bytes after its 24 changed, the first at byte offset 24"
        ),
        "{out}"
    );
    let (code, out) = check(&zoo_path("kernel_writes_its_input"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Reshape (f32) agrees with the CPU: INTERNAL: input [2, 3]: \
             the kernel changed its input 0 (f32 [2, 3]): inputs are read-only"
        ),
        "{out}"
    );
}

/// An f16 Add that rounds to nearest but halfway cases away from zero (not to even) is right on
/// every signed fraction; the halfway cases find it.
#[test]
fn an_f16_kernel_that_rounds_ties_away_fails_on_halfway_cases() {
    let (code, out) = check(&zoo_path("f16_add_ties_away"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel Add (f16) agrees with the CPU on edge shapes ([2, 3] and [2, \
             3], signed fractions, halfway cases): INTERNAL: halfway cases: output 0[0] is \
             1.0009765625, the CPU's 1"
        ),
        "{out}"
    );
    assert!(out.contains("1 failed: does NOT conform"), "{out}");
}

/// A kernel for a plugin's own op is compared once more with the op's float attributes away
/// from their defaults: one that ignores an attribute fails there.
#[test]
fn a_kernel_that_ignores_an_attribute_fails_with_it_changed() {
    let (code, out) = check(&zoo_path("op_kernel_ignores_attr"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "ok      ZOO:0: kernel zoo.Op (f32) agrees with its decomposition on the CPU\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel zoo.Op (f32) agrees with its decomposition on the CPU with k = \
             4.75: INTERNAL: output 0[0] is 3, the CPU's 4.75"
        ),
        "{out}"
    );
    assert!(out.contains("1 failed: does NOT conform"), "{out}");
}

/// ... and with each int attribute one above and one below its default.
#[test]
fn a_kernel_that_ignores_an_int_attribute_fails_with_it_changed() {
    let (code, out) = check(&zoo_path("op_kernel_ignores_int_attr"), &[]);
    assert_eq!(code, 1, "{out}");
    for (k, want) in [(4, 4), (2, 2)] {
        let line = format!(
            "FAILED  ZOO:0: kernel zoo.Op (f32) agrees with its decomposition on the CPU with k = \
             {k}: INTERNAL: output 0[0] is 3, the CPU's {want}"
        );
        assert!(out.contains(&line), "{line}\n{out}");
    }
    assert!(out.contains("2 failed: does NOT conform"), "{out}");
}

/// A kernel for every dtype (ABI 1.3) is run in each dtype its op takes: Add's seven (every
/// dtype but bool), Reshape's eight; one from a plugin of ABI 1.2 takes no half dtype, so none
/// is run.
#[test]
fn a_kernel_for_every_dtype_is_checked_in_each_sampled_dtype() {
    let (code, out) = check(&zoo_path("kernel_all_dtypes"), &[]);
    assert_eq!(code, 1, "{out}");
    for dtype in ["f32", "f64", "i32", "i64", "u8", "f16", "bf16"] {
        let line = format!(
            "FAILED  ZOO:0: kernel Add ({dtype}) agrees with the CPU: INTERNAL: inputs [2, 3] and \
             [3]: output 0[0] is 0"
        );
        assert!(out.contains(&line), "missing {line:?}:\n{out}");
    }
    assert!(!out.contains("(bool)"), "{out}");
    assert!(out.contains("14 failed: does NOT conform"), "{out}");
    // It declares ABI 1.2: checked as a 1.5 host and as a 1.2 host, ten failures in each.
    let (code, out) = check(&zoo_path("kernel_all_dtypes_abi_1_2"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("(f16)") && !out.contains("(bf16)"), "{out}");
    assert!(
        out.contains(
            "20 failed: does NOT conform (as an ABI 1.5 host: 9 passed, 10 failed; as an ABI \
             1.2 host: 9 passed, 10 failed)"
        ),
        "{out}"
    );
    // A right kernel passes in every dtype, bool (values true, false, …) and u8 included.
    let (code, out) = check(&zoo_path("kernel_copy_all_dtypes"), &[]);
    assert_eq!(code, 0, "{out}");
    for dtype in ["f32", "f64", "i32", "i64", "u8", "bool", "f16", "bf16"] {
        let line = format!("ok      ZOO:0: kernel Reshape ({dtype}) agrees with the CPU");
        assert!(out.contains(&line), "missing {line:?}:\n{out}");
    }
}

#[test]
fn a_plugins_own_op_is_run_and_its_kernel_compared_with_its_body() {
    let (code, out) = check(&zoo_path("op_good"), &[]);
    assert_eq!(code, 0, "{out}");
    for dtype in ["f32", "f64"] {
        let line = format!("ok      op zoo.Op ({dtype}): its body runs on the CPU");
        assert!(out.contains(&line), "missing {line:?}:\n{out}");
    }
    // A kernel for it with wrong results fails, against the body (there is no CPU kernel).
    let (code, out) = check(&zoo_path("op_kernel_zeros"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel zoo.Op (f32) agrees with its decomposition on the CPU: \
             INTERNAL: input [2, 3]: output 0[0] is 0"
        ),
        "{out}"
    );
    assert!(
        out.contains("ok      op zoo.Op (f32): its body runs on the CPU"),
        "{out}"
    );
    // Its edge shapes, from its signature: every input rank 0, every input [0, 3].
    assert!(
        out.contains(
            "FAILED  ZOO:0: kernel zoo.Op (f32) agrees with the CPU on edge shapes (rank 0, [0, \
             3]): INTERNAL: rank 0: output 0[0] is 0, the CPU's 3"
        ),
        "{out}"
    );
}

#[test]
fn a_crash_is_reported_with_the_check_it_happened_in() {
    let (code, out) = check(&zoo_path("crash_in_memset"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "CRASHED the plugin killed the check process during 'ZOO:0: synchronous copies and memset' (signal 11, SIGSEGV)"
        ),
        "{out}"
    );
    assert!(out.contains("ok      ZOO:0: allocate and free"), "{out}");
    assert!(out.contains("does NOT conform"), "{out}");
}

#[test]
fn a_hang_is_reported_after_the_timeout() {
    let (code, out) = check(&zoo_path("hang_in_synchronize"), &["--timeout", "3"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "HUNG    no answer within 3 s during 'ZOO:0: streams, host callbacks and events'"
        ),
        "{out}"
    );
}

/// A stream that accepts host callbacks and never runs them: the check says which never ran,
/// not that they ran out of order.
#[test]
fn host_callbacks_that_never_run_are_named() {
    let (code, out) = check(&zoo_path("drops_host_callbacks"), &["--timeout", "20"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  ZOO:0: streams, host callbacks and events: INTERNAL: host callbacks [0, 1, 2] \
             of [0, 1, 2] never ran"
        ),
        "{out}"
    );
    assert!(!out.contains("out of order"), "{out}");
}

/// A plugin that logs an error of its own during the checks (a leak it found at
/// destroy_device) does not conform, however its functions answered: the last check names the
/// error. The sample plugins log none (`the_sample_plugins_conform`).
#[test]
fn an_error_the_plugin_logs_fails_the_check() {
    let (code, out) = check(&zoo_path("log_error_at_destroy"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "FAILED  the plugin logged no error: INTERNAL: 1 error(s) logged during the checks, \
             the first: plugin 'zoo_log_error_at_destroy': zoo: a device resource leaked (on \
             purpose)"
        ),
        "{out}"
    );
    assert!(out.contains("1 failed: does NOT conform"), "{out}");
}

#[test]
fn a_plugin_that_does_not_load_fails_the_load_check() {
    let (code, out) = check(&zoo_path("init_error"), &[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAILED  load:"), "{out}");
    assert!(
        out.contains("the simulated firmware did not answer"),
        "{out}"
    );
}

/// The output of one pass: from its heading (`as an ABI 1.N host…`) to the next heading or the
/// summary.
fn pass<'a>(out: &'a str, heading: &str) -> &'a str {
    let start = out
        .find(heading)
        .unwrap_or_else(|| panic!("no pass {heading:?}:\n{out}"));
    let rest = &out[start + heading.len()..];
    let end = ["\nas an ABI ", "\ndevplug check: "]
        .iter()
        .filter_map(|h| rest.find(h))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

/// A plugin that declares ABI 1.4 promises to load into 1.4 hosts: `devplug check` runs it as
/// the newest host and once more as a 1.4 host, whose kernel contexts are 80 bytes without
/// `state` and which never calls `create`. A kernel that reads `state` without checking
/// struct_size passes as a 1.5 host and fails as a 1.4 host, naming the value it read; one
/// that checks conforms in both.
#[test]
fn a_plugin_of_an_older_minor_is_checked_as_a_host_of_that_minor_too() {
    let kernel = "ZOO:0: kernel Reshape (f32) agrees with the CPU";
    let (code, out) = check(&zoo_path("kernel_state_1_4_unchecked"), &[]);
    assert_eq!(code, 1, "{out}");
    let newest = pass(&out, "as an ABI 1.5 host:\n");
    assert!(newest.contains(&format!("ok      {kernel}\n")), "{out}");
    assert!(!newest.contains("FAILED"), "{out}");
    let declared = pass(&out, "as an ABI 1.4 host (the plugin's declared minor):\n");
    assert!(
        declared.contains(&format!(
            "FAILED  {kernel}: INTERNAL: input [2, 3]: Reshape on ZOO:0 (kernel from plugin \
             'zoo_kernel_state_1_4_unchecked'): plugin 'zoo_kernel_state_1_4_unchecked': kernel \
             Reshape: zoo: compute got state 0xd0d0d0d0d0d0d0d0, which no create of this plugin \
             made (the context's struct_size is 80)"
        )),
        "{out}"
    );
    assert!(declared.contains("ok      load\n"), "{out}");
    assert!(
        out.contains(
            "2 failed: does NOT conform (as an ABI 1.5 host: 11 passed, 0 failed; as an ABI 1.4 \
             host: 9 passed, 2 failed)"
        ),
        "{out}"
    );

    let (code, out) = check(&zoo_path("kernel_state_1_4"), &[]);
    assert_eq!(code, 0, "{out}");
    for heading in [
        "as an ABI 1.5 host:\n",
        "as an ABI 1.4 host (the plugin's declared minor):\n",
    ] {
        assert!(
            pass(&out, heading).contains(&format!("ok      {kernel}\n")),
            "{heading}{out}"
        );
    }
    assert!(out.contains(" 0 failed: conforms"), "{out}");
}

/// `--host-abi 1.N` runs one pass, as a host of ABI 1.N: a plugin of a newer minor fails to
/// load, as in a real host of that minor.
#[test]
fn host_abi_runs_one_pass_as_that_host() {
    let plugin = zoo_path("kernel_state_1_4_unchecked");
    let (code, out) = check(&plugin, &["--host-abi", "1.5"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("\nas an ABI 1.5 host (--host-abi):\n"),
        "{out}"
    );
    assert!(!out.contains("1.4 host"), "{out}");
    let (code, out) = check(&plugin, &["--host-abi", "1.4"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("\nas an ABI 1.4 host (--host-abi):\n"),
        "{out}"
    );
    assert!(!out.contains("1.5 host"), "{out}");
    assert!(
        out.contains("9 passed, 2 failed: does NOT conform\n"),
        "{out}"
    );
    let (code, out) = check(&plugin, &["--host-abi", "1.3"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAILED  load: ABI_MISMATCH: plugin '",)
            && out.contains(
                "': built against plugin ABI 1.4, but this host implements ABI 1.3 (the plugin's \
             minor version is newer)"
            ),
        "{out}"
    );
}

#[test]
fn bad_arguments_are_usage_errors() {
    for (args, says) in [
        (vec![], "no command"),
        (vec!["frobnicate"], "unknown command 'frobnicate'"),
        (vec!["check"], "check needs the path of a plugin"),
        (
            vec!["check", "/nonexistent/libnothing.so"],
            "/nonexistent/libnothing.so",
        ),
        (vec!["check", "/dev/null", "-o"], "-o needs KEY=VALUE"),
        (
            vec!["check", "/dev/null", "-o", "novalue"],
            "expected KEY=VALUE",
        ),
        (
            vec!["check", "/dev/null", "--timeout", "0"],
            "positive number of seconds",
        ),
        (
            vec!["check", "/dev/null", "--verbose"],
            "unknown option '--verbose'",
        ),
        (
            vec!["check", "/dev/null", "--host-abi"],
            "--host-abi needs a plugin ABI version, 1.0 to 1.5",
        ),
        (
            vec!["check", "/dev/null", "--host-abi", "2.0"],
            "--host-abi 2.0: devplug speaks plugin ABI 1.0 to 1.5; major version 2 is not one",
        ),
        (
            vec!["check", "/dev/null", "--host-abi", "1.9"],
            "--host-abi 1.9: devplug speaks plugin ABI 1.0 to 1.5; 1.9 is newer than any",
        ),
        (
            vec!["check", "/dev/null", "--host-abi", "x"],
            "--host-abi x: expected a plugin ABI version MAJOR.MINOR, 1.0 to 1.5",
        ),
        (
            vec!["check", "/dev/null", "--host-abi", "1.04"],
            "--host-abi 1.04: expected a plugin ABI version",
        ),
    ] {
        let (code, out) = devplug(&args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(out.contains(says), "{args:?}: {out}");
        assert!(out.contains("usage: devplug check"), "{args:?}: {out}");
    }
    // `check --help` is no error: the usage, with --host-abi.
    let (code, out) = devplug(&["check", "--help"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("usage: devplug check PLUGIN") && out.contains("--host-abi 1.N"),
        "{out}"
    );
    let (code, out) = devplug(&["--version"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("devplug 0."), "{out}");
}
