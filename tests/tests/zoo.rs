//! The malformed-plugin zoo (RELIABILITY.md, "Loading"): plugins/zoo/zoo.c compiled into one
//! library per fault, each loaded here into a runtime that already holds a good zoo plugin.
//! Every refusal is checked for its exact code, a message that names the plugin and the
//! struct/field or reason, its entry in `plugin_failures()`, a full rollback (nothing
//! registered, everything the plugin made destroyed) and a runtime that keeps working.
//!
//! Tests run in parallel threads of one process. Only one test touches the environment
//! (`DEVPLUG_PLUGIN_PATH`); it holds [`ENV`] for writing while every other test holds it for
//! reading, and every other runtime is created with `discover_from_env: false`.

use std::os::unix::process::ExitStatusExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use devplug_core::{
    Attrs, Code, DevicePtr, Error, EventStatus, PluginFailure, Reason, RunOptions, Runtime,
    RuntimeOptions, Tensor,
};
use devplug_tests::{runtime, zoo_path, TempDir, ZooReshape};

// ---------------------------------------------------------------------------------------------
// Helpers

/// Guards the process environment (see the module comment).
static ENV: RwLock<()> = RwLock::new(());

/// Taken once at the start of every test but the one that sets the environment.
fn env_shared() -> RwLockReadGuard<'static, ()> {
    ENV.read().unwrap_or_else(|e| e.into_inner())
}

fn platform_names(rt: &Runtime) -> Vec<String> {
    rt.platforms().iter().map(|p| p.info.name.clone()).collect()
}

fn device_names(rt: &Runtime) -> Vec<String> {
    rt.devices().iter().map(|d| d.qualified_name()).collect()
}

fn plugin_names(rt: &Runtime) -> Vec<String> {
    rt.plugins().into_iter().map(|p| p.name).collect()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

fn read_all(b: &devplug_core::Buffer) -> Vec<u8> {
    let mut v = vec![0u8; b.size() as usize];
    b.read(0, &mut v).unwrap();
    v
}

/// The built-in CPU still allocates and round-trips bytes.
fn assert_cpu_works(rt: &Runtime) {
    let cpu = rt.find_device("CPU:0").unwrap();
    let data = pattern(1000, 3);
    let b = cpu.allocate(1000).unwrap();
    b.write(0, &data).unwrap();
    assert_eq!(read_all(&b), data, "CPU round trip");
}

/// A zoo device does everything a device does: allocate, copy both ways and within, memset,
/// streams, events, host callbacks; and it refuses addresses outside its allocations.
fn assert_zoo_device_works(rt: &Runtime, spec: &str) {
    const N: usize = 4096;
    let d = rt.find_device(spec).unwrap();
    let cpu = rt.find_device("CPU:0").unwrap();
    assert!(!d.host_visible(), "{spec}: zoo memory is not host memory");

    // synchronous copies and memset
    let data = pattern(N, 11);
    let a = d.allocate(N as u64).unwrap();
    a.write(0, &data).unwrap();
    assert_eq!(read_all(&a), data, "{spec}: host → device → host");
    a.memset(100, 0xAB, 50).unwrap();
    let mut expect = data.clone();
    expect[100..150].fill(0xAB);
    assert_eq!(read_all(&a), expect, "{spec}: memset");
    let b = d.allocate(N as u64).unwrap();
    b.copy_from(0, &a, 0, N as u64).unwrap();
    assert_eq!(read_all(&b), expect, "{spec}: device → device");
    let c = cpu.allocate(N as u64).unwrap();
    c.copy_from(0, &b, 0, N as u64).unwrap();
    assert_eq!(read_all(&c), expect, "{spec}: device → CPU");

    // a stream, an event, a host callback, a second stream that waits
    let s = d.create_stream().unwrap();
    let data2 = pattern(N, 77);
    s.write(&a, 0, data2.clone()).unwrap();
    s.memset(&a, 8, 0x11, 8).unwrap();
    let mut out = vec![0u8; N];
    // SAFETY: `out` lives until after the stream is synchronized below.
    unsafe { s.read_raw(&a, 0, out.as_mut_ptr(), N as u64).unwrap() };
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    s.host_callback(Box::new(move || flag.store(true, Ordering::SeqCst)))
        .unwrap();
    let ev = d.create_event().unwrap();
    ev.record(&s).unwrap();
    ev.synchronize().unwrap();
    assert_eq!(ev.status().unwrap(), EventStatus::Complete);
    let s2 = d.create_stream().unwrap();
    s2.wait_event(&ev).unwrap();
    s2.wait_stream(&s).unwrap();
    s2.copy(&b, 0, &a, 0, N as u64).unwrap();
    s2.synchronize().unwrap();
    s.synchronize().unwrap();
    let mut expect2 = data2.clone();
    expect2[8..16].fill(0x11);
    assert_eq!(out, expect2, "{spec}: stream-ordered copies");
    assert!(ran.load(Ordering::SeqCst), "{spec}: the host callback ran");
    assert_eq!(read_all(&b), expect2, "{spec}: stream device → device");
    d.synchronize().unwrap();

    // The plugin checks device addresses itself (the buffer API checks ranges first, so go
    // to the executor): an address far outside every allocation is refused with its message.
    let far = DevicePtr(0x2000_0000_0000_0000 + (1 << 40));
    let e = d.executor().memset(far, 0, 16).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(
        e.message.contains("memset") && e.message.contains("outside every live allocation"),
        "{e}"
    );
}

/// A file the plugin appends lines to (load option `marker`).
struct Marker {
    _dir: TempDir,
    path: PathBuf,
}

impl Marker {
    fn new(label: &str) -> Marker {
        let dir = TempDir::new(&format!("zoo-marker-{label}"));
        let path = dir.path().join("marker.txt");
        Marker { _dir: dir, path }
    }

    fn option(&self) -> &str {
        self.path.to_str().expect("temp paths are UTF-8")
    }

    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn has(&self, line: &str) -> bool {
        self.lines().iter().any(|l| l == line)
    }
}

/// Everything the plugin made was destroyed: every registered platform, every created device,
/// and, when init succeeded, the plugin itself (shutdown).
fn assert_nothing_left(variant: &str, marker: &Marker) {
    let lines = marker.lines();
    let has = |l: String| lines.contains(&l);
    for l in &lines {
        if let Some(p) = l.strip_prefix("registered ") {
            assert!(
                has(format!("destroy_platform {p}")),
                "{variant}: platform {p} was registered and never destroyed; plugin log: {lines:?}"
            );
        }
        if let Some(d) = l.strip_prefix("created ") {
            assert!(
                has(format!("destroy_device {d}")),
                "{variant}: device {d} was created and never destroyed; plugin log: {lines:?}"
            );
        }
        if let Some(p) = l.strip_prefix("init ok ") {
            assert!(
                has(format!("shutdown {p}")),
                "{variant}: init succeeded but shutdown was never called; plugin log: {lines:?}"
            );
        }
    }
}

/// A runtime holding the good plugin `zoo_a` (platform ZOOA) and the outcome of loading
/// `variant` next to it.
struct Refusal {
    rt: Runtime,
    err: Error,
    marker: Marker,
}

/// Loads `variant` beside a good plugin and checks that it is refused with `code` and a
/// message holding every one of `needles` and the plugin's name or path; that the failure is
/// listed; that nothing of it stays registered or alive; that the runtime and the good
/// plugin's device still work.
fn refuse(variant: &str, code: Code, needles: &[&str]) -> Refusal {
    let rt = runtime();
    let good = rt.load_plugin(zoo_path("a"), &[]).unwrap();
    assert_eq!(good.platforms, ["ZOOA"]);
    let (platforms, devices) = (platform_names(&rt), device_names(&rt));

    let path = zoo_path(variant);
    let marker = Marker::new(variant);
    let err = match rt.load_plugin(&path, &[("marker", marker.option())]) {
        Ok(info) => panic!("zoo variant '{variant}' must be refused, but it loaded: {info:?}"),
        Err(e) => e,
    };
    assert_eq!(err.code, code, "{variant}: wrong code; error: {err}");
    let shown = path.display().to_string();
    let plugin = format!("'zoo_{variant}'");
    assert!(
        err.message.contains(&shown) || err.message.contains(&plugin),
        "{variant}: the message names neither the plugin {plugin} nor its path {shown}: {err}"
    );
    for needle in needles {
        assert!(
            err.message.contains(needle),
            "{variant}: the message lacks `{needle}`: {err}"
        );
    }
    assert_eq!(
        rt.plugin_failures(),
        [PluginFailure {
            path: path.clone(),
            error: err.clone()
        }],
        "{variant}: the failure list"
    );
    assert_eq!(plugin_names(&rt), ["zoo_a"], "{variant}: plugins");
    assert_eq!(platform_names(&rt), platforms, "{variant}: platforms");
    assert_eq!(device_names(&rt), devices, "{variant}: devices");
    assert_nothing_left(variant, &marker);
    assert_cpu_works(&rt);
    assert_zoo_device_works(&rt, "ZOOA:0");
    Refusal { rt, err, marker }
}

/// One test per refused variant: `name: "variant" => CODE ["needle", ...];`
macro_rules! refused {
    ($($test:ident: $variant:literal => $code:ident [$($needle:expr),* $(,)?];)*) => {
        $(
            #[test]
            fn $test() {
                let _env = env_shared();
                refuse($variant, Code::$code, &[$($needle),*]);
            }
        )*
    };
}

// ---------------------------------------------------------------------------------------------
// Refused variants, one fault each

refused! {
    // the library and its entry point
    entry_symbol_missing: "no_entry" => NotFound
        ["no devplug entry point", "'devplug_plugin_entry'"];
    entry_returns_null: "entry_null" => InvalidArgument ["devplug_plugin_entry() returned NULL"];
    // the entry's name on data (a pointer, as a Rust `static` would be): never called
    entry_symbol_is_data: "entry_data" => InvalidArgument
        ["its 'devplug_plugin_entry' is data, not a function"];

    // dpp_plugin_api_t: versions
    abi_major_differs: "abi_major" => AbiMismatch
        ["plugin ABI 2.0", "host implements ABI 1.5", "major"];
    abi_minor_newer_than_host: "abi_minor_newer" => AbiMismatch
        ["plugin ABI 1.99", "host implements ABI 1.5", "minor"];

    // dpp_plugin_api_t: struct_size and fields
    api_struct_size_zero: "api_size_0" => InvalidArgument
        ["dpp_plugin_api_t.struct_size", "is 0"];
    api_struct_size_16: "api_size_16" => InvalidArgument
        ["dpp_plugin_api_t.struct_size", "is 16"];
    api_struct_size_40: "api_size_40" => InvalidArgument
        ["dpp_plugin_api_t.struct_size", "is 40", "56"];
    init_null: "init_null" => InvalidArgument ["dpp_plugin_api_t.init", "NULL"];
    plugin_name_null: "name_null" => InvalidArgument ["dpp_plugin_api_t.name", "NULL"];
    plugin_name_invalid: "name_invalid" => InvalidArgument
        ["dpp_plugin_api_t.name", "'bad name!'"];
    plugin_name_not_terminated_within_64: "name_long" => InvalidArgument
        ["dpp_plugin_api_t.name", "NUL-terminated within 64"];

    // dpp_platform_t
    platform_struct_size_too_small: "platform_size_small" => InvalidArgument
        ["dpp_platform_t.struct_size", "is 48", "96"];
    platform_name_lowercase: "platform_name_lower" => InvalidArgument
        ["dpp_platform_t.name", "'zoo'"];
    platform_name_longer_than_64: "platform_name_long" => InvalidArgument
        ["dpp_platform_t.name",
         "'ZOO_PLATFORM_NAME_THAT_IS_LONGER_THAN_SIXTY_FOUR_CHARACTERS_0123456789'", "64"];
    device_type_empty: "device_type_empty" => InvalidArgument
        ["dpp_platform_t.device_type", "''"];
    device_type_longer_than_64: "device_type_long" => InvalidArgument
        ["dpp_platform_t.device_type",
         "'ZOO_DEVICE_TYPE_THAT_IS_LONGER_THAN_SIXTY_FOUR_CHARACTERS_0123456789'", "64"];
    platform_name_not_terminated_within_256: "platform_name_unterminated" => InvalidArgument
        ["dpp_platform_t.name", "NUL-terminated within 256"];
    platform_flags_unknown: "flags_unknown" => InvalidArgument
        ["dpp_platform_t.flags", "0x80"];
    device_count_negative: "device_count_negative" => InvalidArgument
        ["dpp_platform_t.device_count", "-1"];
    create_device_null: "create_device_null" => InvalidArgument
        ["dpp_platform_t.create_device", "NULL"];
    destroy_device_null: "destroy_device_null" => InvalidArgument
        ["dpp_platform_t.destroy_device", "NULL"];

    // conflicts with what is registered
    platform_name_of_another_plugin: "platform_name_taken" => AlreadyExists
        ["'ZOOA'", "plugin 'zoo_a'", "plugin 'zoo_platform_name_taken'"];
    platform_name_of_the_builtin_host: "platform_name_host" => AlreadyExists
        ["'HOST'", "built-in", "plugin 'zoo_platform_name_host'"];
    cpu_type_at_the_builtin_priority: "cpu_priority_0" => AlreadyExists
        ["'ZOOCPU'", "'CPU'", "priority 0", "'HOST'", "built-in"];

    // init
    init_fails_with_its_own_message: "init_error" => Internal
        ["zoo: the simulated firmware did not answer"];
    init_returns_an_unknown_status_silently: "init_unknown_status_silent" => Internal
        ["12345"];

    // dpp_kernel_t and dpp_op_def_t (ABI 1.1 and 1.2)
    kernel_struct_size_too_small: "kernel_size_small" => InvalidArgument
        ["dpp_kernel_t.struct_size", "is 8", "80", "its op is not read"];
    kernel_compute_null: "kernel_compute_null" => InvalidArgument
        ["kernel Add on ZOO: dpp_kernel_t.compute is NULL"];
    kernel_destroy_without_create: "kernel_destroy_only" => InvalidArgument
        ["kernel Reshape on ZOO: dpp_kernel_t.destroy is set but create is NULL"];
    op_def_struct_size_too_small: "op_def_size_small" => InvalidArgument
        ["dpp_op_def_t.struct_size", "is 16", "64"];

    // dpp_device_t and dpp_stream_executor_t (checked when the device is created)
    executor_struct_size_too_small: "se_size_small" => InvalidArgument
        ["dpp_stream_executor_t.struct_size", "is 64", "240"];
    executor_memcpy_htod_null: "se_memcpy_htod_null" => InvalidArgument
        ["dpp_stream_executor_t.memcpy_htod", "NULL"];
    executor_create_stream_null: "se_create_stream_null" => InvalidArgument
        ["dpp_stream_executor_t.create_stream", "NULL"];
    executor_event_status_null: "se_event_status_null" => InvalidArgument
        ["dpp_stream_executor_t.event_status", "NULL"];
    executor_synchronize_all_null: "se_synchronize_all_null" => InvalidArgument
        ["dpp_stream_executor_t.synchronize_all", "NULL"];
    executor_host_callback_null: "se_host_callback_null" => InvalidArgument
        ["dpp_stream_executor_t.host_callback", "NULL"];
    executor_host_allocate_without_host_deallocate: "host_allocate_only" => InvalidArgument
        ["dpp_stream_executor_t.host_allocate", "host_deallocate"];
    executor_unified_allocate_without_unified_deallocate: "unified_allocate_only" => InvalidArgument
        ["dpp_stream_executor_t.unified_allocate", "unified_deallocate"];

    // ops of the plugin's own (ABI 1.2): the text is checked when the load commits, after a
    // successful init, and a mistake undoes the whole load (its platform included)
    op_body_calls_an_unknown_op: "op_unknown_op" => InvalidArgument
        ["op 'zoo.Op'", "body", "Frobnicate"];
    op_body_with_a_syntax_error: "op_syntax" => InvalidArgument
        ["op 'zoo.Op'", "body", "Neg(x"];
    op_body_leaves_an_output_unassigned: "op_output_unassigned" => InvalidArgument
        ["op 'zoo.Op'", "'y'"];
    op_name_without_a_namespace: "op_no_namespace" => InvalidArgument
        ["op 'Swish'", "namespace"];
    op_name_of_a_core_op: "op_core_name" => InvalidArgument ["op 'Add'", "namespace"];

    // kernels: every refusal names the kernel (its op and device type, as far as readable)
    kernel_dtype_unknown: "kernel_dtype_unknown" => InvalidArgument
        ["kernel Add on ZOO: dpp_kernel_t.dtypes[0] is 9, not a DPP_DTYPE_* value"];
    kernel_dtypes_null: "kernel_dtypes_null" => InvalidArgument
        ["kernel Add on ZOO: dpp_kernel_t.dtypes is NULL but num_dtypes is 3"];
    kernel_device_type_lowercase: "kernel_device_type_lower" => InvalidArgument
        ["kernel Add on 'zoo': dpp_kernel_t.device_type is invalid", "'zoo'"];
    // a kernel that names no platform of its plugin: the advice is to register the platform
    // first, or to give the kernel its platform's device type, never to "name one"
    kernel_registered_before_its_platform: "kernel_before_platform" => InvalidArgument
        ["kernel Add on ZOO: dpp_kernel_t.platform is NULL, and this plugin has registered no \
          platform of type ZOO (yet): register the platform before its kernels (it registered: \
          none)"];
    kernel_for_a_device_type_without_a_platform: "kernel_device_type_other" => InvalidArgument
        ["kernel Add on NPU: dpp_kernel_t.platform is NULL, and this plugin has registered no \
          platform of type NPU (yet): register the platform before its kernels (it registered: \
          ZOO (type ZOO))"];
    kernel_naming_its_platform_with_another_type: "kernel_platform_of_other_type" => InvalidArgument
        ["kernel Add on NPU: dpp_kernel_t.platform is 'ZOO', a platform of type ZOO, not NPU"];
    // a dtype the op's first type variable does not take: refused when the load commits
    // (after init, once the plugin's own ops are known), naming the kernel, the op, the dtype
    // and the dtypes the op takes
    kernel_dtype_the_op_does_not_take: "kernel_dtype_not_of_op" => InvalidArgument
        ["kernel Add on ZOO: dpp_kernel_t.dtypes[0] is bool, which op Add does not take (its \
          type variable T takes f32, f64, i32, i64, u8, f16, bf16)"];
    kernel_reduce_sum_of_bool: "kernel_reduce_sum_bool" => InvalidArgument
        ["kernel ReduceSum on ZOO: dpp_kernel_t.dtypes[0] is bool, which op ReduceSum does not \
          take"];
    kernel_dtype_its_own_op_does_not_take: "op_kernel_dtype_not_of_op" => InvalidArgument
        ["kernel zoo.Op on ZOO: dpp_kernel_t.dtypes[0] is i32, which op zoo.Op does not take \
          (its type variable T takes f32, f64)"];
    // a kernel for an op of its own that it never registered: the plugin's file, and the hint
    kernel_for_an_unregistered_own_op: "kernel_unregistered_op" => NotFound
        ["plugin 'zoo_kernel_unregistered_op' (", "libzoo_kernel_unregistered_op.so) registered \
          a kernel for an unknown op (an op of the plugin's own needs its register_op call in \
          init)", "zoo.Gelu2"];
}

#[test]
fn a_plugins_op_runs_through_its_body_and_its_name_is_then_taken() {
    let _env = env_shared();
    let rt = runtime();
    rt.load_plugin(zoo_path("op_good"), &[]).unwrap();
    let op = rt.op("zoo.Op").expect("the plugin's op is registered");
    assert!(op.def().decomposition.is_some());
    // ZOO has no kernel for it and is not host-visible: the CPU runs the body (Mul(x, 3)).
    let cpu = rt.find_device("CPU:0").unwrap();
    let x = devplug_core::Tensor::from_slice(&cpu, &[3], &[1.0f32, -2.0, 0.5]).unwrap();
    let none = devplug_core::Attrs::new();
    let y = rt
        .run(&op, std::slice::from_ref(&x), &none, &Default::default())
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [3.0, -6.0, 1.5]);
    // its dtype rule is the declared one, naming the op
    let i = devplug_core::Tensor::from_slice(&cpu, &[1], &[1i32]).unwrap();
    let e = rt
        .run(&op, std::slice::from_ref(&i), &none, &Default::default())
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("zoo.Op"), "{e}");

    // A second plugin defining the same op is refused, and nothing of it stays.
    let path = zoo_path("op_same_name");
    let marker = Marker::new("op_same_name");
    let e = rt
        .load_plugin(&path, &[("marker", marker.option())])
        .unwrap_err();
    assert_eq!(e.code, Code::AlreadyExists, "{e}");
    assert!(
        e.message.contains("'zoo.Op'") && e.message.contains("zoo_op_same_name"),
        "{e}"
    );
    assert_nothing_left("op_same_name", &marker);
    assert!(!platform_names(&rt).contains(&"ZOOOP".to_string()));
    assert_eq!(plugin_names(&rt), ["zoo_op_good"]);
    let y = rt.run(&op, &[x], &none, &Default::default()).unwrap();
    assert_eq!(
        y[0].to_vec::<f32>().unwrap(),
        [3.0, -6.0, 1.5],
        "the first op stays"
    );
}

/// A kernel for "every dtype" means every dtype the plugin knows of: from a plugin built
/// against ABI 1.3 it takes f16 and bf16 too; from one of 1.2, which has no such values, only
/// the dtypes of its ABI that the op takes, and an f16 op on its device runs elsewhere (the CPU, by soft
/// placement), never through a kernel that would read two-byte elements it does not expect.
/// A plugin declaring 1.2 that names f16 (having read the host's version) gets it.
#[test]
fn a_kernel_for_every_dtype_takes_the_dtypes_its_abi_knows() {
    use devplug_core::half::f16;
    use devplug_core::{Attrs, DType, RunOptions, Tensor};
    let _env = env_shared();
    for (variant, takes_halves) in [
        ("kernel_all_dtypes", true),
        ("kernel_all_dtypes_abi_1_2", false),
        ("kernel_f16_abi_1_2", true),
    ] {
        let rt = runtime();
        rt.load_plugin(zoo_path(variant), &[]).unwrap();
        let k = rt
            .kernels()
            .all()
            .into_iter()
            .find(|k| k.source == format!("plugin 'zoo_{variant}'"))
            .unwrap();
        if variant == "kernel_f16_abi_1_2" {
            // Named explicitly: taken, whatever ABI the plugin declared.
            assert_eq!(k.dtypes, [DType::F16], "{variant}");
        } else if takes_halves {
            assert!(k.dtypes.is_empty(), "{variant}: {:?}", k.dtypes);
        } else {
            // The dtypes of ABI 1.0-1.2 that Add takes (bool is not one).
            assert_eq!(
                k.dtypes,
                [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8],
                "{variant}"
            );
        }
        let zoo = rt.find_device("ZOO:0").unwrap();
        let x = Tensor::from_slice(&zoo, &[3], &[f16::from_f32(1.5); 3]).unwrap();
        let y = rt
            .run(
                &rt.op("Add").unwrap(),
                &[x.clone(), x],
                &Attrs::new(),
                &RunOptions {
                    device: Some(zoo),
                    soft_placement: Some(true),
                },
            )
            .unwrap();
        let got: Vec<f32> = y[0]
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|h| h.to_f32())
            .collect();
        // The zoo's kernel writes zeros; the CPU adds.
        let want = if takes_halves { [0.0; 3] } else { [3.0; 3] };
        assert_eq!(got, want, "{variant}");
    }
}

/// A kernel's dtypes constrain its type variable only: Cast from f32 to f16 on the device of a
/// plugin of ABI 1.2 (which knows no f16) finds its kernel by the input's f32, but the host
/// declines the launch for it (UNIMPLEMENTED, naming the plugin, the kernel and the f16
/// output) instead of handing the plugin a dtype value it never heard of. Like any declining
/// kernel, that is the fallback order's next step: soft placement to the CPU (Cast has no
/// decomposition), logged with the reason; strict, the error. To i32 the plugin's kernel runs.
#[test]
fn a_plugin_older_than_1_3_is_never_handed_a_half_tensor() {
    use devplug_core::{AttrValue, DType, Tensor};
    let _env = env_shared();
    let rt = runtime();
    rt.load_plugin(zoo_path("kernel_cast_abi_1_2"), &[])
        .unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let x = Tensor::from_slice(&zoo, &[3], &[1.5f32, 2.5, -1.0]).unwrap();
    let cast = rt.op("Cast").unwrap();
    let to = |d: DType| Attrs::new().with("dtype", AttrValue::DType(d));
    let strict = RunOptions::on(&zoo).strict();
    let e = rt
        .run(&cast, std::slice::from_ref(&x), &to(DType::F16), &strict)
        .unwrap_err();
    assert_eq!(e.code, Code::Unimplemented, "{e}");
    for needle in [
        "plugin 'zoo_kernel_cast_abi_1_2' (ABI 1.2)",
        "kernel Cast",
        "output 0, a f16 tensor",
        "ABI 1.3",
    ] {
        assert!(e.message.contains(needle), "{needle}: {e}");
    }
    assert!(e.message.contains("soft placement to the CPU"), "{e}");
    let log = devplug_tests::record_placements(&rt);
    let y = rt
        .run(
            &cast,
            std::slice::from_ref(&x),
            &to(DType::F16),
            &RunOptions::on(&zoo),
        )
        .unwrap();
    assert_eq!(y[0].device().platform().info.name, "HOST");
    let halves: Vec<f32> = y[0]
        .to_vec::<devplug_core::half::f16>()
        .unwrap()
        .iter()
        .map(|h| h.to_f32())
        .collect();
    assert_eq!(halves, [1.5, 2.5, -1.0]);
    let events = log.lock().unwrap().clone();
    let soft = events
        .iter()
        .find(|e| e.reason == devplug_core::Reason::SoftPlaced)
        .expect("a soft placement");
    assert!(
        soft.detail.starts_with(
            "the kernel from plugin 'zoo_kernel_cast_abi_1_2' on ZOO:0 declined (plugin"
        ),
        "{soft:?}"
    );
    assert!(soft.detail.contains("a f16 tensor"), "{soft:?}");
    // The zoo's kernel writes zeros.
    let y = rt
        .run(&cast, std::slice::from_ref(&x), &to(DType::I32), &strict)
        .unwrap();
    assert_eq!(y[0].to_vec::<i32>().unwrap(), [0, 0, 0]);
}

/// A string attribute of a plugin's op reaches the plugin's kernel (attr_string, ABI 1.2):
/// its default, a value the host set, and the host's type check before the kernel runs.
#[test]
fn a_plugins_kernel_reads_a_string_attribute() {
    use devplug_core::{AttrValue, Attrs, RunOptions, Tensor};
    let _env = env_shared();
    let rt = runtime();
    rt.load_plugin(zoo_path("op_string_attr"), &[]).unwrap();
    let op = rt.op("zoo.Op").unwrap();
    let label = op.def().attrs.iter().find(|a| a.name == "label").unwrap();
    assert_eq!(label.default, Some(AttrValue::Str("zoo".into())));
    let zoo = rt.find_device("ZOO:0").unwrap();
    let strictly = RunOptions {
        device: Some(zoo.clone()),
        soft_placement: Some(false),
    };
    let x = Tensor::from_slice(&zoo, &[5], &[1.0f32; 5]).unwrap();
    let run = |attrs: &Attrs| rt.run(&op, std::slice::from_ref(&x), attrs, &strictly);
    let y = run(&Attrs::new()).unwrap();
    assert_eq!(
        y[0].to_vec::<f32>().unwrap(),
        [122.0, 111.0, 111.0, 0.0, 0.0]
    );
    let y = run(&Attrs::new().with("label", AttrValue::Str("h\u{e9}".into()))).unwrap();
    assert_eq!(
        y[0].to_vec::<f32>().unwrap(),
        [104.0, 195.0, 169.0, 0.0, 0.0],
        "UTF-8 bytes"
    );
    let y = run(&Attrs::new().with("label", AttrValue::Str(String::new()))).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [0.0; 5]);
    // Another type is refused by the host, naming the op and the attribute.
    let e = run(&Attrs::new().with("label", AttrValue::Int(3))).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(
        e.message.contains("zoo.Op") && e.message.contains("label"),
        "{e}"
    );
    // The CPU runs the body (Neg), which has no use for the label.
    let cpu = rt.find_device("CPU:0").unwrap();
    let x = Tensor::from_slice(&cpu, &[2], &[1.0f32, -2.0]).unwrap();
    let y = rt
        .run(&op, &[x], &Attrs::new(), &RunOptions::default())
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [-1.0, 2.0]);
}

// ---------------------------------------------------------------------------------------------
// Refused variants with more to check

#[test]
fn the_same_platform_registered_twice_by_one_plugin() {
    let _env = env_shared();
    let r = refuse(
        "register_twice",
        Code::AlreadyExists,
        &["'ZOO'", "already registered by plugin 'zoo_register_twice'"],
    );
    // the first registration was rolled back
    assert!(r.marker.has("registered ZOO"), "{:?}", r.marker.lines());
    assert!(
        r.marker.has("destroy_platform ZOO"),
        "{:?}",
        r.marker.lines()
    );
    assert!(!platform_names(&r.rt).contains(&"ZOO".to_string()));
}

#[test]
fn a_plugin_that_goes_on_after_a_refused_registration_loads_with_what_was_accepted() {
    let _env = env_shared();
    let rt = runtime();
    let marker = Marker::new("register_twice_ignored");
    let info = rt
        .load_plugin(
            zoo_path("register_twice_ignored"),
            &[("marker", marker.option())],
        )
        .unwrap();
    assert_eq!(info.platforms, ["ZOO"]);
    assert!(rt.plugin_failures().is_empty());
    assert!(
        marker.has("went on without the refused registration"),
        "{:?}",
        marker.lines()
    );
    assert_zoo_device_works(&rt, "ZOO:0");
    assert_cpu_works(&rt);
}

/// A plugin without `memory_usage` (the zoo's variant): `UNIMPLEMENTED`, naming the plugin and
/// the function; the device works otherwise.
#[test]
fn memory_usage_of_a_plugin_that_does_not_report_it_is_unimplemented() {
    let rt = runtime();
    rt.load_plugin(zoo_path("se_memory_usage_null"), &[])
        .unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let e = zoo.memory_usage().unwrap_err();
    assert_eq!(e.code, Code::Unimplemented, "{e}");
    assert!(e.message.contains("memory_usage"), "{e}");
    assert!(e.message.contains("zoo_se_memory_usage_null"), "{e}");
    assert!(e.message.contains("ZOO:0"), "{e}");
    let b = zoo.allocate(64).unwrap();
    b.write(0, &[1u8; 64]).unwrap();
}

/// The plugin benchmark's baseline (`memset_arena_only`): its memset checks the arena's bounds
/// only, and still writes what it is asked and refuses what lies outside its memory.
#[test]
fn a_memset_checked_against_the_arena_only_writes_and_refuses_outside_it() {
    let rt = runtime();
    rt.load_plugin(zoo_path("memset_arena_only"), &[]).unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let b = zoo.allocate(64).unwrap();
    b.write(0, &[1u8; 64]).unwrap();
    b.memset(16, 0xCD, 32).unwrap();
    let mut want = vec![1u8; 64];
    want[16..48].fill(0xCD);
    assert_eq!(read_all(&b), want);
    for far in [0x2000_0000_0000_0000 + (16 << 20) - 8, 0x1000, u64::MAX - 4] {
        let e = zoo.executor().memset(DevicePtr(far), 0, 16).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
        assert!(e.message.contains("outside the arena"), "{e}");
    }
}

/// A plugin call that returns a status it should not (RELIABILITY.md): an unknown value, a
/// negative one or DPP_ABI_MISMATCH becomes INTERNAL, saying which value came back; a known
/// code passes through as that code. The plugin's message is kept either way, and the device and the runtime go on.
#[test]
fn a_status_a_call_should_not_return_is_mapped_and_its_message_kept() {
    for (variant, code, note) in [
        (
            "memset_status_unknown",
            Code::Internal,
            Some("(the plugin returned the unknown status 12345)"),
        ),
        (
            "memset_status_negative",
            Code::Internal,
            Some("(the plugin returned the unknown status -7)"),
        ),
        ("memset_status_already_exists", Code::AlreadyExists, None),
        (
            "memset_status_abi_mismatch",
            Code::Internal,
            Some("(the plugin returned DPP_ABI_MISMATCH, a status of the host's version checks)"),
        ),
    ] {
        let rt = runtime();
        rt.load_plugin(zoo_path(variant), &[]).unwrap();
        let zoo = rt.find_device("ZOO:0").unwrap();
        let b = zoo.allocate(64).unwrap();
        let e = b.memset(0, 1, 16).unwrap_err();
        assert_eq!(e.code, code, "{variant}: {e}");
        assert!(
            e.message.contains("memset returns status"),
            "{variant}: the plugin's message is lost: {e}"
        );
        assert!(
            e.message.contains(&format!("zoo_{variant}")),
            "{variant}: the plugin is not named: {e}"
        );
        match note {
            Some(n) => assert!(e.message.contains(n), "{variant}: {e}"),
            None => assert!(!e.message.contains("unknown status"), "{variant}: {e}"),
        }
        // The device goes on.
        b.write(0, &[7u8; 64]).unwrap();
        assert_eq!(read_all(&b), vec![7u8; 64]);
    }
}

/// A plugin that runs a host callback twice, or runs it and then refuses it (the host then
/// drops it): the second run finds nothing and is logged, instead of running freed memory;
/// the host's callback ran once; the runtime goes on.
#[test]
fn a_host_callback_run_twice_or_after_a_refusal_runs_once() {
    use std::sync::atomic::AtomicUsize;
    let log = devplug_tests::collect_log();
    for (variant, message) in [
        (
            "host_callback_twice",
            "that it had run already, or that its host_callback had refused: ignored",
        ),
        (
            "host_callback_run_then_fail",
            "host_callback ran the callback and then returned an error",
        ),
    ] {
        let rt = runtime();
        rt.load_plugin(zoo_path(variant), &[]).unwrap();
        let zoo = rt.find_device("ZOO:0").unwrap();
        let q = zoo.create_stream().unwrap();
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let result = q.host_callback(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{variant}");
        if variant == "host_callback_run_then_fail" {
            let e = result.unwrap_err();
            assert_eq!(e.code, Code::Unavailable, "{variant}: {e}");
        } else {
            result.unwrap();
        }
        assert!(
            log.lock().unwrap().iter().any(|m| m.contains(message)),
            "{variant}: {:?}",
            log.lock().unwrap()
        );
        // The runtime goes on.
        let b = zoo.allocate(64).unwrap();
        b.write(0, &[3u8; 64]).unwrap();
        assert_eq!(read_all(&b), vec![3u8; 64]);
    }
}

/// A platform may report its stream's failure through `event_status` alone, its
/// `event_synchronize` returning `DPP_OK` once the event is reached: synchronizing the event
/// then fails as its status says, instead of reporting a failed event reached.
#[test]
fn an_event_the_platform_marks_failed_does_not_synchronize_as_reached() {
    let rt = runtime();
    rt.load_plugin(zoo_path("events_failed"), &[]).unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let q = zoo.create_stream().unwrap();
    let ev = zoo.create_event().unwrap();
    ev.record(&q).unwrap();
    assert_eq!(ev.status().unwrap(), EventStatus::Error);
    let e = ev.synchronize().unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(
        e.message
            .contains("an event of ZOO:0: its stream failed before reaching it"),
        "{e}"
    );
}

/// A kernel whose `create` (ABI 1.5) fails: the run fails with the plugin's code and message,
/// naming the kernel's create, and nothing is kept — the next run asks `create` again (the
/// plugin's destroy, which aborts if called, never is); the runtime goes on. Its code being
/// `UNIMPLEMENTED`, that is a decline: in strict mode the run's error, else soft placement.
#[test]
fn a_kernel_whose_create_fails_fails_the_run_each_time() {
    let z = ZooReshape::load("kernel_create_fails");
    let held = z.zoo.memory_stats().active_allocs;
    for _ in 0..2 {
        let e = z.run_on_zoo().unwrap_err();
        assert_eq!(e.code, Code::Unimplemented, "{e}");
        for part in [
            "Reshape on ZOO:0",
            "kernel Reshape: create",
            "zoo: no state for Reshape with 1 input(s) on purpose",
        ] {
            assert!(e.message.contains(part), "'{part}' is not named: {e}");
        }
        z.zoo.synchronize().unwrap();
        assert_eq!(
            z.zoo.memory_stats().active_allocs,
            held,
            "the failed run left memory"
        );
    }
    // The runtime goes on: the CPU runs the op.
    let cpu = z.rt.find_device("CPU:0").unwrap();
    let y =
        z.rt.run1(
            &z.reshape,
            &[z.x.copy_to(&cpu).unwrap()],
            &z.attrs,
            &RunOptions::on(&cpu),
        )
        .unwrap();
    assert_eq!(y.shape(), &[2, 2]);
    // `UNIMPLEMENTED` from create is a decline, as from compute: without strict mode, the op
    // is soft-placed to the CPU, and the placement log says why.
    let log = devplug_tests::record_placements(&z.rt);
    let y =
        z.rt.run1(
            &z.reshape,
            std::slice::from_ref(&z.x),
            &z.attrs,
            &RunOptions::on(&z.zoo),
        )
        .unwrap();
    assert_eq!(y.device().name(), "CPU:0");
    assert_eq!(y.to_vec::<f32>().unwrap(), [1., 2., 3., 4.]);
    let l = log.lock().unwrap().clone();
    assert!(
        l.iter().any(|e| e.reason == Reason::SoftPlaced
            && e.detail.contains("declined (")
            && e.detail
                .contains("kernel Reshape: create: zoo: no state for Reshape with 1 input(s)")),
        "{l:?}"
    );
}

/// A plugin of ABI 1.4 loads into this host with its kernel struct of 1.4's size: the host reads
/// no `create` past it (the variant's would fail every run), and the kernel runs.
#[test]
fn a_kernel_struct_of_abi_1_4_is_read_as_far_as_it_reaches() {
    let y = ZooReshape::load("kernel_size_1_4").run_on_zoo().unwrap();
    assert_eq!(y.shape(), &[2, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), [1., 2., 3., 4.]);
}

/// A kernel failing in the middle of a decomposition (RELIABILITY.md, "kernel writes an error
/// mid-graph"): the run fails with the kernel's own code and message, naming the op, the op
/// that failed and the device; what the run allocated is freed; the runtime goes on.
#[test]
fn a_kernel_failing_mid_decomposition_fails_the_run_and_frees_its_memory() {
    let rt = runtime();
    rt.load_plugin(zoo_path("op_kernel_fails"), &[]).unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let x = Tensor::from_slice(&zoo, &[4], &[1f32, 2.0, 3.0, 4.0]).unwrap();
    let held = zoo.memory_stats().active_allocs;
    let strict = RunOptions {
        device: Some(zoo.clone()),
        soft_placement: Some(false),
    };
    for _ in 0..3 {
        let e = rt
            .run_named("zoo.Op", std::slice::from_ref(&x), &Attrs::new(), &strict)
            .unwrap_err();
        assert_eq!(e.code, Code::FailedPrecondition, "{e}");
        for part in [
            "zoo.Op",
            "Mul",
            "ZOO:0",
            "zoo_op_kernel_fails",
            "the kernel fails on purpose",
        ] {
            assert!(e.message.contains(part), "'{part}' is not named: {e}");
        }
        zoo.synchronize().unwrap();
        assert_eq!(
            zoo.memory_stats().active_allocs,
            held,
            "the failed run left memory"
        );
    }
    // The runtime goes on: the same op on the CPU, and x read back.
    let cpu = rt.find_device("CPU").unwrap();
    let on_cpu = x.copy_to(&cpu).unwrap();
    let y = rt
        .run_named("zoo.Op", &[on_cpu], &Attrs::new(), &RunOptions::default())
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [-3.0, -6.0, -9.0, -12.0]);
    assert_eq!(x.to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
}

/// The environment variable that marks a test's child process (see [`warnings_of_child`]).
const CHILD: &str = "DEVPLUG_ZOO_CHILD";

/// True in the child process [`warnings_of_child`] runs.
fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

/// Runs the test `name` again in a child process (where [`is_child`] is true) with warnings
/// logged, checks that it passed, and returns its standard error.
fn warnings_of_child(name: &str) -> String {
    let _env = env_shared();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("DEVPLUG_LOG", "warn")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "the child failed:\n{err}");
    err
}

/// A platform with its own allocator whose `allocator_stats` fails: the memory statistics are
/// the host's exact figures (nothing lost, no error), the device goes on working, and the
/// failure is logged once however often the statistics are read.
#[test]
fn failing_allocator_stats_leave_the_hosts_figures() {
    let rt = runtime();
    rt.load_plugin(zoo_path("allocator_stats_fail"), &[])
        .unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let a = zoo.allocate(1000).unwrap();
    let b = zoo.allocate(300).unwrap();
    for _ in 0..3 {
        let st = zoo.memory_stats();
        assert_eq!(st.active_allocs, 2, "{st:?}");
        assert_eq!(st.bytes_in_use, 1300, "{st:?}");
        assert_eq!(st.bytes_reserved, st.bytes_in_use, "{st:?}");
        assert_eq!(st.largest_free_block, 0, "{st:?}");
    }
    drop((a, b));
    assert_eq!(zoo.memory_stats().bytes_in_use, 0);
    assert_zoo_device_works(&rt, "ZOO:0");
    if is_child() {
        return;
    }
    let err = warnings_of_child("failing_allocator_stats_leave_the_hosts_figures");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("allocator_stats failed"))
        .collect();
    assert_eq!(lines.len(), 1, "logged once:\n{err}");
    assert!(lines[0].contains("ZOO:0"), "{}", lines[0]);
    assert!(lines[0].contains("the firmware is busy"), "{}", lines[0]);
}

/// A platform whose `allocate` returns addresses off the 256-byte alignment works (the host
/// frees each such region and allocates it again, 256 bytes larger, to align inside it), and
/// the host says so once per device, naming the plugin, the platform and the device.
#[test]
fn misaligned_device_addresses_are_worked_around_and_warned_about_once() {
    let rt = runtime();
    rt.load_plugin(zoo_path("misaligned"), &[]).unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let bufs: Vec<_> = [1000u64, 300, 1 << 20]
        .iter()
        .map(|&n| zoo.allocate(n).unwrap())
        .collect();
    for b in &bufs {
        assert_eq!(b.ptr().0 % 256, 0, "{:#x}", b.ptr().0);
    }
    drop(bufs);
    assert_zoo_device_works(&rt, "ZOO:0");
    if is_child() {
        return;
    }
    let err =
        warnings_of_child("misaligned_device_addresses_are_worked_around_and_warned_about_once");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("not 256-byte aligned"))
        .collect();
    assert_eq!(lines.len(), 1, "warned once:\n{err}");
    for needle in [
        "plugin 'zoo_misaligned'",
        "platform ZOO",
        "device 0",
        "allocates 256 bytes more",
    ] {
        assert!(lines[0].contains(needle), "{needle}: {}", lines[0]);
    }
}

#[test]
fn a_refused_registration_is_logged_once() {
    // Whether init then fails (the refusal is the load's error) or goes on (the refusal is all
    // there is to say), the log holds it once (the failed load at info: its caller has the
    // error). The loads run in a child process, whose standard error this test reads.
    if is_child() {
        devplug_core::log::set_level(Some(devplug_core::log::Level::Info));
        let rt = runtime();
        rt.load_plugin(zoo_path("register_twice"), &[]).unwrap_err();
        rt.load_plugin(zoo_path("register_twice_ignored"), &[])
            .unwrap();
        return;
    }
    let err = warnings_of_child("a_refused_registration_is_logged_once");
    for plugin in ["'zoo_register_twice'", "'zoo_register_twice_ignored'"] {
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.contains(&format!("already registered by plugin {plugin}")))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{plugin}: the refusal is logged {} times:\n{err}",
            lines.len()
        );
    }
    assert!(
        err.contains("plugin 'zoo_register_twice_ignored'")
            && err.contains("loaded without a registration the host refused"),
        "{err}"
    );
}

#[test]
fn init_registers_one_platform_then_fails_and_is_rolled_back() {
    let _env = env_shared();
    let r = refuse(
        "init_half",
        Code::ResourceExhausted,
        &["zoo: out of device slots after the first platform"],
    );
    assert_eq!(
        r.marker.lines(),
        [
            "init zoo_init_half",
            "registered ZOO",
            "destroy_platform ZOO"
        ],
        "the plugin's destroy_platform ran for the platform its failed init registered"
    );
    assert!(!platform_names(&r.rt).contains(&"ZOO".to_string()));
}

#[test]
fn init_returns_an_unknown_status_with_a_message() {
    let _env = env_shared();
    // The plugin's message is kept, and the unknown status is named (as for every other
    // plugin call: "the plugin returned the unknown status N").
    refuse(
        "init_unknown_status",
        Code::Internal,
        &["zoo: returning a status that does not exist", "12345"],
    );
}

#[test]
fn create_device_fails_with_its_own_message_and_everything_is_undone() {
    let _env = env_shared();
    let r = refuse(
        "create_device_fails",
        Code::Unavailable,
        &["create_device(0)", "zoo: device 0 of ZOO did not power up"],
    );
    let lines = r.marker.lines();
    assert!(
        !lines.iter().any(|l| l.starts_with("destroy_device")),
        "a device create_device refused is not destroyed: {lines:?}"
    );
    for l in ["destroy_platform ZOO", "shutdown zoo_create_device_fails"] {
        assert!(lines.iter().any(|x| x == l), "`{l}` missing: {lines:?}");
    }
    assert!(r
        .err
        .message
        .contains(&zoo_path("create_device_fails").display().to_string()));
}

#[test]
fn device_se_null() {
    let _env = env_shared();
    let r = refuse(
        "se_null",
        Code::InvalidArgument,
        &["dpp_device_t.se", "NULL", "platform ZOO"],
    );
    // The host destroyed the device it refused, then the platform, then shut the plugin down.
    assert_eq!(
        r.marker.lines(),
        [
            "init zoo_se_null",
            "registered ZOO",
            "init ok zoo_se_null",
            "created ZOO 0",
            "destroy_device ZOO 0",
            "destroy_platform ZOO",
            "shutdown zoo_se_null"
        ]
    );
}

#[test]
fn same_device_type_and_priority_as_another_plugin() {
    let _env = env_shared();
    let rt = runtime();
    rt.load_plugin(zoo_path("a"), &[]).unwrap();
    rt.load_plugin(zoo_path("b"), &[]).unwrap();
    let path = zoo_path("c_same_priority");
    let err = rt.load_plugin(&path, &[]).unwrap_err();
    assert_eq!(err.code, Code::AlreadyExists, "{err}");
    for needle in [
        "plugin 'zoo_c_same_priority'",
        "'ZOOC'",
        "'ZOOB'",
        "plugin 'zoo_b'",
        "priority 2",
    ] {
        assert!(err.message.contains(needle), "`{needle}` missing: {err}");
    }
    assert_eq!(
        rt.plugin_failures(),
        [PluginFailure {
            path,
            error: err.clone()
        }]
    );
    assert_eq!(plugin_names(&rt), ["zoo_a", "zoo_b"]);
    assert_eq!(platform_names(&rt), ["HOST", "ZOOA", "ZOOB"]);
    // the first stays usable, and still is what ZOO:0 means
    assert_eq!(
        rt.find_device("ZOO:0").unwrap().platform().info.name,
        "ZOOB"
    );
    assert_zoo_device_works(&rt, "ZOO:0");
    assert_zoo_device_works(&rt, "ZOOA:0");
    assert_cpu_works(&rt);

    // Alone, the same file loads fine: the refusal was the conflict.
    let alone = runtime();
    assert_eq!(
        alone
            .load_plugin(zoo_path("c_same_priority"), &[])
            .unwrap()
            .platforms,
        ["ZOOC"]
    );
    assert_zoo_device_works(&alone, "ZOO:0");
}

// ---------------------------------------------------------------------------------------------
// The file itself: missing, not a library, wrong architecture, truncated

/// Loading `path` fails with `code`, naming the path and `needles`; the runtime carries on.
fn refuse_file(path: &Path, code: Code, needles: &[&str]) -> Error {
    let rt = runtime();
    rt.load_plugin(zoo_path("a"), &[]).unwrap();
    let err = rt.load_plugin(path, &[]).unwrap_err();
    assert_eq!(err.code, code, "{err}");
    let shown = path.display().to_string();
    assert!(err.message.contains(&shown), "the path is not named: {err}");
    for needle in needles {
        assert!(err.message.contains(needle), "`{needle}` missing: {err}");
    }
    assert_eq!(
        rt.plugin_failures(),
        [PluginFailure {
            path: path.to_path_buf(),
            error: err.clone()
        }]
    );
    assert_eq!(plugin_names(&rt), ["zoo_a"]);
    assert_eq!(platform_names(&rt), ["HOST", "ZOOA"]);
    assert_cpu_works(&rt);
    assert_zoo_device_works(&rt, "ZOOA:0");
    err
}

#[test]
fn file_missing() {
    let _env = env_shared();
    let dir = TempDir::new("zoo-missing");
    refuse_file(
        &dir.path().join("libzoo_missing.so"),
        Code::NotFound,
        &["no such file"],
    );
}

#[test]
fn file_is_not_a_library() {
    let _env = env_shared();
    let dir = TempDir::new("zoo-junk");
    let junk = dir.path().join("libjunk.so");
    // longer than an ELF header, so that the reason is the header, not the length
    std::fs::write(
        &junk,
        "this is a text file, not a shared library; it only has a name that ends in .so\n"
            .repeat(3),
    )
    .unwrap();
    // the loader's own reason (dlerror), not only that dlopen failed
    refuse_file(
        &junk,
        Code::InvalidArgument,
        &["cannot load the library", "invalid ELF header"],
    );
}

#[test]
fn file_for_another_architecture() {
    let _env = env_shared();
    let dir = TempDir::new("zoo-arch");
    let mut bytes = std::fs::read(zoo_path("good")).unwrap();
    // e_machine (ELF header offset 18, little-endian) := EM_AARCH64 (183), or EM_X86_64 (62)
    // on an aarch64 host.
    let other: u16 = if cfg!(target_arch = "aarch64") {
        62
    } else {
        183
    };
    bytes[18..20].copy_from_slice(&other.to_le_bytes());
    let p = dir.path().join("libzoo_other_arch.so");
    std::fs::write(&p, bytes).unwrap();
    let err = refuse_file(&p, Code::InvalidArgument, &["cannot load the library"]);
    // The reason: glibc's (which, for a file of another machine, is "cannot open shared
    // object file") or the loader's own.
    assert!(
        ["cannot open shared object file", "machine", "architecture"]
            .iter()
            .any(|r| err.message.contains(r)),
        "the loader's reason is missing: {err}"
    );
}

#[test]
fn file_truncated_inside_the_elf_header() {
    let _env = env_shared();
    let dir = TempDir::new("zoo-trunc-header");
    let bytes = std::fs::read(zoo_path("good")).unwrap();
    let p = dir.path().join("libzoo_truncated_header.so");
    std::fs::write(&p, &bytes[..40]).unwrap();
    refuse_file(
        &p,
        Code::InvalidArgument,
        &["cannot load the library", "file too short"],
    );
}

/// The environment variable through which [`file_truncated_after_the_headers`] hands its file
/// to the child process.
const CHILD_TRUNCATED: &str = "DEVPLUG_ZOO_CHILD_TRUNCATED";

#[test]
fn file_truncated_after_the_headers() {
    // Cut in the middle of its loadable segments: the ELF and program headers are intact, but
    // the segments run past the end of the file. A plain dlopen maps them and dies of SIGBUS
    // on the first touch. The load runs in a child process (this
    // test binary, running only this test with the file in CHILD_TRUNCATED) so that a crash
    // fails this test instead of killing every test of the binary.
    if let Some(path) = std::env::var_os(CHILD_TRUNCATED) {
        // The child: the loader must refuse the file, naming why.
        refuse_file(Path::new(&path), Code::InvalidArgument, &["truncated"]);
        return;
    }
    let _env = env_shared();
    let dir = TempDir::new("zoo-trunc");
    let bytes = std::fs::read(zoo_path("good")).unwrap();
    let cut = loaded_end(&bytes) / 2;
    let p = dir.path().join("libzoo_truncated.so");
    std::fs::write(&p, &bytes[..cut]).unwrap();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "file_truncated_after_the_headers",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_TRUNCATED, &p)
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if let Some(sig) = output.status.signal() {
        panic!(
            "loading a truncated plugin ({} of {} bytes) crashed the host process with signal \
             {sig}; the loader must refuse it before dlopen maps segments past the end of the \
             file. Child output:\n{out}",
            cut,
            bytes.len()
        );
    }
    assert!(output.status.success(), "the child failed:\n{out}");
    assert!(
        out.contains("1 passed"),
        "the child did not run its test:\n{out}"
    );
}

/// The end of the last loadable segment's bytes in an ELF64 file (what dlopen maps): the
/// largest `p_offset + p_filesz` of its `PT_LOAD` program headers.
fn loaded_end(elf: &[u8]) -> usize {
    assert_eq!(&elf[..5], b"\x7fELF\x02", "an ELF64 file");
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    let end = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .filter(|&ph| u32::from_le_bytes(elf[ph..ph + 4].try_into().unwrap()) == 1)
        .map(|ph| u64_at(ph + 8) + u64_at(ph + 32))
        .max()
        .expect("a PT_LOAD segment");
    assert!(
        end / 2 > phoff + phnum * phentsize,
        "the headers stay whole"
    );
    end
}

// ---------------------------------------------------------------------------------------------
// Good plugins

#[test]
fn good_plugin_works_end_to_end_and_is_torn_down_in_order() {
    let _env = env_shared();
    let marker = Marker::new("good");
    let rt = runtime();
    let info = rt
        .load_plugin(zoo_path("good"), &[("marker", marker.option())])
        .unwrap();
    assert_eq!(info.name, "zoo_good");
    assert_eq!(info.version, "1.0.0");
    assert_eq!(info.path, zoo_path("good"));
    assert_eq!(info.platforms, ["ZOO"]);
    assert!(rt.plugin_failures().is_empty());
    assert_eq!(device_names(&rt), ["HOST:0", "ZOO:0"]);
    let d = rt.find_device("ZOO:0").unwrap();
    let p = d.properties();
    assert_eq!(
        (p.platform.as_str(), p.device_type.as_str(), p.priority),
        ("ZOO", "ZOO", 0)
    );
    assert_eq!(p.description.hardware_name, "zoo-0");
    assert_eq!(p.description.vendor, "devplug zoo");
    assert_eq!(p.description.total_memory, 16 << 20);
    assert!(p.is_active_platform);
    assert_zoo_device_works(&rt, "ZOO:0");
    assert_zoo_device_works(&rt, "zoo");
    assert_cpu_works(&rt);

    // An object that outlives the runtime keeps its plugin loaded; the teardown destroys the
    // device, then the platform, then shuts the plugin down (and only then closes it).
    let keep = d.allocate(64).unwrap();
    keep.write(0, &[7u8; 64]).unwrap();
    drop(d);
    drop(rt);
    assert_eq!(
        read_all(&keep),
        [7u8; 64],
        "the buffer outlives its runtime"
    );
    assert!(!marker.has("shutdown zoo_good"), "{:?}", marker.lines());
    drop(keep);
    assert_eq!(
        marker.lines(),
        [
            "init zoo_good",
            "registered ZOO",
            "init ok zoo_good",
            "created ZOO 0",
            "destroy_device ZOO 0",
            "destroy_platform ZOO",
            "shutdown zoo_good"
        ]
    );
}

#[test]
fn two_plugins_with_the_same_internal_symbol_each_behave_as_themselves() {
    // zoo_a and zoo_b both export `zoo_identity` (0xA1 and 0xB2) and call it through the PLT;
    // with RTLD_LOCAL, neither binds to the other's.
    let _env = env_shared();
    let rt = runtime();
    rt.load_plugin(zoo_path("a"), &[]).unwrap();
    rt.load_plugin(zoo_path("b"), &[]).unwrap();
    assert!(rt.plugin_failures().is_empty());
    for (spec, name, units) in [("ZOOA:0", "zoo-a1", 0xA1), ("ZOOB:0", "zoo-b2", 0xB2)] {
        let desc = rt.find_device(spec).unwrap().properties().description;
        assert_eq!(
            (desc.hardware_name.as_str(), desc.compute_units),
            (name, units),
            "{spec} behaves as its own library"
        );
        assert_zoo_device_works(&rt, spec);
    }
    assert_cpu_works(&rt);
}

#[test]
fn device_type_resolves_to_the_highest_priority() {
    let _env = env_shared();
    for order in [["a", "b"], ["b", "a"]] {
        let rt = runtime();
        for v in order {
            rt.load_plugin(zoo_path(v), &[]).unwrap();
        }
        let active = rt.find_device("ZOO:0").unwrap();
        assert_eq!(active.platform().info.name, "ZOOB", "load order {order:?}");
        assert!(active.properties().is_active_platform);
        assert_eq!(rt.find_device("zoo").unwrap().qualified_name(), "ZOOB:0");
        assert_eq!(
            rt.find_device("/device:ZOO:0").unwrap().qualified_name(),
            "ZOOB:0"
        );
        let a = rt.find_device("ZOOA:0").unwrap();
        assert_eq!(a.platform().info.name, "ZOOA");
        assert!(!a.properties().is_active_platform);
        // A device's name is what addresses it now: `ZOO:0` means ZOOB's device, so ZOOA's is
        // named by its platform (whichever loaded first).
        assert_eq!(active.name(), "ZOO:0");
        assert_eq!(a.name(), "ZOOA:0");
        assert_eq!(a.properties().name, "ZOOA:0");
        assert_eq!(a.type_name(), "ZOO:0");
        assert_eq!(rt.find_device("ZOOB:0").unwrap().qualified_name(), "ZOOB:0");
        assert_eq!(rt.find_device("ZOO:1").unwrap_err().code, Code::NotFound);
        assert_zoo_device_works(&rt, "ZOO:0");
        assert_zoo_device_works(&rt, "ZOOA:0");
    }
}

#[test]
fn register_platform_after_init_is_refused() {
    let _env = env_shared();
    let marker = Marker::new("late");
    let rt = runtime();
    let info = rt
        .load_plugin(zoo_path("late_register"), &[("marker", marker.option())])
        .unwrap();
    assert_eq!(info.platforms, ["ZOO"]);
    let lines = marker.lines();
    let expected = format!(
        "late register_platform returned {}",
        Code::FailedPrecondition as i32
    );
    assert!(
        lines.contains(&expected),
        "register_platform from create_device (after init) must return FAILED_PRECONDITION: {lines:?}"
    );
    assert_eq!(platform_names(&rt), ["HOST", "ZOO"]);
    assert!(rt.find_device("ZOOLATE:0").is_err());
    assert!(rt.plugin_failures().is_empty());
    assert_zoo_device_works(&rt, "ZOO:0");
}

#[test]
fn the_same_file_twice_also_through_a_symlink() {
    let _env = env_shared();
    let rt = runtime();
    let path = zoo_path("good");
    let first = rt.load_plugin(&path, &[]).unwrap();
    let (platforms, devices) = (platform_names(&rt), device_names(&rt));
    let again = rt.load_plugin(&path, &[]).unwrap();
    assert_eq!(again, first);
    let dir = TempDir::new("zoo-symlink");
    let link = dir.path().join("libzoo_link.so");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let through_link = rt.load_plugin(&link, &[]).unwrap();
    assert_eq!(through_link, first, "the already-loaded plugin is returned");
    assert_eq!(rt.plugins().len(), 1);
    assert_eq!(platform_names(&rt), platforms);
    assert_eq!(device_names(&rt), devices);
    assert!(rt.plugin_failures().is_empty());
    assert_zoo_device_works(&rt, "ZOO:0");
}

#[test]
fn relative_path_is_refused_even_when_it_exists_from_the_working_directory() {
    let _env = env_shared();
    let absolute = zoo_path("good");
    let cwd = std::env::current_dir().unwrap();
    let relative = relative_path(&absolute, &cwd);
    assert!(relative.is_relative());
    assert!(
        relative.is_file(),
        "{} names the plugin from {}",
        relative.display(),
        cwd.display()
    );
    let rt = runtime();
    let err = rt.load_plugin(&relative, &[]).unwrap_err();
    assert_eq!(err.code, Code::InvalidArgument, "{err}");
    assert!(
        err.message.contains(&relative.display().to_string()),
        "{err}"
    );
    assert!(err.message.contains("relative"), "{err}");
    assert_eq!(
        rt.plugin_failures(),
        [PluginFailure {
            path: relative,
            error: err
        }]
    );
    assert!(rt.plugins().is_empty());
    assert_eq!(platform_names(&rt), ["HOST"]);
    assert_cpu_works(&rt);
}

/// `path` relative to `base` (both absolute).
fn relative_path(path: &Path, base: &Path) -> PathBuf {
    let (p, b): (Vec<Component>, Vec<Component>) =
        (path.components().collect(), base.components().collect());
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &p[common..] {
        out.push(c.as_os_str());
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Search folders

/// A folder with, in sorted order, a stale plugin (ABI 2.0), a good one, a text file named
/// like a library, and a file that is not a candidate at all.
fn search_folder() -> TempDir {
    let dir = TempDir::new("zoo-search");
    std::fs::copy(zoo_path("abi_major"), dir.path().join("liba_stale.so")).unwrap();
    std::fs::copy(zoo_path("good"), dir.path().join("libb_good.so")).unwrap();
    std::fs::write(dir.path().join("libjunk.so"), "not a library\n").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "not a candidate\n").unwrap();
    std::os::unix::fs::symlink(
        dir.path().join("uninstalled.so"),
        dir.path().join("libc_gone.so"),
    )
    .unwrap();
    dir
}

/// The good plugin of [`search_folder`] loaded; the stale one, the broken link, the junk and
/// the relative entry are listed with their reasons, in that order.
fn assert_search_outcome(rt: &Runtime, dir: &Path) {
    let plugins = rt.plugins();
    assert_eq!(plugins.len(), 1, "{plugins:?}");
    assert_eq!(plugins[0].name, "zoo_good");
    assert_eq!(plugins[0].path, dir.join("libb_good.so"));
    let failures = rt.plugin_failures();
    let paths: Vec<&Path> = failures.iter().map(|f| f.path.as_path()).collect();
    assert_eq!(
        paths,
        [
            dir.join("liba_stale.so").as_path(),
            dir.join("libc_gone.so").as_path(),
            dir.join("libjunk.so").as_path(),
            Path::new("relative/zoo"),
        ],
        "{failures:#?}"
    );
    let (stale, gone, junk, rel) = (
        &failures[0].error,
        &failures[1].error,
        &failures[2].error,
        &failures[3].error,
    );
    assert_eq!(gone.code, Code::InvalidArgument, "{gone}");
    assert!(gone.message.contains("symbolic link to nothing"), "{gone}");
    assert_eq!(stale.code, Code::AbiMismatch, "{stale}");
    assert!(stale.message.contains("liba_stale.so"), "{stale}");
    assert!(stale.message.contains("plugin ABI 2.0"), "{stale}");
    assert_eq!(junk.code, Code::InvalidArgument, "{junk}");
    assert!(junk.message.contains("libjunk.so"), "{junk}");
    assert!(junk.message.contains("cannot load the library"), "{junk}");
    assert_eq!(rel.code, Code::InvalidArgument, "{rel}");
    assert!(rel.message.contains("relative"), "{rel}");
    assert_zoo_device_works(rt, "ZOO:0");
    assert_cpu_works(rt);
}

#[test]
fn search_folder_with_a_stale_plugin_and_junk() {
    let _env = env_shared();
    let dir = search_folder();
    let rt = runtime();
    let loaded = rt.load_search_path(&format!("{}:relative/zoo", dir.path().display()));
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert_search_outcome(&rt, dir.path());
}

/// Removes the variable when dropped, also when the test fails.
struct EnvVar(&'static str);

impl Drop for EnvVar {
    fn drop(&mut self) {
        std::env::remove_var(self.0);
    }
}

#[test]
fn search_folder_through_devplug_plugin_path() {
    let _env = ENV.write().unwrap_or_else(|e| e.into_inner());
    let dir = search_folder();
    let var = EnvVar("DEVPLUG_PLUGIN_PATH");
    std::env::set_var(var.0, format!("{}:relative/zoo", dir.path().display()));
    let rt = Runtime::new(RuntimeOptions {
        discover_from_env: true,
        ..Default::default()
    })
    .unwrap();
    drop(var);
    assert_search_outcome(&rt, dir.path());
}

/// A load option the plugin never asks for during init (a misspelt key) is warned about, naming
/// the plugin and the key, and the plugin still loads; a library loaded again with the same
/// options (in another order) is the one loaded, with other options ALREADY_EXISTS, and the
/// plugin keeps its first ones. The zoo reads `marker` only.
#[test]
fn load_options_the_plugin_ignores_are_warned_about() {
    let rt = runtime();
    let marker = Marker::new("unread_options");
    let opts = [("marker", marker.option()), ("devcies", "2")];
    let first = rt.load_plugin(zoo_path("a"), &opts).unwrap();
    // The same library again: loaded once; the same options say nothing, others are refused.
    let reordered = [opts[1], opts[0]];
    assert_eq!(
        rt.load_plugin(zoo_path("a"), &reordered).unwrap().name,
        first.name
    );
    let e = rt
        .load_plugin(zoo_path("a"), &[("marker", marker.option())])
        .unwrap_err();
    assert_eq!(e.code, Code::AlreadyExists, "{e}");
    for needle in [
        "plugin 'zoo_a'",
        "is loaded already",
        "devcies",
        "once per runtime",
    ] {
        assert!(e.message.contains(needle), "{needle}: {e}");
    }
    assert_eq!(rt.plugins().len(), 1);
    assert_zoo_device_works(&rt, "ZOOA:0");
    if is_child() {
        return;
    }
    let err = warnings_of_child("load_options_the_plugin_ignores_are_warned_about");
    let unread: Vec<&str> = err.lines().filter(|l| l.contains("did not read")).collect();
    assert_eq!(unread.len(), 1, "warned once, at the load:\n{err}");
    for needle in ["plugin 'zoo_a'", "load option 'devcies'", "a typo?"] {
        assert!(unread[0].contains(needle), "{needle}: {}", unread[0]);
    }
    assert!(!unread[0].contains("'marker'"), "{}", unread[0]);
    // The refused load is the caller's error, not a warning.
    assert!(!err.contains("is loaded already"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// An older host (`RuntimeOptions::plugin_abi_minor`): what `devplug check` runs a plugin that
// declares an older minor as, a second time.

/// A runtime that speaks plugin ABI 1.`minor` to its plugins.
fn host_of_minor(minor: u32) -> Runtime {
    Runtime::new(RuntimeOptions {
        discover_from_env: false,
        plugin_abi_minor: Some(minor),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("a host of ABI 1.{minor}: {e}"))
}

/// A minor newer than the newest is refused when the runtime is created, naming the option
/// and the minors there are; the newest itself (and None) is the default host.
#[test]
fn a_plugin_abi_minor_newer_than_the_newest_is_invalid() {
    let _env = env_shared();
    for minor in [devplug_core::PLUGIN_ABI_MINOR + 1, 99, u32::MAX] {
        let e = Runtime::new(RuntimeOptions {
            discover_from_env: false,
            plugin_abi_minor: Some(minor),
            ..Default::default()
        })
        .err()
        .unwrap_or_else(|| panic!("plugin_abi_minor {minor} was taken"));
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
        for needle in [
            format!("plugin_abi_minor is {minor}"),
            format!("plugin ABI 1.0 to 1.{}", devplug_core::PLUGIN_ABI_MINOR),
        ] {
            assert!(e.message.contains(&needle), "{needle}: {e}");
        }
    }
    assert_eq!(RuntimeOptions::default().plugin_abi_minor, None);
    host_of_minor(devplug_core::PLUGIN_ABI_MINOR);
}

/// An older host refuses a plugin of a newer minor as a real one would: ABI_MISMATCH, quoting
/// both versions; a plugin of its own minor or an older one loads.
#[test]
fn an_older_host_refuses_a_plugin_of_a_newer_minor() {
    let _env = env_shared();
    for (variant, declared, host) in [
        ("good", 5, 4),
        ("kernel_state_1_4", 4, 3),
        ("kernel_state_1_4", 4, 0),
    ] {
        let rt = host_of_minor(host);
        let e = rt.load_plugin(zoo_path(variant), &[]).unwrap_err();
        assert_eq!(e.code, Code::AbiMismatch, "{variant} into 1.{host}: {e}");
        let says = format!(
            "built against plugin ABI 1.{declared}, but this host implements ABI 1.{host} (the \
             plugin's minor version is newer)"
        );
        assert!(e.message.contains(&says), "{variant} into 1.{host}: {e}");
        assert_eq!(rt.plugin_failures().len(), 1);
    }
    for host in [4, 5] {
        host_of_minor(host)
            .load_plugin(zoo_path("kernel_state_1_4"), &[])
            .unwrap_or_else(|e| panic!("into 1.{host}: {e}"));
    }
}

/// The host table a plugin gets says the host's minor and that minor's struct_size, read by
/// the plugin itself (a zoo plugin of ABI 1.0, which every host loads, writes them down).
#[test]
fn the_host_table_has_the_version_and_size_of_the_hosts_minor() {
    let _env = env_shared();
    let sizes = [64, 112, 128, 128, 136, 136];
    assert_eq!(sizes.len() as u32, devplug_core::PLUGIN_ABI_MINOR + 1);
    for (minor, size) in sizes.into_iter().enumerate() {
        let marker = Marker::new(&format!("host_abi_1_{minor}"));
        let rt = host_of_minor(minor as u32);
        rt.load_plugin(zoo_path("host_abi_1_0"), &[("marker", marker.option())])
            .unwrap_or_else(|e| panic!("into 1.{minor}: {e}"));
        let line = format!("host ABI 1.{minor}, dpp_host_api_t.struct_size {size}");
        assert!(marker.has(&line), "{line}: {:?}", marker.lines());
        assert_zoo_device_works(&rt, "ZOO:0");
    }
    // The default host is the newest.
    let marker = Marker::new("host_abi_default");
    runtime()
        .load_plugin(zoo_path("host_abi_1_0"), &[("marker", marker.option())])
        .unwrap();
    assert!(
        marker.has("host ABI 1.5, dpp_host_api_t.struct_size 136"),
        "{:?}",
        marker.lines()
    );
}

/// Loads zoo `variant` with a marker into a host of `minor` (None: the newest) and runs its
/// Reshape on ZOO:0: the result, and the plugin's marker lines from its kernel (`create`,
/// `compute: …`).
fn reshape_as_host(
    variant: &str,
    minor: Option<u32>,
) -> (devplug_core::Result<Vec<f32>>, Vec<String>) {
    let marker = Marker::new(&format!("{variant}-{minor:?}"));
    let rt = Runtime::new(RuntimeOptions {
        discover_from_env: false,
        plugin_abi_minor: minor,
        ..Default::default()
    })
    .unwrap();
    rt.load_plugin(zoo_path(variant), &[("marker", marker.option())])
        .unwrap_or_else(|e| panic!("{variant} into {minor:?}: {e}"));
    let zoo = rt.find_device("ZOO:0").unwrap();
    let x = Tensor::from_slice(&zoo, &[4], &[1f32, 2.0, 3.0, 4.0]).unwrap();
    let y = rt
        .run_named(
            "Reshape",
            &[x],
            &Attrs::new().with("shape", [2, 2]),
            &RunOptions::on(&zoo).strict(),
        )
        .and_then(|y| y[0].to_vec::<f32>());
    drop(zoo);
    drop(rt);
    let kernel = marker
        .lines()
        .into_iter()
        .filter(|l| l == "create" || l.starts_with("compute"))
        .collect();
    (y, kernel)
}

/// A kernel with create and destroy from a plugin that declares ABI 1.4: a 1.5 host makes it
/// a state and passes 88-byte contexts holding it; a 1.4 host ignores create and destroy (it
/// reads 80 bytes of dpp_kernel_t) and passes 80-byte contexts. A plugin that checks
/// struct_size works with both; one that reads `state` regardless finds, from the 1.4 host, a
/// value its create never made (the slot past the context holds the host's poison), and says
/// so.
#[test]
fn a_host_of_abi_1_4_passes_contexts_without_state_and_never_calls_create() {
    let _env = env_shared();
    for variant in ["kernel_state_1_4", "kernel_state_1_4_unchecked"] {
        let (y, kernel) = reshape_as_host(variant, None);
        assert_eq!(y.unwrap(), [1., 2., 3., 4.], "{variant}");
        assert_eq!(
            kernel,
            [
                "create",
                "compute: dpp_kernel_context_t.struct_size 88, state from create"
            ],
            "{variant}"
        );
    }
    let (y, kernel) = reshape_as_host("kernel_state_1_4", Some(4));
    assert_eq!(y.unwrap(), [1., 2., 3., 4.]);
    assert_eq!(
        kernel,
        ["compute: dpp_kernel_context_t.struct_size 80, state not read"]
    );
    let (y, kernel) = reshape_as_host("kernel_state_1_4_unchecked", Some(4));
    let e = y.unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e}");
    for needle in [
        "plugin 'zoo_kernel_state_1_4_unchecked'",
        "kernel Reshape",
        "zoo: compute got state 0xd0d0d0d0d0d0d0d0, which no create of this plugin made (the \
         context's struct_size is 80)",
    ] {
        assert!(e.message.contains(needle), "{needle}: {e}");
    }
    assert_eq!(
        kernel,
        ["compute: dpp_kernel_context_t.struct_size 80, state unknown"]
    );
}

/// F16 and BF16 arrived in ABI 1.3: a host of 1.2 refuses a kernel that names them as it
/// refuses any value that is no dtype (a plugin of 1.2 may name them only when the host's
/// version says 1.3 or newer), and a 1.3 host takes it.
#[test]
fn a_host_before_abi_1_3_knows_no_half_dtypes() {
    let _env = env_shared();
    let e = host_of_minor(2)
        .load_plugin(zoo_path("kernel_f16_abi_1_2"), &[])
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(
        e.message.contains(
            "kernel Add on ZOO: dpp_kernel_t.dtypes[0] is 7, not a DPP_DTYPE_* value of ABI 1.2 \
             (f16 and bf16, 7 and 8, arrived in ABI 1.3)"
        ),
        "{e}"
    );
    host_of_minor(3)
        .load_plugin(zoo_path("kernel_f16_abi_1_2"), &[])
        .unwrap();
}

/// A host of ABI 1.3 or older reads the stream executor table only to its 1.0 size (240
/// bytes): a plugin's `event_elapsed_ns` (ABI 1.4) is absent, and timing is UNIMPLEMENTED,
/// saying why. SIMDML declares ABI 1.1 and times its events.
#[test]
fn a_host_before_abi_1_4_has_no_event_timing() {
    let _env = env_shared();
    for (minor, times) in [(1, false), (3, false), (4, true)] {
        let rt = host_of_minor(minor);
        rt.load_plugin(devplug_tests::plugin_path("devplug_simdml"), &[])
            .unwrap_or_else(|e| panic!("SIMDML into 1.{minor}: {e}"));
        let dev = rt.find_device("GPU:0").unwrap();
        let q = dev.create_stream().unwrap();
        let (a, b) = (dev.create_event().unwrap(), dev.create_event().unwrap());
        a.record(&q).unwrap();
        b.record(&q).unwrap();
        b.synchronize().unwrap();
        match a.elapsed_ns(&b) {
            Ok(ns) => assert!(times && ns >= 0, "1.{minor}: {ns}"),
            Err(e) => {
                assert!(!times, "1.{minor}: {e}");
                assert_eq!(e.code, Code::Unimplemented, "1.{minor}: {e}");
                let why = format!("this host speaks plugin ABI 1.{minor}, before timed events");
                assert!(e.message.contains(&why), "1.{minor}: {e}");
            }
        }
    }
}

/// A plugin's kernel that declines inputs (DPP_UNIMPLEMENTED: this ReduceSum takes reductions
/// to one element only) has the host run them as if the device had no kernel for them:
/// ReduceSum has no decomposition, so on the CPU, logged as declined; in strict mode the
/// kernel's error. What it takes it runs on the device.
#[test]
fn inputs_a_plugins_kernel_declines_run_elsewhere() {
    use devplug_core::{AttrValue, Reason, Tensor};
    let _env = env_shared();
    let rt = runtime();
    rt.load_plugin(zoo_path("reduce_sum_declines"), &[])
        .unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let x = Tensor::from_slice(&zoo, &[2, 3], &[1f32, 2., 3., 4., 5., 6.]).unwrap();
    let sum = rt.op("ReduceSum").unwrap();
    let log = devplug_tests::record_placements(&rt);
    let all = rt
        .run(
            &sum,
            std::slice::from_ref(&x),
            &Attrs::new(),
            &RunOptions::on(&zoo),
        )
        .unwrap();
    assert!(Arc::ptr_eq(all[0].device(), &zoo));
    assert_eq!(all[0].to_vec::<f32>().unwrap(), [21.]);
    let rows = Attrs::new().with("axes", AttrValue::Ints(vec![1]));
    let y = rt
        .run(&sum, std::slice::from_ref(&x), &rows, &RunOptions::on(&zoo))
        .unwrap();
    assert_eq!(y[0].device().platform().info.name, "HOST");
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [6., 15.]);
    let events = log.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.reason == Reason::SoftPlaced
            && e.detail.starts_with(
                "the kernel from plugin 'zoo_reduce_sum_declines' on ZOO:0 declined ("
            )
            && e.detail.contains("more than 1 output elements")),
        "{events:?}"
    );
    let e = rt
        .run(
            &sum,
            std::slice::from_ref(&x),
            &rows,
            &RunOptions::on(&zoo).strict(),
        )
        .unwrap_err();
    assert_eq!(e.code, Code::Unimplemented, "{e}");
    assert!(e.message.contains("more than 1 output elements"), "{e}");
    assert!(e.message.contains("(strict mode)"), "{e}");
}
