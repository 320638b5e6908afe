//! `generate criteo` end to end: Criteo-shaped data with a known true model, prepared with
//! `--format criteo` and trained with sparse LR's default hyperparameters, scores close to the
//! true model on the test set.

mod common;

use std::path::Path;

use common::*;
use mlless_data::CriteoTruth;

/// The hashing space of the test: the truth's model is exact in it.
const FEATURES: &str = "262144";

/// Prepares the Criteo file `input` into `out` (prepare's defaults: 10% test, 10% of the rest
/// validation, seed 1) with the `extra` options.
fn prepare_criteo(input: &Path, out: &Path, extra: &[&str]) {
    let mut args = vec![
        "prepare",
        "--format",
        "criteo",
        "--features",
        FEATURES,
        "--input",
    ];
    let (input, out) = (s(input), s(out));
    args.extend([input.as_str(), "--out", out.as_str()]);
    args.extend(extra);
    ok(&args);
}

/// The sparse test rows of a prepared data set, in order.
fn test_rows(data: &Path) -> Vec<mlless_core::SparseBatch> {
    test_batches(data)
        .into_iter()
        .map(|batch| match batch {
            mlless_core::Batch::Sparse(rows) => rows,
            _ => panic!("criteo data is sparse"),
        })
        .collect()
}

/// 200,000 generated rows (162,000 to train on after the test and validation sets), LR with
/// every default of `prepare` and `train`.
///
/// The integer columns are counts as large as Criteo's (`ln(1 + count)` up to about 15, in most
/// rows), and on them the default rate is unstable with 4 workers: prepared as they are, LR
/// with the defaults ended at a test log loss of 1.45 (2 workers: 0.92), above the base
/// rate's 0.57 (1 worker: 0.48). So `prepare` min-max normalises Criteo by default, and the true model
/// is scored on the same test rows prepared as they are (the split does not depend on the
/// normalisation). Scaling a feature keeps the true model a logistic model of the features.
#[test]
fn lr_with_defaults_approaches_the_true_model_on_generated_criteo_data() {
    let dir = tempdir();
    let input = dir.path().join("criteo.tsv");
    let out = ok(&[
        "generate",
        "criteo",
        "--samples",
        "200000",
        "--features",
        FEATURES,
        "--seed",
        "3",
        "--out",
        &s(&input),
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("wrote 200000 Criteo rows") && said.contains("--features 262144"),
        "{said}"
    );
    let truth: CriteoTruth = serde_json::from_slice(
        &std::fs::read(dir.path().join("criteo.tsv.truth.json")).expect("the truth is written"),
    )
    .expect("the truth parses");
    assert_eq!(truth.samples, 200_000);

    let (raw, scaled) = (
        dir.path().join("store/raw"),
        dir.path().join("store/scaled"),
    );
    prepare_criteo(&input, &raw, &["--normalize", "none"]);
    // Criteo is min-max normalised by default.
    prepare_criteo(&input, &scaled, &[]);

    // The true model's log loss and the base rate's on the test set.
    let raw_test = test_rows(&raw);
    let labels = |rows: &[mlless_core::SparseBatch]| -> Vec<f32> {
        rows.iter().flat_map(|r| r.labels.iter().copied()).collect()
    };
    let test_labels = labels(&raw_test);
    assert_eq!(
        test_labels,
        labels(&test_rows(&scaled)),
        "both preparations hold the same test rows"
    );
    let n = test_labels.len() as f64;
    let true_loss = raw_test
        .iter()
        .map(|rows| truth.log_loss_on(rows) * rows.rows() as f64)
        .sum::<f64>()
        / n;
    let rate = test_labels.iter().map(|&l| f64::from(l)).sum::<f64>() / n;
    let base_loss = -(rate * rate.ln() + (1.0 - rate) * (1.0 - rate).ln());

    let record = train(dir.path(), "lr", &["--data", &s(&scaled), "--model", "lr"]);
    let trained = metric(&record, "test_logloss");
    let auc = metric(&record, "test_auc");
    eprintln!(
        "test set: {n} rows, {rate:.4} positive; true log loss {true_loss:.4}, base rate's \
         {base_loss:.4}; trained {trained:.4} (AUC {auc:.4})"
    );
    // Measured: true 0.4445, base rate's 0.5737, trained 0.4827 (AUC 0.765). The gap is mostly
    // the rare values of the large columns, whose weights 162,000 rows cannot teach.
    assert!(
        true_loss < base_loss - 0.1,
        "the signal is real: true {true_loss}, base rate's {base_loss}"
    );
    assert!(
        trained < true_loss + 0.06,
        "trained {trained} is not within 0.06 of the true model's {true_loss}"
    );
    assert!(
        trained > true_loss - 0.01,
        "trained {trained} beats the true model's {true_loss}: the truth is wrong"
    );
    assert!(auc > 0.74, "trained AUC {auc}");
}
