//! The channel benchmark: P function workers exchange updates of a given size through a
//! channel for some steps, as a BSP job would, and report each step's exchange time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_faas::{Invoker, Limits};
use mlless_store::{Store, open_channel};
use serde::{Deserialize, Serialize};

use crate::error::{Result, RuntimeError};
use crate::function::Payload;

/// Topic of the benchmark's messages.
const TOPIC: &str = "bench";

/// One worker's part of the channel benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelBenchTask {
    /// Channel URL (`None`: the object store at `store_url`).
    pub channel: Option<String>,
    /// Store of the default channel.
    pub store_url: String,
    /// Job id that namespaces the benchmark.
    pub job_id: String,
    /// This worker.
    pub worker: u32,
    /// All workers.
    pub workers: u32,
    /// Bytes of each update.
    pub update_bytes: usize,
    /// Steps to run.
    pub steps: u64,
}

/// What the channel benchmark measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelBenchReport {
    /// Where the channel was.
    pub channel: String,
    /// Workers.
    pub workers: u32,
    /// Bytes of each update.
    pub update_bytes: usize,
    /// Steps measured (the first steps, while processes start, are left out).
    pub steps: usize,
    /// Median of the per-step exchange time (publish, collect, discard), over steps and
    /// workers, in ms.
    pub median_ms: f64,
    /// 95th percentile of the per-step exchange time, in ms.
    pub p95_ms: f64,
    /// Bytes every worker received per second of exchange, in MB/s.
    pub received_mb_per_s: f64,
}

/// Steps left out at the start: the processes start and connect at different times.
const WARM_UP_STEPS: u64 = 3;

/// Runs the channel benchmark with `workers` function workers.
pub async fn channel_bench(
    invoker: Arc<dyn Invoker>,
    channel: Option<String>,
    store_url: &str,
    workers: u32,
    update_bytes: usize,
    steps: u64,
) -> Result<ChannelBenchReport> {
    if workers == 0 || steps == 0 {
        return Err(RuntimeError::InvalidJob(
            "--workers and --steps must be at least 1".into(),
        ));
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
                channel: channel.clone(),
                store_url: store.url().to_string(),
                job_id: job_id.clone(),
                worker,
                workers,
                update_bytes,
                steps: steps + WARM_UP_STEPS,
            })
        })
        .collect();
    if let Err(e) = crate::prepare::run_tasks(&invoker, "bench", &payloads, limits).await {
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
    times.sort_by(f64::total_cmp);
    let quantile = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let total_s: f64 = times.iter().sum::<f64>() / 1000.0;
    let received = (times.len() * workers as usize * update_bytes) as f64;
    Ok(ChannelBenchReport {
        channel: ch.describe(),
        workers,
        update_bytes,
        steps: steps as usize,
        median_ms: quantile(0.5),
        p95_ms: quantile(0.95),
        received_mb_per_s: received / total_s.max(1e-9) / 1e6,
    })
}

/// Function body of a [`ChannelBenchTask`]: publish and collect `steps` times, then leave the
/// exchange times of the measured steps under the key `timings-{worker}`.
pub async fn run_channel_bench(task: ChannelBenchTask) -> Result<()> {
    let store = Store::open(&task.store_url)?;
    let channel = open_channel(task.channel.as_deref(), &store, &task.job_id).await?;
    let peers: Vec<u32> = (0..task.workers).collect();
    let mut payload = vec![0u8; task.update_bytes];
    let mut times = Vec::with_capacity(task.steps as usize);
    for step in 0..task.steps {
        payload
            .iter_mut()
            .for_each(|b| *b = (step as u8) ^ (task.worker as u8));
        let started = Instant::now();
        channel
            .publish(TOPIC, step, task.worker, Bytes::copy_from_slice(&payload))
            .await?;
        let messages = channel
            .collect(TOPIC, step, &peers, Duration::from_secs(120))
            .await?;
        if step > 0 {
            channel.discard(TOPIC, step - 1, &[task.worker]).await?;
        }
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
    let json = serde_json::to_vec(&times).map_err(|source| RuntimeError::Json {
        location: "timings".into(),
        source,
    })?;
    channel
        .put_key(&format!("timings-{}", task.worker), Bytes::from(json))
        .await?;
    Ok(())
}
