//! The checked examples of README.md, the guide (docs/guide/*.md) and docs/architecture.md's
//! recipes run: every fenced block
//! opened with ` ```sh checked` is run by `sh -e` in a fresh folder, with `webgpu-amp` on
//! `PATH` standing for the binary this test was built with (under `$WEBGPU_AMP_RUNNER` when
//! that is set), and must exit 0 within its time limit. An example that stops working fails
//! here, so the guide's commands stay true. Blocks meant for a GPU, a display, MPI or a
//! download stay plain ` ```sh` and are not run.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cli::{BIN, fresh_dir, runtime_dir};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const FENCE: &str = "```sh checked";
/// Each example takes seconds on lavapipe; this is far beyond that, for a loaded machine.
const LIMIT: Duration = Duration::from_secs(300);
/// The guide promises at least this many checked examples.
const AT_LEAST: usize = 10;

/// A checked block: where it starts and its lines.
struct Example {
    file: PathBuf,
    line: usize,
    script: String,
}

fn documents() -> Vec<PathBuf> {
    let guide = Path::new(ROOT).join("docs").join("guide");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&guide)
        .expect("read docs/guide")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files.insert(0, Path::new(ROOT).join("README.md"));
    // The architecture's recipes (a fork, a layer with a buffer, a family) run too.
    files.push(Path::new(ROOT).join("docs").join("architecture.md"));
    files
}

/// The checked blocks of a Markdown text.
fn checked_blocks(file: &Path, text: &str) -> Vec<Example> {
    let mut examples = Vec::new();
    let mut open: Option<Example> = None;
    for (i, line) in text.lines().enumerate() {
        match open.as_mut() {
            Some(_) if line.trim_start().starts_with("```") => examples.extend(open.take()),
            Some(example) => {
                example.script.push_str(line);
                example.script.push('\n');
            }
            None if line.trim() == FENCE => {
                open = Some(Example {
                    file: file.to_path_buf(),
                    line: i + 1,
                    script: String::new(),
                })
            }
            None => {}
        }
    }
    assert!(
        open.is_none(),
        "{}: a checked block is not closed",
        file.display()
    );
    examples
}

fn all_examples() -> Vec<Example> {
    documents()
        .iter()
        .flat_map(|f| checked_blocks(f, &std::fs::read_to_string(f).expect("read a document")))
        .collect()
}

/// A folder holding `webgpu-amp`: a script that runs this build's binary. Each test names
/// its own (`tag`): `fresh_dir` empties the folder, and the tests run in parallel.
fn bin_dir(tag: &str) -> PathBuf {
    let dir = fresh_dir(&format!("guide-examples-bin-{tag}"));
    let runner = std::env::var("WEBGPU_AMP_RUNNER").unwrap_or_default();
    let wrapper = dir.join("webgpu-amp");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {runner} '{BIN}' \"$@\"\n"),
    )
    .expect("write the webgpu-amp wrapper");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Runs one example; its failure in words, with what it printed.
fn run(example: &Example, bin: &Path, index: usize) -> Result<Duration, String> {
    let dir = fresh_dir(&format!("guide-example-{index}"));
    let script = dir.join("example.sh");
    std::fs::write(&script, &example.script).expect("write the example");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let log = dir.join("output.txt");
    let out = std::fs::File::create(&log).expect("create the output file");
    let start = Instant::now();
    let mut child = Command::new("sh")
        .arg("-e")
        .arg(&script)
        .current_dir(&dir)
        .env("PATH", path)
        .env("XDG_RUNTIME_DIR", runtime_dir())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start sh");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for sh") {
            break Some(status);
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut printed = String::new();
    std::fs::File::open(&log)
        .and_then(|mut f| f.read_to_string(&mut printed))
        .expect("read the output");
    let what = match status {
        Some(s) if s.success() => {
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(start.elapsed());
        }
        Some(s) => format!("exited with {s}"),
        None => format!("ran past {LIMIT:?}"),
    };
    Err(format!(
        "{}:{}: the example {what}:\n{}--- output\n{printed}",
        example.file.display(),
        example.line,
        example.script
    ))
}

#[test]
fn every_checked_example_of_the_readme_and_the_guide_runs() {
    let examples = all_examples();
    assert!(
        examples.len() >= AT_LEAST,
        "{} checked examples, want at least {AT_LEAST}",
        examples.len()
    );
    let bin = bin_dir("every");
    let mut failures = Vec::new();
    for (i, example) in examples.iter().enumerate() {
        let name = example.file.strip_prefix(ROOT).unwrap_or(&example.file);
        match run(example, &bin, i) {
            Ok(took) => println!("ok {}:{} in {took:.1?}", name.display(), example.line),
            Err(failure) => failures.push(failure),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} checked examples failed:\n\n{}",
        failures.len(),
        examples.len(),
        failures.join("\n\n")
    );
}

#[test]
fn checked_blocks_are_found_and_plain_ones_are_not() {
    let text = "intro\n```sh checked\nwebgpu-amp info\necho ok\n```\n\n```sh\nnot run\n```\n\
                - item\n  ```sh checked\n  webgpu-amp plan\n  ```\n";
    let found = checked_blocks(Path::new("x.md"), text);
    assert_eq!(found.len(), 2);
    assert_eq!(
        (found[0].line, found[0].script.as_str()),
        (2, "webgpu-amp info\necho ok\n")
    );
    assert_eq!(
        (found[1].line, found[1].script.as_str()),
        (11, "  webgpu-amp plan\n")
    );
}

#[test]
fn a_failing_example_is_reported_with_its_output() {
    let example = Example {
        file: PathBuf::from("probe.md"),
        line: 7,
        script: "webgpu-amp train --batch-size 0\necho never\n".into(),
    };
    let failure = run(&example, &bin_dir("failing"), 9999).unwrap_err();
    assert!(
        failure.starts_with("probe.md:7: the example exited"),
        "{failure}"
    );
    assert!(failure.contains("--batch-size must be 1 to"), "{failure}");
    let printed = failure
        .split("--- output\n")
        .nth(1)
        .expect("the output part");
    assert!(
        !printed.contains("never"),
        "sh -e stops at the failing command: {failure}"
    );
}
