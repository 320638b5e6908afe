//! The worker function: one local replica of the model, trained on its share of the minibatches,
//! kept in step with the other replicas through the channel (DESIGN §3–4, broadcast).
//!
//! At step `t`, worker `i` of `P`:
//! 1. reads its minibatch position of the shared shuffled order — `i + t·P` while the fleet
//!    keeps its size, see [`Fleet`] for scale-in (the next one is
//!    prefetched while it computes);
//! 2. computes the gradient of its minibatch and its optimiser's delta `u`;
//! 3. publishes on [`UPDATES`](crate::messages::UPDATES) what its [`UpdateFilter`] lets
//!    through of `u` (all of it under BSP, SSP and ASP without compression; the significant
//!    part under ISP; a compressed part with `--compress`), together with its loss;
//! 4. applies to its replica `(1/P)·u` of its own and `(1/P)·` every peer's sent delta:
//!    - BSP, ISP: collects the step's messages of all `P` workers and adds them with
//!      [`mlless_core::apply_mean`] in worker order (its own `u` in its own place), so that BSP
//!      replicas stay bit-for-bit equal, and ISP with `V = 0` is BSP;
//!    - SSP (slack `S`): before step `t + 1` it waits for every peer's updates up to step
//!      `t − S`, and applies whatever else has arrived; ASP: it never waits, and applies what has
//!      arrived. Each peer's updates are applied once, in the peer's step order;
//! 5. sends its timings, loss and traffic to the supervisor on [`STATS`].
//!
//! Under BSP and ISP every worker stops after the same step: the one that ends the last epoch,
//! or the one in which some worker's update carries the stop flag (set once it has seen the
//! supervisor's stop request). Under SSP and ASP each worker stops on its own and marks its last
//! update; before it ends it applies every peer's updates up to the peer's last one.
//! A worker whose filter holds updates back then publishes what it still holds on [`FLUSH`] and
//! applies its peers' flushes, so that no update is lost. At the end it publishes its replica on
//! [`FINAL`].
//!
//! The loop is the job's `Protocol`'s, each in its own module: `synchronous` (BSP, ISP),
//! `stale` (SSP, ASP) and `lloyd` (k-means); they share the `Worker` state and its step
//! parts here. The minibatch reader, a replacement's replay, fault injection and the checkpoint
//! have a module each.

mod faults;
mod lloyd;
mod reader;
mod replay;
mod stale;
mod state;
mod synchronous;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mlless_core::Training;
use mlless_core::{
    BatchLoss, FilterStats, GradientAccumulator, Model, Optimizer, SparseVector, UpdateFilter,
    WireDelta,
};
use mlless_store::{Channel, MessageId, StepMessages};
use tokio::task::JoinHandle;
use tracing::debug;

use mlless_faas::clock::{now_unix_ms_f64, thread_cpu_time};

use crate::checkpoint::{self, Lifetime};
use crate::context::JobContext;
use crate::error::{Result, RuntimeError};
use crate::exchange::{Exchange, discard_published};
use crate::fleet::Fleet;
use crate::messages::{
    EVAL, FINAL, FLUSH, Message, Removal, ReplicaMessage, SCALE_IN_KEY, STATS, STOP_KEY,
    StatsMessage, Traffic, UpdateMessage,
};
use crate::task::Start;
use mlless_job::{Algorithm, Fault, JobSpec, SyncMode, worker_role};

pub use lloyd::KMEANS_SEED_BATCHES;
pub use state::fuzzing;

use faults::FaultyChannel;
use reader::BatchReader;
use stale::StaleState;

/// How often a worker looks for the supervisor's stop request.
const STOP_POLL: Duration = Duration::from_millis(200);

/// Runs worker `id` of the job until training stops, or until its lifetime nearly runs out
/// (then it leaves a checkpoint for its next generation; see [`crate::checkpoint`]).
///
/// It starts from the checkpoint `start` names, if any. A replacement (`start.recovery > 0`)
/// then replays the steps its peers have gone past: it recomputes each (the same update, as
/// the computation is deterministic), republishes it with the flags of the message it had
/// published before, and applies its peers' retained messages, until it reaches a step it had
/// not published.
pub async fn run_worker(ctx: JobContext, id: u32, start: Start) -> Result<()> {
    let mut worker = Worker::new(ctx, id);
    worker.model = worker.ctx.training_model()?;
    if let Some(step) = start.resume_step {
        let saved = checkpoint::load(
            &worker.ctx.run_store,
            &worker.ctx.spec.job_id,
            &worker_role(id),
            step,
        )
        .await?;
        worker.restore(saved)?;
    }
    worker.replaying = start.recovery > 0;
    if start.recovery == 0 {
        worker.faults = worker.ctx.spec.training.faults.clone();
        worker.exchange_channel =
            FaultyChannel::wrap(worker.ctx.channel.clone(), id, &worker.faults);
    }
    let generation = start.generation;
    let end = match Protocol::of(&worker.ctx.spec) {
        Protocol::Synchronous => worker.run_synchronous().await?,
        Protocol::Stale => worker.run_stale().await?,
        Protocol::Lloyd { k, features } => worker.run_kmeans(k, features).await?,
    };
    worker.discarded().await?;
    match end {
        End::Last(step) => worker.finish(step).await,
        End::HandOff => worker.hand_off(generation + 1).await,
    }
}

/// The loop a worker runs, one per family of synchronisation protocols, each in its own module.
/// The model says how it trains ([`ModelSpec::training`](mlless_core::ModelSpec::training)) and the job how its workers
/// synchronise ([`SyncMode`]); [`Protocol::of`] matches both exhaustively, so that a new model
/// loop or synchronisation mode does not compile until it is given a protocol here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// BSP and ISP ([`synchronous`]): every step's updates are averaged by an exchange.
    Synchronous,
    /// SSP and ASP ([`stale`]): peers' updates are applied as they arrive, within the slack.
    Stale,
    /// k-means ([`lloyd`]): one distributed Lloyd iteration per step.
    Lloyd {
        /// Number of clusters.
        k: u32,
        /// Number of features of a point.
        features: u32,
    },
}

impl Protocol {
    /// The protocol the workers of the job `spec` run.
    fn of(spec: &JobSpec) -> Self {
        match spec.model.training() {
            Training::Lloyd { k, features } => Self::Lloyd { k, features },
            Training::Gradients => match spec.training.sync {
                SyncMode::Bsp | SyncMode::Isp { .. } => Self::Synchronous,
                SyncMode::Ssp { .. } | SyncMode::Asp => Self::Stale,
            },
        }
    }
}

/// How a worker's run ended.
enum End {
    /// Training ended after this step.
    Last(u64),
    /// The lifetime nearly ran out: hand off to the next invocation.
    HandOff,
}

/// A worker's state between steps.
struct Worker {
    ctx: JobContext,
    id: u32,
    workers: Vec<u32>,
    /// Where `id` is in `workers`.
    me: usize,
    model: Box<dyn Model>,
    params: Vec<f32>,
    optimizer: Box<dyn Optimizer>,
    accumulator: GradientAccumulator,
    filter: Option<UpdateFilter>,
    reader: BatchReader,
    /// The active workers over the steps (fewer after scale-in removals).
    fleet: Fleet,
    /// Scale-in removals applied so far.
    removals: u32,
    /// The supervisor's latest removal request not applied yet.
    requested: Option<Removal>,
    last_stop_poll: Option<Instant>,
    stop_seen: bool,
    pending_stats: Option<JoinHandle<Result<()>>>,
    /// What the algorithm keeps between exchanges (MA-SGD, ADMM).
    rounds: RoundState,
    /// The step to run next (not 0 after a hand-off).
    next_step: u64,
    /// SSP and ASP: the peers' progress (restored after a hand-off).
    stale: Option<StaleState>,
    lifetime: Lifetime,
    /// A replacement that has not yet reached a step it had not published before.
    replaying: bool,
    /// Own messages of the steps before this one are deleted (with periodic checkpoints,
    /// they are kept from the checkpoint before the newest on, for a replacement's replay).
    retained_from: u64,
    /// Faults to inject (test aid; none in a replacement).
    faults: Vec<Fault>,
    /// The channel exchanges go through: the job's, or (test aid) a [`FaultyChannel`] over it
    /// that drops or delays this worker's own messages of some steps.
    exchange_channel: Arc<dyn Channel>,
    /// When this worker last published its model for validation (or started).
    last_snapshot: Instant,
    /// The deletion of this worker's messages of the step before, running while the next step
    /// computes and exchanges (on S3 a request, on Redis a round trip, off the step's path);
    /// awaited before the next one starts and before the worker ends.
    discarding: Option<tokio::task::JoinHandle<Result<()>>>,
}

/// What MA-SGD and ADMM keep between two exchanges.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
enum RoundState {
    /// GA-SGD: nothing; every step exchanges.
    None,
    /// MA-SGD: the averaged model of the last exchange.
    Anchor(Vec<f32>),
    /// ADMM: the consensus `z` and this worker's scaled dual `u`.
    Admm { z: Vec<f32>, u: Vec<f32> },
    /// k-means: the mean inertia per worker of the last Lloyd iteration.
    Lloyd { inertia: Option<f32> },
}

/// A step's local work, apart from the optimiser's delta.
#[derive(Clone, Copy)]
struct Computed {
    /// When the step started.
    started: Instant,
    loss: BatchLoss,
    read_ms: f64,
    compute_ms: f64,
    /// The CPU time of the compute, ms (`None` without a thread CPU clock).
    compute_cpu_ms: Option<f64>,
    started_unix_ms: f64,
    /// The learning rate of the step.
    lr: f32,
}

impl Worker {
    fn new(ctx: JobContext, id: u32) -> Self {
        let spec = &ctx.spec;
        let params = spec.model.init_params(spec.training.seed);
        let (params_copy, n) = (params.clone(), params.len());
        let (algorithm, timeout) = (spec.training.algorithm, spec.training.limits.timeout);
        let protocol = Protocol::of(spec);
        let optimizer = mlless_core::build_optimizer(&spec.optimizer, params.len());
        let accumulator = GradientAccumulator::new(params.len());
        let filter = Some(spec.filter())
            .filter(|f| !f.is_identity())
            .map(|f| UpdateFilter::new(params.len(), f));
        let reader = BatchReader::new(&ctx);
        let fleet = Fleet::new(spec.training.workers, spec.plan());
        let workers = ctx.workers();
        let exchange_channel = ctx.channel.clone();
        let me = workers.iter().position(|&w| w == id).unwrap_or(0);
        Self {
            model: spec.model.model(),
            ctx,
            id,
            workers,
            me,
            params,
            optimizer,
            accumulator,
            filter,
            reader,
            fleet,
            removals: 0,
            requested: None,
            last_stop_poll: None,
            stop_seen: false,
            pending_stats: None,
            rounds: match algorithm {
                _ if matches!(protocol, Protocol::Lloyd { .. }) => {
                    RoundState::Lloyd { inertia: None }
                }
                Algorithm::Ga => RoundState::None,
                Algorithm::Ma { .. } => RoundState::Anchor(params_copy),
                Algorithm::Admm { .. } => RoundState::Admm {
                    z: params_copy,
                    u: vec![0.0; n],
                },
            },
            next_step: 0,
            stale: None,
            lifetime: Lifetime::new(timeout),
            replaying: false,
            retained_from: 0,
            faults: Vec::new(),
            exchange_channel,
            last_snapshot: Instant::now(),
            discarding: None,
        }
    }

    /// Writes the state for the invocation of `generation` and ends this one.
    async fn hand_off(mut self, generation: u32) -> Result<()> {
        if let Some(previous) = self.pending_stats.take() {
            join(previous).await?;
        }
        let spec = &self.ctx.spec;
        checkpoint::hand_off(
            &self.ctx.run_store,
            &spec.job_id,
            &worker_role(self.id),
            generation,
            self.next_step,
            spec.training.checkpoint_every,
            &self.snapshot(),
        )
        .await?;
        debug!(
            worker = self.id,
            generation,
            step = self.next_step,
            "handed off"
        );
        Ok(())
    }

    /// After `step` (of a synchronous mode), with periodic checkpoints: every
    /// `checkpoint_every` steps, writes a checkpoint and deletes the own messages no
    /// replacement can need any more. Without them: deletes the own messages of the exchange
    /// `round` steps before, which every peer has applied.
    async fn after_step(
        &mut self,
        step: u64,
        round: u64,
        exchanged: bool,
        last: bool,
    ) -> Result<()> {
        let every = self.ctx.spec.training.checkpoint_every;
        self.discarded().await?;
        if every == 0 {
            if exchanged && let Some(previous) = step.checked_sub(round) {
                self.discard_in_background(previous);
            }
            return Ok(());
        }
        if !last && (step + 1).is_multiple_of(every) {
            self.next_step = step + 1;
            checkpoint::save(
                &self.ctx.run_store,
                &self.ctx.spec.job_id,
                &worker_role(self.id),
                step + 1,
                every,
                &self.snapshot(),
            )
            .await?;
            let keep = checkpoint::keep_from(step + 1, every);
            for s in self.retained_from..keep {
                self.exchange(self.fleet.workers(s)).discard(s).await?;
            }
            self.retained_from = self.retained_from.max(keep);
        }
        Ok(())
    }

    /// Starts deleting this worker's messages of `step` on a task of its own: every peer has
    /// read them once this worker's exchange of a later step is over, which is when it is
    /// called.
    fn discard_in_background(&mut self, step: u64) {
        let channel = self.exchange_channel.clone();
        let training = &self.ctx.spec.training;
        let (pattern, job_workers, worker) =
            (training.exchange_pattern(), training.workers, self.id);
        self.discarding = Some(tokio::spawn(async move {
            discard_published(&*channel, pattern, worker, job_workers, step).await
        }));
    }

    /// Waits for the deletion [`discard_in_background`](Self::discard_in_background) started,
    /// if one is under way, and returns its error.
    async fn discarded(&mut self) -> Result<()> {
        match self.discarding.take() {
            None => Ok(()),
            Some(task) => task.await.map_err(|e| {
                RuntimeError::FunctionFailed(format!("the deletion of old messages failed: {e}"))
            })?,
        }
    }

    /// After `step`: whether to hand off to a new invocation before the lifetime runs out
    /// (remembering where to go on).
    fn time_to_hand_off(&mut self, step: u64, started: Instant) -> bool {
        self.lifetime.observe_step(started.elapsed());
        self.next_step = step + 1;
        self.lifetime.nearly_over()
    }

    /// Reads the step's minibatch and computes the optimiser's delta on it.
    async fn compute(&mut self, step: u64) -> Result<(Computed, SparseVector)> {
        let started = Instant::now();
        let started_unix_ms = now_unix_ms_f64();
        let (positions, next) = match self.rounds {
            // ADMM: each worker passes over its own shard of epoch 0's order again and again,
            // a whole minibatch a step.
            RoundState::Admm { .. } => {
                let shard = |step| {
                    self.reader
                        .shard_positions(self.me, self.workers.len(), step)
                };
                (shard(step), Some(shard(step + 1)))
            }
            _ => {
                let positions = self.fleet.positions(self.id, step).ok_or_else(|| {
                    RuntimeError::FunctionFailed(format!(
                        "worker {} is not active at step {step}",
                        self.id
                    ))
                })?;
                (positions, self.fleet.positions(self.id, step + 1))
            }
        };
        let (epoch, batch) = self.reader.next(positions, next).await?;
        let read_ms = ms(started.elapsed());
        let compute_started = Instant::now();
        let cpu_started = thread_cpu_time();
        let loss = self
            .model
            .gradient(&self.params, &batch, &mut self.accumulator)
            .map_err(|source| RuntimeError::Model {
                location: format!("worker {}, step {step}", self.id),
                source,
            })?;
        let gradient = self.accumulator.take();
        let spec = &self.ctx.spec;
        let epoch = match self.rounds {
            RoundState::Admm { .. } => {
                step * self.workers.len() as u64 / u64::from(spec.train_batches.max(1))
            }
            RoundState::None | RoundState::Anchor(_) | RoundState::Lloyd { .. } => epoch,
        };
        let lr = spec.rate(epoch);
        let delta = self.optimizer.step(&self.params, &gradient, lr);
        let computed = Computed {
            started,
            loss,
            read_ms,
            compute_ms: ms(compute_started.elapsed()),
            compute_cpu_ms: cpu_elapsed(cpu_started).map(ms),
            started_unix_ms,
            lr,
        };
        Ok((computed, delta))
    }

    /// Whether the supervisor has asked to stop, and (with scale-in) its latest removal
    /// request; looked up at most every [`STOP_POLL`].
    async fn poll_stop(&mut self) -> Result<bool> {
        if !self.stop_seen && self.last_stop_poll.is_none_or(|t| t.elapsed() >= STOP_POLL) {
            self.stop_seen = self.ctx.channel.get_key(STOP_KEY).await?.is_some();
            if self.ctx.spec.training.scale_in.is_some()
                && let Some(bytes) = self.ctx.channel.get_key(SCALE_IN_KEY).await?
            {
                let request: Removal =
                    serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
                        location: format!("channel key {SCALE_IN_KEY}"),
                        source,
                    })?;
                if request.seq == self.removals + 1 {
                    self.requested = Some(request);
                }
            }
            self.last_stop_poll = Some(Instant::now());
        }
        Ok(self.stop_seen)
    }

    /// What the filter lets through of `delta` (all of it without a filter).
    fn outgoing(&mut self, delta: &SparseVector, step: u64) -> (WireDelta, FilterStats) {
        match &mut self.filter {
            Some(filter) => filter.filter(delta, &self.params, step),
            None => (
                WireDelta::Sparse(delta.clone()),
                FilterStats {
                    sent: delta.nnz(),
                    held: 0,
                },
            ),
        }
    }

    fn peer_delta(&self, delta: WireDelta, from: u32, step: u64) -> Result<SparseVector> {
        delta.into_sparse(self.params.len()).map_err(|e| {
            RuntimeError::FunctionFailed(format!(
                "the update of worker {from} for step {step} does not fit the model: {e}"
            ))
        })
    }

    /// This worker's side of an exchange among `workers` of vectors over the parameters.
    fn exchange<'a>(&'a self, workers: &'a [u32]) -> Exchange<'a> {
        self.exchange_of(workers, self.params.len())
    }

    /// This worker's side of an exchange among `workers` of vectors of dimension `dim`.
    fn exchange_of<'a>(&'a self, workers: &'a [u32], dim: usize) -> Exchange<'a> {
        Exchange {
            channel: &*self.exchange_channel,
            job_workers: self.ctx.spec.training.workers,
            timeout: self.ctx.spec.collect_timeout(),
            pattern: self.ctx.spec.training.exchange_pattern(),
            worker: self.id,
            workers,
            dim,
            expected_removal: self.removals + 1,
        }
    }

    /// The update message of `step` carrying `delta`.
    fn message(&self, step: u64, loss: BatchLoss, stop: bool, delta: WireDelta) -> UpdateMessage {
        UpdateMessage {
            step,
            worker: self.id,
            loss,
            stop,
            last: false,
            applied_through: step,
            removal: self.requested,
            delta,
        }
    }

    /// Publishes what the filter still holds after the last step `step` and applies the
    /// peers' flushes (nothing to do without a filter).
    async fn flush(&mut self, step: u64, traffic: &mut Traffic) -> Result<()> {
        if self.filter.is_none() {
            return Ok(());
        }
        self.publish_flush(0, traffic).await?;
        let fleet = self.fleet.workers(step);
        let peers: Vec<u32> = fleet.iter().copied().filter(|&w| w != self.id).collect();
        let weight = 1.0 / fleet.len() as f32;
        self.apply_flushes(0, &peers, weight, traffic).await
    }

    /// Publishes on [`FLUSH`] at `flush_step` everything the filter still holds, emptying it.
    async fn publish_flush(&mut self, flush_step: u64, traffic: &mut Traffic) -> Result<()> {
        let Some(filter) = &mut self.filter else {
            return Ok(());
        };
        let message = UpdateMessage {
            step: flush_step,
            worker: self.id,
            loss: BatchLoss::default(),
            stop: false,
            last: true,
            applied_through: 0,
            removal: None,
            delta: WireDelta::Sparse(filter.flush()),
        };
        let bytes = message.encode();
        traffic.bytes_sent += bytes.len() as u64;
        traffic.messages_sent += 1;
        traffic.entries_sent += message.delta.nnz() as u64;
        traffic.entries_held = 0;
        self.ctx
            .channel
            .publish(MessageId::new(FLUSH, flush_step, self.id), bytes)
            .await?;
        Ok(())
    }

    /// Collects the flushes of `from` at `flush_step` and applies them with `weight`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe while it waits for the flushes (nothing is applied before all have come);
    /// the replica is updated only after the last await.
    async fn apply_flushes(
        &mut self,
        flush_step: u64,
        from: &[u32],
        weight: f32,
        traffic: &mut Traffic,
    ) -> Result<()> {
        let payloads = self
            .ctx
            .channel
            .collect(
                StepMessages::new(FLUSH, flush_step, from),
                self.ctx.spec.collect_timeout(),
            )
            .await?;
        for (payload, &peer) in payloads.iter().zip(from) {
            traffic.bytes_received += payload.len() as u64;
            traffic.messages_received += 1;
            let update = UpdateMessage::decode(payload, || {
                format!("updates worker {peer} held back, flushed at step {flush_step}")
            })?;
            let delta = self.peer_delta(update.delta, peer, flush_step)?;
            delta.scaled_add_to(&mut self.params, weight);
            traffic.updates_applied += 1;
        }
        Ok(())
    }

    /// Publishes this worker's model of `step` on [`EVAL`] for the supervisor to evaluate on
    /// the validation set, when the job has one, an evaluation is due after `step`
    /// ([`EvalEvery::is_due`](mlless_job::EvalEvery::is_due)), and this worker leads the
    /// step's fleet (under BSP every replica is the same; otherwise the leader's stands for
    /// them). The last step's model is not sent: the supervisor evaluates the final model
    /// itself. Returns whether it published.
    async fn publish_snapshot(&mut self, step: u64, last: bool) -> Result<bool> {
        let Some(validation) = &self.ctx.spec.validation else {
            return Ok(false);
        };
        let leads = self.fleet.workers(step).first() == Some(&self.id);
        if last || !leads {
            return Ok(false);
        }
        let per_epoch = self.ctx.spec.positions_per_epoch();
        // A Lloyd iteration of k-means reads the whole data set.
        let lloyd = matches!(Protocol::of(&self.ctx.spec), Protocol::Lloyd { .. });
        let positions = if lloyd {
            (step * per_epoch, (step + 1) * per_epoch)
        } else {
            let before = step
                .checked_sub(1)
                .map_or(0, |s| self.fleet.positions_done(s));
            (before, self.fleet.positions_done(step))
        };
        if !validation
            .every
            .is_due(step, positions, per_epoch, self.last_snapshot.elapsed())
        {
            return Ok(false);
        }
        self.publish_model(EVAL, step, step).await?;
        self.last_snapshot = Instant::now();
        Ok(true)
    }

    /// Sends the step's statistics to the supervisor while the next step computes, one at a
    /// time so that they arrive in order.
    async fn send_stats(
        &mut self,
        step: u64,
        computed: Computed,
        exchange_ms: f64,
        traffic: Traffic,
        last: bool,
        removed: bool,
    ) -> Result<()> {
        let stats = StatsMessage {
            step,
            worker: self.id,
            loss: computed.loss,
            read_ms: computed.read_ms,
            compute_ms: computed.compute_ms,
            compute_cpu_ms: computed.compute_cpu_ms,
            exchange_ms,
            step_ms: ms(computed.started.elapsed()),
            traffic,
            started_unix_ms: computed.started_unix_ms,
            last,
            removed,
            requests: self.ctx.requests.counts(),
        };
        if let Some(previous) = self.pending_stats.take() {
            join(previous).await?;
        }
        let channel = self.ctx.channel.clone();
        let id = self.id;
        self.pending_stats = Some(tokio::spawn(async move {
            channel
                .publish(MessageId::new(STATS, step, id), stats.encode())
                .await
                .map_err(RuntimeError::from)
        }));
        Ok(())
    }

    /// Waits for the last statistics and publishes the replica for the supervisor (unless the
    /// worker was removed: its replica lives on in the survivors').
    async fn finish(mut self, step: u64) -> Result<()> {
        if let Some(previous) = self.pending_stats.take() {
            join(previous).await?;
        }
        if self.fleet.positions(self.id, step + 1).is_none() {
            return Ok(());
        }
        // The last step's updates stay: a slower peer may still be collecting them. The driver
        // cleans the channel up when the job ends.
        self.publish_model(FINAL, 0, step).await
    }

    /// Publishes this worker's model after `step` on `topic` at `at`: its replica, or ADMM's
    /// consensus `z`.
    async fn publish_model(&self, topic: &str, at: u64, step: u64) -> Result<()> {
        let params = match &self.rounds {
            // ADMM's model is the consensus.
            RoundState::Admm { z, .. } => z.clone(),
            RoundState::None | RoundState::Anchor(_) | RoundState::Lloyd { .. } => {
                self.params.clone()
            }
        };
        let replica = ReplicaMessage {
            worker: self.id,
            step,
            params,
        };
        self.ctx
            .channel
            .publish(MessageId::new(topic, at, self.id), replica.encode())
            .await?;
        Ok(())
    }
}

/// Milliseconds since the Unix epoch, for the timestamps of the run record.
async fn join(handle: JoinHandle<Result<()>>) -> Result<()> {
    handle
        .await
        .map_err(|e| RuntimeError::FunctionFailed(format!("background task failed: {e}")))?
}

/// The calling thread's CPU time since `start` (a [`thread_cpu_time`] reading taken on the
/// same thread, with no await in between); `None` without a thread CPU clock.
fn cpu_elapsed(start: Option<Duration>) -> Option<Duration> {
    Some(thread_cpu_time()?.saturating_sub(start?))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
