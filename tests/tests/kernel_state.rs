//! Kernel states (plugin ABI 1.5) through the runtime: one `create` per device, input dtypes
//! and attribute set (in whatever order the host set the attributes), the results the CPU's,
//! at most 64 states kept per kernel and device, and every state destroyed — in stream order,
//! and before the device is — by the time the runtime is gone. SIM's ReduceSum (C) and RSIM's
//! Cast (the Rust SDK) keep states; both log each state made and destroyed
//! (`log_kernel_states=1`), and each test picks out the lines of its own platform name.

use devplug_core::{Attrs, DType, RunOptions, Runtime, Tensor};
use devplug_tests::{
    collect_log, kernel_state_lines, log_lines, options, plugin_path, record_placements, runtime,
    CollectedLog, ZooReshape,
};

/// SIM's lines about kernel states on KSTATE:0: (created?, live count after).
fn state_lines(log: &CollectedLog) -> Vec<(bool, u64)> {
    kernel_state_lines(log, "SIM KSTATE:0: kernel ReduceSum: state ")
}

fn counts(log: &CollectedLog) -> (usize, usize) {
    let lines = state_lines(log);
    let made = lines.iter().filter(|(c, _)| *c).count();
    (made, lines.len() - made)
}

#[test]
fn kernel_states_are_made_once_per_attribute_set_and_all_destroyed() {
    let seen = collect_log();
    let rt = Runtime::new(options()).unwrap();
    rt.load_plugin(
        plugin_path("devplug_sim"),
        &[("platform", "KSTATE"), ("log_kernel_states", "1")],
    )
    .unwrap();
    let sim = rt.find_device("KSTATE:0").unwrap();
    let cpu = rt.find_device("CPU:0").unwrap();
    let sum = rt.op("ReduceSum").unwrap();
    let values: Vec<f32> = (0..24).map(|i| i as f32).collect();
    let shape = [1i64, 2, 1, 3, 1, 4, 1, 1];
    let x_cpu = Tensor::from_slice(&cpu, &shape, &values).unwrap();
    let x = x_cpu.copy_to(&sim).unwrap();
    let on_sim = RunOptions::on(&sim).strict();
    let reduce = |attrs: &Attrs| {
        let y = rt
            .run1(&sum, std::slice::from_ref(&x), attrs, &on_sim)
            .unwrap();
        let want = rt
            .run1(
                &sum,
                std::slice::from_ref(&x_cpu),
                attrs,
                &RunOptions::on(&cpu),
            )
            .unwrap();
        assert_eq!(y.shape(), want.shape(), "{attrs:?}");
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap(),
            "{attrs:?}"
        );
    };

    // One attribute set, five runs, the attributes set in either order: one state.
    let a = Attrs::new().with("axes", [1, -3]).with("keep_dims", true);
    let b = Attrs::new().with("keep_dims", true).with("axes", [1, -3]);
    for attrs in [&a, &a, &b, &a, &b] {
        reduce(attrs);
    }
    assert_eq!(counts(&seen), (1, 0), "{:?}", state_lines(&seen));

    // 80 more attribute sets (subsets of the 8 axes, with and without keep_dims): one state
    // each; the device keeps at most 64 of the kernel's, letting the least recently used go in
    // stream order, so once the stream has caught up at most 64 are alive.
    let mut sets = 0;
    'sets: for keep in [false, true] {
        for mask in 1u32..256 {
            if sets == 80 {
                break 'sets;
            }
            let axes: Vec<i64> = (0..8).filter(|i| mask & (1 << i) != 0).collect();
            reduce(&Attrs::new().with("axes", axes).with("keep_dims", keep));
            sets += 1;
        }
    }
    sim.synchronize().unwrap();
    let (made, destroyed) = counts(&seen);
    assert_eq!(made, 81, "{:?}", state_lines(&seen));
    assert_eq!(made - destroyed, 64, "kept after the stream caught up");
    let max_live = state_lines(&seen).iter().map(|(_, n)| *n).max().unwrap();
    assert!(
        max_live <= 65,
        "at most one over the bound, until its destroy ran: {max_live}"
    );

    // The runtime and every handle gone (the device with them): every state destroyed, none
    // reported leaked by SIM.
    drop((x, x_cpu, on_sim, sim, cpu, sum));
    drop(rt);
    let (made, destroyed) = counts(&seen);
    assert_eq!((made, destroyed), (81, 81), "{:?}", state_lines(&seen));
    assert_eq!(state_lines(&seen).last().unwrap().1, 0);
    let leaks = log_lines(&seen, |m| {
        m.contains("KSTATE:") && (m.contains("never destroyed") || m.contains("leaked"))
    });
    assert!(leaks.is_empty(), "{leaks:?}");
}

/// RSIM's Cast keeps a kernel state (plugin ABI 1.5) through the runtime: one `create` per
/// input dtype and `dtype` attribute on the device however often it runs, the CPU's results,
/// and every state destroyed by the time the runtime is gone, none left for RSIM to report at
/// `destroy_device` (RSIM logs its states with `log_kernel_states=1`).
#[test]
fn rsims_cast_keeps_a_state_per_dtype_pair_and_equals_the_cpu() {
    let log = collect_log();
    let states = || kernel_state_lines(&log, "RSTATE:0: kernel Cast: state ");
    let rt = runtime();
    rt.load_plugin(
        plugin_path("devplug_rust_example"),
        &[("platform", "RSTATE"), ("log_kernel_states", "1")],
    )
    .unwrap();
    let (cpu, dev) = (
        rt.cpu_device().unwrap(),
        rt.find_device("RSTATE:0").unwrap(),
    );
    let placements = record_placements(&rt);
    let cast = rt.op("Cast").unwrap();
    let to = |dtype: DType| Attrs::new().with("dtype", dtype);
    let (on_dev, on_cpu) = (RunOptions::on(&dev).strict(), RunOptions::on(&cpu));
    // A result as f64 values, cast on the CPU (exact for these values).
    let values = |t: &Tensor| {
        rt.run1(&cast, &[t.copy_to(&cpu).unwrap()], &to(DType::F64), &on_cpu)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    };
    let x_cpu =
        Tensor::from_slice(&cpu, &[2, 3], &[1.5f32, -2.7, 300.0, 0.0, 65504.0, 1e-8]).unwrap();
    let x = x_cpu.copy_to(&dev).unwrap();

    // Five attribute sets, each run twice: five states.
    let targets = [DType::I64, DType::U8, DType::Bool, DType::F16, DType::F64];
    for round in 0..2 {
        for dtype in targets {
            let y = rt
                .run1(&cast, std::slice::from_ref(&x), &to(dtype), &on_dev)
                .unwrap();
            let want = rt
                .run1(&cast, std::slice::from_ref(&x_cpu), &to(dtype), &on_cpu)
                .unwrap();
            assert_eq!(y.dtype(), dtype);
            assert_eq!(values(&y), values(&want), "f32 -> {dtype:?}, round {round}");
        }
    }
    // Another input dtype: another state.
    let i = Tensor::from_slice(&dev, &[3], &[7i64, -1, 1 << 40]).unwrap();
    let f = rt.run1(&cast, &[i], &to(DType::F32), &on_dev).unwrap();
    assert_eq!(f.to_vec::<f32>().unwrap(), [7.0, -1.0, (1u64 << 40) as f32]);
    dev.synchronize().unwrap();
    assert_eq!(
        states(),
        (1..=6).map(|n| (true, n)).collect::<Vec<_>>(),
        "one create per dtype pair, all kept"
    );
    assert!(
        placements
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.op == "Cast" && e.device == "RSTATE:0" && e.detail.contains("rust_example")),
        "RSIM's own kernel ran"
    );

    // The runtime and every handle gone (the device with them): every state destroyed.
    drop((x, x_cpu, f, on_dev, on_cpu, cast, dev, cpu));
    drop(rt);
    let all = states();
    assert_eq!(all.len(), 12, "{all:?}");
    assert_eq!(all.iter().filter(|(created, _)| !created).count(), 6);
    assert_eq!(all.last(), Some(&(false, 0)));
    let leaks = log_lines(&log, |m| {
        m.starts_with("RSTATE:") && m.contains("never destroyed")
    });
    assert!(leaks.is_empty(), "{leaks:?}");
}

/// A kernel with `create` and no `destroy` loads, with a warning naming it (its states could
/// never be freed); a `create` that stores nothing gives `compute` a NULL state, and it runs.
#[test]
fn a_create_without_destroy_is_warned_about_and_runs() {
    let log = collect_log();
    let z = ZooReshape::load("kernel_create_only");
    let warned = log_lines(&log, |m| {
        m.contains("plugin 'zoo_kernel_create_only': kernel Reshape on ZOO")
            && m.contains("create is set but destroy is NULL")
    });
    assert_eq!(warned.len(), 1, "{warned:?}");
    let y = z.run_on_zoo().unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), [1., 2., 3., 4.]);
}
