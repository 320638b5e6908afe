//! `mlless report`: the summary, the plots and the HTML page of a run record.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::summary::{print, read_record};

/// Options of `mlless report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run record (JSON), as written by `mlless train --record`.
    pub record: PathBuf,
    /// Directory of the plots and the HTML page [default: RECORD's name without extension,
    /// followed by `-report`, next to it: `runs/a.json` → `runs/a-report/`].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Only print the summary; write no files.
    #[arg(long, conflicts_with = "out")]
    pub summary_only: bool,
    #[command(flatten)]
    pub model: crate::cost::ModelArgs,
}

/// Runs `mlless report`: prints the summary, writes the plots and the page, prints their paths.
pub fn report(args: ReportArgs) -> anyhow::Result<()> {
    let record = read_record(&args.record)?;
    print(&record);
    if args.summary_only {
        return Ok(());
    }
    let options = args.model.options(&record)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_report_dir(&args.record));
    let files = mlless_report::render_report_with(&record, &out, &options)?;
    println!("report:");
    for path in files.all() {
        println!("  {}", path.display());
    }
    Ok(())
}

/// Where `mlless report` writes when `--out` is not given: `{dir}/{stem}-report` next to the
/// record.
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
