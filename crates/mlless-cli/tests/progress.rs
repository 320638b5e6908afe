//! Progress anywhere: lines on a standard error that is not a terminal (`--progress-every`),
//! the logs and those lines as JSON (`--log-format json`), the driver's decisions at
//! `RUST_LOG=info`, and the summary as JSON on standard output (`--json`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{mlless, ok, read_record, s, tempdir};
use serde_json::Value;

/// Sparse LR, 20,000 rows × 2,000 features, with 10% test and 10% validation in batches of
/// 500: a step takes milliseconds, so a run lasts as long as `--max-time` says.
fn lr_data(dir: &Path) -> PathBuf {
    let spec = mlless_data::SparseLrSpec::new(20_000, 2_000, 20, 7);
    common::sparse_lr_prepared(dir, &spec, &["--validation-fraction", "0.1"])
}

/// `mlless train --data DATA --workers 2` for `seconds` of wall time (no early stop), with
/// `extra` options and the `env` variables; asserts success. Standard error is a pipe.
fn train_for(data: &Path, seconds: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let data = s(data);
    let mut args = vec![
        "train",
        "--data",
        &data,
        "--model",
        "lr",
        "--workers",
        "2",
        "--max-epochs",
        "1000",
        "--early-stop",
        "0",
        "--max-time",
        seconds,
    ];
    args.extend(extra);
    let output = mlless()
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .expect("the mlless binary runs");
    assert!(
        output.status.success(),
        "mlless {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The number after `word ` in `line` (`step 12 · …` → 12), `None` if absent or not a number.
fn number_after(line: &str, word: &str) -> Option<f64> {
    let rest = line.split(&format!("{word} ")).nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn a_run_off_a_terminal_writes_a_progress_line_every_period() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let output = train_for(&data, "3", &["--progress-every", "1"], &[]);
    let err = stderr(&output);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("progress: "))
        .collect();
    assert!(
        lines.len() >= 2,
        "at least two progress lines in a run of 3 s; stderr:\n{err}"
    );
    let mut last_step = 0.0;
    for line in &lines {
        let step = number_after(line, "step").unwrap_or_else(|| panic!("a step in {line:?}"));
        assert!(step >= last_step, "steps go forward: {lines:?}");
        last_step = step;
        assert!(line.contains(" workers · "), "{line}");
        assert!(line.contains("epoch ") && line.contains("/1000"), "{line}");
        assert!(line.contains(" · $"), "the cost so far in {line}");
    }
    // By the last line, steps were done and their loss is known.
    let last = lines[lines.len() - 1];
    assert!(last_step > 0.0, "{last}");
    let loss = number_after(last, "loss").unwrap_or_else(|| panic!("a loss in {last:?}"));
    assert!(loss.is_finite() && loss > 0.0 && loss < 1.0, "{last}");
    // The text summary is still on standard output.
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(out.starts_with("run job-"), "{out}");

    // No lines with --progress-every 0, nor with --quiet.
    for off in [["--progress-every", "0"], ["--quiet", "--progress-every=1"]] {
        let output = train_for(&data, "1.5", &off, &[]);
        let err = stderr(&output);
        assert!(
            !err.lines().any(|l| l.starts_with("progress")),
            "{off:?}: {err}"
        );
    }
}

#[test]
fn json_logs_and_progress_lines_parse_and_show_the_drivers_decisions() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let output = train_for(
        &data,
        "3",
        &["--progress-every", "1", "--log-format", "json"],
        &[("RUST_LOG", "info")],
    );
    let err = stderr(&output);
    let lines: Vec<Value> = err
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} is not JSON")))
        .collect();
    for line in &lines {
        assert!(line["timestamp"].is_string(), "{line}");
        assert!(line["level"].is_string(), "{line}");
        assert!(line["fields"]["message"].is_string(), "{line}");
    }
    let progress: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "mlless::progress")
        .collect();
    assert!(progress.len() >= 2, "two progress lines in 3 s:\n{err}");
    let mut last_step = 0;
    for p in &progress {
        let f = &p["fields"];
        assert_eq!(f["message"], "progress", "{p}");
        assert_eq!(p["level"], "INFO", "{p}");
        assert!(f["job_id"].as_str().is_some_and(|j| j.starts_with("job-")));
        let step = f["step"]
            .as_u64()
            .unwrap_or_else(|| panic!("a step in {p}"));
        assert!(step >= last_step, "steps go forward");
        last_step = step;
        assert_eq!(f["max_epochs"], 1000, "{p}");
        assert_eq!(f["workers"], 2, "{p}");
        for number in ["epoch", "elapsed_s", "cost_usd"] {
            assert!(f[number].is_f64(), "{number} in {p}");
        }
        assert!(f["loss"].is_f64() || f["loss"].is_null(), "{p}");
    }
    let last = &progress[progress.len() - 1]["fields"];
    assert!(last["loss"].as_f64().is_some_and(|l| l > 0.0 && l < 1.0));
    assert!(
        last["validation"]["metric"] == "logloss",
        "the validation metric by the last line: {last}"
    );
    // The driver's decisions at info: every role invoked and ended, with its name.
    let named = |message: &str| -> Vec<String> {
        let mut names: Vec<String> = lines
            .iter()
            .filter(|l| l["fields"]["message"] == message)
            .filter_map(|l| l["fields"]["invocation"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names
    };
    let roles = ["supervisor", "worker-0", "worker-1"];
    assert_eq!(named("invoked"), roles, "{err}");
    assert_eq!(named("invocation ended"), roles, "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "starting the job" && l["fields"]["workers"] == 2),
        "{err}"
    );
}

#[test]
fn the_json_summary_is_all_of_stdout_and_matches_the_record() {
    let dir = tempdir();
    let data = lr_data(dir.path());
    let record_path = dir.path().join("run.json");
    let output = ok(&[
        "train",
        "--data",
        &s(&data),
        "--model",
        "lr",
        "--workers",
        "2",
        "--max-epochs",
        "2",
        "--json",
        "--record",
        &s(&record_path),
    ]);
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout is not one JSON document:\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    });
    let record = read_record(&record_path);
    assert_eq!(summary["job_id"], record.spec.job_id.as_str());
    assert_eq!(summary["model"], "lr");
    assert_eq!(summary["run_url"], record.spec.run_url.as_str());
    assert_eq!(summary["model_url"], record.model_url.as_str());
    assert_eq!(summary["record_path"], s(&record_path).as_str());
    assert_eq!(summary["stop_reason"], record.stop_reason.as_str());
    assert_eq!(summary["workers"], 2);
    assert_eq!(summary["epochs"].as_f64(), Some(record.epochs));
    assert_eq!(summary["steps"].as_u64(), Some(record.steps.len() as u64));
    assert!(record.steps.len() > 1);
    assert_eq!(summary["final_loss"].as_f64(), record.final_loss());
    assert_eq!(summary["wall_s"].as_f64(), Some(record.wall_s));
    let bill = record.bill.as_ref().expect("a bill");
    assert_eq!(summary["cost_usd"].as_f64(), Some(bill.total_usd));
    assert_eq!(summary["invocations"].as_u64(), Some(bill.invocations));
    assert!(record.metrics.contains_key("test_logloss"));
    for (name, value) in &record.metrics {
        assert_eq!(summary["metrics"][name].as_f64(), Some(*value), "{name}");
    }
    let validation = record.validation.as_ref().expect("a validation curve");
    let best = validation.best_point().expect("evaluations");
    let v = &summary["validation"];
    assert_eq!(v["metric"], validation.metric.as_str());
    assert_eq!(
        v["evaluations"].as_u64(),
        Some(validation.points.len() as u64)
    );
    assert_eq!(v["best"].as_f64(), best.metrics.get("logloss").copied());
    assert_eq!(v["best_step"].as_u64(), Some(best.step));
}
