//! The supervisor function: gathers each step's loss and timings from the workers, decides when
//! to stop, averages the final replicas, evaluates the model on the test set and writes the model
//! and the run record. `collect.rs` gathers a step's messages within a deadline; `validation.rs`
//! evaluates; `scale_in.rs` removes workers; `stop.rs` decides to stop.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use bytes::Bytes;
use std::collections::BTreeMap;

use mlless_core::{Batch, BatchLoss, ScaleInConfig, primary_metric};
use mlless_store::{RequestCounts, StepMessages};
use tracing::info;

use mlless_faas::clock::now_unix_ms_f64;

use crate::checkpoint::{self, Lifetime};
use crate::context::JobContext;
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::exchange::first_message;
use crate::fleet::Fleet;
use crate::messages::{
    FINAL, Message, PROGRESS_KEY, Progress, REPLACE_KEY, ReplaceRequest, ReplicaMessage,
    SCALE_IN_KEY, STATS, STOP_KEY, StatsMessage, StopRequest, StoredModel,
};
use crate::task::Start;
use mlless_job::Fault;
use mlless_job::SUPERVISOR_ROLE;
use mlless_job::record::{
    EvalPoint, MODEL_KEY, RECORD_KEY, RECORD_VERSION, RunRecord, StepRecord, WorkerStep,
};
use mlless_store::ChannelError;

mod collect;
mod scale_in;
mod stop;
mod validation;
use collect::*;

use scale_in::{ScaleIn, job_progress};
use stop::{Stopper, diverged, divergence_threshold};
use validation::{Validation, cached_validation_set, evaluate, evaluate_on, read_snapshot};

/// How often the supervisor refreshes its progress report.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// The supervisor's whole state between two steps: what a new invocation resumes from.
#[derive(Debug, Serialize, Deserialize)]
struct SupervisorState {
    /// The next step to collect.
    step: u64,
    /// When the first invocation started, ms since the Unix epoch.
    started_unix_ms: f64,
    steps: Vec<StepRecord>,
    stopper: Stopper,
    diverged: Option<(u64, f64)>,
    /// The workers still sending statistics.
    active: Vec<u32>,
    fleet: Fleet,
    scale_in: Option<ScaleIn>,
    /// Statistics of the steps before this one are deleted.
    retained_from: u64,
    /// Replacements asked for so far, per worker.
    replacements: BTreeMap<u32, u32>,
    /// The validation curve so far (`None`: no validation set).
    #[serde(default)]
    validation: Option<Validation>,
}

impl Message for SupervisorState {
    const MAGIC: [u8; 4] = checkpoint::SUPERVISOR_MAGIC;
}

/// The object-store requests the workers have counted, from their statistics, for the live
/// bill of [`Progress::requests`]: each worker's latest count, and the counts of its earlier
/// invocations (a hand-off or a replacement starts counting at 0 again, so a count below the
/// worker's latest is a new invocation's). Not checkpointed: a new supervisor invocation counts
/// from the workers' current invocations on (the record counts every invocation's).
#[derive(Debug, Default)]
struct WorkerRequests {
    /// Per worker: its earlier invocations' counts, and its current one's latest.
    counts: BTreeMap<u32, (RequestCounts, RequestCounts)>,
}

impl WorkerRequests {
    /// Takes the count of `worker`'s statistics.
    fn observe(&mut self, worker: u32, count: RequestCounts) {
        let (earlier, latest) = self.counts.entry(worker).or_default();
        if count.total() < latest.total() {
            *earlier += *latest;
        }
        *latest = count;
    }

    /// Every worker's requests so far.
    fn total(&self) -> RequestCounts {
        let mut total = RequestCounts::default();
        for (earlier, latest) in self.counts.values() {
            total += *earlier;
            total += *latest;
        }
        total
    }
}

/// A worker that still sends nothing after this many replacements fails the run.
const MAX_REPLACEMENTS: u32 = 3;

/// Without `--worker-deadline`, a worker is replaced once its statistics are this many median
/// steps late ([`StepTimes::deadline`]) …
const DEADLINE_STEPS: u32 = 100;
/// … and never sooner than this: a cold start, a lifetime hand-off or a checkpoint written to a
/// slow store fits in it. A message lost in the channel (a Redis restart without persistence)
/// then costs this long, not a function's lifetime: the replacements replay from their
/// checkpoints and publish it again.
const DEADLINE_FLOOR: Duration = Duration::from_secs(30);

/// The supervisor's recent step times, from which the default worker deadline is derived.
#[derive(Debug, Default)]
struct StepTimes {
    recent: std::collections::VecDeque<Duration>,
}

impl StepTimes {
    /// How many recent steps the median is taken over.
    const KEPT: usize = 64;

    fn observe(&mut self, duration: Duration) {
        if self.recent.len() == Self::KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(duration);
    }

    /// [`DEADLINE_STEPS`] times the median recent step, at least [`DEADLINE_FLOOR`], at most
    /// `lifetime` (a function's).
    fn deadline(&self, lifetime: Duration) -> Duration {
        let mut sorted: Vec<Duration> = self.recent.iter().copied().collect();
        sorted.sort_unstable();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
        (median * DEADLINE_STEPS)
            .max(DEADLINE_FLOOR)
            .min(lifetime.max(DEADLINE_FLOOR))
    }
}

impl SupervisorState {
    /// Checks what resuming relies on beyond the decoding: a start time that is a time (the
    /// elapsed time is computed from it), workers listed once each, a valid tuner config.
    fn check(&self) -> std::result::Result<(), String> {
        if !(self.started_unix_ms.is_finite()
            && (0.0..=now_unix_ms_f64() + 86_400_000.0).contains(&self.started_unix_ms))
        {
            return Err(format!(
                "it started at {} ms since the Unix epoch",
                self.started_unix_ms
            ));
        }
        if self.active.windows(2).any(|w| w[1] <= w[0]) {
            return Err(format!(
                "its active workers {:?} are not ascending",
                self.active
            ));
        }
        if let Some(scale_in) = &self.scale_in {
            scale_in
                .tuner
                .config()
                .validate()
                .map_err(|e| format!("its scale-in tuner: {e}"))?;
        }
        Ok(())
    }

    /// Reads the checkpoint of `step`, checked.
    async fn load(ctx: &JobContext, step: u64) -> Result<Self> {
        let state: Self =
            checkpoint::load(&ctx.run_store, &ctx.spec.job_id, SUPERVISOR_ROLE, step).await?;
        state.check().map_err(|what| {
            RuntimeError::FunctionFailed(format!(
                "the supervisor checkpoint of step {step} does not fit: {what}"
            ))
        })?;
        Ok(state)
    }
}

/// Decoders of the private checkpoint type, for the fuzz targets and tests.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Decodes a supervisor checkpoint and checks it.
    pub fn decode_supervisor_state(bytes: &[u8]) -> Result<()> {
        let (_stamp, state) = checkpoint::decode_any::<SupervisorState>(bytes, || {
            "supervisor checkpoint".to_string()
        })?;
        state
            .check()
            .map_err(|what| RuntimeError::FunctionFailed(format!("supervisor checkpoint: {what}")))
    }

    /// A valid encoded supervisor checkpoint of 3 workers with a scale-in tuner and one step,
    /// for tests that corrupt it.
    pub fn sample_supervisor_state() -> Vec<u8> {
        let state = SupervisorState {
            step: 1,
            started_unix_ms: 1.7e12,
            steps: vec![StepRecord {
                step: 0,
                time_s: 0.5,
                epoch: 0.1,
                loss: 0.69,
                workers: Vec::new(),
            }],
            stopper: Stopper {
                target: Some(0.3),
                patience: 2,
                max_time: Some(Duration::from_secs(60)),
                below_target: 0,
                reason: None,
            },
            diverged: None,
            active: vec![0, 1, 2],
            fleet: Fleet::new(3, mlless_job::BatchPlan::whole(3)),
            scale_in: Some(
                ScaleIn::new(ScaleInConfig::default(), 3, false).expect("a valid tuner"),
            ),
            retained_from: 0,
            replacements: BTreeMap::new(),
            validation: None,
        };
        let stamp = checkpoint::Stamp::new("job-sample", SUPERVISOR_ROLE, 1);
        checkpoint::encode(&stamp, &state).to_vec()
    }
}

/// Runs the supervisor of the job until the workers have stopped and the model is written, or
/// until its lifetime nearly runs out (then it leaves a checkpoint for its next generation).
/// It starts from the checkpoint `start` names, if any.
///
/// A worker whose statistics of a step have not come `--worker-deadline` (by default
/// [`StepTimes::deadline`]) after the supervisor asked for them is asked to be replaced
/// (through the [`REPLACE_KEY`] the driver watches).
pub async fn run_supervisor(ctx: JobContext, start: Start) -> Result<()> {
    let spec = &ctx.spec;
    let generation = start.generation;
    let mut lifetime = Lifetime::new(spec.training.limits.timeout);
    let faults = if start.recovery == 0 {
        spec.training.faults.clone()
    } else {
        Vec::new()
    };
    let mut state = if let Some(step) = start.resume_step {
        let mut state = SupervisorState::load(&ctx, step).await?;
        // `--resume --max-time` may have changed it (still counted from the first start).
        state.stopper.max_time = Stopper::new(spec).max_time;
        state
    } else {
        SupervisorState {
            step: 0,
            started_unix_ms: now_unix_ms_f64(),
            steps: Vec::new(),
            stopper: Stopper::new(spec),
            diverged: None,
            // Under SSP and ASP workers may stop after different steps, and the scale-in
            // tuner removes workers: each one's last statistics say so, and it is not waited
            // for after that.
            active: ctx.workers(),
            fleet: Fleet::new(spec.training.workers, spec.plan()),
            scale_in: match &spec.training.scale_in {
                Some(config) => Some(ScaleIn::new(
                    config.clone(),
                    spec.training.workers,
                    spec.validation.is_some(),
                )?),
                None => None,
            },
            retained_from: 0,
            replacements: BTreeMap::new(),
            validation: match &spec.validation {
                Some(config) => Some(Validation::new(config, &spec.model)?),
                None => None,
            },
        }
    };
    // The validation minibatches, read once, at the first evaluation.
    let mut validation_set: Option<Vec<Batch>> = None;
    let elapsed = |state: &SupervisorState| {
        Duration::from_secs_f64(((now_unix_ms_f64() - state.started_unix_ms) / 1000.0).max(0.0))
    };
    let mut last_progress: Option<Instant> = None;
    let mut worker_requests = WorkerRequests::default();
    let mut step_times = StepTimes::default();
    let manifest = ctx.dataset.manifest();
    let per_epoch = spec.positions_per_epoch() as f64;

    loop {
        let step_started = Instant::now();
        let step = state.step;
        if faults.contains(&Fault::KillSupervisor { step }) {
            tracing::error!(step, "fault injection: killing the supervisor");
            std::process::abort();
        }
        let active = state.active.clone();
        let deadline = Deadline::of(spec, &step_times);
        let payloads = collect_stats(&ctx, &mut state, step, &active, deadline).await?;
        let mut stats = Vec::with_capacity(payloads.len());
        for (payload, &from) in payloads.iter().zip(&active) {
            stats.push(StatsMessage::decode(payload, || {
                format!("statistics of worker {from} for step {step}")
            })?);
        }
        if spec.training.checkpoint_every == 0 {
            ctx.channel
                .discard(StepMessages::new(STATS, step, &active))
                .await?;
        }
        let mut total = BatchLoss::default();
        for s in &stats {
            total.merge(s.loss);
            worker_requests.observe(s.worker, s.requests);
        }
        let loss = total.mean();
        for s in stats.iter().filter(|s| s.removed) {
            state.fleet.remove_after(s.worker, step);
        }
        // A Lloyd iteration of k-means reads the whole data set.
        let epoch = if mlless_job::ModelChoice::of(&spec.model).steps_by_lloyd() {
            (step + 1) as f64
        } else {
            state.fleet.positions_done(step) as f64 / per_epoch
        };
        let now = elapsed(&state);
        state.steps.push(StepRecord {
            step,
            time_s: now.as_secs_f64(),
            epoch,
            loss,
            workers: stats.iter().map(worker_step).collect(),
        });
        state
            .active
            .retain(|w| !stats.iter().any(|s| s.worker == *w && s.last));
        let last = state.active.is_empty();

        // The primary validation metric of this step's evaluation, for the tuner.
        let mut validation_value = None;
        if let Some(worker) = stats.iter().find(|s| s.traffic.snapshot).map(|s| s.worker)
            && let Some(validation) = &mut state.validation
        {
            let snapshot = read_snapshot(&ctx, step, worker).await?;
            validation.read.push((step, worker));
            if spec.training.checkpoint_every == 0 {
                validation.discard_read(&ctx, u64::MAX).await?;
            }
            if let Some(params) = snapshot {
                let batches = cached_validation_set(&ctx, &mut validation_set).await?;
                let metrics = evaluate_on(&ctx, &params, batches, Split::Validation)?;
                validation_value = metrics.get(primary_metric(&spec.model)).copied();
                let point = EvalPoint {
                    step,
                    epoch,
                    time_s: now.as_secs_f64(),
                    cost_usd: None,
                    metrics,
                    last: false,
                };
                if let Some(reason) = validation.observe(point, params) {
                    state.stopper.request(&ctx, &reason).await?;
                }
            }
        }
        // The first step's loss: the initial model's (relative divergence, see stop.rs).
        let first_loss = state.steps.first().map_or(loss, |s| s.loss);
        if state.diverged.is_none() && diverged(first_loss, loss) {
            state.diverged = Some((step, loss));
            state.stopper.request(&ctx, "the loss diverged").await?;
        } else if let Some(reason) = state.stopper.check(step, loss, now) {
            state.stopper.request(&ctx, &reason).await?;
        }
        if let Some(tuner) = &mut state.scale_in
            && !last
            && state.stopper.reason.is_none()
            && let Some(request) = tuner.step(
                step,
                now.as_secs_f64(),
                job_progress(spec, epoch, now),
                &stats,
                validation_value,
            )?
        {
            ctx.channel
                .put_key(SCALE_IN_KEY, Bytes::from(json(&request)?))
                .await?;
        }
        if last || last_progress.is_none_or(|t| t.elapsed() >= PROGRESS_EVERY) {
            let progress = Progress {
                step,
                epoch,
                loss,
                workers: state.fleet.workers(step + 1).len() as u32,
                validation: state.validation.as_ref().and_then(Validation::progress),
                requests: {
                    let mut requests = worker_requests.total();
                    requests += ctx.requests.counts();
                    requests
                },
            };
            ctx.channel
                .put_key(PROGRESS_KEY, Bytes::from(json(&progress)?))
                .await?;
            last_progress = Some(Instant::now());
        }
        if last {
            break;
        }
        state.step += 1;
        let every = spec.training.checkpoint_every;
        if every > 0 && state.step.is_multiple_of(every) {
            checkpoint::save(
                &ctx.run_store,
                &spec.job_id,
                SUPERVISOR_ROLE,
                state.step,
                every,
                &state,
            )
            .await?;
            // A replacement re-sends the statistics it replays; those before the checkpoint
            // before this one no resumed supervisor needs.
            let keep = checkpoint::keep_from(state.step, every);
            let workers = ctx.workers();
            for s in state.retained_from..keep {
                ctx.channel
                    .discard(StepMessages::new(STATS, s, &workers))
                    .await?;
            }
            if let Some(validation) = &mut state.validation {
                validation.discard_read(&ctx, keep).await?;
            }
            state.retained_from = state.retained_from.max(keep);
        }
        lifetime.observe_step(step_started.elapsed());
        step_times.observe(step_started.elapsed());
        if lifetime.nearly_over() {
            checkpoint::hand_off(
                &ctx.run_store,
                &spec.job_id,
                SUPERVISOR_ROLE,
                generation + 1,
                state.step,
                every,
                &state,
            )
            .await?;
            info!(step = state.step, "supervisor handed off");
            return Ok(());
        }
    }
    let SupervisorState {
        step,
        started_unix_ms,
        steps,
        stopper,
        diverged,
        fleet,
        scale_in,
        validation,
        ..
    } = state;

    if let Some((step, loss)) = diverged {
        return Err(RuntimeError::Diverged {
            step,
            loss,
            threshold: divergence_threshold(steps.first().map_or(f64::NAN, |s| s.loss)),
            lr: spec.lr,
        });
    }

    // The workers removed by the tuner have merged their replicas into the survivors'. Each
    // publishes its final replica right after its last statistics, or, replaced after a crash,
    // once it has replayed from its checkpoint: twice the default deadline covers that, and a
    // replica still missing then is lost.
    let survivors = fleet.workers(step).to_vec();
    let final_wait = Deadline::of(spec, &step_times)
        .duration()
        .max(DEADLINE_FLOOR)
        * 2;
    let payloads = collect_final(&ctx, &survivors, final_wait).await?;
    let mut replicas = Vec::with_capacity(payloads.len());
    for (payload, &from) in payloads.iter().zip(&survivors) {
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
    ctx.channel
        .discard(StepMessages::new(FINAL, 0, &survivors))
        .await?;
    let views: Vec<&[f32]> = replicas.iter().map(|r| r.params.as_slice()).collect();
    let params = mlless_core::average(&views);
    let replica_spread = spread(&views);

    // With a validation set, the model kept is the best one evaluated, the final one included.
    let (params, validation) = match validation {
        Some(mut validation) => {
            let batches = cached_validation_set(&ctx, &mut validation_set).await?;
            let metrics = evaluate_on(&ctx, &params, batches, Split::Validation)?;
            let epoch = steps.last().map_or(0.0, |s| s.epoch);
            let point = EvalPoint {
                step,
                epoch,
                time_s: steps.last().map_or(0.0, |s| s.time_s),
                cost_usd: None,
                metrics,
                last: true,
            };
            validation.observe(point, params.clone());
            // No best only if no evaluation had a finite metric: then the final model.
            let (best, record) = validation.into_best();
            (best.unwrap_or(params), Some(record))
        }
        None => (params, None),
    };
    let metrics = evaluate(&ctx, &params).await?;
    info!(?metrics, "test metrics");
    let model = StoredModel {
        spec: spec.model.clone(),
        params,
    };
    ctx.run_store.put(MODEL_KEY, model.encode()).await?;

    let epochs = steps.last().map_or(0.0, |s| s.epoch);
    let rounds = steps
        .iter()
        .filter(|s| s.workers.iter().any(|w| w.messages_sent > 0))
        .count() as u64;
    // A stop the driver asked for (a cancel, a failure) is the reason when no criterion of
    // the supervisor's own was.
    let stop_reason = match stopper.reason {
        Some(reason) => reason,
        None => match ctx.channel.get_key(STOP_KEY).await? {
            Some(bytes) => serde_json::from_slice::<StopRequest>(&bytes)
                .map(|request| request.reason)
                .map_err(|source| RuntimeError::Json {
                    location: format!("the channel's {STOP_KEY} key"),
                    source,
                })?,
            None => format!("reached --max-epochs {}", spec.training.stop.max_epochs),
        },
    };
    let record = RunRecord {
        format_version: RECORD_VERSION,
        // The record is for people and reports: never the channel's credentials.
        spec: spec.redacted(),
        started_at_unix_ms: 0,
        wall_s: (now_unix_ms_f64() - started_unix_ms) / 1000.0,
        train_samples: manifest.train.samples,
        test_samples: manifest.test.samples,
        steps,
        epochs,
        stop_reason,
        metrics,
        invocations: Vec::new(),
        bill: None,
        requests: None,
        model_url: format!("{}/{MODEL_KEY}", ctx.run_store.url()),
        replica_spread,
        rounds,
        scale_in: scale_in.map(ScaleIn::into_record).unwrap_or_default(),
        validation,
        refit: None,
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
        compute_cpu_ms: s.compute_cpu_ms,
        exchange_ms: s.exchange_ms,
        step_ms: s.step_ms,
        bytes_sent: s.traffic.bytes_sent,
        bytes_received: s.traffic.bytes_received,
        messages_sent: s.traffic.messages_sent,
        messages_received: s.traffic.messages_received,
        entries_sent: s.traffic.entries_sent,
        entries_held: s.traffic.entries_held,
        updates_applied: s.traffic.updates_applied,
        started_unix_ms: s.started_unix_ms,
        published_unix_ms: s.traffic.published_unix_ms,
    }
}

fn json<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|source| RuntimeError::Json {
        location: "encoding".into(),
        source,
    })
}

#[cfg(test)]
mod checkpoint_tests {
    use super::*;

    fn sample() -> SupervisorState {
        let bytes = fuzzing::sample_supervisor_state();
        checkpoint::decode_any::<SupervisorState>(&bytes, String::new)
            .unwrap()
            .1
    }

    #[test]
    fn checkpoints_that_would_panic_on_resume_are_refused() {
        assert_eq!(sample().check(), Ok(()));
        // A start far in the past would overflow the elapsed `Duration`.
        for start in [-1e300, f64::NAN, f64::INFINITY, 1e300] {
            let mut state = sample();
            state.started_unix_ms = start;
            assert!(state.check().is_err(), "{start}");
            let stamp = checkpoint::Stamp::new("job-sample", SUPERVISOR_ROLE, 1);
            let bytes = checkpoint::encode(&stamp, &state);
            assert!(fuzzing::decode_supervisor_state(&bytes).is_err());
        }
        let mut state = sample();
        state.active = vec![2, 1];
        assert!(state.check().is_err());
    }
}

#[cfg(test)]
mod request_tests {
    use super::*;

    #[test]
    fn a_workers_new_invocation_adds_to_its_earlier_counts() {
        let count = |puts, gets| RequestCounts {
            puts,
            gets,
            ..Default::default()
        };
        let mut tally = WorkerRequests::default();
        tally.observe(0, count(2, 5));
        tally.observe(1, count(2, 4));
        tally.observe(0, count(4, 10));
        assert_eq!(tally.total(), count(6, 14));
        // Worker 0 is replaced: its new invocation counts from 0 again.
        tally.observe(0, count(1, 2));
        assert_eq!(tally.total(), count(7, 16));
        tally.observe(0, count(3, 6));
        assert_eq!(tally.total(), count(9, 20));
    }
}
