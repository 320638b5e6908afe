//! `mlless runs`: the runs in a store, newest first.

use clap::Args;
use mlless_runtime::runs::{RunStatus, list_runs};

/// Options of `mlless runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Where the runs are: the `--runs` of `mlless train` (default there: `{data}/runs`).
    pub store: String,
}

/// Runs `mlless runs`: one line per run — job, status, model, data, stop reason or failure,
/// steps, wall time, cost and test metrics.
pub fn run(args: RunsArgs) -> anyhow::Result<()> {
    let runs = crate::runtime()?.block_on(list_runs(&args.store))?;
    if runs.is_empty() {
        println!("no runs in {}", mlless_store::redact_url(&args.store));
        return Ok(());
    }
    for run in runs {
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
        println!("{line}");
        println!("    {}", run.run_url);
    }
    Ok(())
}
