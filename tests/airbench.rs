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

/// `(name, shape, trainable)` of every parameter and the buffers' names of `airbench_net`
/// at `widths`, from PyTorch; `None` (said loudly) without the venv.
fn torch_net(widths: [usize; 3]) -> Option<(Vec<(String, Vec<usize>, bool)>, Vec<String>)> {
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
        let ours: Vec<(String, Vec<usize>, bool)> = (spec.parameters().into_iter())
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
