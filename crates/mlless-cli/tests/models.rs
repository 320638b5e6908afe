//! The models beyond sparse LR and PMF, end to end against data with known truth or a
//! single-process reference: k-means, the linear SVM (dense and sparse data), LR on dense data
//! (LambdaML's Higgs-like workload) and the MLP.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use mlless_core::{Batch, ModelSpec};
use mlless_runtime::dataset::Split;

/// Writes data with `write` to `dir/name.libsvm` and prepares it into `dir/store/name`.
fn prepared(
    dir: &Path,
    name: &str,
    batch_size: u32,
    write: impl FnOnce(std::io::BufWriter<std::fs::File>),
) -> PathBuf {
    let input = dir.join(format!("{name}.libsvm"));
    write(std::io::BufWriter::new(
        std::fs::File::create(&input).expect("create input"),
    ));
    let data = dir.join("store").join(name);
    prepare_libsvm(&input, &data, batch_size);
    data
}

/// The test metrics of `params` for `spec` on the test set of `data`.
fn evaluate(spec: &ModelSpec, params: &[f32], data: &Path) -> mlless_core::Metrics {
    let model = spec.model();
    let mut evaluation = spec.evaluation();
    for batch in test_batches(data) {
        model
            .evaluate(params, &batch, &mut evaluation)
            .expect("evaluates");
    }
    evaluation.finish()
}

/// Distributed Lloyd steps (P = 4, through every pattern) end with the inertia of a
/// single-process Lloyd run from the same k-means++ seeding, within 1%.
#[test]
fn kmeans_matches_a_single_process_lloyd_run() {
    let dir = tempdir();
    let data = prepared(dir.path(), "blobs", 500, |out| {
        let spec = mlless_data::BlobsSpec::new(40_000, 8, 16, 3);
        mlless_data::write_blobs(&spec, out).expect("generate");
    });
    let d = s(&data);
    let base = [
        "--data",
        &d,
        "--model",
        "kmeans",
        "--k",
        "8",
        "--workers",
        "4",
        "--max-epochs",
        "100",
    ];
    let record = train(dir.path(), "kmeans", &base);
    let ModelSpec::KMeans { features, k } = record.spec.model else {
        panic!("a k-means spec: {:?}", record.spec.model)
    };
    let train_batches: Vec<Batch> = batches(&data, Split::Train);
    let seed_sample = &train_batches[..mlless_runtime::worker::KMEANS_SEED_BATCHES as usize];
    let init = mlless_core::kmeans_plus_plus(seed_sample, k, features, record.spec.training.seed)
        .expect("seeds");
    let reference = mlless_core::lloyd(&train_batches, init, k, features, 100, 1e-4).expect("runs");
    let want = evaluate(&record.spec.model, &reference.centroids, &data)["test_inertia"];
    let got = metric(&record, "test_inertia");
    eprintln!(
        "k-means: distributed {got} in {} iterations, single process {want} in {}",
        record.steps.len(),
        reference.iterations
    );
    assert!((got - want).abs() <= 0.01 * want, "{got} vs {want}");
    assert!(record.steps.len() < 100, "stopped on the tolerance");
    assert_eq!(record.rounds, record.steps.len() as u64);
    // Every pattern averages the same sums.
    for pattern in ["allreduce", "scatter-reduce"] {
        let mut args = base.to_vec();
        args.extend(["--pattern", pattern]);
        let other = train(dir.path(), pattern, &args);
        assert_eq!(stored_params(&other), stored_params(&record), "{pattern}");
    }
}

/// The linear SVM trained by 4 workers reaches the test accuracy of a converged single-process
/// solve on the same data, within 1%, on dense and on sparse data.
#[test]
fn svm_matches_a_converged_single_process_solve() {
    let dir = tempdir();
    let dense = prepared(dir.path(), "dense", 500, |out| {
        let spec = mlless_data::DenseLrSpec::new(40_000, 28, 7);
        mlless_data::write_dense_lr(&spec, out).expect("generate");
    });
    let sparse = prepared(dir.path(), "sparse", 500, |out| {
        let spec = mlless_data::SparseLrSpec::new(40_000, 10_000, 20, 23);
        mlless_data::write_sparse_lr(&spec, out).expect("generate");
    });
    for (name, data) in [("dense", &dense), ("sparse", &sparse)] {
        let d = s(data);
        let record = train(
            dir.path(),
            name,
            &[
                "--data",
                &d,
                "--model",
                "svm",
                "--workers",
                "4",
                "--max-epochs",
                "10",
            ],
        );
        let ModelSpec::Svm { features, l2 } = record.spec.model else {
            panic!("an SVM spec")
        };
        let train_batches = batches(data, Split::Train);
        let reference =
            mlless_core::solve_svm_reference(&train_batches, features, l2, 500).expect("solves");
        let want = evaluate(&record.spec.model, &reference, data)["test_accuracy"];
        let got = metric(&record, "test_accuracy");
        eprintln!("SVM on {name} data: accuracy {got}, single-process solve {want}");
        assert!(got >= want - 0.01, "{name}: {got} vs {want}");
    }
}

/// LR on dense data (LambdaML's Higgs-like workload, `generate dense-lr`) gets within 2% of
/// the true model's test log loss.
#[test]
fn lr_on_dense_data_approaches_the_true_model() {
    let dir = tempdir();
    let input = dir.path().join("dense.libsvm");
    ok(&[
        "generate",
        "dense-lr",
        "--samples",
        "40000",
        "--seed",
        "5",
        "--out",
        &s(&input),
    ]);
    let truth: mlless_data::DenseLrTruth = serde_json::from_slice(
        &std::fs::read(dir.path().join("dense.libsvm.truth.json")).expect("truth written"),
    )
    .expect("truth parses");
    let data = dir.path().join("store/dense");
    prepare_libsvm(&input, &data, 500);
    let (mut sum, mut n) = (0.0, 0usize);
    for batch in test_batches(&data) {
        let Batch::Sparse(rows) = batch else {
            panic!("rows")
        };
        sum += truth.log_loss_on(&rows) * rows.rows() as f64;
        n += rows.rows();
    }
    let true_loss = sum / n as f64;
    let d = s(&data);
    let record = train(
        dir.path(),
        "lr",
        &[
            "--data",
            &d,
            "--model",
            "lr",
            "--workers",
            "4",
            "--max-epochs",
            "5",
        ],
    );
    let got = metric(&record, "test_logloss");
    eprintln!("dense LR: test log loss {got}, true model {true_loss}");
    assert!(got <= true_loss * 1.02, "{got} vs {true_loss}");
}

/// An MLP (one hidden layer, GA-SGD over 4 workers, all-reduce) separates concentric rings,
/// which logistic regression cannot.
#[test]
fn mlp_learns_rings_that_a_linear_model_cannot() {
    let dir = tempdir();
    let data = prepared(dir.path(), "rings", 200, |out| {
        let spec = mlless_data::RingsSpec::new(20_000, 2, 9);
        mlless_data::write_rings(&spec, out).expect("generate");
    });
    let d = s(&data);
    let run = |model: &str, extra: &[&str]| {
        let mut args = vec![
            "--data",
            &d,
            "--model",
            model,
            "--workers",
            "4",
            "--max-epochs",
            "10",
        ];
        args.extend_from_slice(extra);
        train(dir.path(), model, &args)
    };
    let mlp = run("mlp", &["--pattern", "allreduce"]);
    let lr = run("lr", &[]);
    let (mlp_accuracy, lr_accuracy) = (metric(&mlp, "test_accuracy"), metric(&lr, "test_accuracy"));
    eprintln!("rings: MLP accuracy {mlp_accuracy}, LR {lr_accuracy}");
    assert!(mlp_accuracy >= 0.95, "MLP {mlp_accuracy}");
    assert!(lr_accuracy < 0.7, "LR {lr_accuracy}");
    assert_eq!(mlp.replica_spread, 0.0);
}
