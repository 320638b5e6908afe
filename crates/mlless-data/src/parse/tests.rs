//! Tests of the input formats' parsing: every format, errors naming file and line.

use super::*;

/// A huge offending token is quoted by a bounded prefix, in every parser.
#[test]
fn errors_quote_a_bounded_prefix_of_the_input() {
    let huge = "9".repeat(1_000_000) + "x";
    let cases = [
        (InputFormat::Libsvm, format!("1 3:{huge}\n")),
        (InputFormat::Libsvm, format!("1 {huge}\n")),
        (InputFormat::Libsvm, format!("{huge} 1:1\n")),
        (InputFormat::Csv, format!("1,2\n1,{huge}\n")),
        (InputFormat::Movielens, format!("1\t2\t{huge}\t4\n")),
        (InputFormat::Movielens, format!("1\t{huge}\t3\t4\n")),
        (InputFormat::Criteo, format!("1\t{huge}\n")),
        (InputFormat::Criteo, format!("{huge}\t1\n")),
    ];
    for (format, text) in cases {
        let options = ParseOptions {
            features: (format == InputFormat::Criteo).then_some(100),
            ..ParseOptions::default()
        };
        let err = parse_reader(text.as_bytes(), Path::new("in"), format, &options)
            .unwrap_err()
            .to_string();
        assert!(
            err.len() < 400,
            "{format}: {} bytes: {:.300}",
            err.len(),
            err
        );
        assert!(
            err.contains(&format!("\"{}\"…", "9".repeat(QUOTED_CHARS))),
            "{err}"
        );
    }
    assert_eq!(quoted("short"), "\"short\"");
    assert_eq!(quoted(&"é".repeat(70)), format!("\"{}\"…", "é".repeat(64)));
}

#[test]
fn format_names_round_trip() {
    for (f, name) in InputFormat::ALL.into_iter().zip(InputFormat::NAMES) {
        assert_eq!(f.to_string(), name);
        assert_eq!(name.parse::<InputFormat>().unwrap(), f);
        assert_eq!(name.to_uppercase().parse::<InputFormat>().unwrap(), f);
    }
    let err = "parquet".parse::<InputFormat>().unwrap_err();
    assert!(err.to_string().contains("parquet"));
}

#[test]
fn dense_remap_both_paths() {
    let mut ids = vec![30, 10, 30, 20, 10];
    assert_eq!(dense_remap(&mut ids), vec![10, 20, 30]);
    assert_eq!(ids, vec![2, 0, 2, 1, 0]);
    let mut ids = vec![u32::MAX - 1, 5, u32::MAX - 1, 4_000_000_000];
    assert_eq!(dense_remap(&mut ids), vec![5, 4_000_000_000, u32::MAX - 1]);
    assert_eq!(ids, vec![2, 0, 2, 1]);
    assert!(dense_remap(&mut []).is_empty());
}

#[test]
fn label_set_maps_two_values() {
    let mut set = LabelSet::default();
    let mut labels = vec![2.0, 1.0, 2.0];
    labels.iter().for_each(|&l| set.observe(l, 1));
    assert_eq!(
        set.map_binary(&mut labels),
        Some(LabelMap {
            negative: 1.0,
            positive: 2.0
        })
    );
    assert_eq!(labels, vec![1.0, 0.0, 1.0]);
    let mut set = LabelSet::default();
    [0.0, 1.0, 2.0].iter().for_each(|&l| set.observe(l, 1));
    let mut labels = vec![0.0, 1.0, 2.0];
    assert_eq!(set.map_binary(&mut labels), None);
    assert_eq!(labels, vec![0.0, 1.0, 2.0]);
}

#[test]
fn the_label_range_names_the_lines_of_its_ends_over_every_part() {
    let text = "0 1:1\n1 1:1\n\n2 1:1\n";
    let (first, second) = (Path::new("a.svm"), Path::new("b.svm"));
    let parts = parse_inputs(
        vec![
            (text.as_bytes(), first),
            ("3.5 1:1\n-1 2:1\n".as_bytes(), second),
        ],
        InputFormat::Libsvm,
        &ParseOptions::default(),
        None,
    )
    .unwrap()
    .0;
    let range = parts[0].label_range().unwrap();
    assert_eq!(parts[1].label_range(), Some(range));
    let at = |at: &LabelAt| (at.label, at.input.clone(), at.line);
    assert_eq!(at(&range.min), (-1.0, "b.svm".into(), 2));
    assert_eq!(at(&range.max), (3.5, "b.svm".into(), 1));
    assert_eq!(
        at(range.fractional.as_ref().unwrap()),
        (3.5, "b.svm".into(), 1)
    );

    // Two values are mapped to 0/1; the ends keep their lines.
    let parsed = parse_reader(
        "5 1:1\n-3 1:1\n5 2:1\n".as_bytes(),
        Path::new("c.svm"),
        InputFormat::Libsvm,
        &ParseOptions::default(),
    )
    .unwrap();
    let range = parsed.label_range().unwrap();
    assert_eq!(at(&range.min), (0.0, "c.svm".into(), 2));
    assert_eq!(at(&range.max), (1.0, "c.svm".into(), 1));
    assert_eq!(range.fractional, None);
}

/// Keeps every row it is handed, and their positions, per input.
#[derive(Default)]
struct Keep(Vec<SparseBatch>, Vec<Vec<u64>>);

impl RowSink for Keep {
    fn take(&mut self, part: usize, rows: &mut SparseBatch, starts: &[u64]) -> io::Result<()> {
        if self.0.len() <= part {
            self.0.resize_with(part + 1, SparseBatch::new);
            self.1.resize_with(part + 1, Vec::new);
        }
        assert_eq!(starts.len(), rows.rows());
        self.1[part].extend_from_slice(starts);
        for r in 0..rows.rows() {
            let (label, indices, values) = rows.row(r);
            self.0[part].push_row(label, indices, values);
        }
        Ok(())
    }
}

#[test]
fn streamed_rows_made_final_are_the_parsed_rows() {
    // More rows than a chunk, 1-based indices and -1/+1 labels over two parts, for each
    // sparse format.
    let libsvm: String = (0..10_000)
        .map(|i| {
            format!(
                "{} {}:1 {}:0.5\n",
                if i % 3 == 0 { "+1" } else { "-1" },
                i % 7 + 1,
                i % 7 + 3
            )
        })
        .collect();
    let csv: String = (0..9_000)
        .map(|i| format!("{},{},0,{}\n", i % 2 * 2, i % 5, i % 3))
        .collect();
    let criteo = format!(
        "1\t5{}{}\n0\t{}{}\n",
        "\t".repeat(12),
        "\tab".repeat(26),
        "\t".repeat(12),
        "\tcd".repeat(26)
    );
    for (format, text, test, features) in [
        (InputFormat::Libsvm, libsvm.as_str(), "-1 2:3\n", None),
        (InputFormat::Csv, csv.as_str(), "2,1,1,1\n", None),
        (
            InputFormat::Criteo,
            criteo.as_str(),
            criteo.as_str(),
            Some(100),
        ),
    ] {
        let options = ParseOptions {
            features,
            ..ParseOptions::default()
        };
        let inputs = || {
            vec![
                (text.as_bytes(), PathBuf::from("train")),
                (test.as_bytes(), PathBuf::from("test")),
            ]
        };
        let (parsed, layout) = parse_readers_with_layout(inputs(), format, &options).unwrap();
        let mut keep = Keep::default();
        let (schema, streamed_layout) =
            stream_sparse(inputs(), format, &options, &mut keep).unwrap();
        assert_eq!(layout, streamed_layout, "{format}");
        // Each row's position is where its line starts.
        let line_starts: Vec<u64> = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i as u64 + 1))
            .take(keep.1[0].len())
            .collect();
        assert_eq!(keep.1[0], line_starts, "{format}");
        assert_eq!(
            schema.samples,
            parsed
                .iter()
                .map(|p| p.samples() as u64)
                .collect::<Vec<_>>()
        );
        // The data set's label range is the training input's (Criteo's parts keep their own).
        assert_eq!(schema.labels.as_ref(), parsed[0].label_range(), "{format}");
        for (part, parsed) in parsed.into_iter().enumerate() {
            let mut rows = std::mem::take(&mut keep.0[part]);
            schema.apply(&mut rows);
            let expected = Parsed::Sparse {
                rows,
                features: schema.features,
                label_map: schema.label_map,
                labels: parsed.label_range().cloned(),
            };
            assert_eq!(parsed, expected, "{format}, input {part}");
        }
    }
    let ratings = vec![("1\t2\t3\t4\n".as_bytes(), PathBuf::from("u.data"))];
    let refused = stream_sparse(
        ratings,
        InputFormat::Movielens,
        &ParseOptions::default(),
        &mut Keep::default(),
    );
    assert!(matches!(refused, Err(ParseError::Invalid { .. })));
}
