//! The committed `plugin.h` must be what the pinned cbindgen generates from the ABI crate.
//! `DEVPLUG_BLESS=1 cargo test -p devplug-plugin-abi --test header` rewrites it.

use std::path::PathBuf;

#[test]
fn committed_plugin_header_matches_a_fresh_generation() {
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
    let path = crate_dir.join("../../capi/include/devplug/plugin.h");
    if std::env::var_os("DEVPLUG_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{} is stale: run `DEVPLUG_BLESS=1 cargo test -p devplug-plugin-abi --test header` and commit it",
        path.display()
    );
}
