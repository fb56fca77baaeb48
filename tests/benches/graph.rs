//! Graph runs against the same ops run eagerly, in the same process (docs/performance.md,
//! "Graphs"):
//!
//! - a one-node graph (Add of two 16-element f32 tensors on the CPU) per run, against
//!   `Runtime::run` of the same op: what a graph run costs beyond its ops;
//! - a chain of 16 Adds as one graph run, against the 16 ops run eagerly: the cost per node;
//! - memory: a chain of 16 Adds of 4 MiB tensors, the CPU device's peak bytes in use during a
//!   graph run (intermediates released after their last use) against eager ops that keep every
//!   intermediate until the end, in tensors of 4 MiB.
//!
//! `cargo bench -p devplug-tests --bench graph`

use std::hint::black_box;
use std::time::Instant;

use devplug_core::{Attrs, DType, Graph, RunOptions, Runtime, RuntimeOptions, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median over 9 interleaved rounds of `iters` calls of each of `a` and `b`, in ns per call.
fn pair_ns(iters: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (f64, f64) {
    for _ in 0..iters {
        a();
        b();
    }
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        let t = Instant::now();
        for _ in 0..iters {
            a();
        }
        sa.push(t.elapsed().as_secs_f64() * 1e9 / iters as f64);
        let t = Instant::now();
        for _ in 0..iters {
            b();
        }
        sb.push(t.elapsed().as_secs_f64() * 1e9 / iters as f64);
    }
    (median(sa), median(sb))
}

fn main() {
    let rt = Runtime::new(RuntimeOptions {
        discover_from_env: false,
        intra_op_threads: 1,
        ..Default::default()
    })
    .expect("runtime");
    let cpu = rt.default_device().clone();
    let add = rt.op("Add").expect("Add");
    let none = Attrs::new();
    let opts = RunOptions::default();

    // One node.
    let x = Tensor::from_slice(&cpu, &[16], &[1.5f32; 16]).expect("x");
    let mut g = Graph::new();
    let p = g
        .placeholder("x", DType::F32, Some(&[16]))
        .expect("placeholder");
    let s = g.op(&rt, "s", &add, &[p, p], &none, None).expect("node")[0];
    let feeds = [(p, x.clone())];
    let inputs = [x.clone(), x.clone()];
    let (eager, graph) = pair_ns(
        50_000,
        || {
            black_box(rt.run(&add, black_box(&inputs), &none, &opts).expect("run"));
        },
        || {
            black_box(g.run(&rt, black_box(&feeds), &[s]).expect("graph run"));
        },
    );

    // A chain of 16 nodes.
    let mut chain = Graph::new();
    let cp = chain
        .placeholder("x", DType::F32, Some(&[16]))
        .expect("placeholder");
    let mut last = cp;
    for i in 0..16 {
        last = chain
            .op(&rt, &format!("add{i}"), &add, &[last, cp], &none, None)
            .expect("node")[0];
    }
    let cfeeds = [(cp, x.clone())];
    let (eager16, graph16) = pair_ns(
        5_000,
        || {
            let mut y = x.clone();
            for _ in 0..16 {
                y = rt
                    .run(&add, &[y, x.clone()], &none, &opts)
                    .expect("run")
                    .pop()
                    .expect("output");
            }
            black_box(y);
        },
        || {
            black_box(
                chain
                    .run(&rt, black_box(&cfeeds), &[last])
                    .expect("graph run"),
            );
        },
    );

    // Memory: 16 Adds of 4 MiB tensors.
    const ELEMS: usize = 1 << 20;
    let big = Tensor::from_slice(&cpu, &[ELEMS as i64], &vec![1f32; ELEMS]).expect("big");
    let mut mem = Graph::new();
    let mp = mem
        .placeholder("x", DType::F32, Some(&[ELEMS as i64]))
        .expect("placeholder");
    let mut mlast = mp;
    for i in 0..16 {
        mlast = mem
            .op(&rt, &format!("add{i}"), &add, &[mlast, mp], &none, None)
            .expect("node")[0];
    }
    // The device's peak only grows: the graph runs first, when everything before it used
    // small tensors only, so the peak after it is the graph run's.
    let stats = || cpu.memory_stats();
    cpu.release_cached_memory();
    let base = stats().bytes_in_use;
    let peak_graph = {
        let out = mem.run(&rt, &[(mp, big.clone())], &[mlast]).expect("run");
        let peak = stats().peak_bytes_in_use;
        drop(out);
        peak
    };
    cpu.release_cached_memory();
    // Eager, every intermediate kept (what a host holding each result does).
    let peak_eager = {
        let mut kept = vec![big.clone()];
        for _ in 0..16 {
            let y = rt
                .run(
                    &add,
                    &[kept.last().expect("last").clone(), big.clone()],
                    &none,
                    &opts,
                )
                .expect("run")
                .pop()
                .expect("output");
            kept.push(y);
        }
        stats().peak_bytes_in_use
    };
    let mib = |b: u64| (b.saturating_sub(base)) as f64 / (4u64 << 20) as f64;

    println!("graph runs against the same ops run eagerly, CPU:0, one thread");
    println!(
        "  Add of 16 f32: eager {eager:7.1} ns, one-node graph run {graph:7.1} ns   {:.2}x",
        graph / eager
    );
    println!(
        "  16 chained Adds: eager {eager16:7.1} ns, graph run {graph16:7.1} ns   {:.2}x ({:.1} ns per node beyond the op)",
        graph16 / eager16,
        (graph16 - eager16) / 16.0
    );
    println!(
        "  16 chained Adds of 4 MiB: peak in use during a graph run {:.1} tensors, eager with every result kept {:.1} tensors   {:.2}x",
        mib(peak_graph),
        mib(peak_eager),
        mib(peak_graph) / mib(peak_eager)
    );
}
