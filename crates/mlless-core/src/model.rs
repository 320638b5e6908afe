//! Models: what they are ([`ModelSpec`]), how they compute a gradient and evaluate ([`Model`]).
//!
//! Every model is a flat `Vec<f32>` of parameters held by the caller; the model itself is
//! stateless (it holds only its hyper-parameters), so one instance serves any number of replicas
//! and threads.
//!
//! ```
//! use mlless_core::{Batch, GradientAccumulator, ModelSpec, SparseBatch};
//! let spec = ModelSpec::LogisticRegression { features: 4, l2: 0.0, init_bias: 0.0 };
//! let params = spec.init_params(7);
//! let mut batch = SparseBatch::new();
//! batch.push_row(1.0, &[0, 3], &[1.0, 2.0]);
//! let mut acc = GradientAccumulator::new(spec.num_params());
//! let loss = spec.model().gradient(&params, &Batch::Sparse(batch), &mut acc).unwrap();
//! assert_eq!(loss.count, 1);
//! assert!((loss.mean() - std::f64::consts::LN_2).abs() < 1e-12);
//! // Coordinates 0 and 3, and the bias (index 4).
//! assert_eq!(acc.take().indices(), &[0, 3, 4]);
//! ```

mod accumulator;
mod error;
mod factorization;
pub mod kmeans;
mod linear;
mod logistic;
pub mod lr_reference;
mod mlp;
pub mod predict;
pub mod svm;

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::batch::{Batch, RatingCounts, SparseBatch};
use crate::metrics::{Evaluation, Task};

pub use accumulator::GradientAccumulator;
pub(crate) use accumulator::SupportSums;
pub use error::{ModelError, Result};
pub(crate) use error::{batch_kind, check_dims};
pub use factorization::MatrixFactorization;
pub use kmeans::{KMeans, LloydRun, LloydSums, kmeans_plus_plus, lloyd};
pub use linear::LabelRule;
pub use logistic::LogisticRegression;
pub use lr_reference::{
    LrReference, LrReferenceOptions, LrRegularization, lr_reference_objective, solve_lr_reference,
};
pub use mlp::Mlp;
pub use predict::{Prediction, Predictor, sigmoid};
pub use svm::{Svm, solve_svm_reference, svm_objective};

/// The largest number of parameters a model may have: every index must fit a `u32`.
pub const MAX_PARAMS: usize = u32::MAX as usize + 1;

/// What model to train, with its shape and hyper-parameters; part of the job spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelSpec {
    /// Binary logistic regression over sparse features, labels 0/1.
    ///
    /// Parameter layout: `[w_0 .. w_{features-1}, bias]`.
    LogisticRegression {
        /// Number of features (the bias is extra).
        features: u32,
        /// L2 coefficient, applied lazily to the weights a batch touches (never to the bias).
        l2: f32,
        /// The bias the model starts from (the weights start at 0): the training set's log-odds
        /// `ln(r / (1 − r))` by default, so that training starts at the base rate. Absent from
        /// older specs, where it is 0.
        #[serde(default)]
        init_bias: f32,
    },
    /// Biased probabilistic matrix factorisation of ratings.
    ///
    /// Parameter layout: `[user factors U×K][item factors I×K][user biases U][item biases I]`;
    /// prediction `mean + b_u + b_i + <p_u, q_i>`.
    MatrixFactorization {
        /// Number of users U (ids `0..U`).
        users: u32,
        /// Number of items I (ids `0..I`).
        items: u32,
        /// Number of latent factors K.
        factors: u32,
        /// L2 coefficient, applied lazily to the factors and biases a batch touches.
        l2: f32,
        /// The global mean rating, a constant offset of every prediction.
        mean: f32,
        /// Standard deviation of the initial factors (biases start at 0).
        init_std: f32,
        /// Coefficient of the count-aware prior on each user's and item's parameters, added to
        /// `l2` as `prior / count` per rating (see [`MatrixFactorization::with_prior`]); it
        /// needs the data set's rating counts. Absent from older specs, where it is 0.
        #[serde(default)]
        prior: f32,
    },
    /// Linear support vector machine over sparse features: hinge loss, labels 0/1 taken as
    /// −1/+1.
    ///
    /// Parameter layout as logistic regression: `[w_0 .. w_{features-1}, bias]`.
    Svm {
        /// Number of features (the bias is extra).
        features: u32,
        /// L2 coefficient, applied lazily to the weights a batch touches (never to the bias).
        l2: f32,
    },
    /// K-means clustering of sparse rows (labels ignored), trained by Lloyd steps
    /// ([`kmeans`]), not gradients.
    ///
    /// Parameter layout: the `k` centroids, row-major (`[c_0 (features)][c_1]..[c_{k-1}]`).
    #[serde(rename = "kmeans")]
    KMeans {
        /// Number of features of a point.
        features: u32,
        /// Number of clusters (at least 1).
        k: u32,
    },
    /// A dense neural network over sparse features: one or two ReLU hidden layers and a
    /// softmax over `classes` outputs; labels are class ids `0..classes`.
    ///
    /// Parameter layout, layer by layer from the input: the weights `in × out` row-major (row =
    /// input unit, so a sparse input row reads whole rows), then the `out` biases. See [`Mlp`].
    Mlp {
        /// Number of input features.
        features: u32,
        /// Widths of the hidden layers (one or two, each at least 1).
        hidden: Vec<u32>,
        /// Number of classes (at least 2).
        classes: u32,
        /// L2 coefficient on the weights (never the biases); see [`Mlp`].
        l2: f32,
    },
}

/// A named block of a model's flat parameter vector ([`ModelSpec::parameter_blocks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParameterBlock {
    /// Its name, e.g. `"weights"`, `"user_factors"`, `"layer0.weight"`.
    pub name: String,
    /// Its shape, row-major; the product is the length of `range`.
    pub shape: Vec<usize>,
    /// Where it lies in the flat vector.
    pub range: std::ops::Range<usize>,
}

impl ModelSpec {
    /// Number of parameters of the flat parameter vector (saturating at `usize::MAX`).
    pub fn num_params(&self) -> usize {
        let n: u128 = match *self {
            ModelSpec::LogisticRegression { features, .. } | ModelSpec::Svm { features, .. } => {
                u128::from(features) + 1
            }
            ModelSpec::KMeans { features, k } => u128::from(features) * u128::from(k),
            ModelSpec::Mlp {
                features,
                ref hidden,
                classes,
                ..
            } => mlp::num_params(features, hidden, classes),
            ModelSpec::MatrixFactorization {
                users,
                items,
                factors,
                ..
            } => (u128::from(users) + u128::from(items)) * (u128::from(factors) + 1),
        };
        usize::try_from(n).unwrap_or(usize::MAX)
    }

    /// Short name of the model family: `"lr"`, `"pmf"`, `"svm"`, `"kmeans"` or `"mlp"`.
    pub fn name(&self) -> &'static str {
        match self {
            ModelSpec::LogisticRegression { .. } => "lr",
            ModelSpec::MatrixFactorization { .. } => "pmf",
            ModelSpec::Svm { .. } => "svm",
            ModelSpec::KMeans { .. } => "kmeans",
            ModelSpec::Mlp { .. } => "mlp",
        }
    }

    /// What the model requires of its rows' labels (the rule its training applies to every
    /// batch).
    ///
    /// ```
    /// use mlless_core::{LabelRule, ModelSpec};
    /// let svm = ModelSpec::Svm { features: 2, l2: 0.0 };
    /// assert_eq!(svm.label_rule(), LabelRule::Binary);
    /// let kmeans = ModelSpec::KMeans { features: 2, k: 3 };
    /// assert_eq!(kmeans.label_rule(), LabelRule::Ignored);
    /// ```
    pub fn label_rule(&self) -> LabelRule {
        match *self {
            ModelSpec::LogisticRegression { .. } | ModelSpec::Svm { .. } => LabelRule::Binary,
            ModelSpec::Mlp { classes, .. } => LabelRule::Classes(classes),
            ModelSpec::KMeans { .. } | ModelSpec::MatrixFactorization { .. } => LabelRule::Ignored,
        }
    }

    /// How the model trains: what a worker runs each step.
    ///
    /// ```
    /// use mlless_core::{ModelSpec, Training};
    /// let kmeans = ModelSpec::KMeans { features: 2, k: 3 };
    /// assert_eq!(kmeans.training(), Training::Lloyd { k: 3, features: 2 });
    /// let svm = ModelSpec::Svm { features: 2, l2: 0.0 };
    /// assert_eq!(svm.training(), Training::Gradients);
    /// ```
    pub fn training(&self) -> Training {
        match *self {
            ModelSpec::LogisticRegression { .. }
            | ModelSpec::MatrixFactorization { .. }
            | ModelSpec::Svm { .. }
            | ModelSpec::Mlp { .. } => Training::Gradients,
            ModelSpec::KMeans { features, k } => Training::Lloyd { k, features },
        }
    }

    /// The model in words, for reports: `"lr (sparse logistic regression, 100000 features, L2
    /// 0.0001)"`, for PMF its users, items and factors, for an MLP its shape.
    pub fn describe(&self) -> String {
        let detail = match self {
            ModelSpec::LogisticRegression { features, l2, .. } => {
                format!("sparse logistic regression, {features} features, L2 {l2}")
            }
            ModelSpec::MatrixFactorization {
                users,
                items,
                factors,
                l2,
                ..
            } => format!(
                "matrix factorisation, {users} users × {items} items, {factors} factors, L2 {l2}"
            ),
            ModelSpec::Svm { features, l2 } => {
                format!("linear SVM, {features} features, L2 {l2}")
            }
            ModelSpec::KMeans { features, k } => format!("k-means, k = {k}, {features} features"),
            ModelSpec::Mlp {
                features,
                hidden,
                classes,
                l2,
            } => format!(
                "dense network, {features} features, hidden {hidden:?}, {classes} classes, L2 {l2}"
            ),
        };
        format!("{} ({detail})", self.name())
    }

    /// The number of input features of a model of feature rows; `None` for matrix
    /// factorisation, whose input is (user, item) pairs.
    pub fn input_features(&self) -> Option<u32> {
        match *self {
            ModelSpec::LogisticRegression { features, .. }
            | ModelSpec::Svm { features, .. }
            | ModelSpec::KMeans { features, .. }
            | ModelSpec::Mlp { features, .. } => Some(features),
            ModelSpec::MatrixFactorization { .. } => None,
        }
    }

    /// The flat parameter vector cut into its named blocks, in order, each with its shape
    /// (row-major): what an export writes as tensors.
    ///
    /// ```
    /// use mlless_core::ModelSpec;
    /// let lr = ModelSpec::LogisticRegression { features: 3, l2: 0.0, init_bias: 0.0 };
    /// let blocks = lr.parameter_blocks();
    /// assert_eq!(blocks[0].name, "weights");
    /// assert_eq!((blocks[1].range.clone(), blocks[1].shape.clone()), (3..4, vec![1]));
    /// ```
    pub fn parameter_blocks(&self) -> Vec<ParameterBlock> {
        let mut blocks = Vec::new();
        let mut push = |name: String, shape: Vec<usize>| {
            let start = blocks.last().map_or(0, |b: &ParameterBlock| b.range.end);
            let len = shape.iter().product::<usize>();
            blocks.push(ParameterBlock {
                name,
                shape,
                range: start..start + len,
            });
        };
        match *self {
            ModelSpec::LogisticRegression { features, .. } | ModelSpec::Svm { features, .. } => {
                push("weights".into(), vec![features as usize]);
                push("bias".into(), vec![1]);
            }
            ModelSpec::MatrixFactorization {
                users,
                items,
                factors,
                ..
            } => {
                let (u, i, k) = (users as usize, items as usize, factors as usize);
                push("user_factors".into(), vec![u, k]);
                push("item_factors".into(), vec![i, k]);
                push("user_bias".into(), vec![u]);
                push("item_bias".into(), vec![i]);
            }
            ModelSpec::KMeans { features, k } => {
                push("centroids".into(), vec![k as usize, features as usize]);
            }
            ModelSpec::Mlp {
                features,
                ref hidden,
                classes,
                ..
            } => {
                let mut inputs = features as usize;
                for (n, &width) in hidden.iter().chain([&classes]).enumerate() {
                    let outputs = width as usize;
                    push(format!("layer{n}.weight"), vec![inputs, outputs]);
                    push(format!("layer{n}.bias"), vec![outputs]);
                    inputs = outputs;
                }
            }
        }
        blocks
    }

    /// The header of the CSV that `mlless predict` writes for rows of features
    /// (`"probability,label"`, …, an MLP's `"p0,p1,…,label"`); `None` for matrix
    /// factorisation, which predicts (user, item) pairs and writes its own.
    pub fn prediction_header(&self) -> Option<String> {
        match *self {
            ModelSpec::LogisticRegression { .. } => Some("probability,label".into()),
            ModelSpec::Svm { .. } => Some("margin,label".into()),
            ModelSpec::KMeans { .. } => Some("cluster,distance".into()),
            ModelSpec::Mlp { classes, .. } => {
                let columns: Vec<String> = (0..classes).map(|c| format!("p{c}")).collect();
                Some(format!("{},label", columns.join(",")))
            }
            ModelSpec::MatrixFactorization { .. } => None,
        }
    }

    /// What the model predicts, hence its evaluation and metrics.
    pub fn task(&self) -> Task {
        match self {
            ModelSpec::LogisticRegression { .. } => Task::Binary,
            ModelSpec::MatrixFactorization { .. } => Task::Regression,
            ModelSpec::Svm { .. } => Task::Margin,
            ModelSpec::KMeans { .. } => Task::Clustering,
            ModelSpec::Mlp { .. } => Task::Multiclass,
        }
    }

    /// An empty evaluation of the model's predictions: that of its [`task`](Self::task).
    pub fn evaluation(&self) -> Evaluation {
        Evaluation::for_task(self.task())
    }

    /// Checks that the spec describes a trainable model: finite, non-negative hyper-parameters,
    /// at least one feature and one cluster for k-means, and at most [`MAX_PARAMS`] parameters.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Err(ModelError::InvalidSpec { reason });
        let n = self.num_params();
        if n > MAX_PARAMS {
            return invalid(format!(
                "{n} parameters exceed the maximum of {MAX_PARAMS} (u32 indices)"
            ));
        }
        match *self {
            ModelSpec::LogisticRegression { l2, init_bias, .. } => {
                if !(l2.is_finite() && l2 >= 0.0) {
                    return invalid(format!("l2 must be finite and >= 0, got {l2}"));
                }
                if !init_bias.is_finite() {
                    return invalid(format!("init_bias must be finite, got {init_bias}"));
                }
            }
            ModelSpec::Svm { l2, .. } => {
                if !(l2.is_finite() && l2 >= 0.0) {
                    return invalid(format!("l2 must be finite and >= 0, got {l2}"));
                }
            }
            ModelSpec::MatrixFactorization {
                l2,
                mean,
                init_std,
                prior,
                ..
            } => {
                if !(l2.is_finite() && l2 >= 0.0) {
                    return invalid(format!("l2 must be finite and >= 0, got {l2}"));
                }
                if !(prior.is_finite() && prior >= 0.0) {
                    return invalid(format!("prior must be finite and >= 0, got {prior}"));
                }
                if !mean.is_finite() {
                    return invalid(format!("mean must be finite, got {mean}"));
                }
                if !(init_std.is_finite() && init_std >= 0.0) {
                    return invalid(format!("init_std must be finite and >= 0, got {init_std}"));
                }
            }
            ModelSpec::KMeans { features, k } => {
                if features == 0 || k == 0 {
                    return invalid(format!(
                        "k-means needs k >= 1 and features >= 1, got k = {k}, features = {features}"
                    ));
                }
            }
            ModelSpec::Mlp {
                ref hidden,
                classes,
                l2,
                ..
            } => {
                if !(l2.is_finite() && l2 >= 0.0) {
                    return invalid(format!("l2 must be finite and >= 0, got {l2}"));
                }
                mlp::check_shape(hidden, classes).or_else(invalid)?;
            }
        }
        Ok(())
    }

    /// The initial parameters, identical for identical seeds (every worker starts from the same
    /// replica).
    ///
    /// Logistic regression starts with zero weights and its `init_bias`; the SVM at zero; so
    /// does k-means, whose runtime seeds the
    /// centroids with [`kmeans_plus_plus`] on the data instead. Matrix factorisation draws its factors from
    /// N(0, init_std²) with a `StdRng` seeded by `seed` (factors in layout order: users, then
    /// items), and starts its biases at 0. `StdRng`'s stream is fixed for a given `rand`
    /// version on every platform, so all workers of a job agree; it may change across `rand`
    /// releases, which matters only for resuming a job with a differently built binary, and
    /// such a job resumes from a checkpoint, not from a seed. The MLP draws He-normal weights
    /// the same way (see [`Mlp::init_params`]).
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let n = self.num_params();
        match *self {
            ModelSpec::LogisticRegression { init_bias, .. } => {
                let mut params = vec![0.0; n];
                if let Some(bias) = params.last_mut() {
                    *bias = init_bias;
                }
                params
            }
            ModelSpec::Svm { .. } | ModelSpec::KMeans { .. } => vec![0.0; n],
            ModelSpec::Mlp {
                features,
                ref hidden,
                classes,
                l2,
            } => Mlp::new(features, hidden, classes, l2).init_params(seed),
            ModelSpec::MatrixFactorization {
                users,
                items,
                factors,
                init_std,
                ..
            } => {
                let n_factors = (users as usize + items as usize) * factors as usize;
                let mut rng = StdRng::seed_from_u64(seed);
                let mut params = Vec::with_capacity(n);
                params.extend((0..n_factors).map(|_| {
                    let z: f64 = rng.sample(StandardNormal);
                    (z * f64::from(init_std)) as f32
                }));
                params.resize(n, 0.0);
                params
            }
        }
    }

    /// The model that trains on this spec: [`Self::model`], with matrix factorisation's
    /// count-aware prior when its coefficient is positive, for which `counts` are the training
    /// set's (see [`MatrixFactorization::with_prior`]). Errs when the prior needs counts and
    /// there are none, or they do not fit the model.
    pub fn training_model(&self, counts: Option<Arc<RatingCounts>>) -> Result<Box<dyn Model>> {
        match *self {
            ModelSpec::MatrixFactorization {
                users,
                items,
                factors,
                l2,
                mean,
                prior,
                ..
            } if prior > 0.0 => {
                let counts = counts.ok_or_else(|| ModelError::InvalidSpec {
                    reason: format!(
                        "the count-aware prior ({prior}) needs the data set's rating counts"
                    ),
                })?;
                Ok(Box::new(
                    MatrixFactorization::new(users, items, factors, l2, mean)
                        .with_prior(prior, counts)?,
                ))
            }
            _ => Ok(self.model()),
        }
    }

    /// The model that evaluates and predicts with this spec, and computes its gradients but
    /// for matrix factorisation's count-aware prior, which needs the data set's counts
    /// ([`Self::training_model`]).
    pub fn model(&self) -> Box<dyn Model> {
        match *self {
            ModelSpec::LogisticRegression { features, l2, .. } => {
                Box::new(LogisticRegression::new(features, l2))
            }
            ModelSpec::MatrixFactorization {
                users,
                items,
                factors,
                l2,
                mean,
                ..
            } => Box::new(MatrixFactorization::new(users, items, factors, l2, mean)),
            ModelSpec::Svm { features, l2 } => Box::new(Svm::new(features, l2)),
            ModelSpec::KMeans { features, k } => Box::new(KMeans::new(k, features)),
            ModelSpec::Mlp {
                features,
                ref hidden,
                classes,
                l2,
            } => Box::new(Mlp::new(features, hidden, classes, l2)),
        }
    }
}

/// How a model trains ([`ModelSpec::training`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Training {
    /// By the gradients of minibatches, through an optimiser ([`Model::gradient`]): each step
    /// reads the worker's minibatch.
    Gradients,
    /// By Lloyd iterations ([`LloydSums`]): each step reads the whole data set (a worker, its
    /// shard) and the workers exchange per-cluster sums.
    Lloyd {
        /// Number of clusters.
        k: u32,
        /// Number of features of a point.
        features: u32,
    },
}

/// A model: the gradient and the evaluation of a flat parameter vector on a batch.
pub trait Model: Send + Sync {
    /// The model family's short name, as [`ModelSpec::name`] and errors give it.
    fn name(&self) -> &'static str;

    /// Number of parameters the model expects.
    fn num_params(&self) -> usize;

    // L2 is per example: each sample adds `l2/2 · Σ w_j²` over the parameters it uses (LR and
    // SVM: the weights of its features, not the bias; PMF: its user's and item's factors and biases). The
    // gradient is then the mean over the batch, so the regularisation does not change with the
    // batch size, untouched coordinates cost nothing, and frequent parameters are held as
    // firmly as their data pulls them, as per-example SGD does in LIBLINEAR-style and
    // matrix-factorisation trainers.

    /// Adds to `acc` the gradient of the batch's mean regularised loss, and returns the data loss summed over the batch's samples, computed with
    /// `params` as given (before any update).
    ///
    /// The batch is untrusted: out-of-range ids, bad labels, non-finite values, malformed
    /// layouts and a batch of the wrong kind are errors, and on error `acc` is left unchanged.
    /// By default, for a model that does not train by gradients (k-means, [`Training::Lloyd`]),
    /// [`ModelError::NoGradient`].
    fn gradient(
        &self,
        _params: &[f32],
        _batch: &Batch,
        _acc: &mut GradientAccumulator,
    ) -> Result<BatchLoss> {
        Err(ModelError::NoGradient { model: self.name() })
    }

    /// Adds the model's predictions on `batch` to `eval`.
    ///
    /// Validates the batch as [`gradient`](Self::gradient) does; on error `eval` is unchanged.
    fn evaluate(&self, params: &[f32], batch: &Batch, eval: &mut Evaluation) -> Result<()>;

    /// Predicts every row of `rows` (labels ignored) with the same per-sample code as
    /// [`evaluate`](Self::evaluate); `params` has the model's length ([`Predictor::new`]
    /// checks it). Feature indices must be below the model's features and values finite, as
    /// in training. A model that scores no rows (PMF) returns [`ModelError::WrongBatchKind`].
    fn predict_rows(&self, params: &[f32], rows: &SparseBatch) -> Result<Vec<Prediction>>;

    /// Predicts the rating of `(user, item)` by model ids, `None` an id the model does not
    /// know (see [`Predictor::predict_rating`]). By default, for a model that predicts no
    /// ratings, [`ModelError::rows_only`].
    fn predict_rating(
        &self,
        _params: &[f32],
        _user: Option<u32>,
        _item: Option<u32>,
    ) -> Result<f64> {
        Err(ModelError::rows_only(self.name()))
    }
}

/// The data loss of some samples: its sum and the number of samples.
///
/// Logistic regression reports the log loss, the SVM the hinge loss, matrix factorisation the
/// squared error; none includes the L2 term.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchLoss {
    /// Sum of the per-sample losses.
    pub sum: f64,
    /// Number of samples.
    pub count: u64,
}

impl BatchLoss {
    /// A loss of `sum` over `count` samples.
    pub fn new(sum: f64, count: u64) -> Self {
        Self { sum, count }
    }

    /// The mean loss per sample; NaN when there is no sample (the mean is undefined).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            f64::NAN
        } else {
            self.sum / self.count as f64
        }
    }

    /// Adds the samples of `other` to `self`.
    pub fn merge(&mut self, other: BatchLoss) {
        self.sum += other.sum;
        self.count += other.count;
    }
}

impl std::ops::Add for BatchLoss {
    type Output = BatchLoss;
    fn add(mut self, other: BatchLoss) -> BatchLoss {
        self.merge(other);
        self
    }
}

impl std::ops::AddAssign for BatchLoss {
    fn add_assign(&mut self, other: BatchLoss) {
        self.merge(other);
    }
}

impl std::iter::Sum for BatchLoss {
    fn sum<I: Iterator<Item = BatchLoss>>(iter: I) -> BatchLoss {
        iter.fold(BatchLoss::default(), |a, b| a + b)
    }
}

#[cfg(test)]
pub(crate) mod testutil;

#[cfg(test)]
mod tests;
