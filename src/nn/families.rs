//! The families ([`super::family`]) and the lookups over them: which family a preset or a
//! JSON description is of. Apart from the traits, so that a family's module names the traits
//! and this list names the families.

use super::family::{Described, Family};
use crate::Result;

/// The families, in the order the CLI and the app list their presets.
pub static FAMILIES: &[&dyn Family] = &[
    &super::gpt::GPT,
    &super::llama::LLAMA,
    &super::resnet::RESNET,
    &super::resnet::airbench::AIRBENCH,
];

/// The family whose preset `name` is, if any.
pub fn of_preset(name: &str) -> Option<&'static dyn Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.presets().contains(&name))
}

/// The family model a JSON description holds, if it is a family's (`None`: a
/// Sequential description).
pub fn described_by(value: &serde_json::Value) -> Result<Option<Described>> {
    for f in FAMILIES {
        if let Some(found) = f.describes(value)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The family a JSON description names at its top, without building it.
pub fn named_in(value: &serde_json::Value) -> Option<&'static dyn Family> {
    let top = value.as_object()?;
    FAMILIES
        .iter()
        .copied()
        .find(|f| top.contains_key(f.name()))
}

/// Every preset of a family of token models, for messages (`gpt-tiny, gpt-char`).
pub fn token_presets() -> Vec<&'static str> {
    FAMILIES
        .iter()
        .filter(|f| f.takes_tokens())
        .flat_map(|f| f.presets().iter().copied())
        .collect()
}
