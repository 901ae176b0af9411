//! The file graph of `src/`: an edge from a file to every file whose items it names, and the
//! import circles in it (its strongly connected components of more than one file).
//!
//! A path names a file when it starts with `crate::`, `super::`, `self::` or a child module
//! the file declares (`mod launch;` then `launch::Operand`): its segments are walked down the
//! module tree, and the item it ends on lives in the last module reached, or, when that
//! module re-exports it (`pub use model::NamedLayer;`), in the file the re-export names.
//! A parent declaring and re-exporting its own child modules is not an edge (`mod x;`, `pub
//! use x::Item;`: what a `mod.rs` is for); its code naming a child's items is (a registry
//! listing its layers, a signature naming a child's type through a private `use`), and so
//! are the parts naming the parent's items. Inline modules (`mod tests { … }`) are left out:
//! their `super` is the file itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::rust_files;
use super::scan::{
    child_modules, expand_use, inline_paths, strip_comments_and_strings, strip_inline_modules,
    use_trees, without_uses,
};

/// One source file: its module path (`ops::matmul::launch`; `ops::matmul` for its
/// `mod.rs`), its text without comments, strings and inline modules, and its re-exports.
struct SourceFile {
    module: Vec<String>,
    code: String,
    /// Item name → the path it re-exports (absolute module segments plus the item).
    reexports: BTreeMap<String, Vec<String>>,
}

pub struct FileGraph {
    /// Module path → file relative to `src/`.
    files: BTreeMap<Vec<String>, String>,
    /// Macros exported at the crate root (`#[macro_export]`) → the file defining each.
    macros: BTreeMap<String, String>,
    /// File → files it names.
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

/// `ops/matmul/launch.rs` → `[ops, matmul, launch]`; `ops/matmul/mod.rs` → `[ops, matmul]`;
/// the crate roots `lib.rs` and `main.rs` → `[]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

impl FileGraph {
    pub fn of(src: &Path) -> FileGraph {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        paths.sort();
        let mut sources = BTreeMap::new();
        let mut files = BTreeMap::new();
        for path in &paths {
            let relative = path.strip_prefix(src).unwrap();
            // The binary's root only declares `cli` and calls it; `crate` is the library's.
            if relative == Path::new("main.rs") {
                continue;
            }
            let name = relative.display().to_string();
            let module = module_path(relative);
            let text = std::fs::read_to_string(path).expect("read source");
            let code = strip_inline_modules(&strip_comments_and_strings(&text));
            files.insert(module.clone(), name.clone());
            sources.insert(
                name,
                SourceFile {
                    module,
                    code,
                    reexports: BTreeMap::new(),
                },
            );
        }
        let mut macros = BTreeMap::new();
        for (name, file) in &sources {
            for (i, _) in file.code.match_indices("#[macro_export]") {
                let rest = &file.code[i..];
                if let Some(at) = rest.find("macro_rules!") {
                    let macro_name: String = rest[at + "macro_rules!".len()..]
                        .trim_start()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    macros.insert(macro_name, name.clone());
                }
            }
        }
        let mut graph = FileGraph {
            files,
            macros,
            edges: BTreeMap::new(),
        };
        // Re-exports first: they are what a `super::Item` resolves through.
        for file in sources.values_mut() {
            let children = child_modules(&file.code);
            for (public, tree) in use_trees(&file.code) {
                if !public {
                    continue;
                }
                for path in expand_use(&tree) {
                    if let Some(abs) = absolute(&file.module, &path, &children) {
                        let item = abs.last().cloned().unwrap_or_default();
                        file.reexports.insert(item, abs);
                    }
                }
            }
        }
        for (name, file) in &sources {
            let children = child_modules(&file.code);
            // Each path, and whether it is a re-export (`pub use`).
            let mut named = Vec::new();
            for (public, tree) in use_trees(&file.code) {
                named.extend(expand_use(&tree).into_iter().map(|p| (p, public)));
            }
            let code = without_uses(&file.code);
            named.extend(
                inline_paths(&code, &children)
                    .into_iter()
                    .map(|p| (p, false)),
            );
            let mut to = BTreeSet::new();
            for (path, reexport) in named {
                let Some(abs) = absolute(&file.module, &path, &children) else {
                    continue;
                };
                if let Some(target) = graph.resolve(&sources, &abs, 0) {
                    let target_module = &sources[&target].module;
                    let own_child = target_module.len() > file.module.len()
                        && target_module.starts_with(&file.module);
                    if target != *name && !(own_child && reexport) {
                        to.insert(target);
                    }
                }
            }
            graph.edges.insert(name.clone(), to);
        }
        graph
    }

    /// The file that defines the item an absolute path ends on.
    fn resolve(
        &self,
        sources: &BTreeMap<String, SourceFile>,
        abs: &[String],
        depth: usize,
    ) -> Option<String> {
        if let [name] = abs
            && let Some(file) = self.macros.get(name)
        {
            return Some(file.clone());
        }
        let mut module: Vec<String> = Vec::new();
        let mut i = 0;
        while i < abs.len() {
            let mut next = module.clone();
            next.push(abs[i].clone());
            if !self.files.contains_key(&next) {
                break;
            }
            module = next;
            i += 1;
        }
        let file = self.files.get(&module)?.clone();
        // An item re-exported here lives where the re-export points.
        if i < abs.len()
            && depth < 8
            && let Some(target) = sources[&file].reexports.get(&abs[i])
        {
            let mut path = target.clone();
            path.extend(abs[i + 1..].iter().cloned());
            if let Some(found) = self.resolve(sources, &path, depth + 1) {
                return Some(found);
            }
        }
        Some(file)
    }

    /// Import circles: every strongly connected component of more than one file, sorted.
    pub fn circles(&self) -> Vec<Vec<String>> {
        // Tarjan's algorithm over the file graph.
        struct State<'g> {
            graph: &'g FileGraph,
            index: BTreeMap<&'g str, usize>,
            low: BTreeMap<&'g str, usize>,
            stack: Vec<&'g str>,
            on_stack: BTreeSet<&'g str>,
            components: Vec<Vec<String>>,
        }
        fn visit<'g>(s: &mut State<'g>, v: &'g str) {
            let n = s.index.len();
            s.index.insert(v, n);
            s.low.insert(v, n);
            s.stack.push(v);
            s.on_stack.insert(v);
            for w in s.graph.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
            if s.low[v] == s.index[v] {
                let mut component = Vec::new();
                while let Some(w) = s.stack.pop() {
                    s.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    s.components.push(component);
                }
            }
        }
        let mut state = State {
            graph: self,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            components: Vec::new(),
        };
        for v in self.edges.keys() {
            if !state.index.contains_key(v.as_str()) {
                visit(&mut state, v);
            }
        }
        state.components.sort();
        state.components
    }

    /// The edges between the files of one circle, for the message.
    pub fn describe(&self, circle: &[String]) -> String {
        let mut lines = Vec::new();
        for from in circle {
            for to in &self.edges[from] {
                if circle.contains(to) {
                    lines.push(format!("    src/{from} → src/{to}"));
                }
            }
        }
        lines.join("\n")
    }
}

/// A path as absolute module segments from the crate root, or None for paths into other
/// crates (`std::`, `wgpu::`).
fn absolute(module: &[String], path: &str, children: &BTreeSet<String>) -> Option<Vec<String>> {
    let segments: Vec<&str> = path.split("::").map(str::trim).collect();
    let mut at: Vec<String> = module.to_vec();
    let mut rest = &segments[..];
    match rest.first().copied() {
        Some("crate") => {
            at.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first() == Some(&"super") {
                at.pop()?;
                rest = &rest[1..];
            }
        }
        Some(head) if children.contains(head) => {}
        _ => return None,
    }
    at.extend(
        rest.iter()
            .filter(|s| !s.is_empty() && **s != "*")
            .map(|s| s.to_string()),
    );
    Some(at)
}
