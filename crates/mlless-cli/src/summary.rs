//! The summary of a run, printed at its end and by `mlless report`, and the run record as a
//! local JSON file.

use std::path::Path;

use anyhow::Context;
use mlless_job::RunRecord;
use serde::Serialize;

/// Reads a run record from a local JSON file.
pub fn read_record(path: &Path) -> anyhow::Result<RunRecord> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let record: RunRecord = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a run record", path.display()))?;
    record.check().with_context(|| {
        format!(
            "{} is not a run record mlless can report on",
            path.display()
        )
    })?;
    Ok(record)
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

/// Prints the summary of a run as one JSON document ([`Summary`]) on standard output.
pub fn print_json(record: &RunRecord, record_path: Option<&Path>) -> anyhow::Result<()> {
    use std::io::Write;
    let json = serde_json::to_string_pretty(&Summary::of(record, record_path))
        .context("writing the summary as JSON")?;
    writeln!(std::io::stdout().lock(), "{json}").context("writing the summary")?;
    Ok(())
}

/// The key figures of a run, as `mlless train --json` prints them.
#[derive(Debug, Serialize)]
pub struct Summary {
    /// The job.
    pub job_id: String,
    /// The model's name (`lr`, `pmf`, …).
    pub model: &'static str,
    /// The data set (redacted).
    pub data_url: String,
    /// The run's location (`{runs}/{job}`, redacted): `mlless train --resume` takes it.
    pub run_url: String,
    /// The trained model.
    pub model_url: String,
    /// The local copy of the run record (`--record`), if one was written.
    pub record_path: Option<String>,
    /// Why training stopped.
    pub stop_reason: String,
    /// Workers at the start.
    pub workers: u32,
    /// Epochs done.
    pub epochs: f64,
    /// Steps done.
    pub steps: usize,
    /// The training loss of the last step.
    pub final_loss: Option<f64>,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// What the run cost, USD (`None` without a bill).
    pub cost_usd: Option<f64>,
    /// Invocations billed.
    pub invocations: Option<u64>,
    /// The price table of the bill.
    pub platform: Option<String>,
    /// Where the bill's object-store requests come from (`counted`, or `estimated` where the
    /// run left no count; `None` without a bill).
    pub requests: Option<mlless_cost::RequestBasis>,
    /// The test metrics (`test_logloss`, `test_rmse`, …, and `test_samples`).
    pub metrics: mlless_core::Metrics,
    /// The validation curve's summary, with a validation set.
    pub validation: Option<ValidationSummary>,
}

/// The validation figures of a [`Summary`].
#[derive(Debug, Serialize)]
pub struct ValidationSummary {
    /// The metric (`logloss`, `rmse`, …).
    pub metric: String,
    /// Evaluations done.
    pub evaluations: usize,
    /// The metric at the last evaluation.
    pub last: Option<f64>,
    /// Its best value.
    pub best: Option<f64>,
    /// The step of the best evaluation.
    pub best_step: Option<u64>,
    /// The epoch of the best evaluation.
    pub best_epoch: Option<f64>,
    /// Whether the model kept is the final one (`false`: the best one).
    pub kept_final: Option<bool>,
}

impl Summary {
    /// The summary of `record`, whose local copy is at `record_path` if any.
    pub fn of(record: &RunRecord, record_path: Option<&Path>) -> Self {
        let spec = &record.spec.redacted();
        let validation = record.validation.as_ref().map(|v| {
            let value = |p: &mlless_job::record::EvalPoint| p.metrics.get(&v.metric).copied();
            let best = v.best_point();
            ValidationSummary {
                metric: v.metric.clone(),
                evaluations: v.points.len(),
                last: v.points.last().and_then(value),
                best: best.and_then(value),
                best_step: best.map(|p| p.step),
                best_epoch: best.map(|p| p.epoch),
                kept_final: best.map(|p| p.last),
            }
        });
        Self {
            job_id: spec.job_id.clone(),
            model: spec.model.name(),
            data_url: spec.data_url.as_str().to_owned(),
            run_url: spec.run_url.as_str().to_owned(),
            model_url: record.model_url.clone(),
            record_path: record_path.map(|p| p.display().to_string()),
            stop_reason: record.stop_reason.clone(),
            workers: spec.training.workers,
            epochs: record.epochs,
            steps: record.steps.len(),
            final_loss: record.final_loss(),
            wall_s: record.wall_s,
            cost_usd: record.bill.as_ref().map(|b| b.total_usd),
            invocations: record.bill.as_ref().map(|b| b.invocations),
            platform: record.bill.as_ref().map(|b| b.platform.clone()),
            requests: record.bill.as_ref().map(|_| record.billed_requests().1),
            metrics: record.metrics.clone(),
            validation,
        }
    }
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
    let chosen = spec
        .training
        .pattern_reason()
        .map_or(String::new(), |why| format!(" (chosen: {why})"));
    let _ = writeln!(
        out,
        "  algorithm {} · pattern {}{chosen} · {} communication rounds · {handoffs} \
         re-invocations at the lifetime limit",
        spec.training.algorithm,
        spec.training.exchange_pattern().name(),
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
    let _ = writeln!(
        out,
        "  sent {} · replica spread {:.2e}",
        record.traffic(),
        record.replica_spread
    );
    let _ = writeln!(out, "  {}", render_metrics(&record.metrics));
    if let Some(validation) = &record.validation {
        out.push_str(&render_validation(validation));
    }
    if let Some(refit) = &record.refit {
        let again = &refit.record;
        let _ = writeln!(
            out,
            "  refit: trained again on the training and validation sets ({} samples) for {} \
             epoch(s) in {:.1} s, ${:.6}; that model is kept (the early-stopped one: {} · {})",
            again.train_samples,
            refit.epochs,
            again.wall_s,
            again.bill.as_ref().map_or(0.0, |b| b.total_usd),
            render_metrics(&refit.early_stopped_metrics),
            refit.early_stopped_model_url
        );
    }
    if let Some(bill) = &record.bill {
        let _ = writeln!(
            out,
            "  {} invocations · billed {:.1} s · {:.3} GB-s · cost ${:.6} at {} prices \
             (object-store requests {})",
            bill.invocations,
            bill.billed_ms as f64 / 1000.0,
            bill.gb_seconds,
            bill.total_usd,
            bill.platform,
            record.billed_requests().1
        );
        out.push_str(&render_dominant_part(record));
    }
    let _ = writeln!(out, "  model: {}", record.model_url);
    out
}

/// The line of the summary that says which part dominates the bill, if one does, and what the
/// cost model says the run costs on its channel and on the other kind
/// ([`mlless_report::dominant_part`]).
fn render_dominant_part(record: &RunRecord) -> String {
    let options = mlless_report::ReportOptions::for_record(record);
    let Some(dominant) = mlless_report::dominant_part(record, &options) else {
        return String::new();
    };
    let mut out = format!(
        "  {:.1}% of the bill is {}",
        dominant.share * 100.0,
        dominant.part
    );
    if let Some((own, own_usd, other, other_usd)) = dominant.channels {
        let name = |kind| channel_name(kind, &options.prices);
        out.push_str(&format!(
            ": the cost model puts the same run at ${other_usd:.6} on {} against ${own_usd:.6} \
             on {}",
            name(other),
            name(own)
        ));
    }
    out.push('\n');
    out
}

/// A channel kind as the summary names it, with its servers' price.
fn channel_name(kind: mlless_cost::ChannelKind, prices: &mlless_cost::PriceTable) -> String {
    use mlless_cost::ChannelKind;
    let per_hour = prices.channel_usd_per_hour(kind);
    match kind {
        ChannelKind::ObjectStore => "the object store (its requests billed)".to_string(),
        ChannelKind::DynamoDb => "DynamoDB on demand (its request units billed)".to_string(),
        ChannelKind::Redis { instances } | ChannelKind::Memcached { instances } => {
            let server = if matches!(kind, ChannelKind::Redis { .. }) {
                "Redis"
            } else {
                "Memcached"
            };
            let plural = if instances == 1 { "" } else { "s" };
            format!("{server} ({instances} instance{plural}, ${per_hour:.2}/h)")
        }
        ChannelKind::ParameterServer { instances } => {
            let plural = if instances == 1 { "" } else { "s" };
            format!("parameter server ({instances} VM{plural}, ${per_hour:.3}/h)")
        }
    }
}

/// Test metrics on one line: `test_rmse 0.83861 · test_samples 10084`.
fn render_metrics(metrics: &mlless_core::Metrics) -> String {
    let metrics: Vec<String> = metrics
        .iter()
        .map(|(k, v)| {
            if k == "test_samples" {
                format!("{k} {v}")
            } else {
                format!("{k} {v:.5}")
            }
        })
        .collect();
    metrics.join(" · ")
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
