//! `devplug check PLUGIN [-o KEY=VALUE]... [--timeout SECONDS] [--host-abi 1.N]
//! [--require-compared]`: a device
//! plugin's conformance (`devplug_core::check`), run in a child process of its own whose
//! progress is read line by line, so that a plugin that crashes or hangs is reported — with the
//! check it was in — instead of taking the tool down.
//!
//! The checks run as a host of the newest plugin ABI and, when the plugin declares an older
//! minor (it promises to load into hosts of that minor), once more, in a child of its own, as a
//! host of the plugin's declared minor (`RuntimeOptions::plugin_abi_minor`): the plugin conforms
//! only if both passes do. `--host-abi 1.N` runs one pass, as a host of ABI 1.N. Exit status: 0
//! when every check passed, 1 when one failed (or the plugin crashed or hung), and with
//! `--require-compared` also when a kernel declined every sample of a dtype (so that a CI job
//! does not pass a kernel the check never compared).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devplug_core::check::{check_plugin_as, declared_abi_version, Step};
use devplug_core::PLUGIN_ABI_MINOR;

/// The hidden subcommand the child process runs.
pub const CHILD: &str = "__check-child";

/// The plugin ABI's major version: the one `--host-abi` takes.
const ABI_MAJOR: u32 = 1;

/// `check`'s arguments.
pub struct CheckCommand {
    plugin: PathBuf,
    options: Vec<(String, String)>,
    timeout: Duration,
    /// `--host-abi 1.N`: one pass, as a host of ABI 1.N. `None`: as the newest host, then as
    /// a host of the plugin's declared minor when that is older.
    host_abi_minor: Option<u32>,
    /// `--require-compared`: a kernel check that compared nothing fails the run.
    require_compared: bool,
}

impl CheckCommand {
    /// The arguments again, for the child that checks as a host of ABI 1.`host_minor`.
    fn to_args(&self, host_minor: u32) -> Vec<String> {
        let mut args = vec![self.plugin.to_string_lossy().into_owned()];
        for (k, v) in &self.options {
            args.push("-o".into());
            args.push(format!("{k}={v}"));
        }
        args.push("--host-abi".into());
        args.push(format!("{ABI_MAJOR}.{host_minor}"));
        args
    }
}

/// `--host-abi`'s value: `1.N` with N from 0 to the newest minor.
fn host_abi(value: Option<&String>) -> Result<u32, String> {
    let range = format!("{ABI_MAJOR}.0 to {ABI_MAJOR}.{PLUGIN_ABI_MINOR}");
    let v = value.ok_or(format!("--host-abi needs a plugin ABI version, {range}"))?;
    let parsed = v
        .split_once('.')
        .and_then(|(major, minor)| Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?)))
        // As written: digits, no sign, no leading zero.
        .filter(|(major, minor)| *v == format!("{major}.{minor}"));
    match parsed {
        None => Err(format!(
            "--host-abi {v}: expected a plugin ABI version MAJOR.MINOR, {range}"
        )),
        Some((major, _)) if major != ABI_MAJOR => Err(format!(
            "--host-abi {v}: devplug speaks plugin ABI {range}; major version {major} is not one \
             of them"
        )),
        Some((_, minor)) if minor > PLUGIN_ABI_MINOR => Err(format!(
            "--host-abi {v}: devplug speaks plugin ABI {range}; {v} is newer than any of them"
        )),
        Some((_, minor)) => Ok(minor),
    }
}

pub fn parse(args: &[String]) -> Result<CheckCommand, String> {
    let mut plugin = None;
    let mut options = Vec::new();
    let mut timeout = Duration::from_secs(60);
    let mut host_abi_minor = None;
    let mut require_compared = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" | "--option" => options.push(crate::key_value(a, it.next())?),
            "--timeout" => {
                let s = it.next().ok_or("--timeout needs a number of seconds")?;
                let secs: u64 = s.parse().ok().filter(|&n| n > 0).ok_or(format!(
                    "--timeout {s}: expected a positive number of seconds"
                ))?;
                timeout = Duration::from_secs(secs);
            }
            "--host-abi" => host_abi_minor = Some(host_abi(it.next())?),
            "--require-compared" => require_compared = true,
            flag if flag.starts_with('-') => return Err(format!("unknown option '{flag}'")),
            path if plugin.is_none() => plugin = Some(path.to_string()),
            extra => return Err(format!("unexpected argument '{extra}'")),
        }
    }
    let plugin: String = plugin.ok_or("check needs the path of a plugin")?;
    let plugin = crate::plugin_path(&plugin)?;
    Ok(CheckCommand {
        plugin,
        options,
        timeout,
        host_abi_minor,
        require_compared,
    })
}

/// The child: runs the checks as a host of ABI 1.N (`--host-abi`, which the supervisor always
/// passes), one line per step on standard output (flushed at once, so that the supervisor has
/// every line written before a crash): `begin NAME`, `ok NAME`, `failed NAME\tWHY`, `note TEXT`
/// (newlines escaped as `\n`; a note after `begin NAME` ends that check as skipped). First
/// comes `abi MAJOR.MINOR`, the version the plugin declares, when it can be read (opening the
/// library and calling its entry, which belongs to the load: a crash there is one during it).
pub fn run_child(cmd: &CheckCommand) -> ExitCode {
    let options: Vec<(&str, &str)> = cmd
        .options
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "begin load");
    let _ = out.flush();
    if let Ok((major, minor)) = declared_abi_version(&cmd.plugin) {
        let _ = writeln!(out, "abi {major}.{minor}");
        let _ = out.flush();
    }
    let one_line = |s: &str| s.replace('\n', "\\n");
    let host_minor = cmd.host_abi_minor.unwrap_or(PLUGIN_ABI_MINOR);
    let passed = check_plugin_as(&cmd.plugin, &options, host_minor, &mut |step| {
        let line = match step {
            Step::Begin(name) => format!("begin {}", one_line(&name)),
            Step::End(name, Ok(())) => format!("ok {}", one_line(&name)),
            Step::End(name, Err(why)) => format!("failed {}\t{}", one_line(&name), one_line(&why)),
            Step::Note(text) => format!("note {}", one_line(&text)),
            Step::Unchecked(text) => format!("unchecked {}", one_line(&text)),
        };
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    });
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// What the supervisor learned from the child's lines.
#[derive(Default)]
struct Progress {
    passed: usize,
    failed: usize,
    /// Kernels that declined every sample of a dtype (the child's `unchecked` lines).
    unchecked: usize,
    /// The check that began and has not ended.
    running: Option<String>,
    /// The plugin ABI version the plugin declares (the child's `abi` line).
    declared: Option<(u32, u32)>,
}

/// One pass's counts, and the version the plugin declared (when the child could read it).
struct Pass {
    passed: usize,
    failed: usize,
    unchecked: usize,
    declared: Option<(u32, u32)>,
}

/// Runs the checks — once as the newest host, once more as a host of the plugin's declared
/// minor when that is older (or once, as `--host-abi` says) — each pass in a child process of
/// its own, and sums up.
pub fn supervise(cmd: &CheckCommand) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("devplug: cannot find its own executable: {e}");
            return ExitCode::from(1);
        }
    };
    println!("devplug check {}", cmd.plugin.display());
    let mut passes: Vec<(u32, Pass)> = Vec::new();
    let first = cmd.host_abi_minor.unwrap_or(PLUGIN_ABI_MINOR);
    let why = if cmd.host_abi_minor.is_some() {
        " (--host-abi)"
    } else {
        ""
    };
    println!("as an ABI {ABI_MAJOR}.{first} host{why}:");
    let Some(pass) = run_pass(&exe, cmd, first) else {
        return ExitCode::from(1);
    };
    let declared = pass.declared;
    passes.push((first, pass));
    if cmd.host_abi_minor.is_none() {
        if let Some((ABI_MAJOR, minor)) = declared.filter(|&(_, minor)| minor < first) {
            println!("as an ABI {ABI_MAJOR}.{minor} host (the plugin's declared minor):");
            let Some(pass) = run_pass(&exe, cmd, minor) else {
                return ExitCode::from(1);
            };
            passes.push((minor, pass));
        }
    }
    let passed: usize = passes.iter().map(|(_, p)| p.passed).sum();
    let failed: usize = passes.iter().map(|(_, p)| p.failed).sum();
    let unchecked: usize = passes.iter().map(|(_, p)| p.unchecked).sum();
    let each = if passes.len() > 1 {
        let each: Vec<String> = passes
            .iter()
            .map(|(minor, p)| {
                format!(
                    "as an ABI {ABI_MAJOR}.{minor} host: {} passed, {} failed",
                    p.passed, p.failed
                )
            })
            .collect();
        format!(" ({})", each.join("; "))
    } else {
        String::new()
    };
    let verdict = match (failed, unchecked) {
        (0, 0) => "conforms".to_string(),
        (0, n) if cmd.require_compared => format!(
            "does NOT conform with --require-compared: {n} kernel check(s) compared nothing \
             (the kernel declined every sample: see the notes)"
        ),
        (0, n) => format!(
            "conforms, but {n} kernel check(s) compared nothing (the kernel declined every \
             sample: see the notes)"
        ),
        _ => "does NOT conform".to_string(),
    };
    println!("devplug check: {passed} passed, {failed} failed: {verdict}{each}");
    if failed == 0 && !(cmd.require_compared && unchecked > 0) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Runs one pass, as a host of ABI 1.`host_minor`, in a child process: prints its findings as
/// they come, and reports a crash or a hang. `None` when the child could not be run at all
/// (said on standard error).
fn run_pass(exe: &std::path::Path, cmd: &CheckCommand, host_minor: u32) -> Option<Pass> {
    let mut child = match Command::new(exe)
        .arg(CHILD)
        .args(cmd.to_args(host_minor))
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("devplug: cannot start the check process: {e}");
            return None;
        }
    };
    let progress = Arc::new(Mutex::new(Progress::default()));
    let stdout = child.stdout.take().expect("piped");
    let reader = {
        let progress = progress.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                report_line(&line, &mut progress.lock().unwrap());
            }
        })
    };
    let deadline = Instant::now() + cmd.timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                eprintln!("devplug: lost the check process: {e}");
                return None;
            }
        }
    };
    let _ = reader.join();
    let mut p = progress.lock().unwrap();
    let during = p
        .running
        .take()
        .map_or_else(|| "between checks".to_string(), |n| format!("during '{n}'"));
    match status {
        None => {
            p.failed += 1;
            println!(
                "  HUNG    no answer within {} s {during}; the check process was killed",
                cmd.timeout.as_secs()
            );
        }
        Some(s) if s.signal().is_some() => {
            let sig = s.signal().unwrap_or(0);
            p.failed += 1;
            println!(
                "  CRASHED the plugin killed the check process {during} (signal {sig}{})",
                signal_name(sig)
            );
        }
        Some(s) if !s.success() && p.failed == 0 => {
            p.failed += 1;
            println!("  FAILED  the check process exited with {s} {during}");
        }
        Some(_) => {}
    }
    Some(Pass {
        passed: p.passed,
        failed: p.failed,
        unchecked: p.unchecked,
        declared: p.declared,
    })
}

/// Prints one of the child's lines for a person and notes it in `p`.
fn report_line(line: &str, p: &mut Progress) {
    let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
    match kind {
        "begin" => p.running = Some(rest.to_string()),
        "abi" => {
            p.declared = rest
                .split_once('.')
                .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
        }
        "ok" => {
            p.passed += 1;
            p.running = None;
            println!("  ok      {rest}");
        }
        "failed" => {
            p.failed += 1;
            p.running = None;
            let (name, why) = rest.split_once('\t').unwrap_or((rest, ""));
            println!("  FAILED  {name}: {why}");
        }
        // A note during a check ends it as skipped (an optional function not provided):
        // neither passed nor failed.
        "note" => {
            p.running = None;
            println!("  note    {rest}");
        }
        "unchecked" => {
            p.unchecked += 1;
            println!("  note    {rest}");
        }
        _ => println!("  {line}"),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        4 => ", SIGILL",
        6 => ", SIGABRT",
        7 => ", SIGBUS",
        8 => ", SIGFPE",
        9 => ", SIGKILL",
        11 => ", SIGSEGV",
        _ => "",
    }
}
