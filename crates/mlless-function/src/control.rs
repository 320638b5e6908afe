//! How the caller steers a long job while it runs: [`Control`], asked for at each progress, and
//! [`CANCEL_GRACE`], how long a cancel may take before it becomes a kill.

use std::time::Duration;

/// What the caller of a long job — a training run (the runtime's `train` or `resume`), a
/// preparation (`mlless_prepare::prepare_with`) — asks for each time it is shown progress.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Control {
    /// Go on.
    #[default]
    Continue,
    /// Stop the run after the step the workers are in, as the supervisor's own stops do: the
    /// run ends with a record whose stop reason is [`CANCELLED`](mlless_job::record::CANCELLED)
    /// (and may be resumed). Asking again changes nothing.
    Cancel,
    /// Stop the run as [`Cancel`](Self::Cancel) does, for this reason, which the record keeps
    /// as its stop reason (a search's, say: "stopped by the search at rung 1 (1 epoch): …").
    /// The run has finished: it is not resumed. Asking again, or then cancelling, changes
    /// nothing.
    Stop(String),
    /// Kill every function now; the run ends with [`RuntimeError::Cancelled`](crate::RuntimeError::Cancelled).
    Kill,
}

/// How long a cancelled run may take to stop by itself before its functions are killed.
pub const CANCEL_GRACE: Duration = Duration::from_secs(30);
