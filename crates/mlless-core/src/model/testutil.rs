//! Helpers shared by the model tests.

use rand::Rng;
use rand::rngs::StdRng;
use rand_distr::StandardNormal;

use super::{BatchLoss, GradientAccumulator, ModelSpec};
use crate::batch::{Batch, SparseBatch};
use crate::sparse::SparseVector;

/// The gradient of `spec`'s model at `params` on `batch`, with the batch's data loss.
pub fn spec_gradient(spec: &ModelSpec, params: &[f32], batch: &Batch) -> (BatchLoss, SparseVector) {
    let mut acc = GradientAccumulator::new(spec.num_params());
    let loss = spec.model().gradient(params, batch, &mut acc).unwrap();
    (loss, acc.take())
}

/// Central finite difference of `f` at `x` along every coordinate in `coords`, in f64.
pub fn finite_difference(
    f: impl Fn(&[f64]) -> f64,
    x: &[f64],
    coords: impl IntoIterator<Item = usize>,
) -> Vec<(usize, f64)> {
    let mut x = x.to_vec();
    coords
        .into_iter()
        .map(|j| {
            let h = 1e-6 * x[j].abs().max(1.0);
            let x0 = x[j];
            x[j] = x0 + h;
            let up = f(&x);
            x[j] = x0 - h;
            let down = f(&x);
            x[j] = x0;
            (j, (up - down) / (2.0 * h))
        })
        .collect()
}

/// Rows of up to `nnz` random features (values N(0, 1)) labelled by `label(rng, z)` from
/// their score `z = w·x + bias`.
pub fn synthetic_linear(
    rng: &mut StdRng,
    rows: usize,
    w: &[f64],
    bias: f64,
    nnz: usize,
    mut label: impl FnMut(&mut StdRng, f64) -> bool,
) -> SparseBatch {
    let features = w.len() as u32;
    let mut batch = SparseBatch::new();
    for _ in 0..rows {
        let mut idx: Vec<u32> = (0..nnz).map(|_| rng.random_range(0..features)).collect();
        idx.sort_unstable();
        idx.dedup();
        let vals: Vec<f32> = idx.iter().map(|_| rng.sample(StandardNormal)).collect();
        let z = bias
            + idx
                .iter()
                .zip(&vals)
                .map(|(&j, &v)| w[j as usize] * f64::from(v))
                .sum::<f64>();
        let positive = label(rng, z);
        batch.push_row(f32::from(u8::from(positive)), &idx, &vals);
    }
    batch
}

/// `batch` cut into batches of `size` rows (the last one may be shorter).
pub fn split_rows(batch: &SparseBatch, size: usize) -> Vec<Batch> {
    let rows: Vec<_> = batch.iter_rows().collect();
    rows.chunks(size)
        .map(|chunk| {
            let mut b = SparseBatch::new();
            for &(label, idx, vals) in chunk {
                b.push_row(label, idx, vals);
            }
            Batch::Sparse(b)
        })
        .collect()
}

/// `v` as a dense vector of dimension `dim`.
pub fn dense(v: &SparseVector, dim: usize) -> Vec<f32> {
    let mut d = vec![0.0; dim];
    v.scaled_add_to(&mut d, 1.0);
    d
}

/// Asserts `got` is within a relative-plus-absolute tolerance of `want`.
pub fn assert_close(got: f64, want: f64, tol: f64, what: &str) {
    let err = (got - want).abs();
    assert!(
        err <= tol * (1.0 + want.abs()),
        "{what}: got {got}, want {want} (error {err})"
    );
}
