//! The AWS credential and region chain that mlless's S3 store and Lambda invoker share.
//!
//! One chain, found as the AWS CLI and SDKs find it (the `aws-config` crate's default chain):
//! the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), the shared
//! config and credentials files with `AWS_PROFILE` (static keys, `credential_process`, SSO, an
//! assumed role), web identity (`AWS_WEB_IDENTITY_TOKEN_FILE`), the ECS container endpoint and
//! EC2 instance metadata; the region from `AWS_REGION`, the profile or instance metadata.
//!
//! Credentials are kept until [`REFRESH_BEFORE`] ahead of their expiry and then fetched again, so
//! a run of hours outlives the temporary credentials it started with.
//!
//! ```no_run
//! # async fn f() -> Result<(), mlless_aws::AwsError> {
//! let chain = mlless_aws::shared();
//! let credentials = chain.credentials().await?;
//! println!("{} in {:?}", credentials.access_key_id(), chain.region());
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use aws_config::BehaviorVersion;
pub use aws_credential_types::Credentials;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use tokio::sync::Mutex;
use tracing::debug;

/// How long before their expiry credentials are fetched again.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// Errors of the chain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AwsError {
    /// No source of the chain had credentials.
    #[error(
        "no AWS credentials: tried the environment (AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY), profile {profile} of the shared config and credentials files \
         (~/.aws/config and ~/.aws/credentials, or AWS_CONFIG_FILE and \
         AWS_SHARED_CREDENTIALS_FILE: keys, credential_process, SSO, assumed roles), web \
         identity (AWS_WEB_IDENTITY_TOKEN_FILE), the ECS container endpoint and EC2 instance \
         metadata: {reason}"
    )]
    NoCredentials {
        /// The profile looked up (`AWS_PROFILE`, or `default`).
        profile: String,
        /// What the chain said.
        reason: String,
    },
    /// The chain could not be loaded at all.
    #[error("could not load the AWS configuration: {0}")]
    Load(String),
    /// No source of the chain named a region.
    #[error(
        "no AWS region: set AWS_REGION (e.g. eu-west-1) or `region` in the profile's section of \
         ~/.aws/config"
    )]
    NoRegion,
}

/// Where a service's API is ([`AwsChain::endpoint`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The API's base URL, without a trailing `/`.
    pub url: String,
    /// The region requests are signed for.
    pub region: String,
}

/// Credentials and region from the default chain, credentials cached and refreshed.
pub struct AwsChain {
    region: Option<String>,
    profile: String,
    credentials: CachedCredentials<Option<SharedCredentialsProvider>>,
}

impl fmt::Debug for AwsChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsChain")
            .field("region", &self.region)
            .field("profile", &self.profile)
            .finish_non_exhaustive()
    }
}

impl AwsChain {
    /// Loads the default chain (reads the environment and the shared files; fetches nothing
    /// until credentials are asked for, but may ask instance metadata for the region when none
    /// is configured, unless `AWS_EC2_METADATA_DISABLED=true`).
    pub async fn load() -> AwsChain {
        let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
        let profile = std::env::var("AWS_PROFILE")
            .ok()
            .filter(|p| !p.trim().is_empty())
            .unwrap_or_else(|| "default".into());
        let region = config.region().map(|r| r.as_ref().to_owned());
        debug!(?region, %profile, "AWS configuration loaded");
        AwsChain {
            region,
            profile,
            credentials: CachedCredentials::new(config.credentials_provider()),
        }
    }

    /// The region the chain found, if any.
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// Where the API of `service` (`lambda`, `dynamodb`: the name in its endpoint) is, as the
    /// AWS SDKs find it: `given` if any, else `AWS_ENDPOINT_URL_{SERVICE}` (upper case), else
    /// `AWS_ENDPOINT_URL`, else `https://{service}.{region}.amazonaws.com`.
    ///
    /// # Errors
    ///
    /// [`AwsError::NoRegion`] when the chain found no region.
    pub fn endpoint(&self, service: &str, given: Option<String>) -> Result<Endpoint, AwsError> {
        let region = self.region.clone().ok_or(AwsError::NoRegion)?;
        let setting = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let url = given
            .or_else(|| setting(&format!("AWS_ENDPOINT_URL_{}", service.to_uppercase())))
            .or_else(|| setting("AWS_ENDPOINT_URL"))
            .unwrap_or_else(|| format!("https://{service}.{region}.amazonaws.com"));
        Ok(Endpoint {
            url: url.trim_end_matches('/').to_owned(),
            region,
        })
    }

    /// Credentials valid for at least [`REFRESH_BEFORE`] (or without expiry), fetched again once
    /// the ones held are that close to expiring.
    ///
    /// # Errors
    ///
    /// [`AwsError::NoCredentials`], naming every source tried.
    pub async fn credentials(&self) -> Result<Credentials, AwsError> {
        self.credentials
            .get()
            .await
            .map_err(|reason| AwsError::NoCredentials {
                profile: self.profile.clone(),
                reason,
            })
    }
}

/// An error with its causes on one line, `: `-separated: what the errors of calls to AWS's APIs
/// and of the chain's sources say (reqwest's and the SDK's own messages are terse).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The process's one chain, loaded on first use. Safe to call from synchronous code and from
/// inside an async runtime: the load runs once, on a thread of its own.
pub fn shared() -> &'static AwsChain {
    static CHAIN: OnceLock<AwsChain> = OnceLock::new();
    CHAIN.get_or_init(|| {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // A runtime of its own, so that loading never blocks the caller's.
                    match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => runtime.block_on(AwsChain::load()),
                        Err(e) => AwsChain {
                            region: None,
                            profile: "default".into(),
                            credentials: CachedCredentials::failing(format!(
                                "could not start the runtime that loads the chain: {e}"
                            )),
                        },
                    }
                })
                .join()
                .unwrap_or_else(|_| AwsChain {
                    region: None,
                    profile: "default".into(),
                    credentials: CachedCredentials::failing(
                        "loading the AWS configuration panicked".into(),
                    ),
                })
        })
    })
}

/// Where credentials come from, for [`CachedCredentials`].
trait Source: Send + Sync {
    /// Fresh credentials, or why there are none.
    fn fetch(&self) -> impl Future<Output = Result<Credentials, String>> + Send;
}

impl Source for Option<SharedCredentialsProvider> {
    async fn fetch(&self) -> Result<Credentials, String> {
        match self {
            Some(provider) => provider
                .provide_credentials()
                .await
                .map_err(|e| error_chain(&e)),
            None => Err("no credentials provider was configured".into()),
        }
    }
}

/// Credentials of a [`Source`], kept until [`REFRESH_BEFORE`] ahead of their expiry. Callers
/// that ask while a fetch is under way wait for it instead of fetching again.
struct CachedCredentials<S> {
    source: S,
    /// A load error that every call reports (the chain could not be built).
    broken: Option<String>,
    current: Mutex<Option<Credentials>>,
}

impl<S: Source> CachedCredentials<S> {
    fn new(source: S) -> Self {
        Self {
            source,
            broken: None,
            current: Mutex::new(None),
        }
    }

    async fn get(&self) -> Result<Credentials, String> {
        if let Some(reason) = &self.broken {
            return Err(reason.clone());
        }
        let mut current = self.current.lock().await;
        if let Some(credentials) = current.as_ref()
            && fresh(credentials, SystemTime::now())
        {
            return Ok(credentials.clone());
        }
        let credentials = self.source.fetch().await?;
        debug!(expiry = ?credentials.expiry(), "fetched AWS credentials");
        *current = Some(credentials.clone());
        Ok(credentials)
    }
}

impl CachedCredentials<Option<SharedCredentialsProvider>> {
    fn failing(reason: String) -> Self {
        Self {
            source: None,
            broken: Some(reason),
            current: Mutex::new(None),
        }
    }
}

/// Whether `credentials` are good for at least [`REFRESH_BEFORE`] after `now`.
fn fresh(credentials: &Credentials, now: SystemTime) -> bool {
    credentials
        .expiry()
        .is_none_or(|expiry| expiry > now + REFRESH_BEFORE)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Hands out `key-1`, `key-2`, … each expiring `lifetime` after it was fetched.
    struct Counting {
        fetches: AtomicU32,
        lifetime: Duration,
    }

    impl Source for Counting {
        async fn fetch(&self) -> Result<Credentials, String> {
            let n = self.fetches.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(Credentials::new(
                format!("key-{n}"),
                "secret",
                Some("token".into()),
                Some(SystemTime::now() + self.lifetime),
                "test",
            ))
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn credentials_are_kept_until_near_their_expiry_then_fetched_again() {
        let cache = CachedCredentials::new(Counting {
            fetches: AtomicU32::new(0),
            lifetime: REFRESH_BEFORE + Duration::from_millis(300),
        });
        runtime().block_on(async {
            assert_eq!(cache.get().await.expect("first").access_key_id(), "key-1");
            assert_eq!(cache.get().await.expect("cached").access_key_id(), "key-1");
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert_eq!(
                cache.get().await.expect("refreshed").access_key_id(),
                "key-2"
            );
        });
        assert_eq!(cache.source.fetches.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn credentials_without_expiry_are_fetched_once() {
        let never = Credentials::new("k", "s", None, None, "test");
        assert!(fresh(
            &never,
            SystemTime::now() + Duration::from_secs(1 << 30)
        ));
        let soon = Credentials::new(
            "k",
            "s",
            None,
            Some(SystemTime::now() + REFRESH_BEFORE / 2),
            "test",
        );
        assert!(!fresh(&soon, SystemTime::now()));
    }

    #[test]
    fn no_credentials_names_every_source_and_the_profile() {
        let error = AwsError::NoCredentials {
            profile: "research".into(),
            reason: "the profile was not found".into(),
        }
        .to_string();
        for source in [
            "AWS_ACCESS_KEY_ID",
            "profile research",
            "AWS_SHARED_CREDENTIALS_FILE",
            "SSO",
            "web identity",
            "ECS container endpoint",
            "EC2 instance metadata",
            "the profile was not found",
        ] {
            assert!(error.contains(source), "{source} in {error}");
        }
    }
}

/// Why a request could not be signed ([`sign_v4`]): the signer's own message.
#[cfg(feature = "sigv4")]
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SigningError(String);

/// Signs `request` (its body whole in memory) with AWS Signature Version 4 for `service` (e.g.
/// `lambda`, `dynamodb`) in `region`, with `credentials`, at the time of the call: the
/// `authorization`, `x-amz-date` and, with a session token, `x-amz-security-token` headers are
/// added to it. The one signer of the calls mlless makes itself, without an AWS SDK client.
#[cfg(feature = "sigv4")]
pub fn sign_v4(
    request: &mut http::Request<Vec<u8>>,
    credentials: aws_credential_types::Credentials,
    region: &str,
    service: &str,
) -> Result<(), SigningError> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    use aws_sigv4::sign::v4;

    let failed = |e: &dyn fmt::Display| SigningError(e.to_string());
    let identity = credentials.into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| failed(&e))?
        .into();
    let url = request.uri().to_string();
    let headers = request
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
    let signable = SignableRequest::new(
        request.method().as_str(),
        &url,
        headers,
        SignableBody::Bytes(request.body()),
    )
    .map_err(|e| failed(&e))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| failed(&e))?
        .into_parts();
    instructions.apply_to_request_http1x(request);
    Ok(())
}
