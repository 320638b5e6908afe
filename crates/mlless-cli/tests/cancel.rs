//! Cancelling a run: the first SIGINT (Ctrl-C) asks every function to stop after its step, the
//! run ends with a record that says `cancelled`, the hint to resume and exit status 130, with no
//! function left running; `--resume` then finishes it with the model of a run never cancelled
//! (BSP is deterministic, and the resumed roles start from the checkpoints they all share).
//!
//! Cancelling `prepare`: the first SIGINT stops the normalisation's map tasks after their
//! minibatch, a second signal kills them; either way no map task is left, the location holds
//! nothing (no manifest, nothing staged), `mlless` exits with 130, and preparing again gives
//! the data set of a preparation never cancelled.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use mlless_data::SparseLrSpec;
use mlless_runtime::dataset::Split;

/// A sparse-LR set small enough for several runs: 40k rows × 10k features, batches of 500.
fn lr_data(dir: &Path) -> PathBuf {
    let spec = SparseLrSpec::new(40_000, 10_000, 20, 31);
    sparse_lr_prepared(dir, &spec, &["--validation-fraction", "0"])
}

/// LR with 4 local workers for 12 epochs (216 steps), checkpointing every 10 steps.
fn args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    lr_checkpointed_args(data, "12", extra)
}

/// Waits up to `limit` for `done`, polling.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Whether process `pid` still runs this binary (a reused pid runs something else).
fn runs_mlless(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("mlless"))
}

#[test]
fn a_cancelled_run_stops_after_its_step_and_resumes_to_the_uninterrupted_model() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let d = s(&data);
    let clean = stored_params(&train(dir.path(), "clean", &args(&d, &[])));

    let runs = dir.path().join("runs");
    let record_path = dir.path().join("cancelled.json");
    let (r, rec) = (s(&runs), s(&record_path));
    let mut train_args = vec!["train"];
    // Worker 0 pauses at step 25 until the run is asked to stop: the SIGINT lands there, well
    // into the run and far from its end, however fast the machine (no sleep, no race).
    train_args.extend(args(
        &d,
        &[
            "--runs",
            &r,
            "--record",
            &rec,
            "--quiet",
            "--fault",
            "pause:0@25",
        ],
    ));
    let mut child = mlless()
        .args(&train_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mlless starts");
    let held = wait_for(Duration::from_secs(120), || {
        std::fs::read_dir(&runs)
            .into_iter()
            .flatten()
            .flatten()
            .any(|run| {
                run.path()
                    .join(mlless_job::fault::pause_reached_key(0, 25))
                    .exists()
            })
    });
    assert!(held, "worker 0 reached step 25");
    let run = std::fs::read_dir(&runs)
        .expect("runs")
        .next()
        .expect("one run")
        .expect("entry")
        .path();
    let signalled = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let mut status = None;
    let exited = wait_for(Duration::from_secs(30), || {
        status = child.try_wait().expect("waits on mlless");
        status.is_some()
    });
    assert!(exited, "mlless ended within 30 s of the SIGINT");
    let stopped_in = signalled.elapsed();
    let output = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{stderr}");

    let cancelled = read_record(&record_path);
    assert!(
        stderr.contains(&format!("cancelled job {}", cancelled.spec.job_id)),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("mlless train --resume {}", s(&run))),
        "{stderr}"
    );
    assert_eq!(cancelled.stop_reason, "cancelled");
    let steps = cancelled.steps.len();
    // Released by the stop, the paused worker has seen it: the fleet stops after step 25.
    assert_eq!(steps, 26, "stopped after the step it was paused in (25)");
    assert!(
        cancelled.invocations.iter().all(|i| i.outcome.is_success()),
        "every function ended by itself: {:?}",
        cancelled.invocations
    );
    for invocation in &cancelled.invocations {
        let pid = invocation.pid.expect("local functions have pids");
        assert!(!runs_mlless(pid), "{} still runs", invocation.name);
    }

    let listed = String::from_utf8_lossy(&ok(&["runs", &r]).stdout).into_owned();
    assert!(
        listed.contains(&format!("{}  cancelled", cancelled.spec.job_id)),
        "{listed}"
    );

    // The resumed workers may pause at step 25 again: released from the start.
    release_pause(&run, 0, 25);
    let resumed_path = dir.path().join("resumed.json");
    ok(&[
        "train",
        "--resume",
        &s(&run),
        "--quiet",
        "--record",
        &s(&resumed_path),
    ]);
    let resumed = read_record(&resumed_path);
    assert!(
        resumed.stop_reason.contains("--max-epochs"),
        "{}",
        resumed.stop_reason
    );
    assert_eq!(resumed.steps.len(), 216);
    assert!(
        stored_params(&resumed) == clean,
        "the resumed run has the model of the run never cancelled"
    );
    eprintln!("stopped {stopped_in:?} after the SIGINT, at step {steps}");
}

/// The processes whose parent is `parent` and that run `mlless function` (the local invoker's
/// map tasks), from `/proc`.
fn function_children(parent: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command name in parentheses: the state, then the parent's pid.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok());
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if ppid == Some(parent) && cmdline.contains("mlless") && cmdline.contains("function") {
            children.push(pid);
        }
    }
    children
}

/// The files below `dir`, recursively (none if it does not exist).
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// `prepare` of `input` into `out` with min-max normalisation over 2 local map tasks and
/// minibatches of 20: 2,025 training, 225 validation and 250 test minibatches, enough that the
/// scale-map tasks run for a while even on an idle machine.
fn normalized_prepare<'a>(input: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "prepare",
        "--format",
        "libsvm",
        "--input",
        input,
        "--out",
        out,
        "--batch-size",
        "20",
        "--normalize",
        "minmax",
        "--map-tasks",
        "2",
    ]
}

/// What an interrupted `prepare` did.
struct Interrupted {
    /// Its exit code.
    code: Option<i32>,
    /// Its standard error.
    stderr: String,
    /// The map tasks that ran when the signals went.
    tasks: Vec<u32>,
    /// From the first signal to the exit.
    stopped_in: Duration,
}

/// Runs `mlless ARGS`, and once a line of its standard error contains `line` (the map tasks
/// are running), sends it `signals` (as `kill -SIG`, back to back).
fn interrupt(args: &[&str], line: &str, signals: &[&str]) -> Interrupted {
    let mut child = mlless()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mlless starts");
    let stderr = child.stderr.take().expect("stderr piped");
    let (seen, wait) = std::sync::mpsc::channel::<()>();
    let line = line.to_owned();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        for text in std::io::BufReader::new(stderr).lines() {
            let Ok(text) = text else { break };
            if text.contains(&line) {
                let _ = seen.send(());
            }
            lines.push(text);
        }
        lines.join("\n")
    });
    if wait.recv_timeout(Duration::from_secs(300)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        let stderr = reader.join().expect("reader");
        panic!("no line of `mlless prepare` said the map tasks were running:\n{stderr}");
    }
    let tasks = function_children(child.id());
    let pid = child.id().to_string();
    // One shell, its built-in `kill`: the signals arrive microseconds apart.
    let script: Vec<String> = signals.iter().map(|s| format!("kill -{s} {pid}")).collect();
    let signalled = Instant::now();
    let status = std::process::Command::new("sh")
        .args(["-c", &script.join("; ")])
        .status()
        .expect("sh runs");
    assert!(status.success());
    let mut code = None;
    let exited = wait_for(Duration::from_secs(60), || {
        code = child.try_wait().expect("waits on mlless");
        code.is_some()
    });
    let stopped_in = signalled.elapsed();
    if !exited {
        let _ = child.kill();
    }
    let _ = child.wait();
    let stderr = reader.join().expect("reader");
    assert!(
        exited,
        "mlless prepare ended within 60 s of the signal:\n{stderr}"
    );
    Interrupted {
        code: code.and_then(|c| c.code()),
        stderr,
        tasks,
        stopped_in,
    }
}

/// Runs `interrupt(args, "scale-map tasks scaling", signals)` until the signals land while the
/// scale-map tasks run (up to 5 tries). On a loaded machine the reader of `mlless`'s standard
/// error may see the line late, and the tasks may be done before the signals come: then the
/// preparation is cancelled in a later phase, which must still leave no data set, and is tried
/// again.
fn interrupt_scaling(args: &[&str], signals: &[&str]) -> Interrupted {
    for attempt in 1..=5 {
        let interrupted = interrupt(args, "scale-map tasks scaling", signals);
        let stderr = &interrupted.stderr;
        if stderr.contains("cancelled during the scale-map tasks") {
            return interrupted;
        }
        assert_eq!(interrupted.code, Some(130), "{stderr}");
        assert!(
            stderr.contains("holds no data set"),
            "a preparation cancelled after its map tasks leaves no data set either: {stderr}"
        );
        eprintln!("try {attempt}: the signals came after the scale-map tasks; trying again");
    }
    panic!("in 5 tries the signals never came while the scale-map tasks ran");
}

/// A cancelled preparation left nothing behind: no map task runs, no manifest, nothing staged,
/// no minibatch; and preparing again gives the data set of a preparation never cancelled.
fn assert_cleaned_and_prepared_again(
    interrupted: &Interrupted,
    args: &[&str],
    out: &Path,
    clean: &Path,
) {
    let stderr = &interrupted.stderr;
    assert_eq!(interrupted.code, Some(130), "{stderr}");
    assert!(
        !interrupted.tasks.is_empty(),
        "the map tasks ran when the signal went"
    );
    for &pid in &interrupted.tasks {
        assert!(!runs_mlless(pid), "map task {pid} still runs");
    }
    // A task killed in the middle of a write may leave the local store's temporary file
    // (`NAME#N`), which no listing shows and no job reads; nothing else may be left.
    let left: Vec<PathBuf> = files_below(out)
        .into_iter()
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains('#'))
        })
        .collect();
    assert!(
        left.is_empty(),
        "a cancelled preparation leaves nothing (no manifest, nothing staged, no minibatch): \
         {left:?}"
    );
    let stderr = fails(&["train", "--data", &s(out), "--model", "lr", "--quiet"]);
    assert!(stderr.contains("manifest.json is missing"), "{stderr}");

    ok(args);
    let manifest = |dir: &Path| {
        let bytes = std::fs::read(dir.join("manifest.json")).expect("a manifest");
        let mut json: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON");
        // Without the time it was written and the preparation's identity (new every time).
        let object = json.as_object_mut().expect("an object");
        object.remove("created_unix_s");
        object.remove("dataset_id");
        json
    };
    assert_eq!(manifest(out), manifest(clean));
    for split in [Split::Train, Split::Validation, Split::Test] {
        assert!(
            batches(out, split) == batches(clean, split),
            "{split:?}: the data set prepared again is the one never cancelled"
        );
    }
    assert!(files_below(&out.join("staging")).is_empty());
}

#[test]
fn a_cancelled_prepare_stops_its_map_tasks_cleans_up_and_prepares_again() {
    let dir = tempdir();
    let spec = SparseLrSpec::new(50_000, 10_000, 20, 7);
    let (input, _) = write_sparse_lr(dir.path(), &spec);
    let input = s(&input);
    let clean = dir.path().join("clean");
    let clean_s = s(&clean);
    let started = Instant::now();
    ok(&normalized_prepare(&input, &clean_s));
    let uninterrupted = started.elapsed();

    // The first Ctrl-C: the map tasks stop after their minibatch.
    let out = dir.path().join("out");
    let out_s = s(&out);
    let args = normalized_prepare(&input, &out_s);
    let cancelled = interrupt_scaling(&args, &["INT"]);
    let stderr = &cancelled.stderr;
    assert!(
        stderr.contains("cancelling: the map tasks stop after their current minibatch"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "cancelled during the scale-map tasks, which stopped after their minibatch; what \
             was written is removed and file://"
        ) && stderr.contains(&format!("{out_s} holds no data set")),
        "{stderr}"
    );
    assert_cleaned_and_prepared_again(&cancelled, &args, &out, &clean);

    // SIGTERM then SIGINT, as a second Ctrl-C: the map tasks are killed at once.
    let killed_out = dir.path().join("killed");
    let killed_s = s(&killed_out);
    let args = normalized_prepare(&input, &killed_s);
    let killed = interrupt_scaling(&args, &["TERM", "INT"]);
    // Unless the tasks had already stopped after their minibatch when the second signal came
    // (on an idle machine they stop within milliseconds of the first): then nothing was left to
    // kill.
    assert!(
        killed
            .stderr
            .contains("cancelled during the scale-map tasks, which were killed")
            || killed.stderr.contains(
                "cancelled during the scale-map tasks, which stopped after their minibatch"
            ),
        "{}",
        killed.stderr
    );
    assert_cleaned_and_prepared_again(&killed, &args, &killed_out, &clean);
    eprintln!(
        "uninterrupted prepare {uninterrupted:?}; stopped {:?} after the SIGINT, {:?} after \
         SIGTERM + SIGINT",
        cancelled.stopped_in, killed.stopped_in
    );
}

#[test]
fn a_run_cancelled_before_its_first_checkpoint_offers_no_resume() {
    // Worker 0 pauses at step 2 (`--fault pause:0@2`), long before the first checkpoint of
    // step 1000; the SIGINT comes then, and the pause ends once the driver has asked the
    // functions to stop: the moment is the step's, whatever the machine's speed.
    let dir = tempdir();
    let spec = SparseLrSpec::new(4_000, 1_000, 20, 31);
    let data = sparse_lr_prepared(dir.path(), &spec, &["--validation-fraction", "0"]);
    let runs = dir.path().join("runs");
    let (d, r) = (s(&data), s(&runs));
    let mut child = mlless()
        .env("RUST_LOG", "mlless_runtime::driver=info")
        .args(["train", "--quiet", "--runs", &r, "--fault", "pause:0@2"])
        .args([
            "--data",
            &d,
            "--model",
            "lr",
            "--workers",
            "2",
            "--max-epochs",
            "12",
        ])
        .args(["--checkpoint-every", "1000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mlless starts");
    let run = wait_for_pause(&runs, 0, 2);
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.expect("a line");
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("asked the functions to stop") {
            break;
        }
    }
    release_pause(&run, 0, 2);
    for line in lines {
        seen.push_str(&line.expect("a line"));
        seen.push('\n');
    }
    let status = child.wait().expect("mlless ends");
    assert_eq!(status.code(), Some(130), "{seen}");
    assert!(seen.contains("before its first checkpoint"), "{seen}");
    assert!(
        !seen.contains("--resume"),
        "a --resume that would fail: {seen}"
    );
    // And indeed there is nothing to resume.
    let err = fails(&["train", "--resume", &s(&run)]);
    assert!(err.contains("no checkpoint"), "{err}");
}
