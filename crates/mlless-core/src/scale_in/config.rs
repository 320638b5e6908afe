//! The scale-in tuner's settings: [`ScaleInConfig`], the [`ScaleInRule`] it applies and the
//! [`Signal`] it watches, and the [`CostFigures`] of a decision.

use serde::{Deserialize, Serialize};

use super::curves::MIN_CURVE_POINTS;
use super::{Ewma, KneeDetector, Pace, ScaleInError, StepCost};

/// Which rule turns the projections into a removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleInRule {
    /// MLLess's: remove when the projected loss of the smaller fleet is less than S worse than
    /// the full fleet's at the horizon, `s_Δ < S` (`--scale-in mlless`).
    #[default]
    Mlless,
    /// Cost-efficiency: remove when what a worker buys over the horizon, per dollar, is less
    /// than a fraction E of what the run has bought per dollar so far (`--scale-in auto`; see
    /// the [module docs](crate::scale_in#the-bill-in-the-decision)).
    Cost,
}

/// The curve the tuner watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// The training loss of each step (smoothed by the EWMA for the cost rule).
    #[default]
    TrainingLoss,
    /// The best validation metric so far (lower is better), one point per evaluation.
    Validation,
}

/// The cost rule's figures of one decision: the gain a worker buys and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostFigures {
    /// The watched curve's projected gain over the horizon (a log ratio),
    /// `min(gain_fitted, gain_measured)`.
    pub gain: f64,
    /// The gain the fitted curve projects, `ln(L(t) / L(t + h))`.
    pub gain_fitted: f64,
    /// The gain the last `h` steps made, `ln(L(t − h) / L(t))` (measured over the last points
    /// at least `h` steps apart, scaled to `h` steps).
    pub gain_measured: f64,
    /// The gain since the first point of the curve, `ln(L_first / L(t))`.
    pub gain_so_far: f64,
    /// What the run's steps have cost so far, by the [`StepCost`] model.
    pub spent_usd: f64,
    /// What one worker adds to the bill of the horizon: its `h` steps with p workers less
    /// `h` steps with p − 1.
    pub worker_cost_usd: f64,
    /// The worker's share of the gain, `gain / p`.
    pub worker_gain: f64,
    /// `(worker_gain / gain_so_far) / (worker_cost_usd / spent_usd)`; `f64::MAX` when the
    /// worker costs nothing (removing it would not save).
    pub efficiency: f64,
    /// E: the rule removes a worker when `efficiency < E`.
    pub threshold: f64,
}

/// Settings of the [`ScaleInTuner`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScaleInConfig {
    /// S in [0, 1]: remove a worker when `s_Δ < S` (default 0.05, see the
    /// [module docs](crate::scale_in#the-decision)).
    pub threshold: f64,
    /// T, seconds between two decisions (default 10).
    pub interval_s: f64,
    /// Δ ≤ T, the projection horizon in seconds (default 10, as MLLess).
    pub horizon_s: f64,
    /// Never go below this many workers (default 1).
    pub min_workers: u32,
    /// α of the loss EWMA (default 0.2).
    pub ewma_alpha: f64,
    /// Steps after the start and after each removal whose duration (and, after a removal,
    /// loss) are not used (default 5, as MLLess).
    pub warmup_steps: u32,
    /// Steps over which the knee detector measures the drop per step (default 20).
    pub knee_window: u32,
    /// A step is slow when its drop per step is below this fraction of the largest (default 0.05).
    pub knee_fraction: f64,
    /// Consecutive slow steps that make a knee (default 10).
    pub knee_patience: u32,
    /// Points a curve needs before a decision uses it (default 40, at least 6). Fewer make the
    /// slow curve, hence `s_Δ`, noisier: with 1 % loss noise, `s_Δ` scatters by about ±1 % with
    /// 40 points and ±2 % with 20.
    pub min_fit_points: usize,
    /// Most recent duration samples kept per worker count (default 256).
    pub duration_window: usize,
    /// The rule that decides (default [`ScaleInRule::Cost`]; a spec written before it had
    /// none and keeps MLLess's).
    #[serde(default)]
    pub rule: ScaleInRule,
    /// When decisions are due (default [`Pace::DEFAULT`]; a spec written before it had none
    /// and keeps the clock).
    #[serde(default = "clock_pace")]
    pub pace: Pace,
    /// What a step costs (default: a worker-second is the unit; the driver fills in prices).
    pub step_cost: StepCost,
    /// E of the cost rule: remove a worker when its efficiency is below this (default 0.5).
    pub efficiency_threshold: f64,
    /// Evaluations a validation curve needs before a decision uses it (default 6, at least 6).
    pub min_validation_points: usize,
}

fn clock_pace() -> Pace {
    Pace::Clock
}

impl Default for ScaleInConfig {
    fn default() -> Self {
        Self {
            threshold: 0.05,
            interval_s: 10.0,
            horizon_s: 10.0,
            min_workers: 1,
            ewma_alpha: 0.2,
            warmup_steps: 5,
            knee_window: 20,
            knee_fraction: 0.05,
            knee_patience: 10,
            min_fit_points: 40,
            duration_window: 256,
            rule: ScaleInRule::Cost,
            pace: Pace::DEFAULT,
            step_cost: StepCost::default(),
            efficiency_threshold: 0.5,
            min_validation_points: 6,
        }
    }
}

impl ScaleInConfig {
    /// MLLess's tuner as the paper has it: the `s_Δ < S` rule on a 10-second clock.
    pub fn mlless() -> Self {
        Self {
            rule: ScaleInRule::Mlless,
            pace: Pace::Clock,
            ..Self::default()
        }
    }

    /// Checks every setting's range.
    pub fn validate(&self) -> Result<(), ScaleInError> {
        let err = |field, value: f64, reason| {
            Err(ScaleInError::InvalidConfig {
                field,
                value,
                reason,
            })
        };
        if !(0.0..=1.0).contains(&self.threshold) {
            return err("threshold", self.threshold, "must be in [0, 1]");
        }
        if !(self.interval_s > 0.0 && self.interval_s.is_finite()) {
            return err("interval_s", self.interval_s, "must be positive and finite");
        }
        if !(self.horizon_s > 0.0 && self.horizon_s <= self.interval_s) {
            return err("horizon_s", self.horizon_s, "must be in (0, interval_s]");
        }
        if self.min_workers == 0 {
            return err("min_workers", 0.0, "must be at least 1");
        }
        if self.min_fit_points < MIN_CURVE_POINTS {
            return err(
                "min_fit_points",
                self.min_fit_points as f64,
                "must be at least 6",
            );
        }
        if self.duration_window == 0 {
            return err("duration_window", 0.0, "must be at least 1");
        }
        if self.min_validation_points < MIN_CURVE_POINTS {
            return err(
                "min_validation_points",
                self.min_validation_points as f64,
                "must be at least 6",
            );
        }
        if !(self.efficiency_threshold >= 0.0 && self.efficiency_threshold.is_finite()) {
            return err(
                "efficiency_threshold",
                self.efficiency_threshold,
                "must be finite and non-negative",
            );
        }
        if !self.step_cost.is_valid() {
            return err(
                "step_cost",
                self.step_cost.worker_usd_per_s,
                "every price must be finite and non-negative",
            );
        }
        match self.pace {
            Pace::Steps { interval: 0 } => return err("pace.interval", 0.0, "must be at least 1"),
            Pace::Job { decisions: 0 } => return err("pace.decisions", 0.0, "must be at least 1"),
            _ => {}
        }
        Ewma::new(self.ewma_alpha)?;
        KneeDetector::new(self.knee_window, self.knee_fraction, self.knee_patience).map(|_| ())
    }
}
