//! The factory: [`ChannelScheme::parse`] checks a channel URL, [`open_channel_with`] connects
//! the backend it names. The one `match` that knows how to open each backend.

use std::sync::Arc;

use tracing::debug;

#[cfg(feature = "dynamodb")]
use super::dynamodb::DynamoDbChannel;
#[cfg(feature = "memcached")]
use super::memcached::MemcachedChannel;
use super::object_store::ObjectStoreChannel;
#[cfg(feature = "ps")]
use super::ps::PsChannel;
#[cfg(feature = "redis")]
use super::redis::RedisChannel;
use super::retry::{ChannelOptions, RetryingChannel};
use super::{Channel, ChannelError};
use crate::channel::Result;
use crate::parse::BuiltBackend;
use crate::parse::ChannelScheme;
use crate::redact::redact_url;
use crate::store::Store;

/// The directory of the shared-memory channels of runs on a local directory (see
/// [`default_channel_store`]); each user has one below it, `{uid}`.
const SHARED_MEMORY_CHANNELS: &str = "/dev/shm/mlless-channel";

/// The store of the default channel (`--channel store`) of a run whose objects are in `store`:
/// the store's `channel/`, except for a store on a local directory on Linux, whose channel lives
/// in shared memory (`/dev/shm/mlless-channel/{uid}`, a tmpfs) if it can be written there. The
/// channel's files are many, small and short-lived: a tmpfs makes and removes them at memory
/// speed, where a disk file system slows down as they churn (ext4 scans the inodes it freed
/// lately before it hands out one: ML-100k-shaped PMF at P = 4 took 5–10 ms a step on this
/// machine's disk against 2.4–3.0 ms in shared memory). Each job has its own directory there,
/// named by its job id, which the channel's cleanup removes; the local functions of a run all see
/// it, being on the machine that holds the run's store.
async fn default_channel_store(store: &Store) -> Store {
    #[cfg(target_os = "linux")]
    if let Some(dir) = store.local_dir("")
        && std::path::Path::new(SHARED_MEMORY_CHANNELS)
            .parent()
            .is_some_and(std::path::Path::is_dir)
    {
        use std::os::unix::fs::MetadataExt;
        if let Ok(owner) = std::fs::metadata(&dir).map(|meta| meta.uid()) {
            let shared = Store::open(&format!("{SHARED_MEMORY_CHANNELS}/{owner}"));
            let writable = match shared {
                Ok(memory) => memory.check_writable().await.map(|()| memory),
                Err(error) => Err(error),
            };
            match writable {
                Ok(memory) => return memory,
                Err(error) => debug!(%error, "no channel in shared memory: in the run's store"),
            }
        }
    }
    store.child("channel")
}

/// Opens the channel of job `job_id`, with the default [`ChannelOptions`] (an outage of a remote
/// channel is ridden out for [`DEFAULT_CHANNEL_GRACE`](crate::DEFAULT_CHANNEL_GRACE)); see
/// [`open_channel_with`].
///
/// # Cancel safety
///
/// Cancel-safe: opening writes nothing; a cancelled open drops its connections.
pub async fn open_channel(
    url: Option<&str>,
    store: &Store,
    job_id: &str,
) -> Result<Arc<dyn Channel>> {
    open_channel_with(url, store, job_id, ChannelOptions::default()).await
}

/// Opens the channel of job `job_id`.
///
/// `url` ([`ChannelScheme::parse`]):
/// - `None` or `"store"`: an [`ObjectStoreChannel`] on `store.child("channel")` — the channel
///   lives wherever the run's data is (the default; no server needed);
/// - a directory path, `file://`, `memory://` or `s3://` URL: an [`ObjectStoreChannel`] on that
///   store (see [`Store::open`]);
/// - `redis://` / `rediss://` (a comma-separated list shards the exchange): a
///   [`RedisChannel`];
/// - `memcached://host:port`: a [`MemcachedChannel`];
/// - `ps://:SECRET@host:port` (a comma-separated list shards the exchange): a [`PsChannel`] on
///   `mlless ps` servers;
/// - `dynamodb://TABLE`: a [`DynamoDbChannel`] (region, credentials and endpoint from the AWS
///   environment), which counts its request units in `store`'s
///   [`RequestCounter`](crate::RequestCounter), if it has one;
/// - anything else is [`ChannelError::InvalidUrl`] listing the supported forms.
///
/// A backend that this build left out (`redis`, `memcached`, `s3`, `ps` or `dynamodb` feature off, see
/// [`BuiltBackend::is_built`]) is [`ChannelError::NotBuilt`] naming the feature, before
/// anything is opened.
///
/// Channels on a server (Redis, Memcached, DynamoDB, and object-store channels on S3) are wrapped in a
/// [`RetryingChannel`] with `options.grace`: operations that fail on the connection are retried
/// with backoff, and fail with [`ChannelError::Unavailable`] once the outage outlasts the grace.
/// Local and in-memory channels are not wrapped. Connecting itself is not retried: a server that
/// cannot be reached when the channel is opened is [`ChannelError::InvalidUrl`] at once.
///
/// An object-store channel counts its requests in `store`'s
/// [`RequestCounter`](crate::RequestCounter), if it has one.
///
/// # Cancel safety
///
/// Cancel-safe: opening writes nothing; a cancelled open drops its connections.
pub async fn open_channel_with(
    url: Option<&str>,
    store: &Store,
    job_id: &str,
    options: ChannelOptions,
) -> Result<Arc<dyn Channel>> {
    let scheme = ChannelScheme::parse(url)?;
    let url = url.map(str::trim).unwrap_or_default();
    if let Some(feature) = scheme.required_feature()
        && !scheme.is_built()
    {
        return Err(not_built(url, feature));
    }
    let channel_store = match scheme {
        ChannelScheme::RunStore => default_channel_store(store).await,
        ChannelScheme::ObjectStore(_) => Store::open(url)?,
        ChannelScheme::Redis { .. } => return connect_redis(url, job_id, options).await,
        ChannelScheme::Memcached => return connect_memcached(url, job_id, options).await,
        ChannelScheme::Ps { .. } => return connect_ps(url, job_id, options).await,
        ChannelScheme::DynamoDb => return connect_dynamodb(url, store, job_id, options).await,
    };
    // Its requests count where the run store's do.
    let channel_store = match store.request_counter() {
        Some(counter) => channel_store.with_request_counter(counter.clone()),
        None => channel_store,
    };
    let channel = ObjectStoreChannel::new(channel_store, job_id)?;
    debug!(channel = %channel.describe(), kind = ?channel.store().kind(), "channel opened");
    if channel.store().kind().is_remote() {
        return Ok(Arc::new(RetryingChannel::new(channel, options.grace)));
    }
    Ok(Arc::new(channel))
}

/// The error for a backend that this build left out (its `feature` was off).
fn not_built(url: &str, feature: &'static str) -> ChannelError {
    ChannelError::NotBuilt {
        url: redact_url(url),
        feature,
    }
}

#[cfg(feature = "redis")]
async fn connect_redis(
    url: &str,
    job_id: &str,
    options: ChannelOptions,
) -> Result<Arc<dyn Channel>> {
    // The decorator retries its commands: the channel does not as well.
    let channel = RedisChannel::connect(url, job_id)
        .await?
        .with_retry(super::retry::RetryPolicy::none());
    Ok(retrying(channel, options))
}

/// Without the `redis` feature: [`ChannelError::NotBuilt`] (as [`open_channel_with`] answers
/// before it gets here).
#[cfg(not(feature = "redis"))]
async fn connect_redis(
    url: &str,
    _job_id: &str,
    _options: ChannelOptions,
) -> Result<Arc<dyn Channel>> {
    Err(not_built(url, "redis"))
}

#[cfg(feature = "memcached")]
async fn connect_memcached(
    url: &str,
    job_id: &str,
    options: ChannelOptions,
) -> Result<Arc<dyn Channel>> {
    // The decorator retries its exchanges: the channel does not as well.
    let channel = MemcachedChannel::connect(url, job_id)
        .await?
        .with_retry(super::retry::RetryPolicy::none());
    Ok(retrying(channel, options))
}

/// Without the `memcached` feature: [`ChannelError::NotBuilt`] (as [`open_channel_with`]
/// answers before it gets here).
#[cfg(not(feature = "memcached"))]
async fn connect_memcached(
    url: &str,
    _job_id: &str,
    _options: ChannelOptions,
) -> Result<Arc<dyn Channel>> {
    Err(not_built(url, "memcached"))
}

#[cfg(feature = "ps")]
async fn connect_ps(url: &str, job_id: &str, options: ChannelOptions) -> Result<Arc<dyn Channel>> {
    let channel = PsChannel::connect(url, job_id).await?;
    Ok(retrying(channel, options))
}

/// Without the `ps` feature: [`ChannelError::NotBuilt`] (as [`open_channel_with`] answers
/// before it gets here).
#[cfg(not(feature = "ps"))]
async fn connect_ps(
    url: &str,
    _job_id: &str,
    _options: ChannelOptions,
) -> Result<Arc<dyn Channel>> {
    Err(not_built(url, "ps"))
}

#[cfg(feature = "dynamodb")]
async fn connect_dynamodb(
    url: &str,
    store: &Store,
    job_id: &str,
    options: ChannelOptions,
) -> Result<Arc<dyn Channel>> {
    let mut channel = DynamoDbChannel::connect(url, job_id).await?;
    // Its request units count where the run store's requests do.
    if let Some(counter) = store.request_counter() {
        channel = channel.with_request_counter(counter.clone());
    }
    Ok(retrying(channel, options))
}

/// Without the `dynamodb` feature: [`ChannelError::NotBuilt`] (as [`open_channel_with`]
/// answers before it gets here).
#[cfg(not(feature = "dynamodb"))]
async fn connect_dynamodb(
    url: &str,
    _store: &Store,
    _job_id: &str,
    _options: ChannelOptions,
) -> Result<Arc<dyn Channel>> {
    Err(not_built(url, "dynamodb"))
}

/// A channel on a server, opened: wrapped in a [`RetryingChannel`] with the options' grace.
#[cfg(any(
    feature = "redis",
    feature = "memcached",
    feature = "ps",
    feature = "dynamodb"
))]
fn retrying<C: Channel + 'static>(channel: C, options: ChannelOptions) -> Arc<dyn Channel> {
    debug!(channel = %channel.describe(), grace = ?options.grace, "channel opened");
    Arc::new(RetryingChannel::new(channel, options.grace))
}
