//! Token + position embedding against its CPU reference on f32, native f16, packed f16 and
//! bf16 storages: forward, invalid tokens, and the deterministic scatter-add backward
//! (repeated and absent tokens, accumulation, bit-identical runs).

mod common;

use common::values::{quantised, run, storages, upload, upload_u32};
use common::{bits, ctx, rand_vec};
use webgpu_amp::ops::embedding::{embedding_backward, embedding_forward};
use webgpu_amp::{DType, GpuContext, Tensor};

/// y = wte[tok] + wpe[t] in f32, rounded to y's dtype: exactly what the kernel computes.
fn embedding_ref(
    tokens: &[u32],
    wte: &[f32],
    wpe: Option<&[f32]>,
    (t, cols): (usize, usize),
    out: DType,
) -> Vec<f32> {
    let vocab = wte.len() / cols;
    let mut y = Vec::new();
    for (i, &tok) in tokens.iter().enumerate() {
        for c in 0..cols {
            if tok as usize >= vocab {
                y.push(f32::NAN);
                continue;
            }
            let mut v = wte[tok as usize * cols + c];
            if let Some(wpe) = wpe {
                v += wpe[(i % t) * cols + c];
            }
            y.push(out.round(v));
        }
    }
    y
}

fn random_tokens(n: usize, vocab: u32, seed: u64) -> Vec<u32> {
    rand_vec(n, seed)
        .iter()
        .map(|&v| (((v + 1.0) * 0.5 * vocab as f32) as u32).min(vocab - 1))
        .collect()
}

#[test]
fn embedding_forward_matches_reference_on_every_storage() {
    let (batch, t, t_max, vocab, cols) = (3usize, 4usize, 6usize, 11usize, 5usize);
    let tokens = random_tokens(batch * t, vocab as u32, 41);
    for (name, ctx, act) in storages() {
        for table in [DType::F32, act] {
            for with_wpe in [true, false] {
                let wte_v = quantised(vocab * cols, 42, 1.0, table);
                let wpe_v = quantised(t_max * cols, 43, 0.5, table);
                let tok_buf = upload_u32(ctx, &tokens);
                let wte = upload(ctx, &wte_v, &[vocab, cols], table);
                let wpe = upload(ctx, &wpe_v, &[t_max, cols], table);
                let y = Tensor::zeros(ctx, &[batch, t, cols], act);
                let k =
                    embedding_forward(ctx, &tok_buf, &wte, with_wpe.then_some(&wpe), &y, batch, t)
                        .unwrap();
                run(ctx, &[k]);
                let want = embedding_ref(
                    &tokens,
                    &wte_v,
                    with_wpe.then_some(wpe_v.as_slice()),
                    (t, cols),
                    act,
                );
                // One f32 add and one rounding: bit-exact.
                assert_eq!(
                    bits(&y.read_f32(ctx).unwrap()),
                    bits(&want),
                    "{name} y={act} tables={table} wpe={with_wpe}"
                );
            }
        }
    }
}

#[test]
fn embedding_forward_marks_invalid_tokens_with_nan_and_stays_in_bounds() {
    let ctx = ctx();
    let (vocab, cols) = (4usize, 3usize);
    let tokens = [1u32, 4, 3, u32::MAX];
    let wte_v = rand_vec(vocab * cols, 44);
    let wte = upload(ctx, &wte_v, &[vocab, cols], DType::F32);
    let y = Tensor::zeros(ctx, &[1, 4, cols], DType::F32);
    let k = embedding_forward(ctx, &upload_u32(ctx, &tokens), &wte, None, &y, 1, 4).unwrap();
    run(ctx, &[k]);
    let got = y.read_f32(ctx).unwrap();
    let want = embedding_ref(&tokens, &wte_v, None, (4, cols), DType::F32);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
            "element {i}: {g} vs {w}"
        );
    }
    assert!(got[3..6].iter().chain(&got[9..12]).all(|v| v.is_nan()));
    assert!(got[..3].iter().chain(&got[6..9]).all(|v| v.is_finite()));
}

/// dwte (+)= and dwpe (+)= in f32, each sum in increasing position order: bit-exact with the
/// kernel's order.
fn embedding_backward_ref(
    tokens: &[u32],
    dy: &[f32],
    (dwte, dwpe): (&mut [f32], &mut [f32]),
    (batch, t, cols): (usize, usize, usize),
) {
    let vocab = dwte.len() / cols;
    for v in 0..vocab {
        let positions: Vec<usize> = (0..tokens.len())
            .filter(|&i| tokens[i] as usize == v)
            .collect();
        if positions.is_empty() {
            continue;
        }
        for c in 0..cols {
            let acc = positions.iter().fold(0.0f32, |a, &i| a + dy[i * cols + c]);
            dwte[v * cols + c] += acc;
        }
    }
    for tc in 0..t * cols {
        let acc = (0..batch).fold(0.0f32, |a, b| a + dy[b * t * cols + tc]);
        dwpe[tc] += acc;
    }
}

fn gpu_embedding_backward(
    ctx: &GpuContext,
    tokens: &[u32],
    dyv: &[f32],
    act: DType,
    (prev_wte, prev_wpe): (&[f32], &[f32]),
    (batch, t, cols): (usize, usize, usize),
) -> (Vec<f32>, Vec<f32>) {
    let vocab = prev_wte.len() / cols;
    let t_max = prev_wpe.len() / cols;
    let dy = upload(ctx, dyv, &[batch, t, cols], act);
    let dwte = upload(ctx, prev_wte, &[vocab, cols], DType::F32);
    let dwpe = upload(ctx, prev_wpe, &[t_max, cols], DType::F32);
    let ks = embedding_backward(
        ctx,
        &upload_u32(ctx, tokens),
        &dy,
        &dwte,
        Some(&dwpe),
        batch,
        t,
    )
    .unwrap();
    assert_eq!(ks.len(), 6);
    run(ctx, &ks);
    (dwte.read_f32(ctx).unwrap(), dwpe.read_f32(ctx).unwrap())
}

#[test]
fn embedding_backward_is_a_deterministic_scatter_add() {
    // 5 x 120 = 600 positions: three chunks of the counting sort. Tokens 0..13 with 12 and 5
    // absent, token 3 very frequent, plus invalid tokens (skipped). The previous gradient holds
    // -0.0 and other values that must stay untouched, bit for bit, where nothing is added.
    let (batch, t, t_max, vocab, cols) = (5usize, 120usize, 130usize, 13usize, 6usize);
    let mut tokens = random_tokens(batch * t, 12, 51);
    for (i, tok) in tokens.iter_mut().enumerate() {
        if *tok == 5 {
            *tok = 3;
        }
        if i % 7 == 0 {
            *tok = 3;
        }
    }
    tokens[17] = vocab as u32; // invalid: skipped
    tokens[400] = u32::MAX;
    for (name, ctx, act) in storages() {
        let dyv = quantised(batch * t * cols, 52, 1.0, act);
        let mut prev_wte = quantised(vocab * cols, 53, 1.0, DType::F32);
        prev_wte[5 * cols] = -0.0;
        prev_wte[12 * cols + 1] = -0.0;
        let mut prev_wpe = quantised(t_max * cols, 54, 1.0, DType::F32);
        prev_wpe[t_max * cols - 1] = -0.0;
        let backward = || {
            gpu_embedding_backward(
                ctx,
                &tokens,
                &dyv,
                act,
                (&prev_wte, &prev_wpe),
                (batch, t, cols),
            )
        };
        let (dwte, dwpe) = backward();
        let (mut want_wte, mut want_wpe) = (prev_wte.clone(), prev_wpe.clone());
        embedding_backward_ref(
            &tokens,
            &dyv,
            (&mut want_wte, &mut want_wpe),
            (batch, t, cols),
        );
        assert_eq!(bits(&dwte), bits(&want_wte), "{name} dy={act}: dwte");
        assert_eq!(bits(&dwpe), bits(&want_wpe), "{name} dy={act}: dwpe");
        // Absent tokens (5, 12) and rows T.. of dwpe: untouched bit for bit.
        assert_eq!(
            bits(&dwte[5 * cols..6 * cols]),
            bits(&prev_wte[5 * cols..6 * cols])
        );
        assert_eq!(
            bits(&dwte[12 * cols..13 * cols]),
            bits(&prev_wte[12 * cols..13 * cols])
        );
        assert_eq!(bits(&dwpe[t * cols..]), bits(&prev_wpe[t * cols..]));
        // And a second run from the same state: the same bits.
        let (dwte2, dwpe2) = backward();
        assert_eq!(bits(&dwte2), bits(&dwte), "{name}: dwte run to run");
        assert_eq!(bits(&dwpe2), bits(&dwpe), "{name}: dwpe run to run");
    }
}

#[test]
fn embedding_backward_replayed_kernels_accumulate_and_reset_their_index() {
    // The kernels are planned once and replayed every step: a second replay adds the same
    // gradient again (+=), with the index rebuilt from scratch (no stale counters).
    let ctx = ctx();
    let (batch, t, vocab, cols) = (2usize, 300usize, 7usize, 4usize);
    let tokens = random_tokens(batch * t, vocab as u32, 61);
    let dyv: Vec<f32> = rand_vec(batch * t * cols, 62)
        .iter()
        .map(|v| (v * 8.0).round() / 8.0)
        .collect();
    let dy = upload(ctx, &dyv, &[batch, t, cols], DType::F32);
    let dwte = Tensor::zeros(ctx, &[vocab, cols], DType::F32);
    let ks =
        embedding_backward(ctx, &upload_u32(ctx, &tokens), &dy, &dwte, None, batch, t).unwrap();
    assert_eq!(ks.len(), 5);
    run(ctx, &ks);
    run(ctx, &ks);
    let mut want = vec![0.0f32; vocab * cols];
    let mut unused = vec![0.0f32; t * cols];
    embedding_backward_ref(&tokens, &dyv, (&mut want, &mut unused), (batch, t, cols));
    // Multiples of 1/8 summed over <= 600 terms: exact, so twice the sum is exactly 2x.
    let twice: Vec<f32> = want.iter().map(|v| 2.0 * v).collect();
    assert_eq!(bits(&dwte.read_f32(ctx).unwrap()), bits(&twice));
}

#[test]
fn embedding_rejects_bad_shapes() {
    let ctx = ctx();
    let wte = Tensor::zeros(ctx, &[10, 4], DType::F32);
    let wpe = Tensor::zeros(ctx, &[3, 4], DType::F32);
    let y = Tensor::zeros(ctx, &[2, 4, 4], DType::F32);
    let tokens = upload_u32(ctx, &[0; 8]);
    // T = 4 > T_max = 3.
    common::expect_err(
        embedding_forward(ctx, &tokens, &wte, Some(&wpe), &y, 2, 4),
        &["wpe [3, 4] must be [T_max, 4]"],
    );
    // Too few tokens.
    let short = upload_u32(ctx, &[0; 7]);
    common::expect_err(
        embedding_forward(ctx, &short, &wte, None, &y, 2, 4),
        &["tokens buffer holds 28 bytes"],
    );
    // y of the wrong size.
    common::expect_err(
        embedding_forward(ctx, &tokens, &wte, None, &wte, 2, 4),
        &["y [10, 4] must be [B, T, C]"],
    );
    // f16 gradient tables.
    let dwte16 = Tensor::zeros(ctx, &[10, 4], DType::F16);
    common::expect_err(
        embedding_backward(ctx, &tokens, &y, &dwte16, None, 2, 4),
        &["dwte must be stored as f32, not f16"],
    );
    assert!(embedding_forward(ctx, &tokens, &wte, None, &y, 2, 4).is_ok());
}
