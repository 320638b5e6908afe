//! The driver end: invoke a deployed function through the Lambda Invoke API.
//!
//! One signed HTTP call per invocation (`POST /2015-03-31/functions/NAME/invocations`,
//! synchronous, with the log tail), made with `reqwest` — already in the build for S3 — and
//! signed with `aws-sigv4`. The `aws-sdk-lambda` crate would do the same call but brings the
//! whole Smithy client runtime and `aws-config` into the build for one operation.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use base64::Engine;
use tracing::{debug, warn};

use super::FunctionResponse;
use super::report::{FunctionError, PlatformReport};
use crate::{
    FunctionRequest, Invocation, InvocationReport, InvokeError, Invoker, KillSwitch, Outcome,
};

/// How long past its timeout the invoker waits for a function before it gives it up as timed
/// out (the platform ends it at its timeout; this covers the network and the platform's
/// bookkeeping).
const CLIENT_GRACE: Duration = Duration::from_secs(10);

/// Tries of a call that the platform throttles (HTTP 429) before the invocation fails.
const THROTTLE_TRIES: u32 = 12;

/// Tries of a call whose connection cannot be made (nothing was sent, so trying again is safe).
const CONNECT_TRIES: u32 = 4;

/// First pause after a throttled or unconnected call; it doubles with each try.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Longest pause between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(20);

/// Where the Lambda API is and who calls it: endpoint, region and credentials.
#[derive(Clone)]
pub struct LambdaConfig {
    endpoint: String,
    region: String,
    credentials: CredentialSource,
}

/// Whose credentials sign the calls.
#[derive(Clone)]
enum CredentialSource {
    /// Given explicitly ([`LambdaConfig::new`]).
    Fixed(Credentials),
    /// The AWS default chain, shared with the S3 store and refreshed before expiry.
    Chain(&'static mlless_aws::AwsChain),
}

impl LambdaConfig {
    /// Finds what the AWS CLI and SDKs find:
    ///
    /// - credentials and region from the AWS default chain ([`mlless_aws::shared`], the one the
    ///   S3 store uses: the environment, the shared config and credentials files with
    ///   `AWS_PROFILE`, SSO, web identity, the ECS and EC2 metadata endpoints), credentials
    ///   fetched when a call is signed and refreshed before they expire;
    /// - the endpoint from `AWS_ENDPOINT_URL_LAMBDA` or `AWS_ENDPOINT_URL` (e.g. an emulator on
    ///   loopback), else `https://lambda.REGION.amazonaws.com`.
    ///
    /// Whether the chain has credentials shows at the first call (an error naming every source
    /// tried).
    ///
    /// # Errors
    ///
    /// [`InvokeError::Config`] when no region is found.
    pub fn from_env() -> Result<Self, InvokeError> {
        let chain = mlless_aws::shared();
        let endpoint = chain
            .endpoint("lambda", None)
            .map_err(|e| InvokeError::Config {
                reason: e.to_string(),
            })?;
        Ok(Self {
            endpoint: endpoint.url,
            region: endpoint.region,
            credentials: CredentialSource::Chain(chain),
        })
    }

    /// A configuration from explicit parts; `endpoint` is the API's base URL, e.g.
    /// `http://127.0.0.1:9000`.
    pub fn new(
        endpoint: impl Into<String>,
        region: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        let endpoint: String = endpoint.into();
        Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            region: region.into(),
            credentials: CredentialSource::Fixed(Credentials::new(
                access_key_id,
                secret_access_key,
                session_token,
                None,
                "mlless",
            )),
        }
    }

    /// The API's base URL.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The credentials to sign the next call with.
    async fn credentials(&self) -> Result<Credentials, InvokeError> {
        match &self.credentials {
            CredentialSource::Fixed(credentials) => Ok(credentials.clone()),
            CredentialSource::Chain(chain) => {
                chain.credentials().await.map_err(|e| InvokeError::Config {
                    reason: e.to_string(),
                })
            }
        }
    }
}

/// Shows where and as whom, never the secret.
impl fmt::Debug for LambdaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LambdaConfig")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field(
                "credentials",
                &match &self.credentials {
                    CredentialSource::Fixed(c) => c.access_key_id().to_owned(),
                    CredentialSource::Chain(_) => "the AWS default chain".to_owned(),
                },
            )
            .finish_non_exhaustive()
    }
}

/// Invokes one deployed Lambda function (the `mlless` binary, see [`serve`](super::serve)) for
/// every invocation, synchronously, and reports what Lambda says of each.
///
/// - The report's duration is Lambda's billed duration when the response carries the log tail's
///   `REPORT` line, else what the function measured of its handler, else the round trip.
/// - Memory is the function's configured size (what is billed); a function configured with
///   another size than the job's `--memory-mb` is warned about once, and billed as configured.
/// - A throttled call (HTTP 429) is tried again with exponential backoff.
/// - A function error carries the function's own message. Lambda's timeouts, memory exhaustion
///   and dead processes become [`Outcome::TimedOut`], [`Outcome::MemoryExceeded`] and
///   [`Outcome::Failed`] without an exit code, as for a local process.
/// - Lambda cannot stop a running invocation: the [`KillSwitch`] abandons the call, and the
///   function runs on until it ends (a killed worker of a training run stops at its next
///   exchange, whose peers have stopped).
#[derive(Debug, Clone)]
pub struct LambdaInvoker {
    function: String,
    config: Arc<LambdaConfig>,
    client: reqwest::Client,
    memory_warned: Arc<AtomicBool>,
    timeout_warned: Arc<AtomicBool>,
}

impl LambdaInvoker {
    /// An invoker of `function` (a name, a partial or a full ARN, optionally `:QUALIFIER`).
    ///
    /// # Errors
    ///
    /// [`InvokeError::Config`] if the name is not one Lambda accepts or the HTTP client cannot
    /// be built.
    pub fn new(function: impl Into<String>, config: LambdaConfig) -> Result<Self, InvokeError> {
        let function = function.into();
        let valid = !function.is_empty()
            && function.len() <= 170
            && function
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '$' | '.'));
        if !valid {
            return Err(InvokeError::Config {
                reason: format!(
                    "{function:?} is not a Lambda function name (letters, digits, - and _, or an ARN)"
                ),
            });
        }
        // A synchronous invocation keeps its connection silent for up to 15 minutes; keepalive
        // probes stop a NAT or firewall from dropping it meanwhile (as AWS advises for Invoke).
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .tcp_keepalive(Duration::from_secs(30))
            .build()
            .map_err(|e| InvokeError::Config {
                reason: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Self {
            function,
            config: Arc::new(config),
            client,
            memory_warned: Arc::new(AtomicBool::new(false)),
            timeout_warned: Arc::new(AtomicBool::new(false)),
        })
    }

    /// An invoker of `function` configured from the standard AWS environment
    /// ([`LambdaConfig::from_env`]).
    ///
    /// # Errors
    ///
    /// As [`LambdaConfig::from_env`] and [`new`](Self::new).
    pub fn from_env(function: impl Into<String>) -> Result<Self, InvokeError> {
        Self::new(function, LambdaConfig::from_env()?)
    }

    /// The function this invoker invokes.
    pub fn function(&self) -> &str {
        &self.function
    }

    /// The URL of the Invoke API for this function.
    fn invoke_url(&self) -> String {
        format!(
            "{}/2015-03-31/functions/{}/invocations",
            self.config.endpoint,
            self.function.replace(':', "%3A")
        )
    }

    /// One signed Invoke request carrying `payload`.
    fn signed_request(
        &self,
        name: &str,
        payload: &[u8],
        credentials: Credentials,
    ) -> Result<reqwest::Request, InvokeError> {
        let url = self.invoke_url();
        let config_error = |reason: String| InvokeError::Config { reason };
        let mut request = http::Request::post(&url)
            .header("content-type", "application/json")
            .header("x-amz-invocation-type", "RequestResponse")
            .header("x-amz-log-type", "Tail")
            .body(payload.to_vec())
            .map_err(|e| config_error(format!("invalid Invoke request to {url}: {e}")))?;
        mlless_aws::sign_v4(&mut request, credentials, &self.config.region, "lambda")
            .map_err(|e| config_error(format!("cannot sign for {name}: {e}")))?;
        reqwest::Request::try_from(request)
            .map_err(|e| config_error(format!("invalid Invoke request to {url}: {e}")))
    }

    /// Sends the call, trying again while it is throttled or cannot connect.
    async fn call(&self, name: &str, payload: &[u8]) -> Result<reqwest::Response, InvokeError> {
        let mut throttled = 0;
        let mut unconnected = 0;
        let mut pause = FIRST_BACKOFF;
        loop {
            let credentials = self.config.credentials().await?;
            let request = self.signed_request(name, payload, credentials)?;
            match self.client.execute(request).await {
                Ok(response) if response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS => {
                    throttled += 1;
                    if throttled >= THROTTLE_TRIES {
                        return Ok(response);
                    }
                    warn!(
                        function = name,
                        try_ = throttled,
                        "throttled by Lambda; trying again"
                    );
                }
                Ok(response) => return Ok(response),
                Err(e) if e.is_connect() && unconnected + 1 < CONNECT_TRIES => {
                    unconnected += 1;
                    debug!(function = name, error = %e, "cannot connect to Lambda; trying again");
                }
                Err(e) => {
                    return Err(InvokeError::Platform {
                        function: name.to_owned(),
                        status: None,
                        message: format!(
                            "cannot reach the Lambda API at {}: {}",
                            self.config.endpoint,
                            mlless_aws::error_chain(&e)
                        ),
                    });
                }
            }
            tokio::time::sleep(jittered(pause)).await;
            pause = (pause * 2).min(MAX_BACKOFF);
        }
    }

    /// Runs one invocation to its end: the call, then the report.
    async fn run(
        self,
        request: FunctionRequest,
        kill: KillSwitch,
    ) -> Result<InvocationReport, InvokeError> {
        let started_at_unix_ms = crate::clock::unix_ms(SystemTime::now());
        let started = Instant::now();
        let name = request.name.clone();
        let limits = request.limits;
        let report =
            |outcome, duration_ms: Option<u64>, memory_mb: u32, peak_rss_mb| InvocationReport {
                name: name.clone(),
                pid: None,
                started_at_unix_ms,
                duration_ms: duration_ms
                    .unwrap_or_else(|| (started.elapsed().as_micros() as u64).div_ceil(1000))
                    .max(1),
                memory_mb,
                peak_rss_mb,
                outcome,
            };
        let call = async {
            let response = self.call(&name, &request.payload).await?;
            let status = response.status();
            let header = |key: &str| {
                response
                    .headers()
                    .get(key)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let function_error = header("x-amz-function-error");
            let platform_error = header("x-amzn-errortype");
            let log_tail = header("x-amz-log-result").and_then(|tail| {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(tail)
                    .ok()?;
                Some(String::from_utf8_lossy(&bytes).into_owned())
            });
            let body = response.bytes().await.map_err(|e| InvokeError::Platform {
                function: name.clone(),
                status: Some(status.as_u16()),
                message: format!("reading the response: {}", mlless_aws::error_chain(&e)),
            })?;
            Ok::<_, InvokeError>((status, function_error, platform_error, log_tail, body))
        };
        let deadline = limits.timeout + CLIENT_GRACE;
        let (status, function_error, platform_error, log_tail, body) = tokio::select! {
            () = kill.killed() => return Ok(report(Outcome::Killed, None, limits.memory_mb, 0.0)),
            ended = tokio::time::timeout(deadline, call) => match ended {
                Ok(ended) => ended?,
                Err(_) => {
                    let outcome = Outcome::TimedOut { limit_s: limits.timeout.as_secs_f64() };
                    return Ok(report(outcome, None, limits.memory_mb, 0.0));
                }
            },
        };
        // Lambda answers a function error with 200 and `X-Amz-Function-Error`; an emulator may
        // answer it with a 5xx and the same body, which an API error (typed by
        // `X-Amzn-ErrorType`) never has.
        let function_error = function_error.or_else(|| {
            (status.is_server_error() && platform_error.is_none() && is_function_error(&body))
                .then(|| "Unhandled".to_owned())
        });
        if !status.is_success() && function_error.is_none() {
            return Err(platform_failure(&name, status, platform_error, &body));
        }
        let platform = log_tail.as_deref().and_then(PlatformReport::from_log_tail);
        let own: Option<FunctionResponse> = function_error
            .is_none()
            .then(|| serde_json::from_slice(&body).ok())
            .flatten();
        let memory_mb = platform
            .and_then(|p| p.memory_size_mb)
            .or(own.map(|o| o.memory_mb).filter(|&m| m > 0))
            .unwrap_or(limits.memory_mb);
        if memory_mb != limits.memory_mb && !self.memory_warned.swap(true, Ordering::Relaxed) {
            warn!(
                "Lambda function {} is configured with {memory_mb} MB but the job asks for {} MB; \
                 it is billed as configured (deploy it with the job's --memory-mb)",
                self.function, limits.memory_mb
            );
        }
        // The platform's deadline is rounded up to a second; a lifetime a second short of the
        // job's is a shorter configured timeout, after which no hand-off is planned.
        if let Some(own) = own
            && own.lifetime_s > 0.0
            && own.lifetime_s + 1.0 < limits.timeout.as_secs_f64()
            && !self.timeout_warned.swap(true, Ordering::Relaxed)
        {
            warn!(
                "Lambda function {} times out after about {:.0} s but the job plans for {} s: \
                 it may be stopped before it hands off (deploy it with the job's --timeout-s)",
                self.function,
                own.lifetime_s,
                limits.timeout.as_secs_f64()
            );
        }
        let outcome = match function_error {
            None => Outcome::Succeeded,
            Some(_) => {
                FunctionError::parse(&body).outcome(limits.timeout, memory_mb, platform.as_ref())
            }
        };
        let duration_ms = platform
            .and_then(|p| p.billed_duration_ms)
            .or(own.map(|o| o.duration_ms));
        let peak = platform
            .and_then(|p| p.max_memory_used_mb)
            .or(own.map(|o| o.peak_rss_mb))
            .unwrap_or(0.0);
        Ok(report(outcome, duration_ms, memory_mb, peak))
    }
}

#[async_trait::async_trait]
impl Invoker for LambdaInvoker {
    async fn invoke(&self, request: FunctionRequest) -> Result<Invocation, InvokeError> {
        if request.limits.memory_mb == 0 {
            return Err(InvokeError::InvalidRequest {
                function: request.name,
                reason: "a memory limit of 0 MB".into(),
            });
        }
        let kill = KillSwitch::new();
        let name = request.name.clone();
        let task = tokio::spawn(self.clone().run(request, kill.clone()));
        Ok(Invocation::new(name, None, kill, task))
    }

    fn platform(&self) -> &str {
        "lambda"
    }
}

/// The error of a call Lambda refused (not a function error): its type and message.
fn platform_failure(
    name: &str,
    status: reqwest::StatusCode,
    error_type: Option<String>,
    body: &[u8],
) -> InvokeError {
    #[derive(serde::Deserialize)]
    struct ApiError {
        #[serde(alias = "Message", alias = "message", default)]
        message: String,
    }
    let message = serde_json::from_slice::<ApiError>(body)
        .map(|e| e.message)
        .unwrap_or_else(|_| String::from_utf8_lossy(body).trim().to_owned());
    let error_type = error_type
        .map(|t| t.split(':').next().unwrap_or_default().to_owned())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| format!("HTTP {}", status.as_u16()));
    InvokeError::Platform {
        function: name.to_owned(),
        status: Some(status.as_u16()),
        message: if message.is_empty() {
            error_type
        } else {
            format!("{error_type}: {message}")
        },
    }
}

/// Whether `body` is the JSON of a function error (`errorMessage`, `errorType`).
fn is_function_error(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("errorMessage").is_some() || v.get("errorType").is_some())
}

/// `pause` give or take a quarter, so that throttled callers do not come back in step.
fn jittered(pause: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let factor = 0.75 + f64::from(nanos % 1000) / 2000.0;
    pause.mul_f64(factor)
}
