//! The counting passes of a trainer: one small counts buffer, and per planned network the
//! passes over its probe points, which a counted step interleaves into its forward and
//! backward where their tensors are complete. A tensor stays countable until a later kernel
//! of its list may write its bytes ([`Kernel::may_write`]), so one pass counts every
//! tensor that is complete and intact at one point (up to [`MAX_SEGMENTS`] in
//! [`MAX_BUFFERS`] buffers): on a CPU adapter each dispatch is a full stop, and gpt-tiny's
//! 61 tensors took 61 of them.

use std::sync::Arc;

use super::{LayerName, StepNumerics, counts_step, record_index};
use crate::amp::policy::Policy;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::probes::{ProbePoint, ProbeTensor};
use crate::nn::{ModelSpec, Network};
use crate::ops::numerics::{MAX_BUFFERS, MAX_SEGMENTS, RECORD_WORDS, buffers_of, count_all};
use crate::tensor::Tensor;
use crate::tensor::{DType, Storage};
use crate::train::config::StepConfig;

/// Which kernel list of a step the passes go into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::train) enum Pass {
    Forward,
    Backward,
}

/// The passes of one planned network: (kernels before it, pass), in order.
struct NetPasses {
    batch: usize,
    forward: Vec<(usize, Kernel)>,
    /// The flag: a pass over weight gradients, which runs on a step's last micro-batch only
    /// (a gradient accumulates over micro-batches; counted once, complete).
    backward: Vec<(usize, Kernel, bool)>,
}

/// A tensor to count: its record, and the points of its kernel list where it is complete
/// and intact, `after..=until`.
struct Pending {
    record: usize,
    values: Tensor,
    after: usize,
    until: usize,
    weight: bool,
}

/// A trainer's counting passes. See the module docs.
pub(in crate::train) struct NumericsPasses {
    every: u64,
    low: DType,
    histograms: bool,
    /// Each tensor in a pass of its own, right where it is complete (the reference plan).
    one_each: bool,
    grads_rounded: bool,
    layers: Arc<Vec<LayerName>>,
    counts: Arc<GpuBuffer>,
    /// (layer, tensor, stored dtype) of each record, in the order a step completes them
    /// (from the first network planned: every batch size plans the same layers).
    order: Vec<(usize, ProbeTensor, DType)>,
    /// (record, the record it equals): a tensor already counted at the same point (a layer
    /// made of layers whose output is its last layer's), copied when decoded, not counted
    /// again.
    aliases: Vec<(usize, usize)>,
    nets: Vec<NetPasses>,
}

/// A tensor at a point of a kernel list: buffer, byte offset, elements, storage, and the
/// kernels before it. Two probes with the same one read the same values.
type SameTensor = (usize, u64, usize, Storage, usize);

impl NumericsPasses {
    /// The passes of a trainer of `spec` under `policy` and `config` (`None`: numerics off):
    /// one record per row of its precision map, the loss last.
    pub(in crate::train) fn of_model(
        ctx: &GpuContext,
        spec: &ModelSpec,
        policy: &Policy,
        config: &StepConfig,
    ) -> Result<Option<Self>> {
        let Some(every) = config.numerics else {
            return Ok(None);
        };
        let rows = crate::nn::precision_map(spec, policy, config.loss);
        let layers = rows.iter().map(|r| LayerName {
            index: r.index,
            name: r.name.clone(),
            op: r.op.name.to_string(),
            loss: r.index + 1 == rows.len(),
        });
        let rounded = !config.precision.master_weights();
        let what = (every, config.numerics_histograms);
        let low = config.precision.low_dtype();
        let mut passes = Self::new(ctx, what, low, rounded, layers.collect())?;
        passes.one_each = config.numerics_one_pass_each;
        Ok(Some(passes))
    }

    /// Passes counting every `every`-th step against `low`'s range, for a model whose
    /// precision map is `layers` (the loss last).
    pub(in crate::train) fn new(
        ctx: &GpuContext,
        (every, histograms): (u64, bool),
        low: DType,
        grads_rounded: bool,
        layers: Vec<LayerName>,
    ) -> Result<Self> {
        if every == 0 {
            return Err(Error::InvalidArgument(
                "numerics: every:N needs N of 1 or more".into(),
            ));
        }
        let records = 3 * layers.len().max(1);
        let counts = ctx.alloc_storage("numerics.counts", 4 * (records * RECORD_WORDS) as u64);
        Ok(Self {
            every,
            // An f32 run is counted against f16's range: what autocast would meet.
            low: if low == DType::F32 { DType::F16 } else { low },
            histograms,
            one_each: false,
            grads_rounded,
            layers: Arc::new(layers),
            counts,
            order: Vec::new(),
            aliases: Vec::new(),
            nets: Vec::new(),
        })
    }

    pub(in crate::train) fn every(&self) -> u64 {
        self.every
    }

    /// Whether optimizer step `step` (1-based over the run) is counted.
    pub(in crate::train) fn counts(&self, step: u64) -> bool {
        counts_step(self.every, step)
    }

    pub(in crate::train) fn buffer(&self) -> &Arc<GpuBuffer> {
        &self.counts
    }

    /// Make the passes of `net` (once per batch size).
    pub(in crate::train) fn plan(&mut self, ctx: &GpuContext, net: &Network) -> Result<()> {
        if self.nets.iter().any(|n| n.batch == net.batch) {
            return Ok(());
        }
        let probes = net.probes();
        let mut order = Vec::new();
        let mut aliases = Vec::new();
        let mut pending = |p: &ProbePoint,
                           kernels: &[&Kernel],
                           seen: &mut Vec<(SameTensor, usize)>|
         -> Option<Pending> {
            let storage = p.values.storage();
            if storage == Storage::U32 || p.values.numel() == 0 || p.layer >= self.layers.len() {
                return None;
            }
            let key = (p.layer, p.tensor, storage.dtype());
            if !order
                .iter()
                .any(|o: &(usize, ProbeTensor, DType)| (o.0, o.1) == (key.0, key.1))
            {
                order.push(key);
            }
            let record = record_index(p.layer, p.tensor);
            let v = &p.values;
            // A weight gradient's record adds several tensors (weight, bias): never an alias.
            if p.tensor != ProbeTensor::WeightGrad {
                let at = Arc::as_ptr(v.buffer()) as usize;
                let same = (at, v.byte_offset(), v.numel(), storage, p.after);
                if let Some(&(_, first)) = seen.iter().find(|(s, _)| *s == same) {
                    aliases.push((record, first));
                    return None;
                }
                seen.push((same, record));
            }
            let (offset, bytes) = (v.byte_offset(), v.binding_size());
            let until = match self.one_each {
                true => p.after,
                false => (p.after..kernels.len())
                    .find(|&k| kernels[k].may_write(v.buffer(), offset, bytes))
                    .unwrap_or(kernels.len()),
            };
            Some(Pending {
                record,
                values: v.clone(),
                after: p.after,
                until,
                weight: p.tensor == ProbeTensor::WeightGrad,
            })
        };
        let what = (self.low, self.histograms);
        let kernels: Vec<&Kernel> = net.forward_kernels().collect();
        let mut seen = Vec::new();
        let forward = probes
            .forward
            .iter()
            .filter_map(|p| pending(p, &kernels, &mut seen));
        let one_each = self.one_each;
        let forward = passes_over(ctx, forward.collect(), &self.counts, what, one_each)?
            .into_iter()
            .map(|(at, k, _)| (at, k))
            .collect();
        let kernels: Vec<&Kernel> = net.backward_kernels().collect();
        let mut seen = Vec::new();
        let backward = probes
            .backward
            .iter()
            .filter_map(|p| pending(p, &kernels, &mut seen));
        let backward = passes_over(ctx, backward.collect(), &self.counts, what, one_each)?;
        if self.order.is_empty() {
            self.order = order;
            self.aliases = aliases;
        }
        self.nets.push(NetPasses {
            batch: net.batch,
            forward,
            backward,
        });
        Ok(())
    }

    /// Counting passes a counted step of `batch` dispatches (on its last micro-batch): one
    /// per group of tensors complete at one point.
    pub(in crate::train) fn passes(&self, batch: usize) -> Option<usize> {
        let net = self.nets.iter().find(|n| n.batch == batch)?;
        Some(net.forward.len() + net.backward.len())
    }

    /// `kernels` (a step's forward or backward for `batch`) with the counting passes put
    /// in right where their tensors are complete; weight gradients only on the step's
    /// `last` micro-batch.
    pub(in crate::train) fn interleave<'a>(
        &'a self,
        batch: usize,
        pass: Pass,
        kernels: Vec<&'a Kernel>,
        last: bool,
    ) -> Vec<&'a Kernel> {
        let Some(net) = self.nets.iter().find(|n| n.batch == batch) else {
            return kernels;
        };
        let passes: Vec<(usize, &Kernel)> = match pass {
            Pass::Forward => net.forward.iter().map(|(at, k)| (*at, k)).collect(),
            Pass::Backward => net
                .backward
                .iter()
                .filter(|(_, _, weight)| last || !weight)
                .map(|(at, k, _)| (*at, k))
                .collect(),
        };
        let mut out = Vec::with_capacity(kernels.len() + passes.len());
        let mut next = passes.into_iter().peekable();
        for (i, k) in kernels.into_iter().enumerate() {
            while let Some((_, p)) = next.next_if(|(at, _)| *at <= i) {
                out.push(p);
            }
            out.push(k);
        }
        out.extend(next.map(|(_, p)| p));
        out
    }

    /// Decode the counts of a counted step read back.
    pub(in crate::train) fn decode(&self, words: &[u32]) -> Result<StepNumerics> {
        let mut words = words.to_vec();
        for &(to, from) in &self.aliases {
            let (to, from) = (to * RECORD_WORDS, from * RECORD_WORDS);
            if from + RECORD_WORDS <= words.len() && to + RECORD_WORDS <= words.len() {
                words.copy_within(from..from + RECORD_WORDS, to);
            }
        }
        StepNumerics::decode(
            self.low,
            &self.layers,
            &self.order,
            &words,
            self.grads_rounded,
        )
    }
}

/// The fewest passes that count every tensor of `pending` at a point where it is complete
/// and intact, as (point, pass, over weight gradients): the tensor that must be counted
/// soonest sets a point, every tensor already complete there joins it (within a pass's
/// limits, weight gradients apart: they count on a step's last micro-batch only), and so on.
/// In order of point. `one_each`: a pass per tensor, right where it is complete.
fn passes_over(
    ctx: &GpuContext,
    mut pending: Vec<Pending>,
    counts: &Arc<GpuBuffer>,
    what: (DType, bool),
    one_each: bool,
) -> Result<Vec<(usize, Kernel, bool)>> {
    pending.sort_by_key(|p| (p.until, p.after));
    let mut passes = Vec::new();
    while let Some(first) = pending.first() {
        let (at, weight) = (first.until, first.weight);
        let mut group: Vec<(&Tensor, usize)> = Vec::new();
        let mut taken = vec![false; pending.len()];
        for (i, p) in pending.iter().enumerate() {
            let full = group.len() == MAX_SEGMENTS || (one_each && !group.is_empty());
            if p.after > at || p.weight != weight || full {
                continue;
            }
            let with = group.iter().map(|(v, _)| *v).chain([&p.values]);
            if buffers_of(with).len() <= MAX_BUFFERS {
                group.push((&p.values, p.record));
                taken[i] = true;
            }
        }
        passes.push((at, count_all(ctx, &group, counts, what)?, weight));
        let mut taken = taken.into_iter();
        pending.retain(|_| !taken.next().unwrap_or(false));
    }
    passes.sort_by_key(|(at, _, _)| *at);
    Ok(passes)
}
