#!/usr/bin/env python3
"""Cross-check webgpu-amp against PyTorch (needs python3 with torch and safetensors).

For each case (model x optimizer) it:
  1. builds the PyTorch model with the names webgpu-amp uses (mlp:
     nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10));
     mnist-cnn: a module with conv1, conv2, fc) and saves its initial state_dict with
     safetensors.torch.save_file;
  2. writes a fixed data set (x = randn(N, 1, 28, 28), y = randint(0, 10, (N,))) as a
     safetensors file, so both sides see bit-identical inputs;
  3. runs `webgpu-amp train --init ... --dataset ... --no-shuffle --precision f32` for a few
     steps, with --metrics (per-step losses) and --save;
  4. loads our checkpoint into a fresh PyTorch model strictly:
     model.load_state_dict(safetensors.torch.load_file(path));
  5. runs the same steps in PyTorch from the same init on the same batches (f32, CPU);
  6. compares the per-step losses and the final parameters.

Tolerance: |ours - torch| <= ATOL + RTOL * |torch| with ATOL = 1e-5 and RTOL = 1e-4, for every
loss and every parameter value. Both sides compute in f32; only summation order differs
(GPU tiled/tree reductions against PyTorch's CPU kernels), which moves results by a few ulp
per step.

Without torch (or safetensors) it prints "skipped: torch not installed" and exits 0: CI runs it
only where python3 has torch; the Rust tests (tests/pytorch_compat.rs) are the always-on proof
of the file format and layouts.

Usage: python3 scripts/pytorch_compat.py [--bin PATH] [--steps N] [--batch-size B]
Exit status: 0 when every case matches (or when skipped), 1 otherwise.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn as nn
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"skipped: torch not installed ({e})")
    sys.exit(0)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ATOL = 1e-5
RTOL = 1e-4


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


class MnistCNN(nn.Module):
    """The tutorial's SimpleCNN for 1x28x28 (webgpu-amp's `mnist-cnn`)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.fc = nn.Linear(64 * 7 * 7, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc(x)


MODELS = {"mlp": mlp, "mnist-cnn": MnistCNN}

# name -> (webgpu-amp flags, torch optimizer factory)
OPTIMIZERS = {
    "sgd": (
        ["--optimizer", "sgd", "--lr", "0.05"],
        lambda p: torch.optim.SGD(p, lr=0.05),
    ),
    "sgd-momentum": (
        ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"],
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    ),
    "adam": (
        ["--optimizer", "adam", "--lr", "0.001"],
        lambda p: torch.optim.Adam(p, lr=0.001),
    ),
}

DEFAULT_CASES = ["mlp:sgd", "mlp:adam", "mnist-cnn:sgd-momentum"]


def binary_command(path):
    if path:
        return [path]
    # Build (incrementally) and run through cargo so the binary matches the source.
    return ["cargo", "run", "--quiet", "--bin", "webgpu-amp", "--"]


def close(ours, theirs):
    """Largest |a - b| and whether every value is within ATOL + RTOL * |b|."""
    diff = (ours - theirs).abs()
    ok = bool((diff <= ATOL + RTOL * theirs.abs()).all())
    return float(diff.max()) if diff.numel() else 0.0, ok


def run_case(model_name, opt_name, args, workdir):
    torch.manual_seed(args.seed)
    flags, make_opt = OPTIMIZERS[opt_name]
    model = MODELS[model_name]()
    init_path = os.path.join(workdir, f"{model_name}-init.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, init_path)

    n = args.steps * args.batch_size
    x = torch.randn(n, 1, 28, 28)
    y = torch.randint(0, 10, (n,))
    y[0] = 9  # the class count is read as max(label) + 1: make it 10
    data_path = os.path.join(workdir, "data.safetensors")
    save_file({"x": x.contiguous(), "y": y.contiguous()}, data_path)

    out_path = os.path.join(workdir, f"{model_name}-{opt_name}-ours.safetensors")
    metrics_path = os.path.join(workdir, f"{model_name}-{opt_name}.jsonl")
    cmd = binary_command(args.bin) + [
        "train", "--model", model_name, "--dataset", data_path, "--init", init_path,
        "--precision", "f32", "--batch-size", str(args.batch_size), "--steps", str(args.steps),
        "--no-shuffle", "--no-validate", "--save", out_path, "--metrics", metrics_path,
    ] + flags
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"{model_name}/{opt_name}: webgpu-amp failed ({done.returncode}):\n{done.stderr}")
        return False
    with open(metrics_path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    ours_losses = torch.tensor([l["loss"] for l in lines if "step" in l], dtype=torch.float32)

    # Our checkpoint must load strictly into the PyTorch module.
    ours = MODELS[model_name]()
    ours.load_state_dict(load_file(out_path))  # strict=True: same keys, same shapes

    # The same steps in PyTorch.
    ref = MODELS[model_name]()
    ref.load_state_dict(load_file(init_path))
    opt = make_opt(ref.parameters())
    loss_fn = nn.CrossEntropyLoss()
    ref_losses = []
    for s in range(args.steps):
        xb = x[s * args.batch_size:(s + 1) * args.batch_size]
        yb = y[s * args.batch_size:(s + 1) * args.batch_size]
        opt.zero_grad()
        loss = loss_fn(ref(xb), yb)
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    ref_losses = torch.tensor(ref_losses, dtype=torch.float32)

    ok = True
    if ours_losses.shape != ref_losses.shape:
        print(f"{model_name}/{opt_name}: {len(ours_losses)} losses from webgpu-amp, want {len(ref_losses)}")
        return False
    loss_diff, loss_ok = close(ours_losses, ref_losses)
    ok &= loss_ok
    print(f"{model_name}/{opt_name}: losses ours {[round(v, 6) for v in ours_losses.tolist()]}")
    print(f"{' ' * len(model_name + opt_name)}   torch {[round(v, 6) for v in ref_losses.tolist()]}")
    print(f"  max |loss diff| = {loss_diff:.3g} {'ok' if loss_ok else 'MISMATCH'}")
    ref_state = ref.state_dict()
    for name, value in ours.state_dict().items():
        diff, p_ok = close(value, ref_state[name])
        moved = float((ref_state[name] - load_file(init_path)[name]).abs().max())
        ok &= p_ok
        print(f"  {name:<14} max |param diff| = {diff:.3g} (moved up to {moved:.3g} from init) "
              f"{'ok' if p_ok else 'MISMATCH'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", help="webgpu-amp binary (default: cargo run)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                        help="comma-separated MODEL:OPTIMIZER (models: %s; optimizers: %s)"
                        % (", ".join(MODELS), ", ".join(OPTIMIZERS)))
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__}; tolerance |ours - torch| <= {ATOL} + {RTOL} * |torch|")
    workdir = tempfile.mkdtemp(prefix="webgpu-amp-pytorch-compat-")
    try:
        results = []
        for case in args.cases.split(","):
            model_name, opt_name = case.strip().split(":")
            if model_name not in MODELS or opt_name not in OPTIMIZERS:
                parser.error(f"unknown case `{case}`")
            results.append((case, run_case(model_name, opt_name, args, workdir)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    failed = [c for c, ok in results if not ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
