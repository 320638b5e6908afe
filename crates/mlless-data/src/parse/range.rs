//! Parsing one byte range of a large input on its own, as a function of a distributed
//! `prepare` does: the lines that start in the range ([`LineRange`]), their rows handed to a
//! [`RowSink`], and what they say of the schema ([`RangeSchema`]). Merged in input order
//! ([`merge_ranges`]), the ranges' schemas are the one the whole input gives when it is read at
//! once ([`stream_sparse`](super::stream_sparse)): the same dimension, index base, label map
//! and label range, with the same line numbers.

use std::io::{self, BufRead, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{
    Ctx, InputFormat, InputLayout, LabelSet, Lines, ParseError, ParseOptions, Parsed, RowSink,
    SparseSchema, criteo, label_range, libsvm,
};

/// What the lines of one byte range said of the input's schema (LIBSVM or Criteo).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RangeSchema {
    /// Rows read.
    pub rows: u64,
    /// Lines read, blank and comment lines included: what the line numbers of the next range
    /// start after.
    pub lines: u64,
    labels: LabelSet,
    saw_zero: bool,
    max_index: Option<u32>,
    first_at_limit: Option<u64>,
}

/// Parses the lines of `reader` (a [`LineRange`] of an input in `format`), handing their rows
/// to `sink` as part 0, each at the offset of its line in `reader`. `name` names the range in
/// errors, whose line numbers count from its first line. CSV and ratings are refused: a CSV
/// record may span lines, and ratings are read whole.
pub fn stream_range<R: BufRead>(
    reader: R,
    name: &Path,
    format: InputFormat,
    options: &ParseOptions,
    sink: &mut dyn RowSink,
) -> Result<RangeSchema, ParseError> {
    let mut lines = Lines::new(reader, name);
    lines.out.sink = Some((sink, 0));
    let mut schema = match format {
        InputFormat::Libsvm => {
            let raw = libsvm::read(&mut lines, options)?;
            let (labels, saw_zero, max_index, first_at_limit) = libsvm::summary(raw);
            RangeSchema {
                labels,
                saw_zero,
                max_index,
                first_at_limit,
                ..RangeSchema::default()
            }
        }
        InputFormat::Criteo => {
            let features = criteo::features(Some(name), options)?;
            let mut labels = LabelSet::default();
            if let Parsed::Sparse {
                labels: Some(range),
                ..
            } = criteo::read(&mut lines, features)?
            {
                // Criteo's labels are 0 or 1: the range says all there is to say of them.
                labels.observe(range.min.label, range.min.line);
                labels.observe(range.max.label, range.max.line);
            }
            RangeSchema {
                labels,
                ..RangeSchema::default()
            }
        }
        InputFormat::Csv | InputFormat::Movielens => {
            return Err(lines.ctx.invalid(format!(
                "{format} input is not read in byte ranges (only libsvm and criteo are)"
            )));
        }
    };
    schema.rows = lines.out.handed;
    schema.lines = lines.number;
    Ok(schema)
}

/// Merges the schemas of the byte ranges of an input into the input's: what
/// [`stream_sparse`](super::stream_sparse) returns for it, read with `options` in `format`, line
/// numbers counted over each file. The input is one file or several (the parts of a prefix),
/// each given in order with its name and its consecutive ranges in order.
///
/// # Errors
///
/// [`ParseError::Empty`] when a file has no row; the errors of the format's schema (a LIBSVM
/// index at the `--features` limit in 0-based input, a Criteo input without `--features`).
pub fn merge_ranges(
    format: InputFormat,
    options: &ParseOptions,
    parts: &[(&Path, &[RangeSchema])],
) -> Result<(SparseSchema, InputLayout), ParseError> {
    let Some(&(first, _)) = parts.first() else {
        return Err(ParseError::Invalid {
            path: Default::default(),
            message: "an input of no file".into(),
        });
    };
    let mut sets = Vec::with_capacity(parts.len());
    let mut all = LabelSet::default();
    let (mut saw_zero, mut max_index, mut at_limit) = (false, None, None);
    let mut samples = Vec::with_capacity(parts.len());
    for &(name, ranges) in parts {
        let mut labels = LabelSet::default();
        let (mut before, mut rows) = (0, 0);
        for range in ranges {
            labels.merge_later(&range.labels, before);
            saw_zero |= range.saw_zero;
            max_index = max_index.max(range.max_index);
            if at_limit.is_none() {
                at_limit = range
                    .first_at_limit
                    .map(|line| (Ctx { path: name }, line + before));
            }
            before += range.lines;
            rows += range.rows;
        }
        if rows == 0 {
            return Err(ParseError::Empty {
                path: name.to_path_buf(),
            });
        }
        all.merge(&labels);
        sets.push((labels, name));
        samples.push(rows);
    }
    let (features, label_map) = match format {
        InputFormat::Libsvm => {
            let ctx = Ctx { path: first };
            let features = libsvm::dimension(ctx, options.features, saw_zero, at_limit, max_index)?;
            (features, all.binary_map())
        }
        _ => (criteo::features(Some(first), options)?, None),
    };
    let libsvm = format == InputFormat::Libsvm;
    let sets: Vec<(&LabelSet, &Path)> = sets.iter().map(|(set, name)| (set, *name)).collect();
    let schema = SparseSchema {
        features,
        label_map,
        labels: label_range(&sets, label_map),
        one_based: libsvm && !saw_zero,
        samples,
    };
    let layout = InputLayout {
        zero_based: libsvm && saw_zero,
        ..InputLayout::default()
    };
    Ok((schema, layout))
}

/// The lines of an input that start in the byte range `start..end`: how the map tasks of a
/// distributed `prepare` split one input between them, each line read by exactly one of them.
///
/// The reader it wraps starts at byte `start - 1` (at byte 0 when `start` is 0): the line that
/// byte is in belongs to the range before, and is skipped. The last line is read to its end,
/// past `end` if it goes on.
pub struct LineRange<R> {
    inner: R,
    /// The offset in the input of the next byte of `inner`.
    offset: u64,
    end: u64,
    /// Once found: the offset just past the line ending at or after `end - 1`.
    stop: Option<u64>,
    first: u64,
}

impl<R: BufRead> LineRange<R> {
    /// The lines of `inner` that start in `start..end` (`inner` starting at `start - 1`).
    ///
    /// # Errors
    ///
    /// The failure of `inner` while skipping the end of the range before's last line.
    pub fn new(mut inner: R, start: u64, end: u64) -> io::Result<Self> {
        let mut offset = start;
        if start > 0 {
            // The end of the line that byte start - 1 is in, that line's newline included.
            offset = start - 1;
            loop {
                let buf = inner.fill_buf()?;
                if buf.is_empty() {
                    break;
                }
                match memchr::memchr(b'\n', buf) {
                    Some(i) => {
                        inner.consume(i + 1);
                        offset += i as u64 + 1;
                        break;
                    }
                    None => {
                        let n = buf.len();
                        inner.consume(n);
                        offset += n as u64;
                    }
                }
            }
        }
        let stop = (offset >= end).then_some(offset);
        Ok(Self {
            inner,
            offset,
            end,
            stop,
            first: offset,
        })
    }

    /// The offset in the input of the range's first line (where it would be if it has none).
    pub fn first_line_offset(&self) -> u64 {
        self.first
    }
}

impl<R: BufRead> Read for LineRange<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let buf = self.fill_buf()?;
        let n = buf.len().min(out.len());
        out[..n].copy_from_slice(&buf[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for LineRange<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.stop.is_some_and(|stop| self.offset >= stop) {
            return Ok(&[]);
        }
        let buf = self.inner.fill_buf()?;
        if let Some(stop) = self.stop {
            let n = (stop - self.offset) as usize;
            return Ok(&buf[..n.min(buf.len())]);
        }
        // The newline that ends the last line: the first at or after byte end - 1.
        let from = (self.end.saturating_sub(1).saturating_sub(self.offset) as usize).min(buf.len());
        if let Some(i) = memchr::memchr(b'\n', &buf[from..]) {
            let stop = self.offset + (from + i) as u64 + 1;
            self.stop = Some(stop);
            return Ok(&buf[..from + i + 1]);
        }
        Ok(buf)
    }

    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.offset += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use mlless_core::SparseBatch;

    use super::*;

    /// The lines of `text` in `start..end`, read through a [`LineRange`].
    fn range(text: &[u8], start: u64, end: u64) -> (u64, Vec<u8>) {
        let from = start.saturating_sub(1) as usize;
        let mut lines = LineRange::new(&text[from..], start, end).expect("range");
        let mut out = Vec::new();
        lines.read_to_end(&mut out).expect("read");
        (lines.first_line_offset(), out)
    }

    #[test]
    fn ranges_cut_an_input_into_its_lines_each_once() {
        let text = b"a\nbb\n\nccc\ndddd\ne";
        for cuts in [
            vec![0, 16],
            vec![0, 1, 2, 16],
            vec![0, 5, 6, 9, 16],
            vec![0, 3, 4, 10, 16],
        ] {
            let mut joined = Vec::new();
            for pair in cuts.windows(2) {
                let (first, lines) = range(text, pair[0], pair[1]);
                assert!(first >= pair[0], "{cuts:?}: a line before the range");
                assert!(
                    first == 0 || text[first as usize - 1] == b'\n',
                    "{cuts:?}: not at a line start"
                );
                assert!(
                    lines.is_empty() || first < pair[1],
                    "{cuts:?}: a line after it"
                );
                assert_eq!(&text[first as usize..][..lines.len()], &lines[..]);
                joined.extend(lines);
            }
            assert_eq!(&joined[..], &text[..], "{cuts:?}");
        }
        // A range inside one long line has none of it.
        assert_eq!(range(b"abcdefgh\nx\n", 2, 5).1, b"");
    }

    /// Collects the rows handed to it.
    #[derive(Default)]
    struct Collect(SparseBatch, Vec<u64>);

    impl RowSink for Collect {
        fn take(&mut self, _: usize, rows: &mut SparseBatch, starts: &[u64]) -> io::Result<()> {
            for r in 0..rows.rows() {
                let (_, indices, values) = rows.row(r);
                self.0.push_row(rows.labels[r], indices, values);
            }
            self.1.extend_from_slice(starts);
            Ok(())
        }
    }

    #[test]
    fn merged_ranges_give_the_whole_inputs_schema() {
        // -1/+1 labels, 1-based, the largest label first seen on line 4, the smallest on 2.
        let text = b"# comment\n-1 1:1 3:2\n\n1 2:0.5\n-1 5:1\n1 1:1\n";
        let name = Path::new("a.svm");
        let options = ParseOptions::default();
        let mut whole_rows = Collect::default();
        let (whole, layout) = crate::parse::stream_sparse(
            vec![(&text[..], name.to_path_buf())],
            InputFormat::Libsvm,
            &options,
            &mut whole_rows,
        )
        .expect("whole");
        for cuts in [
            vec![0, 12, 30, text.len() as u64],
            vec![0, 1, 2, 40, 41, 44],
        ] {
            let mut schemas = Vec::new();
            let mut rows = Collect::default();
            for pair in cuts.windows(2) {
                let from = pair[0].saturating_sub(1) as usize;
                let lines = LineRange::new(&text[from..], pair[0], pair[1]).expect("range");
                let base = lines.first_line_offset();
                let mut part = Collect::default();
                let schema = stream_range(lines, name, InputFormat::Libsvm, &options, &mut part)
                    .expect("range");
                rows.1.extend(part.1.iter().map(|s| s + base));
                for r in 0..part.0.rows() {
                    let (_, i, v) = part.0.row(r);
                    rows.0.push_row(part.0.labels[r], i, v);
                }
                schemas.push(schema);
            }
            let (merged, merged_layout) =
                merge_ranges(InputFormat::Libsvm, &options, &[(name, &schemas)]).expect("merge");
            assert_eq!(merged, whole, "{cuts:?}");
            assert_eq!(merged_layout, layout);
            assert_eq!(
                (&rows.0, &rows.1),
                (&whole_rows.0, &whole_rows.1),
                "{cuts:?}"
            );
        }
        let labels = whole.labels.expect("labels");
        assert_eq!((labels.min.line, labels.max.line), (2, 4));
        assert!(whole.one_based && whole.features == 5);
    }

    #[test]
    fn merged_ranges_of_several_files_give_their_schema_read_together() {
        // The smallest label is in the second file, the largest in the third; only the second
        // file has an index 0 (so all are read 0-based) and the largest index.
        let texts: [&[u8]; 3] = [b"1 1:1\n2 2:1\n", b"\n0 0:1 9:1\n2 1:1\n", b"5 3:1\n"];
        let names = ["p0.svm", "p1.svm", "p2.svm"].map(Path::new);
        let options = ParseOptions::default();
        let inputs = texts.iter().zip(names).map(|(t, n)| (*t, n.to_path_buf()));
        let (whole, layout) = crate::parse::stream_sparse(
            inputs.collect(),
            InputFormat::Libsvm,
            &options,
            &mut Collect::default(),
        )
        .expect("whole");
        let mut parts = Vec::new();
        for (text, name) in texts.into_iter().zip(names) {
            // Each file cut in two at its middle byte.
            let cuts = [0, text.len() as u64 / 2, text.len() as u64];
            let mut schemas = Vec::new();
            for pair in cuts.windows(2) {
                let from = pair[0].saturating_sub(1) as usize;
                let lines = LineRange::new(&text[from..], pair[0], pair[1]).expect("range");
                let mut sink = Collect::default();
                schemas.push(
                    stream_range(lines, name, InputFormat::Libsvm, &options, &mut sink)
                        .expect("range"),
                );
            }
            parts.push(schemas);
        }
        let parts: Vec<(&Path, &[RangeSchema])> = names
            .iter()
            .zip(&parts)
            .map(|(n, r)| (*n, &r[..]))
            .collect();
        let (merged, merged_layout) =
            merge_ranges(InputFormat::Libsvm, &options, &parts).expect("merge");
        assert_eq!(merged, whole);
        assert_eq!(merged_layout, layout);
        let labels = whole.labels.expect("labels");
        assert_eq!((labels.min.input.as_str(), labels.min.line), ("p1.svm", 2));
        assert_eq!((labels.max.input.as_str(), labels.max.line), ("p2.svm", 1));
        assert_eq!((whole.features, &whole.samples[..]), (10, &[2, 2, 1][..]));
    }

    #[test]
    fn a_range_refuses_csv_and_an_empty_input_is_an_error() {
        let err = stream_range(
            &b"1,2\n"[..],
            Path::new("a.csv"),
            InputFormat::Csv,
            &ParseOptions::default(),
            &mut Collect::default(),
        )
        .expect_err("csv");
        assert!(err.to_string().contains("not read in byte ranges"), "{err}");
        let empty = RangeSchema::default();
        let ranges = [empty.clone(), empty];
        let err = merge_ranges(
            InputFormat::Libsvm,
            &ParseOptions::default(),
            &[(Path::new("a.svm"), &ranges)],
        )
        .expect_err("empty");
        assert!(matches!(err, ParseError::Empty { .. }), "{err}");
    }
}
