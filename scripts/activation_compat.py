#!/usr/bin/env python3
"""Cross-check every unary op (activation) of webgpu-amp's table against PyTorch's module,
forward and backward (needs torch, safetensors and numpy: the venv made by
`bash scripts/python-venv.sh`).

The ops come from the table itself (`src/ops/unary.rs`, through `examples/unary_values.rs`),
so a new row is checked here without a line of its own: each row's repr is PyTorch's repr of
the module, and `torch.nn.<repr>` builds it (`ReLU()`, `GELU(approximate='tanh')`, `SiLU()`).

For each f16 storage (native, then packed) the script writes one input file: `x`, a grid
over [-12, 12] with the saturated tails (±40, ±300), zeros of both signs, the smallest
normal and subnormal numbers of f16, and inf, -inf and NaN; `dy`, random normals with an
inf, a -inf and a NaN where the derivative is 0, 1 and in between. It runs
`unary_values IN OUT` (every op in f32, f16 and bf16), then for each op and dtype runs the
module on the CPU on the same values (x and dy rounded to the dtype), `y = module(x)`,
`y.backward(dy)`, and compares y and x.grad with ours:

  - NaN where PyTorch has NaN and nowhere else, and infinities exactly, against the module
    computed in float32 (as both sides compute in f32; in float64, SiLU's derivative at
    x = -300 is 1e-128, not 0, and an inf upstream gradient there gives inf instead of
    IEEE's 0 · inf = NaN), or where PyTorch's float32 kernels disagree with its own float64
    ones, against either (its vectorised float32 GELU gives NaN at +inf, its float64 and
    one-element float32 GELU give inf, as ours does);
  - finite values, against the module computed in float64, within atol + rtol |torch|: f32 atol 1e-6, rtol 1e-5 (the exact GELU's erf
    is a Chebyshev fit, absolute error 1e-6; the rest is a few f32 ulps of exp); f16 and bf16
    one ulp of the dtype (rtol 2^-10 and 2^-7; atol f16's subnormal step 2^-24, and for bf16
    1e-12, the size of float64's own cancellation in PyTorch's GELU tails, where ours has
    values down to 1e-16 and PyTorch's float64 formula gives 0).

Why float64 and not the dtype: our kernels compute in f32 and round once, within one ulp of
the exact value. PyTorch's own CPU kernels are less exact in two places, which the script
prints beside each line as `torch in DTYPE` for reference, compared with the same float64
answer (each line gives the worst error as a share of the tolerance; 1 or more fails):
GELU in f16 and bf16 is off by several ulps in the negative tail and cancels to 0 further
out, and the f32 tanh form `0.5 x (1 + tanh(u))` cancels to 0 below about x = -5, where the
derivative is still 1.7e-6 (ours computes x sigmoid(2u), which does not cancel). Measured
on lavapipe with torch 2.15: ours at most 0.50 of the tolerance for every op and dtype;
PyTorch in its own dtype up to 3.95 (f16 GELU), 26.8 (f16 tanh GELU's gradient), 128 (bf16
GELU) and 1.66 (f32 tanh GELU's gradient).

Usage: python3 scripts/activation_compat.py [--example PATH]
  Run with the venv's python (.venv/bin/python); plain python3 re-runs itself with
  .venv/bin/python when it has no torch and that venv exists.
Exit status: 0 when every op matches, 1 when any does not or when torch, safetensors or numpy
cannot be imported (a missing torch is an error, never a skip), 2 on bad arguments.
"""

import argparse
import json
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
    compat_env.torch_missing(error, "activation cross-check", __file__)

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# (atol, rtol) per dtype; see the module docstring.
TOLERANCES = {"f32": (1e-6, 1e-5), "f16": (2.0**-24, 2.0**-10), "bf16": (1e-12, 2.0**-7)}


def inputs():
    inf, nan = float("inf"), float("nan")
    grid = torch.linspace(-12.0, 12.0, 961)
    special = torch.tensor([40.0, -40.0, 300.0, -300.0, 0.0, -0.0, 6.1035e-05, -6.1035e-05,
                            5.9605e-08, -5.9605e-08, inf, -inf, nan])
    # Non-finite upstream gradients where the derivative is 0 (x = -300), 1 (x = 300) and
    # in between (x = 0.5): IEEE 0 * inf is NaN, and so it must be on both sides.
    upstream = torch.tensor([[-300.0, inf], [300.0, -inf], [0.5, nan]])
    x = torch.cat([grid, special, upstream[:, 0]])
    dy = torch.randn(x.shape[0], generator=torch.Generator().manual_seed(0))
    dy[-upstream.shape[0]:] = upstream[:, 1]
    return x, dy


def torch_values(repr_, x, dy, dtype, compute):
    """y and dx of `torch.nn.<repr_>` on x and dy rounded to `dtype`, computed in `compute`."""
    module = eval("torch.nn." + repr_)  # noqa: S307: the repr is PyTorch's own expression
    xt = x.to(dtype).to(compute).clone().requires_grad_(True)
    y = module(xt)
    y.backward(dy.to(dtype).to(compute))
    return y.detach().double(), xt.grad.double()


def compare(what, ours, want, special, atol, rtol):
    """Problems (NaN or infinities where neither `special` nor `want` has them, values outside
    the tolerance of `want`; the first few elements named) and the largest error as a share
    of its tolerance."""
    problems = []
    def same(ref):
        return (ours.isnan() & ref.isnan()) | (ours == ref)
    non_finite = ~ours.isfinite() | ~special.isfinite()
    odd = non_finite & ~same(special) & ~same(want)
    if odd.any():
        at = odd.nonzero().flatten()[:4].tolist()
        problems.append(f"{what}: NaN or infinities differ at {at}: ours {ours[at].tolist()}, "
                        f"torch {special[at].tolist()}")
    both = ours.isfinite() & want.isfinite() & special.isfinite()
    err = (ours[both] - want[both]).abs()
    bound = atol + rtol * want[both].abs()
    bad = err > bound
    if bad.any():
        worst = int((err - bound).argmax())
        problems.append(f"{what}: {int(bad.sum())} values outside atol {atol:g} + rtol {rtol:g}; "
                        f"worst ours {ours[both][worst].item()!r}, "
                        f"torch {want[both][worst].item()!r}")
    return problems, ((err / bound).max().item() if err.numel() else 0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", help="unary_values example binary (default: cargo run)")
    args = parser.parse_args()
    example = (compat_env.runner() + [args.example] if args.example else
               ["cargo", "run", "--quiet", "--example", "unary_values", "--"])
    print(f"torch {torch.__version__} ({sys.executable})")
    x, dy = inputs()
    problems = []
    checked = 0
    with tempfile.TemporaryDirectory(prefix="webgpu-amp-activation-compat-") as work:
        src, out = os.path.join(work, "in.safetensors"), os.path.join(work, "out.safetensors")
        save_file({"x": x, "dy": dy}, src)
        for storage in ["native", "packed"]:
            env = dict(os.environ, WEBGPU_AMP_F16_STORAGE=storage)
            done = subprocess.run(example + [src, out], cwd=compat_env.ROOT, env=env,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                print(f"error: unary_values failed ({done.returncode}):\n{done.stderr}")
                return 1
            ours = load_file(out)
            with safe_open(out, "pt") as f:
                meta = f.metadata()
            ops = json.loads(meta["ops"])
            missing = {"relu", "gelu", "gelu_tanh"} - {name for name, _ in ops}
            if missing:
                print(f"error: the table lists no {sorted(missing)}")
                return 1
            print(f"\n== {len(ops)} ops on {meta['adapter']}, f16 storage {meta['f16_storage']}")
            for name, repr_ in ops:
                for dt, dtype in DTYPES.items():
                    if dt == "f32" and storage == "packed":
                        continue  # f32 does not depend on the f16 storage
                    atol, rtol = TOLERANCES[dt]
                    want = torch_values(repr_, x, dy, dtype, torch.float64)
                    in_f32 = torch_values(repr_, x, dy, dtype, torch.float32)
                    in_dtype = torch_values(repr_, x, dy, dtype, dtype)
                    line = []
                    for part, exact, special, theirs in zip(["y", "dx"], want, in_f32, in_dtype):
                        special = special.to(dtype).double()  # its overflow, as ours stores
                        mine = ours[f"{name}.{dt}.{part}"].double()
                        found, worst = compare(f"{name} {dt} {part}", mine, exact, special,
                                               atol, rtol)
                        _, torch_worst = compare("", theirs, exact, special, atol, rtol)
                        problems += found
                        line.append(f"{part} {worst:.2f} (torch in {dt}: {torch_worst:.2f})")
                        checked += 1
                    print(f"   {name:<10} nn.{repr_:<26} {dt:<4} worst error / tolerance: "
                          + ", ".join(line))
    if problems:
        print("\nFAILED:\n  " + "\n  ".join(problems))
        return 1
    print(f"\nall {checked} comparisons match PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
