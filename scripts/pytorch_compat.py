#!/usr/bin/env python3
"""Cross-check webgpu-amp against PyTorch (needs torch, safetensors and numpy: the venv made by
`bash scripts/python-venv.sh`).

For each case it:
  1. builds the PyTorch model with the names webgpu-amp uses (mlp:
     nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10));
     mnist-cnn: a module with conv1, conv2, fc) and saves its initial state_dict with
     safetensors.torch.save_file;
  2. writes a fixed data set (x = randn(N, 1, 28, 28) times the case's input scale,
     y = randint(0, 10, (N,))) as a safetensors file, so both sides see bit-identical inputs;
  3. runs `webgpu-amp train --init ... --dataset ... --no-shuffle --precision P` with --metrics
     (per step: loss, the scale that step's backward used, skipped) and --save;
  4. loads our checkpoint into a fresh PyTorch model strictly:
     model.load_state_dict(safetensors.torch.load_file(path));
  5. runs the same steps in PyTorch on CPU from the same init on the same batches:
     - f32: plain f32 training;
     - amp-f16: `with torch.autocast("cpu", dtype=torch.float16): out = model(x)`, the loss
       `F.cross_entropy(out.float(), y)` outside autocast, and
       `scaler = torch.amp.GradScaler("cpu", init_scale, growth_interval)` with
       `scaler.scale(loss).backward(); scaler.step(opt); scaler.update()`;
  6. prints both trajectories step by step (loss, scale, skipped) and compares them: losses
     and final parameters within the case's tolerance, scale sequence and skip pattern exactly.
     A PyTorch step counts as skipped when `scaler.get_scale()` decreased in `update()`.

Autocast on CPU against webgpu-amp's policy (which follows PyTorch's CUDA lists), as
checked on torch 2.15 (`torch.amp.GradScaler("cpu")` and CPU float16 autocast both work there):
  linear and conv2d run in f16 on both (CPU's lower-precision list has them); ReLU, max-pool
  and flatten run in their input dtype (f16) on both; master weights stay f32 and autocast
  casts them to f16 once per step on both. The lists differ in softmax and log_softmax: CPU
  autocast runs them in the input dtype (f16 in, f16 out), CUDA's lists them as f32. So the
  loss is computed outside autocast on `out.float()`: CUDA's semantics (f32 log-softmax and
  NLL of the f16 logits) whatever the CPU lists say (CPU autocast would give an f32
  cross_entropy too, its f32 list has cross_entropy_loss). The gradient of the f16 logits is
  rounded to f16 on both sides, which is where a too-large scale overflows first.

  Weight and bias gradients: PyTorch (CPU and CUDA alike) computes them in f16 under
  autocast (f16 inputs, f32 accumulation, one rounding to f16, overflow to inf) and casts
  them to f32 into `.grad`; webgpu-amp rounds them to the forward's dtype the same way before
  adding them to its f32 gradients. So a batch's summed scaled weight gradient that overflows
  f16 skips the step on both sides (the weight-grad-overflow case). The backoff case is built
  so that the first tensor to overflow is the logits' gradient: batch size 1 (a bias gradient
  is then that row itself) and inputs scaled by 0.05, so that every input and hidden
  activation is below 1 (a weight gradient is then an outer product no larger than the
  gradient it came from).

Tolerances (|ours - torch| <= atol + rtol * |torch|, per loss and per parameter value;
measured with torch 2.15 against lavapipe, native and packed f16 alike):
  - f32: loss and parameters atol 1e-5, rtol 1e-4. Both compute in f32; only summation
    order differs (GPU tiled/tree reductions against PyTorch's CPU kernels). Measured: loss
    2e-7 relative, parameters 1.8e-6 (Adam's first layer; SGD 5e-8): over 5x margin.
  - amp-f16 loss: atol 1e-5, rtol 5e-4 (one f16 ulp). Both sides round the same activations
    to f16, but their f32 accumulations differ in the last bits, so now and then a value
    rounds to the neighbouring f16 (4.9e-4 relative); the mean over the batch averages that
    out. Measured: 8.7e-6 relative (mlp), 2.8e-5 (mnist-cnn), 1.3e-6 (backoff): over 15x
    margin. (The mnist-cnn at lr 0.05 reaches 1.6e-4: chaotic, not used.)
  - amp-f16 parameters: atol 2e-5, rtol 1e-3. PyTorch's f16 weight gradients and those
    rounding differences move the updates by parts in 1e4. Measured: 6.9e-6 (mlp, Adam),
    4.2e-6 (backoff). On mnist-cnn the differences compound over the steps (2e-6 after one,
    6e-5 after five), so a tensor there may instead be within FLOOR_FACTOR (2) x PyTorch's
    own amp-f16 vs f32 difference on it (f32 run skipping the same steps), a bound that must
    itself stay under 10% of how far the tensor moved; measured: at most 0.65 x that difference.
  - scale and skipped: exact, every step.

The models, optimizers, tolerances and cases are in pytorch_compat_cases.py beside this file.

Tensor cores: with `--tensor-cores on:8x8` (or on:16x16) every run of ours uses them (the
default cases are then the amp-f16 ones on native f16 storage), within the same amp-f16
tolerances: PyTorch's CPU autocast also multiplies f16 inputs and accumulates in f32. On a
machine without a GPU, Mesa 26's lavapipe runs them: `scripts/lavapipe-coop.sh cargo build`,
then `WEBGPU_AMP_RUNNER="scripts/lavapipe-coop.sh run" .venv/bin/python
scripts/pytorch_compat.py --bin target/debug/webgpu-amp --tensor-cores on:8x8`.

Usage: python3 scripts/pytorch_compat.py [--bin PATH] [--cases NAME,...] [--list]
                                         [--tensor-cores SETTING]
  Run with the venv's python (.venv/bin/python); plain python3 re-runs itself with
  .venv/bin/python when it has no torch and that venv exists.
Exit status: 0 when every case matches, 1 when any case does not or when torch, safetensors
or numpy cannot be imported (a missing torch is an error, never a skip), 2 on bad arguments.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_env  # noqa: E402
from compat_env import ROOT  # noqa: E402

try:
    import numpy  # noqa: F401  (installed with torch by the venv step; checked here so a
    import torch  # broken venv fails loudly rather than half-way through a case)
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover - depends on the machine
    compat_env.torch_missing(e, "PyTorch cross-check", __file__)

from pytorch_compat_cases import (  # noqa: E402  (needs torch, checked above)
    AMP_LOSS,
    AMP_PARAM,
    CASES,
    CASES_BY_NAME,
    F32_LOSS,
    F32_PARAM,
    FLOOR_FACTOR,
    FLOOR_MAX_OF_MOVE,
    MODELS,
    OPTIMIZERS,
)




def binary_command(path):
    if path:
        return compat_env.runner() + [path]
    # Build (incrementally) and run through cargo so the binary matches the source.
    return ["cargo", "run", "--quiet", "--bin", "webgpu-amp", "--"]


def close(ours, theirs, tol):
    """Largest |a - b| and whether every value is within tol.atol + tol.rtol * |b|."""
    ours = ours.double()
    theirs = theirs.double()
    diff = (ours - theirs).abs()
    ok = bool((diff <= tol.atol + tol.rtol * theirs.abs()).all())
    return float(diff.max()) if diff.numel() else 0.0, ok


def run_ours(case, args, init_path, data_path, workdir):
    out_path = os.path.join(workdir, f"{case.name}-ours.safetensors")
    metrics_path = os.path.join(workdir, f"{case.name}.jsonl")
    flags, _ = OPTIMIZERS[case.optimizer]
    cmd = binary_command(args.bin) + [
        "train", "--model", case.model, "--dataset", data_path, "--init", init_path,
        "--precision", case.precision, "--batch-size", str(case.batch_size),
        "--steps", str(case.steps), "--no-shuffle", "--no-validate",
        "--save", out_path, "--metrics", metrics_path,
    ] + flags
    if args.tensor_cores:
        cmd += ["--tensor-cores", args.tensor_cores]
    if case.precision == "amp-f16":
        cmd += ["--init-scale", repr(case.init_scale),
                "--growth-interval", str(case.growth_interval),
                "--growth-factor", repr(case.growth_factor),
                "--backoff-factor", repr(case.backoff_factor)]
    cmd += case.flags
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise CaseError(f"webgpu-amp failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    with open(metrics_path) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    steps = [s for s in steps if "step" in s]
    if [s["step"] for s in steps] != list(range(1, case.steps + 1)):
        raise CaseError(f"metrics name steps {[s['step'] for s in steps]}, "
                        f"want 1..{case.steps}")
    adapter = compat_env.adapter_line(done.stdout)
    problem = compat_env.tensor_core_check(args.tensor_cores, adapter)
    if problem:
        raise CaseError(problem)
    return steps, out_path, adapter


def run_torch(case, init_path, x, y, amp, skip_steps=()):
    """The same steps in PyTorch (CPU), with autocast + GradScaler when `amp`; without, the
    steps in `skip_steps` (0-based) are left out as a skipping scaler would. Returns per step
    (loss, scale, skipped, largest |scaled gradient|) and the trained model."""
    _, make_opt = OPTIMIZERS[case.optimizer]
    model = MODELS[case.model]()
    model.load_state_dict(load_file(init_path))
    opt = make_opt(model.parameters())
    scaler = torch.amp.GradScaler(
        "cpu", init_scale=case.init_scale, growth_factor=case.growth_factor,
        backoff_factor=case.backoff_factor,
        growth_interval=case.growth_interval, enabled=amp,
    )
    trajectory = []
    b = case.batch_size
    for s in range(case.steps):
        xb, yb = x[s * b:(s + 1) * b], y[s * b:(s + 1) * b]
        opt.zero_grad()
        if amp:
            with torch.autocast(device_type="cpu", dtype=torch.float16):
                out = model(xb)
            assert out.dtype == torch.float16, out.dtype
            # CUDA autocast semantics for the loss: f32 log-softmax of the f16 logits.
            loss = F.cross_entropy(out.float(), yb)
        else:
            loss = F.cross_entropy(model(xb), yb)
        scale = scaler.get_scale() if amp else 1.0
        scaler.scale(loss).backward()
        # Before step() unscales them: the scaled gradients (f16 values widened to f32).
        grad_max = max(float(p.grad.abs().max()) for p in model.parameters())
        if amp:
            scaler.step(opt)
            scaler.update()
            skipped = scaler.get_scale() < scale
        else:
            skipped = s in skip_steps
            if not skipped:
                opt.step()
        trajectory.append((loss.item(), scale, skipped, grad_max))
    return trajectory, model


class CaseError(Exception):
    pass


def fmt_scale(v):
    if v >= 1 and v == int(v) and (int(v) & (int(v) - 1)) == 0:
        return f"2^{int(math.log2(v))}"
    return f"{v:g}"


def run_case(case, args, workdir):
    torch.manual_seed(args.seed)
    model = MODELS[case.model]()
    init_path = os.path.join(workdir, f"{case.name}-init.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, init_path)

    n = case.steps * case.batch_size
    x = torch.randn(n, 1, 28, 28) * case.input_scale
    y = torch.randint(0, 10, (n,))
    y[0] = 9  # the class count is read as max(label) + 1: make it 10
    data_path = os.path.join(workdir, f"{case.name}-data.safetensors")
    save_file({"x": x.contiguous(), "y": y.contiguous()}, data_path)

    title = (f"{case.name}: {case.model}, {case.optimizer}, --precision {case.precision}, "
             f"batch {case.batch_size}, {case.steps} steps")
    if case.precision == "amp-f16":
        title += (f", init scale {fmt_scale(case.init_scale)}, "
                  f"growth interval {case.growth_interval}")
    if case.flags:
        title += f", {' '.join(case.flags)}"
    if case.known_issue:
        title += " [known issue, pinned]"
    print(f"\n== {title}")

    t0 = time.monotonic()
    ours_steps, ours_path, adapter = run_ours(case, args, init_path, data_path, workdir)
    t1 = time.monotonic()
    amp = case.precision == "amp-f16"
    theirs, ref = run_torch(case, init_path, x, y, amp)
    floor_ref = None
    if amp and case.noise_floor:
        # PyTorch in f32, leaving out the steps PyTorch's scaler skipped: how far f16 moves
        # PyTorch's own training on this case (the f16 noise floor of the parameters).
        skips = [i for i, t in enumerate(theirs) if t[2]]
        _, floor_ref = run_torch(case, init_path, x, y, False, skips)
    t2 = time.monotonic()
    print(f"   ours: {adapter} ({t1 - t0:.1f} s); torch: CPU ({t2 - t1:.1f} s)")

    ok = True
    problems = []
    print(f"   {'step':>4} {'loss ours':>12} {'loss torch':>12} {'|diff|':>9}  "
          f"{'scale ours':>10} {'scale torch':>11}  skipped ours/torch")
    for i, (o, (t_loss, t_scale, t_skip, _)) in enumerate(zip(ours_steps, theirs)):
        o_loss, o_scale, o_skip = o["loss"], o["scale"], bool(o["skipped"])
        loss_ok = (math.isfinite(o_loss) and math.isfinite(t_loss)
                   and abs(o_loss - t_loss) <= case.loss_tol.atol + case.loss_tol.rtol * abs(t_loss))
        scale_ok = o_scale == t_scale
        skip_ok = o_skip == t_skip
        marks = []
        if not loss_ok:
            marks.append("LOSS")
        if not scale_ok:
            marks.append(f"SCALE ({o_scale!r} vs {t_scale!r})")
        if not skip_ok:
            marks.append("SKIP")
        print(f"   {i + 1:>4} {o_loss:>12.6f} {t_loss:>12.6f} {abs(o_loss - t_loss):>9.2e}  "
              f"{fmt_scale(o_scale):>10} {fmt_scale(t_scale):>11}  "
              f"{'yes' if o_skip else 'no':>3}/{'yes' if t_skip else 'no':<3}"
              + (f"  MISMATCH {','.join(marks)}" if marks else ""))
        if marks:
            ok = False
            problems.append(f"step {i + 1}: {','.join(marks)}")

    o_losses = torch.tensor([s["loss"] for s in ours_steps], dtype=torch.float64)
    t_losses = torch.tensor([t[0] for t in theirs], dtype=torch.float64)
    loss_diff, _ = close(o_losses, t_losses, case.loss_tol)
    rel = float(((o_losses - t_losses).abs() / t_losses.abs()).max())
    print(f"   losses: max |diff| {loss_diff:.3g}, max relative {rel:.3g} "
          f"(tolerance {case.loss_tol}); scale sequence and skip pattern: "
          f"{'exact' if not any('SCALE' in p or 'SKIP' in p for p in problems) else 'DIFFER'}")

    skips = sum(1 for t in theirs if t[2])
    growths = sum(1 for a, b in zip(theirs, theirs[1:]) if b[1] > a[1])
    if case.precision == "amp-f16":
        applied = [t[3] for t in theirs if not t[2]]
        print(f"   scaler (torch): {skips} skipped steps, {growths} growths; largest scaled "
              f"gradient on an applied step {max(applied) if applied else 0:.4g} "
              f"(f16 overflows at 65520)")
    if skips < case.min_skips or growths < case.min_growths:
        ok = False
        problems.append(f"case too weak: {skips} skips (want >= {case.min_skips}), "
                        f"{growths} growths (want >= {case.min_growths})")

    # Our checkpoint must load strictly into the PyTorch module (same keys, same shapes).
    ours = MODELS[case.model]()
    ours.load_state_dict(load_file(ours_path))
    init = load_file(init_path)
    ref_state = ref.state_dict()
    floor_state = floor_ref.state_dict() if floor_ref is not None else None
    for name, value in ours.state_dict().items():
        diff, p_ok = close(value, ref_state[name], case.param_tol)
        moved = float((ref_state[name] - init[name]).abs().max())
        line = (f"   {name:<14} max |ours - torch| {diff:.3g} (moved up to {moved:.3g} from "
                f"init; {case.param_tol}")
        if floor_state is not None:
            floor = float((ref_state[name] - floor_state[name]).abs().max())
            line += f"; or <= {FLOOR_FACTOR:g} x torch amp-f16 vs f32 {floor:.3g}"
            if not p_ok and diff <= FLOOR_FACTOR * floor:
                if FLOOR_FACTOR * floor <= FLOOR_MAX_OF_MOVE * moved:
                    p_ok = True
                else:
                    line += f" [bound over {FLOOR_MAX_OF_MOVE:g} x moved: proves nothing]"
        if not p_ok:
            ok = False
            problems.append(f"parameter {name}")
        print(f"{line}) {'ok' if p_ok else 'MISMATCH'}")
    if case.known_issue:
        if problems == case.expect_problems:
            print(f"   {case.name}: ok (known issue reproduced exactly as pinned: {case.known_issue})")
            return True
        print(f"   {case.name}: FAILED (known issue no longer reproduces as pinned: expected "
              f"{case.expect_problems}, found {problems}. If it was fixed, turn this case into "
              f"one that must match. The issue: {case.known_issue})")
        return False
    print(f"   {case.name}: {'ok' if ok else 'FAILED (' + '; '.join(problems) + ')'}")
    return ok


def check_torch_features():
    """The cross-check needs torch.amp.GradScaler("cpu") and CPU float16 autocast (both in
    torch 2.15, which the venv step installed when this was written). Exit 1 if missing."""
    try:
        scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
        lin = nn.Linear(3, 2)
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            out = lin(torch.ones(1, 3))
        if out.dtype != torch.float16 or scaler.get_scale() != 4.0:
            raise RuntimeError(f"autocast gave {out.dtype}, scale {scaler.get_scale()}")
    except Exception as e:  # noqa: BLE001 - any failure here means the torch is unusable
        print(f"error: torch {torch.__version__} lacks torch.amp.GradScaler(\"cpu\") or CPU "
              f"float16 autocast ({e}); `bash scripts/python-venv.sh` installs a torch that has "
              f"both (2.15 has)", file=sys.stderr)
        sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", help="webgpu-amp binary (default: cargo run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", help="comma-separated case names (default: all; --list "
                        "shows them)")
    parser.add_argument("--tensor-cores", metavar="SETTING", help=compat_env.TENSOR_CORE_HELP)
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    args = parser.parse_args()
    if args.list:
        for c in CASES:
            print(c.name)
        return 0
    if args.cases is None:
        native_amp = [c for c in CASES
                      if c.precision == "amp-f16" and "packed" not in c.flags]
        args.cases = ",".join(c.name for c in (native_amp if args.tensor_cores else CASES))
    cases = []
    for name in args.cases.split(","):
        if name.strip() not in CASES_BY_NAME:
            parser.error(f"unknown case `{name}` (known: {', '.join(CASES_BY_NAME)})")
        cases.append(CASES_BY_NAME[name.strip()])
    check_torch_features()
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__} ({sys.executable}); "
          f"f32 tolerance: loss {F32_LOSS}, params {F32_PARAM}; "
          f"amp-f16 tolerance: loss {AMP_LOSS}, params {AMP_PARAM}; scale and skipped exact")
    workdir = tempfile.mkdtemp(prefix="webgpu-amp-pytorch-compat-")
    start = time.monotonic()
    try:
        results = []
        for case in cases:
            try:
                results.append((case.name, run_case(case, args, workdir)))
            except CaseError as e:
                print(f"   {case.name}: FAILED ({e})")
                results.append((case.name, False))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    failed = [c for c, ok in results if not ok]
    print(f"\npytorch_compat: {time.monotonic() - start:.1f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
