//! [`ModelError`]: why a model cannot compute, and the checks every model makes first.

use super::MAX_PARAMS;
use crate::batch::Batch;

/// What a model's computations return: their value, or why they could not run.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

/// Why a model cannot compute on the given parameters or batch.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The batch is of the wrong kind for the model.
    #[error("model {model} needs a {expected} batch, got a {got} batch")]
    WrongBatchKind {
        /// The model's short name.
        model: &'static str,
        /// The kind it needs.
        expected: &'static str,
        /// The kind it got.
        got: &'static str,
    },
    /// A feature index is not below the model's number of features.
    #[error("row {row}: feature index {index} is out of range (the model has {features} features)")]
    FeatureOutOfRange {
        /// Row of the batch.
        row: usize,
        /// The offending index.
        index: u32,
        /// The model's number of features.
        features: u32,
    },
    /// A label is neither 0 nor 1.
    #[error("row {row}: label {label} is not 0 or 1")]
    BadLabel {
        /// Row of the batch.
        row: usize,
        /// The offending label.
        label: f32,
    },
    /// A label is not a class id, an integer in `0..classes`.
    #[error("row {row}: label {label} is not a class id in 0..{classes}")]
    BadClassLabel {
        /// Row of the batch.
        row: usize,
        /// The offending label.
        label: f32,
        /// The model's number of classes.
        classes: u32,
    },
    /// A feature value is NaN or infinite.
    #[error("row {row}: feature {index} has the non-finite value {value}")]
    NonFiniteFeature {
        /// Row of the batch.
        row: usize,
        /// The feature index.
        index: u32,
        /// The offending value.
        value: f32,
    },
    /// A user id is not below the model's number of users.
    #[error("rating {position}: user id {user} is out of range (the model has {users} users)")]
    UserOutOfRange {
        /// Position of the rating in the batch.
        position: usize,
        /// The offending id.
        user: u32,
        /// The model's number of users.
        users: u32,
    },
    /// An item id is not below the model's number of items.
    #[error("rating {position}: item id {item} is out of range (the model has {items} items)")]
    ItemOutOfRange {
        /// Position of the rating in the batch.
        position: usize,
        /// The offending id.
        item: u32,
        /// The model's number of items.
        items: u32,
    },
    /// A rating is NaN or infinite.
    #[error("rating {position}: the rating {rating} is not finite")]
    NonFiniteRating {
        /// Position of the rating in the batch.
        position: usize,
        /// The offending rating.
        rating: f32,
    },
    /// The batch's arrays are inconsistent (lengths, row offsets).
    #[error("malformed batch: {reason}")]
    MalformedBatch {
        /// What is inconsistent.
        reason: String,
    },
    /// The parameter vector has the wrong length.
    #[error("the model has {expected} parameters, got a vector of {got}")]
    ParamsLength {
        /// The model's number of parameters.
        expected: usize,
        /// The length of the vector given.
        got: usize,
    },
    /// The gradient accumulator has the wrong dimension.
    #[error("the model has {expected} parameters, got an accumulator of dimension {got}")]
    AccumulatorDim {
        /// The model's number of parameters.
        expected: usize,
        /// The accumulator's dimension.
        got: usize,
    },
    /// The evaluation refused the model's predictions (another kind of task).
    #[error(transparent)]
    Evaluation(#[from] crate::metrics::EvaluationError),
    /// The model spec is not trainable.
    #[error("invalid model spec: {reason}")]
    InvalidSpec {
        /// What is wrong.
        reason: String,
    },
    /// The model does not train by gradients (k-means trains by Lloyd steps).
    #[error("model {model} has no gradient: k-means trains by Lloyd steps, not gradients")]
    NoGradient {
        /// The model's short name.
        model: &'static str,
    },
    /// K-means++ needs at least `k` points to seed `k` centroids.
    #[error("k-means++ needs at least {needed} points to seed {needed} centroids, got {got}")]
    TooFewPoints {
        /// The number of clusters k.
        needed: usize,
        /// The number of points in the sample.
        got: usize,
    },
    /// A vector of Lloyd sums (what a k-means worker sends) is malformed.
    #[error("malformed Lloyd sums: {reason}")]
    MalformedLloydSums {
        /// What is wrong.
        reason: String,
    },
}

impl ModelError {
    /// The error of a model that scores sparse rows when it is asked for a rating.
    pub fn rows_only(model: &'static str) -> Self {
        ModelError::WrongBatchKind {
            model,
            expected: "sparse",
            got: "ratings",
        }
    }
}

/// Checks the lengths of the parameter vector and the accumulator against the model's.
pub(crate) fn check_dims(num_params: usize, params: &[f32], acc_dim: Option<usize>) -> Result<()> {
    if num_params > MAX_PARAMS {
        return Err(ModelError::InvalidSpec {
            reason: format!("{num_params} parameters exceed the maximum of {MAX_PARAMS}"),
        });
    }
    if params.len() != num_params {
        return Err(ModelError::ParamsLength {
            expected: num_params,
            got: params.len(),
        });
    }
    match acc_dim {
        Some(dim) if dim != num_params => Err(ModelError::AccumulatorDim {
            expected: num_params,
            got: dim,
        }),
        _ => Ok(()),
    }
}

/// The name of a batch's kind, for errors.
pub(crate) fn batch_kind(batch: &Batch) -> &'static str {
    match batch {
        Batch::Sparse(_) => "sparse",
        Batch::Ratings(_) => "ratings",
    }
}
