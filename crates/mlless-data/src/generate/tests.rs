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
    };
    for s in [
        spec(0.0, 0.1),
        spec(1.5, 0.1),
        spec(0.5, -1.0),
        RatingsSpec {
            rank: 0,
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

#[test]
fn full_density_writes_every_pair_in_order() {
    let spec = RatingsSpec {
        users: 3,
        items: 4,
        rank: 2,
        density: 1.0,
        noise: 0.1,
        seed: 1,
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
