//! The inputs `prepare` reads: a file, gzip and zstd (told by their first bytes), standard
//! input (`-`), and an object on a store (`file:///…`, and `s3://…` on the moto_server that
//! `scripts/test.sh` starts) — each giving the very data set the plain file gives.

mod common;

use std::io::Write;
use std::path::Path;

use common::*;
use mlless_data::SparseLrSpec;
use mlless_runtime::dataset::Split;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).expect("zstd")
}

/// `prepare` of `input` (a path or URL) into `out`, with standard input `stdin`.
fn prepare_from(input: &str, out: &Path, stdin: Option<&[u8]>) -> std::process::Output {
    let mut cmd = mlless();
    cmd.args(["prepare", "--format", "libsvm", "--input", input])
        .args(["--out", &s(out), "--batch-size", "250"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("mlless starts");
    let mut pipe = child.stdin.take().expect("stdin");
    if let Some(bytes) = stdin {
        pipe.write_all(bytes).expect("write stdin");
    }
    drop(pipe);
    child.wait_with_output().expect("mlless ends")
}

/// Every split of the data set at `url`.
fn splits(url: &str) -> [Vec<mlless_core::Batch>; 3] {
    [Split::Train, Split::Validation, Split::Test].map(|split| batches_at(url, split))
}

#[test]
fn compressed_piped_and_stored_inputs_give_the_data_set_of_the_plain_file() {
    let dir = tempdir();
    let (input, _) = write_sparse_lr(dir.path(), &SparseLrSpec::new(2_000, 300, 8, 3));
    let text = std::fs::read(&input).expect("input");
    let plain = dir.path().join("plain");
    let out = prepare_from(&s(&input), &plain, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = splits(&s(&plain));
    assert!(expected[0].len() >= 6, "a few training minibatches");

    let gz = dir.path().join("in.libsvm.gz");
    std::fs::write(&gz, gzip(&text)).expect("write");
    // zstd under a name that says nothing: the first bytes tell.
    let zst = dir.path().join("in.data");
    std::fs::write(&zst, zstd(&text)).expect("write");
    let stored = dir.path().join("store");
    std::fs::create_dir_all(&stored).expect("mkdir");
    std::fs::write(stored.join("part.gz"), gzip(&text)).expect("write");
    let gz_bytes = gzip(&text);
    let cases: [(&str, String, Option<&[u8]>); 5] = [
        ("gzip", s(&gz), None),
        ("zstd", s(&zst), None),
        ("standard input", "-".into(), Some(&text)),
        ("gzip on standard input", "-".into(), Some(&gz_bytes)),
        (
            "an object on a store",
            format!("file://{}/part.gz", s(&stored)),
            None,
        ),
    ];
    for (i, (what, input, stdin)) in cases.iter().enumerate() {
        let out_dir = dir.path().join(format!("out-{i}"));
        let out = prepare_from(input, &out_dir, *stdin);
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(splits(&s(&out_dir)) == expected, "{what}: another data set");
    }
}

#[test]
fn an_input_on_s3_is_read_as_a_stream_and_gives_the_same_data_set() {
    let Ok(base) = std::env::var("MLLESS_TEST_S3_URL") else {
        eprintln!("MLLESS_TEST_S3_URL not set (scripts/test.sh sets it): skipped");
        return;
    };
    let dir = tempdir();
    let (input, _) = write_sparse_lr(dir.path(), &SparseLrSpec::new(2_000, 300, 8, 3));
    let text = std::fs::read(&input).expect("input");
    let prefix = format!("{base}/inputs-{}", std::process::id());
    block_on(async {
        let store = mlless_store::Store::open(&prefix).expect("store");
        store
            .put("lr.libsvm.zst", zstd(&text).into())
            .await
            .expect("put");
    });
    let plain = dir.path().join("plain");
    assert!(prepare_from(&s(&input), &plain, None).status.success());
    let from_s3 = dir.path().join("from-s3");
    let out = prepare_from(&format!("{prefix}/lr.libsvm.zst"), &from_s3, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        splits(&s(&from_s3)) == splits(&s(&plain)),
        "another data set"
    );
    let missing = prepare_from(&format!("{prefix}/nothing.gz"), &dir.path().join("x"), None);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(stderr.contains(&format!("{prefix}/nothing.gz")), "{stderr}");
}

#[test]
fn a_cut_compressed_input_is_an_error_naming_it_and_stdin_is_read_once() {
    let dir = tempdir();
    let (input, _) = write_sparse_lr(dir.path(), &SparseLrSpec::new(2_000, 300, 8, 3));
    let mut bytes = gzip(&std::fs::read(&input).expect("input"));
    bytes.truncate(bytes.len() / 2);
    let cut = dir.path().join("cut.gz");
    std::fs::write(&cut, bytes).expect("write");
    let out_dir = dir.path().join("out");
    let out = prepare_from(&s(&cut), &out_dir, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("{}: ", s(&cut))), "{stderr}");
    assert!(!out_dir.join("manifest.json").exists(), "no data set");

    let stderr = fails(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        "-",
        "--test-input",
        "-",
        "--out",
        &s(&out_dir),
    ]);
    assert!(
        stderr.contains("standard input (-) can be only one of"),
        "{stderr}"
    );
}

/// Every row of every split of the data set at `url`, as `(label, indices, values)` with the
/// values' bits, sorted: the data set's rows whatever their order.
fn sorted_rows(url: &str) -> Vec<(u32, Vec<u32>, Vec<u32>)> {
    let mut rows = Vec::new();
    for batch in splits(url).into_iter().flatten() {
        let mlless_core::Batch::Sparse(batch) = batch else {
            panic!("sparse rows")
        };
        for r in 0..batch.rows() {
            let (label, indices, values) = batch.row(r);
            let values = values.iter().map(|v| v.to_bits()).collect();
            rows.push((label.to_bits(), indices.to_vec(), values));
        }
    }
    rows.sort();
    rows
}

/// `prepare --format csv` of `text` (written to `dir/NAME`) into `dir/out-NAME` with `extra`;
/// returns the data set's location.
fn prepare_csv(dir: &Path, name: &str, text: &str, extra: &[&str]) -> String {
    let input = write(dir, name, text);
    let out = dir.join(format!("out-{name}"));
    let mut args = vec!["--batch-size", "250"];
    args.extend(extra);
    prepare("csv", &input, &out, &args);
    s(&out)
}

/// CSV read with the `csv` crate: the label in another column (by index or by its name in the
/// header), another delimiter (tab, `;`), quoted fields, CRLF and blank lines give the data set
/// of the same rows written plainly (label first, commas). Lines of the same length give the
/// very same data set, in the same order (the shuffle keys a row by the offset of its line).
#[test]
fn csv_read_with_delimiter_header_and_label_column_gives_the_rows_of_plain_csv() {
    let dir = tempdir();
    let dir = dir.path();
    // 1200 rows of a label and three features, each field one character wide (so that every
    // layout below keeps every line's offset), some zeros and missing values.
    let rows: Vec<[String; 4]> = (0..1200)
        .map(|i: u32| {
            let f = |k: u32| match (i * 7 + k * 3) % 5 {
                0 => String::new(),
                v => v.to_string(),
            };
            [(i % 2).to_string(), f(1), f(2), f(3)]
        })
        .collect();
    let lines = |order: [usize; 4], delimiter: &str, end: &str| -> String {
        rows.iter()
            .map(|r| order.map(|c| r[c].as_str()).join(delimiter) + end)
            .collect()
    };
    let plain = prepare_csv(dir, "plain.csv", &lines([0, 1, 2, 3], ",", "\n"), &[]);
    let expected = splits(&plain);
    assert!(expected[0].len() >= 3, "a few training minibatches");

    // The same offsets: the same data set.
    let last = prepare_csv(
        dir,
        "last.tsv",
        &lines([1, 2, 3, 0], "\t", "\n"),
        &["--delimiter", "tab", "--label-column", "3"],
    );
    assert!(splits(&last) == expected, "label last, tab-separated");
    let middle = prepare_csv(
        dir,
        "middle.csv",
        &lines([1, 0, 2, 3], ";", "\n"),
        &[
            "--delimiter",
            ";",
            "--label-column",
            "1",
            "--header",
            "false",
        ],
    );
    assert!(splits(&middle) == expected, "label in the middle, ;");

    // Other offsets: the same rows.
    let expected = sorted_rows(&plain);
    let header = "\u{feff}\"a\",\"b;c\",y,d\r\n\r\n".to_string()
        + &rows
            .iter()
            .map(|r| format!("\"{}\";{};\"{}\";{}\r\n", r[1], r[2], r[0], r[3]))
            .collect::<String>();
    let named = prepare_csv(
        dir,
        "named.csv",
        &header.replace(',', ";"),
        &["--delimiter", ";", "--label-column", "y"],
    );
    assert_eq!(sorted_rows(&named), expected, "by name, quoted, CRLF");
    let manifest = std::fs::read(Path::new(&named).join("manifest.json")).expect("manifest");
    let manifest = mlless_data::Manifest::from_json(&manifest).expect("manifest reads");
    let schema = manifest.schema.expect("schema");
    assert_eq!(schema.csv_columns, Some(4));
    assert_eq!(
        schema.csv,
        Some(mlless_data::CsvDialect {
            delimiter: b';',
            header: mlless_data::CsvHeader::Auto,
            label_column: 2,
        })
    );
}
