//! Helpers of the end-to-end tests: run the `mlless` binary and read what it wrote.

#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mlless_job::RunRecord;
use mlless_runtime::dataset::{Dataset, Split};

/// The binary under test.
pub fn mlless() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mlless"));
    command.env_remove("RUST_LOG");
    command
}

/// Runs `mlless ARGS`, returns its output whatever its exit status.
pub fn run(args: &[&str]) -> Output {
    mlless()
        .args(args)
        .output()
        .expect("the mlless binary runs")
}

/// Runs `mlless ARGS` and asserts success.
pub fn ok(args: &[&str]) -> Output {
    let output = run(args);
    assert!(
        output.status.success(),
        "mlless {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs `mlless ARGS`, asserts failure and returns standard error.
pub fn fails(args: &[&str]) -> String {
    let output = run(args);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "mlless {args:?} should have failed; stderr:\n{stderr}"
    );
    stderr
}

/// `path` as a string argument.
pub fn s(path: &Path) -> String {
    path.display().to_string()
}

/// Trains with `args` (plus `--quiet --record`) and returns the run record.
pub fn train(dir: &Path, name: &str, args: &[&str]) -> RunRecord {
    let record = dir.join(format!("{name}.json"));
    let mut all: Vec<String> = vec![
        "train".into(),
        "--quiet".into(),
        "--record".into(),
        s(&record),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    ok(&refs);
    read_record(&record)
}

/// Reads a run record.
pub fn read_record(path: &Path) -> RunRecord {
    let bytes = std::fs::read(path).expect("the run record exists");
    serde_json::from_slice(&bytes).expect("the run record parses")
}

/// A metric of a record.
pub fn metric(record: &RunRecord, name: &str) -> f64 {
    *record
        .metrics
        .get(name)
        .unwrap_or_else(|| panic!("metric {name} in {:?}", record.metrics))
}

/// Reads every test minibatch of a prepared data set.
pub fn test_batches(data: &Path) -> Vec<mlless_core::Batch> {
    batches(data, Split::Test)
}

/// Reads every minibatch of one split of a prepared data set.
pub fn batches(data: &Path, split: Split) -> Vec<mlless_core::Batch> {
    batches_at(&s(data), split)
}

/// Reads every minibatch of one split of the prepared data set at `url`.
pub fn batches_at(url: &str, split: Split) -> Vec<mlless_core::Batch> {
    block_on(async {
        let dataset = Dataset::open(url).await.expect("data set opens");
        let mut out = Vec::new();
        for i in 0..dataset.batches(split) {
            out.push(dataset.read_batch(split, i).await.expect("batch reads"));
        }
        out
    })
}

/// Runs a future to completion on a small runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime starts")
        .block_on(future)
}

/// A fresh temporary directory.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write input");
    path
}

/// Prepares the LIBSVM file `input` into the data set `out` with minibatches of `batch_size`.
pub fn prepare_libsvm(input: &Path, out: &Path, batch_size: u32) {
    ok(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(input),
        "--out",
        &s(out),
        // Without a validation set: runs stop only by the criteria the tests name, so that
        // runs of one job compare bit for bit.
        "--validation-fraction",
        "0",
        "--batch-size",
        &batch_size.to_string(),
    ]);
}

/// Writes synthetic sparse-LR data as LIBSVM to `dir/lr.libsvm`; returns the path and the truth.
pub fn write_sparse_lr(
    dir: &Path,
    spec: &mlless_data::SparseLrSpec,
) -> (PathBuf, mlless_data::SparseLrTruth) {
    let path = dir.join("lr.libsvm");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).expect("create input"));
    let truth = mlless_data::write_sparse_lr(spec, file).expect("generate");
    (path, truth)
}

/// The sparse-LR set of the convergence tests (300k rows × 100k features × 30 non-zeros),
/// prepared in `dir/store/lr` with batches of 1000; returns its location and the true weights'
/// mean log loss on its test set.
pub fn sparse_lr_data(dir: &Path) -> (PathBuf, f64) {
    let spec = mlless_data::SparseLrSpec::new(300_000, 100_000, 30, 11);
    let (input, truth) = write_sparse_lr(dir, &spec);
    let data = dir.join("store/lr");
    prepare_libsvm(&input, &data, 1000);
    let (mut sum, mut n) = (0.0, 0usize);
    for batch in test_batches(&data) {
        let mlless_core::Batch::Sparse(rows) = batch else {
            panic!("sparse data")
        };
        sum += truth.log_loss(&rows) * rows.rows() as f64;
        n += rows.rows();
    }
    (data, sum / n as f64)
}

/// The ratings set of the convergence tests (2,000 users × 1,500 items, rank 10, density 0.2,
/// noise σ = 0.5), prepared in `dir/store/ratings`; returns its location and σ.
pub fn ratings_data(dir: &Path) -> (PathBuf, f64) {
    let spec = mlless_data::RatingsSpec {
        users: 2000,
        items: 1500,
        rank: 10,
        density: 0.2,
        noise: 0.5,
        seed: 5,
        ..Default::default()
    };
    // Without a validation set: runs stop only by the criteria the tests name, so that runs
    // of one job compare bit for bit.
    let (data, truth) = ratings_prepared(
        dir,
        &spec,
        &["--validation-fraction", "0", "--batch-size", "1000"],
    );
    (data, truth.noise)
}

/// Synthetic ratings of `spec` written to `dir/ratings.tsv` and prepared into
/// `dir/store/ratings` with the `extra` options of `prepare`; returns the data set's location
/// and the true model.
pub fn ratings_prepared(
    dir: &Path,
    spec: &mlless_data::RatingsSpec,
    extra: &[&str],
) -> (PathBuf, mlless_data::RatingsTruth) {
    let input = dir.join("ratings.tsv");
    let file = std::io::BufWriter::new(std::fs::File::create(&input).expect("create input"));
    let truth = mlless_data::write_ratings(spec, file).expect("generate");
    let data = dir.join("store/ratings");
    prepare("movielens", &input, &data, extra);
    (data, truth)
}

/// Writes the sparse-LR set of `spec` as LIBSVM in `dir` and prepares it in `dir/store/lr` with
/// minibatches of 500 and the `extra` options of `prepare`; returns the data set's location.
pub fn sparse_lr_prepared(dir: &Path, spec: &mlless_data::SparseLrSpec, extra: &[&str]) -> PathBuf {
    let (input, _) = write_sparse_lr(dir, spec);
    let data = dir.join("store/lr");
    let mut args = vec!["--batch-size", "500"];
    args.extend(extra);
    prepare("libsvm", &input, &data, &args);
    data
}

/// Runs `mlless prepare --format FORMAT --input INPUT --out OUT` with the `extra` options.
pub fn prepare(format: &str, input: &Path, out: &Path, extra: &[&str]) {
    let (input, out) = (s(input), s(out));
    let mut args = vec![
        "prepare", "--format", format, "--input", &input, "--out", &out,
    ];
    args.extend(extra);
    ok(&args);
}

/// The trained model of a run.
pub fn stored_params(record: &RunRecord) -> Vec<f32> {
    use mlless_runtime::messages::Message;
    let bytes = block_on(async {
        let run = mlless_store::Store::open(&record.spec.run_url).expect("run store opens");
        run.get(mlless_job::record::MODEL_KEY)
            .await
            .expect("model exists")
    });
    mlless_runtime::messages::StoredModel::decode(&bytes, || "model".into())
        .expect("model decodes")
        .params
}

/// The channel URLs of the servers `scripts/test.sh` started: the first Redis and the
/// Memcached, where their variables are set.
pub fn server_channels() -> Vec<String> {
    let mut channels: Vec<String> = Vec::new();
    if let Ok(urls) = std::env::var("MLLESS_TEST_REDIS_URLS") {
        channels.extend(urls.split(',').next().map(str::to_string));
    }
    if let Ok(url) = std::env::var("MLLESS_TEST_MEMCACHED_URL") {
        channels.push(url);
    }
    channels
}

/// `--data DATA --model lr --workers 4 --max-epochs EPOCHS --checkpoint-every 10` and `extra`:
/// the LR job of the recovery tests (faults, cancel).
pub fn lr_checkpointed_args<'a>(data: &'a str, epochs: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--data",
        data,
        "--model",
        "lr",
        "--workers",
        "4",
        "--max-epochs",
        epochs,
        "--checkpoint-every",
        "10",
    ];
    args.extend_from_slice(extra);
    args
}

/// Waits until the run below `runs` has a checkpoint of `step` (the run is under way).
pub fn wait_for_checkpoint(runs: &Path, step: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let name = format!("step-{step:012}.bin");
    loop {
        let found = std::fs::read_dir(runs)
            .into_iter()
            .flatten()
            .flatten()
            .any(|run| {
                run.path()
                    .join("checkpoints/supervisor")
                    .join(&name)
                    .exists()
            });
        if found {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint of step {step}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Waits until a worker of the run below `runs` stopped by `--fault pause:WORKER@STEP` has
/// reached its pause; returns the run's directory.
pub fn wait_for_pause(runs: &Path, worker: u32, step: u64) -> PathBuf {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let key = mlless_job::fault::pause_reached_key(worker, step);
    loop {
        let found = std::fs::read_dir(runs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|run| run.path())
            .find(|run| run.join(&key).exists());
        if let Some(run) = found {
            return run;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "worker {worker} did not reach its pause at step {step}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Lets the worker paused by `--fault pause:WORKER@STEP` in `run` go on.
pub fn release_pause(run: &Path, worker: u32, step: u64) {
    let key = run.join(mlless_job::fault::pause_release_key(worker, step));
    std::fs::write(key, b"").expect("write the release");
}

/// Trains with `args` (and `--runs RUNS --quiet`) with worker 0 paused at `step`
/// (`--fault pause:0@STEP`), cancels the run there (SIGINT), lets it go on once the driver has
/// asked its functions to stop, and waits for its exit 130; returns the run's directory. With
/// `--checkpoint-every` below `step`, the run is resumable from a checkpoint before `step`,
/// whatever the machine's speed.
pub fn cancelled_run(runs: &Path, args: &[&str], step: u64) -> PathBuf {
    use std::io::BufRead;
    let fault = format!("pause:0@{step}");
    let mut child = mlless()
        .env("RUST_LOG", "mlless_runtime::driver=info")
        .args(["train", "--quiet", "--runs", &s(runs), "--fault", &fault])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mlless starts");
    let run = wait_for_pause(runs, 0, step);
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let stderr = child.stderr.take().expect("stderr");
    let mut seen = String::new();
    let mut lines = std::io::BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line.expect("a line");
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("asked the functions to stop") {
            break;
        }
    }
    release_pause(&run, 0, step);
    for line in lines {
        seen.push_str(&line.expect("a line"));
        seen.push('\n');
    }
    let status = child.wait().expect("mlless ends");
    assert_eq!(status.code(), Some(130), "{seen}");
    run
}
