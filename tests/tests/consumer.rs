//! Uses the installed SDK exactly as a user would: every folder in examples/ with a
//! CMakeLists.txt is configured in a fresh build dir with `-DCMAKE_PREFIX_PATH=<prefix>`
//! (`find_package(DevPlug 0.1 CONFIG REQUIRED)`), built, its programs run and its ctests (an
//! example's plugin under `devplug check`) run. Also checks the pkg-config file.
use std::path::Path;
use std::process::Command;

use devplug_tests::{has_program, prefix, require_cmake_build, run, source_dir, TempDir};

/// The last line every example prints when it worked.
const MARKER: &str = "hello_devices: OK";

/// Configures and builds the standalone CMake project `src` against the installed prefix.
fn build_against_prefix(src: &Path, build: &Path) {
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    run(Command::new("cmake")
        .arg("-S")
        .arg(src)
        .arg("-B")
        .arg(build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix().display()))
        .arg("-DCMAKE_BUILD_TYPE=Debug"));
    run(Command::new("cmake")
        .arg("--build")
        .arg(build)
        .arg("--parallel")
        .arg(jobs.to_string()));
}

/// Runs a built example and checks its exit status and final marker line (`hello_devices: OK`
/// or `<example>: OK`).
fn run_example(exe: &Path) {
    let output = run(&mut Command::new(exe));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let own = format!(
        "{}: OK",
        exe.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.trim() == MARKER || l.trim() == own),
        "{} did not print `{MARKER}`; it printed:\n{stdout}",
        exe.display()
    );
}

#[test]
fn examples_build_and_run_against_the_installed_package() {
    require_cmake_build();
    let mut examples: Vec<_> = std::fs::read_dir(source_dir().join("examples"))
        .expect("examples/")
        .map(|e| e.expect("examples/ entry").path())
        .filter(|p| p.join("CMakeLists.txt").is_file())
        .collect();
    examples.sort();
    assert!(!examples.is_empty(), "no example projects in examples/");

    let mut ran = Vec::new();
    for example in &examples {
        let name = example
            .file_name()
            .expect("folder name")
            .to_string_lossy()
            .into_owned();
        let tmp = TempDir::new(&format!("example-{name}"));
        build_against_prefix(example, tmp.path());

        // Convention: the program has the folder's name; `<name>_static` (if the example
        // builds one) is the same program linked with DevPlug::devplug_static.
        let exe = tmp.path().join(&name);
        assert!(exe.is_file(), "{name}: no executable {}", exe.display());
        run_example(&exe);
        ran.push(name.clone());

        if name == "hello_gpu_cpp" {
            run_on_fake_gpu(&exe);
        }

        let static_exe = tmp.path().join(format!("{name}_static"));
        if static_exe.is_file() {
            run_example(&static_exe);
            ran.push(format!("{name}_static"));
        }

        // An example that adds tests (`enable_testing()`, `add_test`) has them run.
        if tmp.path().join("CTestTestfile.cmake").is_file() {
            let stdout = run_ctest(tmp.path());
            if name == "porting_from_tf" {
                // docs/porting.md's worked example: the ported plugin conforms.
                for line in [
                    "ok      GPU:0: streams, host callbacks and events",
                    "ok      GPU:0: kernel Add (f32) agrees with the CPU on edge shapes",
                    "0 failed: conforms",
                ] {
                    assert!(stdout.contains(line), "no `{line}` in:\n{stdout}");
                }
                ran.push(format!("{name} (devplug check)"));
            }
        }
    }

    // The static library and its native libraries link (DevPlug::devplug_static).
    for required in [
        "hello_devices_c",
        "hello_devices_c_static",
        "hello_devices_cpp",
        "hello_gpu_cpp",
        "porting_from_tf",
        "porting_from_tf (devplug check)",
    ] {
        assert!(
            ran.iter().any(|r| r == required),
            "{required} was not built and run (ran: {ran:?})"
        );
    }
}

/// Runs the tests of a built example (ctest, verbose so that each test's output shows) and
/// returns what it printed; fails when a test fails.
fn run_ctest(build: &Path) -> String {
    let output = run(Command::new("ctest")
        .arg("--test-dir")
        .arg(build)
        .arg("--output-on-failure")
        .arg("--verbose")
        .env_remove("DEVPLUG_PLUGIN_PATH")
        .env_remove("DEVPLUG_LOG"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs the GPU example on the fake CUDA driver (plugins/cuda/fake, built by the CMake build
/// of the tests): the installed CUDA plugin finds a "GPU" and the network runs on it.
fn run_on_fake_gpu(exe: &Path) {
    let fake = devplug_tests::build_dir().join("fake_cuda");
    let out = Command::new(exe)
        .env("LD_LIBRARY_PATH", &fake)
        .env("DEVPLUG_CUDA_CACHE", "off")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} on the fake driver:\n{text}",
        exe.display()
    );
    assert!(
        text.contains("running on GPU:0 (CUDA, devplug fake GPU)")
            && text.contains("hello_gpu_cpp: OK"),
        "{text}"
    );
}

/// pkg-config finds devplug.pc in the prefix, and a program built with its flags runs.
#[test]
fn pkg_config_file_works() {
    require_cmake_build();
    if !has_program("pkg-config") {
        eprintln!("pkg-config is not installed; skipping the pkg-config check");
        return;
    }
    let pc_path = prefix().join("lib/pkgconfig");
    let pkg_config = |args: &[&str]| -> Vec<String> {
        let out = run(Command::new("pkg-config")
            .env("PKG_CONFIG_PATH", &pc_path)
            .args(args)
            .arg("devplug"));
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };

    let version = pkg_config(&["--modversion"]);
    assert_eq!(version, [env!("CARGO_PKG_VERSION")]);
    let flags = pkg_config(&["--cflags", "--libs"]);
    assert!(flags.iter().any(|f| f == "-ldevplug"), "{flags:?}");
    let static_flags = pkg_config(&["--libs", "--static"]);
    assert!(
        static_flags.iter().any(|f| f == "-ldevplug"),
        "{static_flags:?}"
    );
    assert!(
        static_flags.len() > 2,
        "--static adds rustc's native libs: {static_flags:?}"
    );

    // Build the C example by hand with those flags and run it.
    let tmp = TempDir::new("pkg-config");
    let exe = tmp.path().join("hello_pc");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    run(Command::new(cc)
        .arg(source_dir().join("examples/hello_devices_c/main.c"))
        .arg("-o")
        .arg(&exe)
        .args(&flags)
        .arg(format!("-Wl,-rpath,{}", prefix().join("lib").display())));
    run_example(&exe);
}

/// A vendor's project against the installed package: a plugin built with
/// `devplug_add_plugin` (the zoo's source, which without fault macros is a small conforming
/// plugin) and its conformance run as a ctest with `DevPlug_CHECK_TOOL` (`devplug check`).
#[test]
fn a_vendor_plugin_builds_and_passes_devplug_check_as_a_ctest() {
    require_cmake_build();
    let tmp = TempDir::new("vendor-plugin");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.16)\n\
             project(vendor C)\n\
             find_package(DevPlug 0.1 CONFIG REQUIRED)\n\
             devplug_add_plugin(vendorzoo SOURCES \"{}\")\n\
             enable_testing()\n\
             add_test(NAME vendorzoo_conforms COMMAND \"${{DevPlug_CHECK_TOOL}}\" check $<TARGET_FILE:vendorzoo>)\n",
            source_dir().join("plugins/zoo/zoo.c").display()
        ),
    )
    .unwrap();
    let build = tmp.path().join("build");
    build_against_prefix(&src, &build);
    let output = run(Command::new("ctest")
        .arg("--test-dir")
        .arg(&build)
        .arg("--output-on-failure")
        .arg("--verbose"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("ok      ZOO:0: streams, host callbacks and events"),
        "{stdout}"
    );
    assert!(stdout.contains("0 failed: conforms"), "{stdout}");
}

/// docs/porting.md quotes the worked example that the test above builds and checks: every code
/// block of the guide whose first line names a file of `examples/porting_from_tf/`
/// (`// examples/porting_from_tf/tfport.c`, `# examples/porting_from_tf/CMakeLists.txt`) holds
/// that file's lines, unchanged and in the file's order (the guide may leave lines out between
/// them, not change them).
#[test]
fn the_porting_guide_quotes_the_compiled_example() {
    let doc_path = source_dir().join("docs/porting.md");
    let doc = std::fs::read_to_string(&doc_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", doc_path.display()));
    let mut quoted = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        // An opening fence names a language (```c, ```cmake, ```text): the block runs to the
        // next bare fence.
        if !line.starts_with("```") || line.trim() == "```" {
            continue;
        }
        let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let Some(path) = block.first().and_then(|first| {
            first
                .strip_prefix("// ")
                .or_else(|| first.strip_prefix("# "))
                .filter(|p| p.starts_with("examples/porting_from_tf/"))
        }) else {
            continue;
        };
        let file_path = source_dir().join(path);
        let file = std::fs::read_to_string(&file_path)
            .unwrap_or_else(|e| panic!("docs/porting.md quotes {path}: {e}"));
        let file_lines: Vec<&str> = file.lines().collect();
        let mut at = 0;
        for l in block[1..].iter().filter(|l| !l.trim().is_empty()) {
            match file_lines[at..].iter().position(|f| f == l) {
                Some(i) => at += i + 1,
                None => panic!(
                    "docs/porting.md quotes {path} with a line that is not in the file (or not \
                     in this order): {l:?}; regenerate the quote from the file"
                ),
            }
        }
        quoted.push(path.to_owned());
    }
    assert!(
        quoted.iter().filter(|p| p.ends_with("tfport.c")).count() >= 8
            && quoted.iter().any(|p| p.ends_with("CMakeLists.txt")),
        "docs/porting.md should quote the example's tfport.c (at least 8 blocks) and its \
         CMakeLists.txt; it quotes: {quoted:?}"
    );
}
