//! Asynchronous successive halving (ASHA; Li et al., "A System for Massively Parallel
//! Hyperparameter Tuning", MLSys 2020), in its stopping form (Ray Tune's
//! `AsyncHyperBandScheduler`, Optuna's `SuccessiveHalvingPruner`).
//!
//! Rungs are at `r · η^k` units of training (epochs or seconds) below the most a trial may
//! train, `R`. A trial that reaches rung `k` reports its validation metric there (the best so
//! far: the model a stopped trial keeps); among the `n` values reported at that rung so far,
//! its own included, it goes on if it ranks in the top `max(1, ⌊n / η⌋)`, and is stopped
//! otherwise. Nothing waits for a rung to fill, so trials run concurrently and the first to
//! reach a rung goes on; later ones must beat the rung's record. Each rung keeps about a
//! `1/η` share of the trials that reach it, so the search spends about `log_η(R/r) + 1` times
//! the budget of one full trial per `R/r` trials started, instead of `R/r` full trials.
//!
//! ```
//! use mlless_core::validation::Direction;
//! use mlless_tune::{Asha, AshaConfig, RungUnit};
//! let config = AshaConfig { unit: RungUnit::Epochs, min: 1.0, eta: 3, max: 9.0 };
//! let mut asha = Asha::new(config, Direction::Lower)?;
//! assert_eq!(asha.rungs(), [1.0, 3.0]);
//! assert!(asha.report(0, 0, 0.50).promoted());   // the first at a rung goes on
//! assert!(!asha.report(1, 0, 0.60).promoted());  // 2nd of 2: only the top 1 goes on
//! assert!(asha.report(2, 0, 0.40).promoted());   // 1st of 3
//! # Ok::<(), mlless_tune::AshaError>(())
//! ```

use mlless_core::validation::Direction;
use serde::{Deserialize, Serialize};

/// What the rungs count (`--rung-unit`: with the feature `clap`, the CLI's value, with the help
/// of `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum RungUnit {
    /// Epochs trained.
    Epochs,
    /// Seconds since the trial started (needs --trial-time).
    Seconds,
}

impl RungUnit {
    /// `3 epochs`, `10 s`.
    pub fn show(self, amount: f64) -> String {
        match self {
            RungUnit::Epochs if amount == 1.0 => "1 epoch".to_string(),
            RungUnit::Epochs => format!("{amount} epochs"),
            RungUnit::Seconds => format!("{amount} s"),
        }
    }
}

/// Where the rungs are.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AshaConfig {
    /// What the rungs count.
    pub unit: RungUnit,
    /// The first rung (`r`), in `unit`s.
    pub min: f64,
    /// The reduction factor `η`: a rung keeps the top `1/η` of the trials that reach it.
    pub eta: u32,
    /// The most a trial trains (`R`), in `unit`s: no rung at or above it.
    pub max: f64,
}

/// Why a scheduler cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AshaError {
    /// `η` below 2.
    #[error("--eta must be at least 2 (a rung keeps the top 1/eta), not {0}")]
    Eta(u32),
    /// A first rung that is not a positive number.
    #[error("--min-rung must be a positive number, not {0}")]
    Min(f64),
    /// A most that is not a positive number.
    #[error("the most a trial trains must be a positive number, not {0}")]
    Max(f64),
}

impl AshaConfig {
    /// Checks the numbers.
    pub fn validate(&self) -> Result<(), AshaError> {
        if self.eta < 2 {
            return Err(AshaError::Eta(self.eta));
        }
        if !(self.min > 0.0 && self.min.is_finite()) {
            return Err(AshaError::Min(self.min));
        }
        if !(self.max > 0.0 && self.max.is_finite()) {
            return Err(AshaError::Max(self.max));
        }
        Ok(())
    }

    /// The rungs, `min · eta^k` below `max`, ascending (none if `min ≥ max`).
    pub fn rungs(&self) -> Vec<f64> {
        let mut rungs = Vec::new();
        let mut r = self.min;
        // Relative slack, so that 1·3·3 = 9 is not a rung below a max of 9 by rounding.
        while r < self.max * (1.0 - 1e-9) && rungs.len() < 64 {
            rungs.push(r);
            r *= f64::from(self.eta);
        }
        rungs
    }
}

/// The verdict on a trial at a rung.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RungDecision {
    /// Its rank among the values reported at the rung so far (1: best; ties share a rank).
    pub rank: usize,
    /// How many of them go on: `max(1, ⌊n / η⌋)`.
    pub keep: usize,
    /// How many values the rung has, this one included.
    pub of: usize,
}

impl RungDecision {
    /// Whether the trial goes on.
    pub fn promoted(&self) -> bool {
        self.rank <= self.keep
    }
}

/// The scheduler: the values reported at each rung.
#[derive(Debug, Clone, PartialEq)]
pub struct Asha {
    config: AshaConfig,
    direction: Direction,
    rungs: Vec<f64>,
    /// Per rung, `(trial, value)` in the order reported.
    values: Vec<Vec<(usize, f64)>>,
}

impl Asha {
    /// A scheduler with `config`'s rungs, for a metric that is better in `direction`.
    pub fn new(config: AshaConfig, direction: Direction) -> Result<Self, AshaError> {
        config.validate()?;
        let rungs = config.rungs();
        Ok(Self {
            config,
            direction,
            values: vec![Vec::new(); rungs.len()],
            rungs,
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &AshaConfig {
        &self.config
    }

    /// The rungs, ascending, in the config's unit.
    pub fn rungs(&self) -> &[f64] {
        &self.rungs
    }

    /// The values reported at rung `k`, `(trial, value)` in the order they came.
    pub fn values(&self, k: usize) -> &[(usize, f64)] {
        self.values.get(k).map_or(&[], Vec::as_slice)
    }

    /// Records `value` of `trial` at rung `k` and says whether the trial goes on. A value
    /// that is not finite (a diverged trial) ranks below every finite one. A rung `k` beyond
    /// the last goes on (there is nothing to compare against).
    pub fn report(&mut self, trial: usize, k: usize, value: f64) -> RungDecision {
        let Some(values) = self.values.get_mut(k) else {
            return RungDecision {
                rank: 1,
                keep: 1,
                of: 1,
            };
        };
        values.push((trial, value));
        let direction = self.direction;
        let better = |a: f64, b: f64| match (a.is_finite(), b.is_finite()) {
            (true, false) => true,
            (false, _) => false,
            (true, true) => match direction {
                Direction::Lower => a < b,
                Direction::Higher => a > b,
            },
        };
        let of = values.len();
        let rank = 1 + values.iter().filter(|&&(_, v)| better(v, value)).count();
        let keep = (of / self.config.eta as usize).max(1);
        RungDecision { rank, keep, of }
    }
}

/// The value a trial reports at the rung `at`, from its evaluations `(progress, value)` in the
/// order made (progress in the rung's unit): the best of them up to and including the first at
/// or past the rung, the model a trial stopped there keeps (a value that is not finite ranks
/// below every finite one); `None` while no evaluation has reached the rung. Later evaluations
/// do not count: a trial seen after it passed a rung reports what it had at the rung.
pub fn value_at_rung(points: &[(f64, f64)], at: f64, direction: Direction) -> Option<f64> {
    let mut best: Option<f64> = None;
    for &(progress, value) in points {
        if crate::is_better(direction, Some(value), best) {
            best = Some(value);
        }
        if progress >= at - 1e-9 {
            return Some(best.unwrap_or(value));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(min: f64, eta: u32, max: f64) -> AshaConfig {
        AshaConfig {
            unit: RungUnit::Epochs,
            min,
            eta,
            max,
        }
    }

    #[test]
    fn rungs_are_geometric_below_the_max() {
        assert_eq!(config(1.0, 3, 9.0).rungs(), [1.0, 3.0]);
        assert_eq!(config(1.0, 3, 10.0).rungs(), [1.0, 3.0, 9.0]);
        assert_eq!(config(1.0, 2, 8.0).rungs(), [1.0, 2.0, 4.0]);
        assert_eq!(config(0.5, 4, 8.0).rungs(), [0.5, 2.0]);
        assert!(config(10.0, 3, 10.0).rungs().is_empty());
        assert_eq!(
            Asha::new(config(1.0, 1, 9.0), Direction::Lower),
            Err(AshaError::Eta(1))
        );
        assert!(Asha::new(config(0.0, 3, 9.0), Direction::Lower).is_err());
        assert!(Asha::new(config(f64::NAN, 3, 9.0), Direction::Lower).is_err());
        assert!(Asha::new(config(1.0, 3, f64::INFINITY), Direction::Lower).is_err());
        assert_eq!(RungUnit::Epochs.show(1.0), "1 epoch");
        assert_eq!(RungUnit::Epochs.show(3.0), "3 epochs");
        assert_eq!(RungUnit::Seconds.show(2.5), "2.5 s");
    }

    #[test]
    fn a_rung_keeps_the_top_third() {
        let mut asha = Asha::new(config(1.0, 3, 27.0), Direction::Lower).unwrap();
        // Nine trials reach rung 0 in this order; lower is better.
        let values = [0.5, 0.7, 0.4, 0.9, 0.45, 0.3, 0.8, 0.6, 0.35];
        let promoted: Vec<bool> = values
            .iter()
            .enumerate()
            .map(|(t, &v)| asha.report(t, 0, v).promoted())
            .collect();
        // 1st: alone, on. 2nd (0.7 of 0.5, 0.7): keep 1, rank 2: off. 3rd (0.4): rank 1 of 3,
        // keep 1: on. 4th (0.9): off. 5th (0.45): rank 2 of 5, keep 1: off. 6th (0.3): rank 1
        // of 6, keep 2: on. 7th (0.8): off. 8th (0.6): rank 5 of 8, keep 2: off. 9th (0.35):
        // rank 2 of 9, keep 3: on.
        assert_eq!(
            promoted,
            [true, false, true, false, false, true, false, false, true]
        );
        assert_eq!(asha.values(0).len(), 9);
        assert!(asha.values(5).is_empty());
        // The rungs are independent: the first at rung 1 goes on.
        assert!(asha.report(0, 1, 0.49).promoted());
        // Beyond the last rung: on.
        assert!(asha.report(0, 9, 1.0).promoted());
    }

    /// Issue 40, defect 13: a rung records the trial's value at the rung's epoch, not its best
    /// at the time the search looked (a trial seen after it passed the rung).
    #[test]
    fn a_rung_takes_the_value_at_its_epoch() {
        // Evaluations every epoch (a batch past each); lower is better.
        let curve = [(1.01, 0.3489), (2.0, 0.33), (3.01, 0.3249)];
        assert_eq!(value_at_rung(&curve, 1.0, Direction::Lower), Some(0.3489));
        assert_eq!(value_at_rung(&curve, 2.0, Direction::Lower), Some(0.33));
        assert_eq!(value_at_rung(&curve, 4.0, Direction::Lower), None);
        assert_eq!(value_at_rung(&[], 1.0, Direction::Lower), None);
        // The best up to the rung: an earlier evaluation better than the one at the rung.
        let bumpy = [(0.5, 0.30), (1.0, 0.35), (1.5, 0.20)];
        assert_eq!(value_at_rung(&bumpy, 1.0, Direction::Lower), Some(0.30));
        assert_eq!(value_at_rung(&bumpy, 1.0, Direction::Higher), Some(0.35));
        // A diverged evaluation is no best; one that diverged throughout reports NaN.
        let diverged = [(0.5, f64::NAN), (1.0, 0.6)];
        assert_eq!(value_at_rung(&diverged, 1.0, Direction::Lower), Some(0.6));
        let nan = value_at_rung(&[(1.0, f64::NAN)], 1.0, Direction::Lower);
        assert!(nan.is_some_and(f64::is_nan));
    }

    #[test]
    fn higher_is_better_for_accuracy_and_auc() {
        let mut asha = Asha::new(config(1.0, 2, 8.0), Direction::Higher).unwrap();
        assert!(asha.report(0, 0, 0.8).promoted());
        assert!(asha.report(1, 0, 0.9).promoted()); // rank 1 of 2, keep 1
        let d = asha.report(2, 0, 0.85);
        assert_eq!((d.rank, d.keep, d.of), (2, 1, 3));
        assert!(!d.promoted());
        assert!(asha.report(3, 0, 0.85).promoted()); // rank 2 of 4 (a tie), keep 2
    }

    #[test]
    fn a_diverged_trial_ranks_last_and_ties_share_a_rank() {
        let mut asha = Asha::new(config(1.0, 2, 8.0), Direction::Lower).unwrap();
        assert!(asha.report(0, 0, f64::NAN).promoted()); // alone
        assert!(asha.report(1, 0, 0.5).promoted()); // a finite value beats it
        let d = asha.report(2, 0, f64::INFINITY);
        assert_eq!(d.rank, 2); // below 0.5, level with the NaN
        assert!(!d.promoted());
        assert!(asha.report(3, 0, 0.5).promoted()); // tied first, keep 2
    }
}
