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

/// What ISP measures an accumulated update against (`--significance-scale`: with the feature
/// `clap`, the CLI's value, with the help of `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum SignificanceScale {
    /// The parameter itself: |a_j / x_j| > v_t (MLLess, DESIGN §4).
    #[default]
    Parameter,
    /// The larger of |x_j| and the mean magnitude of the parameters: |a_j| > v_t · max(|x_j|,
    /// m).
    ///
    /// `m` is the mean magnitude of the non-zero parameters the worker has updated (for 1-bit,
    /// those of this step). A weight near zero — a rare feature of sparse LR, which
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
mod tests;
