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
//! function invocations instead, reading it from its object store (see the `distributed` module); the
//! data set is the same.
//!
//! # Layout
//!
//! | module | what |
//! | --- | --- |
//! | this one | [`prepare_with`]: the stages in order, writing the minibatches, ids and counts, the manifest last, cancels |
//! | `options` | [`PrepareOptions`], [`TestSet`], [`ValidationSet`] |
//! | `stage` | [`PrepareStage`], [`MapRound`], the progress reported and the cancel requests |
//! | `read` | reading the input whole or streamed through an external shuffle, and the splits |
//! | `normalize` | min-max normalisation's map tasks and their rounds ([`run_tasks`] runs any round) |
//! | `input` | the input files: local or in an object store, by byte ranges |
//! | `distributed` | `--distributed`: the split-map and shuffle-reduce tasks |
//!
//! [`prepare_with`] asks its caller, every [`POLL`], whether to go on ([`Control`]). A cancel
//! (the CLI's first Ctrl-C) stops at the next safe point: while the input is parsed, before
//! anything is written; while minibatches are written, after the ones being written; while map
//! tasks run, through the stop object [`STOP_KEY`], which each task looks for before each
//! minibatch, so that it ends after the one it is at without writing its result. What was
//! written is then removed (the staged and the final minibatches, the id map and the counts),
//! and the preparation ends in [`RuntimeError::PrepareCancelled`]. `Control::Kill` (a second
//! Ctrl-C, or [`CANCEL_GRACE`] after the cancel) kills the map tasks at once.

use mlless_function::{Internal, Refusal};
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
mod normalize;
mod options;
mod read;
mod stage;

pub use normalize::run_tasks;
use normalize::*;
pub use normalize::{run_range_map, run_scale_map};
pub use options::{PrepareOptions, TestSet, ValidationSet};
use read::*;
use stage::*;
pub use stage::{MapRound, PrepareStage};

pub use distributed::{run_shuffle_reduce, run_split_map};

use input::{InputParts, InputReader};
use mlless_function::messages::Message;
use mlless_function::task::{Payload, RangeMapTask, ScaleMapTask};
use mlless_function::{CANCEL_GRACE, Control};
use mlless_function::{Result, RuntimeError};
use mlless_job::config::{ConfigError, validate_limits};

/// Objects written at once while uploading minibatches.
const UPLOAD_CONCURRENCY: usize = 16;

/// How often [`prepare_with`] asks its caller whether to go on.
pub const POLL: Duration = Duration::from_millis(50);

/// The object (in the data set's location) whose presence asks the map tasks to stop after
/// the minibatch they are at.
pub const STOP_KEY: &str = "staging/stop";

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
                    mlless_store::remove_local_leftovers(created);
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
/// `staging/` last (see [`cancelled`]), the id map, the counts and the preparation's record
/// (on a local location, with the directories they leave empty). A
/// removal that fails is logged: the location has no manifest, so no job uses what is left.
async fn remove_written(store: &Store) {
    let local = mlless_store::local_path(store.url());
    for prefix in ["train/", "test/", "validation/", "staging/"] {
        if let Err(e) = store.delete_prefix(prefix).await {
            warn!("could not remove {}/{prefix}: {e}", store.url());
        }
        // A local store deletes objects, not the directories they were in (`staging/ranges/`
        // when a map task had written its ranges before the round failed) nor the staged file
        // of an upload that a killed map task abandoned.
        if let Some(local) = &local {
            mlless_store::remove_local_leftovers(&local.join(prefix));
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
        let mut rounds = MapRounds::new(options, &store, &invoker, &mut requests);
        let done = match distributed::shuffle(&mut rounds).await? {
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
                match normalize(&mut rounds, staged, Ranges::Known(ranges)).await? {
                    Ok(normalized) => normalized,
                    Err((stage, killed)) => return cancelled(&store, stage, killed).await,
                }
            }
            None => (Vec::from(done.infos), None),
        };
        let invocations = rounds.invocations;
        let written = Written {
            summary: done.summary,
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
    let Input { summary, batches } = input;
    let (kind, samples) = (&summary.kind, summary.samples);
    if options.normalize && !matches!(kind, DatasetKind::Sparse { .. }) {
        return Err(Refusal::NormalizeRatings.into());
    }
    clear(&store).await?;
    let ids = match &summary.layout.ids {
        Some(ids) => Some(put_ids(&store, ids).await?),
        None => None,
    };
    let rating_counts = match (kind, &batches) {
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
            cutting.await.map_err(|source| Internal::Task {
                task: "cutting minibatches",
                source,
            })?;
            written?
        }
    };
    let Some(written) = written else {
        return cancelled(&store, writing, false).await;
    };
    let mut rounds = MapRounds::new(options, &store, &invoker, &mut requests);
    let (infos, normalization) = if options.normalize {
        let &DatasetKind::Sparse { features } = kind else {
            unreachable!("checked above")
        };
        let staged = [
            ("train", counts[0]),
            ("test", counts[1]),
            ("validation", counts[2]),
        ];
        match normalize(&mut rounds, staged, Ranges::Compute(features)).await? {
            Ok(normalized) => normalized,
            Err((stage, killed)) => return cancelled(&store, stage, killed).await,
        }
    } else {
        (Vec::from(written), None)
    };
    let invocations = rounds.invocations;
    let written = Written {
        summary,
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
    summary: InputSummary,
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
    let summary = written.summary;
    let [train_samples, test_samples, validation_samples] = summary.samples;
    if requests.stopping() {
        return cancelled(store, PrepareStage::Finishing, false).await;
    }
    requests.enter(PrepareStage::Finishing);
    let [train_infos, test_infos, validation_infos]: [Vec<BatchInfo>; 3] = written
        .infos
        .try_into()
        .map_err(|_| Internal::Invariant("preparation returned the wrong number of splits"))?;

    let manifest = Manifest {
        format_version: mlless_data::MANIFEST_VERSION,
        // A new identity for every preparation, even of the same input and seed: a run is
        // bound to the minibatches it started on, not to their recipe.
        dataset_id: Some(uuid::Uuid::now_v7().to_string()),
        kind: summary.kind,
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
        normalization: written.normalization,
        label_map: summary.label_map,
        labels: summary.labels,
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
            zero_based: summary.layout.zero_based,
            csv_columns: summary.layout.csv_columns,
            csv: summary.layout.csv,
            ids: written.ids,
        }),
        rating_counts: written.rating_counts,
    };
    let record = PrepareRecord {
        started_at_unix_ms: mlless_faas::clock::unix_ms(started),
        wall_s: clock.elapsed().as_secs_f64(),
        invocations: written.invocations,
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

#[cfg(test)]
mod tests;
