//! The two loss curves, [`ReferenceCurve`] `L_P` and [`SlowCurve`] `ℓ_p`: their grids of
//! starting points, the refinement and the outlier rule (see the
//! [tuner's docs](crate::scale_in#fitting)).

use serde::{Deserialize, Serialize};

use super::ScaleInError;
use crate::fit::{CurveFn, levenberg_marquardt, median, nnls, relative_sse};

/// Starting coefficients for a fit with their error, best first.
type Candidates = Vec<([f64; 4], f64)>;

/// The fewest points a curve fit accepts.
pub(super) const MIN_CURVE_POINTS: usize = 6;

/// Residuals beyond this many robust σ are outliers.
const OUTLIER_SIGMAS: f64 = 5.0;

fn check_curve_points(what: &'static str, points: &[(f64, f64)]) -> Result<f64, ScaleInError> {
    if points.len() < MIN_CURVE_POINTS {
        return Err(ScaleInError::NotEnoughPoints {
            what,
            needed: MIN_CURVE_POINTS,
            got: points.len(),
        });
    }
    let mut min_value = f64::INFINITY;
    for &(t, value) in points {
        let bad = |reason| ScaleInError::InvalidPoint {
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
            .map(|(start, _)| levenberg_marquardt(model, start, pts))
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
            out.push((theta, relative_sse(reference_model, &theta, points)));
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
    /// least squares; see the [module docs](crate::scale_in#fitting).
    pub fn fit(points: &[(f64, f64)]) -> Result<Self, ScaleInError> {
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
        out.push((c, relative_sse(slow_model, &c, points)));
    }
    best_first(out)
}

impl SlowCurve {
    /// `ℓ_p(t)`.
    pub fn eval(&self, t: f64) -> f64 {
        slow_model(&self.c, t).0
    }

    /// Fits the curve to `(t, loss)` points (t ≥ 0, loss > 0, at least 6 points) by constrained
    /// least squares; see the [module docs](crate::scale_in#fitting).
    pub fn fit(points: &[(f64, f64)]) -> Result<Self, ScaleInError> {
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
