//! Every numeric flag of every subcommand, with its range as the error line states it
//! (the table of flags in docs/guide/troubleshooting.md), checked three ways:
//! - [`the_list_holds_every_flag_that_takes_a_value`]: the list below against clap's own
//!   definitions (each subcommand's `--help`): a new flag that takes a value fails the test
//!   until it is listed here, with its range, or as a flag whose value is not a number;
//! - [`numeric_flags_out_of_range_name_the_flag_and_the_range`]: every listed value outside
//!   a flag's range is one `error:` line naming the flag and the range, exit code 2, before
//!   any data is read or the GPU touched;
//! - [`numeric_flags_never_panic`]: random combinations of boundary, overflowing, negative,
//!   non-finite and garbage values on every subcommand either run or end with one error
//!   line (exit 2 naming a flag of the command line, 1 or 3 for what the data or the device
//!   refuses), never a panic, an abort, a signal or a hang.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;
use super::fixtures::gpt_checkpoint;
use super::flag_table::{Draws, Flag, SUBCOMMANDS, Subcommand};

const BIN: &str = env!("CARGO_BIN_EXE_webgpu-amp");

/// What the runs need: a folder for what they write and a GPT checkpoint for `sample`.
struct Fixture {
    tmp: TempDir,
    checkpoint: String,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let tmp = TempDir::new(tag);
        let ck = tmp.path("gpt.safetensors");
        gpt_checkpoint(&ck);
        Fixture {
            checkpoint: ck.display().to_string(),
            tmp,
        }
    }

    fn path(&self, name: &str) -> String {
        self.tmp.path(name).display().to_string()
    }

    /// The flags a quick run of `sub` starts from (each given flag replaces its own).
    fn defaults(&self, sub: &Subcommand) -> Vec<(&'static str, String)> {
        let d = |pairs: &[(&'static str, &str)]| {
            pairs
                .iter()
                .map(|(f, v)| (*f, v.to_string()))
                .collect::<Vec<_>>()
        };
        match sub.words {
            ["train"] => d(&[("--dataset", "synthetic"), ("--steps", "1")]),
            ["plan"] => d(&[("--dataset", "synthetic")]),
            ["compare"] => {
                let (report, png) = (self.path("report.json"), self.path("report.png"));
                d(&[
                    ("--dataset", "synthetic"),
                    ("--steps", "1"),
                    ("--report", &report),
                    ("--png", &png),
                ])
            }
            ["sample"] => d(&[("--checkpoint", &self.checkpoint), ("--tokens", "2")]),
            ["bench", "matmul"] => {
                d(&[("--sizes", "8"), ("--repeats", "1"), ("--storages", "f32")])
            }
            ["bench", "step"] => d(&[
                ("--models", "mlp"),
                ("--precisions", "f32"),
                ("--steps", "1"),
                ("--batch-size", "2"),
            ]),
            _ => Vec::new(),
        }
    }

    /// The command line of `sub` with `flags` (and the flags they need) over its defaults.
    fn args(&self, sub: &Subcommand, flags: &[(&'static str, String)]) -> Vec<String> {
        let mut all = self.defaults(sub);
        for &(f, ref v) in flags {
            all.retain(|(g, _)| *g != f);
            all.push((f, v.clone()));
        }
        for (f, _) in flags {
            let needs = sub
                .flags()
                .find(|x| x.name == *f)
                .map_or(&[][..], |x| x.needs);
            for pair in needs.chunks(2) {
                let value = match pair[1] {
                    "SAVE" => self.path("save.safetensors"),
                    v => v.to_string(),
                };
                if !all.iter().any(|(g, _)| *g == pair[0]) {
                    all.push((pair[0], value));
                }
            }
        }
        let mut args: Vec<String> = sub.words.iter().map(|w| w.to_string()).collect();
        if matches!(sub.words, ["train"] | ["compare"]) {
            args.push("--no-validate".into());
        }
        // `--flag=value`, so an empty or negative value stays this flag's value.
        args.extend(all.iter().map(|(f, v)| format!("{f}={v}")));
        args
    }
}

/// Runs the binary (no window: `gui` finds no display) and kills it past `limit`: a run
/// that takes longer is a hang, and fails the test.
fn run_bounded(args: &[String], limit: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .env_remove("WEBGPU_AMP_F16_STORAGE")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("WAYLAND_SOCKET")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run webgpu-amp");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "webgpu-amp {}: still running after {limit:?} (a hang):\n{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// The one `error:` line of a failed run, or why there is none. A command that got as far
/// as the device may have said what it runs on first (`bench step`'s `adapter:` line,
/// `sample`'s header); the error is then its last line, and the only one.
fn one_error_line(out: &Output) -> Result<String, String> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("panicked") {
        return Err(format!("panicked:\n{stderr}"));
    }
    // (Mesa's loader complains on stderr when XDG_RUNTIME_DIR is unset; not ours.)
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("XDG_RUNTIME_DIR"))
        .collect();
    let errors = lines.iter().filter(|l| l.starts_with("error")).count();
    match lines.last() {
        Some(line) if errors == 1 && line.starts_with("error: ") => Ok(line.to_string()),
        _ => Err(format!("not one error line, last:\n{stderr}")),
    }
}

/// The flags that take a value in `help` (a subcommand's `--help`): `--name <VALUE>`.
fn value_flags(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("-h, ").unwrap_or(l);
            let (name, rest) = l.strip_prefix("--")?.split_once(' ')?;
            rest.starts_with('<').then(|| format!("--{name}"))
        })
        .collect()
}

#[test]
fn the_list_holds_every_flag_that_takes_a_value() {
    let mut problems = Vec::new();
    for sub in SUBCOMMANDS {
        let mut args: Vec<String> = sub.words.iter().map(|w| w.to_string()).collect();
        args.push("--help".into());
        let out = Command::new(BIN).args(&args).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout).to_string();
        let defined = value_flags(&help);
        assert!(
            !defined.is_empty(),
            "{}: no flags in --help:\n{help}",
            sub.name()
        );
        let numeric: Vec<&str> = sub.flags().map(|f| f.name).collect();
        let other: Vec<&str> = sub.other.iter().flat_map(|l| l.iter().copied()).collect();
        for f in &defined {
            if !numeric.contains(&f.as_str()) && !other.contains(&f.as_str()) {
                problems.push(format!(
                    "`{} {f}` takes a value but is not listed: add it to its subcommand's \
                     numeric flags in tests/cli_errors/numeric_flags.rs (with its range, in \
                     the guide's table), or to its flags whose value is not a number",
                    sub.name()
                ));
            }
        }
        for f in numeric.iter().chain(&other) {
            if !defined.iter().any(|d| d == f) {
                problems.push(format!("`{} {f}` is listed but not defined", sub.name()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn numeric_flags_out_of_range_name_the_flag_and_the_range() {
    let fx = Fixture::new("ranges");
    let mut checked = 0;
    for sub in SUBCOMMANDS {
        for f in sub.flags() {
            for &bad in f.bad {
                let args = fx.args(sub, &[(f.name, bad.to_string())]);
                let what = format!("webgpu-amp {}", args.join(" "));
                let out = run_bounded(&args, Duration::from_secs(60));
                let line = one_error_line(&out).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(out.status.code(), Some(2), "{what}: exit code; {line}");
                assert!(
                    line.contains(f.name) && line.contains(f.range),
                    "{what}: the line must name {} and its range `{}`: {line}",
                    f.name,
                    f.range
                );
                checked += 1;
            }
        }
    }
    eprintln!("numeric flags: {checked} values out of range, each one error line, exit 2");
}

/// Values of integer flags: every width's boundaries, overflow, negative, garbage.
const INTS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "-1",
    "255",
    "65535",
    "65536",
    "65537",
    "4294967295",
    "4294967296",
    "9007199254740992",
    "9007199254740993",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "1e3",
    "0x10",
    "",
    "ten",
];

/// Values of float flags: from subnormal to inf and NaN, and garbage.
const FLOATS: &[&str] = &[
    "0", "-0", "1", "0.5", "2", "-1", "1e-45", "1e-31", "1e-300", "65504", "65520", "1e38",
    "3.4e38", "1e39", "inf", "-inf", "NaN", "", "one",
];

/// Property (see the module docs). Cases are drawn from a fixed seed (reproducible; each
/// failure prints its command line), two or three flags of one subcommand at a time. Every
/// run is bounded: `train` and `compare` to one epoch of 20 samples or two steps, `sample`
/// to a few tokens, the benchmarks to tiny sizes, `gui` to no window at all.
#[test]
fn numeric_flags_never_panic() {
    let fx = Fixture::new("prop");
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut pick = |n: usize| -> usize {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let (mut ran, mut refused, mut device) = (0, 0, 0);
    let cases = 120;
    for case in 0..cases {
        // Half the cases train (most flags live there), the rest spread over the others.
        let sub = if pick(2) == 0 {
            &SUBCOMMANDS[pick(2)]
        } else {
            &SUBCOMMANDS[2 + pick(SUBCOMMANDS.len() - 3)]
        };
        let list: Vec<&Flag> = sub.flags().collect();
        let mut flags: Vec<(&'static str, String)> = Vec::new();
        for _ in 0..2 + pick(2) {
            let f = list[pick(list.len())];
            let pool = match f.draws {
                Draws::Ints => INTS,
                Draws::Floats => FLOATS,
                Draws::These(values) => values,
            };
            if !flags.iter().any(|(g, _)| *g == f.name) {
                flags.push((f.name, pool[pick(pool.len())].to_string()));
            }
        }
        if matches!(sub.words, ["train"] | ["compare"]) {
            if flags.iter().any(|(f, _)| *f == "--epochs") {
                // Any epoch count, bounded by two steps of at most one micro-batch each.
                flags.retain(|(f, _)| !["--steps", "--grad-accum"].contains(f));
                flags.push(("--steps", "2".into()));
            } else {
                // Any steps, micro-batches and batch size: one epoch of 20 samples.
                flags.push(("--epochs", "1".into()));
            }
        }
        let args = fx.args(sub, &flags);
        let what = format!("case {case}: webgpu-amp {}", args.join(" "));
        let out = run_bounded(&args, Duration::from_secs(300));
        match out.status.code() {
            Some(0) => ran += 1,
            // 3: the GPU failed under the run (main's exit code for a device error).
            Some(code @ (1..=3)) => {
                let line = one_error_line(&out).unwrap_or_else(|e| panic!("{what}: {e}"));
                if code == 2 {
                    let named = args
                        .iter()
                        .filter_map(|a| a.split('=').next().filter(|f| f.starts_with("--")))
                        .any(|f| line.contains(f));
                    assert!(named, "{what}: exit 2 names no flag: {line}");
                    refused += 1;
                } else {
                    device += 1;
                }
            }
            other => panic!(
                "{what}: exit {other:?} (a signal or a panic):\n{}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
    eprintln!(
        "numeric flags: {cases} cases, {ran} ran, {refused} refused (exit 2), {device} \
         stopped by the device or data (exit 1)"
    );
    assert!(
        ran > 0 && refused > 0,
        "the cases should cover both outcomes"
    );
}

/// The two runs of the issue, exactly: an abort (10^11 bytes asked of the allocator) and a
/// hang (10^8 estimate batches after every step). Both are one line now, before any work.
#[test]
fn the_eval_batches_that_aborted_and_hung_are_refused() {
    for extra in [
        &["--eval-batches", "4294967296"][..],
        &["--eval-batches", "100000000", "--eval-every", "1"],
    ] {
        let mut args: Vec<String> = [
            "train",
            "--model",
            "gpt-tiny",
            "--steps",
            "2",
            "--batch-size",
            "2",
        ]
        .map(String::from)
        .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = run_bounded(&args, Duration::from_secs(60));
        let line = one_error_line(&out).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_eq!(out.status.code(), Some(2), "{line}");
        assert!(line.contains("--eval-batches must be 1 to 65536"), "{line}");
    }
}
