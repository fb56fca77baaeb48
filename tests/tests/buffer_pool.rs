//! The buffer pool: a small buffer a tensor lets go of is kept whole for the next allocation
//! of its size class — but never while anything else references it, never hiding memory from
//! the statistics or the memory limit, and never keeping a device alive past its runtime.

use std::sync::Arc;

use devplug_core::{DType, Runtime, RuntimeOptions, Tensor};
use devplug_tests::plugin_path;

fn runtime(limit: Option<u64>) -> Runtime {
    Runtime::new(RuntimeOptions {
        cpu_memory_limit: limit,
        ..devplug_tests::options()
    })
    .unwrap()
}

fn addr(t: &Tensor) -> u64 {
    t.buffer().ptr().0
}

#[test]
fn a_dropped_small_tensor_is_reused_for_the_same_size_class() {
    let rt = runtime(None);
    let cpu = rt.find_device("CPU").unwrap();
    let a = Tensor::from_slice(&cpu, &[16], &[1f32; 16]).unwrap();
    let p = addr(&a);
    drop(a);
    // 64 bytes then; 200 bytes now: the same 256-byte class, with the size updated.
    // SAFETY: never read (only its address and size are).
    let b = unsafe { Tensor::uninit(&cpu, DType::F32, &[50]) }.unwrap();
    assert_eq!(addr(&b), p, "the pooled buffer was not reused");
    assert_eq!(b.buffer().size(), 200);
    // The reused buffer is a working one of the new size.
    let c = Tensor::from_slice(&cpu, &[50], &[3f32; 50]).unwrap();
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![3f32; 50]);
}

#[test]
fn a_shared_buffer_is_not_pooled_while_anything_else_holds_it() {
    let rt = runtime(None);
    let cpu = rt.find_device("CPU").unwrap();
    let a = Tensor::from_slice(&cpu, &[4], &[1f32, 2., 3., 4.]).unwrap();
    let p = addr(&a);
    // Another tensor, and a bare buffer reference, share the memory.
    let view = a.clone();
    let held = a.buffer().clone();
    drop(a);
    let b = Tensor::zeros(&cpu, DType::F32, &[4]).unwrap();
    assert_ne!(addr(&b), p, "a buffer still in use was handed out again");
    drop(view);
    let c = Tensor::zeros(&cpu, DType::F32, &[4]).unwrap();
    assert_ne!(addr(&c), p, "a buffer still in use was handed out again");
    let mut back = [0u8; 16];
    held.read(0, &mut back).unwrap();
    let back: Vec<f32> = back
        .chunks(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(back, [1., 2., 3., 4.], "the shared memory was overwritten");
}

#[test]
fn pooled_buffers_do_not_show_in_the_statistics() {
    let rt = runtime(None);
    let cpu = rt.find_device("CPU").unwrap();
    let before = cpu.memory_stats();
    let ts: Vec<Tensor> = (0..20)
        .map(|_| Tensor::zeros(&cpu, DType::F32, &[16]).unwrap())
        .collect();
    assert_eq!(
        cpu.memory_stats().bytes_in_use,
        before.bytes_in_use + 20 * 256
    );
    drop(ts);
    let after = cpu.memory_stats();
    assert_eq!(after.bytes_in_use, before.bytes_in_use);
    assert_eq!(after.active_allocs, before.active_allocs);
}

#[test]
fn pooled_memory_is_given_back_before_an_allocation_fails() {
    // A 1 MiB limit: fill most of it with small tensors, let them all go (into the pool, as
    // far as it takes them), then ask for the whole limit, which only fits if the pool lets go.
    let rt = runtime(Some(1 << 20));
    let cpu = rt.find_device("CPU").unwrap();
    // SAFETY (both): allocations only, never read.
    let small: Vec<Tensor> = (0..3000)
        .map(|_| unsafe { Tensor::uninit(&cpu, DType::U8, &[256]) }.unwrap())
        .collect();
    drop(small);
    let big = unsafe { Tensor::uninit(&cpu, DType::U8, &[1 << 20]) };
    assert!(big.is_ok(), "{:?}", big.err());
}

#[test]
fn a_runtime_with_pooled_buffers_still_lets_its_devices_go() {
    let rt = runtime(None);
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let cpu = rt.find_device("CPU").unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    for d in [&cpu, &sim] {
        let t = Tensor::zeros(d, DType::F32, &[8]).unwrap();
        drop(t); // pooled: the buffer holds its device
    }
    let (wc, ws) = (Arc::downgrade(&cpu), Arc::downgrade(&sim));
    // A tensor that outlives the runtime keeps only its own device.
    let late = Tensor::zeros(&cpu, DType::F32, &[8]).unwrap();
    drop((cpu, sim));
    drop(rt);
    assert!(ws.upgrade().is_none(), "SIM:0 outlived its runtime");
    assert!(wc.upgrade().is_some(), "a live tensor's device was dropped");
    drop(late);
    assert!(wc.upgrade().is_none(), "CPU:0 outlived its last tensor");
}

#[test]
fn threads_sharing_a_device_and_its_pool_lose_nothing() {
    // Four threads run eager Adds and drop their outputs (and sometimes keep one a while, or
    // share it with a clone) while a fifth reads the statistics and releases cached memory,
    // which flushes the pool under their feet. Every result is checked, and at the end the
    // device holds exactly what it held before.
    let rt = runtime(None);
    let cpu = rt.find_device("CPU").unwrap();
    let add = rt.op("Add").unwrap();
    let before = cpu.memory_stats().bytes_in_use;
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let st = cpu.memory_stats();
                assert!(st.bytes_in_use <= st.bytes_reserved, "{st:?}");
                cpu.release_cached_memory();
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let (rt, cpu, add) = (&rt, &cpu, &add);
                s.spawn(move || {
                    let n = 1 + w * 7; // sizes of different pool classes per thread
                    let x = Tensor::from_slice(cpu, &[n as i64], &vec![w as f32; n]).unwrap();
                    let mut kept = Vec::new();
                    for i in 0..3000 {
                        let out = rt
                            .run(
                                add,
                                &[x.clone(), x.clone()],
                                &Default::default(),
                                &Default::default(),
                            )
                            .unwrap();
                        let y = out.into_iter().next().unwrap();
                        if i % 97 == 0 {
                            kept.push(y.clone()); // shared: must not be reused meanwhile
                        }
                        assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0 * w as f32; n]);
                        if kept.len() > 8 {
                            for k in kept.drain(..) {
                                assert_eq!(k.to_vec::<f32>().unwrap(), vec![2.0 * w as f32; n]);
                            }
                        }
                    }
                })
            })
            .collect();
        for h in workers {
            h.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(cpu.memory_stats().bytes_in_use, before);
}

#[test]
fn memory_a_sim_kernel_may_still_use_is_reused_only_in_stream_order() {
    // SIM's default stream is held behind a gate while Adds are queued and their inputs
    // dropped: the next kernel output may take that memory at once (the stream runs it after),
    // a raw allocation may not, and memory too large for the pool is freed only once the
    // stream got there. Every result is checked once the gate opens.
    let rt = runtime(None);
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let add = rt.op("Add").unwrap();
    let on_sim = devplug_core::RunOptions {
        device: Some(sim.clone()),
        ..Default::default()
    };
    let run = |inputs: &[Tensor]| {
        let out = rt.run(&add, inputs, &Default::default(), &on_sim).unwrap();
        out.into_iter().next().unwrap()
    };
    let a = Tensor::from_slice(&sim, &[16], &[1f32; 16]).unwrap();
    let b = Tensor::from_slice(&sim, &[16], &[2f32; 16]).unwrap();
    let big = Tensor::from_slice(&sim, &[1 << 20], &vec![1f32; 1 << 20]).unwrap();
    let (pa, pb) = (addr(&a), addr(&b));

    let open = devplug_tests::hold_stream(&sim.default_stream());
    let c = run(&[a, b]); // queued behind the gate; its inputs dropped at once

    // SAFETY: never read (only its address is).
    let raw = unsafe { Tensor::uninit(&sim, DType::F32, &[16]) }.unwrap();
    assert!(
        ![pa, pb].contains(&addr(&raw)),
        "a raw allocation got memory a queued kernel still reads"
    );
    let d = run(&[c.clone(), c.clone()]);
    assert!(
        [pa, pb].contains(&addr(&d)),
        "the next kernel output did not reuse the dropped inputs' memory"
    );
    let active = sim.memory_stats().active_allocs;
    let big2 = run(&[big.clone(), big]);
    assert_eq!(sim.memory_stats().active_allocs, active + 1);
    drop(big2); // both big buffers are dropped while the stream has not run their Add
    assert_eq!(
        sim.memory_stats().active_allocs,
        active + 1,
        "memory a queued kernel uses was freed"
    );

    open.send(()).unwrap();
    sim.synchronize().unwrap();
    // Freed now: both big buffers, and the dropped input `d` did not reuse (the statistics
    // flushed it from the pool, and it waited for the stream too).
    assert_eq!(sim.memory_stats().active_allocs, active - 2);
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![3f32; 16]);
    assert_eq!(d.to_vec::<f32>().unwrap(), vec![6f32; 16]);
    drop(raw);
}
