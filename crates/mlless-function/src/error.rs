//! The runtime's error type: [`RuntimeError`], whose groups of refusals and failures are
//! enums of their own ([`Refusal`], [`Mismatch`], [`InputError`], [`Internal`]), so that a
//! caller can branch on what went wrong and read its fields.

mod input;
mod internal;
mod mismatch;
mod refusal;

pub use input::InputError;
pub use internal::Internal;
pub use mismatch::{Mismatch, NeedsValidation};
pub use refusal::Refusal;

use mlless_store::{ChannelError, StoreError};

/// Why a job, a function or a data preparation failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The object store failed or an object is missing.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The channel failed or timed out.
    #[error(transparent)]
    Channel(#[from] ChannelError),
    /// Starting or watching a function failed.
    #[error(transparent)]
    Invoke(#[from] mlless_faas::InvokeError),
    /// An input file could not be parsed.
    #[error(transparent)]
    Parse(#[from] mlless_data::ParseError),
    /// Preparing a data set failed.
    #[error(transparent)]
    Prepare(#[from] mlless_data::PrepareError),
    /// An object read from the store or the channel is corrupt or of the wrong kind.
    #[error("{location}: {source}")]
    Corrupt {
        /// The object or message that is corrupt.
        location: String,
        /// What is wrong with it.
        #[source]
        source: mlless_data::CodecError,
    },
    /// A JSON document (spec, manifest, record, payload) could not be read.
    #[error("{location}: invalid JSON: {source}")]
    Json {
        /// Which document.
        location: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
    /// The data set's manifest is invalid.
    #[error("{location}: {source}")]
    Manifest {
        /// Where the manifest is.
        location: String,
        /// What is wrong with it.
        #[source]
        source: mlless_data::ManifestError,
    },
    /// The data set was never prepared, or its preparation did not finish.
    #[error(
        "no data set at {url}: {url}/manifest.json is missing (run `mlless prepare` first; a preparation that did not finish leaves no manifest)"
    )]
    NotPrepared {
        /// The data set's location.
        url: String,
    },
    /// The model rejected a batch (bad index, bad label, wrong data kind), or the data set
    /// it trains on (its rating counts).
    #[error("{location}: {source}")]
    Model {
        /// Which batch.
        location: String,
        /// The model's complaint.
        #[source]
        source: mlless_core::ModelError,
    },
    /// A function (worker, supervisor, map task) failed.
    #[error("{0}")]
    FunctionFailed(String),
    /// The user cancelled the run and it did not stop by itself in time (or was asked twice):
    /// its functions were killed.
    #[error("{}", cancelled_message(run_url, *resume_step))]
    Cancelled {
        /// The run's location.
        run_url: String,
        /// The step `--resume` would continue from (the newest checkpoint every role has
        /// intact); `None`: there is none, and nothing to resume.
        resume_step: Option<u64>,
    },
    /// The user cancelled a data preparation (Ctrl-C): it stopped, its map tasks ended or were
    /// killed, and what it had written is removed.
    #[error("{message}")]
    PrepareCancelled {
        /// What happened and what to do, in one line.
        message: String,
    },
    /// The training loss became non-finite or exploded (beyond `threshold`, a multiple of the
    /// run's first loss).
    #[error(
        "training diverged at step {step} (loss {loss}, above {threshold}: 100 times the first \
         step's loss, or 1 if that was less); try a lower --lr (it was {lr}) or another \
         --optimizer"
    )]
    Diverged {
        /// The step at which the loss was last seen.
        step: u64,
        /// The loss seen.
        loss: f64,
        /// The loss above which the run counts as diverged.
        threshold: f64,
        /// The learning rate in use.
        lr: f32,
    },
    /// A checkpoint is whole but is not of the job, role or step that reads it: it was copied
    /// from another run (or renamed), and is never resumed from.
    #[error(
        "{location} is the checkpoint of {found}, not of {expected}: it was copied from another \
         run or renamed, and is not resumed from; put back this run's own checkpoint, or delete \
         this one"
    )]
    ForeignCheckpoint {
        /// The checkpoint.
        location: String,
        /// What the reader expected: the job, role and step.
        expected: String,
        /// What the checkpoint's stamp says.
        found: String,
    },
    /// `mlless train` found a run of its job id already (its `spec.json`): a run is never
    /// written over, so the new one did not start.
    #[error(
        "job {job_id} exists already at {run_url} (it has a spec.json): a run is never written \
         over, so this one did not start; use another job id, or another --runs"
    )]
    JobExists {
        /// The job id.
        job_id: String,
        /// Where its run is.
        run_url: String,
    },
    /// The model a data set asks for would not fit in a function's memory (`--memory-mb`):
    /// refused before anything of that size is allocated.
    #[error(
        "the {model} model of this data set has {features} features ({params} parameters), \
         which need at least {needed_mb} MB in every function, more than --memory-mb \
         {memory_mb}: the data set's feature indices go that high (a sparse input with one huge \
         index, or a hand-edited manifest); re-index the features into a smaller range (hash \
         them), or give a --memory-mb of at least {needed_mb}"
    )]
    ModelTooLarge {
        /// The model's short name (`lr`).
        model: &'static str,
        /// The data set's feature count (users + items for a factorisation).
        features: u64,
        /// The model's parameters.
        params: u64,
        /// The least memory the functions would need for them.
        needed_mb: u64,
        /// The memory cap given.
        memory_mb: u32,
    },
    /// Another driver holds the run's lease (the runtime's `lease` module): the run is still running, and
    /// a second driver would share its channel.
    #[error(
        "the run at {run_url} is still being driven by another `mlless train` (pid {pid}, \
         started at {started_at}, its lease renewed {renewed_s_ago} s ago): two drivers would \
         share one channel; let that one end, or stop it (Ctrl-C), before resuming (a driver \
         not heard of for 30 s is taken as lost, and its run can be resumed then)"
    )]
    RunInUse {
        /// The run.
        run_url: String,
        /// When the driver holding it started driving it (UTC).
        started_at: String,
        /// Its process id.
        pid: u32,
        /// How long ago it last renewed its lease, seconds.
        renewed_s_ago: u64,
    },
    /// The data set a run started on was prepared again since (its manifest's `dataset_id` is
    /// another): continuing on it would train on other rows.
    #[error(
        "the run at {run_url} started on the data set at {data_url} as it was prepared then \
         (data set id {expected}), but that location now holds another preparation ({found}): \
         continuing would train on other rows, and its test rows may have been training rows; \
         start a new run on the data set as it is now (or prepare the original again \
         elsewhere and train on that)"
    )]
    DatasetChanged {
        /// The run.
        run_url: String,
        /// The data set's location.
        data_url: String,
        /// The id the run started on.
        expected: String,
        /// What the location holds now: `data set id …`, or that it has none.
        found: String,
    },
    /// An option, or a combination of options, is refused before anything runs.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The data set, the input or the model does not fit the model or what is asked of it.
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
    /// An input or a location to read is missing, empty or cannot be listed.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Something inside mlless failed: its temporary files, a thread, its own functions'
    /// reports, a file it builds.
    #[error(transparent)]
    Internal(#[from] Internal),
    /// `--resume` of a run that has finished (it has its record).
    #[error("the run at {run_url} has finished (it has {record_key}): nothing to resume")]
    RunFinished {
        /// The run.
        run_url: String,
        /// The record's key (`record.json`).
        record_key: &'static str,
    },
    /// `--resume` of a run without a checkpoint that every role has intact.
    #[error(
        "the run at {run_url} has no checkpoint that its supervisor and all its workers share \
         intact: it was trained without --checkpoint-every, or failed before the first{}",
        damaged_list(damaged)
    )]
    NoCheckpoint {
        /// The run.
        run_url: String,
        /// The checkpoints passed over as damaged, each as `location: why`.
        damaged: Vec<String>,
    },
    /// Another driver took the run's lease while this one was taking it: its lease could not
    /// be read (`source`), or drivers kept taking it (`None`).
    #[error("{}", lease_race_message(location, source.as_ref()))]
    LeaseRace {
        /// The lease.
        location: String,
        /// Why the other driver's lease could not be read.
        #[source]
        source: Option<serde_json::Error>,
    },
    /// A run's record does not add up.
    #[error("{location}: {source}")]
    Record {
        /// The record.
        location: String,
        /// What is wrong with it.
        #[source]
        source: mlless_job::record::RecordError,
    },
    /// The training options are out of range or inconsistent with each other.
    #[error(transparent)]
    Config(#[from] mlless_job::config::ConfigError),
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The message of [`RuntimeError::Cancelled`]: the hint to resume only where there is a
/// checkpoint to resume from.
fn cancelled_message(run_url: &str, resume_step: Option<u64>) -> String {
    match resume_step {
        Some(step) => format!(
            "cancelled: the functions were stopped; continue the run from its checkpoints of \
             step {step} with `mlless train --resume {run_url}`"
        ),
        None => format!(
            "cancelled: the functions were stopped before the run at {run_url} had a \
             checkpoint: nothing to resume from; train it again"
        ),
    }
}

/// The damaged checkpoints of [`RuntimeError::NoCheckpoint`], as its message ends with them.
fn damaged_list(damaged: &[String]) -> String {
    if damaged.is_empty() {
        String::new()
    } else {
        format!(" (damaged: {})", damaged.join("; "))
    }
}

/// The message of [`RuntimeError::LeaseRace`].
fn lease_race_message(location: &str, source: Option<&serde_json::Error>) -> String {
    match source {
        Some(e) => format!("{location}: another driver took the run's lease first ({e})"),
        None => format!("{location}: could not take the run's lease: other drivers keep taking it"),
    }
}

/// A `Result` with a [`RuntimeError`].
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// How a function's failure line ends when [`RuntimeError::resume_can_help`] says no: the
/// driver knows by it, in the failure a function reports (as text), not to suggest `--resume`.
pub const NOT_RESUMABLE: &str = " (resuming the run would meet this again)";

impl RuntimeError {
    /// Whether continuing the run from its checkpoints (`mlless train --resume`) could get
    /// past this error: not for a divergence (it would diverge again), a data set or an input
    /// that is wrong (it is read again), options that are refused, or a checkpoint of another
    /// job; yes for what may pass (a store, a channel or a platform that failed, a lost or
    /// killed function).
    pub fn resume_can_help(&self) -> bool {
        match self {
            RuntimeError::Diverged { .. }
            | RuntimeError::Parse(_)
            | RuntimeError::Prepare(_)
            | RuntimeError::Manifest { .. }
            | RuntimeError::NotPrepared { .. }
            | RuntimeError::Model { .. }
            | RuntimeError::ForeignCheckpoint { .. }
            | RuntimeError::JobExists { .. }
            | RuntimeError::ModelTooLarge { .. }
            | RuntimeError::RunInUse { .. }
            | RuntimeError::DatasetChanged { .. }
            | RuntimeError::Refused(_)
            | RuntimeError::Mismatch(_)
            | RuntimeError::Input(_)
            | RuntimeError::Internal(_)
            | RuntimeError::RunFinished { .. }
            | RuntimeError::NoCheckpoint { .. }
            | RuntimeError::LeaseRace { .. }
            | RuntimeError::Record { .. }
            | RuntimeError::Config(_) => false,
            RuntimeError::Store(_)
            | RuntimeError::Channel(_)
            | RuntimeError::Invoke(_)
            | RuntimeError::Corrupt { .. }
            | RuntimeError::Json { .. }
            | RuntimeError::FunctionFailed(_)
            | RuntimeError::Cancelled { .. }
            | RuntimeError::PrepareCancelled { .. }
            | RuntimeError::Io { .. } => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_divergence_says_so_first_and_names_no_resume() {
        let e = RuntimeError::Diverged {
            step: 7,
            loss: 279_127.0,
            threshold: 150.0,
            lr: 30.0,
        };
        let message = e.to_string();
        assert!(
            message.starts_with("training diverged at step 7"),
            "{message}"
        );
        assert!(message.contains("--lr (it was 30)"), "{message}");
        assert!(!message.contains("resume"), "{message}");
        assert!(!e.resume_can_help());
    }
}
