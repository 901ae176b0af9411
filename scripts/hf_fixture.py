#!/usr/bin/env python3
"""Tiny Llama folders written by transformers itself, and the strict check of a folder we
write: the fixtures of tests/hf_folder.rs (nothing downloaded; random weights).

  make OUT_DIR     writes three folders with `LlamaForCausalLM(...).save_pretrained`:
                   gqa-f32      4 query heads over 2 key/value heads, rope_theta 50000,
                                untied embeddings, float32, one model.safetensors
                   tied-bf16    tied embeddings (lm_head not saved), bfloat16
                   sharded-f16  float16 in shards of at most 20 KB with
                                model.safetensors.index.json
                   and beside each, expected.safetensors: every tensor of its weight files
                   as float32 (what a reader must give, exactly).
  page OUT_DIR     writes OUT_DIR/page-llama, the folder the browser e2e picks in the page:
                   a Llama of 2 layers (GQA, untied, vocabulary 320, 64 positions) saved by
                   transformers in float32, and a byte-level BPE tokenizer.json of 320 ids
                   trained by `tokenizers` on the embedded text it fine-tunes on
                   (src/data/embedded/hamlet_gut.txt.gz).
  check DIR REF    loads DIR with `LlamaForCausalLM.from_pretrained` and fails unless no key
                   is missing, unexpected or mismatched, its config equals REF's where a
                   LlamaConfig field is concerned, and every weight equals REF's rounded to
                   DIR's dtype; prints the largest difference of the logits of a fixed batch.

Needs the venv made by `bash scripts/python-venv.sh` (torch, safetensors, transformers).
"""

import gzip
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

FIELDS = [
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
    "rms_norm_eps", "tie_word_embeddings",
]


def config(tied):
    return LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rope_theta=50000.0,
        max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=tied,
        bos_token_id=1, eos_token_id=2,
    )


def weight_files(folder):
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    return ["model.safetensors"]


def make(out):
    torch.manual_seed(0)
    for name, tied, dtype, shard in [
        ("gqa-f32", False, torch.float32, None),
        ("tied-bf16", True, torch.bfloat16, None),
        ("sharded-f16", False, torch.float16, "20KB"),
    ]:
        model = LlamaForCausalLM(config(tied)).to(dtype)
        folder = os.path.join(out, name)
        kwargs = {"max_shard_size": shard} if shard else {}
        model.save_pretrained(folder, **kwargs)
        expected = {}
        for file in weight_files(folder):
            with safe_open(os.path.join(folder, file), "pt") as f:
                for key in f.keys():
                    expected[key] = f.get_tensor(key).float().contiguous()
        save_file(expected, os.path.join(folder, "expected.safetensors"))
        files = weight_files(folder)
        print(f"{name}: {len(expected)} tensors in {len(files)} file(s)")


# The page's folder: its vocabulary is the tokenizer's, the byte alphabet (256), the special
# token and merges learnt from the text.
PAGE_VOCAB = 320
HAMLET_GZ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "data",
                         "embedded", "hamlet_gut.txt.gz")


def page(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    torch.manual_seed(0)
    cfg = config(False)
    cfg.vocab_size = PAGE_VOCAB
    folder = os.path.join(out, "page-llama")
    LlamaForCausalLM(cfg).save_pretrained(folder)
    with gzip.open(HAMLET_GZ, "rt", encoding="utf-8", newline="") as f:
        text = f.read()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=PAGE_VOCAB, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    if tok.get_vocab_size() > PAGE_VOCAB:
        raise SystemExit(f"the tokenizer has {tok.get_vocab_size()} ids, over {PAGE_VOCAB}")
    tok.save(os.path.join(folder, "tokenizer.json"))
    print(folder)


def check(folder, ref):
    model, info = LlamaForCausalLM.from_pretrained(folder, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"{folder}: loading is not strict: {problems}")
    base = LlamaForCausalLM.from_pretrained(ref)
    for field in FIELDS:
        a, b = getattr(model.config, field), getattr(base.config, field)
        if a != b:
            raise SystemExit(f"{folder}: config {field} {a} != {b}")
    if model.config.rope_parameters["rope_theta"] != base.config.rope_parameters["rope_theta"]:
        raise SystemExit(f"{folder}: rope_theta differs")
    theirs = base.state_dict()
    for key, value in model.state_dict().items():
        want = theirs[key].to(value.dtype)
        if not torch.equal(value, want):
            raise SystemExit(f"{folder}: {key} differs from {ref}'s")
    dtype = str(next(model.parameters()).dtype)
    ids = torch.arange(12).reshape(2, 6) % model.config.vocab_size
    with torch.no_grad():
        diff = (model.float()(ids).logits - base.float()(ids).logits).abs().max().item()
    print(json.dumps({"dtype": dtype, "logits_max_diff": diff}))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "page":
        page(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
