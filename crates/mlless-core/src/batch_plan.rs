//! How a step's global batch is shared by the fleet: [`BatchPlan`].
//!
//! Minibatches are objects of a fixed size, cut at prepare time; the fleet is chosen at train
//! time, and may shrink while it trains (scale-in). If every worker read one minibatch a step,
//! the global batch (the samples a step averages over) would grow with the fleet — 60 workers
//! over minibatches of 1,000 rows take steps of 60,000 rows, two an epoch on a9a, and end far
//! from where 4 workers end after the same epochs. So a job holds its global batch instead: each
//! minibatch is cut into `slices` equal parts (by rows), and a step reads `step_slices` of them
//! over the fleet, each active worker a run of [`BatchPlan::share`] consecutive ones in the shared
//! stream (`mlless_runtime::fleet`). MLLess set the minibatch per worker by hand as the fleet grew
//! ("B = 12K for 12 workers, 6K for 24, 3K for 48"); this does it for every fleet size.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// The global batch of [`BatchPlan::of`] when `--global-batch` is not given, in minibatches of
/// the data set: the shape every model's defaults were tuned at (4 workers reading a minibatch
/// each), whatever the fleet.
pub const DEFAULT_GLOBAL_BATCHES: u64 = 4;

/// The number of slices [`BatchPlan::of`] aims to give each worker a step, so that the global
/// batch stays within about an eighth of its size when scale-in removes a worker (a worker
/// reading one slice could only go from a share of 1 to 2, doubling it).
pub const SLICES_PER_WORKER: u64 = 4;

/// The fewest rows a worker should read a step: below it a worker's step is its exchange, which
/// grows with the fleet, while the compute it saves by sharing the global batch more finely is
/// a few microseconds (sparse LR computes about 0.3 µs a row on one core; `mlless bench
/// compute`), so more workers make no step faster and cost more.
pub const MIN_WORKER_ROWS: f64 = 100.0;

/// How the fleet shares a step's global batch: each training minibatch cut into `slices`
/// parts by rows, and `step_slices` of them read a step over all the workers. A worker's
/// [`share`](BatchPlan::share) is a run of consecutive slices, so with `slices` = 4 and a share
/// of 4 a worker reads exactly one whole minibatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchPlan {
    /// Parts (by rows) that each training minibatch is cut into; 1: whole minibatches.
    pub slices: u32,
    /// Slices that one step reads over the whole fleet: the global batch in slices.
    pub step_slices: u64,
}

impl BatchPlan {
    /// Whole minibatches, one a worker a step: what jobs did before the global batch was held
    /// (a spec without a plan), and what ADMM's shards and k-means' Lloyd passes read.
    pub fn whole(workers: u32) -> Self {
        Self {
            slices: 1,
            step_slices: u64::from(workers.max(1)),
        }
    }

    /// The plan that gives `workers` workers a global batch of about `global_batch` samples over
    /// minibatches of `batch_size` rows, the smallest of which has `min_rows` rows (no slice is
    /// left empty): minibatches cut so that each worker reads about [`SLICES_PER_WORKER`]
    /// slices a step.
    pub fn of(global_batch: u64, workers: u32, batch_size: u32, min_rows: u32) -> Self {
        let (g, p, b) = (
            global_batch.max(1) as f64,
            f64::from(workers.max(1)),
            f64::from(batch_size.max(1)),
        );
        let slices = (SLICES_PER_WORKER as f64 * p * b / g)
            .round()
            .clamp(1.0, f64::from(min_rows.clamp(1, batch_size.max(1))));
        let step_slices = (g * slices / b).round().max(1.0);
        Self {
            slices: slices as u32,
            step_slices: step_slices as u64,
        }
    }

    /// The slices each of `workers` active workers reads a step: the step's slices shared out,
    /// at least one.
    pub fn share(&self, workers: usize) -> u64 {
        share_of(self.step_slices, workers)
    }

    /// The minibatches (positions in the stream of minibatches, epoch after epoch) and their
    /// slices that stream positions `range` cover, in order.
    pub fn parts(&self, range: Range<u64>) -> Vec<Part> {
        let of = u64::from(self.slices.max(1));
        let mut parts: Vec<Part> = Vec::new();
        for pos in range {
            let (minibatch, slice) = (pos / of, (pos % of) as u32);
            match parts.last_mut() {
                Some(last) if last.minibatch == minibatch => last.slices.end = slice + 1,
                _ => parts.push(Part {
                    minibatch,
                    slices: slice..slice + 1,
                    of: self.slices.max(1),
                }),
            }
        }
        parts
    }

    /// The stream positions (slices) of one epoch of `train_batches` minibatches.
    pub fn per_epoch(&self, train_batches: u32) -> u64 {
        u64::from(train_batches) * u64::from(self.slices.max(1))
    }

    /// Steps in an epoch of `train_batches` minibatches with `workers` active workers (at
    /// least 1).
    pub fn steps_per_epoch(&self, train_batches: u32, workers: usize) -> u64 {
        let step = self.share(workers) * workers.max(1) as u64;
        self.per_epoch(train_batches).div_ceil(step).max(1)
    }

    /// What to say when `workers` workers are more than a job over `train_batches` minibatches of
    /// `batch_size` rows can use, `None` when they are not: with whole minibatches (ADMM's
    /// shards, k-means), more workers than minibatches; otherwise a step that covers more than
    /// an epoch, or a share of the global batch below [`MIN_WORKER_ROWS`] rows a worker, naming
    /// the fleet past which more workers stop paying.
    pub fn crowded_fleet_warning(
        &self,
        workers: u32,
        train_batches: u32,
        batch_size: u32,
    ) -> Option<String> {
        if self.slices == 1 && self.share(workers as usize) == 1 {
            return (workers > train_batches).then(|| {
                format!(
                    "--workers {workers} is more than the {train_batches} training minibatches \
                     of the data set: every step reads some minibatch more than once and \
                     covers more than an epoch; at most {train_batches} workers, or data \
                     prepared with a smaller --batch-size, would not"
                )
            });
        }
        let global = self.global_batch(workers as usize, batch_size);
        let step = self.share(workers as usize) * u64::from(workers.max(1));
        if step > self.per_epoch(train_batches) {
            return Some(format!(
                "a step of {global:.0} samples covers more than an epoch of the training set \
                 ({train_batches} minibatches of up to {batch_size} rows): every step reads some \
                 rows more than once; give a --global-batch below the training set's size"
            ));
        }
        let rows = global / f64::from(workers.max(1));
        (rows < MIN_WORKER_ROWS).then(|| {
            let best = ((global / MIN_WORKER_ROWS).floor() as u64).max(1);
            format!(
                "--workers {workers} share a global batch of {global:.0} samples: {rows:.0} rows \
                 a worker a step, too few for more workers to make a step faster (its exchange \
                 outweighs the compute they share); past {best} workers more stop paying: use \
                 fewer workers, or a larger --global-batch"
            )
        })
    }

    /// The samples a step of `workers` workers reads over minibatches of `batch_size` rows.
    pub fn global_batch(&self, workers: usize, batch_size: u32) -> f64 {
        (self.share(workers) * workers.max(1) as u64) as f64 * f64::from(batch_size)
            / f64::from(self.slices.max(1))
    }
}

/// Consecutive slices of one minibatch that a worker reads ([`BatchPlan::parts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The minibatch's position in the stream of minibatches (epoch `e` covers positions
    /// `e·M .. (e+1)·M` of `M` minibatches, in that epoch's shuffled order).
    pub minibatch: u64,
    /// The slices read, of [`Part::of`].
    pub slices: Range<u32>,
    /// The slices the minibatch is cut into.
    pub of: u32,
}

impl Part {
    /// The rows of these slices in a minibatch of `rows` rows: slice `j` is rows
    /// `j·rows/of .. (j+1)·rows/of`.
    pub fn rows(&self, rows: usize) -> Range<usize> {
        let row = |slice: u32| (u64::from(slice) * rows as u64 / u64::from(self.of)) as usize;
        row(self.slices.start)..row(self.slices.end)
    }

    /// Whether these are all the slices of the minibatch.
    pub fn is_whole(&self) -> bool {
        self.slices == (0..self.of)
    }
}

/// The slices each of `workers` workers reads of a step of `step_slices`: the nearest whole
/// share, at least one ([`BatchPlan::share`]).
pub fn share_of(step_slices: u64, workers: usize) -> u64 {
    let p = workers.max(1) as u64;
    ((step_slices + p / 2) / p).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_workers_read_a_whole_minibatch_each_as_before() {
        let plan = BatchPlan::of(4000, 4, 1000, 1000);
        assert_eq!(
            plan,
            BatchPlan {
                slices: 4,
                step_slices: 16
            }
        );
        assert_eq!(plan.share(4), 4);
        assert_eq!(plan.global_batch(4, 1000), 4000.0);
        assert_eq!(plan.steps_per_epoch(100, 4), 25);
    }

    #[test]
    fn the_global_batch_holds_whatever_the_fleet() {
        for p in [1u32, 2, 3, 4, 7, 16, 60, 256] {
            let plan = BatchPlan::of(4000, p, 1000, 1000);
            let g = plan.global_batch(p as usize, 1000);
            assert!(
                (g - 4000.0).abs() <= 4000.0 * 0.07,
                "P = {p}: {plan:?} reads {g} a step"
            );
            // Each worker reads about SLICES_PER_WORKER slices (fewer where a minibatch cannot
            // be cut finer).
            assert!(
                (3..=5).contains(&plan.share(p as usize)),
                "P = {p}: {plan:?}"
            );
        }
        // After scale-in from 16 to 12 and 11 workers, within an eighth.
        let plan = BatchPlan::of(4000, 16, 1000, 1000);
        for p in [15usize, 12, 11, 9] {
            let g = plan.global_batch(p, 1000);
            assert!((g - 4000.0).abs() <= 4000.0 / 8.0, "{p} workers: {g}");
        }
    }

    #[test]
    fn slices_are_never_finer_than_the_smallest_minibatch() {
        // 256 workers over minibatches of 256 rows, the smallest of 49: slices of 49 parts.
        let plan = BatchPlan::of(1024, 256, 256, 49);
        assert_eq!(plan.slices, 49);
        assert_eq!(plan.share(256), 1);
        // The global batch grows only as far as the minibatches cannot be cut finer.
        assert!(plan.global_batch(256, 256) < 1400.0);
    }

    #[test]
    fn a_crowded_fleet_is_warned_of_with_the_fleet_that_pays() {
        let plan = BatchPlan::of(4000, 60, 1000, 1000);
        let warning = plan
            .crowded_fleet_warning(60, 29, 1000)
            .expect("60 workers over 4,000 samples are warned of");
        assert!(warning.contains("past 40 workers"), "{warning}");
        let plan = BatchPlan::of(4000, 40, 1000, 1000);
        assert_eq!(plan.crowded_fleet_warning(40, 29, 1000), None);
        // Whole minibatches: more workers than minibatches.
        let whole = BatchPlan::whole(30);
        assert!(
            whole
                .crowded_fleet_warning(30, 29, 1000)
                .is_some_and(|w| w.contains("more than the 29 training minibatches"))
        );
        assert_eq!(
            BatchPlan::whole(29).crowded_fleet_warning(29, 29, 1000),
            None
        );
    }

    #[test]
    fn parts_cut_minibatches_into_equal_row_ranges() {
        let plan = BatchPlan {
            slices: 4,
            step_slices: 16,
        };
        let parts = plan.parts(6..11);
        assert_eq!(
            parts
                .iter()
                .map(|p| (p.minibatch, p.slices.clone()))
                .collect::<Vec<_>>(),
            [(1, 2..4), (2, 0..3)]
        );
        assert_eq!(parts[0].rows(10), 5..10);
        assert_eq!(parts[1].rows(10), 0..7);
        assert!(!parts[1].is_whole());
        assert!(plan.parts(8..12)[0].is_whole());
        // Every row of a minibatch is in exactly one slice, however it divides.
        let all: Vec<usize> = plan.parts(0..4).iter().flat_map(|p| p.rows(7)).collect();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
    }

    #[test]
    fn whole_minibatches_are_one_a_worker() {
        let plan = BatchPlan::whole(8);
        assert_eq!(plan.share(8), 1);
        assert_eq!(plan.per_epoch(30), 30);
        assert_eq!(plan.steps_per_epoch(30, 8), 4);
        assert_eq!(plan.global_batch(8, 500), 4000.0);
    }
}
