//! Flat parameter storage: every parameter of a model lives in one f32 buffer (master
//! weights), its gradient in one f32 buffer, and its low-precision copy in one buffer of the
//! compute dtype, each tensor at the same element offset. One dispatch then updates, unscales,
//! clips or casts all parameters at once (multi-tensor apply).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext};
use crate::nn::buffers::BufferStore;
use crate::tensor::{DType, Storage, Tensor};

/// How a parameter starts out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// U(-bound, bound): PyTorch's default for Linear and Conv2d (kaiming_uniform_ with
    /// a = √5 for weights, 1/sqrt(fan_in) for biases; see [`init_bound`]).
    Uniform {
        bound: f32,
    },
    /// N(0, std²): nanoGPT's init for Linear and Embedding weights.
    Normal {
        std: f32,
    },
    Zeros,
    Ones,
}

/// A parameter of a layer: name relative to the layer, shape, initialisation.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamDef {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl ParamDef {
    pub fn new(name: &str, shape: Vec<usize>, init: Init) -> Self {
        Self {
            name: name.to_string(),
            shape,
            init,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same parameter seen from a containing layer: `weight` under `ln_1` is
    /// `ln_1.weight`.
    pub fn under(self, prefix: &str) -> Self {
        Self {
            name: format!("{prefix}.{}", self.name),
            ..self
        }
    }
}

/// Where each named parameter sits in the flat buffers.
#[derive(Clone, Debug)]
pub struct ParamLayout {
    pub entries: Vec<ParamEntry>,
    /// Elements in each flat buffer, padding included.
    pub total: usize,
    /// Elements of the trainable prefix: every trainable parameter sits below it, every
    /// frozen one ([`crate::nn::frozen`]) at or above it, so unscale, clipping and the
    /// optimizer, one dispatch each over the prefix, never touch a frozen parameter and it
    /// has no optimizer moments. `total` when nothing is frozen.
    pub trainable: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParamEntry {
    pub name: String,
    pub shape: Vec<usize>,
    /// Element offset; a multiple of `align` so views bind at aligned byte offsets for every
    /// storage (f32 and 16-bit alike).
    pub offset: usize,
}

impl ParamEntry {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

impl ParamLayout {
    /// Lay out `(name, shape)` pairs in order, each at a multiple of `align` elements.
    pub fn new(params: &[(String, Vec<usize>)], align: usize) -> Self {
        Self::with_frozen(params, &[], align)
    }

    /// [`ParamLayout::new`] with the parameters named in `frozen` placed after all the
    /// others (the entries keep `params`' order, the `state_dict`'s).
    pub fn with_frozen(params: &[(String, Vec<usize>)], frozen: &[String], align: usize) -> Self {
        let mut offsets = vec![0; params.len()];
        let mut offset = 0;
        let mut prefix = 0;
        for frozen_pass in [false, true] {
            for (i, (name, shape)) in params.iter().enumerate() {
                if frozen.contains(name) == frozen_pass {
                    offsets[i] = offset;
                    let n: usize = shape.iter().product();
                    offset = (offset + n).next_multiple_of(align);
                }
            }
            if !frozen_pass {
                prefix = offset;
            }
        }
        let total = offset.max(align);
        let entries = params
            .iter()
            .zip(offsets)
            .map(|((name, shape), offset)| ParamEntry {
                name: name.clone(),
                shape: shape.clone(),
                offset,
            })
            .collect();
        Self {
            entries,
            total,
            trainable: if prefix == offset { total } else { prefix },
        }
    }

    /// Whether the parameter at `entry` trains (sits in the trainable prefix).
    pub fn trains(&self, entry: &ParamEntry) -> bool {
        entry.offset < self.trainable
    }

    /// Element alignment that keeps byte offsets aligned for 2-byte storages on `ctx`.
    pub fn element_alignment(ctx: &GpuContext) -> usize {
        (ctx.caps.min_storage_buffer_offset_alignment as usize / 2).max(2)
    }

    pub fn get(&self, name: &str) -> Option<&ParamEntry> {
        self.entries.iter().find(|e| e.name == name)
    }

    /// Scatter named values into one flat vector (zeros in the padding).
    pub fn flatten(&self, values: &[(String, Vec<f32>)]) -> Result<Vec<f32>> {
        let mut flat = vec![0.0; self.total];
        for e in &self.entries {
            let (_, v) = values
                .iter()
                .find(|(n, _)| *n == e.name)
                .ok_or_else(|| Error::InvalidArgument(format!("missing parameter `{}`", e.name)))?;
            if v.len() != e.numel() {
                return Err(Error::InvalidArgument(format!(
                    "parameter `{}` has {} values, expected {} for shape {:?}",
                    e.name,
                    v.len(),
                    e.numel(),
                    e.shape
                )));
            }
            flat[e.offset..e.offset + v.len()].copy_from_slice(v);
        }
        Ok(flat)
    }

    /// Split a flat vector into named values.
    pub fn unflatten(&self, flat: &[f32]) -> Vec<(String, Vec<f32>)> {
        self.entries
            .iter()
            .map(|e| {
                (
                    e.name.clone(),
                    flat[e.offset..e.offset + e.numel()].to_vec(),
                )
            })
            .collect()
    }
}

/// The flat buffers of one model: master weights, gradients, and the low-precision copy.
pub struct ParamStore {
    pub layout: ParamLayout,
    /// f32 master weights (in pure f16 mode they hold f16-representable values).
    pub master: Arc<GpuBuffer>,
    /// f32 gradients, accumulated by every backward kernel.
    pub grads: Arc<GpuBuffer>,
    /// The per-step cast of the master weights to the compute dtype (None in f32 mode).
    pub low: Option<(Arc<GpuBuffer>, Storage)>,
    /// Set while `low` may differ from a cast of `master` because the host wrote `master`
    /// ([`ParamStore::upload`]; set from the start): a trainer whose optimizer step writes
    /// `low` itself casts again before its next step reads it (`train/stepping/step.rs`). Write
    /// `master` through `upload`, not the buffer directly.
    low_stale: Arc<AtomicBool>,
    /// The layers' buffers: state that is not a parameter ([`crate::nn::buffers`]); none
    /// until [`ParamStore::with_buffers`].
    pub buffers: BufferStore,
}

impl ParamStore {
    pub fn new(ctx: &GpuContext, layout: ParamLayout, low: Option<DType>) -> Self {
        let bytes = 4 * layout.total as u64;
        let low = low.filter(|d| *d != DType::F32).map(|d| {
            let storage = ctx.storage_for(d);
            (
                ctx.alloc_storage("params.low", storage.bytes_for(layout.total)),
                storage,
            )
        });
        Self {
            master: ctx.alloc_storage("params.master", bytes),
            grads: ctx.alloc_storage("params.grad", bytes),
            low,
            layout,
            low_stale: Arc::new(AtomicBool::new(true)),
            buffers: BufferStore::none(),
        }
    }

    /// This store with the model's buffers beside the parameters.
    pub fn with_buffers(mut self, buffers: BufferStore) -> Self {
        self.buffers = buffers;
        self
    }

    fn view(
        &self,
        ctx: &GpuContext,
        buffer: &Arc<GpuBuffer>,
        storage: Storage,
        name: &str,
    ) -> Result<Tensor> {
        let e = self
            .layout
            .get(name)
            .ok_or_else(|| Error::InvalidArgument(format!("no parameter `{name}`")))?;
        Tensor::view(
            ctx,
            buffer.clone(),
            storage.bytes_for(e.offset),
            &e.shape,
            storage,
        )
    }

    /// f32 master view of a parameter.
    pub fn master_view(&self, ctx: &GpuContext, name: &str) -> Result<Tensor> {
        self.view(ctx, &self.master, Storage::F32, name)
    }

    /// f32 gradient view of a parameter.
    pub fn grad_view(&self, ctx: &GpuContext, name: &str) -> Result<Tensor> {
        self.view(ctx, &self.grads, Storage::F32, name)
    }

    /// View in the compute dtype: the low copy when there is one, else the master.
    pub fn compute_view(&self, ctx: &GpuContext, name: &str, dtype: DType) -> Result<Tensor> {
        match &self.low {
            Some((buf, storage)) if storage.dtype() == dtype => self.view(ctx, buf, *storage, name),
            _ if dtype == DType::F32 => self.master_view(ctx, name),
            _ => Err(Error::Unsupported(format!(
                "parameter `{name}` requested in {dtype} but the model keeps no {dtype} copy"
            ))),
        }
    }

    /// Whole flat buffers as 1-D tensors (for one-dispatch casts).
    pub fn master_flat(&self, ctx: &GpuContext) -> Result<Tensor> {
        Tensor::view(
            ctx,
            self.master.clone(),
            0,
            &[self.layout.total],
            Storage::F32,
        )
    }

    pub fn low_flat(&self, ctx: &GpuContext) -> Result<Option<Tensor>> {
        self.low_prefix(ctx, self.layout.total)
    }

    /// The low copy's first `n` elements as one tensor (the trainable prefix, which the
    /// optimizer's step writes).
    pub fn low_prefix(&self, ctx: &GpuContext, n: usize) -> Result<Option<Tensor>> {
        self.low
            .as_ref()
            .map(|(b, s)| Tensor::view(ctx, b.clone(), 0, &[n], *s))
            .transpose()
    }

    /// The flag set while `low` may be stale ([`ParamStore`]'s `low_stale`): whoever casts
    /// `master` into `low` clears it.
    pub fn low_staleness(&self) -> &Arc<AtomicBool> {
        &self.low_stale
    }

    /// Upload named values into the master buffer (queued, no wait); the compute copy is
    /// stale until cast again.
    /// (Nothing on a dry context: it backs no buffer.)
    pub fn upload(&self, ctx: &GpuContext, values: &[(String, Vec<f32>)]) -> Result<()> {
        if ctx.is_dry() {
            return Ok(());
        }
        let flat = self.layout.flatten(values)?;
        ctx.write_buffer(&self.master, 0, bytemuck::cast_slice(&flat));
        self.low_stale.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Read the master weights back by name (native; end of run, checkpoints, tests).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download(&self, ctx: &GpuContext) -> Result<Vec<(String, Vec<f32>)>> {
        let bytes = ctx.read_bytes(&self.master, 0, 4 * self.layout.total as u64)?;
        Ok(self.layout.unflatten(bytemuck::cast_slice(&bytes)))
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn download_grads(&self, ctx: &GpuContext) -> Result<Vec<(String, Vec<f32>)>> {
        let bytes = ctx.read_bytes(&self.grads, 0, 4 * self.layout.total as u64)?;
        Ok(self.layout.unflatten(bytemuck::cast_slice(&bytes)))
    }
}
