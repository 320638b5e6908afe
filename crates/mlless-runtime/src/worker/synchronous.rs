//! BSP and ISP: every worker applies every step's updates before the next step, through an
//! exchange (GA-SGD every step; MA-SGD and ADMM every round of local steps).

use std::time::Instant;

use mlless_core::{BatchLoss, SparseVector, WireDelta};
use tracing::debug;

use super::{End, RoundState, Worker, ms};
use crate::error::Result;
use crate::exchange::Exchanged;
use crate::messages::Traffic;
use mlless_job::Algorithm;

impl Worker {
    /// BSP and ISP: every worker applies every step's updates before the next step. Returns the
    /// last step.
    ///
    /// GA-SGD exchanges every step. MA-SGD and ADMM take local steps and exchange every
    /// [`Algorithm::round_steps`] steps and after the last one.
    pub(super) async fn run_synchronous(&mut self) -> Result<End> {
        let spec = self.ctx.spec.clone();
        let positions = u64::from(spec.training.stop.max_epochs) * spec.positions_per_epoch();
        let round = spec.training.algorithm.round_steps(
            spec.plan()
                .steps_per_epoch(spec.train_batches, spec.training.workers as usize),
        );
        let mut step = self.next_step;
        loop {
            self.inject_faults(step).await;
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
                    let exchange = self.exchange(&workers);
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

    /// MA-SGD and ADMM: applies the worker's own delta to its replica in full; ADMM also takes
    /// the proximal step towards `z − u` (in closed form, stable for any `lr · ρ`).
    fn local_step(&mut self, own: &SparseVector, lr: f32) {
        own.scaled_add_to(&mut self.params, 1.0);
        if let (RoundState::Admm { z, u }, Algorithm::Admm { rho, .. }) =
            (&self.rounds, self.ctx.spec.training.algorithm)
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
    ) -> Result<Exchanged> {
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
        let exchanged = self.exchange(workers).run(message, None, traffic).await?;
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
    /// publishes on [`FLUSH`](crate::messages::FLUSH) (at step `step + 1`) and the survivors apply with the weight of
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
}
