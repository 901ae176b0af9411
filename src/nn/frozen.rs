//! Frozen parameters: PyTorch's `p.requires_grad_(False)`. A frozen parameter gets no
//! update, no weight decay and no optimizer moments (PyTorch's optimizers skip a parameter
//! whose `.grad` is `None`), is left out of the GradScaler's unscale and inf/NaN check and of
//! gradient clipping (which see only gradients that exist), and is still saved and loaded
//! with the model's `state_dict`.
//!
//! Three ways to freeze, all by the parameters' `state_dict` names (`ModelSpec::frozen`):
//! - `"trainable": false` beside a JSON layer's kind (`{"conv2d": {...}, "trainable": false}`)
//!   freezes all of that layer's parameters; `"trainable": {"weight": false}` only those
//!   named (relative to the layer, as its own `state_dict` names them);
//! - `--freeze NAME[,NAME...]` on the command line, full names with `*` (any run of
//!   characters, dots included) and `?` (one character): `--freeze '*.norm?.weight'`;
//! - a family's preset (airbench's whitening weight and BatchNorm weights).
//!
//! How it is done: the flat parameter buffers hold every trainable parameter first and the
//! frozen ones after them ([`super::params::ParamLayout::trainable`]), so the unscale,
//! clipping and optimizer dispatches run over the trainable prefix only.

use crate::error::{Error, Result};

/// The names `pattern` matches: `*` any run of characters (dots included), `?` one.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    // Greedy with one backtrack point (the last `*`): O(pattern × name) at worst, where
    // trying every split at every `*` grows exponentially with the stars.
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == b'?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            // The last `*` takes one more character.
            star = Some((si, sj + 1));
            i = si + 1;
            j = sj + 1;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

/// Adds to `frozen` the parameters of `names` that `patterns` match. A pattern that matches
/// no parameter is an error listing the names nearest to it.
pub fn freeze_matching(
    names: &[String],
    patterns: &[String],
    frozen: &mut Vec<String>,
) -> Result<()> {
    for pattern in patterns {
        let matched: Vec<&String> = names.iter().filter(|n| glob_matches(pattern, n)).collect();
        if matched.is_empty() {
            return Err(unknown(pattern, names));
        }
        for name in matched {
            if !frozen.contains(name) {
                frozen.push(name.clone());
            }
        }
    }
    Ok(())
}

/// A model (`what`) with every parameter of `names` frozen trains nothing: say so before a
/// run plans it.
pub fn check_some_trainable(what: &str, names: &[String], frozen: &[String]) -> Result<()> {
    if !names.is_empty() && names.iter().all(|n| frozen.contains(n)) {
        return Err(Error::InvalidArgument(format!(
            "freeze: every parameter of {what} is frozen ({}): nothing would train",
            frozen.join(", ")
        )));
    }
    Ok(())
}

/// The full names a JSON layer's `"trainable"` value (beside its kind) freezes: `false` all
/// of layer `index`'s parameters, `{"weight": false, ...}` those named; `true` none.
/// `params` are the model's parameter names.
pub fn json_trainable(
    index: usize,
    value: &serde_json::Value,
    params: &[String],
) -> std::result::Result<Vec<String>, String> {
    let prefix = format!("{index}.");
    let own: Vec<&String> = params.iter().filter(|n| n.starts_with(&prefix)).collect();
    let relative = || {
        own.iter()
            .map(|n| n[prefix.len()..].to_string())
            .collect::<Vec<_>>()
    };
    match value {
        serde_json::Value::Bool(true) => Ok(Vec::new()),
        serde_json::Value::Bool(false) if own.is_empty() => {
            Err("trainable: false on a layer with no parameters".to_string())
        }
        serde_json::Value::Bool(false) => Ok(own.into_iter().cloned().collect()),
        serde_json::Value::Object(map) => {
            let mut frozen = Vec::new();
            for (name, v) in map {
                let full = format!("{prefix}{name}");
                if !own.contains(&&full) {
                    return Err(format!(
                        "trainable: the layer has no parameter `{name}` (its parameters: {})",
                        list(&relative())
                    ));
                }
                match v {
                    serde_json::Value::Bool(false) => frozen.push(full),
                    serde_json::Value::Bool(true) => {}
                    other => {
                        return Err(format!(
                            "trainable: `{name}` must be true or false, not {other}"
                        ));
                    }
                }
            }
            Ok(frozen)
        }
        other => Err(format!(
            "trainable must be true, false or {{\"PARAMETER\": false, ...}}, not {other}"
        )),
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// The error for a `--freeze` pattern that matches nothing: the (up to 8) parameter names
/// nearest to it by edit distance.
fn unknown(pattern: &str, names: &[String]) -> Error {
    let mut near: Vec<(usize, &String)> = names
        .iter()
        .map(|n| (edit_distance(pattern, n), n))
        .collect();
    near.sort_by_key(|&(d, _)| d);
    let near: Vec<String> = near.iter().take(8).map(|(_, n)| n.to_string()).collect();
    Error::InvalidArgument(format!(
        "freeze: no parameter is named `{pattern}` (`*` and `?` match parts of names); the \
         nearest are: {} ({} parameters in all)",
        list(&near),
        names.len()
    ))
}

/// Levenshtein distance over bytes, with `*` and `?` costing nothing to match.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, &ca) in a.iter().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let same = ca == cb || ca == b'?' || ca == b'*';
            let sub = prev + usize::from(!same);
            prev = row[j + 1];
            row[j + 1] = sub.min(row[j] + 1).min(prev + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob_matches("*.norm?.weight", "2.norm1.weight"));
        assert!(glob_matches("*.weight", "layer1.0.bn1.weight"));
        assert!(!glob_matches("*.weight", "2.norm1.bias"));
        assert!(!glob_matches("0.weight", "10.weight"));
        assert!(glob_matches("0.weight", "0.weight"));
        assert!(glob_matches("*a*b", "xaxxab") && !glob_matches("*a*b", "xaxxa"));
        assert!(glob_matches("a*", "a") && glob_matches("**", "") && !glob_matches("?", ""));
        // Many stars on a long name that almost matches: no exponential search.
        let name = "a".repeat(200);
        assert!(!glob_matches(&format!("{}b", "*a".repeat(20)), &name));
        assert!(glob_matches(&"*a".repeat(20), &name));
    }

    #[test]
    fn json_trainable_names_the_layers_parameters() {
        let params: Vec<String> = ["0.weight", "0.bias", "1.weight"]
            .map(String::from)
            .to_vec();
        let all = json_trainable(0, &serde_json::json!(false), &params).unwrap();
        assert_eq!(all, ["0.weight", "0.bias"]);
        let weight = json_trainable(0, &serde_json::json!({"weight": false}), &params).unwrap();
        assert_eq!(weight, ["0.weight"]);
        let bad = json_trainable(1, &serde_json::json!({"bias": false}), &params).unwrap_err();
        assert!(
            bad.contains("no parameter `bias`") && bad.contains("weight"),
            "{bad}"
        );
        assert!(json_trainable(2, &serde_json::json!(false), &params).is_err());
    }
}
