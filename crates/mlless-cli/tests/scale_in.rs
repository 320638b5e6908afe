//! The scale-in auto-tuner, end to end: it removes workers once the loss flattens, never below
//! the minimum, the removed workers stop being billed, and the model still converges.

mod common;

use common::*;

/// Synthetic ratings (2,000 × 1,500, σ = 0.5), 4 workers under ISP, decisions every second: the tuner
/// removes workers after the knee, the record shows each removal in the steps' worker counts,
/// the removed workers' invocations end (they stop being billed), and the model reaches an
/// RMSE within 10% of σ. What that saves depends on how much faster fewer workers step, which
/// is a matter of the machine: the bill is compared in a benchmark, not here.
#[test]
fn scale_in_removes_workers_and_ends_their_invocations() {
    let dir = tempdir();
    let (data, sigma) = ratings_data(dir.path());
    let data = s(&data);
    let common = [
        "--data",
        data.as_str(),
        "--model",
        "pmf",
        "--workers",
        "4",
        "--max-epochs",
        "10",
    ];
    let mut args = common.to_vec();
    args.extend_from_slice(&[
        "--sync",
        "isp",
        "--scale-in",
        "auto",
        "--scale-in-interval",
        "1",
        "--horizon",
        "1",
        "--min-workers",
        "2",
    ]);
    let tuned = train(dir.path(), "tuned", &args);

    let scale_in = &tuned.scale_in;
    assert!(
        !scale_in.removals.is_empty(),
        "no worker removed; decisions: {:?}",
        scale_in.decisions
    );
    let knee_step = scale_in.decisions[0].knee_step;
    assert!(
        scale_in.removals[0].after_step >= knee_step,
        "removed before the knee"
    );
    assert!(scale_in.removals.len() <= 2, "below --min-workers");
    for removal in &scale_in.removals {
        for step in &tuned.steps {
            let present = step.workers.iter().any(|w| w.worker == removal.worker);
            assert_eq!(
                present,
                step.step <= removal.after_step,
                "worker {} at step {} (removed after {})",
                removal.worker,
                step.step,
                removal.after_step
            );
        }
    }
    let last = tuned.steps.last().expect("steps");
    assert_eq!(last.workers.len(), 4 - scale_in.removals.len());
    assert!(
        scale_in
            .decisions
            .iter()
            .all(|d| d.predicted_loss_full.is_finite() && d.duration_full_s > 0.0),
        "a decision without its inputs"
    );

    // The removed workers' invocations ended early.
    let duration = |name: String| {
        tuned
            .invocations
            .iter()
            .find(|i| i.name == name)
            .map(|i| i.duration_ms)
            .expect("invocation")
    };
    let survivor = last.workers[0].worker;
    for removal in &scale_in.removals {
        assert!(
            duration(format!("worker-{}", removal.worker)) < duration(format!("worker-{survivor}")),
            "removed worker {} ran as long as a survivor",
            removal.worker
        );
    }
    // ISP: what each removed worker held back reached the survivors, with its own weight.
    assert!(
        tuned.replica_spread < 1e-4,
        "replicas differ by {} after scale-in",
        tuned.replica_spread
    );
    let rmse = metric(&tuned, "test_rmse");
    assert!(rmse < 1.1 * sigma, "RMSE {rmse} vs σ {sigma}");

    // The report of this real run: well-formed SVG plots, shown inline by the HTML page.
    let out = dir.path().join("report");
    ok(&[
        "report",
        &s(&dir.path().join("tuned.json")),
        "--out",
        &s(&out),
    ]);
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    for plot in ["loss.svg", "cost.svg", "bytes.svg"] {
        let svg = std::fs::read_to_string(out.join(plot)).expect("plot written");
        let doc = roxmltree::Document::parse(&svg)
            .unwrap_or_else(|e| panic!("{plot} is not well-formed: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg", "{plot}");
        let lines = doc
            .descendants()
            .filter(|n| matches!(n.tag_name().name(), "polyline" | "path"))
            .count();
        assert!(lines > 0, "{plot} draws nothing");
        let body = &svg[svg.find("<svg").expect("svg element")..];
        assert!(
            html.contains(body.trim_end()),
            "report.html does not show {plot}"
        );
    }
    assert!(html.contains(&tuned.spec.job_id));
}

/// Scale-in needs the replicas equal at every step: it refuses SSP and ASP, and a minimum
/// above the fleet.
#[test]
fn scale_in_refuses_what_it_cannot_do() {
    let dir = tempdir();
    let input = write(dir.path(), "tiny.libsvm", &"1 1:1\n0 2:1\n".repeat(20));
    let data = dir.path().join("data");
    prepare_libsvm(&input, &data, 1);
    let data = s(&data);
    let base = [
        "train",
        "--data",
        &data,
        "--model",
        "lr",
        "--scale-in",
        "auto",
    ];
    let mut asp = base.to_vec();
    asp.extend_from_slice(&["--sync", "asp"]);
    assert!(fails(&asp).contains("--sync bsp or isp"));
    let mut min = base.to_vec();
    min.extend_from_slice(&["--workers", "2", "--min-workers", "3"]);
    assert!(fails(&min).contains("--min-workers 3"));
}
