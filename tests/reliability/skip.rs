//! The skip guarantee from the command line: the audit's NaN-data run and its run whose
//! every third batch overflows f16. Both trained to "parameter `1.weight` holds inf/NaN" with
//! every step reported as skipped; now the NaN file is refused at load, and the overflowing run
//! stops with one line once the scale has fallen below 2^-24, its checkpoints all finite.

use super::common::cli::error_line;
use super::common::rand_vec;
use super::{TempDir, class_data, run};
use webgpu_amp::train::checkpoint::Checkpoint;

#[test]
fn a_nan_in_a_data_file_is_refused_at_load_naming_sample_and_element() {
    let tmp = TempDir::new("nan");
    let mut x = rand_vec(16 * 10, 1);
    x[5] = f32::NAN;
    let labels: Vec<i64> = (0..16).map(|i| i % 3).collect();
    let file = tmp.write("nan.safetensors", &class_data(&x, 10, &labels));
    let f = file.display().to_string();
    let out = run(&[
        "train",
        "--model",
        "mlp",
        "--batch-size",
        "8",
        "--dataset",
        &f,
        "--steps",
        "500",
        "--no-shuffle",
    ]);
    let line = error_line(&out, "NaN data");
    for needle in [&f as &str, "`x`", "NaN", "sample 0", "element 5"] {
        assert!(line.contains(needle), "`{needle}` missing: {line}");
    }
}

#[test]
fn a_run_whose_batches_overflow_f16_stops_at_the_scale_floor_with_finite_checkpoints() {
    let tmp = TempDir::new("overflow");
    // 24 samples, batch 8, file order: the first batch of every epoch overflows f16 in the
    // forward (inputs around 1e5), whatever the scale.
    let mut x = rand_vec(24 * 10, 2);
    x[..80].iter_mut().for_each(|v| *v *= 1e5);
    let labels: Vec<i64> = (0..24).map(|i| i % 3).collect();
    let file = tmp.write("big.safetensors", &class_data(&x, 10, &labels));
    let save = tmp.path("run.safetensors");
    let (f, s) = (file.display().to_string(), save.display().to_string());
    let out = run(&[
        "train",
        "--model",
        "mlp",
        "--precision",
        "amp-f16",
        "--batch-size",
        "8",
        "--dataset",
        &f,
        "--steps",
        "480",
        "--no-shuffle",
        "--no-validate",
        "--save",
        &s,
        "--save-every",
        "10",
    ]);
    let line = error_line(&out, "overflowing batches");
    for needle in [
        "GradScaler",
        "below 2^-24",
        "skipped steps changed no weight",
        "in f32",
    ] {
        assert!(line.contains(needle), "`{needle}` missing: {line}");
    }
    assert_eq!(out.status.code(), Some(1), "{line}");
    // The periodic checkpoints before the stop hold finite weights (they were refused before).
    let ck = Checkpoint::load(&save).expect("the last periodic checkpoint loads");
    for p in &ck.params {
        assert!(
            p.values.iter().all(|v| v.is_finite()),
            "{} not finite",
            p.name
        );
    }
}
