//! Module layering: imports run one way, down the crate's stack (`src/lib.rs`, and
//! docs/architecture.md) `cli/app → train → nn/amp/optim → ops → tensor → gpu → shader →
//! dtype`, never back up; and inside a module, no file reaches itself through the files it
//! imports (`layering/files.rs`).
//!
//! Every `crate::…` path in `src/` (a `use`, a `pub use` or a path written inline; comments
//! are ignored) is an edge from the top-level module of its file to the module it names;
//! names the crate root re-exports (`crate::Error`, `crate::F16Storage`) and the macros it
//! exports (`crate::wgsl_struct!`) count as edges to the module they come from. Each edge
//! must be in [`ALLOWED`], or be a known exception that is still needed.

#[path = "layering/files.rs"]
mod files;
#[path = "layering/scan.rs"]
mod scan;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and the modules it may import, bottom to top: those
/// listed, and everything they may import in turn (the table is read transitively).
const ALLOWED: &[(&str, &[&str])] = &[
    // The process's SIGINT/SIGTERM handler: a flag, no dependencies (the error type names
    // its exit code).
    ("interrupt", &[]),
    ("error", &["interrupt"]),
    ("dtype", &["error"]),
    // Data sets and batching are host-side: they build on nothing but the error type.
    ("data", &["error"]),
    ("shader", &["dtype", "error"]),
    // A tuning file is read under a file cap (`data::file_caps`, host-side).
    ("gpu", &["shader", "dtype", "data", "error"]),
    ("tensor", &["gpu", "dtype", "error"]),
    ("ops", &["tensor", "gpu", "shader", "dtype", "error"]),
    ("amp", &["ops", "tensor", "gpu", "shader", "dtype", "error"]),
    // The optimizer kernels read the GradScaler's state (found_inf) and share its checks.
    (
        "optim",
        &["amp", "ops", "tensor", "gpu", "shader", "dtype", "error"],
    ),
    (
        "nn",
        &[
            "amp", "optim", "ops", "tensor", "gpu", "shader", "dtype", "data", "error",
        ],
    ),
    // Data-parallel plumbing (collectives, the distributed sampler): host-side, like data.
    ("dist", &["data", "error", "interrupt"]),
    // The list of every shader variant, from each dispatcher (for the portability tests).
    ("variants", &["amp", "optim", "ops", "shader", "error"]),
    // `webgpu-amp selftest`: the op families against CPU references, on any adapter.
    ("selftest", &["ops", "tensor", "gpu", "dtype", "error"]),
    // A run: the model (and, through it, everything below), the collectives, the SIGINT flag.
    ("train", &["nn", "dist", "interrupt"]),
    ("app", &["train"]),
    // The binary's CLI uses the library through `webgpu_amp::`, never `crate::`.
    ("cli", &[]),
];

/// Upward edges that exist today in directories being restructured, as (file, module
/// imported): each is to remove when that directory is restructured, and the test fails
/// once one is gone so the list shrinks with the code. None at the moment.
const KNOWN_EXCEPTIONS: &[(&str, &str)] = &[];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/gpu/kernel.rs` → `gpu`); None for the crate
/// roots `lib.rs` and `main.rs`.
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" => None,
        f => Some(f.trim_end_matches(".rs").to_string()),
    }
}

/// Source without `//` comments (doc comments included: a doc link is not an import).
fn strip_comments(src: &str) -> String {
    src.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every `crate::` path: `crate::gpu::X` → `gpu`, and each item of a
/// group `crate::{gpu::X, Error}` → `gpu`, `Error`.
fn crate_paths(src: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("crate::") {
        let macro_crate = rest[..i].ends_with('$');
        rest = &rest[i + "crate::".len()..];
        if macro_crate {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group: split on commas outside nested braces.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            names.push(first_segment(&item));
        } else {
            names.push(first_segment(rest));
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names
}

fn first_segment(path: &str) -> String {
    path.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Items the crate root re-exports, with the module each comes from (from `lib.rs`'s
/// `pub use module::{…}` lines).
fn root_reexports() -> BTreeMap<String, String> {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).expect("read lib.rs");
    let mut map = BTreeMap::new();
    for line in strip_comments(&lib).lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let rest = rest.trim_end_matches(';');
        let Some((module, items)) = rest.split_once("::") else {
            continue;
        };
        for item in items.trim_matches(['{', '}']).split(',') {
            let item = item.trim();
            if !item.is_empty() {
                map.insert(item.to_string(), module.to_string());
            }
        }
    }
    map
}

/// Macros exported at the crate root (`#[macro_export]`), with the module that defines each:
/// `crate::wgsl_struct!` is an edge to `shader`.
fn exported_macros() -> BTreeMap<String, String> {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let mut map = BTreeMap::new();
    for path in files {
        let relative = path.strip_prefix(src_dir()).unwrap().to_path_buf();
        let Some(module) = module_of(&relative) else {
            continue;
        };
        let src = strip_comments(&std::fs::read_to_string(&path).expect("read source"));
        for (i, _) in src.match_indices("#[macro_export]") {
            let rest = &src[i..];
            if let Some(at) = rest.find("macro_rules!") {
                let name = first_segment(&rest[at + "macro_rules!".len()..]);
                map.insert(name, module.clone());
            }
        }
    }
    map
}

/// Every edge as (file relative to src/, from module, to module).
fn edges() -> Vec<(String, String, String)> {
    let mut root = root_reexports();
    root.extend(exported_macros());
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    files.sort();
    let mut edges = Vec::new();
    for path in files {
        let relative = path.strip_prefix(src_dir()).unwrap().to_path_buf();
        let Some(from) = module_of(&relative) else {
            continue;
        };
        let src = std::fs::read_to_string(&path).expect("read source");
        for name in crate_paths(&strip_comments(&src)) {
            let to = match root.get(&name) {
                Some(module) => module.clone(),
                None => name,
            };
            if to != from {
                edges.push((relative.display().to_string(), from.clone(), to));
            }
        }
    }
    edges
}

/// The table as written: each module's listed imports.
fn listed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    ALLOWED
        .iter()
        .map(|(m, to)| (*m, to.iter().copied().collect()))
        .collect()
}

/// What each module may import: its listed modules and, transitively, theirs.
fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    let listed = listed();
    let reach = |start: &'static str| {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&str> = listed[start].iter().copied().collect();
        while let Some(m) = stack.pop() {
            if seen.insert(m) {
                stack.extend(listed.get(m).into_iter().flatten().copied());
            }
        }
        seen
    };
    listed.keys().map(|&m| (m, reach(m))).collect()
}

#[test]
fn no_import_runs_back_up() {
    let allowed = allowed();
    let mut bad = BTreeSet::new();
    let mut excepted = BTreeSet::new();
    for (file, from, to) in edges() {
        let Some(may) = allowed.get(from.as_str()) else {
            panic!("src/{file}: module `{from}` is not in ALLOWED; place it in the layering");
        };
        assert!(
            allowed.contains_key(to.as_str()),
            "src/{file}: `crate::{to}` is not a module in ALLOWED (a root item lib.rs does not re-export?)"
        );
        if may.contains(to.as_str()) {
            continue;
        }
        if KNOWN_EXCEPTIONS.contains(&(file.as_str(), to.as_str())) {
            excepted.insert((file, to));
        } else {
            bad.insert(format!("src/{file}: {from} imports {to}"));
        }
    }
    assert!(
        bad.is_empty(),
        "imports against the layering (see ALLOWED in tests/layering.rs):\n{}",
        bad.into_iter().collect::<Vec<_>>().join("\n")
    );
    for (file, to) in KNOWN_EXCEPTIONS {
        assert!(
            excepted.contains(&(file.to_string(), to.to_string())),
            "known exception src/{file} → {to} is gone: remove it from KNOWN_EXCEPTIONS"
        );
    }
}

/// The table itself runs one way: no module may reach itself through allowed edges.
#[test]
fn allowed_edges_have_no_cycle() {
    let allowed = listed();
    for start in allowed.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&str> = allowed[start].iter().copied().collect();
        while let Some(m) = stack.pop() {
            assert_ne!(m, *start, "ALLOWED has a cycle through `{start}`");
            if seen.insert(m) {
                stack.extend(allowed.get(m).into_iter().flatten().copied());
            }
        }
    }
}

/// Every module `lib.rs` declares has a place in the table (and the CLI, the binary's).
#[test]
fn every_module_is_placed() {
    let lib = std::fs::read_to_string(src_dir().join("lib.rs")).expect("read lib.rs");
    let allowed = allowed();
    for line in strip_comments(&lib).lines() {
        if let Some(m) = line.trim().strip_prefix("pub mod ") {
            let m = m.trim_end_matches(';');
            assert!(allowed.contains_key(m), "module `{m}` is not in ALLOWED");
        }
    }
}

#[test]
fn the_scanner_sees_use_groups_inline_paths_and_root_items() {
    let src = "use crate::gpu::{Arg, Kernel};\nuse crate::{amp::policy, Error};\n\
               let x = crate::ops::grid(); // crate::app::nothing\n$crate::ignored";
    let names = crate_paths(&strip_comments(src));
    assert_eq!(names, ["gpu", "amp", "Error", "ops"]);
    assert_eq!(
        root_reexports().get("Error").map(String::as_str),
        Some("error")
    );
    assert_eq!(
        exported_macros().get("wgsl_struct").map(String::as_str),
        Some("shader")
    );
}

/// No file of `src/` reaches itself through the files it imports (see `layering/files.rs`
/// for what counts as an import, a parent's code naming its children's items included):
/// every module reads top to bottom, file after file (issue 39 cut the last two: see
/// docs/architecture.md).
#[test]
fn no_import_circle_between_files() {
    let graph = files::FileGraph::of(&src_dir());
    let circles: Vec<String> = graph
        .circles()
        .iter()
        .map(|circle| format!("{}:\n{}", circle.join(", "), graph.describe(circle)))
        .collect();
    assert!(
        circles.is_empty(),
        "import circles between files:\n{}",
        circles.join("\n")
    );
}

/// The file scanner on a small tree: a circle through a re-export is found, and one through a
/// parent's code calling its child which names the parent's own item; a parent declaring and
/// re-exporting its children is no circle, and paths in comments and strings are ignored.
#[test]
fn the_file_scanner_finds_circles_through_reexports_and_parents_code() {
    let dir = std::env::temp_dir().join(format!("layering-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(
        "lib.rs",
        "pub mod m;\npub mod quiet;\npub mod p;\npub mod r;\npub mod s;\n",
    );
    // m/mod.rs re-exports b's item; a uses it through the re-export; b uses a.
    write(
        "m/mod.rs",
        "mod a;\nmod b;\npub use b::Bee;\npub struct Root;\nfn f() { a::call(); }\n",
    );
    write("m/a.rs", "use super::Bee;\npub fn call() {}\n");
    write("m/b.rs", "pub struct Bee;\nfn g() { super::a::call(); }\n");
    // Children naming the parent, the parent naming them, and a path in a comment.
    write(
        "quiet/mod.rs",
        "mod x;\nmod y;\npub use x::Ex;\n// crate::quiet::y::Why\nfn h() { y::why(); }\n",
    );
    write(
        "quiet/x.rs",
        "pub struct Ex;\nconst S: &str = \"crate::quiet::y\";\n",
    );
    write("quiet/y.rs", "use super::Ex;\npub fn why() {}\n");
    // A parent's code calling its child, which names the parent's own item: a circle.
    write(
        "p/mod.rs",
        "mod c;\npub struct Own;\nfn k() { c::run(); }\n",
    );
    write("p/c.rs", "use super::Own;\npub fn run() {}\n");
    // A parent re-exporting its child, which names the parent's own item: none.
    write("r/mod.rs", "mod d;\npub use d::Dee;\npub struct Own;\n");
    write("r/d.rs", "use super::Own;\npub struct Dee;\n");
    // A parent whose own code names the item it re-exports (a trait's signature): a circle.
    write(
        "s/mod.rs",
        "mod e;\npub use e::Plan;\npub trait Own { fn f(&self, p: &Plan); }\n",
    );
    write(
        "s/e.rs",
        "use super::Own;\npub struct Plan(Box<dyn Own>);\n",
    );
    let graph = files::FileGraph::of(&dir);
    let circles = graph.circles();
    std::fs::remove_dir_all(&dir).unwrap();
    let circle = |files: &[&str]| files.iter().map(|f| f.to_string()).collect::<Vec<_>>();
    assert_eq!(
        circles,
        [
            circle(&["m/a.rs", "m/b.rs"]),
            circle(&["p/c.rs", "p/mod.rs"]),
            circle(&["s/e.rs", "s/mod.rs"])
        ]
    );
    assert_eq!(
        scan::expand_use("crate::a::{b, c::{self, d as e}, f::*}"),
        [
            "crate::a::b",
            "crate::a::c",
            "crate::a::c::d",
            "crate::a::f::*"
        ]
    );
}

/// GPU tests get their contexts from `tests/common` only, whose helpers make every test on GL
/// serial (wgpu's GL backend panics when a thread waits over 6 s for the context lock that a
/// cold pipeline compile holds): a test file making its own context would race the others.
#[test]
fn gpu_tests_take_contexts_from_common() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let mut files = Vec::new();
    rust_files(&tests, &mut files);
    let common = tests.join("common");
    let own: Vec<_> = files
        .iter()
        .filter(|f| !f.starts_with(&common))
        .filter(|f| {
            let src = strip_comments(&std::fs::read_to_string(f).expect("read test"));
            src.contains(concat!("GpuContext", "::new(")) // split: this file is scanned too
        })
        .map(|f| f.strip_prefix(&tests).unwrap().display().to_string())
        .collect();
    assert!(
        files.len() > 50,
        "scanned only {} test files under {}",
        files.len(),
        tests.display()
    );
    assert!(
        own.is_empty(),
        "test files making their own GpuContext (use tests/common's ctx helpers, which \
         serialise tests on GL): {own:?}"
    );
}
