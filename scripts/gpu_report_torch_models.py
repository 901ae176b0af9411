"""The PyTorch definitions behind scripts/gpu_report_torch.py's `resnet`, `airbench` and
`llama` groups, written as their public references write them, so that the report compares
webgpu-amp's presets with what their users run:

- `resnet18-cifar`: kuangliu/pytorch-cifar's `ResNet18()` (3x3 stem, no max pool, stages
  64/128/256/512, projection shortcuts of a 1x1 conv with stride and a BatchNorm; 11,173,962
  parameters; names conv1, bn1, layerN.M.{conv1,bn1,conv2,bn2,shortcut.0,shortcut.1}, linear).
- `airbench`: airbench94's net (KellerJordan's CIFAR-10 speedrun): a 2x2 whitening conv with a
  bias (3 -> 24, frozen), GELU, three conv groups 64/256/256 (conv, max pool, BatchNorm, GELU,
  conv, BatchNorm, GELU; 3x3 convs without bias; BatchNorm eps 1e-12, momentum 0.4 in
  PyTorch's convention, weight frozen), MaxPool2d(3), a bias-less linear 256 -> 10 scaled by
  1/9.
- `smollm2-135m`: Hugging Face's SmolLM2-135M config as published (LlamaForCausalLM: hidden
  576, intermediate 1536, 30 layers, 9 heads, 3 key/value heads, vocabulary 49,152, RMSNorm eps
  1e-5, rope_theta 100,000, tied embeddings), built from the config with random weights:
  nothing is downloaded.
"""

RESNET_CIFAR_PARAMETERS = 11_173_962
SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                    max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
                    tie_word_embeddings=True, hidden_act="silu", attention_bias=False,
                    mlp_bias=False)
# --quick: the same family, small enough for a CPU test of the script.
LLAMA_TINY = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
                  hidden_act="silu", attention_bias=False, mlp_bias=False)


def resnet18_cifar(torch, widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2), classes=10,
                   channels=3):
    """kuangliu/pytorch-cifar's ResNet with BasicBlocks (ResNet18 by default; any number of
    stages `layer1`, `layer2`, ..., the first at stride 1, the rest at 2)."""
    nn, F = torch.nn, torch.nn.functional

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, in_planes, planes, stride=1):
            super().__init__()
            self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.shortcut = nn.Sequential()
            if stride != 1 or in_planes != planes:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.in_planes = widths[0]
            self.conv1 = nn.Conv2d(channels, widths[0], 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            for i, (w, n) in enumerate(zip(widths, blocks)):
                setattr(self, f"layer{i + 1}", self._make_layer(w, n, 1 if i == 0 else 2))
            self.linear = nn.Linear(widths[-1], classes)

        def _make_layer(self, planes, count, stride):
            layers = []
            for s in [stride] + [1] * (count - 1):
                layers.append(BasicBlock(self.in_planes, planes, s))
                self.in_planes = planes
            return nn.Sequential(*layers)

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            for i in range(len(widths)):
                out = getattr(self, f"layer{i + 1}")(out)
            out = F.avg_pool2d(out, out.shape[-1])  # kuangliu's avg_pool2d(out, 4) at 32x32
            return self.linear(out.view(out.size(0), -1))

    return ResNet()


def airbench_net(torch, widths=(64, 256, 256), bn_momentum=0.6, scaling=1 / 9):
    """airbench94's network (the uncompiled reference); BatchNorm's weight and the whitening
    conv are frozen as there (requires_grad False)."""
    nn = torch.nn

    class BatchNorm(nn.BatchNorm2d):
        def __init__(self, features):
            super().__init__(features, eps=1e-12, momentum=1 - bn_momentum)
            self.weight.requires_grad = False

    def conv(cin, cout):
        return nn.Conv2d(cin, cout, 3, padding="same", bias=False)

    class ConvGroup(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.conv1, self.pool, self.norm1 = conv(cin, cout), nn.MaxPool2d(2), BatchNorm(cout)
            self.conv2, self.norm2, self.activ = conv(cout, cout), BatchNorm(cout), nn.GELU()

        def forward(self, x):
            x = self.activ(self.norm1(self.pool(self.conv1(x))))
            return self.activ(self.norm2(self.conv2(x)))

    class Mul(nn.Module):
        def forward(self, x):
            return x * scaling

    whiten = nn.Conv2d(3, 2 * 3 * 2 ** 2, kernel_size=2, padding=0, bias=True)
    whiten.weight.requires_grad = False
    return nn.Sequential(whiten, nn.GELU(), ConvGroup(24, widths[0]),
                         ConvGroup(widths[0], widths[1]), ConvGroup(widths[1], widths[2]),
                         nn.MaxPool2d(3), nn.Flatten(), nn.Linear(widths[2], 10, bias=False),
                         Mul())


def llama(torch, quick):
    """A LlamaForCausalLM with SmolLM2-135M's config (LLAMA_TINY with --quick), random
    weights, eager attention dispatch left at transformers' default (SDPA)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**(LLAMA_TINY if quick else SMOLLM2_135M))
    return LlamaForCausalLM(config), config
