//! The built-in CPU devices as a Rust host uses them: devices, memory, copies, streams,
//! events and tensors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use devplug_core::{Code, DType, EventStatus, Runtime, RuntimeOptions, Tensor};

fn runtime(devices: usize) -> Runtime {
    Runtime::new(RuntimeOptions {
        cpu_device_count: devices,
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn devices_are_listed_and_found_by_every_spec_form() {
    let rt = runtime(3);
    let names: Vec<String> = rt.devices().iter().map(|d| d.name().to_string()).collect();
    assert_eq!(names, ["CPU:0", "CPU:1", "CPU:2"]);
    for (spec, ordinal) in [
        ("CPU", 0),
        ("cpu:1", 1),
        ("/device:CPU:2", 2),
        ("HOST:1", 1),
        ("host", 0),
    ] {
        let d = rt.find_device(spec).unwrap();
        assert_eq!(d.ordinal(), ordinal, "{spec}");
        assert_eq!(d.platform().info.name, "HOST");
    }
    let p = rt.find_device("CPU:2").unwrap().properties();
    assert_eq!(
        (p.device_type.as_str(), p.platform.as_str()),
        ("CPU", "HOST")
    );
    assert!(p.is_active_platform && p.host_visible);
    assert_eq!(rt.find_device("CPU:3").unwrap_err().code, Code::NotFound);
    assert_eq!(rt.find_device("GPU").unwrap_err().code, Code::NotFound);
    assert_eq!(
        rt.find_device("CPU:x").unwrap_err().code,
        Code::InvalidArgument
    );
}

#[test]
fn device_count_is_validated() {
    for n in [0, 65] {
        let e = Runtime::new(RuntimeOptions {
            cpu_device_count: n,
            ..Default::default()
        })
        .err()
        .unwrap();
        assert_eq!(e.code, Code::InvalidArgument);
        assert!(e.message.contains("cpu_device_count"), "{e}");
    }
}

#[test]
fn memory_limit_is_an_error_not_an_abort() {
    let rt = Runtime::new(RuntimeOptions {
        cpu_memory_limit: Some(1 << 20),
        ..Default::default()
    })
    .unwrap();
    let d = rt.find_device("CPU").unwrap();
    let a = d.allocate(700 << 10).unwrap();
    let e = d.allocate(700 << 10).unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted);
    assert!(e.message.contains("limit"), "{e}");
    let s = d.memory_stats();
    assert_eq!(s.bytes_limit, Some(1 << 20));
    assert_eq!(s.active_allocs, 1);
    drop(a);
    assert_eq!(d.memory_stats().bytes_in_use, 0);
    let _b = d.allocate(700 << 10).unwrap();
}

#[test]
fn buffers_copy_within_and_across_devices() {
    let rt = runtime(2);
    let (d0, d1) = (
        rt.find_device("CPU:0").unwrap(),
        rt.find_device("CPU:1").unwrap(),
    );
    let a = d0.allocate(4096).unwrap();
    let b = d1.allocate(4096).unwrap();
    let pattern: Vec<u8> = (0..4096).map(|i| (i * 7 % 251) as u8).collect();
    a.write(0, &pattern).unwrap();
    b.copy_from(100, &a, 50, 1000).unwrap();
    let mut out = vec![0u8; 1000];
    b.read(100, &mut out).unwrap();
    assert_eq!(out, pattern[50..1050]);
    a.memset(10, 0xAB, 5).unwrap();
    let mut small = [0u8; 7];
    a.read(9, &mut small).unwrap();
    assert_eq!(
        small,
        [pattern[9], 0xAB, 0xAB, 0xAB, 0xAB, 0xAB, pattern[15]]
    );
    assert_eq!(
        a.write(4000, &[0u8; 97]).unwrap_err().code,
        Code::OutOfRange
    );
    assert_eq!(
        a.read(u64::MAX, &mut small).unwrap_err().code,
        Code::OutOfRange
    );
}

#[test]
fn created_streams_are_asynchronous_and_ordered() {
    let rt = runtime(1);
    let d = rt.find_device("CPU").unwrap();
    let s = d.create_stream().unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let caller = std::thread::current().id();
    for i in 0..50 {
        let o = order.clone();
        s.host_callback(Box::new(move || {
            assert_ne!(
                std::thread::current().id(),
                caller,
                "a created stream runs off-thread"
            );
            o.lock().push(i)
        }))
        .unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(*order.lock(), (0..50).collect::<Vec<_>>());
}

#[test]
fn the_default_stream_runs_inline() {
    let rt = runtime(1);
    let d = rt.find_device("CPU").unwrap();
    let hit = Arc::new(AtomicUsize::new(0));
    let h = hit.clone();
    d.default_stream()
        .host_callback(Box::new(move || {
            h.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
    assert_eq!(
        hit.load(Ordering::SeqCst),
        1,
        "ran before host_callback returned"
    );
}

#[test]
fn events_order_streams_of_one_and_of_two_devices() {
    let rt = runtime(2);
    let (d0, d1) = (
        rt.find_device("CPU:0").unwrap(),
        rt.find_device("CPU:1").unwrap(),
    );
    let (s0, s1) = (d0.create_stream().unwrap(), d1.create_stream().unwrap());
    let buf0 = d0.allocate(1 << 20).unwrap();
    let buf1 = d1.allocate(1 << 20).unwrap();
    // s0: a slow step, then fill buf0 with 5s, then record.
    s0.host_callback(Box::new(|| {
        std::thread::sleep(std::time::Duration::from_millis(30))
    }))
    .unwrap();
    s0.memset(&buf0, 0, 5, 1 << 20).unwrap();
    let ev = d0.create_event().unwrap();
    ev.record(&s0).unwrap();
    assert_eq!(ev.status().unwrap(), EventStatus::Pending);
    // s1 (another device) waits for the event, then copies buf0 → buf1.
    s1.wait_event(&ev).unwrap();
    s1.copy(&buf1, 0, &buf0, 0, 1 << 20).unwrap();
    s1.synchronize().unwrap();
    let mut out = vec![0u8; 1 << 20];
    buf1.read(0, &mut out).unwrap();
    assert!(out.iter().all(|b| *b == 5), "s1 copied before s0 was done");
    assert_eq!(ev.status().unwrap(), EventStatus::Complete);
    // a same-device wait
    let s0b = d0.create_stream().unwrap();
    s0.host_callback(Box::new(|| {
        std::thread::sleep(std::time::Duration::from_millis(20))
    }))
    .unwrap();
    s0.memset(&buf0, 0, 9, 16).unwrap();
    s0b.wait_stream(&s0).unwrap();
    let seen = Arc::new(parking_lot::Mutex::new(vec![0u8; 16]));
    let (b, sn) = (buf0.clone(), seen.clone());
    s0b.host_callback(Box::new(move || b.read(0, &mut sn.lock()).unwrap()))
        .unwrap();
    s0b.synchronize().unwrap();
    assert_eq!(*seen.lock(), vec![9u8; 16]);
    // misuse is refused
    assert_eq!(ev.record(&s1).unwrap_err().code, Code::InvalidArgument);
    assert_eq!(s1.wait_stream(&s0).unwrap_err().code, Code::InvalidArgument);
    assert_eq!(
        s1.memset(&buf0, 0, 1, 1).unwrap_err().code,
        Code::InvalidArgument
    );
}

#[test]
fn stream_work_keeps_buffers_alive() {
    let rt = runtime(1);
    let d = rt.find_device("CPU").unwrap();
    let s = d.create_stream().unwrap();
    s.host_callback(Box::new(|| {
        std::thread::sleep(std::time::Duration::from_millis(20))
    }))
    .unwrap();
    let b = d.allocate(64).unwrap();
    s.write(&b, 0, vec![3u8; 64]).unwrap();
    let out = Arc::new(parking_lot::Mutex::new(vec![0u8; 64]));
    let o = out.clone();
    let b2 = b.clone();
    s.host_callback(Box::new(move || b2.read(0, &mut o.lock()).unwrap()))
        .unwrap();
    drop(b);
    s.synchronize().unwrap();
    assert_eq!(*out.lock(), vec![3u8; 64]);
    assert_eq!(
        d.memory_stats().active_allocs,
        0,
        "freed once the stream was done"
    );
}

#[test]
fn tensors_round_trip_every_dtype_and_copy_between_devices() {
    let rt = runtime(2);
    let (d0, d1) = (
        rt.find_device("CPU:0").unwrap(),
        rt.find_device("CPU:1").unwrap(),
    );
    let f = Tensor::from_slice(&d0, &[2, 3], &[1.5f32, -2.0, 3.25, 0.0, 5.0, 6.0]).unwrap();
    assert_eq!(
        (f.dtype(), f.shape(), f.num_elements(), f.byte_size()),
        (DType::F32, &[2i64, 3][..], 6, 24)
    );
    assert_eq!(
        f.copy_to(&d1).unwrap().to_vec::<f32>().unwrap(),
        [1.5, -2.0, 3.25, 0.0, 5.0, 6.0]
    );
    assert_eq!(
        Tensor::from_slice(&d0, &[2], &[1.0f64, 2.0])
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        [1.0, 2.0]
    );
    assert_eq!(
        Tensor::from_slice(&d1, &[3], &[1i32, -2, 3])
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        [1, -2, 3]
    );
    assert_eq!(
        Tensor::from_slice(&d0, &[1], &[i64::MIN])
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        [i64::MIN]
    );
    assert_eq!(
        Tensor::from_slice(&d0, &[2], &[0u8, 255])
            .unwrap()
            .to_vec::<u8>()
            .unwrap(),
        [0, 255]
    );
    assert_eq!(
        Tensor::from_slice(&d0, &[2], &[true, false])
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        [true, false]
    );
    let scalar = Tensor::from_slice(&d0, &[], &[42i64]).unwrap();
    assert_eq!((scalar.rank(), scalar.num_elements()), (0, 1));
    let empty = Tensor::zeros(&d0, DType::F32, &[3, 0, 2]).unwrap();
    assert_eq!(
        (empty.num_elements(), empty.to_vec::<f32>().unwrap().len()),
        (0, 0)
    );
    assert_eq!(
        Tensor::zeros(&d1, DType::I32, &[4])
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        [0; 4]
    );
    // bad input
    assert_eq!(f.to_vec::<i32>().unwrap_err().code, Code::InvalidArgument);
    assert_eq!(
        Tensor::from_slice(&d0, &[4], &[1.0f32]).unwrap_err().code,
        Code::InvalidArgument
    );
    assert_eq!(
        Tensor::zeros(&d0, DType::F32, &[-1]).unwrap_err().code,
        Code::InvalidArgument
    );
    assert_eq!(
        Tensor::zeros(&d0, DType::F32, &[1; 9]).unwrap_err().code,
        Code::InvalidArgument
    );
    assert_eq!(
        Tensor::zeros(&d0, DType::F64, &[i64::MAX, 4])
            .unwrap_err()
            .code,
        Code::InvalidArgument
    );
    assert_eq!(
        Tensor::from_bytes(&d0, DType::Bool, &[1], &[2])
            .unwrap_err()
            .code,
        Code::InvalidArgument
    );
}

#[test]
fn two_runtimes_are_independent() {
    let a = runtime(1);
    let b = runtime(2);
    let ta = Tensor::from_slice(&a.find_device("CPU").unwrap(), &[1], &[1u8]).unwrap();
    assert_eq!(b.device_count(), 2);
    assert_eq!(a.device_count(), 1);
    drop(a);
    assert_eq!(
        ta.to_vec::<u8>().unwrap(),
        [1],
        "tensors outlive their runtime"
    );
    assert_eq!(
        b.find_device("CPU:1").unwrap().memory_stats().active_allocs,
        0
    );
}

#[test]
fn pinned_host_memory_is_tracked() {
    let rt = runtime(1);
    let d = rt.find_device("CPU").unwrap();
    let p = d.host_allocate(4096).unwrap();
    assert!(!p.is_null());
    d.host_free(p).unwrap();
    assert_eq!(d.host_free(p).unwrap_err().code, Code::InvalidArgument);
}

#[test]
fn tensors_are_written_from_typed_slices() {
    let rt = runtime(1);
    let cpu = rt.find_device("CPU").unwrap();
    let t = Tensor::zeros(&cpu, DType::F32, &[2, 2]).unwrap();
    t.write_slice(&[1f32, 2., 3., 4.]).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), [1., 2., 3., 4.]);
    let e = t.write_slice(&[1f64, 2., 3., 4.]).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert_eq!(e.message, "the tensor holds f32 elements, not f64");
    let e = t.write_slice(&[1f32; 3]).unwrap_err();
    assert_eq!(
        e.message,
        "the tensor of shape [2, 2] holds 4 elements; the slice has 3"
    );
    assert_eq!(
        t.to_vec::<f32>().unwrap(),
        [1., 2., 3., 4.],
        "unchanged by the refusals"
    );
}
