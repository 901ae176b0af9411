//! The counting passes of a trainer: one small counts buffer, and per planned network the
//! passes for each probe point, which a counted step interleaves into its forward and
//! backward right where each tensor is complete.

use std::sync::Arc;

use super::{LayerName, StepNumerics, counts_step, record_index};
use crate::amp::policy::Policy;
use crate::error::{Error, Result};
use crate::gpu::{GpuBuffer, GpuContext, Kernel};
use crate::nn::probes::{ProbePoint, ProbeTensor};
use crate::nn::{ModelSpec, Network};
use crate::ops::numerics::{RECORD_WORDS, count};
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
    /// The flag: a weight gradient's pass, which runs on a step's last micro-batch only
    /// (the gradient accumulates over micro-batches; counted once, complete).
    backward: Vec<(usize, Kernel, bool)>,
}

/// A trainer's counting passes. See the module docs.
pub(in crate::train) struct NumericsPasses {
    every: u64,
    low: DType,
    histograms: bool,
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
        Self::new(ctx, what, low, rounded, layers.collect()).map(Some)
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
        let mut pass = |p: &ProbePoint,
                        seen: &mut Vec<(SameTensor, usize)>|
         -> Result<Option<Kernel>> {
            let storage = p.values.storage();
            if storage == Storage::U32 || p.values.numel() == 0 || p.layer >= self.layers.len() {
                return Ok(None);
            }
            let key = (p.layer, p.tensor, storage.dtype());
            if !order
                .iter()
                .any(|o: &(usize, ProbeTensor, DType)| (o.0, o.1) == (key.0, key.1))
            {
                order.push(key);
            }
            let record = record_index(p.layer, p.tensor);
            // A weight gradient's record adds several passes (weight, bias): never an alias.
            if p.tensor != ProbeTensor::WeightGrad {
                let v = &p.values;
                let at = Arc::as_ptr(v.buffer()) as usize;
                let same = (at, v.byte_offset(), v.numel(), storage, p.after);
                if let Some(&(_, first)) = seen.iter().find(|(s, _)| *s == same) {
                    aliases.push((record, first));
                    return Ok(None);
                }
                seen.push((same, record));
            }
            let what = (self.low, self.histograms);
            Ok(Some(count(ctx, &p.values, &self.counts, record, what)?))
        };
        let mut forward = Vec::new();
        let mut seen = Vec::new();
        for p in &probes.forward {
            if let Some(k) = pass(p, &mut seen)? {
                forward.push((p.after, k));
            }
        }
        let mut backward = Vec::new();
        let mut seen = Vec::new();
        for p in &probes.backward {
            if let Some(k) = pass(p, &mut seen)? {
                backward.push((p.after, k, p.tensor == ProbeTensor::WeightGrad));
            }
        }
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

    /// Counting passes a counted step of `batch` dispatches (on its last micro-batch).
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
