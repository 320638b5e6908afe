//! The pure parts of `mlless tune`, mlless's serverless hyperparameter search: no I/O, no
//! async. The runtime (`mlless_runtime::tune`) runs the trials, each an ordinary training job
//! with its own fleet of functions and its own run record, and asks these parts what to do.
//!
//! - [`space`]: a search space over `mlless train`'s options (`--param lr=log:1e-3..1`, or
//!   TOML) and its trials, drawn as a grid or at random, seeded;
//! - [`asha`]: asynchronous successive halving — at each rung (in epochs or seconds) a trial
//!   goes on only if its validation metric ranks in the top `1/η` of those seen there;
//! - [`budget`]: the dollar budget kept from the trials' bills as they accrue: which trial may
//!   start, which may go on past a rung, which must stop now;
//! - [`record`]: the tune record (`tune.json`) and its leaderboard.
//!
//! ```
//! use mlless_core::validation::Direction;
//! use mlless_tune::{Asha, AshaConfig, Ledger, RungUnit, Sampler, SearchSpace};
//!
//! let mut space = SearchSpace::default();
//! space.push_arg("lr=log:0.01..1:3")?;
//! let trials = space.trials(Sampler::Grid, None, 1)?;
//! let config = AshaConfig { unit: RungUnit::Epochs, min: 1.0, eta: 3, max: 9.0 };
//! let mut asha = Asha::new(config, Direction::Lower)?;
//! let mut ledger = Ledger::new(0.50)?;
//! // Trial 0 reaches its first rung after 2 s, having spent $0.01, with a log loss of 0.41.
//! ledger.observe(0, 1.0, 0.5, 0.005);
//! ledger.observe(0, 2.0, 1.0, 0.010);
//! assert!(asha.report(0, 0, 0.41).promoted());
//! // Does the budget pay for trial 1's first rung beside trial 0's next one (3 epochs)?
//! assert_eq!(ledger.can_start(&[(0, asha.rungs()[1])], asha.rungs()[0]), Some(true));
//! # assert_eq!(trials.len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod asha;
pub mod budget;
pub mod record;
pub mod space;

pub use asha::{Asha, AshaConfig, AshaError, RungDecision, RungUnit, value_at_rung};
pub use budget::{BudgetError, Ledger};
pub use record::{
    CurvePoint, RungRecord, SchedulerRecord, TUNE_RECORD_VERSION, TrialRecord, TrialStatus,
    TuneRecord, is_better,
};
pub use space::{Assignment, Domain, Param, Sampler, Scale, SearchSpace, SpaceError};
