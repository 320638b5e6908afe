//! Loss smoothing ([`Ewma`]) and knee detection ([`KneeDetector`]).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::ScaleInError;

fn check_unit_interval(field: &'static str, value: f64) -> Result<(), ScaleInError> {
    if value > 0.0 && value <= 1.0 {
        Ok(())
    } else {
        Err(ScaleInError::InvalidConfig {
            field,
            value,
            reason: "must be in (0, 1]",
        })
    }
}

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
    pub fn new(alpha: f64) -> Result<Self, ScaleInError> {
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

/// Finds the start of slow convergence in a smoothed loss; the rule is in the
/// [module docs](crate::scale_in#knee-rule).
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
    pub fn new(window: u32, fraction: f64, patience: u32) -> Result<Self, ScaleInError> {
        if window == 0 {
            return Err(ScaleInError::InvalidConfig {
                field: "knee_window",
                value: 0.0,
                reason: "must be at least 1",
            });
        }
        if !(fraction > 0.0 && fraction < 1.0) {
            return Err(ScaleInError::InvalidConfig {
                field: "knee_fraction",
                value: fraction,
                reason: "must be in (0, 1)",
            });
        }
        if patience == 0 {
            return Err(ScaleInError::InvalidConfig {
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
