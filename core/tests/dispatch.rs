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

/// A callback that runs ops is not called for the events of those ops (it would call itself
/// without end); another runtime's callback still is, and so is this one for the next op.
#[test]
fn a_placement_callback_that_runs_ops_is_not_called_for_them() {
    let rt = Arc::new(runtime());
    let other = Arc::new(runtime());
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let (s, w) = (seen.clone(), Arc::downgrade(&rt));
    let o = Arc::downgrade(&other);
    rt.set_placement_callback(Some(Arc::new(move |ev: &PlacementEvent| {
        s.lock().unwrap().push(format!("rt: {}", ev.op));
        let (Some(rt), Some(other)) = (w.upgrade(), o.upgrade()) else {
            return;
        };
        // An op on this runtime from inside its own callback, and one on another runtime.
        let x = f32s(&rt, &[2], &[1., 2.]);
        let y = run(&rt, "Neg", &[x], Attrs::new()).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), [-1., -2.]);
        let x = f32s(&other, &[2], &[1., 2.]);
        run(&other, "Exp", &[x], Attrs::new()).unwrap();
    })));
    let s = seen.clone();
    let r = Arc::downgrade(&rt);
    other.set_placement_callback(Some(Arc::new(move |ev: &PlacementEvent| {
        s.lock().unwrap().push(format!("other: {}", ev.op));
        // Back into the first runtime, whose callback is running on this thread.
        if let Some(rt) = r.upgrade() {
            let x = f32s(&rt, &[1], &[4.]);
            run(&rt, "Sqrt", &[x], Attrs::new()).unwrap();
        }
    })));
    let a = f32s(&rt, &[2], &[1., 2.]);
    run(&rt, "Add", &[a.clone(), a.clone()], Attrs::new()).unwrap();
    assert_eq!(*seen.lock().unwrap(), ["rt: Add", "other: Exp"]);
    run(&rt, "Mul", &[a.clone(), a], Attrs::new()).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        ["rt: Add", "other: Exp", "rt: Mul", "other: Exp"]
    );
    rt.set_placement_callback(None);
    other.set_placement_callback(None);
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

#[test]
fn rust_hosts_write_attributes_options_and_single_outputs_briefly() {
    let rt = runtime();
    let cpu1 = rt.find_device("CPU:1").unwrap();
    let x = f32s(&rt, &[2, 3], &[1., 2., 3., 4., 5., 6.]);
    let sum = rt.op("ReduceSum").unwrap();
    // Rust values convert to attribute values.
    let attrs = Attrs::new().with("axes", [1]).with("keep_dims", true);
    assert_eq!(attrs.get("axes"), Some(&AttrValue::Ints(vec![1])));
    let y = rt
        .run1(
            &sum,
            std::slice::from_ref(&x),
            &attrs,
            &RunOptions::on(&cpu1),
        )
        .unwrap();
    assert_eq!((y.shape(), y.device().name()), (&[2i64, 1][..], "CPU:1"));
    assert_eq!(y.to_vec::<f32>().unwrap(), [6., 15.]);
    let mut a = Attrs::new();
    a.set("k", 2.5f32)
        .set("n", 3i32)
        .set("mode", "fast")
        .set("dtype", DType::F16);
    a.set("v", vec![1i64, 2])
        .set("w", &[3i64][..])
        .set("s", String::from("x"));
    assert_eq!(a.float("k").unwrap(), 2.5);
    assert_eq!(a.int("n").unwrap(), 3);
    assert_eq!(a.str("mode").unwrap(), "fast");
    assert_eq!(a.dtype("dtype").unwrap(), DType::F16);
    assert_eq!(
        (a.ints("v").unwrap(), a.ints("w").unwrap()),
        (&[1i64, 2][..], &[3i64][..])
    );
    // Wrong types read as such (no doubled articles).
    assert_eq!(
        a.str("n").unwrap_err().message,
        "attribute 'n' must be a string, not an int"
    );
    assert_eq!(
        a.int("nope").unwrap_err().message,
        "attribute 'nope' is missing"
    );
    // Strict options refuse what only soft placement could run; run1 refuses several outputs.
    let strict = RunOptions::on(&cpu1).strict();
    assert_eq!(strict.soft_placement, Some(false));
    assert_eq!(
        RunOptions::default().soft_placement(true).soft_placement,
        Some(true)
    );
    let two = rt
        .register_op_text(&devplug_core::OpText {
            name: "app.Two".into(),
            inputs: "x: f32".into(),
            outputs: "a: f32, b: f32".into(),
            body: "a = Neg(x); b = Abs(x)".into(),
            ..Default::default()
        })
        .unwrap();
    let e = rt
        .run1(
            &two,
            std::slice::from_ref(&x),
            &Attrs::new(),
            &RunOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message
            .contains("app.Two: run1 returns one output, but the op has 2"),
        "{e}"
    );
    assert_eq!(rt.run(&two, &[x], &Attrs::new(), &strict).unwrap().len(), 2);
}

/// An op built in code: `y = f(x)` for `x: T` with `T: {f32}`, the given shape function and
/// decomposition.
fn coded_op(
    name: &str,
    shape_fn: devplug_core::op::ShapeFn,
    decomposition: devplug_core::op::Decomposition,
) -> devplug_core::OpDef {
    use devplug_core::op::{ArgDef, ArgType, TypeVar};
    devplug_core::OpDef {
        name: name.into(),
        inputs: vec![ArgDef {
            name: "x",
            ty: ArgType::Var("T"),
            list: false,
        }],
        outputs: vec![ArgDef {
            name: "y",
            ty: ArgType::Var("T"),
            list: false,
        }],
        type_vars: vec![TypeVar {
            name: "T",
            allowed: vec![DType::F32],
        }],
        attrs: vec![],
        shape_fn,
        decomposition: Some(decomposition),
    }
}

#[test]
fn ops_built_in_code_are_checked_like_text_ops() {
    use devplug_core::op::{AttrDef, AttrType, Specs, TensorSpec, TypeVar};
    let rt = runtime();
    let same: devplug_core::op::ShapeFn =
        Arc::new(|cx| Ok(Specs::from_elem(cx.inputs[0].to_spec()?, 1)));
    let neg: devplug_core::op::Decomposition = Arc::new(|e, x, _| e.op("Neg", x, &Attrs::new()));
    let def = |name: &str| coded_op(name, same.clone(), neg.clone());
    let refused = |d: devplug_core::OpDef| rt.register_op(d).unwrap_err();

    // A name the runtime has is taken, whatever the path; a name needs a namespace.
    assert_eq!(refused(def("Relu")).code, Code::AlreadyExists);
    let text = devplug_core::OpText {
        name: "Add".into(),
        ..Default::default()
    };
    let e = rt.register_op_text(&text).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (Code::AlreadyExists, "op 'Add' is already registered")
    );
    let e = refused(def("NoNamespace"));
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains("`namespace.Name`"), "{e}");

    // Inconsistent definitions.
    let mut d = def("app.Twice");
    d.outputs[0].name = "x";
    assert!(refused(d).message.contains("'x' is declared twice"));
    let mut d = def("app.Empty");
    d.type_vars = vec![TypeVar {
        name: "T",
        allowed: vec![],
    }];
    assert!(refused(d)
        .message
        .contains("type variable 'T' allows no dtype"));
    let mut d = def("app.Default");
    d.attrs = vec![AttrDef {
        name: "k",
        ty: AttrType::Float,
        default: Some(AttrValue::Str("two".into())),
    }];
    let e = refused(d);
    assert!(
        e.message
            .contains("attribute 'k' is a float but its default \"two\" is a string"),
        "{e}"
    );
    let mut d = def("app.IntDefault");
    d.attrs = vec![AttrDef {
        name: "k",
        ty: AttrType::Float,
        default: Some(AttrValue::Int(2)),
    }];
    rt.register_op(d)
        .expect("an int default for a float attribute");

    // A shape function that contradicts the signature fails the run, naming the output.
    let x = f32s(&rt, &[2], &[1., -2.]);
    let run = |name: &str| {
        rt.run1(
            &rt.op(name).unwrap(),
            std::slice::from_ref(&x),
            &Attrs::new(),
            &RunOptions::default(),
        )
    };
    let wrong_dtype: devplug_core::op::ShapeFn = Arc::new(|cx| {
        Ok(Specs::from_elem(
            TensorSpec::new(DType::I64, cx.inputs[0].shape)?,
            1,
        ))
    });
    rt.register_op(coded_op("app.WrongDtype", wrong_dtype, neg.clone()))
        .unwrap();
    let e = run("app.WrongDtype").unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert_eq!(
        e.message,
        "op 'app.WrongDtype': its shape function gives i64 for output 'y', but the signature makes it f32"
    );
    let none: devplug_core::op::ShapeFn = Arc::new(|_| Ok(Specs::new()));
    rt.register_op(coded_op("app.NoSpecs", none, neg.clone()))
        .unwrap();
    assert!(run("app.NoSpecs")
        .unwrap_err()
        .message
        .contains("gives 0 output(s), but the op declares 1"));

    // A decomposition that returns other than its shape function said fails too.
    let liar: devplug_core::op::Decomposition = Arc::new(|e, x, _| {
        let twice = e.op("Concat", &[x[0].clone(), x[0].clone()], &Attrs::new())?;
        e.op("Cast", &twice, &Attrs::new().with("dtype", DType::I32))
    });
    rt.register_op(coded_op("app.Liar", same.clone(), liar))
        .unwrap();
    let e = run("app.Liar").unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message.contains(
            "op 'app.Liar': its decomposition returned i32 [4] for output 'y'; its shape function says f32 [2]"
        ),
        "{e}"
    );
    // An honest one runs.
    rt.register_op(def("app.Honest")).unwrap();
    assert_eq!(
        run("app.Honest").unwrap().to_vec::<f32>().unwrap(),
        [-1., 2.]
    );
}

/// Concat of inputs whose sizes along the axis add up past i64::MAX: a clear
/// `INVALID_ARGUMENT` when run, and already when a graph node's partial shapes say so (before,
/// the sum wrapped around to a negative dimension, or to a wrong known size).
#[test]
fn concat_sizes_that_overflow_are_refused() {
    let rt = runtime();
    let cpu = rt.find_device("CPU:0").unwrap();
    let huge = Tensor::from_slice::<f32>(&cpu, &[0, i64::MAX], &[]).unwrap();
    let axis1 = || Attrs::new().with("axis", 1i64);
    let e = run(&rt, "Concat", &[huge.clone(), huge.clone()], axis1()).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(
        e.message
            .contains("the inputs' sizes along axis 1 add up to more than 9223372036854775807"),
        "{e}"
    );
    let mut g = devplug_core::Graph::new();
    let a = g
        .placeholder("a", DType::F32, Some(&[0, i64::MAX]))
        .unwrap();
    let b = g.placeholder("b", DType::F32, Some(&[0, -1])).unwrap();
    let concat = rt.op("Concat").unwrap();
    // One size unknown: the node's output size is unknown, not refused.
    g.op(&rt, "ab", &concat, &[a, b], &axis1(), None).unwrap();
    let e = g
        .op(&rt, "aa", &concat, &[a, a], &axis1(), None)
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("add up to more than"), "{e}");
}
