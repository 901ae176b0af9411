//! SwiGLU (`ops::unary::swiglu_*`, transformers' `LlamaMLP` activation `silu(gate) · up`):
//! one kernel each way giving the bits of the kernels it replaces (the table's SiLU, then the
//! product; the backward's product, SiLU's gradient and the other product), with their
//! roundings to a low dtype, on f32, native f16, packed f16 and bf16 storages; against an f64
//! reference with those roundings; the gradients against finite differences (f32); the
//! recomputing forward-backward's bits; the errors.

mod common;

use common::values::{quantised, run, storages, ulp, upload};
use common::{assert_close, bits, ctx, expect_err, rand_vec};
use webgpu_amp::ops::elementwise;
use webgpu_amp::ops::unary::{
    self, SILU, swiglu_backward, swiglu_forward, swiglu_forward_backward,
};
use webgpu_amp::{DType, GpuContext, Tensor};

/// Odd: the last element of a packed tensor is stored alone.
const N: usize = 37;

struct Inputs {
    gate: Vec<f32>,
    up: Vec<f32>,
    dy: Vec<f32>,
}

fn inputs(dtype: DType) -> Inputs {
    Inputs {
        gate: quantised(N, 1, 6.0, dtype),
        up: quantised(N, 2, 2.0, dtype),
        dy: quantised(N, 3, 1.0, dtype),
    }
}

fn tensors(ctx: &GpuContext, v: &Inputs, dtype: DType) -> [Tensor; 3] {
    [&v.gate, &v.up, &v.dy].map(|x| upload(ctx, x, &[N], dtype))
}

fn read(ctx: &GpuContext, t: &Tensor) -> Vec<f32> {
    t.read_f32(ctx).unwrap()
}

#[test]
fn swiglu_gives_the_bits_of_silu_then_the_products_on_every_storage() {
    for (name, ctx, dtype) in storages() {
        let v = inputs(dtype);
        let [gate, up, dy] = tensors(ctx, &v, dtype);
        let zeros = || Tensor::zeros(ctx, &[N], dtype);
        // Unfused, as transformers runs it: s = silu(gate), y = s · up; ds = dy · up,
        // dgate = silu'(gate) · ds, dup = dy · s, each stored in the dtype.
        let (s, y, ds, dgate, dup) = (zeros(), zeros(), zeros(), zeros(), zeros());
        run(
            ctx,
            &[
                unary::forward(ctx, &SILU, &gate, &s).unwrap(),
                elementwise::mul(ctx, &s, &up, &y).unwrap(),
                elementwise::mul(ctx, &dy, &up, &ds).unwrap(),
                unary::backward(ctx, &SILU, &gate, &ds, &dgate).unwrap(),
                elementwise::mul(ctx, &dy, &s, &dup).unwrap(),
            ],
        );
        let (y2, dgate2, dup2) = (zeros(), zeros(), zeros());
        run(
            ctx,
            &[
                swiglu_forward(ctx, &gate, &up, &y2).unwrap(),
                swiglu_backward(ctx, (&gate, &up), &dy, (&dgate2, &dup2)).unwrap(),
            ],
        );
        let b = |t: &Tensor| bits(&read(ctx, t));
        assert_eq!(b(&y2), b(&y), "{name}: y");
        assert_eq!(b(&dgate2), b(&dgate), "{name}: dgate");
        assert_eq!(b(&dup2), b(&dup), "{name}: dup");
        // The recomputing backward: the same three.
        let (y3, dgate3, dup3) = (zeros(), zeros(), zeros());
        let both = swiglu_forward_backward(ctx, (&gate, &up), &dy, (&y3, &dgate3, &dup3));
        run(ctx, &[both.unwrap()]);
        assert_eq!(b(&y3), b(&y), "{name}: recomputed y");
        assert_eq!(b(&dgate3), b(&dgate), "{name}: fused dgate");
        assert_eq!(b(&dup3), b(&dup), "{name}: fused dup");
    }
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn swiglu_matches_the_f64_reference_with_transformers_roundings() {
    for (name, ctx, dtype) in storages() {
        let v = inputs(dtype);
        let [gate, up, dy] = tensors(ctx, &v, dtype);
        let zeros = || Tensor::zeros(ctx, &[N], dtype);
        let (y, dgate, dup) = (zeros(), zeros(), zeros());
        run(
            ctx,
            &[
                swiglu_forward(ctx, &gate, &up, &y).unwrap(),
                swiglu_backward(ctx, (&gate, &up), &dy, (&dgate, &dup)).unwrap(),
            ],
        );
        // silu(gate) and dy · up are stored in the dtype before they are used.
        let round = |x: f64| dtype.round(x as f32) as f64;
        let mut want = [vec![], vec![], vec![]];
        for i in 0..N {
            let (g, u, d) = (v.gate[i] as f64, v.up[i] as f64, v.dy[i] as f64);
            let s = round(g * sigmoid(g));
            let ds = round(d * u);
            let sg = sigmoid(g);
            want[0].push((s * u) as f32);
            want[1].push((ds * sg * (1.0 + g * (1.0 - sg))) as f32);
            want[2].push((d * s) as f32);
        }
        // One rounding to the dtype on top of f32 arithmetic; an f32 sigmoid may flip the
        // rounding of silu(gate) by one unit of the dtype.
        let tol = 2.0 * ulp(dtype) + 1e-6;
        assert_close(&format!("{name}: y"), &read(ctx, &y), &want[0], 1e-6, tol);
        assert_close(
            &format!("{name}: dgate"),
            &read(ctx, &dgate),
            &want[1],
            1e-6,
            tol,
        );
        assert_close(
            &format!("{name}: dup"),
            &read(ctx, &dup),
            &want[2],
            1e-6,
            tol,
        );
    }
}

/// L = Σ w · silu(gate) · up (f64 on the CPU): central differences against dgate and dup.
#[test]
fn swiglu_gradients_match_finite_differences() {
    let ctx = ctx();
    let (gate, up, w) = (rand_vec(N, 4), rand_vec(N, 5), rand_vec(N, 6));
    let gate: Vec<f32> = gate.iter().map(|g| g * 4.0).collect();
    let t = |v: &[f32]| upload(ctx, v, &[N], DType::F32);
    let (gt, ut, wt) = (t(&gate), t(&up), t(&w));
    let (dgate, dup) = (
        Tensor::zeros(ctx, &[N], DType::F32),
        Tensor::zeros(ctx, &[N], DType::F32),
    );
    run(
        ctx,
        &[swiglu_backward(ctx, (&gt, &ut), &wt, (&dgate, &dup)).unwrap()],
    );
    let loss = |g: &[f64], u: &[f64]| -> f64 {
        (0..N)
            .map(|i| w[i] as f64 * g[i] * sigmoid(g[i]) * u[i])
            .sum()
    };
    let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
    let h = 1e-6;
    let fd = |which: usize, i: usize| -> f32 {
        let mut args = [f64s(&gate), f64s(&up)];
        args[which][i] += h;
        let hi = loss(&args[0], &args[1]);
        args[which][i] -= 2.0 * h;
        ((hi - loss(&args[0], &args[1])) / (2.0 * h)) as f32
    };
    let fd_gate: Vec<f32> = (0..N).map(|i| fd(0, i)).collect();
    let fd_up: Vec<f32> = (0..N).map(|i| fd(1, i)).collect();
    assert_close("dgate", &read(ctx, &dgate), &fd_gate, 1e-5, 1e-4);
    assert_close("dup", &read(ctx, &dup), &fd_up, 1e-5, 1e-4);
}

#[test]
fn swiglu_rejects_mixed_storages_and_lengths() {
    let ctx = ctx();
    let t = |n, dtype| Tensor::zeros(ctx, &[n], dtype);
    let (gate, up, y) = (t(8, DType::F32), t(8, DType::F32), t(8, DType::F32));
    assert!(swiglu_forward(ctx, &gate, &up, &y).is_ok());
    expect_err(
        swiglu_forward(ctx, &gate, &t(8, DType::BF16), &y),
        &["up is bf16 but gate is f32", "one storage"],
    );
    expect_err(
        swiglu_forward(ctx, &gate, &t(7, DType::F32), &y),
        &["differ in length"],
    );
}
