//! Reading the input: whole into memory, or streamed through an external shuffle when it is
//! larger than the shuffle budget; the split into training, test and validation rows.

use super::*;
use mlless_function::{Internal, Refusal};

/// The names of the splits, in the order of [`InputSummary::samples`] and of the minibatches
/// written.
pub(super) const SPLITS: [&str; 3] = ["train", "test", "validation"];

/// What the manifest says of an input, found by reading it (here or by the split-map tasks of
/// a distributed preparation): its kind, labels and layout, and the samples of each split.
pub(super) struct InputSummary {
    pub(super) kind: DatasetKind,
    pub(super) label_map: Option<LabelMap>,
    pub(super) labels: Option<LabelRange>,
    pub(super) layout: InputLayout,
    /// Samples of each split, in the order of [`SPLITS`].
    pub(super) samples: [u64; 3],
}

/// The input read: what the manifest says of it, and its minibatches to come.
pub(super) struct Input {
    pub(super) summary: InputSummary,
    pub(super) batches: Batches,
}

/// Where the minibatches of an [`Input`] come from.
pub(super) enum Batches {
    /// Ratings, read and split whole in memory: each split's minibatches.
    Whole([Vec<Batch>; 3]),
    /// Sparse rows shuffled in bounded memory, cut into minibatches as they are read back.
    Streamed(StreamedRows),
}

/// Sparse rows shuffled by an [`ExternalShuffle`], and which of them go to which split.
pub(super) struct StreamedRows {
    shuffled: Shuffled,
    schema: SparseSchema,
    /// `(input, rows, split)`: the next `rows` rows of input `input` go to split `split` (an
    /// index of [`SPLITS`]), in the order of the list; an input's segments are consecutive.
    segments: Vec<(usize, u64, usize)>,
}

/// A minibatch cut: its split (an index of [`SPLITS`]), its index in the split, and itself.
pub(super) type Cut = (usize, usize, Batch);

impl StreamedRows {
    /// Reads the rows back, cuts them into minibatches of `batch_size` (the last of a split
    /// possibly fewer) and sends them to `out`, in order; stops early when `out` is closed.
    pub(super) fn cut(mut self, batch_size: usize, out: &tokio::sync::mpsc::Sender<Result<Cut>>) {
        if let Err(e) = self.cut_into(batch_size, out) {
            let _ = out.blocking_send(Err(e));
        }
    }

    pub(super) fn cut_into(
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
                        return Err(Internal::ShuffledInputShort { part, taken, rows }.into());
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
pub(super) fn spill_error(error: std::io::Error) -> RuntimeError {
    Internal::TempFiles {
        doing: "reading the shuffled rows back from their temporary files".into(),
        error,
    }
    .into()
}

/// The parts of the input files opened for reading on a blocking thread, each with the name its
/// errors give and the input it belongs to (an index of [`PrepareOptions::input_files`]).
pub(super) async fn open_inputs(
    options: &PrepareOptions,
) -> Result<Vec<(InputReader, PathBuf, usize)>> {
    let mut parts = Vec::new();
    for (input, file) in options.input_files().into_iter().enumerate() {
        let resolved = InputParts::resolve(file).await?;
        if options.format == InputFormat::Movielens && resolved.len() > 1 {
            return Err(Refusal::MovielensParts {
                input: file.display().to_string(),
                parts: resolved.len(),
            }
            .into());
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
pub(super) async fn read_input(
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
    .map_err(|source| Internal::Task {
        task: "the parser",
        source,
    })?
}

/// The bytes of rows the shuffle holds in memory: a quarter of the memory limit, which leaves
/// room for the growth of its buffers, the minibatches being written and the rest of the
/// process.
pub(super) fn shuffle_budget(limits: &Limits) -> usize {
    (u64::from(limits.memory_mb) << 20).div_ceil(4).max(1 << 20) as usize
}

/// A [`RowSink`] between the parser and the shuffle: hands the rows of each part file to the
/// shuffle as rows of the input it is a part of, at their [`part_position`]s; counts the rows
/// it passes on in `rows`, and fails once `stop` is set, so that a cancelled parse ends.
pub(super) struct Stoppable<'a, S> {
    sink: &'a mut S,
    /// For each part file, the input it belongs to and its place among that input's parts.
    parts: Vec<(usize, u32)>,
    positions: Vec<u64>,
    stop: &'a AtomicBool,
    rows: &'a AtomicU64,
}

impl<'a, S> Stoppable<'a, S> {
    /// Routes the parts of `of_input` (the input each part file belongs to, in order).
    pub(super) fn new(
        sink: &'a mut S,
        of_input: &[usize],
        stop: &'a AtomicBool,
        rows: &'a AtomicU64,
    ) -> Self {
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
pub(super) fn read_streamed(
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
    let shuffled = shuffle.finish().map_err(|error| Internal::TempFiles {
        doing: format!("writing shuffled rows to {}", temp_dir.display()),
        error,
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
        summary: InputSummary {
            kind: DatasetKind::Sparse {
                features: schema.features,
            },
            label_map: schema.label_map,
            labels: schema.labels.clone(),
            layout,
            samples: [train_n, test_n, validation_n],
        },
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
pub(super) fn split_sizes(options: &PrepareOptions, n: u64) -> Result<(u64, u64)> {
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
pub(super) fn read_whole(
    options: &PrepareOptions,
    inputs: Vec<(InputReader, PathBuf)>,
) -> Result<Input> {
    let parse_options = ParseOptions {
        features: options.features,
        csv: options.csv.clone(),
    };
    let seed = options.seed;
    let (parsed, layout) =
        mlless_data::parse_readers_with_layout(inputs, options.format, &parse_options)?;
    let mut parsed = parsed.into_iter();
    let no_data = || Internal::Invariant("parsing returned no data");
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
        summary: InputSummary {
            kind: train.dataset_kind(),
            label_map: train.label_map(),
            labels: train.label_range().cloned(),
            layout,
            samples: [
                samples(&train),
                samples(&test),
                validation.as_ref().map_or(0, samples),
            ],
        },
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
