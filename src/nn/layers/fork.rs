//! A fork: one input into several branches of layers, joined by a sum, a product or a
//! concatenation ([`Join`]): `{"fork": {"branches": [[...], [...]], "join": "sum"}}`. Branch
//! `b`'s layer `i` is named `{b}.{i}` (an `nn.ModuleList` of `nn.Sequential`s); an empty
//! branch is the input itself. A composition ([`super::graph`]): its backward is derived, and
//! the gradients of the branches meet at the input in one place.

use serde::Deserialize;

use super::graph::GraphConfig;
use super::join::Join;
use super::residual::{Named, parse_layers};
use super::{LayerConfig, ParseLayer};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkJson {
    branches: Vec<Vec<serde_json::Value>>,
    join: Join,
}

/// The registry's parser: each branch's layers parse like the model's.
pub fn parse(
    fields: serde_json::Value,
    layer: &ParseLayer,
) -> serde_json::Result<Box<dyn LayerConfig>> {
    let json: ForkJson = serde_json::from_value(fields)?;
    let branches = json
        .branches
        .into_iter()
        .enumerate()
        .map(|(b, layers)| {
            let names = (&format!("{b}.")[..], &format!("branch {b} layer")[..]);
            parse_layers(layers, layer, names)
        })
        .collect::<serde_json::Result<Vec<_>>>()?;
    Ok(Box::new(fork(branches, json.join)))
}

/// `join(branch_0(x), branch_1(x), ...)`.
pub fn fork(branches: Vec<Vec<Named>>, join: Join) -> GraphConfig {
    let mut g = GraphConfig::new("fork");
    let outputs: Vec<_> = branches
        .into_iter()
        .map(|layers| g.chain(GraphConfig::INPUT, layers))
        .collect();
    let y = g.join(join, &outputs);
    g.output(y)
}
