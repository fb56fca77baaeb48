//! Builds the fake CUDA libraries (driver.cpp → libcuda.so, cublas.cpp → libcublas.so,
//! nvrtc.cpp → libnvrtc.so) into `OUT_DIR/lib` with the C++ compiler (`CXX`, default `c++`; it
//! must know `_Float16`: GCC 12 or Clang 15 on x86-64), and tells the crate where
//! (`DEVPLUG_CUDA_FAKE_LIB_DIR`). A test puts that folder first on `LD_LIBRARY_PATH` of a child
//! process, and the CUDA plugin there finds the fakes as it would find CUDA.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("lib");
    std::fs::create_dir_all(&out).expect("OUT_DIR/lib");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
    println!("cargo:rerun-if-env-changed=CXX");
    for f in [
        "driver.cpp",
        "cublas.cpp",
        "nvrtc.cpp",
        "host_shim.hpp",
        "../src/kernels/cuda",
    ] {
        println!("cargo:rerun-if-changed={}", here.join(f).display());
    }
    for (src, lib, extra) in [
        ("driver.cpp", "libcuda.so", &["-ldl", "-lpthread"][..]),
        ("nvrtc.cpp", "libnvrtc.so", &[][..]),
        (
            "cublas.cpp",
            "libcublas.so",
            &["-L", "LIBDIR", "-lcuda", "-Wl,-rpath,$ORIGIN"][..],
        ),
    ] {
        let extra: Vec<String> = extra
            .iter()
            .map(|a| a.replace("LIBDIR", &out.to_string_lossy()))
            .collect();
        let status = Command::new(&cxx)
            .args([
                "-std=c++17",
                "-O1",
                "-g0",
                "-fPIC",
                "-shared",
                "-Wall",
                "-Wextra",
            ])
            .arg(here.join(src))
            .arg("-o")
            .arg(out.join(lib))
            .args(&extra)
            .status()
            .unwrap_or_else(|e| panic!("cannot run the C++ compiler `{cxx}`: {e}"));
        assert!(status.success(), "`{cxx}` failed to build {lib} from {src}");
    }
    println!(
        "cargo:rustc-env=DEVPLUG_CUDA_FAKE_LIB_DIR={}",
        out.display()
    );
}
