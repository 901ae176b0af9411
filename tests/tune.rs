//! `webgpu-amp bench tune --quick` on this machine's adapter writes a tuning file the binary
//! loads (`--tuning FILE`, `WEBGPU_AMP_TUNING`): `info` shows its table, `bench matmul` runs
//! with it, and a file for another adapter or of another format is a one-line error. And
//! `bench matmul --kernel` runs every body the resolver names, the tiled SIMT body on a CPU
//! adapter included.

mod common;

use common::cli::{assert_says, assert_success, command, error_line, fresh_dir, output_text};
use serde_json::Value;

fn run(args: &[&str]) -> std::process::Output {
    command()
        .env_remove("WEBGPU_AMP_TUNING")
        .args(args)
        .output()
        .expect("run webgpu-amp")
}

#[test]
fn tune_quick_writes_a_table_that_info_and_bench_load_and_a_wrong_file_is_an_error() {
    let dir = fresh_dir("tune");
    let file = dir.join("tuning.json");
    let path = file.to_str().unwrap();
    // The adapter the library tests use (Vulkan here, not GL: --backend picks it).
    let out = run(&[
        "bench",
        "tune",
        "--quick",
        "--budget",
        "1200",
        "--backend",
        "vulkan",
        "--out",
        path,
    ]);
    assert_success(&out, "bench tune --quick");
    let text = std::fs::read_to_string(&file).expect("the tuning file");
    let json: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(json["format"], "webgpu-amp kernel tuning 1");
    let adapter = json["adapter"].as_str().expect("adapter name").to_string();
    let measured = json["measurements"].as_array().expect("measurements");
    assert!(!measured.is_empty(), "no timing recorded: {text}");
    for m in measured {
        let s = m["seconds"].as_f64().expect("seconds");
        assert!(s > 0.0 && s.is_finite(), "{m}");
    }
    for family in ["simt_f32", "simt_16", "coop_8", "coop_16", "split_k"] {
        assert!(
            json["table"][family].is_object(),
            "table lacks {family}: {text}"
        );
    }

    // info shows the file's table for its adapter; bench matmul runs with it.
    let out = run(&["info", "--backend", "vulkan", "--tuning", path]);
    assert_success(&out, "info --tuning");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("kernel table     tuning file {path}")),
        "{stdout}"
    );
    let out = command()
        .env("WEBGPU_AMP_TUNING", path)
        .args([
            "bench",
            "matmul",
            "--sizes",
            "64",
            "--repeats",
            "1",
            "--backend",
            "vulkan",
        ])
        .args(["--storages", "f32"])
        .output()
        .unwrap();
    assert_success(&out, "bench matmul with WEBGPU_AMP_TUNING");

    // Another adapter's file, another format, a missing file: one error line each.
    let other = dir.join("other.json");
    std::fs::write(
        &other,
        text.replace(&format!("\"{adapter}\""), "\"Some Other GPU\""),
    )
    .unwrap();
    let out = run(&[
        "bench",
        "matmul",
        "--sizes",
        "8",
        "--backend",
        "vulkan",
        "--tuning",
    ]
    .into_iter()
    .chain([other.to_str().unwrap()])
    .collect::<Vec<_>>());
    let line = error_line(&out, "another adapter's tuning file");
    assert_says(
        &line,
        "another adapter",
        &["measured on `Some Other GPU`", &adapter],
    );
    let old = dir.join("old.json");
    std::fs::write(&old, text.replace("kernel tuning 1", "kernel tuning 0")).unwrap();
    let out = command()
        .env("WEBGPU_AMP_TUNING", &old)
        .args(["bench", "matmul", "--sizes", "8", "--backend", "vulkan"])
        .output()
        .unwrap();
    let line = error_line(&out, "an old tuning file");
    assert_says(&line, "old format", &["this build reads", "bench tune"]);
    let out = run(&[
        "info",
        "--backend",
        "vulkan",
        "--tuning",
        "/nonexistent/t.json",
    ]);
    let line = error_line(&out, "a missing tuning file");
    assert_says(&line, "missing", &["cannot read"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every body `--kernel` names runs where it can: auto, direct and the tiled SIMT body (what
/// GPUs run) on this adapter, f32; the choices are the library's bodies.
#[test]
fn bench_matmul_runs_every_simt_body_and_names_the_bodies() {
    for kernel in ["auto", "direct", "tiled"] {
        let out = run(&[
            "bench",
            "matmul",
            "--json",
            "--sizes",
            "64",
            "--repeats",
            "1",
            "--storages",
            "f32",
            "--backend",
            "vulkan",
            "--kernel",
            kernel,
        ]);
        assert_success(&out, kernel);
        let json: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{kernel}: {e}\n{}", output_text(&out)));
        let body = json["results"][0]["kernel"].as_str().unwrap();
        if kernel != "auto" {
            assert_eq!(body, kernel);
        }
    }
    let out = run(&["bench", "matmul", "--kernel", "fastest"]);
    let line = error_line(&out, "an unknown body");
    assert_says(&line, "an unknown body", &["--kernel", "fastest"]);
    // The choices --help lists are the library's bodies.
    let help = run(&["bench", "matmul", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    let names: Vec<&str> = webgpu_amp::ops::matmul::MatmulKernel::ALL
        .iter()
        .map(|k| k.name())
        .collect();
    let listed = format!("[possible values: {}]", names.join(", "));
    assert!(help.contains(&listed), "--help lacks `{listed}`:\n{help}");
}
