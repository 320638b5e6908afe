//! The records the report's tests render: a hand-made but realistic run (a scale-in from 4 to 2
//! workers, invocations, a bill), and the checks of its SVG documents.
#![allow(dead_code)] // each test binary uses its part

use std::path::Path;

use mlless_cost::{ObjectRequests, PriceTable, Usage};
use mlless_io_types::{InvocationReport, Outcome};
use mlless_job::RunRecord;
use mlless_job::record::{StepRecord, WorkerStep};

pub const STARTED: u64 = 1_795_962_381_000;

/// A run of 40 steps on 4 workers, then 30 on 2 (the auto-tuner let two go), on 120 minibatches.
pub fn record() -> RunRecord {
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
                    compute_cpu_ms: None,
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
        requests: None,
        model_url: "file:///tmp/data/runs/job/model.bin".into(),
        replica_spread: 0.0,
        rounds: 0,
        scale_in: Default::default(),
        validation: None,
        refit: None,
    }
}

/// The SVG document parses as XML, its root is `<svg>`, and it draws at least `lines` lines.
pub fn check_svg(path: &Path, lines: usize) -> String {
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
