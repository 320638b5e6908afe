//! The sparse-LR generator makes data that plain minibatch SGD fits to near the truth.
//!
//! Slow in debug builds: `cargo test --release -p mlless-data --test learnable -- --ignored`.
//!
//! Measured with the default model (Zipf 1.0, 1000 informative features, margin std 2), 100k
//! features, 30 nnz, 80/20 split, SGD with batch 100 and step 0.5, best epoch of a few:
//! 100k samples: 3.0% above the truth's test log loss (an oracle that trains only the 1000
//! informative weights: 1.7% after 8 epochs); 200k: 2.1%; 300k: 1.45%.

use mlless_data::{
    InputFormat, ParseOptions, Parsed, SparseBatch, SparseLrSpec, parse_reader, shuffle_split,
    write_sparse_lr,
};

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn margin(w: &[f64], idx: &[u32], val: &[f32]) -> f64 {
    idx.iter()
        .zip(val)
        .map(|(&i, &v)| w[i as usize] * f64::from(v))
        .sum()
}

fn log_loss(w: &[f64], rows: &SparseBatch) -> f64 {
    let total: f64 = rows
        .iter_rows()
        .map(|(y, idx, val)| {
            let p = sigmoid(margin(w, idx, val)).clamp(1e-12, 1.0 - 1e-12);
            -(f64::from(y) * p.ln() + (1.0 - f64::from(y)) * (1.0 - p).ln())
        })
        .sum();
    total / rows.rows() as f64
}

/// Trains by minibatch SGD; returns (best test log loss over the epochs, truth's).
fn train_and_compare(samples: u64, epochs: usize) -> (f64, f64) {
    let spec = SparseLrSpec::new(samples, 100_000, 30, 2024);
    let mut text = Vec::new();
    let truth = write_sparse_lr(&spec, &mut text).unwrap();
    let parsed = parse_reader(
        &text[..],
        "lr.libsvm".as_ref(),
        InputFormat::Libsvm,
        &ParseOptions {
            features: Some(spec.features),
            ..ParseOptions::default()
        },
    )
    .unwrap();
    let (train, test) = shuffle_split(parsed, 0.2, 1).unwrap();
    let (Parsed::Sparse { rows: train, .. }, Parsed::Sparse { rows: test, .. }) = (train, test)
    else {
        panic!("expected sparse rows")
    };
    let true_loss = truth.log_loss(&test);

    let (step, batch) = (0.5, 100);
    let mut w = vec![0.0f64; spec.features as usize];
    let mut best = f64::INFINITY;
    let mut grad: Vec<(u32, f64)> = Vec::new();
    for epoch in 0..epochs {
        for start in (0..train.rows()).step_by(batch) {
            let end = (start + batch).min(train.rows());
            grad.clear();
            for r in start..end {
                let (y, idx, val) = train.row(r);
                let g = sigmoid(margin(&w, idx, val)) - f64::from(y);
                grad.extend(idx.iter().zip(val).map(|(&i, &v)| (i, g * f64::from(v))));
            }
            let scale = step / (end - start) as f64;
            for &(i, g) in &grad {
                w[i as usize] -= scale * g;
            }
        }
        let loss = log_loss(&w, &test);
        best = best.min(loss);
        println!(
            "{samples} samples, epoch {epoch}: test log loss {loss:.4} (truth {true_loss:.4})"
        );
    }
    (best, true_loss)
}

#[test]
#[ignore = "slow in debug builds; run with --release -- --ignored"]
fn sparse_lr_within_2_percent_at_300k() {
    let (best, truth) = train_and_compare(300_000, 3);
    assert!(best < truth * 1.02, "best {best}, truth {truth}");
}

#[test]
#[ignore = "slow in debug builds; run with --release -- --ignored"]
fn sparse_lr_within_4_percent_at_100k() {
    let (best, truth) = train_and_compare(100_000, 6);
    assert!(best < truth * 1.04, "best {best}, truth {truth}");
}
