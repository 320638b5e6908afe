//! Cancelling a run: the first SIGINT (Ctrl-C) asks every function to stop after its step, the
//! run ends with a record that says `cancelled`, the hint to resume and exit status 130, with no
//! function left running; `--resume` then finishes it with the model of a run never cancelled
//! (BSP is deterministic, and the resumed roles start from the checkpoints they all share).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use mlless_data::SparseLrSpec;

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
    train_args.extend(args(&d, &["--runs", &r, "--record", &rec, "--quiet"]));
    let mut child = mlless()
        .args(&train_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mlless starts");
    // Cancel once the supervisor has checkpointed step 20: well into the run, far from its end.
    wait_for_checkpoint(&runs, 20);
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

    let run = std::fs::read_dir(&runs)
        .expect("runs")
        .next()
        .expect("one run")
        .expect("entry")
        .path();
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
    assert!(
        (21..216).contains(&steps),
        "stopped after the step it was in: {steps} steps"
    );
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
