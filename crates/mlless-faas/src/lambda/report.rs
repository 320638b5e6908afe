//! What Lambda says about an invocation: the `REPORT` line at the end of its log tail, and the
//! function error in the response body, turned into the parts of an
//! [`InvocationReport`](crate::InvocationReport).

use std::time::Duration;

use serde::Deserialize;

use crate::Outcome;

/// The figures of the `REPORT` line Lambda writes after each invocation, e.g.
/// `REPORT RequestId: … Duration: 102.25 ms Billed Duration: 103 ms Memory Size: 128 MB
/// Max Memory Used: 18 MB`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct PlatformReport {
    /// Billed duration, in ms.
    pub billed_duration_ms: Option<u64>,
    /// Configured memory, in MB.
    pub memory_size_mb: Option<u32>,
    /// Peak memory, in MB.
    pub max_memory_used_mb: Option<f64>,
}

impl PlatformReport {
    /// Reads the last `REPORT` line of a log tail (the decoded `X-Amz-Log-Result` header).
    pub(crate) fn from_log_tail(log: &str) -> Option<Self> {
        let line = log.lines().rev().find(|l| l.starts_with("REPORT "))?;
        let mut report = Self::default();
        for field in line.split('\t') {
            let Some((key, value)) = field.split_once(':') else {
                continue;
            };
            let number = value
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok());
            match key.trim() {
                "Billed Duration" => report.billed_duration_ms = number.map(|n| n.ceil() as u64),
                "Memory Size" => report.memory_size_mb = number.map(|n| n as u32),
                "Max Memory Used" => report.max_memory_used_mb = number,
                _ => {}
            }
        }
        Some(report)
    }
}

/// The body Lambda sends with a function error (`X-Amz-Function-Error` set).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct FunctionError {
    #[serde(rename = "errorMessage", default)]
    pub message: String,
    #[serde(rename = "errorType", default)]
    pub error_type: String,
}

impl FunctionError {
    /// Reads the body of a function error; a body that is not the usual JSON becomes the message.
    pub(crate) fn parse(body: &[u8]) -> Self {
        serde_json::from_slice(body).unwrap_or_else(|_| Self {
            message: String::from_utf8_lossy(body).trim().to_owned(),
            error_type: String::new(),
        })
    }

    /// The outcome of an invocation that ended in this error, under `timeout` and `memory_mb`.
    ///
    /// Lambda reports its own stops as errors: a timeout ("Task timed out after 3.00 seconds"),
    /// memory exhaustion (`Runtime.OutOfMemory`), and a process that died (`Runtime.ExitError`,
    /// "Runtime exited with error: signal: aborted"). A process that died by a signal has no exit
    /// code, as a local process killed by one; an error the function returned itself is exit
    /// code 1, as the local `mlless function` exits with it.
    pub(crate) fn outcome(
        &self,
        timeout: Duration,
        memory_mb: u32,
        platform: Option<&PlatformReport>,
    ) -> Outcome {
        let message = self.message.trim();
        let lower = format!("{} {}", self.error_type, message).to_ascii_lowercase();
        if lower.contains("timedout") || lower.contains("timed out") {
            return Outcome::TimedOut {
                limit_s: timeout.as_secs_f64(),
            };
        }
        let peak = platform.and_then(|p| p.max_memory_used_mb);
        if self.error_type == "Runtime.OutOfMemory"
            || (lower.contains("signal: killed") && peak.is_some_and(|p| p >= f64::from(memory_mb)))
        {
            return Outcome::MemoryExceeded {
                limit_mb: memory_mb,
                peak_mb: peak.unwrap_or(f64::from(memory_mb)),
            };
        }
        if let Some(rest) = message.split("Runtime exited with error: ").nth(1) {
            let rest = rest.trim();
            let exit_code = rest
                .strip_prefix("exit status ")
                .and_then(|code| code.split_whitespace().next())
                .and_then(|code| code.parse().ok());
            return Outcome::Failed {
                exit_code,
                message: rest.to_owned(),
            };
        }
        Outcome::Failed {
            exit_code: Some(1),
            message: if message.is_empty() {
                format!("function error {}", self.error_type)
            } else {
                message.to_owned()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAIL: &str = "START RequestId: 8f5 Version: $LATEST\n\
        some log line\n\
        END RequestId: 8f5\n\
        REPORT RequestId: 8f5\tDuration: 102.25 ms\tBilled Duration: 103 ms\t\
        Memory Size: 128 MB\tMax Memory Used: 18 MB\tInit Duration: 20.5 ms\t\n";

    #[test]
    fn reads_the_report_line() {
        let report = PlatformReport::from_log_tail(TAIL).expect("a REPORT line");
        assert_eq!(report.billed_duration_ms, Some(103));
        assert_eq!(report.memory_size_mb, Some(128));
        assert_eq!(report.max_memory_used_mb, Some(18.0));
        assert_eq!(PlatformReport::from_log_tail("no report here\n"), None);
    }

    fn outcome(body: &str, peak: Option<f64>) -> Outcome {
        let platform = PlatformReport {
            max_memory_used_mb: peak,
            ..PlatformReport::default()
        };
        FunctionError::parse(body.as_bytes()).outcome(Duration::from_secs(3), 128, Some(&platform))
    }

    #[test]
    fn maps_platform_stops_to_outcomes() {
        assert_eq!(
            outcome(
                r#"{"errorMessage":"2026-11-29T10:00:00Z 8f5 Task timed out after 3.00 seconds"}"#,
                None
            ),
            Outcome::TimedOut { limit_s: 3.0 }
        );
        assert_eq!(
            outcome(
                r#"{"errorType":"Runtime.OutOfMemory","errorMessage":"RequestId: 8f5 Error: Runtime exited with error: signal: killed"}"#,
                Some(128.0)
            ),
            Outcome::MemoryExceeded {
                limit_mb: 128,
                peak_mb: 128.0
            }
        );
        assert_eq!(
            outcome(
                r#"{"errorType":"Runtime.ExitError","errorMessage":"RequestId: 8f5 Error: Runtime exited with error: signal: aborted (core dumped)"}"#,
                Some(40.0)
            ),
            Outcome::Failed {
                exit_code: None,
                message: "signal: aborted (core dumped)".into()
            }
        );
        assert_eq!(
            outcome(
                r#"{"errorType":"Runtime.ExitError","errorMessage":"RequestId: 8f5 Error: Runtime exited with error: exit status 2"}"#,
                None
            ),
            Outcome::Failed {
                exit_code: Some(2),
                message: "exit status 2".into()
            }
        );
    }

    #[test]
    fn a_handler_error_keeps_the_function_message() {
        assert_eq!(
            outcome(
                r#"{"errorType":"mlless","errorMessage":"no such object: data/manifest.json"}"#,
                None
            ),
            Outcome::Failed {
                exit_code: Some(1),
                message: "no such object: data/manifest.json".into()
            }
        );
        assert_eq!(
            outcome("upstream said no", None),
            Outcome::Failed {
                exit_code: Some(1),
                message: "upstream said no".into()
            }
        );
    }
}
