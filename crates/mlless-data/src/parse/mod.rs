//! Input parsers: LIBSVM, CSV, MovieLens ratings and Criteo TSV into in-memory [`Parsed`] data.
//!
//! Every parser reads through one reused buffer, line by line (CSV: record by record, with the
//! `csv` crate), and parses fields in place, so preparing millions of rows costs no allocation
//! per field. A bad line is a [`ParseError`]
//! naming the file and the 1-based line number:
//!
//! ```text
//! data.libsvm:17: expected INDEX:VALUE, found "abc"
//! ```
//!
//! # Binary labels
//!
//! For LIBSVM and CSV input, if exactly two distinct label values occur, the smaller becomes 0
//! and the larger 1, and the mapping is returned as a [`LabelMap`] (so `-1/+1`, `0/1` and `1/2`
//! all work). With one label value or more than two, labels are kept as written and the label
//! map is `None`; binary models will reject them.

mod criteo;
mod csv;
mod format;
mod input;
mod labels;
mod libsvm;
mod movielens;
mod range;
mod score;

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

use labels::*;
use mlless_core::{RatingBatch, SparseBatch};

use crate::ids::IdMap;
use crate::manifest::{CsvDialect, DatasetKind, LabelAt, LabelMap, LabelRange};

pub use self::csv::{CsvOptions, LabelColumn, parse_delimiter};
pub use range::{LineRange, RangeSchema, merge_ranges, stream_range};
pub use score::{
    ScoringInput, ScoringLayout, ScoringRows, read_for_scoring, read_reader_for_scoring,
};

pub use input::{Compression, STDIN_NAME, STDIN_PATH, decompressed, input_name, open_input};

pub use criteo::{CRITEO_CATEGORICAL, CRITEO_COLUMNS, CRITEO_INTEGER, criteo_feature, criteo_hash};
pub use format::{InputFormat, UnknownFormat};

/// Options of the parsers.
#[derive(Debug, Clone, Default)]
pub struct ParseOptions {
    /// Dimension of the feature space.
    ///
    /// LIBSVM: fixes the dimension (default: largest index + 1); a larger index is an error.
    /// CSV: at least the number of feature columns (default: exactly that). Criteo: required,
    /// at least 14 (13 integer features plus a hashing space). MovieLens: ignored.
    pub features: Option<u32>,
    /// CSV: the delimiter, the header and the label column. Other formats: ignored.
    pub csv: CsvOptions,
}

/// Parsed input: all samples, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// Labelled sparse rows (LIBSVM, CSV, Criteo).
    Sparse {
        /// The rows, with 0-based feature indices below `features`.
        rows: SparseBatch,
        /// Dimension of the feature space.
        features: u32,
        /// How the labels were mapped to 0/1, if they were (see the module doc).
        label_map: Option<LabelMap>,
        /// The range of the labels over every part read with these rows, with their input
        /// lines (`None` where rows were not read from inputs).
        labels: Option<LabelRange>,
    },
    /// Ratings with dense user and item ids (MovieLens).
    Ratings {
        /// The ratings; user ids are below `users` and item ids below `items`.
        ratings: RatingBatch,
        /// Number of distinct users.
        users: u32,
        /// Number of distinct items.
        items: u32,
    },
}

impl Parsed {
    /// Number of samples (rows or ratings).
    pub fn samples(&self) -> usize {
        match self {
            Parsed::Sparse { rows, .. } => rows.rows(),
            Parsed::Ratings { ratings, .. } => ratings.len(),
        }
    }

    /// Whether there is no sample.
    pub fn is_empty(&self) -> bool {
        self.samples() == 0
    }

    /// The manifest's description of this data; for ratings, `mean` is the mean of these
    /// ratings (call it on the training split).
    pub fn dataset_kind(&self) -> DatasetKind {
        match self {
            Parsed::Sparse { features, .. } => DatasetKind::Sparse {
                features: *features,
            },
            Parsed::Ratings {
                ratings,
                users,
                items,
            } => {
                let sum: f64 = ratings.ratings.iter().map(|&r| f64::from(r)).sum();
                let mean = if ratings.is_empty() {
                    0.0
                } else {
                    sum / ratings.len() as f64
                };
                DatasetKind::Ratings {
                    users: *users,
                    items: *items,
                    mean: mean as f32,
                }
            }
        }
    }

    /// The label map of sparse data, `None` for ratings.
    pub fn label_map(&self) -> Option<LabelMap> {
        match self {
            Parsed::Sparse { label_map, .. } => *label_map,
            Parsed::Ratings { .. } => None,
        }
    }

    /// The range of the labels of sparse data read from inputs, `None` for ratings.
    pub fn label_range(&self) -> Option<&LabelRange> {
        match self {
            Parsed::Sparse { labels, .. } => labels.as_ref(),
            Parsed::Ratings { .. } => None,
        }
    }
}

/// Why an input could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The file could not be opened or read.
    #[error("{}: {error}", path.display())]
    Io {
        /// The input.
        path: PathBuf,
        /// The I/O error.
        error: io::Error,
    },
    /// A line is malformed.
    #[error("{}:{line}: {message}", path.display())]
    Line {
        /// The input.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with the line.
        message: String,
    },
    /// The rows read could not be set aside (on a temporary file) while reading the input.
    #[error("{}: setting its rows aside: {error}", path.display())]
    Spill {
        /// The input being read.
        path: PathBuf,
        /// The I/O error.
        error: io::Error,
    },
    /// The input holds no sample.
    #[error("{}: no samples", path.display())]
    Empty {
        /// The input.
        path: PathBuf,
    },
    /// The input as a whole, or the options, cannot be used.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The input.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Parses the file at `path`.
pub fn parse_file(
    path: &Path,
    format: InputFormat,
    options: &ParseOptions,
) -> Result<Parsed, ParseError> {
    let mut parsed = parse_files(&[path], format, options)?;
    Ok(parsed.pop().expect("one input, one result"))
}

/// Parses several files as parts of one dataset (a training file and its test file), returning
/// one [`Parsed`] per file, in order.
///
/// The parts share one schema: LIBSVM indices are 0-based if any part has an index 0, the
/// dimension covers every part, CSV parts must have the same columns, labels are mapped to 0/1
/// over the labels of all parts, and MovieLens user and item ids are remapped over all parts
/// (so a user has the same dense id in each). Every part must hold samples.
pub fn parse_files<P: AsRef<Path>>(
    paths: &[P],
    format: InputFormat,
    options: &ParseOptions,
) -> Result<Vec<Parsed>, ParseError> {
    Ok(parse_files_with_layout(paths, format, options)?.0)
}

/// How parsed input was read, beyond what [`Parsed`] says: what reading new input the same way
/// needs (see [`read_for_scoring`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputLayout {
    /// LIBSVM: whether the indices were 0-based (some part had an index 0).
    pub zero_based: bool,
    /// CSV: columns of a row (the label and the features).
    pub csv_columns: Option<u32>,
    /// CSV: the delimiter, the header rule and the label's column.
    pub csv: Option<CsvDialect>,
    /// MovieLens: the original ids of the dense user and item ids.
    pub ids: Option<IdMap>,
}

/// [`parse_files`], also returning how the input was read.
pub fn parse_files_with_layout<P: AsRef<Path>>(
    paths: &[P],
    format: InputFormat,
    options: &ParseOptions,
) -> Result<(Vec<Parsed>, InputLayout), ParseError> {
    let mut inputs = Vec::with_capacity(paths.len());
    for path in paths {
        let path = path.as_ref();
        inputs.push((open_input(path)?, input_name(path)));
    }
    parse_readers_with_layout(inputs, format, options)
}

/// [`parse_files_with_layout`] of inputs already opened (with [`open_input`], or
/// [`decompressed`] from elsewhere), each with the name its errors give it.
pub fn parse_readers_with_layout<R: BufRead>(
    inputs: Vec<(R, PathBuf)>,
    format: InputFormat,
    options: &ParseOptions,
) -> Result<(Vec<Parsed>, InputLayout), ParseError> {
    let (readers, names): (Vec<R>, Vec<PathBuf>) = inputs.into_iter().unzip();
    let inputs = readers
        .into_iter()
        .zip(names.iter().map(PathBuf::as_path))
        .collect();
    let (parsed, layout, _) = parse_inputs(inputs, format, options, None)?;
    Ok((parsed, layout))
}

/// Parses input from `reader`; `path` names it in errors.
pub fn parse_reader(
    reader: impl BufRead,
    path: &Path,
    format: InputFormat,
    options: &ParseOptions,
) -> Result<Parsed, ParseError> {
    let mut parsed = parse_inputs(vec![(reader, path)], format, options, None)?.0;
    Ok(parsed.pop().expect("one input, one result"))
}

/// Where the sparse parsers hand the rows they read, a chunk at a time, so that an input need
/// never be whole in memory (see [`stream_sparse`]).
pub trait RowSink {
    /// Takes the rows of input `part` (its index among the inputs) read since the last call,
    /// in input order and as written: labels not yet mapped, LIBSVM indices in the input's own
    /// base ([`SparseSchema::apply`] makes them final). The caller clears `rows` afterwards.
    /// `starts[r]` is the byte offset in the (decompressed) input at which row `r`'s line
    /// starts: the row's position, which does not depend on how the input is read.
    fn take(&mut self, part: usize, rows: &mut SparseBatch, starts: &[u64]) -> io::Result<()>;
}

/// What turns the rows a [`RowSink`] received into final rows, and what the data set's
/// manifest says of them: known only once every input was read.
#[derive(Debug, Clone, PartialEq)]
pub struct SparseSchema {
    /// Dimension of the feature space.
    pub features: u32,
    /// How the labels are mapped to 0/1, if they are.
    pub label_map: Option<LabelMap>,
    /// The range of the labels over every part, with their input lines.
    pub labels: Option<LabelRange>,
    /// Whether the indices as read are 1-based (LIBSVM), so one less is the final index.
    pub one_based: bool,
    /// Rows of each input, in the order of the inputs.
    pub samples: Vec<u64>,
}

impl SparseSchema {
    /// Makes rows handed to a [`RowSink`] final: maps their labels and rebases their indices.
    pub fn apply(&self, rows: &mut SparseBatch) {
        if let Some(map) = self.label_map {
            apply_label_map(map, &mut rows.labels);
        }
        if self.one_based {
            rows.indices.iter_mut().for_each(|i| *i -= 1);
        }
    }
}

/// Parses sparse inputs (LIBSVM, CSV or Criteo) as parts of one data set, like
/// [`parse_readers_with_layout`], but hands their rows to `sink` as they are read instead of
/// keeping them: memory stays bounded whatever the input's size. Returns what makes the rows
/// final and how the input was read. MovieLens ratings are refused (their ids are remapped over
/// the whole input).
pub fn stream_sparse<R: BufRead>(
    inputs: Vec<(R, PathBuf)>,
    format: InputFormat,
    options: &ParseOptions,
    sink: &mut dyn RowSink,
) -> Result<(SparseSchema, InputLayout), ParseError> {
    if format == InputFormat::Movielens {
        let path = inputs.first().map(|i| i.1.clone()).unwrap_or_default();
        return Err(ParseError::Invalid {
            path,
            message: "ratings are read whole, not streamed".into(),
        });
    }
    let (readers, names): (Vec<R>, Vec<PathBuf>) = inputs.into_iter().unzip();
    let inputs = readers
        .into_iter()
        .zip(names.iter().map(PathBuf::as_path))
        .collect();
    let (parsed, layout, samples) = parse_inputs(inputs, format, options, Some(sink))?;
    let Some(Parsed::Sparse {
        features,
        label_map,
        labels,
        ..
    }) = parsed.into_iter().next()
    else {
        unreachable!("sparse formats give sparse parts, one per input")
    };
    let schema = SparseSchema {
        features,
        label_map,
        labels,
        one_based: format == InputFormat::Libsvm && !layout.zero_based,
        samples,
    };
    Ok((schema, layout))
}

/// The parts read by [`parse_inputs`], how they were read, and the rows of each.
type ReadParts = (Vec<Parsed>, InputLayout, Vec<u64>);

/// Reads every input with the format's reader, checks each holds samples, then reconciles
/// their schemas with the format's `finish`. With a sink, the sparse rows go to it, and the
/// parts returned hold none.
fn parse_inputs<R: BufRead>(
    inputs: Vec<(R, &Path)>,
    format: InputFormat,
    options: &ParseOptions,
    mut sink: Option<&mut dyn RowSink>,
) -> Result<ReadParts, ParseError> {
    type Parts<'p, T> = (Vec<(Ctx<'p>, T)>, Vec<u64>);
    fn read_all<'p, R: BufRead, T>(
        inputs: Vec<(R, &'p Path)>,
        sink: &mut Option<&mut dyn RowSink>,
        mut read: impl FnMut(&mut Lines<'p, '_, R>) -> Result<T, ParseError>,
        samples: impl Fn(&T) -> usize,
    ) -> Result<Parts<'p, T>, ParseError> {
        let mut out = Vec::with_capacity(inputs.len());
        let mut counts = Vec::with_capacity(inputs.len());
        for (part, (reader, path)) in inputs.into_iter().enumerate() {
            let mut lines = Lines::new(reader, path);
            if let Some(sink) = sink {
                let sink: &mut dyn RowSink = &mut **sink;
                lines.out.sink = Some((sink, part));
            }
            let raw = read(&mut lines)?;
            let count = samples(&raw) as u64 + lines.out.handed;
            if count == 0 {
                return Err(ParseError::Empty {
                    path: path.to_path_buf(),
                });
            }
            counts.push(count);
            out.push((lines.ctx, raw));
        }
        Ok((out, counts))
    }
    match format {
        InputFormat::Libsvm => {
            let (raws, counts) = read_all(
                inputs,
                &mut sink,
                |l| libsvm::read(l, options),
                libsvm::Raw::samples,
            )?;
            let (parsed, zero_based) = libsvm::finish(raws, options)?;
            let layout = InputLayout {
                zero_based,
                ..InputLayout::default()
            };
            Ok((parsed, layout, counts))
        }
        InputFormat::Csv => {
            let (raws, counts) = read_all(
                inputs,
                &mut sink,
                |l| csv::read(l, &options.csv),
                csv::Raw::samples,
            )?;
            let (parsed, columns, dialect) = csv::finish(raws, options)?;
            let layout = InputLayout {
                csv_columns: Some(columns),
                csv: Some(dialect),
                ..InputLayout::default()
            };
            Ok((parsed, layout, counts))
        }
        InputFormat::Movielens => {
            let (raws, counts) = read_all(inputs, &mut None, movielens::read, RatingBatch::len)?;
            let (parsed, ids) = movielens::finish(raws);
            let layout = InputLayout {
                ids: Some(ids),
                ..InputLayout::default()
            };
            Ok((parsed, layout, counts))
        }
        InputFormat::Criteo => {
            let features = criteo::features(inputs.first().map(|i| i.1), options)?;
            let (raws, counts) = read_all(
                inputs,
                &mut sink,
                |l| criteo::read(l, features),
                Parsed::samples,
            )?;
            let mut parsed: Vec<Parsed> = raws.into_iter().map(|(_, parsed)| parsed).collect();
            // Each part knows the range of its own labels: every part gets the range of all.
            let labels = parsed
                .iter()
                .filter_map(Parsed::label_range)
                .cloned()
                .reduce(|mut all, part| {
                    widen(&mut all, part);
                    all
                });
            for part in &mut parsed {
                if let Parsed::Sparse { labels: range, .. } = part {
                    range.clone_from(&labels);
                }
            }
            Ok((parsed, InputLayout::default(), counts))
        }
    }
}

/// Builds errors that name the input.
#[derive(Clone, Copy)]
struct Ctx<'p> {
    path: &'p Path,
}

impl Ctx<'_> {
    fn line(&self, line: u64, message: impl Into<String>) -> ParseError {
        ParseError::Line {
            path: self.path.to_path_buf(),
            line,
            message: message.into(),
        }
    }

    /// The label `field` of line `line`: a finite number.
    fn label(&self, line: u64, field: &str) -> Result<f32, ParseError> {
        parse_finite(field).ok_or_else(|| {
            self.line(
                line,
                format!("expected a numeric label, found {}", quoted(field)),
            )
        })
    }

    fn invalid(&self, message: impl Into<String>) -> ParseError {
        ParseError::Invalid {
            path: self.path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// Hands the rows a sparse parser reads to a [`RowSink`], when there is one, a chunk at a
/// time, each with its position: the byte offset at which its record starts in the
/// (decompressed) input. The one way rows reach the sink, whether the parser reads lines
/// ([`Lines`]) or CSV records.
struct Handover<'s> {
    /// Where the rows go, with the index of this input among the parts.
    sink: Option<(&'s mut dyn RowSink, usize)>,
    /// Rows handed to the sink so far.
    handed: u64,
    /// With a sink: where each row not yet handed over starts.
    starts: Vec<u64>,
}

/// Rows a parser holds before it hands them to a [`RowSink`].
const SINK_CHUNK_ROWS: usize = 4096;

impl Handover<'_> {
    /// Closes the current row of `rows` (see [`end_row`]), read at line `line` from byte
    /// `start` on, and hands the rows to the sink once a chunk of them is there.
    fn end_row(
        &mut self,
        rows: &mut SparseBatch,
        ctx: Ctx<'_>,
        line: u64,
        start: u64,
    ) -> Result<(), ParseError> {
        end_row(rows, ctx, line)?;
        if self.sink.is_some() {
            self.starts.push(start);
            if rows.rows() >= SINK_CHUNK_ROWS {
                self.hand_over(rows, ctx)?;
            }
        }
        Ok(())
    }

    /// Hands every row of `rows` to the sink, if there is one (at the end of the input).
    fn hand_over(&mut self, rows: &mut SparseBatch, ctx: Ctx<'_>) -> Result<(), ParseError> {
        let Some((sink, part)) = self.sink.as_mut() else {
            return Ok(());
        };
        let count = rows.rows() as u64;
        if count == 0 {
            return Ok(());
        }
        sink.take(*part, rows, &self.starts)
            .map_err(|error| ParseError::Spill {
                path: ctx.path.to_path_buf(),
                error,
            })?;
        rows.labels.clear();
        rows.offsets.truncate(1);
        rows.indices.clear();
        rows.values.clear();
        self.starts.clear();
        self.handed += count;
        Ok(())
    }
}

/// Reads lines into one reused buffer, numbering them from 1; the rows read go through its
/// [`Handover`], each at the offset at which its line starts.
struct Lines<'p, 's, R> {
    reader: R,
    buf: Vec<u8>,
    number: u64,
    ctx: Ctx<'p>,
    out: Handover<'s>,
    /// Bytes read so far, and the offset at which the last line read starts.
    offset: u64,
    line_start: u64,
}

impl<'p, 's, R: BufRead> Lines<'p, 's, R> {
    fn new(reader: R, path: &'p Path) -> Self {
        Self {
            reader,
            buf: Vec::with_capacity(4096),
            number: 0,
            ctx: Ctx { path },
            out: Handover {
                sink: None,
                handed: 0,
                starts: Vec::new(),
            },
            offset: 0,
            line_start: 0,
        }
    }

    /// Closes the current row of `rows`, read from the last line (number `line`); see
    /// [`Handover::end_row`].
    fn end_row(&mut self, rows: &mut SparseBatch, line: u64) -> Result<(), ParseError> {
        self.out.end_row(rows, self.ctx, line, self.line_start)
    }

    /// Hands every row of `rows` to the sink, if there is one (at the end of the input).
    fn hand_over(&mut self, rows: &mut SparseBatch) -> Result<(), ParseError> {
        self.out.hand_over(rows, self.ctx)
    }

    /// The input itself, unread, and the handover of its rows: for a parser that reads records
    /// rather than lines (CSV), and gives each row its own start.
    fn records(&mut self) -> (&mut R, &mut Handover<'s>) {
        (&mut self.reader, &mut self.out)
    }

    /// The next line without its line terminator (`\n` or `\r\n`), with its number.
    fn next_line(&mut self) -> Result<Option<(u64, &str)>, ParseError> {
        self.buf.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.buf)
            .map_err(|error| ParseError::Io {
                path: self.ctx.path.to_path_buf(),
                error,
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.line_start = self.offset;
        self.offset += n as u64;
        self.number += 1;
        let mut line = &self.buf[..];
        if let [rest @ .., b'\n'] = line {
            line = rest;
        }
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        if self.number == 1 {
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        match std::str::from_utf8(line) {
            Ok(s) => Ok(Some((self.number, s))),
            Err(_) => Err(self.ctx.line(self.number, "line is not valid UTF-8")),
        }
    }
}

/// Parses a finite `f32`.
/// The most characters of an offending input that an error quotes ([`quoted`]).
pub const QUOTED_CHARS: usize = 64;

/// A piece of input as an error message shows it: quoted (as `{:?}` does), and cut after
/// [`QUOTED_CHARS`] characters with `…` after the closing quote, so that a huge token or a
/// runaway field never makes a huge message.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{:?}…", &text[..cut]),
        None => format!("{text:?}"),
    }
}

fn parse_finite(s: &str) -> Option<f32> {
    s.parse::<f32>().ok().filter(|v| v.is_finite())
}

/// The sparse parts of `features` features read from the inputs, each rows with the set of
/// its labels and its input; the labels of all parts mapped to 0/1 if exactly two values occur
/// over all of them.
fn sparse_parts(mut parts: Vec<(SparseBatch, LabelSet, &Path)>, features: u32) -> Vec<Parsed> {
    let mut all = LabelSet::default();
    for (_, set, _) in &parts {
        all.merge(set);
    }
    let label_map = all.binary_map();
    let sets: Vec<_> = parts.iter().map(|(_, set, path)| (set, *path)).collect();
    let labels = label_range(&sets, label_map);
    if let Some(map) = label_map {
        for (rows, _, _) in &mut parts {
            apply_label_map(map, &mut rows.labels);
        }
    }
    parts
        .into_iter()
        .map(|(rows, _, _)| Parsed::Sparse {
            rows,
            features,
            label_map,
            labels: labels.clone(),
        })
        .collect()
}

/// Closes the current row of `rows` (whose entries were pushed to `indices`/`values`).
fn end_row(rows: &mut SparseBatch, ctx: Ctx<'_>, line: u64) -> Result<(), ParseError> {
    let end = u32::try_from(rows.indices.len()).map_err(|_| {
        ctx.line(
            line,
            "more than 2^32 - 1 feature values in the input: split it into several files",
        )
    })?;
    rows.offsets.push(end);
    Ok(())
}

/// Replaces ids by dense ids `0..n` in ascending order of the original id; returns the `n`
/// distinct original ids, ascending (dense id `d` was `distinct[d]`).
fn dense_remap(ids: &mut [u32]) -> Vec<u32> {
    let Some(&max) = ids.iter().max() else {
        return Vec::new();
    };
    let max = max as usize;
    // A lookup table when it is not much bigger than the ids themselves, else sort and search.
    if max < ids.len().saturating_mul(4).max(1 << 20) {
        let mut table = vec![u32::MAX; max + 1];
        for &id in ids.iter() {
            table[id as usize] = 0;
        }
        let mut distinct = Vec::new();
        for (original, slot) in table.iter_mut().enumerate() {
            if *slot == 0 {
                *slot = distinct.len() as u32;
                distinct.push(original as u32);
            }
        }
        for id in ids.iter_mut() {
            *id = table[*id as usize];
        }
        distinct
    } else {
        let mut distinct = ids.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        for id in ids.iter_mut() {
            *id = distinct
                .binary_search(id)
                .expect("every id is in the table") as u32;
        }
        distinct
    }
}

/// Remaps the ids of several parts jointly (see [`dense_remap`]); returns the distinct original
/// ids, ascending.
fn dense_remap_parts(parts: &mut [&mut Vec<u32>]) -> Vec<u32> {
    if let [only] = parts {
        return dense_remap(only);
    }
    let mut all: Vec<u32> = parts.iter().flat_map(|p| p.iter().copied()).collect();
    let n = dense_remap(&mut all);
    let mut rest = &all[..];
    for part in parts.iter_mut() {
        let (head, tail) = rest.split_at(part.len());
        part.copy_from_slice(head);
        rest = tail;
    }
    n
}

#[cfg(test)]
mod tests;
