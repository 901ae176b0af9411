#!/usr/bin/env python3
"""PyTorch's memory for one SmolLM2-135M training step on the CPU, for BENCHMARKS.md beside
`webgpu-amp bench step --models smollm2-135m` (needs the venv of `bash
scripts/python-venv.sh`: torch, transformers).

The step is gpu_report_torch.py's llama `step` (transformers' LlamaForCausalLM from the
published config, random weights; AdamW; autocast + GradScaler under amp-f16), at batch 1 and
`--seq-len` tokens, run twice (the first allocates AdamW's moments, as our trainer plans them
up front). A CPU has no allocator statistics like `torch.cuda.max_memory_allocated`, so this
reports the process's peak resident memory (VmHWM, reset first) above what it held before the model
was built (after a tiny Llama's step has loaded the libraries): every tensor alive at the peak, plus what glibc's malloc kept of freed ones and
the autocast weight cache. It is an upper bound on PyTorch's tensor bytes, not the same
count as a GPU's allocator peak, and says nothing about a GPU's time.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_env  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError as error:
    compat_env.torch_missing(error, "SmolLM2 CPU peak", __file__)

from gpu_report_torch_models import llama  # noqa: E402


def status_bytes(key):
    """VmRSS or VmHWM (the peak resident set) of this process, in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise SystemExit(f"/proc/self/status has no {key}")


def reset_peak():
    """Linux: writing 5 to clear_refs resets VmHWM to the current resident set."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def run(args, model, config, generator):
    """Two steps of `model` (the first allocates AdamW's moments); the last loss."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    amp = args.precision == "amp-f16"
    scaler = torch.amp.GradScaler("cpu", enabled=amp)
    shape = (args.batch_size, args.seq_len)
    idx = torch.randint(0, config.vocab_size, shape, generator=generator)
    targets = torch.randint(0, config.vocab_size, shape, generator=generator)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16, enabled=amp):
            logits = model(input_ids=idx).logits
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss.item()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--precision", choices=["f32", "amp-f16"], default="amp-f16")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="a tiny Llama (tests the script)")
    args = p.parse_args()
    # A tiny Llama's step first: transformers' modules, oneDNN and the autocast kernels
    # load then, outside the count.
    run(args, *llama(torch, True), torch.manual_seed(0))
    reset_peak()
    before = status_bytes("VmRSS")
    model, config = llama(torch, args.quick)
    params = sum(t.numel() for t in model.parameters())
    loss = run(args, model, config, torch.manual_seed(0))
    peak = status_bytes("VmHWM") - before
    print(json.dumps({
        "kind": "cpu_peak", "side": "pytorch", "torch": torch.__version__,
        "model": "llama-tiny" if args.quick else "smollm2-135m", "parameters": params,
        "precision": args.precision, "batch": args.batch_size, "seq_len": args.seq_len,
        "peak_rss_above_start_bytes": peak, "loss": loss,
    }))


if __name__ == "__main__":
    main()
