//! The SVG figures of a report that overlay its runs, drawn with `plotters`: the training loss
//! and the validation metric against wall time, steps, epochs and billed cost (small
//! multiples), the billed cost over time, and the bytes each step sent and received.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::ReportError;
use crate::format::{format_bytes_tick, format_tick};
use crate::measure::cost_curve;
use crate::runs::Run;

/// Size of one panel, pixels.
pub(crate) const PANEL: (u32, u32) = (700, 380);
/// More points than this are thinned out (every k-th kept, and the last) so that the SVG stays
/// small; a panel is 700 pixels wide.
const MAX_POINTS: usize = 1500;

/// The colours of the runs, in order (matplotlib's "tab10"); the 11th run takes the first again.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of the run at `index`.
pub fn run_color(index: usize) -> RGBColor {
    PALETTE[index % PALETTE.len()]
}

/// `#rrggbb` of the run at `index`, as the SVG documents write it.
pub fn run_color_hex(index: usize) -> String {
    let RGBColor(r, g, b) = run_color(index);
    format!("#{r:02X}{g:02X}{b:02X}")
}

/// The x axes of the loss and validation figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XAxis {
    Time,
    Step,
    Epoch,
    Cost,
}

impl XAxis {
    /// Every axis, in the selector's order (each at its [`index`](Self::index)).
    const ALL: [XAxis; 4] = [XAxis::Time, XAxis::Step, XAxis::Epoch, XAxis::Cost];

    /// Its place in [`ALL`](Self::ALL): an exhaustive match, so that a new axis does not compile
    /// until it has a place here (and in `ALL`, checked by `mlless_core::assert_all_in_place!`).
    const fn index(self) -> usize {
        match self {
            XAxis::Time => 0,
            XAxis::Step => 1,
            XAxis::Epoch => 2,
            XAxis::Cost => 3,
        }
    }

    fn description(self) -> &'static str {
        match self {
            XAxis::Time => "time since the run started (s)",
            XAxis::Step => "step",
            XAxis::Epoch => "epoch",
            XAxis::Cost => "billed cost so far (USD)",
        }
    }

    fn name(self) -> &'static str {
        match self {
            XAxis::Time => "wall time",
            XAxis::Step => "steps",
            XAxis::Epoch => "epochs",
            XAxis::Cost => "billed cost",
        }
    }
}

mlless_core::assert_all_in_place!(XAxis);

/// Where a run was at one of its steps or evaluations, on every x axis.
#[derive(Debug, Clone, Copy)]
struct At {
    time_s: f64,
    step: f64,
    epoch: f64,
    cost_usd: f64,
}

impl At {
    fn x(&self, axis: XAxis) -> f64 {
        match axis {
            XAxis::Time => self.time_s,
            XAxis::Step => self.step,
            XAxis::Epoch => self.epoch,
            XAxis::Cost => self.cost_usd,
        }
    }
}

/// A run's evaluations: where each was, its value, and the index of the best.
type Evaluations = (Vec<At>, Vec<f64>, Option<usize>);

/// One line of a panel.
struct Line {
    color: RGBColor,
    points: Vec<(f64, f64)>,
    width: u32,
    opacity: f64,
    /// Dots at the points (a curve of few evaluations).
    dots: bool,
}

/// The training loss of every run, smoothed (an EWMA) and raw (faint), against wall time,
/// steps, epochs and billed cost: four panels, one SVG document.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn loss_svg(runs: &[Run]) -> Result<String, ReportError> {
    let curves: Vec<(Vec<At>, Vec<f64>, Vec<f64>)> = runs
        .iter()
        .map(|run| {
            let clock = run.record.cost_clock(&run.options.prices);
            let steps: Vec<_> = run
                .record
                .steps
                .iter()
                .filter(|s| s.loss.is_finite() && s.time_s.is_finite())
                .collect();
            let at = steps
                .iter()
                .map(|s| {
                    let time_s = run.since_start(s.time_s);
                    At {
                        time_s,
                        step: s.step as f64,
                        epoch: s.epoch,
                        cost_usd: clock.cost_at(time_s),
                    }
                })
                .collect();
            let raw: Vec<f64> = steps.iter().map(|s| s.loss).collect();
            let smooth = smoothed(&raw);
            (at, raw, smooth)
        })
        .collect();
    let legend = run_legend(runs, |_| true);
    small_multiples("loss", "Training loss", &legend, |axis| {
        let mut lines = Vec::new();
        for (i, (at, raw, smooth)) in curves.iter().enumerate() {
            let xs = at.iter().map(|a| a.x(axis));
            lines.push(Line {
                color: run_color(i),
                points: thin(xs.clone().zip(raw.iter().copied()).collect()),
                width: 1,
                opacity: 0.25,
                dots: false,
            });
            lines.push(Line {
                color: run_color(i),
                points: thin(xs.zip(smooth.iter().copied()).collect()),
                width: 2,
                opacity: 1.0,
                dots: false,
            });
        }
        ("training loss (smoothed; raw faint)".to_string(), lines)
    })
}

/// The validation metric of every run with a validation set against wall time, steps, epochs
/// and billed cost, the best evaluation of each circled; `None` when no run has one. Runs whose
/// primary metric is not the first such run's are left out (one y axis).
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn validation_svg(runs: &[Run]) -> Result<Option<String>, ReportError> {
    let Some(metric) = runs
        .iter()
        .find_map(|r| r.record.validation.as_ref().map(|v| v.metric.clone()))
    else {
        return Ok(None);
    };
    let curves: Vec<Option<Evaluations>> = runs
        .iter()
        .map(|run| {
            let validation = run
                .record
                .validation
                .as_ref()
                .filter(|v| v.metric == metric)?;
            let clock = run.record.cost_clock(&run.options.prices);
            let mut at = Vec::new();
            let mut values = Vec::new();
            let mut best = None;
            for (k, p) in validation.points.iter().enumerate() {
                let Some(&v) = p.metrics.get(&metric).filter(|v| v.is_finite()) else {
                    continue;
                };
                let time_s = run.since_start(p.time_s);
                if validation.best == Some(k) {
                    best = Some(at.len());
                }
                at.push(At {
                    time_s,
                    step: p.step as f64,
                    epoch: p.epoch,
                    cost_usd: p.cost_usd.unwrap_or_else(|| clock.cost_at(time_s)),
                });
                values.push(v);
            }
            Some((at, values, best))
        })
        .collect();
    if curves.iter().flatten().all(|(at, _, _)| at.is_empty()) {
        return Ok(None);
    }
    let legend = run_legend(runs, |i| curves[i].is_some());
    let svg = small_multiples(
        "validation",
        &format!("Validation {metric}"),
        &legend,
        |axis| {
            let mut lines = Vec::new();
            for (i, curve) in curves.iter().enumerate() {
                let Some((at, values, best)) = curve else {
                    continue;
                };
                let points: Vec<(f64, f64)> = at
                    .iter()
                    .map(|a| a.x(axis))
                    .zip(values.iter().copied())
                    .collect();
                if let Some(&b) = best.as_ref().and_then(|&b| points.get(b)) {
                    lines.push(Line {
                        color: run_color(i),
                        points: vec![b],
                        width: 0,
                        opacity: 1.0,
                        dots: true,
                    });
                }
                lines.push(Line {
                    color: run_color(i),
                    points,
                    width: 2,
                    opacity: 1.0,
                    dots: true,
                });
            }
            (format!("validation {metric} (best circled)"), lines)
        },
    )?;
    Ok(Some(svg))
}

/// The billed cost so far of every run over time (seconds since each run started), at each
/// run's prices; the curves are [`cost_curve`].
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn cost_svg(runs: &[Run]) -> Result<String, ReportError> {
    let lines: Vec<Line> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| Line {
            color: run_color(i),
            points: thin(cost_curve(&run.record, &run.options.prices)),
            width: 2,
            opacity: 1.0,
            dots: false,
        })
        .collect();
    let legend: Vec<(RGBColor, String)> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            (
                run_color(i),
                format!("{} ({} prices)", r.label, r.options.prices.name),
            )
        })
        .collect();
    let legend_px = legend_height(legend.len(), 1);
    svg("cost", (PANEL.0, PANEL.1 + legend_px), |root| {
        let (top, rest) = root.split_vertically(legend_px);
        draw_run_legend(&top, &legend, 1)?;
        panel(
            &rest,
            "Billed cost over time",
            (XAxis::Time.description(), "billed cost so far (USD)"),
            &lines,
            (Unit::Plain, Unit::Usd),
        )
    })
}

/// The bytes all workers of each run sent and received in each step, in two panels (sent on
/// the left, received on the right) so that neither hides the other.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn bytes_svg(runs: &[Run]) -> Result<String, ReportError> {
    let per_step = |i: usize, run: &Run, f: fn(&mlless_job::record::WorkerStep) -> u64| Line {
        color: run_color(i),
        points: thin(
            run.record
                .steps
                .iter()
                .map(|s| (s.step as f64, s.workers.iter().map(f).sum::<u64>() as f64))
                .collect(),
        ),
        width: 2,
        opacity: 1.0,
        dots: false,
    };
    let sent: Vec<Line> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| per_step(i, r, |w| w.bytes_sent))
        .collect();
    let received: Vec<Line> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| per_step(i, r, |w| w.bytes_received))
        .collect();
    let legend = run_legend(runs, |_| true);
    let legend_px = legend_height(legend.len(), 2);
    svg("bytes", (PANEL.0 * 2, PANEL.1 + legend_px), |root| {
        let (top, rest) = root.split_vertically(legend_px);
        draw_run_legend(&top, &legend, 2)?;
        let (left, right) = rest.split_horizontally(PANEL.0);
        panel(
            &left,
            "Bytes sent per step (all workers)",
            ("step", "bytes sent per step"),
            &sent,
            (Unit::Plain, Unit::Bytes),
        )?;
        panel(
            &right,
            "Bytes received per step (all workers)",
            ("step", "bytes received per step"),
            &received,
            (Unit::Plain, Unit::Bytes),
        )
    })
}

/// Four panels, one an x axis ([`XAxis::ALL`]), of the lines `lines` gives for each with its y
/// description, under the `legend` of the runs.
fn small_multiples(
    plot: &'static str,
    title: &str,
    legend: &[(RGBColor, String)],
    lines: impl Fn(XAxis) -> (String, Vec<Line>),
) -> Result<String, ReportError> {
    let legend_px = legend_height(legend.len(), 2);
    svg(plot, (PANEL.0 * 2, PANEL.1 * 2 + legend_px), |root| {
        let (top, rest) = root.split_vertically(legend_px);
        draw_run_legend(&top, legend, 2)?;
        for (area, axis) in rest.split_evenly((2, 2)).iter().zip(XAxis::ALL) {
            let (y_desc, lines) = lines(axis);
            let caption = format!("{title} against {}", axis.name());
            panel(
                area,
                &caption,
                (axis.description(), &y_desc),
                &lines,
                (
                    if axis == XAxis::Cost {
                        Unit::Usd
                    } else {
                        Unit::Plain
                    },
                    Unit::Plain,
                ),
            )?;
        }
        Ok(())
    })
}

/// What the numbers of an axis are, for its tick labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Plain numbers, with the decimals the tick step needs.
    Plain,
    /// Dollars, with the decimals the tick step needs.
    Usd,
    /// Bytes, in B, kB, MB or GB.
    Bytes,
}

impl Unit {
    /// The label of tick `v` on an axis spanning `span`.
    fn tick(self, v: f64, span: f64) -> String {
        match self {
            Unit::Plain => format_tick(v, span),
            Unit::Usd => format!("${}", format_tick(v, span)),
            Unit::Bytes => format_bytes_tick(v, span),
        }
    }
}

/// One chart of `lines` on `area`, with its caption, axis descriptions (units included) and
/// tick units.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    (x_desc, y_desc): (&str, &str),
    lines: &[Line],
    (x_unit, y_unit): (Unit, Unit),
) -> Drawn {
    let x = padded_range(
        lines.iter().flat_map(|l| l.points.iter().map(|p| p.0)),
        false,
    );
    // Byte counts are amounts: their axis starts at 0, so that lines are seen in proportion.
    let y = padded_range(
        lines.iter().flat_map(|l| l.points.iter().map(|p| p.1)),
        y_unit == Unit::Bytes,
    );
    let (x_span, y_span) = (x.end - x.start, y.end - y.start);
    let x_tick = move |v: &f64| x_unit.tick(*v, x_span);
    let y_tick = move |v: &f64| y_unit.tick(*v, y_span);
    let mut chart = chart_builder(area, caption, 72).build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&x_tick)
        .y_label_formatter(&y_tick)
        .max_light_lines(2)
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    for line in lines {
        let style = line.color.mix(line.opacity).stroke_width(line.width);
        if line.width > 0 && line.points.len() > 1 {
            chart.draw_series(LineSeries::new(line.points.iter().copied(), style))?;
        }
        if line.dots {
            let (radius, style) = if line.width == 0 {
                (7, line.color.stroke_width(2))
            } else {
                (3, line.color.filled())
            };
            chart.draw_series(line.points.iter().map(|&p| Circle::new(p, radius, style)))?;
        }
    }
    Ok(())
}

/// Height of one line of a figure's legend of runs, pixels.
const LEGEND_LINE_PX: u32 = 20;

/// The colour and label of each run that `keep` keeps (by index).
fn run_legend(runs: &[Run], keep: impl Fn(usize) -> bool) -> Vec<(RGBColor, String)> {
    runs.iter()
        .enumerate()
        .filter(|&(i, _)| keep(i))
        .map(|(i, r)| (run_color(i), r.label.clone()))
        .collect()
}

/// Height of a legend of `entries` runs in `columns` columns, pixels.
fn legend_height(entries: usize, columns: usize) -> u32 {
    entries.div_ceil(columns.max(1)) as u32 * LEGEND_LINE_PX + 12
}

/// Draws the legend of runs above a figure's panels, outside them so that it hides no curve:
/// a line of each run's colour and its label, in `columns` columns.
fn draw_run_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[(RGBColor, String)],
    columns: usize,
) -> Drawn {
    let columns = columns.max(1);
    let column_px = area.dim_in_pixel().0 as i32 / columns as i32;
    for (k, (color, label)) in entries.iter().enumerate() {
        let x = 24 + (k % columns) as i32 * column_px;
        let y = 16 + (k / columns) as i32 * LEGEND_LINE_PX as i32;
        area.draw(&PathElement::new(
            vec![(x, y), (x + 28, y)],
            color.stroke_width(3),
        ))?;
        area.draw(&Text::new(
            label.clone(),
            (x + 36, y - 7),
            ("sans-serif", 14),
        ))?;
    }
    Ok(())
}

/// What drawing on an SVG area returns.
pub(crate) type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// The SVG document of `size` pixels that `draw` draws on a white background; `plot` names it
/// in errors ([`ReportError::Plot`]).
pub(crate) fn svg(
    plot: &'static str,
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Drawn,
) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
            .map_err(|e| ReportError::Plot {
                plot,
                reason: e.to_string(),
            })?;
    }
    Ok(svg)
}

/// A chart on `area` with its `caption`, the margins and the x labels' room of every plot, and
/// `y_labels` pixels for the labels of the (left) y axis.
pub(crate) fn chart_builder<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    y_labels: u32,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(caption, ("sans-serif", 17))
        .margin(10)
        .x_label_area_size(42)
        .y_label_area_size(y_labels);
    builder
}

/// The range of `values` with 5 % of room on each side (from 0 if `from_zero`), never empty.
pub(crate) fn padded_range(values: impl Iterator<Item = f64>, from_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
    }
    let span = hi - lo;
    let pad = if span > 0.0 {
        span * 0.05
    } else {
        hi.abs().max(1.0) * 0.05
    };
    let lo = if from_zero && lo >= 0.0 { lo } else { lo - pad };
    lo..hi + pad
}

/// At most about [`MAX_POINTS`] of `points` ([`mlless_core::curve::thin`]).
fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    mlless_core::curve::thin(points, MAX_POINTS)
}

/// `values` smoothed by an exponentially weighted moving average over a span of a twentieth of
/// them (at least 5): α = 2 / (span + 1).
pub(crate) fn smoothed(values: &[f64]) -> Vec<f64> {
    let span = (values.len() as f64 / 20.0).max(5.0);
    let alpha = 2.0 / (span + 1.0);
    let mut ewma: Option<f64> = None;
    values
        .iter()
        .map(|&v| {
            let e = ewma.map_or(v, |e| e + alpha * (v - e));
            ewma = Some(e);
            e
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_thinning_and_smoothing() {
        assert_eq!(padded_range([2.0, 2.0].into_iter(), false), 1.9..2.1);
        assert_eq!(padded_range(std::iter::empty(), true), 0.0..1.05);
        let r = padded_range([1.0, 3.0, f64::NAN].into_iter(), true);
        assert_eq!(r.start, 0.0);
        assert!((r.end - 3.15).abs() < 1e-12);
        let thinned = thin((0..5001).map(|i| (f64::from(i), 0.0)).collect());
        assert!(thinned.len() <= MAX_POINTS + 1);
        assert_eq!(thinned.last().unwrap().0, 5000.0);
        // A noisy constant is smoothed towards it; the first value is kept.
        let noisy: Vec<f64> = (0..200)
            .map(|i| if i % 2 == 0 { 1.0 } else { 0.0 })
            .collect();
        let s = smoothed(&noisy);
        assert_eq!(s[0], 1.0);
        assert!(
            s[150..].iter().all(|v| (v - 0.5).abs() < 0.1),
            "{:?}",
            &s[150..]
        );
        assert_eq!(run_color_hex(0), "#1F77B4");
        assert_eq!(run_color(10), run_color(0));
    }
}
