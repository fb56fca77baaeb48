//! Kernel states (plugin ABI 1.5) through the runtime, with SIM's ReduceSum, whose `create`
//! reads its attributes once per state: one `create` per device and attribute set (in whatever
//! order the host set the attributes), the results the CPU's, at most 64 states kept per
//! kernel and device, and every state destroyed — in stream order, and before the device is —
//! by the time the runtime is gone. SIM logs each state made and destroyed
//! (`log_kernel_states=1`); the log is process-wide, so this file holds one test.

use std::sync::{Arc, Mutex};

use devplug_core::log::{self, Level, Record};
use devplug_core::{Attrs, RunOptions, Runtime, Tensor};
use devplug_tests::{options, plugin_path};

/// SIM's lines about kernel states: (created?, live count after).
fn state_lines(seen: &Mutex<Vec<String>>) -> Vec<(bool, u64)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains("KSTATE:0: kernel ReduceSum: state"))
        .map(|m| {
            let live = m
                .rsplit("; ")
                .next()
                .and_then(|t| t.strip_suffix(" live"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no live count in {m:?}"));
            (m.contains("state created"), live)
        })
        .collect()
}

fn counts(seen: &Mutex<Vec<String>>) -> (usize, usize) {
    let lines = state_lines(seen);
    let made = lines.iter().filter(|(c, _)| *c).count();
    (made, lines.len() - made)
}

#[test]
fn kernel_states_are_made_once_per_attribute_set_and_all_destroyed() {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    log::set_level(Some(Level::Info));
    log::set_callback(Some(Arc::new(move |r: &Record| {
        s.lock().unwrap().push(r.message.to_string())
    })));
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
    let leaks: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.contains("never destroyed") || m.contains("leaked"))
        .cloned()
        .collect();
    assert!(leaks.is_empty(), "{leaks:?}");
    log::set_callback(None);
}
