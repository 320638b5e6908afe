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

mod search;
use crate::{Mismatch, NeedsValidation, Refusal};
use search::*;
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
    if options.trials.is_empty() {
        return Err(Refusal::NoTrials.into());
    }
    if options.concurrency == 0 {
        return Err(Refusal::AtLeastOne {
            option: "--concurrency",
        }
        .into());
    }
    Ledger::new(options.budget_usd).map_err(Refusal::Budget)?;
    if let Some(t) = options.max_time_s
        && !(t > 0.0 && t.is_finite())
    {
        return Err(Refusal::OutOfRange {
            option: "--max-time",
            range: "a positive number of seconds",
            value: t,
        }
        .into());
    }
    if let Some(config) = &options.scheduler {
        config.validate().map_err(Refusal::Scheduler)?;
    }
    let mut checked: Vec<&str> = Vec::new();
    // The most workers of a trial, for the functions that run at once.
    let mut most_workers = 0u32;
    for trial in &options.trials {
        let Ok(train) = &trial.options else { continue };
        train
            .validate_for(invoker)
            .map_err(|source| Refusal::Trial {
                params: trial.params.to_string(),
                source,
            })?;
        most_workers = most_workers.max(train.training.workers);
        if options.unit == RungUnit::Seconds && train.training.stop.max_time_s.is_none() {
            return Err(Refusal::RungsInSeconds.into());
        }
        let url = train.data_url.as_str();
        if checked.contains(&url) {
            continue;
        }
        let dataset = Dataset::open(url).await?;
        if dataset.batches(Split::Validation) == 0 {
            return Err(Mismatch::NoValidationSet {
                needed_by: NeedsValidation::Search,
                data_url: train.data_url.to_string(),
            }
            .into());
        }
        checked.push(url);
    }
    // The trials that run at once, each a fleet and its supervisor.
    let at_once = u64::from(options.concurrency).min(options.trials.len() as u64);
    let functions = at_once * (u64::from(most_workers) + 1);
    if let Some(max) = invoker.max_concurrent()
        && functions > u64::from(max)
    {
        return Err(Refusal::TooManyFunctions {
            concurrency: options.concurrency,
            trials: at_once,
            workers: most_workers,
            functions,
            platform: invoker.platform().to_string(),
            max,
        }
        .into());
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
    let ledger = Ledger::new(options.budget_usd).map_err(Refusal::Budget)?;
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
                        Err(Refusal::TrialOptions(e.clone()).into()),
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
