//! `bench step --numerics`: the step measured with and without the AMP doctor's counting
//! passes, alternating `--rounds` times.

use webgpu_amp::GpuContext;
use webgpu_amp::Result;
use webgpu_amp::amp::policy::Precision;

use super::{BenchStepArgs, StepBench, measure};

/// The step `without` measured again with the counting passes of `numerics`, alternating
/// with more measurements without them (`--rounds` each): the fastest with, and the fastest
/// ms/step without (a shared or busy machine only ever slows a measurement down).
pub(super) fn numerics_rounds(
    ctx: &GpuContext,
    args: &BenchStepArgs,
    model: &str,
    b: usize,
    p: Precision,
    without: &StepBench,
    numerics: Option<u64>,
) -> Result<(StepBench, (f64, Option<f64>))> {
    let scaler = without.scaler;
    let mut off = (without.ms_per_step, without.cpu_ms_per_step);
    let mut with: Option<StepBench> = None;
    let min = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    for round in 0..args.rounds() {
        let mut counted = measure(ctx, args, model, b, p, (scaler, numerics), false)?.0;
        if let Some(w) = &with {
            counted.cpu_ms_per_step = min(counted.cpu_ms_per_step, w.cpu_ms_per_step);
            counted.ms_per_step = counted.ms_per_step.min(w.ms_per_step);
        }
        with = Some(counted);
        if round + 1 < args.rounds() {
            let again = measure(ctx, args, model, b, p, (scaler, None), false)?.0;
            off = (
                off.0.min(again.ms_per_step),
                min(off.1, again.cpu_ms_per_step),
            );
        }
    }
    Ok((with.expect("at least one round"), off))
}
