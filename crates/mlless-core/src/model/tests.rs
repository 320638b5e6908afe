//! Tests of `ModelSpec` and `BatchLoss`: shapes and names, evaluations, validation, seeded initial parameters, merging losses.

use super::*;

fn pmf_spec() -> ModelSpec {
    ModelSpec::MatrixFactorization {
        users: 30,
        items: 20,
        factors: 4,
        l2: 0.01,
        mean: 3.5,
        init_std: 0.1,
        prior: 0.0,
    }
}

#[test]
fn num_params_and_names() {
    let lr = ModelSpec::LogisticRegression {
        features: 10,
        l2: 0.0,
        init_bias: 0.0,
    };
    assert_eq!(lr.num_params(), 11);
    assert_eq!(lr.name(), "lr");
    assert_eq!(pmf_spec().num_params(), (30 + 20) * 4 + 30 + 20);
    assert_eq!(pmf_spec().name(), "pmf");
    assert_eq!(pmf_spec().model().num_params(), pmf_spec().num_params());
    let svm = ModelSpec::Svm {
        features: 10,
        l2: 0.1,
    };
    assert_eq!((svm.num_params(), svm.name()), (11, "svm"));
    assert_eq!(svm.model().num_params(), 11);
    assert_eq!(svm.init_params(3), vec![0.0; 11]);
    let kmeans = ModelSpec::KMeans { features: 7, k: 3 };
    assert_eq!((kmeans.num_params(), kmeans.name()), (21, "kmeans"));
    assert_eq!(kmeans.model().num_params(), 21);
    assert_eq!(kmeans.init_params(3), vec![0.0; 21]);
}

#[test]
fn validate_svm_and_kmeans_specs() {
    let svm = |l2| ModelSpec::Svm { features: 3, l2 };
    assert!(svm(0.0).validate().is_ok());
    assert!(svm(-0.1).validate().is_err());
    assert!(svm(f32::NAN).validate().is_err());
    let kmeans = |features, k| ModelSpec::KMeans { features, k };
    assert!(kmeans(2, 1).validate().is_ok());
    assert!(kmeans(0, 3).validate().is_err());
    assert!(kmeans(3, 0).validate().is_err());
    assert!(matches!(
        kmeans(u32::MAX, 4).validate(),
        Err(ModelError::InvalidSpec { .. })
    ));
}

#[test]
fn validate_rejects_bad_specs() {
    assert!(pmf_spec().validate().is_ok());
    let too_big = ModelSpec::MatrixFactorization {
        users: u32::MAX,
        items: 1,
        factors: 10,
        l2: 0.0,
        mean: 0.0,
        init_std: 0.1,
        prior: 0.0,
    };
    assert!(matches!(
        too_big.validate(),
        Err(ModelError::InvalidSpec { .. })
    ));
    let bad_l2 = ModelSpec::LogisticRegression {
        features: 3,
        l2: -1.0,
        init_bias: 0.0,
    };
    assert!(bad_l2.validate().is_err());
    let biggest_lr = ModelSpec::LogisticRegression {
        features: u32::MAX,
        l2: 0.0,
        init_bias: 0.0,
    };
    assert!(biggest_lr.validate().is_ok());
}

#[test]
fn init_params_is_seeded_and_shaped() {
    let spec = pmf_spec();
    let a = spec.init_params(42);
    let b = spec.init_params(42);
    let c = spec.init_params(43);
    assert_eq!(a.len(), spec.num_params());
    assert_eq!(a, b);
    assert_ne!(a, c);
    let n_factors = 50 * 4;
    assert!(
        a[n_factors..].iter().all(|&x| x == 0.0),
        "biases start at 0"
    );
    let factors = &a[..n_factors];
    assert!(factors.iter().all(|&x| x != 0.0));
    let var = factors.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>() / n_factors as f64;
    assert!((var.sqrt() - 0.1).abs() < 0.02, "std {}", var.sqrt());

    let lr = ModelSpec::LogisticRegression {
        features: 5,
        l2: 0.0,
        init_bias: 0.0,
    };
    assert_eq!(lr.init_params(1), vec![0.0; 6]);
    let imbalanced = ModelSpec::LogisticRegression {
        features: 2,
        l2: 0.0,
        init_bias: -3.5,
    };
    assert_eq!(imbalanced.init_params(1), vec![0.0, 0.0, -3.5]);
    assert!(
        ModelSpec::LogisticRegression {
            features: 2,
            l2: 0.0,
            init_bias: f32::NAN,
        }
        .validate()
        .is_err()
    );
    // Specs written before init_bias existed start at 0.
    let old: ModelSpec =
        serde_json::from_str(r#"{"logistic_regression":{"features":2,"l2":0.5}}"#).unwrap();
    assert_eq!(old.init_params(0), vec![0.0; 3]);
}

#[test]
fn batch_loss_merges() {
    let mut a = BatchLoss::new(1.5, 3);
    a.merge(BatchLoss::new(2.5, 1));
    assert_eq!(a, BatchLoss::new(4.0, 4));
    assert_eq!(a.mean(), 1.0);
    assert!(BatchLoss::default().mean().is_nan());
    let total: BatchLoss = [a, BatchLoss::new(1.0, 1)].into_iter().sum();
    assert_eq!(total, BatchLoss::new(5.0, 5));
}

#[test]
fn the_evaluation_fits_the_task() {
    let tasks = [
        (
            ModelSpec::LogisticRegression {
                features: 1,
                l2: 0.0,
                init_bias: 0.0,
            },
            "binary",
        ),
        (
            ModelSpec::MatrixFactorization {
                users: 1,
                items: 1,
                factors: 1,
                l2: 0.0,
                mean: 0.0,
                init_std: 0.1,
                prior: 0.0,
            },
            "regression",
        ),
        (
            ModelSpec::Svm {
                features: 1,
                l2: 0.0,
            },
            "margin",
        ),
        (ModelSpec::KMeans { features: 1, k: 1 }, "clustering"),
        (
            ModelSpec::Mlp {
                features: 2,
                hidden: vec![3],
                classes: 3,
                l2: 0.0,
            },
            "multiclass",
        ),
    ];
    for (spec, task) in tasks {
        assert_eq!(spec.evaluation().task(), task, "{}", spec.name());
    }
}
