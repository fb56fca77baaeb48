//! Finding plugins: `DEVPLUG_PLUGIN_PATH` and the runtime's search path.
//!
//! Entries are files or folders, `:`-separated. Folders are listed (entries ending in `.so`),
//! sorted by name, so the order is deterministic; an entry that is not a usable file is
//! dropped with its reason, like a relative entry. Relative entries are never resolved against
//! the working directory: they are dropped with a reason. The environment variable is
//! ignored when the process runs with elevated privileges (setuid/setgid or file
//! capabilities), as `secure_getenv` does.

use std::path::{Path, PathBuf};

/// The environment variable that adds plugins.
pub const PLUGIN_PATH_ENV: &str = "DEVPLUG_PLUGIN_PATH";

/// True when the process runs with elevated privileges (the kernel's `AT_SECURE`, which is
/// what glibc's `secure_getenv` checks).
pub fn process_is_elevated() -> bool {
    #[cfg(test)]
    if let Some(elevated) = tests::PRETEND_ELEVATED.with(|p| p.get()) {
        return elevated;
    }
    // SAFETY: getauxval only reads the process's auxiliary vector.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The environment variable `name`, read as `secure_getenv` reads it: `None` when unset or
/// empty, or when `elevated` (then the variable is ignored, and a warning is logged). Every
/// variable that brings code into the process or names a file the runtime writes is read
/// through this.
pub fn trusted_env(name: &str, elevated: bool) -> Option<String> {
    #[cfg(test)]
    let pretended = tests::PRETEND_ENV.with(|p| {
        p.borrow()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    });
    #[cfg(not(test))]
    let pretended = None;
    let value = pretended
        .or_else(|| std::env::var(name).ok())
        .filter(|v| !v.is_empty())?;
    if elevated {
        crate::log::warn(&format!(
            "{name} is ignored: the process runs with elevated privileges"
        ));
        return None;
    }
    Some(value)
}

/// The search path from the environment ([`trusted_env`] of [`PLUGIN_PATH_ENV`]).
pub fn plugin_path_from_env(elevated: bool) -> Option<String> {
    trusted_env(PLUGIN_PATH_ENV, elevated)
}

/// Expands a `:`-separated search path into candidate files, in order. Entries that cannot be
/// used come back as `Err((entry, reason))`.
pub fn search_path_candidates(search_path: &str) -> Vec<Result<PathBuf, (PathBuf, String)>> {
    let mut out = Vec::new();
    for entry in search_path.split(':').filter(|e| !e.is_empty()) {
        let p = Path::new(entry);
        if !p.is_absolute() {
            out.push(Err((
                p.to_path_buf(),
                "relative plugin paths are never resolved against the working directory".into(),
            )));
            continue;
        }
        if p.is_dir() {
            match std::fs::read_dir(p) {
                Ok(rd) => out.extend(folder_candidates(p, rd)),
                Err(e) => out.push(Err((
                    p.to_path_buf(),
                    format!("cannot list the folder: {e}"),
                ))),
            }
        } else {
            out.push(Ok(p.to_path_buf()));
        }
    }
    out
}

/// The candidates of a listed folder, sorted by name: its `*.so` entries. One that is not a
/// regular file (a folder, a broken symbolic link) or cannot be read is dropped with a reason;
/// other names are not candidates (each is noted at the `info` log level).
fn folder_candidates(
    folder: &Path,
    entries: std::fs::ReadDir,
) -> Vec<Result<PathBuf, (PathBuf, String)>> {
    let mut out = Vec::new();
    for entry in entries {
        let path = match entry {
            Ok(e) => e.path(),
            Err(e) => {
                out.push(Err((
                    folder.to_path_buf(),
                    format!("cannot read an entry of the folder: {e}"),
                )));
                continue;
            }
        };
        if path.extension().is_none_or(|x| x != "so") {
            crate::log::log(
                crate::log::Level::Info,
                &format!(
                    "plugin search: '{}' skipped: not named *.so",
                    path.display()
                ),
            );
            continue;
        }
        if path.is_file() {
            out.push(Ok(path));
        } else {
            let why = match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    "a symbolic link to nothing (or to something that is not a file)"
                }
                Ok(_) => "not a regular file",
                Err(_) => "gone while the folder was listed",
            };
            out.push(Err((path, why.to_string())));
        }
    }
    fn path(c: &Result<PathBuf, (PathBuf, String)>) -> &Path {
        match c {
            Ok(p) | Err((p, _)) => p,
        }
    }
    out.sort_by(|a, b| path(a).cmp(path(b)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_listed_sorted_and_relative_entries_dropped() {
        let dir = std::env::temp_dir().join(format!("devplug-discovery-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["b.so", "a.so", "notes.txt"] {
            std::fs::write(dir.join(f), b"x").unwrap();
        }
        let path = format!("relative/dir::{}:/abs/file.so", dir.display());
        let got = search_path_candidates(&path);
        assert_eq!(got.len(), 4);
        assert!(
            matches!(&got[0], Err((p, why)) if p == Path::new("relative/dir") && why.contains("relative"))
        );
        assert_eq!(got[1].as_ref().unwrap(), &dir.join("a.so"));
        assert_eq!(got[2].as_ref().unwrap(), &dir.join("b.so"));
        assert_eq!(got[3].as_ref().unwrap(), Path::new("/abs/file.so"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every `*.so` entry of a folder is a candidate: one that cannot be loaded for what it is
    /// (a folder, a broken link) comes back with the reason, in name order with the others.
    #[test]
    fn unusable_entries_of_a_folder_come_back_with_their_reason() {
        let dir =
            std::env::temp_dir().join(format!("devplug-discovery-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("c.so")).unwrap();
        std::fs::write(dir.join("a.so"), b"x").unwrap();
        std::fs::write(dir.join("README"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.join("missing.so"), dir.join("b.so")).unwrap();
        std::os::unix::fs::symlink(dir.join("a.so"), dir.join("d.so")).unwrap();
        let got = search_path_candidates(&dir.display().to_string());
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0].as_ref().unwrap(), &dir.join("a.so"));
        assert!(
            matches!(&got[1], Err((p, why)) if p == &dir.join("b.so") && why.contains("symbolic link")),
            "{got:?}"
        );
        assert!(
            matches!(&got[2], Err((p, why)) if p == &dir.join("c.so") && why.contains("not a regular file")),
            "{got:?}"
        );
        assert_eq!(got[3].as_ref().unwrap(), &dir.join("d.so"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    thread_local! {
        /// What [`process_is_elevated`] answers on this test thread, when set (a process
        /// cannot be made setuid from inside a test).
        pub(super) static PRETEND_ELEVATED: std::cell::Cell<Option<bool>> =
            const { std::cell::Cell::new(None) };
        /// Variables [`trusted_env`] reads on this test thread instead of the process's
        /// environment: setting one would reach every runtime the other tests create at the
        /// same time. (tests/tests/zoo.rs and tests/tests/trace.rs set the real variables, in
        /// test binaries of their own.)
        pub(super) static PRETEND_ENV: std::cell::RefCell<Vec<(String, String)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    /// The variables are read, but an elevated process must not use them: neither the function
    /// that reads them nor a runtime (a runtime created while the process counts as elevated
    /// tries no plugin of `DEVPLUG_PLUGIN_PATH`'s and writes no `DEVPLUG_TRACE` file).
    #[test]
    fn the_environment_is_ignored_when_elevated() {
        let missing = std::env::temp_dir().join(format!("devplug-no-such-{}", std::process::id()));
        let trace = std::env::temp_dir().join(format!("devplug-env-{}.json", std::process::id()));
        PRETEND_ENV.with(|p| {
            *p.borrow_mut() = vec![
                (PLUGIN_PATH_ENV.into(), missing.display().to_string()),
                (
                    crate::runtime::TRACE_ENV.into(),
                    trace.display().to_string(),
                ),
            ]
        });
        let want = missing.display().to_string();
        assert_eq!(plugin_path_from_env(false).as_deref(), Some(want.as_str()));
        assert_eq!(plugin_path_from_env(true), None);
        assert!(!process_is_elevated(), "tests do not run setuid");
        let discovering = || {
            crate::Runtime::new(crate::RuntimeOptions {
                discover_from_env: true,
                ..Default::default()
            })
            .unwrap()
        };
        let rt = discovering();
        let tried = rt.plugin_failures();
        assert_eq!(tried.len(), 1, "{tried:?}");
        assert_eq!(tried[0].path, missing);
        assert!(rt.tracing());
        drop(rt);
        std::fs::remove_file(&trace).expect("the runtime wrote its trace");
        PRETEND_ELEVATED.with(|p| p.set(Some(true)));
        let rt = discovering();
        let (tried, tracing) = (rt.plugin_failures(), rt.tracing());
        drop(rt);
        PRETEND_ELEVATED.with(|p| p.set(None));
        PRETEND_ENV.with(|p| p.borrow_mut().clear());
        assert!(
            tried.is_empty(),
            "an elevated process used {PLUGIN_PATH_ENV}: {tried:?}"
        );
        assert!(
            !tracing,
            "an elevated process traced to its DEVPLUG_TRACE file"
        );
        assert!(!trace.exists());
    }
}
