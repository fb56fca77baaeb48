//! Configures, builds and installs the whole devplug CMake project (the C API through its own
//! inner cargo, the plugins, the C and C++ tests) so that the integration tests in `tests/`
//! can run ctest in the build tree and build the examples against the installed prefix.
//!
//! Emits for the tests:
//! - `DEVPLUG_TEST_BUILD_DIR`: the CMake build dir (where ctest runs),
//! - `DEVPLUG_TEST_PREFIX`: the install prefix (what `find_package(DevPlug)` is pointed at),
//! - `DEVPLUG_SOURCE_DIR`: the workspace root.
//!
//! The CMake build is skipped under `cargo clippy`, and when `DEVPLUG_TESTS_SKIP_CMAKE=1` (for
//! an IDE's `cargo check`): the variables are still emitted, the tests just cannot pass. With
//! `DEVPLUG_TESTS_BUILD_DIR=<dir>` the tests use plugins built elsewhere (`<dir>/plugins`, as
//! `tests/tsan.sh` builds them) and nothing is built here.
use std::env;
use std::path::{Path, PathBuf};

/// Inputs of the CMake build, relative to the workspace root; cargo scans directories
/// recursively. (examples/ is not here: the tests build the examples themselves.)
const WATCHED: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "CMakeLists.txt",
    "cmake",
    "core",
    "capi",
    "cpp/include",
    "plugins",
    "tests/c",
    "tests/cpp",
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let source_dir = manifest_dir
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));

    let cmake_dir = out_dir.join("cmake"); // the cmake crate builds in cmake/build
    let build_dir = cmake_dir.join("build");
    let prefix = out_dir.join("prefix");
    // The inner cargo's own target dir: the outer cargo holds the lock of target/ while this
    // script runs, so sharing it would deadlock.
    let inner_cargo_target = out_dir.join("cargo-target");

    for path in WATCHED {
        // Only existing paths: a missing one would make cargo rerun this script every time.
        let path = source_dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    for var in [
        "DEVPLUG_TESTS_SKIP_CMAKE",
        "RUSTC_WORKSPACE_WRAPPER",
        "CFLAGS",
        "CXXFLAGS",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // A tree built elsewhere instead of the CMake build (tests/tsan.sh: plugins built with
    // ThreadSanitizer): the tests load plugins from `<dir>/plugins`, and nothing is built here.
    println!("cargo:rerun-if-env-changed=DEVPLUG_TESTS_BUILD_DIR");
    let prebuilt = env::var_os("DEVPLUG_TESTS_BUILD_DIR").filter(|v| !v.is_empty());
    let build_dir = prebuilt.clone().map_or(build_dir, PathBuf::from);
    println!(
        "cargo:rustc-env=DEVPLUG_TEST_BUILD_DIR={}",
        build_dir.display()
    );
    println!("cargo:rustc-env=DEVPLUG_TEST_PREFIX={}", prefix.display());
    println!(
        "cargo:rustc-env=DEVPLUG_SOURCE_DIR={}",
        source_dir.display()
    );

    if under_clippy() || prebuilt.is_some() {
        return;
    }
    if env::var_os("DEVPLUG_TESTS_SKIP_CMAKE").is_some_and(|v| !v.is_empty() && v != "0") {
        println!("cargo:warning=devplug-tests: CMake build skipped (DEVPLUG_TESTS_SKIP_CMAKE)");
        return;
    }

    // Debug for tests: the inner cargo build is a fast `dev` build; RelWithDebInfo when cargo
    // builds with optimizations (`cargo bench`), so that benchmarks measure optimized plugins. NUM_JOBS (set by cargo: all CPUs
    // unless -j says otherwise) becomes `cmake --build --parallel N`, or cargo's jobserver is
    // handed to make. The C/C++ flags are the user's (CFLAGS/CXXFLAGS), as in a plain CMake
    // build, not the cmake crate's defaults (which add -w and hide the tests' warnings).
    cmake::Config::new(&source_dir)
        .out_dir(&cmake_dir)
        .profile(if env::var("PROFILE").as_deref() == Ok("release") {
            "RelWithDebInfo"
        } else {
            "Debug"
        })
        .define("CMAKE_C_FLAGS", env::var("CFLAGS").unwrap_or_default())
        .define("CMAKE_CXX_FLAGS", env::var("CXXFLAGS").unwrap_or_default())
        .define("DEVPLUG_BUILD_TESTS", "ON")
        .define("CMAKE_INSTALL_PREFIX", &prefix)
        .define("DEVPLUG_CARGO_TARGET_DIR", &inner_cargo_target)
        .build();
}

/// True under `cargo clippy`, which runs build scripts too (in a build-script unit of its own,
/// so building the whole C side there would only repeat what `cargo test` does).
fn under_clippy() -> bool {
    env::var_os("RUSTC_WORKSPACE_WRAPPER").is_some_and(|w| {
        Path::new(&w)
            .file_stem()
            .is_some_and(|s| s.to_string_lossy().starts_with("clippy-driver"))
    })
}
