//! When the tuner decides and how far ahead it looks: [`Pace`] (see the
//! [tuner's docs](crate::scale_in#the-jobs-pace)).

use serde::{Deserialize, Serialize};

/// When decisions are due, and the horizon each one projects over. Externally tagged (not
/// `tag = "kind"`): the supervisor's checkpoints are postcard, which cannot read internal tags.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pace {
    /// MLLess's fixed clock: a decision every `interval_s` seconds, projecting `horizon_s`
    /// seconds ahead ([`ScaleInConfig`](super::ScaleInConfig)'s fields).
    Clock,
    /// A decision every `interval` steps, projecting `interval` steps of the current fleet
    /// ahead.
    Steps {
        /// Steps between two decisions, and the horizon in steps.
        interval: u64,
    },
    /// A decision every `1 / decisions` of the job's planned length (its epochs or its time,
    /// whichever ends it first), projecting the steps such a share takes at the measured pace.
    /// Without a planned length (no epoch or time limit) it falls back to [`Pace::Clock`].
    Job {
        /// Decisions over the whole job.
        decisions: u32,
    },
}

impl Pace {
    /// The default pace: 40 decisions over the job, one every 2.5 % of it.
    pub const DEFAULT: Pace = Pace::Job { decisions: 40 };

    /// The fewest steps between two decisions and in a horizon, whatever the pace: fewer
    /// would project from the warm-up of the last removal.
    pub const MIN_STEPS: u64 = 5;

    /// Whether a decision is due at `step` and `progress` (the fraction of the job done, if
    /// it is planned), `now_s` on the supervisor's clock, the last decision having been at
    /// `last` (`None` before the first).
    pub fn is_due(
        self,
        clock_interval_s: f64,
        now_s: f64,
        step: u64,
        progress: Option<f64>,
        last: Option<PaceMark>,
    ) -> bool {
        let Some(last) = last else {
            return true;
        };
        match (self, progress, last.progress) {
            (Pace::Steps { interval }, _, _) => {
                step.saturating_sub(last.step) >= interval.max(Self::MIN_STEPS)
            }
            (Pace::Job { decisions }, Some(now), Some(then)) => {
                now - then >= 1.0 / f64::from(decisions.max(1))
                    && step.saturating_sub(last.step) >= Self::MIN_STEPS
            }
            _ => now_s - last.now_s >= clock_interval_s,
        }
    }

    /// The horizon in steps of the current fleet: `⌊clock_horizon_s / step_s⌋` on the clock;
    /// the interval with [`Pace::Steps`]; with [`Pace::Job`], the steps `1 / decisions` of the
    /// job takes at the pace measured so far (`steps_done` steps for `progress` of the job).
    /// At least [`Pace::MIN_STEPS`] except on the clock.
    pub fn horizon_steps(
        self,
        clock_horizon_s: f64,
        step_s: f64,
        steps_done: u64,
        progress: Option<f64>,
    ) -> u64 {
        let clock = || (clock_horizon_s / step_s).floor() as u64;
        match (self, progress) {
            (Pace::Clock, _) => clock(),
            (Pace::Steps { interval }, _) => interval.max(Self::MIN_STEPS),
            (Pace::Job { decisions }, Some(p)) if p > 0.0 => {
                let steps = steps_done as f64 / p / f64::from(decisions.max(1));
                (steps.round() as u64).max(Self::MIN_STEPS)
            }
            (Pace::Job { .. }, _) => clock(),
        }
    }
}

/// When the last decision was: the supervisor's clock, the step and the job's progress.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PaceMark {
    /// Seconds on the supervisor's clock.
    pub now_s: f64,
    /// The step.
    pub step: u64,
    /// The fraction of the job done, if it is planned.
    pub progress: Option<f64>,
}
