//! Hugging Face folders (`data::hf`) against transformers itself: tiny Llama models saved by
//! `save_pretrained` in the test (scripts/hf_fixture.py: grouped-query attention and
//! rope_theta 50000 in float32, tied embeddings in bfloat16, float16 in three shards with
//! `model.safetensors.index.json`) read here as exactly the f32 values of their tensors with
//! their config; and a folder written back here (f32 and bf16) loads into
//! `LlamaForCausalLM.from_pretrained` with no missing, unexpected or mismatched key, the same
//! config and the same weights (rounded to the dtype written).

mod common;

use std::path::{Path, PathBuf};

use common::cli::{fresh_dir, output_text};
use safetensors::SafeTensors;
use webgpu_amp::data::hf::{HostTensor, SaveDtype, folder_files, read_folder};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `scripts/hf_fixture.py ARGS` in the venv; None (said loudly) without it.
fn fixture(args: &[&Path]) -> Option<String> {
    let python = Path::new(ROOT).join(".venv/bin/python");
    if !python.exists() {
        common::not_checked(
            "Hugging Face folders against transformers: no .venv/bin/python \
             (bash scripts/python-venv.sh)",
        );
        return None;
    }
    let out = std::process::Command::new(python)
        .arg(Path::new(ROOT).join("scripts/hf_fixture.py"))
        .args(args)
        .output()
        .expect("run scripts/hf_fixture.py");
    assert!(
        out.status.success(),
        "scripts/hf_fixture.py {args:?}:\n{}",
        output_text(&out)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every tensor of `expected.safetensors` (f32), by name.
fn expected(folder: &Path) -> Vec<HostTensor> {
    let bytes = std::fs::read(folder.join("expected.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut v: Vec<HostTensor> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| HostTensor {
            name,
            shape: view.shape().to_vec(),
            values: view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

#[test]
fn folders_saved_by_transformers_read_exactly_and_ours_load_strictly() {
    let dir = fresh_dir("folders");
    if fixture(&[Path::new("make"), &dir]).is_none() {
        return;
    }
    for (name, tied, stored) in [
        ("gqa-f32", false, "F32"),
        ("tied-bf16", true, "BF16"),
        ("sharded-f16", false, "F16"),
    ] {
        let folder = dir.join(name);
        let read = read_folder(&folder).unwrap_or_else(|e| panic!("{name}: {e}"));
        let c = &read.config;
        assert_eq!(
            (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
            (4, 2, 8),
            "{name}"
        );
        assert_eq!((c.hidden_size, c.intermediate_size), (32, 48), "{name}");
        assert_eq!((c.num_hidden_layers, c.vocab_size), (2, 96), "{name}");
        assert_eq!((c.rope_theta, c.rms_norm_eps), (50_000.0, 1e-5), "{name}");
        assert_eq!(c.tie_word_embeddings, tied, "{name}");
        assert_eq!(
            format!("{:?}", read.stored_as),
            format!("[{stored}]"),
            "{name}"
        );
        let want = expected(&folder);
        let got: Vec<&HostTensor> = read.tensors.values().collect();
        assert_eq!(got.len(), want.len(), "{name}: tensor count");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(**g, *w, "{name}: {}", w.name);
        }
        // Tied: transformers saves no lm_head.
        assert_eq!(read.tensors.contains_key("lm_head.weight"), !tied, "{name}");
        // Written back (f32, and bf16 for one), it loads strictly with the same weights.
        let tensors: Vec<HostTensor> = read.tensors.values().cloned().collect();
        let dtypes: &[SaveDtype] = if name == "gqa-f32" {
            &[SaveDtype::F32, SaveDtype::BF16]
        } else {
            &[SaveDtype::F32]
        };
        for &dtype in dtypes {
            let out: PathBuf = dir.join(format!("{name}-ours-{}", dtype.torch_name()));
            std::fs::create_dir_all(&out).unwrap();
            for (file, bytes) in folder_files(&read.config, &tensors, dtype).unwrap() {
                std::fs::write(out.join(file), bytes).unwrap();
            }
            let report = fixture(&[Path::new("check"), &out, &folder]).expect("venv");
            let line: serde_json::Value = serde_json::from_str(report.trim()).unwrap();
            let diff = line["logits_max_diff"].as_f64().unwrap();
            let torch_dtype = format!("torch.{}", dtype.torch_name());
            assert_eq!(line["dtype"], torch_dtype.as_str(), "{name}: {report}");
            if dtype == SaveDtype::F32 {
                assert_eq!(diff, 0.0, "{name}: the same weights give the same logits");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
