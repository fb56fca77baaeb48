//! Eager dispatch on the CPU: every basis op runs through the runtime, with its attribute
//! and shape rules, and bad inputs are clear errors naming the op and operand.

use std::sync::{Arc, Mutex};

use devplug_core::{
    AttrValue, Attrs, Code, DType, PlacementEvent, Reason, RunOptions, Runtime, RuntimeOptions,
    Tensor,
};

fn runtime() -> Runtime {
    Runtime::new(RuntimeOptions {
        discover_from_env: false,
        cpu_device_count: 2,
        ..Default::default()
    })
    .unwrap()
}

fn run(rt: &Runtime, op: &str, inputs: &[Tensor], attrs: Attrs) -> devplug_core::Result<Tensor> {
    Ok(rt
        .run_named(op, inputs, &attrs, &RunOptions::default())?
        .remove(0))
}

fn f32s(rt: &Runtime, shape: &[i64], v: &[f32]) -> Tensor {
    Tensor::from_slice(&rt.find_device("CPU").unwrap(), shape, v).unwrap()
}

#[test]
fn add_broadcasts_and_reports_its_placement() {
    let rt = runtime();
    let events = Arc::new(Mutex::new(Vec::<PlacementEvent>::new()));
    let e = events.clone();
    rt.set_placement_callback(Some(Arc::new(move |ev: &PlacementEvent| {
        e.lock().unwrap().push(ev.clone())
    })));
    let a = f32s(&rt, &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let b = f32s(&rt, &[3], &[10., 20., 30.]);
    let c = run(&rt, "Add", &[a, b], Attrs::new()).unwrap();
    assert_eq!(c.shape(), &[2, 3]);
    assert_eq!(c.to_vec::<f32>().unwrap(), [11., 22., 33., 14., 25., 36.]);
    let ev = events.lock().unwrap();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].op.as_str(), ev[0].device.as_str(), ev[0].reason),
        ("Add", "HOST:0", Reason::Default)
    );
    assert!(ev[0].detail.contains("built-in"));
}

#[test]
fn bad_inputs_name_the_op_and_operand() {
    let rt = runtime();
    let a = f32s(&rt, &[2, 3], &[0.; 6]);
    let b = f32s(&rt, &[4], &[0.; 4]);
    let i = Tensor::from_slice(&rt.find_device("CPU").unwrap(), &[3], &[1i32, 2, 3]).unwrap();
    let e = run(&rt, "Add", &[a.clone(), b], Attrs::new()).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message.contains("Add") && e.message.contains("broadcast"),
        "{e}"
    );
    let e = run(&rt, "Add", &[a.clone(), i.clone()], Attrs::new()).unwrap_err();
    assert!(
        e.message.contains("Add") && e.message.contains("'y'") && e.message.contains("i32"),
        "{e}"
    );
    let e = run(&rt, "Add", std::slice::from_ref(&a), Attrs::new()).unwrap_err();
    assert!(e.message.contains("expected 2 input(s), got 1"), "{e}");
    let e = run(&rt, "Exp", &[i], Attrs::new()).unwrap_err();
    assert!(
        e.message.contains("Exp") && e.message.contains("f32"),
        "{e}"
    );
    let e = run(
        &rt,
        "Add",
        &[a.clone(), a.clone()],
        Attrs::new().with("alpha", AttrValue::Int(1)),
    )
    .unwrap_err();
    assert!(e.message.contains("unknown attribute 'alpha'"), "{e}");
    let e = run(
        &rt,
        "Transpose",
        std::slice::from_ref(&a),
        Attrs::new().with("perm", AttrValue::Bool(true)),
    )
    .unwrap_err();
    assert!(e.message.contains("'perm' must be an int list"), "{e}");
    let e = rt
        .run_named("Nope", &[], &Attrs::new(), &RunOptions::default())
        .unwrap_err();
    assert_eq!(e.code, Code::NotFound);
    let e = run(&rt, "Cast", &[a], Attrs::new()).unwrap_err();
    assert!(e.message.contains("required attribute 'dtype'"), "{e}");
}

#[test]
fn composites_decompose_or_run_natively() {
    let rt = runtime();
    let x = f32s(&rt, &[2, 3], &[1., 2., 3., 1., 1., 1.]);
    let s = run(&rt, "Softmax", std::slice::from_ref(&x), Attrs::new())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let e: Vec<f32> = [1f32, 2., 3.].iter().map(|v| v.exp()).collect();
    let sum: f32 = e.iter().sum();
    for (got, want) in s[..3].iter().zip(e.iter().map(|v| v / sum)) {
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }
    assert!(s[3..].iter().all(|v| (v - 1. / 3.).abs() < 1e-6));
    let r = run(
        &rt,
        "Relu",
        &[f32s(&rt, &[3], &[-1., 0., 2.])],
        Attrs::new(),
    )
    .unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), [0., 0., 2.]);
    let g = run(&rt, "Gelu", &[f32s(&rt, &[1], &[1.])], Attrs::new())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!((g[0] - 0.841192).abs() < 1e-4, "{}", g[0]);
    let ls = run(&rt, "LogSoftmax", &[x], Attrs::new())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!((ls[3] - (1f32 / 3.).ln()).abs() < 1e-6);
}

#[test]
fn inputs_on_another_device_are_copied() {
    let rt = runtime();
    let cpu1 = rt.find_device("CPU:1").unwrap();
    let a = Tensor::from_slice(&cpu1, &[2], &[1.0f64, 2.0]).unwrap();
    let b = Tensor::from_slice(&rt.find_device("CPU:0").unwrap(), &[2], &[3.0f64, 4.0]).unwrap();
    let out = rt
        .run_named(
            "Mul",
            &[a, b],
            &Attrs::new(),
            &RunOptions {
                device: Some(cpu1.clone()),
                soft_placement: None,
            },
        )
        .unwrap();
    assert!(Arc::ptr_eq(out[0].device(), &cpu1));
    assert_eq!(out[0].to_vec::<f64>().unwrap(), [3.0, 8.0]);
    assert_eq!(out[0].dtype(), DType::F64);
}
