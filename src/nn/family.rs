//! Model families: GPT (`nn::gpt`) and the CIFAR ResNets (`nn::resnet`); Llama next. A family
//! is one module that holds its config (parsed from its own external format), its builder,
//! its presets, its training recipe and one table mapping its parameter and buffer names to
//! the convention its users' checkpoints follow ([`NameTable`]). Nothing outside a family asks which family
//! a model is: the CLI, the trainer, `sample`, `plan`, `bench step`, the app and the
//! browser ask the family through these two traits.
//!
//! - [`Family`]: the family itself, a `static` in its module, listed in
//!   [`super::families::FAMILIES`]: its presets, its JSON key, its recipe, the data its
//!   presets train on.
//! - [`FamilyModel`]: one configured model of it (a `GptConfig`), kept by the `ModelSpec`
//!   built from it (`ModelSpec::of_family`): what a checkpoint stores to rebuild it, its
//!   tokens (vocabulary and context), its layers for a sequence length.

use std::fmt;
use std::sync::Arc;

use super::layers::LayerConfig;
use crate::data::Dataset;
use crate::data::hf::HostTensor;
use crate::{Error, Result};

/// The cosine schedule's warm-up, as a share of its decay steps (over this), and floor, as
/// a share of the learning rate (over this), where a recipe gives none: nanoGPT's (100
/// warm-up iterations of 5000; `min_lr = learning_rate / 10`).
pub const COSINE_WARMUP_DIVISOR: u64 = 50;
pub const COSINE_MIN_LR_DIVISOR: f64 = 10.0;

/// A family's way of training, as its reference implementation does (nanoGPT's
/// `train.py` for GPT): what a run of it gets unless flags say otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Recipe {
    /// The optimizer (`adamw`) and its learning rate and weight decay.
    pub optimizer: &'static str,
    pub lr: f32,
    pub weight_decay: f32,
    /// Adam's β2.
    pub beta2: f32,
    /// Clip gradients to this global norm.
    pub clip_grad_norm: f32,
    /// The cosine schedule's warm-up: its decay steps over this.
    pub warmup_divisor: u64,
    /// The cosine schedule's floor: the learning rate over this.
    pub min_lr_divisor: f64,
    /// Weight decay for parameters of two dimensions or more only (nanoGPT's
    /// `configure_optimizers` groups); otherwise every parameter decays (PyTorch's one group).
    pub decay_matrices_only: bool,
}

/// A model family.
pub trait Family: Sync {
    /// Its name (`gpt`), also the JSON key of a whole model of it (`{"gpt": {...}}`).
    fn name(&self) -> &'static str;

    /// The name of its config in its reference implementation (`GPTConfig`), for messages.
    fn config_name(&self) -> &'static str;

    /// Its presets' names (`gpt-tiny`, `gpt-char`).
    fn presets(&self) -> &'static [&'static str];

    /// The preset a run of its data gets when it names no model (the smallest).
    fn default_preset(&self) -> &'static str;

    /// Preset `name` for data with `output_dim` outputs (a vocabulary of token ids).
    fn preset(&self, name: &str, output_dim: usize) -> Result<Arc<dyn FamilyModel>>;

    /// The model a JSON description holds when it is one of this family (its key at the
    /// top: `{"gpt": {...}}`), with the fields it left to the family's defaults; `None` for
    /// another description.
    fn describes(&self, value: &serde_json::Value) -> Result<Option<Described>>;

    /// How its reference implementation trains it (`None`: PyTorch's defaults).
    fn recipe(&self) -> Option<Recipe> {
        None
    }

    /// Whether its models take token ids (a language model): such a family trains on text.
    fn takes_tokens(&self) -> bool;

    /// The data set its presets are measured on by `bench step` (a name `--dataset` takes).
    fn bench_data(&self) -> &'static str;
}

/// A model's per-sample input shape and named layer configs.
pub type Built = (Vec<usize>, Vec<(String, Box<dyn LayerConfig>)>);

/// A family's model of a description, and the fields the description left to defaults.
pub type Described = (Arc<dyn FamilyModel>, Vec<&'static str>);

/// The model of `{"<key>": {fields}}` when `value` is one (`None` for another description),
/// with the fields it left to `C`'s serde defaults: the one reading of a family's keyed JSON.
/// `what` names it in the errors ("a GPT"), which list `fields` as the accepted shape.
pub fn describe_keyed<C>(
    value: &serde_json::Value,
    key: &str,
    what: &str,
    fields: &[&'static str],
) -> Result<Option<Described>>
where
    C: serde::de::DeserializeOwned + FamilyModel + 'static,
{
    let Some(top) = value.as_object() else {
        return Ok(None);
    };
    let Some(inner) = top.get(key) else {
        return Ok(None);
    };
    let shape = fields
        .iter()
        .map(|f| format!("\"{f}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let refuse = |e: &dyn fmt::Display| {
        Error::model(format!(
            "json: {e} ({what} is {{\"{key}\": {{{shape}}}}} and nothing else)"
        ))
    };
    if let Some(other) = top.keys().find(|k| *k != key) {
        return Err(refuse(&format!(
            "unknown field `{other}`, expected `{key}`"
        )));
    }
    let config = C::deserialize(inner).map_err(|e| refuse(&e))?;
    let filled = fields
        .iter()
        .copied()
        .filter(|f| inner.get(f).is_none())
        .collect();
    Ok(Some((Arc::new(config), filled)))
}

/// What a language model reads and writes: token ids below `vocab_size`, sequences of at
/// most `block_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tokens {
    pub vocab_size: usize,
    pub block_size: usize,
}

/// One configured model of a family.
pub trait FamilyModel: fmt::Debug + Send + Sync {
    fn family(&self) -> &'static dyn Family;

    /// The description a checkpoint stores (metadata `model`) so the model is rebuilt
    /// without flags: the family's JSON form, which `ModelSpec::from_json` reads back.
    fn description(&self) -> serde_json::Value;

    /// A language model's vocabulary and context (`None` for a model of features).
    fn tokens(&self) -> Option<Tokens>;

    /// The model named `name` on sequences of `t` tokens (a language model; its parameters
    /// do not depend on `t`), or on its default input otherwise: its per-sample input shape
    /// and its layers, named as the family's modules (`ModelSpec::of_family` resolves them).
    fn build(&self, name: &str, t: usize) -> Result<Built>;

    /// The table of its names: ours to its users' convention.
    fn names(&self) -> NameTable;

    /// Initial parameters its reference computes from the training data (airbench's
    /// whitening conv), written over `init` (the seeded defaults); none by default.
    fn init_from_data(&self, init: &mut [(String, Vec<f32>)], train: &Dataset) -> Result<()> {
        let _ = (init, train);
        Ok(())
    }

    /// The parameters its reference freezes (`requires_grad=False`), by our full names.
    fn frozen(&self) -> Vec<String> {
        Vec::new()
    }

    /// The folder its users' tools load (`--export-hf`: transformers'
    /// `from_pretrained`), as (file name, bytes), from its parameters under the table's
    /// names ([`FamilyModel::names`]); a family without one says so.
    fn export_folder(&self, tensors: &[HostTensor]) -> Result<Vec<(&'static str, Vec<u8>)>> {
        let _ = tensors;
        Err(Error::model(format!(
            "a {} has no Hugging Face folder to export (--export-hf writes a Llama's)",
            self.family().name()
        )))
    }

    /// This model on samples of `shape` where its family takes its input shape from the data
    /// (a ResNet's channels and image size); `None` where it keeps its own input (then the
    /// data's shape is checked against it as usual).
    fn with_input(&self, shape: &[usize]) -> Option<Arc<dyn FamilyModel>> {
        let _ = shape;
        None
    }

    /// This model trained on windows of `seq_len` tokens (`--seq-len`), where its family
    /// has a window apart from its config.
    fn with_seq_len(&self, seq_len: usize) -> Result<Arc<dyn FamilyModel>> {
        let family = self.family();
        Err(Error::model(format!(
            "--seq-len {seq_len}: a {} trains on the context its {} gives",
            family.name(),
            family.config_name()
        )))
    }
}

/// One row of a [`NameTable`]: our name and the convention's, `{i}` standing for a block
/// index in both.
pub type NameRow = (&'static str, &'static str);

/// How a family's parameters and buffers are named in its users' convention (nanoGPT's
/// `model.py`, Hugging Face `transformers`, torchvision): one row per name, written once in
/// the family's module. Checkpoints are written and read through it ([`NameTable::export`],
/// [`NameTable::import`]); a name no row covers is an error, so the table is the family's
/// whole `state_dict`.
#[derive(Clone, Copy, Debug)]
pub struct NameTable {
    pub convention: &'static str,
    pub rows: &'static [NameRow],
}

impl NameTable {
    /// The convention's name for our `name`.
    pub fn export(&self, name: &str) -> Result<String> {
        self.map(name, |r| (r.0, r.1))
    }

    /// Our name for the convention's `name`.
    pub fn import(&self, name: &str) -> Result<String> {
        self.map(name, |r| (r.1, r.0))
    }

    fn map(
        &self,
        name: &str,
        dir: impl Fn(&NameRow) -> (&'static str, &'static str),
    ) -> Result<String> {
        self.rows
            .iter()
            .find_map(|row| {
                let (from, to) = dir(row);
                match_pattern(from, name).map(|i| match i {
                    Some(i) => to.replace("{i}", &i),
                    None => to.to_string(),
                })
            })
            .ok_or_else(|| {
                Error::Checkpoint(format!(
                    "`{name}` is no name of the {} convention's table",
                    self.convention
                ))
            })
    }
}

/// `Some(index)` when `name` is `pattern` with `{i}` a decimal index (`Some(None)` when the
/// pattern has none), else `None`.
fn match_pattern(pattern: &str, name: &str) -> Option<Option<String>> {
    let Some((head, tail)) = pattern.split_once("{i}") else {
        return (pattern == name).then_some(None);
    };
    let index = name.strip_prefix(head)?.strip_suffix(tail)?;
    let digits = !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit());
    digits.then(|| Some(index.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: NameTable = NameTable {
        convention: "test",
        rows: &[
            ("wte.weight", "embed.weight"),
            ("h.{i}.ln_1.weight", "layers.{i}.norm.weight"),
        ],
    };

    #[test]
    fn names_map_both_ways_with_block_indices() {
        assert_eq!(TABLE.export("wte.weight").unwrap(), "embed.weight");
        assert_eq!(
            TABLE.export("h.12.ln_1.weight").unwrap(),
            "layers.12.norm.weight"
        );
        assert_eq!(
            TABLE.import("layers.3.norm.weight").unwrap(),
            "h.3.ln_1.weight"
        );
        for bad in ["h.x.ln_1.weight", "h..ln_1.weight", "other"] {
            assert!(TABLE.export(bad).is_err(), "{bad}");
        }
    }
}
