//! Bad input gets a clear error and loses nothing.

mod common;

use common::*;

/// Prepares `text` as input `name` into a new location, which must fail; the failure leaves no
/// directory behind (neither the location nor the parent it created). Returns the error and
/// the input's path.
fn prepare_error(format: &str, name: &str, text: &str, extra: &[&str]) -> (String, String) {
    let dir = tempdir();
    let input = write(dir.path(), name, text);
    let out = dir.path().join("new").join("store");
    let mut args = vec!["prepare", "--format", format, "--input"];
    let input_s = s(&input);
    let out_s = s(&out);
    args.push(&input_s);
    args.extend(["--out", &out_s]);
    args.extend(extra);
    let stderr = fails(&args);
    assert!(
        !dir.path().join("new").exists(),
        "a failed prepare left a directory: {stderr}"
    );
    (stderr, input_s)
}

#[test]
fn a_malformed_line_names_file_and_line_in_every_format() {
    let cases: [(&str, &str, &str, &[&str]); 4] = [
        ("libsvm", "a.libsvm", "1 1:0.5 3:1\n0 2:x\n", &[]),
        ("csv", "a.csv", "1,0.5,1\n0,0.1\n", &[]),
        ("movielens", "u.data", "1\t1\t5\t0\n2\tbad\t3\t0\n", &[]),
        (
            "criteo",
            "a.tsv",
            "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\ta\tb\tc\td\te\tf\tg\th\ti\tj\tk\tl\tm\tn\to\tp\tq\tr\ts\tt\tu\tv\tw\tx\ty\tz\nbad line\n",
            &["--features", "1000"],
        ),
    ];
    for (format, name, text, extra) in cases {
        let (stderr, input) = prepare_error(format, name, text, extra);
        assert!(stderr.contains(&format!("{input}:2")), "{format}: {stderr}");
    }
}

#[test]
fn an_empty_input_is_an_error() {
    let (stderr, input) = prepare_error("libsvm", "empty.libsvm", "", &[]);
    assert!(stderr.contains(&input), "{stderr}");
    assert!(
        stderr.to_lowercase().contains("no sample") || stderr.to_lowercase().contains("empty"),
        "{stderr}"
    );
}

#[test]
fn a_test_fraction_outside_0_1_is_an_error() {
    for fraction in ["0", "1", "1.5", "-0.1"] {
        let arg = format!("--test-fraction={fraction}");
        let (stderr, _) = prepare_error("libsvm", "a.libsvm", "1 1:1\n0 2:1\n", &[&arg]);
        assert!(stderr.contains("--test-fraction"), "{fraction}: {stderr}");
    }
}

#[test]
fn an_unwritable_store_is_an_error_naming_it() {
    let dir = tempdir();
    let input = write(dir.path(), "a.libsvm", "1 1:1\n0 2:1\n1 1:1\n0 2:1\n");
    let file = write(dir.path(), "not-a-dir", "x");
    let out = file.join("store");
    let stderr = fails(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &s(&out),
    ]);
    assert!(stderr.contains("not-a-dir"), "{stderr}");
}

#[test]
fn training_on_a_data_set_without_manifest_is_an_error() {
    let dir = tempdir();
    let stderr = fails(&[
        "train",
        "--quiet",
        "--data",
        &s(&dir.path().join("nothing")),
        "--model",
        "lr",
    ]);
    assert!(stderr.contains("manifest.json"), "{stderr}");
}

/// A preparation that fails after it started writing leaves no manifest, so the half-written
/// data set is never taken for a complete one; and the model/data mismatch is caught.
#[test]
fn a_failed_preparation_leaves_no_usable_data_set() {
    let dir = tempdir();
    let mut text = String::new();
    for i in 0..400 {
        text.push_str(&format!("{} 1:{} 2:{}\n", i % 2, i, 400 - i));
    }
    let input = write(dir.path(), "a.libsvm", &text);
    let data = dir.path().join("store");
    prepare_libsvm(&input, &data, 50);
    assert!(data.join("manifest.json").exists());
    let stderr = fails(&["train", "--quiet", "--data", &s(&data), "--model", "pmf"]);
    assert!(stderr.contains("--model lr"), "{stderr}");

    // Re-prepare with normalisation whose map tasks cannot fit in 1 MB: it fails midway.
    let stderr = fails(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &s(&data),
        "--batch-size",
        "50",
        "--normalize",
        "minmax",
        "--memory-mb",
        "1",
    ]);
    assert!(stderr.contains("memory limit"), "{stderr}");
    assert!(
        !data.join("manifest.json").exists(),
        "no manifest after a failed preparation"
    );
    // Nor half of one: the staged and the written minibatches are removed.
    for part in ["staging", "train", "test", "validation"] {
        let left: Vec<_> = std::fs::read_dir(data.join(part))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "{part}/ left behind: {left:?}");
    }
    let stderr = fails(&["train", "--quiet", "--data", &s(&data), "--model", "lr"]);
    assert!(stderr.contains("manifest.json"), "{stderr}");
    // Into a new location, the same failure (after writing began) leaves no directory.
    let fresh = dir.path().join("fresh");
    let stderr = fails(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &s(&fresh),
        "--batch-size",
        "50",
        "--normalize",
        "minmax",
        "--memory-mb",
        "1",
    ]);
    assert!(stderr.contains("memory limit"), "{stderr}");
    assert!(!fresh.exists(), "{} left behind", fresh.display());
}

/// Min-max normalisation through map-reduce over function invocations scales every feature of
/// the training set into [0, 1].
#[test]
fn minmax_normalisation_scales_features_into_unit_range() {
    let dir = tempdir();
    let mut text = String::new();
    for i in 0..300 {
        text.push_str(&format!("{} 1:{} 3:{}\n", i % 2, i * 10, -(i as i64)));
    }
    let input = write(dir.path(), "a.libsvm", &text);
    let data = dir.path().join("store");
    ok(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &s(&data),
        "--batch-size",
        "40",
        "--normalize",
        "minmax",
        "--map-tasks",
        "3",
    ]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["normalization"]["method"], "minmax");
    let train = batches(&data, mlless_runtime::dataset::Split::Train);
    let validation = batches(&data, mlless_runtime::dataset::Split::Validation);
    // 300 rows: 30 for the test set, then 27 of the 270 left held out for validation.
    assert_eq!(train.iter().map(|b| b.samples()).sum::<usize>(), 243);
    assert_eq!(validation.iter().map(|b| b.samples()).sum::<usize>(), 27);
    let mut seen_one = false;
    for batch in train.into_iter().chain(validation) {
        let mlless_core::Batch::Sparse(rows) = batch else {
            panic!()
        };
        assert!(
            rows.values
                .iter()
                .all(|&v| (-1e-6..=1.0 + 1e-6).contains(&v)),
            "{:?}",
            rows.values
        );
        seen_one |= rows.values.iter().any(|&v| (v - 1.0).abs() < 1e-6);
    }
    assert!(seen_one, "the training maximum maps to 1");
}

/// A minibatch with one flipped byte stops the run with an error naming the object.
#[test]
fn a_corrupt_minibatch_is_an_error_naming_it() {
    let dir = tempdir();
    let mut text = String::new();
    for i in 0..400 {
        text.push_str(&format!("{} 1:1 {}:1\n", i % 2, 2 + i % 7));
    }
    let input = write(dir.path(), "a.libsvm", &text);
    let data = dir.path().join("store");
    prepare_libsvm(&input, &data, 50);
    let object = data.join("train/000003.bin");
    let mut bytes = std::fs::read(&object).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    std::fs::write(&object, bytes).unwrap();
    let stderr = fails(&[
        "train",
        "--quiet",
        "--data",
        &s(&data),
        "--model",
        "lr",
        "--workers",
        "2",
    ]);
    assert!(stderr.contains("train/000003.bin"), "{stderr}");
    assert!(stderr.to_lowercase().contains("checksum"), "{stderr}");
}

/// A small LIBSVM set prepared in `dir/store` with minibatches of 50 and no validation set;
/// returns its location and its number of training minibatches.
fn small_lr_data(dir: &std::path::Path) -> (std::path::PathBuf, usize) {
    let mut text = String::new();
    for i in 0..400 {
        text.push_str(&format!("{} 1:1 {}:1\n", i % 2, 2 + i % 7));
    }
    let input = write(dir, "a.libsvm", &text);
    let data = dir.join("store");
    prepare_libsvm(&input, &data, 50);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data.join("manifest.json")).unwrap()).unwrap();
    let batches = manifest["train"]["batches"]
        .as_array()
        .expect("the manifest lists the training minibatches")
        .len();
    (data, batches)
}

/// A label the model cannot train on is refused before any function starts, by an error naming
/// the input file and line it was read from (not a minibatch row inside a worker), for a
/// binary model and for a multi-class one with too few classes; a model that ignores labels
/// trains.
#[test]
fn a_label_the_model_cannot_train_on_is_refused_naming_its_input_line() {
    let dir = tempdir();
    let mut text = String::new();
    for i in 0..200 {
        // Three classes; the first 2 is on line 3, the only 3.5 on line 150.
        let label = if i == 149 { 3.5 } else { f64::from(i % 3) };
        text.push_str(&format!("{label} 1:1 {}:1\n", 2 + i % 7));
    }
    let input = write(dir.path(), "three.libsvm", &text);
    let data = dir.path().join("store");
    prepare_libsvm(&input, &data, 20);
    let d = s(&data);
    let name = s(&input);
    let cases: [(&[&str], String); 3] = [
        (
            &["--model", "lr"],
            format!("--model lr needs labels that are 0 or 1, but {name}:150 has the label 3.5"),
        ),
        (
            &["--model", "svm"],
            format!("--model svm needs labels that are 0 or 1, but {name}:150 has the label 3.5"),
        ),
        (
            &["--model", "mlp", "--classes", "3"],
            format!(
                "--model mlp needs labels that are a class id in 0..3, but {name}:150 has the \
                 label 3.5"
            ),
        ),
    ];
    for (extra, expected) in &cases {
        let mut args = vec!["train", "--quiet", "--data", &d, "--max-epochs", "1"];
        args.extend(*extra);
        let stderr = fails(&args);
        assert!(stderr.contains(expected.as_str()), "{extra:?}: {stderr}");
        assert!(!data.join("runs").exists(), "{extra:?}: no run was written");
    }
    ok(&[
        "train",
        "--quiet",
        "--data",
        &d,
        "--model",
        "kmeans",
        "--max-epochs",
        "1",
    ]);

    // A data set prepared before the label range was kept: a worker meets the label, and the
    // run fails saying that resuming would meet it again, with no hint to resume.
    let path = data.join("manifest.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    manifest.as_object_mut().unwrap().remove("labels").unwrap();
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    let stderr = fails(&[
        "train",
        "--quiet",
        "--data",
        &d,
        "--model",
        "lr",
        "--checkpoint-every",
        "1",
    ]);
    assert!(stderr.contains("is not 0 or 1"), "{stderr}");
    assert!(stderr.contains(mlless_runtime::NOT_RESUMABLE), "{stderr}");
    assert!(!stderr.contains("--resume"), "{stderr}");
}

/// Every bad option of `train` is refused before any function starts (no run is written), by an
/// error naming the option: --l2 negative or not finite, --memory-mb 0, --timeout-s 0, a fleet
/// larger than mlless runs or than the local invoker can run at once, a global batch of 0. A
/// fleet whose share of the global batch is too small to pay trains, with a warning naming the
/// fleet that pays; ADMM with more workers than minibatches, with a warning that says so.
#[test]
fn bad_training_options_are_refused_before_any_function_starts() {
    let dir = tempdir();
    let (data, batches) = small_lr_data(dir.path());
    let d = s(&data);
    let local_max = mlless_faas::local_max_concurrent();
    let at_local_max = local_max.to_string();
    let mut cases: Vec<(Vec<&str>, String)> =
        vec![
        (
            vec!["--l2=-1"],
            "--l2 must be a finite number ≥ 0, not -1".into(),
        ),
        (
            vec!["--l2=NaN"],
            "--l2 must be a finite number ≥ 0, not NaN".into(),
        ),
        (
            vec!["--l2=inf"],
            "--l2 must be a finite number ≥ 0, not inf".into(),
        ),
        (
            vec!["--memory-mb", "0"],
            "--memory-mb must be at least 1 MB".into(),
        ),
        (
            vec!["--timeout-s", "0"],
            "--timeout-s must be a positive number of seconds".into(),
        ),
        // Every duration is range-checked up front: none overflows a clock (it panicked).
        (
            vec!["--max-time", "1e20"],
            "--max-time must be a positive number of seconds (at most 1e9, about 31 years), not \
             1e20"
                .into(),
        ),
        (
            vec!["--worker-deadline", "1e300"],
            "--worker-deadline must be a positive number of seconds (at most 1e9, about 31 \
             years), not 1e300"
                .into(),
        ),
        (
            vec!["--channel-grace", "1e300"],
            "--channel-grace must be a number of seconds ≥ 0 (at most 1e9, about 31 years), not \
             1e300"
                .into(),
        ),
        (
            vec!["--channel-grace=-1"],
            "--channel-grace must be a number of seconds ≥ 0".into(),
        ),
        (
            vec!["--timeout-s", "1e20"],
            "--timeout-s must be a positive number of seconds (at most 1e9".into(),
        ),
        (vec!["--horizon", "1e300"], "--horizon must be a positive".into()),
        (
            vec!["--scale-in-interval", "1e300s"],
            "--scale-in-interval is auto".into(),
        ),
        (vec!["--eval-every", "1e300s"], "--eval-every is auto".into()),
        (
            vec!["--progress-every", "1e300"],
            "is not a number of seconds (0 or more, at most 1e9".into(),
        ),
        (
            vec!["--workers", "100000"],
            "--workers 100000 is more than mlless runs: at most 10000 workers".into(),
        ),
        (
            vec!["--global-batch", "0"],
            "--global-batch must be from 1 to 1000000000 samples, not 0".into(),
        ),
    ];
    // The supervisor is a function too: as many workers as the invoker runs functions is one
    // too many.
    if local_max <= mlless_job::config::MAX_WORKERS {
        cases.push((
            vec!["--workers", &at_local_max],
            format!(
                "--workers {local_max} is more than the local invoker can run at once: at most {} \
                 workers",
                local_max - 1
            ),
        ));
    }
    for (extra, expected) in &cases {
        let mut args = vec!["train", "--quiet", "--data", &d, "--model", "lr"];
        args.extend(extra);
        let stderr = fails(&args);
        assert!(stderr.contains(expected.as_str()), "{extra:?}: {stderr}");
        assert!(
            !data.join("runs").exists(),
            "{extra:?}: refused before any run was written"
        );
    }
    // The fleet shares a global batch of 4 minibatches (200 rows): 2 workers read 100 rows a
    // step each, 3 workers 67, too few to pay, which is said with the fleet that pays.
    let warning = "too few for more workers to make a step faster";
    for (workers, extra, warned) in [
        ("2", None, false),
        ("3", None, true),
        ("3", Some("--global-batch=300"), false),
    ] {
        let mut args = vec![
            "train",
            "--quiet",
            "--data",
            &d,
            "--model",
            "lr",
            "--workers",
            workers,
            "--max-epochs",
            "1",
        ];
        args.extend(extra);
        let stderr = String::from_utf8_lossy(&ok(&args).stderr).into_owned();
        assert_eq!(stderr.contains(warning), warned, "{args:?}: {stderr}");
        if warned {
            assert!(
                stderr.contains("past 2 workers more stop paying"),
                "{stderr}"
            );
        }
    }
    // ADMM reads whole minibatches from fixed shards: more workers than minibatches are warned
    // of, as many are not.
    let whole = "training minibatches of the data set: every step reads some minibatch more \
                 than once";
    for (workers, warned) in [(batches, false), (batches + 1, true)] {
        let p = workers.to_string();
        let output = ok(&[
            "train",
            "--quiet",
            "--data",
            &d,
            "--model",
            "lr",
            "--algorithm",
            "admm",
            "--workers",
            &p,
            "--max-epochs",
            "1",
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            stderr.contains(whole),
            warned,
            "{workers} workers: {stderr}"
        );
        if warned {
            assert!(
                stderr.contains(&format!(
                    "--workers {workers} is more than the {batches} training minibatches"
                )),
                "{stderr}"
            );
        }
    }
}

/// `prepare`'s options are checked as `train`'s, before anything is read or written: a zero
/// lifetime, map-task count or memory cap is refused, naming the option, with or without
/// --normalize.
#[test]
fn bad_prepare_options_are_refused_up_front() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["--timeout-s", "0"],
            "--timeout-s must be a positive number of seconds",
        ),
        (
            &["--timeout-s", "inf", "--normalize", "minmax"],
            "--timeout-s must be a positive number of seconds",
        ),
        (&["--map-tasks", "0"], "--map-tasks must be at least 1"),
        (
            &["--map-tasks", "0", "--normalize", "minmax"],
            "--map-tasks must be at least 1",
        ),
        (&["--memory-mb", "0"], "--memory-mb must be at least 1 MB"),
        (
            &["--timeout-s", "1e300"],
            "--timeout-s must be a positive number of seconds (at most 1e9",
        ),
    ];
    for (extra, expected) in cases {
        let dir = tempdir();
        let input = write(dir.path(), "a.libsvm", "1 1:1\n0 2:1\n1 1:1\n0 2:1\n");
        let out = dir.path().join("store");
        let mut args = vec!["prepare", "--format", "libsvm", "--input"];
        let (input_s, out_s) = (s(&input), s(&out));
        args.push(&input_s);
        args.extend(["--out", &out_s]);
        args.extend(extra);
        let stderr = fails(&args);
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
        assert!(!out.exists(), "{extra:?}: nothing written");
    }
}

/// A run record whose fleet is absurd (hand-made or corrupt: `spec.workers = 2^32 − 1`) and a
/// `cost --workers` that large are refused with a clear error and exit status 1, where they
/// aborted allocating 64 GB (an abort is a signal, not an exit status).
#[test]
fn a_hostile_record_or_fleet_is_refused_by_report_and_cost_without_allocating() {
    let dir = tempdir();
    let (data, _) = small_lr_data(dir.path());
    train(
        dir.path(),
        "run",
        &[
            "--data",
            &s(&data),
            "--model",
            "lr",
            "--workers",
            "2",
            "--max-epochs",
            "1",
        ],
    );
    let good = dir.path().join("run.json");
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&good).unwrap()).unwrap();
    record["spec"]["workers"] = serde_json::json!(4_294_967_295u32);
    let hostile = dir.path().join("hostile.json");
    std::fs::write(&hostile, serde_json::to_vec(&record).unwrap()).unwrap();
    // A record of a newer format than this build knows is refused, not misread.
    let mut newer: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&good).unwrap()).unwrap();
    newer["format_version"] = serde_json::json!(99);
    let future = dir.path().join("future.json");
    std::fs::write(&future, serde_json::to_vec(&newer).unwrap()).unwrap();
    let f = s(&future);
    let (g, h) = (s(&good), s(&hostile));
    let out = s(&dir.path().join("report"));
    let newer_message = "format_version 99 is newer than this build of mlless knows";
    for args in [&["report", &f, "--out", &out][..], &["cost", &f]] {
        let stderr = fails(args);
        assert!(stderr.contains(newer_message), "{args:?}: {stderr}");
        assert!(stderr.contains(&f), "{args:?}: {stderr}");
    }
    let cases: [(&[&str], &str); 4] = [
        (
            &["report", &h, "--out", &out],
            "spec.workers is 4294967295: a run has 1 to 10000 workers",
        ),
        (
            &["cost", &h],
            "spec.workers is 4294967295: a run has 1 to 10000 workers",
        ),
        (
            &["cost", "--workers", "4294967295", &g],
            "--workers 4294967295: a fleet has at most 10000 workers",
        ),
        (
            &["cost", "--workers", "1,10001", &g],
            "--workers 10001: a fleet has at most 10000 workers",
        ),
    ];
    for (args, expected) in cases {
        let output = run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&h) || args.contains(&g.as_str()),
            "{args:?}: {stderr}"
        );
    }
    // The largest fleet is predicted, without a list of its invocations.
    let output = ok(&["cost", "--workers", "10000", &g]);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("10000"),
        "{output:?}"
    );
}

/// A CSV label that is not a number (or missing), a label column that the input has not and a
/// row of the wrong width are refused by `prepare` as it reads, naming the file and line,
/// before anything is written (no manifest, no minibatch); the CSV options of another format
/// and a bad delimiter are refused up front.
#[test]
fn a_bad_csv_label_or_label_column_is_refused_at_prepare_naming_the_line() {
    let good = "y;a;b\n1;0.5;2\n0;1;1\n".to_string() + &"1;2;3\n0;1;1\n".repeat(50);
    let cases: [(String, &[&str], String); 7] = [
        (
            good.clone() + "yes;1;2\n",
            &["--delimiter", ";"],
            ":104: expected a numeric label in column 0 (from 0), found \"yes\"".into(),
        ),
        (
            good.clone() + "\n;1;2\n",
            &["--delimiter", ";"],
            ":105: missing label in column 0 (from 0)".into(),
        ),
        (
            good.replace("\n0;1;1\n", "\n0;\"1;1\"\n"),
            &["--delimiter", ";"],
            ":3: expected 3 columns, found 2".into(),
        ),
        (
            good.replace("1;2;3", "1;2;x"),
            &["--delimiter", ";", "--label-column", "b"],
            ":4: expected a numeric label in column 2 (from 0), found \"x\"".into(),
        ),
        (
            good.clone(),
            &["--delimiter", ";", "--label-column", "label"],
            ":1: --label-column \"label\" is not a column of the header, whose columns are \
             \"y\", \"a\", \"b\""
                .into(),
        ),
        (
            good.clone(),
            &["--delimiter", ";", "--label-column", "3"],
            ":1: --label-column 3 is beyond the 3 columns of the rows (indices from 0 to 2)".into(),
        ),
        (
            good.clone(),
            &[],
            ":1: CSV input needs a label column and at least one feature column, found 1 column \
             (fields separated by ',': see --delimiter)"
                .into(),
        ),
    ];
    for (text, extra, expected) in &cases {
        let dir = tempdir();
        let input = write(dir.path(), "a.csv", text);
        let out = dir.path().join("store");
        let (input_s, out_s) = (s(&input), s(&out));
        let mut args = vec![
            "prepare", "--format", "csv", "--input", &input_s, "--out", &out_s,
        ];
        args.extend(*extra);
        let stderr = fails(&args);
        assert!(
            stderr.contains(&format!("{input_s}{expected}")),
            "{extra:?}: {stderr}"
        );
        // The store may have been opened (its directory made), but nothing is in it.
        let written: Vec<_> = std::fs::read_dir(&out)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(
            written.is_empty(),
            "{extra:?}: nothing written: {written:?}"
        );
    }

    let (stderr, _) = prepare_error("libsvm", "a.libsvm", "1 1:1\n", &["--delimiter", ";"]);
    assert!(
        stderr.contains("--delimiter, --header and --label-column are options of --format csv"),
        "{stderr}"
    );
    let (stderr, _) = prepare_error("csv", "a.csv", "1,2\n", &["--delimiter", "ab"]);
    assert!(stderr.contains("--delimiter"), "{stderr}");
}

#[test]
fn a_huge_feature_index_is_refused_before_any_allocation_of_its_size() {
    // One index of 2·10⁹ makes a data set of 2·10⁹ features: an LR model of 8 GB a replica,
    // refused by name against --memory-mb before the curvature estimate, a worker or the
    // supervisor allocates anything of that size (the estimate itself is sparse).
    let dir = tempdir();
    let input = write(
        dir.path(),
        "huge.libsvm",
        "1 3:1 2000000000:1\n0 1:1\n1 2:1\n0 3:1\n",
    );
    let data = dir.path().join("store");
    prepare(
        "libsvm",
        &input,
        &data,
        &["--validation-fraction", "0", "--test-fraction", "0.25"],
    );
    let stderr = fails(&[
        "train",
        "--quiet",
        "--data",
        &s(&data),
        "--model",
        "lr",
        "--workers",
        "1",
        "--max-epochs",
        "1",
    ]);
    assert!(stderr.contains("2000000000 features"), "{stderr}");
    assert!(stderr.contains("--memory-mb"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Refused before the run was written.
    let runs = std::fs::read_dir(data.join("runs")).map_or(0, |d| d.count());
    assert_eq!(runs, 0, "a run was written");
}
