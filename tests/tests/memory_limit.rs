//! `Device::set_memory_limit`: a memory limit for any device (a plugin's too), set by the host at
//! any time — over the caching suballocator and over a platform that opted out of it (SIM's
//! `no_suballocator=1`), on the CPU device whose initial limit is `cpu_memory_limit`, and while
//! other threads allocate.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use devplug_core::{Code, Runtime, RuntimeOptions};
use devplug_tests::{plugin_path, runtime};

const MIB: u64 = 1 << 20;
/// SIM's device memory in these tests (`memory=16M`).
const SIM_MEMORY: u64 = 16 * MIB;

fn sim_runtime(no_suballocator: &str) -> Runtime {
    sim_runtime_with(no_suballocator, "16M")
}

fn sim_runtime_with(no_suballocator: &str, memory: &str) -> Runtime {
    let rt = runtime();
    rt.load_plugin(
        plugin_path("devplug_sim"),
        &[("memory", memory), ("no_suballocator", no_suballocator)],
    )
    .unwrap();
    rt
}

#[test]
fn a_plugin_device_gets_a_limit_at_any_time() {
    for no_sub in ["0", "1"] {
        let rt = sim_runtime(no_sub);
        let sim = rt.find_device("SIM:0").unwrap();
        assert_eq!(
            sim.memory_limit(),
            None,
            "{no_sub}: plugin devices start without one"
        );
        assert_eq!(sim.properties().total_memory, SIM_MEMORY);
        let a = sim.allocate(MIB).unwrap();

        // Set: everything that reports it follows.
        sim.set_memory_limit(Some(2 * MIB)).unwrap();
        assert_eq!(sim.memory_limit(), Some(2 * MIB));
        assert_eq!(sim.memory_stats().bytes_limit, Some(2 * MIB));
        assert_eq!(sim.properties().total_memory, 2 * MIB);
        let u = sim.memory_usage().unwrap();
        assert_eq!(u.total, 2 * MIB, "{no_sub}: {u:?}");
        assert_eq!(u.free, MIB, "{no_sub}: {u:?}");
        // Exceeded: RESOURCE_EXHAUSTED naming the device and the limit.
        let e = sim.allocate(MIB + MIB / 2).unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted, "{no_sub}: {e}");
        assert!(e.message.contains("SIM:0"), "{no_sub}: {e}");
        assert!(e.message.contains("limit 2097152"), "{no_sub}: {e}");
        // SIM:1 does not exist here, but the CPU device is not affected.
        assert_eq!(rt.find_device("CPU:0").unwrap().memory_limit(), None);

        // Raised: it fits. Removed: the platform's memory is the bound again.
        sim.set_memory_limit(Some(4 * MIB)).unwrap();
        let b = sim.allocate(MIB + MIB / 2).unwrap();
        sim.set_memory_limit(None).unwrap();
        assert_eq!(sim.memory_limit(), None);
        assert_eq!(sim.memory_stats().bytes_limit, None);
        assert_eq!(sim.properties().total_memory, SIM_MEMORY);
        assert_eq!(sim.memory_usage().unwrap().total, SIM_MEMORY);
        let c = sim.allocate(8 * MIB).unwrap();

        // 0 is no limit in C only: here it is refused, and nothing changes.
        let e = sim.set_memory_limit(Some(0)).unwrap_err();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(e.message.contains("None"), "{e}");
        assert_eq!(sim.memory_limit(), None);

        // Lowered below what is in use: allowed, nothing in use is touched, the next
        // allocation fails until enough is freed.
        sim.set_memory_limit(Some(MIB)).unwrap();
        let in_use = sim.memory_stats().bytes_in_use;
        assert!(in_use >= 10 * MIB + MIB / 2, "{no_sub}: {in_use}");
        let e = sim.allocate(256 << 10).unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted, "{no_sub}: {e}");
        assert!(e.message.contains("limit 1048576"), "{no_sub}: {e}");
        let u = sim.memory_usage().unwrap();
        assert_eq!((u.free, u.total), (0, MIB), "{no_sub}");
        b.write(0, &[9u8; 64]).unwrap();
        let mut back = [0u8; 64];
        b.read(0, &mut back).unwrap();
        assert_eq!(back, [9u8; 64], "{no_sub}: memory in use is untouched");
        drop((b, c));
        // Still over (a holds 1 MiB): a request beside it does not fit.
        assert!(sim.allocate(256 << 10).is_err(), "{no_sub}");
        drop(a);
        let d = sim.allocate(256 << 10).unwrap();
        // What the host holds from SIM came down to the limit (SIM sees it too).
        let st = sim.memory_stats();
        assert!(st.bytes_reserved <= MIB, "{no_sub}: {st:?}");
        let u = sim.memory_usage().unwrap();
        assert!(u.free <= MIB - (256 << 10), "{no_sub}: {u:?}");
        drop(d);
        sim.set_memory_limit(None).unwrap();
        sim.release_cached_memory();
        assert_eq!(sim.memory_usage().unwrap().free, SIM_MEMORY, "{no_sub}");
    }
}

/// Lowered below what the suballocator holds cached (nothing in use), the cache goes back to
/// the platform at once, as far as needed.
#[test]
fn a_lowered_limit_gives_cached_memory_back() {
    let rt = sim_runtime("0");
    let sim = rt.find_device("SIM:0").unwrap();
    let bufs: Vec<_> = (0..4).map(|_| sim.allocate(MIB).unwrap()).collect();
    drop(bufs);
    let held = sim.memory_stats().bytes_reserved;
    assert!(held >= 4 * MIB, "{held}");
    // SIM's own free memory says what the host holds from it.
    assert_eq!(sim.executor().memory_usage().unwrap().0, SIM_MEMORY - held);
    sim.set_memory_limit(Some(2 * MIB)).unwrap();
    let held = sim.memory_stats().bytes_reserved;
    assert!(held <= 2 * MIB, "{held}");
    assert_eq!(sim.executor().memory_usage().unwrap().0, SIM_MEMORY - held);
    sim.allocate(2 * MIB).unwrap();
}

#[test]
fn the_cpu_memory_limit_is_the_initial_value() {
    let rt = Runtime::new(RuntimeOptions {
        cpu_device_count: 2,
        cpu_memory_limit: Some(MIB),
        discover_from_env: false,
        ..Default::default()
    })
    .unwrap();
    let cpu = rt.find_device("CPU:0").unwrap();
    let cpu1 = rt.find_device("CPU:1").unwrap();
    assert_eq!(cpu.memory_limit(), Some(MIB));
    assert_eq!(cpu.properties().total_memory, MIB);
    let e = cpu.allocate(2 * MIB).unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted);
    assert!(
        e.message.contains("CPU:0") && e.message.contains("limit 1048576"),
        "{e}"
    );

    cpu.set_memory_limit(Some(4 * MIB)).unwrap();
    let a = cpu.allocate(2 * MIB).unwrap();
    assert_eq!(cpu.memory_stats().bytes_limit, Some(4 * MIB));
    assert_eq!(cpu.memory_usage().unwrap().total, 4 * MIB);
    // Per device: CPU:1 keeps the option's value.
    assert_eq!(cpu1.memory_limit(), Some(MIB));
    assert!(cpu1.allocate(2 * MIB).is_err());

    // Small buffers kept by the buffer pool are held memory: they do not keep a lowered limit
    // from being met (core's device tests check that the pool is flushed at once).
    let small: Vec<_> = (0..8)
        .map(|_| devplug_core::Tensor::zeros(&cpu, devplug_core::DType::U8, &[1024]).unwrap())
        .collect();
    drop(small);
    cpu.set_memory_limit(Some(MIB)).unwrap();
    assert!(cpu.allocate(MIB / 4).is_err(), "2 MiB still in use");
    drop(a);
    let b = cpu.allocate(MIB / 2).unwrap();
    assert!(cpu.memory_stats().bytes_reserved <= MIB);
    drop(b);

    cpu.set_memory_limit(None).unwrap();
    assert_eq!(cpu.memory_limit(), None);
    cpu.allocate(16 * MIB).unwrap();
}

/// Allocations on other threads while the limit changes: no deadlock, only successes or
/// RESOURCE_EXHAUSTED, and everything adds up once they are done.
#[test]
fn allocations_on_other_threads_while_the_limit_changes() {
    // Room for whatever the threads hold with no limit: only the limit refuses requests.
    const MEMORY: u64 = 64 * MIB;
    for no_sub in ["0", "1"] {
        let rt = sim_runtime_with(no_sub, "64M");
        let sim = rt.find_device("SIM:0").unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let sim = &sim;
                let done = done_tx.clone();
                s.spawn(move || {
                    let mut held = Vec::new();
                    let mut x = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t + 1);
                    let (mut ok, mut refused) = (0u32, 0u32);
                    for i in 0..3000u64 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let size = 4096 + x % (512 << 10);
                        match sim.allocate(size) {
                            Ok(b) => {
                                assert_eq!(b.size(), size);
                                held.push(b);
                                ok += 1;
                            }
                            Err(e) => {
                                assert_eq!(e.code, Code::ResourceExhausted, "{e}");
                                assert!(e.message.contains("limit exceeded"), "{e}");
                                refused += 1;
                            }
                        }
                        if held.len() > 6 || (i % 5 == 0 && !held.is_empty()) {
                            held.swap_remove((x % held.len() as u64) as usize);
                        }
                    }
                    let _ = done.send((ok, refused));
                });
            }
            drop(done_tx);
            // The limit changes under them until both are done.
            let limits = [
                Some(MIB),
                Some(4 * MIB),
                None,
                Some(2 * MIB),
                Some(512 << 10),
            ];
            let mut finished = Vec::new();
            let mut i = 0;
            let start = Instant::now();
            while finished.len() < 2 {
                sim.set_memory_limit(limits[i % limits.len()]).unwrap();
                assert_eq!(sim.memory_limit(), limits[i % limits.len()]);
                i += 1;
                match done_rx.try_recv() {
                    Ok(r) => finished.push(r),
                    Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
                    Err(mpsc::TryRecvError::Disconnected) => break,
                }
                assert!(
                    start.elapsed() < Duration::from_secs(120),
                    "{no_sub}: the threads did not finish (deadlock?)"
                );
            }
            assert_eq!(finished.len(), 2, "{no_sub}: a thread panicked");
            let (ok, refused) = finished
                .iter()
                .fold((0, 0), |(o, r), &(a, b)| (o + a, r + b));
            assert!(ok > 0, "{no_sub}: nothing allocated ({refused} refused)");
        });
        // Everything was freed: nothing in use, and under a limit again what is held obeys it.
        let st = sim.memory_stats();
        assert_eq!(
            (st.bytes_in_use, st.active_allocs),
            (0, 0),
            "{no_sub}: {st:?}"
        );
        sim.set_memory_limit(Some(MIB)).unwrap();
        assert!(sim.memory_stats().bytes_reserved <= MIB, "{no_sub}");
        let a = sim.allocate(MIB / 2).unwrap();
        assert!(sim.allocate(MIB).is_err(), "{no_sub}");
        drop(a);
        sim.set_memory_limit(None).unwrap();
        sim.release_cached_memory();
        assert_eq!(
            sim.memory_usage().unwrap().free,
            MEMORY,
            "{no_sub}: SIM got all its memory back"
        );
    }
}

/// An op whose output does not fit under a device's limit fails with RESOURCE_EXHAUSTED naming
/// the op and the output (as its other errors do), and the device works again once the limit
/// is raised.
#[test]
fn an_op_whose_output_does_not_fit_names_the_op_and_output() {
    use devplug_core::{Attrs, DType, RunOptions, Tensor};
    let rt = sim_runtime("0");
    let sim = rt.find_device("SIM:0").unwrap();
    let x = Tensor::zeros(&sim, DType::F32, &[1024, 1024]).unwrap();
    // No room beside x for another 4 MiB.
    let stats = sim.memory_stats();
    sim.set_memory_limit(Some(stats.bytes_in_use + MIB))
        .unwrap();
    let add = rt.op("Add").unwrap();
    let on_sim = RunOptions::on(&sim).strict();
    let e = rt
        .run(&add, &[x.clone(), x.clone()], &Attrs::new(), &on_sim)
        .unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
    assert!(e.message.starts_with("Add: output 'z': "), "{e}");
    assert!(
        e.message.contains("SIM:0") && e.message.contains("limit"),
        "{e}"
    );
    sim.set_memory_limit(None).unwrap();
    rt.run(&add, &[x.clone(), x], &Attrs::new(), &on_sim)
        .unwrap();
}
