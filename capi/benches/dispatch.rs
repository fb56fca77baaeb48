//! Eager dispatch overhead, measured through the C API's exported functions (the path a C
//! host takes), against calling the CPU kernel function directly, in the same run:
//!
//! - Add of two 16-element f32 tensors on the CPU device: `dp_op_run` + releasing the output
//!   handle, median ns per op (output allocation included); the goal is ≤ 150 ns; and the
//!   same with the device named in the run options (what most hosts pass);
//! - the same through the Rust API (`Runtime::run`);
//! - the baseline: `host::kernels::binary` on the same 16 elements.
//!
//! `cargo bench -p devplug-capi --bench dispatch`

use std::hint::black_box;
use std::time::Instant;

use devplug::op::{dp_op_run, dp_op_t, dp_runtime_find_op};
use devplug::runtime::{
    dp_device_t, dp_runtime_create, dp_runtime_destroy, dp_runtime_find_device, dp_runtime_t,
};
use devplug::status::DP_OK;
use devplug::tensor::{dp_tensor_create, dp_tensor_release, dp_tensor_t, DP_DTYPE_F32};
use devplug_core::host::kernels::{binary, BinaryOp, CpuContext, View, ViewMut};
use devplug_core::{Attrs, DType, RunOptions, Runtime, RuntimeOptions, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median over 15 rounds of `iters` calls, in ns per call.
fn per_call_ns(iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..iters {
        f();
    }
    let mut samples = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        samples.push(t.elapsed().as_secs_f64() * 1e9 / iters as f64);
    }
    median(samples)
}

fn main() {
    const N: usize = 16;
    let iters = 100_000;
    let a: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..N).map(|i| 2.0 * i as f32).collect();

    // Baseline: the CPU kernel function itself.
    let ctx = CpuContext { threads: 1 };
    let shape = [N];
    let mut out = vec![0f32; N];
    let bytes = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
    let (ab, bb) = (bytes(&a), bytes(&b));
    let mut ob = bytes(&out);
    let direct = per_call_ns(iters, || {
        let va = View {
            data: black_box(&ab),
            dtype: DType::F32,
            shape: &shape,
        };
        let vb = View {
            data: black_box(&bb),
            dtype: DType::F32,
            shape: &shape,
        };
        let vo = ViewMut {
            data: &mut ob,
            dtype: DType::F32,
            shape: &shape,
        };
        binary(&ctx, BinaryOp::Add, va, vb, vo).expect("add");
        black_box(&ob);
    });
    out.copy_from_slice(
        &ob.chunks(4)
            .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect::<Vec<_>>(),
    );
    assert_eq!(out[3], 9.0);

    // The Rust API.
    let rt = Runtime::new(RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    })
    .expect("runtime");
    let cpu = rt.find_device("CPU").expect("CPU");
    let (ta, tb) = (
        Tensor::from_slice(&cpu, &[N as i64], &a).expect("a"),
        Tensor::from_slice(&cpu, &[N as i64], &b).expect("b"),
    );
    let add = rt.op("Add").expect("Add");
    let inputs = [ta, tb];
    let attrs = Attrs::new();
    let opts = RunOptions::default();
    let rust = per_call_ns(iters, || {
        black_box(
            rt.run(&add, black_box(&inputs), &attrs, &opts)
                .expect("run"),
        );
    });

    // The C API.
    let c = unsafe {
        // SAFETY: the C API used as its header documents: valid out-pointers, live handles.
        let mut crt: *mut dp_runtime_t = std::ptr::null_mut();
        let o = devplug::runtime::dp_runtime_options_t {
            discover_plugins: 0,
            ..Default::default()
        };
        assert_eq!(dp_runtime_create(&o, &mut crt), DP_OK);
        let mut dev: *mut dp_device_t = std::ptr::null_mut();
        assert_eq!(
            dp_runtime_find_device(crt, c"CPU".as_ptr(), &mut dev),
            DP_OK
        );
        let shape = [N as i64];
        let mut ins: [*mut dp_tensor_t; 2] = [std::ptr::null_mut(); 2];
        for (slot, data) in ins.iter_mut().zip([&a, &b]) {
            assert_eq!(
                dp_tensor_create(
                    dev,
                    DP_DTYPE_F32,
                    shape.as_ptr(),
                    1,
                    data.as_ptr().cast(),
                    N * 4,
                    slot
                ),
                DP_OK
            );
        }
        let mut op: *mut dp_op_t = std::ptr::null_mut();
        assert_eq!(dp_runtime_find_op(crt, c"Add".as_ptr(), &mut op), DP_OK);
        // Without options (the default device), and with the device named in them.
        let named = devplug::op::dp_run_options_t {
            device: dev,
            ..Default::default()
        };
        let run = |options: *const devplug::op::dp_run_options_t| {
            per_call_ns(iters, || {
                let mut out: *mut dp_tensor_t = std::ptr::null_mut();
                let st = dp_op_run(
                    crt,
                    op,
                    ins.as_ptr(),
                    2,
                    std::ptr::null(),
                    options,
                    &mut out,
                    1,
                    std::ptr::null_mut(),
                );
                debug_assert_eq!(st, DP_OK);
                dp_tensor_release(black_box(out));
            })
        };
        let ns = (run(std::ptr::null()), run(&named));
        for t in ins {
            dp_tensor_release(t);
        }
        dp_runtime_destroy(crt);
        ns
    };

    println!("eager Add of two 16-element f32 tensors on CPU:0, one thread, median ns per op");
    println!("  CPU kernel function called directly (baseline)   {direct:8.1}");
    println!(
        "  Runtime::run (Rust API)                          {rust:8.1}   {:.1}x the kernel",
        rust / direct
    );
    let (c, c_named) = c;
    println!("  dp_op_run + dp_tensor_release (C API)            {c:8.1}   {:.1}x the kernel   (goal <= 150 ns)", c / direct);
    println!(
        "  the same, the device named in the options        {c_named:8.1}   {:.1}x the kernel",
        c_named / direct
    );
}
