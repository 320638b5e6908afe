//! Workers are separate processes; the limits of a function are enforced.

mod common;

use common::*;
use mlless_data::SparseLrSpec;

fn small_data(dir: &std::path::Path) -> std::path::PathBuf {
    let (input, _) = write_sparse_lr(dir, &SparseLrSpec::new(4_000, 1_000, 10, 9));
    let data = dir.join("store/lr");
    prepare_libsvm(&input, &data, 100);
    data
}

/// The four workers and the supervisor are five OS processes that run at the same time and share
/// nothing but the store and the channel (here a directory of its own).
#[test]
fn workers_are_separate_processes_that_share_only_store_and_channel() {
    let dir = tempdir();
    let data = small_data(dir.path());
    let channel = dir.path().join("channel");
    let record = train(
        dir.path(),
        "run",
        &[
            "--data",
            &s(&data),
            "--model",
            "lr",
            "--workers",
            "4",
            "--max-epochs",
            "2",
            "--channel",
            &s(&channel),
        ],
    );
    let workers: Vec<_> = record
        .invocations
        .iter()
        .filter(|r| r.name.starts_with("worker-"))
        .collect();
    assert_eq!(workers.len(), 4);
    let mut pids: Vec<u32> = record.invocations.iter().filter_map(|r| r.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 5, "supervisor and 4 workers are 5 processes");
    assert!(!pids.contains(&std::process::id()));
    // They ran at the same time: every worker started before any worker ended.
    let last_start = workers.iter().map(|r| r.started_at_unix_ms).max().unwrap();
    let first_end = workers
        .iter()
        .map(|r| r.started_at_unix_ms + r.duration_ms)
        .min()
        .unwrap();
    assert!(last_start < first_end, "workers overlap in time");
    // Each step, each worker received the updates of all four: the exchange went through the channel.
    for step in &record.steps {
        assert_eq!(step.workers.len(), 4);
        for w in &step.workers {
            assert!(
                w.bytes_received >= 4 * 16 && w.bytes_received > w.bytes_sent,
                "{w:?}"
            );
        }
    }
    assert!(channel.exists(), "the channel directory was used");
}

#[test]
fn a_function_over_its_memory_cap_fails_the_run_naming_it() {
    let dir = tempdir();
    let data = small_data(dir.path());
    let stderr = fails(&[
        "train",
        "--quiet",
        "--data",
        &s(&data),
        "--model",
        "lr",
        "--workers",
        "2",
        "--memory-mb",
        "2",
    ]);
    assert!(stderr.contains("memory limit of 2 MB"), "{stderr}");
    assert!(
        stderr.contains("worker-") || stderr.contains("supervisor"),
        "{stderr}"
    );
}

#[test]
fn a_function_over_its_lifetime_fails_the_run_naming_it() {
    let dir = tempdir();
    let data = small_data(dir.path());
    // A function hands off before its lifetime runs out (see tests/design_space.rs); one step
    // longer than the whole lifetime (a publish delayed by 3 s, with a lifetime of 1 s, which
    // its peers wait for) cannot, and without checkpoints to replace it from, the run fails
    // naming the function that ran over.
    let stderr = fails(&[
        "train",
        "--quiet",
        "--data",
        &s(&data),
        "--model",
        "lr",
        "--workers",
        "2",
        "--max-epochs",
        "2",
        "--timeout-s",
        "1",
        "--checkpoint-every",
        "0",
        "--fault",
        "delay:0@2:3000",
    ]);
    // The waiting supervisor, or worker-1, may run over first.
    assert!(stderr.contains("timed out after 1 s"), "{stderr}");
    assert!(
        stderr.contains("worker-") || stderr.contains("supervisor"),
        "{stderr}"
    );
}

/// A run whose loss explodes stops and says it diverged, naming the learning rate, instead of
/// reporting NaN metrics.
#[test]
fn a_diverging_run_says_so() {
    let dir = tempdir();
    let data = small_data(dir.path());
    let stderr = fails(&[
        "train",
        "--quiet",
        "--data",
        &s(&data),
        "--model",
        "lr",
        "--workers",
        "2",
        "--optimizer",
        "sgd",
        "--lr",
        "1e30",
        "--schedule",
        "constant",
    ]);
    assert!(stderr.contains("diverged"), "{stderr}");
    assert!(stderr.contains("--lr"), "{stderr}");
    assert!(!stderr.contains("NaN metrics"), "{stderr}");
}

/// Divergence is relative to the run's first loss: a PMF run (first squared error near 2) whose
/// loss explodes under a huge --lr with plain SGD is stopped as diverged while its loss is still
/// far below the former absolute 10⁶ (at which a PMF run at 279,127 passed), and the error does
/// not suggest `--resume`, which would only diverge again.
#[test]
fn a_diverging_pmf_run_is_stopped_relative_to_its_first_loss_without_a_resume_hint() {
    let dir = tempdir();
    let spec = mlless_data::RatingsSpec {
        users: 300,
        items: 200,
        rank: 5,
        density: 0.2,
        noise: 0.5,
        seed: 7,
        ..Default::default()
    };
    let (data, _) = ratings_prepared(
        dir.path(),
        &spec,
        &["--validation-fraction", "0", "--batch-size", "500"],
    );
    let stderr = fails(&[
        "train",
        "--quiet",
        "--data",
        &s(&data),
        "--model",
        "pmf",
        "--workers",
        "2",
        "--optimizer",
        "sgd",
        "--lr",
        "300",
        "--schedule",
        "constant",
        "--max-epochs",
        "20",
    ]);
    assert!(stderr.contains("training diverged at step"), "{stderr}");
    assert!(stderr.contains("--lr (it was 300)"), "{stderr}");
    assert!(!stderr.contains("--resume"), "{stderr}");
    // The loss it stopped at: finite, and far below the former absolute threshold.
    let loss: f64 = stderr
        .split("(loss ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|loss| loss.parse().ok())
        .unwrap_or_else(|| panic!("the error gives the loss: {stderr}"));
    assert!(loss.is_finite() && loss < 1e6, "loss {loss}: {stderr}");
    // The run is listed as failed, and its reason does not suggest resuming either.
    let listed =
        String::from_utf8_lossy(&ok(&["runs", &s(&data.join("runs"))]).stdout).into_owned();
    assert!(
        listed.contains("failed") && listed.contains("diverged"),
        "{listed}"
    );
    assert!(!listed.contains("--resume"), "{listed}");
}
