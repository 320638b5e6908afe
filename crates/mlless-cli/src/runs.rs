//! `mlless runs`: the runs in a store, newest first, and `--clean` for their leftovers.

use anyhow::Context;
use clap::Args;
use mlless_runtime::runs::{RunStatus, RunSummary, UnreadableRun, clean_run, list_runs};

/// Options of `mlless runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Where the runs are: the `--runs` of `mlless train` (default there: `{data}/runs`).
    pub store: String,
    /// Only this run (its job id; repeatable).
    #[arg(long = "job", value_name = "JOB")]
    pub jobs: Vec<String>,
    /// Remove the leftovers of the runs that ended (finished, cancelled, failed): their
    /// checkpoints and what their job still has in its channel. Records and models stay; a
    /// cancelled or failed run can no longer be resumed. A run running, or whose driver was
    /// lost, is cleaned only when named with --job.
    #[arg(long)]
    pub clean: bool,
    /// Print the runs as one JSON document on standard output (an array: each run's job id,
    /// status, location, model, data set, failure or summary, and the settings in which the
    /// runs listed differ; an unreadable run with its reason).
    #[arg(long, conflicts_with = "clean")]
    pub json: bool,
}

/// Runs `mlless runs`: one line per run — job, status, model, data, stop reason or failure,
/// steps, wall time, cost and test metrics; a run that cannot be read, one line saying why;
/// with `--clean`, one line per run cleaned.
pub fn run(args: RunsArgs) -> anyhow::Result<()> {
    let runtime = crate::runtime()?;
    let listing = runtime.block_on(list_runs(&args.store))?;
    let (mut runs, mut unreadable) = (listing.runs, listing.unreadable);
    if !args.jobs.is_empty() {
        if let Some(missing) = args.jobs.iter().find(|job| {
            !runs.iter().any(|run| run.spec.job_id == **job)
                && !unreadable.iter().any(|run| run.job == **job)
        }) {
            anyhow::bail!(
                "no run {missing} in {}",
                mlless_store::redact_url(&args.store)
            );
        }
        runs.retain(|run| args.jobs.contains(&run.spec.job_id));
        unreadable.retain(|run| args.jobs.contains(&run.job));
    }
    if args.json {
        return print_json(&runs, &unreadable);
    }
    if runs.is_empty() && unreadable.is_empty() {
        println!("no runs in {}", mlless_store::redact_url(&args.store));
        return Ok(());
    }
    if args.clean {
        for run in &runs {
            clean(&runtime, run, !args.jobs.is_empty())?;
        }
        for run in &unreadable {
            println!(
                "{}  skipped: unreadable ({}); fix or remove {} to clean it",
                run.job,
                run.reason,
                mlless_store::redact_url(&run.run_url)
            );
        }
        if let Some(run) = unreadable.first().filter(|_| !args.jobs.is_empty()) {
            anyhow::bail!("run {} cannot be read, so it was not cleaned", run.job);
        }
        return Ok(());
    }
    let settings = settings(&runs);
    for (run, settings) in runs.iter().zip(&settings) {
        println!("{}", line(run));
        if !settings.is_empty() {
            let shown: Vec<String> = settings
                .iter()
                .map(|(name, value)| format!("{name} {value}"))
                .collect();
            println!("    {}", shown.join(" · "));
        }
        println!("    {}", run.run_url);
    }
    for run in &unreadable {
        println!("{}", unreadable_line(run));
        println!("    {}", mlless_store::redact_url(&run.run_url));
    }
    Ok(())
}

/// Each run's settings in which the runs listed differ (`sync`, `workers`, …), none for a
/// single run: a BSP and an ISP run must not look alike.
fn settings(runs: &[RunSummary]) -> Vec<Vec<(&'static str, String)>> {
    if runs.len() < 2 {
        return vec![Vec::new(); runs.len()];
    }
    let specs: Vec<&mlless_job::JobSpec> = runs.iter().map(|r| &r.spec).collect();
    let differences = mlless_report::spec_differences(&specs);
    (0..runs.len())
        .map(|i| {
            differences
                .iter()
                .map(|(name, values)| (*name, values[i].clone()))
                .collect()
        })
        .collect()
}

/// Prints `runs` and `unreadable` as one JSON array on standard output.
fn print_json(runs: &[RunSummary], unreadable: &[UnreadableRun]) -> anyhow::Result<()> {
    use std::io::Write;
    let settings = settings(runs);
    let mut listed: Vec<serde_json::Value> = runs
        .iter()
        .zip(settings)
        .map(|(run, settings)| {
            serde_json::json!({
                "job_id": run.spec.job_id,
                "status": run.status.to_string(),
                "run_url": run.run_url,
                "model": run.spec.model.name(),
                "data_url": run.spec.data_url.as_str(),
                "failure": match &run.status {
                    RunStatus::Failed(reason) => Some(reason.as_str()),
                    _ => None,
                },
                "summary": run
                    .record
                    .as_ref()
                    .map(|record| crate::summary::Summary::of(record, None)),
                "settings": settings
                    .into_iter()
                    .map(|(name, value)| (name.to_string(), serde_json::Value::String(value)))
                    .collect::<serde_json::Map<String, serde_json::Value>>(),
            })
        })
        .collect();
    listed.extend(unreadable.iter().map(|run| {
        serde_json::json!({
            "job_id": run.job,
            "status": "unreadable",
            "run_url": mlless_store::redact_url(&run.run_url),
            "reason": run.reason,
        })
    }));
    let json = serde_json::to_string_pretty(&listed).context("writing the runs as JSON")?;
    writeln!(std::io::stdout().lock(), "{json}").context("writing the runs")?;
    Ok(())
}

/// The listing's line of a run that cannot be read.
fn unreadable_line(run: &UnreadableRun) -> String {
    format!(
        "{}  {:<15}  · {} (fix or remove the file to list the run)",
        run.job, "unreadable", run.reason
    )
}

/// Cleans one run, unless it may still be running and was not `named`.
fn clean(runtime: &tokio::runtime::Runtime, run: &RunSummary, named: bool) -> anyhow::Result<()> {
    let job = &run.spec.job_id;
    if matches!(run.status, RunStatus::Running | RunStatus::Lost) && !named {
        println!(
            "{job}  skipped: {} (clean it with --job {job} once its functions have stopped)",
            run.status
        );
        return Ok(());
    }
    let cleaned = runtime
        .block_on(clean_run(&run.run_url))
        .with_context(|| format!("cleaning run {job}"))?;
    let resumable = match run.status {
        RunStatus::Cancelled | RunStatus::Failed(_) => "; it can no longer be resumed",
        RunStatus::Finished | RunStatus::Running | RunStatus::Lost => "",
    };
    println!(
        "{job}  cleaned: {} checkpoint objects, its data in {}{resumable}",
        cleaned.checkpoints, cleaned.channel
    );
    Ok(())
}

/// The listing's line of a run.
fn line(run: &RunSummary) -> String {
    let mut line = format!(
        "{}  {:<15}  {}  data {}",
        run.spec.job_id,
        run.status.to_string(),
        run.spec.model.name(),
        run.spec.data_url
    );
    match (&run.status, &run.record) {
        (RunStatus::Failed(reason), _) => line.push_str(&format!("  · {reason}")),
        (_, Some(record)) => {
            let cost = record.bill.as_ref().map_or(0.0, |b| b.total_usd);
            line.push_str(&format!(
                "  · {} · {} steps · {:.1} s · ${cost:.4}",
                record.stop_reason,
                record.steps.len(),
                record.wall_s
            ));
            for (name, value) in record.metrics.iter().filter(|(n, _)| *n != "test_samples") {
                line.push_str(&format!(" · {name} {value:.4}"));
            }
        }
        _ => {}
    }
    line
}
