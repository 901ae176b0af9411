"""The cases `scripts/pytorch_compat.py` runs: the PyTorch models (with webgpu-amp's parameter
names), the optimizers on both sides, the tolerances (their reasoning and the measurements
behind them are in pytorch_compat.py's docstring) and each case's settings."""

from dataclasses import dataclass, field

import torch
import torch.nn as nn


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


class MnistCNN(nn.Module):
    """The tutorial's SimpleCNN for 1x28x28 (webgpu-amp's `mnist-cnn`)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.fc = nn.Linear(64 * 7 * 7, num_classes)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        return self.fc(x)


MODELS = {"mlp": mlp, "mnist-cnn": MnistCNN}

# name -> (webgpu-amp flags, torch optimizer factory)
OPTIMIZERS = {
    "sgd": (
        ["--optimizer", "sgd", "--lr", "0.05"],
        lambda p: torch.optim.SGD(p, lr=0.05),
    ),
    "sgd-momentum": (
        ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9"],
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    ),
    "sgd-momentum-lr0.01": (
        ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9"],
        lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
    ),
    "adam": (
        ["--optimizer", "adam", "--lr", "0.001"],
        lambda p: torch.optim.Adam(p, lr=0.001),
    ),
}


@dataclass
class Tol:
    atol: float
    rtol: float

    def __str__(self):
        return f"atol {self.atol:g} + rtol {self.rtol:g}"


F32_LOSS = Tol(1e-5, 1e-4)
F32_PARAM = Tol(1e-5, 1e-4)
AMP_LOSS = Tol(1e-5, 5e-4)
AMP_PARAM = Tol(2e-5, 1e-3)
# Cases with noise_floor: parameters may instead be within this factor of PyTorch's own
# amp-f16 vs f32 difference on the tensor, if that bound is below this share of the movement.
FLOOR_FACTOR = 2.0
FLOOR_MAX_OF_MOVE = 0.1


@dataclass
class Case:
    name: str
    model: str
    optimizer: str
    precision: str  # "f32" or "amp-f16"
    steps: int = 5
    batch_size: int = 32
    input_scale: float = 1.0  # x = randn(...) * input_scale
    init_scale: float = 65536.0  # GradScaler (amp-f16 only); PyTorch's defaults
    growth_interval: int = 2000
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    flags: list = field(default_factory=list)  # more webgpu-amp train flags
    # What the scaler must have done on both sides (a sanity check that the case exercises
    # what it is there for, not a comparison): at least this many skipped steps and growths.
    min_skips: int = 0
    min_growths: int = 0
    loss_tol: Tol = field(default_factory=lambda: F32_LOSS)
    param_tol: Tol = field(default_factory=lambda: F32_PARAM)
    # amp-f16: a parameter tensor outside param_tol still passes when within FLOOR_FACTOR x
    # PyTorch's own amp-f16 vs f32 difference on it (and that bound is under
    # FLOOR_MAX_OF_MOVE of how far the tensor moved, so that the bound still means something).
    noise_floor: bool = False
    # A known difference from PyTorch, pinned: the case passes only when the comparison finds
    # exactly these problems (so a fix, or any other change, fails it until it is moved to the
    # cases that must match).
    known_issue: str = ""
    expect_problems: list = field(default_factory=list)


AMP = dict(loss_tol=AMP_LOSS, param_tol=AMP_PARAM)

CASES = [
    Case("mlp-sgd-f32", "mlp", "sgd", "f32"),
    Case("mlp-adam-f32", "mlp", "adam", "f32"),
    Case("mnist-cnn-sgd-momentum-f32", "mnist-cnn", "sgd-momentum", "f32", batch_size=16),
    Case("mlp-adam-amp-f16", "mlp", "adam", "amp-f16", **AMP),
    # The packed f16 storage (array<u32>, two halves) that devices without shader-f16 use.
    Case("mlp-adam-amp-f16-packed", "mlp", "adam", "amp-f16",
         flags=["--f16-storage", "packed"], **AMP),
    # On the CNN, f16 rounding differences compound over steps: after 1 step ours and
    # PyTorch's parameters differ by 2e-6, after 5 by up to 6e-5, some way towards PyTorch's own
    # amp-f16 vs f32 difference (1e-4). So its parameters may instead be within FLOOR_FACTOR x
    # that difference (noise_floor). lr 0.01: at sgd-momentum's lr 0.05 the loss jumps from 2.3
    # to 3.9 at step 2 and the compounding grows 10x. Init scale 2^12 keeps PyTorch's f16 weight
    # gradients far from overflow (see the second known issue below).
    Case("mnist-cnn-sgd-momentum-amp-f16", "mnist-cnn", "sgd-momentum-lr0.01", "amp-f16",
         batch_size=16, init_scale=2.0**12, noise_floor=True, **AMP),
    # The GradScaler's skip/backoff/growth sequence: a scale of 2^24 overflows the f16 gradient
    # of the logits for 8 steps (each skipped, the scale halved down to 2^16), then every 3
    # clean steps the scale doubles to 2^17, which overflows again (skip, back to 2^16).
    # Adam on top: a skipped step must not count in Adam's step (bias correction).
    # Batch 1 and small inputs: see the module docstring for why.
    Case("mlp-adam-amp-f16-backoff", "mlp", "adam", "amp-f16", steps=30, batch_size=1,
         input_scale=0.05, init_scale=2.0**24, growth_interval=3, min_skips=8, min_growths=3,
         **AMP),
    # The same with factors that are not f32 numbers: PyTorch multiplies the f32 scale by the
    # f64 factor and rounds to f32, and so must the GPU (with f32 factors the scales of this
    # sequence differ from PyTorch's in the last bit).
    Case("mlp-adam-amp-f16-odd-factors", "mlp", "adam", "amp-f16", steps=30, batch_size=1,
         input_scale=0.05, init_scale=2.0**24, growth_interval=3, growth_factor=1.7,
         backoff_factor=0.3, min_skips=4, min_growths=3, **AMP),
    # mnist-cnn at batch 32: conv1's weight gradient reduces over 32 x 28 x 28 = 25,088 pixels,
    # split into runs of at most 16,384 (lavapipe stopped longer runs early: this case was
    # wrong before the split).
    Case("mnist-cnn-sgd-f32-b32", "mnist-cnn", "sgd", "f32", steps=2, batch_size=32),
    # A weight gradient that overflows f16 while every activation gradient is finite: at
    # 2^21, 3.weight/3.bias summed over the batch of 32 pass 65504 (the logits' gradient peaks
    # at 60896), so step 4 is skipped. PyTorch computes weight gradients in f16 under autocast
    # and casts them to f32; webgpu-amp rounds them to f16 the same way before they land in
    # its f32 gradients, so both skip it. SGD: Adam turns one-ulp differences of near-zero f16
    # gradients (MNIST's border pixels) into lr-sized parameter differences.
    Case("mlp-sgd-amp-f16-weight-grad-overflow-b32", "mlp", "sgd", "amp-f16", steps=14,
         init_scale=2.0**24, growth_interval=3, min_skips=4, **AMP),
]
CASES_BY_NAME = {c.name: c for c in CASES}
