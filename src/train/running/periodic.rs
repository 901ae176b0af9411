//! When a run's periodic work is due: one schedule for the CLI's loop (`run_blocking.rs`:
//! loss estimates and checkpoints every N optimizer steps) and the app's probes (validation,
//! kernel profiles and text samples every N steps, and once more at the run's last step).

/// The step count at which periodic work is next due (`u64::MAX`: never again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Periodic {
    next_step: u64,
}

impl Periodic {
    /// First due once `step` optimizer steps are done.
    pub fn first_at(step: u64) -> Self {
        Self { next_step: step }
    }

    /// Due at every multiple of `every` (at least 1) after `done` steps (a resumed run keeps
    /// the multiples of an uninterrupted one).
    pub fn every(every: u64, done: u64) -> Self {
        let every = every.max(1);
        Self::first_at((done / every).saturating_add(1).saturating_mul(every))
    }

    /// Due once `steps` steps are done.
    pub fn is_due(&self, steps: u64) -> bool {
        steps >= self.next_step
    }

    /// Optimizer steps from `steps` until it is due (0 when it is).
    pub fn steps_until_due(&self, steps: u64) -> u64 {
        self.next_step.saturating_sub(steps)
    }

    /// The work was done at `steps`: the next is due `every` (at least 1) steps later, no
    /// later than `last`, and none after `last` itself.
    pub fn taken(&mut self, steps: u64, every: u64, last: Option<u64>) {
        let next = steps.saturating_add(every.max(1));
        self.next_step = match last {
            Some(last) if steps >= last => u64::MAX,
            Some(last) => next.min(last),
            None => next,
        };
    }

    /// Nothing is due any more (the work at the run's last step was done).
    pub fn finished(&self) -> bool {
        self.next_step == u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::Periodic;

    #[test]
    fn every_n_steps_is_due_at_the_multiples_after_a_resume_too() {
        let mut p = Periodic::every(5, 0);
        assert_eq!(
            (p.is_due(4), p.is_due(5), p.steps_until_due(3)),
            (false, true, 2)
        );
        p.taken(5, 5, None);
        assert_eq!((p.is_due(9), p.is_due(10)), (false, true));
        let resumed = Periodic::every(5, 7);
        assert_eq!((resumed.is_due(9), resumed.is_due(10)), (false, true));
        assert_eq!(Periodic::every(5, 10).steps_until_due(10), 5);
    }

    #[test]
    fn the_last_step_is_due_once_then_nothing() {
        let mut p = Periodic::first_at(3);
        p.taken(3, 50, Some(10));
        assert!(!p.is_due(9) && p.is_due(10));
        p.taken(10, 50, Some(10));
        assert!(p.finished() && !p.is_due(u64::MAX - 1));
        // An interval beyond any run is never due.
        assert!(!Periodic::every(u64::MAX, 3).is_due(1 << 53));
    }
}
