//! The function end: serve Lambda invocations with the official runtime client.

use std::future::Future;
use std::time::Instant;

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use serde_json::Value;
use tracing::info;

use super::FunctionResponse;
use crate::procfs;

/// The Lambda runtime client stopped serving (it could not reach the runtime API).
#[derive(Debug, thiserror::Error)]
#[error("serving Lambda invocations failed: {0}")]
pub struct ServeError(#[source] lambda_runtime::Error);

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
/// [`ServeError`] if the runtime API cannot be reached or breaks the protocol.
pub async fn serve<F, Fut>(handler: F) -> Result<(), ServeError>
where
    F: Fn(Vec<u8>) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let handler = &handler;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let started = Instant::now();
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
        })
    }))
    .await
    .map_err(ServeError)
}
