//! Next-token sampling on the GPU against its CPU reference: argmax under top_k = 1, draw for
//! draw equality with `sample_reference` on every logits storage, a histogram of 2000 draws
//! (one submission) against the probabilities, ties at the top-k threshold, the context
//! window (append, shift when full), and parameter errors.

mod common;

use std::sync::Arc;

use common::values::upload_u32;
use common::{ctx, ctx_native, ctx_packed, rand_vec};
use webgpu_amp::gpu::GpuBuffer;
use webgpu_amp::ops::sample::{SampleParams, sample_next, sample_reference, sample_uniform};
use webgpu_amp::{DType, GpuContext, Tensor};

/// Logits storages under test: f32, native f16, bf16 and packed f16.
fn cases() -> Vec<(&'static str, &'static GpuContext, DType)> {
    vec![
        ("f32", ctx(), DType::F32),
        ("native", ctx_native(), DType::F16),
        ("native", ctx_native(), DType::BF16),
        ("packed", ctx_packed(), DType::F16),
    ]
}

fn read_u32s(ctx: &GpuContext, b: &GpuBuffer, n: usize) -> Vec<u32> {
    let bytes = ctx.read_bytes(b, 0, 4 * n as u64).unwrap();
    bytemuck::pod_collect_to_vec(&bytes[..4 * n])
}

/// A generation set-up: logits [block, V] (rounded to `dtype`), context, state, out.
struct Setup {
    logits: Tensor,
    rows: Vec<Vec<f32>>,
    context: Arc<GpuBuffer>,
    state: Arc<GpuBuffer>,
    out: Arc<GpuBuffer>,
}

fn setup(
    ctx: &GpuContext,
    rows: &[Vec<f32>],
    dtype: DType,
    context: &[u32],
    state: [u32; 2],
    out_len: usize,
) -> Setup {
    let vocab = rows[0].len();
    let rows: Vec<Vec<f32>> = rows
        .iter()
        .map(|r| r.iter().map(|&v| dtype.round(v)).collect())
        .collect();
    let flat: Vec<f32> = rows.concat();
    Setup {
        logits: Tensor::from_f32(ctx, &flat, &[rows.len(), vocab], dtype).unwrap(),
        rows,
        context: upload_u32(ctx, context),
        state: upload_u32(ctx, &state),
        out: upload_u32(ctx, &vec![u32::MAX; out_len]),
    }
}

/// A block of one f32 row of `logits`, the context `[0]` with no draws yet, room for `draws`.
fn one_row(ctx: &GpuContext, logits: &[f32], draws: usize) -> Setup {
    setup(ctx, &[logits.to_vec()], DType::F32, &[0], [1, 0], draws)
}

fn params(s: &Setup, temperature: f32, top_k: Option<usize>, seed: u64) -> SampleParams {
    SampleParams {
        vocab: s.rows[0].len(),
        block: s.rows.len(),
        temperature,
        top_k,
        seed,
    }
}

/// Plan one kernel and encode it `draws` times in one submission.
fn draw(ctx: &GpuContext, s: &Setup, p: &SampleParams, draws: usize) {
    let k = sample_next(ctx, &s.logits, &s.context, &s.state, &s.out, p).unwrap();
    ctx.run(&vec![&k; draws]);
}

/// What the context and the tokens become after `draws` draws, on the CPU.
fn simulate(
    s: &Setup,
    p: &SampleParams,
    context: &[u32],
    state: [u32; 2],
    draws: usize,
) -> (Vec<u32>, Vec<u32>, [u32; 2]) {
    let mut ctxv = context.to_vec();
    let (mut len, mut i) = (state[0] as usize, state[1]);
    let mut tokens = Vec::new();
    for _ in 0..draws {
        let row = &s.rows[len.clamp(1, p.block) - 1];
        let tok = sample_reference(row, p.temperature, p.top_k, p.seed, i as u64);
        if len < p.block {
            ctxv[len] = tok;
            len += 1;
        } else {
            ctxv.remove(0);
            ctxv.push(tok);
        }
        tokens.push(tok);
        i += 1;
    }
    (ctxv, tokens, [len as u32, i])
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (j, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = j;
        }
    }
    best as u32
}

#[test]
fn top_k_one_is_the_argmax() {
    // Distinct values (exact in every dtype) per row; V = 300 also makes threads own two
    // indices each.
    for (name, ctx, dtype) in cases() {
        for vocab in [100usize, 300] {
            if vocab == 300 && dtype != DType::F32 {
                continue; // 0.25 steps past 64 are not exact in bf16
            }
            let rows: Vec<Vec<f32>> = (0..3)
                .map(|r| {
                    (0..vocab)
                        .map(|j| ((j * 37 + r * 11) % vocab) as f32 * 0.25 - 12.0)
                        .collect()
                })
                .collect();
            let s = setup(ctx, &rows, dtype, &[9, 0, 0], [1, 0], 8);
            let p = params(&s, 0.7, Some(1), 5);
            draw(ctx, &s, &p, 6);
            let got = read_u32s(ctx, &s.out, 6);
            // Draw i reads row min(i + 1, 3) - 1.
            let want: Vec<u32> = (0..6)
                .map(|i| argmax(&s.rows[(i + 1).min(3) - 1]))
                .collect();
            assert_eq!(got, want, "{name} {dtype} V={vocab}");
            assert_eq!(read_u32s(ctx, &s.state, 2), [3, 6]);
        }
    }
}

#[test]
fn gpu_draws_equal_the_reference_for_a_fixed_seed() {
    let settings: [(f32, Option<usize>, u64); 4] = [
        (1.0, None, 1),
        (0.8, Some(5), 0x1234_5678_9abc_def0),
        (1.3, Some(40), 7),
        (0.5, Some(1000), 8), // top_k > V keeps all
    ];
    for (name, ctx, dtype) in cases() {
        for vocab in [70usize, 300] {
            let block = 4;
            let rows: Vec<Vec<f32>> = (0..block)
                .map(|r| {
                    rand_vec(vocab, 100 + r as u64)
                        .iter()
                        .map(|v| v * 3.0)
                        .collect()
                })
                .collect();
            for &(temperature, top_k, seed) in &settings {
                let context = [5u32, 6, 0, 0];
                let state = [2u32, 0];
                let draws = 12;
                let s = setup(ctx, &rows, dtype, &context, state, draws);
                let p = params(&s, temperature, top_k, seed);
                draw(ctx, &s, &p, draws);
                let (want_ctx, want_tokens, want_state) = simulate(&s, &p, &context, state, draws);
                let what = format!("{name} {dtype} V={vocab} T={temperature} k={top_k:?}");
                assert_eq!(read_u32s(ctx, &s.out, draws), want_tokens, "{what}: tokens");
                assert_eq!(
                    read_u32s(ctx, &s.context, block),
                    want_ctx,
                    "{what}: context"
                );
                assert_eq!(read_u32s(ctx, &s.state, 2), want_state, "{what}: state");
            }
        }
    }
}

/// Pearson's chi-square statistic of observed counts against probabilities.
fn chi_square(counts: &[usize], probs: &[f64]) -> f64 {
    let n: usize = counts.iter().sum();
    counts
        .iter()
        .zip(probs)
        .map(|(&c, &p)| {
            let e = n as f64 * p;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn histogram_of_2000_draws_matches_the_probabilities() {
    // 2000 dispatches of one kernel in one submission; block = 1, so the context is full from
    // the start (window shift on every draw) and every draw reads row 0.
    let probs = [0.1f64, 0.2, 0.3, 0.15, 0.25];
    let logits: Vec<f32> = probs.iter().map(|p| p.ln() as f32).collect();
    let ctx = ctx();
    let draws = 2000;
    let s = one_row(ctx, &logits, draws);
    let p = params(&s, 1.0, None, 2024);
    draw(ctx, &s, &p, draws);
    let tokens = read_u32s(ctx, &s.out, draws);
    let mut counts = [0usize; 5];
    for &t in &tokens {
        counts[t as usize] += 1;
    }
    // 4 degrees of freedom: P(chi2 > 18.47) = 0.001. The draws are a fixed function of the
    // seed, so this either always passes or always fails.
    let chi2 = chi_square(&counts, &probs);
    assert!(chi2 < 18.47, "counts {counts:?} vs {probs:?}: chi2 {chi2}");
    // The GPU draws are the reference's draws (exp may differ in the last bit: allow a few).
    let mismatches = (0..draws)
        .filter(|&i| tokens[i] != sample_reference(&logits, 1.0, None, 2024, i as u64))
        .count();
    assert!(
        mismatches <= 2,
        "{mismatches} draws differ from the reference"
    );
    assert_eq!(read_u32s(ctx, &s.state, 2), [1, draws as u32]);
    assert_eq!(read_u32s(ctx, &s.context, 1), [tokens[draws - 1]]);
}

#[test]
fn top_k_keeps_every_value_tied_at_the_threshold() {
    let logits = vec![0.0f32, 2.0, 1.0, 2.0, 2.0, -1.0];
    let ctx = ctx();
    let draws = 300;
    // `draws` tokens drawn with top-k `k` (temperature 1) from `seed`.
    let top_k_draws = |k, seed| {
        let s = one_row(ctx, &logits, draws);
        draw(ctx, &s, &params(&s, 1.0, Some(k), seed), draws);
        read_u32s(ctx, &s.out, draws)
    };
    // k = 2: the 2nd largest is 2, so all three 2s are kept (uniform over {1, 3, 4}).
    let tokens = top_k_draws(2, 3);
    let mut counts = [0usize; 6];
    for &t in &tokens {
        counts[t as usize] += 1;
    }
    assert_eq!([counts[0], counts[2], counts[5]], [0, 0, 0], "{counts:?}");
    let chi2 = chi_square(&[counts[1], counts[3], counts[4]], &[1.0 / 3.0; 3]);
    assert!(chi2 < 13.82, "{counts:?}: chi2 {chi2}"); // 2 dof, p = 0.001
    // k = 4: the 4th largest is 1: {1, 2, 3, 4} kept, 0 and 5 never drawn.
    let tokens = top_k_draws(4, 4);
    assert!(tokens.iter().all(|&t| (1..=4).contains(&t)), "{tokens:?}");
    assert!(tokens.contains(&2));
    for (i, &t) in tokens.iter().enumerate().take(50) {
        assert_eq!(t, sample_reference(&logits, 1.0, Some(4), 4, i as u64));
    }
}

#[test]
fn context_appends_then_shifts_when_full() {
    // block = 300 > 256 threads: the shift runs in two chunks.
    let ctx = ctx();
    let block = 300;
    let mut rows = vec![vec![0.0f32, 0.0, 0.0]; block];
    rows[block - 1] = vec![0.0, 5.0, 1.0]; // argmax 1 on the last row
    rows[9] = vec![3.0, 0.0, 1.0]; // argmax 0 on row 9
    let context: Vec<u32> = (0..block as u32).map(|i| 1000 + i).collect();
    // Full: shift left by one, token at block - 1; out[7] written.
    let s = setup(ctx, &rows, DType::F32, &context, [block as u32, 7], 10);
    draw(ctx, &s, &params(&s, 1.0, Some(1), 0), 1);
    let mut want: Vec<u32> = (1..block as u32).map(|i| 1000 + i).collect();
    want.push(1);
    assert_eq!(read_u32s(ctx, &s.context, block), want);
    assert_eq!(read_u32s(ctx, &s.state, 2), [block as u32, 8]);
    assert_eq!(read_u32s(ctx, &s.out, 10)[7], 1);
    // Not full (len 10): the token goes to context[10], len becomes 11, nothing else moves.
    let s = setup(ctx, &rows, DType::F32, &context, [10, 0], 1);
    draw(ctx, &s, &params(&s, 1.0, Some(1), 0), 1);
    let mut want = context.clone();
    want[10] = 0;
    assert_eq!(read_u32s(ctx, &s.context, block), want);
    assert_eq!(read_u32s(ctx, &s.state, 2), [11, 1]);
    // Draws past the end of `out` are not written, but still counted.
    let s = setup(ctx, &rows, DType::F32, &context, [10, 0], 1);
    draw(ctx, &s, &params(&s, 1.0, Some(1), 0), 3);
    assert_eq!(read_u32s(ctx, &s.out, 1), [0]);
    assert_eq!(read_u32s(ctx, &s.state, 2), [13, 3]);
}

#[test]
fn invalid_parameters_are_errors() {
    let ctx = ctx();
    let s = setup(ctx, &vec![vec![0.0; 4]; 2], DType::F32, &[0, 0], [1, 0], 1);
    let ok = params(&s, 1.0, None, 0);
    assert!(sample_next(ctx, &s.logits, &s.context, &s.state, &s.out, &ok).is_ok());
    // 1e-45 is positive but subnormal: a GPU flushes it to zero (it sampled newlines).
    let temperatures = [0.0, -1.0, f32::NAN, f32::INFINITY, 1e-45, 1e-31].map(|temperature| {
        let p = SampleParams {
            temperature,
            ..ok.clone()
        };
        (p, "temperature must be finite and at least 1e-30")
    });
    let others = [
        (
            SampleParams {
                top_k: Some(0),
                ..ok.clone()
            },
            "top_k must be at least 1",
        ),
        (
            SampleParams {
                vocab: 5,
                ..ok.clone()
            },
            "must be [block, V] = [2, 5]",
        ),
        (
            SampleParams {
                block: 3,
                ..ok.clone()
            },
            "must be [block, V] = [3, 4]",
        ),
    ];
    for (p, message) in temperatures.into_iter().chain(others) {
        common::expect_err(
            sample_next(ctx, &s.logits, &s.context, &s.state, &s.out, &p),
            &[message],
        );
    }
    let short = upload_u32(ctx, &[0]);
    common::expect_err(
        sample_next(ctx, &s.logits, &s.context, &short, &s.out, &ok),
        &["state buffer must hold two u32"],
    );
    common::expect_err(
        sample_next(ctx, &s.logits, &short, &s.state, &s.out, &ok),
        &["context buffer holds 4 bytes"],
    );
}

#[test]
fn uniforms_are_reproducible_and_spread_over_the_unit_interval() {
    let n = 20000;
    let us: Vec<f32> = (0..n).map(|i| sample_uniform(42, i)).collect();
    assert!(us.iter().all(|&u| (0.0..1.0).contains(&u)));
    // Reproducible: these 24-bit draws, worked out apart from the library (Wellons' triple32
    // over the seed's and the draw's words, in Python), on every platform and in every
    // version; a changed hash would change every text a seed gave.
    for (seed, draw, bits) in [
        (42, 17, 10_473_119u32),
        (0, 0, 15_721_260),
        (1337, 0, 14_157_892),
        ((1 << 40) | 5, 3, 14_145_802),
        (7, 1 << 33, 1_949_045),
    ] {
        let u = sample_uniform(seed, draw);
        assert_eq!(u, bits as f32 / 16_777_216.0, "seed {seed}, draw {draw}");
    }
    let mean = us.iter().map(|&u| u as f64).sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    let mut bins = [0usize; 10];
    for &u in &us {
        bins[(u * 10.0) as usize] += 1;
    }
    let chi2 = chi_square(&bins, &[0.1; 10]);
    assert!(chi2 < 27.88, "{bins:?}: chi2 {chi2}"); // 9 dof, p = 0.001
    assert_ne!(sample_uniform(1, 0), sample_uniform(2, 0));
    assert_ne!(sample_uniform(1 << 32, 0), sample_uniform(0, 0));
    assert_ne!(sample_uniform(0, 1 << 32), sample_uniform(0, 0));
}
