//! Linear support vector machine over sparse features, and its single-process reference solve.
//!
//! The SVM shares logistic regression's parameter layout (`[w_0 .. w_{features-1}, bias]`),
//! batch validation and L2 convention (per example, over the weights a row touches, never the
//! bias); only the loss of the margin differs: the hinge `max(0, 1 − y·(w·x + b))` with the
//! labels 0/1 taken as `y = −1/+1`.

use super::linear::{LinearModel, margins, prepare_linear};
use super::{Prediction, Result};
use crate::batch::Batch;
use crate::metrics::{Evaluation, EvaluationError};

/// Linear SVM: predicts the positive class when the margin `w·x + b` is positive, trained on
/// the hinge loss with per-example L2.
///
/// The hinge is not differentiable where `y·(w·x + b) = 1`; the gradient takes the subgradient
/// 0 there (the sample is counted as correctly classified with enough margin).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Svm {
    features: u32,
    l2: f32,
}

impl Svm {
    /// A model over `features` features with L2 coefficient `l2`.
    pub fn new(features: u32, l2: f32) -> Self {
        Self { features, l2 }
    }
}

/// The hinge loss of margin `z` for label `label` (0 or 1, taken as −1/+1), and its
/// (sub)derivative in `z`.
#[inline]
fn hinge(z: f64, label: f64) -> (f64, f64) {
    let y = 2.0 * label - 1.0;
    if y * z < 1.0 {
        (1.0 - y * z, -y)
    } else {
        (0.0, 0.0)
    }
}

/// Its evaluation needs an [`Evaluation::margin_classifier`].
impl LinearModel for Svm {
    const NAME: &'static str = "svm";
    const TASK: &'static str = "margin";
    const PREDICTION: fn(f64) -> Prediction = Prediction::Margin;
    const PUSH: fn(&mut Evaluation, f64, bool) -> Result<(), EvaluationError> =
        Evaluation::push_margin;

    fn shape(&self) -> (u32, f32) {
        (self.features, self.l2)
    }

    fn loss(z: f64, y: f64) -> (f64, f64) {
        hinge(z, y)
    }
}

/// The SVM's training objective over all of `batches` at `params`: the mean hinge loss plus the
/// mean per-example L2 term `l2/2 · Σ_{j in the row} w_j²`, as [`Svm`]'s gradient minimises.
/// 0 when there is no sample.
pub fn svm_objective(batches: &[Batch], features: u32, l2: f32, params: &[f32]) -> Result<f64> {
    let (mut sum, mut rows) = (0.0_f64, 0_u64);
    for batch in batches {
        let batch = prepare_linear("svm", features, params, batch, None)?;
        for (z, label) in margins(params, batch) {
            sum += hinge(z, f64::from(u8::from(label))).0;
        }
        for &j in &batch.indices {
            sum += 0.5 * f64::from(l2) * f64::from(params[j as usize]).powi(2);
        }
        rows += batch.rows() as u64;
    }
    Ok(if rows == 0 { 0.0 } else { sum / rows as f64 })
}

/// The converged single-process solve of the SVM on `batches`: the parameters that distributed
/// runs of [`ModelSpec::Svm`](super::ModelSpec::Svm) are compared with.
///
/// Minimises [`svm_objective`] (the hinge loss with per-example L2, as [`Svm`] trains it)
/// deterministically, in f64, from zero: accelerated gradient descent (FISTA with backtracking
/// and adaptive restart) on the hinge smoothed quadratically over a band of width μ
/// (`|smoothed − hinge| ≤ μ/2`), with μ decreasing 1, 0.1, …, 1e-4 and each stage warm-started
/// from the last. `iterations` accelerated steps are shared among the stages (each costs two
/// to three passes over the data); a few hundred bring small test sets to within about 1e-4 of
/// the optimum. Returns the stage result (or zero) with the lowest exact objective.
///
/// Errors on an invalid batch (as [`Model::gradient`](super::Model::gradient) does). No sample gives zeros.
pub fn solve_svm_reference(
    batches: &[Batch],
    features: u32,
    l2: f32,
    iterations: usize,
) -> Result<Vec<f32>> {
    let zeros = vec![0.0_f32; features as usize + 1];
    let mut rows: Vec<Row> = Vec::new();
    // Per-example L2 weighs weight j by the fraction of rows that touch it.
    let mut lambda = vec![0.0_f64; features as usize];
    for batch in batches {
        let batch = prepare_linear("svm", features, &zeros, batch, None)?;
        for (label, indices, values) in batch.iter_rows() {
            rows.push((indices, values, if label == 1.0 { 1.0 } else { -1.0 }));
            for &j in indices {
                lambda[j as usize] += 1.0;
            }
        }
    }
    if rows.is_empty() {
        return Ok(zeros);
    }
    let n = rows.len() as f64;
    for l in &mut lambda {
        *l *= f64::from(l2) / n;
    }
    let problem = Smoothed {
        rows: &rows,
        lambda: &lambda,
    };
    let mut x = vec![0.0_f64; features as usize + 1];
    let mut best = (problem.value(&x, 0.0), x.clone());
    const STAGES: [f64; 5] = [1.0, 0.1, 1e-2, 1e-3, 1e-4];
    let per_stage = iterations.div_ceil(STAGES.len());
    for mu in STAGES {
        x = problem.fista(x, mu, per_stage);
        let exact = problem.value(&x, 0.0);
        if exact < best.0 {
            best = (exact, x.clone());
        }
    }
    Ok(best.1.iter().map(|&v| v as f32).collect())
}

/// A row for the reference solve: indices, values, label as ±1.
type Row<'a> = (&'a [u32], &'a [f32], f64);

/// The SVM objective with the hinge smoothed over a band μ, over rows held in memory.
struct Smoothed<'a> {
    rows: &'a [Row<'a>],
    /// Per-weight L2 coefficient (the bias has none).
    lambda: &'a [f64],
}

impl Smoothed<'_> {
    /// The smoothed hinge of the margin `m = y·z` and its derivative in `m`; μ = 0 is the hinge.
    fn loss(m: f64, mu: f64) -> (f64, f64) {
        if m >= 1.0 {
            (0.0, 0.0)
        } else if m > 1.0 - mu {
            ((1.0 - m).powi(2) / (2.0 * mu), -(1.0 - m) / mu)
        } else {
            (1.0 - m - mu / 2.0, -1.0)
        }
    }

    /// The objective at `x = [w.., b]`, adding its gradient to `grad` when given.
    fn eval(&self, x: &[f64], mu: f64, mut grad: Option<&mut [f64]>) -> f64 {
        let features = self.lambda.len();
        let inv_n = 1.0 / self.rows.len() as f64;
        let mut total = 0.0;
        if let Some(g) = grad.as_deref_mut() {
            g.fill(0.0);
        }
        for &(indices, values, y) in self.rows {
            let z = x[features]
                + indices
                    .iter()
                    .zip(values)
                    .map(|(&j, &v)| x[j as usize] * f64::from(v))
                    .sum::<f64>();
            let (l, dm) = Self::loss(y * z, mu);
            total += l;
            if let Some(g) = grad.as_deref_mut()
                && dm != 0.0
            {
                let dz = dm * y * inv_n;
                for (&j, &v) in indices.iter().zip(values) {
                    g[j as usize] += dz * f64::from(v);
                }
                g[features] += dz;
            }
        }
        let mut reg = 0.0;
        for (j, &l) in self.lambda.iter().enumerate() {
            reg += 0.5 * l * x[j] * x[j];
            if let Some(g) = grad.as_deref_mut() {
                g[j] += l * x[j];
            }
        }
        total * inv_n + reg
    }

    fn value(&self, x: &[f64], mu: f64) -> f64 {
        self.eval(x, mu, None)
    }

    /// `steps` FISTA steps on the μ-smoothed objective from `x`, with backtracking on the
    /// Lipschitz estimate and a restart of the momentum whenever the objective rises.
    fn fista(&self, mut x: Vec<f64>, mu: f64, steps: usize) -> Vec<f64> {
        let dim = x.len();
        let mut y = x.clone();
        let mut grad = vec![0.0; dim];
        let mut next = vec![0.0; dim];
        let mut fx = self.value(&x, mu);
        let mut t = 1.0_f64;
        let mut lipschitz = 1.0_f64;
        for _ in 0..steps {
            let fy = self.eval(&y, mu, Some(&mut grad));
            let g2: f64 = grad.iter().map(|g| g * g).sum();
            if g2 == 0.0 {
                break;
            }
            let f_next = loop {
                for ((n, &yi), &gi) in next.iter_mut().zip(&y).zip(&grad) {
                    *n = yi - gi / lipschitz;
                }
                let f_next = self.value(&next, mu);
                // Sufficient decrease for a gradient step of 1/L: f(y) − ‖g‖²/(2L).
                if f_next <= fy - 0.5 * g2 / lipschitz || lipschitz > 1e12 {
                    break f_next;
                }
                lipschitz *= 2.0;
            };
            if f_next > fx {
                // Momentum overshot: restart from x.
                t = 1.0;
                y.copy_from_slice(&x);
                continue;
            }
            let t_next = (1.0 + (1.0 + 4.0 * t * t).sqrt()) / 2.0;
            let beta = (t - 1.0) / t_next;
            for ((yi, &ni), &xi) in y.iter_mut().zip(&next).zip(&x) {
                *yi = ni + beta * (ni - xi);
            }
            std::mem::swap(&mut x, &mut next);
            fx = f_next;
            t = t_next;
            lipschitz *= 0.9;
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    use super::*;
    use crate::RatingBatch;
    use crate::batch::SparseBatch;
    use crate::model::testutil::{
        assert_close, dense, finite_difference, spec_gradient, split_rows, synthetic_linear,
    };
    use crate::model::{BatchLoss, GradientAccumulator, Model, ModelError, ModelSpec};
    use crate::optim::{OptimizerConfig, OptimizerKind, build_optimizer};

    /// Rows of `nnz` random features; the label is the sign of `w·x + bias` flipped with
    /// probability `noise`.
    fn synthetic(
        rng: &mut StdRng,
        rows: usize,
        w: &[f64],
        bias: f64,
        nnz: usize,
        noise: f64,
    ) -> SparseBatch {
        synthetic_linear(rng, rows, w, bias, nnz, |rng, z| {
            (z > 0.0) != rng.random_bool(noise)
        })
    }

    #[test]
    fn gradient_matches_finite_differences_off_the_hinge() {
        let mut rng = StdRng::seed_from_u64(3);
        let features = 30_u32;
        let l2 = 0.2_f32;
        let w: Vec<f64> = (0..features).map(|_| rng.sample(StandardNormal)).collect();
        let batch = synthetic(&mut rng, 8, &w, 0.1, 6, 0.3);
        let spec = ModelSpec::Svm { features, l2 };
        // Parameters with every margin well away from the kink at y·z = 1, and some rows on
        // each side of it (so both the flat and the linear part are checked).
        let (params, margins_off_kink) = loop {
            let params: Vec<f32> = (0..spec.num_params())
                .map(|_| rng.sample::<f32, _>(StandardNormal) * 0.7)
                .collect();
            let yz: Vec<f64> = margins(&params, &batch)
                .map(|(z, label)| if label { z } else { -z })
                .collect();
            if yz.iter().all(|m| (m - 1.0).abs() > 1e-2) {
                break (params, yz);
            }
        };
        assert!(margins_off_kink.iter().any(|&m| m < 1.0));

        let batches = [Batch::Sparse(batch.clone())];
        let (loss, grad) = spec_gradient(&spec, &params, &batches[0]);
        let grad = dense(&grad, spec.num_params());
        let want_loss = margins_off_kink
            .iter()
            .map(|m| (1.0 - m).max(0.0))
            .sum::<f64>();
        assert_close(loss.sum, want_loss, 1e-5, "hinge loss");
        assert_eq!(loss.count, 8);

        let x: Vec<f64> = params.iter().map(|&v| f64::from(v)).collect();
        let f = |x: &[f64]| {
            let p: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            // f32 parameters limit the finite difference; the objective itself is f64.
            svm_objective(&batches, features, l2, &p).unwrap()
        };
        let objective_f64 = |x: &[f64]| {
            let mut sum = 0.0;
            for (label, idx, vals) in batch.iter_rows() {
                let z = x[features as usize]
                    + idx
                        .iter()
                        .zip(vals)
                        .map(|(&j, &v)| x[j as usize] * f64::from(v))
                        .sum::<f64>();
                let y = if label == 1.0 { 1.0 } else { -1.0 };
                sum += (1.0 - y * z).max(0.0);
                sum +=
                    0.5 * f64::from(l2) * idx.iter().map(|&j| x[j as usize].powi(2)).sum::<f64>();
            }
            sum / batch.rows() as f64
        };
        assert_close(f(&x), objective_f64(&x), 1e-6, "svm_objective");
        for (j, want) in finite_difference(objective_f64, &x, 0..spec.num_params()) {
            assert_close(f64::from(grad[j]), want, 1e-4, &format!("d/dw_{j}"));
        }
    }

    #[test]
    fn hinge_is_flat_beyond_the_margin_but_l2_still_pulls() {
        let spec = ModelSpec::Svm {
            features: 2,
            l2: 0.5,
        };
        let mut batch = SparseBatch::new();
        batch.push_row(1.0, &[0], &[1.0]); // y·z = 2: no hinge
        batch.push_row(0.0, &[1], &[1.0]); // y·z = -(0.5) → hinge 1.5
        let params = vec![2.0, 0.5, 0.0];
        let mut acc = GradientAccumulator::new(3);
        let loss = spec
            .model()
            .gradient(&params, &Batch::Sparse(batch), &mut acc)
            .unwrap();
        assert_eq!(loss, BatchLoss::new(1.5, 2));
        let g = acc.take();
        assert_eq!(g.indices(), &[0, 1, 2]);
        // w_0: only L2 (0.5 · 2 / 2); w_1: (+1 · 1 + 0.5 · 0.5) / 2; bias: +1 / 2.
        assert_eq!(g.values(), &[0.5, 0.625, 0.5]);
    }

    #[test]
    fn errors_and_evaluation_kinds() {
        let model = Svm::new(3, 0.1);
        let params = vec![1.0, -1.0, 0.0, 0.5];
        let mut acc = GradientAccumulator::new(4);
        let mut ratings = RatingBatch::default();
        ratings.push(0, 0, 1.0);
        assert_eq!(
            model.gradient(&params, &Batch::Ratings(ratings), &mut acc),
            Err(ModelError::WrongBatchKind {
                model: "svm",
                expected: "sparse",
                got: "ratings"
            })
        );
        let mut bad = SparseBatch::new();
        bad.push_row(1.0, &[0], &[1.0]);
        bad.push_row(-1.0, &[1], &[1.0]);
        assert!(matches!(
            model.gradient(&params, &Batch::Sparse(bad.clone()), &mut acc),
            Err(ModelError::BadLabel { row: 1, .. })
        ));
        let mut eval = Evaluation::margin_classifier();
        assert!(
            model
                .evaluate(&params, &Batch::Sparse(bad), &mut eval)
                .is_err()
        );
        let mut out_of_range = SparseBatch::new();
        out_of_range.push_row(1.0, &[3], &[1.0]);
        assert!(matches!(
            model.gradient(&params, &Batch::Sparse(out_of_range), &mut acc),
            Err(ModelError::FeatureOutOfRange { index: 3, .. })
        ));
        assert!(acc.is_empty());
        assert_eq!(eval.samples(), 0);

        let mut ok = SparseBatch::new();
        ok.push_row(1.0, &[0], &[2.0]); // margin 2.5: correct, no hinge
        ok.push_row(0.0, &[1], &[-1.0]); // margin 1.5: wrong, hinge 2.5
        ok.push_row(0.0, &[1], &[1.0]); // margin -0.5: correct, hinge 0.5
        let ok = Batch::Sparse(ok);
        let mut binary = Evaluation::binary();
        assert!(matches!(
            model.evaluate(&params, &ok, &mut binary),
            Err(ModelError::Evaluation(EvaluationError::Kind {
                expected: "margin",
                got: "binary"
            }))
        ));
        model.evaluate(&params, &ok, &mut eval).unwrap();
        let m = eval.finish();
        assert_eq!(m["test_samples"], 3.0);
        assert!((m["test_hinge"] - 1.0).abs() < 1e-12);
        assert!((m["test_accuracy"] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(m["test_auc"], 1.0);
        assert!(!m.contains_key("test_logloss"));
        // LR refuses the SVM's evaluation.
        let lr = ModelSpec::LogisticRegression {
            features: 3,
            l2: 0.0,
            init_bias: 0.0,
        };
        assert!(
            lr.model()
                .evaluate(&params, &ok, &mut Evaluation::margin_classifier())
                .is_err()
        );
    }

    #[test]
    fn reference_solve_separates_noisy_data_and_beats_sgd() {
        let mut rng = StdRng::seed_from_u64(5);
        let features = 20_u32;
        let w: Vec<f64> = (0..features).map(|_| rng.sample(StandardNormal)).collect();
        let train = split_rows(&synthetic(&mut rng, 2000, &w, 0.3, 8, 0.02), 128);
        let test = Batch::Sparse(synthetic(&mut rng, 2000, &w, 0.3, 8, 0.0));
        let l2 = 1e-3_f32;

        let params = solve_svm_reference(&train, features, l2, 500).unwrap();
        assert_eq!(
            params,
            solve_svm_reference(&train, features, l2, 500).unwrap()
        );
        let spec = ModelSpec::Svm { features, l2 };
        let mut eval = spec.evaluation();
        assert_eq!(eval.task(), "margin");
        spec.model().evaluate(&params, &test, &mut eval).unwrap();
        let accuracy = eval.finish()["test_accuracy"];
        assert!(accuracy > 0.95, "accuracy {accuracy}");

        // Minibatch Adam on the same objective gets no lower than the reference.
        let model = spec.model();
        let mut sgd = spec.init_params(0);
        let mut opt = build_optimizer(&OptimizerConfig::new(OptimizerKind::Adam), sgd.len());
        let mut acc = GradientAccumulator::new(sgd.len());
        for epoch in 0..30 {
            for b in &train {
                model.gradient(&sgd, b, &mut acc).unwrap();
                let lr = 0.05 / (1.0 + epoch as f32);
                opt.step(&sgd, &acc.take(), lr).scaled_add_to(&mut sgd, 1.0);
            }
        }
        let objective = |p: &[f32]| svm_objective(&train, features, l2, p).unwrap();
        let (reference, adam) = (objective(&params), objective(&sgd));
        assert_eq!(objective(&spec.init_params(0)), 1.0);
        assert!(reference < adam, "reference {reference} vs adam {adam}");
        // Converged: five times the work gains next to nothing.
        let longer = objective(&solve_svm_reference(&train, features, l2, 2500).unwrap());
        assert!(
            (reference - longer).abs() < 1e-3 * reference,
            "500 iterations {reference}, 2500: {longer}"
        );
        assert_eq!(
            solve_svm_reference(&[], features, l2, 10).unwrap(),
            vec![0.0; 21]
        );
    }
}
