//! Dispatch: running an op on a device, with the fallback order of DESIGN.md:
//! (1) a native kernel on the device; (2) the op's decomposition, expanded on the device
//! (recursively); (3) soft placement to the CPU, copying what is needed, unless strict;
//! (4) an error listing where kernels for the op exist. A native kernel that declines the
//! inputs it was given (returns `UNIMPLEMENTED`: a dtype pair, an attribute value it does not
//! handle) counts as absent for them: (2) to (4) follow. Every step is visible in the
//! placement log.
//!
//! The hot path parses nothing and hashes no string: hosts hold an [`OpHandle`], and the
//! choice for (op, device, dtype) is cached in a table readers load without locking
//! (`plan`), recomputed when kernels are registered.

mod plan;

use std::sync::Arc;

pub(crate) use plan::{Plan, Plans};

use crate::device::Device;
use crate::error::{Code, Error, Result};
use crate::kernel::{KernelContext, KernelDef};
use crate::op::{Attrs, Emitter, InferContext, OpHandle, Outputs, SpecRef, TensorSpec};
use crate::placement::Reason;
use crate::runtime::Runtime;
use crate::tensor::{DType, Tensor};
use crate::trace::{DeviceSpanStart, Span, SpanKind};

/// How deep decompositions may nest before dispatch gives up (a cycle guard).
const MAX_DEPTH: usize = 32;

/// Options of one op run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// The device to run on; `None`: where the device scopes entered on this thread place the
    /// op (see [`crate::scope`]), else the runtime's default device (`CPU:0`).
    pub device: Option<Arc<Device>>,
    /// Overrides the runtime's soft-placement setting for this run (`Some(false)`: strict).
    pub soft_placement: Option<bool>,
}

impl RunOptions {
    /// Options that run the op on `device`: `rt.run(&op, &inputs, &attrs, &RunOptions::on(&gpu))`.
    pub fn on(device: &Arc<Device>) -> RunOptions {
        RunOptions {
            device: Some(device.clone()),
            soft_placement: None,
        }
    }

    /// The same options in strict mode: no soft placement to the CPU for this run (an op the
    /// device cannot run, natively or by its decomposition, is an error).
    pub fn strict(self) -> RunOptions {
        RunOptions {
            soft_placement: Some(false),
            ..self
        }
    }

    /// The same options with soft placement to the CPU on or off for this run, whatever the
    /// runtime's setting.
    pub fn soft_placement(self, on: bool) -> RunOptions {
        RunOptions {
            soft_placement: Some(on),
            ..self
        }
    }
}

/// How an op would run on a device for a dtype ([`Runtime::kernel_choice`]): the step of the
/// fallback order that applies, known without running anything. A kernel may still decline
/// the inputs of a run (`UNIMPLEMENTED`), which goes on to the next step then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelChoice {
    /// A kernel of the device: the highest priority among those for the op, the device's
    /// platform and type, and the dtype.
    Native {
        /// Who registered it (`built-in`, `plugin 'devplug_sim'`, `host`).
        source: String,
        /// Its priority.
        priority: i32,
    },
    /// No kernel on the device; the op's decomposition runs there, each of its ops chosen the
    /// same way when it runs (ask for them too, or watch the placement log).
    Decomposition,
    /// No kernel or decomposition on the device: soft placement runs it with the CPU's kernel
    /// (from `source`), its inputs copied there; in strict mode the run fails.
    SoftPlacement {
        /// Who registered the CPU's kernel.
        source: String,
    },
    /// No kernel for it on the device or the CPU, and no decomposition: a run fails
    /// (`NOT_FOUND`, listing where kernels for the op exist).
    Unavailable,
}

/// [`Runtime::kernel_choice`].
pub(crate) fn kernel_choice(
    rt: &Runtime,
    op: &OpHandle,
    device: &Device,
    dtype: Option<DType>,
) -> Result<KernelChoice> {
    if !rt.owns_op(op) || !rt.owns(device) {
        return Err(Error::invalid_argument(format!(
            "{}: the op or device {} is another runtime's",
            op.name(),
            device.qualified_name()
        )));
    }
    if let Some(var) = op.def().type_vars.first() {
        match dtype {
            Some(d) if var.allowed.contains(&d) => {}
            Some(d) => {
                return Err(Error::invalid_argument(format!(
                    "{}: its type variable {} takes {}, not {d}",
                    op.name(),
                    var.name,
                    var.allowed_names()
                )))
            }
            None => {
                return Err(Error::invalid_argument(format!(
                    "{}: name the dtype of its type variable {} ({})",
                    op.name(),
                    var.name,
                    var.allowed_names()
                )))
            }
        }
    }
    Ok(match compute_plan(rt, op, device, dtype) {
        Plan::Native(k) => KernelChoice::Native {
            source: k.source.clone(),
            priority: k.priority,
        },
        Plan::Decompose => KernelChoice::Decomposition,
        Plan::SoftPlace(k) => KernelChoice::SoftPlacement {
            source: k.source.clone(),
        },
        Plan::Missing => KernelChoice::Unavailable,
    })
}

fn key(op: &OpHandle, device: &Device, dtype: Option<DType>) -> u64 {
    (op.index() as u64) << 32 | (device.index() as u64) << 8 | dtype.map_or(0, |d| d as u64)
}

fn compute_plan(rt: &Runtime, op: &OpHandle, device: &Device, dtype: Option<DType>) -> Plan {
    let info = &device.platform().info;
    if let Some(k) = rt
        .kernels()
        .resolve(op.name(), &info.name, &info.device_type, dtype)
    {
        return Plan::Native(k);
    }
    if op.def().decomposition.is_some() {
        return Plan::Decompose;
    }
    if let Ok(cpu) = rt.cpu_device() {
        let ci = &cpu.platform().info;
        if let Some(k) = rt
            .kernels()
            .resolve(op.name(), &ci.name, &ci.device_type, dtype)
        {
            return Plan::SoftPlace(k);
        }
    }
    Plan::Missing
}

/// Runs `op` with `inputs` and `attrs` as `options` say, appending its outputs to `out`
/// (nothing is appended on error).
pub(crate) fn run(
    rt: &Runtime,
    op: &OpHandle,
    inputs: &[Tensor],
    attrs: &Attrs,
    options: &RunOptions,
    out: &mut Outputs,
) -> Result<()> {
    run_on(
        rt,
        op,
        inputs,
        attrs,
        options.device.as_ref(),
        options.soft_placement,
        out,
    )
}

/// [`run`] with the run options' fields borrowed (a binding that holds the device by
/// reference runs without cloning its `Arc`).
pub(crate) fn run_on(
    rt: &Runtime,
    op: &OpHandle,
    inputs: &[Tensor],
    attrs: &Attrs,
    device: Option<&Arc<Device>>,
    soft_placement: Option<bool>,
    out: &mut Outputs,
) -> Result<()> {
    // Plans are cached by the op's and the device's positions in this runtime: another
    // runtime's handle would find the plan of whatever sits there here.
    if !rt.owns_op(op) {
        return Err(Error::invalid_argument(format!(
            "op {}: the op handle was resolved by another runtime; resolve it with this one",
            op.name()
        )));
    }
    if let Some(d) = device.filter(|d| !rt.owns(d)) {
        return Err(Error::invalid_argument(format!(
            "{}: device {} is a device of another runtime",
            op.name(),
            d.qualified_name()
        )));
    }
    let soft = soft_placement.unwrap_or_else(|| rt.soft_placement());
    let scoped;
    let (device, reason) = match device {
        Some(d) => (d, Reason::Explicit),
        None => match crate::scope::place(rt, op.name())? {
            Some((d, reason)) => {
                scoped = d;
                (&scoped, reason)
            }
            None => (rt.default_device(), Reason::Default),
        },
    };
    let start = out.len();
    let r = execute(
        rt, op, device, inputs, &NoCopies, attrs, soft, reason, 0, out,
    );
    if r.is_err() {
        out.truncate(start);
    }
    r
}

/// Where an input that must move to another device may already be there: a graph's constant
/// keeps one copy per device for all its runs (`index` is the input's position). Dispatch is
/// generic over it, so that eager ops ([`NoCopies`]) pay nothing for it.
pub(crate) trait InputCopies {
    /// The input `index` on `device`, when this source keeps it (made now if need be);
    /// `None`: copy it as any input.
    fn on(&self, index: usize, device: &Arc<Device>) -> Option<Result<Tensor>>;

    /// What input `index` is, for the placement log of its copy (a graph's `graph node 'x'`);
    /// `None`: nothing more than its device.
    fn describe(&self, _index: usize) -> Option<String> {
        None
    }
}

/// Eager ops and the ops of a decomposition: no input is kept anywhere.
struct NoCopies;

impl InputCopies for NoCopies {
    #[inline(always)]
    fn on(&self, _: usize, _: &Arc<Device>) -> Option<Result<Tensor>> {
        None
    }
}

/// Runs `op` on a device placement already chose (a graph node's), logging `reason` for it;
/// the fallback order applies as for any op. An input the op needs on another device than its
/// own is taken from `copies` when it keeps one there. Outputs are appended to `out` (nothing
/// on error).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_placed(
    rt: &Runtime,
    op: &OpHandle,
    device: &Arc<Device>,
    reason: Reason,
    inputs: &[Tensor],
    copies: &impl InputCopies,
    attrs: &Attrs,
    soft: bool,
    out: &mut Outputs,
) -> Result<()> {
    let start = out.len();
    let r = execute(rt, op, device, inputs, copies, attrs, soft, reason, 0, out);
    if r.is_err() {
        out.truncate(start);
    }
    r
}

/// The op's checks and shape function for inputs of `specs`, then `then` with their results:
/// the dtype kernels are chosen by (the op's first type variable, else its first output's),
/// the attributes with defaults, and the outputs' specs. A continuation rather than a returned
/// tuple: returning the output specs moved them, ≈ 70 instructions per eager op (callgrind).
#[inline(always)]
fn infer<R>(
    op: &OpHandle,
    specs: &[SpecRef],
    attrs: &Attrs,
    then: impl FnOnce(Option<DType>, &Attrs, &[TensorSpec]) -> Result<R>,
) -> Result<R> {
    let def = op.def();
    let dtype = op.0.check_inputs(specs)?;
    let attrs = attrs.complete(&def.name, &def.attrs)?;
    let outputs = (def.shape_fn)(&InferContext {
        op: &def.name,
        inputs: specs,
        attrs: &attrs,
    })?;
    if op.0.check_specs {
        crate::op::check_specs(def, specs, &attrs, &outputs)?;
    }
    let kernel_dtype = dtype.or_else(|| outputs.first().map(|o| o.dtype));
    then(kernel_dtype, &attrs, &outputs)
}

/// Runs `op` on `device` with `kernel` alone, one of the kernels registered for the op there:
/// no other kernel, decomposition or soft placement, so a kernel that declines the inputs
/// fails the run with its own `UNIMPLEMENTED` error (in the context `run_kernel` gives every
/// kernel error; [`kernel_message`] takes it off). Inputs elsewhere are copied to `device`; each
/// output is what `output(dtype, shape)` makes (a tensor on `device`: `devplug check` puts
/// guard bytes after each). Nothing is logged or traced. `devplug check` tests each kernel of
/// a plugin this way, also one below another of the plugin's kernels for the same op, which
/// dispatch runs only where the one above declines.
pub(crate) fn run_kernel_alone(
    rt: &Runtime,
    op: &OpHandle,
    kernel: &KernelDef,
    device: &Arc<Device>,
    inputs: &[Tensor],
    attrs: &Attrs,
    output: &dyn Fn(DType, &[i64]) -> Result<Tensor>,
) -> Result<Outputs> {
    if !rt.owns_op(op) || !rt.owns(device) {
        return Err(Error::invalid_argument(format!(
            "{}: the op or device {} is another runtime's",
            op.name(),
            device.qualified_name()
        )));
    }
    let specs: Vec<SpecRef> = inputs.iter().map(SpecRef::from).collect();
    infer(op, &specs, attrs, |dtype, attrs, outputs| {
        let info = &device.platform().info;
        if !kernel.matches(op.name(), &info.name, &info.device_type) || !kernel.accepts(dtype) {
            return Err(Error::invalid_argument(format!(
                "{} on {}{}: {kernel:?} is not a kernel for it",
                op.name(),
                device.qualified_name(),
                dtype.map_or(String::new(), |d| format!(" for {d}"))
            )));
        }
        with_inputs_on(rt, op, device, inputs, &NoCopies, |there| {
            let mut out = Outputs::new();
            for (i, o) in outputs.iter().enumerate() {
                out.push(output(o.dtype, &o.shape).map_err(|e| output_error(op, i, e))?);
            }
            (kernel.func)(&KernelContext {
                device,
                inputs: there,
                outputs: &out,
                attrs,
            })
            .map_err(|e| e.context(kernel_context(op.name(), kernel, device)))?;
            Ok(out)
        })
    })
}

#[allow(clippy::too_many_arguments)]
fn execute(
    rt: &Runtime,
    op: &OpHandle,
    device: &Arc<Device>,
    inputs: &[Tensor],
    copies: &impl InputCopies,
    attrs: &Attrs,
    soft: bool,
    reason: Reason,
    depth: usize,
    out: &mut Outputs,
) -> Result<()> {
    // The inputs' dtypes and shapes, on the stack for the common case of few inputs.
    let mut small = [SpecRef {
        dtype: DType::F32,
        shape: &[],
    }; 4];
    let large: Vec<SpecRef>;
    let specs: &[SpecRef] = if inputs.len() <= 4 {
        for (s, t) in small.iter_mut().zip(inputs) {
            *s = SpecRef::from(t);
        }
        &small[..inputs.len()]
    } else {
        large = inputs.iter().map(SpecRef::from).collect();
        &large
    };
    infer(op, specs, attrs, |kernel_dtype, attrs, outputs| {
        let key = key(op, device, kernel_dtype);
        let generation = rt.kernels().generation();
        let plan = rt.plans().get(key, generation, || {
            compute_plan(rt, op, device, kernel_dtype)
        });
        // What the fallback steps after a declining kernel need (used only then).
        let asked = Request {
            inputs,
            attrs,
            outputs,
            soft,
            reason,
            depth,
        };
        match &*plan {
            Plan::Native(k) => {
                // Written out rather than through `with_inputs_on`: the closure it takes
                // was not inlined here, ≈ 36 instructions per eager op (callgrind).
                let moved: Vec<Tensor>;
                let there = if inputs.iter().all(|t| Arc::ptr_eq(t.device(), device)) {
                    inputs
                } else {
                    moved = copy_inputs(rt, op, device, inputs, copies)?;
                    &moved
                };
                let start = out.len();
                let r = run_kernel(
                    rt, op, k, device, device, there, attrs, outputs, reason, depth, out, None,
                );
                match r {
                    Err(e) if e.code == Code::Unimplemented => {
                        out.truncate(start);
                        declined(
                            rt,
                            op,
                            k,
                            device,
                            copies,
                            &asked,
                            there,
                            kernel_dtype,
                            e,
                            out,
                        )
                    }
                    r => r,
                }
            }
            Plan::Decompose => decompose(
                rt, op, device, inputs, copies, attrs, outputs, soft, reason, depth, out, None,
            ),
            Plan::SoftPlace(k) if soft => {
                soft_place(rt, op, k, device, copies, &asked, kernel_dtype, out)
            }
            Plan::SoftPlace(_) | Plan::Missing => {
                Err(no_kernel(rt, op, device, kernel_dtype, soft))
            }
        }
    })
}

/// Runs `op` placed on `device` with the CPU's kernel `kernel` (the plan found neither kernel
/// nor decomposition on the device), its inputs copied to the CPU; a decline there goes on to
/// the CPU's next kernels. Kept out of `execute`, whose common path is a kernel.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn soft_place(
    rt: &Runtime,
    op: &OpHandle,
    kernel: &Arc<KernelDef>,
    device: &Arc<Device>,
    copies: &impl InputCopies,
    step: &Request,
    dtype: Option<DType>,
    out: &mut Outputs,
) -> Result<()> {
    let cpu = rt.cpu_device()?;
    // What the log says of the device (only while it is on).
    let why = rt.placement().enabled().then(|| not_on(dtype, device));
    with_inputs_on(rt, op, &cpu, step.inputs, copies, |there| {
        let start = out.len();
        let r = run_kernel(
            rt,
            op,
            kernel,
            &cpu,
            device,
            there,
            step.attrs,
            step.outputs,
            Reason::SoftPlaced,
            step.depth,
            out,
            why.as_deref(),
        );
        match r {
            Err(e) if e.code == Code::Unimplemented => {
                out.truncate(start);
                soft_placed_declined(rt, op, kernel, &cpu, device, step, there, dtype, e, out)
            }
            r => r,
        }
    })
}

/// Runs `op` as its decomposition on `device` (the plan found no kernel there), logging and
/// tracing it as such. Kept out of `execute`, whose common path is a kernel.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn decompose(
    rt: &Runtime,
    op: &OpHandle,
    device: &Arc<Device>,
    inputs: &[Tensor],
    copies: &impl InputCopies,
    attrs: &Attrs,
    outputs: &[crate::op::TensorSpec],
    soft: bool,
    reason: Reason,
    depth: usize,
    out: &mut Outputs,
    declined: Option<&str>,
) -> Result<()> {
    let def = op.def();
    if depth >= MAX_DEPTH {
        return Err(Error::internal(format!(
            "{}: decompositions nest deeper than {MAX_DEPTH} levels (a cycle?)",
            def.name
        )));
    }
    rt.placement()
        .note(op.name(), device, Reason::Decomposed, || match declined {
            None => "no kernel on the device; its decomposition runs there".into(),
            Some(why) => format!("{why}; its decomposition runs there"),
        });
    let begun = rt.tracer().on().then(std::time::Instant::now);
    let decomposition = def.decomposition.clone().ok_or_else(|| {
        Error::internal(format!("{}: planned decomposition is missing", def.name))
    })?;
    let mut emitter = DeviceEmitter {
        rt,
        device: device.clone(),
        soft,
        depth: depth + 1,
    };
    // Inputs a source keeps on the device (a graph's constants) are taken there;
    // the decomposition's ops copy the others as they need them.
    let kept: Vec<Tensor>;
    let inputs = if inputs.iter().all(|t| Arc::ptr_eq(t.device(), device)) {
        inputs
    } else {
        kept = inputs_on(device, inputs, copies, |_, t| Ok(t.clone()))?;
        &kept
    };
    let results = decomposition(&mut emitter, inputs, attrs).map_err(|e| {
        e.context(format!(
            "{} (decomposed on {})",
            def.name,
            device.qualified_name()
        ))
    })?;
    check_decomposed(def, outputs, &results)?;
    out.extend(results);
    if let Some(begun) = begun {
        let device = device.qualified_name();
        let span = Span::op(
            op.name(),
            SpanKind::Decomposition,
            &device,
            reason,
            "",
            depth,
        );
        rt.tracer().record(begun, span);
    }
    Ok(())
}

/// What a decomposition returned must be what the op's shape function said (a kernel's outputs
/// are allocated from it): the same op gives the same dtypes and shapes on every device.
fn check_decomposed(
    def: &crate::op::OpDef,
    specs: &[crate::op::TensorSpec],
    results: &[Tensor],
) -> Result<()> {
    if results.len() != specs.len() {
        return Err(Error::invalid_argument(format!(
            "op '{}': its decomposition returned {} output(s); its shape function gives {}",
            def.name,
            results.len(),
            specs.len()
        )));
    }
    for ((t, spec), arg) in results.iter().zip(specs).zip(&def.outputs) {
        if t.dtype() != spec.dtype || t.shape() != &spec.shape[..] {
            return Err(Error::invalid_argument(format!(
                "op '{}': its decomposition returned {} {:?} for output '{}'; its shape \
                 function says {} {:?}",
                def.name,
                t.dtype(),
                t.shape(),
                arg.name,
                spec.dtype,
                &spec.shape[..]
            )));
        }
    }
    Ok(())
}

/// What one op run is asked to do, as the fallback steps after a declining kernel need it.
struct Request<'a> {
    /// The op's inputs, where the host gave them.
    inputs: &'a [Tensor],
    attrs: &'a Attrs,
    outputs: &'a [crate::op::TensorSpec],
    soft: bool,
    reason: Reason,
    depth: usize,
}

/// The native kernel on `device` declined the inputs (`UNIMPLEMENTED`, `error`): the rest of
/// the fallback order as if it were not there — the device's next kernels for the op by
/// priority, else the decomposition on the device, else soft placement to the CPU's kernels —
/// the placement log saying why. Without any, the last kernel's error. `there` holds the
/// inputs on `device`, as the kernel got them: copied there once, they are what the device's
/// next kernels and its decomposition take (soft placement takes `step.inputs`).
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
fn declined(
    rt: &Runtime,
    op: &OpHandle,
    kernel: &Arc<KernelDef>,
    device: &Arc<Device>,
    copies: &impl InputCopies,
    step: &Request,
    there: &[Tensor],
    dtype: Option<DType>,
    error: Error,
    out: &mut Outputs,
) -> Result<()> {
    let why = decline_reason(op, kernel, device, &error);
    let (error, why) = match below(rt, op, kernel, device, dtype) {
        Some(next) => {
            let layered = run_layered(
                rt,
                op,
                next,
                device,
                device,
                there,
                step,
                step.reason,
                dtype,
                why,
                out,
            );
            match layered {
                Layered::Done(r) => return r,
                Layered::Declined(e, why) => (e, why),
            }
        }
        None => (error, why),
    };
    if op.def().decomposition.is_some() {
        return decompose(
            rt,
            op,
            device,
            there,
            copies,
            step.attrs,
            step.outputs,
            step.soft,
            step.reason,
            step.depth,
            out,
            Some(&why),
        );
    }
    let cpu = rt.cpu_device().ok().filter(|c| !Arc::ptr_eq(c, device));
    let cpu_kernel = cpu.as_ref().and_then(|c| {
        let ci = &c.platform().info;
        rt.kernels()
            .resolve(op.name(), &ci.name, &ci.device_type, dtype)
            .map(|k| (c, k))
    });
    match cpu_kernel {
        Some((cpu, k)) if step.soft => {
            let why = format!("{why} and there is no decomposition");
            with_inputs_on(rt, op, cpu, step.inputs, copies, |there| {
                run_layered(
                    rt,
                    op,
                    k,
                    cpu,
                    device,
                    there,
                    step,
                    Reason::SoftPlaced,
                    dtype,
                    why,
                    out,
                )
                .result()
            })
        }
        Some(_) => Err(Error::new(
            error.code,
            format!(
                "{}; {} has no decomposition, and soft placement to the CPU (which has a \
                 kernel) is off (strict mode)",
                error.message,
                op.name()
            ),
        )),
        None => Err(error),
    }
}

/// The CPU's kernel `kernel` declined an op soft-placed there from `placed` (`error`): the
/// CPU's next kernels for the op by priority (with `there`, the inputs as the kernel got them
/// on the CPU); without one that takes it, the last one's error.
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
fn soft_placed_declined(
    rt: &Runtime,
    op: &OpHandle,
    kernel: &Arc<KernelDef>,
    cpu: &Arc<Device>,
    placed: &Arc<Device>,
    step: &Request,
    there: &[Tensor],
    dtype: Option<DType>,
    error: Error,
    out: &mut Outputs,
) -> Result<()> {
    let Some(next) = below(rt, op, kernel, cpu, dtype) else {
        return Err(error);
    };
    let why = format!(
        "{}; {}",
        not_on(dtype, placed),
        decline_reason(op, kernel, cpu, &error)
    );
    run_layered(
        rt,
        op,
        next,
        cpu,
        placed,
        there,
        step,
        Reason::SoftPlaced,
        dtype,
        why,
        out,
    )
    .result()
}

/// The kernel of `device` for the op below `kernel` by priority, for inputs `kernel` declined.
fn below(
    rt: &Runtime,
    op: &OpHandle,
    kernel: &KernelDef,
    device: &Device,
    dtype: Option<DType>,
) -> Option<Arc<KernelDef>> {
    let info = &device.platform().info;
    rt.kernels()
        .resolve_below(op.name(), &info.name, &info.device_type, dtype, kernel)
}

/// How running a device's kernels one after another ended.
enum Layered {
    /// One took the inputs, or failed otherwise: its result.
    Done(Result<()>),
    /// Each declined: the last one's error, and the log's account of the declines.
    Declined(Error, String),
}

impl Layered {
    /// The outcome where nothing comes after these kernels: the last one's error when each
    /// declined.
    fn result(self) -> Result<()> {
        match self {
            Layered::Done(r) => r,
            Layered::Declined(e, _) => Err(e),
        }
    }
}

/// Runs `kernel` on `run_on` (the op was placed on `placed`) with `inputs`, all on `run_on`,
/// and, while the kernel declines, the next of `run_on`'s kernels for the op by priority. `why`
/// says what was declined before (logged with the kernel that runs).
#[allow(clippy::too_many_arguments)]
fn run_layered(
    rt: &Runtime,
    op: &OpHandle,
    kernel: Arc<KernelDef>,
    run_on: &Arc<Device>,
    placed: &Device,
    inputs: &[Tensor],
    step: &Request,
    reason: Reason,
    dtype: Option<DType>,
    why: String,
    out: &mut Outputs,
) -> Layered {
    let (mut kernel, mut why) = (kernel, why);
    loop {
        let start = out.len();
        let r = run_kernel(
            rt,
            op,
            &kernel,
            run_on,
            placed,
            inputs,
            step.attrs,
            step.outputs,
            reason,
            step.depth,
            out,
            Some(&why),
        );
        let e = match r {
            Err(e) if e.code == Code::Unimplemented => e,
            r => return Layered::Done(r),
        };
        out.truncate(start);
        why = format!("{why}; {}", decline_reason(op, &kernel, run_on, &e));
        match below(rt, op, &kernel, run_on, dtype) {
            Some(next) => kernel = next,
            None => return Layered::Declined(e, why),
        }
    }
}

/// What `run_kernel` puts before a kernel's error: `Add on SIM:0 (kernel from plugin 'sim')`.
fn kernel_context(op: &str, kernel: &KernelDef, device: &Device) -> String {
    format!(
        "{op} on {} (kernel from {})",
        device.qualified_name(),
        kernel.source
    )
}

/// A kernel's own message in the `message` of an error `run_kernel` returned for it (op `op`
/// on `device`): without the context before it.
pub(crate) fn kernel_message<'a>(
    op: &str,
    kernel: &KernelDef,
    device: &Device,
    message: &'a str,
) -> &'a str {
    message
        .strip_prefix(&kernel_context(op, kernel, device))
        .and_then(|m| m.strip_prefix(": "))
        .unwrap_or(message)
}

/// `the kernel from plugin 'x' on DEV:0 declined (its message)`: the kernel's own message,
/// without the context `run_kernel` put before it.
fn decline_reason(op: &OpHandle, kernel: &KernelDef, device: &Device, error: &Error) -> String {
    let own = kernel_message(op.name(), kernel, device, &error.message);
    let device = device.qualified_name();
    format!(
        "the kernel from {} on {device} declined ({own})",
        kernel.source
    )
}

fn no_kernel(
    rt: &Runtime,
    op: &OpHandle,
    device: &Device,
    dtype: Option<DType>,
    soft: bool,
) -> Error {
    let places = rt.kernels().locations(op.name());
    let dtype = dtype.map_or(String::new(), |d| format!(" for {d}"));
    let mut msg = format!(
        "{}: no kernel{dtype} on {} (platform {}, type {}) and no decomposition",
        op.name(),
        device.qualified_name(),
        device.platform().info.name,
        device.device_type()
    );
    if !soft {
        msg.push_str("; soft placement to the CPU is off (strict mode)");
    }
    if places.is_empty() {
        msg.push_str("; no device has a kernel for this op");
    } else {
        msg.push_str(&format!("; kernels exist for: {}", places.join(", ")));
    }
    Error::new(crate::error::Code::NotFound, msg)
}

/// Runs `kernel` on `device` (the op was placed on `placed`: the same device, or the one it
/// was soft-placed away from) with `inputs`, all on `device` ([`with_inputs_on`] copies them
/// there), and logs its placement.
#[allow(clippy::too_many_arguments)]
fn run_kernel(
    rt: &Runtime,
    op: &OpHandle,
    kernel: &KernelDef,
    device: &Arc<Device>,
    placed: &Device,
    inputs: &[Tensor],
    attrs: &Attrs,
    outputs: &[crate::op::TensorSpec],
    reason: Reason,
    depth: usize,
    out: &mut Outputs,
    declined: Option<&str>,
) -> Result<()> {
    let begun = rt.tracer().on().then(std::time::Instant::now);
    let start = out.len();
    for (i, o) in outputs.iter().enumerate() {
        match Tensor::output(device, o.dtype, &o.shape) {
            Ok(t) => out.push(t),
            Err(e) => return Err(output_error(op, i, e)),
        }
    }
    // While tracing, the kernel's device span (where the device times events) starts here.
    let on_device = begun.and_then(|_| {
        let stream = device.default_stream();
        DeviceSpanStart::begin(&stream).map(|start| (stream, start))
    });
    (kernel.func)(&KernelContext {
        device,
        inputs,
        outputs: &out[start..],
        attrs,
    })
    .map_err(|e| e.context(kernel_context(op.name(), kernel, device)))?;
    if let Some(begun) = begun {
        let name = device.qualified_name();
        let span = Span::op(
            op.name(),
            SpanKind::Kernel,
            &name,
            reason,
            &kernel.source,
            depth,
        );
        rt.tracer().record(begun, span);
        if let Some((stream, start)) = on_device {
            start.end(&stream, begun, span);
        }
    }
    rt.placement()
        .note(op.name(), device, reason, || match (reason, declined) {
            (Reason::SoftPlaced, None) => format!(
                "{}; kernel from {} on the CPU",
                not_on(None, placed),
                kernel.source
            ),
            (Reason::SoftPlaced, Some(why)) => {
                format!("{why}; kernel from {} on the CPU", kernel.source)
            }
            (_, Some(why)) => format!("kernel from {} after {why}", kernel.source),
            _ => format!("kernel from {}", kernel.source),
        });
    Ok(())
}

/// `f` with `inputs` on `device`: each input elsewhere copied there once (the copy logged for
/// `op`, before the kernel that takes it), or taken from `copies` when it keeps one there.
/// Whatever runs on `device` after a kernel declined takes the same copies.
#[inline(always)]
fn with_inputs_on<R>(
    rt: &Runtime,
    op: &OpHandle,
    device: &Arc<Device>,
    inputs: &[Tensor],
    copies: &impl InputCopies,
    f: impl FnOnce(&[Tensor]) -> Result<R>,
) -> Result<R> {
    if inputs.iter().all(|t| Arc::ptr_eq(t.device(), device)) {
        return f(inputs);
    }
    let moved = copy_inputs(rt, op, device, inputs, copies)?;
    f(&moved)
}

/// [`with_inputs_on`]'s copies, kept off the path where every input is on the device.
#[inline(never)]
fn copy_inputs(
    rt: &Runtime,
    op: &OpHandle,
    device: &Arc<Device>,
    inputs: &[Tensor],
    copies: &impl InputCopies,
) -> Result<Vec<Tensor>> {
    inputs_on(device, inputs, copies, |i, t| {
        rt.placement()
            .note(op.name(), device, Reason::InputCopied, || {
                let from = t.device().qualified_name();
                match copies.describe(i) {
                    Some(what) => format!("input copied from {from} ({what})"),
                    None => format!("input copied from {from}"),
                }
            });
        t.copy_to(device)
    })
}

/// Why an op was soft-placed away from `placed`, for the log: `no f32 kernel or decomposition
/// on SIM:0` (the dtype kernels are chosen by, where the op has one).
fn not_on(dtype: Option<DType>, placed: &Device) -> String {
    let dtype = dtype.map_or(String::new(), |d| format!("{d} "));
    format!(
        "no {dtype}kernel or decomposition on {}",
        placed.qualified_name()
    )
}

/// `inputs` for a run on `device`: those there as they are, the others from `copies` when it
/// keeps them there, else `elsewhere(index, input)`.
fn inputs_on(
    device: &Arc<Device>,
    inputs: &[Tensor],
    copies: &impl InputCopies,
    mut elsewhere: impl FnMut(usize, &Tensor) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if Arc::ptr_eq(t.device(), device) {
                Ok(t.clone())
            } else {
                copies.on(i, device).unwrap_or_else(|| elsewhere(i, t))
            }
        })
        .collect()
}

/// An output's allocation failed (a memory limit, a device out of memory): the error names the
/// op and the output, as the op's other errors do.
#[cold]
#[inline(never)]
fn output_error(op: &OpHandle, index: usize, e: Error) -> Error {
    let name = op
        .def()
        .outputs
        .get(index)
        .map_or_else(|| index.to_string(), |a| format!("'{}'", a.name));
    e.context(format!("{}: output {name}", op.name()))
}

/// Runs a decomposition's ops on one device.
struct DeviceEmitter<'a> {
    rt: &'a Runtime,
    device: Arc<Device>,
    soft: bool,
    depth: usize,
}

impl Emitter for DeviceEmitter<'_> {
    fn op(&mut self, op: &str, inputs: &[Tensor], attrs: &Attrs) -> Result<Outputs> {
        let h = self.rt.ops().find(op)?;
        let mut out = Outputs::new();
        execute(
            self.rt,
            &h,
            &self.device,
            inputs,
            &NoCopies,
            attrs,
            self.soft,
            Reason::Decomposed,
            self.depth,
            &mut out,
        )?;
        Ok(out)
    }

    fn scalar(&mut self, dtype: DType, value: f64) -> Result<Tensor> {
        Tensor::from_bytes(&self.device, dtype, &[], &dtype.scalar_bytes(value))
    }
}
