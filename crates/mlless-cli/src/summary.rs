//! The summary of a run, printed at its end and by `mlless report`, and the run record as a
//! local JSON file.

use std::path::Path;

use anyhow::Context;
use mlless_job::RunRecord;

/// Reads a run record from a local JSON file.
pub fn read_record(path: &Path) -> anyhow::Result<RunRecord> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a run record", path.display()))
}

/// Writes a run record as pretty JSON to a local file.
pub fn write_record(path: &Path, record: &RunRecord) -> anyhow::Result<()> {
    crate::generate::write_with(path, |w| {
        serde_json::to_writer_pretty(w, record).map_err(std::io::Error::other)
    })
}

/// Prints the summary of a run.
pub fn print(record: &RunRecord) {
    print!("{}", render(record));
}

/// The summary of a run as text.
pub fn render(record: &RunRecord) -> String {
    use std::fmt::Write;
    // Redacted here too: a record written before records were redacted may hold credentials.
    let spec = &record.spec.redacted();
    let mut out = String::new();
    let mean = |f: &dyn Fn(&mlless_job::record::WorkerStep) -> f64| {
        let (sum, n) = record
            .steps
            .iter()
            .flat_map(|s| &s.workers)
            .fold((0.0, 0usize), |(sum, n), w| (sum + f(w), n + 1));
        if n == 0 { 0.0 } else { sum / n as f64 }
    };
    let _ = writeln!(
        out,
        "run {}  ({} on {})",
        spec.job_id,
        spec.model.name(),
        spec.data_url
    );
    let _ = writeln!(
        out,
        "  workers {} · optimizer {:?} · lr {} · seed {} · sync {} · compress {}",
        spec.training.workers,
        spec.optimizer.kind,
        spec.lr,
        spec.training.seed,
        spec.training.sync,
        spec.training.compression
    );
    let handoffs = record
        .invocations
        .iter()
        .filter(|r| r.name.contains('#'))
        .count();
    let channel = spec
        .training
        .channel
        .as_deref()
        .unwrap_or("the run's object store");
    let _ = writeln!(out, "  functions on {} · channel {channel}", spec.platform);
    let _ = writeln!(
        out,
        "  algorithm {} · pattern {} · {} communication rounds · {handoffs} re-invocations at \
         the lifetime limit",
        spec.training.algorithm,
        spec.training.pattern.name(),
        record.rounds
    );
    let _ = writeln!(
        out,
        "  steps {} · epochs {:.2} · wall time {:.1} s · stopped: {}",
        record.steps.len(),
        record.epochs,
        record.wall_s,
        record.stop_reason
    );
    if let Some(loss) = record.final_loss() {
        let _ = writeln!(out, "  final training loss {loss:.5}");
    }
    let _ = writeln!(
        out,
        "  mean step {:.2} ms = read {:.2} + compute {:.2} + exchange {:.2} ms",
        mean(&|w| w.step_ms),
        mean(&|w| w.read_ms),
        mean(&|w| w.compute_ms),
        mean(&|w| w.exchange_ms)
    );
    let total = |f: &dyn Fn(&mlless_job::record::WorkerStep) -> u64| -> u64 {
        record.steps.iter().flat_map(|s| &s.workers).map(f).sum()
    };
    let _ = writeln!(
        out,
        "  sent {:.2} MB in {} messages ({} entries) · received {:.2} MB · replica spread {:.2e}",
        total(&|w| w.bytes_sent) as f64 / 1e6,
        total(&|w| u64::from(w.messages_sent)),
        total(&|w| w.entries_sent),
        total(&|w| w.bytes_received) as f64 / 1e6,
        record.replica_spread
    );
    let metrics: Vec<String> = record
        .metrics
        .iter()
        .map(|(k, v)| {
            if k == "test_samples" {
                format!("{k} {v}")
            } else {
                format!("{k} {v:.5}")
            }
        })
        .collect();
    let _ = writeln!(out, "  {}", metrics.join(" · "));
    if let Some(validation) = &record.validation {
        out.push_str(&render_validation(validation));
    }
    if let Some(bill) = &record.bill {
        let _ = writeln!(
            out,
            "  {} invocations · billed {:.1} s · {:.3} GB-s · cost ${:.6} at {} prices",
            bill.invocations,
            bill.billed_ms as f64 / 1000.0,
            bill.gb_seconds,
            bill.total_usd,
            bill.platform
        );
    }
    let _ = writeln!(out, "  model: {}", record.model_url);
    out
}

/// The validation lines of the summary: evaluations, latest and best, the model kept, and
/// when each target was reached.
fn render_validation(validation: &mlless_job::record::ValidationRecord) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let metric = validation.metric.as_str();
    let value = |p: &mlless_job::record::EvalPoint| {
        p.metrics
            .get(metric)
            .map_or("—".to_string(), |v| format!("{v:.5}"))
    };
    let at = |p: &mlless_job::record::EvalPoint| {
        let cost = p.cost_usd.map_or(String::new(), |c| format!(", ${c:.6}"));
        format!(
            "step {}, epoch {:.2}, {:.1} s{cost}",
            p.step, p.epoch, p.time_s
        )
    };
    let (Some(last), Some(best)) = (validation.points.last(), validation.best_point()) else {
        let _ = writeln!(out, "  validation: no evaluation");
        return out;
    };
    let _ = writeln!(
        out,
        "  validation {metric}: final {} · best {} ({}) · {} evaluations · model kept: {}",
        value(last),
        value(best),
        at(best),
        validation.points.len(),
        if best.last {
            "the final one"
        } else {
            "the best"
        }
    );
    for target in &validation.targets {
        let reached = validation
            .reached(target)
            .map_or("not reached".to_string(), |p| {
                format!("reached at {}", at(p))
            });
        let _ = writeln!(out, "  target {}: {reached}", target.target);
    }
    out
}
