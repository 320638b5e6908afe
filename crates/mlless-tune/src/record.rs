//! The tune record: what a search did, trial by trial, what it cost and what it found. Written
//! as JSON (`tune.json`) beside the search's report.

use mlless_core::Metrics;
use mlless_core::validation::Direction;
use serde::{Deserialize, Serialize};

use crate::asha::{AshaConfig, RungDecision};
use crate::space::{Assignment, Sampler, SearchSpace};

/// Version of the tune-record format.
pub const TUNE_RECORD_VERSION: u32 = 1;

/// Everything a search did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneRecord {
    /// Version of this format.
    pub format_version: u32,
    /// The search's id (`tune-…`).
    pub tune_id: String,
    /// When the search started, Unix milliseconds.
    pub started_at_unix_ms: u64,
    /// Its wall time, seconds.
    pub wall_s: f64,
    /// The model (`lr`, `pmf`, …).
    pub model: String,
    /// The validation metric the trials are compared by (`logloss`, `rmse`, …).
    pub metric: String,
    /// Whether it is better lower or higher.
    pub direction: Direction,
    /// The budget, dollars.
    pub budget_usd: f64,
    /// What the trials' bills add up to, dollars.
    pub spent_usd: f64,
    /// The search's time limit, seconds.
    pub max_time_s: Option<f64>,
    /// How the trials were drawn.
    pub sampler: Sampler,
    /// The seed of the sampling (and of every trial's training).
    pub seed: u64,
    /// Trials run at once, at most.
    pub concurrency: u32,
    /// The space searched.
    pub space: SearchSpace,
    /// The successive-halving rungs (`None`: every trial ran to its end, a full search).
    pub scheduler: Option<SchedulerRecord>,
    /// Why the search ended.
    pub stop_reason: String,
    /// Every trial drawn, in the order drawn; the ones the search never started have status
    /// [`TrialStatus::NotStarted`].
    pub trials: Vec<TrialRecord>,
    /// The best trial (`trial` of its [`TrialRecord`]): the best validation metric.
    pub best: Option<usize>,
    /// What the search had spent over time: `(seconds since it started, dollars)`, from the
    /// trials' bills over their runs.
    pub cost_curve: Vec<(f64, f64)>,
}

/// The scheduler of a search with successive halving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerRecord {
    /// Its configuration.
    pub config: AshaConfig,
    /// Its rungs, in the config's unit.
    pub rungs: Vec<f64>,
}

/// How a trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialStatus {
    /// It trained to its own end (its epochs, early stopping, a target).
    Finished,
    /// The search stopped it: at a rung, for the budget or for the search's time.
    Stopped,
    /// It failed (the error is in the record); the search went on.
    Failed,
    /// Cancelled with the search (Ctrl-C).
    Cancelled,
    /// The search ended before it started.
    NotStarted,
}

impl TrialStatus {
    /// `finished`, `stopped`, …
    pub fn name(self) -> &'static str {
        match self {
            TrialStatus::Finished => "finished",
            TrialStatus::Stopped => "stopped",
            TrialStatus::Failed => "failed",
            TrialStatus::Cancelled => "cancelled",
            TrialStatus::NotStarted => "not started",
        }
    }
}

/// One trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// Its number, from 0 in the order drawn.
    pub trial: usize,
    /// Its parameters.
    pub params: Assignment,
    /// How it ended.
    pub status: TrialStatus,
    /// Why it stopped (its run record's stop reason).
    pub stop_reason: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Its run (`{runs}/{job}`: spec, model, record), once it had one.
    pub run_url: Option<String>,
    /// Its best validation metric (the model its run kept).
    pub best_metric: Option<f64>,
    /// Epochs trained.
    pub epochs: f64,
    /// Steps trained.
    pub steps: u64,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// Its bill, dollars (for a failed trial, its bill so far when it failed).
    pub cost_usd: f64,
    /// When it started, seconds since the search started.
    pub started_s: f64,
    /// Its test metrics (`test_logloss`, …) from its run record.
    pub test_metrics: Metrics,
    /// The rungs it reached and what the scheduler decided there.
    pub rungs: Vec<RungRecord>,
    /// Its validation curve.
    pub curve: Vec<CurvePoint>,
}

/// A trial at a rung.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RungRecord {
    /// The rung's index.
    pub rung: usize,
    /// The rung, in the scheduler's unit.
    pub at: f64,
    /// The trial's best validation metric by then (`None`: not a number, a diverged trial).
    pub value: Option<f64>,
    /// The verdict.
    pub decision: RungDecision,
    /// Whether it went on: promoted, and the budget paid for its next rung.
    pub went_on: bool,
}

/// One evaluation of a trial on the validation set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Seconds since the search started.
    pub time_s: f64,
    /// Epochs trained by then.
    pub epoch: f64,
    /// The validation metric.
    pub value: f64,
    /// The trial's bill by then, dollars.
    pub cost_usd: f64,
}

/// Whether `a` is a better value of a metric than `b` in `direction`; a finite value beats a
/// missing or non-finite one.
pub fn is_better(direction: Direction, a: Option<f64>, b: Option<f64>) -> bool {
    match (a.filter(|v| v.is_finite()), b.filter(|v| v.is_finite())) {
        (Some(a), Some(b)) => match direction {
            Direction::Lower => a < b,
            Direction::Higher => a > b,
        },
        (Some(_), None) => true,
        (None, _) => false,
    }
}

impl TuneRecord {
    /// The trials that ran, best first (those without a metric last, then by number).
    pub fn leaderboard(&self) -> Vec<&TrialRecord> {
        let mut trials: Vec<&TrialRecord> = self
            .trials
            .iter()
            .filter(|t| t.status != TrialStatus::NotStarted)
            .collect();
        trials.sort_by(|a, b| {
            if is_better(self.direction, a.best_metric, b.best_metric) {
                std::cmp::Ordering::Less
            } else if is_better(self.direction, b.best_metric, a.best_metric) {
                std::cmp::Ordering::Greater
            } else {
                a.trial.cmp(&b.trial)
            }
        });
        trials
    }

    /// The best trial's record.
    pub fn best_trial(&self) -> Option<&TrialRecord> {
        self.best
            .and_then(|b| self.trials.iter().find(|t| t.trial == b))
    }

    /// The trials of each status: `(status, count)` for those with any.
    pub fn counts(&self) -> Vec<(TrialStatus, usize)> {
        [
            TrialStatus::Finished,
            TrialStatus::Stopped,
            TrialStatus::Failed,
            TrialStatus::Cancelled,
            TrialStatus::NotStarted,
        ]
        .into_iter()
        .map(|s| (s, self.trials.iter().filter(|t| t.status == s).count()))
        .filter(|&(_, n)| n > 0)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(n: usize, metric: Option<f64>, status: TrialStatus) -> TrialRecord {
        TrialRecord {
            trial: n,
            params: Assignment(vec![("lr".into(), n.to_string())]),
            status,
            stop_reason: None,
            error: None,
            run_url: None,
            best_metric: metric,
            epochs: 1.0,
            steps: 10,
            wall_s: 1.0,
            cost_usd: 0.01,
            started_s: 0.0,
            test_metrics: Metrics::new(),
            rungs: Vec::new(),
            curve: Vec::new(),
        }
    }

    #[test]
    fn the_leaderboard_puts_the_best_first_and_the_failed_last() {
        let record = TuneRecord {
            format_version: TUNE_RECORD_VERSION,
            tune_id: "tune-1".into(),
            started_at_unix_ms: 0,
            wall_s: 1.0,
            model: "lr".into(),
            metric: "logloss".into(),
            direction: Direction::Lower,
            budget_usd: 1.0,
            spent_usd: 0.05,
            max_time_s: None,
            sampler: Sampler::Grid,
            seed: 1,
            concurrency: 2,
            space: SearchSpace::default(),
            scheduler: None,
            stop_reason: "every trial ran".into(),
            trials: vec![
                trial(0, Some(0.5), TrialStatus::Finished),
                trial(1, None, TrialStatus::Failed),
                trial(2, Some(0.4), TrialStatus::Stopped),
                trial(3, Some(f64::NAN), TrialStatus::Finished),
                trial(4, Some(0.5), TrialStatus::Finished),
                trial(5, None, TrialStatus::NotStarted),
            ],
            best: Some(2),
            cost_curve: Vec::new(),
        };
        let order: Vec<usize> = record.leaderboard().iter().map(|t| t.trial).collect();
        assert_eq!(order, [2, 0, 4, 1, 3]);
        assert_eq!(record.best_trial().map(|t| t.trial), Some(2));
        assert_eq!(
            record.counts(),
            [
                (TrialStatus::Finished, 3),
                (TrialStatus::Stopped, 1),
                (TrialStatus::Failed, 1),
                (TrialStatus::NotStarted, 1)
            ]
        );
        let json = serde_json::to_string(&record).unwrap();
        let back: TuneRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back.trials.len(), 6);
        assert!(is_better(Direction::Higher, Some(0.9), Some(0.8)));
        assert!(is_better(Direction::Higher, Some(0.1), None));
        assert!(!is_better(Direction::Lower, None, Some(0.1)));
    }
}
