//! What each model choice means to the driver: the defaults of its hyperparameters, what they
//! are derived from in the data set (the positive rate of sparse LR, the rating counts of PMF),
//! and the [`ModelSpec`] it gives on a data set ([`model_spec`]).

use crate::Mismatch;
use mlless_core::OptimizerKind;
use tracing::warn;

use mlless_core::ModelSpec;
use mlless_data::DatasetKind;

use super::TrainOptions;
use crate::dataset::Dataset;
use crate::error::{Result, RuntimeError};
use mlless_job::{ModelChoice, SyncMode};

/// Hyperparameters that have defaults per model (see [`Defaults`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hyperparameters {
    /// Learning rate.
    pub lr: Option<f32>,
    /// L2 regularisation.
    pub l2: Option<f32>,
    /// Latent factors (PMF).
    pub factors: Option<u32>,
    /// Coefficient of the count-aware prior (PMF).
    pub prior: Option<f32>,
    /// Clusters (k-means).
    pub clusters: Option<u32>,
    /// Widths of the hidden layers (MLP).
    pub hidden: Option<Vec<u32>>,
    /// Classes (MLP; labels are class ids `0..classes`).
    pub classes: Option<u32>,
}

/// Clusters of k-means when `--k` is not given.
pub const DEFAULT_CLUSTERS: u32 = 8;
/// Hidden layers of the MLP when `--hidden` is not given.
pub const DEFAULT_HIDDEN: &[u32] = &[64];
/// k-means stops once the inertia changes by less than this fraction, unless told otherwise.
pub const DEFAULT_TOLERANCE: f64 = 1e-4;

/// The defaults of the hyperparameters, chosen to be robust across data sets rather than tuned
/// to one (gradients are means over a minibatch; L2 is per example; the CLI's default schedule
/// is lr / sqrt(1 + epoch / [`Defaults::decay_epochs`])).
///
/// Sparse LR's default learning rate with momentum, Nesterov or SGD is per sample: `lr` is the
/// rate for a global batch (workers × minibatch) of [`LR_REFERENCE_BATCH`] samples, and
/// [`Defaults::lr_for`] scales it in proportion to the global batch of the run (with MA and
/// ADMM too, whose local steps are averaged over the workers). A step of P workers then moves the model as far as P steps of
/// one worker, so an epoch makes the same progress whatever P and the batch size: with a fixed
/// rate, 4 workers took 4 times fewer, equally long steps per epoch and ended 7% (at 8 workers
/// 12%) further from the optimum after 40 epochs on web-like data (3% positive, 300 binary
/// features). On imbalanced data the rate also grows by [`imbalance_factor`] (the log loss is
/// flatter there), and the bias starts at the training set's log-odds ([`initial_bias`],
/// estimated by [`estimate_sample`]) so that the larger step does not first overshoot
/// from a model predicting 0.5. Momentum stays stable up to the cap of 16 times the rate.
///
/// Sparse LR defaults to momentum SGD: on sparse data with a long tail of rare features,
/// Adam's per-coordinate step sizes give a rare feature as large a step as a frequent one, and it
/// overfits the tail (on the synthetic Zipf data of `generate sparse-lr`, 3% worse test log loss
/// than momentum after 10 epochs). PMF defaults to Adam: a user's or item's rows appear in few
/// minibatches and their batch-mean gradients are small, which plain SGD would need a learning
/// rate proportional to the batch size to follow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Defaults {
    /// Optimiser.
    pub optimizer: OptimizerKind,
    /// Learning rate.
    pub lr: f32,
    /// L2 regularisation.
    pub l2: f32,
    /// Latent factors.
    pub factors: u32,
    /// Coefficient of matrix factorisation's count-aware prior (0 for the other models).
    pub prior: f32,
    /// The time constant of the inverse-square-root schedule, in epochs, under BSP and ISP:
    /// [`LR_DECAY_EPOCHS`] for sparse LR, 1 (`lr / sqrt(epoch + 1)`) for the other models; see
    /// [`Defaults::decay_epochs_under`].
    pub decay_epochs: f64,
}

/// Matrix factorisation's default per-example L2. With [`PMF_PRIOR`] and [`PMF_ADAM_LR`],
/// chosen on MovieLens ml-latest-small and on synthetic ratings shaped like real ones
/// (`generate ratings --skew 1.3 --stars --interaction 0.15 --bias-std 0.45`: popular and rare
/// films, whole stars, mostly biases and noise) together, at 1, 4 and 16 workers: 0.1 beat 0.05
/// on both (real, P = 4: test RMSE 0.839 against 0.847 after 10 epochs; the MovieLens-100k-shaped
/// set: 0.921 against 0.929), as weighted-λ ALS's best λ on such data is about 0.1–0.2. On
/// synthetic ratings where the interaction dominates the noise (the uniform default of
/// `generate ratings`) it costs a little (1.13 σ against 1.07 σ after 10 epochs), which is not
/// what real ratings look like. Per-example L2 alone lets the many users and items with few
/// ratings overfit; the prior holds those.
pub const PMF_L2: f32 = 0.1;

/// Matrix factorisation's default Adam rate, chosen with [`PMF_L2`] (figures there). Higher
/// than the 0.03 of before because averaged updates move a row that only one worker touched by
/// 1/P of its step: with 16 workers on real ratings, 0.07 (with L2 0.1) reached test RMSE 0.861
/// after 10 epochs against 0.886 before; at 0.1 the real set's runs end worse (0.841 at P = 4).
pub const PMF_ADAM_LR: f32 = 0.07;

/// Matrix factorisation's default count-aware prior: each user and item gets `PMF_PRIOR / n`
/// more L2 per rating when it has `n` training ratings, so that one with 3 ratings is held
/// near its bias while one with 500 is fit almost freely; see [`PMF_L2`].
pub const PMF_PRIOR: f32 = 10.0;

/// The global batch (samples per step over all workers) at which sparse LR's default learning
/// rate is [`Defaults::lr`]; see [`Defaults::lr_for`].
pub const LR_REFERENCE_BATCH: u64 = 1000;

/// Sparse LR's longest default time constant of the inverse-square-root schedule, in epochs
/// (on well-sampled features, [`Defaults::decay_epochs_under`]): its rate is then
/// `lr / sqrt(1 + epoch / 16)`, half the first one's after 48 epochs. With `lr / sqrt(epoch +
/// 1)` the rate fell to a sixth of its start by epoch 40 while the weights still travelled, on
/// data that a few features nearly separate (real web-page sets; `generate sparse-lr
/// --positive-rate 0.03 --margin-std 6`): 40 epochs ended 3.5% above the C = 1 optimum's test
/// log loss at P = 1, 4 and 16 (a real web-page set: 2.8% and 6.5%). With 16 they end 1.4%
/// below it, and the noisier web-like, a9a-like, balanced and real-valued sets stay within 1%
/// (a constant rate left the web-like set 1.1% above: the rate must still fall). Matrix
/// factorisation keeps 1, on which its defaults were chosen, and so do SSP and ASP
/// ([`Defaults::decay_epochs_under`]).
pub const LR_DECAY_EPOCHS: f64 = 16.0;

/// Feature occurrences ([`DataSample::feature_occurrences`]) per epoch of the schedule's time
/// constant: see [`Defaults::decay_epochs_under`].
pub const OCCURRENCES_PER_DECAY_EPOCH: f64 = 100.0;

/// The largest factor by which [`Defaults::lr_for`] scales the rate up: beyond it momentum's
/// step risks the stability limit (tested on the web-like, a9a-like and balanced sets with 4
/// to 16 workers).
pub const LR_MAX_SCALE: f64 = 16.0;

/// The largest step × curvature (the rate times [`DataSample::log_loss_curvature`]) at which
/// sparse LR's momentum was seen to converge: 10.4 on balanced binary data with 16 workers
/// (rate 8), 11.8 on dense Higgs-like data; on Criteo-like counts 9.8 (1 worker) still
/// converged and 19.6 (2 workers) did not. Above it [`DataSample::unstable_rate_warning`] warns.
pub const STABLE_STEP: f64 = 12.0;

/// The step × curvature that sparse LR's default rate stays within
/// ([`DataSample::stable_rate`]): half of [`STABLE_STEP`], the largest seen to converge, so that
/// a curvature underestimated by the sample (it is measured on a few minibatches, at a model
/// predicting the base rate) still leaves room.
pub const DEFAULT_STEP_BOUND: f64 = STABLE_STEP / 2.0;

/// The largest factor of [`imbalance_factor`].
pub const IMBALANCE_MAX: f64 = 8.0;

/// How much smaller the log loss's curvature is on data with positive rate `r` than on data
/// with 25% positives, `0.1875 / (r (1 − r))`, between 1 and [`IMBALANCE_MAX`]: 1 from 25% to 75%
/// positive, 1.03 at 24% (a9a), 6.4 at 3%, 8 from about 2.4% down.
///
/// The curvature of the mean log loss along the bias is `mean p (1 − p)`, about `r (1 − r)`
/// once the model predicts the base rate, and along a weight the same times its feature's
/// frequency: on 3% positives it is 6 times smaller than on balanced data, and a rate that is
/// safe on balanced data crawls there.
pub fn imbalance_factor(positive_rate: f64) -> f64 {
    let r = positive_rate.clamp(1e-6, 1.0 - 1e-6);
    (0.1875 / (r * (1.0 - r))).clamp(1.0, IMBALANCE_MAX)
}

/// The log-odds `ln(r / (1 − r))` of positive rate `r` (clamped to [0.001, 0.999]): sparse LR's
/// initial bias, so that training starts at the base rate rather than at 0.5.
pub fn initial_bias(positive_rate: f64) -> f32 {
    let r = positive_rate.clamp(0.001, 0.999);
    (r / (1.0 - r)).ln() as f32
}

impl Defaults {
    /// The default learning rate for a step over `global_batch` samples (the job's
    /// [`mlless_job::BatchPlan`]) on data like `sample`. For sparse LR with momentum, Nesterov
    /// or SGD: `lr` × `global_batch / LR_REFERENCE_BATCH` ×
    /// [`imbalance_factor`]`(positive_rate)`, at most [`LR_MAX_SCALE`] × `lr` and at most the
    /// sample's [`DataSample::stable_rate`] (linear scaling bounded by the loss's curvature);
    /// other models and Adam (whose steps do not grow with the gradient): `lr` as it is.
    pub fn lr_for(&self, model: ModelChoice, global_batch: u64, sample: DataSample) -> f32 {
        if !self.scales_rate(model) {
            return self.lr;
        }
        let scale = (global_batch.max(1) as f64 / LR_REFERENCE_BATCH as f64)
            * imbalance_factor(sample.positive_rate);
        let scaled = f64::from(self.lr) * scale.min(LR_MAX_SCALE);
        scaled.min(sample.stable_rate().unwrap_or(f64::INFINITY)) as f32
    }

    /// Whether [`lr_for`](Self::lr_for) scales `model`'s rate: a model whose rate scales with
    /// the batch ([`ModelChoice::scales_rate_with_batch`]) under an SGD-family optimiser (not
    /// Adam, whose steps do not grow with the gradient).
    pub fn scales_rate(&self, model: ModelChoice) -> bool {
        model.scales_rate_with_batch()
            && match self.optimizer {
                OptimizerKind::Momentum | OptimizerKind::Nesterov | OptimizerKind::Sgd => true,
                OptimizerKind::Adam => false,
            }
    }

    /// The schedule's time constant for a job synchronised by `sync` on data like `sample`:
    /// 1 under SSP and ASP; under BSP and ISP, [`Defaults::decay_epochs`] (sparse LR's 16) when
    /// the average feature occurs in at least 1,600 training rows, down to 1 at 100 and fewer
    /// (a hundredth of [`DataSample::feature_occurrences`], between 1 and the default).
    ///
    /// A slowly decaying rate lets the large weights of data that a few frequent features
    /// nearly separate be reached (web-page sets: 3.5% above the optimum after 40 epochs with 1,
    /// 1.4% below with 16), but on a long tail of rare features, seen in a few rows each, it
    /// fits their noise instead (the tests' Zipf set, 100,000 features in 270,000 rows: 1.3%
    /// worse after 10 epochs with 16). Stale steps (SSP, ASP) tolerate a smaller rate: under
    /// ASP, 16 sent the validation log loss from 0.26 to above 1 within 5 epochs in 3 runs of 6
    /// (4 workers, balanced data), where 1 converged in all.
    pub fn decay_epochs_under(&self, sync: SyncMode, sample: DataSample) -> f64 {
        if sync.is_synchronous() {
            (sample.feature_occurrences / OCCURRENCES_PER_DECAY_EPOCH).clamp(1.0, self.decay_epochs)
        } else {
            1.0
        }
    }

    /// The defaults for a model, with the optimiser the user chose (or the model's default).
    pub fn for_model(model: ModelChoice, optimizer: Option<OptimizerKind>) -> Self {
        use OptimizerKind::{Adam, Momentum, Nesterov, Sgd};
        match model {
            ModelChoice::LogisticRegression => {
                let optimizer = optimizer.unwrap_or(Momentum);
                Self {
                    optimizer,
                    lr: match optimizer {
                        Momentum | Nesterov => 0.5,
                        Sgd => 3.0,
                        Adam => 0.003,
                    },
                    l2: 1e-4,
                    factors: 0,
                    prior: 0.0,
                    decay_epochs: LR_DECAY_EPOCHS,
                }
            }
            ModelChoice::MatrixFactorization => {
                let optimizer = optimizer.unwrap_or(Adam);
                Self {
                    optimizer,
                    lr: match optimizer {
                        Adam => PMF_ADAM_LR,
                        Momentum | Nesterov => 3.0,
                        Sgd => 30.0,
                    },
                    l2: PMF_L2,
                    factors: 10,
                    prior: PMF_PRIOR,
                    decay_epochs: 1.0,
                }
            }
            // The hinge's gradient is the row itself wherever the margin is short, twice the
            // logistic loss's typical size: half LR's step.
            ModelChoice::Svm => {
                let optimizer = optimizer.unwrap_or(Momentum);
                Self {
                    optimizer,
                    lr: match optimizer {
                        Momentum | Nesterov => 0.2,
                        Sgd => 1.0,
                        Adam => 0.003,
                    },
                    l2: 1e-4,
                    factors: 0,
                    prior: 0.0,
                    decay_epochs: 1.0,
                }
            }
            // Lloyd steps take no learning rate or optimiser.
            ModelChoice::KMeans => Self {
                optimizer: optimizer.unwrap_or(Sgd),
                lr: 0.0,
                l2: 0.0,
                factors: 0,
                prior: 0.0,
                decay_epochs: 1.0,
            },
            // Adam, as for most small dense networks: robust to the scale of the inputs.
            ModelChoice::Mlp => {
                let optimizer = optimizer.unwrap_or(Adam);
                Self {
                    optimizer,
                    lr: match optimizer {
                        Adam => 0.01,
                        Momentum | Nesterov => 0.1,
                        Sgd => 0.5,
                    },
                    l2: 1e-4,
                    factors: 0,
                    prior: 0.0,
                    decay_epochs: 1.0,
                }
            }
        }
    }
}

/// Minibatches of the training split that [`estimate_sample`] reads at most.
const RATE_SAMPLE_BATCHES: usize = 8;

/// Power iterations of [`estimate_sample`]'s curvature.
pub const CURVATURE_ITERATIONS: usize = 30;

/// What sparse LR's defaults need to know of the training data, estimated on a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DataSample {
    /// The fraction of positive labels.
    pub positive_rate: f64,
    /// The largest eigenvalue of the rows' second moment, bias included
    /// ([`mlless_core::SparseBatch::top_second_moment`]): near 10 for one-hot features, far
    /// larger for counts or unscaled values.
    pub curvature: f64,
    /// The rows of the training set an average feature occurs in: its rows times the sample's
    /// mean non-zeros a row, over the features (0: unknown). Few on a long tail of rare
    /// features (the Zipf set of the tests: 81), many on a few hundred keywords (web-page
    /// sets: 1,400); see [`Defaults::decay_epochs_under`].
    pub feature_occurrences: f64,
}

impl DataSample {
    /// The curvature of the mean log loss along its steepest direction at a model that
    /// predicts the base rate: `r (1 − r)` times [`DataSample::curvature`].
    pub fn log_loss_curvature(&self) -> f64 {
        let r = self.positive_rate.clamp(1e-6, 1.0 - 1e-6);
        r * (1.0 - r) * self.curvature
    }

    /// The largest default rate for data like this: [`DEFAULT_STEP_BOUND`] over
    /// [`DataSample::log_loss_curvature`]; `None` where the curvature is unknown (0).
    pub fn stable_rate(&self) -> Option<f64> {
        let curvature = self.log_loss_curvature();
        (curvature > 0.0).then(|| DEFAULT_STEP_BOUND / curvature)
    }

    /// What to say when a rate of `lr` is likely to diverge on data like this (its step times
    /// [`DataSample::log_loss_curvature`] above [`STABLE_STEP`]), `None` when it is not.
    pub fn unstable_rate_warning(&self, lr: f32) -> Option<String> {
        let step = f64::from(lr) * self.log_loss_curvature();
        (step > STABLE_STEP).then(|| {
            format!(
                "the learning rate {lr} is likely too large for these features: their second \
                 moment's top eigenvalue is {:.1} (one-hot features give about 5), so a step \
                 moves the loss {step:.0} times its curvature, above the {STABLE_STEP} seen to \
                 converge; large unscaled values (counts) do this: prepare the data with \
                 --normalize minmax, or give a --lr below {:.3}",
                self.curvature,
                STABLE_STEP / self.log_loss_curvature()
            )
        })
    }
}

/// The [`DataSample`] of up to [`RATE_SAMPLE_BATCHES`] training minibatches spread evenly over
/// the split (the same ones every time); a positive rate of 0.5 and no curvature for a split
/// without rows.
pub async fn estimate_sample(dataset: &Dataset) -> Result<DataSample> {
    let batches = dataset.batches(crate::dataset::Split::Train);
    let take = batches.min(RATE_SAMPLE_BATCHES);
    let mut sample = mlless_core::SparseBatch::new();
    for k in 0..take {
        let batch = dataset
            .read_batch(crate::dataset::Split::Train, k * batches / take)
            .await?;
        if let mlless_core::Batch::Sparse(sparse) = batch {
            for r in 0..sparse.rows() {
                let (label, indices, values) = sparse.row(r);
                sample.push_row(label, indices, values);
            }
        }
    }
    if sample.rows() == 0 {
        return Ok(DataSample {
            positive_rate: 0.5,
            curvature: 0.0,
            feature_occurrences: 0.0,
        });
    }
    let positives: f64 = sample.labels.iter().map(|&l| f64::from(l)).sum();
    let features = match dataset.manifest().kind {
        DatasetKind::Sparse { features } => features as usize,
        _ => 0,
    };
    let train_rows = dataset.manifest().train.samples;
    let mean_nnz = sample.nnz() as f64 / sample.rows() as f64;
    Ok(DataSample {
        positive_rate: positives / sample.rows() as f64,
        curvature: sample.top_second_moment(features, CURVATURE_ITERATIONS),
        feature_occurrences: train_rows as f64 * mean_nnz / features.max(1) as f64,
    })
}

/// The count-aware prior of a PMF run: the one asked for, or the default. It needs the data
/// set's rating counts: without them (a data set prepared by an older mlless) a prior asked
/// for is an error, and the default is left out with a warning.
pub(super) fn pmf_prior(asked: Option<f32>, default: f32, dataset: &Dataset) -> Result<f32> {
    if dataset.manifest().rating_counts.is_some() {
        return Ok(asked.unwrap_or(default));
    }
    match asked {
        Some(prior) if prior > 0.0 => Err(Mismatch::NoRatingCounts {
            prior,
            data_url: dataset.url().to_owned(),
        }
        .into()),
        Some(_) => Ok(0.0),
        None => {
            if default > 0.0 {
                warn!(
                    data = dataset.url(),
                    "the data set has no rating counts (it was prepared by an older mlless): \
                     training without the count-aware prior; prepare it again to have it"
                );
            }
            Ok(0.0)
        }
    }
}

/// The model `options` ask for on `dataset`, with the defaults of its hyperparameters: the one
/// place the driver matches on [`ModelChoice`] to build a [`ModelSpec`]. For LR,
/// `positive_rate` is the training set's (estimated) fraction of positive labels; `defaults` are
/// [`Defaults::for_model`]'s.
pub(super) fn model_spec(
    options: &TrainOptions,
    dataset: &Dataset,
    defaults: &Defaults,
    positive_rate: f64,
) -> Result<ModelSpec> {
    let manifest = dataset.manifest();
    let init_bias = initial_bias(positive_rate);
    let l2 = options.hyper.l2.unwrap_or(defaults.l2);
    let spec = match (options.model, &manifest.kind) {
        (ModelChoice::LogisticRegression, DatasetKind::Sparse { features }) => {
            ModelSpec::LogisticRegression {
                features: *features,
                l2,
                init_bias,
            }
        }
        (ModelChoice::Svm, DatasetKind::Sparse { features }) => ModelSpec::Svm {
            features: *features,
            l2,
        },
        (ModelChoice::KMeans, DatasetKind::Sparse { features }) => ModelSpec::KMeans {
            features: *features,
            k: options.hyper.clusters.unwrap_or(DEFAULT_CLUSTERS),
        },
        (ModelChoice::Mlp, DatasetKind::Sparse { features }) => ModelSpec::Mlp {
            features: *features,
            hidden: options
                .hyper
                .hidden
                .clone()
                .unwrap_or_else(|| DEFAULT_HIDDEN.to_vec()),
            classes: options.hyper.classes.unwrap_or(2),
            l2,
        },
        (ModelChoice::MatrixFactorization, DatasetKind::Ratings { users, items, mean }) => {
            ModelSpec::MatrixFactorization {
                users: *users,
                items: *items,
                factors: options.hyper.factors.unwrap_or(defaults.factors).max(1),
                l2,
                mean: *mean,
                init_std: 0.1,
                prior: pmf_prior(options.hyper.prior, defaults.prior, dataset)?,
            }
        }
        (choice @ ModelChoice::MatrixFactorization, DatasetKind::Sparse { .. }) => {
            return Err(Mismatch::RatingsModelOnRows {
                data_url: dataset.url().to_owned(),
                model: choice.name(),
            }
            .into());
        }
        (choice, DatasetKind::Ratings { .. }) => {
            return Err(Mismatch::RowsModelOnRatings {
                data_url: dataset.url().to_owned(),
                model: choice.name(),
            }
            .into());
        }
    };
    check_labels(&spec, dataset)?;
    Ok(spec)
}

/// Refuses a data set with a label that `spec` cannot train on, naming the input line it was
/// read from: before any function starts, rather than as a minibatch row inside a worker. Data
/// sets prepared before their label range was kept are not checked here (the workers still
/// are).
fn check_labels(spec: &ModelSpec, dataset: &Dataset) -> Result<()> {
    let rule = spec.label_rule();
    let Some(at) = dataset
        .manifest()
        .labels
        .as_ref()
        .and_then(|range| range.refused_by(rule))
    else {
        return Ok(());
    };
    Err(Mismatch::Labels {
        model: spec.name(),
        rule,
        at: at.clone(),
        data_url: dataset.url().to_owned(),
    }
    .into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_rate_too_steep_for_the_features_is_warned_of() {
        let one_hot = super::DataSample {
            positive_rate: 0.5,
            curvature: 5.2,
            feature_occurrences: 0.0,
        };
        assert_eq!(one_hot.unstable_rate_warning(8.0), None);
        let counts = super::DataSample {
            positive_rate: 0.26,
            curvature: 104.0,
            feature_occurrences: 0.0,
        };
        let warning = counts.unstable_rate_warning(4.0).expect("warned");
        assert!(
            warning.contains("--normalize minmax") && warning.contains("below 0.600"),
            "{warning}"
        );
        assert_eq!(counts.unstable_rate_warning(0.5), None);
    }

    use super::*;

    #[test]
    fn sparse_lr_decays_slowly_on_well_sampled_features_when_synchronous() {
        let lr = Defaults::for_model(ModelChoice::LogisticRegression, None);
        let sample = |feature_occurrences| DataSample {
            positive_rate: 0.03,
            curvature: 5.0,
            feature_occurrences,
        };
        let keywords = sample(1440.0);
        assert_eq!(
            lr.decay_epochs_under(SyncMode::Bsp, sample(1600.0)),
            LR_DECAY_EPOCHS
        );
        assert_eq!(
            lr.decay_epochs_under(SyncMode::Bsp, sample(1e6)),
            LR_DECAY_EPOCHS
        );
        assert!((lr.decay_epochs_under(SyncMode::Bsp, keywords) - 14.4).abs() < 1e-9);
        let isp = SyncMode::Isp {
            significance: 0.7,
            scale: mlless_core::SignificanceScale::Mean,
        };
        assert!((lr.decay_epochs_under(isp, keywords) - 14.4).abs() < 1e-9);
        // A long tail of rare features, or no sample: the schedule of before.
        assert_eq!(lr.decay_epochs_under(SyncMode::Bsp, sample(81.0)), 1.0);
        assert_eq!(lr.decay_epochs_under(SyncMode::Bsp, sample(0.0)), 1.0);
        assert_eq!(
            lr.decay_epochs_under(SyncMode::Ssp { slack: 3 }, keywords),
            1.0
        );
        assert_eq!(lr.decay_epochs_under(SyncMode::Asp, keywords), 1.0);
        let pmf = Defaults::for_model(ModelChoice::MatrixFactorization, None);
        assert_eq!(pmf.decay_epochs_under(SyncMode::Bsp, keywords), 1.0);
    }

    #[test]
    fn sparse_lr_default_rate_is_per_sample_and_grows_with_imbalance() {
        let momentum = Defaults::for_model(ModelChoice::LogisticRegression, None);
        assert_eq!(momentum.optimizer, OptimizerKind::Momentum);
        let sample = |positive_rate| DataSample {
            positive_rate,
            curvature: 0.0,
            feature_occurrences: 0.0,
        };
        let lr =
            |batch, rate| momentum.lr_for(ModelChoice::LogisticRegression, batch, sample(rate));
        assert_eq!(lr(1000, 0.5), 0.5);
        assert_eq!(lr(4000, 0.5), 2.0);
        assert_eq!(lr(250, 0.5), 0.125);
        // From 25% to 75% positive as balanced, 24% almost (1.03); 3% takes 6.4 times the
        // step; capped at 16 times.
        assert_eq!(lr(1000, 0.25), 0.5);
        assert_eq!(lr(1000, 0.75), 0.5);
        assert!((lr(1000, 0.24) - 0.514).abs() < 1e-3);
        assert!((f64::from(lr(1000, 0.03)) - 0.5 * 0.1875 / (0.03 * 0.97)).abs() < 1e-5);
        assert_eq!(lr(1000, 0.001), 4.0);
        assert_eq!(lr(1000, 0.999), 4.0);
        assert_eq!(lr(64_000, 0.5), 8.0);
        assert_eq!(lr(4000, 0.03), 8.0);
        let sgd = Defaults::for_model(ModelChoice::LogisticRegression, Some(OptimizerKind::Sgd));
        assert_eq!(
            sgd.lr_for(ModelChoice::LogisticRegression, 2000, sample(0.5)),
            6.0
        );
        // Bounded by the curvature: counts with a top second moment of 104 (log-loss curvature
        // 0.26 × 0.74 × 104 = 20) take at most 6 / 20.
        let counts = DataSample {
            positive_rate: 0.26,
            curvature: 104.0,
            feature_occurrences: 0.0,
        };
        let bound = DEFAULT_STEP_BOUND / counts.log_loss_curvature();
        assert!((f64::from(lr_at(&momentum, 4000, counts)) - bound).abs() < 1e-6);
        assert_eq!(counts.unstable_rate_warning(bound as f32), None);
        // One-hot features (curvature about 5) keep the scaled rate.
        let one_hot = DataSample {
            positive_rate: 0.5,
            curvature: 5.0,
            feature_occurrences: 0.0,
        };
        assert_eq!(lr_at(&momentum, 4000, one_hot), 2.0);
        // Adam and the other models keep their rate.
        let adam = Defaults::for_model(ModelChoice::LogisticRegression, Some(OptimizerKind::Adam));
        assert_eq!(lr_at(&adam, 8000, sample(0.03)), 0.003);
        let pmf = Defaults::for_model(ModelChoice::MatrixFactorization, None);
        assert_eq!(
            pmf.lr_for(ModelChoice::MatrixFactorization, 8000, sample(0.5)),
            PMF_ADAM_LR
        );
        let svm = Defaults::for_model(ModelChoice::Svm, None);
        assert_eq!(svm.lr_for(ModelChoice::Svm, 8000, sample(0.03)), 0.2);
    }

    fn lr_at(defaults: &Defaults, batch: u64, sample: DataSample) -> f32 {
        defaults.lr_for(ModelChoice::LogisticRegression, batch, sample)
    }

    #[test]
    fn initial_bias_is_the_log_odds() {
        assert_eq!(initial_bias(0.5), 0.0);
        assert!((initial_bias(0.03) - (0.03_f64 / 0.97).ln() as f32).abs() < 1e-6);
        assert!(initial_bias(0.0).is_finite() && initial_bias(0.0) < -6.0);
        assert!(initial_bias(1.0).is_finite() && initial_bias(1.0) > 6.0);
    }
}

/// The least memory a function needs per parameter of the model: its replica, its optimiser's
/// state and a gradient or delta, each an `f32` per parameter (the supervisor's averages and
/// an ISP filter's residuals come on top).
pub const BYTES_PER_PARAMETER: u64 = 12;

/// Refuses a model that could not fit in a function's memory of `memory_mb`, before anything
/// of its size is allocated (by the driver, a worker or the supervisor): its size comes from
/// the data set (the largest feature index of a sparse input, a manifest's counts), which
/// nothing else bounds.
pub fn check_model_memory(model: &ModelSpec, memory_mb: u32) -> Result<()> {
    let params = model.num_params() as u64;
    let needed_mb = params.saturating_mul(BYTES_PER_PARAMETER).div_ceil(1 << 20);
    if needed_mb <= u64::from(memory_mb) {
        return Ok(());
    }
    let features = match *model {
        ModelSpec::MatrixFactorization { users, items, .. } => u64::from(users) + u64::from(items),
        ModelSpec::LogisticRegression { .. }
        | ModelSpec::Svm { .. }
        | ModelSpec::KMeans { .. }
        | ModelSpec::Mlp { .. } => model.input_features().map_or(0, u64::from),
    };
    Err(RuntimeError::ModelTooLarge {
        model: model.name(),
        features,
        params,
        needed_mb,
        memory_mb,
    })
}

#[cfg(test)]
mod memory_tests {
    use super::*;

    #[test]
    fn a_model_beyond_the_memory_cap_is_refused_naming_its_features() {
        let lr = |features| ModelSpec::LogisticRegression {
            features,
            l2: 0.0,
            init_bias: 0.0,
        };
        assert!(check_model_memory(&lr(1_000_000), 64).is_ok());
        let err = check_model_memory(&lr(2_000_000_001), 1024).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("2000000001 features"), "{text}");
        assert!(text.contains("--memory-mb 1024"), "{text}");
        assert!(!err.resume_can_help());
    }
}
