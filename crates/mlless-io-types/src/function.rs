//! What a function platform is asked for and reports, as plain data: the [`Limits`] of one
//! invocation, and the [`InvocationReport`] of how it ended ([`Outcome`]), which the run
//! record keeps and a bill prices. The platforms themselves are `mlless-faas`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The limits a platform imposes on one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Memory cap in MB (2^20 bytes); on Lambda this also buys CPU share, and it is what is billed.
    pub memory_mb: u32,
    /// Lifetime cap, measured from the start of the invocation (900 s on Lambda, 600 s on IBM).
    pub timeout: Duration,
}

impl Limits {
    /// Limits of `memory_mb` MB and a lifetime of `timeout`.
    pub fn new(memory_mb: u32, timeout: Duration) -> Self {
        Self { memory_mb, timeout }
    }
}

/// What one invocation did, as a FaaS platform reports it (and bills it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvocationReport {
    /// Name of the invocation.
    pub name: String,
    /// Process id, where the platform has one.
    pub pid: Option<u32>,
    /// Start (spawn) time, in milliseconds since the Unix epoch.
    pub started_at_unix_ms: u64,
    /// Wall time from spawn to exit, in milliseconds, rounded up (at least 1).
    pub duration_ms: u64,
    /// Configured memory (the billed size), in MB.
    pub memory_mb: u32,
    /// Peak resident memory observed, in MB (0 if it ended before the first sample).
    pub peak_rss_mb: f64,
    /// How it ended.
    pub outcome: Outcome,
}

impl InvocationReport {
    /// One line a user understands, naming the function and the limit, or `None` on success.
    ///
    /// E.g. "worker-2 exceeded its memory limit of 128 MB (peak 190 MB)",
    /// "worker-1 timed out after 3 s", "supervisor failed (exit code 1): &lt;last stderr line&gt;".
    pub fn describe_failure(&self) -> Option<String> {
        if self.outcome.is_success() {
            None
        } else {
            Some(format!("{} {}", self.name, self.outcome))
        }
    }
}

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The function returned normally (exit code 0).
    Succeeded,
    /// The function failed on its own: non-zero exit code, or a signal it did not get from us.
    Failed {
        /// Exit code, or `None` when a signal ended it.
        exit_code: Option<i32>,
        /// What it said last on stderr (trimmed), or the signal that ended it.
        message: String,
    },
    /// Stopped because its resident memory went past the cap.
    MemoryExceeded {
        /// The cap, in MB.
        limit_mb: u32,
        /// The peak observed, in MB.
        peak_mb: f64,
    },
    /// Stopped because it ran past its lifetime cap.
    TimedOut {
        /// The cap, in seconds.
        limit_s: f64,
    },
    /// Stopped by its invoker's kill switch (`mlless_faas::KillSwitch`).
    Killed,
}

impl Outcome {
    /// Whether the function succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Succeeded)
    }
}

/// The outcome as the end of a sentence whose subject is the function, e.g. "timed out after 3 s".
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Succeeded => f.write_str("succeeded"),
            Outcome::Failed {
                exit_code: Some(code),
                message,
            } => write!(f, "failed (exit code {code}): {message}"),
            Outcome::Failed {
                exit_code: None,
                message,
            } => write!(f, "failed: {message}"),
            Outcome::MemoryExceeded { limit_mb, peak_mb } => write!(
                f,
                "exceeded its memory limit of {limit_mb} MB (peak {peak_mb:.0} MB)"
            ),
            Outcome::TimedOut { limit_s } => write!(f, "timed out after {limit_s} s"),
            Outcome::Killed => f.write_str("was killed (stopped by its kill switch)"),
        }
    }
}
