//! LambdaML's design space, end to end: the algorithms (GA-SGD, MA-SGD, ADMM), the
//! communication patterns (broadcast, all-reduce, scatter-reduce), and the hand-off at the
//! function lifetime limit.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use mlless_data::SparseLrSpec;
use mlless_job::RunRecord;

/// A sparse-LR set small enough for many runs: 40k rows × 10k features, batches of 500.
fn lr_data(dir: &Path) -> PathBuf {
    let spec = SparseLrSpec::new(40_000, 10_000, 20, 23);
    let (input, _) = write_sparse_lr(dir, &spec);
    let data = dir.join("store/lr");
    prepare_libsvm(&input, &data, 500);
    data
}

/// Trains LR with 4 workers with `extra` arguments.
fn run(dir: &Path, data: &Path, name: &str, extra: &[&str]) -> RunRecord {
    let data = s(data);
    let mut args = vec!["--data", &data, "--model", "lr", "--workers", "4"];
    args.extend_from_slice(extra);
    train(dir, name, &args)
}

/// Without a filter the three patterns average the same vectors in the same order: the same
/// model, bit for bit; all-reduce and scatter-reduce send more messages than broadcast's one
/// per worker and step, yet each worker receives fewer bytes than under broadcast.
#[test]
fn the_three_patterns_give_the_same_model() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let broadcast = run(dir.path(), &data, "broadcast", &["--max-epochs", "2"]);
    let params = stored_params(&broadcast);
    for pattern in ["allreduce", "scatter-reduce"] {
        let record = run(
            dir.path(),
            &data,
            pattern,
            &["--max-epochs", "2", "--pattern", pattern],
        );
        assert_eq!(record.steps.len(), broadcast.steps.len(), "{pattern}");
        assert!(stored_params(&record) == params, "{pattern} ≠ broadcast");
        assert_eq!(record.replica_spread, 0.0, "{pattern}");
        let messages = |r: &RunRecord| -> u64 {
            r.steps
                .iter()
                .flat_map(|s| &s.workers)
                .map(|w| u64::from(w.messages_sent))
                .sum()
        };
        assert!(messages(&record) > messages(&broadcast), "{pattern}");
    }
}

/// ISP with all-reduce and scatter-reduce: the mean of what was sent plus the part each worker
/// held back of its own update; nothing is lost (the replicas agree after the flush) and the
/// model reaches broadcast ISP's test log loss.
#[test]
fn isp_composes_with_every_pattern() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let isp = ["--max-epochs", "2", "--sync", "isp"];
    let broadcast = run(dir.path(), &data, "isp-broadcast", &isp);
    let target = metric(&broadcast, "test_logloss");
    for pattern in ["allreduce", "scatter-reduce"] {
        let mut args = isp.to_vec();
        args.extend(["--pattern", pattern]);
        let record = run(dir.path(), &data, pattern, &args);
        let loss = metric(&record, "test_logloss");
        assert!(loss <= target * 1.01, "{pattern}: {loss} vs {target}");
        assert!(
            record.replica_spread < 1e-4,
            "{pattern}: spread {}",
            record.replica_spread
        );
        let held: u64 = record
            .steps
            .iter()
            .flat_map(|s| &s.workers)
            .map(|w| w.entries_held)
            .sum();
        assert!(held > 0, "{pattern}: ISP held nothing back");
    }
}

/// ADMM reaches GA-SGD's target (its test log loss after 3 epochs) in a tenth of the
/// communication rounds; MA-SGD, averaging once per epoch, reaches it too.
#[test]
fn admm_needs_fewer_rounds_than_ga_and_ma_converges() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let ga = run(dir.path(), &data, "ga", &["--max-epochs", "3"]);
    let target = metric(&ga, "test_logloss");
    let admm = run(
        dir.path(),
        &data,
        "admm",
        &["--max-epochs", "5", "--algorithm", "admm"],
    );
    let ma = run(
        dir.path(),
        &data,
        "ma",
        &["--max-epochs", "3", "--algorithm", "ma"],
    );
    eprintln!(
        "rounds: GA {} (log loss {target}), ADMM {} ({}), MA {} ({})",
        ga.rounds,
        admm.rounds,
        metric(&admm, "test_logloss"),
        ma.rounds,
        metric(&ma, "test_logloss")
    );
    assert_eq!(ga.rounds, ga.steps.len() as u64);
    assert!(admm.rounds * 10 < ga.rounds, "ADMM {} rounds", admm.rounds);
    assert!(metric(&admm, "test_logloss") <= target * 1.005);
    assert!(metric(&ma, "test_logloss") <= target * 1.005);
    assert_eq!(admm.replica_spread, 0.0);
    assert_eq!(ma.replica_spread, 0.0);
}

/// Combinations that make no sense are refused with the reason.
#[test]
fn senseless_combinations_are_refused() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let data = s(&data);
    let base = ["train", "--data", &data, "--model", "lr", "--workers", "2"];
    for (extra, says) in [
        (
            &["--algorithm", "ma", "--sync", "isp"][..],
            "needs --sync bsp",
        ),
        (
            &["--algorithm", "admm", "--compress", "onebit"][..],
            "--compress",
        ),
        (
            &["--pattern", "allreduce", "--sync", "asp"][..],
            "needs --sync bsp or isp",
        ),
        (
            &["--algorithm", "admm:0"][..],
            "RHO must be a positive number",
        ),
        (&["--pattern", "server"][..], "needs a ps:// channel"),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let err = fails(&args);
        assert!(err.contains(says), "{extra:?}: {err}");
    }
}

/// A job whose training takes well over 30 s, with a lifetime of 3 s per function: every
/// worker and the supervisor hand off to new invocations many times, and the model is the one
/// a run without the limit trains, bit for bit (BSP is deterministic, so the tolerance is 0).
#[test]
fn a_job_outlives_the_function_lifetime_by_handing_off() {
    let dir = tempdir();
    let (data, _) = ratings_data(dir.path());
    let data = s(&data);
    let args = |timeout: &'static str| {
        vec![
            "--data",
            &data,
            "--model",
            "pmf",
            "--workers",
            "2",
            "--max-epochs",
            "140",
            // One minibatch a worker a step, the steps this run was sized by (the default
            // global batch of 4 would halve them).
            "--global-batch",
            "2000",
            "--timeout-s",
            timeout,
        ]
    };
    let limited = train(dir.path(), "limited", &args("3"));
    let free = train(dir.path(), "free", &args("900"));
    assert!(
        limited.wall_s > 30.0,
        "the run took {} s; make it longer",
        limited.wall_s
    );
    let handoffs: Vec<&str> = limited
        .invocations
        .iter()
        .map(|r| r.name.as_str())
        .filter(|n| n.contains('#'))
        .collect();
    for role in ["supervisor#", "worker-0#", "worker-1#"] {
        let n = handoffs.iter().filter(|h| h.starts_with(role)).count();
        assert!(n >= 8, "{role}: {n} re-invocations in {handoffs:?}");
    }
    assert!(limited.invocations.iter().all(|r| r.duration_ms < 3_000));
    assert!(free.invocations.iter().all(|r| !r.name.contains('#')));
    assert_eq!(limited.steps.len(), free.steps.len());
    let steps: Vec<u64> = limited.steps.iter().map(|s| s.step).collect();
    assert!(steps.iter().enumerate().all(|(i, &s)| s == i as u64));
    assert!(stored_params(&limited) == stored_params(&free));
    assert_eq!(
        metric(&limited, "test_rmse").to_bits(),
        metric(&free, "test_rmse").to_bits()
    );
}

/// The patterns and the round-based algorithms work through every channel backend there is a
/// server for (set by `scripts/test.sh`): the same model as on the object-store channel.
#[test]
fn patterns_and_algorithms_work_on_redis_and_memcached() {
    let channels = server_channels();
    if channels.is_empty() {
        eprintln!("no Redis or Memcached server: run through scripts/test.sh");
        return;
    }
    let dir = tempdir();
    let data = lr_data(dir.path());
    for (name, args) in [
        ("scatter-reduce", &["--pattern", "scatter-reduce"][..]),
        (
            "admm-allreduce",
            &["--algorithm", "admm", "--pattern", "allreduce"][..],
        ),
    ] {
        let mut base = vec!["--max-epochs", "1"];
        base.extend_from_slice(args);
        let reference = stored_params(&run(dir.path(), &data, name, &base));
        for channel in &channels {
            let mut all = base.clone();
            all.extend(["--channel", channel.as_str()]);
            let record = run(dir.path(), &data, name, &all);
            assert!(
                stored_params(&record) == reference,
                "{name} on {channel} differs from the object-store channel"
            );
        }
    }
}
