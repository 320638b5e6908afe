//! The minibatch reader: a worker's share of each step in the shared shuffled order, the next
//! one prefetched while the current one computes.

use std::ops::Range;

use mlless_core::Batch;
use mlless_job::BatchPlan;
use mlless_job::batch_plan::Part;
use tokio::task::JoinHandle;

use crate::context::JobContext;
use crate::dataset::Split;
use crate::error::{Result, RuntimeError};
use crate::fleet::batch_order;

/// Reads a worker's positions (slices of minibatches, [`mlless_job::BatchPlan`]) in the shared
/// order, prefetching the next ones.
pub(super) struct BatchReader {
    dataset: crate::dataset::Dataset,
    batches: u32,
    plan: BatchPlan,
    seed: u64,
    order: (u64, Vec<u32>),
    prefetched: Option<(Range<u64>, JoinHandle<Result<Batch>>)>,
}

impl BatchReader {
    pub(super) fn new(ctx: &JobContext) -> Self {
        let spec = &ctx.spec;
        Self {
            dataset: ctx.dataset.clone(),
            batches: spec.train_batches,
            plan: spec.plan(),
            seed: spec.training.seed,
            order: (0, batch_order(spec.training.seed, 0, spec.train_batches)),
            prefetched: None,
        }
    }

    /// The minibatch index of minibatch stream position `pos`.
    fn locate(&mut self, pos: u64) -> usize {
        let m = u64::from(self.batches);
        let epoch = pos / m;
        if self.order.0 != epoch {
            self.order = (epoch, batch_order(self.seed, epoch, self.batches));
        }
        self.order.1[(pos % m) as usize] as usize
    }

    /// ADMM's (and k-means') fixed shards: the positions of the `step`-th minibatch of the
    /// worker in position `rank` of `workers`, in epoch 0's order, passing over positions
    /// `rank`, `rank + workers`, … below the number of minibatches, again and again. These jobs
    /// read whole minibatches ([`BatchPlan::whole`]): a position is a minibatch.
    pub(super) fn shard_positions(&self, rank: usize, workers: usize, step: u64) -> Range<u64> {
        let m = u64::from(self.batches.max(1));
        let (rank, p) = (rank as u64 % m, workers.max(1) as u64);
        let pos = rank + (step % self.shard_len(rank as usize, workers)) * p;
        pos..pos + 1
    }

    /// The number of minibatches in the shard of the worker in position `rank` of `workers`.
    pub(super) fn shard_len(&self, rank: usize, workers: usize) -> u64 {
        let m = u64::from(self.batches.max(1));
        let (rank, p) = (rank as u64 % m, workers.max(1) as u64);
        (m - rank).div_ceil(p)
    }

    fn fetch(&mut self, range: Range<u64>) -> JoinHandle<Result<Batch>> {
        let parts: Vec<(usize, Part)> = self
            .plan
            .parts(range)
            .into_iter()
            .map(|part| (self.locate(part.minibatch), part))
            .collect();
        let dataset = self.dataset.clone();
        tokio::spawn(async move {
            let read = parts
                .iter()
                .map(|(index, _)| dataset.read_batch(Split::Train, *index));
            let mut batches = futures::future::try_join_all(read).await?;
            if let [(_, part)] = &parts[..]
                && part.is_whole()
            {
                return Ok(batches.swap_remove(0));
            }
            let pieces: Vec<(&Batch, Range<usize>)> = parts
                .iter()
                .zip(&batches)
                .map(|((_, part), batch)| (batch, part.rows(batch.samples())))
                .collect();
            Batch::concat(&pieces).ok_or_else(|| {
                RuntimeError::FunctionFailed(format!(
                    "the training minibatches {:?} of {} are not all of one kind",
                    parts.iter().map(|(index, _)| index).collect::<Vec<_>>(),
                    dataset.url()
                ))
            })
        })
    }

    /// The samples of positions `range` with the epoch of its first; starts fetching those of
    /// `next` (the worker's positions at the next step, as far as it knows; a wrong guess is
    /// refetched).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while it waits, the read goes on in its task, detached, and the
    /// next call reads the positions again.
    pub(super) async fn next(
        &mut self,
        range: Range<u64>,
        next: Option<Range<u64>>,
    ) -> Result<(u64, Batch)> {
        let handle = match self.prefetched.take() {
            Some((r, handle)) if r == range => handle,
            Some((_, stale)) => {
                stale.abort();
                self.fetch(range.clone())
            }
            None => self.fetch(range.clone()),
        };
        let batch = handle
            .await
            .map_err(|e| RuntimeError::FunctionFailed(format!("minibatch reader failed: {e}")))??;
        if let Some(next) = next {
            let handle = self.fetch(next.clone());
            self.prefetched = Some((next, handle));
        }
        let epoch = range.start / self.plan.per_epoch(self.batches).max(1);
        Ok((epoch, batch))
    }
}
