#!/usr/bin/env python3
"""Cross-check the CNN ops against PyTorch's modules (needs torch, safetensors and numpy: the
venv made by `bash scripts/python-venv.sh`): BatchNorm2d (running statistics after three
training batches with momentum 0.1 and None, the last batch's output and gradients, the eval
output on the running statistics, and BatchNorm followed by ReLU or GELU, which ours fuses),
AvgPool2d(2), AdaptiveAvgPool2d((3, 2)) and AdaptiveAvgPool2d(1) forward and backward, and
CrossEntropyLoss(label_smoothing=0.1) with its gradient.

It writes one input file, runs `cnn_ops_values IN OUT` (examples/cnn_ops_values.rs: every op
in f32, f16 and bf16; the f16 storage as WEBGPU_AMP_F16_STORAGE says, native then packed, or
those `--storages` names),
and runs PyTorch's modules in float64 on the same values (activations rounded to the dtype;
BatchNorm's weight and bias stay f32 as under autocast), then compares within
atol + rtol |torch|: f32 (1e-5, 1e-5); f16 (2e-3, 2^-9) and bf16 (1.6e-2, 2^-6), two roundings
of the dtype (the output's, and the fused activation's input) over values of a few units.
Running statistics, parameter gradients and the loss are f32 in every dtype: (1e-5, 1e-5),
except the parameter gradients behind a fused activation, sums of an input gradient stored in
the dtype (the dtype's tolerance). The reference stores what autocast stores in the dtype:
the BatchNorm's output before the activation, and the activation's input gradient.

Usage: python3 scripts/cnn_ops_compat.py [--example PATH] [--storages native,packed]
Exit status: 0 when every output matches, 1 when any does not or when torch cannot be
imported (a missing torch is an error, never a skip), 2 on bad arguments.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import compat_env

try:
    import numpy  # noqa: F401
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
except ImportError as error:
    compat_env.torch_missing(error, "CNN ops cross-check", __file__)

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
LOW = {"f32": (1e-5, 1e-5), "f16": (2e-3, 2.0**-9), "bf16": (1.6e-2, 2.0**-6)}
F32 = (1e-5, 1e-5)
BN_CASES = {"m0.1": (0.1, None), "none": (None, None), "relu": (0.1, torch.nn.ReLU()),
            "gelu": (0.1, torch.nn.GELU())}
POOLS = {"window": lambda x: torch.nn.functional.avg_pool2d(x, 2),
         "adaptive": lambda x: torch.nn.functional.adaptive_avg_pool2d(x, (3, 2)),
         "global": lambda x: torch.nn.functional.adaptive_avg_pool2d(x, 1)}


def inputs():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    x = {f"bn_x{i}": r(4, 3, 5, 7) * (1.0 + i) + torch.tensor([0.5, -1.0, 2.0]).view(1, 3, 1, 1)
         for i in range(3)}
    x.update(bn_dy=r(4, 3, 5, 7), bn_w=r(3) + 1.5, bn_b=r(3), bn_xe=r(2, 3, 5, 7) * 2.0)
    x.update(pool_x=r(2, 3, 7, 5), pool_dy_window=r(2, 3, 3, 2), pool_dy_adaptive=r(2, 3, 3, 2),
             pool_dy_global=r(2, 3, 1, 1))
    x.update(ce_logits=r(8, 10) * 3.0, ce_labels=torch.randint(0, 10, (8,), generator=g).float(),
             ce_eps=torch.tensor([0.1]))
    return x


def low(t, dt):
    """`t` rounded to dtype `dt`, in float64."""
    return t.to(DTYPES[dt]).double()


def reference(x, dt):
    """Every output of cnn_ops_values for dtype `dt`, from PyTorch's modules in float64."""
    want = {}
    for case, (momentum, act) in BN_CASES.items():
        bn = torch.nn.BatchNorm2d(3, momentum=momentum).double()
        with torch.no_grad():
            bn.weight.copy_(x["bn_w"])
            bn.bias.copy_(x["bn_b"])
            bn(low(x["bn_x0"], dt))
            bn(low(x["bn_x1"], dt))
        xin = low(x["bn_x2"], dt).requires_grad_(True)
        y = bn(xin)
        if act:
            # As autocast runs BatchNorm then the activation: the BatchNorm's output is stored
            # in the dtype, and so is the activation's input gradient.
            z = low(y.detach(), dt).requires_grad_(True)
            a = act(z)
            a.backward(low(x["bn_dy"], dt))
            y.backward(low(z.grad, dt))
            y = a
        else:
            y.backward(low(x["bn_dy"], dt))
        p = f"bn.{case}."
        want.update({p + "y": y.detach(), p + "dx": xin.grad, p + "dweight": bn.weight.grad,
                     p + "dbias": bn.bias.grad, p + "running_mean": bn.running_mean,
                     p + "running_var": bn.running_var,
                     p + "count": bn.num_batches_tracked.double().view(1)})
        bn.eval()
        with torch.no_grad():
            ye = bn(low(x["bn_xe"], dt))
            want[p + "eval_y"] = act(low(ye, dt)) if act else ye
    for name, pool in POOLS.items():
        xin = low(x["pool_x"], dt).requires_grad_(True)
        y = pool(xin)
        y.backward(low(x[f"pool_dy_{name}"], dt))
        want.update({f"pool.{name}.y": y.detach(), f"pool.{name}.dx": xin.grad})
    logits = low(x["ce_logits"], dt).requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(logits, x["ce_labels"].long(),
                                             label_smoothing=float(x["ce_eps"][0]))
    loss.backward()
    want.update({"ce.loss": loss.detach().view(1), "ce.grad": logits.grad})
    return want


def tolerance(name, dt):
    """F32 for what is f32 in every dtype, except the parameter gradients behind a fused
    activation: sums of its input gradient, which is rounded to the dtype (so one rounding
    that lands on the other side of a tie moves them by a unit of the dtype)."""
    f32_everywhere = ("running_mean", "running_var", "count", "dweight", "dbias", "ce.loss")
    behind_activation = name.split(".")[1] in ("relu", "gelu")
    if name.endswith(f32_everywhere) and not (behind_activation and name.endswith(("dweight", "dbias"))):
        return F32
    return LOW[dt]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", help="cnn_ops_values example binary (default: cargo run)")
    parser.add_argument("--storages", default="native,packed",
                        help="f16 storages to run, comma-separated (default native,packed; "
                             "packed alone where the adapter has no shader-f16, e.g. GL)")
    args = parser.parse_args()
    storages = args.storages.split(",")
    if not storages or any(s not in ("native", "packed") for s in storages):
        parser.error(f"--storages: native and/or packed, not {args.storages!r}")
    example = (compat_env.runner() + [args.example] if args.example else
               ["cargo", "run", "--quiet", "--example", "cnn_ops_values", "--"])
    print(f"torch {torch.__version__} ({sys.executable})")
    x = inputs()
    problems, checked = [], 0
    with tempfile.TemporaryDirectory(prefix="webgpu-amp-cnn-ops-compat-") as work:
        src, out = os.path.join(work, "in.safetensors"), os.path.join(work, "out.safetensors")
        save_file(x, src)
        for storage in storages:
            env = dict(os.environ, WEBGPU_AMP_F16_STORAGE=storage)
            done = subprocess.run(example + [src, out], cwd=compat_env.ROOT, env=env,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                print(f"error: cnn_ops_values failed ({done.returncode}):\n{done.stderr}")
                return 1
            ours = load_file(out)
            with safe_open(out, "pt") as f:
                meta = f.metadata()
            print(f"\n== {meta['adapter']}, f16 storage {meta['f16_storage']}")
            for dt in DTYPES:
                if dt == "f32" and storage == "packed" and "native" in storages:
                    continue  # f32 does not depend on the f16 storage
                worst = {}
                for name, want in reference(x, dt).items():
                    got = ours[f"{dt}.{name}"].double()
                    atol, rtol = tolerance(name, dt)
                    ratio = ((got - want).abs() / (atol + rtol * want.abs())).max().item()
                    group = name.split(".")[0]
                    worst[group] = max(worst.get(group, 0.0), ratio)
                    checked += 1
                    if not ratio <= 1.0:  # NaN fails too
                        problems.append(f"{storage} {dt} {name}: worst error {ratio:.2f} of "
                                        f"the tolerance ({atol:g} + {rtol:g} |torch|)")
                print(f"   {dt:<4} worst error / tolerance: "
                      + ", ".join(f"{g} {w:.2f}" for g, w in worst.items()))
    if problems:
        print("\nFAILED:\n  " + "\n  ".join(problems))
        return 1
    print(f"\nall {checked} outputs match PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
