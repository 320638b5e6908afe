//! Sparse binary logistic regression.

use super::Prediction;
use super::linear::LinearModel;
use crate::metrics::{Evaluation, EvaluationError};

/// Binary logistic regression over sparse features: `p(y = 1 | x) = σ(w·x + b)`.
///
/// Parameters `[w_0 .. w_{features-1}, bias]`. The data loss is the log loss, computed from the
/// logit without forming `log(σ)` (softplus form, stable for any logit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogisticRegression {
    features: u32,
    l2: f32,
}

impl LogisticRegression {
    /// A model over `features` features with L2 coefficient `l2`.
    pub fn new(features: u32, l2: f32) -> Self {
        Self { features, l2 }
    }
}

/// The log loss `softplus(z) - y z` of logit `z` and label `y`, and `σ(z)`, computed stably.
#[inline]
pub(crate) fn logistic_loss(z: f64, y: f64) -> (f64, f64) {
    let e = (-z.abs()).exp();
    let loss = z.max(0.0) - y * z + e.ln_1p();
    let p = if z >= 0.0 {
        1.0 / (1.0 + e)
    } else {
        e / (1.0 + e)
    };
    (loss, p)
}

impl LinearModel for LogisticRegression {
    const NAME: &'static str = "lr";
    const TASK: &'static str = "binary";
    const PREDICTION: fn(f64) -> Prediction = Prediction::Logit;
    const PUSH: fn(&mut Evaluation, f64, bool) -> Result<(), EvaluationError> =
        Evaluation::push_logit;

    fn shape(&self) -> (u32, f32) {
        (self.features, self.l2)
    }

    fn loss(z: f64, y: f64) -> (f64, f64) {
        let (loss, p) = logistic_loss(z, y);
        (loss, p - y)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    use super::*;
    use crate::metrics::log_loss;
    use crate::model::ModelError;
    use crate::model::testutil::{
        assert_close, dense, finite_difference, spec_gradient, split_rows, synthetic_linear,
    };
    use crate::model::{BatchLoss, GradientAccumulator, Model, ModelSpec};
    use crate::optim::{OptimizerConfig, OptimizerKind, build_optimizer};
    use crate::{Batch, RatingBatch, SparseBatch};

    /// The regularised objective in f64: the mean over rows of the log loss plus
    /// l2/2 Σ_{j in the row} w_j² (per-example L2).
    fn objective(batch: &SparseBatch, l2: f64, x: &[f64]) -> f64 {
        let features = x.len() - 1;
        let mut sum = 0.0;
        for (label, idx, vals) in batch.iter_rows() {
            let z: f64 = x[features]
                + idx
                    .iter()
                    .zip(vals)
                    .map(|(&j, &v)| x[j as usize] * f64::from(v))
                    .sum::<f64>();
            let p = 1.0 / (1.0 + (-z).exp());
            sum += log_loss(p, f64::from(label));
            sum += 0.5 * l2 * idx.iter().map(|&j| x[j as usize].powi(2)).sum::<f64>();
        }
        sum / batch.rows() as f64
    }

    #[test]
    fn gradient_matches_finite_differences_with_per_example_l2() {
        let mut rng = StdRng::seed_from_u64(1);
        let features = 40;
        let l2 = 0.3_f32;
        // Few rows over many features: some features untouched, some touched by several rows.
        let w = vec![0.0; features as usize];
        let batch = synthetic_linear(&mut rng, 6, &w, 0.0, 8, |rng, _| rng.random_bool(0.5));
        let mut touched: Vec<usize> = batch.indices.iter().map(|&j| j as usize).collect();
        touched.sort_unstable();
        touched.dedup();
        assert!(touched.len() < features as usize, "some features untouched");
        assert!(touched.len() < batch.nnz(), "some features touched twice");

        let spec = ModelSpec::LogisticRegression {
            features,
            l2,
            init_bias: 0.0,
        };
        let params: Vec<f32> = (0..spec.num_params())
            .map(|_| rng.sample::<f32, _>(StandardNormal) * 0.5)
            .collect();
        let (loss, grad) = spec_gradient(&spec, &params, &Batch::Sparse(batch.clone()));

        let x: Vec<f64> = params.iter().map(|&v| f64::from(v)).collect();
        let f = |x: &[f64]| objective(&batch, f64::from(l2), x);
        // Data loss is reported without the L2 term, with the params before the update.
        let data = objective(&batch, 0.0, &x);
        assert_close(loss.mean(), data, 1e-6, "batch loss");
        assert_eq!(loss.count, 6);

        let mut expected_support = touched.clone();
        expected_support.push(features as usize);
        let support: Vec<usize> = grad.indices().iter().map(|&j| j as usize).collect();
        assert_eq!(
            support, expected_support,
            "gradient touches exactly the batch's features + bias"
        );
        let dense = dense(&grad, spec.num_params());
        for (j, want) in finite_difference(f, &x, 0..spec.num_params()) {
            assert_close(f64::from(dense[j]), want, 1e-4, &format!("d/dw_{j}"));
        }
    }

    #[test]
    fn loss_is_stable_for_huge_logits() {
        let spec = ModelSpec::LogisticRegression {
            features: 1,
            l2: 0.0,
            init_bias: 0.0,
        };
        let mut batch = SparseBatch::new();
        batch.push_row(0.0, &[0], &[1.0]);
        batch.push_row(1.0, &[0], &[1.0]);
        let params = vec![1000.0, 0.0];
        let mut acc = GradientAccumulator::new(2);
        let loss = spec
            .model()
            .gradient(&params, &Batch::Sparse(batch), &mut acc)
            .unwrap();
        // Row 0: log loss 1000 (not inf); row 1: ~0.
        assert_close(loss.sum, 1000.0, 1e-12, "loss");
        let g = acc.take();
        assert_eq!(g.values(), &[0.5, 0.5]);
    }

    #[test]
    fn errors_for_untrusted_batches() {
        let model = LogisticRegression::new(5, 0.1);
        let params = vec![0.0; 6];
        let mut acc = GradientAccumulator::new(6);
        let run = |batch: SparseBatch, acc: &mut GradientAccumulator| {
            model.gradient(&params, &Batch::Sparse(batch), acc)
        };

        let mut b = SparseBatch::new();
        b.push_row(1.0, &[0, 5], &[1.0, 1.0]);
        assert_eq!(
            run(b, &mut acc),
            Err(ModelError::FeatureOutOfRange {
                row: 0,
                index: 5,
                features: 5
            })
        );

        let mut b = SparseBatch::new();
        b.push_row(1.0, &[0], &[1.0]);
        b.push_row(-1.0, &[1], &[1.0]);
        assert_eq!(
            run(b, &mut acc),
            Err(ModelError::BadLabel {
                row: 1,
                label: -1.0
            })
        );

        let mut b = SparseBatch::new();
        b.push_row(0.0, &[2], &[f32::NAN]);
        assert!(matches!(
            run(b, &mut acc),
            Err(ModelError::NonFiniteFeature {
                row: 0,
                index: 2,
                ..
            })
        ));

        let mut b = SparseBatch::new();
        b.push_row(0.0, &[2, 3], &[1.0, 1.0]);
        b.offsets[1] = 7; // points past the data
        assert!(matches!(
            run(b.clone(), &mut acc),
            Err(ModelError::MalformedBatch { .. })
        ));
        b.offsets = vec![0, 2, 1, 2]; // decreasing, and a label short
        assert!(matches!(
            run(b.clone(), &mut acc),
            Err(ModelError::MalformedBatch { .. })
        ));
        b.labels.push(1.0);
        b.labels.push(1.0);
        assert!(matches!(
            run(b, &mut acc),
            Err(ModelError::MalformedBatch { .. })
        ));
        // An offset past the entries, then back to their end: an error, not a slice's panic.
        let mut b = SparseBatch::new();
        b.push_row(0.0, &[2], &[1.0]);
        b.push_row(0.0, &[3], &[1.0]);
        b.offsets[1] = 7;
        assert!(matches!(
            run(b, &mut acc),
            Err(ModelError::MalformedBatch { reason }) if reason.contains("past the 2")
        ));
        // The first bad row is named, whatever is wrong with it: an entry of row 0 before a
        // label of row 1.
        let mut b = SparseBatch::new();
        b.push_row(1.0, &[9], &[1.0]);
        b.push_row(-1.0, &[1], &[1.0]);
        assert!(matches!(
            run(b, &mut acc),
            Err(ModelError::FeatureOutOfRange {
                row: 0,
                index: 9,
                ..
            })
        ));

        let mut ratings = RatingBatch::default();
        ratings.push(0, 0, 1.0);
        assert_eq!(
            model.gradient(&params, &Batch::Ratings(ratings.clone()), &mut acc),
            Err(ModelError::WrongBatchKind {
                model: "lr",
                expected: "sparse",
                got: "ratings"
            })
        );
        let mut eval = Evaluation::binary();
        assert!(
            model
                .evaluate(&params, &Batch::Ratings(ratings), &mut eval)
                .is_err()
        );

        let ok = {
            let mut b = SparseBatch::new();
            b.push_row(1.0, &[1], &[1.0]);
            Batch::Sparse(b)
        };
        assert!(matches!(
            model.gradient(&params[..5], &ok, &mut acc),
            Err(ModelError::ParamsLength {
                expected: 6,
                got: 5
            })
        ));
        assert!(matches!(
            model.gradient(&params, &ok, &mut GradientAccumulator::new(7)),
            Err(ModelError::AccumulatorDim { .. })
        ));
        let mut regression = Evaluation::regression();
        assert!(matches!(
            model.evaluate(&params, &ok, &mut regression),
            Err(ModelError::Evaluation(EvaluationError::Kind { .. }))
        ));
        // None of the failures left anything behind.
        assert!(acc.is_empty());
        assert_eq!(regression.samples(), 0);
        // An empty batch is fine.
        let empty = model
            .gradient(&params, &Batch::Sparse(SparseBatch::default()), &mut acc)
            .unwrap();
        assert_eq!(empty, BatchLoss::default());
        assert!(acc.is_empty());
    }

    /// Synthetic sparse LR data with a known weight vector.
    fn synthetic(rng: &mut StdRng, rows: usize, w: &[f64], bias: f64) -> SparseBatch {
        synthetic_linear(rng, rows, w, bias, 6, |rng, z| {
            rng.random_bool(1.0 / (1.0 + (-z).exp()))
        })
    }

    #[test]
    fn adam_converges_to_the_true_log_loss() {
        let mut rng = StdRng::seed_from_u64(11);
        let features = 30;
        let w: Vec<f64> = (0..features)
            .map(|_| 1.5 * rng.sample::<f64, _>(StandardNormal))
            .collect();
        let bias = -0.4;
        let train = synthetic(&mut rng, 6000, &w, bias);
        let test = synthetic(&mut rng, 4000, &w, bias);

        let spec = ModelSpec::LogisticRegression {
            features: features as u32,
            l2: 1e-4,
            init_bias: 0.0,
        };
        let model = spec.model();
        let mut params = spec.init_params(0);
        let mut opt = build_optimizer(&OptimizerConfig::new(OptimizerKind::Adam), params.len());
        let mut acc = GradientAccumulator::new(params.len());
        let batches = split_rows(&train, 100);
        for _epoch in 0..8 {
            for b in &batches {
                model.gradient(&params, b, &mut acc).unwrap();
                let delta = opt.step(&params, &acc.take(), 0.05);
                delta.scaled_add_to(&mut params, 1.0);
            }
        }

        let test_batch = Batch::Sparse(test);
        let mut eval = Evaluation::binary();
        model.evaluate(&params, &test_batch, &mut eval).unwrap();
        let learned = eval.finish();

        let mut truth: Vec<f32> = w.iter().map(|&v| v as f32).collect();
        truth.push(bias as f32);
        let mut eval = Evaluation::binary();
        model.evaluate(&truth, &test_batch, &mut eval).unwrap();
        let ideal = eval.finish();

        let (got, best) = (learned["test_logloss"], ideal["test_logloss"]);
        assert!(
            got < best + 0.01,
            "learned log loss {got} vs true weights {best}"
        );
        assert!(learned["test_auc"] > ideal["test_auc"] - 0.01);
        let initial = std::f64::consts::LN_2;
        assert!(best < initial - 0.2, "the problem is learnable: {best}");
    }
}
