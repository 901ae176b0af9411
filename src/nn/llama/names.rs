//! transformers' `LlamaForCausalLM` `state_dict` names, the one table a Llama checkpoint is
//! written and read through ([`crate::nn::family::NameTable`]): `--model hf:DIR` reads a
//! folder's tensors by them. The builder names its modules as transformers does except the
//! token embedding, which is our embedding layer's `wte` under `model`. RoPE's table is a
//! non-persistent buffer, in no `state_dict` and so in no row.

use crate::nn::family::NameTable;

pub const TRANSFORMERS: NameTable = NameTable {
    convention: "transformers",
    rows: &[
        ("model.wte.weight", "model.embed_tokens.weight"),
        (
            "model.layers.{i}.self_attn.q_proj.weight",
            "model.layers.{i}.self_attn.q_proj.weight",
        ),
        (
            "model.layers.{i}.self_attn.k_proj.weight",
            "model.layers.{i}.self_attn.k_proj.weight",
        ),
        (
            "model.layers.{i}.self_attn.v_proj.weight",
            "model.layers.{i}.self_attn.v_proj.weight",
        ),
        (
            "model.layers.{i}.self_attn.o_proj.weight",
            "model.layers.{i}.self_attn.o_proj.weight",
        ),
        (
            "model.layers.{i}.mlp.gate_proj.weight",
            "model.layers.{i}.mlp.gate_proj.weight",
        ),
        (
            "model.layers.{i}.mlp.up_proj.weight",
            "model.layers.{i}.mlp.up_proj.weight",
        ),
        (
            "model.layers.{i}.mlp.down_proj.weight",
            "model.layers.{i}.mlp.down_proj.weight",
        ),
        (
            "model.layers.{i}.input_layernorm.weight",
            "model.layers.{i}.input_layernorm.weight",
        ),
        (
            "model.layers.{i}.post_attention_layernorm.weight",
            "model.layers.{i}.post_attention_layernorm.weight",
        ),
        ("model.norm.weight", "model.norm.weight"),
        ("lm_head.weight", "lm_head.weight"),
    ],
};
