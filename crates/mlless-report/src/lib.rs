//! Reports of mlless runs: three SVG plots and one self-contained HTML page per run record.
//!
//! [`render_report`] writes into a directory:
//!
//! - `loss.svg`: the training loss over time (seconds since the run started), with the number of
//!   workers on a secondary axis;
//! - `cost.svg`: the billed cost so far over time (see [`cost_curve`] for how it is derived);
//! - `bytes.svg`: bytes sent and received by all workers in each step;
//! - `report.html`: the summary of the run, the three plots inlined, and the FaaS-versus-VM
//!   comparison of [`mlless_cost::RunMeasurements`] (this run as measured, the same work on a
//!   few VM types). No external resource, no JavaScript.
//!
//! ```no_run
//! # fn demo(record: &mlless_job::RunRecord) -> Result<(), mlless_report::ReportError> {
//! let files = mlless_report::render_report(record, std::path::Path::new("report"))?;
//! println!("{}", files.html.display());
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};

use mlless_cost::{DEFAULT_VM_STARTUP_S, PriceTable, RunMeasurements, VmPrice};
use mlless_job::RunRecord;

mod html;
mod measure;
mod plots;
mod scale_in;

pub use html::{comparison, escape, html_report};
pub use measure::{bill_at, cost_curve, default_cores, measurements, price_table_of};
pub use plots::{bytes_svg, cost_svg, loss_svg, validation_svg};
pub use scale_in::{DecisionMark, ScaleInSeries, scale_in_svg};

/// Errors of a report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// A file or the directory of the report could not be written.
    #[error("cannot write {}: {source}", .path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A plot could not be drawn.
    #[error("cannot draw the {plot} plot: {reason}")]
    Plot {
        /// Which plot.
        plot: &'static str,
        /// What went wrong.
        reason: String,
    },
}

/// What goes into a report besides the record.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// Prices of the FaaS platform (default: the table the run was billed with, see
    /// [`price_table_of`]).
    pub prices: PriceTable,
    /// VM types of the comparison (default: [`VmPrice::builtins`]).
    pub vms: Vec<VmPrice>,
    /// CPUs the run's functions shared (default: [`default_cores`]); see
    /// [`mlless_cost::RunMeasurements::cores`].
    pub cores: Option<u32>,
    /// Seconds VMs take to boot and start the job (default [`DEFAULT_VM_STARTUP_S`]).
    pub vm_startup_s: f64,
}

impl ReportOptions {
    /// The defaults for `record`.
    pub fn for_record(record: &RunRecord) -> Self {
        Self {
            prices: price_table_of(record),
            vms: VmPrice::builtins(),
            cores: default_cores(record),
            vm_startup_s: DEFAULT_VM_STARTUP_S,
        }
    }

    /// What the run measured, with these options' core count and VM start-up time.
    pub fn measurements(&self, record: &RunRecord) -> RunMeasurements {
        let mut m = measurements(record, self.cores);
        m.vm_startup_s = self.vm_startup_s;
        m
    }
}

/// The files of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    /// The directory they are in.
    pub dir: PathBuf,
    /// Loss and workers over time.
    pub loss_svg: PathBuf,
    /// Cumulative billed cost over time.
    pub cost_svg: PathBuf,
    /// Bytes sent and received per step.
    pub bytes_svg: PathBuf,
    /// The validation metric over time and against cost (`None`: the run had no validation
    /// set).
    pub validation_svg: Option<PathBuf>,
    /// The page with the summary, the plots and the comparison.
    pub html: PathBuf,
}

impl ReportFiles {
    /// Every file, the page last.
    pub fn all(&self) -> Vec<&Path> {
        let mut files = vec![self.loss_svg.as_path(), &self.cost_svg, &self.bytes_svg];
        files.extend(self.validation_svg.as_deref());
        files.push(&self.html);
        files
    }
}

/// Renders the report of `record` into `out_dir` (created if missing; files of an earlier report
/// there are replaced) with the [default options](ReportOptions::for_record).
///
/// # Errors
///
/// [`ReportError::Io`] if the directory or a file cannot be written, [`ReportError::Plot`] if a
/// plot cannot be drawn.
pub fn render_report(record: &RunRecord, out_dir: &Path) -> Result<ReportFiles, ReportError> {
    render_report_with(record, out_dir, &ReportOptions::for_record(record))
}

/// Renders the report of `record` into `out_dir` with `options`.
///
/// # Errors
///
/// As [`render_report`].
pub fn render_report_with(
    record: &RunRecord,
    out_dir: &Path,
    options: &ReportOptions,
) -> Result<ReportFiles, ReportError> {
    let loss = loss_svg(record)?;
    let cost = cost_svg(record, &options.prices)?;
    let bytes = bytes_svg(record)?;
    let validation = validation_svg(record)?;
    let mut plots = vec![("loss", loss.as_str()), ("cost", &cost), ("bytes", &bytes)];
    plots.extend(validation.as_deref().map(|v| ("validation", v)));
    let page = html_report(record, options, &plots);

    std::fs::create_dir_all(out_dir).map_err(|source| ReportError::Io {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let files = ReportFiles {
        dir: out_dir.to_path_buf(),
        loss_svg: out_dir.join("loss.svg"),
        cost_svg: out_dir.join("cost.svg"),
        bytes_svg: out_dir.join("bytes.svg"),
        validation_svg: validation.as_ref().map(|_| out_dir.join("validation.svg")),
        html: out_dir.join("report.html"),
    };
    let mut writes = vec![
        (&files.loss_svg, &loss),
        (&files.cost_svg, &cost),
        (&files.bytes_svg, &bytes),
    ];
    if let (Some(path), Some(svg)) = (&files.validation_svg, &validation) {
        writes.push((path, svg));
    }
    writes.push((&files.html, &page));
    for (path, text) in writes {
        std::fs::write(path, text).map_err(|source| ReportError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(files)
}
