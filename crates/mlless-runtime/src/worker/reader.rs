//! The minibatch reader: a worker's minibatches in the shared shuffled order, the next one
//! prefetched while the current one computes.

use mlless_core::Batch;
use tokio::task::JoinHandle;

use crate::context::JobContext;
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::fleet::batch_order;

/// Reads a worker's minibatches in the shared order, prefetching the next one.
pub(super) struct BatchReader {
    dataset: crate::dataset::Dataset,
    batches: u32,
    seed: u64,
    order: (u64, Vec<u32>),
    prefetched: Option<(u64, JoinHandle<Result<Batch>>)>,
}

impl BatchReader {
    pub(super) fn new(ctx: &JobContext) -> Self {
        let spec = &ctx.spec;
        Self {
            dataset: ctx.dataset.clone(),
            batches: spec.train_batches,
            seed: spec.training.seed,
            order: (0, batch_order(spec.training.seed, 0, spec.train_batches)),
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
    pub(super) fn shard_position(&self, rank: usize, workers: usize, step: u64) -> u64 {
        let m = u64::from(self.batches.max(1));
        let (rank, p) = (rank as u64 % m, workers.max(1) as u64);
        rank + (step % self.shard_len(rank as usize, workers)) * p
    }

    /// The number of minibatches in the shard of the worker in position `rank` of `workers`.
    pub(super) fn shard_len(&self, rank: usize, workers: usize) -> u64 {
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
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while it waits, the read goes on in its task, detached, and the
    /// next call reads the minibatch again.
    pub(super) async fn next(&mut self, pos: u64, next: Option<u64>) -> Result<(u64, Batch)> {
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
