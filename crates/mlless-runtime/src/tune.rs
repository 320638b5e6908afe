//! `mlless tune`'s runtime: runs a search's trials concurrently, each an ordinary training job
//! ([`train`]) with its own fleet of functions and its own run record, on one async task; stops
//! them at the rungs of asynchronous successive halving and within the dollar budget, through
//! the same stop the supervisor uses ([`Control::Stop`]); and writes what happened as a
//! [`TuneRecord`]. What to decide is asked of `mlless_tune` (pure): the scheduler
//! ([`Asha`]), the budget ([`Ledger`]).
//!
//! Every trial's driver calls its `observe` every 100 ms with its [`LiveProgress`]; the search
//! takes the trial's bill so far into the ledger, its validation metric into the scheduler
//! when it reaches a rung, and answers [`Control::Stop`] with the reason once the trial is to
//! stop. Every 100 ms the search itself applies the hard budget rule ([`Ledger::to_stop`]) and
//! the time limit, shows its progress to its own `observe` (which may cancel the search, as
//! Ctrl-C cancels a run), and starts the next trials that the budget can pay for to their
//! first rung ([`Ledger::can_start`]).

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::stream::{FuturesUnordered, StreamExt};
use mlless_core::validation::Direction;
use mlless_cost::Usage;
use mlless_faas::Invoker;
use mlless_faas::clock::unix_ms;
use mlless_job::RunRecord;
use mlless_tune::budget::DEFAULT_TAIL_S;
use mlless_tune::{
    Asha, AshaConfig, Assignment, CurvePoint, Ledger, RungDecision, RungRecord, RungUnit, Sampler,
    SchedulerRecord, SearchSpace, TUNE_RECORD_VERSION, TrialRecord, TrialStatus, TuneRecord,
    is_better, value_at_rung,
};
use tracing::info;

use crate::dataset::{Dataset, Split};
use crate::driver::{Control, LiveProgress, TrainOptions, train};
use crate::error::{Result, RuntimeError};

/// How often the search applies its rules and shows its progress.
const POLL: Duration = Duration::from_millis(100);
/// At most this many points of the cost curve are kept in the record.
const MAX_CURVE_POINTS: usize = 2000;

/// One trial of a search: its parameters, and the options `mlless train` takes with them, or
/// why they are not options (the trial is recorded as failed and the search goes on).
#[derive(Debug, Clone)]
pub struct Trial {
    /// The parameters drawn.
    pub params: Assignment,
    /// The training options with those parameters.
    pub options: std::result::Result<TrainOptions, String>,
}

/// What `mlless tune` asks for.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    /// The trials, in the order they are to start.
    pub trials: Vec<Trial>,
    /// Trials run at once, at most.
    pub concurrency: u32,
    /// The budget: the trials' bills add up to no more than this, dollars.
    pub budget_usd: f64,
    /// The search's time limit, seconds.
    pub max_time_s: Option<f64>,
    /// What a trial's progress is counted in (rungs, the budget's estimates): epochs, or
    /// seconds (each trial then has a `max_time_s`, its most).
    pub unit: RungUnit,
    /// Successive halving (`None`: every trial runs to its end, a full search).
    pub scheduler: Option<AshaConfig>,
    /// For the record: the space the trials were drawn from, how, and the seed.
    pub space: SearchSpace,
    /// For the record: how the trials were drawn.
    pub sampler: Sampler,
    /// For the record: the seed.
    pub seed: u64,
}

/// What a search shows while it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchProgress {
    /// Seconds since the search started.
    pub elapsed_s: f64,
    /// The trials' bills so far, dollars.
    pub spent_usd: f64,
    /// The budget, dollars.
    pub budget_usd: f64,
    /// Trials running now.
    pub running: usize,
    /// Trials that have ended.
    pub ended: usize,
    /// Trials in all.
    pub trials: usize,
    /// The validation metric, once a trial has reported it.
    pub metric: Option<String>,
    /// The best trial so far and its best validation metric.
    pub best: Option<(usize, f64)>,
    /// What happened since the last time.
    pub events: Vec<TuneEvent>,
}

/// Something that happened in a search.
#[derive(Debug, Clone, PartialEq)]
pub enum TuneEvent {
    /// A trial started.
    Started {
        /// The trial.
        trial: usize,
        /// Its parameters.
        params: Assignment,
    },
    /// A trial reached a rung.
    Rung {
        /// The trial.
        trial: usize,
        /// The rung record.
        rung: RungRecord,
        /// The rung as text (`1 epoch`).
        at: String,
        /// The metric.
        metric: String,
    },
    /// The search asked a trial to stop.
    Stopping {
        /// The trial.
        trial: usize,
        /// Why.
        reason: String,
    },
    /// A trial ended.
    Ended {
        /// Its record.
        trial: Box<TrialRecord>,
    },
}

impl fmt::Display for TuneEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TuneEvent::Started { trial, params } => write!(f, "trial {trial} started: {params}"),
            TuneEvent::Rung {
                trial,
                rung,
                at,
                metric,
            } => {
                let d = rung.decision;
                let value = rung.value.map_or("—".to_string(), |v| format!("{v:.6}"));
                let verdict = if rung.went_on {
                    "goes on"
                } else if d.promoted() {
                    "promoted, but the budget does not pay for the next rung"
                } else {
                    "stopped"
                };
                write!(
                    f,
                    "trial {trial} at rung {} ({at}): {metric} {value}, rank {} of {} (the top {} \
                     go on): {verdict}",
                    rung.rung + 1,
                    d.rank,
                    d.of,
                    d.keep
                )
            }
            TuneEvent::Stopping { trial, reason } => write!(f, "trial {trial}: {reason}"),
            TuneEvent::Ended { trial } => {
                let best = trial
                    .best_metric
                    .map_or("—".to_string(), |v| format!("{v:.6}"));
                write!(
                    f,
                    "trial {} {} after {:.2} epochs, {:.1} s, ${:.6}: best {best}",
                    trial.trial,
                    trial.status.name(),
                    trial.epochs,
                    trial.wall_s,
                    trial.cost_usd
                )?;
                match (&trial.error, &trial.stop_reason) {
                    (Some(error), _) => write!(f, " ({error})"),
                    (None, Some(reason)) if trial.status == TrialStatus::Finished => {
                        write!(f, " ({reason})")
                    }
                    _ => Ok(()),
                }
            }
        }
    }
}

/// A trial as the search follows it.
#[derive(Debug, Default)]
struct TrialState {
    /// Seconds since the search started, when it started.
    started_s: Option<f64>,
    /// Its record, once it ended.
    ended: Option<TrialRecord>,
    /// Its latest progress.
    live: Option<LiveProgress>,
    /// The next rung it is heading for.
    next_rung: usize,
    /// Why the search asked it to stop.
    stop: Option<String>,
    rungs: Vec<RungRecord>,
    curve: Vec<CurvePoint>,
    /// Its evaluations so far, each `[epochs done, seconds since its supervisor started,
    /// value]` (every one, diverged ones included), for the values at its rungs.
    evals: Vec<[f64; 3]>,
    /// How many evaluations its progress has counted.
    evaluations_seen: usize,
    /// The most it trains, in the search's unit.
    max_units: f64,
}

impl TrialState {
    fn running(&self) -> bool {
        self.started_s.is_some() && self.ended.is_none()
    }
}

/// The search's state, shared by its trials' `observe` callbacks and its own loop (one task).
struct Search {
    started: Instant,
    started_unix_ms: u64,
    ledger: Ledger,
    unit: RungUnit,
    config: Option<AshaConfig>,
    /// Built once the first trial names its metric (whose direction it needs).
    asha: Option<Asha>,
    metric: Option<(String, Direction)>,
    trials: Vec<TrialState>,
    events: Vec<TuneEvent>,
    /// What the search's own observer asked for all trials (cancel, kill).
    control: Control,
    cost_curve: Vec<(f64, f64)>,
}

impl Search {
    fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn units(&self, p: &LiveProgress) -> f64 {
        match self.unit {
            RungUnit::Epochs => p.epoch,
            RungUnit::Seconds => p.elapsed_s,
        }
    }

    fn rungs(&self) -> &[f64] {
        self.asha.as_ref().map_or(&[], Asha::rungs)
    }

    /// The rungs of a search with a scheduler, before its metric is known.
    fn planned_rungs(&self) -> Vec<f64> {
        self.config
            .as_ref()
            .map_or_else(Vec::new, AshaConfig::rungs)
    }

    /// What trial `i` must reach next: its next rung below its most, or its most.
    fn target(&self, i: usize, rung: usize) -> f64 {
        let trial = &self.trials[i];
        let rungs = if self.asha.is_some() {
            self.rungs().to_vec()
        } else {
            self.planned_rungs()
        };
        rungs
            .get(rung)
            .copied()
            .filter(|&r| r < trial.max_units)
            .unwrap_or(trial.max_units)
    }

    /// The running trials, each with what it must reach next.
    fn running_targets(&self) -> Vec<(usize, f64)> {
        (0..self.trials.len())
            .filter(|&i| self.trials[i].running())
            .map(|i| {
                let target = if self.trials[i].stop.is_some() {
                    0.0
                } else {
                    self.target(i, self.trials[i].next_rung)
                };
                (i, target)
            })
            .collect()
    }

    fn running(&self) -> usize {
        self.trials.iter().filter(|t| t.running()).count()
    }

    /// Asks trial `i` to stop for `reason` (once).
    fn stop(&mut self, i: usize, reason: String) {
        if self.trials[i].stop.is_some() || !self.trials[i].running() {
            return;
        }
        info!(trial = i, %reason, "stopping a trial");
        self.ledger.stop_requested(i);
        self.trials[i].stop = Some(reason.clone());
        self.events.push(TuneEvent::Stopping { trial: i, reason });
    }

    /// Takes trial `i`'s progress; answers what it should do.
    fn observe(&mut self, i: usize, p: &LiveProgress) -> Control {
        let units = self.units(p);
        self.ledger.observe(i, p.elapsed_s, units, p.bill_usd);
        let start_s = self.trials[i].started_s.unwrap_or(0.0);
        if let Some(v) = &p.validation {
            if self.metric.is_none() {
                let direction = Direction::of(&v.metric).unwrap_or(Direction::Lower);
                self.metric = Some((v.metric.clone(), direction));
                if let Some(config) = self.config {
                    // The config was checked before the search started.
                    self.asha = Asha::new(config, direction).ok();
                }
            }
            let trial = &mut self.trials[i];
            let seen = v.evaluations as usize;
            if seen > trial.evaluations_seen {
                // Every evaluation since the last progress, from the latest ones it carries
                // (the latest alone from a supervisor that sends none).
                let missed = seen - trial.evaluations_seen;
                let new = if v.recent.is_empty() {
                    vec![[v.epoch, p.elapsed_s, v.latest]]
                } else {
                    v.recent[v.recent.len().saturating_sub(missed)..].to_vec()
                };
                for [epoch, time_s, value] in new {
                    trial.evals.push([epoch, time_s, value]);
                    if value.is_finite() {
                        trial.curve.push(CurvePoint {
                            time_s: start_s + time_s,
                            epoch,
                            value,
                            cost_usd: p.bill_usd,
                        });
                    }
                }
                trial.evaluations_seen = seen;
            }
            self.rung_check(i, p);
        }
        self.trials[i].live = Some(p.clone());
        match (&self.control, &self.trials[i].stop) {
            (Control::Kill, _) => Control::Kill,
            (_, Some(reason)) => Control::Stop(reason.clone()),
            (control, None) => control.clone(),
        }
    }

    /// The scheduler's verdicts on trial `i` at the rungs it has reached.
    fn rung_check(&mut self, i: usize, p: &LiveProgress) {
        let Some(v) = &p.validation else { return };
        while self.trials[i].stop.is_none() {
            let k = self.trials[i].next_rung;
            let Some(&at) = self.rungs().get(k) else {
                return;
            };
            if at >= self.trials[i].max_units {
                return;
            }
            let reached = match self.unit {
                RungUnit::Epochs => v.epoch >= at - 1e-9,
                RungUnit::Seconds => p.elapsed_s >= at,
            };
            if !reached {
                return;
            }
            // Its value at the rung; in seconds, before an evaluation past the rung, its best
            // so far, all of it made before the rung.
            let value = self.value_at(i, at).unwrap_or(v.best);
            if !self.decide_rung(i, k, at, value, true) {
                return;
            }
        }
    }

    /// Trial `i`'s value at the rung `at`, from its evaluations, once one has reached it.
    fn value_at(&self, i: usize, at: f64) -> Option<f64> {
        let direction = self.metric.as_ref().map_or(Direction::Lower, |m| m.1);
        let points: Vec<(f64, f64)> = self.trials[i]
            .evals
            .iter()
            .map(|&[epoch, time_s, value]| match self.unit {
                RungUnit::Epochs => (epoch, value),
                RungUnit::Seconds => (time_s, value),
            })
            .collect();
        value_at_rung(&points, at, direction)
    }

    /// The rungs trial `i`, which has ended, passed between the search's looks at it (a trial
    /// shorter than a poll): decided from its record's evaluations, for its record and for
    /// the trials that reach them later. It went on past them.
    fn catch_up_rungs(&mut self, i: usize) {
        loop {
            let k = self.trials[i].next_rung;
            let Some(&at) = self.rungs().get(k) else {
                return;
            };
            if at >= self.trials[i].max_units {
                return;
            }
            let Some(value) = self.value_at(i, at) else {
                return;
            };
            if !self.decide_rung(i, k, at, value, false) {
                return;
            }
        }
    }

    /// Reports trial `i`'s `value` at rung `k` (at `at`) to the scheduler and records the
    /// verdict; a trial still running (`live`) is stopped unless promoted and paid for.
    /// `false` if there is no scheduler yet to ask.
    fn decide_rung(&mut self, i: usize, k: usize, at: f64, value: f64, live: bool) -> bool {
        let Some((metric, _)) = self.metric.clone() else {
            return false;
        };
        let Some(asha) = self.asha.as_mut() else {
            return false;
        };
        let decision: RungDecision = asha.report(i, k, value);
        self.trials[i].next_rung = k + 1;
        let went_on = if live {
            let next = self.target(i, k + 1);
            decision.promoted() && self.ledger.can_continue(i, next, &self.running_targets())
        } else {
            true
        };
        let rung = RungRecord {
            rung: k,
            at,
            value: value.is_finite().then_some(value),
            decision,
            went_on,
        };
        let shown = self.unit.show(at);
        self.trials[i].rungs.push(rung.clone());
        self.events.push(TuneEvent::Rung {
            trial: i,
            rung,
            at: shown.clone(),
            metric: metric.clone(),
        });
        if !went_on {
            let why = if decision.promoted() {
                format!(
                    "promoted, but the budget left (${:.6} of ${:.6}) does not pay for its \
                     next rung",
                    self.ledger.budget() - self.ledger.spent(),
                    self.ledger.budget()
                )
            } else {
                format!(
                    "{metric} {value:.6} ranked {} of {}, the top {} go on",
                    decision.rank, decision.of, decision.keep
                )
            };
            self.stop(
                i,
                format!("stopped by the search at rung {} ({shown}): {why}", k + 1),
            );
        }
        true
    }

    /// The hard rules, every poll: the budget and the time limit.
    fn enforce(&mut self, max_time_s: Option<f64>) {
        let mut order: Vec<usize> = (0..self.trials.len())
            .filter(|&i| self.trials[i].running())
            .collect();
        // Those already stopping cost until they end; then the furthest and the best.
        let direction = self.metric.as_ref().map_or(Direction::Lower, |m| m.1);
        let best = |t: &TrialState| {
            t.live
                .as_ref()
                .and_then(|p| p.validation.as_ref())
                .map(|v| v.best)
        };
        order.sort_by(|&a, &b| {
            let (ta, tb) = (&self.trials[a], &self.trials[b]);
            tb.stop
                .is_some()
                .cmp(&ta.stop.is_some())
                .then(tb.next_rung.cmp(&ta.next_rung))
                .then_with(|| {
                    if is_better(direction, best(ta), best(tb)) {
                        std::cmp::Ordering::Less
                    } else if is_better(direction, best(tb), best(ta)) {
                        std::cmp::Ordering::Greater
                    } else {
                        a.cmp(&b)
                    }
                })
        });
        let stop = self.ledger.to_stop(&order, 2.0 * POLL.as_secs_f64());
        for i in stop {
            let reason = format!(
                "stopped by the search: its budget of ${:.6} is spent (${:.6} so far, and \
                 what the running trials take to stop)",
                self.ledger.budget(),
                self.ledger.spent()
            );
            self.stop(i, reason);
        }
        if let Some(max) = max_time_s
            && self.elapsed_s() + self.ledger.tail_s() >= max
        {
            for i in 0..self.trials.len() {
                self.stop(i, format!("stopped by the search: its --max-time {max} s"));
            }
        }
    }

    /// Seconds the slowest trial seen takes per unit, once one has trained a measurable part of
    /// a unit.
    fn seconds_per_unit(&self) -> Option<f64> {
        match self.unit {
            RungUnit::Seconds => Some(1.0),
            RungUnit::Epochs => self
                .trials
                .iter()
                .filter_map(|t| t.live.as_ref())
                .filter(|p| p.epoch >= 0.05)
                .map(|p| p.elapsed_s / p.epoch)
                .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s)))),
        }
    }

    /// Whether trial `i`, not started, may start now; `Err` with the reason when no trial can
    /// start any more.
    fn may_start(
        &self,
        i: usize,
        options: &TrainOptions,
        concurrency: usize,
        max_time_s: Option<f64>,
    ) -> std::result::Result<bool, String> {
        match self.control {
            Control::Continue => {}
            _ => return Err("the search was cancelled".into()),
        }
        let running = self.running();
        if running >= concurrency {
            return Ok(false);
        }
        let target = self.target(i, 0);
        if let Some(max) = max_time_s {
            let need = self.seconds_per_unit().map_or(0.0, |s| s * target) + self.ledger.tail_s();
            if self.elapsed_s() + need > max {
                return if running == 0 {
                    Err(format!(
                        "reached its --max-time {max} s (no trial could reach its first rung \
                         in the time left)"
                    ))
                } else {
                    Ok(false)
                };
            }
        }
        let fits = match self.ledger.can_start(&self.running_targets(), target) {
            Some(fits) => fits,
            // No estimate yet: one trial at a time, the first if the budget pays at least for
            // its functions to start and stop.
            None => {
                running == 0 && self.ledger.spent() + floor_usd(options) <= self.ledger.budget()
            }
        };
        match (fits, running) {
            (true, _) => Ok(true),
            (false, 0) => Err(format!(
                "its budget of ${:.6} would not pay for another trial's first rung (${:.6} spent)",
                self.ledger.budget(),
                self.ledger.spent()
            )),
            (false, _) => Ok(false),
        }
    }

    /// The search's progress, with the events since the last time.
    fn progress(&mut self, trials: usize) -> SearchProgress {
        let direction = self.metric.as_ref().map_or(Direction::Lower, |m| m.1);
        let mut best: Option<(usize, f64)> = None;
        for (i, t) in self.trials.iter().enumerate() {
            let value = match &t.ended {
                Some(r) => r.best_metric,
                None => t
                    .live
                    .as_ref()
                    .and_then(|p| p.validation.as_ref())
                    .map(|v| v.best),
            };
            if is_better(direction, value, best.map(|b| b.1)) {
                best = value.map(|v| (i, v));
            }
        }
        SearchProgress {
            elapsed_s: self.elapsed_s(),
            spent_usd: self.ledger.spent(),
            budget_usd: self.ledger.budget(),
            running: self.running(),
            ended: self.trials.iter().filter(|t| t.ended.is_some()).count(),
            trials,
            metric: self.metric.as_ref().map(|m| m.0.clone()),
            best,
            events: std::mem::take(&mut self.events),
        }
    }

    /// Trial `i`, with `params` and `options`, ended with `result`: its record.
    fn finish(
        &mut self,
        i: usize,
        params: Assignment,
        options: Option<&TrainOptions>,
        result: Result<RunRecord>,
    ) {
        let direction = self.metric.as_ref().map_or(Direction::Lower, |m| m.1);
        let metric = self.metric.as_ref().map(|m| m.0.clone());
        let search_started_ms = self.started_unix_ms;
        let state = &mut self.trials[i];
        let live = state.live.take();
        let stop = state.stop.clone();
        let mut record = TrialRecord {
            trial: i,
            params,
            status: TrialStatus::Failed,
            stop_reason: None,
            error: None,
            // A failed trial's run, from the job its progress named.
            run_url: live
                .as_ref()
                .zip(options)
                .map(|(p, o)| o.run_url(&p.job_id)),
            best_metric: None,
            epochs: live.as_ref().map_or(0.0, |p| p.epoch),
            steps: live.as_ref().map_or(0, |p| p.step),
            wall_s: live.as_ref().map_or(0.0, |p| p.elapsed_s),
            cost_usd: live.as_ref().map_or(0.0, |p| p.bill_usd),
            started_s: state.started_s.unwrap_or(0.0),
            test_metrics: Default::default(),
            rungs: std::mem::take(&mut state.rungs),
            curve: std::mem::take(&mut state.curve),
        };
        match result {
            Ok(run) => {
                let validation = run.validation.as_ref();
                let metric = validation.map(|v| v.metric.clone()).or(metric);
                // A trial that ended before its first progress names the metric here.
                if self.metric.is_none()
                    && let Some(metric) = &metric
                {
                    let direction = Direction::of(metric).unwrap_or(Direction::Lower);
                    self.metric = Some((metric.clone(), direction));
                    if let Some(config) = self.config {
                        self.asha = Asha::new(config, direction).ok();
                    }
                }
                record.best_metric = validation
                    .and_then(|v| v.best_point())
                    .zip(metric.as_deref())
                    .and_then(|(p, m)| p.metrics.get(m).copied());
                if let (Some(validation), Some(metric)) = (validation, metric.as_deref()) {
                    // The rungs it passed unseen, from its record's evaluations (every one).
                    self.trials[i].evals = validation
                        .points
                        .iter()
                        .map(|p| {
                            let value = p.metrics.get(metric).copied().unwrap_or(f64::NAN);
                            [p.epoch, p.time_s, value]
                        })
                        .collect();
                    self.trials[i].rungs = std::mem::take(&mut record.rungs);
                    self.catch_up_rungs(i);
                    record.rungs = std::mem::take(&mut self.trials[i].rungs);
                    // The record's curve, on the search's clock.
                    let offset = run.started_at_unix_ms.saturating_sub(search_started_ms) as f64
                        / 1000.0
                        + run.time_offset_s();
                    record.curve = validation
                        .points
                        .iter()
                        .filter_map(|p| {
                            let value = *p.metrics.get(metric)?;
                            value.is_finite().then_some(CurvePoint {
                                time_s: offset + p.time_s,
                                epoch: p.epoch,
                                value,
                                cost_usd: p.cost_usd.unwrap_or(f64::NAN),
                            })
                        })
                        .collect();
                }
                record.status = if run.was_cancelled() {
                    TrialStatus::Cancelled
                } else if stop.as_deref() == Some(run.stop_reason.as_str()) {
                    TrialStatus::Stopped
                } else {
                    TrialStatus::Finished
                };
                record.stop_reason = Some(run.stop_reason.clone());
                record.run_url = Some(run.spec.run_url.as_str().to_owned());
                record.epochs = run.epochs;
                record.steps = run.steps.len() as u64;
                record.wall_s = run.wall_s;
                record.cost_usd = run.bill.as_ref().map_or(record.cost_usd, |b| b.total_usd);
                record.test_metrics = run.metrics.clone();
            }
            Err(e) => {
                record.status = match (&e, &stop) {
                    (RuntimeError::Cancelled { .. }, Some(_)) => TrialStatus::Stopped,
                    (RuntimeError::Cancelled { .. }, None) => TrialStatus::Cancelled,
                    _ => TrialStatus::Failed,
                };
                record.stop_reason = stop;
                record.error = Some(e.to_string());
                record.best_metric = record.curve.iter().map(|p| p.value).fold(None, |b, v| {
                    if is_better(direction, Some(v), b) {
                        Some(v)
                    } else {
                        b
                    }
                });
            }
        }
        self.trials[i].ended = Some(record.clone());
        self.ledger.finish(i, record.cost_usd);
        self.events.push(TuneEvent::Ended {
            trial: Box::new(record),
        });
    }
}

/// What starting and stopping the functions of a trial with `options` costs at least: every
/// function running for the default tail and a second, at the trial's prices.
fn floor_usd(options: &TrainOptions) -> f64 {
    let functions = f64::from(options.training.workers + 1);
    functions
        * options.prices.invocation_usd(Usage {
            duration_ms: ((DEFAULT_TAIL_S + 1.0) * 1000.0) as u64,
            memory_mb: options.training.limits.memory_mb,
        })
}

/// The most trial `options` trains, in `unit`s.
fn max_units(options: &TrainOptions, unit: RungUnit) -> f64 {
    match unit {
        RungUnit::Epochs => f64::from(options.training.stop.max_epochs),
        RungUnit::Seconds => options.training.stop.max_time_s.unwrap_or(f64::INFINITY),
    }
}

/// Checks a search before anything starts: trials (each one's options as `train` checks them,
/// its fleet against what `invoker` runs at once), concurrency (the trials that run at once
/// within what `invoker` runs), budget, time, the scheduler, and that every data set has a
/// validation split to compare the trials on.
async fn check(options: &TuneOptions, invoker: &dyn Invoker) -> Result<()> {
    let invalid = |message: String| Err(RuntimeError::InvalidJob(message));
    if options.trials.is_empty() {
        return invalid("the search has no trials".into());
    }
    if options.concurrency == 0 {
        return invalid("--concurrency must be at least 1".into());
    }
    Ledger::new(options.budget_usd).map_err(|e| RuntimeError::InvalidJob(e.to_string()))?;
    if let Some(t) = options.max_time_s
        && !(t > 0.0 && t.is_finite())
    {
        return invalid(format!(
            "--max-time must be a positive number of seconds, not {t}"
        ));
    }
    if let Some(config) = &options.scheduler {
        config
            .validate()
            .map_err(|e| RuntimeError::InvalidJob(e.to_string()))?;
    }
    let mut checked: Vec<&str> = Vec::new();
    // The most workers of a trial, for the functions that run at once.
    let mut most_workers = 0u32;
    for trial in &options.trials {
        let Ok(train) = &trial.options else { continue };
        train
            .validate_for(invoker)
            .map_err(|e| RuntimeError::InvalidJob(format!("trial {}: {e}", trial.params)))?;
        most_workers = most_workers.max(train.training.workers);
        if options.unit == RungUnit::Seconds && train.training.stop.max_time_s.is_none() {
            return invalid("rungs in seconds need the most a trial trains (--trial-time)".into());
        }
        let url = train.data_url.as_str();
        if checked.contains(&url) {
            continue;
        }
        let dataset = Dataset::open(url).await?;
        if dataset.batches(Split::Validation) == 0 {
            return invalid(format!(
                "the data set at {} has no validation set, and the search compares its trials \
                 on the validation metric: prepare it with --validation-fraction above 0 (the \
                 default is 0.1) or --validation-input",
                train.data_url
            ));
        }
        checked.push(url);
    }
    // The trials that run at once, each a fleet and its supervisor.
    let at_once = u64::from(options.concurrency).min(options.trials.len() as u64);
    let functions = at_once * (u64::from(most_workers) + 1);
    if let Some(max) = invoker.max_concurrent()
        && functions > u64::from(max)
    {
        return invalid(format!(
            "--concurrency {}: {at_once} trials of {most_workers} workers and a supervisor are \
             {functions} functions at once, more than the {} invoker can run ({max}): lower \
             --concurrency or --workers-per-trial",
            options.concurrency,
            invoker.platform()
        ));
    }
    Ok(())
}

/// A running trial: its number and how its training ended.
type Running = Pin<Box<dyn Future<Output = (usize, Result<RunRecord>)>>>;

/// Runs the search `options` on `invoker`, showing its progress to `observe` every 100 ms,
/// which may cancel it ([`Control::Cancel`]: every running trial stops after its step, as a
/// cancelled run does, and no other starts; [`Control::Kill`] kills them); returns the tune
/// record. A trial that fails is recorded and the search goes on.
pub async fn tune(
    options: &TuneOptions,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&SearchProgress) -> Control,
) -> Result<TuneRecord> {
    check(options, &*invoker).await?;
    let ledger =
        Ledger::new(options.budget_usd).map_err(|e| RuntimeError::InvalidJob(e.to_string()))?;
    let started_unix_ms = unix_ms(SystemTime::now());
    let tune_id = format!(
        "tune-{}-{:04x}",
        started_unix_ms / 1000,
        rand::random::<u16>()
    );
    let first_model = options
        .trials
        .iter()
        .find_map(|t| t.options.as_ref().ok())
        .map(|o| o.model);
    let search = Rc::new(RefCell::new(Search {
        started: Instant::now(),
        started_unix_ms,
        ledger,
        unit: options.unit,
        config: options.scheduler,
        asha: None,
        metric: None,
        trials: options
            .trials
            .iter()
            .map(|t| TrialState {
                max_units: t
                    .options
                    .as_ref()
                    .map_or(0.0, |o| max_units(o, options.unit)),
                ..TrialState::default()
            })
            .collect(),
        events: Vec::new(),
        control: Control::Continue,
        cost_curve: vec![(0.0, 0.0)],
    }));
    info!(
        tune_id,
        trials = options.trials.len(),
        budget_usd = options.budget_usd,
        "starting the search"
    );
    let mut running: FuturesUnordered<Running> = FuturesUnordered::new();
    let mut next = 0usize;
    let mut ticker = tokio::time::interval(POLL);
    let concurrency = options.concurrency as usize;
    let stop_reason: String = loop {
        // Start what may start.
        let mut ended: Option<String> = None;
        while next < options.trials.len() {
            let trial = &options.trials[next];
            let train_options = match &trial.options {
                Ok(o) => o,
                Err(e) => {
                    let mut s = search.borrow_mut();
                    s.trials[next].started_s = Some(s.elapsed_s());
                    s.finish(
                        next,
                        trial.params.clone(),
                        None,
                        Err(RuntimeError::InvalidJob(e.clone())),
                    );
                    next += 1;
                    continue;
                }
            };
            let verdict =
                search
                    .borrow()
                    .may_start(next, train_options, concurrency, options.max_time_s);
            match verdict {
                Ok(true) => {}
                Ok(false) => break,
                Err(reason) => {
                    ended = Some(reason);
                    break;
                }
            }
            {
                let mut s = search.borrow_mut();
                s.trials[next].started_s = Some(s.elapsed_s());
                s.events.push(TuneEvent::Started {
                    trial: next,
                    params: trial.params.clone(),
                });
            }
            info!(trial = next, params = %trial.params, "starting a trial");
            let i = next;
            let shared = search.clone();
            let train_options = train_options.clone();
            let invoker = invoker.clone();
            running.push(Box::pin(async move {
                let mut observe = |p: &LiveProgress| shared.borrow_mut().observe(i, p);
                let result = train(&train_options, invoker, &mut observe).await;
                (i, result)
            }));
            next += 1;
        }
        if running.is_empty() {
            if next >= options.trials.len() {
                break "every trial ran".to_string();
            }
            break ended.unwrap_or_else(|| "no trial could start".to_string());
        }
        tokio::select! {
            Some((i, result)) = running.next() => {
                let trial = &options.trials[i];
                let params = trial.params.clone();
                search.borrow_mut().finish(i, params, trial.options.as_ref().ok(), result);
            }
            _ = ticker.tick() => {
                let mut s = search.borrow_mut();
                s.enforce(options.max_time_s);
                let (t, spent) = (s.elapsed_s(), s.ledger.spent());
                s.cost_curve.push((t, spent));
                let progress = s.progress(options.trials.len());
                drop(s);
                let control = observe(&progress);
                let mut s = search.borrow_mut();
                match control {
                    Control::Continue => {}
                    Control::Kill => s.control = Control::Kill,
                    Control::Cancel | Control::Stop(_) => {
                        if s.control == Control::Continue {
                            s.control = Control::Cancel;
                        }
                    }
                }
            }
        }
    };
    let mut s = search.borrow_mut();
    let stop_reason = if s.control != Control::Continue {
        mlless_job::record::CANCELLED.to_string()
    } else {
        stop_reason
    };
    let progress = s.progress(options.trials.len());
    drop(s);
    // The last events; the search is over, so what the observer asks changes nothing.
    let _ = observe(&progress);
    let mut s = search.borrow_mut();
    let wall_s = s.elapsed_s();
    let spent = s.ledger.spent();
    s.cost_curve.push((wall_s, spent));
    let trials: Vec<TrialRecord> = s
        .trials
        .iter_mut()
        .enumerate()
        .map(|(i, t)| {
            t.ended.take().unwrap_or_else(|| TrialRecord {
                trial: i,
                params: options.trials[i].params.clone(),
                status: TrialStatus::NotStarted,
                stop_reason: None,
                error: None,
                run_url: None,
                best_metric: None,
                epochs: 0.0,
                steps: 0,
                wall_s: 0.0,
                cost_usd: 0.0,
                started_s: 0.0,
                test_metrics: Default::default(),
                rungs: Vec::new(),
                curve: Vec::new(),
            })
        })
        .collect();
    let (metric, direction) = s
        .metric
        .clone()
        .unwrap_or_else(|| (String::new(), Direction::Lower));
    let mut record = TuneRecord {
        format_version: TUNE_RECORD_VERSION,
        tune_id,
        started_at_unix_ms: started_unix_ms,
        wall_s,
        model: first_model.map_or(String::new(), |m| m.name().to_string()),
        metric,
        direction,
        budget_usd: options.budget_usd,
        spent_usd: trials.iter().map(|t| t.cost_usd).sum(),
        max_time_s: options.max_time_s,
        sampler: options.sampler,
        seed: options.seed,
        concurrency: options.concurrency,
        space: options.space.clone(),
        scheduler: options.scheduler.map(|config| SchedulerRecord {
            config,
            rungs: config.rungs(),
        }),
        stop_reason,
        trials,
        best: None,
        cost_curve: mlless_core::curve::thin(std::mem::take(&mut s.cost_curve), MAX_CURVE_POINTS),
    };
    record.best = record
        .leaderboard()
        .first()
        .and_then(|t| t.best_metric.filter(|v| v.is_finite()).map(|_| t.trial));
    info!(
        tune_id = record.tune_id,
        spent_usd = record.spent_usd,
        best = ?record.best,
        "the search ended: {}",
        record.stop_reason
    );
    Ok(record)
}
