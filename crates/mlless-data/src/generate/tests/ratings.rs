//! Tests of the ratings generator: counts, noise, skew, stars.

use super::*;

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
