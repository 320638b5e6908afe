//! `mlless prepare`: turns an input file into a data set of minibatch objects and a manifest.
//!
//! The input is parsed and shuffled where it is (on the user's machine), a test set is split off
//! or read from its own file, and minibatches of `batch_size` samples are written as framed
//! objects. Min-max normalisation runs as map-reduce over function invocations (DESIGN §9): map
//! tasks compute the feature ranges of their share of the minibatches, the driver merges them,
//! and a second round of map tasks scales and writes the minibatches.
//!
//! The manifest is written last, and the old one is deleted first: a data set whose preparation
//! did not finish has no manifest, and no job will use it.
//!
//! With `--distributed` ([`PrepareOptions::distributed`]), the input is parsed and shuffled by
//! function invocations instead, reading it from its object store (see [`distributed`]); the
//! data set is the same.
//!
//! [`prepare_with`] asks its caller, every [`POLL`], whether to go on ([`Control`]). A cancel
//! (the CLI's first Ctrl-C) stops at the next safe point: while the input is parsed, before
//! anything is written; while minibatches are written, after the ones being written; while map
//! tasks run, through the stop object [`STOP_KEY`], which each task looks for before each
//! minibatch, so that it ends after the one it is at without writing its result. What was
//! written is then removed (the staged and the final minibatches, the id map and the counts),
//! and the preparation ends in [`RuntimeError::PrepareCancelled`]. `Control::Kill` (a second
//! Ctrl-C, or [`CANCEL_GRACE`] after the cancel) kills the map tasks at once.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::{StreamExt, TryStreamExt};
use mlless_core::{Batch, RatingCounts};
use mlless_data::external_shuffle::{ExternalShuffle, Shuffled, part_position};
use mlless_data::{
    BatchInfo, COUNTS_KEY, CountsInfo, DatasetKind, FeatureRange, IDS_KEY, IdMap, IdsInfo,
    InputFormat, InputLayout, InputSchema, LabelMap, LabelRange, MANIFEST_KEY, Manifest,
    ParseOptions, Parsed, RowSink, SourceInfo, SparseBatch, SparseSchema, SplitInfo, batch_key,
};
use mlless_faas::{FunctionRequest, InvocationReport, Invoker, Limits};
use mlless_job::record::{PREPARE_RECORD_KEY, PrepareRecord};
use mlless_store::Store;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tracing::{info, warn};

mod distributed;
mod input;

pub use distributed::{ShuffleReduceTask, SplitMapTask, run_shuffle_reduce, run_split_map};

use crate::driver::{CANCEL_GRACE, Control};
use crate::error::{Result, RuntimeError};
use crate::function::Payload;
use crate::messages::Message;
use input::{InputParts, InputReader};
use mlless_job::config::{ConfigError, validate_limits};

/// Objects written at once while uploading minibatches.
const UPLOAD_CONCURRENCY: usize = 16;

/// How often [`prepare_with`] asks its caller whether to go on.
pub const POLL: Duration = Duration::from_millis(50);

/// The object (in the data set's location) whose presence asks the map tasks to stop after
/// the minibatch they are at.
pub const STOP_KEY: &str = "staging/stop";

/// A round of function tasks: of the min-max normalisation, or of a distributed preparation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapRound {
    /// Parsing byte ranges of the input and dealing their rows into buckets ([`SplitMapTask`]).
    Split,
    /// Shuffling buckets into minibatches ([`ShuffleReduceTask`]).
    Shuffle,
    /// The feature ranges of the staged training minibatches ([`RangeMapTask`]).
    Ranges,
    /// Scaling the staged minibatches into the final ones ([`ScaleMapTask`]).
    Scale,
}

impl MapRound {
    /// The round's name, also the prefix of its tasks' names: `split-map`, `shuffle-reduce`,
    /// `range-map`, `scale-map`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Split => "split-map",
            Self::Shuffle => "shuffle-reduce",
            Self::Ranges => "range-map",
            Self::Scale => "scale-map",
        }
    }
}

/// Where a preparation is, as [`prepare_with`] shows it to its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepareStage {
    /// Parsing and shuffling the input: nothing is written yet.
    Reading {
        /// Rows (or ratings) read so far (counted a chunk at a time; ratings only at the end).
        rows: u64,
    },
    /// Writing minibatches (staged ones for the normalisation, else the final ones).
    Writing {
        /// How many.
        minibatches: usize,
        /// Whether they are staged for the normalisation's map tasks.
        staged: bool,
        /// How many are written so far.
        written: usize,
    },
    /// A round of map tasks is running (they have all been invoked).
    Mapping {
        /// Which round.
        round: MapRound,
        /// How many tasks.
        tasks: usize,
        /// The minibatches they read.
        minibatches: usize,
    },
    /// Writing the manifest.
    Finishing,
}

impl PrepareStage {
    /// Whether `other` is the same stage, whatever its progress.
    pub fn same_stage(&self, other: &PrepareStage) -> bool {
        match (self, other) {
            (Self::Reading { .. }, Self::Reading { .. }) => true,
            (
                Self::Writing {
                    minibatches: a,
                    staged: x,
                    ..
                },
                Self::Writing {
                    minibatches: b,
                    staged: y,
                    ..
                },
            ) => a == b && x == y,
            _ => self == other,
        }
    }

    /// This stage with the progress `progress` counted.
    fn with_progress(self, progress: &Progress) -> Self {
        match self {
            Self::Reading { .. } => Self::Reading {
                rows: progress.rows.load(Ordering::Relaxed),
            },
            Self::Writing {
                minibatches,
                staged,
                ..
            } => Self::Writing {
                minibatches,
                staged,
                written: progress.written.load(Ordering::Relaxed) as usize,
            },
            other => other,
        }
    }
}

/// What the preparation counts as it goes, for [`PrepareStage`]'s progress.
#[derive(Debug, Default)]
struct Progress {
    /// Rows read.
    rows: AtomicU64,
    /// Minibatches written.
    written: AtomicU64,
}

impl fmt::Display for PrepareStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Reading { rows: 0 } => f.write_str("reading and shuffling the input"),
            Self::Reading { rows } => {
                write!(f, "reading and shuffling the input: {rows} rows so far")
            }
            Self::Writing {
                minibatches,
                staged,
                written,
            } => {
                let what = if staged { "staged " } else { "" };
                write!(f, "writing {minibatches} {what}minibatches")?;
                if written > 0 {
                    write!(f, ": {written} written")?;
                }
                Ok(())
            }
            Self::Mapping {
                round: MapRound::Split,
                tasks,
                ..
            } => write!(
                f,
                "{tasks} split-map tasks parsing the input's byte ranges into buckets"
            ),
            Self::Mapping {
                round,
                tasks,
                minibatches,
            } => {
                let doing = match round {
                    MapRound::Split => "parsing",
                    MapRound::Shuffle => "shuffling buckets into",
                    MapRound::Ranges => "computing the feature ranges of",
                    MapRound::Scale => "scaling",
                };
                write!(
                    f,
                    "{tasks} {} tasks {doing} {minibatches} minibatches",
                    round.name()
                )
            }
            Self::Finishing => f.write_str("writing the manifest"),
        }
    }
}

/// What the caller asked last, in the order of their force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Interrupt {
    None,
    Cancel,
    Kill,
}

/// The preparation's side of the caller's requests, and where it shows its stage.
struct Requests<'a> {
    level: watch::Receiver<Interrupt>,
    stage: &'a watch::Sender<PrepareStage>,
    progress: Arc<Progress>,
}

impl Requests<'_> {
    /// Whether the caller asked to stop (cancel or kill).
    fn stopping(&self) -> bool {
        *self.level.borrow() != Interrupt::None
    }

    /// Shows `stage` to the caller.
    fn enter(&self, stage: PrepareStage) {
        self.stage.send_replace(stage);
    }

    /// Completes once the caller asks to stop (never if it no longer can).
    async fn stopped(&mut self) {
        self.next_request(false).await;
    }

    /// Completes once the caller asks for more than it did: a cancel (or a kill) when it has
    /// not yet `asked`, else a kill; never if it no longer can.
    async fn next_request(&mut self, asked: bool) {
        let want = if asked {
            Interrupt::Kill
        } else {
            Interrupt::Cancel
        };
        if self.level.wait_for(|l| *l >= want).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// How a cancelled preparation's message describes it.
fn describe_cancel(url: &str, stage: &PrepareStage, killed: bool) -> String {
    let rerun = "run the same `mlless prepare` again to write it";
    match stage {
        PrepareStage::Reading { .. } => {
            format!("cancelled while reading the input: nothing was written, {url} is as it was")
        }
        PrepareStage::Mapping { round, .. } => {
            let how = if killed {
                "were killed"
            } else {
                "stopped after their minibatch"
            };
            format!(
                "cancelled during the {} tasks, which {how}; what was written is removed and \
                 {url} holds no data set (its old manifest was removed first): {rerun}",
                round.name()
            )
        }
        PrepareStage::Writing { .. } | PrepareStage::Finishing => format!(
            "cancelled while {stage}; what was written is removed and {url} holds no data set \
             (its old manifest was removed first): {rerun}"
        ),
    }
}

/// Where the test set comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TestSet {
    /// Split this fraction of the input off, after shuffling.
    Fraction(f64),
    /// Read it from its own file, in the same format.
    Input(PathBuf),
}

/// Where the validation set comes from, if there is one.
#[derive(Debug, Clone, PartialEq)]
pub enum ValidationSet {
    /// Hold this fraction of the (shuffled) training samples out.
    Fraction(f64),
    /// Read it from its own file, in the same format.
    Input(PathBuf),
}

/// What `mlless prepare` does.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// Format of the input.
    pub format: InputFormat,
    /// The input file.
    pub input: PathBuf,
    /// Location of the data set to write.
    pub out_url: String,
    /// Samples per minibatch.
    pub batch_size: u32,
    /// Where the test set comes from.
    pub test: TestSet,
    /// Where the validation set comes from (`None`: no validation set).
    pub validation: Option<ValidationSet>,
    /// Seed of the shuffle.
    pub seed: u64,
    /// Whether to min-max normalise the features.
    pub normalize: bool,
    /// Feature-space size (required for Criteo's hashed features).
    pub features: Option<u32>,
    /// How CSV input is read: its delimiter, header and label column (the defaults for other
    /// formats).
    pub csv: mlless_data::CsvOptions,
    /// Number of map tasks of the normalisation (and of each round of a distributed
    /// preparation).
    pub map_tasks: u32,
    /// Parse and shuffle the input in function invocations, reading it from its store, rather
    /// than here (libsvm and criteo input, split by fractions).
    pub distributed: bool,
    /// Limits of each map task; the memory limit also bounds the memory of the shuffle.
    pub limits: Limits,
    /// Where the shuffle writes its temporary files when the input does not fit in memory
    /// (`None`: the system's temporary directory). A disk, not a tmpfs, for large inputs.
    pub temp_dir: Option<PathBuf>,
}

/// Map task: the feature ranges of some minibatches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeMapTask {
    /// The data set's location.
    pub data_url: String,
    /// Number of features.
    pub features: u32,
    /// Staged minibatches to read.
    pub keys: Vec<String>,
    /// Where to write the ranges.
    pub out_key: String,
    /// The object whose presence asks the task to stop before its next minibatch, without
    /// writing `out_key` ([`STOP_KEY`]; none in payloads from before it existed).
    #[serde(default)]
    pub stop_key: Option<String>,
}

/// Map task: scale some minibatches with the merged ranges and write them to their final keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleMapTask {
    /// The data set's location.
    pub data_url: String,
    /// Where the merged ranges are.
    pub range_key: String,
    /// `(staged key, final key)` pairs.
    pub items: Vec<(String, String)>,
    /// Where to write the [`BatchInfo`]s of the written minibatches (JSON).
    pub out_key: String,
    /// The object whose presence asks the task to stop before its next minibatch, without
    /// writing `out_key` ([`STOP_KEY`]; none in payloads from before it existed).
    #[serde(default)]
    pub stop_key: Option<String>,
}

/// A framed [`FeatureRange`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct RangeObject(FeatureRange);

impl Message for RangeObject {
    const MAGIC: [u8; 4] = *b"MLLN";
}

impl PrepareOptions {
    /// The input files, in the order they are parsed: the input, then the test and the
    /// validation inputs if they are files.
    fn input_files(&self) -> Vec<&Path> {
        let mut files = vec![self.input.as_path()];
        if let TestSet::Input(path) = &self.test {
            files.push(path);
        }
        if let Some(ValidationSet::Input(path)) = &self.validation {
            files.push(path);
        }
        files
    }

    /// Checks the options before anything is read or written, each error naming the option of
    /// `mlless prepare`: the minibatch size, the fractions, the map tasks and their limits
    /// (checked whether or not `--normalize` runs any, as `train` checks its own).
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(RuntimeError::InvalidJob(
                "--batch-size must be at least 1".into(),
            ));
        }
        if let TestSet::Fraction(f) = self.test
            && !(f > 0.0 && f < 1.0)
        {
            return Err(RuntimeError::InvalidJob(format!(
                "--test-fraction must be between 0 and 1 (exclusive), not {f}"
            )));
        }
        if let Some(ValidationSet::Fraction(f)) = self.validation
            && !(f > 0.0 && f < 1.0)
        {
            return Err(RuntimeError::InvalidJob(format!(
                "--validation-fraction must be between 0 and 1 (exclusive), not {f}"
            )));
        }
        if self.map_tasks == 0 {
            return Err(ConfigError::MapTasks.into());
        }
        if self.format != InputFormat::Csv && self.csv != mlless_data::CsvOptions::default() {
            return Err(RuntimeError::InvalidJob(format!(
                "--delimiter, --header and --label-column are options of --format csv, not \
                 --format {}",
                self.format
            )));
        }
        let stdin = Path::new(mlless_data::STDIN_PATH);
        if self.input_files().iter().filter(|p| **p == stdin).count() > 1 {
            return Err(RuntimeError::InvalidJob(
                "standard input (-) can be only one of --input, --test-input and \
                 --validation-input"
                    .into(),
            ));
        }
        validate_limits(&self.limits)?;
        Ok(())
    }
}

/// Prepares a data set; returns its manifest.
pub async fn prepare(options: &PrepareOptions, invoker: Arc<dyn Invoker>) -> Result<Manifest> {
    prepare_with(options, invoker, &mut |_| Control::Continue).await
}

/// Prepares a data set as [`prepare`] does, showing its stage to `observe` every [`POLL`],
/// which may cancel it ([`Control::Cancel`] or [`Control::Stop`]: stop at the next safe point
/// and remove what was written; [`Control::Kill`]: kill the map tasks now, and remove it too).
/// A cancel not done after [`CANCEL_GRACE`] becomes a kill.
///
/// # Errors
///
/// [`RuntimeError::PrepareCancelled`] when cancelled; else the failure of the input, the store
/// or a map task.
pub async fn prepare_with(
    options: &PrepareOptions,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&PrepareStage) -> Control,
) -> Result<Manifest> {
    let (level_tx, level) = watch::channel(Interrupt::None);
    let (stage_tx, stage) = watch::channel(PrepareStage::Reading { rows: 0 });
    let progress = Arc::new(Progress::default());
    let requests = Requests {
        level,
        stage: &stage_tx,
        progress: Arc::clone(&progress),
    };
    // The directories opening a new local location creates, which a failure must not leave
    // behind empty: from the first that does not exist yet.
    let created = mlless_store::local_path(&options.out_url).and_then(|path| first_missing(&path));
    let body = prepare_body(options, invoker, requests);
    tokio::pin!(body);
    let mut ticker = tokio::time::interval(POLL);
    let mut cancelled: Option<Instant> = None;
    loop {
        tokio::select! {
            result = &mut body => {
                // A failure once writing has begun leaves no half data set behind (the old
                // manifest is gone by then): what was written is removed, as on a cancel.
                let written = !matches!(*stage.borrow(), PrepareStage::Reading { .. });
                if written
                    && matches!(&result, Err(e) if !matches!(e, RuntimeError::PrepareCancelled { .. }))
                    && let Ok(store) = Store::open(&options.out_url)
                {
                    remove_written(&store).await;
                }
                if let (Err(_), Some(created)) = (&result, &created) {
                    remove_empty_dirs(created);
                }
                return result;
            }
            _ = ticker.tick() => {
                let now = stage.borrow().with_progress(&progress);
                let mut want = match observe(&now) {
                    Control::Continue => Interrupt::None,
                    Control::Cancel | Control::Stop(_) => Interrupt::Cancel,
                    Control::Kill => Interrupt::Kill,
                };
                if cancelled.is_some_and(|t| t.elapsed() >= CANCEL_GRACE) {
                    want = Interrupt::Kill;
                }
                if want != Interrupt::None && cancelled.is_none() {
                    info!(stage = %now, "cancelling the preparation");
                    cancelled = Some(Instant::now());
                }
                level_tx.send_if_modified(|level| {
                    let stronger = want > *level;
                    if stronger {
                        *level = want;
                    }
                    stronger
                });
            }
        }
    }
}

/// The first directory of `path` and its ancestors that does not exist (`path` itself, or an
/// ancestor that opening it would create); `None` if `path` exists.
fn first_missing(path: &Path) -> Option<PathBuf> {
    let mut missing = None;
    let mut at = Some(path);
    while let Some(dir) = at.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing = Some(dir.to_path_buf());
        at = dir.parent();
    }
    missing
}

/// Removes `dir` and the directories below it that are empty (after their own empty
/// directories went), bottom up; never a file. A failed preparation thus leaves no empty
/// directory where there was none.
fn remove_empty_dirs(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&entry.path());
            }
        }
    }
    // Fails, as it should, where something is left.
    let _ = std::fs::remove_dir(dir);
}

/// Removes what a cancelled preparation wrote (it has no manifest yet) and says what happened.
///
/// `staging/`, with the stop object, goes last: a Lambda map task that a kill abandoned (Lambda
/// cannot stop an invocation) sees the stop object at its next minibatch, long before the
/// final minibatches are deleted.
async fn cancelled(store: &Store, stage: PrepareStage, killed: bool) -> Result<Manifest> {
    remove_written(store).await;
    Err(RuntimeError::PrepareCancelled {
        message: describe_cancel(store.url(), &stage, killed),
    })
}

/// Removes what a preparation that did not finish wrote (it has no manifest): minibatches,
/// `staging/` last (see [`cancelled`]), the id map, the counts and the preparation's record. A
/// removal that fails is logged: the location has no manifest, so no job uses what is left.
async fn remove_written(store: &Store) {
    for prefix in ["train/", "test/", "validation/", "staging/"] {
        if let Err(e) = store.delete_prefix(prefix).await {
            warn!("could not remove {}/{prefix}: {e}", store.url());
        }
    }
    for key in [IDS_KEY, COUNTS_KEY, PREPARE_RECORD_KEY] {
        if let Err(e) = store.delete(key).await {
            warn!("could not remove {}/{key}: {e}", store.url());
        }
    }
}

/// The preparation itself: [`prepare`]'s steps, stopping where `requests` asks.
async fn prepare_body(
    options: &PrepareOptions,
    invoker: Arc<dyn Invoker>,
    mut requests: Requests<'_>,
) -> Result<Manifest> {
    let started = std::time::SystemTime::now();
    let clock = std::time::Instant::now();
    options.validate()?;
    let store = Store::open(&options.out_url)?;
    store.check_writable().await?;
    if options.distributed {
        clear(&store).await?;
        let mut invocations = Vec::new();
        let shuffled =
            distributed::shuffle(options, &store, &invoker, &mut requests, &mut invocations);
        let done = match shuffled.await? {
            Ok(done) => done,
            Err((stage, killed)) => return cancelled(&store, stage, killed).await,
        };
        let (infos, normalization) = match done.ranges {
            Some(ranges) => {
                let staged = [
                    ("train", done.infos[0].len()),
                    ("test", done.infos[1].len()),
                    ("validation", done.infos[2].len()),
                ];
                let normalized = normalize(
                    options,
                    &store,
                    invoker,
                    staged,
                    Ranges::Known(ranges),
                    &mut requests,
                    &mut invocations,
                );
                match normalized.await? {
                    Ok(normalized) => normalized,
                    Err((stage, killed)) => return cancelled(&store, stage, killed).await,
                }
            }
            None => (Vec::from(done.infos), None),
        };
        let written = Written {
            kind: done.kind,
            label_map: done.label_map,
            labels: done.labels,
            layout: done.layout,
            samples: done.samples,
            infos,
            normalization,
            ids: None,
            rating_counts: None,
            invocations,
        };
        return finish(options, &store, &requests, written, started, clock).await;
    }
    requests.enter(PrepareStage::Reading { rows: 0 });
    let stop = Arc::new(AtomicBool::new(false));
    let reading = read_input(options, Arc::clone(&stop), Arc::clone(&requests.progress));
    tokio::pin!(reading);
    let input = tokio::select! {
        input = &mut reading => input?,
        () = requests.stopped() => {
            // The parse of sparse rows ends at its next chunk, and its temporary files go
            // (ratings are read whole, in memory: the process leaves them behind).
            stop.store(true, Ordering::Relaxed);
            if options.format != InputFormat::Movielens {
                let _ = reading.await;
            }
            return Err(RuntimeError::PrepareCancelled {
                message: describe_cancel(store.url(), &PrepareStage::Reading { rows: 0 }, false),
            });
        }
    };
    let Input {
        kind,
        label_map,
        labels,
        layout,
        samples,
        batches,
    } = input;
    if options.normalize && !matches!(kind, DatasetKind::Sparse { .. }) {
        return Err(RuntimeError::InvalidJob(
            "--normalize minmax applies to feature data, not to ratings".into(),
        ));
    }
    clear(&store).await?;
    let ids = match &layout.ids {
        Some(ids) => Some(put_ids(&store, ids).await?),
        None => None,
    };
    let rating_counts = match (&kind, &batches) {
        (&DatasetKind::Ratings { users, items, .. }, Batches::Whole([train, ..])) => {
            Some(put_counts(&store, users, items, train).await?)
        }
        _ => None,
    };

    let batch_size = u64::from(options.batch_size);
    let counts = samples.map(|n| n.div_ceil(batch_size) as usize);
    let writing = PrepareStage::Writing {
        minibatches: counts.iter().sum(),
        staged: options.normalize,
        written: 0,
    };
    requests.enter(writing);
    if requests.stopping() {
        return cancelled(&store, writing, false).await;
    }
    let prefix = if options.normalize { "staging/" } else { "" };
    let written = match batches {
        Batches::Whole(splits) => {
            let items = splits.into_iter().enumerate().flat_map(|(split, batches)| {
                batches
                    .into_iter()
                    .enumerate()
                    .map(move |(index, batch)| Ok((split, index, batch)))
            });
            write_batches(&store, prefix, futures::stream::iter(items), &requests).await?
        }
        Batches::Streamed(rows) => {
            let (tx, mut rx) = tokio::sync::mpsc::channel(2 * UPLOAD_CONCURRENCY);
            let cutting = tokio::task::spawn_blocking(move || rows.cut(batch_size as usize, &tx));
            let items = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
            let written = write_batches(&store, prefix, items, &requests).await;
            // The cutter ends once the writer stopped reading (its sends fail).
            cutting.await.map_err(|e| {
                RuntimeError::InvalidJob(format!("cutting minibatches failed: {e}"))
            })?;
            written?
        }
    };
    let Some(written) = written else {
        return cancelled(&store, writing, false).await;
    };
    let mut invocations = Vec::new();
    let (infos, normalization) = if options.normalize {
        let DatasetKind::Sparse { features } = kind else {
            unreachable!("checked above")
        };
        let staged = [
            ("train", counts[0]),
            ("test", counts[1]),
            ("validation", counts[2]),
        ];
        let normalized = normalize(
            options,
            &store,
            invoker,
            staged,
            Ranges::Compute(features),
            &mut requests,
            &mut invocations,
        );
        match normalized.await? {
            Ok(normalized) => normalized,
            Err((stage, killed)) => return cancelled(&store, stage, killed).await,
        }
    } else {
        (Vec::from(written), None)
    };
    let written = Written {
        kind,
        label_map,
        labels,
        layout,
        samples,
        infos,
        normalization,
        ids,
        rating_counts,
        invocations,
    };
    finish(options, &store, &requests, written, started, clock).await
}

/// Removes an old data set's manifest (first: it must not describe the new minibatches while
/// they are being written), its record, id map and counts, and its minibatches.
async fn clear(store: &Store) -> Result<()> {
    warn_of_runs(store).await?;
    store.delete(MANIFEST_KEY).await?;
    store.delete(PREPARE_RECORD_KEY).await?;
    store.delete(IDS_KEY).await?;
    store.delete(COUNTS_KEY).await?;
    for prefix in ["train/", "test/", "validation/", "staging/"] {
        store.delete_prefix(prefix).await?;
    }
    Ok(())
}

/// Warns when the location being prepared has runs (`{out}/runs/`, where `train` puts them by
/// default): they keep their models and records, but are bound to the data set they started
/// on (the manifest's `dataset_id`), so none of them can be resumed on the new one. A warning,
/// not a refusal: preparing a location again (a fixed input, another split) is legitimate,
/// and the runs lose nothing that resuming them on other rows would not have spoilt.
async fn warn_of_runs(store: &Store) -> Result<()> {
    let runs = store
        .list("runs/")
        .await?
        .iter()
        .filter(|key| key.ends_with(&format!("/{}", mlless_job::SPEC_KEY)))
        .count();
    if runs > 0 {
        warn!(
            "{}/runs has {runs} run(s) of the data set being replaced: they keep their models \
             and records, but are bound to the data set they started on, so `mlless train \
             --resume` will refuse them on this one (prepare into another --out to keep \
             resuming them)",
            store.url()
        );
    }
    Ok(())
}

/// What the manifest says of a data set whose minibatches are written.
struct Written {
    kind: DatasetKind,
    label_map: Option<LabelMap>,
    labels: Option<LabelRange>,
    layout: InputLayout,
    /// Samples of each split, in the order of [`SPLITS`].
    samples: [u64; 3],
    /// Each split's minibatches, in the order of [`SPLITS`].
    infos: Vec<Vec<BatchInfo>>,
    normalization: Option<mlless_data::Normalization>,
    ids: Option<IdsInfo>,
    rating_counts: Option<CountsInfo>,
    invocations: Vec<InvocationReport>,
}

/// Writes the preparation's record and, last, the manifest.
async fn finish(
    options: &PrepareOptions,
    store: &Store,
    requests: &Requests<'_>,
    written: Written,
    started: std::time::SystemTime,
    clock: Instant,
) -> Result<Manifest> {
    let Written {
        kind,
        label_map,
        labels,
        layout,
        samples,
        infos,
        normalization,
        ids,
        rating_counts,
        invocations,
    } = written;
    let [train_samples, test_samples, validation_samples] = samples;
    if requests.stopping() {
        return cancelled(store, PrepareStage::Finishing, false).await;
    }
    requests.enter(PrepareStage::Finishing);
    let [train_infos, test_infos, validation_infos]: [Vec<BatchInfo>; 3] =
        infos.try_into().map_err(|_| {
            RuntimeError::InvalidJob("preparation returned the wrong number of splits".into())
        })?;

    let manifest = Manifest {
        format_version: mlless_data::MANIFEST_VERSION,
        // A new identity for every preparation, even of the same input and seed: a run is
        // bound to the minibatches it started on, not to their recipe.
        dataset_id: Some(uuid::Uuid::now_v7().to_string()),
        kind,
        batch_size: options.batch_size,
        train: SplitInfo {
            samples: train_samples,
            batches: train_infos,
        },
        test: SplitInfo {
            samples: test_samples,
            batches: test_infos,
        },
        validation: SplitInfo {
            samples: validation_samples,
            batches: validation_infos,
        },
        normalization,
        label_map,
        labels,
        source: SourceInfo {
            format: options.format.to_string(),
            input: mlless_data::input_name(&options.input)
                .display()
                .to_string(),
            seed: options.seed,
            test_fraction: match options.test {
                TestSet::Fraction(f) => Some(f),
                TestSet::Input(_) => None,
            },
            validation_fraction: match options.validation {
                Some(ValidationSet::Fraction(f)) => Some(f),
                _ => None,
            },
        },
        created_unix_s: mlless_faas::clock::unix_ms(std::time::SystemTime::now()) / 1000,
        schema: Some(InputSchema {
            zero_based: layout.zero_based,
            csv_columns: layout.csv_columns,
            csv: layout.csv,
            ids,
        }),
        rating_counts,
    };
    let record = PrepareRecord {
        started_at_unix_ms: mlless_faas::clock::unix_ms(started),
        wall_s: clock.elapsed().as_secs_f64(),
        invocations,
    };
    let record = serde_json::to_vec_pretty(&record).map_err(|source| RuntimeError::Json {
        location: format!("{}/{PREPARE_RECORD_KEY}", store.url()),
        source,
    })?;
    store.put(PREPARE_RECORD_KEY, Bytes::from(record)).await?;
    store
        .put(MANIFEST_KEY, Bytes::from(manifest.to_json()))
        .await?;
    info!(url = store.url(), "data set written");
    Ok(manifest)
}

/// Writes the id map of a ratings data set (before the manifest, which refers to it).
async fn put_ids(store: &Store, ids: &IdMap) -> Result<IdsInfo> {
    let bytes = ids.encode();
    let info = IdsInfo {
        key: IDS_KEY.to_string(),
        users: ids.users.len() as u32,
        items: ids.items.len() as u32,
        crc32: crc32fast::hash(&bytes),
    };
    store.put(IDS_KEY, Bytes::from(bytes)).await?;
    Ok(info)
}

/// Counts the training ratings of each user and item and writes them (before the manifest,
/// which refers to them).
async fn put_counts(store: &Store, users: u32, items: u32, train: &[Batch]) -> Result<CountsInfo> {
    let mut counts = RatingCounts::new(users, items);
    for batch in train {
        if let Batch::Ratings(ratings) = batch {
            counts.add(ratings);
        }
    }
    let bytes = mlless_data::encode_counts(&counts);
    let info = CountsInfo {
        key: COUNTS_KEY.to_string(),
        crc32: crc32fast::hash(&bytes),
    };
    store.put(COUNTS_KEY, Bytes::from(bytes)).await?;
    Ok(info)
}

/// The names of the splits, in the order of [`Input::samples`] and of the minibatches written.
const SPLITS: [&str; 3] = ["train", "test", "validation"];

/// The input read, its minibatches to come, and what the manifest says of it.
struct Input {
    kind: DatasetKind,
    label_map: Option<LabelMap>,
    labels: Option<LabelRange>,
    layout: InputLayout,
    /// Samples of each split, in the order of [`SPLITS`].
    samples: [u64; 3],
    batches: Batches,
}

/// Where the minibatches of an [`Input`] come from.
enum Batches {
    /// Ratings, read and split whole in memory: each split's minibatches.
    Whole([Vec<Batch>; 3]),
    /// Sparse rows shuffled in bounded memory, cut into minibatches as they are read back.
    Streamed(StreamedRows),
}

/// Sparse rows shuffled by an [`ExternalShuffle`], and which of them go to which split.
struct StreamedRows {
    shuffled: Shuffled,
    schema: SparseSchema,
    /// `(input, rows, split)`: the next `rows` rows of input `input` go to split `split` (an
    /// index of [`SPLITS`]), in the order of the list; an input's segments are consecutive.
    segments: Vec<(usize, u64, usize)>,
}

/// A minibatch cut: its split (an index of [`SPLITS`]), its index in the split, and itself.
type Cut = (usize, usize, Batch);

impl StreamedRows {
    /// Reads the rows back, cuts them into minibatches of `batch_size` (the last of a split
    /// possibly fewer) and sends them to `out`, in order; stops early when `out` is closed.
    fn cut(mut self, batch_size: usize, out: &tokio::sync::mpsc::Sender<Result<Cut>>) {
        if let Err(e) = self.cut_into(batch_size, out) {
            let _ = out.blocking_send(Err(e));
        }
    }

    fn cut_into(
        &mut self,
        batch_size: usize,
        out: &tokio::sync::mpsc::Sender<Result<Cut>>,
    ) -> Result<()> {
        let mut next_index = [0usize; 3];
        let mut segments = self.segments.iter().peekable();
        while let Some(&&(part, _, _)) = segments.peek() {
            let mut reader = self.shuffled.read(part);
            while let Some(&&(_, rows, split)) = segments.peek().filter(|s| s.0 == part) {
                segments.next();
                let mut batch = SparseBatch::new();
                for taken in 0..rows {
                    let Some(row) = reader.next_row().map_err(spill_error)? else {
                        return Err(RuntimeError::InvalidJob(format!(
                            "the shuffled input {part} ended after {taken} of {rows} rows"
                        )));
                    };
                    batch.push_row(row.label, row.indices, row.values);
                    if batch.rows() == batch_size || taken + 1 == rows {
                        self.schema.apply(&mut batch);
                        let cut = (split, next_index[split], Batch::Sparse(batch));
                        next_index[split] += 1;
                        if out.blocking_send(Ok(cut)).is_err() {
                            return Ok(());
                        }
                        batch = SparseBatch::new();
                    }
                }
            }
        }
        Ok(())
    }
}

/// A failure of the temporary files of the shuffle.
fn spill_error(error: std::io::Error) -> RuntimeError {
    RuntimeError::InvalidJob(format!(
        "reading the shuffled rows back from their temporary files: {error}"
    ))
}

/// The parts of the input files opened for reading on a blocking thread, each with the name its
/// errors give and the input it belongs to (an index of [`PrepareOptions::input_files`]).
async fn open_inputs(options: &PrepareOptions) -> Result<Vec<(InputReader, PathBuf, usize)>> {
    let mut parts = Vec::new();
    for (input, file) in options.input_files().into_iter().enumerate() {
        let resolved = InputParts::resolve(file).await?;
        if options.format == InputFormat::Movielens && resolved.len() > 1 {
            return Err(RuntimeError::InvalidJob(format!(
                "--format movielens reads one file: {} holds {} part files",
                file.display(),
                resolved.len()
            )));
        }
        parts.extend(
            resolved
                .open()?
                .into_iter()
                .map(|(reader, name)| (reader, name, input)),
        );
    }
    Ok(parts)
}

/// Reads the input (and the test and validation files, if any, as parts of one data set, so
/// that they share ids and labels), shuffles it, and splits off the test set and then the
/// validation set by their fractions: ratings whole in memory, sparse rows streamed through
/// an [`ExternalShuffle`] whose memory [`PrepareOptions::limits`] bounds, which gives up (and
/// removes its temporary files) once `stop` is set.
async fn read_input(
    options: &PrepareOptions,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Result<Input> {
    let inputs = open_inputs(options).await?;
    let options = options.clone();
    tokio::task::spawn_blocking(move || {
        let mut decompressed = Vec::with_capacity(inputs.len());
        let mut of_input = Vec::with_capacity(inputs.len());
        for (reader, name, input) in inputs {
            let reader = mlless_data::decompressed(reader, &name)?;
            decompressed.push((reader, name));
            of_input.push(input);
        }
        if options.format == InputFormat::Movielens {
            read_whole(&options, decompressed)
        } else {
            read_streamed(&options, decompressed, &of_input, &stop, &progress.rows)
        }
    })
    .await
    .map_err(|e| RuntimeError::InvalidJob(format!("the parser failed: {e}")))?
}

/// The bytes of rows the shuffle holds in memory: a quarter of the memory limit, which leaves
/// room for the growth of its buffers, the minibatches being written and the rest of the
/// process.
fn shuffle_budget(limits: &Limits) -> usize {
    (u64::from(limits.memory_mb) << 20).div_ceil(4).max(1 << 20) as usize
}

/// A [`RowSink`] between the parser and the shuffle: hands the rows of each part file to the
/// shuffle as rows of the input it is a part of, at their [`part_position`]s; counts the rows
/// it passes on in `rows`, and fails once `stop` is set, so that a cancelled parse ends.
struct Stoppable<'a, S> {
    sink: &'a mut S,
    /// For each part file, the input it belongs to and its place among that input's parts.
    parts: Vec<(usize, u32)>,
    positions: Vec<u64>,
    stop: &'a AtomicBool,
    rows: &'a AtomicU64,
}

impl<'a, S> Stoppable<'a, S> {
    /// Routes the parts of `of_input` (the input each part file belongs to, in order).
    fn new(sink: &'a mut S, of_input: &[usize], stop: &'a AtomicBool, rows: &'a AtomicU64) -> Self {
        let mut parts = Vec::with_capacity(of_input.len());
        let mut seen: Vec<u32> = Vec::new();
        for &input in of_input {
            if seen.len() <= input {
                seen.resize(input + 1, 0);
            }
            parts.push((input, seen[input]));
            seen[input] += 1;
        }
        Stoppable {
            sink,
            parts,
            positions: Vec::new(),
            stop,
            rows,
        }
    }
}

impl<S: RowSink> RowSink for Stoppable<'_, S> {
    fn take(&mut self, part: usize, rows: &mut SparseBatch, starts: &[u64]) -> std::io::Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "cancelled",
            ));
        }
        self.rows.fetch_add(rows.rows() as u64, Ordering::Relaxed);
        let (input, place) = self.parts.get(part).copied().unwrap_or((part, 0));
        if place == 0 {
            return self.sink.take(input, rows, starts);
        }
        self.positions.clear();
        self.positions
            .extend(starts.iter().map(|&start| part_position(place, start)));
        self.sink.take(input, rows, &self.positions)
    }
}

/// [`read_input`] of sparse rows.
fn read_streamed(
    options: &PrepareOptions,
    inputs: Vec<(InputReader, PathBuf)>,
    of_input: &[usize],
    stop: &AtomicBool,
    rows: &AtomicU64,
) -> Result<Input> {
    let parse_options = ParseOptions {
        features: options.features,
        csv: options.csv.clone(),
    };
    let temp_dir = options.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
    // The input is shuffled; a test or validation file keeps its order.
    let input_count = of_input.iter().max().map_or(1, |&last| last + 1);
    let shuffled = (0..input_count).map(|input| input == 0).collect();
    let mut shuffle = ExternalShuffle::new(
        options.seed,
        shuffle_budget(&options.limits),
        &temp_dir,
        shuffled,
    );
    let mut sink = Stoppable::new(&mut shuffle, of_input, stop, rows);
    let (schema, layout) =
        mlless_data::stream_sparse(inputs, options.format, &parse_options, &mut sink)?;
    if shuffle.spilled_bytes() > 0 {
        info!(
            spilled_mb = shuffle.spilled_bytes() >> 20,
            dir = %temp_dir.display(),
            "the input did not fit in the memory limit: shuffled through temporary files"
        );
    }
    let shuffled = shuffle.finish().map_err(|e| {
        RuntimeError::InvalidJob(format!(
            "writing shuffled rows to {}: {e}",
            temp_dir.display()
        ))
    })?;
    let n = shuffled.samples(0);
    let (train_n, train_all) = split_sizes(options, n)?;
    let mut next_part = 1;
    let test_n = match options.test {
        TestSet::Fraction(_) => n - train_all,
        TestSet::Input(_) => {
            next_part += 1;
            shuffled.samples(1)
        }
    };
    let validation_n = match options.validation {
        Some(ValidationSet::Input(_)) => shuffled.samples(next_part),
        _ => train_all - train_n,
    };
    let (train, test, validation) = (0, 1, 2);
    // In the shuffled order: the training rows, then those held out for validation, then
    // those for the test.
    let mut segments = vec![(0, train_n, train), (0, train_all - train_n, validation)];
    match options.test {
        TestSet::Fraction(_) => segments.push((0, test_n, test)),
        TestSet::Input(_) => segments.push((1, test_n, test)),
    }
    if let Some(ValidationSet::Input(_)) = options.validation {
        segments.push((next_part, validation_n, validation));
    }
    segments.retain(|&(_, rows, _)| rows > 0);
    Ok(Input {
        kind: DatasetKind::Sparse {
            features: schema.features,
        },
        label_map: schema.label_map,
        labels: schema.labels.clone(),
        layout,
        samples: [train_n, test_n, validation_n],
        batches: Batches::Streamed(StreamedRows {
            shuffled,
            schema,
            segments,
        }),
    })
}

/// Where the training rows and the rows held out for validation end among the `n` shuffled rows
/// of the input (`(train_n, train_all)`: the test rows, split off by `--test-fraction`, come
/// after); a test or validation set read from its own file takes none of them.
fn split_sizes(options: &PrepareOptions, n: u64) -> Result<(u64, u64)> {
    let train_all = match options.test {
        TestSet::Fraction(fraction) => mlless_data::split_point(n as usize, fraction)? as u64,
        TestSet::Input(_) => n,
    };
    let validation_n = match options.validation {
        Some(ValidationSet::Fraction(fraction)) if (train_all as f64 * fraction).round() < 1.0 => {
            warn!(
                samples = train_all,
                fraction, "too few training samples to hold out a validation set"
            );
            0
        }
        Some(ValidationSet::Fraction(fraction)) => {
            train_all - mlless_data::split_point(train_all as usize, fraction)? as u64
        }
        _ => 0,
    };
    Ok((train_all - validation_n, train_all))
}

/// [`read_input`] of ratings, whole in memory.
fn read_whole(options: &PrepareOptions, inputs: Vec<(InputReader, PathBuf)>) -> Result<Input> {
    let parse_options = ParseOptions {
        features: options.features,
        csv: options.csv.clone(),
    };
    let seed = options.seed;
    let (parsed, layout) =
        mlless_data::parse_readers_with_layout(inputs, options.format, &parse_options)?;
    let mut parsed = parsed.into_iter();
    let no_data = || RuntimeError::InvalidJob("parsing returned no data".into());
    let input = parsed.next().ok_or_else(no_data)?;
    let (train, test) = match &options.test {
        TestSet::Fraction(fraction) => mlless_data::shuffle_split(input, *fraction, seed)?,
        TestSet::Input(_) => (
            mlless_data::shuffle(input, seed),
            parsed.next().ok_or_else(no_data)?,
        ),
    };
    let (train, validation) = match &options.validation {
        None => (train, None),
        Some(ValidationSet::Fraction(fraction))
            if (train.samples() as f64 * fraction).round() < 1.0 =>
        {
            warn!(
                samples = train.samples(),
                fraction, "too few training samples to hold out a validation set"
            );
            (train, None)
        }
        Some(ValidationSet::Fraction(fraction)) => {
            let (train, validation) = mlless_data::split_tail(train, *fraction)?;
            (train, Some(validation))
        }
        Some(ValidationSet::Input(_)) => (train, Some(parsed.next().ok_or_else(no_data)?)),
    };
    let samples = |p: &Parsed| p.samples() as u64;
    let batch = |p: &Parsed| mlless_data::into_batches(p, options.batch_size);
    Ok(Input {
        kind: train.dataset_kind(),
        label_map: train.label_map(),
        labels: train.label_range().cloned(),
        layout,
        samples: [
            samples(&train),
            samples(&test),
            validation.as_ref().map_or(0, samples),
        ],
        batches: Batches::Whole([
            batch(&train)?,
            batch(&test)?,
            match &validation {
                Some(v) => batch(v)?,
                None => Vec::new(),
            },
        ]),
    })
}

/// Writes minibatches as they come, a few at a time, each under `{prefix}{split}/`; returns each
/// split's manifest entries in order (in the order of [`SPLITS`]), or `None` when `requests`
/// asked to stop (the minibatches being written are written whole, no other is started).
async fn write_batches(
    store: &Store,
    prefix: &str,
    batches: impl futures::Stream<Item = Result<Cut>>,
    requests: &Requests<'_>,
) -> Result<Option<[Vec<BatchInfo>; 3]>> {
    let written: Vec<Option<(usize, BatchInfo)>> = batches
        .take_while(|_| std::future::ready(!requests.stopping()))
        .map(|cut| async move {
            let (split, index, batch) = cut?;
            if requests.stopping() {
                return Ok(None);
            }
            let key = batch_key(&format!("{prefix}{}", SPLITS[split]), index);
            let info = put_batch(store, key, &batch).await?;
            requests.progress.written.fetch_add(1, Ordering::Relaxed);
            Ok::<_, RuntimeError>(Some((split, info)))
        })
        .buffered(UPLOAD_CONCURRENCY)
        .try_collect()
        .await?;
    if requests.stopping() {
        return Ok(None);
    }
    let mut infos: [Vec<BatchInfo>; 3] = Default::default();
    for item in written {
        let Some((split, info)) = item else {
            return Ok(None);
        };
        infos[split].push(info);
    }
    Ok(Some(infos))
}

async fn put_batch(store: &Store, key: String, batch: &Batch) -> Result<BatchInfo> {
    let bytes = mlless_data::encode_batch(batch);
    let info = BatchInfo::new(key.clone(), batch.samples() as u32, &bytes);
    store.put(&key, Bytes::from(bytes)).await?;
    Ok(info)
}

/// The manifest entries of each split's minibatches, in the order given, and the ranges.
type Normalized = (Vec<Vec<BatchInfo>>, Option<mlless_data::Normalization>);

/// Where a normalisation stopped when asked to, and whether its map tasks were killed.
type Stopped = (PrepareStage, bool);

/// The feature ranges a normalisation applies.
enum Ranges {
    /// To compute from the staged training minibatches, of this many features.
    Compute(u32),
    /// Computed already (by the shuffle-reduce tasks of a distributed preparation).
    Known(FeatureRange),
}

/// Min-max normalisation as map-reduce over function invocations of the minibatches staged under
/// `staging/` (`staged`: each split's name and number of minibatches), with the ranges of the
/// first split (the training set) applied to every split, the map tasks' reports added to
/// `invocations`; `Ok(Err(_))` when `requests` asked it to stop.
async fn normalize<const N: usize>(
    options: &PrepareOptions,
    store: &Store,
    invoker: Arc<dyn Invoker>,
    staged: [(&str, usize); N],
    ranges: Ranges,
    requests: &mut Requests<'_>,
    invocations: &mut Vec<InvocationReport>,
) -> Result<std::result::Result<Normalized, Stopped>> {
    let counts = staged;
    let tasks =
        (options.map_tasks.max(1) as usize).min(counts.first().map_or(0, |&(_, c)| c).max(1));
    let merged = match ranges {
        Ranges::Known(ranges) => ranges,
        Ranges::Compute(features) => match feature_ranges(
            options,
            store,
            &invoker,
            features,
            counts,
            requests,
            invocations,
        )
        .await?
        {
            Ok(merged) => merged,
            Err(stopped) => return Ok(Err(stopped)),
        },
    };
    let range_key = "staging/ranges/merged.bin".to_string();
    store
        .put(&range_key, RangeObject(merged.clone()).encode())
        .await?;

    // Map: scale and write the final minibatches.
    let items: Vec<(String, String)> = counts
        .iter()
        .flat_map(|&(split, count)| {
            (0..count).map(move |i| {
                (
                    batch_key(&format!("staging/{split}"), i),
                    batch_key(split, i),
                )
            })
        })
        .collect();
    let scale_payloads: Vec<Payload> = chunks(items, tasks)
        .into_iter()
        .enumerate()
        .map(|(task, items)| {
            Payload::ScaleMap(ScaleMapTask {
                data_url: store.url().to_string(),
                range_key: range_key.clone(),
                items,
                out_key: format!("staging/written/{task:04}.json"),
                stop_key: Some(STOP_KEY.to_string()),
            })
        })
        .collect();
    let scale = MapRound::Scale;
    let total = counts.iter().map(|&(_, c)| c).sum();
    let round = run_map_tasks(
        &invoker,
        store,
        scale,
        &scale_payloads,
        total,
        options,
        requests,
    );
    let (reports, stopped) = round.await?;
    invocations.extend(reports);
    if let Some(stopped) = stopped {
        return Ok(Err(stopped));
    }

    let mut infos = Vec::with_capacity(counts.iter().map(|&(_, c)| c).sum());
    for payload in &scale_payloads {
        let Payload::ScaleMap(task) = payload else {
            continue;
        };
        let bytes = store.get(&task.out_key).await?;
        let written: Vec<BatchInfo> =
            serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
                location: format!("{}/{}", store.url(), task.out_key),
                source,
            })?;
        infos.extend(written);
    }
    store.delete_prefix("staging/").await?;
    let mut per_split = Vec::with_capacity(N);
    let mut rest = infos.into_iter();
    for &(_, count) in &counts {
        per_split.push(rest.by_ref().take(count).collect());
    }
    Ok(Ok((per_split, Some(merged.into_normalization()))))
}

/// The feature ranges of the training minibatches staged under `staging/train/` (the first of
/// `counts`), computed by a round of map tasks; `Ok(Err(_))` when `requests` asked it to stop.
async fn feature_ranges<const N: usize>(
    options: &PrepareOptions,
    store: &Store,
    invoker: &Arc<dyn Invoker>,
    features: u32,
    counts: [(&str, usize); N],
    requests: &mut Requests<'_>,
    invocations: &mut Vec<InvocationReport>,
) -> Result<std::result::Result<FeatureRange, Stopped>> {
    let staged_train: Vec<String> = (0..counts.first().map_or(0, |&(_, c)| c))
        .map(|i| batch_key("staging/train", i))
        .collect();
    let train_count = staged_train.len();
    let tasks = (options.map_tasks.max(1) as usize).min(train_count.max(1));

    // Map: feature ranges of each task's share of the training minibatches.
    let mut map_payloads = Vec::new();
    for (task, keys) in chunks(staged_train, tasks).into_iter().enumerate() {
        map_payloads.push(Payload::RangeMap(RangeMapTask {
            data_url: store.url().to_string(),
            features,
            keys,
            out_key: format!("staging/ranges/{task:04}.bin"),
            stop_key: Some(STOP_KEY.to_string()),
        }));
    }
    let ranges = MapRound::Ranges;
    let round = run_map_tasks(
        invoker,
        store,
        ranges,
        &map_payloads,
        train_count,
        options,
        requests,
    );
    let (reports, stopped) = round.await?;
    invocations.extend(reports);
    if let Some(stopped) = stopped {
        return Ok(Err(stopped));
    }

    // Reduce: merge the ranges.
    let mut merged = FeatureRange::new(features);
    for payload in &map_payloads {
        let Payload::RangeMap(task) = payload else {
            continue;
        };
        let bytes = store.get(&task.out_key).await?;
        let range = RangeObject::decode(&bytes, || format!("{}/{}", store.url(), task.out_key))?;
        merged.merge(&range.0);
    }
    Ok(Ok(merged))
}

/// Runs one round of map tasks (named `{round}-{i}`) to its end; the first failure kills the
/// others and is the error. When `requests` asks to stop, writes [`STOP_KEY`] so that each task
/// ends after its minibatch (and kills them all on a kill), waits for every task to end, and
/// returns where it stopped. Returns the tasks' reports, in the order they were invoked.
async fn run_map_tasks(
    invoker: &Arc<dyn Invoker>,
    store: &Store,
    round: MapRound,
    payloads: &[Payload],
    minibatches: usize,
    options: &PrepareOptions,
    requests: &mut Requests<'_>,
) -> Result<(Vec<InvocationReport>, Option<Stopped>)> {
    let stage = PrepareStage::Mapping {
        round,
        tasks: payloads.len(),
        minibatches,
    };
    if requests.stopping() {
        return Ok((Vec::new(), Some((stage, false))));
    }
    let mut running = Vec::with_capacity(payloads.len());
    for (i, payload) in payloads.iter().enumerate() {
        let invoked = invoker
            .invoke(FunctionRequest {
                name: format!("{}-{i}", round.name()),
                payload: payload.to_json()?,
                limits: options.limits,
            })
            .await;
        match invoked {
            Ok(invocation) => running.push(invocation),
            Err(e) => {
                running.iter().for_each(|r| r.kill_switch().kill());
                for invocation in running {
                    let _ = invocation.wait().await;
                }
                return Err(e.into());
            }
        }
    }
    requests.enter(stage);
    let kill_switches: Vec<_> = running.iter().map(|r| r.kill_switch()).collect();
    let mut waiting: FuturesUnordered<_> = running.into_iter().map(|r| r.wait()).collect();
    let (mut asked, mut killed) = (false, false);
    let mut failure: Option<String> = None;
    let mut error: Option<RuntimeError> = None;
    let mut reports = Vec::with_capacity(payloads.len());
    loop {
        tokio::select! {
            done = waiting.next() => match done {
                None => break,
                Some(Ok(report)) => {
                    if let Some(message) = report.describe_failure()
                        && !asked
                        && failure.is_none()
                        && error.is_none()
                    {
                        kill_switches.iter().for_each(|k| k.kill());
                        failure = Some(message);
                    }
                    reports.push(report);
                }
                Some(Err(e)) => {
                    if error.is_none() {
                        kill_switches.iter().for_each(|k| k.kill());
                        error = Some(e.into());
                    }
                }
            },
            () = requests.next_request(asked), if !killed => {
                if !asked {
                    asked = true;
                    info!(round = round.name(), "asking the map tasks to stop");
                    if let Err(e) = store.put(STOP_KEY, Bytes::from_static(b"stop")).await {
                        warn!("could not ask the map tasks to stop, so killing them: {e}");
                        killed = true;
                    }
                }
                if *requests.level.borrow() == Interrupt::Kill {
                    killed = true;
                }
                if killed {
                    warn!(round = round.name(), "killing the map tasks");
                    kill_switches.iter().for_each(|k| k.kill());
                }
            }
        }
    }
    // In the order they were invoked (they end in any order).
    reports.sort_by_key(|r| {
        r.name
            .rsplit_once('-')
            .and_then(|(_, i)| i.parse::<usize>().ok())
    });
    if asked || killed {
        return Ok((reports, Some((stage, killed))));
    }
    if let Some(e) = error {
        return Err(e);
    }
    match failure {
        Some(message) => Err(RuntimeError::FunctionFailed(message)),
        None => Ok((reports, None)),
    }
}

/// Splits `items` into `n` contiguous chunks of nearly equal size (none empty).
fn chunks<T>(items: Vec<T>, n: usize) -> Vec<Vec<T>> {
    let n = n.clamp(1, items.len().max(1));
    let (base, extra) = (items.len() / n, items.len() % n);
    let mut out = Vec::with_capacity(n);
    let mut iter = items.into_iter();
    for i in 0..n {
        out.push(iter.by_ref().take(base + usize::from(i < extra)).collect());
    }
    out
}

/// Invokes one function per payload (named `{name}-{i}`), waits for all and returns their
/// reports; the first failure kills the others and is the error.
pub(crate) async fn run_tasks(
    invoker: &Arc<dyn Invoker>,
    name: &str,
    payloads: &[Payload],
    limits: Limits,
) -> Result<Vec<InvocationReport>> {
    let mut running = Vec::with_capacity(payloads.len());
    for (i, payload) in payloads.iter().enumerate() {
        running.push(
            invoker
                .invoke(FunctionRequest {
                    name: format!("{name}-{i}"),
                    payload: payload.to_json()?,
                    limits,
                })
                .await?,
        );
    }
    let kill_switches: Vec<_> = running.iter().map(|r| r.kill_switch()).collect();
    let mut failure = None;
    let mut reports = Vec::with_capacity(running.len());
    for invocation in running {
        let report = invocation.wait().await?;
        if let Some(message) = report.describe_failure()
            && failure.is_none()
        {
            kill_switches.iter().for_each(|k| k.kill());
            failure = Some(message);
        }
        reports.push(report);
    }
    match failure {
        Some(message) => Err(RuntimeError::FunctionFailed(message)),
        None => Ok(reports),
    }
}

/// Function body of a [`RangeMapTask`].
pub async fn run_range_map(task: RangeMapTask) -> Result<()> {
    let store = Store::open(&task.data_url)?;
    let mut range = FeatureRange::new(task.features);
    for key in &task.keys {
        if asked_to_stop(&store, task.stop_key.as_deref()).await? {
            info!("asked to stop: the ranges are not written");
            return Ok(());
        }
        if let Batch::Sparse(batch) = read_staged(&store, key).await? {
            range.observe(&batch);
        }
    }
    store
        .put(&task.out_key, RangeObject(range).encode())
        .await?;
    Ok(())
}

/// Function body of a [`ScaleMapTask`].
pub async fn run_scale_map(task: ScaleMapTask) -> Result<()> {
    let store = Store::open(&task.data_url)?;
    let bytes = store.get(&task.range_key).await?;
    let range = RangeObject::decode(&bytes, || format!("{}/{}", store.url(), task.range_key))?.0;
    let mut written = Vec::with_capacity(task.items.len());
    for (staged, key) in &task.items {
        if asked_to_stop(&store, task.stop_key.as_deref()).await? {
            info!(
                written = written.len(),
                "asked to stop: the list of minibatches written is not written"
            );
            return Ok(());
        }
        let mut batch = read_staged(&store, staged).await?;
        if let Batch::Sparse(rows) = &mut batch {
            range.apply(rows);
        }
        written.push(put_batch(&store, key.clone(), &batch).await?);
    }
    let json = serde_json::to_vec(&written).map_err(|source| RuntimeError::Json {
        location: format!("{}/{}", store.url(), task.out_key),
        source,
    })?;
    store.put(&task.out_key, Bytes::from(json)).await?;
    Ok(())
}

/// Whether the driver asked the map task to stop (the object `stop_key` exists).
async fn asked_to_stop(store: &Store, stop_key: Option<&str>) -> Result<bool> {
    match stop_key {
        Some(key) => Ok(store.exists(key).await?),
        None => Ok(false),
    }
}

async fn read_staged(store: &Store, key: &str) -> Result<Batch> {
    let bytes = store.get(key).await?;
    mlless_data::decode_batch(&bytes).map_err(|source| RuntimeError::Corrupt {
        location: format!("{}/{key}", store.url()),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two staged sparse minibatches in the in-memory store `name`, and their keys.
    async fn staged(name: &str) -> (Store, Vec<String>) {
        let store = Store::open(&format!("memory://{name}")).expect("memory store");
        let mut keys = Vec::new();
        for i in 0..2 {
            let mut rows = mlless_core::SparseBatch::new();
            rows.push_row(1.0, &[0, 2], &[1.0, 4.0 + i as f32]);
            let key = batch_key("staging/train", i);
            put_batch(&store, key.clone(), &Batch::Sparse(rows))
                .await
                .expect("staged");
            keys.push(key);
        }
        (store, keys)
    }

    #[tokio::test]
    async fn map_tasks_asked_to_stop_write_no_result() {
        let (store, keys) = staged("prepare-stop").await;
        let range = RangeMapTask {
            data_url: store.url().to_string(),
            features: 3,
            keys: keys.clone(),
            out_key: "staging/ranges/0000.bin".into(),
            stop_key: Some(STOP_KEY.into()),
        };
        run_range_map(range.clone()).await.expect("ranges");
        assert!(store.exists(&range.out_key).await.expect("exists"));
        let scale = ScaleMapTask {
            data_url: store.url().to_string(),
            range_key: range.out_key.clone(),
            items: keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), batch_key("train", i)))
                .collect(),
            out_key: "staging/written/0000.json".into(),
            stop_key: Some(STOP_KEY.into()),
        };

        store
            .put(STOP_KEY, Bytes::from_static(b"stop"))
            .await
            .expect("stop");
        let stopped = RangeMapTask {
            out_key: "staging/ranges/0001.bin".into(),
            ..range.clone()
        };
        run_range_map(stopped.clone()).await.expect("stops");
        run_scale_map(scale.clone()).await.expect("stops");
        for key in [&stopped.out_key, &scale.out_key, &batch_key("train", 0)] {
            assert!(!store.exists(key).await.expect("exists"), "{key} written");
        }

        // Without the stop object (or without a stop key, as older payloads) they run through.
        store.delete(STOP_KEY).await.expect("delete");
        run_range_map(range).await.expect("ranges");
        let old = ScaleMapTask {
            stop_key: None,
            ..scale
        };
        run_scale_map(old.clone()).await.expect("scaled");
        assert!(store.exists(&old.out_key).await.expect("exists"));
        assert!(store.exists(&batch_key("train", 1)).await.expect("exists"));
    }

    #[test]
    fn a_cancel_says_where_it_stopped_and_what_is_left() {
        let mapping = PrepareStage::Mapping {
            round: MapRound::Scale,
            tasks: 2,
            minibatches: 10,
        };
        assert_eq!(
            mapping.to_string(),
            "2 scale-map tasks scaling 10 minibatches"
        );
        let message = describe_cancel("s3://b/d", &mapping, false);
        assert!(
            message.starts_with("cancelled during the scale-map tasks, which stopped after")
                && message.contains("s3://b/d holds no data set"),
            "{message}"
        );
        assert!(describe_cancel("s3://b/d", &mapping, true).contains("which were killed"));
        let reading = PrepareStage::Reading { rows: 4_096 };
        assert!(
            describe_cancel("s3://b/d", &reading, false)
                .contains("nothing was written, s3://b/d is as it was")
        );
        assert_eq!(
            reading.to_string(),
            "reading and shuffling the input: 4096 rows so far"
        );
        assert!(reading.same_stage(&PrepareStage::Reading { rows: 0 }));
        let writing = |written| PrepareStage::Writing {
            minibatches: 10,
            staged: false,
            written,
        };
        assert_eq!(writing(3).to_string(), "writing 10 minibatches: 3 written");
        assert!(writing(3).same_stage(&writing(0)) && !writing(3).same_stage(&reading));
    }

    #[test]
    fn chunks_are_balanced_and_keep_order() {
        let c = chunks((0..10).collect::<Vec<_>>(), 4);
        assert_eq!(
            c,
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7], vec![8, 9]]
        );
        assert_eq!(chunks(vec![1], 4), vec![vec![1]]);
        assert_eq!(chunks(Vec::<u8>::new(), 3), vec![Vec::<u8>::new()]);
    }
}
