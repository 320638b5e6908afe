//! Dense binary classification from a logistic model (Higgs-like): [`write_dense_lr`].

use std::io::{self, Write};

use mlless_core::SparseBatch;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::shared::{
    STREAM_MODEL, STREAM_SAMPLES, check_count, check_non_negative, gaussian, invalid,
    logistic_log_loss, logistic_margin, round4, sigmoid, softplus, stream_rng, write_dense_libsvm,
};

/// Consecutive features of dense LR that share a latent factor (see [`write_dense_lr`]).
pub const DENSE_LR_GROUP: u32 = 4;

/// A synthetic dense logistic-regression dataset (see [`write_dense_lr`] for the model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseLrSpec {
    /// Rows to write.
    pub samples: u64,
    /// Features per row, all present.
    pub features: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Standard deviation of the true margin `w·x` (excluding the bias).
    pub margin_std: f64,
    /// Correlation of two features of one group, in [0, 1].
    pub correlation: f64,
    /// Intercept of the true model.
    pub bias: f64,
}

impl DenseLrSpec {
    /// A spec with the default model: margin standard deviation 2.0, correlation 0.5 within
    /// groups of [`DENSE_LR_GROUP`] features, bias 0.
    pub fn new(samples: u64, features: u32, seed: u64) -> Self {
        Self {
            samples,
            features,
            seed,
            margin_std: 2.0,
            correlation: 0.5,
            bias: 0.0,
        }
    }

    /// Checks that the spec describes a dataset that can be generated.
    pub fn validate(&self) -> io::Result<()> {
        check_count("dense LR features", self.features, 1..=u32::MAX)?;
        check_non_negative("margin standard deviation", self.margin_std)?;
        if !(0.0..=1.0).contains(&self.correlation) {
            return Err(invalid(format!(
                "dense LR correlation must be between 0 and 1, got {}",
                self.correlation
            )));
        }
        if !self.bias.is_finite() {
            return Err(invalid(format!(
                "dense LR bias must be finite, got {}",
                self.bias
            )));
        }
        Ok(())
    }
}

/// The true model of a dense LR dataset, `P(y = 1 | x) = sigmoid(weights·x + bias)`, the
/// feature distribution, and the log loss the true model reaches on the written rows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseLrTruth {
    /// One weight per feature (0-based, as in prepared data).
    pub weights: Vec<f32>,
    /// Intercept.
    pub bias: f32,
    /// Standard deviation of each feature.
    pub scales: Vec<f64>,
    /// Correlation of two features in one group of `group` consecutive features.
    pub correlation: f64,
    /// Features per correlated group.
    pub group: u32,
    /// Bayes log loss: the mean over the written rows of the expected log loss of the true
    /// model given the row, `H(sigmoid(margin))`. No model can do better in expectation.
    pub bayes_log_loss: f64,
    /// Mean log loss of the true model on the written labels (0 for no rows).
    pub log_loss: f64,
    /// Fraction of rows labelled 1 (0 for no rows).
    pub positive_fraction: f64,
}

impl DenseLrTruth {
    /// The margin `weights·x + bias` of a row; indices beyond the weights count as weight 0.
    pub fn margin(&self, indices: &[u32], values: &[f32]) -> f64 {
        logistic_margin(&self.weights, self.bias, indices, values)
    }

    /// Mean log loss of the true model on `rows` (labels 0/1), 0 for no rows.
    pub fn log_loss_on(&self, rows: &SparseBatch) -> f64 {
        logistic_log_loss(&self.weights, self.bias, rows)
    }
}

/// The model of a dense LR spec, with the loss fields still 0.
fn dense_lr_model(spec: &DenseLrSpec) -> DenseLrTruth {
    let mut rng = stream_rng(spec.seed, STREAM_MODEL);
    let d = spec.features as usize;
    let scales: Vec<f64> = (0..d)
        .map(|_| 2f64.powf(rng.random_range(-1.0..=1.0)))
        .collect();
    let raw: Vec<f64> = (0..d).map(|_| gaussian(&mut rng)).collect();
    // Var(w·x) = (1 - ρ) Σ_j (w_j s_j)² + ρ Σ_groups (Σ_{j in group} w_j s_j)².
    let rho = spec.correlation;
    let contributions: Vec<f64> = raw.iter().zip(&scales).map(|(w, s)| w * s).collect();
    let variance = (1.0 - rho) * contributions.iter().map(|c| c * c).sum::<f64>()
        + rho
            * contributions
                .chunks(DENSE_LR_GROUP as usize)
                .map(|g| g.iter().sum::<f64>().powi(2))
                .sum::<f64>();
    let factor = if variance > 0.0 {
        spec.margin_std / variance.sqrt()
    } else {
        0.0
    };
    DenseLrTruth {
        weights: raw.iter().map(|w| (w * factor) as f32).collect(),
        bias: spec.bias as f32,
        scales,
        correlation: rho,
        group: DENSE_LR_GROUP,
        bayes_log_loss: 0.0,
        log_loss: 0.0,
        positive_fraction: 0.0,
    }
}

/// Writes `spec.samples` rows of a synthetic dense logistic-regression dataset as LIBSVM text
/// and returns the true model.
///
/// The model, shaped like LambdaML's Higgs workload (28 dense features):
///
/// * Feature `j` has scale `s_j = 2^u`, `u ~ U[-1, 1]`, and belongs to group
///   `j / DENSE_LR_GROUP`: `x_j = s_j (sqrt(1 - ρ) z_j + sqrt(ρ) g)` with `z_j` and the group's
///   `g` standard normal, so features of one group have correlation `ρ = correlation`.
/// * True weights are `N(0, 1)` draws rescaled so that the margin `w·x` has standard deviation
///   `margin_std` (default 2) exactly over the feature distribution; the bias is `spec.bias`.
/// * Features are rounded to the 4 decimals written, and the label is 1 with probability
///   `sigmoid(w·x + bias)` of the written values, else 0.
///
/// The truth reports the Bayes log loss of the written rows and the true model's log loss on
/// the written labels. Lines are `label 1:v 2:v ... F:v` (every feature, 1-based). The output is
/// buffered internally. Errors if the spec is invalid (`ErrorKind::InvalidInput`) or on a write
/// error.
pub fn write_dense_lr(spec: &DenseLrSpec, out: impl Write) -> io::Result<DenseLrTruth> {
    spec.validate()?;
    let model = dense_lr_model(spec);
    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    let group = DENSE_LR_GROUP as usize;
    let mut shared = vec![0.0; (spec.features as usize).div_ceil(group)];
    let (own, common) = ((1.0 - model.correlation).sqrt(), model.correlation.sqrt());
    let (mut bayes, mut realised, mut positives) = (0.0, 0.0, 0u64);
    write_dense_libsvm(out, spec.samples, spec.features as usize, |x| {
        shared.iter_mut().for_each(|g| *g = gaussian(&mut rng));
        for (j, v) in x.iter_mut().enumerate() {
            let z = own * gaussian(&mut rng) + common * shared[j / group];
            *v = round4(model.scales[j] * z);
        }
        let m = x
            .iter()
            .zip(&model.weights)
            .map(|(&v, &w)| v * f64::from(w))
            .sum::<f64>()
            + f64::from(model.bias);
        let p = sigmoid(m);
        let positive = rng.random::<f64>() < p;
        bayes += p * softplus(-m) + (1.0 - p) * softplus(m);
        realised += softplus(if positive { -m } else { m });
        positives += u64::from(positive);
        u32::from(positive)
    })?;
    let n = spec.samples.max(1) as f64;
    Ok(DenseLrTruth {
        bayes_log_loss: bayes / n,
        log_loss: realised / n,
        positive_fraction: positives as f64 / n,
        ..model
    })
}
