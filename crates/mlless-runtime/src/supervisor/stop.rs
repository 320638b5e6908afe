//! The supervisor's stop criteria (target loss, max time) and its stop request.

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::json;
use crate::context::JobContext;
use crate::error::Result;
use crate::messages::{STOP_KEY, StopRequest};

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
            max_time: spec.training.stop.max_time_s.map(Duration::from_secs_f64),
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
