//! The tensor-core matmul (cooperative matrices, `shaders/matmul_coop.wgsl`) against the f64
//! reference, where the adapter has tensor cores. Elsewhere (lavapipe, llvmpipe, GPUs without
//! a 16x16x16 f16->f32 configuration) its numerics cannot run: the test says so loudly and
//! checks only what can be checked there (that `Auto` never picks it, and that forcing it is a
//! clear error). Its WGSL is validated and translated to SPIR-V and MSL on every machine by
//! tests/shader_portability.rs.

mod common;

use common::matmul_ref::{Case, check};
use common::{ctx, ctx_native};
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, matmul_with};
use webgpu_amp::{DType, Error, Storage, Tensor};

#[test]
fn tensor_core_matmul_matches_f64_reference_or_says_it_did_not_run() {
    let ctx = ctx();
    let Some(config) = ctx.caps.tensor_cores.config() else {
        common::not_checked(&format!(
            "the tensor-core matmul's numerics: no cooperative-matrix adapter (`{}`: tensor \
             cores {})",
            ctx.report.name,
            ctx.caps.tensor_cores.describe()
        ));
        return;
    };
    let ctx = ctx_native();
    eprintln!("tensor cores: {}", config.describe());
    use DType::{F16 as H, F32 as F};
    // Tile-sized and awkward shapes, every transpose, f16 and f32 outputs, bias, accumulate
    // (the weight gradient: f16 inputs, f32 accumulating output).
    let shapes = [
        (1, 1, 1),
        (17, 33, 65),
        (64, 64, 64),
        (65, 127, 31),
        (130, 2, 9),
        (200, 96, 300),
    ];
    let mut seed = 100;
    for &shape in &shapes {
        for trans in [(false, false), (true, false), (false, true), (true, true)] {
            for (c_dt, bias, accumulate) in [(H, None, false), (H, Some(H), false), (F, None, true)]
            {
                seed += 1;
                let case: Case = (shape, trans, (H, H, c_dt), bias, accumulate, seed);
                check("coop", ctx, MatmulKernel::Coop, case);
            }
        }
    }
    // Auto picks it for native f16 inputs.
    let case: Case = ((256, 256, 256), (false, true), (H, H, H), Some(F), false, 7);
    check("auto on tensor cores", ctx, MatmulKernel::Auto, case);
    let resolved = MatmulKernel::Auto.resolve(ctx, Storage::F16, Storage::F16);
    assert_eq!(resolved, MatmulKernel::Coop);
}

#[test]
fn auto_never_picks_tensor_cores_without_them_and_forcing_them_is_a_clear_error() {
    let ctx = ctx();
    let f16 = ctx.storage_for(DType::F16);
    let auto = MatmulKernel::Auto.resolve(ctx, f16, f16);
    // bf16 and f32 never run on cooperative matrices (naga 30 has no bf16 cooperative type).
    for s in [Storage::F32, Storage::BF16] {
        assert_ne!(
            MatmulKernel::Auto.resolve(ctx, s, s),
            MatmulKernel::Coop,
            "{s:?}"
        );
    }
    if ctx.caps.tensor_cores.config().is_some() {
        assert_eq!(auto, MatmulKernel::Coop);
        return;
    }
    assert_ne!(auto, MatmulKernel::Coop);
    let a = Tensor::zeros(ctx, &[4, 4], DType::F16);
    let c = Tensor::zeros(ctx, &[4, 4], DType::F16);
    match matmul_with(ctx, &a, &a, &c, MatmulOpts::default(), MatmulKernel::Coop) {
        Err(Error::Unsupported(msg)) => {
            assert!(msg.contains("tensor cores"), "{msg}");
            assert!(msg.contains("not used"), "says why: {msg}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("the cooperative matmul was built on an adapter without tensor cores"),
    }
}

/// The body `Auto` picks per adapter class and input storage, from capabilities alone (what
/// `info` prints): CPU adapters the direct body whatever the storage; GPUs the tiled SIMT
/// body (128×128 tiles, 8×8 per thread), and native f16 on cooperative matrices where
/// tensor cores are used. bf16 and packed f16 never run on tensor cores.
#[test]
fn auto_picks_the_body_by_adapter_class_and_storage() {
    use webgpu_amp::gpu::{TensorCoreConfig, TensorCores};
    let mut caps = ctx().caps.clone();
    let storages = [
        Storage::F32,
        Storage::F16,
        Storage::F16Packed,
        Storage::BF16,
    ];
    caps.cpu_adapter = true;
    caps.tensor_cores = TensorCores::NotUsed("CPU adapter".into());
    for s in storages {
        assert_eq!(
            MatmulKernel::Auto.resolve_for(&caps, s, s),
            MatmulKernel::Direct
        );
    }
    caps.cpu_adapter = false;
    for s in storages {
        assert_eq!(
            MatmulKernel::Auto.resolve_for(&caps, s, s),
            MatmulKernel::Tiled
        );
    }
    caps.tensor_cores = TensorCores::Used(TensorCoreConfig {
        m: 16,
        n: 16,
        k: 16,
        inputs: "f16",
        accumulator: "f32",
        subgroup: 32,
    });
    for s in storages {
        let want = if s == Storage::F16 {
            MatmulKernel::Coop
        } else {
            MatmulKernel::Tiled
        };
        assert_eq!(MatmulKernel::Auto.resolve_for(&caps, s, s), want, "{s:?}");
    }
    // Mixed inputs (an f16 activation times an f32 weight) stay on SIMT.
    let mixed = MatmulKernel::Auto.resolve_for(&caps, Storage::F16, Storage::F32);
    assert_eq!(mixed, MatmulKernel::Tiled);
}
