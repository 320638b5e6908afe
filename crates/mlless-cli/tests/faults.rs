//! Faults, injected with the `--fault` test aid: a killed worker or supervisor is replaced from
//! its checkpoint, a silent worker is replaced after the deadline, and a run that failed for
//! good continues with `--resume` — each time with the model of a run without the fault, bit
//! for bit (BSP and ISP are deterministic, and a replacement replays exactly what it had done).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use mlless_data::SparseLrSpec;
use mlless_runtime::RunRecord;

/// A sparse-LR set small enough for many runs: 40k rows × 10k features, batches of 500.
fn lr_data(dir: &Path) -> PathBuf {
    let spec = SparseLrSpec::new(40_000, 10_000, 20, 29);
    let (input, _) = write_sparse_lr(dir, &spec);
    let data = dir.join("store/lr");
    prepare_libsvm(&input, &data, 500);
    data
}

/// Trains LR with 4 workers for 3 epochs (54 steps), checkpointing every 10 steps.
fn args<'a>(data: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--data",
        data,
        "--model",
        "lr",
        "--workers",
        "4",
        "--max-epochs",
        "3",
        "--checkpoint-every",
        "10",
    ];
    args.extend_from_slice(extra);
    args
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
    let isp = record.spec.sync.name() == "isp";
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
    let replaced: Vec<(String, String)> = invocations(&silent)
        .into_iter()
        .filter(|(n, _)| n.contains('~'))
        .collect();
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
    let record_path = dir.path().join("resumed.json");
    ok(&[
        "train",
        "--resume",
        &s(&run),
        "--quiet",
        "--record",
        &s(&record_path),
    ]);
    let resumed = read_record(&record_path);
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
    // A finished run is not resumed.
    let err = fails(&["train", "--resume", &s(&run)]);
    assert!(err.contains("nothing to resume"), "{err}");
}
