//! The validation curve, early stopping on it, `--target-metric`, and the best model kept: on
//! synthetic data with known truth, through every synchronisation model, algorithm, pattern
//! and scale-in.

mod common;

use std::path::{Path, PathBuf};

use common::{batches, block_on, fails, ok, s, stored_params, tempdir, train};
use mlless_core::{Metrics, ModelSpec};
use mlless_job::RunRecord;
use mlless_job::record::ValidationRecord;
use mlless_runtime::dataset::Split;
use mlless_runtime::messages::{Message, StoredModel};

/// Sparse LR, 40,000 rows × 5,000 features, prepared with 10% test and 10% validation in
/// batches of 500.
fn lr_data(dir: &Path) -> PathBuf {
    let spec = mlless_data::SparseLrSpec::new(40_000, 5_000, 20, 3);
    common::sparse_lr_prepared(dir, &spec, &["--validation-fraction", "0.1"])
}

/// Ratings small enough to overfit: 300 users × 200 items, rank 3, 15% rated, σ = 0.5.
fn overfitting_ratings(dir: &Path) -> PathBuf {
    let spec = mlless_data::RatingsSpec {
        users: 300,
        items: 200,
        rank: 3,
        density: 0.15,
        noise: 0.5,
        seed: 4,
        ..Default::default()
    };
    common::ratings_prepared(dir, &spec, &["--batch-size", "200"]).0
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn validation(record: &RunRecord) -> &ValidationRecord {
    record
        .validation
        .as_ref()
        .expect("a data set with a validation set gives a validation record")
}

fn value(metrics: &Metrics, name: &str) -> f64 {
    *metrics
        .get(name)
        .unwrap_or_else(|| panic!("{name} in {metrics:?}"))
}

/// The metrics of `params` on the data set's validation set, as the supervisor computes them.
fn validation_metrics(data: &Path, spec: &ModelSpec, params: &[f32]) -> Metrics {
    let model = spec.model();
    let mut evaluation = spec.evaluation();
    for batch in batches(data, Split::Validation) {
        model
            .evaluate(params, &batch, &mut evaluation)
            .expect("evaluates");
    }
    evaluation.finish_as("")
}

#[test]
fn the_curve_is_in_the_record_and_falls_with_the_cost_rising() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let record = train(
        dir.path(),
        "lr",
        &[
            "--data",
            &s(&data),
            "--model",
            "lr",
            "--max-epochs",
            "6",
            "--early-stop",
            "0",
            "--eval-every",
            "1epoch",
        ],
    );
    let v = validation(&record);
    assert_eq!(v.metric, "logloss");
    // One evaluation per epoch, at the step that completes it (4 workers read 4 of the 65
    // minibatches a step), but the last, whose model is the final one.
    assert_eq!(v.points.len(), 6, "{:?}", v.points);
    assert!(v.points.last().is_some_and(|p| p.last));
    assert!(v.points[..5].iter().all(|p| !p.last));
    for (k, p) in v.points.iter().enumerate() {
        let epoch = (k + 1) as f64;
        assert!(p.epoch >= epoch && p.epoch < epoch + 4.0 / 65.0, "{p:?}");
        assert_eq!(value(&p.metrics, "samples"), 3600.0);
    }
    let losses: Vec<f64> = v
        .points
        .iter()
        .map(|p| value(&p.metrics, "logloss"))
        .collect();
    // Monotone-ish: never more than 0.5% above the best before it, and clearly lower at the
    // end than after the first epoch.
    let mut best = f64::INFINITY;
    for &l in &losses {
        assert!(l <= best * 1.005, "the curve rose: {losses:?}");
        best = best.min(l);
    }
    assert!(losses[5] < 0.95 * losses[0], "{losses:?}");
    let costs: Vec<f64> = v
        .points
        .iter()
        .map(|p| p.cost_usd.expect("priced"))
        .collect();
    assert!(
        costs[0] > 0.0 && costs.windows(2).all(|w| w[1] >= w[0]),
        "{costs:?}"
    );
    let bill = record.bill.as_ref().expect("billed").total_usd;
    assert!(costs[5] <= bill * 1.0001, "{costs:?} vs the bill {bill}");
    let times: Vec<f64> = v.points.iter().map(|p| p.time_s).collect();
    assert!(times.windows(2).all(|w| w[1] >= w[0]), "{times:?}");
    // The best point (the last or one close before it, as the curve flattens) is the model
    // kept and tested.
    let best = (0..losses.len())
        .min_by(|&a, &b| losses[a].total_cmp(&losses[b]))
        .expect("points");
    assert!(best >= 3, "{losses:?}");
    assert_eq!(v.best, Some(best));
    let params = stored_params(&record);
    let kept = validation_metrics(&data, &record.spec.model, &params);
    assert_eq!(value(&kept, "logloss"), losses[best]);
}

#[test]
fn early_stopping_stops_an_overfitting_run_and_keeps_the_best_model() {
    let dir = tempdir();
    let data = overfitting_ratings(dir.path());
    let args = |epochs: &str, patience: &str| {
        vec![
            "--data".to_string(),
            s(&data),
            "--model".into(),
            "pmf".into(),
            "--workers".into(),
            "2".into(),
            "--factors".into(),
            "20".into(),
            "--l2".into(),
            "0".into(),
            "--prior".into(),
            "0".into(),
            "--max-epochs".into(),
            epochs.into(),
            "--early-stop".into(),
            patience.into(),
            "--eval-every".into(),
            "1epoch".into(),
        ]
    };
    let stopped = train(dir.path(), "stopped", &refs(&args("200", "3")));
    let v = validation(&stopped);
    assert!(
        stopped.stop_reason.contains("--early-stop"),
        "{}",
        stopped.stop_reason
    );
    assert!(stopped.epochs < 200.0, "ran {} epochs", stopped.epochs);
    let best = v.best_point().expect("a best evaluation");
    let last = v.points.last().expect("evaluations");
    let (best_rmse, last_rmse) = (value(&best.metrics, "rmse"), value(&last.metrics, "rmse"));
    assert!(!best.last && best_rmse < last_rmse, "{:?}", v.points);
    // At least the patience's evaluations came after the best one without improving on it.
    let after = v.points.iter().filter(|p| p.step > best.step).count();
    assert!(after >= 3, "{:?}", v.points);
    // The model kept is the best one, not the last: its validation RMSE is the best point's...
    let kept = validation_metrics(&data, &stopped.spec.model, &stored_params(&stopped));
    assert_eq!(value(&kept, "rmse"), best_rmse);
    // ...and it is the model of a run that ends where the best one was taken (BSP: the same
    // steps give the same model, bit for bit), whose test RMSE the record reports: an
    // evaluation "every epoch" is at the step that completes the epoch, where --max-epochs
    // stops a run.
    let epochs = format!("{}", best.epoch.floor() as u32);
    let short = train(dir.path(), "short", &refs(&args(&epochs, "0")));
    assert_eq!(stored_params(&short), stored_params(&stopped));
    assert_eq!(
        short.metrics.get("test_rmse"),
        stopped.metrics.get("test_rmse")
    );

    // The same under the other synchronisation models and with scale-in: the run stops on
    // its own, and the model kept is the best evaluation's.
    let configs: [&[&str]; 4] = [
        &["--sync", "isp", "--significance", "0.3"],
        &["--sync", "ssp"],
        &["--sync", "asp"],
        &[
            "--scale-in",
            "auto",
            "--scale-in-interval",
            "0.5",
            "--horizon",
            "0.5",
        ],
    ];
    for extra in configs {
        let mut all = args("200", "3");
        all.extend(extra.iter().map(|a| a.to_string()));
        let name = extra.join("-").replace([':', '.'], "_");
        let record = train(dir.path(), &name, &refs(&all));
        assert!(
            record.stop_reason.contains("--early-stop"),
            "{extra:?}: {}",
            record.stop_reason
        );
        let v = validation(&record);
        let best = value(&v.best_point().expect("a best").metrics, "rmse");
        let kept = validation_metrics(&data, &record.spec.model, &stored_params(&record));
        let kept = value(&kept, "rmse");
        assert!(
            (kept - best).abs() <= 1e-9 * best,
            "{extra:?}: {kept} vs {best}"
        );
        assert!(best < value(&v.points[0].metrics, "rmse"), "{extra:?}");
    }
}

/// `--refit` trains a second job on the training and validation sets together for the epochs
/// early stopping chose, and keeps its model: the record keeps the early-stopped model's
/// metrics (those of the same run without `--refit`, bit for bit) and the refit's whole record.
#[test]
fn refit_trains_again_on_training_and_validation_for_the_chosen_epochs() {
    let dir = tempdir();
    let data = overfitting_ratings(dir.path());
    let args = [
        "--data",
        &s(&data),
        "--model",
        "pmf",
        "--workers",
        "2",
        "--factors",
        "20",
        "--l2",
        "0",
        "--prior",
        "0",
        "--max-epochs",
        "200",
        "--early-stop",
        "3",
        "--eval-every",
        "1epoch",
    ];
    let plain = train(dir.path(), "plain", &args);
    let record = train(dir.path(), "refit", &[&args[..], &["--refit"]].concat());
    let refit = record.refit.as_ref().expect("a refit");
    let again = &refit.record;

    // The early-stopped model is the plain run's.
    assert_eq!(refit.early_stopped_metrics, plain.metrics);
    assert!(
        refit
            .early_stopped_model_url
            .ends_with(mlless_job::record::EARLY_STOPPED_MODEL_KEY)
    );
    let early_stopped = block_on(async {
        mlless_store::Store::open(&record.spec.run_url)
            .expect("run store opens")
            .get(mlless_job::record::EARLY_STOPPED_MODEL_KEY)
            .await
            .expect("the early-stopped model is kept")
    });
    let early_stopped = StoredModel::decode(&early_stopped, || "model".into()).expect("decodes");
    assert_eq!(early_stopped.params, stored_params(&plain));
    let best = validation(&record).best_point().expect("a best evaluation");
    assert_eq!(refit.epochs, best.epoch.ceil() as u32);
    let plain_best = validation(&plain).best_point().expect("a best evaluation");
    assert_eq!(
        (best.step, &best.metrics),
        (plain_best.step, &plain_best.metrics)
    );

    // The refit trained that many epochs on training and validation, with no validation set.
    assert!(again.spec.training.trains_on_validation);
    assert!(!again.spec.training.refit);
    assert!(again.validation.is_none());
    assert!(
        again.stop_reason.contains("--max-epochs"),
        "{}",
        again.stop_reason
    );
    assert!(
        (again.epochs - f64::from(refit.epochs)).abs() < 1.0,
        "{}",
        again.epochs
    );
    let held_out: u64 = batches(&data, Split::Validation)
        .iter()
        .map(|b| b.samples() as u64)
        .sum();
    assert!(held_out > 0);
    assert_eq!(again.train_samples, plain.train_samples + held_out);

    // Its model is the one kept, and it has learnt the validation ratings: on them it is far
    // better than the early-stopped model, which never saw them.
    assert_eq!(stored_params(&record), stored_params(again));
    assert_eq!(record.metrics, again.metrics);
    let kept = validation_metrics(&data, &record.spec.model, &stored_params(&record));
    let best_rmse = value(&best.metrics, "rmse");
    assert!(
        value(&kept, "rmse") < 0.9 * best_rmse,
        "validation RMSE {} against the early-stopped {best_rmse}",
        value(&kept, "rmse")
    );
}

/// The validation log loss of the given evaluation of an LR run without stops: a target the
/// other runs reach part of the way through.
fn lr_target(dir: &Path, data: &Path) -> f64 {
    let record = train(
        dir,
        "reference",
        &[
            "--data",
            &s(data),
            "--model",
            "lr",
            "--max-epochs",
            "8",
            "--early-stop",
            "0",
            "--eval-every",
            "1epoch",
        ],
    );
    value(&validation(&record).points[2].metrics, "logloss")
}

#[test]
fn the_target_metric_stops_every_protocol_algorithm_pattern_and_scale_in() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let reference = lr_target(dir.path(), &data);
    // The other protocols follow slightly different paths; the target is a little looser.
    let target = format!("logloss<={:.6}", reference * 1.01);
    let configs: [&[&str]; 8] = [
        &["--sync", "bsp"],
        &["--sync", "isp", "--significance", "0.3"],
        &["--sync", "ssp"],
        &["--sync", "asp"],
        &["--algorithm", "ma:4"],
        &["--algorithm", "admm"],
        &["--pattern", "allreduce"],
        &[
            "--scale-in",
            "auto",
            "--scale-in-interval",
            "0.5",
            "--horizon",
            "0.5",
        ],
    ];
    let data = s(&data);
    for extra in configs {
        let mut args = vec![
            "--data",
            &data,
            "--model",
            "lr",
            "--max-epochs",
            "100",
            "--eval-every",
            "1epoch",
            "--target-metric",
            &target,
        ];
        args.extend(extra);
        let name = extra.join("-").replace([':', '.'], "_");
        let record = train(dir.path(), &name, &args);
        let v = validation(&record);
        let reached = v.targets.first().and_then(|t| v.reached(t));
        let reached = reached.unwrap_or_else(|| panic!("{extra:?}: target not reached: {v:?}"));
        assert!(
            value(&reached.metrics, "logloss") <= reference * 1.01,
            "{extra:?}: {reached:?}"
        );
        assert!(
            record.stop_reason.contains("--target-metric"),
            "{extra:?}: {}",
            record.stop_reason
        );
        assert!(
            record.epochs < 100.0,
            "{extra:?}: ran {} epochs",
            record.epochs
        );
        assert!(reached.cost_usd.is_some_and(|c| c > 0.0), "{reached:?}");
        assert!(record.epochs >= reached.epoch, "{extra:?}: {reached:?}");
    }
}

#[test]
fn validation_options_are_checked_before_anything_runs() {
    let dir = tempdir();
    let input = common::write(dir.path(), "t.libsvm", &"1 1:1 2:0.5\n0 3:1\n".repeat(50));
    let none = dir.path().join("none");
    ok(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &s(&none),
        "--validation-fraction",
        "0",
    ]);
    let e = fails(&[
        "train",
        "--data",
        &s(&none),
        "--model",
        "lr",
        "--early-stop",
        "3",
    ]);
    assert!(e.contains("--validation-fraction"), "{e}");
    let e = fails(&[
        "train",
        "--data",
        &s(&none),
        "--model",
        "lr",
        "--target-metric",
        "auc>=0.9",
    ]);
    assert!(e.contains("needs a validation set"), "{e}");
    let e = fails(&["train", "--data", &s(&none), "--model", "lr", "--refit"]);
    assert!(
        e.contains("--refit") && e.contains("no validation set") && e.contains(&s(&none)),
        "{e}"
    );
    let with = dir.path().join("with");
    ok(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &s(&with),
    ]);
    let e = fails(&[
        "train",
        "--data",
        &s(&with),
        "--model",
        "lr",
        "--target-metric",
        "rmse<=0.9",
    ]);
    assert!(e.contains("logloss, accuracy, auc"), "{e}");
    for (flag, bad) in [
        ("--target-metric", "rmse>=0.9"),
        ("--target-metric", "loss<=1"),
        ("--eval-every", "0"),
        ("--eval-every", "-1s"),
        ("--eval-every", "soon"),
    ] {
        let option = format!("{flag}={bad}");
        let e = fails(&["train", "--data", &s(&with), "--model", "lr", &option]);
        assert!(
            e.contains(flag) || e.contains("metric"),
            "{flag} {bad}: {e}"
        );
    }
    let e = fails(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &s(&dir.path().join("bad")),
        "--validation-fraction",
        "1.5",
    ]);
    assert!(e.contains("--validation-fraction"), "{e}");
}

#[test]
fn a_crashed_supervisor_resumes_the_curve_and_keeps_the_same_model() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let args = |fault: &[&str]| {
        let mut all: Vec<String> = [
            "--data",
            &s(&data),
            "--model",
            "lr",
            "--max-epochs",
            "5",
            "--early-stop",
            "0",
            "--eval-every",
            "1epoch",
            "--checkpoint-every",
            "20",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        all.extend(fault.iter().map(|a| a.to_string()));
        all
    };
    let clean = train(dir.path(), "clean", &refs(&args(&[])));
    // Killed after the evaluation of epoch 2 (step 32) and before its next checkpoint (step
    // 40): the resumed supervisor reads that evaluation's model again, from step 20 on.
    let crashed = train(
        dir.path(),
        "crashed",
        &refs(&args(&["--fault", "kill-supervisor@36"])),
    );
    assert!(
        crashed.invocations.iter().any(|i| i.name == "supervisor~1"),
        "{:?}",
        crashed.invocations
    );
    let curve = |r: &RunRecord| -> Vec<(u64, f64)> {
        validation(r)
            .points
            .iter()
            .map(|p| (p.step, value(&p.metrics, "logloss")))
            .collect()
    };
    assert_eq!(curve(&crashed), curve(&clean));
    assert_eq!(validation(&crashed).best, validation(&clean).best);
    assert!(stored_params(&crashed) == stored_params(&clean));
}
