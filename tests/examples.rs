//! The `linear_regression` example runs and learns: `cargo run --example linear_regression`
//! prints three `Epoch k, Loss: x` lines with a falling loss (the tutorial's output; a step
//! the GradScaler skips is marked and leaves the loss where it was).

mod common;

use std::process::Command;

#[test]
fn linear_regression_example_prints_three_falling_losses() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["run", "-q", "--example", "linear_regression"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("XDG_RUNTIME_DIR", common::cli::runtime_dir())
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (loss, skipped) per epoch. A step the GradScaler skips (its f16 weight gradient
    // overflows at the initial scale, as under PyTorch's autocast) is marked on its line.
    const SKIPPED: &str = " (step skipped: inf/NaN gradients)";
    let epochs: Vec<(f32, bool)> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("Epoch "))
        .enumerate()
        .map(|(i, rest)| {
            let (k, loss) = rest
                .split_once(", Loss: ")
                .unwrap_or_else(|| panic!("bad line `Epoch {rest}`"));
            assert_eq!(k, (i + 1).to_string(), "epoch numbering");
            let (loss, skipped) = match loss.strip_suffix(SKIPPED) {
                Some(loss) => (loss, true),
                None => (loss, false),
            };
            // Four decimals, as the tutorial's `{loss.item():.4f}`.
            assert_eq!(
                loss.split_once('.').map(|(_, d)| d.len()),
                Some(4),
                "{loss}"
            );
            (loss.parse().unwrap(), skipped)
        })
        .collect();
    assert_eq!(epochs.len(), 3, "want 3 epochs:\n{stdout}");
    assert!(
        epochs.iter().all(|(l, _)| l.is_finite()),
        "finite losses: {epochs:?}"
    );
    // The loss falls after every applied step and stays after a skipped one.
    for w in epochs.windows(2) {
        let ((before, skipped), (after, _)) = (w[0], w[1]);
        if skipped {
            assert_eq!(after, before, "a skipped step changed the loss: {epochs:?}");
        } else {
            assert!(after < before, "the loss should fall: {epochs:?}");
        }
    }
    assert!(
        epochs[..2].iter().any(|&(_, skipped)| !skipped),
        "no step was applied: {epochs:?}"
    );
}
