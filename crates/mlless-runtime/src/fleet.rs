//! The fleet over the steps of a job, and the order in which it reads the minibatches.

use serde::{Deserialize, Serialize};

/// The active workers over the steps of a job: all `P` at first, fewer after each scale-in
/// removal. Every worker and the supervisor keep the same fleet, since they all learn of a
/// removal at the same step (it travels in that step's updates).
///
/// Positions in the endless stream of minibatches stay contiguous across a change: from step
/// `t0` on, with the active workers `w_0 < … < w_{p−1}`, worker `w_r` reads position
/// `base + (t − t0)·p + r`, where `base` is the number of positions read before `t0`.
///
/// Deserialisation (a checkpoint) checks what the methods rely on: at least one segment, the
/// first from step 0 and position 0, later ones starting at ascending steps with the positions
/// read before them, each with workers ascending and none empty.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FleetParts")]
pub struct Fleet {
    segments: Vec<FleetSegment>,
}

/// The serialised form of a [`Fleet`], checked before it becomes one.
#[derive(Deserialize)]
struct FleetParts {
    segments: Vec<FleetSegment>,
}

impl TryFrom<FleetParts> for Fleet {
    type Error = String;

    fn try_from(parts: FleetParts) -> Result<Self, String> {
        let segments = parts.segments;
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
        for s in &segments {
            if s.workers.is_empty() || s.workers.windows(2).any(|w| w[1] <= w[0]) {
                return Err(format!(
                    "a fleet segment from step {} with workers {:?}",
                    s.from_step, s.workers
                ));
            }
        }
        for pair in segments.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            let expected = (b.from_step.checked_sub(a.from_step))
                .filter(|&steps| steps > 0)
                .and_then(|steps| steps.checked_mul(a.workers.len() as u64))
                .and_then(|read| read.checked_add(a.base));
            if expected != Some(b.base) {
                return Err(format!(
                    "a fleet segment from step {} at position {} after one from step {} at \
                     position {} with {} workers",
                    b.from_step,
                    b.base,
                    a.from_step,
                    a.base,
                    a.workers.len()
                ));
            }
        }
        Ok(Self { segments })
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
    fn deserialised_fleets_are_consistent() {
        let mut fleet = Fleet::new(4);
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
