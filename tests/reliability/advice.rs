//! Advice that works when pasted (round five, item 5). Every flag-and-value a message, a
//! note or the guide suggests is collected from the sources (each string literal of `src/`,
//! each inline code span of README.md and docs/guide) and run as pasted under every command
//! that has the flag: clap must take it (each command is run with `--help` after the advice,
//! which clap reaches only when the advice parsed). Advice printed from run-time values is
//! run from the output of the runs that print it ([`assert_pastes`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common::cli::command;

/// Words that follow a flag's name in prose, not values (`--steps must be ...`).
const PROSE: &[&str] = &[
    "a",
    "above",
    "after",
    "an",
    "and",
    "are",
    "as",
    "at",
    "below",
    "but",
    "by",
    "checkpoint",
    "flag",
    "for",
    "from",
    "gives",
    "has",
    "in",
    "is",
    "it",
    "must",
    "not",
    "of",
    "only",
    "or",
    "out",
    "says",
    "takes",
    "the",
    "then",
    "to",
    "trains",
    "was",
    "when",
    "where",
    "with",
    "would",
];

/// Flags of other programs that messages and the guide name (`cargo build --features mpi`,
/// `scripts/tint-check.sh --only`), with the program: skipped, and none may be a flag of
/// webgpu-amp (that would hide its advice).
const OTHER_PROGRAMS: &[(&str, &str)] = &[
    ("all-targets", "cargo"),
    ("check", "cargo"),
    ("features", "cargo"),
    ("open", "cargo"),
    ("path", "cargo"),
    ("release", "cargo"),
    ("target", "cargo"),
    ("test", "cargo"),
    ("tests", "cargo"),
    ("allow-run-as-root", "mpirun"),
    ("oversubscribe", "mpirun"),
    ("variant", "debootstrap"),
    ("enable-unsafe-webgpu", "chromium"),
    ("gpt-char-steps", "web/e2e/run.sh"),
    ("screenshots", "web/e2e/run.sh"),
    ("skip-no-webgpu", "web/e2e/run.sh"),
    ("llama-steps", "web/e2e/run.sh"),
    ("skip-llama", "web/e2e/run.sh"),
    ("resnet-steps", "web/e2e/run.sh"),
    ("gpt-steps", "web/e2e/run.sh"),
    ("skip-resnet", "web/e2e/run.sh"),
    ("hf-folder-steps", "web/e2e/run.sh"),
    ("skip-hf-folder", "web/e2e/run.sh"),
    ("break-builtins", "scripts/tint-check.sh"),
    ("only", "scripts/tint-check.sh"),
    ("full", "scripts/tint-check.sh"),
    ("gate", "scripts/kernel-report.sh"),
];

/// One command (`["bench", "matmul"]`) and its flags: name → takes a value.
type Commands = Vec<(Vec<String>, BTreeMap<String, bool>)>;

fn help(path: &[String]) -> String {
    let out = command().args(path).arg("--help").output().unwrap();
    assert!(out.status.success(), "{path:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Commands the help hides (`shaders`: for other shader compilers' scripts).
const HIDDEN_COMMANDS: &[&str] = &["shaders"];

/// Every leaf command of the binary with the flags its help lists.
fn commands() -> Commands {
    let mut todo = vec![Vec::<String>::new()];
    todo.extend(HIDDEN_COMMANDS.iter().map(|c| vec![c.to_string()]));
    let mut out = Vec::new();
    while let Some(path) = todo.pop() {
        let text = help(&path);
        let mut children = Vec::new();
        let mut in_commands = false;
        let mut flags = BTreeMap::new();
        for line in text.lines() {
            if line.starts_with("Commands:") {
                in_commands = true;
                continue;
            }
            if in_commands {
                match line.split_whitespace().next() {
                    Some(name) if line.starts_with("  ") && name != "help" => {
                        children.push(name.to_string())
                    }
                    Some(_) => {}
                    None => in_commands = false,
                }
                continue;
            }
            // `  -s, --steps <STEPS>` or `      --json`.
            let t = line.trim_start();
            let t = match t.split_once(", ") {
                Some((short, rest)) if short.len() == 2 && short.starts_with('-') => rest,
                _ => t,
            };
            if let Some(rest) = t.strip_prefix("--") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                let takes_value = rest[name.len()..].starts_with(" <");
                flags.insert(name, takes_value);
            }
        }
        if children.is_empty() {
            out.push((path, flags));
        } else {
            for c in children {
                let mut p = path.clone();
                p.push(c);
                todo.push(p);
            }
        }
    }
    out
}

/// The `--flag [value]` fragments of `text`, with a value where one follows that is not a
/// placeholder (`N`, `FILE`), a format argument or a word of prose.
fn fragments(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut at = 0;
    while let Some(i) = text[at..].find("--") {
        let start = at + i;
        at = start + 2;
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'-') {
            continue;
        }
        let rest = &text[start + 2..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            continue;
        }
        let after = &rest[name.len()..];
        let value = after
            .strip_prefix(' ')
            .or_else(|| after.strip_prefix('='))
            .map(|v| {
                v.split(|c: char| c.is_whitespace() || ",;)`'\"".contains(c))
                    .next()
                    .unwrap_or("")
            })
            .filter(|v| {
                !v.is_empty()
                    && v.chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                    && v.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || "._:+-".contains(c)
                    })
                    && !PROSE.contains(v)
            })
            .map(str::to_string);
        out.push((name, value));
    }
    out
}

/// The string literals of a Rust source, comments and unit tests left out (`\` line
/// continuations joined).
fn string_literals(source: &str) -> Vec<String> {
    let source = source.split("#[cfg(test)]").next().unwrap_or_default();
    let code: String = source
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            // A char literal ('"') or a lifetime: skip what a quote there would confuse.
            if chars.peek() == Some(&'"') {
                chars.next();
            }
            continue;
        }
        if c != '"' {
            continue;
        }
        let mut lit = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('\n') => {
                        while chars.peek().is_some_and(|c| c.is_whitespace()) {
                            chars.next();
                        }
                    }
                    Some(e) => lit.push(e),
                    None => {}
                },
                '"' => break,
                c => lit.push(c),
            }
        }
        out.push(lit);
    }
    out
}

/// The inline code spans of a Markdown file (code blocks are run by tests/guide_examples.rs).
fn code_spans(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            out.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    out
}

fn files(dir: &Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// Whether `command --flag value` parses: clap reaches the `--help` after it only then.
fn parses(path: &[String], flag: &str, value: Option<&str>) -> Result<(), String> {
    let out = command()
        .args(path)
        .arg(format!("--{flag}"))
        .args(value)
        .arg("--help")
        .output()
        .unwrap();
    match out.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
    }
}

/// Each fragment of `texts` (with where it came from) checked against `commands`: the flag
/// exists, and every command that has it takes the value.
fn check(commands: &Commands, texts: &[(String, String)]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut failures = Vec::new();
    for (origin, text) in texts {
        for (flag, value) in fragments(text) {
            if flag == "help" {
                continue;
            }
            if OTHER_PROGRAMS.iter().any(|(f, _)| *f == flag) {
                continue;
            }
            if !seen.insert((flag.clone(), value.clone())) {
                continue;
            }
            let with: Vec<&Vec<String>> = commands
                .iter()
                .filter(|(_, flags)| flags.contains_key(&flag))
                .map(|(path, _)| path)
                .collect();
            if with.is_empty() {
                // A hidden flag (`selftest --break-reference`) parses though no help lists it
                // (without its value, clap says the value is missing, not the flag unknown).
                let hidden =
                    commands
                        .iter()
                        .any(|(path, _)| match parses(path, &flag, value.as_deref()) {
                            Ok(()) => true,
                            Err(e) => value.is_none() && !e.contains("unexpected argument"),
                        });
                if !hidden {
                    failures.push(format!("{origin}: --{flag}: no command takes it: {text}"));
                }
                continue;
            }
            for path in with {
                let takes = commands.iter().find(|(p, _)| p == path).unwrap().1[&flag];
                if takes && value.is_none() {
                    continue; // a placeholder (`--steps N`): the flag exists, nothing to paste
                }
                let value = value.as_deref().filter(|_| takes);
                if let Err(e) = parses(path, &flag, value) {
                    let pasted = format!("--{flag} {}", value.unwrap_or_default());
                    failures.push(format!("{origin}: `{} {pasted}`: {e}", path.join(" ")));
                }
            }
        }
    }
    failures
}

/// Advice in an output (`what` ran it) that a user would paste: every fragment parses under
/// every command that has its flag.
pub fn assert_pastes(what: &str, output: &str) {
    let failures = check(&commands(), &[(what.to_string(), output.to_string())]);
    assert!(
        failures.is_empty(),
        "advice that fails when pasted:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_flag_a_message_or_the_guide_suggests_parses_as_pasted() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut texts = Vec::new();
    let mut sources = Vec::new();
    files(&root.join("src"), "rs", &mut sources);
    for path in &sources {
        let source = std::fs::read_to_string(path).unwrap();
        let origin = path.strip_prefix(root).unwrap().display().to_string();
        texts.extend(
            string_literals(&source)
                .into_iter()
                .map(|l| (origin.clone(), l)),
        );
    }
    let mut docs = vec![root.join("README.md")];
    files(&root.join("docs/guide"), "md", &mut docs);
    for path in &docs {
        let origin = path.strip_prefix(root).unwrap().display().to_string();
        let text = std::fs::read_to_string(path).unwrap();
        texts.extend(code_spans(&text).into_iter().map(|s| (origin.clone(), s)));
    }
    let commands = commands();
    assert!(commands.len() >= 8, "commands found: {commands:?}");
    for (flag, program) in OTHER_PROGRAMS {
        let ours = commands.iter().find(|(_, flags)| flags.contains_key(*flag));
        assert!(
            ours.is_none(),
            "--{flag} is listed as {program}'s but {ours:?} has it"
        );
    }
    let failures = check(&commands, &texts);
    assert!(
        failures.is_empty(),
        "advice that fails when pasted:\n{}",
        failures.join("\n")
    );
}

/// What `info` advises on this adapter runs as pasted: the hint that `--tensor-cores on` runs
/// tensor cores on a CPU adapter is given only where it does (it was given on adapters
/// without cooperative matrices, where pasting it failed), and so is `bench matmul
/// --kernel coop`'s.
#[test]
fn the_tensor_core_hint_runs_where_it_is_given() {
    let out = command()
        .env_remove("WEBGPU_AMP_TUNING")
        .arg("info")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}");
    assert_pastes("info", &stdout);
    let coop = command()
        .env_remove("WEBGPU_AMP_TUNING")
        .args([
            "bench",
            "matmul",
            "--sizes",
            "16",
            "--repeats",
            "1",
            "--kernel",
            "coop",
        ])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&coop.stderr).into_owned();
    assert_pastes("bench matmul --kernel coop", &said);
    for text in [&stdout, &said] {
        if !text.contains("--tensor-cores on runs them here") {
            continue;
        }
        let pasted = command()
            .env_remove("WEBGPU_AMP_TUNING")
            .args([
                "bench",
                "matmul",
                "--sizes",
                "16",
                "--repeats",
                "1",
                "--tensor-cores",
                "on",
            ])
            .output()
            .unwrap();
        assert!(
            pasted.status.success(),
            "the hint `--tensor-cores on runs them here` fails when pasted:\n{}",
            String::from_utf8_lossy(&pasted.stderr)
        );
    }
}
