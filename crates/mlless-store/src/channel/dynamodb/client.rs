//! DynamoDB's JSON API over HTTP: one signed `POST` per operation
//! (`X-Amz-Target: DynamoDB_20120810.<Op>`, `application/x-amz-json-1.0`), and its errors.
//!
//! Not `aws-sdk-dynamodb`: the channel needs a handful of operations (`DescribeTable`,
//! `CreateTable`, `UpdateTimeToLive`, `PutItem`, `GetItem`, `Query`, `BatchGetItem`,
//! `BatchWriteItem`), and the SDK would bring the Smithy client runtime and a crate of several
//! hundred thousand generated lines into every build, minutes of compile time on a 2-core CI.
//! `reqwest` and `aws-sigv4` are already in the build (S3, the Lambda invoker), and the requests
//! are small JSON documents (the Lambda invoker calls Lambda the same way).

use std::time::Duration;

use serde_json::Value;
use tracing::trace;

use crate::requests::{Request, RequestCounter};

/// The API version in every `X-Amz-Target`.
const TARGET_PREFIX: &str = "DynamoDB_20120810";

/// Bound on connecting to the endpoint.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one request, body included (a batch of chunks is several MB).
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The error codes (`__type` after its `#`) that say DynamoDB is throttling or briefly unable to
/// serve: worth another attempt, as the AWS SDKs retry them.
const TRANSIENT_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "TransactionInProgressException",
];

/// What went wrong talking to DynamoDB.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DynamoDbError {
    /// The request did not get an answer: the connection was refused, reset or timed out
    /// (transient).
    #[error("no answer from DynamoDB at {endpoint}: {reason}")]
    Unreachable {
        /// The endpoint's URL.
        endpoint: String,
        /// What the HTTP client said.
        reason: String,
    },
    /// DynamoDB refused the request (transient when it throttles or answers 5xx).
    #[error("{code} (HTTP {status}): {message}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error code, e.g. `ResourceNotFoundException`.
        code: String,
        /// DynamoDB's message.
        message: String,
    },
    /// No credentials to sign with, or the request could not be signed.
    #[error("cannot sign the request: {0}")]
    Signing(String),
    /// An answer that is not what the API documents.
    #[error("unexpected answer from DynamoDB: {0}")]
    Response(String),
    /// An item the channel wrote came back inconsistent (a manifest that does not parse, chunks
    /// that are missing or do not match its length and checksum).
    #[error("corrupt item: {0}")]
    Corrupt(String),
}

impl DynamoDbError {
    /// Whether another attempt may succeed: no answer, throttling
    /// (`ProvisionedThroughputExceededException`, `ThrottlingException`, `RequestLimitExceeded`,
    /// …) or a server error (HTTP 5xx). A missing table, bad credentials, a refused request or a
    /// corrupt item are not.
    pub fn is_transient(&self) -> bool {
        match self {
            DynamoDbError::Unreachable { .. } => true,
            DynamoDbError::Api { status, code, .. } => {
                *status >= 500 || TRANSIENT_CODES.contains(&code.as_str())
            }
            DynamoDbError::Signing(_) | DynamoDbError::Response(_) | DynamoDbError::Corrupt(_) => {
                false
            }
        }
    }

    /// The API error code, if DynamoDB refused the request.
    pub fn code(&self) -> Option<&str> {
        match self {
            DynamoDbError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// Who signs: fixed credentials for a region, or the AWS chain's.
pub(super) struct Client {
    pub(super) http: reqwest::Client,
    /// The API's base URL (no trailing `/`).
    pub(super) endpoint: String,
    pub(super) region: String,
    pub(super) chain: &'static mlless_aws::AwsChain,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &crate::redact_url(&self.endpoint))
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Calls operation `op` with `body`, returning the answer's JSON.
    pub(super) async fn call(&self, op: &str, body: &Value) -> Result<Value, DynamoDbError> {
        let payload = serde_json::to_vec(body)
            .map_err(|e| DynamoDbError::Response(format!("cannot encode {op}: {e}")))?;
        let request = self.signed(op, payload).await?;
        trace!(endpoint = %self.endpoint, op, "dynamodb request");
        let unreachable = |e: reqwest::Error| DynamoDbError::Unreachable {
            endpoint: crate::redact_url(&self.endpoint),
            reason: mlless_aws::error_chain(&e),
        };
        let response = self.http.execute(request).await.map_err(unreachable)?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(unreachable)?;
        let json: Value = if bytes.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(&bytes) {
                Ok(json) => json,
                Err(_) if status.is_success() => {
                    return Err(DynamoDbError::Response(format!(
                        "{op} answered {status} with a body that is not JSON"
                    )));
                }
                Err(_) => Value::Null,
            }
        };
        if status.is_success() {
            return Ok(json);
        }
        let code = json
            .get("__type")
            .and_then(Value::as_str)
            .map(|t| t.rsplit('#').next().unwrap_or(t).to_string())
            .unwrap_or_else(|| format!("HTTP{}", status.as_u16()));
        let message = json
            .get("message")
            .or_else(|| json.get("Message"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(200).collect());
        Err(DynamoDbError::Api {
            status: status.as_u16(),
            code,
            message,
        })
    }

    /// A signed request for `op` (SigV4, service `dynamodb`).
    async fn signed(&self, op: &str, payload: Vec<u8>) -> Result<reqwest::Request, DynamoDbError> {
        let credentials = self
            .chain
            .credentials()
            .await
            .map_err(|e| DynamoDbError::Signing(e.to_string()))?;
        let url = format!("{}/", self.endpoint);
        let signing = |e: &dyn std::fmt::Display| DynamoDbError::Signing(e.to_string());
        let mut request = http::Request::post(&url)
            .header("content-type", "application/x-amz-json-1.0")
            .header("x-amz-target", format!("{TARGET_PREFIX}.{op}"))
            .body(payload)
            .map_err(|e| signing(&e))?;
        mlless_aws::sign_v4(&mut request, credentials, &self.region, "dynamodb")
            .map_err(|e| signing(&e))?;
        reqwest::Request::try_from(request).map_err(|e| signing(&e))
    }
}

/// Counts DynamoDB's request units in a [`RequestCounter`], as on-demand capacity bills them.
#[derive(Debug, Clone, Default)]
pub(super) struct Units {
    pub(super) counter: Option<RequestCounter>,
}

impl Units {
    /// Write units of writing (or deleting) an item of `size` bytes: one per started KB.
    pub(super) fn write(size: usize) -> u64 {
        (size as u64).div_ceil(1024).max(1)
    }

    /// Read units of a strongly consistent read of `size` bytes (one item, or the sum of a
    /// query page's items): one per started 4 KB, at least one.
    pub(super) fn read(size: usize) -> u64 {
        (size as u64).div_ceil(4096).max(1)
    }

    /// Counts `units` of `kind`.
    pub(super) fn add(&self, kind: Request, units: u64) {
        if let Some(counter) = &self.counter {
            counter.add(kind, units);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str) -> DynamoDbError {
        DynamoDbError::Api {
            status,
            code: code.into(),
            message: String::new(),
        }
    }

    #[test]
    fn throttling_and_outages_are_transient_the_rest_not() {
        assert!(api(400, "ProvisionedThroughputExceededException").is_transient());
        assert!(api(400, "ThrottlingException").is_transient());
        assert!(api(400, "RequestLimitExceeded").is_transient());
        assert!(api(503, "HTTP503").is_transient());
        assert!(api(500, "InternalServerError").is_transient());
        assert!(
            DynamoDbError::Unreachable {
                endpoint: "http://x".into(),
                reason: "refused".into()
            }
            .is_transient()
        );
        assert!(!api(400, "ResourceNotFoundException").is_transient());
        assert!(!api(400, "UnrecognizedClientException").is_transient());
        assert!(!api(403, "AccessDeniedException").is_transient());
        assert!(!api(400, "ValidationException").is_transient());
        assert!(!DynamoDbError::Corrupt("x".into()).is_transient());
    }

    #[test]
    fn units_round_up_as_dynamodb_bills_them() {
        assert_eq!(Units::write(0), 1);
        assert_eq!(Units::write(1024), 1);
        assert_eq!(Units::write(1025), 2);
        assert_eq!(Units::read(0), 1);
        assert_eq!(Units::read(4096), 1);
        assert_eq!(Units::read(4097), 2);
        assert_eq!(Units::write(400 * 1024), 400);
    }
}
