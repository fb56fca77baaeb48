//! Ops a plugin defines (plugin ABI 1.2), as a Rust host sees them: SIMDML's `simdml.Swish`
//! (x * sigmoid(x)) runs SIMDML's own kernel on its devices and the body it registered
//! everywhere else (the CPU, SIM), with the same values; its dtype rule and its shape errors
//! are the op's; a host cannot take its name. Malformed definitions are in the zoo
//! (tests/tests/zoo.rs, `op_*`).

use std::sync::Arc;

use devplug_core::{Attrs, Code, Device, OpDef, Reason, RunOptions, Runtime, Tensor};
use devplug_tests::{plugin_path, record_placements, runtime};

fn on(device: &Arc<Device>, strict: bool) -> RunOptions {
    RunOptions {
        device: Some(device.clone()),
        soft_placement: Some(!strict),
    }
}

const X: [f32; 6] = [-3.0, -1.0, -0.25, 0.0, 0.5, 4.0];

fn swish(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn assert_close(got: &[f32], what: &str) {
    for (g, x) in got.iter().zip(X) {
        let want = swish(f64::from(x)) as f32;
        assert!(
            (g - want).abs() <= 1e-6 * want.abs().max(1.0),
            "{what}: swish({x}) = {g}, want {want}"
        );
    }
}

/// A runtime with SIMDML (GPU, with its kernels) and SIM.
fn with_plugins() -> Runtime {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_simdml"), &[]).unwrap();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    rt
}

#[test]
fn the_plugins_op_is_registered_with_its_signature() {
    let rt = with_plugins();
    let op = rt
        .op("simdml.Swish")
        .expect("SIMDML registered simdml.Swish");
    let def = op.def();
    assert_eq!(def.inputs.len(), 1);
    assert_eq!(def.outputs.len(), 1);
    assert!(def.decomposition.is_some(), "its body is its decomposition");
    assert_eq!(
        rt.kernels().locations("simdml.Swish"),
        ["GPU bound to SIMDML (plugin 'simdml', f32/f64)"],
        "SIMDML's kernel is the only one"
    );
    // Without the plugin the op does not exist, with a clear error.
    let e = runtime().op("simdml.Swish").unwrap_err();
    assert_eq!(e.code, Code::NotFound, "{e}");
    assert!(e.message.contains("simdml.Swish"), "{e}");
}

#[test]
fn the_native_kernel_runs_on_simdml_and_the_body_everywhere_else() {
    let rt = with_plugins();
    let log = record_placements(&rt);
    let none = Attrs::new();
    let cpu = rt.find_device("CPU:0").unwrap();
    let x = Tensor::from_slice(&cpu, &[2, 3], &X).unwrap();

    // SIMDML: its own kernel, strictly (no decomposition, no fallback).
    let gpu = rt.find_device("GPU:0").unwrap();
    assert_eq!(gpu.platform().info.name, "SIMDML");
    let y = rt
        .run_named(
            "simdml.Swish",
            &[x.copy_to(&gpu).unwrap()],
            &none,
            &on(&gpu, true),
        )
        .unwrap();
    assert!(Arc::ptr_eq(y[0].device(), &gpu));
    assert_eq!(y[0].shape(), [2, 3]);
    assert_close(&y[0].to_vec::<f32>().unwrap(), "SIMDML kernel");
    {
        let l = log.lock().unwrap();
        assert!(
            l.iter().any(|e| e.op == "simdml.Swish"
                && e.device == "SIMDML:0"
                && e.detail.contains("plugin 'simdml'")),
            "{l:?}"
        );
        assert!(l.iter().all(|e| e.reason != Reason::Decomposed), "{l:?}");
    }

    // The CPU and SIM have no kernel for it: the body runs there (Sigmoid, then Mul), on
    // that device, and the log says so. SIM has Mul but no Sigmoid, so with soft placement
    // that one statement runs on the CPU (strictly, the error names the statement).
    for (dev, strict) in [("CPU:0", true), ("SIM:0", false)] {
        log.lock().unwrap().clear();
        let d = rt.find_device(dev).unwrap();
        let y = rt
            .run_named(
                "simdml.Swish",
                &[x.copy_to(&d).unwrap()],
                &none,
                &on(&d, strict),
            )
            .unwrap();
        assert!(Arc::ptr_eq(y[0].device(), &d), "{dev}");
        assert_close(&y[0].to_vec::<f32>().unwrap(), dev);
        let l = log.lock().unwrap();
        assert!(
            l.iter()
                .any(|e| e.op == "simdml.Swish" && e.reason == Reason::Decomposed),
            "{dev}: {l:?}"
        );
        let sigmoid = l
            .iter()
            .find(|e| e.op == "Sigmoid" && e.reason != Reason::InputCopied)
            .expect("Sigmoid ran");
        let want = if strict {
            Reason::Decomposed
        } else {
            Reason::SoftPlaced
        };
        assert_eq!(sigmoid.reason, want, "{dev}: {l:?}");
    }
    let sim = rt.find_device("SIM:0").unwrap();
    let e = rt
        .run_named(
            "simdml.Swish",
            &[x.copy_to(&sim).unwrap()],
            &none,
            &on(&sim, true),
        )
        .unwrap_err();
    assert_eq!(e.code, Code::NotFound, "{e}");
    assert!(
        e.message
            .starts_with("simdml.Swish (decomposed on SIM:0): Sigmoid: no kernel"),
        "{e}"
    );

    // f64 too, on both paths.
    let x64 = Tensor::from_slice(&cpu, &[2], &[-2.0f64, 3.0]).unwrap();
    for d in [&cpu, &gpu] {
        let y = rt
            .run_named(
                "simdml.Swish",
                &[x64.copy_to(d).unwrap()],
                &none,
                &on(d, true),
            )
            .unwrap();
        let v = y[0].to_vec::<f64>().unwrap();
        assert!((v[0] - swish(-2.0)).abs() < 1e-12 && (v[1] - swish(3.0)).abs() < 1e-12);
    }
}

#[test]
fn its_dtype_rule_and_arity_are_the_ops_own() {
    let rt = with_plugins();
    let none = Attrs::new();
    let cpu = rt.find_device("CPU:0").unwrap();
    let i = Tensor::from_slice(&cpu, &[2], &[1i32, 2]).unwrap();
    let e = rt
        .run_named("simdml.Swish", &[i], &none, &on(&cpu, true))
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("simdml.Swish"), "{e}");
    assert!(e.message.contains("i32"), "{e}");

    let x = Tensor::from_slice(&cpu, &[2], &[1.0f32, 2.0]).unwrap();
    let e = rt
        .run_named("simdml.Swish", &[x.clone(), x], &none, &on(&cpu, true))
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("simdml.Swish"), "{e}");
}

#[test]
fn a_host_cannot_take_a_plugins_op_name() {
    let rt = with_plugins();
    let relu = rt.op("Relu").unwrap().def().clone();
    let e = rt
        .register_op(OpDef {
            name: "simdml.Swish".into(),
            ..relu
        })
        .unwrap_err();
    assert_eq!(e.code, Code::AlreadyExists, "{e}");
    assert!(e.message.contains("simdml.Swish"), "{e}");
    // and the plugin's op still works
    let cpu = rt.find_device("CPU:0").unwrap();
    let x = Tensor::from_slice(&cpu, &[6], &X).unwrap();
    let y = rt
        .run_named("simdml.Swish", &[x], &Attrs::new(), &on(&cpu, true))
        .unwrap();
    assert_close(&y[0].to_vec::<f32>().unwrap(), "after the refusal");
}

/// An op a Rust host defines in text (`Runtime::register_op_text`, what `dp_runtime_register_op`
/// does for C): its body runs on SIM, which has no kernel for it, and the placement log says
/// "decomposed"; the values equal the CPU's; a mistake names the statement and registers
/// nothing.
#[test]
fn a_hosts_op_in_text_runs_through_its_body_on_a_plugin_device() {
    use devplug_core::{AttrValue, OpText};
    let rt = with_plugins();
    let op = rt
        .register_op_text(&OpText {
            name: "app.Scale".into(),
            inputs: "x: T".into(),
            outputs: "y: T".into(),
            type_vars: "T: {f32, f64}".into(),
            attrs: "k: float = 2.0".into(),
            body: "y = Mul(x, @k)".into(),
        })
        .unwrap();
    assert_eq!(rt.op("app.Scale").unwrap().name(), "app.Scale");
    let log = record_placements(&rt);
    let k = Attrs::new().with("k", AttrValue::Float(0.5));
    let mut got = Vec::new();
    for spec in ["SIM:0", "CPU:0"] {
        let dev = rt.find_device(spec).unwrap();
        let x = Tensor::from_slice(&dev, &[6], &X).unwrap();
        let y = rt.run(&op, &[x], &k, &on(&dev, true)).unwrap();
        got.push(y[0].to_vec::<f32>().unwrap());
    }
    assert_eq!(got[0], got[1]);
    assert_eq!(got[0], X.map(|x| x * 0.5));
    let l = log.lock().unwrap();
    assert!(
        l.iter()
            .any(|e| e.op == "app.Scale" && e.device == "SIM:0" && e.reason == Reason::Decomposed),
        "{l:?}"
    );
    drop(l);
    let e = rt
        .register_op_text(&OpText {
            name: "app.Bad".into(),
            inputs: "x: f32".into(),
            outputs: "y: f32".into(),
            body: "y = Neg(x); y = Frobnicate(y)".into(),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("statement 2"), "{e}");
    assert_eq!(rt.op("app.Bad").unwrap_err().code, Code::NotFound);
}

/// Text ops built on text ops: a chain 16 bodies deep registers and runs; the 17th is refused
/// at registration (before, each level was a recursion of the checks, and thousands of levels
/// overflowed the stack); a body that calls the op below three times grows as 3^depth and is
/// refused past 10,000 expanded statements (before, registering 16 such levels took minutes).
#[test]
fn text_ops_nested_too_deep_or_expanding_too_far_are_refused_at_registration() {
    use devplug_core::OpText;
    let rt = runtime();
    let chain = |k: usize, body: String| OpText {
        name: format!("deep.Op{k}"),
        inputs: "x: f32".into(),
        outputs: "y: f32".into(),
        body,
        ..Default::default()
    };
    rt.register_op_text(&chain(1, "y = Neg(x)".into())).unwrap();
    for k in 2..=16 {
        rt.register_op_text(&chain(k, format!("y = deep.Op{}(x)", k - 1)))
            .unwrap();
    }
    let cpu = rt.find_device("CPU:0").unwrap();
    let x = Tensor::from_slice(&cpu, &[2], &[1f32, -2.]).unwrap();
    let y = rt
        .run_named("deep.Op16", &[x], &Attrs::new(), &on(&cpu, true))
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [-1., 2.]);
    let e = rt
        .register_op_text(&chain(17, "y = deep.Op16(x)".into()))
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(
        e.message.contains(
            "op 'deep.Op17': body: it nests ops defined by bodies 17 deep (each calling the \
             next), more than 16"
        ),
        "{e}"
    );

    let fan = |k: usize, body: String| OpText {
        name: format!("fan.Op{k}"),
        inputs: "x: f32".into(),
        outputs: "y: f32".into(),
        body,
        ..Default::default()
    };
    rt.register_op_text(&fan(1, "a = Neg(x); b = Neg(a); y = Neg(b)".into()))
        .unwrap();
    let mut refused = None;
    for k in 2..=12 {
        let p = k - 1;
        let body = format!("a = fan.Op{p}(x); b = fan.Op{p}(a); y = fan.Op{p}(b)");
        if let Err(e) = rt.register_op_text(&fan(k, body)) {
            refused = Some((k, e));
            break;
        }
    }
    let (k, e) = refused.expect("a fan-out body is refused");
    assert_eq!(k, 9, "3^9 = 19683 statements: {e}");
    assert!(
        e.message
            .contains("it is 19683 statements, more than 10000"),
        "{e}"
    );
}

/// A host registering the plugin's op name while the plugin loads: one of the two wins and
/// the other is refused whole. A load that loses registers nothing (no platform, no device,
/// no kernel); one that wins lists the op and its kernel runs. Before the runtime held one
/// lock across a load's checks and registrations, a host could take the name between them,
/// and the load failed after its platforms were registered.
#[test]
fn a_host_and_a_loading_plugin_racing_for_an_op_name_leave_one_whole_winner() {
    let (mut plugin_won, mut host_won) = (0, 0);
    for _ in 0..40 {
        let rt = runtime();
        let relu = rt.op("Relu").unwrap().def().clone();
        let go = std::sync::Barrier::new(2);
        let (load, host) = std::thread::scope(|s| {
            let load = s.spawn(|| {
                go.wait();
                rt.load_plugin(plugin_path("devplug_simdml"), &[])
            });
            let host = s.spawn(|| {
                go.wait();
                rt.register_op(OpDef {
                    name: "simdml.Swish".into(),
                    ..relu.clone()
                })
            });
            (load.join().unwrap(), host.join().unwrap())
        });
        match (load, host) {
            (Ok(info), Err(e)) => {
                plugin_won += 1;
                assert_eq!(e.code, Code::AlreadyExists, "{e}");
                assert_eq!(info.ops, ["simdml.Swish"]);
                assert_eq!(rt.kernels().locations("simdml.Swish").len(), 1);
            }
            (Err(e), Ok(_)) => {
                host_won += 1;
                assert_eq!(e.code, Code::AlreadyExists, "{e}");
                assert!(e.message.contains("simdml.Swish"), "{e}");
                assert!(rt.plugins().is_empty());
                assert!(rt.find_device("SIMDML:0").is_err(), "a platform was left");
                assert!(rt.kernels().locations("simdml.Swish").is_empty());
            }
            (l, h) => panic!("load {l:?}, host {h:?}: exactly one must win"),
        }
    }
    eprintln!("plugin won {plugin_won}, host won {host_won} of 40");
}
