//! Biased probabilistic matrix factorisation.

use std::sync::Arc;

use super::{
    BatchLoss, GradientAccumulator, Model, ModelError, Prediction, Result, batch_kind, check_dims,
};
use crate::batch::{Batch, RatingBatch, RatingCounts, SparseBatch};
use crate::metrics::Evaluation;

/// Biased matrix factorisation: `r̂(u, i) = mean + b_u + b_i + <p_u, q_i>`.
///
/// Parameters `[user factors U×K][item factors I×K][user biases U][item biases I]`. The data
/// loss of a rating is the squared error `(r̂ - r)²` (so the gradient carries the factor 2 of
/// its derivative), and the per-example L2 term applies to the factors *and* the biases of
/// the rating's user and item, as in Koren's biased MF (a user with one rating would
/// otherwise fit its bias to that rating exactly).
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixFactorization {
    users: u32,
    items: u32,
    factors: usize,
    l2: f32,
    mean: f32,
    /// The count-aware prior: its coefficient and the training ratings of each user and item.
    prior: Option<(f32, Arc<RatingCounts>)>,
    /// Start of the item factors.
    item_factors: usize,
    /// Start of the user biases.
    user_biases: usize,
    /// Start of the item biases.
    item_biases: usize,
    num_params: usize,
}

impl MatrixFactorization {
    /// A model of `users` × `items` ratings with `factors` latent factors.
    pub fn new(users: u32, items: u32, factors: u32, l2: f32, mean: f32) -> Self {
        let (u, i, k) = (users as usize, items as usize, factors as usize);
        let item_factors = u.saturating_mul(k);
        let user_biases = item_factors.saturating_add(i.saturating_mul(k));
        let item_biases = user_biases.saturating_add(u);
        Self {
            users,
            items,
            factors: k,
            l2,
            mean,
            prior: None,
            item_factors,
            user_biases,
            item_biases,
            num_params: item_biases.saturating_add(i),
        }
    }

    /// The model with a count-aware prior of coefficient `prior` added to the per-example L2:
    /// each user's (item's) parameters get `prior/2 · ‖x‖²` once over the training set, spread
    /// over its `n` ratings as `prior / n` per rating. A user with few ratings is pulled
    /// towards the mean much harder than one with many, as a Gaussian prior on each user's
    /// parameters does (MAP), where per-example L2 alone shrinks the rare least. `counts` are
    /// the training ratings of each user and item; a count of 0 is taken as 1. Errs when
    /// `prior` is negative or not finite, or `counts` does not have one entry per user and item.
    pub fn with_prior(mut self, prior: f32, counts: Arc<RatingCounts>) -> Result<Self> {
        if !(prior.is_finite() && prior >= 0.0) {
            return Err(ModelError::InvalidSpec {
                reason: format!("prior must be finite and >= 0, got {prior}"),
            });
        }
        if counts.users.len() != self.users as usize || counts.items.len() != self.items as usize {
            return Err(ModelError::InvalidSpec {
                reason: format!(
                    "rating counts for {} users and {} items, the model has {} and {}",
                    counts.users.len(),
                    counts.items.len(),
                    self.users,
                    self.items
                ),
            });
        }
        if prior > 0.0 {
            self.prior = Some((prior, counts));
        }
        Ok(self)
    }

    /// The rating the parameters predict for `(user, item)`; ids must be in range.
    #[inline]
    pub(super) fn predict(&self, params: &[f32], user: usize, item: usize) -> f32 {
        let k = self.factors;
        let p = &params[user * k..user * k + k];
        let q = &params[self.item_factors + item * k..self.item_factors + item * k + k];
        let dot: f32 = p.iter().zip(q).map(|(a, b)| a * b).sum();
        self.mean + params[self.user_biases + user] + params[self.item_biases + item] + dot
    }

    /// The rating predicted when the user or the item (or both) is unknown (`None`): the mean
    /// plus the biases of those that are known, no factors; with both known, [`Self::predict`].
    /// Errs when a known id is out of range or `params` has the wrong length.
    pub(super) fn predict_partial(
        &self,
        params: &[f32],
        user: Option<u32>,
        item: Option<u32>,
    ) -> Result<f32> {
        check_dims(self.num_params, params, None)?;
        if let Some(user) = user.filter(|&u| u >= self.users) {
            return Err(ModelError::UserOutOfRange {
                position: 0,
                user,
                users: self.users,
            });
        }
        if let Some(item) = item.filter(|&i| i >= self.items) {
            return Err(ModelError::ItemOutOfRange {
                position: 0,
                item,
                items: self.items,
            });
        }
        Ok(match (user, item) {
            (Some(u), Some(i)) => self.predict(params, u as usize, i as usize),
            (u, i) => {
                let bu = u.map_or(0.0, |u| params[self.user_biases + u as usize]);
                let bi = i.map_or(0.0, |i| params[self.item_biases + i as usize]);
                self.mean + bu + bi
            }
        })
    }

    /// Checks parameters and batch, returning the batch's ratings.
    fn prepare<'b>(
        &self,
        params: &[f32],
        batch: &'b Batch,
        acc_dim: Option<usize>,
    ) -> Result<&'b RatingBatch> {
        check_dims(self.num_params, params, acc_dim)?;
        let Batch::Ratings(ratings) = batch else {
            return Err(ModelError::WrongBatchKind {
                model: "pmf",
                expected: "ratings",
                got: batch_kind(batch),
            });
        };
        let n = ratings.ratings.len();
        if ratings.users.len() != n || ratings.items.len() != n {
            return Err(ModelError::MalformedBatch {
                reason: format!(
                    "{} users, {} items and {n} ratings",
                    ratings.users.len(),
                    ratings.items.len()
                ),
            });
        }
        for (position, (user, item, rating)) in ratings.iter().enumerate() {
            if user >= self.users {
                return Err(ModelError::UserOutOfRange {
                    position,
                    user,
                    users: self.users,
                });
            }
            if item >= self.items {
                return Err(ModelError::ItemOutOfRange {
                    position,
                    item,
                    items: self.items,
                });
            }
            if !rating.is_finite() {
                return Err(ModelError::NonFiniteRating { position, rating });
            }
        }
        Ok(ratings)
    }
}

impl Model for MatrixFactorization {
    fn name(&self) -> &'static str {
        "pmf"
    }

    /// Always [`ModelError::WrongBatchKind`]: the model scores `(user, item)` pairs
    /// ([`predict_rating`](Model::predict_rating)), not rows.
    fn predict_rows(&self, _params: &[f32], _rows: &SparseBatch) -> Result<Vec<Prediction>> {
        Err(ModelError::WrongBatchKind {
            model: "pmf",
            expected: "ratings",
            got: "sparse",
        })
    }

    fn predict_rating(&self, params: &[f32], user: Option<u32>, item: Option<u32>) -> Result<f64> {
        Ok(f64::from(self.predict_partial(params, user, item)?))
    }

    fn num_params(&self) -> usize {
        self.num_params
    }

    fn gradient(
        &self,
        params: &[f32],
        batch: &Batch,
        acc: &mut GradientAccumulator,
    ) -> Result<BatchLoss> {
        let ratings = self.prepare(params, batch, Some(acc.dim()))?;
        let n = ratings.len();
        if n == 0 {
            return Ok(BatchLoss::default());
        }
        let k = self.factors;
        let scale = (2.0 / n as f64) as f32;
        let l2 = (f64::from(self.l2) / n as f64) as f32;
        // The L2 coefficients of the rating's user and item: per example, plus the prior's
        // share of each (`prior / count`), over the batch.
        let coefficients = |u: usize, i: usize| match &self.prior {
            None => (l2, l2),
            Some((prior, counts)) => {
                let share = |count: u32| {
                    ((f64::from(self.l2) + f64::from(*prior) / f64::from(count.max(1))) / n as f64)
                        as f32
                };
                (share(counts.users[u]), share(counts.items[i]))
            }
        };
        let mut loss = 0.0_f64;
        for (user, item, rating) in ratings.iter() {
            let (u, i) = (user as usize, item as usize);
            let (l2_user, l2_item) = coefficients(u, i);
            let err = self.predict(params, u, i) - rating;
            loss += f64::from(err) * f64::from(err);
            let g = scale * err;
            // Indices fit u32: check_dims bounded num_params by MAX_PARAMS.
            let (pu, qi) = (u * k, self.item_factors + i * k);
            let p = &params[pu..pu + k];
            let q = &params[qi..qi + k];
            for (f, (&pf, &qf)) in p.iter().zip(q).enumerate() {
                acc.add((pu + f) as u32, g * qf + l2_user * pf);
                acc.add((qi + f) as u32, g * pf + l2_item * qf);
            }
            let (bu, bi) = (self.user_biases + u, self.item_biases + i);
            acc.add(bu as u32, g + l2_user * params[bu]);
            acc.add(bi as u32, g + l2_item * params[bi]);
        }
        Ok(BatchLoss::new(loss, n as u64))
    }

    fn evaluate(&self, params: &[f32], batch: &Batch, eval: &mut Evaluation) -> Result<()> {
        let ratings = self.prepare(params, batch, None)?;
        eval.check_regression()?;
        for (user, item, rating) in ratings.iter() {
            let predicted = self.predict(params, user as usize, item as usize);
            eval.push_rating(f64::from(predicted), f64::from(rating))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::StandardNormal;

    use super::*;
    use crate::SparseBatch;
    use crate::model::ModelSpec;
    use crate::model::testutil::{assert_close, finite_difference, spec_gradient};
    use crate::optim::{OptimizerConfig, OptimizerKind, build_optimizer};

    const U: u32 = 7;
    const I: u32 = 5;
    const K: u32 = 3;

    fn spec(l2: f32, prior: f32) -> ModelSpec {
        ModelSpec::MatrixFactorization {
            users: U,
            items: I,
            factors: K,
            l2,
            mean: 3.0,
            init_std: 0.5,
            prior,
        }
    }

    /// The regularised objective in f64: the mean over ratings of the squared error plus
    /// l2/2 times the squared norm of the rating's parameters (per-example L2).
    fn objective(b: &RatingBatch, l2: f64, x: &[f64]) -> f64 {
        objective_with(b, |_| l2, |_| l2, x)
    }

    /// The objective with the L2 coefficient of each user's and item's parameters given.
    fn objective_with(
        b: &RatingBatch,
        l2_user: impl Fn(usize) -> f64,
        l2_item: impl Fn(usize) -> f64,
        x: &[f64],
    ) -> f64 {
        let (u_n, i_n, k) = (U as usize, I as usize, K as usize);
        let mut sum = 0.0;
        for (u, i, r) in b.iter() {
            let (u, i) = (u as usize, i as usize);
            let dot: f64 = (0..k).map(|f| x[u * k + f] * x[u_n * k + i * k + f]).sum();
            let pred = 3.0 + x[(u_n + i_n) * k + u] + x[(u_n + i_n) * k + u_n + i] + dot;
            sum += (pred - f64::from(r)).powi(2);
            let user =
                (0..k).map(|f| x[u * k + f].powi(2)).sum::<f64>() + x[(u_n + i_n) * k + u].powi(2);
            let item = (0..k).map(|f| x[u_n * k + i * k + f].powi(2)).sum::<f64>()
                + x[(u_n + i_n) * k + u_n + i].powi(2);
            sum += 0.5 * (l2_user(u) * user + l2_item(i) * item);
        }
        sum / b.len() as f64
    }

    /// Users 0, 1, 2 (user 1 twice) and items 0, 3 (item 3 twice).
    fn four_ratings() -> RatingBatch {
        let mut b = RatingBatch::default();
        b.push(0, 3, 4.0);
        b.push(1, 0, 2.5);
        b.push(1, 3, 5.0);
        b.push(2, 0, 1.0);
        b
    }

    /// Random parameters of `spec`, biases included.
    fn random_params(spec: &ModelSpec) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(3);
        let mut params = spec.init_params(9);
        for p in params.iter_mut() {
            *p += 0.3 * rng.sample::<f32, _>(StandardNormal);
        }
        params
    }

    #[test]
    fn the_count_aware_prior_adds_prior_over_count_to_each_rating_s_l2() {
        let (l2, prior) = (0.2_f32, 3.0_f32);
        let with_prior = spec(l2, prior);
        let spec = spec(l2, 0.0);
        let params = random_params(&spec);
        let b = four_ratings();
        // Counts of a larger training set; user 2's 0 counts as 1.
        let counts = RatingCounts {
            users: vec![1, 4, 0, 2, 2, 2, 2],
            items: vec![10, 1, 1, 2, 1],
        };
        let model = MatrixFactorization::new(U, I, K, l2, 3.0)
            .with_prior(prior, Arc::new(counts.clone()))
            .unwrap();
        let mut acc = GradientAccumulator::new(spec.num_params());
        model
            .gradient(&params, &Batch::Ratings(b.clone()), &mut acc)
            .unwrap();
        let mut dense = vec![0.0_f32; spec.num_params()];
        acc.take().scaled_add_to(&mut dense, 1.0);
        let coefficient = |count: u32| f64::from(l2) + f64::from(prior) / f64::from(count.max(1));
        let f = |x: &[f64]| {
            objective_with(
                &b,
                |u| coefficient(counts.users[u]),
                |i| coefficient(counts.items[i]),
                x,
            )
        };
        let x: Vec<f64> = params.iter().map(|&v| f64::from(v)).collect();
        for (j, want) in finite_difference(f, &x, 0..spec.num_params()) {
            assert_close(f64::from(dense[j]), want, 1e-4, &format!("d/dx_{j}"));
        }

        // Through the spec: the prior needs counts of the model's shape.
        assert!(with_prior.training_model(None).is_err());
        let short = RatingCounts::new(U - 1, I);
        assert!(with_prior.training_model(Some(Arc::new(short))).is_err());
        let mut again = GradientAccumulator::new(spec.num_params());
        with_prior
            .training_model(Some(Arc::new(counts)))
            .unwrap()
            .gradient(&params, &Batch::Ratings(b), &mut again)
            .unwrap();
        let mut dense_again = vec![0.0_f32; spec.num_params()];
        again.take().scaled_add_to(&mut dense_again, 1.0);
        assert_eq!(dense_again, dense);
    }

    #[test]
    fn gradient_matches_finite_differences_with_per_example_l2() {
        let l2 = 0.2_f32;
        let spec = spec(l2, 0.0);
        // Non-zero biases too, so that a missing or extra L2 term on them shows.
        let params = random_params(&spec);
        // Users 0,1,2 (user 1 twice) and items 0,3 (item 3 twice): users 3..7 and items 1,2,4
        // untouched.
        let b = four_ratings();
        let (k, un, inn) = (K as usize, U as usize, I as usize);
        let mut touched = Vec::new();
        for u in [0, 1, 2] {
            touched.extend(u * k..u * k + k);
            touched.push((un + inn) * k + u);
        }
        for i in [0, 3] {
            touched.extend(un * k + i * k..un * k + i * k + k);
            touched.push((un + inn) * k + un + i);
        }
        touched.sort_unstable();

        let (loss, grad) = spec_gradient(&spec, &params, &Batch::Ratings(b.clone()));
        let x: Vec<f64> = params.iter().map(|&v| f64::from(v)).collect();
        assert_close(loss.mean(), objective(&b, 0.0, &x), 1e-6, "loss");
        let support: Vec<usize> = grad.indices().iter().map(|&j| j as usize).collect();
        assert_eq!(support, touched);
        let mut dense = vec![0.0_f32; spec.num_params()];
        grad.scaled_add_to(&mut dense, 1.0);
        let f = |x: &[f64]| objective(&b, f64::from(l2), x);
        for (j, want) in finite_difference(f, &x, 0..spec.num_params()) {
            assert_close(f64::from(dense[j]), want, 1e-4, &format!("d/dx_{j}"));
        }
    }

    #[test]
    fn errors_for_untrusted_batches() {
        let spec = spec(0.1, 0.0);
        let model = spec.model();
        let params = spec.init_params(1);
        let mut acc = GradientAccumulator::new(spec.num_params());
        let mut b = RatingBatch::default();
        b.push(0, 0, 1.0);
        b.push(U, 0, 1.0);
        assert_eq!(
            model.gradient(&params, &Batch::Ratings(b), &mut acc),
            Err(ModelError::UserOutOfRange {
                position: 1,
                user: U,
                users: U
            })
        );
        let mut b = RatingBatch::default();
        b.push(0, I + 3, 1.0);
        assert_eq!(
            model.gradient(&params, &Batch::Ratings(b), &mut acc),
            Err(ModelError::ItemOutOfRange {
                position: 0,
                item: I + 3,
                items: I
            })
        );
        let mut b = RatingBatch::default();
        b.push(0, 0, f32::INFINITY);
        assert!(matches!(
            model.gradient(&params, &Batch::Ratings(b.clone()), &mut acc),
            Err(ModelError::NonFiniteRating { position: 0, .. })
        ));
        b.ratings[0] = 1.0;
        b.users.push(1);
        assert!(matches!(
            model.gradient(&params, &Batch::Ratings(b), &mut acc),
            Err(ModelError::MalformedBatch { .. })
        ));
        let mut sparse = SparseBatch::new();
        sparse.push_row(1.0, &[0], &[1.0]);
        assert_eq!(
            model.gradient(&params, &Batch::Sparse(sparse), &mut acc),
            Err(ModelError::WrongBatchKind {
                model: "pmf",
                expected: "ratings",
                got: "sparse"
            })
        );
        assert!(acc.is_empty());
    }

    #[test]
    fn adam_reaches_the_noise_floor() {
        let (users, items, rank) = (60_u32, 50_u32, 3_usize);
        let sigma = 0.1_f64;
        let mut rng = StdRng::seed_from_u64(5);
        let normal = |rng: &mut StdRng, s: f64| s * rng.sample::<f64, _>(StandardNormal);
        let p: Vec<f64> = (0..users as usize * rank)
            .map(|_| normal(&mut rng, 0.7))
            .collect();
        let q: Vec<f64> = (0..items as usize * rank)
            .map(|_| normal(&mut rng, 0.7))
            .collect();
        let bu: Vec<f64> = (0..users).map(|_| normal(&mut rng, 0.3)).collect();
        let bi: Vec<f64> = (0..items).map(|_| normal(&mut rng, 0.3)).collect();
        let mean = 3.0;
        let (mut train, mut test) = (RatingBatch::default(), RatingBatch::default());
        for u in 0..users as usize {
            for i in 0..items as usize {
                let dot: f64 = (0..rank).map(|f| p[u * rank + f] * q[i * rank + f]).sum();
                let r = mean + bu[u] + bi[i] + dot + normal(&mut rng, sigma);
                let roll = rng.random::<f64>();
                if roll < 0.5 {
                    train.push(u as u32, i as u32, r as f32);
                } else if roll < 0.6 {
                    test.push(u as u32, i as u32, r as f32);
                }
            }
        }

        let spec = ModelSpec::MatrixFactorization {
            users,
            items,
            factors: rank as u32,
            l2: 1e-3,
            mean: mean as f32,
            init_std: 0.1,
            prior: 0.0,
        };
        let model = spec.model();
        let mut params = spec.init_params(0);
        let mut opt = build_optimizer(&OptimizerConfig::new(OptimizerKind::Adam), params.len());
        let mut acc = GradientAccumulator::new(params.len());
        let batches: Vec<Batch> = (0..train.len())
            .step_by(50)
            .map(|s| {
                let e = (s + 50).min(train.len());
                Batch::Ratings(RatingBatch {
                    users: train.users[s..e].to_vec(),
                    items: train.items[s..e].to_vec(),
                    ratings: train.ratings[s..e].to_vec(),
                })
            })
            .collect();
        let mut last_epoch = BatchLoss::default();
        for _epoch in 0..150 {
            last_epoch = BatchLoss::default();
            for b in &batches {
                last_epoch += model.gradient(&params, b, &mut acc).unwrap();
                let delta = opt.step(&params, &acc.take(), 0.01);
                delta.scaled_add_to(&mut params, 1.0);
            }
        }
        let train_rmse = last_epoch.mean().sqrt();
        let mut eval = Evaluation::regression();
        model
            .evaluate(&params, &Batch::Ratings(test), &mut eval)
            .unwrap();
        let test_rmse = eval.finish()["test_rmse"];
        assert!(train_rmse < 1.3 * sigma, "train RMSE {train_rmse}");
        assert!(test_rmse < 1.6 * sigma, "test RMSE {test_rmse}");
    }
}
