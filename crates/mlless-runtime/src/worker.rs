//! The worker function: one local replica of the model, trained on its share of the minibatches,
//! kept in step with the other replicas through the channel (DESIGN §3, BSP, broadcast).
//!
//! At step `t`, worker `i` of `P`:
//! 1. reads minibatch position `i + t·P` of the shared shuffled order (the next one is
//!    prefetched while it computes);
//! 2. computes the gradient of its minibatch and its optimiser's delta;
//! 3. publishes the delta with its loss on [`UPDATES`];
//! 4. collects the step's deltas of all `P` workers and adds their mean to its replica, in worker
//!    order, so that all replicas stay bit-for-bit equal;
//! 5. sends its timings and loss to the supervisor on [`STATS`].
//!
//! Every worker stops after the same step: the one that ends the last epoch, or the one in which
//! some worker's update carries the stop flag (set once it has seen the supervisor's stop
//! request). At the end it publishes its replica on [`FINAL`].

use std::time::{Duration, Instant};

use mlless_core::{Batch, GradientAccumulator, SparseVector};
use tokio::task::JoinHandle;
use tracing::debug;

use crate::context::JobContext;
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::messages::{
    FINAL, Message, ReplicaMessage, STATS, STOP_KEY, StatsMessage, UPDATES, UpdateMessage,
};
use crate::spec::{batch_order, epochs_done, position};

/// How often a worker looks for the supervisor's stop request.
const STOP_POLL: Duration = Duration::from_millis(200);

/// Runs worker `id` of the job until training stops.
pub async fn run_worker(ctx: JobContext, id: u32) -> Result<()> {
    let spec = &ctx.spec;
    let workers = ctx.workers();
    let model = spec.model.model();
    let mut params = spec.model.init_params(spec.seed);
    let mut optimizer = mlless_core::build_optimizer(&spec.optimizer, params.len());
    let mut accumulator = GradientAccumulator::new(params.len());
    let mut reader = BatchReader::new(&ctx, id);
    let mut last_stop_poll: Option<Instant> = None;
    let mut stop_seen = false;
    let mut pending_stats: Option<JoinHandle<Result<()>>> = None;

    let mut step = 0u64;
    loop {
        let started = Instant::now();
        let (epoch, batch) = reader.next(step).await?;
        let read_ms = ms(started.elapsed());

        let compute_started = Instant::now();
        let loss = model
            .gradient(&params, &batch, &mut accumulator)
            .map_err(|source| RuntimeError::Model {
                location: format!("worker {id}, step {step}"),
                source,
            })?;
        let gradient = accumulator.take();
        let lr = spec.schedule.rate(spec.lr, epoch);
        let delta = optimizer.step(&params, &gradient, lr);
        let compute_ms = ms(compute_started.elapsed());

        if !stop_seen && last_stop_poll.is_none_or(|t| t.elapsed() >= STOP_POLL) {
            stop_seen = ctx.channel.get_key(STOP_KEY).await?.is_some();
            last_stop_poll = Some(Instant::now());
        }

        let exchange_started = Instant::now();
        let update = UpdateMessage {
            step,
            worker: id,
            loss,
            stop: stop_seen,
            delta,
        }
        .encode();
        let bytes_sent = update.len() as u64;
        ctx.channel.publish(UPDATES, step, id, update).await?;
        let payloads = ctx
            .channel
            .collect(UPDATES, step, &workers, spec.collect_timeout())
            .await?;
        let bytes_received = payloads.iter().map(|p| p.len() as u64).sum();
        let mut updates = Vec::with_capacity(payloads.len());
        for (payload, &from) in payloads.iter().zip(&workers) {
            let update = UpdateMessage::decode(payload, || {
                format!("update of worker {from} for step {step}")
            })?;
            updates.push(update);
        }
        let deltas: Vec<&SparseVector> = updates.iter().map(|u| &u.delta).collect();
        mlless_core::try_apply_mean(&mut params, &deltas).map_err(|e| {
            RuntimeError::FunctionFailed(format!(
                "updates of step {step} do not fit the model: {e}"
            ))
        })?;
        if step > 0 {
            ctx.channel.discard(UPDATES, step - 1, &[id]).await?;
        }
        let exchange_ms = ms(exchange_started.elapsed());

        let last = updates.iter().any(|u| u.stop)
            || epochs_done(step, spec.workers, spec.train_batches, spec.stop.max_epochs);
        let stats = StatsMessage {
            step,
            worker: id,
            loss,
            read_ms,
            compute_ms,
            exchange_ms,
            step_ms: ms(started.elapsed()),
            bytes_sent,
            bytes_received,
            last,
        };
        // The supervisor is not on the critical path: send the statistics while the next step
        // computes, one at a time so that they arrive in order.
        if let Some(previous) = pending_stats.take() {
            join(previous).await?;
        }
        let channel = ctx.channel.clone();
        pending_stats = Some(tokio::spawn(async move {
            channel
                .publish(STATS, step, id, stats.encode())
                .await
                .map_err(RuntimeError::from)
        }));
        if last {
            debug!(worker = id, step, "last step");
            break;
        }
        step += 1;
    }
    if let Some(previous) = pending_stats.take() {
        join(previous).await?;
    }
    // The last step's update stays: a slower peer may still be collecting it. The driver
    // cleans the channel up when the job ends.
    let replica = ReplicaMessage {
        worker: id,
        step,
        params,
    };
    ctx.channel.publish(FINAL, 0, id, replica.encode()).await?;
    Ok(())
}

async fn join(handle: JoinHandle<Result<()>>) -> Result<()> {
    handle
        .await
        .map_err(|e| RuntimeError::FunctionFailed(format!("background task failed: {e}")))?
}

/// Reads a worker's minibatches in the shared order, prefetching the next one.
struct BatchReader {
    dataset: crate::dataset::Dataset,
    worker: u32,
    workers: u32,
    batches: u32,
    seed: u64,
    order: (u64, Vec<u32>),
    prefetched: Option<(u64, JoinHandle<Result<Batch>>)>,
}

impl BatchReader {
    fn new(ctx: &JobContext, worker: u32) -> Self {
        let spec = &ctx.spec;
        Self {
            dataset: ctx.dataset.clone(),
            worker,
            workers: spec.workers,
            batches: spec.train_batches,
            seed: spec.seed,
            order: (0, batch_order(spec.seed, 0, spec.train_batches)),
            prefetched: None,
        }
    }

    /// The epoch and minibatch index of the worker's batch at `step`.
    fn locate(&mut self, step: u64) -> (u64, usize) {
        let pos = position(self.worker, step, self.workers);
        let m = u64::from(self.batches);
        let epoch = pos / m;
        if self.order.0 != epoch {
            self.order = (epoch, batch_order(self.seed, epoch, self.batches));
        }
        (epoch, self.order.1[(pos % m) as usize] as usize)
    }

    fn fetch(&mut self, step: u64) -> JoinHandle<Result<Batch>> {
        let (_, index) = self.locate(step);
        let dataset = self.dataset.clone();
        tokio::spawn(async move { dataset.read_batch(Split::Train, index).await })
    }

    /// The minibatch of `step` with its epoch; starts fetching the one of `step + 1`.
    async fn next(&mut self, step: u64) -> Result<(u64, Batch)> {
        let handle = match self.prefetched.take() {
            Some((s, handle)) if s == step => handle,
            _ => self.fetch(step),
        };
        let batch = handle
            .await
            .map_err(|e| RuntimeError::FunctionFailed(format!("minibatch reader failed: {e}")))??;
        let next = self.fetch(step + 1);
        self.prefetched = Some((step + 1, next));
        let (epoch, _) = self.locate(step);
        Ok((epoch, batch))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
