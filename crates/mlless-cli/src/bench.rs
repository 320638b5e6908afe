//! `mlless bench`: the benchmarks of the hot paths and of the exchange, as figures to compare
//! within one run (the machines are noisy: compare ratios, not absolute numbers across runs).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use mlless_core::{
    Batch, GradientAccumulator, ModelSpec, OptimizerConfig, OptimizerKind, RatingBatch,
    SparseBatch, SparseVector,
};
use mlless_store::CloudLatency;
use rand::{Rng, SeedableRng};

/// What to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Bench {
    /// Sparse LR gradient + Adam update throughput, and PMF ratings per second (one core).
    Compute,
    /// One BSP step's exchange overhead with 4 workers on the default channel.
    Exchange,
    /// The demo end to end.
    Demo,
    /// Compute, exchange and demo.
    All,
    /// Per-step exchange time of a channel with P worker processes (see --channel, --workers,
    /// --update-bytes, --steps).
    Channel,
    /// Round-trip latency of invocations that do no work, one at a time, through --invoker
    /// (--steps of them): the first shows a cold start where the platform has no instance yet.
    Invoke,
    /// Step time and bill of sparse LR, PMF, SVM and MLP on a cloud's latencies for P up to
    /// hundreds, simulated on this machine, beside the cost model's projection (--job,
    /// --emulate, --workers, --pattern, --update, --steps, --memory-mb, --json).
    Cloud,
}

/// Options of `mlless bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// What to measure.
    #[arg(value_enum, default_value_t = Bench::All)]
    pub what: Bench,
    /// Seconds per compute measurement.
    #[arg(long, default_value_t = 2.0, value_parser = crate::seconds("--seconds", mlless_job::config::SecondsRange::Positive))]
    pub seconds: f64,
    /// Directory for the data of the exchange and demo benchmarks (and the default channel).
    #[arg(long, default_value = "mlless-bench")]
    pub dir: PathBuf,
    /// Channel of the channel benchmark [default: a directory below --dir].
    #[arg(long)]
    pub channel: Option<String>,
    /// Worker counts, comma-separated [default: 4; cloud: 4,16,64,256].
    #[arg(long, value_delimiter = ',')]
    pub workers: Vec<u32>,
    /// Update sizes of the channel benchmark, comma-separated: bytes, or with KB / MB
    /// (1000-based).
    #[arg(long, value_delimiter = ',', default_value = "1KB", value_parser = parse_bytes)]
    pub update_bytes: Vec<usize>,
    /// Steps per channel-benchmark run, invocations of the invoke benchmark, or steps measured
    /// per case of the cloud benchmark [default: 100; cloud: 5].
    #[arg(long)]
    pub steps: Option<u64>,
    /// Patterns, comma-separated (broadcast, allreduce, scatter-reduce). Channel benchmark:
    /// exchange dense model updates of --params parameters through the training exchange
    /// instead of raw messages of --update-bytes. Cloud benchmark [default: all three].
    #[arg(long, value_delimiter = ',', value_enum)]
    pub pattern: Vec<mlless_job::Pattern>,
    /// Where the functions of the invoke and channel benchmarks run (`local` or
    /// `lambda:FUNCTION`).
    #[arg(long, default_value = "local")]
    pub invoker: crate::InvokerChoice,
    /// Parameters of each update, with --pattern.
    #[arg(long, default_value_t = 1_000_000)]
    pub params: usize,
    /// Clouds whose latency to add to every channel request, comma-separated: `s3` (20 ms a
    /// request, 75 MB/s, 32 reads at once), `elasticache` (0.3 ms, 75 MB/s), `ps` (a parameter
    /// server's VM in the region: 0.3 ms, 75 MB/s), `dynamodb` (5 ms, 75 MB/s), `none`, or a TOML
    /// file with `name`, `request_ms`, `mb_per_s` and optionally `reads_at_once`. The channel
    /// benchmark runs once per cloud [default: none]; the cloud benchmark [default:
    /// s3,elasticache].
    #[arg(long, value_delimiter = ',', value_parser = parse_cloud)]
    pub emulate: Vec<Option<CloudLatency>>,
    /// Jobs of the cloud benchmark, comma-separated: lr, pmf, svm, mlp (on data shaped like
    /// a9a and MovieLens-100k), pmf-20m (MovieLens-20M-shaped), criteo (Criteo-shaped)
    /// [default: lr,pmf].
    #[arg(long, value_delimiter = ',', value_enum)]
    pub job: Vec<mlless_runtime::bench::cloud::CloudJob>,
    /// What the workers of the cloud benchmark send, comma-separated: bsp, isp (threshold 0.7),
    /// isp:V, topk:K, topk:F, onebit [default: bsp,isp,topk:0.01].
    #[arg(long, value_delimiter = ',', value_parser = UpdateRule::parse)]
    pub update: Vec<UpdateRule>,
    /// Memory of each simulated function, MB (what its time is billed at).
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: u32,
    /// Cloud benchmark: print one JSON object per case instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Parses a cloud of `--emulate`: `none`, a built-in, or a latency file.
fn parse_cloud(text: &str) -> Result<Option<CloudLatency>, String> {
    if text == "none" {
        return Ok(None);
    }
    crate::cost::parse_cloud(text).map(Some)
}

use mlless_runtime::bench::BenchLoad;
use mlless_runtime::bench::cloud::UpdateRule;

mod cloud;

/// Parses `4096`, `1KB`, `100KB`, `4MB`.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let upper = text.trim().to_ascii_uppercase();
    let (digits, unit) = match upper.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => upper.split_at(i),
        None => (upper.as_str(), ""),
    };
    let unit = match unit.trim() {
        "" | "B" => 1,
        "KB" | "K" => 1_000,
        "MB" | "M" => 1_000_000,
        other => return Err(format!("unknown unit {other:?}: use B, KB or MB")),
    };
    digits
        .parse::<usize>()
        .map(|n| n * unit)
        .map_err(|_| format!("not a size: {text:?}"))
}

/// Runs the benchmarks.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.what == Bench::Channel {
        return channel(&args);
    }
    if args.what == Bench::Invoke {
        return invoke_latency(&args);
    }
    if args.what == Bench::Cloud {
        return cloud::run(&args);
    }
    let budget = Duration::from_secs_f64(args.seconds.max(0.1));
    let all = args.what == Bench::All;
    if all || args.what == Bench::Compute {
        let (nnz_per_s, rows_per_s) = lr_throughput(budget);
        println!(
            "lr gradient+adam update   {:>12.0} non-zeros/s  ({:.0} rows/s, 30 nnz/row, 100k features)",
            nnz_per_s, rows_per_s
        );
        let ratings_per_s = pmf_throughput(budget);
        println!(
            "pmf gradient+adam update  {ratings_per_s:>12.0} ratings/s    (rank 10, 2000 × 1500)"
        );
        println!("{}", memory_limit(budget, nnz_per_s, ratings_per_s));
        println!("{}", update_codec(budget));
    }
    if all || args.what == Bench::Exchange {
        exchange(&args)?;
    }
    if all || args.what == Bench::Demo {
        let started = Instant::now();
        crate::demo::run(crate::demo::DemoArgs {
            dir: args.dir.join("demo"),
            workers: 4,
            quiet: true,
        })?;
        println!(
            "demo end to end            {:>10.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Times `--steps` invocations of a function that returns at once, one after the other, through
/// `--invoker`, and prints the first and the median and 95th percentile of the others.
fn invoke_latency(args: &BenchArgs) -> anyhow::Result<()> {
    use mlless_faas::{FunctionRequest, Limits};
    let invoker = args.invoker.invoker()?;
    let payload = mlless_runtime::Payload::Ping.to_json()?;
    let limits = Limits::new(1024, Duration::from_secs(60));
    let mut times = Vec::new();
    crate::runtime()?.block_on(async {
        for i in 0..args.steps.unwrap_or(100).max(2) {
            let started = Instant::now();
            let request = FunctionRequest::new(format!("ping-{i}"), payload.clone(), limits);
            let report = invoker.invoke(request).await?.wait().await?;
            if let Some(failure) = report.describe_failure() {
                anyhow::bail!("{failure}");
            }
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(())
    })?;
    let first = times.remove(0);
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "invocation round trip on {}: first {first:.1} ms · then median {:.1} ms, p95 {:.1} ms \
         over {} invocations",
        invoker.platform(),
        at(0.5),
        at(0.95),
        times.len()
    );
    Ok(())
}

/// Measures `step` repeatedly for `budget`; returns the calls per second.
fn measure(budget: Duration, mut step: impl FnMut()) -> f64 {
    step(); // warm up caches and allocations
    let started = Instant::now();
    let mut calls = 0u64;
    while started.elapsed() < budget {
        step();
        calls += 1;
    }
    calls as f64 / started.elapsed().as_secs_f64()
}

fn lr_throughput(budget: Duration) -> (f64, f64) {
    let features = 100_000u32;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut batch = SparseBatch::new();
    for _ in 0..1000 {
        let mut idx: Vec<u32> = (0..30).map(|_| rng.random_range(0..features)).collect();
        idx.sort_unstable();
        idx.dedup();
        let values = vec![1.0; idx.len()];
        batch.push_row(f32::from(rng.random_bool(0.5)), &idx, &values);
    }
    let nnz = batch.nnz() as f64;
    let rows = batch.rows() as f64;
    let spec = ModelSpec::LogisticRegression {
        features,
        l2: 1e-5,
        init_bias: 0.0,
    };
    let calls = train_loop(budget, &spec, &Batch::Sparse(batch));
    (calls * nnz, calls * rows)
}

fn pmf_throughput(budget: Duration) -> f64 {
    let (users, items) = (2000u32, 1500u32);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut batch = RatingBatch::default();
    for _ in 0..1000 {
        batch.push(
            rng.random_range(0..users),
            rng.random_range(0..items),
            rng.random_range(1.0..5.0),
        );
    }
    let spec = ModelSpec::MatrixFactorization {
        users,
        items,
        factors: 10,
        l2: 0.02,
        mean: 3.0,
        init_std: 0.1,
        prior: 0.0,
    };
    train_loop(budget, &spec, &Batch::Ratings(batch)) * 1000.0
}

/// The framed codec on an update of sparse LR on 1M features (96,000 entries, gaps of about
/// 10): entries encoded and decoded a second, and the bytes an entry takes on the wire.
fn update_codec(budget: Duration) -> String {
    const MAGIC: [u8; 4] = *b"BNCH";
    let indices: Vec<u32> = (0..96_000).map(|i| i * 10 + i % 7).collect();
    let values: Vec<f32> = (0..96_000).map(|i| (i as f32).sin() * 1e-3).collect();
    let entries = indices.len() as f64;
    let update = SparseVector::from_parts(indices, values).expect("ascending indices");
    let bytes = mlless_data::encode_framed(MAGIC, &update);
    let encodes = measure(budget / 2, || {
        std::hint::black_box(mlless_data::encode_framed(MAGIC, &update));
    });
    let decodes = measure(budget / 2, || {
        let decoded: Result<SparseVector, _> = mlless_data::decode_framed(MAGIC, &bytes);
        std::hint::black_box(decoded.expect("its own encoding decodes"));
    });
    format!(
        "update codec              {:>12.0} entries/s encoded, {:.0} decoded ({:.2} bytes an entry, 96k entries over 1M)",
        encodes * entries,
        decodes * entries,
        bytes.len() as f64 / entries
    )
}

/// The memory-bandwidth limit beside the compute figures: a streaming read of 256 MB of `f32`
/// on one core (their sum, 16 independent lanes, the best pass within `budget`), and how much
/// of it the kernels' own data would take at the throughputs measured: the LR gradient moves
/// 20 bytes a non-zero (its index and value, its weight, its gradient sum read and written),
/// PMF's 276 bytes a rating (the ids and rating, the user's and item's 2 × (10 + 1) parameters,
/// and their gradient sums read and written). A random access moves a whole 64-byte line, so a
/// kernel far below the limit is bound by the latency of its misses, not by bandwidth: the
/// rate of independent random 4-byte reads over 4 MB (a million-parameter vector) and over the
/// 256 MB is given too.
fn memory_limit(budget: Duration, lr_nnz_per_s: f64, pmf_ratings_per_s: f64) -> String {
    const LR_BYTES_PER_NNZ: f64 = 20.0;
    const PMF_BYTES_PER_RATING: f64 = 276.0;
    let data = vec![1.0_f32; 64 << 20];
    let started = Instant::now();
    let mut best = 0.0_f64;
    while best == 0.0 || started.elapsed() < budget {
        let pass = Instant::now();
        let mut lanes = [0.0_f32; 16];
        for chunk in data.chunks_exact(16) {
            for (lane, &x) in lanes.iter_mut().zip(chunk) {
                *lane += x;
            }
        }
        std::hint::black_box(lanes);
        best = best.max((data.len() * 4) as f64 / pass.elapsed().as_secs_f64());
    }
    // Independent reads at pseudo-random positions (a 64-bit LCG), summed.
    let random_reads = |n: usize| {
        let reads = 4_000_000_u64;
        let pass = Instant::now();
        let (mut state, mut sum) = (1_u64, 0.0_f32);
        for _ in 0..reads {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            sum += data[((state >> 33) as usize) % n];
        }
        std::hint::black_box(sum);
        reads as f64 / pass.elapsed().as_secs_f64() / 1e6
    };
    let (near, far) = (random_reads(1 << 20), random_reads(data.len()));
    let share = |bytes_per_s: f64| {
        format!(
            "{:.2} GB/s = {:.1}% of it",
            bytes_per_s / 1e9,
            100.0 * bytes_per_s / best
        )
    };
    format!(
        "memory streaming read     {:>12.2} GB/s         (256 MB of f32, one core; random 4-byte \
         reads {near:.0} M/s over 4 MB, {far:.0} M/s over 256 MB)\n  \
         lr at {LR_BYTES_PER_NNZ} B/nnz: {} · pmf at {PMF_BYTES_PER_RATING} B/rating: {}",
        best / 1e9,
        share(lr_nnz_per_s * LR_BYTES_PER_NNZ),
        share(pmf_ratings_per_s * PMF_BYTES_PER_RATING),
    )
}

/// Minibatch steps per second: gradient, Adam step, apply.
fn train_loop(budget: Duration, spec: &ModelSpec, batch: &Batch) -> f64 {
    let model = spec.model();
    let mut params = spec.init_params(1);
    let mut optimizer =
        mlless_core::build_optimizer(&OptimizerConfig::new(OptimizerKind::Adam), params.len());
    let mut acc = GradientAccumulator::new(params.len());
    measure(budget, || {
        if model.gradient(&params, batch, &mut acc).is_ok() {
            let grad = acc.take();
            let delta = optimizer.step(&params, &grad, 0.01);
            delta.scaled_add_to(&mut params, 1.0);
        }
    })
}

/// Trains sparse LR with 4 workers for a few epochs and splits the step time.
fn exchange(args: &BenchArgs) -> anyhow::Result<()> {
    let dir = args.dir.join("exchange");
    std::fs::create_dir_all(&dir)?;
    let input = dir.join("lr.libsvm");
    let spec = mlless_data::SparseLrSpec::new(40_000, 20_000, 30, 3);
    crate::generate::write_with(&input, |out| mlless_data::write_sparse_lr(&spec, out))?;
    let data = dir.join("store");
    crate::demo::prepare_local(mlless_data::InputFormat::Libsvm, &input, &data, 500, 1)?;
    let mut train = crate::train::TrainArgs::with_defaults(
        &data.display().to_string(),
        mlless_job::ModelChoice::LogisticRegression,
    )?;
    train.max_epochs = 3;
    train.quiet = true;
    let record = crate::train::train_with_progress(&train)?;
    // Skip the first steps: process start-up and cold caches.
    let steps: Vec<_> = record
        .steps
        .iter()
        .skip(3)
        .flat_map(|s| &s.workers)
        .collect();
    let n = steps.len().max(1) as f64;
    let mean = |f: &dyn Fn(&mlless_job::record::WorkerStep) -> f64| {
        steps.iter().map(|w| f(w)).sum::<f64>() / n
    };
    let mut exchange: Vec<f64> = steps.iter().map(|w| w.exchange_ms).collect();
    exchange.sort_by(f64::total_cmp);
    let median = exchange.get(exchange.len() / 2).copied().unwrap_or(0.0);
    println!(
        "bsp step, P=4, file channel: step {:.2} ms = read {:.2} + compute {:.2} + exchange {:.2} ms (median exchange {median:.2} ms, {} steps)",
        mean(&|w| w.step_ms),
        mean(&|w| w.read_ms),
        mean(&|w| w.compute_ms),
        mean(&|w| w.exchange_ms),
        record.steps.len()
    );
    println!(
        "  exchange overhead (step − compute) {:.2} ms per step",
        mean(&|w| w.step_ms - w.compute_ms)
    );
    Ok(())
}

/// One row per (workers, update size): the per-step exchange time through the channel.
fn channel(args: &BenchArgs) -> anyhow::Result<()> {
    let store = args.dir.join("channel-store");
    let runtime = crate::runtime()?;
    println!(
        "{:<64} {:<15} {:>3} {:>10} {:>11} {:>11} {:>12}",
        "channel", "pattern", "P", "update", "median ms", "p95 ms", "recv MB/s"
    );
    let loads: Vec<BenchLoad> = if args.pattern.is_empty() {
        args.update_bytes
            .iter()
            .map(|&b| BenchLoad::Bytes(b))
            .collect()
    } else {
        args.pattern
            .iter()
            .map(|&p| BenchLoad::Update {
                pattern: p,
                params: args.params,
            })
            .collect()
    };
    let channel = mlless_job::billing::channel_kind(args.channel.as_deref());
    anyhow::ensure!(
        args.pattern.iter().all(|&p| p.runs_on(channel)),
        "--pattern server has the parameter servers average the updates: it needs a ps:// \
         --channel (mlless ps)"
    );
    let clouds = if args.emulate.is_empty() {
        vec![None]
    } else {
        args.emulate.clone()
    };
    let worker_counts = if args.workers.is_empty() {
        vec![4]
    } else {
        args.workers.clone()
    };
    for cloud in &clouds {
        for &workers in &worker_counts {
            for &load in &loads {
                let report = runtime.block_on(mlless_runtime::bench::channel_bench(
                    args.invoker.invoker()?,
                    args.channel.clone(),
                    &store.display().to_string(),
                    workers,
                    load,
                    args.steps.unwrap_or(100),
                    cloud.clone(),
                ))?;
                println!(
                    "{:<64} {:<15} {:>3} {:>10} {:>11.3} {:>11.3} {:>12.1}",
                    report.channel,
                    report.pattern.map_or("raw", |p| p.name()),
                    report.workers,
                    report.update_bytes,
                    report.median_ms,
                    report.p95_ms,
                    report.received_mb_per_s
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn sizes_parse_with_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("1KB"), Ok(1000));
        assert_eq!(parse_bytes("100kb"), Ok(100_000));
        assert_eq!(parse_bytes("4MB"), Ok(4_000_000));
        assert!(parse_bytes("4GB").is_err());
        assert!(parse_bytes("x").is_err());
    }
}
