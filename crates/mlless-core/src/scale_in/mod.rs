//! The maths of MLLess's scale-in auto-tuner: loss smoothing, knee detection, the two loss
//! curves, the step-duration model and the decision rule (DESIGN §6). No I/O, no clock: the
//! supervisor feeds steps in and passes its own time to [`ScaleInTuner::decide`].
//!
//! # The pipeline
//!
//! 1. [`Ewma`] smooths each step's loss.
//! 2. [`KneeDetector`] finds the start of slow convergence in the smoothed loss.
//! 3. [`ReferenceCurve`] `L_P(t) = 1 / (θ0·t^θ2 + θ1) + θ3` is the full fleet's (P workers)
//!    curve; [`SlowCurve`] `ℓ_p(t) = 1 / (c0·t² + c1·t + c2) + c3` is the curve of the current
//!    p < P workers, fitted on the points since the last removal. All coefficients ≥ 0.
//! 4. [`StepDurationModel`] `d_p = c0 + (p − 1)·c1 + p·c2` predicts a step's duration.
//! 5. [`ScaleInTuner`] turns these into a [`ScaleInDecision`] at most once per interval T.
//! 6. [`pick_worker_to_remove`] names the worker with the worst replica.
//!
//! # Time axes
//!
//! - The reference curve's `t` is the step counted from the first observed step, which is
//!   `t = 1`: `t = step − reference_first_step + 1`.
//! - The slow curve's `t` is the number of steps since the last removal:
//!   `t = step − slow_removal_step`. The first `warmup_steps` steps after a removal are not
//!   fitted, so its first point is at `t = warmup_steps + 1`. A local origin keeps `t²` small
//!   (better conditioned) and makes `1/c2 + c3` the loss at the removal.
//!
//! Both origins are recorded in every [`ScaleInDecision`].
//!
//! # Knee rule
//!
//! Let `s_i` be the EWMA-smoothed loss of the i-th observed step. Its first difference, taken over
//! the last W observations (`knee_window`) to average the noise out, is the drop per step
//! `D_i = (s_{i−W} − s_i) / (step_i − step_{i−W})`, and `M_i = max_{j ≤ i} D_j`. A step is *slow*
//! when `M_i > 0` and `D_i < fraction · M_i` (`knee_fraction`, default 5 %). The knee is the first
//! step of the first run of `patience` consecutive slow steps (`knee_patience`); it is known
//! `patience − 1` steps later. The drop is signed, not `|Δ|`: the absolute value of a noisy
//! difference has a positive mean even on a flat curve, so noise would count as progress and a
//! flat curve would never look flat. A one-step difference would be noise-dominated as soon as
//! the per-step drop falls below the loss noise; over W steps the signal grows as W and the noise
//! stays constant.
//!
//! # Fitting
//!
//! Both curves are fitted by constrained least squares on the raw `(t, loss)` points (not the
//! EWMA, whose lag of about `(1 − α)/α` steps would bias the curve by several % on the steep
//! part). The error minimised is the relative one, `Σ ((f(t) − L) / L)²`: it is the maximum
//! likelihood under multiplicative noise (a minibatch loss's noise scales with the loss), it does
//! not depend on the loss's unit, and it is the error the tuner cares about (`s_Δ` is relative).
//!
//! 1. A grid over the nonlinear coefficients (θ2 × θ3 for `L_P`, c3 for `ℓ_p`); for each, the
//!    linear ones come from a non-negative least squares (Lawson–Hanson) of the linearised model
//!    `1/(L − θ3) = θ0·t^θ2 + θ1` (resp. `= c0·t² + c1·t + c2`), each row weighted by
//!    `(L − θ3)² / L` so that its residual approximates the relative residual in `L`.
//! 2. The best few grid points are refined by a projected Levenberg–Marquardt on the true
//!    relative error, every coefficient clamped at 0 (bound-active coefficients whose gradient
//!    points outwards are held fixed).
//! 3. Points whose relative residual exceeds 5 robust σ (1.4826 · median |residual|) are dropped
//!    as outliers and the fit is redone once.
//!
//! How far ahead the fits hold depends on how many points they have: with 1 % noise, the
//! reference curve fitted on 300 steps predicts the next 200 within ~1.5 %; the slow curve, whose
//! `t²` and `t` terms are hard to tell apart on a short span, needs ~600 for that (on 300 its
//! 200-step error has a median ≲ 1.7 % but reaches ~4 % for some noise draws, at the least
//! squares optimum — more data, not a better optimiser, is the cure). The tuner only projects
//! `Δ/d_p` steps ahead (tens of steps).
//!
//! The solvers (Householder least squares, Lawson–Hanson NNLS, a 4-unknown projected
//! Levenberg–Marquardt) are [`crate::fit`]'s.
//!
//! # Modules
//!
//! - `knee`: [`Ewma`] and [`KneeDetector`].
//! - `curves`: [`ReferenceCurve`] and [`SlowCurve`], their grids and the outlier rule.
//! - `duration`: [`StepDurationModel`].
//! - `pace`: [`Pace`], when decisions are due and their horizon.
//! - `cost`: [`StepCost`], the bill of a step.
//! - `config`: [`ScaleInConfig`], [`ScaleInRule`], [`Signal`], [`CostFigures`].
//! - `decide`: [`ScaleInTuner`], [`ScaleInDecision`] and
//!   [`pick_worker_to_remove`].
//!
//! # The step-duration model is identifiable only up to two numbers
//!
//! `p = (p − 1) + 1`, so `d_p = c0 + (p − 1)·c1 + p·c2 = (c0 + c2) + (p − 1)·(c1 + c2)`: only
//! `d_1 = c0 + c2 ≥ 0` and the slope `c1 + c2 ≥ 0` can be measured, and every c ≥ 0 with the
//! same two sums predicts the same durations. [`StepDurationModel::fit`] returns the canonical
//! solution `c2 = 0` (it exists for every feasible model). With samples from one worker count
//! only, the slope is unknown and is taken as 0 (all time attributed to `c0`): removing a worker
//! is credited with no speed-up until one has been measured.
//!
//! # The decision
//!
//! With P the initial workers, p the current ones, t the last observed step and Δ the horizon:
//!
//! `s_Δ(t) = (ℓ_p(t + ⌊Δ/d_p⌋) − L_P(t + ⌊Δ/d_P⌋)) / L_P(t + ⌊Δ/d_P⌋)`,
//! and one worker is removed when `s_Δ < S` and `p > min_workers`.
//!
//! Before the first removal there is no `ℓ_p` (p = P). The first decision
//! ([`DecisionBasis::StallBound`]) then assumes the worst a smaller fleet can plausibly do over Δ
//! — make no progress at all, `ℓ = L_P(t)` — which bounds `s_Δ` from above:
//! `s_Δ ≤ (L_P(t) − L_P(t + ⌊Δ/d_P⌋)) / L_P(t + ⌊Δ/d_P⌋)`, the full fleet's projected relative
//! gain over the horizon. Removing when this bound is below S removes at the knee only once the
//! full fleet itself would gain less than S in Δ, and keeps the fleet while the loss still falls
//! steeply. (MLLess's code removes one worker unconditionally at the knee.) While no worker has
//! been removed, every decision refits `L_P` on all points so far; the first removal freezes it.
//!
//! Decisions come at most once per `interval_s`, only after the knee, and only while
//! `p > min_workers`; a decision that cannot be computed yet (too few points since the removal,
//! no duration sample) returns `None` and does not use up the interval.
//!
//! The default threshold S = 0.05 tolerates a projected loss 5 % worse than the full fleet's at
//! the horizon. It sits above the noise of `s_Δ` itself — the fits' prediction error (MLLess
//! reports < 1.5 %) and, right after a removal, the scatter of a slow curve fitted on few points
//! (about ±1 % with the default 40 points and 1 % loss noise in the tests, ±2 % with 20) — so
//! that decisions are not made on noise. MLLess's code uses 1 %, which is more conservative.
//!
//! # The job's pace
//!
//! MLLess decides every T = 10 s and projects Δ = 10 s ahead: on a 16-second job that is one
//! decision, on a 10-hour one 3,600 of them. [`Pace`] makes the interval a share of the job
//! instead. The default, [`Pace::DEFAULT`], decides every 1/40 of the job's planned length —
//! its progress is `max(epoch / max_epochs, time / max_time)`, which the supervisor sets with
//! [`ScaleInTuner::set_progress`] — and projects over the steps such a share takes at the pace
//! measured so far (the horizon in steps; its seconds follow from the step-duration model).
//! Why 40: a fleet of P = 8 needs 7 decisions to reach one worker, the knee of a typical curve
//! comes within the first third of a job, and a removal needs a few intervals of points before
//! its own effect shows; 40 leaves about 25 decisions after the knee for any P up to ~16,
//! whether the job lasts 10 seconds (a decision every 0.25 s) or 10 hours (every 15 min).
//! Neither interval nor horizon is ever shorter than [`Pace::MIN_STEPS`] steps, the warm-up
//! that follows a removal. [`Pace::Steps`] fixes both in steps; [`Pace::Clock`] is MLLess's.
//!
//! # The right curve
//!
//! With a validation set the tuner watches the validation metric
//! ([`ScaleInTuner::watch_validation`]): its curve is the best value so far (the model a run
//! keeps is its best evaluation, so a rising validation curve buys nothing), one point per
//! evaluation; the knee is that curve's (a window and a patience of 2 evaluations, a quarter
//! of the largest drop), and the
//! fits use it with [`ScaleInConfig::min_validation_points`] points. Without one it watches the
//! training loss, smoothed by the EWMA for the cost rule. A validation curve that has stopped
//! improving is flat: its gain is 0, and the cost rule removes a worker at every decision
//! (early stopping, if on, then stops the run).
//!
//! # The bill in the decision
//!
//! The cost rule ([`ScaleInRule::Cost`], `--scale-in auto`) weighs what a worker costs against
//! what it buys. Over the horizon of `h` steps (Δ seconds) of the current fleet of p:
//!
//! - the gain `g = min(ln(L(t) / L(t + h)), ln(L(t − h) / L(t)))` — the fitted curve's
//!   projection, capped by what the last `h` steps made (a decelerating curve gains no more
//!   next than it did last); the worker's share is `g / p` (a worker buys at most its share
//!   when returns diminish);
//! - its cost `h·(b(p, d_p) − b(p − 1, d_{p−1}))`, with `b(q, d)` the bill of a step of q
//!   workers lasting d ([`StepCost`]: q workers' GB-s, the services, and the channel's requests
//!   per step, which on the object store grow as q² under broadcast) and `d_q` the
//!   step-duration model's; like MLLess, the tuner counts progress in steps: in the slow phase
//!   a step of fewer workers gains about as much, and the worker buys at most its share;
//! - the run's own exchange rate: the gain so far `G = ln(L_first / L(t))` for the dollars `C`
//!   its steps have cost.
//!
//! The efficiency `e = (g/p / G) / (cost / C)` compares what the worker buys per dollar with
//! what the run has bought per dollar; one worker leaves when `e < E` (default 0.5). Gains are
//! log ratios so that `e` has no unit and does not fall on a curve that keeps improving at its
//! rate: on `L = exp(−k·t)` it stays at about 1, on a power law `t^−a` it is `1 / ln(t / t₀)`
//! (below 0.2 only after 150× the first point's time), and on a curve that flattens towards a
//! floor it falls to 0. MLLess's `s_Δ < S` is kept as [`ScaleInRule::Mlless`]; every decision
//! records both rules' figures ([`ScaleInDecision::s_delta`] and [`ScaleInDecision::cost`]).
//! Under the cost rule the curve is fitted each decision on the watched curve's recent points,
//! whichever fleet made them (the best validation value does not jump at a removal), and
//! `s_Δ` is its stall bound.
//!
//! ```
//! use mlless_core::{ReferenceCurve, pick_worker_to_remove};
//!
//! let truth = ReferenceCurve { theta: [0.05, 1.2, 0.8, 0.3] };
//! let points: Vec<(f64, f64)> = (1..=300).map(|t| (t as f64, truth.eval(t as f64))).collect();
//! let fitted = ReferenceCurve::fit(&points)?;
//! assert!((fitted.eval(500.0) / truth.eval(500.0) - 1.0).abs() < 0.01);
//!
//! assert_eq!(pick_worker_to_remove(&[(0, 0.41), (1, 0.47), (2, 0.44)]), Some(1));
//! # Ok::<(), mlless_core::ScaleInError>(())
//! ```

mod config;
mod cost;
mod curves;
mod decide;
mod duration;
mod knee;
mod pace;
#[cfg(test)]
mod tests;

pub use config::{CostFigures, ScaleInConfig, ScaleInRule, Signal};
pub use cost::StepCost;
pub use curves::{ReferenceCurve, SlowCurve};
pub use decide::{DecisionBasis, ScaleInDecision, ScaleInTuner, pick_worker_to_remove};
pub use duration::StepDurationModel;
pub use knee::{Ewma, KneeDetector};
pub use pace::{Pace, PaceMark};

/// Why the tuner or a fit cannot use its input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScaleInError {
    /// A setting is out of range.
    #[error("invalid tuner setting {field} = {value}: {reason}")]
    InvalidConfig {
        /// The setting's name.
        field: &'static str,
        /// Its value.
        value: f64,
        /// The accepted range.
        reason: &'static str,
    },
    /// An observation the tuner cannot use; it was ignored.
    #[error("invalid observation at step {step}: {reason}")]
    InvalidObservation {
        /// The step of the observation.
        step: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Steps must be observed in strictly increasing order.
    #[error("step {step} observed after step {last}; steps must increase")]
    StepNotIncreasing {
        /// The step observed.
        step: u64,
        /// The last step observed before it.
        last: u64,
    },
    /// A removal must leave fewer, but at least one, workers.
    #[error("invalid removal after step {step}: {workers} -> {new_workers} workers")]
    InvalidRemoval {
        /// The step after which the removal took effect.
        step: u64,
        /// The workers before.
        workers: u32,
        /// The workers claimed after.
        new_workers: u32,
    },
    /// Too few usable points for a fit.
    #[error("the {what} fit needs at least {needed} points, got {got}")]
    NotEnoughPoints {
        /// Which fit.
        what: &'static str,
        /// The minimum.
        needed: usize,
        /// The number given (after outlier removal, for the duration model).
        got: usize,
    },
    /// A point a fit cannot use.
    #[error("invalid point (t = {t}, value = {value}) for the {what} fit: {reason}")]
    InvalidPoint {
        /// Which fit.
        what: &'static str,
        /// The abscissa (t, or the worker count).
        t: f64,
        /// The value (loss or duration).
        value: f64,
        /// What is wrong with it.
        reason: &'static str,
    },
}
