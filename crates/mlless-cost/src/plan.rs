//! The maths of `mlless plan`: the steps a run needs to reach a validation target, estimated
//! from a short run's validation curve, and each profiled configuration's time and bill to that
//! target, from which the cheapest under a deadline or the fastest within a budget is chosen.
//!
//! # The model
//!
//! **Steps to the target.** A run holds its global batch whatever its fleet size (the
//! [`BatchPlan`](mlless_core::BatchPlan)), so memory and channel do not change the steps to a
//! validation target, and with a linear optimiser (SGD, momentum) neither does P; with Adam
//! (PMF's default) each worker normalises its own gradient and the mean of P such steps is
//! shorter, so the steps are estimated for each fleet size from its own short run. A target
//! the short run reached gives them
//! exactly (the first evaluation that met it). Otherwise the curve of the primary metric
//! (for a metric that must rise, `1 − metric`) is fitted by the scale-in tuner's reference
//! curve `y(t) = 1 / (θ0·t^θ2 + θ1) + θ3` ([`ReferenceCurve`]) and solved for the target:
//! `t* = ((1 / (y* − θ3) − θ1) / θ0)^(1/θ2)`, rounded up to the evaluations (a run stops at
//! the first evaluation that meets its target). A target at or beyond the asymptote `θ3` is
//! unreachable; one further from the profile's best than the profile came from its first
//! evaluation ([`MAX_EXTRAPOLATION`]) is not shown reachable (a curve that has not bent yet
//! does not say where it levels off, and the fit's asymptote would be a guess). The uncertainty is the spread of `t*` over fits on the first and on the last
//! two thirds of the points ([`StepsEstimate::low`], [`StepsEstimate::high`]).
//!
//! **Time and bill of a configuration.** Each configuration (P, channel) is profiled by a
//! short run: its start-up, its first `W` steps (the warm-up: the first reads, and the first
//! evaluation, which loads the validation set: 150–450 ms at once on a small data set), its
//! mean step after them, its teardown, and its requests per step counted (the polls of a
//! collect included, which the estimate of [`ObjectRequests::estimate`] leaves out). For
//! `steps ≥ W` steps:
//!
//! ```text
//! time   = startup_s + warmup_s + (steps − W) · step_ms / 1000 + teardown_s
//! bill   = (P + the supervisor) functions of `memory_mb` for `time`, their requests,
//!          the channel's servers for `time` (PriceTable::for_channel) and steps × the
//!          requests per step
//! ```
//!
//! Memory changes only the bill: a function's speed is taken not to depend on it (true of the
//! local invoker, whose processes share this machine's CPUs; on Lambda, where the CPU share
//! grows with memory, it would need a profile at every size). The sizes offered are the
//! standard ones that hold the profile's peak resident memory with [`MEMORY_HEADROOM`].

use mlless_core::{Direction, MetricTarget, ReferenceCurve};
use serde::{Deserialize, Serialize};

use crate::{ChannelKind, ObjectRequests, PriceTable, Usage};

/// The memory sizes a plan offers, MB.
pub const MEMORY_SIZES_MB: [u32; 5] = [128, 256, 512, 1024, 2048];

/// How much more than the profile's peak resident memory a function is given.
pub const MEMORY_HEADROOM: f64 = 1.5;

/// How much further than the profile came (from its first evaluation to its best) a fit may
/// extrapolate to the target: a curve that has not bent yet says nothing of where it levels off.
pub const MAX_EXTRAPOLATION: f64 = 1.0;

/// The fewest evaluations a curve fit takes (the reference curve's minimum).
pub const MIN_EVALUATIONS: usize = 6;

/// Why a run cannot be planned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// The data set has no validation split to measure the target on.
    #[error(
        "the data set has no validation split, so no validation target can be planned for: \
         prepare it again with --validation-fraction (e.g. 0.1)"
    )]
    NoValidation,
    /// The target's metric is not one the model reports.
    #[error("the model does not report '{metric}' on the validation set (it reports: {reported})")]
    UnknownMetric {
        /// The target's metric.
        metric: String,
        /// The metrics the profile's evaluations have.
        reported: String,
    },
    /// Too few evaluations to fit the curve.
    #[error(
        "the profile evaluated the validation set {got} times, and fitting its curve needs at \
         least {needed}: profile longer (--profile-epochs)"
    )]
    TooFewEvaluations {
        /// Evaluations made.
        got: usize,
        /// Evaluations needed.
        needed: usize,
    },
    /// The fitted curve levels off short of the target.
    #[error(
        "target {target} looks unreachable: the profile's validation curve levels off at \
         {asymptote:.4} (best evaluated {best:.4})"
    )]
    Unreachable {
        /// The target.
        target: String,
        /// Where the fitted curve levels off, in the metric's units.
        asymptote: f64,
        /// The best value the profile evaluated.
        best: f64,
    },
    /// The target is further from the profile's best than the profile came.
    #[error(
        "target {target} is not shown reachable: the profile came from {first:.4} to \
         {best:.4}, and the target is further on than that (a fit would guess where the curve \
         levels off): profile longer (--profile-epochs) or aim nearer"
    )]
    NotShownReachable {
        /// The target.
        target: String,
        /// The profile's first evaluation.
        first: f64,
        /// The best value the profile evaluated.
        best: f64,
    },
    /// The fitted curve reaches the target only after more steps than allowed.
    #[error(
        "target {target} is reached only after about {steps} steps by the fitted curve, beyond \
         the {max_steps} steps (--max-epochs) a planned run may take"
    )]
    BeyondLimit {
        /// The target.
        target: String,
        /// The steps the fit predicts.
        steps: f64,
        /// The most steps allowed.
        max_steps: u64,
    },
    /// Nothing was profiled.
    #[error("no configuration was profiled")]
    NoCandidates,
    /// The deadline is shorter than a run takes before its first step and after its last.
    #[error(
        "a deadline of {deadline_s} s is below the start-up time of a run: the quickest \
         profiled configuration takes {startup_s:.2} s to start and finish without a step"
    )]
    DeadlineBelowStartup {
        /// The deadline, seconds.
        deadline_s: f64,
        /// The shortest start-up and teardown, seconds.
        startup_s: f64,
    },
    /// No configuration reaches the target in time.
    #[error(
        "no configuration reaches the target within {deadline_s} s: the fastest ({fastest}) \
         is predicted to take {time_s:.1} s"
    )]
    DeadlineTooShort {
        /// The deadline, seconds.
        deadline_s: f64,
        /// The fastest configuration.
        fastest: String,
        /// Its predicted time, seconds.
        time_s: f64,
    },
    /// No configuration reaches the target within the budget.
    #[error(
        "no configuration reaches the target within ${budget_usd}: the cheapest ({cheapest}) \
         is predicted to cost ${cost_usd:.6}"
    )]
    BudgetTooSmall {
        /// The budget, dollars.
        budget_usd: f64,
        /// The cheapest configuration.
        cheapest: String,
        /// Its predicted cost, dollars.
        cost_usd: f64,
    },
}

/// The steps a run needs to reach its target ([module documentation](self)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepsEstimate {
    /// Steps to the first evaluation predicted to meet the target.
    pub steps: u64,
    /// The fewest steps the fits on parts of the curve predict (= `steps` when the profile
    /// reached the target).
    pub low: u64,
    /// The most steps the fits on parts of the curve predict (`None`: a part's fit never
    /// reaches the target).
    pub high: Option<u64>,
    /// Whether the profile itself reached the target (the steps are then measured).
    pub reached_in_profile: bool,
    /// Where the fitted curve levels off, in the metric's units (`None` when not fitted).
    pub asymptote: Option<f64>,
}

impl StepsEstimate {
    /// The estimate for a run that stops `lag` steps after the evaluation that meets its
    /// target (the supervisor evaluates while the workers step on, and the stop reaches them
    /// with their next exchange).
    pub fn with_stop_lag(self, lag: u64) -> Self {
        Self {
            steps: self.steps + lag,
            low: self.low + lag,
            high: self.high.map(|h| h + lag),
            ..self
        }
    }
}

/// The curve's value in fitting units: the metric, or `1 − metric` for one that must rise.
fn to_fit(direction: Direction, metric: f64) -> f64 {
    match direction {
        Direction::Lower => metric,
        Direction::Higher => 1.0 - metric,
    }
}

/// Whether `value` of the target's metric meets `target`.
fn meets(target: &MetricTarget, value: f64) -> bool {
    match target.direction {
        Direction::Lower => value <= target.value,
        Direction::Higher => value >= target.value,
    }
}

/// A fit's value back in the metric's units.
fn from_fit(direction: Direction, y: f64) -> f64 {
    to_fit(direction, y)
}

/// Where the curve fitted to `points` (steps done, fitting units) meets `y_target`: `Ok(t)`,
/// or `Err(asymptote)` when it levels off at or above it.
fn crossing(points: &[(f64, f64)], y_target: f64) -> Option<Result<f64, f64>> {
    let curve = ReferenceCurve::fit(points).ok()?;
    let [a, b, c, floor] = curve.theta;
    if floor >= y_target || a <= 0.0 || c <= 0.0 {
        return Some(Err(floor));
    }
    let rhs = (1.0 / (y_target - floor) - b) / a;
    if rhs <= 0.0 {
        // The curve is below the target from the start: the first evaluation meets it.
        return Some(Ok(0.0));
    }
    Some(Ok(rhs.powf(1.0 / c)))
}

/// The steps to `target` from the evaluations `points` of a short run: `(steps done, value of
/// the target's metric)` in order; evaluations every `eval_every` steps; at most `max_steps`.
pub fn estimate_steps(
    points: &[(u64, f64)],
    target: &MetricTarget,
    eval_every: u64,
    max_steps: u64,
) -> Result<StepsEstimate, PlanError> {
    let eval_every = eval_every.max(1);
    if let Some(&(steps, _)) = points.iter().find(|(_, v)| meets(target, *v)) {
        return Ok(StepsEstimate {
            steps,
            low: steps,
            high: Some(steps),
            reached_in_profile: true,
            asymptote: None,
        });
    }
    if points.len() < MIN_EVALUATIONS {
        return Err(PlanError::TooFewEvaluations {
            got: points.len(),
            needed: MIN_EVALUATIONS,
        });
    }
    let direction = target.direction;
    // Fitting units are positive; a value at or past 0 (a perfect model) is kept just above.
    let fit: Vec<(f64, f64)> = points
        .iter()
        .map(|&(t, v)| (t as f64, to_fit(direction, v).max(1e-9)))
        .collect();
    let y_target = to_fit(direction, target.value);
    let best = points
        .iter()
        .map(|p| p.1)
        .fold(None, |best: Option<f64>, v| match best {
            Some(b) if !direction.improves(v, b, 0.0) => Some(b),
            _ => Some(v),
        })
        .unwrap_or(f64::NAN);
    let last_step = points.last().map_or(0, |p| p.0);
    let round = |t: f64| -> u64 {
        let t = t.max(last_step as f64 + 1.0);
        ((t / eval_every as f64).ceil() as u64).saturating_mul(eval_every)
    };
    let t = match crossing(&fit, y_target) {
        Some(Ok(t)) => t,
        Some(Err(floor)) => {
            return Err(PlanError::Unreachable {
                target: target.to_string(),
                asymptote: from_fit(direction, floor),
                best,
            });
        }
        None => {
            return Err(PlanError::TooFewEvaluations {
                got: points.len(),
                needed: MIN_EVALUATIONS,
            });
        }
    };
    let first = points.first().map_or(f64::NAN, |p| p.1);
    let travelled = to_fit(direction, first) - to_fit(direction, best);
    if to_fit(direction, best) - y_target > MAX_EXTRAPOLATION * travelled.max(0.0) {
        return Err(PlanError::NotShownReachable {
            target: target.to_string(),
            first,
            best,
        });
    }
    if !t.is_finite() || t > max_steps as f64 {
        return Err(PlanError::BeyondLimit {
            target: target.to_string(),
            steps: t,
            max_steps,
        });
    }
    let steps = round(t);
    let third = fit.len() / 3;
    let parts: Vec<Option<u64>> = [&fit[..fit.len() - third], &fit[third..]]
        .into_iter()
        .filter(|part| part.len() >= MIN_EVALUATIONS)
        .filter_map(|part| crossing(part, y_target))
        .map(|c| c.ok().filter(|t| t.is_finite()).map(round))
        .collect();
    let low = parts.iter().flatten().copied().fold(steps, u64::min);
    let high = parts
        .iter()
        .try_fold(steps, |high, part| part.map(|p| high.max(p)));
    Ok(StepsEstimate {
        steps,
        low,
        high,
        reached_in_profile: false,
        asymptote: ReferenceCurve::fit(&fit)
            .ok()
            .map(|c| from_fit(direction, c.theta[3])),
    })
}

/// What a short run measured of one configuration (a fleet size on a channel).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Workers P.
    pub workers: u32,
    /// The channel as `train --channel` takes it (`store`: the run's own object store), its
    /// credentials redacted.
    pub channel: String,
    /// How the channel is billed.
    pub channel_kind: ChannelKind,
    /// The cloud whose latency the run emulated (`train --emulate`).
    pub emulate: String,
    /// The exchange pattern the run used.
    pub pattern: String,
    /// Functions besides the workers (the supervisor).
    pub other_functions: u64,
    /// Seconds from the start of the run to its first step.
    pub startup_s: f64,
    /// Seconds from its last step to its end.
    pub teardown_s: f64,
    /// The first steps, whose time is [`warmup_s`](Self::warmup_s) rather than `step_ms` each.
    pub warmup_steps: u64,
    /// Seconds the first [`warmup_steps`](Self::warmup_steps) took.
    pub warmup_s: f64,
    /// The mean step after the warm-up, ms.
    pub step_ms: f64,
    /// Requests per step, counted: (writes, reads, table write units, table read units).
    pub requests_per_step: [f64; 4],
    /// The largest resident memory of a function, MB.
    pub peak_rss_mb: f64,
}

impl Profile {
    /// The time of a run of `steps` steps, seconds.
    pub fn time_s(&self, steps: u64) -> f64 {
        let warmup = self.warmup_s.max(0.0);
        let steps_s = if steps >= self.warmup_steps {
            warmup + (steps - self.warmup_steps) as f64 * self.step_ms.max(0.0) / 1000.0
        } else {
            warmup * steps as f64 / self.warmup_steps as f64
        };
        self.startup_s.max(0.0) + steps_s + self.teardown_s.max(0.0)
    }

    /// The bill of a run of `steps` steps with `memory_mb` a function, at `prices`, dollars.
    pub fn cost_usd(&self, steps: u64, memory_mb: u32, prices: &PriceTable) -> f64 {
        let time_s = self.time_s(steps);
        let per = self.requests_per_step;
        let n = steps as f64;
        let requests = ObjectRequests {
            writes: (per[0] * n).ceil() as u64,
            reads: (per[1] * n).ceil() as u64,
            table_write_units: (per[2] * n).ceil() as u64,
            table_read_units: (per[3] * n).ceil() as u64,
        };
        let usage = Usage {
            duration_ms: (time_s * 1000.0).ceil() as u64,
            memory_mb,
        };
        prices
            .clone()
            .for_channel(self.channel_kind)
            .bill_of_many(
                usage,
                u64::from(self.workers) + self.other_functions,
                time_s,
                requests,
            )
            .total_usd
    }

    /// The memory sizes of [`MEMORY_SIZES_MB`] that hold the peak with [`MEMORY_HEADROOM`]
    /// (the largest, if none does).
    pub fn memory_sizes(&self) -> Vec<u32> {
        let need = self.peak_rss_mb * MEMORY_HEADROOM;
        let fit: Vec<u32> = MEMORY_SIZES_MB
            .into_iter()
            .filter(|&mb| f64::from(mb) >= need)
            .collect();
        if fit.is_empty() {
            vec![MEMORY_SIZES_MB[MEMORY_SIZES_MB.len() - 1]]
        } else {
            fit
        }
    }
}

/// One configuration's predicted time and bill to the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Workers P.
    pub workers: u32,
    /// Memory of every function, MB.
    pub memory_mb: u32,
    /// The channel (`train --channel`, `store` for the run's own store).
    pub channel: String,
    /// The cloud whose latency the channel has (`train --emulate`).
    pub emulate: String,
    /// The exchange pattern.
    pub pattern: String,
    /// The synchronisation protocol.
    pub sync: String,
    /// Steps to the target.
    pub steps: u64,
    /// Predicted time to the target, seconds.
    pub time_s: f64,
    /// Predicted bill to the target, dollars.
    pub cost_usd: f64,
    /// Time and bill at the low and high ends of the steps' uncertainty (`None` for the high
    /// end when it is unbounded).
    pub range: ((f64, f64), Option<(f64, f64)>),
}

impl Candidate {
    /// The configuration in a few words: `P = 4, 256 MB, store (s3), broadcast`.
    pub fn label(&self) -> String {
        format!(
            "P = {}, {} MB, {} ({}), {}",
            self.workers, self.memory_mb, self.channel, self.emulate, self.pattern
        )
    }
}

/// Every profiled configuration at every memory size that fits, each for the steps its fleet
/// size needs, at `prices`.
pub fn candidates(profiles: &[(Profile, StepsEstimate)], prices: &PriceTable) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (profile, steps) in profiles {
        for memory_mb in profile.memory_sizes() {
            let at = |s: u64| (profile.time_s(s), profile.cost_usd(s, memory_mb, prices));
            let (time_s, cost_usd) = at(steps.steps);
            out.push(Candidate {
                workers: profile.workers,
                memory_mb,
                channel: profile.channel.clone(),
                emulate: profile.emulate.clone(),
                pattern: profile.pattern.clone(),
                sync: "bsp".into(),
                steps: steps.steps,
                time_s,
                cost_usd,
                range: (at(steps.low), steps.high.map(at)),
            });
        }
    }
    out
}

/// What a plan must meet.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// The target within this many seconds, as cheaply as possible.
    Deadline(f64),
    /// The target within this many dollars, as fast as possible.
    Budget(f64),
}

/// The candidates ordered best first for `goal` (those that meet it first, by cost under a
/// deadline, by time within a budget), or why none meets it. `startup_s` is the shortest
/// start-up and teardown of a profiled run, below which no deadline can be met.
pub fn rank(
    mut candidates: Vec<Candidate>,
    goal: Goal,
    startup_s: f64,
) -> Result<Vec<Candidate>, PlanError> {
    if candidates.is_empty() {
        return Err(PlanError::NoCandidates);
    }
    let meets = |c: &Candidate| match goal {
        Goal::Deadline(s) => c.time_s <= s,
        Goal::Budget(usd) => c.cost_usd <= usd,
    };
    let key = |c: &Candidate| match goal {
        Goal::Deadline(_) => (c.cost_usd, c.time_s),
        Goal::Budget(_) => (c.time_s, c.cost_usd),
    };
    candidates.sort_by(|a, b| {
        meets(b)
            .cmp(&meets(a))
            .then_with(|| key(a).0.total_cmp(&key(b).0))
            .then_with(|| key(a).1.total_cmp(&key(b).1))
    });
    if candidates.first().is_some_and(meets) {
        return Ok(candidates);
    }
    Err(match goal {
        Goal::Deadline(deadline_s) if deadline_s < startup_s => PlanError::DeadlineBelowStartup {
            deadline_s,
            startup_s,
        },
        Goal::Deadline(deadline_s) => {
            let fastest = candidates
                .iter()
                .min_by(|a, b| a.time_s.total_cmp(&b.time_s))
                .ok_or(PlanError::NoCandidates)?;
            PlanError::DeadlineTooShort {
                deadline_s,
                fastest: fastest.label(),
                time_s: fastest.time_s,
            }
        }
        Goal::Budget(budget_usd) => {
            let cheapest = candidates
                .iter()
                .min_by(|a, b| a.cost_usd.total_cmp(&b.cost_usd))
                .ok_or(PlanError::NoCandidates)?;
            PlanError::BudgetTooSmall {
                budget_usd,
                cheapest: cheapest.label(),
                cost_usd: cheapest.cost_usd,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(text: &str) -> MetricTarget {
        text.parse().expect("a target")
    }

    /// Evaluations every 5 steps of `f`.
    fn curve(n: u64, f: impl Fn(f64) -> f64) -> Vec<(u64, f64)> {
        (1..=n).map(|i| (5 * i, f(5.0 * i as f64))).collect()
    }

    fn rmse(t: f64) -> f64 {
        1.0 / (0.02 * t.powf(1.2) + 2.0) + 0.7
    }

    #[test]
    fn a_target_the_profile_reached_is_measured() {
        let points = curve(12, rmse);
        let e = estimate_steps(&points, &target("rmse<=1.0"), 5, 10_000).unwrap();
        assert!(e.reached_in_profile);
        let first = points.iter().find(|p| p.1 <= 1.0).unwrap().0;
        assert_eq!((e.steps, e.low, e.high), (first, first, Some(first)));
        let late = e.with_stop_lag(3);
        assert_eq!(
            (late.steps, late.low, late.high),
            (first + 3, first + 3, Some(first + 3))
        );
    }

    #[test]
    fn the_fit_finds_the_steps_of_a_known_curve() {
        // Twelve evaluations up to step 60; rmse <= 0.75 is crossed where
        // 1 / (0.02 t^1.2 + 2) = 0.05, t = (900)^(1/1.2) ≈ 290.
        let points = curve(12, rmse);
        let truth = (900.0f64).powf(1.0 / 1.2);
        let e = estimate_steps(&points, &target("rmse<=0.75"), 5, 10_000).unwrap();
        assert!(!e.reached_in_profile);
        assert_eq!(e.steps % 5, 0);
        assert!(
            (e.steps as f64 / truth - 1.0).abs() < 0.1,
            "{e:?} against {truth}"
        );
        assert!(
            e.low <= e.steps && e.high.is_some_and(|h| h >= e.steps),
            "{e:?}"
        );
        assert!((e.asymptote.unwrap() - 0.7).abs() < 0.02, "{e:?}");
        // A metric that rises: auc = 1 − the same curve.
        let auc: Vec<(u64, f64)> = points.iter().map(|&(t, v)| (t, 1.0 - v)).collect();
        let e2 = estimate_steps(&auc, &target("auc>=0.25"), 5, 10_000).unwrap();
        assert_eq!(e2.steps, e.steps);
    }

    #[test]
    fn what_cannot_be_estimated_is_refused() {
        let points = curve(12, rmse);
        let e = estimate_steps(&points, &target("rmse<=0.65"), 5, 10_000).unwrap_err();
        assert!(
            matches!(e, PlanError::Unreachable { asymptote, .. } if asymptote > 0.65),
            "{e:?}"
        );
        let e = estimate_steps(&points, &target("rmse<=0.75"), 5, 100).unwrap_err();
        assert!(matches!(e, PlanError::BeyondLimit { .. }), "{e:?}");
        // From 1.19 to 1.04 in 12 evaluations, 0.8 is twice as far again.
        let early = curve(12, |t| 1.0 / (0.0002 * t.powf(1.5) + 2.0) + 0.7);
        assert!(early[0].1 - early[11].1 < 0.2);
        let e = estimate_steps(&early, &target("rmse<=0.8"), 5, 100_000).unwrap_err();
        assert!(matches!(e, PlanError::NotShownReachable { .. }), "{e:?}");
        let e = estimate_steps(&points[..4], &target("rmse<=0.75"), 5, 10_000).unwrap_err();
        assert!(
            matches!(e, PlanError::TooFewEvaluations { got: 4, .. }),
            "{e:?}"
        );
    }

    fn profile(workers: u32, step_ms: f64) -> Profile {
        Profile {
            workers,
            channel: "store".into(),
            channel_kind: ChannelKind::ObjectStore,
            emulate: "s3".into(),
            pattern: "broadcast".into(),
            other_functions: 1,
            startup_s: 0.5,
            teardown_s: 0.25,
            warmup_steps: 0,
            warmup_s: 0.0,
            step_ms,
            requests_per_step: [2.0 * f64::from(workers), 10.0, 0.0, 0.0],
            peak_rss_mb: 100.0,
        }
    }

    #[test]
    fn time_and_bill_follow_the_profile() {
        let p = profile(2, 50.0);
        assert!((p.time_s(100) - 5.75).abs() < 1e-12);
        let aws = PriceTable::aws_lambda();
        // By hand: 3 functions of 256 MB for 5.75 s, 3 requests, 400 PUTs and 1000 GETs.
        let by_hand = 3.0 * 5.75 * 0.25 * aws.gb_second_usd
            + 3.0 * aws.request_usd
            + 400.0 * aws.object_write_usd_per_1000 / 1000.0
            + 1000.0 * aws.object_read_usd_per_1000 / 1000.0;
        let cost = p.cost_usd(100, 256, &aws);
        assert!(
            (cost / by_hand - 1.0).abs() < 1e-9,
            "{cost} against {by_hand}"
        );
        assert_eq!(p.memory_sizes(), vec![256, 512, 1024, 2048]);
        // A warm-up of 4 steps in 1 s: then 50 ms a step.
        let warm = Profile {
            warmup_steps: 4,
            warmup_s: 1.0,
            ..p
        };
        assert!((warm.time_s(100) - (0.75 + 1.0 + 96.0 * 0.05)).abs() < 1e-12);
        assert!((warm.time_s(2) - (0.75 + 0.5)).abs() < 1e-12);
        assert!((warm.time_s(0) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn the_goal_ranks_the_candidates() {
        let steps = StepsEstimate {
            steps: 100,
            low: 90,
            high: Some(120),
            reached_in_profile: false,
            asymptote: None,
        };
        // P = 8 is faster (20 ms steps) but dearer than P = 1 (60 ms steps).
        let profiles = [(profile(1, 60.0), steps.clone()), (profile(8, 20.0), steps)];
        let aws = PriceTable::aws_lambda();
        let all = candidates(&profiles, &aws);
        assert_eq!(all.len(), 8);
        let cheapest = &rank(all.clone(), Goal::Deadline(100.0), 0.75).unwrap()[0];
        assert_eq!((cheapest.workers, cheapest.memory_mb), (1, 256));
        let (low, high) = cheapest.range;
        assert!(low.0 < cheapest.time_s && high.unwrap().0 > cheapest.time_s);
        let fastest = &rank(all.clone(), Goal::Deadline(4.0), 0.75).unwrap()[0];
        assert_eq!((fastest.workers, fastest.memory_mb), (8, 256));
        let fastest = &rank(all.clone(), Goal::Budget(1.0), 0.75).unwrap()[0];
        assert_eq!((fastest.workers, fastest.memory_mb), (8, 256));
        let e = rank(all.clone(), Goal::Deadline(0.5), 0.75).unwrap_err();
        assert!(matches!(e, PlanError::DeadlineBelowStartup { .. }), "{e}");
        let e = rank(all.clone(), Goal::Deadline(2.0), 0.75).unwrap_err();
        assert!(matches!(e, PlanError::DeadlineTooShort { .. }), "{e}");
        let e = rank(all, Goal::Budget(1e-9), 0.75).unwrap_err();
        assert!(matches!(e, PlanError::BudgetTooSmall { .. }), "{e}");
        assert_eq!(
            rank(Vec::new(), Goal::Budget(1.0), 0.0).unwrap_err(),
            PlanError::NoCandidates
        );
    }
}
