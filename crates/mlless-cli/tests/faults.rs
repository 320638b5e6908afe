//! Faults, injected with the `--fault` test aid: a killed worker or supervisor is replaced from
//! its checkpoint, a silent worker is replaced after the deadline, and a run that failed for
//! good continues with `--resume` — each time with the model of a run without the fault, bit
//! for bit (BSP and ISP are deterministic, and a replacement replays exactly what it had done).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use mlless_data::SparseLrSpec;
use mlless_job::RunRecord;

/// A sparse-LR set small enough for many runs: 40k rows × 10k features, batches of 500.
fn lr_data(dir: &Path) -> PathBuf {
    let spec = SparseLrSpec::new(40_000, 10_000, 20, 29);
    sparse_lr_prepared(dir, &spec, &["--validation-fraction", "0"])
}

/// Trains LR with 4 workers for 3 epochs (54 steps), checkpointing every 10 steps.
fn args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    lr_checkpointed_args(data, "3", extra)
}

/// The names and outcomes of the replacements after a failure (`{role}~{n}`) among a run's
/// invocations.
fn replacements(record: &RunRecord) -> Vec<(String, String)> {
    invocations(record)
        .into_iter()
        .filter(|(n, _)| n.contains('~'))
        .collect()
}

/// The names and outcomes of a run's invocations.
fn invocations(record: &RunRecord) -> Vec<(String, String)> {
    record
        .invocations
        .iter()
        .map(|r| {
            let outcome = serde_json::to_value(&r.outcome).expect("outcome serialises");
            (
                r.name.clone(),
                outcome["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Every step of the record has one statistics entry per worker, each of which applied the
/// updates of all 4 workers (and, under ISP, at the last step the 3 peers' flushes of what
/// they held back): no update lost, none applied twice.
fn assert_every_update_applied_once(record: &RunRecord) {
    let isp = record.spec.training.sync.name() == "isp";
    let last = record.steps.len() - 1;
    for (i, step) in record.steps.iter().enumerate() {
        let want = if isp && i == last { 7 } else { 4 };
        let mut workers: Vec<u32> = step.workers.iter().map(|w| w.worker).collect();
        workers.sort_unstable();
        assert_eq!(workers, vec![0, 1, 2, 3], "step {}", step.step);
        for w in &step.workers {
            assert_eq!(
                w.updates_applied, want,
                "step {} worker {}",
                step.step, w.worker
            );
        }
    }
}

/// BSP and ISP, P = 4: a worker killed at step 30 is replaced from its checkpoint of step 30;
/// the run ends with the model of a run without the fault (tolerance 0).
#[test]
fn a_killed_worker_is_replaced_and_nothing_is_lost() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    for sync in ["bsp", "isp"] {
        let clean = train(dir.path(), sync, &args(&d, &["--sync", sync]));
        let faulty = train(
            dir.path(),
            sync,
            &args(&d, &["--sync", sync, "--fault", "kill-worker:1@30"]),
        );
        let names = invocations(&faulty);
        assert!(
            names.contains(&("worker-1".into(), "failed".into())),
            "{names:?}"
        );
        assert!(
            names.contains(&("worker-1~1".into(), "succeeded".into())),
            "{names:?}"
        );
        assert_eq!(faulty.steps.len(), clean.steps.len(), "{sync}");
        assert!(
            stored_params(&faulty) == stored_params(&clean),
            "{sync}: the model differs from the run without the fault"
        );
        assert_eq!(
            metric(&faulty, "test_logloss").to_bits(),
            metric(&clean, "test_logloss").to_bits()
        );
        assert_every_update_applied_once(&faulty);
    }
}

/// A supervisor killed at step 25 is invoked again from its checkpoint of step 20, and a
/// worker that drops its message of step 20 (and so hangs, with everyone waiting for it) is
/// the one replaced once `--worker-deadline` has passed: the same model both times.
#[test]
fn a_killed_supervisor_and_a_silent_worker_are_recovered() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    let clean = stored_params(&train(dir.path(), "clean", &args(&d, &[])));
    let supervisor = train(
        dir.path(),
        "supervisor",
        &args(&d, &["--fault", "kill-supervisor@25"]),
    );
    let names = invocations(&supervisor);
    assert!(
        names.contains(&("supervisor".into(), "failed".into())),
        "{names:?}"
    );
    assert!(
        names.contains(&("supervisor~1".into(), "succeeded".into())),
        "{names:?}"
    );
    assert_eq!(supervisor.steps.len(), 54);
    assert!(stored_params(&supervisor) == clean);

    let silent = train(
        dir.path(),
        "silent",
        &args(&d, &["--fault", "drop:2@20", "--worker-deadline", "1"]),
    );
    let replaced = replacements(&silent);
    assert_eq!(
        replaced,
        vec![("worker-2~1".to_string(), "succeeded".to_string())],
        "only the silent worker is replaced"
    );
    assert!(stored_params(&silent) == clean);
    assert_every_update_applied_once(&silent);
}

/// A failure no replacement can help (a worker over its memory cap) stops the run with an
/// error that names it and says how to resume; `--resume` then finishes the run from the
/// checkpoints every role shares, with the model of a run without the fault.
#[test]
fn a_failed_run_resumes_from_its_last_checkpoint() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    let clean = stored_params(&train(dir.path(), "clean", &args(&d, &[])));
    let runs = dir.path().join("runs");
    let r = s(&runs);
    let mut failing = vec!["train"];
    failing.extend(args(
        &d,
        &["--memory-mb", "256", "--fault", "oom:1@33", "--runs", &r],
    ));
    let err = fails(&failing);
    assert!(
        err.contains("worker-1 exceeded its memory limit of 256 MB"),
        "{err}"
    );
    assert!(err.contains("mlless train --resume"), "{err}");
    let run = std::fs::read_dir(&runs)
        .expect("runs")
        .next()
        .expect("one run")
        .expect("entry")
        .path();
    // `mlless runs` lists it as failed, with the reason.
    let listed = String::from_utf8_lossy(&ok(&["runs", &r]).stdout).into_owned();
    assert!(
        listed.contains("failed") && listed.contains("exceeded its memory limit of 256 MB"),
        "{listed}"
    );
    // An option that would change the mathematics is refused, naming it.
    let err = fails(&[
        "train",
        "--resume",
        &s(&run),
        "--lr",
        "0.1",
        "--workers",
        "8",
    ]);
    assert!(err.contains("--lr, --workers would change it"), "{err}");
    // A new limit is checked as the options of a new run are, before any function starts.
    let err = fails(&["train", "--resume", &s(&run), "--max-time=-1"]);
    assert!(
        err.contains("--max-time must be a positive number of seconds"),
        "{err}"
    );
    // A larger memory cap, which the error's advice needs, is taken and kept in the spec.
    let record_path = dir.path().join("resumed.json");
    ok(&[
        "train",
        "--resume",
        &s(&run),
        "--memory-mb",
        "512",
        "--quiet",
        "--record",
        &s(&record_path),
    ]);
    let resumed = read_record(&record_path);
    assert_eq!(resumed.spec.training.limits.memory_mb, 512);
    assert!(resumed.invocations.iter().all(|i| i.memory_mb == 512));
    let [resumption] = resumed.spec.resumptions.as_slice() else {
        panic!("one resumption: {:?}", resumed.spec.resumptions)
    };
    assert_eq!(resumption.changes, ["--memory-mb 256 → 512"]);
    assert!(
        resumed.invocations.iter().all(|i| i.name.ends_with("~1")),
        "every role starts again from the checkpoint: {:?}",
        invocations(&resumed)
    );
    assert_eq!(
        resumed.steps.len(),
        54,
        "the steps before the checkpoint are kept"
    );
    assert!(stored_params(&resumed) == clean);
    let listed = String::from_utf8_lossy(&ok(&["runs", &r]).stdout).into_owned();
    assert!(
        listed.contains(&format!("{}  finished", resumed.spec.job_id))
            && listed.contains("reached --max-epochs 3 · 54 steps"),
        "{listed}"
    );
    // A finished run is not resumed.
    let err = fails(&["train", "--resume", &s(&run)]);
    assert!(err.contains("nothing to resume"), "{err}");
}

/// A `redis-server` of this test's own, on a free port, with its data in a directory of its
/// own (so that a `shutdown save` and a restart keep the data, as a restarted managed Redis
/// does); stopped when dropped.
struct OwnRedis {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<std::process::Child>,
}

impl OwnRedis {
    /// Starts one, or `None` (with a notice) when `redis-server` is not on PATH.
    fn start() -> Option<Self> {
        let on_path = std::process::Command::new("redis-server")
            .arg("--version")
            .output()
            .is_ok();
        if !on_path {
            eprintln!("redis-server is not on PATH: the outage test is skipped");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut redis = Self {
            port,
            dir: tempdir(),
            child: None,
        };
        redis.up();
        Some(redis)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn up(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--dir", &s(self.dir.path()), "--dbfilename", "dump.rdb"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Stops the server, saving its data first if `save`.
    fn down(&mut self, save: bool) {
        let _ = std::process::Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "shutdown"])
            .arg(if save { "save" } else { "nosave" })
            .output();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.down(false);
    }
}

/// Trains LR on `data` with 4 workers for 30 epochs (540 steps: long enough to restart Redis
/// in the middle) on the Redis at `redis`, checkpointing every 20 steps, below `runs`.
fn long_redis_args(data: &str, redis: &str, runs: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--data",
        data,
        "--model",
        "lr",
        "--workers",
        "4",
        "--max-epochs",
        "30",
        "--checkpoint-every",
        "20",
        "--channel",
        redis,
        "--runs",
        runs,
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|x| x.to_string()));
    args
}

/// Redis restarted mid-run within `--channel-grace`: the run rides it out and ends with the
/// model of a run without the outage. Redis down for longer than the grace: the run stops with
/// an error naming the address and the way to resume, and `--resume` (Redis back, and empty)
/// finishes it with the same model.
#[test]
fn a_redis_outage_is_ridden_out_within_the_grace_and_resumed_after_it() {
    let Some(mut redis) = OwnRedis::start() else {
        return;
    };
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    let url = redis.url();
    let long = |extra: &[&str], runs: &str| long_redis_args(&d, &url, runs, extra);
    let clean_runs = s(&dir.path().join("clean-runs"));
    let clean_args = long(&[], &clean_runs);
    let clean_args: Vec<&str> = clean_args.iter().map(String::as_str).collect();
    let clean = stored_params(&train(dir.path(), "clean", &clean_args));

    // Within the grace.
    let runs = dir.path().join("restart-runs");
    let record = dir.path().join("restart.json");
    let mut cmd = mlless();
    cmd.args(["train", "--quiet", "--record", &s(&record)])
        .args(long(&["--channel-grace", "20"], &s(&runs)));
    let run = cmd.spawn().expect("mlless starts");
    wait_for_checkpoint(&runs, 100);
    redis.down(true);
    std::thread::sleep(std::time::Duration::from_secs(1));
    redis.up();
    let out = run.wait_with_output().expect("mlless ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stored_params(&read_record(&record)) == clean);

    // Longer than the grace.
    let runs = dir.path().join("outage-runs");
    let mut cmd = mlless();
    cmd.args(["train", "--quiet"])
        .args(long(&["--channel-grace", "2"], &s(&runs)))
        .stderr(std::process::Stdio::piped());
    let run = cmd.spawn().expect("mlless starts");
    wait_for_checkpoint(&runs, 100);
    redis.down(false);
    let out = run.wait_with_output().expect("mlless ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(&format!("127.0.0.1:{}", redis.port)), "{err}");
    assert!(err.contains("--channel-grace"), "{err}");
    assert!(err.contains("mlless train --resume"), "{err}");
    redis.up();
    let run_dir = std::fs::read_dir(&runs)
        .expect("runs")
        .next()
        .expect("one run")
        .expect("entry")
        .path();
    let resumed = dir.path().join("resumed.json");
    ok(&[
        "train",
        "--resume",
        &s(&run_dir),
        "--quiet",
        "--record",
        &s(&resumed),
    ]);
    assert!(stored_params(&read_record(&resumed)) == clean);
}

/// The one run below `runs`.
fn only_run(runs: &Path) -> PathBuf {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(runs)
        .expect("runs")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries.remove(0)
}

/// `role`'s checkpoint of `step` in the local run `run`.
fn checkpoint_file(run: &Path, role: &str, step: u64) -> PathBuf {
    run.join(format!("checkpoints/{role}/step-{step:012}.bin"))
}

/// Checkpoints carry their job id (issue #20): two runs fail alike (worker 1 over its memory
/// cap at step 33, so every role keeps its checkpoints of steps 20 and 30). Another job's
/// checkpoint of step 30 copied into the first run is refused by `--resume` with an error
/// naming it and both jobs, before any function starts. With the run's own checkpoint of
/// worker 2 truncated instead, `--resume` passes over step 30, resumes every role from step
/// 20, and ends with the model of a run without the fault, bit for bit.
#[test]
fn resume_refuses_another_jobs_checkpoint_and_falls_back_past_a_damaged_one() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    let clean = stored_params(&train(dir.path(), "clean", &args(&d, &[])));
    let failed_run = |name: &str| -> PathBuf {
        let runs = dir.path().join(name);
        let r = s(&runs);
        let mut failing = vec!["train"];
        failing.extend(args(
            &d,
            &["--memory-mb", "256", "--fault", "oom:1@33", "--runs", &r],
        ));
        let err = fails(&failing);
        assert!(err.contains("exceeded its memory limit"), "{err}");
        only_run(&runs)
    };
    let run = failed_run("runs-a");
    let other = failed_run("runs-b");
    let job_of = |run: &Path| run.file_name().expect("job").to_string_lossy().into_owned();
    let (job, other_job) = (job_of(&run), job_of(&other));
    assert_ne!(job, other_job);
    let newest = checkpoint_file(&run, "worker-2", 30);
    assert!(checkpoint_file(&run, "worker-2", 20).is_file());
    let own = std::fs::read(&newest).expect("worker 2's checkpoint of step 30");

    // Another job's checkpoint (the same data, options and step: only its job differs).
    std::fs::copy(checkpoint_file(&other, "worker-2", 30), &newest).expect("copy");
    let resume = [
        "train",
        "--resume",
        &s(&run),
        "--memory-mb",
        "512",
        "--quiet",
    ];
    let err = fails(&resume);
    assert!(
        err.contains("worker-2/step-000000000030.bin")
            && err.contains(&format!(
                "is the checkpoint of job {other_job}, worker-2 at step 30, not of job {job}, \
                 worker-2 at step 30"
            )),
        "{err}"
    );
    assert!(
        !run.join("record.json").exists() && run.join("failure.json").exists(),
        "the refused resume started nothing"
    );

    // The run's own checkpoint of step 30, half-written.
    std::fs::write(&newest, &own[..own.len() / 2]).expect("truncate");
    let record_path = dir.path().join("resumed.json");
    let mut resumed_args = resume.to_vec();
    let record_arg = s(&record_path);
    resumed_args.extend(["--record", &record_arg]);
    ok(&resumed_args);
    let resumed = read_record(&record_path);
    let [resumption] = resumed.spec.resumptions.as_slice() else {
        panic!("one resumption: {:?}", resumed.spec.resumptions)
    };
    assert_eq!(resumption.from_step, 20, "step 30 was passed over");
    assert_eq!(resumed.steps.len(), 54);
    assert_every_update_applied_once(&resumed);
    assert!(stored_params(&resumed) == clean);
}

/// The spec keeps absolute locations: a run started in one directory with a relative --data and
/// --runs, which failed for good, is resumed from another current directory and finishes with the
/// model of a run without the fault (its functions, started there too, find the data set and the
/// run's checkpoints).
#[test]
fn a_run_started_with_relative_paths_resumes_from_another_directory() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    let clean = stored_params(&train(dir.path(), "clean", &args(&d, &[])));
    let relative = data
        .strip_prefix(dir.path())
        .expect("the data set is in the directory")
        .display()
        .to_string();
    let mut failing = vec!["train", "--quiet"];
    failing.extend(args(
        &relative,
        &[
            "--memory-mb",
            "256",
            "--fault",
            "oom:1@23",
            "--runs",
            "runs",
        ],
    ));
    let output = mlless()
        .args(&failing)
        .current_dir(dir.path())
        .output()
        .expect("mlless runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the fault fails the run: {stderr}"
    );
    let runs = dir.path().join("runs");
    let run = std::fs::read_dir(&runs)
        .expect("the run is below the relative --runs")
        .next()
        .expect("one run")
        .expect("entry")
        .path();
    assert!(
        stderr.contains(&format!("mlless train --resume {}", s(&run))),
        "the hint names the run's absolute location: {stderr}"
    );
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("spec.json")).expect("spec.json"))
            .expect("the spec parses");
    assert_eq!(spec["data_url"], serde_json::json!(d), "{spec}");
    assert_eq!(spec["run_url"], serde_json::json!(s(&run)), "{spec}");

    let elsewhere = tempdir();
    let record_path = elsewhere.path().join("resumed.json");
    let output = mlless()
        .args([
            "train",
            "--resume",
            &s(&run),
            "--memory-mb",
            "512",
            "--quiet",
            "--record",
            &s(&record_path),
        ])
        .current_dir(elsewhere.path())
        .output()
        .expect("mlless runs");
    assert!(
        output.status.success(),
        "resumed from another directory: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let resumed = read_record(&record_path);
    assert_eq!(resumed.steps.len(), 54);
    assert!(stored_params(&resumed) == clean);
    assert!(
        std::fs::read_dir(elsewhere.path())
            .expect("the other directory")
            .all(|e| e.expect("entry").file_name() == "resumed.json"),
        "nothing but the record written where it was resumed"
    );
}

/// Redis restarted mid-run without persistence and with the default options (no
/// `--worker-deadline`): every message in flight is gone. The supervisor's default deadline
/// (100 median steps, at least 30 s) has the silent workers replaced, they replay from their
/// checkpoints and publish again, and the run ends with the model of an undisturbed run (BSP,
/// bit for bit) within 3 minutes of the restart, not after a function's lifetime (900 s).
#[test]
fn a_redis_restart_that_loses_the_messages_is_healed_with_the_defaults() {
    let Some(mut redis) = OwnRedis::start() else {
        return;
    };
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    let url = redis.url();
    let run_args = |runs: &Path| long_redis_args(&d, &url, &s(runs), &[]);
    let clean_runs = dir.path().join("clean-runs");
    let clean_args = run_args(&clean_runs);
    let clean_args: Vec<&str> = clean_args.iter().map(String::as_str).collect();
    let clean = stored_params(&train(dir.path(), "clean", &clean_args));

    let runs = dir.path().join("lost-runs");
    let record = dir.path().join("lost.json");
    let mut cmd = mlless();
    cmd.args(["train", "--quiet", "--record", &s(&record)])
        .args(run_args(&runs))
        .stderr(std::process::Stdio::piped());
    let mut run = cmd.spawn().expect("mlless starts");
    wait_for_checkpoint(&runs, 100);
    redis.down(false);
    redis.up();
    let restarted = std::time::Instant::now();
    let bound = std::time::Duration::from_secs(180);
    loop {
        if run.try_wait().expect("waits").is_some() {
            break;
        }
        if restarted.elapsed() > bound {
            let _ = run.kill();
            panic!("the run did not end within {bound:?} of the restart");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let healed_after = restarted.elapsed();
    let out = run.wait_with_output().expect("mlless ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Whether a message the run still needed was in Redis at the restart depends on timing:
    // the replacements show it did.
    let record = read_record(&record);
    assert!(
        stored_params(&record) == clean,
        "the model of the undisturbed run"
    );
    eprintln!(
        "ended {healed_after:?} after the restart; replaced: {:?}",
        replacements(&record)
    );
}

/// A worker's update lost (never published) with the default options: the supervisor's
/// default deadline (at least 30 s) has the silent worker replaced, and the run ends with the
/// model of a run without the loss.
#[test]
fn a_lost_update_is_healed_by_the_default_deadline() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    let clean = stored_params(&train(dir.path(), "clean", &args(&d, &[])));
    let started = std::time::Instant::now();
    let lost = train(dir.path(), "lost", &args(&d, &["--fault", "drop:1@20"]));
    let took = started.elapsed();
    let replaced = replacements(&lost);
    assert_eq!(
        replaced,
        vec![("worker-1~1".to_string(), "succeeded".to_string())],
        "the silent worker is replaced"
    );
    assert!(stored_params(&lost) == clean);
    assert!(
        took >= std::time::Duration::from_secs(30),
        "not before the deadline's floor: {took:?}"
    );
    eprintln!("a lost update cost {took:?}");
}

/// A `memcached` of this test's own with `megabytes` of memory, on a free port; killed when
/// dropped.
struct OwnMemcached {
    port: u16,
    child: std::process::Child,
}

impl OwnMemcached {
    /// Starts one, or `None` (with a notice) when `memcached` is not on PATH.
    fn start(megabytes: u32) -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut command = std::process::Command::new("memcached");
        command
            .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"])
            .args(["-m", &megabytes.to_string()]);
        // memcached refuses to run as root without -u.
        if std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"))
        {
            command.args(["-u", "root"]);
        }
        let Ok(child) = command.spawn() else {
            eprintln!("memcached is not on PATH: the test is skipped");
            return None;
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "memcached did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Some(Self { port, child })
    }

    fn url(&self) -> String {
        format!("memcached://127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnMemcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sixteen PMF workers on a Memcached of 8 MB (`-m 8`), with the defaults: it evicts the
/// job's messages or refuses to store one, and the run stops within 60 s with a message that
/// says so and names the way out — or, if nothing the run needed was lost, it ends with the
/// model of the same run on Redis. It never hangs.
#[test]
fn sixteen_workers_on_a_full_memcached_stop_within_a_minute_saying_why() {
    let Some(memcached) = OwnMemcached::start(8) else {
        return;
    };
    let dir = tempdir();
    let spec = mlless_data::RatingsSpec {
        users: 2000,
        items: 1500,
        rank: 10,
        density: 0.05,
        noise: 0.5,
        seed: 9,
        ..Default::default()
    };
    let (data, _) = ratings_prepared(dir.path(), &spec, &["--batch-size", "500"]);
    let d = s(&data);
    let job = |channel: &str, record: &Path| -> Vec<String> {
        let (channel, record) = (channel.to_owned(), s(record));
        [
            "train",
            "--quiet",
            "--data",
            &d,
            "--model",
            "pmf",
            "--workers",
            "16",
            "--max-epochs",
            "10",
            "--channel",
            &channel,
            "--record",
            &record,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let on_memcached = dir.path().join("memcached.json");
    let started = std::time::Instant::now();
    let mut run = mlless()
        .args(job(&memcached.url(), &on_memcached))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mlless starts");
    let bound = std::time::Duration::from_secs(60);
    while run.try_wait().expect("waits").is_none() {
        if started.elapsed() > bound {
            let _ = run.kill();
            panic!("the run on a full memcached did not end within {bound:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let took = started.elapsed();
    let out = run.wait_with_output().expect("mlless ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("ended after {took:?}: {stderr}");
    if out.status.success() {
        let Some(redis) = server_channels()
            .into_iter()
            .find(|c| c.starts_with("redis://"))
        else {
            return; // no Redis to compare with
        };
        let on_redis = dir.path().join("redis.json");
        let args = job(&redis, &on_redis);
        ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            stored_params(&read_record(&on_memcached)) == stored_params(&read_record(&on_redis)),
            "the model of the Redis run"
        );
    } else {
        // Full, it either evicts the job's messages (a collect then misses them) or refuses to
        // store one, whichever comes first: both say so, and how to give it room.
        assert!(
            stderr.contains("evicted") || stderr.contains("memcached is full"),
            "{stderr}"
        );
        assert!(stderr.contains("memcached -m"), "{stderr}");
        assert!(stderr.contains(&memcached.url()), "{stderr}");
    }
}

/// A `--resume` of a run whose driver still drives it is refused, naming that driver's start,
/// and the running run goes on untouched. The moment is a step's (`--fault pause:0@12`: worker
/// 0 waits there until released), not a time.
#[test]
fn a_run_still_running_is_not_resumed_by_a_second_driver() {
    let dir = tempdir();
    let spec = SparseLrSpec::new(4_000, 1_000, 20, 29);
    let data = sparse_lr_prepared(dir.path(), &spec, &["--validation-fraction", "0"]);
    let runs = dir.path().join("runs");
    let record_path = dir.path().join("first.json");
    let (d, r, rec) = (s(&data), s(&runs), s(&record_path));
    let child = mlless()
        .args(["train", "--quiet", "--runs", &r, "--record", &rec])
        .args(["--fault", "pause:0@12"])
        .args(lr_checkpointed_args(&d, "12", &[]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mlless starts");
    let run = wait_for_pause(&runs, 0, 12);
    let err = fails(&["train", "--resume", &s(&run), "--quiet"]);
    assert!(
        err.contains("still being driven") && err.contains("started at 20") && err.contains("UTC"),
        "{err}"
    );
    release_pause(&run, 0, 12);
    let output = child.wait_with_output().expect("the first driver ends");
    assert!(
        output.status.success(),
        "the first run went on untouched: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let record = read_record(&record_path);
    assert!(!record.was_cancelled());
    assert_eq!(record.steps.len(), 24, "every step of 12 epochs");
    assert!(!run.join("failure.json").exists());
    assert!(!run.join("lease.json").exists(), "released at the end");
    // A finished run is not resumed either (for its record, not a lease).
    let err = fails(&["train", "--resume", &s(&run)]);
    assert!(err.contains("nothing to resume"), "{err}");
}

/// Every file below `dir`, by its path relative to `dir`, with its bytes.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("a directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("a file");
                let relative = path.strip_prefix(dir).expect("below").to_path_buf();
                files.insert(relative, bytes);
            }
        }
    }
    files
}

/// `cp -r from to`.
fn copy_dir(from: &Path, to: &Path) {
    for (relative, bytes) in snapshot(from) {
        let path = to.join(relative);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    }
}

/// A sparse-LR set for the runs cancelled at a step: 4k rows × 1k features, batches of 500
/// (12 epochs with 4 workers: 24 steps).
fn small_lr_data(dir: &Path) -> PathBuf {
    let spec = SparseLrSpec::new(4_000, 1_000, 20, 29);
    sparse_lr_prepared(dir, &spec, &["--validation-fraction", "0"])
}

/// The functions follow the spec's run location: a run copied (`cp -r`) or moved (`mv`) is
/// resumed where it is, and the original is neither written to nor made again.
#[test]
fn a_copied_or_moved_run_resumes_where_it_is() {
    let dir = tempdir();
    let data = small_lr_data(dir.path());
    let d = s(&data);
    let runs = dir.path().join("runs");
    let run = cancelled_run(&runs, &lr_checkpointed_args(&d, "12", &[]), 12);
    let name = run.file_name().expect("a job").to_owned();
    let cancelled = read_record(&run.join("record.json"));
    assert_eq!(
        cancelled.steps.len(),
        13,
        "stopped after the step of the cancel"
    );
    let original = snapshot(&run);

    let copy = dir.path().join("copies").join(&name);
    copy_dir(&run, &copy);
    let record_path = dir.path().join("copy.json");
    ok(&[
        "train",
        "--resume",
        &s(&copy),
        "--quiet",
        "--record",
        &s(&record_path),
    ]);
    assert!(snapshot(&run) == original, "the original was written to");
    let resumed = read_record(&record_path);
    assert!(!resumed.was_cancelled());
    assert_eq!(resumed.steps.len(), 24);
    assert_eq!(resumed.spec.run_url.as_str(), s(&copy));
    let copy_record = read_record(&copy.join("record.json"));
    assert_eq!(
        copy_record.steps.len(),
        24,
        "the copy has the finished record"
    );

    let moved = dir.path().join("moved").join(&name);
    std::fs::create_dir_all(moved.parent().expect("a parent")).expect("mkdir");
    std::fs::rename(&run, &moved).expect("mv");
    ok(&["train", "--resume", &s(&moved), "--quiet"]);
    assert!(!run.exists(), "the old location was made again");
    assert_eq!(read_record(&moved.join("record.json")).steps.len(), 24);
    // Both continued the same run from the same checkpoints: the same model, bit for bit.
    assert!(
        std::fs::read(moved.join("model.bin")).expect("model")
            == std::fs::read(copy.join("model.bin")).expect("model")
    );
}

/// A run is bound to the preparation it started on: after `prepare` wrote the location again
/// (another seed: another split), `--resume` refuses the run instead of continuing on rows
/// whose test part was partly training rows; `prepare` says that the location has runs.
#[test]
fn a_run_is_not_resumed_on_a_data_set_prepared_again() {
    let dir = tempdir();
    let data = small_lr_data(dir.path());
    let d = s(&data);
    let runs = data.join("runs");
    let run = cancelled_run(&runs, &lr_checkpointed_args(&d, "12", &[]), 12);
    let input = dir.path().join("lr.libsvm");
    assert!(input.exists(), "the input of the data set");
    let output = ok(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &d,
        "--batch-size",
        "500",
        "--validation-fraction",
        "0",
        "--seed",
        "7",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("has 1 run(s)") && stderr.contains("will refuse them"),
        "{stderr}"
    );
    let err = fails(&["train", "--resume", &s(&run)]);
    assert!(
        err.contains("now holds another preparation") && err.contains("data set id"),
        "{err}"
    );
    // The run is as it was: still cancelled, resumable on its own data set were it back.
    assert!(read_record(&run.join("record.json")).was_cancelled());
}
