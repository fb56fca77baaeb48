//! The committed header must be what the pinned cbindgen generates from the sources.
//! `DEVPLUG_BLESS=1 cargo test -p devplug-capi --test header` rewrites it.

use std::path::PathBuf;

#[test]
fn committed_header_matches_a_fresh_generation() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("utf-8 header");
    let path = crate_dir.join("include/devplug/devplug.h");
    if std::env::var_os("DEVPLUG_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{} is stale: run `DEVPLUG_BLESS=1 cargo test -p devplug-capi --test header` and commit it",
        path.display()
    );
}

#[test]
fn version_macros_agree_with_the_library() {
    let header = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include/devplug/devplug.h"),
    )
    .expect("header");
    let get = |name: &str| -> u32 {
        let line = header
            .lines()
            .find(|l| l.starts_with(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("{name} missing from the header"));
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let v = devplug::version::dp_version();
    assert_eq!(
        v,
        get("DP_VERSION_MAJOR") << 16 | get("DP_VERSION_MINOR") << 8 | get("DP_VERSION_PATCH")
    );
    let a = devplug::version::dp_abi_version();
    assert_eq!(
        a,
        get("DP_ABI_VERSION_MAJOR") << 16 | get("DP_ABI_VERSION_MINOR")
    );
}
