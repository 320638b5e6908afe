//! k-means: one distributed Lloyd iteration per step over each worker's shard.

use std::time::{Duration, Instant};

use mlless_core::{BatchLoss, LloydSums, SparseVector, WireDelta, kmeans_plus_plus};

use mlless_faas::clock::{now_unix_ms_f64, thread_cpu_time};

use super::{Computed, End, RoundState, Worker, cpu_elapsed, ms};
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::messages::Traffic;

/// k-means++ seeds on this many minibatches (the first ones of the training set).
pub const KMEANS_SEED_BATCHES: u32 = 8;

impl Worker {
    /// k-means by distributed Lloyd steps: each step, every worker assigns the points of its
    /// shard to the nearest centroid and sums them per cluster; the sums, counts and inertia
    /// are averaged through the channel (with any pattern); every worker then computes the same
    /// new centroids. Stops once the inertia changes by less than `--tolerance` (relative), or
    /// after `--max-epochs` iterations (each reads the whole data set once).
    pub(super) async fn run_kmeans(&mut self, k: u32, features: u32) -> Result<End> {
        let spec = self.ctx.spec.clone();
        let tolerance = spec.training.stop.tolerance.unwrap_or(0.0);
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
            self.inject_faults(step).await;
            let workers = self.fleet.workers(step).to_vec();
            let started = Instant::now();
            let started_unix_ms = now_unix_ms_f64();
            let (mut read, mut compute) = (Duration::ZERO, Duration::ZERO);
            let mut compute_cpu = Some(Duration::ZERO);
            let mut sums = LloydSums::new(k, features);
            for s in 0..shard {
                let read_started = Instant::now();
                let positions = self.reader.shard_positions(self.me, p, s);
                let next = (s + 1 < shard).then(|| self.reader.shard_positions(self.me, p, s + 1));
                let (_, batch) = self.reader.next(positions, next).await?;
                let compute_started = Instant::now();
                let cpu_started = thread_cpu_time();
                read += compute_started - read_started;
                sums.add_batch(&self.params, &batch)
                    .map_err(|source| RuntimeError::Model {
                        location: format!("worker {}, Lloyd iteration {step}", self.id),
                        source,
                    })?;
                compute += compute_started.elapsed();
                compute_cpu = compute_cpu
                    .zip(cpu_elapsed(cpu_started))
                    .map(|(a, b)| a + b);
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
            let exchanged = self
                .exchange_of(&workers, dim)
                .run(message, None, &mut traffic)
                .await?;
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
                RoundState::None | RoundState::Anchor(_) | RoundState::Admm { .. } => false,
            };
            let last =
                exchanged.stop || converged || step + 1 >= u64::from(spec.training.stop.max_epochs);
            let computed = Computed {
                started,
                loss,
                read_ms: ms(read),
                compute_ms: ms(compute),
                compute_cpu_ms: compute_cpu.map(ms),
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
        kmeans_plus_plus(&sample, k, features, self.ctx.spec.training.seed).map_err(|source| {
            RuntimeError::Model {
                location: format!("k-means++ seeding on the first {batches} minibatches"),
                source,
            }
        })
    }
}
