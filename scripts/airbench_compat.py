#!/usr/bin/env python3
"""Cross-check airbench94's net and its frozen parameters against PyTorch (issue 40): our
`airbench-tiny` (nn/resnet/airbench.rs) against gpu_report_torch_models.py's `airbench_net`
at widths 8/16/16, whose whitening conv weight and every BatchNorm weight have
requires_grad=False (airbench's), trained with airbench's optimizer shape: SGD with Nesterov
momentum 0.85, weight decay, cross-entropy with label smoothing 0.2.

For each case it:
  1. builds the net in PyTorch, saves its initial state_dict (parameters and BatchNorm
     buffers) with safetensors, and writes a fixed data set (x = randn(N, 3, 32, 32), labels);
  2. runs `webgpu-amp train --model airbench-tiny --init ... --no-shuffle --no-validate` with
     --metrics and --save;
  3. loads our checkpoint into a fresh PyTorch net with load_state_dict(strict=True);
  4. runs the same steps in PyTorch on the CPU (torch.optim.SGD over the parameters that
     require a gradient, as airbench builds its optimizer) and compares per step the loss and
     at the end every tensor; the frozen ones must be bit-identical to the init on both sides.

Cases:
  - f32: 8 steps; losses, parameters and running statistics within atol 1e-5 + rtol 1e-4
    (num_batches_tracked exact).
  - amp-f16: 8 steps under autocast (f16) with a GradScaler from 2^20 of growth interval 2
    (the scale grows, then overflows and a step is skipped on both sides) against
    `torch.autocast("cpu", torch.float16)` + `torch.amp.GradScaler`: losses within 1e-2
    relative, the scale and skip flag exact until the first skip (and that step), the final
    tensors within atol 1e-3 + rtol 1e-2, or 2x PyTorch's own amp-f16 against f32 difference
    (its f32 run leaving out the skipped steps), as resnet_compat_amp.py; PyTorch's buffers
    are put back on its skipped steps, as ours are by default.

Usage: .venv/bin/python scripts/airbench_compat.py [--bin PATH] [--case f32|amp-f16]
(without --bin, `cargo run`; WEBGPU_AMP_BACKEND picks Vulkan or GL). Exit status 0 when every
case matches, 1 when any does not or torch is missing (an error, never a skip).
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_env  # noqa: E402
from compat_env import ROOT  # noqa: E402
from gpu_report_torch_models import airbench_net  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover - depends on the machine
    compat_env.torch_missing(e, "airbench cross-check", __file__)

WIDTHS = (8, 16, 16)
STEPS, BATCH = 8, 8
LR, MOMENTUM, WEIGHT_DECAY, SMOOTHING = 0.02, 0.85, 5e-3, 0.2
OUR_FLAGS = ["--optimizer", "sgd", "--lr", repr(LR), "--momentum", repr(MOMENTUM), "--nesterov",
             "--weight-decay", repr(WEIGHT_DECAY), "--label-smoothing", repr(SMOOTHING)]
TOLERANCES = {"f32": (1e-5, 1e-4, 1e-4), "amp-f16": (1e-3, 1e-2, 1e-2)}  # atol, rtol, loss rtol
# amp-f16's GradScaler: a scale that grows every 2 clean steps from 2^20 overflows f16
# gradients within the run, so a skip happens on both sides.
INIT_SCALE, GROWTH_INTERVAL = 2.0 ** 20, 2
SCALER_FLAGS = ["--init-scale", repr(INIT_SCALE), "--growth-interval", str(GROWTH_INTERVAL)]
# amp-f16's final tensors may instead be within FLOOR_FACTOR x how far PyTorch's own amp-f16
# run parts from its f32 run (resnet_compat_amp.py's rule).
FLOOR_FACTOR = 2
FROZEN = {"0.weight"} | {f"{g}.norm{i}.weight" for g in (2, 3, 4) for i in (1, 2)}


def net():
    return airbench_net(torch, widths=WIDTHS)


def binary_command(path):
    if path:
        return compat_env.runner() + [path]
    return ["cargo", "run", "--quiet", "--bin", "webgpu-amp", "--"]


def run_ours(args, workdir, case, init_path, data_path):
    out_path = os.path.join(workdir, f"{case}-ours.safetensors")
    metrics_path = os.path.join(workdir, f"{case}.jsonl")
    cmd = binary_command(args.bin) + [
        "train", "--model", "airbench-tiny", "--dataset", data_path, "--init", init_path,
        "--batch-size", str(BATCH), "--steps", str(STEPS), "--precision", case,
        "--no-shuffle", "--no-validate", "--save", out_path, "--metrics", metrics_path,
    ] + OUR_FLAGS + (SCALER_FLAGS if case == "amp-f16" else [])
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"   webgpu-amp failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
        return None
    print(f"   ours: {compat_env.adapter_line(done.stdout)}")
    with open(metrics_path) as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    return [m for m in metrics if "step" in m], out_path


def torch_run(case, init_path, x, y, skips=()):
    """The steps in PyTorch on the CPU: per step (loss, scale used, skipped) and the model; in
    f32, the steps in `skips` (0-based) are left out as a skipping scaler leaves them."""
    ref = net()
    ref.load_state_dict(load_file(init_path))
    ref.train()
    # airbench's optimizer sees only the parameters that require a gradient.
    trainable = [p for p in ref.parameters() if p.requires_grad]
    opt = torch.optim.SGD(trainable, lr=LR, momentum=MOMENTUM, nesterov=True,
                          weight_decay=WEIGHT_DECAY)
    amp = case == "amp-f16"
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL,
                                  enabled=amp)
    trajectory = []
    for s in range(STEPS):
        xb, yb = x[s * BATCH:(s + 1) * BATCH], y[s * BATCH:(s + 1) * BATCH]
        before = {name: value.clone() for name, value in ref.named_buffers()}
        opt.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.float16, enabled=amp):
            out = ref(xb)
        loss = F.cross_entropy(out.float(), yb, label_smoothing=SMOOTHING)
        scale = scaler.get_scale() if amp else None
        scaler.scale(loss).backward()
        if s in skips:
            opt.zero_grad()
            for name, value in ref.named_buffers():
                value.copy_(before[name])
        else:
            scaler.step(opt)
        scaler.update()
        skipped = amp and scaler.get_scale() < scale
        if skipped:  # ours leaves a skipped step's running statistics alone (the default)
            for name, value in ref.named_buffers():
                value.copy_(before[name])
        trajectory.append((loss.item(), scale, skipped))
    return trajectory, ref


def run_case(case, args, workdir):
    torch.manual_seed(args.seed)
    init_path = os.path.join(workdir, f"{case}-init.safetensors")
    save_file({k: v.contiguous() for k, v in net().state_dict().items()}, init_path)
    n = STEPS * BATCH
    x = torch.randn(n, 3, 32, 32)
    y = torch.randint(0, 10, (n,))
    y[0] = 9  # the class count is read as max(label) + 1: make it 10
    data_path = os.path.join(workdir, f"{case}-data.safetensors")
    save_file({"x": x.contiguous(), "y": y.contiguous()}, data_path)
    atol, rtol, loss_rtol = TOLERANCES[case]
    print(f"\n== {case}: airbench-tiny, batch {BATCH}, {STEPS} steps, SGD Nesterov, label "
          f"smoothing {SMOOTHING}, frozen {sorted(FROZEN)}")
    got = run_ours(args, workdir, case, init_path, data_path)
    if got is None:
        return False
    ours, out_path = got
    theirs, ref = torch_run(case, init_path, x, y)
    ok, first_skip = True, None
    for s, (t_loss, t_scale, t_skip) in enumerate(theirs):
        o = ours[s] if s < len(ours) else {"loss": float("nan"), "scale": 0, "skipped": None}
        loss_ok = abs(o["loss"] - t_loss) <= loss_rtol * abs(t_loss) + (atol if case == "f32" else 0)
        line = f"   step {s + 1}: loss ours {o['loss']:.6f} torch {t_loss:.6f} " \
               f"{'ok' if loss_ok else 'DIFFERS'}"
        ok &= loss_ok
        if case == "amp-f16":
            exact_here = first_skip is None or s <= first_skip
            scaler_ok = o["scale"] == t_scale and bool(o["skipped"]) == t_skip
            ok &= scaler_ok or not exact_here
            if t_skip and first_skip is None:
                first_skip = s
            line += f"; scale ours {o['scale']:g} torch {t_scale:g}, skipped " \
                    f"{bool(o['skipped'])}/{t_skip} " \
                    f"{'ok' if scaler_ok else ('DIFFERS' if exact_here else '(after the skip)')}"
        print(line)
    if case == "amp-f16" and first_skip is None:
        print("   no step skipped on PyTorch's side: the scaler sequence is not exercised")
        ok = False
    trained = net()
    try:
        trained.load_state_dict(load_file(out_path), strict=True)
    except RuntimeError as e:
        print(f"   load_state_dict(strict=True) refused our checkpoint: {e}")
        return False
    print("   our checkpoint loads with load_state_dict(strict=True)")
    init, mine, theirs_state = load_file(init_path), trained.state_dict(), ref.state_dict()
    worst, floor = {False: 0.0, True: 0.0}, {False: 0.0, True: 0.0}
    if case == "amp-f16":
        # PyTorch's own f16 noise on this run: its f32 steps from the same init, leaving out
        # the steps its scaler skipped.
        skips = [i for i, t in enumerate(theirs) if t[2]]
        f32_state = torch_run("f32", init_path, x, y, skips=skips)[1].state_dict()
        for key, value in theirs_state.items():
            if not key.endswith("num_batches_tracked"):
                diff = float((f32_state[key].double() - value.double()).abs().max())
                floor["running" in key] = max(floor["running" in key], diff)
    for key, value in mine.items():
        want = theirs_state[key]
        if key in FROZEN:
            good = torch.equal(value, init[key]) and torch.equal(want, init[key])
            if not good:
                print(f"   {key} is frozen but moved DIFFERS")
        elif key.endswith("num_batches_tracked"):
            good = int(value) == int(want)
        else:
            diff = (value.double() - want.double()).abs()
            worst["running" in key] = max(worst["running" in key], float(diff.max()))
            good = bool((diff <= atol + rtol * want.double().abs()).all()
                        or diff.max() <= FLOOR_FACTOR * floor["running" in key])
            moved = not torch.equal(value, init[key])
            if not moved:
                print(f"   {key} trains but did not move DIFFERS")
            good &= moved
            if not good:
                print(f"   {key}: worst |ours - torch| {float(diff.max()):.3g} DIFFERS")
        ok &= good
    print(f"   frozen tensors ({len(FROZEN)}) bit-identical to the init on both sides; worst "
          f"|ours - torch|: parameters {worst[False]:.3g}, running statistics {worst[True]:.3g} "
          f"(tolerance {atol:g} + {rtol:g} x |torch|"
          + (f", or {FLOOR_FACTOR} x PyTorch's own amp-f16 against f32: {floor[False]:.3g}, "
             f"{floor[True]:.3g})" if case == "amp-f16" else ")"))
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", help="webgpu-amp binary (default: cargo run)")
    parser.add_argument("--case", choices=sorted(TOLERANCES), action="append")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    compat_env.run_cases(args.case or list(TOLERANCES), lambda case, workdir: run_case(case, args, workdir))


if __name__ == "__main__":
    main()
