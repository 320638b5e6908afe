//! The job spec the driver derives from the options and the data set.

use crate::{Internal, Mismatch, NeedsValidation, Refusal};
use mlless_core::{ModelSpec, OptimizerConfig, ScaleInConfig};

use super::models::{DEFAULT_TOLERANCE, DataSample, Defaults, model_spec};
use super::{DEFAULT_PATIENCE, TrainOptions, ValidationOptions};
use crate::dataset::Dataset;
use crate::error::{Result, RuntimeError};
use mlless_job::batch_plan::DEFAULT_GLOBAL_BATCHES;
use mlless_job::config::TrainingConfig;
use mlless_job::{Algorithm, BatchPlan};
use mlless_job::{JobSpec, StopCriteria, ValidationConfig};

/// The job spec of `options` on `dataset`, run on `platform` (the invoker's); for LR,
/// `sample` is what was estimated of the training set (its positive rate, its curvature).
pub(super) fn job_spec(
    options: &TrainOptions,
    dataset: &Dataset,
    sample: Option<DataSample>,
    platform: &str,
) -> Result<JobSpec> {
    let manifest = dataset.manifest();
    let defaults = Defaults::for_model(options.model, options.optimizer);
    let sample = sample.unwrap_or(DataSample {
        positive_rate: 0.5,
        curvature: 0.0,
        feature_occurrences: 0.0,
    });
    let rate = sample.positive_rate;
    let model = model_spec(options, dataset, &defaults, rate)?;
    model.validate().map_err(Refusal::ModelSpec)?;
    super::models::check_model_memory(&model, options.training.limits.memory_mb)?;
    let train_batches = u32::try_from(manifest.train.batches.len())
        .map_err(|_| Internal::Invariant("too many minibatches"))?;
    let plan = batch_plan(options, manifest);
    let workers = options.training.workers;
    if let Some(warning) = plan.crowded_fleet_warning(workers, train_batches, manifest.batch_size) {
        tracing::warn!("{warning}");
    }
    let validation = validation_config(&options.validation, &model, manifest, dataset.url())?;
    let job_id = match &options.job_id {
        Some(given) => {
            crate::job_id::check(given).map_err(|reason| Refusal::JobId {
                given: given.clone(),
                reason,
            })?;
            given.clone()
        }
        None => crate::job_id::new(),
    };
    let training = &options.training;
    let global_batch = plan.global_batch(workers as usize, manifest.batch_size);
    let lr = options
        .hyper
        .lr
        .unwrap_or_else(|| defaults.lr_for(options.model, global_batch.round() as u64, sample));
    if defaults.scales_rate(options.model)
        && let Some(warning) = sample.unstable_rate_warning(lr)
    {
        tracing::warn!("{warning}");
    }
    Ok(JobSpec {
        run_url: absolute_location(&options.run_url(&job_id))?.into(),
        job_id,
        data_url: absolute_location(options.data_url.as_str())?.into(),
        dataset_id: manifest.dataset_id.clone(),
        model,
        optimizer: OptimizerConfig::new(defaults.optimizer),
        // Every algorithm: MA's and ADMM's local steps are averaged over the P replicas, so
        // that their per-sample progress is GA's at P times the minibatch too.
        lr,
        train_batches,
        batch_plan: Some(plan),
        platform: platform.to_owned(),
        validation,
        resumptions: Vec::new(),
        training: TrainingConfig {
            decay_epochs: Some(
                training
                    .decay_epochs
                    .unwrap_or_else(|| defaults.decay_epochs_under(training.sync, sample)),
            ),
            stop: StopCriteria {
                tolerance: training
                    .stop
                    .tolerance
                    .or(options.model.steps_by_lloyd().then_some(DEFAULT_TOLERANCE)),
                ..training.stop
            },
            // The tuner weighs a step's bill at the prices the run is billed at.
            scale_in: training.scale_in.clone().map(|tuner| ScaleInConfig {
                step_cost: options.prices.step_cost(
                    mlless_job::billing::channel_kind(training.channel.as_deref()),
                    training.limits.memory_mb,
                ),
                ..tuner
            }),
            ..training.clone()
        },
    })
}

/// How the fleet of `options` shares a step's global batch over `manifest`'s minibatches: the
/// global batch asked for (or [`DEFAULT_GLOBAL_BATCHES`] minibatches) whatever the fleet, for
/// every model and algorithm that steps on a global batch; whole minibatches, one a worker, for
/// ADMM (each worker's fixed shard) and k-means (a Lloyd pass reads all of them).
fn batch_plan(options: &TrainOptions, manifest: &mlless_data::Manifest) -> BatchPlan {
    let workers = options.training.workers;
    if options.model.steps_by_lloyd()
        || matches!(options.training.algorithm, Algorithm::Admm { .. })
    {
        return BatchPlan::whole(workers);
    }
    let global = options
        .training
        .global_batch
        .unwrap_or(DEFAULT_GLOBAL_BATCHES * u64::from(manifest.batch_size));
    let min_rows = manifest
        .train
        .batches
        .iter()
        .map(|b| b.samples)
        .min()
        .unwrap_or(manifest.batch_size);
    BatchPlan::of(global, workers, manifest.batch_size, min_rows)
}

/// `location` with a relative local path made absolute against the current directory, so that
/// a spec's locations mean the same wherever `mlless` runs next (`--resume` from another
/// directory, functions started elsewhere); a URL with a scheme (`file:///`, `s3://`,
/// `memory://`) and an absolute path are kept as they are.
pub(super) fn absolute_location(location: &str) -> Result<String> {
    let path = std::path::Path::new(location);
    if location.contains("://") || path.is_absolute() {
        return Ok(location.to_owned());
    }
    std::path::absolute(path)
        .map(|p| p.display().to_string())
        .map_err(|source| RuntimeError::Io {
            path: location.to_owned(),
            source,
        })
}

/// The job's validation settings: `None` when the data set has no validation set (and then
/// nothing may ask for one), early stopping on by default when it has.
pub(super) fn validation_config(
    options: &ValidationOptions,
    model: &ModelSpec,
    manifest: &mlless_data::Manifest,
    data_url: &str,
) -> Result<Option<ValidationConfig>> {
    let metrics = mlless_core::validation::metrics_of(model);
    for target in &options.targets {
        if !metrics.contains(&target.metric.as_str()) {
            return Err(Refusal::TargetMetric {
                target: target.to_string(),
                metrics: metrics.iter().map(|m| m.to_string()).collect(),
            }
            .into());
        }
    }
    if manifest.validation.batches.is_empty() {
        let asked = if options.early_stop.is_some_and(|p| p > 0) {
            Some("--early-stop")
        } else if !options.targets.is_empty() {
            Some("--target-metric")
        } else {
            None
        };
        if let Some(flag) = asked {
            return Err(Mismatch::NoValidationSet {
                needed_by: NeedsValidation::Option(flag),
                data_url: data_url.to_owned(),
            }
            .into());
        }
        return Ok(None);
    }
    Ok(Some(ValidationConfig {
        every: options.every,
        early_stop: match options.early_stop {
            None => Some(DEFAULT_PATIENCE),
            Some(0) => None,
            Some(p) => Some(p),
        },
        targets: options.targets.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_local_paths_become_absolute_and_urls_stay() {
        let here = std::env::current_dir().expect("a current directory");
        assert_eq!(
            absolute_location("store/lr").unwrap(),
            here.join("store/lr").display().to_string()
        );
        for kept in ["/tmp/a/runs", "file:///tmp/a", "s3://b/p", "memory://m/x"] {
            assert_eq!(absolute_location(kept).unwrap(), kept);
        }
    }
}
