//! The channel benchmark: P function workers exchange updates of a given size through a
//! channel for some steps, as a BSP job would, and report each step's exchange time; and
//! [`cloud`], training steps of hundreds of functions simulated on a cloud's latencies.

pub mod cloud;

use crate::Refusal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_core::{SparseVector, WireDelta};
use mlless_faas::{Invoker, Limits};
use mlless_store::{
    Channel, CloudLatency, EmulatedChannel, StepExchange, StepMessages, Store, open_channel,
};
use serde::{Deserialize, Serialize};

use crate::error::{Result, RuntimeError};
use crate::exchange::Exchange;
use crate::messages::Traffic;
use crate::messages::{Message, UpdateMessage};
use crate::task::{ChannelBenchTask, Payload};
use mlless_job::Pattern;
use mlless_job::config::SecretUrl;

/// Topic of the benchmark's messages.
const TOPIC: &str = "bench";

/// What the channel benchmark measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelBenchReport {
    /// Where the channel was.
    pub channel: String,
    /// Workers.
    pub workers: u32,
    /// Bytes of each update (with a pattern: of one worker's encoded update).
    pub update_bytes: usize,
    /// The pattern of the exchange, if it was the training exchange.
    pub pattern: Option<Pattern>,
    /// Steps measured (the first steps, while processes start, are left out).
    pub steps: usize,
    /// Median of the per-step exchange time (publish and collect, the deletion of the step
    /// before the last alongside, as a worker has it in the background), over steps and
    /// workers, in ms.
    pub median_ms: f64,
    /// 95th percentile of the per-step exchange time, in ms.
    pub p95_ms: f64,
    /// Bytes every worker received per second of exchange, in MB/s (raw messages only; 0 with
    /// a pattern, whose traffic is not all to all).
    pub received_mb_per_s: f64,
}

/// Steps left out at the start: the processes start and connect at different times.
const WARM_UP_STEPS: u64 = 3;

/// What to exchange in a channel benchmark.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BenchLoad {
    /// Raw messages of this many bytes, every worker to every worker.
    Bytes(usize),
    /// Dense updates of this many parameters, through the training exchange with a pattern.
    Update {
        /// The pattern.
        pattern: Pattern,
        /// Parameters of each update.
        params: usize,
    },
}

/// Runs the channel benchmark with `workers` function workers, with `emulate`'s latency added
/// to every request of theirs.
pub async fn channel_bench(
    invoker: Arc<dyn Invoker>,
    channel: Option<String>,
    store_url: &str,
    workers: u32,
    load: BenchLoad,
    steps: u64,
    emulate: Option<CloudLatency>,
) -> Result<ChannelBenchReport> {
    let (update_bytes, pattern, params) = match load {
        BenchLoad::Bytes(bytes) => (bytes, None, 0),
        BenchLoad::Update { pattern, params } => {
            if params == 0 || params > u32::MAX as usize {
                return Err(Refusal::BenchParams {
                    params,
                    max: u32::MAX,
                }
                .into());
            }
            (
                dense_update(0, 0, params).encode().len(),
                Some(pattern),
                params,
            )
        }
    };
    if workers == 0 || steps == 0 {
        return Err(Refusal::AtLeastOne {
            option: "--workers and --steps",
        }
        .into());
    }
    let store = Store::open(store_url)?;
    let job_id = format!("bench-{:08x}", rand::random::<u32>());
    let ch = open_channel(channel.as_deref(), &store, &job_id).await?;
    let limits = Limits {
        memory_mb: 4096,
        timeout: Duration::from_secs(900),
    };
    let payloads: Vec<Payload> = (0..workers)
        .map(|worker| {
            Payload::ChannelBench(ChannelBenchTask {
                channel: channel.clone().map(SecretUrl::from),
                store_url: store.url().into(),
                job_id: job_id.clone(),
                worker,
                workers,
                update_bytes,
                steps: steps + WARM_UP_STEPS,
                pattern,
                params,
                emulate: emulate.clone(),
            })
        })
        .collect();
    if let Err(e) = mlless_prepare::run_tasks(&invoker, "bench", &payloads, limits).await {
        if let Err(cleanup) = ch.cleanup().await {
            tracing::warn!("could not clean up the benchmark's channel: {cleanup}");
        }
        return Err(e);
    }
    let mut times = Vec::new();
    for worker in 0..workers {
        let bytes = ch
            .get_key(&format!("timings-{worker}"))
            .await?
            .ok_or_else(|| {
                RuntimeError::FunctionFailed(format!("bench-{worker} left no timings"))
            })?;
        let mine: Vec<f64> =
            serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
                location: format!("timings of bench-{worker}"),
                source,
            })?;
        times.extend(mine);
    }
    ch.cleanup().await?;
    let mut described = ch.describe();
    if let Some(latency) = &emulate {
        described = EmulatedChannel::new(ch, latency.clone()).describe();
    }
    times.sort_by(f64::total_cmp);
    let quantile = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let total_s: f64 = times.iter().sum::<f64>() / 1000.0;
    let received = (times.len() * workers as usize * update_bytes) as f64;
    Ok(ChannelBenchReport {
        channel: described,
        workers,
        update_bytes,
        pattern,
        steps: steps as usize,
        median_ms: quantile(0.5),
        p95_ms: quantile(0.95),
        received_mb_per_s: if pattern.is_some() {
            0.0
        } else {
            received / total_s.max(1e-9) / 1e6
        },
    })
}

/// Function body of a [`ChannelBenchTask`]: publish and collect `steps` times, then leave the
/// exchange times of the measured steps under the key `timings-{worker}`.
pub async fn run_channel_bench(task: ChannelBenchTask) -> Result<()> {
    let store = Store::open(task.store_url.as_str())?;
    let mut channel = open_channel(
        task.channel.as_ref().map(SecretUrl::as_str),
        &store,
        &task.job_id,
    )
    .await?;
    if let Some(latency) = task.emulate {
        channel = Arc::new(EmulatedChannel::new(channel, latency));
    }
    let peers: Vec<u32> = (0..task.workers).collect();
    let mut payload = vec![0u8; task.update_bytes];
    let mut times = Vec::with_capacity(task.steps as usize);
    if let Some(pattern) = task.pattern {
        let exchange = Exchange {
            channel: &*channel,
            job_workers: task.workers,
            timeout: Duration::from_secs(120),
            pattern,
            worker: task.worker,
            workers: &peers,
            dim: task.params,
            expected_removal: 1,
        };
        for step in 0..task.steps {
            let message = dense_update(step, task.worker, task.params);
            let started = Instant::now();
            let mut traffic = Traffic::default();
            // As a worker does: the step before the last is deleted while this one exchanges.
            let (exchanged, ()) = futures::try_join!(
                exchange.run(message, None, &mut traffic),
                discard_before(step, |old| exchange.discard(old)),
            )?;
            let elapsed = started.elapsed();
            if exchanged.mean.nnz() != task.params {
                return Err(RuntimeError::FunctionFailed(format!(
                    "step {step}: the mean has {} entries, not {}",
                    exchanged.mean.nnz(),
                    task.params
                )));
            }
            if step >= WARM_UP_STEPS {
                times.push(elapsed.as_secs_f64() * 1000.0);
            }
        }
        return leave_timings(&*channel, task.worker, &times).await;
    }
    for step in 0..task.steps {
        payload
            .iter_mut()
            .for_each(|b| *b = (step as u8) ^ (task.worker as u8));
        let started = Instant::now();
        let (messages, ()) = futures::try_join!(
            async {
                let exchange = StepExchange {
                    topic: TOPIC,
                    step,
                    from: task.worker,
                    peers: &peers,
                    timeout: Duration::from_secs(120),
                };
                let published =
                    channel.publish_and_collect(exchange, Bytes::copy_from_slice(&payload));
                Ok::<_, RuntimeError>(published.await?)
            },
            discard_before(step, |old| {
                let channel = &channel;
                async move {
                    Ok(channel
                        .discard(StepMessages::new(TOPIC, old, &[task.worker]))
                        .await?)
                }
            }),
        )?;
        let elapsed = started.elapsed();
        if messages.iter().any(|m| m.len() != task.update_bytes) {
            return Err(RuntimeError::FunctionFailed(format!(
                "step {step}: a message of the wrong size arrived"
            )));
        }
        if step >= WARM_UP_STEPS {
            times.push(elapsed.as_secs_f64() * 1000.0);
        }
    }
    leave_timings(&*channel, task.worker, &times).await
}

/// Runs `discard` of the step before the one before `step`, if there is one: what a worker
/// deletes in the background while it takes `step` (every peer has read that step's messages
/// once this worker's exchange of the step after it is over).
pub(crate) async fn discard_before<F, Fut>(step: u64, discard: F) -> Result<()>
where
    F: FnOnce(u64) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    match step.checked_sub(2) {
        Some(old) => discard(old).await,
        None => Ok(()),
    }
}

/// Leaves a worker's step times under the key `timings-{worker}`.
async fn leave_timings(channel: &dyn Channel, worker: u32, times: &[f64]) -> Result<()> {
    let json = serde_json::to_vec(times).map_err(|source| RuntimeError::Json {
        location: "timings".into(),
        source,
    })?;
    channel
        .put_key(&format!("timings-{worker}"), Bytes::from(json))
        .await?;
    Ok(())
}

/// A dense update of `params` parameters, different per step and worker.
fn dense_update(step: u64, worker: u32, params: usize) -> UpdateMessage {
    let values = (0..params)
        .map(|j| ((j as u64 ^ step ^ u64::from(worker)) % 97) as f32 * 1e-3)
        .collect();
    let delta =
        SparseVector::from_parts((0..params as u32).collect(), values).expect("ascending indices");
    UpdateMessage {
        step,
        worker,
        loss: Default::default(),
        stop: false,
        last: false,
        applied_through: step,
        removal: None,
        delta: WireDelta::Sparse(delta),
    }
}
