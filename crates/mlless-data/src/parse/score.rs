//! Reading input to score (`mlless predict`): any format `prepare` reads, read the way the
//! training input was read, with or without labels.
//!
//! A file has labels on every data line or on none; the first data line decides, and a later
//! line that differs is an error naming it. How a line without a label is recognised:
//!
//! | format | labelled line | line without a label |
//! | --- | --- | --- |
//! | LIBSVM | `label index:value …` (a bare label: a row without features) | its first token is `index:value` (so `1:0.5 3:1` has none) |
//! | CSV | the training file's columns, the label in its column | one column fewer: the features alone |
//! | MovieLens | `user item rating [timestamp]` | `user item` |
//! | Criteo | 40 tab-separated columns | 39 (no label column, as in Criteo's `test.txt`) |
//!
//! Blank lines and (LIBSVM) comments are skipped, as by the parsers. CSV is read as the data
//! set's was ([`CsvDialect`]): with its delimiter, its header rule and its label column.
//!
//! Labels are mapped with the data set's [`LabelMap`] (e.g. -1/+1 → 0/1); a label that is not
//! one of its two values is an error. Feature indices follow the data set's base (1-based
//! LIBSVM unless it was 0-based); an index beyond the data set's features is dropped and
//! counted in [`ScoringInput::ignored_features`]: the model has no weight for it. MovieLens ids
//! stay the original ones.

use std::io::{BufRead, Read};
use std::path::Path;

use mlless_core::{RatingBatch, SparseBatch};

use super::criteo::{CRITEO_CATEGORICAL, CRITEO_COLUMNS, push_features};
use super::csv::{Records, is_header};
use super::movielens::{for_each_line, parse_id, parse_rating};
use super::{Ctx, InputFormat, Lines, ParseError, end_row, quoted};
use crate::manifest::{CsvDialect, LabelMap};

/// How to read input to score: the data set's layout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoringLayout {
    /// The input format.
    pub format: InputFormat,
    /// Features of the data set (sparse formats): larger indices are dropped.
    pub features: u32,
    /// LIBSVM: whether indices are 0-based.
    pub zero_based: bool,
    /// CSV: columns of a labelled row (default: `features + 1`).
    pub csv_columns: Option<u32>,
    /// CSV: the delimiter, header rule and label column of the data set's input.
    pub csv: CsvDialect,
    /// How labels map to 0/1, if they were mapped.
    pub label_map: Option<LabelMap>,
}

/// The rows read, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum ScoringRows {
    /// Sparse rows (LIBSVM, CSV, Criteo): 0-based indices below the features; labels mapped
    /// as in training, or 0 when the input has none.
    Sparse(SparseBatch),
    /// Ratings with their *original* user and item ids; ratings are 0 when the input has none.
    Ratings(RatingBatch),
}

/// Input read for scoring.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoringInput {
    /// The samples.
    pub rows: ScoringRows,
    /// Whether the lines had labels (ratings).
    pub labelled: bool,
    /// The 1-based line of each sample.
    pub lines: Vec<u64>,
    /// Feature entries dropped because their index is beyond the data set's features.
    pub ignored_features: u64,
}

impl ScoringInput {
    /// Number of samples.
    pub fn samples(&self) -> usize {
        self.lines.len()
    }
}

/// Reads `path` for scoring (see the module doc): a file or standard input (`-`), decompressed
/// when it is gzip or zstd ([`open_input`](super::open_input)); an input without samples is an
/// error.
pub fn read_for_scoring(path: &Path, layout: &ScoringLayout) -> Result<ScoringInput, ParseError> {
    let reader = super::open_input(path)?;
    read_reader_for_scoring(reader, &super::input_name(path), layout)
}

/// [`read_for_scoring`] from a reader; `path` names it in errors.
pub fn read_reader_for_scoring(
    reader: impl BufRead,
    path: &Path,
    layout: &ScoringLayout,
) -> Result<ScoringInput, ParseError> {
    let mut state = State {
        ctx: Ctx { path },
        layout: *layout,
        rows: SparseBatch::new(),
        labelled: None,
        lines: Vec::new(),
        ignored: 0,
    };
    let rows = match layout.format {
        InputFormat::Csv => state.csv_rows(reader)?,
        format => {
            let mut lines = Lines::new(reader, path);
            match format {
                InputFormat::Libsvm => state.sparse_rows(&mut lines, State::libsvm_line)?,
                InputFormat::Criteo => {
                    let mut cats = Vec::with_capacity(CRITEO_CATEGORICAL);
                    state
                        .sparse_rows(&mut lines, |s, no, line| s.criteo_line(no, line, &mut cats))?
                }
                InputFormat::Movielens => ScoringRows::Ratings(movielens(&mut lines, &mut state)?),
                InputFormat::Csv => unreachable!("read above"),
            }
        }
    };
    if state.lines.is_empty() {
        return Err(ParseError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(ScoringInput {
        rows,
        labelled: state.labelled.is_some_and(|(labelled, _)| labelled),
        lines: state.lines,
        ignored_features: state.ignored,
    })
}

struct State<'p> {
    ctx: Ctx<'p>,
    layout: ScoringLayout,
    /// The sparse rows read so far (sparse formats).
    rows: SparseBatch,
    labelled: Option<(bool, u64)>,
    lines: Vec<u64>,
    ignored: u64,
}

impl State<'_> {
    /// Records that line `no` has (or has not) a label; errs when it differs from the first.
    fn label_presence(&mut self, no: u64, labelled: bool) -> Result<(), ParseError> {
        match self.labelled {
            None => self.labelled = Some((labelled, no)),
            Some((first, first_no)) if first != labelled => {
                let (has, hasnt) = if first { ("a ", "no ") } else { ("no ", "a ") };
                return Err(self.ctx.line(
                    no,
                    format!("{hasnt}label here, but line {first_no} had {has}label: a file has labels on every line or on none"),
                ));
            }
            Some(_) => {}
        }
        self.lines.push(no);
        Ok(())
    }

    /// The label `value` of line `no`, mapped with the data set's label map.
    fn map_label(&self, no: u64, value: f32) -> Result<f32, ParseError> {
        match self.layout.label_map {
            None => Ok(value),
            Some(map) if value == map.negative => Ok(0.0),
            Some(map) if value == map.positive => Ok(1.0),
            Some(map) => Err(self.ctx.line(
                no,
                format!(
                    "label {value} is neither of the data set's labels {} and {}",
                    map.negative, map.positive
                ),
            )),
        }
    }

    /// Whether line `no` with `count` columns has its label: `columns` with it, one fewer
    /// without; any other count is an error naming both (`kind`: e.g. "tab-separated "; `at`:
    /// where the label is, e.g. "label first"). Records the answer as
    /// [`Self::label_presence`] does.
    fn labelled_by_columns(
        &mut self,
        no: u64,
        count: usize,
        columns: usize,
        kind: &str,
        at: &str,
    ) -> Result<bool, ParseError> {
        let labelled = if count == columns {
            true
        } else if count + 1 == columns {
            false
        } else {
            return Err(self.ctx.line(
                no,
                format!(
                    "expected {columns} {kind}columns ({at}) or {} (no label), found {count}",
                    columns - 1
                ),
            ));
        };
        self.label_presence(no, labelled)?;
        Ok(labelled)
    }

    /// A sparse input's rows: `line` reads data line `no` into [`Self::rows`] (its label and
    /// entries; the row is then closed), or returns `false` for a line without data.
    fn sparse_rows<R: BufRead>(
        &mut self,
        lines: &mut Lines<'_, '_, R>,
        mut line: impl FnMut(&mut Self, u64, &str) -> Result<bool, ParseError>,
    ) -> Result<ScoringRows, ParseError> {
        while let Some((no, text)) = lines.next_line()? {
            if line(self, no, text)? {
                end_row(&mut self.rows, self.ctx, no)?;
            }
        }
        Ok(ScoringRows::Sparse(std::mem::take(&mut self.rows)))
    }

    fn libsvm_line(&mut self, no: u64, line: &str) -> Result<bool, ParseError> {
        let (ctx, layout) = (self.ctx, self.layout);
        let content = line.find('#').map_or(line, |p| &line[..p]);
        let mut tokens = content.split_ascii_whitespace().peekable();
        let Some(&first) = tokens.peek() else {
            return Ok(false);
        };
        let labelled = !first.contains(':');
        self.label_presence(no, labelled)?;
        let label = if labelled {
            tokens.next();
            self.map_label(no, ctx.label(no, first)?)?
        } else {
            0.0
        };
        self.rows.labels.push(label);
        super::libsvm::for_each_feature(ctx, no, tokens, |index, value| {
            let index = if layout.zero_based {
                index
            } else {
                index.checked_sub(1).ok_or_else(|| {
                    ctx.line(
                        no,
                        "feature index 0, but this file is read with 1-based indices (feature 1 \
                         is the first), as the data set's LIBSVM input was (it had no index 0): \
                         number this file's features from 1 as the training input's are",
                    )
                })?
            };
            if index >= layout.features {
                self.ignored += 1;
            } else {
                self.rows.indices.push(index);
                self.rows.values.push(value);
            }
            Ok(())
        })?;
        Ok(true)
    }

    /// A CSV input's rows, read record by record as the data set's input was.
    fn csv_rows(&mut self, reader: impl Read) -> Result<ScoringRows, ParseError> {
        let (ctx, layout) = (self.ctx, self.layout);
        let dialect = layout.csv;
        let columns = layout
            .csv_columns
            .map_or(layout.features as usize + 1, |c| c as usize);
        let label_at = dialect.label_column as usize;
        if label_at >= columns {
            return Err(ctx.invalid(format!(
                "the data set's CSV label column {label_at} is beyond its {columns} columns"
            )));
        }
        let at = match label_at {
            0 => "label first".to_string(),
            n => format!("the label in column {n} from 0"),
        };
        let mut records = Records::new(reader, ctx, dialect.delimiter);
        let mut first = true;
        while let Some((no, _)) = records.next()? {
            let record = &records.record;
            if std::mem::take(&mut first) && is_header(dialect.header, record) {
                continue;
            }
            let labelled = self.labelled_by_columns(no, record.len(), columns, "", &at)?;
            let mut label = 0.0;
            let mut feature = 0usize;
            for (column, f) in records.fields(no)?.enumerate() {
                if labelled && column == label_at {
                    label = self.map_label(no, super::csv::label(ctx, no, column, f)?)?;
                    continue;
                }
                let index = feature;
                feature += 1;
                if f.is_empty() {
                    continue;
                }
                let value = super::csv::value(ctx, no, column, f)?;
                if value == 0.0 {
                    continue;
                }
                match u32::try_from(index).ok().filter(|&j| j < layout.features) {
                    Some(j) => {
                        self.rows.indices.push(j);
                        self.rows.values.push(value);
                    }
                    None => self.ignored += 1,
                }
            }
            self.rows.labels.push(label);
            end_row(&mut self.rows, ctx, no)?;
        }
        Ok(ScoringRows::Sparse(std::mem::take(&mut self.rows)))
    }

    /// A Criteo line; `cats` is scratch for its categorical features.
    fn criteo_line(
        &mut self,
        no: u64,
        line: &str,
        cats: &mut Vec<u32>,
    ) -> Result<bool, ParseError> {
        let ctx = self.ctx;
        if line.trim_ascii().is_empty() {
            return Ok(false);
        }
        let count = line.split('\t').count();
        let labelled =
            self.labelled_by_columns(no, count, CRITEO_COLUMNS, "tab-separated ", "label first")?;
        let mut fields = line.split('\t');
        let label = if labelled {
            match fields.next().unwrap_or_default() {
                "0" => 0.0,
                "1" => 1.0,
                field => {
                    return Err(ctx.line(
                        no,
                        format!("expected label 0 or 1, found {}", quoted(field)),
                    ));
                }
            }
        } else {
            0.0
        };
        self.rows.labels.push(label);
        push_features(ctx, no, fields, self.layout.features, &mut self.rows, cats)?;
        Ok(true)
    }
}

fn movielens<R: BufRead>(
    lines: &mut Lines<'_, '_, R>,
    state: &mut State<'_>,
) -> Result<RatingBatch, ParseError> {
    let ctx = lines.ctx;
    let mut ratings = RatingBatch::default();
    for_each_line(lines, |no, v, fields| {
        let n = fields.len();
        let (user, item, rating) = match *fields {
            [user, item] => (user, item, None),
            [user, item, rating] | [user, item, rating, _] => (user, item, Some(rating)),
            _ => {
                return Err(ctx.line(
                    no,
                    format!(
                        "expected {} or user and item alone, found {n} fields",
                        v.layout()
                    ),
                ));
            }
        };
        state.label_presence(no, rating.is_some())?;
        let user = parse_id(ctx, no, "a user id", user)?;
        let item = parse_id(ctx, no, "an item id", item)?;
        let rating = match rating {
            Some(r) => parse_rating(ctx, no, r)?,
            None => 0.0,
        };
        ratings.push(user, item, rating);
        Ok(())
    })?;
    Ok(ratings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, layout: ScoringLayout) -> Result<ScoringInput, ParseError> {
        read_reader_for_scoring(text.as_bytes(), Path::new("in.txt"), &layout)
    }

    fn layout(format: InputFormat, features: u32) -> ScoringLayout {
        ScoringLayout {
            format,
            features,
            zero_based: false,
            csv_columns: None,
            csv: CsvDialect::default(),
            label_map: Some(LabelMap {
                negative: -1.0,
                positive: 1.0,
            }),
        }
    }

    fn sparse(input: &ScoringInput) -> &SparseBatch {
        match &input.rows {
            ScoringRows::Sparse(rows) => rows,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn libsvm_with_and_without_labels() {
        let l = layout(InputFormat::Libsvm, 3);
        let input = read("# c\n-1 1:0.5 3:2 5:9\n\n+1 2:1\n", l).unwrap();
        assert!(input.labelled);
        assert_eq!(input.lines, vec![2, 4]);
        assert_eq!(input.ignored_features, 1);
        let rows = sparse(&input);
        assert_eq!(rows.labels, vec![0.0, 1.0]);
        assert_eq!(rows.indices, vec![0, 2, 1]);
        assert_eq!(rows.offsets, vec![0, 2, 3]);

        let input = read("1:0.5 3:2\n2:1\n", l).unwrap();
        assert!(!input.labelled);
        assert_eq!(sparse(&input).indices, vec![0, 2, 1]);

        let zero = ScoringLayout {
            zero_based: true,
            ..l
        };
        assert_eq!(sparse(&read("0:1 3:1\n", zero).unwrap()).indices, vec![0]);

        for (text, message) in [
            (
                "-1 1:1\n1:1\n",
                "in.txt:2: no label here, but line 1 had a label",
            ),
            (
                "1:1\n-1 1:1\n",
                "in.txt:2: a label here, but line 1 had no label",
            ),
            (
                "2 1:1\n",
                "in.txt:1: label 2 is neither of the data set's labels -1 and 1",
            ),
            (
                "1 0:1\n",
                "in.txt:1: feature index 0, but this file is read with 1-based indices",
            ),
            ("1 2:1 x\n", "in.txt:1: expected INDEX:VALUE"),
            ("1 2:1 1:1\n", "in.txt:1: feature indices must ascend"),
        ] {
            let err = read(text, l).unwrap_err().to_string();
            assert!(err.starts_with(message), "{err:?} for {text:?}");
        }
        assert!(matches!(read("# none\n", l), Err(ParseError::Empty { .. })));
    }

    #[test]
    fn csv_with_and_without_labels() {
        let l = ScoringLayout {
            csv_columns: Some(3),
            ..layout(InputFormat::Csv, 2)
        };
        let input = read("y,a,b\n1,0.5,\n-1,0,2\n", l).unwrap();
        assert!(input.labelled);
        let rows = sparse(&input);
        assert_eq!(rows.labels, vec![1.0, 0.0]);
        assert_eq!(rows.indices, vec![0, 1]);
        assert_eq!(rows.values, vec![0.5, 2.0]);
        let input = read("0.5,\n0,2\n", l).unwrap();
        assert!(!input.labelled);
        assert_eq!(sparse(&input).values, vec![0.5, 2.0]);
        let err = read("1,2,3,4\n", l).unwrap_err().to_string();
        assert_eq!(
            err,
            "in.txt:1: expected 3 columns (label first) or 2 (no label), found 4"
        );
        let err = read("1,2,3\n1,x,3\n", l).unwrap_err().to_string();
        assert_eq!(
            err,
            "in.txt:2: expected a number in column 1 (from 0), found \"x\""
        );
    }

    #[test]
    fn csv_is_read_as_the_data_set_was() {
        let l = ScoringLayout {
            csv_columns: Some(3),
            csv: CsvDialect {
                delimiter: b';',
                header: crate::manifest::CsvHeader::Auto,
                label_column: 2,
            },
            ..layout(InputFormat::Csv, 2)
        };
        let input = read("a;b;y\n0.5;;1\n\"0\";2;-1\n", l).unwrap();
        assert!(input.labelled);
        assert_eq!(input.lines, vec![2, 3]);
        let rows = sparse(&input);
        assert_eq!(rows.labels, vec![1.0, 0.0]);
        assert_eq!(rows.indices, vec![0, 1]);
        assert_eq!(rows.values, vec![0.5, 2.0]);
        let unlabelled = read("0.5;\r\n\r\n0;2\r\n", l).unwrap();
        assert!(!unlabelled.labelled);
        assert_eq!(unlabelled.lines, vec![1, 3]);
        assert_eq!(sparse(&unlabelled).indices, rows.indices);
        assert_eq!(sparse(&unlabelled).values, rows.values);
        let err = read("1;2;3;4\n", l).unwrap_err().to_string();
        assert_eq!(
            err,
            "in.txt:1: expected 3 columns (the label in column 2 from 0) or 2 (no label), found 4"
        );
        let err = read("1;2;1\n1;2;x\n", l).unwrap_err().to_string();
        assert_eq!(
            err,
            "in.txt:2: expected a numeric label in column 2 (from 0), found \"x\""
        );
        // A header the data set was told it has is skipped, numbers or not.
        let told = ScoringLayout {
            csv: CsvDialect {
                header: crate::manifest::CsvHeader::Present,
                ..l.csv
            },
            ..l
        };
        assert_eq!(read("7;8;9\n0.5;;1\n", told).unwrap().lines, vec![2]);
    }

    #[test]
    fn movielens_keeps_original_ids() {
        let l = layout(InputFormat::Movielens, 0);
        let input = read(
            "userId,movieId,rating,timestamp\n1007,999999,4.5,1\n7,3,2,1\n",
            l,
        )
        .unwrap();
        assert!(input.labelled);
        let ScoringRows::Ratings(r) = &input.rows else {
            panic!()
        };
        assert_eq!(
            (r.users.clone(), r.items.clone()),
            (vec![1007, 7], vec![999999, 3])
        );
        assert_eq!(r.ratings, vec![4.5, 2.0]);
        let input = read("1007\t5\n8\t6\n", l).unwrap();
        assert!(!input.labelled);
        let err = read("1::2::3\n1::2::x\n", l).unwrap_err().to_string();
        assert_eq!(err, "in.txt:2: expected a rating, found \"x\"");
        let err = read("1\t2\n1\n", l).unwrap_err().to_string();
        assert!(err.starts_with("in.txt:2: expected user"), "{err}");
    }

    #[test]
    fn criteo_with_and_without_labels() {
        let l = ScoringLayout {
            label_map: None,
            ..layout(InputFormat::Criteo, 1000)
        };
        let features = vec!["1"; 13].join("\t") + "\t" + &vec!["ab"; 26].join("\t");
        let labelled = read(&format!("1\t{features}\n"), l).unwrap();
        let unlabelled = read(&format!("{features}\n"), l).unwrap();
        assert!(labelled.labelled && !unlabelled.labelled);
        assert_eq!(sparse(&labelled).indices, sparse(&unlabelled).indices);
        assert_eq!(sparse(&labelled).labels, vec![1.0]);
        let err = read("1\t2\n", l).unwrap_err().to_string();
        assert!(
            err.starts_with("in.txt:1: expected 40 tab-separated columns"),
            "{err}"
        );
    }
}
