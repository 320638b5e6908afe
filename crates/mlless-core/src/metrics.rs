//! Test metrics: log loss, accuracy and AUC for binary classifiers, hinge loss, accuracy and
//! AUC for margin classifiers (SVM), log loss and accuracy for multiclass classifiers, RMSE for
//! ratings, inertia for clustering.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Named metric values, e.g. `test_logloss`; ordered so that reports are stable.
pub type Metrics = BTreeMap<String, f64>;

/// Probabilities are clamped to `[EPS, 1 - EPS]` by [`log_loss`], so a confident mistake costs
/// about 34.5 nats, not infinity.
const EPS: f64 = 1e-15;

/// Accumulates a model's predictions on test data and turns them into [`Metrics`].
///
/// Binary and margin classifiers keep every score (AUC needs the whole ranking); regressions and
/// clusterings keep only sums.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    state: State,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum State {
    Binary(Scored),
    Regression {
        squared_error: f64,
        count: u64,
    },
    Clustering {
        /// Sum of the squared distances of the points to their nearest centroid.
        inertia: f64,
        count: u64,
    },
    Multiclass {
        log_loss: f64,
        correct: u64,
        count: u64,
    },
}

/// A binary or margin classifier's predictions so far: every score, for AUC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Scored {
    /// Logits, or margins when `score` is [`Score::Margin`].
    logits: Vec<f64>,
    labels: Vec<bool>,
    /// Sum of the log losses, or of the hinge losses for margins.
    log_loss: f64,
    correct: u64,
    score: Score,
}

impl Scored {
    /// Adds one prediction: its score, its label and its loss.
    fn push(&mut self, score: f64, label: bool, loss: f64) {
        self.log_loss += loss;
        self.correct += u64::from((score > 0.0) == label);
        self.logits.push(score);
        self.labels.push(label);
    }

    /// Adds `other`'s predictions; `false` (and nothing added) if its scores are of another
    /// kind.
    fn merge(&mut self, other: &Scored) -> bool {
        if self.score != other.score {
            return false;
        }
        self.logits.extend_from_slice(&other.logits);
        self.labels.extend_from_slice(&other.labels);
        self.log_loss += other.log_loss;
        self.correct += other.correct;
        true
    }

    /// Gives `insert` the mean loss and the accuracy (when there are predictions) and the AUC
    /// (when defined).
    fn metrics(&self, insert: &mut impl FnMut(&str, f64)) {
        let n = self.labels.len();
        if n > 0 {
            let loss = match self.score {
                Score::Logit => "logloss",
                Score::Margin => "hinge",
            };
            insert(loss, self.log_loss / n as f64);
            insert("accuracy", self.correct as f64 / n as f64);
        }
        if let Some(a) = auc(&self.logits, &self.labels) {
            insert("auc", a);
        }
    }
}

/// What a binary evaluation's scores are, and so which loss it sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Score {
    /// Logits of a probabilistic classifier: log loss.
    Logit,
    /// Margins `w·x + b` of a margin classifier (SVM): hinge loss, no log loss.
    Margin,
}

/// Why an [`Evaluation`] refused a prediction or another evaluation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EvaluationError {
    /// The evaluation is for another kind of task.
    #[error("a {got} evaluation cannot take {expected} predictions")]
    Kind {
        /// The kind of predictions offered.
        expected: &'static str,
        /// The kind of the evaluation.
        got: &'static str,
    },
    /// A multiclass label is not one of the classes predicted.
    #[error("sample {sample}: label {label} is not a class id in 0..{classes}")]
    ClassLabel {
        /// The sample's position in the evaluation.
        sample: usize,
        /// The offending label.
        label: u32,
        /// The number of classes predicted.
        classes: u32,
    },
}

/// What a model's predictions are, and so how it is evaluated and which metrics it reports
/// ([`ModelSpec::task`]). A new model of an existing kind needs nothing here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Task {
    /// A probabilistic binary classifier (logits): [`Evaluation::binary`].
    Binary,
    /// A margin classifier (margins `w·x + b`): [`Evaluation::margin_classifier`].
    Margin,
    /// A regression (ratings): [`Evaluation::regression`].
    Regression,
    /// A probabilistic multiclass classifier (one logit per class): [`Evaluation::multiclass`].
    Multiclass,
    /// A clustering (nearest centroid): [`Evaluation::clustering`].
    Clustering,
}

impl Evaluation {
    /// An empty evaluation of `task`.
    pub fn for_task(task: Task) -> Self {
        match task {
            Task::Binary => Self::binary(),
            Task::Regression => Self::regression(),
            Task::Margin => Self::margin_classifier(),
            Task::Clustering => Self::clustering(),
            Task::Multiclass => Self::multiclass(),
        }
    }

    /// An empty evaluation of a binary classifier: `test_logloss`, `test_accuracy`,
    /// `test_auc`, `test_samples`.
    pub fn binary() -> Self {
        Self::scored(Score::Logit)
    }

    /// An empty evaluation of a margin classifier (linear SVM), whose scores are margins
    /// `w·x + b` rather than logits: `test_hinge`, `test_accuracy`, `test_auc`, `test_samples`
    /// (a margin is no probability, so there is no log loss).
    pub fn margin_classifier() -> Self {
        Self::scored(Score::Margin)
    }

    fn scored(score: Score) -> Self {
        Self {
            state: State::Binary(Scored {
                logits: Vec::new(),
                labels: Vec::new(),
                log_loss: 0.0,
                correct: 0,
                score,
            }),
        }
    }

    /// An empty evaluation of a clustering: `test_inertia` (the sum of the squared distances of
    /// the points to their nearest centroid), `test_mean_sq_distance` (inertia per point),
    /// `test_samples`.
    pub fn clustering() -> Self {
        Self {
            state: State::Clustering {
                inertia: 0.0,
                count: 0,
            },
        }
    }

    /// An empty evaluation of a regression: `test_rmse`, `test_samples`.
    pub fn regression() -> Self {
        Self {
            state: State::Regression {
                squared_error: 0.0,
                count: 0,
            },
        }
    }

    /// An empty evaluation of a multiclass classifier: `test_logloss` (mean cross-entropy),
    /// `test_accuracy`, `test_samples`.
    pub fn multiclass() -> Self {
        Self {
            state: State::Multiclass {
                log_loss: 0.0,
                correct: 0,
                count: 0,
            },
        }
    }

    /// `"binary"`, `"margin"`, `"regression"`, `"multiclass"` or `"clustering"`.
    pub fn task(&self) -> &'static str {
        match &self.state {
            State::Binary(scored) => match scored.score {
                Score::Logit => "binary",
                Score::Margin => "margin",
            },
            State::Regression { .. } => "regression",
            State::Clustering { .. } => "clustering",
            State::Multiclass { .. } => "multiclass",
        }
    }

    /// Number of predictions so far.
    pub fn samples(&self) -> u64 {
        match &self.state {
            State::Binary(scored) => scored.labels.len() as u64,
            State::Regression { count, .. }
            | State::Clustering { count, .. }
            | State::Multiclass { count, .. } => *count,
        }
    }

    /// `Ok` when the evaluation's [`task`](Self::task) is `expected`.
    pub(crate) fn check_task(&self, expected: &'static str) -> Result<(), EvaluationError> {
        let got = self.task();
        if got == expected {
            Ok(())
        } else {
            Err(EvaluationError::Kind { expected, got })
        }
    }

    pub(crate) fn check_binary(&self) -> Result<(), EvaluationError> {
        self.check_task("binary")
    }

    pub(crate) fn check_regression(&self) -> Result<(), EvaluationError> {
        self.check_task("regression")
    }

    pub(crate) fn check_multiclass(&self) -> Result<(), EvaluationError> {
        self.check_task("multiclass")
    }

    /// Adds a binary prediction given as a logit `z` (probability `σ(z)`); the sample counts as
    /// predicted positive when `σ(z) > 0.5`, i.e. `z > 0`.
    pub fn push_logit(&mut self, logit: f64, label: bool) -> Result<(), EvaluationError> {
        self.check_binary()?;
        self.push_score(
            logit,
            label,
            log_loss_from_logit(logit, f64::from(u8::from(label))),
        );
        Ok(())
    }

    /// Adds a margin-classifier prediction given as a margin `m = w·x + b`; the sample counts as
    /// predicted positive when `m > 0`, and its hinge loss is `max(0, 1 - y m)` with `y = ±1`.
    pub fn push_margin(&mut self, margin: f64, label: bool) -> Result<(), EvaluationError> {
        self.check_task("margin")?;
        let y = if label { 1.0 } else { -1.0 };
        self.push_score(margin, label, (1.0 - y * margin).max(0.0));
        Ok(())
    }

    fn push_score(&mut self, score: f64, label: bool, loss: f64) {
        if let State::Binary(scored) = &mut self.state {
            scored.push(score, label, loss);
        }
    }

    /// Adds a clustering point at squared distance `sq_distance` from its nearest centroid.
    pub fn push_sq_distance(&mut self, sq_distance: f64) -> Result<(), EvaluationError> {
        self.check_task("clustering")?;
        if let State::Clustering { inertia, count } = &mut self.state {
            *inertia += sq_distance;
            *count += 1;
        }
        Ok(())
    }

    /// Adds a regression prediction.
    pub fn push_rating(&mut self, predicted: f64, actual: f64) -> Result<(), EvaluationError> {
        self.check_regression()?;
        if let State::Regression {
            squared_error,
            count,
        } = &mut self.state
        {
            *squared_error += (predicted - actual).powi(2);
            *count += 1;
        }
        Ok(())
    }

    /// Adds a multiclass prediction given as one logit per class (probabilities
    /// `softmax(logits)`); the predicted class is the first one with the largest logit.
    ///
    /// Errs when `label` is not below `logits.len()`.
    pub fn push_class_logits(&mut self, logits: &[f32], label: u32) -> Result<(), EvaluationError> {
        self.check_multiclass()?;
        let Some(&target) = logits.get(label as usize) else {
            return Err(EvaluationError::ClassLabel {
                sample: self.samples() as usize,
                label,
                classes: logits.len() as u32,
            });
        };
        if let State::Multiclass {
            log_loss,
            correct,
            count,
        } = &mut self.state
        {
            let (mut best, mut max) = (0, f32::NEG_INFINITY);
            for (k, &z) in logits.iter().enumerate() {
                if z > max {
                    (best, max) = (k, z);
                }
            }
            let max = f64::from(max);
            let sum: f64 = logits.iter().map(|&z| (f64::from(z) - max).exp()).sum();
            *log_loss += max + sum.ln() - f64::from(target);
            *correct += u64::from(best == label as usize);
            *count += 1;
        }
        Ok(())
    }

    /// Adds the predictions of `other` (e.g. another shard of the test set).
    pub fn merge(&mut self, other: &Evaluation) -> Result<(), EvaluationError> {
        let mismatch = EvaluationError::Kind {
            expected: other.task(),
            got: self.task(),
        };
        match (&mut self.state, &other.state) {
            (State::Binary(scored), State::Binary(more)) => {
                if scored.merge(more) {
                    Ok(())
                } else {
                    Err(mismatch)
                }
            }
            (
                State::Regression {
                    squared_error: sum,
                    count,
                },
                State::Regression {
                    squared_error: s2,
                    count: c2,
                },
            )
            | (
                State::Clustering {
                    inertia: sum,
                    count,
                },
                State::Clustering {
                    inertia: s2,
                    count: c2,
                },
            ) => {
                *sum += s2;
                *count += c2;
                Ok(())
            }
            (
                State::Multiclass {
                    log_loss,
                    correct,
                    count,
                },
                State::Multiclass {
                    log_loss: ll2,
                    correct: k2,
                    count: c2,
                },
            ) => {
                *log_loss += ll2;
                *correct += k2;
                *count += c2;
                Ok(())
            }
            _ => Err(mismatch),
        }
    }

    /// The metrics so far, named `test_…`. `test_samples` is always present; a metric that is
    /// undefined (no sample, or AUC with a single class) is left out rather than reported as
    /// NaN.
    pub fn finish(&self) -> Metrics {
        self.finish_as("test_")
    }

    /// The metrics so far, each name behind `prefix` (`""` for the bare names of
    /// [`validation`](crate::validation), `"test_"` for [`finish`](Self::finish)).
    pub fn finish_as(&self, prefix: &str) -> Metrics {
        let mut m = Metrics::new();
        let n = self.samples();
        let mut insert = |name: &str, value: f64| {
            m.insert(format!("{prefix}{name}"), value);
        };
        insert("samples", n as f64);
        match &self.state {
            State::Binary(scored) => scored.metrics(&mut insert),
            State::Regression {
                squared_error,
                count,
            } => {
                if *count > 0 {
                    insert("rmse", (squared_error / *count as f64).sqrt());
                }
            }
            State::Clustering { inertia, count } => {
                insert("inertia", *inertia);
                if *count > 0 {
                    insert("mean_sq_distance", inertia / *count as f64);
                }
            }
            State::Multiclass {
                log_loss, correct, ..
            } => {
                if n > 0 {
                    insert("logloss", log_loss / n as f64);
                    insert("accuracy", *correct as f64 / n as f64);
                }
            }
        }
        m
    }
}

/// The log loss (cross-entropy) of probability `p` for label `y` (0 or 1, or a soft label in
/// between); `p` is clamped to `[1e-15, 1 - 1e-15]`.
pub fn log_loss(p: f64, y: f64) -> f64 {
    let p = p.clamp(EPS, 1.0 - EPS);
    -(y * p.ln() + (1.0 - y) * (1.0 - p).ln())
}

/// The log loss of logit `z` (probability `σ(z)`) for label `y`, computed stably as
/// `softplus(z) - y z`: exact for any logit, no clamping needed.
pub fn log_loss_from_logit(z: f64, y: f64) -> f64 {
    z.max(0.0) - y * z + (-z.abs()).exp().ln_1p()
}

/// The area under the ROC curve of `scores` for binary `labels`: the probability that a random
/// positive scores above a random negative, ties counting one half.
///
/// Exact, O(n log n): the Mann–Whitney statistic with tied scores given their average rank.
/// `None` when the lengths differ or when either class is absent (the AUC is undefined).
pub fn auc(scores: &[f64], labels: &[bool]) -> Option<f64> {
    if scores.len() != labels.len() {
        return None;
    }
    let positives = labels.iter().filter(|&&y| y).count();
    let negatives = labels.len() - positives;
    if positives == 0 || negatives == 0 {
        return None;
    }
    // `+ 0.0` turns -0.0 into 0.0, which total_cmp would otherwise order apart.
    let mut pairs: Vec<(f64, bool)> = scores
        .iter()
        .map(|&s| s + 0.0)
        .zip(labels.iter().copied())
        .collect();
    pairs.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let mut positive_rank_sum = 0.0_f64;
    let mut start = 0;
    while start < pairs.len() {
        let mut end = start + 1;
        while end < pairs.len() && pairs[end].0.total_cmp(&pairs[start].0).is_eq() {
            end += 1;
        }
        // Ranks start+1 ..= end share their average.
        let average_rank = (start + 1 + end) as f64 / 2.0;
        let group_positives = pairs[start..end].iter().filter(|p| p.1).count();
        positive_rank_sum += average_rank * group_positives as f64;
        start = end;
    }
    let (p, n) = (positives as f64, negatives as f64);
    Some((positive_rank_sum - p * (p + 1.0) / 2.0) / (p * n))
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    fn brute_force_auc(scores: &[f64], labels: &[bool]) -> f64 {
        let (mut wins, mut pairs) = (0.0, 0.0);
        for (i, &si) in scores.iter().enumerate() {
            for (j, &sj) in scores.iter().enumerate() {
                if labels[i] && !labels[j] {
                    pairs += 1.0;
                    if si > sj {
                        wins += 1.0;
                    } else if si == sj {
                        wins += 0.5;
                    }
                }
            }
        }
        wins / pairs
    }

    #[test]
    fn auc_matches_pairwise_count_with_ties() {
        let mut rng = StdRng::seed_from_u64(2);
        for trial in 0..50 {
            let n = rng.random_range(2..300);
            // Few distinct scores: many ties, within and across classes; include -0.0 and 0.0.
            let levels = if trial % 2 == 0 { 4 } else { 1000 };
            let scores: Vec<f64> = (0..n)
                .map(|_| match rng.random_range(0..levels) {
                    0 => -0.0,
                    1 => 0.0,
                    l => f64::from(l) * 0.5 - 1.0,
                })
                .collect();
            let labels: Vec<bool> = scores
                .iter()
                .map(|&s| rng.random_bool(if s > 0.0 { 0.7 } else { 0.35 }))
                .collect();
            let want = brute_force_auc(&scores, &labels);
            match auc(&scores, &labels) {
                Some(got) => assert!((got - want).abs() < 1e-12, "trial {trial}: {got} vs {want}"),
                None => assert!(want.is_nan(), "trial {trial}"),
            }
        }
    }

    #[test]
    fn auc_edge_cases() {
        assert_eq!(auc(&[1.0, 2.0], &[false, true]), Some(1.0));
        assert_eq!(auc(&[1.0, 2.0], &[true, false]), Some(0.0));
        assert_eq!(auc(&[3.0, 3.0, 3.0], &[true, false, true]), Some(0.5));
        assert_eq!(auc(&[1.0, 2.0], &[true, true]), None);
        assert_eq!(auc(&[1.0], &[true, false]), None);
    }

    #[test]
    fn log_loss_forms_agree() {
        // Where 1 - σ(z) is still accurate in f64; beyond, only the logit form is.
        for &z in &[-10.0, -2.0, -1e-3, 0.0, 0.5, 4.0, 10.0] {
            let p = 1.0 / (1.0 + f64::exp(-z));
            for y in [0.0, 1.0] {
                let (a, b) = (log_loss(p, y), log_loss_from_logit(z, y));
                assert!((a - b).abs() < 1e-10 * (1.0 + b), "z={z} y={y}: {a} vs {b}");
            }
        }
        assert!((log_loss(0.5, 1.0) - std::f64::consts::LN_2).abs() < 1e-15);
        assert!(log_loss(0.0, 1.0).is_finite());
        assert!((log_loss_from_logit(-800.0, 1.0) - 800.0).abs() < 1e-9);
    }

    #[test]
    fn binary_metrics() {
        let mut e = Evaluation::binary();
        e.push_logit(2.0, true).unwrap();
        e.push_logit(-1.0, false).unwrap();
        e.push_logit(0.5, false).unwrap();
        e.push_logit(0.0, true).unwrap(); // p = 0.5 is predicted negative
        let m = e.finish();
        assert_eq!(m["test_samples"], 4.0);
        assert_eq!(m["test_accuracy"], 0.5);
        let ll = [(2.0, 1.0), (-1.0, 0.0), (0.5, 0.0), (0.0, 1.0)]
            .iter()
            .map(|&(z, y)| log_loss_from_logit(z, y))
            .sum::<f64>()
            / 4.0;
        assert!((m["test_logloss"] - ll).abs() < 1e-15);
        assert_eq!(m["test_auc"], 0.75);
        assert!(e.push_rating(1.0, 1.0).is_err());
        assert_eq!(e.samples(), 4);
    }

    #[test]
    fn regression_metrics_and_merge() {
        let mut a = Evaluation::regression();
        a.push_rating(3.0, 4.0).unwrap();
        let mut b = Evaluation::regression();
        b.push_rating(2.0, 5.0).unwrap();
        a.merge(&b).unwrap();
        let m = a.finish();
        assert_eq!(m["test_samples"], 2.0);
        assert!((m["test_rmse"] - 5.0_f64.sqrt()).abs() < 1e-15);
        assert!(a.merge(&Evaluation::binary()).is_err());
        assert!(a.push_logit(1.0, true).is_err());

        let empty = Evaluation::binary().finish();
        assert_eq!(empty.len(), 1);
        assert_eq!(empty["test_samples"], 0.0);
    }

    #[test]
    fn margin_metrics_have_hinge_not_log_loss() {
        let mut e = Evaluation::margin_classifier();
        e.push_margin(2.0, true).unwrap(); // hinge 0, correct
        e.push_margin(0.5, false).unwrap(); // hinge 1.5, wrong
        let mut other = Evaluation::margin_classifier();
        other.push_margin(-0.25, false).unwrap(); // hinge 0.75, correct
        other.push_margin(0.0, true).unwrap(); // hinge 1, wrong (0 is negative)
        e.merge(&other).unwrap();
        let m = e.finish();
        assert_eq!(m["test_samples"], 4.0);
        assert_eq!(m["test_hinge"], 3.25 / 4.0);
        assert_eq!(m["test_accuracy"], 0.5);
        assert_eq!(m["test_auc"], 0.75);
        assert!(!m.contains_key("test_logloss"));
        // Logits and margins do not mix.
        assert!(e.push_logit(1.0, true).is_err());
        assert!(Evaluation::binary().push_margin(1.0, true).is_err());
        assert!(e.merge(&Evaluation::binary()).is_err());
        assert_eq!(e.samples(), 4);
    }

    #[test]
    fn clustering_metrics_and_merge() {
        let mut a = Evaluation::clustering();
        a.push_sq_distance(1.0).unwrap();
        a.push_sq_distance(2.0).unwrap();
        let mut b = Evaluation::clustering();
        b.push_sq_distance(3.0).unwrap();
        a.merge(&b).unwrap();
        let m = a.finish();
        assert_eq!(m["test_samples"], 3.0);
        assert_eq!(m["test_inertia"], 6.0);
        assert_eq!(m["test_mean_sq_distance"], 2.0);
        assert!(a.merge(&Evaluation::regression()).is_err());
        assert!(a.push_rating(1.0, 1.0).is_err());
        assert!(Evaluation::regression().push_sq_distance(1.0).is_err());
        let empty = Evaluation::clustering().finish();
        assert_eq!(empty["test_inertia"], 0.0);
        assert!(!empty.contains_key("test_mean_sq_distance"));
    }

    #[test]
    fn multiclass_metrics_and_merge() {
        let mut a = Evaluation::multiclass();
        a.push_class_logits(&[2.0, 0.0, -1.0], 0).unwrap(); // right
        a.push_class_logits(&[1.0, 1.0, 0.0], 1).unwrap(); // a tie goes to class 0: wrong
        let mut b = Evaluation::multiclass();
        b.push_class_logits(&[1000.0, -1000.0, 0.0], 1).unwrap(); // confident and wrong
        a.merge(&b).unwrap();
        let m = a.finish();
        assert_eq!(m["test_samples"], 3.0);
        assert!((m["test_accuracy"] - 1.0 / 3.0).abs() < 1e-15);
        let ce = |z: &[f64], y: usize| z.iter().map(|v| v.exp()).sum::<f64>().ln() - z[y];
        let want = (ce(&[2.0, 0.0, -1.0], 0) + ce(&[1.0, 1.0, 0.0], 1) + 2000.0) / 3.0;
        assert!((m["test_logloss"] - want).abs() < 1e-12, "{m:?}");
        assert!(!m.contains_key("test_auc"));
        // Errors leave the evaluation unchanged.
        assert!(matches!(
            a.push_class_logits(&[0.0, 0.0], 2),
            Err(EvaluationError::ClassLabel { classes: 2, .. })
        ));
        assert!(a.push_logit(0.0, true).is_err());
        assert!(a.push_rating(0.0, 0.0).is_err());
        assert!(a.merge(&Evaluation::binary()).is_err());
        assert!(
            Evaluation::binary()
                .push_class_logits(&[0.0, 1.0], 0)
                .is_err()
        );
        assert_eq!(a.samples(), 3);
        assert_eq!(Evaluation::multiclass().finish().len(), 1);
    }
}
