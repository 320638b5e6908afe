//! A worker's checkpoint: its whole state between two steps, what a new invocation (after a
//! hand-off, a crash or `--resume`) starts from.

use mlless_core::{SparseVector, UpdateFilter};

use super::stale::StaleState;
use super::{RoundState, Worker};
use crate::error::{Result, RuntimeError};
use crate::fleet::Fleet;
use crate::messages::{Message, Removal};

/// A worker's whole state between two steps: what a new invocation resumes from.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct WorkerCheckpoint {
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
    const MAGIC: [u8; 4] = crate::checkpoint::WORKER_MAGIC;
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
        let (_stamp, saved) = crate::checkpoint::decode_any::<WorkerCheckpoint>(bytes, || {
            "worker checkpoint".to_string()
        })?;
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
            fleet: Fleet::new(3, mlless_job::BatchPlan::whole(3)),
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
        let stamp = crate::checkpoint::Stamp::new("job-sample", "worker-1", 7);
        crate::checkpoint::encode(&stamp, &saved).to_vec()
    }
}

impl Worker {
    /// Takes up the state a previous invocation left.
    pub(super) fn restore(&mut self, saved: WorkerCheckpoint) -> Result<()> {
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
            || saved.stale.is_some() && self.ctx.spec.training.sync.is_synchronous()
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
    pub(super) fn snapshot(&self) -> WorkerCheckpoint {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WorkerCheckpoint {
        let bytes = fuzzing::sample_worker_checkpoint(4);
        crate::checkpoint::decode_any::<WorkerCheckpoint>(&bytes, String::new)
            .unwrap()
            .1
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
        let stamp = crate::checkpoint::Stamp::new("job-sample", "worker-1", 7);
        let bytes = crate::checkpoint::encode(&stamp, &saved);
        assert!(fuzzing::decode_worker_checkpoint(&bytes).is_err());
    }
}
