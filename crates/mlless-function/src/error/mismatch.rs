//! [`Mismatch`]: a data set, an input or a model that does not fit what is asked of it.

use mlless_core::LabelRule;
use mlless_data::LabelAt;

/// A data set, an input or a model that does not fit the model or what the options ask of it:
/// another kind of data, labels the model cannot train on, a split or a table the data set
/// does not have, a model of another data set.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    /// `--model pmf` of a data set of feature rows.
    #[error(
        "{data_url} holds labelled feature rows: train it with --model {}, not {model}",
        mlless_job::ModelChoice::names_training_on(false)
    )]
    RatingsModelOnRows {
        /// The data set.
        data_url: String,
        /// The model's short name (`pmf`).
        model: &'static str,
    },
    /// A model of feature rows of a data set of ratings.
    #[error(
        "{data_url} holds ratings: train it with --model {}, not {model}",
        mlless_job::ModelChoice::names_training_on(true)
    )]
    RowsModelOnRatings {
        /// The data set.
        data_url: String,
        /// The model's short name (`lr`).
        model: &'static str,
    },
    /// A label the model cannot train on, with the input line it was read from.
    #[error(
        "--model {model} needs labels that are {}, but {}:{} has the label {} (data set \
         {data_url}): {}",
        rule.describe(),
        at.input,
        at.line,
        at.label,
        label_advice(*rule, at.label)
    )]
    Labels {
        /// The model's short name.
        model: &'static str,
        /// The labels it trains on.
        rule: LabelRule,
        /// The label refused and where it was read.
        at: LabelAt,
        /// The data set.
        data_url: String,
    },
    /// An option that needs a validation set, on a data set without one.
    #[error("{}", no_validation_message(*needed_by, data_url))]
    NoValidationSet {
        /// What needs it.
        needed_by: NeedsValidation,
        /// The data set.
        data_url: String,
    },
    /// `--prior` of a data set prepared before the rating counts were kept.
    #[error(
        "--prior {prior} needs the rating counts of the data set, and {data_url} has none (it \
         was prepared by an older mlless): prepare it again"
    )]
    NoRatingCounts {
        /// The prior asked for.
        prior: f32,
        /// The data set.
        data_url: String,
    },
    /// Predicting by original ids from a data set prepared before the id map was kept.
    #[error(
        "the data set {data_url} has no id map (prepared before mlless kept one): prepare it \
         again to predict by original ids"
    )]
    NoIdMap {
        /// The data set.
        data_url: String,
    },
    /// `predict --evaluate` of an input without labels.
    #[error("{path}: --evaluate needs labels (ratings), and the input has none")]
    NoLabels {
        /// The input.
        path: String,
    },
    /// A pmf model asked to score feature rows.
    #[error("{path}: a pmf model scores ratings: use --format movielens")]
    RatingsModelScoresRows {
        /// The input.
        path: String,
    },
    /// A model of feature rows asked to score ratings.
    #[error("{path}: a {model} model scores feature rows, not ratings")]
    RowsModelScoresRatings {
        /// The input.
        path: String,
        /// The model's short name.
        model: &'static str,
    },
    /// A model over another number of features than the data set it is to read.
    #[error(
        "{model_url}: the {model} model has {model_features} features, but the data set at \
         {data_url} has {data_features}: it was trained on another data set; give the --data \
         it was trained on (or none, for the run's own)"
    )]
    FeatureCount {
        /// The model.
        model_url: String,
        /// Its short name.
        model: &'static str,
        /// Its features.
        model_features: u64,
        /// The data set.
        data_url: String,
        /// The data set's features.
        data_features: u64,
    },
    /// A model of another kind of data set (a pmf model of other users or items, or of
    /// feature rows).
    #[error("{model_url}: the {model} model does not fit its data set ({kind})")]
    DatasetKind {
        /// The model.
        model_url: String,
        /// Its short name.
        model: &'static str,
        /// The data set's kind, as `Debug` shows it.
        kind: String,
    },
    /// A data set that reads LIBSVM indices from another base than the one the model was
    /// trained on.
    #[error(
        "{model_url}: the model was trained on {trained_on}, whose feature indices are \
         {trained_base}, but the data set at {data_url} reads them as {data_base}: every \
         feature would be scored as its neighbour; give the --data it was trained on (or none, \
         for the run's own)"
    )]
    IndexBase {
        /// The model.
        model_url: String,
        /// The data set it was trained on.
        trained_on: String,
        /// That data set's base (`0-based`, `1-based`).
        trained_base: &'static str,
        /// The data set given.
        data_url: String,
        /// Its base.
        data_base: &'static str,
    },
    /// A model file with another number of parameters than its model has.
    #[error("{model_url}: {found} parameters, the {model} model has {expected}")]
    ParameterCount {
        /// The model file.
        model_url: String,
        /// The parameters it holds.
        found: usize,
        /// The model's short name.
        model: &'static str,
        /// The parameters the model has.
        expected: usize,
    },
}

/// What to do about a label `rule` refuses ([`Mismatch::Labels`]).
fn label_advice(rule: LabelRule, label: f32) -> String {
    match rule {
        LabelRule::Binary => "prepare the data with two label values (they become 0 and 1), or \
                              train a multi-class --model mlp"
            .to_owned(),
        LabelRule::Classes(_) if label.fract() == 0.0 && label >= 0.0 => {
            format!("give --classes {} or more", label as u64 + 1)
        }
        LabelRule::Classes(_) | LabelRule::Ignored => {
            "class ids are integers from 0: relabel the input and prepare it again".to_owned()
        }
    }
}

/// What asked for a validation set ([`Mismatch::NoValidationSet`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeedsValidation {
    /// An option of `train` (`--early-stop`, `--target-metric`).
    Option(&'static str),
    /// `train --refit`.
    Refit,
    /// `mlless tune`, which compares its trials on the validation metric.
    Search,
}

/// The message of [`Mismatch::NoValidationSet`].
fn no_validation_message(needed_by: NeedsValidation, data_url: &str) -> String {
    match needed_by {
        NeedsValidation::Option(flag) => format!(
            "{flag} needs a validation set, and {data_url} has none: prepare it with \
             --validation-fraction F or --validation-input FILE"
        ),
        NeedsValidation::Refit => format!(
            "--refit trains again on the training and validation sets for the epochs early \
             stopping chose, and {data_url} has no validation set: prepare it with \
             --validation-fraction F or --validation-input FILE"
        ),
        NeedsValidation::Search => format!(
            "the data set at {data_url} has no validation set, and the search compares its \
             trials on the validation metric: prepare it with --validation-fraction above 0 \
             (the default is 0.1) or --validation-input"
        ),
    }
}
