//! [`Refusal`]: options refused before anything runs.

use mlless_data::InputFormat;

/// An option, or a combination of options, that is refused before anything runs: out of its
/// range, not meant for the input or the invoker given, or refused by the part of mlless it
/// configures (the model, early stopping, scale-in, the search).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A count that must be at least 1 is 0.
    #[error("{option} must be at least 1")]
    AtLeastOne {
        /// The option or options, as the message names them (`--batch-size`).
        option: &'static str,
    },
    /// A number is outside its range.
    #[error("{option} must be {range}, not {value}")]
    OutOfRange {
        /// The option (`--test-fraction`).
        option: &'static str,
        /// What it must be (`between 0 and 1 (exclusive)`).
        range: &'static str,
        /// The value given.
        value: f64,
    },
    /// `mlless bench channel --params` outside `1..=max`.
    #[error("--params must be in 1..={max}, got {params}")]
    BenchParams {
        /// The parameters asked for.
        params: usize,
        /// The most a benchmark's update may have.
        max: u32,
    },
    /// The cloud benchmark was asked for no worker or no step.
    #[error("the cloud benchmark needs at least one worker and one step")]
    CloudBenchEmpty,
    /// The cloud benchmark of the server pattern emulates a channel without parameter servers.
    #[error("the server pattern needs parameter servers: --emulate ps, not {emulate}")]
    EmulateWithoutServers {
        /// The channel emulated.
        emulate: String,
    },
    /// `--job-id` is not a valid job id.
    #[error("--job-id {given:?}: {reason}")]
    JobId {
        /// The id given.
        given: String,
        /// Why it is refused.
        reason: String,
    },
    /// The model's hyperparameters are refused by the model.
    #[error(transparent)]
    ModelSpec(mlless_core::ModelError),
    /// `--target-metric` names a metric the model does not report.
    #[error("--target-metric {target}: this model reports {} on the validation set", .metrics.join(", "))]
    TargetMetric {
        /// The target given.
        target: String,
        /// The metrics the model reports.
        metrics: Vec<String>,
    },
    /// Early stopping cannot watch the model's primary metric.
    #[error(transparent)]
    EarlyStopping(mlless_core::validation::TargetParseError),
    /// A setting of scale-in is out of range.
    #[error("scale-in: {0}")]
    ScaleIn(mlless_core::ScaleInError),
    /// The scatter-reduce pattern numbers its messages in a `u32`: too many workers for it.
    #[error("scatter-reduce message ids overflow with {workers} workers")]
    ScatterReduceWorkers {
        /// The job's workers.
        workers: u64,
    },
    /// A search without trials.
    #[error("the search has no trials")]
    NoTrials,
    /// The search's budget is not a positive number of dollars.
    #[error(transparent)]
    Budget(mlless_tune::BudgetError),
    /// The search's scheduler settings are refused.
    #[error(transparent)]
    Scheduler(mlless_tune::AshaError),
    /// A trial's options are refused as `train` refuses them.
    #[error("trial {params}: {source}")]
    Trial {
        /// The trial's parameters, as the search shows them.
        params: String,
        /// Why its options are refused.
        #[source]
        source: mlless_job::config::ConfigError,
    },
    /// A trial's options could not be made from its parameters. Free text: it is the message
    /// of the command-line parser that built them, which reaches the search as text.
    #[error("{0}")]
    TrialOptions(String),
    /// Rungs in seconds, and a trial without a most it trains.
    #[error("rungs in seconds need the most a trial trains (--trial-time)")]
    RungsInSeconds,
    /// The trials that run at once need more functions than the invoker runs at once.
    #[error(
        "--concurrency {concurrency}: {trials} trials of {workers} workers and a supervisor are \
         {functions} functions at once, more than the {platform} invoker can run ({max}): lower \
         --concurrency or --workers-per-trial"
    )]
    TooManyFunctions {
        /// `--concurrency`.
        concurrency: u32,
        /// The trials that would run at once.
        trials: u64,
        /// The most workers of a trial.
        workers: u32,
        /// The functions they are.
        functions: u64,
        /// The invoker's platform.
        platform: String,
        /// The most functions it runs at once.
        max: u32,
    },
    /// CSV options given with another input format.
    #[error(
        "--delimiter, --header and --label-column are options of --format csv, not --format \
         {format}"
    )]
    CsvOptions {
        /// The format given.
        format: InputFormat,
    },
    /// Standard input named as more than one input.
    #[error("standard input (-) can be only one of --input, --test-input and --validation-input")]
    StdinTwice,
    /// `--format movielens` given a directory of part files.
    #[error("--format movielens reads one file: {input} holds {parts} part files")]
    MovielensParts {
        /// The input given.
        input: String,
        /// The part files it holds.
        parts: usize,
    },
    /// `--normalize minmax` of ratings.
    #[error("--normalize minmax applies to feature data, not to ratings")]
    NormalizeRatings,
    /// `--distributed` of standard input.
    #[error(
        "--distributed reads its input from a store: standard input (-) is read by the local \
         path only"
    )]
    DistributedStdin,
    /// `--distributed` of a format it does not cut into byte ranges.
    #[error(
        "--distributed reads libsvm and criteo input; --format {format} is read by the local \
         path (a CSV record may span lines, ratings are read whole)"
    )]
    DistributedFormat {
        /// The format given.
        format: InputFormat,
    },
    /// `--distributed` with a test or validation input of its own.
    #[error(
        "--distributed splits the test and validation sets off its input: use --test-fraction \
         and --validation-fraction, not --test-input or --validation-input"
    )]
    DistributedSplitInputs,
    /// `--distributed` of a compressed input.
    #[error(
        "--distributed reads byte ranges of an uncompressed input; {location} is compressed: \
         prepare it without --distributed, or decompress it first"
    )]
    DistributedCompressed {
        /// The compressed object.
        location: String,
    },
}
