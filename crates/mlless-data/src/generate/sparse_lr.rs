//! Sparse binary classification from a logistic model (Criteo-like): [`write_sparse_lr`].

use std::io::{self, BufWriter, Write};

use mlless_core::SparseBatch;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use super::shared::{
    STREAM_BIAS, STREAM_CALIBRATION, STREAM_MODEL, STREAM_SAMPLES, check_non_negative, gaussian,
    invalid, logistic_log_loss, logistic_margin, push_fixed4, push_u64, sigmoid, stream_rng,
};

/// A synthetic sparse logistic-regression dataset (see [`write_sparse_lr`] for the model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SparseLrSpec {
    /// Rows to write.
    pub samples: u64,
    /// Dimension of the feature space.
    pub features: u32,
    /// Distinct features per row (at most `features`).
    pub nnz: u32,
    /// Seed of every random choice.
    pub seed: u64,
    /// Number of most popular features with a non-zero true weight (at most `features`).
    pub informative: u32,
    /// Exponent `s` of the Zipf law of feature popularity, in [0, 10]: rank r (0-based) has
    /// weight `(r + 1)^-s`; 0 is uniform.
    pub zipf_exponent: f64,
    /// Target standard deviation of the true margin `w·x` of an average row.
    pub margin_std: f64,
    /// The expected fraction of positive rows, in (0, 1): the true bias is chosen so that the
    /// mean of `sigmoid(w·x + bias)` over rows is this. `None`: bias 0 (about half positive).
    #[serde(default)]
    pub positive_rate: Option<f64>,
    /// Whether feature values are all 1 (binary, as in web-page or census LIBSVM sets) or
    /// real-valued.
    #[serde(default)]
    pub values: FeatureValues,
}

/// The feature values [`write_sparse_lr`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureValues {
    /// Every stored value is 1.
    #[default]
    Binary,
    /// Values uniform in (0, 2], written with 4 decimals (mean 1, mean square 4/3).
    Real,
}

impl SparseLrSpec {
    /// A spec with the default model: `informative = min(features, 1000)`, Zipf exponent 1.0,
    /// margin standard deviation 2.0.
    pub fn new(samples: u64, features: u32, nnz: u32, seed: u64) -> Self {
        Self {
            samples,
            features,
            nnz,
            seed,
            informative: features.min(1000),
            zipf_exponent: 1.0,
            margin_std: 2.0,
            positive_rate: None,
            values: FeatureValues::Binary,
        }
    }

    /// Checks that the spec describes a dataset that can be generated.
    pub fn validate(&self) -> io::Result<()> {
        if self.features == 0 {
            return Err(invalid("sparse LR needs at least one feature".into()));
        }
        if self.nnz == 0 || self.nnz > self.features {
            return Err(invalid(format!(
                "sparse LR nnz must be in 1..={} (the features), got {}",
                self.features, self.nnz
            )));
        }
        if self.informative > self.features {
            return Err(invalid(format!(
                "sparse LR has {} informative features but only {} features",
                self.informative, self.features
            )));
        }
        if !(0.0..=10.0).contains(&self.zipf_exponent) {
            return Err(invalid(format!(
                "Zipf exponent must be between 0 and 10, got {}",
                self.zipf_exponent
            )));
        }
        if let Some(rate) = self.positive_rate
            && !(rate > 0.0 && rate < 1.0)
        {
            return Err(invalid(format!(
                "the positive rate must be in (0, 1), got {rate}"
            )));
        }
        check_non_negative("margin standard deviation", self.margin_std)
    }
}

/// The true model of a sparse LR dataset: `P(y = 1 | x) = sigmoid(weights·x + bias)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SparseLrTruth {
    /// One weight per feature (0-based, as in prepared data); zero except for informative ones.
    pub weights: Vec<f32>,
    /// Intercept: 0, or the one that gives the spec's positive rate.
    pub bias: f32,
}

impl SparseLrTruth {
    /// The margin `weights·x + bias` of a row; indices beyond the weights count as weight 0.
    pub fn margin(&self, indices: &[u32], values: &[f32]) -> f64 {
        logistic_margin(&self.weights, self.bias, indices, values)
    }

    /// Mean log loss of the true model on `rows` (labels 0/1), 0 for no rows.
    pub fn log_loss(&self, rows: &SparseBatch) -> f64 {
        logistic_log_loss(&self.weights, self.bias, rows)
    }
}

/// Walker/Vose alias table: O(1) sampling from a discrete distribution.
pub(super) struct AliasTable {
    /// Per column: accept the column itself when a uniform 32-bit fraction is below the
    /// threshold (`probability · 2^32`), else take its alias. One 8-byte entry per column, so a
    /// draw touches one cache line.
    entries: Vec<(u32, u32)>,
}

impl AliasTable {
    pub(super) fn new(weights: &[f64]) -> Self {
        let n = weights.len();
        let total: f64 = weights.iter().sum();
        let mut prob: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let mut alias: Vec<u32> = (0..n as u32).collect();
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..n as u32).partition(|&i| prob[i as usize] < 1.0);
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            alias[s as usize] = l;
            prob[l as usize] -= 1.0 - prob[s as usize];
            if prob[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Left-overs are 1 up to rounding.
        for i in small.into_iter().chain(large) {
            prob[i as usize] = 1.0;
        }
        // A probability of 1 becomes u32::MAX: its alias is the column itself, so the one
        // fraction not below it still picks the column.
        let entries = prob
            .iter()
            .zip(alias)
            .map(|(&p, a)| ((p * 4_294_967_296.0).min(u32::MAX as f64) as u32, a))
            .collect();
        Self { entries }
    }

    pub(super) fn sample(&self, rng: &mut impl RngCore) -> u32 {
        // One draw gives the column (high word of x·n) and a uniform fraction (low word).
        let x = u128::from(rng.next_u64()) * self.entries.len() as u128;
        let column = (x >> 64) as usize;
        let fraction = ((x as u64) >> 32) as u32;
        let (threshold, alias) = self.entries[column];
        if fraction < threshold {
            column as u32
        } else {
            alias
        }
    }
}

/// Draws sets of distinct ids, one after the other in proportion to their weights among the
/// ids not drawn yet (successive sampling without replacement): the ranks of a sparse row, the
/// films a user rates.
pub(super) struct DistinctSampler {
    weights: Vec<f64>,
    table: AliasTable,
    /// `marks[r] == stamp` iff id r is in the current set.
    marks: Vec<u32>,
    stamp: u32,
    scratch: Vec<(f64, u32)>,
}

impl DistinctSampler {
    /// A sampler of ids `0..weights.len()` with these weights.
    pub(super) fn new(weights: Vec<f64>) -> Self {
        Self {
            table: AliasTable::new(&weights),
            marks: vec![0; weights.len()],
            weights,
            stamp: 0,
            scratch: Vec::new(),
        }
    }

    /// Fills `ids` with `count` distinct ids (at most all of them).
    pub(super) fn sample(&mut self, rng: &mut impl RngCore, count: usize, ids: &mut Vec<u32>) {
        let count = count.min(self.weights.len());
        ids.clear();
        if count == 0 {
            return;
        }
        self.next_stamp();
        let budget = 64 * count + 1024;
        for _ in 0..budget {
            let r = self.table.sample(rng);
            if self.marks[r as usize] != self.stamp {
                self.marks[r as usize] = self.stamp;
                ids.push(r);
                if ids.len() == count {
                    return;
                }
            }
        }
        // Rejection is too slow when the set must take most of the weight; draw the same
        // distribution (successive sampling without replacement) with Efraimidis-Spirakis
        // keys: the `count` largest of u^(1/w), here ln(u)/w.
        ids.clear();
        self.scratch.clear();
        self.scratch
            .extend(self.weights.iter().zip(0u32..).map(|(&w, r)| {
                let u = 1.0 - rng.random::<f64>(); // (0, 1]
                (u.ln() / w, r)
            }));
        self.scratch
            .select_nth_unstable_by(count - 1, |a, b| b.0.total_cmp(&a.0));
        ids.extend(self.scratch[..count].iter().map(|&(_, r)| r));
    }

    fn next_stamp(&mut self) {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.marks.fill(0);
            self.stamp = 1;
        }
    }
}

/// The sampler of a spec's rows: feature ranks with Zipf weights `(r + 1)^-s`.
fn row_sampler(spec: &SparseLrSpec) -> DistinctSampler {
    DistinctSampler::new(
        (0..spec.features)
            .map(|r| f64::from(r + 1).powf(-spec.zipf_exponent))
            .collect(),
    )
}

/// The model of a spec: the permutation from popularity rank to feature id, and the truth.
fn sparse_lr_model(
    spec: &SparseLrSpec,
    sampler: &mut DistinctSampler,
) -> (Vec<u32>, SparseLrTruth) {
    let mut rng = stream_rng(spec.seed, STREAM_MODEL);
    let n = spec.features as usize;
    let mut perm: Vec<u32> = (0..spec.features).collect();
    for i in (1..n).rev() {
        let j = rng.random_range(0..=i);
        perm.swap(i, j);
    }
    // Calibrate σ so that Var(w·x) = σ² E[#informative features in a row] = margin_std².
    let mut calibration = stream_rng(spec.seed, STREAM_CALIBRATION);
    let mut ranks = Vec::with_capacity(spec.nnz as usize);
    const CALIBRATION_ROWS: u32 = 2048;
    let mut informative_seen = 0u64;
    for _ in 0..CALIBRATION_ROWS {
        sampler.sample(&mut calibration, spec.nnz as usize, &mut ranks);
        informative_seen += ranks.iter().filter(|&&r| r < spec.informative).count() as u64;
    }
    let mean_informative = informative_seen as f64 / f64::from(CALIBRATION_ROWS);
    let mean_square_value = match spec.values {
        FeatureValues::Binary => 1.0,
        FeatureValues::Real => 4.0 / 3.0,
    };
    let sigma = if mean_informative > 0.0 {
        spec.margin_std / (mean_informative * mean_square_value).sqrt()
    } else {
        0.0
    };
    let mut weights = vec![0f32; n];
    for &feature in &perm[..spec.informative as usize] {
        weights[feature as usize] = (sigma * gaussian(&mut rng)) as f32;
    }
    let bias = match spec.positive_rate {
        None => 0.0,
        Some(rate) => calibrate_bias(spec, sampler, &perm, &weights, rate),
    };
    (perm, SparseLrTruth { weights, bias })
}

/// Draws the value of one feature of a row: 1, or `k / 10^4` for `k` uniform in `1..=20000`.
fn draw_value(values: FeatureValues, rng: &mut impl Rng) -> f64 {
    match values {
        FeatureValues::Binary => 1.0,
        FeatureValues::Real => f64::from(rng.random_range(1..=20_000_u32)) / 10_000.0,
    }
}

/// The bias `b` with which the mean of `sigmoid(w·x + b)` over 8192 rows drawn like the data's
/// (from their own stream) is `rate`, by bisection: the mean is increasing in `b`.
fn calibrate_bias(
    spec: &SparseLrSpec,
    sampler: &mut DistinctSampler,
    perm: &[u32],
    weights: &[f32],
    rate: f64,
) -> f32 {
    let mut rng = stream_rng(spec.seed, STREAM_BIAS);
    let mut ranks = Vec::with_capacity(spec.nnz as usize);
    let margins: Vec<f64> = (0..8192)
        .map(|_| {
            sampler.sample(&mut rng, spec.nnz as usize, &mut ranks);
            ranks
                .iter()
                .map(|&r| {
                    let v = draw_value(spec.values, &mut rng);
                    f64::from(weights[perm[r as usize] as usize]) * v
                })
                .sum::<f64>()
        })
        .collect();
    let mean_rate = |b: f64| margins.iter().map(|m| sigmoid(m + b)).sum::<f64>() / 8192.0;
    let (mut lo, mut hi) = (-50.0_f64, 50.0_f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if mean_rate(mid) < rate {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (0.5 * (lo + hi)) as f32
}

/// The true model of `spec`, as [`write_sparse_lr`] returns it, without writing data.
///
/// # Panics
/// Panics if the spec is invalid ([`SparseLrSpec::validate`]).
pub fn sparse_lr_truth(spec: &SparseLrSpec) -> SparseLrTruth {
    spec.validate()
        .unwrap_or_else(|e| panic!("sparse_lr_truth: {e}"));
    sparse_lr_model(spec, &mut row_sampler(spec)).1
}

/// Writes `spec.samples` rows of a synthetic sparse logistic-regression dataset as LIBSVM text
/// and returns the true model.
///
/// The model, which looks like hashed categorical data (Criteo):
///
/// * Feature popularity follows a Zipf law: popularity rank `r` (0-based) has weight
///   `(r + 1)^-s`, `s = zipf_exponent` (default 1.0). Ranks map to feature ids through a seeded
///   random permutation, so popular features are spread over the id space.
/// * Each row holds `nnz` distinct features, drawn one after the other in proportion to
///   popularity among those not drawn yet, each with value 1.0 ([`FeatureValues::Binary`], the
///   default) or uniform in (0, 2] with 4 decimals ([`FeatureValues::Real`]).
/// * The `informative` most popular features (default `min(features, 1000)`) have true weights
///   `~ N(0, σ²)`; all others have weight 0. σ is calibrated on 2048 sample rows so that the
///   margin `w·x` of an average row has standard deviation `margin_std` (default 2):
///   `σ = margin_std / sqrt(E[informative features per row])`: the spread of `w·x` over the
///   weight draw for a row with the average number of informative features. The spread across
///   rows of one dataset is somewhat lower, because the most popular features are in nearly
///   every row. With real values σ is divided by `sqrt(E[v²]) = sqrt(4/3)` too. The bias is 0,
///   or, with a `positive_rate` R, the one with which the mean of `sigmoid(w·x + b)` over 8192
///   rows drawn from their own stream is R (class imbalance, as in web-page data).
/// * The label is 1 with probability `sigmoid(w·x)`, else 0.
///
/// Lines are `label index:value index:value ...` with 1-based ascending indices. The output is
/// buffered internally; pass a plain `File`. Errors if the spec is invalid
/// (`ErrorKind::InvalidInput`) or on a write error.
pub fn write_sparse_lr(spec: &SparseLrSpec, out: impl Write) -> io::Result<SparseLrTruth> {
    spec.validate()?;
    let mut sampler = row_sampler(spec);
    let (perm, truth) = sparse_lr_model(spec, &mut sampler);
    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut ranks = Vec::with_capacity(spec.nnz as usize);
    let mut ids: Vec<(u32, f64)> = Vec::with_capacity(spec.nnz as usize);
    let mut line = Vec::with_capacity(16 + 12 * spec.nnz as usize);
    for _ in 0..spec.samples {
        sampler.sample(&mut rng, spec.nnz as usize, &mut ranks);
        ids.clear();
        ids.extend(
            ranks
                .iter()
                .map(|&r| (perm[r as usize], draw_value(spec.values, &mut rng))),
        );
        ids.sort_unstable_by_key(|&(id, _)| id);
        // Only informative features have weights; they are the popular, cache-resident ones.
        let margin: f64 = ids
            .iter()
            .map(|&(id, v)| f64::from(truth.weights[id as usize]) * v)
            .sum::<f64>()
            + f64::from(truth.bias);
        let positive = rng.random::<f64>() < sigmoid(margin);
        line.clear();
        line.push(if positive { b'1' } else { b'0' });
        for &(id, v) in &ids {
            line.push(b' ');
            push_u64(&mut line, u64::from(id) + 1);
            match spec.values {
                FeatureValues::Binary => line.extend_from_slice(b":1"),
                FeatureValues::Real => {
                    line.push(b':');
                    push_fixed4(&mut line, v);
                }
            }
        }
        line.push(b'\n');
        out.write_all(&line)?;
    }
    out.flush()?;
    Ok(truth)
}
