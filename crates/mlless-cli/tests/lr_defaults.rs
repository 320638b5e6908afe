//! Sparse LR with the default hyperparameters (no tuning flags) against the converged L2
//! optimum (scikit-learn's `LogisticRegression(C=1)`, bias unregularised) on the same split, on
//! balanced and on imbalanced (3% positive) binary sparse data, with 1 and with 4 workers.

mod common;

use common::*;
use mlless_core::{
    Evaluation, LrReferenceOptions, LrRegularization, ModelSpec, solve_lr_reference,
};
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
    let mut eval = Evaluation::for_spec(&lr);
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
