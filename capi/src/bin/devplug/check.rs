//! `devplug check PLUGIN [-o KEY=VALUE]... [--timeout SECONDS]`: a device plugin's conformance
//! (`devplug_core::check`), run in a child process of its own whose progress is read line by
//! line, so that a plugin that crashes or hangs is reported — with the check it was in — instead
//! of taking the tool down. Exit status: 0 when every check passed, 1 when one failed (or the
//! plugin crashed or hung).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use devplug_core::check::{check_plugin, Step};

/// The hidden subcommand the child process runs.
pub const CHILD: &str = "__check-child";

/// `check`'s arguments.
pub struct CheckCommand {
    plugin: PathBuf,
    options: Vec<(String, String)>,
    timeout: Duration,
}

impl CheckCommand {
    /// The arguments again, for the child.
    fn to_args(&self) -> Vec<String> {
        let mut args = vec![self.plugin.to_string_lossy().into_owned()];
        for (k, v) in &self.options {
            args.push("-o".into());
            args.push(format!("{k}={v}"));
        }
        args
    }
}

pub fn parse(args: &[String]) -> Result<CheckCommand, String> {
    let mut plugin = None;
    let mut options = Vec::new();
    let mut timeout = Duration::from_secs(60);
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
    })
}

/// The child: runs the checks, one line per step on standard output (flushed at once, so
/// that the supervisor has every line written before a crash): `begin NAME`, `ok NAME`,
/// `failed NAME\tWHY`, `note TEXT` (newlines escaped as `\n`; a note after `begin NAME` ends
/// that check as skipped).
pub fn run_child(cmd: &CheckCommand) -> ExitCode {
    let options: Vec<(&str, &str)> = cmd
        .options
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut out = std::io::stdout().lock();
    let one_line = |s: &str| s.replace('\n', "\\n");
    let passed = check_plugin(&cmd.plugin, &options, &mut |step| {
        let line = match step {
            Step::Begin(name) => format!("begin {}", one_line(&name)),
            Step::End(name, Ok(())) => format!("ok {}", one_line(&name)),
            Step::End(name, Err(why)) => format!("failed {}\t{}", one_line(&name), one_line(&why)),
            Step::Note(text) => format!("note {}", one_line(&text)),
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
    /// The check that began and has not ended.
    running: Option<String>,
}

/// Runs the child, prints its findings as they come, and reports a crash or a hang.
pub fn supervise(cmd: &CheckCommand) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("devplug: cannot find its own executable: {e}");
            return ExitCode::from(1);
        }
    };
    println!("devplug check {}", cmd.plugin.display());
    let mut child = match Command::new(exe)
        .arg(CHILD)
        .args(cmd.to_args())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("devplug: cannot start the check process: {e}");
            return ExitCode::from(1);
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
                return ExitCode::from(1);
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
    println!(
        "devplug check: {} passed, {} failed: {}",
        p.passed,
        p.failed,
        if p.failed == 0 {
            "conforms"
        } else {
            "does NOT conform"
        }
    );
    if p.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Prints one of the child's lines for a person and notes it in `p`.
fn report_line(line: &str, p: &mut Progress) {
    let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
    match kind {
        "begin" => p.running = Some(rest.to_string()),
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
