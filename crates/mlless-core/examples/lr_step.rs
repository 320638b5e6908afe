//! One worker's compute of a real sparse-LR training step, timed part by part: the gradient of
//! a 10,000-row minibatch (30 distinct features a row, drawn by a Zipf(1) law over 1M features
//! scattered by a random permutation, as `mlless generate sparse-lr` draws them) into a
//! [`GradientAccumulator`], its `take()`, the default optimiser's step (momentum) and applying
//! the delta, and the mean of four such deltas (a P = 4 exchange); then PMF on an
//! ML-100k-shaped batch (943 × 1,682, rank 10, 1,000 ratings) with its default, lazy Adam. A
//! focused target for `perf`:
//!
//! ```text
//! cargo run --release -p mlless-core --example lr_step -- [STEPS] [cold]
//! perf record -g target/release/examples/lr_step 200
//! ```
//!
//! With `cold`, 64 MB are written between steps, as a worker's exchange (decoding its peers'
//! updates, averaging them) does between two of its steps, so that a step starts with the
//! caches of a real one rather than with its own last step's lines.

use std::time::{Duration, Instant};

use mlless_core::{
    Batch, GradientAccumulator, ModelSpec, OptimizerConfig, OptimizerKind, RatingBatch,
    SparseBatch, SparseVector, build_optimizer, mean_of,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn main() {
    let steps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let cold = std::env::args().nth(2).is_some_and(|a| a == "cold");
    let mut evict = if cold {
        vec![0_u8; 64 << 20]
    } else {
        Vec::new()
    };
    let mut between = move || {
        for (k, chunk) in evict.chunks_mut(4096).enumerate() {
            chunk.fill(k as u8);
        }
        std::hint::black_box(&evict);
    };
    lr(steps, &mut between);
    pmf(steps * 20, &mut between);
}

/// A minibatch of `rows` rows of `nnz` distinct features out of `features`, Zipf(1) popular.
fn zipf_batch(rng: &mut StdRng, rows: usize, nnz: usize, features: u32) -> SparseBatch {
    let mut perm: Vec<u32> = (0..features).collect();
    for i in (1..perm.len()).rev() {
        perm.swap(i, rng.random_range(0..=i));
    }
    let mut cumulative = Vec::with_capacity(features as usize);
    let mut total = 0.0_f64;
    for r in 0..features {
        total += 1.0 / f64::from(r + 1);
        cumulative.push(total);
    }
    let mut batch = SparseBatch::new();
    let mut row: Vec<u32> = Vec::new();
    for _ in 0..rows {
        row.clear();
        while row.len() < nnz {
            let u = rng.random::<f64>() * total;
            let rank = cumulative
                .partition_point(|&c| c < u)
                .min(features as usize - 1);
            let j = perm[rank];
            if !row.contains(&j) {
                row.push(j);
            }
        }
        row.sort_unstable();
        batch.push_row(f32::from(rng.random_bool(0.5)), &row, &vec![1.0; nnz]);
    }
    batch
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The milliseconds a model's training steps spent, summed over the timed steps.
struct StepTimes {
    gradient: f64,
    take: f64,
    optimizer: f64,
    apply: f64,
    /// Entries of the gradients, summed.
    touched: usize,
}

/// Runs `steps` training steps of `spec` (after two untimed ones) over `batches` in turn, with
/// `kind` at `rate`, calling `between` before each and `after` with each delta; times the
/// gradient, its `take()`, the optimiser's step and applying the delta.
fn timed_steps(
    spec: &ModelSpec,
    kind: OptimizerKind,
    rate: f32,
    batches: &[Batch],
    steps: usize,
    between: &mut dyn FnMut(),
    mut after: impl FnMut(&SparseVector),
) -> StepTimes {
    let model = spec.model();
    let mut params = spec.init_params(1);
    let mut optimizer = build_optimizer(&OptimizerConfig::new(kind), params.len());
    let mut acc = GradientAccumulator::new(params.len());
    let mut times = StepTimes {
        gradient: 0.0,
        take: 0.0,
        optimizer: 0.0,
        apply: 0.0,
        touched: 0,
    };
    for step in 0..steps + 2 {
        let batch = &batches[step % batches.len()];
        between();
        let t0 = Instant::now();
        model
            .gradient(&params, batch, &mut acc)
            .expect("valid batch");
        let t1 = Instant::now();
        let grad = acc.take();
        let t2 = Instant::now();
        let delta = optimizer.step(&params, &grad, rate);
        let t3 = Instant::now();
        delta.scaled_add_to(&mut params, 0.25);
        let t4 = Instant::now();
        if step >= 2 {
            times.gradient += ms(t1 - t0);
            times.take += ms(t2 - t1);
            times.optimizer += ms(t3 - t2);
            times.apply += ms(t4 - t3);
            times.touched += grad.nnz();
        }
        after(&delta);
    }
    times
}

fn lr(steps: usize, between: &mut dyn FnMut()) {
    let (features, rows, nnz) = (1_000_000_u32, 10_000, 30);
    let mut rng = StdRng::seed_from_u64(1);
    // A few distinct batches, so that a step does not find the last one's lines in the cache.
    let batches: Vec<Batch> = (0..4)
        .map(|_| Batch::Sparse(zipf_batch(&mut rng, rows, nnz, features)))
        .collect();
    let spec = ModelSpec::LogisticRegression {
        features,
        l2: 1e-5,
        init_bias: 0.0,
    };
    let mut last_deltas = Vec::new();
    // Sparse LR's default optimiser.
    let times = timed_steps(
        &spec,
        OptimizerKind::Momentum,
        0.5,
        &batches,
        steps,
        between,
        |delta| {
            last_deltas.push(delta.clone());
            if last_deltas.len() > 4 {
                last_deltas.remove(0);
            }
        },
    );
    let StepTimes {
        gradient,
        take,
        optimizer: momentum,
        apply,
        touched,
    } = times;
    let n = steps as f64;
    let compute = (gradient + take + momentum) / n;
    println!(
        "lr 1M features, 10,000 rows × 30 nnz, {:.0} touched: compute {compute:.2} ms/step \
         ({:.1} M nnz/s) = gradient {:.2} + take {:.2} + momentum {:.2}; apply {:.2} ms",
        touched as f64 / n,
        (rows * nnz) as f64 / compute / 1000.0,
        gradient / n,
        take / n,
        momentum / n,
        apply / n
    );
    // A P = 4 exchange's average of the last four steps' deltas, as every worker computes it.
    let refs: Vec<&SparseVector> = last_deltas.iter().collect();
    let mut mean = 0.0;
    for _ in 0..steps {
        between();
        let t = Instant::now();
        std::hint::black_box(mean_of(&refs));
        mean += ms(t.elapsed());
    }
    println!(
        "mean_of 4 deltas of {:.0} entries: {:.2} ms",
        touched as f64 / n,
        mean / n
    );
}

fn pmf(steps: usize, between: &mut dyn FnMut()) {
    let (users, items) = (943_u32, 1682_u32);
    let mut rng = StdRng::seed_from_u64(2);
    let batches: Vec<Batch> = (0..8)
        .map(|_| {
            let mut b = RatingBatch::default();
            for _ in 0..1000 {
                b.push(
                    rng.random_range(0..users),
                    rng.random_range(0..items),
                    rng.random_range(1..=5) as f32,
                );
            }
            Batch::Ratings(b)
        })
        .collect();
    let spec = ModelSpec::MatrixFactorization {
        users,
        items,
        factors: 10,
        l2: 0.02,
        mean: 3.5,
        init_std: 0.1,
        prior: 0.0,
    };
    let times = timed_steps(
        &spec,
        OptimizerKind::Adam,
        0.01,
        &batches,
        steps,
        between,
        |_| {},
    );
    let StepTimes {
        gradient,
        take,
        optimizer: adam,
        ..
    } = times;
    let n = steps as f64;
    let compute = (gradient + take + adam) / n;
    println!(
        "pmf 943 × 1,682 rank 10, 1,000 ratings: compute {:.3} ms/step ({:.2} M ratings/s) = \
         gradient {:.3} + take {:.3} + adam {:.3}",
        compute,
        1.0 / compute,
        gradient / n,
        take / n,
        adam / n
    );
}
