//! The sparse gradient accumulator: the hot path of every gradient computation.

use crate::sparse::SparseVector;

/// One coordinate of the dense scratch: where its entry is, if it has one in this epoch.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    /// The epoch (one per [`GradientAccumulator::take`]) in which `pos` was set; stale otherwise.
    epoch: u32,
    /// Position of the coordinate's entry in `entries`.
    pos: u32,
}

/// A touched coordinate: its index and its running sum.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    index: u32,
    value: f32,
}

/// Up to this many entries `take` uses a comparison sort, above it a radix sort.
const RADIX_THRESHOLD: usize = 256;

/// When at least `dim / DENSE_SCAN_RATIO` coordinates are touched, `take` scans the scratch in
/// order instead of sorting: a branch-free scan step costs a small fraction of a radix-sort step.
const DENSE_SCAN_RATIO: usize = 16;

/// Accumulates a sparse gradient over a dense scratch of the model's dimension.
///
/// [`add`](Self::add) is O(1) with no hashing and no allocation (beyond the amortised growth of
/// the list of touched coordinates, whose capacity is kept across [`take`](Self::take)s): the
/// dense scratch maps a coordinate to its entry in a compact list of touched coordinates, and
/// the sums live in that list. [`take`](Self::take) sorts the compact list (radix sort, O(touched);
/// or, when more than 1/16 of the coordinates were touched, one ordered scan of the scratch)
/// and returns it; the scratch is invalidated by bumping an epoch counter, never cleared.
///
/// ```
/// use mlless_core::GradientAccumulator;
/// let mut acc = GradientAccumulator::new(10);
/// acc.add(7, 1.0);
/// acc.add(2, 0.5);
/// acc.add(7, 1.0);
/// let g = acc.take();
/// assert_eq!(g.indices(), &[2, 7]);
/// assert_eq!(g.values(), &[0.5, 2.0]);
/// assert!(acc.take().is_empty());
/// ```
#[derive(Clone)]
pub struct GradientAccumulator {
    slots: Vec<Slot>,
    /// The touched coordinates, in the order they were first touched (until `take` sorts them).
    entries: Vec<Entry>,
    /// Reused buffer of the radix sort.
    scratch: Vec<Entry>,
    /// Slots whose epoch differs from this one have no entry. Never 0 (the initial slot epoch).
    epoch: u32,
}

impl std::fmt::Debug for GradientAccumulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradientAccumulator")
            .field("dim", &self.slots.len())
            .field("nnz", &self.entries.len())
            .finish()
    }
}

impl GradientAccumulator {
    /// An empty accumulator over `dim` coordinates (at most `u32::MAX + 1`, the range of a
    /// [`SparseVector`] index).
    pub fn new(dim: usize) -> Self {
        Self {
            slots: vec![Slot::default(); dim],
            entries: Vec::new(),
            scratch: Vec::new(),
            epoch: 1,
        }
    }

    /// The dimension of the scratch (the model's number of parameters).
    pub fn dim(&self) -> usize {
        self.slots.len()
    }

    /// Number of coordinates touched since the last [`take`](Self::take) or
    /// [`clear`](Self::clear).
    pub fn nnz(&self) -> usize {
        self.entries.len()
    }

    /// Whether no coordinate has been touched since the last [`take`](Self::take).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds `value` to coordinate `index`.
    ///
    /// # Panics
    /// Panics if `index >= dim()`; models validate their batches before they accumulate.
    #[inline]
    pub fn add(&mut self, index: u32, value: f32) {
        let slot = &mut self.slots[index as usize];
        if slot.epoch == self.epoch {
            self.entries[slot.pos as usize].value += value;
        } else {
            // At most dim <= u32::MAX + 1 entries, so a position fits a u32.
            slot.epoch = self.epoch;
            slot.pos = self.entries.len() as u32;
            self.entries.push(Entry { index, value });
        }
    }

    /// Returns the accumulated sparse vector (ascending indices, every touched coordinate,
    /// including those whose sum is exactly zero) and resets the accumulator, in O(touched).
    pub fn take(&mut self) -> SparseVector {
        let n = self.entries.len();
        let (indices, values) = if n > 0 && n >= self.slots.len() / DENSE_SCAN_RATIO {
            // Dense enough that one sequential scan of the scratch, O(dim) = O(n), beats sorting.
            // Branch-free: write every index, advance only over the touched ones.
            let mut indices = vec![0_u32; n + 1];
            let mut k = 0;
            for (index, slot) in self.slots.iter().enumerate() {
                indices[k] = index as u32;
                k += usize::from(slot.epoch == self.epoch);
            }
            indices.truncate(n);
            let values = indices
                .iter()
                .map(|&i| self.entries[self.slots[i as usize].pos as usize].value)
                .collect();
            (indices, values)
        } else {
            if n <= RADIX_THRESHOLD {
                self.entries.sort_unstable_by_key(|e| e.index);
            } else {
                radix_sort_by_index(&mut self.entries, &mut self.scratch);
            }
            (
                self.entries.iter().map(|e| e.index).collect(),
                self.entries.iter().map(|e| e.value).collect(),
            )
        };
        self.clear();
        SparseVector::from_sorted_unchecked(indices, values)
    }

    /// Discards the accumulated values in O(1) (plus dropping the touched list).
    pub fn clear(&mut self) {
        self.entries.clear();
        if self.epoch == u32::MAX {
            // O(dim), once per ~4 billion takes.
            self.slots.iter_mut().for_each(|s| s.epoch = 0);
            self.epoch = 0;
        }
        self.epoch += 1;
    }

    /// Test hook: jump the epoch counter close to wrapping.
    #[cfg(test)]
    fn jump_counters_to(&mut self, counter: u32) {
        assert!(self.entries.is_empty());
        self.epoch = counter;
        self.slots.iter_mut().for_each(|s| s.epoch = 0);
    }
}

/// Sorts `entries` by index: a stable LSD radix sort, O(n).
///
/// Only the significant bits of the largest index are sorted on, split evenly into digits of
/// at most 11 bits (indices below 2^22 take two passes, below 2^33 three); the histograms of
/// all digits are gathered in one read.
fn radix_sort_by_index(entries: &mut Vec<Entry>, scratch: &mut Vec<Entry>) {
    const MAX_DIGIT_BITS: u32 = 11;
    let max = entries.iter().map(|e| e.index).max().unwrap_or(0);
    let significant = u32::BITS - max.leading_zeros();
    if significant == 0 {
        return;
    }
    let passes = significant.div_ceil(MAX_DIGIT_BITS);
    let digit_bits = significant.div_ceil(passes);
    let mask = (1_u32 << digit_bits) - 1;
    let buckets = 1_usize << digit_bits;
    let mut histograms = vec![0_usize; buckets * passes as usize];
    for e in entries.iter() {
        for pass in 0..passes {
            let digit = (e.index >> (pass * digit_bits)) & mask;
            histograms[pass as usize * buckets + digit as usize] += 1;
        }
    }
    scratch.clear();
    scratch.resize(entries.len(), Entry::default());
    for (pass, offsets) in histograms.chunks_exact_mut(buckets).enumerate() {
        let mut sum = 0;
        for o in offsets.iter_mut() {
            let count = *o;
            *o = sum;
            sum += count;
        }
        let shift = pass as u32 * digit_bits;
        for e in entries.iter() {
            let digit = ((e.index >> shift) & mask) as usize;
            scratch[offsets[digit]] = *e;
            offsets[digit] += 1;
        }
        std::mem::swap(entries, scratch);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn take_sorts_sums_and_resets() {
        let mut acc = GradientAccumulator::new(1000);
        for &(i, v) in &[(900, 1.0), (3, 2.0), (500, -1.0), (3, 0.5), (900, 1.0)] {
            acc.add(i, v);
        }
        assert_eq!(acc.nnz(), 3);
        let g = acc.take();
        assert_eq!(g.indices(), &[3, 500, 900]);
        assert_eq!(g.values(), &[2.5, -1.0, 2.0]);
        assert!(acc.is_empty());
        // The scratch was reset: a new accumulation starts from zero.
        acc.add(500, 4.0);
        let g = acc.take();
        assert_eq!(g.indices(), &[500]);
        assert_eq!(g.values(), &[4.0]);
    }

    #[test]
    fn take_agrees_with_a_reference_above_and_below_the_radix_threshold() {
        let mut rng = StdRng::seed_from_u64(6);
        // Dense scan, comparison sort, radix sort, dense scan again.
        for (dim, adds) in [
            (64_u32, 200),
            (1 << 20, 100),
            (1 << 20, 5000),
            (3, 1000),
            (9000, 1000),
        ] {
            let pairs: Vec<(u32, f32)> = (0..adds)
                .map(|_| (rng.random_range(0..dim), rng.random_range(-1.0..1.0)))
                .collect();
            let mut acc = GradientAccumulator::new(dim as usize);
            let mut want: BTreeMap<u32, f32> = BTreeMap::new();
            for &(i, v) in &pairs {
                acc.add(i, v);
                *want.entry(i).or_default() += v;
            }
            let got = acc.take();
            let want: Vec<(u32, f32)> = want.into_iter().collect();
            assert_eq!(
                got.iter().collect::<Vec<_>>(),
                want,
                "dim {dim}, {adds} adds"
            );
            assert!(acc.take().is_empty());
        }
    }

    #[test]
    fn radix_sort_handles_the_full_index_range() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut entries: Vec<Entry> = (0..3000)
            .map(|k| Entry {
                index: if k % 3 == 0 {
                    u32::MAX - k
                } else {
                    rng.random()
                },
                value: k as f32,
            })
            .collect();
        let mut want: Vec<u32> = entries.iter().map(|e| e.index).collect();
        want.sort_unstable();
        radix_sort_by_index(&mut entries, &mut Vec::new());
        assert_eq!(entries.iter().map(|e| e.index).collect::<Vec<_>>(), want);
    }

    #[test]
    fn zero_sums_are_kept_as_touched() {
        let mut acc = GradientAccumulator::new(4);
        acc.add(1, 1.0);
        acc.add(1, -1.0);
        let g = acc.take();
        assert_eq!(g.indices(), &[1]);
        assert_eq!(g.values(), &[0.0]);
    }

    #[test]
    fn clear_discards() {
        let mut acc = GradientAccumulator::new(8);
        acc.add(3, 1.0);
        acc.clear();
        assert!(acc.is_empty());
        acc.add(4, 1.0);
        let g = acc.take();
        assert_eq!(g.indices(), &[4]);
        assert_eq!(g.values(), &[1.0]);
    }

    #[test]
    fn survives_the_counters_wrapping() {
        let mut acc = GradientAccumulator::new(16);
        acc.jump_counters_to(u32::MAX - 2);
        acc.add(3, 1.0);
        acc.add(4, 1.0);
        acc.add(3, 1.0);
        let g = acc.take();
        assert_eq!(g.indices(), &[3, 4]);
        assert_eq!(g.values(), &[2.0, 1.0]);
        // The epoch wraps over these takes; stale slots must never be mistaken for live ones.
        for round in 0..5 {
            acc.add(7, 1.0);
            acc.add(7, 1.0);
            acc.add(round, 0.5);
            let g = acc.take();
            let mut want = SparseVector::from_pairs(vec![(7, 2.0), (round, 0.5)]);
            if round == 7 {
                want = SparseVector::from_pairs(vec![(7, 2.5)]);
            }
            assert_eq!(g, want, "round {round}");
        }
    }
}
