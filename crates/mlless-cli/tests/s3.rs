//! Data set, run and channel on S3 (a moto_server that `scripts/test.sh` starts on loopback):
//! `prepare --out s3://…` and `train --data s3://…` end to end, with the functions reading and
//! exchanging through S3.

mod common;

use common::*;
use mlless_data::SparseLrSpec;

#[test]
fn prepare_and_train_on_s3() {
    let Ok(base) = std::env::var("MLLESS_TEST_S3_URL") else {
        eprintln!("MLLESS_TEST_S3_URL not set (scripts/test.sh sets it): skipped");
        return;
    };
    let dir = tempdir();
    let input = dir.path().join("lr.libsvm");
    let file = std::io::BufWriter::new(std::fs::File::create(&input).unwrap());
    mlless_data::write_sparse_lr(&SparseLrSpec::new(3_000, 500, 10, 4), file).unwrap();
    let data = format!("{base}/cli-{}", std::process::id());
    ok(&[
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(&input),
        "--out",
        &data,
        "--batch-size",
        "300",
    ]);
    let record = train(
        dir.path(),
        "s3",
        &[
            "--data",
            &data,
            "--model",
            "lr",
            "--workers",
            "2",
            "--max-epochs",
            "3",
        ],
    );
    assert!(
        record.spec.run_url.starts_with("s3://"),
        "{}",
        record.spec.run_url
    );
    // The default global batch of 4 minibatches: each of the 2 workers reads 2 a step.
    assert_eq!(
        record.steps.len(),
        (3 * 9_usize).div_ceil(4),
        "3 epochs of 9 minibatches, 4 a step"
    );
    assert!(metric(&record, "test_auc") > 0.6, "{:?}", record.metrics);
}
