//! The run record: what a run did, step by step, what it cost and what it reached. Written as
//! JSON to the run's location (`record.json`) and, on request, to a local file.

use std::fmt;

use mlless_core::Metrics;
use mlless_cost::{Bill, CostClock, ObjectRequests, PriceTable, RequestBasis, Span, Usage};
use mlless_io_types::InvocationReport;
use serde::{Deserialize, Serialize};

use crate::billing::{billed_requests, channel_kind};
use crate::spec::JobSpec;

/// Key of the run record below the run's location.
pub const RECORD_KEY: &str = "record.json";
/// Key of the trained model below the run's location.
pub const MODEL_KEY: &str = "model.bin";
/// Key below a `--refit` run's location of the early-stopped model, which the refit's model
/// replaced as [`MODEL_KEY`].
pub const EARLY_STOPPED_MODEL_KEY: &str = "early-stopped-model.bin";
/// Version of the run-record format. Version 1 records (before the synchronisation models and
/// scale-in) still read: the fields added since default to zero or empty.
pub const RECORD_VERSION: u32 = 2;

/// Everything a run did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Version of this format.
    pub format_version: u32,
    /// The job as it was run, with the credentials of its URLs redacted
    /// ([`JobSpec::redacted`]); the run's `spec.json` holds the URLs as given.
    pub spec: JobSpec,
    /// Wall-clock start of the run (driver), Unix milliseconds.
    pub started_at_unix_ms: u64,
    /// Wall time of the whole run as the driver saw it, in seconds.
    pub wall_s: f64,
    /// Samples in the training set.
    pub train_samples: u64,
    /// Samples in the test set.
    pub test_samples: u64,
    /// One entry per step, in order.
    pub steps: Vec<StepRecord>,
    /// Passes over the training set.
    pub epochs: f64,
    /// Why training stopped.
    pub stop_reason: String,
    /// Test metrics of the final model (`test_logloss`, `test_accuracy`, `test_auc`; `test_rmse`).
    pub metrics: Metrics,
    /// Every function invocation with its duration and outcome.
    pub invocations: Vec<InvocationReport>,
    /// What the run cost at the chosen platform's prices.
    pub bill: Option<Bill>,
    /// The object-store requests the run made, counted (data reads, the object-store
    /// channel's messages, checkpoints, the driver's own): what the bill charges. `None` in
    /// records of older versions, whose bills estimated them.
    #[serde(default)]
    pub requests: Option<mlless_io_types::RequestCounts>,
    /// Location of the final model.
    pub model_url: String,
    /// Largest difference between two workers' final replicas of one parameter: 0 under BSP;
    /// under the other protocols only float rounding, since every update reaches every replica.
    #[serde(default)]
    pub replica_spread: f64,
    /// Communication rounds: the steps in which the workers exchanged (every step under GA-SGD;
    /// one per round under MA-SGD and ADMM; one per Lloyd iteration for k-means).
    #[serde(default)]
    pub rounds: u64,
    /// What the scale-in auto-tuner decided and did (empty when it was off).
    #[serde(default)]
    pub scale_in: ScaleInRecord,
    /// The validation curve, the best evaluation and the targets reached (`None` when the
    /// data set has no validation set).
    #[serde(default)]
    pub validation: Option<ValidationRecord>,
    /// `--refit`: the second job, trained on the training and validation sets together for the
    /// epochs early stopping chose. Its model is the one kept: the run's [`MODEL_KEY`] (at
    /// [`model_url`](Self::model_url)) is the refit's and [`metrics`](Self::metrics) are its
    /// test metrics; this keeps the early-stopped model's (moved to
    /// [`EARLY_STOPPED_MODEL_KEY`]) with the refit's whole record (its curve, its bill).
    #[serde(default)]
    pub refit: Option<Refit>,
}

/// What `--refit` trained after early stopping ([`RunRecord::refit`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refit {
    /// The epochs the refit trained: the best evaluation's, rounded up.
    pub epochs: u32,
    /// The early-stopped model, trained without the validation set ([`EARLY_STOPPED_MODEL_KEY`]
    /// below the run).
    pub early_stopped_model_url: String,
    /// The early-stopped model's test metrics.
    pub early_stopped_metrics: Metrics,
    /// The refit job's own record (its run, curve and bill).
    pub record: Box<RunRecord>,
}

/// The model's evaluations on the validation set during a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationRecord {
    /// The metric the best model is chosen by and early stopping watches (`logloss`, `rmse`,
    /// …: the names of [`EvalPoint::metrics`]).
    pub metric: String,
    /// Every evaluation, in order; the last one is of the final model.
    pub points: Vec<EvalPoint>,
    /// Index in `points` of the best evaluation: the model kept (`model.bin`), on which the
    /// test metrics are computed.
    pub best: Option<usize>,
    /// The targets of `--target-metric`, with when each was first reached.
    pub targets: Vec<TargetRecord>,
}

/// One evaluation of the model on the validation set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalPoint {
    /// The step after which the model was taken.
    pub step: u64,
    /// Epochs done by then.
    pub epoch: f64,
    /// Seconds since the supervisor started, when the step's statistics were complete.
    pub time_s: f64,
    /// Billed cost of the run up to that time (filled in by the driver from the invocations
    /// once the run has ended).
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The metrics, unprefixed (`logloss`, `accuracy`, `auc`; `rmse`; …; and `samples`).
    pub metrics: mlless_core::Metrics,
    /// Whether this is the final model (the replicas' average after the last step) rather
    /// than the leading worker's replica during training.
    #[serde(default)]
    pub last: bool,
}

/// A target of `--target-metric` and when it was first reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetRecord {
    /// The target.
    pub target: mlless_core::MetricTarget,
    /// Index in the points of the first evaluation that reached it (`None`: never reached).
    pub reached: Option<usize>,
}

impl ValidationRecord {
    /// The best evaluation, if there is one.
    pub fn best_point(&self) -> Option<&EvalPoint> {
        self.best.and_then(|i| self.points.get(i))
    }

    /// The evaluation at which `target` was first reached.
    pub fn reached(&self, target: &TargetRecord) -> Option<&EvalPoint> {
        target.reached.and_then(|i| self.points.get(i))
    }
}

/// Key of a data set's [`PrepareRecord`] below the data set's location.
pub const PREPARE_RECORD_KEY: &str = "prepare.json";

/// What `mlless prepare` did to write a data set: when, for how long, and every function it
/// invoked (the map tasks of `--normalize`), so that a report can show them on the fleet's
/// timeline. Written beside the manifest, before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrepareRecord {
    /// Wall-clock start of the preparation, Unix milliseconds.
    pub started_at_unix_ms: u64,
    /// Wall time of the whole preparation, in seconds.
    pub wall_s: f64,
    /// Every map task's invocation, with its duration and outcome (none without `--normalize`).
    pub invocations: Vec<InvocationReport>,
}

/// The scale-in auto-tuner's part of a run record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScaleInRecord {
    /// Every decision, with its inputs (fitted curves, step durations) and predictions.
    pub decisions: Vec<mlless_core::ScaleInDecision>,
    /// Every worker removed.
    pub removals: Vec<RemovalRecord>,
}

/// One worker removed by the scale-in auto-tuner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RemovalRecord {
    /// The worker.
    pub worker: u32,
    /// The last step it took part in.
    pub after_step: u64,
    /// Seconds since the supervisor started.
    pub time_s: f64,
    /// Workers left.
    pub workers_after: u32,
}

/// The stop reason of a run its user cancelled (Ctrl-C, SIGTERM): the workers stopped after
/// the step they were in, and `mlless train --resume` continues it from its last checkpoint.
pub const CANCELLED: &str = "cancelled";

/// Why a [`RunRecord`] read from a file cannot be reported on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    /// A fleet no run has: none, or more than [`MAX_WORKERS`](crate::config::MAX_WORKERS).
    #[error(
        "spec.workers is {0}: a run has 1 to {max} workers",
        max = crate::config::MAX_WORKERS
    )]
    Workers(u32),
    /// A record of a format newer than this build knows: its fields may not mean what this
    /// build reads them as.
    #[error(
        "format_version {0} is newer than this build of mlless knows (it reads up to version \
         {RECORD_VERSION}): read it with the mlless that wrote it, or a newer one"
    )]
    NewerVersion(u32),
}

impl RunRecord {
    /// Checks that this build knows the record's format (not newer than [`RECORD_VERSION`]) and
    /// the numbers that `report` and `cost` size their work by, before they allocate anything
    /// by them: the fleet (`spec.workers`). A record `train` wrote passes; a hand-made
    /// or corrupt one may not.
    pub fn check(&self) -> Result<(), RecordError> {
        if self.format_version > RECORD_VERSION {
            return Err(RecordError::NewerVersion(self.format_version));
        }
        let workers = self.spec.training.workers;
        if workers == 0 || workers > crate::config::MAX_WORKERS {
            return Err(RecordError::Workers(workers));
        }
        Ok(())
    }

    /// Whether the run was cancelled ([`CANCELLED`]), and so may be resumed.
    pub fn was_cancelled(&self) -> bool {
        self.stop_reason == CANCELLED
    }

    /// Seconds from the start of the run (the driver) to the start of the supervisor, whose
    /// clock the steps' and evaluations' `time_s` use; 0 when the record has no supervisor
    /// invocation.
    pub fn time_offset_s(&self) -> f64 {
        self.invocations
            .iter()
            .find(|i| i.name == crate::role::SUPERVISOR_ROLE)
            .map_or(0.0, |i| {
                i.started_at_unix_ms.saturating_sub(self.started_at_unix_ms) as f64 / 1000.0
            })
    }

    /// The object-store requests the run is billed for, and where they come from: the counted
    /// ones ([`requests`](Self::requests)), or, where the record has no count (all its
    /// functions were killed, or an older version wrote it), [`ObjectRequests::estimate`] for
    /// the workers of each step.
    pub fn billed_requests(&self) -> (ObjectRequests, RequestBasis) {
        if let Some(counted) = &self.requests {
            return (billed_requests(counted), RequestBasis::Counted);
        }
        let channel = channel_kind(self.spec.training.channel.as_deref());
        let mut estimate = ObjectRequests::default();
        for step in &self.steps {
            let workers = u32::try_from(step.workers.len()).unwrap_or(u32::MAX);
            estimate += ObjectRequests::estimate(channel, workers, 1);
        }
        (estimate, RequestBasis::Estimated)
    }

    /// `prices` with the run's parameter-server VM type (`--ps-instance`), if it named one, as
    /// the price of each server.
    fn with_ps_instance(&self, prices: &PriceTable) -> PriceTable {
        let mut prices = prices.clone();
        if let Some(vm) = &self.spec.training.ps_instance {
            prices.ps_usd_per_hour = vm.usd_per_hour;
        }
        prices
    }

    /// The run's bill at `prices`: its invocations' durations, its channel's servers for its
    /// wall time ([`PriceTable::for_channel`]) and its [`billed_requests`](Self::billed_requests).
    /// The one place a run is billed: the driver writes this as the record's
    /// [`bill`](Self::bill), and `mlless cost` and the report bill a record at other prices
    /// with it, so at the same prices every figure is the record's.
    pub fn bill_at(&self, prices: &PriceTable) -> Bill {
        let usages: Vec<Usage> = self
            .invocations
            .iter()
            .map(|i| Usage {
                duration_ms: i.duration_ms,
                memory_mb: i.memory_mb,
            })
            .collect();
        let channel = channel_kind(self.spec.training.channel.as_deref());
        self.with_ps_instance(prices).for_channel(channel).bill(
            &usages,
            self.wall_s,
            self.billed_requests().0,
        )
    }

    /// The run's billed cost over time at `prices` ([`CostClock`]), in seconds since the run
    /// started: from the invocations' starts and durations; where the record has a bill, the
    /// services and object-store requests at the bill's own figures, so the clock ends near
    /// the bill's total.
    pub fn cost_clock(&self, prices: &PriceTable) -> CostClock {
        let t0 = self.started_at_unix_ms;
        let spans = self
            .invocations
            .iter()
            .map(|i| Span {
                start_s: i.started_at_unix_ms.saturating_sub(t0) as f64 / 1000.0,
                duration_ms: i.duration_ms,
                memory_mb: i.memory_mb,
            })
            .collect();
        let channel = channel_kind(self.spec.training.channel.as_deref());
        let (services_per_s, storage_usd) = match &self.bill {
            Some(bill) if self.wall_s > 0.0 => (bill.services_usd / self.wall_s, bill.storage_usd),
            _ => (
                self.with_ps_instance(prices)
                    .for_channel(channel)
                    .services_usd_per_hour
                    / 3600.0,
                0.0,
            ),
        };
        CostClock::new(
            prices.clone(),
            spans,
            services_per_s,
            storage_usd,
            self.wall_s,
        )
    }

    /// Fills in the billed cost so far of every validation evaluation, at `prices`.
    pub fn price_validation(&mut self, prices: &PriceTable) {
        let clock = self.cost_clock(prices);
        let offset = self.time_offset_s();
        if let Some(validation) = &mut self.validation {
            for point in &mut validation.points {
                point.cost_usd = Some(clock.cost_at(point.time_s + offset));
            }
        }
    }

    /// Loss of the last step, if any step ran.
    pub fn final_loss(&self) -> Option<f64> {
        self.steps.last().map(|s| s.loss)
    }

    /// What the workers exchanged over the run: their steps' traffic summed.
    pub fn traffic(&self) -> TrafficTotals {
        let mut totals = TrafficTotals::default();
        for w in self.steps.iter().flat_map(|s| &s.workers) {
            totals.bytes_sent += w.bytes_sent;
            totals.messages_sent += u64::from(w.messages_sent);
            totals.entries_sent += w.entries_sent;
            totals.bytes_received += w.bytes_received;
        }
        totals
    }
}

/// What the workers of a run exchanged, summed over their steps ([`RunRecord::traffic`]).
/// Displays as the summaries show it: `1.20 MB in 40 messages (3000 entries) · received
/// 3.60 MB`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrafficTotals {
    /// Bytes published.
    pub bytes_sent: u64,
    /// Messages published.
    pub messages_sent: u64,
    /// Parameter entries sent.
    pub entries_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
}

impl fmt::Display for TrafficTotals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.2} MB in {} messages ({} entries) · received {:.2} MB",
            self.bytes_sent as f64 / 1e6,
            self.messages_sent,
            self.entries_sent,
            self.bytes_received as f64 / 1e6
        )
    }
}

/// One step of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step.
    pub step: u64,
    /// Seconds since the supervisor started when the step's statistics were complete.
    pub time_s: f64,
    /// Epochs done after this step.
    pub epoch: f64,
    /// Σ loss / Σ samples over the step's minibatches.
    pub loss: f64,
    /// Each worker's part.
    pub workers: Vec<WorkerStep>,
}

/// One worker's part of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStep {
    /// The worker.
    pub worker: u32,
    /// Mean loss of its minibatch.
    pub loss: f64,
    /// Samples in its minibatch.
    pub samples: u64,
    /// Time reading data not hidden by prefetching, ms.
    pub read_ms: f64,
    /// Time computing, ms.
    pub compute_ms: f64,
    /// CPU time of that computing, ms: what it takes a function with a core of its own
    /// (`None` in records from before it was measured, or where the platform has no thread
    /// CPU clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_cpu_ms: Option<f64>,
    /// Time exchanging updates, ms.
    pub exchange_ms: f64,
    /// Wall time of the step, ms.
    pub step_ms: f64,
    /// Bytes published.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Messages published.
    #[serde(default)]
    pub messages_sent: u32,
    /// Messages received.
    #[serde(default)]
    pub messages_received: u32,
    /// Parameter entries sent.
    #[serde(default)]
    pub entries_sent: u64,
    /// Parameter entries the filter held back after the step.
    #[serde(default)]
    pub entries_held: u64,
    /// Updates applied to the worker's replica during the step, its own included.
    #[serde(default)]
    pub updates_applied: u32,
    /// When the worker started computing the step (after any barrier), Unix ms.
    #[serde(default)]
    pub started_unix_ms: f64,
    /// When the worker started publishing its update, Unix ms.
    #[serde(default)]
    pub published_unix_ms: f64,
}
