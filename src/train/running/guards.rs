//! What stops a run, or refuses to start one, beside the settings' ranges: a GradScaler
//! that only skips ([`SkipWatch`]), and a checkpoint whose counters disagree
//! ([`check_resume_progress`]).

use crate::amp::policy::Precision;
use crate::data::Loader;
use crate::error::{Error, Result};
use crate::train::checkpoint::Checkpoint;
use crate::train::settings::MIN_SCALE;
use crate::train::stats::StepStats;

/// The hint a stuck GradScaler's error ends with (the CLI names its flags instead).
pub const SKIPPING_HINT: &str = "check the data for inf/NaN, or find the layer that overflows \
                                 (count numerics every step) and keep it in f32 (a skipped-step \
                                 limit of 0 never stops)";

/// The skipped steps reported so far: in a row, and in all.
#[derive(Clone, Copy, Debug, Default)]
pub(in crate::train) struct SkipWatch {
    in_a_row: u64,
    total: u64,
}

impl SkipWatch {
    /// Count `stats` (the next step reported, of a run with a GradScaler). Why the run
    /// must stop, when the GradScaler keeps skipping: `max` steps in a row (0: never), or a
    /// scale fallen below [`MIN_SCALE`] from a start above it. Its weights are intact (a
    /// skipped step changes none), but it would never train again.
    pub(in crate::train) fn observe(
        &mut self,
        stats: &StepStats,
        max: u64,
        init_scale: f32,
        precision: Precision,
    ) -> Option<String> {
        self.in_a_row = if stats.skipped { self.in_a_row + 1 } else { 0 };
        self.total += stats.skipped as u64;
        if max == 0 {
            return None;
        }
        let cause = if self.in_a_row >= max {
            format!(
                "the GradScaler skipped {} steps in a row (scale now {:e})",
                self.in_a_row, stats.scale_after
            )
        } else if stats.scale_after < MIN_SCALE && stats.scale_after < init_scale {
            format!(
                "the GradScaler's scale fell to {:e}, below 2^-24, after {} skipped steps",
                stats.scale_after, self.total
            )
        } else {
            return None;
        };
        let what = if stats.loss.is_finite() {
            "their gradients held inf/NaN whatever the scale"
        } else {
            "their loss itself was inf/NaN (non-finite inputs, or a forward that overflows)"
        };
        Some(format!(
            "{cause} at step {} under {precision}: {what}; skipped steps changed no weight; \
             {SKIPPING_HINT}",
            stats.step
        ))
    }
}

/// A checkpoint's counters must agree with each other and with the data this run cuts:
/// an edited or inconsistent file is refused, naming the metadata key, instead of resuming
/// from a position that does not exist or with moments that silently restart.
pub(in crate::train) fn check_resume_progress(ck: &Checkpoint, loader: &Loader) -> Result<()> {
    let p = ck.progress;
    let refuse = |m: String| Err(Error::Checkpoint(format!("resume: {m}")));
    let batches = loader.num_batches() as u64;
    if p.batch_in_epoch > batches {
        return refuse(format!(
            "metadata `progress` says batch {} of the epoch, but the epoch has {batches} \
             batches: the file was edited or written for other data",
            p.batch_in_epoch
        ));
    }
    match &ck.optimizer {
        None if p.step > 0 => refuse(format!(
            "metadata `optimizer` is missing, but `progress` says {} steps were taken: \
             resuming would restart the optimizer's moments from zero",
            p.step
        )),
        Some(o) if u64::from(o.step) > p.step => refuse(format!(
            "metadata `optimizer` has taken {} steps, but `progress` says {}: the two \
             disagree (was `progress` removed or edited?)",
            o.step, p.step
        )),
        _ => Ok(()),
    }
}
