//! The driver: the user's process. It checks the data set, writes the job spec, invokes the
//! supervisor and the workers, shows progress, and completes the run record with what the
//! invocations cost. It holds no training state that a function needs.

mod invocations;
mod job_spec;
mod models;
mod resume;
pub use mlless_function::{CANCEL_GRACE, Control};
use resume::*;
pub use resume::{ResumeOptions, resumable_step, resume};

pub use models::{
    BYTES_PER_PARAMETER, CURVATURE_ITERATIONS, DEFAULT_CLUSTERS, DEFAULT_HIDDEN,
    DEFAULT_STEP_BOUND, DEFAULT_TOLERANCE, DataSample, Defaults, Hyperparameters, IMBALANCE_MAX,
    LR_MAX_SCALE, LR_REFERENCE_BATCH, PMF_ADAM_LR, PMF_L2, PMF_PRIOR, STABLE_STEP,
    check_model_memory, estimate_sample, imbalance_factor, initial_bias,
};

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use mlless_core::OptimizerKind;
use mlless_cost::{PriceTable, RequestBasis};
use mlless_data::DatasetKind;
use mlless_faas::Invoker;
use mlless_store::requests::Request;
use mlless_store::{RequestCounter, RequestCounts, Store, StoreError, open_channel_with};
use tracing::{info, warn};

use mlless_faas::clock::unix_ms;

use crate::checkpoint;
use crate::dataset::{Dataset, Split};
use crate::error::{Result, RuntimeError};
use crate::lease::Lease;
use crate::messages::{PROGRESS_KEY, Progress, REPLACE_KEY, ReplaceRequest, STOP_KEY, StopRequest};
use crate::task::Start;
use mlless_job::ModelChoice;
use mlless_job::config::{ConfigError, SecretUrl, TrainingConfig};
use mlless_job::record::{EARLY_STOPPED_MODEL_KEY, MODEL_KEY, RECORD_KEY, RunRecord};
use mlless_job::{EvalEvery, JobSpec, SPEC_KEY};

use invocations::Invocations;
use job_spec::job_spec;

/// How often the driver polls the supervisor's progress.
const POLL: Duration = Duration::from_millis(100);

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
    /// Test aid (`mlless train --job-id`, hidden): the job id to use instead of a new one
    /// ([`crate::job_id::new`]). A run of that id that exists already is refused
    /// ([`RuntimeError::JobExists`]).
    pub job_id: Option<String>,
}

impl TrainOptions {
    /// Checks the options on their own and against each other ([`TrainingConfig::validate`]);
    /// what depends on the data set is checked once it is open.
    pub fn validate(&self) -> std::result::Result<(), ConfigError> {
        if let Some(lr) = self.hyper.lr
            && !(lr > 0.0 && lr.is_finite())
        {
            return Err(ConfigError::LearningRate(lr));
        }
        if let Some(l2) = self.hyper.l2
            && !(l2 >= 0.0 && l2.is_finite())
        {
            return Err(ConfigError::L2(l2));
        }
        self.training.validate(self.model)
    }

    /// [`validate`](Self::validate), and the fleet against what `invoker` runs at once
    /// ([`Invoker::max_concurrent`]).
    pub fn validate_for(&self, invoker: &dyn Invoker) -> std::result::Result<(), ConfigError> {
        self.validate()?;
        self.training
            .validate_concurrency(invoker.platform(), invoker.max_concurrent())
    }

    /// The location of the run of job `job_id` with these options: `{runs}/{job}`, the runs
    /// being `--runs` or `{data}/runs`.
    pub fn run_url(&self, job_id: &str) -> String {
        let runs = self.runs_url.as_ref().map_or_else(
            || format!("{}/runs", self.data_url.as_str().trim_end_matches('/')),
            |runs| runs.as_str().to_owned(),
        );
        format!("{}/{job_id}", runs.trim_end_matches('/'))
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
/// given: evaluations without improvement before training stops. A validation curve of a few
/// thousand samples is noisy near its best: on web-like sparse LR (3% positive, 4,000
/// validation rows) at 5 the best of 1, 2, 4 and 8 workers came at epochs 7 to 10 and their
/// test log losses spread 1.0%; at 8 they spread 0.4%, for 2 to 9 epochs more.
pub const DEFAULT_PATIENCE: u32 = 8;

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
    /// The run's bill so far, as its record's bill counts it: the invocations (running ones up
    /// to now), the channel's servers for the time elapsed and the object-store requests
    /// counted so far (the workers' as of their latest statistics, the supervisor's as of its
    /// latest progress, the driver's own). Once the run has ended ([`done`](Self::done)) it is
    /// the record's bill's total, to the last bit.
    pub bill_usd: f64,
    /// Where the object-store requests in `bill_usd` come from.
    pub requests: RequestBasis,
    /// Whether the run has ended and `bill_usd` is its record's bill (the last progress a run
    /// shows).
    pub done: bool,
    /// The validation metric, latest and best (`None` before the first evaluation or
    /// without a validation set).
    pub validation: Option<crate::messages::ValidationProgress>,
}

/// Trains a model as `options` say, reporting progress to `observe` (every 100 ms), which may
/// cancel the run ([`Control`]); returns the complete run record, also written to the run's
/// location.
pub async fn train(
    options: &TrainOptions,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress) -> Control,
) -> Result<RunRecord> {
    options.validate_for(&*invoker)?;
    let mut dataset = Dataset::open(options.data_url.as_str()).await?;
    if options.training.trains_on_validation {
        dataset = dataset.with_validation_in_training();
    } else if options.training.refit && dataset.batches(Split::Validation) == 0 {
        return Err(crate::Mismatch::NoValidationSet {
            needed_by: crate::NeedsValidation::Refit,
            data_url: dataset.url().to_owned(),
        }
        .into());
    }
    let sample = match &dataset.manifest().kind {
        DatasetKind::Sparse { .. } if options.model.scales_rate_with_batch() => {
            Some(estimate_sample(&dataset).await?)
        }
        _ => None,
    };
    let spec = job_spec(options, &dataset, sample, invoker.platform())?;
    let run_store = Store::open(&spec.run_url)?;
    run_store.check_writable().await?;
    let run_store = run_store.with_request_counter(RequestCounter::new());
    let spec_json = serde_json::to_vec_pretty(&spec).map_err(|source| RuntimeError::Json {
        location: format!("{}/{SPEC_KEY}", run_store.url()),
        source,
    })?;
    // Create-if-absent: a run is never written over, so two runs that were given (or, however
    // unlikely, drew) the same job id cannot both start; the second stops here, before any of
    // its functions or its channel exists.
    match run_store
        .put_if_absent(SPEC_KEY, Bytes::from(spec_json))
        .await
    {
        Ok(()) => {}
        Err(StoreError::AlreadyExists { .. }) => {
            return Err(RuntimeError::JobExists {
                job_id: spec.job_id.clone(),
                run_url: run_store.url().to_owned(),
            });
        }
        Err(e) => return Err(e.into()),
    }
    let mut lease = Lease::take(&run_store).await?;
    let starts = vec![Start::default(); spec.training.workers as usize + 1];
    let result = run_job(
        &spec,
        &run_store,
        &mut lease,
        &options.prices,
        starts,
        invoker.clone(),
        observe,
    )
    .await;
    lease.release(&run_store).await;
    let record = result?;
    if options.training.refit {
        return refit(options, record, &run_store, invoker, observe).await;
    }
    Ok(record)
}

/// `--refit`: trains a second job on the training and validation sets together for the epochs
/// the early-stopped run `record` chose (its best evaluation's, rounded up), keeps that job's
/// model as the run's ([`RunRecord::refit`]), and writes the record again. A run that was
/// cancelled or has no best evaluation keeps its own model, with a warning.
async fn refit(
    options: &TrainOptions,
    mut record: RunRecord,
    run_store: &Store,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress) -> Control,
) -> Result<RunRecord> {
    if record.was_cancelled() {
        warn!("--refit: the run was cancelled, so it is not trained again");
        return Ok(record);
    }
    let best = record
        .validation
        .as_ref()
        .and_then(|v| v.best.and_then(|i| v.points.get(i)));
    let Some(best) = best else {
        warn!("--refit: the run has no best evaluation, so it keeps its own model");
        return Ok(record);
    };
    // At least one epoch; an epoch count too large for a u32 is saturated (far beyond any run).
    let epochs = (best.epoch.ceil() as u32).max(1);
    let mut again = options.clone();
    again.job_id = None;
    again.training.refit = false;
    again.training.trains_on_validation = true;
    again.training.stop.max_epochs = epochs;
    again.training.stop.target_loss = None;
    again.training.stop.max_time_s = None;
    again.validation = ValidationOptions::default();
    info!(
        "--refit: training again on the training and validation sets for {epochs} epoch(s), \
         the best evaluation's"
    );
    let refit = Box::pin(train(&again, invoker, observe)).await?;
    // The run's model becomes the refit's, so that whatever loads the run's model (predict,
    // export, Python) gets the one kept; the early-stopped one moves beside it. The record,
    // written last, says which is which.
    let early_stopped = run_store.get(MODEL_KEY).await?;
    run_store
        .put(EARLY_STOPPED_MODEL_KEY, early_stopped)
        .await?;
    let refit_store = Store::open(&again.run_url(&refit.spec.job_id))?;
    run_store
        .put(MODEL_KEY, refit_store.get(MODEL_KEY).await?)
        .await?;
    record.refit = Some(mlless_job::Refit {
        epochs,
        early_stopped_model_url: run_store.location(EARLY_STOPPED_MODEL_KEY),
        early_stopped_metrics: std::mem::replace(&mut record.metrics, refit.metrics.clone()),
        record: Box::new(refit),
    });
    write_record(run_store, &record).await?;
    Ok(record)
}

/// Writes `record` as the run's [`RECORD_KEY`] (pretty JSON).
async fn write_record(run_store: &Store, record: &RunRecord) -> Result<()> {
    let json = serde_json::to_vec_pretty(record).map_err(|source| RuntimeError::Json {
        location: format!("{}/{RECORD_KEY}", run_store.url()),
        source,
    })?;
    run_store.put(RECORD_KEY, Bytes::from(json)).await?;
    Ok(())
}

/// Invokes the supervisor and the workers of `spec` from `starts` (one per role, supervisor
/// first), keeps them going (hand-offs, replacements), shows progress, and completes the run
/// record with the invocations and the bill.
async fn run_job(
    spec: &JobSpec,
    run_store: &Store,
    lease: &mut Lease,
    prices: &PriceTable,
    starts: Vec<Start>,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress) -> Control,
) -> Result<RunRecord> {
    let started = Instant::now();
    let started_at_unix_ms = unix_ms(SystemTime::now());
    let channel = open_channel_with(
        spec.training.channel.as_deref(),
        run_store,
        &spec.job_id,
        mlless_store::ChannelOptions::default().with_grace(spec.training.channel_grace()),
    )
    .await?;
    info!(
        job_id = %spec.job_id,
        run = %spec.run_url,
        workers = spec.training.workers,
        invoker = invoker.platform(),
        "starting the job"
    );
    // For `mlless runs`: this run is being driven (a resumed run drives again).
    if let Err(e) = crate::runs::beat(run_store).await {
        warn!("could not write the driver's heartbeat: {e}");
    }
    let mut last_beat = Instant::now();
    let mut fleet = Invocations::new(&*invoker, spec, run_store);
    for (role, start) in starts.into_iter().enumerate() {
        if let Err(e) = fleet.invoke(role, start).await {
            fleet.kill_all();
            return Err(e);
        }
    }

    let mut failure: Option<String> = None;
    // When the user cancelled the run, and whether its functions were killed.
    let mut cancelled: Option<Instant> = None;
    let mut killed = false;
    let mut progress = Progress::default();
    let mut ticker = tokio::time::interval(POLL);
    let mut replaced_through = 0u32;
    let channel_kind = mlless_job::billing::channel_kind(spec.training.channel.as_deref());
    let bill_prices = prices.clone().for_channel(channel_kind);
    let live =
        |progress: &Progress, bill_usd: f64, requests: RequestBasis, done: bool| LiveProgress {
            job_id: spec.job_id.clone(),
            step: progress.step,
            epoch: progress.epoch,
            loss: progress.loss,
            workers: progress.workers,
            max_epochs: spec.training.stop.max_epochs,
            elapsed_s: started.elapsed().as_secs_f64(),
            bill_usd,
            requests,
            done,
            validation: progress.validation.clone(),
        };
    // The bill so far: the invocations, the channel's servers for the time elapsed, and the
    // object-store requests counted so far (the functions', as the supervisor's progress has
    // them, and the driver's own), billed as the record's bill bills them.
    let bill_so_far = |fleet: &Invocations, progress: &Progress| {
        let invocations = fleet.cost_so_far(prices, spec.training.limits.memory_mb);
        let mut counted = progress.requests;
        if let Some(driver) = run_store.request_counter() {
            counted += driver.counts();
        }
        let requests = mlless_job::billing::billed_requests(&counted);
        let others = bill_prices.bill(&[], started.elapsed().as_secs_f64(), requests);
        invocations + others.services_usd + others.storage_usd + others.table_usd
    };
    progress.loss = f64::NAN;
    progress.workers = spec.training.workers;
    while fleet.is_running() {
        tokio::select! {
            done = fleet.next() => {
                let Some((role, id, done)) = done else { break };
                let report = done?;
                if failure.is_none()
                    && !killed
                    && let Err(message) = fleet.ended(role, id, &report).await
                {
                    // A function failed for good: the others cannot finish without it.
                    info!(%message, "stopping every function");
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
                if last_beat.elapsed() >= crate::runs::HEARTBEAT_EVERY {
                    last_beat = Instant::now();
                    if let Err(e) = crate::runs::beat(run_store).await {
                        warn!("could not write the driver's heartbeat: {e}");
                    }
                    if let Err(e) = lease.renew(run_store).await {
                        warn!("could not renew the run's lease: {e}");
                    }
                }
                if let Ok(Some(bytes)) = channel.get_key(PROGRESS_KEY).await
                    && let Ok(p) = serde_json::from_slice::<Progress>(&bytes)
                {
                    if p.workers != progress.workers {
                        info!(
                            workers = p.workers,
                            before = progress.workers,
                            step = p.step,
                            "the supervisor changed the fleet's size"
                        );
                    }
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
                        let replaced = fleet.replace(worker as usize + 1, request.step);
                        if let Err(e) = replaced.await {
                            failure = Some(format!("could not replace worker {worker}: {e}"));
                            fleet.kill_all();
                        }
                    }
                }
                let bill_usd = bill_so_far(&fleet, &progress);
                let control = observe(&live(&progress, bill_usd, RequestBasis::Counted, false));
                let reason = match &control {
                    Control::Cancel => Some(mlless_job::record::CANCELLED),
                    Control::Stop(reason) => Some(reason.as_str()),
                    Control::Continue | Control::Kill => None,
                };
                if let Some(reason) = reason
                    && cancelled.is_none()
                    && failure.is_none()
                {
                    cancelled = Some(Instant::now());
                    let stop = StopRequest { reason: reason.to_owned() };
                    if let Ok(json) = serde_json::to_vec(&stop)
                        && let Err(e) = channel.put_key(STOP_KEY, Bytes::from(json)).await
                    {
                        warn!("could not publish the stop request: {e}");
                    }
                    // Once the request is out (a test waits for this line to go on).
                    info!(job = spec.job_id, reason, "asked the functions to stop");
                }
                let late = cancelled.is_some_and(|t| t.elapsed() >= CANCEL_GRACE);
                if !killed && (control == Control::Kill || late) {
                    warn!(job = spec.job_id, late, "cancelled: killing the functions");
                    killed = true;
                    fleet.kill_all();
                }
            }
        }
    }
    if let Err(e) = channel.cleanup().await {
        warn!("could not clean up the channel: {e}");
    }
    if killed {
        let roles = mlless_job::roles(spec.training.workers);
        let resume_step =
            match checkpoint::newest_intact_step(run_store, &spec.job_id, &roles, &mut Vec::new())
                .await
            {
                Ok(step) => step,
                Err(e) => {
                    warn!("could not look for the run's checkpoints: {e}");
                    None
                }
            };
        return Err(RuntimeError::Cancelled {
            run_url: spec.run_url.as_str().to_owned(),
            resume_step,
        });
    }
    if let Some(mut message) = failure {
        // The hint to resume only where resuming can help, from a checkpoint that exists.
        if spec.training.checkpoint_every > 0 && !message.ends_with(crate::NOT_RESUMABLE) {
            message.push_str(&resume_hint(spec, run_store).await);
        }
        // For `mlless runs`; the error itself is what matters if this write fails too.
        let failure = crate::runs::Failure {
            reason: message.clone(),
        };
        if let Ok(json) = serde_json::to_vec(&failure)
            && let Err(e) = run_store
                .put(crate::runs::FAILURE_KEY, Bytes::from(json))
                .await
        {
            warn!("could not leave the failure in the run: {e}");
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
    record.invocations = reports;
    // The object-store requests are those the functions counted and left, with the driver's
    // own (this record's PUT included). Where no function left its count (all killed), the
    // record has none and its bill estimates them from the steps (`RunRecord::billed_requests`).
    let by_functions = crate::requests::left_by_functions(run_store).await?;
    if by_functions != RequestCounts::default() {
        let mut counted = by_functions;
        if let Some(driver) = run_store.request_counter() {
            driver.add(Request::Put, 1);
            counted += driver.counts();
        }
        record.requests = Some(counted);
    }
    let bill = record.bill_at(prices);
    let total_usd = bill.total_usd;
    record.bill = Some(bill);
    record.price_validation(prices);
    if let Some(last) = record.steps.last() {
        progress = Progress {
            step: last.step,
            epoch: last.epoch,
            loss: last.loss,
            workers: progress.workers,
            validation: progress.validation.clone(),
            requests: progress.requests,
        };
    }
    // The run is over: what the observer asks now changes nothing.
    let _ = observe(&live(
        &progress,
        total_usd,
        record.billed_requests().1,
        true,
    ));
    write_record(run_store, &record).await?;
    Ok(record)
}
