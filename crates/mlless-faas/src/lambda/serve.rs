//! The function end: serve Lambda invocations with the official runtime client.

use std::future::Future;
use std::time::{Instant, SystemTime};

use crate::clock::unix_ms;

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use serde_json::Value;
use tracing::info;

use super::FunctionResponse;
use crate::procfs;

/// Why serving Lambda invocations stopped or could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// A variable the Lambda runtime sets is missing or malformed: this is not (fully) inside
    /// the Lambda runtime.
    #[error(
        "{variable} is {problem}: serving Lambda invocations needs the environment the Lambda \
         runtime sets (AWS_LAMBDA_RUNTIME_API, AWS_LAMBDA_FUNCTION_NAME, \
         AWS_LAMBDA_FUNCTION_VERSION, AWS_LAMBDA_FUNCTION_MEMORY_SIZE)"
    )]
    Environment {
        /// The variable.
        variable: &'static str,
        /// "not set", or what is wrong with its value.
        problem: String,
    },
    /// The runtime client stopped (it could not reach the runtime API, or the API broke the
    /// protocol).
    #[error("serving Lambda invocations failed: {0}")]
    Runtime(#[source] lambda_runtime::Error),
}

/// Now, in milliseconds since the Unix epoch (the unit of the runtime's deadline).
/// Checks the variables the runtime client reads (it panics on a missing one).
fn check_environment() -> Result<(), ServeError> {
    for variable in [
        "AWS_LAMBDA_RUNTIME_API",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_FUNCTION_VERSION",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    ] {
        let value = std::env::var(variable).unwrap_or_default();
        let problem = if value.trim().is_empty() {
            "not set".to_owned()
        } else if variable == "AWS_LAMBDA_FUNCTION_MEMORY_SIZE" && value.parse::<i32>().is_err() {
            format!("{value:?}, not a number of MB")
        } else {
            continue;
        };
        return Err(ServeError::Environment { variable, problem });
    }
    Ok(())
}

/// The `errorType` of an error the function's handler returns (what Lambda shows in the
/// response and the log).
const HANDLER_ERROR_TYPE: &str = "mlless.FunctionError";

/// Serves invocations until the runtime shuts the function down: each invocation's payload (its
/// JSON, as bytes) goes to `handler`, one at a time, as the Lambda runtime API hands them out.
///
/// Call it only inside the Lambda runtime (where `AWS_LAMBDA_RUNTIME_API` is set). A handler's
/// `Err` message becomes the invocation's function error; the invoker shows it after the
/// function's name.
///
/// # Errors
///
/// [`ServeError::Environment`] outside the Lambda runtime; [`ServeError::Runtime`] if the
/// runtime API cannot be reached or breaks the protocol.
pub async fn serve<F, Fut>(handler: F) -> Result<(), ServeError>
where
    F: Fn(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    check_environment()?;
    let handler = &handler;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let started = Instant::now();
        let lifetime_s = event
            .context
            .deadline
            .saturating_sub(unix_ms(SystemTime::now()))
            .div_ceil(1000) as f64;
        procfs::reset_own_peak();
        info!(request = %event.context.request_id, "invocation started");
        let payload = serde_json::to_vec(&event.payload).map_err(|e| Diagnostic {
            error_type: HANDLER_ERROR_TYPE.to_owned(),
            error_message: format!("re-encoding the payload: {e}"),
        })?;
        handler(payload).await.map_err(|message| Diagnostic {
            error_type: HANDLER_ERROR_TYPE.to_owned(),
            error_message: message,
        })?;
        let peak_kib = procfs::read_tree(std::process::id()).map_or(0, |r| r.root_hwm_kib);
        Ok::<_, Diagnostic>(FunctionResponse {
            duration_ms: (started.elapsed().as_micros() as u64).div_ceil(1000).max(1),
            peak_rss_mb: peak_kib as f64 / 1024.0,
            memory_mb: u32::try_from(event.context.env_config.memory).unwrap_or(0),
            lifetime_s,
        })
    }))
    .await
    .map_err(ServeError::Runtime)
}
