//! CPU device benchmarks, each printed as a ratio to a baseline measured in the same run:
//! - device↔host copies of 64 MiB vs `memcpy` (goal: ≥ 0.9× its bandwidth);
//! - an empty stream round trip (enqueue a host callback, wait for it), in µs.
//!
//! `cargo bench -p devplug-core --bench host_device`

use std::hint::black_box;
use std::time::Instant;

use devplug_core::{Runtime, RuntimeOptions};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn time<F: FnMut()>(reps: usize, mut f: F) -> f64 {
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64());
    }
    median(v)
}

fn main() {
    let rt = Runtime::new(RuntimeOptions::default()).expect("runtime");
    let dev = rt.find_device("CPU:0").expect("CPU:0");

    const N: usize = 64 << 20;
    let host_src: Vec<u8> = (0..N).map(|i| i as u8).collect();
    let mut host_dst = vec![0u8; N];
    let buf = dev.allocate(N as u64).expect("64 MiB");
    buf.write(0, &host_src).expect("warm-up write");
    buf.read(0, &mut host_dst).expect("warm-up read");

    let reps = 15;
    let t_memcpy = time(reps, || {
        host_dst.copy_from_slice(black_box(&host_src));
        black_box(&host_dst);
    });
    let t_h2d = time(reps, || buf.write(0, black_box(&host_src)).expect("write"));
    let t_d2h = time(reps, || {
        buf.read(0, black_box(&mut host_dst)).expect("read")
    });
    let gbs = |t: f64| N as f64 / t / 1e9;
    println!("copy of 64 MiB            GB/s    ratio to memcpy (goal >= 0.9x)");
    println!("  memcpy (baseline)   {:8.2}", gbs(t_memcpy));
    println!(
        "  host -> CPU device  {:8.2}    {:.2}x",
        gbs(t_h2d),
        t_memcpy / t_h2d
    );
    println!(
        "  CPU device -> host  {:8.2}    {:.2}x",
        gbs(t_d2h),
        t_memcpy / t_d2h
    );

    let stream = dev.create_stream().expect("stream");
    let rounds = 2000;
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        stream.host_callback(Box::new(|| {})).expect("enqueue");
        stream.synchronize().expect("sync");
        samples.push(t.elapsed().as_secs_f64());
    }
    println!(
        "empty stream round trip (enqueue host callback + wait): median {:.2} us",
        median(samples) * 1e6
    );
}
