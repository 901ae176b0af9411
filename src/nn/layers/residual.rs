//! A residual connection: `y = branch(x) + shortcut(x)`, the shortcut the identity unless
//! given (nanoGPT's `x = x + self.attn(self.ln_1(x))`; a ResNet block's projection, a 1×1
//! convolution with stride 2 and its BatchNorm). A composition ([`super::graph`]): the
//! branch, the shortcut, and a sum join, whose backward is derived. The add is on no
//! autocast list, so it promotes to the wider of its inputs (an f32 residual stream stays
//! f32 when the branch ends in f16). The residual has no name of its own in parameter paths:
//! its branch's layers are named relative to whatever contains it (`transformer.h.0` →
//! `transformer.h.0.ln_1`), its shortcut's under `shortcut` (`shortcut.0`).

use serde::Deserialize;

use super::graph::GraphConfig;
use super::{LayerConfig, ParseLayer};

/// One layer config with its module name.
pub type Named = (String, Box<dyn LayerConfig>);

/// `{"residual": {"layers": [...], "shortcut": [...]}}`: the branch's layers are named by
/// index, like a Sequential's, and the shortcut's `shortcut.{index}`; an empty or absent
/// shortcut is the identity.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResidualJson {
    layers: Vec<serde_json::Value>,
    #[serde(default)]
    shortcut: Vec<serde_json::Value>,
}

/// The registry's parser: the branch's and the shortcut's layers parse like the model's.
pub fn parse(
    fields: serde_json::Value,
    layer: &ParseLayer,
) -> serde_json::Result<Box<dyn LayerConfig>> {
    let json: ResidualJson = serde_json::from_value(fields)?;
    let branch = parse_layers(json.layers, layer, ("", "layer"))?;
    let shortcut = parse_layers(json.shortcut, layer, ("shortcut.", "shortcut layer"))?;
    Ok(Box::new(residual(branch, shortcut)))
}

/// JSON layers named `{prefix}{index}`, each parsed by `layer`; errors say `{what} {index}`.
pub(super) fn parse_layers(
    values: Vec<serde_json::Value>,
    layer: &ParseLayer,
    (prefix, what): (&str, &str),
) -> serde_json::Result<Vec<Named>> {
    use serde::de::Error as _;
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            layer(v)
                .map(|c| (format!("{prefix}{i}"), c))
                .map_err(|e| serde_json::Error::custom(format!("{what} {i}: {e}")))
        })
        .collect()
}

/// `y = branch(x) + shortcut(x)`, the shortcut the identity when empty.
pub fn residual(branch: Vec<Named>, shortcut: Vec<Named>) -> GraphConfig {
    let mut g = GraphConfig::new("residual");
    let x = GraphConfig::INPUT;
    let h = g.chain(x, branch);
    let skip = g.chain(x, shortcut);
    let y = g.add(skip, h);
    g.output(y)
}
