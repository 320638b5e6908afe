//! The training options written once: [`TrainingConfig`], shared by the driver's
//! `TrainOptions` (in the runtime) and the [`JobSpec`](crate::JobSpec) the functions read,
//! its one [`TrainingConfig::validate`], and [`SecretUrl`], the URL that redacts itself.
//!
//! A new training option that reaches the functions as the user gave it is a field of
//! [`TrainingConfig`] (with `#[serde(default)]`, so that older specs still read) and a flag of
//! `mlless train`; the driver copies nothing by hand.

use std::time::Duration;

use mlless_core::{Compression, ScaleInConfig, Schedule};
use mlless_io_types::Limits;
use mlless_io_types::redact_url;
use serde::{Deserialize, Serialize};

use crate::fault::Fault;
use crate::model::ModelChoice;
use crate::protocol::{Algorithm, Pattern, SyncMode};

/// A URL that may carry a credential (a channel's password, a token in a query). `Debug` and
/// `Display` show it redacted ([`redact_url`]); only [`SecretUrl::as_str`] gives it as written,
/// for opening a connection. It serialises as the plain string.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL as written, credentials included: for connecting, never for showing.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This URL with its credentials replaced by `***`.
    pub fn redacted(&self) -> SecretUrl {
        SecretUrl(redact_url(&self.0))
    }
}

/// The URL as written (see [`SecretUrl::as_str`]), so that `&url` opens a store or a channel.
impl std::ops::Deref for SecretUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        Self(url.to_owned())
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&redact_url(&self.0), f)
    }
}

impl std::fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

/// The most workers a run may have, whatever runs them: ten times AWS Lambda's default quota of
/// 1,000 concurrent executions per region. `train` refuses more, and `report` and `cost` refuse
/// a record or a fleet with more (before they allocate anything by the fleet's size).
pub const MAX_WORKERS: u32 = 10_000;

/// The largest `--global-batch`: a billion samples, more than a step of any data set mlless
/// is made for would read.
pub const MAX_GLOBAL_BATCH: u64 = 1_000_000_000;

/// The options of a training job that reach every function as the user gave them. Both the
/// driver's `TrainOptions` and the [`JobSpec`](crate::JobSpec) hold one
/// (the spec flattened, so that `spec.json` keeps its field names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingConfig {
    /// Number of workers P.
    pub workers: u32,
    /// Samples a step reads over the whole fleet (`--global-batch`; `None`: the data set's
    /// minibatch size times [`DEFAULT_GLOBAL_BATCHES`](crate::batch_plan::DEFAULT_GLOBAL_BATCHES)),
    /// whatever the number of workers: see [`BatchPlan`](crate::BatchPlan).
    #[serde(default)]
    pub global_batch: Option<u64>,
    /// Learning-rate schedule over epochs.
    pub schedule: Schedule,
    /// The inverse-square-root schedule's time constant in epochs (`--decay-epochs`): in the
    /// options, `None` takes the model's default; in a [`JobSpec`](crate::JobSpec) it is set
    /// (`None` in a spec written before it: 1). Read it with [`JobSpec::rate`](crate::JobSpec::rate).
    #[serde(default)]
    pub decay_epochs: Option<f64>,
    /// Seed of the model's initialisation and of the minibatch order.
    pub seed: u64,
    /// When to stop.
    pub stop: StopCriteria,
    /// Channel URL (`None`: the object store the run is written to).
    pub channel: Option<SecretUrl>,
    /// Memory and lifetime cap of every function.
    pub limits: Limits,
    /// How the workers synchronise.
    #[serde(default)]
    pub sync: SyncMode,
    /// How the workers compress what they send.
    #[serde(default)]
    pub compression: Compression,
    /// The scale-in auto-tuner's settings; `None`: the fleet keeps its size.
    #[serde(default)]
    pub scale_in: Option<ScaleInConfig>,
    /// How the workers combine their work (GA-SGD, MA-SGD, ADMM).
    #[serde(default)]
    pub algorithm: Algorithm,
    /// How an exchange aggregates the workers' vectors (`None`: chosen by the fleet and the
    /// channel, [`Pattern::for_fleet`]); read it with [`TrainingConfig::exchange_pattern`].
    #[serde(default)]
    pub pattern: Option<Pattern>,
    /// Every worker and the supervisor checkpoint their state every this many steps (0:
    /// only at the lifetime hand-off); a dead worker or supervisor resumes from its latest.
    #[serde(default)]
    pub checkpoint_every: u64,
    /// The supervisor has a worker that sent nothing for this long replaced (`None`: 100 of
    /// the run's median steps, at least 30 s).
    #[serde(default)]
    pub worker_deadline_s: Option<f64>,
    /// Test aid: faults to inject (empty in real runs).
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// The VM type each parameter server of a `ps://` channel runs on (`--ps-instance`), which
    /// bills it per hour; `None`: the price table's `ps_usd_per_hour` (a c5.large).
    #[serde(default)]
    pub ps_instance: Option<mlless_cost::VmPrice>,
    /// How long a channel may be unreachable before a function gives up, in seconds.
    #[serde(default = "default_channel_grace_s")]
    pub channel_grace_s: f64,
    /// A cloud's latency that every function adds to each request of its channel (`--emulate`),
    /// and S3's to each of its reads of the data set: a run on this machine whose steps take
    /// what they would there.
    #[serde(default)]
    pub emulate: Option<mlless_io_types::CloudLatency>,
    /// `--refit`: once the run has stopped, the driver trains a second job on the training and
    /// validation sets together for the epochs early stopping chose, and keeps its model
    /// ([`RunRecord::refit`](crate::RunRecord::refit)).
    #[serde(default)]
    pub refit: bool,
    /// The second job of a `--refit` run: it trains on the training and validation sets
    /// together, and has no validation set to evaluate on.
    #[serde(default)]
    pub trains_on_validation: bool,
}

/// A cloud latency of `--emulate` as the cost model takes it ([`mlless_cost::cloud`]).
pub fn service_latency(latency: &mlless_io_types::CloudLatency) -> mlless_cost::ServiceLatency {
    mlless_cost::ServiceLatency {
        name: latency.name.clone(),
        request_ms: latency.request_ms,
        mb_per_s: latency.mb_per_s,
        reads_at_once: latency.reads_at_once,
    }
}

/// The longest duration any option in seconds takes: 10^9 s, about 31 years. Longer ones
/// (`--max-time 1e20`) cannot be added to a clock without overflowing it; nothing mlless runs
/// needs them.
pub const MAX_SECONDS: f64 = 1e9;

/// What an option in seconds may be besides at most [`MAX_SECONDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecondsRange {
    /// More than 0 (a lifetime, a limit, a deadline).
    Positive,
    /// 0 or more (a grace, a pause, an interval where 0 turns something off).
    NonNegative,
}

impl SecondsRange {
    /// The range in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Positive => "a positive number of seconds",
            Self::NonNegative => "a number of seconds ≥ 0",
        }
    }
}

/// Checks `value`, the seconds given to option `flag` (e.g. `--max-time`), against `range` and
/// [`MAX_SECONDS`]; the one check of every duration option of the CLI and of a job's spec.
pub fn check_seconds(
    flag: &'static str,
    value: f64,
    range: SecondsRange,
) -> Result<Duration, ConfigError> {
    let low = match range {
        SecondsRange::Positive => value > 0.0,
        SecondsRange::NonNegative => value >= 0.0,
    };
    if low && value <= MAX_SECONDS {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(ConfigError::Seconds { flag, value, range })
    }
}

/// Seconds as a message shows them: `1e20` rather than 21 digits.
fn shown_seconds(value: f64) -> String {
    if value.is_finite() && value.abs() >= 1e9 {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

/// `seconds` as a [`Duration`], brought into 0 ..= [`MAX_SECONDS`] (NaN: 0): for a duration
/// read from a stored spec, which must not panic the function that reads it.
pub fn saturating_seconds(seconds: f64) -> Duration {
    if seconds > 0.0 {
        Duration::from_secs_f64(seconds.min(MAX_SECONDS))
    } else {
        Duration::ZERO
    }
}

fn default_channel_grace_s() -> f64 {
    mlless_io_types::DEFAULT_CHANNEL_GRACE.as_secs_f64()
}

/// Why a [`TrainingConfig`] cannot run; each message names the flags of `mlless train` (and of
/// `mlless prepare`, whose limits have the same flags, and its `--map-tasks`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// ISP's threshold is negative or not a number.
    #[error("--significance must be a number ≥ 0")]
    Significance,
    /// An option in seconds out of its range or above [`MAX_SECONDS`] ([`check_seconds`]).
    #[error(
        "{flag} must be {} (at most 1e9, about 31 years), not {}",
        .range.describe(),
        shown_seconds(*.value)
    )]
    Seconds {
        /// The option, e.g. `--max-time`.
        flag: &'static str,
        /// The seconds given.
        value: f64,
        /// What the option takes.
        range: SecondsRange,
    },
    /// No workers.
    #[error("--workers must be at least 1")]
    NoWorkers,
    /// A global batch of no samples, or of more than [`MAX_GLOBAL_BATCH`].
    #[error("--global-batch must be from 1 to {MAX_GLOBAL_BATCH} samples, not {0}")]
    GlobalBatch(u64),
    /// No epochs.
    #[error("--max-epochs must be at least 1")]
    NoEpochs,
    /// The schedule's time constant is not a positive finite number.
    #[error("--decay-epochs must be a positive finite number, not {0}")]
    DecayEpochs(f64),
    /// The learning rate is not a positive finite number.
    #[error("--lr must be a positive finite number, not {0}")]
    LearningRate(f32),
    /// The L2 regularisation is negative or not finite.
    #[error("--l2 must be a finite number ≥ 0, not {0}")]
    L2(f32),
    /// The functions' memory cap is zero.
    #[error("--memory-mb must be at least 1 MB")]
    Memory,
    /// `prepare` with no map tasks.
    #[error("--map-tasks must be at least 1")]
    MapTasks,
    /// More workers than any run of mlless has ([`MAX_WORKERS`]).
    #[error("--workers {0} is more than mlless runs: at most {MAX_WORKERS} workers")]
    WorkersAboveMax(u32),
    /// More workers (with the supervisor) than the invoker runs at once.
    #[error(
        "--workers {workers} is more than the {platform} invoker can run at once: at most \
         {max_workers} workers (with the supervisor, {functions} functions at once)",
        functions = .max_workers + 1
    )]
    TooManyWorkers {
        /// The workers asked for.
        workers: u32,
        /// The most workers the invoker runs beside the supervisor.
        max_workers: u32,
        /// The invoker's platform.
        platform: String,
    },
    /// k-means asked for something its Lloyd steps do not do.
    #[error(
        "k-means trains by synchronous Lloyd steps: it takes --sync bsp, --algorithm ga, \
         no --compress and no --scale-in (any --pattern)"
    )]
    KMeansOptions,
    /// A leader or chunk owner under a synchronisation without barriers.
    #[error(
        "--pattern {} needs --sync bsp or isp, not {}: a leader or a chunk owner can only \
         reduce a step that every worker has reached",
        .pattern.name(),
        .sync.name()
    )]
    PatternNeedsBarrier {
        /// The pattern asked for.
        pattern: Pattern,
        /// The synchronisation asked for.
        sync: SyncMode,
    },
    /// The server pattern on a channel without parameter servers.
    #[error(
        "--pattern server has the parameter servers average the updates: it needs a ps:// \
         channel (mlless ps), not {channel}"
    )]
    PatternNeedsParameterServer {
        /// The channel asked for (redacted).
        channel: String,
    },
    /// MA or ADMM under a synchronisation other than BSP.
    #[error(
        "--algorithm {} averages models at barriers: it needs --sync bsp, not {}",
        .algorithm.name(),
        .sync.name()
    )]
    AlgorithmNeedsBsp {
        /// The algorithm asked for.
        algorithm: Algorithm,
        /// The synchronisation asked for.
        sync: SyncMode,
    },
    /// Compression with MA or ADMM.
    #[error(
        "--compress works on the per-step updates of --algorithm ga, not on {}'s model averages",
        .0.name()
    )]
    CompressionNeedsGa(Algorithm),
    /// Scale-in with MA or ADMM.
    #[error("--scale-in auto works with --algorithm ga, not {}", .0.name())]
    ScaleInNeedsGa(Algorithm),
    /// ADMM's parameters out of range.
    #[error(
        "admm needs rho > 0 and at least one local epoch, got rho {rho} and {local_epochs} \
         local epochs"
    )]
    Admm {
        /// The penalty asked for.
        rho: f32,
        /// The local epochs asked for.
        local_epochs: u32,
    },
    /// Scale-in under a synchronisation whose replicas differ.
    #[error(
        "--scale-in auto needs --sync bsp or isp, not {}: under SSP and ASP the replicas \
         differ and removing a worker would drop its replica's progress",
        .0.name()
    )]
    ScaleInNeedsSynchronous(SyncMode),
    /// The tuner's own settings are out of range.
    #[error("scale-in: {0}")]
    Tuner(String),
    /// A minimum fleet larger than the fleet.
    #[error("--min-workers {min_workers} is more than --workers {workers}")]
    MinWorkers {
        /// The minimum asked for.
        min_workers: u32,
        /// The fleet asked for.
        workers: u32,
    },
}

/// Checks the limits of a function: a positive lifetime and at least 1 MB (`--timeout-s`,
/// `--memory-mb` of `train` and `prepare`).
pub fn validate_limits(limits: &Limits) -> Result<(), ConfigError> {
    check_seconds(
        "--timeout-s",
        limits.timeout.as_secs_f64(),
        SecondsRange::Positive,
    )?;
    if limits.memory_mb == 0 {
        return Err(ConfigError::Memory);
    }
    Ok(())
}

impl TrainingConfig {
    /// The pattern the job's exchanges use: the one given, or [`Pattern::for_fleet`]'s.
    pub fn exchange_pattern(&self) -> Pattern {
        self.pattern.unwrap_or_else(|| self.chosen_pattern().0)
    }

    /// Why the job uses its pattern, when `--pattern` did not name it (`None` when it did).
    pub fn pattern_reason(&self) -> Option<String> {
        self.pattern.is_none().then(|| self.chosen_pattern().1)
    }

    fn chosen_pattern(&self) -> (Pattern, String) {
        Pattern::for_fleet(
            self.workers,
            crate::billing::channel_kind(self.channel.as_deref()),
            self.sync,
        )
    }

    /// How long every function rides out an outage of the job's channel (`--channel-grace`),
    /// what it opens the channel with (`mlless_store::ChannelOptions::with_grace`).
    pub fn channel_grace(&self) -> Duration {
        saturating_seconds(self.channel_grace_s)
    }

    /// Checks the options on their own and against each other for a job training `model`
    /// (k-means takes fewer of them); the first problem found is the error.
    pub fn validate(&self, model: ModelChoice) -> Result<(), ConfigError> {
        if let SyncMode::Isp { significance, .. } = self.sync
            && !(significance >= 0.0 && significance.is_finite())
        {
            return Err(ConfigError::Significance);
        }
        validate_limits(&self.limits)?;
        check_seconds(
            "--channel-grace",
            self.channel_grace_s,
            SecondsRange::NonNegative,
        )?;
        if let Some(d) = self.worker_deadline_s {
            check_seconds("--worker-deadline", d, SecondsRange::Positive)?;
        }
        if self.workers == 0 {
            return Err(ConfigError::NoWorkers);
        }
        if self.workers > MAX_WORKERS {
            return Err(ConfigError::WorkersAboveMax(self.workers));
        }
        if let Some(g) = self.global_batch
            && !(1..=MAX_GLOBAL_BATCH).contains(&g)
        {
            return Err(ConfigError::GlobalBatch(g));
        }
        if self.stop.max_epochs == 0 {
            return Err(ConfigError::NoEpochs);
        }
        if let Some(t) = self.decay_epochs
            && !(t > 0.0 && t.is_finite())
        {
            return Err(ConfigError::DecayEpochs(t));
        }
        if let Some(t) = self.stop.max_time_s {
            check_seconds("--max-time", t, SecondsRange::Positive)?;
        }
        self.check_combination(model)?;
        if let Some(tuner) = &self.scale_in {
            if !self.sync.is_synchronous() {
                return Err(ConfigError::ScaleInNeedsSynchronous(self.sync));
            }
            tuner
                .validate()
                .map_err(|e| ConfigError::Tuner(e.to_string()))?;
            if tuner.min_workers > self.workers {
                return Err(ConfigError::MinWorkers {
                    min_workers: tuner.min_workers,
                    workers: self.workers,
                });
            }
        }
        Ok(())
    }

    /// Checks the fleet against what the invoker of `platform` runs at once
    /// (`max_concurrent` functions, `None`: no known bound): the workers and the supervisor
    /// run together.
    pub fn validate_concurrency(
        &self,
        platform: &str,
        max_concurrent: Option<u32>,
    ) -> Result<(), ConfigError> {
        if let Some(max) = max_concurrent
            && u64::from(self.workers) + 1 > u64::from(max)
        {
            return Err(ConfigError::TooManyWorkers {
                workers: self.workers,
                max_workers: max.saturating_sub(1),
                platform: platform.to_owned(),
            });
        }
        Ok(())
    }

    /// Refuses the combinations of algorithm, pattern, synchronisation and compression that
    /// make no sense.
    fn check_combination(&self, model: ModelChoice) -> Result<(), ConfigError> {
        if model.steps_by_lloyd()
            && (!self.sync.applies_whole_updates_in_step()
                || self.algorithm != Algorithm::Ga
                || self.compression != Compression::None
                || self.scale_in.is_some())
        {
            return Err(ConfigError::KMeansOptions);
        }
        if let Some(pattern) = self.pattern
            && pattern != Pattern::Broadcast
            && !self.sync.is_synchronous()
        {
            return Err(ConfigError::PatternNeedsBarrier {
                pattern,
                sync: self.sync,
            });
        }
        if let Some(pattern) = self.pattern
            && !pattern.runs_on(crate::billing::channel_kind(self.channel.as_deref()))
        {
            return Err(ConfigError::PatternNeedsParameterServer {
                channel: self.channel.as_deref().map_or_else(
                    || "the run's store".to_string(),
                    mlless_io_types::redact_url,
                ),
            });
        }
        let algorithm = self.algorithm;
        if algorithm == Algorithm::Ga {
            return Ok(());
        }
        if !self.sync.applies_whole_updates_in_step() {
            return Err(ConfigError::AlgorithmNeedsBsp {
                algorithm,
                sync: self.sync,
            });
        }
        if self.compression != Compression::None {
            return Err(ConfigError::CompressionNeedsGa(algorithm));
        }
        if self.scale_in.is_some() {
            return Err(ConfigError::ScaleInNeedsGa(algorithm));
        }
        if let Algorithm::Admm { rho, local_epochs } = algorithm
            && !(rho.is_finite() && rho > 0.0 && local_epochs > 0)
        {
            return Err(ConfigError::Admm { rho, local_epochs });
        }
        Ok(())
    }
}

/// When training stops; whichever criterion is met first.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StopCriteria {
    /// Stop once the step loss stays at or below this for `target_patience` consecutive steps.
    pub target_loss: Option<f64>,
    /// Number of consecutive steps the target must hold.
    pub target_patience: u32,
    /// Stop after this many passes over the training set.
    pub max_epochs: u32,
    /// Stop after this much wall time, in seconds.
    pub max_time_s: Option<f64>,
    /// k-means: stop once the inertia changes by less than this fraction between two Lloyd
    /// iterations.
    #[serde(default)]
    pub tolerance: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_range_checked_and_never_overflow() {
        use SecondsRange::*;
        assert_eq!(
            check_seconds("--x", 2.5, Positive),
            Ok(Duration::from_millis(2500))
        );
        assert_eq!(check_seconds("--x", 0.0, NonNegative), Ok(Duration::ZERO));
        for (value, range) in [
            (0.0, Positive),
            (-1.0, NonNegative),
            (f64::NAN, NonNegative),
            (f64::INFINITY, Positive),
            (1e20, Positive),
            (1e300, NonNegative),
        ] {
            let err = check_seconds("--max-time", value, range).unwrap_err();
            assert!(err.to_string().starts_with("--max-time must be"), "{err}");
        }
        assert_eq!(
            check_seconds("--max-time", 1e20, Positive)
                .unwrap_err()
                .to_string(),
            "--max-time must be a positive number of seconds (at most 1e9, about 31 years), \
             not 1e20"
        );
        // A stored spec's durations, however absurd, become durations a clock can add.
        for value in [f64::NAN, -1.0, 1e300, f64::INFINITY] {
            assert!(saturating_seconds(value) <= Duration::from_secs(1_000_000_000));
        }
        let mut config = TrainingConfig {
            channel_grace_s: 1e300,
            ..sample()
        };
        assert!(config.validate(ModelChoice::LogisticRegression).is_err());
        let _ = config.channel_grace();
        config.channel_grace_s = 30.0;
        config.worker_deadline_s = Some(1e300);
        assert!(config.validate(ModelChoice::LogisticRegression).is_err());
        config.worker_deadline_s = None;
        config.stop.max_time_s = Some(1e20);
        assert!(config.validate(ModelChoice::LogisticRegression).is_err());
        config.stop.max_time_s = Some(60.0);
        assert_eq!(config.validate(ModelChoice::LogisticRegression), Ok(()));
    }

    #[test]
    fn secret_urls_redact_in_debug_and_display_and_serialise_as_given() {
        let url = SecretUrl::from("redis://:pw@h:6379");
        assert_eq!(format!("{url}"), "redis://:***@h:6379");
        assert_eq!(format!("{url:?}"), "\"redis://:***@h:6379\"");
        assert_eq!(url.as_str(), "redis://:pw@h:6379");
        assert_eq!(
            serde_json::to_string(&url).unwrap(),
            "\"redis://:pw@h:6379\""
        );
        assert_eq!(url.redacted().as_str(), "redis://:***@h:6379");
    }

    fn sample() -> TrainingConfig {
        TrainingConfig {
            workers: 8,
            global_batch: None,
            schedule: Schedule::Constant,
            decay_epochs: None,
            seed: 1,
            stop: StopCriteria {
                target_loss: None,
                target_patience: 10,
                max_epochs: 1,
                max_time_s: None,
                tolerance: None,
            },
            channel: None,
            limits: Limits::new(1024, Duration::from_secs(900)),
            sync: SyncMode::Bsp,
            compression: Compression::None,
            scale_in: None,
            algorithm: Algorithm::Ga,
            pattern: Some(Pattern::Broadcast),
            checkpoint_every: 0,
            worker_deadline_s: None,
            faults: Vec::new(),
            ps_instance: None,
            channel_grace_s: 30.0,
            emulate: None,
            refit: false,
            trains_on_validation: false,
        }
    }

    #[test]
    fn the_fleet_and_its_global_batch_are_checked() {
        let config = sample();
        assert_eq!(config.validate(ModelChoice::LogisticRegression), Ok(()));
        // 8 workers and the supervisor: 9 functions.
        assert_eq!(config.validate_concurrency("local", Some(9)), Ok(()));
        assert_eq!(config.validate_concurrency("lambda", None), Ok(()));
        assert_eq!(
            config.validate_concurrency("local", Some(8)),
            Err(ConfigError::TooManyWorkers {
                workers: 8,
                max_workers: 7,
                platform: "local".into()
            })
        );
        for (global_batch, valid) in [(0, false), (1, true), (MAX_GLOBAL_BATCH + 1, false)] {
            let config = TrainingConfig {
                global_batch: Some(global_batch),
                ..config.clone()
            };
            assert_eq!(
                config.validate(ModelChoice::LogisticRegression).is_ok(),
                valid,
                "--global-batch {global_batch}"
            );
        }
        let huge = TrainingConfig {
            workers: u32::MAX,
            ..config.clone()
        };
        assert_eq!(
            huge.validate(ModelChoice::LogisticRegression),
            Err(ConfigError::WorkersAboveMax(u32::MAX))
        );
        let no_memory = TrainingConfig {
            limits: Limits::new(0, Duration::from_secs(900)),
            ..config
        };
        assert_eq!(
            no_memory.validate(ModelChoice::LogisticRegression),
            Err(ConfigError::Memory)
        );
    }
}
