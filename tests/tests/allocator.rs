//! Which allocator a plugin device gets: the core's caching suballocator by default, the
//! platform's own when it sets `DPP_PLATFORM_NO_SUBALLOCATOR` (SIM's `no_suballocator=1`).

use devplug_core::{Code, Runtime, RuntimeOptions};
use devplug_tests::{plugin_path, runtime};

#[test]
fn a_platform_that_opts_out_gets_every_request_passed_through() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[("no_suballocator", "1")])
        .unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let a = sim.allocate(100).unwrap();
    let b = sim.allocate(3000).unwrap();
    let st = sim.memory_stats();
    // Exact sizes, nothing rounded by the host: no suballocator region. What the platform
    // holds (SIM rounds to 256 bytes) and its largest free block come from its own
    // allocator_stats (64 MiB of device memory, one free block after the two).
    assert_eq!(st.bytes_in_use, 3100);
    assert_eq!(st.bytes_reserved, 256 + 3072);
    assert_eq!(st.active_allocs, 2);
    assert_eq!(st.largest_free_block, (64 << 20) - 256 - 3072);
    // The memory works.
    a.write(0, &[7u8; 100]).unwrap();
    b.copy_from(0, &a, 0, 100).unwrap();
    let mut back = [0u8; 100];
    b.read(0, &mut back).unwrap();
    assert_eq!(back, [7u8; 100]);
    drop(a);
    let st = sim.memory_stats();
    assert_eq!((st.bytes_in_use, st.bytes_reserved), (3000, 3072));
    drop(b);
    let st = sim.memory_stats();
    assert_eq!(
        (st.bytes_in_use, st.bytes_reserved, st.peak_bytes_in_use),
        (0, 0, 3100)
    );
    assert_eq!(st.num_allocs, 2);
    // Given back at once: nothing cached to release.
    assert_eq!(sim.release_cached_memory(), 0);
}

#[test]
fn the_default_is_the_caching_suballocator() {
    let rt = runtime();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let a = sim.allocate(100).unwrap();
    let st = sim.memory_stats();
    // Rounded to the suballocator's 256 bytes, carved from a larger region.
    assert_eq!(st.bytes_in_use, 256);
    assert!(st.bytes_reserved >= 1 << 20, "{st:?}");
    drop(a);
    assert!(sim.release_cached_memory() >= 1 << 20);
}

#[test]
fn the_memory_limit_holds_without_the_suballocator() {
    let rt = Runtime::new(RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    })
    .unwrap();
    rt.load_plugin(
        plugin_path("devplug_sim"),
        &[("no_suballocator", "1"), ("memory", "65536")],
    )
    .unwrap();
    let sim = rt.find_device("SIM:0").unwrap();
    let a = sim.allocate(60_000).unwrap();
    // SIM's own memory is what runs out: an error value, not an abort.
    let e = sim.allocate(10_000).unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
    drop(a);
    sim.allocate(10_000).unwrap();
}

/// `Device::memory_usage`: the platform's free memory plus what the runtime caches, so that
/// what the suballocator holds unused still counts as free; exact either way.
#[test]
fn memory_usage_counts_the_runtimes_cache_as_free() {
    const MEM: u64 = 4 << 20;
    for no_suballocator in ["0", "1"] {
        let rt = runtime();
        rt.load_plugin(
            plugin_path("devplug_sim"),
            &[("memory", "4M"), ("no_suballocator", no_suballocator)],
        )
        .unwrap();
        let sim = rt.find_device("SIM:0").unwrap();
        let u = sim.memory_usage().unwrap();
        assert_eq!((u.free, u.total), (MEM, MEM), "{no_suballocator}: {u:?}");
        let a = sim.allocate(3000).unwrap();
        // SIM and the suballocator both round to 256 bytes: 3072 bytes are taken, whether the
        // suballocator carved them from a larger region (the rest counts as free) or SIM
        // allocated them directly.
        let u = sim.memory_usage().unwrap();
        assert_eq!(
            (u.free, u.total),
            (MEM - 3072, MEM),
            "{no_suballocator}: {u:?}"
        );
        drop(a);
        let u = sim.memory_usage().unwrap();
        assert_eq!(u.free, MEM, "{no_suballocator}: {u:?}");
        sim.release_cached_memory();
        assert_eq!(sim.memory_usage().unwrap().free, MEM);
    }
}
