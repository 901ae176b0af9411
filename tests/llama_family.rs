//! The Llama family (`nn::llama`) against transformers itself, in f32 on the CPU side
//! (scripts/llama_grads.py: tiny random `LlamaForCausalLM`s saved by `save_pretrained`,
//! grouped-query attention, rope_theta 50000 and 500000, lm_head untied and tied):
//! - the folder's weights load into our model through the family's one name table with no
//!   missing or unexpected tensor;
//! - one forward and backward on the same batch gives transformers' loss and every
//!   parameter's gradient (RMSNorm, RoPE with its table a buffer, GQA on the fused and the
//!   manual attention path, SwiGLU, the tied head), each a composition with no hand-written
//!   backward;
//! - `train --model hf:DIR --dataset DIR/batch.safetensors --seq-len 8` trains from it, and
//!   a folder missing a tensor fails naming it.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::cli::{BIN, fresh_dir, output_text};
use safetensors::SafeTensors;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::hf::read_folder;
use webgpu_amp::nn::llama::{LlamaModel, llama_preset};
use webgpu_amp::nn::{AttentionKernel, LossKind, ModelSpec};
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const FOLDERS: [&str; 2] = ["gqa-untied", "gqa-tied"];
const BATCH: usize = 4;
const T: usize = 8;
/// |ours − theirs| ≤ ATOL + RTOL·max|theirs| per gradient tensor: f32 sums in another
/// order on another device (measured: at most 3e-8 of a largest 5.6e-2, under 0.05 of
/// this).
const ATOL: f32 = 1e-7;
const RTOL: f32 = 1e-5;

/// The fixtures in `dir`; None (said loudly) without the venv.
fn fixture(dir: &Path) -> Option<()> {
    let python = Path::new(ROOT).join(".venv/bin/python");
    if !python.exists() {
        common::not_checked(
            "the Llama family against transformers: no .venv/bin/python \
             (bash scripts/python-venv.sh)",
        );
        return None;
    }
    let out = std::process::Command::new(python)
        .arg(Path::new(ROOT).join("scripts/llama_grads.py"))
        .arg("make")
        .arg(dir)
        .output()
        .expect("run scripts/llama_grads.py");
    assert!(out.status.success(), "{}", output_text(&out));
    Some(())
}

/// Every tensor of a safetensors file as f32 values (int64 ones converted), by name.
fn tensors(path: &Path) -> Vec<(String, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(name, view)| {
            let values = match view.dtype() {
                safetensors::Dtype::I64 => (view.data().chunks_exact(8))
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f32)
                    .collect(),
                _ => (view.data().chunks_exact(4))
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
            };
            (name, values)
        })
        .collect()
}

fn get<'a>(t: &'a [(String, Vec<f32>)], name: &str) -> &'a [f32] {
    &t.iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .1
}

#[test]
fn gradients_equal_transformers_through_the_name_table() {
    let dir = fresh_dir("llama-grads");
    if fixture(&dir).is_none() {
        return;
    }
    let ctx = common::ctx();
    for name in FOLDERS {
        let folder = dir.join(name);
        let config = read_folder(&folder).unwrap().config;
        let vocab = config.vocab_size;
        let batch = tensors(&folder.join("batch.safetensors"));
        let tokens: Vec<u32> = get(&batch, "x").iter().map(|&v| v as u32).collect();
        let labels: Vec<u32> = get(&batch, "y").iter().map(|&v| v as u32).collect();
        let want = tensors(&folder.join("grads.safetensors"));
        for kernel in [AttentionKernel::Fused, AttentionKernel::Unfused] {
            let what = format!("{name} {}", kernel.name());
            let model = LlamaModel::new(config.clone()).with_seq_len(T).unwrap();
            let spec = ModelSpec::of_family(Arc::new(model), name, T)
                .unwrap()
                .with_attention(kernel);
            // Strict: a tensor of the folder the table does not place, or a parameter it
            // does not fill, fails here.
            let init = Checkpoint::from_hf_folder(&folder)
                .unwrap()
                .params_for_model(&spec, name)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let step = StepConfig::new(
                Precision::F32,
                LossKind::CrossEntropy,
                OptimizerConfig::sgd(0.0),
            )
            .scaler_enabled(false);
            let mut trainer = Trainer::new(ctx, spec.clone(), step, vocab, &init).unwrap();
            trainer
                .train_batch(ctx, BATCH, &tokens, BatchTargets::Classes(&labels))
                .unwrap();
            let stats = trainer.finish(ctx).unwrap();
            let theirs = get(&want, "loss")[0];
            let loss_diff = (stats[0].loss - theirs).abs() / theirs;
            assert!(
                loss_diff < 1e-6,
                "{what}: loss {} vs transformers' {theirs}",
                stats[0].loss
            );
            let grads = trainer.store.download_grads(ctx).unwrap();
            assert_eq!(grads.len(), want.len() - 1, "{what}: one gradient each");
            let mut worst = (0f32, String::new());
            for (ours, g) in &grads {
                let hf = spec.export_name(ours).unwrap();
                let w = get(&want, &hf);
                let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
                let diff = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                let used = diff / (ATOL + RTOL * scale);
                if used > worst.0 {
                    worst = (
                        used,
                        format!("{hf}: max diff {diff:.3e} of max {scale:.3e}"),
                    );
                }
                assert!(
                    used <= 1.0,
                    "{what}: {hf}: max |diff| {diff} of max {scale}"
                );
            }
            eprintln!(
                "{what}: loss rel diff {loss_diff:.2e}; worst gradient ({:.2} of the \
                 tolerance) {}",
                worst.0, worst.1
            );
        }
    }
}

#[test]
fn the_smollm2_preset_is_the_published_config() {
    let model = llama_preset("smollm2-135m", 65).unwrap();
    let spec = ModelSpec::of_family(Arc::new(model), "smollm2-135m", 128).unwrap();
    let count: usize = spec.parameters().iter().map(|p| p.numel()).sum();
    // scripts/gpu_report_torch_models.py's SMOLLM2_135M in transformers: 134,515,008.
    assert_eq!(count, 134_515_008);
    assert!(spec.buffers().iter().all(|b| !b.persistent));
    assert!(llama_preset("smollm2-135m", 50_000).is_err());
}

/// `train --model hf:DIR` from the folder (strict), and a folder missing a tensor refused
/// naming it.
#[test]
fn train_takes_a_transformers_folder() {
    let dir = fresh_dir("llama-cli");
    if fixture(&dir).is_none() {
        return;
    }
    let folder: PathBuf = dir.join("gqa-untied");
    let data = folder.join("batch.safetensors");
    let run_with = |model: &Path, extra: &[&std::ffi::OsStr]| {
        std::process::Command::new(BIN)
            .args(["train", "--model"])
            .arg(format!("hf:{}", model.display()))
            .arg("--dataset")
            .arg(&data)
            .args(["--seq-len", "8", "--batch-size", "2", "--steps", "2"])
            .args(["--no-validate"])
            .args(extra)
            .output()
            .unwrap()
    };
    let run = |model: &Path| run_with(model, &[]);
    // --export-hf: the trained weights as a folder (transformers' strict load is
    // scripts/llama_compat.py's), the resume state beside it, both the same weights; the
    // folder trains again.
    let export = dir.join("exported");
    let out = run_with(&folder, &["--export-hf".as_ref(), export.as_os_str()]);
    assert!(out.status.success(), "{}", output_text(&out));
    let read = read_folder(&export).unwrap();
    let state = Checkpoint::load(&export.join("webgpu-amp-state.safetensors")).unwrap();
    assert_eq!(read.tensors.len(), state.params.len());
    for t in &state.params {
        assert_eq!(read.tensors[&t.name].values, t.values, "{}", t.name);
    }
    let out = run(&export);
    assert!(out.status.success(), "{}", output_text(&out));
    // A model of no family has no such folder: said before training.
    let out = std::process::Command::new(BIN)
        .args([
            "train",
            "--model",
            "mlp",
            "--dataset",
            "synthetic:8",
            "--steps",
            "1",
        ])
        .arg("--export-hf")
        .arg(dir.join("no-family"))
        .output()
        .unwrap();
    let text = output_text(&out);
    assert!(
        !out.status.success() && text.contains("--export-hf"),
        "{text}"
    );

    // The same folder without one tensor.
    let broken = dir.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(folder.join("config.json"), broken.join("config.json")).unwrap();
    let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let gone = "model.layers.1.mlp.up_proj.weight";
    let kept: Vec<(String, safetensors::tensor::TensorView)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != gone)
        .collect();
    safetensors::serialize_to_file(kept, None, &broken.join("model.safetensors")).unwrap();
    let out = run(&broken);
    let text = output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(gone), "the error names the tensor: {text}");
}
