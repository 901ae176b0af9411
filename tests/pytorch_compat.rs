//! PyTorch interoperability without PyTorch: files laid out exactly as
//! `safetensors.torch.save_file(model.state_dict(), path)` writes them (PyTorch's names,
//! `[out, in]` / `[out, in, kh, kw]` shapes, little-endian f32, no `__metadata__`) load into
//! the `mlp`, `mnist-cnn` and a JSON `nn.Sequential`, and the loaded models compute what
//! PyTorch's modules compute (checked against CPU references written from PyTorch's
//! definitions). Wrong names, shapes and dtypes are refused naming the parameter, and our
//! checkpoints hold only the parameter tensors (so `model.load_state_dict(load_file(path))`
//! works strictly), everything else in `__metadata__`.

mod common;
#[path = "pytorch_compat/reference.rs"]
mod reference;

use std::collections::HashMap;
use std::path::Path;

use common::cli::{command, fresh_dir};
use common::{assert_close, ctx, rand_vec};
use reference::{StateDict, get, mlp_forward, mnist_cnn_forward, seq_forward};
use safetensors::tensor::{Dtype, TensorView};
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::{Normalization, embedded};
use webgpu_amp::nn::LossKind;
use webgpu_amp::nn::{ModelSpec, preset};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::evaluate::predict;
use webgpu_amp::train::{StepConfig, Trainer};

/// PyTorch's default-init-like values: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
fn tensor(name: &str, shape: &[usize], fan_in: usize, seed: u64) -> (String, Vec<usize>, Vec<f32>) {
    let bound = 1.0 / (fan_in as f32).sqrt();
    let n = shape.iter().product();
    let values = rand_vec(n, seed).into_iter().map(|v| v * bound).collect();
    (name.to_string(), shape.to_vec(), values)
}

/// `nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))`.
fn mlp_state_dict() -> StateDict {
    vec![
        tensor("1.weight", &[256, 784], 784, 1),
        tensor("1.bias", &[256], 784, 2),
        tensor("3.weight", &[10, 256], 256, 3),
        tensor("3.bias", &[10], 256, 4),
    ]
}

/// The tutorial's SimpleCNN for 1×28×28: conv1, conv2, fc.
fn mnist_cnn_state_dict() -> StateDict {
    vec![
        tensor("conv1.weight", &[32, 1, 3, 3], 9, 5),
        tensor("conv1.bias", &[32], 9, 6),
        tensor("conv2.weight", &[64, 32, 3, 3], 288, 7),
        tensor("conv2.bias", &[64], 288, 8),
        tensor("fc.weight", &[10, 3136], 3136, 9),
        tensor("fc.bias", &[10], 3136, 10),
    ]
}

/// `nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(48, 5))`.
const SEQ_JSON: &str = r#"{"input": [2, 6, 6], "layers": [{"conv2d": {"out": 3, "kernel": 3}}, {"relu": {}}, {"flatten": {}}, {"linear": {"out": 5}}]}"#;

fn seq_state_dict() -> StateDict {
    vec![
        tensor("0.weight", &[3, 2, 3, 3], 18, 11),
        tensor("0.bias", &[3], 18, 12),
        tensor("3.weight", &[5, 48], 48, 13),
        tensor("3.bias", &[5], 48, 14),
    ]
}

/// The bytes `safetensors.torch.save_file(state_dict, path, metadata)` writes.
fn save_file_bytes(sd: &StateDict, metadata: Option<HashMap<String, String>>) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = sd
        .iter()
        .map(|(n, s, v)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), bytemuck::cast_slice(v)).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, metadata).unwrap()
}

fn expected(spec: &ModelSpec) -> Vec<(String, Vec<usize>)> {
    spec.parameters()
        .into_iter()
        .map(|p| (p.name, p.shape))
        .collect()
}

/// Load `sd` (as PyTorch writes it) into `spec` through the checkpoint loader, run the f32
/// forward on `batch` samples on the GPU, and compare with the CPU reference.
fn check_loads_and_computes(
    what: &str,
    spec: ModelSpec,
    sd: &StateDict,
    x: &[f32],
    batch: usize,
    reference: fn(&StateDict, &[f32]) -> Vec<f32>,
) {
    let out_dim = spec.output_shape()[0];
    for metadata in [
        None,
        Some(HashMap::from([("format".to_string(), "pt".to_string())])),
    ] {
        let bytes = save_file_bytes(sd, metadata);
        let ck = Checkpoint::from_bytes(&bytes, what).unwrap();
        assert!(
            ck.optimizer.is_none() && ck.scaler.is_none(),
            "{what}: a plain state_dict"
        );
        let init = ck.params_for(&expected(&spec), what).unwrap();
        // In the model's order, values untouched.
        for ((name, values), p) in init.iter().zip(spec.parameters()) {
            assert_eq!(*name, p.name, "{what}: order");
            assert!(
                values.as_slice() == get(sd, name),
                "{what}: `{name}` values"
            );
        }
        let cfg = StepConfig::new(
            Precision::F32,
            LossKind::CrossEntropy,
            OptimizerConfig::sgd(0.1),
        )
        .scaler_enabled(false);
        let mut t = Trainer::new(ctx(), spec.clone(), cfg, out_dim, &init).unwrap();
        let got = predict(ctx(), &mut t, batch, x).unwrap();
        let per = x.len() / batch;
        let want: Vec<f32> = (0..batch)
            .flat_map(|s| reference(sd, &x[s * per..(s + 1) * per]))
            .collect();
        assert_close(what, &got, &want, 1e-4, 1e-4);
    }
}

fn mnist_images(n: usize) -> Vec<f32> {
    let all = embedded::mnist_all(Some(Normalization::MNIST)).unwrap();
    all.x.features().expect("MNIST images are f32 features")[..n * 784].to_vec()
}

#[test]
fn pytorch_state_dicts_load_and_compute_like_pytorch() {
    let x = mnist_images(3);
    check_loads_and_computes(
        "mlp",
        preset("mlp", &[1, 28, 28], 10).unwrap(),
        &mlp_state_dict(),
        &x,
        3,
        mlp_forward,
    );
    check_loads_and_computes(
        "mnist-cnn",
        preset("mnist-cnn", &[1, 28, 28], 10).unwrap(),
        &mnist_cnn_state_dict(),
        &x[..2 * 784],
        2,
        mnist_cnn_forward,
    );
    check_loads_and_computes(
        "sequential",
        ModelSpec::from_json(SEQ_JSON).unwrap(),
        &seq_state_dict(),
        &rand_vec(2 * 72, 99),
        2,
        seq_forward,
    );
}

#[test]
fn half_precision_state_dicts_load_as_f32() {
    // model.half().state_dict() and model.bfloat16().state_dict().
    let spec = ModelSpec::from_json(SEQ_JSON).unwrap();
    let sd = seq_state_dict();
    for dtype in [Dtype::F16, Dtype::BF16] {
        let halves: Vec<(String, Vec<usize>, Vec<u16>)> = sd
            .iter()
            .map(|(n, s, v)| {
                let bits = v
                    .iter()
                    .map(|&x| match dtype {
                        Dtype::F16 => half::f16::from_f32(x).to_bits(),
                        _ => half::bf16::from_f32(x).to_bits(),
                    })
                    .collect();
                (n.clone(), s.clone(), bits)
            })
            .collect();
        let views: Vec<(String, TensorView<'_>)> = halves
            .iter()
            .map(|(n, s, v)| {
                (
                    n.clone(),
                    TensorView::new(dtype, s.clone(), bytemuck::cast_slice(v)).unwrap(),
                )
            })
            .collect();
        let bytes = safetensors::serialize(views, None).unwrap();
        let init = Checkpoint::from_bytes(&bytes, "half")
            .unwrap()
            .params_for(&expected(&spec), "half")
            .unwrap();
        for ((name, values), (_, _, bits)) in init.iter().zip(&halves) {
            let want: Vec<f32> = bits
                .iter()
                .map(|&b| match dtype {
                    Dtype::F16 => half::f16::from_bits(b).to_f32(),
                    _ => half::bf16::from_bits(b).to_f32(),
                })
                .collect();
            assert!(*values == want, "{dtype:?} `{name}`");
        }
    }
}

#[test]
fn mismatched_state_dicts_are_refused_naming_the_parameter() {
    let spec = preset("mlp", &[1, 28, 28], 10).unwrap();
    let load = |sd: &StateDict| {
        Checkpoint::from_bytes(&save_file_bytes(sd, None), "model.safetensors")
            .and_then(|ck| ck.params_for(&expected(&spec), "model.safetensors"))
            .unwrap_err()
            .to_string()
    };

    // A missing tensor (e.g. a model built with bias=False).
    let mut sd = mlp_state_dict();
    sd.retain(|(n, _, _)| n != "3.bias");
    let msg = load(&sd);
    assert!(
        msg.contains("missing `3.bias` [10]") && msg.contains("model.safetensors"),
        "{msg}"
    );

    // Names from a different module structure (self.fc1 = nn.Linear(...)).
    let mut sd = mlp_state_dict();
    sd[0].0 = "fc1.weight".into();
    let msg = load(&sd);
    assert!(
        msg.contains("missing `1.weight`") && msg.contains("unexpected `fc1.weight`"),
        "{msg}"
    );

    // A transposed weight ([in, out], as another framework would store it).
    let mut sd = mlp_state_dict();
    sd[0].1 = vec![784, 256];
    let msg = load(&sd);
    assert!(
        msg.contains("`1.weight` has shape [784, 256], the model needs [256, 784]"),
        "{msg}"
    );

    // A different output size.
    let mut sd = mlp_state_dict();
    sd[2] = tensor("3.weight", &[7, 256], 256, 3);
    sd[3] = tensor("3.bias", &[7], 256, 4);
    let msg = load(&sd);
    assert!(
        msg.contains("`3.weight` has shape [7, 256]") && msg.contains("`3.bias` has shape [7]"),
        "{msg}"
    );

    // An integer tensor (e.g. a BatchNorm's num_batches_tracked) is not a parameter here.
    let mut bytes_sd: Vec<(String, Vec<usize>, Vec<u8>)> = mlp_state_dict()
        .into_iter()
        .map(|(n, s, v)| (n, s, bytemuck::cast_slice(&v).to_vec()))
        .collect();
    bytes_sd.push((
        "num_batches_tracked".into(),
        vec![],
        5i64.to_le_bytes().to_vec(),
    ));
    let views: Vec<(String, TensorView<'_>)> = bytes_sd
        .iter()
        .map(|(n, s, b)| {
            let dtype = if n == "num_batches_tracked" {
                Dtype::I64
            } else {
                Dtype::F32
            };
            (n.clone(), TensorView::new(dtype, s.clone(), b).unwrap())
        })
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    // The file reads (an integer tensor is a buffer), but the model has no such buffer.
    let msg = Checkpoint::from_bytes(&bytes, "bn.safetensors")
        .and_then(|ck| ck.params_for(&expected(&spec), "bn.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("`num_batches_tracked`")
            && msg.contains("I64")
            && msg.contains("bn.safetensors"),
        "{msg}"
    );

    // Not a safetensors file at all.
    let msg = Checkpoint::from_bytes(b"PK\x03\x04 a torch.save zip", "model.pt")
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("model.pt") && msg.contains("not a safetensors file"),
        "{msg}"
    );
}

fn webgpu_amp(args: &[&str]) -> std::process::Output {
    command().args(args).output().expect("run webgpu-amp")
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `--init` takes a PyTorch file; our `--save` gives back a file holding exactly the
/// state_dict's tensors (names, shapes, f32), the rest in `__metadata__`.
#[test]
fn cli_init_and_save_are_pytorch_state_dicts() {
    let dir = fresh_dir("cli");
    let init = dir.join("torch_init.safetensors");
    let out = dir.join("ours.safetensors");
    let sd = mlp_state_dict();
    std::fs::write(&init, save_file_bytes(&sd, None)).unwrap();
    // SGD with lr 0 leaves the parameters as loaded: the saved file must hold them exactly.
    let run = webgpu_amp(&[
        "train",
        "--model",
        "mlp",
        "--init",
        path(&init),
        "--steps",
        "1",
        "--batch-size",
        "8",
        "--optimizer",
        "sgd",
        "--lr",
        "0",
        "--no-validate",
        "--save",
        path(&out),
    ]);
    assert!(
        run.status.success(),
        "train failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(String::from).collect();
    names.sort();
    assert_eq!(
        names,
        ["1.bias", "1.weight", "3.bias", "3.weight"],
        "only the parameters"
    );
    for (name, shape, values) in &sd {
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        assert_eq!(t.shape(), shape.as_slice(), "{name}");
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(t.data());
        assert!(got == *values, "`{name}` changed (lr 0)");
    }
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().expect("__metadata__");
    let mut keys: Vec<&str> = meta.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "data",
            "format",
            "optimizer",
            "precision",
            "progress",
            "scaler"
        ]
    );
    assert_eq!(meta["format"], "webgpu-amp/1");
    assert_eq!(meta["precision"], "amp-f16");
    // Every metadata value is a string (safetensors' rule), JSON inside.
    for k in ["optimizer", "progress", "scaler"] {
        let v: serde_json::Value = serde_json::from_str(&meta[k]).unwrap();
        assert!(v.is_object(), "{k}: {v}");
    }
    let scaler: serde_json::Value = serde_json::from_str(&meta["scaler"]).unwrap();
    for k in [
        "scale",
        "growth_factor",
        "backoff_factor",
        "growth_interval",
        "_growth_tracker",
    ] {
        assert!(
            scaler.get(k).is_some(),
            "scaler state lacks `{k}`: {scaler}"
        );
    }

    // A file for another architecture is refused before training, naming the tensors.
    let wrong = dir.join("cnn.safetensors");
    std::fs::write(&wrong, save_file_bytes(&mnist_cnn_state_dict(), None)).unwrap();
    let run = webgpu_amp(&[
        "train",
        "--model",
        "mlp",
        "--init",
        path(&wrong),
        "--steps",
        "1",
    ]);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("missing `1.weight` [256, 784]")
            && err.contains("unexpected `conv1.weight`")
            && err.contains("cnn.safetensors"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
