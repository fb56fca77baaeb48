//! Finding plugins: `DEVPLUG_PLUGIN_PATH` and the runtime's search path.
//!
//! Entries are files or folders, `:`-separated. Folders are listed (files ending in `.so`),
//! sorted by name, so the order is deterministic. Relative entries are never resolved against
//! the working directory: they are dropped with a reason. The environment variable is
//! ignored when the process runs with elevated privileges (setuid/setgid or file
//! capabilities), as `secure_getenv` does.

use std::path::{Path, PathBuf};

/// The environment variable that adds plugins.
pub const PLUGIN_PATH_ENV: &str = "DEVPLUG_PLUGIN_PATH";

/// True when the process runs with elevated privileges (the kernel's `AT_SECURE`, which is
/// what glibc's `secure_getenv` checks).
pub fn process_is_elevated() -> bool {
    // SAFETY: getauxval only reads the process's auxiliary vector.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// The search path from the environment: `None` when unset, or when `elevated` (then the
/// variable is ignored, and a warning is logged).
pub fn plugin_path_from_env(elevated: bool) -> Option<String> {
    let value = std::env::var(PLUGIN_PATH_ENV).ok()?;
    if elevated {
        crate::log::warn(&format!(
            "{PLUGIN_PATH_ENV} is ignored: the process runs with elevated privileges"
        ));
        return None;
    }
    Some(value)
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
                Ok(rd) => {
                    let mut files: Vec<PathBuf> = rd
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "so"))
                        .collect();
                    files.sort();
                    out.extend(files.into_iter().map(Ok));
                }
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

    #[test]
    fn the_environment_is_ignored_when_elevated() {
        // The variable is read, but an elevated process must not use it.
        std::env::set_var(PLUGIN_PATH_ENV, "/some/where");
        assert_eq!(plugin_path_from_env(false).as_deref(), Some("/some/where"));
        assert_eq!(plugin_path_from_env(true), None);
        std::env::remove_var(PLUGIN_PATH_ENV);
        assert!(!process_is_elevated(), "tests do not run setuid");
    }
}
