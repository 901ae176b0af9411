//! One batch of samples, in one pair of types from the data set to the GPU: a [`Batch`]
//! gathered from a [`Dataset`] keeps its values (reusing their allocations batch after
//! batch) and lends them out as a [`BatchInput`] and [`BatchTargets`], the pair the trainer,
//! evaluation and profiling take. A caller's own slices make the same pair
//! (`BatchInput::from(&features)`, `BatchTargets::Classes(&labels)`).

use super::{Dataset, Inputs, Labels, SampleIndex};
use crate::{Error, Result};

/// Inputs of one batch: f32 features (`size × sample_len`), or token ids (`size × T`,
/// written into the network's input buffer as raw u32 words); row-major.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BatchInput<'a> {
    Features(&'a [f32]),
    Tokens(&'a [u32]),
}

impl BatchInput<'_> {
    /// Values in the batch (f32 features or token ids).
    pub fn len(&self) -> usize {
        match self {
            BatchInput::Features(x) => x.len(),
            BatchInput::Tokens(ids) => ids.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Slices and vectors of features or token ids, as they are.
macro_rules! batch_input_from {
    ($($source:ty => $variant:ident),*) => {$(
        impl<'a> From<&'a $source> for BatchInput<'a> {
            fn from(x: &'a $source) -> Self {
                BatchInput::$variant(x)
            }
        }
    )*};
}
batch_input_from!([f32] => Features, Vec<f32> => Features, [u32] => Tokens, Vec<u32> => Tokens);

/// Targets of one batch: a class index per loss row (per sample, or per token of token
/// samples), or `size × dim` f32 values (regression), row-major.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BatchTargets<'a> {
    Classes(&'a [u32]),
    Values(&'a [f32]),
}

impl BatchTargets<'_> {
    /// Loss rows of a batch of `batch` samples: one per sample, or one per token of token
    /// samples (one class label each). Validation weighs each batch's mean loss by these.
    pub fn rows(&self, batch: usize) -> usize {
        match self {
            BatchTargets::Classes(labels) => labels.len(),
            BatchTargets::Values(_) => batch,
        }
    }
}

/// One batch gathered from a [`Dataset`] ([`Dataset::gather`], [`Dataset::gather_into`]):
/// its values, lent out by [`Batch::input`] and [`Batch::targets`].
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// Samples in the batch.
    pub size: usize,
    /// f32 features or token ids.
    inputs: Kept<f32, u32>,
    /// Class indices or f32 values.
    targets: Kept<u32, f32>,
}

/// The values of one side of a batch, of one of two element types; kept between batches so
/// the next gather reuses the allocation.
#[derive(Clone, Debug, PartialEq)]
enum Kept<A, B> {
    A(Vec<A>),
    B(Vec<B>),
}

impl<A, B> Kept<A, B> {
    /// The `A` vector, emptied, to refill: the one kept when it is an `A` (its allocation
    /// is reused), else a new one.
    fn take_a(&mut self) -> Vec<A> {
        match std::mem::replace(self, Kept::A(Vec::new())) {
            Kept::A(mut v) => {
                v.clear();
                v
            }
            Kept::B(_) => Vec::new(),
        }
    }

    /// The `B` vector, emptied, to refill (see [`Kept::take_a`]).
    fn take_b(&mut self) -> Vec<B> {
        match std::mem::replace(self, Kept::B(Vec::new())) {
            Kept::B(mut v) => {
                v.clear();
                v
            }
            Kept::A(_) => Vec::new(),
        }
    }
}

impl Batch {
    /// An empty batch of the kind a data set labelled `labels` gives, to reuse with
    /// [`Dataset::gather_into`].
    pub fn empty(labels: &Labels) -> Batch {
        let (inputs, targets) = match labels {
            Labels::Classes { .. } => (Kept::A(Vec::new()), Kept::A(Vec::new())),
            Labels::Targets { .. } => (Kept::A(Vec::new()), Kept::B(Vec::new())),
            Labels::Tokens { .. } => (Kept::B(Vec::new()), Kept::A(Vec::new())),
        };
        Batch {
            size: 0,
            inputs,
            targets,
        }
    }

    /// The batch's inputs.
    pub fn input(&self) -> BatchInput<'_> {
        match &self.inputs {
            Kept::A(features) => BatchInput::Features(features),
            Kept::B(ids) => BatchInput::Tokens(ids),
        }
    }

    /// The batch's targets.
    pub fn targets(&self) -> BatchTargets<'_> {
        match &self.targets {
            Kept::A(classes) => BatchTargets::Classes(classes),
            Kept::B(values) => BatchTargets::Values(values),
        }
    }

    /// Fill the batch with samples `indices` of `set`, in that order (the indices are in
    /// range: [`Dataset::gather_indices_into`] checks them).
    pub(super) fn fill<I: SampleIndex>(&mut self, set: &Dataset, indices: &[I]) {
        self.inputs = match &set.x {
            Inputs::Features(x) => {
                let mut out = self.inputs.take_a();
                extend_rows(&mut out, x, set.sample_len(), indices);
                Kept::A(out)
            }
            Inputs::Tokens { ids, .. } => {
                let mut out = self.inputs.take_b();
                ids.gather_into(indices, &mut out);
                Kept::B(out)
            }
        };
        self.targets = match &set.y {
            Labels::Classes { labels, .. } => {
                let mut out = self.targets.take_a();
                out.extend(indices.iter().map(|i| labels[i.index()]));
                Kept::A(out)
            }
            Labels::Targets { values, dim } => {
                let mut out = self.targets.take_b();
                extend_rows(&mut out, values, *dim, indices);
                Kept::B(out)
            }
            Labels::Tokens { targets, .. } => {
                let mut out = self.targets.take_a();
                targets.gather_into(indices, &mut out);
                Kept::A(out)
            }
        };
        self.size = indices.len();
    }
}

/// Append rows `indices` of `values` (rows of `width` values each, row-major) to `out`.
fn extend_rows<T: Copy, I: SampleIndex>(
    out: &mut Vec<T>,
    values: &[T],
    width: usize,
    indices: &[I],
) {
    out.reserve(indices.len() * width);
    for i in indices.iter().map(|i| i.index()) {
        out.extend_from_slice(&values[i * width..(i + 1) * width]);
    }
}

/// Gathering a batch from a data set (here, beside [`Batch`], so that the data set's file
/// does not name the batch that names it).
impl Dataset {
    /// Samples `indices` in that order, as one contiguous batch.
    pub fn gather(&self, indices: &[usize]) -> Result<Batch> {
        self.gather_indices(indices)
    }

    /// [`Dataset::gather`] for indices of any [`SampleIndex`] type (a loader's batch).
    pub fn gather_indices<I: SampleIndex>(&self, indices: &[I]) -> Result<Batch> {
        let mut batch = Batch::empty(&self.y);
        self.gather_indices_into(indices, &mut batch)?;
        Ok(batch)
    }

    /// Like [`Dataset::gather`], reusing `batch`'s buffers.
    pub fn gather_into(&self, indices: &[usize], batch: &mut Batch) -> Result<()> {
        self.gather_indices_into(indices, batch)
    }

    /// [`Dataset::gather_into`] for indices of any [`SampleIndex`] type (the loader's 32-bit
    /// batches).
    pub fn gather_indices_into<I: SampleIndex>(
        &self,
        indices: &[I],
        batch: &mut Batch,
    ) -> Result<()> {
        if let Some(&bad) = indices.iter().find(|&&i| i.index() >= self.n) {
            return Err(Error::data(format!(
                "{}: sample index {bad} is out of range (n = {})",
                self.name, self.n
            )));
        }
        batch.fill(self, indices);
        Ok(())
    }
}
