//! Sparse LR with the default hyperparameters (no tuning flags) against the converged L2
//! optimum (scikit-learn's `LogisticRegression(C=1)`, bias unregularised) on the same split, on
//! balanced and on imbalanced (3% positive) binary sparse data, with 1 and with 4 workers.

mod common;

use common::*;
use mlless_core::{LrReferenceOptions, LrRegularization, ModelSpec, solve_lr_reference};
use mlless_data::SparseLrSpec;
use mlless_runtime::dataset::Split;

/// Generates `spec`, prepares it with prepare's defaults (test fraction 0.2), and returns the
/// data set and the C = 1 optimum's test log loss.
fn data_and_optimum(dir: &std::path::Path, spec: &SparseLrSpec) -> (std::path::PathBuf, f64) {
    let (input, _) = write_sparse_lr(dir, spec);
    let data = dir.join("store/lr");
    ok(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &s(&data),
        "--test-fraction",
        "0.2",
    ]);
    let train = batches(&data, Split::Train);
    let features = spec.features;
    let optimum = solve_lr_reference(
        &train,
        features,
        LrRegularization::InverseC(1.0),
        &LrReferenceOptions::default(),
    )
    .expect("the reference solves");
    assert!(optimum.converged, "{optimum:?}");
    let lr = ModelSpec::LogisticRegression {
        features,
        l2: 0.0,
        init_bias: 0.0,
    };
    let mut eval = lr.evaluation();
    for batch in test_batches(&data) {
        lr.model()
            .evaluate(&optimum.params, &batch, &mut eval)
            .expect("evaluates");
    }
    (data, eval.finish()["test_logloss"])
}

/// The flags of a 40-epoch sparse LR run on `data` with `workers` and otherwise the defaults
/// (but for evaluating once an epoch).
fn forty_epochs<'a>(data: &'a str, workers: &'a str) -> [&'a str; 10] {
    [
        "--data",
        data,
        "--model",
        "lr",
        "--workers",
        workers,
        "--max-epochs",
        "40",
        // One evaluation an epoch, as `auto` does on a job this fast unless the machine is so
        // loaded that an epoch outlasts its 5 s: early stopping then counts the same
        // evaluations on any machine, and P = 1 and 4 compare like for like.
        "--eval-every",
        "1epoch",
    ]
}

/// Trains with defaults (but for evaluating once an epoch) at P = 1 and 4 for 40 epochs; both
/// within 1% of the optimum's test log loss and within 0.5% of each other. Returns the run's
/// folder, the data set and the optimum's test log loss.
fn defaults_reach_the_optimum(
    spec: SparseLrSpec,
    what: &str,
) -> (tempfile::TempDir, std::path::PathBuf, f64) {
    let dir = tempdir();
    let (data, optimum) = data_and_optimum(dir.path(), &spec);
    let mut losses = Vec::new();
    for p in ["1", "4"] {
        let record = train(dir.path(), &format!("p{p}"), &forty_epochs(&s(&data), p));
        let loss = metric(&record, "test_logloss");
        assert!(
            loss <= 1.01 * optimum,
            "{what}, P = {p}: test log loss {loss} is not within 1% of the optimum's {optimum}"
        );
        losses.push(loss);
    }
    let apart = (losses[0] - losses[1]).abs() / losses[0];
    assert!(
        apart <= 0.005,
        "{what}: P = 1 ({}) and P = 4 ({}) are {:.2}% apart",
        losses[0],
        losses[1],
        100.0 * apart
    );
    (dir, data, optimum)
}

/// Web-page-like: 300 binary features, 12 a row, 3% positive, 40k training rows.
#[test]
fn imbalanced_binary_data_reaches_the_optimum_with_1_and_4_workers() {
    defaults_reach_the_optimum(
        SparseLrSpec {
            positive_rate: Some(0.03),
            ..SparseLrSpec::new(50_000, 300, 12, 41)
        },
        "3% positive",
    );
}

/// Web-page-like and nearly separable, as real web-page sets are (a few keywords decide): the
/// true margin's spread is 6, so the optimum's weights and bias are large and take long to
/// reach. With the schedule of before (`lr / sqrt(epoch + 1)`, `--decay-epochs 1`) 40 epochs
/// end 4% above the optimum here, as they did on a real web-page set (2.8% at P = 1, 6.5% at
/// P = 4); the run with it checks that this set still shows that failure.
#[test]
fn nearly_separable_imbalanced_data_reaches_the_optimum_with_1_and_4_workers() {
    let spec = SparseLrSpec {
        positive_rate: Some(0.03),
        margin_std: 6.0,
        ..SparseLrSpec::new(50_000, 300, 12, 44)
    };
    let (dir, data, optimum) = defaults_reach_the_optimum(spec, "nearly separable");
    let data = s(&data);
    let old = [&forty_epochs(&data, "1")[..], &["--decay-epochs", "1"]].concat();
    let loss = metric(&train(dir.path(), "old-schedule", &old), "test_logloss");
    assert!(
        loss > 1.02 * optimum,
        "the old schedule's {loss} is within 2% of the optimum's {optimum}: the set no longer \
         shows the failure the default's schedule was chosen against"
    );
}

/// Balanced: 1,000 binary features, 20 a row, 40k training rows.
#[test]
fn balanced_binary_data_reaches_the_optimum_with_1_and_4_workers() {
    defaults_reach_the_optimum(SparseLrSpec::new(50_000, 1000, 20, 42), "balanced");
}

/// The global batch holds as the fleet grows: a9a-like data (24% positive, 14 binary features a
/// row, 80k training rows) with the defaults for 10 epochs at P = 4, 16 and 60 takes the same
/// steps and reaches the same test log loss (within 1% of P = 4's), within 2% of the optimum. With one
/// minibatch a worker a step, P = 60 took 14 steps of 60,000 rows and ended 11% above P = 4.
#[test]
fn sparse_lr_reaches_the_same_loss_at_4_16_and_60_workers() {
    let dir = tempdir();
    let spec = SparseLrSpec {
        positive_rate: Some(0.24),
        ..SparseLrSpec::new(100_000, 1000, 14, 43)
    };
    let (data, optimum) = data_and_optimum(dir.path(), &spec);
    let mut runs = Vec::new();
    for p in ["4", "16", "60"] {
        let record = train(
            dir.path(),
            &format!("p{p}"),
            &[
                "--data",
                &s(&data),
                "--model",
                "lr",
                "--workers",
                p,
                "--max-epochs",
                "10",
                "--early-stop",
                "0",
            ],
        );
        runs.push((p, record.steps.len(), metric(&record, "test_logloss")));
    }
    eprintln!("optimum {optimum}; (P, steps, test log loss): {runs:?}");
    let (_, steps_at_4, loss_at_4) = runs[0];
    for &(p, steps, loss) in &runs {
        assert_eq!(steps, steps_at_4, "P = {p} takes the steps of P = 4");
        assert!(
            (loss - loss_at_4).abs() <= 0.01 * loss_at_4,
            "P = {p}: test log loss {loss} is not within 1% of P = 4's {loss_at_4}"
        );
        assert!(
            loss <= 1.02 * optimum,
            "P = {p}: test log loss {loss} is not within 2% of the optimum's {optimum}"
        );
    }
}
