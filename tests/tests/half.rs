//! f16 and bf16 tensors as a Rust host sees them: the basis set on the CPU device (computed in
//! f32, each result rounded once, checked against f64 arithmetic), and on SIM, which has no
//! kernel for either dtype: its data round-trips bit for bit, and ops follow the fallback order
//! (soft placement to the CPU, or an error naming where kernels exist in strict mode).

use std::sync::Arc;

use devplug_core::half::{bf16, f16};
use devplug_core::{
    AttrValue, Attrs, Code, DType, Device, Element, Reason, RunOptions, Runtime, Tensor,
};
use devplug_tests::{plugin_path, record_placements, runtime};

fn on(device: &Arc<Device>, soft: bool) -> RunOptions {
    RunOptions {
        device: Some(device.clone()),
        soft_placement: Some(soft),
    }
}

/// A half type and its conversions, so that each test runs for both.
trait Half: Element + Default + PartialEq + std::fmt::Debug {
    const DTYPE: DType;
    fn of(x: f64) -> Self;
    fn value(self) -> f64;
}

impl Half for f16 {
    const DTYPE: DType = DType::F16;
    fn of(x: f64) -> Self {
        f16::from_f64(x)
    }
    fn value(self) -> f64 {
        self.to_f64()
    }
}

impl Half for bf16 {
    const DTYPE: DType = DType::BF16;
    fn of(x: f64) -> Self {
        bf16::from_f64(x)
    }
    fn value(self) -> f64 {
        self.to_f64()
    }
}

fn tensor<H: Half>(d: &Arc<Device>, shape: &[i64], v: &[f64]) -> Tensor {
    let h: Vec<H> = v.iter().map(|&x| H::of(x)).collect();
    Tensor::from_slice(d, shape, &h).unwrap()
}

fn values<H: Half>(t: &Tensor) -> Vec<f64> {
    assert_eq!(t.dtype(), <H as Half>::DTYPE);
    t.to_vec::<H>().unwrap().into_iter().map(H::value).collect()
}

/// Within `ulps` units in the last place of the half format (10 or 7 fraction bits).
fn assert_near<H: Half>(got: &[f64], want: &[f64], ulps: f64, what: &str) {
    let bits = if <H as Half>::DTYPE == DType::F16 {
        10
    } else {
        7
    };
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ulp = 2f64.powi(w.abs().max(f64::MIN_POSITIVE).log2().floor() as i32 - bits);
        assert!(
            (g - w).abs() <= ulps * ulp,
            "{what} ({:?}): element {i} is {g}, want {w}",
            <H as Half>::DTYPE
        );
    }
}

fn basis_ops_on_the_cpu<H: Half>() {
    let rt = runtime();
    let cpu = rt.cpu_device().unwrap();
    let a_v = [0.5, -1.25, 3.0, 7.5, -0.1, 2.2];
    let b_v = [1.5, 0.3, -2.0];
    let (a, b) = (
        tensor::<H>(&cpu, &[2, 3], &a_v),
        tensor::<H>(&cpu, &[3], &b_v),
    );
    // What the kernels see: the inputs rounded to the dtype.
    let (a_r, b_r) = (values::<H>(&a), values::<H>(&b));
    let run = |op: &str, inputs: &[Tensor], attrs: Attrs| {
        let mut out = rt.run_named(op, inputs, &attrs, &on(&cpu, false)).unwrap();
        out.remove(0)
    };
    let round = |x: f64| H::of(x).value();

    // Elementwise with broadcasting: correctly rounded, so equal to the rounded f64 result.
    for (op, f) in [
        ("Add", (|x, y| x + y) as fn(f64, f64) -> f64),
        ("Sub", |x, y| x - y),
        ("Mul", |x, y| x * y),
        ("Div", |x, y| x / y),
        ("Maximum", f64::max),
    ] {
        let got = values::<H>(&run(op, &[a.clone(), b.clone()], Attrs::new()));
        let want: Vec<f64> = (0..6).map(|i| round(f(a_r[i], b_r[i % 3]))).collect();
        assert_eq!(got, want, "{op}");
    }
    let got = values::<H>(&run("Exp", std::slice::from_ref(&a), Attrs::new()));
    let want: Vec<f64> = a_r.iter().map(|x| x.exp()).collect();
    assert_near::<H>(&got, &want, 1.0, "Exp");
    let less = run("Less", &[a.clone(), b.clone()], Attrs::new());
    assert_eq!(less.dtype(), DType::Bool);
    let want: Vec<bool> = (0..6).map(|i| a_r[i] < b_r[i % 3]).collect();
    assert_eq!(less.to_vec::<bool>().unwrap(), want, "Less");

    // A product and a sum accumulate in f32: a long row of ones sums exactly before rounding.
    let ones = tensor::<H>(&cpu, &[1, 600], &[1.0; 600]);
    let col = tensor::<H>(&cpu, &[600, 1], &[1.0; 600]);
    assert_eq!(
        values::<H>(&run("MatMul", &[ones.clone(), col], Attrs::new())),
        [round(600.0)]
    );
    let sum = run(
        "ReduceSum",
        &[ones],
        Attrs::new().with("axes", AttrValue::Ints(vec![1])),
    );
    assert_eq!(values::<H>(&sum), [round(600.0)]);
    let m = tensor::<H>(&cpu, &[3, 2], &[1.0, 2.0, -0.5, 0.25, 4.0, -3.0]);
    let m_r = values::<H>(&m);
    let got = values::<H>(&run("MatMul", &[a.clone(), m], Attrs::new()));
    let want: Vec<f64> = (0..4)
        .map(|ij| {
            (0..3)
                .map(|k| a_r[ij / 2 * 3 + k] * m_r[k * 2 + ij % 2])
                .sum()
        })
        .collect();
    assert_near::<H>(&got, &want, 1.0, "MatMul");

    // A composite (Softmax: native on the CPU) and layout ops.
    let got = values::<H>(&run(
        "Softmax",
        std::slice::from_ref(&a),
        Attrs::new().with("axis", AttrValue::Int(-1)),
    ));
    for r in 0..2 {
        let row = &a_r[r * 3..r * 3 + 3];
        let z: f64 = row.iter().map(|x| x.exp()).sum();
        let want: Vec<f64> = row.iter().map(|x| x.exp() / z).collect();
        assert_near::<H>(&got[r * 3..r * 3 + 3], &want, 1.0, "Softmax");
    }
    let t = run(
        "Transpose",
        std::slice::from_ref(&a),
        Attrs::new().with("perm", AttrValue::Ints(vec![1, 0])),
    );
    assert_eq!(
        values::<H>(&t),
        [a_r[0], a_r[3], a_r[1], a_r[4], a_r[2], a_r[5]]
    );
    let iota = run(
        "Iota",
        &[],
        Attrs::new()
            .with("shape", AttrValue::Ints(vec![4]))
            .with("axis", AttrValue::Int(0))
            .with("dtype", AttrValue::DType(<H as Half>::DTYPE)),
    );
    assert_eq!(values::<H>(&iota), [0.0, 1.0, 2.0, 3.0]);

    // Casts: into f32 exactly, and from f64 rounded once.
    let wide = run(
        "Cast",
        std::slice::from_ref(&a),
        Attrs::new().with("dtype", AttrValue::DType(DType::F32)),
    );
    let want: Vec<f32> = a_r.iter().map(|&x| x as f32).collect();
    assert_eq!(wide.to_vec::<f32>().unwrap(), want);
    let precise = Tensor::from_slice(&cpu, &[2], &[0.1f64, 1e6]).unwrap();
    let narrow = run(
        "Cast",
        &[precise],
        Attrs::new().with("dtype", AttrValue::DType(<H as Half>::DTYPE)),
    );
    assert_eq!(values::<H>(&narrow), [round(0.1), round(1e6)]);

    // Mixing dtypes is an error naming the op and the operand.
    let f = Tensor::from_slice(&cpu, &[3], &[1.0f32; 3]).unwrap();
    let e = rt
        .run_named("Add", &[a, f], &Attrs::new(), &on(&cpu, false))
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument, "{e}");
    assert!(e.message.contains("Add"), "{e}");
}

#[test]
fn the_basis_set_runs_on_the_cpu_in_f16() {
    basis_ops_on_the_cpu::<f16>();
}

#[test]
fn the_basis_set_runs_on_the_cpu_in_bf16() {
    basis_ops_on_the_cpu::<bf16>();
}

fn on_sim<H: Half>() {
    let rt: Runtime = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let (cpu, sim) = (rt.cpu_device().unwrap(), rt.find_device("SIM:0").unwrap());
    let log = record_placements(&rt);
    // Every bit pattern survives SIM's memory.
    let bits: Vec<u16> = (0..=u16::MAX).step_by(7).collect();
    let h: Vec<u8> = bits.iter().flat_map(|b| b.to_ne_bytes()).collect();
    let t = Tensor::from_bytes(&cpu, <H as Half>::DTYPE, &[bits.len() as i64], &h).unwrap();
    assert_eq!(t.copy_to(&sim).unwrap().to_bytes().unwrap(), h);

    // SIM's Add takes f32, f64, i32 and i64: a half Add on SIM is soft-placed to the CPU.
    let a = tensor::<H>(&sim, &[4], &[1.0, 2.5, -3.0, 0.125]);
    let out = rt
        .run_named(
            "Add",
            &[a.clone(), a.clone()],
            &Attrs::new(),
            &on(&sim, true),
        )
        .unwrap();
    assert_eq!(values::<H>(&out[0]), [2.0, 5.0, -6.0, 0.25]);
    let events = log.lock().unwrap().clone();
    assert!(
        events.iter().any(|e| e.op == "Add"
            && e.reason == Reason::SoftPlaced
            && e.device == cpu.qualified_name()
            && e.detail.contains("SIM:0")),
        "{events:?}"
    );
    // Relu decomposes (into Maximum, which SIM lacks too) and still runs.
    let out = rt
        .run_named(
            "Relu",
            std::slice::from_ref(&a),
            &Attrs::new(),
            &on(&sim, true),
        )
        .unwrap();
    assert_eq!(values::<H>(&out[0]), [1.0, 2.5, 0.0, 0.125]);

    // Strict: an error that says which dtype has no kernel and where Add's kernels are.
    let e = rt
        .run_named("Add", &[a.clone(), a], &Attrs::new(), &on(&sim, false))
        .unwrap_err();
    assert_eq!(e.code, Code::NotFound, "{e}");
    let name = <H as Half>::DTYPE.name();
    assert!(
        e.message
            .contains(&format!("no kernel for {name} on SIM:0")),
        "{e}"
    );
    assert!(
        e.message.contains("strict mode") && e.message.contains("SIM"),
        "{e}"
    );
}

#[test]
fn f16_on_sim_follows_the_fallback_order() {
    on_sim::<f16>();
}

#[test]
fn bf16_on_sim_follows_the_fallback_order() {
    on_sim::<bf16>();
}
