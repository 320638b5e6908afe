//! Synthetic datasets with known ground truth, written as a stream.
//!
//! Generators write text in an input format (LIBSVM or MovieLens `u.data`), so generated data
//! goes through the same `prepare` path as real data:
//!
//! * [`write_sparse_lr`]: sparse binary classification from a logistic model (Criteo-like).
//! * [`write_dense_lr`]: dense binary classification from a logistic model (Higgs-like).
//! * [`write_rings`]: concentric rings in 2-D, one class per ring (no linear model fits).
//! * [`write_blobs`]: Gaussian blobs, labelled by blob (for k-means).
//! * [`write_ratings`]: ratings from a low-rank model plus noise.
//!
//! Memory is O(1) in the number of samples: only the true model (weights, factors, centres)
//! and the sampling tables are held. Output is a deterministic function of the spec, seed
//! included (for a given version of `rand`).
//!
//! Independent random streams are derived from the seed for the model and for the samples, so
//! the true model depends only on the fields that define it (for sparse LR: `features`,
//! `informative`, `nnz`, `zipf_exponent`, `margin_std`, `seed`; for dense LR: `features`,
//! `margin_std`, `correlation`, `bias`, `seed`; for blobs: `k`, `features`, `box_half_width`,
//! `seed`; for ratings: `users`, `items`, `rank`, `seed`), not on the number of samples.
//!
//! The dense generators write every feature of every row, with 1-based indices like the sparse
//! one (`label 1:v 2:v ... d:v`), values with 4 decimals. A value may be written as `0.0000`:
//! the LIBSVM parser keeps explicit zeros, so parsed rows stay dense.

use std::io::{self, BufWriter, Write};

use mlless_core::SparseBatch;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// Stream ids mixed into the seed.
const STREAM_MODEL: u64 = 1;
const STREAM_SAMPLES: u64 = 2;
const STREAM_CALIBRATION: u64 = 3;
const STREAM_BIAS: u64 = 4;

/// An RNG for one stream of one seed (SplitMix64 mixing of seed and stream).
fn stream_rng(seed: u64, stream: u64) -> StdRng {
    let mut z = seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    StdRng::seed_from_u64(z ^ (z >> 31))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// Appends the decimal digits of `n`.
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends `x` rounded to 4 decimals (`-0.5000`, `3.1416`); returns the rounded value times 10^4.
fn push_fixed4(out: &mut Vec<u8>, x: f64) -> i64 {
    let scaled = (x * 10_000.0).round() as i64;
    if scaled < 0 {
        out.push(b'-');
    }
    let magnitude = scaled.unsigned_abs();
    push_u64(out, magnitude / 10_000);
    let frac = magnitude % 10_000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 1000) as u8,
        b'0' + (frac / 100 % 10) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
    scaled
}

/// `ln(1 + e^x)` without overflow.
fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// A standard normal draw.
fn gaussian(rng: &mut impl Rng) -> f64 {
    StandardNormal.sample(rng)
}

/// `x` rounded to 4 decimals, as [`push_fixed4`] writes it.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Errors unless `x` is finite and non-negative; `what` names it in the message.
fn check_non_negative(what: &str, x: f64) -> io::Result<()> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what} must be finite and non-negative, got {x}"
        )))
    }
}

/// Errors unless `n` is in `range`; `what` names it in the message.
fn check_count(what: &str, n: u32, range: std::ops::RangeInclusive<u32>) -> io::Result<()> {
    if range.contains(&n) {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what} must be in {}..={}, got {n}",
            range.start(),
            range.end()
        )))
    }
}

/// The largest label or class count of the dense generators: labels are parsed as `f32`,
/// exact up to 2^24.
pub const MAX_CLASSES: u32 = 1 << 24;

/// The margin `weights·x + bias` of a sparse row; indices beyond the weights count as weight 0.
fn logistic_margin(weights: &[f32], bias: f32, indices: &[u32], values: &[f32]) -> f64 {
    indices
        .iter()
        .zip(values)
        .map(|(&i, &v)| f64::from(weights.get(i as usize).copied().unwrap_or(0.0)) * f64::from(v))
        .sum::<f64>()
        + f64::from(bias)
}

/// Mean log loss of the logistic model `(weights, bias)` on `rows` (labels 0/1), 0 for no rows.
fn logistic_log_loss(weights: &[f32], bias: f32, rows: &SparseBatch) -> f64 {
    if rows.rows() == 0 {
        return 0.0;
    }
    let total: f64 = rows
        .iter_rows()
        .map(|(label, indices, values)| {
            let m = logistic_margin(weights, bias, indices, values);
            let y = f64::from(label);
            y * softplus(-m) + (1.0 - y) * softplus(m)
        })
        .sum();
    total / rows.rows() as f64
}

/// Writes `samples` rows of dense LIBSVM text, `label 1:v 2:v ... dims:v` with values rounded
/// to 4 decimals; `row` fills the values of each row and returns its label. Buffered
/// internally.
fn write_dense_libsvm(
    out: impl Write,
    samples: u64,
    dims: usize,
    mut row: impl FnMut(&mut [f64]) -> u32,
) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut values = vec![0.0; dims];
    let mut line = Vec::with_capacity(16 + 16 * dims);
    for _ in 0..samples {
        let label = row(&mut values);
        line.clear();
        push_u64(&mut line, u64::from(label));
        for (i, &v) in values.iter().enumerate() {
            line.push(b' ');
            push_u64(&mut line, i as u64 + 1);
            line.push(b':');
            push_fixed4(&mut line, v);
        }
        line.push(b'\n');
        out.write_all(&line)?;
    }
    out.flush()
}

// ---------------------------------------------------------------------------------------------
// Sparse logistic regression

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
struct AliasTable {
    /// Per column: accept the column itself when a uniform 32-bit fraction is below the
    /// threshold (`probability · 2^32`), else take its alias. One 8-byte entry per column, so a
    /// draw touches one cache line.
    entries: Vec<(u32, u32)>,
}

impl AliasTable {
    fn new(weights: &[f64]) -> Self {
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

    fn sample(&self, rng: &mut impl RngCore) -> u32 {
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

/// Samples rows of distinct feature ranks.
struct RowSampler {
    table: AliasTable,
    zipf_exponent: f64,
    nnz: usize,
    /// `marks[r] == stamp` iff rank r is in the current row.
    marks: Vec<u32>,
    stamp: u32,
    scratch: Vec<(f64, u32)>,
}

impl RowSampler {
    fn new(spec: &SparseLrSpec) -> Self {
        let weights: Vec<f64> = (0..spec.features)
            .map(|r| f64::from(r + 1).powf(-spec.zipf_exponent))
            .collect();
        Self {
            table: AliasTable::new(&weights),
            zipf_exponent: spec.zipf_exponent,
            nnz: spec.nnz as usize,
            marks: vec![0; spec.features as usize],
            stamp: 0,
            scratch: Vec::new(),
        }
    }

    /// Fills `ranks` with `nnz` distinct ranks, drawn one after the other in proportion to
    /// their popularity among the ranks not drawn yet.
    fn sample(&mut self, rng: &mut impl RngCore, ranks: &mut Vec<u32>) {
        ranks.clear();
        self.next_stamp();
        let budget = 64 * self.nnz + 1024;
        for _ in 0..budget {
            let r = self.table.sample(rng);
            if self.marks[r as usize] != self.stamp {
                self.marks[r as usize] = self.stamp;
                ranks.push(r);
                if ranks.len() == self.nnz {
                    return;
                }
            }
        }
        // Rejection is too slow when the row must take most of the popularity mass; draw the
        // same distribution (successive sampling without replacement) with Efraimidis-Spirakis
        // keys: the nnz largest of u^(1/w), here ln(u)/w.
        ranks.clear();
        self.scratch.clear();
        self.scratch.extend((0..self.marks.len() as u32).map(|r| {
            let u = 1.0 - rng.random::<f64>(); // (0, 1]
            let w = f64::from(r + 1).powf(-self.zipf_exponent);
            (u.ln() / w, r)
        }));
        let k = self.nnz - 1;
        self.scratch
            .select_nth_unstable_by(k, |a, b| b.0.total_cmp(&a.0));
        ranks.extend(self.scratch[..self.nnz].iter().map(|&(_, r)| r));
    }

    fn next_stamp(&mut self) {
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.marks.fill(0);
            self.stamp = 1;
        }
    }
}

/// The model of a spec: the permutation from popularity rank to feature id, and the truth.
fn sparse_lr_model(spec: &SparseLrSpec, sampler: &mut RowSampler) -> (Vec<u32>, SparseLrTruth) {
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
        sampler.sample(&mut calibration, &mut ranks);
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
    sampler: &mut RowSampler,
    perm: &[u32],
    weights: &[f32],
    rate: f64,
) -> f32 {
    let mut rng = stream_rng(spec.seed, STREAM_BIAS);
    let mut ranks = Vec::with_capacity(spec.nnz as usize);
    let margins: Vec<f64> = (0..8192)
        .map(|_| {
            sampler.sample(&mut rng, &mut ranks);
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
    sparse_lr_model(spec, &mut RowSampler::new(spec)).1
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
    let mut sampler = RowSampler::new(spec);
    let (perm, truth) = sparse_lr_model(spec, &mut sampler);
    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut ranks = Vec::with_capacity(spec.nnz as usize);
    let mut ids: Vec<(u32, f64)> = Vec::with_capacity(spec.nnz as usize);
    let mut line = Vec::with_capacity(16 + 12 * spec.nnz as usize);
    for _ in 0..spec.samples {
        sampler.sample(&mut rng, &mut ranks);
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

// ---------------------------------------------------------------------------------------------
// Dense logistic regression

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

// ---------------------------------------------------------------------------------------------
// Rings

/// Concentric rings in 2-D, one class per ring (see [`write_rings`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingsSpec {
    /// Rows to write.
    pub samples: u64,
    /// Number of rings, which are the classes (2 or more).
    pub classes: u32,
    /// Standard deviation of the Gaussian noise on the radius.
    pub noise: f64,
    /// Features of pure noise after the two coordinates.
    pub extra_dims: u32,
    /// Seed of every random choice.
    pub seed: u64,
}

impl RingsSpec {
    /// A spec with noise 0.1 and no extra dimension.
    pub fn new(samples: u64, classes: u32, seed: u64) -> Self {
        Self {
            samples,
            classes,
            noise: 0.1,
            extra_dims: 0,
            seed,
        }
    }

    /// Checks that the spec describes a dataset that can be generated.
    pub fn validate(&self) -> io::Result<()> {
        check_count("rings classes", self.classes, 2..=MAX_CLASSES)?;
        check_non_negative("rings noise", self.noise)?;
        check_count("rings extra dimensions", self.extra_dims, 0..=u32::MAX - 2)
    }
}

/// What [`write_rings`] drew from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RingsTruth {
    /// Radius of each class's ring: class `c` has radius `c + 1`.
    pub radii: Vec<f64>,
    /// Standard deviation of the Gaussian noise on the radius.
    pub noise: f64,
    /// Standard-normal noise features after the two coordinates.
    pub extra_dims: u32,
}

impl RingsTruth {
    /// The class whose ring is nearest to the point `(x, y)`.
    pub fn nearest_ring(&self, x: f64, y: f64) -> u32 {
        let r = x.hypot(y);
        nearest(self.radii.iter().map(|&radius| (r - radius).abs()))
    }
}

/// The index of the smallest distance (the first of equals), 0 if there is none.
fn nearest(distances: impl Iterator<Item = f64>) -> u32 {
    distances
        .enumerate()
        .fold((0, f64::INFINITY), |best, (i, d)| {
            if d < best.1 { (i as u32, d) } else { best }
        })
        .0
}

/// Writes `spec.samples` rows of concentric rings as dense LIBSVM text and returns the truth.
///
/// Each row picks a class `c` uniformly, an angle uniformly and a radius `c + 1 + noise·ε`
/// (`ε` standard normal), and writes the point's two coordinates, then `extra_dims` standard
/// normal features. Labels are `0..classes`: with two classes the LIBSVM parser maps them to
/// 0/1 as they are, with more it keeps them. No linear model separates the classes; classifying
/// by the nearest ring is right unless the noise moves a point half-way to the next ring
/// (noise 0.1: all but about 1 in 10^6).
///
/// Lines are `label 1:x 2:y 3:e ...` (every feature, 1-based). Errors if the spec is invalid
/// (`ErrorKind::InvalidInput`) or on a write error.
pub fn write_rings(spec: &RingsSpec, out: impl Write) -> io::Result<RingsTruth> {
    spec.validate()?;
    let truth = RingsTruth {
        radii: (1..=spec.classes).map(f64::from).collect(),
        noise: spec.noise,
        extra_dims: spec.extra_dims,
    };
    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    let dims = 2 + spec.extra_dims as usize;
    write_dense_libsvm(out, spec.samples, dims, |x| {
        let class = rng.random_range(0..spec.classes);
        let angle = rng.random::<f64>() * std::f64::consts::TAU;
        let r = truth.radii[class as usize] + spec.noise * gaussian(&mut rng);
        x[0] = r * angle.cos();
        x[1] = r * angle.sin();
        x[2..].iter_mut().for_each(|v| *v = gaussian(&mut rng));
        class
    })?;
    Ok(truth)
}

// ---------------------------------------------------------------------------------------------
// Blobs

/// Gaussian blobs for k-means (see [`write_blobs`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlobsSpec {
    /// Rows to write.
    pub samples: u64,
    /// Number of blobs.
    pub k: u32,
    /// Dimension of the points.
    pub features: u32,
    /// Standard deviation of each coordinate around the blob's centre.
    pub spread: f64,
    /// Centres are uniform in `[-box_half_width, box_half_width]^features`.
    pub box_half_width: f64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl BlobsSpec {
    /// A spec with spread 1.0 and centres in `[-10, 10]^features`.
    pub fn new(samples: u64, k: u32, features: u32, seed: u64) -> Self {
        Self {
            samples,
            k,
            features,
            spread: 1.0,
            box_half_width: 10.0,
            seed,
        }
    }

    /// Checks that the spec describes a dataset that can be generated.
    pub fn validate(&self) -> io::Result<()> {
        check_count("blobs k", self.k, 1..=MAX_CLASSES)?;
        check_count("blobs features", self.features, 1..=u32::MAX)?;
        check_non_negative("blob spread", self.spread)?;
        if !(self.box_half_width.is_finite() && self.box_half_width > 0.0) {
            return Err(invalid(format!(
                "blobs box half-width must be finite and positive, got {}",
                self.box_half_width
            )));
        }
        Ok(())
    }
}

/// The blobs [`write_blobs`] drew from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlobsTruth {
    /// One centre per blob, `features` coordinates each.
    pub centres: Vec<Vec<f64>>,
    /// Standard deviation of each coordinate around the centre.
    pub spread: f64,
}

impl BlobsTruth {
    /// The blob whose centre is nearest to `point` (Euclidean).
    pub fn nearest_centre(&self, point: &[f32]) -> u32 {
        nearest(self.centres.iter().map(|c| {
            c.iter()
                .zip(point)
                .map(|(&a, &b)| (a - f64::from(b)).powi(2))
                .sum::<f64>()
        }))
    }
}

/// The blobs of a spec.
fn blobs_model(spec: &BlobsSpec) -> BlobsTruth {
    let mut rng = stream_rng(spec.seed, STREAM_MODEL);
    let w = spec.box_half_width;
    let centres = (0..spec.k)
        .map(|_| {
            (0..spec.features)
                .map(|_| rng.random_range(-w..=w))
                .collect()
        })
        .collect();
    BlobsTruth {
        centres,
        spread: spec.spread,
    }
}

/// Writes `spec.samples` points of Gaussian blobs as dense LIBSVM text and returns the blobs.
///
/// The `k` centres are uniform in `[-box_half_width, box_half_width]^features`. Each row picks
/// a blob uniformly and writes its centre plus `N(0, spread²)` noise on every coordinate; the
/// label is the blob id, `0..k` (with two blobs the LIBSVM parser maps them to 0/1 as they are,
/// with more it keeps them). Lines are `blob 1:v 2:v ... F:v` (every feature, 1-based). Errors
/// if the spec is invalid (`ErrorKind::InvalidInput`) or on a write error.
pub fn write_blobs(spec: &BlobsSpec, out: impl Write) -> io::Result<BlobsTruth> {
    spec.validate()?;
    let truth = blobs_model(spec);
    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    write_dense_libsvm(out, spec.samples, spec.features as usize, |x| {
        let blob = rng.random_range(0..spec.k);
        for (v, &c) in x.iter_mut().zip(&truth.centres[blob as usize]) {
            *v = c + spec.spread * gaussian(&mut rng);
        }
        blob
    })?;
    Ok(truth)
}

// ---------------------------------------------------------------------------------------------
// Ratings

/// Global mean of the generated ratings model.
pub const RATINGS_BASE: f64 = 3.0;

/// Standard deviation of the generated user and item biases.
pub const RATINGS_BIAS_STD: f64 = 0.3;

/// A synthetic low-rank ratings dataset (see [`write_ratings`] for the model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RatingsSpec {
    /// Number of users.
    pub users: u32,
    /// Number of items.
    pub items: u32,
    /// Rank of the true factorisation.
    pub rank: u32,
    /// Probability that a (user, item) pair is rated, in (0, 1].
    pub density: f64,
    /// Standard deviation of the rating noise.
    pub noise: f64,
    /// Seed of every random choice.
    pub seed: u64,
}

impl RatingsSpec {
    /// Checks that the spec describes a dataset that can be generated.
    pub fn validate(&self) -> io::Result<()> {
        if self.users == 0 || self.items == 0 || self.rank == 0 {
            return Err(invalid(format!(
                "ratings need at least one user, item and rank, got {} users, {} items, rank {}",
                self.users, self.items, self.rank
            )));
        }
        if !(self.density > 0.0 && self.density <= 1.0) {
            return Err(invalid(format!(
                "ratings density must be in (0, 1], got {}",
                self.density
            )));
        }
        check_non_negative("ratings noise", self.noise)
    }

    /// Expected number of ratings: `users · items · density`.
    pub fn expected_ratings(&self) -> f64 {
        f64::from(self.users) * f64::from(self.items) * self.density
    }
}

/// What [`write_ratings`] wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RatingsTruth {
    /// Standard deviation of the noise: the test RMSE a perfect model would reach.
    pub noise: f64,
    /// Mean of the written ratings (as written, rounded to 4 decimals).
    pub mean: f64,
    /// Number of ratings written.
    pub ratings: u64,
}

/// Writes a synthetic ratings dataset as MovieLens `u.data` and returns what it wrote.
///
/// The model: `rating(u, i) = 3.0 + b_u + b_i + <p_u, q_i> + ε` with `b_u, b_i ~ N(0, 0.3²)`,
/// the entries of `p_u, q_i ∈ R^rank` `~ N(0, 1/sqrt(rank))` (so `<p_u, q_i>` has variance
/// about 1) and `ε ~ N(0, noise²)`. Ratings are not clipped to a scale. Each (user, item) pair
/// is present independently with probability `density`; present pairs are found by geometric
/// skipping over the pairs in user-major order, so the cost is O(ratings), not
/// O(users · items).
///
/// Lines are `user<TAB>item<TAB>rating<TAB>0` with 1-based ids, the rating with 4 decimals, in
/// user-major order. The output is buffered internally. Errors if the spec is invalid
/// (`ErrorKind::InvalidInput`) or on a write error.
pub fn write_ratings(spec: &RatingsSpec, out: impl Write) -> io::Result<RatingsTruth> {
    spec.validate()?;
    let rank = spec.rank as usize;
    let factor_std = (f64::from(spec.rank)).powf(-0.25);
    let mut model = stream_rng(spec.seed, STREAM_MODEL);
    let mut factors = |n: u32| {
        let vectors: Vec<f32> = (0..n as usize * rank)
            .map(|_| (factor_std * gaussian(&mut model)) as f32)
            .collect();
        vectors
    };
    let p = factors(spec.users);
    let q = factors(spec.items);
    let mut biases = |n: u32| {
        (0..n)
            .map(|_| RATINGS_BIAS_STD * gaussian(&mut model))
            .collect::<Vec<f64>>()
    };
    let b_user = biases(spec.users);
    let b_item = biases(spec.items);

    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    let total = u64::from(spec.users) * u64::from(spec.items);
    let items = u64::from(spec.items);
    // Pairs skipped before the next present one: Geometric(density), by inversion.
    let ln_absent = (1.0 - spec.density).ln();
    let skip = |rng: &mut StdRng| -> u64 {
        if spec.density >= 1.0 {
            return 0;
        }
        let u = 1.0 - rng.random::<f64>(); // (0, 1]
        (u.ln() / ln_absent).floor() as u64 // saturates for huge skips
    };

    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut line = Vec::with_capacity(64);
    let mut count = 0u64;
    let mut sum_scaled: i128 = 0;
    let mut k = skip(&mut rng);
    while k < total {
        let (u, i) = ((k / items) as usize, (k % items) as usize);
        let pu = &p[u * rank..(u + 1) * rank];
        let qi = &q[i * rank..(i + 1) * rank];
        let dot: f64 = pu
            .iter()
            .zip(qi)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let rating = RATINGS_BASE + b_user[u] + b_item[i] + dot + spec.noise * gaussian(&mut rng);
        line.clear();
        push_u64(&mut line, u as u64 + 1);
        line.push(b'\t');
        push_u64(&mut line, i as u64 + 1);
        line.push(b'\t');
        sum_scaled += i128::from(push_fixed4(&mut line, rating));
        line.extend_from_slice(b"\t0\n");
        out.write_all(&line)?;
        count += 1;
        k = k.saturating_add(1).saturating_add(skip(&mut rng));
    }
    out.flush()?;
    let mean = if count == 0 {
        0.0
    } else {
        sum_scaled as f64 / 10_000.0 / count as f64
    };
    Ok(RatingsTruth {
        noise: spec.noise,
        mean,
        ratings: count,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::parse::{InputFormat, ParseOptions, Parsed, parse_reader};

    fn parse(bytes: &[u8], format: InputFormat) -> Parsed {
        parse_reader(
            bytes,
            Path::new("generated"),
            format,
            &ParseOptions::default(),
        )
        .unwrap()
    }

    #[test]
    fn formatting_helpers() {
        let mut out = Vec::new();
        push_u64(&mut out, 0);
        out.push(b' ');
        push_u64(&mut out, 18_446_744_073_709_551_615);
        out.push(b' ');
        assert_eq!(push_fixed4(&mut out, -0.49996), -5000);
        out.push(b' ');
        assert_eq!(push_fixed4(&mut out, 1.23456), 12346);
        out.push(b' ');
        push_fixed4(&mut out, -0.00001);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "0 18446744073709551615 -0.5000 1.2346 0.0000"
        );
    }

    #[test]
    fn alias_table_matches_its_distribution() {
        let weights = [5.0, 1.0, 0.0, 2.0, 2.0];
        let table = AliasTable::new(&weights);
        let mut rng = stream_rng(1, 1);
        let mut counts = [0u32; 5];
        let n = 200_000;
        for _ in 0..n {
            counts[table.sample(&mut rng) as usize] += 1;
        }
        assert_eq!(counts[2], 0);
        for (c, w) in counts.iter().zip(weights) {
            let expected = f64::from(n) * w / 10.0;
            assert!(
                (f64::from(*c) - expected).abs() < 0.02 * f64::from(n),
                "{counts:?}"
            );
        }
    }

    #[test]
    fn sparse_lr_is_deterministic_and_valid() {
        let spec = SparseLrSpec::new(500, 2000, 20, 42);
        let mut a = Vec::new();
        let truth_a = write_sparse_lr(&spec, &mut a).unwrap();
        let mut b = Vec::new();
        let truth_b = write_sparse_lr(&spec, &mut b).unwrap();
        assert_eq!(a, b);
        assert_eq!(truth_a, truth_b);
        assert_eq!(truth_a, sparse_lr_truth(&spec));
        let mut c = Vec::new();
        write_sparse_lr(
            &SparseLrSpec {
                seed: 43,
                ..spec.clone()
            },
            &mut c,
        )
        .unwrap();
        assert_ne!(a, c);

        assert_eq!(truth_a.weights.len(), 2000);
        assert_eq!(truth_a.weights.iter().filter(|w| **w != 0.0).count(), 1000);
        let Parsed::Sparse { rows, features, .. } = parse(&a, InputFormat::Libsvm) else {
            panic!()
        };
        assert_eq!(rows.rows(), 500);
        assert!(features <= 2000);
        assert!(rows.iter_rows().all(|(l, idx, val)| {
            (l == 0.0 || l == 1.0)
                && idx.len() == 20
                && idx.windows(2).all(|w| w[0] < w[1])
                && val.iter().all(|&v| v == 1.0)
        }));
    }

    #[test]
    fn sparse_lr_truth_explains_its_data() {
        let spec = SparseLrSpec::new(20_000, 10_000, 30, 7);
        let mut text = Vec::new();
        let truth = write_sparse_lr(&spec, &mut text).unwrap();
        let Parsed::Sparse {
            rows, label_map, ..
        } = parse(&text, InputFormat::Libsvm)
        else {
            panic!()
        };
        // Both classes occur and the LIBSVM parser keeps 0/1 as they are.
        assert_eq!(
            label_map,
            Some(crate::manifest::LabelMap {
                negative: 0.0,
                positive: 1.0
            })
        );
        // The 1-based indices written come back as the 0-based ids of the truth. Data whose
        // largest index is below 10_000 is parsed with fewer features, which is fine.
        let loss = truth.log_loss(&rows);
        // Margin std 2 gives an expected log loss of about 0.45.
        assert!(loss < 0.52 && loss > 0.38, "log loss {loss}");
        // Margins have about the asked-for standard deviation.
        let margins: Vec<f64> = rows
            .iter_rows()
            .map(|(_, i, v)| truth.margin(i, v))
            .collect();
        let mean = margins.iter().sum::<f64>() / margins.len() as f64;
        let var = margins.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / margins.len() as f64;
        assert!((var.sqrt() - 2.0).abs() < 0.3, "margin std {}", var.sqrt());
        // A model that ignores the features does much worse.
        let zero = SparseLrTruth {
            weights: vec![0.0; 10_000],
            bias: 0.0,
        };
        assert!((zero.log_loss(&rows) - std::f64::consts::LN_2).abs() < 1e-9);
    }

    #[test]
    fn sparse_lr_positive_rate_and_binary_values() {
        // Web-like: 300 binary features, 12 per row, 3% positive; a9a-like: 24% positive.
        for (rate, seed) in [(0.03, 11), (0.24, 12)] {
            let spec = SparseLrSpec {
                positive_rate: Some(rate),
                ..SparseLrSpec::new(40_000, 300, 12, seed)
            };
            let mut text = Vec::new();
            let truth = write_sparse_lr(&spec, &mut text).unwrap();
            let mut again = Vec::new();
            assert_eq!(write_sparse_lr(&spec, &mut again).unwrap(), truth);
            assert_eq!(text, again, "deterministic per seed");
            assert!(
                truth.bias < -0.5,
                "the bias moves towards the minority: {}",
                truth.bias
            );
            let Parsed::Sparse { rows, .. } = parse(&text, InputFormat::Libsvm) else {
                panic!()
            };
            let positives = rows.labels.iter().filter(|&&l| l == 1.0).count();
            let observed = positives as f64 / rows.rows() as f64;
            // Binomial sd at 40k rows is below 0.0022; the calibration's own error is smaller.
            assert!(
                (observed - rate).abs() < 0.006,
                "positive rate {observed}, asked for {rate}"
            );
            assert!(rows.values.iter().all(|&v| v == 1.0), "binary values");
            // The truth explains the data better than the base rate alone.
            let base = -(rate * rate.ln() + (1.0 - rate) * (1.0 - rate).ln());
            assert!(truth.log_loss(&rows) < 0.9 * base);
        }
        // Without a rate the bias stays 0 and the data is today's.
        assert_eq!(
            sparse_lr_truth(&SparseLrSpec::new(10, 300, 12, 11)).bias,
            0.0
        );
        let bad = SparseLrSpec {
            positive_rate: Some(1.0),
            ..SparseLrSpec::new(10, 300, 12, 11)
        };
        assert!(write_sparse_lr(&bad, io::sink()).is_err());
    }

    #[test]
    fn sparse_lr_real_values() {
        let spec = SparseLrSpec {
            values: FeatureValues::Real,
            ..SparseLrSpec::new(20_000, 2_000, 20, 5)
        };
        let mut text = Vec::new();
        let truth = write_sparse_lr(&spec, &mut text).unwrap();
        let Parsed::Sparse { rows, .. } = parse(&text, InputFormat::Libsvm) else {
            panic!()
        };
        assert!(rows.values.iter().all(|&v| v > 0.0 && v <= 2.0));
        let mean = rows.values.iter().map(|&v| f64::from(v)).sum::<f64>() / rows.nnz() as f64;
        assert!((mean - 1.0).abs() < 0.02, "mean value {mean}");
        assert!(rows.values.iter().any(|&v| v != 1.0));
        // The labels follow the truth with these values: its log loss is that of margin std 2.
        let loss = truth.log_loss(&rows);
        assert!(loss < 0.52 && loss > 0.38, "log loss {loss}");
    }

    #[test]
    fn feature_popularity_is_skewed() {
        let spec = SparseLrSpec::new(5_000, 10_000, 10, 3);
        let mut text = Vec::new();
        write_sparse_lr(&spec, &mut text).unwrap();
        let Parsed::Sparse { rows, .. } = parse(&text, InputFormat::Libsvm) else {
            panic!()
        };
        let mut counts = vec![0u32; 10_000];
        rows.indices.iter().for_each(|&i| counts[i as usize] += 1);
        counts.sort_unstable_by(|a, b| b.cmp(a));
        // Zipf(1) over 10k features: the top 1% carry ~half of the draws, and hundreds of
        // features are never drawn at all.
        let top: u32 = counts[..100].iter().sum();
        assert!(f64::from(top) / rows.indices.len() as f64 > 0.4);
        assert!(counts.iter().filter(|&&c| c == 0).count() > 100);
    }

    #[test]
    fn dense_rows_use_the_fallback_sampler() {
        // Every feature in every row: rejection alone would take forever on the last ones.
        let spec = SparseLrSpec {
            zipf_exponent: 3.0,
            ..SparseLrSpec::new(50, 64, 64, 1)
        };
        let mut text = Vec::new();
        write_sparse_lr(&spec, &mut text).unwrap();
        let Parsed::Sparse { rows, .. } = parse(&text, InputFormat::Libsvm) else {
            panic!()
        };
        assert!(
            rows.iter_rows()
                .all(|(_, idx, _)| idx == (0..64).collect::<Vec<_>>())
        );
    }

    #[test]
    fn invalid_specs_are_rejected() {
        let bad = [
            SparseLrSpec::new(10, 0, 1, 0),
            SparseLrSpec::new(10, 5, 6, 0),
            SparseLrSpec::new(10, 5, 0, 0),
            SparseLrSpec {
                informative: 6,
                ..SparseLrSpec::new(10, 5, 1, 0)
            },
            SparseLrSpec {
                zipf_exponent: f64::NAN,
                ..SparseLrSpec::new(10, 5, 1, 0)
            },
        ];
        for spec in bad {
            let err = write_sparse_lr(&spec, io::sink()).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{spec:?}");
        }
        let spec = |density, noise| RatingsSpec {
            users: 2,
            items: 2,
            rank: 1,
            density,
            noise,
            seed: 0,
        };
        for s in [
            spec(0.0, 0.1),
            spec(1.5, 0.1),
            spec(0.5, -1.0),
            RatingsSpec {
                rank: 0,
                ..spec(0.5, 0.1)
            },
        ] {
            assert!(write_ratings(&s, io::sink()).is_err(), "{s:?}");
        }
    }

    fn ratings_spec(noise: f64, seed: u64) -> RatingsSpec {
        RatingsSpec {
            users: 1000,
            items: 500,
            rank: 8,
            density: 0.05,
            noise,
            seed,
        }
    }

    #[test]
    fn ratings_count_mean_and_determinism() {
        let spec = ratings_spec(0.5, 11);
        let mut a = Vec::new();
        let truth = write_ratings(&spec, &mut a).unwrap();
        let mut b = Vec::new();
        assert_eq!(write_ratings(&spec, &mut b).unwrap(), truth);
        assert_eq!(a, b);
        let mut c = Vec::new();
        write_ratings(&ratings_spec(0.5, 12), &mut c).unwrap();
        assert_ne!(a, c);

        // 25_000 expected, standard deviation ~155.
        let expected = spec.expected_ratings();
        assert!(
            (truth.ratings as f64 - expected).abs() < 0.03 * expected,
            "{} ratings, expected {expected}",
            truth.ratings
        );
        assert!((truth.mean - 3.0).abs() < 0.1, "mean {}", truth.mean);
        assert_eq!(truth.noise, 0.5);

        let Parsed::Ratings {
            ratings,
            users,
            items,
        } = parse(&a, InputFormat::Movielens)
        else {
            panic!()
        };
        assert_eq!(ratings.len() as u64, truth.ratings);
        assert!(users <= 1000 && users > 900 && items <= 500 && items > 450);
        let mean =
            ratings.ratings.iter().map(|&r| f64::from(r)).sum::<f64>() / ratings.len() as f64;
        assert!((mean - truth.mean).abs() < 1e-4);
        // Var = 0.3² + 0.3² + 1 + 0.5² ≈ 1.43 (factor sampling adds some spread).
        let var = ratings
            .ratings
            .iter()
            .map(|&r| (f64::from(r) - mean).powi(2))
            .sum::<f64>()
            / ratings.len() as f64;
        assert!((1.15..1.75).contains(&var), "variance {var}");
    }

    #[test]
    fn ratings_noise_has_the_asked_for_std() {
        // Same seed: same factors and same pairs, so the difference is exactly the noise.
        let mut clean = Vec::new();
        write_ratings(&ratings_spec(0.0, 5), &mut clean).unwrap();
        let mut noisy = Vec::new();
        write_ratings(&ratings_spec(0.7, 5), &mut noisy).unwrap();
        let ratings = |t: &[u8]| match parse(t, InputFormat::Movielens) {
            Parsed::Ratings { ratings, .. } => ratings,
            _ => panic!(),
        };
        let (clean, noisy) = (ratings(&clean), ratings(&noisy));
        assert_eq!(clean.users, noisy.users);
        assert_eq!(clean.items, noisy.items);
        let n = clean.len() as f64;
        let diffs: Vec<f64> = clean
            .ratings
            .iter()
            .zip(&noisy.ratings)
            .map(|(&a, &b)| f64::from(b) - f64::from(a))
            .collect();
        let mean = diffs.iter().sum::<f64>() / n;
        let std = (diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(mean.abs() < 0.03, "noise mean {mean}");
        assert!((std - 0.7).abs() < 0.02, "noise std {std}");
    }

    #[test]
    fn full_density_writes_every_pair_in_order() {
        let spec = RatingsSpec {
            users: 3,
            items: 4,
            rank: 2,
            density: 1.0,
            noise: 0.1,
            seed: 1,
        };
        let mut out = Vec::new();
        let truth = write_ratings(&spec, &mut out).unwrap();
        assert_eq!(truth.ratings, 12);
        let text = String::from_utf8(out).unwrap();
        let pairs: Vec<(u32, u32)> = text
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                assert_eq!(f.len(), 4);
                assert_eq!(f[3], "0");
                assert_eq!(f[2].split('.').nth(1).unwrap().len(), 4);
                (f[0].parse().unwrap(), f[1].parse().unwrap())
            })
            .collect();
        let expected: Vec<(u32, u32)> =
            (1..=3).flat_map(|u| (1..=4).map(move |i| (u, i))).collect();
        assert_eq!(pairs, expected);
    }

    /// Parses dense LIBSVM output and checks it has `dims` features, every one in every row.
    fn parse_dense(bytes: &[u8], dims: u32) -> (SparseBatch, Option<crate::manifest::LabelMap>) {
        let Parsed::Sparse {
            rows,
            features,
            label_map,
        } = parse(bytes, InputFormat::Libsvm)
        else {
            panic!("expected sparse rows")
        };
        assert_eq!(features, dims);
        let all: Vec<u32> = (0..dims).collect();
        assert!(
            rows.iter_rows().all(|(_, idx, _)| idx == all),
            "a row is not dense"
        );
        (rows, label_map)
    }

    /// The fraction of rows whose label is `predict(values)`.
    fn accuracy(rows: &SparseBatch, predict: impl Fn(&[f32]) -> u32) -> f64 {
        let right = rows
            .iter_rows()
            .filter(|(label, _, values)| *label == predict(values) as f32)
            .count();
        right as f64 / rows.rows() as f64
    }

    /// Mean and standard deviation of column `j` of dense rows.
    fn column_stats(rows: &SparseBatch, j: usize) -> (f64, f64) {
        let column: Vec<f64> = rows.iter_rows().map(|(_, _, v)| f64::from(v[j])).collect();
        let n = column.len() as f64;
        let mean = column.iter().sum::<f64>() / n;
        let var = column.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    }

    /// Writes with `seed`; checks that the seed decides the output and the truth.
    fn check_deterministic<T: PartialEq + std::fmt::Debug>(
        write: impl Fn(u64, &mut Vec<u8>) -> io::Result<T>,
    ) {
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        let truth = write(5, &mut a).unwrap();
        assert_eq!(write(5, &mut b).unwrap(), truth);
        assert_eq!(a, b);
        write(6, &mut c).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn dense_writer_lists_every_feature_zeros_included() {
        let mut out = Vec::new();
        let mut rows = [[0.0, -1.23456, 2.0], [0.00004, 3.0, -0.5]].into_iter();
        let mut label = 0;
        write_dense_libsvm(&mut out, 2, 3, |x| {
            x.copy_from_slice(&rows.next().unwrap());
            label += 1;
            label
        })
        .unwrap();
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "1 1:0.0000 2:-1.2346 3:2.0000\n2 1:0.0000 2:3.0000 3:-0.5000\n"
        );
        // The parser keeps the written zeros, so the rows stay dense.
        let (rows, _) = parse_dense(&out, 3);
        assert_eq!(rows.values, vec![0.0, -1.2346, 2.0, 0.0, 3.0, -0.5]);
        assert_eq!(round4(-1.23456), -1.2346);
    }

    #[test]
    fn dense_generators_are_deterministic() {
        check_deterministic(|seed, out| write_dense_lr(&DenseLrSpec::new(300, 28, seed), out));
        check_deterministic(|seed, out| write_rings(&RingsSpec::new(300, 3, seed), out));
        check_deterministic(|seed, out| write_blobs(&BlobsSpec::new(300, 4, 5, seed), out));
        // The model does not depend on the number of samples.
        let model = |samples| {
            let mut truth = write_dense_lr(&DenseLrSpec::new(samples, 28, 1), io::sink()).unwrap();
            truth.bayes_log_loss = 0.0;
            truth.log_loss = 0.0;
            truth.positive_fraction = 0.0;
            truth
        };
        assert_eq!(model(10), model(20));
        let centres = |samples| {
            write_blobs(&BlobsSpec::new(samples, 4, 5, 1), io::sink())
                .unwrap()
                .centres
        };
        assert_eq!(centres(10), centres(20));
    }

    #[test]
    fn dense_lr_truth_explains_its_data() {
        let spec = DenseLrSpec::new(20_000, 28, 7);
        let mut text = Vec::new();
        let truth = write_dense_lr(&spec, &mut text).unwrap();
        assert_eq!((truth.weights.len(), truth.scales.len()), (28, 28));
        let (rows, label_map) = parse_dense(&text, 28);
        assert_eq!(rows.rows(), 20_000);
        assert_eq!(
            label_map,
            Some(crate::manifest::LabelMap {
                negative: 0.0,
                positive: 1.0
            })
        );
        // The true model's loss on the parsed rows is the one reported, up to f32 parsing,
        // and close to the Bayes log loss (its expectation; standard error ~0.004 here).
        let loss = truth.log_loss_on(&rows);
        assert!(
            (loss - truth.log_loss).abs() < 1e-4,
            "{loss} vs {}",
            truth.log_loss
        );
        assert!(
            (loss - truth.bayes_log_loss).abs() < 0.02,
            "{loss} vs Bayes {}",
            truth.bayes_log_loss
        );
        // Margin std 2: an expected log loss of about 0.45; ignoring the features costs ln 2.
        assert!((0.38..0.52).contains(&truth.bayes_log_loss), "{truth:?}");
        let zero = DenseLrTruth {
            weights: vec![0.0; 28],
            ..truth.clone()
        };
        assert!((zero.log_loss_on(&rows) - std::f64::consts::LN_2).abs() < 1e-9);
        assert!((truth.positive_fraction - 0.5).abs() < 0.03);
        let positives = rows.labels.iter().filter(|&&l| l == 1.0).count();
        assert!((positives as f64 / 20_000.0 - truth.positive_fraction).abs() < 1e-12);

        let margins: Vec<f64> = rows
            .iter_rows()
            .map(|(_, i, v)| truth.margin(i, v))
            .collect();
        let mean = margins.iter().sum::<f64>() / margins.len() as f64;
        let var = margins.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / margins.len() as f64;
        assert!((var.sqrt() - 2.0).abs() < 0.1, "margin std {}", var.sqrt());

        // Features have the reported scales, and correlation 0.5 within a group only.
        for j in [0, 13, 27] {
            let (mean, std) = column_stats(&rows, j);
            assert!(
                mean.abs() < 0.05 * truth.scales[j],
                "feature {j} mean {mean}"
            );
            assert!(
                (std / truth.scales[j] - 1.0).abs() < 0.05,
                "feature {j} std {std}"
            );
        }
        let correlation = |a: usize, b: usize| {
            let ((ma, sa), (mb, sb)) = (column_stats(&rows, a), column_stats(&rows, b));
            rows.iter_rows()
                .map(|(_, _, v)| (f64::from(v[a]) - ma) * (f64::from(v[b]) - mb))
                .sum::<f64>()
                / rows.rows() as f64
                / (sa * sb)
        };
        assert!((correlation(0, 3) - 0.5).abs() < 0.05);
        assert!((correlation(24, 25) - 0.5).abs() < 0.05);
        assert!(correlation(3, 4).abs() < 0.05);
    }

    #[test]
    fn two_rings_are_classified_by_their_radius() {
        let spec = RingsSpec::new(20_000, 2, 3);
        let mut text = Vec::new();
        let truth = write_rings(&spec, &mut text).unwrap();
        assert_eq!((truth.radii.clone(), truth.noise), (vec![1.0, 2.0], 0.1));
        let (rows, label_map) = parse_dense(&text, 2);
        assert_eq!(rows.rows(), 20_000);
        // Two classes written as 0/1 are mapped to themselves.
        assert_eq!(
            label_map,
            Some(crate::manifest::LabelMap {
                negative: 0.0,
                positive: 1.0
            })
        );
        let acc = accuracy(&rows, |v| {
            truth.nearest_ring(f64::from(v[0]), f64::from(v[1]))
        });
        assert!(acc > 0.95, "nearest-ring accuracy {acc}");
        // Both classes are centred on the origin: no direction separates them.
        for class in [0.0, 1.0] {
            let ring = rows.iter_rows().filter(|(l, _, _)| *l == class);
            let (n, sx, sy) = ring.fold((0.0, 0.0, 0.0), |(n, sx, sy), (_, _, v)| {
                (n + 1.0, sx + f64::from(v[0]), sy + f64::from(v[1]))
            });
            assert!(n > 9_000.0 && (sx / n).abs() < 0.05 && (sy / n).abs() < 0.05);
        }
    }

    #[test]
    fn many_rings_keep_their_labels_and_extra_dims_are_noise() {
        let spec = RingsSpec {
            extra_dims: 3,
            ..RingsSpec::new(8_000, 4, 9)
        };
        let mut text = Vec::new();
        let truth = write_rings(&spec, &mut text).unwrap();
        assert_eq!(truth.radii, vec![1.0, 2.0, 3.0, 4.0]);
        let (rows, label_map) = parse_dense(&text, 5);
        assert_eq!(label_map, None);
        for class in 0..4 {
            assert!(rows.labels.contains(&(class as f32)));
        }
        assert!(
            rows.labels
                .iter()
                .all(|&l| (0.0..4.0).contains(&l) && l.fract() == 0.0)
        );
        let acc = accuracy(&rows, |v| {
            truth.nearest_ring(f64::from(v[0]), f64::from(v[1]))
        });
        assert!(acc > 0.95, "nearest-ring accuracy {acc}");
        for j in 2..5 {
            let (mean, std) = column_stats(&rows, j);
            assert!(
                mean.abs() < 0.05 && (std - 1.0).abs() < 0.05,
                "{mean} {std}"
            );
        }
    }

    #[test]
    fn blob_points_are_nearest_their_centre() {
        let spec = BlobsSpec::new(20_000, 8, 16, 4);
        let mut text = Vec::new();
        let truth = write_blobs(&spec, &mut text).unwrap();
        assert_eq!(truth.centres.len(), 8);
        assert!(truth.centres.iter().flatten().all(|c| c.abs() <= 10.0));
        let (rows, label_map) = parse_dense(&text, 16);
        assert_eq!(rows.rows(), 20_000);
        assert_eq!(label_map, None);
        for blob in 0..8 {
            assert!(rows.labels.contains(&(blob as f32)));
        }
        let acc = accuracy(&rows, |v| truth.nearest_centre(v));
        assert!(acc > 0.99, "nearest-centre accuracy {acc}");
        // Each coordinate deviates from its centre with the spread as standard deviation.
        let squares: f64 = rows
            .iter_rows()
            .flat_map(|(l, _, v)| v.iter().zip(&truth.centres[l as usize]))
            .map(|(&x, &c)| (f64::from(x) - c).powi(2))
            .sum();
        let std = (squares / (20_000.0 * 16.0)).sqrt();
        assert!((std - 1.0).abs() < 0.02, "spread {std}");

        // Two blobs: labels 0/1, mapped to themselves.
        let mut text = Vec::new();
        write_blobs(&BlobsSpec::new(100, 2, 3, 4), &mut text).unwrap();
        let (_, label_map) = parse_dense(&text, 3);
        assert_eq!(
            label_map,
            Some(crate::manifest::LabelMap {
                negative: 0.0,
                positive: 1.0
            })
        );
    }

    #[test]
    fn invalid_dense_specs_are_rejected_with_clear_errors() {
        fn message<T>(result: io::Result<T>) -> String {
            let err = result.err().expect("an invalid spec");
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            err.to_string()
        }
        let dense = DenseLrSpec::new(10, 28, 0);
        let cases = [
            (
                message(write_dense_lr(
                    &DenseLrSpec {
                        features: 0,
                        ..dense.clone()
                    },
                    io::sink(),
                )),
                "dense LR features must be in 1..=4294967295, got 0",
            ),
            (
                message(write_dense_lr(
                    &DenseLrSpec {
                        correlation: 1.5,
                        ..dense.clone()
                    },
                    io::sink(),
                )),
                "dense LR correlation must be between 0 and 1, got 1.5",
            ),
            (
                message(write_dense_lr(
                    &DenseLrSpec {
                        margin_std: -1.0,
                        ..dense.clone()
                    },
                    io::sink(),
                )),
                "margin standard deviation must be finite and non-negative, got -1",
            ),
            (
                message(write_dense_lr(
                    &DenseLrSpec {
                        bias: f64::INFINITY,
                        ..dense
                    },
                    io::sink(),
                )),
                "dense LR bias must be finite, got inf",
            ),
            (
                message(write_rings(&RingsSpec::new(10, 1, 0), io::sink())),
                "rings classes must be in 2..=16777216, got 1",
            ),
            (
                message(write_rings(
                    &RingsSpec {
                        noise: f64::NAN,
                        ..RingsSpec::new(10, 2, 0)
                    },
                    io::sink(),
                )),
                "rings noise must be finite and non-negative, got NaN",
            ),
            (
                message(write_blobs(&BlobsSpec::new(10, 0, 2, 0), io::sink())),
                "blobs k must be in 1..=16777216, got 0",
            ),
            (
                message(write_blobs(&BlobsSpec::new(10, 2, 0, 0), io::sink())),
                "blobs features must be in 1..=4294967295, got 0",
            ),
            (
                message(write_blobs(
                    &BlobsSpec {
                        spread: -0.5,
                        ..BlobsSpec::new(10, 2, 2, 0)
                    },
                    io::sink(),
                )),
                "blob spread must be finite and non-negative, got -0.5",
            ),
            (
                message(write_blobs(
                    &BlobsSpec {
                        box_half_width: 0.0,
                        ..BlobsSpec::new(10, 2, 2, 0)
                    },
                    io::sink(),
                )),
                "blobs box half-width must be finite and positive, got 0",
            ),
        ];
        for (shown, expected) in cases {
            assert_eq!(shown, expected);
        }
    }
}
