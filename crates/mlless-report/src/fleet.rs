//! The fleet over time: every invocation of each run as a bar from its start to its end, one
//! row a role, coloured by role, with its outcome, hand-offs at the lifetime limit,
//! replacements after a failure and removals by scale-in marked (the map tasks of a data set's
//! preparation in a panel of their own, on the preparation's clock); and the workers' mean step
//! time stacked as read, compute and exchange.

use mlless_io_types::{InvocationReport, Outcome};
use mlless_job::SUPERVISOR_ROLE;
use plotters::prelude::*;

use crate::ReportError;
use crate::format::format_tick;
use crate::plots::{Drawn, PANEL, chart_builder, padded_range, svg};
use crate::runs::Run;

const SUPERVISOR_COLOR: RGBColor = RGBColor(148, 103, 189);
const WORKER_COLOR: RGBColor = RGBColor(31, 119, 180);
const MAP_COLOR: RGBColor = RGBColor(140, 86, 75);
const REPLACEMENT_COLOR: RGBColor = RGBColor(255, 127, 14);
const FAILED_COLOR: RGBColor = RGBColor(214, 39, 40);
const READ_COLOR: RGBColor = RGBColor(44, 160, 44);
const COMPUTE_COLOR: RGBColor = RGBColor(31, 119, 180);
const EXCHANGE_COLOR: RGBColor = RGBColor(255, 127, 14);

/// Height of one row of the timeline, pixels.
const ROW_PX: u32 = 22;
/// Room of a timeline panel besides its rows: caption, x axis, legend.
const TIMELINE_MARGIN_PX: u32 = 120;
/// At most this many bars in a panel of the step-time figure (steps are grouped beyond).
const MAX_BARS: usize = 150;

/// What an invocation was, by its name: `{role}`, `{role}#{generation}` after a hand-off at the
/// lifetime limit, `{role}~{recovery}` for a replacement after a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationKind {
    /// The role: `supervisor`, `worker-3`, or the name of a map task.
    pub role: String,
    /// Generation: how many hand-offs at the lifetime limit came before it.
    pub generation: u32,
    /// How many replacements of the role after a failure came before it, itself included.
    pub recovery: u32,
}

impl InvocationKind {
    /// The kind of the invocation named `name`.
    pub fn of(name: &str) -> Self {
        let (rest, recovery) = match name.rsplit_once('~') {
            Some((r, n)) if n.parse::<u32>().is_ok() => (r, n.parse().unwrap_or(0)),
            _ => (name, 0),
        };
        let (role, generation) = match rest.rsplit_once('#') {
            Some((r, n)) if n.parse::<u32>().is_ok() => (r, n.parse().unwrap_or(0)),
            _ => (rest, 0),
        };
        Self {
            role: role.to_string(),
            generation,
            recovery,
        }
    }

    /// The colour of its role: the supervisor, a worker, or another function (a map task).
    fn color(&self) -> RGBColor {
        if self.role == SUPERVISOR_ROLE {
            SUPERVISOR_COLOR
        } else if self.role.starts_with("worker") {
            WORKER_COLOR
        } else {
            MAP_COLOR
        }
    }
}

/// The roles of `invocations` in the order of the timeline's rows, top to bottom: the
/// supervisor, the workers by number, then any other function.
fn rows(invocations: &[InvocationReport]) -> Vec<String> {
    let mut roles: Vec<String> = invocations
        .iter()
        .map(|i| InvocationKind::of(&i.name).role)
        .collect();
    let key = |r: &String| {
        if r == SUPERVISOR_ROLE {
            (0, 0, String::new())
        } else if let Some(n) = r
            .strip_prefix("worker-")
            .and_then(|n| n.parse::<u32>().ok())
        {
            (1, n, String::new())
        } else {
            (2, 0, r.clone())
        }
    };
    roles.sort_by_key(key);
    roles.dedup();
    roles
}

/// One panel of the timeline: a run's invocations, or the map tasks of a data set's
/// preparation.
struct Panel<'a> {
    title: String,
    x_desc: &'static str,
    /// The panel's time 0, Unix milliseconds.
    t0_ms: u64,
    /// The end of its last bar, seconds after `t0_ms`.
    end_s: f64,
    invocations: &'a [InvocationReport],
    /// Scale-in removals: seconds after `t0_ms`, and the worker's role.
    removals: Vec<(f64, String)>,
}

/// The panels of `runs`: each run's, after the preparation of its data set when the run
/// carries its record with map tasks (a data set shared by several runs once).
fn panels(runs: &[Run]) -> Vec<Panel<'_>> {
    let end_of = |t0: u64, invocations: &[InvocationReport]| {
        invocations
            .iter()
            .map(|i| (i.started_at_unix_ms + i.duration_ms).saturating_sub(t0) as f64 / 1000.0)
            .fold(0.0, f64::max)
    };
    let mut panels = Vec::new();
    let mut prepared = Vec::new();
    for run in runs {
        let record = &run.record;
        if let Some(preparation) = &run.preparation
            && !preparation.invocations.is_empty()
            && !prepared.contains(&&record.spec.data_url)
        {
            prepared.push(&record.spec.data_url);
            let t0 = preparation.started_at_unix_ms;
            panels.push(Panel {
                title: format!("Map tasks of preparing {}", record.spec.data_url),
                x_desc: "time since the preparation started (s)",
                t0_ms: t0,
                end_s: end_of(t0, &preparation.invocations).max(preparation.wall_s),
                invocations: &preparation.invocations,
                removals: Vec::new(),
            });
        }
        let t0 = record.started_at_unix_ms;
        let offset = record.time_offset_s();
        panels.push(Panel {
            title: format!("Invocations of {}", run.label),
            x_desc: "time since the run started (s)",
            t0_ms: t0,
            end_s: end_of(t0, &record.invocations).max(record.wall_s),
            invocations: &record.invocations,
            removals: record
                .scale_in
                .removals
                .iter()
                .map(|r| (offset + r.time_s, mlless_job::worker_role(r.worker)))
                .collect(),
        });
    }
    panels
}

/// The timeline of every run's invocations, one panel a run on a shared time axis (seconds
/// since each run started), with a panel for the map tasks of each data set's preparation.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn timeline_svg(runs: &[Run]) -> Result<String, ReportError> {
    let panels = panels(runs);
    let end_s = panels.iter().map(|p| p.end_s).fold(0.0, f64::max);
    let heights: Vec<u32> = panels
        .iter()
        .map(|p| TIMELINE_MARGIN_PX + ROW_PX * rows(p.invocations).len().max(1) as u32)
        .collect();
    let total: u32 = heights.iter().sum::<u32>().max(1);
    svg("timeline", (PANEL.0 * 2, total), |root| {
        let mut area = root.clone();
        for (panel, &height) in panels.iter().zip(&heights) {
            let (top, rest) = area.split_vertically(height);
            timeline_panel(&top, panel, end_s)?;
            area = rest;
        }
        Ok(())
    })
}

/// One panel of the timeline.
fn timeline_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    panel: &Panel<'_>,
    end_s: f64,
) -> Drawn {
    let roles = rows(panel.invocations);
    let n = roles.len().max(1);
    // Room on the right for the legend.
    let x = padded_range([0.0, end_s * 1.35].into_iter(), true);
    let span = x.end - x.start;
    let y = -0.5..n as f64 - 0.5;
    let mut chart = chart_builder(area, &panel.title, 110).build_cartesian_2d(x, y)?;
    // Row r is drawn at y = n − 1 − r, so that the supervisor is on top.
    let row_y = |role: &str| {
        roles
            .iter()
            .position(|r| r == role)
            .map_or(0.0, |r| (n - 1 - r) as f64)
    };
    let label = |v: &f64| {
        let r = v.round();
        if (v - r).abs() > 1e-6 || r < 0.0 || r as usize >= n {
            return String::new();
        }
        roles.get(n - 1 - r as usize).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .x_desc(panel.x_desc)
        .x_label_formatter(&|v| format_tick(*v, span))
        .y_labels(n + 1)
        .y_label_formatter(&label)
        .disable_y_mesh()
        .max_light_lines(2)
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;

    let t0 = panel.t0_ms;
    let seconds = |unix_ms: u64| unix_ms.saturating_sub(t0) as f64 / 1000.0;
    let mut handoffs = Vec::new();
    let mut replacements = Vec::new();
    let mut failures = Vec::new();
    for invocation in panel.invocations {
        let kind = InvocationKind::of(&invocation.name);
        let y = row_y(&kind.role);
        let start = seconds(invocation.started_at_unix_ms);
        let end = start + invocation.duration_ms as f64 / 1000.0;
        let color = if kind.recovery > 0 {
            REPLACEMENT_COLOR
        } else {
            kind.color()
        };
        chart.draw_series([Rectangle::new(
            [(start, y - 0.32), (end, y + 0.32)],
            color.mix(0.75).filled(),
        )])?;
        match &invocation.outcome {
            Outcome::Succeeded => {}
            Outcome::Killed => chart
                .draw_series([Rectangle::new(
                    [(start, y - 0.32), (end, y + 0.32)],
                    BLACK.stroke_width(1),
                )])
                .map(|_| ())?,
            Outcome::Failed { .. } | Outcome::MemoryExceeded { .. } | Outcome::TimedOut { .. } => {
                failures.push((end, y))
            }
        }
        if kind.generation > 0 && kind.recovery == 0 {
            handoffs.push((start, y));
        }
        if kind.recovery > 0 {
            replacements.push((start, y));
        }
    }
    let removals: Vec<(f64, f64)> = panel
        .removals
        .iter()
        .map(|(time_s, role)| (*time_s, row_y(role)))
        .collect();

    // The legend: one entry a kind of bar and mark the panel has.
    let bar = |color: RGBColor| {
        move |(x, y): (i32, i32)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], color.filled())
    };
    let kinds: Vec<InvocationKind> = panel
        .invocations
        .iter()
        .map(|i| InvocationKind::of(&i.name))
        .collect();
    for (name, color, present) in [
        (
            "supervisor",
            SUPERVISOR_COLOR,
            kinds.iter().any(|k| k.color() == SUPERVISOR_COLOR),
        ),
        (
            "worker",
            WORKER_COLOR,
            kinds.iter().any(|k| k.color() == WORKER_COLOR),
        ),
        (
            "replacement after a failure",
            REPLACEMENT_COLOR,
            kinds.iter().any(|k| k.recovery > 0),
        ),
        (
            "other function (map task)",
            MAP_COLOR,
            kinds.iter().any(|k| k.color() == MAP_COLOR),
        ),
    ] {
        if !present {
            continue;
        }
        chart
            .draw_series(std::iter::empty::<Rectangle<(f64, f64)>>())?
            .label(name)
            .legend(bar(color));
    }
    if !handoffs.is_empty() {
        chart
            .draw_series(
                handoffs
                    .iter()
                    .map(|&p| TriangleMarker::new(p, 7, BLACK.filled())),
            )?
            .label("hand-off at the lifetime limit")
            .legend(|(x, y)| TriangleMarker::new((x + 9, y), 6, BLACK.filled()));
    }
    if !failures.is_empty() {
        chart
            .draw_series(
                failures
                    .iter()
                    .map(|&p| Circle::new(p, 6, FAILED_COLOR.filled())),
            )?
            .label("failed (crash, memory, lifetime cap)")
            .legend(|(x, y)| Circle::new((x + 9, y), 5, FAILED_COLOR.filled()));
    }
    if !removals.is_empty() {
        chart
            .draw_series(
                removals
                    .iter()
                    .map(|&p| Cross::new(p, 7, BLACK.stroke_width(3))),
            )?
            .label("removed by scale-in")
            .legend(|(x, y)| Cross::new((x + 9, y), 5, BLACK.stroke_width(2)));
    }
    chart.draw_series(
        replacements
            .iter()
            .map(|&p| TriangleMarker::new(p, 7, REPLACEMENT_COLOR.filled())),
    )?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 12))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

/// The workers' mean time of each step of every run, stacked as read, compute and exchange,
/// one panel a run (steps grouped into at most [`MAX_BARS`] bars) on one y axis, cut at 1.3 ×
/// the 98th percentile of the bars.
///
/// # Errors
///
/// [`ReportError::Plot`] if plotters fails.
pub fn step_time_svg(runs: &[Run]) -> Result<String, ReportError> {
    let height = PANEL.1 - 100;
    let total = (height * runs.len() as u32).max(1);
    let bars: Vec<Vec<Bar>> = runs.iter().map(|r| step_bars(&r.record.steps)).collect();
    // One y axis for every run, up to the 98th percentile of the bars (a rare slow step would
    // flatten every other; taller bars are cut at the top), with room above for the legend.
    let mut totals: Vec<f64> = bars
        .iter()
        .flatten()
        .map(|b| b.2.iter().sum::<f64>())
        .filter(|t| t.is_finite())
        .collect();
    totals.sort_by(f64::total_cmp);
    let top_ms = totals
        .get((totals.len() as f64 * 0.98) as usize)
        .or(totals.last())
        .copied()
        .unwrap_or(1.0)
        * 1.3;
    svg("step-time", (PANEL.0 * 2, total), |root| {
        let areas = root.split_evenly((runs.len().max(1), 1));
        for ((run, bars), area) in runs.iter().zip(&bars).zip(&areas) {
            step_time_panel(area, run, bars, top_ms)?;
        }
        Ok(())
    })
}

/// A bar of the step-time figure: its first step, its last step + 1, and the workers' mean
/// read, compute and exchange times over its steps, ms.
type Bar = (f64, f64, [f64; 3]);

/// The bars of `steps`: each step, or groups of steps when there are more than [`MAX_BARS`].
fn step_bars(steps: &[mlless_job::record::StepRecord]) -> Vec<Bar> {
    let group = steps.len().div_ceil(MAX_BARS).max(1);
    steps
        .chunks(group)
        .filter_map(|chunk| {
            let first = chunk.first()?;
            let last = chunk.last()?;
            let mut sums = [0.0; 3];
            let mut n = 0.0;
            for s in chunk {
                for w in &s.workers {
                    sums[0] += w.read_ms;
                    sums[1] += w.compute_ms;
                    sums[2] += w.exchange_ms;
                    n += 1.0;
                }
            }
            (n > 0.0).then(|| {
                (
                    first.step as f64,
                    last.step as f64 + 1.0,
                    sums.map(|s| s / n),
                )
            })
        })
        .collect()
}

/// One run's panel of the step-time figure, its y axis up to `top_ms`.
fn step_time_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    run: &Run,
    bars: &[Bar],
    top_ms: f64,
) -> Drawn {
    let group = run.record.steps.len().div_ceil(MAX_BARS).max(1);
    let x = padded_range(bars.iter().flat_map(|b| [b.0, b.1]), true);
    let y = padded_range([0.0, top_ms].into_iter(), true);
    let (x_span, y_span) = (x.end - x.start, y.end - y.start);
    let caption = if group > 1 {
        format!("Step time of {} (means of {group} steps)", run.label)
    } else {
        format!("Step time of {}", run.label)
    };
    let mut chart = chart_builder(area, &caption, 72).build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("mean time per worker (ms)")
        .x_label_formatter(&|v| format_tick(*v, x_span))
        .y_label_formatter(&|v| format_tick(*v, y_span))
        .max_light_lines(2)
        .light_line_style(RGBColor(238, 238, 238))
        .draw()?;
    let parts = [
        ("read (not hidden by prefetching)", READ_COLOR),
        ("compute", COMPUTE_COLOR),
        ("exchange", EXCHANGE_COLOR),
    ];
    for (k, (name, color)) in parts.into_iter().enumerate() {
        chart
            .draw_series(bars.iter().map(|&(a, b, ms)| {
                let below = ms[..k].iter().sum::<f64>().min(top_ms);
                let above = (below + ms[k]).min(top_ms);
                Rectangle::new([(a, below), (b, above)], color.mix(0.85).filled())
            }))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 12))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invocation_names_say_hand_offs_and_replacements() {
        let kind = InvocationKind::of("worker-2#3~1");
        assert_eq!(
            (kind.role.as_str(), kind.generation, kind.recovery),
            ("worker-2", 3, 1)
        );
        assert_eq!(InvocationKind::of("supervisor").generation, 0);
        assert_eq!(InvocationKind::of("range-map-4").role, "range-map-4");
        assert_eq!(InvocationKind::of("range-map-4").color(), MAP_COLOR);
        assert_eq!(InvocationKind::of("worker-1~2").color(), WORKER_COLOR);
    }
}
