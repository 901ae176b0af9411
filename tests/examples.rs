//! The `linear_regression` example runs and learns: `cargo run --example linear_regression`
//! prints three `Epoch k, Loss: x` lines with a falling loss (the tutorial's output).

use std::process::Command;

#[test]
fn linear_regression_example_prints_three_falling_losses() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["run", "-q", "--example", "linear_regression"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env(
            "XDG_RUNTIME_DIR",
            std::env::var_os("XDG_RUNTIME_DIR").unwrap_or_else(|| std::env::temp_dir().into()),
        )
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed:\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let losses: Vec<f32> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("Epoch "))
        .enumerate()
        .map(|(i, rest)| {
            let (k, loss) = rest
                .split_once(", Loss: ")
                .unwrap_or_else(|| panic!("bad line `Epoch {rest}`"));
            assert_eq!(k, (i + 1).to_string(), "epoch numbering");
            // Four decimals, as the tutorial's `{loss.item():.4f}`.
            assert_eq!(
                loss.split_once('.').map(|(_, d)| d.len()),
                Some(4),
                "{loss}"
            );
            loss.parse().unwrap()
        })
        .collect();
    assert_eq!(losses.len(), 3, "want 3 epochs:\n{stdout}");
    assert!(
        losses.windows(2).all(|w| w[1] < w[0]) && losses.iter().all(|l| l.is_finite()),
        "the loss should fall every epoch: {losses:?}"
    );
}
