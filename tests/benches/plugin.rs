//! Plugin boundary benchmarks, with baselines measured in the same run:
//! - load + init of SIM (µs per runtime, the library already mapped by the first load);
//! - a plugin call through the ABI (`memset` of 16 bytes on SIM, synchronous) vs the same
//!   call on the built-in CPU device (goal: ≤ 1.1×), and the same through the zoo variant
//!   `memset_arena_only`, whose memset does the CPU's work (a bound check and `memset`) where
//!   SIM validates the address against its allocations: the ABI boundary alone;
//! - an eager Add of 16 f32 through SIM's native kernel, N ops enqueued then one synchronize,
//!   per op, vs the same op on the CPU device (goal: ≤ 1.2×): through the Rust API, and
//!   through the C API as the issue states it (`dp_op_run` + releasing the output, the CPU
//!   figure being the C dispatch benchmark's; also with the CPU named in the run options, as
//!   SIM is). Their rounds are interleaved, and each ratio is the median of the rounds' ratios,
//!   so that a shared machine's drift during the run does not decide it.
//!
//! `cargo bench -p devplug-tests --bench plugin`
//!
//! With `DEVPLUG_BENCH_ONLY=add` only the Rust API's eager Add table is measured, with
//! `DEVPLUG_BENCH_ONLY=add-c` only the C API's (for profilers such as
//! `valgrind --tool=callgrind`, whose counts then hold little besides the launches).

use std::hint::black_box;
use std::time::Instant;

use devplug_core::{Attrs, RunOptions, Runtime, RuntimeOptions, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn per_call_ns(iters: usize, mut f: impl FnMut()) -> f64 {
    median((0..9).map(|_| round_ns(iters, &mut f)).collect())
}

/// `rounds` rounds of the measurements `fs`, interleaved (a, b, …, a, b, …) so that a machine
/// that slows down or speeds up during the run weighs on all of them alike. Each closure runs
/// its ops and returns the ns per op of its round; the result holds every round's figures.
fn interleaved<const K: usize>(
    rounds: usize,
    mut fs: [&mut dyn FnMut() -> f64; K],
) -> Vec<[f64; K]> {
    (0..rounds)
        .map(|_| std::array::from_fn(|i| fs[i]()))
        .collect()
}

/// The median over the rounds of `f` of a round: a figure, or a ratio of two figures of the
/// same round.
fn median_of<const K: usize>(rounds: &[[f64; K]], f: impl Fn(&[f64; K]) -> f64) -> f64 {
    median(rounds.iter().map(f).collect())
}

/// ns per op of one round of `n` calls of `f`.
fn round_ns(n: usize, mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_secs_f64() * 1e9 / n as f64
}

fn main() {
    let sim = devplug_tests::plugin_path("devplug_sim");
    let options = || RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    };
    let only = std::env::var("DEVPLUG_BENCH_ONLY").ok();
    if only.is_none() {
        load_and_memset(&sim, options);
    }
    if only.as_deref() != Some("add-c") {
        eager_add(&sim, options());
    }
    if only.as_deref() != Some("add") {
        eager_add_c(&sim);
    }
}

/// Load + init of SIM, and a synchronous memset through the ABI.
fn load_and_memset(sim: &std::path::Path, options: impl Fn() -> RuntimeOptions) {
    let zoo = devplug_tests::zoo_path("memset_arena_only");
    // load + init: a fresh runtime each time (the first load also maps the library)
    let mut loads = Vec::new();
    for _ in 0..30 {
        let rt = Runtime::new(options()).expect("runtime");
        let t = Instant::now();
        rt.load_plugin(sim, &[]).expect("SIM loads");
        loads.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let mut empty = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        black_box(Runtime::new(options()).expect("runtime"));
        empty.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!(
        "load + init of SIM: median {:.1} us (creating a runtime without plugins: {:.1} us)",
        median(loads),
        median(empty)
    );

    let rt = Runtime::new(options()).expect("runtime");
    rt.load_plugin(sim, &[]).expect("SIM loads");
    rt.load_plugin(&zoo, &[])
        .expect("the zoo's memset_arena_only loads");
    let iters = 200_000;
    // Buffer::memset (the buffer layer's range check, then the executor), and the executor
    // call alone: what crosses the ABI.
    let measure = |device_type: &str| {
        let dev = rt.find_device(device_type).expect("device");
        let buf = dev.allocate(16).expect("alloc");
        let buffer_ns = per_call_ns(iters, || buf.memset(0, black_box(7), 16).expect("memset"));
        let (ex, ptr) = (dev.executor().clone(), buf.ptr());
        let executor_ns = per_call_ns(iters, || ex.memset(ptr, black_box(7), 16).expect("memset"));
        (buffer_ns, executor_ns)
    };
    let (cpu_ns, cpu_ex_ns) = measure("CPU");
    let (sim_ns, sim_ex_ns) = measure("SIM");
    let (zoo_ns, zoo_ex_ns) = measure("ZOO");
    println!("memset of 16 bytes, synchronous                   ns/call   ratio to the CPU device");
    println!("  Buffer::memset, built-in CPU (baseline)        {cpu_ns:8.1}");
    println!(
        "  Buffer::memset, SIM through the ABI            {sim_ns:8.1}   {:.2}x  (goal <= 1.1x)",
        sim_ns / cpu_ns
    );
    println!(
        "  Buffer::memset, zoo (the CPU's work) through it {zoo_ns:7.1}   {:.2}x  (goal <= 1.1x)",
        zoo_ns / cpu_ns
    );
    println!("  executor call, built-in CPU (baseline)         {cpu_ex_ns:8.1}");
    println!(
        "  executor call, SIM through the ABI             {sim_ex_ns:8.1}   {:.2}x",
        sim_ex_ns / cpu_ex_ns
    );
    println!(
        "  executor call, zoo through the ABI             {zoo_ex_ns:8.1}   {:.2}x",
        zoo_ex_ns / cpu_ex_ns
    );
}

/// Eager Add of 16 f32 through SIM's native kernel: N ops enqueued, one synchronize, / N.
fn eager_add(sim: &std::path::Path, options: RuntimeOptions) {
    let rt = Runtime::new(options).expect("runtime");
    rt.load_plugin(sim, &[]).expect("SIM loads");
    let cpu = rt.find_device("CPU").expect("CPU");
    let dev = rt.find_device("SIM").expect("SIM");
    let a: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let ca = Tensor::from_slice(&cpu, &[16], &a).expect("a");
    let cb = Tensor::from_slice(&cpu, &[16], &a).expect("b");
    let (sa, sb) = (ca.copy_to(&dev).expect("a"), cb.copy_to(&dev).expect("b"));
    let add = rt.op("Add").expect("Add");
    let none = Attrs::new();
    let on_cpu = RunOptions {
        device: Some(cpu.clone()),
        soft_placement: None,
    };
    let on_sim = RunOptions {
        device: Some(dev.clone()),
        soft_placement: Some(false),
    };
    let n = 20_000;
    let cpu_inputs = [ca, cb];
    let sim_inputs = [sa, sb];
    let mut sync_samples = Vec::new();
    let rounds = interleaved(
        9,
        [
            &mut || {
                round_ns(n, || {
                    black_box(rt.run(&add, &cpu_inputs, &none, &on_cpu).expect("add"));
                })
            },
            &mut || {
                let t = Instant::now();
                for _ in 0..n {
                    black_box(
                        rt.run(&add, &sim_inputs, &none, &on_sim)
                            .expect("add on SIM"),
                    );
                }
                let launched = Instant::now();
                dev.synchronize().expect("sync");
                sync_samples.push(launched.elapsed().as_secs_f64() * 1e9 / n as f64);
                t.elapsed().as_secs_f64() * 1e9 / n as f64
            },
        ],
    );
    let (cpu_op, sim_op) = (median_of(&rounds, |r| r[0]), median_of(&rounds, |r| r[1]));
    let ratio = median_of(&rounds, |r| r[1] / r[0]);
    let sync_part = median(sync_samples);
    println!(
        "eager Add of 16 f32, ns per op (9 interleaved rounds; ratios: medians of the rounds')"
    );
    println!("  CPU device (baseline)                        {cpu_op:8.1}");
    println!(
        "  SIM native kernel, {n} enqueued + 1 sync   {sim_op:8.1}   {ratio:.2}x  (goal <= 1.2x)"
    );
    // What the final synchronize waited for: work SIM's worker had not caught up with.
    println!("    of which the final synchronize, per op       {sync_part:8.1}");
}

/// The same from C: `dp_op_run` + `dp_tensor_release` of the output, on CPU:0 (median of
/// rounds) and on SIM (N enqueued, then `dp_device_synchronize`, / N).
fn eager_add_c(sim: &std::path::Path) {
    use devplug::op::{dp_op_run, dp_op_t, dp_run_options_t, dp_runtime_find_op};
    use devplug::plugin::dp_runtime_load_plugin;
    use devplug::runtime::{
        dp_device_synchronize, dp_device_t, dp_runtime_create, dp_runtime_destroy,
        dp_runtime_find_device, dp_runtime_options_t, dp_runtime_t,
    };
    use devplug::status::DP_OK;
    use devplug::tensor::{
        dp_tensor_copy_to, dp_tensor_create, dp_tensor_release, dp_tensor_t, DP_DTYPE_F32,
    };

    let a: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let path = std::ffi::CString::new(sim.to_str().expect("utf-8 path")).expect("path");
    let n = 20_000;
    // SAFETY: the C API used as its header documents: valid out-pointers, live handles.
    let rounds = unsafe {
        let mut rt: *mut dp_runtime_t = std::ptr::null_mut();
        let o = dp_runtime_options_t {
            discover_plugins: 0,
            ..Default::default()
        };
        assert_eq!(dp_runtime_create(&o, &mut rt), DP_OK);
        assert_eq!(
            dp_runtime_load_plugin(rt, path.as_ptr(), std::ptr::null(), 0),
            DP_OK
        );
        let (mut cpu, mut dev): (*mut dp_device_t, *mut dp_device_t) =
            (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(dp_runtime_find_device(rt, c"CPU".as_ptr(), &mut cpu), DP_OK);
        assert_eq!(dp_runtime_find_device(rt, c"SIM".as_ptr(), &mut dev), DP_OK);
        let shape = [16i64];
        let mut cpu_in: [*mut dp_tensor_t; 2] = [std::ptr::null_mut(); 2];
        let mut sim_in: [*mut dp_tensor_t; 2] = [std::ptr::null_mut(); 2];
        for i in 0..2 {
            assert_eq!(
                dp_tensor_create(
                    cpu,
                    DP_DTYPE_F32,
                    shape.as_ptr(),
                    1,
                    a.as_ptr().cast(),
                    64,
                    &mut cpu_in[i]
                ),
                DP_OK
            );
            assert_eq!(dp_tensor_copy_to(cpu_in[i], dev, &mut sim_in[i]), DP_OK);
        }
        let mut op: *mut dp_op_t = std::ptr::null_mut();
        assert_eq!(dp_runtime_find_op(rt, c"Add".as_ptr(), &mut op), DP_OK);
        let on_sim = dp_run_options_t {
            device: dev,
            soft_placement: devplug::op::DP_SOFT_PLACEMENT_OFF,
            ..Default::default()
        };
        let run = |ins: &[*mut dp_tensor_t; 2], opts: *const dp_run_options_t| {
            let mut out: *mut dp_tensor_t = std::ptr::null_mut();
            let st = dp_op_run(
                rt,
                op,
                ins.as_ptr(),
                2,
                std::ptr::null(),
                opts,
                &mut out,
                1,
                std::ptr::null_mut(),
            );
            debug_assert_eq!(st, DP_OK);
            dp_tensor_release(black_box(out));
        };
        let on_cpu = dp_run_options_t {
            device: cpu,
            ..Default::default()
        };
        let rounds = interleaved(
            9,
            [
                &mut || round_ns(n, || run(&cpu_in, std::ptr::null())),
                &mut || round_ns(n, || run(&cpu_in, &on_cpu)),
                &mut || {
                    let t = Instant::now();
                    for _ in 0..n {
                        run(&sim_in, &on_sim);
                    }
                    assert_eq!(dp_device_synchronize(dev), DP_OK);
                    t.elapsed().as_secs_f64() * 1e9 / n as f64
                },
            ],
        );
        for t in cpu_in.into_iter().chain(sim_in) {
            dp_tensor_release(t);
        }
        dp_runtime_destroy(rt);
        rounds
    };
    let [cpu_op, cpu_explicit, sim_op] = std::array::from_fn(|i| median_of(&rounds, |r| r[i]));
    let sim_ratio = median_of(&rounds, |r| r[2] / r[0]);
    // The same call (options naming the device) on the two devices.
    let explicit_ratio = median_of(&rounds, |r| r[2] / r[1]);
    println!(
        "eager Add of 16 f32 from C (dp_op_run + dp_tensor_release), ns per op (9 interleaved rounds)"
    );
    println!("  CPU device, no options (baseline)            {cpu_op:8.1}");
    println!(
        "  CPU device named in the options              {cpu_explicit:8.1}   {:.2}x",
        median_of(&rounds, |r| r[1] / r[0])
    );
    println!(
        "  SIM native kernel, {n} enqueued + 1 sync   {sim_op:8.1}   {sim_ratio:.2}x  (goal <= 1.2x); {explicit_ratio:.2}x the CPU named in the options"
    );
}
