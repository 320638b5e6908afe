//! The driver: the user's process. It checks the data set, writes the job spec, invokes the
//! supervisor and the workers, shows progress, and completes the run record with what the
//! invocations cost. It holds no training state that a function needs.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use mlless_core::{Compression, ModelSpec, OptimizerConfig, OptimizerKind, Schedule, TunerConfig};
use mlless_cost::{ChannelKind, ObjectRequests, PriceTable, Usage};
use mlless_data::DatasetKind;
use mlless_faas::{FunctionRequest, InvocationReport, Invoker, KillSwitch, Limits};
use mlless_store::{Store, open_channel, redact_url};
use tracing::{info, warn};

use crate::checkpoint;
use crate::dataset::Dataset;
use crate::error::{Result, RuntimeError};
use crate::function::Payload;
use crate::messages::{PROGRESS_KEY, Progress, STOP_KEY, StopRequest};
use crate::record::{RECORD_KEY, RunRecord};
use crate::spec::{Algorithm, JobSpec, Pattern, SPEC_KEY, StopCriteria, SyncMode};
use crate::supervisor::SUPERVISOR_ROLE;
use crate::worker::worker_role;

/// How often the driver polls the supervisor's progress.
const POLL: Duration = Duration::from_millis(100);

/// Which model to train.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelChoice {
    /// Sparse logistic regression (`lr`).
    LogisticRegression,
    /// Probabilistic matrix factorisation with biases (`pmf`).
    MatrixFactorization,
    /// Linear SVM, hinge loss (`svm`).
    Svm,
    /// k-means clustering by distributed Lloyd steps (`kmeans`).
    KMeans,
    /// A dense network with one or two hidden layers (`mlp`).
    Mlp,
}

impl ModelChoice {
    /// The name `--model` takes.
    pub fn name(&self) -> &'static str {
        match self {
            Self::LogisticRegression => "lr",
            Self::MatrixFactorization => "pmf",
            Self::Svm => "svm",
            Self::KMeans => "kmeans",
            Self::Mlp => "mlp",
        }
    }
}

/// Hyperparameters that have defaults per model (see [`Defaults`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hyperparameters {
    /// Learning rate.
    pub lr: Option<f32>,
    /// L2 regularisation.
    pub l2: Option<f32>,
    /// Latent factors (PMF).
    pub factors: Option<u32>,
    /// Clusters (k-means).
    pub clusters: Option<u32>,
    /// Widths of the hidden layers (MLP).
    pub hidden: Option<Vec<u32>>,
    /// Classes (MLP; labels are class ids `0..classes`).
    pub classes: Option<u32>,
}

/// Clusters of k-means when `--k` is not given.
pub const DEFAULT_CLUSTERS: u32 = 8;
/// Hidden layers of the MLP when `--hidden` is not given.
pub const DEFAULT_HIDDEN: &[u32] = &[64];
/// k-means stops once the inertia changes by less than this fraction, unless told otherwise.
pub const DEFAULT_TOLERANCE: f64 = 1e-4;

/// The defaults of the hyperparameters, chosen to be robust across data sets rather than tuned
/// to one (gradients are means over a minibatch; L2 is per example; the CLI's default schedule
/// is lr / sqrt(epoch + 1), which also made the result of sparse LR the same with 1 and with 4
/// workers).
///
/// Sparse LR defaults to momentum SGD: on sparse data with a long tail of rare features,
/// Adam's per-coordinate step sizes give a rare feature as large a step as a frequent one, and it
/// overfits the tail (on the synthetic Zipf data of `generate sparse-lr`, 3% worse test log loss
/// than momentum after 10 epochs). PMF defaults to Adam: a user's or item's rows appear in few
/// minibatches and their batch-mean gradients are small, which plain SGD would need a learning
/// rate proportional to the batch size to follow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Defaults {
    /// Optimiser.
    pub optimizer: OptimizerKind,
    /// Learning rate.
    pub lr: f32,
    /// L2 regularisation.
    pub l2: f32,
    /// Latent factors.
    pub factors: u32,
}

impl Defaults {
    /// The defaults for a model, with the optimiser the user chose (or the model's default).
    pub fn for_model(model: ModelChoice, optimizer: Option<OptimizerKind>) -> Self {
        use OptimizerKind::{Adam, Momentum, Nesterov, Sgd};
        match model {
            ModelChoice::LogisticRegression => {
                let optimizer = optimizer.unwrap_or(Momentum);
                Self {
                    optimizer,
                    lr: match optimizer {
                        Momentum | Nesterov => 0.5,
                        Sgd => 3.0,
                        Adam => 0.003,
                    },
                    l2: 1e-4,
                    factors: 0,
                }
            }
            ModelChoice::MatrixFactorization => {
                let optimizer = optimizer.unwrap_or(Adam);
                Self {
                    optimizer,
                    lr: match optimizer {
                        Adam => 0.03,
                        Momentum | Nesterov => 3.0,
                        Sgd => 30.0,
                    },
                    l2: 0.05,
                    factors: 10,
                }
            }
            // The hinge's gradient is the row itself wherever the margin is short, twice the
            // logistic loss's typical size: half LR's step.
            ModelChoice::Svm => {
                let optimizer = optimizer.unwrap_or(Momentum);
                Self {
                    optimizer,
                    lr: match optimizer {
                        Momentum | Nesterov => 0.2,
                        Sgd => 1.0,
                        Adam => 0.003,
                    },
                    l2: 1e-4,
                    factors: 0,
                }
            }
            // Lloyd steps take no learning rate or optimiser.
            ModelChoice::KMeans => Self {
                optimizer: optimizer.unwrap_or(Sgd),
                lr: 0.0,
                l2: 0.0,
                factors: 0,
            },
            // Adam, as for most small dense networks: robust to the scale of the inputs.
            ModelChoice::Mlp => {
                let optimizer = optimizer.unwrap_or(Adam);
                Self {
                    optimizer,
                    lr: match optimizer {
                        Adam => 0.01,
                        Momentum | Nesterov => 0.1,
                        Sgd => 0.5,
                    },
                    l2: 1e-4,
                    factors: 0,
                }
            }
        }
    }
}

/// What `mlless train` asks for. `Debug` shows the URLs redacted.
#[derive(Clone)]
pub struct TrainOptions {
    /// Location of the prepared data set.
    pub data_url: String,
    /// Location below which the run writes its spec, model and record (default: `{data}/runs`).
    pub runs_url: Option<String>,
    /// The model.
    pub model: ModelChoice,
    /// Hyperparameters; `None` takes the default.
    pub hyper: Hyperparameters,
    /// Number of workers.
    pub workers: u32,
    /// The optimiser (`None`: the model's default).
    pub optimizer: Option<OptimizerKind>,
    /// Learning-rate schedule.
    pub schedule: Schedule,
    /// Seed of initialisation and minibatch order.
    pub seed: u64,
    /// When to stop.
    pub stop: StopCriteria,
    /// Channel URL (`None`: the run's object store).
    pub channel: Option<String>,
    /// Limits of every function.
    pub limits: Limits,
    /// Prices to bill the run at.
    pub prices: PriceTable,
    /// How the workers synchronise.
    pub sync: SyncMode,
    /// How the workers compress their updates.
    pub compression: Compression,
    /// The scale-in auto-tuner (`None`: off).
    pub scale_in: Option<TunerConfig>,
    /// How the workers combine their work.
    pub algorithm: Algorithm,
    /// How an exchange aggregates the workers' vectors.
    pub pattern: Pattern,
}

/// Shows the URLs redacted, so that a `{:?}` never logs a credential.
impl std::fmt::Debug for TrainOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Destructured, so that a new field cannot be forgotten here.
        let TrainOptions {
            data_url,
            runs_url,
            model,
            hyper,
            workers,
            optimizer,
            schedule,
            seed,
            stop,
            channel,
            limits,
            prices,
            sync,
            compression,
            scale_in,
            algorithm,
            pattern,
        } = self;
        f.debug_struct("TrainOptions")
            .field("data_url", &redact_url(data_url))
            .field("runs_url", &runs_url.as_deref().map(redact_url))
            .field("model", model)
            .field("hyper", hyper)
            .field("workers", workers)
            .field("optimizer", optimizer)
            .field("schedule", schedule)
            .field("seed", seed)
            .field("stop", stop)
            .field("channel", &channel.as_deref().map(redact_url))
            .field("limits", limits)
            .field("prices", prices)
            .field("sync", sync)
            .field("compression", compression)
            .field("scale_in", scale_in)
            .field("algorithm", algorithm)
            .field("pattern", pattern)
            .finish()
    }
}

/// What the driver shows while a job runs.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveProgress {
    /// The job.
    pub job_id: String,
    /// Last step whose loss is known.
    pub step: u64,
    /// Epochs done.
    pub epoch: f64,
    /// The step's loss (`NaN` before the first step).
    pub loss: f64,
    /// Active workers.
    pub workers: u32,
    /// The epoch limit.
    pub max_epochs: u32,
    /// Seconds since the job started.
    pub elapsed_s: f64,
    /// Billed cost of the invocations so far.
    pub cost_usd: f64,
}

/// Trains a model as `options` say, reporting progress to `observe`; returns the complete run
/// record, also written to the run's location.
pub async fn train(
    options: &TrainOptions,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress),
) -> Result<RunRecord> {
    let started = Instant::now();
    let started_at_unix_ms = unix_ms();
    if options.workers == 0 {
        return Err(RuntimeError::InvalidJob(
            "--workers must be at least 1".into(),
        ));
    }
    if options.stop.max_epochs == 0 {
        return Err(RuntimeError::InvalidJob(
            "--max-epochs must be at least 1".into(),
        ));
    }
    check_combination(options)?;
    if let Some(tuner) = &options.scale_in {
        if !options.sync.is_synchronous() {
            return Err(RuntimeError::InvalidJob(format!(
                "--scale-in auto needs --sync bsp or isp, not {}: under SSP and ASP the \
                 replicas differ and removing a worker would drop its replica's progress",
                options.sync.name()
            )));
        }
        tuner
            .validate()
            .map_err(|e| RuntimeError::InvalidJob(format!("scale-in: {e}")))?;
        if tuner.min_workers > options.workers {
            return Err(RuntimeError::InvalidJob(format!(
                "--min-workers {} is more than --workers {}",
                tuner.min_workers, options.workers
            )));
        }
    }
    let dataset = Dataset::open(&options.data_url).await?;
    let spec = job_spec(options, &dataset)?;
    let run_store = Store::open(&spec.run_url)?;
    run_store.check_writable().await?;
    let spec_json = serde_json::to_vec_pretty(&spec).map_err(|source| RuntimeError::Json {
        location: format!("{}/{SPEC_KEY}", run_store.url()),
        source,
    })?;
    run_store.put(SPEC_KEY, Bytes::from(spec_json)).await?;
    let channel = open_channel(spec.channel.as_deref(), &run_store, &spec.job_id).await?;

    // Every role is invoked once, and again each time it hands off at its lifetime limit.
    let mut roles = vec![SUPERVISOR_ROLE.to_string()];
    roles.extend((0..spec.workers).map(worker_role));
    let payload = |role: usize, generation: u32| match role {
        0 => Payload::Supervisor {
            run_url: spec.run_url.clone(),
            generation,
        },
        _ => Payload::Worker {
            run_url: spec.run_url.clone(),
            worker: role as u32 - 1,
            generation,
        },
    };
    let mut running = FuturesUnordered::new();
    let mut kill_switches: Vec<KillSwitch> = Vec::new();
    let mut starts: Vec<(String, Instant)> = Vec::new();
    for (role, name) in roles.iter().enumerate() {
        let invocation = invoke(&*invoker, name, &payload(role, 0), spec.limits).await;
        let invocation = match invocation {
            Ok(invocation) => invocation,
            Err(e) => {
                kill_switches.iter().for_each(KillSwitch::kill);
                return Err(e);
            }
        };
        kill_switches.push(invocation.kill_switch());
        starts.push((name.clone(), Instant::now()));
        running.push(tag(invocation.wait(), role, 0));
    }

    let mut reports: Vec<InvocationReport> = Vec::new();
    let mut failure: Option<String> = None;
    let mut progress = Progress::default();
    let mut ticker = tokio::time::interval(POLL);
    let mut show =
        |progress: &Progress, reports: &[InvocationReport], starts: &[(String, Instant)]| {
            let cost_usd: f64 = starts
                .iter()
                .map(|(name, start)| {
                    let duration_ms = reports
                        .iter()
                        .find(|r| &r.name == name)
                        .map_or(start.elapsed().as_millis() as u64, |r| r.duration_ms);
                    options.prices.invocation_usd(Usage {
                        duration_ms,
                        memory_mb: spec.limits.memory_mb,
                    })
                })
                .sum();
            observe(&LiveProgress {
                job_id: spec.job_id.clone(),
                step: progress.step,
                epoch: progress.epoch,
                loss: progress.loss,
                workers: progress.workers,
                max_epochs: spec.stop.max_epochs,
                elapsed_s: started.elapsed().as_secs_f64(),
                cost_usd,
            });
        };
    progress.loss = f64::NAN;
    progress.workers = spec.workers;
    while !running.is_empty() {
        tokio::select! {
            done = running.next() => {
                let Some((role, generation, done)) = done else { break };
                let report = done?;
                let next = generation + 1;
                if report.outcome.is_success()
                    && failure.is_none()
                    && checkpoint::exists(&run_store, &roles[role], next).await?
                {
                    // The function handed off at its lifetime limit: invoke its next generation.
                    let name = format!("{}#{next}", roles[role]);
                    info!(%name, "invoking again after a hand-off");
                    match invoke(&*invoker, &name, &payload(role, next), spec.limits).await {
                        Ok(invocation) => {
                            kill_switches.push(invocation.kill_switch());
                            starts.push((name, Instant::now()));
                            running.push(tag(invocation.wait(), role, next));
                        }
                        Err(e) => {
                            failure = Some(format!("could not invoke {name} again: {e}"));
                            kill_switches.iter().for_each(KillSwitch::kill);
                        }
                    }
                } else if let Some(message) = report.describe_failure()
                    && failure.is_none()
                {
                    // One function failed: the others cannot finish without it.
                    failure = Some(message);
                    let stop = StopRequest { reason: "a function failed".into() };
                    if let Ok(json) = serde_json::to_vec(&stop)
                        && let Err(e) = channel.put_key(STOP_KEY, Bytes::from(json)).await
                    {
                        warn!("could not publish the stop request: {e}");
                    }
                    kill_switches.iter().for_each(KillSwitch::kill);
                }
                reports.push(report);
            }
            _ = ticker.tick() => {
                if let Ok(Some(bytes)) = channel.get_key(PROGRESS_KEY).await
                    && let Ok(p) = serde_json::from_slice::<Progress>(&bytes)
                {
                    progress = p;
                }
                show(&progress, &reports, &starts);
            }
        }
    }
    if let Err(e) = channel.cleanup().await {
        warn!("could not clean up the channel: {e}");
    }
    if let Some(message) = failure {
        return Err(RuntimeError::FunctionFailed(message));
    }

    let bytes = run_store.get(RECORD_KEY).await?;
    let mut record: RunRecord =
        serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
            location: format!("{}/{RECORD_KEY}", run_store.url()),
            source,
        })?;
    // The supervisor wrote it redacted; records of other writers are redacted here too.
    record.spec = record.spec.redacted();
    record.started_at_unix_ms = started_at_unix_ms;
    record.wall_s = started.elapsed().as_secs_f64();
    reports.sort_by(|a, b| a.name.cmp(&b.name));
    let usages: Vec<Usage> = reports
        .iter()
        .map(|r| Usage {
            duration_ms: r.duration_ms,
            memory_mb: r.memory_mb,
        })
        .collect();
    // The channel's servers are billed for the wall time; its object-store requests are
    // estimated from the steps each fleet size ran (a lower bound: see ObjectRequests::estimate).
    let channel = ChannelKind::from_url(record.spec.channel.as_deref());
    let mut requests = ObjectRequests::default();
    for step in &record.steps {
        let r = ObjectRequests::estimate(channel, step.workers.len() as u32, 1);
        requests.writes += r.writes;
        requests.reads += r.reads;
    }
    record.bill = Some(options.prices.clone().for_channel(channel).bill(
        &usages,
        record.wall_s,
        requests,
    ));
    record.invocations = reports;
    if let Some(last) = record.steps.last() {
        let p = Progress {
            step: last.step,
            epoch: last.epoch,
            loss: last.loss,
            workers: spec.workers,
        };
        show(&p, &record.invocations, &starts);
    }
    let json = serde_json::to_vec_pretty(&record).map_err(|source| RuntimeError::Json {
        location: format!("{}/{RECORD_KEY}", run_store.url()),
        source,
    })?;
    run_store.put(RECORD_KEY, Bytes::from(json)).await?;
    Ok(record)
}

/// Starts one invocation of `name` with `payload`.
async fn invoke(
    invoker: &dyn Invoker,
    name: &str,
    payload: &Payload,
    limits: Limits,
) -> Result<mlless_faas::Invocation> {
    Ok(invoker
        .invoke(FunctionRequest {
            name: name.to_string(),
            payload: payload.to_json()?,
            limits,
        })
        .await?)
}

/// Tags an invocation's end with its role and generation.
async fn tag<F: std::future::Future>(
    wait: F,
    role: usize,
    generation: u32,
) -> (usize, u32, F::Output) {
    (role, generation, wait.await)
}

/// Refuses the combinations of algorithm, pattern, synchronisation and compression that make
/// no sense, naming why.
fn check_combination(options: &TrainOptions) -> Result<()> {
    let refuse = |why: String| Err(RuntimeError::InvalidJob(why));
    if options.model == ModelChoice::KMeans
        && (options.sync != SyncMode::Bsp
            || options.algorithm != Algorithm::Ga
            || options.compression != Compression::None
            || options.scale_in.is_some())
    {
        return refuse(
            "k-means trains by synchronous Lloyd steps: it takes --sync bsp, --algorithm ga, \
             no --compress and no --scale-in (any --pattern)"
                .into(),
        );
    }
    if options.pattern != Pattern::Broadcast && !options.sync.is_synchronous() {
        return refuse(format!(
            "--pattern {} needs --sync bsp or isp, not {}: a leader or a chunk owner can only \
             reduce a step that every worker has reached",
            options.pattern.name(),
            options.sync.name()
        ));
    }
    match options.algorithm {
        Algorithm::Ga => Ok(()),
        algorithm => {
            if options.sync != SyncMode::Bsp {
                return refuse(format!(
                    "--algorithm {} averages models at barriers: it needs --sync bsp, not {}",
                    algorithm.name(),
                    options.sync.name()
                ));
            }
            if options.compression != Compression::None {
                return refuse(format!(
                    "--compress works on the per-step updates of --algorithm ga, not on {}'s \
                     model averages",
                    algorithm.name()
                ));
            }
            if options.scale_in.is_some() {
                return refuse(format!(
                    "--scale-in auto works with --algorithm ga, not {}",
                    algorithm.name()
                ));
            }
            if let Algorithm::Admm { rho, local_epochs } = algorithm
                && !(rho.is_finite() && rho > 0.0 && local_epochs > 0)
            {
                return refuse(format!(
                    "admm needs rho > 0 and at least one local epoch, got rho {rho} and \
                     {local_epochs} local epochs"
                ));
            }
            Ok(())
        }
    }
}

/// The job spec of `options` on `dataset`.
fn job_spec(options: &TrainOptions, dataset: &Dataset) -> Result<JobSpec> {
    let manifest = dataset.manifest();
    let defaults = Defaults::for_model(options.model, options.optimizer);
    let l2 = options.hyper.l2.unwrap_or(defaults.l2);
    let model = match (options.model, &manifest.kind) {
        (ModelChoice::LogisticRegression, DatasetKind::Sparse { features }) => {
            ModelSpec::LogisticRegression {
                features: *features,
                l2,
            }
        }
        (ModelChoice::Svm, DatasetKind::Sparse { features }) => ModelSpec::Svm {
            features: *features,
            l2,
        },
        (ModelChoice::KMeans, DatasetKind::Sparse { features }) => ModelSpec::KMeans {
            features: *features,
            k: options.hyper.clusters.unwrap_or(DEFAULT_CLUSTERS),
        },
        (ModelChoice::Mlp, DatasetKind::Sparse { features }) => ModelSpec::Mlp {
            features: *features,
            hidden: options
                .hyper
                .hidden
                .clone()
                .unwrap_or_else(|| DEFAULT_HIDDEN.to_vec()),
            classes: options.hyper.classes.unwrap_or(2),
            l2,
        },
        (ModelChoice::MatrixFactorization, DatasetKind::Ratings { users, items, mean }) => {
            ModelSpec::MatrixFactorization {
                users: *users,
                items: *items,
                factors: options.hyper.factors.unwrap_or(defaults.factors).max(1),
                l2,
                mean: *mean,
                init_std: 0.1,
            }
        }
        (ModelChoice::MatrixFactorization, DatasetKind::Sparse { .. }) => {
            return Err(RuntimeError::InvalidJob(format!(
                "{} holds labelled feature rows: train it with --model lr, svm, kmeans or \
                 mlp, not pmf",
                dataset.url()
            )));
        }
        (choice, DatasetKind::Ratings { .. }) => {
            return Err(RuntimeError::InvalidJob(format!(
                "{} holds ratings: train it with --model pmf, not {}",
                dataset.url(),
                choice.name()
            )));
        }
    };
    model
        .validate()
        .map_err(|e| RuntimeError::InvalidJob(e.to_string()))?;
    let train_batches = u32::try_from(manifest.train.batches.len())
        .map_err(|_| RuntimeError::InvalidJob("too many minibatches".into()))?;
    let job_id = format!("job-{}-{:04x}", unix_ms() / 1000, rand::random::<u16>());
    let runs = options
        .runs_url
        .clone()
        .unwrap_or_else(|| format!("{}/runs", options.data_url.trim_end_matches('/')));
    Ok(JobSpec {
        run_url: format!("{}/{job_id}", runs.trim_end_matches('/')),
        job_id,
        data_url: options.data_url.clone(),
        model,
        workers: options.workers,
        optimizer: OptimizerConfig::new(defaults.optimizer),
        lr: options.hyper.lr.unwrap_or(defaults.lr),
        schedule: options.schedule,
        seed: options.seed,
        stop: StopCriteria {
            tolerance: options
                .stop
                .tolerance
                .or((options.model == ModelChoice::KMeans).then_some(DEFAULT_TOLERANCE)),
            ..options.stop
        },
        channel: options.channel.clone(),
        limits: options.limits,
        train_batches,
        sync: options.sync,
        compression: options.compression,
        scale_in: options.scale_in.clone(),
        algorithm: options.algorithm,
        pattern: options.pattern,
    })
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
