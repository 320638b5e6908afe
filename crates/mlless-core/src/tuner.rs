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
//! The solvers are hand-written (~250 lines below: Householder least squares, Lawson–Hanson
//! NNLS, a 4-unknown projected Levenberg–Marquardt): the problems have 2–4 unknowns, while the
//! `nnls` crate pulls `ndarray` and `ndarray-stats`, and the least-squares crates `nalgebra` or
//! `ndarray` (some with BLAS), into a crate whose promise is pure maths on light dependencies.
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
//! ```
//! use mlless_core::{ReferenceCurve, pick_worker_to_remove};
//!
//! let truth = ReferenceCurve { theta: [0.05, 1.2, 0.8, 0.3] };
//! let points: Vec<(f64, f64)> = (1..=300).map(|t| (t as f64, truth.eval(t as f64))).collect();
//! let fitted = ReferenceCurve::fit(&points)?;
//! assert!((fitted.eval(500.0) / truth.eval(500.0) - 1.0).abs() < 0.01);
//!
//! assert_eq!(pick_worker_to_remove(&[(0, 0.41), (1, 0.47), (2, 0.44)]), Some(1));
//! # Ok::<(), mlless_core::TunerError>(())
//! ```

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

/// Why the tuner or a fit cannot use its input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TunerError {
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

fn check_unit_interval(field: &'static str, value: f64) -> Result<(), TunerError> {
    if value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        Err(TunerError::InvalidConfig {
            field,
            value,
            reason: "must be in (0, 1]",
        })
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Smoothing

/// Exponentially weighted moving average: `v ← v + α·(x − v)`, starting at the first value.
///
/// It damps a single outlier to α of its size; the curve fits drop outliers themselves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

impl Ewma {
    /// An empty average; `alpha` in (0, 1] is the weight of the newest value (0.1–0.3 is usual).
    pub fn new(alpha: f64) -> Result<Self, TunerError> {
        check_unit_interval("ewma_alpha", alpha)?;
        Ok(Self { alpha, value: None })
    }

    /// The weight of the newest value.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Adds `x` and returns the new average.
    pub fn update(&mut self, x: f64) -> f64 {
        let v = match self.value {
            None => x,
            Some(v) => v + self.alpha * (x - v),
        };
        self.value = Some(v);
        v
    }

    /// The current average, `None` before the first value.
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Forgets every value.
    pub fn reset(&mut self) {
        self.value = None;
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Knee detection

/// Finds the start of slow convergence in a smoothed loss; the rule is in the
/// [module docs](self#knee-rule).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KneeDetector {
    window: usize,
    fraction: f64,
    patience: u32,
    recent: VecDeque<(u64, f64)>,
    drop: Option<f64>,
    max_drop: f64,
    run_start: Option<u64>,
    run: u32,
    knee: Option<u64>,
}

impl KneeDetector {
    /// A detector that measures the drop per step over the last `window` (≥ 1) steps, calls a
    /// step slow when that drop is below `fraction` (in (0, 1)) of its maximum so far, and
    /// reports the knee after `patience` (≥ 1) consecutive slow steps.
    pub fn new(window: u32, fraction: f64, patience: u32) -> Result<Self, TunerError> {
        if window == 0 {
            return Err(TunerError::InvalidConfig {
                field: "knee_window",
                value: 0.0,
                reason: "must be at least 1",
            });
        }
        if !(fraction > 0.0 && fraction < 1.0) {
            return Err(TunerError::InvalidConfig {
                field: "knee_fraction",
                value: fraction,
                reason: "must be in (0, 1)",
            });
        }
        if patience == 0 {
            return Err(TunerError::InvalidConfig {
                field: "knee_patience",
                value: 0.0,
                reason: "must be at least 1",
            });
        }
        Ok(Self {
            window: window as usize,
            fraction,
            patience,
            recent: VecDeque::with_capacity(window as usize + 1),
            drop: None,
            max_drop: 0.0,
            run_start: None,
            run: 0,
            knee: None,
        })
    }

    /// Feeds the smoothed loss of `step` (steps increasing); returns the knee once known.
    /// Non-finite values are ignored.
    pub fn update(&mut self, step: u64, smoothed_loss: f64) -> Option<u64> {
        if self.knee.is_some() || !smoothed_loss.is_finite() {
            return self.knee;
        }
        self.recent.push_back((step, smoothed_loss));
        if self.recent.len() > self.window + 1 {
            self.recent.pop_front();
        }
        if self.recent.len() <= self.window {
            return None;
        }
        let (&(old_step, old_loss), &(new_step, new_loss)) =
            (self.recent.front()?, self.recent.back()?);
        let d = (old_loss - new_loss) / new_step.saturating_sub(old_step).max(1) as f64;
        self.drop = Some(d);
        self.max_drop = self.max_drop.max(d);
        if self.max_drop > 0.0 && d < self.fraction * self.max_drop {
            if self.run == 0 {
                self.run_start = Some(step);
            }
            self.run += 1;
            if self.run >= self.patience {
                self.knee = self.run_start;
            }
        } else {
            self.run = 0;
            self.run_start = None;
        }
        self.knee
    }

    /// The knee, once detected.
    pub fn knee(&self) -> Option<u64> {
        self.knee
    }

    /// The last drop per step `D` over the window.
    pub fn drop_per_step(&self) -> Option<f64> {
        self.drop
    }

    /// The largest drop per step `M` so far.
    pub fn max_drop(&self) -> f64 {
        self.max_drop
    }
}

// ---------------------------------------------------------------------------------------------
// Small dense solvers (see the module docs for why they are hand-written).

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// Applies the Householder reflection `I − 2 v vᵀ / vᵀv` to `x`.
fn reflect(v: &[f64], vv: f64, x: &mut [f64]) {
    let s = 2.0 * dot(v, x) / vv;
    x.iter_mut().zip(v).for_each(|(xi, vi)| *xi -= s * vi);
}

/// `min ‖A x − b‖` over the columns `cols` by Householder QR; `None` if there are fewer rows
/// than columns or the columns are numerically rank-deficient.
fn lstsq(cols: &[&[f64]], b: &[f64]) -> Option<Vec<f64>> {
    let (n, k) = (b.len(), cols.len());
    if k == 0 || n < k {
        return None;
    }
    let mut a: Vec<Vec<f64>> = cols.iter().map(|c| c.to_vec()).collect();
    let mut y = b.to_vec();
    for j in 0..k {
        let col_norm = norm(&a[j][j..]);
        if !(col_norm > 0.0 && col_norm.is_finite()) {
            return None;
        }
        let alpha = if a[j][j] > 0.0 { -col_norm } else { col_norm };
        let mut v = a[j][j..].to_vec();
        v[0] -= alpha;
        let vv = dot(&v, &v);
        if vv > 0.0 {
            for col in a.iter_mut().skip(j) {
                reflect(&v, vv, &mut col[j..]);
            }
            reflect(&v, vv, &mut y[j..]);
        }
    }
    // R[i][j] = a[j][i] for i ≤ j.
    let max_diag = (0..k).map(|j| a[j][j].abs()).fold(0.0, f64::max);
    let mut x = vec![0.0; k];
    for j in (0..k).rev() {
        let r_jj = a[j][j];
        if r_jj.abs() <= 1e-12 * max_diag {
            return None;
        }
        let tail: f64 = (j + 1..k).map(|c| a[c][j] * x[c]).sum();
        x[j] = (y[j] - tail) / r_jj;
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Non-negative least squares `min ‖A x − b‖, x ≥ 0` (Lawson–Hanson active set), on columns
/// scaled to unit norm (a positive scaling keeps the constraint and helps the conditioning).
/// Zero or non-finite columns get `x = 0`.
fn nnls(cols: &[Vec<f64>], b: &[f64]) -> Vec<f64> {
    let k = cols.len();
    let scale: Vec<f64> = cols.iter().map(|c| norm(c)).collect();
    let mut usable: Vec<bool> = scale.iter().map(|s| *s > 0.0 && s.is_finite()).collect();
    let a: Vec<Vec<f64>> = cols
        .iter()
        .zip(&scale)
        .zip(&usable)
        .map(|((c, &s), &ok)| {
            if ok {
                c.iter().map(|v| v / s).collect()
            } else {
                vec![0.0; c.len()]
            }
        })
        .collect();
    let mut x = vec![0.0; k];
    let mut passive = vec![false; k];
    let tol = 1e-12 * norm(b).max(f64::MIN_POSITIVE);
    let max_iter = 8 * k + 8;
    for _ in 0..max_iter {
        let mut r = b.to_vec();
        for (col, &xj) in a.iter().zip(&x) {
            if xj != 0.0 {
                r.iter_mut().zip(col).for_each(|(ri, ci)| *ri -= xj * ci);
            }
        }
        let w: Vec<f64> = a.iter().map(|c| dot(c, &r)).collect();
        let Some(j) = (0..k)
            .filter(|&j| usable[j] && !passive[j] && w[j] > tol)
            .max_by(|&i, &j| w[i].total_cmp(&w[j]))
        else {
            break;
        };
        passive[j] = true;
        for _ in 0..max_iter {
            let idx: Vec<usize> = (0..k).filter(|&i| passive[i]).collect();
            let sub: Vec<&[f64]> = idx.iter().map(|&i| a[i].as_slice()).collect();
            let Some(z) = lstsq(&sub, b) else {
                // The new column is dependent on the passive ones: never try it again.
                passive[j] = false;
                usable[j] = false;
                break;
            };
            if z.iter().all(|&v| v > 0.0) {
                x.fill(0.0);
                idx.iter().zip(&z).for_each(|(&i, &v)| x[i] = v);
                break;
            }
            // Move from x towards z until the first passive coefficient reaches 0.
            let step = idx
                .iter()
                .zip(&z)
                .filter(|&(_, &zi)| zi <= 0.0)
                .map(|(&i, &zi)| x[i] / (x[i] - zi))
                .fold(1.0, f64::min);
            for (&i, &zi) in idx.iter().zip(&z) {
                x[i] += step * (zi - x[i]);
                if x[i] <= 0.0 || (zi <= 0.0 && x[i] <= 1e-15) {
                    x[i] = 0.0;
                    passive[i] = false;
                }
            }
        }
    }
    x.iter()
        .zip(&scale)
        .zip(&usable)
        .map(|((&v, &s), &ok)| if ok { (v / s).max(0.0) } else { 0.0 })
        .collect()
}

/// Solves a small dense system by Gaussian elimination with partial pivoting.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let m = b.len();
    for col in 0..m {
        let pivot = (col..m).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col] == 0.0 || a[pivot][col].is_nan() {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..m {
            let f = a[row][col] / a[col][col];
            if f != 0.0 {
                let (upper, lower) = a.split_at_mut(row);
                lower[0]
                    .iter_mut()
                    .zip(&upper[col])
                    .skip(col)
                    .for_each(|(x, p)| *x -= f * p);
                b[row] -= f * b[col];
            }
        }
    }
    let mut x = vec![0.0; m];
    for row in (0..m).rev() {
        let tail: f64 = (row + 1..m).map(|c| a[row][c] * x[c]).sum();
        x[row] = (b[row] - tail) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// A four-coefficient curve: its value at `t` and the gradient in the coefficients.
type CurveFn = fn(&[f64; 4], f64) -> (f64, [f64; 4]);

/// Starting coefficients for a fit with their error, best first.
type Candidates = Vec<([f64; 4], f64)>;

/// Sum of squared relative residuals `(f(t) − y) / y`; infinite if the curve is not finite
/// somewhere.
fn sse(model: CurveFn, p: &[f64; 4], points: &[(f64, f64)]) -> f64 {
    let mut total = 0.0;
    for &(t, y) in points {
        let r = model(p, t).0 / y - 1.0;
        if !r.is_finite() {
            return f64::INFINITY;
        }
        total += r * r;
    }
    total
}

/// Projected Levenberg–Marquardt on the squared relative error, all coefficients ≥ 0. Coefficients at 0
/// whose gradient points below 0 are held fixed for the step; the step is clamped at 0 and
/// accepted only if it lowers the error. Returns the coefficients and their error.
fn refine(model: CurveFn, start: [f64; 4], points: &[(f64, f64)]) -> ([f64; 4], f64) {
    let mut p = start;
    let mut cost = sse(model, &p, points);
    if !cost.is_finite() {
        return (p, cost);
    }
    let mut lambda = 1e-3;
    for _ in 0..400 {
        if cost == 0.0 {
            break;
        }
        let mut jtj = [[0.0; 4]; 4];
        let mut g = [0.0; 4];
        for &(t, y) in points {
            let (f, mut d) = model(&p, t);
            let r = f / y - 1.0;
            d.iter_mut().for_each(|v| *v /= y);
            for a in 0..4 {
                g[a] += d[a] * r;
                for b in 0..4 {
                    jtj[a][b] += d[a] * d[b];
                }
            }
        }
        let free: Vec<usize> = (0..4).filter(|&j| !(p[j] <= 0.0 && g[j] >= 0.0)).collect();
        if free.is_empty() {
            break;
        }
        let max_diag = free.iter().map(|&j| jtj[j][j]).fold(0.0, f64::max);
        if !(max_diag > 0.0 && max_diag.is_finite()) {
            break;
        }
        let mut accepted = false;
        while lambda < 1e12 {
            let mat: Vec<Vec<f64>> = free
                .iter()
                .map(|&a| {
                    free.iter()
                        .map(|&b| {
                            let damp = if a == b {
                                lambda * jtj[a][a].max(1e-12 * max_diag)
                            } else {
                                0.0
                            };
                            jtj[a][b] + damp
                        })
                        .collect()
                })
                .collect();
            let rhs: Vec<f64> = free.iter().map(|&j| -g[j]).collect();
            if let Some(delta) = solve(mat, rhs) {
                let mut q = p;
                free.iter()
                    .zip(&delta)
                    .for_each(|(&j, &dj)| q[j] = (p[j] + dj).max(0.0));
                let c = sse(model, &q, points);
                if c < cost {
                    p = q;
                    cost = c;
                    lambda = (lambda / 3.0).max(1e-12);
                    accepted = true;
                    break;
                }
            }
            lambda *= 4.0;
        }
        if !accepted {
            break;
        }
    }
    (p, cost)
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    }
}

/// The fewest points a curve fit accepts.
const MIN_CURVE_POINTS: usize = 6;

/// Residuals beyond this many robust σ are outliers.
const OUTLIER_SIGMAS: f64 = 5.0;

fn check_curve_points(what: &'static str, points: &[(f64, f64)]) -> Result<f64, TunerError> {
    if points.len() < MIN_CURVE_POINTS {
        return Err(TunerError::NotEnoughPoints {
            what,
            needed: MIN_CURVE_POINTS,
            got: points.len(),
        });
    }
    let mut min_value = f64::INFINITY;
    for &(t, value) in points {
        let bad = |reason| TunerError::InvalidPoint {
            what,
            t,
            value,
            reason,
        };
        if !(t.is_finite() && t >= 0.0) {
            return Err(bad("t must be finite and non-negative"));
        }
        if !(value.is_finite() && value > 0.0) {
            return Err(bad("the loss must be finite and positive"));
        }
        min_value = min_value.min(value);
    }
    Ok(min_value)
}

/// Fits `model` from the grid's `candidates` (best first), refines the best few, drops outliers
/// and refits once.
fn fit_curve(
    model: CurveFn,
    points: &[(f64, f64)],
    candidates: fn(&[(f64, f64)]) -> Candidates,
) -> [f64; 4] {
    let fit_once = |pts: &[(f64, f64)]| -> ([f64; 4], f64) {
        candidates(pts)
            .into_iter()
            .take(4)
            .map(|(start, _)| refine(model, start, pts))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or(([0.0; 4], f64::INFINITY))
    };
    let (p, _) = fit_once(points);
    let residuals: Vec<f64> = points
        .iter()
        .map(|&(t, y)| model(&p, t).0 / y - 1.0)
        .collect();
    let mut abs: Vec<f64> = residuals.iter().map(|r| r.abs()).collect();
    let sigma = 1.4826 * median(&mut abs);
    if !(sigma > 0.0 && sigma.is_finite()) {
        return p;
    }
    let kept: Vec<(f64, f64)> = points
        .iter()
        .zip(&residuals)
        .filter(|(_, r)| r.abs() <= OUTLIER_SIGMAS * sigma)
        .map(|(pt, _)| *pt)
        .collect();
    if kept.len() == points.len() || kept.len() < MIN_CURVE_POINTS {
        return p;
    }
    let (q, _) = fit_once(&kept);
    q
}

/// Sorts grid candidates by their error, dropping unusable ones.
fn best_first(mut candidates: Candidates) -> Candidates {
    candidates.retain(|c| c.1.is_finite());
    candidates.sort_by(|a, b| a.1.total_cmp(&b.1));
    candidates
}

fn rmse(model: CurveFn, p: &[f64; 4], points: &[(f64, f64)]) -> f64 {
    if points.is_empty() {
        return f64::NAN;
    }
    let total: f64 = points
        .iter()
        .map(|&(t, y)| (model(p, t).0 - y).powi(2))
        .sum();
    (total / points.len() as f64).sqrt()
}

// ---------------------------------------------------------------------------------------------
// 3. The reference curve

/// The full fleet's loss curve `L_P(t) = 1 / (θ0·t^θ2 + θ1) + θ3`, all θ ≥ 0.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReferenceCurve {
    /// `[θ0, θ1, θ2, θ3]`.
    pub theta: [f64; 4],
}

fn reference_model(p: &[f64; 4], t: f64) -> (f64, [f64; 4]) {
    let [a, b, c, _] = *p;
    let u = t.powf(c);
    let den = a * u + b;
    let q = -1.0 / (den * den);
    let ln_t = if t > 0.0 { t.ln() } else { 0.0 };
    (1.0 / den + p[3], [q * u, q, q * a * u * ln_t, 1.0])
}

/// θ2 from 0.02 to 4 (geometric) × θ3 from 0 to 0.99·min loss; θ0, θ1 by weighted NNLS.
fn reference_candidates(points: &[(f64, f64)]) -> Candidates {
    const N2: usize = 48;
    const N3: usize = 40;
    let min_loss = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let mut out = Vec::with_capacity(N2 * N3);
    for i in 0..N2 {
        let theta2 = 0.02 * 200f64.powf(i as f64 / (N2 - 1) as f64);
        let u: Vec<f64> = points.iter().map(|p| p.0.powf(theta2)).collect();
        for j in 0..N3 {
            let theta3 = 0.99 * min_loss * j as f64 / (N3 - 1) as f64;
            let w: Vec<f64> = points
                .iter()
                .map(|p| (p.1 - theta3).powi(2) / p.1)
                .collect();
            let cols = vec![w.iter().zip(&u).map(|(w, u)| w * u).collect(), w.clone()];
            let b: Vec<f64> = points.iter().map(|p| (p.1 - theta3) / p.1).collect();
            let x = nnls(&cols, &b);
            if x[0] == 0.0 && x[1] == 0.0 {
                continue;
            }
            let theta = [x[0], x[1], theta2, theta3];
            out.push((theta, sse(reference_model, &theta, points)));
        }
    }
    best_first(out)
}

impl ReferenceCurve {
    /// `L_P(t)`.
    pub fn eval(&self, t: f64) -> f64 {
        reference_model(&self.theta, t).0
    }

    /// Fits the curve to `(t, loss)` points (t ≥ 0, loss > 0, at least 6 points) by constrained
    /// least squares; see the [module docs](self#fitting).
    pub fn fit(points: &[(f64, f64)]) -> Result<Self, TunerError> {
        check_curve_points("reference curve", points)?;
        Ok(Self {
            theta: fit_curve(reference_model, points, reference_candidates),
        })
    }

    /// Root-mean-square error of the curve on `points` (NaN if empty).
    pub fn rmse(&self, points: &[(f64, f64)]) -> f64 {
        rmse(reference_model, &self.theta, points)
    }
}

// ---------------------------------------------------------------------------------------------
// 4. The slow-convergence curve

/// The current (smaller) fleet's loss curve `ℓ_p(t) = 1 / (c0·t² + c1·t + c2) + c3`, all c ≥ 0,
/// with `t` the steps since the last removal.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SlowCurve {
    /// `[c0, c1, c2, c3]`.
    pub c: [f64; 4],
}

fn slow_model(p: &[f64; 4], t: f64) -> (f64, [f64; 4]) {
    let den = (p[0] * t + p[1]) * t + p[2];
    let q = -1.0 / (den * den);
    (1.0 / den + p[3], [q * t * t, q * t, q, 1.0])
}

/// c3 from 0 to 0.995·min loss; c0, c1, c2 by weighted NNLS.
fn slow_candidates(points: &[(f64, f64)]) -> Candidates {
    const N3: usize = 100;
    let min_loss = points.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let mut out = Vec::with_capacity(N3);
    for j in 0..N3 {
        let c3 = 0.995 * min_loss * j as f64 / (N3 - 1) as f64;
        let w: Vec<f64> = points.iter().map(|p| (p.1 - c3).powi(2) / p.1).collect();
        let cols = vec![
            points.iter().zip(&w).map(|(p, w)| w * p.0 * p.0).collect(),
            points.iter().zip(&w).map(|(p, w)| w * p.0).collect(),
            w.clone(),
        ];
        let b: Vec<f64> = points.iter().map(|p| (p.1 - c3) / p.1).collect();
        let x = nnls(&cols, &b);
        if x.iter().all(|&v| v == 0.0) {
            continue;
        }
        let c = [x[0], x[1], x[2], c3];
        out.push((c, sse(slow_model, &c, points)));
    }
    best_first(out)
}

impl SlowCurve {
    /// `ℓ_p(t)`.
    pub fn eval(&self, t: f64) -> f64 {
        slow_model(&self.c, t).0
    }

    /// Fits the curve to `(t, loss)` points (t ≥ 0, loss > 0, at least 6 points) by constrained
    /// least squares; see the [module docs](self#fitting).
    pub fn fit(points: &[(f64, f64)]) -> Result<Self, TunerError> {
        check_curve_points("slow curve", points)?;
        Ok(Self {
            c: fit_curve(slow_model, points, slow_candidates),
        })
    }

    /// Root-mean-square error of the curve on `points` (NaN if empty).
    pub fn rmse(&self, points: &[(f64, f64)]) -> f64 {
        rmse(slow_model, &self.c, points)
    }
}

// ---------------------------------------------------------------------------------------------
// 5. The step duration

/// The duration of a step of p workers, `d_p = c0 + (p − 1)·c1 + p·c2` seconds, all c ≥ 0.
///
/// Only `c0 + c2` and `c1 + c2` are identifiable; fits return `c2 = 0` (see the
/// [module docs](self#the-step-duration-model-is-identifiable-only-up-to-two-numbers)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepDurationModel {
    /// `[c0, c1, c2]`, seconds.
    pub c: [f64; 3],
    /// Samples the fit used.
    pub samples: usize,
    /// Samples dropped as outliers.
    pub outliers: usize,
}

impl StepDurationModel {
    /// A sample more than this factor away from the median of its worker count (above, or
    /// below by the inverse factor) is an outlier: a cold start, a throttled function, a retry.
    pub const OUTLIER_FACTOR: f64 = 3.0;

    /// Fits the model to `(workers, seconds)` samples by non-negative least squares, after
    /// dropping, per worker count, samples above 3× or below ⅓ of that count's median. With one
    /// worker count only, `c0` is the mean and `c1 = c2 = 0`.
    pub fn fit(samples: &[(u32, f64)]) -> Result<Self, TunerError> {
        let mut groups: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for &(p, d) in samples {
            if p == 0 || !(d.is_finite() && d >= 0.0) {
                return Err(TunerError::InvalidPoint {
                    what: "step duration",
                    t: f64::from(p),
                    value: d,
                    reason: "needs at least one worker and a finite, non-negative duration",
                });
            }
            groups.entry(p).or_default().push(d);
        }
        let mut kept: Vec<(f64, f64)> = Vec::with_capacity(samples.len());
        for (&p, durations) in &groups {
            let med = median(&mut durations.clone());
            kept.extend(
                durations
                    .iter()
                    .filter(|&&d| {
                        d <= Self::OUTLIER_FACTOR * med && d * Self::OUTLIER_FACTOR >= med
                    })
                    .map(|&d| (f64::from(p), d)),
            );
        }
        if kept.is_empty() {
            return Err(TunerError::NotEnoughPoints {
                what: "step duration",
                needed: 1,
                got: 0,
            });
        }
        let c = if groups.len() == 1 {
            [
                kept.iter().map(|s| s.1).sum::<f64>() / kept.len() as f64,
                0.0,
                0.0,
            ]
        } else {
            let cols = vec![
                vec![1.0; kept.len()],
                kept.iter().map(|s| s.0 - 1.0).collect(),
            ];
            let b: Vec<f64> = kept.iter().map(|s| s.1).collect();
            let x = nnls(&cols, &b);
            [x[0], x[1], 0.0]
        };
        Ok(Self {
            c,
            samples: kept.len(),
            outliers: samples.len() - kept.len(),
        })
    }

    /// The predicted duration of a step of `workers` workers, seconds.
    pub fn predict(&self, workers: u32) -> f64 {
        let p = f64::from(workers);
        self.c[0] + (p - 1.0) * self.c[1] + p * self.c[2]
    }
}

// ---------------------------------------------------------------------------------------------
// 6. The tuner

/// Settings of the [`ScaleInTuner`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TunerConfig {
    /// S in [0, 1]: remove a worker when `s_Δ < S` (default 0.05, see the
    /// [module docs](self#the-decision)).
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
}

impl Default for TunerConfig {
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
        }
    }
}

impl TunerConfig {
    /// Checks every setting's range.
    pub fn validate(&self) -> Result<(), TunerError> {
        let err = |field, value: f64, reason| {
            Err(TunerError::InvalidConfig {
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
        Ewma::new(self.ewma_alpha)?;
        KneeDetector::new(self.knee_window, self.knee_fraction, self.knee_patience).map(|_| ())
    }
}

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
}

/// The scale-in auto-tuner as a pure state machine (DESIGN §6 steps 1–5).
///
/// Each step the supervisor calls [`observe`](Self::observe) then [`decide`](Self::decide);
/// when a decision removes a worker, it picks one with [`pick_worker_to_remove`], removes it and
/// calls [`notify_removed`](Self::notify_removed). The state is serialisable, so that a
/// supervisor can checkpoint it between invocations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleInTuner {
    config: TunerConfig,
    initial_workers: u32,
    workers: u32,
    ewma: Ewma,
    knee: KneeDetector,
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
    durations: BTreeMap<u32, VecDeque<f64>>,
    last_decision_s: Option<f64>,
}

impl ScaleInTuner {
    /// A tuner for a run that starts with `initial_workers` (P) workers.
    pub fn new(config: TunerConfig, initial_workers: u32) -> Result<Self, TunerError> {
        config.validate()?;
        if initial_workers == 0 {
            return Err(TunerError::InvalidConfig {
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
            durations: BTreeMap::new(),
            last_decision_s: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &TunerConfig {
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

    /// The knee, once detected.
    pub fn knee_step(&self) -> Option<u64> {
        self.knee.knee()
    }

    /// The EWMA of the loss.
    pub fn smoothed_loss(&self) -> Option<f64> {
        self.ewma.value()
    }

    /// The reference curve, once fitted (by a decision, or at the first removal).
    pub fn reference(&self) -> Option<&ReferenceCurve> {
        self.reference.as_ref().map(|r| &r.0)
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
    ) -> Result<(), TunerError> {
        let invalid = |reason| Err(TunerError::InvalidObservation { step, reason });
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
            return Err(TunerError::StepNotIncreasing { step, last });
        }
        if self.first_step.is_none() {
            self.first_step = Some(step);
            self.warmup_until = match self.config.warmup_steps {
                0 => None,
                w => step.checked_add(u64::from(w) - 1),
            };
        }
        self.last_step = Some(step);
        let smoothed = self.ewma.update(loss);
        self.knee.update(step, smoothed);

        let in_warmup = self.warmup_until.is_some_and(|w| step <= w);
        if self.removal_step.is_none() {
            self.reference_points.push((step, loss));
        } else if !in_warmup {
            self.slow_points.push((step, loss));
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

    /// Records that the fleet shrank to `new_workers` after `step`: later steps run with
    /// `new_workers`, the next `warmup_steps` are not used, and the slow curve restarts from
    /// this step. The first removal freezes the reference curve (fitting it now if no decision
    /// has yet).
    pub fn notify_removed(&mut self, step: u64, new_workers: u32) -> Result<(), TunerError> {
        if new_workers == 0 || new_workers >= self.workers {
            return Err(TunerError::InvalidRemoval {
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

    fn fit_reference(&self) -> Option<(ReferenceCurve, f64)> {
        let first = self.first_step?;
        let points: Vec<(f64, f64)> = self
            .reference_points
            .iter()
            .map(|&(s, l)| ((s - first + 1) as f64, l))
            .collect();
        if points.len() < self.config.min_fit_points {
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

    /// Called by the supervisor every step with its clock in seconds. Returns a decision at most
    /// once per `interval_s`, only after the knee and while `workers > min_workers`; `None` when
    /// it is not yet time, or the data are not yet enough to decide (which does not use up the
    /// interval).
    pub fn decide(&mut self, now_s: f64) -> Option<ScaleInDecision> {
        let knee_step = self.knee.knee()?;
        let step = self.last_step?;
        let first = self.first_step?;
        if self.workers <= self.config.min_workers || !now_s.is_finite() {
            return None;
        }
        if let Some(last) = self.last_decision_s
            && now_s - last < self.config.interval_s
        {
            return None;
        }
        if self.removal_step.is_none() {
            // Still the full fleet: refit the reference on everything so far.
            self.reference = Some(self.fit_reference()?);
        }
        let (reference, reference_rmse) = self.reference?;
        let duration = self.duration_model()?;
        let (p, full) = (self.workers, self.initial_workers);
        let (d_p, d_full) = (duration.predict(p), duration.predict(full));
        if !(d_p > 0.0 && d_full > 0.0) {
            return None;
        }
        let horizon = self.config.horizon_s;
        let steps_ahead_full = (horizon / d_full).floor() as u64;
        let t_ref = (step - first + 1) as f64;
        let predicted_loss_full = reference.eval(t_ref + steps_ahead_full as f64);

        let (basis, slow, slow_rmse, steps_ahead_p, predicted_loss_p) = match self.removal_step {
            None => (
                DecisionBasis::StallBound,
                None,
                None,
                0,
                reference.eval(t_ref),
            ),
            Some(removed) => {
                if self.slow_points.len() < self.config.min_fit_points {
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
                    DecisionBasis::SlowCurve,
                    Some(curve),
                    Some(curve.rmse(&points)),
                    ahead,
                    predicted,
                )
            }
        };
        let s_delta = (predicted_loss_p - predicted_loss_full) / predicted_loss_full;
        if !s_delta.is_finite() {
            return None;
        }
        let remove = s_delta < self.config.threshold;
        self.last_decision_s = Some(now_s);
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
        })
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Which worker leaves

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

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    use super::*;

    /// `v` with multiplicative Gaussian noise of relative size `rel`.
    fn noisy(rng: &mut StdRng, v: f64, rel: f64) -> f64 {
        v * (1.0 + rel * rng.sample::<f64, _>(StandardNormal))
    }

    /// Largest relative error of `fitted` against `truth` over `ts`.
    fn max_rel_err(
        fitted: impl Fn(f64) -> f64,
        truth: impl Fn(f64) -> f64,
        ts: impl Iterator<Item = u64>,
    ) -> f64 {
        ts.map(|t| (fitted(t as f64) / truth(t as f64) - 1.0).abs())
            .fold(0.0, f64::max)
    }

    // --- solvers -------------------------------------------------------------------------------

    #[test]
    fn tuner_lstsq_solves_an_exact_system() {
        let cols = [vec![1.0, 1.0, 1.0, 1.0], vec![0.0, 1.0, 2.0, 3.0]];
        let b: Vec<f64> = (0..4).map(|i| 2.0 + 0.5 * i as f64).collect();
        let refs: Vec<&[f64]> = cols.iter().map(|c| c.as_slice()).collect();
        let x = lstsq(&refs, &b).unwrap();
        assert!(
            (x[0] - 2.0).abs() < 1e-12 && (x[1] - 0.5).abs() < 1e-12,
            "{x:?}"
        );
        // Dependent columns are refused.
        let dep = [vec![1.0, 2.0, 3.0], vec![2.0, 4.0, 6.0]];
        let refs: Vec<&[f64]> = dep.iter().map(|c| c.as_slice()).collect();
        assert!(lstsq(&refs, &[1.0, 2.0, 3.0]).is_none());
    }

    /// The reference answer of scipy's (Lawson–Hanson) NNLS on a small problem.
    #[test]
    fn tuner_nnls_matches_a_known_answer() {
        let cols = vec![
            vec![1.0, 1.0, 0.9, 0.0],
            vec![0.5, 0.6, 0.5, 0.0],
            vec![0.0, 0.0, 0.1, 1.0],
        ];
        let x = nnls(&cols, &[2.0, 1.0, 1.0, 0.5]);
        let expected = [1.37279152, 0.0, 0.47173145];
        for (got, want) in x.iter().zip(expected) {
            assert!((got - want).abs() < 1e-7, "{x:?}");
        }
    }

    /// Random NNLS problems satisfy the KKT conditions: x ≥ 0, Aᵀ(b − Ax) ≤ 0 and = 0 where
    /// x > 0; and some of them have an unconstrained solution with a negative coefficient.
    #[test]
    fn tuner_nnls_satisfies_kkt() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut constrained = 0;
        for trial in 0..400 {
            // Half the problems are like the curve fits' — columns t^a, strongly correlated, and
            // a target mixing them with signed weights — where adding a column often drives an
            // earlier one below 0 (Lawson–Hanson's inner loop); half are random.
            let (n, k) = (rng.random_range(6..30), rng.random_range(1..6));
            let cols: Vec<Vec<f64>> = if trial % 2 == 0 {
                (0..k)
                    .map(|_| {
                        let a: f64 = rng.random_range(0.0..2.0);
                        (1..=n).map(|t| (t as f64).powf(a)).collect()
                    })
                    .collect()
            } else {
                (0..k)
                    .map(|_| (0..n).map(|_| rng.random_range(-1.0..1.0)).collect())
                    .collect()
            };
            let mut b: Vec<f64> = (0..n).map(|_| rng.random_range(-0.1..0.1)).collect();
            for c in &cols {
                let weight: f64 = rng.random_range(-1.0..1.0);
                b.iter_mut().zip(c).for_each(|(bi, ci)| *bi += weight * ci);
            }
            let x = nnls(&cols, &b);
            let mut r = b.clone();
            for (c, &xj) in cols.iter().zip(&x) {
                r.iter_mut().zip(c).for_each(|(ri, ci)| *ri -= xj * ci);
            }
            for (c, &xj) in cols.iter().zip(&x) {
                let w = dot(c, &r);
                assert!(xj >= 0.0);
                assert!(w < 1e-9, "gradient {w} points into the feasible set");
                if xj > 0.0 {
                    assert!(w.abs() < 1e-9, "gradient {w} at a free coefficient");
                }
            }
            let refs: Vec<&[f64]> = cols.iter().map(|c| c.as_slice()).collect();
            if lstsq(&refs, &b).is_some_and(|u| u.iter().any(|&v| v < 0.0)) {
                constrained += 1;
            }
        }
        assert!(
            constrained > 100,
            "only {constrained} problems exercised the bound"
        );
    }

    // --- smoothing and knee ----------------------------------------------------------------------

    #[test]
    fn tuner_ewma_follows_its_recurrence() {
        let mut e = Ewma::new(0.25).unwrap();
        assert_eq!(e.value(), None);
        assert_eq!(e.update(4.0), 4.0);
        assert_eq!(e.update(8.0), 5.0);
        assert_eq!(e.update(1.0), 4.0);
        e.reset();
        assert_eq!(e.update(2.0), 2.0);
        assert!(Ewma::new(0.0).is_err());
        assert!(Ewma::new(1.5).is_err());
        assert!(Ewma::new(f64::NAN).is_err());
    }

    #[test]
    fn tuner_knee_on_a_noiseless_curve_follows_the_rule() {
        // L(t) = 1/(0.05 t^0.8 + 1.2) + 0.3 fed raw (no EWMA): the knee is the first step t
        // with (L(t−W) − L(t))/W < 5 % of the largest such drop, which is the first one.
        let truth = ReferenceCurve {
            theta: [0.05, 1.2, 0.8, 0.3],
        };
        let (w, f) = (20u64, 0.05);
        let mut k = KneeDetector::new(w as u32, f, 1).unwrap();
        let mut found = None;
        for t in 1..=1000u64 {
            if let Some(knee) = k.update(t, truth.eval(t as f64)) {
                found = Some(knee);
                break;
            }
        }
        let drop = |t: u64| (truth.eval((t - w) as f64) - truth.eval(t as f64)) / w as f64;
        let max = drop(w + 1);
        let expected = (w + 1..=1000).find(|&t| drop(t) < f * max).unwrap();
        assert_eq!(found, Some(expected));
        assert!((k.max_drop() - max).abs() < 1e-15);

        // Patience delays the report but not the step.
        let mut k = KneeDetector::new(w as u32, f, 10).unwrap();
        let mut reported = None;
        for t in 1..=1000u64 {
            if k.update(t, truth.eval(t as f64)).is_some() {
                reported = Some(t);
                break;
            }
        }
        assert_eq!(k.knee(), Some(expected));
        assert_eq!(reported, Some(expected + 9));
    }

    #[test]
    fn tuner_knee_ignores_noise_on_a_steep_line_and_finds_a_flat_one() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut ewma = Ewma::new(0.2).unwrap();
        let mut k = KneeDetector::new(20, 0.05, 10).unwrap();
        for t in 1..=1000u64 {
            let loss = noisy(&mut rng, 2.5 - 0.002 * t as f64, 0.01);
            assert_eq!(k.update(t, ewma.update(loss)), None, "false knee at {t}");
        }
        // The same line, then flat: the knee is within a window of the corner (t = 500).
        let mut ewma = Ewma::new(0.2).unwrap();
        let mut k = KneeDetector::new(20, 0.05, 10).unwrap();
        for t in 1..=1000u64 {
            let loss = noisy(&mut rng, 2.5 - 0.002 * t.min(500) as f64, 0.01);
            k.update(t, ewma.update(loss));
        }
        let knee = k.knee().expect("a knee");
        assert!((500..=540).contains(&knee), "knee at {knee}");
    }

    // --- reference curve -------------------------------------------------------------------------

    const REFERENCE_CASES: [[f64; 4]; 4] = [
        [0.05, 1.2, 0.8, 0.3],
        [0.02, 2.0, 1.0, 0.1],
        [0.3, 1.0, 0.5, 0.5],
        [0.01, 1.5, 1.3, 0.2],
    ];

    /// The acceptance criterion: fitted on t = 1..=300 with 1 % noise, the curve predicts the
    /// noiseless one at t = 301..=500 within 2 %.
    #[test]
    fn tuner_reference_fit_predicts_200_steps_ahead() {
        let mut worst: f64 = 0.0;
        for (case, theta) in REFERENCE_CASES.iter().enumerate() {
            let truth = ReferenceCurve { theta: *theta };
            for seed in 0..3 {
                let mut rng = StdRng::seed_from_u64(100 * case as u64 + seed);
                let points: Vec<(f64, f64)> = (1..=300)
                    .map(|t| (t as f64, noisy(&mut rng, truth.eval(t as f64), 0.01)))
                    .collect();
                let fit = ReferenceCurve::fit(&points).unwrap();
                assert!(fit.theta.iter().all(|&v| v >= 0.0), "{fit:?}");
                let err = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), 301..=500);
                let in_range = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), 1..=300);
                eprintln!(
                    "reference {theta:?} seed {seed}: fitted {:?}, max error {:.3} % in range, \
                     {:.3} % over the next 200 steps",
                    fit.theta,
                    100.0 * in_range,
                    100.0 * err
                );
                assert!(err < 0.02, "{theta:?} seed {seed}: {err}");
                worst = worst.max(err);
            }
        }
        eprintln!(
            "reference: worst error 200 steps ahead {:.3} %",
            100.0 * worst
        );
    }

    #[test]
    fn tuner_reference_fit_is_exact_on_exact_data_and_drops_outliers() {
        let truth = ReferenceCurve {
            theta: [0.05, 1.2, 0.8, 0.3],
        };
        let mut points: Vec<(f64, f64)> = (1..=300)
            .map(|t| (t as f64, truth.eval(t as f64)))
            .collect();
        let fit = ReferenceCurve::fit(&points).unwrap();
        let err = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), 1..=1000);
        assert!(err < 1e-3, "exact data: {err}, {fit:?}");
        // Loss spikes (a bad minibatch) barely move the fit.
        let mut rng = StdRng::seed_from_u64(3);
        for i in (17..300).step_by(37) {
            points[i].1 *= 3.0;
        }
        for p in points.iter_mut() {
            p.1 = noisy(&mut rng, p.1, 0.01);
        }
        let fit = ReferenceCurve::fit(&points).unwrap();
        let err = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), 301..=500);
        eprintln!(
            "reference with 8 spikes ×3: {:.3} % 200 steps ahead",
            100.0 * err
        );
        assert!(err < 0.02, "{err}");
    }

    /// A rising loss would need θ0·θ2 < 0. Every curve with θ ≥ 0 is non-increasing, and the
    /// best non-increasing fit to rising data is a constant: the one of least relative error,
    /// `Σ y⁻¹ / Σ y⁻²`.
    #[test]
    fn tuner_reference_fit_keeps_theta_non_negative() {
        let points: Vec<(f64, f64)> = (1..=100)
            .map(|t| (t as f64, 0.5 + 0.001 * t as f64))
            .collect();
        let fit = ReferenceCurve::fit(&points).unwrap();
        assert!(fit.theta.iter().all(|&v| v >= 0.0), "{fit:?}");
        let mean = points.iter().map(|p| 1.0 / p.1).sum::<f64>()
            / points.iter().map(|p| p.1.powi(-2)).sum::<f64>();
        for t in [1.0, 50.0, 100.0, 1000.0] {
            assert!(
                (fit.eval(t) - mean).abs() < 1e-3,
                "L({t}) = {}",
                fit.eval(t)
            );
        }
    }

    #[test]
    fn tuner_curve_fits_reject_bad_points() {
        let ok: Vec<(f64, f64)> = (1..=10).map(|t| (t as f64, 1.0 / t as f64)).collect();
        assert!(matches!(
            ReferenceCurve::fit(&ok[..5]),
            Err(TunerError::NotEnoughPoints { got: 5, .. })
        ));
        let mut bad = ok.clone();
        bad[3].1 = 0.0;
        assert!(matches!(
            SlowCurve::fit(&bad),
            Err(TunerError::InvalidPoint { .. })
        ));
        bad[3].1 = f64::NAN;
        assert!(ReferenceCurve::fit(&bad).is_err());
        let mut bad = ok;
        bad[0].0 = -1.0;
        assert!(ReferenceCurve::fit(&bad).is_err());
    }

    // --- slow curve ------------------------------------------------------------------------------

    /// Slow-convergence shapes: over t = 6..=800 the first falls 52 %, the last 13 %.
    const SLOW_CASES: [[f64; 4]; 5] = [
        [1e-5, 0.01, 2.0, 0.25],
        [1e-6, 0.002, 2.0, 0.3],
        [0.0, 0.004, 2.5, 0.4],
        [5e-7, 0.003, 1.2, 0.35],
        [2e-6, 0.0, 4.0, 0.2],
    ];

    /// Fits `truth` with 1 % noise on t = 6..=`end` (a 5-step warm-up after a removal) and
    /// returns the largest relative error over t = `end`+1..=`end`+200.
    fn slow_fit_error(truth: &SlowCurve, end: u64, seed: u64) -> (SlowCurve, f64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let points: Vec<(f64, f64)> = (6..=end)
            .map(|t| (t as f64, noisy(&mut rng, truth.eval(t as f64), 0.01)))
            .collect();
        let fit = SlowCurve::fit(&points).unwrap();
        assert!(fit.c.iter().all(|&v| v >= 0.0), "{fit:?}");
        let err = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), end + 1..=end + 200);
        (fit, err)
    }

    /// Fitted on 595 steps with 1 % noise, the curve predicts the noiseless one over the next
    /// 200 steps within 2 %.
    #[test]
    fn tuner_slow_fit_predicts_200_steps_ahead() {
        let mut worst: f64 = 0.0;
        for (case, c) in SLOW_CASES.iter().enumerate() {
            let truth = SlowCurve { c: *c };
            for seed in 0..3 {
                let (fit, err) = slow_fit_error(&truth, 600, 1000 + 100 * case as u64 + seed);
                eprintln!(
                    "slow {c:?} seed {seed}: fitted {:?}, {:.3} % over the next 200 steps",
                    fit.c,
                    100.0 * err
                );
                assert!(err < 0.02, "{c:?} seed {seed}: {err}");
                worst = worst.max(err);
            }
        }
        eprintln!("slow: worst error 200 steps ahead {:.3} %", 100.0 * worst);
    }

    /// On 295 steps the 200-step extrapolation is noisier (the t² and t terms are hard to tell
    /// apart), but its median over noise draws stays below 2 %.
    #[test]
    fn tuner_slow_fit_on_a_short_span_is_right_in_the_median() {
        for (case, c) in SLOW_CASES.iter().enumerate() {
            let truth = SlowCurve { c: *c };
            let mut errs: Vec<f64> = (0..11)
                .map(|seed| slow_fit_error(&truth, 300, 2000 + 100 * case as u64 + seed).1)
                .collect();
            let med = median(&mut errs);
            eprintln!(
                "slow {c:?} on 295 steps: median {:.3} %, max {:.3} % over 11 draws",
                100.0 * med,
                100.0 * errs[10]
            );
            assert!(med < 0.02, "{c:?}: median {med}");
        }
    }

    /// Data from `1/(0.01 t + 1) − 0.1` want c3 = −0.1; the fit keeps every c ≥ 0 and pins
    /// c3 at 0.
    #[test]
    fn tuner_slow_fit_keeps_c_non_negative() {
        let points: Vec<(f64, f64)> = (1..=300)
            .map(|t| (t as f64, 1.0 / (0.01 * t as f64 + 1.0) - 0.1))
            .collect();
        let fit = SlowCurve::fit(&points).unwrap();
        assert!(fit.c.iter().all(|&v| v >= 0.0), "{fit:?}");
        assert_eq!(fit.c[3], 0.0, "{fit:?}");
        // And the best non-negative fit is still a decent description of the data.
        assert!(fit.rmse(&points) < 0.01, "rmse {}", fit.rmse(&points));
    }

    // --- step duration ---------------------------------------------------------------------------

    #[test]
    fn tuner_duration_model_recovers_durations_and_drops_outliers() {
        let c = [0.2, 0.03, 0.01];
        let truth = |p: u32| c[0] + f64::from(p - 1) * c[1] + f64::from(p) * c[2];
        let mut rng = StdRng::seed_from_u64(5);
        let mut samples = Vec::new();
        let mut injected = 0;
        for p in [8u32, 7, 6, 5, 4] {
            for i in 0..40 {
                let mut d = noisy(&mut rng, truth(p), 0.03);
                if i % 13 == 5 {
                    d *= 10.0; // a cold start
                    injected += 1;
                }
                samples.push((p, d));
            }
        }
        let m = StepDurationModel::fit(&samples).unwrap();
        assert_eq!(m.outliers, injected);
        assert_eq!(m.samples, samples.len() - injected);
        // Only d_1 = c0 + c2 and the slope c1 + c2 are identifiable; c2 is reported as 0.
        assert_eq!(m.c[2], 0.0);
        assert!((m.c[0] + m.c[2] - 0.21).abs() < 0.21 * 0.05, "{m:?}");
        assert!((m.c[1] + m.c[2] - 0.04).abs() < 0.04 * 0.05, "{m:?}");
        for p in 1..=8 {
            let err = (m.predict(p) / truth(p) - 1.0).abs();
            assert!(err < 0.02, "d_{p}: {} vs {}", m.predict(p), truth(p));
        }
        eprintln!("duration model {m:?}");
    }

    #[test]
    fn tuner_duration_model_with_one_worker_count_attributes_everything_to_c0() {
        let samples: Vec<(u32, f64)> = [0.5, 0.52, 0.48, 0.5, 9.0]
            .iter()
            .map(|&d| (8, d))
            .collect();
        let m = StepDurationModel::fit(&samples).unwrap();
        assert_eq!(m.outliers, 1);
        assert_eq!(m.c, [0.5, 0.0, 0.0]);
        assert_eq!(m.predict(7), 0.5);
        assert_eq!(m.predict(8), 0.5);
    }

    /// Durations that fall with p would need c1 + c2 < 0: the slope is pinned at 0 instead.
    #[test]
    fn tuner_duration_model_keeps_c_non_negative() {
        let samples = [(2u32, 1.0), (4, 0.8), (6, 0.6), (8, 0.4)];
        let m = StepDurationModel::fit(&samples).unwrap();
        assert!(m.c.iter().all(|&v| v >= 0.0), "{m:?}");
        assert_eq!(m.c[1], 0.0);
        assert!((m.c[0] - 0.7).abs() < 1e-12, "{m:?}");
        assert!(StepDurationModel::fit(&[]).is_err());
        assert!(StepDurationModel::fit(&[(0, 1.0)]).is_err());
        assert!(StepDurationModel::fit(&[(1, -1.0)]).is_err());
    }

    // --- the tuner -------------------------------------------------------------------------------

    /// A run of the supervisor loop against the tuner.
    struct Run {
        decisions: Vec<ScaleInDecision>,
        knee: Option<u64>,
        final_workers: u32,
        min_workers_seen: u32,
    }

    /// Simulates `steps` steps from P workers. A step of p workers lasts
    /// `0.2 + 0.03 (p − 1) + 0.01 p` s (± 2 %) and advances the curve's clock by `sqrt(p/P)` (fewer
    /// workers make less progress per step); after the n-th removal the loss is multiplied by
    /// `penalty(n)`. The loss has 1 % noise.
    fn simulate(
        curve: impl Fn(f64) -> f64,
        config: TunerConfig,
        initial: u32,
        steps: u64,
        penalty: impl Fn(u32) -> f64,
        seed: u64,
    ) -> Run {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut tuner = ScaleInTuner::new(config, initial).unwrap();
        let (mut workers, mut removals, mut now, mut clock) = (initial, 0u32, 0.0, 0.0);
        let mut run = Run {
            decisions: Vec::new(),
            knee: None,
            final_workers: initial,
            min_workers_seen: initial,
        };
        for step in 1..=steps {
            let p = f64::from(workers);
            let d = noisy(&mut rng, 0.2 + 0.03 * (p - 1.0) + 0.01 * p, 0.02);
            now += d;
            clock += (p / f64::from(initial)).sqrt();
            let loss = noisy(&mut rng, curve(clock) * penalty(removals), 0.01);
            tuner.observe(step, loss, d, workers).unwrap();
            if let Some(decision) = tuner.decide(now) {
                assert_eq!(decision.workers_before, workers);
                if decision.remove {
                    workers -= 1;
                    removals += 1;
                    tuner.notify_removed(step, workers).unwrap();
                }
                run.decisions.push(decision);
            }
            run.min_workers_seen = run.min_workers_seen.min(workers);
        }
        run.knee = tuner.knee_step();
        run.final_workers = tuner.workers();
        run
    }

    fn check_decisions(run: &Run, config: &TunerConfig) {
        for pair in run.decisions.windows(2) {
            assert!(
                pair[1].now_s - pair[0].now_s >= config.interval_s,
                "two decisions {} s apart",
                pair[1].now_s - pair[0].now_s
            );
        }
        for d in &run.decisions {
            // Every decision is consistent with its own record.
            let t_ref = (d.step - d.reference_first_step + 1) as f64;
            assert_eq!(
                d.steps_ahead_full,
                (d.horizon_s / d.duration_full_s).floor() as u64
            );
            assert_eq!(
                d.predicted_loss_full,
                d.reference.eval(t_ref + d.steps_ahead_full as f64)
            );
            match d.basis {
                DecisionBasis::StallBound => {
                    assert_eq!(d.predicted_loss_p, d.reference.eval(t_ref));
                    assert_eq!(d.workers_before, d.initial_workers);
                }
                DecisionBasis::SlowCurve => {
                    let t = (d.step - d.slow_removal_step.unwrap()) as f64;
                    assert_eq!(
                        d.steps_ahead_p,
                        (d.horizon_s / d.duration_p_s).floor() as u64
                    );
                    let slow = d.slow.unwrap();
                    assert_eq!(d.predicted_loss_p, slow.eval(t + d.steps_ahead_p as f64));
                }
            }
            let s = (d.predicted_loss_p - d.predicted_loss_full) / d.predicted_loss_full;
            assert_eq!(d.s_delta, s);
            assert_eq!(d.remove, s < d.threshold);
            assert_eq!(d.workers_after, d.workers_before - u32::from(d.remove));
            assert!(d.workers_after >= config.min_workers);
            assert!(d.step >= d.knee_step);
        }
    }

    fn test_config() -> TunerConfig {
        TunerConfig {
            min_workers: 3,
            ..TunerConfig::default()
        }
    }

    #[test]
    fn tuner_removes_workers_after_the_knee_down_to_the_minimum() {
        let truth = ReferenceCurve {
            theta: [0.05, 1.2, 0.8, 0.3],
        };
        // The slope of the noiseless curve, to judge the knee.
        let slope = |t: f64| truth.eval(t) - truth.eval(t + 1.0);
        let steep_until = (1..).find(|&t| slope(t as f64) < 0.2 * slope(1.0)).unwrap();
        let flat_from = (1..)
            .find(|&t| slope(t as f64) < 0.01 * slope(1.0))
            .unwrap();
        let config = test_config();
        for seed in 0..3 {
            let run = simulate(|t| truth.eval(t), config.clone(), 8, 2000, |_| 1.0, seed);
            let knee = run.knee.expect("a knee");
            eprintln!(
                "seed {seed}: knee at {knee} (slope < 20 % of the first at {steep_until}, \
                 < 1 % at {flat_from}); decisions:"
            );
            for d in &run.decisions {
                eprintln!(
                    "  step {} t={:.1}s {:?} p={} s_Δ={:+.4} remove={} (ℓ {:.4} vs L {:.4}, \
                     d_p {:.3} d_P {:.3}, rmse ref {:.4} slow {:?})",
                    d.step,
                    d.now_s,
                    d.basis,
                    d.workers_before,
                    d.s_delta,
                    d.remove,
                    d.predicted_loss_p,
                    d.predicted_loss_full,
                    d.duration_p_s,
                    d.duration_full_s,
                    d.reference_rmse,
                    d.slow_rmse
                );
            }
            assert!(
                (steep_until..=flat_from).contains(&knee),
                "knee at {knee}, not in [{steep_until}, {flat_from}]"
            );
            check_decisions(&run, &config);
            let first = run.decisions.first().expect("decisions after the knee");
            assert!(first.step >= knee);
            assert_eq!(first.basis, DecisionBasis::StallBound);
            let removals = run.decisions.iter().filter(|d| d.remove).count();
            assert_eq!(removals, 5, "8 → 3 workers");
            assert_eq!(run.final_workers, config.min_workers);
            assert_eq!(run.min_workers_seen, config.min_workers);
        }
    }

    #[test]
    fn tuner_keeps_workers_while_the_loss_falls_steeply() {
        let config = test_config();
        for seed in 0..3 {
            let run = simulate(|t| 2.5 - 0.002 * t, config.clone(), 8, 1000, |_| 1.0, seed);
            assert_eq!(run.knee, None);
            assert!(run.decisions.is_empty());
            assert_eq!(run.final_workers, 8);
        }
    }

    /// A removal that makes the loss 20 % worse than the reference projects s_Δ ≈ 0.2 > S, so
    /// the tuner stops after it.
    #[test]
    fn tuner_stops_removing_when_a_removal_hurts() {
        let truth = ReferenceCurve {
            theta: [0.05, 1.2, 0.8, 0.3],
        };
        let config = test_config();
        let run = simulate(
            |t| truth.eval(t),
            config.clone(),
            8,
            2000,
            |n| if n == 0 { 1.0 } else { 1.2 },
            1,
        );
        check_decisions(&run, &config);
        assert_eq!(run.decisions.iter().filter(|d| d.remove).count(), 1);
        assert_eq!(run.final_workers, 7);
        let later: Vec<_> = run
            .decisions
            .iter()
            .filter(|d| d.basis == DecisionBasis::SlowCurve)
            .collect();
        assert!(later.len() > 10, "{} slow-curve decisions", later.len());
        assert!(later.iter().all(|d| d.s_delta > 0.15 && !d.remove));
    }

    /// With a horizon long enough for the full fleet to still gain more than S, the stall bound
    /// keeps the workers at the knee.
    #[test]
    fn tuner_stall_bound_keeps_workers_over_a_long_horizon() {
        let truth = ReferenceCurve {
            theta: [0.05, 1.2, 0.8, 0.3],
        };
        let config = TunerConfig {
            interval_s: 300.0,
            horizon_s: 300.0,
            ..test_config()
        };
        let run = simulate(|t| truth.eval(t), config.clone(), 8, 1000, |_| 1.0, 2);
        check_decisions(&run, &config);
        let first = run.decisions.first().expect("a decision");
        assert_eq!(first.basis, DecisionBasis::StallBound);
        assert!(first.steps_ahead_full > 500);
        assert!(
            first.s_delta > config.threshold && !first.remove,
            "{first:?}"
        );
    }

    #[test]
    fn tuner_rejects_bad_input() {
        assert!(ScaleInTuner::new(TunerConfig::default(), 0).is_err());
        for bad in [
            TunerConfig {
                threshold: 1.5,
                ..TunerConfig::default()
            },
            TunerConfig {
                horizon_s: 20.0,
                ..TunerConfig::default()
            },
            TunerConfig {
                min_workers: 0,
                ..TunerConfig::default()
            },
            TunerConfig {
                min_fit_points: 3,
                ..TunerConfig::default()
            },
            TunerConfig {
                knee_fraction: 1.0,
                ..TunerConfig::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        let mut tuner = ScaleInTuner::new(TunerConfig::default(), 4).unwrap();
        tuner.observe(1, 0.7, 0.3, 4).unwrap();
        assert!(matches!(
            tuner.observe(1, 0.7, 0.3, 4),
            Err(TunerError::StepNotIncreasing { step: 1, last: 1 })
        ));
        assert!(tuner.observe(2, f64::NAN, 0.3, 4).is_err());
        assert!(tuner.observe(2, 0.7, -1.0, 4).is_err());
        assert!(tuner.observe(2, 0.7, 0.3, 0).is_err());
        tuner.observe(2, 0.7, 0.3, 4).unwrap();
        assert!(tuner.notify_removed(2, 4).is_err());
        assert!(tuner.notify_removed(2, 0).is_err());
        assert_eq!(tuner.decide(100.0), None, "no knee yet");
    }

    // --- which worker leaves ---------------------------------------------------------------------

    #[test]
    fn tuner_picks_the_worst_replica() {
        assert_eq!(pick_worker_to_remove(&[]), None);
        assert_eq!(pick_worker_to_remove(&[(3, 0.5)]), Some(3));
        assert_eq!(
            pick_worker_to_remove(&[(0, 0.41), (1, 0.47), (2, 0.44)]),
            Some(1)
        );
        // Ties go to the highest id, whatever the order.
        assert_eq!(
            pick_worker_to_remove(&[(5, 0.47), (9, 0.47), (2, 0.47), (1, 0.3)]),
            Some(9)
        );
        // A diverged replica goes first.
        assert_eq!(
            pick_worker_to_remove(&[(1, f64::INFINITY), (0, f64::NAN), (2, 0.1)]),
            Some(0)
        );
    }
}
