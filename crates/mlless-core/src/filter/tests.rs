//! Tests of the update filter: consistency of checkpoints and wire deltas, significance, top-k and 1-bit compression.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

#[test]
fn deserialised_filters_are_consistent() {
    let mut filter = UpdateFilter::new(4, FilterConfig::default());
    let update = SparseVector::from_parts(vec![1, 3], vec![0.5, -1.0]).unwrap();
    // Top-1 keeps coordinate 1 back.
    filter.config.compression = Compression::TopK(1);
    filter.filter(&update, &[1.0; 4], 0);
    let json = serde_json::to_value(&filter).unwrap();
    let back: UpdateFilter = serde_json::from_value(json.clone()).unwrap();
    assert_eq!((back.dim(), back.support.clone()), (4, vec![1]));
    let tamper = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut bad = json.clone();
        edit(&mut bad);
        serde_json::from_value::<UpdateFilter>(bad)
            .unwrap_err()
            .to_string()
    };
    let out_of_range = tamper(&|v| v["support"] = serde_json::json!([7]));
    assert!(out_of_range.contains("out of range"), "{out_of_range}");
    let repeated = tamper(&|v| v["support"] = serde_json::json!([1, 1]));
    assert!(repeated.contains("repeated"), "{repeated}");
    let short = tamper(&|v| v["tracked"] = serde_json::json!([false, true]));
    assert!(short.contains("flags"), "{short}");
    let untracked = tamper(&|v| v["tracked"][2] = serde_json::json!(true));
    assert!(untracked.contains("outside its support"), "{untracked}");
}

#[test]
fn wire_deltas_are_checked_before_use() {
    let json = r#"{"Sparse":{"indices":[5,1],"values":[1,1]}}"#;
    assert!(serde_json::from_str::<WireDelta>(json).is_err());
    let json = r#"{"Sparse":{"indices":[1,5],"values":[1,1]}}"#;
    let delta: WireDelta = serde_json::from_str(json).unwrap();
    assert!(delta.clone().into_sparse(6).is_ok());
    assert!(matches!(
        delta.into_sparse(5),
        Err(SparseError::OutOfBounds { index: 5, dim: 5 })
    ));
    // Signs: bitmap and bucket counts must match the indices; indices must be distinct.
    let signs = |indices: &str, negative: &str, buckets: &str| {
        let json = format!(
            r#"{{"Signs":{{"indices":{indices},"negative":{negative},"buckets":{buckets}}}}}"#
        );
        serde_json::from_str::<WireDelta>(&json)
            .unwrap()
            .into_sparse(10)
    };
    assert!(signs("[3,1]", "[1]", "[[2,0.5]]").is_ok());
    assert!(signs("[3,1]", "[]", "[[2,0.5]]").is_err());
    assert!(signs("[3,1]", "[1]", "[[1,0.5]]").is_err());
    assert!(signs("[3,1]", "[1]", "[[4294967295,0.5],[4294967295,0.5]]").is_err());
    assert!(signs("[3,3]", "[1]", "[[2,0.5]]").is_err());
    assert!(signs("[3,10]", "[1]", "[[2,0.5]]").is_err());
}

fn random_update(rng: &mut StdRng, dim: u32, nnz: usize) -> SparseVector {
    SparseVector::from_pairs(
        (0..nnz)
            .map(|_| (rng.random_range(0..dim), rng.random_range(-1.0..1.0)))
            .collect(),
    )
}

fn configs() -> Vec<FilterConfig> {
    let mut out = Vec::new();
    for significance in [None, Some(0.0), Some(0.7), Some(5.0)] {
        for compression in [
            Compression::None,
            Compression::TopK(3),
            Compression::TopKFraction(0.2),
            Compression::OneBit,
        ] {
            for significance_scale in [SignificanceScale::Parameter, SignificanceScale::Mean] {
                out.push(FilterConfig {
                    significance,
                    significance_scale,
                    compression,
                });
            }
        }
    }
    out
}

#[test]
fn sent_plus_residual_is_the_sum_of_the_updates() {
    let dim = 50u32;
    for config in configs() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut filter = UpdateFilter::new(dim as usize, config);
        let mut params: Vec<f32> = (0..dim).map(|_| rng.random_range(-2.0..2.0)).collect();
        let mut local = vec![0.0f64; dim as usize];
        let mut sent_total = vec![0.0f64; dim as usize];
        let mut held_any = false;
        for step in 0..200 {
            let u = random_update(&mut rng, dim, 8);
            for (j, v) in u.iter() {
                local[j as usize] += f64::from(v);
            }
            let (sent, stats) = filter.filter(&u, &params, step);
            held_any |= stats.held > 0;
            let sent = sent.into_sparse(dim as usize).expect("in bounds");
            assert_eq!(stats.sent, sent.nnz());
            for (j, v) in sent.iter() {
                sent_total[j as usize] += f64::from(v);
            }
            u.scaled_add_to(&mut params, 1.0);
        }
        let residual = filter.residual();
        for (j, v) in residual.iter() {
            sent_total[j as usize] += f64::from(v);
        }
        for j in 0..dim as usize {
            assert!(
                (sent_total[j] - local[j]).abs() < 1e-3,
                "{config:?}: coordinate {j}: sent + residual {} vs local sum {}",
                sent_total[j],
                local[j]
            );
        }
        if !config.is_identity() && config.significance != Some(0.0) {
            assert!(held_any, "{config:?} never held anything back");
        }
        let flushed = filter.flush();
        assert_eq!(flushed, residual);
        assert!(filter.residual().is_empty());
    }
}

#[test]
fn zero_significance_without_compression_sends_the_update_itself() {
    let mut rng = StdRng::seed_from_u64(1);
    let config = FilterConfig {
        significance: Some(0.0),
        compression: Compression::None,
        ..FilterConfig::default()
    };
    let mut filter = UpdateFilter::new(100, config);
    let params: Vec<f32> = (0..100).map(|_| rng.random_range(-1.0..1.0)).collect();
    for step in 0..20 {
        let u = random_update(&mut rng, 100, 10);
        let (sent, stats) = filter.filter(&u, &params, step);
        assert_eq!(sent, WireDelta::Sparse(u));
        assert_eq!(stats.held, 0);
    }
}

#[test]
fn significance_holds_small_relative_changes_and_decays_with_steps() {
    let config = FilterConfig {
        significance: Some(0.5),
        compression: Compression::None,
        ..FilterConfig::default()
    };
    let mut filter = UpdateFilter::new(3, config);
    let params = [10.0f32, 0.0, 1.0];
    let u = SparseVector::from_pairs(vec![(0, 1.0), (1, 0.001), (2, 0.6)]);
    // Step 0: v = 0.5. 1/10 is held, anything on a zero parameter is sent, 0.6/1 is sent.
    let (sent, stats) = filter.filter(&u, &params, 0);
    let sent = sent.into_sparse(3).expect("valid");
    assert_eq!(sent.indices(), &[1, 2]);
    assert_eq!(stats.held, 1);
    // Step 99: v = 0.05; the held 1.0 plus 1.0 is 0.2 of 10: sent.
    let only0 = SparseVector::from_pairs(vec![(0, 1.0)]);
    let (sent, stats) = filter.filter(&only0, &params, 99);
    let sent = sent.into_sparse(3).expect("valid");
    assert_eq!(sent.iter().collect::<Vec<_>>(), vec![(0, 2.0)]);
    assert_eq!(stats.held, 0);
}

#[test]
fn the_mean_scale_holds_small_updates_of_weights_near_zero() {
    // Weights of 1 and a rare feature's 0.001; v = 0.5 at step 0.
    let params = [1.0f32, 1.0, 1.0, 0.001];
    let u = SparseVector::from_pairs(vec![(0, 0.6), (3, 0.01)]);
    let by_parameter = FilterConfig {
        significance: Some(0.5),
        ..FilterConfig::default()
    };
    // Against itself, 0.01 is ten times the rare weight: sent, as is 0.6 of 1.
    let mut filter = UpdateFilter::new(4, by_parameter);
    let (sent, _) = filter.filter(&u, &params, 0);
    assert_eq!(sent.into_sparse(4).expect("valid").indices(), &[0, 3]);
    // Against the mean magnitude of the weights this worker updated (x_0 and x_3: ≈ 0.5),
    // 0.01 is held until the updates add up; 0.6 of the larger |x_0| = 1 is still sent.
    let by_mean = FilterConfig {
        significance_scale: SignificanceScale::Mean,
        ..by_parameter
    };
    let mut filter = UpdateFilter::new(4, by_mean);
    let (sent, stats) = filter.filter(&u, &params, 0);
    assert_eq!(sent.into_sparse(4).expect("valid").indices(), &[0]);
    assert_eq!(stats.held, 1);
    let rare = SparseVector::from_pairs(vec![(3, 0.4)]);
    let (sent, _) = filter.filter(&rare, &params, 0);
    let sent = sent.into_sparse(4).expect("valid");
    assert_eq!(sent.indices(), &[3], "0.41 > 0.5 · mean(1, 0.001)");
    assert!(
        (sent.values()[0] - 0.41).abs() < 1e-6,
        "the held 0.01 went with it"
    );
}

#[test]
fn rescale_scales_what_is_held() {
    let mut filter = UpdateFilter::new(
        3,
        FilterConfig {
            significance: None,
            compression: Compression::TopK(1),
            ..FilterConfig::default()
        },
    );
    let u = SparseVector::from_pairs(vec![(0, 4.0), (2, 1.0)]);
    filter.filter(&u, &[1.0; 3], 0);
    filter.rescale(0.5);
    assert_eq!(filter.residual().iter().collect::<Vec<_>>(), vec![(2, 0.5)]);
}

#[test]
fn top_k_sends_the_largest_and_one_bit_sends_signs() {
    let u = SparseVector::from_pairs(vec![(0, 0.1), (1, -3.0), (2, 2.0), (3, -0.5)]);
    let params = [1.0f32; 4];
    let mut top = UpdateFilter::new(
        4,
        FilterConfig {
            significance: None,
            compression: Compression::TopK(2),
            ..FilterConfig::default()
        },
    );
    let (sent, stats) = top.filter(&u, &params, 0);
    let sent = sent.into_sparse(4).expect("valid");
    assert_eq!(sent.iter().collect::<Vec<_>>(), vec![(1, -3.0), (2, 2.0)]);
    assert_eq!(stats.held, 2);

    let mut onebit = UpdateFilter::new(
        4,
        FilterConfig {
            significance: None,
            compression: Compression::OneBit,
            ..FilterConfig::default()
        },
    );
    let (sent, stats) = onebit.filter(&u, &params, 0);
    assert_eq!(stats.sent, 4);
    // 3 and 2 share a binary exponent (one bucket, scale 2.5); 0.5 and 0.1 are alone.
    let sent = sent.into_sparse(4).expect("valid");
    assert_eq!(
        sent.iter().collect::<Vec<_>>(),
        vec![(0, 0.1), (1, -2.5), (2, 2.5), (3, -0.5)]
    );
    let residual = onebit.residual();
    assert_eq!(
        residual.iter().collect::<Vec<_>>(),
        vec![(1, -0.5), (2, -0.5)]
    );

    // Buckets of similar magnitude: 64 large entries and 64 small ones get two scales.
    let mut onebit = UpdateFilter::new(
        128,
        FilterConfig {
            significance: None,
            compression: Compression::OneBit,
            ..FilterConfig::default()
        },
    );
    let u = SparseVector::from_pairs(
        (0..128u32)
            .map(|j| (j, if j % 2 == 0 { 1.0 } else { -0.01 }))
            .collect(),
    );
    let (sent, _) = onebit.filter(&u, &[1.0; 128], 0);
    let sent = sent.into_sparse(128).expect("valid");
    for (j, v) in sent.iter() {
        let expected = if j % 2 == 0 { 1.0 } else { -0.01 };
        assert!((v - expected).abs() < 1e-6, "entry {j}: {v}");
    }
}

#[test]
fn hostile_sign_vectors_are_rejected() {
    let signs = |indices: Vec<u32>, negative: usize, counts: Vec<u32>| {
        WireDelta::Signs(SignVector {
            indices,
            negative: vec![0; negative],
            buckets: counts.into_iter().map(|c| (c, 1.0)).collect(),
        })
    };
    assert!(
        signs((0..20).collect(), 2, vec![20])
            .into_sparse(100)
            .is_err()
    );
    assert!(
        signs((0..20).collect(), 3, vec![19])
            .into_sparse(100)
            .is_err()
    );
    assert!(
        signs((0..20).collect(), 3, vec![u32::MAX, 21])
            .into_sparse(100)
            .is_err()
    );
    assert!(signs(vec![5, 500], 1, vec![2]).into_sparse(100).is_err());
    assert!(signs(vec![5, 2, 5], 1, vec![3]).into_sparse(100).is_err());
    let unordered = signs(vec![5, 2], 1, vec![1, 1])
        .into_sparse(100)
        .expect("valid");
    assert_eq!(unordered.indices(), &[2, 5]);
}

#[test]
fn compression_parses() {
    assert_eq!("none".parse(), Ok(Compression::None));
    assert_eq!("onebit".parse(), Ok(Compression::OneBit));
    assert_eq!("topk:100".parse(), Ok(Compression::TopK(100)));
    assert_eq!("topk:0.01".parse(), Ok(Compression::TopKFraction(0.01)));
    for bad in ["topk:0", "topk:1.5", "topk:", "top", "topk:-1"] {
        assert!(bad.parse::<Compression>().is_err(), "{bad}");
    }
    for c in [Compression::TopK(5), Compression::TopKFraction(0.25)] {
        assert_eq!(c.to_string().parse(), Ok(c));
    }
}
