//! `devplug info [PLUGIN [-o KEY=VALUE]...]... [--no-env]`: what a runtime sees — platforms
//! (type, priority, owner, devices, which one `TYPE:i` means), devices (hardware, memory),
//! plugins (version, path, platforms, kernels, ops) and the plugins that failed to load, with
//! the reason; with `--ops`, every op's signature and where kernels for it exist. The question it answers is "does devplug see my device, and if not, why?": the
//! plugins' log lines are shown at `info` level (unless `DEVPLUG_LOG` says otherwise), where a
//! plugin that found no device says why.

use std::path::PathBuf;
use std::process::ExitCode;

use devplug_core::{Runtime, RuntimeOptions};

/// `info`'s arguments.
#[derive(Debug)]
pub struct InfoCommand {
    /// Each plugin named, with its load options.
    plugins: Vec<(PathBuf, Vec<(String, String)>)>,
    /// Whether `DEVPLUG_PLUGIN_PATH` is read.
    from_env: bool,
    /// Whether every op is listed (`--ops`).
    ops: bool,
}

pub fn parse(args: &[String]) -> Result<InfoCommand, String> {
    let mut cmd = InfoCommand {
        plugins: Vec::new(),
        from_env: true,
        ops: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" | "--option" => {
                let kv = crate::key_value(a, it.next())?;
                let (_, options) = cmd
                    .plugins
                    .last_mut()
                    .ok_or(format!("{a} {}={} comes before any PLUGIN", kv.0, kv.1))?;
                options.push(kv);
            }
            "--no-env" => cmd.from_env = false,
            "--ops" => cmd.ops = true,
            flag if flag.starts_with('-') => return Err(format!("unknown option '{flag}'")),
            path => cmd.plugins.push((crate::plugin_path(path)?, Vec::new())),
        }
    }
    Ok(cmd)
}

fn plural(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// `bytes` in the largest binary unit that keeps a number of at least 1.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

pub fn run(cmd: &InfoCommand) -> ExitCode {
    if std::env::var_os("DEVPLUG_LOG").is_none() {
        // Before anything logs (the level is read once): the plugins' own account of what they
        // found is what this command is for.
        std::env::set_var("DEVPLUG_LOG", "info");
    }
    let rt = match Runtime::new(RuntimeOptions {
        discover_from_env: cmd.from_env,
        ..Default::default()
    }) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("devplug: cannot create a runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let mut failed = false;
    for (path, options) in &cmd.plugins {
        let opts: Vec<(&str, &str)> = options
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        // A failure is listed below with the others.
        failed |= rt.load_plugin(path, &opts).is_err();
    }

    println!(
        "devplug {} (plugin ABI {}.{})",
        env!("CARGO_PKG_VERSION"),
        devplug::version::DP_ABI_VERSION_MAJOR,
        devplug::version::DP_ABI_VERSION_MINOR
    );
    println!("platforms:");
    for p in rt.platforms() {
        let i = &p.info;
        println!(
            "  {:<10} type {:<6} priority {:<5} {:<20} {}{}",
            i.name,
            i.device_type,
            i.priority,
            p.owner,
            plural(p.platform.device_count(), "device"),
            if p.is_active() {
                format!(", active ({}:i)", i.device_type)
            } else {
                String::new()
            }
        );
    }
    println!("devices:");
    for d in rt.devices() {
        let p = d.properties();
        let hw = &p.description.hardware_name;
        println!(
            "  {:<10} {} ({}), {} memory{}",
            p.name,
            if hw.is_empty() {
                "unnamed hardware"
            } else {
                hw
            },
            p.platform,
            bytes(p.total_memory),
            if p.host_visible { ", host-visible" } else { "" }
        );
    }
    let plugins = rt.plugins();
    if !plugins.is_empty() {
        println!("plugins:");
    }
    let kernels = rt.kernels().all();
    for pl in plugins {
        let owner = format!("plugin '{}'", pl.name);
        let n = kernels.iter().filter(|k| k.source == owner).count();
        println!(
            "  {} {} ({}): platforms {}; {}{}",
            pl.name,
            pl.version,
            pl.path.display(),
            pl.platforms.join(", "),
            plural(n, "kernel"),
            if pl.ops.is_empty() {
                String::new()
            } else {
                format!("; ops {}", pl.ops.join(", "))
            }
        );
    }
    let failures = rt.plugin_failures();
    if !failures.is_empty() {
        println!("not loaded:");
    }
    for f in failures {
        println!("  {}: {}", f.path.display(), f.error);
    }
    if cmd.ops {
        print_ops(&rt);
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Every op: its signature, then the kernels for it (device type, the platform they are bound
/// to, who registered them, the dtypes they take when not all, a priority other than 0) and
/// whether it has a decomposition — what runs an op on a device without a kernel for it.
fn print_ops(rt: &Runtime) {
    let names = rt.ops().names();
    let kernels = rt.kernels().all();
    println!("ops ({}):", names.len());
    for name in names {
        let Ok(op) = rt.ops().find(&name) else {
            continue; // not unregistered meanwhile: ops are never removed
        };
        println!("  {}", op.def().signature());
        let mut on: Vec<String> = kernels
            .iter()
            .filter(|k| k.op == name)
            .map(|k| {
                let mut notes = vec![k.source.clone()];
                if !k.dtypes.is_empty() {
                    let d: Vec<&str> = k.dtypes.iter().map(|d| d.name()).collect();
                    notes.push(d.join(", "));
                }
                if k.priority != 0 {
                    notes.push(format!("priority {}", k.priority));
                }
                format!("{} on {} ({})", k.device_type, k.binding, notes.join("; "))
            })
            .collect();
        on.sort();
        let decomposed = op.def().decomposition.is_some();
        let line = match (on.is_empty(), decomposed) {
            (true, true) => "no kernel: runs as its decomposition".to_string(),
            (true, false) => "no kernel".to_string(),
            (false, true) => format!("kernels: {}; elsewhere: its decomposition", on.join(", ")),
            (false, false) => format!("kernels: {}", on.join(", ")),
        };
        println!("      {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_plurals() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(64 << 20), "64.0 MiB");
        assert_eq!(bytes(80 * (1 << 30) + (1 << 29)), "80.5 GiB");
        assert_eq!(plural(1, "device"), "1 device");
        assert_eq!(plural(0, "device"), "0 devices");
    }

    #[test]
    fn options_follow_their_plugin() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cmd = parse(&args(&["/", "-o", "a=1", "-o", "b=2", "--no-env"])).unwrap();
        assert!(!cmd.from_env);
        assert_eq!(cmd.plugins.len(), 1);
        assert_eq!(
            cmd.plugins[0].1,
            [("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        assert!(parse(&args(&["-o", "a=1"]))
            .unwrap_err()
            .contains("before any PLUGIN"));
        assert!(parse(&args(&["/", "-o", "novalue"]))
            .unwrap_err()
            .contains("KEY=VALUE"));
        assert!(parse(&args(&["--verbose"]))
            .unwrap_err()
            .contains("unknown option"));
        assert!(parse(&args(&["/no/such/plugin.so"])).is_err());
    }
}
