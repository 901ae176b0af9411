//! A Hugging Face transformers folder as a checkpoint of weights alone (`--model hf:DIR`):
//! its tensors under transformers' names, which the model's family table maps to ours when
//! [`Checkpoint::params_for_model`] matches them (missing, unexpected and mis-shaped
//! tensors are errors naming them). The browser reads a folder from memory
//! ([`Checkpoint::from_hf`]).

use super::{Checkpoint, NamedTensor};
use crate::data::hf::HfFolder;

impl Checkpoint {
    /// The weights of the folder `dir` (f32, f16 or bf16, one file or shards), as f32.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_hf_folder(dir: &std::path::Path) -> crate::error::Result<Checkpoint> {
        Ok(Self::from_hf(crate::data::hf::read_folder(dir)?))
    }

    /// The weights of a folder already read (from disk, or from memory: a page's picked
    /// folder).
    pub fn from_hf(folder: HfFolder) -> Checkpoint {
        let params = (folder.tensors.into_values())
            .map(|t| NamedTensor {
                name: t.name,
                shape: t.shape,
                values: t.values,
            })
            .collect();
        Checkpoint {
            params,
            ..Checkpoint::default()
        }
    }
}
