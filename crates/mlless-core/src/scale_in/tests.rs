//! The tuner's tests: smoothing, knee, curves, duration model and decisions.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

use super::*;
use crate::fit::median;

/// `v` with multiplicative Gaussian noise of relative size `rel`.
fn noisy(rng: &mut StdRng, v: f64, rel: f64) -> f64 {
    v * (1.0 + rel * rng.sample::<f64, _>(StandardNormal))
}

/// Largest relative error of `fitted` against `truth` over `ts`.
fn max_rel_err(
    fitted: impl Fn(f64) -> f64,
    truth: impl Fn(f64) -> f64,
    ts: impl Iterator<Item = u64>,
) -> f64 {
    ts.map(|t| (fitted(t as f64) / truth(t as f64) - 1.0).abs())
        .fold(0.0, f64::max)
}

// --- smoothing and knee ----------------------------------------------------------------------

#[test]
fn tuner_ewma_follows_its_recurrence() {
    let mut e = Ewma::new(0.25).unwrap();
    assert_eq!(e.value(), None);
    assert_eq!(e.update(4.0), 4.0);
    assert_eq!(e.update(8.0), 5.0);
    assert_eq!(e.update(1.0), 4.0);
    e.reset();
    assert_eq!(e.update(2.0), 2.0);
    assert!(Ewma::new(0.0).is_err());
    assert!(Ewma::new(1.5).is_err());
    assert!(Ewma::new(f64::NAN).is_err());
}

#[test]
fn tuner_knee_on_a_noiseless_curve_follows_the_rule() {
    // L(t) = 1/(0.05 t^0.8 + 1.2) + 0.3 fed raw (no EWMA): the knee is the first step t
    // with (L(t−W) − L(t))/W < 5 % of the largest such drop, which is the first one.
    let truth = ReferenceCurve {
        theta: [0.05, 1.2, 0.8, 0.3],
    };
    let (w, f) = (20u64, 0.05);
    let mut k = KneeDetector::new(w as u32, f, 1).unwrap();
    let mut found = None;
    for t in 1..=1000u64 {
        if let Some(knee) = k.update(t, truth.eval(t as f64)) {
            found = Some(knee);
            break;
        }
    }
    let drop = |t: u64| (truth.eval((t - w) as f64) - truth.eval(t as f64)) / w as f64;
    let max = drop(w + 1);
    let expected = (w + 1..=1000).find(|&t| drop(t) < f * max).unwrap();
    assert_eq!(found, Some(expected));
    assert!((k.max_drop() - max).abs() < 1e-15);

    // Patience delays the report but not the step.
    let mut k = KneeDetector::new(w as u32, f, 10).unwrap();
    let mut reported = None;
    for t in 1..=1000u64 {
        if k.update(t, truth.eval(t as f64)).is_some() {
            reported = Some(t);
            break;
        }
    }
    assert_eq!(k.knee(), Some(expected));
    assert_eq!(reported, Some(expected + 9));
}

#[test]
fn tuner_knee_ignores_noise_on_a_steep_line_and_finds_a_flat_one() {
    let mut rng = StdRng::seed_from_u64(11);
    let mut ewma = Ewma::new(0.2).unwrap();
    let mut k = KneeDetector::new(20, 0.05, 10).unwrap();
    for t in 1..=1000u64 {
        let loss = noisy(&mut rng, 2.5 - 0.002 * t as f64, 0.01);
        assert_eq!(k.update(t, ewma.update(loss)), None, "false knee at {t}");
    }
    // The same line, then flat: the knee is within a window of the corner (t = 500).
    let mut ewma = Ewma::new(0.2).unwrap();
    let mut k = KneeDetector::new(20, 0.05, 10).unwrap();
    for t in 1..=1000u64 {
        let loss = noisy(&mut rng, 2.5 - 0.002 * t.min(500) as f64, 0.01);
        k.update(t, ewma.update(loss));
    }
    let knee = k.knee().expect("a knee");
    assert!((500..=540).contains(&knee), "knee at {knee}");
}

// --- reference curve -------------------------------------------------------------------------

const REFERENCE_CASES: [[f64; 4]; 4] = [
    [0.05, 1.2, 0.8, 0.3],
    [0.02, 2.0, 1.0, 0.1],
    [0.3, 1.0, 0.5, 0.5],
    [0.01, 1.5, 1.3, 0.2],
];

/// The acceptance criterion: fitted on t = 1..=300 with 1 % noise, the curve predicts the
/// noiseless one at t = 301..=500 within 2 %.
#[test]
fn tuner_reference_fit_predicts_200_steps_ahead() {
    let mut worst: f64 = 0.0;
    for (case, theta) in REFERENCE_CASES.iter().enumerate() {
        let truth = ReferenceCurve { theta: *theta };
        for seed in 0..3 {
            let mut rng = StdRng::seed_from_u64(100 * case as u64 + seed);
            let points: Vec<(f64, f64)> = (1..=300)
                .map(|t| (t as f64, noisy(&mut rng, truth.eval(t as f64), 0.01)))
                .collect();
            let fit = ReferenceCurve::fit(&points).unwrap();
            assert!(fit.theta.iter().all(|&v| v >= 0.0), "{fit:?}");
            let err = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), 301..=500);
            let in_range = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), 1..=300);
            eprintln!(
                "reference {theta:?} seed {seed}: fitted {:?}, max error {:.3} % in range, \
                 {:.3} % over the next 200 steps",
                fit.theta,
                100.0 * in_range,
                100.0 * err
            );
            assert!(err < 0.02, "{theta:?} seed {seed}: {err}");
            worst = worst.max(err);
        }
    }
    eprintln!(
        "reference: worst error 200 steps ahead {:.3} %",
        100.0 * worst
    );
}

#[test]
fn tuner_reference_fit_is_exact_on_exact_data_and_drops_outliers() {
    let truth = ReferenceCurve {
        theta: [0.05, 1.2, 0.8, 0.3],
    };
    let mut points: Vec<(f64, f64)> = (1..=300)
        .map(|t| (t as f64, truth.eval(t as f64)))
        .collect();
    let fit = ReferenceCurve::fit(&points).unwrap();
    let err = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), 1..=1000);
    assert!(err < 1e-3, "exact data: {err}, {fit:?}");
    // Loss spikes (a bad minibatch) barely move the fit.
    let mut rng = StdRng::seed_from_u64(3);
    for i in (17..300).step_by(37) {
        points[i].1 *= 3.0;
    }
    for p in points.iter_mut() {
        p.1 = noisy(&mut rng, p.1, 0.01);
    }
    let fit = ReferenceCurve::fit(&points).unwrap();
    let err = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), 301..=500);
    eprintln!(
        "reference with 8 spikes ×3: {:.3} % 200 steps ahead",
        100.0 * err
    );
    assert!(err < 0.02, "{err}");
}

/// A rising loss would need θ0·θ2 < 0. Every curve with θ ≥ 0 is non-increasing, and the
/// best non-increasing fit to rising data is a constant: the one of least relative error,
/// `Σ y⁻¹ / Σ y⁻²`.
#[test]
fn tuner_reference_fit_keeps_theta_non_negative() {
    let points: Vec<(f64, f64)> = (1..=100)
        .map(|t| (t as f64, 0.5 + 0.001 * t as f64))
        .collect();
    let fit = ReferenceCurve::fit(&points).unwrap();
    assert!(fit.theta.iter().all(|&v| v >= 0.0), "{fit:?}");
    let mean = points.iter().map(|p| 1.0 / p.1).sum::<f64>()
        / points.iter().map(|p| p.1.powi(-2)).sum::<f64>();
    for t in [1.0, 50.0, 100.0, 1000.0] {
        assert!(
            (fit.eval(t) - mean).abs() < 1e-3,
            "L({t}) = {}",
            fit.eval(t)
        );
    }
}

#[test]
fn tuner_curve_fits_reject_bad_points() {
    let ok: Vec<(f64, f64)> = (1..=10).map(|t| (t as f64, 1.0 / t as f64)).collect();
    assert!(matches!(
        ReferenceCurve::fit(&ok[..5]),
        Err(ScaleInError::NotEnoughPoints { got: 5, .. })
    ));
    let mut bad = ok.clone();
    bad[3].1 = 0.0;
    assert!(matches!(
        SlowCurve::fit(&bad),
        Err(ScaleInError::InvalidPoint { .. })
    ));
    bad[3].1 = f64::NAN;
    assert!(ReferenceCurve::fit(&bad).is_err());
    let mut bad = ok;
    bad[0].0 = -1.0;
    assert!(ReferenceCurve::fit(&bad).is_err());
}

// --- slow curve ------------------------------------------------------------------------------

/// Slow-convergence shapes: over t = 6..=800 the first falls 52 %, the last 13 %.
const SLOW_CASES: [[f64; 4]; 5] = [
    [1e-5, 0.01, 2.0, 0.25],
    [1e-6, 0.002, 2.0, 0.3],
    [0.0, 0.004, 2.5, 0.4],
    [5e-7, 0.003, 1.2, 0.35],
    [2e-6, 0.0, 4.0, 0.2],
];

/// Fits `truth` with 1 % noise on t = 6..=`end` (a 5-step warm-up after a removal) and
/// returns the largest relative error over t = `end`+1..=`end`+200.
fn slow_fit_error(truth: &SlowCurve, end: u64, seed: u64) -> (SlowCurve, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let points: Vec<(f64, f64)> = (6..=end)
        .map(|t| (t as f64, noisy(&mut rng, truth.eval(t as f64), 0.01)))
        .collect();
    let fit = SlowCurve::fit(&points).unwrap();
    assert!(fit.c.iter().all(|&v| v >= 0.0), "{fit:?}");
    let err = max_rel_err(|t| fit.eval(t), |t| truth.eval(t), end + 1..=end + 200);
    (fit, err)
}

/// Fitted on 595 steps with 1 % noise, the curve predicts the noiseless one over the next
/// 200 steps within 2 %.
#[test]
fn tuner_slow_fit_predicts_200_steps_ahead() {
    let mut worst: f64 = 0.0;
    for (case, c) in SLOW_CASES.iter().enumerate() {
        let truth = SlowCurve { c: *c };
        for seed in 0..3 {
            let (fit, err) = slow_fit_error(&truth, 600, 1000 + 100 * case as u64 + seed);
            eprintln!(
                "slow {c:?} seed {seed}: fitted {:?}, {:.3} % over the next 200 steps",
                fit.c,
                100.0 * err
            );
            assert!(err < 0.02, "{c:?} seed {seed}: {err}");
            worst = worst.max(err);
        }
    }
    eprintln!("slow: worst error 200 steps ahead {:.3} %", 100.0 * worst);
}

/// On 295 steps the 200-step extrapolation is noisier (the t² and t terms are hard to tell
/// apart), but its median over noise draws stays below 2 %.
#[test]
fn tuner_slow_fit_on_a_short_span_is_right_in_the_median() {
    for (case, c) in SLOW_CASES.iter().enumerate() {
        let truth = SlowCurve { c: *c };
        let mut errs: Vec<f64> = (0..11)
            .map(|seed| slow_fit_error(&truth, 300, 2000 + 100 * case as u64 + seed).1)
            .collect();
        let med = median(&mut errs);
        eprintln!(
            "slow {c:?} on 295 steps: median {:.3} %, max {:.3} % over 11 draws",
            100.0 * med,
            100.0 * errs[10]
        );
        assert!(med < 0.02, "{c:?}: median {med}");
    }
}

/// Data from `1/(0.01 t + 1) − 0.1` want c3 = −0.1; the fit keeps every c ≥ 0 and pins
/// c3 at 0.
#[test]
fn tuner_slow_fit_keeps_c_non_negative() {
    let points: Vec<(f64, f64)> = (1..=300)
        .map(|t| (t as f64, 1.0 / (0.01 * t as f64 + 1.0) - 0.1))
        .collect();
    let fit = SlowCurve::fit(&points).unwrap();
    assert!(fit.c.iter().all(|&v| v >= 0.0), "{fit:?}");
    assert_eq!(fit.c[3], 0.0, "{fit:?}");
    // And the best non-negative fit is still a decent description of the data.
    assert!(fit.rmse(&points) < 0.01, "rmse {}", fit.rmse(&points));
}

// --- step duration ---------------------------------------------------------------------------

#[test]
fn tuner_duration_model_recovers_durations_and_drops_outliers() {
    let c = [0.2, 0.03, 0.01];
    let truth = |p: u32| c[0] + f64::from(p - 1) * c[1] + f64::from(p) * c[2];
    let mut rng = StdRng::seed_from_u64(5);
    let mut samples = Vec::new();
    let mut injected = 0;
    for p in [8u32, 7, 6, 5, 4] {
        for i in 0..40 {
            let mut d = noisy(&mut rng, truth(p), 0.03);
            if i % 13 == 5 {
                d *= 10.0; // a cold start
                injected += 1;
            }
            samples.push((p, d));
        }
    }
    let m = StepDurationModel::fit(&samples).unwrap();
    assert_eq!(m.outliers, injected);
    assert_eq!(m.samples, samples.len() - injected);
    // Only d_1 = c0 + c2 and the slope c1 + c2 are identifiable; c2 is reported as 0.
    assert_eq!(m.c[2], 0.0);
    assert!((m.c[0] + m.c[2] - 0.21).abs() < 0.21 * 0.05, "{m:?}");
    assert!((m.c[1] + m.c[2] - 0.04).abs() < 0.04 * 0.05, "{m:?}");
    for p in 1..=8 {
        let err = (m.predict(p) / truth(p) - 1.0).abs();
        assert!(err < 0.02, "d_{p}: {} vs {}", m.predict(p), truth(p));
    }
    eprintln!("duration model {m:?}");
}

#[test]
fn tuner_duration_model_with_one_worker_count_attributes_everything_to_c0() {
    let samples: Vec<(u32, f64)> = [0.5, 0.52, 0.48, 0.5, 9.0]
        .iter()
        .map(|&d| (8, d))
        .collect();
    let m = StepDurationModel::fit(&samples).unwrap();
    assert_eq!(m.outliers, 1);
    assert_eq!(m.c, [0.5, 0.0, 0.0]);
    assert_eq!(m.predict(7), 0.5);
    assert_eq!(m.predict(8), 0.5);
}

/// Durations that fall with p would need c1 + c2 < 0: the slope is pinned at 0 instead.
#[test]
fn tuner_duration_model_keeps_c_non_negative() {
    let samples = [(2u32, 1.0), (4, 0.8), (6, 0.6), (8, 0.4)];
    let m = StepDurationModel::fit(&samples).unwrap();
    assert!(m.c.iter().all(|&v| v >= 0.0), "{m:?}");
    assert_eq!(m.c[1], 0.0);
    assert!((m.c[0] - 0.7).abs() < 1e-12, "{m:?}");
    assert!(StepDurationModel::fit(&[]).is_err());
    assert!(StepDurationModel::fit(&[(0, 1.0)]).is_err());
    assert!(StepDurationModel::fit(&[(1, -1.0)]).is_err());
}

// --- the tuner -------------------------------------------------------------------------------

/// A run of the supervisor loop against the tuner.
struct Run {
    decisions: Vec<ScaleInDecision>,
    knee: Option<u64>,
    final_workers: u32,
    min_workers_seen: u32,
}

/// Simulates `steps` steps from P workers. A step of p workers lasts
/// `0.2 + 0.03 (p − 1) + 0.01 p` s (± 2 %) and advances the curve's clock by `sqrt(p/P)` (fewer
/// workers make less progress per step); after the n-th removal the loss is multiplied by
/// `penalty(n)`. The loss has 1 % noise.
fn simulate(
    curve: impl Fn(f64) -> f64,
    config: ScaleInConfig,
    initial: u32,
    steps: u64,
    penalty: impl Fn(u32) -> f64,
    seed: u64,
) -> Run {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tuner = ScaleInTuner::new(config, initial).unwrap();
    let (mut workers, mut removals, mut now, mut clock) = (initial, 0u32, 0.0, 0.0);
    let mut run = Run {
        decisions: Vec::new(),
        knee: None,
        final_workers: initial,
        min_workers_seen: initial,
    };
    for step in 1..=steps {
        let p = f64::from(workers);
        let d = noisy(&mut rng, 0.2 + 0.03 * (p - 1.0) + 0.01 * p, 0.02);
        now += d;
        clock += (p / f64::from(initial)).sqrt();
        let loss = noisy(&mut rng, curve(clock) * penalty(removals), 0.01);
        tuner.observe(step, loss, d, workers).unwrap();
        if let Some(decision) = tuner.decide(now) {
            assert_eq!(decision.workers_before, workers);
            if decision.remove {
                workers -= 1;
                removals += 1;
                tuner.notify_removed(step, workers).unwrap();
            }
            run.decisions.push(decision);
        }
        run.min_workers_seen = run.min_workers_seen.min(workers);
    }
    run.knee = tuner.knee_step();
    run.final_workers = tuner.workers();
    run
}

fn check_decisions(run: &Run, config: &ScaleInConfig) {
    for pair in run.decisions.windows(2) {
        assert!(
            pair[1].now_s - pair[0].now_s >= config.interval_s,
            "two decisions {} s apart",
            pair[1].now_s - pair[0].now_s
        );
    }
    for d in &run.decisions {
        // Every decision is consistent with its own record.
        let t_ref = (d.step - d.reference_first_step + 1) as f64;
        assert_eq!(
            d.steps_ahead_full,
            (d.horizon_s / d.duration_full_s).floor() as u64
        );
        assert_eq!(
            d.predicted_loss_full,
            d.reference.eval(t_ref + d.steps_ahead_full as f64)
        );
        match d.basis {
            DecisionBasis::StallBound => {
                assert_eq!(d.predicted_loss_p, d.reference.eval(t_ref));
                assert_eq!(d.workers_before, d.initial_workers);
            }
            DecisionBasis::SlowCurve => {
                let t = (d.step - d.slow_removal_step.unwrap()) as f64;
                assert_eq!(
                    d.steps_ahead_p,
                    (d.horizon_s / d.duration_p_s).floor() as u64
                );
                let slow = d.slow.unwrap();
                assert_eq!(d.predicted_loss_p, slow.eval(t + d.steps_ahead_p as f64));
            }
        }
        let s = (d.predicted_loss_p - d.predicted_loss_full) / d.predicted_loss_full;
        assert_eq!(d.s_delta, s);
        assert_eq!(d.remove, s < d.threshold);
        assert_eq!(d.workers_after, d.workers_before - u32::from(d.remove));
        assert!(d.workers_after >= config.min_workers);
        assert!(d.step >= d.knee_step);
    }
}

fn test_config() -> ScaleInConfig {
    ScaleInConfig {
        min_workers: 3,
        ..ScaleInConfig::mlless()
    }
}

#[test]
fn tuner_removes_workers_after_the_knee_down_to_the_minimum() {
    let truth = ReferenceCurve {
        theta: [0.05, 1.2, 0.8, 0.3],
    };
    // The slope of the noiseless curve, to judge the knee.
    let slope = |t: f64| truth.eval(t) - truth.eval(t + 1.0);
    let steep_until = (1..).find(|&t| slope(t as f64) < 0.2 * slope(1.0)).unwrap();
    let flat_from = (1..)
        .find(|&t| slope(t as f64) < 0.01 * slope(1.0))
        .unwrap();
    let config = test_config();
    for seed in 0..3 {
        let run = simulate(|t| truth.eval(t), config.clone(), 8, 2000, |_| 1.0, seed);
        let knee = run.knee.expect("a knee");
        eprintln!(
            "seed {seed}: knee at {knee} (slope < 20 % of the first at {steep_until}, \
             < 1 % at {flat_from}); decisions:"
        );
        for d in &run.decisions {
            eprintln!(
                "  step {} t={:.1}s {:?} p={} s_Δ={:+.4} remove={} (ℓ {:.4} vs L {:.4}, \
                 d_p {:.3} d_P {:.3}, rmse ref {:.4} slow {:?})",
                d.step,
                d.now_s,
                d.basis,
                d.workers_before,
                d.s_delta,
                d.remove,
                d.predicted_loss_p,
                d.predicted_loss_full,
                d.duration_p_s,
                d.duration_full_s,
                d.reference_rmse,
                d.slow_rmse
            );
        }
        assert!(
            (steep_until..=flat_from).contains(&knee),
            "knee at {knee}, not in [{steep_until}, {flat_from}]"
        );
        check_decisions(&run, &config);
        let first = run.decisions.first().expect("decisions after the knee");
        assert!(first.step >= knee);
        assert_eq!(first.basis, DecisionBasis::StallBound);
        let removals = run.decisions.iter().filter(|d| d.remove).count();
        assert_eq!(removals, 5, "8 → 3 workers");
        assert_eq!(run.final_workers, config.min_workers);
        assert_eq!(run.min_workers_seen, config.min_workers);
    }
}

#[test]
fn tuner_keeps_workers_while_the_loss_falls_steeply() {
    let config = test_config();
    for seed in 0..3 {
        let run = simulate(|t| 2.5 - 0.002 * t, config.clone(), 8, 1000, |_| 1.0, seed);
        assert_eq!(run.knee, None);
        assert!(run.decisions.is_empty());
        assert_eq!(run.final_workers, 8);
    }
}

/// A removal that makes the loss 20 % worse than the reference projects s_Δ ≈ 0.2 > S, so
/// the tuner stops after it.
#[test]
fn tuner_stops_removing_when_a_removal_hurts() {
    let truth = ReferenceCurve {
        theta: [0.05, 1.2, 0.8, 0.3],
    };
    let config = test_config();
    let run = simulate(
        |t| truth.eval(t),
        config.clone(),
        8,
        2000,
        |n| if n == 0 { 1.0 } else { 1.2 },
        1,
    );
    check_decisions(&run, &config);
    assert_eq!(run.decisions.iter().filter(|d| d.remove).count(), 1);
    assert_eq!(run.final_workers, 7);
    let later: Vec<_> = run
        .decisions
        .iter()
        .filter(|d| d.basis == DecisionBasis::SlowCurve)
        .collect();
    assert!(later.len() > 10, "{} slow-curve decisions", later.len());
    assert!(later.iter().all(|d| d.s_delta > 0.15 && !d.remove));
}

/// With a horizon long enough for the full fleet to still gain more than S, the stall bound
/// keeps the workers at the knee.
#[test]
fn tuner_stall_bound_keeps_workers_over_a_long_horizon() {
    let truth = ReferenceCurve {
        theta: [0.05, 1.2, 0.8, 0.3],
    };
    let config = ScaleInConfig {
        interval_s: 300.0,
        horizon_s: 300.0,
        ..test_config()
    };
    let run = simulate(|t| truth.eval(t), config.clone(), 8, 1000, |_| 1.0, 2);
    check_decisions(&run, &config);
    let first = run.decisions.first().expect("a decision");
    assert_eq!(first.basis, DecisionBasis::StallBound);
    assert!(first.steps_ahead_full > 500);
    assert!(
        first.s_delta > config.threshold && !first.remove,
        "{first:?}"
    );
}

#[test]
fn tuner_rejects_bad_input() {
    assert!(ScaleInTuner::new(ScaleInConfig::mlless(), 0).is_err());
    for bad in [
        ScaleInConfig {
            threshold: 1.5,
            ..ScaleInConfig::mlless()
        },
        ScaleInConfig {
            horizon_s: 20.0,
            ..ScaleInConfig::mlless()
        },
        ScaleInConfig {
            min_workers: 0,
            ..ScaleInConfig::mlless()
        },
        ScaleInConfig {
            min_fit_points: 3,
            ..ScaleInConfig::mlless()
        },
        ScaleInConfig {
            knee_fraction: 1.0,
            ..ScaleInConfig::mlless()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
    let mut tuner = ScaleInTuner::new(ScaleInConfig::mlless(), 4).unwrap();
    tuner.observe(1, 0.7, 0.3, 4).unwrap();
    assert!(matches!(
        tuner.observe(1, 0.7, 0.3, 4),
        Err(ScaleInError::StepNotIncreasing { step: 1, last: 1 })
    ));
    assert!(tuner.observe(2, f64::NAN, 0.3, 4).is_err());
    assert!(tuner.observe(2, 0.7, -1.0, 4).is_err());
    assert!(tuner.observe(2, 0.7, 0.3, 0).is_err());
    tuner.observe(2, 0.7, 0.3, 4).unwrap();
    assert!(tuner.notify_removed(2, 4).is_err());
    assert!(tuner.notify_removed(2, 0).is_err());
    assert_eq!(tuner.decide(100.0), None, "no knee yet");
}

// --- which worker leaves ---------------------------------------------------------------------

#[test]
fn tuner_picks_the_worst_replica() {
    assert_eq!(pick_worker_to_remove(&[]), None);
    assert_eq!(pick_worker_to_remove(&[(3, 0.5)]), Some(3));
    assert_eq!(
        pick_worker_to_remove(&[(0, 0.41), (1, 0.47), (2, 0.44)]),
        Some(1)
    );
    // Ties go to the highest id, whatever the order.
    assert_eq!(
        pick_worker_to_remove(&[(5, 0.47), (9, 0.47), (2, 0.47), (1, 0.3)]),
        Some(9)
    );
    // A diverged replica goes first.
    assert_eq!(
        pick_worker_to_remove(&[(1, f64::INFINITY), (0, f64::NAN), (2, 0.1)]),
        Some(0)
    );
}

// --- the job's pace and the cost rule --------------------------------------------------------

/// A job of `steps` steps of `step_s` seconds each (± 2 %), planned to end at its last step,
/// whose training loss follows a flattening curve (1 % noise), under the cost rule with `E = 0`
/// so that it never removes: the decisions it makes, on `pace`.
fn paced_decisions(pace: Pace, steps: u64, step_s: f64) -> Vec<ScaleInDecision> {
    let truth = ReferenceCurve {
        theta: [0.05, 1.2, 0.8, 0.3],
    };
    let config = ScaleInConfig {
        pace,
        efficiency_threshold: 0.0,
        ..ScaleInConfig::default()
    };
    let mut rng = StdRng::seed_from_u64(7);
    let mut tuner = ScaleInTuner::new(config, 8).unwrap();
    let (mut now, mut decisions) = (0.0, Vec::new());
    for step in 0..steps {
        let d = noisy(&mut rng, step_s, 0.02);
        now += d;
        let loss = noisy(&mut rng, truth.eval((step + 1) as f64), 0.01);
        tuner.observe(step, loss, d, 8).unwrap();
        tuner.set_progress(Some((step + 1) as f64 / steps as f64));
        decisions.extend(tuner.decide(now));
    }
    decisions
}

#[test]
fn tuner_decides_at_the_jobs_pace_for_a_2_second_and_a_60_second_job() {
    // 600 steps of 3.3 ms (a 2-second job) and of 100 ms (a 60-second job).
    let short = paced_decisions(Pace::DEFAULT, 600, 0.0033);
    let long = paced_decisions(Pace::DEFAULT, 600, 0.1);
    let steps = |ds: &[ScaleInDecision]| ds.iter().map(|d| d.step).collect::<Vec<_>>();
    assert_eq!(steps(&short), steps(&long), "the same share of the job");
    assert!(short.len() >= 20, "{} decisions", short.len());
    for pair in short.windows(2) {
        // Every 1/40 of 600 steps: 15.
        let gap = pair[1].step - pair[0].step;
        assert!((15..=16).contains(&gap), "{:?}", steps(&short));
    }
    for d in short.iter().chain(&long) {
        assert!(d.step >= d.knee_step);
        assert!(
            (14..=16).contains(&d.horizon_steps),
            "h = {}",
            d.horizon_steps
        );
        assert_eq!(d.rule, ScaleInRule::Cost);
        assert!(!d.remove, "E = 0 never removes");
        let cost = d.cost.as_ref().expect("the cost figures");
        assert!(cost.gain >= 0.0 && cost.gain <= cost.gain_measured);
    }
    // MLLess's 10-second clock decides at most once in the short job, 6 times in the long.
    assert!(paced_decisions(Pace::Clock, 600, 0.0033).len() <= 1);
    assert!(paced_decisions(Pace::Clock, 600, 0.1).len() <= 6);
}

#[test]
fn tuner_step_pace_decides_every_n_steps() {
    let ds = paced_decisions(Pace::Steps { interval: 25 }, 600, 0.05);
    assert!(ds.len() >= 15, "{} decisions", ds.len());
    for pair in ds.windows(2) {
        assert_eq!(pair[1].step - pair[0].step, 25);
    }
    assert!(ds.iter().all(|d| d.horizon_steps == 25));
}

/// A run of P = 8 under the cost rule watching a validation curve `validation(clock)`,
/// evaluated every 10 steps (0.2 % noise), over 1,000 steps planned as the whole job; a step of
/// p workers lasts `0.05 + 0.02 (p − 1)` s and advances the curve's clock by `p / P`. Returns
/// the decisions and the workers at the end.
fn validation_run(validation: impl Fn(f64) -> f64, seed: u64) -> (Vec<ScaleInDecision>, u32) {
    let config = ScaleInConfig {
        min_workers: 2,
        ..ScaleInConfig::default()
    };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tuner = ScaleInTuner::new(config, 8).unwrap();
    tuner.watch_validation();
    let (mut workers, mut now, mut clock, mut decisions) = (8u32, 0.0, 0.0, Vec::new());
    for step in 0..1000u64 {
        let p = f64::from(workers);
        let d = noisy(&mut rng, 0.05 + 0.02 * (p - 1.0), 0.02);
        now += d;
        clock += p / 8.0;
        tuner
            .observe(step, noisy(&mut rng, 1.0, 0.01), d, workers)
            .unwrap();
        if (step + 1) % 10 == 0 {
            let v = noisy(&mut rng, validation(clock), 0.002);
            tuner.observe_validation(step, v).unwrap();
        }
        tuner.set_progress(Some((step + 1) as f64 / 1000.0));
        if let Some(decision) = tuner.decide(now) {
            if decision.remove {
                workers -= 1;
                tuner.notify_removed(step, workers).unwrap();
            }
            decisions.push(decision);
        }
    }
    (decisions, workers)
}

#[test]
fn tuner_cost_rule_removes_workers_once_the_validation_curve_flattens() {
    for seed in 0..3 {
        // Flat from about step 150 on (its floor 0.9, 0.5 % above it by then).
        let (decisions, workers) = validation_run(|t| 0.9 + 0.5 * (-t / 25.0).exp(), seed);
        assert_eq!(workers, 2, "down to --min-workers; {decisions:#?}");
        let first = decisions.iter().find(|d| d.remove).expect("a removal");
        assert_eq!(first.signal, Signal::Validation);
        assert!(first.step >= first.knee_step);
        assert!(first.step <= 400, "first removal at step {}", first.step);
        for d in &decisions {
            let cost = d.cost.as_ref().expect("the cost figures");
            assert_eq!(d.remove, cost.efficiency < cost.threshold);
            assert!(cost.worker_cost_usd > 0.0 && cost.spent_usd > 0.0);
        }
    }
}

#[test]
fn tuner_cost_rule_removes_workers_when_the_validation_curve_turns_up() {
    // Overfitting: the metric falls until the clock's 300, then rises.
    let (decisions, workers) = validation_run(|t| 1.0 + 1e-6 * (t - 300.0).powi(2), 1);
    assert_eq!(workers, 2, "{decisions:#?}");
}

#[test]
fn tuner_cost_rule_keeps_the_fleet_while_the_validation_curve_keeps_improving() {
    for seed in 0..3 {
        // Improving at a steady rate in log terms all along.
        let (decisions, workers) = validation_run(|t| 2.0 * (-t / 150.0).exp(), seed);
        assert_eq!(workers, 8, "{decisions:#?}");
        assert!(decisions.len() >= 5, "{} decisions", decisions.len());
        assert!(
            decisions
                .iter()
                .all(|d| d.cost.as_ref().is_some_and(|c| c.efficiency > 0.5)),
            "{decisions:#?}"
        );
    }
}

#[test]
fn tuner_step_cost_counts_workers_services_and_requests() {
    let cost = StepCost {
        worker_usd_per_s: 2.0,
        services_usd_per_s: 0.5,
        request_usd: [0.1, 0.01, 0.001],
    };
    // 4 workers × 0.5 s × 2 + 0.5 s × 0.5 + 0.1 + 0.04 + 0.016.
    assert!((cost.step_usd(4, 0.5) - 4.406).abs() < 1e-12);
    assert!((cost.usd_per_s(4, 0.5) - 8.812).abs() < 1e-12);
    assert!(cost.is_valid());
    assert!(
        !StepCost {
            worker_usd_per_s: -1.0,
            ..cost
        }
        .is_valid()
    );
}

#[test]
fn tuner_config_of_an_older_spec_keeps_mllesss_rule_on_the_clock() {
    let old: ScaleInConfig =
        serde_json::from_str(r#"{"threshold": 0.05, "interval_s": 10.0, "horizon_s": 10.0}"#)
            .unwrap();
    assert_eq!(old.rule, ScaleInRule::Mlless);
    assert_eq!(old.pace, Pace::Clock);
    assert_eq!(ScaleInConfig::default().rule, ScaleInRule::Cost);
    assert_eq!(ScaleInConfig::default().pace, Pace::DEFAULT);
    let json = serde_json::to_string(&ScaleInConfig::default()).unwrap();
    let back: ScaleInConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, ScaleInConfig::default());
}
