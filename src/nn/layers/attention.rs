//! The core of nanoGPT's `CausalSelfAttention`, between `c_attn` and `c_proj`: from the
//! packed projections `qkv` `[T, 3C]` of each sample, per head `softmax(q kᵀ / √hs)` with the
//! causal mask, attention dropout, and `@ v`, written back as `[T, C]`. Under autocast the
//! two matmuls run in the low dtype and the softmax in f32 (autocast's fp32 list).
//!
//! Two ways to run it ([`AttentionKernel`], the model's choice): *fused* (the default:
//! `ops::flash_attention`, FlashAttention-2's shape, keeping only y and the row
//! log-sum-exp; its backward recomputes the probabilities) and *unfused* (nanoGPT's
//! non-flash path as written: S = q kᵀ in the low dtype, the f32 softmax, P·v, keeping
//! `[B, nh, T, T]` probabilities for the backward). Both drop the same probabilities and
//! agree up to floating-point reassociation and the unfused path's low-dtype roundings of
//! S and P.

use serde::Deserialize;

use super::attention_kernel::AttentionKernel;
use super::plan::Mode;
use super::{Backward, BackwardPlan, ForwardPlan, Layer, LayerConfig, Resolved, positive};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::attention::{self, SoftmaxParams};
use crate::ops::dropout::{DropoutKey, DropoutState};
use crate::ops::flash_attention::{self, FlashParams};
use crate::ops::qkv::Qkv;
use crate::tensor::{DType, Tensor};

/// `{"attention": {"heads": nh, "dropout": p}}` on a `[T, 3C]` input.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionConfig {
    pub heads: usize,
    #[serde(default)]
    pub dropout: f32,
}

impl LayerConfig for AttentionConfig {
    fn kind(&self) -> &'static str {
        "attention"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        positive(self.heads, "`heads`")?;
        super::dropout::check_p(self.dropout)?;
        let &[t, three_c] = input else {
            return Err(format!(
                "attention takes packed projections [T, 3·C] per sample, got {input:?}"
            ));
        };
        if !three_c.is_multiple_of(3) || !(three_c / 3).is_multiple_of(self.heads) {
            return Err(format!(
                "the packed width {three_c} is not 3 × a multiple of {} heads",
                self.heads
            ));
        }
        let layer = CausalAttention {
            heads: self.heads,
            width: three_c / 3,
            dropout: self.dropout,
        };
        Ok(Resolved::new(layer, vec![t, three_c / 3]))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CausalAttention {
    pub heads: usize,
    /// C: the embedding width (heads × head size).
    pub width: usize,
    pub dropout: f32,
}

impl CausalAttention {
    /// The attention dropout's key: none with p = 0 or in an evaluation plan.
    fn dropout_key(&self, f: &ForwardPlan<'_>) -> Option<DropoutKey> {
        (self.dropout > 0.0 && f.mode() == Mode::Train).then(|| f.dropout_key(self.dropout))
    }

    fn head_size(&self) -> usize {
        self.width / self.heads
    }

    /// nanoGPT's packed `[B, T, 3C]` projections (or their gradient).
    fn packed<'t>(&self, qkv: &'t Tensor) -> Qkv<'t> {
        Qkv::packed(qkv, self.heads, self.heads, self.head_size())
    }
}

impl Layer for CausalAttention {
    fn kind(&self) -> &'static str {
        "attention"
    }

    fn repr(&self) -> String {
        format!(
            "CausalAttention(heads={}, head_size={}, dropout={})",
            self.heads,
            self.head_size(),
            self.dropout
        )
    }

    fn op(&self) -> Op {
        Op::new("Attention", CastRule::LowPrecision)
    }

    /// `y = dropout(softmax(q kᵀ / √hs, causal)) v`, fused or not as the plan says.
    fn forward(&self, f: &mut ForwardPlan<'_>, qkv: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        match f.attention() {
            AttentionKernel::Fused => self.forward_fused(f, qkv),
            AttentionKernel::Unfused => self.forward_unfused(f, qkv),
        }
    }
}

impl CausalAttention {
    /// One fused kernel: `y` and the row log-sum-exp `lse` (f32 `[B, nh, T]`), kept with
    /// `qkv` for the backward.
    fn forward_fused(
        &self,
        f: &mut ForwardPlan<'_>,
        qkv: Tensor,
    ) -> Result<(Tensor, Box<dyn Backward>)> {
        let t = qkv.shape()[1];
        let y = f.activation(&[t, self.width]);
        let lse = f.named_activation("log-sum-exp", &[self.heads, t], DType::F32);
        let fused = Fused {
            batch: qkv.shape()[0],
            t,
            dropout: self.dropout_key(f),
        };
        let state = f.dropout_state();
        f.push(flash_attention::forward(
            f.ctx(),
            &qkv,
            &y,
            &lse,
            &fused.params(self, &state),
        )?);
        let backward = FusedBackward {
            layer: *self,
            qkv,
            y: y.clone(),
            lse,
            fused,
        };
        Ok((y, Box::new(backward)))
    }

    /// `S = q kᵀ`, `P = softmax(S / √hs)` (causal, f32), `Pd = dropout(P)`, `y = Pd v`.
    fn forward_unfused(
        &self,
        f: &mut ForwardPlan<'_>,
        qkv: Tensor,
    ) -> Result<(Tensor, Box<dyn Backward>)> {
        let (batch, t) = (qkv.shape()[0], qkv.shape()[1]);
        let hs = self.head_size();
        let scores_shape = [self.heads, t, t];
        // S is dead once the softmax has read it: one buffer serves every attention layer
        // (and, in the backward, dS).
        let s = f.scratch("attention scores", &scores_shape, f.dtype())?;
        let p = f.named_activation("probabilities", &scores_shape, DType::F32);
        let pd = f.named_activation("dropped-out probabilities", &scores_shape, f.dtype());
        let y = f.activation(&[t, self.width]);
        let ctx = f.ctx();
        let softmax = Softmax {
            rows: batch * self.heads * t,
            t,
            scale: 1.0 / (hs as f32).sqrt(),
            dropout: self.dropout_key(f),
        };
        let state = f.dropout_state();
        let params = softmax.params(&state);
        let qkv_at = self.packed(&qkv);
        for k in attention::manual_forward(ctx, qkv_at, (&s, &p, &pd), &y, &params)? {
            f.push(k);
        }
        let backward = AttentionBackward {
            layer: *self,
            qkv,
            p,
            pd,
            s,
            softmax,
        };
        Ok((y, Box::new(backward)))
    }
}

struct AttentionBackward {
    layer: CausalAttention,
    qkv: Tensor,
    p: Tensor,
    pd: Tensor,
    /// The forward's score scratch, reused for dS.
    s: Tensor,
    softmax: Softmax,
}

/// The softmax's sizes and dropout, kept for the backward.
#[derive(Clone, Copy)]
struct Softmax {
    rows: usize,
    t: usize,
    scale: f32,
    dropout: Option<DropoutKey>,
}

impl Softmax {
    fn params<'s>(&self, state: &'s DropoutState) -> SoftmaxParams<'s> {
        SoftmaxParams {
            rows: self.rows,
            t: self.t,
            scale: self.scale,
            dropout: self.dropout,
            dropout_state: self.dropout.map(|_| state),
            body: Default::default(),
        }
    }
}

impl Backward for AttentionBackward {
    /// `dPd = dy vᵀ`, `dv = Pdᵀ dy`, `dS = softmax'(P, dropout'(dPd))`, `dq = dS k`, `dk = dSᵀ q`.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        let dpd = b.scratch("attention dPd", &self.pd)?;
        let dqkv = b.input_grad(&self.qkv)?;
        let state = b.dropout_state();
        let params = self.softmax.params(&state);
        let (qkv, grads) = (self.layer.packed(&self.qkv), self.layer.packed(&dqkv));
        for k in attention::manual_backward(
            b.ctx(),
            qkv,
            (&self.p, &self.pd),
            &dy,
            (&dpd, &self.s),
            grads,
            &params,
        )? {
            b.push(k);
        }
        Ok(Some(dqkv))
    }
}

/// The fused kernel's sizes and dropout, kept for the backward.
#[derive(Clone, Copy)]
struct Fused {
    batch: usize,
    t: usize,
    dropout: Option<DropoutKey>,
}

impl Fused {
    fn params<'s>(&self, layer: &CausalAttention, state: &'s DropoutState) -> FlashParams<'s> {
        FlashParams {
            batch: self.batch,
            heads: layer.heads,
            kv_heads: None,
            t: self.t,
            width: layer.width,
            scale: 1.0 / (layer.head_size() as f32).sqrt(),
            dropout: self.dropout,
            dropout_state: self.dropout.map(|_| state),
            body: Default::default(),
            coop: None,
        }
    }
}

struct FusedBackward {
    layer: CausalAttention,
    qkv: Tensor,
    y: Tensor,
    lse: Tensor,
    fused: Fused,
}

impl Backward for FusedBackward {
    /// `delta = rowsum(dy ⊙ y)`, then dk and dv per key and dq per query, recomputing P.
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        if !b.wants_input_grad() {
            return Ok(None);
        }
        // delta is dead once the three kernels have run: one buffer serves every layer.
        let delta = b.scratch("attention delta", &self.lse)?;
        let dqkv = b.input_grad(&self.qkv)?;
        let state = b.dropout_state();
        let params = self.fused.params(&self.layer, &state);
        for k in flash_attention::backward(
            b.ctx(),
            &self.qkv,
            &self.y,
            &self.lse,
            &dy,
            &delta,
            &dqkv,
            &params,
        )? {
            b.push(k);
        }
        Ok(Some(dqkv))
    }
}
