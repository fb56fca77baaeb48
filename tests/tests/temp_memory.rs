//! Temporary memory for plugin kernels (ABI 1.4's `allocate_temp`, TensorFlow's
//! `TF_AllocateTemp`) as a host sees it: a zoo kernel that copies through memory it asks the
//! host for runs right, the memory comes back after each launch, and a request the device
//! cannot meet fails the op with the host's reason.

use std::sync::Arc;

use devplug_core::{AttrValue, Attrs, Code, Device, RunOptions, Runtime, Tensor};
use devplug_tests::{runtime, zoo_path};

fn reshape(rt: &Runtime, x: &Tensor, dev: &Arc<Device>) -> devplug_core::Result<Tensor> {
    let attrs = Attrs::new().with("shape", AttrValue::Ints(vec![3, 2]));
    let options = RunOptions {
        device: Some(dev.clone()),
        soft_placement: Some(false),
    };
    Ok(rt
        .run_named("Reshape", std::slice::from_ref(x), &attrs, &options)?
        .remove(0))
}

#[test]
fn a_kernel_computes_through_temporary_memory_that_comes_back_after_each_launch() {
    let rt = runtime();
    rt.load_plugin(zoo_path("kernel_temp"), &[]).unwrap();
    let zoo = rt.find_device("ZOO:0").unwrap();
    let cpu = rt.cpu_device().unwrap();
    let values = [1.5f32, -2.0, 3.25, 4.0, 5.5, -6.0];
    let x = Tensor::from_slice(&cpu, &[2, 3], &values)
        .unwrap()
        .copy_to(&zoo)
        .unwrap();
    zoo.synchronize().unwrap();
    let before = zoo.memory_stats();

    let y = reshape(&rt, &x, &zoo).unwrap();
    assert_eq!(y.shape(), [3, 2]);
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        values,
        "the bytes went through the temporary"
    );
    zoo.synchronize().unwrap();
    let after = zoo.memory_stats();
    assert_eq!(
        after.active_allocs,
        before.active_allocs + 1,
        "only the output is left: {before:?} -> {after:?}"
    );

    // A thousand launches: the temporaries are reused, not accumulated.
    for _ in 0..1000 {
        drop(reshape(&rt, &x, &zoo).unwrap());
    }
    zoo.synchronize().unwrap();
    let later = zoo.memory_stats();
    assert_eq!(later.active_allocs, after.active_allocs, "{later:?}");
    assert_eq!(later.bytes_in_use, after.bytes_in_use, "{later:?}");
}

/// The host's reason reaches the user whether the kernel passes the status on (the host's
/// message stands) or says something of its own (an SDK's wrappers do): then it is added.
#[test]
fn a_temporary_the_device_cannot_hold_fails_the_op_with_the_hosts_reason() {
    for (variant, own) in [
        ("kernel_temp_huge", None),
        (
            "kernel_temp_huge_own_message",
            Some("zoo: no temporary memory for the copy"),
        ),
    ] {
        let rt = runtime();
        rt.load_plugin(zoo_path(variant), &[]).unwrap();
        let zoo = rt.find_device("ZOO:0").unwrap();
        let cpu = rt.cpu_device().unwrap();
        let x = Tensor::from_slice(&cpu, &[2, 3], &[1.0f32; 6])
            .unwrap()
            .copy_to(&zoo)
            .unwrap();
        zoo.synchronize().unwrap();
        let before = zoo.memory_stats();
        let e = reshape(&rt, &x, &zoo).unwrap_err();
        assert_eq!(e.code, Code::ResourceExhausted, "{variant}: {e}");
        for words in [
            "Reshape on ZOO:0",
            "allocate_temp: allocating 9223372036854775807 bytes on ZOO:0",
        ]
        .into_iter()
        .chain(own)
        {
            assert!(
                e.message.contains(words),
                "{variant}: {words:?} not in: {e}"
            );
        }
        assert_eq!(
            e.message.matches("allocate_temp:").count(),
            1,
            "{variant}: the reason once: {e}"
        );
        zoo.synchronize().unwrap();
        assert_eq!(zoo.memory_stats().active_allocs, before.active_allocs);
        // The device goes on.
        assert_eq!(x.to_vec::<f32>().unwrap(), [1.0f32; 6]);
    }
}
