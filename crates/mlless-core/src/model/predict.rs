//! Scoring new samples with a trained model: what `mlless predict` prints per input row.
//!
//! Every prediction is computed by the same code as the model's
//! [`evaluate`](super::Model::evaluate), so a test set scored here and pushed into an
//! [`Evaluation`](crate::Evaluation) gives the run record's metrics.
//!
//! ```
//! use mlless_core::{ModelSpec, Prediction, Predictor, SparseBatch};
//! let spec = ModelSpec::LogisticRegression { features: 2, l2: 0.0, init_bias: 0.0 };
//! let params = [1.0, -1.0, 0.5]; // w0, w1, bias
//! let mut rows = SparseBatch::new();
//! rows.push_row(0.0, &[0], &[2.0]); // labels are ignored
//! let predictor = Predictor::new(&spec, &params)?;
//! let [Prediction::Logit(z)] = predictor.predict_rows(&rows)?[..] else { unreachable!() };
//! assert_eq!(z, 2.5);
//! # Ok::<(), mlless_core::ModelError>(())
//! ```

use std::fmt;

use super::{Model, ModelSpec, Result, check_dims};
use crate::batch::SparseBatch;

/// What a model predicts for one sample.
#[derive(Debug, Clone, PartialEq)]
pub enum Prediction {
    /// Logistic regression: the logit `z = w·x + b`; the probability of class 1 is `σ(z)`,
    /// and the predicted class is 1 when `z > 0`.
    Logit(f64),
    /// Linear SVM: the margin `w·x + b`; the predicted class is 1 when it is positive.
    Margin(f64),
    /// Matrix factorisation: the predicted rating.
    Rating(f64),
    /// K-means: the nearest centroid (lowest index among ties) and the squared Euclidean
    /// distance to it.
    Cluster {
        /// The centroid's index.
        cluster: u32,
        /// The squared distance of the point to it.
        sq_distance: f64,
    },
    /// MLP: one logit per class; see [`Prediction::probabilities`] and
    /// [`Prediction::class`].
    Classes(Vec<f32>),
}

impl Prediction {
    /// The predicted class (LR, SVM: 0 or 1; MLP: the first class with the largest logit;
    /// k-means: the cluster); `None` for a rating.
    pub fn class(&self) -> Option<u32> {
        match self {
            Prediction::Logit(z) | Prediction::Margin(z) => Some(u32::from(*z > 0.0)),
            Prediction::Rating(_) => None,
            Prediction::Cluster { cluster, .. } => Some(*cluster),
            Prediction::Classes(logits) => {
                let (mut best, mut max) = (0, f32::NEG_INFINITY);
                for (k, &z) in logits.iter().enumerate() {
                    if z > max {
                        (best, max) = (k as u32, z);
                    }
                }
                Some(best)
            }
        }
    }

    /// The class probabilities: LR `[1 − σ(z), σ(z)]`, MLP the softmax of the logits; empty for
    /// the others.
    pub fn probabilities(&self) -> Vec<f64> {
        match self {
            Prediction::Logit(z) => {
                let p = sigmoid(*z);
                vec![1.0 - p, p]
            }
            Prediction::Classes(logits) => {
                let max = logits
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &z| m.max(f64::from(z)));
                let exps: Vec<f64> = logits.iter().map(|&z| (f64::from(z) - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                exps.into_iter().map(|e| e / sum).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// `σ(z)`, computed without overflow for any `z`.
pub fn sigmoid(z: f64) -> f64 {
    let e = (-z.abs()).exp();
    if z >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    }
}

/// A trained model ready to score samples: its spec, its model and its flat parameters,
/// checked. Each prediction is the model's ([`Model::predict_rows`],
/// [`Model::predict_rating`]).
pub struct Predictor<'a> {
    spec: &'a ModelSpec,
    model: Box<dyn Model>,
    params: &'a [f32],
}

impl fmt::Debug for Predictor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Predictor")
            .field("spec", self.spec)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl<'a> Predictor<'a> {
    /// Checks that `spec` is valid and `params` has its number of parameters.
    pub fn new(spec: &'a ModelSpec, params: &'a [f32]) -> Result<Self> {
        spec.validate()?;
        check_dims(spec.num_params(), params, None)?;
        Ok(Self {
            spec,
            model: spec.model(),
            params,
        })
    }

    /// The spec of the model.
    pub fn spec(&self) -> &ModelSpec {
        self.spec
    }

    /// Predicts every row of `rows` (LR, SVM, k-means, MLP); labels are ignored. Feature
    /// indices must be below the model's features and values finite, as in training.
    pub fn predict_rows(&self, rows: &SparseBatch) -> Result<Vec<Prediction>> {
        self.model.predict_rows(self.params, rows)
    }

    /// Predicts the rating of `(user, item)` by model ids (PMF); `None` is an id the model
    /// does not know, which contributes neither factors nor a bias: the prediction is the mean
    /// plus the known biases.
    pub fn predict_rating(&self, user: Option<u32>, item: Option<u32>) -> Result<f64> {
        self.model.predict_rating(self.params, user, item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelError;
    use crate::batch::{Batch, RatingBatch};
    use crate::metrics::Evaluation;

    fn rows() -> SparseBatch {
        let mut rows = SparseBatch::new();
        rows.push_row(1.0, &[0, 2], &[1.0, -0.5]);
        rows.push_row(0.0, &[1], &[2.0]);
        rows.push_row(1.0, &[], &[]);
        rows
    }

    /// Scoring then pushing into an evaluation gives the model's own evaluation.
    fn assert_same_metrics(spec: &ModelSpec, params: &[f32], batch: &Batch, pushed: Evaluation) {
        let mut want = spec.evaluation();
        spec.model().evaluate(params, batch, &mut want).unwrap();
        assert_eq!(pushed.finish(), want.finish(), "{}", spec.name());
    }

    #[test]
    fn linear_predictions_match_the_evaluation() {
        let rows = rows();
        for spec in [
            ModelSpec::LogisticRegression {
                features: 3,
                l2: 0.0,
                init_bias: 0.0,
            },
            ModelSpec::Svm {
                features: 3,
                l2: 0.0,
            },
        ] {
            let params = [0.5, -1.0, 2.0, 0.25];
            let predictions = Predictor::new(&spec, &params)
                .unwrap()
                .predict_rows(&rows)
                .unwrap();
            let mut eval = spec.evaluation();
            for (p, (label, _, _)) in predictions.iter().zip(rows.iter_rows()) {
                match *p {
                    Prediction::Logit(z) => eval.push_logit(z, label == 1.0).unwrap(),
                    Prediction::Margin(z) => eval.push_margin(z, label == 1.0).unwrap(),
                    _ => panic!("{p:?}"),
                }
            }
            assert_eq!(predictions[0].class(), Some(0)); // 0.5 - 1 + 0.25 < 0
            assert_eq!(predictions[1].class(), Some(0));
            assert_eq!(predictions[2].class(), Some(1));
            assert_same_metrics(&spec, &params, &Batch::Sparse(rows.clone()), eval);
        }
        let p = Prediction::Logit(0.0).probabilities();
        assert_eq!(p, vec![0.5, 0.5]);
        assert!((sigmoid(-800.0)).is_finite() && sigmoid(800.0) == 1.0);
    }

    #[test]
    fn kmeans_and_mlp_predictions_match_the_evaluation() {
        let rows = rows();
        let spec = ModelSpec::KMeans { features: 3, k: 2 };
        let params = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let predictions = Predictor::new(&spec, &params)
            .unwrap()
            .predict_rows(&rows)
            .unwrap();
        let mut eval = spec.evaluation();
        for p in &predictions {
            let Prediction::Cluster { sq_distance, .. } = p else {
                panic!("{p:?}")
            };
            eval.push_sq_distance(*sq_distance).unwrap();
        }
        assert_eq!(predictions[2].class(), Some(0));
        assert_same_metrics(&spec, &params, &Batch::Sparse(rows.clone()), eval);

        let spec = ModelSpec::Mlp {
            features: 3,
            hidden: vec![4],
            classes: 3,
            l2: 0.0,
        };
        let params = spec.init_params(3);
        let mut labelled = rows.clone();
        labelled.labels = vec![2.0, 0.0, 1.0];
        let predictions = Predictor::new(&spec, &params)
            .unwrap()
            .predict_rows(&rows)
            .unwrap();
        let mut eval = spec.evaluation();
        for (p, &label) in predictions.iter().zip(&labelled.labels) {
            let Prediction::Classes(logits) = p else {
                panic!("{p:?}")
            };
            eval.push_class_logits(logits, label as u32).unwrap();
            let probs = p.probabilities();
            assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            // The first of the largest probabilities (the empty row ties every class).
            let max = probs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let best = probs.iter().position(|&q| q == max).map(|k| k as u32);
            assert_eq!(best, p.class());
        }
        assert_same_metrics(&spec, &params, &Batch::Sparse(labelled), eval);
    }

    #[test]
    fn ratings_fall_back_to_the_known_biases() {
        let spec = ModelSpec::MatrixFactorization {
            users: 2,
            items: 3,
            factors: 2,
            l2: 0.0,
            mean: 3.0,
            init_std: 0.1,
            prior: 0.0,
        };
        let mut params = spec.init_params(1);
        // Biases: users [0.5, -0.5], items [0.1, 0.2, 0.3].
        let n = params.len();
        params[n - 5..].copy_from_slice(&[0.5, -0.5, 0.1, 0.2, 0.3]);
        let p = Predictor::new(&spec, &params).unwrap();
        assert_eq!(p.predict_rating(None, None).unwrap(), 3.0);
        assert_eq!(
            p.predict_rating(Some(1), None).unwrap(),
            f64::from(3.0f32 - 0.5)
        );
        assert_eq!(
            p.predict_rating(None, Some(2)).unwrap(),
            f64::from(3.0f32 + 0.3)
        );
        assert!(p.predict_rating(Some(2), None).is_err());
        assert!(p.predict_rating(None, Some(3)).is_err());
        let ratings = RatingBatch {
            users: vec![0, 1, 1],
            items: vec![2, 0, 1],
            ratings: vec![4.0, 2.0, 3.5],
        };
        let mut eval = spec.evaluation();
        for (u, i, r) in ratings.iter() {
            let predicted = p.predict_rating(Some(u), Some(i)).unwrap();
            eval.push_rating(predicted, f64::from(r)).unwrap();
        }
        assert_same_metrics(&spec, &params, &Batch::Ratings(ratings), eval);
        assert!(p.predict_rows(&rows()).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        let spec = ModelSpec::LogisticRegression {
            features: 2,
            l2: 0.0,
            init_bias: 0.0,
        };
        assert!(Predictor::new(&spec, &[0.0; 2]).is_err());
        let p = Predictor::new(&spec, &[0.0; 3]).unwrap();
        assert!(matches!(
            p.predict_rows(&rows()),
            Err(ModelError::FeatureOutOfRange { index: 2, .. })
        ));
        assert!(p.predict_rating(Some(0), Some(0)).is_err());
    }
}
