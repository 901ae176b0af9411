//! nanoGPT's `state_dict` names (`model.py`'s modules), the one table a GPT checkpoint is
//! written and read through ([`crate::nn::family::NameTable`]). The builder names its
//! modules as nanoGPT does, so each row maps a name to itself; a parameter the builder adds
//! without a row here fails the first save, naming it.

use crate::nn::family::NameTable;

pub const NANOGPT: NameTable = NameTable {
    convention: "nanoGPT",
    rows: &[
        ("transformer.wte.weight", "transformer.wte.weight"),
        ("transformer.wpe.weight", "transformer.wpe.weight"),
        (
            "transformer.h.{i}.ln_1.weight",
            "transformer.h.{i}.ln_1.weight",
        ),
        ("transformer.h.{i}.ln_1.bias", "transformer.h.{i}.ln_1.bias"),
        (
            "transformer.h.{i}.attn.c_attn.weight",
            "transformer.h.{i}.attn.c_attn.weight",
        ),
        (
            "transformer.h.{i}.attn.c_attn.bias",
            "transformer.h.{i}.attn.c_attn.bias",
        ),
        (
            "transformer.h.{i}.attn.c_proj.weight",
            "transformer.h.{i}.attn.c_proj.weight",
        ),
        (
            "transformer.h.{i}.attn.c_proj.bias",
            "transformer.h.{i}.attn.c_proj.bias",
        ),
        (
            "transformer.h.{i}.ln_2.weight",
            "transformer.h.{i}.ln_2.weight",
        ),
        ("transformer.h.{i}.ln_2.bias", "transformer.h.{i}.ln_2.bias"),
        (
            "transformer.h.{i}.mlp.c_fc.weight",
            "transformer.h.{i}.mlp.c_fc.weight",
        ),
        (
            "transformer.h.{i}.mlp.c_fc.bias",
            "transformer.h.{i}.mlp.c_fc.bias",
        ),
        (
            "transformer.h.{i}.mlp.c_proj.weight",
            "transformer.h.{i}.mlp.c_proj.weight",
        ),
        (
            "transformer.h.{i}.mlp.c_proj.bias",
            "transformer.h.{i}.mlp.c_proj.bias",
        ),
        ("transformer.ln_f.weight", "transformer.ln_f.weight"),
        ("transformer.ln_f.bias", "transformer.ln_f.bias"),
        ("lm_head.weight", "lm_head.weight"),
    ],
};
