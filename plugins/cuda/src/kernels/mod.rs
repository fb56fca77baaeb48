//! The CUDA platform's kernels: every basis op, for the dtypes the CPU device takes, except
//! integer MatMul (cuBLAS has none; those fall back) and i64 ReduceMean (its exact sum needs 128
//! bits). [`TABLE`] lists them.
//!
//! Each kernel checks nothing the runtime has checked already (dtypes, shapes from the op's
//! shape function), works out how its kernel walks the tensors on the host ([`plan`]) and
//! enqueues one launch (a few for Concat and AddN) on the stream it was given. The CUDA code is
//! in `cuda/*.cu`, compiled by NVRTC for the GPU, one family and dtype at a time, when first used
//! and cached on disk (`modules`, `cache`); MatMul calls cuBLAS.

mod cache;
mod elementwise;
mod layout;
mod matmul;
mod modules;
pub mod plan;
mod reduce;

use devplug_plugin_sdk::{DType, Error, Host, KernelContext, KernelSpec, Logger, Result};
use parking_lot::{Mutex, MutexGuard};

use crate::blas::Blas;
use crate::device::{CudaDevice, CudaStream};
use crate::driver::{Bound, Param};
use modules::Modules;
pub(crate) use modules::{Family, Unit};

/// The context every kernel here receives.
pub(crate) type Cx<'a> = KernelContext<'a, CudaDevice>;

const ALL: [DType; 8] = DType::ALL;
const NUMERIC: [DType; 7] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::F16,
    DType::BF16,
];
const SIGNED: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
];
const FLOAT: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const MEAN: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::U8,
    DType::F16,
    DType::BF16,
];
/// AddN adds one input at a time, so halves would round after each addition (the CPU rounds
/// once): they fall back.
const ADD_N: [DType; 5] = [DType::F32, DType::F64, DType::I32, DType::I64, DType::U8];

/// What a kernel needs besides the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// NVRTC, to compile the `.cu` kernels.
    Nvrtc,
    /// cuBLAS.
    Cublas,
}

/// Which code runs an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Binary arithmetic and comparisons (`binary.cu`).
    Binary,
    /// Unary math (`unary.cu`).
    Unary,
    /// Select (`copy.cu`).
    Select,
    /// Cast (`cast.cu`).
    Cast,
    /// Fill (`copy.cu`).
    Fill,
    /// Iota (`copy.cu`).
    Iota,
    /// AddN, as a chain of Adds (`binary.cu`).
    AddN,
    /// The reductions (`reduce.cu`).
    Reduce,
    /// Reshape.
    Reshape,
    /// Transpose (`copy.cu`).
    Transpose,
    /// BroadcastTo (`copy.cu`).
    BroadcastTo,
    /// Slice (`copy.cu`).
    Slice,
    /// Concat (`copy.cu`).
    Concat,
    /// MatMul (cuBLAS).
    MatMul,
}

/// One registered kernel: an op, the dtypes of its first type variable (empty: all), the code
/// that runs it and the stem of its CUDA kernels' names.
#[derive(Debug)]
pub struct Entry {
    /// The op's name.
    pub op: &'static str,
    /// The dtypes it takes.
    pub dtypes: &'static [DType],
    /// The code.
    pub kind: Kind,
    /// The kernel-name stem (`add` for `dp_add_f32_c`).
    pub stem: &'static str,
}

impl Entry {
    /// What the kernel needs besides the driver.
    pub fn needs(&self) -> Needs {
        if self.kind == Kind::MatMul {
            Needs::Cublas
        } else {
            Needs::Nvrtc
        }
    }

    fn run(&self, cx: &Cx<'_>) -> Result<()> {
        let stem = self.stem;
        match self.kind {
            Kind::Binary => elementwise::binary(cx, stem),
            Kind::Unary => elementwise::unary(cx, stem),
            Kind::Select => elementwise::select(cx),
            Kind::Cast => elementwise::cast(cx),
            Kind::Fill => elementwise::fill(cx),
            Kind::Iota => elementwise::iota(cx),
            Kind::AddN => elementwise::add_n(cx),
            Kind::Reduce => reduce::reduce(cx, stem),
            Kind::Reshape => layout::reshape(cx),
            Kind::Transpose => layout::transpose(cx),
            Kind::BroadcastTo => layout::broadcast_to(cx),
            Kind::Slice => layout::slice(cx),
            Kind::Concat => layout::concat(cx),
            Kind::MatMul => matmul::matmul(cx),
        }
    }
}

const fn entry(
    op: &'static str,
    dtypes: &'static [DType],
    kind: Kind,
    stem: &'static str,
) -> Entry {
    Entry {
        op,
        dtypes,
        kind,
        stem,
    }
}

/// Every kernel of the CUDA platform.
pub const TABLE: &[Entry] = &[
    entry("Add", &NUMERIC, Kind::Binary, "add"),
    entry("Sub", &NUMERIC, Kind::Binary, "sub"),
    entry("Mul", &NUMERIC, Kind::Binary, "mul"),
    entry("Div", &NUMERIC, Kind::Binary, "div"),
    entry("Pow", &NUMERIC, Kind::Binary, "pow"),
    entry("Maximum", &ALL, Kind::Binary, "maximum"),
    entry("Minimum", &ALL, Kind::Binary, "minimum"),
    entry("Equal", &ALL, Kind::Binary, "equal"),
    entry("NotEqual", &ALL, Kind::Binary, "not_equal"),
    entry("Less", &NUMERIC, Kind::Binary, "less"),
    entry("LessEqual", &NUMERIC, Kind::Binary, "less_equal"),
    entry("Greater", &NUMERIC, Kind::Binary, "greater"),
    entry("GreaterEqual", &NUMERIC, Kind::Binary, "greater_equal"),
    entry("Neg", &SIGNED, Kind::Unary, "neg"),
    entry("Abs", &NUMERIC, Kind::Unary, "abs"),
    entry("Exp", &FLOAT, Kind::Unary, "exp"),
    entry("Log", &FLOAT, Kind::Unary, "log"),
    entry("Tanh", &FLOAT, Kind::Unary, "tanh"),
    entry("Sqrt", &FLOAT, Kind::Unary, "sqrt"),
    entry("Rsqrt", &FLOAT, Kind::Unary, "rsqrt"),
    entry("Sigmoid", &FLOAT, Kind::Unary, "sigmoid"),
    entry("Select", &ALL, Kind::Select, "select"),
    entry("Cast", &ALL, Kind::Cast, "cast"),
    entry("Fill", &[], Kind::Fill, "fill"),
    entry("Iota", &[], Kind::Iota, "iota"),
    entry("AddN", &ADD_N, Kind::AddN, "add"),
    entry("ReduceSum", &NUMERIC, Kind::Reduce, "sum"),
    entry("ReduceMax", &NUMERIC, Kind::Reduce, "max"),
    entry("ReduceMin", &NUMERIC, Kind::Reduce, "min"),
    entry("ReduceMean", &MEAN, Kind::Reduce, "mean"),
    entry("Reshape", &ALL, Kind::Reshape, "copy"),
    entry("Transpose", &ALL, Kind::Transpose, "copy"),
    entry("BroadcastTo", &ALL, Kind::BroadcastTo, "copy"),
    entry("Slice", &ALL, Kind::Slice, "copy"),
    entry("Concat", &ALL, Kind::Concat, "copy"),
    entry("MatMul", &FLOAT, Kind::MatMul, "gemm"),
];

/// Registers the kernels of [`TABLE`] whose needs are met, for the plugin's platform of type
/// `device_type`. Returns how many. (On a host older than plugin ABI 1.3 the SDK registers them
/// without their f16 and bf16 dtypes, which such a host does not know.)
pub fn register(host: &Host, device_type: &str, nvrtc: bool, cublas: bool) -> Result<usize> {
    let mut n = 0;
    for e in TABLE {
        let available = match e.needs() {
            Needs::Nvrtc => nvrtc,
            Needs::Cublas => cublas,
        };
        if !available {
            continue;
        }
        host.register_kernel(
            KernelSpec::new(e.op, device_type).dtypes(e.dtypes),
            move |cx: &Cx<'_>| e.run(cx),
        )?;
        n += 1;
    }
    Ok(n)
}

/// A device's kernels: its loaded modules and its cuBLAS handle.
pub(crate) struct DeviceKernels {
    modules: Modules,
    blas: Mutex<Option<Blas>>,
    tf32: bool,
}

impl DeviceKernels {
    pub(crate) fn new(device: &str, arch: u32, tf32: bool, logger: Logger) -> DeviceKernels {
        DeviceKernels {
            modules: Modules::new(device, arch, logger),
            blas: Mutex::new(None),
            tf32,
        }
    }
}

/// Threads per block of the elementwise and copy kernels (and the reductions' `_b` kernels,
/// whose shared-memory tree assumes it).
const BLOCK: u32 = 256;
/// At most this many blocks: larger tensors are covered by grid-stride loops.
const MAX_GRID: i64 = 1 << 20;

/// Launches kernels for one kernel call: the device, its context bound on this thread, and the
/// stream the host gave.
pub(crate) struct Launcher<'a> {
    dev: &'a CudaDevice,
    stream: &'a CudaStream,
    b: Bound<'a>,
}

impl<'a> Launcher<'a> {
    pub(crate) fn new(cx: &'a Cx<'a>) -> Result<Launcher<'a>> {
        let dev = cx.device();
        Ok(Launcher {
            dev,
            stream: cx.stream(),
            b: dev.bind()?,
        })
    }

    /// Launches kernel `name` of `unit` with one thread per element of `n` (grid-stride beyond
    /// [`MAX_GRID`] blocks).
    pub(crate) fn run(&self, unit: Unit, name: &str, n: i64, args: &[&dyn Param]) -> Result<()> {
        let grid = ((n + BLOCK as i64 - 1) / BLOCK as i64).clamp(1, MAX_GRID) as u32;
        self.run_grid(unit, name, grid, args)
    }

    /// Launches kernel `name` of `unit` over `grid` blocks of [`BLOCK`] threads.
    pub(crate) fn run_grid(
        &self,
        unit: Unit,
        name: &str,
        grid: u32,
        args: &[&dyn Param],
    ) -> Result<()> {
        let f = self.dev.kernels.modules.function(&self.b, unit, name)?;
        self.stream
            .raw
            .launch(&self.b, &f, grid, BLOCK, args)
            .map_err(|e| self.dev.err(Error::from(e).context(name)))
    }

    /// Enqueues a copy of `bytes` bytes between device addresses.
    pub(crate) fn copy(&self, dst: u64, src: u64, bytes: u64) -> Result<()> {
        if bytes == 0 || dst == src {
            return Ok(());
        }
        self.stream
            .raw
            .memcpy_dtod(&self.b, dst, src, bytes)
            .map_err(|e| self.dev.err(e))
    }

    /// Enqueues setting `bytes` bytes at `dst` to `value`.
    pub(crate) fn memset(&self, dst: u64, value: u8, bytes: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.stream
            .raw
            .memset(&self.b, dst, value, bytes)
            .map_err(|e| self.dev.err(e))
    }

    /// Runs `f` with the device's cuBLAS handle (created the first time) on this stream.
    pub(crate) fn with_blas(
        &self,
        f: impl FnOnce(&mut Blas, &Bound<'_>, &CudaStream, bool) -> Result<()>,
    ) -> Result<()> {
        let mut slot: MutexGuard<'_, Option<Blas>> = self.dev.kernels.blas.lock();
        let mut blas = match slot.take() {
            Some(blas) => blas,
            None => Blas::new(&self.b).map_err(|e| self.dev.err(e))?,
        };
        let r = f(&mut blas, &self.b, self.stream, self.dev.kernels.tf32);
        *slot = Some(blas);
        r.map_err(|e| self.dev.err(e))
    }
}

/// The name a dtype has in kernel names (`f32`, `bool`, …).
pub(crate) fn dtype_name(d: DType) -> Result<&'static str> {
    if d.is_known() {
        Ok(d.name())
    } else {
        Err(Error::unimplemented(format!(
            "{d} is not a dtype this plugin knows"
        )))
    }
}

/// Bytes per element.
pub(crate) fn dtype_size(d: DType) -> Result<u64> {
    d.size()
        .map(|s| s as u64)
        .ok_or_else(|| Error::unimplemented(format!("{d} is not a dtype this plugin knows")))
}

/// Element count of a shape (the host checked that it fits).
pub(crate) fn elements(shape: &[i64]) -> i64 {
    plan::num_elements(shape)
}

/// An `axis` attribute of `op` (negative counts from the end) as an index below `rank`.
pub(crate) fn axis_index(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    if (0..rank as i64).contains(&a) {
        Ok(a as usize)
    } else {
        Err(Error::invalid_argument(format!(
            "{op}: axis {axis} is out of range for rank {rank}"
        )))
    }
}

/// Refuses ranks the kernels' parameter blocks cannot hold.
pub(crate) fn check_rank(shape: &[i64]) -> Result<()> {
    if shape.len() > plan::MAX_RANK {
        return Err(Error::unimplemented(format!(
            "rank {} is more than the CUDA kernels take ({})",
            shape.len(),
            plan::MAX_RANK
        )));
    }
    Ok(())
}

// ---- kernel names (the `extern "C"` names in cuda/*.cu) ---------------------------------------

/// `dp_<stem>_<dtype>_c` (every operand contiguous) or `_s` (a broadcast walk).
pub(crate) fn elementwise_name(stem: &str, dtype: DType, contiguous: bool) -> Result<String> {
    let v = if contiguous { 'c' } else { 's' };
    Ok(format!("dp_{stem}_{}_{v}", dtype_name(dtype)?))
}

/// `dp_select_<size>_c` / `_s`.
pub(crate) fn select_name(size: u64, contiguous: bool) -> String {
    format!("dp_select_{size}_{}", if contiguous { 'c' } else { 's' })
}

/// `dp_cast_<from>_<to>`.
pub(crate) fn cast_name(from: DType, to: DType) -> Result<String> {
    Ok(format!("dp_cast_{}_{}", dtype_name(from)?, dtype_name(to)?))
}

/// `dp_reduce_<stem>_<dtype>_b` (a block per output) or `_t` (a thread per output).
pub(crate) fn reduce_name(stem: &str, dtype: DType, block: bool) -> Result<String> {
    let v = if block { 'b' } else { 't' };
    Ok(format!("dp_reduce_{stem}_{}_{v}", dtype_name(dtype)?))
}

/// `dp_<what>_<size>` (copy, fill).
pub(crate) fn sized_name(what: &str, size: u64) -> String {
    format!("dp_{what}_{size}")
}

/// `dp_iota_<dtype>`.
pub(crate) fn iota_name(dtype: DType) -> Result<String> {
    Ok(format!("dp_iota_{}", dtype_name(dtype)?))
}

/// Every kernel name the launch code may ask `family` for.
#[cfg(test)]
pub(crate) fn kernel_names(family: Family) -> Vec<String> {
    let mut v = Vec::new();
    for e in TABLE {
        let dtypes: &[DType] = if e.dtypes.is_empty() { &ALL } else { e.dtypes };
        for &d in dtypes {
            match (family, e.kind) {
                (Family::Binary, Kind::Binary | Kind::AddN) => {
                    v.push(elementwise_name(e.stem, d, true).unwrap());
                    v.push(elementwise_name(e.stem, d, false).unwrap());
                }
                (Family::Unary, Kind::Unary) => v.push(elementwise_name(e.stem, d, true).unwrap()),
                (Family::Cast, Kind::Cast) => {
                    v.extend(ALL.iter().map(|&to| cast_name(d, to).unwrap()))
                }
                (Family::Reduce, Kind::Reduce) => {
                    v.push(reduce_name(e.stem, d, true).unwrap());
                    v.push(reduce_name(e.stem, d, false).unwrap());
                }
                (Family::Copy, Kind::Iota) if d != DType::BOOL => v.push(iota_name(d).unwrap()),
                (Family::Copy, Kind::Select) => {
                    let size = dtype_size(d).unwrap();
                    v.push(select_name(size, true));
                    v.push(select_name(size, false));
                }
                (Family::Copy, Kind::Fill) => v.push(sized_name("fill", dtype_size(d).unwrap())),
                (
                    Family::Copy,
                    Kind::Transpose | Kind::BroadcastTo | Kind::Slice | Kind::Concat,
                ) => v.push(sized_name(e.stem, dtype_size(d).unwrap())),
                _ => {}
            }
        }
    }
    v
}
