//! Checkpoint metadata that is checked or recorded beside the tensors: the format and
//! precision a file names (refused when edited or from a future build), and how the run cut
//! its data into batches ([`DataOrder`]: a resume that cut them otherwise would continue
//! from another position in the data).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::data::Dataset;
use crate::error::{Error, Result};

pub const FORMAT: &str = "webgpu-amp/1";
use crate::train::config::RunConfig;

/// What places a run's batches in its data, beside [`Progress`]'s counters: a resume must
/// cut the same data the same way for `batch_in_epoch` to mean the same samples; and the
/// layers the run kept in f32, without which the same step computes other numbers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataOrder {
    pub batch_size: u64,
    pub grad_accum: u64,
    pub shuffle: bool,
    /// Training samples (per process) and the data set's name, as the run saw them.
    pub samples: u64,
    pub dataset: String,
    /// A hash of what was read ([`Dataset::content_hash`]); absent from older checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The layers computed in f32 whatever the precision mode (`--keep-f32`, `keep_f32` in a
    /// model file); absent from older checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_f32: Option<Vec<String>>,
}

impl DataOrder {
    /// How a run of `config` cuts `train`, keeping `keep_f32` in f32.
    pub fn of(config: &RunConfig, train: &Dataset, keep_f32: &[String]) -> Self {
        Self {
            batch_size: config.batch_size as u64,
            grad_accum: config.step.grad_accum as u64,
            shuffle: config.shuffle,
            samples: train.n as u64,
            dataset: train.name.clone(),
            content: Some(train.content_hash()),
            keep_f32: Some(keep_f32.to_vec()),
        }
    }
}

/// A `format` of this project's family must be the one this build writes, and a
/// `precision`, when given, a precision mode: an edited or future file is refused here,
/// naming the key, rather than read as something it is not. Another framework's marker
/// (safetensors' `"pt"`, `"np"`, ...; a plain state_dict may also name none) is a state
/// dict: its tensors are checked against the model's names and shapes as they load.
pub(super) fn check_format_and_precision(meta: &HashMap<String, String>, what: &str) -> Result<()> {
    if let Some(format) = meta.get("format")
        && format.starts_with("webgpu-amp")
        && format != FORMAT
    {
        return Err(Error::Checkpoint(format!(
            "{what}: metadata `format` is {format:?}, but this build reads {FORMAT:?} \
             checkpoints"
        )));
    }
    if let Some(p) = meta.get("precision")
        && crate::amp::policy::Precision::parse(p).is_err()
    {
        return Err(Error::Checkpoint(format!(
            "{what}: metadata `precision` is {p:?}: not one of f32, amp-f16, amp-bf16, f16"
        )));
    }
    Ok(())
}
