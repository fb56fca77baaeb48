//! docs/plugin-guide.md's worked plugins build, run and conform, from the guide's text alone:
//! §3's C plugin `mydev` and §4's C++ plugin `cppdev`, each with its CMakeLists.txt and its host.
//!
//! How the guide's code blocks become files: a fenced block whose first line is a comment that
//! names a file by a relative path with a folder (`/* mydev/mydev.c: … */`, `// cppdev/x.cpp`,
//! `# mydev/CMakeLists.txt`: `/* `, `// ` or `# `, the path, then the end of the line, `:` or
//! ` */`) belongs to that file; blocks whose first line names no such file are fragments and are
//! skipped. A file split over several blocks (prose between them) is those blocks concatenated
//! in the guide's order. C and C++ blocks are each preceded by a `#line` directive, so that a
//! compiler message names the guide's line (`docs/plugin-guide.md:612: error: …`).
//!
//! Each project folder is written into a temp dir, configured with
//! `-DCMAKE_PREFIX_PATH=<installed prefix>` (its `find_package(DevPlug …)` and
//! `devplug_add_plugin(…)` as a vendor's) and built with `-Wall -Wextra` for every target (a
//! warning fails the test). Its host runs, and what it prints must be the first `text` block
//! after the host's source in the guide (with `/home/me` standing for the temp dir, as in the
//! guide's paths), with nothing on standard error; the plugin exports only
//! `devplug_plugin_entry` (`nm -D`) and `devplug check` on it says
//! `0 failed: conforms`.
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use devplug_tests::{
    devplug_tool, display_command, prefix, require_cmake_build, source_dir, TempDir,
};

const GUIDE: &str = "docs/plugin-guide.md";

/// A fenced code block of the guide.
struct Block {
    /// 1-based line of the opening fence.
    fence: usize,
    /// 1-based line of the closing fence.
    end: usize,
    /// The info string (`c`, `cmake`, `text`).
    lang: String,
    lines: Vec<String>,
}

/// The guide's code blocks, in order.
fn guide_blocks() -> Vec<Block> {
    let path = source_dir().join(GUIDE);
    let doc = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let lines: Vec<&str> = doc.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        // An opening fence names a language (```c, ```text): the block runs to the next bare
        // fence.
        let line = lines[i];
        if !line.starts_with("```") || line.trim() == "```" {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < lines.len() && lines[i].trim() != "```" {
            i += 1;
        }
        assert!(
            i < lines.len(),
            "{GUIDE}:{}: the code block is not closed",
            start + 1
        );
        blocks.push(Block {
            fence: start + 1,
            end: i + 1,
            lang: line.trim_start_matches('`').trim().to_owned(),
            lines: lines[start + 1..i]
                .iter()
                .map(|l| (*l).to_owned())
                .collect(),
        });
        i += 1;
    }
    blocks
}

/// The file a block's first line names (`/* mydev/mydev.c: … */` → `mydev/mydev.c`), if any.
fn named_file(first: &str) -> Option<&str> {
    let rest = ["/* ", "// ", "# "]
        .iter()
        .find_map(|c| first.strip_prefix(c))?;
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || "._-/".contains(c)))
        .unwrap_or(rest.len());
    let (path, after) = rest.split_at(end);
    let ok = path.contains('/')
        && !path.starts_with('/')
        && !path.ends_with('/')
        && (after.is_empty() || after.starts_with(':') || after == " */");
    ok.then_some(path)
}

/// One file of a guide project: the blocks it is made of, in order.
struct GuideFile<'a> {
    blocks: Vec<&'a Block>,
}

impl GuideFile<'_> {
    /// Where the file comes from, for messages: `docs/plugin-guide.md:485` (several: `:485, :612`).
    fn origin(&self) -> String {
        let lines: Vec<String> = self.blocks.iter().map(|b| b.fence.to_string()).collect();
        format!("{GUIDE}:{}", lines.join(", :"))
    }

    /// The file's text; C and C++ blocks start with a `#line` to the guide.
    fn text(&self, path: &str) -> String {
        let c_like = [".c", ".h", ".cpp", ".hpp", ".cc"]
            .iter()
            .any(|ext| path.ends_with(ext));
        let guide = source_dir().join(GUIDE);
        let mut text = String::new();
        for b in &self.blocks {
            if c_like {
                text.push_str(&format!("#line {} \"{}\"\n", b.fence + 1, guide.display()));
            }
            for l in &b.lines {
                text.push_str(l);
                text.push('\n');
            }
        }
        text
    }
}

/// Every file the guide names, by path (`mydev/mydev.c`).
fn guide_files(blocks: &[Block]) -> BTreeMap<String, GuideFile<'_>> {
    let mut files: BTreeMap<String, GuideFile> = BTreeMap::new();
    for b in blocks {
        if let Some(path) = b.lines.first().and_then(|l| named_file(l)) {
            files
                .entry(path.to_owned())
                .or_insert(GuideFile { blocks: Vec::new() })
                .blocks
                .push(b);
        }
    }
    files
}

/// One of the guide's worked projects.
struct Project {
    /// The folder its blocks name (`mydev`).
    folder: &'static str,
    /// Where the guide has it, for messages.
    section: &'static str,
    /// The files the guide must give (folder-relative).
    files: &'static [&'static str],
    /// The host's source (one of `files`) and its executable.
    host: (&'static str, &'static str),
    /// The plugin library the build makes.
    plugin: &'static str,
}

const PROJECTS: &[Project] = &[
    Project {
        folder: "mydev",
        section: "§3 (Writing a plugin in C)",
        files: &["CMakeLists.txt", "mydev.c", "try_mydev.c"],
        host: ("try_mydev.c", "try_mydev"),
        plugin: "libmydev.so",
    },
    Project {
        folder: "cppdev",
        section: "§4 (Writing a plugin in C++)",
        files: &["CMakeLists.txt", "cppdev.cpp", "try_cppdev.cpp"],
        host: ("try_cppdev.cpp", "try_cppdev"),
        plugin: "libcppdev.so",
    },
];

/// Runs `cmd` (printing its command line and output, which cargo shows for a failing test) and
/// panics with `what`, the command and its whole output unless it exits 0.
fn step(cmd: &mut Command, what: &str) -> Output {
    let line = display_command(cmd);
    // cargo test puts target/<profile> on LD_LIBRARY_PATH, which would make the host load a
    // libdevplug of the outer build instead of the installed one it was linked with.
    cmd.env_remove("LD_LIBRARY_PATH")
        .env_remove("DEVPLUG_PLUGIN_PATH")
        .env_remove("DEVPLUG_LOG")
        .env_remove("DEVPLUG_LOG_PLACEMENT");
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start `{line}`: {e}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    println!("$ {line}\n{text}");
    assert!(
        output.status.success(),
        "{what}: `{line}` failed ({}):\n{text}",
        output.status
    );
    output
}

/// Writes, builds, runs and checks one project of the guide.
fn build_run_and_check(project: &Project) {
    require_cmake_build();
    let blocks = guide_blocks();
    let files = guide_files(&blocks);
    let folder = project.folder;
    let ours: Vec<(&String, &GuideFile)> = files
        .iter()
        .filter(|(p, _)| p.starts_with(&format!("{folder}/")))
        .collect();
    let origins: Vec<String> = ours
        .iter()
        .map(|(p, f)| format!("{p} ({})", f.origin()))
        .collect();
    let context = format!(
        "{GUIDE} {}, project {folder}/ from the blocks {}",
        project.section,
        origins.join(", ")
    );
    for want in project.files {
        assert!(
            files.contains_key(&format!("{folder}/{want}")),
            "{GUIDE} {} has no code block whose first line names {folder}/{want} (a comment such \
             as `/* {folder}/{want} */` or `# {folder}/{want}`); it names: {:?}",
            project.section,
            files.keys().collect::<Vec<_>>()
        );
    }

    // <tmp>/mydev/{CMakeLists.txt, mydev.c, …} and <tmp>/mydev/build, as the guide lays them
    // out; `/home/me` in the guide's output stands for <tmp>.
    let tmp = TempDir::new(&format!("guide-{folder}"));
    let root = std::fs::canonicalize(tmp.path()).expect("the temp dir");
    for (path, file) in &ours {
        let dest = root.join(path);
        std::fs::create_dir_all(dest.parent().expect("a folder")).expect("the project folder");
        std::fs::write(&dest, file.text(path))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", dest.display()));
    }
    let src = root.join(folder);
    let build = src.join("build");

    step(
        Command::new("cmake")
            .arg("-S")
            .arg(&src)
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix().display()))
            .arg("-DCMAKE_BUILD_TYPE=RelWithDebInfo")
            // Warnings for the host too (the guide's CMakeLists adds them to the plugin);
            // -O2 lets -Wall see more. The environment's flags are the user's, not ours.
            .env("CFLAGS", "-Wall -Wextra")
            .env("CXXFLAGS", "-Wall -Wextra"),
        &format!("{context}: configuring with CMake"),
    );
    let out = step(
        Command::new("cmake").arg("--build").arg(&build),
        &format!("{context}: building"),
    );
    let log =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !log.contains("warning:"),
        "{context}: the build warns (-Wall -Wextra):\n{log}"
    );

    // The host prints what the guide says it prints, and nothing on standard error.
    let (host_src, host_exe) = project.host;
    let host_file = &files[&format!("{folder}/{host_src}")];
    let after = host_file.blocks.last().expect("a block").end;
    let expected = blocks
        .iter()
        .find(|b| b.fence > after && b.lang == "text")
        .unwrap_or_else(|| {
            panic!("{GUIDE}: no `text` block after line {after} shows what {host_exe} prints")
        });
    let exe = build.join(host_exe);
    let out = step(
        &mut Command::new(&exe),
        &format!("{context}: running {host_exe}"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).replace(&*root.to_string_lossy(), "/home/me");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let printed: Vec<&str> = stdout.lines().collect();
    if printed != expected.lines {
        let first = printed
            .iter()
            .zip(&expected.lines)
            .position(|(p, e)| p != e)
            .unwrap_or(printed.len().min(expected.lines.len()));
        panic!(
            "{context}: {host_exe} does not print what {GUIDE}:{} says (line {} of the output \
             differs first):\n--- the guide:\n{}\n--- {host_exe} (the temp dir written as \
             /home/me):\n{}",
            expected.fence,
            first + 1,
            expected.lines.join("\n"),
            printed.join("\n"),
        );
    }
    assert!(
        stderr.is_empty(),
        "{context}: {host_exe} writes to standard error, which the guide does not show:\n{stderr}"
    );

    // Only the entry point is exported (the guide's `nm -D` line).
    let plugin = build.join(project.plugin);
    // nm comes with the compiler (binutils).
    let out = step(
        Command::new("nm")
            .arg("-D")
            .arg("--defined-only")
            .arg(&plugin),
        &format!("{context}: listing the symbols of {}", project.plugin),
    );
    let symbols: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect();
    assert_eq!(
        symbols,
        ["devplug_plugin_entry"],
        "{context}: {} should export only devplug_plugin_entry",
        project.plugin
    );

    devplug_check(&plugin, &context);
}

/// `devplug check` (the installed tool) on `plugin`: it conforms.
fn devplug_check(plugin: &Path, context: &str) {
    let (code, out) = devplug_tool(&["check", plugin.to_str().expect("a UTF-8 path")]);
    println!("$ devplug check {}\n{out}", plugin.display());
    assert!(
        code == 0 && out.contains("0 failed: conforms"),
        "{context}: `devplug check {}` (exit status {code}) does not say `0 failed: conforms`:\n\
         {out}",
        plugin.display()
    );
}

#[test]
fn the_c_plugin_of_section_3_builds_runs_and_conforms() {
    build_run_and_check(&PROJECTS[0]);
}

#[test]
fn the_cpp_plugin_of_section_4_builds_runs_and_conforms() {
    build_run_and_check(&PROJECTS[1]);
}

/// Every project folder the guide's blocks name is one the tests above build (a new one is
/// not silently left out).
#[test]
fn every_project_the_guide_names_is_built() {
    let blocks = guide_blocks();
    for path in guide_files(&blocks).keys() {
        let folder = path.split('/').next().unwrap_or_default();
        assert!(
            PROJECTS.iter().any(|p| p.folder == folder),
            "{GUIDE} names a file {path} of a project this test does not build; add {folder}/ \
             to PROJECTS in tests/tests/guide.rs"
        );
    }
}
