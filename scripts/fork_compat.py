"""Fork cross-check: a composition where one tensor feeds three branches joined by a product
and a sum, its gradients against PyTorch autograd, in f32 and amp-f16 (autocast + GradScaler);
and its validation with dropout p = 0.5 in every branch against PyTorch's `model.eval()`.

The model (JSON, `webgpu-amp train --model`'s format) and its PyTorch twin, with the same
parameter names:

    h = Linear(16, 16)(x)                       # "0": the tensor that forks
    a = SiLU(Linear(16, 12)(h))                 # "1.0.0.0.*": branch 0 of the inner fork
    b = Linear(16, 12)(h)                       # "1.0.0.1.0"
    c = Linear(16, 12)(LayerNorm(16)(h))        # "1.1.*": branch 1 of the outer fork
    y = Linear(12, 5)(a * b + c)                # "2"; cross-entropy against labels

h's gradient is the sum of three contributions (two Linears and a LayerNorm), summed in the
one place the backward sums fork gradients (src/nn/layers/tape.rs), so every parameter
before the fork ("0.weight", "0.bias") checks that sum. One batch goes through
`examples/gpt_grads.rs` (the train step's planned forward and backward: logits, loss and
every parameter's gradient, unscaled under amp-f16) and through PyTorch on the CPU; each
tensor's error is max |ours - torch| / max |torch|.

The eval case puts `Dropout(0.5)` after each branch's first layer: our validation of the batch
(an evaluation plan: no dropout) must give the same loss twice (gpt_grads checks it to the
bit) and PyTorch's `model.eval()` logits and loss for the same weights.

Usage: .venv/bin/python scripts/fork_compat.py [--example PATH] [--tensor-cores SETTING]
(without --example, `cargo run --example gpt_grads`; WEBGPU_AMP_BACKEND picks Vulkan or GL;
`WEBGPU_AMP_RUNNER="scripts/lavapipe-coop.sh run"` with `--tensor-cores on:8x8` runs ours on
Mesa 26's tensor cores). Exit status 0 when every case matches, 1 when any does not or torch
is missing (an error, never a skip).
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

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as e:  # pragma: no cover - depends on the machine
    compat_env.torch_missing(e, "fork cross-check", __file__)

MODEL = {
    "input": [16],
    "layers": [
        {"linear": {"out": 16}},
        {"fork": {"join": "sum", "branches": [
            [{"fork": {"join": "product", "branches": [
                [{"linear": {"out": 12}}, {"silu": {}}],
                [{"linear": {"out": 12}}],
            ]}}],
            [{"layernorm": {}}, {"linear": {"out": 12}}],
        ]}},
        {"linear": {"out": 5}},
    ],
}

# f32: reassociation only. amp-f16: the Linears run in f16 on both sides (PyTorch's autocast
# rounds their inputs, weights and outputs to f16 too), so errors are f16-sized.
TOL = {"f32": 1e-4, "amp-f16": 5e-3}
N, CLASSES = 8, 5


class Fork(nn.ModuleList):
    """`{"fork": {...}}`: branches (Sequentials) named by index, joined by `join`."""

    def __init__(self, join, *branches):
        super().__init__(nn.Sequential(*b) for b in branches)
        self.join = join

    def forward(self, x):
        outs = [b(x) for b in self]
        if self.join == "sum":
            return sum(outs[1:], outs[0])
        if self.join == "product":
            return outs[0] * outs[1]
        return torch.cat(outs, dim=-1)


def torch_model(dropout=False):
    drop = [nn.Dropout(0.5)] if dropout else []
    inner = Fork("product", [nn.Linear(16, 12), *drop, nn.SiLU()], [nn.Linear(16, 12), *drop])
    outer = Fork("sum", [inner], [nn.LayerNorm(16), nn.Linear(16, 12), *drop])
    return nn.Sequential(nn.Linear(16, 16), outer, nn.Linear(12, CLASSES))


def with_dropout(model):
    """MODEL with `{"dropout": {"p": 0.5}}` where torch_model(dropout=True) has it."""
    m = json.loads(json.dumps(model))
    fork = m["layers"][1]["fork"]
    inner = fork["branches"][0][0]["fork"]["branches"]
    inner[0].insert(1, {"dropout": {"p": 0.5}})
    inner[1].append({"dropout": {"p": 0.5}})
    fork["branches"][1].append({"dropout": {"p": 0.5}})
    return m


def ratio(ours, theirs):
    ours, theirs = ours.double(), theirs.double()
    scale = float(theirs.abs().max())
    return float((ours - theirs).abs().max()) / (scale if scale > 0 else 1.0)


def command(args):
    if args.example:
        return compat_env.runner() + [args.example]
    return ["cargo", "run", "--quiet", "--example", "gpt_grads", "--"]


def case(precision, args, work):
    evaluation = precision == "eval"
    precision = "f32" if evaluation else precision
    torch.manual_seed(0)
    model = torch_model(dropout=evaluation)
    init = os.path.join(work, "init.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, init)
    x = torch.randn(N, 16)
    y = torch.arange(N) % CLASSES
    data = os.path.join(work, "data.safetensors")
    save_file({"x": x, "y": y}, data)
    spec = os.path.join(work, "fork.json")
    with open(spec, "w") as f:
        json.dump(with_dropout(MODEL) if evaluation else MODEL, f)
    out = os.path.join(work, f"out-{precision}{'-eval' if evaluation else ''}.safetensors")
    env = dict(os.environ)
    if args.tensor_cores:
        env["WEBGPU_AMP_TENSOR_CORES"] = args.tensor_cores
    done = subprocess.run(command(args) + [spec, init, data, precision, out], cwd=ROOT,
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"   gpt_grads failed ({done.returncode}):\n{done.stderr}")
        return False
    ours = load_file(out)
    with safe_open(out, "pt") as f:
        meta = f.metadata()
    if evaluation:
        model.eval()
        with torch.no_grad():
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        print(f"== eval (dropout 0.5): ours on {meta['adapter']}: validation loss "
              f"{float(ours['eval_loss']):.6f}, torch model.eval() {float(loss):.6f}")
        rows = [("eval logits", ratio(ours["logits"], logits)),
                ("eval loss", ratio(ours["eval_loss"], loss.reshape(1)))]
        return report(rows, TOL["f32"])
    if precision == "amp-f16":
        problem = compat_env.tensor_core_check(args.tensor_cores, meta.get("tensor_cores"))
        if problem:
            print(f"   {problem}")
            return False
        scaler = torch.amp.GradScaler("cpu")
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        scaler.scale(loss).backward()
        scaler.unscale_(torch.optim.SGD(model.parameters(), lr=0.0))
    else:
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
    print(f"== {precision}: ours on {meta['adapter']} ({meta['tensor_cores']}), scale "
          f"{meta['scale']}, skipped {meta['skipped']}")
    rows = [("logits", ratio(ours["logits"], logits.detach().float())),
            ("loss", ratio(ours["loss"], loss.detach().reshape(1)))]
    grads = {n: p.grad for n, p in model.named_parameters()}
    names = {k[len("grad."):] for k in ours if k.startswith("grad.")}
    if names != set(grads):
        print(f"   gradient names differ: ours {sorted(names)}, torch {sorted(grads)}")
        return False
    rows += [(f"grad {n}", ratio(ours[f"grad.{n}"], g)) for n, g in grads.items()]
    return report(rows, TOL[precision])


def report(rows, tol):
    ok = True
    for what, err in rows:
        good = err <= tol
        ok &= good
        print(f"   {what:<24} error {err:9.2e} (tolerance {tol:g}) {'ok' if good else 'MISMATCH'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", help="gpt_grads example binary (default: cargo run)")
    parser.add_argument("--tensor-cores", metavar="SETTING", help=compat_env.TENSOR_CORE_HELP)
    args = parser.parse_args()
    precisions = ["amp-f16"] if args.tensor_cores else ["f32", "amp-f16", "eval"]
    work = tempfile.mkdtemp(prefix="webgpu-amp-fork-compat-")
    results = [case(p, args, work) for p in precisions]
    print(f"fork_compat: {sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
