//! The entry point of every function: a payload names a role, and the same code runs it whatever
//! invoker started it (local process today, a FaaS platform tomorrow).

use serde::{Deserialize, Serialize};

use crate::context::JobContext;
use crate::error::{Result, RuntimeError};

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
        /// 0 for the first invocation; n resumes from the checkpoint the invocation n − 1
        /// left when its lifetime ran out.
        #[serde(default)]
        generation: u32,
    },
    /// Supervise the job whose spec is at `run_url`.
    Supervisor {
        /// Location of the job's spec.
        run_url: String,
        /// As for a worker.
        #[serde(default)]
        generation: u32,
    },
    /// Map step of min-max normalisation: compute the feature ranges of some minibatches.
    RangeMap(crate::prepare::RangeMapTask),
    /// Second map step of min-max normalisation: scale some minibatches.
    ScaleMap(crate::prepare::ScaleMapTask),
    /// One worker of the channel benchmark.
    ChannelBench(crate::bench::ChannelBenchTask),
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
            generation,
        } => {
            let ctx = JobContext::load(&run_url).await?;
            crate::worker::run_worker(ctx, worker, generation).await
        }
        Payload::Supervisor {
            run_url,
            generation,
        } => {
            let ctx = JobContext::load(&run_url).await?;
            crate::supervisor::run_supervisor(ctx, generation).await
        }
        Payload::RangeMap(task) => crate::prepare::run_range_map(task).await,
        Payload::ScaleMap(task) => crate::prepare::run_scale_map(task).await,
        Payload::ChannelBench(task) => crate::bench::run_channel_bench(task).await,
    }
}
