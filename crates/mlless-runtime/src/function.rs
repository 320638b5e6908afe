//! The entry point of every function: a payload names a role, and the same code runs it whatever
//! invoker started it (local process today, a FaaS platform tomorrow).

use serde::{Deserialize, Serialize};

use crate::context::JobContext;
use crate::error::{Result, RuntimeError};
use mlless_job::{SUPERVISOR_ROLE, worker_role};

/// What a function invocation is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Payload {
    /// Train as worker `worker` of the job whose spec is at `run_url`.
    Worker {
        /// Location of the job's spec.
        run_url: String,
        /// Worker id, `0..P`.
        worker: u32,
        /// Where this invocation starts.
        #[serde(flatten)]
        start: Start,
    },
    /// Supervise the job whose spec is at `run_url`.
    Supervisor {
        /// Location of the job's spec.
        run_url: String,
        /// Where this invocation starts.
        #[serde(flatten)]
        start: Start,
    },
    /// Map step of min-max normalisation: compute the feature ranges of some minibatches.
    RangeMap(crate::prepare::RangeMapTask),
    /// Second map step of min-max normalisation: scale some minibatches.
    ScaleMap(crate::prepare::ScaleMapTask),
    /// Map step of a distributed preparation: parse a byte range of the input into buckets.
    SplitMap(crate::prepare::SplitMapTask),
    /// Reduce step of a distributed preparation: shuffle buckets into minibatches.
    ShuffleReduce(crate::prepare::ShuffleReduceTask),
    /// One worker of the channel benchmark.
    ChannelBench(crate::bench::ChannelBenchTask),
    /// Return at once: what `mlless bench invoke` times (the invocation path alone).
    Ping,
}

impl Payload {
    /// The payload as the JSON an invocation carries.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|source| RuntimeError::Json {
            location: "function payload".into(),
            source,
        })
    }
}

/// Where a worker's or the supervisor's invocation starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Start {
    /// 0 for the first invocation; n after n hand-offs at the lifetime limit.
    #[serde(default)]
    pub generation: u32,
    /// 0 for the role's original invocation; n for its n-th replacement after a failure (which
    /// replays the steps after its checkpoint that the others have gone past, and injects no
    /// faults).
    #[serde(default)]
    pub recovery: u32,
    /// The checkpoint to resume from (the step it is ready to run); `None`: from the start.
    #[serde(default)]
    pub resume_step: Option<u64>,
}

/// Runs the function described by a JSON payload.
pub async fn run_function(payload: &[u8]) -> Result<()> {
    let payload: Payload =
        serde_json::from_slice(payload).map_err(|source| RuntimeError::Json {
            location: "function payload".into(),
            source,
        })?;
    match payload {
        Payload::Worker {
            run_url,
            worker,
            start,
        } => {
            let ctx = JobContext::load(&run_url).await?;
            let store = ctx.run_store.clone();
            let outcome = crate::worker::run_worker(ctx, worker, start).await;
            crate::requests::leave(&store, &worker_role(worker), start).await;
            outcome
        }
        Payload::Supervisor { run_url, start } => {
            let ctx = JobContext::load(&run_url).await?;
            let store = ctx.run_store.clone();
            let outcome = crate::supervisor::run_supervisor(ctx, start).await;
            crate::requests::leave(&store, SUPERVISOR_ROLE, start).await;
            outcome
        }
        Payload::RangeMap(task) => crate::prepare::run_range_map(task).await,
        Payload::ScaleMap(task) => crate::prepare::run_scale_map(task).await,
        Payload::SplitMap(task) => crate::prepare::run_split_map(task).await,
        Payload::ShuffleReduce(task) => crate::prepare::run_shuffle_reduce(task).await,
        Payload::ChannelBench(task) => crate::bench::run_channel_bench(task).await,
        Payload::Ping => Ok(()),
    }
}
