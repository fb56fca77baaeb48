//! NVRTC, CUDA's run-time compiler: the one module that calls `libnvrtc` (with `driver.rs` for
//! the driver and `blas.rs` for cuBLAS).
//!
//! A kernel family is compiled to machine code for the GPU at hand (`sm_XX`, a CUBIN), which the
//! driver loads whatever PTX version it understands: an NVRTC newer than the driver (a pip
//! wheel next to an older driver is common) still works. Only when NVRTC does not know the GPU's
//! architecture (an NVRTC older than the GPU) is PTX of its default target produced instead,
//! which the driver compiles for the GPU when it loads it.

use std::ffi::{c_char, c_void, CString};

use cudarc::nvrtc::{result as rtc, sys};

/// What `cuModuleLoadData` takes.
pub(crate) enum Image {
    /// Machine code for one architecture.
    Cubin(Vec<u8>),
    /// PTX, NUL-terminated.
    Ptx(CString),
}

impl Image {
    /// The image, for `cuModuleLoadData` (valid while `self` lives).
    pub(crate) fn as_ptr(&self) -> *const c_void {
        match self {
            Image::Cubin(b) => b.as_ptr().cast(),
            Image::Ptx(p) => p.as_ptr().cast(),
        }
    }

    /// `cubin` or `PTX`, for messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Image::Cubin(_) => "cubin",
            Image::Ptx(_) => "PTX",
        }
    }
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `compile_with`, destroyed once.
        let _ = unsafe { rtc::destroy_program(self.0) };
    }
}

fn text(chars: Vec<c_char>) -> String {
    let bytes: Vec<u8> = chars
        .into_iter()
        .map(|c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles `src` with `options`; the error carries NVRTC's log.
fn compile_with(src: &CString, name: &CString, options: &[String]) -> Result<Program, String> {
    let prog = Program(
        rtc::create_program(src, Some(name)).map_err(|e| format!("nvrtcCreateProgram: {e:?}"))?,
    );
    // SAFETY: a live program; the options are strings without NUL (built here).
    if let Err(e) = unsafe { rtc::compile_program(prog.0, options) } {
        // SAFETY: a live program that was just compiled (unsuccessfully).
        let log = unsafe { rtc::get_program_log(prog.0) }
            .map(text)
            .unwrap_or_default();
        return Err(format!("{e:?} with {options:?}: {}", log.trim()));
    }
    Ok(prog)
}

/// Compiles `src` (named `name` in messages) for compute capability `arch` (`90` for 9.0): a
/// CUBIN, or PTX when this NVRTC does not know the architecture. Exact IEEE arithmetic: no
/// contraction of `a * b + c` (as the CPU device computes).
pub(crate) fn compile(src: &str, name: &str, arch: u32) -> Result<Image, String> {
    let src = CString::new(src).map_err(|e| e.to_string())?;
    let name = CString::new(name).map_err(|e| e.to_string())?;
    let fmad = "--fmad=false".to_owned();
    match compile_with(
        &src,
        &name,
        &[format!("--gpu-architecture=sm_{arch}"), fmad.clone()],
    ) {
        Ok(prog) => {
            let mut size = 0usize;
            // SAFETY: a live, compiled program; `size` is written by NVRTC.
            unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }
                .result()
                .map_err(|e| format!("nvrtcGetCUBINSize: {e:?}"))?;
            let mut cubin = vec![0u8; size];
            // SAFETY: `cubin` holds the `size` bytes NVRTC said it will write.
            unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) }
                .result()
                .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
            Ok(Image::Cubin(cubin))
        }
        Err(for_arch) => {
            let prog = compile_with(&src, &name, &[fmad])
                .map_err(|e| format!("{for_arch}; for NVRTC's default target: {e}"))?;
            // SAFETY: a live, compiled program.
            let ptx = unsafe { rtc::get_ptx(prog.0) }.map_err(|e| format!("nvrtcGetPTX: {e:?}"))?;
            CString::new(text(ptx))
                .map(Image::Ptx)
                .map_err(|e| e.to_string())
        }
    }
}

/// NVRTC's version, `(major, minor)`.
pub(crate) fn version() -> Result<(i32, i32), String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC writes the two integers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map(|()| (major, minor))
        .map_err(|e| format!("nvrtcVersion: {e:?}"))
}
