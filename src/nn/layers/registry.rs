//! The layer kinds the JSON model format knows, and the parsing of a JSON layer: the one
//! list naming every layer file. A composition's parser (a residual's, a fork's) is handed
//! [`layer_from_json`] for its layers, so no layer file imports this list.

use serde::de::DeserializeOwned;

use super::{
    LayerConfig, ParseConfig, ParseLayer, avgpool, batchnorm, counter, fork, residual, scale,
};
use super::{attention, conv2d, dropout, embedding, flatten, layernorm, linear, pool, unary};

/// The layer kinds the JSON model format knows by key, besides the unary ones
/// ([`layer_kinds`] lists both).
pub const REGISTRY: &[(&str, ParseConfig)] = &[
    ("linear", parse::<linear::LinearConfig>),
    ("conv2d", parse::<conv2d::Conv2dConfig>),
    ("maxpool2d", parse::<pool::MaxPool2dConfig>),
    ("flatten", parse::<flatten::FlattenConfig>),
    ("layernorm", parse::<layernorm::LayerNormConfig>),
    ("rmsnorm", parse::<layernorm::RmsNormConfig>),
    ("dropout", parse::<dropout::DropoutConfig>),
    ("attention", parse::<attention::AttentionConfig>),
    ("embedding", parse::<embedding::EmbeddingConfig>),
    ("residual", residual::parse),
    ("fork", fork::parse),
    ("batch_counter", parse::<counter::BatchCounterConfig>),
    ("batchnorm2d", parse::<batchnorm::BatchNorm2dConfig>),
    ("batchnorm1d", parse::<batchnorm::BatchNorm1dConfig>),
    ("avgpool2d", parse::<avgpool::AvgPool2dConfig>),
    (
        "adaptive_avgpool2d",
        parse::<avgpool::AdaptiveAvgPool2dConfig>,
    ),
    ("scale", parse::<scale::ScaleConfig>),
];

/// Every layer kind the JSON model format knows: [`REGISTRY`]'s, then one per row of the
/// unary table ([`crate::ops::unary::UNARY_OPS`]).
pub fn layer_kinds() -> impl Iterator<Item = &'static str> {
    let unary = crate::ops::unary::UNARY_OPS.iter().map(|op| op.name);
    REGISTRY.iter().map(|(kind, _)| *kind).chain(unary)
}

/// The config of a JSON layer of kind `kind` from its fields, or `None` for an unknown kind.
fn parse_kind(
    kind: &str,
    fields: serde_json::Value,
) -> Option<serde_json::Result<Box<dyn LayerConfig>>> {
    if let Some((_, parse)) = REGISTRY.iter().find(|(k, _)| *k == kind) {
        return Some(parse(fields, &layer_from_json));
    }
    let op = crate::ops::unary::by_name(kind)?;
    Some(unary::UnaryConfig::parse(op, fields))
}

fn parse<C: LayerConfig + DeserializeOwned + 'static>(
    fields: serde_json::Value,
    _: &ParseLayer,
) -> serde_json::Result<Box<dyn LayerConfig>> {
    Ok(Box::new(serde_json::from_value::<C>(fields)?))
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
    if object.contains_key("trainable") {
        return Err(
            "`trainable` is read beside a layer of the top-level \"layers\" list, not inside \
             a composition's: name the parameters with --freeze instead"
                .to_string(),
        );
    }
    if object.contains_key("keep_f32") {
        // Read beside the top-level layers only (ModelSpec::from_json takes it there).
        return Err(
            "`keep_f32` is read beside a layer of the top-level \"layers\" list, not inside \
             a composition's (a residual's, a fork's): put it beside the composition, or name \
             the layer with --keep-f32"
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
