//! What an mlless cloud function is handed, says and fails with, as plain data below every role:
//! the [`Payload`] an invocation carries ([`task`]), the messages and objects functions exchange
//! through the channel ([`messages`]), the runtime's error type ([`RuntimeError`]), and the
//! [`Control`] a caller steers a long job with.
//!
//! The roles that build payloads and send messages — the driver, the workers and supervisor of
//! `mlless-runtime`, the map tasks of `mlless-prepare` — depend on this crate and not on each
//! other; the one dispatch that runs a payload (`mlless_runtime::run_function`) sits above them
//! all.

pub mod control;
pub mod error;
pub mod messages;
pub mod task;

pub use control::{CANCEL_GRACE, Control};
pub use error::{
    InputError, Internal, Mismatch, NOT_RESUMABLE, NeedsValidation, Refusal, Result, RuntimeError,
};
pub use task::{Payload, ShuffleReduceTask, SplitMapTask, Start};
