//! A layer with its name and shapes ([`NamedLayer`]), its parameters with full names
//! ([`ParamSpec`]), and the resolution of a run of layer configs (from Rust or JSON) against
//! an input shape: what a model and a composition ([`super::graph`]) are built from.

use std::sync::Arc;

use super::{BufferDef, Init, Layer, LayerConfig, checked_numel, too_large};

/// One layer of a model, in execution order.
#[derive(Clone, Debug)]
pub struct NamedLayer {
    /// The module's name, the prefix of its parameters: `"conv1"`, or `"0"` in a Sequential.
    pub name: String,
    pub layer: Arc<dyn Layer>,
    /// Per-sample input shape (no batch dimension).
    pub input_shape: Vec<usize>,
    /// Per-sample output shape (no batch dimension).
    pub output_shape: Vec<usize>,
}

impl NamedLayer {
    /// This layer's parameters in `state_dict` order (weight, then bias), with full names.
    pub fn parameters(&self) -> Vec<ParamSpec> {
        self.layer
            .parameters()
            .into_iter()
            .map(|p| {
                let p = p.under(&self.name);
                ParamSpec {
                    name: p.name,
                    shape: p.shape,
                    init: p.init,
                }
            })
            .collect()
    }
}

impl NamedLayer {
    /// This layer's buffers in `state_dict` order, with full names.
    pub fn buffers(&self) -> Vec<BufferDef> {
        self.layer
            .buffers()
            .into_iter()
            .map(|b| b.under(&self.name))
            .collect()
    }
}

/// A parameter tensor: PyTorch `state_dict` name, shape and initialisation.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl ParamSpec {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Resolves named layer configs in order from `input`; errors name the layer's index and
/// name (`layer 3 `conv2` (conv2d): ...`).
pub(crate) fn resolve_layers(
    input: &[usize],
    layers: &[(String, Box<dyn LayerConfig>)],
) -> std::result::Result<Vec<NamedLayer>, String> {
    let mut shape = input.to_vec();
    let mut resolved = Vec::with_capacity(layers.len());
    for (index, (layer_name, config)) in layers.iter().enumerate() {
        let layer = resolve_one(&shape, layer_name, config.as_ref(), Some(index))?;
        shape.clone_from(&layer.output_shape);
        resolved.push(layer);
    }
    Ok(resolved)
}

/// Resolves one named layer config on `input`; errors name the layer (and its index in a
/// list, when it is in one).
pub(crate) fn resolve_one(
    input: &[usize],
    layer_name: &str,
    config: &dyn LayerConfig,
    index: Option<usize>,
) -> std::result::Result<NamedLayer, String> {
    let layer = config
        .resolve(input)
        .and_then(|r| check_sizes(&*r.layer, &r.output_shape).map(|()| r))
        .map_err(|msg| {
            let kind = config.kind();
            match index {
                Some(i) if layer_name == i.to_string() => format!("layer {i} ({kind}): {msg}"),
                Some(i) => format!("layer {i} `{layer_name}` ({kind}): {msg}"),
                None => format!("`{layer_name}` ({kind}): {msg}"),
            }
        })?;
    Ok(NamedLayer {
        name: layer_name.to_string(),
        layer: layer.layer,
        input_shape: input.to_vec(),
        output_shape: layer.output_shape,
    })
}

/// Checks a resolved layer's output and parameter sizes against [`super::MAX_ELEMENTS`].
fn check_sizes(layer: &dyn Layer, output: &[usize]) -> std::result::Result<(), String> {
    checked_numel(output).ok_or_else(|| too_large(output))?;
    for p in layer.parameters() {
        checked_numel(&p.shape).ok_or_else(|| format!("{} {}", p.name, too_large(&p.shape)))?;
    }
    Ok(())
}

/// The full names of `layer`'s own parameters under `path` (those of the layers it is made
/// of are theirs): the weight gradients its probe counts.
pub(crate) fn own_parameters(layer: &dyn Layer, path: &str) -> Vec<String> {
    let inner = |param: &str| {
        let prefix = |name: &str| format!("{name}.");
        layer
            .sublayers()
            .iter()
            .any(|l| param.starts_with(&prefix(&l.name)))
    };
    let full = |name: &str| match path {
        "" => name.to_string(),
        path => format!("{path}.{name}"),
    };
    let params = layer.parameters().into_iter().filter(|p| !inner(&p.name));
    params.map(|p| full(&p.name)).collect()
}
