//! CPU kernel benchmarks, each printed against a baseline measured in the same run:
//! - Add of 1 M f32 elements: GB/s moved (3 x 4 MB) vs `memcpy` moving as many bytes
//!   (goal: >= 0.8x);
//! - MatMul 1024 x 1024 x 1024 f32, one thread and all threads: GFLOP/s vs OpenBLAS's
//!   `cblas_sgemm` when `libopenblas.so.0` is installed (goal: >= 0.9x);
//! - Add of 16 f32 elements: ns per call (for orientation: NumPy takes about 290 ns including
//!   its Python call);
//! - MatMul of the MLP example's shapes ([64, 256] x [256, 512], [64, 512] x [512, 10]), one
//!   thread, vs OpenBLAS;
//! - a few more for orientation: Sum of 1 M f32, Exp of 1 M f32, transpose of 1024 x 1024 f32;
//!   Exp, Tanh and Sigmoid of 16 K f32 in cache vs loops over the standard library's scalar
//!   functions;
//! - f16 and bf16 (computed in f32): Add of 1 M elements vs memcpy of the same bytes and vs the
//!   f32 Add, MatMul 1024^3 vs the f32 MatMul, one thread.
//!
//! `cargo bench -p devplug-core --bench cpu_kernels`

use std::hint::black_box;
use std::time::Instant;

use devplug_core::host::kernels::{
    binary, matmul, reduce, transpose, unary, BinaryOp, CpuContext, ReduceOp, UnaryOp, View,
    ViewMut,
};
use devplug_core::DType;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Median seconds of `reps` calls of `f`, after one warm-up call.
fn time<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    f();
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64());
    }
    median(v)
}

/// f32 data as bytes, 8-byte aligned (backed by u64s).
struct Buf {
    words: Vec<u64>,
    len: usize,
}

impl Buf {
    fn new(n_f32: usize, seed: u32) -> Buf {
        let mut b = Buf {
            words: vec![0; n_f32.div_ceil(2)],
            len: n_f32 * 4,
        };
        for (i, c) in b.bytes_mut().chunks_exact_mut(4).enumerate() {
            let x = ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32;
            c.copy_from_slice(&(x / 16_777_216.0 - 0.5).to_ne_bytes());
        }
        b
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: the u64s hold `len` initialized bytes; u8 needs no alignment.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; any bytes are valid u64s.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast::<u8>(), self.len) }
    }
    fn f32s(&self) -> *const f32 {
        self.words.as_ptr().cast()
    }
    fn f32s_mut(&mut self) -> *mut f32 {
        self.words.as_mut_ptr().cast()
    }
    fn f32s_len(&self) -> usize {
        self.len / 4
    }
}

fn view<'a>(b: &'a Buf, shape: &'a [usize]) -> View<'a> {
    View {
        data: b.bytes(),
        dtype: DType::F32,
        shape,
    }
}

fn view_mut<'a>(b: &'a mut Buf, shape: &'a [usize]) -> ViewMut<'a> {
    ViewMut {
        data: b.bytes_mut(),
        dtype: DType::F32,
        shape,
    }
}

type Sgemm = unsafe extern "C" fn(
    i32,
    i32,
    i32,
    i32,
    i32,
    i32,
    f32,
    *const f32,
    i32,
    *const f32,
    i32,
    f32,
    *mut f32,
    i32,
);

struct OpenBlas {
    _lib: libloading::Library,
    sgemm: Sgemm,
    set_threads: Option<unsafe extern "C" fn(i32)>,
    core: Option<String>,
}

impl OpenBlas {
    /// `c = a x b` for row-major f32 matrices `a` (m x k), `b` (k x n), `c` (m x n); seconds.
    fn time_sgemm(&self, (m, k, n): (usize, usize, usize), a: &Buf, b: &Buf, c: &mut Buf) -> f64 {
        assert!(a.f32s_len() >= m * k && b.f32s_len() >= k * n && c.f32s_len() >= m * n);
        let (ap, bp, cp) = (a.f32s(), b.f32s(), c.f32s_mut());
        let t = Instant::now();
        // SAFETY: row-major (101), no transposes (111); the matrices have the sizes asserted
        // above, each with its row length as leading dimension, and are alive for the call.
        unsafe {
            (self.sgemm)(
                101, 111, 111, m as i32, n as i32, k as i32, 1.0, ap, k as i32, bp, n as i32, 0.0,
                cp, n as i32,
            )
        };
        black_box(cp);
        t.elapsed().as_secs_f64()
    }
}

fn open_blas() -> Option<OpenBlas> {
    // SAFETY: loading OpenBLAS runs its initializers, which only set up its thread pool.
    let lib = unsafe { libloading::Library::new("libopenblas.so.0") }.ok()?;
    // SAFETY: the symbols have these C signatures in every OpenBLAS release; the function
    // pointers are used only while `lib` (kept in the struct) is loaded.
    unsafe {
        let sgemm = *lib.get::<Sgemm>(b"cblas_sgemm\0").ok()?;
        let set_threads = lib
            .get::<unsafe extern "C" fn(i32)>(b"openblas_set_num_threads\0")
            .ok()
            .map(|s| *s);
        let core = lib
            .get::<unsafe extern "C" fn() -> *const std::ffi::c_char>(b"openblas_get_corename\0")
            .ok()
            .map(|f| f())
            .filter(|p| !p.is_null())
            .map(|p| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned());
        Some(OpenBlas {
            _lib: lib,
            sgemm,
            set_threads,
            core,
        })
    }
}

fn main() {
    let one = CpuContext::SINGLE;
    let all = CpuContext::all_threads();
    println!("threads available: {}", all.threads);

    // --- Add of 1 M f32 vs memcpy --------------------------------------------------------
    const N: usize = 1 << 20;
    let shape = [N];
    let a = Buf::new(N, 1);
    let b = Buf::new(N, 2);
    let mut c = Buf::new(N, 3);
    // memcpy moving the same 12 MB: 6 MB read + 6 MB written.
    let src = Buf::new(N * 3 / 2, 4);
    let mut dst = Buf::new(N * 3 / 2, 5);
    let reps = 200;
    let t_copy = time(reps, || {
        dst.bytes_mut().copy_from_slice(black_box(src.bytes()));
        black_box(dst.bytes());
    });
    let mut add = |ctx: &CpuContext| {
        time(reps, || {
            binary(
                ctx,
                BinaryOp::Add,
                view(&a, &shape),
                view(&b, &shape),
                view_mut(&mut c, &shape),
            )
            .expect("add");
            black_box(c.bytes());
        })
    };
    let t_add1 = add(&one);
    let t_add_all = add(&all);
    let moved = (3 * N * 4) as f64;
    let gbs = |t: f64| moved / t / 1e9;
    println!();
    println!("Add, 1 M f32 (12 MB moved)      GB/s    ratio to memcpy (goal >= 0.8x)");
    println!("  memcpy of 6 MB (baseline)  {:8.2}", gbs(t_copy));
    println!(
        "  add, 1 thread              {:8.2}    {:.2}x",
        gbs(t_add1),
        t_copy / t_add1
    );
    println!(
        "  add, {} threads             {:8.2}    {:.2}x",
        all.threads,
        gbs(t_add_all),
        t_copy / t_add_all
    );

    // --- MatMul 1024^3 f32 vs OpenBLAS ----------------------------------------------------
    const M: usize = 1024;
    let ms = [M, M];
    let ma = Buf::new(M * M, 6);
    let mb = Buf::new(M * M, 7);
    let mut mc = Buf::new(M * M, 8);
    let flop = 2.0 * (M * M * M) as f64;
    let reps = 7;
    let blas = open_blas();
    // Ours and OpenBLAS alternate, and each keeps its best time, so that load from other
    // processes during the run hits both alike.
    let mut pair = |ctx: &CpuContext| -> (f64, Option<f64>) {
        if let Some(set) = blas.as_ref().and_then(|b| b.set_threads) {
            // SAFETY: a plain setter; OpenBLAS is loaded.
            unsafe { set(ctx.threads as i32) };
        }
        let (mut best, mut best_blas) = (f64::MAX, f64::MAX);
        for rep in 0..=reps {
            let t = Instant::now();
            matmul(
                ctx,
                view(&ma, &ms),
                view(&mb, &ms),
                false,
                false,
                view_mut(&mut mc, &ms),
            )
            .expect("matmul");
            black_box(mc.bytes());
            if rep > 0 {
                best = best.min(t.elapsed().as_secs_f64());
            }
            if let Some(blas) = &blas {
                let t = blas.time_sgemm((M, M, M), &ma, &mb, &mut mc);
                if rep > 0 {
                    best_blas = best_blas.min(t);
                }
            }
        }
        (best, blas.as_ref().map(|_| best_blas))
    };
    let (t_mm1, blas1) = pair(&one);
    let (t_mm_all, blas_all) = pair(&all);
    let gf = |t: f64| flop / t / 1e9;
    println!();
    match &blas {
        Some(b) => println!(
            "MatMul 1024^3 f32 (best of {reps})   GFLOP/s  ratio to OpenBLAS sgemm (goal >= 0.9x); \
             OpenBLAS core: {}{}",
            b.core.as_deref().unwrap_or("unknown"),
            std::env::var("OPENBLAS_CORETYPE")
                .map(|v| format!(" (OPENBLAS_CORETYPE={v})"))
                .unwrap_or_default()
        ),
        None => println!("MatMul 1024^3 f32 (best of {reps})   GFLOP/s"),
    }
    if blas.is_some() && std::env::var_os("OPENBLAS_CORETYPE").is_some() {
        println!(
            "  note: OPENBLAS_CORETYPE forces OpenBLAS's kernels (Haswell keeps it off AVX-512); \
             run with `env -u OPENBLAS_CORETYPE` to compare with its best"
        );
    }
    for (label, t, tb) in [
        ("1 thread ", t_mm1, blas1),
        ("all threads", t_mm_all, blas_all),
    ] {
        match tb {
            Some(tb) => {
                println!("  OpenBLAS, {label:<12}      {:8.1}", gf(tb));
                println!("  devplug,  {label:<12}      {:8.1}  {:.2}x", gf(t), tb / t);
            }
            None => println!("  devplug,  {label:<12}      {:8.1}", gf(t)),
        }
    }
    if blas.is_none() {
        println!("  OpenBLAS not installed: install libopenblas0 to compare");
    }

    // --- MatMul of the MLP's shapes, 1 thread ---------------------------------------------
    // Small products, where gemm's set-up and packing decide (see matmul.rs `product`).
    if let Some(set) = blas.as_ref().and_then(|b| b.set_threads) {
        // SAFETY: a plain setter; OpenBLAS is loaded.
        unsafe { set(1) };
    }
    println!();
    println!("MatMul of the MLP's shapes, 1 thread (median of 301)   GFLOP/s  ratio to OpenBLAS");
    for (m, k, n) in [(64usize, 256usize, 512usize), (64, 512, 10)] {
        let (sa, sb, so) = ([m, k], [k, n], [m, n]);
        let (a, b, mut c) = (
            Buf::new(m * k, 12),
            Buf::new(k * n, 13),
            Buf::new(m * n, 14),
        );
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for rep in 0..=300 {
            let t = Instant::now();
            matmul(
                &one,
                view(&a, &sa),
                view(&b, &sb),
                false,
                false,
                view_mut(&mut c, &so),
            )
            .expect("matmul");
            black_box(c.bytes());
            ours.push(t.elapsed().as_secs_f64());
            if let Some(blas) = &blas {
                theirs.push(blas.time_sgemm((m, k, n), &a, &b, &mut c));
            }
            if rep == 0 {
                ours.clear();
                theirs.clear();
            }
        }
        let f = 2.0 * (m * k * n) as f64;
        let (t, tb) = (median(ours), (!theirs.is_empty()).then(|| median(theirs)));
        match tb {
            Some(tb) => println!(
                "  [{m}, {k}] x [{k}, {n}]  {:8.1} us {:8.1}   OpenBLAS {:8.1} us {:8.1}   {:.2}x",
                t * 1e6,
                f / t / 1e9,
                tb * 1e6,
                f / tb / 1e9,
                tb / t
            ),
            None => println!(
                "  [{m}, {k}] x [{k}, {n}]  {:8.1} us {:8.1}",
                t * 1e6,
                f / t / 1e9
            ),
        }
    }

    // --- Add of 16 f32: per-call cost ------------------------------------------------------
    let s16 = [16usize];
    let a16 = Buf::new(16, 9);
    let b16 = Buf::new(16, 10);
    let mut c16 = Buf::new(16, 11);
    let calls = 1_000_000;
    let t16 = time(7, || {
        for _ in 0..calls {
            binary(
                &one,
                BinaryOp::Add,
                black_box(view(&a16, &s16)),
                black_box(view(&b16, &s16)),
                view_mut(&mut c16, &s16),
            )
            .expect("add16");
            black_box(c16.bytes());
        }
    });
    let t_call = time(7, || {
        for _ in 0..calls {
            black_box(noop(black_box(&a16), black_box(&b16)));
        }
    });
    println!();
    println!("Add of 16 f32 through binary()  ns/call (NumPy ~290 incl. Python)");
    println!(
        "  binary                     {:8.1}",
        t16 / calls as f64 * 1e9
    );
    println!(
        "  empty call (baseline)      {:8.1}",
        t_call / calls as f64 * 1e9
    );

    // --- For orientation ----------------------------------------------------------------------
    let mut s1 = Buf::new(1, 0);
    let t_sum = time(50, || {
        reduce(
            &one,
            ReduceOp::Sum,
            view(&a, &shape),
            &[0],
            view_mut(&mut s1, &[]),
        )
        .expect("sum");
    });
    let t_exp = time(20, || {
        unary(
            &one,
            UnaryOp::Exp,
            view(&a, &shape),
            view_mut(&mut c, &shape),
        )
        .expect("exp");
    });
    let t_tr = time(20, || {
        transpose(
            &one,
            view(&a, &[1024, 1024]),
            &[1, 0],
            view_mut(&mut c, &[1024, 1024]),
        )
        .expect("transpose");
    });
    // The same at a size whose rows are not 4 KiB apart (1040 = 65 x 16), in cache, beyond L2
    // (2048², 16 MB); f64 too.
    let transpose_time = |side: usize, dtype: DType| {
        let words = side * side * dtype.size() / 4;
        let src = Buf::new(words, 5);
        let mut dst = Buf::new(words, 0);
        let sq = [side, side];
        let t = time(20, || {
            let a = View {
                data: src.bytes(),
                dtype,
                shape: &sq,
            };
            let out = ViewMut {
                data: dst.bytes_mut(),
                dtype,
                shape: &sq,
            };
            transpose(&one, a, &[1, 0], out).expect("transpose");
        });
        let t_copy = time(20, || {
            dst.bytes_mut().copy_from_slice(black_box(src.bytes()));
            black_box(dst.bytes());
        });
        (side, dtype, (words * 4) as f64 / t / 1e9, t_copy / t)
    };
    let transposes = [
        transpose_time(1040, DType::F32),
        transpose_time(256, DType::F32),
        transpose_time(1040, DType::F64),
        transpose_time(2048, DType::F32),
    ];
    let t_copy4 = time(50, || {
        c.bytes_mut().copy_from_slice(black_box(a.bytes()));
        black_box(c.bytes());
    });
    println!();
    println!("Other, 1 thread                 GB/s read   ratio to memcpy of 4 MB");
    println!(
        "  memcpy of 4 MB             {:8.2}",
        N as f64 * 4.0 / t_copy4 / 1e9
    );
    println!(
        "  sum of 1 M f32             {:8.2}    {:.2}x",
        N as f64 * 4.0 / t_sum / 1e9,
        t_copy4 / t_sum
    );
    println!(
        "  transpose 1024^2 f32       {:8.2}    {:.2}x",
        N as f64 * 4.0 / t_tr / 1e9,
        t_copy4 / t_tr
    );
    for (side, dtype, gbs, ratio) in transposes {
        let what = format!("transpose {side}^2 {}", dtype.name());
        println!("  {what:<26} {gbs:8.2}    {ratio:.2}x (memcpy of its bytes)");
    }
    println!(
        "  exp of 1 M f32             {:8.2}    {:.2}x   ({:.2} ns/element)",
        N as f64 * 4.0 / t_exp / 1e9,
        t_copy4 / t_exp,
        t_exp / N as f64 * 1e9
    );
    in_cache_math();
    halves();
}

/// `b`'s f32 values rounded to `dtype` (f16 or bf16), as 2-byte-aligned bytes.
fn to_half(b: &Buf, dtype: DType) -> Vec<u16> {
    // SAFETY: `b` holds `f32s_len()` initialized f32s, aligned (a u64 vector).
    let v = unsafe { std::slice::from_raw_parts(b.f32s(), b.f32s_len()) };
    v.iter()
        .map(|&x| match dtype {
            DType::BF16 => devplug_core::half::bf16::from_f32(x).to_bits(),
            _ => devplug_core::half::f16::from_f32(x).to_bits(),
        })
        .collect()
}

fn u16_bytes(v: &[u16]) -> &[u8] {
    // SAFETY: u16s have no padding; the bytes are initialized.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 2) }
}

fn u16_bytes_mut(v: &mut [u16]) -> &mut [u8] {
    // SAFETY: as above; any bytes are a valid u16.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), v.len() * 2) }
}

/// f16 and bf16 next to f32 in the same run, one thread: the half kernels widen their inputs
/// to f32, run the f32 kernel and round the result, so they move more bytes than they store.
fn halves() {
    let one = CpuContext::SINGLE;
    const N: usize = 1 << 20;
    let shape = [N];
    let (a, b, mut c) = (Buf::new(N, 1), Buf::new(N, 2), Buf::new(N, 3));
    let t_f32 = time(100, || {
        binary(
            &one,
            BinaryOp::Add,
            view(&a, &shape),
            view(&b, &shape),
            view_mut(&mut c, &shape),
        )
        .expect("add");
        black_box(c.bytes());
    });
    // memcpy moving the bytes of a half Add: 2 MB read + 2 MB read + 2 MB written.
    let (src, mut dst) = (vec![1u16; N * 3 / 2], vec![0u16; N * 3 / 2]);
    let t_copy = time(100, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&dst);
    });
    const M: usize = 1024;
    let ms = [M, M];
    let (ma, mb, mut mc) = (Buf::new(M * M, 6), Buf::new(M * M, 7), Buf::new(M * M, 8));
    let t_mm32 = time(3, || {
        matmul(
            &one,
            view(&ma, &ms),
            view(&mb, &ms),
            false,
            false,
            view_mut(&mut mc, &ms),
        )
        .expect("matmul");
        black_box(mc.bytes());
    });
    let flop = 2.0 * (M * M * M) as f64;
    println!();
    println!("f16 and bf16 (computed in f32), 1 thread");
    println!(
        "  Add of 1 M f32 (baseline)  {:8.3} ms;  MatMul 1024^3 f32 {:7.1} GFLOP/s",
        t_f32 * 1e3,
        flop / t_mm32 / 1e9
    );
    for dtype in [DType::F16, DType::BF16] {
        let (ha, hb) = (to_half(&a, dtype), to_half(&b, dtype));
        let mut hc = vec![0u16; N];
        let t_add = time(100, || {
            binary(
                &one,
                BinaryOp::Add,
                View {
                    data: u16_bytes(&ha),
                    dtype,
                    shape: &shape,
                },
                View {
                    data: u16_bytes(&hb),
                    dtype,
                    shape: &shape,
                },
                ViewMut {
                    data: u16_bytes_mut(&mut hc),
                    dtype,
                    shape: &shape,
                },
            )
            .expect("half add");
            black_box(&hc);
        });
        let (xa, xb) = (to_half(&ma, dtype), to_half(&mb, dtype));
        let mut xc = vec![0u16; M * M];
        let t_mm = time(3, || {
            matmul(
                &one,
                View {
                    data: u16_bytes(&xa),
                    dtype,
                    shape: &ms,
                },
                View {
                    data: u16_bytes(&xb),
                    dtype,
                    shape: &ms,
                },
                false,
                false,
                ViewMut {
                    data: u16_bytes_mut(&mut xc),
                    dtype,
                    shape: &ms,
                },
            )
            .expect("half matmul");
            black_box(&xc);
        });
        println!(
            "  Add of 1 M {:<4}            {:8.3} ms  {:.2}x memcpy of its 6 MB, {:.2}x the f32 Add's time",
            dtype.name(),
            t_add * 1e3,
            t_copy / t_add,
            t_add / t_f32
        );
        println!(
            "  MatMul 1024^3 {:<4}       {:7.1} GFLOP/s  {:.2}x the f32 MatMul",
            dtype.name(),
            flop / t_mm / 1e9,
            t_mm32 / t_mm
        );
    }
}

/// Exp, Tanh and Sigmoid of 16 K f32 (64 KB each way, in cache: bound by the arithmetic) vs a
/// loop over the standard library's scalar functions (libm), one thread.
fn in_cache_math() {
    const M: usize = 1 << 14;
    let a = Buf::new(M, 7);
    let mut out = Buf::new(M, 8);
    let mut plain = vec![0f32; M];
    // SAFETY: `a` holds M initialized f32s, aligned (a u64 vector).
    let xs = unsafe { std::slice::from_raw_parts(a.f32s(), M) };
    let shape = [M];
    println!();
    println!(
        "Math of 16 K f32 in cache, 1 thread   ns/element   libm loop   ratio (DEVPLUG_CPU_ISA caps the vectors)"
    );
    type Scalar = fn(f32) -> f32;
    let cases: [(&str, UnaryOp, Scalar); 3] = [
        ("exp", UnaryOp::Exp, f32::exp),
        ("tanh", UnaryOp::Tanh, f32::tanh),
        ("sigmoid", UnaryOp::Sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
    ];
    for (name, op, f) in cases {
        let ours = time(200, || {
            unary(
                &CpuContext::SINGLE,
                op,
                view(&a, &shape),
                view_mut(&mut out, &shape),
            )
            .expect("unary");
            black_box(out.bytes());
        });
        let libm = time(200, || {
            for (o, &x) in plain.iter_mut().zip(black_box(xs)) {
                *o = f(x);
            }
            black_box(&plain);
        });
        println!(
            "  {name:<8}                          {:8.3}    {:8.3}    {:.2}x",
            ours / M as f64 * 1e9,
            libm / M as f64 * 1e9,
            libm / ours
        );
    }
}

#[inline(never)]
fn noop(a: &Buf, b: &Buf) -> usize {
    a.len ^ b.len
}
