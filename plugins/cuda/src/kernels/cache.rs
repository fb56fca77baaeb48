//! A disk cache of compiled kernel images, so that only the first process on a machine pays for
//! compiling a unit (NVRTC's machine code takes a second or two per unit; reading it back, a
//! millisecond) — what the driver's own JIT cache (`~/.nv/ComputeCache`) does for PTX.
//!
//! Where: `DEVPLUG_CUDA_CACHE` (a folder; `off` or empty: no cache), else
//! `$XDG_CACHE_HOME/devplug/cuda`, else `$HOME/.cache/devplug/cuda`. A cached image is GPU code,
//! so like every variable that brings code into the process these are ignored — and nothing is
//! cached — when the process runs with elevated privileges (the kernel's `AT_SECURE`, what
//! glibc's `secure_getenv` tests). An entry's name is a 128-bit hash of everything the image
//! depends on (the source, the architecture, the NVRTC version); it is written to a temporary
//! file and renamed, so readers never see half of one; one that fails to load is removed.

use std::path::{Path, PathBuf};

use crate::nvrtc::Image;

/// The folder chosen from the environment `env` (a lookup), or `None` for no cache.
pub(crate) fn folder(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(dir) = env("DEVPLUG_CUDA_CACHE") {
        return match dir.trim() {
            "" | "off" | "0" => None,
            d => Some(PathBuf::from(d)),
        };
    }
    let nonempty = |k: &str| env(k).filter(|v| !v.is_empty());
    nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|h| Path::new(&h).join(".cache")))
        .map(|base| base.join("devplug").join("cuda"))
        .filter(|p| p.is_absolute())
}

/// Whether `auxv` (the bytes of `/proc/self/auxv`: pairs of native words) has `AT_SECURE` set.
pub(crate) fn auxv_secure(auxv: &[u8]) -> bool {
    const AT_SECURE: u64 = 23;
    let words: Vec<u64> = auxv
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    words
        .chunks_exact(2)
        .any(|pair| pair[0] == AT_SECURE && pair[1] != 0)
}

/// Whether this process runs with elevated privileges (setuid, setgid, capabilities). When the
/// auxiliary vector cannot be read, it is assumed to.
fn elevated() -> bool {
    std::fs::read("/proc/self/auxv").map_or(true, |a| auxv_secure(&a))
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The entry name for `program` compiled for compute capability `arch` by NVRTC `nvrtc`.
pub(crate) fn key(program: &str, arch: u32, nvrtc: (i32, i32)) -> String {
    use std::hash::{Hash, Hasher};
    let mut sip = std::collections::hash_map::DefaultHasher::new();
    program.hash(&mut sip);
    format!(
        "{:016x}{:016x}-sm{arch}-nvrtc{}.{}",
        fnv1a(program.as_bytes()),
        sip.finish(),
        nvrtc.0,
        nvrtc.1
    )
}

/// The cache in a folder.
pub(crate) struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// The cache the environment names (see the module docs), or `None`.
    pub(crate) fn from_env() -> Option<DiskCache> {
        if elevated() {
            return None;
        }
        folder(|k| std::env::var(k).ok()).map(DiskCache::at)
    }

    /// The cache in `dir` (created when something is stored).
    pub(crate) fn at(dir: PathBuf) -> DiskCache {
        DiskCache { dir }
    }

    fn path(&self, key: &str, ext: &str) -> PathBuf {
        self.dir.join(format!("{key}.{ext}"))
    }

    /// The image stored under `key`, if any.
    pub(crate) fn load(&self, key: &str) -> Option<Image> {
        if let Ok(b) = std::fs::read(self.path(key, "cubin")) {
            return (!b.is_empty()).then_some(Image::Cubin(b));
        }
        let b = std::fs::read(self.path(key, "ptx")).ok()?;
        std::ffi::CString::new(b).ok().map(Image::Ptx)
    }

    /// Stores `image` under `key`; failures (a read-only folder, a full disk) only mean no
    /// cache.
    pub(crate) fn store(&self, key: &str, image: &Image) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        let (bytes, ext): (&[u8], &str) = match image {
            Image::Cubin(b) => (b, "cubin"),
            Image::Ptx(p) => (p.as_bytes(), "ptx"),
        };
        let tmp = self
            .dir
            .join(format!(".{key}.{ext}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, self.path(key, ext)).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Removes what is stored under `key` (an image that did not load).
    pub(crate) fn remove(&self, key: &str) {
        for ext in ["cubin", "ptx"] {
            let _ = std::fs::remove_file(self.path(key, ext));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_comes_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            folder(env(&[("HOME", "/home/u")])),
            Some(PathBuf::from("/home/u/.cache/devplug/cuda"))
        );
        assert_eq!(
            folder(env(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/c")])),
            Some(PathBuf::from("/c/devplug/cuda"))
        );
        assert_eq!(
            folder(env(&[("HOME", "/home/u"), ("DEVPLUG_CUDA_CACHE", "/k")])),
            Some(PathBuf::from("/k"))
        );
        assert_eq!(
            folder(env(&[("HOME", "/home/u"), ("DEVPLUG_CUDA_CACHE", "off")])),
            None
        );
        assert_eq!(folder(env(&[("HOME", "relative")])), None);
        assert_eq!(folder(env(&[])), None);
    }

    #[test]
    fn at_secure_is_read_from_the_auxiliary_vector() {
        let words = |w: &[u64]| w.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        assert!(!auxv_secure(&words(&[6, 4096, 23, 0, 0, 0])));
        assert!(auxv_secure(&words(&[6, 4096, 23, 1, 0, 0])));
        assert!(!auxv_secure(&[]));
        // This test does not run setuid.
        assert!(!elevated());
    }

    #[test]
    fn keys_change_with_what_the_image_depends_on() {
        let k = key("src", 90, (13, 0));
        assert_eq!(k.len(), 32 + "-sm90-nvrtc13.0".len());
        assert_ne!(k, key("src ", 90, (13, 0)));
        assert_ne!(k, key("src", 80, (13, 0)));
        assert_ne!(k, key("src", 90, (12, 4)));
        assert_eq!(k, key("src", 90, (13, 0)));
    }

    #[test]
    fn images_round_trip_and_can_be_removed() {
        let dir = std::env::temp_dir().join(format!("devplug-cuda-cache-{}", std::process::id()));
        let cache = DiskCache::at(dir.join("nested"));
        assert!(cache.load("k").is_none());
        cache.store("k", &Image::Cubin(vec![1, 2, 3])).unwrap();
        assert!(matches!(cache.load("k"), Some(Image::Cubin(b)) if b == [1, 2, 3]));
        let ptx = std::ffi::CString::new(".version 8.0").unwrap();
        cache.store("p", &Image::Ptx(ptx.clone())).unwrap();
        assert!(matches!(cache.load("p"), Some(Image::Ptx(p)) if p == ptx));
        cache.remove("k");
        assert!(cache.load("k").is_none());
        // Nothing but the entries is left behind.
        let mut names: Vec<String> = std::fs::read_dir(dir.join("nested"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["p.ptx"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
