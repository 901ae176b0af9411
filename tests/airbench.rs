//! airbench94's net (`nn::resnet::airbench`): parameter for parameter (names, shapes, which
//! are frozen) and buffer for buffer `scripts/gpu_report_torch_models.py`'s `airbench_net`, as
//! the venv's PyTorch builds it (NOT CHECKED without the venv); its count; and the recipe's
//! flags train a few steps on files in CIFAR-10's format.

mod common;

use std::path::Path;
use std::process::Command;

use common::cli::{assert_success, fresh_dir, output_text};
use webgpu_amp::nn::presets::preset;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A parameter's name, shape and whether it trains (`requires_grad`).
type Param = (String, Vec<usize>, bool);

/// Every parameter and the buffers' names of `airbench_net` at `widths`, from PyTorch;
/// `None` (said loudly) without the venv.
fn torch_net(widths: [usize; 3]) -> Option<(Vec<Param>, Vec<String>)> {
    let python = Path::new(ROOT).join(".venv/bin/python");
    if !python.exists() {
        common::not_checked(
            "airbench's net against PyTorch's definition: no .venv/bin/python \
             (bash scripts/python-venv.sh)",
        );
        return None;
    }
    let code = format!(
        "import json, sys, torch; sys.path.insert(0, 'scripts')\n\
         from gpu_report_torch_models import airbench_net\n\
         m = airbench_net(torch, widths={widths:?})\n\
         print(json.dumps({{'params': [[n, list(p.shape), p.requires_grad] \
         for n, p in m.named_parameters()], 'buffers': [n for n, _ in m.named_buffers()]}}))"
    );
    let out = Command::new(python)
        .current_dir(ROOT)
        .args(["-c", &code])
        .output()
        .expect("run python");
    assert!(out.status.success(), "{}", output_text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let params = v["params"].as_array().unwrap().iter().map(|p| {
        let shape = p[1].as_array().unwrap().iter();
        (
            p[0].as_str().unwrap().to_string(),
            shape.map(|d| d.as_u64().unwrap() as usize).collect(),
            p[2].as_bool().unwrap(),
        )
    });
    let buffers = v["buffers"].as_array().unwrap().iter();
    let buffers = buffers.map(|b| b.as_str().unwrap().to_string());
    Some((params.collect(), buffers.collect()))
}

#[test]
fn airbench_is_the_reference_net_name_for_name() {
    for (name, widths, count) in [
        ("airbench", [64, 256, 256], 1_972_792),
        ("airbench-tiny", [8, 16, 16], 11_000),
    ] {
        let spec = preset(name, &[3, 32, 32], 10).unwrap();
        assert_eq!(spec.num_parameters(), count, "{name}");
        let ours: Vec<Param> = (spec.parameters().into_iter())
            .map(|p| {
                let trains = !spec.frozen.contains(&p.name);
                (p.name, p.shape, trains)
            })
            .collect();
        let buffers: Vec<String> = spec.buffers().into_iter().map(|b| b.name).collect();
        let Some((torch_params, torch_buffers)) = torch_net(widths) else {
            return;
        };
        assert_eq!(
            ours, torch_params,
            "{name}: named_parameters() and requires_grad"
        );
        assert_eq!(buffers, torch_buffers, "{name}: named_buffers()");
    }
}

/// The recipe's command in docs/guide/airbench.md (the block after `<!-- airbench recipe
/// -->`), as words after the binary's name.
fn guide_recipe() -> Vec<String> {
    let guide = std::fs::read_to_string(Path::new(ROOT).join("docs/guide/airbench.md")).unwrap();
    let block = guide
        .split("<!-- airbench recipe -->")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/guide/airbench.md has the recipe's block");
    let words: Vec<String> = block
        .replace("\\\n", " ")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(words[0], "webgpu-amp", "{block}");
    words[1..].to_vec()
}

/// Files in CIFAR-10's binary format: `per_file` random records in each training batch and
/// `test` in the test batch.
fn cifar_release(per_file: usize, test: usize) -> std::path::PathBuf {
    use webgpu_amp::data::cifar10::{PIXELS, TEST_FILE, TRAIN_FILES};
    let dir = fresh_dir("airbench-cifar");
    let mut state = 7u64;
    let mut byte = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 56) as u8
    };
    let mut file = |name: &str, n: usize| {
        let mut bytes = Vec::new();
        for _ in 0..n {
            bytes.push(byte() % 10);
            bytes.extend((0..PIXELS).map(|_| byte()));
        }
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    for name in TRAIN_FILES {
        file(name, per_file);
    }
    file(TEST_FILE, test);
    dir
}

/// The guide's airbench recipe, on airbench-tiny at batch 16 for 3 steps on CIFAR-format
/// files: it runs (every flag of it is accepted together), trains finite losses, and the
/// checkpoint's whitening weight is airbench's `init_whitening_conv` of the same images as
/// PyTorch computes it (up to each eigenvector's sign; NOT CHECKED without the venv).
#[test]
fn the_guides_airbench_recipe_trains_on_cifar_format_files() {
    let dir = cifar_release(40, 16);
    let (save, metrics) = (dir.join("run.safetensors"), dir.join("run.jsonl"));
    let mut args = guide_recipe();
    let set = |args: &mut Vec<String>, flag: &str, value: &str| {
        let at = args.iter().position(|a| a == flag).expect(flag);
        args[at + 1] = value.to_string();
    };
    set(&mut args, "--model", "airbench-tiny");
    set(
        &mut args,
        "--dataset",
        &format!("cifar10:{}", dir.display()),
    );
    set(&mut args, "--batch-size", "16");
    set(&mut args, "--warmup-steps", "1");
    let epochs = args.iter().position(|a| a == "--epochs").expect("--epochs");
    args.splice(epochs..epochs + 2, ["--steps".to_string(), "3".to_string()]);
    let out = common::cli::command()
        .args(&args)
        .arg("--save")
        .arg(&save)
        .arg("--metrics")
        .arg(&metrics)
        .output()
        .unwrap();
    assert_success(&out, "the guide's airbench recipe");
    let steps: Vec<serde_json::Value> = common::cli::json_lines(&metrics)
        .into_iter()
        .filter(|l| l.get("step").is_some())
        .collect();
    assert_eq!(steps.len(), 3);
    assert!(
        steps
            .iter()
            .all(|s| s["loss"].as_f64().unwrap().is_finite())
    );

    let python = Path::new(ROOT).join(".venv/bin/python");
    if !python.exists() {
        common::not_checked("airbench's whitening init against PyTorch: no .venv/bin/python");
        return;
    }
    // airbench94.py's get_patches / get_whitening_parameters / init_whitening_conv, on the
    // training images as our reader normalises them, against our checkpoint's `0.weight`.
    let code = format!(
        "import sys, numpy as np, torch\n\
         from safetensors.torch import load_file\n\
         d = {dir:?}\n\
         raw = np.concatenate([np.fromfile(f'{{d}}/data_batch_{{i}}.bin', np.uint8).reshape(-1, 3073) for i in range(1, 6)])\n\
         x = torch.tensor(raw[:5000, 1:], dtype=torch.float32).view(-1, 3, 32, 32) / 255\n\
         mean = torch.tensor((0.4914, 0.4822, 0.4465)).view(1, 3, 1, 1)\n\
         std = torch.tensor((0.2470, 0.2435, 0.2616)).view(1, 3, 1, 1)\n\
         x = ((x - mean) / std).double()\n\
         p = x.unfold(2, 2, 1).unfold(3, 2, 1).transpose(1, 3).reshape(-1, 3, 2, 2)\n\
         flat = p.reshape(len(p), -1)\n\
         vals, vecs = torch.linalg.eigh(flat.T @ flat / len(flat), UPLO='U')\n\
         vals, vecs = vals.flip(0).view(-1, 1, 1, 1), vecs.T.reshape(12, 3, 2, 2).flip(0)\n\
         want = torch.cat((vecs / torch.sqrt(vals + 5e-4), -vecs / torch.sqrt(vals + 5e-4)))\n\
         got = load_file({save:?})['0.weight'].double()\n\
         rows = [min((g - w).abs().max().item(), (g + w).abs().max().item()) for g, w in zip(got, want)]\n\
         print(max(rows) / want.abs().max().item())\n",
        dir = dir.display().to_string(),
        save = save.display().to_string(),
    );
    let out = Command::new(python).args(["-c", &code]).output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let relative: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(
        relative < 1e-4,
        "whitening weight: {relative:.3e} of its largest value from airbench's"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
