//! Criteo display-ads TSV: `label \t I1 .. I13 \t C1 .. C26`, 40 tab-separated columns.
//!
//! The label is 0 or 1. An empty column is a missing value and left out, and so are the
//! columns missing at the end of a shorter line (real Criteo files drop trailing empty fields);
//! a line of more than 40 columns, or without a label, is an error.
//!
//! * Integer column `I(k+1)` (k = 0..13) with value x becomes feature k with value
//!   `sign(x) * ln(1 + |x|)`; a zero is left out.
//! * Categorical column `C(c+1)` (c = 0..26) with value s becomes feature
//!   `13 + criteo_hash(c, s) mod (features - 13)` with value 1.0 ([`criteo_feature`]).
//!
//! Categorical values that collide within a row are summed. `ParseOptions::features` is
//! required and at least 14.

use std::io::BufRead;

use mlless_core::SparseBatch;

use std::path::Path;

use super::{Ctx, LabelSet, Lines, ParseError, ParseOptions, Parsed, label_range, quoted};

/// Integer columns of a Criteo line (features `0..13`).
pub const CRITEO_INTEGER: usize = 13;
/// Categorical columns of a Criteo line.
pub const CRITEO_CATEGORICAL: usize = 26;
/// Columns of a Criteo line: label, integer and categorical columns.
pub const CRITEO_COLUMNS: usize = 1 + CRITEO_INTEGER + CRITEO_CATEGORICAL;

/// The fixed hash of categorical value `value` of categorical column `column` (0-based).
///
/// FNV-1a 64 (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) over the bytes
/// `[column as u8]` followed by `value`, then the 64-bit finaliser of MurmurHash3 (`fmix64`) so
/// that every output bit depends on every input byte. Not randomised: the same value hashes to
/// the same feature on every machine and in every version of mlless.
pub fn criteo_hash(column: usize, value: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for &b in std::iter::once(&(column as u8)).chain(value) {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The feature of categorical value `value` in categorical column `column` (0-based) in a space
/// of `features` features (`features` > 13): `13 + criteo_hash(column, value) mod (features - 13)`.
pub fn criteo_feature(column: usize, value: &[u8], features: u32) -> u32 {
    let buckets = u64::from(features) - CRITEO_INTEGER as u64;
    CRITEO_INTEGER as u32 + (criteo_hash(column, value) % buckets) as u32
}

/// The feature space of the options: required, more than 13.
pub(super) fn features(path: Option<&Path>, options: &ParseOptions) -> Result<u32, ParseError> {
    let ctx = Ctx {
        path: path.unwrap_or(Path::new("criteo input")),
    };
    match options.features {
        Some(f) if f as usize > CRITEO_INTEGER => Ok(f),
        Some(f) => Err(ctx.invalid(format!(
            "criteo input needs at least {} features (13 integer features and the hashing \
             space), {f} asked for",
            CRITEO_INTEGER + 1
        ))),
        None => Err(ctx.invalid(
            "criteo input needs the number of features (13 integer features plus the size \
             of the categorical hashing space)",
        )),
    }
}

/// Adds the features of one line's columns after the label (`fields`: I1..I13, C1..C26) to
/// the current row of `rows`, in ascending index order; returns how many fields there were
/// (extra ones are counted, not read). `categorical` is scratch space.
pub(super) fn push_features<'a>(
    ctx: Ctx<'_>,
    no: u64,
    fields: impl Iterator<Item = &'a str>,
    features: u32,
    rows: &mut SparseBatch,
    categorical: &mut Vec<u32>,
) -> Result<usize, ParseError> {
    categorical.clear();
    let mut count = 0;
    for (i, field) in fields.enumerate() {
        count += 1;
        let column = i + 1;
        if column <= CRITEO_INTEGER {
            if field.is_empty() {
                continue;
            }
            let x: i64 = field.parse().map_err(|_| {
                ctx.line(
                    no,
                    format!(
                        "expected an integer in column I{column}, found {}",
                        quoted(field)
                    ),
                )
            })?;
            if x != 0 {
                let value = (x as f64).signum() * (x.unsigned_abs() as f64).ln_1p();
                rows.indices.push((column - 1) as u32);
                rows.values.push(value as f32);
            }
        } else if column < CRITEO_COLUMNS && !field.is_empty() {
            let c = column - 1 - CRITEO_INTEGER;
            categorical.push(criteo_feature(c, field.as_bytes(), features));
        }
    }
    // Integer features are already in order and below 13; categorical ones follow.
    categorical.sort_unstable();
    for &index in categorical.iter() {
        if rows.indices.last() == Some(&index) {
            if let Some(v) = rows.values.last_mut() {
                *v += 1.0;
            }
        } else {
            rows.indices.push(index);
            rows.values.push(1.0);
        }
    }
    Ok(count)
}

/// Reads a Criteo input into a feature space of `features` (from [`features`]).
pub(super) fn read<R: BufRead>(
    lines: &mut Lines<'_, '_, R>,
    features: u32,
) -> Result<Parsed, ParseError> {
    let ctx = lines.ctx;
    let mut rows = SparseBatch::new();
    let mut categorical: Vec<u32> = Vec::with_capacity(CRITEO_CATEGORICAL);
    let mut labels = LabelSet::default();

    while let Some((no, line)) = lines.next_line()? {
        if line.trim_ascii().is_empty() {
            continue;
        }
        let mut fields = line.split('\t');
        let field = fields.next().unwrap_or_default();
        let label = match field {
            "0" => 0.0,
            "1" => 1.0,
            _ => {
                return Err(ctx.line(
                    no,
                    format!("expected label 0 or 1, found {}", quoted(field)),
                ));
            }
        };
        labels.observe(label, no);
        rows.labels.push(label);
        let columns = 1 + push_features(ctx, no, fields, features, &mut rows, &mut categorical)?;
        // Fewer columns: the trailing ones, empty, were left out — missing values.
        if columns > CRITEO_COLUMNS {
            return Err(ctx.line(
                no,
                format!(
                    "expected at most {CRITEO_COLUMNS} tab-separated columns (the label, 13 \
                     integer and 26 categorical ones), found {columns}"
                ),
            ));
        }
        lines.end_row(&mut rows, no)?;
    }

    lines.hand_over(&mut rows)?;
    Ok(Parsed::Sparse {
        rows,
        features,
        label_map: None,
        labels: label_range(&[(&labels, ctx.path)], None),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::parse::{InputFormat, ParseOptions, parse_reader};

    use super::*;

    fn line(label: &str, ints: [&str; 13], cats: [&str; 26]) -> String {
        let mut fields = vec![label];
        fields.extend(ints);
        fields.extend(cats);
        fields.join("\t")
    }

    fn parse_str(text: &str, features: Option<u32>) -> Result<Parsed, ParseError> {
        parse_reader(
            text.as_bytes(),
            Path::new("train.txt"),
            InputFormat::Criteo,
            &ParseOptions {
                features,
                ..ParseOptions::default()
            },
        )
    }

    #[test]
    fn hash_is_stable_and_in_range() {
        // Fixed values: a change of the hash would silently change every prepared dataset.
        // Reference values computed independently (Python) from the documented definition.
        assert_eq!(criteo_hash(0, b"68fd1e64"), 0xb3e6_832d_5ae5_d349);
        assert_eq!(criteo_hash(25, b""), 0x7c36_18d3_1456_032a);
        assert_eq!(criteo_feature(7, b"05db9164", 1 << 20), 918_535);
        assert_ne!(criteo_hash(0, b"68fd1e64"), criteo_hash(1, b"68fd1e64"));
        for features in [14u32, 15, 1000, 1 << 20, u32::MAX] {
            for c in 0..CRITEO_CATEGORICAL {
                for s in ["", "a", "68fd1e64", "05db9164", "ffffffff"] {
                    let f = criteo_feature(c, s.as_bytes(), features);
                    assert!((13..features).contains(&f), "{f} for {features}");
                }
            }
        }
        // Buckets are used roughly evenly.
        let mut counts = [0u32; 16];
        for i in 0..16_000u32 {
            let s = format!("{i:08x}");
            counts[(criteo_feature(3, s.as_bytes(), 13 + 16) - 13) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn trailing_fields_left_out_are_missing_values() {
        // As in the Kaggle train.txt: a line whose trailing empty fields were dropped.
        let mut ints = [""; 13];
        ints[0] = "1";
        ints[1] = "-3";
        let mut cats = [""; 26];
        cats[0] = "68fd1e64";
        let full = line("1", ints, cats);
        let short = full.trim_end_matches('\t');
        assert!(short.split('\t').count() < CRITEO_COLUMNS);
        let text = format!("{full}\n{short}\n0\n1\t7\n");
        let Parsed::Sparse { rows, .. } = parse_str(&text, Some(1000)).unwrap() else {
            panic!()
        };
        assert_eq!(rows.labels, vec![1.0, 1.0, 0.0, 1.0]);
        assert_eq!(rows.row(0), rows.row(1));
        assert_eq!(rows.row(2).1, &[] as &[u32]);
        assert_eq!(rows.row(3).1, &[0]);
    }

    #[test]
    fn parses_a_line() {
        let mut ints = [""; 13];
        ints[0] = "1";
        ints[1] = "-3";
        ints[2] = "0";
        ints[12] = "100";
        let mut cats = [""; 26];
        cats[0] = "68fd1e64";
        cats[5] = "deadbeef";
        let text = format!(
            "{}\n{}\n",
            line("1", ints, cats),
            line("0", [""; 13], [""; 26])
        );
        let features = 1 << 20;
        let Parsed::Sparse {
            rows,
            features: f,
            label_map,
            ..
        } = parse_str(&text, Some(features)).unwrap()
        else {
            panic!()
        };
        assert_eq!(f, features);
        assert_eq!(label_map, None);
        assert_eq!(rows.labels, vec![1.0, 0.0]);
        assert_eq!(rows.offsets, vec![0, 5, 5]);
        let (_, idx, val) = rows.row(0);
        assert_eq!(&idx[..3], &[0, 1, 12]);
        assert!((val[0] - 2f32.ln()).abs() < 1e-6);
        assert!((val[1] + 4f32.ln()).abs() < 1e-6);
        assert!((val[2] - 101f32.ln()).abs() < 1e-5);
        let mut expected = [
            criteo_feature(0, b"68fd1e64", features),
            criteo_feature(5, b"deadbeef", features),
        ];
        expected.sort_unstable();
        assert_eq!(&idx[3..], &expected[..]);
        assert_eq!(&val[3..], &[1.0, 1.0]);
    }

    #[test]
    fn colliding_categories_are_summed() {
        // With 14 features every categorical value lands in feature 13.
        let mut cats = [""; 26];
        cats[0] = "a";
        cats[1] = "b";
        cats[2] = "c";
        let text = line("0", [""; 13], cats);
        let Parsed::Sparse { rows, .. } = parse_str(&text, Some(14)).unwrap() else {
            panic!()
        };
        assert_eq!(rows.indices, vec![13]);
        assert_eq!(rows.values, vec![3.0]);
    }

    #[test]
    fn options_and_malformed_lines() {
        let good = line("1", [""; 13], [""; 26]);
        assert!(matches!(
            parse_str(&good, None),
            Err(ParseError::Invalid { .. })
        ));
        assert!(matches!(
            parse_str(&good, Some(13)),
            Err(ParseError::Invalid { .. })
        ));
        let mut ints = [""; 13];
        ints[4] = "1.5";
        let cases = [
            (
                format!("{good}\n{}", line("2", [""; 13], [""; 26])),
                2,
                "expected label 0 or 1, found \"2\"",
            ),
            (
                format!("{good}\n{good}\n{}", line("1", ints, [""; 26])),
                3,
                "expected an integer in column I5, found \"1.5\"",
            ),
            (
                format!("{good}\t\n"),
                1,
                "expected at most 40 tab-separated columns (the label, 13 integer and 26 \
                 categorical ones), found 41",
            ),
            (
                format!("{good}\n\t1\t2\n"),
                2,
                "expected label 0 or 1, found \"\"",
            ),
        ];
        for (text, no, message) in cases {
            let shown = parse_str(&text, Some(100)).unwrap_err().to_string();
            assert_eq!(shown, format!("train.txt:{no}: {message}"));
        }
    }
}
