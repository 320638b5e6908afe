//! A search under way: every trial's state, its rungs and the budget's ledger, and the decisions
//! that stop, start and finish trials.

use super::*;

/// A trial as the search follows it.
#[derive(Debug, Default)]
pub(super) struct TrialState {
    /// Seconds since the search started, when it started.
    pub(super) started_s: Option<f64>,
    /// Its record, once it ended.
    pub(super) ended: Option<TrialRecord>,
    /// Its latest progress.
    pub(super) live: Option<LiveProgress>,
    /// The next rung it is heading for.
    pub(super) next_rung: usize,
    /// Why the search asked it to stop.
    pub(super) stop: Option<String>,
    pub(super) rungs: Vec<RungRecord>,
    pub(super) curve: Vec<CurvePoint>,
    /// Its evaluations so far, each `[epochs done, seconds since its supervisor started,
    /// value]` (every one, diverged ones included), for the values at its rungs.
    pub(super) evals: Vec<[f64; 3]>,
    /// How many evaluations its progress has counted.
    pub(super) evaluations_seen: usize,
    /// The most it trains, in the search's unit.
    pub(super) max_units: f64,
}

impl TrialState {
    pub(super) fn running(&self) -> bool {
        self.started_s.is_some() && self.ended.is_none()
    }
}

/// The search's state, shared by its trials' `observe` callbacks and its own loop (one task).
pub(super) struct Search {
    pub(super) started: Instant,
    pub(super) started_unix_ms: u64,
    pub(super) ledger: Ledger,
    pub(super) unit: RungUnit,
    pub(super) config: Option<AshaConfig>,
    /// Built once the first trial names its metric (whose direction it needs).
    pub(super) asha: Option<Asha>,
    pub(super) metric: Option<(String, Direction)>,
    pub(super) trials: Vec<TrialState>,
    pub(super) events: Vec<TuneEvent>,
    /// What the search's own observer asked for all trials (cancel, kill).
    pub(super) control: Control,
    pub(super) cost_curve: Vec<(f64, f64)>,
}

impl Search {
    pub(super) fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    pub(super) fn units(&self, p: &LiveProgress) -> f64 {
        match self.unit {
            RungUnit::Epochs => p.epoch,
            RungUnit::Seconds => p.elapsed_s,
        }
    }

    pub(super) fn rungs(&self) -> &[f64] {
        self.asha.as_ref().map_or(&[], Asha::rungs)
    }

    /// The rungs of a search with a scheduler, before its metric is known.
    pub(super) fn planned_rungs(&self) -> Vec<f64> {
        self.config
            .as_ref()
            .map_or_else(Vec::new, AshaConfig::rungs)
    }

    /// What trial `i` must reach next: its next rung below its most, or its most.
    pub(super) fn target(&self, i: usize, rung: usize) -> f64 {
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
    pub(super) fn running_targets(&self) -> Vec<(usize, f64)> {
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

    pub(super) fn running(&self) -> usize {
        self.trials.iter().filter(|t| t.running()).count()
    }

    /// Asks trial `i` to stop for `reason` (once).
    pub(super) fn stop(&mut self, i: usize, reason: String) {
        if self.trials[i].stop.is_some() || !self.trials[i].running() {
            return;
        }
        info!(trial = i, %reason, "stopping a trial");
        self.ledger.stop_requested(i);
        self.trials[i].stop = Some(reason.clone());
        self.events.push(TuneEvent::Stopping { trial: i, reason });
    }

    /// Takes trial `i`'s progress; answers what it should do.
    pub(super) fn observe(&mut self, i: usize, p: &LiveProgress) -> Control {
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
    pub(super) fn rung_check(&mut self, i: usize, p: &LiveProgress) {
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
    pub(super) fn value_at(&self, i: usize, at: f64) -> Option<f64> {
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
    pub(super) fn catch_up_rungs(&mut self, i: usize) {
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
    pub(super) fn decide_rung(
        &mut self,
        i: usize,
        k: usize,
        at: f64,
        value: f64,
        live: bool,
    ) -> bool {
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
    pub(super) fn enforce(&mut self, max_time_s: Option<f64>) {
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
    pub(super) fn seconds_per_unit(&self) -> Option<f64> {
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
    pub(super) fn may_start(
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
    pub(super) fn progress(&mut self, trials: usize) -> SearchProgress {
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
    pub(super) fn finish(
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
