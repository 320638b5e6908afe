//! `mlless predict` and `mlless export` end to end: on a test set prepared with `--test-input`,
//! `predict --evaluate` gives the run record's test metrics for every model; PMF predictions
//! come back by original (sparse, large) ids, an unseen user gets the bias-only prediction;
//! bad input is an error naming file and line; and the README's Python snippets reproduce
//! `predict` from the exported safetensors file.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use mlless_core::ModelSpec;
use mlless_job::RunRecord;

/// Writes the first `train` lines of `text` to `dir/NAME.train` and the rest to
/// `dir/NAME.test`.
fn split(dir: &Path, name: &str, text: &str, train: usize) -> (PathBuf, PathBuf) {
    let lines: Vec<&str> = text.lines().collect();
    let join = |part: &[&str]| part.iter().map(|l| format!("{l}\n")).collect::<String>();
    (
        write(dir, &format!("{name}.train"), &join(&lines[..train])),
        write(dir, &format!("{name}.test"), &join(&lines[train..])),
    )
}

/// Prepares `train` with its test set from `test` into `dir/store/NAME`.
fn prepare(dir: &Path, name: &str, format: &str, train: &Path, test: &Path) -> PathBuf {
    let data = dir.join("store").join(name);
    ok(&[
        "prepare",
        "--format",
        format,
        "--input",
        &s(train),
        "--test-input",
        &s(test),
        "--out",
        &s(&data),
        "--batch-size",
        "200",
    ]);
    data
}

/// Trains on `data` with 2 workers and `args`; returns the record.
fn train_on(dir: &Path, name: &str, data: &Path, args: &[&str]) -> RunRecord {
    let d = s(data);
    let runs = s(&dir.join("runs"));
    let mut all = vec!["--data", &d, "--runs", &runs, "--workers", "2"];
    all.extend_from_slice(args);
    train(dir, name, &all)
}

/// Runs `mlless predict`; returns the CSV written to standard output and standard error.
fn predict(model: &str, input: &Path, format: &str, evaluate: bool) -> (String, String) {
    let input = s(input);
    let mut args = vec![
        "predict", "--model", model, "--input", &input, "--format", format, "--out", "-",
    ];
    if evaluate {
        args.push("--evaluate");
    }
    let output = ok(&args);
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The `NAME VALUE …` metric lines `predict --evaluate` prints.
fn printed_metrics(stderr: &str) -> BTreeMap<String, f64> {
    stderr
        .lines()
        .filter(|l| l.starts_with("test_"))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            Some((words.next()?.to_string(), words.next()?.parse().ok()?))
        })
        .collect()
}

/// Every metric of the record equals the one `predict --evaluate` printed, to 1e-6.
fn assert_same_metrics(record: &RunRecord, stderr: &str) {
    let printed = printed_metrics(stderr);
    assert!(!record.metrics.is_empty());
    for (name, &want) in &record.metrics {
        let got = printed
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing from {stderr}"));
        assert!(
            (got - want).abs() <= 1e-6 * want.abs().max(1.0),
            "{} {name}: predict {got}, record {want}",
            record.spec.model.name()
        );
    }
}

/// The CSV's header and rows.
fn csv(text: &str) -> (String, Vec<Vec<String>>) {
    let mut lines = text.lines();
    let header = lines.next().expect("a header").to_string();
    let rows = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    (header, rows)
}

fn number(field: &str) -> f64 {
    field
        .parse()
        .unwrap_or_else(|_| panic!("a number: {field:?}"))
}

/// LR on -1/+1 labels: predict's metrics are the record's; labels come back as -1/1; the same
/// file without its labels scores the same.
fn check_lr(dir: &Path) -> (String, PathBuf) {
    let mut text = Vec::new();
    mlless_data::write_sparse_lr(&mlless_data::SparseLrSpec::new(4000, 500, 10, 3), &mut text)
        .expect("generate");
    let text: String = String::from_utf8(text)
        .expect("utf-8")
        .lines()
        .map(|l| match l.split_once(' ') {
            Some(("0", rest)) => format!("-1 {rest}\n"),
            Some(("1", rest)) => format!("+1 {rest}\n"),
            _ => panic!("a 0/1 label: {l}"),
        })
        .collect();
    let (train_file, test_file) = split(dir, "lr", &text, 3000);
    let data = prepare(dir, "lr", "libsvm", &train_file, &test_file);
    let record = train_on(dir, "lr", &data, &["--model", "lr", "--max-epochs", "3"]);
    let run = record.spec.run_url.as_str().to_owned();
    let (out, err) = predict(&run, &test_file, "libsvm", true);
    assert_same_metrics(&record, &err);
    let (header, rows) = csv(&out);
    assert_eq!(header, "probability,label");
    assert_eq!(rows.len(), 1000);
    for row in &rows {
        let p = number(&row[0]);
        assert!((0.0..=1.0).contains(&p));
        assert_eq!(row[1], if p > 0.5 { "1" } else { "-1" }, "{row:?}");
    }
    // Without labels: a first token that is INDEX:VALUE.
    let unlabelled: String = std::fs::read_to_string(&test_file)
        .expect("test file")
        .lines()
        .map(|l| format!("{}\n", l.split_once(' ').map_or("", |(_, rest)| rest)))
        .collect();
    let unlabelled = write(dir, "lr.unlabelled", &unlabelled);
    let (same, _) = predict(&run, &unlabelled, "libsvm", false);
    assert_eq!(same, out);
    let err = fails(&[
        "predict",
        "--model",
        &run,
        "--input",
        &s(&unlabelled),
        "--format",
        "libsvm",
        "--out",
        "-",
        "--evaluate",
    ]);
    assert!(err.contains("--evaluate needs labels"), "{err}");
    // --json: the summary as one document on standard output, the metrics next to the
    // record's; the predictions go to a file (--out - is refused with --json).
    let predictions = dir.join("lr.predictions.csv");
    let printed = ok(&[
        "predict",
        "--model",
        &run,
        "--input",
        &s(&test_file),
        "--format",
        "libsvm",
        "--out",
        &s(&predictions),
        "--evaluate",
        "--json",
    ]);
    let summary: serde_json::Value =
        serde_json::from_slice(&printed.stdout).expect("predict --json prints one JSON document");
    assert_eq!(summary["samples"], 1000, "{summary}");
    assert_eq!(summary["model"], "lr", "{summary}");
    for (name, value) in &record.metrics {
        let printed = summary["metrics"][name.as_str()].as_f64().expect("metric");
        assert!(
            (printed - value).abs() < 1e-6,
            "{name}: {printed} vs {value}"
        );
        assert_eq!(summary["recorded_metrics"][name.as_str()], *value);
    }
    assert_eq!(std::fs::read_to_string(&predictions).expect("csv"), out);
    let err = fails(&[
        "predict",
        "--model",
        &run,
        "--input",
        &s(&test_file),
        "--format",
        "libsvm",
        "--out",
        "-",
        "--json",
    ]);
    assert!(err.contains("give --out a file"), "{err}");
    (run, test_file)
}

/// PMF on ratings with sparse, large ids: rows come back by original ids in input order, their
/// RMSE and predict's are the record's; an unseen user gets the mean plus the item's bias.
fn check_pmf(dir: &Path) -> (String, PathBuf) {
    let mut text = Vec::new();
    let spec = mlless_data::RatingsSpec {
        users: 300,
        items: 200,
        rank: 5,
        density: 0.2,
        noise: 0.3,
        seed: 4,
        ..Default::default()
    };
    mlless_data::write_ratings(&spec, &mut text).expect("generate");
    // Users 1007, 2007, …; items up to about 10^6.
    let text: String = String::from_utf8(text)
        .expect("utf-8")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let (user, item): (u64, u64) = (f[0].parse().unwrap(), f[1].parse().unwrap());
            format!(
                "{}\t{}\t{}\t{}\n",
                user * 1000 + 7,
                item * 4999 + 1,
                f[2],
                f[3]
            )
        })
        .collect();
    let lines = text.lines().count();
    let (train_file, test_file) = split(dir, "ratings", &text, lines - 2000);
    let data = prepare(dir, "ratings", "movielens", &train_file, &test_file);
    let record = train_on(dir, "pmf", &data, &["--model", "pmf", "--max-epochs", "3"]);
    let run = record.spec.run_url.as_str().to_owned();
    let (out, err) = predict(&run, &test_file, "movielens", true);
    assert_same_metrics(&record, &err);
    let (header, rows) = csv(&out);
    assert_eq!(header, "user,item,rating");
    let test_text = std::fs::read_to_string(&test_file).expect("test file");
    let mut squared = 0.0;
    for (row, line) in rows.iter().zip(test_text.lines()) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!((row[0].as_str(), row[1].as_str()), (f[0], f[1]));
        let actual = f64::from(f[2].parse::<f32>().unwrap());
        squared += (number(&row[2]) - actual).powi(2);
    }
    assert_eq!(rows.len(), 2000);
    let rmse = (squared / rows.len() as f64).sqrt();
    let want = metric(&record, "test_rmse");
    assert!(
        (rmse - want).abs() <= 1e-6,
        "RMSE of the rows {rmse}, record {want}"
    );

    // An unseen user (and an unseen item): the mean plus the known bias, from the model's
    // parameters and the item's dense id (its rank among the data's distinct items).
    let ModelSpec::MatrixFactorization {
        users,
        items,
        factors,
        mean,
        ..
    } = record.spec.model
    else {
        panic!("a pmf spec")
    };
    let mut distinct: Vec<u64> = text
        .lines()
        .map(|l| l.split('\t').nth(1).unwrap().parse().unwrap())
        .collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), items as usize);
    let item = distinct[17];
    let params = stored_params(&record);
    let item_bias = params[((users + items) * factors + users) as usize + 17];
    let unseen = write(dir, "unseen.tsv", &format!("5\t{item}\n5\t3\n"));
    let (out, err) = predict(&run, &unseen, "movielens", false);
    assert!(
        err.contains("2 ratings of users and 1 of items the data set never had"),
        "{err}"
    );
    let (_, rows) = csv(&out);
    assert_eq!(rows[0][..2], ["5".to_string(), item.to_string()]);
    assert_eq!(number(&rows[0][2]), f64::from(mean + item_bias));
    assert_eq!(number(&rows[1][2]), f64::from(mean));
    (run, test_file)
}

/// `predict --evaluate` on the test set equals the run record's test metrics for every model,
/// and the README's Python snippets reproduce `predict` for LR and PMF from `export`.
/// `predict --out - | head -1`: the reader stops after one line of 20,000, and predict ends
/// with success and says nothing, as a filter does.
fn stops_quietly_when_the_reader_does(dir: &Path, run: &str, test_file: &Path) {
    use std::io::BufRead;
    let many = std::fs::read_to_string(test_file)
        .expect("test file")
        .repeat(20);
    let input = write(dir, "lr.many", &many);
    let mut child = common::mlless()
        .args(["predict", "--model", run, "--input", &s(&input)])
        .args(["--format", "libsvm", "--out", "-"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("predict starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut first = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut first)
        .expect("a line");
    assert_eq!(first.trim(), "probability,label");
    let output = child.wait_with_output().expect("predict ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
}

#[test]
fn predictions_match_the_record_and_the_exported_model() {
    let dir = tempdir();
    let dir = dir.path();
    let (lr_run, lr_test) = check_lr(dir);
    stops_quietly_when_the_reader_does(dir, &lr_run, &lr_test);
    let (pmf_run, pmf_test) = check_pmf(dir);

    // SVM on dense data, k-means on blobs, an MLP on three rings.
    let mut text = Vec::new();
    mlless_data::write_dense_lr(&mlless_data::DenseLrSpec::new(3000, 8, 5), &mut text)
        .expect("generate");
    let (tr, te) = split(dir, "dense", &String::from_utf8(text).unwrap(), 2400);
    let data = prepare(dir, "dense", "libsvm", &tr, &te);
    let record = train_on(dir, "svm", &data, &["--model", "svm", "--max-epochs", "3"]);
    let (out, err) = predict(&record.spec.run_url, &te, "libsvm", true);
    assert_same_metrics(&record, &err);
    assert_eq!(csv(&out).0, "margin,label");

    let mut text = Vec::new();
    mlless_data::write_blobs(&mlless_data::BlobsSpec::new(3000, 4, 5, 3), &mut text)
        .expect("generate");
    let (tr, te) = split(dir, "blobs", &String::from_utf8(text).unwrap(), 2400);
    let data = prepare(dir, "blobs", "libsvm", &tr, &te);
    let args = ["--model", "kmeans", "--k", "4", "--max-epochs", "5"];
    let record = train_on(dir, "kmeans", &data, &args);
    let (out, err) = predict(&record.spec.run_url, &te, "libsvm", true);
    assert_same_metrics(&record, &err);
    let (header, rows) = csv(&out);
    assert_eq!(header, "cluster,distance");
    let inertia: f64 = rows.iter().map(|r| number(&r[1]).powi(2)).sum();
    let want = metric(&record, "test_inertia");
    assert!((inertia - want).abs() <= 1e-6 * want, "{inertia} vs {want}");

    let mut text = Vec::new();
    mlless_data::write_rings(&mlless_data::RingsSpec::new(3000, 3, 9), &mut text)
        .expect("generate");
    let (tr, te) = split(dir, "rings", &String::from_utf8(text).unwrap(), 2400);
    let data = prepare(dir, "rings", "libsvm", &tr, &te);
    let args = [
        "--model",
        "mlp",
        "--classes",
        "3",
        "--hidden",
        "16",
        "--max-epochs",
        "3",
    ];
    let record = train_on(dir, "mlp", &data, &args);
    let model_bin = format!("{}/model.bin", record.spec.run_url);
    let (out, err) = predict(&model_bin, &te, "libsvm", true);
    assert_same_metrics(&record, &err);
    let (header, rows) = csv(&out);
    assert_eq!(header, "p0,p1,p2,label");
    for row in &rows {
        let p: Vec<f64> = row[..3].iter().map(|f| number(f)).collect();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let best = p.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(
            number(&row[3]),
            p.iter().position(|&q| q == best).unwrap() as f64
        );
    }

    python_snippets_reproduce_predict(dir, &lr_run, &lr_test, &pmf_run, &pmf_test);
}

/// The Python snippet of the README whose first line is `# NAME`.
fn readme_snippet(name: &str) -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let start = readme
        .find(&format!("```python\n# {name}"))
        .unwrap_or_else(|| panic!("the README has a ```python block starting with # {name}"));
    let code = &readme[start + "```python\n".len()..];
    code[..code.find("```").expect("the block ends")].to_string()
}

/// Whether `python3` with `safetensors` and `numpy` is here; without it the Python check is
/// skipped, except on CI (`CI=true`), where it fails.
fn python_ready() -> bool {
    let ready = std::process::Command::new("python3")
        .args(["-c", "import safetensors.numpy, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 with safetensors and numpy is missing on CI (scripts/test.sh installs them)"
        );
        eprintln!("skipped: python3 with the safetensors and numpy packages is missing");
    }
    ready
}

fn python_snippets_reproduce_predict(
    dir: &Path,
    lr_run: &str,
    lr_test: &Path,
    pmf_run: &str,
    pmf_test: &Path,
) {
    if !python_ready() {
        return;
    }
    for (name, run, test, format, column) in [
        ("predict_lr.py", lr_run, lr_test, "libsvm", 0),
        ("predict_pmf.py", pmf_run, pmf_test, "movielens", 2),
    ] {
        let model = dir.join(format!("{name}.safetensors"));
        ok(&["export", "--model", run, "--out", &s(&model)]);
        let script = write(dir, name, &readme_snippet(name));
        let output = std::process::Command::new("python3")
            .args([s(&script), s(&model), s(test)])
            .output()
            .expect("python3 runs");
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let python: Vec<f64> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(number)
            .collect();
        let (out, _) = predict(run, test, format, false);
        let (_, rows) = csv(&out);
        assert_eq!(python.len(), rows.len(), "{name}");
        for (p, row) in python.iter().zip(&rows) {
            let want = number(&row[column]);
            assert!(
                (p - want).abs() <= 1e-5,
                "{name}: python {p}, mlless {want}"
            );
        }
    }
}

/// A malformed line is an error naming the file and the line; a feature index beyond the
/// model is ignored, and said so.
#[test]
fn bad_input_names_its_line_and_unknown_features_are_ignored() {
    let dir = tempdir();
    let dir = dir.path();
    let text = "1 1:1 2:0.5\n0 2:1 3:1\n1 1:2\n0 3:2\n".repeat(50);
    let (tr, te) = split(dir, "tiny", &text, 160);
    let data = prepare(dir, "tiny", "libsvm", &tr, &te);
    let record = train_on(dir, "tiny", &data, &["--model", "lr", "--max-epochs", "1"]);
    let run = record.spec.run_url.as_str();
    let bad = write(dir, "bad.libsvm", "1 1:1\n1 2:x\n");
    let err = fails(&[
        "predict",
        "--model",
        run,
        "--input",
        &s(&bad),
        "--format",
        "libsvm",
        "--out",
        "-",
    ]);
    assert!(
        err.contains("bad.libsvm:2: expected a numeric value"),
        "{err}"
    );
    let mixed = write(dir, "mixed.libsvm", "1 1:1\n2:1\n");
    let err = fails(&[
        "predict",
        "--model",
        run,
        "--input",
        &s(&mixed),
        "--format",
        "libsvm",
        "--out",
        "-",
    ]);
    assert!(
        err.contains("mixed.libsvm:2: no label here, but line 1 had a label"),
        "{err}"
    );
    let label = write(dir, "label.libsvm", "1 1:1\n7 1:1\n");
    let err = fails(&[
        "predict",
        "--model",
        run,
        "--input",
        &s(&label),
        "--format",
        "libsvm",
        "--out",
        "-",
    ]);
    assert!(err.contains("label.libsvm:2: label 7 is neither"), "{err}");

    let known = write(dir, "known.libsvm", "1:1 3:2\n");
    let beyond = write(dir, "beyond.libsvm", "1:1 3:2 1000000:5\n");
    let (a, _) = predict(run, &known, "libsvm", false);
    let (b, err) = predict(run, &beyond, "libsvm", false);
    assert_eq!(a, b);
    assert!(err.contains("ignored 1 feature values"), "{err}");

    // A model.bin away from its run needs --data.
    let copy = dir.join("elsewhere");
    std::fs::create_dir_all(&copy).expect("mkdir");
    let run_dir = run.strip_prefix("file://").unwrap_or(run);
    std::fs::copy(Path::new(run_dir).join("model.bin"), copy.join("model.bin")).expect("copy");
    let alone = s(&copy.join("model.bin"));
    let err = fails(&[
        "predict",
        "--model",
        &alone,
        "--input",
        &s(&known),
        "--format",
        "libsvm",
        "--out",
        "-",
    ]);
    assert!(err.contains("give --data"), "{err}");
    let out = ok(&[
        "predict",
        "--model",
        &alone,
        "--data",
        &s(&data),
        "--input",
        &s(&known),
        "--format",
        "libsvm",
        "--out",
        "-",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), a);

    // A ratings file for a sparse model, and a missing run, are errors too.
    let err = fails(&[
        "predict",
        "--model",
        run,
        "--input",
        &s(&known),
        "--format",
        "movielens",
        "--out",
        "-",
    ]);
    assert!(
        err.contains("not a MovieLens ratings line") || err.contains("ratings"),
        "{err}"
    );
    let missing = s(&dir.join("no-such-run"));
    let err = fails(&[
        "predict",
        "--model",
        &missing,
        "--input",
        &s(&known),
        "--format",
        "libsvm",
        "--out",
        "-",
    ]);
    assert!(err.contains("no such directory"), "{err}");
}

/// A CSV data set with a header, min-max normalised by map tasks: predict reads CSV with and
/// without the label column, applies the data set's ranges, and `--evaluate` gives the record's
/// metrics.
#[test]
fn normalised_csv_matches_the_record() {
    let dir = tempdir();
    let dir = dir.path();
    let mut text = Vec::new();
    mlless_data::write_dense_lr(&mlless_data::DenseLrSpec::new(2000, 6, 8), &mut text)
        .expect("generate");
    // `label 1:v … 6:v` → `label,v,…,v`, scaled so that normalisation matters.
    let rows: Vec<(String, Vec<String>)> = String::from_utf8(text)
        .expect("utf-8")
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            let label = f.next().unwrap().to_string();
            let values = f
                .map(|kv| (number(kv.split(':').nth(1).unwrap()) * 7.0 + 3.0).to_string())
                .collect();
            (label, values)
        })
        .collect();
    let header = "y,a,b,c,d,e,f\n";
    let labelled = |rows: &[(String, Vec<String>)]| {
        header.to_string()
            + &rows
                .iter()
                .map(|(y, v)| format!("{y},{}\n", v.join(",")))
                .collect::<String>()
    };
    let tr = write(dir, "dense.csv", &labelled(&rows[..1600]));
    let te = write(dir, "dense-test.csv", &labelled(&rows[1600..]));
    let unlabelled: String = rows[1600..]
        .iter()
        .map(|(_, v)| format!("{}\n", v.join(",")))
        .collect();
    let te_unlabelled = write(dir, "dense-test-x.csv", &unlabelled);
    let data = dir.join("store/csv");
    ok(&[
        "prepare",
        "--format",
        "csv",
        "--input",
        &s(&tr),
        "--test-input",
        &s(&te),
        "--out",
        &s(&data),
        "--batch-size",
        "200",
        "--normalize",
        "minmax",
        "--map-tasks",
        "2",
    ]);
    let record = train_on(dir, "csv", &data, &["--model", "lr", "--max-epochs", "3"]);
    let (out, err) = predict(&record.spec.run_url, &te, "csv", true);
    assert_same_metrics(&record, &err);
    let (same, _) = predict(&record.spec.run_url, &te_unlabelled, "csv", false);
    assert_eq!(same, out);
    assert_eq!(csv(&out).1.len(), 400);
}

/// A CSV data set prepared with `--delimiter ';'` and the label in its last column, named in
/// the header (`--label-column target`): `predict` reads new CSV the same way, as the manifest
/// recorded (`;`, the label last), with its label (`--evaluate` gives the record's metrics) and
/// without it (the features alone score the same), and a row of the comma layout is refused
/// naming its line.
#[test]
fn predict_reads_csv_with_the_delimiter_and_label_column_of_prepare() {
    let dir = tempdir();
    let dir = dir.path();
    let mut text = Vec::new();
    mlless_data::write_dense_lr(&mlless_data::DenseLrSpec::new(1000, 4, 5), &mut text)
        .expect("generate");
    // `label 1:v … 4:v` → `"v";v;v;v;label`, CRLF.
    let rows: Vec<(String, Vec<String>)> = String::from_utf8(text)
        .expect("utf-8")
        .lines()
        .map(|l| {
            let mut f = l.split(' ');
            let label = f.next().unwrap().to_string();
            let values = f
                .map(|kv| kv.split(':').nth(1).unwrap().to_string())
                .collect();
            (label, values)
        })
        .collect();
    let labelled = |rows: &[(String, Vec<String>)]| {
        "a;b;\"c;d\";e;target\r\n".to_string()
            + &rows
                .iter()
                .map(|(y, v)| format!("\"{}\";{};{y}\r\n", v[0], v[1..].join(";")))
                .collect::<String>()
    };
    let tr = write(dir, "semi.csv", &labelled(&rows[..800]));
    let te = write(dir, "semi-test.csv", &labelled(&rows[800..]));
    let unlabelled: String = rows[800..]
        .iter()
        .map(|(_, v)| format!("{}\n", v.join(";")))
        .collect();
    let te_unlabelled = write(dir, "semi-test-x.csv", &unlabelled);
    let data = dir.join("store/semi");
    ok(&[
        "prepare",
        "--format",
        "csv",
        "--input",
        &s(&tr),
        "--test-input",
        &s(&te),
        "--out",
        &s(&data),
        "--batch-size",
        "100",
        "--delimiter",
        ";",
        "--label-column",
        "target",
    ]);
    let record = train_on(dir, "semi", &data, &["--model", "lr", "--max-epochs", "2"]);
    let run = record.spec.run_url.as_str();
    let (out, err) = predict(run, &te, "csv", true);
    assert_same_metrics(&record, &err);
    assert_eq!(csv(&out).1.len(), 200);
    let (same, _) = predict(run, &te_unlabelled, "csv", false);
    assert_eq!(same, out);

    let commas = write(dir, "commas.csv", "a;b;c;d;target\n0.5,1,2,3,1\n");
    let err = fails(&[
        "predict",
        "--model",
        run,
        "--input",
        &s(&commas),
        "--format",
        "csv",
        "--out",
        "-",
    ]);
    assert!(
        err.contains(&format!(
            "{}:2: expected 5 columns (the label in column 4 from 0) or 4 (no label), found 1",
            s(&commas)
        )),
        "{err}"
    );
}

/// A LIBSVM file of `rows` rows over features `first..=last` (every row has `first` and `last`,
/// so the data set's dimension and index base are known).
fn libsvm_span(dir: &Path, name: &str, first: u32, last: u32, rows: u32) -> PathBuf {
    let text: String = (0..rows)
        .map(|r| {
            let middle = first + 1 + r % (last - first - 1);
            format!("{} {first}:1 {middle}:0.5 {last}:1\n", r % 2)
        })
        .collect();
    write(dir, name, &text)
}

#[test]
fn a_model_is_refused_on_a_data_set_of_another_dimension_or_index_base() {
    let dir = tempdir();
    let prepared = |name: &str, first: u32, last: u32| {
        let input = libsvm_span(dir.path(), &format!("{name}.libsvm"), first, last, 40);
        let data = dir.path().join("store").join(name);
        common::prepare("libsvm", &input, &data, &["--validation-fraction", "0"]);
        data
    };
    // 1-based, indices 1..=50: 50 features.
    let trained_on = prepared("a", 1, 50);
    let record = train_on(
        dir.path(),
        "a",
        &trained_on,
        &["--model", "lr", "--max-epochs", "1"],
    );
    let run = record.spec.run_url.as_str().to_owned();
    let input = libsvm_span(dir.path(), "score.libsvm", 1, 50, 4);
    let predict_on = |data: &Path| {
        fails(&[
            "predict",
            "--model",
            &run,
            "--data",
            &s(data),
            "--input",
            &s(&input),
            "--format",
            "libsvm",
            "--out",
            "-",
        ])
    };
    // 0-based, indices 0..=47: 48 features.
    let err = predict_on(&prepared("b", 0, 47));
    assert!(
        err.contains("50 features") && err.contains("has 48"),
        "{err}"
    );
    // 0-based, indices 0..=49: 50 features, each one place off.
    let err = predict_on(&prepared("c", 0, 49));
    assert!(err.contains("1-based") && err.contains("0-based"), "{err}");
    // Its own data set, given or not, scores.
    for data in [Some(s(&trained_on)), None] {
        let mut args = vec!["predict", "--model", &run, "--input"];
        let input = s(&input);
        args.push(&input);
        args.extend(["--format", "libsvm", "--out", "-"]);
        if let Some(data) = &data {
            args.extend(["--data", data]);
        }
        ok(&args);
    }
}
