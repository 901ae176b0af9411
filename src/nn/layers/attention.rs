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
//!
//! Llama's attention is the same layer with `kv_heads` (grouped-query attention: `kv_heads`
//! key/value heads, each read by `heads / kv_heads` query heads, no repeated copy) and
//! `rope_theta` (RoPE on q and k before either path, Hugging Face's rotate-half, its cos/sin
//! table a non-persistent buffer `rope_table` of the layer's `T` positions, made on the host
//! as transformers' default rope init makes it). Its input is then q, k and v side by side,
//! `[T, (nh + 2·nkv)·hs]` (`q_proj`, `k_proj` and `v_proj` joined by a concatenation).

use serde::Deserialize;

use super::attention_kernel::AttentionKernel;
use super::attention_rope::{Rope, RopeGrads, Rotated};
use super::plan::Mode;
use super::{
    Backward, BackwardPlan, BufferDef, ForwardPlan, Layer, LayerConfig, Resolved, positive,
};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::ops::attention::{self, SoftmaxParams};
use crate::ops::dropout::{DropoutKey, DropoutState};
use crate::ops::flash_attention::{self, FlashParams};
use crate::ops::qkv::{HeadRows, Qkv, QkvLayout};
use crate::ops::rope;
use crate::tensor::{DType, Tensor};

/// `{"attention": {"heads": nh, "kv_heads": nkv, "rope_theta": θ, "dropout": p}}` on a
/// `[T, (nh + 2·nkv)·hs]` input (`[T, 3C]` without `kv_heads`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionConfig {
    pub heads: usize,
    /// Key/value heads (grouped-query attention); absent: `heads`.
    #[serde(default)]
    pub kv_heads: Option<usize>,
    /// RoPE's base on q and k; absent: no rotary embedding.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub dropout: f32,
}

impl AttentionConfig {
    /// nanoGPT's: multi-head, no RoPE.
    pub fn new(heads: usize, dropout: f32) -> Self {
        Self {
            heads,
            kv_heads: None,
            rope_theta: None,
            dropout,
        }
    }
}

impl LayerConfig for AttentionConfig {
    fn kind(&self) -> &'static str {
        "attention"
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        positive(self.heads, "`heads`")?;
        super::dropout::check_p(self.dropout)?;
        let kv_heads = self.kv_heads.unwrap_or(self.heads);
        positive(kv_heads, "`kv_heads`")?;
        if !self.heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "{} heads are not a multiple of {kv_heads} key/value heads",
                self.heads
            ));
        }
        let &[t, packed] = input else {
            return Err(format!(
                "attention takes packed projections [T, (heads + 2·kv_heads)·head_size] per \
                 sample, got {input:?}"
            ));
        };
        let slots = self.heads + 2 * kv_heads;
        if !packed.is_multiple_of(slots) {
            return Err(format!(
                "the packed width {packed} is not {slots} heads (q's {}, k's and v's \
                 {kv_heads} each) of one size",
                self.heads
            ));
        }
        let head_size = packed / slots;
        let rope = match self.rope_theta {
            None => None,
            Some(theta) => {
                // The table's checks (theta, an even head size), before any GPU work.
                rope::table_values(theta, head_size, 1).map_err(|e| e.to_string())?;
                Some(Rope {
                    theta,
                    positions: t,
                })
            }
        };
        let layer = CausalAttention {
            heads: self.heads,
            kv_heads,
            width: self.heads * head_size,
            dropout: self.dropout,
            rope,
        };
        Ok(Resolved::new(layer, vec![t, layer.width]))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CausalAttention {
    pub heads: usize,
    pub kv_heads: usize,
    /// C: the output's width (heads × head size).
    pub width: usize,
    pub dropout: f32,
    pub rope: Option<Rope>,
}

impl CausalAttention {
    /// The attention dropout's key: none with p = 0 or in an evaluation plan.
    fn dropout_key(&self, f: &ForwardPlan<'_>) -> Option<DropoutKey> {
        (self.dropout > 0.0 && f.mode() == Mode::Train).then(|| f.dropout_key(self.dropout))
    }

    fn head_size(&self) -> usize {
        self.width / self.heads
    }

    /// The packed `[B, T, (nh + 2·nkv)·hs]` projections (or their gradient): nanoGPT's
    /// `[B, T, 3C]` with as many key/value heads as query heads.
    fn packed<'t>(&self, qkv: &'t Tensor) -> Qkv<'t> {
        Qkv::packed(qkv, self.heads, self.kv_heads, self.head_size())
    }

    /// What attention reads: the packed projections, or with RoPE the rotated q and k
    /// (their tensors) and v where it sits in the packed ones. Their gradients sit alike.
    /// q and k rotated by RoPE into tensors of their own, when the layer has RoPE.
    fn rotate(&self, f: &mut ForwardPlan<'_>, qkv: &Tensor) -> Result<Option<Rotated>> {
        let layout = self.packed(qkv).layout;
        self.rope.map(|r| r.rotate(f, &layout, qkv)).transpose()
    }

    fn inputs<'t>(&self, qkv: &'t Tensor, rotated: Option<(&'t Tensor, &'t Tensor)>) -> Qkv<'t> {
        let packed = self.packed(qkv);
        let Some((q, k)) = rotated else {
            return packed;
        };
        let hs = self.head_size();
        let dense = |heads: usize| HeadRows {
            offset: 0,
            row: heads * hs,
        };
        let layout = QkvLayout {
            q: dense(self.heads),
            k: dense(self.kv_heads),
            ..packed.layout
        };
        Qkv {
            q,
            k,
            v: qkv,
            layout,
        }
    }
}

impl Layer for CausalAttention {
    fn kind(&self) -> &'static str {
        "attention"
    }

    fn repr(&self) -> String {
        match self.rope {
            None if self.kv_heads == self.heads => format!(
                "CausalAttention(heads={}, head_size={}, dropout={})",
                self.heads,
                self.head_size(),
                self.dropout
            ),
            _ => format!(
                "LlamaAttention(heads={}, kv_heads={}, head_size={}, rope_theta={}, dropout={})",
                self.heads,
                self.kv_heads,
                self.head_size(),
                self.rope.map_or("None".into(), |r| r.theta.to_string()),
                self.dropout
            ),
        }
    }

    /// RoPE's cos/sin table ([`super::attention_rope`]).
    fn buffers(&self) -> Vec<BufferDef> {
        let hs = self.head_size();
        self.rope.map_or(Vec::new(), |r| r.buffers(hs))
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
        let rotated = self.rotate(f, &qkv)?;
        let y = f.activation(&[t, self.width]);
        let lse = f.named_activation("log-sum-exp", &[self.heads, t], DType::F32);
        let fused = Fused {
            batch: qkv.shape()[0],
            t,
            dropout: self.dropout_key(f),
        };
        let state = f.dropout_state();
        let inputs = self.inputs(&qkv, rotated.as_ref().map(|r| (&r.q, &r.k)));
        f.push(flash_attention::forward_qkv(
            f.ctx(),
            inputs,
            &y,
            &lse,
            &fused.params(self, &state),
        )?);
        let backward = FusedBackward {
            layer: *self,
            qkv,
            rotated,
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
        let rotated = self.rotate(f, &qkv)?;
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
        let qkv_at = self.inputs(&qkv, rotated.as_ref().map(|r| (&r.q, &r.k)));
        for k in attention::manual_forward(ctx, qkv_at, (&s, &p, &pd), &y, &params)? {
            f.push(k);
        }
        let backward = AttentionBackward {
            layer: *self,
            qkv,
            rotated,
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
    rotated: Option<Rotated>,
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
        let rope = self
            .rotated
            .as_ref()
            .map(|r| RopeGrads::new(b, r))
            .transpose()?;
        let state = b.dropout_state();
        let params = self.softmax.params(&state);
        let rotated = self.rotated.as_ref().map(|r| (&r.q, &r.k));
        let qkv = self.layer.inputs(&self.qkv, rotated);
        let grads = self
            .layer
            .inputs(&dqkv, rope.as_ref().map(|g| (&g.dq, &g.dk)));
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
        if let (Some(g), Some(r)) = (&rope, &self.rotated) {
            g.push(b, &self.layer.packed(&dqkv).layout, r, &dqkv)?;
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
            kv_heads: Some(layer.kv_heads),
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
    rotated: Option<Rotated>,
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
        let rope = self
            .rotated
            .as_ref()
            .map(|r| RopeGrads::new(b, r))
            .transpose()?;
        let state = b.dropout_state();
        let params = self.fused.params(&self.layer, &state);
        let rotated = self.rotated.as_ref().map(|r| (&r.q, &r.k));
        let qkv = self.layer.inputs(&self.qkv, rotated);
        let grads = self
            .layer
            .inputs(&dqkv, rope.as_ref().map(|g| (&g.dq, &g.dk)));
        for k in flash_attention::backward_qkv(
            b.ctx(),
            qkv,
            &self.y,
            &self.lse,
            (&dy, &delta),
            grads,
            &params,
        )? {
            b.push(k);
        }
        if let (Some(g), Some(r)) = (&rope, &self.rotated) {
            g.push(b, &self.layer.packed(&dqkv).layout, r, &dqkv)?;
        }
        Ok(Some(dqkv))
    }
}
