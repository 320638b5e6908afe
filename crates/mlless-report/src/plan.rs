//! The figure of a plan (`mlless plan --out DIR`): every candidate configuration on a
//! time-vs-cost plane, the chosen one ringed and labelled, the deadline (a vertical line) or
//! the budget (a horizontal one) dashed, each point's configuration and figures as its tooltip.
//! Hand-written SVG, like the scale-in page's.

use std::fmt::Write;

use mlless_cost::plan::{Candidate, Goal};

use crate::escape;
use crate::format::finite_range;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;

/// Distinct colours of the channels, in the order they first appear.
const COLOURS: [&str; 5] = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"];

/// `[low, high]` of `values`, padded by a tenth on each side (a point alone gets a
/// range around it).
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let Some((lo, hi)) = finite_range(values) else {
        return (0.0, 1.0);
    };
    let pad = if hi > lo {
        (hi - lo) / 10.0
    } else {
        lo.abs().max(1e-9) / 10.0
    };
    ((lo - pad).max(0.0), hi + pad)
}

/// The plane of `candidates` (best first: the first is the chosen one) under `goal`, as SVG.
pub fn plan_svg(candidates: &[Candidate], goal: Goal) -> String {
    // The deadline or budget is drawn where it falls; one far beyond the candidates (more than
    // twice the largest) is named at the plot's edge instead of squeezing them into a corner.
    let largest = |f: fn(&Candidate) -> f64| candidates.iter().map(f).fold(0.0, f64::max);
    let (deadline, budget) = match goal {
        Goal::Deadline(s) => (Some(s), None),
        Goal::Budget(usd) => (None, Some(usd)),
    };
    let near = |v: Option<f64>, max: f64| v.filter(|&v| v <= 2.0 * max);
    let (x0, x1) = bounds(
        candidates
            .iter()
            .map(|c| c.time_s)
            .chain(near(deadline, largest(|c| c.time_s))),
    );
    let (y0, y1) = bounds(
        candidates
            .iter()
            .map(|c| c.cost_usd)
            .chain(near(budget, largest(|c| c.cost_usd))),
    );
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |v: f64| LEFT + (v - x0) / (x1 - x0) * pw;
    let y = |v: f64| TOP + ph - (v - y0) / (y1 - y0) * ph;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        svg,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="14">Candidates to the target: predicted time and cost (chosen ringed)</text>"#,
        WIDTH / 2.0
    );
    let _ = write!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##
    );
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        let (tx, ty) = (x0 + f * (x1 - x0), y0 + f * (y1 - y0));
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#444">{tx:.2}</text><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#444">{ty:.6}</text>"##,
            x(tx),
            TOP + ph + 18.0,
            LEFT - 6.0,
            y(ty) + 4.0
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time to the target, s</text><text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">cost to the target, USD</text>"#,
        LEFT + pw / 2.0,
        HEIGHT - 16.0,
        TOP + ph / 2.0
    );
    match goal {
        Goal::Deadline(s) if s > x1 => {
            let _ = write!(
                svg,
                r##"<text class="goal" x="{:.1}" y="{:.1}" text-anchor="end" fill="#d62728">deadline {s} s →</text>"##,
                LEFT + pw - 4.0,
                TOP + 14.0
            );
        }
        Goal::Budget(usd) if usd > y1 => {
            let _ = write!(
                svg,
                r##"<text class="goal" x="{:.1}" y="{:.1}" fill="#d62728">budget ${usd} ↑</text>"##,
                LEFT + 4.0,
                TOP + 14.0
            );
        }
        Goal::Deadline(s) => {
            let _ = write!(
                svg,
                r##"<line class="goal" x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#d62728" stroke-dasharray="6 4"/><text x="{2:.1}" y="{3:.1}" fill="#d62728">deadline {s} s</text>"##,
                x(s),
                TOP + ph,
                x(s) + 4.0,
                TOP + 14.0
            );
        }
        Goal::Budget(usd) => {
            let _ = write!(
                svg,
                r##"<line class="goal" x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#d62728" stroke-dasharray="6 4"/><text x="{2:.1}" y="{3:.1}" fill="#d62728">budget ${usd}</text>"##,
                y(usd),
                LEFT + pw,
                LEFT + 4.0,
                y(usd) - 4.0
            );
        }
    }
    let mut channels: Vec<&str> = Vec::new();
    for (i, c) in candidates.iter().enumerate().rev() {
        let k = match channels.iter().position(|ch| *ch == c.channel) {
            Some(k) => k,
            None => {
                channels.push(&c.channel);
                channels.len() - 1
            }
        };
        let colour = COLOURS[k % COLOURS.len()];
        let tip = escape(&format!(
            "{}: {} steps, {:.2} s, ${:.6}",
            c.label(),
            c.steps,
            c.time_s,
            c.cost_usd
        ));
        let (cx, cy) = (x(c.time_s), y(c.cost_usd));
        let class = if i == 0 {
            "candidate chosen"
        } else {
            "candidate"
        };
        let _ = write!(
            svg,
            r#"<circle class="{class}" cx="{cx:.1}" cy="{cy:.1}" r="4" fill="{colour}" fill-opacity="0.7"><title>{tip}</title></circle>"#
        );
        if i == 0 {
            // The label reads towards the middle of the plot.
            let (tx, anchor) = if cx > LEFT + pw / 2.0 {
                (cx - 12.0, "end")
            } else {
                (cx + 12.0, "start")
            };
            let ty = if cy < TOP + 24.0 {
                cy + 22.0
            } else {
                cy - 10.0
            };
            let _ = write!(
                svg,
                r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="9" fill="none" stroke="#d62728" stroke-width="2"/><text x="{tx:.1}" y="{ty:.1}" text-anchor="{anchor}" fill="#d62728">chosen: {}</text>"##,
                escape(&c.label())
            );
        }
    }
    for (k, channel) in channels.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LEFT + pw + 16.0,
            TOP + 16.0 + 16.0 * k as f64,
            COLOURS[k % COLOURS.len()],
            LEFT + pw + 26.0,
            TOP + 20.0 + 16.0 * k as f64,
            escape(channel)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(workers: u32, channel: &str, time_s: f64, cost_usd: f64) -> Candidate {
        Candidate {
            workers,
            memory_mb: 256,
            channel: channel.into(),
            emulate: "s3".into(),
            pattern: "broadcast".into(),
            sync: "bsp".into(),
            steps: 100,
            time_s,
            cost_usd,
            range: ((time_s, cost_usd), None),
        }
    }

    #[test]
    fn every_candidate_is_a_point_and_the_chosen_one_is_ringed() {
        let candidates = [
            candidate(1, "store", 5.0, 0.001),
            candidate(4, "store", 3.0, 0.003),
            candidate(2, "redis://<h>", 4.0, 0.002),
        ];
        for goal in [Goal::Deadline(6.0), Goal::Budget(0.0025)] {
            let svg = plan_svg(&candidates, goal);
            let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
            let points: Vec<_> = doc
                .descendants()
                .filter(|n| {
                    n.attribute("class")
                        .is_some_and(|c| c.starts_with("candidate"))
                })
                .collect();
            assert_eq!(points.len(), 3);
            let chosen: Vec<_> = points
                .iter()
                .filter(|n| n.attribute("class") == Some("candidate chosen"))
                .collect();
            assert_eq!(chosen.len(), 1);
            let tip = chosen[0].first_element_child().and_then(|t| t.text());
            assert!(tip.is_some_and(|t| t.starts_with("P = 1,")), "{tip:?}");
            assert!(svg.contains("redis://&lt;h&gt;"), "the label is escaped");
            assert_eq!(
                doc.descendants()
                    .filter(|n| n.attribute("class") == Some("goal"))
                    .count(),
                1
            );
        }
        // A deadline among the points is a line; one far beyond them is named at the edge,
        // and the points keep the plot.
        let svg = plan_svg(&candidates, Goal::Deadline(4.5));
        assert!(svg.contains("<line class=\"goal\"") && svg.contains("deadline 4.5 s<"));
        let svg = plan_svg(&candidates, Goal::Deadline(600.0));
        assert!(!svg.contains("<line class=\"goal\"") && svg.contains("deadline 600 s →"));
    }
}
