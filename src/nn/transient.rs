//! Activations no backward keeps share buffers. A layer's output that only forward kernels
//! read (a LayerNorm's f32 output under autocast, read by the cast after it; a projection's
//! output, read by the dropout after it; a dropout's output, read by the residual add) is
//! dead once its last reader has run, so a few buffers can hold all of them in turn.
//!
//! Which activations those are, and when each is first and last used, comes from a
//! measuring plan of the same network on a dry twin of the context
//! ([`crate::gpu::GpuContext::dry_twin`]: nothing allocated): every activation in a buffer of
//! its own, then, once the forward is planned, an activation whose buffer is referenced by
//! nothing but forward kernels (not by the tape the backward replays, nor as the network's
//! output) is transient; its interval is the first and last forward kernel that binds it.
//! Transient activations then go to slots greedily in order of first use: a slot is free
//! for an activation once its last occupant's last kernel came strictly before the
//! activation's first. Planning is deterministic, so the real plan asks for the same
//! activations in the same order; one that does not match gets a buffer of its own.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::tensor::{Storage, Tensor};

/// What the forward does with the activations it is asked for.
pub(super) enum Activations {
    /// Each in a buffer of its own, remembered for [`Activations::measure`].
    Record(Vec<Requested>),
    /// Transient ones in the slots of a [`SharingPlan`].
    Share {
        plan: SharingPlan,
        next: usize,
        slots: Vec<Option<Arc<GpuBuffer>>>,
    },
    /// Each in a buffer of its own (the measuring plan of a dry twin's own plan).
    Own,
}

/// One activation the forward asked for, in order.
pub(super) struct Requested {
    label: String,
    bytes: u64,
    buffer: Weak<GpuBuffer>,
}

/// The outcome of a measuring plan.
pub(super) struct SharingPlan {
    /// The (label, bytes) of each activation asked for, in order, and its slot if transient.
    requests: Vec<(String, u64, Option<usize>)>,
    /// Bytes of each slot: its largest occupant.
    slot_bytes: Vec<u64>,
}

/// The label of the buffers transient activations share.
pub const SHARED_LABEL: &str = "activation (transient, shared)";

impl Activations {
    /// A `[shape]` activation in `storage` labelled `label`.
    pub(super) fn take(
        &mut self,
        ctx: &GpuContext,
        label: &str,
        shape: &[usize],
        storage: Storage,
    ) -> Tensor {
        let bytes = Tensor::buffer_bytes(shape, storage);
        match self {
            Activations::Record(requests) => {
                let t = Tensor::zeros_labelled(ctx, label, shape, storage);
                requests.push(Requested {
                    label: label.to_string(),
                    bytes,
                    buffer: Arc::downgrade(t.buffer()),
                });
                t
            }
            Activations::Share { plan, next, slots } => {
                let request = plan.requests.get(*next);
                *next += 1;
                match request {
                    Some((l, b, Some(slot))) if l == label && *b == bytes => {
                        let buffer = slots[*slot].get_or_insert_with(|| {
                            ctx.alloc_storage(SHARED_LABEL, plan.slot_bytes[*slot])
                        });
                        Tensor::view(ctx, buffer.clone(), 0, shape, storage)
                            .expect("a slot holds its largest occupant")
                    }
                    _ => Tensor::zeros_labelled(ctx, label, shape, storage),
                }
            }
            Activations::Own => Tensor::zeros_labelled(ctx, label, shape, storage),
        }
    }

    /// After a recording forward: which activations are transient and which slot each
    /// takes. `forward` are the forward's kernels; everything else that still holds an
    /// activation (the tape, the network's output) keeps it.
    pub(super) fn measure(self, forward: &[Kernel]) -> Option<SharingPlan> {
        let Activations::Record(requested) = self else {
            return None;
        };
        // Per buffer the forward binds: (bindings, first kernel, last kernel), in one walk
        // over the kernels (a walk per activation was quadratic in the layer count).
        let mut bound: HashMap<*const GpuBuffer, (usize, usize, usize)> = HashMap::new();
        for (k, kernel) in forward.iter().enumerate() {
            for b in kernel.buffers() {
                let entry = bound.entry(Arc::as_ptr(b)).or_insert((0, k, k));
                entry.0 += 1;
                entry.2 = k;
            }
        }
        // (index, first kernel, last kernel) of each transient activation.
        let mut transient = Vec::new();
        for (i, r) in requested.iter().enumerate() {
            let Some(buffer) = r.buffer.upgrade() else {
                continue; // nothing binds it: nothing to share
            };
            let Some(&(uses, first, last)) = bound.get(&Arc::as_ptr(&buffer)) else {
                continue;
            };
            // Our upgrade holds one reference; the forward's kernels `uses`.
            if Arc::strong_count(&buffer) == uses + 1 {
                transient.push((i, first, last));
            }
        }
        transient.sort_by_key(|&(_, first, _)| first);
        let mut requests: Vec<(String, u64, Option<usize>)> = requested
            .iter()
            .map(|r| (r.label.clone(), r.bytes, None))
            .collect();
        // Each slot's size and the last kernel of its latest occupant.
        let mut slots: Vec<(u64, usize)> = Vec::new();
        for (i, first, last) in transient {
            let bytes = requests[i].1;
            // Best fit among the free slots: the smallest that holds it, else the largest
            // (which grows to hold it), else a new slot.
            let free = || slots.iter().enumerate().filter(|(_, s)| s.1 < first);
            let fits = free()
                .filter(|(_, s)| s.0 >= bytes)
                .min_by_key(|(_, s)| s.0);
            let slot = match fits.or_else(|| free().max_by_key(|(_, s)| s.0)) {
                Some((k, _)) => k,
                None => {
                    slots.push((0, 0));
                    slots.len() - 1
                }
            };
            slots[slot] = (slots[slot].0.max(bytes), last);
            requests[i].2 = Some(slot);
        }
        Some(SharingPlan {
            requests,
            slot_bytes: slots.iter().map(|s| s.0).collect(),
        })
    }
}

impl Activations {
    /// The shared buffers made so far: free once the forward is done.
    pub(super) fn into_shared_buffers(self) -> Vec<Arc<GpuBuffer>> {
        match self {
            Activations::Share { slots, .. } => slots.into_iter().flatten().collect(),
            _ => Vec::new(),
        }
    }
}

impl SharingPlan {
    /// The forward's activations with transient ones in shared slots.
    pub(super) fn into_activations(self) -> Activations {
        let slots = vec![None; self.slot_bytes.len()];
        Activations::Share {
            plan: self,
            next: 0,
            slots,
        }
    }
}
