//! The job spec: everything a function needs to know about a training job, written by the driver
//! to the run's location before any function starts.

use std::time::Duration;

use mlless_core::{Compression, FilterConfig, ModelSpec, OptimizerConfig, Schedule, TunerConfig};
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
    #[serde(default)]
    pub sync: SyncMode,
    /// How the workers compress what they send.
    #[serde(default)]
    pub compression: Compression,
    /// The scale-in auto-tuner's settings; `None`: the fleet keeps its size.
    #[serde(default)]
    pub scale_in: Option<TunerConfig>,
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
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SyncMode {
    /// Bulk synchronous: every worker applies every update of step t before step t + 1.
    #[default]
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

/// The active workers over the steps of a job: all `P` at first, fewer after each scale-in
/// removal. Every worker and the supervisor keep the same fleet, since they all learn of a
/// removal at the same step (it travels in that step's updates).
///
/// Positions in the endless stream of minibatches stay contiguous across a change: from step
/// `t0` on, with the active workers `w_0 < … < w_{p−1}`, worker `w_r` reads position
/// `base + (t − t0)·p + r`, where `base` is the number of positions read before `t0`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    segments: Vec<FleetSegment>,
}

/// The workers active from a step on, and the positions read before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetSegment {
    /// First step of the segment.
    pub from_step: u64,
    /// Minibatch positions read before `from_step`.
    pub base: u64,
    /// The active workers, ascending.
    pub workers: Vec<u32>,
}

impl Fleet {
    /// All `workers` workers active from step 0.
    pub fn new(workers: u32) -> Self {
        Self {
            segments: vec![FleetSegment {
                from_step: 0,
                base: 0,
                workers: (0..workers).collect(),
            }],
        }
    }

    /// The segment that holds `step`.
    pub fn segment(&self, step: u64) -> &FleetSegment {
        let i = self.segments.partition_point(|s| s.from_step <= step);
        &self.segments[i.saturating_sub(1)]
    }

    /// The workers active at `step`.
    pub fn workers(&self, step: u64) -> &[u32] {
        &self.segment(step).workers
    }

    /// The minibatch position worker `worker` reads at `step`, if it is active then.
    pub fn position(&self, worker: u32, step: u64) -> Option<u64> {
        let segment = self.segment(step);
        let rank = segment.workers.iter().position(|&w| w == worker)? as u64;
        let p = segment.workers.len() as u64;
        Some(segment.base + (step - segment.from_step) * p + rank)
    }

    /// Minibatch positions read once `step` is done.
    pub fn positions_done(&self, step: u64) -> u64 {
        let segment = self.segment(step);
        segment.base + (step + 1 - segment.from_step) * segment.workers.len() as u64
    }

    /// Removes `worker` after step `step`: from `step + 1` on it is not active. Returns whether
    /// it was active then (removing an inactive worker, or at a step before the last change,
    /// changes nothing).
    pub fn remove_after(&mut self, worker: u32, step: u64) -> bool {
        let last = self.segments.last().map_or(0, |s| s.from_step);
        if step + 1 < last {
            return false;
        }
        let mut workers = self.workers(step + 1).to_vec();
        let before = workers.len();
        workers.retain(|&w| w != worker);
        if workers.len() == before || workers.is_empty() {
            return false;
        }
        let base = self.positions_done(step);
        self.segments.retain(|s| s.from_step <= step);
        self.segments.push(FleetSegment {
            from_step: step + 1,
            base,
            workers,
        });
        true
    }
}

/// The shuffled order of the `batches` minibatches in `epoch`, shared by all workers: epoch `e`
/// covers stream positions `e·M .. (e+1)·M` (see [`Fleet::position`]).
pub fn batch_order(seed: u64, epoch: u64, batches: u32) -> Vec<u32> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut order: Vec<u32> = (0..batches).collect();
    let mix = seed ^ epoch.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = rand::rngs::StdRng::seed_from_u64(mix);
    order.shuffle(&mut rng);
    order
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
    fn fleet_positions_stay_contiguous_across_removals() {
        let mut fleet = Fleet::new(4);
        let mut seen = Vec::new();
        for t in 0..10u64 {
            if t == 3 {
                assert!(fleet.remove_after(1, 2));
                assert!(!fleet.remove_after(1, 2), "already removed");
            }
            if t == 6 {
                assert!(fleet.remove_after(3, 5));
            }
            let mut step: Vec<u64> = (0..4).filter_map(|w| fleet.position(w, t)).collect();
            step.sort_unstable();
            assert_eq!(step.len(), fleet.workers(t).len());
            seen.extend(step);
            assert_eq!(fleet.positions_done(t), seen.len() as u64);
        }
        assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>());
        assert_eq!(fleet.workers(2), &[0, 1, 2, 3]);
        assert_eq!(fleet.workers(3), &[0, 2, 3]);
        assert_eq!(fleet.workers(9), &[0, 2]);
        assert_eq!(fleet.position(1, 5), None);
        assert!(!fleet.remove_after(0, 9) || fleet.workers(10) == [2]);
        let mut last = Fleet::new(1);
        assert!(!last.remove_after(0, 0), "the last worker stays");
    }

    #[test]
    fn positions_cover_each_epoch_once() {
        let (p, m) = (4u32, 10u64);
        let fleet = Fleet::new(p);
        let seen: Vec<u64> = (0..5u64)
            .flat_map(|t| {
                (0..p)
                    .filter_map(|w| fleet.position(w, t))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        // Two epochs of 10 minibatches end with step 4 (positions 16..20).
        assert!(fleet.positions_done(3) < 2 * m);
        assert!(fleet.positions_done(4) >= 2 * m);
    }
}
