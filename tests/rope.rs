//! RoPE (`ops::rope`, Hugging Face's rotate-half layout) against an f64 reference on f32,
//! native f16, packed f16 and bf16 storages: q and k in one dispatch (grouped-query head
//! counts), dense tensors and heads read from packed projections, head halves of even and
//! odd length (word-aligned pair stores and per-half stores), a first position past 0; the
//! backward against the reference and as the forward's adjoint (⟨dy, R x⟩ = ⟨Rᵀ dy, x⟩, f32),
//! and the errors.

mod common;

use common::values::{quantised, run, storages, ulp, upload};
use common::{assert_close, ctx, expect_err};
use webgpu_amp::ops::qkv::HeadRows;
use webgpu_amp::ops::rope::{Positions, RopeTable, Rotate, backward, forward, table_values};
use webgpu_amp::{DType, GpuContext, Tensor};

/// SmolLM2's rope_theta.
const THETA: f64 = 100_000.0;

/// The f64 rotation of every head of `x` (at `at`) into a dense `[rows, heads · hs]`.
fn rope_ref(
    x: &[f32],
    at: HeadRows,
    (rows, heads, hs): (usize, usize, usize),
    pos: impl Fn(usize) -> usize,
    table: &[f32],
    sign: f64,
) -> Vec<f64> {
    let h = hs / 2;
    let mut y = vec![0.0; rows * heads * hs];
    for r in 0..rows {
        for head in 0..heads {
            let base = at.offset + r * at.row + head * hs;
            for i in 0..h {
                let t = (pos(r) * h + i) * 2;
                let (c, s) = (table[t] as f64, sign * table[t + 1] as f64);
                let (a, b) = (x[base + i] as f64, x[base + h + i] as f64);
                let o = r * heads * hs + head * hs;
                y[o + i] = a * c - b * s;
                y[o + h + i] = b * c + a * s;
            }
        }
    }
    y
}

fn to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// One layout case: q and k read from packed projections or dense tensors.
struct Case {
    batch: usize,
    t: usize,
    heads: usize,
    kv_heads: usize,
    hs: usize,
    first: usize,
    packed: bool,
}

/// Runs the forward (or backward) of `case` on the GPU: (q out, k out) dense.
fn gpu_rope(
    ctx: &GpuContext,
    dtype: DType,
    c: &Case,
    (input, table): (&[f32], &RopeTable),
    back: bool,
) -> (Vec<f32>, Vec<f32>) {
    let rows = c.batch * c.t;
    let (q_at, k_at, in_shape) = in_layout(c);
    let x = upload(ctx, input, &in_shape, dtype);
    let (xq, xk);
    let (q_in, k_in) = if c.packed {
        (&x, &x)
    } else {
        // Dense inputs: q's columns, then k's.
        let cols = |at: HeadRows, heads: usize| -> Vec<f32> {
            (0..rows)
                .flat_map(|r| input[at.offset + r * at.row..][..heads * c.hs].to_vec())
                .collect()
        };
        xq = upload(ctx, &cols(q_at, c.heads), &[rows, c.heads * c.hs], dtype);
        xk = upload(
            ctx,
            &cols(k_at, c.kv_heads),
            &[rows, c.kv_heads * c.hs],
            dtype,
        );
        (&xq, &xk)
    };
    let dense = |heads: usize| HeadRows {
        offset: 0,
        row: heads * c.hs,
    };
    let (q_from, k_from) = if c.packed {
        (q_at, k_at)
    } else {
        (dense(c.heads), dense(c.kv_heads))
    };
    let yq = Tensor::zeros(ctx, &[rows, c.heads * c.hs], dtype);
    let yk = Tensor::zeros(ctx, &[rows, c.kv_heads * c.hs], dtype);
    let rot = |x, x_at, y, heads| Rotate {
        x,
        x_at,
        y,
        y_at: dense(heads),
        heads,
    };
    let q = rot(q_in, q_from, &yq, c.heads);
    let k = rot(k_in, k_from, &yk, c.kv_heads);
    let at = Positions {
        batch: c.batch,
        t: c.t,
        first_position: c.first,
    };
    let kernel = if back {
        backward(ctx, table, at, q, Some(k))
    } else {
        forward(ctx, table, at, q, Some(k))
    };
    run(ctx, &[kernel.unwrap()]);
    (yq.read_f32(ctx).unwrap(), yk.read_f32(ctx).unwrap())
}

/// Where q and k sit in the case's input (packed: one `[rows, (nh + 2·nkv)·hs]` tensor with v
/// last; dense: q's columns then k's of that same host array) and its shape.
fn in_layout(c: &Case) -> (HeadRows, HeadRows, Vec<usize>) {
    let row = (c.heads + 2 * c.kv_heads) * c.hs;
    let q = HeadRows { offset: 0, row };
    let k = HeadRows {
        offset: c.heads * c.hs,
        row,
    };
    (q, k, vec![c.batch * c.t, row])
}

fn cases() -> Vec<Case> {
    let case = |batch, t, heads, kv_heads, hs, first, packed| Case {
        batch,
        t,
        heads,
        kv_heads,
        hs,
        first,
        packed,
    };
    vec![
        // SmolLM2's heads (9 query, 3 key/value of 64), packed projections.
        case(2, 5, 9, 3, 64, 0, true),
        // Dense q and k; halves of 3 (odd: per-half stores), of 2, of 4.
        case(1, 7, 2, 1, 6, 3, false),
        case(2, 3, 4, 2, 4, 0, false),
        case(1, 9, 3, 3, 8, 11, true),
    ]
}

#[test]
fn rope_matches_the_f64_reference_on_every_storage() {
    for (name, ctx, dtype) in storages() {
        for c in cases() {
            let table = RopeTable::new(ctx, THETA, c.hs, 32).unwrap();
            let host = table_values(THETA, c.hs, 32).unwrap();
            let (q_at, k_at, shape) = in_layout(&c);
            let x = quantised(shape.iter().product(), 7, 2.0, dtype);
            let pos = |r: usize| c.first + r % c.t;
            let rows = c.batch * c.t;
            for back in [false, true] {
                let (yq, yk) = gpu_rope(ctx, dtype, &c, (&x, &table), back);
                let sign = if back { -1.0 } else { 1.0 };
                let want_q = rope_ref(&x, q_at, (rows, c.heads, c.hs), pos, &host, sign);
                let want_k = rope_ref(&x, k_at, (rows, c.kv_heads, c.hs), pos, &host, sign);
                let what = format!(
                    "{name} {}x{} heads {}/{} of {} from {} packed {} backward {back}",
                    c.batch, c.t, c.heads, c.kv_heads, c.hs, c.first, c.packed
                );
                // f32 products and a sum, then one rounding to the storage.
                let (atol, rtol) = (4e-7, ulp(dtype).max(4e-7));
                assert_close(&format!("{what}: q"), &yq, &to_f32(&want_q), atol, rtol);
                assert_close(&format!("{what}: k"), &yk, &to_f32(&want_k), atol, rtol);
            }
        }
    }
}

/// The backward is the forward's transpose: ⟨dy, R x⟩ = ⟨Rᵀ dy, x⟩ (f32, f64 sums), and
/// undoes it (Rᵀ R x = x: a rotation).
#[test]
fn rope_backward_is_the_forwards_adjoint_and_inverse() {
    let ctx = ctx();
    let c = Case {
        batch: 2,
        t: 6,
        heads: 4,
        kv_heads: 2,
        hs: 8,
        first: 5,
        packed: false,
    };
    let table = RopeTable::new(ctx, THETA, c.hs, 16).unwrap();
    let (_, _, shape) = in_layout(&c);
    let n = shape.iter().product();
    let x = quantised(n, 8, 1.0, DType::F32);
    let dy = quantised(n, 9, 1.0, DType::F32);
    let (rx_q, rx_k) = gpu_rope(ctx, DType::F32, &c, (&x, &table), false);
    let (rdy_q, rdy_k) = gpu_rope(ctx, DType::F32, &c, (&dy, &table), true);
    // The dense q and k columns of a packed host array.
    let (q_at, k_at, _) = in_layout(&c);
    let rows = c.batch * c.t;
    let cols = |v: &[f32], at: HeadRows, heads: usize| -> Vec<f32> {
        (0..rows)
            .flat_map(|r| v[at.offset + r * at.row..][..heads * c.hs].to_vec())
            .collect()
    };
    let dot = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| *x as f64 * *y as f64)
            .sum::<f64>()
    };
    let (xq, xk) = (cols(&x, q_at, c.heads), cols(&x, k_at, c.kv_heads));
    let (dyq, dyk) = (cols(&dy, q_at, c.heads), cols(&dy, k_at, c.kv_heads));
    let lhs: f64 = dot(&dyq, &rx_q) + dot(&dyk, &rx_k);
    let rhs: f64 = dot(&rdy_q, &xq) + dot(&rdy_k, &xk);
    assert!(
        (lhs - rhs).abs() <= 1e-5 * lhs.abs().max(1.0),
        "<dy, R x> = {lhs}, <R^T dy, x> = {rhs}"
    );
    // Back again: the rotated q through the backward gives q.
    let mut packed_back = x.clone();
    for r in 0..rows {
        let at = q_at.offset + r * q_at.row;
        packed_back[at..at + c.heads * c.hs]
            .copy_from_slice(&rx_q[r * c.heads * c.hs..(r + 1) * c.heads * c.hs]);
    }
    let (q_again, _) = gpu_rope(ctx, DType::F32, &c, (&packed_back, &table), true);
    assert_close("R^T R q", &q_again, &xq, 1e-6, 1e-6);
}

#[test]
fn rope_rejects_what_it_cannot_rotate() {
    let ctx = ctx();
    let table = RopeTable::new(ctx, THETA, 8, 4).unwrap();
    let x = Tensor::zeros(ctx, &[2, 3, 16], DType::F32);
    let y = Tensor::zeros(ctx, &[2, 3, 16], DType::F32);
    let q = Rotate::dense(&x, &y, 2, 8);
    let at = |t, first| Positions {
        batch: 2,
        t,
        first_position: first,
    };
    assert!(forward(ctx, &table, at(3, 1), q, None).is_ok());
    expect_err(
        forward(ctx, &table, at(3, 2), q, None),
        &["positions 2..5", "past the table's 4"],
    );
    let short = Tensor::zeros(ctx, &[2, 3, 15], DType::F32);
    expect_err(
        forward(ctx, &table, at(3, 0), Rotate::dense(&short, &y, 2, 8), None),
        &["q's x", "must hold 6 rows of 2 heads of 8"],
    );
    let y16 = Tensor::zeros(ctx, &[2, 3, 16], DType::BF16);
    expect_err(
        forward(ctx, &table, at(3, 0), Rotate::dense(&x, &y16, 2, 8), None),
        &["one storage"],
    );
    expect_err(RopeTable::new(ctx, THETA, 7, 4), &["even"]);
    expect_err(RopeTable::new(ctx, f64::NAN, 8, 4), &["rope_theta"]);
}
