//! What the page says about training after each tick, outside the canvas: the autorun's
//! progress line and published result, a failed run, and a stall (no step finishing for
//! [`STALL_SECS`] seconds while running, [`SAMPLE_STALL_SECS`] while a text sample is on its
//! way).

use super::super::autorun::{AutorunPublisher, AutorunUpdate};
use super::super::dom;
use super::super::session::{Session, Status};

/// Seconds without a finished step, while running, before the page says training stalled.
pub const STALL_SECS: f64 = 30.0;
/// The same while a GPT's text sample is on its way: one submission of a forward per
/// character, which a CPU adapter (SwiftShader) takes minutes over.
pub const SAMPLE_STALL_SECS: f64 = 600.0;

/// An autorun of `model=hf:` before a folder is picked.
const WAITING_FOR_FOLDER: &str = "autorun: waiting for a Hugging Face folder (model=hf:): pick \
                                  one with the folder input above";

/// How the stall notice starts (it is cleared when steps finish again).
const STALL_NOTICE: &str = "No training step has finished";

/// The page's lines and what they last said.
#[derive(Default)]
pub struct PageReport {
    /// During an autorun, its publisher.
    pub autorun: Option<AutorunPublisher>,
    /// (steps finished, when that count last changed), for the stall notice.
    progress: (usize, f64),
    stalled: bool,
    failure_shown: bool,
}

impl PageReport {
    pub fn new(autorun: bool, now: f64) -> Self {
        Self {
            autorun: autorun.then(AutorunPublisher::default),
            progress: (0, now),
            ..Self::default()
        }
    }

    /// Update the page's lines after a tick at `now` (seconds). `waiting_for_folder`: the
    /// autorun's model is a picked folder's (`model=hf:`) and none has been picked yet.
    pub fn update(&mut self, session: &Session, waiting_for_folder: bool, now: f64) {
        let hidden = dom::document_hidden();
        if let Some(publisher) = self.autorun.as_mut() {
            match publisher.update(session) {
                Some(AutorunUpdate::Progress(_)) if waiting_for_folder => {
                    dom::set_text("status", WAITING_FOR_FOLDER);
                }
                Some(AutorunUpdate::Progress(mut line)) => {
                    if hidden {
                        line.push_str(
                            " (tab hidden: training goes on at the browser's background timer rate)",
                        );
                    }
                    dom::set_text("status", &line);
                }
                Some(AutorunUpdate::Finished { status, result }) => {
                    dom::set_text("status", &status);
                    dom::publish(&result.to_json());
                }
                None => {}
            }
        }
        if let Status::Failed(why) = session.status()
            && !self.failure_shown
        {
            self.failure_shown = true;
            dom::notice(&format!("Training stopped: {why}"));
        }
        let steps: usize = session.runs().iter().map(|r| r.history.len()).sum();
        let sampling = session.sampling();
        let limit = if sampling {
            SAMPLE_STALL_SECS
        } else {
            STALL_SECS
        };
        if steps != self.progress.0 || *session.status() != Status::Running {
            self.progress = (steps, now);
            if self.stalled {
                self.stalled = false;
                dom::clear_notice(STALL_NOTICE);
            }
        } else if !self.stalled && now - self.progress.1 > limit {
            self.stalled = true;
            dom::notice(&format!(
                "{STALL_NOTICE} for {limit:.0} s: the GPU has not returned results ({steps} \
                 steps so far{}{}). The WebGPU device may be stalled or lost; reload the page \
                 to start over.",
                if sampling {
                    ", a text sample on its way"
                } else {
                    ""
                },
                if hidden { "; this tab is hidden" } else { "" }
            ));
        }
    }
}
