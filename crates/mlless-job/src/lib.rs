//! What an mlless training job is and what it left behind, as plain data: the crate that the
//! functions, the driver and the reports share without depending on one another.
//!
//! - [`JobSpec`] (`spec.json`): everything a function needs to know about a job, written by the
//!   driver before any function starts. It holds the [`TrainingConfig`], the options as the user
//!   gave them, checked by one [`TrainingConfig::validate`].
//! - [`BatchPlan`]: how a step's global batch is shared by the fleet.
//! - [`SyncMode`], [`Algorithm`], [`Pattern`]: the protocols of a job (DESIGN §4–5); [`Fault`]:
//!   faults to inject for the recovery tests.
//! - [`RunRecord`] (`record.json`): what a run did, step by step, what it cost and what it reached;
//!   what `mlless report` reads.
//! - [`SUPERVISOR_ROLE`], [`worker_role`]: the names of a job's functions.
//! - [`SecretUrl`]: a URL that redacts its credentials when shown.
//! - [`billing`]: how a run's channel is billed ([`billing::channel_kind`]).
//!
//! The crate does no I/O; it depends on the backends' crates only for their plain types (limits,
//! invocation reports, channel schemes).

pub mod billing;
pub mod config;
pub mod fault;
pub mod model;
pub mod protocol;
pub mod record;
pub mod role;
pub mod spec;

pub use config::{ConfigError, SecretUrl, StopCriteria, TrainingConfig};
pub use fault::Fault;
pub use mlless_core::batch_plan::{self, BatchPlan};
pub use model::{ModelChoice, UnknownModel};
pub use protocol::{Algorithm, DEFAULT_ADMM_RHO, Pattern, SyncMode};
pub use record::{PrepareRecord, Refit, RunRecord};
pub use role::{SUPERVISOR_ROLE, roles, worker_role};
pub use spec::{AUTO_EVAL_SECONDS, EvalEvery, JobSpec, Resumption, SPEC_KEY, ValidationConfig};
