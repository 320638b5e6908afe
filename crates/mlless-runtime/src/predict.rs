//! `mlless predict`: scores a file with a trained model, the way its data set was prepared.
//!
//! A model is found from a run (`{runs}/{job}`: `spec.json`, `model.bin`, `record.json`) or
//! from a `model.bin` (with the run's `spec.json` beside it, or a data set given). The run's
//! data set gives what reading and scoring new input needs: the normalisation, the label map,
//! how the input was read ([`mlless_data::InputSchema`]) and, for ratings, the id map
//! ([`IdMap`]).
//!
//! Output is CSV with a header, one row per input sample, in input order:
//!
//! | model | columns |
//! | --- | --- |
//! | lr | `probability,label` (probability of the positive label; label the predicted one) |
//! | svm | `margin,label` |
//! | pmf | `user,item,rating` (original ids) |
//! | kmeans | `cluster,distance` (Euclidean distance to the nearest centroid) |
//! | mlp | `p0,…,p{C-1},label` |
//!
//! Labels are written as the input wrote them (through the data set's label map). A PMF user or
//! item the data set never had gets the bias-only prediction: the global mean plus the bias of
//! whichever of the two is known.

use crate::Mismatch;
use std::io::Write;

use mlless_core::{Batch, Metrics, ModelError, ModelSpec, Prediction, Predictor};
use mlless_data::{
    DatasetKind, IdMap, InputFormat, LabelMap, Manifest, RatingBatch, ScoringInput, ScoringLayout,
    ScoringRows,
};
use mlless_store::Store;

use crate::dataset::Dataset;
use crate::error::{Result, RuntimeError};
use crate::messages::{Message, StoredModel};
use mlless_job::record::{MODEL_KEY, RECORD_KEY, RunRecord};
use mlless_job::{JobSpec, SPEC_KEY};

/// A trained model with what scoring new input needs.
#[derive(Debug, Clone)]
pub struct TrainedModel {
    /// Where the model was read from.
    pub model_url: String,
    /// The model.
    pub model: StoredModel,
    /// The run's spec, when the model came with one.
    pub spec: Option<JobSpec>,
    /// The run's record, when there is one (for its test metrics).
    pub record: Option<RunRecord>,
    /// Location of the data set the model was trained on.
    pub data_url: String,
    /// That data set's manifest.
    pub manifest: Manifest,
    /// Its id map (ratings data sets).
    pub ids: Option<IdMap>,
}

/// What scoring a file did, besides writing the predictions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScoreSummary {
    /// Samples scored.
    pub samples: u64,
    /// The model's metrics on the input, when asked for.
    pub metrics: Option<Metrics>,
    /// Feature entries ignored: their index is beyond the model's features.
    pub ignored_features: u64,
    /// PMF: ratings whose user the data set never had.
    pub unknown_users: u64,
    /// PMF: ratings whose item the data set never had.
    pub unknown_items: u64,
}

/// Splits a location into its directory and its last component (`a/b/model.bin` → `a/b`,
/// `model.bin`).
fn split_last(location: &str) -> (&str, &str) {
    let trimmed = location.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((dir, name)) if !dir.ends_with(':') && !dir.ends_with(":/") => (dir, name),
        _ => (".", trimmed),
    }
}

/// Opens a store at `url`, refusing a local directory that does not exist (opening would
/// create it).
fn open_existing(url: &str) -> Result<Store> {
    if !url.contains("://") && !std::path::Path::new(url).is_dir() {
        return Err(crate::InputError::NoSuchDirectory {
            url: url.to_owned(),
        }
        .into());
    }
    Ok(Store::open(url)?)
}

impl TrainedModel {
    /// Loads the model at `location` — a run (`{runs}/{job}`) or a `model.bin` — and the data
    /// set it was trained on: `data_url`, or else the run's (from the `spec.json` beside the
    /// model).
    pub async fn load(location: &str, data_url: Option<&str>) -> Result<Self> {
        let (run, key) = if location.trim_end_matches('/').ends_with(".bin") {
            let (dir, name) = split_last(location);
            (open_existing(dir)?, name.to_string())
        } else {
            (open_existing(location)?, MODEL_KEY.to_string())
        };
        let model_url = format!("{}/{key}", run.url());
        let bytes = run.get(&key).await?;
        let model = StoredModel::decode(&bytes, || model_url.clone())?;
        let spec = match run.get_opt(SPEC_KEY).await? {
            Some(bytes) => Some(serde_json::from_slice::<JobSpec>(&bytes).map_err(|source| {
                RuntimeError::Json {
                    location: format!("{}/{SPEC_KEY}", run.url()),
                    source,
                }
            })?),
            None => None,
        };
        // The record is only for comparing metrics: one that does not read is left out.
        let record = match run.get_opt(RECORD_KEY).await? {
            Some(bytes) => serde_json::from_slice::<RunRecord>(&bytes).ok(),
            None => None,
        };
        let data_url = match (data_url, &spec) {
            (Some(url), _) => url.to_string(),
            (None, Some(spec)) => spec.data_url.as_str().to_owned(),
            (None, None) => {
                return Err(crate::InputError::NoDataSet {
                    model_url: model_url.to_string(),
                    key: SPEC_KEY,
                }
                .into());
            }
        };
        let dataset = Dataset::open(&data_url).await?;
        let manifest = dataset.manifest().clone();
        check_fits(&model.spec, &manifest.kind, &model_url, dataset.url())?;
        if let Some(spec) = &spec {
            check_index_base(spec, &manifest, dataset.url(), &model_url).await?;
        }
        let ids = match manifest.schema.as_ref().and_then(|s| s.ids.as_ref()) {
            Some(info) => Some(
                dataset
                    .read_checked(&info.key, info.crc32, IdMap::decode)
                    .await?,
            ),
            None => None,
        };
        Ok(Self {
            model_url,
            model,
            spec,
            record,
            data_url: dataset.url().to_string(),
            manifest,
            ids,
        })
    }

    /// How input in `format` is read for this model's data set.
    pub fn scoring_layout(&self, format: InputFormat) -> ScoringLayout {
        let schema = self.manifest.schema.clone().unwrap_or_default();
        let features = match (self.model.spec.input_features(), &self.manifest.kind) {
            (Some(features), _) | (None, &DatasetKind::Sparse { features }) => features,
            _ => 0,
        };
        ScoringLayout {
            format,
            features,
            zero_based: schema.zero_based,
            csv_columns: schema.csv_columns,
            csv: schema.csv.unwrap_or_default(),
            label_map: self.manifest.label_map,
        }
    }

    /// Scores `input` (read with [`Self::scoring_layout`]; `path` names it in errors), writes
    /// the predictions as CSV to `out`, and with `evaluate` computes the model's test metrics
    /// on it exactly as the supervisor does for the test set.
    pub fn score(
        &self,
        input: ScoringInput,
        path: &str,
        out: &mut dyn Write,
        evaluate: bool,
    ) -> Result<ScoreSummary> {
        let spec = &self.model.spec;
        let params = &self.model.params;
        let predictor = Predictor::new(spec, params).map_err(|source| RuntimeError::Model {
            location: self.model_url.clone(),
            source,
        })?;
        let needs_labels = !matches!(spec, ModelSpec::KMeans { .. });
        if evaluate && needs_labels && !input.labelled {
            return Err(Mismatch::NoLabels {
                path: path.to_string(),
            }
            .into());
        }
        let io = |source| RuntimeError::Io {
            path: "the predictions".into(),
            source,
        };
        let mut summary = ScoreSummary {
            samples: input.samples() as u64,
            ignored_features: input.ignored_features,
            ..ScoreSummary::default()
        };
        let lines = input.lines;
        let model_error = |source: ModelError| line_error(path, &lines, source);
        match input.rows {
            ScoringRows::Sparse(mut rows) => {
                if matches!(spec, ModelSpec::MatrixFactorization { .. }) {
                    return Err(Mismatch::RatingsModelScoresRows {
                        path: path.to_string(),
                    }
                    .into());
                }
                if let Some(normalization) = &self.manifest.normalization {
                    normalization.apply(&mut rows);
                }
                let predictions = predictor.predict_rows(&rows).map_err(model_error)?;
                write_rows(out, spec, &predictions, self.manifest.label_map).map_err(io)?;
                if evaluate {
                    summary.metrics = Some(evaluate_batch(
                        spec,
                        params,
                        Batch::Sparse(rows),
                        path,
                        &lines,
                    )?);
                }
            }
            ScoringRows::Ratings(ratings) => {
                let ModelSpec::MatrixFactorization { .. } = spec else {
                    return Err(Mismatch::RowsModelScoresRatings {
                        path: path.to_string(),
                        model: spec.name(),
                    }
                    .into());
                };
                let ids = self.ids.as_ref().ok_or_else(|| Mismatch::NoIdMap {
                    data_url: self.data_url.to_string(),
                })?;
                writeln!(out, "user,item,rating").map_err(io)?;
                // Ratings of known users and items by model ids, for the model's evaluation;
                // the (bias-only prediction, rating) of the others.
                let mut known = RatingBatch::default();
                let mut unknown = Vec::new();
                for (user, item, rating) in ratings.iter() {
                    let (u, i) = (ids.user(user), ids.item(item));
                    let predicted = predictor.predict_rating(u, i).map_err(model_error)?;
                    writeln!(out, "{user},{item},{predicted}").map_err(io)?;
                    summary.unknown_users += u64::from(u.is_none());
                    summary.unknown_items += u64::from(i.is_none());
                    match (u, i) {
                        (Some(u), Some(i)) => known.push(u, i, rating),
                        _ => unknown.push((predicted, f64::from(rating))),
                    }
                }
                if evaluate {
                    let mut eval = spec.evaluation();
                    spec.model()
                        .evaluate(params, &Batch::Ratings(known), &mut eval)
                        .map_err(model_error)?;
                    for (predicted, actual) in unknown {
                        eval.push_rating(predicted, actual)
                            .map_err(|e| model_error(e.into()))?;
                    }
                    summary.metrics = Some(eval.finish());
                }
            }
        }
        out.flush().map_err(io)?;
        Ok(summary)
    }
}

/// Errs unless the model can have been trained on a data set of this kind.
fn check_fits(spec: &ModelSpec, kind: &DatasetKind, model_url: &str, data_url: &str) -> Result<()> {
    // A model over features reads the data set's indices as its own: another dimension
    // would shift or drop features and score wrongly without a word.
    if let (Some(model), DatasetKind::Sparse { features }) = (spec.input_features(), kind)
        && model != *features
    {
        return Err(Mismatch::FeatureCount {
            model_url: model_url.to_owned(),
            model: spec.name(),
            model_features: model as u64,
            data_url: data_url.to_owned(),
            data_features: *features as u64,
        }
        .into());
    }
    let fits = match (spec, kind) {
        (
            ModelSpec::MatrixFactorization { users, items, .. },
            DatasetKind::Ratings {
                users: u, items: i, ..
            },
        ) => users == u && items == i,
        (ModelSpec::MatrixFactorization { .. }, _) | (_, DatasetKind::Ratings { .. }) => false,
        (
            ModelSpec::LogisticRegression { .. }
            | ModelSpec::Svm { .. }
            | ModelSpec::KMeans { .. }
            | ModelSpec::Mlp { .. },
            _,
        ) => true,
    };
    if fits {
        Ok(())
    } else {
        Err(Mismatch::DatasetKind {
            model_url: model_url.to_owned(),
            model: spec.name(),
            kind: format!("{kind:?}"),
        }
        .into())
    }
}

/// Refuses a data set whose LIBSVM index base is not that of the one the model was trained on
/// (the run's, from its spec), when the two differ: feature `j` of one is feature `j ± 1` of the
/// other. The run's data set that cannot be read (moved, deleted) leaves nothing to compare.
async fn check_index_base(
    spec: &JobSpec,
    manifest: &Manifest,
    data_url: &str,
    model_url: &str,
) -> Result<()> {
    let trained_on = spec.data_url.as_str();
    if trained_on.trim_end_matches('/') == data_url.trim_end_matches('/') {
        return Ok(());
    }
    let trained = match Dataset::open(trained_on).await {
        Ok(dataset) => dataset.manifest().clone(),
        Err(e) => {
            tracing::warn!(
                "could not read the data set the model was trained on ({e}): its index base is \
                 not checked against {data_url}'s"
            );
            return Ok(());
        }
    };
    let base = |m: &Manifest| m.schema.as_ref().is_some_and(|s| s.zero_based);
    if matches!(manifest.kind, DatasetKind::Sparse { .. }) && base(&trained) != base(manifest) {
        let name = |zero: bool| if zero { "0-based" } else { "1-based" };
        return Err(Mismatch::IndexBase {
            model_url: model_url.to_owned(),
            trained_on: trained_on.to_owned(),
            trained_base: name(base(&trained)),
            data_url: data_url.to_owned(),
            data_base: name(base(manifest)),
        }
        .into());
    }
    Ok(())
}

/// A model's complaint about sample `row`, named by its file and line where it has a row.
fn line_error(path: &str, lines: &[u64], source: ModelError) -> RuntimeError {
    let row = match &source {
        ModelError::BadLabel { row, .. }
        | ModelError::BadClassLabel { row, .. }
        | ModelError::FeatureOutOfRange { row, .. }
        | ModelError::NonFiniteFeature { row, .. } => Some(*row),
        _ => None,
    };
    let location = match row.and_then(|r| lines.get(r)) {
        Some(line) => format!("{path}:{line}"),
        None => path.to_string(),
    };
    RuntimeError::Model { location, source }
}

/// The supervisor's evaluation of one batch.
fn evaluate_batch(
    spec: &ModelSpec,
    params: &[f32],
    batch: Batch,
    path: &str,
    lines: &[u64],
) -> Result<Metrics> {
    let mut eval = spec.evaluation();
    spec.model()
        .evaluate(params, &batch, &mut eval)
        .map_err(|source| line_error(path, lines, source))?;
    Ok(eval.finish())
}

/// The label the input would have written for class `class`.
fn original_label(class: u32, map: Option<LabelMap>) -> f32 {
    match (map, class) {
        (Some(map), 0) => map.negative,
        (Some(map), _) => map.positive,
        (None, c) => c as f32,
    }
}

/// Writes the header and one CSV row per prediction of a sparse model.
fn write_rows(
    out: &mut dyn Write,
    spec: &ModelSpec,
    predictions: &[Prediction],
    map: Option<LabelMap>,
) -> std::io::Result<()> {
    if let Some(header) = spec.prediction_header() {
        writeln!(out, "{header}")?;
    }
    for p in predictions {
        let label = p.class().map(|c| original_label(c, map));
        match p {
            Prediction::Logit(_) => writeln!(
                out,
                "{},{}",
                p.probabilities()[1],
                label.unwrap_or_default()
            )?,
            Prediction::Margin(m) => writeln!(out, "{m},{}", label.unwrap_or_default())?,
            Prediction::Cluster {
                cluster,
                sq_distance,
            } => writeln!(out, "{cluster},{}", sq_distance.sqrt())?,
            Prediction::Classes(_) => {
                for q in p.probabilities() {
                    write!(out, "{q},")?;
                }
                writeln!(out, "{}", label.unwrap_or_default())?
            }
            Prediction::Rating(r) => writeln!(out, "{r}")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_last_finds_the_directory() {
        assert_eq!(split_last("runs/job/model.bin"), ("runs/job", "model.bin"));
        assert_eq!(split_last("model.bin"), (".", "model.bin"));
        assert_eq!(split_last("/model.bin"), ("/", "model.bin"));
        assert_eq!(
            split_last("s3://bucket/runs/job/model.bin"),
            ("s3://bucket/runs/job", "model.bin")
        );
        assert_eq!(
            split_last("file:///tmp/model.bin"),
            ("file:///tmp", "model.bin")
        );
    }

    #[test]
    fn labels_go_back_to_the_input_values() {
        let map = Some(LabelMap {
            negative: -1.0,
            positive: 1.0,
        });
        assert_eq!(original_label(0, map), -1.0);
        assert_eq!(original_label(1, map), 1.0);
        assert_eq!(original_label(3, None), 3.0);
    }
}
