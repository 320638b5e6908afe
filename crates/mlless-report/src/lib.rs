//! Reports of mlless runs: one self-contained HTML page that overlays any number of run
//! records, with the same figures as SVG files and the table of the runs as CSV.
//!
//! [`render_runs`] writes into a directory:
//!
//! - `loss.svg`: the training loss of every run (smoothed, raw faint) against wall time, steps,
//!   epochs and billed cost, four panels;
//! - `validation.svg`: the validation metric the same way, the best evaluation circled (when a
//!   run has a validation set);
//! - `cost.svg`: the billed cost so far over time (see [`cost_curve`]);
//! - `timeline.svg`: the fleet over time, every invocation of each run from its start to its
//!   end, with outcomes, hand-offs, replacements and scale-in removals;
//! - `step-time.svg`: the workers' mean step time, stacked as read, compute and exchange;
//! - `bytes.svg`: bytes sent and received per step;
//! - `runs.csv`: the table of the runs ([`RunTable`]);
//! - `report.html`: the table, the figures inlined, and each run's summary with the
//!   FaaS-versus-VM comparison of [`mlless_cost::RunMeasurements`]. No external resource; a
//!   small inline script adds an x-axis selector to the four-panel figures.
//!
//! ```no_run
//! # fn demo(a: mlless_job::RunRecord, b: mlless_job::RunRecord) -> Result<(), mlless_report::ReportError> {
//! let mut runs = vec![mlless_report::Run::new(a), mlless_report::Run::new(b)];
//! mlless_report::label_runs(&mut runs);
//! let files = mlless_report::render_runs(&runs, std::path::Path::new("report"))?;
//! println!("{}", files.html.display());
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};

use mlless_cost::{DEFAULT_VM_STARTUP_S, PriceTable, RunMeasurements, ServiceLatency, VmPrice};
use mlless_job::RunRecord;

mod fleet;
mod format;
mod html;
mod measure;
mod plan;
mod plots;
mod runs;
mod scale_in;
mod tune;

pub use fleet::{InvocationKind, step_time_svg, timeline_svg};
pub use html::{comparison, escape, html_page};
pub use measure::{
    DOMINANT_SHARE, DominantPart, cost_curve, default_cores, dominant_part, measurements,
    price_table_of,
};
pub use plan::plan_svg;
pub use plots::{bytes_svg, cost_svg, loss_svg, run_color_hex, validation_svg};
pub use runs::{
    Run, RunTable, TableRow, configuration, differences, label_runs, short_item,
    spec_configuration, spec_differences,
};
pub use scale_in::{DecisionMark, ScaleInSeries, scale_in_svg};
pub use tune::{TuneReportFiles, render_tune_report, tune_cost_svg, tune_curves_svg, tune_html};

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
    /// Whether FaaS predictions are for the measured machine rather than a FaaS platform
    /// (default: a platform); see [`mlless_cost::RunMeasurements::same_machine`].
    pub same_machine: bool,
    /// Seconds VMs take to boot and start the job (default [`DEFAULT_VM_STARTUP_S`]).
    pub vm_startup_s: f64,
    /// The cloud channel to project the exchange onto ([`mlless_cost::cloud`]; default: the
    /// latency the run emulated, if it did); `None`: the exchange the run measured.
    pub cloud: Option<ServiceLatency>,
    /// Whether `cloud` also sets the kind of channel the projection is billed as (DynamoDB for
    /// the built-in `dynamodb`, an object store where a cloud reads several messages at once, a
    /// Redis server where one read returns them all): when the user named it, not when it is
    /// the run's own.
    pub cloud_sets_channel: bool,
}

impl ReportOptions {
    /// The defaults for `record`.
    pub fn for_record(record: &RunRecord) -> Self {
        Self {
            prices: price_table_of(record),
            vms: VmPrice::builtins(),
            cores: default_cores(record),
            same_machine: false,
            vm_startup_s: DEFAULT_VM_STARTUP_S,
            cloud: record
                .spec
                .training
                .emulate
                .as_ref()
                .map(mlless_job::config::service_latency),
            cloud_sets_channel: false,
        }
    }

    /// What the run measured, with these options' core count and VM start-up time.
    pub fn measurements(&self, record: &RunRecord) -> RunMeasurements {
        let mut m = measurements(record, self.cores);
        m.vm_startup_s = self.vm_startup_s;
        m.same_machine = self.same_machine;
        if let Some(latency) = &self.cloud {
            if self.cloud_sets_channel {
                m.channel = match latency.reads_at_once {
                    // The built-in DynamoDB latency (`--emulate dynamodb`, the name of
                    // `mlless_io_types::CloudLatency::dynamodb`): billed by its request units, not
                    // as a server.
                    _ if latency.name == "dynamodb" => mlless_cost::ChannelKind::DynamoDb,
                    Some(_) => mlless_cost::ChannelKind::ObjectStore,
                    None => match m.channel {
                        redis @ mlless_cost::ChannelKind::Redis { .. } => redis,
                        _ => mlless_cost::ChannelKind::Redis { instances: 1 },
                    },
                };
            }
            m.cloud = Some(measure::cloud_exchange(record, m.channel, latency.clone()));
        }
        m
    }
}

/// One figure of a report: its SVG document and where it goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// Its id on the page (`fig-{id}`).
    pub id: &'static str,
    /// Its heading on the page.
    pub title: &'static str,
    /// What it shows, under it on the page.
    pub caption: &'static str,
    /// Its file name in the report's directory.
    pub file: &'static str,
    /// Whether it is four panels, one an x axis (the page's selector zooms into one).
    pub multiples: bool,
    /// The SVG document.
    pub svg: String,
}

/// The figures of a report of `runs`, in the order of the page.
///
/// # Errors
///
/// [`ReportError::Plot`] if a figure cannot be drawn.
pub fn figures(runs: &[Run]) -> Result<Vec<Figure>, ReportError> {
    let mut figures = vec![Figure {
        id: "loss",
        title: "Training loss",
        caption: "The training loss of each step (Σ loss / Σ samples over the workers), \
                  smoothed by an EWMA; the raw loss faint. Top left against the wall time, top \
                  right the steps, bottom left the epochs, bottom right the billed cost so far. \
                  Runs that do the same arithmetic (BSP on any channel) coincide against steps \
                  and epochs: the later run's line covers the earlier's.",
        file: "loss.svg",
        multiples: true,
        svg: loss_svg(runs)?,
    }];
    if let Some(svg) = validation_svg(runs)? {
        figures.push(Figure {
            id: "validation",
            title: "Validation metric",
            caption: "The model evaluated on the validation set during training, the best \
                      evaluation (the model kept) circled; panels as above.",
            file: "validation.svg",
            multiples: true,
            svg,
        });
    }
    if let Some(run) = runs
        .iter()
        .find(|run| !run.record.scale_in.decisions.is_empty())
    {
        figures.push(Figure {
            id: "scale-in",
            title: "Scale-in decisions",
            caption: "The scale-in tuner of the first run that has one: its workers, the signal \
                      it follows (the best validation metric so far, or the smoothed training \
                      loss) and the billed cost on one time axis; each removal a red line, each \
                      decision to keep the fleet a dashed one, its figures in the tooltip.",
            file: "scale-in.svg",
            multiples: false,
            svg: scale_in_svg(&ScaleInSeries::of(&run.record, &run.options.prices)),
        });
    }
    figures.extend([
        Figure {
            id: "cost",
            title: "Billed cost",
            caption: "The billed cost so far: the functions' GB-seconds and requests as they \
                      run, the channel's servers and the object-store requests over the run.",
            file: "cost.svg",
            multiples: false,
            svg: cost_svg(runs)?,
        },
        Figure {
            id: "timeline",
            title: "The fleet over time",
            caption: "Every invocation from its start to its end, one row a role: hand-offs \
                      at the lifetime limit start a new bar on the same row, replacements after \
                      a failure are orange, killed invocations outlined, failures dotted red, \
                      workers removed by scale-in crossed.",
            file: "timeline.svg",
            multiples: false,
            svg: timeline_svg(runs)?,
        },
        Figure {
            id: "step-time",
            title: "Step time",
            caption: "The workers' mean time per step, stacked: reading the minibatch (what \
                      prefetching did not hide), computing, exchanging updates; one time axis for \
                      every run, the rare bars above 1.3 × the 98th percentile cut at the top.",
            file: "step-time.svg",
            multiples: false,
            svg: step_time_svg(runs)?,
        },
        Figure {
            id: "bytes",
            title: "Traffic",
            caption: "Bytes all workers sent (left) and received (right) in each step.",
            file: "bytes.svg",
            multiples: false,
            svg: bytes_svg(runs)?,
        },
    ]);
    Ok(figures)
}

/// The files of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    /// The directory they are in.
    pub dir: PathBuf,
    /// The SVG figures, in the order of the page (`loss.svg`, `validation.svg` if a run had a
    /// validation set, `cost.svg`, `timeline.svg`, `step-time.svg`, `bytes.svg`).
    pub figures: Vec<PathBuf>,
    /// The table of the runs.
    pub csv: PathBuf,
    /// The page.
    pub html: PathBuf,
}

impl ReportFiles {
    /// Every file, the page last.
    pub fn all(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = self.figures.iter().map(PathBuf::as_path).collect();
        files.push(&self.csv);
        files.push(&self.html);
        files
    }

    /// The figure file named `name` (`loss.svg`, …), if the report has it.
    pub fn figure(&self, name: &str) -> Option<&Path> {
        self.figures
            .iter()
            .map(PathBuf::as_path)
            .find(|p| p.file_name().is_some_and(|f| f == name))
    }
}

/// Renders the report of one run, `record`, into `out_dir` (created if missing; files of an
/// earlier report there are replaced) with the [default options](ReportOptions::for_record).
///
/// # Errors
///
/// As [`render_runs`].
pub fn render_report(record: &RunRecord, out_dir: &Path) -> Result<ReportFiles, ReportError> {
    render_runs(&[Run::new(record.clone())], out_dir)
}

/// Renders the report of one run, `record`, into `out_dir` with `options`.
///
/// # Errors
///
/// As [`render_runs`].
pub fn render_report_with(
    record: &RunRecord,
    out_dir: &Path,
    options: &ReportOptions,
) -> Result<ReportFiles, ReportError> {
    let mut run = Run::new(record.clone());
    run.options = options.clone();
    render_runs(&[run], out_dir)
}

/// Renders the report of `runs` (overlaid in the figures in their order, side by side in the
/// table) into `out_dir`, created if missing; files of an earlier report there are replaced
/// (a `validation.svg` of an earlier report stays when these runs have no validation set).
///
/// # Errors
///
/// [`ReportError::Io`] if the directory or a file cannot be written, [`ReportError::Plot`] if a
/// figure cannot be drawn.
pub fn render_runs(runs: &[Run], out_dir: &Path) -> Result<ReportFiles, ReportError> {
    let figures = figures(runs)?;
    let table = RunTable::of(runs);
    let page = html_page(runs, &table, &figures);
    std::fs::create_dir_all(out_dir).map_err(|source| ReportError::Io {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let write = |name: &str, text: &str| -> Result<PathBuf, ReportError> {
        let path = out_dir.join(name);
        std::fs::write(&path, text).map_err(|source| ReportError::Io {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    };
    let mut figure_files = Vec::with_capacity(figures.len());
    for figure in &figures {
        figure_files.push(write(figure.file, &figure.svg)?);
    }
    Ok(ReportFiles {
        dir: out_dir.to_path_buf(),
        figures: figure_files,
        csv: write("runs.csv", &table.to_csv())?,
        html: write("report.html", &page)?,
    })
}
