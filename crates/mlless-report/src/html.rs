//! The HTML page of a report: one self-contained file (the figures inlined, no external
//! resource), with the runs side by side, the figures, and each run's summary and
//! FaaS-versus-VM comparison. A small inline script adds the x-axis selector of the small
//! multiples; without it the page shows every panel.

use std::fmt::Write;

use mlless_cost::{Projection, VM_MINIMUM_BILLED_S};
use mlless_job::RunRecord;

use crate::format::{format_seconds, format_usd};
use crate::plots::run_color_hex;
use crate::runs::{Run, RunTable};
use crate::{Figure, ReportOptions};

/// `text` with `&`, `<`, `>`, `"` and `'` replaced by entities, safe in HTML text and quoted
/// attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// This run on FaaS as measured (first; its `cost_usd` is the record's bill, or the model's
/// estimate when the record has none), then the same work on each VM type of `options`, on as
/// many machines as the run had workers and, if that is more than one, on one machine.
pub fn comparison(record: &RunRecord, options: &ReportOptions) -> Vec<Projection> {
    let m = options.measurements(record);
    let p = record.spec.training.workers.max(1);
    let model = m.project_faas(p, &options.prices);
    let measured = Projection {
        platform: record
            .bill
            .as_ref()
            .map_or_else(|| options.prices.name.clone(), |b| b.platform.clone()),
        workers: p,
        steps: record.steps.len() as u64,
        step_ms: if record.steps.is_empty() {
            0.0
        } else {
            m.phases
                .iter()
                .map(|ph| ph.step_ms * ph.steps as f64)
                .sum::<f64>()
                / record.steps.len() as f64
        },
        time_s: record.wall_s,
        cost_usd: record.bill.as_ref().map_or(model.cost_usd, |b| b.total_usd),
        bill: record.bill.clone().or(model.bill),
    };
    let mut rows = vec![measured];
    let mut fleets = vec![p];
    if p > 1 {
        fleets.push(1);
    }
    for vm in &options.vms {
        for &machines in &fleets {
            rows.push(m.project_vm(vm, machines));
        }
    }
    rows
}

/// The report page of `runs`: the table of the runs side by side, the `figures` (inlined as
/// they are) and each run's summary and comparison. Every string from the records is
/// escaped, and their URLs are shown with their credentials redacted.
pub fn html_page(runs: &[Run], table: &RunTable, figures: &[Figure]) -> String {
    let mut out = String::new();
    let title = match runs {
        [run] => format!("mlless run {}", run.record.spec.job_id),
        _ => format!("mlless: {} runs compared", runs.len()),
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{t}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n",
        t = escape(&title)
    );

    out.push_str("<h2>Runs side by side</h2>\n");
    if runs.len() > 1 {
        out.push_str(
            "<p class=\"note\">Only the configuration in which the runs differ is shown; the \
             same table is in <code>runs.csv</code>, the figures in the SVG files beside this \
             page.</p>\n",
        );
    }
    run_table(&mut out, runs, table);

    for figure in figures {
        let _ = writeln!(
            out,
            "<h2>{}</h2>\n<figure id=\"fig-{}\" class=\"{}\">\n{}\n<figcaption>{} \
             (<code>{}</code>)</figcaption>\n</figure>",
            escape(figure.title),
            figure.id,
            if figure.multiples {
                "multiples"
            } else {
                "single"
            },
            strip_xml_declaration(&figure.svg),
            escape(figure.caption),
            escape(figure.file),
        );
    }

    out.push_str("<h2>Each run</h2>\n");
    for (i, run) in runs.iter().enumerate() {
        let _ = writeln!(
            out,
            "<details{}>\n<summary>{} {}</summary>",
            if runs.len() == 1 { " open" } else { "" },
            swatch(i),
            escape(&run.label)
        );
        summary(&mut out, &run.record);
        faas_versus_vms(&mut out, run);
        out.push_str("</details>\n");
    }
    let _ = write!(out, "<script>\n{SCRIPT}</script>\n</body>\n</html>\n");
    out
}

/// The coloured mark of the run at `index`, as in the figures.
fn swatch(index: usize) -> String {
    format!(
        "<span class=\"swatch\" style=\"background:{}\"></span>",
        run_color_hex(index)
    )
}

/// The table of the runs, one column a run.
fn run_table(out: &mut String, runs: &[Run], table: &RunTable) {
    out.push_str("<table class=\"runs\">\n<tr><th></th>");
    for (i, label) in table.runs.iter().enumerate() {
        let job = &runs[i].record.spec.job_id;
        let _ = write!(
            out,
            "<th>{} {}<div class=\"job\">{}</div></th>",
            swatch(i),
            escape(label),
            escape(job)
        );
    }
    out.push_str("</tr>\n");
    let sections = [
        ("configuration", &table.configuration),
        ("results", &table.results),
    ];
    for (section, rows) in sections {
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "<tr class=\"section\"><th colspan=\"{}\">{section}</th></tr>",
            runs.len() + 1
        );
        for row in rows {
            let _ = write!(out, "<tr><th>{}</th>", escape(&row.name));
            for cell in &row.cells {
                let _ = write!(out, "<td>{}</td>", escape(cell));
            }
            out.push_str("</tr>\n");
        }
    }
    out.push_str("</table>\n");
}

/// The summary of one run: what it was, what it did, what it cost.
fn summary(out: &mut String, record: &RunRecord) {
    // Redacted here too: a record written before records were redacted may hold credentials.
    let spec = &record.spec.redacted();
    let (min_p, max_p) = record
        .steps
        .iter()
        .map(|s| s.workers.len())
        .fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
    let workers = if record.steps.is_empty() || min_p == max_p {
        spec.training.workers.to_string()
    } else {
        format!(
            "{} (from {min_p} to {max_p} during the run)",
            spec.training.workers
        )
    };
    let mut rows: Vec<(&str, String)> = vec![
        ("job", spec.job_id.clone()),
        ("model", spec.model.describe()),
        ("data", spec.data_url.as_str().to_owned()),
        ("workers", workers),
        (
            "synchronisation",
            format!(
                "{}, compression {}",
                spec.training.sync, spec.training.compression
            ),
        ),
        (
            "algorithm",
            format!(
                "{}, pattern {}, {} communication rounds",
                spec.training.algorithm,
                spec.training.exchange_pattern().name(),
                record.rounds
            ),
        ),
        (
            "optimizer",
            format!(
                "{}, learning rate {}, seed {}",
                spec.optimizer.kind, spec.lr, spec.training.seed
            ),
        ),
        (
            "channel",
            spec.training
                .channel
                .as_deref()
                .unwrap_or("the run's object store")
                .to_owned(),
        ),
        ("steps", record.steps.len().to_string()),
        ("epochs", format!("{:.2}", record.epochs)),
        ("stop reason", record.stop_reason.clone()),
    ];
    if let Some(loss) = record.final_loss() {
        rows.push(("final training loss", format!("{loss:.4}")));
    }
    for (k, v) in record.metrics.iter() {
        let value = if k == "test_samples" {
            format!("{v}")
        } else {
            format!("{v:.4}")
        };
        rows.push((k.as_str(), value));
    }
    rows.push(("wall time", format!("{} s", format_seconds(record.wall_s))));
    rows.push(("mean step", step_breakdown(record)));
    match &record.bill {
        Some(bill) => rows.push((
            "billed cost",
            format!(
                "{} at {} prices: {} invocations, {} s billed, {:.3} GB-s \
                 (compute {}, requests {}, services {}, object store {}, its requests {}{})",
                format_usd(bill.total_usd),
                bill.platform,
                bill.invocations,
                format_seconds(bill.billed_ms as f64 / 1000.0),
                bill.gb_seconds,
                format_usd(bill.compute_usd),
                format_usd(bill.request_usd),
                format_usd(bill.services_usd),
                format_usd(bill.storage_usd),
                record.billed_requests().1,
                if bill.table_usd > 0.0 {
                    format!(", DynamoDB request units {}", format_usd(bill.table_usd))
                } else {
                    String::new()
                },
            ),
        )),
        None => rows.push(("billed cost", "not recorded".into())),
    }
    rows.push((
        "updates sent",
        format!(
            "{} · replica spread {:.2e}",
            record.traffic(),
            record.replica_spread
        ),
    ));
    if spec.training.scale_in.is_some() {
        let removals: Vec<String> = record
            .scale_in
            .removals
            .iter()
            .map(|r| {
                format!(
                    "worker {} after step {} ({} s, {} left)",
                    r.worker,
                    r.after_step,
                    format_seconds(r.time_s),
                    r.workers_after
                )
            })
            .collect();
        rows.push((
            "scale-in",
            format!(
                "{} decisions; removed: {}",
                record.scale_in.decisions.len(),
                if removals.is_empty() {
                    "none".to_string()
                } else {
                    removals.join("; ")
                }
            ),
        ));
    }
    rows.push(("model location", record.model_url.clone()));
    out.push_str("<table class=\"summary\">\n");
    for (k, v) in &rows {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    out.push_str("</table>\n");
}

/// The FaaS-versus-VM comparison of one run.
fn faas_versus_vms(out: &mut String, run: &Run) {
    let (record, options) = (&run.record, &run.options);
    let m = options.measurements(record);
    out.push_str("<h3>FaaS versus VMs</h3>\n");
    out.push_str(
        "<table class=\"comparison\">\n<tr><th>platform</th><th>workers / machines</th>\
         <th>steps</th><th>step (ms)</th><th>time (s)</th><th>cost (USD)</th></tr>\n",
    );
    for (i, row) in comparison(record, options).iter().enumerate() {
        let name = if i == 0 {
            format!("{} (FaaS, this run)", row.platform)
        } else {
            format!("{} (VM)", row.platform)
        };
        let _ = writeln!(
            out,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>",
            if i == 0 { " class=\"this-run\"" } else { "" },
            escape(&name),
            row.workers,
            row.steps,
            row.step_ms,
            format_seconds(row.time_s),
            escape(&format_usd(row.cost_usd))
        );
    }
    out.push_str("</table>\n");
    let cores = m.cores.map_or_else(
        || "its own CPU".to_string(),
        |c| format!("{c} shared cores"),
    );
    let _ = writeln!(
        out,
        "<p class=\"note\">VMs: LambdaML's analytical model, time = start-up ({:.0} s) + data \
         loading + epochs × (compute + communication per epoch), one worker per machine, the \
         exchange through the same channel as this run; billed per second with a {:.0} s \
         minimum per machine. Compute times are taken back to one uncontended worker (the \
         run's functions had {}).</p>",
        m.vm_startup_s,
        VM_MINIMUM_BILLED_S,
        escape(&cores)
    );
}

pub(crate) const STYLE: &str = "body { font-family: sans-serif; margin: 2em auto; max-width: 1400px; \
padding: 0 1em; color: #222; }\n\
table { border-collapse: collapse; margin: 1em 0; }\n\
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; \
vertical-align: top; }\n\
table.runs td { text-align: right; font-variant-numeric: tabular-nums; }\n\
table.runs tr.section th { background: #f2f2f2; font-weight: normal; font-style: italic; }\n\
table.runs div.job { font-weight: normal; font-size: 0.8em; color: #666; }\n\
table.comparison td:nth-child(n+2) { text-align: right; }\n\
tr.this-run { background: #eef6ee; }\n\
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em; \
border-radius: 2px; }\n\
figure { margin: 1em 0; }\n\
figure svg { max-width: 100%; height: auto; }\n\
figcaption { color: #555; font-size: 0.9em; }\n\
div.axes button { margin: 0 0.3em 0.5em 0; padding: 0.2em 0.7em; border: 1px solid #999; \
background: #fff; border-radius: 3px; cursor: pointer; }\n\
div.axes button.on { background: #333; color: #fff; }\n\
details { margin: 1em 0; }\n\
summary { font-weight: bold; cursor: pointer; }\n\
p.note { color: #555; font-size: 0.9em; }\n";

/// The page's script: records an error on the body (`data-script-error`, for tests and for
/// whoever looks), and gives each figure of small multiples buttons that show one panel large
/// (by the SVG's `viewBox`) or all of them.
const SCRIPT: &str = "window.addEventListener('error', function (e) {\n\
  document.body.setAttribute('data-script-error', String(e.message));\n\
});\n\
var views = [['all', 0, 0, 2], ['wall time', 0, 0, 1], ['steps', 1, 0, 1],\n\
  ['epochs', 0, 1, 1], ['billed cost', 1, 1, 1]];\n\
document.querySelectorAll('figure.multiples').forEach(function (figure) {\n\
  var svg = figure.querySelector('svg');\n\
  var w = Number(svg.getAttribute('width')), h = Number(svg.getAttribute('height'));\n\
  var nav = document.createElement('div');\n\
  nav.className = 'axes';\n\
  views.forEach(function (view) {\n\
    var button = document.createElement('button');\n\
    button.textContent = view[0];\n\
    button.addEventListener('click', function () {\n\
      var s = view[3] / 2;\n\
      svg.setAttribute('viewBox', [view[1] * w / 2, view[2] * h / 2, w * s, h * s].join(' '));\n\
      nav.querySelectorAll('button').forEach(function (b) {\n\
        b.classList.toggle('on', b === button);\n\
      });\n\
    });\n\
    nav.appendChild(button);\n\
  });\n\
  nav.firstChild.classList.add('on');\n\
  figure.insertBefore(nav, svg);\n\
});\n\
document.body.setAttribute('data-ready', 'yes');\n";

/// "10.1 ms = read 0.2 + compute 1.5 + exchange 8.4 ms", means over every worker and step.
fn step_breakdown(record: &RunRecord) -> String {
    let ws: Vec<_> = record.steps.iter().flat_map(|s| &s.workers).collect();
    if ws.is_empty() {
        return "no steps".into();
    }
    let n = ws.len() as f64;
    let mean =
        |f: fn(&mlless_job::record::WorkerStep) -> f64| ws.iter().map(|w| f(w)).sum::<f64>() / n;
    format!(
        "{:.2} ms = read {:.2} + compute {:.2} + exchange {:.2} ms",
        mean(|w| w.step_ms),
        mean(|w| w.read_ms),
        mean(|w| w.compute_ms),
        mean(|w| w.exchange_ms)
    )
}

/// An SVG document without a leading `<?xml …?>` declaration, which may not appear inside HTML.
fn strip_xml_declaration(svg: &str) -> &str {
    let trimmed = svg.trim_start();
    if trimmed.starts_with("<?xml")
        && let Some(end) = trimmed.find("?>")
    {
        return trimmed[end + 2..].trim_start();
    }
    trimmed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
        assert_eq!(
            strip_xml_declaration("<?xml version=\"1.0\"?>\n<svg/>"),
            "<svg/>"
        );
        assert_eq!(strip_xml_declaration("<svg/>"), "<svg/>");
    }
}
