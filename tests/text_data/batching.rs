//! Batching token data: shuffled epochs and resume order, unshuffled walks, token sets
//! sliced and split, and labels checked against the class count.

use webgpu_amp::data::{
    BatchInput, BatchTargets, Dataset, Labels, Loader, TextCorpus, TokenSamples, embedded_text,
};

use super::{all_samples, data_message};

#[test]
fn shuffled_epochs_visit_every_offset_once_reproducibly() {
    let hamlet = embedded_text::hamlet().unwrap();
    let split = hamlet.split(64).unwrap();
    let n = split.train.n;
    assert_eq!(n, 156_548 - 64);
    let loader = Loader::new(n, 64, true, 7).unwrap();
    let e0 = loader.order(0);
    let mut sorted = e0.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..n as u32).collect::<Vec<_>>(),
        "a permutation of the offsets"
    );
    assert_ne!(e0, (0..n as u32).collect::<Vec<_>>());
    // Same (seed, epoch): same order; another epoch or seed: another order.
    assert_eq!(Loader::new(n, 64, true, 7).unwrap().order(0), e0);
    assert_ne!(loader.order(1), e0);
    assert_ne!(Loader::new(n, 64, true, 8).unwrap().order(0), e0);
    // The batch size does not change the order, only how it is cut.
    assert_eq!(Loader::new(n, 10, true, 7).unwrap().order(0), e0);
}

#[test]
fn resumed_batches_equal_uninterrupted_ones() {
    let c = TextCorpus::from_text("r", &"to be or not to be, that is the question\n".repeat(8))
        .unwrap();
    let split = c.split(6).unwrap();
    let train = &split.train;
    let (batch, seed) = (16, 3);
    // Uninterrupted: two epochs, every batch gathered in order.
    let loader = Loader::new(train.n, batch, true, seed).unwrap();
    let mut straight = Vec::new();
    for epoch in 0..2 {
        for idx in &loader.batches(epoch) {
            straight.push(train.gather_indices(idx).unwrap());
        }
    }
    // Interrupted at (epoch 1, batch 5): a fresh loader from the checkpoint's seed, as
    // `Run::new` builds it, continues from Progress { epoch: 1, batch_in_epoch: 5 }.
    let per_epoch = loader.num_batches();
    let resumed_loader = Loader::new(train.n, batch, true, seed).unwrap();
    let resumed: Vec<_> = resumed_loader
        .batches(1)
        .iter()
        .skip(5)
        .map(|idx| train.gather_indices(idx).unwrap())
        .collect();
    assert_eq!(resumed, straight[per_epoch + 5..]);
    // The last batch of an epoch is partial (kept, as a DataLoader does).
    assert_eq!(train.n, 289);
    assert_eq!(straight[per_epoch - 1].size, 289 % 16);
}

#[test]
fn no_shuffle_walks_offsets_in_order() {
    let c = TextCorpus::from_text("o", "abcdefghijklmnopqrstuvwxyz0123456789").unwrap();
    let split = c.split(3).unwrap();
    let train = &split.train;
    assert_eq!(train.n, 32 - 3);
    let loader = Loader::new(train.n, 8, false, 99).unwrap();
    let batches = loader.batches(0);
    assert_eq!(batches.len(), 4);
    assert_eq!(batches[0], (0..8).collect::<Vec<_>>());
    assert_eq!(batches[3], (24..29).collect::<Vec<_>>());
    let b = train.gather_indices(&batches[1]).unwrap();
    let BatchInput::Tokens(x) = b.input() else {
        panic!("token inputs")
    };
    assert_eq!(c.vocab().decode(&x[..3]).unwrap(), "ijk");
    assert_eq!(c.vocab().decode(&x[21..]).unwrap(), "pqr");
    let BatchTargets::Classes(y) = b.targets() else {
        panic!("class labels")
    };
    assert_eq!(c.vocab().decode(&y[..3]).unwrap(), "jkl");
}

#[test]
fn token_sets_slice_split_and_reuse_batches() {
    let c = TextCorpus::from_text(
        "s",
        &"the quick brown fox jumps over the lazy dog\n".repeat(3),
    )
    .unwrap();
    let split = c.split(5).unwrap();
    let train = &split.train;
    let (head, tail) = train.split_last(4).unwrap();
    assert_eq!((head.n, tail.n), (train.n - 4, 4));
    assert_eq!(head.vocab(), train.vocab());
    assert_eq!(all_samples(&tail), all_samples(train)[train.n - 4..]);
    let slice = train.slice(2..5, "mid").unwrap();
    assert_eq!(all_samples(&slice), all_samples(train)[2..5]);

    // One batch buffer reused across kinds: token then dense then token.
    let mut batch = train.gather(&[0, 1]).unwrap();
    let dense = Dataset::new(
        "d",
        vec![1.0, 2.0, 3.0, 4.0],
        vec![2],
        Labels::Classes {
            labels: vec![0, 1],
            num_classes: 2,
        },
    )
    .unwrap();
    dense.gather_into(&[1], &mut batch).unwrap();
    assert_eq!(batch.input(), BatchInput::Features(&[3.0, 4.0]));
    assert_eq!(batch.targets(), BatchTargets::Classes(&[1]));
    train.gather_into(&[3], &mut batch).unwrap();
    assert_eq!(batch.input().len(), 5);
    assert_eq!(batch.size, 1);
    let msg = data_message(train.gather(&[train.n]));
    assert!(msg.contains("out of range"), "{msg}");
}

#[test]
fn token_labels_are_checked_against_the_class_count() {
    let (x, y) = TokenSamples::rows(vec![0, 1, 2, 3, 4, 5], vec![1, 2, 3, 4, 9, 6], 3).unwrap();
    let msg = data_message(Dataset::from_tokens("t", x.clone(), y.clone(), 7, None));
    assert!(
        msg.contains("target token 9 of sample 1 at position 1") && msg.contains("class count 7"),
        "{msg}"
    );
    let d = Dataset::from_tokens("t", x, y, 10, None).unwrap();
    assert_eq!(d.output_dim(), 10);
    // A larger class count (a model's vocabulary) is fine; a smaller one is not.
    assert_eq!(d.clone().with_num_classes(16).unwrap().output_dim(), 16);
    let msg = data_message(d.with_num_classes(9));
    assert!(
        msg.contains("9 classes") && msg.contains("uses 10"),
        "{msg}"
    );
    // A text's class count is its vocabulary.
    let text = TextCorpus::from_text("v", "abcabcabcabcabc")
        .unwrap()
        .split(1)
        .unwrap();
    let msg = data_message(text.train.with_num_classes(5));
    assert!(msg.contains("3 characters, not 5"), "{msg}");
    // Streams: windows over ids, with errors for impossible ranges.
    let ids: std::sync::Arc<[u32]> = vec![0, 1, 2, 3].into();
    let msg = data_message(TokenSamples::windows(ids.clone(), 0..4, 4));
    assert!(msg.contains("no window of block_size + 1 = 5"), "{msg}");
    let msg = data_message(TokenSamples::windows(ids.clone(), 2..6, 1));
    assert!(msg.contains("outside"), "{msg}");
    let (wx, wy) = TokenSamples::windows(ids, 1..4, 2).unwrap();
    assert_eq!(
        (wx.len(), wx.sample(0), wy.sample(0)),
        (1, Some(&[1, 2][..]), Some(&[2, 3][..]))
    );
    assert_eq!(wx.sample(1), None);
    let msg = data_message(Dataset::from_tokens("w", wx.clone(), wy.clone(), 3, None));
    assert!(
        msg.contains("target token 3 of sample 0 at position 1"),
        "{msg}"
    );
    // A dense data set is not a token set.
    let dense = webgpu_amp::data::synthetic::regression(4, 2, 1, 0).unwrap();
    assert!(!dense.is_tokens() && dense.vocab().is_none());
    assert_eq!(dense.y.rows_per_sample(), 1);
}
