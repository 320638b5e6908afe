//! The generators' tests.

use std::io;
use std::path::Path;

use mlless_core::SparseBatch;

use super::shared::{push_fixed4, push_u64, round4, stream_rng, write_dense_libsvm};
use super::sparse_lr::AliasTable;
use super::*;
use crate::parse::{InputFormat, ParseOptions, Parsed, parse_reader};

fn parse(bytes: &[u8], format: InputFormat) -> Parsed {
    parse_reader(
        bytes,
        Path::new("generated"),
        format,
        &ParseOptions::default(),
    )
    .unwrap()
}

#[test]
fn formatting_helpers() {
    let mut out = Vec::new();
    push_u64(&mut out, 0);
    out.push(b' ');
    push_u64(&mut out, 18_446_744_073_709_551_615);
    out.push(b' ');
    assert_eq!(push_fixed4(&mut out, -0.49996), -5000);
    out.push(b' ');
    assert_eq!(push_fixed4(&mut out, 1.23456), 12346);
    out.push(b' ');
    push_fixed4(&mut out, -0.00001);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "0 18446744073709551615 -0.5000 1.2346 0.0000"
    );
}

#[test]
fn alias_table_matches_its_distribution() {
    let weights = [5.0, 1.0, 0.0, 2.0, 2.0];
    let table = AliasTable::new(&weights);
    let mut rng = stream_rng(1, 1);
    let mut counts = [0u32; 5];
    let n = 200_000;
    for _ in 0..n {
        counts[table.sample(&mut rng) as usize] += 1;
    }
    assert_eq!(counts[2], 0);
    for (c, w) in counts.iter().zip(weights) {
        let expected = f64::from(n) * w / 10.0;
        assert!(
            (f64::from(*c) - expected).abs() < 0.02 * f64::from(n),
            "{counts:?}"
        );
    }
}

#[test]
fn sparse_lr_is_deterministic_and_valid() {
    let spec = SparseLrSpec::new(500, 2000, 20, 42);
    let mut a = Vec::new();
    let truth_a = write_sparse_lr(&spec, &mut a).unwrap();
    let mut b = Vec::new();
    let truth_b = write_sparse_lr(&spec, &mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(truth_a, truth_b);
    assert_eq!(truth_a, sparse_lr_truth(&spec));
    let mut c = Vec::new();
    write_sparse_lr(
        &SparseLrSpec {
            seed: 43,
            ..spec.clone()
        },
        &mut c,
    )
    .unwrap();
    assert_ne!(a, c);

    assert_eq!(truth_a.weights.len(), 2000);
    assert_eq!(truth_a.weights.iter().filter(|w| **w != 0.0).count(), 1000);
    let Parsed::Sparse { rows, features, .. } = parse(&a, InputFormat::Libsvm) else {
        panic!()
    };
    assert_eq!(rows.rows(), 500);
    assert!(features <= 2000);
    assert!(rows.iter_rows().all(|(l, idx, val)| {
        (l == 0.0 || l == 1.0)
            && idx.len() == 20
            && idx.windows(2).all(|w| w[0] < w[1])
            && val.iter().all(|&v| v == 1.0)
    }));
}

#[test]
fn sparse_lr_truth_explains_its_data() {
    let spec = SparseLrSpec::new(20_000, 10_000, 30, 7);
    let mut text = Vec::new();
    let truth = write_sparse_lr(&spec, &mut text).unwrap();
    let Parsed::Sparse {
        rows, label_map, ..
    } = parse(&text, InputFormat::Libsvm)
    else {
        panic!()
    };
    // Both classes occur and the LIBSVM parser keeps 0/1 as they are.
    assert_eq!(
        label_map,
        Some(crate::manifest::LabelMap {
            negative: 0.0,
            positive: 1.0
        })
    );
    // The 1-based indices written come back as the 0-based ids of the truth. Data whose
    // largest index is below 10_000 is parsed with fewer features, which is fine.
    let loss = truth.log_loss(&rows);
    // Margin std 2 gives an expected log loss of about 0.45.
    assert!(loss < 0.52 && loss > 0.38, "log loss {loss}");
    // Margins have about the asked-for standard deviation.
    let margins: Vec<f64> = rows
        .iter_rows()
        .map(|(_, i, v)| truth.margin(i, v))
        .collect();
    let mean = margins.iter().sum::<f64>() / margins.len() as f64;
    let var = margins.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / margins.len() as f64;
    assert!((var.sqrt() - 2.0).abs() < 0.3, "margin std {}", var.sqrt());
    // A model that ignores the features does much worse.
    let zero = SparseLrTruth {
        weights: vec![0.0; 10_000],
        bias: 0.0,
    };
    assert!((zero.log_loss(&rows) - std::f64::consts::LN_2).abs() < 1e-9);
}

#[test]
fn sparse_lr_positive_rate_and_binary_values() {
    // Web-like: 300 binary features, 12 per row, 3% positive; a9a-like: 24% positive.
    for (rate, seed) in [(0.03, 11), (0.24, 12)] {
        let spec = SparseLrSpec {
            positive_rate: Some(rate),
            ..SparseLrSpec::new(40_000, 300, 12, seed)
        };
        let mut text = Vec::new();
        let truth = write_sparse_lr(&spec, &mut text).unwrap();
        let mut again = Vec::new();
        assert_eq!(write_sparse_lr(&spec, &mut again).unwrap(), truth);
        assert_eq!(text, again, "deterministic per seed");
        assert!(
            truth.bias < -0.5,
            "the bias moves towards the minority: {}",
            truth.bias
        );
        let Parsed::Sparse { rows, .. } = parse(&text, InputFormat::Libsvm) else {
            panic!()
        };
        let positives = rows.labels.iter().filter(|&&l| l == 1.0).count();
        let observed = positives as f64 / rows.rows() as f64;
        // Binomial sd at 40k rows is below 0.0022; the calibration's own error is smaller.
        assert!(
            (observed - rate).abs() < 0.006,
            "positive rate {observed}, asked for {rate}"
        );
        assert!(rows.values.iter().all(|&v| v == 1.0), "binary values");
        // The truth explains the data better than the base rate alone.
        let base = -(rate * rate.ln() + (1.0 - rate) * (1.0 - rate).ln());
        assert!(truth.log_loss(&rows) < 0.9 * base);
    }
    // Without a rate the bias stays 0 and the data is today's.
    assert_eq!(
        sparse_lr_truth(&SparseLrSpec::new(10, 300, 12, 11)).bias,
        0.0
    );
    let bad = SparseLrSpec {
        positive_rate: Some(1.0),
        ..SparseLrSpec::new(10, 300, 12, 11)
    };
    assert!(write_sparse_lr(&bad, io::sink()).is_err());
}

#[test]
fn sparse_lr_real_values() {
    let spec = SparseLrSpec {
        values: FeatureValues::Real,
        ..SparseLrSpec::new(20_000, 2_000, 20, 5)
    };
    let mut text = Vec::new();
    let truth = write_sparse_lr(&spec, &mut text).unwrap();
    let Parsed::Sparse { rows, .. } = parse(&text, InputFormat::Libsvm) else {
        panic!()
    };
    assert!(rows.values.iter().all(|&v| v > 0.0 && v <= 2.0));
    let mean = rows.values.iter().map(|&v| f64::from(v)).sum::<f64>() / rows.nnz() as f64;
    assert!((mean - 1.0).abs() < 0.02, "mean value {mean}");
    assert!(rows.values.iter().any(|&v| v != 1.0));
    // The labels follow the truth with these values: its log loss is that of margin std 2.
    let loss = truth.log_loss(&rows);
    assert!(loss < 0.52 && loss > 0.38, "log loss {loss}");
}

#[test]
fn feature_popularity_is_skewed() {
    let spec = SparseLrSpec::new(5_000, 10_000, 10, 3);
    let mut text = Vec::new();
    write_sparse_lr(&spec, &mut text).unwrap();
    let Parsed::Sparse { rows, .. } = parse(&text, InputFormat::Libsvm) else {
        panic!()
    };
    let mut counts = vec![0u32; 10_000];
    rows.indices.iter().for_each(|&i| counts[i as usize] += 1);
    counts.sort_unstable_by(|a, b| b.cmp(a));
    // Zipf(1) over 10k features: the top 1% carry ~half of the draws, and hundreds of
    // features are never drawn at all.
    let top: u32 = counts[..100].iter().sum();
    assert!(f64::from(top) / rows.indices.len() as f64 > 0.4);
    assert!(counts.iter().filter(|&&c| c == 0).count() > 100);
}

#[test]
fn dense_rows_use_the_fallback_sampler() {
    // Every feature in every row: rejection alone would take forever on the last ones.
    let spec = SparseLrSpec {
        zipf_exponent: 3.0,
        ..SparseLrSpec::new(50, 64, 64, 1)
    };
    let mut text = Vec::new();
    write_sparse_lr(&spec, &mut text).unwrap();
    let Parsed::Sparse { rows, .. } = parse(&text, InputFormat::Libsvm) else {
        panic!()
    };
    assert!(
        rows.iter_rows()
            .all(|(_, idx, _)| idx == (0..64).collect::<Vec<_>>())
    );
}

#[test]
fn invalid_specs_are_rejected() {
    let bad = [
        SparseLrSpec::new(10, 0, 1, 0),
        SparseLrSpec::new(10, 5, 6, 0),
        SparseLrSpec::new(10, 5, 0, 0),
        SparseLrSpec {
            informative: 6,
            ..SparseLrSpec::new(10, 5, 1, 0)
        },
        SparseLrSpec {
            zipf_exponent: f64::NAN,
            ..SparseLrSpec::new(10, 5, 1, 0)
        },
    ];
    for spec in bad {
        let err = write_sparse_lr(&spec, io::sink()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{spec:?}");
    }
    let spec = |density, noise| RatingsSpec {
        users: 2,
        items: 2,
        rank: 1,
        density,
        noise,
        seed: 0,
        ..Default::default()
    };
    for s in [
        spec(0.0, 0.1),
        spec(1.5, 0.1),
        spec(0.5, -1.0),
        RatingsSpec {
            rank: 0,
            ..spec(0.5, 0.1)
        },
        RatingsSpec {
            skew: -0.1,
            ..spec(0.5, 0.1)
        },
        RatingsSpec {
            skew: f64::NAN,
            ..spec(0.5, 0.1)
        },
    ] {
        assert!(write_ratings(&s, io::sink()).is_err(), "{s:?}");
    }
}

fn ratings_spec(noise: f64, seed: u64) -> RatingsSpec {
    RatingsSpec {
        users: 1000,
        items: 500,
        rank: 8,
        density: 0.05,
        noise,
        seed,
        ..Default::default()
    }
}

#[test]
fn ratings_count_mean_and_determinism() {
    let spec = ratings_spec(0.5, 11);
    let mut a = Vec::new();
    let truth = write_ratings(&spec, &mut a).unwrap();
    let mut b = Vec::new();
    assert_eq!(write_ratings(&spec, &mut b).unwrap(), truth);
    assert_eq!(a, b);
    let mut c = Vec::new();
    write_ratings(&ratings_spec(0.5, 12), &mut c).unwrap();
    assert_ne!(a, c);

    // 25_000 expected, standard deviation ~155.
    let expected = spec.expected_ratings();
    assert!(
        (truth.ratings as f64 - expected).abs() < 0.03 * expected,
        "{} ratings, expected {expected}",
        truth.ratings
    );
    assert!((truth.mean - 3.0).abs() < 0.1, "mean {}", truth.mean);
    assert_eq!(truth.noise, 0.5);

    let Parsed::Ratings {
        ratings,
        users,
        items,
    } = parse(&a, InputFormat::Movielens)
    else {
        panic!()
    };
    assert_eq!(ratings.len() as u64, truth.ratings);
    assert!(users <= 1000 && users > 900 && items <= 500 && items > 450);
    let mean = ratings.ratings.iter().map(|&r| f64::from(r)).sum::<f64>() / ratings.len() as f64;
    assert!((mean - truth.mean).abs() < 1e-4);
    // Var = 0.3² + 0.3² + 1 + 0.5² ≈ 1.43 (factor sampling adds some spread).
    let var = ratings
        .ratings
        .iter()
        .map(|&r| (f64::from(r) - mean).powi(2))
        .sum::<f64>()
        / ratings.len() as f64;
    assert!((1.15..1.75).contains(&var), "variance {var}");
}

#[test]
fn ratings_noise_has_the_asked_for_std() {
    // Same seed: same factors and same pairs, so the difference is exactly the noise.
    let mut clean = Vec::new();
    write_ratings(&ratings_spec(0.0, 5), &mut clean).unwrap();
    let mut noisy = Vec::new();
    write_ratings(&ratings_spec(0.7, 5), &mut noisy).unwrap();
    let ratings = |t: &[u8]| match parse(t, InputFormat::Movielens) {
        Parsed::Ratings { ratings, .. } => ratings,
        _ => panic!(),
    };
    let (clean, noisy) = (ratings(&clean), ratings(&noisy));
    assert_eq!(clean.users, noisy.users);
    assert_eq!(clean.items, noisy.items);
    let n = clean.len() as f64;
    let diffs: Vec<f64> = clean
        .ratings
        .iter()
        .zip(&noisy.ratings)
        .map(|(&a, &b)| f64::from(b) - f64::from(a))
        .collect();
    let mean = diffs.iter().sum::<f64>() / n;
    let std = (diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / n).sqrt();
    assert!(mean.abs() < 0.03, "noise mean {mean}");
    assert!((std - 0.7).abs() < 0.02, "noise std {std}");
}

/// Ratings per user and per item of a generated set, and its ratings.
fn rating_counts(spec: &RatingsSpec) -> (Vec<u32>, Vec<u32>, Vec<f32>, RatingsTruth) {
    let mut out = Vec::new();
    let truth = write_ratings(spec, &mut out).unwrap();
    let mut users = vec![0u32; spec.users as usize];
    let mut items = vec![0u32; spec.items as usize];
    let mut ratings = Vec::new();
    for line in String::from_utf8(out).unwrap().lines() {
        let f: Vec<&str> = line.split('\t').collect();
        users[f[0].parse::<usize>().unwrap() - 1] += 1;
        items[f[1].parse::<usize>().unwrap() - 1] += 1;
        ratings.push(f[2].parse::<f32>().unwrap());
    }
    (users, items, ratings, truth)
}

/// The share of all ratings held by the most rated tenth.
fn top_tenth_share(counts: &[u32]) -> f64 {
    let mut sorted = counts.to_vec();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    let top: u32 = sorted[..sorted.len() / 10].iter().sum();
    f64::from(top) / f64::from(sorted.iter().sum::<u32>())
}

#[test]
fn skewed_ratings_fall_on_few_users_and_items_as_real_ones_do() {
    let spec = RatingsSpec {
        users: 943,
        items: 1682,
        density: 0.063,
        noise: 0.8,
        skew: 1.3,
        seed: 4,
        ..Default::default()
    };
    let (users, items, _, truth) = rating_counts(&spec);
    let expected = spec.expected_ratings();
    assert!(
        (truth.ratings as f64 - expected).abs() < 0.01 * expected,
        "{} ratings, expected {expected}",
        truth.ratings
    );
    // Every user rates something, none more than half the items.
    assert!(users.iter().all(|c| (1..=841).contains(c)), "{users:?}");
    // The most rated tenth of the items holds most of the ratings (uniform: a tenth), and many
    // items are rated a few times.
    let item_share = top_tenth_share(&items);
    assert!(item_share > 0.4, "top tenth of items: {item_share}");
    assert!(items.iter().filter(|&&c| c <= 5).count() >= 10);
    // Users are less unequal than items, but far from uniform.
    let user_share = top_tenth_share(&users);
    assert!(
        (0.2..item_share).contains(&user_share),
        "top tenth of users: {user_share}"
    );
    let uniform = RatingsSpec {
        skew: 0.0,
        ..spec.clone()
    };
    let (_, uniform_items, _, _) = rating_counts(&uniform);
    assert!(top_tenth_share(&uniform_items) < 0.15);
    // Deterministic.
    assert_eq!(rating_counts(&spec).1, items);
}

#[test]
fn stars_are_whole_and_the_truth_says_what_rounding_costs() {
    let spec = RatingsSpec {
        users: 300,
        items: 200,
        density: 0.2,
        noise: 0.5,
        stars: true,
        seed: 9,
        ..Default::default()
    };
    let (_, _, ratings, truth) = rating_counts(&spec);
    assert!(
        ratings
            .iter()
            .all(|&r| r.fract() == 0.0 && (1.0..=5.0).contains(&r))
    );
    assert!((1..=5).all(|star| ratings.contains(&(star as f32))));
    // Rounding the ratings adds error beyond the noise.
    assert!(
        truth.model_rmse > 0.5 && truth.model_rmse < 0.8,
        "{}",
        truth.model_rmse
    );
    let (_, _, _, smooth) = rating_counts(&RatingsSpec {
        stars: false,
        ..spec
    });
    assert!(
        (smooth.model_rmse - 0.5).abs() < 0.02,
        "{}",
        smooth.model_rmse
    );
}

#[test]
fn full_density_writes_every_pair_in_order() {
    let spec = RatingsSpec {
        users: 3,
        items: 4,
        rank: 2,
        density: 1.0,
        noise: 0.1,
        seed: 1,
        ..Default::default()
    };
    let mut out = Vec::new();
    let truth = write_ratings(&spec, &mut out).unwrap();
    assert_eq!(truth.ratings, 12);
    let text = String::from_utf8(out).unwrap();
    let pairs: Vec<(u32, u32)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 4);
            assert_eq!(f[3], "0");
            assert_eq!(f[2].split('.').nth(1).unwrap().len(), 4);
            (f[0].parse().unwrap(), f[1].parse().unwrap())
        })
        .collect();
    let expected: Vec<(u32, u32)> = (1..=3).flat_map(|u| (1..=4).map(move |i| (u, i))).collect();
    assert_eq!(pairs, expected);
}

/// Parses dense LIBSVM output and checks it has `dims` features, every one in every row.
fn parse_dense(bytes: &[u8], dims: u32) -> (SparseBatch, Option<crate::manifest::LabelMap>) {
    let Parsed::Sparse {
        rows,
        features,
        label_map,
        ..
    } = parse(bytes, InputFormat::Libsvm)
    else {
        panic!("expected sparse rows")
    };
    assert_eq!(features, dims);
    let all: Vec<u32> = (0..dims).collect();
    assert!(
        rows.iter_rows().all(|(_, idx, _)| idx == all),
        "a row is not dense"
    );
    (rows, label_map)
}

/// The fraction of rows whose label is `predict(values)`.
fn accuracy(rows: &SparseBatch, predict: impl Fn(&[f32]) -> u32) -> f64 {
    let right = rows
        .iter_rows()
        .filter(|(label, _, values)| *label == predict(values) as f32)
        .count();
    right as f64 / rows.rows() as f64
}

/// Mean and standard deviation of column `j` of dense rows.
fn column_stats(rows: &SparseBatch, j: usize) -> (f64, f64) {
    let column: Vec<f64> = rows.iter_rows().map(|(_, _, v)| f64::from(v[j])).collect();
    let n = column.len() as f64;
    let mean = column.iter().sum::<f64>() / n;
    let var = column.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Writes with `seed`; checks that the seed decides the output and the truth.
fn check_deterministic<T: PartialEq + std::fmt::Debug>(
    write: impl Fn(u64, &mut Vec<u8>) -> io::Result<T>,
) {
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    let truth = write(5, &mut a).unwrap();
    assert_eq!(write(5, &mut b).unwrap(), truth);
    assert_eq!(a, b);
    write(6, &mut c).unwrap();
    assert_ne!(a, c);
}

#[test]
fn dense_writer_lists_every_feature_zeros_included() {
    let mut out = Vec::new();
    let mut rows = [[0.0, -1.23456, 2.0], [0.00004, 3.0, -0.5]].into_iter();
    let mut label = 0;
    write_dense_libsvm(&mut out, 2, 3, |x| {
        x.copy_from_slice(&rows.next().unwrap());
        label += 1;
        label
    })
    .unwrap();
    assert_eq!(
        String::from_utf8(out.clone()).unwrap(),
        "1 1:0.0000 2:-1.2346 3:2.0000\n2 1:0.0000 2:3.0000 3:-0.5000\n"
    );
    // The parser keeps the written zeros, so the rows stay dense.
    let (rows, _) = parse_dense(&out, 3);
    assert_eq!(rows.values, vec![0.0, -1.2346, 2.0, 0.0, 3.0, -0.5]);
    assert_eq!(round4(-1.23456), -1.2346);
}

#[test]
fn dense_generators_are_deterministic() {
    check_deterministic(|seed, out| write_dense_lr(&DenseLrSpec::new(300, 28, seed), out));
    check_deterministic(|seed, out| write_rings(&RingsSpec::new(300, 3, seed), out));
    check_deterministic(|seed, out| write_blobs(&BlobsSpec::new(300, 4, 5, seed), out));
    // The model does not depend on the number of samples.
    let model = |samples| {
        let mut truth = write_dense_lr(&DenseLrSpec::new(samples, 28, 1), io::sink()).unwrap();
        truth.bayes_log_loss = 0.0;
        truth.log_loss = 0.0;
        truth.positive_fraction = 0.0;
        truth
    };
    assert_eq!(model(10), model(20));
    let centres = |samples| {
        write_blobs(&BlobsSpec::new(samples, 4, 5, 1), io::sink())
            .unwrap()
            .centres
    };
    assert_eq!(centres(10), centres(20));
}

#[test]
fn dense_lr_truth_explains_its_data() {
    let spec = DenseLrSpec::new(20_000, 28, 7);
    let mut text = Vec::new();
    let truth = write_dense_lr(&spec, &mut text).unwrap();
    assert_eq!((truth.weights.len(), truth.scales.len()), (28, 28));
    let (rows, label_map) = parse_dense(&text, 28);
    assert_eq!(rows.rows(), 20_000);
    assert_eq!(
        label_map,
        Some(crate::manifest::LabelMap {
            negative: 0.0,
            positive: 1.0
        })
    );
    // The true model's loss on the parsed rows is the one reported, up to f32 parsing,
    // and close to the Bayes log loss (its expectation; standard error ~0.004 here).
    let loss = truth.log_loss_on(&rows);
    assert!(
        (loss - truth.log_loss).abs() < 1e-4,
        "{loss} vs {}",
        truth.log_loss
    );
    assert!(
        (loss - truth.bayes_log_loss).abs() < 0.02,
        "{loss} vs Bayes {}",
        truth.bayes_log_loss
    );
    // Margin std 2: an expected log loss of about 0.45; ignoring the features costs ln 2.
    assert!((0.38..0.52).contains(&truth.bayes_log_loss), "{truth:?}");
    let zero = DenseLrTruth {
        weights: vec![0.0; 28],
        ..truth.clone()
    };
    assert!((zero.log_loss_on(&rows) - std::f64::consts::LN_2).abs() < 1e-9);
    assert!((truth.positive_fraction - 0.5).abs() < 0.03);
    let positives = rows.labels.iter().filter(|&&l| l == 1.0).count();
    assert!((positives as f64 / 20_000.0 - truth.positive_fraction).abs() < 1e-12);

    let margins: Vec<f64> = rows
        .iter_rows()
        .map(|(_, i, v)| truth.margin(i, v))
        .collect();
    let mean = margins.iter().sum::<f64>() / margins.len() as f64;
    let var = margins.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / margins.len() as f64;
    assert!((var.sqrt() - 2.0).abs() < 0.1, "margin std {}", var.sqrt());

    // Features have the reported scales, and correlation 0.5 within a group only.
    for j in [0, 13, 27] {
        let (mean, std) = column_stats(&rows, j);
        assert!(
            mean.abs() < 0.05 * truth.scales[j],
            "feature {j} mean {mean}"
        );
        assert!(
            (std / truth.scales[j] - 1.0).abs() < 0.05,
            "feature {j} std {std}"
        );
    }
    let correlation = |a: usize, b: usize| {
        let ((ma, sa), (mb, sb)) = (column_stats(&rows, a), column_stats(&rows, b));
        rows.iter_rows()
            .map(|(_, _, v)| (f64::from(v[a]) - ma) * (f64::from(v[b]) - mb))
            .sum::<f64>()
            / rows.rows() as f64
            / (sa * sb)
    };
    assert!((correlation(0, 3) - 0.5).abs() < 0.05);
    assert!((correlation(24, 25) - 0.5).abs() < 0.05);
    assert!(correlation(3, 4).abs() < 0.05);
}

#[test]
fn two_rings_are_classified_by_their_radius() {
    let spec = RingsSpec::new(20_000, 2, 3);
    let mut text = Vec::new();
    let truth = write_rings(&spec, &mut text).unwrap();
    assert_eq!((truth.radii.clone(), truth.noise), (vec![1.0, 2.0], 0.1));
    let (rows, label_map) = parse_dense(&text, 2);
    assert_eq!(rows.rows(), 20_000);
    // Two classes written as 0/1 are mapped to themselves.
    assert_eq!(
        label_map,
        Some(crate::manifest::LabelMap {
            negative: 0.0,
            positive: 1.0
        })
    );
    let acc = accuracy(&rows, |v| {
        truth.nearest_ring(f64::from(v[0]), f64::from(v[1]))
    });
    assert!(acc > 0.95, "nearest-ring accuracy {acc}");
    // Both classes are centred on the origin: no direction separates them.
    for class in [0.0, 1.0] {
        let ring = rows.iter_rows().filter(|(l, _, _)| *l == class);
        let (n, sx, sy) = ring.fold((0.0, 0.0, 0.0), |(n, sx, sy), (_, _, v)| {
            (n + 1.0, sx + f64::from(v[0]), sy + f64::from(v[1]))
        });
        assert!(n > 9_000.0 && (sx / n).abs() < 0.05 && (sy / n).abs() < 0.05);
    }
}

#[test]
fn many_rings_keep_their_labels_and_extra_dims_are_noise() {
    let spec = RingsSpec {
        extra_dims: 3,
        ..RingsSpec::new(8_000, 4, 9)
    };
    let mut text = Vec::new();
    let truth = write_rings(&spec, &mut text).unwrap();
    assert_eq!(truth.radii, vec![1.0, 2.0, 3.0, 4.0]);
    let (rows, label_map) = parse_dense(&text, 5);
    assert_eq!(label_map, None);
    for class in 0..4 {
        assert!(rows.labels.contains(&(class as f32)));
    }
    assert!(
        rows.labels
            .iter()
            .all(|&l| (0.0..4.0).contains(&l) && l.fract() == 0.0)
    );
    let acc = accuracy(&rows, |v| {
        truth.nearest_ring(f64::from(v[0]), f64::from(v[1]))
    });
    assert!(acc > 0.95, "nearest-ring accuracy {acc}");
    for j in 2..5 {
        let (mean, std) = column_stats(&rows, j);
        assert!(
            mean.abs() < 0.05 && (std - 1.0).abs() < 0.05,
            "{mean} {std}"
        );
    }
}

#[test]
fn blob_points_are_nearest_their_centre() {
    let spec = BlobsSpec::new(20_000, 8, 16, 4);
    let mut text = Vec::new();
    let truth = write_blobs(&spec, &mut text).unwrap();
    assert_eq!(truth.centres.len(), 8);
    assert!(truth.centres.iter().flatten().all(|c| c.abs() <= 10.0));
    let (rows, label_map) = parse_dense(&text, 16);
    assert_eq!(rows.rows(), 20_000);
    assert_eq!(label_map, None);
    for blob in 0..8 {
        assert!(rows.labels.contains(&(blob as f32)));
    }
    let acc = accuracy(&rows, |v| truth.nearest_centre(v));
    assert!(acc > 0.99, "nearest-centre accuracy {acc}");
    // Each coordinate deviates from its centre with the spread as standard deviation.
    let squares: f64 = rows
        .iter_rows()
        .flat_map(|(l, _, v)| v.iter().zip(&truth.centres[l as usize]))
        .map(|(&x, &c)| (f64::from(x) - c).powi(2))
        .sum();
    let std = (squares / (20_000.0 * 16.0)).sqrt();
    assert!((std - 1.0).abs() < 0.02, "spread {std}");

    // Two blobs: labels 0/1, mapped to themselves.
    let mut text = Vec::new();
    write_blobs(&BlobsSpec::new(100, 2, 3, 4), &mut text).unwrap();
    let (_, label_map) = parse_dense(&text, 3);
    assert_eq!(
        label_map,
        Some(crate::manifest::LabelMap {
            negative: 0.0,
            positive: 1.0
        })
    );
}

#[test]
fn invalid_dense_specs_are_rejected_with_clear_errors() {
    fn message<T>(result: io::Result<T>) -> String {
        let err = result.err().expect("an invalid spec");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        err.to_string()
    }
    let dense = DenseLrSpec::new(10, 28, 0);
    let cases = [
        (
            message(write_dense_lr(
                &DenseLrSpec {
                    features: 0,
                    ..dense.clone()
                },
                io::sink(),
            )),
            "dense LR features must be in 1..=4294967295, got 0",
        ),
        (
            message(write_dense_lr(
                &DenseLrSpec {
                    correlation: 1.5,
                    ..dense.clone()
                },
                io::sink(),
            )),
            "dense LR correlation must be between 0 and 1, got 1.5",
        ),
        (
            message(write_dense_lr(
                &DenseLrSpec {
                    margin_std: -1.0,
                    ..dense.clone()
                },
                io::sink(),
            )),
            "margin standard deviation must be finite and non-negative, got -1",
        ),
        (
            message(write_dense_lr(
                &DenseLrSpec {
                    bias: f64::INFINITY,
                    ..dense
                },
                io::sink(),
            )),
            "dense LR bias must be finite, got inf",
        ),
        (
            message(write_rings(&RingsSpec::new(10, 1, 0), io::sink())),
            "rings classes must be in 2..=16777216, got 1",
        ),
        (
            message(write_rings(
                &RingsSpec {
                    noise: f64::NAN,
                    ..RingsSpec::new(10, 2, 0)
                },
                io::sink(),
            )),
            "rings noise must be finite and non-negative, got NaN",
        ),
        (
            message(write_blobs(&BlobsSpec::new(10, 0, 2, 0), io::sink())),
            "blobs k must be in 1..=16777216, got 0",
        ),
        (
            message(write_blobs(&BlobsSpec::new(10, 2, 0, 0), io::sink())),
            "blobs features must be in 1..=4294967295, got 0",
        ),
        (
            message(write_blobs(
                &BlobsSpec {
                    spread: -0.5,
                    ..BlobsSpec::new(10, 2, 2, 0)
                },
                io::sink(),
            )),
            "blob spread must be finite and non-negative, got -0.5",
        ),
        (
            message(write_blobs(
                &BlobsSpec {
                    box_half_width: 0.0,
                    ..BlobsSpec::new(10, 2, 2, 0)
                },
                io::sink(),
            )),
            "blobs box half-width must be finite and positive, got 0",
        ),
    ];
    for (shown, expected) in cases {
        assert_eq!(shown, expected);
    }
}

/// Parses Criteo text into `features` features.
fn parse_criteo(bytes: &[u8], features: u32) -> SparseBatch {
    let parsed = parse_reader(
        bytes,
        Path::new("generated.tsv"),
        InputFormat::Criteo,
        &ParseOptions {
            features: Some(features),
            ..ParseOptions::default()
        },
    )
    .unwrap();
    let Parsed::Sparse { rows, .. } = parsed else {
        panic!("criteo data is sparse")
    };
    rows
}

/// The model fields of a Criteo truth (not the ones measured on rows).
fn criteo_model_fields(t: &CriteoTruth) -> (u32, Vec<f32>, f64, u64, f32) {
    (
        t.features,
        t.integer_weights.clone(),
        t.category_weight_std,
        t.category_weight_key,
        t.bias,
    )
}

#[test]
fn criteo_is_deterministic_and_every_line_parses() {
    let spec = CriteoSpec {
        features: 1 << 18,
        ..CriteoSpec::new(2_000, 3)
    };
    let mut a = Vec::new();
    let truth_a = write_criteo(&spec, &mut a).unwrap();
    let mut b = Vec::new();
    let truth_b = write_criteo(&spec, &mut b).unwrap();
    assert_eq!(a, b);
    assert_eq!(truth_a, truth_b);
    assert_eq!(
        criteo_model_fields(&truth_a),
        criteo_model_fields(&criteo_truth(&spec))
    );
    // The model does not depend on the number of rows; the rows of a shorter set are a prefix.
    let mut short = Vec::new();
    let truth_short = write_criteo(
        &CriteoSpec {
            samples: 100,
            ..spec.clone()
        },
        &mut short,
    )
    .unwrap();
    assert_eq!(
        criteo_model_fields(&truth_short),
        criteo_model_fields(&truth_a)
    );
    assert!(a.starts_with(&short));
    let mut c = Vec::new();
    write_criteo(
        &CriteoSpec {
            seed: 4,
            ..spec.clone()
        },
        &mut c,
    )
    .unwrap();
    assert_ne!(a, c);

    // Every line has 40 fields: a 0/1 label, 13 empty or decimal counts, 26 empty or 8-hex-digit
    // values.
    let text = std::str::from_utf8(&a).unwrap();
    assert_eq!(text.lines().count(), 2_000);
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 40, "{line:?}");
        assert!(fields[0] == "0" || fields[0] == "1", "{line:?}");
        assert!(
            fields[1..14]
                .iter()
                .all(|f| f.bytes().all(|b| b.is_ascii_digit())),
            "{line:?}"
        );
        assert!(
            fields[14..].iter().all(|f| f.is_empty()
                || (f.len() == 8 && f.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))),
            "{line:?}"
        );
    }
    let rows = parse_criteo(&a, spec.features);
    assert_eq!(rows.rows(), 2_000);
    let positives = rows.labels.iter().filter(|&&l| l == 1.0).count();
    assert_eq!(
        positives as f64 / 2_000.0,
        truth_a.positive_fraction,
        "the labels parsed are the ones counted"
    );
}

/// The exact AUC of `scores` against 0/1 `labels` (ties count one half).
fn exact_auc(scores: &[f64], labels: &[f32]) -> f64 {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&i, &j| scores[i].total_cmp(&scores[j]));
    let (mut negatives_below, mut pairs, mut i) = (0u64, 0.0, 0);
    while i < order.len() {
        let mut j = i;
        while j < order.len() && scores[order[j]] == scores[order[i]] {
            j += 1;
        }
        let tie = &order[i..j];
        let p = tie.iter().filter(|&&k| labels[k] == 1.0).count() as u64;
        let n = tie.len() as u64 - p;
        pairs += p as f64 * (negatives_below as f64 + 0.5 * n as f64);
        negatives_below += n;
        i = j;
    }
    let positives = labels.iter().filter(|&&l| l == 1.0).count() as f64;
    pairs / (positives * negatives_below as f64)
}

#[test]
fn criteo_truth_explains_its_parsed_data() {
    let features = 1 << 18;
    let spec = CriteoSpec {
        features,
        ..CriteoSpec::new(20_000, 7)
    };
    let mut text = Vec::new();
    let truth = write_criteo(&spec, &mut text).unwrap();
    let rows = parse_criteo(&text, features);
    assert_eq!(rows.rows(), 20_000);
    // The true model lives in the parser's feature space: scored on the parsed rows it gives
    // the log loss of the labels as they were drawn.
    let parsed_loss = truth.log_loss_on(&rows);
    assert!(
        (parsed_loss - truth.log_loss).abs() < 1e-6,
        "parsed {parsed_loss} vs written {}",
        truth.log_loss
    );
    // About Criteo's positive rate (25.6%): the bias is calibrated on 16384 other rows; the
    // binomial standard error at 20,000 rows is 0.003.
    let rate = truth.positive_fraction;
    assert!((rate - 0.256).abs() < 0.015, "positive rate {rate}");
    // A real signal: the true model is well below the base rate's entropy (0.57; measured:
    // 0.43), the Bayes log loss is close to the realised one, and the AUC is about Criteo's
    // best models' (measured: 0.82).
    assert!(
        truth.log_loss < truth.base_log_loss - 0.08,
        "true log loss {} against the base rate's {}",
        truth.log_loss,
        truth.base_log_loss
    );
    assert!((truth.bayes_log_loss - truth.log_loss).abs() < 0.01);
    let margins: Vec<f64> = rows
        .iter_rows()
        .map(|(_, i, v)| truth.margin(i, v))
        .collect();
    let auc = exact_auc(&margins, &rows.labels);
    assert!(auc > 0.75, "true AUC {auc}");
    assert!(
        (truth.auc - auc).abs() < 0.002,
        "binned AUC {} vs exact {auc}",
        truth.auc
    );
    // The margin has about the asked-for spread (the calibration rows are other rows).
    let mean = margins.iter().sum::<f64>() / margins.len() as f64;
    let std =
        (margins.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / margins.len() as f64).sqrt();
    assert!((std - spec.margin_std).abs() < 0.1, "margin std {std}");
    // The probability is the sigmoid of the margin.
    let (_, i, v) = rows.row(0);
    assert!((truth.probability(i, v) - 1.0 / (1.0 + (-margins[0]).exp())).abs() < 1e-12);
    // Weights beyond the space are 0, and the integer ones are the integer features'.
    assert_eq!(truth.category_weight(features), 0.0);
    assert_eq!(truth.category_weight(12), truth.integer_weights[12]);

    // The integer share splits the margin's variance between the two kinds of columns.
    let all_integer = criteo_truth(&CriteoSpec {
        integer_share: 1.0,
        ..spec.clone()
    });
    assert_eq!(all_integer.category_weight_std, 0.0);
    let all_categorical = criteo_truth(&CriteoSpec {
        integer_share: 0.0,
        ..spec
    });
    assert!(all_categorical.integer_weights.iter().all(|&w| w == 0.0));
    assert!(all_categorical.category_weight_std > truth.category_weight_std);
}

#[test]
fn criteo_columns_have_their_missing_rates_and_frequencies() {
    let n = 20_000;
    let spec = CriteoSpec::new(n, 9);
    let mut text = Vec::new();
    write_criteo(&spec, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    let columns: Vec<Vec<&str>> = {
        let mut columns: Vec<Vec<&str>> = (0..39).map(|_| Vec::with_capacity(n as usize)).collect();
        for line in text.lines() {
            for (column, field) in columns.iter_mut().zip(line.split('\t').skip(1)) {
                column.push(field);
            }
        }
        columns
    };
    // Missing rates within 0.02 (the binomial standard error is at most 0.0035).
    let expected = spec
        .integer
        .iter()
        .map(|c| c.missing)
        .chain(spec.categorical.iter().map(|c| c.missing));
    for (j, (column, missing)) in columns.iter().zip(expected).enumerate() {
        let empty = column.iter().filter(|f| f.is_empty()).count() as f64 / n as f64;
        assert!(
            (empty - missing).abs() < 0.02,
            "column {j}: {empty} empty, {missing} expected"
        );
    }
    // Heavy-tailed counts: I5 (median about e^8) reaches 100 times its median.
    let mut i5: Vec<u64> = columns[4]
        .iter()
        .filter(|f| !f.is_empty())
        .map(|f| f.parse().unwrap())
        .collect();
    i5.sort_unstable();
    let median = i5[i5.len() / 2];
    assert!((2000..4000).contains(&median), "I5 median {median}");
    assert!(
        i5[i5.len() - 1] > 100 * median,
        "I5 max {}",
        i5[i5.len() - 1]
    );
    // I10 is mostly 0 (log mean -0.3): P(count = 0) = Φ(0.3 / 0.8) = 0.646.
    let i10: Vec<&&str> = columns[9].iter().filter(|f| !f.is_empty()).collect();
    let zeros = i10.iter().filter(|f| ***f == "0").count() as f64 / i10.len() as f64;
    assert!((zeros - 0.646).abs() < 0.02, "I10 zeros {zeros}");
    // Categorical columns: small ones show all their values, large ones many; the most
    // frequent value has its Zipf frequency 1 / Σ_r (r + 1)^-s.
    let distinct = |c: usize| {
        let mut values: Vec<&str> = columns[13 + c]
            .iter()
            .copied()
            .filter(|f| !f.is_empty())
            .collect();
        values.sort_unstable();
        values.dedup();
        values.len()
    };
    assert_eq!(distinct(8), 3); // C9
    assert_eq!(distinct(19), 4); // C20
    assert!(distinct(2) > 5_000, "C3: {}", distinct(2));
    for c in [0, 2, 5] {
        let column = spec.categorical[c];
        let mut counts = std::collections::HashMap::new();
        for f in columns[13 + c].iter().filter(|f| !f.is_empty()) {
            *counts.entry(*f).or_insert(0u32) += 1;
        }
        let present: u32 = counts.values().sum();
        let top = f64::from(*counts.values().max().unwrap()) / f64::from(present);
        let norm: f64 = (0..column.cardinality)
            .map(|r| f64::from(r + 1).powf(-column.zipf_exponent))
            .sum();
        assert!(
            (top - 1.0 / norm).abs() < 0.015,
            "C{}: top value {top}, Zipf {}",
            c + 1,
            1.0 / norm
        );
    }
}

#[test]
fn zipf_sampler_matches_its_law_in_the_head_and_the_tail() {
    for (n, s) in [(100_000u32, 1.1), (50_000, 1.0), (3, 0.8), (10_000, 0.0)] {
        let sampler = super::criteo::ZipfSampler::new(n, s);
        let mut rng = stream_rng(5, 1);
        let draws = 400_000;
        // Ranks in bands: 0, 1, 2..16, 16..4096 (the head), 4096..8192, 8192..n (the tail).
        let bands = [0u32, 1, 2, 16, 4096, 8192, n];
        let mut counts = vec![0u32; bands.len() - 1];
        for _ in 0..draws {
            let r = sampler.sample(&mut rng);
            assert!(r < n);
            let band = bands.windows(2).position(|w| (w[0]..w[1]).contains(&r));
            counts[band.unwrap()] += 1;
        }
        let pmf: Vec<f64> = (0..n).map(|r| f64::from(r + 1).powf(-s)).collect();
        let total: f64 = pmf.iter().sum();
        for (k, w) in bands.windows(2).enumerate() {
            let (lo, hi) = (w[0].min(n) as usize, w[1].min(n) as usize);
            let expected = pmf[lo.min(hi)..hi].iter().sum::<f64>() / total;
            let seen = f64::from(counts[k]) / f64::from(draws);
            assert!(
                (seen - expected).abs() < 0.004,
                "n {n}, s {s}, ranks {lo}..{hi}: {seen} vs {expected}"
            );
        }
    }
}

#[test]
fn invalid_criteo_specs_are_rejected() {
    let spec = CriteoSpec::new(10, 0);
    let message = |spec: CriteoSpec| {
        let err = write_criteo(&spec, io::sink()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        err.to_string()
    };
    let mut integer = spec.integer;
    integer[3].missing = 1.5;
    let mut log_std = spec.integer;
    log_std[0].log_std = -1.0;
    let mut cardinality = spec.categorical;
    cardinality[25].cardinality = 0;
    let mut zipf = spec.categorical;
    zipf[1].zipf_exponent = 11.0;
    let cases = [
        (
            CriteoSpec {
                features: 13,
                ..spec.clone()
            },
            "criteo needs at least 14 features (13 integer features and the hashing space), got 13",
        ),
        (
            CriteoSpec {
                positive_rate: 1.0,
                ..spec.clone()
            },
            "the positive rate must be in (0, 1), got 1",
        ),
        (
            CriteoSpec {
                integer_share: -0.1,
                ..spec.clone()
            },
            "the integer share must be in [0, 1], got -0.1",
        ),
        (
            CriteoSpec {
                integer,
                ..spec.clone()
            },
            "the missing rate of I4 must be in [0, 1], got 1.5",
        ),
        (
            CriteoSpec {
                integer: log_std,
                ..spec.clone()
            },
            "the log standard deviation of I1 must be finite and non-negative, got -1",
        ),
        (
            CriteoSpec {
                categorical: cardinality,
                ..spec.clone()
            },
            "C26 needs at least one value, got 0",
        ),
        (
            CriteoSpec {
                categorical: zipf,
                ..spec
            },
            "the Zipf exponent of C2 must be between 0 and 10, got 11",
        ),
    ];
    for (spec, expected) in cases {
        assert_eq!(message(spec), expected);
    }
}
