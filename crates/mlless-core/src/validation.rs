//! Choosing and stopping on a validation curve: which metric a model is judged by, targets such
//! as `rmse<=0.93`, and the early-stopping rule that keeps the best evaluation.
//!
//! Metric names here are those of [`Evaluation::finish_as`](crate::Evaluation::finish_as)
//! without a prefix: `logloss`, `auc`, `accuracy`, `rmse`, `hinge`, `mean_sq_distance`, `inertia`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::metrics::{Metrics, Task};
use crate::model::ModelSpec;

/// Whether a metric is better when it is lower (losses, errors) or higher (accuracy, AUC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Direction {
    /// Lower is better.
    Lower,
    /// Higher is better.
    Higher,
}

impl Direction {
    /// The direction of the metric `name`; `None` for a name no model reports.
    pub fn of(name: &str) -> Option<Direction> {
        match name {
            "logloss" | "rmse" | "hinge" | "mean_sq_distance" | "inertia" => Some(Direction::Lower),
            "accuracy" | "auc" => Some(Direction::Higher),
            _ => None,
        }
    }

    /// Whether `a` is strictly better than `b` by more than the relative margin `min_delta`.
    pub fn improves(self, a: f64, b: f64, min_delta: f64) -> bool {
        let margin = min_delta * b.abs();
        match self {
            Direction::Lower => a < b - margin,
            Direction::Higher => a > b + margin,
        }
    }
}

/// The metric a model is judged by on the validation set: the one early stopping watches and
/// the best model is kept by (that of its [`Task`]).
pub fn primary_metric(spec: &ModelSpec) -> &'static str {
    match spec.task() {
        Task::Binary | Task::Multiclass => "logloss",
        Task::Regression => "rmse",
        Task::Margin => "hinge",
        Task::Clustering => "mean_sq_distance",
    }
}

/// The metrics a model's evaluation reports, by name (those of its [`Task`]).
pub fn metrics_of(spec: &ModelSpec) -> &'static [&'static str] {
    match spec.task() {
        Task::Binary => &["logloss", "accuracy", "auc"],
        Task::Multiclass => &["logloss", "accuracy"],
        Task::Regression => &["rmse"],
        Task::Margin => &["hinge", "accuracy", "auc"],
        Task::Clustering => &["mean_sq_distance", "inertia"],
    }
}

/// A target a metric must reach: `rmse<=0.93`, `auc>=0.8`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricTarget {
    /// The metric (unprefixed: `rmse`, `logloss`, …).
    pub metric: String,
    /// Whether the metric must fall to the value (`<=`) or rise to it (`>=`).
    pub direction: Direction,
    /// The value to reach.
    pub value: f64,
}

/// Why a target does not parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TargetParseError {
    /// No `<=` or `>=` in it.
    #[error("a target is METRIC<=VALUE or METRIC>=VALUE (e.g. rmse<=0.93), not '{0}'")]
    Shape(String),
    /// A metric no model reports.
    #[error(
        "unknown metric '{0}' (one of logloss, accuracy, auc, rmse, hinge, mean_sq_distance, \
         inertia)"
    )]
    Metric(String),
    /// The comparison goes the wrong way for the metric (e.g. `rmse>=0.9` is met at once).
    #[error("'{metric}' is better when {better}: write {metric}{op}{value}")]
    Direction {
        /// The metric.
        metric: String,
        /// "lower" or "higher".
        better: &'static str,
        /// The operator that fits.
        op: &'static str,
        /// The value given.
        value: String,
    },
    /// The value is not a finite number.
    #[error("the value of target '{0}' is not a finite number")]
    Value(String),
}

impl FromStr for MetricTarget {
    type Err = TargetParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (metric, op, value) = if let Some((m, v)) = s.split_once("<=") {
            (m, Direction::Lower, v)
        } else if let Some((m, v)) = s.split_once(">=") {
            (m, Direction::Higher, v)
        } else {
            return Err(TargetParseError::Shape(s.to_string()));
        };
        let metric = metric.trim();
        let metric = metric.strip_prefix("validation_").unwrap_or(metric);
        let Some(better) = Direction::of(metric) else {
            return Err(TargetParseError::Metric(metric.to_string()));
        };
        if better != op {
            let (better, op) = match better {
                Direction::Lower => ("lower", "<="),
                Direction::Higher => ("higher", ">="),
            };
            return Err(TargetParseError::Direction {
                metric: metric.to_string(),
                better,
                op,
                value: value.trim().to_string(),
            });
        }
        let value: f64 = value
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| TargetParseError::Value(s.to_string()))?;
        Ok(MetricTarget {
            metric: metric.to_string(),
            direction: op,
            value,
        })
    }
}

impl fmt::Display for MetricTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.direction {
            Direction::Lower => "<=",
            Direction::Higher => ">=",
        };
        write!(f, "{}{op}{}", self.metric, self.value)
    }
}

impl MetricTarget {
    /// Whether `metrics` (unprefixed names) reach the target.
    pub fn is_met(&self, metrics: &Metrics) -> bool {
        metrics
            .get(&self.metric)
            .is_some_and(|&v| match self.direction {
                Direction::Lower => v <= self.value,
                Direction::Higher => v >= self.value,
            })
    }
}

/// Early stopping on a validation curve: remembers the best evaluation of one metric and
/// counts the evaluations since it.
///
/// An evaluation improves on the best when it is better by more than a relative
/// [`MIN_RELATIVE_IMPROVEMENT`], so that a curve creeping along a plateau by rounding errors
/// stops too. With a patience of `n`, training stops after `n` evaluations in a row that did
/// not improve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EarlyStopping {
    metric: String,
    direction: Direction,
    patience: Option<u32>,
    best: Option<(usize, f64)>,
    since_best: u32,
}

/// The relative improvement an evaluation must make on the best to count as better.
pub const MIN_RELATIVE_IMPROVEMENT: f64 = 1e-4;

/// What one evaluation means for training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The evaluation is the best so far (its model is the one to keep).
    pub best: bool,
    /// The patience has run out: stop.
    pub stop: bool,
}

impl EarlyStopping {
    /// Watches `metric` (unprefixed); stops after `patience` evaluations without improvement
    /// (`None`: never stops, only keeps the best). Errors on a metric no model reports.
    pub fn new(metric: &str, patience: Option<u32>) -> Result<Self, TargetParseError> {
        let direction =
            Direction::of(metric).ok_or_else(|| TargetParseError::Metric(metric.to_string()))?;
        Ok(Self {
            metric: metric.to_string(),
            direction,
            patience,
            best: None,
            since_best: 0,
        })
    }

    /// The metric watched.
    pub fn metric(&self) -> &str {
        &self.metric
    }

    /// The index and value of the best evaluation so far.
    pub fn best(&self) -> Option<(usize, f64)> {
        self.best
    }

    /// Takes evaluation number `index` with `metrics`; an evaluation without a finite value of
    /// the metric is never the best and counts against the patience.
    pub fn observe(&mut self, index: usize, metrics: &Metrics) -> Verdict {
        let value = metrics.get(&self.metric).copied().filter(|v| v.is_finite());
        let best = match (value, self.best) {
            (Some(_), None) => true,
            (Some(v), Some((_, b))) => self.direction.improves(v, b, MIN_RELATIVE_IMPROVEMENT),
            (None, _) => false,
        };
        if best {
            self.best = value.map(|v| (index, v));
            self.since_best = 0;
        } else {
            self.since_best += 1;
        }
        Verdict {
            best,
            stop: self.patience.is_some_and(|p| self.since_best >= p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(name: &str, v: f64) -> Metrics {
        [(name.to_string(), v)].into_iter().collect()
    }

    #[test]
    fn targets_parse_and_refuse_what_would_be_met_at_once() {
        let t: MetricTarget = "rmse<=0.93".parse().unwrap();
        assert_eq!(t.metric, "rmse");
        assert_eq!(t.direction, Direction::Lower);
        assert_eq!(t.value, 0.93);
        assert_eq!(t.to_string(), "rmse<=0.93");
        assert!(t.is_met(&metrics("rmse", 0.93)));
        assert!(!t.is_met(&metrics("rmse", 0.931)));
        assert!(!t.is_met(&metrics("logloss", 0.1)));
        let t: MetricTarget = " validation_auc >= 0.8 ".parse().unwrap();
        assert_eq!((t.metric.as_str(), t.direction), ("auc", Direction::Higher));
        assert!(t.is_met(&metrics("auc", 0.81)));
        for bad in [
            "rmse<0.9",
            "rmse",
            "loss<=1",
            "rmse>=0.9",
            "auc<=0.5",
            "rmse<=nan",
        ] {
            assert!(bad.parse::<MetricTarget>().is_err(), "{bad}");
        }
        let e = "rmse>=0.9".parse::<MetricTarget>().unwrap_err();
        assert!(e.to_string().contains("rmse<=0.9"), "{e}");
    }

    #[test]
    fn early_stopping_keeps_the_best_and_stops_after_the_patience() {
        let mut e = EarlyStopping::new("rmse", Some(2)).unwrap();
        let curve = [1.0, 0.9, 0.85, 0.86, 0.84, 0.87, 0.88, 0.83];
        let verdicts: Vec<Verdict> = curve
            .iter()
            .enumerate()
            .map(|(i, &v)| e.observe(i, &metrics("rmse", v)))
            .collect();
        let best: Vec<bool> = verdicts.iter().map(|v| v.best).collect();
        assert_eq!(best, [true, true, true, false, true, false, false, true]);
        let stop: Vec<bool> = verdicts.iter().map(|v| v.stop).collect();
        assert_eq!(
            stop,
            [false, false, false, false, false, false, true, false]
        );
        assert_eq!(e.best(), Some((7, 0.83)));
    }

    #[test]
    fn higher_is_better_for_auc_and_nan_never_wins() {
        let mut e = EarlyStopping::new("auc", Some(1)).unwrap();
        assert!(e.observe(0, &metrics("auc", 0.7)).best);
        let v = e.observe(1, &metrics("auc", f64::NAN));
        assert!(!v.best && v.stop);
        assert!(e.observe(2, &metrics("auc", 0.71)).best);
        // A change within the relative margin is no improvement.
        let v = e.observe(3, &metrics("auc", 0.71 + 1e-6));
        assert!(!v.best);
        assert_eq!(e.best(), Some((2, 0.71)));
        let mut never = EarlyStopping::new("logloss", None).unwrap();
        for i in 0..100 {
            assert!(!never.observe(i, &metrics("logloss", 1.0)).stop);
        }
        assert!(EarlyStopping::new("loss", None).is_err());
    }
}
