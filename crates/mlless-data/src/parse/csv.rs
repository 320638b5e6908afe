//! CSV: dense numeric rows, label in the first column.
//!
//! The first non-blank line is a header, and skipped, if some field of it is not a number.
//! Fields are separated by `,` and may be padded with spaces. An empty field is a missing value
//! and, like a zero, is left out of the sparse row; the label may not be missing. Every row has
//! the same number of columns; features = columns - 1.

use std::io::BufRead;

use mlless_core::SparseBatch;

use super::{Ctx, LabelSet, Lines, ParseError, ParseOptions, Parsed, parse_finite, sparse_parts};

/// One input as read.
pub(super) struct Raw {
    rows: SparseBatch,
    labels: LabelSet,
    /// Columns, label included (0 if the input has no line).
    columns: usize,
}

impl Raw {
    pub(super) fn samples(&self) -> usize {
        self.rows.rows()
    }
}

/// Whether `line` is a header: some field of it is not a number.
pub(super) fn is_header(line: &str) -> bool {
    line.split(',')
        .map(str::trim_ascii)
        .any(|f| !f.is_empty() && f.parse::<f64>().is_err())
}

/// The label of line `no`, its (trimmed) first field: present and a finite number.
pub(super) fn label(ctx: Ctx<'_>, no: u64, field: &str) -> Result<f32, ParseError> {
    if field.is_empty() {
        return Err(ctx.line(no, "missing label in column 1"));
    }
    ctx.label(no, field)
}

/// The value of the (trimmed, not empty) field in column `column` (from 1) of line `no`: a
/// finite number.
pub(super) fn value(ctx: Ctx<'_>, no: u64, column: usize, field: &str) -> Result<f32, ParseError> {
    parse_finite(field).ok_or_else(|| {
        ctx.line(
            no,
            format!("expected a number in column {column}, found {field:?}"),
        )
    })
}

pub(super) fn read<R: BufRead>(lines: &mut Lines<'_, '_, R>) -> Result<Raw, ParseError> {
    let ctx = lines.ctx;
    let mut rows = SparseBatch::new();
    let mut labels = LabelSet::default();
    let mut columns: Option<usize> = None;
    let mut first = true;

    while let Some((no, line)) = lines.next_line()? {
        if line.trim_ascii().is_empty() {
            continue;
        }
        if first {
            first = false;
            if is_header(line) {
                columns = Some(line.split(',').count());
                continue;
            }
        }
        let mut count = 0usize;
        for (column, field) in line.split(',').map(str::trim_ascii).enumerate() {
            count += 1;
            if columns.is_some_and(|c| column >= c) {
                continue; // counted; reported below
            }
            if column == 0 {
                let label = label(ctx, no, field)?;
                labels.observe(label, no);
                rows.labels.push(label);
                continue;
            }
            if field.is_empty() {
                continue;
            }
            let value = value(ctx, no, column + 1, field)?;
            if value != 0.0 {
                let index = u32::try_from(column - 1)
                    .map_err(|_| ctx.line(no, "more than 2^32 columns"))?;
                rows.indices.push(index);
                rows.values.push(value);
            }
        }
        match columns {
            None => columns = Some(count),
            Some(c) if c != count => {
                return Err(ctx.line(no, format!("expected {c} columns, found {count}")));
            }
            Some(_) => {}
        }
        lines.end_row(&mut rows, no)?;
    }

    lines.hand_over(&mut rows)?;
    let columns = columns.unwrap_or(0);
    if columns < 2 && (lines.out.handed > 0 || rows.rows() > 0) {
        return Err(ctx.invalid(format!(
            "CSV input needs a label column and at least one feature column, found {columns} column"
        )));
    }
    Ok(Raw {
        rows,
        labels,
        columns,
    })
}

/// Checks that all inputs have the same columns and maps their labels jointly.
/// Reconciles the parts; returns them and their number of columns.
pub(super) fn finish(
    raws: Vec<(Ctx<'_>, Raw)>,
    options: &ParseOptions,
) -> Result<(Vec<Parsed>, u32), ParseError> {
    let first = &raws[0];
    if let Some((ctx, raw)) = raws.iter().find(|(_, r)| r.columns != first.1.columns) {
        return Err(ctx.invalid(format!(
            "{} columns, but {} has {}",
            raw.columns,
            first.0.path.display(),
            first.1.columns
        )));
    }
    let ctx = first.0;
    let columns_features =
        u32::try_from(first.1.columns - 1).map_err(|_| ctx.invalid("more than 2^32 columns"))?;
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
    Ok((parsed, columns_features + 1))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::manifest::LabelMap;
    use crate::parse::{InputFormat, ParseOptions, Parsed, parse_reader};

    use super::*;

    fn parse_str(text: &str, features: Option<u32>) -> Result<Parsed, ParseError> {
        parse_reader(
            text.as_bytes(),
            Path::new("higgs.csv"),
            InputFormat::Csv,
            &ParseOptions { features },
        )
    }

    #[test]
    fn header_missing_values_and_zeros() {
        let text = "label,a,b,c\n1, 0.5,,2\n0,0,3,\n\n1,,,\n";
        let Parsed::Sparse {
            rows,
            features,
            label_map,
            ..
        } = parse_str(text, None).unwrap()
        else {
            panic!("expected sparse rows")
        };
        assert_eq!(features, 3);
        assert_eq!(rows.labels, vec![1.0, 0.0, 1.0]);
        assert_eq!(rows.offsets, vec![0, 2, 3, 3]);
        assert_eq!(rows.indices, vec![0, 2, 1]);
        assert_eq!(rows.values, vec![0.5, 2.0, 3.0]);
        assert_eq!(
            label_map,
            Some(LabelMap {
                negative: 0.0,
                positive: 1.0
            })
        );
    }

    #[test]
    fn no_header_and_label_mapping() {
        let Parsed::Sparse {
            rows, label_map, ..
        } = parse_str("-1,1,2\n1,3,4\n", None).unwrap()
        else {
            panic!("expected sparse rows")
        };
        assert_eq!(rows.labels, vec![0.0, 1.0]);
        assert_eq!(rows.rows(), 2);
        assert_eq!(
            label_map,
            Some(LabelMap {
                negative: -1.0,
                positive: 1.0
            })
        );
    }

    #[test]
    fn features_option() {
        let Parsed::Sparse { features, .. } = parse_str("1,2,3\n", Some(5)).unwrap() else {
            panic!()
        };
        assert_eq!(features, 5);
        assert!(matches!(
            parse_str("1,2,3\n", Some(1)),
            Err(ParseError::Invalid { .. })
        ));
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let cases = [
            ("y,a,b\n1,2,3\n0,1\n", 3, "expected 3 columns, found 2"),
            ("1,2,3\n0,1,2,3\n", 2, "expected 3 columns, found 4"),
            (
                "1,2,3\n0,x,2\n",
                2,
                "expected a number in column 2, found \"x\"",
            ),
            ("1,2,3\n,1,2\n", 2, "missing label in column 1"),
        ];
        for (text, line, message) in cases {
            let shown = parse_str(text, None).unwrap_err().to_string();
            assert_eq!(shown, format!("higgs.csv:{line}: {message}"), "{text:?}");
        }
    }

    #[test]
    fn header_only_is_empty() {
        assert!(matches!(
            parse_str("label,a\n", None),
            Err(ParseError::Empty { .. })
        ));
    }
}
