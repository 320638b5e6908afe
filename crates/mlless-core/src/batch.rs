//! Minibatches: the unit of data a worker reads and a model trains on.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// A minibatch of labelled sparse rows in compressed-sparse-row layout.
///
/// Row `r` has the entries `indices[offsets[r]..offsets[r + 1]]` and the same range of `values`;
/// its label is `labels[r]` (0 or 1 for binary classification).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SparseBatch {
    /// One label per row.
    pub labels: Vec<f32>,
    /// Row boundaries into `indices` and `values`; `rows() + 1` entries, starting at 0.
    pub offsets: Vec<u32>,
    /// Feature indices, ascending within each row.
    pub indices: Vec<u32>,
    /// Feature values, parallel to `indices`.
    pub values: Vec<f32>,
}

impl SparseBatch {
    /// The largest eigenvalue of the rows' second moment `mean(x xᵀ)`, each row `x` with a
    /// constant feature 1 appended for the bias, by `iterations` steps of power iteration over
    /// `dimension` features: how curved a linear model's loss is along its steepest direction
    /// on these rows (for the log loss, at most a quarter of this), which bounds the step a
    /// gradient method can take. 0 for no rows.
    pub fn top_second_moment(&self, dimension: usize, iterations: usize) -> f64 {
        let n = self.rows();
        if n == 0 {
            return 0.0;
        }
        // Power iteration over the features these rows hold, not over all `dimension` of
        // them: a feature no row holds gets nothing in the first product and stays 0 after, so
        // the result is the dense iteration's to the bit (the same sums in the same order:
        // ascending feature, the bias last), in memory sized by the rows, not by `dimension`
        // (a data set with one index of 2·10⁹ must not need 16 GB here).
        let mut support: Vec<u32> = self
            .indices
            .iter()
            .copied()
            .filter(|&j| (j as usize) < dimension)
            .collect();
        support.sort_unstable();
        support.dedup();
        // Each entry's place in the support (`None`: beyond `dimension`), found once.
        let slots: Vec<Option<usize>> = self
            .indices
            .iter()
            .map(|j| support.binary_search(j).ok())
            .collect();
        let bias = support.len();
        // The dense start, a unit vector of `dimension + 1` ones; its norm summed exactly.
        let start = 1.0 / ((dimension + 1) as f64).sqrt();
        let mut v = vec![start; bias + 1];
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let mut next = vec![0.0f64; bias + 1];
        let mut eigenvalue = 0.0;
        for _ in 0..iterations.max(1) {
            next.iter_mut().for_each(|x| *x = 0.0);
            for r in 0..n {
                let range = self.offsets[r] as usize..self.offsets[r + 1] as usize;
                let (slots, values) = (&slots[range.clone()], &self.values[range]);
                let dot: f64 = v[bias]
                    + slots
                        .iter()
                        .zip(values)
                        .map(|(s, &x)| s.map_or(0.0, |s| v[s] * f64::from(x)))
                        .sum::<f64>();
                next[bias] += dot;
                for (s, &x) in slots.iter().zip(values) {
                    if let Some(s) = *s {
                        next[s] += dot * f64::from(x);
                    }
                }
            }
            next.iter_mut().for_each(|x| *x /= n as f64);
            let scale = norm(&next);
            if scale == 0.0 {
                return 0.0;
            }
            // The Rayleigh quotient of the unit vector v.
            eigenvalue = v.iter().zip(&next).map(|(a, b)| a * b).sum::<f64>();
            for (a, b) in v.iter_mut().zip(&next) {
                *a = b / scale;
            }
        }
        eigenvalue
    }

    /// An empty batch.
    pub fn new() -> Self {
        Self {
            offsets: vec![0],
            ..Self::default()
        }
    }

    /// Appends a row; `indices` must ascend and be as long as `values`.
    pub fn push_row(&mut self, label: f32, indices: &[u32], values: &[f32]) {
        debug_assert_eq!(indices.len(), values.len());
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.labels.push(label);
        self.indices.extend_from_slice(indices);
        self.values.extend_from_slice(values);
        self.offsets.push(self.indices.len() as u32);
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.labels.len()
    }

    /// Number of stored feature values over all rows.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// Row `r` as `(label, indices, values)`.
    pub fn row(&self, r: usize) -> (f32, &[u32], &[f32]) {
        let (start, end) = (self.offsets[r] as usize, self.offsets[r + 1] as usize);
        (
            self.labels[r],
            &self.indices[start..end],
            &self.values[start..end],
        )
    }

    /// Iterates over the rows as `(label, indices, values)`.
    pub fn iter_rows(&self) -> impl Iterator<Item = (f32, &[u32], &[f32])> + '_ {
        (0..self.rows()).map(|r| self.row(r))
    }

    /// Appends the rows `rows` of `from`, in order.
    pub fn extend_rows(&mut self, from: &SparseBatch, rows: Range<usize>) {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let (start, end) = (
            from.offsets[rows.start] as usize,
            from.offsets[rows.end] as usize,
        );
        let shift = self.indices.len() as i64 - start as i64;
        self.labels.extend_from_slice(&from.labels[rows.clone()]);
        self.indices.extend_from_slice(&from.indices[start..end]);
        self.values.extend_from_slice(&from.values[start..end]);
        self.offsets.extend(
            from.offsets[rows.start + 1..=rows.end]
                .iter()
                .map(|&o| (i64::from(o) + shift) as u32),
        );
    }
}

/// A minibatch of `(user, item, rating)` triples for matrix factorisation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RatingBatch {
    /// User ids, dense from 0.
    pub users: Vec<u32>,
    /// Item ids, dense from 0.
    pub items: Vec<u32>,
    /// Ratings, parallel to `users` and `items`.
    pub ratings: Vec<f32>,
}

impl RatingBatch {
    /// Appends a rating.
    pub fn push(&mut self, user: u32, item: u32, rating: f32) {
        self.users.push(user);
        self.items.push(item);
        self.ratings.push(rating);
    }

    /// Number of ratings.
    pub fn len(&self) -> usize {
        self.ratings.len()
    }

    /// Whether the batch holds no rating.
    pub fn is_empty(&self) -> bool {
        self.ratings.is_empty()
    }

    /// Appends the ratings `range` of `from`, in order.
    pub fn extend_from(&mut self, from: &RatingBatch, range: Range<usize>) {
        self.users.extend_from_slice(&from.users[range.clone()]);
        self.items.extend_from_slice(&from.items[range.clone()]);
        self.ratings.extend_from_slice(&from.ratings[range]);
    }

    /// Iterates over `(user, item, rating)`.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32, f32)> + '_ {
        self.users
            .iter()
            .zip(&self.items)
            .zip(&self.ratings)
            .map(|((&u, &i), &r)| (u, i, r))
    }
}

/// How many training ratings each user and each item has: what matrix factorisation's
/// count-aware prior divides by (see [`crate::MatrixFactorization::with_prior`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RatingCounts {
    /// Ratings of user `u` at index `u`.
    pub users: Vec<u32>,
    /// Ratings of item `i` at index `i`.
    pub items: Vec<u32>,
}

impl RatingCounts {
    /// Zero counts for `users` users and `items` items.
    pub fn new(users: u32, items: u32) -> Self {
        Self {
            users: vec![0; users as usize],
            items: vec![0; items as usize],
        }
    }

    /// Counts the ratings of `batch`, growing the tables to any id beyond them.
    pub fn add(&mut self, batch: &RatingBatch) {
        for (user, item, _) in batch.iter() {
            bump(&mut self.users, user);
            bump(&mut self.items, item);
        }
    }
}

/// Adds one to `counts[id]`, growing `counts` to hold `id`.
fn bump(counts: &mut Vec<u32>, id: u32) {
    let id = id as usize;
    if counts.len() <= id {
        counts.resize(id + 1, 0);
    }
    counts[id] = counts[id].saturating_add(1);
}

/// A minibatch of either kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Batch {
    /// Labelled sparse rows (logistic regression and other linear models).
    Sparse(SparseBatch),
    /// Ratings (matrix factorisation).
    Ratings(RatingBatch),
}

impl Batch {
    /// Number of samples (rows or ratings).
    pub fn samples(&self) -> usize {
        match self {
            Batch::Sparse(b) => b.rows(),
            Batch::Ratings(b) => b.len(),
        }
    }

    /// One batch of the samples `range` of each part, in order; `None` when the parts are not
    /// all of one kind or there are none. Each range must lie within its part's samples.
    pub fn concat(parts: &[(&Batch, Range<usize>)]) -> Option<Batch> {
        let mut out = match parts.first()? {
            (Batch::Sparse(_), _) => Batch::Sparse(SparseBatch::new()),
            (Batch::Ratings(_), _) => Batch::Ratings(RatingBatch::default()),
        };
        for (part, range) in parts {
            match (&mut out, part) {
                (Batch::Sparse(out), Batch::Sparse(part)) => out.extend_rows(part, range.clone()),
                (Batch::Ratings(out), Batch::Ratings(part)) => out.extend_from(part, range.clone()),
                _ => return None,
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concatenated_parts_hold_their_rows_in_order() {
        let mut a = SparseBatch::new();
        a.push_row(1.0, &[0, 3], &[1.0, 2.0]);
        a.push_row(0.0, &[], &[]);
        a.push_row(1.0, &[5], &[3.0]);
        let mut b = SparseBatch::new();
        b.push_row(0.0, &[1, 2, 4], &[4.0, 5.0, 6.0]);
        b.push_row(1.0, &[7], &[7.0]);
        let (a, b) = (Batch::Sparse(a), Batch::Sparse(b));
        let joined = Batch::concat(&[(&a, 1..3), (&b, 0..1)]).expect("one kind");
        let mut expected = SparseBatch::new();
        expected.push_row(0.0, &[], &[]);
        expected.push_row(1.0, &[5], &[3.0]);
        expected.push_row(0.0, &[1, 2, 4], &[4.0, 5.0, 6.0]);
        assert_eq!(joined, Batch::Sparse(expected));
        // A whole part is the part itself.
        assert_eq!(Batch::concat(&[(&a, 0..3)]), Some(a.clone()));
        let mut r = RatingBatch::default();
        for i in 0..4 {
            r.push(i, i + 10, i as f32);
        }
        let r = Batch::Ratings(r);
        let Some(Batch::Ratings(two)) = Batch::concat(&[(&r, 3..4), (&r, 0..1)]) else {
            panic!("ratings")
        };
        assert_eq!(two.iter().collect::<Vec<_>>(), [(3, 13, 3.0), (0, 10, 0.0)]);
        assert_eq!(Batch::concat(&[(&a, 0..1), (&r, 0..1)]), None);
        assert_eq!(Batch::concat(&[]), None);
    }

    #[test]
    fn the_top_second_moment_is_the_steepest_curvature() {
        // Every row the same: mean(x xᵀ) = x xᵀ, whose top eigenvalue is |x|² (with the bias 1).
        let mut rows = SparseBatch::new();
        for _ in 0..10 {
            rows.push_row(1.0, &[0, 3], &[2.0, 1.0]);
        }
        assert!((rows.top_second_moment(4, 30) - 6.0).abs() < 1e-9);
        // Half the rows hold feature 0 at 3, half feature 1 at 1.
        let mut mixed = SparseBatch::new();
        for i in 0..100 {
            if i % 2 == 0 {
                mixed.push_row(0.0, &[0], &[3.0]);
            } else {
                mixed.push_row(0.0, &[1], &[1.0]);
            }
        }
        // M over (x0, x1, bias) = [[4.5, 0, 1.5], [0, 0.5, 0.5], [1.5, 0.5, 1]].
        let top = mixed.top_second_moment(2, 200);
        let m = [[4.5, 0.0, 1.5], [0.0, 0.5, 0.5], [1.5, 0.5, 1.0]];
        // Its characteristic polynomial at the found root is 0.
        let det = |l: f64| {
            let a = [
                [m[0][0] - l, m[0][1], m[0][2]],
                [m[1][0], m[1][1] - l, m[1][2]],
                [m[2][0], m[2][1], m[2][2] - l],
            ];
            a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1])
                - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0])
        };
        assert!(det(top).abs() < 1e-6 && top > 4.5, "{top}");
        assert_eq!(SparseBatch::new().top_second_moment(3, 10), 0.0);
    }

    /// The power iteration as it was, over a dense vector of every feature.
    fn dense_top_second_moment(rows: &SparseBatch, dimension: usize, iterations: usize) -> f64 {
        let n = rows.rows();
        let bias = dimension;
        let mut v = vec![1.0f64; dimension + 1];
        let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let mut scale = norm(&v);
        v.iter_mut().for_each(|x| *x /= scale);
        let mut next = vec![0.0f64; dimension + 1];
        let mut eigenvalue = 0.0;
        for _ in 0..iterations {
            next.iter_mut().for_each(|x| *x = 0.0);
            for r in 0..n {
                let (_, indices, values) = rows.row(r);
                let dot: f64 = v[bias]
                    + indices
                        .iter()
                        .zip(values)
                        .map(|(&j, &x)| v[j as usize] * f64::from(x))
                        .sum::<f64>();
                next[bias] += dot;
                for (&j, &x) in indices.iter().zip(values) {
                    next[j as usize] += dot * f64::from(x);
                }
            }
            next.iter_mut().for_each(|x| *x /= n as f64);
            scale = norm(&next);
            eigenvalue = v.iter().zip(&next).map(|(a, b)| a * b).sum::<f64>();
            for (a, b) in v.iter_mut().zip(&next) {
                *a = b / scale;
            }
        }
        eigenvalue
    }

    #[test]
    fn the_top_second_moment_needs_no_dense_pass_and_keeps_its_bits() {
        // Rows over a few features of a wide space: the sparse iteration is the dense one to
        // the bit, at every iteration count.
        let mut rows = SparseBatch::new();
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        for _ in 0..50 {
            let mut indices: Vec<u32> = (0..4).map(|_| next() % 300).collect();
            indices.sort_unstable();
            indices.dedup();
            let values: Vec<f32> = indices
                .iter()
                .map(|_| (next() % 100) as f32 / 25.0)
                .collect();
            rows.push_row((next() % 2) as f32, &indices, &values);
        }
        for iterations in [1, 2, 5, 30] {
            let sparse = rows.top_second_moment(1000, iterations);
            let dense = dense_top_second_moment(&rows, 1000, iterations);
            assert_eq!(
                sparse.to_bits(),
                dense.to_bits(),
                "{iterations}: {sparse} {dense}"
            );
        }
        // An index of 2·10⁹ costs what its row costs, not 16 GB.
        let mut huge = SparseBatch::new();
        huge.push_row(1.0, &[3, 2_000_000_000], &[1.0, 1.0]);
        let top = huge.top_second_moment(2_000_000_001, 30);
        assert!((top - 3.0).abs() < 1e-9, "{top}");
    }
}
