//! The worker function: one local replica of the model, trained on its share of the minibatches,
//! kept in step with the other replicas through the channel (DESIGN §3–4, broadcast).
//!
//! At step `t`, worker `i` of `P`:
//! 1. reads its minibatch position of the shared shuffled order — `i + t·P` while the fleet
//!    keeps its size, see [`Fleet`] for scale-in (the next one is
//!    prefetched while it computes);
//! 2. computes the gradient of its minibatch and its optimiser's delta `u`;
//! 3. publishes on [`UPDATES`] what its [`UpdateFilter`] lets through of `u` (all of it under
//!    BSP, SSP and ASP without compression; the significant part under ISP; a compressed part
//!    with `--compress`), together with its loss;
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

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mlless_core::{
    Batch, BatchLoss, FilterStats, GradientAccumulator, LloydSums, Model, ModelSpec, Optimizer,
    SparseVector, UpdateFilter, WireDelta, kmeans_plus_plus,
};
use tokio::task::JoinHandle;
use tracing::debug;

use crate::checkpoint::{self, Lifetime};
use crate::context::JobContext;
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::exchange::PublishFault;
use crate::exchange::{Exchange, Traffic};
use crate::function::Start;
use crate::messages::{
    EVAL, FINAL, FLUSH, Message, Removal, ReplicaMessage, SCALE_IN_KEY, STATS, STOP_KEY,
    StatsMessage, UPDATES, UpdateMessage,
};
use crate::spec::{Algorithm, Fault, Fleet, batch_order};

/// k-means++ seeds on this many minibatches (the first ones of the training set).
pub const KMEANS_SEED_BATCHES: u32 = 8;

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
        let saved = checkpoint::load(&worker.ctx.run_store, &worker_role(id), step).await?;
        worker.restore(saved)?;
    }
    worker.replaying = start.recovery > 0;
    if start.recovery == 0 {
        worker.faults = worker.ctx.spec.faults.clone();
    }
    let generation = start.generation;
    let end = if let ModelSpec::KMeans { features, k } = worker.ctx.spec.model {
        worker.run_kmeans(k, features).await?
    } else if worker.ctx.spec.sync.is_synchronous() {
        worker.run_synchronous().await?
    } else {
        worker.run_stale().await?
    };
    match end {
        End::Last(step) => worker.finish(step).await,
        End::HandOff => worker.hand_off(generation + 1).await,
    }
}

/// The role name of worker `id`, as invocations and checkpoints name it.
pub fn worker_role(id: u32) -> String {
    format!("worker-{id}")
}

/// How a worker's run ended.
enum End {
    /// Training ended after this step.
    Last(u64),
    /// The lifetime nearly ran out: hand off to the next invocation.
    HandOff,
}

/// A worker's whole state between two steps: what a new invocation resumes from.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct WorkerCheckpoint {
    worker: u32,
    next_step: u64,
    params: Vec<f32>,
    optimizer: mlless_core::OptimizerState,
    filter: Option<UpdateFilter>,
    fleet: Fleet,
    removals: u32,
    requested: Option<Removal>,
    stop_seen: bool,
    rounds: RoundState,
    stale: Option<StaleState>,
    retained_from: u64,
}

impl Message for WorkerCheckpoint {
    const MAGIC: [u8; 4] = *b"MLLW";
}

impl WorkerCheckpoint {
    /// Checks that the parts agree with the parameter vector and with `peers` workers, so that
    /// resuming from it indexes nothing out of bounds.
    fn check(&self, peers: usize) -> std::result::Result<(), String> {
        let n = self.params.len();
        if let Some(filter) = &self.filter
            && filter.dim() != n
        {
            return Err(format!(
                "its update filter is over {} parameters, not {n}",
                filter.dim()
            ));
        }
        let rounds_ok = match &self.rounds {
            RoundState::Anchor(anchor) => anchor.len() == n,
            RoundState::Admm { z, u } => z.len() == n && u.len() == n,
            RoundState::None | RoundState::Lloyd { .. } => true,
        };
        if !rounds_ok {
            return Err(format!("its averaged model is not over {n} parameters"));
        }
        if let Some(stale) = &self.stale
            && [stale.cursor.len(), stale.ended.len(), stale.reported.len()] != [peers; 3]
        {
            return Err(format!("its peer cursors are not for {peers} workers"));
        }
        Ok(())
    }
}

/// Decoders of the private checkpoint types, for the fuzz targets and tests.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Decodes a worker checkpoint and checks its parts against its own parameter vector and
    /// as many peers as its fleet starts with.
    pub fn decode_worker_checkpoint(bytes: &[u8]) -> Result<()> {
        let saved = WorkerCheckpoint::decode(bytes, || "worker checkpoint".to_string())?;
        let peers = saved.fleet.workers(0).len();
        saved.check(peers).map_err(|what| {
            RuntimeError::FunctionFailed(format!("the worker checkpoint does not fit: {what}"))
        })
    }

    /// A valid encoded worker checkpoint over `params` parameters and 3 workers, with every
    /// optional part present, for tests that corrupt it.
    pub fn sample_worker_checkpoint(params: usize) -> Vec<u8> {
        let mut filter = UpdateFilter::new(params, mlless_core::FilterConfig::default());
        let update = SparseVector::from_pairs(vec![(0, 1.0)]);
        filter.filter(&update, &vec![1.0; params], 0);
        let mut optimizer =
            mlless_core::build_optimizer(&mlless_core::OptimizerConfig::default(), params);
        optimizer.step(&vec![0.0; params], &update, 0.1);
        let saved = WorkerCheckpoint {
            worker: 1,
            next_step: 7,
            params: vec![0.5; params],
            optimizer: optimizer.state(),
            filter: Some(filter),
            fleet: Fleet::new(3),
            removals: 0,
            requested: Some(Removal { seq: 1, worker: 2 }),
            stop_seen: false,
            rounds: RoundState::Admm {
                z: vec![0.0; params],
                u: vec![1.0; params],
            },
            stale: Some(StaleState {
                cursor: vec![7; 3],
                ended: vec![None, Some(3), None],
                reported: vec![6; 3],
                discarded_through: 5,
            }),
            retained_from: 0,
        };
        saved.encode().to_vec()
    }
}

/// SSP and ASP: what a worker knows of each peer (indexed by position in the fleet).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct StaleState {
    /// The next step of theirs to apply.
    cursor: Vec<u64>,
    /// The step they ended at, once seen.
    ended: Vec<Option<u64>>,
    /// The `applied_through` they last reported.
    reported: Vec<u64>,
    /// Own messages before this step are deleted.
    discarded_through: u64,
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
    /// When this worker last published its model for validation (or started).
    last_snapshot: Instant,
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
    started_unix_ms: f64,
    /// The learning rate of the step.
    lr: f32,
}

impl Worker {
    fn new(ctx: JobContext, id: u32) -> Self {
        let spec = &ctx.spec;
        let params = spec.model.init_params(spec.seed);
        let (params_copy, n) = (params.clone(), params.len());
        let (algorithm, timeout) = (spec.algorithm, spec.limits.timeout);
        let kmeans = matches!(spec.model, ModelSpec::KMeans { .. });
        let optimizer = mlless_core::build_optimizer(&spec.optimizer, params.len());
        let accumulator = GradientAccumulator::new(params.len());
        let filter = Some(spec.filter())
            .filter(|f| !f.is_identity())
            .map(|f| UpdateFilter::new(params.len(), f));
        let reader = BatchReader::new(&ctx);
        let fleet = Fleet::new(spec.workers);
        let workers = ctx.workers();
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
                _ if kmeans => RoundState::Lloyd { inertia: None },
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
            last_snapshot: Instant::now(),
        }
    }

    /// Takes up the state a previous invocation left.
    fn restore(&mut self, saved: WorkerCheckpoint) -> Result<()> {
        let bad = |what: String| {
            RuntimeError::FunctionFailed(format!(
                "the checkpoint of worker {} does not fit the job: {what}",
                self.id
            ))
        };
        if saved.worker != self.id || saved.params.len() != self.params.len() {
            return Err(bad(format!(
                "it is worker {}'s, with {} parameters",
                saved.worker,
                saved.params.len()
            )));
        }
        if std::mem::discriminant(&saved.rounds) != std::mem::discriminant(&self.rounds)
            || saved.filter.is_some() != self.filter.is_some()
            || saved.stale.is_some() && self.ctx.spec.sync.is_synchronous()
        {
            return Err(bad(
                "it is of another algorithm, filter or synchronisation".to_string()
            ));
        }
        saved.check(self.workers.len()).map_err(bad)?;
        self.optimizer
            .restore(saved.optimizer)
            .map_err(|e| bad(e.to_string()))?;
        self.params = saved.params;
        self.filter = saved.filter;
        self.fleet = saved.fleet;
        self.removals = saved.removals;
        self.requested = saved.requested;
        self.stop_seen = saved.stop_seen;
        self.rounds = saved.rounds;
        self.stale = saved.stale;
        self.next_step = saved.next_step;
        self.retained_from = saved.retained_from;
        Ok(())
    }

    /// The whole state, ready to run `self.next_step`.
    fn snapshot(&self) -> WorkerCheckpoint {
        WorkerCheckpoint {
            worker: self.id,
            next_step: self.next_step,
            params: self.params.clone(),
            optimizer: self.optimizer.state(),
            filter: self.filter.clone(),
            fleet: self.fleet.clone(),
            removals: self.removals,
            requested: self.requested,
            stop_seen: self.stop_seen,
            rounds: self.rounds.clone(),
            stale: self.stale.clone(),
            retained_from: self.retained_from,
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
            &worker_role(self.id),
            generation,
            self.next_step,
            spec.checkpoint_every,
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
        let every = self.ctx.spec.checkpoint_every;
        if every == 0 {
            if exchanged && let Some(previous) = step.checked_sub(round) {
                self.exchange(self.fleet.workers(previous))
                    .discard(previous)
                    .await?;
            }
            return Ok(());
        }
        if !last && (step + 1).is_multiple_of(every) {
            self.next_step = step + 1;
            checkpoint::save(
                &self.ctx.run_store,
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

    /// Injects the faults due at the start of `step` (test aid).
    fn inject_faults(&self, step: u64) {
        for fault in &self.faults {
            match *fault {
                Fault::KillWorker { worker, step: at } if worker == self.id && at == step => {
                    tracing::error!(worker, step, "fault injection: killing this worker");
                    std::process::abort();
                }
                Fault::ExceedMemory { worker, step: at } if worker == self.id && at == step => {
                    tracing::error!(worker, step, "fault injection: exceeding the memory cap");
                    let bytes = (self.ctx.spec.limits.memory_mb as usize + 256) << 20;
                    let hog = vec![1u8; bytes];
                    // Touch it, so that it is resident, and keep it while the invoker notices.
                    std::hint::black_box(&hog);
                    std::thread::sleep(Duration::from_secs(30));
                }
                _ => {}
            }
        }
    }

    /// How this worker's own message of `step` is to be published (test aid: dropped or
    /// delayed).
    fn publish_fault(&self, step: u64) -> Option<PublishFault> {
        self.faults.iter().find_map(|fault| match *fault {
            Fault::DropMessage { worker, step: at } if worker == self.id && at == step => {
                Some(PublishFault::Drop)
            }
            Fault::DelayMessage {
                worker,
                step: at,
                ms,
            } if worker == self.id && at == step => {
                Some(PublishFault::Delay(Duration::from_millis(ms)))
            }
            _ => None,
        })
    }

    /// While replaying, gives `message` the flags of the message published for its step
    /// before the failure, so that the replacement decides as its peers did; the replay ends
    /// at the first step it had not published.
    async fn replay_flags(&mut self, message: &mut UpdateMessage, workers: &[u32]) -> Result<()> {
        if !self.replaying {
            return Ok(());
        }
        match self.exchange(workers).published(message.step).await? {
            Some(before) => {
                message.stop = before.stop;
                message.removal = before.removal;
            }
            None => {
                debug!(worker = self.id, step = message.step, "replay done");
                self.replaying = false;
            }
        }
        Ok(())
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
        let started_unix_ms = unix_ms();
        let (pos, next) = match self.rounds {
            // ADMM: each worker passes over its own shard of epoch 0's order again and again.
            RoundState::Admm { .. } => (
                self.reader
                    .shard_position(self.me, self.workers.len(), step),
                Some(
                    self.reader
                        .shard_position(self.me, self.workers.len(), step + 1),
                ),
            ),
            _ => {
                let pos = self.fleet.position(self.id, step).ok_or_else(|| {
                    RuntimeError::FunctionFailed(format!(
                        "worker {} is not active at step {step}",
                        self.id
                    ))
                })?;
                (pos, self.fleet.position(self.id, step + 1))
            }
        };
        let (epoch, batch) = self.reader.next(pos, next).await?;
        let read_ms = ms(started.elapsed());
        let compute_started = Instant::now();
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
            _ => epoch,
        };
        let lr = spec.schedule.rate(spec.lr, epoch);
        let delta = self.optimizer.step(&self.params, &gradient, lr);
        let computed = Computed {
            started,
            loss,
            read_ms,
            compute_ms: ms(compute_started.elapsed()),
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
            if self.ctx.spec.scale_in.is_some()
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

    /// Publishes an update message, counting it.
    async fn publish(&self, message: &UpdateMessage, traffic: &mut Traffic) -> Result<()> {
        let bytes = message.encode();
        traffic.bytes_sent += bytes.len() as u64;
        traffic.messages_sent += 1;
        traffic.entries_sent += message.delta.nnz() as u64;
        traffic.published_unix_ms = unix_ms();
        self.ctx
            .channel
            .publish(UPDATES, message.step, self.id, bytes)
            .await?;
        Ok(())
    }

    /// Decodes a peer's update and checks it against the model.
    fn decode_update(&self, payload: &[u8], from: u32, step: u64) -> Result<UpdateMessage> {
        let message = UpdateMessage::decode(payload, || {
            format!("update of worker {from} for step {step}")
        })?;
        if message.step != step || message.worker != from {
            return Err(RuntimeError::FunctionFailed(format!(
                "the update of worker {from} for step {step} claims to be worker {}'s for step {}",
                message.worker, message.step
            )));
        }
        Ok(message)
    }

    fn peer_delta(&self, delta: WireDelta, from: u32, step: u64) -> Result<SparseVector> {
        delta.into_sparse(self.params.len()).map_err(|e| {
            RuntimeError::FunctionFailed(format!(
                "the update of worker {from} for step {step} does not fit the model: {e}"
            ))
        })
    }

    /// BSP and ISP: every worker applies every step's updates before the next step. Returns the
    /// last step.
    ///
    /// GA-SGD exchanges every step. MA-SGD and ADMM take local steps and exchange every
    /// [`Algorithm::round_steps`] steps and after the last one.
    async fn run_synchronous(&mut self) -> Result<End> {
        let spec = self.ctx.spec.clone();
        let positions = u64::from(spec.stop.max_epochs) * u64::from(spec.train_batches);
        let round = spec.algorithm.round_steps(spec.train_batches, spec.workers);
        let mut step = self.next_step;
        loop {
            self.inject_faults(step);
            let workers = self.fleet.workers(step).to_vec();
            let (computed, own) = self.compute(step).await?;
            let stop = self.poll_stop().await?;
            let exchange_started = Instant::now();
            let mut traffic = Traffic::default();
            let by_epochs = self.fleet.positions_done(step) >= positions;
            let exchanged = match self.rounds {
                RoundState::None => {
                    let (sent, filtered) = self.outgoing(&own, step);
                    traffic.entries_held = filtered.held as u64;
                    let mut message = self.message(step, computed.loss, stop, sent);
                    self.replay_flags(&mut message, &workers).await?;
                    let mut exchange = self.exchange(&workers);
                    exchange.publish_fault = self.publish_fault(step);
                    let own_slot = self.filter.is_some().then_some(&own);
                    let exchanged = exchange.run(message, own_slot, &mut traffic).await?;
                    exchanged.mean.scaled_add_to(&mut self.params, 1.0);
                    Some(exchanged)
                }
                _ => {
                    self.local_step(&own, computed.lr);
                    if (step + 1).is_multiple_of(round) || by_epochs {
                        Some(
                            self.average_models(step, computed.loss, stop, &workers, &mut traffic)
                                .await?,
                        )
                    } else {
                        None
                    }
                }
            };
            let (any_stop, removal) = match &exchanged {
                Some(e) => (e.stop, e.removal),
                None => (false, None),
            };
            let last = any_stop || by_epochs;
            let did_exchange = exchanged.is_some();
            // A removal every worker saw in this step's updates takes effect after it.
            let mut removed = false;
            if let Some(r) = removal.filter(|_| !last) {
                self.removals = r.seq;
                self.requested = None;
                if self.fleet.remove_after(r.worker, step) {
                    removed = r.worker == self.id;
                    if !removed && let Some(filter) = &mut self.filter {
                        let survivors = self.fleet.workers(step + 1).len();
                        filter.rescale(survivors as f32 / workers.len() as f32);
                    }
                    self.merge_removed(r.worker, step, workers.len(), &mut traffic)
                        .await?;
                    debug!(worker = self.id, step, removed = r.worker, "scale-in");
                }
            }
            if last {
                self.flush(step, &mut traffic).await?;
            }
            let exchange_ms = ms(exchange_started.elapsed());
            traffic.snapshot = self.publish_snapshot(step, last || removed).await?;
            self.send_stats(
                step,
                computed,
                exchange_ms,
                traffic,
                last || removed,
                removed,
            )
            .await?;
            self.after_step(step, round, did_exchange, last || removed)
                .await?;
            if last || removed {
                debug!(worker = self.id, step, removed, "last step");
                return Ok(End::Last(step));
            }
            if self.time_to_hand_off(step, computed.started) {
                return Ok(End::HandOff);
            }
            step += 1;
        }
    }

    /// This worker's side of an exchange among `workers` of vectors over the parameters.
    fn exchange<'a>(&'a self, workers: &'a [u32]) -> Exchange<'a> {
        self.exchange_of(workers, self.params.len())
    }

    /// This worker's side of an exchange among `workers` of vectors of dimension `dim`.
    fn exchange_of<'a>(&'a self, workers: &'a [u32], dim: usize) -> Exchange<'a> {
        Exchange {
            channel: &*self.ctx.channel,
            job_workers: self.ctx.spec.workers,
            timeout: self.ctx.spec.collect_timeout(),
            pattern: self.ctx.spec.pattern,
            worker: self.id,
            workers,
            dim,
            expected_removal: self.removals + 1,
            publish_fault: None,
        }
    }

    /// k-means by distributed Lloyd steps: each step, every worker assigns the points of its
    /// shard to the nearest centroid and sums them per cluster; the sums, counts and inertia
    /// are averaged through the channel (with any pattern); every worker then computes the same
    /// new centroids. Stops once the inertia changes by less than `--tolerance` (relative), or
    /// after `--max-epochs` iterations (each reads the whole data set once).
    async fn run_kmeans(&mut self, k: u32, features: u32) -> Result<End> {
        let spec = self.ctx.spec.clone();
        let tolerance = spec.stop.tolerance.unwrap_or(0.0);
        if self.next_step == 0 {
            self.params = self.seed_kmeans(k, features).await?;
        }
        let sums_len = k as usize * (features as usize + 1);
        let dim = sums_len + 2;
        let (p, shard) = (
            self.workers.len(),
            self.reader.shard_len(self.me, self.workers.len()),
        );
        let mut step = self.next_step;
        loop {
            self.inject_faults(step);
            let workers = self.fleet.workers(step).to_vec();
            let started = Instant::now();
            let started_unix_ms = unix_ms();
            let (mut read, mut compute) = (Duration::ZERO, Duration::ZERO);
            let mut sums = LloydSums::new(k, features);
            for s in 0..shard {
                let read_started = Instant::now();
                let pos = self.reader.shard_position(self.me, p, s);
                let next = (s + 1 < shard).then(|| self.reader.shard_position(self.me, p, s + 1));
                let (_, batch) = self.reader.next(pos, next).await?;
                let compute_started = Instant::now();
                read += compute_started - read_started;
                sums.add_batch(&self.params, &batch)
                    .map_err(|source| RuntimeError::Model {
                        location: format!("worker {}, Lloyd iteration {step}", self.id),
                        source,
                    })?;
                compute += compute_started.elapsed();
            }
            let loss = BatchLoss::new(sums.inertia(), sums.points());
            let stop = self.poll_stop().await?;
            let exchange_started = Instant::now();
            let mut traffic = Traffic::default();
            let mut vector = sums.to_vector();
            vector.extend([sums.inertia() as f32, sums.points() as f32]);
            let sent = SparseVector::from_parts((0..dim as u32).collect(), vector)
                .map_err(|e| RuntimeError::FunctionFailed(format!("Lloyd sums: {e}")))?;
            let mut message = self.message(step, loss, stop, WireDelta::Sparse(sent));
            self.replay_flags(&mut message, &workers).await?;
            let mut exchange = self.exchange_of(&workers, dim);
            exchange.publish_fault = self.publish_fault(step);
            let exchanged = exchange.run(message, None, &mut traffic).await?;
            let mut mean = vec![0.0f32; dim];
            exchanged.mean.scaled_add_to(&mut mean, 1.0);
            let global =
                LloydSums::from_mean_vector(k, features, &mean[..sums_len]).map_err(|source| {
                    RuntimeError::Model {
                        location: format!("the averaged Lloyd sums of iteration {step}"),
                        source,
                    }
                })?;
            self.params = global.centroids(&self.params);
            let inertia = mean[sums_len];
            let converged = match &mut self.rounds {
                RoundState::Lloyd { inertia: previous } => {
                    let converged = previous.is_some_and(|p| {
                        f64::from((p - inertia).abs()) <= tolerance * f64::from(p)
                    });
                    *previous = Some(inertia);
                    converged
                }
                _ => false,
            };
            let last = exchanged.stop || converged || step + 1 >= u64::from(spec.stop.max_epochs);
            let computed = Computed {
                started,
                loss,
                read_ms: ms(read),
                compute_ms: ms(compute),
                started_unix_ms,
                lr: 0.0,
            };
            let exchange_ms = ms(exchange_started.elapsed());
            traffic.snapshot = self.publish_snapshot(step, last).await?;
            self.send_stats(step, computed, exchange_ms, traffic, last, false)
                .await?;
            self.after_step(step, 1, true, last).await?;
            if last {
                return Ok(End::Last(step));
            }
            if self.time_to_hand_off(step, started) {
                return Ok(End::HandOff);
            }
            step += 1;
        }
    }

    /// The k-means++ centroids of the first minibatches (the same on every worker).
    async fn seed_kmeans(&self, k: u32, features: u32) -> Result<Vec<f32>> {
        let batches = self.ctx.spec.train_batches.min(KMEANS_SEED_BATCHES);
        let mut sample = Vec::with_capacity(batches as usize);
        for index in 0..batches {
            sample.push(
                self.ctx
                    .dataset
                    .read_batch(Split::Train, index as usize)
                    .await?,
            );
        }
        kmeans_plus_plus(&sample, k, features, self.ctx.spec.seed).map_err(|source| {
            RuntimeError::Model {
                location: format!("k-means++ seeding on the first {batches} minibatches"),
                source,
            }
        })
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

    /// MA-SGD and ADMM: applies the worker's own delta to its replica in full; ADMM also takes
    /// the proximal step towards `z − u` (in closed form, stable for any `lr · ρ`).
    fn local_step(&mut self, own: &SparseVector, lr: f32) {
        own.scaled_add_to(&mut self.params, 1.0);
        if let (RoundState::Admm { z, u }, Algorithm::Admm { rho, .. }) =
            (&self.rounds, self.ctx.spec.algorithm)
        {
            let c = lr * rho;
            for ((w, &z), &u) in self.params.iter_mut().zip(z).zip(u) {
                *w = (*w + c * (z - u)) / (1.0 + c);
            }
        }
    }

    /// MA-SGD: the replicas' average becomes everyone's replica. ADMM: `z` becomes the mean of
    /// `w_i + u_i`, and `u_i += w_i − z`.
    async fn average_models(
        &mut self,
        step: u64,
        loss: BatchLoss,
        stop: bool,
        workers: &[u32],
        traffic: &mut Traffic,
    ) -> Result<crate::exchange::Exchanged> {
        // What is sent is the difference to the last consensus, so that only what moved travels.
        let mut sent = SparseVector::new();
        match &self.rounds {
            RoundState::Anchor(anchor) => {
                for (j, (&w, &a)) in self.params.iter().zip(anchor).enumerate() {
                    if w != a {
                        sent.push(j as u32, w - a);
                    }
                }
            }
            RoundState::Admm { z, u } => {
                for (j, ((&w, &z), &u)) in self.params.iter().zip(z).zip(u).enumerate() {
                    let v = w + u - z;
                    if v != 0.0 {
                        sent.push(j as u32, v);
                    }
                }
            }
            RoundState::None | RoundState::Lloyd { .. } => {}
        }
        traffic.entries_held = 0;
        let mut message = self.message(step, loss, stop, WireDelta::Sparse(sent));
        self.replay_flags(&mut message, workers).await?;
        let mut exchange = self.exchange(workers);
        exchange.publish_fault = self.publish_fault(step);
        let exchanged = exchange.run(message, None, traffic).await?;
        match &mut self.rounds {
            RoundState::Anchor(anchor) => {
                exchanged.mean.scaled_add_to(anchor, 1.0);
                self.params.copy_from_slice(anchor);
            }
            RoundState::Admm { z, u } => {
                exchanged.mean.scaled_add_to(z, 1.0);
                for ((u, &w), &z) in u.iter_mut().zip(&self.params).zip(z.iter()) {
                    *u += w - z;
                }
            }
            RoundState::None | RoundState::Lloyd { .. } => {}
        }
        Ok(exchanged)
    }

    /// Merges the replica of `worker`, removed after `step`, into the survivors: replicas are
    /// equal under BSP and ISP, but the removed worker's filter still holds updates, which it
    /// publishes on [`FLUSH`] (at step `step + 1`) and the survivors apply with the weight of
    /// the fleet of `workers` workers that made them.
    async fn merge_removed(
        &mut self,
        worker: u32,
        step: u64,
        workers: usize,
        traffic: &mut Traffic,
    ) -> Result<()> {
        if self.filter.is_none() {
            return Ok(());
        }
        let flush_step = step + 1;
        if worker == self.id {
            self.publish_flush(flush_step, traffic).await
        } else {
            self.apply_flushes(flush_step, &[worker], 1.0 / workers as f32, traffic)
                .await
        }
    }

    /// SSP and ASP: each worker applies its peers' updates as they arrive, waiting (SSP) only
    /// for those more than the slack behind. Returns the last step.
    async fn run_stale(&mut self) -> Result<End> {
        let spec = self.ctx.spec.clone();
        let positions = u64::from(spec.stop.max_epochs) * u64::from(spec.train_batches);
        let slack = spec.sync.slack();
        let peers = self.workers.len();
        let StaleState {
            mut cursor,
            mut ended,
            mut reported,
            mut discarded_through,
        } = self.stale.take().unwrap_or(StaleState {
            cursor: vec![0; peers],
            ended: vec![None; peers],
            reported: vec![0; peers],
            discarded_through: 0,
        });
        let weight = 1.0 / peers as f32;
        let mut step = self.next_step;
        loop {
            self.inject_faults(step);
            let (computed, own) = self.compute(step).await?;
            let last = self.poll_stop().await? || self.fleet.positions_done(step) >= positions;

            let exchange_started = Instant::now();
            let mut traffic = Traffic::default();
            let (sent, filtered) = self.outgoing(&own, step);
            traffic.entries_held = filtered.held as u64;
            let applied_through = (0..peers)
                .filter(|&k| k != self.me)
                .map(|k| cursor[k])
                .min()
                .unwrap_or(step);
            let message = UpdateMessage {
                step,
                worker: self.id,
                loss: computed.loss,
                stop: false,
                last,
                applied_through,
                removal: None,
                delta: sent,
            };
            self.publish(&message, &mut traffic).await?;
            own.scaled_add_to(&mut self.params, weight);
            traffic.updates_applied += 1;
            cursor[self.me] = step + 1;
            ended[self.me] = last.then_some(step);

            // Wait for what the slack requires (everything, at the last step), then take
            // whatever else has arrived.
            let required = if last {
                Some(u64::MAX)
            } else {
                slack.and_then(|s| step.checked_sub(s))
            };
            loop {
                let mut groups: std::collections::BTreeMap<u64, Vec<usize>> = Default::default();
                for k in 0..peers {
                    if k != self.me && ended[k].is_none() {
                        groups.entry(cursor[k]).or_default().push(k);
                    }
                }
                if groups.is_empty() {
                    break;
                }
                // The earliest step is waited for if the slack requires it; otherwise every
                // group is polled once, and the loop ends when a poll finds nothing new.
                let mut fetched = Vec::new();
                for (&s, group) in &groups {
                    let from: Vec<u32> = group.iter().map(|&k| self.workers[k]).collect();
                    if required.is_some_and(|r| s <= r) {
                        let payloads = self
                            .ctx
                            .channel
                            .collect(UPDATES, s, &from, spec.collect_timeout())
                            .await?;
                        fetched.push((s, group, payloads.into_iter().map(Some).collect()));
                        break;
                    }
                    fetched.push((s, group, self.ctx.channel.poll(UPDATES, s, &from).await?));
                }
                let mut any = false;
                for (s, group, payloads) in fetched {
                    for (&k, payload) in group.iter().zip(payloads) {
                        let Some(payload) = payload else { continue };
                        any = true;
                        self.apply_peer(
                            &payload,
                            k,
                            s,
                            weight,
                            &mut traffic,
                            (&mut cursor, &mut ended, &mut reported),
                        )?;
                    }
                }
                if !any {
                    break;
                }
            }

            // Discard our own messages that every peer has applied.
            let safe = (0..peers)
                .filter(|&k| k != self.me)
                .map(|k| reported[k])
                .min()
                .unwrap_or(step + 1)
                .min(step);
            while discarded_through < safe {
                self.ctx
                    .channel
                    .discard(UPDATES, discarded_through, &[self.id])
                    .await?;
                discarded_through += 1;
            }
            if last {
                self.flush(step, &mut traffic).await?;
            }
            let exchange_ms = ms(exchange_started.elapsed());
            traffic.snapshot = self.publish_snapshot(step, last).await?;
            self.send_stats(step, computed, exchange_ms, traffic, last, false)
                .await?;
            if last {
                debug!(worker = self.id, step, "last step");
                return Ok(End::Last(step));
            }
            if self.time_to_hand_off(step, computed.started) {
                self.stale = Some(StaleState {
                    cursor,
                    ended,
                    reported,
                    discarded_through,
                });
                return Ok(End::HandOff);
            }
            step += 1;
        }
    }

    /// Applies peer `k`'s update of step `s` and moves its cursor on.
    fn apply_peer(
        &mut self,
        payload: &[u8],
        k: usize,
        s: u64,
        weight: f32,
        traffic: &mut Traffic,
        (cursor, ended, reported): (&mut [u64], &mut [Option<u64>], &mut [u64]),
    ) -> Result<()> {
        let from = self.workers[k];
        traffic.bytes_received += payload.len() as u64;
        traffic.messages_received += 1;
        let update = self.decode_update(payload, from, s)?;
        reported[k] = reported[k].max(update.applied_through);
        if update.last {
            ended[k] = Some(s);
        }
        let delta = self.peer_delta(update.delta, from, s)?;
        delta.scaled_add_to(&mut self.params, weight);
        traffic.updates_applied += 1;
        cursor[k] = s + 1;
        Ok(())
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
            .publish(FLUSH, flush_step, self.id, bytes)
            .await?;
        Ok(())
    }

    /// Collects the flushes of `from` at `flush_step` and applies them with `weight`.
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
            .collect(FLUSH, flush_step, from, self.ctx.spec.collect_timeout())
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
    /// ([`EvalEvery::is_due`](crate::spec::EvalEvery::is_due)), and this worker leads the
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
        let batches = self.ctx.spec.train_batches;
        // A Lloyd iteration of k-means reads the whole data set.
        let positions = if matches!(self.ctx.spec.model, ModelSpec::KMeans { .. }) {
            (step * u64::from(batches), (step + 1) * u64::from(batches))
        } else {
            let before = step
                .checked_sub(1)
                .map_or(0, |s| self.fleet.positions_done(s));
            (before, self.fleet.positions_done(step))
        };
        if !validation
            .every
            .is_due(step, positions, batches, self.last_snapshot.elapsed())
        {
            return Ok(false);
        }
        let params = match &self.rounds {
            // ADMM's model is the consensus.
            RoundState::Admm { z, .. } => z.clone(),
            _ => self.params.clone(),
        };
        let replica = ReplicaMessage {
            worker: self.id,
            step,
            params,
        };
        self.ctx
            .channel
            .publish(EVAL, step, self.id, replica.encode())
            .await?;
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
            exchange_ms,
            step_ms: ms(computed.started.elapsed()),
            bytes_sent: traffic.bytes_sent,
            bytes_received: traffic.bytes_received,
            messages_sent: traffic.messages_sent,
            messages_received: traffic.messages_received,
            entries_sent: traffic.entries_sent,
            entries_held: traffic.entries_held,
            updates_applied: traffic.updates_applied,
            started_unix_ms: computed.started_unix_ms,
            published_unix_ms: traffic.published_unix_ms,
            last,
            removed,
            snapshot: traffic.snapshot,
        };
        if let Some(previous) = self.pending_stats.take() {
            join(previous).await?;
        }
        let channel = self.ctx.channel.clone();
        let id = self.id;
        self.pending_stats = Some(tokio::spawn(async move {
            channel
                .publish(STATS, step, id, stats.encode())
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
        if self.fleet.position(self.id, step + 1).is_none() {
            return Ok(());
        }
        // The last step's updates stay: a slower peer may still be collecting them. The driver
        // cleans the channel up when the job ends.
        let params = match self.rounds {
            // ADMM's model is the consensus.
            RoundState::Admm { z, .. } => z,
            _ => self.params,
        };
        let replica = ReplicaMessage {
            worker: self.id,
            step,
            params,
        };
        self.ctx
            .channel
            .publish(FINAL, 0, self.id, replica.encode())
            .await?;
        Ok(())
    }
}

/// Milliseconds since the Unix epoch, for the timestamps of the run record.
pub(crate) fn unix_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

async fn join(handle: JoinHandle<Result<()>>) -> Result<()> {
    handle
        .await
        .map_err(|e| RuntimeError::FunctionFailed(format!("background task failed: {e}")))?
}

/// Reads a worker's minibatches in the shared order, prefetching the next one.
struct BatchReader {
    dataset: crate::dataset::Dataset,
    batches: u32,
    seed: u64,
    order: (u64, Vec<u32>),
    prefetched: Option<(u64, JoinHandle<Result<Batch>>)>,
}

impl BatchReader {
    fn new(ctx: &JobContext) -> Self {
        let spec = &ctx.spec;
        Self {
            dataset: ctx.dataset.clone(),
            batches: spec.train_batches,
            seed: spec.seed,
            order: (0, batch_order(spec.seed, 0, spec.train_batches)),
            prefetched: None,
        }
    }

    /// The epoch and minibatch index of stream position `pos`.
    fn locate(&mut self, pos: u64) -> (u64, usize) {
        let m = u64::from(self.batches);
        let epoch = pos / m;
        if self.order.0 != epoch {
            self.order = (epoch, batch_order(self.seed, epoch, self.batches));
        }
        (epoch, self.order.1[(pos % m) as usize] as usize)
    }

    /// ADMM's fixed shards: the position in epoch 0's order of the `step`-th minibatch of the
    /// worker in position `rank` of `workers`, which passes over positions `rank`,
    /// `rank + workers`, … below the number of minibatches, again and again.
    fn shard_position(&self, rank: usize, workers: usize, step: u64) -> u64 {
        let m = u64::from(self.batches.max(1));
        let (rank, p) = (rank as u64 % m, workers.max(1) as u64);
        rank + (step % self.shard_len(rank as usize, workers)) * p
    }

    /// The number of minibatches in the shard of the worker in position `rank` of `workers`.
    fn shard_len(&self, rank: usize, workers: usize) -> u64 {
        let m = u64::from(self.batches.max(1));
        let (rank, p) = (rank as u64 % m, workers.max(1) as u64);
        (m - rank).div_ceil(p)
    }

    fn fetch(&mut self, pos: u64) -> JoinHandle<Result<Batch>> {
        let (_, index) = self.locate(pos);
        let dataset = self.dataset.clone();
        tokio::spawn(async move { dataset.read_batch(Split::Train, index).await })
    }

    /// The minibatch at position `pos` with its epoch; starts fetching the one at `next` (the
    /// worker's position at the next step, as far as it knows; a wrong guess is refetched).
    async fn next(&mut self, pos: u64, next: Option<u64>) -> Result<(u64, Batch)> {
        let handle = match self.prefetched.take() {
            Some((p, handle)) if p == pos => handle,
            Some((_, stale)) => {
                stale.abort();
                self.fetch(pos)
            }
            None => self.fetch(pos),
        };
        let batch = handle
            .await
            .map_err(|e| RuntimeError::FunctionFailed(format!("minibatch reader failed: {e}")))??;
        if let Some(next) = next {
            let handle = self.fetch(next);
            self.prefetched = Some((next, handle));
        }
        let (epoch, _) = self.locate(pos);
        Ok((epoch, batch))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod checkpoint_tests {
    use super::*;

    fn sample() -> WorkerCheckpoint {
        let bytes = fuzzing::sample_worker_checkpoint(4);
        WorkerCheckpoint::decode(&bytes, String::new).unwrap()
    }

    #[test]
    fn checkpoints_whose_parts_disagree_are_refused() {
        assert_eq!(sample().check(3), Ok(()));
        let err = sample().check(2).unwrap_err();
        assert!(err.contains("2 workers"), "{err}");
        let mut saved = sample();
        saved.rounds = RoundState::Admm {
            z: vec![0.0; 4],
            u: vec![0.0; 3],
        };
        assert!(saved.check(3).unwrap_err().contains("4 parameters"));
        let mut saved = sample();
        saved.rounds = RoundState::Anchor(vec![0.0; 5]);
        assert!(saved.check(3).is_err());
        let mut saved = sample();
        saved.filter = Some(UpdateFilter::new(5, mlless_core::FilterConfig::default()));
        let err = saved.check(3).unwrap_err();
        assert!(err.contains("5 parameters, not 4"), "{err}");
        // Through the decoder: a hostile but checksummed checkpoint is an error.
        let mut saved = sample();
        saved.stale.as_mut().unwrap().cursor.pop();
        assert!(fuzzing::decode_worker_checkpoint(&saved.encode()).is_err());
    }
}
