//! The scale-in page of a report: workers, the validation metric (the training loss without a
//! validation set) and the billed cost over time on one SVG, three panels on one time axis,
//! with every tuner decision marked — a solid red line where it removed a worker, a dashed grey
//! one where it kept the fleet, each with its figures as a tooltip.

use std::fmt::Write;

use mlless_cost::PriceTable;
use mlless_job::RunRecord;

use crate::escape;
use crate::format::finite_range;
use crate::measure::cost_curve;

/// What the scale-in plot shows, on the run's clock (seconds since the run started).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ScaleInSeries {
    /// `(time, workers)` at each step.
    pub workers: Vec<(f64, f64)>,
    /// The name of the watched metric (`rmse`, `logloss`, or `training loss`).
    pub metric: String,
    /// `(time, value)` of the watched metric.
    pub metric_points: Vec<(f64, f64)>,
    /// `(time, dollars billed so far)`.
    pub cost: Vec<(f64, f64)>,
    /// The tuner's decisions.
    pub decisions: Vec<DecisionMark>,
}

/// One decision of the tuner as the plot marks it.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionMark {
    /// When, seconds since the run started.
    pub time_s: f64,
    /// The step.
    pub step: u64,
    /// Whether it removed a worker (a removal decided as the run ended took no effect, and
    /// is not one).
    pub remove: bool,
    /// Its figures in one line (the tooltip).
    pub summary: String,
}

impl ScaleInSeries {
    /// The series of `record`, its cost at `prices`.
    pub fn of(record: &RunRecord, prices: &PriceTable) -> Self {
        let offset = record.time_offset_s();
        let workers = record
            .steps
            .iter()
            .map(|s| (offset + s.time_s, s.workers.len() as f64))
            .collect();
        let (metric, metric_points) = match &record.validation {
            Some(v) if !v.points.is_empty() => (
                v.metric.clone(),
                v.points
                    .iter()
                    .filter_map(|p| p.metrics.get(&v.metric).map(|&m| (offset + p.time_s, m)))
                    .collect(),
            ),
            _ => (
                "training loss".to_string(),
                record
                    .steps
                    .iter()
                    .map(|s| (offset + s.time_s, s.loss))
                    .collect(),
            ),
        };
        let applied = took_effect(
            record.scale_in.decisions.iter().map(|d| d.remove),
            record.scale_in.removals.len(),
        );
        let decisions = record
            .scale_in
            .decisions
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mut summary = format!(
                    "step {}: {} → {} workers, s_Δ = {:.4}",
                    d.step, d.workers_before, d.workers_after, d.s_delta
                );
                if let Some(c) = &d.cost {
                    let _ = write!(
                        summary,
                        ", efficiency {:.3} (E = {}), worker ${:.6} for gain {:.5}",
                        c.efficiency, c.threshold, c.worker_cost_usd, c.worker_gain
                    );
                }
                let removed = applied[i];
                if d.remove && !removed {
                    summary.push_str(" (the run ended before the removal took effect)");
                }
                DecisionMark {
                    time_s: offset + d.now_s,
                    step: d.step,
                    remove: removed,
                    summary,
                }
            })
            .collect();
        Self {
            workers,
            metric,
            metric_points,
            cost: cost_curve(record, prices),
            decisions,
        }
    }
}

/// One panel: its label, its points, its colour, and whether it is drawn as steps.
type Panel<'a> = (&'a str, &'a [(f64, f64)], &'static str, bool);

const WIDTH: f64 = 800.0;
const PANEL: f64 = 160.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const GAP: f64 = 30.0;

/// Which of the decisions (`true`: decided to remove a worker) removed one, given the
/// `removals` the run made: they took effect in the order they were decided, so a removal
/// decided as the run ended, with none after it, took no effect.
fn took_effect(decided: impl Iterator<Item = bool>, removals: usize) -> Vec<bool> {
    let mut removing = 0;
    decided
        .map(|remove| {
            remove && {
                removing += 1;
                removing <= removals
            }
        })
        .collect()
}

/// The scale-in plot of `series` as a self-contained SVG document.
pub fn scale_in_svg(series: &ScaleInSeries) -> String {
    let finite = |v: &&(f64, f64)| v.0.is_finite() && v.1.is_finite();
    let times = series
        .workers
        .iter()
        .chain(&series.metric_points)
        .chain(&series.cost)
        .filter(finite)
        .map(|p| p.0)
        .chain(series.decisions.iter().map(|d| d.time_s));
    let (t0, t1) = bounds(times);
    let height = TOP + 3.0 * PANEL + 2.0 * GAP + 40.0;
    let x = |t: f64| LEFT + (t - t0) / (t1 - t0) * (WIDTH - LEFT - RIGHT);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"18\" font-size=\"14\">Scale-in: workers, {} and cost over time\
         </text>\n",
        escape(&series.metric)
    );
    // (label, points, colour, drawn as steps)
    let panels: [Panel; 3] = [
        ("workers", &series.workers, "#1f77b4", true),
        (&series.metric, &series.metric_points, "#2ca02c", false),
        ("billed cost ($)", &series.cost, "#d62728", false),
    ];
    for (i, (label, points, colour, steps)) in panels.into_iter().enumerate() {
        let top = TOP + i as f64 * (PANEL + GAP);
        let points: Vec<(f64, f64)> = points.iter().filter(finite).copied().collect();
        let (v0, v1) = bounds(points.iter().map(|p| p.1));
        let y = |v: f64| top + PANEL - (v - v0) / (v1 - v0) * PANEL;
        let _ = writeln!(
            out,
            "<g class=\"panel\"><rect x=\"{LEFT}\" y=\"{top}\" width=\"{}\" height=\"{PANEL}\" \
             fill=\"none\" stroke=\"#888\"/>\n<text x=\"8\" y=\"{}\">{}</text>\n\
             <text x=\"8\" y=\"{}\" fill=\"#555\">{}</text>\n\
             <text x=\"8\" y=\"{}\" fill=\"#555\">{}</text>",
            WIDTH - LEFT - RIGHT,
            top + PANEL / 2.0,
            escape(label),
            top + 12.0,
            format_value(v1),
            top + PANEL,
            format_value(v0),
        );
        let mut path = String::new();
        let mut previous: Option<f64> = None;
        for &(t, v) in &points {
            let command = if path.is_empty() { 'M' } else { 'L' };
            if steps && let Some(last) = previous {
                let _ = write!(path, "L{:.1},{:.1} ", x(t), y(last));
            }
            let _ = write!(path, "{command}{:.1},{:.1} ", x(t), y(v));
            previous = Some(v);
        }
        let _ = writeln!(
            out,
            "<path d=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\"/></g>",
            path.trim_end()
        );
    }
    let bottom = TOP + 3.0 * PANEL + 2.0 * GAP;
    for d in &series.decisions {
        let (class, style) = if d.remove {
            ("removal", "stroke=\"#d62728\" stroke-width=\"1.5\"")
        } else {
            ("keep", "stroke=\"#999\" stroke-dasharray=\"4 3\"")
        };
        let _ = writeln!(
            out,
            "<line class=\"decision {class}\" data-step=\"{}\" x1=\"{x:.1}\" y1=\"{TOP}\" \
             x2=\"{x:.1}\" y2=\"{bottom}\" {style}><title>{}</title></line>",
            d.step,
            escape(&d.summary),
            x = x(d.time_s),
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{LEFT}\" y=\"{}\">{}</text><text x=\"{}\" y=\"{}\" \
         text-anchor=\"end\">{}</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time since \
         the run started (s); red: a worker removed, dashed: fleet kept</text>\n</svg>",
        bottom + 16.0,
        format_value(t0),
        WIDTH - RIGHT,
        bottom + 16.0,
        format_value(t1),
        (WIDTH + LEFT) / 2.0,
        bottom + 34.0,
    );
    out
}

/// The range of `values`, widened to a non-empty one.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let Some((lo, hi)) = finite_range(values) else {
        return (0.0, 1.0);
    };
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    (lo, hi)
}

fn format_value(v: f64) -> String {
    if v.abs() >= 100.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removal_decided_as_the_run_ended_took_no_effect() {
        let decided = [false, true, false, true];
        assert_eq!(
            took_effect(decided.into_iter(), 2),
            [false, true, false, true]
        );
        assert_eq!(
            took_effect(decided.into_iter(), 1),
            [false, true, false, false]
        );
        assert_eq!(took_effect(decided.into_iter(), 0), [false; 4]);
    }

    #[test]
    fn scale_in_svg_marks_every_decision_on_three_panels() {
        let series = ScaleInSeries {
            workers: vec![(0.0, 4.0), (5.0, 4.0), (6.0, 3.0), (10.0, 3.0)],
            metric: "rmse".into(),
            metric_points: vec![(1.0, 1.2), (4.0, 1.0), (9.0, 0.98)],
            cost: vec![(0.0, 0.0), (10.0, 0.002)],
            decisions: vec![
                DecisionMark {
                    time_s: 4.5,
                    step: 40,
                    remove: false,
                    summary: "step 40: 4 → 4 workers".into(),
                },
                DecisionMark {
                    time_s: 5.5,
                    step: 55,
                    remove: true,
                    summary: "step 55: 4 → 3 workers, efficiency 0.1 < E".into(),
                },
            ],
        };
        let svg = scale_in_svg(&series);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("class=\"panel\"").count(), 3);
        assert_eq!(svg.matches("class=\"decision removal\"").count(), 1);
        assert_eq!(svg.matches("class=\"decision keep\"").count(), 1);
        assert!(svg.contains("data-step=\"55\""));
        // The tooltip is escaped: "<" of the summary is no tag.
        assert!(svg.contains("efficiency 0.1 &lt; E"));
        assert!(svg.contains(">rmse</text>"));
        // The removal's line sits at its time: 5.5 of 0–10 s across the plot's width.
        let x = LEFT + 0.55 * (WIDTH - LEFT - RIGHT);
        assert!(svg.contains(&format!("x1=\"{x:.1}\"")), "{svg}");
        // Every opened element is closed (well-formed enough for a browser and for XML).
        assert_eq!(svg.matches("<g ").count(), svg.matches("</g>").count());
        assert_eq!(
            svg.matches("<line ").count(),
            svg.matches("</line>").count()
        );
    }
}
