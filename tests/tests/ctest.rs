//! Runs the C and C++ tests (tests/c, tests/cpp) with ctest in the CMake build tree that
//! build.rs made, so that `cargo test` runs them too.
use std::process::Command;

use devplug_tests::{build_dir, require_cmake_build, run};

#[test]
fn ctest_passes() {
    require_cmake_build();
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    // `run` prints ctest's output and fails the test with it unless ctest exits 0.
    run(Command::new("ctest")
        .arg("--test-dir")
        .arg(build_dir())
        .arg("--output-on-failure")
        .arg("--no-tests=error")
        .arg("--parallel")
        .arg(jobs.to_string())
        .arg("--timeout")
        .arg("300"));
}
