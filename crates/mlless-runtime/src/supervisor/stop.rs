//! The supervisor's stop criteria (target loss, max time) and its stop request.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::json;
use crate::context::JobContext;
use crate::error::Result;
use crate::messages::{STOP_KEY, StopRequest};

/// A run whose loss exceeds this many times its first step's loss has diverged: the first
/// step's loss is the initial model's (no update has been applied yet), so it does not depend
/// on the learning rate, and a training loss that converges stays near or below it (noisy
/// minibatches move it by a fraction, not by a factor of 100). Relative, so
/// that a model whose loss is naturally large (k-means' inertia on unscaled features) is not
/// stopped, and one whose loss is small (PMF's squared error, about 1) is: an absolute 10⁶ let a
/// PMF run at loss 279,127 pass.
pub(super) const DIVERGENCE_FACTOR: f64 = 100.0;

/// The least first loss divergence is measured from: a model that starts near a perfect fit
/// (first loss near 0) would otherwise be stopped by noise. With it, such a run diverges once its
/// loss passes 100 (log loss, hinge loss and cross-entropy that high mean diverged weights).
pub(super) const DIVERGENCE_FLOOR: f64 = 1.0;

/// The loss above which a run whose first step's loss was `first_loss` has diverged:
/// [`DIVERGENCE_FACTOR`] × `first_loss`, at least [`DIVERGENCE_FACTOR`] ×
/// [`DIVERGENCE_FLOOR`].
pub(super) fn divergence_threshold(first_loss: f64) -> f64 {
    let first = if first_loss.is_finite() {
        first_loss.max(DIVERGENCE_FLOOR)
    } else {
        DIVERGENCE_FLOOR
    };
    DIVERGENCE_FACTOR * first
}

/// Whether `loss` says the run diverged: not a finite number, or above
/// [`divergence_threshold`] of the first step's loss.
pub(super) fn diverged(first_loss: f64, loss: f64) -> bool {
    !(loss.is_finite() && loss <= divergence_threshold(first_loss))
}

/// The stop criteria other than the epoch count (which the workers apply themselves).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Stopper {
    pub(super) target: Option<f64>,
    pub(super) patience: u32,
    pub(super) max_time: Option<Duration>,
    pub(super) below_target: u32,
    pub(super) reason: Option<String>,
}

impl Stopper {
    pub(super) fn new(spec: &mlless_job::JobSpec) -> Self {
        Self {
            target: spec.training.stop.target_loss,
            patience: spec.training.stop.target_patience.max(1),
            max_time: spec
                .training
                .stop
                .max_time_s
                .map(mlless_job::config::saturating_seconds),
            below_target: 0,
            reason: None,
        }
    }

    /// The reason to stop after this step, once; `None` while training should go on.
    pub(super) fn check(&mut self, step: u64, loss: f64, elapsed: Duration) -> Option<String> {
        if self.reason.is_some() {
            return None;
        }
        if let Some(target) = self.target {
            self.below_target = if loss <= target {
                self.below_target + 1
            } else {
                0
            };
            if self.below_target >= self.patience {
                return Some(format!(
                    "loss held at or below --target-loss {target} for {} steps (step {step})",
                    self.patience
                ));
            }
        }
        match self.max_time {
            Some(max) if elapsed >= max => Some(format!(
                "reached --max-time {} s (step {step})",
                max.as_secs_f64()
            )),
            _ => None,
        }
    }

    /// Asks the workers to stop (the [`STOP_KEY`]) for `reason`, once.
    pub(super) async fn request(&mut self, ctx: &JobContext, reason: &str) -> Result<()> {
        if self.reason.is_some() {
            return Ok(());
        }
        info!(reason, "asking the workers to stop");
        self.reason = Some(reason.to_string());
        let request = StopRequest {
            reason: reason.to_string(),
        };
        ctx.channel
            .put_key(STOP_KEY, Bytes::from(json(&request)?))
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divergence_is_relative_to_the_first_loss_with_a_floor() {
        // PMF: a first squared error near 1.5, a run at 279,127 diverged (an absolute 10⁶ let
        // it pass), one at 3 has not.
        assert!(diverged(1.5, 279_127.0));
        assert!(!diverged(1.5, 3.0));
        assert!(diverged(1.5, 151.0));
        assert!(!diverged(1.5, 150.0));
        // A large natural loss (k-means inertia) is not divergence.
        assert!(!diverged(4e7, 3e7));
        assert!(!diverged(4e7, 2e9));
        assert!(diverged(4e7, 5e9));
        // A first loss near 0 does not make noise divergence: the floor of 1.
        assert!(!diverged(1e-9, 0.5));
        assert!(!diverged(0.0, 99.0));
        assert!(diverged(1e-9, 101.0));
        // Not a number, either way.
        assert!(diverged(0.69, f64::NAN));
        assert!(diverged(0.69, f64::INFINITY));
        assert!(diverged(f64::NAN, f64::NAN));
        assert_eq!(divergence_threshold(f64::NAN), 100.0);
    }
}
