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

/// Trains with defaults (but for evaluating once an epoch) at P = 1 and 4 for 40 epochs; both
/// within 1% of the optimum's test log loss and within 0.5% of each other.
fn defaults_reach_the_optimum(spec: SparseLrSpec, what: &str) {
    let dir = tempdir();
    let (data, optimum) = data_and_optimum(dir.path(), &spec);
    let mut losses = Vec::new();
    for p in ["1", "4"] {
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
                "40",
                // One evaluation an epoch, as `auto` does on a job this fast unless the machine
                // is so loaded that an epoch outlasts its 5 s: early stopping then counts the
                // same evaluations on any machine, and P = 1 and 4 compare like for like.
                "--eval-every",
                "1epoch",
            ],
        );
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
