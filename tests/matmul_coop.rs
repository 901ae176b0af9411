//! The tensor-core matmul (cooperative matrices, `shaders/matmul_coop.wgsl`) against the f64
//! reference, with both fragment shapes (8×8, which Apple GPUs and Mesa 26's lavapipe list,
//! and 16×16, which NVIDIA lists), forced with `--tensor-cores on:8x8` / `on:16x16`. Where the
//! adapter has no f16 cooperative matrices (Mesa 22's lavapipe, GL) the numerics cannot run:
//! the tests say so loudly and check what can be checked there (that `Auto` never picks them,
//! and that forcing them is a clear error). CI runs this file on Mesa 26's lavapipe
//! (`scripts/lavapipe-coop.sh`), where everything runs.

mod common;

use common::matmul_ref::{Case, check, check_guarded, check_split};
use common::{coop_ctx, ctx, every_tile_ctx};
use webgpu_amp::ops::bodies::{self, ConvBody, SoftmaxBody};
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, matmul_with};
use webgpu_amp::{DType, Error, Storage, Tensor};

/// Every layout, awkward and tile-sized shapes (a CPU adapter's table takes the 64×64 tile at
/// every size; the next test asks for the wide and large tiles), f16 and f32 outputs, bias of either dtype, accumulate. Each layout runs with an
/// f16 output (with and without an f16 bias) and an accumulating f32 output (the weight
/// gradient's); an f32 bias with an f32 output runs on the Linear forward's layout (bᵀ). Every
/// combination is its own pipeline, and compiling them is most of this test's time on lavapipe.
#[test]
fn tensor_core_matmul_matches_f64_reference_with_both_fragment_shapes() {
    use DType::{F16 as H, F32 as F};
    // (Interior tiles, awkward sizes and split-K have their own test below: these are the
    // checked edge variant's layouts and epilogues.)
    let shapes = [
        (1, 1, 1),
        (17, 33, 65),
        (65, 127, 31),
        (130, 2, 9),
        (520, 600, 40),
    ];
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "the tensor-core matmul against f64") else {
            continue;
        };
        eprintln!("tensor cores: {}", ctx.caps.tensor_cores.describe());
        let what = format!("coop {edge}x{edge}");
        let mut seed = 100;
        for (si, &shape) in shapes.iter().enumerate() {
            for trans in [(false, false), (true, false), (false, true), (true, true)] {
                let epilogues = if shape.0 >= 512 {
                    // Where a GPU's table takes the large tiles (the next test checks them):
                    // the two staging orders of each input (a row- or k-contiguous, b column-
                    // or k-contiguous) are enough here, and a 16x16 pipeline takes seconds to
                    // compile on lavapipe.
                    match trans {
                        (false, false) => vec![(F, None, true)],
                        (true, true) => vec![(H, Some(H), false)],
                        _ => vec![],
                    }
                } else {
                    let mut e = vec![(F, None, true)];
                    e.push(if si % 2 == 0 {
                        (H, Some(H), false)
                    } else {
                        (H, None, false)
                    });
                    if trans == (false, true) {
                        e.push((F, Some(F), false));
                    }
                    e
                };
                for (c_dt, bias, accumulate) in epilogues {
                    seed += 1;
                    let case: Case = (shape, trans, (H, H, c_dt), bias, accumulate, seed);
                    check(&what, ctx, MatmulKernel::Coop, case);
                }
            }
        }
        // Auto picks it for native f16 inputs, and only for those.
        let case: Case = ((96, 80, 72), (false, true), (H, H, H), Some(F), false, 7);
        check("auto on tensor cores", ctx, MatmulKernel::Auto, case);
        let f16 = MatmulKernel::Auto.resolve(ctx, Storage::F16, Storage::F16);
        assert_eq!(f16, MatmulKernel::Coop);
        for s in [Storage::F32, Storage::BF16] {
            assert_ne!(MatmulKernel::Auto.resolve(ctx, s, s), MatmulKernel::Coop);
        }
    }
}

/// The variants the tensor-core body picks per dispatch, against the f64 reference with both
/// fragment shapes: the aligned interior variant (whole tiles: 16-byte loads of a and b in
/// their stored orientation, no bounds tests) in every layout, with its f32 results stored
/// straight to memory by cooperative stores (no bias, no accumulation) or through the
/// epilogue (bias, f16 output, accumulation), the large tile (both sides >= 512) and the wide
/// one (columns >= 512; a table that asks for them, as a GPU's defaults do), the checked
/// edge variant at awkward sizes (1, 7, 17, 4095; K not a multiple of BK), and split-K, forced
/// and as the table plans it (few output tiles over a long K), aligned and checked.
#[test]
fn tensor_core_matmul_interior_edge_and_split_k_variants_match_f64_reference() {
    use DType::{F16 as H, F32 as F};
    const LAYOUTS: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];
    for edge in [8, 16] {
        let Some(base) = coop_ctx(edge, "tensor-core matmul variants against f64") else {
            continue;
        };
        let every_tile = every_tile_ctx(base);
        let ctx = &every_tile;
        let what = format!("coop {edge}x{edge}");
        let mut seed = 500;
        let mut run = |case: Case, split: Option<u32>| {
            seed += 1;
            let (shape, trans, dts, bias, acc, _) = case;
            check_split(
                &what,
                ctx,
                MatmulKernel::Coop,
                (shape, trans, dts, bias, acc, seed),
                split,
            );
        };
        // Interior: every side a whole number of 64-wide tiles, K of 32-deep slices.
        for trans in LAYOUTS {
            run(((128, 64, 96), trans, (H, H, F), None, false, 0), None); // direct store
            run(((128, 64, 96), trans, (H, H, H), Some(H), false, 0), None);
            run(((64, 128, 64), trans, (H, H, F), Some(F), true, 0), None);
        }
        // Trusted (no runtime checks): the range invariant, inside guard bands.
        for trans in LAYOUTS {
            check_guarded(
                &what,
                ctx,
                MatmulKernel::Coop,
                ((128, 64, 96), trans, (H, H, F), None, false, 9),
            );
            check_guarded(
                &what,
                ctx,
                MatmulKernel::Coop,
                ((64, 128, 64), trans, (H, H, H), None, false, 9),
            );
        }
        // The large tile, interior: straight to memory, and through the epilogue.
        run(
            ((512, 512, 32), (false, false), (H, H, F), None, false, 0),
            None,
        );
        run(
            ((512, 512, 32), (true, true), (H, H, H), Some(H), false, 0),
            None,
        );
        // Edges at awkward sizes.
        for trans in LAYOUTS {
            run(((4095, 7, 17), trans, (H, H, H), Some(F), false, 0), None);
        }
        run(
            ((1, 4095, 9), (false, true), (H, H, F), None, true, 0),
            None,
        );
        run(((7, 17, 1), (true, false), (H, H, F), None, false, 0), None);
        // Split-K: few output tiles over a long K split as the table says (checked, K odd),
        // and forced: aligned (partial sums stored straight to memory), checked, with bias
        // and accumulation applied once by the reduction.
        run(
            ((7, 17, 4095), (true, false), (H, H, F), None, true, 0),
            None,
        );
        run(
            ((64, 64, 256), (false, false), (H, H, F), None, false, 0),
            Some(4),
        );
        run(
            ((64, 64, 256), (true, true), (H, H, H), Some(H), true, 0),
            Some(2),
        );
        run(
            ((65, 70, 300), (false, true), (H, H, F), Some(F), true, 0),
            Some(3),
        );
    }
}

/// Laid out for subgroups twice the adapter's (what RDNA3 meets when its kernels, laid out for
/// 64 lanes, run on a driver that picks 32): twice the subgroups the tile has, the extra ones
/// only staging, and every layout, the interior and edge variants, the straight-to-memory
/// store and split-K still match the reference.
#[test]
fn tensor_core_matmul_is_correct_on_subgroups_smaller_than_its_layout() {
    use DType::{F16 as H, F32 as F};
    for edge in [8, 16] {
        let Some(base) = coop_ctx(edge, "tensor-core matmul on smaller subgroups") else {
            continue;
        };
        let lanes = 2 * base.caps.tensor_cores.config().expect("used").subgroup;
        let wide = base.with_coop_subgroup_layout(lanes);
        assert_eq!(
            wide.caps.tensor_cores.config().map(|c| c.subgroup),
            Some(lanes)
        );
        let what = format!("coop {edge}x{edge} laid out for {lanes} lanes");
        let mut seed = 900;
        for trans in [(false, false), (true, false), (false, true), (true, true)] {
            seed += 1;
            let interior: Case = ((128, 64, 96), trans, (H, H, F), None, false, seed);
            check_split(&what, &wide, MatmulKernel::Coop, interior, None);
            let edges: Case = ((65, 70, 33), trans, (H, H, H), Some(F), false, seed);
            check_split(&what, &wide, MatmulKernel::Coop, edges, None);
        }
        let split: Case = ((64, 64, 256), (false, false), (H, H, F), None, false, 3);
        check_split(&what, &wide, MatmulKernel::Coop, split, Some(2));
    }
}

/// The same product twice gives the same bits (no atomics, a fixed order in every fragment).
#[test]
fn tensor_core_matmul_is_bit_identical_run_to_run() {
    for edge in [8, 16] {
        let Some(ctx) = coop_ctx(edge, "tensor-core matmul determinism") else {
            continue;
        };
        // Edge variant; interior with stores straight to memory; split-K (checked, and
        // aligned with partial sums stored straight to memory).
        for ((m, n, k), split) in [
            ((70, 130, 90), None),
            ((128, 64, 96), None),
            ((70, 30, 900), Some(5)),
            ((64, 64, 256), Some(4)),
        ] {
            let a = common::matmul_ref::quantised(m * k, 1, DType::F16);
            let b = common::matmul_ref::quantised(k * n, 2, DType::F16);
            let a = Tensor::from_f32(ctx, &a, &[m, k], DType::F16).unwrap();
            let b = Tensor::from_f32(ctx, &b, &[k, n], DType::F16).unwrap();
            let run = || {
                let c = Tensor::zeros(ctx, &[m, n], DType::F32);
                let opts = MatmulOpts {
                    split_k: split,
                    ..Default::default()
                };
                let kern = matmul_with(ctx, &a, &b, &c, opts, MatmulKernel::Coop);
                ctx.run(&[&kern.unwrap()]);
                common::bits(&c.read_f32(ctx).unwrap())
            };
            let first = run();
            let what = format!("{edge}x{edge} {m}x{n}x{k} split {split:?}");
            assert!(first.iter().any(|&v| v != 0), "{what}: all zero");
            assert_eq!(first, run(), "{what}: two runs differ");
        }
    }
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
/// `info` prints): native f16 on cooperative matrices wherever tensor cores are used (a CPU
/// adapter only under `--tensor-cores on`); otherwise CPU adapters the direct body and GPUs
/// the tiled SIMT body. bf16, packed f16 and mixed inputs never run on tensor cores.
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
    let used = TensorCores::Used(TensorCoreConfig {
        edge: 16,
        subgroup: 32,
        subgroup_min: 32,
        forced: false,
    });
    for (cpu, simt) in [(true, MatmulKernel::Direct), (false, MatmulKernel::Tiled)] {
        caps.cpu_adapter = cpu;
        caps.tensor_cores = TensorCores::NotUsed("CPU adapter".into());
        for s in storages {
            assert_eq!(MatmulKernel::Auto.resolve_for(&caps, s, s), simt);
        }
        caps.tensor_cores = used.clone();
        for s in storages {
            let want = if s == Storage::F16 {
                MatmulKernel::Coop
            } else {
                simt
            };
            assert_eq!(MatmulKernel::Auto.resolve_for(&caps, s, s), want, "{s:?}");
        }
        // Mixed inputs (an f16 activation times an f32 weight) stay on SIMT.
        let mixed = MatmulKernel::Auto.resolve_for(&caps, Storage::F16, Storage::F32);
        assert_eq!(mixed, simt);
        // The same resolver picks the convolutions' and the softmax's bodies.
        for s in storages {
            let conv = bodies::conv(&caps, &[s, s]);
            let want = if s == Storage::F16 {
                ConvBody::Coop
            } else {
                ConvBody::Simt
            };
            assert_eq!(conv, want, "{s:?}");
        }
        let softmax = bodies::softmax(&caps);
        let want = if cpu {
            SoftmaxBody::Rowwise
        } else {
            SoftmaxBody::Workgroup
        };
        assert_eq!(softmax, want);
        assert_eq!(
            webgpu_amp::ops::flash_attention::FlashBody::Auto
                .resolve(&caps, &[Storage::F32], 64)
                .name(),
            if cpu { "rowwise" } else { "tiled" }
        );
    }
}
