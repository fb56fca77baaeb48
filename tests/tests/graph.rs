//! Graphs and variables, as a Rust host uses them: build once, run many times with feeds;
//! placement decided when a node is added (explicit, scopes, setters that tell variables from
//! computation); several devices in one graph; variables read and assigned, all-or-nothing per
//! run; and the errors at build time and at run time, after which the runtime goes on.

use std::sync::{Arc, Mutex};

use devplug_core::op::{smallvec, ArgDef, ArgType, TensorSpec, TypeVar};
use devplug_core::{
    AttrValue, Attrs, Binding, Code, DType, Graph, GraphRunOptions, KernelDef, NodeOutput, OpDef,
    OpKind, OpText, PartialSpec, Reason, Runtime, Tensor,
};
use devplug_tests::{options, plugin_path, record_placements};

fn with_sim() -> Runtime {
    let rt = Runtime::new(options()).unwrap();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    rt
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

fn transpose_attrs() -> Attrs {
    let mut a = Attrs::new();
    a.set("transpose_a", AttrValue::Bool(false));
    a
}

/// x·w + b, then Relu (a composite op: it runs through its decomposition), built once and
/// run with two batch sizes; the values equal the same ops run eagerly.
#[test]
fn a_graph_is_built_once_and_run_with_different_feeds() {
    let rt = Runtime::new(options()).unwrap();
    let cpu = rt.default_device().clone();
    let w = Tensor::from_slice(&cpu, &[3, 2], &[1f32, -1., 0.5, 2., -2., 0.]).unwrap();
    let b = Tensor::from_slice(&cpu, &[2], &[0.5f32, -4.]).unwrap();
    let (matmul, add, relu) = (
        rt.op("MatMul").unwrap(),
        rt.op("Add").unwrap(),
        rt.op("Relu").unwrap(),
    );
    let mut g = Graph::new();
    let x = g.placeholder("x", DType::F32, Some(&[-1, 3])).unwrap();
    let wc = g.constant("w", &w).unwrap();
    let bc = g.constant("b", &b).unwrap();
    let h = g
        .op(&rt, "h", &matmul, &[x, wc], &transpose_attrs(), None)
        .unwrap();
    // x has a dimension of unknown size: so has MatMul's output; only a run tells it all.
    assert_eq!(g.spec(h[0]).unwrap(), None);
    assert_eq!(g.partial_spec(h[0]).unwrap().to_string(), "f32 [-1, 2]");
    let hb = g
        .op(&rt, "hb", &add, &[h[0], bc], &Attrs::new(), None)
        .unwrap();
    let y = g
        .op(&rt, "y", &relu, &[hb[0]], &Attrs::new(), None)
        .unwrap();
    assert_eq!(g.node_count(), 6);
    assert_eq!(g.find("y", 0).unwrap(), y[0]);
    assert_eq!(g.node_name(y[0]).unwrap(), "y");

    for rows in [1usize, 4] {
        let data: Vec<f32> = (0..rows * 3).map(|i| i as f32 - 2.0).collect();
        let xt = Tensor::from_slice(&cpu, &[rows as i64, 3], &data).unwrap();
        let out = g.run(&rt, &[(x, xt.clone())], &[y[0], h[0]]).unwrap();
        // The same ops, eagerly.
        let o = Default::default();
        let eh = rt
            .run(&matmul, &[xt, w.clone()], &Attrs::new(), &o)
            .unwrap();
        let ehb = rt
            .run(&add, &[eh[0].clone(), b.clone()], &Attrs::new(), &o)
            .unwrap();
        let ey = rt.run(&relu, &[ehb[0].clone()], &Attrs::new(), &o).unwrap();
        assert_eq!(out[0].shape(), [rows as i64, 2]);
        assert_eq!(f32s(&out[0]), f32s(&ey[0]));
        assert_eq!(f32s(&out[1]), f32s(&eh[0]));
        assert!(f32s(&out[0]).iter().all(|&v| v >= 0.0));
        if rows == 4 {
            // Relu let something through: the comparison above is not of two zero tensors.
            assert!(f32s(&out[0]).iter().any(|&v| v > 0.0));
        }
    }
    // Fetching a placeholder returns its feed; fetching a constant needs no feed.
    let xt = Tensor::from_slice(&cpu, &[1, 3], &[1f32, 2., 3.]).unwrap();
    let out = g.run(&rt, &[(x, xt)], &[x]).unwrap();
    assert_eq!(f32s(&out[0]), [1., 2., 3.]);
    assert_eq!(f32s(&g.run(&rt, &[], &[bc]).unwrap()[0]), [0.5, -4.]);
    // An empty fetch list runs nothing.
    assert!(g.run(&rt, &[], &[]).unwrap().is_empty());
}

/// With every shape known, an op node is checked when it is added: the error names the node
/// and the op, and nothing is added.
#[test]
fn mistakes_are_refused_when_a_node_is_added() {
    let rt = Runtime::new(options()).unwrap();
    let other = Runtime::new(options()).unwrap();
    let (matmul, add) = (rt.op("MatMul").unwrap(), rt.op("Add").unwrap());
    let mut g = Graph::new();
    let a = g.placeholder("a", DType::F32, Some(&[2, 3])).unwrap();
    let b = g.placeholder("b", DType::F32, Some(&[2, 3])).unwrap();
    let i = g.placeholder("i", DType::I32, Some(&[2, 3])).unwrap();
    let u = g.placeholder("u", DType::F32, None).unwrap();
    let check = |r: devplug_core::Result<Vec<NodeOutput>>, code: Code, parts: &[&str]| {
        let e = r.unwrap_err();
        assert_eq!(e.code, code, "{e}");
        for p in parts {
            assert!(e.message.contains(p), "{p:?} not in: {e}");
        }
    };
    let none = Attrs::new();
    check(
        g.op(&rt, "mm", &matmul, &[a, b], &none, None),
        Code::InvalidArgument,
        &["graph node 'mm' (MatMul)", "MatMul"],
    );
    check(
        g.op(&rt, "sum", &add, &[a, i], &none, None),
        Code::InvalidArgument,
        &["graph node 'sum' (Add)"],
    );
    check(
        g.op(&rt, "one", &add, &[a], &none, None),
        Code::InvalidArgument,
        &["'one'", "expected 2 input(s), got 1"],
    );
    // Unknown shapes: the arity and the attributes are still checked now.
    check(
        g.op(&rt, "one_u", &add, &[u], &none, None),
        Code::InvalidArgument,
        &["'one_u'", "expected 2 input(s), got 1"],
    );
    let mut bad_attr = Attrs::new();
    bad_attr.set("frobnicate", AttrValue::Int(1));
    check(
        g.op(&rt, "attr", &add, &[u, u], &bad_attr, None),
        Code::InvalidArgument,
        &["'attr'", "frobnicate"],
    );
    let t = g.op(&rt, "t", &add, &[a, b], &none, None).unwrap();
    assert_eq!(g.spec(t[0]).unwrap().unwrap().shape.as_ref(), [2, 3]);
    check(
        g.op(&rt, "t", &add, &[a, b], &none, None),
        Code::InvalidArgument,
        &["a node named 't' exists"],
    );
    assert!(g.placeholder("t", DType::F32, None).is_err());
    // Outputs of another graph, op handles and devices of another runtime.
    let mut g2 = Graph::new();
    let foreign = g2.placeholder("z", DType::F32, None).unwrap();
    check(
        g.op(&rt, "f", &add, &[a, foreign], &none, None),
        Code::InvalidArgument,
        &["'f'", "input 1 is an output of another graph"],
    );
    check(
        g.op(&rt, "f", &other.op("Add").unwrap(), &[a, b], &none, None),
        Code::InvalidArgument,
        &["another runtime"],
    );
    check(
        g.op(&rt, "f", &add, &[a, b], &none, Some(other.default_device())),
        Code::InvalidArgument,
        &["another runtime"],
    );
    let ot = Tensor::from_slice(other.default_device(), &[1], &[1f32]).unwrap();
    assert_eq!(
        g.constant("c", &ot).unwrap_err().code,
        Code::InvalidArgument
    );
    assert!(g.placeholder("bad", DType::F32, Some(&[-2])).is_err());
    // Nothing of the refused nodes was added; the graph still runs.
    assert_eq!(g.node_count(), 5);
    let at = Tensor::from_slice(rt.default_device(), &[2, 3], &[1f32; 6]).unwrap();
    let out = g.run(&rt, &[(a, at.clone()), (b, at)], &[t[0]]).unwrap();
    assert_eq!(f32s(&out[0]), [2.0; 6]);
    assert_eq!(g.find("nope", 0).unwrap_err().code, Code::NotFound);
    assert_eq!(g.find("t", 1).unwrap_err().code, Code::NotFound);
}

fn partial(dtype: DType, shape: &[i64]) -> PartialSpec {
    PartialSpec::new(Some(dtype), Some(shape)).unwrap()
}

/// A dynamic batch: what is known of each output before running (dtype, rank, the sizes that
/// do not depend on the batch), and mistakes refused when the node is added although the
/// batch size is unknown.
#[test]
fn a_dynamic_batch_is_carried_through_the_graph_and_mistakes_refused_early() {
    let rt = Runtime::new(options()).unwrap();
    let cpu = rt.default_device().clone();
    let op = |n: &str| rt.op(n).unwrap();
    let none = Attrs::new();
    let mut g = Graph::new();
    let x = g.placeholder("x", DType::F32, Some(&[-1, 4])).unwrap();
    let w = Tensor::from_slice(&cpu, &[4, 3], &[0.5f32; 12]).unwrap();
    let b = Tensor::from_slice(&cpu, &[3], &[1f32, 2., 3.]).unwrap();
    let (wc, bc) = (g.constant("w", &w).unwrap(), g.constant("b", &b).unwrap());
    let h = g
        .op(&rt, "h", &op("MatMul"), &[x, wc], &none, None)
        .unwrap()[0];
    let hb = g.op(&rt, "hb", &op("Add"), &[h, bc], &none, None).unwrap()[0];
    let p = g.op1(&rt, "p", &op("Softmax"), &[hb], &none, None).unwrap();
    let sum = Attrs::new().with("axes", vec![1i64]);
    let s = g.op(&rt, "s", &op("ReduceSum"), &[p], &sum, None).unwrap()[0];
    let all = g
        .op(&rt, "all", &op("ReduceMax"), &[p], &none, None)
        .unwrap()[0];
    for (out, want) in [(h, [-1, 3]), (hb, [-1, 3]), (p, [-1, 3])] {
        assert_eq!(g.partial_spec(out).unwrap(), partial(DType::F32, &want));
    }
    assert_eq!(g.partial_spec(s).unwrap(), partial(DType::F32, &[-1]));
    // Everything reduced: a scalar whatever the batch, so known whole.
    assert_eq!(g.spec(all).unwrap().unwrap().shape.as_ref(), [] as [i64; 0]);

    // No batch size could make these right: refused now, naming the node.
    let bad = Tensor::from_slice(&cpu, &[5, 2], &[0f32; 10]).unwrap();
    let badc = g.constant("bad", &bad).unwrap();
    let e = g
        .op(&rt, "wrong", &op("MatMul"), &[x, badc], &none, None)
        .unwrap_err();
    assert_eq!(
        e.message,
        "graph node 'wrong' (MatMul): MatMul: inner dimensions differ: 'a' [-1, 4] has 4, 'b' \
         [5, 2] has 5"
    );
    let e = g
        .op(&rt, "wrong", &op("Add"), &[h, badc], &none, None)
        .unwrap_err();
    assert!(e.message.contains("cannot be broadcast"), "{e}");
    let i = g.placeholder("i", DType::I32, None).unwrap();
    let e = g
        .op(&rt, "wrong", &op("Mul"), &[i, h], &none, None)
        .unwrap_err();
    assert_eq!(
        e.message,
        "graph node 'wrong' (Mul): Mul: input 'y' is f32 but 'x' is i32; both have type T"
    );
    // A placeholder of unknown shape: its dtype is known, and a Cast's.
    assert_eq!(
        g.partial_spec(i).unwrap(),
        PartialSpec::new(Some(DType::I32), None).unwrap()
    );
    let cast = Attrs::new().with("dtype", DType::F64);
    let c = g.op(&rt, "c", &op("Cast"), &[i], &cast, None).unwrap()[0];
    assert_eq!(g.partial_spec(c).unwrap().dtype, Some(DType::F64));
    assert_eq!(g.partial_spec(c).unwrap().shape, None);

    // An op defined in text carries it through its body; one built in code, its dtypes.
    let scaled = rt
        .register_op_text(&OpText {
            name: "test.Scaled".into(),
            inputs: "x: T".into(),
            outputs: "y: T".into(),
            type_vars: "T: {f32, f64}".into(),
            body: "t = Mul(x, 2)\ny = Transpose(t)".into(),
            ..Default::default()
        })
        .unwrap();
    let t = g.op(&rt, "t", &scaled, &[x], &none, None).unwrap()[0];
    assert_eq!(g.partial_spec(t).unwrap(), partial(DType::F32, &[4, -1]));
    let e = g.op(&rt, "wrong", &scaled, &[i], &none, None).unwrap_err();
    assert!(e.message.contains("T must be one of f32, f64"), "{e}");
    let arg = |name| ArgDef {
        name,
        ty: ArgType::Var("T"),
        list: false,
    };
    let coded = rt
        .register_op(OpDef {
            name: "test.Coded".into(),
            inputs: vec![arg("x")],
            outputs: vec![
                arg("y"),
                ArgDef {
                    name: "n",
                    ty: ArgType::Fixed(DType::I64),
                    list: false,
                },
            ],
            type_vars: vec![TypeVar {
                name: "T",
                allowed: vec![DType::F32],
            }],
            attrs: vec![],
            shape_fn: Arc::new(|cx| {
                Ok(smallvec![
                    cx.inputs[0].to_spec()?,
                    TensorSpec::new(DType::I64, &[])?
                ])
            }),
            decomposition: None,
        })
        .unwrap();
    // op1 is for ops with one output: refused here, the graph as it was.
    let nodes = g.node_count();
    let e = g.op1(&rt, "k1", &coded, &[x], &none, None).unwrap_err();
    assert_eq!(
        e.message,
        "graph node 'k1' (test.Coded): op1 returns one output, but the op has 2; use op"
    );
    assert_eq!(g.node_count(), nodes);
    let k = g.op(&rt, "k", &coded, &[x], &none, None).unwrap();
    assert_eq!(
        g.partial_spec(k[0]).unwrap(),
        PartialSpec::new(Some(DType::F32), None).unwrap()
    );
    assert_eq!(
        g.partial_spec(k[1]).unwrap(),
        PartialSpec::new(Some(DType::I64), None).unwrap()
    );

    // Assigning a value whose known sizes differ from the variable's.
    let v = rt.variable("v", &b, None).unwrap();
    let e = g.assign("a", &v, h).unwrap_err();
    assert_eq!(
        e.message,
        "graph node 'a' (Assign): variable 'v' holds f32 [3]; the value is f32 [-1, 3]"
    );

    // Runs give what the specs promised, for two batch sizes.
    for batch in [1usize, 5] {
        let xv = Tensor::from_slice(&cpu, &[batch as i64, 4], &vec![1f32; batch * 4]).unwrap();
        let out = g.run(&rt, &[(x, xv)], &[h, s, t]).unwrap();
        assert_eq!(out[0].shape(), [batch as i64, 3]);
        assert_eq!(out[1].shape(), [batch as i64]);
        assert_eq!(out[2].shape(), [4, batch as i64]);
        for (o, fetch) in out.iter().zip([h, s, t]) {
            assert!(g.partial_spec(fetch).unwrap().admits(o.dtype(), o.shape()));
        }
    }
}

#[test]
fn bad_feeds_and_fetches_are_refused_with_the_node_named() {
    let rt = Runtime::new(options()).unwrap();
    let other = Runtime::new(options()).unwrap();
    let cpu = rt.default_device().clone();
    let add = rt.op("Add").unwrap();
    let mut g = Graph::new();
    let x = g.placeholder("x", DType::F32, Some(&[-1, 2])).unwrap();
    let y = g.placeholder("y", DType::F32, None).unwrap();
    let s = g.op(&rt, "s", &add, &[x, y], &Attrs::new(), None).unwrap()[0];
    let ok = Tensor::from_slice(&cpu, &[1, 2], &[1f32, 2.]).unwrap();
    let err = |feeds: &[(NodeOutput, Tensor)], fetches: &[NodeOutput], parts: &[&str]| {
        let e = g.run(&rt, feeds, fetches).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
        for p in parts {
            assert!(e.message.contains(p), "{p:?} not in: {e}");
        }
    };
    err(&[(x, ok.clone())], &[s], &["placeholder 'y'", "not fed"]);
    err(
        &[(x, ok.clone()), (y, ok.clone()), (x, ok.clone())],
        &[s],
        &["feed 2", "'x' is fed twice"],
    );
    err(&[(s, ok.clone())], &[s], &["'s' is not a placeholder"]);
    let wrong_shape = Tensor::from_slice(&cpu, &[2], &[1f32, 2.]).unwrap();
    err(
        &[(x, wrong_shape), (y, ok.clone())],
        &[s],
        &["placeholder 'x' takes f32 [-1, 2]", "fed f32 [2]"],
    );
    let wrong_dtype = Tensor::from_slice(&cpu, &[1, 2], &[1i32, 2]).unwrap();
    err(
        &[(y, wrong_dtype), (x, ok.clone())],
        &[s],
        &["placeholder 'y'"],
    );
    let mut g2 = Graph::new();
    let foreign = g2.placeholder("x", DType::F32, None).unwrap();
    err(&[], &[foreign], &["fetch 0 is an output of another graph"]);
    err(&[(foreign, ok.clone())], &[], &["feed 0"]);
    let e = g.run(&other, &[], &[]).unwrap_err();
    assert!(e.message.contains("another runtime"), "{e}");
    // After all that, a good run.
    let out = g.run(&rt, &[(x, ok.clone()), (y, ok)], &[s]).unwrap();
    assert_eq!(f32s(&out[0]), [2., 4.]);
}

/// Nodes on two devices: each runs where it was placed, the input crossing devices is copied,
/// and the log says so.
#[test]
fn one_graph_runs_on_several_devices() {
    let rt = with_sim();
    let log = record_placements(&rt);
    let sim = rt.find_device("SIM:0").unwrap();
    let cpu = rt.default_device().clone();
    let (mul, neg) = (rt.op("Mul").unwrap(), rt.op("Neg").unwrap());
    let mut g = Graph::new();
    let x = g.placeholder("x", DType::F32, Some(&[3])).unwrap();
    let sq = g
        .op(&rt, "square", &mul, &[x, x], &Attrs::new(), Some(&sim))
        .unwrap()[0];
    let n = g
        .op(&rt, "negate", &neg, &[sq], &Attrs::new(), None)
        .unwrap()[0];
    let xt = Tensor::from_slice(&cpu, &[3], &[1f32, 2., 3.]).unwrap();
    let out = g.run(&rt, &[(x, xt)], &[sq, n]).unwrap();
    assert_eq!(out[0].device().qualified_name(), "SIM:0");
    assert_eq!(out[1].device().qualified_name(), "HOST:0");
    assert_eq!(f32s(&out[0]), [1., 4., 9.]);
    assert_eq!(f32s(&out[1]), [-1., -4., -9.]);
    let l = log.lock().unwrap();
    let has = |op: &str, dev: &str, reason: Reason| {
        l.iter()
            .any(|e| e.op == op && e.device == dev && e.reason == reason)
    };
    assert!(has("Mul", "SIM:0", Reason::Explicit), "{l:?}");
    assert!(has("Mul", "SIM:0", Reason::InputCopied), "{l:?}");
    assert!(has("Neg", "HOST:0", Reason::Default), "{l:?}");
    assert!(has("Neg", "HOST:0", Reason::InputCopied), "{l:?}");
    // A copy names the node the input comes from.
    let copies: Vec<&str> = l
        .iter()
        .filter(|e| e.reason == Reason::InputCopied)
        .map(|e| e.detail.as_str())
        .collect();
    assert!(
        copies.contains(&"input copied from HOST:0 (graph node 'x')")
            && copies.contains(&"input copied from SIM:0 (graph node 'square')"),
        "{copies:?}"
    );
}

/// A constant on the CPU that feeds a node on SIM is copied there by the first run and the
/// copy is reused: over three runs the log shows one copy.
#[test]
fn a_constant_is_copied_to_another_device_once() {
    let rt = with_sim();
    let log = record_placements(&rt);
    let sim = rt.find_device("SIM:0").unwrap();
    let cpu = rt.default_device().clone();
    let add = rt.op("Add").unwrap();
    let mut g = Graph::new();
    let x = g.placeholder("x", DType::F32, Some(&[2])).unwrap();
    let b = g
        .constant("b", &Tensor::from_slice(&cpu, &[2], &[10f32, 20.]).unwrap())
        .unwrap();
    let y = g
        .op(&rt, "y", &add, &[x, b], &Attrs::new(), Some(&sim))
        .unwrap()[0];
    for i in 0..3 {
        let xt = Tensor::from_slice(&sim, &[2], &[i as f32, 1.]).unwrap();
        let out = g.run(&rt, &[(x, xt)], &[y, b]).unwrap();
        assert_eq!(f32s(&out[0]), [10. + i as f32, 21.]);
        assert_eq!(
            out[1].device().qualified_name(),
            "HOST:0",
            "a fetched constant is itself"
        );
    }
    let l = log.lock().unwrap();
    let copies: Vec<_> = l
        .iter()
        .filter(|e| e.reason == Reason::InputCopied)
        .collect();
    assert_eq!(copies.len(), 1, "{l:?}");
    assert_eq!(copies[0].device, "SIM:0");
    assert!(
        copies[0]
            .detail
            .contains("constant 'b' copied from HOST:0 once"),
        "{copies:?}"
    );
}

/// A node placed on SIM whose op SIM has no kernel for runs on the CPU (soft placement): a
/// constant given on the CPU goes to it as it is, on every run — not to SIM and back. A
/// decomposed node on SIM takes the constant's one copy there, as a native one does.
#[test]
fn a_soft_placed_node_takes_a_cpu_constant_where_it_is() {
    let rt = with_sim();
    let log = record_placements(&rt);
    let sim = rt.find_device("SIM:0").unwrap();
    let cpu = rt.default_device().clone();
    let (div, log_softmax) = (rt.op("Div").unwrap(), rt.op("LogSoftmax").unwrap());
    let mut g = Graph::new();
    let x = g.placeholder("x", DType::F32, Some(&[2])).unwrap();
    let b = g
        .constant("b", &Tensor::from_slice(&cpu, &[2], &[2f32, 4.]).unwrap())
        .unwrap();
    let y = g
        .op(&rt, "y", &div, &[x, b], &Attrs::new(), Some(&sim))
        .unwrap()[0];
    let z = g
        .op(&rt, "z", &log_softmax, &[b], &Attrs::new(), Some(&sim))
        .unwrap()[0];
    for i in 0..3 {
        let xt = Tensor::from_slice(&cpu, &[2], &[8f32, i as f32]).unwrap();
        let out = g.run(&rt, &[(x, xt)], &[y, z]).unwrap();
        assert_eq!(f32s(&out[0]), [4., i as f32 / 4.]);
        let want = [
            2f32 - (2f32.exp() + 4f32.exp()).ln(),
            4. - (2f32.exp() + 4f32.exp()).ln(),
        ];
        let got = f32s(&out[1]);
        assert!(
            got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-5),
            "{got:?} vs {want:?}"
        );
    }
    let l = log.lock().unwrap();
    // Div ran on the CPU every time, and nothing was copied for it.
    let divs: Vec<_> = l.iter().filter(|e| e.op == "Div").collect();
    assert_eq!(divs.len(), 3, "{l:?}");
    assert!(
        divs.iter()
            .all(|e| e.reason == Reason::SoftPlaced && e.device == "HOST:0"),
        "{divs:?}"
    );
    // The one copy of `b` is LogSoftmax's, to SIM, made by the first run.
    let constant_copies: Vec<_> = l
        .iter()
        .filter(|e| e.reason == Reason::InputCopied && e.detail.contains("constant 'b'"))
        .collect();
    assert_eq!(constant_copies.len(), 1, "{l:?}");
    assert_eq!(
        (
            constant_copies[0].op.as_str(),
            constant_copies[0].device.as_str()
        ),
        ("LogSoftmax", "SIM:0")
    );
    // No input of Div was copied back from SIM.
    assert!(
        !l.iter()
            .any(|e| e.op == "Div" && e.detail.contains("copied from SIM:0")),
        "{l:?}"
    );
}

/// Placement is decided when a node is added, under the scopes entered then: a graph built
/// inside a scope runs there later, outside any scope. A setter sees each node's name, and a
/// variable's kind: variables on the CPU, computation on SIM.
#[test]
fn nodes_are_placed_by_the_scopes_in_force_when_they_are_added() {
    let rt = with_sim();
    let log = record_placements(&rt);
    let sim = rt.find_device("SIM:0").unwrap();
    let cpu = rt.default_device().clone();
    let seen: Arc<Mutex<Vec<(String, String, OpKind)>>> = Arc::default();
    let (s2, sim2) = (seen.clone(), sim.clone());
    let setter = rt.setter_scope(move |info| {
        s2.lock()
            .unwrap()
            .push((info.name.to_string(), info.op.to_string(), info.kind));
        Ok(match info.kind {
            OpKind::Variable => None,
            OpKind::Compute => Some(sim2.clone()),
        })
    });
    let one = Tensor::from_slice(&cpu, &[2], &[1f32, 2.]).unwrap();
    let add = rt.op("Add").unwrap();
    let mut g = Graph::new();
    let (v, sum) = {
        let _in = setter.enter();
        let v = rt.variable("weights", &one, None).unwrap();
        let r = g.read("read_w", &v).unwrap();
        let sum = g
            .op(&rt, "sum", &add, &[r, r], &Attrs::new(), None)
            .unwrap()[0];
        (v, sum)
    };
    assert_eq!(v.device().qualified_name(), "HOST:0");
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (
                "weights".to_string(),
                "Variable".to_string(),
                OpKind::Variable
            ),
            ("sum".to_string(), "Add".to_string(), OpKind::Compute),
        ]
    );
    // Outside the scope, later: the node still runs on SIM, placed by the setter.
    let out = g.run(&rt, &[], &[sum]).unwrap();
    assert_eq!(out[0].device().qualified_name(), "SIM:0");
    assert_eq!(f32s(&out[0]), [2., 4.]);
    let l = log.lock().unwrap();
    assert!(
        l.iter().any(|e| e.op == "weights"
            && e.reason == Reason::Default
            && e.detail == "variable"
            && e.device == "HOST:0"),
        "{l:?}"
    );
    assert!(
        l.iter()
            .any(|e| e.op == "Add" && e.reason == Reason::Setter && e.device == "SIM:0"),
        "{l:?}"
    );
    drop(l);
    // A device scope and an explicit device for variables too.
    {
        let _in = rt.device_scope(&sim).unwrap().enter();
        assert_eq!(
            rt.variable("v2", &one, None)
                .unwrap()
                .device()
                .qualified_name(),
            "SIM:0"
        );
        assert_eq!(
            rt.variable("v3", &one, Some(&cpu))
                .unwrap()
                .device()
                .qualified_name(),
            "HOST:0"
        );
    }
    // A setter's error fails the variable's creation and the node's addition, naming them.
    let failing = rt.setter_scope(|_| Err(devplug_core::Error::internal("no placement today")));
    let _in = failing.enter();
    let e = rt.variable("v4", &one, None).unwrap_err();
    assert!(
        e.message.contains("v4") && e.message.contains("no placement today"),
        "{e}"
    );
    let e = g
        .op(&rt, "sum2", &add, &[sum, sum], &Attrs::new(), None)
        .unwrap_err();
    assert!(
        e.message.contains("'sum2'") && e.message.contains("no placement today"),
        "{e}"
    );
}

/// A training step as a graph: w ← w − lr·grad. Assignments take effect when the run
/// succeeded; reads in the same run see the value from before.
#[test]
fn variables_are_read_and_assigned_by_runs() {
    let rt = with_sim();
    let sim = rt.find_device("SIM:0").unwrap();
    let cpu = rt.default_device().clone();
    let w0 = Tensor::from_slice(&cpu, &[3], &[1f32, 2., 3.]).unwrap();
    let w = rt.variable("w", &w0, Some(&sim)).unwrap();
    assert_eq!((w.name(), w.dtype(), w.shape()), ("w", DType::F32, vec![3]));
    assert_eq!(w.read().device().qualified_name(), "SIM:0");
    let (mul, sub) = (rt.op("Mul").unwrap(), rt.op("Sub").unwrap());
    let mut g = Graph::new();
    let grad = g.placeholder("grad", DType::F32, Some(&[3])).unwrap();
    let lr = g
        .constant("lr", &Tensor::from_slice(&cpu, &[], &[0.5f32]).unwrap())
        .unwrap();
    let r = g.read("w_read", &w).unwrap();
    let step = g
        .op(&rt, "step", &mul, &[grad, lr], &Attrs::new(), None)
        .unwrap()[0];
    let next = g
        .op(&rt, "next", &sub, &[r, step], &Attrs::new(), Some(&sim))
        .unwrap()[0];
    let assign = g.assign("update", &w, next).unwrap();
    let g1 = Tensor::from_slice(&cpu, &[3], &[2f32, 2., 2.]).unwrap();
    // Fetching only the read runs no assignment.
    let out = g.run(&rt, &[], &[r]).unwrap();
    assert_eq!(f32s(&out[0]), [1., 2., 3.]);
    assert_eq!(f32s(&w.read()), [1., 2., 3.]);
    let before = w.read();
    let out = g.run(&rt, &[(grad, g1.clone())], &[assign, r]).unwrap();
    assert_eq!(f32s(&out[0]), [0., 1., 2.]);
    assert_eq!(
        f32s(&out[1]),
        [1., 2., 3.],
        "the read saw the value from before the run"
    );
    assert_eq!(f32s(&w.read()), [0., 1., 2.]);
    assert_eq!(
        f32s(&before),
        [1., 2., 3.],
        "a value read earlier does not change"
    );
    g.run(&rt, &[(grad, g1)], &[assign]).unwrap();
    assert_eq!(f32s(&w.read()), [-1., 0., 1.]);
    assert_eq!(w.read().device().qualified_name(), "SIM:0");

    // Assigning directly: a copy onto the variable's device; a wrong dtype or shape is
    // refused and the value stays.
    w.assign(&Tensor::from_slice(&cpu, &[3], &[7f32, 8., 9.]).unwrap())
        .unwrap();
    assert_eq!(f32s(&w.read()), [7., 8., 9.]);
    for bad in [
        Tensor::from_slice(&cpu, &[3], &[1i32, 2, 3]).unwrap(),
        Tensor::from_slice(&cpu, &[1, 3], &[1f32, 2., 3.]).unwrap(),
    ] {
        let e = w.assign(&bad).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(e.message.contains("variable 'w' holds f32 [3]"), "{e}");
    }
    assert_eq!(f32s(&w.read()), [7., 8., 9.]);
    // In a graph: a value of the wrong shape is refused when the node is added (shape known)
    // or when it runs (shape unknown).
    let x = g.placeholder("x", DType::F32, Some(&[2])).unwrap();
    let e = g.assign("bad", &w, x).unwrap_err();
    assert!(e.message.contains("'bad' (Assign)"), "{e}");
    let u = g.placeholder("u", DType::F32, None).unwrap();
    let au = g.assign("assign_u", &w, u).unwrap();
    let short = Tensor::from_slice(&cpu, &[2], &[1f32, 2.]).unwrap();
    let e = g.run(&rt, &[(u, short)], &[au]).unwrap_err();
    assert!(e.message.contains("'assign_u' (Assign)"), "{e}");
    assert_eq!(f32s(&w.read()), [7., 8., 9.]);
    // Two assignments of one variable in one run are refused; apart they run.
    let au2 = g.assign("", &w, u).unwrap();
    let e = g.run(&rt, &[], &[au, au2]).unwrap_err();
    assert!(
        e.message
            .contains("variable 'w' is assigned by nodes 'assign_u' and 'Assign_"),
        "{e}"
    );
    let ok = Tensor::from_slice(&cpu, &[3], &[0f32; 3]).unwrap();
    g.run(&rt, &[(u, ok)], &[au2]).unwrap();
    assert_eq!(f32s(&w.read()), [0.; 3]);
    // Bad variables.
    assert_eq!(
        rt.variable("", &w0, None).unwrap_err().code,
        Code::InvalidArgument
    );
    let other = Runtime::new(options()).unwrap();
    let e = rt
        .variable("x", &w0, Some(other.default_device()))
        .unwrap_err();
    assert!(e.message.contains("another runtime"), "{e}");
    let ov = other.variable("ov", &w0, None).unwrap();
    assert!(g
        .read("ov", &ov)
        .unwrap_err()
        .message
        .contains("another runtime"));
}

/// RELIABILITY.md: a kernel that fails mid-graph fails the run with the node, op and device
/// named; the assignment before it in the run does not happen; the runtime and the graph go
/// on; SIM's memory goes back to where it was.
#[test]
fn a_kernel_failing_mid_graph_fails_the_run_and_changes_nothing() {
    let rt = with_sim();
    rt.register_op_text(&OpText {
        name: "test.Flaky".into(),
        inputs: "x: f32".into(),
        outputs: "y: f32".into(),
        body: "y = Neg(x)".into(),
        ..Default::default()
    })
    .unwrap();
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let f2 = fail.clone();
    rt.register_kernel(KernelDef {
        op: "test.Flaky".into(),
        device_type: "CPU".into(),
        binding: Binding::Platform("HOST".into()),
        dtypes: vec![DType::F32],
        priority: 0,
        source: "this test".into(),
        func: Arc::new(move |cx: &devplug_core::KernelContext| {
            if f2.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(devplug_core::Error::internal("the flaky kernel failed"));
            }
            let v: Vec<f32> = cx.inputs[0].to_vec()?;
            let neg: Vec<u8> = v.iter().flat_map(|x| (-x).to_ne_bytes()).collect();
            cx.outputs[0].buffer().write(0, &neg)
        }),
    })
    .unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let cpu = rt.default_device().clone();
    let w = rt
        .variable(
            "w",
            &Tensor::from_slice(&cpu, &[4], &[1f32; 4]).unwrap(),
            Some(&sim),
        )
        .unwrap();
    let (add, flaky) = (rt.op("Add").unwrap(), rt.op("test.Flaky").unwrap());
    let mut g = Graph::new();
    let x = g.placeholder("x", DType::F32, Some(&[4])).unwrap();
    let r = g.read("r", &w).unwrap();
    let s = g
        .op(&rt, "s", &add, &[x, r], &Attrs::new(), Some(&sim))
        .unwrap()[0];
    let a = g.assign("a", &w, s).unwrap();
    let f = g
        .op(&rt, "f", &flaky, &[s], &Attrs::new(), Some(&cpu))
        .unwrap()[0];
    let xt = Tensor::from_slice(&cpu, &[4], &[1f32, 2., 3., 4.]).unwrap();
    rt.synchronize().unwrap();
    let in_use = sim.memory_stats().bytes_in_use;
    let e = g.run(&rt, &[(x, xt.clone())], &[a, f]).unwrap_err();
    assert_eq!(e.code, Code::Internal, "{e}");
    assert!(
        e.message.contains("graph node 'f' (test.Flaky on HOST:0)")
            && e.message.contains("the flaky kernel failed"),
        "{e}"
    );
    assert_eq!(f32s(&w.read()), [1.; 4], "a failed run assigns nothing");
    rt.synchronize().unwrap();
    assert_eq!(
        sim.memory_stats().bytes_in_use,
        in_use,
        "the run's tensors were freed"
    );
    // The same graph runs once the kernel works; the strict mode applies to graph runs too.
    fail.store(false, std::sync::atomic::Ordering::Relaxed);
    let out = g.run(&rt, &[(x, xt.clone())], &[a, f]).unwrap();
    assert_eq!(f32s(&out[1]), [-2., -3., -4., -5.]);
    assert_eq!(f32s(&w.read()), [2., 3., 4., 5.]);
    let sq = g
        .op(
            &rt,
            "sqrt",
            &rt.op("Sqrt").unwrap(),
            &[x],
            &Attrs::new(),
            Some(&sim),
        )
        .unwrap()[0];
    let strict = GraphRunOptions {
        soft_placement: Some(false),
    };
    let e = g
        .run_with(&rt, &[(x, xt.clone())], &[sq], &strict)
        .unwrap_err();
    assert_eq!(e.code, Code::NotFound, "{e}");
    assert!(
        e.message.contains("graph node 'sqrt' (Sqrt on SIM:0)"),
        "{e}"
    );
    let out = g.run(&rt, &[(x, xt)], &[sq]).unwrap();
    assert_eq!(f32s(&out[0])[3], 2.0);
}

/// One graph, run from four threads at once with their own feeds.
#[test]
fn runs_of_one_graph_proceed_on_several_threads() {
    let rt = Arc::new(with_sim());
    let sim = rt.find_device("SIM:0").unwrap();
    let mul = rt.op("Mul").unwrap();
    let mut g = Graph::new();
    let x = g.placeholder("x", DType::F32, Some(&[64])).unwrap();
    let mut y = x;
    for i in 0..8 {
        let dev = if i % 2 == 0 { Some(&sim) } else { None };
        let two = g
            .constant(
                &format!("two{i}"),
                &Tensor::from_slice(rt.default_device(), &[], &[2f32]).unwrap(),
            )
            .unwrap();
        y = g
            .op(&rt, &format!("m{i}"), &mul, &[y, two], &Attrs::new(), dev)
            .unwrap()[0];
    }
    let g = Arc::new(g);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (rt, g) = (rt.clone(), g.clone());
            std::thread::spawn(move || {
                for round in 0..20 {
                    let v = (t * 100 + round) as f32;
                    let xt = Tensor::from_slice(rt.default_device(), &[64], &[v; 64]).unwrap();
                    let out = g.run(&rt, &[(x, xt)], &[y]).unwrap();
                    assert_eq!(f32s(&out[0]), [v * 256.0; 64]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
