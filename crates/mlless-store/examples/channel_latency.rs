//! Measures one publish + collect round of the object-store channel: P workers (tasks) each
//! publish a payload for a step and collect every worker's payload of that step.
//!
//! ```text
//! cargo run --release -p mlless-store --example channel_latency -- [URL] [P] [BYTES] [ROUNDS]
//! ```
//! URL defaults to a temporary directory (the file channel); P to 4, BYTES to 1024, ROUNDS to 500.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_store::{Channel, Store, open_channel};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tmp = tempfile::tempdir()?;
    let url = match args.first() {
        Some(url) if url != "-" => url.clone(),
        _ => tmp.path().display().to_string(),
    };
    let p: u32 = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(4);
    let bytes: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(1024);
    let rounds: u64 = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(500);

    let store = Store::open(&url)?;
    let channel: Arc<dyn Channel> = open_channel(None, &store, "latency").await?;
    channel.cleanup().await?;
    let workers: Arc<[u32]> = (0..p).collect();
    let payload = Bytes::from(vec![7u8; bytes]);
    let mut times = Vec::with_capacity(rounds as usize);
    for step in 0..rounds {
        let started = Instant::now();
        let tasks: Vec<_> = (0..p)
            .map(|id| {
                let (channel, workers, payload) =
                    (Arc::clone(&channel), Arc::clone(&workers), payload.clone());
                tokio::spawn(async move {
                    channel.publish("updates", step, id, payload).await?;
                    channel
                        .collect("updates", step, &workers, Duration::from_secs(30))
                        .await
                })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        times.push(started.elapsed());
        channel.discard("updates", step, &workers).await?;
    }
    channel.cleanup().await?;
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "{} P={p} payload={bytes} B rounds={rounds}: median {:?}, p10 {:?}, p90 {:?}, max {:?}",
        channel.describe(),
        at(0.5),
        at(0.1),
        at(0.9),
        at(1.0)
    );
    Ok(())
}
