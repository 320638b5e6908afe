//! Convergence with known ground truth, and equivalence with a plain single-process loop.

mod common;

use common::*;
use mlless_core::GradientAccumulator;
use mlless_data::SparseLrSpec;
use mlless_runtime::dataset::{Dataset, Split};
use mlless_runtime::fleet::batch_order;

/// Synthetic sparse LR, 300k rows × 100k features × 30 non-zeros, default hyperparameters, one
/// worker: the trained model's test log loss is within 2% of the true weights'. (At 100k rows no
/// optimiser gets within 2%: the long tail of rare features is too thinly sampled.) The runs with
/// four workers, and the ratings, are in `channels.rs`, once per channel backend.
#[test]
fn sparse_lr_reaches_the_true_models_log_loss_with_1_worker() {
    let dir = tempdir();
    let (data, reference) = sparse_lr_data(dir.path());
    let record = train(
        dir.path(),
        "p1",
        &["--data", &s(&data), "--model", "lr", "--workers", "1"],
    );
    let loss = metric(&record, "test_logloss");
    assert!(
        loss <= 1.02 * reference,
        "P=1: test log loss {loss} is not within 2% of the true weights' {reference}"
    );
    assert!(metric(&record, "test_auc") > 0.75);
}

/// With one worker the distributed runtime yields the model of a plain loop over the same
/// minibatch order: the default global batch of 4 minibatches, so each step reads the next 4
/// of the stream of epochs' shuffled orders, across an epoch's end (18 minibatches an epoch).
#[test]
fn one_worker_equals_a_plain_loop() {
    let dir = tempdir();
    let spec = SparseLrSpec::new(5_000, 2_000, 20, 3);
    let (input, _) = write_sparse_lr(dir.path(), &spec);
    let data = dir.path().join("store/lr");
    prepare_libsvm(&input, &data, 250);
    let record = train(
        dir.path(),
        "p1",
        &[
            "--data",
            &s(&data),
            "--model",
            "lr",
            "--workers",
            "1",
            "--max-epochs",
            "3",
            "--optimizer",
            "adam",
            "--schedule",
            "inv-sqrt-epoch",
        ],
    );
    let stored = stored_params(&record);

    let job = &record.spec;
    let reference = block_on(async {
        let dataset = Dataset::open(&s(&data)).await.unwrap();
        let m = dataset.batches(Split::Train) as u64;
        let model = job.model.model();
        let mut params = job.model.init_params(job.training.seed);
        let mut optimizer = mlless_core::build_optimizer(&job.optimizer, params.len());
        let mut acc = GradientAccumulator::new(params.len());
        for step in 0..record.steps.len() as u64 {
            let epoch = 4 * step / m;
            let mut parts = Vec::new();
            for pos in 4 * step..4 * step + 4 {
                let order = batch_order(job.training.seed, pos / m, m as u32);
                let index = order[(pos % m) as usize] as usize;
                parts.push(dataset.read_batch(Split::Train, index).await.unwrap());
            }
            let pieces: Vec<_> = parts.iter().map(|b| (b, 0..b.samples())).collect();
            let batch = mlless_core::Batch::concat(&pieces).unwrap();
            model.gradient(&params, &batch, &mut acc).unwrap();
            let delta = optimizer.step(&params, &acc.take(), job.rate(epoch));
            delta.scaled_add_to(&mut params, 1.0);
        }
        params
    });
    assert_eq!(
        record.steps.len() as u64,
        (3 * 18_u64).div_ceil(4),
        "3 epochs of 18 minibatches, 4 a step"
    );
    assert_eq!(stored.len(), reference.len());
    let worst = stored
        .iter()
        .zip(&reference)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst <= 1e-6, "largest difference {worst}");
    assert!(
        reference.iter().any(|&w| w != 0.0),
        "the loop trained something"
    );
}
