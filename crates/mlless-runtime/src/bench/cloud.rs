//! `mlless bench cloud`: what a training step would take and cost in a cloud, for fleets of up
//! to hundreds of functions, simulated on one machine.
//!
//! # How
//!
//! P workers run as tasks of one thread, each with its own replica, optimiser and update
//! filter, training a real model on real minibatches and exchanging real updates through the
//! runtime's own [`Exchange`] (broadcast, all-reduce, scatter-reduce, and the server pattern
//! through simulated parameter servers) over an [`InProcessChannel`] behind an
//! [`EmulatedChannel`]: every request pays the cloud's latency
//! and bandwidth ([`CloudLatency`]). Time is simulated: tokio's clock is paused and moves from
//! timer to timer, so the waits of hundreds of functions cost no real time, and every task's
//! CPU time (measured around each of its polls) is charged to its own clock before each
//! request it makes and at the end of its step, as if each function had a core of its own.
//! Tokio's timer counts whole milliseconds, so the simulated clock runs [`SLOWDOWN`] times
//! slower than the one reported: its milliseconds stand for microseconds.
//!
//! What a step is billed: every worker's GB-seconds at the function's memory, the channel's
//! requests (S3: a PUT per message, a GET per message read, a DELETE per discard, priced at the
//! platform's object-store rates) or its server's hours (ElastiCache: one Redis instance), and
//! one GET of the worker's minibatch (prefetched during the step before, so off its critical
//! path).
//!
//! What it leaves out: the gap a real poller of S3 leaves between a message landing and its
//! next look (the emulated collect reads the moment the last message lands: a lower bound for
//! S3), function start-up, stragglers, and the supervisor.

use crate::{Internal, Refusal};
use std::future::Future;
use std::io::Cursor;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_core::{
    Batch, Compression, FilterConfig, GradientAccumulator, ModelSpec, OptimizerConfig,
    OptimizerKind, RatingBatch, SignificanceScale, SparseBatch, UpdateFilter, WireDelta,
    build_optimizer,
};
use mlless_cost::PriceTable;
use mlless_cost::cloud::{UpdateSize, exchange_ms};
use mlless_data::{CriteoSpec, InputFormat, ParseOptions, Parsed, RatingsSpec, SparseLrSpec};
use mlless_job::batch_plan::DEFAULT_GLOBAL_BATCHES;
use mlless_job::{BatchPlan, ModelChoice, Pattern};

mod metering;
mod parameter_server;
use metering::*;
use mlless_store::requests::{Request, pages};
use mlless_store::{
    Averaged, Channel, ChannelError, CloudLatency, EmulatedChannel, InProcessChannel, MessageId,
    RequestCounter, RequestCounts, Share, StepExchange, StepMessages, WorkerId,
};
use parameter_server::SimulatedServers;
use rand::SeedableRng;
use rand::seq::SliceRandom;

use crate::driver::{
    CURVATURE_ITERATIONS, DEFAULT_HIDDEN, DataSample, Defaults, PMF_L2, initial_bias,
};
use crate::error::{Result, RuntimeError};
use crate::exchange::Exchange;
use crate::messages::Traffic;
use crate::messages::UpdateMessage;

/// How much slower the simulated clock runs than the one reported (see the module docs).
pub const SLOWDOWN: u32 = 1000;

/// Steps of each worker that are run but not measured: the first exchanges, whose updates are
/// unlike the later ones (an optimiser's first steps, filters with nothing held back yet).
pub const WARM_UP_STEPS: u64 = 2;

/// The jobs of the cloud benchmark: the shapes of classic data sets, generated (`mlless bench
/// cloud --job`: with the feature `clap`, the CLI's value, named as by [`CloudJob::name`], with
/// the help of `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum CloudJob {
    /// a9a-shaped sparse logistic regression (32,561 rows, 123 features, minibatch 256).
    ///
    /// The features are binary, 14 a row.
    #[cfg_attr(feature = "clap", value(name = "lr"))]
    SparseLr,
    /// MovieLens-100k-shaped matrix factorisation (943 × 1,682, 100k ratings, minibatch 1,000).
    ///
    /// 943 users, 1,682 items, rank 10.
    Pmf,
    /// A linear SVM on the a9a-shaped data.
    ///
    /// The data of [`CloudJob::SparseLr`].
    Svm,
    /// The default MLP (64 hidden units) on the a9a-shaped data.
    ///
    /// One hidden layer of 64, two classes, on the data of [`CloudJob::SparseLr`].
    Mlp,
    /// MovieLens-20M-shaped matrix factorisation (138,493 × 26,744, minibatch 3,000).
    ///
    /// MLLess's scale-out job: 138,493 users, 26,744 items, rank 10, minibatches of 3,000 (a global batch of 12,000 ratings, as MLLess
    /// held it); steps are simulated on a sample of 2M ratings of that shape, epochs counted
    /// over 20M.
    #[cfg_attr(feature = "clap", value(name = "pmf-20m"))]
    Pmf20m,
    /// Criteo-shaped sparse logistic regression (2^20 hashed features, minibatch 1,000).
    ///
    /// LambdaML's and MLLess's large LR job: the Kaggle set's columns hashed into 2^20 features, minibatches of 1,000; steps are
    /// simulated on a sample of 200,000 rows, epochs counted over the Kaggle set's 45.8M.
    Criteo,
}

impl CloudJob {
    /// The model it trains.
    pub fn model(self) -> ModelChoice {
        match self {
            CloudJob::SparseLr | CloudJob::Criteo => ModelChoice::LogisticRegression,
            CloudJob::Pmf | CloudJob::Pmf20m => ModelChoice::MatrixFactorization,
            CloudJob::Svm => ModelChoice::Svm,
            CloudJob::Mlp => ModelChoice::Mlp,
        }
    }

    /// Its name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CloudJob::SparseLr => "lr",
            CloudJob::Pmf => "pmf",
            CloudJob::Svm => "svm",
            CloudJob::Mlp => "mlp",
            CloudJob::Pmf20m => "pmf-20m",
            CloudJob::Criteo => "criteo",
        }
    }
}

/// What a worker sends of its update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UpdateRule {
    /// Everything (BSP).
    Bsp,
    /// ISP's significant entries, at the threshold `V` of `--significance` (0.7 by default).
    Isp(f32),
    /// A compression of everything, with error feedback (`topk:K`, `topk:F`, `onebit`).
    Compressed(Compression),
}

impl UpdateRule {
    /// Parses `bsp`, `isp`, `isp:V`, or a compression as `--compress` takes it.
    pub fn parse(text: &str) -> std::result::Result<UpdateRule, String> {
        match text {
            "bsp" => return Ok(UpdateRule::Bsp),
            "isp" => return Ok(UpdateRule::Isp(0.7)),
            _ => {}
        }
        if let Some(v) = text.strip_prefix("isp:") {
            return match v.parse::<f32>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(UpdateRule::Isp(v)),
                _ => Err(format!("not a significance threshold: {v:?}")),
            };
        }
        text.parse::<Compression>()
            .map(UpdateRule::Compressed)
            .map_err(|e| format!("{e}, or bsp, isp, isp:V"))
    }

    /// Its name in tables.
    pub fn name(&self) -> String {
        match self {
            UpdateRule::Bsp => "bsp".into(),
            UpdateRule::Isp(v) => format!("isp:{v}"),
            UpdateRule::Compressed(c) => c.to_string(),
        }
    }

    fn filter(&self) -> FilterConfig {
        match *self {
            UpdateRule::Bsp => FilterConfig::default(),
            UpdateRule::Isp(v) => FilterConfig {
                significance: Some(v),
                significance_scale: SignificanceScale::Parameter,
                compression: Compression::None,
            },
            UpdateRule::Compressed(compression) => FilterConfig {
                compression,
                ..FilterConfig::default()
            },
        }
    }
}

/// A job's data and model, made once for every case of the benchmark.
#[derive(Debug)]
pub struct CloudData {
    /// The job.
    pub job: CloudJob,
    spec: ModelSpec,
    batches: Vec<Batch>,
    /// The model's default optimiser and learning rate; sparse LR's is scaled to the global
    /// batch by [`Defaults::lr_for`].
    defaults: Defaults,
    sample: DataSample,
    batch_size: u32,
    /// Minibatches of an epoch of the full data set (more than `batches` where the steps are
    /// simulated on a sample of it).
    epoch_batches: u64,
}

impl CloudData {
    /// Generates the job's data (seeded) and cuts it into shuffled minibatches.
    pub fn generate(job: CloudJob, seed: u64) -> Result<CloudData> {
        let generated = |what: &str, source: std::io::Error| Internal::BenchData {
            what: what.to_owned(),
            source,
        };
        let mut text = Vec::new();
        let ratings = |users: u32, items: u32, count: f64| RatingsSpec {
            users,
            items,
            rank: 10,
            density: count / (f64::from(users) * f64::from(items)),
            noise: 0.9,
            seed,
            ..Default::default()
        };
        // (format, name, minibatch, feature space, rows of the full set if only a sample is
        // generated)
        let (format, name, batch_size, features, full_rows) = match job {
            CloudJob::SparseLr | CloudJob::Svm | CloudJob::Mlp => {
                let spec = SparseLrSpec::new(32_561, 123, 14, seed);
                mlless_data::write_sparse_lr(&spec, &mut text)
                    .map_err(|e| generated("a9a-shaped", e))?;
                (InputFormat::Libsvm, "a9a-shaped", 256, None, None)
            }
            CloudJob::Pmf => {
                mlless_data::write_ratings(&ratings(943, 1_682, 100_000.0), &mut text)
                    .map_err(|e| generated("ML-100k-shaped", e))?;
                (InputFormat::Movielens, "ML-100k-shaped", 1_000, None, None)
            }
            CloudJob::Pmf20m => {
                mlless_data::write_ratings(&ratings(138_493, 26_744, 2e6), &mut text)
                    .map_err(|e| generated("ML-20M-shaped", e))?;
                let full = Some(20_000_263);
                (InputFormat::Movielens, "ML-20M-shaped", 3_000, None, full)
            }
            CloudJob::Criteo => {
                let spec = CriteoSpec::new(200_000, seed);
                mlless_data::write_criteo(&spec, &mut text)
                    .map_err(|e| generated("Criteo-shaped", e))?;
                let features = Some(spec.features);
                let full = Some(45_840_617);
                (InputFormat::Criteo, "Criteo-shaped", 1_000, features, full)
            }
        };
        let parsed = mlless_data::parse_reader(
            Cursor::new(text),
            Path::new(name),
            format,
            &ParseOptions {
                features,
                ..ParseOptions::default()
            },
        )
        .map_err(|source| Internal::BenchParse {
            what: name.to_owned(),
            source,
        })?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let defaults = Defaults::for_model(job.model(), None);
        let (spec, batches, sample, batch_size) = match parsed {
            Parsed::Sparse { rows, features, .. } => {
                let mut order: Vec<usize> = (0..rows.rows()).collect();
                order.shuffle(&mut rng);
                let positives = rows.labels.iter().filter(|&&y| y > 0.5).count();
                let sample = DataSample {
                    positive_rate: positives as f64 / rows.rows().max(1) as f64,
                    curvature: rows.top_second_moment(features as usize, CURVATURE_ITERATIONS),
                    // Only the rate is read here, not the schedule.
                    feature_occurrences: 0.0,
                };
                let batches: Vec<Batch> = order
                    .chunks(batch_size as usize)
                    .map(|chunk| {
                        let mut batch = SparseBatch::new();
                        for &r in chunk {
                            let (label, indices, values) = rows.row(r);
                            batch.push_row(label, indices, values);
                        }
                        Batch::Sparse(batch)
                    })
                    .collect();
                let spec = match job.model() {
                    ModelChoice::Svm => ModelSpec::Svm {
                        features,
                        l2: defaults.l2,
                    },
                    ModelChoice::Mlp => ModelSpec::Mlp {
                        features,
                        hidden: DEFAULT_HIDDEN.to_vec(),
                        classes: 2,
                        l2: defaults.l2,
                    },
                    _ => ModelSpec::LogisticRegression {
                        features,
                        l2: defaults.l2,
                        init_bias: initial_bias(sample.positive_rate),
                    },
                };
                (spec, batches, sample, batch_size)
            }
            Parsed::Ratings {
                ratings,
                users,
                items,
            } => {
                let all: Vec<(u32, u32, f32)> = ratings.iter().collect();
                let mean =
                    all.iter().map(|r| f64::from(r.2)).sum::<f64>() / all.len().max(1) as f64;
                let mut order: Vec<usize> = (0..all.len()).collect();
                order.shuffle(&mut rng);
                let batches = order
                    .chunks(batch_size as usize)
                    .map(|chunk| {
                        let mut batch = RatingBatch::default();
                        for &r in chunk {
                            let (user, item, rating) = all[r];
                            batch.push(user, item, rating);
                        }
                        Batch::Ratings(batch)
                    })
                    .collect();
                // No count-aware prior: it needs the training counts the driver stores.
                let spec = ModelSpec::MatrixFactorization {
                    users,
                    items,
                    factors: defaults.factors,
                    l2: PMF_L2,
                    mean: mean as f32,
                    init_std: 0.1,
                    prior: 0.0,
                };
                let sample = DataSample {
                    positive_rate: 0.5,
                    curvature: 0.0,
                    feature_occurrences: 0.0,
                };
                (spec, batches, sample, batch_size)
            }
        };
        let epoch_batches = full_rows.map_or(batches.len() as u64, |rows: u64| {
            rows.div_ceil(u64::from(batch_size))
        });
        Ok(CloudData {
            job,
            spec,
            batches,
            defaults,
            sample,
            batch_size,
            epoch_batches,
        })
    }

    /// Minibatches in an epoch of the full data set.
    pub fn batches(&self) -> u64 {
        self.epoch_batches
    }

    /// How `workers` workers share the global batch of a job with the defaults:
    /// [`DEFAULT_GLOBAL_BATCHES`] minibatches, as `train` plans it.
    fn plan(&self, workers: u32) -> BatchPlan {
        let global = DEFAULT_GLOBAL_BATCHES * u64::from(self.batch_size);
        let min_rows = self.batches.iter().map(Batch::samples).min().unwrap_or(0);
        BatchPlan::of(global, workers, self.batch_size, min_rows as u32)
    }

    /// The learning rate of a step of `workers` workers.
    fn lr(&self, workers: u32) -> f32 {
        let global = self
            .plan(workers)
            .global_batch(workers as usize, self.batch_size);
        self.defaults
            .lr_for(self.job.model(), global.round() as u64, self.sample)
    }

    /// The samples `positions` of the stream of minibatches (in one shuffled order, epoch after
    /// epoch) as `plan` cuts them.
    fn read(&self, plan: &BatchPlan, positions: std::ops::Range<u64>) -> Result<Batch> {
        let m = self.batches.len() as u64;
        let parts = plan.parts(positions);
        let pieces: Vec<(&Batch, std::ops::Range<usize>)> = parts
            .iter()
            .map(|part| {
                let batch = &self.batches[(part.minibatch % m) as usize];
                (batch, part.rows(batch.samples()))
            })
            .collect();
        Batch::concat(&pieces).ok_or_else(|| Internal::Invariant("minibatches of two kinds").into())
    }

    fn optimizer(&self) -> OptimizerKind {
        self.defaults.optimizer
    }
}

/// One configuration to simulate.
#[derive(Debug, Clone)]
pub struct CloudCase {
    /// The cloud whose latency the channel has.
    pub cloud: CloudLatency,
    /// Workers.
    pub workers: u32,
    /// The exchange's pattern.
    pub pattern: Pattern,
    /// What the workers send.
    pub rule: UpdateRule,
    /// Steps measured (after [`WARM_UP_STEPS`]).
    pub steps: u64,
    /// Each function's memory, MB (what is billed).
    pub memory_mb: u32,
}

/// What a case came to.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudReport {
    /// Median step time over workers and measured steps, in ms.
    pub step_ms: f64,
    /// Mean time of a worker's gradient, optimiser and filter per step, in ms.
    pub compute_ms: f64,
    /// Mean bytes a worker sent per step.
    pub sent_bytes: f64,
    /// Mean bytes a worker received per step.
    pub received_bytes: f64,
    /// The fleet's requests to the channel and for minibatches, per step.
    pub requests_per_step: f64,
    /// What a step of the whole fleet costs, in USD.
    pub usd_per_step: f64,
    /// Seconds for a pass over the training data (`batches / P` steps; less than one step
    /// where the fleet is larger than an epoch's minibatches).
    pub epoch_s: f64,
    /// What a pass over the training data costs, in USD.
    pub usd_per_epoch: f64,
    /// The workers' mean training loss over the last measured step.
    pub loss: f64,
    /// The workers' mean training loss over the first step, before any exchange: a `loss`
    /// above it by more than [`DIVERGENCE_MARGIN`] says the run diverges.
    pub first_loss: f64,
    /// The cost model's step for the same case ([`mlless_cost::cloud::exchange_ms`] from the
    /// case's latency, pattern and measured update size, plus the measured compute), ms: what
    /// `mlless cost` would project, to compare with `step_ms`.
    pub model_step_ms: f64,
    /// Steps of an epoch of the full data set at this fleet size.
    pub steps_per_epoch: f64,
}

/// How far above the first step's loss the last measured step's may be before a case is said
/// to diverge: a few steps of a large model (MovieLens-20M-shaped PMF, where each step meets
/// mostly users no step has trained yet) hardly move the loss, and a fresh sample of
/// minibatches moves it by a percent or so either way; a diverging rate multiplies it.
pub const DIVERGENCE_MARGIN: f64 = 1.1;

impl CloudReport {
    /// Whether the case diverged: its loss is not a number, or rose more than
    /// [`DIVERGENCE_MARGIN`] above the first step's.
    pub fn diverging(&self) -> bool {
        !(self.loss.is_finite() && self.loss <= self.first_loss * DIVERGENCE_MARGIN)
    }
}

/// Simulates `case` on `data` and bills it at `prices`.
pub fn simulate(data: &CloudData, case: &CloudCase, prices: &PriceTable) -> Result<CloudReport> {
    if case.workers == 0 || case.steps == 0 {
        return Err(Refusal::CloudBenchEmpty.into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(Internal::Runtime)?;
    let slowed = case.cloud.slowed(f64::from(SLOWDOWN));
    if case.pattern == Pattern::Server && case.cloud.name != CloudLatency::ps().name {
        return Err(Refusal::EmulateWithoutServers {
            emulate: case.cloud.name.to_string(),
        }
        .into());
    }
    let servers = SimulatedServers(InProcessChannel::new("cloud-bench"));
    let shared: Arc<dyn Channel> =
        Arc::new(EmulatedChannel::new(Arc::new(servers), slowed).on_tokio_timer());
    let workers: Vec<WorkerId> = (0..case.workers).collect();
    let requests = RequestCounter::new();
    let results = runtime.block_on(async {
        let runs = workers.iter().map(|&w| {
            let account = Arc::new(CpuAccount::default());
            let channel = MeteredChannel {
                inner: shared.clone(),
                account: account.clone(),
                requests: requests.clone(),
            };
            Metered {
                account,
                inner: Box::pin(run_worker(data, case, w, &workers, channel)),
            }
        });
        futures::future::try_join_all(runs).await
    })?;
    Ok(summarise(data, case, prices, &results, requests.counts()))
}

/// What one worker measured.
#[derive(Debug, Default)]
struct WorkerRun {
    step_ms: Vec<f64>,
    compute_ms: f64,
    sent: u64,
    received: u64,
    first_loss: f64,
    last_loss: f64,
}

/// One simulated worker: the synchronous GA-SGD step of `worker::synchronous`, without the
/// supervisor, faults and scale-in.
async fn run_worker(
    data: &CloudData,
    case: &CloudCase,
    me: WorkerId,
    workers: &[WorkerId],
    channel: MeteredChannel,
) -> Result<WorkerRun> {
    let spec = &data.spec;
    let model = spec.model();
    let dim = spec.num_params();
    let mut params = spec.init_params(1);
    let mut optimizer = build_optimizer(&OptimizerConfig::new(data.optimizer()), dim);
    let mut accumulator = GradientAccumulator::new(dim);
    let config = case.rule.filter();
    let mut filter = (!config.is_identity()).then(|| UpdateFilter::new(dim, config));
    let lr = data.lr(case.workers);
    let plan = data.plan(case.workers);
    let share = plan.share(workers.len());
    let exchange = Exchange {
        channel: &channel,
        job_workers: case.workers,
        timeout: Duration::from_secs(3_600) * SLOWDOWN,
        pattern: case.pattern,
        worker: me,
        workers,
        dim,
        expected_removal: 1,
    };
    let p = u64::from(case.workers);
    let mut run = WorkerRun::default();
    for step in 0..case.steps + WARM_UP_STEPS {
        let started = tokio::time::Instant::now();
        let first = (step * p + u64::from(me)) * share;
        let batch = data.read(&plan, first..first + share)?;
        let loss = model
            .gradient(&params, &batch, &mut accumulator)
            .map_err(|source| RuntimeError::Model {
                location: format!("simulated worker {me}, step {step}"),
                source,
            })?;
        if step == 0 {
            run.first_loss = loss.mean();
        }
        let gradient = accumulator.take();
        let own = optimizer.step(&params, &gradient, lr);
        let sent = match &mut filter {
            Some(filter) => filter.filter(&own, &params, step).0,
            None => WireDelta::Sparse(own.clone()),
        };
        let compute = channel.account.take();
        sleep_cpu(compute).await;
        let message = UpdateMessage {
            step,
            worker: me,
            loss,
            stop: false,
            last: false,
            applied_through: step,
            removal: None,
            delta: sent,
        };
        let mut traffic = Traffic::default();
        // As a worker does: the step before the last is deleted while this one exchanges.
        let (exchanged, ()) = futures::try_join!(
            exchange.run(message, filter.as_ref().map(|_| &own), &mut traffic),
            super::discard_before(step, |old| exchange.discard(old)),
        )?;
        exchanged.mean.scaled_add_to(&mut params, 1.0);
        sleep_cpu(channel.account.take()).await;
        if step >= WARM_UP_STEPS {
            let took = started.elapsed().as_secs_f64() * 1e3 / f64::from(SLOWDOWN);
            run.step_ms.push(took);
            run.compute_ms += compute.as_secs_f64() * 1e3;
            run.sent += traffic.bytes_sent;
            run.received += traffic.bytes_received;
            run.last_loss = loss.mean();
        }
    }
    Ok(run)
}

fn summarise(
    data: &CloudData,
    case: &CloudCase,
    prices: &PriceTable,
    runs: &[WorkerRun],
    requests: RequestCounts,
) -> CloudReport {
    let steps = case.steps as f64;
    let p = f64::from(case.workers);
    let mut times: Vec<f64> = runs
        .iter()
        .flat_map(|r| r.step_ms.iter().copied())
        .collect();
    times.sort_by(f64::total_cmp);
    let step_ms = times.get(times.len() / 2).copied().unwrap_or(0.0);
    let per_worker_step =
        |f: &dyn Fn(&WorkerRun) -> f64| runs.iter().map(f).sum::<f64>() / p / steps;
    // Every worker's minibatch GET of every step (measured or not).
    let all_steps = (case.steps + WARM_UP_STEPS) as f64;
    let minibatch_gets = p * all_steps;
    let step_s = step_ms / 1e3;
    let mut table_usd = 0.0;
    let (channel_writes, channel_reads, services_per_hour) = if case.cloud.name
        == CloudLatency::dynamodb().name
    {
        // DynamoDB on demand: its request units are billed.
        table_usd = requests.table_write_units as f64 / 1e6 * prices.dynamodb_write_usd_per_million
            + requests.table_read_units as f64 / 1e6 * prices.dynamodb_read_usd_per_million;
        (0.0, 0.0, 0.0)
    } else if case.cloud.reads_at_once.is_some() {
        // An object store: its requests are billed.
        (requests.writes() as f64, requests.reads() as f64, 0.0)
    } else {
        // A server: its hours are.
        (0.0, 0.0, prices.redis_usd_per_hour)
    };
    let writes_per_step = channel_writes / all_steps;
    let reads_per_step = (channel_reads + minibatch_gets) / all_steps;
    let usd_per_step = p * step_s * f64::from(case.memory_mb) / 1024.0 * prices.gb_second_usd
        + writes_per_step / 1000.0 * prices.object_write_usd_per_1000
        + reads_per_step / 1000.0 * prices.object_read_usd_per_1000
        + table_usd / all_steps
        + (services_per_hour + prices.services_usd_per_hour) * step_s / 3600.0;
    let steps_per_epoch = data.plan(case.workers).steps_per_epoch(
        u32::try_from(data.batches()).unwrap_or(u32::MAX),
        case.workers as usize,
    ) as f64;
    let compute_ms = per_worker_step(&|r| r.compute_ms);
    let sent_bytes = per_worker_step(&|r| r.sent as f64);
    let dense_bytes = data.spec.num_params() as f64 * 4.0;
    let update = UpdateSize::measured(dense_bytes, case.pattern.shape(), case.workers, sent_bytes);
    let latency = mlless_job::config::service_latency(&case.cloud);
    let model_step_ms =
        compute_ms + exchange_ms(case.pattern.shape(), &latency, case.workers, &update);
    CloudReport {
        step_ms,
        model_step_ms,
        compute_ms,
        sent_bytes,
        received_bytes: per_worker_step(&|r| r.received as f64),
        requests_per_step: requests.total() as f64 / all_steps + p,
        usd_per_step,
        steps_per_epoch,
        epoch_s: steps_per_epoch * step_s,
        usd_per_epoch: steps_per_epoch * usd_per_step,
        loss: runs.iter().map(|r| r.last_loss).sum::<f64>() / p,
        first_loss: runs.iter().map(|r| r.first_loss).sum::<f64>() / p,
    }
}

#[cfg(test)]
mod tests;
