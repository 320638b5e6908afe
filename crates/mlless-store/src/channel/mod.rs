//! [`Channel`]: how functions exchange updates and control messages, its errors, and its
//! backends.
//!
//! Functions cannot talk to each other directly, so every update goes through an external store.
//! A channel carries two kinds of data, both namespaced by the job id:
//! - *messages*: one payload per (topic, step, worker), published once and collected by everyone
//!   who needs that step (updates, per-step statistics, final replicas);
//! - *keys*: small named values where the last write wins (stop signal, progress).
//!
//! # Layout
//!
//! In the manner of `object_store`: one trait, a module per backend, decorators that know no
//! backend, and one conformance suite ([`crate::conformance`]) that every backend runs.
//!
//! | module | what |
//! | --- | --- |
//! | this one | the [`Channel`] trait, what its methods name ([`MessageId`], [`StepMessages`], [`StepExchange`]), [`ChannelError`] (which says whether a failure is worth retrying: [`ChannelError::is_transient`]), the name checks the backends share |
//! | [`crate::parse`] (outside) | [`ChannelScheme`](crate::ChannelScheme): the one place a URL's scheme is matched |
//! | [`open`] | the factory: [`ChannelScheme::parse`](crate::ChannelScheme::parse), [`open_channel`](open::open_channel) |
//! | [`object_store`] | [`ObjectStoreChannel`](object_store::ObjectStoreChannel) on any [`Store`](crate::Store) |
//! | [`redis`] | [`RedisChannel`](redis::RedisChannel) (feature `redis`) |
//! | [`memcached`] | [`MemcachedChannel`](memcached::MemcachedChannel) (feature `memcached`) |
//! | [`ps`] | [`PsChannel`](ps::PsChannel) and [`PsServer`](ps::PsServer), the hybrid parameter server (feature `ps`) |
//! | [`dynamodb`] | [`DynamoDbChannel`](dynamodb::DynamoDbChannel) (feature `dynamodb`) |
//! | [`in_process`] | [`InProcessChannel`](in_process::InProcessChannel), for functions that are tasks of one process (no URL) |
//! | [`retry`] | the one retry module: [`RetryPolicy`](retry::RetryPolicy), [`Transient`](retry::Transient), [`run`](retry::run), and [`RetryingChannel`](retry::RetryingChannel), the decorator that rides out outages |
//! | `collect` | the collect-with-backoff loop of the backends without a blocking read |
//! | [`average`] | [`Share`](average::Share) and [`Averaged`](average::Averaged), what [`Channel::publish_and_average`] takes and gives, and its default (the worker averages) |
//!
//! A new backend is a module here that implements [`Channel`], marks its
//! [`ChannelError::Backend`] errors transient or not, and passes the conformance suite; its URL
//! scheme is a variant of [`ChannelScheme`](crate::ChannelScheme), and the compiler then names
//! every `match` that must say what the new scheme means (opening it in [`open`], billing it in
//! the runtime). A backend that needs a dependency of its own is a cargo feature (default on):
//! its module is `#[cfg]`-gated, [`crate::parse`] names the feature, and [`open`] answers
//! [`ChannelError::NotBuilt`] when it is off.

use std::time::Duration;

use bytes::Bytes;

use crate::store::{StoreError, check_segment};

pub mod average;
pub(crate) mod collect;
#[cfg(feature = "dynamodb")]
pub mod dynamodb;
pub mod in_process;
mod local_files;
#[cfg(feature = "memcached")]
pub mod memcached;
pub mod object_store;
pub mod open;
#[cfg(feature = "ps")]
pub mod ps;
#[cfg(feature = "redis")]
pub mod redis;
pub mod retry;
#[cfg(target_os = "linux")]
mod wake;
#[cfg(not(target_os = "linux"))]
#[path = "wake_polling.rs"]
mod wake;

/// Identifies a worker of a job: 0, 1, …, P − 1.
pub type WorkerId = u32;

/// Names one message of a channel: worker `from`'s of `step` on `topic`. A channel keeps one
/// message per id ([`Channel::publish`] is idempotent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MessageId<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The step.
    pub step: u64,
    /// The worker that publishes it.
    pub from: WorkerId,
}

impl<'a> MessageId<'a> {
    /// Worker `from`'s message of `step` on `topic`.
    pub const fn new(topic: &'a str, step: u64, from: WorkerId) -> Self {
        MessageId { topic, step, from }
    }
}

/// The messages of one step on one topic from some workers, in the order of `from`: what
/// [`Channel::collect`], [`Channel::poll`] and [`Channel::discard`] act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepMessages<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The step.
    pub step: u64,
    /// The workers whose messages they are, in the order of a result.
    pub from: &'a [WorkerId],
}

impl<'a> StepMessages<'a> {
    /// The messages of `step` on `topic` from the workers of `from`.
    pub const fn new(topic: &'a str, step: u64, from: &'a [WorkerId]) -> Self {
        StepMessages { topic, step, from }
    }

    /// The id of each message, in the order of `from`.
    pub fn ids(self) -> impl Iterator<Item = MessageId<'a>> {
        let StepMessages { topic, step, from } = self;
        from.iter().map(move |&w| MessageId::new(topic, step, w))
    }
}

/// One worker's side of a step's exchange on a channel: what
/// [`Channel::publish_and_collect`] and [`Channel::publish_and_average`] take besides the
/// worker's own message or share. Worker `from` publishes its message of (`topic`, `step`), then
/// waits at most `timeout` for the messages of `peers` (which may include `from`) of the same
/// step and topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepExchange<'a> {
    /// The topic published and collected.
    pub topic: &'a str,
    /// The step published and collected.
    pub step: u64,
    /// The worker publishing.
    pub from: WorkerId,
    /// The workers whose messages are collected, in the order of the result.
    pub peers: &'a [WorkerId],
    /// How long to wait for the peers' messages.
    pub timeout: Duration,
}

impl<'a> StepExchange<'a> {
    /// The message that worker `from` publishes.
    pub const fn own(&self) -> MessageId<'a> {
        MessageId::new(self.topic, self.step, self.from)
    }

    /// The messages collected: the peers'.
    pub const fn peers_messages(&self) -> StepMessages<'a> {
        StepMessages::new(self.topic, self.step, self.peers)
    }

    /// The same exchange, waiting at most `timeout` (what is left of it, for a retry).
    pub const fn with_timeout(self, timeout: Duration) -> Self {
        StepExchange { timeout, ..self }
    }
}

/// What a channel's operations return: their value, or the [`ChannelError`] that stopped them.
pub type Result<T, E = ChannelError> = std::result::Result<T, E>;

/// Errors of a channel; every message names the channel's endpoint (never a secret).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// [`Channel::collect`] gave up: some workers' messages did not arrive in time.
    #[error(
        "timed out after {waited:?} on channel {endpoint} waiting for step {step} of topic \
         {topic:?}: no message from worker(s) {missing:?}"
    )]
    Timeout {
        /// The topic collected.
        topic: String,
        /// The step collected.
        step: u64,
        /// The workers whose messages were missing, in the order they were asked for.
        missing: Vec<WorkerId>,
        /// How long the collect waited.
        waited: Duration,
        /// Where the channel is ([`Channel::describe`]).
        endpoint: String,
    },
    /// The store behind the channel failed (its message names the object's location).
    #[error("channel store error: {0}")]
    Store(#[from] StoreError),
    /// The server behind the channel (Redis, Memcached, a parameter server, DynamoDB) failed a
    /// command.
    #[error("channel {endpoint}: {operation} failed: {source}")]
    Backend {
        /// The server, without credentials.
        endpoint: String,
        /// What was being done, naming the key or item.
        operation: String,
        /// Whether the failure was on the connection rather than about the request (the
        /// connection was refused, reset or dropped, the server did not answer in time or is
        /// loading its data): worth another attempt once the server is back. The backend sets
        /// it, since only it knows its client's errors; see [`ChannelError::is_transient`].
        transient: bool,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server behind the channel stayed unreachable for longer than the grace of a
    /// [`RetryingChannel`](crate::RetryingChannel) (`--channel-grace`).
    #[error(
        "channel {endpoint} unreachable for longer than --channel-grace {} ({operation} kept \
         failing for {}): {source}",
        seconds(.grace),
        seconds(.waited)
    )]
    Unavailable {
        /// The server that could not be reached, without credentials.
        endpoint: String,
        /// The operation that gave up (`publish`, `collect`, …).
        operation: String,
        /// The grace the outage outlasted.
        grace: Duration,
        /// How long the operation kept failing.
        waited: Duration,
        /// The last failure.
        #[source]
        source: Box<ChannelError>,
    },
    /// The channel URL cannot be opened.
    #[error("cannot open channel {url}: {reason}")]
    InvalidUrl {
        /// The URL (credentials, if any were embedded, are redacted).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The channel URL names a backend that this build left out: the cargo feature of
    /// `mlless-store` that builds it
    /// ([`BuiltBackend::required_feature`](crate::BuiltBackend::required_feature)) was off.
    #[error(
        "cannot open channel {url}: this mlless was built without the `{feature}` feature \
         (of mlless-store, on by default), which this backend needs"
    )]
    NotBuilt {
        /// The URL (credentials, if any were embedded, are redacted).
        url: String,
        /// The feature that builds the backend: `redis`, `memcached`, `s3`, `ps` or `dynamodb`.
        feature: &'static str,
    },
    /// A worker's share of a mean ([`Channel::publish_and_average`]) cannot be read or does not
    /// fit the model.
    #[error(
        "channel {endpoint}: the share of worker {worker} in step {step} of topic {topic:?}: {reason}"
    )]
    BadShare {
        /// Where the channel is.
        endpoint: String,
        /// The topic.
        topic: String,
        /// The step.
        step: u64,
        /// The worker whose share it is.
        worker: WorkerId,
        /// What is wrong with it.
        reason: String,
    },
    /// A job id, topic or key is not usable as a name on this channel.
    #[error("invalid {what} {name:?} on channel {endpoint}: {reason}")]
    InvalidName {
        /// `"job id"`, `"topic"`, or `"key"`.
        what: &'static str,
        /// The offending name.
        name: String,
        /// What is wrong with it.
        reason: String,
        /// Where the channel is.
        endpoint: String,
    },
}

/// A URL that names no channel is a channel that cannot be opened.
impl From<mlless_io_types::InvalidUrl> for ChannelError {
    fn from(invalid: mlless_io_types::InvalidUrl) -> Self {
        ChannelError::InvalidUrl {
            url: invalid.url,
            reason: invalid.reason,
        }
    }
}

impl ChannelError {
    /// Whether the error says the server could not be reached (worth another attempt once it
    /// is back) rather than something about the request: what
    /// [`RetryingChannel`](retry::RetryingChannel) retries.
    ///
    /// Transient: a [`ChannelError::Backend`] its backend marked so (Redis: an I/O error,
    /// dropped connection, timeout, or `LOADING`/`TRYAGAIN` reply; Memcached and the parameter
    /// server: an I/O error, closed connection or timeout; DynamoDB: no answer, throttling or
    /// HTTP 5xx), and a [`ChannelError::Store`] whose backend error is
    /// ([`StoreError::is_transient`]: an I/O error of a connection kind, or an HTTP request that
    /// failed to connect, timed out, was interrupted or could not be sent). Everything else is
    /// not: [`ChannelError::Timeout`] (the messages did not come), invalid names and URLs,
    /// corrupt values, refused commands, missing objects, backends this build left out
    /// ([`ChannelError::NotBuilt`]), and [`ChannelError::Unavailable`] itself (the grace is
    /// already spent).
    pub fn is_transient(&self) -> bool {
        match self {
            ChannelError::Backend { transient, .. } => *transient,
            ChannelError::Store(e) => e.is_transient(),
            ChannelError::Timeout { .. }
            | ChannelError::Unavailable { .. }
            | ChannelError::InvalidUrl { .. }
            | ChannelError::NotBuilt { .. }
            | ChannelError::BadShare { .. }
            | ChannelError::InvalidName { .. } => false,
        }
    }
}

/// A duration in seconds for messages: `10 s`, `1.5 s`.
pub(crate) fn seconds(d: &Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} s")
}

/// The URLs of a comma-separated list of servers (Redis shards, parameter servers), or
/// [`ChannelError::InvalidUrl`] with `form` (the forms expected) when it names none.
#[cfg(any(feature = "redis", feature = "ps"))]
pub(crate) fn server_urls<'a>(urls: &'a str, form: &str) -> Result<Vec<&'a str>> {
    let list = crate::parse::url_list(urls);
    if list.is_empty() {
        return Err(ChannelError::InvalidUrl {
            url: crate::redact::redact_url(urls.trim()),
            reason: form.to_string(),
        });
    }
    Ok(list)
}

/// The segment under which the object-store and Redis channels keep keys; not usable as a
/// topic there.
pub(crate) const KEYS_SEGMENT: &str = "keys";

/// Checks a name (`what`: `"job id"`, `"topic"` or `"key"`) with `rule`; a refusal is
/// [`ChannelError::InvalidName`] naming the name, the reason and the channel's `endpoint`.
pub(crate) fn check_name(
    what: &'static str,
    name: &str,
    endpoint: impl FnOnce() -> String,
    rule: impl FnOnce(&str) -> Result<(), String>,
) -> Result<()> {
    rule(name).map_err(|reason| ChannelError::InvalidName {
        what,
        name: name.to_string(),
        reason,
        endpoint: endpoint(),
    })
}

/// The rule for a topic of a channel whose names are key segments: one valid segment, not
/// [`KEYS_SEGMENT`], and without `:` where `no_colon` (Redis, whose keys `:` separates).
pub(crate) fn segment_topic_rule(topic: &str, no_colon: bool) -> Result<(), String> {
    if topic == KEYS_SEGMENT {
        return Err(format!("{KEYS_SEGMENT:?} is reserved for keys"));
    }
    if no_colon && topic.contains(':') {
        return Err("':' is not allowed here".to_string());
    }
    check_segment(topic)
}

/// The way functions exchange updates: publish a message per (topic, step, worker), collect a
/// step's messages from a set of workers, plus last-write-wins keys.
///
/// Every backend must pass [`crate::conformance::run_all`].
///
/// # Cancel safety
///
/// Every method may be cancelled (a `tokio::time::timeout` or `select!` dropping its future)
/// without breaking the channel: a cancelled call leaves the channel as if it had run in part,
/// and each method's section says what that part can be. No backend reuses a connection whose
/// exchange was cut off (Memcached closes it; Redis's multiplexed connection drops the late
/// reply; a blocking read's connection is dropped with the future). Repeating a cancelled call
/// is always safe, which is what [`RetryingChannel`](retry::RetryingChannel) relies on.
#[async_trait::async_trait]
pub trait Channel: Send + Sync + std::fmt::Debug {
    /// Publishes `payload` as the message `id` (worker `from`'s for `step` on `topic`).
    /// Publishing the same id twice stores one message (idempotent): a re-invoked worker may
    /// publish its step again, and should publish the same payload.
    ///
    /// # Cancel safety
    ///
    /// A cancelled publish may or may not have stored the message; publishing it again stores
    /// it once. On a chunking backend (Memcached, DynamoDB) it may leave chunks that no message
    /// names, which expire with the item TTL (DynamoDB's cleanup deletes them too).
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<()>;

    /// Waits until the `messages` (of `step` on `topic` from every worker in `from`) are present
    /// and returns their payloads in the order of `from`. Never busy-polls without backoff.
    /// After `timeout` fails with [`ChannelError::Timeout`] naming the step, topic and missing
    /// workers.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a collect only reads, so a cancelled one changes nothing on the channel; the
    /// messages it had read are dropped with it and a new collect reads them again.
    async fn collect(&self, messages: StepMessages<'_>, timeout: Duration) -> Result<Vec<Bytes>>;

    /// Publishes `payload` as worker `from`'s message of `step` on `topic`, then collects the
    /// step's messages of `peers` (which may include `from`) within `timeout` (the fields of
    /// `exchange`): a synchronous step's exchange in one call, so that a backend can save a
    /// round trip (Redis publishes and reads what is there in one script). The default is
    /// [`publish`](Channel::publish) then [`collect`](Channel::collect), with their contracts.
    ///
    /// # Cancel safety
    ///
    /// As a publish followed by a collect: cancelled, it may or may not have stored the message,
    /// and calling it again stores it once.
    async fn publish_and_collect(
        &self,
        exchange: StepExchange<'_>,
        payload: Bytes,
    ) -> Result<Vec<Bytes>> {
        self.publish(exchange.own(), payload).await?;
        self.collect(exchange.peers_messages(), exchange.timeout)
            .await
    }

    /// Publishes `share`, worker `from`'s [`Share`](average::Share) of `step` on `topic`, and
    /// returns, once every worker of `peers` (which includes `from`) has published its own, the
    /// mean of their deltas ([`mlless_core::mean_of`] in the order of `peers`) and their
    /// headers (`from`, `step`, `topic`, `peers` and `timeout` are the fields of `exchange`).
    /// After `timeout` fails with [`ChannelError::Timeout`] naming the missing workers.
    ///
    /// The default publishes the share as a message and averages the peers' on the worker
    /// ([`average`]); a backend that can average on its side (the parameter server) overrides
    /// it, so that a worker receives one mean instead of every peer's update. Either way the
    /// share is a message of (`topic`, `step`, `from`) for [`poll`](Channel::poll) (whose
    /// header [`average::share_header`] reads) and [`discard`](Channel::discard). A decorator
    /// must forward it, or the backend's own is bypassed.
    ///
    /// # Cancel safety
    ///
    /// As [`publish_and_collect`](Channel::publish_and_collect): cancelled, it may or may not
    /// have stored the share, and calling it again stores it once.
    async fn publish_and_average(
        &self,
        exchange: StepExchange<'_>,
        share: average::Share,
    ) -> Result<average::Averaged> {
        average::average_on_worker(self, exchange, share).await
    }

    /// Returns, without waiting, those of the `messages` (of `step` on `topic` from the workers
    /// in `from`) that are present now, in the order of `from`: `None` where a message has not
    /// arrived. For the protocols without a barrier (SSP, ASP), which apply whatever has
    /// arrived.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a poll only reads.
    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>>;

    /// Deletes the `messages` (of `step` on `topic` from the workers in `from`) once nobody needs
    /// them any more. Messages that are already gone are not an error.
    ///
    /// # Cancel safety
    ///
    /// A cancelled discard may have deleted some of the messages and not others; discarding
    /// again deletes the rest.
    async fn discard(&self, messages: StepMessages<'_>) -> Result<()>;

    /// Sets a key (control messages, progress); the last write wins.
    ///
    /// # Cancel safety
    ///
    /// A cancelled put may or may not have set the key (a reader sees the old or the new value,
    /// never a mix).
    async fn put_key(&self, key: &str, value: Bytes) -> Result<()>;

    /// Reads a key; `None` if it is absent (an empty value is `Some` of an empty payload).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    async fn get_key(&self, key: &str) -> Result<Option<Bytes>>;

    /// Removes everything this job wrote to the channel.
    ///
    /// # Cancel safety
    ///
    /// A cancelled cleanup may have removed part of the job's data; running it again removes
    /// the rest (Memcached deletes its index of the job last, so a repeat finds it again).
    async fn cleanup(&self) -> Result<()>;

    /// Where the channel is, for messages and logs (never a secret).
    fn describe(&self) -> String;

    /// Why messages may be missing, if the channel can tell: for the error of a run that waited
    /// for them in vain (a Memcached that evicted items since this channel connected says so;
    /// `None` where there is nothing to tell).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    async fn explain_missing(&self) -> Result<Option<String>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_are_as_transient_as_the_store_says() {
        let refused = StoreError::Backend {
            location: "s3://b/k".into(),
            source: ::object_store::Error::Generic {
                store: "S3",
                source: Box::new(std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    "test",
                )),
            },
        };
        assert!(ChannelError::Store(refused).is_transient());
        let not_found = ChannelError::Store(StoreError::NotFound {
            location: "s3://b/k".into(),
        });
        assert!(!not_found.is_transient());
    }
}
