//! Kernels on plugin devices, as a Rust host sees them: the GPU override scenario with each
//! plugin's own kernels, and ops on SIM (native or through the fallback order) giving the
//! CPU's results.

use std::sync::Arc;

use devplug_core::{AttrValue, Attrs, Code, Device, Reason, RunOptions, Tensor};
use devplug_tests::{plugin_path, record_placements, runtime};

fn on(device: &Arc<Device>, strict: bool) -> RunOptions {
    RunOptions {
        device: Some(device.clone()),
        soft_placement: Some(!strict),
    }
}

fn f32s(d: &Arc<Device>, shape: &[i64], v: &[f32]) -> Tensor {
    Tensor::from_slice(d, shape, v).unwrap()
}

#[test]
fn the_override_scenario_runs_each_platforms_own_kernels() {
    for sim_first in [true, false] {
        let rt = runtime();
        let sim = || {
            rt.load_plugin(
                plugin_path("devplug_sim"),
                &[
                    ("device_type", "GPU"),
                    ("platform", "SIMCUDA"),
                    ("priority", "0"),
                ],
            )
        };
        let dml = || rt.load_plugin(plugin_path("devplug_simdml"), &[]);
        if sim_first {
            sim().unwrap();
            dml().unwrap();
        } else {
            dml().unwrap();
            sim().unwrap();
        }
        assert!(
            rt.plugin_failures().is_empty(),
            "no step reports a duplicate registration"
        );
        let gpu0 = rt.find_device("GPU:0").unwrap();
        let cuda0 = rt.find_device("SIMCUDA:0").unwrap();
        assert_eq!(gpu0.platform().info.name, "SIMDML");
        let log = record_placements(&rt);
        let (a, b) = (
            f32s(&gpu0, &[4], &[1., 2., 3., 4.]),
            f32s(&gpu0, &[4], &[10., 20., 30., 40.]),
        );
        let none = Attrs::new();

        // Add on GPU:0: SIMDML's own kernel.
        let sum = rt
            .run_named("Add", &[a.clone(), b.clone()], &none, &on(&gpu0, true))
            .unwrap();
        assert_eq!(sum[0].to_vec::<f32>().unwrap(), [11., 22., 33., 44.]);
        assert!(Arc::ptr_eq(sum[0].device(), &gpu0));
        {
            let l = log.lock().unwrap();
            let e = l.last().unwrap();
            assert_eq!(
                (e.op.as_str(), e.device.as_str(), e.reason),
                ("Add", "SIMDML:0", Reason::Explicit)
            );
            assert!(e.detail.contains("plugin 'simdml'"), "{e}");
        }

        // Mul: SIMDML has none, SIMCUDA has one. It must not run SIMCUDA's kernel on SIMDML
        // memory: no decomposition either, so it is soft-placed to the CPU, and the log says so.
        log.lock().unwrap().clear();
        let prod = rt
            .run_named("Mul", &[a.clone(), b.clone()], &none, &on(&gpu0, false))
            .unwrap();
        assert_eq!(prod[0].to_vec::<f32>().unwrap(), [10., 40., 90., 160.]);
        assert_eq!(prod[0].device().platform().info.name, "HOST");
        {
            let l = log.lock().unwrap();
            assert!(
                l.iter().any(|e| e.op == "Mul"
                    && e.reason == Reason::SoftPlaced
                    && e.detail.contains("SIMDML:0")),
                "{l:?}"
            );
            assert!(
                !l.iter().any(|e| e.detail.contains("plugin 'devplug_sim'")),
                "SIMCUDA's kernel ran: {l:?}"
            );
        }
        // …and strict mode refuses it, listing where Mul kernels exist.
        let e = rt
            .run_named("Mul", &[a.clone(), b.clone()], &none, &on(&gpu0, true))
            .unwrap_err();
        assert_eq!(e.code, Code::NotFound);
        assert!(
            e.message.contains("strict") && e.message.contains("GPU bound to SIMCUDA"),
            "{e}"
        );
        assert!(e.message.contains("CPU bound to HOST"), "{e}");

        // SIMCUDA:0 runs SIMCUDA's kernels.
        log.lock().unwrap().clear();
        let (c, d) = (a.copy_to(&cuda0).unwrap(), b.copy_to(&cuda0).unwrap());
        let prod = rt
            .run_named("Mul", &[c, d], &none, &on(&cuda0, true))
            .unwrap();
        assert_eq!(prod[0].to_vec::<f32>().unwrap(), [10., 40., 90., 160.]);
        let l = log.lock().unwrap();
        assert!(
            l.iter().any(|e| e.op == "Mul"
                && e.device == "SIMCUDA:0"
                && e.detail.contains("plugin 'devplug_sim'")),
            "{l:?}"
        );
    }
}

#[test]
fn a_native_kernel_runs_before_the_decomposition() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_simdml"), &[]).unwrap();
    let gpu = rt.find_device("GPU:0").unwrap();
    let log = record_placements(&rt);
    let x = f32s(&gpu, &[3], &[-1., 0., 2.]);
    let y = rt
        .run_named("Relu", &[x], &Attrs::new(), &on(&gpu, true))
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [0., 0., 2.]);
    let l = log.lock().unwrap();
    assert!(l.iter().all(|e| e.reason != Reason::Decomposed), "{l:?}");
    assert!(
        l.iter()
            .any(|e| e.op == "Relu" && e.detail.contains("plugin 'simdml'")),
        "{l:?}"
    );
}

/// Runs `op` on the CPU and on SIM (native kernels, then with `kernels=0` so that everything
/// goes through decomposition and soft placement) and compares.
fn same_on_sim_and_cpu(op: &str, inputs: &[Tensor], attrs: Attrs) {
    for kernels in ["1", "0"] {
        let rt = runtime();
        rt.load_plugin(plugin_path("devplug_sim"), &[("kernels", kernels)])
            .unwrap();
        let (cpu, sim) = (
            rt.find_device("CPU").unwrap(),
            rt.find_device("SIM").unwrap(),
        );
        let on_cpu: Vec<Tensor> = inputs.iter().map(|t| t.copy_to(&cpu).unwrap()).collect();
        let on_sim: Vec<Tensor> = inputs.iter().map(|t| t.copy_to(&sim).unwrap()).collect();
        let want = rt.run_named(op, &on_cpu, &attrs, &on(&cpu, true)).unwrap();
        let got = rt.run_named(op, &on_sim, &attrs, &on(&sim, false)).unwrap();
        assert_eq!(want.len(), got.len());
        for (w, g) in want.iter().zip(&got) {
            assert_eq!((w.dtype(), w.shape()), (g.dtype(), g.shape()), "{op}");
            let (w, g) = (w.to_bytes().unwrap(), g.to_bytes().unwrap());
            assert_eq!(w, g, "{op} (kernels={kernels}) differs from the CPU");
        }
    }
}

#[test]
fn ops_on_sim_equal_the_cpus() {
    let rt = runtime();
    let cpu = rt.find_device("CPU").unwrap();
    let a = f32s(&cpu, &[2, 3], &[1., -2., 3., -4., 5., 6.]);
    let b = f32s(&cpu, &[3], &[0.5, 2., -1.]);
    let m = f32s(&cpu, &[3, 2], &[1., 2., 3., 4., 5., 6.]);
    let i = Tensor::from_slice(&cpu, &[2, 2], &[1i64, -2, 3, 4]).unwrap();
    let none = Attrs::new;
    same_on_sim_and_cpu("Add", &[a.clone(), b.clone()], none()); // native on SIM
    same_on_sim_and_cpu("Mul", &[i.clone(), i.clone()], none()); // native on SIM
    same_on_sim_and_cpu("MatMul", &[a.clone(), m.clone()], none()); // native on SIM
    same_on_sim_and_cpu(
        "ReduceSum",
        std::slice::from_ref(&a),
        none().with("axes", AttrValue::Ints(vec![-1])),
    ); // native
    same_on_sim_and_cpu("Sub", &[a.clone(), b.clone()], none()); // soft-placed
    same_on_sim_and_cpu("Maximum", &[a.clone(), b.clone()], none()); // soft-placed
    same_on_sim_and_cpu("Relu", std::slice::from_ref(&a), none()); // decomposed into Maximum
    same_on_sim_and_cpu("Transpose", std::slice::from_ref(&a), none()); // soft-placed
    same_on_sim_and_cpu(
        "Concat",
        &[a.clone(), a.clone()],
        none().with("axis", AttrValue::Int(1)),
    );
    same_on_sim_and_cpu("Greater", &[a.clone(), b.clone()], none());
    same_on_sim_and_cpu(
        "Cast",
        &[i],
        none().with("dtype", AttrValue::DType(devplug_core::DType::F64)),
    );
}

#[test]
fn kernels_of_equal_priority_are_refused_and_the_higher_wins() {
    use devplug_core::{Binding, KernelDef};
    let rt = runtime();
    let k = |priority, source: &str, value: f32| KernelDef {
        op: "Neg".into(),
        device_type: "CPU".into(),
        binding: Binding::Platform("HOST".into()),
        dtypes: vec![devplug_core::DType::F32],
        priority,
        source: source.into(),
        func: Arc::new(move |cx: &devplug_core::KernelContext| {
            cx.outputs[0].buffer().write(0, &value.to_ne_bytes())
        }),
    };
    let e = rt.register_kernel(k(0, "host 'first'", 1.0)).unwrap_err();
    assert_eq!(e.code, Code::AlreadyExists);
    assert_eq!(
        e.message,
        "kernel for Neg on CPU bound to HOST with priority 0 from host 'first' (f32) conflicts \
         with the one from built-in (every dtype): same op, device type, binding, overlapping \
         dtypes and priority; give one a different priority"
    );
    rt.register_kernel(k(10, "host 'override'", 42.0)).unwrap();
    let cpu = rt.find_device("CPU").unwrap();
    let neg = |x: Tensor| {
        rt.run_named("Neg", &[x], &Attrs::new(), &RunOptions::default())
            .unwrap()
            .remove(0)
    };
    let y = neg(f32s(&cpu, &[1], &[5.]));
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        [42.0],
        "the higher-priority kernel ran"
    );
    let y = neg(Tensor::from_slice(&cpu, &[1], &[5i32]).unwrap());
    assert_eq!(
        y.to_vec::<i32>().unwrap(),
        [-5],
        "its dtype constraint leaves i32 to the built-in"
    );
    // A dtype the op does not take (Neg takes no bool, no u8) could never reach the kernel:
    // refused, naming the kernel, the dtype and what the op takes; nothing is registered.
    let mut bool_neg = k(20, "host 'bool'", 0.0);
    bool_neg.dtypes = vec![devplug_core::DType::F64, devplug_core::DType::Bool];
    let e = rt.register_kernel(bool_neg).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    for needle in [
        "kernel Neg on CPU from host 'bool'",
        "dtype bool",
        "takes f32",
    ] {
        assert!(e.message.contains(needle), "{needle}: {e}");
    }
    let y = neg(f32s(&cpu, &[1], &[5.]));
    assert_eq!(y.to_vec::<f32>().unwrap(), [42.0], "still the override");
}

/// The CPU's native kernels for composite ops (Softmax, LogSoftmax, Gemm with bias and fused
/// ReLU) agree with their decompositions, which SIM without kernels runs (its parts
/// soft-placed on the CPU); and the CPU runs them as one kernel, not decomposed.
#[test]
fn native_composite_kernels_agree_with_their_decompositions() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[("kernels", "0")])
        .unwrap();
    let (cpu, sim) = (
        rt.find_device("CPU").unwrap(),
        rt.find_device("SIM").unwrap(),
    );
    let log = record_placements(&rt);
    let vals: Vec<f32> = (0..24).map(|i| ((i * 7) % 11) as f32 * 0.5 - 2.5).collect();
    let x = f32s(&cpu, &[4, 6], &vals);
    let w = f32s(&cpu, &[6, 3], &vals[..18]);
    let c = f32s(&cpu, &[3], &[0.25, -1.0, 2.0]);
    let gemm = Attrs::new()
        .with("alpha", AttrValue::Float(0.5))
        .with("beta", AttrValue::Float(2.0))
        .with("relu", AttrValue::Bool(true));
    let cases: [(&str, Vec<Tensor>, Attrs); 4] = [
        ("Softmax", vec![x.clone()], Attrs::new()),
        (
            "LogSoftmax",
            vec![x.clone()],
            Attrs::new().with("axis", AttrValue::Int(0)),
        ),
        ("Gemm", vec![x.clone(), w.clone(), c.clone()], gemm),
        ("Gemm", vec![x.clone(), w.clone(), c.clone()], Attrs::new()),
    ];
    for (op, inputs, attrs) in cases {
        log.lock().unwrap().clear();
        let want = rt.run_named(op, &inputs, &attrs, &on(&cpu, true)).unwrap();
        {
            let l = log.lock().unwrap();
            assert_eq!(l.len(), 1, "{op} on the CPU: {l:?}");
            assert_eq!(l[0].reason, Reason::Explicit, "{op}: {l:?}");
        }
        let on_sim: Vec<Tensor> = inputs.iter().map(|t| t.copy_to(&sim).unwrap()).collect();
        let got = rt.run_named(op, &on_sim, &attrs, &on(&sim, false)).unwrap();
        assert!(
            log.lock()
                .unwrap()
                .iter()
                .any(|e| e.op == op && e.reason == Reason::Decomposed),
            "{op} was not decomposed on SIM"
        );
        let (w, g) = (
            want[0].to_vec::<f32>().unwrap(),
            got[0].to_vec::<f32>().unwrap(),
        );
        assert_eq!(want[0].shape(), got[0].shape(), "{op}");
        for (i, (a, b)) in w.iter().zip(&g).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + a.abs()),
                "{op} element {i}: the CPU kernel gives {a}, the decomposition {b}"
            );
        }
    }
    // Gemm's shape rule names the operand.
    let bad = f32s(&cpu, &[2], &[1., 2.]);
    let e = rt
        .run_named("Gemm", &[x, w, bad], &Attrs::new(), &on(&cpu, true))
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message.contains("Gemm") && e.message.contains("'c'"),
        "{e}"
    );
}

/// Plans are cached by the positions of op and device in their runtime, so another runtime's
/// handles would find whatever sits at the same positions here (a SIM kernel for a CPU device,
/// or another custom op): dispatch refuses them, naming op and device, and nothing is cached.
#[test]
fn another_runtimes_device_or_op_is_refused() {
    let a = runtime();
    a.load_plugin(plugin_path("devplug_sim"), &[]).expect("SIM");
    let b = devplug_core::Runtime::new(devplug_core::RuntimeOptions {
        discover_from_env: false,
        cpu_device_count: 2,
        ..Default::default()
    })
    .expect("second runtime");
    let sim = a.find_device("SIM").expect("SIM");
    let b_cpu1 = b.find_device("CPU:1").expect("CPU:1 of b");
    assert_eq!(sim.index(), b_cpu1.index(), "the positions coincide");
    let add = a.op("Add").expect("Add");
    let none = Attrs::new();
    let x = f32s(&sim, &[4], &[1.0, 2.0, 3.0, 4.0]);
    // A's plan for SIM's position is cached first.
    let r = a
        .run(&add, &[x.clone(), x.clone()], &none, &on(&sim, true))
        .expect("on SIM");
    assert_eq!(r[0].to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0, 8.0]);

    let y = f32s(&b_cpu1, &[4], &[1.0, 2.0, 3.0, 4.0]);
    for strict in [true, false] {
        let e = a
            .run(&add, &[y.clone(), y.clone()], &none, &on(&b_cpu1, strict))
            .unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument, "{e}");
        assert!(
            e.message.contains("Add")
                && e.message.contains("HOST:1")
                && e.message.contains("another runtime"),
            "{e}"
        );
    }
    // A device scope of b's device is refused when entered on a as before.
    assert_eq!(
        a.device_scope(&b_cpu1).unwrap_err().code,
        Code::InvalidArgument
    );

    // B's handle of a custom op sits where a has another one.
    let mk = |name: &str| {
        let mut def = a.op("Neg").unwrap().def().clone();
        def.name = name.into();
        def
    };
    a.register_op(mk("test.first")).expect("a's op");
    let b_second = b.register_op(mk("test.second")).expect("b's op");
    let e = a
        .run(
            &b_second,
            std::slice::from_ref(&y),
            &none,
            &RunOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(
        e.message.contains("test.second") && e.message.contains("another runtime"),
        "{e}"
    );
    // Even the basis op of another runtime: resolve handles with the runtime that runs them.
    let b_add = b.op("Add").unwrap();
    assert_eq!(
        a.run(
            &b_add,
            &[y.clone(), y.clone()],
            &none,
            &RunOptions::default()
        )
        .unwrap_err()
        .code,
        Code::InvalidArgument
    );

    // Another runtime's tensors are inputs like any on another device: copied.
    let r = a
        .run(&add, &[y.clone(), y.clone()], &none, &on(&sim, true))
        .expect("b's tensors on a's SIM");
    assert_eq!(r[0].to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0, 8.0]);
    assert!(Arc::ptr_eq(r[0].device(), &sim));

    // Both runtimes still work with their own handles.
    let r = a
        .run(&add, &[x.clone(), x], &none, &on(&sim, true))
        .expect("a on SIM");
    assert_eq!(r[0].to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0, 8.0]);
    let r = b
        .run(
            &b.op("Add").unwrap(),
            &[y.clone(), y],
            &none,
            &on(&b_cpu1, true),
        )
        .expect("b on CPU:1");
    assert_eq!(r[0].to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0, 8.0]);
}

/// A kernel may decline the inputs it is given (return `UNIMPLEMENTED`): a dtype pair or an
/// attribute value it does not handle. Dispatch then takes the fallback order's next steps as
/// if that kernel were not there — the device's next kernel for the op, else the decomposition
/// on the device, else soft placement
/// to the CPU, else (strict) the kernel's error — and the placement log says the kernel
/// declined. Here host kernels on SIM take one-element tensors only; a lower-priority kernel on
/// the same device comes first when there is one.
#[test]
fn a_kernel_that_declines_is_followed_by_the_rest_of_the_fallback_order() {
    use devplug_core::{Binding, DType, Error, KernelDef};
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let picky = |op: &str| KernelDef {
        op: op.into(),
        device_type: "SIM".into(),
        binding: Binding::Platform("SIM".into()),
        dtypes: vec![DType::F32],
        priority: 10,
        source: "host 'picky'".into(),
        func: Arc::new(|cx: &devplug_core::KernelContext| {
            if cx.inputs[0].num_elements() != 1 {
                return Err(Error::unimplemented("one element only"));
            }
            cx.outputs[0].buffer().write(0, &7f32.to_ne_bytes())
        }),
    };
    rt.register_kernel(picky("Relu")).unwrap(); // Relu has a decomposition
    rt.register_kernel(picky("Sqrt")).unwrap(); // Sqrt has none, nor a SIM kernel
    let log = record_placements(&rt);
    let one = f32s(&sim, &[1], &[4.]);
    let three = f32s(&sim, &[3], &[-1., 4., 9.]);
    let run = |op: &str, x: &Tensor, strict: bool| {
        rt.run_named(
            op,
            std::slice::from_ref(x),
            &Attrs::new(),
            &on(&sim, strict),
        )
    };

    // Taken: the kernel's own answer.
    for op in ["Relu", "Sqrt"] {
        let y = run(op, &one, true).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), [7.], "{op}");
    }
    // Declined, Relu: its decomposition on SIM (whose Maximum the CPU runs).
    log.lock().unwrap().clear();
    let y = run("Relu", &three, false).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [0., 4., 9.]);
    let l = log.lock().unwrap().clone();
    let d = l
        .iter()
        .find(|e| e.op == "Relu" && e.reason == Reason::Decomposed)
        .unwrap_or_else(|| panic!("{l:?}"));
    assert!(
        d.detail
            == "the kernel from host 'picky' on SIM:0 declined (one element only); its \
                decomposition runs there",
        "{d:?}"
    );
    // Declined, Sqrt: soft placement to the CPU, or in strict mode the kernel's error.
    log.lock().unwrap().clear();
    let y = run("Sqrt", &three, false).unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap()[1..], [2., 3.]);
    assert_eq!(y[0].device().platform().info.name, "HOST");
    let l = log.lock().unwrap().clone();
    assert!(
        l.iter().any(|e| e.reason == Reason::SoftPlaced
            && e.detail
                == "the kernel from host 'picky' on SIM:0 declined (one element only) and there \
                    is no decomposition; kernel from built-in on the CPU"),
        "{l:?}"
    );
    let e = run("Sqrt", &three, true).unwrap_err();
    assert_eq!(e.code, Code::Unimplemented, "{e}");
    for needle in [
        "Sqrt on SIM:0 (kernel from host 'picky'): one element only",
        "strict mode",
    ] {
        assert!(e.message.contains(needle), "{needle}: {e}");
    }

    // Layered kernels: below the picky one, a generic kernel on SIM takes what it declines.
    rt.register_kernel(KernelDef {
        priority: 5,
        source: "host 'generic'".into(),
        func: Arc::new(|cx: &devplug_core::KernelContext| {
            let n = cx.outputs[0].num_elements() as usize;
            let nines: Vec<u8> = (0..n).flat_map(|_| 9f32.to_ne_bytes()).collect();
            cx.outputs[0].buffer().write(0, &nines)
        }),
        ..picky("Sqrt")
    })
    .unwrap();
    log.lock().unwrap().clear();
    let y = run("Sqrt", &three, true).unwrap();
    assert!(Arc::ptr_eq(y[0].device(), &sim));
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [9., 9., 9.]);
    let l = log.lock().unwrap().clone();
    assert!(
        l.iter().any(|e| e.reason == Reason::Explicit
            && e.detail
                == "kernel from host 'generic' after the kernel from host 'picky' on SIM:0 \
                    declined (one element only)"),
        "{l:?}"
    );
    let y = run("Sqrt", &one, true).unwrap();
    assert_eq!(
        y[0].to_vec::<f32>().unwrap(),
        [7.],
        "the picky kernel first"
    );
    // An input from elsewhere is copied to SIM once, however many of its kernels decline it
    // (and the decomposition after a decline takes the same copy).
    let cpu = rt.find_device("CPU:0").unwrap();
    let from_cpu = f32s(&cpu, &[3], &[-1., 4., 9.]);
    for (op, want) in [("Sqrt", [9f32, 9., 9.]), ("Relu", [0., 4., 9.])] {
        log.lock().unwrap().clear();
        let y = run(op, &from_cpu, false).unwrap();
        assert_eq!(y[0].to_vec::<f32>().unwrap(), want, "{op}");
        let l = log.lock().unwrap().clone();
        let copied: Vec<_> = l
            .iter()
            .filter(|e| e.op == op && e.reason == Reason::InputCopied)
            .collect();
        assert_eq!(copied.len(), 1, "{op}: {l:?}");
        assert_eq!(copied[0].detail, "input copied from HOST:0", "{op}");
    }

    // Soft placement to the CPU layers its kernels too: a picky CPU kernel above the built-in
    // Exp (SIM has neither an Exp kernel nor a decomposition for it).
    rt.register_kernel(KernelDef {
        device_type: "CPU".into(),
        binding: Binding::Platform("HOST".into()),
        source: "host 'picky-cpu'".into(),
        ..picky("Exp")
    })
    .unwrap();
    log.lock().unwrap().clear();
    let y = run("Exp", &three, false).unwrap();
    assert_eq!(y[0].device().platform().info.name, "HOST");
    let got = y[0].to_vec::<f32>().unwrap();
    for (g, x) in got.iter().zip([-1f32, 4., 9.]) {
        assert!((g - x.exp()).abs() <= 1e-6 * x.exp(), "{got:?}");
    }
    let l = log.lock().unwrap().clone();
    assert!(
        l.iter().any(|e| e.reason == Reason::SoftPlaced
            && e.detail
                == "no f32 kernel or decomposition on SIM:0; the kernel from host 'picky-cpu' on \
                    HOST:0 declined (one element only); kernel from built-in on the CPU"),
        "{l:?}"
    );
    let y = run("Exp", &one, false).unwrap();
    assert_eq!(
        y[0].to_vec::<f32>().unwrap(),
        [7.],
        "the picky CPU kernel first"
    );
    // Without any decline, the log names the dtype SIM has no kernel for.
    log.lock().unwrap().clear();
    run("Neg", &three, false).unwrap();
    let l = log.lock().unwrap().clone();
    assert!(
        l.iter().any(|e| e.reason == Reason::SoftPlaced
            && e.detail
                == "no f32 kernel or decomposition on SIM:0; kernel from built-in on the CPU"),
        "{l:?}"
    );
}

/// `Runtime::kernel_choice` says, before running, what a run of the op on the device does:
/// for ops SIM has kernels for, ops it decomposes and ops it leaves to the CPU, the answer
/// agrees with the placement log of a real run; bad questions are refused.
#[test]
fn kernel_choice_says_how_an_op_would_run() {
    use devplug_core::op::{smallvec, ArgDef, ArgType, TypeVar};
    use devplug_core::{DType, KernelChoice, OpDef};
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let cpu = rt.find_device("CPU:0").unwrap();
    let choice =
        |op: &str, dev: &Arc<Device>, dtype| rt.kernel_choice(&rt.op(op).unwrap(), dev, dtype);
    let sim_kernel = KernelChoice::Native {
        source: "plugin 'devplug_sim'".into(),
        priority: 0,
    };
    assert_eq!(choice("Add", &sim, Some(DType::F32)).unwrap(), sim_kernel);
    assert_eq!(
        choice("Relu", &sim, Some(DType::F32)).unwrap(),
        KernelChoice::Decomposition
    );
    assert_eq!(
        choice("Maximum", &sim, Some(DType::F32)).unwrap(),
        KernelChoice::SoftPlacement {
            source: "built-in".into()
        }
    );
    // The CPU has no Gelu kernel: it decomposes there too. Fill has no type variable.
    assert_eq!(
        choice("Gelu", &cpu, Some(DType::F32)).unwrap(),
        KernelChoice::Decomposition
    );
    assert!(matches!(
        choice("Fill", &cpu, None).unwrap(),
        KernelChoice::Native { source, .. } if source == "built-in"
    ));

    // Each answer is what a run does (the op's own placement entry says so).
    let x = f32s(&sim, &[2, 2], &[1., -2., 3., -4.]);
    let none = Attrs::new();
    for op in [
        "Add", "Mul", "Sub", "Maximum", "MatMul", "Relu", "Exp", "Softmax",
    ] {
        let log = record_placements(&rt);
        let inputs: Vec<Tensor> = match op {
            "Relu" | "Exp" | "Softmax" => vec![x.clone()],
            _ => vec![x.clone(), x.clone()],
        };
        rt.run_named(op, &inputs, &none, &on(&sim, false)).unwrap();
        let entry = log
            .lock()
            .unwrap()
            .iter()
            .find(|e| e.op == op && e.reason != Reason::InputCopied)
            .cloned()
            .unwrap_or_else(|| panic!("{op}: no placement entry"));
        let want = match entry.reason {
            Reason::Decomposed => KernelChoice::Decomposition,
            Reason::SoftPlaced => KernelChoice::SoftPlacement {
                source: "built-in".into(),
            },
            _ => sim_kernel.clone(),
        };
        assert_eq!(
            choice(op, &sim, Some(DType::F32)).unwrap(),
            want,
            "{op}: the run logged {entry}"
        );
    }

    // An op of the host's with no kernel and no decomposition: nowhere, as a run says.
    let bare = rt
        .register_op(OpDef {
            name: "test.Bare".into(),
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
            shape_fn: Arc::new(|cx| Ok(smallvec![cx.inputs[0].to_spec()?])),
            decomposition: None,
        })
        .unwrap();
    assert_eq!(
        rt.kernel_choice(&bare, &sim, Some(DType::F32)).unwrap(),
        KernelChoice::Unavailable
    );
    let e = rt
        .run(&bare, std::slice::from_ref(&x), &none, &on(&sim, false))
        .unwrap_err();
    assert_eq!(e.code, Code::NotFound, "{e}");

    // Bad questions: a dtype the op does not take, none for an op with a type variable, a
    // device of another runtime.
    let e = choice("Add", &sim, Some(DType::Bool)).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains("Add: its type variable T takes"), "{e}");
    assert!(e.message.ends_with("not bool"), "{e}");
    let e = choice("Add", &sim, None).unwrap_err();
    assert!(
        e.message.contains("name the dtype of its type variable T"),
        "{e}"
    );
    let other = runtime();
    let e = rt
        .kernel_choice(
            &rt.op("Add").unwrap(),
            &other.find_device("CPU:0").unwrap(),
            Some(DType::F32),
        )
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains("another runtime's"), "{e}");
}

/// The CPU device's memory comes zeroed from its allocator: a host's Rust kernel that returns
/// `Ok` without writing its output (a bug of that kernel) hands back zeros, never
/// uninitialized memory, which safe code (`to_vec`) must not read.
#[test]
fn a_kernel_that_writes_nothing_gives_zeros_not_uninitialized_memory() {
    use devplug_core::{Binding, DType, KernelDef};
    // The executor itself: a block freed with other bytes in it comes back zeroed.
    let rt = runtime();
    let cpu = rt.find_device("CPU:0").unwrap();
    let raw = cpu.executor();
    for size in [64u64, 4096, 1 << 20] {
        let p = raw.allocate(size).unwrap();
        raw.memset(p, 0xAB, size).unwrap();
        raw.deallocate(p, size);
        let q = raw.allocate(size).unwrap();
        let mut back = vec![0x11u8; size as usize];
        // SAFETY: `back` holds `size` bytes; `q` is an allocation of `size` bytes.
        unsafe { raw.memcpy_dtoh(back.as_mut_ptr(), q, size) }.unwrap();
        raw.deallocate(q, size);
        assert!(
            back.iter().all(|b| *b == 0),
            "allocate({size}) was not zeroed"
        );
    }

    // Through an op: a lazy Sqrt above the built-in one.
    rt.register_kernel(KernelDef {
        op: "Sqrt".into(),
        device_type: "CPU".into(),
        binding: Binding::Platform("HOST".into()),
        dtypes: vec![DType::F32],
        priority: 5,
        source: "host 'lazy'".into(),
        func: Arc::new(|_: &devplug_core::KernelContext| Ok(())),
    })
    .unwrap();
    let x = f32s(&cpu, &[37], &[4.0; 37]);
    let y = rt
        .run_named("Sqrt", &[x], &Attrs::new(), &RunOptions::on(&cpu))
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), vec![0.0; 37]);
}

/// A kernel bound to a platform it could never run on is refused when registered: a name no
/// platform may have, or a platform of another device type. One bound to a platform not loaded
/// yet is taken, and runs once the plugin brings it.
#[test]
fn a_kernel_bound_where_it_could_never_run_is_refused() {
    use devplug_core::{Binding, DType, KernelDef};
    let rt = runtime();
    let k = |device_type: &str, platform: &str| KernelDef {
        op: "Neg".into(),
        device_type: device_type.into(),
        binding: Binding::Platform(platform.into()),
        dtypes: vec![DType::F32],
        priority: 3,
        source: "host 'bound'".into(),
        func: Arc::new(|cx: &devplug_core::KernelContext| {
            cx.outputs[0].write_slice(&vec![7f32; cx.outputs[0].num_elements() as usize])
        }),
    };
    let e = rt.register_kernel(k("CPU", "host")).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert_eq!(
        e.message,
        "kernel Neg on CPU from host 'bound': invalid platform 'host': must match \
         [A-Z][A-Z0-9_]* and be at most 64 characters"
    );
    let e = rt.register_kernel(k("SIM", "HOST")).unwrap_err();
    assert_eq!(
        e.message,
        "kernel Neg on SIM from host 'bound': platform HOST has device type CPU, so a kernel for \
         SIM bound to it would never run"
    );
    // SIM is not loaded yet: taken, and it runs on SIM:0 once SIM is there.
    rt.register_kernel(k("SIM", "SIM")).unwrap();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let y = rt
        .run_named(
            "Neg",
            &[f32s(&sim, &[2], &[1., 2.])],
            &Attrs::new(),
            &on(&sim, true),
        )
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [7., 7.]);
}

/// A Rust kernel borrows its input and output elements in place (`input_slice`,
/// `output_slice`) on the CPU; the wrong element type, an index past the end and a device
/// whose memory the host cannot read are errors.
#[test]
fn a_rust_kernel_reads_and_writes_cpu_tensors_in_place() {
    use devplug_core::{Binding, DType, Error, KernelContext, KernelDef};
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let relu = |cx: &KernelContext| -> devplug_core::Result<()> {
        // SAFETY: nothing else touches the input or the output during the call.
        let (x, y) = unsafe { (cx.input_slice::<f32>(0)?, cx.output_slice::<f32>(0)?) };
        for (o, v) in y.iter_mut().zip(x) {
            *o = v.max(0.0);
        }
        Ok(())
    };
    let kernel = |device_type: &str, platform: &str| KernelDef {
        op: "Relu".into(),
        device_type: device_type.into(),
        binding: Binding::Platform(platform.into()),
        dtypes: vec![DType::F32],
        priority: 5,
        source: "host 'in-place'".into(),
        func: Arc::new(relu),
    };
    rt.register_kernel(kernel("CPU", "HOST")).unwrap();
    rt.register_kernel(kernel("SIM", "SIM")).unwrap();
    let cpu = rt.find_device("CPU:0").unwrap();
    let log = record_placements(&rt);
    let x = f32s(&cpu, &[5], &[-2., -0.5, 0., 1.5, 3.]);
    let y = rt
        .run_named(
            "Relu",
            std::slice::from_ref(&x),
            &Attrs::new(),
            &on(&cpu, true),
        )
        .unwrap();
    assert_eq!(y[0].to_vec::<f32>().unwrap(), [0., 0., 0., 1.5, 3.]);
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|e| e.op == "Relu" && e.detail == "kernel from host 'in-place'"),
        "{:?}",
        log.lock().unwrap()
    );
    // Empty tensors give empty slices.
    let empty = f32s(&cpu, &[0], &[]);
    let y = rt
        .run_named("Relu", &[empty], &Attrs::new(), &on(&cpu, true))
        .unwrap();
    assert_eq!(y[0].num_elements(), 0);

    // SIM's memory is not the host's: the kernel's error fails the op.
    let sim = rt.find_device("SIM:0").unwrap();
    let e = rt
        .run_named(
            "Relu",
            &[x.copy_to(&sim).unwrap()],
            &Attrs::new(),
            &on(&sim, true),
        )
        .unwrap_err();
    assert!(
        e.message
            .contains("input 0 is on SIM:0, whose memory the host cannot read"),
        "{e}"
    );

    // The wrong element type, an index past the end.
    rt.register_kernel(KernelDef {
        op: "Neg".into(),
        device_type: "CPU".into(),
        binding: Binding::Platform("HOST".into()),
        dtypes: vec![DType::F32],
        priority: 5,
        source: "host 'mistaken'".into(),
        func: Arc::new(|cx: &KernelContext| {
            // SAFETY: as above.
            let wrong = unsafe { cx.input_slice::<i32>(0) }.unwrap_err();
            let past = unsafe { cx.output_slice::<f32>(1) }.unwrap_err();
            Err(Error::invalid_argument(format!(
                "{}; {}",
                wrong.message, past.message
            )))
        }),
    })
    .unwrap();
    let e = rt
        .run_named("Neg", &[x], &Attrs::new(), &on(&cpu, true))
        .unwrap_err();
    assert!(
        e.message
            .ends_with("input 0 holds f32 elements, not i32; there is no output 1 (1 outputs)"),
        "{e}"
    );
}
