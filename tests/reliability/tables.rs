//! Kernel tables a user hands the binary (`--tuning FILE`, `WEBGPU_AMP_TUNING`): one that a
//! kernel cannot run correctly is refused before anything runs, by every command, with one
//! line naming the file and the key (round five, items 1 and 2).

use std::path::PathBuf;

use serde_json::{Value, json};

use super::TempDir;
use crate::common::cli::{assert_says, command, error_line};
use crate::common::ctx;

/// A tuning file for the adapter the tests run on (the built-in table), changed by `edit`.
pub fn tuning_file(dir: &TempDir, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let ctx = ctx();
    let mut file = json!({
        "format": webgpu_amp::gpu::TUNING_FORMAT,
        "adapter": ctx.report.name,
        "backend": ctx.report.backend,
        "driver": "tests",
        "date": "2026-11-28",
        "command": "tests/reliability/tables.rs",
        "table": serde_json::to_value(&ctx.caps.kernels.table).unwrap(),
        "measurements": [],
    });
    edit(&mut file);
    dir.write(
        name,
        serde_json::to_string_pretty(&file).unwrap().as_bytes(),
    )
}

/// The binary with `args` (and `env`), on the tests' adapter: it fails with one error line.
pub fn refused(args: &[&str], env: &[(&str, &str)], what: &str) -> String {
    let mut cmd = command();
    cmd.env_remove("WEBGPU_AMP_TUNING").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    error_line(&cmd.output().expect("run webgpu-amp"), what)
}

/// Issue 43's tables: tiles of 20×12 and 12×8 (sides that are multiples of 4, not of the 8
/// the staging loads) computed wrong matmuls yet were accepted by `info`, `train` and `bench
/// matmul`. Each command, by flag and by environment, now refuses them naming the key.
#[test]
fn tables_whose_tile_sides_are_not_whole_chunks_are_refused_by_every_command() {
    if super::vulkan_pass_only(
        "tables whose tile sides are not whole chunks are refused by every command",
    ) {
        return;
    }
    let dir = TempDir::new("tables");
    for (wg_x, wg_y) in [(3, 5), (2, 3)] {
        let name = format!("bad-{wg_x}x{wg_y}.json");
        let bad = tuning_file(&dir, &name, |f| {
            f["table"]["simt_f32"] = json!({"wg_x": wg_x, "wg_y": wg_y, "tm": 4, "tn": 4, "bk": 8});
        });
        let path = bad.display().to_string();
        let needles = [path.as_str(), "simt_f32", "wg_y × tm"];
        let bench = [
            "bench",
            "matmul",
            "--kernel",
            "tiled",
            "--storages",
            "f32",
            "--sizes",
            "64",
            "--repeats",
            "1",
        ];
        let train = [
            "train",
            "--model",
            "mlp",
            "--dataset",
            "synthetic:64",
            "--steps",
            "1",
        ];
        let commands: [&[&str]; 4] = [&["info"], &bench, &train, &["selftest"]];
        for args in commands {
            let with_flag = [args, &["--tuning", &path]].concat();
            let line = refused(&with_flag, &[], &format!("{args:?} --tuning {name}"));
            assert_says(&line, &name, &needles);
            let line = refused(args, &[("WEBGPU_AMP_TUNING", &path)], &name);
            assert_says(&line, &name, &needles);
        }
    }
}

/// Values past u32 products (a 65536×65536 workgroup, `bk` 2^26, `fm` 10^9) are a rule broken
/// and said in one line, never an overflow panic (debug) or a wrapped check (release); a
/// zero that would divide by zero in a shader is refused before any shader is built; a
/// tensor-core tile is checked where no tensor cores run too (it would fail on the next GPU).
#[test]
fn huge_zero_and_unused_tiles_are_refused_in_one_line() {
    if super::vulkan_pass_only("huge zero and unused tiles are refused in one line") {
        return;
    }
    let dir = TempDir::new("huge");
    type Edit = fn(&mut Value);
    let cases: [(&str, &[&str], Edit); 5] = [
        ("bk", &["simt_f32", "bk = 67108864"], |f| {
            f["table"]["simt_f32"]["bk"] = json!(67_108_864)
        }),
        (
            "workgroup",
            &["simt_16", "wg_x = 65536", "wg_x × wg_y = 4294967296"],
            |f| {
                f["table"]["simt_16"]["wg_x"] = json!(65536);
                f["table"]["simt_16"]["wg_y"] = json!(65536);
            },
        ),
        ("fm", &["coop_16.small", "fm × fn"], |f| {
            f["table"]["coop_16"]["small"]["fm"] = json!(1_000_000_000u32)
        }),
        ("zero", &["simt_16", "tm = 0"], |f| {
            f["table"]["simt_16"]["tm"] = json!(0)
        }),
        ("unused", &["coop_16.large", "bk = 12"], |f| {
            f["table"]["coop_16"]["large"]["bk"] = json!(12)
        }),
    ];
    for (name, needles, edit) in cases {
        let file = tuning_file(&dir, &format!("{name}.json"), edit);
        let path = file.display().to_string();
        let line = refused(&["info", "--tuning", &path], &[], name);
        assert_says(&line, name, needles);
        assert_says(&line, name, &[&path]);
        let bench = [
            "bench",
            "matmul",
            "--kernel",
            "tiled",
            "--sizes",
            "16",
            "--repeats",
            "1",
            "--tuning",
            &path,
        ];
        let line = refused(&bench, &[], name);
        assert_says(&line, name, needles);
    }
}

/// A file measured on this adapter's name over another backend, or holding another class's
/// table, is not this adapter's (the GL adapter of a GPU shares its Vulkan adapter's name).
#[test]
fn a_file_of_another_backend_or_class_is_refused() {
    if super::vulkan_pass_only("a file of another backend or class is refused") {
        return;
    }
    let dir = TempDir::new("backend");
    let ours = ctx().report.backend.clone();
    let other = if ours == "gl" { "vulkan" } else { "gl" };
    let file = tuning_file(&dir, "backend.json", |f| f["backend"] = json!(other));
    let path = file.display().to_string();
    // (`info` lists every backend's adapters: the other backend's may take the file.)
    let bench = [
        "bench",
        "matmul",
        "--sizes",
        "16",
        "--repeats",
        "1",
        "--tuning",
        &path,
    ];
    let line = refused(&bench, &[], "backend");
    assert_says(
        &line,
        "backend",
        &[&path, &format!("over {other}"), &format!("over {ours}")],
    );
    let class = if ctx().caps.class.name() == "nvidia" {
        "amd"
    } else {
        "nvidia"
    };
    let file = tuning_file(&dir, "class.json", |f| f["table"]["class"] = json!(class));
    let path = file.display().to_string();
    let line = refused(&["info", "--tuning", &path], &[], "class");
    assert_says(&line, "class", &[&path, &format!("{class} class")]);
}

/// Text from a tuning file (its date, its adapter's name) and its path print with control
/// characters escaped: a file cannot clear the terminal or forge a second line.
#[test]
fn strings_from_a_tuning_file_print_escaped() {
    let dir = TempDir::new("escape");
    let file = tuning_file(&dir, "t\u{1b}[2J.json", |f| {
        f["date"] = json!("2026\u{1b}[2J\nx")
    });
    let out = command()
        .env_remove("WEBGPU_AMP_TUNING")
        .args(["info", "--tuning"])
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.contains("kernel table     tuning file"))
        .expect("the kernel table line");
    assert!(!stdout.contains('\u{1b}'), "raw escape printed: {line}");
    assert!(
        line.contains("\\u{1b}[2J.json") && line.contains("2026\\u{1b}[2J\\nx"),
        "{line}"
    );
}

/// `--tuning /dev/zero` is refused at the tuning file cap, not read until memory runs out.
#[cfg(unix)]
#[test]
fn a_tuning_file_is_read_under_a_cap() {
    let line = refused(&["info", "--tuning", "/dev/zero"], &[], "/dev/zero");
    assert_says(
        &line,
        "/dev/zero",
        &["/dev/zero", "tuning file cap of 16 MiB"],
    );
}
