//! Ratings from a low-rank model plus noise: [`write_ratings`].

use std::io::{self, BufWriter, Write};

use rand::Rng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};

use super::shared::{
    STREAM_MODEL, STREAM_SAMPLES, check_non_negative, gaussian, invalid, push_fixed4, push_u64,
    stream_rng,
};

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
