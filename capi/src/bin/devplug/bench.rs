//! `devplug bench PLUGIN [-o KEY=VALUE]...`: a device plugin's costs next to the built-in CPU
//! device's, measured in the same run, for the first device of each platform the plugin
//! registers:
//! - synchronous copies of 64 MiB host → device and device → host, in GB/s, against `memcpy` of
//!   the same bytes on the host;
//! - an eager Add of two 16-element f32 tensors (N enqueued, one synchronize, per op), against
//!   the same op on the CPU device: the dispatch overhead small models pay on the device;
//! - MatMul 256³ f32, GFLOP/s, against the CPU device; and the same by the device's own clock
//!   (two events around the ops, ABI 1.4) against the host's clock over the same rounds: how
//!   much of the host's time the device spent computing. "not measured" for a device that does
//!   not time events.
//!
//! Ops run strictly on the device (no soft placement): an op without a kernel there is listed as
//! such. Figures are medians of several rounds; a ratio > 1 means the plugin's device is slower
//! (times) or faster (rates) as the column says. Runs in this process: use `devplug check` first
//! for a plugin that may crash.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use devplug_core::{Attrs, Code, Device, Outputs, Result, Runtime, RuntimeOptions, Tensor};

/// `bench`'s arguments.
#[derive(Debug)]
pub struct BenchCommand {
    plugin: PathBuf,
    options: Vec<(String, String)>,
}

pub fn parse(args: &[String]) -> std::result::Result<BenchCommand, String> {
    let mut plugin = None;
    let mut options = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" | "--option" => options.push(crate::key_value(a, it.next())?),
            flag if flag.starts_with('-') => return Err(format!("unknown option '{flag}'")),
            path if plugin.is_none() => plugin = Some(crate::plugin_path(path)?),
            extra => return Err(format!("unexpected argument '{extra}'")),
        }
    }
    Ok(BenchCommand {
        plugin: plugin.ok_or("bench needs the path of a plugin")?,
        options,
    })
}

/// What `f` gives in 7 rounds after one warm-up round.
fn rounds<T>(mut f: impl FnMut() -> Result<T>) -> Result<Vec<T>> {
    f()?;
    (0..7).map(|_| f()).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median seconds of `f` over 7 timed rounds after one warm-up round.
fn median_secs(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let secs = rounds(|| {
        let t = Instant::now();
        f()?;
        Ok(t.elapsed().as_secs_f64())
    })?;
    Ok(median(secs))
}

/// A function that runs `op` strictly on `dev` `n` times, on copies of `inputs` there.
fn strict_runs<'a>(
    rt: &'a Runtime,
    dev: &'a Arc<Device>,
    op: &str,
    inputs: &[Tensor],
) -> Result<impl FnMut(usize) -> Result<()> + 'a> {
    let h = rt.op(op)?;
    let ins: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.copy_to(dev))
        .collect::<Result<_>>()?;
    let (attrs, mut out) = (Attrs::new(), Outputs::new());
    Ok(move |n| {
        for _ in 0..n {
            rt.run_into_on(&h, &ins, &attrs, Some(dev), Some(false), &mut out)?;
            out.clear();
        }
        Ok(())
    })
}

/// A row: the device's figure, the baseline's, and their ratio.
fn row(what: &str, ours: Result<f64>, base: Result<f64>, unit: &str, base_name: &str) {
    match (ours, base) {
        (Ok(o), Ok(b)) => println!(
            "  {what:<34} {o:>10.2} {unit:<7} {base_name:<12} {b:>10.2} {unit:<7} ratio {:.2}",
            o / b
        ),
        (Err(e), _) if e.code == Code::NotFound => {
            println!("  {what:<34} no kernel on this device")
        }
        (Err(e), _) if e.code == Code::Unimplemented => {
            println!("  {what:<34} not measured: {}", e.message)
        }
        (Err(e), _) | (_, Err(e)) => println!("  {what:<34} failed: {e}"),
    }
}

const COPY_BYTES: usize = 64 << 20;

fn copy_rates(dev: &Arc<Device>) -> (Result<f64>, Result<f64>, f64) {
    let src = vec![0x5au8; COPY_BYTES];
    let mut dst = vec![0u8; COPY_BYTES];
    let gbs = |secs: f64| COPY_BYTES as f64 / secs / 1e9;
    let buf = dev.allocate(COPY_BYTES as u64);
    let (htod, dtoh) = match &buf {
        Ok(b) => (
            median_secs(|| b.write(0, &src)).map(gbs),
            median_secs(|| b.read(0, &mut dst)).map(gbs),
        ),
        Err(e) => (Err(e.clone()), Err(e.clone())),
    };
    let mut host = vec![0u8; COPY_BYTES];
    let memcpy = median_secs(|| {
        std::hint::black_box(host.as_mut_slice()).copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&host);
        Ok(())
    })
    .map(gbs)
    .unwrap_or(f64::NAN);
    (htod, dtoh, memcpy)
}

/// Per-op seconds of `n` strict runs of `op` on `dev` (then one synchronize).
fn per_op(rt: &Runtime, dev: &Arc<Device>, op: &str, inputs: &[Tensor], n: usize) -> Result<f64> {
    let mut runs = strict_runs(rt, dev, op, inputs)?;
    let secs = median_secs(|| {
        runs(n)?;
        dev.synchronize()
    })?;
    Ok(secs / n as f64)
}

/// Per-op seconds of `n` strict runs of `op` on `dev` by the device's own clock, between two
/// events recorded on its default stream around them, and by the host's clock over the same
/// rounds (from the first launch to the end of the wait): medians of 7 rounds after a
/// warm-up. `UNIMPLEMENTED` when the device does not time events.
fn per_op_both_clocks(
    rt: &Runtime,
    dev: &Arc<Device>,
    op: &str,
    inputs: &[Tensor],
    n: usize,
) -> Result<(f64, f64)> {
    let mut runs = strict_runs(rt, dev, op, inputs)?;
    let (stream, start, end) = (
        dev.default_stream(),
        dev.create_event()?,
        dev.create_event()?,
    );
    let both = rounds(|| {
        let t = Instant::now();
        start.record(&stream)?;
        runs(n)?;
        end.record(&stream)?;
        end.synchronize()?;
        let host = t.elapsed().as_secs_f64();
        Ok((start.elapsed_ns(&end)? as f64 * 1e-9, host))
    })?;
    let per_op = |v: Vec<f64>| median(v) / n as f64;
    Ok((
        per_op(both.iter().map(|r| r.0).collect()),
        per_op(both.iter().map(|r| r.1).collect()),
    ))
}

pub fn run(cmd: &BenchCommand) -> ExitCode {
    let options = RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    };
    let rt = match Runtime::new(options) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("devplug: cannot create a runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let opts: Vec<(&str, &str)> = cmd
        .options
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let info = match rt.load_plugin(&cmd.plugin, &opts) {
        Ok(info) => info,
        Err(e) => {
            eprintln!("devplug bench: {e}");
            return ExitCode::from(1);
        }
    };
    let cpu = match rt.cpu_device() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("devplug bench: {e}");
            return ExitCode::from(1);
        }
    };
    println!(
        "devplug bench {} ({} {})",
        cmd.plugin.display(),
        info.name,
        info.version
    );
    let owner = format!("plugin '{}'", info.name);
    let devices: Vec<Arc<Device>> = rt
        .devices()
        .into_iter()
        .filter(|d| d.platform().owner == owner && d.ordinal() == 0)
        .collect();
    if devices.is_empty() {
        println!("  the plugin registered no device: nothing to measure");
        return ExitCode::SUCCESS;
    }
    let tensor = |shape: &[i64]| {
        let n = shape.iter().product::<i64>() as usize;
        let v: Vec<f32> = (0..n).map(|i| (i % 17) as f32 * 0.25 - 2.0).collect();
        Tensor::from_slice(&cpu, shape, &v)
    };
    let (small, square) = match (tensor(&[16]), tensor(&[256, 256])) {
        (Ok(s), Ok(q)) => (s, q),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("devplug bench: {e}");
            return ExitCode::from(1);
        }
    };
    let gflops = |secs: f64| 2.0 * 256f64.powi(3) / secs / 1e9;
    for dev in devices {
        let p = dev.properties();
        println!("{} ({}):", p.name, p.description.hardware_name);
        let (htod, dtoh, memcpy) = copy_rates(&dev);
        row(
            "copy host -> device, 64 MiB",
            htod,
            Ok(memcpy),
            "GB/s",
            "memcpy",
        );
        row(
            "copy device -> host, 64 MiB",
            dtoh,
            Ok(memcpy),
            "GB/s",
            "memcpy",
        );
        let adds = [small.clone(), small.clone()];
        let add = |d: &Arc<Device>| per_op(&rt, d, "Add", &adds, 10_000).map(|s| s * 1e9);
        row(
            "eager Add, 16 f32, per op",
            add(&dev),
            add(&cpu),
            "ns",
            "CPU device",
        );
        let mats = [square.clone(), square.clone()];
        let mm = |d: &Arc<Device>| per_op(&rt, d, "MatMul", &mats, 5).map(gflops);
        row(
            "MatMul 256^3 f32",
            mm(&dev),
            mm(&cpu),
            "GFLOP/s",
            "CPU device",
        );
        // The device's own account of the same rounds (ABI 1.4 timed events): above the host's
        // figure by the share of the time the device was not computing (launches, waits).
        let clocks = per_op_both_clocks(&rt, &dev, "MatMul", &mats, 5);
        row(
            "MatMul 256^3 f32, device's clock",
            clocks.clone().map(|c| gflops(c.0)),
            clocks.map(|c| gflops(c.1)),
            "GFLOP/s",
            "host clock",
        );
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cmd = parse(&args(&["/", "-o", "devices=2"])).unwrap();
        assert_eq!(cmd.options, [("devices".into(), "2".into())]);
        assert!(parse(&args(&[])).unwrap_err().contains("needs the path"));
        assert!(parse(&args(&["/", "/"]))
            .unwrap_err()
            .contains("unexpected"));
    }
}
