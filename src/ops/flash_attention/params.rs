//! The sizes and options of one fused attention ([`FlashParams`]), checked against the
//! tensors and turned into the kernels' uniform ([`Params`], shared with the WGSL).

use super::{FlashBody, FlashCoopConfig, MAX_HEAD_SIZE, WG};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::ops::dropout::{DropoutKey, DropoutState};
use crate::ops::qkv::Qkv;
use crate::tensor::Tensor;

const FLAG_DROPOUT: u32 = 1;

/// Sizes and options of one fused attention.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlashParams<'a> {
    pub batch: usize,
    /// Query heads nh.
    pub heads: usize,
    /// Key/value heads, dividing `heads` (grouped-query attention); None: one per query head.
    pub kv_heads: Option<usize>,
    /// Sequence length T.
    pub t: usize,
    /// C: the output's width, query heads × head size.
    pub width: usize,
    /// Logit scale, 1 / sqrt(hs).
    pub scale: f32,
    /// Attention dropout (None or p = 0: none). Needs `dropout_state`.
    pub dropout: Option<DropoutKey>,
    /// The state buffer the dropout kernels read (seed, counter, training flag).
    pub dropout_state: Option<&'a DropoutState>,
    pub body: FlashBody,
    /// The tensor-core body's configuration (None: the adapter's); tests force small blocks.
    pub coop: Option<FlashCoopConfig>,
}

impl FlashParams<'_> {
    pub fn head_size(&self) -> usize {
        self.width / self.heads.max(1)
    }

    pub fn kv_heads(&self) -> usize {
        self.kv_heads.unwrap_or(self.heads)
    }
}

crate::wgsl_struct! {
    pub(super) struct Params {
        /// B * nh
        pub(super) batch_heads: u32,
        /// nh
        heads: u32,
        /// T
        pub(super) t: u32,
        /// C = nh * HS
        width: u32,
        /// 1 / sqrt(HS)
        scale: f32,
        /// FLAG_DROPOUT
        flags: u32,
        /// dropout: ceil(p * 2^24)
        threshold: u32,
        /// dropout: layer id keying the mask
        layer: u32,
        /// dropout: 1 / (1 - p)
        drop_scale: f32,
        /// ceil(T / BLOCK): workgroups per (batch, head)
        pub(super) blocks: u32,
        /// Where q, k and v (and dq, dk, dv) sit: element offsets of head 0 at position 0,
        /// and elements from one position to the next (ops::qkv::HeadRows).
        q_at: u32,
        k_at: u32,
        v_at: u32,
        q_row: u32,
        k_row: u32,
        v_row: u32,
        /// Key/value heads, and query heads per key/value head.
        kv_heads: u32,
        group: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

fn u32_of(op: &'static str, what: &str, n: Option<usize>) -> Result<u32> {
    n.filter(|&n| n <= u32::MAX as usize)
        .map(|n| n as u32)
        .ok_or_else(|| Error::shape(op, format!("{what} exceeds 2^32 elements")))
}

/// Check sizes, where q, k and v (and dq, dk, dv) sit, the other tensors' sizes, storages
/// and the dropout setting; the uniform parameters.
pub(super) fn plan(
    op: &'static str,
    p: &FlashParams,
    (qkv, grads): (&Qkv, Option<&Qkv>),
    tensors: &[(&str, &Tensor, usize)],
) -> Result<Params> {
    let (b, nh, t, c) = (p.batch, p.heads, p.t, p.width);
    if b == 0 || nh == 0 || t == 0 || c == 0 || !c.is_multiple_of(nh) {
        return Err(Error::shape(
            op,
            format!(
                "batch {b}, heads {nh}, T {t}, width {c}: all positive, width a multiple of heads"
            ),
        ));
    }
    let hs = c / nh;
    if hs > MAX_HEAD_SIZE {
        return Err(Error::shape(
            op,
            format!(
                "head size {hs} exceeds the fused kernel's {MAX_HEAD_SIZE} (use the unfused attention)"
            ),
        ));
    }
    let l = qkv.layout;
    if (l.heads, l.kv_heads, l.head_size) != (nh, p.kv_heads(), hs) {
        return Err(Error::shape(
            op,
            format!(
                "q, k and v are laid out for {} heads ({} key/value) of {}, the attention has                  {nh} ({}) of {hs}",
                l.heads,
                l.kv_heads,
                l.head_size,
                p.kv_heads()
            ),
        ));
    }
    l.check(op)?;
    u32_of(
        op,
        "B · T · C",
        b.checked_mul(t).and_then(|n| n.checked_mul(c)),
    )?;
    if p.dropout.is_some() {
        // The mask's element index (bh·T + i)·T + j is a u32, as the unfused path's.
        let n = (b * nh).checked_mul(t).and_then(|n| n.checked_mul(t));
        u32_of(op, "attention dropout over B · nh · T · T", n)?;
    }
    qkv.check(op, ["q", "k", "v"], b, t)?;
    if let Some(grads) = grads {
        if grads.layout != l {
            return Err(Error::shape(
                op,
                "dq, dk and dv must sit where q, k and v do (one layout)".to_string(),
            ));
        }
        grads.check(op, ["dq", "dk", "dv"], b, t)?;
    }
    for (name, tensor, numel) in tensors {
        if tensor.numel() != *numel {
            return Err(Error::shape(
                op,
                format!("{name} {:?} must hold {numel} elements", tensor.shape()),
            ));
        }
    }
    for name in ["lse", "delta"] {
        if let Some((_, tensor, _)) = tensors.iter().find(|(n, _, _)| *n == name)
            && tensor.storage() != Storage::F32
        {
            return Err(Error::shape(
                op,
                format!("{name} must be f32, got {}", tensor.storage().name()),
            ));
        }
    }
    // Every tensor but the f32 statistics in one storage: the variants the shaders declare.
    let named: Vec<(&str, Storage)> = qkv
        .tensors()
        .into_iter()
        .chain(grads.map(|g| g.tensors()).into_iter().flatten())
        .map(|(n, t)| (n, t.storage()))
        .chain(
            tensors
                .iter()
                .filter(|(n, _, _)| !["lse", "delta"].contains(n))
                .map(|(n, t, _)| (*n, t.storage())),
        )
        .collect();
    let storages: Vec<Storage> = named.iter().map(|(_, s)| *s).collect();
    if storages.contains(&Storage::F16) && storages.contains(&Storage::F16Packed) {
        return Err(Error::shape(
            op,
            format!("mixes native and packed f16 storages ({storages:?}); one context uses one"),
        ));
    }
    if let Some((name, s)) = named.iter().find(|(_, s)| *s != storages[0]) {
        return Err(Error::shape(
            op,
            format!(
                "{name} is {} but q is {}: the tensors of one attention share one storage",
                s.name(),
                storages[0].name()
            ),
        ));
    }
    let mut u = Params {
        batch_heads: (b * nh) as u32,
        heads: nh as u32,
        t: t as u32,
        width: c as u32,
        scale: p.scale,
        flags: 0,
        threshold: 0,
        layer: 0,
        drop_scale: 1.0,
        blocks: t.div_ceil(WG as usize) as u32,
        q_at: l.q.offset as u32,
        k_at: l.k.offset as u32,
        v_at: l.v.offset as u32,
        q_row: l.q.row as u32,
        k_row: l.k.row as u32,
        v_row: l.v.row as u32,
        kv_heads: l.kv_heads as u32,
        group: l.group() as u32,
        _pad0: 0,
        _pad1: 0,
    };
    if let Some(key) = p.dropout {
        key.check(op)?;
        if p.dropout_state.is_none() {
            return Err(Error::shape(
                op,
                "attention dropout needs FlashParams::dropout_state (the DropoutState buffer)"
                    .to_string(),
            ));
        }
        u.flags |= FLAG_DROPOUT;
        u.threshold = key.threshold();
        u.layer = key.layer;
        u.drop_scale = key.scale();
    }
    Ok(u)
}
