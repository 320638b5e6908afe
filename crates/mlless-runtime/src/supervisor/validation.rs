//! Validation in the supervisor: the workers' models evaluated on the validation split, the
//! best one kept, early stopping and metric targets; and the evaluation on the test set.

use mlless_core::{Batch, EarlyStopping, Evaluation, primary_metric};
use mlless_store::StepMessages;
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::context::JobContext;
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::messages::{EVAL, Message, RECENT_EVALUATIONS, ReplicaMessage, ValidationProgress};
use mlless_job::ValidationConfig;
use mlless_job::record::{EvalPoint, TargetRecord, ValidationRecord};

/// Evaluates `params` on every test minibatch, one read at a time (a large test set need not
/// fit in the supervisor's memory).
pub(super) async fn evaluate(ctx: &JobContext, params: &[f32]) -> Result<mlless_core::Metrics> {
    let model = ctx.spec.model.model();
    let mut evaluation = ctx.spec.model.evaluation();
    for index in 0..ctx.dataset.batches(Split::Test) {
        let batch = ctx.dataset.read_batch(Split::Test, index).await?;
        evaluate_batch(
            ctx,
            &*model,
            params,
            &batch,
            &mut evaluation,
            Split::Test,
            index,
        )?;
    }
    Ok(evaluation.finish_as(split_names(Split::Test).1))
}

/// The name of `split` in errors and the prefix of its metrics.
fn split_names(split: Split) -> (&'static str, &'static str) {
    match split {
        Split::Test => ("test", "test_"),
        Split::Validation => ("validation", ""),
        Split::Train => ("training", "train_"),
    }
}

/// Adds the evaluation of `params` on minibatch `index` of `split` to `evaluation`.
fn evaluate_batch(
    ctx: &JobContext,
    model: &dyn mlless_core::Model,
    params: &[f32],
    batch: &Batch,
    evaluation: &mut Evaluation,
    split: Split,
    index: usize,
) -> Result<()> {
    model
        .evaluate(params, batch, evaluation)
        .map_err(|source| RuntimeError::Model {
            location: format!(
                "{} {} minibatch {index}",
                ctx.dataset.url(),
                split_names(split).0
            ),
            source,
        })
}

/// Evaluates `params` on `batches` of `split`: the test metrics named `test_…`, the
/// validation metrics unprefixed.
pub(super) fn evaluate_on(
    ctx: &JobContext,
    params: &[f32],
    batches: &[Batch],
    split: Split,
) -> Result<mlless_core::Metrics> {
    let model = ctx.spec.model.model();
    let mut evaluation = ctx.spec.model.evaluation();
    for (index, batch) in batches.iter().enumerate() {
        evaluate_batch(ctx, &*model, params, batch, &mut evaluation, split, index)?;
    }
    Ok(evaluation.finish_as(split_names(split).1))
}

/// The validation minibatches, read on first use and kept.
pub(super) async fn cached_validation_set<'a>(
    ctx: &JobContext,
    cache: &'a mut Option<Vec<Batch>>,
) -> Result<&'a [Batch]> {
    if cache.is_none() {
        let mut batches = Vec::with_capacity(ctx.dataset.batches(Split::Validation));
        for index in 0..ctx.dataset.batches(Split::Validation) {
            batches.push(ctx.dataset.read_batch(Split::Validation, index).await?);
        }
        *cache = Some(batches);
    }
    Ok(cache.as_deref().unwrap_or_default())
}

/// The model `worker` published on [`EVAL`] after `step`, checked against the job's model;
/// `None` if it is not there. It was published before the statistics that announce it, so it
/// is there unless this supervisor resumed past its deletion: the messages read are deleted
/// only once a checkpoint no longer needs them ([`Validation::read`]).
pub(super) async fn read_snapshot(
    ctx: &JobContext,
    step: u64,
    worker: u32,
) -> Result<Option<Vec<f32>>> {
    let Some(payload) = ctx
        .channel
        .poll(StepMessages::new(EVAL, step, &[worker]))
        .await?
        .pop()
        .flatten()
    else {
        warn!(
            step,
            worker, "the model for validation is gone; this evaluation is skipped"
        );
        return Ok(None);
    };
    let replica = ReplicaMessage::decode(&payload, || {
        format!("the model of worker {worker} for validation after step {step}")
    })?;
    if replica.params.len() != ctx.spec.model.num_params() {
        return Err(RuntimeError::FunctionFailed(format!(
            "the model of worker {worker} for validation after step {step} has {} parameters, \
             the job's {}",
            replica.params.len(),
            ctx.spec.model.num_params()
        )));
    }
    Ok(Some(replica.params))
}

/// The validation curve as the supervisor builds it: every evaluation, the best model so far,
/// early stopping and the targets.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Validation {
    stopping: EarlyStopping,
    patience: Option<u32>,
    points: Vec<EvalPoint>,
    /// The parameters of the best evaluation (`None` before the first).
    best_params: Option<Vec<f32>>,
    /// Whether early stopping or the targets have stopped the run: the evaluations after
    /// that are recorded but cannot become the best, because the step at which the workers
    /// notice the stop depends on timing, and the model a run keeps must not.
    #[serde(default)]
    decided: bool,
    targets: Vec<TargetRecord>,
    /// The `(step, worker)` of the [`EVAL`] messages read and not deleted yet: a supervisor
    /// resumed from an earlier checkpoint reads them again.
    pub(super) read: Vec<(u64, u32)>,
}

impl Validation {
    pub(super) fn new(config: &ValidationConfig, model: &mlless_core::ModelSpec) -> Result<Self> {
        let stopping = EarlyStopping::new(primary_metric(model), config.early_stop)
            .map_err(crate::Refusal::EarlyStopping)?;
        Ok(Self {
            stopping,
            patience: config.early_stop,
            points: Vec::new(),
            best_params: None,
            decided: false,
            read: Vec::new(),
            targets: config
                .targets
                .iter()
                .map(|target| TargetRecord {
                    target: target.clone(),
                    reached: None,
                })
                .collect(),
        })
    }

    /// Takes one evaluation of the model `params`; returns why to stop, if it is time to.
    /// After it has said so once, an evaluation is only recorded.
    pub(super) fn observe(&mut self, point: EvalPoint, params: Vec<f32>) -> Option<String> {
        if self.decided {
            self.points.push(point);
            return None;
        }
        let index = self.points.len();
        let verdict = self.stopping.observe(index, &point.metrics);
        if verdict.best {
            self.best_params = Some(params);
        }
        for target in &mut self.targets {
            if target.reached.is_none() && target.target.is_met(&point.metrics) {
                target.reached = Some(index);
            }
        }
        let step = point.step;
        self.points.push(point);
        if !self.targets.is_empty() && self.targets.iter().all(|t| t.reached.is_some()) {
            let targets: Vec<String> = self.targets.iter().map(|t| t.target.to_string()).collect();
            self.decided = true;
            return Some(format!(
                "validation reached --target-metric {} (step {step})",
                targets.join(" ")
            ));
        }
        if verdict.stop {
            self.decided = true;
            let (best, value) = self.stopping.best()?;
            let best_step = self.points.get(best).map_or(0, |p| p.step);
            return Some(format!(
                "validation {} did not improve for {} evaluations (--early-stop; best {value:.6} \
                 after step {best_step})",
                self.stopping.metric(),
                self.patience.unwrap_or(0),
            ));
        }
        None
    }

    /// Deletes the [`EVAL`] messages read of the steps before `before`.
    pub(super) async fn discard_read(&mut self, ctx: &JobContext, before: u64) -> Result<()> {
        for &(step, worker) in self.read.iter().filter(|(s, _)| *s < before) {
            ctx.channel
                .discard(StepMessages::new(EVAL, step, &[worker]))
                .await?;
        }
        self.read.retain(|(s, _)| *s >= before);
        Ok(())
    }

    /// The latest and the best evaluation, for the live line.
    pub(super) fn progress(&self) -> Option<ValidationProgress> {
        let metric = self.stopping.metric();
        let last = self.points.last()?;
        let latest = *last.metrics.get(metric)?;
        Some(ValidationProgress {
            metric: metric.to_string(),
            latest,
            best: self.stopping.best().map_or(latest, |(_, v)| v),
            evaluations: self.points.len() as u32,
            epoch: last.epoch,
            recent: self.points[self.points.len().saturating_sub(RECENT_EVALUATIONS)..]
                .iter()
                .map(|p| {
                    let value = p.metrics.get(metric).copied().unwrap_or(f64::NAN);
                    [p.epoch, p.time_s, value]
                })
                .collect(),
        })
    }

    /// The best model's parameters and the record of the curve.
    pub(super) fn into_best(self) -> (Option<Vec<f32>>, ValidationRecord) {
        let record = ValidationRecord {
            metric: self.stopping.metric().to_string(),
            points: self.points,
            best: self.stopping.best().map(|(i, _)| i),
            targets: self.targets,
        };
        (self.best_params, record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(step: u64, logloss: f64) -> EvalPoint {
        EvalPoint {
            step,
            epoch: step as f64,
            time_s: step as f64,
            cost_usd: None,
            metrics: [("logloss".to_string(), logloss)].into(),
            last: false,
        }
    }

    /// After early stopping has decided, a better evaluation (of a step the workers reached
    /// only because they noticed the stop late) is recorded but does not become the model.
    #[test]
    fn the_best_is_fixed_once_early_stopping_has_decided() {
        let config = ValidationConfig {
            every: Default::default(),
            early_stop: Some(2),
            targets: Vec::new(),
        };
        let model = mlless_core::ModelSpec::LogisticRegression {
            features: 1,
            l2: 0.0,
            init_bias: 0.0,
        };
        let mut validation = Validation::new(&config, &model).expect("a valid config");
        assert_eq!(validation.observe(point(1, 0.5), vec![1.0, 1.0]), None);
        assert_eq!(validation.observe(point(2, 0.6), vec![2.0, 2.0]), None);
        let reason = validation.observe(point(3, 0.7), vec![3.0, 3.0]);
        assert!(
            reason
                .as_deref()
                .is_some_and(|r| r.contains("after step 1")),
            "{reason:?}"
        );
        assert_eq!(validation.observe(point(4, 0.1), vec![4.0, 4.0]), None);
        let (best, record) = validation.into_best();
        assert_eq!(best, Some(vec![1.0, 1.0]));
        assert_eq!(record.best, Some(0));
        assert_eq!(record.points.len(), 4);
    }
}
