//! The driver: the user's process. It checks the data set, writes the job spec, invokes the
//! supervisor and the workers, shows progress, and completes the run record with what the
//! invocations cost. It holds no training state that a function needs.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use mlless_core::{ModelSpec, OptimizerConfig, OptimizerKind};
use mlless_cost::{ObjectRequests, PriceTable, Usage};
use mlless_data::DatasetKind;
use mlless_faas::{FunctionRequest, InvocationReport, Invoker, KillSwitch, Limits, Outcome};
use mlless_store::{Store, open_channel_with};
use tracing::{info, warn};

use crate::checkpoint;
use crate::dataset::Dataset;
use crate::error::{Result, RuntimeError};
use crate::function::Payload;
use crate::function::Start;
use crate::messages::{PROGRESS_KEY, Progress, REPLACE_KEY, ReplaceRequest, STOP_KEY, StopRequest};
use mlless_job::ModelChoice;
use mlless_job::SUPERVISOR_ROLE;
use mlless_job::config::{ConfigError, SecretUrl, TrainingConfig};
use mlless_job::record::{RECORD_KEY, RunRecord};
use mlless_job::worker_role;
use mlless_job::{EvalEvery, JobSpec, SPEC_KEY, StopCriteria, ValidationConfig};

/// How often the driver polls the supervisor's progress.
const POLL: Duration = Duration::from_millis(100);

/// Hyperparameters that have defaults per model (see [`Defaults`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Hyperparameters {
    /// Learning rate.
    pub lr: Option<f32>,
    /// L2 regularisation.
    pub l2: Option<f32>,
    /// Latent factors (PMF).
    pub factors: Option<u32>,
    /// Coefficient of the count-aware prior (PMF).
    pub prior: Option<f32>,
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
/// is lr / sqrt(epoch + 1)).
///
/// Sparse LR's default learning rate with momentum, Nesterov or SGD is per sample: `lr` is the
/// rate for a global batch (workers × minibatch) of [`LR_REFERENCE_BATCH`] samples, and
/// [`Defaults::lr_for`] scales it in proportion to the global batch of the run (with MA and
/// ADMM too, whose local steps are averaged over the workers). A step of P workers then moves the model as far as P steps of
/// one worker, so an epoch makes the same progress whatever P and the batch size: with a fixed
/// rate, 4 workers took 4 times fewer, equally long steps per epoch and ended 7% (at 8 workers
/// 12%) further from the optimum after 40 epochs on web-like data (3% positive, 300 binary
/// features). On imbalanced data the rate also grows by [`imbalance_factor`] (the log loss is
/// flatter there), and the bias starts at the training set's log-odds ([`initial_bias`],
/// estimated by [`estimate_positive_rate`]) so that the larger step does not first overshoot
/// from a model predicting 0.5. Momentum stays stable up to the cap of 16 times the rate.
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
    /// Coefficient of matrix factorisation's count-aware prior (0 for the other models).
    pub prior: f32,
}

/// Matrix factorisation's default per-example L2. With [`PMF_PRIOR`], chosen on MovieLens
/// ml-latest-small and on synthetic low-rank ratings together: per-example L2 alone either
/// lets the many users and items with few ratings overfit (real ratings: the validation RMSE
/// rises 2.3% from its best by epoch 40 at 0.1) or shrinks a dense data set's true factors
/// (synthetic: 13% above the noise floor at 0.2).
pub const PMF_L2: f32 = 0.05;

/// Matrix factorisation's default count-aware prior: each user and item gets `PMF_PRIOR / n`
/// more L2 per rating when it has `n` training ratings, so that one with 3 ratings is held
/// near its bias while one with 500 is fit almost freely; see [`PMF_L2`].
pub const PMF_PRIOR: f32 = 10.0;

/// The global batch (samples per step over all workers) at which sparse LR's default learning
/// rate is [`Defaults::lr`]; see [`Defaults::lr_for`].
pub const LR_REFERENCE_BATCH: u64 = 1000;

/// The largest factor by which [`Defaults::lr_for`] scales the rate up: beyond it momentum's
/// step risks the stability limit (tested on the web-like, a9a-like and balanced sets with 4
/// to 16 workers).
pub const LR_MAX_SCALE: f64 = 16.0;

/// The largest factor of [`imbalance_factor`].
pub const IMBALANCE_MAX: f64 = 8.0;

/// How much smaller the log loss's curvature is on data with positive rate `r` than on data
/// with 25% positives, `0.1875 / (r (1 − r))`, between 1 and [`IMBALANCE_MAX`]: 1 from 25% to 75%
/// positive, 1.03 at 24% (a9a), 6.4 at 3%, 8 from about 2.4% down.
///
/// The curvature of the mean log loss along the bias is `mean p (1 − p)`, about `r (1 − r)`
/// once the model predicts the base rate, and along a weight the same times its feature's
/// frequency: on 3% positives it is 6 times smaller than on balanced data, and a rate that is
/// safe on balanced data crawls there.
pub fn imbalance_factor(positive_rate: f64) -> f64 {
    let r = positive_rate.clamp(1e-6, 1.0 - 1e-6);
    (0.1875 / (r * (1.0 - r))).clamp(1.0, IMBALANCE_MAX)
}

/// The log-odds `ln(r / (1 − r))` of positive rate `r` (clamped to [0.001, 0.999]): sparse LR's
/// initial bias, so that training starts at the base rate rather than at 0.5.
pub fn initial_bias(positive_rate: f64) -> f32 {
    let r = positive_rate.clamp(0.001, 0.999);
    (r / (1.0 - r)).ln() as f32
}

impl Defaults {
    /// The default learning rate for a step over `global_batch` samples (workers × minibatch)
    /// on data with `positive_rate` positives. For sparse LR with momentum, Nesterov or SGD:
    /// `lr` × `global_batch / LR_REFERENCE_BATCH` × [`imbalance_factor`]`(positive_rate)`, at
    /// most [`LR_MAX_SCALE`] × `lr`; other models and Adam (whose steps do not grow with the
    /// gradient): `lr` as it is.
    pub fn lr_for(&self, model: ModelChoice, global_batch: u64, positive_rate: f64) -> f32 {
        match (model, self.optimizer) {
            (
                ModelChoice::LogisticRegression,
                OptimizerKind::Momentum | OptimizerKind::Nesterov | OptimizerKind::Sgd,
            ) => {
                let scale = (global_batch.max(1) as f64 / LR_REFERENCE_BATCH as f64)
                    * imbalance_factor(positive_rate);
                (f64::from(self.lr) * scale.min(LR_MAX_SCALE)) as f32
            }
            _ => self.lr,
        }
    }

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
                    prior: 0.0,
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
                    l2: PMF_L2,
                    factors: 10,
                    prior: PMF_PRIOR,
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
                    prior: 0.0,
                }
            }
            // Lloyd steps take no learning rate or optimiser.
            ModelChoice::KMeans => Self {
                optimizer: optimizer.unwrap_or(Sgd),
                lr: 0.0,
                l2: 0.0,
                factors: 0,
                prior: 0.0,
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
                    prior: 0.0,
                }
            }
        }
    }
}

/// What `mlless train` asks for: the [`TrainingConfig`] every function gets as it is, and what
/// the driver derives the rest of the [`JobSpec`] from. `Debug` shows the URLs redacted.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// Location of the prepared data set.
    pub data_url: SecretUrl,
    /// Location below which the run writes its spec, model and record (default: `{data}/runs`).
    pub runs_url: Option<SecretUrl>,
    /// The model.
    pub model: ModelChoice,
    /// Hyperparameters; `None` takes the default.
    pub hyper: Hyperparameters,
    /// The optimiser (`None`: the model's default).
    pub optimizer: Option<OptimizerKind>,
    /// Prices to bill the run at.
    pub prices: PriceTable,
    /// What the user asked of the validation set.
    pub validation: ValidationOptions,
    /// The options the job spec carries as they are.
    pub training: TrainingConfig,
}

impl TrainOptions {
    /// Checks the options on their own and against each other ([`TrainingConfig::validate`]);
    /// what depends on the data set is checked once it is open.
    pub fn validate(&self) -> std::result::Result<(), ConfigError> {
        self.training.validate(self.model)
    }
}

/// What the user asked of the validation set: how often to evaluate, and when to stop on it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ValidationOptions {
    /// How often the model is evaluated.
    pub every: EvalEvery,
    /// Early stopping's patience in evaluations: `None` is the default
    /// ([`DEFAULT_PATIENCE`] when the data set has a validation set), `Some(0)` turns it off.
    pub early_stop: Option<u32>,
    /// Stop once all of these are reached.
    pub targets: Vec<mlless_core::MetricTarget>,
}

/// Early stopping's patience when a data set has a validation set and `--early-stop` is not
/// given: evaluations without improvement before training stops.
pub const DEFAULT_PATIENCE: u32 = 5;

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
    /// The validation metric, latest and best (`None` before the first evaluation or
    /// without a validation set).
    pub validation: Option<crate::messages::ValidationProgress>,
}

/// Trains a model as `options` say, reporting progress to `observe`; returns the complete run
/// record, also written to the run's location.
pub async fn train(
    options: &TrainOptions,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress),
) -> Result<RunRecord> {
    options.validate()?;
    let dataset = Dataset::open(options.data_url.as_str()).await?;
    let positive_rate = match (options.model, &dataset.manifest().kind) {
        (ModelChoice::LogisticRegression, DatasetKind::Sparse { .. }) => {
            Some(estimate_positive_rate(&dataset).await?)
        }
        _ => None,
    };
    let spec = job_spec(options, &dataset, positive_rate, invoker.platform())?;
    let run_store = Store::open(&spec.run_url)?;
    run_store.check_writable().await?;
    let spec_json = serde_json::to_vec_pretty(&spec).map_err(|source| RuntimeError::Json {
        location: format!("{}/{SPEC_KEY}", run_store.url()),
        source,
    })?;
    run_store.put(SPEC_KEY, Bytes::from(spec_json)).await?;
    let starts = vec![Start::default(); spec.training.workers as usize + 1];
    run_job(&spec, &run_store, &options.prices, starts, invoker, observe).await
}

/// Continues the run at `run_url` (`mlless train --resume`) from the last checkpoint its
/// supervisor and workers all have (`--checkpoint-every`), after a failure that stopped it;
/// returns the complete run record.
pub async fn resume(
    run_url: &str,
    prices: &PriceTable,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress),
) -> Result<RunRecord> {
    let run_store = Store::open(run_url)?;
    let bytes = run_store.get(SPEC_KEY).await?;
    let spec: JobSpec = serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
        location: run_store.location(SPEC_KEY),
        source,
    })?;
    if run_store.exists(RECORD_KEY).await? {
        return Err(RuntimeError::InvalidJob(format!(
            "the run at {run_url} has finished (it has {RECORD_KEY}): nothing to resume"
        )));
    }
    // The last step every role has a checkpoint of.
    let mut common: Option<Vec<u64>> = None;
    for role in roles(&spec) {
        let steps = checkpoint::steps(&run_store, &role).await?;
        common = Some(match common {
            None => steps,
            Some(c) => c.into_iter().filter(|s| steps.contains(s)).collect(),
        });
    }
    let step = common.and_then(|c| c.last().copied()).ok_or_else(|| {
        RuntimeError::InvalidJob(format!(
            "the run at {run_url} has no checkpoint that its supervisor and all its workers \
                 share: it was trained without --checkpoint-every, or failed before the first"
        ))
    })?;
    info!(step, "resuming from the checkpoints of step {step}");
    let start = Start {
        generation: 0,
        recovery: 1,
        resume_step: Some(step),
    };
    let starts = vec![start; spec.training.workers as usize + 1];
    run_job(&spec, &run_store, prices, starts, invoker, observe).await
}

/// The roles of a job: the supervisor, then the workers.
fn roles(spec: &JobSpec) -> Vec<String> {
    let mut roles = vec![SUPERVISOR_ROLE.to_string()];
    roles.extend((0..spec.training.workers).map(worker_role));
    roles
}

/// Invokes the supervisor and the workers of `spec` from `starts` (one per role, supervisor
/// first), keeps them going (hand-offs, replacements), shows progress, and completes the run
/// record with the invocations and the bill.
async fn run_job(
    spec: &JobSpec,
    run_store: &Store,
    prices: &PriceTable,
    starts: Vec<Start>,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress),
) -> Result<RunRecord> {
    let started = Instant::now();
    let started_at_unix_ms = unix_ms();
    let channel = open_channel_with(
        spec.training.channel.as_deref(),
        run_store,
        &spec.job_id,
        spec.training.channel_options(),
    )
    .await?;
    let mut fleet = Invocations::new(&*invoker, spec, run_store);
    for (role, start) in starts.into_iter().enumerate() {
        if let Err(e) = fleet.invoke(role, start).await {
            fleet.kill_all();
            return Err(e);
        }
    }

    let mut failure: Option<String> = None;
    let mut progress = Progress::default();
    let mut ticker = tokio::time::interval(POLL);
    let mut replaced_through = 0u32;
    let mut show = |progress: &Progress, fleet: &Invocations| {
        observe(&LiveProgress {
            job_id: spec.job_id.clone(),
            step: progress.step,
            epoch: progress.epoch,
            loss: progress.loss,
            workers: progress.workers,
            max_epochs: spec.training.stop.max_epochs,
            elapsed_s: started.elapsed().as_secs_f64(),
            cost_usd: fleet.cost_so_far(prices, spec.training.limits.memory_mb),
            validation: progress.validation.clone(),
        });
    };
    progress.loss = f64::NAN;
    progress.workers = spec.training.workers;
    while fleet.is_running() {
        tokio::select! {
            done = fleet.next() => {
                let Some((role, id, done)) = done else { break };
                let report = done?;
                if failure.is_none()
                    && let Err(message) = fleet.ended(role, id, &report).await
                {
                    // A function failed for good: the others cannot finish without it.
                    failure = Some(message);
                    let stop = StopRequest { reason: "a function failed".into() };
                    if let Ok(json) = serde_json::to_vec(&stop)
                        && let Err(e) = channel.put_key(STOP_KEY, Bytes::from(json)).await
                    {
                        warn!("could not publish the stop request: {e}");
                    }
                    fleet.kill_all();
                }
                fleet.reports.push(report);
            }
            _ = ticker.tick() => {
                if let Ok(Some(bytes)) = channel.get_key(PROGRESS_KEY).await
                    && let Ok(p) = serde_json::from_slice::<Progress>(&bytes)
                {
                    progress = p;
                }
                if failure.is_none()
                    && let Ok(Some(bytes)) = channel.get_key(REPLACE_KEY).await
                    && let Ok(request) = serde_json::from_slice::<ReplaceRequest>(&bytes)
                    && request.seq > replaced_through
                {
                    replaced_through = request.seq;
                    for worker in request.workers {
                        warn!(worker, step = request.step, "replacing a silent worker");
                        if let Err(e) = fleet.replace(worker as usize + 1).await {
                            failure = Some(format!("could not replace worker {worker}: {e}"));
                            fleet.kill_all();
                        }
                    }
                }
                show(&progress, &fleet);
            }
        }
    }
    if let Err(e) = channel.cleanup().await {
        warn!("could not clean up the channel: {e}");
    }
    if let Some(mut message) = failure {
        if spec.training.checkpoint_every > 0 {
            message.push_str(&format!(
                " (continue the run from its last checkpoint with `mlless train --resume {}`)",
                spec.run_url.as_str()
            ));
        }
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
    let mut reports = std::mem::take(&mut fleet.reports);
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
    let channel = mlless_job::record::channel_kind(record.spec.training.channel.as_deref());
    let mut requests = ObjectRequests::default();
    for step in &record.steps {
        let r = ObjectRequests::estimate(channel, step.workers.len() as u32, 1);
        requests.writes += r.writes;
        requests.reads += r.reads;
    }
    record.bill = Some(
        prices
            .clone()
            .for_channel(channel)
            .bill(&usages, record.wall_s, requests),
    );
    record.invocations = reports;
    record.price_validation(prices);
    if let Some(last) = record.steps.last() {
        let p = Progress {
            step: last.step,
            epoch: last.epoch,
            loss: last.loss,
            workers: spec.training.workers,
            validation: progress.validation.clone(),
        };
        show(&p, &fleet);
    }
    let json = serde_json::to_vec_pretty(&record).map_err(|source| RuntimeError::Json {
        location: format!("{}/{RECORD_KEY}", run_store.url()),
        source,
    })?;
    run_store.put(RECORD_KEY, Bytes::from(json)).await?;
    Ok(record)
}

/// How many times one role is replaced after failures before the run fails.
const MAX_RECOVERIES: u32 = 3;

/// The invocations of a job's roles (supervisor first, then the workers): each role is invoked
/// once, again after each hand-off at its lifetime limit, and replaced after a failure it can
/// recover from.
struct Invocations<'a> {
    invoker: &'a dyn Invoker,
    spec: &'a JobSpec,
    run_store: &'a Store,
    names: Vec<String>,
    /// Per role, its current invocation.
    current: Vec<Option<Current>>,
    running: FuturesUnordered<BoxFuture<'static, Ended>>,
    /// Every invocation's name and start, for the cost so far.
    started: Vec<(String, Instant)>,
    /// The reports of the invocations that ended.
    reports: Vec<InvocationReport>,
    next_id: u64,
}

/// A role's current invocation.
struct Current {
    id: u64,
    start: Start,
    kill: KillSwitch,
}

/// An invocation's end: its role, its id, its report.
type Ended = (
    usize,
    u64,
    std::result::Result<InvocationReport, mlless_faas::InvokeError>,
);

impl<'a> Invocations<'a> {
    fn new(invoker: &'a dyn Invoker, spec: &'a JobSpec, run_store: &'a Store) -> Self {
        let names = roles(spec);
        Self {
            invoker,
            spec,
            run_store,
            current: names.iter().map(|_| None).collect(),
            names,
            running: FuturesUnordered::new(),
            started: Vec::new(),
            reports: Vec::new(),
            next_id: 0,
        }
    }

    /// Starts `role` from `start`.
    async fn invoke(&mut self, role: usize, start: Start) -> Result<()> {
        let run_url = self.spec.run_url.as_str().to_owned();
        let payload = match role {
            0 => Payload::Supervisor { run_url, start },
            _ => Payload::Worker {
                run_url,
                worker: role as u32 - 1,
                start,
            },
        };
        let mut name = self.names[role].clone();
        if start.generation > 0 {
            name.push_str(&format!("#{}", start.generation));
        }
        if start.recovery > 0 {
            name.push_str(&format!("~{}", start.recovery));
        }
        let invocation = invoke(self.invoker, &name, &payload, self.spec.training.limits).await?;
        let id = self.next_id;
        self.next_id += 1;
        self.current[role] = Some(Current {
            id,
            start,
            kill: invocation.kill_switch(),
        });
        self.started.push((name, Instant::now()));
        self.running
            .push(Box::pin(async move { (role, id, invocation.wait().await) }));
        Ok(())
    }

    fn is_running(&self) -> bool {
        !self.running.is_empty()
    }

    async fn next(&mut self) -> Option<Ended> {
        self.running.next().await
    }

    fn kill_all(&self) {
        for current in self.current.iter().flatten() {
            current.kill.kill();
        }
    }

    /// Handles the end of invocation `id` of `role`: invokes the next generation after a
    /// hand-off, or a replacement after a failure it can recover from. `Err` with the failure
    /// when the run cannot go on.
    async fn ended(
        &mut self,
        role: usize,
        id: u64,
        report: &InvocationReport,
    ) -> std::result::Result<(), String> {
        let Some(current) = self.current[role].as_ref().filter(|c| c.id == id) else {
            return Ok(()); // an invocation that was replaced
        };
        let start = current.start;
        let name = self.names[role].clone();
        if report.outcome.is_success() {
            self.current[role] = None;
            let next = start.generation + 1;
            let step = checkpoint::handoff_step(self.run_store, &name, next)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(step) = step {
                // It handed off at its lifetime limit: invoke its next generation.
                info!(role = %name, generation = next, step, "invoking again after a hand-off");
                let _ = self
                    .run_store
                    .delete(&checkpoint::handoff_key(&name, next))
                    .await;
                let start = Start {
                    generation: next,
                    recovery: start.recovery,
                    resume_step: Some(step),
                };
                self.invoke(role, start)
                    .await
                    .map_err(|e| format!("could not invoke {name} again: {e}"))?;
            }
            return Ok(());
        }
        let failure = report
            .describe_failure()
            .unwrap_or_else(|| format!("{} failed", report.name));
        if !self.recoverable(role, &report.outcome) {
            return Err(failure);
        }
        warn!("{failure}: replacing it");
        self.replace(role)
            .await
            .map_err(|e| format!("{failure}, and its replacement could not be invoked: {e}"))
    }

    /// Whether a failure of `role` that ended in `outcome` is survived by a replacement: a
    /// crash or a lost function (not an error the function reported, which would come again),
    /// with checkpoints to resume from, under a synchronous mode (for a worker), and not too
    /// often.
    fn recoverable(&self, role: usize, outcome: &Outcome) -> bool {
        let crashed = matches!(
            outcome,
            Outcome::Failed {
                exit_code: None,
                ..
            } | Outcome::TimedOut { .. }
        );
        let recoveries = self.current[role].as_ref().map_or(0, |c| c.start.recovery);
        crashed
            && self.spec.training.checkpoint_every > 0
            && (role == 0 || self.spec.training.sync.is_synchronous())
            && recoveries < MAX_RECOVERIES
    }

    /// Kills `role`'s current invocation, if any, and invokes a replacement that resumes from
    /// the role's latest checkpoint (from the start if it has none yet).
    async fn replace(&mut self, role: usize) -> Result<()> {
        let previous = match self.current[role].take() {
            Some(current) => {
                current.kill.kill();
                current.start
            }
            None => Start::default(),
        };
        let name = &self.names[role];
        // A hand-off marker the killed invocation may have left is stale.
        self.run_store
            .delete(&checkpoint::handoff_key(name, previous.generation + 1))
            .await?;
        let resume_step = checkpoint::steps(self.run_store, name)
            .await?
            .last()
            .copied();
        let start = Start {
            generation: previous.generation,
            recovery: previous.recovery + 1,
            resume_step,
        };
        self.invoke(role, start).await
    }

    /// The billed cost of the invocations so far (running ones up to now).
    fn cost_so_far(&self, prices: &PriceTable, memory_mb: u32) -> f64 {
        self.started
            .iter()
            .map(|(name, start)| {
                let duration_ms = self
                    .reports
                    .iter()
                    .find(|r| &r.name == name)
                    .map_or(start.elapsed().as_millis() as u64, |r| r.duration_ms);
                prices.invocation_usd(Usage {
                    duration_ms,
                    memory_mb,
                })
            })
            .sum()
    }
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

/// Minibatches of the training split that [`estimate_positive_rate`] reads at most.
const RATE_SAMPLE_BATCHES: usize = 8;

/// The fraction of positive labels in up to [`RATE_SAMPLE_BATCHES`] training minibatches spread
/// evenly over the split (the same ones every time); 0.5 for a split without rows.
pub async fn estimate_positive_rate(dataset: &Dataset) -> Result<f64> {
    let batches = dataset.batches(crate::dataset::Split::Train);
    let take = batches.min(RATE_SAMPLE_BATCHES);
    let (mut positives, mut rows) = (0.0_f64, 0_u64);
    for k in 0..take {
        let batch = dataset
            .read_batch(crate::dataset::Split::Train, k * batches / take)
            .await?;
        if let mlless_core::Batch::Sparse(sparse) = batch {
            positives += sparse.labels.iter().map(|&l| f64::from(l)).sum::<f64>();
            rows += sparse.rows() as u64;
        }
    }
    Ok(if rows == 0 {
        0.5
    } else {
        positives / rows as f64
    })
}

/// The count-aware prior of a PMF run: the one asked for, or the default. It needs the data
/// set's rating counts: without them (a data set prepared by an older mlless) a prior asked
/// for is an error, and the default is left out with a warning.
fn pmf_prior(asked: Option<f32>, default: f32, dataset: &Dataset) -> Result<f32> {
    if dataset.manifest().rating_counts.is_some() {
        return Ok(asked.unwrap_or(default));
    }
    match asked {
        Some(prior) if prior > 0.0 => Err(RuntimeError::InvalidJob(format!(
            "--prior {prior} needs the rating counts of the data set, and {} has none (it was \
             prepared by an older mlless): prepare it again",
            dataset.url()
        ))),
        Some(_) => Ok(0.0),
        None => {
            if default > 0.0 {
                warn!(
                    data = dataset.url(),
                    "the data set has no rating counts (it was prepared by an older mlless): \
                     training without the count-aware prior; prepare it again to have it"
                );
            }
            Ok(0.0)
        }
    }
}

/// The job spec of `options` on `dataset`, run on `platform` (the invoker's); for LR,
/// `positive_rate` is the training set's (estimated) fraction of positive labels.
fn job_spec(
    options: &TrainOptions,
    dataset: &Dataset,
    positive_rate: Option<f64>,
    platform: &str,
) -> Result<JobSpec> {
    let manifest = dataset.manifest();
    let defaults = Defaults::for_model(options.model, options.optimizer);
    let rate = positive_rate.unwrap_or(0.5);
    let init_bias = initial_bias(rate);
    let l2 = options.hyper.l2.unwrap_or(defaults.l2);
    let model = match (options.model, &manifest.kind) {
        (ModelChoice::LogisticRegression, DatasetKind::Sparse { features }) => {
            ModelSpec::LogisticRegression {
                features: *features,
                l2,
                init_bias,
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
                prior: pmf_prior(options.hyper.prior, defaults.prior, dataset)?,
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
    let validation = validation_config(&options.validation, &model, manifest, dataset.url())?;
    let job_id = format!("job-{}-{:04x}", unix_ms() / 1000, rand::random::<u16>());
    let runs = options.runs_url.as_ref().map_or_else(
        || format!("{}/runs", options.data_url.as_str().trim_end_matches('/')),
        |runs| runs.as_str().to_owned(),
    );
    let training = &options.training;
    Ok(JobSpec {
        run_url: format!("{}/{job_id}", runs.trim_end_matches('/')).into(),
        job_id,
        data_url: options.data_url.clone(),
        model,
        optimizer: OptimizerConfig::new(defaults.optimizer),
        // Every algorithm: MA's and ADMM's local steps are averaged over the P replicas, so
        // that their per-sample progress is GA's at P times the minibatch too.
        lr: options.hyper.lr.unwrap_or_else(|| {
            defaults.lr_for(
                options.model,
                u64::from(training.workers) * u64::from(manifest.batch_size),
                rate,
            )
        }),
        train_batches,
        platform: platform.to_owned(),
        validation,
        training: TrainingConfig {
            stop: StopCriteria {
                tolerance: training
                    .stop
                    .tolerance
                    .or((options.model == ModelChoice::KMeans).then_some(DEFAULT_TOLERANCE)),
                ..training.stop
            },
            ..training.clone()
        },
    })
}

/// The job's validation settings: `None` when the data set has no validation set (and then
/// nothing may ask for one), early stopping on by default when it has.
fn validation_config(
    options: &ValidationOptions,
    model: &ModelSpec,
    manifest: &mlless_data::Manifest,
    data_url: &str,
) -> Result<Option<ValidationConfig>> {
    let metrics = mlless_core::validation::metrics_of(model);
    for target in &options.targets {
        if !metrics.contains(&target.metric.as_str()) {
            return Err(RuntimeError::InvalidJob(format!(
                "--target-metric {target}: this model reports {} on the validation set",
                metrics.join(", ")
            )));
        }
    }
    if manifest.validation.batches.is_empty() {
        let asked = if options.early_stop.is_some_and(|p| p > 0) {
            Some("--early-stop")
        } else if !options.targets.is_empty() {
            Some("--target-metric")
        } else {
            None
        };
        if let Some(flag) = asked {
            return Err(RuntimeError::InvalidJob(format!(
                "{flag} needs a validation set, and {data_url} has none: prepare it with \
                 --validation-fraction F or --validation-input FILE"
            )));
        }
        return Ok(None);
    }
    Ok(Some(ValidationConfig {
        every: options.every,
        early_stop: match options.early_stop {
            None => Some(DEFAULT_PATIENCE),
            Some(0) => None,
            Some(p) => Some(p),
        },
        targets: options.targets.clone(),
    }))
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_lr_default_rate_is_per_sample_and_grows_with_imbalance() {
        let momentum = Defaults::for_model(ModelChoice::LogisticRegression, None);
        assert_eq!(momentum.optimizer, OptimizerKind::Momentum);
        let lr = |batch, rate| momentum.lr_for(ModelChoice::LogisticRegression, batch, rate);
        assert_eq!(lr(1000, 0.5), 0.5);
        assert_eq!(lr(4000, 0.5), 2.0);
        assert_eq!(lr(250, 0.5), 0.125);
        // From 25% to 75% positive as balanced, 24% almost (1.03); 3% takes 6.4 times the
        // step; capped at 16 times.
        assert_eq!(lr(1000, 0.25), 0.5);
        assert_eq!(lr(1000, 0.75), 0.5);
        assert!((lr(1000, 0.24) - 0.514).abs() < 1e-3);
        assert!((f64::from(lr(1000, 0.03)) - 0.5 * 0.1875 / (0.03 * 0.97)).abs() < 1e-5);
        assert_eq!(lr(1000, 0.001), 4.0);
        assert_eq!(lr(1000, 0.999), 4.0);
        assert_eq!(lr(64_000, 0.5), 8.0);
        assert_eq!(lr(4000, 0.03), 8.0);
        let sgd = Defaults::for_model(ModelChoice::LogisticRegression, Some(OptimizerKind::Sgd));
        assert_eq!(sgd.lr_for(ModelChoice::LogisticRegression, 2000, 0.5), 6.0);
        // Adam and the other models keep their rate.
        let adam = Defaults::for_model(ModelChoice::LogisticRegression, Some(OptimizerKind::Adam));
        assert_eq!(
            adam.lr_for(ModelChoice::LogisticRegression, 8000, 0.03),
            0.003
        );
        let pmf = Defaults::for_model(ModelChoice::MatrixFactorization, None);
        assert_eq!(
            pmf.lr_for(ModelChoice::MatrixFactorization, 8000, 0.5),
            0.03
        );
        let svm = Defaults::for_model(ModelChoice::Svm, None);
        assert_eq!(svm.lr_for(ModelChoice::Svm, 8000, 0.03), 0.2);
    }

    #[test]
    fn initial_bias_is_the_log_odds() {
        assert_eq!(initial_bias(0.5), 0.0);
        assert!((initial_bias(0.03) - (0.03_f64 / 0.97).ln() as f32).abs() < 1e-6);
        assert!(initial_bias(0.0).is_finite() && initial_bias(0.0) < -6.0);
        assert!(initial_bias(1.0).is_finite() && initial_bias(1.0) > 6.0);
    }
}
