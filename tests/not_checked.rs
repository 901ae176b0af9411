//! `common::not_checked` is visible under plain `cargo test`: a passing test's note reaches
//! the terminal, although the harness hides a passing test's `println!` and `eprintln!`.
//! Checked on this test binary itself, run again as a child with the harness's default
//! capture: its stdout must hold the note, the note file must hold it, and with
//! `WEBGPU_AMP_REQUIRE_ALL_CHECKS=1` the same test must fail.

mod common;

use std::process::Command;

/// Set in the child only: then [`child_reports_a_check_it_cannot_run`] says NOT CHECKED.
const CHILD_ENV: &str = "WEBGPU_AMP_NOT_CHECKED_SELF_TEST";
const NOTE: &str = "a check this self-test pretends it cannot run";

/// The child's test. Without [`CHILD_ENV`] (a plain `cargo test -- --ignored`) it does
/// nothing; it is ignored so that the suite runs it only as the child.
#[test]
#[ignore = "run by not_checked_notes_show_under_plain_cargo_test as a child process"]
fn child_reports_a_check_it_cannot_run() {
    if std::env::var_os(CHILD_ENV).is_some() {
        common::not_checked(NOTE);
    }
}

#[test]
fn not_checked_notes_show_under_plain_cargo_test() {
    let file = std::env::temp_dir().join(format!("webgpu-amp-not-checked-{}", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let child = |strict: bool| {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--ignored",
            "--exact",
            "child_reports_a_check_it_cannot_run",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env(common::NOT_CHECKED_FILE_ENV, &file)
        .env_remove("RUST_TEST_NOCAPTURE")
        .env_remove(common::REQUIRE_ALL_CHECKS_ENV);
        if strict {
            cmd.env(common::REQUIRE_ALL_CHECKS_ENV, "1");
        }
        cmd.output().expect("run this test binary again")
    };
    let want = format!("NOT CHECKED: not_checked: {NOTE}");

    let out = child(false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the child failed:\n{stdout}");
    assert!(
        stdout.contains("test result: ok. 1 passed"),
        "the child test did not run and pass:\n{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l == want),
        "a passing test's note is not a line of its own in `cargo test`'s output:\n{stdout}"
    );
    let recorded = std::fs::read_to_string(&file).unwrap();
    assert_eq!(recorded, format!("not_checked: {NOTE}\n"), "the note file");

    let out = child(true);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && stdout.contains("REQUIRE_ALL_CHECKS=1 requires every check"),
        "WEBGPU_AMP_REQUIRE_ALL_CHECKS=1 must fail the test:\n{stdout}"
    );
    let _ = std::fs::remove_file(&file);
}
