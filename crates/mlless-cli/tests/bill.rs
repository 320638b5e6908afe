//! One bill: the live progress line's last figure, the summary (text, as `mlless report
//! --summary-only` prints it, and `mlless train --json`'s `cost_usd`), the record's bill and
//! `mlless cost`'s "the run at … prices" line give the same total for a run, from the
//! object-store requests the run counted, on the default channel and on Redis.

mod common;

use std::path::{Path, PathBuf};

use common::{mlless, ok, read_record, s, tempdir};
use serde_json::Value;

/// A small ratings set (1,000 users × 500 items, a tenth rated) in minibatches of 500: a PMF
/// run of 5 epochs on 4 workers takes about half a second, long enough for a few progress
/// lines every 0.1 s.
fn ratings(dir: &Path) -> PathBuf {
    let spec = mlless_data::RatingsSpec {
        users: 1000,
        items: 500,
        rank: 5,
        density: 0.1,
        noise: 0.5,
        seed: 3,
        ..Default::default()
    };
    let (data, _) = common::ratings_prepared(
        dir,
        &spec,
        &["--validation-fraction", "0", "--batch-size", "500"],
    );
    data
}

/// The dollars right after `marker` in `text` (`"… cost $0.012 at …"`, marker `"cost $"`).
fn dollars_after(text: &str, marker: &str) -> f64 {
    let rest = text
        .split(marker)
        .nth(1)
        .unwrap_or_else(|| panic!("{marker:?} in:\n{text}"));
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    number
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {number:?} after {marker:?} in:\n{text}"))
}

/// Whether `a` and `b` are the same number of dollars, up to the last digits JSON may round.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-9)
}

/// Trains PMF on 4 workers through `channel` (the run's object store when `None`) and checks
/// that every figure of its bill is the record's total, the object-store requests counted.
/// Returns the summary's text.
fn assert_one_bill(dir: &Path, data: &Path, name: &str, channel: Option<&str>) -> String {
    let record_path = dir.join(format!("{name}.json"));
    let (data, record_arg) = (s(data), s(&record_path));
    let mut args = vec![
        "train",
        "--data",
        &data,
        "--model",
        "pmf",
        "--workers",
        "4",
        "--max-epochs",
        "5",
        "--json",
        "--record",
        &record_arg,
        "--log-format",
        "json",
        "--progress-every",
        "0.1",
    ];
    if let Some(channel) = channel {
        args.extend(["--channel", channel]);
    }
    let output = mlless()
        .args(&args)
        .output()
        .expect("the mlless binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{name}: mlless {args:?}:\n{stderr}"
    );

    // The record: its bill, from the requests it counted.
    let record = read_record(&record_path);
    let bill = record.bill.as_ref().expect("a bill");
    let total = bill.total_usd;
    assert!(
        record.requests.is_some(),
        "{name}: the requests were counted"
    );
    assert!(bill.storage_usd > 0.0 && bill.compute_usd > 0.0, "{bill:?}");

    // `--json`'s cost_usd.
    let summary: Value = serde_json::from_slice(&output.stdout).expect("one JSON document");
    let json_cost = summary["cost_usd"].as_f64().expect("cost_usd");
    assert!(
        same(json_cost, total),
        "{name}: --json {json_cost} vs {total}"
    );
    assert_eq!(summary["requests"], "counted", "{name}");

    // The live line: the bill so far as it accrues, ending at the record's bill.
    let live: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "mlless::progress")
        .map(|l| l["fields"].clone())
        .collect();
    let (last, during) = live.split_last().expect("progress lines");
    assert_eq!(last["done"], true, "{name}: the last line is the run's end");
    assert_eq!(last["requests"], "counted", "{name}: {last}");
    let last_cost = last["cost_usd"].as_f64().expect("cost_usd");
    assert!(
        same(last_cost, total),
        "{name}: live {last_cost} vs {total}"
    );
    assert!(
        !during.is_empty(),
        "{name}: lines during the run:\n{stderr}"
    );
    let mut previous = 0.0;
    for line in during {
        let cost = line["cost_usd"].as_f64().expect("cost_usd");
        assert!(
            previous <= cost && cost <= total,
            "{name}: the bill so far grows to the bill: {live:?}"
        );
        assert_eq!(line["done"], false, "{name}: {line}");
        assert_eq!(line["requests"], "counted", "{name}: {line}");
        previous = cost;
    }

    // The text summary.
    let text = ok(&["report", "--summary-only", &record_arg]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    let summary_cost = dollars_after(&text, "cost $");
    assert!(
        (summary_cost - total).abs() <= 5e-7,
        "{name}: summary {summary_cost} vs {total}:\n{text}"
    );
    assert!(
        text.contains("at aws-lambda prices (object-store requests counted)"),
        "{text}"
    );

    // `mlless cost`: the run at its own prices, with no word of another bill.
    let cost = ok(&["cost", &record_arg, "--workers", "4"]);
    let cost = String::from_utf8_lossy(&cost.stdout).into_owned();
    let at_prices = dollars_after(&cost, "the run at aws-lambda prices: $");
    assert!(
        (at_prices - total).abs() <= 5e-7,
        "{name}: mlless cost {at_prices} vs {total}:\n{cost}"
    );
    assert!(cost.contains("object-store requests") && cost.contains("(counted)"));
    assert!(!cost.contains("the record's own bill"), "{cost}");

    // Projected onto a cloud: the compute from the workers' CPU time, which the record holds
    // for every step, and the exchange from the cloud's latency (S3: a P = 64 all-reduce step
    // is at least five requests of 20 ms; on ElastiCache, where P = 64 still broadcasts, its
    // 0.3 ms requests add little to reading 64 updates).
    assert!(
        record
            .steps
            .iter()
            .flat_map(|s| &s.workers)
            .all(|w| w.compute_cpu_ms.is_some_and(|c| c >= 0.0)),
        "{name}: a step without the CPU time of its compute"
    );
    let step_at_64 = |cloud: &str| {
        let out = ok(&["cost", &record_arg, "--workers", "64", "--emulate", cloud]);
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.contains(&format!("exchange(P) on {cloud} ("))
                && out.contains("compute from the workers' CPU time"),
            "{name}: {out}"
        );
        let row = out
            .lines()
            .find(|l| l.contains("(FaaS)") && l.split_whitespace().nth(2) == Some("64"))
            .unwrap_or_else(|| panic!("{name}: no P = 64 row in {out}"));
        row.split_whitespace()
            .nth(4)
            .and_then(|v| v.parse::<f64>().ok())
            .expect("a step time")
    };
    let (s3, elasticache) = (step_at_64("s3"), step_at_64("elasticache"));
    assert!(
        s3 >= 100.0 && elasticache + 50.0 < s3,
        "{name}: s3 {s3} ms, elasticache {elasticache} ms"
    );
    text
}

/// The line of the summary that names the object-store requests as most of the bill.
fn dominant_line(text: &str) -> &str {
    text.lines()
        .find(|l| l.contains("% of the bill is object-store requests"))
        .unwrap_or_else(|| panic!("the dominant part named:\n{text}"))
}

#[test]
fn every_figure_of_a_runs_bill_is_the_records_total() {
    let dir = tempdir();
    let data = ratings(dir.path());

    // The default channel: the exchange's S3 requests are almost all of the bill, and the
    // summary says what the cost model puts the run at on Redis, far less.
    let text = assert_one_bill(dir.path(), &data, "store", None);
    let line = dominant_line(&text);
    let on_redis = dollars_after(line, "puts the same run at $");
    let bill = dollars_after(&text, "cost $");
    assert!(line.contains("on Redis (1 instance"), "{line}");
    assert!(on_redis < bill / 5.0, "{line}");

    match std::env::var("MLLESS_TEST_REDIS_URLS") {
        Ok(urls) => {
            // On Redis the minibatches' GETs are most of a short run's bill; on the object
            // store the exchange's requests would cost more.
            let text = assert_one_bill(dir.path(), &data, "redis", Some(&urls));
            let line = dominant_line(&text);
            let on_store = dollars_after(line, "puts the same run at $");
            let on_redis = dollars_after(line, "against $");
            assert!(line.contains("on the object store"), "{line}");
            assert!(on_store > on_redis, "{line}");
        }
        Err(_) => {
            eprintln!("MLLESS_TEST_REDIS_URLS not set (scripts/test.sh sets it): Redis skipped")
        }
    }
}
