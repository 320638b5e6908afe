//! Sparse binary logistic regression.

use super::{BatchLoss, GradientAccumulator, Model, ModelError, batch_kind, check_dims};
use crate::batch::{Batch, SparseBatch};
use crate::metrics::Evaluation;

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

    /// Checks parameters and batch, returning the batch's rows.
    fn prepare<'b>(
        &self,
        params: &[f32],
        batch: &'b Batch,
        acc_dim: Option<usize>,
    ) -> Result<&'b SparseBatch, ModelError> {
        check_dims(self.features as usize + 1, params, acc_dim)?;
        let Batch::Sparse(rows) = batch else {
            return Err(ModelError::WrongBatchKind {
                model: "lr",
                expected: "sparse",
                got: batch_kind(batch),
            });
        };
        validate_sparse(rows, self.features, |row, label| {
            if label == 0.0 || label == 1.0 {
                Ok(())
            } else {
                Err(ModelError::BadLabel { row, label })
            }
        })?;
        Ok(rows)
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

/// Checks the CSR layout, the labels (with `check_label(row, label)`), the indices and the
/// values of an untrusted batch.
pub(crate) fn validate_sparse(
    batch: &SparseBatch,
    features: u32,
    check_label: impl Fn(usize, f32) -> Result<(), ModelError>,
) -> Result<(), ModelError> {
    let malformed = |reason: String| Err(ModelError::MalformedBatch { reason });
    let rows = batch.labels.len();
    if batch.values.len() != batch.indices.len() {
        return malformed(format!(
            "{} feature indices but {} values",
            batch.indices.len(),
            batch.values.len()
        ));
    }
    if batch.offsets.is_empty() && rows == 0 && batch.indices.is_empty() {
        return Ok(()); // SparseBatch::default()
    }
    if batch.offsets.len() != rows + 1 {
        return malformed(format!(
            "{rows} labels need {} row offsets, got {}",
            rows + 1,
            batch.offsets.len()
        ));
    }
    if batch.offsets[0] != 0 {
        return malformed(format!(
            "the first row offset is {}, not 0",
            batch.offsets[0]
        ));
    }
    let last = batch.offsets[rows] as usize;
    if last != batch.indices.len() {
        return malformed(format!(
            "the last row offset is {last} but there are {} feature values",
            batch.indices.len()
        ));
    }
    for row in 0..rows {
        let (start, end) = (batch.offsets[row] as usize, batch.offsets[row + 1] as usize);
        if end < start {
            return malformed(format!("row offsets decrease at row {row}"));
        }
        check_label(row, batch.labels[row])?;
        for (&index, &value) in batch.indices[start..end]
            .iter()
            .zip(&batch.values[start..end])
        {
            if index >= features {
                return Err(ModelError::FeatureOutOfRange {
                    row,
                    index,
                    features,
                });
            }
            if !value.is_finite() {
                return Err(ModelError::NonFiniteFeature { row, index, value });
            }
        }
    }
    Ok(())
}

/// The logit of one row: `b + Σ w_j x_j`.
#[inline]
fn logit(weights: &[f32], bias: f32, indices: &[u32], values: &[f32]) -> f32 {
    let mut z = bias;
    for (&j, &x) in indices.iter().zip(values) {
        z += weights[j as usize] * x;
    }
    z
}

impl Model for LogisticRegression {
    fn num_params(&self) -> usize {
        self.features as usize + 1
    }

    fn gradient(
        &self,
        params: &[f32],
        batch: &Batch,
        acc: &mut GradientAccumulator,
    ) -> Result<BatchLoss, ModelError> {
        let batch = self.prepare(params, batch, Some(acc.dim()))?;
        let rows = batch.rows();
        if rows == 0 {
            return Ok(BatchLoss::default());
        }
        let (weights, bias) = params.split_at(self.features as usize);
        let bias = bias[0];
        let inv_n = 1.0 / rows as f64;
        let l2 = (f64::from(self.l2) * inv_n) as f32;
        let mut loss = 0.0_f64;
        let mut bias_grad = 0.0_f64;
        for row in 0..rows {
            let (start, end) = (batch.offsets[row] as usize, batch.offsets[row + 1] as usize);
            let (indices, values) = (&batch.indices[start..end], &batch.values[start..end]);
            let z = logit(weights, bias, indices, values);
            let y = f64::from(batch.labels[row]);
            let (l, p) = logistic_loss(f64::from(z), y);
            loss += l;
            let g = (p - y) * inv_n;
            bias_grad += g;
            let g = g as f32;
            for (&j, &x) in indices.iter().zip(values) {
                acc.add(j, g * x + l2 * weights[j as usize]);
            }
        }
        acc.add(self.features, bias_grad as f32);
        Ok(BatchLoss::new(loss, rows as u64))
    }

    fn evaluate(
        &self,
        params: &[f32],
        batch: &Batch,
        eval: &mut Evaluation,
    ) -> Result<(), ModelError> {
        let batch = self.prepare(params, batch, None)?;
        eval.check_binary()?;
        let (weights, bias) = params.split_at(self.features as usize);
        for (label, indices, values) in batch.iter_rows() {
            let z = logit(weights, bias[0], indices, values);
            eval.push_logit(f64::from(z), label == 1.0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    use super::*;
    use crate::metrics::log_loss;
    use crate::model::ModelSpec;
    use crate::model::testutil::{assert_close, finite_difference};
    use crate::optim::{OptimizerConfig, OptimizerKind, build_optimizer};
    use crate::{RatingBatch, SparseVector};

    fn random_batch(rng: &mut StdRng, rows: usize, features: u32, nnz: usize) -> SparseBatch {
        let mut batch = SparseBatch::new();
        for _ in 0..rows {
            let mut idx: Vec<u32> = (0..nnz).map(|_| rng.random_range(0..features)).collect();
            idx.sort_unstable();
            idx.dedup();
            let vals: Vec<f32> = idx.iter().map(|_| rng.sample(StandardNormal)).collect();
            let label = if rng.random_bool(0.5) { 1.0 } else { 0.0 };
            batch.push_row(label, &idx, &vals);
        }
        batch
    }

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
        let batch = random_batch(&mut rng, 6, features, 8);
        let mut touched: Vec<usize> = batch.indices.iter().map(|&j| j as usize).collect();
        touched.sort_unstable();
        touched.dedup();
        assert!(touched.len() < features as usize, "some features untouched");
        assert!(touched.len() < batch.nnz(), "some features touched twice");

        let spec = ModelSpec::LogisticRegression { features, l2 };
        let params: Vec<f32> = (0..spec.num_params())
            .map(|_| rng.sample::<f32, _>(StandardNormal) * 0.5)
            .collect();
        let mut acc = GradientAccumulator::new(spec.num_params());
        let loss = spec
            .model()
            .gradient(&params, &Batch::Sparse(batch.clone()), &mut acc)
            .unwrap();
        let grad = acc.take();

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

    fn dense(v: &SparseVector, dim: usize) -> Vec<f32> {
        let mut d = vec![0.0; dim];
        v.scaled_add_to(&mut d, 1.0);
        d
    }

    #[test]
    fn loss_is_stable_for_huge_logits() {
        let spec = ModelSpec::LogisticRegression {
            features: 1,
            l2: 0.0,
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
            Err(ModelError::EvaluationKind { .. })
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
        let features = w.len() as u32;
        let mut batch = SparseBatch::new();
        for _ in 0..rows {
            let mut idx: Vec<u32> = (0..6).map(|_| rng.random_range(0..features)).collect();
            idx.sort_unstable();
            idx.dedup();
            let vals: Vec<f32> = idx.iter().map(|_| rng.sample(StandardNormal)).collect();
            let z = bias
                + idx
                    .iter()
                    .zip(&vals)
                    .map(|(&j, &v)| w[j as usize] * f64::from(v))
                    .sum::<f64>();
            let p = 1.0 / (1.0 + (-z).exp());
            let label = if rng.random_bool(p) { 1.0 } else { 0.0 };
            batch.push_row(label, &idx, &vals);
        }
        batch
    }

    fn chunks(batch: &SparseBatch, size: usize) -> Vec<Batch> {
        let mut out = Vec::new();
        let mut cur = SparseBatch::new();
        for (label, idx, vals) in batch.iter_rows() {
            cur.push_row(label, idx, vals);
            if cur.rows() == size {
                out.push(Batch::Sparse(std::mem::replace(
                    &mut cur,
                    SparseBatch::new(),
                )));
            }
        }
        if cur.rows() > 0 {
            out.push(Batch::Sparse(cur));
        }
        out
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
        };
        let model = spec.model();
        let mut params = spec.init_params(0);
        let mut opt = build_optimizer(&OptimizerConfig::new(OptimizerKind::Adam), params.len());
        let mut acc = GradientAccumulator::new(params.len());
        let batches = chunks(&train, 100);
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
