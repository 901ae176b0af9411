//! An op with its own kernel, written outside the crate: this file and `custom_op.wgsl` are
//! all it takes. The shader is declared once (`SHADER`: name, source, the uniform block
//! written once in Rust, its variant grid); every variant of the grid validates and
//! translates like the built-in ones; the dispatcher runs on the GPU against a CPU reference
//! in every storage; and a layer built on it trains inside a model, as `tests/custom_layer.rs`
//! shows for layers over built-in ops.

mod common;

use common::portability::check_variant;
use common::{assert_close, ctx, ctx_native, ctx_packed, rand_vec};
use serde::Deserialize;
use webgpu_amp::amp::policy::{CastRule, Op, Precision};
use webgpu_amp::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use webgpu_amp::nn::layers::{
    Backward, BackwardPlan, ForwardPlan, Init, Layer, LayerConfig, ParamDef, Resolved,
};
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::shader::{Grid, ShaderDecl};
use webgpu_amp::train::evaluate::predict;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};
use webgpu_amp::{DType, Error, Result, Tensor};

// ---- the op: its shader, declared once, and its dispatcher ------------------------------

webgpu_amp::wgsl_struct! {
    /// Uniform block of `custom_op.wgsl` (`#struct Params`).
    struct Params {
        rows: u32,
        cols: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

static SHADER: ShaderDecl = ShaderDecl {
    name: "test_scale_columns",
    source: include_str!("custom_op.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Activations in any storage; the scale in theirs or f32; its gradient f32.
    variants: |shader| {
        Grid::new()
            .each(&["x", "y", "dy"])
            .like_or_f32(&["s"], "x")
            .variants(shader, &[])
    },
};
const WG: u32 = 64;

fn launch<'a>(
    ctx: &GpuContext,
    entry: &'static str,
    (rows, cols): (usize, usize),
    threads: usize,
    tensors: Vec<(&'a str, Arg<'a>)>,
) -> Result<Kernel> {
    let params = Params {
        rows: rows as u32,
        cols: cols as u32,
        ..Default::default()
    };
    let mut args = vec![("params", Arg::Uniform(bytemuck::bytes_of(&params)))];
    args.extend(tensors);
    ctx.kernel(
        &KernelDesc::new(&SHADER, entry),
        &args,
        grid_1d(threads, WG),
    )
}

/// `[rows, cols]` of `x` for a scale of `s.numel()` columns.
fn rows_cols(x: &Tensor, s: &Tensor) -> Result<(usize, usize)> {
    let cols = s.numel();
    if cols == 0 || !x.numel().is_multiple_of(cols) {
        return Err(Error::Shape {
            op: "scale_columns",
            message: format!("{:?} has no rows of {cols} columns", x.shape()),
        });
    }
    Ok((x.numel() / cols, cols))
}

/// `y = x · s` per column.
fn scale_forward(ctx: &GpuContext, x: &Tensor, s: &Tensor, y: &Tensor) -> Result<Kernel> {
    let shape = rows_cols(x, s)?;
    let args = vec![("x", x.arg()), ("s", s.arg()), ("y", y.arg())];
    launch(ctx, "scale_columns", shape, x.numel(), args)
}

/// `ds += Σ_rows dy · x`, and `dx = dy · s` when asked for.
fn scale_backward(
    ctx: &GpuContext,
    (x, s, dy): (&Tensor, &Tensor, &Tensor),
    ds: &Tensor,
    dx: Option<&Tensor>,
) -> Result<Vec<Kernel>> {
    let shape = rows_cols(x, s)?;
    let args = vec![("x", x.arg()), ("dy", dy.arg()), ("ds", ds.arg())];
    let mut kernels = vec![launch(ctx, "scale_grad", shape, shape.1, args)?];
    if let Some(dx) = dx {
        let args = vec![("x", dy.arg()), ("s", s.arg()), ("y", dx.arg())];
        kernels.push(launch(ctx, "scale_columns", shape, x.numel(), args)?);
    }
    Ok(kernels)
}

// ---- the layer on it ------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct ColumnScaleConfig {}

impl LayerConfig for ColumnScaleConfig {
    fn kind(&self) -> &'static str {
        "column_scale"
    }
    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let features = *input
            .last()
            .ok_or("column_scale needs a 1-D input or more")?;
        Ok(Resolved::new(ColumnScale { features }, input.to_vec()))
    }
}

#[derive(Debug)]
struct ColumnScale {
    features: usize,
}

impl Layer for ColumnScale {
    fn kind(&self) -> &'static str {
        "column_scale"
    }
    fn repr(&self) -> String {
        format!("ColumnScale({})", self.features)
    }
    fn op(&self) -> Op {
        Op::new("Mul", CastRule::Input)
    }
    fn parameters(&self) -> Vec<ParamDef> {
        vec![ParamDef::new("weight", vec![self.features], Init::Ones)]
    }
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let s = f.param("weight")?;
        let y = f.activation(&x.shape()[1..]);
        f.push(scale_forward(f.ctx(), &x, &s, &y)?);
        Ok((y, Box::new(ColumnScaleBackward { x, s })))
    }
}

struct ColumnScaleBackward {
    x: Tensor,
    s: Tensor,
}

impl Backward for ColumnScaleBackward {
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let ds = b.param_grad("weight")?;
        let dx = b
            .wants_input_grad()
            .then(|| b.input_grad(&self.x))
            .transpose()?;
        for k in scale_backward(b.ctx(), (&self.x, &self.s, &dy), &ds, dx.as_ref())? {
            b.push(k);
        }
        Ok(dx)
    }
}

// ---- the tests --------------------------------------------------------------------------

#[test]
fn every_variant_of_the_declared_shader_validates_and_translates() {
    let variants = SHADER.variants().expect("variants");
    // 4 storages of the activations, the scale in theirs or f32 (f32 once).
    assert_eq!(variants.len(), 7);
    for v in &variants {
        let (failures, _) = check_variant(v);
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }
}

/// Forward and backward on every dtype, native and packed f16: the products of values that
/// are exact in the dtype are exact in f32, so y is the dtype's rounding of the f32 product
/// bit for bit; ds sums in f32 in row order.
#[test]
fn the_op_matches_a_cpu_reference_on_every_storage() {
    let (rows, cols) = (5, 7);
    for (name, ctx) in [("native", ctx_native()), ("packed", ctx_packed())] {
        for dtype in DType::ALL {
            let round = |v: &[f32]| v.iter().map(|&x| dtype.round(x)).collect::<Vec<_>>();
            let (x, s, dy) = (
                round(&rand_vec(rows * cols, 1)),
                round(&rand_vec(cols, 2)),
                round(&rand_vec(rows * cols, 3)),
            );
            let ds0 = rand_vec(cols, 4);
            let upload = |v: &[f32], shape: &[usize], dt| Tensor::from_f32(ctx, v, shape, dt);
            let tx = upload(&x, &[rows, cols], dtype).unwrap();
            let ts = upload(&s, &[cols], dtype).unwrap();
            let tdy = upload(&dy, &[rows, cols], dtype).unwrap();
            let tds = upload(&ds0, &[cols], DType::F32).unwrap();
            let ty = Tensor::zeros(ctx, &[rows, cols], dtype);
            let tdx = Tensor::zeros(ctx, &[rows, cols], dtype);
            let mut kernels = vec![scale_forward(ctx, &tx, &ts, &ty).unwrap()];
            kernels.extend(scale_backward(ctx, (&tx, &ts, &tdy), &tds, Some(&tdx)).unwrap());
            ctx.run(&kernels.iter().collect::<Vec<_>>());

            let scaled = |v: &[f32]| -> Vec<f32> {
                let products: Vec<f32> =
                    v.iter().enumerate().map(|(i, a)| a * s[i % cols]).collect();
                round(&products)
            };
            let what = format!("{name} {dtype}");
            let y = ty.read_f32(ctx).unwrap();
            assert_close(&format!("{what} y"), &y, &scaled(&x), 0.0, 0.0);
            let dx = tdx.read_f32(ctx).unwrap();
            assert_close(&format!("{what} dx"), &dx, &scaled(&dy), 0.0, 0.0);
            let want_ds: Vec<f32> = (0..cols)
                .map(|c| {
                    ds0[c]
                        + (0..rows)
                            .map(|r| dy[r * cols + c] * x[r * cols + c])
                            .sum::<f32>()
                })
                .collect();
            let ds = tds.read_f32(ctx).unwrap();
            assert_close(&format!("{what} ds"), &ds, &want_ds, 1e-6, 1e-5);
        }
    }
}

#[test]
fn shapes_that_do_not_fit_are_errors_not_panics() {
    let ctx = ctx();
    let x = Tensor::zeros(ctx, &[3, 5], DType::F32);
    let s = Tensor::zeros(ctx, &[4], DType::F32);
    let err = scale_forward(ctx, &x, &s, &x).err().expect("a shape error");
    assert!(err.to_string().contains("no rows of 4 columns"), "{err}");
}

fn trainer(spec: ModelSpec, init: &[(String, Vec<f32>)]) -> Trainer {
    let config = StepConfig::new(Precision::F32, LossKind::Mse, OptimizerConfig::sgd(0.1))
        .scaler_enabled(false);
    Trainer::new(ctx(), spec, config, 3, init).unwrap()
}

/// A model `Linear(5, 3) → ColumnScale(3)` against the same Linear alone: the forward is the
/// plain output times the scale, and every gradient (the scale's, and the Linear's through
/// the layer's input gradient) is the CPU's from the plain output.
#[test]
fn a_layer_on_the_custom_op_trains_in_a_model() {
    let ctx = ctx();
    let plain = ModelSpec::sequential(&[5]).linear(3).build().unwrap();
    let scaled = ModelSpec::sequential(&[5])
        .linear(3)
        .layer(ColumnScaleConfig {})
        .build()
        .unwrap();
    assert!(scaled.summary().contains("(1): ColumnScale(3)"));
    let s = [2.0f32, -1.0, 0.5];
    let mut init = plain.init_params(7);
    let mut a = trainer(plain, &init);
    init.push(("1.weight".to_string(), s.to_vec()));
    let mut b = trainer(scaled, &init);

    let n = 4;
    let x = rand_vec(n * 5, 1);
    let p = predict(ctx, &mut a, n, &x[..]).unwrap();
    let y = predict(ctx, &mut b, n, &x[..]).unwrap();
    let want: Vec<f32> = p.iter().enumerate().map(|(i, v)| v * s[i % 3]).collect();
    assert_close("forward", &y, &want, 0.0, 0.0);

    // MSE against zero targets: L = mean((p·s)²) over N = 3n outputs, so with
    // g = dL/dy = 2·y/N: ds_j = Σ_r g·p, and the Linear sees dp = g·s.
    let zeros = vec![0.0f32; n * 3];
    b.train_batch(ctx, n, &x[..], BatchTargets::Values(&zeros))
        .unwrap();
    b.finish(ctx).unwrap();
    let grads = b.store.download_grads(ctx).unwrap();
    let grad = |name: &str| grads.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let big_n = (n * 3) as f32;
    let g: Vec<f32> = y.iter().map(|v| 2.0 * v / big_n).collect();
    let dp: Vec<f32> = g.iter().enumerate().map(|(i, v)| v * s[i % 3]).collect();
    let ds: Vec<f32> = (0..3)
        .map(|j| (0..n).map(|r| g[r * 3 + j] * p[r * 3 + j]).sum())
        .collect();
    let dw: Vec<f32> = (0..15)
        .map(|e| (0..n).map(|r| dp[r * 3 + e / 5] * x[r * 5 + e % 5]).sum())
        .collect();
    let db: Vec<f32> = (0..3)
        .map(|j| (0..n).map(|r| dp[r * 3 + j]).sum())
        .collect();
    assert_close("1.weight grad", &grad("1.weight"), &ds, 1e-6, 1e-5);
    assert_close("0.weight grad", &grad("0.weight"), &dw, 1e-6, 1e-5);
    assert_close("0.bias grad", &grad("0.bias"), &db, 1e-6, 1e-5);
}
