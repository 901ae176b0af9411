"""CUDA autocast's semantics on the CPU, for scripts/nanogpt_compat.py: nanoGPT's forward
under autocast to f16 with softmax, log_softmax and layer_norm run in f32 as CUDA's fp32 list
has them (CPU autocast runs them in the input's dtype), and the check that it took."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import nanogpt_model


class Fail(Exception):
    pass


class CudaFp32List(TorchFunctionMode):
    """CUDA autocast's treatment of the fp32-list functions nanoGPT calls, on the CPU: when
    autocast is on, floating-point inputs go to f32 and the function runs with autocast off,
    so its output is f32 (CPU autocast would run them in the input's dtype)."""

    FUNCS = {F.softmax, F.log_softmax, F.layer_norm, torch.softmax, torch.log_softmax,
             torch.layer_norm, torch.Tensor.softmax, torch.Tensor.log_softmax}

    def __init__(self, record=None):
        super().__init__()
        self.record = record

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.FUNCS and torch.is_autocast_enabled("cpu"):
            def f32(a):
                return a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            args = tuple(f32(a) for a in args)
            kwargs = {k: f32(v) for k, v in kwargs.items()}
            with torch.autocast("cpu", enabled=False):
                out = func(*args, **kwargs)
            if self.record is not None:
                self.record.append((getattr(func, "__name__", str(func)), out.dtype))
            return out
        return func(*args, **kwargs)


def amp_forward(model, x, y):
    """nanoGPT's forward under CUDA-style autocast to f16; the loss on logits.float()."""
    with torch.autocast("cpu", dtype=torch.float16), CudaFp32List():
        logits, _ = model(x, y)
    loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
    return logits, loss


def check_amp_semantics(model, x, y, manual=True):
    """The PyTorch side's dtypes under amp-f16 are CUDA autocast's (see nanogpt_compat's
    docstring). `manual`: nanoGPT's manual attention (one softmax per layer), else its flash
    path (scaled_dot_product_attention, no softmax call)."""
    seen = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, (nn.Linear, nanogpt_model.Block)):
            hooks.append(mod.register_forward_hook(
                lambda m, i, o, name=name: seen.__setitem__(name, o.dtype)))
    record = []
    with torch.autocast("cpu", dtype=torch.float16), CudaFp32List(record):
        logits, _ = model(x, y)
    for h in hooks:
        h.remove()
    bad = [f"{n}: {d}" for n, d in seen.items()
           if d != (torch.float32 if n.count(".") == 2 else torch.float16)]
    counts = {}
    for fname, dtype in record:
        counts[fname] = counts.get(fname, 0) + 1
        if dtype != torch.float32:
            bad.append(f"{fname}: {dtype}")
    n_layer = model.config.n_layer
    softmax = n_layer if manual else 0
    if counts.get("softmax", 0) != softmax or counts.get("layer_norm", 0) != 2 * n_layer + 1:
        bad.append(f"fp32-list calls {counts}, want {softmax} softmax and {2 * n_layer + 1} "
                   f"layer_norm")
    if logits.dtype != torch.float16:
        bad.append(f"logits {logits.dtype}")
    if bad:
        raise Fail(f"PyTorch's amp-f16 forward is not CUDA autocast's: {bad}")
