//! The kernels' CUDA C++ (`cuda/*.cu`), compiled at run time by NVRTC (`crate::nvrtc`) to
//! machine code for the GPU at hand, in units of one family and one dtype (`binary` for f32, …;
//! `copy` whole): the first kernel of a unit to run compiles it — a second or two — once per
//! process and architecture, and the image goes to a disk cache ([`cache`](super::cache)) so that
//! later processes only read it. Each device loads the units it runs once.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use devplug_plugin_sdk::{DType, Error, Logger, Result};
use parking_lot::{Mutex, RwLock};

use super::cache::{self, DiskCache};
use crate::driver::{Bound, Function, Module};
use crate::nvrtc::{self, Image};

const PRELUDE: &str = include_str!("cuda/prelude.cuh");

/// A group of kernels in one source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// Binary arithmetic and comparisons (`binary.cu`).
    Binary,
    /// Unary math (`unary.cu`).
    Unary,
    /// Dtype conversions, by source dtype (`cast.cu`).
    Cast,
    /// Reductions (`reduce.cu`).
    Reduce,
    /// Strided copies, Select, Fill, Iota (`copy.cu`), compiled whole.
    Copy,
}

impl Family {
    #[cfg(test)]
    pub(crate) const ALL: [Family; 5] = [
        Family::Binary,
        Family::Unary,
        Family::Cast,
        Family::Reduce,
        Family::Copy,
    ];

    fn name(self) -> &'static str {
        match self {
            Family::Binary => "binary",
            Family::Unary => "unary",
            Family::Cast => "cast",
            Family::Reduce => "reduce",
            Family::Copy => "copy",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Family::Binary => include_str!("cuda/binary.cu"),
            Family::Unary => include_str!("cuda/unary.cu"),
            Family::Cast => include_str!("cuda/cast.cu"),
            Family::Reduce => include_str!("cuda/reduce.cu"),
            Family::Copy => include_str!("cuda/copy.cu"),
        }
    }
}

/// What is compiled and loaded together: a family's kernels for one dtype (the source dtype for
/// Cast), or all of them (Copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Unit {
    family: Family,
    /// `DType::code()`; `None`: every dtype.
    dtype: Option<i32>,
}

impl Unit {
    /// The unit of `family` that holds the kernels for `dtype`.
    pub(crate) fn of(family: Family, dtype: DType) -> Unit {
        Unit {
            family,
            dtype: (family != Family::Copy).then_some(dtype.code()),
        }
    }

    /// The whole Copy family.
    pub(crate) const COPY: Unit = Unit {
        family: Family::Copy,
        dtype: None,
    };

    /// `binary f32`, for messages.
    fn label(self) -> String {
        match self.dtype {
            Some(code) => format!("{} {}", self.family.name(), DType::from_code(code)),
            None => self.family.name().to_owned(),
        }
    }

    /// The translation unit NVRTC compiles: the other dtypes' gates defined empty (see
    /// `prelude.cuh`), the prelude, the family's source.
    pub(crate) fn program(self) -> String {
        let mut s = String::new();
        if let Some(code) = self.dtype {
            for d in DType::ALL.iter().filter(|d| d.code() != code) {
                s.push_str(&format!("#define DP_ON_{}(...)\n", d.name()));
            }
        }
        format!(
            "{s}{PRELUDE}\n// ---- {}.cu\n{}",
            self.family.name(),
            self.family.source()
        )
    }
}

/// A unit compiled for compute capability `arch`, once per process: from the disk cache when it
/// has it (`Ok((image, Some(key)))`: the key to drop a bad entry by), else by NVRTC.
fn compiled(
    unit: Unit,
    arch: u32,
    logger: &Logger,
) -> std::result::Result<(Arc<Image>, Option<String>), String> {
    type Entry = std::result::Result<(Arc<Image>, Option<String>), String>;
    static MEMO: OnceLock<Mutex<HashMap<(Unit, u32), Entry>>> = OnceLock::new();
    static DISK: OnceLock<Option<DiskCache>> = OnceLock::new();
    let disk = DISK.get_or_init(DiskCache::from_env).as_ref();
    let memo = MEMO.get_or_init(Default::default);
    // Held while compiling: two devices of one architecture compile once.
    let mut memo = memo.lock();
    if let Some(e) = memo.get(&(unit, arch)) {
        return e.clone();
    }
    let program = unit.program();
    let version = nvrtc::version();
    let key = version
        .as_ref()
        .ok()
        .map(|&v| cache::key(&program, arch, v));
    let cached = match (disk, &key) {
        (Some(d), Some(k)) => d.load(k),
        _ => None,
    };
    let entry: Entry = match cached {
        Some(image) => Ok((Arc::new(image), key)),
        None => compile(unit, arch, &program, logger).map(|image| {
            if let (Some(d), Some(k)) = (disk, &key) {
                if let Err(e) = d.store(k, &image) {
                    logger.debug(format!("CUDA: kernel cache: {e}"));
                }
            }
            (Arc::new(image), None)
        }),
    };
    memo.insert((unit, arch), entry.clone());
    entry
}

/// Compiles `program` (unit `unit`) with NVRTC.
fn compile(
    unit: Unit,
    arch: u32,
    program: &str,
    logger: &Logger,
) -> std::result::Result<Image, String> {
    let started = Instant::now();
    let name = format!("devplug_{}.cu", unit.label().replace(' ', "_"));
    match std::panic::catch_unwind(|| nvrtc::compile(program, &name, arch)) {
        Ok(Ok(image)) => {
            logger.info(format!(
                "CUDA: compiled the {} kernels for compute capability {}.{} ({}) in {} ms",
                unit.label(),
                arch / 10,
                arch % 10,
                image.kind(),
                started.elapsed().as_millis()
            ));
            Ok(image)
        }
        Ok(Err(e)) => Err(format!(
            "NVRTC could not compile the {} kernels: {e}",
            unit.label()
        )),
        Err(_) => Err(format!(
            "NVRTC failed compiling the {} kernels (is libnvrtc complete?)",
            unit.label()
        )),
    }
}

type Loaded = Arc<OnceLock<std::result::Result<Module, String>>>;

/// One device's loaded kernels.
pub(crate) struct Modules {
    /// Compute capability as `major * 10 + minor` (90 for sm_90).
    arch: u32,
    device: String,
    logger: Logger,
    units: Mutex<HashMap<Unit, Loaded>>,
    functions: RwLock<HashMap<String, Function>>,
}

impl Modules {
    pub(crate) fn new(device: &str, arch: u32, logger: Logger) -> Modules {
        Modules {
            arch,
            device: device.to_owned(),
            logger,
            units: Mutex::new(HashMap::new()),
            functions: RwLock::new(HashMap::new()),
        }
    }

    /// Loads `unit` into the device's context: compiled (or cached) for its architecture. A
    /// cached image the driver refuses is dropped from the cache and compiled afresh.
    fn load(&self, b: &Bound<'_>, unit: Unit) -> std::result::Result<Module, String> {
        let (image, cached) = compiled(unit, self.arch, &self.logger)?;
        match (Module::load(b, &image), cached) {
            (Ok(m), _) => Ok(m),
            (Err(e), Some(key)) => {
                self.logger.warn(format!(
                    "CUDA: the cached {} kernels did not load ({e}); compiling them again",
                    unit.label()
                ));
                if let Some(d) = DiskCache::from_env() {
                    d.remove(&key);
                }
                let fresh = compile(unit, self.arch, &unit.program(), &self.logger)?;
                Module::load(b, &fresh).map_err(|e| e.to_string())
            }
            (Err(e), None) => Err(e.to_string()),
        }
    }

    /// Kernel `name` of `unit`, compiling and loading the unit the first time.
    pub(crate) fn function(&self, b: &Bound<'_>, unit: Unit, name: &str) -> Result<Function> {
        if let Some(f) = self.functions.read().get(name) {
            return Ok(*f);
        }
        let cell: Loaded = Arc::clone(self.units.lock().entry(unit).or_default());
        let module = cell.get_or_init(|| self.load(b, unit));
        let module = module.as_ref().map_err(|e| {
            Error::unavailable(format!("{}: kernels unavailable: {e}", self.device))
        })?;
        let f = module
            .function(name)
            .map_err(|e| Error::internal(format!("{}: kernel {name}: {e}", self.device)))?;
        self.functions.write().insert(name.to_owned(), f);
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptx_entries(program: String) -> Vec<String> {
        let opts = cudarc::nvrtc::CompileOptions {
            fmad: Some(false),
            options: vec!["--gpu-architecture=compute_80".into()],
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(program, opts)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_src();
        ptx.lines()
            .filter_map(|l| l.trim().strip_prefix(".visible .entry "))
            .map(|l| l.split('(').next().unwrap_or("").trim().to_owned())
            .collect()
    }

    /// Every family compiles and defines every kernel the launch code asks for; a unit holds
    /// its dtype's kernels and no other's; a unit compiles to machine code as the plugin
    /// compiles it. Needs NVRTC (no GPU): CI installs it (`.ci/run`); elsewhere the test says
    /// it did not run.
    #[test]
    fn every_family_compiles_with_nvrtc() {
        if !crate::driver::nvrtc_present() {
            eprintln!("skipped: libnvrtc not found (CI installs it; see .ci/run)");
            return;
        }
        for family in Family::ALL {
            let all = Unit {
                family,
                dtype: None,
            };
            let entries = ptx_entries(all.program());
            for name in super::super::kernel_names(family) {
                assert!(
                    entries.contains(&name),
                    "{}: no kernel {name} in the PTX",
                    family.name()
                );
            }
        }
        let f32_binary = ptx_entries(Unit::of(Family::Binary, DType::F32).program());
        assert!(f32_binary.iter().any(|e| e == "dp_add_f32_s"));
        assert!(
            f32_binary.iter().all(|e| e.contains("_f32_")),
            "{f32_binary:?}"
        );
        let bool_casts = ptx_entries(Unit::of(Family::Cast, DType::BOOL).program());
        assert_eq!(bool_casts.len(), 8, "{bool_casts:?}");
        // Machine code (sm_80: every NVRTC since CUDA 11 knows it).
        let image = nvrtc::compile(&Unit::of(Family::Unary, DType::F32).program(), "t.cu", 80)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(image.kind(), "cubin");
        assert!(nvrtc::version().is_ok_and(|(major, _)| major >= 11));
    }
}
