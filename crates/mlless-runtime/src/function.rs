//! The entry point of every function: a payload ([`Payload`], plain data in [`crate::task`])
//! names a role, and the same code runs it whatever invoker started it (local process today, a
//! FaaS platform tomorrow). Its one `match` over the roles is the only place that calls into
//! each of them, so that a new role is flagged by the compiler here and nothing imports this
//! module back.

use crate::context::JobContext;
use crate::error::{Result, RuntimeError};
use crate::task::Payload;
use mlless_job::{SUPERVISOR_ROLE, worker_role};

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
        Payload::RangeMap(task) => mlless_prepare::run_range_map(task).await,
        Payload::ScaleMap(task) => mlless_prepare::run_scale_map(task).await,
        Payload::SplitMap(task) => mlless_prepare::run_split_map(task).await,
        Payload::ShuffleReduce(task) => mlless_prepare::run_shuffle_reduce(task).await,
        Payload::ChannelBench(task) => crate::bench::run_channel_bench(task).await,
        Payload::Ping => Ok(()),
    }
}
