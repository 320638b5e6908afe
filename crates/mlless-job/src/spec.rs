//! The job spec: everything a function needs to know about a training job, written by the driver
//! to the run's location before any function starts.

use std::time::Duration;

use mlless_core::{FilterConfig, ModelSpec, OptimizerConfig, SignificanceScale};
use serde::{Deserialize, Serialize};

use crate::config::{SecretUrl, TrainingConfig};
use crate::protocol::SyncMode;

/// Key of the job spec below the run's location.
pub const SPEC_KEY: &str = "spec.json";

/// A training job, as the functions read it: what the driver derived from the options and the
/// data set, and the [`TrainingConfig`] as the user gave it (flattened: `spec.json` has its
/// fields at the top level; the functions read them as `spec.training.workers`).
///
/// The `spec.json` the driver writes holds the channel URL as given — with its password, if
/// any, since the functions connect with it — so the run's store must be as private as the
/// credentials. Everything else shows [`JobSpec::redacted`]: the run record, reports, logs and
/// `Debug` (whose [`SecretUrl`]s redact themselves).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Unique id of the job; namespaces everything it writes to the channel.
    pub job_id: String,
    /// Location of the prepared data set (the directory of its `manifest.json`).
    pub data_url: SecretUrl,
    /// The identity of the data set's preparation the run started on (its manifest's
    /// `dataset_id`): `--resume` and the functions refuse a data set prepared again since.
    /// `None` for a data set prepared, or a run started, before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_id: Option<String>,
    /// Location where the job writes its spec, model and record.
    pub run_url: SecretUrl,
    /// The model to train.
    pub model: ModelSpec,
    /// The optimiser each worker runs on its local gradient.
    pub optimizer: OptimizerConfig,
    /// Base learning rate.
    pub lr: f32,
    /// Number of training minibatches in the data set.
    pub train_batches: u32,
    /// How a step's global batch is shared by the fleet (`None`, a spec written before the
    /// global batch was held: one whole minibatch a worker); read it with [`JobSpec::plan`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_plan: Option<crate::BatchPlan>,
    /// Where the functions ran: the invoker's platform (`local`, `lambda`).
    #[serde(default = "default_platform")]
    pub platform: String,
    /// Evaluation on the validation set as the model trains, and the stops it decides
    /// (`None`: the data set has no validation set).
    #[serde(default)]
    pub validation: Option<ValidationConfig>,
    /// Every `--resume` of the run that changed an option, in order (empty for a run never
    /// resumed with new options).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumptions: Vec<Resumption>,
    /// The options as the user gave them.
    #[serde(flatten)]
    pub training: TrainingConfig,
}

/// A `--resume` that changed options which do not change the mathematics (limits, stops).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resumption {
    /// The checkpoint step the run continued from.
    pub from_step: u64,
    /// What changed, one line each: `"--memory-mb 256 → 512"`.
    pub changes: Vec<String>,
}

/// How the model is evaluated on the validation set while it trains, and when that stops
/// training. The model kept at the end is the best one evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationConfig {
    /// How often the model is evaluated.
    pub every: EvalEvery,
    /// Stop once the metric has not improved for this many evaluations (`None`: never).
    pub early_stop: Option<u32>,
    /// Stop once every one of these is reached (none: no such stop).
    pub targets: Vec<mlless_core::MetricTarget>,
}

/// How often the model is evaluated on the validation set (`--eval-every`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EvalEvery {
    /// Every epoch or every [`AUTO_EVAL_SECONDS`], whichever comes sooner.
    #[default]
    Auto,
    /// Every this many steps.
    Steps {
        /// Steps between two evaluations.
        steps: u64,
    },
    /// Every this many epochs (a fraction is fine).
    Epochs {
        /// Epochs between two evaluations.
        epochs: f64,
    },
    /// Every this many seconds (of the leading worker's clock).
    Seconds {
        /// Seconds between two evaluations.
        seconds: f64,
    },
}

/// The longest time between two evaluations of [`EvalEvery::Auto`].
pub const AUTO_EVAL_SECONDS: f64 = 5.0;

impl std::str::FromStr for EvalEvery {
    type Err = String;

    /// `auto`, `N` or `Nsteps` (steps), `Xepochs` / `Xepoch`, `Ss` (seconds).
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let s = s.trim();
        let bad = || {
            format!(
                "--eval-every is auto, STEPS (e.g. 200 or 200steps), EPOCHS (e.g. 1epoch, \
                 0.5epochs) or SECONDS (e.g. 5s), not '{s}'"
            )
        };
        if s == "auto" {
            return Ok(EvalEvery::Auto);
        }
        let positive = |v: &str| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0)
                .ok_or_else(bad)
        };
        if let Some(v) = s.strip_suffix("epochs").or_else(|| s.strip_suffix("epoch")) {
            return Ok(EvalEvery::Epochs {
                epochs: positive(v)?,
            });
        }
        if let Some(v) = s.strip_suffix("steps").or_else(|| s.strip_suffix("step")) {
            return v
                .trim()
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .map_or_else(|| Err(bad()), |steps| Ok(EvalEvery::Steps { steps }));
        }
        if let Some(v) = s.strip_suffix('s') {
            return Ok(EvalEvery::Seconds {
                seconds: positive(v).and_then(|x| {
                    (x <= crate::config::MAX_SECONDS)
                        .then_some(x)
                        .ok_or_else(bad)
                })?,
            });
        }
        s.parse()
            .ok()
            .filter(|&n| n > 0)
            .map(|steps| EvalEvery::Steps { steps })
            .ok_or_else(bad)
    }
}

impl EvalEvery {
    /// Whether an evaluation is due after the step that brought the positions read from
    /// `before` to `after` (of `per_epoch` an epoch), `since_last` after the last one.
    pub fn is_due(
        self,
        step: u64,
        (before, after): (u64, u64),
        per_epoch: u64,
        since_last: Duration,
    ) -> bool {
        let epoch_crossed = |epochs: f64| {
            let per = (epochs * per_epoch.max(1) as f64).max(1.0);
            (after as f64 / per).floor() > (before as f64 / per).floor()
        };
        match self {
            EvalEvery::Auto => epoch_crossed(1.0) || since_last.as_secs_f64() >= AUTO_EVAL_SECONDS,
            EvalEvery::Steps { steps } => (step + 1).is_multiple_of(steps.max(1)),
            EvalEvery::Epochs { epochs } => epoch_crossed(epochs),
            EvalEvery::Seconds { seconds } => since_last.as_secs_f64() >= seconds,
        }
    }
}

fn default_platform() -> String {
    "local".into()
}

impl JobSpec {
    /// How a step's global batch is shared by the fleet: the spec's plan, or whole minibatches
    /// for a spec without one.
    pub fn plan(&self) -> crate::BatchPlan {
        self.batch_plan
            .unwrap_or_else(|| crate::BatchPlan::whole(self.training.workers))
    }

    /// The learning rate of a step in `epoch` (from 0): the spec's rate under its schedule, with
    /// its time constant ([`TrainingConfig::decay_epochs`], 1 in a spec written before it).
    pub fn rate(&self, epoch: u64) -> f32 {
        let decay_epochs = self.training.decay_epochs.unwrap_or(1.0);
        self.training.schedule.rate(self.lr, epoch, decay_epochs)
    }

    /// The stream positions (slices of minibatches) of one epoch.
    pub fn positions_per_epoch(&self) -> u64 {
        self.plan().per_epoch(self.train_batches)
    }

    /// This spec with the credentials of its URLs redacted ([`SecretUrl::redacted`]): what the run
    /// record, reports and logs show. The functions connect with the real spec.
    pub fn redacted(&self) -> JobSpec {
        JobSpec {
            data_url: self.data_url.redacted(),
            run_url: self.run_url.redacted(),
            training: TrainingConfig {
                channel: self.training.channel.as_ref().map(SecretUrl::redacted),
                ..self.training.clone()
            },
            ..self.clone()
        }
    }

    /// How long a worker waits for its peers' messages of one step before it gives up.
    pub fn collect_timeout(&self) -> Duration {
        self.training.limits.timeout
    }

    /// What each worker's update filter keeps back and how it compresses the rest.
    pub fn filter(&self) -> FilterConfig {
        let (significance, significance_scale) = match self.training.sync {
            SyncMode::Isp {
                significance,
                scale,
            } => (Some(significance), scale),
            SyncMode::Bsp | SyncMode::Ssp { .. } | SyncMode::Asp => {
                (None, SignificanceScale::default())
            }
        };
        FilterConfig {
            significance,
            significance_scale,
            compression: self.training.compression,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_json_keeps_its_flat_field_names_and_debug_redacts() {
        // A spec as an older mlless wrote it: flat, without the fields that have defaults.
        let old = serde_json::json!({
            "job_id": "job-1",
            "data_url": "/data",
            "run_url": "/data/runs/job-1",
            "model": {"logistic_regression": {"features": 10, "l2": 0.0001}},
            "workers": 4,
            "optimizer": {"kind": "momentum", "momentum": 0.9, "beta1": 0.9, "beta2": 0.999,
                          "epsilon": 1e-08},
            "lr": 0.5,
            "schedule": "inv-sqrt-epoch",
            "seed": 1,
            "stop": {"target_loss": null, "target_patience": 10, "max_epochs": 1,
                     "max_time_s": null},
            "channel": "redis://:pw-123@h:6379",
            "limits": {"memory_mb": 1024, "timeout": {"secs": 900, "nanos": 0}},
            "train_batches": 12
        });
        let spec: JobSpec = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(spec.training.workers, 4);
        assert_eq!(
            spec.training.channel.as_deref(),
            Some("redis://:pw-123@h:6379")
        );
        let json = serde_json::to_value(&spec).unwrap();
        for key in old.as_object().unwrap().keys() {
            assert!(json.get(key).is_some(), "{key}");
        }
        assert_eq!(json["workers"], old["workers"]);
        assert_eq!(json["channel"], old["channel"]);
        for key in [
            "sync",
            "compression",
            "pattern",
            "channel_grace_s",
            "platform",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        assert_eq!(serde_json::from_value::<JobSpec>(json).unwrap(), spec);
        let debug = format!("{spec:?}");
        assert!(!debug.contains("pw-123") && debug.contains("redis://:***@h:6379"));
        assert!(!format!("{:?}", spec.redacted()).contains("pw-123"));
        assert!(
            !serde_json::to_string(&spec.redacted())
                .unwrap()
                .contains("pw-123")
        );
    }
}
