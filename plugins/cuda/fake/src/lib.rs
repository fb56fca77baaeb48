//! A fake CUDA driver, cuBLAS and NVRTC for testing the CUDA plugin without a GPU (see
//! `driver.cpp` for what it models and what not). `build.rs` builds them as `libcuda.so`,
//! `libcublas.so` and `libnvrtc.so` in [`LIB_DIR`]; a process whose `LD_LIBRARY_PATH` starts
//! with that folder gets them where it would get CUDA.

/// The folder holding the fake libraries.
pub const LIB_DIR: &str = env!("DEVPLUG_CUDA_FAKE_LIB_DIR");
