#!/usr/bin/env python3
"""Cross-check a small BatchNorm ResNet against PyTorch (issue 40's parity): `resnet-tiny`
(nn/resnet: kuangliu's BasicBlock ResNet, stages 8/16 of one block on 1x28x28, the second
block with a projection shortcut `shortcut.0` conv 1x1 stride 2 + `shortcut.1` BatchNorm).

For each case it:
  1. builds kuangliu's ResNet in PyTorch with the same widths and saves its initial
     state_dict (parameters and BatchNorm buffers) with safetensors;
  2. writes a fixed data set (x = randn(N, 1, 28, 28), y = randint(0, 10, (N,)));
  3. runs `webgpu-amp train --model resnet-tiny --init ... --no-shuffle --no-validate` with
     --metrics (per step: loss, scale, skipped) and --save;
  4. loads our checkpoint into a fresh PyTorch ResNet with load_state_dict(strict=True)
     (the checkpoint round trip: names, shapes, int64 num_batches_tracked);
  5. runs the same steps in PyTorch on the CPU (model.train(): batch statistics, running
     statistics updated) and compares per step the loss, and at the end every parameter and
     every running statistic; then the eval-mode loss (model.eval(): running statistics) of
     one batch through both checkpoints, both evaluated by PyTorch.

Cases: 10 steps of SGD with Nesterov momentum, and 10 of AdamW, each from the same init, in
f32. Tolerances: loss per step, parameters and running statistics atol 1e-5 + rtol 1e-4
(num_batches_tracked exact); eval loss 1e-4 relative.

Measured (lavapipe, Mesa 22; PyTorch 2.15 CPU; 2026-11-29): sgd-nesterov passes (losses to
the printed 7 digits, every parameter and running statistic within tolerance, the strict
load, the eval loss). adamw FAILS and is left out of scripts/test.sh until understood: its
losses stay within 2.2e-5 relative for all 10 steps, and after 1-3 steps our parameters are
as close to PyTorch f32 as PyTorch f64 is (<= 4e-7), but from step 4 they part faster than
rounding explains (max |ours - torch| 1.5e-5 after 5 steps, 5.6e-4 after 10, where PyTorch
f32 against f64 stays at 4e-7). Adam divides each gradient by its own magnitude, so a small
gradient summed in another order (our BatchNorm backward's fixed-chunk tree against
PyTorch's CPU cascade sums) is the first suspect; not yet shown.

Narrowed on 2026-11-29 (seed 0, our checkpoints after 1..5 steps against PyTorch's): after
step 1 every tensor matches to 1e-8; after step 2 the worst is layer1.0.conv2.weight, 2.7e-5
(then 4.8e-5, 9.8e-5, 1.5e-4): the parting starts at the first step that reads Adam's
moments. Summation order alone does not explain it: PyTorch against itself in channels_last
(other convolution and reduction orders) parts by 2.9e-6 after 10 steps, f32 against f64 by
4.0e-7. So some gradient of ours carries a larger error than reordering gives, most likely in
elements whose gradient nearly cancels (Adam turns a relative error there into lr times it);
the weight gradient of the convolutions (K = N*H*W = 6272 summed per element) and the
BatchNorm backward are where to look next, element by element, at step 2.

Usage: .venv/bin/python scripts/resnet_compat.py [--bin PATH] [--case NAME]
(without --bin, `cargo run`; WEBGPU_AMP_BACKEND picks Vulkan or GL). Exit status 0 when
every case matches, 1 when any does not or torch is missing (an error, never a skip).

NOT YET: the amp-f16 cases (<= 1e-2, scaler sequence exact until the first skip), the
forced-skip run with the PyTorch switch (pytorch#88474), Mesa 26's tensor cores.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_env  # noqa: E402
from compat_env import ROOT  # noqa: E402
from gpu_report_torch_models import resnet18_cifar  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover - depends on the machine
    compat_env.torch_missing(e, "ResNet cross-check", __file__)


def ResNet():
    """resnet-tiny's twin: kuangliu's ResNet (gpu_report_torch_models.py, the GPU report's
    ResNet-18) with stages 8/16 of one block on 1x28x28."""
    return resnet18_cifar(torch, widths=(8, 16), blocks=(1, 1), classes=10, channels=1)


CASES = {
    "sgd-nesterov": (["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--nesterov",
                      "--weight-decay", "5e-4"],
                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                               weight_decay=5e-4)),
    "adamw": (["--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.01"],
              lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01)),
}
STEPS, BATCH = 10, 8
ATOL, RTOL = 1e-5, 1e-4
EVAL_RTOL = 1e-4


def binary_command(path):
    if path:
        return compat_env.runner() + [path]
    return ["cargo", "run", "--quiet", "--bin", "webgpu-amp", "--"]


def worst(ours, theirs):
    """Largest |a - b| and whether every value is within ATOL + RTOL * |b|."""
    a, b = ours.double(), theirs.double()
    diff = (a - b).abs()
    return float(diff.max()) if diff.numel() else 0.0, bool((diff <= ATOL + RTOL * b.abs()).all())


def torch_run(make_opt, init_path, x, y, dtype):
    """The steps in PyTorch on the CPU in `dtype` (float64: how far PyTorch's own rounding
    moves it): the losses and the trained model."""
    ref = ResNet().to(dtype)
    ref.load_state_dict(load_file(init_path))
    ref.train()
    opt = make_opt(ref.parameters())
    losses = []
    for s in range(STEPS):
        xb, yb = x[s * BATCH:(s + 1) * BATCH].to(dtype), y[s * BATCH:(s + 1) * BATCH]
        opt.zero_grad()
        loss = F.cross_entropy(ref(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, ref


def run_case(name, args, workdir):
    flags, make_opt = CASES[name]
    torch.manual_seed(args.seed)
    model = ResNet()
    init_path = os.path.join(workdir, f"{name}-init.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, init_path)
    n = STEPS * BATCH
    x = torch.randn(n, 1, 28, 28)
    y = torch.randint(0, 10, (n,))
    y[0] = 9  # the class count is read as max(label) + 1: make it 10
    data_path = os.path.join(workdir, f"{name}-data.safetensors")
    save_file({"x": x.contiguous(), "y": y.contiguous()}, data_path)

    out_path = os.path.join(workdir, f"{name}-ours.safetensors")
    metrics_path = os.path.join(workdir, f"{name}.jsonl")
    cmd = binary_command(args.bin) + [
        "train", "--model", "resnet-tiny", "--dataset", data_path, "--init", init_path,
        "--precision", "f32", "--batch-size", str(BATCH), "--steps", str(STEPS),
        "--no-shuffle", "--no-validate", "--save", out_path, "--metrics", metrics_path,
    ] + flags
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"   webgpu-amp failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
        return False
    with open(metrics_path) as f:
        ours = [json.loads(line) for line in f if line.strip()]
    ours = [s for s in ours if "step" in s]

    losses, ref = torch_run(make_opt, init_path, x, y, torch.float32)
    ok = True
    print(f"\n== {name}: resnet-tiny, f32, batch {BATCH}, {STEPS} steps")
    for s in range(STEPS):
        theirs = losses[s]
        mine = ours[s]["loss"] if s < len(ours) else float("nan")
        good = abs(mine - theirs) <= ATOL + RTOL * abs(theirs)
        ok &= good
        print(f"   step {s + 1:2}: loss ours {mine:.7f} torch {theirs:.7f} "
              f"{'ok' if good else 'DIFFERS'}")

    # The checkpoint loads strictly into kuangliu's definition.
    trained = ResNet()
    try:
        trained.load_state_dict(load_file(out_path), strict=True)
    except RuntimeError as e:
        print(f"   load_state_dict(strict=True) refused our checkpoint: {e}")
        return False
    print("   our checkpoint loads with load_state_dict(strict=True)")
    theirs_state = ref.state_dict()
    for key, value in trained.state_dict().items():
        if key.endswith("num_batches_tracked"):
            good = int(value) == int(theirs_state[key])
            err = abs(int(value) - int(theirs_state[key]))
        else:
            err, good = worst(value, theirs_state[key])
        if not good:
            print(f"   {key}: worst |ours - torch| {err:.3g} DIFFERS")
        ok &= good
    running = [k for k in theirs_state if "running" in k]
    print(f"   {len(theirs_state)} tensors compared ({len(running)} running statistics)")

    # Eval mode (running statistics) on a fresh batch through both trained models.
    xe = torch.randn(BATCH, 1, 28, 28)
    ye = torch.randint(0, 10, (BATCH,))
    trained.eval()
    ref.eval()
    with torch.no_grad():
        le, lr_ = F.cross_entropy(trained(xe), ye).item(), F.cross_entropy(ref(xe), ye).item()
    good = abs(le - lr_) <= EVAL_RTOL * abs(lr_)
    ok &= good
    print(f"   eval loss: ours' weights {le:.7f}, torch's {lr_:.7f} {'ok' if good else 'DIFFERS'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", help="webgpu-amp binary (default: cargo run)")
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.case or list(CASES):
            results[name] = run_case(name, args, workdir)
    print()
    for name, good in results.items():
        print(f"{name}: {'ok' if good else 'FAILED'}")
    sys.exit(0 if all(results.values()) else 1)


if __name__ == "__main__":
    main()
