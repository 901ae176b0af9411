//! When a probe runs: first once the run has submitted a given step, then every `every`
//! steps, and (for probes of a run with a known end) the last one at the run's final step.

/// The step count at which a probe is next due.
pub struct Schedule {
    next_step: u64,
}

impl Schedule {
    pub fn first_at(step: u64) -> Self {
        Self { next_step: step }
    }

    /// Due once `submitted` steps reach the next due step.
    pub fn is_due(&self, submitted: u64) -> bool {
        submitted >= self.next_step
    }

    /// The probe was taken at `submitted`: the next is due `every` (at least 1) steps later,
    /// no later than `last`, and none after `last` itself.
    pub fn taken(&mut self, submitted: u64, every: u64, last: Option<u64>) {
        let next = submitted.saturating_add(every.max(1));
        self.next_step = match last {
            Some(last) if submitted >= last => u64::MAX,
            Some(last) => next.min(last),
            None => next,
        };
    }

    /// No probe is due any more (the one at the run's last step was taken).
    pub fn finished(&self) -> bool {
        self.next_step == u64::MAX
    }
}
