//! A layer written outside the crate: the `Layer` trait is the whole contract. `Double`
//! (`y = 2x`, built on an existing op) joins a model through `SequentialBuilder::layer`
//! without touching the network, the precision map, checkpoints or the optimizer; its
//! forward and backward run like the built-in layers'.

mod common;

use common::{ctx, rand_vec};
use serde::Deserialize;
use webgpu_amp::amp::policy::{CastRule, Op, Precision};
use webgpu_amp::nn::layers::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Resolved};
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::ops::elementwise;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::evaluate::predict;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};
use webgpu_amp::{Result, Tensor};

#[derive(Debug, Deserialize)]
struct DoubleConfig {}

impl LayerConfig for DoubleConfig {
    fn kind(&self) -> &'static str {
        "double"
    }
    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        Ok(Resolved::new(Double, input.to_vec()))
    }
}

#[derive(Debug)]
struct Double;

impl Layer for Double {
    fn kind(&self) -> &'static str {
        "double"
    }
    fn repr(&self) -> String {
        "Double()".into()
    }
    fn op(&self) -> Op {
        Op::new("Double", CastRule::Input)
    }
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let y = f.activation(&x.shape()[1..]);
        f.push(elementwise::scale(f.ctx(), &x, 2.0, &y)?);
        Ok((y, Box::new(DoubleBackward { x })))
    }
}

struct DoubleBackward {
    x: Tensor,
}

impl Backward for DoubleBackward {
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dx = b.input_grad(&self.x)?;
        b.push(elementwise::scale(b.ctx(), &dy, 2.0, &dx)?);
        Ok(Some(dx))
    }
}

fn trainer(spec: ModelSpec, init: &[(String, Vec<f32>)]) -> Trainer {
    let config = StepConfig::new(Precision::F32, LossKind::Mse, OptimizerConfig::sgd(0.1))
        .scaler_enabled(false);
    Trainer::new(ctx(), spec, config, 3, init).unwrap()
}

#[test]
fn a_layer_from_outside_the_crate_trains() {
    let ctx = ctx();
    let plain = ModelSpec::sequential(&[5]).linear(3).build().unwrap();
    let doubled = ModelSpec::sequential(&[5])
        .linear(3)
        .layer(DoubleConfig {})
        .build()
        .unwrap();
    assert!(doubled.summary().contains("(1): Double()"));
    // The same parameters (`0.weight`, `0.bias`) and values for both.
    let init = plain.init_params(7);
    assert_eq!(doubled.parameters().len(), 2);
    let (mut a, mut b) = (trainer(plain, &init), trainer(doubled, &init));

    // Forward: twice the plain model's output.
    let n = 4;
    let x = rand_vec(n * 5, 1);
    let ya = predict(ctx, &mut a, n, &x[..]).unwrap();
    let yb = predict(ctx, &mut b, n, &x[..]).unwrap();
    for (p, d) in ya.iter().zip(&yb) {
        assert_eq!(2.0 * p, *d);
    }

    // Backward: with zero targets the loss is mean((2y)²) = 4·mean(y²), so every gradient is
    // four times the plain model's (the input gradient went through DoubleBackward).
    let zeros = vec![0.0f32; n * 3];
    for t in [&mut a, &mut b] {
        t.train_batch(ctx, n, &x[..], BatchTargets::Values(&zeros))
            .unwrap();
        t.finish(ctx).unwrap();
    }
    let (ga, gb) = (
        a.store.download_grads(ctx).unwrap(),
        b.store.download_grads(ctx).unwrap(),
    );
    for ((name, va), (_, vb)) in ga.iter().zip(&gb) {
        for (p, d) in va.iter().zip(vb) {
            let want = 4.0 * p;
            assert!(
                (d - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "{name}: got {d}, want {want}"
            );
        }
    }
}
