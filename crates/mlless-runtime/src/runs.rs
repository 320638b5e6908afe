//! The runs in a store (`mlless runs`): each job's spec, and its record or failure if it has
//! one, summed up in a line.

use std::time::Duration;

use bytes::Bytes;
use mlless_job::{JobSpec, RunRecord, SPEC_KEY};
use mlless_store::{Store, open_channel_with};
use serde::{Deserialize, Serialize};

use crate::checkpoint::CHECKPOINTS;
use crate::error::{Result, RuntimeError};
use mlless_job::record::RECORD_KEY;

/// Key of the failure the driver leaves in a run that failed for good.
pub const FAILURE_KEY: &str = "failure.json";

/// Key of the driver's heartbeat in a run: when it last said it was driving the run.
pub const HEARTBEAT_KEY: &str = "heartbeat.json";

/// How often the driver of a running run writes its heartbeat; a run without a record whose
/// heartbeat is older than three of these has lost its driver.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);

/// The driver's heartbeat ([`HEARTBEAT_KEY`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// When it was written, in Unix milliseconds.
    pub unix_ms: u64,
}

/// Writes the driver's heartbeat in `run` (now).
pub(crate) async fn beat(run: &Store) -> Result<()> {
    let heartbeat = Heartbeat {
        unix_ms: now_unix_ms(),
    };
    let json = serde_json::to_vec(&heartbeat).map_err(|source| RuntimeError::Json {
        location: run.location(HEARTBEAT_KEY),
        source,
    })?;
    run.put(HEARTBEAT_KEY, Bytes::from(json)).await?;
    Ok(())
}

fn now_unix_ms() -> u64 {
    mlless_faas::clock::unix_ms(std::time::SystemTime::now())
}

/// Why a run failed for good, as the driver left it in the run ([`FAILURE_KEY`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// The error, in one line.
    pub reason: String,
}

/// Where a run stands.
#[derive(Debug, Clone, PartialEq)]
pub enum RunStatus {
    /// It has a record: it ended by a stop criterion.
    Finished,
    /// It has a record that says it was cancelled; `--resume` continues it.
    Cancelled,
    /// The driver left a failure in it (the reason).
    Failed(String),
    /// Neither record nor failure, and its driver's heartbeat is recent: it is running.
    Running,
    /// Neither record nor failure, and no recent heartbeat: its driver was killed or lost
    /// (`--resume` continues it from its checkpoints once its functions have stopped).
    Lost,
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RunStatus::Finished => "finished",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Failed(_) => "failed",
            RunStatus::Running => "running",
            RunStatus::Lost => "lost",
        })
    }
}

/// One run of a store.
#[derive(Debug, Clone)]
pub struct RunSummary {
    /// The run's location.
    pub run_url: String,
    /// Its spec, credentials redacted.
    pub spec: JobSpec,
    /// Where it stands.
    pub status: RunStatus,
    /// Its record, if it has one.
    pub record: Option<RunRecord>,
}

/// A run of a store that cannot be read: its spec, record, failure or heartbeat is not what
/// mlless writes (truncated, hand-edited).
#[derive(Debug, Clone, PartialEq)]
pub struct UnreadableRun {
    /// The run's directory name below the store (its job id, if the spec is right).
    pub job: String,
    /// The run's location.
    pub run_url: String,
    /// What could not be read, naming the file.
    pub reason: String,
}

/// The runs of a store: the ones read, newest first, and the ones that could not be read.
#[derive(Debug, Clone, Default)]
pub struct RunListing {
    /// The runs read, newest first.
    pub runs: Vec<RunSummary>,
    /// The runs that could not be read, by directory name.
    pub unreadable: Vec<UnreadableRun>,
}

/// The runs directly below `runs_url` (each a `{job}/spec.json`), newest first; a run that
/// cannot be read is listed as such and hides none of the others.
pub async fn list_runs(runs_url: &str) -> Result<RunListing> {
    let store = Store::open(runs_url)?;
    let mut listing = RunListing::default();
    for key in store.list("").await? {
        let Some(job) = key.strip_suffix(&format!("/{SPEC_KEY}")) else {
            continue;
        };
        if job.contains('/') {
            continue;
        }
        let run_url = format!("{}/{job}", store.url().trim_end_matches('/'));
        match read_run(&run_url).await {
            Ok(run) => listing.runs.push(run),
            Err(error) => {
                tracing::warn!(run = %run_url, %error, "a run that cannot be read");
                listing.unreadable.push(UnreadableRun {
                    job: job.to_string(),
                    run_url,
                    reason: error.to_string(),
                });
            }
        }
    }
    // Job ids begin with their start (`crate::job_id`): the newest first.
    listing.runs.sort_by(|a, b| {
        started(b)
            .cmp(&started(a))
            .then(b.spec.job_id.cmp(&a.spec.job_id))
    });
    listing.unreadable.sort_by(|a, b| b.job.cmp(&a.job));
    Ok(listing)
}

/// The run at `run_url`: its spec, record and status.
async fn read_run(run_url: &str) -> Result<RunSummary> {
    let run = Store::open(run_url)?;
    let spec: JobSpec = json(&run, SPEC_KEY, &run.get(SPEC_KEY).await?)?;
    let record: Option<RunRecord> = match run.get_opt(RECORD_KEY).await? {
        Some(bytes) => {
            let record: RunRecord = json(&run, RECORD_KEY, &bytes)?;
            record.check().map_err(|source| RuntimeError::Record {
                location: run.location(RECORD_KEY),
                source,
            })?;
            Some(record)
        }
        None => None,
    };
    let status = match &record {
        Some(record) if record.was_cancelled() => RunStatus::Cancelled,
        Some(_) => RunStatus::Finished,
        None => match run.get_opt(FAILURE_KEY).await? {
            Some(bytes) => RunStatus::Failed(json::<Failure>(&run, FAILURE_KEY, &bytes)?.reason),
            None => {
                let beat = match run.get_opt(HEARTBEAT_KEY).await? {
                    Some(bytes) => Some(json::<Heartbeat>(&run, HEARTBEAT_KEY, &bytes)?),
                    None => None,
                };
                let recent = 3 * HEARTBEAT_EVERY.as_millis() as u64;
                match beat {
                    Some(beat) if now_unix_ms().saturating_sub(beat.unix_ms) < recent => {
                        RunStatus::Running
                    }
                    _ => RunStatus::Lost,
                }
            }
        },
    };
    Ok(RunSummary {
        run_url: run_url.to_string(),
        spec: spec.redacted(),
        status,
        record,
    })
}

/// What [`clean_run`] removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleaned {
    /// Checkpoint objects deleted (`checkpoints/` below the run).
    pub checkpoints: usize,
    /// The channel whose data of the job was removed ([`Channel::describe`]).
    ///
    /// [`Channel::describe`]: mlless_store::Channel::describe
    pub channel: String,
}

/// Removes what the run at `run_url` leaves behind once it has ended: its checkpoints and
/// whatever its job still has in its channel (objects, Redis keys, Memcached entries — the
/// driver cleans the channel at the end of a run, but not one whose driver was killed). The
/// spec, the record, the model and the failure stay, so `mlless runs` still lists the run; a
/// cancelled or failed run can no longer be resumed.
///
/// # Cancel safety
///
/// A cancelled clean may have removed part of the leftovers; running it again removes the rest.
pub async fn clean_run(run_url: &str) -> Result<Cleaned> {
    let run = Store::open(run_url)?;
    let spec: JobSpec = json(&run, SPEC_KEY, &run.get(SPEC_KEY).await?)?;
    let channel = open_channel_with(
        spec.training.channel.as_deref(),
        &run,
        &spec.job_id,
        mlless_store::ChannelOptions::default().with_grace(spec.training.channel_grace()),
    )
    .await?;
    channel.cleanup().await?;
    let checkpoints = run.list(CHECKPOINTS).await?.len();
    run.delete_prefix(CHECKPOINTS).await?;
    Ok(Cleaned {
        checkpoints,
        channel: channel.describe(),
    })
}

/// The start of a run in Unix milliseconds, from its job id ([`crate::job_id::started_unix_ms`];
/// 0 for an id that does not say, one given with `--job-id`).
fn started(run: &RunSummary) -> u64 {
    crate::job_id::started_unix_ms(&run.spec.job_id).unwrap_or(0)
}

fn json<T: serde::de::DeserializeOwned>(store: &Store, key: &str, bytes: &Bytes) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|source| RuntimeError::Json {
        location: store.location(key),
        source,
    })
}
