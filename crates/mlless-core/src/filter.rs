//! What a worker sends of its local updates: MLLess's significance filter (ISP, DESIGN §4) and
//! compression with error feedback (top-k sparsification, 1-bit signs with a scale).
//!
//! Both work on one per-parameter *residual* accumulator `a`: every local update is added to
//! it, the filter picks what to send from it, and what is sent is subtracted. So nothing is ever
//! lost, only delayed: at every moment, everything sent plus the residual equals the sum of the
//! local updates (up to `f32` rounding), and [`UpdateFilter::flush`] sends the rest at the end.
//!
//! One step, with the residual `a` after adding the update `u`:
//! 1. *candidates*: the coordinates with `a_j ≠ 0` — for 1-bit only those of `u` (1-bit never
//!    zeroes a residual, so sending every non-zero residual would make each message dense) —
//!    and, with a significance threshold `V`, only those with `|a_j / x_j| > V / sqrt(t + 1)`
//!    (a parameter `x_j = 0` is significant as soon as `a_j ≠ 0`) — or, with
//!    [`SignificanceScale::Mean`], `|a_j| > V / sqrt(t + 1) · max(|x_j|, m)` where `m` is the
//!    mean magnitude of the non-zero parameters among those coordinates;
//! 2. *compression* of the candidates: none (send them as they are); top-k (the `k` of largest
//!    magnitude); 1-bit (`scale · sign(a_j)`, one scale per bucket of entries
//!    of magnitudes within a factor of 2, see [`SignVector`]);
//! 3. the sent values are subtracted from `a`.
//!
//! With `V = 0` and no compression, the sent vector is exactly `u`: ISP then is BSP.
//! Composition with ISP: compression applies to the significant entries only, and whatever it
//! does not send stays in the same accumulator, so ISP's "nothing lost" holds for every
//! combination.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::sparse::{SparseError, SparseVector};

/// How a worker compresses what it sends (`--compress`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Send the chosen entries as they are.
    #[default]
    None,
    /// Send the `k` entries of largest magnitude per step (`topk:K`, K ≥ 1).
    TopK(u32),
    /// Send the given fraction of the entries, those of largest magnitude (`topk:F`, 0 < F < 1).
    TopKFraction(f32),
    /// Send the signs of the entries with one scale per message (`onebit`).
    OneBit,
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::TopK(k) => write!(f, "topk:{k}"),
            Self::TopKFraction(x) => write!(f, "topk:{x}"),
            Self::OneBit => f.write_str("onebit"),
        }
    }
}

/// Why a `--compress` value cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid compression {0:?}: expected none, topk:K (K ≥ 1 entries, or 0 < K < 1 a fraction) or onebit"
)]
pub struct CompressionParseError(String);

impl FromStr for Compression {
    type Err = CompressionParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || CompressionParseError(s.to_string());
        match s {
            "none" => return Ok(Self::None),
            "onebit" | "1bit" => return Ok(Self::OneBit),
            _ => {}
        }
        let k = s.strip_prefix("topk:").ok_or_else(bad)?;
        if let Ok(count) = k.parse::<u32>() {
            return if count >= 1 {
                Ok(Self::TopK(count))
            } else {
                Err(bad())
            };
        }
        match k.parse::<f32>() {
            Ok(x) if x > 0.0 && x < 1.0 => Ok(Self::TopKFraction(x)),
            _ => Err(bad()),
        }
    }
}

/// What ISP measures an accumulated update against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignificanceScale {
    /// The parameter itself: `|a_j / x_j| > v_t` (DESIGN §4, MLLess).
    #[default]
    Parameter,
    /// The parameter, or where that is larger the mean magnitude `m` of the non-zero
    /// parameters the worker has updated (for 1-bit, those of this step):
    /// `|a_j| > v_t · max(|x_j|, m)`. A weight near zero — a rare feature of sparse LR, which
    /// moves by about `1/k` of itself at its k-th update and so stays "significant" under
    /// [`Parameter`](Self::Parameter) — is judged by the model's scale, and its small updates
    /// are held back until they add up.
    Mean,
}

/// What a worker's filter keeps back and how it compresses the rest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct FilterConfig {
    /// ISP's significance threshold `V`; `None` sends every entry (BSP, SSP, ASP).
    pub significance: Option<f32>,
    /// What the threshold is relative to.
    #[serde(default)]
    pub significance_scale: SignificanceScale,
    /// Compression of the entries sent.
    pub compression: Compression,
}

impl FilterConfig {
    /// Whether the filter sends every update as it is (no accumulator needed).
    pub fn is_identity(&self) -> bool {
        self.significance.is_none() && self.compression == Compression::None
    }
}

/// An update as it crosses the channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WireDelta {
    /// Values as they are.
    Sparse(SparseVector),
    /// 1-bit: each entry is `+scale` or `-scale`.
    Signs(SignVector),
}

impl WireDelta {
    /// Number of entries carried.
    pub fn nnz(&self) -> usize {
        match self {
            Self::Sparse(v) => v.nnz(),
            Self::Signs(s) => s.indices.len(),
        }
    }

    /// The delta as a sparse vector over `dim` parameters, checking every index and (for signs)
    /// the length of the sign bitmap, so that an untrusted message cannot write out of bounds.
    pub fn into_sparse(self, dim: usize) -> Result<SparseVector, SparseError> {
        let vector = match self {
            Self::Sparse(v) => v,
            Self::Signs(s) => s.into_sparse()?,
        };
        vector.check_dim(dim)?;
        Ok(vector)
    }
}

/// Entries compressed to one bit each, with one scale per bucket of entries whose magnitudes
/// share a binary exponent: `value_k = ±scale` of the bucket of entry `k`. Entries are ordered
/// by decreasing magnitude, so a bucket is a run of `count` consecutive entries, and each
/// entry's magnitude is within a factor of 2 of its bucket's scale (the mean magnitude): error
/// feedback then catches up within a step or two. A sparse model's update magnitudes span
/// orders (the bias and frequent features against the rare ones); with one scale for the whole
/// message, as 1-bit SGD has on dense layers, or per fixed-size bucket, the largest entries
/// were sent far too small and sparse LR ended 28% to 115% above BSP's test log loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignVector {
    indices: Vec<u32>,
    /// Bit `k` (little-endian within each byte) set means entry `k` is negative.
    negative: Vec<u8>,
    /// `(count, scale)` of each bucket, in entry order.
    buckets: Vec<(u32, f32)>,
}

impl SignVector {
    fn into_sparse(self) -> Result<SparseVector, SparseError> {
        let n = self.indices.len();
        let counted: u64 = self.buckets.iter().map(|&(c, _)| u64::from(c)).sum();
        if self.negative.len() != n.div_ceil(8) || counted != n as u64 {
            return Err(SparseError::LengthMismatch {
                indices: n,
                values: usize::try_from(counted).unwrap_or(usize::MAX),
            });
        }
        let mut seen = std::collections::HashSet::with_capacity(n);
        let mut pairs = Vec::with_capacity(n);
        let scales = self
            .buckets
            .iter()
            .flat_map(|&(count, scale)| std::iter::repeat_n(scale, count as usize));
        for (k, (&index, scale)) in self.indices.iter().zip(scales).enumerate() {
            if !seen.insert(index) {
                return Err(SparseError::NotAscending { index, position: k });
            }
            let negative = self.negative[k / 8] >> (k % 8) & 1 == 1;
            pairs.push((index, if negative { -scale } else { scale }));
        }
        Ok(SparseVector::from_pairs(pairs))
    }
}

/// Mean magnitude of the non-zero parameters among `indices` (0 if there is none).
fn mean_magnitude(indices: &[u32], params: &[f32]) -> f32 {
    let (sum, n) = indices.iter().fold((0.0f64, 0u32), |(sum, n), &j| {
        let x = params[j as usize].abs();
        if x > 0.0 {
            (sum + f64::from(x), n + 1)
        } else {
            (sum, n)
        }
    });
    if n == 0 {
        0.0
    } else {
        (sum / f64::from(n)) as f32
    }
}

/// The binary exponent of `x` (its bucket in a [`SignVector`]).
fn exponent(x: f32) -> u32 {
    (x.to_bits() >> 23) & 0xff
}

/// What one call of [`UpdateFilter::filter`] did, for the run record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FilterStats {
    /// Entries sent.
    pub sent: usize,
    /// Entries with a non-zero residual that were kept back.
    pub held: usize,
}

/// A worker's filter: the residual accumulator and the rule that picks what to send.
///
/// Serialisable, so that a checkpoint carries what the filter holds back. Deserialisation checks
/// that the parts agree (as many flags as residuals, every coordinate of the support in range,
/// tracked and listed once), so a decoded filter never indexes out of bounds; its
/// [`dim`](Self::dim) must still be checked against the model's.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "FilterParts")]
pub struct UpdateFilter {
    config: FilterConfig,
    residual: Vec<f32>,
    /// Coordinates whose residual may be non-zero (each once; `tracked[j]` says whether `j` is in).
    support: Vec<u32>,
    tracked: Vec<bool>,
}

/// The serialised form of an [`UpdateFilter`], checked before it becomes one.
#[derive(Deserialize)]
struct FilterParts {
    config: FilterConfig,
    residual: Vec<f32>,
    support: Vec<u32>,
    tracked: Vec<bool>,
}

impl TryFrom<FilterParts> for UpdateFilter {
    type Error = String;

    fn try_from(parts: FilterParts) -> Result<Self, String> {
        let FilterParts {
            config,
            residual,
            support,
            tracked,
        } = parts;
        let dim = residual.len();
        if tracked.len() != dim {
            return Err(format!(
                "update filter with {dim} residuals but {} flags",
                tracked.len()
            ));
        }
        let mut listed = vec![false; dim];
        for &j in &support {
            let Some(seen) = listed.get_mut(j as usize) else {
                return Err(format!("update filter support {j} out of range {dim}"));
            };
            if *seen || !tracked[j as usize] {
                return Err(format!("update filter support {j} repeated or not tracked"));
            }
            *seen = true;
        }
        if listed != tracked {
            return Err("update filter tracks coordinates outside its support".to_string());
        }
        Ok(Self {
            config,
            residual,
            support,
            tracked,
        })
    }
}

impl UpdateFilter {
    /// A filter over `dim` parameters, with an empty residual.
    pub fn new(dim: usize, config: FilterConfig) -> Self {
        Self {
            config,
            residual: vec![0.0; dim],
            support: Vec::new(),
            tracked: vec![false; dim],
        }
    }

    /// The filter's configuration.
    pub fn config(&self) -> FilterConfig {
        self.config
    }

    /// The number of parameters the filter is over.
    pub fn dim(&self) -> usize {
        self.residual.len()
    }

    /// Adds the local `update` of `step` to the residual and returns what to send, given the
    /// worker's replica `params` (for the significance test; the caller applies `update` to its
    /// own replica itself). Indices of `update` must be below the filter's dimension.
    pub fn filter(
        &mut self,
        update: &SparseVector,
        params: &[f32],
        step: u64,
    ) -> (WireDelta, FilterStats) {
        for (j, u) in update.iter() {
            let ju = j as usize;
            if !self.tracked[ju] {
                self.tracked[ju] = true;
                self.support.push(j);
            }
            self.residual[ju] += u;
        }
        // 1-bit never zeroes a residual: it looks only at this step's coordinates, or every
        // message would grow to the whole support.
        let pool: Vec<u32> = if self.config.compression == Compression::OneBit {
            update.indices().to_vec()
        } else {
            self.support.clone()
        };
        let residual = &self.residual;
        let threshold = self
            .config
            .significance
            .map(|v| v / ((step + 1) as f32).sqrt());
        let floor = match (threshold, self.config.significance_scale) {
            (Some(_), SignificanceScale::Mean) => mean_magnitude(&pool, params),
            _ => 0.0,
        };
        let mut candidates: Vec<u32> = pool
            .into_iter()
            .filter(|&j| {
                let a = residual[j as usize];
                let scale = params[j as usize].abs().max(floor);
                // `|a| > v·|x|` is `|a / x| > v`; a zero scale makes any `a ≠ 0` significant.
                a != 0.0 && threshold.is_none_or(|v| scale == 0.0 || a.abs() > v * scale)
            })
            .collect();
        let keep = match self.config.compression {
            Compression::TopK(k) => Some(k as usize),
            Compression::TopKFraction(x) => {
                Some(((candidates.len() as f64 * f64::from(x)).ceil() as usize).max(1))
            }
            _ => None,
        };
        if let Some(k) = keep.filter(|&k| k < candidates.len()) {
            let residual = &self.residual;
            candidates.select_nth_unstable_by(k, |&a, &b| {
                residual[b as usize]
                    .abs()
                    .total_cmp(&residual[a as usize].abs())
            });
            candidates.truncate(k);
        }
        candidates.sort_unstable();

        let sent = if self.config.compression == Compression::OneBit {
            // Largest first, so that each bucket's scale is close to its entries' magnitudes.
            let residual = &self.residual;
            candidates.sort_unstable_by(|&a, &b| {
                residual[b as usize]
                    .abs()
                    .total_cmp(&residual[a as usize].abs())
                    .then(a.cmp(&b))
            });
            let mut negative = vec![0u8; candidates.len().div_ceil(8)];
            let mut buckets: Vec<(u32, f32)> = Vec::new();
            let mut start = 0;
            while start < candidates.len() {
                // A bucket: the run of entries whose magnitudes share a binary exponent.
                let class = exponent(self.residual[candidates[start] as usize]);
                let end = start
                    + candidates[start..]
                        .iter()
                        .take_while(|&&j| exponent(self.residual[j as usize]) == class)
                        .count();
                let bucket = &candidates[start..end];
                let total: f64 = bucket
                    .iter()
                    .map(|&j| f64::from(self.residual[j as usize].abs()))
                    .sum();
                let scale = (total / bucket.len() as f64) as f32;
                buckets.push((bucket.len() as u32, scale));
                for (k, &j) in (start..end).zip(bucket) {
                    let a = &mut self.residual[j as usize];
                    if *a < 0.0 {
                        negative[k / 8] |= 1 << (k % 8);
                        *a += scale;
                    } else {
                        *a -= scale;
                    }
                }
                start = end;
            }
            WireDelta::Signs(SignVector {
                indices: candidates,
                negative,
                buckets,
            })
        } else {
            let values = candidates
                .iter()
                .map(|&j| std::mem::take(&mut self.residual[j as usize]))
                .collect();
            WireDelta::Sparse(SparseVector::from_sorted_unchecked(candidates, values))
        };
        self.compact();
        let stats = FilterStats {
            sent: sent.nnz(),
            held: self.support.len(),
        };
        (sent, stats)
    }

    /// Multiplies the residual by `factor`. Receivers apply a sent delta with the weight 1/P of
    /// the fleet at the time they receive it; when the fleet shrinks from P to P', what was held
    /// back under P is rescaled by P'/P so that it still arrives with the weight 1/P.
    pub fn rescale(&mut self, factor: f32) {
        for &j in &self.support {
            self.residual[j as usize] *= factor;
        }
    }

    /// The residual: what has been accumulated and not sent yet.
    pub fn residual(&self) -> SparseVector {
        let mut pairs: Vec<(u32, f32)> = self
            .support
            .iter()
            .map(|&j| (j, self.residual[j as usize]))
            .filter(|&(_, a)| a != 0.0)
            .collect();
        pairs.sort_unstable_by_key(|&(j, _)| j);
        let (indices, values) = pairs.into_iter().unzip();
        SparseVector::from_sorted_unchecked(indices, values)
    }

    /// Takes the whole residual, leaving it empty: what a worker sends at the end of training
    /// so that nothing stays behind.
    pub fn flush(&mut self) -> SparseVector {
        let rest = self.residual();
        for &j in &self.support {
            self.residual[j as usize] = 0.0;
            self.tracked[j as usize] = false;
        }
        self.support.clear();
        rest
    }

    /// Drops the coordinates whose residual is zero from the support.
    fn compact(&mut self) {
        let (residual, tracked) = (&self.residual, &mut self.tracked);
        self.support.retain(|&j| {
            let keep = residual[j as usize] != 0.0;
            if !keep {
                tracked[j as usize] = false;
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    #[test]
    fn deserialised_filters_are_consistent() {
        let mut filter = UpdateFilter::new(4, FilterConfig::default());
        let update = SparseVector::from_parts(vec![1, 3], vec![0.5, -1.0]).unwrap();
        // Top-1 keeps coordinate 1 back.
        filter.config.compression = Compression::TopK(1);
        filter.filter(&update, &[1.0; 4], 0);
        let json = serde_json::to_value(&filter).unwrap();
        let back: UpdateFilter = serde_json::from_value(json.clone()).unwrap();
        assert_eq!((back.dim(), back.support.clone()), (4, vec![1]));
        let tamper = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut bad = json.clone();
            edit(&mut bad);
            serde_json::from_value::<UpdateFilter>(bad)
                .unwrap_err()
                .to_string()
        };
        let out_of_range = tamper(&|v| v["support"] = serde_json::json!([7]));
        assert!(out_of_range.contains("out of range"), "{out_of_range}");
        let repeated = tamper(&|v| v["support"] = serde_json::json!([1, 1]));
        assert!(repeated.contains("repeated"), "{repeated}");
        let short = tamper(&|v| v["tracked"] = serde_json::json!([false, true]));
        assert!(short.contains("flags"), "{short}");
        let untracked = tamper(&|v| v["tracked"][2] = serde_json::json!(true));
        assert!(untracked.contains("outside its support"), "{untracked}");
    }

    #[test]
    fn wire_deltas_are_checked_before_use() {
        let json = r#"{"Sparse":{"indices":[5,1],"values":[1,1]}}"#;
        assert!(serde_json::from_str::<WireDelta>(json).is_err());
        let json = r#"{"Sparse":{"indices":[1,5],"values":[1,1]}}"#;
        let delta: WireDelta = serde_json::from_str(json).unwrap();
        assert!(delta.clone().into_sparse(6).is_ok());
        assert!(matches!(
            delta.into_sparse(5),
            Err(SparseError::OutOfBounds { index: 5, dim: 5 })
        ));
        // Signs: bitmap and bucket counts must match the indices; indices must be distinct.
        let signs = |indices: &str, negative: &str, buckets: &str| {
            let json = format!(
                r#"{{"Signs":{{"indices":{indices},"negative":{negative},"buckets":{buckets}}}}}"#
            );
            serde_json::from_str::<WireDelta>(&json)
                .unwrap()
                .into_sparse(10)
        };
        assert!(signs("[3,1]", "[1]", "[[2,0.5]]").is_ok());
        assert!(signs("[3,1]", "[]", "[[2,0.5]]").is_err());
        assert!(signs("[3,1]", "[1]", "[[1,0.5]]").is_err());
        assert!(signs("[3,1]", "[1]", "[[4294967295,0.5],[4294967295,0.5]]").is_err());
        assert!(signs("[3,3]", "[1]", "[[2,0.5]]").is_err());
        assert!(signs("[3,10]", "[1]", "[[2,0.5]]").is_err());
    }

    fn random_update(rng: &mut StdRng, dim: u32, nnz: usize) -> SparseVector {
        SparseVector::from_pairs(
            (0..nnz)
                .map(|_| (rng.random_range(0..dim), rng.random_range(-1.0..1.0)))
                .collect(),
        )
    }

    fn configs() -> Vec<FilterConfig> {
        let mut out = Vec::new();
        for significance in [None, Some(0.0), Some(0.7), Some(5.0)] {
            for compression in [
                Compression::None,
                Compression::TopK(3),
                Compression::TopKFraction(0.2),
                Compression::OneBit,
            ] {
                for significance_scale in [SignificanceScale::Parameter, SignificanceScale::Mean] {
                    out.push(FilterConfig {
                        significance,
                        significance_scale,
                        compression,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn sent_plus_residual_is_the_sum_of_the_updates() {
        let dim = 50u32;
        for config in configs() {
            let mut rng = StdRng::seed_from_u64(7);
            let mut filter = UpdateFilter::new(dim as usize, config);
            let mut params: Vec<f32> = (0..dim).map(|_| rng.random_range(-2.0..2.0)).collect();
            let mut local = vec![0.0f64; dim as usize];
            let mut sent_total = vec![0.0f64; dim as usize];
            let mut held_any = false;
            for step in 0..200 {
                let u = random_update(&mut rng, dim, 8);
                for (j, v) in u.iter() {
                    local[j as usize] += f64::from(v);
                }
                let (sent, stats) = filter.filter(&u, &params, step);
                held_any |= stats.held > 0;
                let sent = sent.into_sparse(dim as usize).expect("in bounds");
                assert_eq!(stats.sent, sent.nnz());
                for (j, v) in sent.iter() {
                    sent_total[j as usize] += f64::from(v);
                }
                u.scaled_add_to(&mut params, 1.0);
            }
            let residual = filter.residual();
            for (j, v) in residual.iter() {
                sent_total[j as usize] += f64::from(v);
            }
            for j in 0..dim as usize {
                assert!(
                    (sent_total[j] - local[j]).abs() < 1e-3,
                    "{config:?}: coordinate {j}: sent + residual {} vs local sum {}",
                    sent_total[j],
                    local[j]
                );
            }
            if !config.is_identity() && config.significance != Some(0.0) {
                assert!(held_any, "{config:?} never held anything back");
            }
            let flushed = filter.flush();
            assert_eq!(flushed, residual);
            assert!(filter.residual().is_empty());
        }
    }

    #[test]
    fn zero_significance_without_compression_sends_the_update_itself() {
        let mut rng = StdRng::seed_from_u64(1);
        let config = FilterConfig {
            significance: Some(0.0),
            compression: Compression::None,
            ..FilterConfig::default()
        };
        let mut filter = UpdateFilter::new(100, config);
        let params: Vec<f32> = (0..100).map(|_| rng.random_range(-1.0..1.0)).collect();
        for step in 0..20 {
            let u = random_update(&mut rng, 100, 10);
            let (sent, stats) = filter.filter(&u, &params, step);
            assert_eq!(sent, WireDelta::Sparse(u));
            assert_eq!(stats.held, 0);
        }
    }

    #[test]
    fn significance_holds_small_relative_changes_and_decays_with_steps() {
        let config = FilterConfig {
            significance: Some(0.5),
            compression: Compression::None,
            ..FilterConfig::default()
        };
        let mut filter = UpdateFilter::new(3, config);
        let params = [10.0f32, 0.0, 1.0];
        let u = SparseVector::from_pairs(vec![(0, 1.0), (1, 0.001), (2, 0.6)]);
        // Step 0: v = 0.5. 1/10 is held, anything on a zero parameter is sent, 0.6/1 is sent.
        let (sent, stats) = filter.filter(&u, &params, 0);
        let sent = sent.into_sparse(3).expect("valid");
        assert_eq!(sent.indices(), &[1, 2]);
        assert_eq!(stats.held, 1);
        // Step 99: v = 0.05; the held 1.0 plus 1.0 is 0.2 of 10: sent.
        let only0 = SparseVector::from_pairs(vec![(0, 1.0)]);
        let (sent, stats) = filter.filter(&only0, &params, 99);
        let sent = sent.into_sparse(3).expect("valid");
        assert_eq!(sent.iter().collect::<Vec<_>>(), vec![(0, 2.0)]);
        assert_eq!(stats.held, 0);
    }

    #[test]
    fn the_mean_scale_holds_small_updates_of_weights_near_zero() {
        // Weights of 1 and a rare feature's 0.001; v = 0.5 at step 0.
        let params = [1.0f32, 1.0, 1.0, 0.001];
        let u = SparseVector::from_pairs(vec![(0, 0.6), (3, 0.01)]);
        let by_parameter = FilterConfig {
            significance: Some(0.5),
            ..FilterConfig::default()
        };
        // Against itself, 0.01 is ten times the rare weight: sent, as is 0.6 of 1.
        let mut filter = UpdateFilter::new(4, by_parameter);
        let (sent, _) = filter.filter(&u, &params, 0);
        assert_eq!(sent.into_sparse(4).expect("valid").indices(), &[0, 3]);
        // Against the mean magnitude of the weights this worker updated (x_0 and x_3: ≈ 0.5),
        // 0.01 is held until the updates add up; 0.6 of the larger |x_0| = 1 is still sent.
        let by_mean = FilterConfig {
            significance_scale: SignificanceScale::Mean,
            ..by_parameter
        };
        let mut filter = UpdateFilter::new(4, by_mean);
        let (sent, stats) = filter.filter(&u, &params, 0);
        assert_eq!(sent.into_sparse(4).expect("valid").indices(), &[0]);
        assert_eq!(stats.held, 1);
        let rare = SparseVector::from_pairs(vec![(3, 0.4)]);
        let (sent, _) = filter.filter(&rare, &params, 0);
        let sent = sent.into_sparse(4).expect("valid");
        assert_eq!(sent.indices(), &[3], "0.41 > 0.5 · mean(1, 0.001)");
        assert!(
            (sent.values()[0] - 0.41).abs() < 1e-6,
            "the held 0.01 went with it"
        );
    }

    #[test]
    fn rescale_scales_what_is_held() {
        let mut filter = UpdateFilter::new(
            3,
            FilterConfig {
                significance: None,
                compression: Compression::TopK(1),
                ..FilterConfig::default()
            },
        );
        let u = SparseVector::from_pairs(vec![(0, 4.0), (2, 1.0)]);
        filter.filter(&u, &[1.0; 3], 0);
        filter.rescale(0.5);
        assert_eq!(filter.residual().iter().collect::<Vec<_>>(), vec![(2, 0.5)]);
    }

    #[test]
    fn top_k_sends_the_largest_and_one_bit_sends_signs() {
        let u = SparseVector::from_pairs(vec![(0, 0.1), (1, -3.0), (2, 2.0), (3, -0.5)]);
        let params = [1.0f32; 4];
        let mut top = UpdateFilter::new(
            4,
            FilterConfig {
                significance: None,
                compression: Compression::TopK(2),
                ..FilterConfig::default()
            },
        );
        let (sent, stats) = top.filter(&u, &params, 0);
        let sent = sent.into_sparse(4).expect("valid");
        assert_eq!(sent.iter().collect::<Vec<_>>(), vec![(1, -3.0), (2, 2.0)]);
        assert_eq!(stats.held, 2);

        let mut onebit = UpdateFilter::new(
            4,
            FilterConfig {
                significance: None,
                compression: Compression::OneBit,
                ..FilterConfig::default()
            },
        );
        let (sent, stats) = onebit.filter(&u, &params, 0);
        assert_eq!(stats.sent, 4);
        // 3 and 2 share a binary exponent (one bucket, scale 2.5); 0.5 and 0.1 are alone.
        let sent = sent.into_sparse(4).expect("valid");
        assert_eq!(
            sent.iter().collect::<Vec<_>>(),
            vec![(0, 0.1), (1, -2.5), (2, 2.5), (3, -0.5)]
        );
        let residual = onebit.residual();
        assert_eq!(
            residual.iter().collect::<Vec<_>>(),
            vec![(1, -0.5), (2, -0.5)]
        );

        // Buckets of similar magnitude: 64 large entries and 64 small ones get two scales.
        let mut onebit = UpdateFilter::new(
            128,
            FilterConfig {
                significance: None,
                compression: Compression::OneBit,
                ..FilterConfig::default()
            },
        );
        let u = SparseVector::from_pairs(
            (0..128u32)
                .map(|j| (j, if j % 2 == 0 { 1.0 } else { -0.01 }))
                .collect(),
        );
        let (sent, _) = onebit.filter(&u, &[1.0; 128], 0);
        let sent = sent.into_sparse(128).expect("valid");
        for (j, v) in sent.iter() {
            let expected = if j % 2 == 0 { 1.0 } else { -0.01 };
            assert!((v - expected).abs() < 1e-6, "entry {j}: {v}");
        }
    }

    #[test]
    fn hostile_sign_vectors_are_rejected() {
        let signs = |indices: Vec<u32>, negative: usize, counts: Vec<u32>| {
            WireDelta::Signs(SignVector {
                indices,
                negative: vec![0; negative],
                buckets: counts.into_iter().map(|c| (c, 1.0)).collect(),
            })
        };
        assert!(
            signs((0..20).collect(), 2, vec![20])
                .into_sparse(100)
                .is_err()
        );
        assert!(
            signs((0..20).collect(), 3, vec![19])
                .into_sparse(100)
                .is_err()
        );
        assert!(
            signs((0..20).collect(), 3, vec![u32::MAX, 21])
                .into_sparse(100)
                .is_err()
        );
        assert!(signs(vec![5, 500], 1, vec![2]).into_sparse(100).is_err());
        assert!(signs(vec![5, 2, 5], 1, vec![3]).into_sparse(100).is_err());
        let unordered = signs(vec![5, 2], 1, vec![1, 1])
            .into_sparse(100)
            .expect("valid");
        assert_eq!(unordered.indices(), &[2, 5]);
    }

    #[test]
    fn compression_parses() {
        assert_eq!("none".parse(), Ok(Compression::None));
        assert_eq!("onebit".parse(), Ok(Compression::OneBit));
        assert_eq!("topk:100".parse(), Ok(Compression::TopK(100)));
        assert_eq!("topk:0.01".parse(), Ok(Compression::TopKFraction(0.01)));
        for bad in ["topk:0", "topk:1.5", "topk:", "top", "topk:-1"] {
            assert!(bad.parse::<Compression>().is_err(), "{bad}");
        }
        for c in [Compression::TopK(5), Compression::TopKFraction(0.25)] {
            assert_eq!(c.to_string().parse(), Ok(c));
        }
    }
}
