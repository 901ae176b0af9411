"""nanoGPT's GPT, mirrored for the cross-check (nanoGPT's model.py is not on PyPI).

This mirrors `model.py` of https://github.com/karpathy/nanoGPT as of commit f08abb45 (June
2023, the last commit that changed model.py; the file is the same at master 3adf61e, November
2025). It has the same classes (`LayerNorm`, `CausalSelfAttention`, `MLP`, `Block`,
`GPTConfig`, `GPT`), module tree and parameter names (`transformer.wte.weight`,
`transformer.h.0.ln_1.weight`, `transformer.h.0.attn.c_attn.weight`, ..., `lm_head.weight`),
the same behaviour and the same initialisation, so a state dict that loads here loads into
nanoGPT's own `GPT`:

  - `LayerNorm(ndim, bias)`: weight ones, optional bias zeros, `F.layer_norm(..., eps=1e-5)`;
  - `CausalSelfAttention`: `c_attn` (q, k, v in that order, split at n_embd), `c_proj`,
    `attn_dropout`, `resid_dropout`. `flash` is `hasattr(F, 'scaled_dot_product_attention')`
    (True on torch >= 2.0, then no mask buffer is registered, so the state dict has no
    `attn.bias`); without it, the manual path: `(q @ k^T) * (1/sqrt(hs))`, causal
    `masked_fill(-inf)` from a registered `bias` buffer (tril of ones), `F.softmax`,
    `attn_dropout`, `@ v`;
  - `MLP`: `c_fc` (4 x n_embd), `gelu = nn.GELU()` (exact, erf), `c_proj`, `dropout`;
  - `Block`: pre-norm, `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`;
  - `GPTConfig` defaults: block_size 1024, vocab_size 50304, n_layer 12, n_head 12,
    n_embd 768, dropout 0.0, bias True;
  - `GPT`: `transformer` = ModuleDict(wte, wpe, drop, h, ln_f), `lm_head` Linear without bias,
    tied by `transformer.wte.weight = lm_head.weight`; init: every Linear weight and Embedding
    N(0, 0.02), Linear biases zero, then every `c_proj.weight` N(0, 0.02/sqrt(2 n_layer));
    `forward(idx, targets=None)` returns `(logits, loss)`: with targets the logits of every
    position and `F.cross_entropy(..., ignore_index=-1)`, without them only the last
    position's logits; `generate(idx, max_new_tokens, temperature=1.0, top_k=None)` crops the
    context to the last block_size tokens, divides the last logits by the temperature, keeps
    values not below the k-th largest, and draws with `torch.multinomial`;
    `configure_optimizers(weight_decay, learning_rate, betas, device_type)`: AdamW with two
    parameter groups, every parameter of two or more dimensions decayed (weights and
    embeddings), the others (biases, LayerNorm weights) not; fused on CUDA only.

Left out (not needed here): `from_pretrained`, `estimate_mfu`, `crop_block_size`, and the
prints in `GPT.__init__` and `configure_optimizers`.

`use_manual_attention(model)` switches a built model to the manual attention path (the flash
path's kernel differs between devices and builds; the manual path is plain matmuls and a
softmax) without changing its state dict: the mask is set as a plain attribute, not a buffer.
"""

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F


class LayerNorm(nn.Module):
    """LayerNorm whose bias can be left out (nn.LayerNorm could not, when nanoGPT was written)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.flash:
            mask = torch.tril(torch.ones(config.block_size, config.block_size))
            self.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying: one Parameter under both names (the state dict lists both keys).
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size, \
            f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])  # the last position only, time dim kept
            loss = None
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        # Any parameter that is 2D will be weight decayed, otherwise no.
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == "cuda"
        extra_args = dict(fused=True) if use_fused else dict()
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            bs = self.config.block_size
            idx_cond = idx if idx.size(1) <= bs else idx[:, -bs:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def use_manual_attention(model):
    """Switch every attention of `model` to nanoGPT's manual path (flash=False), keeping the
    state dict as it is (the causal mask is a plain attribute, not a registered buffer)."""
    bs = model.config.block_size
    mask = torch.tril(torch.ones(bs, bs)).view(1, 1, bs, bs)
    for block in model.transformer.h:
        block.attn.flash = False
        if "bias" not in block.attn._buffers:
            block.attn.bias = mask  # a plain tensor attribute: not in the state dict
    return model
