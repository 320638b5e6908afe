//! AWS Lambda: the invoker that starts functions through the Lambda Invoke API
//! ([`LambdaInvoker`]), and the loop that serves invocations inside a function ([`serve`]).
//!
//! The same binary is both ends: the driver invokes a deployed function by name, and the
//! function, started by the Lambda runtime, hands each payload to the code the local invoker
//! runs. What crosses between them besides the payload is one small JSON [`FunctionResponse`]
//! (what the function measured of itself), the function error Lambda reports, and the `REPORT`
//! line of the function's log (billed duration, memory size, peak memory), when the platform
//! sends one.

mod invoker;
mod report;
mod serve;

pub use invoker::{LambdaConfig, LambdaInvoker};
pub use serve::{ServeError, serve};

use serde::{Deserialize, Serialize};

/// What a function served by [`serve`] returns for a successful invocation: what it measured of
/// itself, for the invoker's report when the platform sends no `REPORT` line (as emulators do).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FunctionResponse {
    /// Time spent in the handler, in milliseconds, rounded up.
    pub duration_ms: u64,
    /// Peak resident memory of the function's process during the invocation, in MB.
    pub peak_rss_mb: f64,
    /// The memory the function is configured with, in MB (`0` if the platform did not say).
    pub memory_mb: u32,
    /// Time the platform gave the invocation at its start (deadline minus start), in seconds:
    /// the function's configured timeout, for a warning when it is shorter than the job's.
    #[serde(default)]
    pub lifetime_s: f64,
}
