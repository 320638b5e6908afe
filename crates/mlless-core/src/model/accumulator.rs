//! The sparse gradient accumulator: the hot path of every gradient computation.

use crate::sparse::SparseVector;

/// Coordinates per word of the touched bitmap, and words of it per word of its summary.
const WORD: usize = u64::BITS as usize;

/// Accumulates a sparse gradient over a dense scratch of the model's dimension.
///
/// The sums live in a dense `f32` scratch, one per coordinate, and a bitmap marks the touched
/// coordinates (1 bit each: 128 KB for a million parameters, which stays in the L2 cache),
/// with a summary bit per bitmap word. So [`add`](Self::add) is one add and two ORs, with no
/// hashing, no allocation and no chain of dependent loads; and [`take`](Self::take) reads the
/// touched coordinates in ascending order straight from the bitmap (no sort), in
/// O(touched + dim / 4096), resetting each sum it reads.
///
/// Untouched sums hold `-0.0`, the additive identity of every `f32` (`-0.0 + x` is `x`, signed
/// zeros included), so a coordinate's sum has the bits of its values added in the order they
/// came, starting from the first.
///
/// A model that knows beforehand every coordinate its batch will add to (sparse LR: the
/// batch's features and the bias) sums into an empty accumulator with `sum_on_support` (inside
/// this crate) instead: one entry per coordinate of the support,
/// found by its rank in the bitmap, so the sums of a 10,000-row batch over a million features
/// (100k coordinates, 400 KB) stay in the L2 cache instead of being spread over 4 MB, and
/// `take` hands them over as they are. The sums have the same bits either way.
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
    /// The running sum of every coordinate; `-0.0` where untouched since the last take.
    sums: Vec<f32>,
    /// Bit `j % 64` of word `j / 64` is set iff coordinate `j` was touched.
    touched: Vec<u64>,
    /// Bit `w % 64` of word `w / 64` is set iff word `w` of `touched` may be non-zero.
    summary: Vec<u64>,
    /// The sums of a [`sum_on_support`](Self::sum_on_support), until `take` or an `add`;
    /// while it is there, the dense sums and the bitmap are empty.
    pending: Option<SparseVector>,
    /// Scratch of `sum_on_support`: per word of `touched`, the set bits of the words before it.
    ranks: Vec<u32>,
}

impl std::fmt::Debug for GradientAccumulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradientAccumulator")
            .field("dim", &self.sums.len())
            .field("nnz", &self.nnz())
            .finish()
    }
}

impl GradientAccumulator {
    /// An empty accumulator over `dim` coordinates (at most `u32::MAX + 1`, the range of a
    /// [`SparseVector`] index).
    pub fn new(dim: usize) -> Self {
        let words = dim.div_ceil(WORD);
        Self {
            sums: vec![-0.0; dim],
            touched: vec![0; words],
            summary: vec![0; words.div_ceil(WORD)],
            pending: None,
            ranks: Vec::new(),
        }
    }

    /// The dimension of the scratch (the model's number of parameters).
    pub fn dim(&self) -> usize {
        self.sums.len()
    }

    /// Number of coordinates touched since the last [`take`](Self::take) or
    /// [`clear`](Self::clear), in O(touched + dim / 4096).
    pub fn nnz(&self) -> usize {
        if let Some(pending) = &self.pending {
            return pending.nnz();
        }
        self.touched_words()
            .map(|w| self.touched[w].count_ones() as usize)
            .sum()
    }

    /// Whether no coordinate has been touched since the last [`take`](Self::take), in
    /// O(dim / 4096).
    pub fn is_empty(&self) -> bool {
        self.pending.as_ref().is_none_or(SparseVector::is_empty)
            && self.summary.iter().all(|&s| s == 0)
    }

    /// Adds `value` to coordinate `index`.
    ///
    /// # Panics
    /// Panics if `index >= dim()`; models validate their batches before they accumulate.
    #[inline]
    pub fn add(&mut self, index: u32, value: f32) {
        if self.pending.is_some() {
            self.spill();
        }
        let j = index as usize;
        self.sums[j] += value;
        let w = j / WORD;
        self.touched[w] |= 1 << (j % WORD);
        self.summary[w / WORD] |= 1 << (w % WORD);
    }

    /// Returns the accumulated sparse vector (ascending indices, every touched coordinate,
    /// including those whose sum is exactly zero) and resets the accumulator, in
    /// O(touched + dim / 4096).
    pub fn take(&mut self) -> SparseVector {
        if let Some(pending) = self.pending.take() {
            return pending;
        }
        let n = self.nnz();
        let mut indices = Vec::with_capacity(n);
        let mut values = Vec::with_capacity(n);
        self.drain(|j, v| {
            indices.push(j);
            values.push(v);
        });
        SparseVector::from_sorted_unchecked(indices, values)
    }

    /// Discards the accumulated values, in O(touched + dim / 4096).
    pub fn clear(&mut self) {
        self.pending = None;
        self.drain(|_, _| {});
    }

    /// Sums what `fill` adds, at coordinates that the slices of `support` list (in any order,
    /// repeated or not), in one compact entry per coordinate of the support, and keeps the sums
    /// for [`take`](Self::take); returns what `fill` returns. The accumulator must be empty, or
    /// this does nothing and returns `None` (the caller then adds as usual).
    ///
    /// The sums are the ones [`add`](Self::add) would give, to the bit: each starts from
    /// `-0.0` and adds its values in the order `fill` gives them. Every coordinate of the
    /// support is in the result, whether `fill` adds to it or not.
    ///
    /// # Panics
    /// Panics if a coordinate of `support` is not below [`dim`](Self::dim), or if `fill` adds
    /// to a coordinate not in `support`.
    pub(crate) fn sum_on_support<R>(
        &mut self,
        support: &[&[u32]],
        fill: impl FnOnce(&mut SupportSums<'_>) -> R,
    ) -> Option<R> {
        if !self.is_empty() {
            return None;
        }
        self.pending = None;
        let dim = self.sums.len();
        for &index in support.iter().copied().flatten() {
            let j = index as usize;
            assert!(
                j < dim,
                "support index {index} out of range for dimension {dim}"
            );
            self.touched[j / WORD] |= 1 << (j % WORD);
        }
        // The summary of the words just marked, and the rank of each marked word.
        self.ranks.resize(self.touched.len(), 0);
        let mut n = 0_u32;
        for (s, words) in self.touched.chunks(WORD).enumerate() {
            let mut summary = 0_u64;
            for (b, &word) in words.iter().enumerate() {
                if word != 0 {
                    summary |= 1 << b;
                    self.ranks[s * WORD + b] = n;
                    n += word.count_ones();
                }
            }
            self.summary[s] = summary;
        }
        let mut sums = SupportSums {
            touched: &self.touched,
            ranks: &self.ranks,
            values: vec![-0.0; n as usize],
        };
        let result = fill(&mut sums);
        let values = sums.values;
        let mut indices = Vec::with_capacity(values.len());
        // At most dim <= u32::MAX + 1 coordinates, so an index fits a u32.
        take_marks(&mut self.summary, &mut self.touched, |j| {
            indices.push(j as u32)
        });
        self.pending = Some(SparseVector::from_sorted_unchecked(indices, values));
        Some(result)
    }

    /// Moves the sums of a [`sum_on_support`](Self::sum_on_support) into the dense sums and the
    /// bitmap, where `add` goes on from them.
    #[cold]
    fn spill(&mut self) {
        if let Some(pending) = self.pending.take() {
            for (index, value) in pending.iter() {
                let j = index as usize;
                // The dense sum is -0.0, and -0.0 + value is value.
                self.sums[j] = value;
                let w = j / WORD;
                self.touched[w] |= 1 << (j % WORD);
                self.summary[w / WORD] |= 1 << (w % WORD);
            }
        }
    }

    /// The words of `touched` that the summary marks, ascending.
    fn touched_words(&self) -> impl Iterator<Item = usize> + '_ {
        self.summary
            .iter()
            .enumerate()
            .flat_map(|(s, &bits)| set_bits(bits).map(move |b| s * WORD + b))
    }

    /// Passes every touched coordinate and its sum to `f`, ascending, and resets them.
    fn drain(&mut self, mut f: impl FnMut(u32, f32)) {
        let sums = &mut self.sums;
        take_marks(&mut self.summary, &mut self.touched, |j| {
            // At most dim <= u32::MAX + 1 coordinates, so an index fits a u32.
            f(j as u32, std::mem::replace(&mut sums[j], -0.0));
        });
    }
}

/// Passes every coordinate that `touched` marks (in the words `summary` marks) to `f`,
/// ascending, and clears the marks of both.
#[inline]
fn take_marks(summary: &mut [u64], touched: &mut [u64], mut f: impl FnMut(usize)) {
    for (s, marks) in summary.iter_mut().enumerate() {
        for b in set_bits(std::mem::take(marks)) {
            let w = s * WORD + b;
            for bit in set_bits(std::mem::take(&mut touched[w])) {
                f(w * WORD + bit);
            }
        }
    }
}

/// The compact sums of [`GradientAccumulator::sum_on_support`]: coordinate `j` of the support
/// has the entry of its rank among the support's coordinates, the set bits of the bitmap below
/// it (the count of the words before its word, and of its word's bits below it).
pub(crate) struct SupportSums<'a> {
    touched: &'a [u64],
    ranks: &'a [u32],
    values: Vec<f32>,
}

impl SupportSums<'_> {
    /// The entry of coordinate `index`: its rank among the support's coordinates.
    ///
    /// # Panics
    /// Panics if `index` is not in the support.
    #[inline]
    pub(crate) fn entry(&self, index: u32) -> usize {
        let j = index as usize;
        let (w, bit) = (j / WORD, 1_u64 << (j % WORD));
        let word = self.touched[w];
        assert!(word & bit != 0, "index {index} is not in the support");
        self.ranks[w] as usize + (word & (bit - 1)).count_ones() as usize
    }

    /// Adds `value` to the sum of entry `entry` (of [`entry`](Self::entry)).
    #[inline]
    pub(crate) fn add_to_entry(&mut self, entry: usize, value: f32) {
        self.values[entry] += value;
    }

    /// `dense[j]` for every coordinate `j` of the support, in the order of their entries: the
    /// parameters a batch reads, gathered in one ascending sweep (which the hardware
    /// prefetches) instead of one random read of the model a non-zero.
    pub(crate) fn gather(&self, dense: &[f32]) -> Vec<f32> {
        let mut gathered = Vec::with_capacity(self.values.len());
        for (w, &word) in self.touched.iter().enumerate() {
            for bit in set_bits(word) {
                gathered.push(dense[w * WORD + bit]);
            }
        }
        gathered
    }
}

/// The positions of the set bits of `bits`, ascending.
#[inline]
fn set_bits(mut bits: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let b = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            b
        })
    })
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
    fn take_agrees_with_a_reference_sparse_and_dense() {
        let mut rng = StdRng::seed_from_u64(6);
        // Dense, very sparse, sparse, every coordinate, partial last words of both levels.
        for (dim, adds) in [
            (64_u32, 200),
            (1 << 20, 100),
            (1 << 20, 5000),
            (3, 1000),
            (9000, 1000),
            (4097, 20_000),
        ] {
            let pairs: Vec<(u32, f32)> = (0..adds)
                .map(|_| (rng.random_range(0..dim), rng.random_range(-1.0..1.0)))
                .collect();
            let mut acc = GradientAccumulator::new(dim as usize);
            let mut want: BTreeMap<u32, f32> = BTreeMap::new();
            for &(i, v) in &pairs {
                acc.add(i, v);
                // The first value, then the others added in order: the accumulator's sum.
                want.entry(i).and_modify(|s| *s += v).or_insert(v);
            }
            assert_eq!(acc.nnz(), want.len(), "dim {dim}, {adds} adds");
            let got = acc.take();
            let bits = |pairs: Vec<(u32, f32)>| -> Vec<(u32, u32)> {
                pairs.into_iter().map(|(i, v)| (i, v.to_bits())).collect()
            };
            assert_eq!(
                bits(got.iter().collect()),
                bits(want.into_iter().collect()),
                "dim {dim}, {adds} adds"
            );
            assert!(acc.take().is_empty());
        }
    }

    #[test]
    fn zero_sums_are_kept_as_touched_with_their_sign() {
        let mut acc = GradientAccumulator::new(4);
        acc.add(1, 1.0);
        acc.add(1, -1.0);
        acc.add(2, -0.0);
        acc.add(3, -0.0);
        acc.add(3, 0.0);
        let g = acc.take();
        assert_eq!(g.indices(), &[1, 2, 3]);
        let bits: Vec<u32> = g.values().iter().map(|v| v.to_bits()).collect();
        // A lone -0.0 stays -0.0 (its sum starts from it); -0.0 + 0.0 is 0.0.
        assert_eq!(
            bits,
            [0.0_f32.to_bits(), (-0.0_f32).to_bits(), 0.0_f32.to_bits()]
        );
        // Reset sums are the identity again: a lone 0.0 is 0.0.
        acc.add(2, 0.0);
        assert_eq!(acc.take().values()[0].to_bits(), 0.0_f32.to_bits());
    }

    #[test]
    fn clear_discards() {
        let mut acc = GradientAccumulator::new(8);
        acc.add(3, 1.0);
        acc.clear();
        assert!(acc.is_empty());
        assert_eq!(acc.nnz(), 0);
        acc.add(4, 1.0);
        let g = acc.take();
        assert_eq!(g.indices(), &[4]);
        assert_eq!(g.values(), &[1.0]);
        // The cleared coordinate starts from zero again.
        acc.add(3, 2.0);
        assert_eq!(acc.take().values(), &[2.0]);
    }

    #[test]
    fn sums_on_a_support_are_the_sums_of_adds() {
        let mut rng = StdRng::seed_from_u64(8);
        for (dim, adds) in [(1 << 20, 3000), (5000, 20_000), (64, 10), (70, 200)] {
            let pairs: Vec<(u32, f32)> = (0..adds)
                .map(|_| (rng.random_range(0..dim), rng.random_range(-1.0..1.0)))
                .collect();
            let mut support: Vec<u32> = pairs.iter().map(|&(i, _)| i).collect();
            // A coordinate of the support that nothing adds to is still in the result.
            support.push(dim - 1);
            let mut plain = GradientAccumulator::new(dim as usize);
            for &(i, v) in &pairs {
                plain.add(i, v);
            }
            plain.add(dim - 1, -0.0);
            let want = plain.take();
            let mut acc = GradientAccumulator::new(dim as usize);
            let got = acc.sum_on_support(&[&support[..10], &support[10..]], |sums| {
                for &(i, v) in &pairs {
                    sums.add_to_entry(sums.entry(i), v);
                }
                7
            });
            assert_eq!(got, Some(7));
            assert_eq!(acc.nnz(), want.nnz());
            assert!(!acc.is_empty());
            let got = acc.take();
            assert_eq!(got.indices(), want.indices(), "dim {dim}");
            let bits =
                |v: &SparseVector| v.values().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "dim {dim}");
            assert!(acc.is_empty());
            assert!(acc.take().is_empty());
        }
    }

    #[test]
    fn adds_after_sums_on_a_support_go_on_from_them() {
        let mut acc = GradientAccumulator::new(300);
        acc.sum_on_support(&[&[5, 200, 5]], |sums| {
            sums.add_to_entry(sums.entry(200), 1.0);
            sums.add_to_entry(sums.entry(5), 2.0);
        });
        acc.add(200, 0.5);
        acc.add(7, 1.0);
        let g = acc.take();
        assert_eq!(g.indices(), &[5, 7, 200]);
        assert_eq!(g.values(), &[2.0, 1.0, 1.5]);
        // Not empty: nothing is done, the caller adds as usual.
        acc.add(1, 1.0);
        assert_eq!(acc.sum_on_support(&[&[2]], |_| ()), None);
        assert_eq!(acc.take().indices(), &[1]);
        // Cleared, the sums are gone.
        acc.sum_on_support(&[&[3]], |sums| sums.add_to_entry(sums.entry(3), 1.0));
        acc.clear();
        assert!(acc.is_empty());
        acc.add(3, 4.0);
        assert_eq!(acc.take().values(), &[4.0]);
    }

    #[test]
    #[should_panic(expected = "not in the support")]
    fn an_add_outside_the_support_panics() {
        let mut acc = GradientAccumulator::new(300);
        acc.sum_on_support(&[&[5, 200]], |sums| sums.add_to_entry(sums.entry(6), 1.0));
    }

    #[test]
    fn the_last_coordinate_of_a_large_scratch() {
        let dim = (1 << 22) + 5;
        let mut acc = GradientAccumulator::new(dim);
        let last = dim as u32 - 1;
        acc.add(last, 1.5);
        acc.add(0, 1.0);
        acc.add(4096, 1.0);
        let g = acc.take();
        assert_eq!(g.indices(), &[0, 4096, last]);
        assert!(acc.is_empty());
        assert!(GradientAccumulator::new(0).take().is_empty());
    }
}
