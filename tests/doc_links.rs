//! Every relative link and anchor in README.md, BENCHMARKS.md and the Markdown under docs/
//! (the guide, the architecture walk) points at something that exists: a file or folder of the
//! repository, and for an anchor (`file.md#heading` or `#heading`) a heading of that file, by
//! GitHub's rule for heading ids. No GPU, no network: web links are not followed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The Markdown files whose links are checked, relative to the repository root.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("README.md"), PathBuf::from("BENCHMARKS.md")];
    let mut dirs = vec![PathBuf::from("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(Path::new(ROOT).join(&dir)).expect("read docs/") {
            let name = entry.expect("dir entry").file_name();
            let path = dir.join(&name);
            if Path::new(ROOT).join(&path).is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match fence {
            Some(open) if trimmed.starts_with(open) => fence = None,
            Some(_) => {}
            None if trimmed.starts_with("```") => fence = Some("```"),
            None if trimmed.starts_with("~~~") => fence = Some("~~~"),
            None => lines.push((i + 1, line)),
        }
    }
    lines
}

/// `line` without its inline code spans (a link written inside backticks is not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links and images of a line: `[text](target)`,
/// `![alt](target "title")`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end..];
    }
    targets
}

/// GitHub's id for a heading: lower case, punctuation and symbols dropped (letters, digits,
/// `-` and `_` kept), spaces to `-`; a repeated id gets `-1`, `-2`, ...
fn heading_ids(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = Vec::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(base.clone()).or_insert(0);
        ids.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    ids
}

fn is_external(target: &str) -> bool {
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|p| target.starts_with(p))
}

/// Problems with the links of one document (`doc` relative to the root).
fn check_document(doc: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(doc)).expect("read a document");
    let dir = doc.parent().unwrap_or(Path::new(""));
    let mut problems = Vec::new();
    for (number, line) in prose_lines(&text) {
        for target in link_targets(line) {
            if target.is_empty() || is_external(&target) {
                continue;
            }
            let at = format!("{}:{number}: `{target}`", doc.display());
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                doc.to_path_buf()
            } else {
                dir.join(path)
            };
            let full = Path::new(ROOT).join(&file);
            if !full.exists() {
                problems.push(format!("{at}: no such file ({})", file.display()));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            if full.extension().is_none_or(|e| e != "md") {
                problems.push(format!("{at}: an anchor into a file that is not Markdown"));
                continue;
            }
            let target_text = std::fs::read_to_string(&full).expect("read the link's target");
            if !heading_ids(&target_text).iter().any(|id| id == anchor) {
                problems.push(format!(
                    "{at}: {} has no heading with the id `{anchor}`",
                    file.display()
                ));
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let docs = documents();
    assert!(
        docs.iter().any(|d| d.starts_with("docs/guide")),
        "no guide found under docs/guide: {docs:?}"
    );
    let mut links = 0;
    let mut problems = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(Path::new(ROOT).join(doc)).unwrap();
        links += prose_lines(&text)
            .iter()
            .map(|(_, l)| link_targets(l).len())
            .sum::<usize>();
        problems.extend(check_document(doc));
    }
    println!("{links} links in {} documents", docs.len());
    assert!(
        links > 50,
        "only {links} links found: the parser missed them"
    );
    assert!(
        problems.is_empty(),
        "{} broken links:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn heading_ids_follow_githubs_rule() {
    let text = "# Training a GPT\n## Matmul (`webgpu-amp bench matmul`)\n\
                ### lavapipe (software Vulkan), 2026-11-22\n```sh\n# not a heading\n```\n\
                ### lavapipe (software Vulkan), 2026-11-22\n#nope\n";
    assert_eq!(
        heading_ids(text),
        [
            "training-a-gpt",
            "matmul-webgpu-amp-bench-matmul",
            "lavapipe-software-vulkan-2026-11-22",
            "lavapipe-software-vulkan-2026-11-22-1",
        ]
    );
}

#[test]
fn broken_links_and_anchors_are_found() {
    let dir = Path::new(ROOT).join("target").join("tmp").join("doc_links");
    std::fs::create_dir_all(&dir).unwrap();
    let doc = dir.join("probe.md");
    std::fs::write(
        &doc,
        "# Here\n[ok](#here) [ok](../../../README.md#the-guide) [web](https://example.com)\n\
         [bad](#nowhere) [bad](no-such-file.md) [bad](../../../README.md#no-such-heading)\n\
         `[code](not-a-link.md)`\n```\n[fenced](not-a-link-either.md)\n```\n",
    )
    .unwrap();
    let problems = check_document(Path::new("target/tmp/doc_links/probe.md"));
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("`#nowhere`"), "{problems:#?}");
    assert!(problems[1].contains("no such file"), "{problems:#?}");
    assert!(problems[2].contains("no-such-heading"), "{problems:#?}");
}
