//! The CPU device's kernels: every basis op (and a native Relu), registered for device type
//! `CPU` bound to the `HOST` platform, adapting tensors to the compute functions of
//! [`kernels`](super::kernels).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::host::kernels::{
    self as k, BinaryOp, CompareOp, CpuContext, ReduceOp, UnaryOp, View, ViewMut,
};
use crate::host::HostPlatform;
use crate::kernel::{Binding, KernelContext, KernelDef, KernelFn};
use crate::op::basis;
use crate::runtime::Runtime;
use crate::tensor::{DType, Tensor};

/// A CPU kernel's tensor `t` (`what`: input or output) in host memory, and its byte size.
fn host_memory(t: &Tensor, what: &str) -> Result<(*mut u8, usize)> {
    let p = t.host_ptr().ok_or_else(|| {
        Error::internal(format!(
            "a CPU kernel got an {what} on {}",
            t.device().name()
        ))
    })?;
    Ok((p, t.byte_size() as usize))
}

fn host_bytes(t: &Tensor) -> Result<&[u8]> {
    let (p, len) = host_memory(t, "input")?;
    if len == 0 {
        return Ok(&[]);
    }
    // SAFETY: the tensor's buffer is host memory (host-visible platform), alive while `t` is
    // borrowed, and at least `byte_size` bytes long.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

#[allow(clippy::mut_from_ref)]
fn host_bytes_mut(t: &Tensor) -> Result<&mut [u8]> {
    let (p, len) = host_memory(t, "output")?;
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: outputs are fresh allocations made by dispatch for this kernel call only: host
    // memory, alive while `t` is borrowed, not aliased by any input or other output.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// Runs `f` with views of the first `N` inputs and the first output (no allocation).
fn with_views<const N: usize>(
    cx: &KernelContext,
    f: impl FnOnce([View; N], ViewMut) -> Result<()>,
) -> Result<()> {
    if cx.inputs.len() < N || cx.outputs.is_empty() {
        return Err(Error::internal(
            "a CPU kernel got too few inputs or outputs",
        ));
    }
    // A plain loop rather than `array::from_fn`: this runs once per eager op.
    let mut views = [View {
        data: &[],
        dtype: DType::F32,
        shape: &[],
    }; N];
    for (v, t) in views.iter_mut().zip(cx.inputs) {
        *v = View {
            data: host_bytes(t)?,
            dtype: t.dtype(),
            shape: t.dims(),
        };
    }
    let o = &cx.outputs[0];
    let out = ViewMut {
        data: host_bytes_mut(o)?,
        dtype: o.dtype(),
        shape: o.dims(),
    };
    f(views, out)
}

/// Runs `f` with views of all inputs (variadic ops) and the first output.
fn with_list(cx: &KernelContext, f: impl FnOnce(&[View], ViewMut) -> Result<()>) -> Result<()> {
    let views = cx
        .inputs
        .iter()
        .map(|t| {
            Ok(View {
                data: host_bytes(t)?,
                dtype: t.dtype(),
                shape: t.dims(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let out = cx
        .outputs
        .first()
        .ok_or_else(|| Error::internal("no output"))?;
    f(
        &views,
        ViewMut {
            data: host_bytes_mut(out)?,
            dtype: out.dtype(),
            shape: out.dims(),
        },
    )
}

fn norm_axis(a: i64, rank: usize) -> usize {
    if a < 0 {
        (a + rank as i64) as usize
    } else {
        a as usize
    }
}

fn kernel_for(op: &str, ctx: CpuContext) -> Option<KernelFn> {
    let binary = |b: BinaryOp| -> KernelFn {
        Arc::new(move |cx: &KernelContext| {
            with_views::<2>(cx, |[a, b2], o| k::binary(&ctx, b, a, b2, o))
        })
    };
    let unary = |u: UnaryOp| -> KernelFn {
        Arc::new(move |cx: &KernelContext| with_views::<1>(cx, |[a], o| k::unary(&ctx, u, a, o)))
    };
    let compare = |c: CompareOp| -> KernelFn {
        Arc::new(move |cx: &KernelContext| {
            with_views::<2>(cx, |[a, b], o| k::compare(&ctx, c, a, b, o))
        })
    };
    let reduce = |r: ReduceOp| -> KernelFn {
        Arc::new(move |cx: &KernelContext| {
            let rank = cx.inputs.first().map_or(0, |t| t.rank());
            let raw = cx.attrs.ints("axes")?;
            let mut axes: Vec<usize> = if raw.is_empty() {
                (0..rank).collect()
            } else {
                raw.iter().map(|a| norm_axis(*a, rank)).collect()
            };
            axes.sort_unstable();
            with_views::<1>(cx, |[a], o| k::reduce(&ctx, r, a, &axes, o))
        })
    };
    Some(match op {
        "Add" => binary(BinaryOp::Add),
        "Sub" => binary(BinaryOp::Sub),
        "Mul" => binary(BinaryOp::Mul),
        "Div" => binary(BinaryOp::Div),
        "Maximum" => binary(BinaryOp::Maximum),
        "Minimum" => binary(BinaryOp::Minimum),
        "Pow" => binary(BinaryOp::Pow),
        "Neg" => unary(UnaryOp::Neg),
        "Abs" => unary(UnaryOp::Abs),
        "Exp" => unary(UnaryOp::Exp),
        "Log" => unary(UnaryOp::Log),
        "Tanh" => unary(UnaryOp::Tanh),
        "Sqrt" => unary(UnaryOp::Sqrt),
        "Rsqrt" => unary(UnaryOp::Rsqrt),
        "Sigmoid" => unary(UnaryOp::Sigmoid),
        "Equal" => compare(CompareOp::Equal),
        "NotEqual" => compare(CompareOp::NotEqual),
        "Less" => compare(CompareOp::Less),
        "LessEqual" => compare(CompareOp::LessEqual),
        "Greater" => compare(CompareOp::Greater),
        "GreaterEqual" => compare(CompareOp::GreaterEqual),
        "ReduceSum" => reduce(ReduceOp::Sum),
        "ReduceMax" => reduce(ReduceOp::Max),
        "ReduceMin" => reduce(ReduceOp::Min),
        "ReduceMean" => reduce(ReduceOp::Mean),
        "Select" => Arc::new(move |cx: &KernelContext| {
            with_views::<3>(cx, |[c, a, b], o| k::select(&ctx, c, a, b, o))
        }),
        "Cast" => {
            Arc::new(move |cx: &KernelContext| with_views::<1>(cx, |[a], o| k::cast(&ctx, a, o)))
        }
        "MatMul" => Arc::new(move |cx: &KernelContext| {
            let (ta, tb) = (cx.attrs.bool("transpose_a")?, cx.attrs.bool("transpose_b")?);
            with_views::<2>(cx, |[a, b], o| k::matmul(&ctx, a, b, ta, tb, o))
        }),
        "Softmax" | "LogSoftmax" => {
            let log = op == "LogSoftmax";
            Arc::new(move |cx: &KernelContext| {
                let rank = cx.inputs.first().map_or(0, |t| t.rank()) as i64;
                let axis = cx.attrs.int("axis")?;
                if !(-rank..rank).contains(&axis) {
                    return Err(Error::invalid_argument(format!(
                        "axis {axis} is out of range for rank {rank}"
                    )));
                }
                let axis = norm_axis(axis, rank as usize);
                with_views::<1>(cx, |[a], o| k::softmax(&ctx, a, axis, log, o))
            })
        }
        "Gemm" => Arc::new(move |cx: &KernelContext| {
            let a = cx.attrs;
            let (ta, tb) = (a.bool("transpose_a")?, a.bool("transpose_b")?);
            let (alpha, beta, relu) = (a.float("alpha")?, a.float("beta")?, a.bool("relu")?);
            with_views::<3>(cx, |[x, w, c], o| {
                k::gemm(&ctx, x, w, c, ta, tb, alpha, beta, relu, o)
            })
        }),
        "BroadcastTo" => Arc::new(move |cx: &KernelContext| {
            with_views::<1>(cx, |[a], o| k::broadcast_to(&ctx, a, o))
        }),
        "Reshape" => Arc::new(move |cx: &KernelContext| {
            with_views::<1>(cx, |[a], o| {
                o.data.copy_from_slice(a.data);
                Ok(())
            })
        }),
        "Transpose" => Arc::new(move |cx: &KernelContext| {
            let rank = cx.inputs.first().map_or(0, |t| t.rank());
            let raw = cx.attrs.ints("perm")?;
            let perm: Vec<usize> = if raw.is_empty() {
                (0..rank).rev().collect()
            } else {
                raw.iter().map(|p| *p as usize).collect()
            };
            with_views::<1>(cx, |[a], o| k::transpose(&ctx, a, &perm, o))
        }),
        "Concat" => Arc::new(move |cx: &KernelContext| {
            let rank = cx.inputs.first().map_or(0, |t| t.rank());
            let axis = norm_axis(cx.attrs.int("axis")?, rank);
            with_list(cx, |ins, o| k::concat(&ctx, ins, axis, o))
        }),
        "Slice" => Arc::new(move |cx: &KernelContext| {
            let starts: Vec<usize> = cx
                .attrs
                .ints("begin")?
                .iter()
                .map(|b| *b as usize)
                .collect();
            with_views::<1>(cx, |[a], o| k::slice(&ctx, a, &starts, o))
        }),
        "Fill" => Arc::new(move |cx: &KernelContext| {
            let out = cx
                .outputs
                .first()
                .ok_or_else(|| Error::internal("no output"))?;
            let value = out.dtype().scalar_bytes(cx.attrs.float("value")?);
            with_views::<0>(cx, |[], o| {
                let v = View {
                    data: &value,
                    dtype: o.dtype,
                    shape: &[],
                };
                k::fill(&ctx, v, o)
            })
        }),
        "Iota" => Arc::new(move |cx: &KernelContext| {
            let rank = cx.outputs.first().map_or(0, |t| t.rank());
            let axis = norm_axis(cx.attrs.int("axis")?, rank);
            with_views::<0>(cx, |[], o| k::iota(&ctx, axis, o))
        }),
        "AddN" => {
            Arc::new(move |cx: &KernelContext| with_list(cx, |ins, o| k::add_n(&ctx, ins, o)))
        }
        "Relu" => Arc::new(move |cx: &KernelContext| {
            let zero = cx
                .inputs
                .first()
                .map_or(DType::F32, |t| t.dtype())
                .scalar_bytes(0.0);
            with_views::<1>(cx, |[a], o| {
                let z = View {
                    data: &zero,
                    dtype: a.dtype,
                    shape: &[],
                };
                k::binary(&ctx, BinaryOp::Maximum, a, z, o)
            })
        }),
        _ => return None,
    })
}

/// Registers the CPU kernels of every basis op with `rt`.
pub(crate) fn register_kernels(rt: &Runtime, threads: usize) -> Result<()> {
    let ctx = CpuContext {
        threads: threads.max(1),
    };
    for def in basis::definitions() {
        if let Some(func) = kernel_for(&def.name, ctx) {
            rt.kernels().register(KernelDef {
                op: def.name.clone(),
                device_type: HostPlatform::DEVICE_TYPE.into(),
                binding: Binding::Platform(HostPlatform::NAME.into()),
                dtypes: Vec::new(),
                priority: 0,
                source: "built-in".into(),
                func,
            })?;
        }
    }
    Ok(())
}
