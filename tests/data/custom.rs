//! Custom data sets from safetensors files: integer labels of each dtype, regression
//! targets, and the errors that name the file and the problem.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use webgpu_amp::data::{DataSource, Labels, custom};

use super::common::cli::fresh_dir;
use super::{data_message, feats};

struct T {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn write_safetensors(dir: &Path, file: &str, tensors: &[(&str, T)]) -> PathBuf {
    let views: HashMap<String, TensorView<'_>> = tensors
        .iter()
        .map(|(name, t)| {
            (
                name.to_string(),
                TensorView::new(t.dtype, t.shape.clone(), &t.bytes).unwrap(),
            )
        })
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn x4() -> T {
    // 4 samples of shape [2, 3].
    T {
        dtype: Dtype::F32,
        shape: vec![4, 2, 3],
        bytes: f32s(&(0..24).map(|i| i as f32 * 0.5 - 3.0).collect::<Vec<_>>()),
    }
}

#[test]
fn custom_integer_labels_of_each_dtype() {
    let dir = fresh_dir("custom-ok");
    let labels = [3i64, 0, 2, 3];
    let cases: Vec<(Dtype, Vec<u8>)> = vec![
        (
            Dtype::I64,
            labels.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        (
            Dtype::I32,
            labels
                .iter()
                .flat_map(|&v| (v as i32).to_le_bytes())
                .collect(),
        ),
        (
            Dtype::I16,
            labels
                .iter()
                .flat_map(|&v| (v as i16).to_le_bytes())
                .collect(),
        ),
        (Dtype::I8, labels.iter().map(|&v| v as u8).collect()),
        (Dtype::U8, labels.iter().map(|&v| v as u8).collect()),
        (
            Dtype::U16,
            labels
                .iter()
                .flat_map(|&v| (v as u16).to_le_bytes())
                .collect(),
        ),
        (
            Dtype::U32,
            labels
                .iter()
                .flat_map(|&v| (v as u32).to_le_bytes())
                .collect(),
        ),
        (
            Dtype::U64,
            labels
                .iter()
                .flat_map(|&v| (v as u64).to_le_bytes())
                .collect(),
        ),
    ];
    for (dtype, bytes) in cases {
        let y = T {
            dtype,
            shape: vec![4],
            bytes,
        };
        let path = write_safetensors(&dir, "ok.safetensors", &[("x", x4()), ("y", y)]);
        let d = custom::load(&path).unwrap();
        assert_eq!(d.n, 4, "{dtype:?}");
        assert_eq!(d.sample_shape, vec![2, 3]);
        assert_eq!(feats(&d)[0], -3.0);
        assert_eq!(feats(&d)[23], 8.5);
        assert_eq!(
            d.y,
            Labels::Classes {
                labels: vec![3, 0, 2, 3],
                num_classes: 4
            },
            "{dtype:?}"
        );
        assert!(d.name.contains("ok.safetensors"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn custom_regression_targets() {
    let dir = fresh_dir("custom-reg");
    let y = T {
        dtype: Dtype::F32,
        shape: vec![4, 2],
        bytes: f32s(&[1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 4.5, -4.5]),
    };
    let path = write_safetensors(&dir, "reg.safetensors", &[("x", x4()), ("y", y)]);
    let d = custom::load(&path).unwrap();
    assert_eq!(
        d.y,
        Labels::Targets {
            values: vec![1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 4.5, -4.5],
            dim: 2
        }
    );
    assert_eq!(d.output_dim(), 2);
    // Through DataSource: file order, training set only (no split unless asked).
    let split = DataSource::Custom(path.clone()).load(true).unwrap();
    assert_eq!(split.train, d, "custom data is never normalised");
    assert!(split.validation.is_none() && split.test.is_none());
    let (head, tail) = d.split_last(1).unwrap();
    assert_eq!((head.n, tail.n), (3, 1));
    assert_eq!(feats(&tail)[0], feats(&d)[18]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn custom_errors_name_the_file_and_problem() {
    let dir = fresh_dir("custom-bad");
    let labels_i64 = |v: &[i64]| T {
        dtype: Dtype::I64,
        shape: vec![v.len()],
        bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    };
    // (file stem, tensors in the file, expected words in the error)
    type Case<'a> = (&'a str, Vec<(&'a str, T)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "no-x",
            vec![("y", labels_i64(&[0, 1, 2, 3]))],
            "no tensor named `x`",
        ),
        ("no-y", vec![("x", x4())], "no tensor named `y`"),
        (
            "x-f64",
            vec![
                (
                    "x",
                    T {
                        dtype: Dtype::F64,
                        shape: vec![4, 1],
                        bytes: vec![0; 32],
                    },
                ),
                ("y", labels_i64(&[0, 1, 2, 3])),
            ],
            "`x` has dtype F64",
        ),
        (
            "x-1d",
            vec![
                (
                    "x",
                    T {
                        dtype: Dtype::F32,
                        shape: vec![4],
                        bytes: f32s(&[0.0; 4]),
                    },
                ),
                ("y", labels_i64(&[0, 1, 2, 3])),
            ],
            "at least two dimensions",
        ),
        (
            "count",
            vec![("x", x4()), ("y", labels_i64(&[0, 1, 2]))],
            "4 samples but `y` has shape [3]",
        ),
        (
            "negative",
            vec![("x", x4()), ("y", labels_i64(&[0, 1, -2, 3]))],
            "label -2 of sample 2 is negative",
        ),
        (
            "negative-i8",
            vec![
                ("x", x4()),
                (
                    "y",
                    T {
                        dtype: Dtype::I8,
                        shape: vec![4],
                        bytes: vec![0, 255, 1, 1],
                    },
                ),
            ],
            "label -1 of sample 1 is negative",
        ),
        (
            "too-big",
            vec![("x", x4()), ("y", labels_i64(&[0, 1, 1 << 40, 3]))],
            "does not fit in u32",
        ),
        (
            "y-f32-1d",
            vec![
                ("x", x4()),
                (
                    "y",
                    T {
                        dtype: Dtype::F32,
                        shape: vec![4],
                        bytes: f32s(&[0.0; 4]),
                    },
                ),
            ],
            "expected regression targets [N, k]",
        ),
        (
            "y-int-2d",
            vec![
                ("x", x4()),
                (
                    "y",
                    T {
                        dtype: Dtype::I64,
                        shape: vec![4, 1],
                        bytes: vec![0; 32],
                    },
                ),
            ],
            "expected class labels [N]",
        ),
        (
            "y-f16",
            vec![
                ("x", x4()),
                (
                    "y",
                    T {
                        dtype: Dtype::F16,
                        shape: vec![4, 1],
                        bytes: vec![0; 8],
                    },
                ),
            ],
            "`y` has dtype F16",
        ),
    ];
    for (file, tensors, needle) in cases {
        let path = write_safetensors(&dir, &format!("{file}.safetensors"), &tensors);
        let msg = data_message(custom::load(&path));
        assert!(
            msg.contains(&format!("{file}.safetensors")) && msg.contains(needle),
            "{file}: {msg}"
        );
    }
    let garbage = dir.join("garbage.safetensors");
    std::fs::write(&garbage, b"definitely not safetensors").unwrap();
    let msg = data_message(custom::load(&garbage));
    assert!(
        msg.contains("garbage.safetensors") && msg.contains("not a valid safetensors"),
        "{msg}"
    );
    let msg = data_message(custom::load(&dir.join("absent.safetensors")));
    assert!(
        msg.contains("absent.safetensors") && msg.contains("cannot read"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
