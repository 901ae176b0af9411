//! How attention layers run ([`AttentionKernel`]): the plan carries the model's choice and
//! the attention layer reads it (`nn/layers/attention.rs`).

use crate::error::{Error, Result};

/// How attention layers run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionKernel {
    /// One fused kernel per pass, no `[B, nh, T, T]` buffer (FlashAttention-2's shape).
    #[default]
    Fused,
    /// Two batched matmuls around a causal softmax, keeping the probabilities (nanoGPT's
    /// manual path).
    Unfused,
}

impl AttentionKernel {
    pub const NAMES: [&str; 2] = ["fused", "unfused"];

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "fused" => Ok(Self::Fused),
            "unfused" => Ok(Self::Unfused),
            other => Err(Error::InvalidArgument(format!(
                "unknown attention kernel `{other}` (expected fused or unfused)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Fused => "fused",
            Self::Unfused => "unfused",
        }
    }
}
