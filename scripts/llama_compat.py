#!/usr/bin/env python3
"""Cross-check webgpu-amp's Llama family against transformers' LlamaForCausalLM (needs the
venv made by `bash scripts/python-venv.sh`: torch, safetensors, transformers).

A tiny random LlamaConfig (vocab 96, hidden 32, intermediate 48, 2 layers, 4 query heads
over 2 key/value heads, rope_theta 50000, max positions 64), untied and tied, saved by
`save_pretrained`; token data (`x`, `y` int64 [N, 16], y = x shifted, a noisy counting
pattern) as a safetensors file. Ours: `webgpu-amp train --model hf:DIR --dataset DATA
--seq-len 16 --optimizer adamw --lr 1e-3 --clip-grad-norm 1 --no-shuffle --steps 20
--batch-size 4 --metrics M`; theirs: the same batches in order through
`torch.optim.AdamW(lr=1e-3)` (weight decay 0.01, PyTorch's default and ours) with
`clip_grad_norm_(1.0)` each step and the mean cross-entropy of the logits against y.

  f32       every step's loss within 1e-4 relative
  amp-f16   `torch.autocast("cpu", float16)` around the model with CUDA's fp32 list for
            softmax (our autocast follows CUDA's) and RMSNorm computing in f32 as
            LlamaRMSNorm does, `torch.amp.GradScaler`; every step's loss within 1e-2
            relative and the GradScaler's scale and skip flags equal until the first skip

The f32 runs also export (`--export-hf DIR`): `AutoModelForCausalLM.from_pretrained(DIR)`
must load the folder with no missing, unexpected or mismatched keys, and its loss on the
batch our step 21 trains on (the first again: the data holds 20 batches) must equal that
step's loss within 1e-5 relative, where ours continues from the resume state the export
wrote beside the folder (`train --resume DIR/webgpu-amp-state.safetensors --steps 21`).

Other backends: `WEBGPU_AMP_BACKEND=gl` runs ours on GL (packed f16); with `--tensor-cores
on:8x8` (or on:16x16) every run of ours uses tensor cores of that shape and reports them
(Mesa 26's lavapipe: `WEBGPU_AMP_RUNNER="scripts/lavapipe-coop.sh run"`), and the cases
are then the amp-f16 ones unless `--precision` says otherwise.

Exit status 1 on any mismatch; the table says where.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compat_env  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
except ImportError as error:
    compat_env.torch_missing(error, "Llama cross-check", __file__)

ROOT = compat_env.ROOT
T, BATCH, STEPS, VOCAB = 16, 4, 20, 96
LR, CLIP = 1e-3, 1.0
EXPORT_TOL = 1e-5
STATE_FILE = "webgpu-amp-state.safetensors"


def config(tied):
    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rope_theta=50000.0,
        max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=tied,
        bos_token_id=1, eos_token_id=2, attn_implementation="eager",
    )


def token_data(path, seed):
    g = torch.Generator().manual_seed(seed)
    n = STEPS * BATCH
    start = torch.randint(0, VOCAB, (n, 1), generator=g)
    seq = (start + torch.arange(T + 1)) % VOCAB
    noise = torch.randint(0, VOCAB, seq.shape, generator=g)
    seq = torch.where(torch.rand(seq.shape, generator=g) < 0.2, noise, seq)
    x, y = seq[:, :T].contiguous(), seq[:, 1:].contiguous()
    save_file({"x": x, "y": y}, path)
    return x, y


TENSOR_CORES = None


def ours(binary, folder, data, precision, work, extra=(), steps=STEPS, tag=""):
    metrics = os.path.join(work, f"{os.path.basename(folder)}-{precision}{tag}.jsonl")
    cmd = (compat_env.runner() + [binary] if binary else
           ["cargo", "run", "--quiet", "--bin", "webgpu-amp", "--"])
    cmd += ["train", "--model", f"hf:{folder}", "--dataset", data, "--seq-len", str(T),
            "--precision", precision, "--optimizer", "adamw", "--lr", str(LR),
            "--clip-grad-norm", str(CLIP), "--no-shuffle", "--no-validate",
            "--steps", str(steps), "--batch-size", str(BATCH), "--metrics", metrics,
            *extra]
    if TENSOR_CORES:
        cmd += ["--tensor-cores", TENSOR_CORES]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed:\n{done.stderr}")
    problem = compat_env.tensor_core_check(TENSOR_CORES, compat_env.adapter_line(done.stdout))
    if problem:
        raise SystemExit(f"`{' '.join(cmd)}`: {problem}")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if "step" in r]


class CudaFp32Softmax(torch.overrides.TorchFunctionMode):
    """CUDA autocast's fp32 list for softmax (CPU autocast keeps its input's dtype)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.softmax, F.softmax, torch.Tensor.softmax):
            with torch.autocast("cpu", enabled=False):
                x = args[0].float()
                return func(x, *args[1:], **{**kwargs, "dtype": torch.float32})
        return func(*args, **kwargs)


def theirs(folder, x, y, amp):
    model = LlamaForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    scaler = torch.amp.GradScaler("cpu", enabled=amp)
    out = []
    for step in range(STEPS):
        xb, yb = x[step * BATCH:(step + 1) * BATCH], y[step * BATCH:(step + 1) * BATCH]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16, enabled=amp), CudaFp32Softmax():
            logits = model(xb).logits
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), yb.reshape(-1))
        scale = scaler.get_scale() if amp else 1.0
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
        before = scaler.get_scale() if amp else 1.0
        scaler.step(opt)
        scaler.update()
        skipped = amp and scaler.get_scale() < before
        out.append((loss.item(), scale, skipped, norm))
    return out


def compare(name, precision, o, t, tol):
    ok = True
    skipped_yet = False
    print(f"== {name} {precision}: step, loss ours, loss transformers, rel diff, scale, skip, "
          "gradient norm before clipping (transformers)")
    for i, (row, (loss, scale, skipped, norm)) in enumerate(zip(o, t)):
        rel = abs(row["loss"] - loss) / abs(loss)
        good = rel <= tol
        if precision == "amp-f16" and not skipped_yet:
            good &= row["scale"] == scale and bool(row["skipped"]) == skipped
        skipped_yet |= skipped
        ok &= good
        print(f"   {i + 1:>3} {row['loss']:.6f} {loss:.6f} {rel:.2e} "
              f"{row.get('scale', 1):g}/{scale:g} {bool(row.get('skipped'))}/{skipped} {norm:.3f}"
              + ("" if good else "  MISMATCH"))
    clipped = sum(1 for r in t if r[3] > CLIP)
    print(f"   clipped to norm {CLIP:g} on {clipped} of {len(t)} steps")
    if len(o) != len(t):
        print(f"   {len(o)} steps of ours, {len(t)} of transformers  MISMATCH")
        ok = False
    return ok


def exported(name, binary, folder, data, x, y, export, work):
    """The folder `--export-hf` wrote loads strictly in transformers, and its loss on the
    batch of our step 21 (resumed from the state beside it) equals ours."""
    model, info = AutoModelForCausalLM.from_pretrained(
        export, dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    model.eval()
    batch = STEPS % (len(x) // BATCH)
    xb, yb = x[batch * BATCH:(batch + 1) * BATCH], y[batch * BATCH:(batch + 1) * BATCH]
    with torch.no_grad():
        loss = F.cross_entropy(model(xb).logits.float().reshape(-1, VOCAB), yb.reshape(-1))
    resumed = ours(binary, folder, data, "f32", work, steps=STEPS + 1, tag="-resumed",
                   extra=["--resume", os.path.join(export, STATE_FILE)])
    row = [r for r in resumed if r["step"] == STEPS + 1]
    ok = not problems and len(row) == 1
    rel = abs(row[0]["loss"] - loss.item()) / abs(loss.item()) if row else float("inf")
    ok &= rel <= EXPORT_TOL
    files = sorted(os.listdir(export))
    print(f"== {name} f32 export: {', '.join(files)}; loading info "
          f"{problems or 'clean (no missing, unexpected or mismatched keys)'}; step {STEPS + 1} "
          f"loss ours (resumed) {row[0]['loss'] if row else None}, transformers on the export "
          f"{loss.item():.6f}, rel diff {rel:.2e}" + ("" if ok else "  MISMATCH"))
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", help="a built webgpu-amp binary (default: cargo run)")
    p.add_argument("--precision", choices=["f32", "amp-f16"], action="append")
    p.add_argument("--tensor-cores", metavar="SETTING", help=compat_env.TENSOR_CORE_HELP)
    p.add_argument("--folder", choices=["untied", "tied"], action="append",
                   help="the model(s) to run (default: both)")
    args = p.parse_args()
    global TENSOR_CORES
    TENSOR_CORES = args.tensor_cores
    precisions = args.precision or (["amp-f16"] if args.tensor_cores else ["f32", "amp-f16"])
    ok = True
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data.safetensors")
        x, y = token_data(data, 2)
        for name, tied in [("untied", False), ("tied", True)]:
            if args.folder and name not in args.folder:
                continue
            torch.manual_seed(0)
            folder = os.path.join(work, name)
            LlamaForCausalLM(config(tied)).save_pretrained(folder)
            for precision in precisions:
                tol = 1e-4 if precision == "f32" else 1e-2
                export = os.path.join(work, f"{name}-export")
                extra = ["--export-hf", export] if precision == "f32" else []
                o = ours(args.bin, folder, data, precision, work, extra)
                t = theirs(folder, x, y, precision == "amp-f16")
                ok &= compare(name, precision, o, t, tol)
                if precision == "f32":
                    ok &= exported(name, args.bin, folder, data, x, y, export, work)
    print("ok" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
