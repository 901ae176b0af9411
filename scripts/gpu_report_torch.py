#!/usr/bin/env python3
"""The PyTorch side of scripts/gpu-report.sh: the report's models in PyTorch eager, timed the
way `webgpu-amp bench step` and `bench matmul` time ours, one JSON object per line on stdout.

Groups (`--group`):
  probe   torch's version, whether CUDA can be used and which device (always exit 0);
  matmul  n x n x n products: f32 with TF32 off (SIMT), TF32, f16 (tensor cores, f16 out);
  cnn     SimpleCNN (webgpu-amp's `simple-cnn` preset: conv 3->32, pool, conv 32->64, pool,
          fc 64*8*8->10) on random 3x32x32 images, Adam 1e-3, cross entropy;
  mlp     Flatten, Linear(784, 256), ReLU, Linear(256, 10) on random 1x28x28 images, Adam;
  gpt     nanoGPT's GPT (scripts/nanogpt_model.py) as `gpt-char` (6 layers, 6 heads, 384 wide,
          block 256, dropout 0.2, no biases, vocabulary 65: the embedded Hamlet's) with
          nanoGPT's step: fused AdamW (lr 1e-3, betas (0.9, 0.99), weight decay 0.1),
          gradients clipped at 1; attention `manual` (nanoGPT's explicit softmax) and `sdpa`;
  resnet  kuangliu's CIFAR ResNet-18 (`resnet18-cifar`) on random 3x32x32 images, Adam 1e-3;
  airbench  airbench94's net (`airbench`) the same way (its frozen parameters stay frozen);
  llama   SmolLM2-135M (transformers' LlamaForCausalLM from the published config, random
          weights) on Inferena's protocol: batch and `--seq-len` tokens (128), three figures:
          `forward` (no grad), `forward+backward` (forward, loss, backward: Inferena's training
          figure) and `step` (that plus AdamW lr 1e-3); precisions f32 (TF32 off), tf32,
          amp-f16 and amp-bf16. scripts/gpu_report_torch_models.py has the definitions.
Precisions: `f32`, `amp-f16` = torch.autocast(device, float16) + torch.amp.GradScaler
(unscale_ before clipping), the loss computed inside autocast (its f32 list covers it), and
`amp-bf16` = autocast to bfloat16 without a scaler (the image groups and llama).

PyTorch's defaults otherwise (cudnn.benchmark off, TF32 off for matmuls, eager: no
torch.compile, no CUDA graphs). Timing (as ours): `--warmup` steps, then `--steps` steps between two CUDA events, ended by a
synchronize (wall clock with synchronize on the CPU); peak memory is
torch.cuda.max_memory_allocated after reset_peak_memory_stats before the model is built
(0 on the CPU: PyTorch counts no CPU peak). Matmul: median of `--repeats` timed batches.

`--device cpu --quick` runs tiny versions of every group on the CPU: it exercises this code
where no CUDA exists (tests/gpu_report.rs); its numbers are no measurement of anything.
Exit status: 0 when the group ran, 3 when CUDA was asked for and is not available (one line
on stderr saying so), 1 on any other error.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CUDA_UNAVAILABLE = 3


def emit(obj):
    print(json.dumps(obj), flush=True)


def probe():
    try:
        import torch
    except ImportError as e:
        emit({"kind": "probe", "torch": None, "cuda": False,
              "reason": f"PyTorch cannot be imported by {sys.executable} ({e})"})
        return
    info = {"kind": "probe", "torch": torch.__version__, "python": sys.executable,
            "cuda": torch.cuda.is_available(), "cuda_version": torch.version.cuda}
    if info["cuda"]:
        props = torch.cuda.get_device_properties(0)
        info.update(device=torch.cuda.get_device_name(0),
                    capability=".".join(map(str, torch.cuda.get_device_capability(0))),
                    memory_gb=round(props.total_memory / 2**30, 1),
                    cudnn=torch.backends.cudnn.version())
    else:
        info["reason"] = (f"torch {torch.__version__} (CUDA build: {torch.version.cuda}) says "
                          "torch.cuda.is_available() is False")
    emit(info)


class Clock:
    """CUDA events on a GPU, synchronize + perf_counter anywhere."""

    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def start(self):
        self.sync()
        if self.cuda:
            self.begin = self.torch.cuda.Event(enable_timing=True)
            self.end = self.torch.cuda.Event(enable_timing=True)
            self.begin.record()
        else:
            self.t0 = time.perf_counter()

    def seconds(self):
        if self.cuda:
            self.end.record()
            self.sync()
            return self.begin.elapsed_time(self.end) / 1e3
        return time.perf_counter() - self.t0


def reset_peak(torch, device):
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_bytes(torch, device):
    return torch.cuda.max_memory_allocated() if device == "cuda" else 0


def bench_matmul(torch, args, clock):
    sizes = [64, 128] if args.quick else [4096, 8192]
    paths = [("f32 (SIMT, TF32 off)", torch.float32, False), ("tf32", torch.float32, True),
             ("f16 (tensor cores, f16 out)", torch.float16, False)]
    for n in sizes:
        for name, dtype, tf32 in paths:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = torch.randn(n, n, device=args.device, dtype=dtype)
            b = torch.randn(n, n, device=args.device, dtype=dtype)
            work = 2.0 * n ** 3
            batch = max(1, min(64, int(5e8 / work + 0.999)))
            times = []
            for rep in range(args.repeats + 1):  # the first is the warm-up
                clock.start()
                for _ in range(batch):
                    torch.mm(a, b)
                seconds = clock.seconds() / batch
                if rep:
                    times.append(seconds)
            times.sort()
            t = times[len(times) // 2]
            emit({"kind": "matmul", "side": "pytorch", "path": name, "n": n,
                  "ms": t * 1e3, "tflops": work / t / 1e12, "batch": batch,
                  "repeats": args.repeats})
            del a, b
    torch.backends.cuda.matmul.allow_tf32 = False


def image_models(torch, quick=False):
    """The image models by preset name; `quick` narrows the ResNet and airbench widths (a CPU
    test of this script)."""
    nn = torch.nn

    class SimpleCNN(nn.Module):
        def __init__(self, channels=3, side=32, classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, 32, kernel_size=3, padding=1)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
            self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
            self.fc = nn.Linear(64 * (side // 4) * (side // 4), classes)

        def forward(self, x):
            x = self.pool(self.relu(self.conv1(x)))
            x = self.pool(self.relu(self.conv2(x)))
            return self.fc(torch.flatten(x, 1))

    def mlp():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))

    from gpu_report_torch_models import airbench_net, resnet18_cifar

    narrow_resnet = dict(widths=(8, 16, 32, 64), blocks=(1, 1, 1, 1)) if quick else {}
    narrow_airbench = dict(widths=(8, 16, 16)) if quick else {}

    return {"simple-cnn": (SimpleCNN, (3, 32, 32)), "mlp": (mlp, (1, 28, 28)),
            "resnet18-cifar": (lambda: resnet18_cifar(torch, **narrow_resnet), (3, 32, 32)),
            "airbench": (lambda: airbench_net(torch, **narrow_airbench), (3, 32, 32))}


def autocast_dtype(torch, precision):
    """The autocast dtype of a precision mode (None: f32, no autocast)."""
    return {"amp-f16": torch.float16, "amp-bf16": torch.bfloat16}.get(precision)


def time_steps(torch, args, clock, step):
    for _ in range(args.warmup):
        step()
    clock.start()
    for _ in range(args.steps):
        step()
    return clock.seconds()


def bench_image(torch, args, clock, model_name):
    factory, shape = image_models(torch, args.quick)[model_name]
    F = torch.nn.functional
    for batch in args.batch_sizes:
        for precision in args.precisions:
            reset_peak(torch, args.device)
            torch.manual_seed(0)
            model = factory().to(args.device)
            trained = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.Adam(trained, lr=1e-3)
            x = torch.randn(batch, *shape, device=args.device)
            y = torch.randint(0, 10, (batch,), device=args.device)
            low = autocast_dtype(torch, precision)
            scaler = torch.amp.GradScaler(args.device, enabled=precision == "amp-f16")

            def step():
                opt.zero_grad(set_to_none=True)
                with torch.autocast(args.device, dtype=low or torch.float32,
                                    enabled=low is not None):
                    loss = F.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()

            seconds = time_steps(torch, args, clock, step)
            emit(step_row(args, model_name, precision, "eager", batch, seconds,
                          peak_bytes(torch, args.device), None))
            del model, opt, x, y


def bench_gpt(torch, args, clock):
    from nanogpt_model import GPT, GPTConfig, use_manual_attention

    if args.quick:
        config = dict(block_size=64, n_layer=2, n_head=4, n_embd=64, dropout=0.0)
    else:
        config = dict(block_size=256, n_layer=6, n_head=6, n_embd=384, dropout=0.2)
    t = config["block_size"]
    for batch in args.batch_sizes:
        for attention in args.attention:
            for precision in args.precisions:
                reset_peak(torch, args.device)
                torch.manual_seed(0)
                model = GPT(GPTConfig(vocab_size=65, bias=False, **config)).to(args.device)
                if attention == "manual":
                    use_manual_attention(model)
                    for block in model.transformer.h:  # the mask, on the model's device
                        block.attn.bias = block.attn.bias.to(args.device)
                model.train()
                opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), args.device)
                idx = torch.randint(0, 65, (batch, t), device=args.device)
                targets = torch.randint(0, 65, (batch, t), device=args.device)
                amp = precision == "amp-f16"
                scaler = torch.amp.GradScaler(args.device, enabled=amp)

                def step():
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast(args.device, dtype=torch.float16, enabled=amp):
                        _, loss = model(idx, targets)
                    scaler.scale(loss).backward()
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    scaler.step(opt)
                    scaler.update()

                seconds = time_steps(torch, args, clock, step)
                emit(step_row(args, "gpt-char" if not args.quick else "gpt-tiny", precision,
                              attention, batch, seconds, peak_bytes(torch, args.device), t))
                del model, opt, idx, targets


def bench_llama(torch, args, clock):
    """Inferena's protocol: forward, forward + loss + backward, and a whole AdamW step."""
    from gpu_report_torch_models import llama

    t = args.seq_len
    F = torch.nn.functional
    for batch in args.batch_sizes:
        for precision in args.precisions:
            tf32 = precision == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            low = autocast_dtype(torch, precision)
            for variant in ("forward", "forward+backward", "step"):
                reset_peak(torch, args.device)
                torch.manual_seed(0)
                model, config = llama(torch, args.quick)
                model = model.to(args.device).train()
                opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
                idx = torch.randint(0, config.vocab_size, (batch, t), device=args.device)
                targets = torch.randint(0, config.vocab_size, (batch, t), device=args.device)
                scaler = torch.amp.GradScaler(args.device, enabled=precision == "amp-f16")

                def loss_of():
                    with torch.autocast(args.device, dtype=low or torch.float32,
                                        enabled=low is not None):
                        logits = model(input_ids=idx).logits
                        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                                               targets.view(-1))

                def forward():
                    with torch.no_grad():
                        loss_of()

                def backward():
                    model.zero_grad(set_to_none=True)
                    scaler.scale(loss_of()).backward()

                def step():
                    opt.zero_grad(set_to_none=True)
                    scaler.scale(loss_of()).backward()
                    scaler.step(opt)
                    scaler.update()

                run = {"forward": forward, "forward+backward": backward, "step": step}[variant]
                seconds = time_steps(torch, args, clock, run)
                emit(step_row(args, "smollm2-135m" if not args.quick else "llama-tiny",
                              precision, variant, batch, seconds,
                              peak_bytes(torch, args.device), t))
                del model, opt, idx, targets
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def step_row(args, model, precision, variant, batch, seconds, peak, tokens):
    row = {"kind": "step", "side": "pytorch", "device": args.device, "model": model,
           "precision": precision, "variant": variant, "batch_size": batch,
           "steps": args.steps, "ms_per_step": 1e3 * seconds / args.steps,
           "images_per_sec": batch * args.steps / seconds, "peak_gpu_bytes": peak}
    if tokens:
        row["tokens_per_sec"] = batch * tokens * args.steps / seconds
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    groups = ["probe", "matmul", "cnn", "mlp", "gpt", "resnet", "airbench", "llama"]
    p.add_argument("--group", required=True, type=lambda s: s.split(","),
                   help=f"one or more (comma-separated) of {', '.join(groups)}")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="tiny sizes (a test of this script)")
    p.add_argument("--batch-sizes", type=lambda s: [int(v) for v in s.split(",")])
    p.add_argument("--precisions", default="f32,amp-f16", type=lambda s: s.split(","))
    p.add_argument("--attention", default="manual,sdpa", type=lambda s: s.split(","))
    p.add_argument("--seq-len", type=int, default=128, help="tokens per sequence (llama)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    unknown = set(args.group) - set(groups)
    if unknown:
        p.error(f"--group: unknown {sorted(unknown)}")
    if "probe" in args.group:
        probe()
        return 0
    if set(args.group) - {"matmul"} and not args.batch_sizes:
        p.error(f"--group {','.join(args.group)} needs --batch-sizes")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"error: PyTorch CUDA not available (torch {torch.__version__}, "
              f"torch.cuda.is_available() is False)", file=sys.stderr)
        return CUDA_UNAVAILABLE
    clock = Clock(torch, args.device)
    for group in args.group:
        if group == "matmul":
            bench_matmul(torch, args, clock)
        elif group == "gpt":
            bench_gpt(torch, args, clock)
        elif group == "llama":
            bench_llama(torch, args, clock)
        else:
            model = {"cnn": "simple-cnn", "mlp": "mlp", "resnet": "resnet18-cifar",
                     "airbench": "airbench"}[group]
            bench_image(torch, args, clock, model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
