//! The kernels' CUDA C++ (`cuda/*.cu`), compiled at run time by NVRTC: one module per family,
//! compiled the first time a kernel of the family runs (once per process and GPU architecture)
//! and loaded once per device. NVRTC produces PTX for the device's architecture; the driver
//! compiles it to machine code when the module loads (and keeps it in its own disk cache).

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use devplug_plugin_sdk::{Error, Logger, Result};
use parking_lot::{Mutex, RwLock};

use crate::driver::{Bound, Function, Module};

const PRELUDE: &str = include_str!("cuda/prelude.cuh");

/// A group of kernels compiled together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// Binary arithmetic and comparisons (`binary.cu`).
    Binary,
    /// Unary math (`unary.cu`).
    Unary,
    /// Dtype conversions (`cast.cu`).
    Cast,
    /// Reductions (`reduce.cu`).
    Reduce,
    /// Strided copies, Select, Fill, Iota (`copy.cu`).
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

    fn index(self) -> usize {
        self as usize
    }

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

    /// The whole translation unit NVRTC compiles.
    pub(crate) fn program(self) -> String {
        format!("{PRELUDE}\n// ---- {}.cu\n{}", self.name(), self.source())
    }
}

type Ptx = std::result::Result<Arc<CString>, String>;

/// PTX per (family, compute capability), compiled once per process.
fn ptx(family: Family, arch: u32, logger: &Logger) -> Ptx {
    static CACHE: OnceLock<Mutex<HashMap<(Family, u32), Ptx>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    // Held while compiling: two devices of one architecture compile once.
    let mut cache = cache.lock();
    if let Some(p) = cache.get(&(family, arch)) {
        return p.clone();
    }
    let started = Instant::now();
    let compile = |arch_flag: Option<String>| {
        let opts = CompileOptions {
            // As the CPU device computes: no contraction of a * b + c into one rounding.
            fmad: Some(false),
            options: arch_flag.into_iter().collect(),
            name: Some(format!("devplug_{}.cu", family.name())),
            ..Default::default()
        };
        compile_ptx_with_opts(family.program(), opts)
    };
    let result = std::panic::catch_unwind(|| {
        // An NVRTC older than the GPU does not know its architecture: its default target's
        // PTX still runs (the driver compiles it for the GPU).
        compile(Some(format!("--gpu-architecture=compute_{arch}"))).or_else(|_| compile(None))
    });
    let p: Ptx = match result {
        Ok(Ok(ptx)) => {
            logger.info(format!(
                "CUDA: compiled the {} kernels for compute_{arch} in {} ms",
                family.name(),
                started.elapsed().as_millis()
            ));
            CString::new(ptx.to_src().replace('\0', ""))
                .map(Arc::new)
                .map_err(|e| e.to_string())
        }
        Ok(Err(e)) => Err(format!(
            "NVRTC could not compile the {} kernels: {e}",
            family.name()
        )),
        Err(_) => Err(format!(
            "NVRTC panicked compiling the {} kernels (is libnvrtc complete?)",
            family.name()
        )),
    };
    cache.insert((family, arch), p.clone());
    p
}

/// One device's loaded kernels.
pub(crate) struct Modules {
    /// Compute capability as `major * 10 + minor` (90 for sm_90).
    arch: u32,
    device: String,
    logger: Logger,
    modules: [OnceLock<std::result::Result<Module, String>>; 5],
    functions: RwLock<HashMap<String, Function>>,
}

impl Modules {
    pub(crate) fn new(device: &str, arch: u32, logger: Logger) -> Modules {
        Modules {
            arch,
            device: device.to_owned(),
            logger,
            modules: Default::default(),
            functions: RwLock::new(HashMap::new()),
        }
    }

    /// Kernel `name` of `family`, compiling and loading the family the first time.
    pub(crate) fn function(&self, b: &Bound<'_>, family: Family, name: &str) -> Result<Function> {
        if let Some(f) = self.functions.read().get(name) {
            return Ok(*f);
        }
        let module = self.modules[family.index()].get_or_init(|| {
            let ptx = ptx(family, self.arch, &self.logger)?;
            Module::load_ptx(b, &ptx).map_err(|e| e.to_string())
        });
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

    /// Every family compiles, and defines every kernel the launch code asks for. Needs NVRTC
    /// (no GPU): CI installs it (`.ci/run`); elsewhere the test says it did not run.
    #[test]
    fn every_family_compiles_with_nvrtc() {
        if !crate::driver::nvrtc_present() {
            eprintln!("skipped: libnvrtc not found (CI installs it; see .ci/run)");
            return;
        }
        for family in Family::ALL {
            let opts = CompileOptions {
                fmad: Some(false),
                options: vec!["--gpu-architecture=compute_80".into()],
                ..Default::default()
            };
            let ptx = compile_ptx_with_opts(family.program(), opts)
                .unwrap_or_else(|e| panic!("{}: {e}", family.name()))
                .to_src();
            let entries: Vec<&str> = ptx
                .lines()
                .filter_map(|l| l.trim().strip_prefix(".visible .entry "))
                .map(|l| l.split('(').next().unwrap_or("").trim())
                .collect();
            for name in super::super::kernel_names(family) {
                assert!(
                    entries.contains(&name.as_str()),
                    "{}: no kernel {name} in the PTX",
                    family.name()
                );
            }
            if let Ok(dir) = std::env::var("DEVPLUG_CUDA_PTX_DIR") {
                std::fs::write(format!("{dir}/{}.ptx", family.name()), &ptx).unwrap();
            }
        }
    }
}
