//! Integration tests of devplug (see `tests/tests`): helpers shared by them.
//!
//! `build.rs` has already configured, built and installed the CMake project before any test
//! runs; these functions say where, and run external tools with readable failures.
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Runtime options for a test: nothing discovered from the environment (each test loads the
/// plugins it needs).
pub fn options() -> devplug_core::RuntimeOptions {
    devplug_core::RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    }
}

/// Holds `stream` behind a host callback: work enqueued on it from now on runs only once the
/// returned gate is opened (`send(())`) or dropped (so a failing test does not hang the
/// stream).
pub fn hold_stream(stream: &devplug_core::Stream) -> std::sync::mpsc::Sender<()> {
    let (open, gate) = std::sync::mpsc::channel::<()>();
    stream
        .host_callback(Box::new(move || {
            let _ = gate.recv();
        }))
        .expect("a host callback to hold the stream");
    open
}

/// A runtime with [`options`].
pub fn runtime() -> devplug_core::Runtime {
    devplug_core::Runtime::new(options()).expect("a runtime")
}

/// A zoo variant whose kernel is a `Reshape` on `ZOO:0` (the kernel-state variants), loaded
/// into a runtime of its own, with `[1, 2, 3, 4]` (f32) on the device to reshape to `[2, 2]`.
pub struct ZooReshape {
    pub rt: devplug_core::Runtime,
    pub zoo: std::sync::Arc<devplug_core::Device>,
    pub x: devplug_core::Tensor,
    pub reshape: devplug_core::OpHandle,
    /// `shape = [2, 2]`.
    pub attrs: devplug_core::Attrs,
}

impl ZooReshape {
    /// Loads zoo `variant` (which must load).
    pub fn load(variant: &str) -> ZooReshape {
        let rt = runtime();
        rt.load_plugin(zoo_path(variant), &[])
            .expect("the zoo variant loads");
        let zoo = rt.find_device("ZOO:0").expect("ZOO:0");
        let x = devplug_core::Tensor::from_slice(&zoo, &[4], &[1f32, 2.0, 3.0, 4.0]).expect("x");
        let reshape = rt.op("Reshape").expect("Reshape");
        let attrs = devplug_core::Attrs::new().with("shape", [2, 2]);
        ZooReshape {
            rt,
            zoo,
            x,
            reshape,
            attrs,
        }
    }

    /// The Reshape run strictly on ZOO:0 (its kernel or an error).
    pub fn run_on_zoo(&self) -> devplug_core::Result<devplug_core::Tensor> {
        self.rt.run1(
            &self.reshape,
            std::slice::from_ref(&self.x),
            &self.attrs,
            &devplug_core::RunOptions::on(&self.zoo).strict(),
        )
    }
}

/// Every log message of the process since the first [`collect_log`].
pub type CollectedLog = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// Collects every log message of the process, at info level and above, from now on: the
/// process-wide log callback is installed once and shared, so tests that run at once in one
/// process each pick out their own lines (by a platform name of their own, say).
pub fn collect_log() -> CollectedLog {
    static LOG: std::sync::OnceLock<CollectedLog> = std::sync::OnceLock::new();
    LOG.get_or_init(|| {
        let log = CollectedLog::default();
        let l = log.clone();
        devplug_core::log::set_level(Some(devplug_core::log::Level::Info));
        devplug_core::log::set_callback(Some(std::sync::Arc::new(
            move |r: &devplug_core::log::Record| l.lock().unwrap().push(r.message.to_string()),
        )));
        log
    })
    .clone()
}

/// The collected messages `pick` selects.
pub fn log_lines(log: &CollectedLog, pick: impl Fn(&str) -> bool) -> Vec<String> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|m| pick(m))
        .cloned()
        .collect()
}

/// A plugin's kernel-state lines (`log_kernel_states=1`: "<prefix>created …; N live",
/// "<prefix>destroyed; N live") that start with `prefix`, in order: (created?, live after).
pub fn kernel_state_lines(log: &CollectedLog, prefix: &str) -> Vec<(bool, u64)> {
    log_lines(log, |m| m.starts_with(prefix))
        .iter()
        .map(|m| {
            let live = m
                .rsplit("; ")
                .next()
                .and_then(|t| t.strip_suffix(" live"))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no live count in {m:?}"));
            (m[prefix.len()..].starts_with("created"), live)
        })
        .collect()
}

/// The placement events a runtime has recorded, in order (see [`record_placements`]).
pub type PlacementLog = std::sync::Arc<std::sync::Mutex<Vec<devplug_core::PlacementEvent>>>;

/// Turns on `rt`'s placement log and collects every event it records from now on.
pub fn record_placements(rt: &devplug_core::Runtime) -> PlacementLog {
    let log: PlacementLog = Default::default();
    let l = log.clone();
    rt.set_placement_callback(Some(std::sync::Arc::new(
        move |e: &devplug_core::PlacementEvent| l.lock().unwrap().push(e.clone()),
    )));
    log
}

/// The CMake build directory of the whole project (where ctest runs).
pub fn build_dir() -> PathBuf {
    PathBuf::from(env!("DEVPLUG_TEST_BUILD_DIR"))
}

/// The install prefix of the SDK (what `find_package(DevPlug)` is pointed at).
pub fn prefix() -> PathBuf {
    PathBuf::from(env!("DEVPLUG_TEST_PREFIX"))
}

/// The workspace root.
pub fn source_dir() -> PathBuf {
    PathBuf::from(env!("DEVPLUG_SOURCE_DIR"))
}

/// Panics with a clear message when build.rs did not build the CMake project (it skips it
/// under clippy or with DEVPLUG_TESTS_SKIP_CMAKE).
pub fn require_cmake_build() {
    assert!(
        build_dir().join("CMakeCache.txt").is_file(),
        "the CMake build of devplug is missing at {} (was DEVPLUG_TESTS_SKIP_CMAKE set when \
         devplug-tests was built?)",
        build_dir().display()
    );
}

/// The `devplug` tool installed with the SDK (`<prefix>/bin/devplug`).
pub fn tool() -> PathBuf {
    require_cmake_build();
    let p = prefix().join("bin").join("devplug");
    assert!(
        p.is_file(),
        "the devplug tool was not installed at {}",
        p.display()
    );
    p
}

/// Runs the installed `devplug ARGS`: its exit code and standard output (standard error
/// appended).
pub fn devplug_tool(args: &[&str]) -> (i32, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(tool())
        .args(args)
        .env_remove("DEVPLUG_PLUGIN_PATH")
        .env_remove("DEVPLUG_LOG")
        .output()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", tool().display()));
    let mut out = String::from_utf8_lossy(&stdout).into_owned();
    out.push_str(&String::from_utf8_lossy(&stderr));
    (status.code().unwrap_or(-1), out)
}

/// Renders a command line for messages.
pub fn display_command(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// Runs `cmd`, prints its command line and output (cargo test shows them for a failing test),
/// and panics unless it exits 0.
pub fn run(cmd: &mut Command) -> Output {
    let line = display_command(cmd);
    // cargo test puts target/<profile> on LD_LIBRARY_PATH, which would make the programs under
    // test load a libdevplug of the outer build instead of the one they were built with.
    cmd.env_remove("LD_LIBRARY_PATH");
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start `{line}`: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("$ {line}\n{stdout}{stderr}");
    assert!(
        output.status.success(),
        "`{line}` failed ({}); its output is printed above",
        output.status
    );
    output
}

/// Whether `program` can be started (e.g. `pkg-config --version`).
pub fn has_program(program: impl AsRef<OsStr>) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A fresh directory under the system temp dir, removed on drop unless the test panicked
/// (so a failure leaves its build tree behind to look at).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `<tmp>/devplug-<label>-<pid>-<time>-<n>`.
    pub fn new(label: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "devplug-{label}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("keeping {} for inspection", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The path of a plugin the CMake build made: `<build>/plugins/lib<name>.so`.
pub fn plugin_path(name: &str) -> PathBuf {
    require_cmake_build();
    let p = build_dir().join("plugins").join(format!("lib{name}.so"));
    assert!(p.is_file(), "plugin {} was not built", p.display());
    p
}

/// The path of a variant of the malformed-plugin zoo (plugins/zoo):
/// `<build>/plugins/zoo/libzoo_<variant>.so`.
pub fn zoo_path(variant: &str) -> PathBuf {
    require_cmake_build();
    let p = build_dir()
        .join("plugins")
        .join("zoo")
        .join(format!("libzoo_{variant}.so"));
    assert!(p.is_file(), "zoo variant {} was not built", p.display());
    p
}
