//! Buffers: layers' persistent tensors that are not parameters (PyTorch's
//! `register_buffer`: BatchNorm's running statistics and `num_batches_tracked`, RoPE's
//! tables). Planned once with the model, in one flat GPU buffer of u32 words (an f32 is one
//! word, an int64 two, low first), kept twice:
//!
//! - **committed**: what evaluation reads, checkpoints save and MPI rank 0 broadcasts;
//! - **working**: what a training step's forwards read and update (each micro-batch's on the
//!   one before's).
//!
//! The step's last kernel of its optimizer phase commits the working copy, or, when the
//! GradScaler found inf/NaN and skips the step, copies the committed one back
//! (`ops::buffers::commit`): a skipped step leaves every buffer as it was (PyTorch's
//! BatchNorm updates its running statistics even then: pytorch#88474). The optimizer, weight
//! decay, clipping, the low-precision cast and the parameter count never see a buffer.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::ops::buffers::{self, OnSkippedStep};
use crate::tensor::{Storage, Tensor};

/// The dtype a buffer is stored and saved in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferDType {
    F32,
    /// PyTorch's `torch.int64` (`num_batches_tracked`): two u32 words on the GPU, low first.
    I64,
}

impl BufferDType {
    /// u32 words per element.
    pub fn words(self) -> usize {
        match self {
            BufferDType::F32 => 1,
            BufferDType::I64 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BufferDType::F32 => "float32",
            BufferDType::I64 => "int64",
        }
    }
}

/// A buffer of a layer: name relative to the layer, shape, dtype and initial values (every
/// element `init`: zeros, ones; or a table computed on the host), and whether checkpoints
/// save it (PyTorch's `persistent`).
#[derive(Clone, Debug, PartialEq)]
pub struct BufferDef {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: BufferDType,
    pub init: f64,
    /// f32 initial values, one per element, instead of `init` everywhere.
    pub table: Option<Arc<[f32]>>,
    /// Saved in checkpoints and read back by `--resume`; `false`: PyTorch's
    /// `register_buffer(..., persistent=False)` (RoPE's table, which transformers recomputes
    /// from the config), made from its definition whenever the model is built.
    pub persistent: bool,
}

impl BufferDef {
    pub fn new(name: &str, shape: Vec<usize>, dtype: BufferDType, init: f64) -> Self {
        Self {
            name: name.to_string(),
            shape,
            dtype,
            init,
            table: None,
            persistent: true,
        }
    }

    /// A non-persistent f32 buffer holding `values` (`shape`'s elements).
    pub fn table(name: &str, shape: Vec<usize>, values: Arc<[f32]>) -> Self {
        Self {
            table: Some(values),
            persistent: false,
            ..Self::new(name, shape, BufferDType::F32, 0.0)
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same buffer seen from a containing layer (`running_mean` under `bn1` is
    /// `bn1.running_mean`).
    pub fn under(self, prefix: &str) -> Self {
        Self {
            name: format!("{prefix}.{}", self.name),
            ..self
        }
    }
}

/// u32 words between layers' first buffers: 256 bytes, the largest storage offset alignment
/// WebGPU allows an adapter to ask for.
const ALIGN_WORDS: usize = 64;

/// One buffer's place in the flat words.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferEntry {
    pub name: String,
    pub shape: Vec<usize>,
    pub dtype: BufferDType,
    /// First u32 word.
    pub offset: usize,
    /// Saved in checkpoints ([`BufferDef::persistent`]).
    pub persistent: bool,
}

impl BufferEntry {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    fn words(&self) -> usize {
        self.numel() * self.dtype.words()
    }
}

/// A buffer's values as saved: in its own dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferValues {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl BufferValues {
    pub fn len(&self) -> usize {
        match self {
            BufferValues::F32(v) => v.len(),
            BufferValues::I64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> BufferDType {
        match self {
            BufferValues::F32(_) => BufferDType::F32,
            BufferValues::I64(_) => BufferDType::I64,
        }
    }

    /// `n` elements of `init` in `dtype`.
    pub fn filled(dtype: BufferDType, n: usize, init: f64) -> Self {
        match dtype {
            BufferDType::F32 => BufferValues::F32(vec![init as f32; n]),
            BufferDType::I64 => BufferValues::I64(vec![init as i64; n]),
        }
    }

    /// A buffer's values as its definition makes them.
    pub fn initial(d: &BufferDef) -> Self {
        match &d.table {
            Some(t) => BufferValues::F32(t.to_vec()),
            None => Self::filled(d.dtype, d.numel(), d.init),
        }
    }

    /// The u32 words of the values (an int64 as two, low first).
    pub fn words(&self) -> Vec<u32> {
        match self {
            BufferValues::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
            BufferValues::I64(v) => v
                .iter()
                .flat_map(|x| [*x as u64 as u32, (*x as u64 >> 32) as u32])
                .collect(),
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn from_words(dtype: BufferDType, words: &[u32]) -> Self {
        match dtype {
            BufferDType::F32 => {
                BufferValues::F32(words.iter().map(|w| f32::from_bits(*w)).collect())
            }
            BufferDType::I64 => BufferValues::I64(
                words
                    .chunks_exact(2)
                    .map(|w| (w[0] as u64 | (w[1] as u64) << 32) as i64)
                    .collect(),
            ),
        }
    }
}

/// The model's buffers on the GPU: both copies, or nothing for a model without buffers.
pub struct BufferStore {
    pub entries: Vec<BufferEntry>,
    /// u32 words of each copy.
    pub words: usize,
    copies: Option<(Arc<GpuBuffer>, Arc<GpuBuffer>)>,
}

/// Which copy a view is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copy {
    /// What evaluation reads (and the step's commit writes).
    Committed,
    /// What a training step's forwards read and write.
    Working,
}

impl BufferStore {
    /// No buffers.
    pub fn none() -> Self {
        Self {
            entries: Vec::new(),
            words: 0,
            copies: None,
        }
    }

    /// The buffers `defs` (full names) laid out and set to their initial values.
    pub fn new(ctx: &GpuContext, defs: &[BufferDef]) -> Result<Self> {
        let mut entries = Vec::with_capacity(defs.len());
        let mut words: usize = 0;
        let mut previous_layer = None;
        for d in defs {
            // A layer's buffers lie together, in the order it lists them (BatchNorm's kernels
            // read `[mean | var | count]` from one offset); each layer's first starts where a
            // view may bind it (RoPE's table): WebGPU's storage offsets are multiples of at
            // most 256 bytes.
            let layer = d.name.rsplit_once('.').map(|(layer, _)| layer);
            if previous_layer != Some(layer) {
                words = words.next_multiple_of(ALIGN_WORDS);
            }
            previous_layer = Some(layer);
            let entry = BufferEntry {
                name: d.name.clone(),
                shape: d.shape.clone(),
                dtype: d.dtype,
                offset: words,
                persistent: d.persistent,
            };
            words += entry.words();
            entries.push(entry);
        }
        let copies = (words > 0).then(|| {
            let bytes = 4 * words as u64;
            (
                ctx.alloc_storage("buffers.committed", bytes),
                ctx.alloc_storage("buffers.working", bytes),
            )
        });
        let store = Self {
            entries,
            words,
            copies,
        };
        let init: Vec<(String, BufferValues)> = defs
            .iter()
            .map(|d| (d.name.clone(), BufferValues::initial(d)))
            .collect();
        store.upload(ctx, &init)?;
        Ok(store)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn entry(&self, name: &str) -> Result<&BufferEntry> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| Error::InvalidArgument(format!("no buffer `{name}`")))
    }

    /// The raw words of one copy (none without buffers).
    pub fn raw(&self, copy: Copy) -> Option<&Arc<GpuBuffer>> {
        self.copies.as_ref().map(|(c, w)| match copy {
            Copy::Committed => c,
            Copy::Working => w,
        })
    }

    /// A view of buffer `name` in `copy`: f32 `[shape]`, or an int64 as u32 words
    /// `[2 · numel]`.
    pub fn view(&self, ctx: &GpuContext, name: &str, copy: Copy) -> Result<Tensor> {
        let e = self.entry(name)?;
        let buffer = self.raw(copy).expect("a store with an entry has copies");
        let (shape, storage) = match e.dtype {
            BufferDType::F32 => (e.shape.clone(), Storage::F32),
            BufferDType::I64 => (vec![2 * e.numel()], Storage::U32),
        };
        Tensor::view(ctx, buffer.clone(), 4 * e.offset as u64, &shape, storage)
    }

    /// Where buffer `name` lies in `copy`: the copy's raw words and its first word (for
    /// kernels that index the store themselves, at offsets views could not bind).
    pub fn location(&self, name: &str, copy: Copy) -> Result<(Arc<GpuBuffer>, usize)> {
        let e = self.entry(name)?;
        let buffer = self.raw(copy).expect("a store with an entry has copies");
        Ok((buffer.clone(), e.offset))
    }

    /// Write named values into both copies (queued, no wait); every buffer must be given,
    /// each in its dtype and size.
    pub fn upload(&self, ctx: &GpuContext, values: &[(String, BufferValues)]) -> Result<()> {
        let Some((committed, working)) = &self.copies else {
            return Ok(());
        };
        let mut words = vec![0u32; self.words];
        for e in &self.entries {
            let (_, v) = values
                .iter()
                .find(|(n, _)| *n == e.name)
                .ok_or_else(|| Error::InvalidArgument(format!("missing buffer `{}`", e.name)))?;
            if v.dtype() != e.dtype || v.len() != e.numel() {
                return Err(Error::InvalidArgument(format!(
                    "buffer `{}` is {} of {} values, the model's is {} {:?}",
                    e.name,
                    v.dtype().name(),
                    v.len(),
                    e.dtype.name(),
                    e.shape
                )));
            }
            words[e.offset..e.offset + e.words()].copy_from_slice(&v.words());
        }
        if !ctx.is_dry() {
            for b in [committed, working] {
                ctx.write_buffer(b, 0, bytemuck::cast_slice(&words));
            }
        }
        Ok(())
    }

    /// Write every buffer's words, in the store's order, into both copies (MPI rank 0's,
    /// broadcast).
    pub fn upload_words(&self, ctx: &GpuContext, words: &[u32]) -> Result<()> {
        let Some((committed, working)) = &self.copies else {
            return Ok(());
        };
        if words.len() != self.words {
            return Err(Error::InvalidArgument(format!(
                "{} buffer words given, the model has {}",
                words.len(),
                self.words
            )));
        }
        for b in [committed, working] {
            ctx.write_buffer(b, 0, bytemuck::cast_slice(words));
        }
        Ok(())
    }

    /// The committed values by name (native; checkpoints, tests).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn download(&self, ctx: &GpuContext) -> Result<Vec<(String, BufferValues)>> {
        let Some((committed, _)) = &self.copies else {
            return Ok(Vec::new());
        };
        let bytes = ctx.read_bytes(committed, 0, 4 * self.words as u64)?;
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        Ok(self
            .entries
            .iter()
            .map(|e| {
                let w = &words[e.offset..e.offset + e.words()];
                (e.name.clone(), BufferValues::from_words(e.dtype, w))
            })
            .collect())
    }

    /// The step's commit of every buffer (a rollback on a skipped step, unless `on_skip`
    /// asks for PyTorch's behaviour), reading found-inf from the GradScaler's
    /// `scaler_state`; none without buffers.
    pub fn commit_kernel(
        &self,
        ctx: &GpuContext,
        scaler_state: &Arc<GpuBuffer>,
        on_skip: OnSkippedStep,
    ) -> Result<Option<Kernel>> {
        self.copies
            .as_ref()
            .map(|(c, w)| buffers::commit(ctx, scaler_state, (c, w), self.words, on_skip))
            .transpose()
    }
}
