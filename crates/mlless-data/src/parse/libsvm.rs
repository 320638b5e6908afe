//! LIBSVM: `label index:value index:value ...`.
//!
//! Indices are 1-based as in the LIBSVM tools, unless an index 0 occurs anywhere, in which case
//! the whole file is read as 0-based. `#` starts a comment; blank lines are skipped. Indices must
//! ascend strictly within a line.

use std::io::BufRead;

use mlless_core::SparseBatch;

use super::{
    Ctx, LabelSet, Lines, ParseError, ParseOptions, Parsed, parse_finite, quoted, sparse_parts,
};

/// One input as read: indices as written (the base is decided over all inputs).
pub(super) struct Raw {
    rows: SparseBatch,
    labels: LabelSet,
    saw_zero: bool,
    max_index: Option<u32>,
    /// First line with index == the features option: out of range only if 0-based.
    first_at_limit: Option<u64>,
}

impl Raw {
    pub(super) fn samples(&self) -> usize {
        self.rows.rows()
    }
}

/// Hands each `INDEX:VALUE` token of a line to `feature` (the index as written), checking that
/// both are numbers and that the indices ascend strictly; returns the last index, if any.
/// `no` is the line's number, for the errors.
pub(super) fn for_each_feature<'a>(
    ctx: Ctx<'_>,
    no: u64,
    tokens: impl Iterator<Item = &'a str>,
    mut feature: impl FnMut(u32, f32) -> Result<(), ParseError>,
) -> Result<Option<u32>, ParseError> {
    let mut previous: Option<u32> = None;
    for token in tokens {
        let Some((index, value)) = token.split_once(':') else {
            return Err(ctx.line(no, format!("expected INDEX:VALUE, found {}", quoted(token))));
        };
        let index: u32 = index.parse().map_err(|_| {
            ctx.line(
                no,
                format!(
                    "expected a feature index, found {} in {}",
                    quoted(index),
                    quoted(token)
                ),
            )
        })?;
        let value = parse_finite(value).ok_or_else(|| {
            ctx.line(
                no,
                format!(
                    "expected a numeric value, found {} in {}",
                    quoted(value),
                    quoted(token)
                ),
            )
        })?;
        if let Some(p) = previous.filter(|&p| index <= p) {
            return Err(ctx.line(
                no,
                format!("feature indices must ascend, found {index} after {p}"),
            ));
        }
        previous = Some(index);
        feature(index, value)?;
    }
    Ok(previous)
}

pub(super) fn read<R: BufRead>(
    lines: &mut Lines<'_, '_, R>,
    options: &ParseOptions,
) -> Result<Raw, ParseError> {
    let ctx = lines.ctx;
    let limit = options.features;
    let mut rows = SparseBatch::new();
    let mut labels = LabelSet::default();
    let mut saw_zero = false;
    let mut max_index: Option<u32> = None;
    let mut first_at_limit: Option<u64> = None;

    while let Some((no, line)) = lines.next_line()? {
        let content = match line.find('#') {
            Some(p) => &line[..p],
            None => line,
        };
        let mut tokens = content.split_ascii_whitespace();
        let Some(label_token) = tokens.next() else {
            continue;
        };
        let label = ctx.label(no, label_token)?;
        labels.observe(label, no);
        rows.labels.push(label);
        let last = for_each_feature(ctx, no, tokens, |index, value| {
            if let Some(limit) = limit {
                if index > limit {
                    return Err(ctx.line(
                        no,
                        format!("feature index {index} is beyond the {limit} features"),
                    ));
                }
                if index == limit && first_at_limit.is_none() {
                    first_at_limit = Some(no);
                }
            }
            saw_zero |= index == 0;
            rows.indices.push(index);
            rows.values.push(value);
            Ok(())
        })?;
        if let Some(last) = last {
            max_index = Some(max_index.map_or(last, |m| m.max(last)));
        }
        lines.end_row(&mut rows, no)?;
    }
    lines.hand_over(&mut rows)?;
    Ok(Raw {
        rows,
        labels,
        saw_zero,
        max_index,
        first_at_limit,
    })
}

/// Decides the index base and dimension over all inputs and maps their labels jointly.
/// Reconciles the parts; returns them and whether their indices are 0-based.
pub(super) fn finish(
    mut raws: Vec<(Ctx<'_>, Raw)>,
    options: &ParseOptions,
) -> Result<(Vec<Parsed>, bool), ParseError> {
    let zero_based = raws.iter().any(|(_, r)| r.saw_zero);
    let at_limit = raws
        .iter()
        .find_map(|(ctx, r)| r.first_at_limit.map(|no| (*ctx, no)));
    let max_index = raws.iter().filter_map(|(_, r)| r.max_index).max();
    let features = dimension(raws[0].0, options.features, zero_based, at_limit, max_index)?;
    if !zero_based {
        for (_, raw) in &mut raws {
            raw.rows.indices.iter_mut().for_each(|i| *i -= 1);
        }
    }
    let parts = raws
        .into_iter()
        .map(|(ctx, r)| (r.rows, r.labels, ctx.path))
        .collect();
    let parsed = sparse_parts(parts, features);
    Ok((parsed, zero_based))
}

/// The dimension of LIBSVM input of the largest index `max_index` (as written), with the
/// `--features` option `limit`, whose indices are 0-based if `zero_based`; `at_limit` is the
/// first line with the index `limit` (out of range only if 0-based). `ctx` names the input.
pub(super) fn dimension(
    ctx: Ctx<'_>,
    limit: Option<u32>,
    zero_based: bool,
    at_limit: Option<(Ctx<'_>, u64)>,
    max_index: Option<u32>,
) -> Result<u32, ParseError> {
    if let (true, Some(limit), Some((ctx, no))) = (zero_based, limit, at_limit) {
        return Err(ctx.line(
            no,
            format!(
                "feature index {limit} is beyond the {limit} features \
                 (the input has an index 0, so its indices are 0-based)"
            ),
        ));
    }
    match (limit, max_index) {
        (Some(limit), _) => Ok(limit),
        (None, None) => Ok(0),
        (None, Some(max)) if zero_based => max.checked_add(1).ok_or_else(|| {
            ctx.invalid(format!(
                "feature index {max} leaves no room for a dimension"
            ))
        }),
        (None, Some(max)) => Ok(max),
    }
}

/// What [`read`] learned of a part besides its rows: its labels, whether it has an index 0,
/// its largest index and the first line at the `--features` limit.
pub(super) fn summary(raw: Raw) -> (LabelSet, bool, Option<u32>, Option<u64>) {
    (raw.labels, raw.saw_zero, raw.max_index, raw.first_at_limit)
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
            Path::new("data.libsvm"),
            InputFormat::Libsvm,
            &ParseOptions {
                features,
                ..ParseOptions::default()
            },
        )
    }

    fn sparse(p: Parsed) -> (SparseBatch, u32, Option<LabelMap>) {
        match p {
            Parsed::Sparse {
                rows,
                features,
                label_map,
                ..
            } => (rows, features, label_map),
            other => panic!("expected sparse rows, got {other:?}"),
        }
    }

    #[test]
    fn one_based_with_comments_and_blank_lines() {
        let text = "# header comment\n+1 1:0.5 3:2 # trailing\n\n-1 2:1\r\n-1\n";
        let (rows, features, map) = sparse(parse_str(text, None).unwrap());
        assert_eq!(features, 3);
        assert_eq!(rows.labels, vec![1.0, 0.0, 0.0]);
        assert_eq!(rows.offsets, vec![0, 2, 3, 3]);
        assert_eq!(rows.indices, vec![0, 2, 1]);
        assert_eq!(rows.values, vec![0.5, 2.0, 1.0]);
        assert_eq!(
            map,
            Some(LabelMap {
                negative: -1.0,
                positive: 1.0
            })
        );
    }

    #[test]
    fn zero_based_when_an_index_zero_appears() {
        let (rows, features, _) = sparse(parse_str("1 1:1 4:1\n0 0:2\n", None).unwrap());
        assert_eq!(rows.indices, vec![1, 4, 0]);
        assert_eq!(features, 5);
    }

    #[test]
    fn label_mapping_variants() {
        let (rows, _, map) = sparse(parse_str("2 1:1\n1 1:1\n2 2:1\n", None).unwrap());
        assert_eq!(rows.labels, vec![1.0, 0.0, 1.0]);
        assert_eq!(
            map,
            Some(LabelMap {
                negative: 1.0,
                positive: 2.0
            })
        );
        // Three classes: labels kept, no map.
        let (rows, _, map) = sparse(parse_str("0 1:1\n1 1:1\n2 1:1\n", None).unwrap());
        assert_eq!(rows.labels, vec![0.0, 1.0, 2.0]);
        assert_eq!(map, None);
        // One class: kept.
        let (rows, _, map) = sparse(parse_str("5 1:1\n5 2:1\n", None).unwrap());
        assert_eq!(rows.labels, vec![5.0, 5.0]);
        assert_eq!(map, None);
    }

    #[test]
    fn features_option_bounds_indices() {
        let (_, features, _) = sparse(parse_str("1 1:1 3:1\n", Some(10)).unwrap());
        assert_eq!(features, 10);
        // 1-based: index 3 is feature 2, fine with 3 features.
        assert!(parse_str("1 1:1 3:1\n", Some(3)).is_ok());
        let err = parse_str("1 1:1\n0 1:1 4:1\n", Some(3)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "data.libsvm:2: feature index 4 is beyond the 3 features"
        );
        // 0-based (index 0 on line 3): index 3 on line 1 is out of range for 3 features.
        let err = parse_str("1 3:1\n1 1:1\n0 0:1\n", Some(3)).unwrap_err();
        assert!(matches!(err, ParseError::Line { line: 1, .. }), "{err}");
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        let cases = [
            (
                "1 1:1\n0 2:1 abc\n",
                2,
                "expected INDEX:VALUE, found \"abc\"",
            ),
            (
                "1 1:1\n\n# c\nx 1:1\n",
                4,
                "expected a numeric label, found \"x\"",
            ),
            (
                "1 a:1\n",
                1,
                "expected a feature index, found \"a\" in \"a:1\"",
            ),
            (
                "1 1:1\n1 2:zz\n",
                2,
                "expected a numeric value, found \"zz\" in \"2:zz\"",
            ),
            ("1 1:nan\n", 1, "expected a numeric value"),
            (
                "1 1:1\n1 3:1 2:1\n",
                2,
                "feature indices must ascend, found 2 after 3",
            ),
            (
                "1 1:1 1:2\n",
                1,
                "feature indices must ascend, found 1 after 1",
            ),
        ];
        for (text, line, message) in cases {
            let err = parse_str(text, None).unwrap_err();
            let shown = err.to_string();
            assert!(
                shown.starts_with(&format!("data.libsvm:{line}: {message}")),
                "{shown:?} for {text:?}"
            );
        }
    }

    #[test]
    fn no_samples_is_an_error() {
        assert!(matches!(
            parse_str("# nothing\n\n", None),
            Err(ParseError::Empty { .. })
        ));
    }
}
