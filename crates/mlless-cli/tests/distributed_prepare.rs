//! `prepare --distributed`: split-map tasks parse byte ranges of the input (on a store) into
//! buckets, shuffle-reduce tasks cut the buckets into minibatches; the data set is the one the
//! local path writes for the same seed, object for object, on the local store and on S3, for
//! an input of one file and for a directory or prefix of part files.

mod common;

use std::io::Write;
use std::path::Path;

use common::*;
use mlless_core::Batch;
use mlless_runtime::dataset::Split;

/// A LIBSVM file of `rows` rows, -1/+1 labels, 1-based indices, with blank and comment lines,
/// rows of different lengths (so that the byte ranges cut lines anywhere).
fn write_libsvm(path: &Path, rows: u32) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("create input"));
    writeln!(out, "# generated").expect("write");
    for i in 0..rows {
        let label = if i % 3 == 0 { "+1" } else { "-1" };
        write!(out, "{label} 1:{i}").expect("write");
        for k in 0..(i % 17) {
            let index = 2 + (i.wrapping_mul(2_654_435_761) >> 8).wrapping_add(k * 997) % 5_000;
            write!(out, " {}:0.{:03}", index + k * 5_000, (i + k) % 999 + 1).expect("write");
        }
        writeln!(out).expect("write");
        if i % 1_000 == 7 {
            writeln!(out).expect("write");
        }
    }
    out.flush().expect("flush");
}

/// The manifest at `url` as JSON, without the time it was written and the preparation's
/// identity (new at every preparation).
fn manifest(url: &str) -> serde_json::Value {
    let mut value: serde_json::Value = block_on(async {
        let store = mlless_store::Store::open(url).expect("store");
        let bytes = store
            .get(mlless_data::MANIFEST_KEY)
            .await
            .expect("manifest");
        serde_json::from_slice(&bytes).expect("manifest JSON")
    });
    let object = value.as_object_mut().expect("an object");
    object.remove("created_unix_s");
    object.remove("dataset_id");
    value
}

/// The names of the functions the preparation at `url` invoked, from its record.
fn invocations(url: &str) -> Vec<String> {
    let record: serde_json::Value = block_on(async {
        let store = mlless_store::Store::open(url).expect("store");
        let key = mlless_job::record::PREPARE_RECORD_KEY;
        let bytes = store.get(key).await.expect("record");
        serde_json::from_slice(&bytes).expect("record JSON")
    });
    record["invocations"]
        .as_array()
        .expect("invocations")
        .iter()
        .map(|i| i["name"].as_str().expect("a name").to_string())
        .collect()
}

/// Every minibatch object of the data set at `url`, with its bytes, in key order, and what is
/// left under `staging/`.
fn objects(url: &str) -> (Vec<(String, Vec<u8>)>, usize) {
    block_on(async {
        let store = mlless_store::Store::open(url).expect("store");
        let mut out = Vec::new();
        for split in ["train/", "validation/", "test/"] {
            for key in store.list(split).await.expect("list") {
                let bytes = store.get(&key).await.expect("get");
                out.push((key, bytes.to_vec()));
            }
        }
        (out, store.list("staging/").await.expect("list").len())
    })
}

/// Prepares `input` with `args`, distributed or not, into `out`.
fn prepare_into(format: &str, input: &str, out: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec![
        "prepare", "--format", format, "--input", input, "--out", out,
    ];
    all.extend(args);
    run(&all)
}

/// Asserts that the data sets at `local` and `distributed` are the same, object for object, and
/// their manifests too if they were prepared from the same input.
fn assert_same(local: &str, distributed: &str, same_input: bool) {
    let (a, _) = objects(local);
    let (b, staged) = objects(distributed);
    assert!(a.len() > 10, "{} minibatches", a.len());
    assert_eq!(
        a.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        b.iter().map(|(k, _)| k).collect::<Vec<_>>(),
        "the same minibatches"
    );
    for ((key, x), (_, y)) in a.iter().zip(&b) {
        assert!(x == y, "{key} differs");
    }
    assert_eq!(staged, 0, "staging/ is removed");
    if same_input {
        assert_eq!(manifest(local), manifest(distributed));
    }
}

#[test]
fn distributed_prepare_gives_the_local_data_set_and_refuses_what_it_cannot_read() {
    let dir = tempdir();
    let input = dir.path().join("rows.svm");
    write_libsvm(&input, 30_000);
    let common = ["--batch-size", "700", "--seed", "5"];
    for (name, extra) in [
        ("plain", &[][..]),
        ("scaled", &["--normalize", "minmax"][..]),
    ] {
        let local = s(&dir.path().join(format!("{name}-local")));
        let distributed = s(&dir.path().join(format!("{name}-distributed")));
        let mut args = common.to_vec();
        args.extend(extra);
        let out = prepare_into("libsvm", &s(&input), &local, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Three ranges, and a memory limit that makes several buckets of them.
        args.extend(["--distributed", "--map-tasks", "3", "--memory-mb", "64"]);
        let out = prepare_into("libsvm", &s(&input), &distributed, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let names = invocations(&distributed);
        for round in ["split-map-", "shuffle-reduce-"] {
            let count = names.iter().filter(|n| n.starts_with(round)).count();
            assert_eq!(count, 3, "{round}: {names:?}");
        }
        assert_same(&local, &distributed, true);
        let labels = manifest(&distributed)["label_map"].clone();
        assert_eq!(labels["negative"], -1.0, "{labels}");
    }

    // What it cannot read is refused before anything is written, naming why.
    let gz = dir.path().join("rows.svm.gz");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(b"1 1:1\n").expect("gzip");
    std::fs::write(&gz, encoder.finish().expect("gzip")).expect("write");
    let out = prepare_into(
        "libsvm",
        &s(&gz),
        &s(&dir.path().join("x")),
        &["--distributed"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("compressed"),
        "{stderr}"
    );
    let csv = write(dir.path(), "a.csv", "1,2\n0,3\n");
    let out = prepare_into(
        "csv",
        &s(&csv),
        &s(&dir.path().join("y")),
        &["--distributed"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--format csv"),
        "{stderr}"
    );

    // A bad line is named with its place in the input.
    let bad = dir.path().join("bad.svm");
    let mut text = std::fs::read_to_string(&input).expect("input");
    text.push_str("1 3:x\n");
    std::fs::write(&bad, text).expect("write");
    let out = prepare_into(
        "libsvm",
        &s(&bad),
        &s(&dir.path().join("z")),
        &["--distributed"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("bad.svm"),
        "{stderr}"
    );
    assert!(
        !dir.path()
            .join("z")
            .join(mlless_data::MANIFEST_KEY)
            .exists()
    );
}

/// The lines of `text` cut into `parts` pieces of different sizes, each whole lines.
fn cut_lines(text: &str, parts: usize) -> Vec<String> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    // Sizes 1 : 2 : 3 : … of the lines.
    let weights: usize = (1..=parts).sum();
    let mut out = Vec::new();
    let mut start = 0;
    for p in 1..=parts {
        let end = if p == parts {
            lines.len()
        } else {
            start + lines.len() * p / weights
        };
        out.push(lines[start..end].concat());
        start = end;
    }
    out
}

/// Every row of every split of the data set at `data`, sorted: the data set as a multiset.
fn all_rows(data: &Path) -> Vec<(u32, Vec<u32>, Vec<u32>)> {
    let mut rows = Vec::new();
    for split in [Split::Train, Split::Validation, Split::Test] {
        for batch in batches(data, split) {
            let Batch::Sparse(batch) = batch else {
                panic!("sparse minibatches");
            };
            for (label, indices, values) in batch.iter_rows() {
                let bits = values.iter().map(|v| v.to_bits()).collect();
                rows.push((label.to_bits(), indices.to_vec(), bits));
            }
        }
    }
    rows.sort_unstable();
    rows
}

#[test]
fn a_directory_of_part_files_is_one_input_locally_and_distributed() {
    let dir = tempdir();
    let whole = dir.path().join("rows.svm");
    write_libsvm(&whole, 12_000);
    let text = std::fs::read_to_string(&whole).expect("input");
    let parts_dir = dir.path().join("parts");
    std::fs::create_dir(&parts_dir).expect("mkdir");
    for (i, part) in cut_lines(&text, 3).iter().enumerate() {
        std::fs::write(parts_dir.join(format!("part-{i:05}")), part).expect("write part");
    }
    // What Spark and Hadoop leave beside their parts is not read.
    std::fs::write(parts_dir.join("_SUCCESS"), "").expect("write");
    std::fs::write(parts_dir.join(".part-00000.crc"), "not libsvm").expect("write");
    std::fs::write(parts_dir.join("part-00003"), "").expect("an empty partition");

    let args = ["--batch-size", "500", "--seed", "9"];
    let from_file = dir.path().join("from-file");
    let from_parts = dir.path().join("from-parts");
    for (input, out) in [(&whole, &from_file), (&parts_dir, &from_parts)] {
        let output = prepare_into("libsvm", &s(input), &s(out), &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
    }
    // The same rows as the file they were cut from (in another order: a row's shuffle key is
    // its place in its part).
    let rows = all_rows(&from_file);
    assert_eq!(rows.len(), 12_000);
    assert_eq!(all_rows(&from_parts), rows);

    // Three parts over two tasks: a task's range spans the end of one part and the start of
    // the next. The same data set as the local path's.
    let distributed = dir.path().join("distributed");
    let mut flags = args.to_vec();
    flags.extend(["--distributed", "--map-tasks", "2", "--memory-mb", "64"]);
    let output = prepare_into("libsvm", &s(&parts_dir), &s(&distributed), &flags);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_same(&s(&from_parts), &s(&distributed), true);
    let labels = &manifest(&s(&distributed))["labels"];
    assert!(
        labels["min"]["input"]
            .as_str()
            .is_some_and(|i| i.ends_with("part-00000")),
        "{labels}"
    );

    // A compressed part is read by the local path (the same rows), refused by --distributed.
    let part = parts_dir.join("part-00002");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder
        .write_all(&std::fs::read(&part).expect("part"))
        .expect("gzip");
    std::fs::write(
        parts_dir.join("part-00002.gz"),
        encoder.finish().expect("gzip"),
    )
    .expect("write");
    std::fs::remove_file(&part).expect("remove");
    let from_gz = dir.path().join("from-gz");
    let output = prepare_into("libsvm", &s(&parts_dir), &s(&from_gz), &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(all_rows(&from_gz), rows);
    let output = prepare_into("libsvm", &s(&parts_dir), &s(&dir.path().join("x")), &flags);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("part-00002.gz is compressed"),
        "{stderr}"
    );

    // A bad line is named by its part and its line there.
    let second = parts_dir.join("part-00001");
    let mut bad = std::fs::read_to_string(&second).expect("part");
    let line = bad.lines().count() + 1;
    bad.push_str("1 3:x\n");
    std::fs::write(&second, bad).expect("write");
    let message = fails(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&parts_dir),
        "--out",
        &s(&dir.path().join("y")),
    ]);
    assert!(
        message.contains(&format!("part-00001:{line}:")),
        "{message}"
    );
}

#[test]
fn distributed_prepare_of_criteo_on_s3_gives_the_local_data_set() {
    let Ok(base) = std::env::var("MLLESS_TEST_S3_URL") else {
        eprintln!("MLLESS_TEST_S3_URL not set (scripts/test.sh sets it): skipped");
        return;
    };
    let dir = tempdir();
    let input = dir.path().join("criteo.tsv");
    ok(&[
        "generate",
        "criteo",
        "--samples",
        "8000",
        "--out",
        &s(&input),
    ]);
    let prefix = format!("{base}/distributed-{}", std::process::id());
    block_on(async {
        let store = mlless_store::Store::open(&prefix).expect("store");
        let text = std::fs::read_to_string(&input).expect("input");
        for (i, part) in cut_lines(&text, 3).into_iter().enumerate() {
            let key = format!("parts/part-{i:05}");
            store.put(&key, part.into()).await.expect("put");
        }
        store.put("parts/_SUCCESS", "".into()).await.expect("put");
        store.put("criteo.tsv", text.into()).await.expect("put");
    });
    let args = ["--features", "65536", "--batch-size", "300"];
    let local = s(&dir.path().join("local"));
    let out = prepare_into("criteo", &s(&input), &local, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let on_s3 = format!("{prefix}/data");
    let mut distributed = args.to_vec();
    distributed.extend(["--distributed", "--map-tasks", "2"]);
    let out = prepare_into(
        "criteo",
        &format!("{prefix}/criteo.tsv"),
        &on_s3,
        &distributed,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The manifests differ only in where the input was.
    let (mut a, mut b) = (manifest(&local), manifest(&on_s3));
    for m in [&mut a, &mut b] {
        m["source"]["input"] = serde_json::Value::Null;
        m["labels"]["min"]["input"] = serde_json::Value::Null;
        m["labels"]["max"]["input"] = serde_json::Value::Null;
    }
    assert_eq!(a, b);
    assert_same(&local, &on_s3, false);
    assert!(
        manifest(&on_s3)["normalization"].is_object(),
        "criteo is scaled"
    );
    assert_eq!(
        batches_at(&on_s3, Split::Test).len(),
        batches(Path::new(&local), Split::Test).len()
    );

    // A prefix of part files, read through the driver by the local path and by split-map
    // tasks: the same data set.
    let parts = format!("{prefix}/parts/");
    let (local, on_s3) = (
        s(&dir.path().join("local-parts")),
        format!("{prefix}/data-parts"),
    );
    let out = prepare_into("criteo", &parts, &local, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = prepare_into("criteo", &parts, &on_s3, &distributed);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_same(&local, &on_s3, true);
    let whole = manifest(&s(&dir.path().join("local")));
    for split in ["train", "validation", "test"] {
        let samples = &manifest(&on_s3)[split]["samples"];
        assert_eq!(samples, &whole[split]["samples"], "{split}");
    }
}
