//! CSV: dense numeric rows, read with the `csv` crate.
//!
//! Fields are separated by the delimiter (`,` unless [`CsvOptions::delimiter`] says another),
//! may be quoted (`"1.5"`; `"a,b"` in a header) and padded with spaces. Records end with `\n`
//! or `\r\n`; a UTF-8 BOM at the start and blank lines are skipped. The first row that is not
//! blank is a header, and skipped, as [`CsvOptions::header`] says (by default: if some field of
//! it is not a number). The label is one column ([`CsvOptions::label_column`]: the first by
//! default, or another by its index or, with a header, its name); the features are the other
//! columns, in order. An empty field is a missing value and, like a zero, is left out of the
//! sparse row; the label may not be missing. Every row has the same number of columns;
//! features = columns - 1.
//!
//! A row's line is the line its record starts on, and its position (for a
//! [`RowSink`](super::RowSink)) the byte offset at which it starts.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, BufRead, Read};
use std::str::FromStr;

use ::csv::ByteRecord;
use mlless_core::SparseBatch;

use super::{
    Ctx, LabelSet, Lines, ParseError, ParseOptions, Parsed, parse_finite, quoted, sparse_parts,
};
use crate::manifest::{CsvDialect, CsvHeader};

/// How CSV input is read (`prepare --delimiter --header --label-column`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvOptions {
    /// The byte between fields (see [`parse_delimiter`]).
    pub delimiter: u8,
    /// Whether the first row that is not blank is a header.
    pub header: CsvHeader,
    /// Which column is the label.
    pub label_column: LabelColumn,
}

impl Default for CsvOptions {
    /// `,`, a detected header, the label first.
    fn default() -> Self {
        Self {
            delimiter: b',',
            header: CsvHeader::Auto,
            label_column: LabelColumn::Index(0),
        }
    }
}

/// The column of a CSV input that holds the label (`--label-column`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelColumn {
    /// By its index, from 0.
    Index(u32),
    /// By its name in the header (which the input must then have).
    Name(String),
}

impl Default for LabelColumn {
    /// The first column.
    fn default() -> Self {
        Self::Index(0)
    }
}

impl FromStr for LabelColumn {
    type Err = String;

    /// Digits are an index (from 0), anything else a name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err("expected a column index (from 0) or a name in the header".into());
        }
        if s.bytes().all(|b| b.is_ascii_digit()) {
            return s
                .parse()
                .map(Self::Index)
                .map_err(|_| format!("column index {s} is too large"));
        }
        Ok(Self::Name(s.to_string()))
    }
}

impl fmt::Display for LabelColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Index(i) => write!(f, "{i}"),
            Self::Name(name) => write!(f, "{name:?}"),
        }
    }
}

/// Parses a delimiter (`--delimiter`): one ASCII character, or `\t` or `tab` for a tab. A
/// double quote (the quote) and a line end are refused.
pub fn parse_delimiter(s: &str) -> Result<u8, String> {
    if s == "\\t" || s.eq_ignore_ascii_case("tab") {
        return Ok(b'\t');
    }
    match s.as_bytes() {
        [b'"' | b'\n' | b'\r'] => Err(format!("{s:?} cannot be the delimiter")),
        [byte] if byte.is_ascii() => Ok(*byte),
        _ => Err(format!(
            "expected one ASCII character (or \\t or tab for a tab), not {s:?}"
        )),
    }
}

/// One input as read.
pub(super) struct Raw {
    rows: SparseBatch,
    labels: LabelSet,
    /// Columns, label included (0 if the input has no row).
    columns: usize,
    /// The label's column, from 0.
    label: usize,
}

impl Raw {
    pub(super) fn samples(&self) -> usize {
        self.rows.rows()
    }
}

/// A UTF-8 byte order mark, which the `csv` crate skips at the start of its input.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Bytes the `csv` reader reads from its input at a time.
const BUFFER_BYTES: usize = 64 << 10;

/// A CSV input read a record at a time into one reused [`ByteRecord`] (no allocation per
/// record or field), skipping blank lines, with the line and byte offset each record starts
/// at.
pub(super) struct Records<'p, R> {
    reader: ::csv::Reader<Marked<R>>,
    /// The record last read by [`Records::next`]; its fields are not trimmed ([`field`]).
    pub(super) record: ByteRecord,
    ctx: Ctx<'p>,
}

impl<'p, R: Read> Records<'p, R> {
    /// Reads `reader`, named by `ctx` in errors, with fields separated by `delimiter`.
    pub(super) fn new(reader: R, ctx: Ctx<'p>, delimiter: u8) -> Self {
        let reader = ::csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(delimiter)
            .buffer_capacity(BUFFER_BYTES)
            .from_reader(Marked {
                inner: reader,
                read: 0,
                ends: VecDeque::new(),
                bom: false,
            });
        Self {
            reader,
            record: ByteRecord::new(),
            ctx,
        }
    }

    /// Reads the next record that is not blank into [`Self::record`]; returns the line it
    /// starts on (from 1) and the byte offset it starts at, or `None` at the end of the input.
    pub(super) fn next(&mut self) -> Result<Option<(u64, u64)>, ParseError> {
        loop {
            let more = self
                .reader
                .read_byte_record(&mut self.record)
                .map_err(|error| self.error(error))?;
            if !more {
                return Ok(None);
            }
            let start = self.start();
            let blank = match self.record.len() {
                0 => true,
                1 => field(&self.record[0]).is_empty(),
                _ => false,
            };
            if !blank {
                return Ok(Some(start));
            }
        }
    }

    /// The fields of the record just read (at line `no`), trimmed; an error naming the line
    /// if it is not UTF-8. (The record is checked once, then cut at its fields' bounds, which
    /// fall between characters: the delimiter is ASCII.)
    pub(super) fn fields(&self, no: u64) -> Result<impl Iterator<Item = &str>, ParseError> {
        let record = &self.record;
        let text = std::str::from_utf8(record.as_slice())
            .map_err(|_| self.ctx.line(no, "line is not valid UTF-8"))?;
        Ok((0..record.len()).map(move |i| {
            text.get(record.range(i).unwrap_or_default())
                .unwrap_or_default()
                .trim_ascii()
        }))
    }

    /// The line and byte offset at which the record just read starts. The `csv` crate's
    /// position of a record is where the record before it ended, which is before its `\n` (of
    /// a `\r\n`) and any blank lines between them: those terminators are skipped here (and a
    /// BOM, when a blank line follows it).
    fn start(&mut self) -> (u64, u64) {
        let (mut line, mut start) = self
            .record
            .position()
            .map_or((1, 0), |p| (p.line(), p.byte()));
        let marked = self.reader.get_mut();
        let from = if start == 0 && marked.bom {
            BOM.len() as u64
        } else {
            start
        };
        let (mut at, mut newlines) = (from, 0);
        while let Some(&end) = marked.ends.front() {
            let offset = end >> 1;
            if offset > at {
                break;
            }
            if offset == at {
                at += 1;
                newlines += end & 1;
            }
            marked.ends.pop_front();
        }
        if at != from {
            start = at;
            line += newlines;
        }
        (line, start)
    }

    /// The parse error of a failed read.
    fn error(&self, error: ::csv::Error) -> ParseError {
        let path = self.ctx.path.to_path_buf();
        let message = error.to_string();
        match error.into_kind() {
            ::csv::ErrorKind::Io(error) => ParseError::Io { path, error },
            // Byte records read flexibly fail only on I/O.
            _ => ParseError::Invalid { path, message },
        }
    }
}

/// The input of the `csv` reader: passes its bytes on, noting the offsets of the line
/// terminators not yet behind the record being read (those of the `csv` reader's buffer,
/// bounded by its size) so that [`Records::start`] can tell where a record really starts.
struct Marked<R> {
    inner: R,
    /// Bytes passed on so far.
    read: u64,
    /// The offset of each `\r` and `\n` passed on, in order, shifted left by one, with the
    /// low bit set for a `\n`.
    ends: VecDeque<u64>,
    /// Whether the input starts with a BOM (which the `csv` reader skips).
    bom: bool,
}

impl<R: Read> Read for Marked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let bytes = &buf[..n];
        if self.read == 0 && bytes.starts_with(BOM) {
            self.bom = true;
        }
        for i in memchr::memchr2_iter(b'\n', b'\r', bytes) {
            let newline = u64::from(bytes[i] == b'\n');
            self.ends.push_back(((self.read + i as u64) << 1) | newline);
        }
        self.read += n as u64;
        Ok(n)
    }
}

/// A field without its padding (ASCII spaces and tabs around it).
pub(super) fn field(raw: &[u8]) -> &[u8] {
    raw.trim_ascii()
}

/// Whether the first row of a CSV input is a header: what `header` says, and for
/// [`CsvHeader::Auto`], whether some field of it is not a number.
pub(super) fn is_header(header: CsvHeader, record: &ByteRecord) -> bool {
    match header {
        CsvHeader::Present => true,
        CsvHeader::Absent => false,
        CsvHeader::Auto => record.iter().map(field).any(|f| {
            !f.is_empty()
                && std::str::from_utf8(f)
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                    .is_none()
        }),
    }
}

/// The label of line `no`, the (trimmed) field in column `column` (from 0, as `--label-column`
/// counts, and as the messages say): present and a
/// finite number.
pub(super) fn label(ctx: Ctx<'_>, no: u64, column: usize, field: &str) -> Result<f32, ParseError> {
    if field.is_empty() {
        return Err(ctx.line(no, format!("missing label in column {column} (from 0)")));
    }
    parse_finite(field).ok_or_else(|| {
        ctx.line(
            no,
            format!(
                "expected a numeric label in column {column} (from 0), found {}",
                quoted(field)
            ),
        )
    })
}

/// The value of the (trimmed, not empty) field in column `column` (from 0) of line `no`: a
/// finite number.
pub(super) fn value(ctx: Ctx<'_>, no: u64, column: usize, field: &str) -> Result<f32, ParseError> {
    parse_finite(field).ok_or_else(|| {
        ctx.line(
            no,
            format!(
                "expected a number in column {column} (from 0), found {}",
                quoted(field)
            ),
        )
    })
}

/// The columns of the rows and the label's, from the first row of an input (line `no`), and
/// whether that row is a header.
fn first_row(
    ctx: Ctx<'_>,
    no: u64,
    record: &ByteRecord,
    options: &CsvOptions,
) -> Result<(usize, usize, bool), ParseError> {
    let header = is_header(options.header, record);
    let columns = record.len();
    if columns < 2 {
        return Err(ctx.line(
            no,
            format!(
                "CSV input needs a label column and at least one feature column, found \
                 {columns} column (fields separated by {:?}: see --delimiter)",
                char::from(options.delimiter)
            ),
        ));
    }
    let label = match &options.label_column {
        LabelColumn::Index(index) => {
            let index = *index as usize;
            if index >= columns {
                return Err(ctx.line(
                    no,
                    format!(
                        "--label-column {index} is beyond the {columns} columns of the rows \
                         (indices from 0 to {})",
                        columns - 1
                    ),
                ));
            }
            index
        }
        LabelColumn::Name(name) if !header => {
            let why = if options.header == CsvHeader::Absent {
                "--header false says the input has none".to_string()
            } else {
                "its first row (this line) is all numbers; --header true reads it as one"
                    .to_string()
            };
            return Err(ctx.line(
                no,
                format!("--label-column {name:?} names a column of the header, but {why}"),
            ));
        }
        LabelColumn::Name(name) => {
            let names: Vec<String> = record
                .iter()
                .map(|f| String::from_utf8_lossy(field(f)).into_owned())
                .collect();
            let mut at = names.iter().enumerate().filter(|(_, n)| *n == name);
            match (at.next(), at.next()) {
                (Some((index, _)), None) => index,
                (Some((first, _)), Some((second, _))) => {
                    return Err(ctx.line(
                        no,
                        format!(
                            "the header names two columns {name:?} (indices {first} and \
                             {second}): give --label-column the index of the label's"
                        ),
                    ));
                }
                (None, _) => {
                    const SHOWN: usize = 20;
                    let mut list: Vec<String> =
                        names.iter().take(SHOWN).map(|n| format!("{n:?}")).collect();
                    if names.len() > SHOWN {
                        list.push(format!("… ({} in all)", names.len()));
                    }
                    return Err(ctx.line(
                        no,
                        format!(
                            "--label-column {name:?} is not a column of the header, whose \
                             columns are {}",
                            list.join(", ")
                        ),
                    ));
                }
            }
        }
    };
    Ok((columns, label, header))
}

pub(super) fn read<R: BufRead>(
    lines: &mut Lines<'_, '_, R>,
    options: &CsvOptions,
) -> Result<Raw, ParseError> {
    let ctx = lines.ctx;
    let (reader, out) = lines.records();
    let mut records = Records::new(reader, ctx, options.delimiter);
    let mut rows = SparseBatch::new();
    let mut labels = LabelSet::default();
    // The columns and the label's column, once the first row is read.
    let mut shape: Option<(usize, usize)> = None;

    while let Some((no, start)) = records.next()? {
        let record = &records.record;
        let (columns, label_at) = match shape {
            Some(shape) => shape,
            None => {
                let (columns, label_at, header) = first_row(ctx, no, record, options)?;
                shape = Some((columns, label_at));
                if header {
                    continue;
                }
                (columns, label_at)
            }
        };
        if record.len() != columns {
            return Err(ctx.line(
                no,
                format!("expected {columns} columns, found {}", record.len()),
            ));
        }
        for (column, f) in records.fields(no)?.enumerate() {
            if column == label_at {
                let label = label(ctx, no, column, f)?;
                labels.observe(label, no);
                rows.labels.push(label);
                continue;
            }
            if f.is_empty() {
                continue;
            }
            let value = value(ctx, no, column, f)?;
            if value != 0.0 {
                let feature = column - usize::from(column > label_at);
                let index =
                    u32::try_from(feature).map_err(|_| ctx.line(no, "more than 2^32 columns"))?;
                rows.indices.push(index);
                rows.values.push(value);
            }
        }
        out.end_row(&mut rows, ctx, no, start)?;
    }

    out.hand_over(&mut rows, ctx)?;
    let (columns, label) = shape.unwrap_or((0, 0));
    Ok(Raw {
        rows,
        labels,
        columns,
        label,
    })
}

/// Checks that all inputs have the same columns, with the label in the same one, and maps
/// their labels jointly. Returns the parts, their number of columns and how they were read.
pub(super) fn finish(
    raws: Vec<(Ctx<'_>, Raw)>,
    options: &ParseOptions,
) -> Result<(Vec<Parsed>, u32, CsvDialect), ParseError> {
    let (first_ctx, first) = &raws[0];
    let first_path = first_ctx.path.display();
    for (ctx, raw) in &raws[1..] {
        let differs = if raw.columns != first.columns {
            format!(
                "{} columns, but {first_path} has {}",
                raw.columns, first.columns
            )
        } else if raw.label != first.label {
            format!(
                "the label is column {} (from 0), but in {first_path} it is column {}",
                raw.label, first.label
            )
        } else {
            continue;
        };
        return Err(ctx.invalid(differs));
    }
    let ctx = *first_ctx;
    let columns_features =
        u32::try_from(first.columns - 1).map_err(|_| ctx.invalid("more than 2^32 columns"))?;
    let dialect = CsvDialect {
        delimiter: options.csv.delimiter,
        header: options.csv.header,
        label_column: first.label as u32,
    };
    let features = match options.features {
        None => columns_features,
        Some(f) if f >= columns_features => f,
        Some(f) => {
            return Err(ctx.invalid(format!(
                "the input has {columns_features} feature columns, more than the {f} features asked for"
            )));
        }
    };
    let parts = raws
        .into_iter()
        .map(|(ctx, r)| (r.rows, r.labels, ctx.path))
        .collect();
    let parsed = sparse_parts(parts, features);
    Ok((parsed, columns_features + 1, dialect))
}

#[cfg(test)]
mod tests;
