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
    for run in runs {
        println!("{}", line(&run));
        println!("    {}", run.run_url);
    }
    for run in &unreadable {
        println!("{}", unreadable_line(run));
        println!("    {}", mlless_store::redact_url(&run.run_url));
    }
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
