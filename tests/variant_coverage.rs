//! Every kernel a training step compiles is one of the declared variants (`variants::all`).
//! The portability tests translate the declared variants to every shading language and the
//! Tint check (`scripts/tint-check.sh`) compiles them as Chrome would, so a kernel planned
//! in a storage combination no grid declares has never been through either: a LayerNorm
//! writing f16 from an f32 input, or an add of an f32 stream and an f16 branch, were such.
//! Planned here for the preset models under every precision, on native and packed f16.

mod common;

use webgpu_amp::GpuContext;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::preset;
use webgpu_amp::variants::undeclared;

const MODELS: [(&str, &[usize], usize); 6] = [
    ("linear", &[1, 28, 28], 10),
    ("mlp", &[1, 28, 28], 10),
    ("mnist-cnn", &[1, 28, 28], 10),
    ("simple-cnn", &[3, 32, 32], 10),
    ("gpt-tiny", &[64], 65),
    // Dropout, and attention over 256 positions.
    ("gpt-char", &[256], 65),
];

const PRECISIONS: [Precision; 4] = [
    Precision::F32,
    Precision::AmpF16,
    Precision::AmpBf16,
    Precision::F16,
];

/// Plan one step of every model under every precision (clipping for a GPT, as its recipe).
fn plan_every_step(ctx: &GpuContext) {
    for (model, input, classes) in MODELS {
        for precision in PRECISIONS {
            let spec = preset(model, input, classes).unwrap();
            let mut t = common::trainers::bench_trainer(ctx, (model, spec), classes, precision);
            t.step_kernels(ctx, 3).unwrap();
        }
    }
}

fn check(ctx: &GpuContext, what: &str) {
    plan_every_step(ctx);
    let compiled = ctx.compiled_entries();
    let missing = undeclared(&compiled).unwrap();
    eprintln!(
        "{what}: {} entry points compiled, {} undeclared",
        compiled.len(),
        missing.len()
    );
    assert!(
        missing.is_empty(),
        "{what}: kernels no declared variant covers (add them to their shader's grid):\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_kernel_of_a_step_is_declared_auto_storage() {
    check(&common::ctx_owned(), "auto f16 storage");
}

#[test]
fn every_kernel_of_a_step_is_declared_packed_storage() {
    check(&common::ctx_owned_packed(), "packed f16 storage");
}
