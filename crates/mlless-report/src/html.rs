//! The HTML page of a report: one self-contained file, plots inlined, no script.

use std::fmt::Write;

use mlless_cost::{Prediction, VM_MINIMUM_BILLED_S};
use mlless_job::RunRecord;

use crate::ReportOptions;
use crate::plots::format_usd;

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
pub fn comparison(record: &RunRecord, options: &ReportOptions) -> Vec<Prediction> {
    let m = options.measurements(record);
    let p = record.spec.training.workers.max(1);
    let model = m.predict_faas(p, &options.prices);
    let measured = Prediction {
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
            rows.push(m.predict_vm(vm, machines));
        }
    }
    rows
}

/// The report page of `record`: summary, the plots (`(id, SVG document)`, inlined as they are)
/// and the FaaS-versus-VM comparison. Every string from the record is escaped, and its URLs are
/// shown with their credentials redacted.
pub fn html_report(record: &RunRecord, options: &ReportOptions, plots: &[(&str, &str)]) -> String {
    // Redacted here too: a record written before records were redacted may hold credentials.
    let spec = &record.spec.redacted();
    let mut out = String::new();
    let title = format!("mlless run {}", spec.job_id);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );

    // Summary.
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
        ("synchronisation", sync_of(record)),
        (
            "optimizer",
            format!(
                "{:?}, learning rate {}, seed {}",
                spec.optimizer.kind, spec.lr, spec.training.seed
            ),
        ),
        (
            "channel",
            spec.training
                .channel
                .as_deref()
                .unwrap_or("object store")
                .to_owned(),
        ),
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
                spec.training.pattern.name(),
                record.rounds
            ),
        ),
        (
            "re-invocations at the lifetime limit",
            record
                .invocations
                .iter()
                .filter(|r| r.name.contains('#'))
                .count()
                .to_string(),
        ),
        ("steps", record.steps.len().to_string()),
        ("epochs", format!("{:.2}", record.epochs)),
        ("stop reason", record.stop_reason.clone()),
    ];
    if let Some(loss) = record.final_loss() {
        rows.push(("final training loss", format!("{loss:.5}")));
    }
    for (k, v) in record.metrics.iter() {
        let value = if k == "test_samples" {
            format!("{v}")
        } else {
            format!("{v:.5}")
        };
        rows.push((k.as_str(), value));
    }
    rows.push(("wall time", format!("{:.2} s", record.wall_s)));
    rows.push(("mean step", step_breakdown(record)));
    match &record.bill {
        Some(bill) => {
            rows.push((
                "billed cost",
                format!(
                    "{} at {} prices: {} invocations, {:.1} s billed, {:.3} GB-s \
                     (compute {}, requests {}, services {}, object store {})",
                    format_usd(bill.total_usd),
                    bill.platform,
                    bill.invocations,
                    bill.billed_ms as f64 / 1000.0,
                    bill.gb_seconds,
                    format_usd(bill.compute_usd),
                    format_usd(bill.request_usd),
                    format_usd(bill.services_usd),
                    format_usd(bill.storage_usd),
                ),
            ));
        }
        None => rows.push(("billed cost", "not recorded".into())),
    }
    let traffic = |f: &dyn Fn(&mlless_job::record::WorkerStep) -> u64| -> u64 {
        record.steps.iter().flat_map(|s| &s.workers).map(f).sum()
    };
    rows.push((
        "updates sent",
        format!(
            "{:.2} MB in {} messages ({} entries); replica spread {:.2e}",
            traffic(&|w| w.bytes_sent) as f64 / 1e6,
            traffic(&|w| u64::from(w.messages_sent)),
            traffic(&|w| w.entries_sent),
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
                    "worker {} after step {} ({:.1} s, {} left)",
                    r.worker, r.after_step, r.time_s, r.workers_after
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
    out.push_str("<h2>Summary</h2>\n<table class=\"summary\">\n");
    for (k, v) in &rows {
        let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(v));
    }
    out.push_str("</table>\n");

    // Plots.
    out.push_str("<h2>Plots</h2>\n");
    for (id, svg) in plots {
        let _ = writeln!(
            out,
            "<figure id=\"plot-{id}\">\n{}\n</figure>",
            strip_xml_declaration(svg)
        );
    }

    // Comparison.
    let m = options.measurements(record);
    out.push_str("<h2>FaaS versus VMs</h2>\n");
    out.push_str(
        "<table class=\"comparison\">\n<tr><th>platform</th><th>workers / machines</th>\
         <th>steps</th><th>step (ms)</th><th>time (s)</th><th>cost</th></tr>\n",
    );
    for (i, row) in comparison(record, options).iter().enumerate() {
        let name = if i == 0 {
            format!("{} (FaaS, this run)", row.platform)
        } else {
            format!("{} (VM)", row.platform)
        };
        let _ = writeln!(
            out,
            "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td></tr>",
            if i == 0 { " class=\"this-run\"" } else { "" },
            escape(&name),
            row.workers,
            row.steps,
            row.step_ms,
            row.time_s,
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
    out.push_str("</body>\n</html>\n");
    out
}

pub(crate) const STYLE: &str = "body { font-family: sans-serif; margin: 2em auto; max-width: 900px; \
color: #222; }\n\
table { border-collapse: collapse; margin: 1em 0; }\n\
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; \
vertical-align: top; }\n\
table.comparison td:nth-child(n+2) { text-align: right; }\n\
tr.this-run { background: #eef6ee; }\n\
figure { margin: 1em 0; }\n\
figure svg { max-width: 100%; height: auto; }\n\
p.note { color: #555; font-size: 0.9em; }\n";

/// The synchronisation model of the run: the spec's `sync` field where the record has one,
/// BSP otherwise (the only model of records without it).
fn sync_of(record: &RunRecord) -> String {
    // The field is read through serde so that records with and without it are both shown.
    let value = serde_json::to_value(&record.spec)
        .ok()
        .and_then(|v| v.get("sync").cloned());
    match value {
        None | Some(serde_json::Value::Null) => "bsp".to_string(),
        Some(serde_json::Value::String(s)) => s,
        Some(other) => other.to_string(),
    }
}

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
