//! Plugin conformance checks: what `devplug check PLUGIN` runs (in a child process of its own,
//! so that a plugin that crashes or hangs is reported, not suffered: see the `devplug` tool in
//! `capi/src/bin/devplug.rs`).
//!
//! [`check_plugin`] loads the plugin into a fresh runtime and, on each device of the platforms
//! it registered, exercises what every host relies on — properties, allocation, synchronous and
//! stream-ordered copies, memset, host callbacks in order, events, memory usage — and runs each
//! kernel the plugin registered for an op it has sample inputs for, comparing the result with the
//! built-in CPU device's. Each check is announced before it runs ([`Step::Begin`]), so that a
//! supervisor knows which one a crash interrupted.

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{Binding, KernelDef};
use crate::op::{AttrValue, Attrs};
use crate::runtime::{Runtime, RuntimeOptions};
use crate::tensor::{DType, Tensor};
use crate::RunOptions;

/// What [`check_plugin`] reports as it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The check about to run.
    Begin(String),
    /// Its outcome: `Err` with what went wrong.
    End(String, std::result::Result<(), String>),
    /// Something worth saying that is no failure (an optional function not provided, a kernel
    /// with no sample inputs).
    Note(String),
}

/// Loads the plugin at `path` with `options` and runs every check, reporting each step to
/// `report`. True when every check passed.
pub fn check_plugin(path: &Path, options: &[(&str, &str)], report: &mut dyn FnMut(Step)) -> bool {
    let mut checker = Checker { report, ok: true };
    let rt = match Runtime::new(RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    }) {
        Ok(rt) => rt,
        Err(e) => {
            checker.run("runtime", || Err(e));
            return false;
        }
    };
    let mut plugin_name = String::new();
    let loaded = checker.run("load", || {
        plugin_name = rt.load_plugin(path, options)?.name;
        Ok(())
    });
    if !loaded {
        return false;
    }
    let owner = format!("plugin '{plugin_name}'");
    let devices: Vec<Arc<Device>> = rt
        .devices()
        .into_iter()
        .filter(|d| d.platform().owner == owner)
        .collect();
    if devices.is_empty() {
        (checker.report)(Step::Note(format!(
            "{owner} registered no device (nothing more to check)"
        )));
    }
    let kernels: Vec<Arc<KernelDef>> = rt
        .kernels()
        .all()
        .into_iter()
        .filter(|k| k.source == owner)
        .collect();
    for dev in &devices {
        checker.device(&rt, dev);
        for k in kernels.iter().filter(|k| runs_on(k, dev)) {
            checker.kernel(&rt, dev, k);
        }
    }
    checker.run("unload", || {
        rt.synchronize()?;
        drop(rt);
        Ok(())
    });
    checker.ok
}

/// True when kernel `k` is one the runtime may choose for `dev`.
fn runs_on(k: &KernelDef, dev: &Device) -> bool {
    let entry = dev.platform();
    k.device_type == entry.info.device_type
        && match &k.binding {
            Binding::Platform(p) => *p == entry.info.name,
            Binding::Any => true,
        }
}

struct Checker<'a> {
    report: &'a mut dyn FnMut(Step),
    ok: bool,
}

impl Checker<'_> {
    /// Runs one check; true when it passed.
    fn run(&mut self, name: &str, f: impl FnOnce() -> Result<()>) -> bool {
        (self.report)(Step::Begin(name.to_string()));
        let result = f().map_err(|e| e.to_string());
        let passed = result.is_ok();
        self.ok &= passed;
        (self.report)(Step::End(name.to_string(), result));
        passed
    }

    fn device(&mut self, rt: &Runtime, dev: &Arc<Device>) {
        let n = dev.name().to_string();
        self.run(&format!("{n}: properties"), || {
            let p = dev.properties();
            expect(!p.name.is_empty(), "the device has no name")?;
            expect(p.total_memory > 0, "total_memory is 0")
        });
        self.run(&format!("{n}: allocate and free"), || {
            let before = dev.memory_stats().active_allocs;
            let bufs: Vec<_> = [1u64, 256, 4096, 1 << 20]
                .iter()
                .map(|&size| dev.allocate(size))
                .collect::<Result<_>>()?;
            expect(
                dev.memory_stats().active_allocs == before + bufs.len() as u64,
                "the statistics do not count the allocations",
            )?;
            drop(bufs);
            expect(
                dev.memory_stats().active_allocs == before,
                "the statistics still count freed allocations",
            )
        });
        self.run(&format!("{n}: synchronous copies and memset"), || {
            let data = pattern(4096, 3);
            let a = dev.allocate(4096)?;
            let b = dev.allocate(4096)?;
            a.write(0, &data)?;
            b.copy_from(0, &a, 0, 4096)?;
            expect(read(&b)? == data, "a copy on the device changed the bytes")?;
            b.memset(100, 0xA5, 1000)?;
            let mut want = data.clone();
            want[100..1100].fill(0xA5);
            expect(read(&b)? == want, "memset wrote the wrong bytes")?;
            expect(read(&a)? == data, "memset of one buffer changed another")
        });
        self.run(&format!("{n}: streams, host callbacks and events"), || {
            let s = dev.create_stream()?;
            let buf = dev.allocate(4096)?;
            let order = Arc::new(Mutex::new(Vec::new()));
            s.write(&buf, 0, pattern(4096, 7))?;
            for i in 0..3 {
                let order = order.clone();
                s.host_callback(Box::new(move || order.lock().unwrap().push(i)))?;
            }
            s.memset(&buf, 0, 0x11, 16)?;
            let e = dev.create_event()?;
            e.record(&s)?;
            e.synchronize()?;
            expect(
                e.status()? == crate::EventStatus::Complete,
                "a synchronized event is not complete",
            )?;
            s.synchronize()?;
            expect(
                *order.lock().unwrap() == [0, 1, 2],
                "host callbacks ran out of order",
            )?;
            let mut want = pattern(4096, 7);
            want[..16].fill(0x11);
            expect(read(&buf)? == want, "stream work ran out of order")?;
            dev.synchronize()?;
            rt.synchronize()
        });
        match dev.memory_usage() {
            Err(e) if e.code == crate::Code::Unimplemented => (self.report)(Step::Note(format!(
                "{n}: memory_usage is not provided (optional)"
            ))),
            usage => {
                self.run(&format!("{n}: memory usage"), || {
                    let u = usage?;
                    expect(u.free <= u.total, "free memory exceeds the total")
                });
            }
        }
    }

    fn kernel(&mut self, rt: &Runtime, dev: &Arc<Device>, k: &KernelDef) {
        let Some(sample) = sample(&k.op) else {
            (self.report)(Step::Note(format!(
                "{}: kernel {}: no sample inputs for this op, not run",
                dev.name(),
                k.op
            )));
            return;
        };
        if !(k.dtypes.is_empty() || k.dtypes.contains(&DType::F32)) {
            (self.report)(Step::Note(format!(
                "{}: kernel {}: takes no f32, not run",
                dev.name(),
                k.op
            )));
            return;
        }
        let name = format!("{}: kernel {} agrees with the CPU", dev.name(), k.op);
        self.run(&name, || run_kernel_sample(rt, dev, k, &sample));
    }
}

fn expect(condition: bool, what: &str) -> Result<()> {
    if condition {
        Ok(())
    } else {
        Err(Error::internal(what.to_string()))
    }
}

/// `n` bytes of a pattern that differs with `seed`.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn read(b: &crate::memory::Buffer) -> Result<Vec<u8>> {
    let mut out = vec![0u8; b.size() as usize];
    b.read(0, &mut out)?;
    Ok(out)
}

/// Inputs (f32, shape and values) and attributes to run an op with.
struct Sample {
    inputs: Vec<(Vec<i64>, Vec<f32>)>,
    attrs: Attrs,
}

/// Sample inputs for the basis ops a plugin is likely to implement; `None` for others.
fn sample(op: &str) -> Option<Sample> {
    // Positive values, so that Log, Sqrt, Rsqrt, Pow and Div are defined.
    let values = |n: usize, seed: f32| -> Vec<f32> {
        (0..n).map(|i| 0.25 + seed + 0.5 * i as f32).collect()
    };
    let none = Attrs::new();
    let s = match op {
        "Add" | "Sub" | "Mul" | "Div" | "Maximum" | "Minimum" | "Pow" => Sample {
            inputs: vec![(vec![2, 3], values(6, 0.0)), (vec![3], values(3, 0.5))],
            attrs: none,
        },
        "Neg" | "Abs" | "Exp" | "Log" | "Tanh" | "Sqrt" | "Rsqrt" | "Sigmoid" | "Relu" => Sample {
            inputs: vec![(vec![5], values(5, 0.0))],
            attrs: none,
        },
        "MatMul" => Sample {
            inputs: vec![(vec![2, 3], values(6, 0.0)), (vec![3, 4], values(12, 0.1))],
            attrs: none,
        },
        "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceMean" => Sample {
            inputs: vec![(vec![2, 3], values(6, 0.0))],
            attrs: Attrs::new().with("axes", AttrValue::Ints(vec![1])),
        },
        "Softmax" => Sample {
            inputs: vec![(vec![2, 3], values(6, 0.0))],
            attrs: Attrs::new().with("axis", AttrValue::Int(-1)),
        },
        _ => return None,
    };
    Some(s)
}

/// Runs `k`'s op on `dev` with `sample` (no soft placement), checks that the plugin's kernel ran
/// (the placement log) and that the result equals the CPU device's.
fn run_kernel_sample(
    rt: &Runtime,
    dev: &Arc<Device>,
    k: &KernelDef,
    sample: &Sample,
) -> Result<()> {
    let cpu = rt.cpu_device()?;
    let op = rt.op(&k.op)?;
    let on_cpu: Vec<Tensor> = sample
        .inputs
        .iter()
        .map(|(shape, v)| Tensor::from_slice(&cpu, shape, v))
        .collect::<Result<_>>()?;
    let on_dev: Vec<Tensor> = on_cpu
        .iter()
        .map(|t| t.copy_to(dev))
        .collect::<Result<_>>()?;
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    rt.set_placement_callback(Some(Arc::new(move |e| {
        seen.lock().unwrap().push(e.clone())
    })));
    let got = rt.run(
        &op,
        &on_dev,
        &sample.attrs,
        &RunOptions {
            device: Some(dev.clone()),
            soft_placement: Some(false),
        },
    );
    rt.set_placement_callback(None);
    let got = got?;
    let ran_here =
        events.lock().unwrap().iter().any(|e| {
            e.op == k.op && e.device == dev.qualified_name() && e.detail.contains(&k.source)
        });
    expect(
        ran_here,
        &format!("the op did not run {}'s kernel (placement log)", k.source),
    )?;
    let want = rt.run(
        &op,
        &on_cpu,
        &sample.attrs,
        &RunOptions {
            device: Some(cpu.clone()),
            soft_placement: Some(false),
        },
    )?;
    expect(got.len() == want.len(), "a different number of outputs")?;
    for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        expect(
            g.shape() == w.shape(),
            &format!(
                "output {i} has shape {:?}, the CPU's {:?}",
                g.shape(),
                w.shape()
            ),
        )?;
        let (g, w) = (g.copy_to(&cpu)?.to_vec::<f32>()?, w.to_vec::<f32>()?);
        for (j, (a, b)) in g.iter().zip(w.iter()).enumerate() {
            let tolerance = 1e-4 * b.abs().max(1.0);
            expect(
                (a - b).abs() <= tolerance,
                &format!("output {i}[{j}] is {a}, the CPU's {b}"),
            )?;
        }
    }
    Ok(())
}
