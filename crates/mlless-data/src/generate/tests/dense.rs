//! Tests of the dense generators: dense LR, rings, blobs.

use super::*;

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
