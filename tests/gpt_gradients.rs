//! The transformer layers' backward passes against finite differences (f32), each through a
//! small network trained by the real planned step: token and position embedding, LayerNorm
//! with and without bias, causal attention fused and unfused (packed `[T, 3C]` from a Linear before it),
//! residual blocks, dropout with p = 0 and with p > 0 under a fixed mask, the `lm_head` tied
//! to the token embedding, exact GELU and its tanh approximation.
//!
//! For each network: one training step at a fixed dropout position writes every gradient;
//! then, for selected parameter values (in each tensor the one with the largest gradient and
//! one more), the loss is evaluated at `θ ± ε` by forward passes alone (the same planned
//! forward, in training mode with the same dropout masks), the cross-entropy computed on the
//! CPU in f64 from the logits, and the central difference compared with the backward's value.

mod common;

use common::{ctx, rand_vec};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::{AttentionKernel, LossKind, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::batch::write_batch;
use webgpu_amp::train::{BatchTargets, DropoutStream, StepConfig, Trainer};

const BATCH: usize = 2;
const T: usize = 4;
const VOCAB: usize = 7;
const EPS: f32 = 1e-3;
/// |backward − difference| ≤ ATOL + RTOL·|difference|: the difference of f32 losses (about
/// 1e-7 each, over 2ε) is good to a few 1e-5 here (measured: at most 2.8e-5).
const ATOL: f64 = 5e-5;
const RTOL: f64 = 5e-3;
const DROPOUT_SEED: u64 = 99;

fn step_config() -> StepConfig {
    StepConfig::new(
        Precision::F32,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.01),
    )
    .scaler_enabled(false)
}

/// Parameters with gradients well away from 0: U(-0.5, 0.5), LayerNorm weights 1 ± 0.3.
fn params(spec: &ModelSpec, seed: u64) -> Vec<(String, Vec<f32>)> {
    spec.parameters()
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let n = p.numel();
            let r = rand_vec(n, seed * 1000 + i as u64);
            let values = if p.name.contains("ln") && p.name.ends_with("weight") {
                r.iter().map(|v| 1.0 + 0.3 * v).collect()
            } else {
                r.iter().map(|v| 0.5 * v).collect()
            };
            (p.name, values)
        })
        .collect()
}

/// Mean cross-entropy over the rows of `logits` ([rows, VOCAB]) in f64.
fn cross_entropy(logits: &[f32], labels: &[u32]) -> f64 {
    let rows: Vec<&[f32]> = logits.chunks_exact(VOCAB).collect();
    assert_eq!(rows.len(), labels.len());
    let total: f64 = rows
        .iter()
        .zip(labels)
        .map(|(row, &l)| {
            let m = row.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
            let lse = m + row.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
            lse - row[l as usize] as f64
        })
        .sum();
    total / labels.len() as f64
}

/// Checks the backward of `spec` (a model of `[T]` token ids with `[T, VOCAB]` logits)
/// against finite differences at two values of every parameter tensor.
fn check(what: &str, spec: ModelSpec) {
    let ctx = ctx();
    let init = params(&spec, 3);
    let tied = spec.tied_parameters();
    let mut trainer = Trainer::new(ctx, spec, step_config(), VOCAB, &init).unwrap();
    let tokens: Vec<u32> = (0..BATCH * T)
        .map(|i| ((i * 5 + 3) % VOCAB) as u32)
        .collect();
    let labels: Vec<u32> = (0..BATCH * T)
        .map(|i| ((i * 3 + 1) % VOCAB) as u32)
        .collect();
    trainer.dropout = DropoutStream {
        seed: DROPOUT_SEED,
        counter: 0,
    };
    trainer
        .train_batch(ctx, BATCH, &tokens, BatchTargets::Classes(&labels))
        .unwrap();
    let stats = trainer.finish(ctx).unwrap();
    let grads = trainer.store.download_grads(ctx).unwrap();

    // The loss at given parameters: the planned forward in training mode with the masks the
    // step used (micro-batch 0 of DROPOUT_SEED), the cross-entropy on the CPU.
    let loss_at = |trainer: &mut Trainer, p: &[(String, Vec<f32>)]| -> f64 {
        trainer.store.upload(ctx, p).unwrap();
        let net = trainer.network(ctx, BATCH).unwrap();
        write_batch(ctx, net, &tokens, &BatchTargets::Classes(&labels)).unwrap();
        net.set_dropout(ctx, DROPOUT_SEED, 0, true);
        let kernels: Vec<_> = net.forward_kernels().collect();
        ctx.run(&kernels);
        cross_entropy(&net.output.read_f32(ctx).unwrap(), &labels)
    };
    let at_init = loss_at(&mut trainer, &init);
    assert!(
        (at_init - stats[0].loss as f64).abs() < 1e-5,
        "{what}: the forward alone gives loss {at_init}, the step {}",
        stats[0].loss
    );

    assert_eq!(
        grads.len(),
        init.len(),
        "{what}: one gradient per parameter"
    );
    // The largest |backward − difference| relative to the tolerance, for the log.
    let mut worst = (0.0f64, String::new());
    for (p, (name, g)) in grads.iter().enumerate() {
        assert_eq!(init[p].0, *name);
        let largest = (0..g.len())
            .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
            .unwrap();
        assert!(
            (g[largest] as f64).abs() > 10.0 * ATOL,
            "{what}: {name}'s largest gradient {} is too small to check",
            g[largest]
        );
        for index in [largest, (largest + g.len() / 2 + 1) % g.len()] {
            let mut plus = init.clone();
            plus[p].1[index] += EPS;
            let mut minus = init.clone();
            minus[p].1[index] -= EPS;
            let numeric =
                (loss_at(&mut trainer, &plus) - loss_at(&mut trainer, &minus)) / (2.0 * EPS as f64);
            let backward = g[index] as f64;
            let used = (backward - numeric).abs() / (ATOL + RTOL * numeric.abs());
            if used > worst.0 {
                worst = (used, format!("{name}[{index}]: {backward} vs {numeric}"));
            }
            assert!(
                (backward - numeric).abs() <= ATOL + RTOL * numeric.abs(),
                "{what}: {name}[{index}]: backward {backward} vs finite difference {numeric}"
            );
        }
    }
    eprintln!(
        "{what}: {} values checked; closest to the tolerance: {} ({:.0}% of it)",
        2 * grads.len(),
        worst.1,
        100.0 * worst.0
    );
    // The tied weight appears once, and gets the gradient of both uses.
    for (alias, owner) in tied {
        assert!(grads.iter().any(|(n, _)| *n == owner), "{what}: {owner}");
        assert!(!grads.iter().any(|(n, _)| *n == alias), "{what}: {alias}");
    }
}

fn json(layers: &str) -> ModelSpec {
    ModelSpec::from_json(&format!(r#"{{"input": [{T}], "layers": [{layers}]}}"#)).unwrap()
}

#[test]
fn embedding_layernorm_with_bias_and_gelu_tanh_match_finite_differences() {
    let spec = json(&format!(
        r#"{{"embedding": {{"vocab": {VOCAB}, "dim": 6, "positions": {T}}}}},
           {{"layernorm": {{"bias": true}}}}, {{"gelu_tanh": {{}}}},
           {{"linear": {{"out": {VOCAB}}}}}"#
    ));
    check("embedding+layernorm+gelu_tanh", spec);
}

#[test]
fn attention_after_a_linear_and_layernorm_without_bias_match_finite_differences() {
    // [T, C] → Linear → [T, 3C] → causal attention (2 heads of 3) → [T, C].
    let spec = json(&format!(
        r#"{{"embedding": {{"vocab": {VOCAB}, "dim": 6, "positions": {T}}}}},
           {{"linear": {{"out": 18}}}}, {{"attention": {{"heads": 2}}}},
           {{"layernorm": {{"bias": false}}}}, {{"gelu": {{}}}},
           {{"linear": {{"out": {VOCAB}}}}}"#
    ));
    for kernel in [AttentionKernel::Fused, AttentionKernel::Unfused] {
        let what = format!(
            "linear+attention ({})+layernorm(no bias)+gelu",
            kernel.name()
        );
        check(&what, spec.clone().with_attention(kernel));
    }
}

#[test]
fn residual_blocks_and_dropout_p0_match_finite_differences() {
    let spec = json(&format!(
        r#"{{"embedding": {{"vocab": {VOCAB}, "dim": 6, "positions": {T}}}}},
           {{"residual": {{"layers": [{{"layernorm": {{}}}}, {{"linear": {{"out": 12}}}},
               {{"gelu": {{}}}}, {{"linear": {{"out": 6}}}}, {{"dropout": {{"p": 0.0}}}}]}}}},
           {{"dropout": {{"p": 0.0}}}},
           {{"linear": {{"out": {VOCAB}}}}}"#
    ));
    check("residual+dropout(0)", spec);
}

/// The Linear opening the residual recomputes the SiLU output it reads and makes the SiLU's
/// input gradient from its own input gradient in the same kernel; but that is only the
/// branch's share (the skip path adds after), so the SiLU must not take it and makes its own.
#[test]
fn an_activation_read_by_a_residual_branch_makes_its_own_input_gradient() {
    let spec = json(&format!(
        r#"{{"embedding": {{"vocab": {VOCAB}, "dim": 6, "positions": {T}}}}},
           {{"linear": {{"out": 6}}}}, {{"silu": {{}}}},
           {{"residual": {{"layers": [{{"linear": {{"out": 6}}}}]}}}},
           {{"linear": {{"out": {VOCAB}}}}}"#
    ));
    check("silu read by a residual branch's linear", spec);
}

#[test]
fn dropout_with_a_fixed_mask_matches_finite_differences() {
    // In training mode the gradient through dropout is the upstream gradient times the
    // step's mask over (1 − p): the differences, taken with the same masks, must agree, and
    // the masks must drop something (the loss differs from the one without them).
    let layers = |p: f32| {
        json(&format!(
            r#"{{"embedding": {{"vocab": {VOCAB}, "dim": 6, "positions": {T}}}}},
               {{"dropout": {{"p": {p}}}}}, {{"linear": {{"out": 12}}}}, {{"gelu": {{}}}},
               {{"dropout": {{"p": {p}}}}}, {{"linear": {{"out": {VOCAB}}}}}"#
        ))
    };
    check("dropout(0.4) with a fixed mask", layers(0.4));
    let loss = |spec: ModelSpec| {
        let ctx = ctx();
        let init = params(&spec, 3);
        let mut t = Trainer::new(ctx, spec, step_config(), VOCAB, &init).unwrap();
        t.dropout.seed = DROPOUT_SEED;
        let tokens: Vec<u32> = (0..BATCH * T).map(|i| (i % VOCAB) as u32).collect();
        let labels = vec![1u32; BATCH * T];
        t.train_batch(ctx, BATCH, &tokens, BatchTargets::Classes(&labels))
            .unwrap();
        t.finish(ctx).unwrap()[0].loss
    };
    assert_ne!(
        loss(layers(0.4)),
        loss(layers(0.0)),
        "dropout(0.4) dropped nothing"
    );
}

#[test]
fn gpt_with_tied_lm_head_matches_finite_differences() {
    // A whole GPT: embeddings, two pre-norm blocks (LayerNorm with bias, attention, GELU MLP,
    // residuals), ln_f and lm_head tied to transformer.wte.weight, whose gradient is the
    // embedding's plus lm_head's.
    let spec = ModelSpec::from_json(&format!(
        r#"{{"gpt": {{"vocab_size": {VOCAB}, "block_size": {T}, "n_layer": 2, "n_head": 2,
             "n_embd": 4, "dropout": 0.0, "bias": true}}}}"#
    ))
    .unwrap();
    assert_eq!(
        spec.tied_parameters(),
        [(
            "lm_head.weight".to_string(),
            "transformer.wte.weight".to_string()
        )]
    );
    check("gpt (tied lm_head)", spec);
}

#[test]
fn gpt_with_dropout_in_training_matches_finite_differences() {
    // Dropout 0.3 everywhere nanoGPT has it (embeddings, attention weights, both residual
    // branches), GELU's tanh form, no biases.
    let spec = ModelSpec::from_json(&format!(
        r#"{{"gpt": {{"vocab_size": {VOCAB}, "block_size": {T}, "n_layer": 1, "n_head": 2,
             "n_embd": 4, "dropout": 0.3, "bias": false, "activation": "gelu_tanh"}}}}"#
    ))
    .unwrap();
    for kernel in [AttentionKernel::Fused, AttentionKernel::Unfused] {
        let what = format!("gpt (dropout 0.3, gelu_tanh, {} attention)", kernel.name());
        check(&what, spec.clone().with_attention(kernel));
    }
}

/// A fork: one tensor (the first Linear's output) feeds three branches, two joined by a
/// product and that joined with the third by a sum, so its gradient is the sum of three
/// contributions (two Linears and a LayerNorm, which may add onto the others' in its own
/// kernel), summed where every fork's are (`nn/layers/tape.rs`).
#[test]
fn a_fork_joined_by_product_and_sum_matches_finite_differences() {
    let spec = json(&format!(
        r#"{{"embedding": {{"vocab": {VOCAB}, "dim": 6, "positions": {T}}}}},
           {{"linear": {{"out": 6}}}},
           {{"fork": {{"join": "sum", "branches": [
               [{{"fork": {{"join": "product", "branches": [
                   [{{"linear": {{"out": 5}}}}, {{"silu": {{}}}}],
                   [{{"linear": {{"out": 5}}}}]]}}}}],
               [{{"layernorm": {{}}}}, {{"linear": {{"out": 5}}}}]]}}}},
           {{"linear": {{"out": {VOCAB}}}}}"#
    ));
    check("fork (product, sum)", spec);
}

/// A concat join with an identity branch, and a residual whose shortcut is a projection
/// (a Linear to the branch's width, as a ResNet block's 1×1 convolution).
#[test]
fn a_concat_fork_and_a_projection_shortcut_match_finite_differences() {
    let spec = json(&format!(
        r#"{{"embedding": {{"vocab": {VOCAB}, "dim": 6, "positions": {T}}}}},
           {{"residual": {{"layers": [{{"linear": {{"out": 8}}}}, {{"relu": {{}}}},
               {{"linear": {{"out": 5}}}}], "shortcut": [{{"linear": {{"out": 5}}}}]}}}},
           {{"fork": {{"join": "concat", "branches": [
               [{{"linear": {{"out": 3}}}}], [], [{{"layernorm": {{}}}}]]}}}},
           {{"linear": {{"out": {VOCAB}}}}}"#
    ));
    assert_eq!(spec.output_shape(), [T, VOCAB]);
    check("residual with a projection, concat fork", spec);
}

/// q, k and v as three Linears of one input, concatenated into the packed layout the
/// attention reads (a Llama block's fork, before its own attention layout).
#[test]
fn a_qkv_fork_into_attention_matches_finite_differences() {
    let spec = json(&format!(
        r#"{{"embedding": {{"vocab": {VOCAB}, "dim": 6, "positions": {T}}}}},
           {{"fork": {{"join": "concat", "branches": [
               [{{"linear": {{"out": 6, "bias": false}}}}],
               [{{"linear": {{"out": 6, "bias": false}}}}],
               [{{"linear": {{"out": 6, "bias": false}}}}]]}}}},
           {{"attention": {{"heads": 2}}}},
           {{"linear": {{"out": {VOCAB}}}}}"#
    ));
    check("q/k/v fork into attention", spec);
}
