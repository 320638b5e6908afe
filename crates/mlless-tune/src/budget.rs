//! The dollar budget of a search, kept from the trials' bills as they accrue.
//!
//! The [`Ledger`] is fed every trial's bill so far ([`Ledger::observe`]: the driver's
//! `LiveProgress::bill_usd`, which counts what the run's record will bill — invocations,
//! always-on services, object-store requests) and, at its end, its bill ([`Ledger::finish`]).
//! From them it learns, per trial:
//!
//! - its **rate**, dollars per second over the last second or so;
//! - its **unit cost**, dollars per unit of training (epoch or second) since its first unit,
//!   and its **start-up**, what it cost before that;
//! - how long a trial goes on costing once it is asked to stop (the **tail**: the step in
//!   hand, the final evaluations, the model's write), as the longest seen, in seconds at the
//!   trial's rate.
//!
//! Three rules keep the search within the budget (`spent` is the bills of the trials that
//! ended plus the bills so far of those running):
//!
//! 1. [`Ledger::can_start`]: a trial is started only if `spent` + what the running trials need
//!    to reach their next rung and stop + what the new one needs to reach its first rung and
//!    stop fits the budget; a trial's need is estimated from the most expensive trial seen
//!    (start-up + unit cost × units, × [`ESTIMATE_MARGIN`]). Before any trial has trained a
//!    measurable part of a unit (or ended, which measures it over its whole run) there is no
//!    estimate, and trials start one at a time.
//! 2. [`Ledger::can_continue`]: a trial promoted at a rung goes on only if the budget pays for
//!    its next rung beside the others' needs.
//! 3. [`Ledger::to_stop`], the hard rule: every poll, the running trials, by priority, are
//!    kept only while `spent` + every running trial's tail + the kept ones' rate × one more
//!    poll fits; the others are stopped at once.
//!
//! ```
//! use mlless_tune::Ledger;
//! let mut ledger = Ledger::new(1.0)?;
//! ledger.observe(0, 1.0, 0.5, 0.10);    // trial 0: 1 s in, half an epoch, $0.10 so far
//! ledger.observe(0, 2.0, 1.0, 0.20);
//! assert!((ledger.rate(0) - 0.10).abs() < 1e-12);
//! assert!((ledger.unit_cost(0).unwrap() - 0.20).abs() < 1e-12);
//! assert!((ledger.spent() - 0.20).abs() < 1e-12);
//! # Ok::<(), mlless_tune::BudgetError>(())
//! ```

use std::collections::{BTreeMap, VecDeque};

/// Margin on the estimated cost of a trial not measured yet.
pub const ESTIMATE_MARGIN: f64 = 1.2;
/// The tail (seconds a trial goes on costing once asked to stop) assumed before one is seen.
pub const DEFAULT_TAIL_S: f64 = 3.0;
/// The tail is taken as the longest seen times this…
pub const TAIL_MARGIN: f64 = 1.5;
/// …and at least this many seconds.
pub const MIN_TAIL_S: f64 = 1.0;
/// Seconds of history a trial's rate is measured over.
pub const RATE_WINDOW_S: f64 = 1.0;
/// A trial's unit cost is measured once it has trained at least this share of a unit since
/// its first.
pub const MIN_UNITS_MEASURED: f64 = 0.05;

/// A budget that cannot be one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// Not a positive finite number of dollars.
    #[error("--budget-usd must be a positive number of dollars, not {0}")]
    Budget(f64),
}

/// One trial's spending as the ledger knows it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Spend {
    /// `(seconds since the trial started, units trained, bill so far)`, the last
    /// [`RATE_WINDOW_S`] and one before.
    recent: VecDeque<(f64, f64, f64)>,
    /// The first sample with units trained.
    first_unit: Option<(f64, f64, f64)>,
    /// Dollars per unit since the first unit, once measurable.
    unit_cost: Option<f64>,
    /// The bill at the trial's end.
    final_usd: Option<f64>,
    /// The bill and the rate when the search asked it to stop.
    stop_mark: Option<(f64, f64)>,
}

impl Spend {
    fn latest(&self) -> Option<(f64, f64, f64)> {
        self.recent.back().copied()
    }

    fn bill(&self) -> f64 {
        self.final_usd
            .unwrap_or_else(|| self.latest().map_or(0.0, |s| s.2))
    }

    /// The seconds it has run, as of its latest sample.
    fn duration_s(&self) -> f64 {
        self.latest().map_or(0.0, |s| s.0)
    }

    /// Its rate as a new trial's estimate takes it: while it runs, its recent rate; once it
    /// ended, its mean (its bill over its duration), since the last samples of an ended trial
    /// hold its final bill, which settles at once what the live bill had not counted yet
    /// (the workers' last requests) and is no rate at which a trial spends.
    fn estimate_rate(&self) -> f64 {
        match self.final_usd {
            Some(bill) if self.duration_s() > 0.0 => (bill / self.duration_s()).max(0.0),
            Some(_) => 0.0,
            None => self.rate(),
        }
    }

    fn rate(&self) -> f64 {
        let (Some(&(t0, _, b0)), Some(&(t1, _, b1))) = (self.recent.front(), self.recent.back())
        else {
            return 0.0;
        };
        if t1 - t0 >= RATE_WINDOW_S / 2.0 {
            ((b1 - b0) / (t1 - t0)).max(0.0)
        } else if t1 > 0.0 {
            // Not enough history yet: the average since the start.
            (b1 / t1).max(0.0)
        } else {
            0.0
        }
    }

    /// What it cost before its first unit: its bill then less the units' share.
    fn startup(&self) -> Option<f64> {
        let (_, units, bill) = self.first_unit?;
        Some((bill - self.unit_cost.unwrap_or(0.0) * units).max(0.0))
    }
}

/// The budget and what the trials have spent of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    budget_usd: f64,
    trials: BTreeMap<usize, Spend>,
    /// The longest tail seen, seconds.
    tail_seen_s: Option<f64>,
}

impl Ledger {
    /// A ledger of `budget_usd` dollars.
    pub fn new(budget_usd: f64) -> Result<Self, BudgetError> {
        if !(budget_usd > 0.0 && budget_usd.is_finite()) {
            return Err(BudgetError::Budget(budget_usd));
        }
        Ok(Self {
            budget_usd,
            trials: BTreeMap::new(),
            tail_seen_s: None,
        })
    }

    /// The budget, dollars.
    pub fn budget(&self) -> f64 {
        self.budget_usd
    }

    /// Takes trial `trial`'s bill so far, `bill_usd`, after `t_s` seconds and `units` of
    /// training. Samples older than the last are ignored.
    pub fn observe(&mut self, trial: usize, t_s: f64, units: f64, bill_usd: f64) {
        if !(t_s.is_finite() && units.is_finite() && bill_usd.is_finite()) {
            return;
        }
        let spend = self.trials.entry(trial).or_default();
        if spend.final_usd.is_some() || spend.latest().is_some_and(|(t, _, _)| t_s < t) {
            return;
        }
        spend.recent.push_back((t_s, units, bill_usd));
        while spend.recent.len() > 2
            && spend
                .recent
                .get(1)
                .is_some_and(|&(t, _, _)| t_s - t >= RATE_WINDOW_S)
        {
            spend.recent.pop_front();
        }
        match spend.first_unit {
            None if units > 0.0 => spend.first_unit = Some((t_s, units, bill_usd)),
            Some((_, u0, b0)) if units - u0 >= MIN_UNITS_MEASURED => {
                spend.unit_cost = Some(((bill_usd - b0) / (units - u0)).max(0.0));
            }
            _ => {}
        }
    }

    /// Marks that the search asked trial `trial` to stop now, so that its tail is measured.
    pub fn stop_requested(&mut self, trial: usize) {
        if let Some(spend) = self.trials.get_mut(&trial)
            && spend.stop_mark.is_none()
        {
            spend.stop_mark = Some((spend.bill(), spend.rate()));
        }
    }

    /// Takes the bill of trial `trial`, which has ended (for a trial that failed without one,
    /// its bill so far).
    pub fn finish(&mut self, trial: usize, bill_usd: f64) {
        let spend = self.trials.entry(trial).or_default();
        let bill_usd = if bill_usd.is_finite() {
            bill_usd.max(spend.bill())
        } else {
            spend.bill()
        };
        if let Some((at_stop, rate)) = spend.stop_mark
            && rate > 0.0
        {
            let tail = (bill_usd - at_stop).max(0.0) / rate;
            self.tail_seen_s = Some(self.tail_seen_s.map_or(tail, |t| t.max(tail)));
        }
        // A trial too short to measure its unit cost while it ran (its first sample with units
        // trained was its last) is measured over its whole run: every dollar counted against
        // its units, start-up included.
        if spend.unit_cost.is_none()
            && let Some((_, units, _)) = spend.latest()
            && units > 0.0
        {
            spend.unit_cost = Some(bill_usd / units);
            if spend.first_unit.is_none() {
                spend.first_unit = spend.latest();
            }
        }
        spend.final_usd = Some(bill_usd);
    }

    /// What every trial has spent: the ended ones' bills and the running ones' so far.
    pub fn spent(&self) -> f64 {
        self.trials.values().map(Spend::bill).sum()
    }

    /// What trial `trial` has spent.
    pub fn spent_by(&self, trial: usize) -> f64 {
        self.trials.get(&trial).map_or(0.0, Spend::bill)
    }

    /// Trial `trial`'s rate, dollars per second (0 before it is known or once it ended).
    pub fn rate(&self, trial: usize) -> f64 {
        self.trials
            .get(&trial)
            .filter(|s| s.final_usd.is_none())
            .map_or(0.0, Spend::rate)
    }

    /// Trial `trial`'s dollars per unit, once measured.
    pub fn unit_cost(&self, trial: usize) -> Option<f64> {
        self.trials.get(&trial).and_then(|s| s.unit_cost)
    }

    /// Seconds a trial is assumed to go on costing once asked to stop: the longest tail
    /// seen × [`TAIL_MARGIN`]; before any, [`DEFAULT_TAIL_S`]. A stop's tail (the step in
    /// hand, the final evaluations, the model's write) is what every trial does at its end, so
    /// it does not outlast a whole trial: neither the default nor the floor of
    /// [`MIN_TAIL_S`] goes above the longest trial that ended × [`TAIL_MARGIN`].
    pub fn tail_s(&self) -> f64 {
        let cap = self
            .trials
            .values()
            .filter(|s| s.final_usd.is_some())
            .map(Spend::duration_s)
            .filter(|&d| d > 0.0)
            .fold(None, |m: Option<f64>, d| Some(m.map_or(d, |m| m.max(d))))
            .map_or(f64::INFINITY, |d| d * TAIL_MARGIN);
        match self.tail_seen_s {
            Some(t) => (t * TAIL_MARGIN).max(MIN_TAIL_S.min(cap)),
            None => DEFAULT_TAIL_S.min(cap),
        }
    }

    /// The most expensive unit cost, rate and start-up seen, if any trial measured one.
    fn worst(&self) -> Option<(f64, f64, f64)> {
        let unit = self
            .trials
            .values()
            .filter_map(|s| s.unit_cost)
            .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c))))?;
        let rate = self
            .trials
            .values()
            .map(Spend::estimate_rate)
            .fold(0.0, f64::max);
        let startup = self
            .trials
            .values()
            .filter_map(Spend::startup)
            .fold(0.0, f64::max);
        Some((unit, rate, startup))
    }

    /// What a trial not started yet is estimated to cost to train `units` and stop: the
    /// worst start-up and unit cost seen, plus a tail at the worst rate seen, ×
    /// [`ESTIMATE_MARGIN`]; `None` before any trial has measured its unit cost.
    pub fn new_trial_cost(&self, units: f64) -> Option<f64> {
        let (unit, rate, startup) = self.worst()?;
        Some(ESTIMATE_MARGIN * (startup + unit * units.max(0.0) + rate * self.tail_s()))
    }

    /// What trial `trial` still needs to reach `units` and stop: its own unit cost (or the
    /// worst seen) times the units left, and its tail; for a trial without a sample yet, a
    /// new trial's cost.
    pub fn need(&self, trial: usize, units: f64) -> f64 {
        let Some(spend) = self.trials.get(&trial).filter(|s| s.latest().is_some()) else {
            return self.new_trial_cost(units).unwrap_or(0.0);
        };
        if spend.final_usd.is_some() {
            return 0.0;
        }
        let (_, done, _) = spend.latest().unwrap_or_default();
        let left = (units - done).max(0.0);
        let unit = spend
            .unit_cost
            .or_else(|| self.worst().map(|w| w.0))
            .unwrap_or(0.0);
        let tail = spend.rate() * self.tail_s();
        match spend.unit_cost {
            Some(_) => unit * left + tail,
            // Not measured yet: estimated as a new trial's would be.
            None => ESTIMATE_MARGIN * unit * left + tail,
        }
    }

    /// Whether a new trial that must reach `units` fits beside the running trials `running`
    /// (each with the units of its next rung): `None` before there is an estimate.
    pub fn can_start(&self, running: &[(usize, f64)], units: f64) -> Option<bool> {
        let cost = self.new_trial_cost(units)?;
        Some(self.committed(running, None) + cost <= self.budget_usd)
    }

    /// Whether trial `trial`, promoted, can be paid to reach `units` beside the others of
    /// `running` (each with the units of its next rung; `trial` itself is skipped there).
    pub fn can_continue(&self, trial: usize, units: f64, running: &[(usize, f64)]) -> bool {
        self.committed(running, Some(trial)) + self.need(trial, units) <= self.budget_usd
    }

    /// What is spent plus what the running trials need to reach their next rung and stop,
    /// leaving out `skip`.
    fn committed(&self, running: &[(usize, f64)], skip: Option<usize>) -> f64 {
        self.spent()
            + running
                .iter()
                .filter(|(t, _)| Some(*t) != skip)
                .map(|&(t, units)| self.need(t, units))
                .sum::<f64>()
    }

    /// The hard rule: of the running trials `by_priority` (the one to keep longest first),
    /// those to stop now so that the search cannot overrun the budget before the next poll,
    /// `poll_s` seconds away. Every running trial's tail is counted, stopped or not.
    pub fn to_stop(&self, by_priority: &[usize], poll_s: f64) -> Vec<usize> {
        let tail = self.tail_s();
        let mut total = self.spent()
            + by_priority
                .iter()
                .map(|&t| self.rate(t) * tail)
                .sum::<f64>();
        let mut stop = Vec::new();
        for &t in by_priority {
            let more = self.rate(t) * poll_s;
            if stop.is_empty() && total + more <= self.budget_usd {
                total += more;
            } else {
                stop.push(t);
            }
        }
        stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trial that spends `rate` $/s and trains `per_s` units a second from `start` on (its
    /// first `startup` dollars before training), observed every 0.1 s for `seconds`.
    fn run(ledger: &mut Ledger, trial: usize, rate: f64, per_s: f64, startup: f64, seconds: f64) {
        for i in 0..=(seconds * 10.0).round() as u32 {
            let t = f64::from(i) / 10.0;
            let units = (t - 1.0).max(0.0) * per_s;
            let bill = if t < 1.0 {
                startup * t
            } else {
                startup + rate * (t - 1.0)
            };
            ledger.observe(trial, t, units, bill);
        }
    }

    #[test]
    fn budgets_are_positive() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(Ledger::new(bad), Err(BudgetError::Budget(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn rates_unit_costs_and_start_up_are_measured() {
        let mut ledger = Ledger::new(10.0).unwrap();
        // $0.05 of start-up over 1 s, then $0.1 a second at 0.5 epochs a second.
        run(&mut ledger, 0, 0.1, 0.5, 0.05, 5.0);
        assert!((ledger.rate(0) - 0.1).abs() < 1e-9, "{}", ledger.rate(0));
        assert!((ledger.unit_cost(0).unwrap() - 0.2).abs() < 1e-9);
        assert!((ledger.spent() - 0.45).abs() < 1e-9);
        // A new trial to 2 epochs: (0.05 + 0.2·2 + 0.1·3 s of tail) × 1.2.
        let cost = ledger.new_trial_cost(2.0).unwrap();
        assert!((cost - 1.2 * (0.05 + 0.4 + 0.3)).abs() < 1e-6, "{cost}");
        // What trial 0 needs to reach 3 epochs (it has 2): one more epoch and its tail.
        assert!((ledger.need(0, 3.0) - (0.2 + 0.3)).abs() < 1e-9);
        assert!((ledger.need(0, 1.0) - 0.1 * 3.0).abs() < 1e-9); // past it: the tail alone
        // Out-of-order and non-finite samples are ignored.
        ledger.observe(0, 1.0, 0.0, 100.0);
        ledger.observe(0, f64::NAN, 0.0, 100.0);
        assert!((ledger.spent() - 0.45).abs() < 1e-9);
    }

    #[test]
    fn without_a_measured_trial_there_is_no_estimate() {
        let mut ledger = Ledger::new(1.0).unwrap();
        assert_eq!(ledger.new_trial_cost(1.0), None);
        assert_eq!(ledger.can_start(&[], 1.0), None);
        ledger.observe(0, 0.5, 0.0, 0.01);
        assert_eq!(ledger.can_start(&[(0, 1.0)], 1.0), None);
        ledger.observe(0, 0.6, 0.01, 0.011);
        ledger.observe(0, 0.7, 0.02, 0.012);
        // 0.02 units since the first: not measurable yet.
        assert_eq!(ledger.unit_cost(0), None);
        ledger.observe(0, 0.8, 0.07, 0.017);
        assert!(ledger.unit_cost(0).is_some());
        assert!(ledger.can_start(&[(0, 1.0)], 1.0).is_some());
    }

    #[test]
    fn trials_start_only_while_the_budget_pays_their_first_rung() {
        let mut ledger = Ledger::new(1.1).unwrap();
        run(&mut ledger, 0, 0.1, 1.0, 0.0, 2.0); // $0.1 spent, 1 epoch, $0.1 an epoch
        // Trial 0 heads for 3 epochs: it needs 2 more ($0.2) and its tail ($0.3); a new
        // trial to 1 epoch needs (0.1 + 0.3) × 1.2 = $0.48: 0.1 + 0.5 + 0.48 ≤ 1.1.
        assert_eq!(ledger.can_start(&[(0, 3.0)], 1.0), Some(true));
        // Heading for 9 epochs, trial 0 needs $1.1: no room.
        assert_eq!(ledger.can_start(&[(0, 9.0)], 1.0), Some(false));
        // Trial 0 alone can continue to 7 epochs (0.1 + 0.6 + 0.3 = 1.0), not to 9.
        assert!(ledger.can_continue(0, 7.0, &[(0, 7.0)]));
        assert!(!ledger.can_continue(0, 9.0, &[(0, 9.0)]));
        // Beside a second trial, not measured yet, heading for 1 epoch (1.2 × $0.1 and no
        // tail at its rate of 0 so far): to 5 epochs (0.1 + 0.12 + 0.4 + 0.3), not to 7.
        run(&mut ledger, 1, 0.1, 1.0, 0.0, 1.0);
        assert!((ledger.need(1, 1.0) - 0.12).abs() < 1e-9);
        assert!(ledger.can_continue(0, 5.0, &[(0, 5.0), (1, 1.0)]));
        assert!(!ledger.can_continue(0, 7.0, &[(0, 7.0), (1, 1.0)]));
    }

    /// Issue 40, defect 13: a budget of $0.05 and trials of about $0.0036 that each run a
    /// fraction of a second. The first trial's end must not make the next trial's first rung
    /// look dearer than the budget left: its final bill (which settles requests the live bill
    /// had not counted yet) is no rate of spending, and a stop's tail is no longer than a
    /// whole trial.
    #[test]
    fn a_small_budget_pays_for_many_short_trials() {
        let mut ledger = Ledger::new(0.05).unwrap();
        ledger.observe(0, 0.1, 1.5, 0.0012);
        ledger.observe(0, 0.2, 3.0, 0.0036);
        ledger.finish(0, 0.0036);
        // The tail is at most 1.5 × the 0.2 s trial, at its mean rate of $0.018 a second.
        assert!((ledger.tail_s() - 0.3).abs() < 1e-9, "{}", ledger.tail_s());
        let first_rung = ledger.new_trial_cost(1.0).unwrap();
        assert!(
            (first_rung - 1.2 * (0.0016 + 0.018 * 0.3)).abs() < 1e-9,
            "{first_rung}"
        );
        // So the next trials start, two at once, …
        assert_eq!(ledger.can_start(&[], 1.0), Some(true));
        assert_eq!(ledger.can_start(&[(1, 1.0)], 1.0), Some(true));
        // … and a search of whole trials goes on while most of the budget is left to spend:
        // 0.0036 + 2 trials running + a third fits below $0.05.
        let whole = ledger.new_trial_cost(3.0).unwrap();
        assert!(ledger.spent() + 3.0 * whole <= 0.05, "{whole}");
        // A trial stopped at a rung goes on for 0.1 s: its tail, × 1.5, is not raised to the
        // 1 s floor, longer than any trial.
        ledger.observe(1, 0.1, 1.5, 0.0018);
        ledger.stop_requested(1);
        ledger.observe(1, 0.2, 2.0, 0.0036);
        ledger.finish(1, 0.0036);
        assert!((ledger.tail_s() - 0.3).abs() < 1e-9, "{}", ledger.tail_s());
        assert_eq!(ledger.can_start(&[(2, 1.0), (3, 1.0)], 1.0), Some(true));
    }

    /// A trial that ended before a second sample with units trained (a short trial between
    /// two polls) is measured over its whole run, so that the next trials need not start one
    /// at a time for want of an estimate.
    #[test]
    fn a_trial_seen_only_at_its_end_gives_an_estimate() {
        let mut ledger = Ledger::new(1.0).unwrap();
        ledger.observe(0, 0.12, 3.0, 0.0033);
        assert_eq!(ledger.new_trial_cost(1.0), None);
        ledger.finish(0, 0.0033);
        assert!((ledger.unit_cost(0).unwrap() - 0.0011).abs() < 1e-12);
        assert_eq!(ledger.can_start(&[(1, 3.0)], 3.0), Some(true));
    }

    #[test]
    fn the_hard_rule_stops_the_lowest_priority_first() {
        let mut ledger = Ledger::new(1.0).unwrap();
        run(&mut ledger, 0, 0.1, 1.0, 0.0, 3.0); // $0.2
        run(&mut ledger, 1, 0.1, 1.0, 0.0, 3.0); // $0.2
        // Spent 0.4, tails 2 × 0.3: 1.0 already — every more poll would overrun.
        assert_eq!(ledger.to_stop(&[1, 0], 0.2), vec![1, 0]);
        let mut roomy = Ledger::new(1.03).unwrap();
        run(&mut roomy, 0, 0.1, 1.0, 0.0, 3.0);
        run(&mut roomy, 1, 0.1, 1.0, 0.0, 3.0);
        // Room for one more poll of one trial (0.02), not of two: the first kept.
        assert_eq!(roomy.to_stop(&[1, 0], 0.2), vec![0]);
        assert!(roomy.to_stop(&[1, 0], 0.1).is_empty());
    }

    #[test]
    fn the_tail_is_learnt_from_the_stops() {
        let mut ledger = Ledger::new(10.0).unwrap();
        assert_eq!(ledger.tail_s(), DEFAULT_TAIL_S);
        run(&mut ledger, 0, 0.1, 1.0, 0.0, 3.0);
        ledger.stop_requested(0);
        // It went on for 0.4 s at $0.1 a second.
        ledger.finish(0, 0.2 + 0.04);
        assert!((ledger.tail_s() - MIN_TAIL_S).abs() < 1e-9);
        run(&mut ledger, 1, 0.1, 1.0, 0.0, 3.0);
        ledger.stop_requested(1);
        ledger.finish(1, 0.2 + 0.2); // 2 s
        assert!((ledger.tail_s() - 2.0 * TAIL_MARGIN).abs() < 1e-9);
        // An ended trial counts its bill, and costs nothing more.
        assert!((ledger.spent() - 0.64).abs() < 1e-9);
        assert_eq!(ledger.rate(1), 0.0);
        assert_eq!(ledger.need(1, 5.0), 0.0);
        // A bill below the last sample (a failed trial's) keeps the sample.
        run(&mut ledger, 2, 0.1, 1.0, 0.0, 2.0);
        ledger.finish(2, f64::NAN);
        assert!((ledger.spent_by(2) - 0.1).abs() < 1e-9);
    }
}
