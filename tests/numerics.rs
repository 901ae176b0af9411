//! The AMP doctor's counting pass (`ops::numerics`) against its CPU reference, on every
//! storage a tensor may be kept in (f32, native f16, packed f16, bf16), over values at the
//! edges of the low dtype's range (the overflow threshold before rounding, the last
//! subnormal, f32 subnormals, inf, NaN, signed zeros), in a view that starts inside its
//! buffer, over many workgroups; and the same bits run to run.

mod common;

use std::sync::Arc;

use webgpu_amp::GpuContext;
use webgpu_amp::gpu::{GpuBuffer, Kernel};
use webgpu_amp::ops::numerics::{
    BINS, MAX_SEGMENTS, RECORD_WORDS, TensorCounts, count, count_all, count_cpu,
};
use webgpu_amp::tensor::{DType, Storage, Tensor};

/// Values at every edge the counters draw, then `n` gradient-like values over many binades.
fn edge_values(n: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        65504.0,
        -65504.0,
        65519.0,
        65520.0,
        -65520.0,
        70000.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        6.103_515_6e-5,              // 2^-14, f16's smallest normal
        f32::from_bits(0x387f_e000), // 2^-14 - 2^-25: rounds up to 2^-14 (ties to even)
        f32::from_bits(0x387f_dfff), // just below it: a subnormal in f16
        5.960_464_5e-8,              // 2^-24, f16's smallest subnormal
        1e-8,                        // rounds to zero in f16
        1e-39,                       // an f32 subnormal
        -1e-45,                      // the smallest f32 subnormal
        f32::MAX,
        f32::from_bits(0x7f7f_8000), // rounds to inf in bf16 (ties to even)
        f32::from_bits(0x7f7f_7fff), // rounds to bf16's largest finite value
        1e-38,                       // an f32 subnormal: a subnormal in bf16 too
    ];
    let m = common::rand_vec(n, seed);
    let e = common::rand_vec(n, seed + 1);
    v.extend(m.iter().zip(&e).map(|(&m, &e)| m * (e * 40.0).exp2()));
    v
}

/// The words of `counts` after the pass `k` into it, zeroed first, run twice: both runs must
/// give the same words.
fn counted_twice(ctx: &GpuContext, k: &Kernel, counts: &GpuBuffer) -> Vec<u32> {
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut encoder = ctx.device.create_command_encoder(&Default::default());
        encoder.clear_buffer(counts.raw(), 0, None);
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            k.encode(&mut pass);
        }
        ctx.queue.submit([encoder.finish()]);
        let bytes = ctx.read_bytes(counts, 0, counts.size()).unwrap();
        runs.push(bytemuck::cast_slice::<u8, u32>(&bytes).to_vec());
    }
    assert_eq!(runs[0], runs[1], "the counts differ run to run");
    runs.swap_remove(0)
}

/// Run one counting pass over `t` (with the binade histogram or not) into record 1 of a fresh counts buffer (record 0 and 2
/// must stay zero), twice; both runs must give the same words.
fn gpu_count(ctx: &GpuContext, t: &Tensor, low: DType, histogram: bool) -> TensorCounts {
    let counts: Arc<GpuBuffer> = ctx.alloc_storage("counts", 4 * 3 * RECORD_WORDS as u64);
    let k = count(ctx, t, &counts, 1, (low, histogram)).unwrap();
    let words = &counted_twice(ctx, &k, &counts);
    let (before, rest) = words.split_at(RECORD_WORDS);
    let (record, after) = rest.split_at(RECORD_WORDS);
    assert!(
        before.iter().chain(after).all(|&w| w == 0),
        "a pass wrote outside its record"
    );
    TensorCounts::from_words(record).unwrap()
}

/// `values` stored in `storage` in a view 256 bytes into its buffer; the GPU's counts
/// against the CPU's over the values read back.
fn check(ctx: &GpuContext, storage: Storage, values: &[f32], low: DType) {
    let offset = 256u64;
    let bytes = offset + storage.bytes_for(values.len()).next_multiple_of(4);
    let buffer = ctx.alloc_storage("values", bytes);
    let t = Tensor::view(ctx, buffer, offset, &[values.len()], storage).unwrap();
    t.write_f32(ctx, values).unwrap();
    let stored = t.read_f32(ctx).unwrap();
    let want = count_cpu(&stored, low);
    let got = gpu_count(ctx, &t, low, true);
    assert_eq!(
        got,
        want,
        "{} counted against {low}: GPU {got:?}\nCPU {want:?}",
        storage.name()
    );
    // The pass saw every element and something of every class the edges hold.
    assert_eq!(got.elements, values.len() as u64);
    assert!(
        got.non_finite >= 4 && got.nan >= 2 && got.zero >= 2,
        "{got:?}"
    );
    assert!(got.overflow > 0, "{got:?}");
    // f16 values hold nothing below bf16's normal range.
    let f16_as_bf16 = storage.dtype() == DType::F16 && low == DType::BF16;
    assert!(got.underflow > 0 || f16_as_bf16, "{got:?}");
    assert_eq!(got.binades.len(), BINS + 2);
    // Without the histogram (the command line's passes): the same counts, no bins.
    let plain = gpu_count(ctx, &t, low, false);
    assert!(plain.binades.iter().all(|&b| b == 0), "{plain:?}");
    let no_bins = TensorCounts {
        binades: vec![0; BINS + 2],
        ..want
    };
    assert_eq!(plain, no_bins, "{} without the histogram", storage.name());
}

#[test]
fn f32_values_counted_against_f16_and_bf16() {
    let ctx = common::ctx();
    let values = edge_values(5000, 1);
    check(ctx, Storage::F32, &values, DType::F16);
    check(ctx, Storage::F32, &values, DType::BF16);
    // The thresholds are where the stores round: 65519 stays finite in f16, 65520 does not.
    let c = count_cpu(&[65519.0, 65520.0, 2e-5], DType::F16);
    assert_eq!((c.overflow, c.underflow), (1, 1));
    let c = count_cpu(
        &[
            f32::from_bits(0x7f7f_7fff),
            f32::from_bits(0x7f7f_8000),
            1e-38,
        ],
        DType::BF16,
    );
    assert_eq!((c.overflow, c.underflow), (1, 1));
}

#[test]
fn native_f16_values_counted_exactly() {
    let ctx = common::ctx_native();
    let storage = ctx.storage_for(DType::F16);
    check(ctx, storage, &edge_values(5000, 2), DType::F16);
}

#[test]
fn packed_f16_values_counted_exactly() {
    let ctx = common::ctx_packed();
    assert_eq!(ctx.storage_for(DType::F16), Storage::F16Packed);
    check(ctx, Storage::F16Packed, &edge_values(5000, 3), DType::F16);
    // An odd length: the last word holds one element.
    check(ctx, Storage::F16Packed, &edge_values(4001, 4), DType::F16);
    // f16 values counted against another range are widened first.
    check(ctx, Storage::F16Packed, &edge_values(3001, 7), DType::BF16);
}

#[test]
fn bf16_values_counted_exactly() {
    let ctx = common::ctx();
    check(ctx, Storage::BF16, &edge_values(5000, 5), DType::BF16);
    // bf16 values against f16's thresholds (a bound between two bf16 values).
    check(ctx, Storage::BF16, &edge_values(3003, 8), DType::F16);
}

/// Tensors too short to hold four whole words (the fast loops' 16-byte loads) are counted
/// by the general loop alone, in every storage; a lone scalar's 4-byte buffer too (its
/// 16-byte binding is a placeholder).
#[test]
fn tensors_without_a_whole_quad_are_counted_exactly() {
    for ctx in [common::ctx_native(), common::ctx_packed()] {
        for storage in [Storage::F32, ctx.storage_for(DType::F16), Storage::BF16] {
            for values in [
                &[f32::INFINITY, 1e-8, 0.0][..],
                &[70000.0],
                &[-3.0, f32::NAN],
            ] {
                let t =
                    Tensor::from_f32_with_storage(ctx, values, &[values.len()], storage).unwrap();
                let low = if storage == Storage::BF16 {
                    DType::BF16
                } else {
                    DType::F16
                };
                let want = count_cpu(&t.read_f32(ctx).unwrap(), low);
                for histogram in [false, true] {
                    let mut got = gpu_count(ctx, &t, low, histogram);
                    if !histogram {
                        got.binades.clone_from(&want.binades);
                    }
                    assert_eq!(got, want, "{} {values:?}", storage.name());
                }
            }
        }
    }
}

#[test]
fn many_workgroups_add_up() {
    // More elements than 64 workgroups of 256 threads cover in one sweep.
    let ctx = common::ctx();
    let values = edge_values(200_000, 6);
    check(ctx, Storage::F32, &values, DType::F16);
}

#[test]
fn token_ids_are_refused() {
    let ctx = common::ctx();
    let ids = Tensor::zeros_with_storage(ctx, &[4], Storage::U32);
    let counts = ctx.alloc_storage("counts", 4 * RECORD_WORDS as u64);
    let what = (DType::F16, true);
    common::expect_err(count(ctx, &ids, &counts, 0, what), &["integer"]);
    let x = Tensor::zeros(ctx, &[4], DType::F32);
    common::expect_err(count(ctx, &x, &counts, 1, what), &["past the end"]);
}

/// One pass over several tensors: views of odd lengths (one of several workgroups) into three buffers, in f32, f16 and
/// bf16, two of them adding into one record (a weight and its bias), each record as the
/// CPU counts its tensors; against f16's and bf16's range, with and without the histogram,
/// on native and packed f16, the same words twice, and nothing outside the records.
#[test]
fn one_pass_counts_many_tensors_each_into_its_record() {
    for ctx in [common::ctx_native(), common::ctx_packed()] {
        let f16 = ctx.storage_for(DType::F16);
        // (buffer, storage, element offset (256-byte aligned, as views are), elements, record)
        let layout = [
            (0, Storage::F32, 0, 300_000, 0),
            (0, Storage::F32, 300_032, 37, 2),
            (1, f16, 0, 2049, 1),
            (1, f16, 2176, 3, 3),
            (2, Storage::BF16, 0, 777, 2),
            (2, Storage::BF16, 1024, 1, 4),
        ];
        // The first tensor takes several workgroups on any adapter; the others one or two.
        let buffers =
            [4 * 300_100, 4 * 1100, 4 * 1100 + 4].map(|bytes| ctx.alloc_storage("values", bytes));
        let mut tensors = Vec::new();
        for (i, &(b, storage, at, n, record)) in layout.iter().enumerate() {
            let offset = storage.bytes_for(at);
            let t = Tensor::view(ctx, buffers[b].clone(), offset, &[n], storage).unwrap();
            t.write_f32(ctx, &edge_values(n, 20 + i as u64)[..n])
                .unwrap();
            tensors.push((t, record));
        }
        let counts = ctx.alloc_storage("counts", 4 * 6 * RECORD_WORDS as u64);
        for low in [DType::F16, DType::BF16] {
            // Read back after every write: packed halves share words with their neighbours.
            let mut want = vec![TensorCounts::default(); 6];
            for (t, record) in &tensors {
                want[*record].merge(&count_cpu(&t.read_f32(ctx).unwrap(), low));
            }
            let refs: Vec<(&Tensor, usize)> = tensors.iter().map(|(t, r)| (t, *r)).collect();
            for histogram in [false, true] {
                let k = count_all(ctx, &refs, &counts, (low, histogram)).unwrap();
                let words = counted_twice(ctx, &k, &counts);
                for (record, want) in want.iter().enumerate() {
                    let words = &words[record * RECORD_WORDS..(record + 1) * RECORD_WORDS];
                    let mut got = TensorCounts::from_words(words).unwrap();
                    let mut want = want.clone();
                    if record == 5 {
                        assert!(words.iter().all(|&w| w == 0), "record 5 is no tensor's");
                        continue;
                    }
                    if !histogram {
                        assert!(got.binades.iter().all(|&b| b == 0), "{got:?}");
                        got.binades.clear();
                        want.binades.clear();
                    }
                    assert_eq!(got, want, "record {record}, {low}, histogram {histogram}");
                }
            }
        }
    }
}

/// A pass takes 1 to MAX_SEGMENTS tensors in at most three buffers; anything else is a
/// clear error.
#[test]
fn one_pass_refuses_too_many_tensors_or_buffers() {
    let ctx = common::ctx();
    let counts = ctx.alloc_storage("counts", 4 * RECORD_WORDS as u64);
    let what = (DType::F16, false);
    let four: Vec<Tensor> = (0..4)
        .map(|_| Tensor::zeros(ctx, &[8], DType::F32))
        .collect();
    let refs: Vec<(&Tensor, usize)> = four.iter().map(|t| (t, 0)).collect();
    common::expect_err(count_all(ctx, &refs, &counts, what), &["at most 3 buffers"]);
    common::expect_err(count_all(ctx, &[], &counts, what), &["1 to"]);
    let many = vec![(&four[0], 0); MAX_SEGMENTS + 1];
    common::expect_err(count_all(ctx, &many, &counts, what), &["1 to"]);
    assert!(count_all(ctx, &many[..MAX_SEGMENTS], &counts, what).is_ok());
}
