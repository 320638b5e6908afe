//! The decision: the [`ScaleInTuner`] state machine with its [`ScaleInDecision`]s, and
//! [`pick_worker_to_remove`].

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::pace::PaceMark;
use super::{
    CostFigures, Ewma, KneeDetector, Pace, ReferenceCurve, ScaleInConfig, ScaleInError,
    ScaleInRule, Signal, SlowCurve, StepDurationModel,
};

/// What a decision's `ℓ_p` prediction rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionBasis {
    /// No worker removed yet: the smaller fleet is assumed to stall, `ℓ = L_P(t)`.
    StallBound,
    /// The slow curve fitted since the last removal.
    SlowCurve,
}

/// One decision of the tuner, with every input and prediction a run record should show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleInDecision {
    /// The last observed step: the t of `s_Δ(t)`.
    pub step: u64,
    /// The supervisor's clock at the decision, seconds.
    pub now_s: f64,
    /// The detected knee.
    pub knee_step: u64,
    /// P, the workers of the reference curve.
    pub initial_workers: u32,
    /// p, the workers now.
    pub workers_before: u32,
    /// The workers after the decision (`workers_before − 1` when `remove`).
    pub workers_after: u32,
    /// Whether to remove one worker.
    pub remove: bool,
    /// What `predicted_loss_p` rests on.
    pub basis: DecisionBasis,
    /// The reference curve `L_P`.
    pub reference: ReferenceCurve,
    /// The step at which the reference curve's `t` is 1.
    pub reference_first_step: u64,
    /// RMSE of the reference curve on its points.
    pub reference_rmse: f64,
    /// The slow curve `ℓ_p` (with [`DecisionBasis::SlowCurve`]).
    pub slow: Option<SlowCurve>,
    /// The step of the last removal, where the slow curve's `t` is 0.
    pub slow_removal_step: Option<u64>,
    /// RMSE of the slow curve on its points.
    pub slow_rmse: Option<f64>,
    /// The step-duration model.
    pub duration: StepDurationModel,
    /// `d_p`, seconds.
    pub duration_p_s: f64,
    /// `d_P`, seconds.
    pub duration_full_s: f64,
    /// Δ, seconds.
    pub horizon_s: f64,
    /// `⌊Δ/d_p⌋` (0 with [`DecisionBasis::StallBound`]: a stalled fleet makes no progress).
    pub steps_ahead_p: u64,
    /// `⌊Δ/d_P⌋`.
    pub steps_ahead_full: u64,
    /// `ℓ_p(t + ⌊Δ/d_p⌋)`, or `L_P(t)` with [`DecisionBasis::StallBound`].
    pub predicted_loss_p: f64,
    /// `L_P(t + ⌊Δ/d_P⌋)`.
    pub predicted_loss_full: f64,
    /// `s_Δ(t) = (predicted_loss_p − predicted_loss_full) / predicted_loss_full`.
    pub s_delta: f64,
    /// S.
    pub threshold: f64,
    /// The rule that decided `remove`.
    #[serde(default)]
    pub rule: ScaleInRule,
    /// The curve the projections are of.
    #[serde(default)]
    pub signal: Signal,
    /// The horizon in steps of the current fleet.
    #[serde(default)]
    pub horizon_steps: u64,
    /// The cost rule's figures (`None` while the watched curve has too few points).
    #[serde(default)]
    pub cost: Option<CostFigures>,
}

/// The scale-in auto-tuner as a pure state machine (DESIGN §6 steps 1–5).
///
/// Each step the supervisor calls [`observe`](Self::observe) (and, with a validation set,
/// [`observe_validation`](Self::observe_validation) after each evaluation, having called
/// [`watch_validation`](Self::watch_validation) first), [`set_progress`](Self::set_progress),
/// then [`decide`](Self::decide); when a decision removes a worker, it picks one with
/// [`pick_worker_to_remove`], removes it and calls [`notify_removed`](Self::notify_removed).
/// The state is serialisable, so that a supervisor can checkpoint it between invocations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleInTuner {
    config: ScaleInConfig,
    initial_workers: u32,
    workers: u32,
    ewma: Ewma,
    knee: KneeDetector,
    signal: Signal,
    /// The knee of the validation curve (one point per evaluation).
    validation_knee: KneeDetector,
    first_step: Option<u64>,
    last_step: Option<u64>,
    /// Steps up to this one are warm-up: their durations (and, after a removal, losses) are
    /// not used.
    warmup_until: Option<u64>,
    /// `(step, loss)` of the full fleet, until the first removal.
    reference_points: Vec<(u64, f64)>,
    reference: Option<(ReferenceCurve, f64)>,
    removal_step: Option<u64>,
    /// `(step, loss)` since the last removal, warm-up excluded.
    slow_points: Vec<(u64, f64)>,
    /// The watched curve of the cost rule, every fleet: the smoothed loss or the best
    /// validation metric so far (the most recent [`CURVE_POINTS_KEPT`] points).
    curve_points: Vec<(u64, f64)>,
    /// The curve's first value.
    curve_first: Option<f64>,
    /// The best validation metric so far.
    validation_best: Option<f64>,
    /// The steps' bill so far, by the step-cost model.
    spent_usd: f64,
    /// The fraction of the job done, as last set.
    progress: Option<f64>,
    durations: BTreeMap<u32, VecDeque<f64>>,
    last_decision: Option<PaceMark>,
}

/// Points of the cost rule's curve kept (older ones are dropped in halves).
const CURVE_POINTS_KEPT: usize = 4096;

/// Most points of the training-loss curve the cost rule fits (the most recent).
const CURVE_POINTS_FITTED: usize = 1024;

/// The validation knee: the drop over this many evaluations is below this fraction of the
/// largest for this many in a row. Coarser than the loss's: an evaluation is far rarer than a
/// step, and the cost rule, not the knee, decides whether the flatter part pays for a worker.
const VALIDATION_KNEE_WINDOW: u32 = 2;
const VALIDATION_KNEE_FRACTION: f64 = 0.25;
const VALIDATION_KNEE_PATIENCE: u32 = 2;

impl ScaleInTuner {
    /// A tuner for a run that starts with `initial_workers` (P) workers.
    pub fn new(config: ScaleInConfig, initial_workers: u32) -> Result<Self, ScaleInError> {
        config.validate()?;
        if initial_workers == 0 {
            return Err(ScaleInError::InvalidConfig {
                field: "initial_workers",
                value: 0.0,
                reason: "must be at least 1",
            });
        }
        Ok(Self {
            ewma: Ewma::new(config.ewma_alpha)?,
            knee: KneeDetector::new(
                config.knee_window,
                config.knee_fraction,
                config.knee_patience,
            )?,
            validation_knee: KneeDetector::new(
                VALIDATION_KNEE_WINDOW,
                VALIDATION_KNEE_FRACTION,
                VALIDATION_KNEE_PATIENCE,
            )?,
            signal: Signal::TrainingLoss,
            config,
            initial_workers,
            workers: initial_workers,
            first_step: None,
            last_step: None,
            warmup_until: None,
            reference_points: Vec::new(),
            reference: None,
            removal_step: None,
            slow_points: Vec::new(),
            curve_points: Vec::new(),
            curve_first: None,
            validation_best: None,
            spent_usd: 0.0,
            progress: None,
            durations: BTreeMap::new(),
            last_decision: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &ScaleInConfig {
        &self.config
    }

    /// P.
    pub fn initial_workers(&self) -> u32 {
        self.initial_workers
    }

    /// The current number of workers, as last notified.
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// The curve the tuner watches.
    pub fn signal(&self) -> Signal {
        self.signal
    }

    /// The knee of the watched curve, once detected.
    pub fn knee_step(&self) -> Option<u64> {
        match self.signal {
            Signal::TrainingLoss => self.knee.knee(),
            Signal::Validation => self.validation_knee.knee(),
        }
    }

    /// The EWMA of the loss.
    pub fn smoothed_loss(&self) -> Option<f64> {
        self.ewma.value()
    }

    /// The reference curve, once fitted (by a decision, or at the first removal).
    pub fn reference(&self) -> Option<&ReferenceCurve> {
        self.reference.as_ref().map(|r| &r.0)
    }

    /// Watch the validation curve instead of the training loss: the curves are fitted to the
    /// evaluations given to [`observe_validation`](Self::observe_validation), and the knee is
    /// theirs. Call it before the first observation.
    pub fn watch_validation(&mut self) {
        self.signal = Signal::Validation;
    }

    /// Sets the fraction of the job done (its epochs or time against its limits), which the
    /// [`Pace::Job`] pace is measured by; `None` when the job has no planned length.
    pub fn set_progress(&mut self, progress: Option<f64>) {
        self.progress = progress.filter(|p| p.is_finite() && *p >= 0.0);
    }

    /// Feeds one step: its mean loss over the workers, its duration in seconds and the number
    /// of workers that ran it (the duration sample is filed under that count). Steps must
    /// increase; an invalid observation is rejected and leaves the tuner unchanged.
    pub fn observe(
        &mut self,
        step: u64,
        loss: f64,
        step_duration_s: f64,
        workers: u32,
    ) -> Result<(), ScaleInError> {
        let invalid = |reason| Err(ScaleInError::InvalidObservation { step, reason });
        if !(loss.is_finite() && loss >= 0.0) {
            return invalid("the loss must be finite and non-negative");
        }
        if !(step_duration_s.is_finite() && step_duration_s >= 0.0) {
            return invalid("the step duration must be finite and non-negative");
        }
        if workers == 0 {
            return invalid("a step needs at least one worker");
        }
        if let Some(last) = self.last_step
            && step <= last
        {
            return Err(ScaleInError::StepNotIncreasing { step, last });
        }
        if self.first_step.is_none() {
            self.first_step = Some(step);
            self.warmup_until = match self.config.warmup_steps {
                0 => None,
                w => step.checked_add(u64::from(w) - 1),
            };
        }
        self.last_step = Some(step);
        self.spent_usd += self.config.step_cost.step_usd(workers, step_duration_s);
        let smoothed = self.ewma.update(loss);
        self.knee.update(step, smoothed);

        let in_warmup = self.warmup_until.is_some_and(|w| step <= w);
        if self.signal == Signal::TrainingLoss {
            self.push_curve_point(step, smoothed);
            if self.removal_step.is_none() {
                self.reference_points.push((step, loss));
            } else if !in_warmup {
                self.slow_points.push((step, loss));
            }
        }
        if !in_warmup {
            let window = self.durations.entry(workers).or_default();
            window.push_back(step_duration_s);
            while window.len() > self.config.duration_window {
                window.pop_front();
            }
        }
        Ok(())
    }

    /// Feeds one evaluation of the validation metric (lower is better: every primary metric
    /// is) of the model after `step`, already given to [`observe`](Self::observe). The curve
    /// watched is the best value so far: the model a run keeps is its best evaluation. Ignored
    /// unless the tuner [watches validation](Self::watch_validation).
    pub fn observe_validation(&mut self, step: u64, value: f64) -> Result<(), ScaleInError> {
        if self.signal != Signal::Validation {
            return Ok(());
        }
        if !(value.is_finite() && value > 0.0) {
            return Err(ScaleInError::InvalidObservation {
                step,
                reason: "the validation metric must be finite and positive",
            });
        }
        if let Some(&(last, _)) = self.curve_points.last()
            && step <= last
        {
            return Err(ScaleInError::StepNotIncreasing { step, last });
        }
        let best = self.validation_best.map_or(value, |b| b.min(value));
        self.validation_best = Some(best);
        self.validation_knee.update(step, best);
        self.push_curve_point(step, best);
        if self.removal_step.is_none() {
            self.reference_points.push((step, best));
        } else if self.warmup_until.is_none_or(|w| step > w) {
            self.slow_points.push((step, best));
        }
        Ok(())
    }

    fn push_curve_point(&mut self, step: u64, value: f64) {
        self.curve_first.get_or_insert(value);
        self.curve_points.push((step, value));
        if self.curve_points.len() > CURVE_POINTS_KEPT {
            self.curve_points.drain(..CURVE_POINTS_KEPT / 2);
        }
    }

    /// Records that the fleet shrank to `new_workers` after `step`: later steps run with
    /// `new_workers`, the next `warmup_steps` are not used, and the slow curve restarts from
    /// this step. The first removal freezes the reference curve (fitting it now if no decision
    /// has yet).
    pub fn notify_removed(&mut self, step: u64, new_workers: u32) -> Result<(), ScaleInError> {
        if new_workers == 0 || new_workers >= self.workers {
            return Err(ScaleInError::InvalidRemoval {
                step,
                workers: self.workers,
                new_workers,
            });
        }
        if self.removal_step.is_none() {
            if self.reference.is_none() {
                self.reference = self.fit_reference();
            }
            self.reference_points = Vec::new();
        }
        self.workers = new_workers;
        self.removal_step = Some(step);
        self.slow_points.clear();
        self.warmup_until = step.checked_add(u64::from(self.config.warmup_steps));
        Ok(())
    }

    /// Points a curve of the watched signal needs.
    fn min_points(&self) -> usize {
        match self.signal {
            Signal::TrainingLoss => self.config.min_fit_points,
            Signal::Validation => self.config.min_validation_points,
        }
    }

    fn fit_reference(&self) -> Option<(ReferenceCurve, f64)> {
        let first = self.first_step?;
        let points: Vec<(f64, f64)> = self
            .reference_points
            .iter()
            .map(|&(s, l)| ((s - first + 1) as f64, l))
            .collect();
        if points.len() < self.min_points() {
            return None;
        }
        let curve = ReferenceCurve::fit(&points).ok()?;
        Some((curve, curve.rmse(&points)))
    }

    fn duration_model(&self) -> Option<StepDurationModel> {
        let samples: Vec<(u32, f64)> = self
            .durations
            .iter()
            .flat_map(|(&p, ds)| ds.iter().map(move |&d| (p, d)))
            .collect();
        StepDurationModel::fit(&samples).ok()
    }

    /// The watched curve fitted on its recent points: the curve, its RMSE, its last point's
    /// value, and the gain `ln(before / last)` it made over the last `h` steps, measured from
    /// the newest point at least `h` steps older than the last (the first point if none is)
    /// and scaled to `h` steps: evaluations may be further apart than a horizon.
    fn fit_curve(&self, h: u64) -> Option<(ReferenceCurve, f64, f64, f64)> {
        let first = self.first_step?;
        if self.curve_points.len() < self.min_points() {
            return None;
        }
        let recent = match self.signal {
            Signal::Validation => &self.curve_points[..],
            Signal::TrainingLoss => {
                let n = (4 * h as usize)
                    .max(self.config.min_fit_points)
                    .min(CURVE_POINTS_FITTED)
                    .min(self.curve_points.len());
                &self.curve_points[self.curve_points.len() - n..]
            }
        };
        let points: Vec<(f64, f64)> = recent
            .iter()
            .map(|&(s, l)| ((s - first + 1) as f64, l))
            .collect();
        let curve = ReferenceCurve::fit(&points).ok()?;
        let &(last_step, now) = self.curve_points.last()?;
        let &(before_step, before) = self
            .curve_points
            .iter()
            .rev()
            .find(|&&(s, _)| s + h <= last_step)
            .or(self.curve_points.first())?;
        let span = last_step.saturating_sub(before_step).max(1) as f64;
        let measured = (before / now).ln().max(0.0) * h as f64 / span;
        Some((curve, curve.rmse(&points), now, measured))
    }

    /// Called by the supervisor every step with its clock in seconds. Returns a decision when
    /// the [`Pace`] says one is due, only after the knee and while `workers > min_workers`;
    /// `None` when it is not yet time, or the data are not yet enough to decide (which does not
    /// use up the interval).
    pub fn decide(&mut self, now_s: f64) -> Option<ScaleInDecision> {
        let knee_step = self.knee_step()?;
        let step = self.last_step?;
        let first = self.first_step?;
        if self.workers <= self.config.min_workers || !now_s.is_finite() {
            return None;
        }
        let pace = self.config.pace;
        if !pace.is_due(
            self.config.interval_s,
            now_s,
            step,
            self.progress,
            self.last_decision,
        ) {
            return None;
        }
        let duration = self.duration_model()?;
        let (p, full) = (self.workers, self.initial_workers);
        let (d_p, d_full) = (duration.predict(p), duration.predict(full));
        if !(d_p > 0.0 && d_full > 0.0) {
            return None;
        }
        let horizon_steps =
            pace.horizon_steps(self.config.horizon_s, d_p, step - first + 1, self.progress);
        let horizon = match (pace, self.progress) {
            (Pace::Clock, _) | (Pace::Job { .. }, None) => self.config.horizon_s,
            _ => horizon_steps as f64 * d_p,
        };
        let steps_ahead_full = (horizon / d_full).floor() as u64;
        let t_ref = (step - first + 1) as f64;
        let cost = self.cost_figures(horizon_steps, &duration, t_ref);

        let (reference, reference_rmse, basis, slow, slow_rmse, steps_ahead_p, predicted_loss_p) =
            match (self.config.rule, self.removal_step) {
                (ScaleInRule::Cost, _) => {
                    let (curve, rmse, _, _) = self.fit_curve(horizon_steps)?;
                    (
                        curve,
                        rmse,
                        DecisionBasis::StallBound,
                        None,
                        None,
                        0,
                        curve.eval(t_ref),
                    )
                }
                (ScaleInRule::Mlless, None) => {
                    // Still the full fleet: refit the reference on everything so far.
                    self.reference = Some(self.fit_reference()?);
                    let (reference, rmse) = self.reference?;
                    (
                        reference,
                        rmse,
                        DecisionBasis::StallBound,
                        None,
                        None,
                        0,
                        reference.eval(t_ref),
                    )
                }
                (ScaleInRule::Mlless, Some(removed)) => {
                    let (reference, rmse) = self.reference?;
                    if self.slow_points.len() < self.min_points() {
                        return None;
                    }
                    let points: Vec<(f64, f64)> = self
                        .slow_points
                        .iter()
                        .map(|&(s, l)| ((s - removed) as f64, l))
                        .collect();
                    let curve = SlowCurve::fit(&points).ok()?;
                    let ahead = (horizon / d_p).floor() as u64;
                    let predicted = curve.eval((step - removed) as f64 + ahead as f64);
                    (
                        reference,
                        rmse,
                        DecisionBasis::SlowCurve,
                        Some(curve),
                        Some(curve.rmse(&points)),
                        ahead,
                        predicted,
                    )
                }
            };
        let predicted_loss_full = reference.eval(t_ref + steps_ahead_full as f64);
        let s_delta = (predicted_loss_p - predicted_loss_full) / predicted_loss_full;
        if !s_delta.is_finite() {
            return None;
        }
        let remove = match self.config.rule {
            ScaleInRule::Mlless => s_delta < self.config.threshold,
            ScaleInRule::Cost => cost.as_ref()?.efficiency < self.config.efficiency_threshold,
        };
        self.last_decision = Some(PaceMark {
            now_s,
            step,
            progress: self.progress,
        });
        Some(ScaleInDecision {
            step,
            now_s,
            knee_step,
            initial_workers: full,
            workers_before: p,
            workers_after: if remove { p - 1 } else { p },
            remove,
            basis,
            reference,
            reference_first_step: first,
            reference_rmse,
            slow,
            slow_removal_step: self.removal_step,
            slow_rmse,
            duration,
            duration_p_s: d_p,
            duration_full_s: d_full,
            horizon_s: horizon,
            steps_ahead_p,
            steps_ahead_full,
            predicted_loss_p,
            predicted_loss_full,
            s_delta,
            threshold: self.config.threshold,
            rule: self.config.rule,
            signal: self.signal,
            horizon_steps,
            cost,
        })
    }

    /// The cost rule's figures for a horizon of `h` steps of
    /// the current fleet; `None` while the watched curve has too few points or nothing has
    /// been billed yet.
    fn cost_figures(
        &self,
        h: u64,
        duration: &StepDurationModel,
        t_ref: f64,
    ) -> Option<CostFigures> {
        let (curve, _, now, gain_measured) = self.fit_curve(h)?;
        let first = self.curve_first?;
        let p = self.workers;
        let gain_fitted = (curve.eval(t_ref) / curve.eval(t_ref + h as f64))
            .ln()
            .max(0.0);
        let gain = gain_fitted.min(gain_measured);
        let gain_so_far = (first / now).ln();
        let cost = &self.config.step_cost;
        // The horizon's h steps with p workers, against h steps with p − 1.
        let worker_cost_usd = h as f64
            * (cost.step_usd(p, duration.predict(p))
                - cost.step_usd(p - 1, duration.predict(p - 1)));
        let worker_gain = gain / f64::from(p);
        if !(self.spent_usd > 0.0 && worker_cost_usd.is_finite()) {
            return None;
        }
        let efficiency = if worker_cost_usd <= 0.0 {
            // Removing the worker would not save: it is worth keeping whatever it buys.
            f64::MAX
        } else if worker_gain <= 0.0 || gain_so_far <= 0.0 {
            0.0
        } else {
            (worker_gain / gain_so_far) / (worker_cost_usd / self.spent_usd)
        };
        Some(CostFigures {
            gain,
            gain_fitted,
            gain_measured,
            gain_so_far,
            spent_usd: self.spent_usd,
            worker_cost_usd,
            worker_gain,
            efficiency,
            threshold: self.config.efficiency_threshold,
        })
    }
}

/// The worker whose replica is of the lowest quality: the highest recent mean loss (a NaN loss,
/// a diverged replica, counts as the highest), ties broken by the highest id. `None` if empty.
pub fn pick_worker_to_remove(recent_losses: &[(u32, f64)]) -> Option<u32> {
    let key = |loss: f64| if loss.is_nan() { f64::INFINITY } else { loss };
    recent_losses
        .iter()
        .max_by(|a, b| {
            key(a.1)
                .total_cmp(&key(b.1))
                .then_with(|| (a.1.is_nan()).cmp(&b.1.is_nan()))
                .then(a.0.cmp(&b.0))
        })
        .map(|w| w.0)
}
