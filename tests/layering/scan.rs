//! Reading Rust source as text for `files.rs`: comments, strings and inline modules out,
//! `use` trees expanded, child modules and inline paths found.

use std::collections::BTreeSet;

/// Source without comments, string and char literals (a path in a message is not an import).
pub fn strip_comments_and_strings(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '"' && !escaped {
                        break;
                    }
                    escaped = c == '\\' && !escaped;
                }
                out.push_str("\"\"");
            }
            // A char literal ('x', '\n'), not a lifetime ('a): closed within three chars.
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                let close = if let Some(escaped) = rest.strip_prefix('\\') {
                    escaped.find('\'').map(|i| i + 2)
                } else {
                    (rest.chars().nth(1) == Some('\'')).then_some(2)
                };
                match close {
                    Some(n) => {
                        for _ in 0..n {
                            chars.next();
                        }
                        out.push_str("' '");
                    }
                    None => out.push('\''),
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Without inline module bodies (`mod tests { … }`): their paths resolve from elsewhere.
pub fn strip_inline_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = find_inline_mod(rest) {
        out.push_str(&rest[..i]);
        let open = i + rest[i..].find('{').expect("inline module body");
        let mut depth = 0;
        let mut end = rest.len();
        for (j, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Where `mod NAME {` starts (not `mod NAME;`).
pub fn find_inline_mod(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = code[from..].find("mod ") {
        let at = from + i;
        let before_ok = at == 0 || !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let after: String = code[at + 4..]
            .chars()
            .skip_while(|c| c.is_whitespace())
            .skip_while(|c| c.is_alphanumeric() || *c == '_')
            .skip_while(|c| c.is_whitespace())
            .take(1)
            .collect();
        if before_ok && after == "{" {
            return Some(at);
        }
        from = at + 4;
    }
    None
}

/// Every path a `use` item spells out, groups expanded: `a::{b, c::{d, e}}` → `a::b`,
/// `a::c::d`, `a::c::e` (an alias `x as y` keeps `x`; `self` in a group names the prefix).
pub fn expand_use(tree: &str) -> Vec<String> {
    fn split_top(group: &str) -> Vec<&str> {
        let (mut depth, mut start, mut items) = (0, 0, Vec::new());
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&group[start..]);
        items
    }
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim();
    if tree.is_empty() {
        return Vec::new();
    }
    match tree.find('{') {
        None => {
            let path = tree.split(" as ").next().unwrap_or_default().trim();
            vec![path.trim_end_matches("::").to_string()]
        }
        Some(open) => {
            let prefix = tree[..open].trim().trim_end_matches("::");
            let close = tree.rfind('}').unwrap_or(tree.len());
            let mut out = Vec::new();
            for item in split_top(&tree[open + 1..close]) {
                for sub in expand_use(item) {
                    out.push(match (prefix.is_empty(), sub.as_str()) {
                        (_, "self") => prefix.to_string(),
                        (true, _) => sub,
                        (false, _) => format!("{prefix}::{sub}"),
                    });
                }
            }
            out
        }
    }
}

/// The trees of every `use` item (`pub use`, `pub(crate) use` and plain).
pub fn use_trees(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = &rest[..i];
        let word_start =
            before.is_empty() || before.ends_with(|c: char| !(c.is_alphanumeric() || c == '_'));
        let end = rest[i..].find(';').map_or(rest.len(), |e| i + e);
        if word_start {
            let line_start = before.rfind(['\n', ';', '{', '}']).map_or(0, |p| p + 1);
            let public = before[line_start..].trim().starts_with("pub");
            out.push((public, rest[i + 4..end].to_string()));
        }
        rest = &rest[(i + 4).min(end)..];
    }
    out
}

/// The code without its `use` items (their paths are read whole by [`use_trees`]).
pub fn without_uses(code: &str) -> String {
    let mut out = code.to_string();
    for (_, tree) in use_trees(code) {
        out = out.replacen(&format!("use {tree};"), "", 1);
    }
    out
}

/// Child modules a file declares (`mod x;`, `pub mod x;`).
pub fn child_modules(code: &str) -> BTreeSet<String> {
    code.split(';')
        .filter_map(|stmt| {
            let words: Vec<&str> = stmt.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "mod")?;
            (at + 2 == words.len()).then(|| words[at + 1].to_string())
        })
        .collect()
}

/// Every path in the code starting with `crate`, `super`, `self` or one of `heads`.
pub fn inline_paths(code: &str, heads: &BTreeSet<String>) -> Vec<String> {
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b'$')) {
            i += 1;
            continue;
        }
        // A path: identifiers joined by `::` (a preceding `::` means we are mid-path).
        if i >= 2 && &code[i - 2..i] == "::" {
            i += 1;
            continue;
        }
        let start = i;
        let mut end = i;
        loop {
            while end < bytes.len() && ident(bytes[end]) {
                end += 1;
            }
            if code[end..].starts_with("::") && end + 2 < bytes.len() && ident(bytes[end + 2]) {
                end += 2;
            } else {
                break;
            }
        }
        let path = &code[start..end];
        let head = path.split("::").next().unwrap_or_default();
        if path.contains("::")
            && (matches!(head, "crate" | "super" | "self") || heads.contains(head))
        {
            out.push(path.to_string());
        }
        i = end.max(i + 1);
    }
    out
}
