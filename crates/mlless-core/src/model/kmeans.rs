//! K-means clustering: Lloyd's algorithm over sparse (or dense, fully listed) rows, k-means++
//! seeding, and the single-process reference run.
//!
//! The parameters are the `k` centroids, row-major. K-means trains by Lloyd steps, not
//! gradients: each worker assigns its rows to the nearest centroid and sums them per cluster
//! ([`LloydSums::add_batch`]); the sums of all workers are merged ([`LloydSums::merge`], or
//! averaged as vectors, see [`LloydSums::from_mean_vector`]) and the new centroids are the
//! clusters' means ([`LloydSums::centroids`]). Labels of the rows are ignored.
//!
//! ```
//! use mlless_core::{Batch, SparseBatch, kmeans_plus_plus, lloyd};
//! let mut rows = SparseBatch::new();
//! for x in [0.0, 0.1, 10.0, 10.1] {
//!     rows.push_row(0.0, &[0], &[x]);
//! }
//! let data = [Batch::Sparse(rows)];
//! let init = kmeans_plus_plus(&data, 2, 1, 7)?;
//! let run = lloyd(&data, init, 2, 1, 10, 1e-9)?;
//! let mut centres = run.centroids.clone();
//! centres.sort_by(f32::total_cmp);
//! assert!((centres[0] - 0.05).abs() < 1e-6 && (centres[1] - 10.05).abs() < 1e-5);
//! # Ok::<(), mlless_core::ModelError>(())
//! ```

use rand::{Rng, SeedableRng, rngs::StdRng};

use super::linear::{LabelRule, sparse_rows, validate_sparse};
use super::{Model, ModelError, Prediction, Result, check_dims};
use crate::batch::{Batch, SparseBatch};
use crate::metrics::Evaluation;

/// K-means as a [`Model`]: evaluation only (the inertia of test data); its
/// [`gradient`](Model::gradient) is the default, [`ModelError::NoGradient`], as k-means trains
/// by Lloyd steps ([`LloydSums`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KMeans {
    k: u32,
    features: u32,
}

impl KMeans {
    /// `k` clusters of points with `features` features.
    pub fn new(k: u32, features: u32) -> Self {
        Self { k, features }
    }
}

impl Model for KMeans {
    fn predict_rows(&self, params: &[f32], rows: &SparseBatch) -> Result<Vec<Prediction>> {
        let batch = Batch::Sparse(rows.clone());
        Ok(self
            .assign(params, &batch)?
            .into_iter()
            .map(|(cluster, sq_distance)| Prediction::Cluster {
                cluster,
                sq_distance,
            })
            .collect())
    }

    fn name(&self) -> &'static str {
        "kmeans"
    }

    fn num_params(&self) -> usize {
        self.k as usize * self.features as usize
    }

    /// Adds each row's squared distance to its nearest centroid to a
    /// [`clustering`](Evaluation::clustering) evaluation.
    fn evaluate(&self, params: &[f32], batch: &Batch, eval: &mut Evaluation) -> Result<()> {
        let rows = prepare(params, batch, self.k, self.features)?;
        eval.check_task("clustering")?;
        let centroids = Centroids::new(params, self.features);
        for (_, indices, values) in rows.iter_rows() {
            let (_, d) = centroids.nearest(indices, values);
            eval.push_sq_distance(d)?;
        }
        Ok(())
    }
}

impl KMeans {
    /// The nearest centroid of each row of `batch` and the row's squared distance to it (the
    /// lowest index among ties), as [`evaluate`](Model::evaluate) computes them; labels are
    /// ignored.
    pub(super) fn assign(&self, params: &[f32], batch: &Batch) -> Result<Vec<(u32, f64)>> {
        let rows = prepare(params, batch, self.k, self.features)?;
        let centroids = Centroids::new(params, self.features);
        Ok(rows
            .iter_rows()
            .map(|(_, indices, values)| {
                let (c, d) = centroids.nearest(indices, values);
                (c as u32, d)
            })
            .collect())
    }
}

/// Checks the centroids' length and the batch (kind, layout, indices, values; not the labels),
/// returning its rows; with `k = 0`, a non-empty batch is an error (no centroid to assign to).
fn prepare<'b>(
    centroids: &[f32],
    batch: &'b Batch,
    k: u32,
    features: u32,
) -> Result<&'b SparseBatch> {
    check_dims(k as usize * features as usize, centroids, None)?;
    let rows = sparse_rows("kmeans", batch)?;
    validate_sparse(rows, features, LabelRule::Ignored)?;
    if k == 0 && rows.rows() > 0 {
        return Err(ModelError::InvalidSpec {
            reason: "k-means with k = 0 cannot assign points".into(),
        });
    }
    Ok(rows)
}

/// Centroids with their squared norms, for O(nnz) distances to a sparse row:
/// `‖x − c‖² = ‖x‖² − 2 x·c + ‖c‖²`.
struct Centroids<'a> {
    centroids: &'a [f32],
    features: usize,
    sq_norms: Vec<f64>,
}

impl<'a> Centroids<'a> {
    fn new(centroids: &'a [f32], features: u32) -> Self {
        let features = features as usize;
        let sq_norms = centroids
            .chunks_exact(features.max(1))
            .map(|c| c.iter().map(|&v| f64::from(v).powi(2)).sum())
            .collect();
        Self {
            centroids,
            features,
            sq_norms,
        }
    }

    /// The squared distance of the sparse row `(indices, values)` to centroid `c`, given the
    /// row's squared norm; clamped at 0 against rounding.
    fn sq_distance(&self, c: usize, indices: &[u32], values: &[f32], row_sq_norm: f64) -> f64 {
        let centroid = &self.centroids[c * self.features..(c + 1) * self.features];
        let dot: f64 = indices
            .iter()
            .zip(values)
            .map(|(&j, &x)| f64::from(x) * f64::from(centroid[j as usize]))
            .sum();
        (row_sq_norm - 2.0 * dot + self.sq_norms[c]).max(0.0)
    }

    /// The nearest centroid to a row (the lowest index among ties) and its squared distance.
    /// There must be at least one centroid.
    fn nearest(&self, indices: &[u32], values: &[f32]) -> (usize, f64) {
        let row_sq_norm = sq_norm(values);
        let mut best = (0, f64::INFINITY);
        for c in 0..self.sq_norms.len() {
            let d = self.sq_distance(c, indices, values, row_sq_norm);
            if d < best.1 {
                best = (c, d);
            }
        }
        best
    }
}

fn sq_norm(values: &[f32]) -> f64 {
    values.iter().map(|&x| f64::from(x).powi(2)).sum()
}

/// The per-cluster sums of one Lloyd assignment pass: what a worker computes on its batches,
/// and what the workers' results merge into.
///
/// The new centroid of a cluster is its sum divided by its count ([`centroids`](Self::centroids)).
#[derive(Debug, Clone, PartialEq)]
pub struct LloydSums {
    k: u32,
    features: u32,
    sums: Vec<f64>,
    counts: Vec<f64>,
    inertia: f64,
    points: u64,
}

impl LloydSums {
    /// Empty sums for `k` clusters of `features` features.
    pub fn new(k: u32, features: u32) -> Self {
        Self {
            k,
            features,
            sums: vec![0.0; k as usize * features as usize],
            counts: vec![0.0; k as usize],
            inertia: 0.0,
            points: 0,
        }
    }

    /// Number of clusters.
    pub fn k(&self) -> u32 {
        self.k
    }

    /// Number of features.
    pub fn features(&self) -> u32 {
        self.features
    }

    /// The per-cluster sums of the assigned points, `k × features`, row-major.
    pub fn sums(&self) -> &[f64] {
        &self.sums
    }

    /// The number of points assigned to each cluster (a mean of counts after
    /// [`from_mean_vector`](Self::from_mean_vector)).
    pub fn counts(&self) -> &[f64] {
        &self.counts
    }

    /// The sum of the squared distances of the points to their nearest centroid (0 after
    /// [`from_mean_vector`](Self::from_mean_vector): the vector does not carry it).
    pub fn inertia(&self) -> f64 {
        self.inertia
    }

    /// The number of points added (0 after [`from_mean_vector`](Self::from_mean_vector)).
    pub fn points(&self) -> u64 {
        self.points
    }

    /// Assigns every row of `batch` to its nearest centroid of `centroids` (`k × features`,
    /// row-major) by squared Euclidean distance (ties go to the lowest index), and adds the row
    /// to that cluster's sum and count and its squared distance to the inertia.
    ///
    /// Sparse rows cost O(k · nnz) after an O(k · features) precomputation of the centroids'
    /// norms. The batch is untrusted (as in [`Model::gradient`]; labels are ignored): on error
    /// `self` is unchanged.
    pub fn add_batch(&mut self, centroids: &[f32], batch: &Batch) -> Result<()> {
        let rows = prepare(centroids, batch, self.k, self.features)?;
        let centroids = Centroids::new(centroids, self.features);
        let features = self.features as usize;
        for (_, indices, values) in rows.iter_rows() {
            let (c, d) = centroids.nearest(indices, values);
            let sum = &mut self.sums[c * features..(c + 1) * features];
            for (&j, &x) in indices.iter().zip(values) {
                sum[j as usize] += f64::from(x);
            }
            self.counts[c] += 1.0;
            self.inertia += d;
            self.points += 1;
        }
        Ok(())
    }

    /// Adds the sums of `other` (another worker's, or another part of the data).
    ///
    /// # Panics
    ///
    /// When `other` has another `k` or number of features.
    pub fn merge(&mut self, other: &LloydSums) {
        assert_eq!(
            (self.k, self.features),
            (other.k, other.features),
            "merging Lloyd sums of different shapes"
        );
        for (a, b) in self.sums.iter_mut().zip(&other.sums) {
            *a += b;
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.inertia += other.inertia;
        self.points += other.points;
    }

    /// The sums as the vector a worker sends: `[sums (k × features) .., counts (k) ..]`, of
    /// length `k · (features + 1)`.
    pub fn to_vector(&self) -> Vec<f32> {
        self.sums
            .iter()
            .chain(&self.counts)
            .map(|&v| v as f32)
            .collect()
    }

    /// Rebuilds sums and counts from a [`to_vector`](Self::to_vector) vector, or from the mean
    /// of several workers' vectors: scaling sums and counts alike leaves the centroids
    /// (sum / count) unchanged. Inertia and points are not carried and are 0.
    ///
    /// The vector is untrusted: a wrong length, a non-finite value or a negative count is a
    /// [`ModelError::MalformedLloydSums`].
    pub fn from_mean_vector(k: u32, features: u32, v: &[f32]) -> Result<Self> {
        let malformed = |reason: String| Err(ModelError::MalformedLloydSums { reason });
        let n_sums = k as usize * features as usize;
        let expected = n_sums + k as usize;
        if v.len() != expected {
            return malformed(format!(
                "k = {k} clusters of {features} features need {expected} values, got {}",
                v.len()
            ));
        }
        if let Some(i) = v.iter().position(|x| !x.is_finite()) {
            return malformed(format!("value {i} is {}", v[i]));
        }
        let (sums, counts) = v.split_at(n_sums);
        if let Some(c) = counts.iter().position(|&x| x < 0.0) {
            return malformed(format!("cluster {c} has the negative count {}", counts[c]));
        }
        Ok(Self {
            k,
            features,
            sums: sums.iter().map(|&x| f64::from(x)).collect(),
            counts: counts.iter().map(|&x| f64::from(x)).collect(),
            inertia: 0.0,
            points: 0,
        })
    }

    /// The new centroids: each cluster's mean; a cluster with no point keeps its centroid of
    /// `previous`.
    ///
    /// # Panics
    ///
    /// When `previous` is not `k × features` long.
    pub fn centroids(&self, previous: &[f32]) -> Vec<f32> {
        let features = self.features as usize;
        assert_eq!(
            previous.len(),
            self.sums.len(),
            "previous centroids of the wrong length"
        );
        let mut out = previous.to_vec();
        for (c, &count) in self.counts.iter().enumerate() {
            if count > 0.0 {
                let range = c * features..(c + 1) * features;
                for (o, &s) in out[range.clone()].iter_mut().zip(&self.sums[range]) {
                    *o = (s / count) as f32;
                }
            }
        }
        out
    }
}

/// K-means++ seeding on a sample: the first centroid is a uniformly drawn row, each next one a
/// row drawn with probability proportional to its squared distance to the nearest centroid
/// chosen so far (D² sampling). Rows are dense-ified into `k × features` centroids, row-major.
///
/// Deterministic for a `seed` and the sample's row order (`StdRng`). When every remaining row
/// coincides with a chosen centroid, the next one is drawn uniformly. Errors on an invalid
/// batch, and with [`ModelError::TooFewPoints`] when the sample has fewer than `k` rows.
pub fn kmeans_plus_plus(sample: &[Batch], k: u32, features: u32, seed: u64) -> Result<Vec<f32>> {
    let mut rows: Vec<(&[u32], &[f32], f64)> = Vec::new();
    for batch in sample {
        let batch = sparse_rows("kmeans", batch)?;
        validate_sparse(batch, features, LabelRule::Ignored)?;
        rows.extend(
            batch
                .iter_rows()
                .map(|(_, indices, values)| (indices, values, sq_norm(values))),
        );
    }
    let (k_rows, f) = (k as usize, features as usize);
    if rows.len() < k_rows {
        return Err(ModelError::TooFewPoints {
            needed: k_rows,
            got: rows.len(),
        });
    }
    let mut centroids = vec![0.0_f32; k_rows * f];
    if k_rows == 0 {
        return Ok(centroids);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut d2 = vec![f64::INFINITY; rows.len()];
    let mut chosen = rng.random_range(0..rows.len());
    for c in 0..k_rows {
        if c > 0 {
            let total: f64 = d2.iter().sum();
            chosen = if total > 0.0 && total.is_finite() {
                let target = rng.random::<f64>() * total;
                let mut cumulative = 0.0;
                let mut pick = None;
                for (i, &d) in d2.iter().enumerate() {
                    if d > 0.0 {
                        cumulative += d;
                        pick = Some(i);
                        if cumulative > target {
                            break;
                        }
                    }
                }
                pick.expect("a row with a positive distance")
            } else {
                rng.random_range(0..rows.len())
            };
        }
        let (indices, values, _) = rows[chosen];
        let centroid = &mut centroids[c * f..(c + 1) * f];
        for (&j, &x) in indices.iter().zip(values) {
            centroid[j as usize] = x;
        }
        let single = Centroids::new(&centroids[c * f..(c + 1) * f], features);
        for (d, &(indices, values, norm)) in d2.iter_mut().zip(&rows) {
            *d = d.min(single.sq_distance(0, indices, values, norm));
        }
        d2[chosen] = 0.0;
    }
    Ok(centroids)
}

/// The result of [`lloyd`].
#[derive(Debug, Clone, PartialEq)]
pub struct LloydRun {
    /// The final centroids, `k × features`, row-major.
    pub centroids: Vec<f32>,
    /// The inertia of the data with the final centroids.
    pub inertia: f64,
    /// The number of Lloyd updates applied to the initial centroids.
    pub iterations: usize,
}

/// The single-process reference k-means: Lloyd's algorithm on all of `batches` from `init`
/// (`k × features`, e.g. from [`kmeans_plus_plus`]).
///
/// Each iteration assigns every row to its nearest centroid (measuring the current centroids'
/// inertia) and then moves the centroids to their clusters' means. It stops when the inertia
/// changed by at most `tolerance` relative to the previous one, or after `max_iterations`
/// updates; the returned inertia is that of the returned centroids. Errors on an invalid batch
/// or an `init` of the wrong length.
pub fn lloyd(
    batches: &[Batch],
    init: Vec<f32>,
    k: u32,
    features: u32,
    max_iterations: usize,
    tolerance: f64,
) -> Result<LloydRun> {
    let mut centroids = init;
    let mut previous: Option<f64> = None;
    let mut iterations = 0;
    loop {
        let mut sums = LloydSums::new(k, features);
        for batch in batches {
            sums.add_batch(&centroids, batch)?;
        }
        let inertia = sums.inertia();
        let converged = previous.is_some_and(|p| (p - inertia).abs() <= tolerance * p);
        if converged || iterations >= max_iterations {
            return Ok(LloydRun {
                centroids,
                inertia,
                iterations,
            });
        }
        centroids = sums.centroids(&centroids);
        iterations += 1;
        previous = Some(inertia);
    }
}

#[cfg(test)]
mod tests;
