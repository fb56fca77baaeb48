//! `devplug`, the SDK's command-line tool.
//!
//! - `devplug check PLUGIN [-o KEY=VALUE]... [--timeout SECONDS] [--host-abi 1.N]
//!   [--require-compared]` proves a
//!   device plugin's conformance, as the newest host and as a host of the plugin's declared ABI
//!   minor ([`check`]).
//! - `devplug info [PLUGIN [-o KEY=VALUE]...]... [--no-env] [--ops]` shows what a runtime sees:
//!   its platforms, devices, loaded plugins and the plugins that failed to load, with why; with
//!   `--ops`, every op's signature and its kernels ([`info`]).
//! - `devplug bench PLUGIN [-o KEY=VALUE]...` measures a plugin's copies, eager dispatch and
//!   MatMul next to the CPU device's ([`bench`]).
//!
//! Exit status 2 is a usage error.

mod bench;
mod check;
mod info;

use std::process::ExitCode;

const USAGE: &str =
    "usage: devplug check PLUGIN [-o KEY=VALUE]... [--timeout SECONDS] [--host-abi 1.N]
                     [--require-compared]
       devplug info [PLUGIN [-o KEY=VALUE]...]... [--no-env] [--ops]
       devplug bench PLUGIN [-o KEY=VALUE]...
       devplug --version

  check    load the device plugin PLUGIN (a path to its shared library; a relative path is
           made absolute from the working directory) with the given load options and check
           what hosts rely on: its devices' memory, copies, streams, host callbacks, events
           and memory usage, and its kernels against the CPU device's results. The checks
           run as a host of the newest plugin ABI and, when the plugin declares an older
           minor (abi_minor in its dpp_plugin_api_t), once more as a host of that minor,
           which hands it that minor's smaller structs; it conforms only if both passes do.
           --host-abi 1.N runs one pass, as a host of plugin ABI 1.N (1.0 to the newest).
           Each pass runs in a child process: a crash or a hang (no answer within SECONDS,
           default 60) is reported with the check it happened in. --require-compared
           fails the run when a kernel declined every sample of a dtype (a kernel check
           that compared nothing), which otherwise only the summary says.
  info     create a runtime, load the plugins of DEVPLUG_PLUGIN_PATH (unless --no-env) and
           each PLUGIN with the options that follow it, and list the platforms, devices and
           plugins it has, and the plugins that failed to load with the reason. The plugins'
           own log lines are shown (DEVPLUG_LOG=info unless set): a plugin that found no
           device says why there. Exit status 1 when a PLUGIN named here failed to load.
           --ops also lists every op: its signature, the kernels for it (device type,
           platform, source, dtypes) and whether it has a decomposition.
  bench    load PLUGIN and measure, on the first device of each of its platforms, copies of
           64 MiB (against memcpy), an eager Add of 16 f32 per op and MatMul 256^3 f32
           (against the CPU device), and MatMul by the device's own clock (against the
           host's, same rounds), medians of several rounds in this process.";

/// A write to a closed pipe (`devplug check PLUGIN | head`) ends the tool quietly, as it ends
/// `ls`, instead of a panic in `println!`: Rust starts programs with SIGPIPE ignored.
fn end_quietly_on_a_closed_pipe() {
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            fn signal(signum: i32, handler: usize) -> usize;
        }
        const SIGPIPE: i32 = 13;
        const SIG_DFL: usize = 0;
        // SAFETY: the C library's `signal`, setting one signal back to its default
        // disposition, before the tool starts any thread or child.
        unsafe { signal(SIGPIPE, SIG_DFL) };
    }
}

fn main() -> ExitCode {
    end_quietly_on_a_closed_pipe();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("check") if args[1..].iter().any(|a| a == "--help" || a == "-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some("check") => match check::parse(&args[1..]) {
            Ok(cmd) => check::supervise(&cmd),
            Err(e) => usage_error(&e),
        },
        Some(check::CHILD) => match check::parse(&args[1..]) {
            Ok(cmd) => check::run_child(&cmd),
            Err(e) => usage_error(&e),
        },
        Some("info") => match info::parse(&args[1..]) {
            Ok(cmd) => info::run(&cmd),
            Err(e) => usage_error(&e),
        },
        Some("bench") => match bench::parse(&args[1..]) {
            Ok(cmd) => bench::run(&cmd),
            Err(e) => usage_error(&e),
        },
        Some("--version") => {
            println!("devplug {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some("--help" | "-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => usage_error(&format!("unknown command '{other}'")),
        None => usage_error("no command"),
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("devplug: {message}\n{USAGE}");
    ExitCode::from(2)
}

/// `KEY=VALUE` after `flag` (`-o`), as a pair.
fn key_value(flag: &str, kv: Option<&String>) -> Result<(String, String), String> {
    let kv = kv.ok_or(format!("{flag} needs KEY=VALUE"))?;
    let (k, v) = kv
        .split_once('=')
        .ok_or(format!("{flag} {kv}: expected KEY=VALUE"))?;
    Ok((k.to_string(), v.to_string()))
}

/// A plugin path named on the command line, made absolute: the command line names the file
/// explicitly, so a relative path means the working directory (the runtime itself never
/// resolves relative plugin paths).
fn plugin_path(path: &str) -> Result<std::path::PathBuf, String> {
    std::fs::canonicalize(path).map_err(|e| format!("{path}: {e}"))
}
