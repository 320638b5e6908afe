//! The communication patterns of one exchange (DESIGN §5): how the workers of a step turn the
//! vectors they send into the mean that every one of them applies.
//!
//! - broadcast: every worker publishes on [`UPDATES`] and reads every other worker's message;
//! - all-reduce: every worker publishes on [`UPDATES`]; the leader (the first active worker)
//!   reads them all and publishes the mean on [`REDUCED`]; the others read that one message;
//! - scatter-reduce: the vector is cut into one chunk per worker (index ranges of equal width);
//!   every worker publishes chunk `c` for the worker in position `c` on [`SCATTER`], that worker
//!   averages its chunk and publishes it on [`REDUCED`], and everyone reads the averaged chunks;
//! - server: every worker hands its vector to the channel on [`MEANS`] and gets the mean back
//!   ([`Channel::publish_and_average`]): the parameter servers average it.
//!
//! Every pattern averages with [`mean_of`] in worker order, so without a filter all four give
//! the same bits. A worker whose filter holds part of its update back applies its own update in
//! full (DESIGN §4): under broadcast its full update takes its place in the mean; under the
//! other patterns the part it held back is added at the same weight after the mean.

use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use mlless_core::{SparseVector, WireDelta, mean_of};
use mlless_store::{Channel, MessageId, Share, StepExchange, StepMessages};

use mlless_faas::clock::now_unix_ms_f64;

use crate::error::{Result, RuntimeError};
use crate::messages::{Message, Removal, Traffic, UPDATES, UpdateMessage};
use mlless_job::Pattern;

/// Topic of the chunks a scatter-reduce sends to their owners; the message of worker `w` for
/// the owner in position `c` has the id `w · N + c`, `N` being the job's worker count.
pub const SCATTER: &str = "scatter";
/// How many messages a worker publishes at once (a scatter-reduce's chunks): as many as the
/// object-store channel reads at once.
const PUBLISH_CONCURRENCY: usize = 32;
/// Topic of the means an all-reduce leader or a scatter-reduce chunk owner publishes.
pub const REDUCED: &str = "reduced";
/// Topic of the shares the parameter servers average (the server pattern).
pub const MEANS: &str = "means";

/// What every worker of a step learns from an exchange.
#[derive(Debug)]
pub(crate) struct Exchanged {
    /// The mean to add to the replica.
    pub mean: SparseVector,
    /// Some worker has seen the supervisor's stop request.
    pub stop: bool,
    /// The first removal request with the sequence number `expected_removal` that some worker
    /// carried.
    pub removal: Option<Removal>,
}

/// One worker's side of one exchange.
pub(crate) struct Exchange<'a> {
    pub channel: &'a dyn Channel,
    /// The job's worker count `N` (active or not): scatter-reduce's message ids need it.
    pub job_workers: u32,
    /// How long to wait for the others' messages.
    pub timeout: Duration,
    /// The pattern.
    pub pattern: Pattern,
    /// This worker.
    pub worker: u32,
    /// The active workers of the step, in order.
    pub workers: &'a [u32],
    /// Dimension of the vectors exchanged.
    pub dim: usize,
    /// The sequence number of the removal request to look for.
    pub expected_removal: u32,
}

impl Exchange<'_> {
    /// Publishes `message` (whose delta is what this worker sends), and returns the mean of
    /// every worker's sent vector, with `own` (this worker's whole update, when its filter held
    /// part of it back) in place of its own.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, but safe to run again: dropped (by the invocation's timeout) after it
    /// has published, it leaves this worker's messages of the step on the channel, where its
    /// peers and the leader find them, and `traffic` counts what was sent so far. Publishing is
    /// idempotent, so a replacement that runs the step again publishes the same messages.
    pub async fn run(
        &self,
        message: UpdateMessage,
        own: Option<&SparseVector>,
        traffic: &mut Traffic,
    ) -> Result<Exchanged> {
        let step = message.step;
        let me = self.position();
        match self.pattern {
            Pattern::Broadcast => {
                let sent = self.sent_vector(&message)?;
                let mut messages = self
                    .publish_and_collect(UPDATES, step, &message, self.workers, traffic)
                    .await?;
                let own_slot = own.cloned().unwrap_or(sent);
                let mut flags = Flags::new(self.expected_removal);
                flags.take(&message);
                let mut vectors = Vec::with_capacity(messages.len());
                for (k, update) in messages.drain(..).enumerate() {
                    if k == me {
                        vectors.push(None);
                    } else {
                        flags.take(&update);
                        vectors.push(Some(self.vector(update)?));
                    }
                }
                let ordered: Vec<&SparseVector> = vectors
                    .iter()
                    .map(|v| v.as_ref().unwrap_or(&own_slot))
                    .collect();
                traffic.updates_applied = ordered.len() as u32;
                Ok(flags.with_mean(mean_of(&ordered)))
            }
            Pattern::AllReduce => {
                let leader = self.workers[0];
                let held = own.map(|own| self.held(own, &message)).transpose()?;
                self.publish(UPDATES, step, self.worker, &message, traffic)
                    .await?;
                let reduced = if self.worker == leader {
                    let messages = self.collect(UPDATES, step, self.workers, traffic).await?;
                    let reduced = self.reduce(step, messages)?;
                    self.publish_and_collect(REDUCED, step, &reduced, &[leader], traffic)
                        .await?
                } else {
                    self.collect(REDUCED, step, &[leader], traffic).await?
                };
                let mut flags = Flags::new(self.expected_removal);
                let mut mean = SparseVector::new();
                for update in reduced {
                    flags.take(&update);
                    mean = self.vector(update)?;
                }
                traffic.updates_applied = self.workers.len() as u32;
                Ok(flags.with_mean(self.add_held(mean, held)))
            }
            Pattern::ScatterReduce => {
                let held = own.map(|own| self.held(own, &message)).transpose()?;
                let sent = self.sent_vector(&message)?;
                let bounds = self.bounds();
                let n = u64::from(self.job_workers);
                let mut parts = Vec::with_capacity(bounds.len());
                for (c, chunk) in sent.split_at_bounds(&bounds).into_iter().enumerate() {
                    let part = UpdateMessage {
                        delta: WireDelta::Sparse(chunk),
                        ..message.clone()
                    };
                    parts.push((scatter_id(self.worker, c, n)?, Self::encode(&part, traffic)));
                }
                self.publish_all(SCATTER, step, parts).await?;
                let from: Vec<u32> = self
                    .workers
                    .iter()
                    .map(|&w| scatter_id(w, me, n))
                    .collect::<Result<_>>()?;
                let parts = self.collect(SCATTER, step, &from, traffic).await?;
                let reduced = self.reduce(step, parts)?;
                let chunks = self
                    .publish_and_collect(REDUCED, step, &reduced, self.workers, traffic)
                    .await?;
                let mut flags = Flags::new(self.expected_removal);
                let mut vectors = Vec::with_capacity(chunks.len());
                for chunk in chunks {
                    flags.take(&chunk);
                    vectors.push(self.vector(chunk)?);
                }
                let mean = SparseVector::concat(vectors).map_err(|e| {
                    RuntimeError::FunctionFailed(format!(
                        "the averaged chunks of step {step} do not join up: {e}"
                    ))
                })?;
                traffic.updates_applied = self.workers.len() as u32;
                Ok(flags.with_mean(self.add_held(mean, held)))
            }
            Pattern::Server => {
                let held = own.map(|own| self.held(own, &message)).transpose()?;
                // The header is the message without its delta, which the share carries.
                let mut header = message;
                let delta =
                    std::mem::replace(&mut header.delta, WireDelta::Sparse(SparseVector::new()));
                let entries = delta.nnz() as u64;
                let share = Share {
                    header: header.encode(),
                    delta,
                    dim: self.dim,
                };
                let averaged = self
                    .channel
                    .publish_and_average(self.step_exchange(MEANS, step, self.workers), share)
                    .await?;
                traffic.bytes_sent += averaged.bytes_sent;
                traffic.messages_sent += 1;
                traffic.entries_sent += entries;
                traffic.published_unix_ms = now_unix_ms_f64();
                traffic.bytes_received += averaged.bytes_received;
                traffic.messages_received += averaged.messages_received;
                let mut flags = Flags::new(self.expected_removal);
                for (header, &id) in averaged.headers.iter().zip(self.workers) {
                    flags.take(&decode_for_step(MEANS, step, id, header)?);
                }
                traffic.updates_applied = self.workers.len() as u32;
                Ok(flags.with_mean(self.add_held(averaged.mean, held)))
            }
        }
    }

    /// The message this worker published first in the exchange of `step`, if it did (a
    /// replacement replaying steps looks its old flags up there).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn published(&self, step: u64) -> Result<Option<UpdateMessage>> {
        let (topic, id) = first_message(self.pattern, self.worker, self.job_workers)?;
        let found = self
            .channel
            .poll(StepMessages::new(topic, step, &[id]))
            .await?;
        let Some(payload) = found.into_iter().next().flatten() else {
            return Ok(None);
        };
        let location = || format!("{topic} message {id} for step {step}");
        let payload = match self.pattern {
            Pattern::Broadcast | Pattern::AllReduce | Pattern::ScatterReduce => payload,
            // A share: its header is the update message without its delta.
            Pattern::Server => {
                mlless_store::channel::average::share_header(&payload).map_err(|reason| {
                    RuntimeError::FunctionFailed(format!("{}: {reason}", location()))
                })?
            }
        };
        Ok(Some(UpdateMessage::decode(&payload, location)?))
    }

    /// Deletes what this worker published in the exchange of `step`, once no peer needs it.
    ///
    /// # Cancel safety
    ///
    /// Dropped part way, it leaves some of the step's messages on the channel (deleting them
    /// again is harmless); the driver cleans the channel up when the job ends.
    pub async fn discard(&self, step: u64) -> Result<()> {
        discard_published(
            self.channel,
            self.pattern,
            self.worker,
            self.job_workers,
            step,
        )
        .await
    }

    fn position(&self) -> usize {
        self.workers
            .iter()
            .position(|&w| w == self.worker)
            .unwrap_or(0)
    }

    /// Chunk boundaries of a scatter-reduce: one index range of equal width per worker.
    fn bounds(&self) -> Vec<u64> {
        let p = self.workers.len() as u64;
        let dim = self.dim as u64;
        (0..=p).map(|c| c * dim / p).collect()
    }

    /// The mean of `messages` (in worker order), as the message a leader or chunk owner
    /// publishes, with the flags of them all.
    fn reduce(&self, step: u64, messages: Vec<UpdateMessage>) -> Result<UpdateMessage> {
        let mut flags = Flags::new(self.expected_removal);
        let mut vectors = Vec::with_capacity(messages.len());
        for update in messages {
            flags.take(&update);
            vectors.push(self.vector(update)?);
        }
        let refs: Vec<&SparseVector> = vectors.iter().collect();
        Ok(UpdateMessage {
            step,
            worker: self.worker,
            loss: Default::default(),
            stop: flags.stop,
            last: false,
            applied_through: step,
            removal: flags.removal,
            delta: WireDelta::Sparse(mean_of(&refs)),
        })
    }

    /// What this worker held back of `own`: `own` minus what it sends.
    fn held(&self, own: &SparseVector, message: &UpdateMessage) -> Result<SparseVector> {
        Ok(own.plus_scaled(&self.sent_vector(message)?, -1.0))
    }

    /// `mean` plus this worker's held-back part at the weight of one worker.
    fn add_held(&self, mean: SparseVector, held: Option<SparseVector>) -> SparseVector {
        match held {
            None => mean,
            Some(held) => mean.plus_scaled(&held, 1.0 / self.workers.len() as f32),
        }
    }

    fn sent_vector(&self, message: &UpdateMessage) -> Result<SparseVector> {
        self.vector(message.clone())
    }

    /// The delta of `message` as a sparse vector that fits the exchange's dimension.
    fn vector(&self, message: UpdateMessage) -> Result<SparseVector> {
        let (from, step) = (message.worker, message.step);
        message.delta.into_sparse(self.dim).map_err(|e| {
            RuntimeError::FunctionFailed(format!(
                "the update of worker {from} for step {step} does not fit the model: {e}"
            ))
        })
    }

    async fn publish(
        &self,
        topic: &str,
        step: u64,
        id: u32,
        message: &UpdateMessage,
        traffic: &mut Traffic,
    ) -> Result<()> {
        let bytes = Self::encode(message, traffic);
        self.channel
            .publish(MessageId::new(topic, step, id), bytes)
            .await?;
        Ok(())
    }

    /// Publishes encoded messages under their ids, [`PUBLISH_CONCURRENCY`] at a time: on S3 a
    /// scatter-reduce's P chunks one after the other took P request latencies (`mlless bench
    /// cloud`: 420 ms a step at P = 16 on 20 ms requests, 120 ms at once).
    async fn publish_all(&self, topic: &str, step: u64, messages: Vec<(u32, Bytes)>) -> Result<()> {
        futures::stream::iter(messages)
            .map(|(id, bytes)| self.channel.publish(MessageId::new(topic, step, id), bytes))
            .buffer_unordered(PUBLISH_CONCURRENCY)
            .try_for_each(|()| std::future::ready(Ok(())))
            .await?;
        Ok(())
    }

    /// Publishes this worker's `message` on `topic` and collects the step's messages of
    /// `from` ([`Channel::publish_and_collect`]: one round trip less on Redis).
    async fn publish_and_collect(
        &self,
        topic: &str,
        step: u64,
        message: &UpdateMessage,
        from: &[u32],
        traffic: &mut Traffic,
    ) -> Result<Vec<UpdateMessage>> {
        let bytes = Self::encode(message, traffic);
        let payloads = self
            .channel
            .publish_and_collect(self.step_exchange(topic, step, from), bytes)
            .await?;
        self.decode_all(topic, step, from, &payloads, traffic)
    }

    /// This worker's side of the exchange of `step` on `topic` with `peers`, within the
    /// exchange's timeout.
    fn step_exchange<'b>(
        &'b self,
        topic: &'b str,
        step: u64,
        peers: &'b [u32],
    ) -> StepExchange<'b> {
        StepExchange {
            topic,
            step,
            from: self.worker,
            peers,
            timeout: self.timeout,
        }
    }

    /// Encodes a message to publish, counting it in `traffic`.
    fn encode(message: &UpdateMessage, traffic: &mut Traffic) -> Bytes {
        let bytes = message.encode();
        traffic.bytes_sent += bytes.len() as u64;
        traffic.messages_sent += 1;
        traffic.entries_sent += message.delta.nnz() as u64;
        traffic.published_unix_ms = now_unix_ms_f64();
        bytes
    }

    /// Collects and decodes the messages of `from` on `topic` at `step`, checking that each is
    /// the step's.
    async fn collect(
        &self,
        topic: &str,
        step: u64,
        from: &[u32],
        traffic: &mut Traffic,
    ) -> Result<Vec<UpdateMessage>> {
        let payloads = self
            .channel
            .collect(StepMessages::new(topic, step, from), self.timeout)
            .await?;
        self.decode_all(topic, step, from, &payloads, traffic)
    }

    /// Decodes the `payloads` of `from` on `topic` at `step`, checking that each is the
    /// step's, and counts what came from the peers in `traffic`.
    fn decode_all(
        &self,
        topic: &str,
        step: u64,
        from: &[u32],
        payloads: &[Bytes],
        traffic: &mut Traffic,
    ) -> Result<Vec<UpdateMessage>> {
        let mut messages = Vec::with_capacity(payloads.len());
        for (payload, &id) in payloads.iter().zip(from) {
            if id != self.worker {
                traffic.bytes_received += payload.len() as u64;
                traffic.messages_received += 1;
            }
            messages.push(decode_for_step(topic, step, id, payload)?);
        }
        Ok(messages)
    }
}

/// Decodes `id`'s message (or share's header) on `topic` at `step`, checking that it is the
/// step's.
fn decode_for_step(topic: &str, step: u64, id: u32, payload: &[u8]) -> Result<UpdateMessage> {
    let message =
        UpdateMessage::decode(payload, || format!("{topic} message {id} for step {step}"))?;
    if message.step != step {
        return Err(RuntimeError::FunctionFailed(format!(
            "the {topic} message {id} for step {step} claims step {}",
            message.step
        )));
    }
    Ok(message)
}

/// Deletes what `worker` published in the exchange of `step` under `pattern`, in a job of
/// `job_workers` workers: [`Exchange::discard`], for a caller that holds no `Exchange` (a
/// worker deleting on a task of its own).
///
/// # Cancel safety
///
/// As [`Exchange::discard`].
pub(crate) async fn discard_published(
    channel: &dyn Channel,
    pattern: Pattern,
    worker: u32,
    job_workers: u32,
    step: u64,
) -> Result<()> {
    match pattern {
        Pattern::Broadcast => {
            channel
                .discard(StepMessages::new(UPDATES, step, &[worker]))
                .await?
        }
        Pattern::AllReduce => {
            channel
                .discard(StepMessages::new(UPDATES, step, &[worker]))
                .await?;
            channel
                .discard(StepMessages::new(REDUCED, step, &[worker]))
                .await?;
        }
        Pattern::ScatterReduce => {
            let n = u64::from(job_workers);
            let ids: Vec<u32> = (0..job_workers as usize)
                .map(|c| scatter_id(worker, c, n))
                .collect::<Result<_>>()?;
            channel
                .discard(StepMessages::new(SCATTER, step, &ids))
                .await?;
            channel
                .discard(StepMessages::new(REDUCED, step, &[worker]))
                .await?;
        }
        Pattern::Server => {
            channel
                .discard(StepMessages::new(MEANS, step, &[worker]))
                .await?
        }
    }
    Ok(())
}

/// The topic and id of the first message `worker` publishes in an exchange with `pattern`
/// (`job_workers` workers in the job).
pub(crate) fn first_message(
    pattern: Pattern,
    worker: u32,
    job_workers: u32,
) -> Result<(&'static str, u32)> {
    Ok(match pattern {
        Pattern::Broadcast | Pattern::AllReduce => (UPDATES, worker),
        Pattern::ScatterReduce => (SCATTER, scatter_id(worker, 0, u64::from(job_workers))?),
        Pattern::Server => (MEANS, worker),
    })
}

/// The message id of worker `worker`'s chunk for the owner in position `chunk`.
fn scatter_id(worker: u32, chunk: usize, workers: u64) -> Result<u32> {
    u32::try_from(u64::from(worker) * workers + chunk as u64)
        .map_err(|_| crate::Refusal::ScatterReduceWorkers { workers }.into())
}

/// The stop flag and removal request seen in an exchange's messages.
struct Flags {
    expected_removal: u32,
    stop: bool,
    removal: Option<Removal>,
}

impl Flags {
    fn new(expected_removal: u32) -> Self {
        Self {
            expected_removal,
            stop: false,
            removal: None,
        }
    }

    fn take(&mut self, message: &UpdateMessage) {
        self.stop |= message.stop;
        if self.removal.is_none() {
            self.removal = message.removal.filter(|r| r.seq == self.expected_removal);
        }
    }

    fn with_mean(self, mean: SparseVector) -> Exchanged {
        Exchanged {
            mean,
            stop: self.stop,
            removal: self.removal,
        }
    }
}
