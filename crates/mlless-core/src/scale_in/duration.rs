//! The step-duration model [`StepDurationModel`] (see the
//! [tuner's docs](crate::scale_in#the-step-duration-model-is-identifiable-only-up-to-two-numbers)).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ScaleInError;
use crate::fit::{median, nnls};

/// The duration of a step of p workers, `d_p = c0 + (p − 1)·c1 + p·c2` seconds, all c ≥ 0.
///
/// Only `c0 + c2` and `c1 + c2` are identifiable; fits return `c2 = 0` (see the
/// [module docs](crate::scale_in#the-step-duration-model-is-identifiable-only-up-to-two-numbers)).
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
    pub fn fit(samples: &[(u32, f64)]) -> Result<Self, ScaleInError> {
        let mut groups: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for &(p, d) in samples {
            if p == 0 || !(d.is_finite() && d >= 0.0) {
                return Err(ScaleInError::InvalidPoint {
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
            return Err(ScaleInError::NotEnoughPoints {
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
