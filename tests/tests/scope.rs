//! Device scopes and device setters, as a Rust host uses them: nesting, setters with and
//! without an opinion, capture and re-entry on another thread, explicit devices over scopes,
//! and the errors (a setter that fails, devices of another runtime).

use std::sync::{Arc, Mutex};

use devplug_core::{
    Attrs, Code, Device, Error, OpInfo, OpKind, Reason, RunOptions, Runtime, RuntimeOptions, Tensor,
};
use devplug_tests::{options, plugin_path, record_placements, PlacementLog};

/// A runtime with three CPU devices and a placement log.
fn setup() -> (Runtime, PlacementLog) {
    let rt = Runtime::new(RuntimeOptions {
        cpu_device_count: 3,
        ..options()
    })
    .unwrap();
    let log = record_placements(&rt);
    (rt, log)
}

/// Runs Add of two small tensors on `CPU:0` with no device named; returns where the output
/// lives and the reason the log gave.
fn add(rt: &Runtime, log: &PlacementLog) -> (String, Reason) {
    let cpu0 = rt.find_device("CPU:0").unwrap();
    let x = Tensor::from_slice(&cpu0, &[2], &[1f32, 2.]).unwrap();
    log.lock().unwrap().clear();
    let out = rt
        .run_named(
            "Add",
            &[x.clone(), x],
            &Attrs::new(),
            &RunOptions::default(),
        )
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [2., 4.]);
    let l = log.lock().unwrap();
    // The decision that placed the op (inputs on CPU:0 are copied first: logged too).
    let e = l
        .iter()
        .find(|e| e.op == "Add" && e.reason != Reason::InputCopied)
        .expect("Add was logged");
    assert_eq!(e.device, out[0].device().qualified_name(), "{l:?}");
    (e.device.clone(), e.reason)
}

fn dev(rt: &Runtime, spec: &str) -> Arc<Device> {
    rt.find_device(spec).unwrap()
}

#[test]
fn scopes_nest_and_the_innermost_decides() {
    let (rt, log) = setup();
    assert_eq!(add(&rt, &log), ("HOST:0".into(), Reason::Default));
    let outer = rt.device_scope(&dev(&rt, "CPU:1")).unwrap();
    let inner = rt.device_scope(&dev(&rt, "CPU:2")).unwrap();
    {
        let _o = outer.enter();
        assert_eq!(add(&rt, &log), ("HOST:1".into(), Reason::Scope));
        {
            let _i = inner.enter();
            assert_eq!(add(&rt, &log), ("HOST:2".into(), Reason::Scope));
            // A device named with the run wins over every scope.
            let cpu0 = dev(&rt, "CPU:0");
            let x = Tensor::from_slice(&cpu0, &[1], &[1f32]).unwrap();
            let out = rt
                .run_named(
                    "Neg",
                    &[x],
                    &Attrs::new(),
                    &RunOptions {
                        device: Some(cpu0.clone()),
                        soft_placement: None,
                    },
                )
                .unwrap();
            assert!(Arc::ptr_eq(out[0].device(), &cpu0));
        }
        assert_eq!(add(&rt, &log), ("HOST:1".into(), Reason::Scope));
    }
    assert_eq!(add(&rt, &log), ("HOST:0".into(), Reason::Default));
}

#[test]
fn a_guard_dropped_early_exits_its_own_scope_only() {
    let (rt, log) = setup();
    let outer = rt.device_scope(&dev(&rt, "CPU:1")).unwrap().enter();
    let inner = rt.device_scope(&dev(&rt, "CPU:2")).unwrap().enter();
    assert!(inner.is_innermost() && !outer.is_innermost());
    drop(outer);
    assert_eq!(add(&rt, &log), ("HOST:2".into(), Reason::Scope));
    drop(inner);
    assert_eq!(add(&rt, &log), ("HOST:0".into(), Reason::Default));
}

#[test]
fn a_setter_places_what_it_has_an_opinion_on_and_leaves_the_rest_to_the_scopes_around_it() {
    let (rt, log) = setup();
    let asked: Arc<Mutex<Vec<(String, String, OpKind)>>> = Arc::default();
    let (a, cpu2) = (asked.clone(), dev(&rt, "CPU:2"));
    // "MatMul on CPU:2, no opinion on anything else".
    let setter = rt.setter_scope(move |op: &OpInfo| {
        a.lock()
            .unwrap()
            .push((op.name.to_string(), op.op.to_string(), op.kind));
        Ok((op.op == "MatMul").then(|| cpu2.clone()))
    });
    let _outer = rt.device_scope(&dev(&rt, "CPU:1")).unwrap().enter();
    let _s = setter.enter();
    assert_eq!(add(&rt, &log), ("HOST:1".into(), Reason::Scope));
    let cpu0 = dev(&rt, "CPU:0");
    let m = Tensor::from_slice(&cpu0, &[1, 1], &[3f32]).unwrap();
    log.lock().unwrap().clear();
    let out = rt
        .run_named(
            "MatMul",
            &[m.clone(), m],
            &Attrs::new(),
            &RunOptions::default(),
        )
        .unwrap();
    assert_eq!(out[0].device().qualified_name(), "HOST:2");
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [9.]);
    let l = log.lock().unwrap();
    assert!(
        l.iter()
            .any(|e| e.op == "MatMul" && e.reason == Reason::Setter && e.device == "HOST:2"),
        "{l:?}"
    );
    let asked = asked.lock().unwrap();
    assert_eq!(
        *asked,
        [
            ("Add".into(), "Add".into(), OpKind::Compute),
            ("MatMul".into(), "MatMul".into(), OpKind::Compute)
        ]
    );
}

#[test]
fn a_failing_setter_fails_the_op_with_its_message() {
    let (rt, _log) = setup();
    let _s = rt
        .setter_scope(|_: &OpInfo| Err(Error::new(Code::Unavailable, "no device is free")))
        .enter();
    let cpu0 = dev(&rt, "CPU:0");
    let x = Tensor::from_slice(&cpu0, &[1], &[1f32]).unwrap();
    let e = rt
        .run_named("Neg", &[x], &Attrs::new(), &RunOptions::default())
        .unwrap_err();
    assert_eq!(e.code, Code::Unavailable, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("Neg: the device setter failed") && msg.contains("no device is free"),
        "{msg}"
    );
}

#[test]
fn devices_of_another_runtime_are_refused() {
    let (rt, _log) = setup();
    let other = devplug_tests::runtime();
    let theirs = other.find_device("CPU:0").unwrap();
    let e = rt.device_scope(&theirs).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.to_string().contains("another runtime"), "{e}");

    let t = theirs.clone();
    let _s = rt
        .setter_scope(move |_: &OpInfo| Ok(Some(t.clone())))
        .enter();
    let x = Tensor::from_slice(&dev(&rt, "CPU:0"), &[1], &[1f32]).unwrap();
    let e = rt
        .run_named("Neg", &[x], &Attrs::new(), &RunOptions::default())
        .unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.to_string().contains("a device of another runtime"), "{e}");
}

#[test]
fn a_scope_of_one_runtime_does_not_place_the_ops_of_another() {
    let (rt, log) = setup();
    let (other, other_log) = setup();
    let _s = rt.device_scope(&dev(&rt, "CPU:1")).unwrap().enter();
    assert_eq!(add(&other, &other_log), ("HOST:0".into(), Reason::Default));
    assert_eq!(add(&rt, &log), ("HOST:1".into(), Reason::Scope));
}

#[test]
fn a_captured_context_runs_ops_where_it_was_captured_on_any_thread() {
    let (rt, log) = setup();
    let rt = Arc::new(rt);
    // Captured under CPU:1 with a setter inside that sends MatMul to CPU:2.
    let cpu2 = dev(&rt, "CPU:2");
    let captured = {
        let _o = rt.device_scope(&dev(&rt, "CPU:1")).unwrap().enter();
        let _s = rt
            .setter_scope(move |op: &OpInfo| Ok((op.op == "MatMul").then(|| cpu2.clone())))
            .enter();
        rt.current_scope()
    };
    assert!(!captured.is_empty());
    assert_eq!(add(&rt, &log), ("HOST:0".into(), Reason::Default));

    let (r, l) = (rt.clone(), log.clone());
    std::thread::spawn(move || {
        // The caller's own scope (CPU:0 explicitly) does not apply inside the captured one.
        let _caller = r.device_scope(&dev(&r, "CPU:0")).unwrap().enter();
        {
            let _c = captured.enter();
            assert_eq!(add(&r, &l), ("HOST:1".into(), Reason::Scope));
            let m = Tensor::from_slice(&dev(&r, "CPU:0"), &[1, 1], &[2f32]).unwrap();
            let out = r
                .run_named(
                    "MatMul",
                    &[m.clone(), m],
                    &Attrs::new(),
                    &RunOptions::default(),
                )
                .unwrap();
            assert_eq!(out[0].device().qualified_name(), "HOST:2");
        }
        assert_eq!(add(&r, &l), ("HOST:0".into(), Reason::Scope));
    })
    .join()
    .unwrap();
}

#[test]
fn a_context_captured_with_no_scope_entered_restores_the_default() {
    let (rt, log) = setup();
    let nothing = rt.current_scope();
    assert!(nothing.is_empty());
    let _s = rt.device_scope(&dev(&rt, "CPU:2")).unwrap().enter();
    let _n = nothing.enter();
    assert_eq!(add(&rt, &log), ("HOST:0".into(), Reason::Default));
}

#[test]
fn a_setter_may_run_ops_and_enter_scopes_itself() {
    let (rt, log) = setup();
    let rt = Arc::new(rt);
    let weak = Arc::downgrade(&rt);
    let cpu1 = dev(&rt, "CPU:1");
    let _s = rt
        .setter_scope(move |op: &OpInfo| {
            if op.op == "Add" {
                // Decides by running an op (under a scope of its own).
                let rt = weak.upgrade().expect("runtime alive");
                let _inner = rt.device_scope(&cpu1).unwrap().enter();
                let x = Tensor::from_slice(&rt.find_device("CPU:0")?, &[1], &[1f32])?;
                let n = rt.run_named("Neg", &[x], &Attrs::new(), &RunOptions::default())?;
                assert_eq!(n[0].device().qualified_name(), "HOST:1");
                return Ok(Some(cpu1.clone()));
            }
            Ok(None)
        })
        .enter();
    assert_eq!(add(&rt, &log), ("HOST:1".into(), Reason::Setter));
}

#[test]
fn a_decomposition_runs_on_the_scoped_device() {
    let (rt, log) = setup();
    rt.load_plugin(plugin_path("devplug_sim"), &[]).unwrap();
    let sim = dev(&rt, "SIM:0");
    let x = Tensor::from_slice(&sim, &[3], &[-1f32, 0., 2.]).unwrap();
    let _s = rt.device_scope(&sim).unwrap().enter();
    log.lock().unwrap().clear();
    // SIM has no Relu kernel: its decomposition runs on SIM (Maximum is soft-placed in turn).
    let out = rt
        .run_named("Relu", &[x], &Attrs::new(), &RunOptions::default())
        .unwrap();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), [0., 0., 2.]);
    let l = log.lock().unwrap();
    assert!(
        l.iter()
            .any(|e| e.op == "Relu" && e.reason == Reason::Decomposed && e.device == "SIM:0"),
        "{l:?}"
    );
}
