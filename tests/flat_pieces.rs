//! Flat parameter buffers bound in pieces (`GpuContext::flat_pieces`): a model whose flat
//! f32 buffers pass the adapter's storage binding limit (SmolLM2-135M: 538 MB each against
//! 128 MiB) runs its unscale, clipping norm, optimizer step, weight cast and rounding one
//! piece at a time. Here a tiny model runs on a context whose binding limit is forced down
//! (`GpuContext::with_binding_limit`) until its flat buffers take several pieces: every
//! kernel made on that context binds within the limit (kernel creation refuses any binding
//! over it), and losses, skips, master weights, the compute copy and the optimizer state are
//! the same bits as the one-piece run's, step by step.

mod common;

use webgpu_amp::GpuContext;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::amp::scaler::ScalerConfig;
use webgpu_amp::nn::{LossKind, preset};
use webgpu_amp::optim::{OptimizerConfig, OptimizerState};
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

const VOCAB: usize = 65;
const BATCH: usize = 2;

/// What a run leaves: per step (loss bits, skipped), the master weights' bytes, the compute
/// copy's bytes (if any), the optimizer state, and the pieces its step was made in.
struct Outcome {
    steps: Vec<(u32, bool)>,
    master: Vec<u8>,
    low: Option<Vec<u8>>,
    state: OptimizerState,
    optimizer_pieces: usize,
}

/// `steps` steps of gpt-tiny (nanoGPT's recipe: AdamW with decay groups, clipping at 1.0)
/// under `precision`, from a scale high enough that the first step overflows in f16.
fn run(ctx: &GpuContext, precision: Precision, steps: u64) -> Outcome {
    let spec = preset("gpt-tiny", &[16], VOCAB).unwrap();
    let init = spec.init_params(3);
    let scaler = ScalerConfig {
        init_scale: 2f32.powi(22),
        ..ScalerConfig::default()
    };
    let config = StepConfig::new(
        precision,
        LossKind::CrossEntropy,
        OptimizerConfig::adamw(1e-3),
    )
    .scaler(scaler)
    .clip_grad_norm(Some(1.0));
    let mut t = Trainer::new(ctx, spec.clone(), config, VOCAB, &init).unwrap();
    let mut out = Vec::new();
    for step in 0..steps {
        let tokens: Vec<u32> = (0..BATCH * 16)
            .map(|i| ((i as u64 * 7 + step * 13) % VOCAB as u64) as u32)
            .collect();
        t.train_batch(ctx, BATCH, &tokens, BatchTargets::Classes(&tokens))
            .unwrap();
        let stats = t.finish(ctx).unwrap();
        out.push((stats[0].loss.to_bits(), stats[0].skipped));
    }
    let total = 4 * t.store.layout.total as u64;
    let low = t.store.low_flat(ctx).unwrap().map(|low| {
        let bytes = low.storage().bytes_for(low.numel());
        ctx.read_bytes(low.buffer(), 0, bytes).unwrap()
    });
    Outcome {
        steps: out,
        master: ctx.read_bytes(&t.store.master, 0, total).unwrap(),
        low,
        state: t.optimizer.state(ctx).unwrap(),
        optimizer_pieces: t.optimizer.step_kernels().len(),
    }
}

#[test]
fn pieces_give_the_bits_of_one_piece() {
    let ctx = common::ctx();
    // gpt-tiny's largest tensor (an MLP's c_fc weight, 256 × 64 f32: 64 KiB) and the
    // activations of this batch fit 64 KiB; its flat buffers (~110k f32) take 7 pieces.
    let limit = 64 << 10;
    let pieced = ctx.with_binding_limit(limit);
    for precision in [Precision::AmpF16, Precision::F16, Precision::F32] {
        let whole = run(ctx, precision, 6);
        let split = run(&pieced, precision, 6);
        let what = format!("gpt-tiny {precision}");
        assert_eq!(
            whole.optimizer_pieces, 1,
            "{what}: one piece at the adapter's limit"
        );
        assert!(
            split.optimizer_pieces > 4,
            "{what}: {} pieces under {limit} bytes",
            split.optimizer_pieces
        );
        assert_eq!(split.steps, whole.steps, "{what}: losses and skips");
        assert!(
            whole.steps.iter().any(|s| !s.1),
            "{what}: no step applied: {:?}",
            whole.steps
        );
        if precision != Precision::F32 {
            assert!(
                whole.steps[0].1,
                "{what}: the first step should overflow and skip"
            );
        }
        assert!(
            split.master == whole.master,
            "{what}: master weights differ"
        );
        assert!(split.low == whole.low, "{what}: compute copies differ");
        assert_eq!(split.state, whole.state, "{what}: optimizer state");
        eprintln!(
            "{what}: {} pieces, steps {:?}: same bits",
            split.optimizer_pieces, split.steps
        );
    }
}

#[test]
fn a_parameter_over_the_binding_limit_is_refused_by_name() {
    // The first parameter over 32 KiB: a block's q, k, v projection (192 × 64 f32).
    let ctx = common::ctx().with_binding_limit(32 << 10);
    let spec = preset("gpt-tiny", &[16], VOCAB).unwrap();
    let config = StepConfig::new(
        Precision::AmpF16,
        LossKind::CrossEntropy,
        OptimizerConfig::adamw(1e-3),
    );
    let err = Trainer::new(&ctx, spec.clone(), config, VOCAB, &spec.init_params(0))
        .err()
        .expect("a model whose embedding passes the limit")
        .to_string();
    assert!(
        err.contains("attn.c_attn.weight") && err.contains("max_storage_buffer_binding_size"),
        "{err}"
    );
}
