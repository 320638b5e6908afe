//! The fleet over the steps of a job, and the order in which it reads the minibatches.

use std::ops::Range;

use mlless_job::BatchPlan;
use serde::{Deserialize, Serialize};

/// The active workers over the steps of a job: all `P` at first, fewer after each scale-in
/// removal. Every worker and the supervisor keep the same fleet, since they all learn of a
/// removal at the same step (it travels in that step's updates).
///
/// A position is a slice of a minibatch in the endless stream of the epochs' shuffled
/// minibatches ([`BatchPlan`]: each minibatch cut into `slices` parts). Positions stay
/// contiguous across a change: from step `t0` on, with the active workers `w_0 < … < w_{p−1}`
/// each reading a share of `k` slices, worker `w_r` reads positions
/// `base + (t − t0)·p·k + r·k` and the `k − 1` after it, where `base` is the number of
/// positions read before `t0`. A segment's share is the plan's step shared by its workers
/// ([`BatchPlan::share`]), so the global batch holds when scale-in removes a worker.
///
/// Deserialisation (a checkpoint) checks what the methods rely on: at least one segment, the
/// first from step 0 and position 0, later ones starting at ascending steps with the positions
/// read before them, each with workers ascending and none empty, and a share of at least one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FleetParts")]
pub struct Fleet {
    segments: Vec<FleetSegment>,
    /// The slices a step reads over the fleet ([`BatchPlan::step_slices`]); 0 in a checkpoint
    /// written before the global batch was held, whose workers read one position a step.
    #[serde(default)]
    step_slices: u64,
}

/// The serialised form of a [`Fleet`], checked before it becomes one.
#[derive(Deserialize)]
struct FleetParts {
    segments: Vec<FleetSegment>,
    #[serde(default)]
    step_slices: u64,
}

impl TryFrom<FleetParts> for Fleet {
    type Error = String;

    fn try_from(parts: FleetParts) -> Result<Self, String> {
        let segments = &parts.segments;
        match segments.first() {
            None => return Err("a fleet without segments".into()),
            Some(first) if first.from_step != 0 || first.base != 0 => {
                return Err(format!(
                    "a fleet starting at step {} position {}",
                    first.from_step, first.base
                ));
            }
            Some(_) => {}
        }
        for s in segments {
            if s.workers.is_empty() || s.workers.windows(2).any(|w| w[1] <= w[0]) || s.share == 0 {
                return Err(format!(
                    "a fleet segment from step {} with workers {:?} reading {} positions each",
                    s.from_step, s.workers, s.share
                ));
            }
        }
        for pair in segments.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let expected = (b.from_step.checked_sub(a.from_step))
                .filter(|&steps| steps > 0)
                .and_then(|steps| steps.checked_mul(a.workers.len() as u64 * a.share))
                .and_then(|read| read.checked_add(a.base));
            if expected != Some(b.base) {
                return Err(format!(
                    "a fleet segment from step {} at position {} after one from step {} at \
                     position {} with {} workers of {} positions",
                    b.from_step,
                    b.base,
                    a.from_step,
                    a.base,
                    a.workers.len(),
                    a.share
                ));
            }
        }
        Ok(Self {
            segments: parts.segments,
            step_slices: parts.step_slices,
        })
    }
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
    /// The positions each of them reads a step.
    #[serde(default = "one_position")]
    pub share: u64,
}

/// The share of a segment in a checkpoint written before shares were kept.
fn one_position() -> u64 {
    1
}

impl Fleet {
    /// All `workers` workers active from step 0, sharing each step's global batch as `plan`
    /// says.
    pub fn new(workers: u32, plan: BatchPlan) -> Self {
        let workers: Vec<u32> = (0..workers).collect();
        Self {
            segments: vec![FleetSegment {
                from_step: 0,
                base: 0,
                share: plan.share(workers.len()),
                workers,
            }],
            step_slices: plan.step_slices,
        }
    }

    /// The share of `workers` active workers: the plan's, or one position for a fleet from a
    /// checkpoint without a plan.
    fn share_of(&self, workers: usize) -> u64 {
        if self.step_slices == 0 {
            return 1;
        }
        mlless_job::batch_plan::share_of(self.step_slices, workers)
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

    /// The positions worker `worker` reads at `step`, if it is active then.
    pub fn positions(&self, worker: u32, step: u64) -> Option<Range<u64>> {
        let segment = self.segment(step);
        let rank = segment.workers.iter().position(|&w| w == worker)? as u64;
        let p = segment.workers.len() as u64;
        let first = segment.base + ((step - segment.from_step) * p + rank) * segment.share;
        Some(first..first + segment.share)
    }

    /// Positions read once `step` is done.
    pub fn positions_done(&self, step: u64) -> u64 {
        let segment = self.segment(step);
        segment.base + (step + 1 - segment.from_step) * segment.workers.len() as u64 * segment.share
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
            share: self.share_of(workers.len()),
            workers,
        });
        true
    }
}

/// The shuffled order of the `batches` minibatches in `epoch`, shared by all workers: epoch `e`
/// covers minibatch positions `e·M .. (e+1)·M` (see [`Fleet::positions`]).
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
    fn deserialised_fleets_are_consistent() {
        let mut fleet = Fleet::new(4, BatchPlan::whole(4));
        assert!(fleet.remove_after(1, 2));
        let json = serde_json::to_value(&fleet).unwrap();
        assert_eq!(
            serde_json::from_value::<Fleet>(json.clone()).unwrap(),
            fleet
        );
        let tamper = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut bad = json.clone();
            edit(&mut bad);
            serde_json::from_value::<Fleet>(bad)
                .unwrap_err()
                .to_string()
        };
        type Edit<'a> = &'a dyn Fn(&mut serde_json::Value);
        let cases: [(&str, Edit); 6] = [
            ("no segments", &|v| v["segments"] = serde_json::json!([])),
            ("late start", &|v| v["segments"][0]["from_step"] = 1.into()),
            ("no workers", &|v| {
                v["segments"][1]["workers"] = serde_json::json!([])
            }),
            ("unsorted", &|v| {
                v["segments"][1]["workers"] = serde_json::json!([3, 0])
            }),
            ("wrong base", &|v| v["segments"][1]["base"] = 11.into()),
            ("same step", &|v| {
                v["segments"][1]["from_step"] = 0.into();
                v["segments"][1]["base"] = 0.into();
            }),
        ];
        for (name, edit) in cases {
            assert!(tamper(edit).contains("fleet"), "{name}");
        }
    }

    #[test]
    fn fleet_positions_stay_contiguous_across_removals() {
        let mut fleet = Fleet::new(4, BatchPlan::whole(4));
        let mut seen = Vec::new();
        for t in 0..10u64 {
            if t == 3 {
                assert!(fleet.remove_after(1, 2));
                assert!(!fleet.remove_after(1, 2), "already removed");
            }
            if t == 6 {
                assert!(fleet.remove_after(3, 5));
            }
            let mut step: Vec<u64> = (0..4)
                .filter_map(|w| fleet.positions(w, t))
                .flatten()
                .collect();
            step.sort_unstable();
            // The global batch of 4 minibatches holds: 3 workers read one each, 2 read two.
            let share = if t < 6 { 1 } else { 2 };
            assert_eq!(step.len(), fleet.workers(t).len() * share, "step {t}");
            seen.extend(step);
            assert_eq!(fleet.positions_done(t), seen.len() as u64);
        }
        assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>());
        assert_eq!(fleet.workers(2), &[0, 1, 2, 3]);
        assert_eq!(fleet.workers(3), &[0, 2, 3]);
        assert_eq!(fleet.workers(9), &[0, 2]);
        assert_eq!(fleet.positions(1, 5), None);
        assert!(!fleet.remove_after(0, 9) || fleet.workers(10) == [2]);
        let mut last = Fleet::new(1, BatchPlan::whole(1));
        assert!(!last.remove_after(0, 0), "the last worker stays");
    }

    #[test]
    fn positions_cover_each_epoch_once() {
        let (p, m) = (4u32, 10u64);
        let fleet = Fleet::new(p, BatchPlan::whole(p));
        let seen: Vec<u64> = (0..5u64)
            .flat_map(|t| {
                (0..p)
                    .filter_map(|w| fleet.positions(w, t).map(|r| r.start))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        // Two epochs of 10 minibatches end with step 4 (positions 16..20).
        assert!(fleet.positions_done(3) < 2 * m);
        assert!(fleet.positions_done(4) >= 2 * m);
    }

    #[test]
    fn shares_cover_the_stream_once_and_hold_the_global_batch_after_a_removal() {
        // 16 slices a step: 4 workers read 4 each, 3 workers 5 each.
        let plan = BatchPlan {
            slices: 4,
            step_slices: 16,
        };
        let mut fleet = Fleet::new(4, plan);
        assert_eq!(fleet.positions(1, 2), Some(36..40));
        let mut seen = Vec::new();
        for t in 0..6u64 {
            if t == 3 {
                assert!(fleet.remove_after(2, 2));
            }
            let mut step: Vec<u64> = (0..4)
                .filter_map(|w| fleet.positions(w, t))
                .flatten()
                .collect();
            step.sort_unstable();
            assert_eq!(step.len(), if t < 3 { 16 } else { 15 }, "step {t}");
            seen.extend(step);
            assert_eq!(fleet.positions_done(t), seen.len() as u64);
        }
        assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>());
        // The shares survive a checkpoint, and a tampered share is refused.
        let json = serde_json::to_value(&fleet).unwrap();
        assert_eq!(
            serde_json::from_value::<Fleet>(json.clone()).unwrap(),
            fleet
        );
        let mut bad = json;
        bad["segments"][1]["share"] = 0.into();
        assert!(serde_json::from_value::<Fleet>(bad).is_err());
        // A fleet of a checkpoint without shares reads one position a worker a step.
        let old = serde_json::json!({
            "segments": [{"from_step": 0, "base": 0, "workers": [0, 1, 2]}]
        });
        let mut old: Fleet = serde_json::from_value(old).unwrap();
        assert_eq!(old.positions(2, 1), Some(5..6));
        assert!(old.remove_after(0, 1));
        assert_eq!(old.positions(2, 2), Some(7..8));
    }
}
