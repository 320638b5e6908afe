//! The generators' tests: sparse LR here, the others in a module each.

use std::io;
use std::path::Path;

use mlless_core::SparseBatch;

use super::shared::{push_fixed4, push_u64, round4, stream_rng, write_dense_libsvm};
use super::sparse_lr::AliasTable;
use super::*;
use crate::parse::{InputFormat, ParseOptions, Parsed, parse_reader};

mod criteo;
mod dense;
mod ratings;

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
