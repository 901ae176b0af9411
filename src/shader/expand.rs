//! `#for` and `#if` blocks: straight-line WGSL generated per variant from its constants, so
//! a hot loop can name one variable per fragment or register (`acc_{i}_{j}`) instead of
//! indexing an array that the driver may or may not keep in registers.
//!
//! ```text
//! #for i in 0..FM            // bounds: integer literals or constants of the variant
//! var acc_{i} = FragC();     // `{i}` becomes 0, 1, ... in each copy
//! #end
//! #for side in a b           // words: `{side}` becomes a, then b, and `{SIDE}` A, then B
//! fn put_{side}(v: Unit{SIDE}) { ... }   // (also in `#if` conditions: `#if {SIDE}_KMAJOR`)
//! #end
//! #if DIRECT_STORE           // a boolean constant of the variant; `#if !NAME` negates
//! ...
//! #else
//! ...
//! #end
//! ```
//!
//! Blocks nest. The lines of a block not taken are dropped, so each may use what only its
//! variants declare (a cooperative store to an f32 output, say).

use crate::error::{Error, Result};

fn error(shader: &str, message: String) -> Error {
    Error::Shader {
        name: shader.into(),
        message,
    }
}

/// The value of a constant as an integer (`4u`, `-1`, `true` = 1, `false` = 0).
fn value(shader: &str, token: &str, consts: &[(&str, String)]) -> Result<i64> {
    let token = token.trim();
    let text = consts
        .iter()
        .find(|(name, _)| *name == token)
        .map_or(token, |(_, v)| v.as_str());
    match text {
        "true" => return Ok(1),
        "false" => return Ok(0),
        _ => {}
    }
    text.trim_end_matches(['u', 'i']).parse().map_err(|_| {
        error(
            shader,
            format!("`{token}` is no integer or constant here ({text})"),
        )
    })
}

/// `text` with its `#for` and `#if` blocks expanded for these constants.
pub(super) fn expand(shader: &str, text: &str, consts: &[(&str, String)]) -> Result<String> {
    if !text.lines().any(|l| is_block_directive(l.trim_start())) {
        return Ok(text.to_string());
    }
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut at = 0;
    let mut vars: Vec<(String, String)> = Vec::new();
    let end = block(shader, &lines, &mut at, consts, &mut vars, Some(&mut out))?;
    if let Some(stray) = end {
        return Err(error(shader, format!("`{stray}` without an open block")));
    }
    Ok(out)
}

fn is_block_directive(line: &str) -> bool {
    ["#for ", "#if ", "#else", "#end"]
        .iter()
        .any(|d| line.starts_with(d))
}

/// Lines from `*at` up to the `#else` or `#end` that closes this block (returned, `*at` past
/// it), or to the end of the text (None). Lines are written to `out` when it is given.
fn block(
    shader: &str,
    lines: &[&str],
    at: &mut usize,
    consts: &[(&str, String)],
    vars: &mut Vec<(String, String)>,
    mut out: Option<&mut String>,
) -> Result<Option<&'static str>> {
    while *at < lines.len() {
        let line = lines[*at];
        let directive = line.trim_start();
        *at += 1;
        if directive.starts_with("#end") {
            return Ok(Some("#end"));
        }
        if directive.starts_with("#else") {
            return Ok(Some("#else"));
        }
        if let Some(rest) = directive.strip_prefix("#for ") {
            // A block that writes nothing only needs its end found: its bounds may name
            // constants that only the variants taking it have.
            let (var, copies) = match out {
                Some(_) => parse_for(shader, rest, consts)?,
                None => (String::new(), vec![]),
            };
            let body = *at;
            let mut after = body;
            // Once with nothing written when the range is empty, to find the block's end.
            let none = String::new();
            for v in copies.iter().chain(copies.is_empty().then_some(&none)) {
                *at = body;
                vars.push((var.clone(), v.clone()));
                let emit = if copies.is_empty() {
                    None
                } else {
                    out.as_deref_mut()
                };
                let end = block(shader, lines, at, consts, vars, emit)?;
                vars.pop();
                if end != Some("#end") {
                    return Err(error(shader, format!("`#for {rest}` has no `#end`")));
                }
                after = *at;
            }
            *at = after;
            continue;
        }
        if let Some(cond) = directive.strip_prefix("#if ") {
            let cond = substitute(cond.trim(), vars);
            let cond = cond.as_str();
            let (negate, name) = match cond.strip_prefix('!') {
                Some(name) => (true, name),
                None => (false, cond),
            };
            let taken = match out {
                Some(_) => (value(shader, name, consts)? != 0) != negate,
                None => false,
            };
            let then_out = if taken { out.as_deref_mut() } else { None };
            match block(shader, lines, at, consts, vars, then_out)? {
                Some("#end") => {}
                Some(_) => {
                    let else_out = if taken { None } else { out.as_deref_mut() };
                    if block(shader, lines, at, consts, vars, else_out)? != Some("#end") {
                        return Err(error(shader, format!("`#if {cond}` has no `#end`")));
                    }
                }
                None => return Err(error(shader, format!("`#if {cond}` has no `#end`"))),
            }
            continue;
        }
        if let Some(out) = out.as_deref_mut() {
            out.push_str(&substitute(line, vars));
            out.push('\n');
        }
    }
    Ok(None)
}

/// `line` with each `{name}` of the open `#for` blocks replaced by its value, and `{NAME}`
/// (the name in capitals, words only) by the value in capitals.
fn substitute(line: &str, vars: &[(String, String)]) -> String {
    let mut text = line.to_string();
    for (name, v) in vars {
        text = text.replace(&format!("{{{name}}}"), v);
        let upper = name.to_ascii_uppercase();
        if upper != *name {
            text = text.replace(&format!("{{{upper}}}"), &v.to_ascii_uppercase());
        }
    }
    text
}

/// `i in 0..FM` → (`i`, ["0", "1", ...]); `side in a b` → (`side`, ["a", "b"]).
fn parse_for(shader: &str, rest: &str, consts: &[(&str, String)]) -> Result<(String, Vec<String>)> {
    let bad = || {
        error(
            shader,
            format!(
                "bad directive `#for {rest}` (want `#for NAME in A..B` or `#for NAME in WORD ...`)"
            ),
        )
    };
    let is_name =
        |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let (var, range) = rest.split_once(" in ").ok_or_else(bad)?;
    let var = var.trim();
    if !is_name(var) {
        return Err(bad());
    }
    let copies = match range.split_once("..") {
        Some((lo, hi)) => {
            let (lo, hi) = (value(shader, lo, consts)?, value(shader, hi, consts)?);
            (lo..hi).map(|v| v.to_string()).collect()
        }
        None => {
            let words: Vec<String> = range.split_whitespace().map(str::to_string).collect();
            if words.is_empty() || !words.iter().all(|w| is_name(w)) {
                return Err(bad());
            }
            words
        }
    };
    Ok((var.to_string(), copies))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consts() -> Vec<(&'static str, String)> {
        vec![
            ("FM", "2u".into()),
            ("ON", "true".into()),
            ("OFF", "false".into()),
        ]
    }

    #[test]
    fn for_blocks_repeat_their_lines_with_the_index_and_nest() {
        let text = "a\n#for i in 0..FM\n#for j in 1..3\nx_{i}_{j};\n#end\n#end\nb\n";
        let got = expand("t", text, &consts()).unwrap();
        assert_eq!(got, "a\nx_0_1;\nx_0_2;\nx_1_1;\nx_1_2;\nb\n");
        let empty = expand("t", "#for i in 0..0\nnever {i}\n#end\nafter\n", &[]).unwrap();
        assert_eq!(empty, "after\n");
    }

    #[test]
    fn for_blocks_over_words_name_each_in_its_case_and_in_conditions() {
        let consts = vec![("A_ON", "true".to_string()), ("B_ON", "false".to_string())];
        let text = "#for side in a b\nfn f_{side}(u: Unit{SIDE}) {\n#if {SIDE}_ON\non {i}\n#end\n}\n#end\n";
        let got = expand("t", text, &consts).unwrap();
        assert_eq!(
            got,
            "fn f_a(u: UnitA) {\non {i}\n}\nfn f_b(u: UnitB) {\n}\n"
        );
        let e = expand("t", "#for s in a, b\n#end\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("want `#for NAME in A..B` or"), "{e}");
    }

    #[test]
    fn if_blocks_keep_one_branch() {
        let text = "#if ON\nyes\n#else\nno\n#end\n#if !ON\nnot\n#end\n#if OFF\nx\n#else\ny\n#end\n";
        assert_eq!(expand("t", text, &consts()).unwrap(), "yes\ny\n");
        let inside = "#for i in 0..FM\n#if ON\nk{i}\n#end\n#end\n";
        assert_eq!(expand("t", inside, &consts()).unwrap(), "k0\nk1\n");
        // A block not taken may name constants its variant lacks.
        let skipped = "#if OFF\n#if NOPE\nx\n#end\n#for i in 0..NOPE\ny\n#end\n#end\nz\n";
        assert_eq!(expand("t", skipped, &consts()).unwrap(), "z\n");
    }

    #[test]
    fn malformed_blocks_are_errors() {
        let e = |text: &str| expand("t", text, &consts()).unwrap_err().to_string();
        assert!(e("#for i in 0..FM\nx\n").contains("no `#end`"));
        assert!(e("#if ON\nx\n").contains("no `#end`"));
        assert!(e("x\n#end\n").contains("without an open block"));
        assert!(e("#for i in 0..NOPE\n#end\n").contains("`NOPE` is no integer"));
        assert!(e("#for i 0..2\n#end\n").contains("want `#for NAME in A..B`"));
        assert!(e("#for i in\n#end\n").contains("want `#for NAME in A..B`"));
        assert_eq!(expand("t", "plain\n", &[]).unwrap(), "plain\n");
    }
}
