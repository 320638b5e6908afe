//! Synthetic datasets with known ground truth, written as a stream.
//!
//! Generators write text in an input format (LIBSVM, Criteo TSV or MovieLens `u.data`), so
//! generated data goes through the same `prepare` path as real data:
//!
//! * [`write_sparse_lr`]: sparse binary classification from a logistic model (Criteo-like).
//! * [`write_criteo`]: Criteo display-ads TSV (13 heavy-tailed counts, 26 Zipf-distributed
//!   hex categories, missing values) labelled by a logistic model over the Criteo parser's
//!   hashed features.
//! * [`write_dense_lr`]: dense binary classification from a logistic model (Higgs-like).
//! * [`write_rings`]: concentric rings in 2-D, one class per ring (no linear model fits).
//! * [`write_blobs`]: Gaussian blobs, labelled by blob (for k-means).
//! * [`write_ratings`]: ratings from a low-rank model plus noise.
//!
//! Memory is O(1) in the number of samples: only the true model (weights, factors, centres)
//! and the sampling tables are held. Output is a deterministic function of the spec, seed
//! included (for a given version of `rand`).
//!
//! Independent random streams are derived from the seed for the model and for the samples, so
//! the true model depends only on the fields that define it (for sparse LR: `features`,
//! `informative`, `nnz`, `zipf_exponent`, `margin_std`, `seed`; for dense LR: `features`,
//! `margin_std`, `correlation`, `bias`, `seed`; for Criteo: every field but `samples`; for
//! blobs: `k`, `features`, `box_half_width`, `seed`; for ratings: `users`, `items`, `rank`,
//! `seed`), not on the number of samples.
//!
//! The dense generators write every feature of every row, with 1-based indices like the sparse
//! one (`label 1:v 2:v ... d:v`), values with 4 decimals. A value may be written as `0.0000`:
//! the LIBSVM parser keeps explicit zeros, so parsed rows stay dense.

mod blobs;
mod criteo;
mod dense_lr;
mod ratings;
mod rings;
mod shared;
mod sparse_lr;
#[cfg(test)]
mod tests;

pub use blobs::{BlobsSpec, BlobsTruth, write_blobs};
pub use criteo::{
    CategoricalColumn, CriteoSpec, CriteoTruth, IntegerColumn, criteo_truth, write_criteo,
};
pub use dense_lr::{DENSE_LR_GROUP, DenseLrSpec, DenseLrTruth, write_dense_lr};
pub use ratings::{RATINGS_BASE, RATINGS_BIAS_STD, RatingsSpec, RatingsTruth, write_ratings};
pub use rings::{RingsSpec, RingsTruth, write_rings};
pub use shared::push_u64;
pub use sparse_lr::{FeatureValues, SparseLrSpec, SparseLrTruth, sparse_lr_truth, write_sparse_lr};

/// The largest label or class count of the dense generators: labels are parsed as `f32`,
/// exact up to 2^24.
pub const MAX_CLASSES: u32 = 1 << 24;
