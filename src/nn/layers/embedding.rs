//! GPT's input: token embedding plus learned position embedding, nanoGPT's
//! `transformer.wte(idx) + transformer.wpe(pos)`. On no autocast list: it runs in its
//! weights' dtype (f32 master weights under AMP). Its gradient is a deterministic
//! scatter-add (no float atomics).

use serde::Deserialize;

use super::{
    Backward, BackwardPlan, ForwardPlan, Init, Layer, LayerConfig, ParamDef, Resolved, positive,
};
use crate::amp::policy::{CastRule, Op};
use crate::error::{Error, Result};
use crate::ops::embedding;
use crate::tensor::{DType, Tensor};

/// `{"embedding": {"vocab": V, "dim": C, "positions": T}}` on a `[T]` token input;
/// parameters `wte.weight` [V, C] and `wpe.weight` [T, C] (nanoGPT's names, under the
/// layer's name, e.g. `transformer`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingConfig {
    pub vocab: usize,
    pub dim: usize,
    /// Learned positions (the block size); absent: token embedding only.
    pub positions: Option<usize>,
}

impl LayerConfig for EmbeddingConfig {
    fn kind(&self) -> &'static str {
        "embedding"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        positive(self.vocab, "`vocab`")?;
        positive(self.dim, "`dim`")?;
        let &[t] = input else {
            return Err(format!(
                "embedding takes a sequence of token ids per sample ([T]), got {input:?}"
            ));
        };
        if let Some(p) = self.positions
            && t > p
        {
            return Err(format!(
                "sequences of {t} tokens are longer than the {p} learned positions"
            ));
        }
        let layer = Embedding {
            vocab: self.vocab,
            dim: self.dim,
            positions: self.positions,
        };
        Ok(Resolved::new(layer, vec![t, self.dim]))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Embedding {
    pub vocab: usize,
    pub dim: usize,
    pub positions: Option<usize>,
}

/// nanoGPT's init for embeddings: N(0, 0.02).
const STD: f32 = 0.02;

impl Layer for Embedding {
    fn kind(&self) -> &'static str {
        "embedding"
    }

    fn repr(&self) -> String {
        let mut s = format!("Embedding({}, {})", self.vocab, self.dim);
        if let Some(p) = self.positions {
            s.push_str(&format!(" + Embedding({p}, {})", self.dim));
        }
        s
    }

    fn op(&self) -> Op {
        Op::new("Embedding", CastRule::Weight)
    }

    fn input_dtype(&self) -> Option<DType> {
        Some(DType::U32)
    }

    fn parameters(&self) -> Vec<ParamDef> {
        let normal = Init::Normal { std: STD };
        let mut params = vec![ParamDef::new(
            "wte.weight",
            vec![self.vocab, self.dim],
            normal,
        )];
        if let Some(p) = self.positions {
            params.push(ParamDef::new("wpe.weight", vec![p, self.dim], normal));
        }
        params
    }

    /// `y[b, t] = wte[tokens[b, t]] + wpe[t]`.
    fn forward(
        &self,
        f: &mut ForwardPlan<'_>,
        tokens: Tensor,
    ) -> Result<(Tensor, Box<dyn Backward>)> {
        if tokens.dtype() != DType::U32 {
            return Err(Error::shape(
                "embedding",
                format!("takes u32 token ids, got {}", tokens.dtype()),
            ));
        }
        let (batch, t) = (tokens.shape()[0], tokens.shape()[1]);
        let wte = f.param("wte.weight")?;
        let wpe = self.positions.map(|_| f.param("wpe.weight")).transpose()?;
        let y = f.activation(&[t, self.dim]);
        f.push(embedding::embedding_forward(
            f.ctx(),
            tokens.buffer(),
            &wte,
            wpe.as_ref(),
            &y,
            batch,
            t,
        )?);
        let backward = EmbeddingBackward {
            tokens,
            positions: self.positions.is_some(),
        };
        Ok((y, Box::new(backward)))
    }
}

struct EmbeddingBackward {
    tokens: Tensor,
    positions: bool,
}

impl Backward for EmbeddingBackward {
    /// `dwte[v] += Σ_{tokens = v} dy`, `dwpe[t] += Σ_b dy[b, t]`; token ids have no gradient.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        let (batch, t) = (self.tokens.shape()[0], self.tokens.shape()[1]);
        let dwte = b.param_grad("wte.weight")?;
        let dwpe = self
            .positions
            .then(|| b.param_grad("wpe.weight"))
            .transpose()?;
        let kernels = embedding::embedding_backward(
            b.ctx(),
            self.tokens.buffer(),
            &dy,
            &dwte,
            dwpe.as_ref(),
            batch,
            t,
        )?;
        for k in kernels {
            b.push(k);
        }
        Ok(None)
    }
}
