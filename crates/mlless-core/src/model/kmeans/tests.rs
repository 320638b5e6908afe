//! Tests of k-means: Lloyd from k-means++ seeding, sparse against dense distances, merged Lloyd sums, empty clusters, bad batches.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

use super::*;
use crate::RatingBatch;
use crate::model::{GradientAccumulator, ModelSpec};

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
        let mut eval = spec.evaluation();
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
