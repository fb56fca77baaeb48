//! ReduceSum, ReduceMax, ReduceMin and ReduceMean over any set of axes.

use devplug_plugin_sdk::{DType, Error, Result};

use super::elementwise::fill_bits;
use super::plan::{reduced_axes, Red};
use super::{check_rank, dtype_size, reduce_name, Cx, Family, Launcher, Unit};

/// Reductions of at most this many elements per output run one thread per output; longer ones
/// a block per output.
const SHORT: i64 = 64;

/// The NaN the CPU's `0 / 0` gives, as `dtype`'s bits (a float mean of nothing).
fn nan_bits(dtype: DType) -> u64 {
    match dtype {
        DType::F64 => f64::NAN.to_bits(),
        DType::F16 => half::f16::NAN.to_bits() as u64,
        DType::BF16 => half::bf16::NAN.to_bits() as u64,
        _ => f32::NAN.to_bits() as u64,
    }
}

/// `y = reduce(x)` over the `axes` attribute; `stem` is `sum`, `max`, `min` or `mean`.
pub(crate) fn reduce(cx: &Cx<'_>, stem: &'static str) -> Result<()> {
    cx.check_arity(1, 1)?;
    let (x, y) = (cx.input(0)?, cx.output(0)?);
    check_rank(x.shape())?;
    let axes = cx.attr_ints("axes")?;
    let reduced = reduced_axes(x.rank(), axes).ok_or_else(|| {
        Error::invalid_argument(format!(
            "axes {axes:?} are out of range for a tensor of rank {}",
            x.rank()
        ))
    })?;
    let plan = Red::new(x.shape(), &reduced);
    if plan.n_out == 0 {
        return Ok(());
    }
    let dtype = x.dtype();
    let float = matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
    let l = Launcher::new(cx)?;
    if plan.count == 0 {
        let size = dtype_size(dtype)?;
        return match stem {
            "sum" => l.memset(y.addr().0, 0, y.byte_size()),
            "mean" if float => fill_bits(&l, y.addr().0, plan.n_out, size, nan_bits(dtype)),
            _ => Err(Error::invalid_argument(format!(
                "Reduce{} of an empty set of {} elements is undefined",
                capitalized(stem),
                if float { "float" } else { "integer" }
            ))),
        };
    }
    let (xa, ya) = (x.addr().0, y.addr().0);
    if plan.count <= SHORT {
        let name = reduce_name(stem, dtype, false)?;
        l.run(
            Unit::of(Family::Reduce, dtype),
            &name,
            plan.n_out,
            &[&plan, &xa, &ya],
        )
    } else {
        let name = reduce_name(stem, dtype, true)?;
        let grid = plan.n_out.min(1 << 20) as u32;
        l.run_grid(
            Unit::of(Family::Reduce, dtype),
            &name,
            grid,
            &[&plan, &xa, &ya],
        )
    }
}

fn capitalized(stem: &str) -> String {
    let mut c = stem.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}
