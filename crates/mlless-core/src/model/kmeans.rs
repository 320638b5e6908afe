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

use super::linear::{Labels, sparse_rows, validate_sparse};
use super::{BatchLoss, GradientAccumulator, Model, ModelError, Prediction, check_dims};
use crate::batch::{Batch, SparseBatch};
use crate::metrics::Evaluation;

/// K-means as a [`Model`]: evaluation only (the inertia of test data); its
/// [`gradient`](Model::gradient) is [`ModelError::NoGradient`].
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
    fn predict_rows(
        &self,
        params: &[f32],
        rows: &SparseBatch,
    ) -> Result<Vec<Prediction>, ModelError> {
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

    fn predict_rating(
        &self,
        _params: &[f32],
        _user: Option<u32>,
        _item: Option<u32>,
    ) -> Result<f64, ModelError> {
        Err(ModelError::rows_only("kmeans"))
    }

    fn num_params(&self) -> usize {
        self.k as usize * self.features as usize
    }

    /// Always [`ModelError::NoGradient`]: k-means trains by Lloyd steps ([`LloydSums`]).
    fn gradient(
        &self,
        _params: &[f32],
        _batch: &Batch,
        _acc: &mut GradientAccumulator,
    ) -> Result<BatchLoss, ModelError> {
        Err(ModelError::NoGradient { model: "kmeans" })
    }

    /// Adds each row's squared distance to its nearest centroid to a
    /// [`clustering`](Evaluation::clustering) evaluation.
    fn evaluate(
        &self,
        params: &[f32],
        batch: &Batch,
        eval: &mut Evaluation,
    ) -> Result<(), ModelError> {
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
    pub(super) fn assign(
        &self,
        params: &[f32],
        batch: &Batch,
    ) -> Result<Vec<(u32, f64)>, ModelError> {
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
) -> Result<&'b SparseBatch, ModelError> {
    check_dims(k as usize * features as usize, centroids, None)?;
    let rows = sparse_rows("kmeans", batch)?;
    validate_sparse(rows, features, Labels::Ignored)?;
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
    pub fn add_batch(&mut self, centroids: &[f32], batch: &Batch) -> Result<(), ModelError> {
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
    pub fn from_mean_vector(k: u32, features: u32, v: &[f32]) -> Result<Self, ModelError> {
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
pub fn kmeans_plus_plus(
    sample: &[Batch],
    k: u32,
    features: u32,
    seed: u64,
) -> Result<Vec<f32>, ModelError> {
    let mut rows: Vec<(&[u32], &[f32], f64)> = Vec::new();
    for batch in sample {
        let batch = sparse_rows("kmeans", batch)?;
        validate_sparse(batch, features, Labels::Ignored)?;
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
) -> Result<LloydRun, ModelError> {
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
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    use super::*;
    use crate::RatingBatch;
    use crate::model::ModelSpec;

    /// Dense points (every feature listed) around `centres`, `per_centre` each, interleaved, in
    /// batches of `batch_rows`.
    fn blobs(
        rng: &mut StdRng,
        centres: &[Vec<f32>],
        per_centre: usize,
        std: f32,
        batch_rows: usize,
    ) -> Vec<Batch> {
        let features = centres[0].len() as u32;
        let all: Vec<u32> = (0..features).collect();
        let mut batches = Vec::new();
        let mut cur = SparseBatch::new();
        for _ in 0..per_centre {
            for centre in centres {
                let x: Vec<f32> = centre
                    .iter()
                    .map(|&c| c + std * rng.sample::<f32, _>(StandardNormal))
                    .collect();
                cur.push_row(0.0, &all, &x);
                if cur.rows() == batch_rows {
                    batches.push(Batch::Sparse(std::mem::replace(
                        &mut cur,
                        SparseBatch::new(),
                    )));
                }
            }
        }
        if cur.rows() > 0 {
            batches.push(Batch::Sparse(cur));
        }
        batches
    }

    fn sparse(rows: &[(&[u32], &[f32])]) -> Batch {
        let mut b = SparseBatch::new();
        for (i, v) in rows {
            b.push_row(1.0, i, v);
        }
        Batch::Sparse(b)
    }

    fn assert_all_close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "[{i}]: {x} vs {y}");
        }
    }

    #[test]
    fn lloyd_from_kmeans_plus_plus_finds_the_blob_centres() {
        let mut rng = StdRng::seed_from_u64(9);
        let centres: Vec<Vec<f32>> = vec![
            vec![0.0, 0.0, 0.0, 0.0, 0.0],
            vec![10.0, 0.0, 0.0, 0.0, 0.0],
            vec![0.0, 10.0, 5.0, 0.0, 0.0],
            vec![0.0, 0.0, 0.0, -8.0, 8.0],
        ];
        let data = blobs(&mut rng, &centres, 250, 0.5, 64);
        let (k, features) = (4, 5);
        for seed in 0..5 {
            let init = kmeans_plus_plus(&data, k, features, seed).unwrap();
            assert_eq!(init, kmeans_plus_plus(&data, k, features, seed).unwrap());
            let run = lloyd(&data, init, k, features, 100, 1e-9).unwrap();
            assert!(run.iterations < 100, "converged: {}", run.iterations);
            for centre in &centres {
                let nearest = run
                    .centroids
                    .chunks_exact(5)
                    .map(|c| {
                        c.iter()
                            .zip(centre)
                            .map(|(a, b)| (a - b).powi(2))
                            .sum::<f32>()
                            .sqrt()
                    })
                    .fold(f32::INFINITY, f32::min);
                assert!(
                    nearest < 0.15,
                    "seed {seed}: centre {centre:?} at {nearest}"
                );
            }
            // About 5 · 0.25 per point.
            let mean = run.inertia / 1000.0;
            assert!((mean - 1.25).abs() < 0.15, "mean squared distance {mean}");

            // The evaluation measures the same inertia.
            let spec = ModelSpec::KMeans { features, k };
            let mut eval = Evaluation::for_spec(&spec);
            for b in &data {
                spec.model().evaluate(&run.centroids, b, &mut eval).unwrap();
            }
            let m = eval.finish();
            assert_eq!(m["test_samples"], 1000.0);
            assert!((m["test_inertia"] - run.inertia).abs() < 1e-6 * run.inertia);
            assert!((m["test_mean_sq_distance"] - mean).abs() < 1e-9);
        }
    }

    #[test]
    fn sparse_distances_match_dense_ones() {
        let mut rng = StdRng::seed_from_u64(4);
        let (k, features) = (3_u32, 12_u32);
        let centroids: Vec<f32> = (0..k * features)
            .map(|_| rng.sample(StandardNormal))
            .collect();
        let mut batch = SparseBatch::new();
        for _ in 0..50 {
            let mut idx: Vec<u32> = (0..4).map(|_| rng.random_range(0..features)).collect();
            idx.sort_unstable();
            idx.dedup();
            let vals: Vec<f32> = idx.iter().map(|_| rng.sample(StandardNormal)).collect();
            batch.push_row(0.0, &idx, &vals);
        }
        let mut sums = LloydSums::new(k, features);
        sums.add_batch(&centroids, &Batch::Sparse(batch.clone()))
            .unwrap();
        let (mut inertia, mut counts) = (0.0, vec![0.0; k as usize]);
        for (_, idx, vals) in batch.iter_rows() {
            let mut x = vec![0.0_f64; features as usize];
            for (&j, &v) in idx.iter().zip(vals) {
                x[j as usize] = f64::from(v);
            }
            let (c, d) = centroids
                .chunks_exact(features as usize)
                .map(|c| {
                    c.iter()
                        .zip(&x)
                        .map(|(&a, b)| (f64::from(a) - b).powi(2))
                        .sum::<f64>()
                })
                .enumerate()
                .fold(
                    (0, f64::INFINITY),
                    |best, (c, d)| {
                        if d < best.1 { (c, d) } else { best }
                    },
                );
            inertia += d;
            counts[c] += 1.0;
        }
        assert!((sums.inertia() - inertia).abs() < 1e-9 * inertia);
        assert_eq!(sums.counts(), &counts[..]);
        assert_eq!(sums.points(), 50);
    }

    #[test]
    fn merged_halves_equal_one_pass_and_mean_vectors_give_the_same_centroids() {
        let mut rng = StdRng::seed_from_u64(1);
        let centres = vec![
            vec![0.0, 0.0, 1.0],
            vec![4.0, 4.0, 0.0],
            vec![-4.0, 2.0, 2.0],
        ];
        let data = blobs(&mut rng, &centres, 40, 1.0, 16);
        let (k, features) = (3, 3);
        let init = kmeans_plus_plus(&data, k, features, 3).unwrap();
        let (left, right) = data.split_at(data.len() / 2);

        let mut whole = LloydSums::new(k, features);
        for b in &data {
            whole.add_batch(&init, b).unwrap();
        }
        let mut a = LloydSums::new(k, features);
        for b in left {
            a.add_batch(&init, b).unwrap();
        }
        let mut b = LloydSums::new(k, features);
        for batch in right {
            b.add_batch(&init, batch).unwrap();
        }
        let (va, vb) = (a.to_vector(), b.to_vector());
        assert_eq!(va.len(), 3 * 4);
        let mut merged = a.clone();
        merged.merge(&b);
        assert_eq!(merged.counts(), whole.counts());
        assert_eq!(merged.points(), 120);
        assert!((merged.inertia() - whole.inertia()).abs() < 1e-9 * whole.inertia());
        for (x, y) in merged.sums().iter().zip(whole.sums()) {
            assert!((x - y).abs() < 1e-9 * (1.0 + y.abs()));
        }
        let expected = whole.centroids(&init);

        // What the runtime holds: the mean of the two workers' vectors.
        let mean: Vec<f32> = va.iter().zip(&vb).map(|(x, y)| (x + y) / 2.0).collect();
        let rebuilt = LloydSums::from_mean_vector(k, features, &mean).unwrap();
        assert_all_close(&rebuilt.centroids(&init), &expected, 1e-5);
        assert_all_close(&merged.centroids(&init), &expected, 1e-6);

        for bad in [&mean[1..], &[f32::NAN; 12][..]] {
            assert!(matches!(
                LloydSums::from_mean_vector(k, features, bad),
                Err(ModelError::MalformedLloydSums { .. })
            ));
        }
        let mut negative = mean.clone();
        negative[10] = -1.0;
        assert!(LloydSums::from_mean_vector(k, features, &negative).is_err());
    }

    #[test]
    fn an_empty_cluster_keeps_its_centroid() {
        let centroids = vec![0.0, 0.0, 100.0, 100.0];
        let mut sums = LloydSums::new(2, 2);
        sums.add_batch(
            &centroids,
            &sparse(&[(&[0, 1], &[1.0, 1.0]), (&[0], &[3.0]), (&[], &[])]),
        )
        .unwrap();
        assert_eq!(sums.counts(), &[3.0, 0.0]);
        assert_eq!(
            sums.centroids(&centroids),
            vec![4.0 / 3.0, 1.0 / 3.0, 100.0, 100.0]
        );
        // One centroid fixed at a point: inertia 0, converged at once.
        let data = [sparse(&[(&[0], &[2.0])])];
        let run = lloyd(&data, vec![5.0, 0.0, 2.0, 0.0], 2, 2, 10, 0.0).unwrap();
        assert_eq!(run.centroids, vec![5.0, 0.0, 2.0, 0.0]);
        assert_eq!((run.inertia, run.iterations), (0.0, 1));
    }

    #[test]
    fn bad_batches_and_too_small_samples_are_errors() {
        let (k, features) = (2, 3);
        let centroids = vec![0.0; 6];
        let mut sums = LloydSums::new(k, features);
        let mut ratings = RatingBatch::default();
        ratings.push(0, 0, 1.0);
        assert_eq!(
            sums.add_batch(&centroids, &Batch::Ratings(ratings)),
            Err(ModelError::WrongBatchKind {
                model: "kmeans",
                expected: "sparse",
                got: "ratings"
            })
        );
        // The first row is fine, the second is not: nothing is added.
        let out_of_range = sparse(&[(&[0], &[1.0]), (&[3], &[1.0])]);
        assert!(matches!(
            sums.add_batch(&centroids, &out_of_range),
            Err(ModelError::FeatureOutOfRange {
                row: 1,
                index: 3,
                ..
            })
        ));
        let non_finite = sparse(&[(&[1], &[f32::INFINITY])]);
        assert!(matches!(
            sums.add_batch(&centroids, &non_finite),
            Err(ModelError::NonFiniteFeature {
                row: 0,
                index: 1,
                ..
            })
        ));
        assert!(matches!(
            sums.add_batch(&centroids[1..], &sparse(&[])),
            Err(ModelError::ParamsLength {
                expected: 6,
                got: 5
            })
        ));
        assert_eq!(sums, LloydSums::new(k, features));
        // Labels are not checked: clustering ignores them.
        let mut labelled = SparseBatch::new();
        labelled.push_row(7.5, &[0], &[1.0]);
        sums.add_batch(&centroids, &Batch::Sparse(labelled))
            .unwrap();
        assert_eq!(sums.points(), 1);

        let model = ModelSpec::KMeans { features, k }.model();
        let mut acc = GradientAccumulator::new(6);
        assert_eq!(
            model.gradient(&centroids, &out_of_range, &mut acc),
            Err(ModelError::NoGradient { model: "kmeans" })
        );
        let mut eval = Evaluation::clustering();
        assert!(
            model
                .evaluate(&centroids, &out_of_range, &mut eval)
                .is_err()
        );
        assert!(
            model
                .evaluate(&centroids, &sparse(&[]), &mut Evaluation::binary())
                .is_err()
        );
        assert_eq!(eval.samples(), 0);

        let one = [sparse(&[(&[0], &[1.0])])];
        assert_eq!(
            kmeans_plus_plus(&one, 2, features, 0),
            Err(ModelError::TooFewPoints { needed: 2, got: 1 })
        );
        assert!(kmeans_plus_plus(&[non_finite], 1, features, 0).is_err());
        // Duplicate points still seed k centroids.
        let same = [sparse(&[(&[0], &[1.0]), (&[0], &[1.0]), (&[0], &[1.0])])];
        assert_eq!(
            kmeans_plus_plus(&same, 3, features, 0).unwrap(),
            vec![1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
        );
    }
}
