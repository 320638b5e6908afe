//! Ratings from a low-rank model plus noise: [`write_ratings`].

use std::io::{self, BufWriter, Write};

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::shared::{
    STREAM_MODEL, STREAM_SAMPLES, check_non_negative, gaussian, invalid, push_fixed4, push_u64,
    stream_rng,
};
use super::sparse_lr::DistinctSampler;

/// Global mean of the generated ratings model.
pub const RATINGS_BASE: f64 = 3.0;

/// Standard deviation of the generated user and item biases.
pub const RATINGS_BIAS_STD: f64 = 0.3;

/// The largest [`RatingsSpec::skew`]: beyond it nearly every rating falls on one user.
pub const MAX_SKEW: f64 = 3.0;

/// The lowest and highest whole star of [`RatingsSpec::stars`].
const STARS: (f64, f64) = (1.0, 5.0);

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
    /// How unevenly the ratings fall on users and items: user activity and item popularity
    /// follow a Zipf law of this exponent (the j-th most active user rates about `j^-skew` as
    /// often as the first), as in real ratings sets where a few users and films have most of
    /// the ratings and most are rated a few times. 0 (the default): every pair equally likely.
    #[serde(default)]
    pub skew: f64,
    /// Whole stars: every rating rounded to 1, 2, …, 5 as MovieLens-100k's are, so that the
    /// noise is no longer Gaussian and the scale clips the model. Off by default.
    #[serde(default)]
    pub stars: bool,
    /// Variance of the interaction `<p_u, q_i>` (1 by default). Real ratings are mostly biases
    /// and noise: on MovieLens the best factor model's RMSE is only about 4% below the biases'
    /// alone, which an interaction variance of about 0.15 reproduces.
    #[serde(default = "one")]
    pub interaction: f64,
    /// Standard deviation of the user and item biases ([`RATINGS_BIAS_STD`] by default).
    #[serde(default = "default_bias_std")]
    pub bias_std: f64,
}

fn one() -> f64 {
    1.0
}

fn default_bias_std() -> f64 {
    RATINGS_BIAS_STD
}

impl Default for RatingsSpec {
    /// The defaults of `mlless generate ratings`: 2,000 users, 1,500 items, rank 10, density
    /// 0.1, noise 0.5, seed 1, uniform and unrounded.
    fn default() -> RatingsSpec {
        RatingsSpec {
            users: 2_000,
            items: 1_500,
            rank: 10,
            density: 0.1,
            noise: 0.5,
            seed: 1,
            skew: 0.0,
            stars: false,
            interaction: 1.0,
            bias_std: RATINGS_BIAS_STD,
        }
    }
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
        check_non_negative("ratings noise", self.noise)?;
        check_non_negative("ratings interaction variance", self.interaction)?;
        check_non_negative("ratings bias std", self.bias_std)?;
        if !(0.0..=MAX_SKEW).contains(&self.skew) {
            return Err(invalid(format!(
                "ratings skew must be in [0, {MAX_SKEW}], got {}",
                self.skew
            )));
        }
        Ok(())
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
    /// RMSE of the noise-free model (clamped to the stars' range with [`RatingsSpec::stars`])
    /// on the written ratings: about the best a model can reach. Without stars it is the noise
    /// drawn.
    #[serde(default)]
    pub model_rmse: f64,
}

/// Writes a synthetic ratings dataset as MovieLens `u.data` and returns what it wrote.
///
/// The model: `rating(u, i) = 3.0 + b_u + b_i + <p_u, q_i> + ε` with `b_u, b_i ~ N(0, bias_std²)`
/// (0.3 by default), the entries of `p_u, q_i ∈ R^rank` `~ N(0, sqrt(interaction / rank))` (so
/// `<p_u, q_i>` has variance about `interaction`, 1 by default) and `ε ~ N(0, noise²)`; with `stars` the rating is rounded to a whole star in
/// 1..=5, otherwise it is not clipped to a scale. Without skew each (user, item) pair is
/// present independently with probability `density`; present pairs are found by geometric
/// skipping over the pairs in user-major order, so the cost is O(ratings), not
/// O(users · items). With `skew` items have Zipf weights of exponent `skew` and users of half
/// that (users and items take their popularity ranks in a random order; in MovieLens, users
/// are less unequal than films: every user has rated at least 20). Each user rates a number of
/// items proportional to its weight, at most half of them, drawn without replacement in
/// proportion to the items' weights (by `generate sparse-lr`'s sampler: an alias table, and one
/// pass over the items for a user whose draws are mostly repeats), so the cost is O(ratings)
/// plus O(items) for each such user.
///
/// Lines are `user<TAB>item<TAB>rating<TAB>0` with 1-based ids, the rating with 4 decimals, in
/// user-major order. The output is buffered internally. Errors if the spec is invalid
/// (`ErrorKind::InvalidInput`) or on a write error.
pub fn write_ratings(spec: &RatingsSpec, out: impl Write) -> io::Result<RatingsTruth> {
    spec.validate()?;
    let rank = spec.rank as usize;
    // Entries of variance sqrt(interaction / rank): the dot of two has variance `interaction`.
    let factor_std = (spec.interaction / f64::from(spec.rank)).powf(0.25);
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
            .map(|_| spec.bias_std * gaussian(&mut model))
            .collect::<Vec<f64>>()
    };
    let b_user = biases(spec.users);
    let b_item = biases(spec.items);

    let mut rng = stream_rng(spec.seed, STREAM_SAMPLES);
    let mut out = BufWriter::with_capacity(1 << 20, out);
    let mut line = Vec::with_capacity(64);
    let mut count = 0u64;
    let mut sum_scaled: i128 = 0;
    let mut squared_model_error = 0.0;
    let mut write = |rng: &mut StdRng, u: usize, i: usize| -> io::Result<()> {
        let pu = &p[u * rank..(u + 1) * rank];
        let qi = &q[i * rank..(i + 1) * rank];
        let dot: f64 = pu
            .iter()
            .zip(qi)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let model = RATINGS_BASE + b_user[u] + b_item[i] + dot;
        let mut rating = model + spec.noise * gaussian(rng);
        let mut predicted = model;
        if spec.stars {
            rating = rating.round().clamp(STARS.0, STARS.1);
            predicted = predicted.clamp(STARS.0, STARS.1);
        }
        squared_model_error += (rating - predicted).powi(2);
        line.clear();
        push_u64(&mut line, u as u64 + 1);
        line.push(b'\t');
        push_u64(&mut line, i as u64 + 1);
        line.push(b'\t');
        sum_scaled += i128::from(push_fixed4(&mut line, rating));
        line.extend_from_slice(b"\t0\n");
        out.write_all(&line)?;
        count += 1;
        Ok(())
    };
    if spec.skew > 0.0 {
        let users = zipf_weights(spec.users, spec.skew / 2.0, &mut rng);
        let mut items = DistinctSampler::new(zipf_weights(spec.items, spec.skew, &mut rng));
        let expected = user_counts(&users, spec.expected_ratings(), spec.items);
        let mut chosen = Vec::new();
        for (u, expected) in expected.iter().enumerate() {
            // Rounded up with probability its fraction: the counts add up to the expected total.
            let wanted = expected.floor() + f64::from(rng.random::<f64>() < expected.fract());
            let wanted = (wanted as usize).clamp(1, spec.items as usize);
            items.sample(&mut rng, wanted, &mut chosen);
            chosen.sort_unstable();
            for &i in &chosen {
                write(&mut rng, u, i as usize)?;
            }
        }
    } else {
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
        let mut k = skip(&mut rng);
        while k < total {
            write(&mut rng, (k / items) as usize, (k % items) as usize)?;
            k = k.saturating_add(1).saturating_add(skip(&mut rng));
        }
    }
    out.flush()?;
    let mean = if count == 0 {
        0.0
    } else {
        sum_scaled as f64 / 10_000.0 / count as f64
    };
    let model_rmse = if count == 0 {
        0.0
    } else {
        (squared_model_error / count as f64).sqrt()
    };
    Ok(RatingsTruth {
        noise: spec.noise,
        mean,
        ratings: count,
        model_rmse,
    })
}

/// The expected number of ratings of each user: `total` shared in proportion to the users'
/// `weights`, no user rating more than half the `items` (what a capped user would have had goes
/// to the others, so the counts still add up to `total` where they can).
fn user_counts(weights: &[f64], total: f64, items: u32) -> Vec<f64> {
    let cap = (f64::from(items) / 2.0).max(1.0);
    let counts =
        |scale: f64| -> Vec<f64> { weights.iter().map(|w| (w * scale).min(cap)).collect() };
    // The sum of the counts grows with the scale: bisect for the scale that gives `total`.
    let (mut low, mut high) = (
        0.0,
        total / weights.iter().copied().fold(f64::MAX, f64::min),
    );
    for _ in 0..100 {
        let mid = 0.5 * (low + high);
        if counts(mid).iter().sum::<f64>() < total {
            low = mid;
        } else {
            high = mid;
        }
    }
    counts(high)
}

/// Zipf weights `rank^-skew` of `n` ids, the ranks given to the ids in a random order.
fn zipf_weights(n: u32, skew: f64, rng: &mut StdRng) -> Vec<f64> {
    let mut weights: Vec<f64> = (1..=n).map(|rank| f64::from(rank).powf(-skew)).collect();
    weights.shuffle(rng);
    weights
}
