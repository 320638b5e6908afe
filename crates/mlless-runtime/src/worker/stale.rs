//! SSP and ASP: each worker applies its peers' updates as they arrive, keeping a cursor per
//! peer, and waits (SSP) only for those more than the slack behind.

use std::time::Instant;

use tracing::debug;

use mlless_faas::clock::now_unix_ms_f64;
use mlless_store::{MessageId, StepMessages};

use super::{End, Worker, ms};
use crate::error::{Result, RuntimeError};
use crate::messages::Traffic;
use crate::messages::{Message, UPDATES, UpdateMessage};

/// SSP and ASP: what a worker knows of each peer (indexed by position in the fleet).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct StaleState {
    /// The next step of theirs to apply.
    pub(super) cursor: Vec<u64>,
    /// The step they ended at, once seen.
    pub(super) ended: Vec<Option<u64>>,
    /// The `applied_through` they last reported.
    pub(super) reported: Vec<u64>,
    /// Own messages before this step are deleted.
    pub(super) discarded_through: u64,
}

impl Worker {
    /// SSP and ASP: each worker applies its peers' updates as they arrive, waiting (SSP) only
    /// for those more than the slack behind. Returns the last step.
    pub(super) async fn run_stale(&mut self) -> Result<End> {
        let spec = self.ctx.spec.clone();
        let positions = u64::from(spec.training.stop.max_epochs) * spec.positions_per_epoch();
        let slack = spec.training.sync.slack();
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
            self.inject_faults(step).await;
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
                            .collect(StepMessages::new(UPDATES, s, &from), spec.collect_timeout())
                            .await?;
                        fetched.push((s, group, payloads.into_iter().map(Some).collect()));
                        break;
                    }
                    fetched.push((
                        s,
                        group,
                        self.ctx
                            .channel
                            .poll(StepMessages::new(UPDATES, s, &from))
                            .await?,
                    ));
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
                    .discard(StepMessages::new(UPDATES, discarded_through, &[self.id]))
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

    /// Publishes an update message, counting it.
    async fn publish(&self, message: &UpdateMessage, traffic: &mut Traffic) -> Result<()> {
        let bytes = message.encode();
        traffic.bytes_sent += bytes.len() as u64;
        traffic.messages_sent += 1;
        traffic.entries_sent += message.delta.nnz() as u64;
        traffic.published_unix_ms = now_unix_ms_f64();
        self.ctx
            .channel
            .publish(MessageId::new(UPDATES, message.step, self.id), bytes)
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
}
