//! `mlless train`: train on a prepared data set with function workers.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use clap::{Args, ValueEnum};
use mlless_core::{OptimizerKind, Pace, ScaleInConfig, Schedule, SignificanceScale};
use mlless_faas::Limits;
use mlless_job::{
    ModelChoice, Pattern, RunRecord, SecretUrl, StopCriteria, SyncMode, TrainingConfig,
};
use mlless_runtime::{
    Control, Hyperparameters, LiveProgress, ResumeOptions, RuntimeError, TrainOptions,
    ValidationOptions,
};
use mlless_store::CloudLatency;

/// `--model`: the names of [`ModelChoice`], each with its description in `--help`.
pub(crate) fn model_parser() -> impl clap::builder::TypedValueParser<Value = ModelChoice> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        ModelChoice::ALL.map(|m| PossibleValue::new(m.name()).help(m.description())),
    )
    .try_map(|name| name.parse::<ModelChoice>())
}

/// Synchronisation models, as the CLI names them (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sync {
    /// Bulk synchronous: every update of a step is applied before the next step.
    Bsp,
    /// MLLess's significance filter: synchronous, but only significant updates are sent
    /// (see --significance).
    Isp,
    /// Stale synchronous: a worker may run --slack steps ahead of the slowest.
    Ssp,
    /// Asynchronous: no barrier; updates are applied as they arrive (none lost).
    Asp,
}

/// Whether the scale-in auto-tuner runs, and by which rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScaleIn {
    /// The fleet keeps its size.
    Off,
    /// The supervisor removes a worker once what it buys per dollar falls below a share of
    /// what the run has bought per dollar (BSP and ISP).
    Auto,
    /// MLLess's rule: remove a worker when the projected loss of the smaller fleet is less than
    /// the threshold worse than the full fleet's at the horizon.
    Mlless,
}

/// When the scale-in tuner decides (`--scale-in-interval`): a share of the job, a number of
/// steps, or seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScaleInInterval {
    /// 40 decisions over the job.
    Auto,
    /// Every this many steps.
    Steps(u64),
    /// Every this many seconds (MLLess's clock).
    Seconds(f64),
}

impl std::str::FromStr for ScaleInInterval {
    type Err = String;

    /// `auto`, `Nsteps`, `S` or `Ss` (seconds).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let bad = || {
            format!(
                "--scale-in-interval is auto, STEPS (e.g. 50steps) or SECONDS (e.g. 10 or 10s), \
                 not '{s}'"
            )
        };
        if s == "auto" {
            return Ok(Self::Auto);
        }
        if let Some(n) = s.strip_suffix("steps").or_else(|| s.strip_suffix("step")) {
            return n
                .trim()
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .map(Self::Steps)
                .ok_or_else(bad);
        }
        s.strip_suffix('s')
            .unwrap_or(s)
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| *v > 0.0 && *v <= mlless_job::config::MAX_SECONDS)
            .map(Self::Seconds)
            .ok_or_else(bad)
    }
}

/// Options of `mlless train`.
#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// The prepared data set (the location given to `mlless prepare --out`); required, unless
    /// --resume.
    #[arg(long)]
    #[arg(
        required_unless_present = "resume",
        default_value = "",
        hide_default_value = true
    )]
    pub data: String,
    /// The model; required, unless --resume.
    #[arg(
        long,
        value_parser = model_parser(),
        required_unless_present = "resume",
        default_value = "lr",
        hide_default_value = true
    )]
    pub model: ModelChoice,
    /// Number of function workers.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// Samples a step reads over all the workers, whatever their number: each worker reads
    /// its share (minibatches are cut into slices as needed), so that more workers make steps
    /// faster, not larger [default: 4 minibatches of the data set].
    #[arg(long)]
    pub global_batch: Option<u64>,
    /// The optimiser each worker runs [default: momentum for lr, adam for pmf].
    #[arg(long, value_enum)]
    pub optimizer: Option<OptimizerKind>,
    /// Learning rate [default: lr 0.5 with momentum/nesterov, 3 with sgd, per 1,000 samples of
    /// the global batch and larger on imbalanced data, at most 16 times that and at most what
    /// the features' curvature allows; 0.003 with adam; pmf 0.07 with adam, 3 with
    /// momentum/nesterov, 30 with sgd].
    #[arg(long)]
    pub lr: Option<f32>,
    /// Learning-rate schedule.
    #[arg(long, value_enum, default_value_t = Schedule::InvSqrtEpoch)]
    pub schedule: Schedule,
    /// inv-sqrt-epoch's time constant T in epochs: the rate is lr / sqrt(1 + epoch / T), half
    /// its start after 3T epochs [default: lr under bsp and isp a hundredth of the training rows an
    /// average feature occurs in, from 1 to 16; otherwise 1].
    #[arg(long, value_name = "T")]
    pub decay_epochs: Option<f64>,
    /// L2 regularisation, per example [default: lr 1e-4, pmf 0.1].
    #[arg(long)]
    pub l2: Option<f32>,
    /// pmf: the count-aware prior, added to --l2 as PRIOR / n per rating for a user or item
    /// with n training ratings, so that the rarely rated are held near their bias
    /// [default: 10; 0 turns it off].
    #[arg(long)]
    pub prior: Option<f32>,
    /// Clusters of kmeans.
    #[arg(long, default_value_t = mlless_runtime::driver::DEFAULT_CLUSTERS)]
    pub k: u32,
    /// k-means: stop once the inertia changes by less than this fraction between iterations.
    #[arg(long, default_value_t = mlless_runtime::driver::DEFAULT_TOLERANCE)]
    pub tolerance: f64,
    /// Widths of the MLP's hidden layers, comma-separated (one or two layers).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    pub hidden: Vec<u32>,
    /// Classes of the MLP (labels are class ids 0..CLASSES).
    #[arg(long, default_value_t = 2)]
    pub classes: u32,
    /// Latent factors of pmf [default: 10].
    #[arg(long)]
    pub factors: Option<u32>,
    /// Stop once the training loss holds at or below this for 10 consecutive steps.
    #[arg(long)]
    pub target_loss: Option<f64>,
    /// Stop after this many passes over the training set.
    #[arg(long, default_value_t = 10)]
    pub max_epochs: u32,
    /// How often the model is evaluated on the data set's validation set (if it has one):
    /// auto (every epoch or every 5 s, whichever is sooner), STEPS (e.g. 200), EPOCHS (e.g.
    /// 0.5epochs) or SECONDS (e.g. 10s).
    #[arg(long, default_value = "auto", value_name = "WHEN")]
    pub eval_every: mlless_job::EvalEvery,
    /// Stop once the validation metric has not improved for this many evaluations; the model
    /// kept is the best one evaluated (0: never stop on it) [default: 8 when the data set has
    /// a validation set].
    #[arg(long, value_name = "PATIENCE")]
    pub early_stop: Option<u32>,
    /// Once the run has stopped, train again on the training and validation sets together
    /// for the epochs early stopping chose (the best evaluation's, rounded up), and keep that
    /// model: the last tenth of data the validation set held back goes into the model.
    #[arg(long)]
    pub refit: bool,
    /// Stop once the validation metric reaches this (repeatable: once all are reached), e.g.
    /// rmse<=0.93, logloss<=0.33, auc>=0.8.
    #[arg(long, value_name = "METRIC<=X")]
    pub target_metric: Vec<mlless_core::MetricTarget>,
    /// Stop after this much wall time, seconds.
    #[arg(long, value_parser = crate::seconds("--max-time", mlless_job::config::SecondsRange::Positive))]
    pub max_time: Option<f64>,
    /// How the workers synchronise.
    #[arg(long, value_enum, default_value_t = Sync::Bsp)]
    pub sync: Sync,
    /// ISP's threshold V: an accumulated update a_j is sent once |a_j| > V / sqrt(t+1) times
    /// its scale (see --significance-scale) [default: 4 for pmf, 1 for the other models].
    #[arg(long)]
    pub significance: Option<f32>,
    /// What ISP measures a_j against: the parameter x_j itself (MLLess), or the larger of |x_j|
    /// and the mean magnitude of the parameters, so that updates of weights near zero (rare
    /// features of sparse LR, rarely rated films) are held back too.
    #[arg(long, value_enum, default_value_t = SignificanceScale::Mean)]
    pub significance_scale: SignificanceScale,
    /// SSP's slack: how many steps a worker may run ahead of the slowest.
    #[arg(long, default_value_t = 3)]
    pub slack: u32,
    /// Compression of the updates, with error feedback: none, topk:K (K entries per step, or
    /// a fraction 0 < K < 1 of them) or onebit (signs and one scale).
    #[arg(long, default_value = "none")]
    pub compress: mlless_core::Compression,
    /// How the workers combine their work: ga (updates averaged every step), ma[:K] (local
    /// steps, models averaged every K steps or every epoch) or admm[:RHO[:LOCAL_EPOCHS]]
    /// (consensus ADMM; RHO defaults to 0.05, LOCAL_EPOCHS to 1).
    #[arg(long, default_value = "ga")]
    pub algorithm: mlless_job::Algorithm,
    /// How an exchange aggregates the updates (allreduce and scatter-reduce need --sync bsp or
    /// isp) [default: broadcast up to 16 workers on the object store and up to 64 on Redis or
    /// Memcached, allreduce beyond; broadcast under ssp and asp].
    #[arg(long, value_enum)]
    pub pattern: Option<Pattern>,
    /// Scale-in auto-tuner: remove workers one by one once the validation curve (the training
    /// loss without a validation set) no longer pays for them.
    #[arg(long, value_enum, default_value_t = ScaleIn::Off)]
    pub scale_in: ScaleIn,
    /// Scale-in: auto removes a worker when what it buys per dollar over the horizon is less
    /// than this share of what the run has bought per dollar [default: 0.5]; mlless when the
    /// projected loss with fewer workers is less than this much (relative) worse than the full
    /// fleet's [default: 0.05].
    #[arg(long)]
    pub scale_in_threshold: Option<f64>,
    /// Scale-in: when the tuner decides, and the horizon it projects over: auto (every 1/40 of
    /// the job's epochs or --max-time), STEPS (e.g. 50steps) or SECONDS (e.g. 10s, MLLess's
    /// clock; the horizon is then --horizon).
    #[arg(long, default_value = "auto", value_name = "WHEN")]
    pub scale_in_interval: ScaleInInterval,
    /// Scale-in with a --scale-in-interval in seconds: how far ahead the loss is projected,
    /// seconds (at most the interval).
    #[arg(long, default_value_t = 10.0, value_parser = crate::seconds("--horizon", mlless_job::config::SecondsRange::Positive))]
    pub horizon: f64,
    /// Scale-in: never fewer workers than this.
    #[arg(long, default_value_t = 1)]
    pub min_workers: u32,
    /// Every worker and the supervisor checkpoint their state every this many steps, so that a
    /// crashed one is replaced from its checkpoint and `--resume` can continue a failed run
    /// (0: only at the lifetime hand-off; a crash then fails the run).
    #[arg(long, default_value_t = 100)]
    pub checkpoint_every: u64,
    /// Replace a worker whose statistics are this many seconds late [default: 100 of the
    /// run's median steps, at least 30 s].
    #[arg(long, value_parser = crate::seconds("--worker-deadline", mlless_job::config::SecondsRange::Positive))]
    pub worker_deadline: Option<f64>,
    /// How long the channel (Redis, Memcached, a parameter server, S3) may be unreachable before the run stops
    /// with an error naming it; operations are retried with backoff meanwhile.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 30.0,
        value_parser = crate::seconds("--channel-grace", mlless_job::config::SecondsRange::NonNegative)
    )]
    pub channel_grace: f64,
    /// The VM type of each parameter server of a `ps://` channel, which bills it per hour of
    /// the run: a built-in type of `mlless cost --vm` (t3.medium, c5.large, c5.4xlarge) or
    /// TYPE:PRICE in dollars an hour (m5.large:0.096) [default: c5.large].
    #[arg(long, value_name = "TYPE[:PRICE]")]
    pub ps_instance: Option<mlless_cost::VmPrice>,
    /// Add a cloud's latency to every request of the functions' channel (and S3's to their
    /// data reads), to see on this machine what the run's steps would take there: `s3` (20 ms
    /// a request, 75 MB/s), `elasticache` (0.3 ms, 75 MB/s), `ps` (a parameter server's VM in
    /// the region: 0.3 ms, 75 MB/s), `dynamodb` (5 ms, 75 MB/s) or a TOML file (see `mlless
    /// bench`).
    #[arg(long, value_name = "CLOUD", value_parser = crate::cost::parse_cloud)]
    pub emulate: Option<CloudLatency>,
    /// Continue the failed run at this location (`{runs}/{job}`) from its last checkpoint.
    /// Options that do not change the mathematics may be given again with new values
    /// (--memory-mb, --timeout-s, --worker-deadline, --channel-grace, --max-epochs,
    /// --max-time; the run's spec and record keep the change), as may --invoker, --platform,
    /// --quiet and --record; any other option is refused.
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,
    /// Test aid: inject a fault (repeatable): kill-worker:W@T, kill-supervisor@T, drop:W@T
    /// (worker W does not publish its update of step T), delay:W@T:MS, oom:W@T, pause:W@T
    /// (worker W waits at step T until the run has `faults/go-W-T` or is asked to stop,
    /// having written `faults/paused-W-T`).
    #[arg(long, hide_short_help = true)]
    pub fault: Vec<mlless_job::Fault>,
    /// Test aid, for tests only: the job id instead of a new one (letters, digits, `-`, `_`,
    /// `.`), so that a test can make two runs of the same id; a run of that id that exists
    /// already is refused before any function starts.
    #[arg(long, hide = true, value_name = "ID")]
    pub job_id: Option<String>,
    /// Where the functions run: `local` processes of this binary, or `lambda:FUNCTION_NAME`, a
    /// deployed AWS Lambda function invoked through the Lambda API (credentials, region and
    /// endpoint from the standard AWS environment; see the README's "Running on AWS Lambda").
    #[arg(long, default_value = "local")]
    pub invoker: crate::InvokerChoice,
    /// Channel for the updates [default: the object store the run is written to].
    #[arg(long)]
    pub channel: Option<String>,
    /// Where runs are written [default: DATA/runs].
    #[arg(long)]
    pub runs: Option<String>,
    /// Memory cap of every function, MB.
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: u32,
    /// Lifetime cap of every function, seconds.
    #[arg(long, default_value_t = 900.0, value_parser = crate::seconds("--timeout-s", mlless_job::config::SecondsRange::Positive))]
    pub timeout_s: f64,
    /// Price table: aws-lambda, ibm-cf or a TOML file (see `mlless cost`).
    #[arg(long, default_value = "aws-lambda")]
    pub platform: String,
    /// Seed of the model's initialisation and of the minibatch order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the run record to this local file.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// No progress bar and no progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// When standard error is not a terminal (or with --log-format json), write a progress
    /// line there every this many seconds: step, epoch, loss, validation, workers, elapsed
    /// time and cost so far (0: no lines).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = crate::progress::parse_seconds)]
    pub progress_every: f64,
    /// Print the summary as one JSON document on standard output (and nothing else there):
    /// job id, model, stop reason, epochs, steps, wall time, cost, test metrics, validation,
    /// run and record locations.
    #[arg(long)]
    pub json: bool,
    /// The options the user gave (on the command line or in the environment), by their
    /// argument ids (`memory_mb`): what `--resume` checks.
    #[arg(skip)]
    pub given: Vec<String>,
}

/// Sorts every field of [`TrainArgs`] (an option, by its argument id, or not an option) into
/// the options `--resume` takes again and the ones it refuses, and defines [`RESUMABLE`] (and
/// for the tests `REFUSED`). The lists are a pattern naming every field without `..`, so that a
/// new option does not compile until it is in one of them.
macro_rules! options_on_resume {
    (
        takes: [$($takes:ident),* $(,)?],
        refuses: [$($refuses:ident),* $(,)?],
        not_options: [$($not:ident),* $(,)?] $(,)?
    ) => {
        /// The options `--resume` takes besides its own: the ones that do not change the
        /// mathematics of the run (by argument id), and the ones that only say where and how it
        /// runs or shows.
        const RESUMABLE: &[&str] = &[$(stringify!($takes)),*];

        /// The options `--resume` refuses: they would change the run.
        #[cfg(test)]
        const REFUSED: &[&str] = &[$(stringify!($refuses)),*];

        /// Compiles only while the lists name every field of `TrainArgs`, each once.
        const _: fn(&TrainArgs) = |&TrainArgs { $($takes: _,)* $($refuses: _,)* $($not: _,)* }| ();
    };
}

// A new option of `mlless train` goes into `takes` if a failed run may be continued with a new
// value of it (it does not change the mathematics, or only where and how the run shows), into
// `refuses` otherwise; `--resume`'s help lists the first.
options_on_resume! {
    takes: [
        memory_mb,
        timeout_s,
        worker_deadline,
        channel_grace,
        max_epochs,
        max_time,
        invoker,
        platform,
        quiet,
        progress_every,
        json,
        record,
        resume,
    ],
    refuses: [
        data,
        model,
        workers,
        global_batch,
        optimizer,
        lr,
        schedule,
        decay_epochs,
        l2,
        prior,
        k,
        tolerance,
        hidden,
        classes,
        factors,
        target_loss,
        eval_every,
        early_stop,
        refit,
        target_metric,
        sync,
        significance,
        significance_scale,
        slack,
        compress,
        algorithm,
        pattern,
        scale_in,
        scale_in_threshold,
        scale_in_interval,
        horizon,
        min_workers,
        checkpoint_every,
        ps_instance,
        emulate,
        fault,
        job_id,
        channel,
        runs,
        seed,
    ],
    not_options: [given],
}

/// The flag of an argument id: `memory_mb` → `--memory-mb`.
fn flag(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

impl TrainArgs {
    /// What `--resume` changes: the resumable options the user gave; an error naming every
    /// other option given, which would change the mathematics of the run.
    pub fn resume_options(&self) -> anyhow::Result<ResumeOptions> {
        let refused: Vec<String> = self
            .given
            .iter()
            .filter(|id| !RESUMABLE.contains(&id.as_str()))
            .map(|id| flag(id))
            .collect();
        if !refused.is_empty() {
            anyhow::bail!(
                "--resume continues a run as it was trained: {} would change it (with --resume \
                 only {} may be given)",
                refused.join(", "),
                RESUMABLE
                    .iter()
                    .filter(|id| **id != "resume")
                    .map(|id| flag(id))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let given = |id: &str| self.given.iter().any(|g| g == id);
        Ok(ResumeOptions {
            memory_mb: given("memory_mb").then_some(self.memory_mb),
            // Zero (which validation refuses) for a negative, infinite or NaN number.
            timeout: given("timeout_s")
                .then(|| Duration::try_from_secs_f64(self.timeout_s).unwrap_or(Duration::ZERO)),
            worker_deadline_s: if given("worker_deadline") {
                self.worker_deadline
            } else {
                None
            },
            channel_grace_s: given("channel_grace").then_some(self.channel_grace),
            max_epochs: given("max_epochs").then_some(self.max_epochs),
            max_time_s: if given("max_time") {
                self.max_time
            } else {
                None
            },
        })
    }

    /// The options of `mlless train --data DATA --model MODEL` with every other option at its
    /// default (for the commands that train on the user's behalf: demo, bench).
    pub fn with_defaults(data: &str, model: ModelChoice) -> anyhow::Result<Self> {
        use clap::FromArgMatches;
        let command = <Self as Args>::augment_args(clap::Command::new("train"));
        let matches =
            command.try_get_matches_from(["train", "--data", data, "--model", model.name()])?;
        Ok(Self::from_arg_matches(&matches)?)
    }

    /// The runtime's options for these arguments; [`TrainOptions::validate`] checks them.
    pub fn options(&self) -> anyhow::Result<TrainOptions> {
        let prices = crate::cost::price_table(&self.platform)?;
        Ok(TrainOptions {
            data_url: self.data.as_str().into(),
            runs_url: self.runs.as_deref().map(SecretUrl::from),
            model: self.model,
            hyper: Hyperparameters {
                lr: self.lr,
                l2: self.l2,
                factors: self.factors,
                clusters: Some(self.k),
                hidden: Some(self.hidden.clone()),
                classes: Some(self.classes),
                prior: self.prior,
            },
            optimizer: self.optimizer,
            prices,
            validation: ValidationOptions {
                every: self.eval_every,
                early_stop: self.early_stop,
                targets: self.target_metric.clone(),
            },
            training: self.training(),
            job_id: self.job_id.clone(),
        })
    }

    /// The scale-in tuner's settings, `None` with `--scale-in off`.
    fn tuner(&self) -> Option<ScaleInConfig> {
        let base = match self.scale_in {
            ScaleIn::Off => return None,
            ScaleIn::Auto => ScaleInConfig::default(),
            ScaleIn::Mlless => ScaleInConfig::mlless(),
        };
        let (pace, interval_s) = match self.scale_in_interval {
            ScaleInInterval::Auto => (Pace::DEFAULT, base.interval_s),
            ScaleInInterval::Steps(interval) => (Pace::Steps { interval }, base.interval_s),
            ScaleInInterval::Seconds(seconds) => (Pace::Clock, seconds),
        };
        let mut config = ScaleInConfig {
            pace,
            interval_s,
            horizon_s: self.horizon,
            min_workers: self.min_workers,
            ..base
        };
        if let Some(threshold) = self.scale_in_threshold {
            match self.scale_in {
                ScaleIn::Mlless => config.threshold = threshold,
                _ => config.efficiency_threshold = threshold,
            }
        }
        Some(config)
    }

    /// The options every function gets as they are.
    fn training(&self) -> TrainingConfig {
        TrainingConfig {
            workers: self.workers,
            global_batch: self.global_batch,
            schedule: self.schedule,
            decay_epochs: self.decay_epochs,
            seed: self.seed,
            stop: StopCriteria {
                target_loss: self.target_loss,
                target_patience: 10,
                max_epochs: self.max_epochs,
                max_time_s: self.max_time,
                tolerance: Some(self.tolerance),
            },
            channel: self.channel.as_deref().map(SecretUrl::from),
            limits: Limits {
                memory_mb: self.memory_mb,
                // Zero (which validation refuses) for a negative, infinite or NaN number.
                timeout: Duration::try_from_secs_f64(self.timeout_s).unwrap_or(Duration::ZERO),
            },
            sync: match self.sync {
                Sync::Bsp => SyncMode::Bsp,
                Sync::Isp => SyncMode::Isp {
                    significance: self
                        .significance
                        .unwrap_or_else(|| self.model.isp_significance()),
                    scale: self.significance_scale,
                },
                Sync::Ssp => SyncMode::Ssp { slack: self.slack },
                Sync::Asp => SyncMode::Asp,
            },
            compression: self.compress,
            scale_in: self.tuner(),
            algorithm: self.algorithm,
            pattern: self.pattern,
            checkpoint_every: self.checkpoint_every,
            worker_deadline_s: self.worker_deadline,
            faults: self.fault.clone(),
            ps_instance: self.ps_instance.clone(),
            channel_grace_s: self.channel_grace,
            emulate: self.emulate.clone(),
            refit: self.refit,
            trains_on_validation: false,
        }
    }
}

/// A run the user cancelled (Ctrl-C, SIGTERM): `mlless` exits with status 130.
#[derive(Debug)]
pub struct Cancelled {
    /// What happened and how to continue, in one line.
    pub message: String,
}

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Cancelled {}

/// The line of a cancelled run: its job and how to continue it from the checkpoints of
/// `resume_step`, or, with none, that there is nothing to resume (a `--resume` would be
/// refused).
fn resume_hint(job_id: &str, run_url: &str, resume_step: Option<u64>) -> String {
    match resume_step {
        Some(step) => format!(
            "cancelled job {job_id}: continue it from its checkpoints of step {step} with \
             `mlless train --resume {run_url}`"
        ),
        None => format!(
            "cancelled job {job_id} before its first checkpoint: nothing to resume from (it \
             was trained without --checkpoint-every, or stopped before the first); train it \
             again"
        ),
    }
}

/// Runs `mlless train`, prints the summary and returns the record; a cancelled run prints its
/// summary and ends in [`Cancelled`].
pub fn run(args: TrainArgs) -> anyhow::Result<RunRecord> {
    let record = train_with_progress(&args)?;
    if let Some(path) = &args.record {
        crate::summary::write_record(path, &record)?;
    }
    if args.json {
        crate::summary::print_json(&record, args.record.as_deref())?;
    } else {
        crate::summary::print(&record);
        if let Some(path) = &args.record {
            println!("run record: {}", path.display());
        }
    }
    if record.was_cancelled() {
        let run_url = record.spec.run_url.as_str();
        let resume_step = crate::runtime()?
            .block_on(mlless_runtime::resumable_step(run_url))
            .unwrap_or_else(|e| {
                tracing::warn!("could not look for the run's checkpoints: {e}");
                None
            });
        return Err(Cancelled {
            message: resume_hint(&record.spec.job_id, run_url, resume_step),
        }
        .into());
    }
    Ok(record)
}

/// Counts the interrupts (SIGINT, SIGTERM) this process gets, for ever: the first asks the run
/// to stop after its step, the second to kill its functions.
pub(crate) async fn count_interrupts(count: Arc<AtomicU32>) {
    let first = format!(
        "\ncancelling: the workers stop after their current step (up to {} s; Ctrl-C again to \
         kill them now)",
        mlless_runtime::CANCEL_GRACE.as_secs()
    );
    count_interrupts_saying(count, first).await;
}

/// Counts the interrupts (SIGINT, SIGTERM) this process gets, for ever, and writes `first` to
/// standard error at the first.
pub(crate) async fn count_interrupts_saying(count: Arc<AtomicU32>, first: String) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        #[cfg(unix)]
        let interrupted = async {
            match term.as_mut() {
                Some(term) => {
                    tokio::select! {
                        r = tokio::signal::ctrl_c() => r.is_ok(),
                        r = term.recv() => r.is_some(),
                    }
                }
                None => tokio::signal::ctrl_c().await.is_ok(),
            }
        }
        .await;
        #[cfg(not(unix))]
        let interrupted = tokio::signal::ctrl_c().await.is_ok();
        if !interrupted {
            return;
        }
        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            eprintln!("{first}");
        }
    }
}

/// Refuses a job whose data, run or channel the remote function `function` could not reach: a
/// directory on this machine (the default channel is the run's object store).
pub(crate) fn check_reachable_from_functions(
    args: &TrainArgs,
    function: &str,
) -> anyhow::Result<()> {
    let mut places = vec![("--channel", args.channel.as_deref())];
    match &args.resume {
        Some(run) => places.push(("--resume", Some(run.as_str()))),
        None => places.extend([
            ("--data", Some(args.data.as_str())),
            ("--runs", args.runs.as_deref()),
        ]),
    }
    for (flag, url) in places {
        if let Some(url) = url.filter(|url| !crate::reachable_from_functions(url)) {
            anyhow::bail!(
                "{flag} {} is on this machine, which Lambda function {function} cannot read: \
                 use an s3:// location (and a redis:// or memcached:// channel)",
                mlless_store::redact_url(url)
            );
        }
    }
    Ok(())
}

/// Trains, showing progress (a live bar on a terminal, lines elsewhere) unless `--quiet`.
pub fn train_with_progress(args: &TrainArgs) -> anyhow::Result<RunRecord> {
    if let crate::InvokerChoice::Lambda(function) = &args.invoker {
        check_reachable_from_functions(args, function)?;
    }
    let invoker = args.invoker.invoker()?;
    let interrupts = Arc::new(AtomicU32::new(0));
    let mut reporter =
        crate::progress::Reporter::for_stderr(args.quiet, args.progress_every, args.max_epochs);
    let mut observe = |p: &LiveProgress| {
        reporter.observe(p);
        match interrupts.load(Ordering::SeqCst) {
            0 => Control::Continue,
            1 => Control::Cancel,
            _ => Control::Kill,
        }
    };
    let runtime = crate::runtime()?;
    runtime.spawn(count_interrupts(interrupts.clone()));
    let result = match &args.resume {
        Some(run) => {
            let prices = crate::cost::price_table(&args.platform)?;
            let changes = args.resume_options()?;
            runtime.block_on(mlless_runtime::resume(
                run,
                &changes,
                &prices,
                invoker,
                &mut observe,
            ))
        }
        None => {
            let options = args.options()?;
            runtime.block_on(mlless_runtime::train(&options, invoker, &mut observe))
        }
    };
    reporter.finish();
    match result {
        Err(RuntimeError::Cancelled {
            run_url,
            resume_step,
        }) => {
            let job = run_url.rsplit('/').next().unwrap_or_default().to_owned();
            Err(Cancelled {
                message: format!(
                    "{} (its functions were killed)",
                    resume_hint(&job, &run_url, resume_step)
                ),
            }
            .into())
        }
        result => Ok(result?),
    }
}

#[cfg(test)]
mod tests;
