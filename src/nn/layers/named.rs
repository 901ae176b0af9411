//! A layer with its name and shapes ([`NamedLayer`]), its parameters with full names
//! ([`ParamSpec`]), and the resolution of a run of layer configs (from Rust or JSON) against
//! an input shape: what a model and a layer made of layers (a residual) are built from.

use std::sync::Arc;

use super::{Init, Layer, LayerConfig, checked_numel, layer_kinds, parse_kind, too_large};

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

/// Parses one JSON layer, `{"kind": {fields}}`, of a kind [`layer_kinds`] lists.
pub(crate) fn layer_from_json(
    value: serde_json::Value,
) -> std::result::Result<Box<dyn LayerConfig>, String> {
    let kinds = || {
        layer_kinds()
            .map(|k| format!("{{\"{k}\": {{...}}}}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let serde_json::Value::Object(object) = value else {
        return Err(format!(
            "expected an object with one key, the layer kind (one of {})",
            kinds()
        ));
    };
    if object.contains_key("keep_f32") {
        // Read beside the top-level layers only (ModelSpec::from_json takes it there).
        return Err(
            "`keep_f32` is read beside a layer of the top-level \"layers\" list, not inside \
             a residual's: put it beside the residual, or name the layer with --keep-f32"
                .to_string(),
        );
    }
    let mut entries = object.into_iter();
    let (Some((kind, fields)), None) = (entries.next(), entries.next()) else {
        return Err(format!(
            "a layer is an object with exactly one key, the layer kind (one of {})",
            kinds()
        ));
    };
    let Some(config) = parse_kind(&kind, fields) else {
        return Err(format!(
            "unknown layer kind `{kind}` (expected one of {})",
            kinds()
        ));
    };
    config.map_err(|e| format!("{kind}: {e}"))
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
        let layer = config
            .resolve(&shape)
            .and_then(|r| check_sizes(&*r.layer, &r.output_shape).map(|()| r))
            .map_err(|msg| {
                let label = if *layer_name == index.to_string() {
                    String::new()
                } else {
                    format!(" `{layer_name}`")
                };
                format!("layer {index}{label} ({}): {msg}", config.kind())
            })?;
        resolved.push(NamedLayer {
            name: layer_name.clone(),
            layer: layer.layer,
            input_shape: shape,
            output_shape: layer.output_shape.clone(),
        });
        shape = layer.output_shape;
    }
    Ok(resolved)
}

/// Checks a resolved layer's output and parameter sizes against [`super::MAX_ELEMENTS`].
fn check_sizes(layer: &dyn Layer, output: &[usize]) -> std::result::Result<(), String> {
    checked_numel(output).ok_or_else(|| too_large(output))?;
    for p in layer.parameters() {
        checked_numel(&p.shape).ok_or_else(|| format!("{} {}", p.name, too_large(&p.shape)))?;
    }
    Ok(())
}
