//! Tests of the MLP: gradients against finite differences, learning XOR and rings, evaluation, untrusted batches, the spec.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

use super::*;
use crate::metrics::EvaluationError;
use crate::model::ModelSpec;
use crate::model::testutil::{assert_close, finite_difference, spec_gradient};
use crate::{RatingBatch, SparseVector};

fn spec(features: u32, hidden: &[u32], classes: u32, l2: f32) -> ModelSpec {
    ModelSpec::Mlp {
        features,
        hidden: hidden.to_vec(),
        classes,
        l2,
    }
}

fn dense(v: &SparseVector, dim: usize) -> Vec<f32> {
    let mut d = vec![0.0; dim];
    v.scaled_add_to(&mut d, 1.0);
    d
}

/// The regularised objective in f64, written independently of the model (dense input,
/// triple loops): the mean over rows of the cross-entropy plus the per-example L2, l2/2 ·
/// Σ w² over the W1 rows of the row's stored features and every later weight.
fn objective(
    features: usize,
    hidden: &[usize],
    classes: usize,
    batch: &SparseBatch,
    l2: f64,
    x: &[f64],
) -> f64 {
    let mut widths = vec![features];
    widths.extend_from_slice(hidden);
    widths.push(classes);
    let layers = widths.len() - 1;
    let (mut w_at, mut b_at, mut next) = (Vec::new(), Vec::new(), 0);
    for k in 0..layers {
        w_at.push(next);
        next += widths[k] * widths[k + 1];
        b_at.push(next);
        next += widths[k + 1];
    }
    assert_eq!(next, x.len());
    let mut sum = 0.0;
    for (label, idx, vals) in batch.iter_rows() {
        let mut a = vec![0.0; features];
        for (&j, &v) in idx.iter().zip(vals) {
            a[j as usize] += f64::from(v);
        }
        for k in 0..layers {
            let mut z = x[b_at[k]..b_at[k] + widths[k + 1]].to_vec();
            for (i, &ai) in a.iter().enumerate() {
                for (o, zo) in z.iter_mut().enumerate() {
                    *zo += ai * x[w_at[k] + i * widths[k + 1] + o];
                }
            }
            if k + 1 < layers {
                z.iter_mut().for_each(|v| *v = v.max(0.0));
            }
            a = z;
        }
        let max = a.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + a.iter().map(|z| (z - max).exp()).sum::<f64>().ln();
        sum += lse - a[label as usize];
        let h1 = widths[1];
        for &j in idx {
            let row = j as usize * h1;
            sum += 0.5 * l2 * x[row..row + h1].iter().map(|w| w * w).sum::<f64>();
        }
        for k in 1..layers {
            sum += 0.5 * l2 * x[w_at[k]..b_at[k]].iter().map(|w| w * w).sum::<f64>();
        }
    }
    sum / batch.rows() as f64
}

fn check_gradient(hidden: &[u32], seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (features, classes, l2) = (9_u32, 3_u32, 0.2_f32);
    let mut batch = SparseBatch::new();
    for r in 0..6 {
        // The last feature is never stored.
        let mut idx: Vec<u32> = (0..3).map(|_| rng.random_range(0..features - 1)).collect();
        idx.sort_unstable();
        idx.dedup();
        let vals: Vec<f32> = idx.iter().map(|_| rng.sample(StandardNormal)).collect();
        batch.push_row((r % classes) as f32, &idx, &vals);
    }
    let mut touched: Vec<u32> = batch.indices.clone();
    touched.sort_unstable();
    touched.dedup();
    assert!(touched.len() < features as usize, "some features untouched");
    assert!(touched.len() < batch.nnz(), "some features touched twice");

    let spec = spec(features, hidden, classes, l2);
    spec.validate().unwrap();
    let n = spec.num_params();
    // Random biases too, so that every parameter matters.
    let params: Vec<f32> = (0..n)
        .map(|_| rng.sample::<f32, _>(StandardNormal) * 0.7)
        .collect();
    let mut acc = GradientAccumulator::new(n);
    let loss = spec
        .model()
        .gradient(&params, &Batch::Sparse(batch.clone()), &mut acc)
        .unwrap();
    let grad = acc.take();

    let h1 = hidden[0] as usize;
    let widths: Vec<usize> = hidden.iter().map(|&w| w as usize).collect();
    let x: Vec<f64> = params.iter().map(|&v| f64::from(v)).collect();
    let data = objective(
        features as usize,
        &widths,
        classes as usize,
        &batch,
        0.0,
        &x,
    );
    assert_close(loss.mean(), data, 1e-6, "batch loss");
    assert_eq!(loss.count, 6);

    // Exactly the W1 rows of the batch's features, and everything after W1.
    let mut support: Vec<usize> = touched
        .iter()
        .flat_map(|&j| j as usize * h1..(j as usize + 1) * h1)
        .collect();
    support.extend(features as usize * h1..n);
    let got: Vec<usize> = grad.indices().iter().map(|&j| j as usize).collect();
    assert_eq!(got, support);

    let f = |x: &[f64]| {
        objective(
            features as usize,
            &widths,
            classes as usize,
            &batch,
            f64::from(l2),
            x,
        )
    };
    let g = dense(&grad, n);
    for (j, want) in finite_difference(f, &x, 0..n) {
        assert_close(f64::from(g[j]), want, 1e-4, &format!("d/dθ_{j}"));
    }
}

#[test]
fn gradient_matches_finite_differences_one_hidden_layer() {
    check_gradient(&[5], 1);
}

#[test]
fn gradient_matches_finite_differences_two_hidden_layers() {
    check_gradient(&[4, 3], 2);
}

/// Dense 2-D rows (both coordinates stored, zeros included).
fn points(data: &[([f32; 2], u32)]) -> SparseBatch {
    let mut batch = SparseBatch::new();
    for &(p, label) in data {
        batch.push_row(label as f32, &[0, 1], &p);
    }
    batch
}

/// Full-batch plain SGD for `steps` steps; the loss of every step.
fn sgd(spec: &ModelSpec, params: &mut [f32], batch: &Batch, lr: f32, steps: usize) -> Vec<f64> {
    let model = spec.model();
    let mut acc = GradientAccumulator::new(params.len());
    (0..steps)
        .map(|_| {
            let loss = model.gradient(params, batch, &mut acc).unwrap();
            acc.take().scaled_add_to(params, -lr);
            loss.mean()
        })
        .collect()
}

fn accuracy(spec: &ModelSpec, params: &[f32], batch: &Batch) -> f64 {
    let mut eval = spec.evaluation();
    spec.model().evaluate(params, batch, &mut eval).unwrap();
    eval.finish()["test_accuracy"]
}

#[test]
fn sgd_lowers_the_loss_on_xor() {
    let xor = Batch::Sparse(points(&[
        ([0.0, 0.0], 0),
        ([0.0, 1.0], 1),
        ([1.0, 0.0], 1),
        ([1.0, 1.0], 0),
    ]));
    let spec = spec(2, &[8], 2, 0.0);
    let mut params = spec.init_params(3);
    let losses = sgd(&spec, &mut params, &xor, 0.5, 400);
    let (first, end) = (losses[0], losses[losses.len() - 1]);
    assert!(end < 0.1 * first, "loss {first} -> {end}");
    assert!(losses[100] < first && end < losses[100]);
    assert_eq!(accuracy(&spec, &params, &xor), 1.0);
}

/// Two concentric classes in the plane: radius below 1 (class 0) or in 1.6..2.4 (class 1).
fn rings(rng: &mut StdRng, n: usize) -> Batch {
    let data: Vec<([f32; 2], u32)> = (0..n)
        .map(|k| {
            let label = (k % 2) as u32;
            let r = if label == 0 {
                rng.random_range(0.0..1.0)
            } else {
                rng.random_range(1.6..2.4)
            };
            let angle = rng.random_range(0.0..std::f32::consts::TAU);
            ([r * angle.cos(), r * angle.sin()], label)
        })
        .collect();
    Batch::Sparse(points(&data))
}

#[test]
fn learns_rings_that_logistic_regression_cannot() {
    let mut rng = StdRng::seed_from_u64(5);
    let (train, test) = (rings(&mut rng, 300), rings(&mut rng, 300));

    let mlp = spec(2, &[16, 16], 2, 1e-4);
    let mut params = mlp.init_params(9);
    let losses = sgd(&mlp, &mut params, &train, 0.2, 600);
    let mlp_accuracy = accuracy(&mlp, &params, &test);
    assert!(
        mlp_accuracy >= 0.95,
        "mlp accuracy {mlp_accuracy}, loss {} -> {}",
        losses[0],
        losses[losses.len() - 1]
    );

    let lr = ModelSpec::LogisticRegression {
        features: 2,
        l2: 1e-4,
        init_bias: 0.0,
    };
    let mut params = lr.init_params(9);
    sgd(&lr, &mut params, &train, 0.2, 600);
    let lr_accuracy = accuracy(&lr, &params, &test);
    assert!(lr_accuracy < 0.7, "lr accuracy {lr_accuracy}");
}

#[test]
fn evaluation_agrees_with_the_training_loss() {
    let mut rng = StdRng::seed_from_u64(8);
    let batch = rings(&mut rng, 50);
    let spec = spec(2, &[6], 2, 0.0);
    let params = spec.init_params(1);
    let (loss, _) = spec_gradient(&spec, &params, &batch);
    let mut eval = spec.evaluation();
    spec.model().evaluate(&params, &batch, &mut eval).unwrap();
    let m = eval.finish();
    assert_eq!(m["test_samples"], 50.0);
    assert_close(m["test_logloss"], loss.mean(), 1e-9, "mean cross-entropy");
}

#[test]
fn errors_for_untrusted_batches() {
    let spec = spec(5, &[4], 3, 0.1);
    let model = spec.model();
    let params = spec.init_params(0);
    let n = spec.num_params();
    let mut acc = GradientAccumulator::new(n);
    let mut eval = spec.evaluation();
    let mut run = |batch: SparseBatch, acc: &mut GradientAccumulator| {
        let batch = Batch::Sparse(batch);
        let err = model.evaluate(&params, &batch, &mut eval).err();
        let got = model.gradient(&params, &batch, acc);
        // Compared as text: a NaN label is not equal to itself.
        let text = |e: Option<&ModelError>| format!("{e:?}");
        assert_eq!(
            text(got.as_ref().err()),
            text(err.as_ref()),
            "gradient and evaluate agree"
        );
        got
    };

    for label in [3.0, -1.0, 0.5, f32::NAN, f32::INFINITY] {
        let mut b = SparseBatch::new();
        b.push_row(2.0, &[0], &[1.0]);
        b.push_row(label, &[1], &[1.0]);
        let err = run(b, &mut acc).unwrap_err();
        assert!(
            matches!(
                err,
                ModelError::BadClassLabel {
                    row: 1,
                    classes: 3,
                    ..
                }
            ),
            "label {label}: {err:?}"
        );
    }
    let mut b = SparseBatch::new();
    b.push_row(1.0, &[0, 5], &[1.0, 1.0]);
    assert_eq!(
        run(b, &mut acc),
        Err(ModelError::FeatureOutOfRange {
            row: 0,
            index: 5,
            features: 5
        })
    );
    let mut b = SparseBatch::new();
    b.push_row(0.0, &[2], &[f32::INFINITY]);
    assert!(matches!(
        run(b, &mut acc),
        Err(ModelError::NonFiniteFeature {
            row: 0,
            index: 2,
            ..
        })
    ));
    let mut b = SparseBatch::new();
    b.push_row(0.0, &[2, 3], &[1.0, 1.0]);
    b.offsets[1] = 9;
    assert!(matches!(
        run(b, &mut acc),
        Err(ModelError::MalformedBatch { .. })
    ));

    let mut ratings = RatingBatch::default();
    ratings.push(0, 0, 1.0);
    assert_eq!(
        model.gradient(&params, &Batch::Ratings(ratings), &mut acc),
        Err(ModelError::WrongBatchKind {
            model: "mlp",
            expected: "sparse",
            got: "ratings"
        })
    );
    let ok = Batch::Sparse(points(&[([1.0, 2.0], 2)]));
    assert!(matches!(
        model.gradient(&params[1..], &ok, &mut acc),
        Err(ModelError::ParamsLength { .. })
    ));
    assert!(matches!(
        model.gradient(&params, &ok, &mut GradientAccumulator::new(n + 1)),
        Err(ModelError::AccumulatorDim { .. })
    ));
    let mut binary = Evaluation::binary();
    assert!(matches!(
        model.evaluate(&params, &ok, &mut binary),
        Err(ModelError::Evaluation(EvaluationError::Kind { .. }))
    ));
    // An untrainable shape fails instead of panicking.
    let flat = Mlp::new(2, &[], 2, 0.0);
    assert!(matches!(
        flat.gradient(&vec![0.0; flat.num_params()], &ok, &mut acc),
        Err(ModelError::InvalidSpec { .. })
    ));
    // Nothing was left behind.
    assert!(acc.is_empty());
    assert_eq!(eval.samples(), 0);
    assert_eq!(binary.samples(), 0);
    // An empty batch is fine; a valid one works.
    let empty = model.gradient(&params, &Batch::Sparse(SparseBatch::default()), &mut acc);
    assert_eq!(empty, Ok(BatchLoss::default()));
    assert!(acc.is_empty());
    assert_eq!(model.gradient(&params, &ok, &mut acc).unwrap().count, 1);
}

#[test]
fn spec_shape_params_and_validation() {
    let s = spec(28, &[64, 64], 2, 1e-4);
    assert_eq!(s.name(), "mlp");
    let want = 28 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2;
    assert_eq!(s.num_params(), want);
    assert_eq!(s.model().num_params(), want);
    assert!(s.validate().is_ok());
    assert_eq!(spec(3, &[5], 4, 0.0).num_params(), 3 * 5 + 5 + 5 * 4 + 4);

    for bad in [
        spec(3, &[], 2, 0.0),
        spec(3, &[2, 2, 2], 2, 0.0),
        spec(3, &[2, 0], 2, 0.0),
        spec(3, &[2], 1, 0.0),
        spec(3, &[2], 2, -1.0),
        spec(3, &[2], 2, f32::NAN),
        spec(u32::MAX, &[u32::MAX], 2, 0.0),
    ] {
        assert!(
            matches!(bad.validate(), Err(ModelError::InvalidSpec { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn init_is_seeded_he_normal_with_zero_biases() {
    let s = spec(200, &[50, 40], 3, 0.0);
    let (a, b, c) = (s.init_params(42), s.init_params(42), s.init_params(43));
    assert_eq!(a.len(), s.num_params());
    assert_eq!(a, b);
    assert_ne!(a, c);
    let std =
        |w: &[f32]| (w.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / w.len() as f64).sqrt();
    let (w1, rest) = a.split_at(200 * 50);
    let (b1, rest) = rest.split_at(50);
    let (w2, rest) = rest.split_at(50 * 40);
    let (b2, rest) = rest.split_at(40);
    let (wo, bo) = rest.split_at(40 * 3);
    assert_eq!(bo.len(), 3);
    for bias in [b1, b2, bo] {
        assert!(bias.iter().all(|&x| x == 0.0));
    }
    for (w, fan_in) in [(w1, 200.0), (w2, 50.0), (wo, 40.0)] {
        let want = (2.0_f64 / fan_in).sqrt();
        assert!(
            (std(w) / want - 1.0).abs() < 0.15,
            "std {} vs {want}",
            std(w)
        );
    }
}

#[test]
fn spec_serialises_in_snake_case() {
    let s = spec(4, &[3, 2], 5, 0.5);
    let json = serde_json::to_string(&s).unwrap();
    assert_eq!(
        json,
        r#"{"mlp":{"features":4,"hidden":[3,2],"classes":5,"l2":0.5}}"#
    );
    assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), s);
}

/// `cargo test -p mlless-core --release -- --ignored --nocapture gradient_benchmark`
#[test]
#[ignore = "micro benchmark; run explicitly, in release"]
fn gradient_benchmark() {
    let mut rng = StdRng::seed_from_u64(4);
    let spec = spec(28, &[64, 64], 2, 1e-4);
    let mut batch = SparseBatch::new();
    let all: Vec<u32> = (0..28).collect();
    for _ in 0..128 {
        let vals: Vec<f32> = (0..28).map(|_| rng.sample(StandardNormal)).collect();
        batch.push_row(f32::from(rng.random_bool(0.5)), &all, &vals);
    }
    let batch = Batch::Sparse(batch);
    let model = spec.model();
    let params = spec.init_params(1);
    let mut acc = GradientAccumulator::new(params.len());
    let time = |iters: u32, take: bool, acc: &mut GradientAccumulator| {
        let start = std::time::Instant::now();
        for _ in 0..iters {
            model.gradient(&params, &batch, acc).unwrap();
            if take {
                std::hint::black_box(acc.take());
            } else {
                acc.clear();
            }
        }
        start.elapsed() / iters
    };
    time(200, true, &mut acc);
    let grad = time(2000, false, &mut acc);
    let with_take = time(2000, true, &mut acc);
    let start = std::time::Instant::now();
    for _ in 0..2000 {
        let mut eval = Evaluation::multiclass();
        model.evaluate(&params, &batch, &mut eval).unwrap();
        std::hint::black_box(eval);
    }
    let forward = start.elapsed() / 2000;
    println!(
        "mlp 28-64-64-2, 128 rows: gradient {grad:?} per batch, gradient + take \
         {with_take:?}, forward only (evaluate) {forward:?}"
    );
}
