//! `mlless tune` end to end on a small synthetic sparse-LR set whose best learning rate is
//! known: a grid finds it, successive halving stops only trials that the full grid shows to be
//! worse and finds the same best, the budget is never exceeded, and a failing trial is recorded
//! while the search goes on.

mod common;

use std::path::Path;

use common::s;
use mlless_tune::{TrialStatus, TuneRecord};

/// Sparse LR, 100,000 rows × 2,000 features, 10% test and 10% validation, batches of 50 (so
/// that an epoch takes several of the search's polls).
fn data(dir: &Path) -> String {
    let spec = mlless_data::SparseLrSpec::new(100_000, 2_000, 20, 3);
    let (input, _) = common::write_sparse_lr(dir, &spec);
    let data = dir.join("store/lr");
    common::prepare(
        "libsvm",
        &input,
        &data,
        &["--validation-fraction", "0.1", "--batch-size", "50"],
    );
    s(&data)
}

/// `mlless tune` on `data` with 2 workers per trial, 3 epochs, an evaluation every epoch, seed
/// 4 (whose grid order puts the best rate first) and `extra`; returns the tune record it
/// prints.
fn tune(dir: &Path, data: &str, name: &str, extra: &[&str]) -> TuneRecord {
    let out = dir.join(name);
    let out = s(&out);
    let mut args = vec![
        "tune",
        "--data",
        data,
        "--model",
        "lr",
        "--workers-per-trial",
        "2",
        "--max-epochs",
        "3",
        "--eval-every",
        "1epochs",
        "--early-stop",
        "0",
        "--seed",
        "4",
        "--quiet",
        "--json",
        "--out",
        &out,
    ];
    args.extend_from_slice(extra);
    let output = common::ok(&args);
    let record: TuneRecord = serde_json::from_slice(&output.stdout).expect("a tune record");
    let page = std::fs::read_to_string(dir.join(name).join("report.html")).expect("the page");
    assert!(page.contains("Leaderboard"));
    for svg in ["curves.svg", "cost.svg"] {
        let text = std::fs::read_to_string(dir.join(name).join(svg)).expect("a plot");
        roxmltree::Document::parse(&text).expect("well-formed SVG");
    }
    record
}

/// The learning rates of the grid (momentum SGD, a global batch of 100): in 3 epochs 0.5
/// learns, 0.005 and 0.0005 barely move from the initial bias.
const GRID: &str = "lr=0.0005,0.005,0.5";

fn lr_of(record: &TuneRecord, trial: usize) -> &str {
    record.trials[trial].params.get("lr").expect("lr")
}

#[test]
fn a_search_finds_the_best_rate_stops_the_worse_and_keeps_to_its_budget() {
    let dir = common::tempdir();
    let data = data(dir.path());

    // The full grid: every trial trains its 3 epochs.
    let full = tune(
        dir.path(),
        &data,
        "full",
        &[
            "--param",
            GRID,
            "--scheduler",
            "none",
            "--budget-usd",
            "10",
            "--concurrency",
            "2",
        ],
    );
    assert_eq!(full.stop_reason, "every trial ran");
    assert_eq!(full.metric, "logloss");
    assert!(
        full.trials
            .iter()
            .all(|t| t.status == TrialStatus::Finished && (t.epochs - 3.0).abs() < 1e-9)
    );
    let best = full.best_trial().expect("a best trial");
    assert_eq!(
        lr_of(&full, best.trial),
        "0.5",
        "the grid finds the known best rate"
    );
    let best_full = best.best_metric.expect("a metric");
    // The others are clearly worse: they have barely left the initial bias.
    for t in full.trials.iter().filter(|t| t.trial != best.trial) {
        assert!(t.best_metric.unwrap() > best_full * 1.05, "{t:?}");
    }
    let run = best.run_url.as_deref().expect("the best run");
    assert!(
        Path::new(run).join("model.bin").exists(),
        "the best model is kept"
    );

    // Successive halving over the same grid: rungs at 1 epoch (η = 3) below the 3 epochs;
    // one trial at a time, so that they reach the rung in the grid's order.
    let asha = tune(
        dir.path(),
        &data,
        "asha",
        &[
            "--param",
            GRID,
            "--eta",
            "3",
            "--min-rung",
            "1",
            "--budget-usd",
            "10",
            "--concurrency",
            "1",
        ],
    );
    assert_eq!(
        asha.scheduler.as_ref().map(|s| s.rungs.clone()),
        Some(vec![1.0])
    );
    let best = asha.best_trial().expect("a best trial");
    assert_eq!(lr_of(&asha, best.trial), "0.5");
    let best_asha = best.best_metric.unwrap();
    assert!(
        (best_asha - best_full).abs() <= 1e-6 * best_full,
        "ASHA's best {best_asha} and the full grid's {best_full}"
    );
    let stopped: Vec<_> = asha
        .trials
        .iter()
        .filter(|t| t.status == TrialStatus::Stopped)
        .collect();
    assert!(!stopped.is_empty(), "ASHA stops a trial: {asha:#?}");
    for t in &stopped {
        // Stopped at its rung after 1 epoch, by the search, with a record that says so...
        assert!(t.epochs < 3.0, "{t:?}");
        let reason = t.stop_reason.as_deref().unwrap();
        assert!(
            reason.starts_with("stopped by the search at rung 1 (1 epoch)"),
            "{reason}"
        );
        let run =
            common::read_record(&Path::new(t.run_url.as_deref().unwrap()).join("record.json"));
        assert_eq!(run.stop_reason, reason);
        // ...and the full grid shows it worse than the best.
        let same = full.trials.iter().find(|f| f.params == t.params).unwrap();
        assert!(same.best_metric.unwrap() > best_full, "{same:?}");
    }
    assert!(
        asha.spent_usd < full.spent_usd,
        "{} vs {}",
        asha.spent_usd,
        full.spent_usd
    );

    // A budget of 40% of the full grid's: the bills never add up to more.
    let budget = 0.4 * full.spent_usd;
    let budget_arg = format!("{budget}");
    let tight = tune(
        dir.path(),
        &data,
        "tight",
        &[
            "--param",
            GRID,
            "--scheduler",
            "none",
            "--budget-usd",
            &budget_arg,
            "--concurrency",
            "2",
        ],
    );
    let bills: f64 = tight
        .trials
        .iter()
        .filter_map(|t| t.run_url.as_deref())
        .map(|run| {
            let record = common::read_record(&Path::new(run).join("record.json"));
            record.bill.expect("a bill").total_usd
        })
        .sum();
    assert!(
        bills <= budget,
        "the bills {bills} exceed the budget {budget}"
    );
    assert!(tight.spent_usd <= budget);
    assert!(
        tight
            .trials
            .iter()
            .any(|t| matches!(t.status, TrialStatus::NotStarted | TrialStatus::Stopped)),
        "the budget binds: {tight:#?}"
    );

    // A trial that fails (a learning rate that diverges) is recorded; the others go on.
    let failing = tune(
        dir.path(),
        &data,
        "failing",
        &[
            "--param",
            "lr=1e12,0.5",
            "--scheduler",
            "none",
            "--budget-usd",
            "10",
            "--concurrency",
            "2",
        ],
    );
    assert_eq!(failing.stop_reason, "every trial ran");
    let bad = failing
        .trials
        .iter()
        .find(|t| t.params.get("lr") == Some("1e12"))
        .unwrap();
    assert_eq!(bad.status, TrialStatus::Failed, "{bad:?}");
    assert!(
        bad.error.as_deref().unwrap().contains("diverged"),
        "{bad:?}"
    );
    let good = failing.best_trial().expect("the other trial");
    assert_eq!(good.params.get("lr"), Some("0.5"));
    assert_eq!(good.status, TrialStatus::Finished);
}

#[test]
fn a_data_set_without_a_validation_set_is_refused() {
    let dir = common::tempdir();
    let spec = mlless_data::SparseLrSpec::new(2_000, 200, 10, 3);
    let data = s(&common::sparse_lr_prepared(
        dir.path(),
        &spec,
        &["--validation-fraction", "0"],
    ));
    let err = common::fails(&[
        "tune",
        "--data",
        &data,
        "--model",
        "lr",
        "--param",
        "lr=0.1,1",
        "--budget-usd",
        "1",
    ]);
    assert!(err.contains("no validation set"), "{err}");
    let err = common::fails(&[
        "tune",
        "--data",
        &data,
        "--model",
        "lr",
        "--param",
        "optimizer=sgd,fast",
        "--budget-usd",
        "1",
    ]);
    assert!(err.contains("--param optimizer"), "{err}");
    // A learning rate that is not a positive finite number is refused before any function
    // starts: by train, and by a search for the trial that has it.
    for lr in ["--lr=0", "--lr=-1", "--lr=NaN", "--lr=inf"] {
        let err = common::fails(&["train", "--data", &data, "--model", "lr", lr]);
        assert!(
            err.contains("--lr must be a positive finite number"),
            "{lr}: {err}"
        );
    }
    let err = common::fails(&[
        "tune",
        "--data",
        &data,
        "--model",
        "lr",
        "--param",
        "lr=NaN,0.1",
        "--budget-usd",
        "1",
    ]);
    assert!(
        err.contains("trial lr=NaN: --lr must be a positive finite number"),
        "{err}"
    );
}

/// A search checks every trial's options as `train` does, before any function starts: a trial's
/// --l2, the limits, the fleet against what mlless and the local invoker run; and the trials
/// that run at once against what the local invoker runs.
#[test]
fn a_search_refuses_the_options_train_refuses() {
    let dir = common::tempdir();
    // A small set with a validation set (a search needs one).
    let spec = mlless_data::SparseLrSpec::new(2_000, 200, 10, 3);
    let data = s(&common::sparse_lr_prepared(
        dir.path(),
        &spec,
        &["--validation-fraction", "0.1"],
    ));
    let local_max = mlless_faas::local_max_concurrent().to_string();
    // Two trials of half as many workers (and a supervisor each) are one function too many.
    let half = (mlless_faas::local_max_concurrent() / 2).to_string();
    let cases: [(&[&str], String); 5] = [
        (
            &["--param", "l2=-1,0.1"],
            "trial l2=-1: --l2 must be a finite number ≥ 0, not -1".into(),
        ),
        (
            &["--param", "lr=0.1,1", "--memory-mb", "0"],
            "--memory-mb must be at least 1 MB".into(),
        ),
        (
            &["--param", "lr=0.1,1", "--workers-per-trial", "100000"],
            "--workers 100000 is more than mlless runs".into(),
        ),
        (
            &["--param", "lr=0.1,1", "--workers-per-trial", &local_max],
            format!("--workers {local_max} is more than the local invoker can run at once"),
        ),
        (
            &[
                "--param",
                "lr=0.1,1",
                "--workers-per-trial",
                &half,
                "--concurrency",
                "2",
            ],
            format!(
                "--concurrency 2: 2 trials of {half} workers and a supervisor are {} functions at \
                 once, more than the local invoker can run ({local_max})",
                2 * (mlless_faas::local_max_concurrent() / 2 + 1)
            ),
        ),
    ];
    for (extra, expected) in &cases {
        if expected.contains("local invoker")
            && mlless_faas::local_max_concurrent() > mlless_job::config::MAX_WORKERS
        {
            continue;
        }
        let mut args = vec![
            "tune",
            "--data",
            &data,
            "--model",
            "lr",
            "--budget-usd",
            "1",
        ];
        args.extend(*extra);
        let err = common::fails(&args);
        assert!(err.contains(expected.as_str()), "{extra:?}: {err}");
    }
}

/// Issue 40, defect 13: trials shorter than the search's poll (a small set, 3 epochs in a
/// fraction of a second) run two at once as `--concurrency 2` asks, and each records its rung
/// with its value at the rung's epoch, from its own evaluations, not its final best.
#[test]
fn short_trials_run_concurrently_and_record_their_rungs_at_the_rungs_epoch() {
    let dir = common::tempdir();
    let spec = mlless_data::SparseLrSpec::new(20_000, 2_000, 20, 3);
    let (input, _) = common::write_sparse_lr(dir.path(), &spec);
    let data = dir.path().join("store/lr");
    common::prepare(
        "libsvm",
        &input,
        &data,
        &["--validation-fraction", "0.1", "--batch-size", "100"],
    );
    let record = tune(
        dir.path(),
        &s(&data),
        "short",
        &[
            "--param",
            "lr=0.01,0.1,0.3,1",
            "--eta",
            "3",
            "--min-rung",
            "1",
            "--budget-usd",
            "10",
            "--concurrency",
            "2",
        ],
    );
    assert_eq!(record.stop_reason, "every trial ran", "{record:#?}");
    // Two trials ran at once: one started before another's run had ended (a run's wall time
    // is within its interval on the search's clock, from its start to its end).
    let overlap = record.trials.iter().any(|a| {
        record.trials.iter().any(|b| {
            a.trial != b.trial && a.started_s <= b.started_s && b.started_s < a.started_s + a.wall_s
        })
    });
    assert!(overlap, "the trials ran one after another: {record:#?}");
    for t in &record.trials {
        assert!(t.epochs >= 1.0, "{t:?}");
        let rung = t.rungs.first().unwrap_or_else(|| panic!("no rung: {t:?}"));
        let points: Vec<(f64, f64)> = t.curve.iter().map(|p| (p.epoch, p.value)).collect();
        let at_rung = mlless_tune::value_at_rung(&points, 1.0, record.direction);
        assert_eq!(rung.value, at_rung, "{t:?}");
        // A trial that ran its 3 epochs: the value at 1 epoch, not its best of the 3 (the
        // rates here all still improve).
        if t.status == TrialStatus::Finished {
            assert_ne!(rung.value, t.best_metric, "{t:?}");
        }
    }
}
