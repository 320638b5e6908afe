//! Renders a hand-made but realistic run record (a scale-in from 4 to 2 workers, invocations,
//! a bill) and checks the files: well-formed SVG plots with lines, and a page that inlines them
//! and escapes the record's strings.

mod common;

use common::{STARTED, check_svg, record};
use mlless_cost::{ObjectRequests, PriceTable, Usage};
use mlless_job::RunRecord;
use mlless_report::{
    ReportOptions, Run, RunTable, comparison, cost_curve, label_runs, measurements, price_table_of,
    render_report, render_report_with, render_runs,
};

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
    let names: Vec<String> = files
        .figures
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "loss.svg",
            "cost.svg",
            "timeline.svg",
            "step-time.svg",
            "bytes.svg"
        ]
    );

    // Four panels of smoothed and raw loss; the cost; sent and received in panels of their own.
    let loss = check_svg(files.figure("loss.svg").unwrap(), 8);
    let cost = check_svg(files.figure("cost.svg").unwrap(), 1);
    let bytes = check_svg(files.figure("bytes.svg").unwrap(), 2);
    for axis in ["wall time", "steps", "epochs", "billed cost"] {
        assert!(
            loss.contains(&format!("Training loss against {axis}")),
            "{axis}"
        );
    }
    assert!(loss.contains("time since the run started (s)"));
    assert!(bytes.contains("Bytes sent per step") && bytes.contains("Bytes received per step"));
    // The timeline: a row a role, a bar an invocation.
    let timeline = std::fs::read_to_string(files.figure("timeline.svg").unwrap()).unwrap();
    for role in ["supervisor", "worker-0", "worker-3"] {
        assert!(timeline.contains(&format!("\n{role}\n")), "{role}");
    }
    let step_time = std::fs::read_to_string(files.figure("step-time.svg").unwrap()).unwrap();
    assert!(step_time.contains("mean time per worker (ms)") && step_time.contains("exchange"));

    let html = std::fs::read_to_string(&files.html).unwrap();
    for (id, svg) in [
        ("loss", &loss),
        ("cost", &cost),
        ("bytes", &bytes),
        ("timeline", &timeline),
    ] {
        assert!(html.contains(&format!("id=\"fig-{id}\"")), "{id}");
        assert!(html.contains(svg.trim()), "the page inlines {id}.svg");
    }
    // Self-contained and escaped: the page's own script is the only one.
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        html.matches("<script").count(),
        1,
        "a string of the record was not escaped"
    );
    assert!(!html.contains("src="));
    assert!(!html.contains("href="));
    assert!(html.contains("job-&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;co"));
    assert!(
        !timeline.contains("<script>alert"),
        "plotters escapes the labels"
    );
    assert!(html.contains("the loss &lt;held&gt; &amp; &quot;stopped&quot;"));
    assert!(html.contains("/tmp/data &quot;quoted&quot;"));
    // One row of synchronisation, as text.
    assert_eq!(html.matches("<th>synchronisation</th>").count(), 1);
    assert!(html.contains("<td>bsp, compression none</td>"));
    assert!(!html.contains("{&quot;kind&quot;"));
    // Summary and comparison.
    for needle in [
        "lr (sparse logistic regression, 100000 features",
        "4 (from 2 to 4 during the run)",
        "test_auc",
        "0.8600",
        "aws-lambda",
        "c5.large (VM)",
        "t3.medium (VM)",
        "c5.4xlarge (VM)",
        "(FaaS, this run)",
        // 40 steps of 4 workers and 30 of 2, each sending 70 kB + 100 B a step to every
        // worker, 8000 entries in one message.
        "16.04 MB in 220 messages (1760000 entries) · received 55.10 MB",
    ] {
        assert!(html.contains(needle), "the page lacks {needle:?}");
    }
    let csv = std::fs::read_to_string(&files.csv).unwrap();
    assert_eq!(csv.lines().count(), 2, "{csv}");

    // A second rendering into the same directory replaces the files.
    let again = render_report(&record, &out).unwrap();
    assert_eq!(again, files);
}

/// [`record`] under ISP on Redis, a little slower, with a worker handed off at its lifetime
/// limit, another replaced after a crash, and one removed by scale-in.
fn isp_record() -> RunRecord {
    use mlless_io_types::Outcome;
    let mut record = record();
    record.spec.job_id = "job-isp".into();
    record.spec.training.sync =
        serde_json::from_value(serde_json::json!({"kind": "isp", "significance": 0.7})).unwrap();
    record.spec.training.channel = Some("redis://:hunter2@127.0.0.1:6379".into());
    for step in &mut record.steps {
        step.time_s *= 1.3;
        step.loss *= 0.95;
    }
    let mut crashed = record.invocations[2].clone();
    crashed.duration_ms /= 3;
    crashed.outcome = Outcome::Failed {
        exit_code: None,
        message: "killed by signal 9".into(),
    };
    let mut replacement = record.invocations[2].clone();
    replacement.name = "worker-1~1".into();
    replacement.started_at_unix_ms += crashed.duration_ms;
    replacement.duration_ms -= crashed.duration_ms;
    record.invocations[2] = crashed;
    record.invocations.push(replacement);
    let mut second = record.invocations[1].clone();
    record.invocations[1].duration_ms /= 2;
    second.name = "worker-0#1".into();
    second.started_at_unix_ms += second.duration_ms / 2;
    second.duration_ms -= second.duration_ms / 2;
    record.invocations.push(second);
    record
        .scale_in
        .removals
        .push(mlless_job::record::RemovalRecord {
            worker: 3,
            after_step: 39,
            time_s: record.steps[39].time_s,
            workers_after: 3,
        });
    record
}

#[test]
fn runs_are_overlaid_and_compared_side_by_side() {
    let mut runs = vec![Run::new(record()), Run::new(isp_record())];
    label_runs(&mut runs);
    // Labelled by what differs: the sync mode and the channel (the password redacted).
    assert_eq!(runs[0].label, "bsp, object store");
    assert_eq!(runs[1].label, "isp (V = 0.7), redis");

    let table = RunTable::of(&runs);
    let configuration: Vec<&str> = table
        .configuration
        .iter()
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(configuration, ["sync", "channel"], "differences only");
    let row = |name: &str| {
        table
            .results
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no row {name}"))
            .cells
            .clone()
    };
    assert_eq!(row("invocations"), ["5", "7"]);
    assert_eq!(row("hand-offs at the lifetime limit"), ["0", "1"]);
    assert_eq!(row("replacements after a failure"), ["0", "1"]);
    assert_eq!(row("steps"), ["70", "70"]);
    assert_eq!(row("workers removed by scale-in"), ["0", "1"]);

    let dir = tempfile::tempdir().unwrap();
    let files = render_runs(&runs, dir.path()).unwrap();
    // Both runs in every panel of the loss: their colours, smoothed and raw.
    let loss = check_svg(files.figure("loss.svg").unwrap(), 16);
    for i in 0..2 {
        let stroke = format!("stroke=\"{}\"", mlless_report::run_color_hex(i));
        assert!(loss.matches(&stroke).count() >= 8, "run {i}: {stroke}");
    }
    assert!(loss.contains("isp (V = 0.7), redis"));
    let timeline = std::fs::read_to_string(files.figure("timeline.svg").unwrap()).unwrap();
    assert!(timeline.contains("Invocations of bsp, object store"));
    assert!(timeline.contains("Invocations of isp (V = 0.7), redis"));
    assert!(!timeline.contains("hunter2") && !loss.contains("hunter2"));
    // The hand-off's mark, the failure's dot and the removal's cross (two thick strokes; the
    // legend's cross is thinner).
    let doc = roxmltree::Document::parse(&timeline).unwrap();
    let thick = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "line" && n.attribute("stroke-width") == Some("3"))
        .count();
    assert_eq!(thick, 2, "one removal, one cross");
    assert!(doc.descendants().any(|n| n.tag_name().name() == "polygon"));
    assert!(
        doc.descendants()
            .any(|n| n.tag_name().name() == "circle" && n.attribute("fill") == Some("#D62728"))
    );

    let csv = std::fs::read_to_string(&files.csv).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("run,sync,channel,stop reason,wall time (s),billed cost (USD)"));
    assert!(lines[2].starts_with("\"isp (V = 0.7), redis\",isp (V = 0.7),redis,"));
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(html.contains("mlless: 2 runs compared"));
    assert!(!html.contains("hunter2"));
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
    let p2 = m.project_faas(2, &aws);
    assert_eq!(p2.steps, 110);
    let compute = (40.0 * 1.5 + 30.0 * 0.8) / 70.0;
    assert!(
        (p2.step_ms - (0.2 + compute + 0.1 + 3.0)).abs() < 1e-6,
        "{p2:?}"
    );
    // More workers than measured: the exchange grows.
    assert!(m.project_faas(8, &aws).step_ms > m.project_faas(4, &aws).step_ms);
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
    let bill = record.bill_at(&aws);
    assert_eq!((bill.invocations, bill.billed_ms), (5, billed_ms));
    assert!((bill.services_usd - redis).abs() < 1e-15, "{bill:?}");
    assert!((bill.storage_usd - gets).abs() < 1e-15, "{bill:?}");
    assert!((bill.total_usd - by_hand).abs() < 1e-15, "{bill:?}");
    // The record's own bill is of the old kind: the same compute, nothing else.
    let recorded = record.bill.as_ref().unwrap();
    assert_eq!(recorded.compute_usd, bill.compute_usd);
    assert_eq!(recorded.services_usd + recorded.storage_usd, 0.0);
    // The model at the run's own fleet size reproduces its time and its bill (every function
    // is taken to run the whole wall time, a few ms more than the workers did): on a FaaS
    // platform, and on the measured machine when its 2 cores are predicted too.
    for cores in [None, Some(2)] {
        let mut m = measurements(&record, cores);
        m.same_machine = cores.is_some();
        let p = m.project_faas(4, &price_table_of(&record));
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
    for svg in &files.figures {
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
    assert_eq!(without.figure("validation.svg"), None);
    assert_eq!(without.all().len(), 7);

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
    let path = files.figure("validation.svg").expect("a validation plot");
    assert_eq!(files.all().len(), 8);
    // The curve against time, steps, epochs and cost.
    let svg = check_svg(path, 4);
    assert!(svg.contains("Validation logloss against wall time"));
    assert!(svg.contains("billed cost so far (USD)"));
    assert!(svg.contains("validation logloss (best circled)"));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let circles = doc
        .descendants()
        .filter(|n| n.tag_name().name() == "circle")
        .count();
    // 12 points in each of the four panels, the best circled in each.
    assert_eq!(circles, (12 + 1) * 4, "{svg}");
    let html = std::fs::read_to_string(&files.html).unwrap();
    assert!(html.contains("id=\"fig-validation\""));
}

/// The map tasks of a data set's preparation get a panel of their own on the timeline, on the
/// preparation's clock, once for the runs that share the data set.
#[test]
fn the_map_tasks_of_the_preparation_are_on_the_timeline_once_a_data_set() {
    let task = |name: &str, start_ms: u64| mlless_io_types::InvocationReport {
        name: name.into(),
        pid: Some(7),
        started_at_unix_ms: STARTED - 3_600_000 + start_ms,
        duration_ms: 400,
        memory_mb: 1024,
        peak_rss_mb: 12.0,
        outcome: mlless_io_types::Outcome::Succeeded,
    };
    let preparation = mlless_job::PrepareRecord {
        started_at_unix_ms: STARTED - 3_600_000,
        wall_s: 1.5,
        invocations: vec![
            task("range-map-0", 100),
            task("range-map-1", 110),
            task("scale-map-0", 600),
            task("scale-map-1", 610),
        ],
    };
    let mut runs = vec![Run::new(record()), Run::new(isp_record())];
    assert_eq!(runs[0].record.spec.data_url, runs[1].record.spec.data_url);
    for run in &mut runs {
        run.preparation = Some(preparation.clone());
    }
    label_runs(&mut runs);
    let dir = tempfile::tempdir().unwrap();
    let files = render_runs(&runs, dir.path()).unwrap();
    let timeline = std::fs::read_to_string(files.figure("timeline.svg").unwrap()).unwrap();
    roxmltree::Document::parse(&timeline).unwrap();
    // The data set's name as the SVG escapes it (`/tmp/data "quoted"`).
    assert_eq!(
        timeline.matches("Map tasks of preparing /tmp/data").count(),
        1,
        "one panel for the shared data set"
    );
    for role in ["range-map-0", "range-map-1", "scale-map-0", "scale-map-1"] {
        assert!(timeline.contains(role), "{role} has its row");
    }
    assert!(timeline.contains("time since the preparation started (s)"));
    assert!(timeline.contains("other function (map task)"));
    assert!(timeline.contains("Invocations of bsp, object store"));
    // A mark's legend only where the panel has such marks: the ISP run's removal.
    assert_eq!(timeline.matches("removed by scale-in").count(), 1);

    // Without the preparation's record, no such panel.
    let plain = render_runs(&[Run::new(record())], &dir.path().join("plain")).unwrap();
    let timeline = std::fs::read_to_string(plain.figure("timeline.svg").unwrap()).unwrap();
    assert!(!timeline.contains("Map tasks of preparing"));
    assert!(!timeline.contains("other function (map task)"));
}

/// The texts of an SVG document's `<text>` elements, in document order.
fn svg_texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or_default().trim().to_string())
        .collect()
}

/// The bytes a step sends are amounts: their axis starts at 0 and no two of its tick labels
/// read the same (steps of 1.5 kB to 7.4 kB had "2 kB" seven times and started at 1.3 kB).
#[test]
fn the_bytes_axis_starts_at_zero_and_its_tick_labels_differ() {
    // Wide (1.5 to 7.4 kB a step) and narrow (2.0 to 2.9 kB, whose ticks 2.0, 2.1, … all read
    // "2 kB" in whole kB).
    for (low, spread) in [(1_500, 5_900), (2_000, 900)] {
        let mut record = record();
        for (i, step) in record.steps.iter_mut().enumerate() {
            let workers = step.workers.len() as u64;
            for w in &mut step.workers {
                w.bytes_sent = (low + (i as u64 * 977) % spread) / workers;
                w.bytes_received = 2 * w.bytes_sent;
            }
        }
        check_bytes_axis(&mlless_report::bytes_svg(&[Run::new(record)]).unwrap());
    }
}

/// Checks the y axes of `bytes.svg`: from 0, no tick label twice in a panel.
fn check_bytes_axis(svg: &str) {
    let ticks: Vec<String> = svg_texts(svg)
        .into_iter()
        .filter(|t| {
            ["B", "kB", "MB", "GB"]
                .iter()
                .any(|u| t.ends_with(&format!(" {u}")))
        })
        .collect();
    assert!(ticks.len() >= 6, "{ticks:?}");
    // Two panels (sent, received), each with its ticks: none repeats within a panel.
    for tick in &ticks {
        let n = ticks.iter().filter(|t| *t == tick).count();
        assert!(n <= 2, "{tick} is {n} ticks: {ticks:?}");
    }
    let zeros = ticks
        .iter()
        .filter(|t| t.split(' ').next().and_then(|v| v.parse::<f64>().ok()) == Some(0.0))
        .count();
    assert_eq!(zeros, 2, "each panel's axis starts at 0: {ticks:?}");
}

/// The tune page's curves are labelled by their trial.
#[test]
fn the_tune_curves_are_labelled_by_trial() {
    use mlless_tune::{
        Assignment, CurvePoint, Sampler, SearchSpace, TUNE_RECORD_VERSION, TrialRecord,
        TrialStatus, TuneRecord,
    };
    let trial = |n: usize, status: TrialStatus, end: f64| TrialRecord {
        trial: n,
        params: Assignment(vec![("lr".into(), n.to_string())]),
        status,
        stop_reason: None,
        error: None,
        run_url: None,
        best_metric: Some(end),
        epochs: 2.0,
        steps: 10,
        wall_s: 1.0,
        cost_usd: 0.01,
        started_s: 0.0,
        test_metrics: mlless_core::Metrics::new(),
        rungs: Vec::new(),
        curve: (0..4)
            .map(|k| CurvePoint {
                time_s: f64::from(k) + n as f64,
                epoch: f64::from(k) * 0.5,
                value: end + 0.1 * f64::from(3 - k),
                cost_usd: 0.001 * f64::from(k),
            })
            .collect(),
    };
    let record = TuneRecord {
        format_version: TUNE_RECORD_VERSION,
        tune_id: "tune-1".into(),
        started_at_unix_ms: 0,
        wall_s: 6.0,
        model: "lr".into(),
        metric: "logloss".into(),
        direction: mlless_core::validation::Direction::Lower,
        budget_usd: 1.0,
        spent_usd: 0.03,
        max_time_s: None,
        sampler: Sampler::Grid,
        seed: 1,
        concurrency: 2,
        space: SearchSpace::default(),
        scheduler: None,
        stop_reason: "every trial ran".into(),
        trials: vec![
            trial(0, TrialStatus::Finished, 0.5),
            trial(1, TrialStatus::Stopped, 0.6),
            trial(2, TrialStatus::Finished, 0.4),
        ],
        best: Some(2),
        cost_curve: Vec::new(),
    };
    let svg = mlless_report::tune_curves_svg(&record).unwrap();
    let texts = svg_texts(&svg);
    for n in 0..3 {
        // Once in each panel (by epoch, by time).
        let label = format!("trial {n}");
        assert_eq!(
            texts.iter().filter(|t| **t == label).count(),
            2,
            "{label}: {texts:?}"
        );
    }
}
