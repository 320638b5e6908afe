//! Tests of the Criteo-shaped generator: columns, truth, missing rates.

use super::*;

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
        let sampler = crate::generate::criteo::ZipfSampler::new(n, s);
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
