//! The function side of a distributed preparation: the split-map task deals its byte ranges'
//! rows into buckets, the shuffle-reduce task shuffles a bucket into minibatches.

use super::*;
use mlless_function::{InputError, Internal};

pub(super) fn split_report_key(task: u32) -> String {
    format!("staging/maps/{task:05}.json")
}

pub(super) fn chunk_key(bucket: usize, task: u32, chunk: u32) -> String {
    format!("staging/buckets/{bucket:05}/{task:05}-{chunk:05}.bin")
}

/// The bucket of `key` among `buckets`: monotone in the key.
pub(super) fn bucket_of(key: u64, buckets: u32) -> usize {
    ((u128::from(key) * u128::from(buckets)) >> 64) as usize
}

/// Deals rows into buckets by key, handing a full set of buffers to `flush`.
pub(super) struct Dealer<F> {
    pub(super) seed: u64,
    pub(super) base: u64,
    pub(super) buckets: Vec<BucketChunk>,
    pub(super) rows: Vec<u64>,
    pub(super) held: u64,
    pub(super) budget: u64,
    pub(super) flush: F,
}

impl<F: FnMut(usize, BucketChunk) -> std::io::Result<()>> Dealer<F> {
    pub(super) fn flush_all(&mut self) -> std::io::Result<()> {
        for b in 0..self.buckets.len() {
            if !self.buckets[b].positions.is_empty() {
                let chunk = std::mem::take(&mut self.buckets[b]);
                (self.flush)(b, chunk)?;
            }
        }
        self.held = 0;
        Ok(())
    }
}

impl<F: FnMut(usize, BucketChunk) -> std::io::Result<()>> RowSink for Dealer<F> {
    fn take(&mut self, _: usize, rows: &mut SparseBatch, starts: &[u64]) -> std::io::Result<()> {
        let buckets = self.buckets.len() as u32;
        for (r, (label, indices, values)) in rows.iter_rows().enumerate() {
            let position = self.base
                + starts
                    .get(r)
                    .copied()
                    .ok_or_else(|| std::io::Error::other("a row was dealt without its position"))?;
            let b = bucket_of(row_key(self.seed, position), buckets);
            self.buckets[b].positions.push(position);
            self.buckets[b].rows.push_row(label, indices, values);
            self.rows[b] += 1;
            self.held += 24 + 8 * indices.len() as u64;
        }
        if self.held >= self.budget {
            self.flush_all()?;
        }
        Ok(())
    }
}

/// Function body of a [`SplitMapTask`].
pub async fn run_split_map(task: SplitMapTask) -> Result<()> {
    let store = Store::open(&task.data_url)?;
    let input = Store::open(&task.input_url)?;
    let format: InputFormat = task.format.parse().map_err(Internal::Format)?;
    let handle = tokio::runtime::Handle::current();
    // Each segment's stream, opened when its turn comes; the parser reads synchronously: it
    // pulls the stream through the bridge.
    let open = {
        let handle = handle.clone();
        move |segment: &InputSegment| -> Result<_> {
            let stream = handle
                .block_on(input.get_stream_from(&segment.key, segment.start.saturating_sub(1)))?
                .map_err(std::io::Error::other);
            let reader = tokio_util::io::SyncIoBridge::new_with_handle(
                tokio_util::io::StreamReader::new(stream),
                handle.clone(),
            );
            Ok((
                BufReader::with_capacity(1 << 20, reader),
                input.location(&segment.key),
            ))
        }
    };
    let worker_store = store.clone();
    let task_for_parse = task.clone();
    let parsed = tokio::task::spawn_blocking(move || {
        let task = task_for_parse;
        let mut chunks = vec![0u32; task.buckets as usize];
        let mut stopped = false;
        let flush = |b: usize, chunk: BucketChunk| {
            let stop = handle.block_on(asked_to_stop(&worker_store, task.stop_key.as_deref()));
            if stop.map_err(std::io::Error::other)? {
                stopped = true;
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "asked to stop",
                ));
            }
            let key = chunk_key(b, task.task, chunks[b]);
            handle
                .block_on(worker_store.put(&key, chunk.encode()))
                .map_err(std::io::Error::other)?;
            chunks[b] += 1;
            Ok(())
        };
        let mut dealer = Dealer {
            seed: task.seed,
            base: 0,
            buckets: vec![BucketChunk::default(); task.buckets as usize],
            rows: vec![0; task.buckets as usize],
            held: 0,
            budget: task.budget,
            flush,
        };
        let options = ParseOptions {
            features: task.features,
            ..ParseOptions::default()
        };
        let mut deal = || -> Result<Vec<(u32, RangeSchema)>> {
            let mut schemas = Vec::with_capacity(task.segments.len());
            for segment in &task.segments {
                let (reader, location) = open(segment)?;
                let lines =
                    LineRange::new(reader, segment.start, segment.end).map_err(|error| {
                        InputError::Range {
                            location: location.to_string(),
                            error,
                        }
                    })?;
                let first = lines.first_line_offset();
                dealer.base = part_position(segment.part, first);
                let name = PathBuf::from(format!("{location} (the lines from byte {first})"));
                let schema = stream_range(lines, &name, format, &options, &mut dealer)?;
                schemas.push((segment.part, schema));
            }
            dealer.flush_all().map_err(|error| Internal::TempFiles {
                doing: format!("writing the buckets of split-map task {}", task.task),
                error,
            })?;
            Ok(schemas)
        };
        let result = deal();
        let Dealer { rows, .. } = dealer;
        match result {
            Ok(schemas) => Ok(Some(SplitReport {
                schemas,
                rows,
                chunks,
            })),
            Err(_) if stopped => Ok(None),
            Err(e) => Err(e),
        }
    })
    .await
    .map_err(|source| Internal::Task {
        task: "the parser",
        source,
    })??;
    let Some(report) = parsed else {
        info!("asked to stop: the report is not written");
        return Ok(());
    };
    let key = split_report_key(task.task);
    let json = serde_json::to_vec(&report).map_err(|source| RuntimeError::Json {
        location: store.location(&key),
        source,
    })?;
    store.put(&key, Bytes::from(json)).await?;
    Ok(())
}

/// Function body of a [`ShuffleReduceTask`].
pub async fn run_shuffle_reduce(task: ShuffleReduceTask) -> Result<()> {
    let store = Store::open(&task.data_url)?;
    let mut report = ReduceReport {
        written: Vec::new(),
        fragments: Vec::new(),
    };
    let mut ranges = task.ranges.as_ref().map(|&(f, _)| FeatureRange::new(f));
    let mut cutter = Cutter::new(&task);
    let temp = std::env::temp_dir();
    for chunk_keys in &task.buckets {
        if asked_to_stop(&store, task.stop_key.as_deref()).await? {
            info!("asked to stop: the report is not written");
            return Ok(());
        }
        let mut shuffle = ExternalShuffle::new(task.seed, task.budget as usize, &temp, vec![true]);
        for key in chunk_keys {
            let bytes = store.get(key).await?;
            let mut chunk = BucketChunk::decode(&bytes, || store.location(key))?;
            shuffle
                .take(0, &mut chunk.rows, &chunk.positions)
                .map_err(|e| spill(&temp, e))?;
        }
        let mut shuffled = shuffle.finish().map_err(|e| spill(&temp, e))?;
        let mut reader = shuffled.read(0);
        let mut cuts = Vec::new();
        while let Some(row) = reader.next_row().map_err(|e| spill(&temp, e))? {
            if let Some(cut) = cutter.push(row.label, row.indices, row.values) {
                cuts.push(cut);
                if cuts.len() >= UPLOAD_CONCURRENCY {
                    write_cuts(
                        &store,
                        &task,
                        std::mem::take(&mut cuts),
                        &mut ranges,
                        &mut report,
                    )
                    .await?;
                }
            }
        }
        write_cuts(&store, &task, cuts, &mut ranges, &mut report).await?;
    }
    let rest = cutter.finish().into_iter().collect();
    write_cuts(&store, &task, rest, &mut ranges, &mut report).await?;
    if let (Some(range), Some((_, key))) = (ranges, &task.ranges) {
        store.put(key, RangeObject(range).encode()).await?;
    }
    let json = serde_json::to_vec(&report).map_err(|source| RuntimeError::Json {
        location: store.location(&task.out_key),
        source,
    })?;
    store.put(&task.out_key, Bytes::from(json)).await?;
    Ok(())
}

pub(super) fn spill(dir: &std::path::Path, error: std::io::Error) -> RuntimeError {
    Internal::TempFiles {
        doing: format!("shuffling a bucket through {}", dir.display()),
        error,
    }
    .into()
}

/// A minibatch cut by a reduce task: its split, index, rows, and whether it is whole (else a
/// fragment shared with a neighbouring task).
pub(super) type ReduceCut = (usize, usize, SparseBatch, bool);

/// Writes `cuts` (a few at once): whole minibatches under their keys, fragments under
/// `staging/fragments/`, noting them in `report` and the training rows in `ranges`.
pub(super) async fn write_cuts(
    store: &Store,
    task: &ShuffleReduceTask,
    cuts: Vec<ReduceCut>,
    ranges: &mut Option<FeatureRange>,
    report: &mut ReduceReport,
) -> Result<()> {
    let schema = mlless_data::SparseSchema {
        features: 0,
        label_map: task.label_map,
        labels: None,
        one_based: task.one_based,
        samples: Vec::new(),
    };
    let mut puts = Vec::with_capacity(cuts.len());
    for (split, index, mut rows, whole) in cuts {
        schema.apply(&mut rows);
        if let Some(range) = ranges.as_mut()
            && split == 0
        {
            range.observe(&rows);
        }
        if whole {
            let key = batch_key(&format!("{}{}", task.prefix, SPLITS[split]), index);
            puts.push(futures::future::Either::Left(async move {
                let info = put_batch(store, key, &Batch::Sparse(rows)).await?;
                Ok::<_, RuntimeError>((split, index, Some(info), String::new()))
            }));
        } else {
            let key = format!(
                "staging/fragments/{}-{index:07}-{:012}.bin",
                SPLITS[split], task.first_row
            );
            let chunk = BucketChunk {
                positions: Vec::new(),
                rows,
            };
            puts.push(futures::future::Either::Right(async move {
                store.put(&key, chunk.encode()).await?;
                Ok::<_, RuntimeError>((split, index, None, key))
            }));
        }
    }
    let done: Vec<_> = futures::future::try_join_all(puts).await?;
    for (split, index, info, key) in done {
        match info {
            Some(info) => report.written.push((split, index, info)),
            None => report.fragments.push((split, index, key)),
        }
    }
    Ok(())
}

/// Cuts the rows of a reduce task, in the shuffled order from its first row, into the
/// minibatches of the splits they fall in.
pub(super) struct Cutter {
    /// The place of the next row in the shuffled order.
    pub(super) next: u64,
    pub(super) bounds: [u64; 3],
    pub(super) batch_size: u64,
    pub(super) rows: SparseBatch,
    /// Whether the minibatch being cut started at its first row.
    pub(super) whole: bool,
}

/// The splits in the shuffled order, as indices of [`SPLITS`]: training, validation, test.
pub(super) const SHUFFLED_SPLITS: [usize; 3] = [0, 2, 1];

impl Cutter {
    pub(super) fn new(task: &ShuffleReduceTask) -> Self {
        let mut cutter = Self {
            next: task.first_row,
            bounds: task.bounds,
            batch_size: u64::from(task.batch_size.max(1)),
            rows: SparseBatch::new(),
            whole: true,
        };
        cutter.whole = cutter.place(task.first_row).2 == 0;
        cutter
    }

    /// The split (its place in the shuffled order), its first row, and the place in its
    /// minibatch of row `g`.
    pub(super) fn place(&self, g: u64) -> (usize, u64, u64) {
        let segment = self.bounds.iter().position(|&end| g < end).unwrap_or(2);
        let start = if segment == 0 {
            0
        } else {
            self.bounds[segment - 1]
        };
        (segment, start, (g - start) % self.batch_size)
    }

    /// Adds the next row; returns the minibatch it completes.
    pub(super) fn push(
        &mut self,
        label: f32,
        indices: &[u32],
        values: &[f32],
    ) -> Option<ReduceCut> {
        let g = self.next;
        self.next += 1;
        let (segment, start, _) = self.place(g);
        self.rows.push_row(label, indices, values);
        let end = self.bounds[segment];
        let ends = (g + 1 - start).is_multiple_of(self.batch_size) || g + 1 == end;
        if !ends {
            return None;
        }
        let index = ((g - start) / self.batch_size) as usize;
        let rows = std::mem::take(&mut self.rows);
        let cut = (SHUFFLED_SPLITS[segment], index, rows, self.whole);
        self.whole = true;
        Some(cut)
    }

    /// The minibatch begun and not completed: a fragment.
    pub(super) fn finish(self) -> Option<ReduceCut> {
        if self.rows.rows() == 0 {
            return None;
        }
        let g = self.next - 1;
        let (segment, start, _) = self.place(g);
        let index = ((g - start) / self.batch_size) as usize;
        Some((SHUFFLED_SPLITS[segment], index, self.rows, false))
    }
}
