"""What scripts/nanogpt_compat.py and its file cases (scripts/nanogpt_compat_files.py)
share: the small GPT's configuration, running our binaries, building nanoGPT's model and its
`--init`, token data, the error measure, tolerances and cases, and the guide's lines for
loading a checkpoint into nanoGPT. Imported after nanogpt_compat.py made sure torch, safetensors
and numpy import (it re-runs itself in the project's venv when they do not)."""

import contextlib  # noqa: F401
import gzip  # noqa: F401
import io  # noqa: F401
import json
import math  # noqa: F401
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401
from safetensors import safe_open  # noqa: F401
from safetensors.torch import load_file, save_file, save_model

import compat_env
import nanogpt_model  # the mirror of nanoGPT's model.py
from compat_env import ROOT
from nanogpt_autocast import Fail, amp_forward, check_amp_semantics  # noqa: F401
from nanogpt_model import GPT, GPTConfig, use_manual_attention  # noqa: F401

VOCAB = 11
BLOCK = 16
BASE = dict(vocab_size=VOCAB, block_size=BLOCK, n_layer=2, n_head=2, n_embd=32, dropout=0.0)


# ----------------------------------------------------------------------------- helpers

def command(args, what):
    path = args.bin if what == "bin" else args.example
    if path:
        return compat_env.runner() + [path]
    if what == "bin":
        return ["cargo", "run", "--quiet", "--bin", "webgpu-amp", "--"]
    return ["cargo", "run", "--quiet", "--example", "gpt_grads", "--"]


def check_tensor_cores(args, reported):
    """Under `--tensor-cores` (passed to every run of ours as WEBGPU_AMP_TENSOR_CORES), an
    amp-f16 run must report those tensor cores."""
    problem = compat_env.tensor_core_check(args.tensor_cores, reported)
    if problem:
        raise Fail(problem)


def run(cmd, env=None):
    env = dict(os.environ, **(env or {}))
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise Fail(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stderr}")
    return done


def make_model(config, seed, activation="gelu"):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(**config))
    if activation == "gelu_tanh":
        for block in model.transformer.h:
            block.mlp.gelu = nn.GELU(approximate="tanh")
    return model


def model_json(config, activation, path):
    with open(path, "w") as f:
        json.dump({"gpt": dict(config, activation=activation)}, f)


def save_init(model, path, how):
    """The initial weights as `--init` takes them. `state_dict`: every key of the state dict,
    the tied weight under both names (cloned: save_file refuses shared tensors); `save_model`:
    safetensors' save_model, which keeps one name of the shared pair (`lm_head.weight`)."""
    if how == "state_dict":
        save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, path)
    elif how == "save_model":
        save_model(model, path)
        keys = set(load_file(path))
        if "lm_head.weight" not in keys or "transformer.wte.weight" in keys:
            raise Fail("save_model did not keep lm_head.weight alone of the tied pair "
                       "(docs/guide/checkpoints.md says it does)")
    else:
        raise ValueError(how)


def token_data(n, seed, path):
    """`x`, `y` int64 [n, BLOCK]: a counting pattern mod VOCAB with a per-sequence start and
    stride and 10% noise, y = x shifted by one. The largest id is VOCAB - 1."""
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (n, 1), generator=g)
    stride = torch.randint(1, 4, (n, 1), generator=g)
    seq = (start + stride * torch.arange(BLOCK + 1)) % VOCAB
    noise = torch.rand(n, BLOCK + 1, generator=g) < 0.1
    seq = torch.where(noise, torch.randint(0, VOCAB, (n, BLOCK + 1), generator=g), seq)
    seq[0, 1] = VOCAB - 1
    x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    save_file({"x": x, "y": y}, path)
    return x, y


def ratio(ours, theirs):
    """max |ours - theirs| / max |theirs| (the error relative to the tensor's scale)."""
    ours, theirs = ours.double(), theirs.double()
    scale = float(theirs.abs().max())
    return float((ours - theirs).abs().max()) / (scale if scale > 0 else 1.0)


@dataclass
class Tol:
    logits: float  # max |diff| / max |torch|
    loss: float  # |diff| / |torch|, the one-batch case
    grads: float  # max |diff| / max |torch|, per gradient
    traj_loss: float  # |diff| / |torch|, every step of a trajectory
    param_max: float  # max |diff| of a final parameter tensor
    param_l2: float  # ||diff|| / ||torch - init|| of a final parameter tensor (None: unchecked)


LR, STEPS = 1e-3, 8
F32 = Tol(logits=2e-5, loss=2e-5, grads=2e-5, traj_loss=1e-5, param_max=1e-5, param_l2=None)
AMP = Tol(logits=2e-3, loss=2e-5, grads=5e-3, traj_loss=1e-4, param_max=LR, param_l2=5e-3)


@dataclass
class Case:
    name: str
    kind: str  # grads, traj, sample
    precision: str = "f32"
    bias: bool = True
    activation: str = "gelu"
    init: str = "state_dict"
    flags: list = field(default_factory=list)  # more `train` flags (traj)
    env: dict = field(default_factory=dict)  # environment of our side (grads)
    steps: int = STEPS
    batch: int = 4
    attention: str = "fused"  # ours: `--attention`

    @property
    def tol(self):
        return AMP if self.precision == "amp-f16" else F32


README_MARK = "<!-- nanogpt-load: scripts/nanogpt_compat.py runs this block -->"
# The guide's chapters holding the Python lines the cross-check runs.
GUIDE_LOAD = os.path.join("docs", "guide", "checkpoints.md")
GUIDE_GENERATE = os.path.join("docs", "guide", "gpt.md")


def readme_load_lines():
    """The Python lines the guide gives for loading a checkpoint into nanoGPT's GPT."""
    with open(os.path.join(ROOT, GUIDE_LOAD)) as f:
        text = f.read()
    at = text.find(README_MARK)
    if at < 0:
        raise Fail(f"{GUIDE_LOAD} has no `{README_MARK}` block")
    m = re.search(r"```python\n(.*?)```", text[at:], re.S)
    if not m:
        raise Fail(f"{GUIDE_LOAD}: no ```python block after the nanogpt-load mark")
    return m.group(1)


def load_like_readme(checkpoint):
    """Run the guide's lines on `checkpoint` with this mirror as nanoGPT's `model` module;
    returns the GPT they built and loaded."""
    code = readme_load_lines()
    if '"run.safetensors"' not in code:
        raise Fail("the guide's lines do not name run.safetensors")
    code = code.replace('"run.safetensors"', repr(checkpoint))
    saved = sys.modules.get("model")
    sys.modules["model"] = nanogpt_model
    try:
        scope = {}
        exec(compile(code, f"{GUIDE_LOAD} (nanogpt-load block)", "exec"), scope)
    finally:
        if saved is None:
            del sys.modules["model"]
        else:
            sys.modules["model"] = saved
    model = scope.get("model")
    if not isinstance(model, GPT):
        raise Fail("the guide's lines did not leave a nanoGPT GPT in `model`")
    # strict load means every key matched; check the values arrived too.
    state = load_file(checkpoint)
    for k, v in model.state_dict().items():
        if not torch.equal(v, state[k]):
            raise Fail(f"{k}: the loaded value differs from the file's")
    return model
