//! Progress of `mlless train` wherever it runs: a live bar on a terminal, and a plain line
//! every few seconds (`--progress-every`) when standard error is not one (a CI job, `nohup`, a
//! notebook), as text or as one JSON object per line (`--log-format json`, which formats the
//! tracing logs the same way).

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};
use mlless_cost::RequestBasis;
use mlless_runtime::LiveProgress;
use serde::Serialize;

/// How the logs and the progress lines on standard error are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields` (with `message`), `target`.
    Json,
}

/// The format chosen for this process, set once by `main` before anything logs.
static LOG_FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Sets this process's log format (the first call wins).
pub fn set_log_format(format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
}

/// This process's log format ([`LogFormat::Text`] unless `main` set another).
pub fn log_format() -> LogFormat {
    LOG_FORMAT.get().copied().unwrap_or_default()
}

/// The target of the progress lines in JSON, as a tracing event's target would be.
pub const PROGRESS_TARGET: &str = "mlless::progress";

/// `--progress-every`: seconds, finite and not negative.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(seconds) if (0.0..=mlless_job::config::MAX_SECONDS).contains(&seconds) => Ok(seconds),
        _ => Err(format!(
            "{s:?} is not a number of seconds (0 or more, at most 1e9; 0 turns the lines off)"
        )),
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    /// Nothing (`--quiet`, or `--progress-every 0` off a terminal).
    Off,
    /// The live bar (standard error is a terminal, logs as text).
    Bar,
    /// A line every this many seconds.
    Lines {
        /// Seconds between two lines.
        every_s: f64,
        /// Text or JSON.
        format: LogFormat,
    },
}

impl Mode {
    /// The mode for these options on a terminal (`terminal`) or not: the bar on a terminal
    /// with text logs, lines otherwise (a bar among JSON lines would garble them).
    pub fn choose(quiet: bool, every_s: f64, terminal: bool, format: LogFormat) -> Self {
        if quiet {
            Self::Off
        } else if terminal && format == LogFormat::Text {
            Self::Bar
        } else if every_s > 0.0 {
            Self::Lines { every_s, format }
        } else {
            Self::Off
        }
    }
}

/// Shows a run's [`LiveProgress`] as its [`Mode`] says.
pub struct Reporter {
    bar: Option<ProgressBar>,
    lines: Option<Lines>,
}

/// The state of the lines: when the next is due.
struct Lines {
    every_s: f64,
    format: LogFormat,
    next_at_s: f64,
}

impl Reporter {
    /// A reporter for `mode`; `max_epochs` sizes the bar.
    pub fn new(mode: Mode, max_epochs: u32) -> Self {
        match mode {
            Mode::Off => Self {
                bar: None,
                lines: None,
            },
            Mode::Bar => {
                let bar = ProgressBar::new(u64::from(max_epochs) * 100);
                bar.set_style(
                    ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                Self {
                    bar: Some(bar),
                    lines: None,
                }
            }
            Mode::Lines { every_s, format } => Self {
                bar: None,
                lines: Some(Lines {
                    every_s,
                    format,
                    next_at_s: every_s,
                }),
            },
        }
    }

    /// A reporter for these options on this process's standard error.
    pub fn for_stderr(quiet: bool, every_s: f64, max_epochs: u32) -> Self {
        let terminal = std::io::stderr().is_terminal();
        Self::new(
            Mode::choose(quiet, every_s, terminal, log_format()),
            max_epochs,
        )
    }

    /// Shows `p`: updates the bar, or writes a line to standard error if one is due.
    pub fn observe(&mut self, p: &LiveProgress) {
        if let Some(bar) = &self.bar {
            bar.set_position((p.epoch * 100.0) as u64);
            bar.set_message(text_line(p));
        }
        if let Some(line) = self.lines.as_mut().and_then(|lines| lines.due(p)) {
            // A closed standard error must not stop the training.
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Lines {
    /// The line to write for `p`, if one is due: at every multiple of the period that
    /// `p.elapsed_s` passed (one line however many multiples a slow poll skipped), and the
    /// last one, with the run's bill, whenever it comes.
    fn due(&mut self, p: &LiveProgress) -> Option<String> {
        if p.elapsed_s < self.next_at_s && !p.done {
            return None;
        }
        self.next_at_s = ((p.elapsed_s / self.every_s).floor() + 1.0) * self.every_s;
        Some(match self.format {
            LogFormat::Text => format!("progress: {}", text_line(p)),
            LogFormat::Json => json_line(p),
        })
    }
}

/// `p` as a line for people: step, epoch of the limit, loss, validation, workers, elapsed
/// time and the bill so far (the run's bill once it has ended; the object-store requests in it
/// labelled where they are estimated).
pub fn text_line(p: &LiveProgress) -> String {
    let loss = if p.loss.is_finite() {
        format!("{:.4}", p.loss)
    } else {
        "—".to_string()
    };
    let validation = p.validation.as_ref().map_or(String::new(), |v| {
        format!(
            " · validation {} {:.4} (best {:.4})",
            v.metric, v.latest, v.best
        )
    });
    let requests = match p.requests {
        RequestBasis::Counted => "",
        RequestBasis::Estimated => " (object-store requests estimated)",
    };
    let billed = if p.done { " billed" } else { "" };
    format!(
        "step {} · epoch {:.2}/{} · loss {loss}{validation} · {} workers · {:.1} s · ${:.6}{billed}\
         {requests}",
        p.step, p.epoch, p.max_epochs, p.workers, p.elapsed_s, p.bill_usd
    )
}

/// Now, as tracing-subscriber's JSON lines write it.
fn timestamp() -> String {
    use tracing_subscriber::fmt::time::FormatTime;
    let mut timestamp = String::new();
    let _ = tracing_subscriber::fmt::time::SystemTime.format_time(
        &mut tracing_subscriber::fmt::format::Writer::new(&mut timestamp),
    );
    timestamp
}

/// `message` as one JSON line of the progress target `mlless::{what}`, shaped as
/// tracing-subscriber's JSON lines are: `{"timestamp", "level": "INFO", "fields": {"message"},
/// "target"}`.
pub fn json_message(what: &str, message: &str) -> String {
    serde_json::json!({
        "timestamp": timestamp(),
        "level": "INFO",
        "fields": { "message": message },
        "target": format!("mlless::{what}"),
    })
    .to_string()
}

/// A progress line in JSON, shaped as tracing-subscriber's JSON lines are.
#[derive(Serialize)]
struct JsonLine<'a> {
    timestamp: String,
    level: &'static str,
    fields: JsonFields<'a>,
    target: &'static str,
}

/// The fields of a JSON progress line (a loss not yet known is `null`).
#[derive(Serialize)]
struct JsonFields<'a> {
    message: &'static str,
    job_id: &'a str,
    step: u64,
    epoch: f64,
    max_epochs: u32,
    loss: Option<f64>,
    workers: u32,
    elapsed_s: f64,
    cost_usd: f64,
    requests: RequestBasis,
    done: bool,
    validation: Option<JsonValidation<'a>>,
}

/// The validation metric in a progress line: what the live line shows, without the latest
/// evaluations themselves that the progress carries for a search.
#[derive(Serialize)]
struct JsonValidation<'a> {
    metric: &'a str,
    latest: f64,
    best: f64,
    evaluations: u32,
    epoch: f64,
}

/// `p` as one JSON object: `{"timestamp", "level": "INFO", "fields": {"message": "progress",
/// "job_id", "step", "epoch", "max_epochs", "loss", "workers", "elapsed_s", "cost_usd" (the
/// bill so far; once `done`, the run's bill), "requests" (`counted` or `estimated`: the
/// object-store requests in it), "done", "validation": {"metric", "latest", "best",
/// "evaluations", "epoch"} or null}, "target": "mlless::progress"}`.
pub fn json_line(p: &LiveProgress) -> String {
    let line = JsonLine {
        timestamp: timestamp(),
        level: "INFO",
        fields: JsonFields {
            message: "progress",
            job_id: &p.job_id,
            step: p.step,
            epoch: p.epoch,
            max_epochs: p.max_epochs,
            loss: p.loss.is_finite().then_some(p.loss),
            workers: p.workers,
            elapsed_s: p.elapsed_s,
            cost_usd: p.bill_usd,
            requests: p.requests,
            done: p.done,
            validation: p.validation.as_ref().map(|v| JsonValidation {
                metric: &v.metric,
                latest: v.latest,
                best: v.best,
                evaluations: v.evaluations,
                epoch: v.epoch,
            }),
        },
        target: PROGRESS_TARGET,
    };
    // Serialising plain numbers and strings cannot fail; an empty object if it ever did.
    serde_json::to_string(&line).unwrap_or_else(|_| "{}".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(elapsed_s: f64) -> LiveProgress {
        LiveProgress {
            job_id: "job-1".into(),
            step: 12,
            epoch: 0.5,
            loss: 0.25,
            workers: 4,
            max_epochs: 10,
            elapsed_s,
            bill_usd: 0.002,
            requests: RequestBasis::Estimated,
            done: false,
            validation: None,
        }
    }

    #[test]
    fn the_bar_on_a_terminal_lines_elsewhere() {
        use LogFormat::{Json, Text};
        assert_eq!(Mode::choose(false, 5.0, true, Text), Mode::Bar);
        assert_eq!(
            Mode::choose(false, 5.0, false, Text),
            Mode::Lines {
                every_s: 5.0,
                format: Text
            }
        );
        assert_eq!(
            Mode::choose(false, 5.0, true, Json),
            Mode::Lines {
                every_s: 5.0,
                format: Json
            }
        );
        assert_eq!(Mode::choose(false, 0.0, false, Text), Mode::Off);
        assert_eq!(Mode::choose(true, 5.0, false, Text), Mode::Off);
        assert_eq!(Mode::choose(true, 5.0, true, Text), Mode::Off);
    }

    #[test]
    fn a_line_at_every_period_passed_and_none_between() {
        let mut lines = Lines {
            every_s: 2.0,
            format: LogFormat::Text,
            next_at_s: 2.0,
        };
        let due: Vec<bool> = [0.1, 1.9, 2.0, 2.1, 3.9, 7.5, 7.9, 8.0]
            .iter()
            .map(|&t| lines.due(&progress(t)).is_some())
            .collect();
        assert_eq!(due, [false, false, true, false, false, true, false, true]);
        // The last progress, with the run's bill, is written whenever it comes.
        let mut last = progress(8.5);
        last.done = true;
        let line = lines.due(&last).expect("the last line");
        assert!(
            line.ends_with("$0.002000 billed (object-store requests estimated)"),
            "{line}"
        );
        last.requests = RequestBasis::Counted;
        assert!(text_line(&last).ends_with("$0.002000 billed"));
    }

    #[test]
    fn the_json_line_has_the_fields_and_null_for_an_unknown_loss() {
        let mut p = progress(3.0);
        p.loss = f64::NAN;
        p.validation = Some(mlless_runtime::messages::ValidationProgress {
            metric: "logloss".into(),
            latest: 0.4,
            best: 0.3,
            recent: vec![[1.0, 2.0, 0.4]],
            ..Default::default()
        });
        let v: serde_json::Value = serde_json::from_str(&json_line(&p)).expect("JSON");
        assert_eq!(v["level"], "INFO");
        assert_eq!(v["target"], PROGRESS_TARGET);
        assert!(v["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
        let f = &v["fields"];
        assert_eq!(f["message"], "progress");
        assert_eq!(f["step"], 12);
        assert_eq!(f["loss"], serde_json::Value::Null);
        assert_eq!(f["workers"], 4);
        assert_eq!(f["cost_usd"], 0.002);
        assert_eq!(f["requests"], "estimated");
        assert_eq!(f["done"], false);
        assert_eq!(f["validation"]["metric"], "logloss");
        assert_eq!(f["validation"]["best"], 0.3);
        // The evaluations a search reads are not in the line.
        assert!(f["validation"].get("recent").is_none());
    }

    #[test]
    fn seconds_are_finite_and_not_negative() {
        assert_eq!(parse_seconds("0"), Ok(0.0));
        assert_eq!(parse_seconds("2.5"), Ok(2.5));
        for bad in ["-1", "nan", "inf", "five", "1e20", "1e300"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
    }
}
