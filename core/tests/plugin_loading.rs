//! Plugin loading failures that need no plugin: each costs only itself, is listed with its
//! reason, and leaves the runtime working. (Loading real plugins — SIM, the C++ and Rust
//! examples — is tested in the devplug-tests crate, which builds them.)

use devplug_core::{Code, Runtime, RuntimeOptions};

fn runtime() -> Runtime {
    Runtime::new(RuntimeOptions {
        discover_from_env: false,
        ..Default::default()
    })
    .unwrap()
}

fn still_works(rt: &Runtime) {
    let d = rt.find_device("CPU").unwrap();
    let b = d.allocate(16).unwrap();
    b.write(0, &[7; 16]).unwrap();
    let mut out = [0u8; 16];
    b.read(0, &mut out).unwrap();
    assert_eq!(out, [7; 16]);
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "devplug-plugin-loading-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_missing_file_is_not_found_and_listed() {
    let rt = runtime();
    let e = rt
        .load_plugin("/nonexistent/libnothing.so", &[])
        .unwrap_err();
    assert_eq!(e.code, Code::NotFound);
    assert!(e.message.contains("/nonexistent/libnothing.so"), "{e}");
    let f = rt.plugin_failures();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].error, e);
    still_works(&rt);
}

#[test]
fn a_file_that_is_not_a_library_names_the_path_and_the_reason() {
    let dir = scratch("notlib");
    let path = dir.join("libfake.so");
    std::fs::write(&path, b"this is not an ELF file").unwrap();
    let rt = runtime();
    let e = rt.load_plugin(&path, &[]).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message.contains("libfake.so") && e.message.contains("cannot load the library"),
        "{e}"
    );
    still_works(&rt);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn relative_paths_are_refused() {
    let rt = runtime();
    let e = rt.load_plugin("plugins/libsim.so", &[]).unwrap_err();
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains("relative"), "{e}");
}

#[test]
fn a_library_without_the_entry_point_is_refused() {
    // libc is a library that certainly lacks devplug's entry symbol.
    let libc = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/aarch64-linux-gnu/libc.so.6",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
    .expect("a libc to load");
    let rt = runtime();
    let e = rt.load_plugin(libc, &[]).unwrap_err();
    assert_eq!(e.code, Code::NotFound);
    assert!(
        e.message.contains("no devplug entry point") && e.message.contains("devplug_plugin_entry"),
        "{e}"
    );
    still_works(&rt);
}

#[test]
fn a_search_path_loads_what_it_can_and_lists_the_rest() {
    let dir = scratch("search");
    std::fs::write(dir.join("libbad.so"), b"junk").unwrap();
    std::fs::write(dir.join("readme.txt"), b"ignored").unwrap();
    let rt = Runtime::new(RuntimeOptions {
        plugin_path: Some(format!("relative/dir:{}", dir.display())),
        discover_from_env: false,
        ..Default::default()
    })
    .unwrap();
    let f = rt.plugin_failures();
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f[0].error.message.contains("relative"));
    assert!(f[1].path.ends_with("libbad.so"));
    assert!(rt.plugins().is_empty());
    still_works(&rt);
    std::fs::remove_dir_all(dir).unwrap();
}
