//! The report of a search (`mlless tune`): every trial's validation curve on one plot, what the
//! search spent over time against its budget, and one page with the leaderboard.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use mlless_tune::{TrialStatus, TuneRecord};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::ReportError;
use crate::format::format_usd;
use crate::html::{STYLE, escape};
use crate::plots::{Drawn, chart_builder, padded_range, svg};

/// Size of each plot of the search, pixels.
const SIZE: (u32, u32) = (800, 420);

/// Formats of the labels of the x and the y axis.
type AxisFormats<'a> = (&'a dyn Fn(&f64) -> String, &'a dyn Fn(&f64) -> String);

/// A chart of two `f64` axes on an SVG area.
type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws the mesh of `chart` with the descriptions and label formats of its x and y axes.
fn draw_mesh(
    chart: &mut Chart<'_, '_>,
    (x_desc, y_desc): (&str, &str),
    (x_format, y_format): AxisFormats<'_>,
) -> Drawn {
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(x_format)
        .y_label_formatter(y_format)
        .draw()
}

/// Draws the legend of `chart` at `position`.
fn draw_legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>, position: SeriesLabelPosition) -> Drawn {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(position)
        .draw()
}

/// The legend mark of a line of `color`.
fn line_legend(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color)
}

const BEST_COLOR: RGBColor = RGBColor(44, 160, 44);
const FINISHED_COLOR: RGBColor = RGBColor(31, 119, 180);
const STOPPED_COLOR: RGBColor = RGBColor(150, 150, 150);
const FAILED_COLOR: RGBColor = RGBColor(214, 39, 40);

/// The files of a search's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuneReportFiles {
    /// The trials' validation curves, against epochs and against the search's time.
    pub curves_svg: PathBuf,
    /// What the search spent over time, and its budget.
    pub cost_svg: PathBuf,
    /// The page: summary, leaderboard, the plots.
    pub html: PathBuf,
}

/// Writes the report of `record` into `out_dir` (created if missing).
///
/// # Errors
///
/// [`ReportError::Io`] if a file cannot be written, [`ReportError::Plot`] if a plot cannot be
/// drawn.
pub fn render_tune_report(
    record: &TuneRecord,
    out_dir: &Path,
) -> Result<TuneReportFiles, ReportError> {
    let curves = tune_curves_svg(record)?;
    let cost = tune_cost_svg(record)?;
    let page = tune_html(record, &[("curves", &curves), ("cost", &cost)]);
    std::fs::create_dir_all(out_dir).map_err(|source| ReportError::Io {
        path: out_dir.to_path_buf(),
        source,
    })?;
    let files = TuneReportFiles {
        curves_svg: out_dir.join("curves.svg"),
        cost_svg: out_dir.join("cost.svg"),
        html: out_dir.join("report.html"),
    };
    for (path, text) in [
        (&files.curves_svg, &curves),
        (&files.cost_svg, &cost),
        (&files.html, &page),
    ] {
        std::fs::write(path, text).map_err(|source| ReportError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(files)
}

/// The colour and width of a trial's line.
fn style_of(record: &TuneRecord, trial: usize, status: TrialStatus) -> ShapeStyle {
    if record.best == Some(trial) {
        return BEST_COLOR.stroke_width(3);
    }
    match status {
        TrialStatus::Finished => FINISHED_COLOR.stroke_width(1),
        TrialStatus::Failed => FAILED_COLOR.stroke_width(1),
        _ => STOPPED_COLOR.stroke_width(1),
    }
}

/// Every trial's validation metric against epochs (left, the rungs marked) and against the
/// search's time (right), the best trial in bold, as an SVG document.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn tune_curves_svg(record: &TuneRecord) -> Result<String, ReportError> {
    let values: Vec<f64> = record
        .trials
        .iter()
        .flat_map(|t| t.curve.iter().map(|p| p.value))
        .filter(|v| v.is_finite())
        .collect();
    // A diverged trial's first evaluations would flatten the others: the y axis spans the
    // values up to their 95th percentile (the rest is drawn off the plot).
    let mut sorted = values.clone();
    sorted.sort_by(f64::total_cmp);
    let cap = sorted
        .get((sorted.len() as f64 * 0.95) as usize)
        .or(sorted.last())
        .copied();
    let y = padded_range(
        values
            .iter()
            .copied()
            .filter(|&v| cap.is_none_or(|c| v <= c)),
        false,
    );
    let epochs = padded_range(
        record
            .trials
            .iter()
            .flat_map(|t| t.curve.iter().map(|p| p.epoch))
            .chain([0.0]),
        true,
    );
    let times = padded_range(
        record
            .trials
            .iter()
            .flat_map(|t| t.curve.iter().map(|p| p.time_s))
            .chain([0.0]),
        true,
    );
    let metric = format!("validation {}", record.metric);
    let rungs: Vec<f64> = match &record.scheduler {
        Some(s) if s.config.unit == mlless_tune::RungUnit::Epochs => s.rungs.clone(),
        _ => Vec::new(),
    };
    svg("curves", (SIZE.0 * 2, SIZE.1), |root| {
        let (left, right) = root.split_horizontally(SIZE.0);
        for (area, by_time) in [(&left, false), (&right, true)] {
            let (x, caption, x_desc) = if by_time {
                (
                    times.clone(),
                    "Trials over the search's time",
                    "time since the search started (s)",
                )
            } else {
                (epochs.clone(), "Trials by epoch", "epochs")
            };
            let mut chart =
                chart_builder(area, caption, 64).build_cartesian_2d(x.clone(), y.clone())?;
            draw_mesh(
                &mut chart,
                (x_desc, &metric),
                (&|v| format!("{v:.1}"), &|v| format!("{v:.4}")),
            )?;
            if !by_time {
                for &r in &rungs {
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(r, y.start), (r, y.end)],
                        BLACK.mix(0.3),
                    )))?;
                }
            }
            let mut labelled = [false; 3];
            // The best last, so that it is drawn on top.
            let mut trials: Vec<_> = record.trials.iter().collect();
            trials.sort_by_key(|t| record.best == Some(t.trial));
            for t in trials {
                let points: Vec<(f64, f64)> = t
                    .curve
                    .iter()
                    .map(|p| (if by_time { p.time_s } else { p.epoch }, p.value))
                    .filter(|p| p.0.is_finite() && p.1.is_finite())
                    .collect();
                let style = style_of(record, t.trial, t.status);
                // Each curve is labelled by its trial at its end (inside the plot when the
                // end is off it, a diverged trial's), so that the leaderboard finds it.
                let end = points
                    .last()
                    .map(|&(x, value)| (x, value.clamp(y.start, y.end)));
                let series = chart.draw_series(LineSeries::new(points, style))?;
                let (slot, label) = if record.best == Some(t.trial) {
                    (0, format!("best: trial {}", t.trial))
                } else if t.status == TrialStatus::Finished {
                    (1, "finished".to_string())
                } else {
                    (2, "stopped or failed".to_string())
                };
                if !by_time && !labelled[slot] {
                    labelled[slot] = true;
                    let color = style.color.to_rgba();
                    let color = RGBColor(color.0, color.1, color.2);
                    series.label(label).legend(line_legend(color));
                }
                if let Some(end) = end {
                    let color = style.color.to_rgba();
                    let font = ("sans-serif", 12)
                        .into_font()
                        .color(&RGBColor(color.0, color.1, color.2));
                    chart.draw_series(std::iter::once(Text::new(
                        format!("trial {}", t.trial),
                        end,
                        font,
                    )))?;
                }
            }
            if !by_time {
                draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
            }
        }
        Ok(())
    })
}

/// What the search had spent over time, with its budget, as an SVG document.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn tune_cost_svg(record: &TuneRecord) -> Result<String, ReportError> {
    let curve: Vec<(f64, f64)> = record
        .cost_curve
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    let x = padded_range(curve.iter().map(|p| p.0).chain([0.0]), true);
    let y = padded_range(curve.iter().map(|p| p.1).chain([record.budget_usd]), true);
    svg("cost", SIZE, |root| {
        let mut chart =
            chart_builder(root, "What the search spent", 80).build_cartesian_2d(x.clone(), y)?;
        draw_mesh(
            &mut chart,
            ("time since the search started (s)", "spent (USD)"),
            (&|v| format!("{v:.1}"), &|v| format_usd(*v)),
        )?;
        chart
            .draw_series(LineSeries::new(curve, BEST_COLOR.stroke_width(2)))?
            .label("the trials' bills so far")
            .legend(line_legend(BEST_COLOR));
        chart
            .draw_series(LineSeries::new(
                [(x.start, record.budget_usd), (x.end, record.budget_usd)],
                FAILED_COLOR.stroke_width(1),
            ))?
            .label("budget")
            .legend(line_legend(FAILED_COLOR));
        draw_legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// The page of a search: summary, leaderboard and the plots (`(id, SVG document)`, inlined).
/// Every string from the record is escaped.
pub fn tune_html(record: &TuneRecord, plots: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let title = format!("mlless search {}", record.tune_id);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    let counts: Vec<String> = record
        .counts()
        .iter()
        .map(|(s, n)| format!("{n} {}", s.name()))
        .collect();
    let scheduler = match &record.scheduler {
        Some(s) => format!(
            "asynchronous successive halving, η = {}, rungs at {}, at most {}",
            s.config.eta,
            s.rungs
                .iter()
                .map(|&r| s.config.unit.show(r))
                .collect::<Vec<_>>()
                .join(", "),
            s.config.unit.show(s.config.max)
        ),
        None => "none: every trial trains to its end".to_string(),
    };
    let best = record.best_trial().map_or("—".to_string(), |t| {
        format!(
            "trial {} ({}): {} {:.6}{}",
            t.trial,
            t.params,
            record.metric,
            t.best_metric.unwrap_or(f64::NAN),
            t.run_url
                .as_ref()
                .map_or(String::new(), |u| format!(", run {u}"))
        )
    });
    let rows = [
        ("model", record.model.clone()),
        (
            "metric",
            format!(
                "validation {} ({:?} is better)",
                record.metric, record.direction
            ),
        ),
        (
            "space",
            record
                .space
                .params
                .iter()
                .map(|p| format!("{}={}", p.name, p.domain.describe()))
                .collect::<Vec<_>>()
                .join(" "),
        ),
        (
            "sampler",
            format!("{:?}, seed {}", record.sampler, record.seed),
        ),
        ("scheduler", scheduler),
        (
            "trials",
            format!(
                "{} ({}), {} at once",
                record.trials.len(),
                counts.join(", "),
                record.concurrency
            ),
        ),
        (
            "spent",
            format!(
                "{} of the {} budget ({:.1}%)",
                format_usd(record.spent_usd),
                format_usd(record.budget_usd),
                100.0 * record.spent_usd / record.budget_usd
            ),
        ),
        ("wall time", format!("{:.1} s", record.wall_s)),
        ("ended", record.stop_reason.clone()),
        ("best", best),
    ];
    out.push_str("<table>\n");
    for (k, v) in rows {
        let _ = writeln!(
            out,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(k),
            escape(&v)
        );
    }
    out.push_str("</table>\n<h2>Leaderboard</h2>\n<table class=\"comparison\">\n");
    let _ = writeln!(
        out,
        "<tr><th>rank</th><th>trial</th><th>parameters</th><th>{}</th><th>epochs</th>\
         <th>time (s)</th><th>cost</th><th>status</th><th>why</th></tr>",
        escape(&record.metric)
    );
    for (rank, t) in record.leaderboard().iter().enumerate() {
        let why = t
            .error
            .as_deref()
            .or(t.stop_reason.as_deref())
            .unwrap_or("");
        let _ = writeln!(
            out,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.1}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            if record.best == Some(t.trial) {
                " class=\"this-run\""
            } else {
                ""
            },
            rank + 1,
            t.trial,
            escape(&t.params.to_string()),
            t.best_metric.map_or("—".to_string(), |v| format!("{v:.6}")),
            t.epochs,
            t.wall_s,
            format_usd(t.cost_usd),
            t.status.name(),
            escape(why)
        );
    }
    out.push_str("</table>\n");
    for (id, svg) in plots {
        let _ = writeln!(out, "<figure id=\"{}\">\n{svg}\n</figure>", escape(id));
    }
    out.push_str("</body>\n</html>\n");
    out
}
