//! Plugin conformance checks: what `devplug check PLUGIN` runs (in a child process of its own,
//! so that a plugin that crashes or hangs is reported, not suffered: see the `devplug` tool in
//! `capi/src/bin/devplug/check.rs`).
//!
//! [`check_plugin`] loads the plugin into a fresh runtime and, on each device of the platforms
//! it registered, exercises what every host relies on — properties, allocation, synchronous and
//! stream-ordered copies, memset, host callbacks in order, events, memory usage — and runs each
//! kernel the plugin registered, once per dtype it and its op take ([`SAMPLED`]: all), on sample
//! inputs (there is one for every basis op and composite), comparing the result with the
//! built-in CPU device's. Each check is announced before it runs ([`Step::Begin`]), so that a
//! supervisor knows which one a crash interrupted.
//!
//! [`check_plugin_as`] runs the same checks as a host of an older plugin ABI minor
//! ([`RuntimeOptions::plugin_abi_minor`]): `devplug check` does so, in a second child process,
//! for a plugin that declares an older minor than the newest ([`declared_abi_version`]).

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{Binding, KernelDef};
use crate::op::{AttrValue, Attrs};
use crate::runtime::{Runtime, RuntimeOptions};
use crate::tensor::{DType, Tensor};
use crate::RunOptions;

/// The dtypes kernels and a plugin's own ops are run with, where their op and kernel take
/// them: every dtype.
pub const SAMPLED: [DType; 8] = DType::ALL;

/// What [`check_plugin`] reports as it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The check about to run.
    Begin(String),
    /// Its outcome: `Err` with what went wrong.
    End(String, std::result::Result<(), String>),
    /// Something worth saying that is no failure (an optional function not provided, a kernel
    /// with no sample inputs). A note that comes after a [`Step::Begin`] without its
    /// [`Step::End`] ends that check as skipped (the optional function it checks is not
    /// provided): neither passed nor failed.
    Note(String),
    /// A kernel declined every sample the check has for a dtype: none of its results was
    /// compared (neither passed nor failed; the tool's summary counts them).
    Unchecked(String),
}

/// Loads the plugin at `path` with `options` and runs every check as a host of the newest
/// plugin ABI, reporting each step to `report`. True when every check passed.
pub fn check_plugin(path: &Path, options: &[(&str, &str)], report: &mut dyn FnMut(Step)) -> bool {
    check_plugin_as(path, options, crate::PLUGIN_ABI_MINOR, report)
}

/// [`check_plugin`], as a host of plugin ABI 1.`host_abi_minor`
/// ([`RuntimeOptions::plugin_abi_minor`]): the host table, kernel contexts and everything else
/// the plugin gets are that minor's, as a real host of that minor hands them out. A plugin
/// that declares an older minor than the newest ([`declared_abi_version`]) promises to work
/// in such a host too: `devplug check` runs its checks once more as a host of its declared
/// minor. A plugin of a newer minor fails to load (`ABI_MISMATCH`), a minor newer than
/// [`crate::PLUGIN_ABI_MINOR`] fails the first check (`runtime`).
pub fn check_plugin_as(
    path: &Path,
    options: &[(&str, &str)],
    host_abi_minor: u32,
    report: &mut dyn FnMut(Step),
) -> bool {
    // Errors plugins log while the checks run (a state never destroyed, a leak at
    // destroy_device) fail the last check; every record is still shown as it comes.
    let logged = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let seen = logged.clone();
    let previous = crate::log::set_callback(Some(Arc::new(move |r: &crate::log::Record| {
        // As the default sink prints them.
        if r.source == "devplug" {
            eprintln!("[devplug {:?}] {}", r.level, r.message);
        } else {
            eprintln!("[devplug {:?}] {}: {}", r.level, r.source, r.message);
        }
        if r.level == crate::log::Level::Error && r.source != "devplug" {
            seen.lock().push(format!("{}: {}", r.source, r.message));
        }
    })));
    let ok = check_plugin_logged(path, options, host_abi_minor, report, &logged);
    crate::log::set_callback(previous);
    ok
}

/// The plugin ABI version `(major, minor)` the plugin at `path` declares
/// (`dpp_plugin_api_t::abi_major` and `abi_minor`), read without running its `init`: the
/// library is opened and its entry called. The errors are those of a load that fails there
/// (no such file, not a library, no entry point, a description too small).
pub fn declared_abi_version(path: &Path) -> Result<(u32, u32)> {
    crate::plugin::declared_version(path)
}

fn check_plugin_logged(
    path: &Path,
    options: &[(&str, &str)],
    host_abi_minor: u32,
    report: &mut dyn FnMut(Step),
    logged: &parking_lot::Mutex<Vec<String>>,
) -> bool {
    let mut checker = Checker { report, ok: true };
    let rt = match Runtime::new(RuntimeOptions {
        discover_from_env: false,
        plugin_abi_minor: Some(host_abi_minor),
        ..Default::default()
    }) {
        Ok(rt) => rt,
        Err(e) => {
            checker.run("runtime", || Err(e));
            return false;
        }
    };
    let mut plugin_name = String::new();
    let mut plugin_ops = Vec::new();
    let loaded = checker.run("load", || {
        let info = rt.load_plugin(path, options)?;
        plugin_name = info.name;
        plugin_ops = info.ops;
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
    for op in &plugin_ops {
        checker.own_op(&rt, op);
    }
    let kernels: Vec<Arc<KernelDef>> = rt
        .kernels()
        .all()
        .into_iter()
        .filter(|k| k.source == owner)
        .collect();
    for dev in &devices {
        checker.device(&rt, dev);
        let here: Vec<&Arc<KernelDef>> = kernels.iter().filter(|k| runs_on(k, dev)).collect();
        for k in &here {
            // Several kernels of the plugin for one op (a fast one that declines some inputs
            // above a generic one): each is checked alone, named by its priority.
            let several = here.iter().filter(|o| o.op == k.op).count() > 1;
            checker.kernel(&rt, dev, k, several);
        }
    }
    // The devices go with the runtime (what their plugin reports at destroy_device, a leak,
    // comes before the last check).
    drop((devices, kernels));
    checker.run("unload", || {
        rt.synchronize()?;
        drop(rt);
        Ok(())
    });
    checker.run("the plugin logged no error", || {
        let logged = logged.lock();
        match logged.first() {
            None => Ok(()),
            Some(first) => Err(Error::internal(format!(
                "{} error(s) logged during the checks, the first: {first}",
                logged.len()
            ))),
        }
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
        // The largest allocation: 1 MiB, or a quarter of a smaller device's memory.
        let large = (1u64 << 20)
            .min(dev.properties().total_memory / 4)
            .max(4096);
        self.run(&format!("{n}: allocate and free"), || {
            let before = dev.memory_stats().active_allocs;
            let bufs: Vec<_> = [1u64, 256, 4096, large]
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
        if dev.platform().info.use_suballocator {
            // The suballocator works around a misaligned address (it frees the region and asks
            // for one 256 bytes larger), but the guide requires alignment: a fault to fix.
            self.run(
                &format!("{n}: allocate returns 256-byte aligned addresses"),
                || {
                    // The regions the host's allocator keeps from the check before go back to
                    // the plugin first: on a small device they are most of its memory.
                    dev.release_cached_memory();
                    let raw = dev.executor();
                    // Held all at once: freed one by one, each could get the first address
                    // again, and a plugin that rounds sizes to less than 256 bytes would pass.
                    let mut held = Vec::new();
                    let result = [1u64, 100, 4096, large].into_iter().try_for_each(|size| {
                        let p = raw.allocate(size)?;
                        held.push((p, size));
                        expect(
                            p.0.is_multiple_of(256),
                            &format!(
                                "allocate({size}) returned {:#x}, not 256-byte aligned, as device \
                                 addresses of a platform under the host's suballocator must be \
                                 (the host frees such a region and allocates it again, 256 bytes \
                                 larger)",
                                p.0
                            ),
                        )
                    });
                    for (p, size) in held {
                        raw.deallocate(p, size);
                    }
                    result
                },
            );
        }
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
            let status = e.status()?;
            if status != crate::EventStatus::Complete {
                // Say why: the stream's own error, when it has one.
                let why = match s.synchronize() {
                    Err(err) => format!("the stream reports: {err}"),
                    Ok(()) => "the stream reports no error".to_string(),
                };
                return Err(Error::internal(format!(
                    "an event the host synchronized with is {status:?}, not Complete; {why}"
                )));
            }
            s.synchronize()?;
            let ran = order.lock().unwrap().clone();
            let missing: Vec<i32> = (0..3).filter(|i| !ran.contains(i)).collect();
            if !missing.is_empty() {
                return Err(Error::internal(format!(
                    "host callbacks {missing:?} of [0, 1, 2] never ran (ran: {ran:?}), though the \
                     stream was synchronized: a stream must call each host callback's function \
                     exactly once, after its earlier work"
                )));
            }
            expect(
                ran == [0, 1, 2],
                &format!("host callbacks ran as {ran:?}, not in their stream's order [0, 1, 2]"),
            )?;
            let mut want = pattern(4096, 7);
            want[..16].fill(0x11);
            expect(read(&buf)? == want, "stream work ran out of order")?;
            dev.synchronize()?;
            rt.synchronize()
        });
        self.optional(
            &format!("{n}: event timing"),
            || time_events(dev),
            &format!(
                "{n}: event_elapsed_ns is not provided (optional, ABI 1.4): its events cannot be \
                 timed"
            ),
        );
        self.optional(
            &format!("{n}: memory usage"),
            || {
                let u = dev.memory_usage()?;
                expect(u.free <= u.total, "free memory exceeds the total")
            },
            &format!("{n}: memory_usage is not provided (optional)"),
        );
    }

    /// Runs the check of an optional function: when `f` fails with UNIMPLEMENTED (the function
    /// is not provided), the check ends with the note `absent` alone, neither passed nor
    /// failed.
    fn optional(&mut self, name: &str, f: impl FnOnce() -> Result<()>, absent: &str) {
        (self.report)(Step::Begin(name.to_string()));
        match f() {
            Err(e) if e.code == crate::Code::Unimplemented => {
                (self.report)(Step::Note(absent.to_string()));
            }
            result => {
                let result = result.map_err(|e| e.to_string());
                self.ok &= result.is_ok();
                (self.report)(Step::End(name.to_string(), result));
            }
        }
    }

    /// An op the plugin defined: its body runs on the CPU, for each dtype it takes (of
    /// [`SAMPLED`]) on generated inputs.
    fn own_op(&mut self, rt: &Runtime, op: &str) {
        let dtypes: Vec<DType> = SAMPLED
            .into_iter()
            .filter(|&d| own_op_sample(rt, op, d).is_some())
            .collect();
        if dtypes.is_empty() {
            (self.report)(Step::Note(format!(
                "op {op}: no sample inputs can be made for it (a required attribute or a list \
                 input), its body is not run"
            )));
        }
        for dtype in dtypes {
            self.run(
                &format!("op {op} ({}): its body runs on the CPU", dtype.name()),
                || {
                    let sample = own_op_sample(rt, op, dtype).expect("filtered above");
                    let cpu = rt.cpu_device()?;
                    let inputs = sample.cpu_inputs(rt, &cpu)?;
                    rt.run(&rt.op(op)?, &inputs, &sample.attrs, &strictly_on(&cpu))
                        .map(drop)
                },
            );
        }
    }

    /// Runs kernel `k` on `dev` once per dtype it takes (of [`SAMPLED`]) that its op
    /// has sample inputs for. `priority`: name the kernel by its priority (the plugin has
    /// other kernels for the op on `dev`).
    fn kernel(&mut self, rt: &Runtime, dev: &Arc<Device>, k: &KernelDef, priority: bool) {
        let name = KernelName {
            device: dev.name(),
            op: &k.op,
            priority: priority.then_some(k.priority),
        };
        let sample = |d: DType| sample(&k.op, d).or_else(|| own_op_sample(rt, &k.op, d));
        let dtypes: Vec<DType> = SAMPLED
            .into_iter()
            .filter(|d| k.dtypes.is_empty() || k.dtypes.contains(d))
            .filter(|&d| op_takes(rt, &k.op, d) && sample(d).is_some())
            .collect();
        // An op without a CPU kernel (one a plugin defined) runs its body on the CPU: the
        // kernel is compared with its decomposition.
        let reference = if rt
            .kernels()
            .locations(&k.op)
            .iter()
            .any(|l| l.starts_with("CPU "))
        {
            "the CPU"
        } else {
            "its decomposition on the CPU"
        };
        if dtypes.is_empty() {
            (self.report)(Step::Note(format!(
                "{}: no sample inputs for this op and its dtypes, not run",
                name.of(None)
            )));
        }
        for dtype in dtypes {
            let kernel = name.of(Some(dtype));
            let check = format!("{kernel} agrees with {reference}");
            // A kernel may decline inputs (UNIMPLEMENTED: the host then runs them elsewhere):
            // noted, neither passed nor failed.
            (self.report)(Step::Begin(check.clone()));
            let sample = sample(dtype).expect("filtered above");
            let mut ran = true;
            match run_kernel_sample(rt, dev, k, &sample, dtype) {
                Err(e) if e.code == crate::Code::Unimplemented => {
                    ran = false;
                    (self.report)(Step::Note(format!(
                        "{kernel} declined the sample inputs, which the host then runs \
                         elsewhere: {}",
                        declined_message(k, dev, &e)
                    )));
                }
                result => {
                    // Named by its inputs' shapes, as an edge case is by its label.
                    let result = result.map_err(|e| e.context(shapes_of(&sample)).to_string());
                    self.ok &= result.is_ok();
                    (self.report)(Step::End(check, result));
                }
            }
            self.changed_attributes(rt, dev, k, &kernel, dtype, reference);
            if !self.edge_shapes(rt, dev, k, &kernel, dtype) && !ran {
                (self.report)(Step::Unchecked(format!(
                    "{kernel} declined every sample: the check compared none of its results \
                     with the CPU's (test it with inputs it takes)"
                )));
            }
        }
    }

    /// A plugin's own op with attributes: kernel `k` against `reference` once more for each of
    /// [`attribute_changes`] the op's body takes on the CPU (a kernel that ignores an attribute
    /// agrees at the default). A decline is noted.
    fn changed_attributes(
        &mut self,
        rt: &Runtime,
        dev: &Arc<Device>,
        k: &KernelDef,
        kernel: &str,
        dtype: DType,
        reference: &str,
    ) {
        let (Some(mut sample), Ok(op), Ok(cpu)) = (
            own_op_sample(rt, &k.op, dtype),
            rt.op(&k.op),
            rt.cpu_device(),
        ) else {
            return;
        };
        let Ok(on_cpu) = sample.cpu_inputs(rt, &cpu) else {
            return;
        };
        for (changed, attrs) in attribute_changes(&op.def().attrs) {
            // An int or bool the body cannot take (an axis out of range) is no test.
            if rt.run(&op, &on_cpu, &attrs, &strictly_on(&cpu)).is_err() {
                continue;
            }
            let check = format!("{kernel} agrees with {reference} with {changed}");
            (self.report)(Step::Begin(check.clone()));
            sample.attrs = attrs;
            match run_kernel_sample(rt, dev, k, &sample, dtype) {
                Err(e) if e.code == crate::Code::Unimplemented => {
                    (self.report)(Step::Note(format!(
                        "{kernel} declined {changed}, which the host then runs elsewhere: {}",
                        declined_message(k, dev, &e)
                    )));
                }
                result => {
                    let result = result.map_err(|e| e.to_string());
                    self.ok &= result.is_ok();
                    (self.report)(Step::End(check, result));
                }
            }
        }
    }

    /// Kernel `k` on `dev` (named `kernel` in the report) against the CPU on its op's edge
    /// shapes for `dtype`; the ones the kernel declines are noted (and left out of the check's
    /// name). Whether it ran any.
    fn edge_shapes(
        &mut self,
        rt: &Runtime,
        dev: &Arc<Device>,
        k: &KernelDef,
        kernel: &str,
        dtype: DType,
    ) -> bool {
        let mut edges = edge_samples(&k.op, dtype);
        if edges.is_empty() {
            edges = own_op_edges(rt, &k.op, dtype);
        }
        if edges.is_empty() {
            return false;
        }
        // Named in the check: the edges that ran, and on a failure those not reached.
        let (mut ran, mut declined) = (Vec::new(), Vec::new());
        let mut result = Ok(());
        for (i, (label, sample)) in edges.iter().enumerate() {
            match run_kernel_sample(rt, dev, k, sample, dtype) {
                Err(e) if e.code == crate::Code::Unimplemented => declined.push(*label),
                Err(e) => {
                    ran.extend(edges[i..].iter().map(|(label, _)| *label));
                    result = Err(e.context(label).to_string());
                    break;
                }
                Ok(()) => ran.push(*label),
            }
        }
        if !ran.is_empty() {
            let check = format!(
                "{kernel} agrees with the CPU on edge shapes ({})",
                ran.join(", ")
            );
            (self.report)(Step::Begin(check.clone()));
            self.ok &= result.is_ok();
            (self.report)(Step::End(check, result));
        }
        if !declined.is_empty() {
            (self.report)(Step::Note(format!(
                "{kernel} declined edge shapes ({}), which the host then runs elsewhere",
                declined.join(", ")
            )));
        }
        !ran.is_empty()
    }
}

/// A sample's inputs' shapes, for a failure's message: `inputs [2, 3] and [3]` (`no inputs`).
fn shapes_of(sample: &Sample) -> String {
    let shapes: Vec<String> = sample
        .inputs
        .iter()
        .map(|i| format!("{:?}", i.shape))
        .collect();
    match shapes.len() {
        0 => "no inputs".to_string(),
        1 => format!("input {}", shapes[0]),
        _ => format!("inputs {}", shapes.join(" and ")),
    }
}

/// How the checks name a kernel on a device: `ZOO:0: kernel Add (f32)`, with its priority
/// when the plugin has several kernels for the op there (`ZOO:0: kernel Add (f32, priority
/// 10)`).
struct KernelName<'a> {
    device: &'a str,
    op: &'a str,
    priority: Option<i32>,
}

impl KernelName<'_> {
    /// The name, for `dtype` when given.
    fn of(&self, dtype: Option<DType>) -> String {
        let (device, op) = (self.device, self.op);
        match (dtype, self.priority) {
            (Some(d), Some(p)) => format!("{device}: kernel {op} ({}, priority {p})", d.name()),
            (Some(d), None) => format!("{device}: kernel {op} ({})", d.name()),
            (None, Some(p)) => format!("{device}: kernel {op} (priority {p})"),
            (None, None) => format!("{device}: kernel {op}"),
        }
    }
}

/// What a kernel said when it declined (`error`, from [`run_kernel_sample`] on `dev`): its
/// own message, without the host's context before it.
fn declined_message<'a>(k: &KernelDef, dev: &Device, error: &'a Error) -> &'a str {
    crate::dispatch::kernel_message(&k.op, k, dev, &error.message)
}

/// Event timing (`event_elapsed_ns`): the time around a host callback that sleeps, both ways,
/// and FAILED_PRECONDITION for an event never recorded and one still pending.
/// `UNIMPLEMENTED` when the device does not time events.
fn time_events(dev: &Arc<Device>) -> Result<()> {
    const SLEEP: std::time::Duration = std::time::Duration::from_millis(5);
    let s = dev.create_stream()?;
    let (a, b, never) = (
        dev.create_event()?,
        dev.create_event()?,
        dev.create_event()?,
    );
    a.record(&s)?;
    s.host_callback(Box::new(|| std::thread::sleep(SLEEP)))?;
    b.record(&s)?;
    b.synchronize()?;
    let ns = a.elapsed_ns(&b)?;
    expect(
        ns >= SLEEP.as_nanos() as i64 - 100_000,
        &format!("{ns} ns between two events around a host callback that sleeps {SLEEP:?}"),
    )?;
    let back = b.elapsed_ns(&a)?;
    expect(
        (back + ns).abs() <= 1_000,
        &format!("{ns} ns from the first event to the second, but {back} ns back"),
    )?;
    let refused = |r: Result<i64>, what: &str| match r {
        Err(e) if e.code == crate::Code::FailedPrecondition => Ok(()),
        Err(e) => Err(Error::new(
            e.code,
            format!(
                "timing {what}: {} (expected FAILED_PRECONDITION)",
                e.message
            ),
        )),
        Ok(ns) => Err(Error::failed_precondition(format!(
            "timing {what} gave {ns} ns instead of failing with FAILED_PRECONDITION"
        ))),
    };
    refused(a.elapsed_ns(&never), "an event that was never recorded")?;
    let (open, gate) = std::sync::mpsc::channel::<()>();
    s.host_callback(Box::new(move || {
        let _ = gate.recv_timeout(std::time::Duration::from_secs(10));
    }))?;
    let pending = dev.create_event()?;
    pending.record(&s)?;
    let result = refused(a.elapsed_ns(&pending), "an event still pending");
    drop(open);
    s.synchronize()?;
    result
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

/// One input of a sample: its shape and values, of the sample's dtype or Bool.
struct Input {
    shape: Vec<i64>,
    values: Vec<f64>,
    dtype: DType,
}

/// Inputs and attributes to run an op with.
struct Sample {
    inputs: Vec<Input>,
    attrs: Attrs,
}

impl Sample {
    /// The inputs as tensors on the CPU device `cpu`.
    fn cpu_inputs(&self, rt: &Runtime, cpu: &Arc<Device>) -> Result<Vec<Tensor>> {
        self.inputs.iter().map(|i| cpu_tensor(rt, cpu, i)).collect()
    }
}

/// Sample inputs of `dtype` (small positive integers, exact in every dtype and valid for Log,
/// Sqrt, Div and Pow; `true, false, …` for bool) for the basis ops and composites; `None` for
/// other ops, for float-only ops with an integer dtype and for Iota of bool. Whether the op
/// takes `dtype` at all is [`op_takes`]'s to say.
fn sample(op: &str, dtype: DType) -> Option<Sample> {
    let float = dtype.is_float();
    let t = |shape: &[i64], first: f64| counting(shape, first, dtype);
    let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
    let (inputs, attrs) = match op {
        "Add" | "Sub" | "Mul" | "Div" | "Maximum" | "Minimum" | "Pow" => {
            (vec![t(&[2, 3], 1.0), t(&[3], 1.0)], Attrs::new())
        }
        "Equal" | "NotEqual" | "Less" | "LessEqual" | "Greater" | "GreaterEqual" => {
            (vec![t(&[2, 3], 1.0), t(&[3], 2.0)], Attrs::new())
        }
        "Neg" | "Abs" | "Relu" => (vec![t(&[5], 1.0)], Attrs::new()),
        "Exp" | "Log" | "Tanh" | "Sqrt" | "Rsqrt" | "Sigmoid" | "Gelu" if float => {
            (vec![t(&[5], 1.0)], Attrs::new())
        }
        "Softmax" | "LogSoftmax" if float => (
            vec![t(&[2, 3], 1.0)],
            Attrs::new().with("axis", AttrValue::Int(-1)),
        ),
        "Select" => {
            let condition = Input {
                shape: vec![2, 3],
                values: vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0],
                dtype: DType::Bool,
            };
            (
                vec![condition, t(&[2, 3], 1.0), t(&[3], 10.0)],
                Attrs::new(),
            )
        }
        "Cast" => (
            vec![t(&[4], 1.0)],
            Attrs::new().with("dtype", AttrValue::DType(DType::F64)),
        ),
        "MatMul" => (vec![t(&[2, 3], 1.0), t(&[3, 4], 1.0)], Attrs::new()),
        "Gemm" if float => (
            vec![t(&[2, 3], 1.0), t(&[3, 4], 1.0), t(&[4], 1.0)],
            Attrs::new(),
        ),
        "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceMean" => {
            (vec![t(&[2, 3], 1.0)], Attrs::new().with("axes", ints(&[1])))
        }
        "BroadcastTo" => (
            vec![t(&[3], 1.0)],
            Attrs::new().with("shape", ints(&[2, 3])),
        ),
        "Reshape" => (
            vec![t(&[2, 3], 1.0)],
            Attrs::new().with("shape", ints(&[3, 2])),
        ),
        "Transpose" => (
            vec![t(&[2, 3], 1.0)],
            Attrs::new().with("perm", ints(&[1, 0])),
        ),
        "Concat" => (
            vec![t(&[2, 3], 1.0), t(&[1, 3], 7.0)],
            Attrs::new().with("axis", AttrValue::Int(0)),
        ),
        "Slice" => (
            vec![t(&[3, 4], 1.0)],
            Attrs::new()
                .with("begin", ints(&[1, 1]))
                .with("size", ints(&[2, 2])),
        ),
        "AddN" => (
            vec![t(&[2, 3], 1.0), t(&[2, 3], 2.0), t(&[2, 3], 3.0)],
            Attrs::new(),
        ),
        "Fill" => (
            vec![],
            Attrs::new()
                .with("shape", ints(&[2, 3]))
                .with("value", AttrValue::Float(3.0))
                .with("dtype", AttrValue::DType(dtype)),
        ),
        "Iota" if dtype != DType::Bool => (
            vec![],
            Attrs::new()
                .with("shape", ints(&[2, 3]))
                .with("axis", AttrValue::Int(1))
                .with("dtype", AttrValue::DType(dtype)),
        ),
        _ => return None,
    };
    Some(Sample { inputs, attrs })
}

/// Inputs for an op a plugin defined (one with a decomposition and no sample of its own),
/// from its signature: every input of shape `[2, 3]` holding 1, 2, … (positive, valid for
/// Log, Sqrt, Div), the first type variable taking `dtype` and the others their first
/// allowed dtype; the attributes' defaults. `None` when `dtype` is not allowed, an input is a
/// list, an attribute has no default, or the op is not such an op.
fn own_op_sample(rt: &Runtime, op: &str, dtype: DType) -> Option<Sample> {
    use crate::op::ArgType;
    if sample(op, dtype).is_some() {
        return None;
    }
    let handle = rt.op(op).ok()?;
    let def = handle.def();
    def.decomposition.as_ref()?;
    if def.attrs.iter().any(|a| a.default.is_none()) || def.inputs.iter().any(|i| i.list) {
        return None;
    }
    let first_var = def.type_vars.first();
    if first_var.is_some_and(|v| !v.allowed.contains(&dtype)) {
        return None;
    }
    let mut inputs = Vec::new();
    for input in &def.inputs {
        let d = match &input.ty {
            ArgType::Fixed(d) => *d,
            ArgType::Var(v) if first_var.is_some_and(|f| f.name == *v) => dtype,
            ArgType::Var(v) => *def
                .type_vars
                .iter()
                .find(|t| t.name == *v)?
                .allowed
                .first()?,
            ArgType::Attr(_) => return None,
        };
        inputs.push(counting(&[2, 3], 1.0, d));
    }
    // Sampled once per dtype it can take: the first type variable's on an input (an op whose
    // type variable is on no input, like Fill's, is not sampled here); without type
    // variables, its first input's (f32 without inputs).
    let once = match first_var {
        Some(_) => inputs.iter().any(|i| i.dtype == dtype),
        None => inputs.first().map_or(DType::F32, |i| i.dtype) == dtype,
    };
    if !once {
        return None;
    }
    Some(Sample {
        inputs,
        attrs: Attrs::new(),
    })
}

/// The attributes an own op's kernel is compared with again, each with what it changes
/// (`k = 4`): every float attribute away from its default at once (`x * 1.5 + 0.25`); each int
/// attribute alone one above its default, and one below it (the body may take only one of
/// them: an axis); each bool attribute alone the other way. Other attributes (lists, dtypes,
/// strings) keep their defaults.
fn attribute_changes(defs: &[crate::op::AttrDef]) -> Vec<(String, Attrs)> {
    let mut changes = Vec::new();
    let mut floats = (Vec::new(), Attrs::new());
    for a in defs {
        if let Some(AttrValue::Float(x)) = a.default {
            let v = x * 1.5 + 0.25;
            floats.1.set(a.name, AttrValue::Float(v));
            floats.0.push(format!("{} = {v}", a.name));
        }
    }
    if !floats.0.is_empty() {
        changes.push((floats.0.join(", "), floats.1));
    }
    for a in defs {
        let values = match a.default {
            Some(AttrValue::Int(x)) => vec![
                AttrValue::Int(x.saturating_add(1)),
                AttrValue::Int(x.saturating_sub(1)),
            ],
            Some(AttrValue::Bool(b)) => vec![AttrValue::Bool(!b)],
            _ => continue,
        };
        for v in values {
            let shown = match &v {
                AttrValue::Int(i) => i.to_string(),
                AttrValue::Bool(b) => b.to_string(),
                _ => unreachable!("ints and bools only"),
            };
            changes.push((
                format!("{} = {shown}", a.name),
                Attrs::new().with(a.name, v),
            ));
        }
    }
    changes
}

/// Edge shapes for an op a plugin defined ([`own_op_sample`]'s inputs): every input rank 0,
/// and every input `[0, 3]` (no elements), each kept only where the op's body runs on the CPU
/// with them (a body that needs a rank, such as a MatMul's, refuses them).
fn own_op_edges(rt: &Runtime, op: &str, dtype: DType) -> Vec<(&'static str, Sample)> {
    let (Some(sample), Ok(cpu), Ok(handle)) =
        (own_op_sample(rt, op, dtype), rt.cpu_device(), rt.op(op))
    else {
        return Vec::new();
    };
    let reshaped = |shape: &[i64]| Sample {
        inputs: sample
            .inputs
            .iter()
            .map(|i| counting(shape, 1.0, i.dtype))
            .collect(),
        attrs: sample.attrs.clone(),
    };
    [("rank 0", reshaped(&[])), ("[0, 3]", reshaped(&[0, 3]))]
        .into_iter()
        .filter(|(_, s)| {
            s.cpu_inputs(rt, &cpu).is_ok_and(|inputs| {
                rt.run(&handle, &inputs, &s.attrs, &strictly_on(&cpu))
                    .is_ok()
            })
        })
        .collect()
}

/// An input of `shape` holding `first`, `first + 1`, … (exact in every dtype); of bool, those
/// values modulo 2 (true, false, … from an odd `first`).
fn counting(shape: &[i64], first: f64, dtype: DType) -> Input {
    let n = shape.iter().product::<i64>() as usize;
    let value = |i: usize| match dtype {
        DType::Bool => (first + i as f64).rem_euclid(2.0),
        _ => first + i as f64,
    };
    Input {
        shape: shape.to_vec(),
        values: (0..n).map(value).collect(),
        dtype,
    }
}

/// True when op `op` takes `dtype` as its sample dtype: its first type variable allows it (an
/// op without type variables, like Fill and Iota, makes any dtype its `dtype` attribute names).
fn op_takes(rt: &Runtime, op: &str, dtype: DType) -> bool {
    rt.op(op).is_ok_and(|h| {
        h.def()
            .type_vars
            .first()
            .is_none_or(|v| v.allowed.contains(&dtype))
    })
}

/// The shapes kernels most often get wrong, each with a label: for the elementwise ops,
/// rank-0 operands, zero-sized dimensions (no bytes at all) and broadcasting on both sides;
/// for MatMul, a batch, both transposes, `k = 0` and `m = 0`; for the reductions, every axis,
/// keeping dimensions, a negative axis, a rank-0 input and a `[0, 3]` input (over axis 1, and
/// for ReduceSum over the empty axis 0 too: a sum of nothing is 0, while a maximum, minimum
/// or mean of nothing has no value to compare); for Cast, Select, BroadcastTo, Reshape,
/// Transpose, Concat, Slice and AddN, a rank-0 and/or a zero-sized case. Empty for other ops
/// (the composites, Fill, Iota, ops of plugins) and for dtypes the op's main sample does not
/// take.
fn edge_samples(op: &str, dtype: DType) -> Vec<(&'static str, Sample)> {
    if sample(op, dtype).is_none() {
        return Vec::new();
    }
    let t = |shape: &[i64], first: f64| counting(shape, first, dtype);
    let ints = |v: &[i64]| AttrValue::Ints(v.to_vec());
    let none = Attrs::new;
    let two = |a: Input, b: Input| Sample {
        inputs: vec![a, b],
        attrs: none(),
    };
    let mut cases = match op {
        "Add" | "Sub" | "Mul" | "Div" | "Maximum" | "Minimum" | "Pow" | "Equal" | "NotEqual"
        | "Less" | "LessEqual" | "Greater" | "GreaterEqual" => vec![
            ("[2, 3] and [2, 3]", two(t(&[2, 3], 3.0), t(&[2, 3], 1.0))),
            ("rank 0 and [2, 3]", two(t(&[], 2.0), t(&[2, 3], 1.0))),
            ("[2, 1] and [1, 3]", two(t(&[2, 1], 1.0), t(&[1, 3], 2.0))),
            ("[0, 3] and [3]", two(t(&[0, 3], 1.0), t(&[3], 1.0))),
        ],
        "Neg" | "Abs" | "Relu" | "Exp" | "Log" | "Tanh" | "Sqrt" | "Rsqrt" | "Sigmoid" | "Gelu" => {
            vec![
                (
                    "rank 0",
                    Sample {
                        inputs: vec![t(&[], 3.0)],
                        attrs: none(),
                    },
                ),
                (
                    "[0]",
                    Sample {
                        inputs: vec![t(&[0], 1.0)],
                        attrs: none(),
                    },
                ),
            ]
        }
        "MatMul" => vec![
            (
                "batched [2, 2, 3] x [3, 4]",
                two(t(&[2, 2, 3], 1.0), t(&[3, 4], 1.0)),
            ),
            (
                "transpose_a",
                Sample {
                    inputs: vec![t(&[3, 2], 1.0), t(&[3, 4], 1.0)],
                    attrs: Attrs::new().with("transpose_a", AttrValue::Bool(true)),
                },
            ),
            (
                "transpose_b",
                Sample {
                    inputs: vec![t(&[2, 3], 1.0), t(&[4, 3], 1.0)],
                    attrs: Attrs::new().with("transpose_b", AttrValue::Bool(true)),
                },
            ),
            (
                "transpose_a and transpose_b",
                Sample {
                    inputs: vec![t(&[3, 2], 1.0), t(&[4, 3], 1.0)],
                    attrs: Attrs::new()
                        .with("transpose_a", AttrValue::Bool(true))
                        .with("transpose_b", AttrValue::Bool(true)),
                },
            ),
            (
                "k = 0: [2, 0] x [0, 3]",
                two(t(&[2, 0], 1.0), t(&[0, 3], 1.0)),
            ),
            (
                "m = 0: [0, 3] x [3, 4]",
                two(t(&[0, 3], 1.0), t(&[3, 4], 1.0)),
            ),
        ],
        "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceMean" => {
            let reduce = |shape: &[i64], axes: &[i64]| Sample {
                inputs: vec![t(shape, 1.0)],
                attrs: Attrs::new().with("axes", ints(axes)),
            };
            let mut cases = vec![
                ("every axis", reduce(&[2, 3], &[])),
                (
                    "axis 0 kept (keep_dims)",
                    Sample {
                        inputs: vec![t(&[2, 3], 1.0)],
                        attrs: Attrs::new()
                            .with("axes", ints(&[0]))
                            .with("keep_dims", AttrValue::Bool(true)),
                    },
                ),
                ("a negative axis of a 3-D input", reduce(&[2, 3, 2], &[-2])),
                ("rank 0", reduce(&[], &[])),
                ("[0, 3] over axis 1", reduce(&[0, 3], &[1])),
            ];
            // A sum of nothing is 0; a maximum, minimum or mean of nothing has no value.
            if op == "ReduceSum" {
                cases.push(("[0, 3] over axis 0", reduce(&[0, 3], &[0])));
            }
            cases
        }
        "Cast" => {
            let cast = |shape: &[i64]| Sample {
                inputs: vec![t(shape, 1.0)],
                attrs: Attrs::new().with("dtype", AttrValue::DType(DType::F64)),
            };
            vec![("rank 0", cast(&[])), ("[0]", cast(&[0]))]
        }
        "Select" => {
            let condition = |shape: &[i64]| counting(shape, 1.0, DType::Bool);
            vec![
                (
                    "rank-0 condition",
                    Sample {
                        inputs: vec![condition(&[]), t(&[2, 3], 1.0), t(&[3], 10.0)],
                        attrs: none(),
                    },
                ),
                (
                    "[0, 3]",
                    Sample {
                        inputs: vec![condition(&[0, 3]), t(&[0, 3], 1.0), t(&[3], 10.0)],
                        attrs: none(),
                    },
                ),
            ]
        }
        "BroadcastTo" | "Reshape" => {
            let to = |x: Input, shape: &[i64]| Sample {
                inputs: vec![x],
                attrs: Attrs::new().with("shape", ints(shape)),
            };
            if op == "BroadcastTo" {
                vec![
                    ("rank 0 to [2, 3]", to(t(&[], 5.0), &[2, 3])),
                    ("[3] to [0, 3]", to(t(&[3], 1.0), &[0, 3])),
                ]
            } else {
                vec![
                    ("rank 0 to [1, 1]", to(t(&[], 5.0), &[1, 1])),
                    ("[0, 3] to [3, 0]", to(t(&[0, 3], 1.0), &[3, 0])),
                ]
            }
        }
        "Transpose" => {
            let transpose = |shape: &[i64], perm: &[i64]| Sample {
                inputs: vec![t(shape, 1.0)],
                attrs: Attrs::new().with("perm", ints(perm)),
            };
            vec![
                ("rank 0", transpose(&[], &[])),
                ("[0, 3]", transpose(&[0, 3], &[1, 0])),
            ]
        }
        "Concat" => vec![(
            "[0, 3] and [2, 3]",
            Sample {
                inputs: vec![t(&[0, 3], 1.0), t(&[2, 3], 1.0)],
                attrs: Attrs::new().with("axis", AttrValue::Int(0)),
            },
        )],
        "Slice" => vec![(
            "a slice of size 0",
            Sample {
                inputs: vec![t(&[3, 4], 1.0)],
                attrs: Attrs::new()
                    .with("begin", ints(&[1, 1]))
                    .with("size", ints(&[0, 2])),
            },
        )],
        "AddN" => vec![
            ("rank 0", two(t(&[], 1.0), t(&[], 2.0))),
            ("[0, 3]", two(t(&[0, 3], 1.0), t(&[0, 3], 2.0))),
        ],
        _ => Vec::new(),
    };
    // The other samples hold small whole numbers, which every float dtype adds and multiplies
    // exactly: a kernel that rounds wrongly (truncating an f16) or loses a sign passes them.
    // Signed fractions round in every elementwise op; halfway cases tell how.
    if dtype.is_float() {
        let f = |shape: &[i64], seed: usize| fractions(shape, seed, dtype);
        match op {
            "Add" | "Sub" | "Mul" | "Div" | "Maximum" | "Minimum" | "Pow" | "Equal"
            | "NotEqual" | "Less" | "LessEqual" | "Greater" | "GreaterEqual" => {
                cases.push(("signed fractions", two(f(&[2, 3], 0), f(&[2, 3], 1))))
            }
            "Neg" | "Abs" | "Relu" | "Exp" | "Log" | "Tanh" | "Sqrt" | "Rsqrt" | "Sigmoid"
            | "Gelu" => cases.push((
                "signed fractions",
                Sample {
                    inputs: vec![f(&[7], 0)],
                    attrs: none(),
                },
            )),
            _ => {}
        }
        cases.extend(ties(op, dtype).map(|s| ("halfway cases", s)));
    }
    cases
}

/// Sums, differences and products exactly halfway between two neighbours in `dtype`, for
/// `Add`, `Sub` and `Mul`: each rounds to the even neighbour (its last bit 0), which is the one
/// nearer zero for the first and third sums and differences and for every product, so that
/// rounding halfway cases away from zero gets them wrong, and truncating gets the others wrong.
/// The inputs are exact in `dtype`; `None` for other ops and for dtypes that do not round.
fn ties(op: &str, dtype: DType) -> Option<Sample> {
    // The bits after the point: a unit in the last place of 1 is 2^-bits.
    let bits = match dtype {
        DType::F16 => 10,
        DType::BF16 => 7,
        DType::F32 => 23,
        DType::F64 => 52,
        _ => return None,
    };
    let ulp = 2f64.powi(-bits);
    let half = ulp / 2.0;
    // 1 + half: even below (1); 1 + 3 half: even above; the same negated; 1 + ulp + half:
    // even above. Sub subtracts the negated addends.
    let (x, y) = match op {
        "Add" => (
            vec![1.0, 1.0, -1.0, 1.0 + ulp],
            vec![half, 3.0 * half, -half, half],
        ),
        "Sub" => (
            vec![1.0, 1.0, -1.0, 1.0 + ulp],
            vec![-half, -3.0 * half, half, -half],
        ),
        // (1 + 2^-2)(1 + 2^-(bits-1)) = 1 + 2^-2 + 2^-(bits-1) + half: even below.
        "Mul" => {
            let (a, b) = (1.25, 1.0 + 2f64.powi(1 - bits));
            (vec![a, -a, a, -a], vec![b, b, -b, -b])
        }
        _ => return None,
    };
    let input = |values: Vec<f64>| Input {
        shape: vec![values.len() as i64],
        values,
        dtype,
    };
    Some(Sample {
        inputs: vec![input(x), input(y)],
        attrs: Attrs::new(),
    })
}

/// Signed fractions of `dtype` (none a whole number, none 0): -1.525, 0.55, -0.55, … for
/// `seed` 0.
fn fractions(shape: &[i64], seed: usize, dtype: DType) -> Input {
    let n = shape.iter().product::<i64>() as usize;
    let value = |i: usize| {
        let k = ((i * 7 + seed * 3) % 11) as f64 - 5.0;
        k * 0.325 + 0.1 * (seed as f64 + 1.0) * if i.is_multiple_of(2) { 1.0 } else { -1.0 }
    };
    Input {
        shape: shape.to_vec(),
        values: (0..n).map(value).collect(),
        dtype,
    }
}

/// A CPU tensor of `input` (built as f64, cast to its dtype by the CPU device).
fn cpu_tensor(rt: &Runtime, cpu: &Arc<Device>, input: &Input) -> Result<Tensor> {
    let t = Tensor::from_slice(cpu, &input.shape, &input.values)?;
    if input.dtype == DType::F64 {
        return Ok(t);
    }
    cast(rt, cpu, &t, input.dtype)
}

/// Run options for `dev` without soft placement: an op runs there or fails.
fn strictly_on(dev: &Arc<Device>) -> RunOptions {
    RunOptions {
        device: Some(dev.clone()),
        soft_placement: Some(false),
    }
}

/// `t` cast to `dtype` on the CPU device.
fn cast(rt: &Runtime, cpu: &Arc<Device>, t: &Tensor, dtype: DType) -> Result<Tensor> {
    let mut out = rt.run(
        &rt.op("Cast")?,
        std::slice::from_ref(t),
        &Attrs::new().with("dtype", AttrValue::DType(dtype)),
        &strictly_on(cpu),
    )?;
    out.pop()
        .ok_or_else(|| Error::internal("Cast gave no output"))
}

/// Ops whose results every correct kernel gives bit for bit (one correctly rounded
/// operation, or none): in every dtype but for `Div` in f32 and f64 ([`exact`]).
const EXACT: [&str; 18] = [
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Neg",
    "Abs",
    "Maximum",
    "Minimum",
    "Relu",
    "Select",
    "Cast",
    "BroadcastTo",
    "Reshape",
    "Transpose",
    "Concat",
    "Slice",
    "Fill",
    "Iota",
];

/// Whether every correct kernel computes `op` in `dtype` as the CPU does, bit for bit: an op
/// of [`EXACT`], one rounding of an exact result (an add, a product, a quotient) or no
/// arithmetic at all, is computed the same by every device that rounds to nearest, ties to
/// even (in f16 and bf16 the CPU computes through f32 and rounds once, as a correct half unit
/// does). Except a quotient in f32 and f64: accelerators commonly divide by a refined
/// reciprocal, within an ulp, and CUDA's fast-math division is no bug in a plugin.
fn exact(op: &str, dtype: DType) -> bool {
    let float_div = op == "Div" && matches!(dtype, DType::F32 | DType::F64);
    EXACT.contains(&op) && !float_div
}

/// How many bytes follow each output of a kernel `devplug check` runs, and what they hold.
const GUARD_BYTES: u64 = 256;
const GUARD_VALUE: u8 = 0xA5;

/// An output tensor on `dev` whose buffer holds [`GUARD_BYTES`] more bytes of [`GUARD_VALUE`]
/// after its contents ([`check_guard`] reads them after the kernel).
fn guarded_output(dev: &Arc<Device>, dtype: DType, shape: &[i64]) -> Result<Tensor> {
    let bytes = crate::tensor::byte_size(dtype, shape)?;
    let buffer = dev.allocate(bytes + GUARD_BYTES)?;
    buffer.write(bytes, &[GUARD_VALUE; GUARD_BYTES as usize])?;
    Tensor::from_buffer(buffer, dtype, shape)
}

/// The guard bytes after a [`guarded_output`]'s contents are as they were made.
fn check_guard(t: &Tensor) -> Result<()> {
    let mut guard = [0u8; GUARD_BYTES as usize];
    t.buffer().read(t.byte_size(), &mut guard)?;
    let changed = guard.iter().filter(|&&b| b != GUARD_VALUE).count();
    match guard.iter().position(|&b| b != GUARD_VALUE) {
        None => Ok(()),
        Some(at) => Err(Error::internal(format!(
            "the kernel wrote past the end of the output: {changed} of the {GUARD_BYTES} bytes \
             after its {} changed, the first at byte offset {}",
            t.byte_size(),
            t.byte_size() + at as u64
        ))),
    }
}

/// Runs `k`'s op on `dev` with `sample` of `dtype` with kernel `k` alone, and checks that the
/// result equals the CPU device's, that nothing was written past the outputs (a guard after
/// each), and that the inputs are unchanged.
fn run_kernel_sample(
    rt: &Runtime,
    dev: &Arc<Device>,
    k: &KernelDef,
    sample: &Sample,
    dtype: DType,
) -> Result<()> {
    let cpu = rt.cpu_device()?;
    let op = rt.op(&k.op)?;
    let on_cpu = sample.cpu_inputs(rt, &cpu)?;
    let on_dev: Vec<Tensor> = on_cpu
        .iter()
        .map(|t| t.copy_to(dev))
        .collect::<Result<_>>()?;
    // This kernel alone: not the plugin's other kernels for the op (one above it by priority
    // would take the inputs first), nor any fallback after it declined. Each output is
    // followed by guard bytes in its buffer, where nothing may write.
    let got =
        crate::dispatch::run_kernel_alone(rt, &op, k, dev, &on_dev, &sample.attrs, &|d, s| {
            guarded_output(dev, d, s)
        })?;
    dev.synchronize()?;
    for (i, t) in got.iter().enumerate() {
        check_guard(t)
            .map_err(|e| e.context(format!("output {i} ({} {:?})", t.dtype(), t.shape())))?;
    }
    for (i, (d, c)) in on_dev.iter().zip(&on_cpu).enumerate() {
        let (mut now, mut given) = (
            vec![0u8; d.byte_size() as usize],
            vec![0u8; c.byte_size() as usize],
        );
        d.read_bytes(&mut now)?;
        c.read_bytes(&mut given)?;
        expect(
            now == given,
            &format!(
                "the kernel changed its input {i} ({} {:?}): inputs are read-only",
                d.dtype(),
                d.shape()
            ),
        )?;
    }
    let want = rt.run(&op, &on_cpu, &sample.attrs, &strictly_on(&cpu))?;
    expect(got.len() == want.len(), "a different number of outputs")?;
    for (i, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        expect(
            g.shape() == w.shape() && g.dtype() == w.dtype(),
            &format!(
                "output {i} is {:?} {:?}, the CPU's {:?} {:?}",
                g.dtype(),
                g.shape(),
                w.dtype(),
                w.shape()
            ),
        )?;
        let g = cast(rt, &cpu, &g.copy_to(&cpu)?, DType::F64)?.to_vec::<f64>()?;
        let w = cast(rt, &cpu, w, DType::F64)?.to_vec::<f64>()?;
        // A kernel may round differently from the CPU's (another order of a sum, a fused
        // multiply-add): a few units in the last place of the dtype. But not in an op that
        // is one rounding of an exact result or no arithmetic at all ([`exact`]).
        let tolerance = match dtype {
            _ if exact(&k.op, dtype) => 0.0,
            DType::F32 => 1e-5,
            DType::F16 => 4e-3,
            DType::BF16 => 3e-2,
            _ => 1e-12,
        };
        for (j, (a, b)) in g.iter().zip(w.iter()).enumerate() {
            // Equal infinities (an overflow both rounded alike) and NaN on both sides agree.
            let agree = a == b
                || (a.is_nan() && b.is_nan())
                || (a - b).abs() <= tolerance * b.abs().max(1.0);
            expect(agree, &format!("output {i}[{j}] is {a}, the CPU's {b}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime of the CPU device alone (no plugin discovery), and its `CPU:0`.
    fn cpu_runtime() -> (Runtime, Arc<Device>) {
        let rt = Runtime::new(RuntimeOptions {
            discover_from_env: false,
            ..Default::default()
        })
        .unwrap();
        let cpu = rt.cpu_device().unwrap();
        (rt, cpu)
    }

    /// True when `sample` runs its op with `dtype`: an input has it, or its `dtype` attribute.
    fn uses(sample: &Sample, dtype: DType) -> bool {
        sample.inputs.iter().any(|i| i.dtype == dtype)
            || matches!(sample.attrs.get("dtype"), Some(AttrValue::DType(d)) if *d == dtype)
    }

    /// The halfway cases are halfway, and the CPU rounds them to even: the first and third
    /// sums and differences and every product to the neighbour nearer zero, the others away
    /// from it.
    #[test]
    fn halfway_cases_round_to_even_on_the_cpu() {
        let (rt, cpu) = cpu_runtime();
        for (dtype, bits) in [
            (DType::F16, 10),
            (DType::BF16, 7),
            (DType::F32, 23),
            (DType::F64, 52),
        ] {
            let ulp = 2f64.powi(-bits);
            for op in ["Add", "Sub", "Mul"] {
                let s = ties(op, dtype).unwrap();
                let inputs: Vec<Tensor> = s
                    .inputs
                    .iter()
                    .map(|i| cpu_tensor(&rt, &cpu, i).unwrap())
                    .collect();
                let y = rt
                    .run(&rt.op(op).unwrap(), &inputs, &s.attrs, &strictly_on(&cpu))
                    .unwrap();
                let got = cast(&rt, &cpu, &y[0], DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                let want = match op {
                    "Mul" => {
                        let down = 1.25 + 2f64.powi(1 - bits);
                        vec![down, -down, -down, down]
                    }
                    _ => vec![1.0, 1.0 + 2.0 * ulp, -1.0, 1.0 + 2.0 * ulp],
                };
                assert_eq!(got, want, "{op} {dtype:?}");
            }
        }
        assert!(ties("Div", DType::F32).is_none() && ties("Add", DType::I32).is_none());
    }

    /// An own op's attributes are changed for another comparison: the floats together, each
    /// int up and down alone, each bool flipped alone; lists, dtypes and strings never.
    #[test]
    fn attribute_changes_cover_floats_ints_and_bools() {
        use crate::op::{AttrDef, AttrType};
        let def = |name, ty, default| AttrDef {
            name,
            ty,
            default: Some(default),
        };
        let defs = [
            def("beta", AttrType::Float, AttrValue::Float(1.0)),
            def("k", AttrType::Int, AttrValue::Int(-1)),
            def("keep", AttrType::Bool, AttrValue::Bool(false)),
            def("alpha", AttrType::Float, AttrValue::Float(0.0)),
            def("axes", AttrType::Ints, AttrValue::Ints(vec![0])),
            def("dtype", AttrType::DType, AttrValue::DType(DType::F32)),
        ];
        let changes = attribute_changes(&defs);
        let labels: Vec<&str> = changes.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            labels,
            [
                "beta = 1.75, alpha = 0.25",
                "k = 0",
                "k = -2",
                "keep = true"
            ]
        );
        assert_eq!(changes[0].1.get("beta"), Some(&AttrValue::Float(1.75)));
        assert_eq!(changes[0].1.get("k"), None, "ints keep their default");
        assert_eq!(changes[2].1.get("k"), Some(&AttrValue::Int(-2)));
        assert_eq!(changes[3].1.get("keep"), Some(&AttrValue::Bool(true)));
        assert_eq!(changes[3].1.get("beta"), None, "one change at a time");
        assert!(attribute_changes(&defs[4..]).is_empty());
    }

    /// Every basis op and composite has a sample for every dtype it takes, and every sample is a
    /// valid call of its op (attribute names, shapes, dtypes): it runs on the CPU device.
    #[test]
    fn every_sample_runs_on_the_cpu() {
        let (rt, cpu) = cpu_runtime();
        let mut sampled = Vec::new();
        for name in rt.ops().names() {
            for dtype in SAMPLED.into_iter().filter(|&d| op_takes(&rt, &name, d)) {
                // Ops without type variables (Fill, Iota) check their dtype attribute
                // themselves: only the dtypes they make have a sample.
                let Some(sample) = sample(&name, dtype) else {
                    let untyped = rt.op(&name).unwrap().def().type_vars.is_empty();
                    assert!(untyped, "no sample for {name} ({dtype:?})");
                    continue;
                };
                let inputs: Vec<Tensor> = sample
                    .inputs
                    .iter()
                    .map(|i| cpu_tensor(&rt, &cpu, i).unwrap())
                    .collect();
                let out = rt
                    .run(
                        &rt.op(&name).unwrap(),
                        &inputs,
                        &sample.attrs,
                        &RunOptions::default(),
                    )
                    .unwrap_or_else(|e| panic!("{name} ({dtype:?}): {e}"));
                assert!(!out.is_empty(), "{name}");
                assert!(uses(&sample, dtype), "{name} ({dtype:?})");
                sampled.push(name.clone());
                for (label, edge) in edge_samples(&name, dtype) {
                    let inputs: Vec<Tensor> = edge
                        .inputs
                        .iter()
                        .map(|i| cpu_tensor(&rt, &cpu, i).unwrap())
                        .collect();
                    rt.run(
                        &rt.op(&name).unwrap(),
                        &inputs,
                        &edge.attrs,
                        &RunOptions::default(),
                    )
                    .unwrap_or_else(|e| panic!("{name} ({dtype:?}, {label}): {e}"));
                    assert!(uses(&edge, dtype), "{name} ({dtype:?}) {label}");
                }
            }
        }
        for name in rt.ops().names() {
            assert!(sampled.contains(&name), "no sample for {name}");
        }
    }

    /// An op defined in text gets inputs from its signature, once per dtype of its first type
    /// variable, and they run; one with an attribute without a default gets none.
    #[test]
    fn an_own_op_is_sampled_from_its_signature() {
        use crate::op::text::{parse, OpText};
        let rt = Runtime::new(RuntimeOptions {
            discover_from_env: false,
            ..Default::default()
        })
        .unwrap();
        let define = |name: &str, inputs: &str, attrs: &str, body: &str| {
            let text = OpText {
                name: name.into(),
                inputs: inputs.into(),
                outputs: "y: T".into(),
                type_vars: "T: {f32, f64}".into(),
                attrs: attrs.into(),
                body: body.into(),
            };
            let def = parse(&text, &|n| rt.op(n).ok()).unwrap();
            rt.register_op(def).unwrap();
        };
        define("t.Scaled", "x: T", "beta: float = 2.0", "y = Mul(x, @beta)");
        define("t.Pick", "c: bool, a: T, b: T", "", "y = Select(c, a, b)");
        define("t.Needs", "x: T", "beta: float", "y = Mul(x, @beta)");
        let cpu = rt.cpu_device().unwrap();
        for op in ["t.Scaled", "t.Pick"] {
            for dtype in [DType::F32, DType::F64] {
                let sample = own_op_sample(&rt, op, dtype).unwrap_or_else(|| panic!("{op}"));
                assert!(sample.inputs.iter().any(|i| i.dtype == dtype), "{op}");
                let inputs: Vec<Tensor> = sample
                    .inputs
                    .iter()
                    .map(|i| cpu_tensor(&rt, &cpu, i).unwrap())
                    .collect();
                let out = rt
                    .run(
                        &rt.op(op).unwrap(),
                        &inputs,
                        &sample.attrs,
                        &strictly_on(&cpu),
                    )
                    .unwrap_or_else(|e| panic!("{op} ({dtype:?}): {e}"));
                assert_eq!(out[0].dtype(), dtype, "{op}");
            }
            assert!(own_op_sample(&rt, op, DType::I32).is_none(), "{op}");
        }
        assert_eq!(
            own_op_sample(&rt, "t.Pick", DType::F32).unwrap().inputs[0].dtype,
            DType::Bool
        );
        assert!(own_op_sample(&rt, "t.Needs", DType::F32).is_none());
        // A basis op has its own sample.
        assert!(own_op_sample(&rt, "Add", DType::F32).is_none());
    }
}
