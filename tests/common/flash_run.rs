//! One run of the fused attention (`ops::flash_attention`) forward and backward on the GPU,
//! and its check against the f64 reference ([`super::attention_ref`]), shared by
//! tests/flash_attention.rs (the SIMT bodies on every storage) and
//! tests/flash_attention_coop.rs (the tensor-core body).

use super::attention_ref::{self, Dims, Drop};
use super::rand_vec;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::nn::{AttentionKernel, LossKind, ModelSpec};
use webgpu_amp::ops::dropout::{DropoutKey, DropoutState};
use webgpu_amp::ops::flash_attention::{
    FlashBody, FlashCoopConfig, FlashParams, Qkv, backward, backward_qkv, forward, forward_qkv,
};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{BatchTargets, DropoutStream, StepConfig, Trainer};
use webgpu_amp::{DType, GpuContext, Tensor};

/// Unit roundoff of a storage dtype.
pub fn unit(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        _ => 2f64.powi(-24),
    }
}

/// The spacing of a dtype's subnormals: the absolute rounding error of tiny outputs.
pub fn subnormal(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-24),
        _ => 2f64.powi(-149),
    }
}

/// Values of `dtype` in [-amp, amp).
pub fn values(n: usize, seed: u64, amp: f32, dtype: DType) -> Vec<f32> {
    rand_vec(n, seed)
        .iter()
        .map(|v| dtype.round(v * amp))
        .collect()
}

/// One run's inputs and settings.
pub struct Run<'a> {
    pub ctx: &'a GpuContext,
    pub dtype: DType,
    pub dims: Dims,
    pub drop: Option<Drop>,
    pub training: bool,
    pub body: FlashBody,
    /// The tensor-core body's configuration (None: the adapter's).
    pub coop: Option<FlashCoopConfig>,
}

/// What a run gives back, as f32 read from the tensors.
pub struct Outputs {
    pub y: Vec<f32>,
    pub lse: Vec<f32>,
    pub dqkv: Vec<f32>,
}

impl Run<'_> {
    pub fn drop_ref(&self) -> Option<Drop> {
        self.drop.filter(|_| self.training)
    }

    /// Forward, then backward from `dy`, on the GPU, of packed projections `qkv` (laid out
    /// as [`Dims::at`] says).
    pub fn run(&self, qkv: &[f32], dy: &[f32]) -> Outputs {
        self.run_with(qkv, dy, false)
    }

    /// [`Run::run`], with q, k and v (and their gradients) in tensors of their own where
    /// `separate`; dqkv comes back packed either way.
    pub fn run_with(&self, qkv: &[f32], dy: &[f32], separate: bool) -> Outputs {
        let (ctx, d) = (self.ctx, self.dims);
        let (c, rows) = (d.c(), d.b * d.nh * d.t);
        let y = Tensor::zeros(ctx, &[d.b, d.t, c], self.dtype);
        let lse = Tensor::zeros(ctx, &[rows], DType::F32);
        let dy_t = Tensor::from_f32(ctx, dy, &[d.b, d.t, c], self.dtype).unwrap();
        let delta = Tensor::zeros(ctx, &[rows], DType::F32);
        let state = DropoutState::new(ctx);
        let key = self.drop.map(|dr| DropoutKey {
            p: dr.p,
            layer: dr.layer,
        });
        if let Some(dr) = self.drop {
            state.write(ctx, dr.seed, dr.counter, self.training);
        }
        let params = FlashParams {
            batch: d.b,
            heads: d.nh,
            kv_heads: Some(d.kv),
            t: d.t,
            width: c,
            scale: d.scale() as f32,
            dropout: key,
            dropout_state: key.map(|_| &state),
            body: self.body,
            coop: self.coop,
        };
        let dqkv = if separate {
            // Each of q, k, v: its columns of the packed rows.
            let parts = [(0, d.nh), (d.nh, d.kv), (d.nh + d.kv, d.kv)].map(|(from, heads)| {
                let cols = from * d.hs..(from + heads) * d.hs;
                let host: Vec<f32> = qkv
                    .chunks(d.row())
                    .flat_map(|r| r[cols.clone()].to_vec())
                    .collect();
                let shape = [d.b, d.t, heads * d.hs];
                let t = Tensor::from_f32(ctx, &host, &shape, self.dtype).unwrap();
                (t, Tensor::zeros(ctx, &shape, self.dtype), cols)
            });
            let [(q, dq, _), (k, dk, _), (v, dv, _)] = &parts;
            let inputs = Qkv::separate((q, k, v), d.nh, d.kv, d.hs);
            let grads = inputs.like((dq, dk, dv));
            let mut kernels = vec![forward_qkv(ctx, inputs, &y, &lse, &params).unwrap()];
            let both = (&dy_t, &delta);
            kernels.extend(backward_qkv(ctx, inputs, &y, &lse, both, grads, &params).unwrap());
            ctx.run(&kernels.iter().collect::<Vec<_>>());
            let mut packed = vec![0.0; qkv.len()];
            for (_, grad, cols) in &parts {
                let g = grad.read_f32(ctx).unwrap();
                for (row, src) in packed.chunks_mut(d.row()).zip(g.chunks(cols.len())) {
                    row[cols.clone()].copy_from_slice(src);
                }
            }
            packed
        } else {
            let shape = [d.b, d.t, d.row()];
            let qkv_t = Tensor::from_f32(ctx, qkv, &shape, self.dtype).unwrap();
            let dqkv = Tensor::zeros(ctx, &shape, self.dtype);
            let mut kernels = vec![forward(ctx, &qkv_t, &y, &lse, &params).unwrap()];
            let bwd = backward(ctx, &qkv_t, &y, &lse, &dy_t, &delta, &dqkv, &params);
            kernels.extend(bwd.unwrap());
            ctx.run(&kernels.iter().collect::<Vec<_>>());
            dqkv.read_f32(ctx).unwrap()
        };
        Outputs {
            y: y.read_f32(ctx).unwrap(),
            lse: lse.read_f32(ctx).unwrap(),
            dqkv,
        }
    }
}

/// |got − want| ≤ tol(mag) for every element, with the element's index in the message.
#[track_caller]
pub fn check(what: &str, got: &[f32], want: &[f64], mag: &[f64], tol: impl Fn(f64, f64) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((&g, &w), &m)) in got.iter().zip(want).zip(mag).enumerate() {
        let err = (g as f64 - w).abs();
        let bound = tol(w, m);
        assert!(
            err <= bound,
            "{what}: element {i}: got {g}, want {w} (|err| {err:e} > {bound:e})"
        );
    }
}

/// Forward and backward of `run` against the f64 reference. Tolerances: the output's
/// rounding (one unit of its dtype) plus f32 arithmetic on the magnitude; the backward adds
/// the rounding of y (delta = rowsum(dy ⊙ y) reads the stored y) and of dy's terms.
pub fn against_reference(what: &str, run: &Run) {
    let d = run.dims;
    let c = d.c();
    let qkv = values(d.b * d.t * d.row(), 11 + d.t as u64, 1.5, run.dtype);
    let dy = values(d.b * d.t * c, 23 + d.hs as u64, 1.0, run.dtype);
    let out = run.run(&qkv, &dy);
    let (y, y_mag, lse) = attention_ref::forward(&d, &qkv, run.drop_ref());
    let (u, tiny) = (unit(run.dtype), subnormal(run.dtype));
    let f32_err = 64.0 * 2f64.powi(-24) * (d.t + d.hs) as f64;
    // The tensor-core body rounds P (and in the backward dS) to f16 on their way into a
    // product: one more f16 rounding of every term.
    let storage = run.ctx.storage_for(run.dtype);
    let coop = run
        .body
        .resolve_within(&run.ctx.caps, run.coop, &[storage], d.hs)
        == FlashBody::Coop;
    let terms = if coop { unit(DType::F16) } else { 0.0 };
    check(&format!("{what}: y"), &out.y, &y, &y_mag, |w, m| {
        u * w.abs() + (terms + f32_err) * m + tiny
    });
    let lse_mag = vec![1.0; lse.len()];
    check(&format!("{what}: lse"), &out.lse, &lse, &lse_mag, |w, _| {
        f32_err * (1.0 + w.abs())
    });
    let (g, g_mag) = attention_ref::backward(&d, &qkv, &dy, run.drop_ref());
    check(&format!("{what}: dqkv"), &out.dqkv, &g, &g_mag, |w, m| {
        u * w.abs() + (4.0 * u + terms + f32_err) * m + tiny
    });
}

pub fn dims(b: usize, nh: usize, t: usize, hs: usize) -> Dims {
    Dims {
        b,
        nh,
        kv: nh,
        t,
        hs,
    }
}

/// Grouped-query attention's sizes: `kv` key/value heads for `nh` query heads.
pub fn dims_gqa(b: usize, nh: usize, kv: usize, t: usize, hs: usize) -> Dims {
    Dims {
        kv,
        ..dims(b, nh, t, hs)
    }
}

pub const DROP: Drop = Drop {
    p: 0.25,
    layer: 7,
    seed: 1234,
    counter: 5,
};

/// One training step of a two-layer GPT with attention dropout 0.5; loss and gradients.
pub fn gpt_step(
    ctx: &GpuContext,
    precision: Precision,
    kernel: AttentionKernel,
) -> (f32, Vec<f32>, u64) {
    let spec = ModelSpec::from_json(
        r#"{"gpt": {"vocab_size": 11, "block_size": 19, "n_layer": 2, "n_head": 2,
             "n_embd": 16, "dropout": 0.5, "bias": false}}"#,
    )
    .unwrap()
    .with_attention(kernel);
    let init = spec.init_params(4);
    let config = StepConfig {
        precision,
        loss: LossKind::CrossEntropy,
        optimizer: OptimizerConfig::sgd(0.0),
        scaler: ScalerConfig {
            enabled: false,
            ..Default::default()
        },
        clip_grad_norm: None,
        label_smoothing: 0.0,
        grad_accum: 1,
        buffers_on_skip: Default::default(),
        lr_schedule: Default::default(),
        numerics: None,
        numerics_histograms: false,
        numerics_one_pass_each: false,
    };
    ctx.allocator.reset_peak();
    let before = ctx.memory().live_bytes;
    let mut trainer = Trainer::new(ctx, spec, config, 11, &init).unwrap();
    trainer.dropout = DropoutStream {
        seed: 77,
        counter: 3,
    };
    let batch = 3;
    let tokens: Vec<u32> = (0..batch * 19).map(|i| ((i * 7 + 2) % 11) as u32).collect();
    let labels: Vec<u32> = (0..batch * 19).map(|i| ((i * 5 + 1) % 11) as u32).collect();
    trainer
        .train_batch(ctx, batch, &tokens, BatchTargets::Classes(&labels))
        .unwrap();
    let loss = trainer.finish(ctx).unwrap()[0].loss;
    let grads = trainer.store.download_grads(ctx).unwrap();
    let peak = ctx.memory().peak_bytes - before;
    (loss, grads.into_iter().flat_map(|(_, g)| g).collect(), peak)
}
