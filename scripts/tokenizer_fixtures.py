#!/usr/bin/env python3
"""Small byte-level BPE tokenizers shaped like GPT-2's, SmolLM2's and Llama 3's, trained here
with Hugging Face's `tokenizers` (nothing downloaded), and the ids Python gives a text: the
fixtures of tests/tokenizer.rs, which checks `webgpu-amp tokenize` against them.

  gpt2     ByteLevel pre-tokenizer (GPT-2's regex), ByteLevel decoder
  smollm2  Digits(individual_digits) then ByteLevel, as SmolLM2's tokenizer.json has it
  llama3   Llama 3's Split regex (with its `\\s+(?!\\S)` look-ahead, which needs a regex engine
           that has look-arounds: onig in Python, fancy-regex in our pure-Rust build), then
           ByteLevel without its own regex, and a post-processor putting <|begin_of_text|>
           first

Each is trained on the text itself plus a few lines, with a vocabulary of 400, so merges
apply to it. Writes OUT_DIR/NAME/tokenizer.json and OUT_DIR/NAME/ids.json (Python's
`Tokenizer.encode(text).ids`, special tokens added as the post-processor says).

Usage: python scripts/tokenizer_fixtures.py OUT_DIR TEXT_FILE
Needs the venv made by `bash scripts/python-venv.sh` (tokenizers).
"""

import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "To be, or not to be: that is the question.",
    "In 1969, 3 astronauts flew 384,400 km to the Moon.",
    "Grüße aus Köln — naïve café, déjà vu, 東京 and 🙂.",
]


def tokenizer(kind):
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    specials = ["<|endoftext|>"]
    if kind == "gpt2":
        tok.pre_tokenizer = byte_level
    elif kind == "smollm2":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    elif kind == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    else:
        raise ValueError(kind)
    tok.decoder = decoders.ByteLevel()
    return tok, specials


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, text_file = sys.argv[1], sys.argv[2]
    # newline="": keep \r\n as written (text mode would turn it into \n).
    with open(text_file, encoding="utf-8", newline="") as f:
        text = f.read()
    for kind in ["gpt2", "smollm2", "llama3"]:
        tok, specials = tokenizer(kind)
        trainer = trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator([text] + CORPUS, trainer=trainer)
        if kind == "llama3":
            bos = tok.token_to_id("<|begin_of_text|>")
            tok.post_processor = processors.TemplateProcessing(
                single="<|begin_of_text|> $A",
                pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                special_tokens=[("<|begin_of_text|>", bos)],
            )
        where = os.path.join(out_dir, kind)
        os.makedirs(where, exist_ok=True)
        tok.save(os.path.join(where, "tokenizer.json"))
        ids = tok.encode(text).ids
        # The saved file, read back, must give the same ids (what the Rust side reads).
        again = Tokenizer.from_file(os.path.join(where, "tokenizer.json")).encode(text).ids
        assert again == ids, f"{kind}: the saved tokenizer encodes differently"
        assert tok.decode(ids) == text, f"{kind}: decode(encode(text)) != text"
        with open(os.path.join(where, "ids.json"), "w") as f:
            json.dump(ids, f)
        print(f"{kind}: {len(ids)} ids, vocabulary {tok.get_vocab_size()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
