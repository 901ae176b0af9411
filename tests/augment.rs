//! GPU augmentation against its CPU twin, bit for bit, on every storage: random crop with zero
//! and reflect padding, random and alternating flips, the flip of flip test-time augmentation
//! and its average; the same bits run to run, other batches for another seed or epoch, an
//! image's draws independent of the batch it is in, and the state rewritten between submits of
//! one planned kernel. Training on augmented images through the trainer matches training on
//! the CPU twin's images bit for bit, and flip test-time augmentation scores the averaged
//! logits as the CPU does; counted numerics see the augmented batch, not the augment kernel.

mod common;

use common::values::{quantised, run, storages, upload, upload_u32};
use common::{bits, ctx, expect_err, rand_vec};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::nn::{LossKind, ModelSpec};
use webgpu_amp::ops::augment::{
    self, Augment, AugmentState, Crop, Flip, Padding, Transform, transform,
};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};
use webgpu_amp::{DType, GpuContext, Tensor};

/// `x [N, C, H, W]` augmented on the CPU from [`transform`]'s draws.
fn augment_ref(
    x: &[f32],
    shape: [usize; 4],
    aug: &Augment,
    seed: u64,
    epoch: u32,
    ids: &[u32],
) -> Vec<f32> {
    let [n, c, h, w] = shape;
    let reflect = aug.crop.is_some_and(|k| k.padding == Padding::Reflect);
    let source = |o: usize, shift: i32, size: usize| -> Option<usize> {
        let s = o as i32 + shift;
        let n = size as i32;
        if (0..n).contains(&s) {
            return Some(s as usize);
        }
        if !reflect {
            return None;
        }
        let s = s.abs();
        Some(if s >= n { 2 * (n - 1) - s } else { s } as usize)
    };
    let mut y = Vec::with_capacity(x.len());
    for (img, &id) in ids.iter().enumerate().take(n) {
        let Transform {
            shift_y,
            shift_x,
            flip,
        } = transform(aug, seed, epoch, id);
        for ch in 0..c {
            for r in 0..h {
                for col in 0..w {
                    let col = if flip { w - 1 - col } else { col };
                    let v = match (source(r, shift_y, h), source(col, shift_x, w)) {
                        (Some(sr), Some(sc)) => x[((img * c + ch) * h + sr) * w + sc],
                        _ => 0.0,
                    };
                    y.push(v);
                }
            }
        }
    }
    y
}

fn gpu_augment(
    ctx: &GpuContext,
    (xv, shape, dtype): (&[f32], [usize; 4], DType),
    aug: &Augment,
    (seed, epoch): (u64, u32),
    ids: &[u32],
) -> Vec<f32> {
    let x = upload(ctx, xv, &shape, dtype);
    let y = Tensor::zeros(ctx, &shape, dtype);
    let state = AugmentState::new(ctx);
    state.write(ctx, seed, epoch);
    let k = augment::augment(ctx, (&x, &y), aug, &state, &upload_u32(ctx, ids)).unwrap();
    run(ctx, &[k]);
    y.read_f32(ctx).unwrap()
}

fn every_augment() -> Vec<Augment> {
    let crop = |pad, padding| Some(Crop { pad, padding });
    vec![
        Augment {
            crop: crop(4, Padding::Zeros),
            flip: Flip::Random,
        },
        Augment {
            crop: crop(2, Padding::Reflect),
            flip: Flip::Alternating,
        },
        Augment {
            crop: crop(3, Padding::Reflect),
            flip: Flip::None,
        },
        Augment {
            crop: None,
            flip: Flip::Random,
        },
        Augment {
            crop: None,
            flip: Flip::All,
        },
    ]
}

#[test]
fn every_augmentation_matches_its_cpu_twin_on_every_storage() {
    // Odd width: packed words straddle rows and images.
    let shape = [5, 3, 6, 7];
    let ids = [17, 3, 2024, 0, 99];
    for (name, ctx, dtype) in storages() {
        let xv = quantised(shape.iter().product(), 1, 3.0, dtype);
        for aug in every_augment() {
            for epoch in [0, 1, 6] {
                let got = gpu_augment(ctx, (&xv, shape, dtype), &aug, (42, epoch), &ids);
                let want = augment_ref(&xv, shape, &aug, 42, epoch, &ids);
                assert_eq!(bits(&got), bits(&want), "{name} {aug:?} epoch {epoch}");
            }
        }
    }
}

#[test]
fn draws_are_uniform_over_shifts_and_fair_flips() {
    // The twin's statistics over many images (the GPU matches it bit for bit above).
    let aug = Augment {
        crop: Some(Crop {
            pad: 4,
            padding: Padding::Zeros,
        }),
        flip: Flip::Random,
    };
    let mut counts = [0usize; 9];
    let mut flips = 0;
    let n = 9000;
    for id in 0..n {
        let t = transform(&aug, 7, 0, id);
        counts[(t.shift_y + 4) as usize] += 1;
        flips += t.flip as usize;
    }
    for (shift, &k) in counts.iter().enumerate() {
        assert!(
            (850..1150).contains(&k),
            "shift {}: {k} of {n}",
            shift as i32 - 4
        );
    }
    assert!((4300..4700).contains(&flips), "{flips} flips of {n}");
}

#[test]
fn alternating_flip_flips_every_image_on_alternate_epochs() {
    let aug = Augment {
        crop: None,
        flip: Flip::Alternating,
    };
    let mut flipped_at_0 = 0;
    for id in 0..1000 {
        let at = |epoch| transform(&aug, 5, epoch, id).flip;
        assert_ne!(at(0), at(1), "image {id}");
        assert_eq!(at(0), at(2), "image {id}");
        assert_eq!(at(1), at(7), "image {id}");
        flipped_at_0 += at(0) as usize;
    }
    assert!(
        (430..570).contains(&flipped_at_0),
        "{flipped_at_0} of 1000 flipped at epoch 0"
    );
}

#[test]
fn same_bits_run_to_run_and_other_batches_for_another_seed_or_epoch() {
    let ctx = ctx();
    let shape = [8, 3, 16, 16];
    let ids: Vec<u32> = (100..108).collect();
    let xv = rand_vec(shape.iter().product(), 2);
    let aug = every_augment()[0];
    let run_with = |seed, epoch| {
        bits(&gpu_augment(
            ctx,
            (&xv, shape, DType::F32),
            &aug,
            (seed, epoch),
            &ids,
        ))
    };
    let first = run_with(1, 0);
    assert_eq!(first, run_with(1, 0), "same seed and epoch: same bits");
    assert_ne!(first, run_with(2, 0), "another seed: another batch");
    assert_ne!(first, run_with(1, 1), "another epoch: another batch");
    assert_ne!(first, bits(&xv), "the batch was augmented");
}

#[test]
fn an_image_is_augmented_the_same_in_any_batch() {
    // Keyed by the image's data-set index: batch size and position do not matter.
    let ctx = ctx();
    let (c, h, w) = (2, 5, 5);
    let aug = every_augment()[1];
    let images: Vec<Vec<f32>> = (0..4).map(|i| rand_vec(c * h * w, 10 + i)).collect();
    let one = gpu_augment(
        ctx,
        (&images[2], [1, c, h, w], DType::F32),
        &aug,
        (9, 3),
        &[52],
    );
    let all: Vec<f32> = images.concat();
    let four = gpu_augment(
        ctx,
        (&all, [4, c, h, w], DType::F32),
        &aug,
        (9, 3),
        &[50, 51, 52, 53],
    );
    assert_eq!(bits(&one), bits(&four[2 * c * h * w..3 * c * h * w]));
}

#[test]
fn one_planned_kernel_follows_the_state_written_before_each_submit() {
    let ctx = ctx();
    let shape = [3, 1, 4, 6];
    let ids = [4, 5, 6];
    let xv = rand_vec(shape.iter().product(), 3);
    let aug = every_augment()[0];
    let x = upload(ctx, &xv, &shape, DType::F32);
    let y = Tensor::zeros(ctx, &shape, DType::F32);
    let state = AugmentState::new(ctx);
    let k = augment::augment(ctx, (&x, &y), &aug, &state, &upload_u32(ctx, &ids)).unwrap();
    for (seed, epoch) in [(1, 0), (1, 1), (8, 5)] {
        state.write(ctx, seed, epoch);
        ctx.run(&[&k]);
        let want = augment_ref(&xv, shape, &aug, seed, epoch, &ids);
        assert_eq!(
            bits(&y.read_f32(ctx).unwrap()),
            bits(&want),
            "seed {seed} epoch {epoch}"
        );
    }
}

#[test]
fn flip_test_time_augmentation_averages_x_and_its_flip() {
    for (name, ctx, dtype) in storages() {
        let shape = [2, 3, 4, 5];
        let xv = quantised(shape.iter().product(), 4, 2.0, dtype);
        let x = upload(ctx, &xv, &shape, dtype);
        let flipped = Tensor::zeros(ctx, &shape, dtype);
        run(ctx, &[augment::flip_all(ctx, &x, &flipped).unwrap()]);
        let want = augment_ref(
            &xv,
            shape,
            &Augment {
                crop: None,
                flip: Flip::All,
            },
            0,
            0,
            &[0, 1],
        );
        assert_eq!(
            bits(&flipped.read_f32(ctx).unwrap()),
            bits(&want),
            "{name} flip"
        );
        // Logits of x and of its flip, averaged in f32 and stored in the output's storage.
        for out_dtype in [dtype, DType::F32] {
            let (av, bv) = (quantised(10, 5, 4.0, dtype), quantised(10, 6, 4.0, dtype));
            let (a, b) = (
                upload(ctx, &av, &[2, 5], dtype),
                upload(ctx, &bv, &[2, 5], dtype),
            );
            let out = Tensor::zeros(ctx, &[2, 5], out_dtype);
            run(ctx, &[augment::average(ctx, &a, &b, &out).unwrap()]);
            let want: Vec<f32> = av
                .iter()
                .zip(&bv)
                .map(|(a, b)| out_dtype.round(0.5 * a + 0.5 * b))
                .collect();
            assert_eq!(
                bits(&out.read_f32(ctx).unwrap()),
                bits(&want),
                "{name} average into {out_dtype}"
            );
        }
    }
}

#[test]
fn rejects_bad_batches_and_settings() {
    let ctx = ctx();
    let x = Tensor::zeros(ctx, &[2, 1, 4, 4], DType::F32);
    let y = Tensor::zeros(ctx, &[2, 1, 4, 4], DType::F32);
    let state = AugmentState::new(ctx);
    let ids = upload_u32(ctx, &[0, 1]);
    let reflect = Augment {
        crop: Some(Crop {
            pad: 4,
            padding: Padding::Reflect,
        }),
        flip: Flip::None,
    };
    expect_err(
        augment::augment(ctx, (&x, &y), &reflect, &state, &ids),
        &["reflect padding 4 must be less than"],
    );
    let flat = Tensor::zeros(ctx, &[2, 16], DType::F32);
    expect_err(
        augment::augment(
            ctx,
            (&flat, &flat.clone()),
            &Augment::default(),
            &state,
            &ids,
        ),
        &["must be 4-D"],
    );
    // Zero padding may be as wide as the image.
    let zeros = Augment {
        crop: Some(Crop {
            pad: 4,
            padding: Padding::Zeros,
        }),
        flip: Flip::Random,
    };
    assert!(augment::augment(ctx, (&x, &y), &zeros, &state, &ids).is_ok());
    let one_id = upload_u32(ctx, &[0]);
    expect_err(
        augment::augment(ctx, (&x, &y), &zeros, &state, &one_id),
        &["fewer than 2 u32 indices"],
    );
    expect_err(
        augment::augment(ctx, (&x, &x.clone()), &zeros, &state, &ids),
        &["does not run in place"],
    );
    let small = Tensor::zeros(ctx, &[3], DType::F32);
    expect_err(
        augment::average(
            ctx,
            &small,
            &small.clone(),
            &Tensor::zeros(ctx, &[4], DType::F32),
        ),
        &["the shapes must agree"],
    );
}

// Training on augmented images (`Trainer::set_augmentation`): the step's first kernel.

const TINY_CNN: &str = r#"{"input": [2, 6, 6], "layers": [
    {"conv2d": {"out": 3, "kernel": 3, "padding": 1}}, {"relu": {}},
    {"flatten": {}}, {"linear": {"out": 4}}]}"#;
const TRAIN_BATCH: usize = 5;
/// The data-set indices of the trainer tests' batch.
const SAMPLE_IDS: [u32; TRAIN_BATCH] = [7, 0, 41, 3, 19];

/// A random crop from `pad` pixels of `padding`, then a random flip.
fn crop_and_flip(pad: usize, padding: Padding) -> Augment {
    Augment {
        crop: Some(Crop { pad, padding }),
        flip: Flip::Random,
    }
}

/// An f32 SGD trainer of [`TINY_CNN`] from seed 3's initial weights.
fn tiny_trainer() -> Trainer {
    tiny_trainer_at(Precision::F32, None)
}

/// [`tiny_trainer`] under `precision`, counting numerics every `numerics` steps.
fn tiny_trainer_at(precision: Precision, numerics: Option<u64>) -> Trainer {
    let spec = ModelSpec::from_json(TINY_CNN).unwrap();
    let init = spec.init_params(3);
    let config = StepConfig::new(precision, LossKind::CrossEntropy, OptimizerConfig::sgd(0.1))
        .numerics(numerics);
    Trainer::new(ctx(), spec, config, 4, &init).unwrap()
}

/// The parameters after two f32 SGD steps on `x` (epochs 0 and 1, data-set indices `ids`),
/// augmented on the GPU by `aug` drawn from `seed` (`None`: `x` as it is).
fn trained(x: &[[f32; TRAIN_BATCH * 72]; 2], ids: &[u32], aug: Option<(Augment, u64)>) -> Vec<u32> {
    let mut trainer = tiny_trainer();
    trainer.set_augmentation(ctx(), aug.map(|a| a.0), aug.map_or(0, |a| a.1));
    let labels: Vec<u32> = (0..TRAIN_BATCH as u32).map(|i| i % 4).collect();
    for (epoch, x) in x.iter().enumerate() {
        trainer.set_samples(ids, epoch as u64);
        let targets = BatchTargets::Classes(&labels);
        trainer
            .train_batch(ctx(), TRAIN_BATCH, &x[..], targets)
            .unwrap();
    }
    trainer.finish(ctx()).unwrap();
    let params = trainer.store.download(ctx()).unwrap();
    params.into_iter().flat_map(|(_, v)| bits(&v)).collect()
}

#[test]
fn training_augments_each_batch_as_the_cpu_twin_and_another_seed_trains_otherwise() {
    let shape = [TRAIN_BATCH, 2, 6, 6];
    let x = [
        rand_vec(TRAIN_BATCH * 72, 21),
        rand_vec(TRAIN_BATCH * 72, 22),
    ];
    let x: [[f32; TRAIN_BATCH * 72]; 2] = x.map(|v| v.try_into().unwrap());
    let (ids, aug) = (SAMPLE_IDS, crop_and_flip(2, Padding::Zeros));
    let on_gpu = trained(&x, &ids, Some((aug, 5)));
    // The same step on the CPU twin's images, uploaded as they are: the same bits.
    let twin = [0, 1].map(|e| {
        let y = augment_ref(&x[e], shape, &aug, 5, e as u32, &ids);
        assert_ne!(
            bits(&y),
            bits(&x[e]),
            "epoch {e}: the draws changed nothing"
        );
        y.try_into().unwrap()
    });
    assert_eq!(
        on_gpu,
        trained(&twin, &ids, None),
        "GPU augmentation != the CPU twin's"
    );
    assert_ne!(
        on_gpu,
        trained(&x, &ids, None),
        "augmentation changed no parameter"
    );
    // The same bits run to run; another seed draws other crops and flips.
    assert_eq!(on_gpu, trained(&x, &ids, Some((aug, 5))));
    assert_ne!(on_gpu, trained(&x, &ids, Some((aug, 6))));
}

#[test]
fn training_with_augmentation_needs_each_batchs_samples() {
    let mut trainer = tiny_trainer();
    let aug = Augment {
        crop: None,
        flip: Flip::Alternating,
    };
    trainer.set_augmentation(ctx(), Some(aug), 0);
    let x = rand_vec(TRAIN_BATCH * 72, 1);
    let labels = [0u32; TRAIN_BATCH];
    let step =
        |t: &mut Trainer| t.train_batch(ctx(), TRAIN_BATCH, &x[..], BatchTargets::Classes(&labels));
    expect_err(step(&mut trainer), &["data-set indices and epoch first"]);
    trainer.set_samples(&[1, 2], 0);
    expect_err(step(&mut trainer), &["2 sample ids for a batch of 5"]);
}

#[test]
fn flip_tta_validates_on_the_average_of_the_logits_of_x_and_its_mirror_image() {
    use webgpu_amp::train::evaluate::{evaluate, predict};
    let mut trainer = tiny_trainer();
    let x = rand_vec(TRAIN_BATCH * 72, 31);
    let labels: Vec<u32> = (0..TRAIN_BATCH as u32).map(|i| (i * 3) % 4).collect();
    let batches = || [(TRAIN_BATCH, x.clone(), BatchTargets::Classes(&labels))];
    let plain = evaluate(ctx(), &mut trainer, batches()).unwrap();
    // The reference: both forwards read back, averaged and scored on the CPU.
    let all = Augment {
        crop: None,
        flip: Flip::All,
    };
    let ids: Vec<u32> = (0..TRAIN_BATCH as u32).collect();
    let mirrored = augment_ref(&x, [TRAIN_BATCH, 2, 6, 6], &all, 0, 0, &ids);
    let a = predict(ctx(), &mut trainer, TRAIN_BATCH, &x[..]).unwrap();
    let b = predict(ctx(), &mut trainer, TRAIN_BATCH, &mirrored[..]).unwrap();
    let (mut loss, mut correct) = (0.0f64, 0);
    for (row, &label) in labels.iter().enumerate() {
        let z: Vec<f64> = (0..4)
            .map(|k| 0.5 * a[row * 4 + k] as f64 + 0.5 * b[row * 4 + k] as f64)
            .collect();
        let max = z.iter().cloned().fold(f64::MIN, f64::max);
        let lse = max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        loss += lse - z[label as usize];
        correct += usize::from(z[label as usize] == max);
    }
    let loss = loss / TRAIN_BATCH as f64;
    trainer.set_flip_tta(true);
    let tta = evaluate(ctx(), &mut trainer, batches()).unwrap();
    assert!(
        (tta.loss as f64 - loss).abs() <= 1e-5 * loss.abs().max(1.0),
        "flip TTA loss {} != the CPU's {loss}",
        tta.loss
    );
    assert_eq!(tta.accuracy, Some(correct as f32 / TRAIN_BATCH as f32));
    assert_ne!(tta.loss, plain.loss, "the mirror image changed nothing");
    // Off again: the plain evaluation's bits.
    trainer.set_flip_tta(false);
    let again = evaluate(ctx(), &mut trainer, batches()).unwrap();
    assert_eq!(again.loss.to_bits(), plain.loss.to_bits());
}

#[test]
fn counted_numerics_see_the_augmented_batch_not_the_augmentation() {
    // The augment kernel comes first in the forward but is no layer: the counting passes
    // must still sit after each layer, so the counts equal those of the CPU twin's images.
    let x = rand_vec(TRAIN_BATCH * 72, 41);
    let (ids, aug) = (SAMPLE_IDS, crop_and_flip(1, Padding::Reflect));
    let counted = |x: &[f32], aug: Option<Augment>| {
        let mut trainer = tiny_trainer_at(Precision::AmpF16, Some(1));
        trainer.set_augmentation(ctx(), aug, 5);
        trainer.set_samples(&ids, 0);
        let labels: Vec<u32> = (0..TRAIN_BATCH as u32).map(|i| i % 4).collect();
        let targets = BatchTargets::Classes(&labels);
        trainer.train_batch(ctx(), TRAIN_BATCH, x, targets).unwrap();
        let stats = trainer.finish(ctx()).unwrap();
        trainer
            .take_numerics(stats[0].step)
            .expect("step 1 was counted")
    };
    let twin = augment_ref(&x, [TRAIN_BATCH, 2, 6, 6], &aug, 5, 0, &ids);
    let on_gpu = counted(&x, Some(aug));
    assert!(!on_gpu.records.is_empty());
    assert_eq!(on_gpu, counted(&twin, None));
}
