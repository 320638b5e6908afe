//! The runs of a report side by side: their labels, the configuration in which they differ, and
//! the table of what each reached (time and cost to each target, best metric, traffic,
//! invocations), as rows for the page and as CSV.

use mlless_cost::ChannelKind;
use mlless_job::billing::channel_kind;
use mlless_job::{JobSpec, RunRecord};

use crate::ReportOptions;
use crate::format::{format_seconds, format_usd};

/// One run of a report: its record, the options it is priced with, and its label in legends
/// and tables.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// How the figures and the table name the run.
    pub label: String,
    /// What the run did.
    pub record: RunRecord,
    /// Its prices, VM types and cores ([`ReportOptions::for_record`] by default).
    pub options: ReportOptions,
    /// The record of its data set's preparation, if the caller found one: its map tasks go on
    /// the fleet's timeline.
    pub preparation: Option<mlless_job::PrepareRecord>,
}

impl Run {
    /// `record` with its [default options](ReportOptions::for_record), labelled by its job id.
    pub fn new(record: RunRecord) -> Self {
        Self {
            label: record.spec.job_id.clone(),
            options: ReportOptions::for_record(&record),
            record,
            preparation: None,
        }
    }

    /// The record's time of the supervisor's clock `time_s` as seconds since the run started.
    pub(crate) fn since_start(&self, time_s: f64) -> f64 {
        self.record.time_offset_s() + time_s
    }
}

/// Labels `runs` by the configuration in which they differ from the most common one: "isp
/// (v = 0.7)", "redis", "8 workers, lr 4"; a run of the most common configuration is labelled
/// by all the items in which the runs differ ("4 workers, bsp, object store"). A run whose label
/// would be empty or equal to another's is labelled by its job id.
pub fn label_runs(runs: &mut [Run]) {
    if runs.len() < 2 {
        return;
    }
    let records: Vec<&RunRecord> = runs.iter().map(|r| &r.record).collect();
    let differences = differences(&records);
    let modes: Vec<&String> = differences.iter().map(|(_, values)| mode(values)).collect();
    let labels: Vec<String> = (0..runs.len())
        .map(|i| {
            let own: Vec<String> = differences
                .iter()
                .zip(&modes)
                .filter(|((_, values), mode)| values[i] != ***mode)
                .map(|((name, values), _)| short_item(name, &values[i]))
                .collect();
            if own.is_empty() {
                differences
                    .iter()
                    .map(|(name, values)| short_item(name, &values[i]))
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                own.join(", ")
            }
        })
        .collect();
    for (i, run) in runs.iter_mut().enumerate() {
        let unique = labels.iter().filter(|l| **l == labels[i]).count() == 1;
        run.label = if labels[i].is_empty() || !unique {
            run.record.spec.job_id.clone()
        } else {
            labels[i].clone()
        };
    }
}

/// The most frequent of `values` (the first of the most frequent on a tie).
fn mode(values: &[String]) -> &String {
    let count = |v: &String| values.iter().filter(|w| *w == v).count();
    let mut best = &values[0];
    for v in values {
        if count(v) > count(best) {
            best = v;
        }
    }
    best
}

/// A configuration item as a label shows it: "8 workers", "isp", "redis", "scale-in", "lr 4".
pub fn short_item(name: &str, value: &str) -> String {
    match name {
        "workers" => format!("{value} workers"),
        "sync" | "channel" | "model" | "data" | "algorithm" | "pattern" | "platform" => {
            value.to_string()
        }
        "scale-in" if value == "auto" => "scale-in".to_string(),
        "scale-in" => "no scale-in".to_string(),
        "learning rate" => format!("lr {value}"),
        "lifetime cap (s)" => format!("lifetime {value} s"),
        _ => format!("{name} {value}"),
    }
}

/// The configuration of a run, item by item, as shown in the table: the model, the data, the
/// fleet, the protocol, the channel, the stops and the limits.
pub fn configuration(record: &RunRecord) -> Vec<(&'static str, String)> {
    spec_configuration(&record.spec)
}

/// The configuration of a job's spec, item by item ([`configuration`]; a run without a record
/// has its spec).
pub fn spec_configuration(spec: &JobSpec) -> Vec<(&'static str, String)> {
    let spec = spec.redacted();
    let t = &spec.training;
    let channel = match channel_kind(t.channel.as_deref()) {
        ChannelKind::ObjectStore => match t.channel.as_deref() {
            None | Some("store") => "object store".to_string(),
            Some(url) => url.to_string(),
        },
        ChannelKind::Redis { instances: 1 } => "redis".to_string(),
        ChannelKind::Redis { instances } => format!("redis ×{instances}"),
        ChannelKind::Memcached { .. } => "memcached".to_string(),
        ChannelKind::ParameterServer { instances: 1 } => "ps".to_string(),
        ChannelKind::ParameterServer { instances } => format!("ps ×{instances}"),
        ChannelKind::DynamoDb => "dynamodb".to_string(),
    };
    let targets = spec.validation.as_ref().map_or_else(
        || "none".to_string(),
        |v| {
            if v.targets.is_empty() {
                "none".to_string()
            } else {
                v.targets
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        },
    );
    vec![
        ("model", spec.model.describe()),
        ("data", spec.data_url.as_str().to_owned()),
        ("workers", t.workers.to_string()),
        ("sync", t.sync.to_string()),
        ("compression", t.compression.to_string()),
        ("algorithm", t.algorithm.to_string()),
        ("pattern", t.exchange_pattern().name().to_string()),
        ("channel", channel),
        (
            "scale-in",
            if t.scale_in.is_some() { "auto" } else { "off" }.to_string(),
        ),
        ("optimizer", spec.optimizer.kind.to_string()),
        ("learning rate", spec.lr.to_string()),
        ("schedule", t.schedule.to_string()),
        ("seed", t.seed.to_string()),
        ("max epochs", t.stop.max_epochs.to_string()),
        (
            "target loss",
            t.stop
                .target_loss
                .map_or_else(|| "none".to_string(), |l| l.to_string()),
        ),
        ("target metrics", targets),
        ("memory (MB)", t.limits.memory_mb.to_string()),
        (
            "lifetime cap (s)",
            t.limits.timeout.as_secs_f64().to_string(),
        ),
        ("checkpoint every (steps)", t.checkpoint_every.to_string()),
        ("platform", spec.platform.clone()),
    ]
}

/// The configuration items in which `records` differ, with each record's value (every item
/// when there is only one record).
pub fn differences(records: &[&RunRecord]) -> Vec<(&'static str, Vec<String>)> {
    let specs: Vec<&JobSpec> = records.iter().map(|r| &r.spec).collect();
    spec_differences(&specs)
}

/// The configuration items in which the jobs of `specs` differ, with each one's value (every
/// item when there is only one) — what `mlless runs` shows of the runs it lists.
pub fn spec_differences(specs: &[&JobSpec]) -> Vec<(&'static str, Vec<String>)> {
    let configurations: Vec<_> = specs.iter().map(|s| spec_configuration(s)).collect();
    let Some(first) = configurations.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|k| {
            let values: Vec<String> = configurations.iter().map(|c| c[k].1.clone()).collect();
            (first[k].0, values)
        })
        .filter(|(_, values)| specs.len() == 1 || values.iter().any(|v| *v != values[0]))
        .collect()
}

/// The table of a report's runs: one column a run, one row a quantity.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTable {
    /// The runs' labels.
    pub runs: Vec<String>,
    /// The configuration in which the runs differ (every item for one run).
    pub configuration: Vec<TableRow>,
    /// What each run reached and spent.
    pub results: Vec<TableRow>,
}

/// One row of the [`RunTable`]: a name (with its unit) and one cell a run.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRow {
    /// What the row shows, with its unit, e.g. `wall time (s)`.
    pub name: String,
    /// One value a run, formatted; `—` where the run has none.
    pub cells: Vec<String>,
}

/// Shown in the table where a run has no value.
pub const NONE: &str = "—";

impl RunTable {
    /// The table of `runs`.
    pub fn of(runs: &[Run]) -> Self {
        let records: Vec<&RunRecord> = runs.iter().map(|r| &r.record).collect();
        let configuration = differences(&records)
            .into_iter()
            .map(|(name, cells)| TableRow {
                name: name.to_string(),
                cells,
            })
            .collect();
        let mut results = Vec::new();
        let mut row = |name: &str, cell: &dyn Fn(&Run) -> String| {
            results.push(TableRow {
                name: name.to_string(),
                cells: runs.iter().map(cell).collect(),
            });
        };
        row("stop reason", &|r| r.record.stop_reason.clone());
        row("wall time (s)", &|r| format_seconds(r.record.wall_s));
        row("billed cost (USD)", &|r| {
            r.record
                .bill
                .as_ref()
                .map_or_else(|| NONE.to_string(), |b| usd(b.total_usd))
        });
        row("steps", &|r| r.record.steps.len().to_string());
        row("epochs", &|r| format!("{:.2}", r.record.epochs));
        for target in targets(runs) {
            row(&format!("time to {target} (s)"), &|r| {
                reached(r, &target).map_or_else(
                    || NONE.to_string(),
                    |p| format_seconds(r.since_start(p.time_s)),
                )
            });
            row(&format!("cost to {target} (USD)"), &|r| {
                reached(r, &target)
                    .and_then(|p| p.cost_usd)
                    .map_or_else(|| NONE.to_string(), usd)
            });
        }
        let metrics: Vec<String> = {
            let mut m: Vec<String> = runs
                .iter()
                .filter_map(|r| r.record.validation.as_ref().map(|v| v.metric.clone()))
                .collect();
            m.sort();
            m.dedup();
            m
        };
        for metric in &metrics {
            row(&format!("best validation {metric}"), &|r| {
                r.record
                    .validation
                    .as_ref()
                    .filter(|v| v.metric == *metric)
                    .and_then(|v| v.best_point())
                    .and_then(|p| p.metrics.get(metric.as_str()))
                    .map_or_else(|| NONE.to_string(), |v| format!("{v:.4}"))
            });
        }
        row("final training loss", &|r| {
            r.record
                .final_loss()
                .map_or_else(|| NONE.to_string(), |l| format!("{l:.4}"))
        });
        let mut test_metrics: Vec<String> = runs
            .iter()
            .flat_map(|r| r.record.metrics.keys().cloned())
            .filter(|k| k != "test_samples")
            .collect();
        test_metrics.sort();
        test_metrics.dedup();
        for metric in &test_metrics {
            row(&metric.replace('_', " "), &|r| {
                r.record
                    .metrics
                    .get(metric)
                    .map_or_else(|| NONE.to_string(), |v| format!("{v:.4}"))
            });
        }
        row("bytes sent (MB)", &|r| {
            format!("{:.2}", r.record.traffic().bytes_sent as f64 / 1e6)
        });
        row("bytes received (MB)", &|r| {
            format!("{:.2}", r.record.traffic().bytes_received as f64 / 1e6)
        });
        row("invocations", &|r| r.record.invocations.len().to_string());
        row("hand-offs at the lifetime limit", &|r| {
            count(&r.record, |name| name.contains('#')).to_string()
        });
        row("replacements after a failure", &|r| {
            count(&r.record, |name| name.contains('~')).to_string()
        });
        row("workers removed by scale-in", &|r| {
            r.record.scale_in.removals.len().to_string()
        });
        Self {
            runs: runs.iter().map(|r| r.label.clone()).collect(),
            configuration,
            results,
        }
    }

    /// The table as CSV: a header (`run` and every row's name), then one line a run.
    pub fn to_csv(&self) -> String {
        let mut writer = csv::Writer::from_writer(Vec::new());
        let rows: Vec<&TableRow> = self.configuration.iter().chain(&self.results).collect();
        // Writing to a Vec<u8> does not fail; a failure would only lose lines.
        let header = std::iter::once("run").chain(rows.iter().map(|r| r.name.as_str()));
        let _ = writer.write_record(header);
        for (i, run) in self.runs.iter().enumerate() {
            let line = std::iter::once(run.as_str()).chain(rows.iter().map(|r| {
                let cell = r.cells[i].as_str();
                if cell == NONE { "" } else { cell }
            }));
            let _ = writer.write_record(line);
        }
        let bytes = writer.into_inner().unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Dollars with three significant digits, without the sign (the row's name has the unit).
fn usd(v: f64) -> String {
    format_usd(v).trim_start_matches('$').to_string()
}

/// The targets of `--target-metric` of every run, each once, in order of appearance.
fn targets(runs: &[Run]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for run in runs {
        for t in run.record.validation.iter().flat_map(|v| &v.targets) {
            let name = t.target.to_string();
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// The evaluation of `run` that first reached the target named `target`.
fn reached<'a>(run: &'a Run, target: &str) -> Option<&'a mlless_job::record::EvalPoint> {
    let validation = run.record.validation.as_ref()?;
    let t = validation
        .targets
        .iter()
        .find(|t| t.target.to_string() == target)?;
    validation.reached(t)
}

/// Invocations whose name passes `f`.
fn count(record: &RunRecord, f: impl Fn(&str) -> bool) -> usize {
    record.invocations.iter().filter(|i| f(&i.name)).count()
}
