#!/usr/bin/env python3
"""Cross-check webgpu-amp's GPT against nanoGPT's GPT in PyTorch (needs torch, safetensors and
numpy: the venv made by `bash scripts/python-venv.sh`). nanoGPT's model.py is mirrored in
scripts/nanogpt_model.py (see there for the commit and what is mirrored).

Model: GPTConfig(vocab_size=11, block_size=16, n_layer=2, n_head=2, n_embd=32, dropout=0.0),
bias True and False, built in PyTorch with nanoGPT's init (torch.manual_seed(seed)) and saved
with safetensors as webgpu-amp's `--init`; the same model description goes to webgpu-amp as
`--model gpt.json` (`{"gpt": {...}}`). Data: a token data set (`x`, `y` int64 [N, 16]: y is x
shifted by one, sequences of a noisy counting pattern) in a safetensors file.

Cases:
  grads-*   one batch of 4 sequences through `cargo run --example gpt_grads` (the train step's
            planned forward and backward, see examples/gpt_grads.rs) against PyTorch's
            `logits, _ = model(x, y)`, `F.cross_entropy(logits.float(), y)`, `backward()`:
            the logits, the loss and every parameter's gradient (the tied
            transformer.wte.weight gets the embedding's and lm_head's together, on both
            sides). The init goes in both ways a PyTorch user writes it: the state dict with both
            tied keys (cloned, as nanoGPT's state_dict has them), or
            `safetensors.torch.save_model` (which keeps only `lm_head.weight`, checked here).
            Also the `gelu_tanh` activation
            against `nn.GELU(approximate="tanh")` in place of nanoGPT's MLP.gelu.
  traj-*    `webgpu-amp train --no-shuffle --warmup-steps 2` for 8 steps of batch 4, every
            other optimizer flag left to a GPT's defaults (nanoGPT's shakespeare-char recipe),
            against nanoGPT's train.py loop on the same batches in the same order:
            `model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")` (AdamW, weight decay
            on the 2-D parameters only), `get_lr(it)` (warm-up 2, cosine decay to 1e-4 at step
            8) written into the groups each step, `scaler.unscale_`, `clip_grad_norm_(1.0)`
            (it clips every step here), `scaler.step`, `scaler.update`. Every step's loss,
            learning rate (ours is get_lr rounded to f32) and, under amp-f16, the GradScaler's
            scale and skip flag, exactly; then the final parameters from our checkpoint,
            loaded with the guide's lines into nanoGPT's GPT built from the checkpoint's
            `model` metadata (load_state_dict is strict).
  checkpoint-gpt-tiny  `webgpu-amp train --model gpt-tiny --dataset hamlet --precision
            amp-f16 --steps 5 --save` (the embedded Hamlet, the guide's command; the
            moments in a moments file, as a model too big for the header has them), loaded
            strictly into nanoGPT's GPT with the guide's lines; the moments file holds
            exp_avg and exp_avg_sq of each of nanoGPT's parameters in its shape; that
            model's logits and loss
            on 4 windows of Hamlet (f32, and amp-f16 under autocast) against ours from the
            same file (examples/gpt_grads.rs with the checkpoint as its init and its `model`
            metadata as the model).
  sample-greedy  a GPT trained 80 steps on a small text (`train --dataset text:FILE
            --save`), loaded into nanoGPT's GPT with the guide's lines; `webgpu-amp sample
            --top-k 1 --precision f32` must print exactly what nanoGPT's
            `model.generate(idx, n, top_k=1)` (greedy) decodes to, from the same prompt, and
            so must the guide's lines for sampling in nanoGPT.

Precision. amp-f16 runs PyTorch with `torch.autocast("cpu", dtype=torch.float16)` around the
model and the loss on `logits.float()` outside it, with `torch.amp.GradScaler("cpu")`. webgpu-amp
follows CUDA's autocast lists, and CPU's differ where nanoGPT needs it: CPU autocast runs
`softmax` (and layer_norm, log_softmax) in the input's dtype, CUDA casts their inputs to f32
(its fp32 list). So the PyTorch side runs under `CudaFp32List`, a TorchFunctionMode that does
exactly what CUDA autocast does for those three functions (inputs to f32, autocast off inside,
f32 out); `check_amp_semantics` asserts it took: every Linear's output f16, every layer_norm's
and softmax's output f32, the residual stream f32. The rest is the same on CPU and CUDA (matmul
and linear in f16 with f32 master weights, GELU in its input's dtype, embedding in f32).
nanoGPT scales the f16 attention scores by 1/sqrt(head size) in f16 before the softmax, we do
it in f32 inside it: with a head size of 16 the factor is 1/4 and both are exact (so are the
presets': 64 and 16). Ours runs fused (`--attention fused`, the default) in every case but
the `*-unfused` ones (`--attention unfused`). PyTorch takes nanoGPT's manual path (flash=False,
nanogpt_model.use_manual_attention; the state dict does not change) in the one-batch and
checkpoint cases, fused or not on our side; a trajectory compares like with like: ours fused
against nanoGPT's flash path (scaled_dot_product_attention, which also keeps the scores and
probabilities in f32), ours unfused against the manual path (which rounds them to f16 as ours
does). Eight AdamW steps magnify the f32-vs-f16 rounding of the scores past the amp-f16
parameter tolerance below (fused against manual: 5.0e-3, 5.1e-3 and 8.1e-3 for seeds 0-2;
against SDPA 3.7e-3, 5.0e-3, 3.9e-3; unfused against manual 1.1e-3, 4.9e-3, 1.5e-3).

Tolerances, measured on lavapipe (native and packed f16 alike) against torch 2.15 on the CPU;
every number is printed by the run next to its tolerance. "Ratio" is max |ours - torch| over
a tensor divided by max |torch| over it (for c_attn, over q, k and v separately: v's
gradients are 10-100x the others' and would hide them; the key bias's gradient is 0 in exact
arithmetic, a softmax ignoring a shift of its whole row, so there both sides hold rounding
noise, measured against the whole bias gradient's scale).
  - f32, one batch: logits, loss and gradients, ratio 2e-5. Same math in f32 on both sides;
    only summation orders differ. Measured: at most 8e-7.
  - amp-f16, one batch: logits ratio 2e-3, loss 2e-5 relative, gradients ratio 5e-3.
    Measured: 2.1e-4, 5.9e-7 and 9.9e-4 (the q bias of the first block). Both sides round the
    same activations to f16, but their f32 accumulations differ in the last bits, so now and
    then a value lands on the neighbouring f16 (2^-11 relative), and that travels through the
    later layers and back; PyTorch also rounds weight gradients to f16 before widening them,
    we keep them in f32 (see scripts/pytorch_compat.py).
  - trajectories (8 steps of the recipe): losses 1e-5 relative in f32 (measured 1e-7) and
    1e-4 under amp-f16 (measured 3.6e-6); the learning rate 1e-7 relative; scale and skip
    flag exactly. Final parameters: f32 max |diff| 1e-5 (measured 1.1e-6); amp-f16 max |diff|
    1e-3 (= lr; measured 1.2e-4) and ||diff|| / ||torch - init|| 5e-3 per tensor (measured
    1.1e-3; PyTorch's own amp-f16 and f32 runs differ by up to 7.7e-3 that way, printed
    beside). Why not tighter: Adam divides each gradient element by its own running size, so
    an element whose gradient is within rounding of zero (the key bias; a few weights, e.g.
    one whose gradient is 3.5e-9 in PyTorch f32 and 1.8e-8 in our amp-f16, Adam's eps being
    1e-8) takes a step of up to lr in a direction rounding decides, on either side. In f32
    that noise is ~1e-9 and the steps stay small; under amp-f16 it is f16's.
  - checkpoint-gpt-tiny: the one-batch tolerances above for the logits and the loss (f32
    measured 2.9e-7 and 6.2e-8; amp-f16 4.8e-4 and 1.2e-6; after 20 steps instead of 5:
    2.5e-7, 6.8e-8, 6.8e-4 and 5.4e-6).
  - sample-greedy: the same characters, exactly.

Tensor cores: `--tensor-cores on:8x8` (or on:16x16) runs every one of ours with them
(WEBGPU_AMP_TENSOR_CORES) and checks that each amp-f16 run reports them; the default cases
are then the native amp-f16 ones, within the same amp-f16 tolerances (PyTorch's autocast also
multiplies f16 inputs and accumulates in f32). Without a GPU, under Mesa 26's lavapipe:
`WEBGPU_AMP_RUNNER="scripts/lavapipe-coop.sh run" .venv/bin/python scripts/nanogpt_compat.py
--bin target/debug/webgpu-amp --example target/debug/examples/gpt_grads --tensor-cores on:8x8`.

Usage: .venv/bin/python scripts/nanogpt_compat.py [--bin PATH] [--example PATH] [--cases A,B]
  [--list] [--tensor-cores SETTING]. Exit status 0 when every case matches, 1 when any does not or torch, safetensors
or numpy is missing (a missing torch is an error, never a skip), 2 on bad arguments.
"""

import argparse
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_env  # noqa: E402
from compat_env import ROOT  # noqa: E402

try:
    import numpy  # noqa: F401
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file, save_model
except ImportError as e:  # pragma: no cover - depends on the machine
    compat_env.torch_missing(e, "nanoGPT cross-check", __file__)

import nanogpt_model  # noqa: E402  (the mirror of nanoGPT's model.py)
from nanogpt_autocast import Fail, amp_forward, check_amp_semantics  # noqa: E402
from nanogpt_model import GPT, GPTConfig, use_manual_attention  # noqa: E402

from nanogpt_compat_common import *  # noqa: E402,F401,F403  (torch is importable here)
from nanogpt_compat_files import case_checkpoint, case_sample  # noqa: E402


# ----------------------------------------------------------------------------- cases

def case_grads(case, args, work):
    config = dict(BASE, bias=case.bias)
    model = make_model(config, args.seed, case.activation)
    init = os.path.join(work, f"{case.name}-init.safetensors")
    save_init(model, init, case.init)
    gpt = os.path.join(work, f"{case.name}.json")
    model_json(config, case.activation, gpt)
    data = os.path.join(work, f"{case.name}-data.safetensors")
    x, y = token_data(case.batch, args.seed + 1, data)
    out = os.path.join(work, f"{case.name}-out.safetensors")
    done = subprocess.run(command(args, "example") + [gpt, init, data, case.precision, out,
                                                      case.attention],
                          cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, **case.env))
    if done.returncode != 0:
        raise Fail(f"gpt_grads failed ({done.returncode}):\n{done.stderr}")
    ours = load_file(out)
    with safe_open(out, "pt") as f:
        meta = f.metadata()

    use_manual_attention(model)
    if case.precision == "amp-f16":
        check_amp_semantics(model, x, y)
        scaler = torch.amp.GradScaler("cpu")
        logits, loss = amp_forward(model, x, y)
        scaler.scale(loss).backward()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        scaler.unscale_(opt)
        if float(meta["scale"]) != scaler.get_scale():
            raise Fail(f"scale: ours {meta['scale']}, torch {scaler.get_scale()}")
    else:
        logits, _ = model(x, y)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
        loss.backward()
    print(f"   ours on {meta['adapter']} ({meta['tensor_cores']}); scale {meta['scale']}, "
          f"skipped {meta['skipped']}")
    if case.precision == "amp-f16":
        check_tensor_cores(args, meta["tensor_cores"])
    tol = case.tol
    ok = True
    rows = [("logits", ratio(ours["logits"], logits.detach()), tol.logits),
            ("loss", ratio(ours["loss"], loss.detach().reshape(1)), tol.loss)]
    grads = {n: p.grad for n, p in model.named_parameters()}
    if set(f"grad.{n}" for n in grads) != {k for k in ours if k.startswith("grad.")}:
        raise Fail(f"gradient names differ: ours {sorted(k for k in ours if k.startswith('grad.'))}, "
                   f"torch {sorted(grads)}")
    c = BASE["n_embd"]
    for n, g in grads.items():
        o = ours[f"grad.{n}"]
        if not n.endswith("attn.c_attn.weight") and not n.endswith("attn.c_attn.bias"):
            rows.append((f"grad {n}", ratio(o, g), tol.grads))
            continue
        # q, k and v separately, each against its own scale (v's gradients are 10-100x
        # larger and would hide the others'). The key bias's gradient is 0 in exact
        # arithmetic (a softmax ignores a shift of its whole row), so both sides hold only
        # rounding noise there: it is measured against the whole bias gradient's scale.
        for i, part in enumerate("qkv"):
            sl = slice(i * c, (i + 1) * c)
            if n.endswith("bias") and part == "k":
                err = float((o[sl].double() - g[sl].double()).abs().max()) / float(g.abs().max())
            else:
                err = ratio(o[sl], g[sl])
            rows.append((f"grad {n}[{part}]", err, tol.grads))
    print(f"   loss ours {float(ours['loss']):.6f} torch {float(loss):.6f}")
    for what, err, limit in rows:
        mark = "ok" if err <= limit else "MISMATCH"
        ok &= err <= limit
        print(f"   {what:<44} error {err:9.2e} (tolerance {limit:g}) {mark}")
    worst = max(rows[2:], key=lambda r: r[1])
    print(f"   worst gradient: {worst[0]} {worst[1]:.2e}")
    return ok


def case_traj(case, args, work):
    config = dict(BASE, bias=case.bias)
    model = make_model(config, args.seed, case.activation)
    init = os.path.join(work, f"{case.name}-init.safetensors")
    save_init(model, init, case.init)
    gpt = os.path.join(work, f"{case.name}.json")
    model_json(config, case.activation, gpt)
    data = os.path.join(work, f"{case.name}-data.safetensors")
    n = case.steps * case.batch
    x, y = token_data(n, args.seed + 2, data)
    ck = os.path.join(work, f"{case.name}-ours.safetensors")
    metrics = os.path.join(work, f"{case.name}.jsonl")
    # No optimizer flags but the warm-up: a GPT's defaults are nanoGPT's recipe (RECIPE).
    done = run(command(args, "bin") + [
        "train", "--model", gpt, "--dataset", data, "--init", init, "--precision",
        case.precision, "--batch-size", str(case.batch), "--steps", str(case.steps),
        "--no-shuffle", "--no-validate", "--warmup-steps", str(RECIPE["warmup_iters"]),
        "--save", ck, "--metrics", metrics, "--attention", case.attention] + case.flags)
    with open(metrics) as f:
        ours = [json.loads(line) for line in f if line.strip()]
    ours = [s for s in ours if "step" in s]
    if [s["step"] for s in ours] != list(range(1, case.steps + 1)):
        raise Fail(f"metrics name steps {[s['step'] for s in ours]}")

    # PyTorch's attention of the same kind as ours: fused against nanoGPT's flash path
    # (scaled_dot_product_attention: scores and probabilities in f32 as ours), unfused
    # against its manual path (the same roundings to f16 as ours).
    manual = case.attention == "unfused"
    torch_attention = use_manual_attention if manual else (lambda m: m)
    torch_attention(model)
    print(f"   torch: nanoGPT's {'manual' if manual else 'flash (SDPA)'} attention")
    amp = case.precision == "amp-f16"
    if amp:
        check_amp_semantics(model, x[:case.batch], y[:case.batch], manual)
    theirs, ref = torch_trajectory(model, x, y, case, amp)
    floor = None
    if amp:
        # PyTorch in f32 on the same batches: how far f16 moves PyTorch's own training.
        f32_model = torch_attention(make_model(config, args.seed, case.activation))
        _, floor = torch_trajectory(f32_model, x, y, case, False)

    ok = True
    print(f"   ours: {compat_env.adapter_line(done.stdout)}")
    if amp:
        check_tensor_cores(args, done.stdout)
    print(f"   {'step':>4} {'lr':>9} {'loss ours':>11} {'loss torch':>11} {'rel diff':>9}  "
          f"scale ours/torch  skipped  grad norm (torch)")
    worst = 0.0
    for i, (o, (t_loss, t_scale, t_skip, t_lr, t_norm)) in enumerate(zip(ours, theirs)):
        rel = abs(o["loss"] - t_loss) / abs(t_loss)
        worst = max(worst, rel)
        # Our lr is get_lr's f64 value rounded to f32 once.
        lr_ok = abs(o["lr"] - t_lr) <= 1e-7 * t_lr
        good = (rel <= case.tol.traj_loss and o["scale"] == t_scale
                and bool(o["skipped"]) == t_skip and lr_ok)
        ok &= good
        print(f"   {i + 1:>4} {o['lr']:>9.3e} {o['loss']:>11.6f} {t_loss:>11.6f} {rel:>9.2e}  "
              f"{o['scale']:g}/{t_scale:g}  {bool(o['skipped'])}/{t_skip}  {t_norm:.3f}"
              + ("" if lr_ok else f"  lr torch {t_lr:.6e}")
              + ("" if good else "  MISMATCH"))
    print(f"   losses: max relative difference {worst:.2e} (tolerance {case.tol.traj_loss:g})")
    clipped = sum(1 for t in theirs if t[4] > RECIPE["grad_clip"])
    print(f"   gradients clipped to norm {RECIPE['grad_clip']:g} on {clipped} of {case.steps} steps")

    loaded = load_like_readme(ck)
    print("   our checkpoint loaded into nanoGPT's GPT with the guide's lines (strict)")
    init = load_file(init)
    init.setdefault("lm_head.weight", init.get("transformer.wte.weight"))
    tol = case.tol
    print(f"   final parameters: max |ours - torch| (tolerance {tol.param_max:g})"
          + (f", ||ours - torch|| / ||torch - init|| (tolerance {tol.param_l2:g})"
             f"; PyTorch's own amp-f16 vs f32 the same ways" if tol.param_l2 else ""))
    worst = {"max": ("", 0.0), "l2": ("", 0.0)}
    for name, value in loaded.state_dict().items():
        ours_d, theirs_d = value.double(), ref[name].double()
        diff = float((ours_d - theirs_d).abs().max())
        rel = float((ours_d - theirs_d).norm()) / float((theirs_d - init[name].double()).norm())
        good = diff <= tol.param_max and (tol.param_l2 is None or rel <= tol.param_l2)
        ok &= good
        worst["max"] = max(worst["max"], (name, diff), key=lambda w: w[1])
        worst["l2"] = max(worst["l2"], (name, rel), key=lambda w: w[1])
        line = f"   {name:<40} {diff:9.2e}"
        if tol.param_l2 is not None:
            line += f" {rel:9.2e}"
        if floor is not None:
            fl_d = floor[name].double()
            fl_rel = float((fl_d - theirs_d).norm()) / float((theirs_d - init[name].double()).norm())
            line += f"   torch amp vs f32: {float((fl_d - theirs_d).abs().max()):9.2e} {fl_rel:9.2e}"
        print(line + ("" if good else "  MISMATCH"))
    print(f"   worst: max {worst['max'][1]:.2e} ({worst['max'][0]}), "
          f"L2 {worst['l2'][1]:.2e} ({worst['l2'][0]})")
    return ok


# nanoGPT's config/train_shakespeare_char.py recipe (what `train` gives a GPT by default),
# with train.py's loop: warm-up and cosine decay (get_lr) over this run's steps, AdamW
# parameter groups from GPT.configure_optimizers, clipping after scaler.unscale_.
RECIPE = dict(learning_rate=1e-3, min_lr=1e-4, beta1=0.9, beta2=0.99, weight_decay=0.1,
              grad_clip=1.0, warmup_iters=2)


def get_lr(it, lr_decay_iters):
    """nanoGPT train.py's get_lr, with RECIPE's values and lr_decay_iters = the run's steps."""
    learning_rate, min_lr = RECIPE["learning_rate"], RECIPE["min_lr"]
    warmup_iters = RECIPE["warmup_iters"]
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def torch_trajectory(model, x, y, case, amp):
    """`case.steps` steps of nanoGPT's train.py loop (RECIPE) on consecutive batches, as
    `train --no-shuffle` takes them; under `amp` with autocast (CUDA's lists) and a
    GradScaler. Returns per step (loss, scale, skipped, lr, gradient norm before clipping)
    and the final state dict."""
    optimizer = model.configure_optimizers(RECIPE["weight_decay"], RECIPE["learning_rate"],
                                           (RECIPE["beta1"], RECIPE["beta2"]), "cpu")
    scaler = torch.amp.GradScaler("cpu", enabled=amp)
    out = []
    for it in range(case.steps):
        lr = get_lr(it, case.steps)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        xb = x[it * case.batch:(it + 1) * case.batch]
        yb = y[it * case.batch:(it + 1) * case.batch]
        if amp:
            _, loss = amp_forward(model, xb, yb)
        else:
            _, loss = model(xb, yb)
        scale = scaler.get_scale() if amp else 1.0
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), RECIPE["grad_clip"])
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        out.append((loss.item(), scale, amp and scaler.get_scale() < scale, lr, float(norm)))
    return out, model.state_dict()


CASES = [
    Case("grads-f32-bias", "grads", "f32", bias=True, init="state_dict"),
    Case("grads-f32-nobias-save-model", "grads", "f32", bias=False, init="save_model"),
    Case("grads-f32-gelu-tanh", "grads", "f32", bias=True, activation="gelu_tanh"),
    Case("grads-amp-f16-bias", "grads", "amp-f16", bias=True),
    Case("grads-amp-f16-nobias", "grads", "amp-f16", bias=False, init="save_model"),
    Case("grads-amp-f16-packed", "grads", "amp-f16", bias=True,
         env={"WEBGPU_AMP_F16_STORAGE": "packed"}),
    Case("grads-f32-unfused", "grads", "f32", bias=True, attention="unfused"),
    Case("grads-amp-f16-unfused", "grads", "amp-f16", bias=False, attention="unfused"),
    Case("traj-f32-adamw", "traj", "f32", bias=True),
    Case("traj-amp-f16-adamw", "traj", "amp-f16", bias=False),
    Case("traj-amp-f16-unfused", "traj", "amp-f16", bias=False, attention="unfused"),
    Case("checkpoint-gpt-tiny", "checkpoint", "amp-f16", bias=False, steps=5),
    Case("sample-greedy", "sample"),
]
RUNNERS = {"grads": case_grads, "traj": case_traj, "checkpoint": case_checkpoint,
           "sample": case_sample}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", help="webgpu-amp binary (default: cargo run)")
    parser.add_argument("--example", help="gpt_grads example binary (default: cargo run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases")
    parser.add_argument("--tensor-cores", metavar="SETTING", help=compat_env.TENSOR_CORE_HELP)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        print("\n".join(c.name for c in CASES))
        return 0
    by_name = {c.name: c for c in CASES}
    if args.cases is None:
        native_amp = [c for c in CASES if c.precision == "amp-f16"
                      and c.env.get("WEBGPU_AMP_F16_STORAGE") != "packed"]
        args.cases = ",".join(c.name for c in (native_amp if args.tensor_cores else CASES))
    if args.tensor_cores:
        # Every run of ours (the CLI and the gpt_grads example) reads it.
        os.environ["WEBGPU_AMP_TENSOR_CORES"] = args.tensor_cores
    cases = []
    for name in args.cases.split(","):
        if name.strip() not in by_name:
            parser.error(f"unknown case `{name}` (known: {', '.join(by_name)})")
        cases.append(by_name[name.strip()])
    torch.use_deterministic_algorithms(True)
    print(f"torch {torch.__version__} ({sys.executable})")
    work = tempfile.mkdtemp(prefix="webgpu-amp-nanogpt-compat-")
    start = time.monotonic()
    results = []
    try:
        for case in cases:
            print(f"\n== {case.name}: {case.kind}, {case.precision}, bias {case.bias}, "
                  f"{case.activation}, init via {case.init}, {case.attention} attention"
                  + (f", {' '.join(case.flags)}" if case.flags else "")
                  + "".join(f", {k}={v}" for k, v in case.env.items()))
            t0 = time.monotonic()
            try:
                ok = RUNNERS[case.kind](case, args, work)
            except Fail as e:
                print(f"   FAILED: {e}")
                ok = False
            print(f"   {case.name}: {'ok' if ok else 'FAILED'} ({time.monotonic() - t0:.1f} s)")
            results.append((case.name, ok))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    failed = [n for n, ok in results if not ok]
    print(f"\nnanogpt_compat: {time.monotonic() - start:.1f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
