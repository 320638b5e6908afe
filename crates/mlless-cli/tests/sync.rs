//! Synchronisation models (BSP, ISP, SSP, ASP) and compressed updates, end to end: what each
//! one promises, checked from the run record and the trained model.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use mlless_data::SparseLrSpec;
use mlless_job::RunRecord;

/// A sparse-LR set small enough for many runs: 50k rows × 20k features, batches of 500.
fn lr_data(dir: &Path) -> PathBuf {
    let spec = SparseLrSpec::new(50_000, 20_000, 30, 17);
    let (input, _) = write_sparse_lr(dir, &spec);
    let data = dir.join("store/lr");
    prepare_libsvm(&input, &data, 500);
    data
}

/// Trains LR with 4 workers for 3 epochs with `extra` arguments.
fn run(dir: &Path, data: &Path, name: &str, extra: &[&str]) -> RunRecord {
    let data = s(data);
    let mut args = vec![
        "--data",
        &data,
        "--model",
        "lr",
        "--workers",
        "4",
        "--max-epochs",
        "3",
    ];
    args.extend_from_slice(extra);
    train(dir, name, &args)
}

fn total(record: &RunRecord, f: impl Fn(&mlless_job::record::WorkerStep) -> u64) -> u64 {
    record.steps.iter().flat_map(|s| &s.workers).map(f).sum()
}

/// ISP with V = 0 sends every update as it is: the model is BSP's, bit for bit.
#[test]
fn isp_with_zero_significance_is_bsp() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let bsp = run(dir.path(), &data, "bsp", &["--sync", "bsp"]);
    let isp = run(
        dir.path(),
        &data,
        "isp0",
        &["--sync", "isp", "--significance", "0"],
    );
    assert_eq!(bsp.steps.len(), isp.steps.len());
    assert!(stored_params(&bsp) == stored_params(&isp), "ISP(0) ≠ BSP");
    assert_eq!(bsp.replica_spread, 0.0);
    assert_eq!(isp.replica_spread, 0.0);
    // Nothing is held back (BSP's messages may also carry exact zeros, which ISP skips).
    assert_eq!(total(&isp, |w| w.entries_held), 0);
    assert!(total(&isp, |w| w.entries_sent) <= total(&bsp, |w| w.entries_sent));
}

/// ISP with V > 0 holds updates back (fewer entries sent), yet every replica ends with every
/// worker's every update — the replicas agree to float rounding, which they would not if a held
/// update were lost — and the model reaches BSP's test log loss. Top-k and 1-bit with error
/// feedback, alone and composed with ISP, likewise.
#[test]
fn filtered_and_compressed_updates_lose_nothing_and_reach_the_bsp_target() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let bsp = run(dir.path(), &data, "bsp", &[]);
    let target = metric(&bsp, "test_logloss");
    let bsp_bytes = total(&bsp, |w| w.bytes_sent);
    let bsp_entries = total(&bsp, |w| w.entries_sent);
    let mut results = std::collections::HashMap::new();
    for (name, args, max_loss_ratio) in [
        // MLLess's rule, measured against the parameter itself.
        (
            "isp",
            &[
                "--sync",
                "isp",
                "--significance",
                "0.7",
                "--significance-scale",
                "parameter",
            ][..],
            1.01,
        ),
        // The defaults: V = 1 against the mean weight.
        ("isp-default", &["--sync", "isp"][..], 1.01),
        ("topk", &["--compress", "topk:0.1"][..], 1.01),
        ("onebit", &["--compress", "onebit"][..], 1.01),
        (
            "isp-onebit",
            &[
                "--sync",
                "isp",
                "--significance",
                "0.7",
                "--significance-scale",
                "parameter",
                "--compress",
                "onebit",
            ][..],
            1.01,
        ),
        // A large V holds most updates back for long: it still converges, if more slowly.
        (
            "isp-large",
            &[
                "--sync",
                "isp",
                "--significance",
                "5",
                "--significance-scale",
                "parameter",
            ][..],
            1.15,
        ),
        // Measured against the mean weight, the rare features' small updates are held back too.
        (
            "isp-mean",
            &[
                "--sync",
                "isp",
                "--significance",
                "2",
                "--significance-scale",
                "mean",
            ][..],
            1.05,
        ),
    ] {
        let record = run(dir.path(), &data, name, args);
        let loss = metric(&record, "test_logloss");
        assert!(
            loss <= max_loss_ratio * target,
            "{name}: test log loss {loss} vs BSP's {target}"
        );
        assert!(
            record.replica_spread < 1e-4,
            "{name}: replicas differ by {} at the end: an update was lost",
            record.replica_spread
        );
        let held = record
            .steps
            .iter()
            .flat_map(|s| &s.workers)
            .map(|w| w.entries_held)
            .max()
            .unwrap_or(0);
        assert!(held > 0, "{name}: nothing was ever held back");
        let last = record.steps.last().expect("steps");
        assert!(
            last.workers.iter().all(|w| w.entries_held == 0),
            "{name}: updates still held after the flush"
        );
        let bytes = total(&record, |w| w.bytes_sent);
        results.insert(name, (bytes, loss));
        assert!(
            bytes < bsp_bytes,
            "{name}: sent {bytes} bytes, BSP {bsp_bytes}"
        );
        if !name.contains("onebit") {
            assert!(total(&record, |w| w.entries_sent) < bsp_entries, "{name}");
        }
    }
    // ISP's defaults send at least twice fewer bytes than BSP (to BSP's test log loss, above):
    // 2.35x measured on this long-tailed set, where V = 1 is too small a threshold for 5x (on
    // the a9a- and web-shaped sets of the README it sends 5.9x and 6.9x).
    let (default_bytes, _) = results["isp-default"];
    assert!(
        2 * default_bytes <= bsp_bytes,
        "ISP's defaults sent {default_bytes} bytes, BSP {bsp_bytes}"
    );
    // Against the mean weight, V = 2 sends fewer bytes than V = 5 against each weight, and
    // reaches a lower test log loss.
    let (mean_bytes, mean_loss) = results["isp-mean"];
    let (large_bytes, large_loss) = results["isp-large"];
    assert!(
        mean_bytes < large_bytes && mean_loss < large_loss,
        "mean scale: {mean_bytes} bytes, log loss {mean_loss}; \
         parameter scale V = 5: {large_bytes} bytes, log loss {large_loss}"
    );
}

/// Under SSP no worker starts step t before every worker has published step t − 1 − S, checked
/// from the timestamps of the run record; and the model reaches BSP's target.
#[test]
fn ssp_never_runs_more_than_the_slack_ahead() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let bsp = run(dir.path(), &data, "bsp", &[]);
    let slack = 1u64;
    let record = run(
        dir.path(),
        &data,
        "ssp",
        &["--sync", "ssp", "--slack", &slack.to_string()],
    );
    let mut published = std::collections::HashMap::new();
    for step in &record.steps {
        for w in &step.workers {
            published.insert((w.worker, step.step), w.published_unix_ms);
        }
    }
    let mut checked = 0;
    for step in record.steps.iter().filter(|s| s.step > slack) {
        let required = step.step - 1 - slack;
        for w in &step.workers {
            for peer in 0..record.spec.training.workers {
                let done = published[&(peer, required)];
                assert!(
                    w.started_unix_ms >= done,
                    "worker {} started step {} at {} before worker {peer} published step \
                     {required} at {done}",
                    w.worker,
                    step.step,
                    w.started_unix_ms
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} checks");
    assert!(record.replica_spread < 1e-4, "{}", record.replica_spread);
    let (loss, target) = (
        metric(&record, "test_logloss"),
        metric(&bsp, "test_logloss"),
    );
    assert!(loss <= 1.01 * target, "SSP {loss} vs BSP {target}");
}

/// Under ASP every published update is applied exactly once by every worker: each worker's
/// count of applied updates equals the number of updates published by all, and the replicas
/// agree at the end (a lost or doubled delta would set one apart).
#[test]
fn asp_applies_every_update_exactly_once() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let record = run(dir.path(), &data, "asp", &["--sync", "asp"]);
    let published = total(&record, |w| u64::from(w.messages_sent));
    for worker in 0..record.spec.training.workers {
        let applied: u64 = record
            .steps
            .iter()
            .flat_map(|s| &s.workers)
            .filter(|w| w.worker == worker)
            .map(|w| u64::from(w.updates_applied))
            .sum();
        assert_eq!(
            applied, published,
            "worker {worker} applied {applied} updates of {published} published"
        );
    }
    assert!(record.replica_spread < 1e-4, "{}", record.replica_spread);
    assert!(metric(&record, "test_auc") > 0.75);
}

/// The protocols without a barrier and the filter work through every channel backend there is
/// a server for (set by `scripts/test.sh`); the object-store channel is covered above.
#[test]
fn protocols_work_on_redis_and_memcached() {
    let channels = server_channels();
    if channels.is_empty() {
        eprintln!("no Redis or Memcached server: run through scripts/test.sh");
        return;
    }
    let dir = tempdir();
    let data = lr_data(dir.path());
    let bsp = run(dir.path(), &data, "bsp", &[]);
    let target = metric(&bsp, "test_logloss");
    for channel in &channels {
        for (name, args) in [
            ("asp", &["--sync", "asp"][..]),
            ("ssp", &["--sync", "ssp", "--slack", "2"][..]),
            ("isp-topk", &["--sync", "isp", "--compress", "topk:0.1"][..]),
        ] {
            let mut all = vec!["--channel", channel.as_str()];
            all.extend_from_slice(args);
            let record = run(dir.path(), &data, name, &all);
            let loss = metric(&record, "test_logloss");
            assert!(
                loss <= 1.01 * target,
                "{name} on {channel}: {loss} vs BSP {target}"
            );
            assert!(record.replica_spread < 1e-4, "{name} on {channel}");
        }
    }
}
