//! The runtime of mlless: the driver that a user's process runs, the worker and supervisor
//! functions, and the map tasks of data preparation.
//!
//! Dependencies point one way: this crate uses the maths of `mlless-core`, the formats of
//! `mlless-data`, and the backends behind the traits of `mlless-store` (object store, channel)
//! and `mlless-faas` (invoker); it knows no backend by name.
//!
//! A training job, as [`driver::train`] runs it: the driver writes a [`JobSpec`], invokes one
//! supervisor and P workers with a [`Payload`] each, and polls the supervisor's progress; every
//! function calls [`run_function`] with its payload.

pub mod bench;
pub mod checkpoint;
pub mod context;
pub mod dataset;
pub mod driver;
pub mod error;
mod exchange;
pub mod function;
pub mod messages;
pub mod prepare;
pub mod record;
pub mod spec;
pub mod supervisor;
pub mod worker;

pub use driver::{
    Defaults, Hyperparameters, LiveProgress, ModelChoice, TrainOptions, resume, train,
};
pub use error::{Result, RuntimeError};
pub use function::{Payload, Start, run_function};
pub use prepare::{PrepareOptions, TestSet, prepare};
pub use record::RunRecord;
pub use spec::{Algorithm, Fault, JobSpec, Pattern, StopCriteria, SyncMode};
