//! CPU device benchmarks, each printed as a ratio to a baseline measured in the same run:
//! - device↔host copies of 64 MiB vs `memcpy` (goal: ≥ 0.9× its bandwidth);
//! - an empty stream round trip (enqueue a host callback, wait for it), in µs, against a
//!   round trip to another thread through a mutex and condition variables (two wake-ups: what
//!   a queue that sleeps as soon as it is idle costs).
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

    let rounds = 2000;
    let baseline = condvar_round_trips(rounds);
    let stream = dev.create_stream().expect("stream");
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        stream.host_callback(Box::new(|| {})).expect("enqueue");
        stream.synchronize().expect("sync");
        samples.push(t.elapsed().as_secs_f64());
    }
    let trip = median(samples);
    println!("round trip to another thread                          median us   ratio");
    println!(
        "  mutex + condvars, sleeping at once (baseline)   {:10.2}",
        baseline * 1e6
    );
    println!(
        "  CPU stream: enqueue a host callback + wait        {:10.2}   {:.2}x",
        trip * 1e6,
        trip / baseline
    );
}

/// Median time of a round trip to a thread that sleeps on a condition variable between
/// requests, as the CPU stream did before it polled.
fn condvar_round_trips(rounds: usize) -> f64 {
    use parking_lot::{Condvar, Mutex};
    use std::sync::Arc;
    // (requests sent, requests served)
    let shared = Arc::new((Mutex::new((0u64, 0u64)), Condvar::new(), Condvar::new()));
    let server = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let (m, request, served) = &*shared;
            let mut st = m.lock();
            while st.0 != u64::MAX {
                while st.0 == st.1 {
                    request.wait(&mut st);
                }
                if st.0 != u64::MAX {
                    st.1 += 1;
                    served.notify_all();
                }
            }
        })
    };
    let (m, request, served) = &*shared;
    let mut samples = Vec::with_capacity(rounds);
    for i in 1..=rounds as u64 {
        let t = Instant::now();
        let mut st = m.lock();
        st.0 = i;
        request.notify_one();
        while st.1 < i {
            served.wait(&mut st);
        }
        drop(st);
        samples.push(t.elapsed().as_secs_f64());
    }
    m.lock().0 = u64::MAX;
    request.notify_one();
    server.join().expect("server");
    median(samples)
}
