//! A model file's JSON before any key is read: its syntax, its nesting and its layer count
//! checked cheaply first ([`parse_json`]), and serde's messages about numbers made readable
//! ([`whole`]). Apart from `model.rs`, which reads the keys.

use serde::Deserialize;

use super::MAX_LAYERS;
use crate::{Error, Result};

/// The JSON of a model description, parsed whole first, so that a syntax error (a
/// trailing comma, a `NaN`) is reported as one, with its line and column, before any key
/// is looked at.
pub fn parse_json(json: &str) -> Result<serde_json::Value> {
    if json.starts_with('\u{feff}') {
        // Python's json.loads refuses it too ("Unexpected UTF-8 BOM").
        return Err(Error::model(
            "json: the file starts with a UTF-8 byte-order mark (BOM, bytes EF BB BF); save \
             it as UTF-8 without a BOM"
                .to_string(),
        ));
    }
    // Syntax and the layer count first, without building anything: a 14 MB file of a
    // million `{"relu": {}}` took 13 s and 800 MB to parse into a value.
    let syntax = |e: serde_json::Error| {
        Error::model(match e.to_string() {
            // serde_json stops at 128 levels: a deep file, not a broken one.
            m if m.starts_with("recursion limit exceeded") => format!(
                "json: nested deeper than the 128 levels a model file may have ({}): \
                 flatten the residuals",
                m.trim_start_matches("recursion limit exceeded ")
            ),
            m => format!("json: syntax error: {m}"),
        })
    };
    if serde_json::from_str::<serde::de::IgnoredAny>(json).is_err() {
        // The value parser's message (it says "trailing comma" where the skipping one
        // does not): a broken file is parsed whole only to say why.
        return serde_json::from_str(json).map_err(syntax);
    }
    if let Ok(LayerCount { layers: Some(n) }) = serde_json::from_str::<LayerCount>(json)
        && n.0 > MAX_LAYERS
    {
        return Err(Error::model(format!(
            "json: {} layers: a model may have at most {MAX_LAYERS}",
            n.0
        )));
    }
    serde_json::from_str(json).map_err(syntax)
}

/// serde_json reads a whole number past 2^64 − 1 as a float: say it is too large rather than
/// "invalid type: floating point `1.8446744073709552e+19`".
pub(super) fn whole(message: String) -> String {
    let float = "invalid type: floating point `";
    let Some(at) = message.find(float) else {
        return message;
    };
    let rest = &message[at + float.len()..];
    let Some(end) = rest.find('`') else {
        return message;
    };
    match rest[..end].parse::<f64>() {
        Ok(v) if v.fract() == 0.0 && v.abs() >= 1.8e19 => format!(
            "{}{} is too large for a whole number here (at most 18446744073709551615)",
            &message[..at],
            &rest[..end]
        ),
        _ => message,
    }
}

/// A description's `layers`, counted without being parsed (other keys ignored).
#[derive(Deserialize)]
struct LayerCount {
    layers: Option<Count>,
}

/// The length of a JSON array, its elements skipped.
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Counter;
        impl<'de> serde::de::Visitor<'de> for Counter {
            type Value = Count;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Count, A::Error> {
                let mut n = 0;
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(Counter)
    }
}
