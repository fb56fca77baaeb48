//! CUDA plugin benchmarks, each with a baseline measured in the same run on the same GPU:
//! - eager launch: Add of two 16-element f32 tensors on CUDA:0 through the runtime (N ops
//!   enqueued, one synchronize, per op) vs a hand-written CUDA program launching an
//!   equivalent kernel with `cuLaunchKernel` (the same N-then-synchronize loop);
//! - Add of 16 M f32: bandwidth vs a device-to-device `cuMemcpy` of the same bytes
//!   (reads + writes counted both times);
//! - MatMul 4096³ (f32, bf16): TFLOP/s vs cuBLAS called directly with the same sizes;
//! - a 2-layer MLP forward (64×256 → 512 → 10, Gemm with fused ReLU, Gemm, Softmax) as eager
//!   ops: µs per forward on the GPU vs the CPU device.
//!
//! `cargo bench -p devplug-plugin-cuda --bench cuda` (prints "no CUDA device" and exits 0
//! without a GPU). `DEVPLUG_CUDA_PLUGIN` names the plugin library (default: the one cargo
//! built beside the benchmark).

use std::ffi::c_void;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::result as cu;
use cudarc::driver::sys;
use devplug_core::half::bf16;
use devplug_core::{
    AttrValue, Attrs, DType, Device, Outputs, RunOptions, Runtime, RuntimeOptions, Tensor,
};

fn plugin() -> PathBuf {
    if let Some(p) = std::env::var_os("DEVPLUG_CUDA_PLUGIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the benchmark's path");
    let deps = exe.parent().expect("a folder");
    [deps, deps.parent().unwrap_or(deps)]
        .iter()
        .map(|d| d.join("libdevplug_cuda.so"))
        .find(|p| p.is_file())
        .expect("libdevplug_cuda.so next to the benchmark")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median over 7 rounds of `f()` timed as a whole (f synchronizes itself), in seconds.
fn time(mut f: impl FnMut()) -> f64 {
    f(); // warm-up: compiles, loads, fills caches
    median(
        (0..7)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn ratio_line(what: &str, ours: f64, base: f64, unit: &str, base_name: &str) {
    println!(
        "{what:<44} devplug {ours:>10.2} {unit:<8} {base_name} {base:>10.2} {unit:<8} ratio {:.2}",
        ours / base
    );
}

/// The hand-written side: the primary context of GPU 0, current on this thread.
struct Raw {
    stream: sys::CUstream,
}

impl Raw {
    fn new() -> Raw {
        cu::init().unwrap();
        let dev = cu::device::get(0).unwrap();
        // SAFETY: a device the driver gave; the context stays retained for the process.
        unsafe {
            let ctx = cu::primary_ctx::retain(dev).unwrap();
            cu::ctx::set_current(ctx).unwrap();
        }
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking).unwrap();
        Raw { stream }
    }

    fn alloc(&self, bytes: usize) -> u64 {
        // SAFETY: fresh device memory, used only by the kernels and copies below.
        unsafe { cu::malloc_sync(bytes).unwrap() }
    }

    fn sync(&self) {
        // SAFETY: a live stream.
        unsafe { cu::stream::synchronize(self.stream).unwrap() }
    }
}

const ADD_SRC: &str = r#"
extern "C" __global__ void add(long long n, const float* a, const float* b, float* z) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    z[i] = a[i] + b[i];
}
"#;

fn main() {
    if let Err(why) = devplug_cuda::probe().gpus {
        println!("no CUDA device ({why}): nothing to measure");
        return;
    }
    let rt = Runtime::new(RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    })
    .unwrap();
    rt.load_plugin(plugin(), &[]).unwrap();
    let gpu = rt.find_device("CUDA:0").unwrap();
    println!("GPU: {}", gpu.properties().description.hardware_name);
    let raw = Raw::new();
    eager_launch(&rt, &gpu, &raw);
    add_bandwidth(&rt, &gpu, &raw);
    matmul(&rt, &gpu, &raw, DType::F32);
    matmul(&rt, &gpu, &raw, DType::BF16);
    mlp(&rt, &gpu);
}

fn eager_launch(rt: &Runtime, gpu: &Arc<Device>, raw: &Raw) {
    const N: usize = 20_000;
    let add = rt.op("Add").unwrap();
    let a = Tensor::from_slice(gpu, &[16], &[1.0f32; 16]).unwrap();
    let b = Tensor::from_slice(gpu, &[16], &[2.0f32; 16]).unwrap();
    let inputs = [a, b];
    let attrs = Attrs::new();
    let mut out = Outputs::new();
    let ours = time(|| {
        for _ in 0..N {
            rt.run_into_on(&add, &inputs, &attrs, Some(gpu), Some(false), &mut out)
                .unwrap();
            out.clear();
        }
        gpu.synchronize().unwrap();
    }) * 1e9
        / N as f64;

    let ptx = cudarc::nvrtc::compile_ptx(ADD_SRC).unwrap();
    let ptx = std::ffi::CString::new(ptx.to_src().replace('\0', "")).unwrap();
    // SAFETY: a NUL-terminated PTX image, loaded into the current context; the kernel gets
    // four parameters of the types it declares, over 16-element buffers it may access.
    let base = unsafe {
        let module = cu::module::load_data(ptx.as_ptr().cast()).unwrap();
        let f = cu::module::get_function(module, std::ffi::CString::new("add").unwrap()).unwrap();
        let (x, y, z) = (raw.alloc(64), raw.alloc(64), raw.alloc(64));
        let mut n = 16i64;
        let (mut xp, mut yp, mut zp) = (x, y, z);
        time(|| {
            for _ in 0..N {
                let mut params: [*mut c_void; 4] = [
                    (&mut n as *mut i64).cast(),
                    (&mut xp as *mut u64).cast(),
                    (&mut yp as *mut u64).cast(),
                    (&mut zp as *mut u64).cast(),
                ];
                cu::launch_kernel(f, (1, 1, 1), (256, 1, 1), 0, raw.stream, &mut params).unwrap();
            }
            raw.sync();
        }) * 1e9
            / N as f64
    };
    ratio_line(
        "eager Add, 16 f32, per op (N then sync)",
        ours,
        base,
        "ns",
        "cuLaunchKernel",
    );
}

fn add_bandwidth(rt: &Runtime, gpu: &Arc<Device>, raw: &Raw) {
    const N: i64 = 16 << 20;
    const REPS: usize = 20;
    let add = rt.op("Add").unwrap();
    let a = Tensor::zeros(gpu, DType::F32, &[N]).unwrap();
    let b = Tensor::zeros(gpu, DType::F32, &[N]).unwrap();
    a.buffer().memset(0, 0x3f, N as u64 * 4).unwrap();
    let inputs = [a, b];
    let attrs = Attrs::new();
    let mut out = Outputs::new();
    let secs = time(|| {
        for _ in 0..REPS {
            rt.run_into_on(&add, &inputs, &attrs, Some(gpu), Some(false), &mut out)
                .unwrap();
            out.clear();
        }
        gpu.synchronize().unwrap();
    }) / REPS as f64;
    let ours = 3.0 * 4.0 * N as f64 / secs / 1e9;
    let (src, dst) = (raw.alloc(N as usize * 4), raw.alloc(N as usize * 4));
    let secs = time(|| {
        for _ in 0..REPS {
            // SAFETY: two live buffers of N f32 each.
            unsafe { cu::memcpy_dtod_async(dst, src, N as usize * 4, raw.stream).unwrap() };
        }
        raw.sync();
    }) / REPS as f64;
    let base = 2.0 * 4.0 * N as f64 / secs / 1e9;
    ratio_line(
        "Add 16M f32, GB/s (read + written)",
        ours,
        base,
        "GB/s",
        "cuMemcpyDtoD",
    );
}

fn matmul(rt: &Runtime, gpu: &Arc<Device>, raw: &Raw, dtype: DType) {
    const S: i64 = 4096;
    const REPS: usize = 5;
    let mm = rt.op("MatMul").unwrap();
    let size = dtype.size();
    let fill = |seed: u8| {
        let t = Tensor::zeros(gpu, dtype, &[S, S]).unwrap();
        // Small values of any sign: 0x3c / 0xbc bytes repeat as f32 ≈ ±0.011, bf16 ≈ ±0.0117.
        let bytes: Vec<u8> = (0..(S * S) as usize * size)
            .map(|i| {
                if (i / size + seed as usize).is_multiple_of(3) {
                    0xbc
                } else {
                    0x3c
                }
            })
            .collect();
        t.buffer().write(0, &bytes).unwrap();
        t
    };
    let inputs = [fill(1), fill(2)];
    let attrs = Attrs::new()
        .with("transpose_a", AttrValue::Bool(false))
        .with("transpose_b", AttrValue::Bool(false));
    let mut out = Outputs::new();
    let flops = 2.0 * (S * S * S) as f64;
    let secs = time(|| {
        for _ in 0..REPS {
            rt.run_into_on(&mm, &inputs, &attrs, Some(gpu), Some(false), &mut out)
                .unwrap();
            out.clear();
        }
        gpu.synchronize().unwrap();
    }) / REPS as f64;
    let ours = flops / secs / 1e12;

    let (a, b, c) = (
        raw.alloc((S * S) as usize * size),
        raw.alloc((S * S) as usize * size),
        raw.alloc((S * S) as usize * size),
    );
    let handle = blas::create_handle().unwrap();
    let (ty, compute) = if dtype == DType::F32 {
        (
            blas_sys::cudaDataType::CUDA_R_32F,
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        )
    } else {
        (
            blas_sys::cudaDataType::CUDA_R_16BF,
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        )
    };
    let (one, zero) = (1f32, 0f32);
    let secs = time(|| {
        for _ in 0..REPS {
            // SAFETY: a live handle on the current context and three S×S matrices of `ty`.
            unsafe {
                blas::set_stream(handle, raw.stream.cast()).unwrap();
                blas::gemm_ex(
                    handle,
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    S as i32,
                    S as i32,
                    S as i32,
                    (&one as *const f32).cast(),
                    b as usize as *const c_void,
                    ty,
                    S as i32,
                    a as usize as *const c_void,
                    ty,
                    S as i32,
                    (&zero as *const f32).cast(),
                    c as usize as *mut c_void,
                    ty,
                    S as i32,
                    compute,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
                .unwrap();
            }
        }
        raw.sync();
    }) / REPS as f64;
    let base = flops / secs / 1e12;
    black_box(bf16::ZERO);
    ratio_line(
        &format!("MatMul 4096³ {}, TFLOP/s", dtype.name()),
        ours,
        base,
        "TFLOP/s",
        "cuBLAS",
    );
}

fn mlp(rt: &Runtime, gpu: &Arc<Device>) {
    let cpu = rt.cpu_device().unwrap();
    let make = |d: &Arc<Device>, shape: &[i64], seed: u32| {
        let n = shape.iter().product::<i64>() as usize;
        let v: Vec<f32> = (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0
                    - 0.5
            })
            .collect();
        Tensor::from_slice(d, shape, &v).unwrap()
    };
    let gemm = rt.op("Gemm").unwrap();
    let softmax = rt.op("Softmax").unwrap();
    let relu = Attrs::new().with("relu", AttrValue::Bool(true));
    let plain = Attrs::new();
    let per_forward = |d: &Arc<Device>| {
        let on = RunOptions {
            device: Some(d.clone()),
            soft_placement: None,
        };
        let (x, w1, b1, w2, b2) = (
            make(d, &[64, 256], 1),
            make(d, &[256, 512], 2),
            make(d, &[512], 3),
            make(d, &[512, 10], 4),
            make(d, &[10], 5),
        );
        const N: usize = 200;
        time(|| {
            for _ in 0..N {
                let h = rt
                    .run(&gemm, &[x.clone(), w1.clone(), b1.clone()], &relu, &on)
                    .unwrap();
                let o = rt
                    .run(&gemm, &[h[0].clone(), w2.clone(), b2.clone()], &plain, &on)
                    .unwrap();
                black_box(rt.run(&softmax, &[o[0].clone()], &plain, &on).unwrap());
            }
            d.synchronize().unwrap();
        }) * 1e6
            / N as f64
    };
    let on_gpu = per_forward(gpu);
    let on_cpu = per_forward(&cpu);
    ratio_line(
        "MLP forward 64x256->512->10, µs",
        on_gpu,
        on_cpu,
        "µs",
        "CPU device",
    );
}
