//! Criteo-shaped click data from a logistic model over the parser's features:
//! [`write_criteo`].

use std::io::{self, BufWriter, Write};

use mlless_core::SparseBatch;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

use super::shared::{
    STREAM_CALIBRATION, STREAM_MODEL, STREAM_SAMPLES, check_non_negative, gaussian, invalid,
    push_u64, sigmoid, softplus, stream_rng,
};
use super::sparse_lr::AliasTable;
use crate::parse::{CRITEO_CATEGORICAL, CRITEO_INTEGER, criteo_feature};

/// One integer column of [`CriteoSpec`]: a heavy-tailed count, `floor(exp(log_mean + log_std · z))`
/// for `z ~ N(0, 1)` (log-normal, so 0 whenever `log_mean + log_std · z < 0`), or missing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct IntegerColumn {
    /// Probability that the value is missing (an empty field), in [0, 1].
    pub missing: f64,
    /// Mean of the log of the count: the median count is about `exp(log_mean)`.
    pub log_mean: f64,
    /// Standard deviation of the log of the count, finite and non-negative: larger is a heavier
    /// tail.
    pub log_std: f64,
}

/// One categorical column of [`CriteoSpec`]: one of `cardinality` values with Zipf frequencies,
/// or missing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CategoricalColumn {
    /// Probability that the value is missing (an empty field), in [0, 1].
    pub missing: f64,
    /// Number of distinct values (at least 1).
    pub cardinality: u32,
    /// Exponent `s` of the Zipf law of the values' frequencies, in [0, 10]: the value of rank `r`
    /// (0-based) is drawn with probability proportional to `(r + 1)^-s`; 0 is uniform.
    pub zipf_exponent: f64,
}

/// A synthetic Criteo display-ads dataset (see [`write_criteo`] for the model).
///
/// [`CriteoSpec::new`] gives columns shaped like the Kaggle Criteo set's (45.8M rows): the
/// same cardinalities of the 26 categorical columns (3 to 10.1 million values) and roughly
/// its missing rates (up to 76%) and count distributions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriteoSpec {
    /// Rows to write.
    pub samples: u64,
    /// Seed of every random choice.
    pub seed: u64,
    /// The feature space the data is meant to be prepared into (`prepare --format criteo
    /// --features F`), at least 14: the true model is a logistic model over the features the
    /// Criteo parser makes in this space, so it is exact only there.
    pub features: u32,
    /// The expected fraction of positive rows, in (0, 1): the true bias is chosen so that the
    /// mean of `sigmoid(margin)` over rows is this (Criteo's is about 0.256).
    pub positive_rate: f64,
    /// Target standard deviation of the true margin over rows (before the bias), finite and
    /// non-negative: larger is easier to predict.
    pub margin_std: f64,
    /// The share of the margin's variance that comes from the integer columns, in [0, 1]; the
    /// rest comes from the categorical ones.
    pub integer_share: f64,
    /// The 13 integer columns I1..I13.
    pub integer: [IntegerColumn; CRITEO_INTEGER],
    /// The 26 categorical columns C1..C26.
    pub categorical: [CategoricalColumn; CRITEO_CATEGORICAL],
}

/// Kaggle Criteo's integer columns: missing rate, and log-normal parameters chosen so that the
/// median count and the share of zeros are about those of the real column.
const KAGGLE_INTEGER: [(f64, f64, f64); CRITEO_INTEGER] = [
    (0.454, 0.4, 1.2),
    (0.0, 1.1, 1.8),
    (0.215, 2.0, 1.3),
    (0.217, 1.8, 0.9),
    (0.026, 8.0, 1.8),
    (0.224, 3.5, 1.5),
    (0.043, 1.2, 1.6),
    (0.0005, 2.1, 1.0),
    (0.043, 3.7, 1.2),
    (0.454, -0.3, 0.8),
    (0.043, 0.5, 1.0),
    (0.765, -0.5, 1.2),
    (0.217, 1.7, 1.0),
];

/// Kaggle Criteo's categorical columns: missing rate and number of distinct values.
const KAGGLE_CATEGORICAL: [(f64, u32); CRITEO_CATEGORICAL] = [
    (0.0, 1_460),
    (0.0, 583),
    (0.034, 10_131_227),
    (0.034, 2_202_608),
    (0.0, 305),
    (0.121, 24),
    (0.0, 12_517),
    (0.0, 633),
    (0.0, 3),
    (0.0, 93_145),
    (0.0, 5_683),
    (0.034, 8_351_593),
    (0.0, 3_194),
    (0.0, 27),
    (0.0, 14_992),
    (0.034, 5_461_306),
    (0.0, 10),
    (0.0, 5_652),
    (0.44, 2_173),
    (0.44, 4),
    (0.034, 7_046_547),
    (0.763, 18),
    (0.0, 15),
    (0.034, 286_181),
    (0.44, 105),
    (0.44, 142_572),
];

/// The Zipf exponent of the default columns: steeper for the large (id-like) columns.
fn default_zipf_exponent(cardinality: u32) -> f64 {
    match cardinality {
        0..=99 => 0.8,
        100..=99_999 => 1.0,
        _ => 1.1,
    }
}

impl CriteoSpec {
    /// A spec with Kaggle-Criteo-shaped columns, a space of 2^20 features, a positive rate of
    /// 0.256, a margin standard deviation of 1.5 and an integer share of 0.2.
    pub fn new(samples: u64, seed: u64) -> Self {
        Self {
            samples,
            seed,
            features: 1 << 20,
            positive_rate: 0.256,
            margin_std: 1.5,
            integer_share: 0.2,
            integer: KAGGLE_INTEGER.map(|(missing, log_mean, log_std)| IntegerColumn {
                missing,
                log_mean,
                log_std,
            }),
            categorical: KAGGLE_CATEGORICAL.map(|(missing, cardinality)| CategoricalColumn {
                missing,
                cardinality,
                zipf_exponent: default_zipf_exponent(cardinality),
            }),
        }
    }

    /// Checks that the spec describes a dataset that can be generated.
    pub fn validate(&self) -> io::Result<()> {
        if self.features as usize <= CRITEO_INTEGER {
            return Err(invalid(format!(
                "criteo needs at least {} features (13 integer features and the hashing space), \
                 got {}",
                CRITEO_INTEGER + 1,
                self.features
            )));
        }
        if !(self.positive_rate > 0.0 && self.positive_rate < 1.0) {
            return Err(invalid(format!(
                "the positive rate must be in (0, 1), got {}",
                self.positive_rate
            )));
        }
        check_non_negative("margin standard deviation", self.margin_std)?;
        if !(0.0..=1.0).contains(&self.integer_share) {
            return Err(invalid(format!(
                "the integer share must be in [0, 1], got {}",
                self.integer_share
            )));
        }
        let check_missing = |name: String, missing: f64| {
            if (0.0..=1.0).contains(&missing) {
                Ok(())
            } else {
                Err(invalid(format!(
                    "the missing rate of {name} must be in [0, 1], got {missing}"
                )))
            }
        };
        for (i, column) in self.integer.iter().enumerate() {
            let name = format!("I{}", i + 1);
            check_missing(name.clone(), column.missing)?;
            if !(column.log_mean.is_finite() && column.log_mean.abs() <= 30.0) {
                return Err(invalid(format!(
                    "the log mean of {name} must be in [-30, 30], got {}",
                    column.log_mean
                )));
            }
            check_non_negative(
                &format!("the log standard deviation of {name}"),
                column.log_std,
            )?;
        }
        for (i, column) in self.categorical.iter().enumerate() {
            let name = format!("C{}", i + 1);
            check_missing(name.clone(), column.missing)?;
            if column.cardinality == 0 {
                return Err(invalid(format!("{name} needs at least one value, got 0")));
            }
            if !(0.0..=10.0).contains(&column.zipf_exponent) {
                return Err(invalid(format!(
                    "the Zipf exponent of {name} must be between 0 and 10, got {}",
                    column.zipf_exponent
                )));
            }
        }
        Ok(())
    }
}

/// The true model of a Criteo dataset and what it scores on the rows written.
///
/// The model is logistic over the features the Criteo parser makes in a space of `features`
/// features: `P(y = 1 | x) = sigmoid(bias + Σ_i weight(i) · x_i)` with `weight(i)` the
/// `integer_weights[i]` for an integer feature (`i < 13`) and [`CriteoTruth::category_weight`]
/// for a hashed one. So [`CriteoTruth::log_loss_on`] gives the true model's log loss on rows
/// prepared with `--format criteo --features F` (F = `features`), e.g. a test set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriteoTruth {
    /// The feature space of the model (the spec's).
    pub features: u32,
    /// Weights of the 13 integer features (`ln(1 + count)` as the parser makes it).
    pub integer_weights: Vec<f32>,
    /// Scale of the weights of hashed features: `category_weight(i) = scale · z(key, i)`.
    pub category_weight_std: f64,
    /// Key of the hash that gives each hashed feature its weight.
    pub category_weight_key: u64,
    /// Intercept, chosen for the spec's positive rate.
    pub bias: f32,
    /// Rows written.
    pub samples: u64,
    /// Fraction of rows labelled 1 (0 for no rows).
    pub positive_fraction: f64,
    /// Log loss of the constant model that predicts `positive_fraction`: the entropy of the
    /// labels, what a model without signal scores.
    pub base_log_loss: f64,
    /// Mean log loss of the true model on the written labels (0 for no rows).
    pub log_loss: f64,
    /// Bayes log loss: the mean over the written rows of the expected log loss of the true
    /// model given the row, `H(sigmoid(margin))`. No model can do better in expectation.
    pub bayes_log_loss: f64,
    /// Area under the ROC curve of the true model on the written rows, from margins binned by
    /// 1/64 (ties within a bin count one half); 0.5 if a class is absent.
    pub auc: f64,
}

/// An approximately standard normal draw from a hash: the sum of four uniform 16-bit fractions
/// (Irwin–Hall), centred and scaled to mean 0 and variance 1; within ±2√3.
fn hashed_normal(h: u64) -> f64 {
    let sum: u64 = (0..4).map(|k| (h >> (16 * k)) & 0xffff).sum();
    // Each fraction is (k + 0.5) / 2^16, mean 1/2.
    ((sum as f64 + 2.0) / 65_536.0 - 2.0) * 3f64.sqrt()
}

/// SplitMix64's finaliser: a bijection of `u64` with good avalanche.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The unit-scale weight of hashed feature `feature` under `key`.
fn unit_category_weight(key: u64, feature: u32) -> f64 {
    hashed_normal(mix64(
        key ^ u64::from(feature).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    ))
}

impl CriteoTruth {
    /// The true weight of feature `feature` of the parser's space: an integer weight below 13,
    /// `category_weight_std · z` for a hashed feature (`z` an approximately standard normal
    /// function of `category_weight_key` and the feature: the sum of four uniform 16-bit parts
    /// of SplitMix64's finaliser of `key ^ feature · 0x9e3779b97f4a7c15`, centred and scaled to
    /// variance 1), 0 beyond the space.
    pub fn category_weight(&self, feature: u32) -> f32 {
        if (feature as usize) < CRITEO_INTEGER {
            self.integer_weights
                .get(feature as usize)
                .copied()
                .unwrap_or(0.0)
        } else if feature < self.features {
            (self.category_weight_std * unit_category_weight(self.category_weight_key, feature))
                as f32
        } else {
            0.0
        }
    }

    /// The margin `bias + Σ weight(i) · x_i` of a parsed row.
    pub fn margin(&self, indices: &[u32], values: &[f32]) -> f64 {
        indices
            .iter()
            .zip(values)
            .map(|(&i, &v)| f64::from(self.category_weight(i)) * f64::from(v))
            .sum::<f64>()
            + f64::from(self.bias)
    }

    /// The true probability that a parsed row is positive.
    pub fn probability(&self, indices: &[u32], values: &[f32]) -> f64 {
        sigmoid(self.margin(indices, values))
    }

    /// Mean log loss of the true model on parsed `rows` (labels 0/1), 0 for no rows. Exact for
    /// rows parsed into the truth's feature space.
    pub fn log_loss_on(&self, rows: &SparseBatch) -> f64 {
        if rows.rows() == 0 {
            return 0.0;
        }
        let total: f64 = rows
            .iter_rows()
            .map(|(label, indices, values)| {
                let m = self.margin(indices, values);
                if label > 0.5 {
                    softplus(-m)
                } else {
                    softplus(m)
                }
            })
            .sum();
        total / rows.rows() as f64
    }
}

/// Ranks of the head of a Zipf law sampled exactly from an alias table; the tail beyond is
/// sampled by inverting the continuous law.
const ZIPF_HEAD: u32 = 4096;

/// Samples 0-based ranks `r < n` with probability proportional to `(r + 1)^-s`.
///
/// The first [`ZIPF_HEAD`] ranks are exact (an alias table); the table's last entry, when
/// there are more ranks, stands for the tail, whose 1-based rank is `round(t)` for `t` drawn
/// from the density `t^-s` on `[ZIPF_HEAD + 0.5, n + 0.5)`: the mass of rank `x` is then
/// `x^-s (1 + O(x^-2))`, within 10^-7 of exact beyond the head.
pub(super) struct ZipfSampler {
    table: AliasTable,
    head: u32,
    n: u32,
    /// `1 - s`, or 0 for `s = 1` (the logarithmic case).
    one_minus_s: f64,
    /// `a^(1-s)` and `b^(1-s) - a^(1-s)` (or `ln a` and `ln(b / a)` for `s = 1`) of the tail
    /// `[a, b)`.
    tail_start: f64,
    tail_span: f64,
}

impl ZipfSampler {
    pub(super) fn new(n: u32, s: f64) -> Self {
        let head = n.min(ZIPF_HEAD);
        let mut weights: Vec<f64> = (0..head).map(|r| f64::from(r + 1).powf(-s)).collect();
        let (a, b) = (f64::from(head) + 0.5, f64::from(n) + 0.5);
        let logarithmic = (1.0 - s).abs() < 1e-9;
        let one_minus_s = if logarithmic { 0.0 } else { 1.0 - s };
        let (tail_start, tail_span) = if logarithmic {
            (a.ln(), (b / a).ln())
        } else {
            let start = a.powf(one_minus_s);
            (start, b.powf(one_minus_s) - start)
        };
        if n > head {
            let mass = if logarithmic {
                tail_span
            } else {
                tail_span / one_minus_s
            };
            weights.push(mass);
        }
        Self {
            table: AliasTable::new(&weights),
            head,
            n,
            one_minus_s,
            tail_start,
            tail_span,
        }
    }

    pub(super) fn sample(&self, rng: &mut impl RngCore) -> u32 {
        let r = self.table.sample(rng);
        if r < self.head {
            return r;
        }
        let u: f64 = rng.random();
        let t = if self.one_minus_s == 0.0 {
            (self.tail_start + u * self.tail_span).exp()
        } else {
            (self.tail_start + u * self.tail_span).powf(1.0 / self.one_minus_s)
        };
        // 1-based rank round(t), clamped against rounding at the ends; 0-based below.
        let x = (t + 0.5)
            .floor()
            .clamp(f64::from(self.head) + 1.0, f64::from(self.n));
        x as u32 - 1
    }
}

/// A categorical column's value of rank `rank`: the 32-bit hash of (vocabulary key, column,
/// rank) as 8 lowercase hex digits, as Criteo writes its values.
fn category_value(vocabulary: u64, column: usize, rank: u32) -> [u8; 8] {
    let h = mix64(vocabulary ^ ((column as u64) << 32 | u64::from(rank))) as u32;
    let mut out = [0u8; 8];
    for (i, byte) in out.iter_mut().enumerate() {
        let nibble = (h >> (28 - 4 * i)) & 0xf;
        *byte = b"0123456789abcdef"[nibble as usize];
    }
    out
}

/// One drawn row before its label: counts (`None`: missing) and category ranks.
struct Row {
    integers: [Option<u64>; CRITEO_INTEGER],
    categories: [Option<u32>; CRITEO_CATEGORICAL],
}

/// The largest count written (`2^53`, exact in `f64`).
const MAX_COUNT: f64 = 9_007_199_254_740_992.0;

/// Draws rows of a spec (the same way for calibration and for data).
struct RowDrawer {
    /// Per column, `missing · 2^32`: missing when a uniform `u32` is below it (`u64` so that a
    /// rate of 1 is always missing).
    integer_missing: [u64; CRITEO_INTEGER],
    integer: [IntegerColumn; CRITEO_INTEGER],
    categorical_missing: [u64; CRITEO_CATEGORICAL],
    samplers: Vec<ZipfSampler>,
}

fn missing_threshold(missing: f64) -> u64 {
    (missing * 4_294_967_296.0).round() as u64
}

impl RowDrawer {
    fn new(spec: &CriteoSpec) -> Self {
        Self {
            integer_missing: spec.integer.map(|c| missing_threshold(c.missing)),
            integer: spec.integer,
            categorical_missing: spec.categorical.map(|c| missing_threshold(c.missing)),
            samplers: spec
                .categorical
                .iter()
                .map(|c| ZipfSampler::new(c.cardinality, c.zipf_exponent))
                .collect(),
        }
    }

    fn draw(&self, rng: &mut impl RngCore, row: &mut Row) {
        for ((slot, column), &threshold) in row
            .integers
            .iter_mut()
            .zip(&self.integer)
            .zip(&self.integer_missing)
        {
            *slot = if u64::from(rng.next_u32()) < threshold {
                None
            } else {
                let log = column.log_mean + column.log_std * gaussian(rng);
                Some(log.exp().floor().min(MAX_COUNT) as u64)
            };
        }
        for ((slot, sampler), &threshold) in row
            .categories
            .iter_mut()
            .zip(&self.samplers)
            .zip(&self.categorical_missing)
        {
            *slot = if u64::from(rng.next_u32()) < threshold {
                None
            } else {
                Some(sampler.sample(rng))
            };
        }
    }
}

/// The parser's value of a count: `ln(1 + x)` as `f32` (0 is left out, value 0).
fn count_value(x: u64) -> f32 {
    (x as f64).ln_1p() as f32
}

/// The model's keys and scales, from the seed and calibration rows.
struct Model {
    vocabulary: u64,
    truth: CriteoTruth,
}

/// Rows drawn (from their own stream) to set the weight scales and the bias.
const CALIBRATION_ROWS: usize = 16_384;

fn criteo_model(spec: &CriteoSpec, drawer: &RowDrawer) -> Model {
    let mut rng = stream_rng(spec.seed, STREAM_MODEL);
    let vocabulary = rng.next_u64();
    let key = rng.next_u64();
    let raw_integer: Vec<f64> = (0..CRITEO_INTEGER).map(|_| gaussian(&mut rng)).collect();

    // The unit-scale integer and categorical parts of the margin of calibration rows.
    let mut calibration = stream_rng(spec.seed, STREAM_CALIBRATION);
    let mut row = Row {
        integers: [None; CRITEO_INTEGER],
        categories: [None; CRITEO_CATEGORICAL],
    };
    let parts: Vec<(f64, f64)> = (0..CALIBRATION_ROWS)
        .map(|_| {
            drawer.draw(&mut calibration, &mut row);
            let integer: f64 = row
                .integers
                .iter()
                .zip(&raw_integer)
                .map(|(x, w)| x.map_or(0.0, |x| w * f64::from(count_value(x))))
                .sum();
            let categorical: f64 = row
                .categories
                .iter()
                .enumerate()
                .filter_map(|(c, rank)| {
                    let value = category_value(vocabulary, c, (*rank)?);
                    Some(unit_category_weight(
                        key,
                        criteo_feature(c, &value, spec.features),
                    ))
                })
                .sum();
            (integer, categorical)
        })
        .collect();
    let variance = |f: fn(&(f64, f64)) -> f64| {
        let n = parts.len() as f64;
        let mean = parts.iter().map(f).sum::<f64>() / n;
        parts.iter().map(|p| (f(p) - mean).powi(2)).sum::<f64>() / n
    };
    let scale = |share: f64, var: f64| {
        if var > 0.0 {
            (share * spec.margin_std * spec.margin_std / var).sqrt()
        } else {
            0.0
        }
    };
    let integer_scale = scale(spec.integer_share, variance(|p| p.0));
    let category_scale = scale(1.0 - spec.integer_share, variance(|p| p.1));
    let integer_weights: Vec<f32> = raw_integer
        .iter()
        .map(|w| (w * integer_scale) as f32)
        .collect();

    // The bias with which the mean of sigmoid(margin + b) over the calibration rows is the
    // positive rate, by bisection: the mean is increasing in b.
    let margins: Vec<f64> = parts
        .iter()
        .map(|(i, c)| i * integer_scale + c * category_scale)
        .collect();
    let mean_rate =
        |b: f64| margins.iter().map(|m| sigmoid(m + b)).sum::<f64>() / margins.len() as f64;
    let (mut lo, mut hi) = (-50.0_f64, 50.0_f64);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if mean_rate(mid) < spec.positive_rate {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Model {
        vocabulary,
        truth: CriteoTruth {
            features: spec.features,
            integer_weights,
            category_weight_std: category_scale,
            category_weight_key: key,
            bias: (0.5 * (lo + hi)) as f32,
            samples: 0,
            positive_fraction: 0.0,
            base_log_loss: 0.0,
            log_loss: 0.0,
            bayes_log_loss: 0.0,
            auc: 0.5,
        },
    }
}

/// The true model of `spec`, as [`write_criteo`] returns it, without writing data (the fields
/// measured on the rows are 0, the AUC 0.5).
///
/// # Panics
/// Panics if the spec is invalid ([`CriteoSpec::validate`]).
pub fn criteo_truth(spec: &CriteoSpec) -> CriteoTruth {
    spec.validate()
        .unwrap_or_else(|e| panic!("criteo_truth: {e}"));
    criteo_model(spec, &RowDrawer::new(spec)).truth
}

/// A value of a column's head, ready to write: its 8 hex digits and its true weight.
#[derive(Clone, Copy)]
struct HeadValue {
    text: [u8; 8],
    weight: f32,
}

/// Margins are binned by 1/`AUC_BINS_PER_UNIT` over ±`AUC_RANGE` for the AUC.
const AUC_BINS_PER_UNIT: f64 = 64.0;
const AUC_RANGE: f64 = 16.0;

/// Positive and negative counts of margins binned on a fixed grid: the AUC in O(1) memory.
struct AucBins {
    positive: Vec<u64>,
    negative: Vec<u64>,
}

impl AucBins {
    fn new() -> Self {
        let n = (2.0 * AUC_RANGE * AUC_BINS_PER_UNIT) as usize;
        Self {
            positive: vec![0; n],
            negative: vec![0; n],
        }
    }

    fn add(&mut self, margin: f64, positive: bool) {
        let last = self.positive.len() - 1;
        let bin = ((margin + AUC_RANGE) * AUC_BINS_PER_UNIT).clamp(0.0, last as f64) as usize;
        if positive {
            self.positive[bin] += 1;
        } else {
            self.negative[bin] += 1;
        }
    }

    /// P(margin of a positive > margin of a negative), ties in a bin counting one half.
    fn auc(&self) -> f64 {
        let (mut negatives_below, mut pairs) = (0u64, 0.0f64);
        for (&p, &n) in self.positive.iter().zip(&self.negative) {
            pairs += p as f64 * (negatives_below as f64 + 0.5 * n as f64);
            negatives_below += n;
        }
        let positives: u64 = self.positive.iter().sum();
        if positives == 0 || negatives_below == 0 {
            0.5
        } else {
            pairs / (positives as f64 * negatives_below as f64)
        }
    }
}

/// Writes `spec.samples` rows of synthetic Criteo display-ads TSV and returns the true model
/// with what it scores on the rows.
///
/// Each line is `label \t I1 .. I13 \t C1 .. C26` (40 tab-separated fields, as in Criteo's
/// `train.txt`), and the data is drawn as follows:
///
/// * Integer column `j` is missing (empty) with probability `integer[j].missing`, else a count
///   `floor(exp(log_mean + log_std · z))`, `z ~ N(0, 1)`: log-normal, heavy-tailed, often 0.
/// * Categorical column `c` is missing (empty) with probability `categorical[c].missing`, else
///   the value of rank `r < cardinality` drawn with probability proportional to
///   `(r + 1)^-zipf_exponent`, written as the 8 lowercase hex digits of a 32-bit hash of
///   (seed, column, rank). A few values cover most rows; most values are rare.
/// * The label is 1 with probability `sigmoid(margin)`, where the margin is that of a logistic
///   model over the features the Criteo parser makes of the line in a space of
///   `spec.features` features (see [`CriteoTruth`]): `ln(1 + count)` of integer column `j`
///   (feature `j`) times an integer weight, plus, for each categorical value, the weight of
///   its hashed feature `criteo_feature(c, value, features)`. The hashed features' weights are
///   a seeded hash of the feature, approximately normal; values that collide share a weight,
///   as they share a feature. The integer weights are normal draws. Both are scaled so that,
///   over 16384 calibration rows drawn from their own stream, the integer part of the margin
///   has variance `integer_share · margin_std²` and the categorical part the rest; the bias
///   is the one with which the mean of `sigmoid(margin)` over those rows is `positive_rate`.
///
/// So a logistic regression trained on the data prepared with `--features spec.features` is
/// the right model, and [`CriteoTruth::log_loss_on`] scores the true model on any part of it.
/// Rare categorical values (most of the large columns' draws) carry weights a model cannot
/// learn from few rows, as in real click data.
///
/// Memory is O(1) in `samples` (tables of at most 4097 values per column). The output is
/// buffered internally; pass a plain `File`. Errors if the spec is invalid
/// (`ErrorKind::InvalidInput`) or on a write error.
pub fn write_criteo(spec: &CriteoSpec, out: impl Write) -> io::Result<CriteoTruth> {
    spec.validate()?;
    let drawer = RowDrawer::new(spec);
    let Model {
        vocabulary,
        mut truth,
    } = criteo_model(spec, &drawer);
    // The popular values' text and weights, computed once.
    let value_weight =
        |c: usize, text: &[u8; 8]| truth.category_weight(criteo_feature(c, text, spec.features));
    let heads: Vec<Vec<HeadValue>> = spec
        .categorical
        .iter()
        .enumerate()
        .map(|(c, column)| {
            (0..column.cardinality.min(ZIPF_HEAD))
                .map(|r| {
                    let text = category_value(vocabulary, c, r);
                    HeadValue {
                        weight: value_weight(c, &text),
                        text,
                    }
                })
                .collect()
        })
        .collect();

    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut row = Row {
        integers: [None; CRITEO_INTEGER],
        categories: [None; CRITEO_CATEGORICAL],
    };
    let mut line: Vec<u8> = Vec::with_capacity(512);
    let (mut bayes, mut realised, mut positives) = (0.0, 0.0, 0u64);
    let mut auc = AucBins::new();
    for _ in 0..spec.samples {
        drawer.draw(&mut rng, &mut row);
        line.clear();
        line.push(b'0'); // the label, set below
        let mut margin = f64::from(truth.bias);
        for (x, &w) in row.integers.iter().zip(&truth.integer_weights) {
            line.push(b'\t');
            if let Some(x) = *x {
                push_u64(&mut line, x);
                margin += f64::from(w) * f64::from(count_value(x));
            }
        }
        for (c, rank) in row.categories.iter().enumerate() {
            line.push(b'\t');
            if let Some(r) = *rank {
                let (text, weight) = match heads[c].get(r as usize) {
                    Some(head) => (head.text, head.weight),
                    None => {
                        let text = category_value(vocabulary, c, r);
                        (text, value_weight(c, &text))
                    }
                };
                line.extend_from_slice(&text);
                margin += f64::from(weight);
            }
        }
        line.push(b'\n');
        let p = sigmoid(margin);
        let positive = rng.random::<f64>() < p;
        if positive {
            line[0] = b'1';
        }
        bayes += p * softplus(-margin) + (1.0 - p) * softplus(margin);
        realised += softplus(if positive { -margin } else { margin });
        positives += u64::from(positive);
        auc.add(margin, positive);
        out.write_all(&line)?;
    }
    out.flush()?;
    let n = spec.samples.max(1) as f64;
    let rate = positives as f64 / n;
    truth.samples = spec.samples;
    truth.positive_fraction = rate;
    truth.base_log_loss = if rate > 0.0 && rate < 1.0 {
        -(rate * rate.ln() + (1.0 - rate) * (1.0 - rate).ln())
    } else {
        0.0
    };
    truth.log_loss = realised / n;
    truth.bayes_log_loss = bayes / n;
    truth.auc = auc.auc();
    Ok(truth)
}
