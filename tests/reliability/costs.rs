//! Costs refused before work starts: a 100-byte GPT description with n_layer 1,000,000 (it
//! planned past 60 s and 5.9 GB), one whose fields make 10^13 parameters, a file of a
//! million `relu` layers under the 16 MiB model cap (over 60 s and 860 MB), and a text's
//! host memory per character (a 200 MB text peaked at 8 GB).

use std::process::Command;
use std::time::{Duration, Instant};

use super::common::cli::{BIN, error_line};
use super::{TempDir, run};

/// A model file that must be refused within `within`, its line naming every `needle`.
fn refused_fast(json: &str, within: Duration, needles: &[&str]) {
    let tmp = TempDir::new("model");
    let file = tmp.write("m.json", json.as_bytes());
    let f = file.display().to_string();
    let started = Instant::now();
    let out = run(&["plan", "--model", &f, "--dataset", "synthetic:64"]);
    let took = started.elapsed();
    let line = error_line(&out, "a costly model");
    for needle in needles.iter().chain([&f.as_str()]) {
        assert!(line.contains(needle), "`{needle}` missing: {line}");
    }
    assert!(took < within, "refused after {took:?}: {line}");
}

#[test]
fn a_gpt_of_a_million_blocks_is_refused_naming_n_layer() {
    refused_fast(
        r#"{"gpt": {"vocab_size": 65, "block_size": 64, "n_layer": 1000000, "n_head": 2, "n_embd": 64}}"#,
        Duration::from_secs(10),
        &["n_layer must be 1 to 256, got 1000000"],
    );
}

#[test]
fn a_gpt_of_ten_trillion_parameters_is_refused_naming_its_fields() {
    refused_fast(
        r#"{"gpt": {"vocab_size": 65, "block_size": 64, "n_layer": 200, "n_head": 2, "n_embd": 65536}}"#,
        Duration::from_secs(10),
        &["n_embd 65536", "parameters", "2^31"],
    );
}

#[test]
fn a_million_layers_are_refused_before_they_are_parsed() {
    let layers = vec![r#"{"relu": {}}"#; 1_000_000].join(",");
    let json = format!(r#"{{"input": [10], "layers": [{layers}]}}"#);
    // Debug builds parse slowly; the point is seconds, not the minutes and 800 MB it took.
    refused_fast(
        &json,
        Duration::from_secs(30),
        &["1000000 layers", "at most 4096"],
    );
}

/// Peak resident memory (KiB) of the binary run with `args`, read by wait4 for that child
/// alone.
fn peak_rss_kib(args: &[&str]) -> i64 {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("WEBGPU_AMP_BACKEND")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: zeroed rusage is valid; wait4 on our own child's pid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    let _ = child.try_wait();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{args:?} failed"
    );
    usage.ru_maxrss
}

#[test]
fn a_text_costs_a_few_bytes_of_host_memory_per_character() {
    let tmp = TempDir::new("text");
    let words = ["the ", "king ", "queen ", "of ", "denmark\n", "to ", "be "];
    let text = |chars: usize| {
        let mut s = String::with_capacity(chars + 16);
        let mut i = 0usize;
        while s.len() < chars {
            s.push_str(words[(i * 7 + i / 3) % words.len()]);
            i += 1;
        }
        s
    };
    let small = tmp.write("small.txt", text(200_000).as_bytes());
    let big_chars = 20_000_000;
    let big = tmp.write("big.txt", text(big_chars).as_bytes());
    let rss = |file: &std::path::Path| {
        let source = format!("text:{}", file.display());
        peak_rss_kib(&["plan", "--model", "gpt-tiny", "--dataset", &source])
    };
    let extra_bytes = (rss(&big) - rss(&small)) * 1024;
    let per_char = extra_bytes as f64 / big_chars as f64;
    eprintln!("plan: {per_char:.2} bytes of host memory per character of text");
    assert!(per_char < 6.0, "{per_char:.2} bytes per character");
}
