//! Tests of the CSV reader: layouts, labels, headers and bad rows.

use std::path::Path;

use crate::manifest::LabelMap;
use crate::parse::{InputFormat, ParseOptions, Parsed, parse_reader};

use super::*;

fn parse_with(text: &str, csv: CsvOptions) -> Result<Parsed, ParseError> {
    parse_reader(
        text.as_bytes(),
        Path::new("higgs.csv"),
        InputFormat::Csv,
        &ParseOptions {
            features: None,
            csv,
        },
    )
}

fn parse_str(text: &str, features: Option<u32>) -> Result<Parsed, ParseError> {
    parse_reader(
        text.as_bytes(),
        Path::new("higgs.csv"),
        InputFormat::Csv,
        &ParseOptions {
            features,
            ..ParseOptions::default()
        },
    )
}

fn rows(parsed: Parsed) -> SparseBatch {
    match parsed {
        Parsed::Sparse { rows, .. } => rows,
        other => panic!("expected sparse rows, got {other:?}"),
    }
}

fn label_column(s: &str) -> CsvOptions {
    CsvOptions {
        label_column: s.parse().unwrap(),
        ..CsvOptions::default()
    }
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
fn quoted_fields_crlf_bom_and_blank_lines() {
    let plain = rows(parse_str("y,a,b\n1,1.5,2\n0,0,3\n", None).unwrap());
    for text in [
        "\"y\",\"a,b\",\"c\"\n\"1\",\"1.5\",2\n0,\"0\",\"3\"\n",
        "\u{feff}y,a,b\r\n1,1.5,2\r\n\r\n0,0,3\r\n",
        "\u{feff}\n\ny,a,b\n  \n1, 1.5 ,2\n\n0,0,3",
        "1,1.5,2\n0,0,3\n",
    ] {
        assert_eq!(rows(parse_str(text, None).unwrap()), plain, "{text:?}");
    }
}

#[test]
fn delimiters() {
    let plain = rows(parse_str("1,1.5,2\n0,0,3\n", None).unwrap());
    for (text, delimiter) in [
        ("1\t1.5\t2\n0\t0\t3\n", "\\t"),
        ("1\t1.5\t2\n0\t0\t3\n", "tab"),
        ("y;a;b\n1;1.5;2\n0;\"0\";3\n", ";"),
        ("1|1.5|2\n0|0|3\n", "|"),
    ] {
        let csv = CsvOptions {
            delimiter: parse_delimiter(delimiter).unwrap(),
            ..CsvOptions::default()
        };
        assert_eq!(rows(parse_with(text, csv).unwrap()), plain, "{delimiter}");
    }
    // With the wrong delimiter, each row is one column.
    for text in ["1;1.5;2\n", "y;a\n1;1.5\n"] {
        let err = parse_str(text, None).unwrap_err().to_string();
        assert_eq!(
            err,
            "higgs.csv:1: CSV input needs a label column and at least one feature column, \
             found 1 column (fields separated by ',': see --delimiter)"
        );
    }
    for bad in ["", ",,", "\"", "\n", "é"] {
        assert!(parse_delimiter(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn the_label_column_by_index_or_name_gives_the_same_rows_as_first() {
    let first = parse_str("y,a,b,c\n1,0.5,,2\n0,0,3,1\n-1,1,1,1\n", None).unwrap();
    let last = "a,b,c,y\n0.5,,2,1\n0,3,1,0\n1,1,1,-1\n";
    let middle = "a,y,b,c\n0.5,1,,2\n0,0,3,1\n1,-1,1,1\n";
    assert_eq!(parse_with(last, label_column("3")).unwrap(), first);
    assert_eq!(parse_with(last, label_column("y")).unwrap(), first);
    assert_eq!(parse_with(middle, label_column("y")).unwrap(), first);
    assert_eq!(parse_with(middle, label_column("1")).unwrap(), first);
    // Without a header, by index.
    let no_header = "0.5;;2;1\n0;3;1;0\n1;1;1;-1\n";
    let csv = CsvOptions {
        delimiter: b';',
        label_column: LabelColumn::Index(3),
        header: CsvHeader::Absent,
    };
    assert_eq!(rows(parse_with(no_header, csv).unwrap()), rows(first));
}

#[test]
fn the_header_option() {
    // A numeric first row is a header when told so; a header is data when told so.
    let numbers = "7,8,9\n1,0.5,2\n";
    assert_eq!(rows(parse_str(numbers, None).unwrap()).rows(), 2);
    let csv = CsvOptions {
        header: CsvHeader::Present,
        ..CsvOptions::default()
    };
    assert_eq!(rows(parse_with(numbers, csv).unwrap()).rows(), 1);
    let csv = CsvOptions {
        header: CsvHeader::Absent,
        ..CsvOptions::default()
    };
    let err = parse_with("y,a\n1,2\n", csv).unwrap_err().to_string();
    assert_eq!(
        err,
        "higgs.csv:1: expected a numeric label in column 0 (from 0), found \"y\""
    );
    assert_eq!("TRUE".parse(), Ok(CsvHeader::Present));
    assert_eq!("no".parse(), Ok(CsvHeader::Absent));
    assert!("maybe".parse::<CsvHeader>().is_err());
}

#[test]
fn malformed_lines_name_file_and_line() {
    let cases = [
        ("y,a,b\n1,2,3\n0,1\n", 3, "expected 3 columns, found 2"),
        ("1,2,3\n0,1,2,3\n", 2, "expected 3 columns, found 4"),
        (
            "1,2,3\n0,x,2\n",
            2,
            "expected a number in column 1 (from 0), found \"x\"",
        ),
        ("1,2,3\n,1,2\n", 2, "missing label in column 0 (from 0)"),
        (
            "1,2,3\nyes,1,2\n",
            2,
            "expected a numeric label in column 0 (from 0), found \"yes\"",
        ),
        (
            "1,2,3\nnan,1,2\n",
            2,
            "expected a numeric label in column 0 (from 0), found \"nan\"",
        ),
        // Lines are the lines records start on, with CRLF, blank lines and quoted newlines.
        ("1,2,3\r\n\r\n\r\n0,x,2\r\n", 4, "expected a number"),
        ("\"1\n\",2,3\n0,x,2\n", 3, "expected a number"),
        (
            "1,2,3\n0,1,\"2\n3,4,5\n",
            2,
            "expected a number in column 2 (from 0), found \"2\\n3,4,5\"",
        ),
    ];
    for (text, line, message) in cases {
        let shown = parse_str(text, None).unwrap_err().to_string();
        assert!(
            shown.starts_with(&format!("higgs.csv:{line}: {message}")),
            "{shown:?} for {text:?}"
        );
    }
    // A stray quote makes a field of the rest of the input: the message shows its start.
    let long = format!("1,2,3\n0,\"1,{}\n", "2,".repeat(1000));
    let shown = parse_str(&long, None).unwrap_err().to_string();
    assert!(shown.len() < 120, "{shown}");
}

#[test]
fn a_bad_label_column_names_file_and_line() {
    let cases = [
        (
            "\n\n1,2,3\n",
            "5",
            "higgs.csv:3: --label-column 5 is beyond the 3 columns of the rows (indices \
             from 0 to 2)",
        ),
        (
            "y,a,\"b,c\"\n1,2,3\n",
            "z",
            "higgs.csv:1: --label-column \"z\" is not a column of the header, whose columns \
             are \"y\", \"a\", \"b,c\"",
        ),
        (
            "1,2,3\n",
            "y",
            "higgs.csv:1: --label-column \"y\" names a column of the header, but its first \
             row (this line) is all numbers; --header true reads it as one",
        ),
        (
            "y,a,y\n1,2,3\n",
            "y",
            "higgs.csv:1: the header names two columns \"y\" (indices 0 and 2): give \
             --label-column the index of the label's",
        ),
        (
            "a,y\n1,2\n1,\n",
            "y",
            "higgs.csv:3: missing label in column 1 (from 0)",
        ),
    ];
    for (text, column, message) in cases {
        let err = parse_with(text, label_column(column)).unwrap_err();
        assert_eq!(err.to_string(), message, "{text:?}");
    }
    assert!("".parse::<LabelColumn>().is_err());
    assert_eq!("007".parse(), Ok(LabelColumn::Index(7)));
    assert!("99999999999".parse::<LabelColumn>().is_err());
}

#[test]
fn parts_need_the_label_in_the_same_column() {
    let options = ParseOptions {
        features: None,
        csv: label_column("y"),
    };
    let parts = crate::parse::parse_inputs(
        vec![
            ("a,y\n1,0\n".as_bytes(), Path::new("train.csv")),
            ("y,a\n1,0\n".as_bytes(), Path::new("test.csv")),
        ],
        InputFormat::Csv,
        &options,
        None,
    );
    let err = parts.expect_err("refused").to_string();
    assert_eq!(
        err,
        "test.csv: the label is column 0 (from 0), but in train.csv it is column 1"
    );
}

#[test]
fn records_start_where_their_lines_start() {
    let text = "\u{feff}y,a\r\n1,2\r\n\r\n\n\"3\n4\",5\n\r\n6,7";
    let mut records = Records::new(
        text.as_bytes(),
        Ctx {
            path: Path::new("x"),
        },
        b',',
    );
    let mut starts = Vec::new();
    while let Some(start) = records.next().unwrap() {
        starts.push(start);
    }
    let offset = |s: &str| text.find(s).unwrap() as u64;
    assert_eq!(
        starts,
        vec![
            (1, 0),
            (2, offset("1,2")),
            (5, offset("\"3")),
            (8, offset("6,7"))
        ]
    );
}

#[test]
fn streamed_rows_carry_the_offsets_their_records_start_at() {
    #[derive(Default)]
    struct Starts(Vec<u64>);
    impl crate::parse::RowSink for Starts {
        fn take(&mut self, _: usize, _: &mut SparseBatch, starts: &[u64]) -> io::Result<()> {
            self.0.extend_from_slice(starts);
            Ok(())
        }
    }
    let text = "y;a\r\n1;2\r\n\r\n0;\"3\n\"\r\n\n1;4";
    let mut sink = Starts::default();
    let csv = CsvOptions {
        delimiter: b';',
        ..CsvOptions::default()
    };
    crate::parse::stream_sparse(
        vec![(text.as_bytes(), "s.csv".into())],
        InputFormat::Csv,
        &ParseOptions {
            features: None,
            csv,
        },
        &mut sink,
    )
    .unwrap();
    let offset = |s: &str| text.find(s).unwrap() as u64;
    assert_eq!(sink.0, vec![offset("1;2"), offset("0;"), offset("1;4")]);
}

#[test]
fn the_label_range_names_the_lines_labels_were_read_from() {
    let text = "a;\"b\";y\r\n\r\n1;\"2\n\";0.5\r\n4;5;-2\r\n6;7;3\r\n";
    let csv = CsvOptions {
        delimiter: b';',
        label_column: LabelColumn::Name("y".into()),
        ..CsvOptions::default()
    };
    let parsed = parse_with(text, csv).unwrap();
    let range = parsed.label_range().unwrap();
    let at = |at: &crate::manifest::LabelAt| (at.label, at.line);
    assert_eq!(at(&range.min), (-2.0, 5));
    assert_eq!(at(&range.max), (3.0, 6));
    assert_eq!(range.fractional.as_ref().map(at), Some((0.5, 3)));
}

#[test]
fn header_only_is_empty() {
    assert!(matches!(
        parse_str("label,a\n", None),
        Err(ParseError::Empty { .. })
    ));
}
