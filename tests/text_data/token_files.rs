//! Token safetensors files of every integer dtype, and the errors that name the first bad
//! element.

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use webgpu_amp::data::{BatchInput, BatchTargets, DataSource, Loader, custom};

use super::common::cli::fresh_dir;
use super::data_message;

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
            .map(|i| d.gather_indices(i).unwrap())
            .collect();
        assert_eq!(batches.len(), 2);
        assert_eq!(
            batches[0].input(),
            BatchInput::Tokens(&[5, 0, 1, 2, 3, 4, 5, 6])
        );
        assert_eq!(
            batches[0].targets(),
            BatchTargets::Classes(&[0, 1, 2, 3, 4, 5, 6, 7])
        );
        assert_eq!(batches[1].input(), BatchInput::Tokens(&[7, 8, 9, 10]));
        assert_eq!(batches[1].targets(), BatchTargets::Classes(&[8, 9, 10, 11]));
        assert_eq!(batches[1].size, 1);
    }
    // Through DataSource: a path ending in .safetensors, loaded whole (no split).
    let dir = fresh_dir("tokfile");
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
    // Both shapes are named: the mismatch is between them, not in `x`'s dtype.
    assert!(
        msg.contains("`x` is I64 [2, 3] and `y` is I64 [2]")
            && msg.contains("integer `x` and `y` of one shape [N, T]")
            && !msg.contains("expected F32"),
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
    assert!(
        msg.contains("`x` is I64 [2, 3] and `y` is F32 [2, 3]"),
        "{msg}"
    );
    // No tokens at all.
    let msg = data_message(custom::from_bytes(
        "empty.safetensors",
        &token_file(Dtype::I32, &[0, 3], &[], &[]),
    ));
    assert!(msg.contains("no tokens"), "{msg}");
}
