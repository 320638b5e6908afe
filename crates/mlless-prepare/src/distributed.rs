//! Distributed `mlless prepare` (`--distributed`): the input, on an object store, is parsed and
//! shuffled by function invocations, never pulled through the driver.
//!
//! * **Split map** ([`SplitMapTask`]): task `m` of `M` reads the lines that start in its byte
//!   range `[m·S/M, (m+1)·S/M)` of the input (a [`LineRange`]), parses them, and deals each row
//!   into one of `R` buckets by its shuffle key ([`row_key`] of its byte offset, the key the
//!   local shuffle sorts by): bucket `⌊key·R/2⁶⁴⌋`, so that every key of a bucket is below
//!   every key of the next. It writes a bucket's rows as chunks under `staging/buckets/` and
//!   reports what its lines said of the schema ([`RangeSchema`]) and how many rows each bucket
//!   got.
//! * The driver merges the reports into the input's schema ([`merge_ranges`]), and so knows the
//!   number of rows, the exact sizes of the splits, and where each bucket's rows start in the
//!   shuffled order.
//! * **Shuffle reduce** ([`ShuffleReduceTask`]): each task sorts its consecutive buckets by key
//!   (an [`ExternalShuffle`], so a bucket larger than its memory goes through temporary files),
//!   cuts the rows into minibatches of the splits they fall in, writes those wholly its own and
//!   leaves the ones it shares with its neighbours as fragments, which the driver joins. With
//!   `--normalize minmax` it also reports the feature ranges of its training rows, and only the
//!   scale round of the normalisation is left.
//!
//! The shuffled order is the rows sorted by key, ties in input order, as in the local path: the
//! two give the same data set, object for object, for the same seed.

mod tasks;
use mlless_function::{InputError, Internal, Refusal};
use std::io::BufReader;
use std::path::{Path, PathBuf};
use tasks::*;
pub use tasks::{run_shuffle_reduce, run_split_map};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use mlless_core::{Batch, SparseBatch};
use mlless_data::external_shuffle::{ExternalShuffle, part_position, row_key};
use mlless_data::{
    BatchInfo, Compression, DatasetKind, FeatureRange, InputFormat, LineRange, ParseOptions,
    RangeSchema, RowSink, batch_key, merge_ranges, stream_range,
};
use mlless_store::Store;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::input::InputParts;
use super::{
    InputSummary, MapRound, MapRounds, PrepareOptions, RangeObject, SPLITS, STOP_KEY, Stopped,
    TestSet, UPLOAD_CONCURRENCY, ValidationSet, asked_to_stop, chunks, put_batch, shuffle_budget,
    split_sizes,
};
use mlless_function::messages::Message;
use mlless_function::task::{InputSegment, Payload, ShuffleReduceTask, SplitMapTask};
use mlless_function::{Result, RuntimeError};

/// Buckets at most: each split-map task holds one buffer per bucket.
const MAX_BUCKETS: u64 = 4096;

/// What a split-map task reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SplitReport {
    /// What each of its segments said of the schema, with the segment's part.
    schemas: Vec<(u32, RangeSchema)>,
    /// Rows dealt into each bucket.
    rows: Vec<u64>,
    /// Chunks written of each bucket.
    chunks: Vec<u32>,
}

/// What a shuffle-reduce task reports: the minibatches it wrote, and the fragments of those it
/// shares with its neighbours, each with its split (an index of [`SPLITS`]) and its index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct ReduceReport {
    written: Vec<(usize, usize, BatchInfo)>,
    fragments: Vec<(usize, usize, String)>,
}

/// Rows of a bucket, with their byte offsets in the input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct BucketChunk {
    positions: Vec<u64>,
    rows: SparseBatch,
}

impl Message for BucketChunk {
    const MAGIC: [u8; 4] = *b"MLLK";
}

/// The part files of the input of a distributed preparation: the store they are on, each's
/// key and size, and the name each goes by in errors (the local path's names). A local path is
/// read through a `file://` store (which only local functions can reach).
async fn input_objects(
    options: &PrepareOptions,
) -> Result<(String, Vec<(String, u64)>, Vec<PathBuf>)> {
    let parts = InputParts::resolve(&options.input).await?;
    let names = parts.names();
    let local = |source: std::io::Error| InputError::Io {
        path: options.input.display().to_string(),
        given: true,
        source,
    };
    let (url, objects) = match parts {
        InputParts::Stdin => {
            return Err(Refusal::DistributedStdin.into());
        }
        InputParts::Objects(store, objects) => (store.url().to_string(), objects),
        InputParts::Files(files) => {
            let dir = if options.input.is_dir() {
                std::fs::canonicalize(&options.input).map_err(local)?
            } else {
                let file = std::fs::canonicalize(&options.input).map_err(local)?;
                file.parent().map(Path::to_path_buf).unwrap_or(file)
            };
            let mut objects = Vec::with_capacity(files.len());
            for file in files {
                let path = std::fs::canonicalize(&file).map_err(local)?;
                let key = path
                    .strip_prefix(&dir)
                    .ok()
                    .and_then(|key| key.to_str())
                    .ok_or_else(|| InputError::NotBelow {
                        input: options.input.display().to_string(),
                        path: path.display().to_string(),
                        dir: dir.display().to_string(),
                    })?
                    .to_string();
                let size = std::fs::metadata(&path).map_err(local)?.len();
                objects.push((key, size));
            }
            (format!("file://{}", dir.display()), objects)
        }
    };
    Ok((url, objects, names))
}

/// Refuses a compressed part (by its first bytes): it cannot be cut into byte ranges.
async fn refuse_compressed(input: &Store, objects: &[(String, u64)]) -> Result<()> {
    futures::stream::iter(objects)
        .map(|(key, _)| async move {
            let mut head = input.get_stream(key).await?;
            if let Some(first) = head.next().await.transpose()?
                && Compression::sniff(&first) != Compression::None
            {
                return Err(Refusal::DistributedCompressed {
                    location: input.location(key),
                }
                .into());
            }
            Ok(())
        })
        .buffer_unordered(UPLOAD_CONCURRENCY)
        .try_collect()
        .await
}

/// Cuts the part files `objects` (keys and sizes, in order, as one input of their total size
/// `S`) into the byte ranges of `maps` tasks: task `m` reads `[m·S/maps, (m+1)·S/maps)` of the whole, which
/// is a segment of each part it meets.
fn segments(objects: &[(String, u64)], maps: u64) -> Vec<Vec<InputSegment>> {
    let total: u64 = objects.iter().map(|(_, size)| size).sum();
    (0..maps)
        .map(|m| {
            let (from, to) = (m * total / maps, (m + 1) * total / maps);
            let mut first = 0;
            let mut segments = Vec::new();
            for (part, (key, size)) in objects.iter().enumerate() {
                let (start, end) = (from.max(first), to.min(first + size));
                if start < end {
                    segments.push(InputSegment {
                        part: part as u32,
                        key: key.clone(),
                        start: start - first,
                        end: end - first,
                    });
                }
                first += size;
            }
            segments
        })
        .collect()
}

/// Refuses what the distributed path does not do, naming the option.
fn check_options(options: &PrepareOptions) -> Result<()> {
    if !matches!(options.format, InputFormat::Libsvm | InputFormat::Criteo) {
        return Err(Refusal::DistributedFormat {
            format: options.format,
        }
        .into());
    }
    if matches!(options.test, TestSet::Input(_))
        || matches!(options.validation, Some(ValidationSet::Input(_)))
    {
        return Err(Refusal::DistributedSplitInputs.into());
    }
    Ok(())
}

/// The data set's minibatches as a distributed preparation writes them: the input's
/// description, each split's manifest entries, and the ranges of the normalisation still to
/// apply (`None` when there is none).
pub(super) struct Distributed {
    pub(super) summary: InputSummary,
    pub(super) infos: [Vec<BatchInfo>; 3],
    pub(super) ranges: Option<FeatureRange>,
}

/// Runs the split-map and shuffle-reduce rounds (see the module doc) on `rounds`, which keeps
/// the tasks' reports.
pub(super) async fn shuffle(
    rounds: &mut MapRounds<'_, '_>,
) -> Result<std::result::Result<Distributed, Stopped>> {
    let (options, store) = (rounds.options, rounds.store);
    check_options(options)?;
    let (input_url, objects, names) = input_objects(options).await?;
    let input = Store::open(&input_url)?;
    refuse_compressed(&input, &objects).await?;
    let size: u64 = objects.iter().map(|(_, size)| size).sum();
    let budget = shuffle_budget(&options.limits) as u64;
    let maps = u64::from(options.map_tasks).clamp(1, size.max(1));
    // Rows take about as many bytes in memory as in text: half a budget per bucket.
    let buckets = maps.max((2 * size).div_ceil(budget)).min(MAX_BUCKETS) as u32;
    info!(
        input = %options.input.display(),
        parts = objects.len(),
        bytes = size,
        maps,
        buckets,
        "distributed preparation"
    );

    let payloads: Vec<Payload> = segments(&objects, maps)
        .into_iter()
        .enumerate()
        .map(|(m, segments)| {
            Payload::SplitMap(SplitMapTask {
                data_url: store.url().to_string(),
                input_url: input_url.clone(),
                format: options.format.to_string(),
                features: options.features,
                segments,
                seed: options.seed,
                buckets,
                budget,
                task: m as u32,
                stop_key: Some(STOP_KEY.to_string()),
            })
        })
        .collect();
    if let Some(stopped) = rounds.run(MapRound::Split, &payloads, 0).await? {
        return Ok(Err(stopped));
    }
    let mut ranges: Vec<Vec<RangeSchema>> = vec![Vec::new(); objects.len()];
    let mut bucket_rows = vec![0u64; buckets as usize];
    let mut bucket_chunks: Vec<Vec<String>> = vec![Vec::new(); buckets as usize];
    for m in 0..maps as u32 {
        let key = split_report_key(m);
        let bytes = store.get(&key).await?;
        let report: SplitReport =
            serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
                location: store.location(&key),
                source,
            })?;
        for (b, (&rows, &count)) in report.rows.iter().zip(&report.chunks).enumerate() {
            bucket_rows[b] += rows;
            bucket_chunks[b].extend((0..count).map(|c| chunk_key(b, m, c)));
        }
        for (part, schema) in report.schemas {
            ranges
                .get_mut(part as usize)
                .ok_or_else(|| Internal::UnknownPart {
                    task: m,
                    part,
                    parts: objects.len(),
                })?
                .push(schema);
        }
    }
    let parse_options = ParseOptions {
        features: options.features,
        csv: options.csv.clone(),
    };
    // Each part named as the local path names it.
    let parts: Vec<(&Path, &[RangeSchema])> = names
        .iter()
        .map(PathBuf::as_path)
        .zip(ranges.iter().map(Vec::as_slice))
        .collect();
    let (schema, layout) = merge_ranges(options.format, &parse_options, &parts)?;
    let n = schema.samples.iter().sum();
    let (train_n, train_all) = split_sizes(options, n)?;
    let bounds = [train_n, train_all, n];
    let samples = [train_n, n - train_all, train_all - train_n];

    // Reduce: each task its share of the buckets, in order.
    let batch_size = u64::from(options.batch_size);
    let counts = samples.map(|rows| rows.div_ceil(batch_size) as usize);
    let prefix = if options.normalize { "staging/" } else { "" };
    let mut first_row = 0;
    let mut reduce_payloads = Vec::new();
    let shares = chunks((0..buckets as usize).collect::<Vec<_>>(), maps as usize);
    for (task, share) in shares.into_iter().enumerate() {
        let task_buckets: Vec<Vec<String>> = share
            .iter()
            .map(|&b| std::mem::take(&mut bucket_chunks[b]))
            .collect();
        reduce_payloads.push(Payload::ShuffleReduce(ShuffleReduceTask {
            data_url: store.url().to_string(),
            seed: options.seed,
            budget,
            buckets: task_buckets,
            first_row,
            bounds,
            batch_size: options.batch_size,
            label_map: schema.label_map,
            one_based: schema.one_based,
            prefix: prefix.to_string(),
            ranges: options
                .normalize
                .then(|| (schema.features, format!("staging/reduced/{task:05}.bin"))),
            out_key: format!("staging/reduced/{task:05}.json"),
            stop_key: Some(STOP_KEY.to_string()),
        }));
        first_row += share.iter().map(|&b| bucket_rows[b]).sum::<u64>();
    }
    let total = counts.iter().sum();
    if let Some(stopped) = rounds
        .run(MapRound::Shuffle, &reduce_payloads, total)
        .await?
    {
        return Ok(Err(stopped));
    }

    let mut infos: [Vec<Option<BatchInfo>>; 3] = counts.map(|c| vec![None; c]);
    let mut fragments: std::collections::BTreeMap<(usize, usize), Vec<String>> = Default::default();
    let mut ranges = options
        .normalize
        .then(|| FeatureRange::new(schema.features));
    for payload in &reduce_payloads {
        let Payload::ShuffleReduce(task) = payload else {
            continue;
        };
        let bytes = store.get(&task.out_key).await?;
        let report: ReduceReport =
            serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
                location: store.location(&task.out_key),
                source,
            })?;
        for (split, index, info) in report.written {
            place(&mut infos, split, index, info)?;
        }
        for (split, index, key) in report.fragments {
            fragments.entry((split, index)).or_default().push(key);
        }
        if let (Some(merged), Some((_, key))) = (&mut ranges, &task.ranges) {
            let bytes = store.get(key).await?;
            merged.merge(&RangeObject::decode(&bytes, || store.location(key))?.0);
        }
    }
    // The minibatches that span tasks: their fragments joined, in the tasks' order.
    let joined: Vec<(usize, usize, BatchInfo)> = futures::stream::iter(fragments)
        .map(|((split, index), keys)| async move {
            let mut rows = SparseBatch::new();
            for key in &keys {
                let bytes = store.get(key).await?;
                let chunk = BucketChunk::decode(&bytes, || store.location(key))?;
                for (label, indices, values) in chunk.rows.iter_rows() {
                    rows.push_row(label, indices, values);
                }
            }
            let key = batch_key(&format!("{prefix}{}", SPLITS[split]), index);
            let info = put_batch(store, key, &Batch::Sparse(rows)).await?;
            Ok::<_, RuntimeError>((split, index, info))
        })
        .buffer_unordered(UPLOAD_CONCURRENCY)
        .try_collect()
        .await?;
    for (split, index, info) in joined {
        place(&mut infos, split, index, info)?;
    }
    let mut complete: [Vec<BatchInfo>; 3] = Default::default();
    for (split, entries) in infos.into_iter().enumerate() {
        for (index, info) in entries.into_iter().enumerate() {
            complete[split].push(info.ok_or(Internal::MissingMinibatch {
                split: SPLITS[split],
                index,
            })?);
        }
    }
    if !options.normalize {
        store.delete_prefix("staging/").await?;
    }
    Ok(Ok(Distributed {
        summary: InputSummary {
            kind: DatasetKind::Sparse {
                features: schema.features,
            },
            label_map: schema.label_map,
            labels: schema.labels,
            layout,
            samples,
        },
        infos: complete,
        ranges,
    }))
}

/// Puts `info` at `index` of split `split`, refusing a second one there.
fn place(
    infos: &mut [Vec<Option<BatchInfo>>; 3],
    split: usize,
    index: usize,
    info: BatchInfo,
) -> Result<()> {
    match infos.get_mut(split).and_then(|s| s.get_mut(index)) {
        Some(slot @ None) => {
            *slot = Some(info);
            Ok(())
        }
        _ => Err(Internal::DuplicateMinibatch {
            split: SPLITS.get(split).unwrap_or(&"?"),
            index,
        }
        .into()),
    }
}

#[cfg(test)]
mod tests;
