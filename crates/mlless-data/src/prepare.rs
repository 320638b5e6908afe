//! Pure building blocks of `prepare`: shuffle, train/test split, minibatching and min-max
//! normalisation as map-reduce pieces.
//!
//! Normalisation over function invocations: each map builds a [`FeatureRange`] of its partition
//! ([`FeatureRange::observe`]), the reduce [merges](FeatureRange::merge) them, and a second map
//! [applies](FeatureRange::apply) the merged range (or the manifest's [`Normalization`]) to each
//! batch. Merging is associative and commutative, so any partitioning gives the same range as
//! one pass over all rows.

use mlless_core::{Batch, RatingBatch, SparseBatch};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::manifest::Normalization;
use crate::parse::Parsed;

/// Why data cannot be split or batched as asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PrepareError {
    /// The test (or validation) fraction is not strictly between 0 and 1.
    #[error("a held-out fraction must be strictly between 0 and 1, got {0}")]
    TestFraction(f64),
    /// The split would leave one side empty (training and test, or training and validation).
    #[error(
        "holding out a fraction of {fraction} of {samples} samples leaves {train} and {test}; \
         both sides need at least one"
    )]
    EmptySplit {
        /// Samples to split.
        samples: usize,
        /// The test fraction asked for.
        fraction: f64,
        /// Training samples the split would leave.
        train: usize,
        /// Test samples the split would leave.
        test: usize,
    },
    /// A batch size of 0.
    #[error("batch size must be at least 1")]
    ZeroBatchSize,
}

/// A uniformly random permutation of `0..n` for `seed` (Fisher-Yates).
fn permutation(n: usize, seed: u64) -> Vec<u32> {
    assert!(u32::try_from(n).is_ok(), "at most 2^32 samples");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    order
}

fn gather_rows(rows: &SparseBatch, order: &[u32]) -> SparseBatch {
    let nnz: usize = order
        .iter()
        .map(|&r| (rows.offsets[r as usize + 1] - rows.offsets[r as usize]) as usize)
        .sum();
    let mut out = SparseBatch {
        labels: Vec::with_capacity(order.len()),
        offsets: Vec::with_capacity(order.len() + 1),
        indices: Vec::with_capacity(nnz),
        values: Vec::with_capacity(nnz),
    };
    out.offsets.push(0);
    for &r in order {
        let (label, indices, values) = rows.row(r as usize);
        out.push_row(label, indices, values);
    }
    out
}

fn gather_ratings(ratings: &RatingBatch, order: &[u32]) -> RatingBatch {
    let pick = |v: &[_]| order.iter().map(|&k| v[k as usize]).collect();
    RatingBatch {
        users: pick(&ratings.users),
        items: pick(&ratings.items),
        ratings: order.iter().map(|&k| ratings.ratings[k as usize]).collect(),
    }
}

/// The samples of `parsed` at `order`, with the same schema (features, labels, cardinalities).
fn gather(parsed: &Parsed, order: &[u32]) -> Parsed {
    match parsed {
        Parsed::Sparse {
            rows,
            features,
            label_map,
            labels,
        } => Parsed::Sparse {
            rows: gather_rows(rows, order),
            features: *features,
            label_map: *label_map,
            labels: labels.clone(),
        },
        Parsed::Ratings {
            ratings,
            users,
            items,
        } => Parsed::Ratings {
            ratings: gather_ratings(ratings, order),
            users: *users,
            items: *items,
        },
    }
}

/// Shuffles the samples with `seed`.
pub fn shuffle(parsed: Parsed, seed: u64) -> Parsed {
    let order = permutation(parsed.samples(), seed);
    gather(&parsed, &order)
}

/// Shuffles the samples with `seed` and splits them into `(train, test)`, with
/// `round(samples · test_fraction)` test samples.
///
/// The two sides together are [`shuffle`]`(parsed, seed)`: training samples first. Both keep
/// the whole input's schema (features, label map, user and item counts), so ids stay valid.
/// Errors if `test_fraction` is not strictly between 0 and 1, or if either side would be empty.
pub fn shuffle_split(
    parsed: Parsed,
    test_fraction: f64,
    seed: u64,
) -> Result<(Parsed, Parsed), PrepareError> {
    let train = split_point(parsed.samples(), test_fraction)?;
    let order = permutation(parsed.samples(), seed);
    let (train_order, test_order) = order.split_at(train);
    Ok((gather(&parsed, train_order), gather(&parsed, test_order)))
}

/// Splits the samples, in their order, into `(head, tail)` with `round(samples · fraction)`
/// samples in the tail: how the validation set is held out of an already shuffled training
/// set. Both keep the whole input's schema. Errors as [`shuffle_split`] does.
pub fn split_tail(parsed: Parsed, fraction: f64) -> Result<(Parsed, Parsed), PrepareError> {
    let head = split_point(parsed.samples(), fraction)?;
    let order: Vec<u32> = (0..parsed.samples() as u32).collect();
    let (head_order, tail_order) = order.split_at(head);
    Ok((gather(&parsed, head_order), gather(&parsed, tail_order)))
}

/// How many of `samples` stay on the first side when `fraction` of them go to the second
/// (`round(samples · fraction)` go); errors if the fraction is not strictly between 0 and 1 or
/// a side would be empty.
pub fn split_point(samples: usize, fraction: f64) -> Result<usize, PrepareError> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(PrepareError::TestFraction(fraction));
    }
    let tail = (samples as f64 * fraction).round() as usize;
    let head = samples - tail.min(samples);
    if tail == 0 || head == 0 {
        return Err(PrepareError::EmptySplit {
            samples,
            fraction,
            train: head,
            test: tail,
        });
    }
    Ok(head)
}

/// Rows `start..end` of a sparse batch as a batch of its own.
fn slice_rows(rows: &SparseBatch, start: usize, end: usize) -> SparseBatch {
    let (lo, hi) = (rows.offsets[start], rows.offsets[end]);
    SparseBatch {
        labels: rows.labels[start..end].to_vec(),
        offsets: rows.offsets[start..=end].iter().map(|&o| o - lo).collect(),
        indices: rows.indices[lo as usize..hi as usize].to_vec(),
        values: rows.values[lo as usize..hi as usize].to_vec(),
    }
}

/// The minibatches of `parsed`, in order, built one at a time: `batch_size` samples each, the
/// last one possibly fewer. Errors if `batch_size` is 0.
pub fn batches(
    parsed: &Parsed,
    batch_size: u32,
) -> Result<impl Iterator<Item = Batch> + '_, PrepareError> {
    if batch_size == 0 {
        return Err(PrepareError::ZeroBatchSize);
    }
    let size = batch_size as usize;
    let samples = parsed.samples();
    Ok((0..samples).step_by(size).map(move |start| {
        let end = (start + size).min(samples);
        match parsed {
            Parsed::Sparse { rows, .. } => Batch::Sparse(slice_rows(rows, start, end)),
            Parsed::Ratings { ratings, .. } => Batch::Ratings(RatingBatch {
                users: ratings.users[start..end].to_vec(),
                items: ratings.items[start..end].to_vec(),
                ratings: ratings.ratings[start..end].to_vec(),
            }),
        }
    }))
}

/// All minibatches of `parsed` (see [`batches`]). Errors if `batch_size` is 0.
pub fn into_batches(parsed: &Parsed, batch_size: u32) -> Result<Vec<Batch>, PrepareError> {
    Ok(batches(parsed, batch_size)?.collect())
}

/// Per-feature minimum and maximum over the rows observed: the map-reduce state of min-max
/// normalisation.
///
/// Sparse rows have implicit zeros: a feature absent from some observed row has a 0 in its
/// range (so its min is ≤ 0 and its max ≥ 0). Only a feature stored in every observed row has
/// the range of its stored values. A feature never observed in any row has the empty range
/// `min = +inf, max = -inf` until some row is observed, and `[0, 0]` after.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FeatureRange {
    /// Minimum of each feature.
    pub min: Vec<f32>,
    /// Maximum of each feature.
    pub max: Vec<f32>,
    /// Features stored in every row observed so far, ascending; `None` before the first row.
    /// Kept so that observing a batch costs O(its entries), not O(features).
    pub in_every_row: Option<Vec<u32>>,
}

/// Elements of two ascending lists that are in both.
fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

impl FeatureRange {
    /// The range of no rows over `features` features.
    pub fn new(features: u32) -> Self {
        Self {
            min: vec![f32::INFINITY; features as usize],
            max: vec![f32::NEG_INFINITY; features as usize],
            in_every_row: None,
        }
    }

    /// Number of features.
    pub fn features(&self) -> usize {
        self.min.len()
    }

    fn include_zero(&mut self, feature: usize) {
        self.min[feature] = self.min[feature].min(0.0);
        self.max[feature] = self.max[feature].max(0.0);
    }

    /// Extends the range with the rows of `batch`, counting implicit zeros (see the type doc).
    /// Entries with an index ≥ `features` are ignored. Costs O(entries of the batch), plus
    /// O(features) on the first non-empty batch.
    pub fn observe(&mut self, batch: &SparseBatch) {
        if batch.rows() == 0 {
            return;
        }
        let n = self.features();
        for (&i, &v) in batch.indices.iter().zip(&batch.values) {
            if let Some(min) = self.min.get_mut(i as usize) {
                *min = min.min(v);
                self.max[i as usize] = self.max[i as usize].max(v);
            }
        }
        // Features stored in every row of the batch.
        let mut common: Vec<u32> = batch
            .row(0)
            .1
            .iter()
            .copied()
            .filter(|&i| (i as usize) < n)
            .collect();
        for (_, indices, _) in batch.iter_rows().skip(1) {
            if common.is_empty() {
                break;
            }
            common = intersect(&common, indices);
        }
        // Features that were in every row before and are not any more now have a zero.
        match self.in_every_row.take() {
            None => {
                let mut k = 0;
                for f in 0..n {
                    if common.get(k) == Some(&(f as u32)) {
                        k += 1;
                    } else {
                        self.include_zero(f);
                    }
                }
                self.in_every_row = Some(common);
            }
            Some(before) => {
                let now = intersect(&before, &common);
                let mut k = 0;
                for &f in &before {
                    if now.get(k) == Some(&f) {
                        k += 1;
                    } else {
                        self.include_zero(f as usize);
                    }
                }
                self.in_every_row = Some(now);
            }
        }
    }

    /// Merges the range of other rows into this one (the reduce step).
    ///
    /// # Panics
    /// Panics if the two ranges have different numbers of features.
    pub fn merge(&mut self, other: &FeatureRange) {
        assert_eq!(
            self.features(),
            other.features(),
            "FeatureRange::merge: ranges over different numbers of features"
        );
        for (a, b) in self.min.iter_mut().zip(&other.min) {
            *a = a.min(*b);
        }
        for (a, b) in self.max.iter_mut().zip(&other.max) {
            *a = a.max(*b);
        }
        // A feature leaving the intersection is absent from some row of `other` or `self`,
        // whose range therefore already holds its zero.
        self.in_every_row = match (self.in_every_row.take(), &other.in_every_row) {
            (None, theirs) => theirs.clone(),
            (ours @ Some(_), None) => ours,
            (Some(ours), Some(theirs)) => Some(intersect(&ours, theirs)),
        };
    }

    /// Scales the stored values of `batch` to `(x - min) / (max - min)`; see
    /// [`Normalization::apply`].
    pub fn apply(&self, batch: &mut SparseBatch) {
        scale(&self.min, &self.max, batch);
    }

    /// The normalisation to record in the manifest; features never observed get `[0, 0]`.
    pub fn into_normalization(self) -> Normalization {
        let finite_or_zero = |v: Vec<f32>| -> Vec<f32> {
            v.into_iter()
                .map(|x| if x.is_finite() { x } else { 0.0 })
                .collect()
        };
        Normalization {
            method: "minmax".to_string(),
            min: finite_or_zero(self.min),
            max: finite_or_zero(self.max),
        }
    }
}

impl Normalization {
    /// Scales the stored values of `batch` to `(x - min) / (max - min)`.
    ///
    /// A feature whose range is empty or a single value (max ≤ min) maps to 0. Only stored
    /// entries change: implicit zeros stay zero, which is exact for features whose min is 0
    /// (non-negative sparse data) and an approximation otherwise. Values outside the range
    /// (test data) map outside [0, 1]. Entries with an index beyond the range are left as they
    /// are.
    pub fn apply(&self, batch: &mut SparseBatch) {
        scale(&self.min, &self.max, batch);
    }
}

fn scale(min: &[f32], max: &[f32], batch: &mut SparseBatch) {
    for (&i, v) in batch.indices.iter().zip(batch.values.iter_mut()) {
        let i = i as usize;
        if i >= min.len() || i >= max.len() {
            continue;
        }
        let (lo, hi) = (min[i], max[i]);
        *v = if lo.is_finite() && hi.is_finite() && hi > lo {
            (*v - lo) / (hi - lo)
        } else {
            0.0
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::LabelMap;

    fn sparse(n: usize) -> Parsed {
        let mut rows = SparseBatch::new();
        for r in 0..n {
            // Row r holds feature r % 5 with value r, so rows are identifiable.
            rows.push_row((r % 2) as f32, &[(r % 5) as u32], &[r as f32]);
        }
        Parsed::Sparse {
            rows,
            features: 5,
            label_map: Some(LabelMap {
                negative: -1.0,
                positive: 1.0,
            }),
            labels: None,
        }
    }

    fn ratings(n: usize) -> Parsed {
        let mut b = RatingBatch::default();
        for k in 0..n {
            b.push((k % 3) as u32, (k % 4) as u32, k as f32);
        }
        Parsed::Ratings {
            ratings: b,
            users: 3,
            items: 4,
        }
    }

    fn ids(p: &Parsed) -> Vec<u32> {
        match p {
            Parsed::Sparse { rows, .. } => rows.values.iter().map(|&v| v as u32).collect(),
            Parsed::Ratings { ratings, .. } => ratings.ratings.iter().map(|&v| v as u32).collect(),
        }
    }

    #[test]
    fn shuffle_split_sizes_and_contents() {
        for data in [sparse(100), ratings(100)] {
            let (train, test) = shuffle_split(data.clone(), 0.2, 9).unwrap();
            assert_eq!((train.samples(), test.samples()), (80, 20));
            // Both sides keep the whole input's schema.
            match (&train, &test, &data) {
                (
                    Parsed::Sparse { features: a, .. },
                    Parsed::Sparse { features: b, .. },
                    Parsed::Sparse { features: c, .. },
                ) => {
                    assert_eq!((a, b), (c, c));
                }
                (
                    Parsed::Ratings {
                        users: u1,
                        items: i1,
                        ..
                    },
                    Parsed::Ratings {
                        users: u2,
                        items: i2,
                        ..
                    },
                    Parsed::Ratings { users, items, .. },
                ) => assert_eq!((u1, i1, u2, i2), (users, items, users, items)),
                _ => panic!("kind changed"),
            }
            let mut all = ids(&train);
            all.extend(ids(&test));
            // Together they are the shuffle with the same seed, a permutation of the input.
            assert_eq!(all, ids(&shuffle(data.clone(), 9)));
            assert_ne!(all, ids(&data));
            all.sort_unstable();
            assert_eq!(all, (0..100).collect::<Vec<u32>>());
            // Deterministic per seed, different across seeds.
            let (again, _) = shuffle_split(data.clone(), 0.2, 9).unwrap();
            assert_eq!(again, train);
            let (other, _) = shuffle_split(data.clone(), 0.2, 10).unwrap();
            assert_ne!(other, train);
        }
        // Rows keep their labels and entries.
        let (train, _) = shuffle_split(sparse(10), 0.5, 1).unwrap();
        let Parsed::Sparse {
            rows,
            features,
            label_map,
            ..
        } = train
        else {
            panic!()
        };
        assert_eq!(features, 5);
        assert!(label_map.is_some());
        for (label, idx, val) in rows.iter_rows() {
            let r = val[0] as usize;
            assert_eq!((label, idx), ((r % 2) as f32, &[(r % 5) as u32][..]));
        }
    }

    #[test]
    fn shuffle_split_errors() {
        for f in [0.0, 1.0, -0.1, 1.5, f64::NAN] {
            assert!(matches!(
                shuffle_split(sparse(10), f, 0),
                Err(PrepareError::TestFraction(_))
            ));
        }
        assert!(matches!(
            shuffle_split(sparse(10), 0.01, 0),
            Err(PrepareError::EmptySplit {
                train: 10,
                test: 0,
                ..
            })
        ));
        assert!(matches!(
            shuffle_split(sparse(10), 0.99, 0),
            Err(PrepareError::EmptySplit {
                train: 0,
                test: 10,
                ..
            })
        ));
        assert!(shuffle_split(sparse(2), 0.5, 0).is_ok());
    }

    #[test]
    fn batches_cover_the_data_in_order() {
        let data = sparse(23);
        let batches = into_batches(&data, 5).unwrap();
        assert_eq!(
            batches.iter().map(Batch::samples).collect::<Vec<_>>(),
            vec![5, 5, 5, 5, 3]
        );
        let mut joined = SparseBatch::new();
        for b in &batches {
            let Batch::Sparse(b) = b else { panic!() };
            crate::codec::check_batch(&Batch::Sparse(b.clone())).unwrap();
            for (l, i, v) in b.iter_rows() {
                joined.push_row(l, i, v);
            }
        }
        let Parsed::Sparse { rows, .. } = &data else {
            panic!()
        };
        assert_eq!(&joined, rows);

        let r = into_batches(&ratings(7), 3).unwrap();
        assert_eq!(
            r.iter().map(Batch::samples).collect::<Vec<_>>(),
            vec![3, 3, 1]
        );
        let Batch::Ratings(last) = &r[2] else {
            panic!()
        };
        assert_eq!(last.iter().collect::<Vec<_>>(), vec![(0, 2, 6.0)]);

        assert_eq!(into_batches(&data, 0), Err(PrepareError::ZeroBatchSize));
        assert_eq!(into_batches(&data, 100).unwrap().len(), 1);
    }

    fn range_batch() -> SparseBatch {
        // Feature 0 is in every row (values 2..5), 1 in some (negative), 2 in some (positive),
        // 3 in none; feature 4 is out of range for a 4-feature range.
        let mut b = SparseBatch::new();
        b.push_row(0.0, &[0, 1], &[2.0, -1.0]);
        b.push_row(1.0, &[0, 2], &[5.0, 4.0]);
        b.push_row(0.0, &[0, 1, 2, 4], &[3.0, -3.0, 1.0, 9.0]);
        b.push_row(1.0, &[0, 2], &[4.0, 2.0]);
        b
    }

    #[test]
    fn feature_range_counts_implicit_zeros() {
        let mut range = FeatureRange::new(4);
        range.observe(&SparseBatch::new()); // no rows: no change
        assert_eq!(range, FeatureRange::new(4));
        range.observe(&range_batch());
        assert_eq!(range.min, vec![2.0, -3.0, 0.0, 0.0]);
        assert_eq!(range.max, vec![5.0, 0.0, 4.0, 0.0]);
        assert_eq!(range.in_every_row, Some(vec![0]));

        let mut b = range_batch();
        range.apply(&mut b);
        assert_eq!(
            b.values,
            vec![
                0.0,
                2.0 / 3.0,
                1.0,
                1.0,
                1.0 / 3.0,
                0.0,
                0.25,
                9.0,
                2.0 / 3.0,
                0.5
            ]
        );

        let norm = range.clone().into_normalization();
        assert_eq!(norm.method, "minmax");
        let mut c = range_batch();
        norm.apply(&mut c);
        assert_eq!(c, b);
        // A never-observed range normalises to [0, 0] and maps everything to 0.
        let empty = FeatureRange::new(2).into_normalization();
        assert_eq!((empty.min, empty.max), (vec![0.0, 0.0], vec![0.0, 0.0]));
    }

    #[test]
    fn map_reduce_over_partitions_equals_one_pass() {
        // Pseudo-random rows; feature 0 stored in every row, so its range has no zero.
        let mut all = SparseBatch::new();
        let mut x = 12345u64;
        let mut next = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u32
        };
        for row in 0..200 {
            // Feature 1 is in each of the first 60 rows, so early partitions have it in every
            // row and merging must drop it from `in_every_row`.
            let mut idx: Vec<u32> = (1..30)
                .filter(|&f| (f == 1 && row < 60) || next() % 3 == 0)
                .collect();
            idx.insert(0, 0);
            let vals: Vec<f32> = idx
                .iter()
                .map(|_| (next() % 1000) as f32 / 10.0 + 1.0)
                .collect();
            all.push_row(0.0, &idx, &vals);
        }
        let mut one_pass = FeatureRange::new(30);
        one_pass.observe(&all);
        assert!(one_pass.min[0] >= 1.0);
        assert_eq!(one_pass.in_every_row, Some(vec![0]));
        assert_eq!(one_pass.min[1], 0.0);

        for cuts in [
            vec![0, 100, 200],
            vec![0, 1, 57, 58, 150, 200],
            vec![0, 0, 200],
        ] {
            // Map: one range per partition, each observing its rows in several batches.
            let partials: Vec<FeatureRange> = cuts
                .windows(2)
                .map(|w| {
                    let mut r = FeatureRange::new(30);
                    for start in (w[0]..w[1]).step_by(7) {
                        r.observe(&slice_rows(&all, start, (start + 7).min(w[1])));
                    }
                    r
                })
                .collect();
            // Reduce, in both orders.
            let mut forward = FeatureRange::new(30);
            partials.iter().for_each(|p| forward.merge(p));
            let mut backward = FeatureRange::new(30);
            partials.iter().rev().for_each(|p| backward.merge(p));
            assert_eq!(forward, one_pass, "cuts {cuts:?}");
            assert_eq!(backward, one_pass, "cuts {cuts:?}");
        }
    }
}
