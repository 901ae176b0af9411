//! The optimizer's state in a checkpoint: moments per parameter name, and their two
//! homes — base64 text in the header's `optimizer` entry, or a moments file beside the
//! checkpoint when they are too big for the header (see `moments_file.rs`).

use std::collections::{BTreeMap, HashMap};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;

use crate::error::{Error, Result};
use crate::optim::{OptimizerConfig, OptimizerState};

/// Moment name (`momentum_buffer`, `exp_avg`, `exp_avg_sq`) → parameter name → values.
pub type Moments = BTreeMap<String, BTreeMap<String, Vec<f32>>>;

/// Optimizer state per parameter name (moments unflattened from the flat buffers).
#[derive(Clone, Debug)]
pub struct NamedOptimizerState {
    pub config: OptimizerConfig,
    pub step: u32,
    pub moments: Moments,
    /// Set when the moments live in a moments file that could not be read (missing, or not
    /// the one this checkpoint names): `moments` is then empty and resuming fails with this
    /// reason, while the weights still load (`--init`, `sample`).
    pub unavailable: Option<String>,
    /// The moments file this state was read from, or names (`None`: in the header).
    pub moments_file: Option<MomentsFileRef>,
}

/// Moments compare bit for bit (a resumed run must equal an uninterrupted one exactly);
/// where they were stored does not count.
impl PartialEq for NamedOptimizerState {
    fn eq(&self, other: &Self) -> bool {
        // BTreeMaps iterate in key order, so equal maps zip entry by entry.
        let same_values = |a: &[f32], b: &[f32]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        };
        let same_moment = |a: &BTreeMap<String, Vec<f32>>, b: &BTreeMap<String, Vec<f32>>| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((na, va), (nb, vb))| na == nb && same_values(va, vb))
        };
        self.config == other.config
            && self.step == other.step
            && self.unavailable == other.unavailable
            && self.moments.len() == other.moments.len()
            && (self.moments.iter().zip(&other.moments))
                .all(|((ka, a), (kb, b))| ka == kb && same_moment(a, b))
    }
}

/// Where a checkpoint's moments file is and what it must hash to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MomentsFileRef {
    /// File name, in the checkpoint's directory.
    pub file: String,
    /// CRC-32 of the whole file.
    pub crc32: u32,
}

/// The header's `optimizer` entry: moments inline as base64 of little-endian f32, or a
/// reference to the moments file (then `moments` is empty).
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct OptimizerMeta {
    pub config: OptimizerConfig,
    pub step: u32,
    #[serde(default)]
    pub moments: HashMap<String, HashMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moments_file: Option<MomentsFileRef>,
}

pub fn encode_f32(values: &[f32]) -> String {
    B64.encode(bytemuck::cast_slice::<f32, u8>(values))
}

pub fn decode_f32(s: &str, what: &str) -> Result<Vec<f32>> {
    let bytes = B64
        .decode(s)
        .map_err(|e| Error::Checkpoint(format!("{what}: bad base64: {e}")))?;
    if bytes.len() % 4 != 0 {
        return Err(Error::Checkpoint(format!(
            "{what}: length is not a multiple of 4"
        )));
    }
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}

impl NamedOptimizerState {
    /// Split a flat optimizer state into per-parameter moments using `(name, offset, len)`.
    pub fn from_flat(
        config: OptimizerConfig,
        state: &OptimizerState,
        slices: &[(String, usize, usize)],
    ) -> Self {
        let mut moments = Moments::new();
        for (key, flat) in [
            ("momentum_buffer", &state.momentum_buffer),
            ("exp_avg", &state.exp_avg),
            ("exp_avg_sq", &state.exp_avg_sq),
        ] {
            if let Some(flat) = flat {
                let per = slices
                    .iter()
                    .map(|(n, off, len)| (n.clone(), flat[*off..*off + *len].to_vec()))
                    .collect();
                moments.insert(key.to_string(), per);
            }
        }
        Self {
            config,
            step: state.step,
            moments,
            unavailable: None,
            moments_file: None,
        }
    }

    /// Rebuild a flat state of `total` elements with the current layout.
    pub fn to_flat(
        &self,
        slices: &[(String, usize, usize)],
        total: usize,
    ) -> Result<OptimizerState> {
        if let Some(why) = &self.unavailable {
            return Err(Error::Checkpoint(why.clone()));
        }
        let mut state = OptimizerState {
            step: self.step,
            ..Default::default()
        };
        for (key, per) in &self.moments {
            let mut flat = vec![0f32; total];
            for (name, off, len) in slices {
                let v = per.get(name).ok_or_else(|| {
                    Error::Checkpoint(format!("optimizer {key} has no entry for `{name}`"))
                })?;
                if v.len() != *len {
                    return Err(Error::Checkpoint(format!(
                        "optimizer {key}.{name} has {} values, the model has {len}",
                        v.len()
                    )));
                }
                flat[*off..*off + *len].copy_from_slice(v);
            }
            match key.as_str() {
                "momentum_buffer" => state.momentum_buffer = Some(flat),
                "exp_avg" => state.exp_avg = Some(flat),
                "exp_avg_sq" => state.exp_avg_sq = Some(flat),
                other => {
                    return Err(Error::Checkpoint(format!(
                        "unknown optimizer state `{other}`"
                    )));
                }
            }
        }
        Ok(state)
    }

    /// Moment values in all, over every moment and parameter.
    pub fn moment_values(&self) -> usize {
        self.moments
            .values()
            .flat_map(|per| per.values())
            .map(Vec::len)
            .sum()
    }

    /// The header entry, with the moments inline (`file: None`) or in a moments file.
    pub(super) fn to_meta(&self, file: Option<MomentsFileRef>) -> OptimizerMeta {
        let moments = match file {
            Some(_) => HashMap::new(),
            None => self
                .moments
                .iter()
                .map(|(k, per)| {
                    let per = per
                        .iter()
                        .map(|(n, v)| (n.clone(), encode_f32(v)))
                        .collect();
                    (k.clone(), per)
                })
                .collect(),
        };
        OptimizerMeta {
            config: self.config,
            step: self.step,
            moments,
            moments_file: file,
        }
    }

    /// From the header entry. Moments in a moments file are not read here (see
    /// `Checkpoint::load`): until then they are `unavailable`.
    pub(super) fn from_meta(meta: OptimizerMeta, what: &str) -> Result<Self> {
        let mut moments = Moments::new();
        for (key, per) in meta.moments {
            let mut decoded = BTreeMap::new();
            for (name, enc) in per {
                let v = decode_f32(&enc, &format!("{what}: optimizer {key}.{name}"))?;
                decoded.insert(name, v);
            }
            moments.insert(key, decoded);
        }
        // Moments that cannot be continued from leave the weights loadable (`--init`).
        let bad = super::finite::check_moments(&moments, what).err();
        if bad.is_some() {
            moments.clear();
        }
        let unavailable = bad.or_else(|| {
            meta.moments_file.as_ref().map(|f| {
                format!(
                    "{what}: the optimizer state is in `{}` beside the checkpoint, which was not \
                 read; copy it with the checkpoint to resume (the weights alone load with \
                 --init)",
                    f.file
                )
            })
        });
        Ok(Self {
            config: meta.config,
            step: meta.step,
            moments,
            unavailable,
            moments_file: meta.moments_file,
        })
    }
}
