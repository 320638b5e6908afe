//! `mlless prepare`: input file → minibatch objects + manifest.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use clap::{Args, ValueEnum};
use mlless_data::{CsvHeader, CsvOptions, InputFormat, LabelColumn};
use mlless_faas::Limits;
use mlless_runtime::{Control, PrepareOptions, PrepareStage, RuntimeError, TestSet, ValidationSet};

/// Normalisations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Normalize {
    /// Scale each feature to [0, 1] with its training minimum and maximum (map-reduce).
    Minmax,
    /// Keep the features as they are.
    None,
}

/// The fraction of the training samples held out for validation when neither
/// `--validation-fraction` nor `--validation-input` is given.
pub const DEFAULT_VALIDATION_FRACTION: f64 = 0.1;

/// Parses `--header` (see [`CsvHeader`]).
fn parse_header(s: &str) -> Result<CsvHeader, String> {
    s.parse()
}

/// Parses `--label-column` (see [`LabelColumn`]).
fn parse_label_column(s: &str) -> Result<LabelColumn, String> {
    s.parse()
}

/// Options of `mlless prepare`.
#[derive(Debug, Args)]
pub struct PrepareArgs {
    /// Format of the input.
    #[arg(long, value_enum)]
    pub format: InputFormat,
    /// The input: a file, `-` (standard input), or an object on a store (s3://bucket/key,
    /// file:///…), read as a stream; or the part files of a directory or of a prefix on a store
    /// (s3://bucket/day0/), read in name order as one input (names starting with _ or . are
    /// skipped). Gzip and zstd are decompressed (told by their first bytes), part by part.
    #[arg(long)]
    pub input: PathBuf,
    /// Where to write the data set: a path, file:///…, memory://NAME or s3://bucket/prefix.
    #[arg(long)]
    pub out: String,
    /// Samples per minibatch.
    #[arg(long, default_value_t = 1000)]
    pub batch_size: u32,
    /// Fraction of the (shuffled) input set aside as the test set.
    #[arg(long, conflicts_with = "test_input")]
    pub test_fraction: Option<f64>,
    /// A separate test file in the same format, read like --input (instead of
    /// --test-fraction).
    #[arg(long)]
    pub test_input: Option<PathBuf>,
    /// Fraction of the training samples (after the test set is set aside) held out as the
    /// validation set, on which `train` evaluates the model as it trains, stops early and
    /// keeps the best model (0: none) [default: 0.1].
    #[arg(long, conflicts_with = "validation_input")]
    pub validation_fraction: Option<f64>,
    /// A separate validation file in the same format, read like --input (instead of
    /// --validation-fraction).
    #[arg(long)]
    pub validation_input: Option<PathBuf>,
    /// Seed of the shuffle.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Normalise the features [default: minmax for criteo, whose counts (`ln(1 + count)` up to
    /// about 15 in most rows) make sparse LR's default learning rate unstable; none for the
    /// other formats].
    #[arg(long, value_enum)]
    pub normalize: Option<Normalize>,
    /// Size of the feature space (required for criteo: categorical values are hashed into it).
    #[arg(long)]
    pub features: Option<u32>,
    /// CSV: the character between fields (`\t` or `tab` for a tab) [default: ,].
    #[arg(long, value_parser = mlless_data::parse_delimiter)]
    pub delimiter: Option<u8>,
    /// CSV: whether the first row is a header: true, false, or auto (it is if some field of
    /// it is not a number) [default: auto].
    #[arg(long, value_parser = parse_header)]
    pub header: Option<CsvHeader>,
    /// CSV: the label's column, by its index (from 0) or its name in the header; the features
    /// are the other columns, in order [default: 0, the first].
    #[arg(long, value_parser = parse_label_column)]
    pub label_column: Option<LabelColumn>,
    /// Where the normalisation's map tasks run: `local` processes, or `lambda:FUNCTION` (then
    /// --out must be on S3).
    #[arg(long, default_value = "local")]
    pub invoker: crate::InvokerChoice,
    /// Number of map tasks of the normalisation, and of each round of --distributed.
    #[arg(long, default_value_t = 4)]
    pub map_tasks: u32,
    /// Parse and shuffle the input in --map-tasks functions (--invoker) that read byte ranges of
    /// it from its store, rather than in this process: a large input on S3 is never pulled
    /// through this machine. Reads uncompressed libsvm and criteo input, split by fractions;
    /// the data set is the one the local path writes.
    #[arg(long)]
    pub distributed: bool,
    /// Memory cap of each map task, MB; also the bound on this command's own memory while it
    /// shuffles: a larger input is shuffled through temporary files (in --temp-dir).
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: u32,
    /// Where the shuffle writes its temporary files when the input does not fit in
    /// --memory-mb (about the size of the input, uncompressed, as binary rows) [default: the
    /// system's temporary directory, $TMPDIR]. Put it on a disk, not a tmpfs.
    #[arg(long)]
    pub temp_dir: Option<PathBuf>,
    /// Lifetime cap of each map task, seconds.
    #[arg(long, default_value_t = 900.0, value_parser = crate::seconds("--timeout-s", mlless_job::config::SecondsRange::Positive))]
    pub timeout_s: f64,
}

impl PrepareArgs {
    /// The runtime's options for these arguments.
    pub fn options(&self) -> PrepareOptions {
        PrepareOptions {
            format: self.format,
            input: self.input.clone(),
            out_url: self.out.clone(),
            batch_size: self.batch_size,
            test: match &self.test_input {
                Some(path) => TestSet::Input(path.clone()),
                None => TestSet::Fraction(self.test_fraction.unwrap_or(0.1)),
            },
            validation: match (&self.validation_input, self.validation_fraction) {
                (Some(path), _) => Some(ValidationSet::Input(path.clone())),
                (None, Some(0.0)) => None,
                (None, f) => Some(ValidationSet::Fraction(
                    f.unwrap_or(DEFAULT_VALIDATION_FRACTION),
                )),
            },
            seed: self.seed,
            normalize: match self.normalize {
                Some(Normalize::Minmax) => true,
                Some(Normalize::None) => false,
                None => self.format == InputFormat::Criteo,
            },
            features: self.features,
            csv: CsvOptions {
                delimiter: self.delimiter.unwrap_or(b','),
                header: self.header.unwrap_or_default(),
                label_column: self.label_column.clone().unwrap_or_default(),
            },
            map_tasks: self.map_tasks,
            distributed: self.distributed,
            limits: Limits {
                memory_mb: self.memory_mb,
                // Zero (which validation refuses) for a negative, infinite or NaN number.
                timeout: Duration::try_from_secs_f64(self.timeout_s).unwrap_or(Duration::ZERO),
            },
            temp_dir: self.temp_dir.clone(),
        }
    }
}

/// How often a long stage of the preparation says how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Writes the line of a stage of the preparation to standard error (`prepare: …`, or a JSON
/// line with `--log-format json`).
fn show(stage: &PrepareStage) {
    let message = stage.to_string();
    let line = match crate::progress::log_format() {
        crate::progress::LogFormat::Text => format!("prepare: {message}"),
        crate::progress::LogFormat::Json => crate::progress::json_message("prepare", &message),
    };
    eprintln!("{line}");
}

/// Runs `mlless prepare`; the first Ctrl-C (or SIGTERM) stops it at its next safe point (the
/// map tasks after their minibatch) and removes what it wrote, the second kills the map tasks
/// at once; either ends in [`crate::train::Cancelled`].
pub fn run(args: PrepareArgs) -> anyhow::Result<()> {
    let options = args.options();
    if let crate::InvokerChoice::Lambda(function) = &args.invoker
        && !crate::reachable_from_functions(&args.out)
    {
        anyhow::bail!(
            "--out {} is on this machine, which Lambda function {function} cannot write: \
             use an s3:// location",
            mlless_store::redact_url(&args.out)
        );
    }
    if let crate::InvokerChoice::Lambda(function) = &args.invoker
        && args.distributed
        && !args
            .input
            .to_str()
            .is_some_and(crate::reachable_from_functions)
    {
        anyhow::bail!(
            "--input {} is on this machine, which Lambda function {function} cannot read: \
             upload it to S3 and give its s3:// location",
            args.input.display()
        );
    }
    let invoker = args.invoker.invoker()?;
    let interrupts = Arc::new(AtomicU32::new(0));
    let runtime = crate::runtime()?;
    let first = format!(
        "\ncancelling: the map tasks stop after their current minibatch and what was written is \
         removed (up to {} s; Ctrl-C again to kill them now)",
        mlless_runtime::CANCEL_GRACE.as_secs()
    );
    runtime.spawn(crate::train::count_interrupts_saying(
        interrupts.clone(),
        first,
    ));
    // A line for each new stage, and one every few seconds while a long one goes on.
    let mut shown: Option<(PrepareStage, std::time::Instant)> = None;
    let mut observe = |stage: &PrepareStage| {
        let due = match &shown {
            None => true,
            Some((last, at)) => {
                !last.same_stage(stage) || (at.elapsed() >= PROGRESS_EVERY && last != stage)
            }
        };
        if due {
            show(stage);
            shown = Some((*stage, std::time::Instant::now()));
        }
        match interrupts.load(Ordering::SeqCst) {
            0 => Control::Continue,
            1 => Control::Cancel,
            _ => Control::Kill,
        }
    };
    let result = runtime.block_on(mlless_runtime::prepare_with(
        &options,
        invoker,
        &mut observe,
    ));
    // The parser of a preparation cancelled while it read runs on: not waited for.
    runtime.shutdown_background();
    let manifest = match result {
        Err(RuntimeError::PrepareCancelled { message }) => {
            return Err(crate::train::Cancelled { message }.into());
        }
        result => result?,
    };
    println!(
        "prepared {}: {} training samples in {} minibatches, {} test samples in {} minibatches",
        args.out,
        manifest.train.samples,
        manifest.train.batches.len(),
        manifest.test.samples,
        manifest.test.batches.len()
    );
    Ok(())
}
