//! Scale-in in the supervisor: the auto-tuner fed each step, the worker to remove picked.

use std::collections::BTreeMap;
use std::time::Duration;

use mlless_core::{BatchLoss, Ewma, ScaleInConfig, ScaleInTuner};
use serde::{Deserialize, Serialize};
use tracing::info;

use crate::error::{Result, RuntimeError};
use crate::messages::{Removal, StatsMessage};
use mlless_job::JobSpec;
use mlless_job::record::{RemovalRecord, ScaleInRecord};

/// The scale-in auto-tuner in the supervisor (DESIGN §6): feeds it each step, asks it for a
/// decision, picks the worker to remove and keeps the record of it all.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ScaleIn {
    pub(super) tuner: ScaleInTuner,
    /// Per worker, the EWMA of its minibatch loss: the quality of its replica.
    recent: BTreeMap<u32, Ewma>,
    /// The request sent and not applied yet.
    pending: Option<Removal>,
    removals: u32,
    record: ScaleInRecord,
}

impl ScaleIn {
    /// The tuner of a job of `workers` workers, watching the validation curve if the job has
    /// a validation set (`validation`).
    pub(super) fn new(config: ScaleInConfig, workers: u32, validation: bool) -> Result<Self> {
        let mut tuner = ScaleInTuner::new(config, workers).map_err(crate::Refusal::ScaleIn)?;
        if validation {
            tuner.watch_validation();
        }
        Ok(Self {
            tuner,
            recent: BTreeMap::new(),
            pending: None,
            removals: 0,
            record: ScaleInRecord::default(),
        })
    }

    /// Feeds the tuner one step (`progress` the fraction of the job done, `validation` the
    /// primary metric of the evaluation after it, if there was one); returns a removal request
    /// to publish, if it decides one.
    pub(super) fn step(
        &mut self,
        step: u64,
        now_s: f64,
        progress: Option<f64>,
        stats: &[StatsMessage],
        validation: Option<f64>,
    ) -> Result<Option<Removal>> {
        let tuner_error = |e: mlless_core::ScaleInError| {
            RuntimeError::FunctionFailed(format!("scale-in tuner at step {step}: {e}"))
        };
        for s in stats {
            let ewma = self
                .recent
                .entry(s.worker)
                .or_insert_with(|| Ewma::new(RECENT_LOSS_ALPHA).expect("a valid constant"));
            ewma.update(s.loss.mean());
        }
        if let Some(removed) = stats.iter().find(|s| s.removed) {
            let workers = stats.len() as u32 - 1;
            self.tuner
                .notify_removed(step, workers)
                .map_err(tuner_error)?;
            self.recent.remove(&removed.worker);
            self.record.removals.push(RemovalRecord {
                worker: removed.worker,
                after_step: step,
                time_s: now_s,
                workers_after: workers,
            });
            self.pending = None;
            return Ok(None);
        }
        let mut total = BatchLoss::default();
        for s in stats {
            total.merge(s.loss);
        }
        let duration_s = stats.iter().map(|s| s.step_ms).fold(0.0, f64::max) / 1000.0;
        if !total.mean().is_finite() {
            return Ok(None);
        }
        self.tuner
            .observe(step, total.mean(), duration_s, stats.len() as u32)
            .map_err(tuner_error)?;
        if let Some(value) = validation.filter(|v| v.is_finite() && *v > 0.0) {
            self.tuner
                .observe_validation(step, value)
                .map_err(tuner_error)?;
        }
        self.tuner.set_progress(progress);
        if self.pending.is_some() {
            return Ok(None);
        }
        let Some(decision) = self.tuner.decide(now_s) else {
            return Ok(None);
        };
        let remove = decision.remove;
        self.record.decisions.push(decision);
        if !remove {
            return Ok(None);
        }
        let candidates: Vec<(u32, f64)> = stats
            .iter()
            .map(|s| {
                let loss = self.recent.get(&s.worker).and_then(Ewma::value);
                (s.worker, loss.unwrap_or(f64::NAN))
            })
            .collect();
        let Some(worker) = mlless_core::pick_worker_to_remove(&candidates) else {
            return Ok(None);
        };
        self.removals += 1;
        let request = Removal {
            seq: self.removals,
            worker,
        };
        info!(worker, step, "scale-in: removing a worker");
        self.pending = Some(request);
        Ok(Some(request))
    }

    /// The record of the decisions and removals.
    pub(super) fn into_record(self) -> ScaleInRecord {
        self.record
    }
}

/// Smoothing of each worker's recent loss, by which the tuner picks the worker to remove.
const RECENT_LOSS_ALPHA: f64 = 0.1;

/// The fraction of the job done after a step at `epoch`, `elapsed` into the run: the larger of
/// its epochs and its time against their limits, which the tuner's pace is measured by.
pub(super) fn job_progress(spec: &JobSpec, epoch: f64, elapsed: Duration) -> Option<f64> {
    let stop = &spec.training.stop;
    let by_epochs = (stop.max_epochs > 0).then(|| epoch / f64::from(stop.max_epochs));
    let by_time = stop
        .max_time_s
        .filter(|t| *t > 0.0)
        .map(|t| elapsed.as_secs_f64() / t);
    match (by_epochs, by_time) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}
