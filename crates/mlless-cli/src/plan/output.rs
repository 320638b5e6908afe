//! `mlless plan`'s output: the plan as text, as one JSON document, and written to a directory
//! (`--out`: the document and the time-vs-cost plane).

use std::fmt::Write as _;

use anyhow::Context;
use mlless_core::MetricTarget;
use mlless_cost::PriceTable;
use mlless_cost::plan::Goal;
use mlless_job::RunRecord;

use super::{Plan, billed};

/// Writes `plan.json` and `plan.svg` to `dir`.
pub(super) fn write_out(dir: &std::path::Path, json: &str, plan: &Plan) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let svg = mlless_report::plan_svg(&plan.ranked, plan.goal);
    for (name, text) in [("plan.json", json), ("plan.svg", svg.as_str())] {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Whether `record` reached its first target.
fn target_met(record: &RunRecord) -> bool {
    record
        .validation
        .as_ref()
        .is_some_and(|v| v.targets.first().is_some_and(|t| t.reached.is_some()))
}

/// The relative error of `predicted` against `actual`, as `+12 %`.
fn error(predicted: f64, actual: f64) -> String {
    if actual > 0.0 {
        format!("{:+.0} %", (predicted / actual - 1.0) * 100.0)
    } else {
        "n/a".into()
    }
}

/// The `mlless train` command line of `flags`.
fn command(flags: &[String]) -> String {
    let quoted: Vec<String> = flags
        .iter()
        .map(|f| {
            if f.contains(['<', '>', ' ', '*', '&', ';', '|']) {
                format!("'{f}'")
            } else {
                f.clone()
            }
        })
        .collect();
    format!("mlless train {}", quoted.join(" "))
}

/// The plan as text.
pub(super) fn render(plan: &Plan, target: &MetricTarget, prices: &PriceTable) -> String {
    let mut out = String::new();
    let (profile_s, profile_usd) = plan.profile.iter().fold((0.0, 0.0), |(s, usd), p| {
        (s + p.record.wall_s, usd + billed(&p.record))
    });
    let _ = writeln!(
        out,
        "profile: {} runs on the real data, {profile_s:.1} s, ${profile_usd:.6} at {} prices \
         (charged)",
        plan.profile.len(),
        prices.name
    );
    for p in &plan.profile {
        let _ = writeln!(
            out,
            "  P = {:<3} {} ({}), {}: {} steps, {:.1} ms a step after a warm-up of {:.2} s, \
             start-up {:.2} s, peak {:.0} MB",
            p.profile.workers,
            p.profile.channel,
            p.profile.emulate,
            p.profile.pattern,
            p.record.steps.len(),
            p.profile.step_ms,
            p.profile.warmup_s,
            p.profile.startup_s,
            p.profile.peak_rss_mb
        );
    }
    let _ = writeln!(
        out,
        "steps to {target} (the validation set evaluated every {} steps; {}):",
        plan.eval_every,
        plan.stop_lag.map_or_else(
            || "no profile run met the target, so the steps a run takes after the evaluation \
                that meets it are not measured nor added"
                .to_string(),
            |lag| format!("a run stops {lag} steps after the evaluation that meets it")
        )
    );
    for curve in &plan.curves {
        let text = match &curve.estimate {
            Ok(e) if e.reached_in_profile => format!(
                "{} ({:.1} epochs), reached in the profile",
                e.steps,
                e.steps as f64 / curve.steps_per_epoch
            ),
            Ok(e) => format!(
                "{} ({:.1} epochs), fitted on {} evaluations: {} to {}{}",
                e.steps,
                e.steps as f64 / curve.steps_per_epoch,
                curve.evaluations,
                e.low,
                e.high.map_or_else(|| "unbounded".into(), |h| h.to_string()),
                e.asymptote
                    .map_or_else(String::new, |a| format!("; the curve levels off at {a:.4}"))
            ),
            Err(e) => format!("not planned: {e}"),
        };
        let _ = writeln!(out, "  P = {:<3} {text}", curve.workers);
    }
    let goal = match plan.goal {
        Goal::Deadline(s) => format!("the cheapest within {s} s"),
        Goal::Budget(usd) => format!("the fastest within ${usd}"),
    };
    let shown = &plan.ranked[..plan.ranked.len().min(6)];
    let width = shown
        .iter()
        .map(|c| c.label().chars().count())
        .fold(40, usize::max);
    let _ = writeln!(
        out,
        "\n{:<width$} {:>8} {:>10} {:>12}",
        "configuration (sync bsp)", "steps", "time s", "cost USD"
    );
    for (i, c) in shown.iter().enumerate() {
        let mark = if i == 0 { "  <- chosen" } else { "" };
        let _ = writeln!(
            out,
            "{:<width$} {:>8} {:>10.2} {:>12.6}{mark}",
            c.label(),
            c.steps,
            c.time_s,
            c.cost_usd
        );
    }
    if let Some(c) = plan.ranked.first() {
        let _ = writeln!(
            out,
            "\nchosen ({goal}): {}: {:.2} s, ${:.6} (from {:.2} s, ${:.6}{})",
            c.label(),
            c.time_s,
            c.cost_usd,
            c.range.0.0,
            c.range.0.1,
            c.range.1.map_or_else(
                || "; unbounded above".into(),
                |(s, usd)| format!(" … {s:.2} s, ${usd:.6}")
            )
        );
    }
    let _ = writeln!(out, "  {}", command(&plan.flags));
    for (vm, p) in &plan.vms {
        let _ = writeln!(
            out,
            "VM cluster, {} × {} (${}/h): {:.1} s, ${:.6} (mlless cost's model)",
            p.workers, vm.name, vm.usd_per_hour, p.time_s, p.cost_usd
        );
    }
    if let (Some(record), Some(c)) = (&plan.actual, plan.ranked.first()) {
        let _ = writeln!(
            out,
            "\nactual: {} steps, {:.2} s ({} predicted), ${:.6} ({} predicted), target {}; run {}",
            record.steps.len(),
            record.wall_s,
            error(c.time_s, record.wall_s),
            billed(record),
            error(c.cost_usd, billed(record)),
            if target_met(record) { "met" } else { "not met" },
            record.spec.run_url
        );
    }
    out
}

/// The plan as one JSON document.
pub(super) fn document(
    plan: &Plan,
    target: &MetricTarget,
    prices: &PriceTable,
) -> serde_json::Value {
    let chosen = plan.ranked.first();
    let profile_runs: Vec<serde_json::Value> = plan
        .profile
        .iter()
        .map(|p| {
            serde_json::json!({
                "workers": p.profile.workers,
                "channel": p.profile.channel,
                "emulate": p.profile.emulate,
                "pattern": p.profile.pattern,
                "steps": p.record.steps.len(),
                "step_ms": p.profile.step_ms,
                "startup_s": p.profile.startup_s,
                "teardown_s": p.profile.teardown_s,
                "peak_rss_mb": p.profile.peak_rss_mb,
                "wall_s": p.record.wall_s,
                "cost_usd": billed(&p.record),
                "run": mlless_store::redact_url(p.record.spec.run_url.as_str()),
            })
        })
        .collect();
    let mut doc = serde_json::json!({
        "target": target.to_string(),
        "goal": plan.goal,
        "platform": prices.name,
        "profile": {
            "runs": profile_runs,
            "time_s": plan.profile.iter().map(|p| p.record.wall_s).sum::<f64>(),
            "cost_usd": plan.profile.iter().map(|p| billed(&p.record)).sum::<f64>(),
        },
        "steps": plan.curves.iter().map(|c| serde_json::json!({
            "workers": c.workers,
            "evaluations": c.evaluations,
            "steps_per_epoch": c.steps_per_epoch,
            "estimate": c.estimate.as_ref().ok(),
            "refused": c.estimate.as_ref().err().map(ToString::to_string),
        })).collect::<Vec<_>>(),
        "eval_every": plan.eval_every,
        "stop_lag": plan.stop_lag,
        "chosen": chosen.map(|c| serde_json::json!({
            "workers": c.workers,
            "memory_mb": c.memory_mb,
            "channel": c.channel,
            "emulate": c.emulate,
            "pattern": c.pattern,
            "sync": c.sync,
            "flags": plan.flags,
            "command": command(&plan.flags),
        })),
        "predicted_time_s": chosen.map(|c| c.time_s),
        "predicted_cost_usd": chosen.map(|c| c.cost_usd),
        "candidates": plan.ranked,
        "vm": plan.vms.iter().map(|(vm, p)| serde_json::json!({
            "type": vm.name,
            "usd_per_hour": vm.usd_per_hour,
            "machines": p.workers,
            "time_s": p.time_s,
            "cost_usd": p.cost_usd,
        })).collect::<Vec<_>>(),
    });
    if let Some(record) = &plan.actual {
        doc["actual_time_s"] = record.wall_s.into();
        doc["actual_cost_usd"] = billed(record).into();
        doc["actual_steps"] = record.steps.len().into();
        doc["target_met"] = target_met(record).into();
        doc["run"] = mlless_store::redact_url(record.spec.run_url.as_str()).into();
    }
    doc
}
