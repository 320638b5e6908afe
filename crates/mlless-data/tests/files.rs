//! Parsers on real files, and the whole preparation path from a generated file to a manifest.

use std::fs;
use std::path::{Path, PathBuf};

use mlless_data::{
    Batch, BatchInfo, DatasetKind, InputFormat, LabelMap, MANIFEST_VERSION, Manifest, ParseError,
    ParseOptions, Parsed, RatingsSpec, SourceInfo, SparseLrSpec, SplitInfo, batch_key,
    decode_batch_checked, encode_batch, into_batches, parse_file, parse_files, shuffle_split,
    write_ratings, write_sparse_lr,
};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

fn parse(path: &Path, format: InputFormat, features: Option<u32>) -> Result<Parsed, ParseError> {
    let options = ParseOptions {
        features,
        ..ParseOptions::default()
    };
    parse_file(path, format, &options)
}

/// Asserts that parsing fails on `line` of `path` with a message starting with `message`.
fn assert_line_error(result: Result<Parsed, ParseError>, path: &Path, line: u64, message: &str) {
    let err = result.unwrap_err();
    match &err {
        ParseError::Line {
            path: p, line: l, ..
        } => {
            assert_eq!((p.as_path(), *l), (path, line), "{err}");
        }
        other => panic!("expected a line error, got {other}"),
    }
    let prefix = format!("{}:{line}: {message}", path.display());
    assert!(
        err.to_string().starts_with(&prefix),
        "{err} does not start with {prefix}"
    );
}

#[test]
fn libsvm_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "data.libsvm", "-1 1:0.5 7:1\n+1 2:2\n");
    let Parsed::Sparse {
        rows,
        features,
        label_map,
        ..
    } = parse(&path, InputFormat::Libsvm, None).unwrap()
    else {
        panic!()
    };
    assert_eq!((rows.rows(), features), (2, 7));
    assert_eq!(rows.indices, vec![0, 6, 1]);
    assert_eq!(
        label_map,
        Some(LabelMap {
            negative: -1.0,
            positive: 1.0
        })
    );

    let bad = write(
        dir.path(),
        "bad.libsvm",
        "1 1:1\n# comment\n0 2:1\n1 3:1 abc\n",
    );
    assert_line_error(
        parse(&bad, InputFormat::Libsvm, None),
        &bad,
        4,
        "expected INDEX:VALUE, found \"abc\"",
    );
}

#[test]
fn csv_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "higgs.csv", "y,f1,f2\n1,0.5,\n0,,2\n");
    let Parsed::Sparse { rows, features, .. } = parse(&path, InputFormat::Csv, None).unwrap()
    else {
        panic!()
    };
    assert_eq!((rows.rows(), features), (2, 2));
    let bad = write(dir.path(), "bad.csv", "y,f1,f2\n1,0.5,1\n0,1\n");
    assert_line_error(
        parse(&bad, InputFormat::Csv, None),
        &bad,
        3,
        "expected 3 columns, found 2",
    );
}

#[test]
fn movielens_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "ratings.dat",
        "1::1193::5::978300760\n2::661::3::978302109\n",
    );
    let Parsed::Ratings {
        ratings,
        users,
        items,
    } = parse(&path, InputFormat::Movielens, None).unwrap()
    else {
        panic!()
    };
    assert_eq!((ratings.len(), users, items), (2, 2, 2));
    assert_eq!(ratings.items, vec![1, 0]);
    let bad = write(
        dir.path(),
        "u.data",
        "196\t242\t3\t881250949\n186\t302\tthree\t891717742\n",
    );
    assert_line_error(
        parse(&bad, InputFormat::Movielens, None),
        &bad,
        2,
        "expected a rating, found \"three\"",
    );
}

#[test]
fn criteo_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut line = vec!["1", "5", "", "-2"];
    line.extend([""; 10]);
    line.extend(["05db9164", "38a947a1"]);
    line.extend([""; 24]);
    let good = line.join("\t");
    let path = write(dir.path(), "train.txt", &format!("{good}\n{good}\n"));
    let Parsed::Sparse { rows, features, .. } =
        parse(&path, InputFormat::Criteo, Some(1000)).unwrap()
    else {
        panic!()
    };
    assert_eq!((rows.rows(), features), (2, 1000));
    assert_eq!(rows.row(0).1.len(), 4);
    let bad = write(
        dir.path(),
        "bad.txt",
        &format!("{good}\n{}\n", good.replacen('1', "x", 1)),
    );
    assert_line_error(
        parse(&bad, InputFormat::Criteo, Some(1000)),
        &bad,
        2,
        "expected label 0 or 1, found \"x\"",
    );
}

#[test]
fn io_and_empty_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.libsvm");
    let err = parse(&missing, InputFormat::Libsvm, None).unwrap_err();
    assert!(matches!(&err, ParseError::Io { path, .. } if path == &missing));
    assert!(
        err.to_string().starts_with(&missing.display().to_string()),
        "{err}"
    );
    let empty = write(dir.path(), "empty.csv", "");
    let err = parse(&empty, InputFormat::Csv, None).unwrap_err();
    assert!(matches!(&err, ParseError::Empty { path } if path == &empty));
    assert_eq!(err.to_string(), format!("{}: no samples", empty.display()));
}

/// Generated file → parse → split → batches → encoded objects → manifest, and back.
fn prepare_roundtrip(path: &Path, format: InputFormat) {
    let parsed = parse(path, format, None).unwrap();
    let samples = parsed.samples();
    let (train, test) = shuffle_split(parsed, 0.1, 3).unwrap();
    let kind = train.dataset_kind();
    let mut splits = [SplitInfo::default(), SplitInfo::default()];
    let mut objects = Vec::new();
    for (split, (name, data)) in splits.iter_mut().zip([("train", &train), ("test", &test)]) {
        for (k, batch) in into_batches(data, 64).unwrap().into_iter().enumerate() {
            let bytes = encode_batch(&batch);
            split.push(BatchInfo::new(
                batch_key(name, k),
                batch.samples() as u32,
                &bytes,
            ));
            objects.push((batch, bytes));
        }
    }
    let [train_info, test_info] = splits;
    assert_eq!(train_info.samples + test_info.samples, samples as u64);
    let manifest = Manifest {
        format_version: MANIFEST_VERSION,
        dataset_id: None,
        kind: kind.clone(),
        batch_size: 64,
        train: train_info,
        test: test_info,
        validation: SplitInfo::default(),
        normalization: None,
        label_map: train.label_map(),
        labels: train.label_range().cloned(),
        source: SourceInfo {
            format: format.to_string(),
            input: path.display().to_string(),
            seed: 3,
            test_fraction: Some(0.1),
            validation_fraction: None,
        },
        created_unix_s: 0,
        schema: None,
        rating_counts: None,
    };
    let back = Manifest::from_json(&manifest.to_json()).unwrap();
    assert_eq!(back, manifest);
    let infos = back.train.batches.iter().chain(&back.test.batches);
    for (info, (batch, bytes)) in infos.zip(&objects) {
        assert!(info.matches(bytes));
        let decoded: Batch = decode_batch_checked(bytes, &back.kind).unwrap();
        assert_eq!(&decoded, batch);
    }
}

#[test]
fn generated_data_goes_through_preparation() {
    let dir = tempfile::tempdir().unwrap();
    let lr = dir.path().join("lr.libsvm");
    write_sparse_lr(
        &SparseLrSpec::new(1000, 500, 10, 1),
        fs::File::create(&lr).unwrap(),
    )
    .unwrap();
    prepare_roundtrip(&lr, InputFormat::Libsvm);

    let ml = dir.path().join("u.data");
    let spec = RatingsSpec {
        users: 100,
        items: 80,
        rank: 4,
        density: 0.1,
        noise: 0.3,
        seed: 2,
        ..Default::default()
    };
    let truth = write_ratings(&spec, fs::File::create(&ml).unwrap()).unwrap();
    prepare_roundtrip(&ml, InputFormat::Movielens);
    let parsed = parse(&ml, InputFormat::Movielens, None).unwrap();
    let DatasetKind::Ratings { mean, .. } = parsed.dataset_kind() else {
        panic!()
    };
    assert!((f64::from(mean) - truth.mean).abs() < 1e-4);
}

#[test]
fn train_and_test_files_share_one_schema() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ParseOptions::default();
    // LIBSVM: the test file's index 0 makes both 0-based; the dimension covers both; the test
    // file's labels are mapped with the pair of values seen over both files.
    let train = write(dir.path(), "train.libsvm", "-1 1:1 2:1\n+1 3:1\n");
    let test = write(dir.path(), "test.libsvm", "+1 0:1 5:1\n");
    let parts = parse_files(&[&train, &test], InputFormat::Libsvm, &opts).unwrap();
    let [
        Parsed::Sparse {
            rows: a,
            features: fa,
            label_map: la,
            ..
        },
        Parsed::Sparse {
            rows: b,
            features: fb,
            label_map: lb,
            ..
        },
    ] = &parts[..]
    else {
        panic!("{parts:?}")
    };
    assert_eq!((*fa, *fb), (6, 6));
    assert_eq!(a.indices, vec![1, 2, 3]);
    assert_eq!(b.indices, vec![0, 5]);
    assert_eq!(a.labels, vec![0.0, 1.0]);
    assert_eq!(b.labels, vec![1.0]);
    assert_eq!(
        (*la, *lb),
        (
            Some(LabelMap {
                negative: -1.0,
                positive: 1.0
            }),
            *la
        )
    );

    // MovieLens: one dense id per original id over both files.
    let train = write(dir.path(), "train.data", "10\t100\t4\t0\n30\t300\t3\t0\n");
    let test = write(dir.path(), "test.data", "20\t100\t5\t0\n30\t200\t1\t0\n");
    let parts = parse_files(&[&train, &test], InputFormat::Movielens, &opts).unwrap();
    let [
        Parsed::Ratings {
            ratings: a,
            users,
            items,
        },
        Parsed::Ratings {
            ratings: b,
            users: u2,
            items: i2,
        },
    ] = &parts[..]
    else {
        panic!("{parts:?}")
    };
    assert_eq!((*users, *items, *u2, *i2), (3, 3, 3, 3));
    assert_eq!((a.users.clone(), a.items.clone()), (vec![0, 2], vec![0, 2]));
    assert_eq!((b.users.clone(), b.items.clone()), (vec![1, 2], vec![0, 1]));

    // CSV parts must have the same columns.
    let train = write(dir.path(), "train.csv", "1,2,3\n0,1,1\n");
    let test = write(dir.path(), "test.csv", "1,2\n");
    let err = parse_files(&[&train, &test], InputFormat::Csv, &opts).unwrap_err();
    assert!(
        matches!(&err, ParseError::Invalid { path, .. } if path == &test),
        "{err}"
    );

    // Every part must hold samples.
    let empty = write(dir.path(), "empty.csv", "a,b,c\n");
    let err = parse_files(&[&train, &empty], InputFormat::Csv, &opts).unwrap_err();
    assert!(
        matches!(&err, ParseError::Empty { path } if path == &empty),
        "{err}"
    );
}
