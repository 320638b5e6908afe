//! Renders a hand-made but realistic run record (a scale-in from 4 to 2 workers, invocations,
//! a bill) and checks the files: well-formed SVG plots with lines, and a page that inlines them
//! and escapes the record's strings.

use std::path::Path;

use mlless_cost::{ObjectRequests, PriceTable, Usage};
use mlless_faas::{InvocationReport, Outcome};
use mlless_job::RunRecord;
use mlless_job::record::{StepRecord, WorkerStep};
use mlless_report::{
    ReportOptions, bill_at, comparison, cost_curve, measurements, price_table_of, render_report,
    render_report_with,
};

const STARTED: u64 = 1_795_962_381_000;

/// A run of 40 steps on 4 workers, then 30 on 2 (the auto-tuner let two go), on 120 minibatches.
fn record() -> RunRecord {
    let spec = serde_json::json!({
        "job_id": "job-<script>alert('x')</script>&co",
        "data_url": "/tmp/data \"quoted\"",
        "run_url": "/tmp/data/runs/job",
        "model": {"logistic_regression": {"features": 100000, "l2": 0.0001}},
        "workers": 4,
        "optimizer": {"kind": "momentum", "momentum": 0.9, "beta1": 0.9, "beta2": 0.999,
                      "epsilon": 1e-08},
        "lr": 0.5,
        "schedule": "inv-sqrt-epoch",
        "seed": 1,
        "stop": {"target_loss": null, "target_patience": 10, "max_epochs": 1,
                 "max_time_s": null},
        "channel": null,
        "limits": {"memory_mb": 1024, "timeout": {"secs": 900, "nanos": 0}},
        "train_batches": 120
    });
    let spec = serde_json::from_value(spec).expect("a job spec");
    let supervisor_offset_s = 0.02;
    let mut steps = Vec::new();
    let mut time_s = 0.05;
    let mut done = 0u64;
    for step in 0..70u64 {
        let p: u32 = if step < 40 { 4 } else { 2 };
        let (compute, exchange) = if p == 4 { (1.5, 8.0) } else { (0.8, 3.0) };
        let step_ms = 0.2 + compute + exchange + 0.1;
        time_s += step_ms / 1000.0;
        done += u64::from(p);
        let loss = 0.7 * (-(step as f64) / 30.0).exp() + 0.3;
        steps.push(StepRecord {
            step,
            time_s,
            epoch: done as f64 / 120.0,
            loss,
            workers: (0..p)
                .map(|worker| WorkerStep {
                    worker,
                    loss: loss + 0.01 * f64::from(worker),
                    samples: 1000,
                    read_ms: 0.2,
                    compute_ms: compute,
                    exchange_ms: exchange,
                    step_ms,
                    bytes_sent: 70_000 + 100 * step,
                    bytes_received: u64::from(p) * (70_000 + 100 * step),
                    messages_sent: 1,
                    messages_received: p - 1,
                    entries_sent: 8_000,
                    entries_held: 0,
                    updates_applied: p,
                    started_unix_ms: 1.7e12 + time_s * 1000.0,
                    published_unix_ms: 1.7e12 + time_s * 1000.0 + compute,
                })
                .collect(),
        });
    }
    let last_s = supervisor_offset_s + time_s;
    let invocation = |name: &str, start_ms: u64, duration_ms: u64| InvocationReport {
        name: name.into(),
        pid: Some(1000 + start_ms as u32),
        started_at_unix_ms: STARTED + start_ms,
        duration_ms,
        memory_mb: 1024,
        peak_rss_mb: 15.0,
        outcome: Outcome::Succeeded,
    };
    let end_ms = (last_s * 1000.0) as u64 + 40;
    let scale_in_ms = ((supervisor_offset_s + steps[39].time_s) * 1000.0) as u64;
    let invocations = vec![
        invocation("supervisor", 20, end_ms - 20),
        invocation("worker-0", 22, end_ms - 30),
        invocation("worker-1", 24, end_ms - 32),
        invocation("worker-2", 26, scale_in_ms - 26),
        invocation("worker-3", 28, scale_in_ms - 28),
    ];
    let wall_s = end_ms as f64 / 1000.0 + 0.01;
    let usages: Vec<Usage> = invocations
        .iter()
        .map(|i| Usage {
            duration_ms: i.duration_ms,
            memory_mb: i.memory_mb,
        })
        .collect();
    let bill = PriceTable::aws_lambda().bill(&usages, wall_s, ObjectRequests::default());
    RunRecord {
        format_version: 1,
        spec,
        started_at_unix_ms: STARTED,
        wall_s,
        train_samples: 120_000,
        test_samples: 30_000,
        epochs: steps.last().map_or(0.0, |s| s.epoch),
        steps,
        stop_reason: "the loss <held> & \"stopped\"".into(),
        metrics: [
            ("test_logloss".to_string(), 0.44),
            ("test_auc".to_string(), 0.86),
            ("test_samples".to_string(), 30_000.0),
        ]
        .into_iter()
        .collect(),
        invocations,
        bill: Some(bill),
        model_url: "file:///tmp/data/runs/job/model.bin".into(),
        replica_spread: 0.0,
        rounds: 0,
        scale_in: Default::default(),
        validation: None,
    }
}

/// The SVG document parses as XML, its root is `<svg>`, and it draws at least `lines` lines.
fn check_svg(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{} is not well-formed XML: {e}", path.display()));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg", "{}", path.display());
    // Points of every polyline or path (the mesh and the legend draw short ones too).
    let points: Vec<usize> = root
        .descendants()
        .filter(|n| matches!(n.tag_name().name(), "polyline" | "path"))
        .filter_map(|n| n.attribute("points").or(n.attribute("d")))
        .map(|p| p.split_whitespace().count())
        .collect();
    let long = points.iter().filter(|&&n| n > 10).count();
    assert!(
        long >= lines,
        "{}: {long} polylines or paths of more than 10 points, expected {lines}",
        path.display()
    );
    assert!(root.descendants().any(|n| n.tag_name().name() == "text"));
    text
}

#[test]
fn renders_plots_and_a_self_contained_page() {
    let record = record();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested").join("report");
    let files = render_report(&record, &out).unwrap();
    assert_eq!(files.dir, out);
    for file in files.all() {
        assert!(
            file.starts_with(&out) && file.is_file(),
            "{}",
            file.display()
        );
    }

    let loss = check_svg(&files.loss_svg, 1); // loss (the workers' line has 4 points)
    let cost = check_svg(&files.cost_svg, 1);
    let bytes = check_svg(&files.bytes_svg, 2); // sent, received
    assert!(loss.contains("workers"));

    let html = std::fs::read_to_string(&files.html).unwrap();
    for (id, svg) in [("loss", &loss), ("cost", &cost), ("bytes", &bytes)] {
        assert!(html.contains(&format!("id=\"plot-{id}\"")), "{id}");
        assert!(html.contains(svg.trim()), "the page inlines {id}.svg");
    }
    // Self-contained and escaped.
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        !html.contains("<script"),
        "a string of the record was not escaped"
    );
    assert!(!html.contains("src="));
    assert!(!html.contains("href="));
    assert!(html.contains("job-&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;co"));
    assert!(html.contains("the loss &lt;held&gt; &amp; &quot;stopped&quot;"));
    assert!(html.contains("/tmp/data &quot;quoted&quot;"));
    // Summary and comparison.
    for needle in [
        "lr (sparse logistic regression, 100000 features",
        "4 (from 2 to 4 during the run)",
        "bsp",
        "test_auc",
        "0.86000",
        "aws-lambda",
        "c5.large (VM)",
        "t3.medium (VM)",
        "c5.4xlarge (VM)",
        "(FaaS, this run)",
    ] {
        assert!(html.contains(needle), "the page lacks {needle:?}");
    }

    // A second rendering into the same directory replaces the files.
    let again = render_report(&record, &out).unwrap();
    assert_eq!(again, files);
}

#[test]
fn measurements_see_both_worker_counts() {
    let record = record();
    let m = measurements(&record, None);
    assert_eq!(m.workers, 4);
    assert_eq!(m.train_batches, 120);
    assert_eq!(m.phases.len(), 2);
    assert_eq!((m.phases[0].workers, m.phases[0].steps), (4, 40));
    assert_eq!((m.phases[1].workers, m.phases[1].steps), (2, 30));
    assert!((m.phases[0].exchange_ms - 8.0).abs() < 1e-9);
    assert!(
        (m.phases[0].step_ms - 9.8).abs() < 0.01,
        "{:?}",
        m.phases[0]
    );
    assert_eq!(m.other_invocations, 1);
    assert!((m.invocations_per_worker - 1.0).abs() < 1e-12);
    assert!(m.startup_s > 0.0 && m.startup_s < 0.1, "{}", m.startup_s);
    assert!(m.teardown_s > 0.0 && m.teardown_s < 0.1, "{}", m.teardown_s);
    // Two worker counts: the exchange model is fitted through both, e(P) = 3 + 2.5 (P − 2).
    let e = m.exchange_model();
    assert!(
        (e.at(2) - 3.0).abs() < 1e-9 && (e.at(4) - 8.0).abs() < 1e-9,
        "{e:?}"
    );
    // The prediction at 2 workers: read, compute and the rest averaged over the steps (no
    // contention without a core count), the exchange of 2 workers, over the whole work.
    let aws = price_table_of(&record);
    assert_eq!(aws, PriceTable::aws_lambda());
    let p2 = m.predict_faas(2, &aws);
    assert_eq!(p2.steps, 110);
    let compute = (40.0 * 1.5 + 30.0 * 0.8) / 70.0;
    assert!(
        (p2.step_ms - (0.2 + compute + 0.1 + 3.0)).abs() < 1e-6,
        "{p2:?}"
    );
    // More workers than measured: the exchange grows.
    assert!(m.predict_faas(8, &aws).step_ms > m.predict_faas(4, &aws).step_ms);
}

#[test]
fn cost_curve_rises_to_the_bill() {
    let record = record();
    let bill = record.bill.clone().unwrap();
    let curve = cost_curve(&record, &price_table_of(&record));
    assert!(
        curve
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1 + 1e-15)
    );
    let (_, end) = *curve.last().unwrap();
    assert!(
        (end - bill.total_usd).abs() <= 1e-9,
        "curve ends at {end}, the bill is {}",
        bill.total_usd
    );
    // A custom table is rebuilt from the bill.
    let mut custom = record.clone();
    let mut b = PriceTable::ibm_cloud_functions();
    b.name = "my-cloud".into();
    let usages: Vec<Usage> = custom
        .invocations
        .iter()
        .map(|i| Usage {
            duration_ms: i.duration_ms,
            memory_mb: i.memory_mb,
        })
        .collect();
    custom.bill = Some(b.bill(&usages, custom.wall_s, ObjectRequests::default()));
    let rebuilt = price_table_of(&custom);
    assert_eq!(rebuilt.name, "my-cloud");
    assert_eq!(rebuilt.granularity_ms, 100);
    assert!((rebuilt.gb_second_usd - b.gb_second_usd).abs() < 1e-15);
}

/// The first 40 steps of [`record`] (4 workers throughout) on a Redis channel, every function
/// running to the end of the run, with a bill of the old kind (no channel servers, no
/// object-store requests).
fn steady_redis_record() -> RunRecord {
    let mut record = record();
    record.steps.truncate(40);
    record.epochs = record.steps[39].epoch;
    record.spec.training.channel = Some("redis://127.0.0.1:6379".into());
    let end_ms = ((0.02 + record.steps[39].time_s) * 1000.0) as u64 + 40;
    for i in &mut record.invocations {
        i.duration_ms = end_ms - (i.started_at_unix_ms - STARTED);
    }
    record.wall_s = end_ms as f64 / 1000.0 + 0.01;
    let usages: Vec<Usage> = record
        .invocations
        .iter()
        .map(|i| Usage {
            duration_ms: i.duration_ms,
            memory_mb: i.memory_mb,
        })
        .collect();
    record.bill =
        Some(PriceTable::aws_lambda().bill(&usages, record.wall_s, ObjectRequests::default()));
    record
}

#[test]
fn the_prediction_at_the_runs_fleet_is_its_bill() {
    let record = steady_redis_record();
    let aws = PriceTable::aws_lambda();
    // The bill by hand: 5 functions of 1 GB for their durations, 5 requests, one Redis for the
    // wall time, one minibatch GET per worker and step.
    let billed_ms: u64 = record.invocations.iter().map(|i| i.duration_ms).sum();
    let compute = billed_ms as f64 / 1000.0 * 0.000_016_666_7;
    let requests = 5.0 * 0.2e-6;
    let redis = record.wall_s / 3600.0 * 0.17;
    let gets = 4.0 * 40.0 / 1000.0 * 0.0004;
    let by_hand = compute + requests + redis + gets;
    let bill = bill_at(&record, &aws);
    assert_eq!((bill.invocations, bill.billed_ms), (5, billed_ms));
    assert!((bill.services_usd - redis).abs() < 1e-15, "{bill:?}");
    assert!((bill.storage_usd - gets).abs() < 1e-15, "{bill:?}");
    assert!((bill.total_usd - by_hand).abs() < 1e-15, "{bill:?}");
    // The record's own bill is of the old kind: the same compute, nothing else.
    let recorded = record.bill.as_ref().unwrap();
    assert_eq!(recorded.compute_usd, bill.compute_usd);
    assert_eq!(recorded.services_usd + recorded.storage_usd, 0.0);
    // The model at the run's own fleet size reproduces its time and its bill (every function
    // is taken to run the whole wall time, a few ms more than the workers did).
    for cores in [None, Some(2)] {
        let m = measurements(&record, cores);
        let p = m.predict_faas(4, &price_table_of(&record));
        assert!((p.time_s / record.wall_s - 1.0).abs() < 0.01, "{p:?}");
        let error = p.cost_usd / by_hand - 1.0;
        assert!(error.abs() < 0.03, "{p:?} for {by_hand} ({error:+.3})");
        let predicted = p.bill.unwrap();
        assert!((predicted.storage_usd - gets).abs() < 1e-15);
        assert!((predicted.services_usd / redis - 1.0).abs() < 0.01);
    }
}

#[test]
fn comparison_lists_this_run_then_vms() {
    let record = record();
    let mut options = ReportOptions::for_record(&record);
    options.cores = Some(2);
    options.vm_startup_s = 0.0;
    options.vms = vec!["m5.large:0.096".parse().unwrap()];
    let rows = comparison(&record, &options);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].platform, "aws-lambda");
    assert_eq!(rows[0].time_s, record.wall_s);
    assert_eq!(rows[0].cost_usd, record.bill.as_ref().unwrap().total_usd);
    assert_eq!(
        (rows[1].platform.as_str(), rows[1].workers),
        ("m5.large", 4)
    );
    assert_eq!(
        (rows[2].platform.as_str(), rows[2].workers),
        ("m5.large", 1)
    );
    // Short runs pay the one-minute minimum: 4 machines cost 4 × 60 s.
    assert!((rows[1].cost_usd - 4.0 * 60.0 * 0.096 / 3600.0).abs() < 1e-12);
    let dir = tempfile::tempdir().unwrap();
    let files = render_report_with(&record, dir.path(), &options).unwrap();
    let html = std::fs::read_to_string(files.html).unwrap();
    assert!(html.contains("m5.large (VM)") && html.contains("2 shared cores"));
}

#[test]
fn an_empty_record_still_renders() {
    let mut record = record();
    record.steps.clear();
    record.invocations.clear();
    record.bill = None;
    record.epochs = 0.0;
    let dir = tempfile::tempdir().unwrap();
    let files = render_report(&record, dir.path()).unwrap();
    for svg in [&files.loss_svg, &files.cost_svg, &files.bytes_svg] {
        let text = std::fs::read_to_string(svg).unwrap();
        roxmltree::Document::parse(&text).unwrap();
    }
    let html = std::fs::read_to_string(files.html).unwrap();
    assert!(html.contains("not recorded"));
}

#[test]
fn an_unwritable_directory_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let err = render_report(&record(), &file.join("report")).unwrap_err();
    assert!(err.to_string().contains("a-file"), "{err}");
}

#[test]
fn the_validation_curve_is_plotted_against_time_and_cost_with_the_best_marked() {
    use mlless_job::record::{EvalPoint, ValidationRecord};
    let mut record = record();
    let dir = tempfile::tempdir().unwrap();
    let without = render_report(&record, &dir.path().join("without")).unwrap();
    assert_eq!(without.validation_svg, None);
    assert_eq!(without.all().len(), 4);

    // 12 evaluations: the curve falls, then rises; the best is the 8th.
    let points: Vec<EvalPoint> = (0..12)
        .map(|k| EvalPoint {
            step: 10 * k,
            epoch: k as f64,
            time_s: 0.5 * k as f64,
            cost_usd: Some(0.001 * (k + 1) as f64),
            metrics: [(
                "logloss".to_string(),
                0.7 - 0.05 * k as f64 + 0.01 * (k * k) as f64 / 2.0,
            )]
            .into_iter()
            .collect(),
            last: k == 11,
        })
        .collect();
    record.validation = Some(ValidationRecord {
        metric: "logloss".into(),
        points,
        best: Some(7),
        targets: Vec::new(),
    });
    let files = render_report(&record, &dir.path().join("with")).unwrap();
    let path = files.validation_svg.clone().expect("a validation plot");
    assert_eq!(files.all().len(), 5);
    // The curve against time, the training loss, the curve against cost.
    let svg = check_svg(&path, 3);
    assert!(svg.contains("validation logloss over time"));
    assert!(svg.contains("billed cost so far (USD)"));
    assert!(svg.contains("best (the model kept)"));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let circles = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "circle")
        .count();
    // 12 points in each panel, the best marked in each, and the legend's mark.
    assert_eq!(circles, 12 * 2 + 2 + 1, "{svg}");
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(html.contains("id=\"plot-validation\""));
}
