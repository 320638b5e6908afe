//! The SVG plots of a report, drawn with `plotters`.

use std::ops::Range;

use mlless_cost::PriceTable;
use mlless_job::RunRecord;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::ReportError;
use crate::measure::cost_curve;

/// Size of every plot, pixels.
pub(crate) const SIZE: (u32, u32) = (800, 420);
/// More points than this are thinned out (every k-th kept, and the last) so that the SVG stays
/// small; the plots are 800 pixels wide.
const MAX_POINTS: usize = 2000;

const LOSS_COLOR: RGBColor = RGBColor(31, 119, 180);
const WORKERS_COLOR: RGBColor = RGBColor(214, 39, 40);
const SENT_COLOR: RGBColor = RGBColor(31, 119, 180);
const RECEIVED_COLOR: RGBColor = RGBColor(255, 127, 14);
const COST_COLOR: RGBColor = RGBColor(44, 160, 44);

/// The training loss over time (seconds since the run started) with the number of workers on a
/// secondary axis, as an SVG document.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn loss_svg(record: &RunRecord) -> Result<String, ReportError> {
    let offset = record.time_offset_s();
    let loss: Vec<(f64, f64)> = thin(
        record
            .steps
            .iter()
            .map(|s| (offset + s.time_s, s.loss))
            .filter(|(t, l)| t.is_finite() && l.is_finite())
            .collect(),
    );
    let mut workers: Vec<(f64, f64)> = Vec::new();
    for s in &record.steps {
        let p = s.workers.len() as f64;
        let t = offset + s.time_s;
        if let Some(&(_, last)) = workers.last()
            && last != p
        {
            workers.push((t, last));
        }
        if workers.last().is_none_or(|&(_, last)| last != p) {
            workers.push((t, p));
        }
    }
    if let (Some(&(_, p)), Some(last)) = (workers.last(), record.steps.last()) {
        workers.push((offset + last.time_s, p));
    }
    let x = padded_range(loss.iter().chain(&workers).map(|p| p.0), false);
    let y = padded_range(loss.iter().map(|p| p.1), false);
    let max_workers = workers.iter().map(|p| p.1).fold(1.0, f64::max);

    svg("loss", SIZE, |root| {
        let mut chart = chart_builder(root, "Training loss and workers over time", 64)
            .right_y_label_area_size(48)
            .build_cartesian_2d(x.clone(), y)?
            .set_secondary_coord(x, 0.0..(max_workers * 1.25).ceil() + 1.0);
        draw_mesh(
            &mut chart,
            ("time since the run started (s)", "training loss"),
            (&|v| format!("{v:.1}"), &|v| format!("{v:.4}")),
        )?;
        chart
            .configure_secondary_axes()
            .y_desc("workers")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()?;
        chart
            .draw_series(LineSeries::new(loss, LOSS_COLOR.stroke_width(2)))?
            .label("loss")
            .legend(line_legend(LOSS_COLOR));
        chart
            .draw_secondary_series(LineSeries::new(workers, WORKERS_COLOR.stroke_width(2)))?
            .label("workers (right axis)")
            .legend(line_legend(WORKERS_COLOR));
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

/// The validation curve: the validation metric against time (with the training loss,
/// smoothed, on the right axis) and against the billed cost so far, side by side, the best
/// evaluation marked; `None` when the run had no validation set.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn validation_svg(record: &RunRecord) -> Result<Option<String>, ReportError> {
    let Some(validation) = &record.validation else {
        return Ok(None);
    };
    let metric = validation.metric.as_str();
    let offset = record.time_offset_s();
    let points: Vec<(f64, f64, f64)> = validation
        .points
        .iter()
        .filter_map(|p| {
            let v = *p.metrics.get(metric)?;
            Some((offset + p.time_s, p.cost_usd.unwrap_or(f64::NAN), v))
        })
        .filter(|(t, _, v)| t.is_finite() && v.is_finite())
        .collect();
    if points.is_empty() {
        return Ok(None);
    }
    let best = validation
        .best_point()
        .and_then(|p| Some((offset + p.time_s, p.cost_usd?, *p.metrics.get(metric)?)));
    let smoothed = thin(smoothed_loss(record, offset));
    let by_time: Vec<(f64, f64)> = points.iter().map(|&(t, _, v)| (t, v)).collect();
    let by_cost: Vec<(f64, f64)> = points
        .iter()
        .filter(|(_, c, _)| c.is_finite())
        .map(|&(_, c, v)| (c, v))
        .collect();
    let y = padded_range(points.iter().map(|p| p.2), false);
    let x_time = padded_range(by_time.iter().chain(&smoothed).map(|p| p.0), false);
    let x_cost = padded_range(by_cost.iter().map(|p| p.0), false);
    let loss_y = padded_range(smoothed.iter().map(|p| p.1), false);
    let label = format!("validation {metric}");

    let svg = svg("validation", (SIZE.0 * 2, SIZE.1), |root| {
        let (left, right) = root.split_horizontally(SIZE.0);
        let mut chart = chart_builder(&left, &format!("{label} over time"), 64)
            .right_y_label_area_size(64)
            .build_cartesian_2d(x_time.clone(), y.clone())?
            .set_secondary_coord(x_time, loss_y);
        draw_mesh(
            &mut chart,
            ("time since the run started (s)", &label),
            (&|v| format!("{v:.1}"), &|v| format!("{v:.4}")),
        )?;
        chart
            .configure_secondary_axes()
            .y_desc("training loss (smoothed)")
            .y_label_formatter(&|v| format!("{v:.4}"))
            .draw()?;
        chart
            .draw_secondary_series(LineSeries::new(smoothed, WORKERS_COLOR.mix(0.6)))?
            .label("training loss, smoothed (right axis)")
            .legend(line_legend(WORKERS_COLOR));
        chart
            .draw_series(LineSeries::new(by_time.clone(), LOSS_COLOR.stroke_width(2)))?
            .label(label.as_str())
            .legend(line_legend(LOSS_COLOR));
        chart.draw_series(
            by_time
                .iter()
                .map(|&p| Circle::new(p, 3, LOSS_COLOR.filled())),
        )?;
        if let Some((t, _, v)) = best {
            chart
                .draw_series([Circle::new((t, v), 7, COST_COLOR.stroke_width(2))])?
                .label("best (the model kept)")
                .legend(|(x, y)| Circle::new((x + 10, y), 5, COST_COLOR.stroke_width(2)));
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;

        let mut chart = chart_builder(&right, &format!("{label} against cost"), 64)
            .build_cartesian_2d(x_cost, y)?;
        draw_mesh(
            &mut chart,
            ("billed cost so far (USD)", &label),
            (&|v| format!("{v:.4}"), &|v| format!("{v:.4}")),
        )?;
        chart.draw_series(LineSeries::new(by_cost.clone(), COST_COLOR.stroke_width(2)))?;
        chart.draw_series(
            by_cost
                .iter()
                .map(|&p| Circle::new(p, 3, COST_COLOR.filled())),
        )?;
        if let Some((_, c, v)) = best {
            chart.draw_series([Circle::new((c, v), 7, LOSS_COLOR.stroke_width(2))])?;
        }
        Ok(())
    })?;
    Ok(Some(svg))
}

/// Smoothing of the training loss in the validation plot (an EWMA over steps).
const LOSS_SMOOTHING: f64 = 0.05;

/// The training loss over time, smoothed by an EWMA over the steps.
fn smoothed_loss(record: &RunRecord, offset: f64) -> Vec<(f64, f64)> {
    let mut ewma: Option<f64> = None;
    record
        .steps
        .iter()
        .filter(|s| s.loss.is_finite() && s.time_s.is_finite())
        .map(|s| {
            let v = ewma.map_or(s.loss, |e| e + LOSS_SMOOTHING * (s.loss - e));
            ewma = Some(v);
            (offset + s.time_s, v)
        })
        .collect()
}

/// The billed cost so far over time (seconds since the run started) at the prices of `prices`,
/// as an SVG document; the curve is [`cost_curve`].
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn cost_svg(record: &RunRecord, prices: &PriceTable) -> Result<String, ReportError> {
    let curve = thin(cost_curve(record, prices));
    let caption = format!("Billed cost over time ({} prices)", prices.name);
    line_chart(
        "cost",
        &caption,
        "time since the run started (s)",
        "cost so far (USD)",
        &[("cost", COST_COLOR, curve)],
        SeriesLabelPosition::UpperLeft,
        (&|v| format!("{v:.1}"), &|v| format_usd(*v)),
    )
}

/// Bytes sent and received by all workers together in each step, as an SVG document.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn bytes_svg(record: &RunRecord) -> Result<String, ReportError> {
    let sent = thin(
        record
            .steps
            .iter()
            .map(|s| {
                (
                    s.step as f64,
                    s.workers.iter().map(|w| w.bytes_sent).sum::<u64>() as f64,
                )
            })
            .collect(),
    );
    let received = thin(
        record
            .steps
            .iter()
            .map(|s| {
                let bytes: u64 = s.workers.iter().map(|w| w.bytes_received).sum();
                (s.step as f64, bytes as f64)
            })
            .collect(),
    );
    line_chart(
        "bytes",
        "Bytes exchanged per step (all workers)",
        "step",
        "bytes per step",
        &[
            ("sent", SENT_COLOR, sent),
            ("received", RECEIVED_COLOR, received),
        ],
        SeriesLabelPosition::MiddleRight,
        (&|v| format!("{v:.0}"), &|v| format_bytes(*v)),
    )
}

/// One line of a chart: its name in the legend, its colour, its points.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

/// Formats of the labels of the x and the y axis.
pub(crate) type AxisFormats<'a> = (&'a dyn Fn(&f64) -> String, &'a dyn Fn(&f64) -> String);

/// A line chart of `series` (name, colour, points) starting at 0 on the y axis.
fn line_chart(
    plot: &'static str,
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series<'_>],
    legend: SeriesLabelPosition,
    (x_format, y_format): AxisFormats<'_>,
) -> Result<String, ReportError> {
    let x = padded_range(series.iter().flat_map(|s| s.2.iter().map(|p| p.0)), false);
    let y = padded_range(series.iter().flat_map(|s| s.2.iter().map(|p| p.1)), true);
    svg(plot, SIZE, |root| {
        let mut chart = chart_builder(root, caption, 80).build_cartesian_2d(x, y)?;
        draw_mesh(&mut chart, (x_desc, y_desc), (x_format, y_format))?;
        for &(name, color, ref points) in series {
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(name)
                .legend(line_legend(color));
        }
        draw_legend(&mut chart, legend)
    })
}

/// What drawing on an SVG area returns.
pub(crate) type Drawn = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// A chart of two `f64` axes on an SVG area.
pub(crate) type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

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
            .map_err(plot_error(plot))?;
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
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(y_labels);
    builder
}

/// Draws the mesh of `chart` with the descriptions and label formats of its x and y axes.
pub(crate) fn draw_mesh(
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
pub(crate) fn draw_legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> Drawn {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(position)
        .draw()
}

/// The legend mark of a line of `color`.
pub(crate) fn line_legend(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color)
}

fn plot_error<E: std::fmt::Display>(plot: &'static str) -> impl Fn(E) -> ReportError {
    move |e| ReportError::Plot {
        plot,
        reason: e.to_string(),
    }
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

/// Every k-th point and the last, so that at most about [`MAX_POINTS`] remain.
fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let k = points.len().div_ceil(MAX_POINTS);
    let last = points.len() - 1;
    points
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % k == 0 || *i == last)
        .map(|(_, p)| p)
        .collect()
}

/// Dollars with three significant digits, e.g. `$0.000123`, `$1.23`.
pub(crate) fn format_usd(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "$0".to_string();
    }
    let digits = (2 - v.abs().log10().floor() as i32).clamp(2, 12) as usize;
    format!("${v:.digits$}")
}

/// Bytes in B, kB, MB or GB (powers of 1000).
fn format_bytes(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1} GB", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1} MB", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.0} kB", v / 1e3)
    } else {
        format!("{v:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_formats() {
        assert_eq!(padded_range([2.0, 2.0].into_iter(), false), 1.9..2.1);
        assert_eq!(padded_range(std::iter::empty(), true), 0.0..1.05);
        let r = padded_range([1.0, 3.0, f64::NAN].into_iter(), true);
        assert_eq!(r.start, 0.0);
        assert!((r.end - 3.15).abs() < 1e-12);
        assert_eq!(format_usd(0.000_123_4), "$0.000123");
        assert_eq!(format_usd(1.234), "$1.23");
        assert_eq!(format_usd(0.0), "$0");
        assert_eq!(format_bytes(1_500.0), "2 kB");
        assert_eq!(format_bytes(2_500_000.0), "2.5 MB");
        let thinned = thin((0..5001).map(|i| (f64::from(i), 0.0)).collect());
        assert!(thinned.len() <= MAX_POINTS + 1);
        assert_eq!(thinned.last().unwrap().0, 5000.0);
    }
}
