//! The same jobs on AWS Lambda, emulated on loopback: `cargo lambda watch` serves the Lambda
//! Invoke and Runtime APIs, instances of the `mlless` binary serve invocations inside the
//! emulated runtime, data and runs live in S3 (moto_server) and updates go through Redis.
//! `mlless train --invoker lambda:_` must give the model of `--invoker local` bit for bit
//! (BSP is deterministic), also across hand-offs at the lifetime limit and the replacement of a
//! dead worker.
//!
//! `scripts/test.sh` installs `cargo-lambda` (PyPI) and starts the servers; without
//! `MLLESS_TEST_LAMBDA` these tests say so and do nothing.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;
use mlless_data::SparseLrSpec;
use mlless_job::RunRecord;
use mlless_runtime::dataset::Split;

/// The emulator's name of the function it serves when it does not start the function itself.
const FUNCTION: &str = "_";

/// Instances of the function kept running: P = 4 workers and the supervisor, and one spare.
const INSTANCES: usize = 6;

/// Where the servers of `scripts/test.sh` are: the S3 base URL and a Redis channel.
/// `None`, saying so, when `MLLESS_TEST_LAMBDA` is not set.
fn servers() -> Option<(String, String)> {
    if std::env::var_os("MLLESS_TEST_LAMBDA").is_none() {
        eprintln!("MLLESS_TEST_LAMBDA not set (scripts/test.sh sets it): skipped");
        return None;
    }
    let s3 =
        std::env::var("MLLESS_TEST_S3_URL").expect("MLLESS_TEST_S3_URL with MLLESS_TEST_LAMBDA");
    let redis = std::env::var("MLLESS_TEST_REDIS_URLS")
        .expect("MLLESS_TEST_REDIS_URLS with MLLESS_TEST_LAMBDA")
        .split(',')
        .next()
        .map(str::to_owned)
        .expect("a Redis URL");
    Some((s3, redis))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// `cargo lambda watch --only-lambda-apis` on a free loopback port, and a pool of `mlless`
/// instances polling its runtime API. An instance that exits (a worker killed by a fault) is
/// started again, as Lambda starts a fresh instance for the next invocation.
struct Emulator {
    endpoint: String,
    watch: Child,
    instances: Arc<Mutex<Vec<Child>>>,
    stop: Arc<AtomicBool>,
    keeper: Option<JoinHandle<()>>,
}

impl Emulator {
    fn start(dir: &Path) -> Self {
        let port = free_port();
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
        let log = std::fs::File::create(dir.join("emulator.log")).expect("emulator log");
        let watch = Command::new("cargo")
            .args([
                "lambda",
                "watch",
                "--only-lambda-apis",
                "-A",
                "127.0.0.1",
                "-P",
            ])
            .arg(port.to_string())
            .arg("--manifest-path")
            .arg(&workspace)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .expect("`cargo lambda watch` starts (pip install cargo-lambda)");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the emulator did not listen on 127.0.0.1:{port}; see {}",
                dir.join("emulator.log").display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let runtime_api = format!("http://127.0.0.1:{port}/.rt");
        let instance_log = dir.join("instances.log");
        let spawn = move || {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&instance_log)
                .expect("instance log");
            mlless()
                .env("AWS_LAMBDA_RUNTIME_API", &runtime_api)
                .env("AWS_LAMBDA_FUNCTION_NAME", FUNCTION)
                .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
                .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log handle"))
                .stderr(log)
                .spawn()
                .expect("an instance starts")
        };
        let instances: Arc<Mutex<Vec<Child>>> =
            Arc::new(Mutex::new((0..INSTANCES).map(|_| spawn()).collect()));
        let stop = Arc::new(AtomicBool::new(false));
        let keeper = {
            let instances = instances.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for child in instances.lock().expect("instances").iter_mut() {
                        if matches!(child.try_wait(), Ok(Some(_))) && !stop.load(Ordering::Relaxed)
                        {
                            *child = spawn();
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            watch,
            instances,
            stop,
            keeper: Some(keeper),
        }
    }

    /// Runs `mlless COMMAND --invoker lambda:_ ARGS` through this emulator, asserting success.
    fn run(&self, command: &str, args: &[&str]) {
        let output = mlless()
            .env("AWS_ENDPOINT_URL_LAMBDA", &self.endpoint)
            .args([command, "--invoker", &format!("lambda:{FUNCTION}")])
            .args(args)
            .output()
            .expect("mlless runs");
        assert!(
            output.status.success(),
            "mlless {command} {args:?} on the emulator failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Trains with `--invoker lambda:_` through this emulator.
    fn train(&self, dir: &Path, name: &str, args: &[&str]) -> RunRecord {
        let record = dir.join(format!("{name}.json"));
        let mut all = vec!["--quiet", "--record"];
        let record_arg = s(&record);
        all.push(&record_arg);
        all.extend_from_slice(args);
        self.run("train", &all);
        read_record(&record)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
        for child in self.instances.lock().expect("instances").iter_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = self.watch.kill();
        let _ = self.watch.wait();
    }
}

/// Prepares the LIBSVM or MovieLens file `input` into `url` on S3.
fn prepare(input: &Path, format: &str, url: &str, batch_size: &str) {
    ok(&[
        "prepare",
        "--format",
        format,
        "--input",
        &s(input),
        "--out",
        url,
        // No validation set: the local and the Lambda run stop after the same step.
        "--validation-fraction",
        "0",
        "--batch-size",
        batch_size,
    ]);
}

/// The test metrics of two runs agree to `1e-12` (in fact to the bit: same model).
fn assert_same_result(local: &RunRecord, lambda: &RunRecord) {
    assert_eq!(lambda.spec.platform, "lambda");
    assert_eq!(local.spec.platform, "local");
    assert_eq!(local.steps.len(), lambda.steps.len());
    for (name, value) in local.metrics.iter() {
        let other = metric(lambda, name);
        assert!(
            (value - other).abs() <= 1e-12,
            "{name}: {value} locally, {other} on Lambda"
        );
    }
    assert_eq!(
        stored_params(local),
        stored_params(lambda),
        "the same model bit for bit"
    );
}

fn names(record: &RunRecord) -> Vec<String> {
    record.invocations.iter().map(|r| r.name.clone()).collect()
}

fn unique(base: &str, name: &str) -> String {
    format!("{base}/lambda-{name}-{}", std::process::id())
}

#[test]
fn sparse_lr_on_lambda_matches_local_and_survives_a_dead_worker() {
    let Some((s3, redis)) = servers() else {
        return;
    };
    let dir = tempdir();
    let emulator = Emulator::start(dir.path());
    let (input, _) = write_sparse_lr(dir.path(), &SparseLrSpec::new(20_000, 5_000, 20, 31));
    let data = unique(&s3, "lr");
    prepare(&input, "libsvm", &data, "500");
    let base = [
        "--data",
        &data,
        "--model",
        "lr",
        "--workers",
        "4",
        "--max-epochs",
        "3",
        "--channel",
        &redis,
        "--checkpoint-every",
        "10",
    ];
    let args = |extra: &[&'static str]| [&base[..], extra].concat();
    let local = train(dir.path(), "local", &args(&[]));
    let lambda = emulator.train(dir.path(), "lambda", &args(&[]));
    assert_same_result(&local, &lambda);
    assert_eq!(lambda.invocations.len(), 5, "{:?}", names(&lambda));
    assert!(lambda.invocations.iter().all(|r| r.outcome.is_success()));
    assert!(metric(&lambda, "test_auc") > 0.7, "{:?}", lambda.metrics);

    // Worker 1 dies at step 15. The emulator never answers the call of a dead instance (Lambda
    // would report the crash), so the supervisor's deadline finds the silent worker, and the
    // driver invokes a replacement from its checkpoint of step 10.
    let faulty = args(&["--fault", "kill-worker:1@15", "--worker-deadline", "2"]);
    let recovered = emulator.train(dir.path(), "recovered", &faulty);
    assert!(
        names(&recovered).iter().any(|n| n == "worker-1~1"),
        "worker 1 was replaced: {:?}",
        names(&recovered)
    );
    assert_same_result(&local, &recovered);

    // The map tasks of min-max normalisation run on Lambda too, with the same result.
    let normalized = |invoker: Option<&Emulator>| {
        let url = unique(&s3, &format!("lr-minmax-{}", invoker.is_some()));
        let args = [
            "--format",
            "libsvm",
            "--input",
            &s(&input),
            "--out",
            &url,
            "--batch-size",
            "500",
            "--normalize",
            "minmax",
        ];
        match invoker {
            Some(emulator) => emulator.run("prepare", &args),
            None => {
                ok(&[&["prepare"][..], &args[..]].concat());
            }
        }
        url
    };
    let (here, there) = (normalized(None), normalized(Some(&emulator)));
    for split in [Split::Train, Split::Test] {
        assert_eq!(batches_at(&here, split), batches_at(&there, split));
    }
}

#[test]
fn pmf_on_lambda_matches_local_across_hand_offs() {
    let Some((s3, redis)) = servers() else {
        return;
    };
    let dir = tempdir();
    let emulator = Emulator::start(dir.path());
    let spec = mlless_data::RatingsSpec {
        users: 1000,
        items: 800,
        rank: 10,
        density: 0.2,
        noise: 0.5,
        seed: 8,
        ..Default::default()
    };
    let input = dir.path().join("ratings.tsv");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&input).expect("input"));
    let truth = mlless_data::write_ratings(&spec, &mut file).expect("generate");
    file.flush().expect("flush");
    drop(file);
    let data = unique(&s3, "pmf");
    prepare(&input, "movielens", &data, "1000");
    let base = [
        "--data",
        &data,
        "--model",
        "pmf",
        "--workers",
        "4",
        "--max-epochs",
        "12",
        "--channel",
        &redis,
    ];
    let args = |extra: &[&'static str]| [&base[..], extra].concat();
    let plain = args(&[]);
    let local = train(dir.path(), "local", &plain);
    let lambda = emulator.train(dir.path(), "lambda", &plain);
    assert_same_result(&local, &lambda);
    // Parity is the point; this only shows that the model learnt (12 epochs of a small set).
    let rmse = metric(&lambda, "test_rmse");
    assert!(
        rmse < 1.4 * truth.noise,
        "test RMSE {rmse} against the noise σ = {}",
        truth.noise
    );

    // A 2 s lifetime: every function hands off before it and is invoked again.
    let short = args(&["--timeout-s", "2"]);
    let handed_off = emulator.train(dir.path(), "handed-off", &short);
    let generations = names(&handed_off)
        .iter()
        .filter(|n| n.contains('#'))
        .count();
    assert!(
        generations >= 5,
        "functions were invoked again after their hand-offs: {:?}",
        names(&handed_off)
    );
    assert_same_result(&local, &handed_off);
}

/// The CPU time (user + system, in clock ticks) process `pid` has used, if it still runs.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name in parentheses: state, ppid, … utime (14th field), stime (15th).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The keys of `job` in the Redis at `url` (`redis-cli --scan`).
fn redis_keys(url: &str, job: &str) -> Vec<String> {
    let output = Command::new("redis-cli")
        .args(["-u", url, "--scan", "--pattern", &format!("mlless:{job}:*")])
        .output()
        .expect("redis-cli runs (it comes with redis-server)");
    assert!(output.status.success(), "redis-cli failed: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Ctrl-C of a run on the emulator: the driver asks the functions to stop after their step,
/// every Lambda invocation ends by itself (its synchronous Invoke is answered: the emulator
/// answers only once the handler returned), `mlless` exits with 130 and the hint within a few
/// seconds, nothing of the job runs on afterwards, and `--resume` on Lambda finishes the run with
/// the model of a run never cancelled.
#[test]
fn a_cancelled_lambda_run_stops_its_functions_and_resumes_to_the_uninterrupted_model() {
    let Some((s3, redis)) = servers() else {
        return;
    };
    let dir = tempdir();
    let emulator = Emulator::start(dir.path());
    let (input, _) = write_sparse_lr(dir.path(), &SparseLrSpec::new(20_000, 5_000, 20, 31));
    let data = unique(&s3, "cancel");
    prepare(&input, "libsvm", &data, "500");
    // 36 training minibatches over 4 workers: 9 steps an epoch, 108 in all.
    let base = [
        "--data",
        &data,
        "--model",
        "lr",
        "--workers",
        "4",
        "--max-epochs",
        "12",
        "--channel",
        &redis,
        "--checkpoint-every",
        "10",
    ];
    // The uninterrupted model; the Lambda run of a job has the local model bit for bit
    // (sparse_lr_on_lambda_matches_local_and_survives_a_dead_worker).
    let clean = train(dir.path(), "clean", &base);
    assert_eq!(clean.steps.len(), 108);

    let record_path = dir.path().join("cancelled.json");
    let mut child = mlless()
        .env("AWS_ENDPOINT_URL_LAMBDA", &emulator.endpoint)
        .args(["train", "--invoker", &format!("lambda:{FUNCTION}")])
        .args(base)
        .args(["--record", &s(&record_path), "--progress-every", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mlless starts");
    // The progress lines say which step the run is at; the signal goes once it passed step 20.
    let stderr = child.stderr.take().expect("stderr piped");
    let (at_step, step_seen) = std::sync::mpsc::channel::<u64>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(step) = line
                .strip_prefix("progress: step ")
                .and_then(|rest| rest.split(' ').next())
                .and_then(|step| step.parse::<u64>().ok())
            {
                let _ = at_step.send(step);
            }
            lines.push(line);
        }
        lines.join("\n")
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match step_seen.recv_timeout(left) {
            Ok(step) if step >= 20 => break,
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the Lambda run did not reach step 20: {e}");
            }
        }
    }
    let signalled = Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let mut status = None;
    while signalled.elapsed() < Duration::from_secs(60) {
        status = child.try_wait().expect("waits on mlless");
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stopped_in = signalled.elapsed();
    if status.is_none() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let stderr = reader.join().expect("the reader thread");
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{stderr}");
    // Well inside CANCEL_GRACE (30 s), after which the driver would have killed the functions.
    assert!(
        stopped_in < Duration::from_secs(15),
        "mlless took {stopped_in:?} to stop after the SIGINT:\n{stderr}"
    );
    let cancelled = read_record(&record_path);
    let job = cancelled.spec.job_id.clone();
    let run_url = cancelled.spec.run_url.as_str().to_owned();
    assert!(stderr.contains(&format!("cancelled job {job}")), "{stderr}");
    assert!(
        stderr.contains(&format!("mlless train --resume {run_url}")),
        "{stderr}"
    );
    assert!(!stderr.contains("were killed"), "{stderr}");
    assert_eq!(cancelled.stop_reason, "cancelled");
    assert_eq!(cancelled.spec.platform, "lambda");
    let steps = cancelled.steps.len();
    assert!(
        (21..108).contains(&steps),
        "stopped after the step it was in: {steps} steps"
    );
    // The driver gives up on an invocation only by its kill switch (outcome `Killed`); every
    // one of these was answered, so its handler had returned before `mlless` exited.
    assert_eq!(cancelled.invocations.len(), 5, "{:?}", names(&cancelled));
    assert!(
        cancelled.invocations.iter().all(|i| i.outcome.is_success()),
        "every function ended by itself: {:?}",
        cancelled.invocations
    );
    // And nothing of the job runs on: the driver cleaned its channel, and in the 2 s after it
    // exited no function published a step's message there again, nor did any instance of the
    // emulator's pool compute (an idle instance waits on the runtime API's next invocation).
    let pids: Vec<u32> = emulator
        .instances
        .lock()
        .expect("instances")
        .iter()
        .map(Child::id)
        .collect();
    let before: Vec<Option<u64>> = pids.iter().map(|&pid| cpu_ticks(pid)).collect();
    assert_eq!(redis_keys(&redis, &job), Vec::<String>::new());
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        redis_keys(&redis, &job),
        Vec::<String>::new(),
        "a function published to the channel after mlless exited"
    );
    let after: Vec<Option<u64>> = pids.iter().map(|&pid| cpu_ticks(pid)).collect();
    let busy: u64 = before
        .iter()
        .zip(&after)
        .map(|(b, a)| match (b, a) {
            (Some(b), Some(a)) => a.saturating_sub(*b),
            _ => 0,
        })
        .sum();
    // 10 ms ticks: an instance running steps for 2 s would use well over 20.
    assert!(
        busy <= 20,
        "the emulator's instances used {busy} ticks of CPU in the 2 s after mlless exited"
    );

    let resumed = emulator.train(dir.path(), "resumed", &["--resume", &run_url]);
    assert!(
        resumed.stop_reason.contains("--max-epochs"),
        "{}",
        resumed.stop_reason
    );
    assert_eq!(resumed.steps.len(), 108);
    assert_eq!(resumed.spec.platform, "lambda");
    assert!(
        stored_params(&resumed) == stored_params(&clean),
        "the resumed run has the model of the run never cancelled"
    );
    eprintln!(
        "stopped {stopped_in:?} after the SIGINT, at step {steps}; the instances used {busy} \
         ticks of CPU in the 2 s after"
    );
}

#[test]
fn a_lambda_job_refuses_what_the_functions_cannot_reach() {
    let dir = tempdir();
    let data = s(&dir.path().join("data"));
    let stderr = fails(&[
        "train",
        "--data",
        &data,
        "--model",
        "lr",
        "--invoker",
        "lambda:mlless",
    ]);
    assert!(
        stderr.contains(&format!("--data {data} is on this machine"))
            && stderr.contains("Lambda function mlless cannot read"),
        "{stderr}"
    );
    let stderr = fails(&[
        "train",
        "--data",
        "s3://bucket/data",
        "--channel",
        "file:///tmp/channel",
        "--model",
        "lr",
        "--invoker",
        "lambda:mlless",
    ]);
    assert!(
        stderr.contains("--channel file:///tmp/channel is on this machine"),
        "{stderr}"
    );
    let output = mlless()
        .env_remove("AWS_ACCESS_KEY_ID")
        .args([
            "train",
            "--data",
            "s3://bucket/data",
            "--model",
            "lr",
            "--invoker",
            "lambda:mlless",
        ])
        .output()
        .expect("mlless runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("no AWS credentials: tried the environment"),
        "{stderr}"
    );
    let stderr = fails(&[
        "train",
        "--data",
        "s3://bucket/data",
        "--model",
        "lr",
        "--invoker",
        "lamda:x",
    ]);
    assert!(
        stderr.contains("expected local or lambda:FUNCTION_NAME"),
        "{stderr}"
    );
}

#[test]
fn outside_a_full_lambda_environment_serving_is_a_clear_error() {
    let output = mlless()
        .env("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:1")
        .env_remove("AWS_LAMBDA_FUNCTION_NAME")
        .output()
        .expect("mlless runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("AWS_LAMBDA_FUNCTION_NAME is not set") && !stderr.contains("panicked"),
        "{stderr}"
    );
}
