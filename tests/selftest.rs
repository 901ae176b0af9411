//! `webgpu-amp selftest` on the adapter at hand (lavapipe on CI; GL with
//! `WEBGPU_AMP_BACKEND=gl`): every op family forward and backward against the CPU reference
//! passes in every storage the adapter runs, the JSON report lists them all, and a wrong
//! reference makes the command fail and name the family.

mod common;

use common::cli::{assert_success, command, output_text};
use serde_json::Value;
use webgpu_amp::selftest::FAMILIES;

#[test]
fn selftest_passes_on_every_family_and_storage() {
    let out = command()
        .args(["selftest", "--json"])
        .output()
        .expect("run selftest");
    assert_success(&out, "selftest --json");
    let report: Value = serde_json::from_slice(&out.stdout).expect("selftest JSON");
    let checks = report["checks"].as_array().expect("checks");
    for family in FAMILIES {
        for storage in ["f32", "f16 packed", "bf16"] {
            let n = checks
                .iter()
                .filter(|c| {
                    c["family"] == *family && c["storage"] == storage && c["passed"] == true
                })
                .count();
            assert!(n > 0, "no passing {family} check in {storage}: {report:#}");
        }
    }
    // Native f16 runs where the adapter has shader-f16, and says why not elsewhere.
    let native = checks
        .iter()
        .filter(|c| c["storage"] == "f16 native")
        .count();
    let not_run = report["not_run"].as_array().expect("not_run");
    assert!(
        native > 0
            || not_run
                .iter()
                .any(|l| l.as_str().is_some_and(|l| l.contains("shader-f16"))),
        "native f16 neither checked nor said to be unavailable: {report:#}"
    );
    if std::env::var("WEBGPU_AMP_EXPECT_NO_F16").is_err() && report["backend"] == "vulkan" {
        assert!(
            native > 0,
            "lavapipe has shader-f16: native f16 must be checked"
        );
    }
}

#[test]
fn a_wrong_reference_fails_the_selftest_and_names_the_family() {
    let out = command()
        .args(["selftest", "--break-reference", "attention"])
        .output()
        .expect("run selftest");
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<&str> = stdout.lines().filter(|l| l.contains("FAILED")).collect();
    assert!(
        !failed.is_empty()
            && failed
                .iter()
                .all(|l| l.contains("attention") || l.starts_with("      ")),
        "only the attention family should fail:\n{}",
        output_text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("checks failed"), "{}", output_text(&out));
}
