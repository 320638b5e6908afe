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
    Batch, BatchLoss, FilterStats, GradientAccumulator, Model, Optimizer, SparseVector,
    UpdateFilter, WireDelta,
};
use tokio::task::JoinHandle;
use tracing::debug;

use crate::context::JobContext;
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::messages::{
    FINAL, FLUSH, Message, Removal, ReplicaMessage, SCALE_IN_KEY, STATS, STOP_KEY, StatsMessage,
    UPDATES, UpdateMessage,
};
use crate::spec::{Fleet, batch_order};

/// How often a worker looks for the supervisor's stop request.
const STOP_POLL: Duration = Duration::from_millis(200);

/// Runs worker `id` of the job until training stops.
pub async fn run_worker(ctx: JobContext, id: u32) -> Result<()> {
    let mut worker = Worker::new(ctx, id);
    let last_step = if worker.ctx.spec.sync.is_synchronous() {
        worker.run_synchronous().await?
    } else {
        worker.run_stale().await?
    };
    worker.finish(last_step).await
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
}

/// The traffic of one step, for the supervisor.
#[derive(Default)]
struct Traffic {
    bytes_sent: u64,
    bytes_received: u64,
    messages_sent: u32,
    messages_received: u32,
    entries_sent: u64,
    entries_held: u64,
    updates_applied: u32,
    published_unix_ms: f64,
}

impl Worker {
    fn new(ctx: JobContext, id: u32) -> Self {
        let spec = &ctx.spec;
        let params = spec.model.init_params(spec.seed);
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
        }
    }

    /// Reads the step's minibatch and computes the optimiser's delta on it.
    async fn compute(&mut self, step: u64) -> Result<(Computed, SparseVector)> {
        let started = Instant::now();
        let started_unix_ms = unix_ms();
        let pos = self.fleet.position(self.id, step).ok_or_else(|| {
            RuntimeError::FunctionFailed(format!("worker {} is not active at step {step}", self.id))
        })?;
        let next = self.fleet.position(self.id, step + 1);
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
        let lr = spec.schedule.rate(spec.lr, epoch);
        let delta = self.optimizer.step(&self.params, &gradient, lr);
        let computed = Computed {
            started,
            loss,
            read_ms,
            compute_ms: ms(compute_started.elapsed()),
            started_unix_ms,
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
    async fn run_synchronous(&mut self) -> Result<u64> {
        let spec = self.ctx.spec.clone();
        let positions = u64::from(spec.stop.max_epochs) * u64::from(spec.train_batches);
        let mut step = 0u64;
        loop {
            let workers = self.fleet.workers(step).to_vec();
            let me = workers.iter().position(|&w| w == self.id).unwrap_or(0);
            let (computed, own) = self.compute(step).await?;
            let stop = self.poll_stop().await?;

            let exchange_started = Instant::now();
            let mut traffic = Traffic::default();
            let (sent, filtered) = self.outgoing(&own, step);
            traffic.entries_held = filtered.held as u64;
            let message = UpdateMessage {
                step,
                worker: self.id,
                loss: computed.loss,
                stop,
                last: false,
                applied_through: step,
                removal: self.requested,
                delta: sent,
            };
            self.publish(&message, &mut traffic).await?;
            let payloads = self
                .ctx
                .channel
                .collect(UPDATES, step, &workers, spec.collect_timeout())
                .await?;
            let mut deltas = Vec::with_capacity(payloads.len());
            let mut any_stop = stop;
            let mut removal = self.requested;
            for (k, (payload, &from)) in payloads.iter().zip(&workers).enumerate() {
                if k == me {
                    continue;
                }
                traffic.bytes_received += payload.len() as u64;
                traffic.messages_received += 1;
                let update = self.decode_update(payload, from, step)?;
                any_stop |= update.stop;
                if removal.is_none() {
                    removal = update.removal.filter(|r| r.seq == self.removals + 1);
                }
                deltas.push(self.peer_delta(update.delta, from, step)?);
            }
            let mut ordered: Vec<&SparseVector> = deltas.iter().collect();
            ordered.insert(me.min(ordered.len()), &own);
            mlless_core::apply_mean(&mut self.params, &ordered);
            traffic.updates_applied = ordered.len() as u32;
            if step > 0 {
                self.ctx
                    .channel
                    .discard(UPDATES, step - 1, &[self.id])
                    .await?;
            }
            let last = any_stop || self.fleet.positions_done(step) >= positions;
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
            self.send_stats(
                step,
                computed,
                exchange_ms,
                traffic,
                last || removed,
                removed,
            )
            .await?;
            if last || removed {
                debug!(worker = self.id, step, removed, "last step");
                return Ok(step);
            }
            step += 1;
        }
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
    async fn run_stale(&mut self) -> Result<u64> {
        let spec = self.ctx.spec.clone();
        let positions = u64::from(spec.stop.max_epochs) * u64::from(spec.train_batches);
        let slack = spec.sync.slack();
        let peers = self.workers.len();
        // Per peer: the next step of theirs to apply, the step they ended at (once seen), and
        // the `applied_through` they last reported.
        let mut cursor = vec![0u64; peers];
        let mut ended: Vec<Option<u64>> = vec![None; peers];
        let mut reported = vec![0u64; peers];
        let mut discarded_through = 0u64;
        let weight = 1.0 / peers as f32;
        let mut step = 0u64;
        loop {
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
            self.send_stats(step, computed, exchange_ms, traffic, last, false)
                .await?;
            if last {
                debug!(worker = self.id, step, "last step");
                return Ok(step);
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
        let replica = ReplicaMessage {
            worker: self.id,
            step,
            params: self.params,
        };
        self.ctx
            .channel
            .publish(FINAL, 0, self.id, replica.encode())
            .await?;
        Ok(())
    }
}

fn unix_ms() -> f64 {
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
