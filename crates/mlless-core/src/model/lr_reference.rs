//! The converged single-process solve of L2 logistic regression: the optimum that distributed
//! runs of [`ModelSpec::LogisticRegression`](super::ModelSpec::LogisticRegression) are reported
//! against ("× the optimum").
//!
//! Two regularisations, one solver:
//!
//! * [`LrRegularization::InverseC`]: scikit-learn's `LogisticRegression(C)` with the bias not
//!   penalised (`penalty="l2"`, `solver="lbfgs"`): minimise `Σ_i logloss_i + ½‖w‖²/C`.
//! * [`LrRegularization::PerExample`]: what mlless trains with `--l2 X`: the mean over rows of
//!   the log loss plus `X/2 · Σ_{j in the row} w_j²`, i.e. weight `j` is penalised in proportion
//!   to the number of rows that touch it.
//!
//! Both are `(1/n) Σ_i logloss_i + ½ Σ_j λ_j w_j²` for per-weight coefficients `λ_j` (`1/(C n)`,
//! or `X · n_j / n` with `n_j` the rows that hold feature `j`); the solver minimises that mean
//! form, which has the same minimiser as the sum form, in f64 with L-BFGS from zero.

use super::linear::prepare_linear;
use super::logistic::logistic_loss;
use super::{ModelError, Result};
use crate::batch::Batch;

/// The L2 term of the reference objective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LrRegularization {
    /// scikit-learn's inverse regularisation strength: `Σ_i logloss_i + ½‖w‖²/C` (bias free).
    /// `C` must be positive; `f64::INFINITY` is no regularisation.
    InverseC(f64),
    /// mlless's per-example L2 (`--l2`): each row adds `l2/2 · Σ_{j in the row} w_j²`.
    PerExample(f32),
}

/// When the reference solve stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrReferenceOptions {
    /// Stop once the largest gradient coordinate of the mean objective is at most this.
    pub tolerance: f64,
    /// Stop after this many L-BFGS iterations (each one to a few passes over the data).
    pub max_iterations: usize,
    /// Number of correction pairs L-BFGS keeps.
    pub memory: usize,
}

impl Default for LrReferenceOptions {
    /// Tolerance 1e-10, at most 2000 iterations, 10 pairs.
    fn default() -> Self {
        Self {
            tolerance: 1e-10,
            max_iterations: 2000,
            memory: 10,
        }
    }
}

/// The result of [`solve_lr_reference`].
#[derive(Debug, Clone, PartialEq)]
pub struct LrReference {
    /// The parameters `[w_0 .. w_{features-1}, bias]`, as mlless's LR lays them out.
    pub params: Vec<f32>,
    /// The mean-form objective `(1/n) Σ logloss + ½ Σ λ_j w_j²` at the f64 solution.
    pub objective: f64,
    /// The largest gradient coordinate of the mean objective at the f64 solution.
    pub gradient_max: f64,
    /// L-BFGS iterations taken.
    pub iterations: usize,
    /// Whether the tolerance was reached (else the iteration cap or a stalled line search
    /// stopped the solve).
    pub converged: bool,
}

/// Rows held in memory, in CSR layout, with their labels as 0/1.
struct Rows {
    labels: Vec<f64>,
    offsets: Vec<usize>,
    indices: Vec<u32>,
    values: Vec<f64>,
}

/// The mean-form objective over rows.
struct Problem {
    rows: Rows,
    /// Per-weight L2 coefficient (the bias has none).
    lambda: Vec<f64>,
}

impl Problem {
    fn new(batches: &[Batch], features: u32, regularization: LrRegularization) -> Result<Self> {
        let zeros = vec![0.0_f32; features as usize + 1];
        let mut rows = Rows {
            labels: Vec::new(),
            offsets: vec![0],
            indices: Vec::new(),
            values: Vec::new(),
        };
        let mut counts = vec![0.0_f64; features as usize];
        for batch in batches {
            let batch = prepare_linear("lr", features, &zeros, batch, None)?;
            for (label, indices, values) in batch.iter_rows() {
                rows.labels.push(f64::from(label));
                rows.indices.extend_from_slice(indices);
                rows.values.extend(values.iter().map(|&v| f64::from(v)));
                rows.offsets.push(rows.indices.len());
                for &j in indices {
                    counts[j as usize] += 1.0;
                }
            }
        }
        let n = rows.labels.len().max(1) as f64;
        let lambda = match regularization {
            LrRegularization::InverseC(c) => vec![1.0 / (c * n); features as usize],
            LrRegularization::PerExample(l2) => {
                counts.iter().map(|&k| f64::from(l2) * k / n).collect()
            }
        };
        Ok(Self { rows, lambda })
    }

    fn dim(&self) -> usize {
        self.lambda.len() + 1
    }

    /// The objective at `x = [w.., b]`, writing its gradient into `grad`.
    fn eval(&self, x: &[f64], grad: &mut [f64]) -> f64 {
        let features = self.lambda.len();
        let rows = &self.rows;
        let n = rows.labels.len();
        grad.fill(0.0);
        if n == 0 {
            return 0.0;
        }
        let inv_n = 1.0 / n as f64;
        let mut total = 0.0;
        for r in 0..n {
            let (start, end) = (rows.offsets[r], rows.offsets[r + 1]);
            let (indices, values) = (&rows.indices[start..end], &rows.values[start..end]);
            let z = x[features]
                + indices
                    .iter()
                    .zip(values)
                    .map(|(&j, &v)| x[j as usize] * v)
                    .sum::<f64>();
            let y = rows.labels[r];
            let (loss, p) = logistic_loss(z, y);
            total += loss;
            let dz = (p - y) * inv_n;
            for (&j, &v) in indices.iter().zip(values) {
                grad[j as usize] += dz * v;
            }
            grad[features] += dz;
        }
        let mut reg = 0.0;
        for (j, &l) in self.lambda.iter().enumerate() {
            reg += 0.5 * l * x[j] * x[j];
            grad[j] += l * x[j];
        }
        total * inv_n + reg
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn max_abs(a: &[f64]) -> f64 {
    a.iter().fold(0.0_f64, |m, v| m.max(v.abs()))
}

/// The converged L2 logistic regression on `batches` (labels 0/1, features below `features`),
/// deterministic, by L-BFGS from zero in f64 with a backtracking line search (Armijo, and
/// curvature pairs kept only when `sᵀy > 0`).
///
/// Errors on an invalid batch (as [`Model::gradient`](super::Model::gradient) does) or a
/// non-positive `C`. No sample gives zeros.
pub fn solve_lr_reference(
    batches: &[Batch],
    features: u32,
    regularization: LrRegularization,
    options: &LrReferenceOptions,
) -> Result<LrReference> {
    if let LrRegularization::InverseC(c) = regularization
        && (c.is_nan() || c <= 0.0)
    {
        return Err(ModelError::InvalidSpec {
            reason: format!("C must be positive, got {c}"),
        });
    }
    if let LrRegularization::PerExample(l2) = regularization
        && !(l2.is_finite() && l2 >= 0.0)
    {
        return Err(ModelError::InvalidSpec {
            reason: format!("l2 must be finite and >= 0, got {l2}"),
        });
    }
    let problem = Problem::new(batches, features, regularization)?;
    let dim = problem.dim();
    let mut x = vec![0.0_f64; dim];
    let mut g = vec![0.0_f64; dim];
    let mut f = problem.eval(&x, &mut g);
    let mut pairs: std::collections::VecDeque<(Vec<f64>, Vec<f64>, f64)> =
        std::collections::VecDeque::new();
    let mut x_new = vec![0.0_f64; dim];
    let mut g_new = vec![0.0_f64; dim];
    let mut d = vec![0.0_f64; dim];
    let mut alphas = vec![0.0_f64; options.memory.max(1)];
    let mut iterations = 0;
    let mut converged = max_abs(&g) <= options.tolerance;
    while !converged && iterations < options.max_iterations {
        iterations += 1;
        // Two-loop recursion: d = −H g.
        d.copy_from_slice(&g);
        for (k, (s, y, rho)) in pairs.iter().enumerate().rev() {
            let a = rho * dot(s, &d);
            alphas[k] = a;
            for (di, yi) in d.iter_mut().zip(y) {
                *di -= a * yi;
            }
        }
        let gamma = match pairs.back() {
            Some((s, y, _)) => dot(s, y) / dot(y, y),
            // The first step: at most unit length.
            None => 1.0 / max_abs(&g).max(1.0),
        };
        d.iter_mut().for_each(|di| *di *= gamma);
        for (k, (s, y, rho)) in pairs.iter().enumerate() {
            let b = rho * dot(y, &d);
            for (di, si) in d.iter_mut().zip(s) {
                *di += (alphas[k] - b) * si;
            }
        }
        d.iter_mut().for_each(|di| *di = -*di);
        let mut slope = dot(&g, &d);
        if slope >= 0.0 {
            // Not a descent direction (rounding): restart from steepest descent.
            pairs.clear();
            for (di, gi) in d.iter_mut().zip(&g) {
                *di = -gi;
            }
            slope = dot(&g, &d);
        }
        let mut step = 1.0;
        let mut accepted = false;
        for _ in 0..60 {
            for ((xn, xi), di) in x_new.iter_mut().zip(&x).zip(&d) {
                *xn = xi + step * di;
            }
            let f_new = problem.eval(&x_new, &mut g_new);
            // Armijo, with room for the rounding of f near the optimum, where the gradient's
            // decrease is what still tells progress.
            let armijo = f_new <= f + 1e-4 * step * slope;
            let flat =
                (f_new - f).abs() <= 1e-15 * f.abs().max(1.0) && max_abs(&g_new) < max_abs(&g);
            if f_new.is_finite() && (armijo || flat) {
                f = f_new;
                accepted = true;
                break;
            }
            step *= 0.5;
        }
        if !accepted {
            break;
        }
        let s: Vec<f64> = x_new.iter().zip(&x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = g_new.iter().zip(&g).map(|(a, b)| a - b).collect();
        let sy = dot(&s, &y);
        if sy > 1e-300 {
            if pairs.len() == options.memory.max(1) {
                pairs.pop_front();
            }
            pairs.push_back((s, y, 1.0 / sy));
        }
        std::mem::swap(&mut x, &mut x_new);
        std::mem::swap(&mut g, &mut g_new);
        converged = max_abs(&g) <= options.tolerance;
    }
    Ok(LrReference {
        params: x.iter().map(|&v| v as f32).collect(),
        objective: f,
        gradient_max: max_abs(&g),
        iterations,
        converged,
    })
}

/// The mean-form reference objective `(1/n) Σ logloss + ½ Σ λ_j w_j²` of `params` on
/// `batches` (see the module documentation). 0 when there is no sample.
pub fn lr_reference_objective(
    batches: &[Batch],
    features: u32,
    regularization: LrRegularization,
    params: &[f32],
) -> Result<f64> {
    let problem = Problem::new(batches, features, regularization)?;
    let x: Vec<f64> = params.iter().map(|&v| f64::from(v)).collect();
    if x.len() != problem.dim() {
        return Err(ModelError::ParamsLength {
            expected: problem.dim(),
            got: x.len(),
        });
    }
    let mut g = vec![0.0; x.len()];
    Ok(problem.eval(&x, &mut g))
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    use super::*;
    use crate::batch::SparseBatch;
    use crate::model::ModelSpec;
    use crate::model::testutil::{
        assert_close, finite_difference, spec_gradient, split_rows, synthetic_linear,
    };

    fn noisy(rng: &mut StdRng, rows: usize, features: u32, bias: f64) -> SparseBatch {
        let w: Vec<f64> = (0..features).map(|_| rng.sample(StandardNormal)).collect();
        synthetic_linear(rng, rows, &w, bias, 5, |rng, z| {
            rng.random_bool(1.0 / (1.0 + (-z).exp()))
        })
    }

    fn tight() -> LrReferenceOptions {
        LrReferenceOptions::default()
    }

    #[test]
    fn gradient_matches_finite_differences_for_both_regularizations() {
        let mut rng = StdRng::seed_from_u64(1);
        let batch = Batch::Sparse(noisy(&mut rng, 40, 12, 0.3));
        for reg in [
            LrRegularization::InverseC(0.5),
            LrRegularization::PerExample(0.3),
        ] {
            let problem = Problem::new(std::slice::from_ref(&batch), 12, reg).unwrap();
            let x: Vec<f64> = (0..13)
                .map(|_| rng.sample::<f64, _>(StandardNormal))
                .collect();
            let mut g = vec![0.0; 13];
            problem.eval(&x, &mut g);
            let f = |x: &[f64]| problem.eval(x, &mut [0.0; 13]);
            for (j, want) in finite_difference(f, &x, 0..13) {
                assert_close(g[j], want, 1e-6, &format!("{reg:?}: d/dx_{j}"));
            }
        }
    }

    #[test]
    fn one_binary_feature_without_regularization_is_the_closed_form() {
        // x = 0: 30 positives of 100; x = 1: 80 of 100. The MLE: b = logit(0.3),
        // w = logit(0.8) − logit(0.3).
        let mut batch = SparseBatch::new();
        for i in 0..100 {
            batch.push_row(if i < 30 { 1.0 } else { 0.0 }, &[], &[]);
            batch.push_row(if i < 80 { 1.0 } else { 0.0 }, &[0], &[1.0]);
        }
        let logit = |p: f64| (p / (1.0 - p)).ln();
        let r = solve_lr_reference(
            &[Batch::Sparse(batch)],
            1,
            LrRegularization::InverseC(f64::INFINITY),
            &tight(),
        )
        .unwrap();
        assert!(r.converged, "{r:?}");
        assert_close(f64::from(r.params[1]), logit(0.3), 1e-6, "bias");
        assert_close(
            f64::from(r.params[0]),
            logit(0.8) - logit(0.3),
            1e-6,
            "weight",
        );
    }

    #[test]
    fn the_bias_is_not_regularized() {
        // Strong regularisation pulls the weights to ~0, but the bias still fits the base rate
        // (3% positive): log-odds −3.48.
        let mut rng = StdRng::seed_from_u64(2);
        let mut batch = SparseBatch::new();
        for i in 0..1000 {
            let j = rng.random_range(0..20_u32);
            batch.push_row(if i % 100 < 3 { 1.0 } else { 0.0 }, &[j], &[1.0]);
        }
        let r = solve_lr_reference(
            &[Batch::Sparse(batch)],
            20,
            LrRegularization::InverseC(1e-6),
            &tight(),
        )
        .unwrap();
        assert!(r.converged);
        assert!(r.params[..20].iter().all(|w| w.abs() < 1e-3));
        assert_close(
            f64::from(r.params[20]),
            (0.03_f64 / 0.97).ln(),
            1e-3,
            "bias",
        );
    }

    /// Newton's method on a small dense problem, with its Hessian solved by Gaussian
    /// elimination: the brute-force optimum the reference must agree with.
    fn newton(batch: &SparseBatch, features: usize, lambda: &[f64]) -> Vec<f64> {
        let d = features + 1;
        let n = batch.rows() as f64;
        let mut x = vec![0.0; d];
        for _ in 0..50 {
            let mut g = vec![0.0; d];
            let mut h = vec![vec![0.0; d]; d];
            for (label, idx, vals) in batch.iter_rows() {
                let mut row = vec![0.0; d];
                for (&j, &v) in idx.iter().zip(vals) {
                    row[j as usize] = f64::from(v);
                }
                row[features] = 1.0;
                let z = dot(&row, &x);
                let p = 1.0 / (1.0 + (-z).exp());
                for a in 0..d {
                    g[a] += (p - f64::from(label)) * row[a] / n;
                    for b in 0..d {
                        h[a][b] += p * (1.0 - p) * row[a] * row[b] / n;
                    }
                }
            }
            for j in 0..features {
                g[j] += lambda[j] * x[j];
                h[j][j] += lambda[j];
            }
            // Solve h · step = g.
            let mut m: Vec<Vec<f64>> = h
                .into_iter()
                .zip(&g)
                .map(|(mut r, &gi)| {
                    r.push(gi);
                    r
                })
                .collect();
            for c in 0..d {
                let pivot = (c..d)
                    .max_by(|&a, &b| m[a][c].abs().total_cmp(&m[b][c].abs()))
                    .unwrap();
                m.swap(c, pivot);
                for r in 0..d {
                    if r != c {
                        let k = m[r][c] / m[c][c];
                        let pivot_row = m[c].clone();
                        for (cell, &p) in m[r][c..].iter_mut().zip(&pivot_row[c..]) {
                            *cell -= k * p;
                        }
                    }
                }
            }
            for (j, xj) in x.iter_mut().enumerate() {
                *xj -= m[j][d] / m[j][j];
            }
        }
        x
    }

    #[test]
    fn agrees_with_newton_on_a_small_dense_problem() {
        let mut rng = StdRng::seed_from_u64(3);
        let features = 4;
        let batch = noisy(&mut rng, 300, features, -0.7);
        let batches = split_rows(&batch, 64);
        for reg in [
            LrRegularization::InverseC(1.0),
            LrRegularization::InverseC(0.05),
            LrRegularization::PerExample(0.1),
        ] {
            let lambda = Problem::new(&batches, features, reg).unwrap().lambda;
            let want = newton(&batch, features as usize, &lambda);
            let r = solve_lr_reference(&batches, features, reg, &tight()).unwrap();
            assert!(r.converged, "{reg:?}: {r:?}");
            for (j, (&got, &want)) in r.params.iter().zip(&want).enumerate() {
                assert_close(f64::from(got), want, 1e-5, &format!("{reg:?}: x_{j}"));
            }
        }
    }

    #[test]
    fn per_example_optimum_zeroes_what_mlless_trains() {
        // At the PerExample(l2) optimum, the full-batch gradient of mlless's own LR model with
        // that l2 vanishes (to f32 precision), and minibatch SGD gets no lower objective.
        let mut rng = StdRng::seed_from_u64(4);
        let features = 200;
        let batch = noisy(&mut rng, 3000, features, 1.0);
        let l2 = 1e-3;
        let reg = LrRegularization::PerExample(l2);
        let batches = split_rows(&batch, 500);
        let r = solve_lr_reference(&batches, features, reg, &tight()).unwrap();
        assert!(r.converged && r.gradient_max <= 1e-10, "{r:?}");
        let spec = ModelSpec::LogisticRegression {
            features,
            l2,
            init_bias: 0.0,
        };
        let (_, g) = spec_gradient(&spec, &r.params, &Batch::Sparse(batch.clone()));
        let worst = g.values().iter().fold(0.0_f32, |m, v| m.max(v.abs()));
        assert!(worst < 1e-5, "mlless's gradient at the optimum: {worst}");
        let objective = |p: &[f32]| lr_reference_objective(&batches, features, reg, p).unwrap();
        assert_close(objective(&r.params), r.objective, 1e-9, "objective");
        let mut sgd = spec.init_params(0);
        for epoch in 0..20 {
            for b in &batches {
                let (_, g) = spec_gradient(&spec, &sgd, b);
                g.scaled_add_to(&mut sgd, -1.0 / (1.0 + epoch as f32).sqrt());
            }
        }
        assert!(objective(&sgd) > r.objective);
        // The test log loss of the reference is that of a model which learnt something.
        let mut eval = spec.evaluation();
        spec.model()
            .evaluate(&r.params, &Batch::Sparse(batch), &mut eval)
            .unwrap();
        assert!(eval.finish()["test_logloss"] < 0.6);
    }

    #[test]
    fn errors_and_empty_input() {
        let r = solve_lr_reference(&[], 3, LrRegularization::InverseC(1.0), &tight()).unwrap();
        assert_eq!(r.params, vec![0.0; 4]);
        assert!(r.converged);
        assert!(solve_lr_reference(&[], 3, LrRegularization::InverseC(0.0), &tight()).is_err());
        assert!(solve_lr_reference(&[], 3, LrRegularization::PerExample(-1.0), &tight()).is_err());
        let mut bad = SparseBatch::new();
        bad.push_row(1.0, &[5], &[1.0]);
        assert!(matches!(
            solve_lr_reference(
                &[Batch::Sparse(bad)],
                3,
                LrRegularization::InverseC(1.0),
                &tight()
            ),
            Err(ModelError::FeatureOutOfRange { .. })
        ));
    }
}
