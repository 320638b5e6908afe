//! The pure maths of mlless: sparse vectors, models, losses, optimisers, metrics. No I/O, no
//! async.
//!
//! Models ([`ModelSpec`]): sparse logistic regression (`lr`), a linear SVM with hinge loss
//! (`svm`), biased matrix factorisation of ratings (`pmf`), and k-means clustering (`kmeans`,
//! trained by Lloyd steps — see [`model::kmeans`] — rather than by gradients).
//!
//! Every model is a flat vector of `f32` parameters held by the caller; gradients and the
//! updates that workers exchange are [`SparseVector`]s over it. A gradient-trained worker's step
//! is
//!
//! 1. `model.gradient(&params, &batch, &mut acc)` — the gradient of the batch's mean loss (plus
//!    per-example L2) into a [`GradientAccumulator`], returning the batch's [`BatchLoss`];
//! 2. `delta = optimizer.step(&params, &acc.take(), lr)` — the sparse delta, over the gradient's
//!    coordinates only;
//! 3. every replica applies the mean of the step's deltas with [`apply_mean`] (with one worker,
//!    bit-for-bit `params += delta`).
//!
//! ```
//! use mlless_core::{
//!     Batch, Evaluation, GradientAccumulator, ModelSpec, OptimizerConfig, OptimizerKind,
//!     SparseBatch, apply_mean, build_optimizer,
//! };
//!
//! let spec = ModelSpec::LogisticRegression { features: 3, l2: 1e-4, init_bias: 0.0 };
//! let model = spec.model();
//! let mut params = spec.init_params(0);
//! let mut optimizer = build_optimizer(&OptimizerConfig::new(OptimizerKind::Adam), params.len());
//! let mut acc = GradientAccumulator::new(params.len());
//!
//! let mut rows = SparseBatch::new();
//! rows.push_row(1.0, &[0, 2], &[1.0, 0.5]);
//! rows.push_row(0.0, &[1], &[1.0]);
//! let batch = Batch::Sparse(rows);
//!
//! for _ in 0..50 {
//!     let loss = model.gradient(&params, &batch, &mut acc)?;
//!     assert_eq!(loss.count, 2);
//!     let delta = optimizer.step(&params, &acc.take(), 0.1);
//!     apply_mean(&mut params, &[&delta]);
//! }
//! let mut eval = spec.evaluation();
//! model.evaluate(&params, &batch, &mut eval)?;
//! assert_eq!(eval.finish()["test_accuracy"], 1.0);
//! # Ok::<(), mlless_core::ModelError>(())
//! ```

pub mod batch;
pub mod batch_plan;
pub mod curve;
pub mod filter;
pub mod fit;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod params;
pub mod scale_in;
pub mod sparse;
pub mod validation;
pub mod variants;

pub use batch::{Batch, RatingBatch, RatingCounts, SparseBatch};
pub use batch_plan::BatchPlan;
pub use filter::{
    Compression, CompressionParseError, FilterConfig, FilterStats, SignVector, SignificanceScale,
    UpdateFilter, WireDelta,
};
pub use metrics::{Evaluation, EvaluationError, Metrics, Task, auc, log_loss, log_loss_from_logit};
pub use model::{
    BatchLoss, GradientAccumulator, KMeans, LabelRule, LloydRun, LloydSums, LogisticRegression,
    LrReference, LrReferenceOptions, LrRegularization, MAX_PARAMS, MatrixFactorization, Mlp, Model,
    ModelError, ModelSpec, ParameterBlock, Prediction, Predictor, Svm, Training, kmeans_plus_plus,
    lloyd, lr_reference_objective, sigmoid, solve_lr_reference, solve_svm_reference, svm_objective,
};
pub use optim::{
    Adam, Momentum, Optimizer, OptimizerConfig, OptimizerError, OptimizerKind, OptimizerState,
    ParseError, Schedule, Sgd, build_optimizer,
};
pub use params::{apply_mean, average, mean_of, try_apply_mean};
pub use scale_in::{
    CostFigures, DecisionBasis, Ewma, KneeDetector, Pace, PaceMark, ReferenceCurve, ScaleInConfig,
    ScaleInDecision, ScaleInError, ScaleInRule, ScaleInTuner, Signal, SlowCurve, StepCost,
    StepDurationModel, pick_worker_to_remove,
};
pub use sparse::{SparseError, SparseVector};
pub use validation::{
    Direction, EarlyStopping, MetricTarget, TargetParseError, Verdict, primary_metric,
};
