#!/usr/bin/env python3
"""The Llama family's forward and backward against transformers itself, in float32 on the
CPU: the fixtures of tests/llama_family.rs (nothing downloaded; random weights).

  make OUT_DIR   for each of two tiny configs, `LlamaForCausalLM(config).save_pretrained`
                 into OUT_DIR/NAME and beside it:
                   batch.safetensors  x, y: int64 [4, 8] token ids (a token data set too)
                   grads.safetensors  loss (the mean cross-entropy of the logits of x
                                      against y, no shift) and every parameter's gradient
                                      of it, under transformers' names
                 gqa-untied  4 query heads over 2 key/value heads, rope_theta 50000,
                             untied lm_head
                 gqa-tied    the same heads, rope_theta 500000, lm_head tied to the
                             embedding (its gradient is the sum of both uses)

Needs the venv made by `bash scripts/python-venv.sh` (torch, safetensors, transformers).
"""

import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

BATCH, T = 4, 8


def config(tied, theta):
    return LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rope_theta=theta,
        max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=tied,
        bos_token_id=1, eos_token_id=2, attn_implementation="eager",
    )


def make(out):
    torch.manual_seed(0)
    for name, tied, theta in [("gqa-untied", False, 50000.0), ("gqa-tied", True, 500000.0)]:
        model = LlamaForCausalLM(config(tied, theta)).float()
        # Norm weights away from 1, so their gradients and the RMSNorm's are exercised.
        with torch.no_grad():
            for key, p in model.named_parameters():
                if "norm" in key:
                    p.add_(0.3 * torch.randn_like(p))
        folder = os.path.join(out, name)
        model.save_pretrained(folder)
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, 96, (BATCH, T), generator=g)
        y = torch.randint(0, 96, (BATCH, T), generator=g)
        save_file({"x": x, "y": y}, os.path.join(folder, "batch.safetensors"))
        logits = model(x).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        grads = {"loss": loss.detach().reshape(1)}
        for key, p in model.named_parameters():
            grads[key] = p.grad.detach().contiguous()
        save_file(grads, os.path.join(folder, "grads.safetensors"))
        print(f"{name}: loss {loss.item():.6f}, {len(grads) - 1} gradients")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
