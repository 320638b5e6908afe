//! The job spec: everything a function needs to know about a training job, written by the driver
//! to the run's location before any function starts.

use std::time::Duration;

use mlless_core::{Compression, FilterConfig, ModelSpec, OptimizerConfig, Schedule};
use mlless_faas::Limits;
use serde::{Deserialize, Serialize};

/// Key of the job spec below the run's location.
pub const SPEC_KEY: &str = "spec.json";

/// A training job, as the functions read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Unique id of the job; namespaces everything it writes to the channel.
    pub job_id: String,
    /// Location of the prepared data set (the directory of its `manifest.json`).
    pub data_url: String,
    /// Location where the job writes its spec, model and record.
    pub run_url: String,
    /// The model to train.
    pub model: ModelSpec,
    /// Number of workers P.
    pub workers: u32,
    /// The optimiser each worker runs on its local gradient.
    pub optimizer: OptimizerConfig,
    /// Base learning rate.
    pub lr: f32,
    /// Learning-rate schedule over epochs.
    pub schedule: Schedule,
    /// Seed of the model's initialisation and of the minibatch order.
    pub seed: u64,
    /// When to stop.
    pub stop: StopCriteria,
    /// Channel URL (`None`: the object store the run is written to).
    pub channel: Option<String>,
    /// Memory and lifetime cap of every function.
    pub limits: Limits,
    /// Number of training minibatches in the data set.
    pub train_batches: u32,
    /// How the workers synchronise.
    pub sync: SyncMode,
    /// How the workers compress what they send.
    pub compression: Compression,
}

impl JobSpec {
    /// How long a worker waits for its peers' messages of one step before it gives up.
    pub fn collect_timeout(&self) -> Duration {
        self.limits.timeout
    }

    /// What each worker's update filter keeps back and how it compresses the rest.
    pub fn filter(&self) -> FilterConfig {
        FilterConfig {
            significance: match self.sync {
                SyncMode::Isp { significance } => Some(significance),
                _ => None,
            },
            compression: self.compression,
        }
    }
}

/// How the workers keep their replicas in step (`--sync`, DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SyncMode {
    /// Bulk synchronous: every worker applies every update of step t before step t + 1.
    Bsp,
    /// Insignificance-bounded synchronous (MLLess): BSP's barrier, but each worker sends only
    /// the accumulated updates that are significant relative to the parameter, and keeps
    /// accumulating the rest.
    Isp {
        /// The threshold `V`; an accumulated update `a_j` is sent once
        /// `|a_j / x_j| > V / sqrt(t + 1)`.
        significance: f32,
    },
    /// Stale synchronous: a worker starts step t + 1 only once it has applied every worker's
    /// updates up to step t − slack, and applies whatever else has arrived.
    Ssp {
        /// How many steps a worker may run ahead of the slowest; 0 is BSP.
        slack: u32,
    },
    /// Asynchronous: no barrier; every update is applied, once, when it arrives.
    Asp,
}

impl SyncMode {
    /// The steps a worker may run ahead of the slowest: `Some(0)` for the synchronous modes,
    /// `None` (unbounded) for ASP.
    pub fn slack(&self) -> Option<u64> {
        match self {
            Self::Bsp | Self::Isp { .. } => Some(0),
            Self::Ssp { slack } => Some(u64::from(*slack)),
            Self::Asp => None,
        }
    }

    /// Whether every worker applies every step's updates at the same point (BSP, ISP).
    pub fn is_synchronous(&self) -> bool {
        matches!(self, Self::Bsp | Self::Isp { .. })
    }

    /// The mode's name as `--sync` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Bsp => "bsp",
            Self::Isp { .. } => "isp",
            Self::Ssp { .. } => "ssp",
            Self::Asp => "asp",
        }
    }
}

impl std::fmt::Display for SyncMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bsp | Self::Asp => f.write_str(self.name()),
            Self::Isp { significance } => write!(f, "isp (V = {significance})"),
            Self::Ssp { slack } => write!(f, "ssp (slack {slack})"),
        }
    }
}

/// When training stops; whichever criterion is met first.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StopCriteria {
    /// Stop once the step loss stays at or below this for `target_patience` consecutive steps.
    pub target_loss: Option<f64>,
    /// Number of consecutive steps the target must hold.
    pub target_patience: u32,
    /// Stop after this many passes over the training set.
    pub max_epochs: u32,
    /// Stop after this much wall time, in seconds.
    pub max_time_s: Option<f64>,
}

/// The worker that reads position `pos` of the endless stream of minibatches, and the epoch and
/// minibatch index that position means.
///
/// Worker `i` at step `t` of a job with `P` workers reads position `i + t·P`; epoch `e` covers
/// positions `e·M .. (e+1)·M` and reads the `M` training minibatches in the order
/// [`batch_order`]`(seed, e, M)`, which every worker computes alike without talking.
pub fn position(worker: u32, step: u64, workers: u32) -> u64 {
    u64::from(worker) + step * u64::from(workers)
}

/// The shuffled order of the `batches` minibatches in `epoch`, shared by all workers.
pub fn batch_order(seed: u64, epoch: u64, batches: u32) -> Vec<u32> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut order: Vec<u32> = (0..batches).collect();
    let mix = seed ^ epoch.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = rand::rngs::StdRng::seed_from_u64(mix);
    order.shuffle(&mut rng);
    order
}

/// Whether a job of `workers` workers over `batches` minibatches has finished `max_epochs`
/// epochs once step `step` is done.
pub fn epochs_done(step: u64, workers: u32, batches: u32, max_epochs: u32) -> bool {
    (step + 1) * u64::from(workers) >= u64::from(max_epochs) * u64::from(batches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_order_is_a_shared_permutation_that_changes_per_epoch() {
        let a = batch_order(7, 0, 50);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_eq!(a, batch_order(7, 0, 50));
        assert_ne!(a, batch_order(7, 1, 50));
        assert_ne!(a, batch_order(8, 0, 50));
    }

    #[test]
    fn positions_cover_each_epoch_once() {
        let (p, m) = (4u32, 10u32);
        let seen: Vec<u64> = (0..5u64)
            .flat_map(|t| (0..p).map(move |w| position(w, t, p)))
            .collect();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        assert!(!epochs_done(3, p, m, 2));
        assert!(epochs_done(4, p, m, 2));
    }
}
