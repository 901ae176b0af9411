//! SiLU (`nn.SiLU()`), a row of the unary table: forward and backward against an f64
//! reference on every storage, non-finite inputs as PyTorch gives them, and the row as a
//! JSON layer that trains. (`scripts/activation_compat.py` checks every row against
//! PyTorch's module itself.)

mod common;

use common::assert_close;
use common::cli::{assert_success, command, fresh_dir, json_lines};
use common::values::{contexts, quantised, ulp, upload};
use webgpu_amp::nn::ModelSpec;
use webgpu_amp::ops::unary::{self, SILU};
use webgpu_amp::{DType, Tensor};

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn silu64(x: f64) -> f64 {
    x * sigmoid64(x)
}

/// d/dx [x σ(x)] = σ(x) + x σ(x) (1 − σ(x)).
fn silu_grad64(x: f64) -> f64 {
    let s = sigmoid64(x);
    s * (1.0 + x * (1.0 - s))
}

#[test]
fn reference_derivative_matches_finite_differences() {
    for x in [-30.0, -7.5, -1.0, -0.1, 0.0, 0.3, 2.0, 9.0] {
        let h = 1e-6;
        let fd = (silu64(x + h) - silu64(x - h)) / (2.0 * h);
        assert!((fd - silu_grad64(x)).abs() < 1e-8, "silu'({x})");
    }
}

fn run(x: &[f32], dy: &[f32], dtype: DType, ctx: &webgpu_amp::GpuContext) -> [Vec<f32>; 2] {
    let n = x.len();
    let xt = upload(ctx, x, &[n], dtype);
    let dyt = upload(ctx, dy, &[n], dtype);
    let y = Tensor::zeros(ctx, &[n], dtype);
    let dx = Tensor::zeros(ctx, &[n], dtype);
    let f = unary::forward(ctx, &SILU, &xt, &y).unwrap();
    let b = unary::backward(ctx, &SILU, &xt, &dyt, &dx).unwrap();
    ctx.run(&[&f, &b]);
    [y.read_f32(ctx).unwrap(), dx.read_f32(ctx).unwrap()]
}

#[test]
fn silu_forward_and_backward_match_f64_on_every_storage() {
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            for n in [1usize, 7, 1001] {
                let mut xv = quantised(n, 51, 8.0, dtype);
                if n > 7 {
                    // Far tails: x σ(x) is x, or a tiny negative number, and σ' underflows.
                    xv[3] = 40.0;
                    xv[4] = -40.0;
                    xv[5] = 300.0;
                    xv[6] = -300.0;
                }
                let gv = quantised(n, 52, 1.0, dtype);
                let [y, dx] = run(&xv, &gv, dtype, ctx);
                let want_y: Vec<f32> = xv.iter().map(|&v| silu64(v as f64) as f32).collect();
                let want_dx: Vec<f32> = xv
                    .iter()
                    .zip(&gv)
                    .map(|(&v, &g)| (g as f64 * silu_grad64(v as f64)) as f32)
                    .collect();
                // f32 math with one exp: a few f32 ulps, then the output's rounding; 1e-7
                // absolute where 1 + x (1 − σ) cancels (the derivative's zero near x = −1.28,
                // as in PyTorch's formula). Above f16's subnormal step (6e-8).
                let rtol = ulp(dtype).max(4e-6);
                let atol = 1e-7;
                let what = |part: &str| format!("{name} silu {part} {dtype} n={n}");
                assert_close(&what("y"), &y, &want_y, atol, rtol);
                assert_close(&what("dx"), &dx, &want_dx, atol, rtol);
            }
        }
    }
}

#[test]
fn silu_of_non_finite_inputs_is_what_pytorch_gives() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    // torch.nn.SiLU() on [nan, inf, -inf, 0, -0]: y [nan, inf, nan, 0, -0]; gradient of
    // y.sum(): [nan, nan, nan, 0.5, 0.5] (x (1 - σ) is inf · 0 at ±inf).
    let xv = [nan, inf, -inf, 0.0, -0.0, -50.0];
    // An inf upstream gradient where the derivative is tiny but not 0 stays inf (PyTorch: the
    // same product).
    let gv = [1.0, 1.0, 1.0, 1.0, 1.0, inf];
    for (name, ctx) in contexts() {
        for dtype in DType::ALL {
            let [y, dx] = run(&xv, &gv, dtype, ctx);
            let what = |part: &str| format!("{name} silu {part} {dtype}");
            assert_close(&what("y"), &y[..5], &[nan, inf, nan, 0.0, -0.0], 0.0, 0.0);
            assert_close(&what("dx"), &dx[..5], &[nan, nan, nan, 0.5, 0.5], 0.0, 0.0);
            assert!(
                dx[5] == -inf,
                "{}: 0 < |silu'(-50)| and dy = inf: {}",
                what("dx"),
                dx[5]
            );
        }
    }
}

const MODEL: &str =
    r#"{"input": [10], "layers": [{"linear": {"out": 16}}, {"silu": {}}, {"linear": {"out": 1}}]}"#;

#[test]
fn silu_is_a_json_layer_with_pytorchs_repr() {
    let spec = ModelSpec::from_json(MODEL).unwrap();
    let summary = spec.summary();
    assert!(summary.contains("SiLU()"), "{summary}");
    let err = ModelSpec::from_json(r#"{"input": [4], "layers": [{"silu": {"inplace": true}}]}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("silu: unknown field `inplace`"), "{err}");
}

#[test]
fn a_model_with_silu_trains_under_amp_f16() {
    let dir = fresh_dir("unary-silu");
    let model = dir.join("silu.json");
    std::fs::write(&model, MODEL).unwrap();
    let metrics = dir.join("run.jsonl");
    let out = command()
        .args(["train", "--model"])
        .arg(&model)
        .args([
            "--dataset",
            "synthetic:256",
            "--precision",
            "amp-f16",
            "--optimizer",
            "adam",
        ])
        .args([
            "--lr",
            "0.01",
            "--batch-size",
            "32",
            "--steps",
            "24",
            "--no-validate",
        ])
        .arg("--metrics")
        .arg(&metrics)
        .output()
        .unwrap();
    assert_success(&out, "train with a SiLU layer");
    let losses: Vec<f64> = json_lines(&metrics)
        .iter()
        .filter_map(|l| l.get("loss").and_then(|v| v.as_f64()))
        .collect();
    assert_eq!(losses.len(), 24, "{losses:?}");
    let (first, last) = (losses[0], losses[23]);
    assert!(
        last < 0.9 * first,
        "the loss should fall: {first} -> {last}"
    );
}
