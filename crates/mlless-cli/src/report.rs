//! `mlless report`: the summaries of run records, and one HTML page with their figures overlaid
//! and the runs side by side, with the figures as SVG and the table as CSV.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;

use crate::summary::{print, read_record};

/// Options of `mlless report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run records (JSON), as written by `mlless train --record`, or local run directories
    /// (`{runs}/{job}`, holding `record.json`); several are overlaid on one page.
    #[arg(required = true, value_name = "RUN")]
    pub records: Vec<PathBuf>,
    /// Directory of the figures, the table and the HTML page [default: for one RUN, its name
    /// without extension followed by `-report`, next to it (`runs/a.json` → `runs/a-report/`;
    /// a run directory `runs/job` → `runs/job/report/`); for several, `report` in the current
    /// directory].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only print the summary; write no files.
    #[arg(long, conflicts_with = "out")]
    pub summary_only: bool,
    /// Print one JSON document on standard output instead of the text: each run's summary
    /// (as `mlless train --json` prints it) and the files written.
    #[arg(long)]
    pub json: bool,
    /// The options of the cost model.
    #[command(flatten)]
    pub model: crate::cost::ModelArgs,
}

/// Runs `mlless report`: prints each run's summary, writes the figures, the table and the
/// page, prints their paths.
pub fn report(args: ReportArgs) -> anyhow::Result<()> {
    let mut runs = Vec::with_capacity(args.records.len());
    for path in &args.records {
        let record = read_record(&record_path(path))?;
        if !args.json {
            print(&record);
        }
        let mut run = mlless_report::Run::new(record);
        run.options = args.model.options(&run.record)?;
        runs.push(run);
    }
    if args.summary_only {
        return print_json(&args, &runs, &[]);
    }
    for run in &mut runs {
        run.preparation = preparation(&run.record.spec.data_url);
    }
    mlless_report::label_runs(&mut runs);
    let out = match (&args.out, args.records.as_slice()) {
        (Some(out), _) => out.clone(),
        (None, [one]) if one.is_dir() => one.join("report"),
        (None, [one]) => default_report_dir(one),
        (None, _) => PathBuf::from("report"),
    };
    let files = mlless_report::render_runs(&runs, &out)
        .with_context(|| format!("writing the report to {}", out.display()))?;
    if args.json {
        return print_json(&args, &runs, &files.all());
    }
    println!("report:");
    for path in files.all() {
        println!("  {}", path.display());
    }
    Ok(())
}

/// With `--json`, prints the runs' summaries and the `files` written as one JSON document.
fn print_json(
    args: &ReportArgs,
    runs: &[mlless_report::Run],
    files: &[&Path],
) -> anyhow::Result<()> {
    use std::io::Write;
    if !args.json {
        return Ok(());
    }
    let summaries: Vec<crate::summary::Summary> = runs
        .iter()
        .zip(&args.records)
        .map(|(run, path)| crate::summary::Summary::of(&run.record, Some(&record_path(path))))
        .collect();
    let document = serde_json::json!({
        "runs": summaries,
        "files": files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
    });
    let json = serde_json::to_string_pretty(&document).context("writing the report as JSON")?;
    writeln!(std::io::stdout().lock(), "{json}").context("writing the report")?;
    Ok(())
}

/// The record of the preparation of the data set at `data_url`, for the map tasks on the
/// timeline; `None` (logged) when the data set is gone, unreadable or older than the record.
fn preparation(data_url: &str) -> Option<mlless_job::PrepareRecord> {
    let read = async {
        let store = mlless_store::Store::open(data_url)?;
        let Some(bytes) = store
            .get_opt(mlless_job::record::PREPARE_RECORD_KEY)
            .await?
        else {
            return Ok(None);
        };
        Ok::<_, anyhow::Error>(Some(serde_json::from_slice(&bytes)?))
    };
    match crate::runtime().and_then(|runtime| runtime.block_on(read)) {
        Ok(record) => record,
        Err(e) => {
            tracing::info!(data_url, "no preparation record for the timeline: {e:#}");
            None
        }
    }
}

/// The record of `path`: the file itself, or `record.json` in it when it is a run directory.
fn record_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(mlless_job::record::RECORD_KEY)
    } else {
        path.to_path_buf()
    }
}

/// Where `mlless report` writes for one record file when `--out` is not given:
/// `{dir}/{stem}-report` next to the record.
pub fn default_report_dir(record: &Path) -> PathBuf {
    let stem = record
        .file_stem()
        .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
    record.with_file_name(format!("{stem}-report"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_dir_is_next_to_the_record() {
        assert_eq!(
            default_report_dir(Path::new("runs/a.json")),
            PathBuf::from("runs/a-report")
        );
        assert_eq!(
            default_report_dir(Path::new("record.json")),
            PathBuf::from("record-report")
        );
    }
}
