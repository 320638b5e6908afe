//! The supervisor function: gathers each step's loss and timings from the workers, decides when
//! to stop, averages the final replicas, evaluates the model on the test set and writes the model
//! and the run record.

use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_core::{BatchLoss, Evaluation};
use tracing::info;

use crate::context::JobContext;
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::messages::{
    FINAL, Message, PROGRESS_KEY, Progress, ReplicaMessage, STATS, STOP_KEY, StatsMessage,
    StopRequest, StoredModel,
};
use crate::record::{MODEL_KEY, RECORD_KEY, RECORD_VERSION, RunRecord, StepRecord, WorkerStep};

/// A loss above this is taken for divergence (log loss and squared error of sane models stay far
/// below it).
const DIVERGED_LOSS: f64 = 1e6;

/// How often the supervisor refreshes its progress report.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Runs the supervisor of the job until the workers have stopped and the model is written.
pub async fn run_supervisor(ctx: JobContext) -> Result<()> {
    let spec = &ctx.spec;
    let workers = ctx.workers();
    let started = Instant::now();
    let mut steps: Vec<StepRecord> = Vec::new();
    let mut stopper = Stopper::new(spec);
    let mut last_progress: Option<Instant> = None;
    let mut diverged: Option<(u64, f64)> = None;
    let manifest = ctx.dataset.manifest();
    let train_batches = f64::from(spec.train_batches);

    // Under SSP and ASP workers may stop after different steps: each one's last statistics
    // say so, and it is not waited for after that.
    let mut active = workers.clone();
    let mut step = 0u64;
    loop {
        let payloads = ctx
            .channel
            .collect(STATS, step, &active, spec.collect_timeout())
            .await?;
        let mut stats = Vec::with_capacity(payloads.len());
        for (payload, &from) in payloads.iter().zip(&active) {
            stats.push(StatsMessage::decode(payload, || {
                format!("statistics of worker {from} for step {step}")
            })?);
        }
        ctx.channel.discard(STATS, step, &active).await?;
        let mut total = BatchLoss::default();
        for s in &stats {
            total.merge(s.loss);
        }
        let loss = total.mean();
        let epoch = (step + 1) as f64 * f64::from(spec.workers) / train_batches;
        steps.push(StepRecord {
            step,
            time_s: started.elapsed().as_secs_f64(),
            epoch,
            loss,
            workers: stats.iter().map(worker_step).collect(),
        });
        active.retain(|w| !stats.iter().any(|s| s.worker == *w && s.last));
        let last = active.is_empty();

        if diverged.is_none() && !(loss.is_finite() && loss < DIVERGED_LOSS) {
            diverged = Some((step, loss));
            stopper.request(&ctx, "the loss diverged").await?;
        } else if let Some(reason) = stopper.check(step, loss, started.elapsed()) {
            stopper.request(&ctx, &reason).await?;
        }
        if last || last_progress.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
            let progress = Progress {
                step,
                epoch,
                loss,
                workers: spec.workers,
            };
            ctx.channel
                .put_key(PROGRESS_KEY, Bytes::from(json(&progress)?))
                .await?;
            last_progress = Some(Instant::now());
        }
        if last {
            break;
        }
        step += 1;
    }

    if let Some((step, loss)) = diverged {
        return Err(RuntimeError::Diverged {
            step,
            loss,
            lr: spec.lr,
        });
    }

    let payloads = ctx
        .channel
        .collect(FINAL, 0, &workers, spec.collect_timeout())
        .await?;
    let mut replicas = Vec::with_capacity(payloads.len());
    for (payload, &from) in payloads.iter().zip(&workers) {
        let replica =
            ReplicaMessage::decode(payload, || format!("final replica of worker {from}"))?;
        if replica.params.len() != spec.model.num_params() {
            return Err(RuntimeError::FunctionFailed(format!(
                "final replica of worker {from} has {} parameters, the model {}",
                replica.params.len(),
                spec.model.num_params()
            )));
        }
        replicas.push(replica);
    }
    ctx.channel.discard(FINAL, 0, &workers).await?;
    let views: Vec<&[f32]> = replicas.iter().map(|r| r.params.as_slice()).collect();
    let params = mlless_core::average(&views);
    let replica_spread = spread(&views);

    let metrics = evaluate(&ctx, &params).await?;
    info!(?metrics, "test metrics");
    let model = StoredModel {
        spec: spec.model.clone(),
        params,
    };
    ctx.run_store.put(MODEL_KEY, model.encode()).await?;

    let epochs = steps.last().map_or(0.0, |s| s.epoch);
    let record = RunRecord {
        format_version: RECORD_VERSION,
        spec: spec.clone(),
        started_at_unix_ms: 0,
        wall_s: started.elapsed().as_secs_f64(),
        train_samples: manifest.train.samples,
        test_samples: manifest.test.samples,
        steps,
        epochs,
        stop_reason: stopper
            .reason
            .unwrap_or_else(|| format!("reached --max-epochs {}", spec.stop.max_epochs)),
        metrics,
        invocations: Vec::new(),
        bill: None,
        model_url: format!("{}/{MODEL_KEY}", ctx.run_store.url()),
        replica_spread,
    };
    ctx.run_store
        .put(RECORD_KEY, Bytes::from(json(&record)?))
        .await?;
    Ok(())
}

/// The largest difference between two replicas of one parameter.
fn spread(replicas: &[&[f32]]) -> f64 {
    let Some(first) = replicas.first() else {
        return 0.0;
    };
    (0..first.len())
        .map(|j| {
            let (lo, hi) = replicas
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), r| {
                    (lo.min(r[j]), hi.max(r[j]))
                });
            f64::from(hi) - f64::from(lo)
        })
        .fold(0.0, f64::max)
}

fn worker_step(s: &StatsMessage) -> WorkerStep {
    WorkerStep {
        worker: s.worker,
        loss: s.loss.mean(),
        samples: s.loss.count,
        read_ms: s.read_ms,
        compute_ms: s.compute_ms,
        exchange_ms: s.exchange_ms,
        step_ms: s.step_ms,
        bytes_sent: s.bytes_sent,
        bytes_received: s.bytes_received,
        messages_sent: s.messages_sent,
        messages_received: s.messages_received,
        entries_sent: s.entries_sent,
        entries_held: s.entries_held,
        updates_applied: s.updates_applied,
        started_unix_ms: s.started_unix_ms,
        published_unix_ms: s.published_unix_ms,
    }
}

/// Evaluates `params` on every test minibatch.
async fn evaluate(ctx: &JobContext, params: &[f32]) -> Result<mlless_core::Metrics> {
    let model = ctx.spec.model.model();
    let mut evaluation = Evaluation::for_spec(&ctx.spec.model);
    for index in 0..ctx.dataset.batches(Split::Test) {
        let batch = ctx.dataset.read_batch(Split::Test, index).await?;
        model
            .evaluate(params, &batch, &mut evaluation)
            .map_err(|source| RuntimeError::Model {
                location: format!("{} test minibatch {index}", ctx.dataset.url()),
                source,
            })?;
    }
    Ok(evaluation.finish())
}

/// The stop criteria other than the epoch count (which the workers apply themselves).
struct Stopper {
    target: Option<f64>,
    patience: u32,
    max_time: Option<Duration>,
    below_target: u32,
    reason: Option<String>,
}

impl Stopper {
    fn new(spec: &crate::spec::JobSpec) -> Self {
        Self {
            target: spec.stop.target_loss,
            patience: spec.stop.target_patience.max(1),
            max_time: spec.stop.max_time_s.map(Duration::from_secs_f64),
            below_target: 0,
            reason: None,
        }
    }

    /// The reason to stop after this step, once; `None` while training should go on.
    fn check(&mut self, step: u64, loss: f64, elapsed: Duration) -> Option<String> {
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

    async fn request(&mut self, ctx: &JobContext, reason: &str) -> Result<()> {
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

fn json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|source| RuntimeError::Json {
        location: "encoding".into(),
        source,
    })
}
