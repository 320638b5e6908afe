//! [`Channel`]: how functions exchange updates and control messages, and its object-store
//! backend [`ObjectStoreChannel`] (LambdaML's S3 channel).
//!
//! Functions cannot talk to each other directly, so every update goes through an external store.
//! A channel carries two kinds of data, both namespaced by the job id:
//! - *messages*: one payload per (topic, step, worker), published once and collected by everyone
//!   who needs that step (updates, per-step statistics, final replicas);
//! - *keys*: small named values where the last write wins (stop signal, progress).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use tracing::{debug, trace};

use crate::redact::redact_url;
use crate::retry::{ChannelOptions, RetryingChannel};
use crate::store::{Store, StoreError, check_segment};

/// Identifies a worker of a job: 0, 1, …, P − 1.
pub type WorkerId = u32;

/// What [`open_channel`] accepts, for error messages.
pub const SUPPORTED_CHANNEL_URLS: &str = "\"store\" (the run's object store, the default), a \
     directory path, file:///abs/path, memory://NAME, s3://bucket/prefix, \
     redis://host:port[,redis://host2:port…] (also rediss:// and a password in the URL), \
     memcached://host:port";

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
    /// The server behind the channel (Redis, Memcached) failed a command.
    #[error("channel {endpoint}: {operation} failed: {source}")]
    Backend {
        /// The server, without credentials.
        endpoint: String,
        /// What was being done, naming the key or item.
        operation: String,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The server behind the channel stayed unreachable for longer than the grace of a
    /// [`RetryingChannel`](crate::RetryingChannel) (`--channel-grace`).
    #[error(
        "channel {endpoint} unreachable for longer than --channel-grace {} ({operation} kept \
         failing for {}): {source}",
        crate::retry::seconds(.grace),
        crate::retry::seconds(.waited)
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

/// The way functions exchange updates: publish a message per (topic, step, worker), collect a
/// step's messages from a set of workers, plus last-write-wins keys.
///
/// Every backend must pass [`crate::conformance::run_all`].
#[async_trait::async_trait]
pub trait Channel: Send + Sync + std::fmt::Debug {
    /// Publishes worker `from`'s message for `step` on `topic`. Publishing the same
    /// (topic, step, from) twice stores one message (idempotent): a re-invoked worker may
    /// publish its step again, and should publish the same payload.
    async fn publish(
        &self,
        topic: &str,
        step: u64,
        from: WorkerId,
        payload: Bytes,
    ) -> Result<(), ChannelError>;

    /// Waits until the messages of `step` on `topic` from every worker in `from` are present and
    /// returns their payloads in the order of `from`. Never busy-polls without backoff. After
    /// `timeout` fails with [`ChannelError::Timeout`] naming the step, topic and missing workers.
    async fn collect(
        &self,
        topic: &str,
        step: u64,
        from: &[WorkerId],
        timeout: Duration,
    ) -> Result<Vec<Bytes>, ChannelError>;

    /// Returns, without waiting, the messages of `step` on `topic` from the workers in `from`
    /// that are present now, in the order of `from`: `None` where a message has not arrived.
    /// For the protocols without a barrier (SSP, ASP), which apply whatever has arrived.
    async fn poll(
        &self,
        topic: &str,
        step: u64,
        from: &[WorkerId],
    ) -> Result<Vec<Option<Bytes>>, ChannelError>;

    /// Deletes the messages of `step` on `topic` from the given workers (once nobody needs them
    /// any more). Messages that are already gone are not an error.
    async fn discard(&self, topic: &str, step: u64, from: &[WorkerId]) -> Result<(), ChannelError>;

    /// Sets a key (control messages, progress); the last write wins.
    async fn put_key(&self, key: &str, value: Bytes) -> Result<(), ChannelError>;

    /// Reads a key; `None` if it is absent (an empty value is `Some` of an empty payload).
    async fn get_key(&self, key: &str) -> Result<Option<Bytes>, ChannelError>;

    /// Removes everything this job wrote to the channel.
    async fn cleanup(&self) -> Result<(), ChannelError>;

    /// Where the channel is, for messages and logs (never a secret).
    fn describe(&self) -> String;
}

/// The object-store channel (DESIGN §3, LambdaML's S3 channel): every message is an object.
///
/// Layout below the store handle: messages at `{job_id}/{topic}/{step:012}/{worker:05}`, keys at
/// `{job_id}/keys/{key}`. [`Channel::collect`] GETs the messages it has not read yet
/// (concurrently), and sleeps with exponential backoff — from 0.5 ms, doubling, up to
/// [`with_max_backoff`](Self::with_max_backoff) — until every worker's message is there.
/// The backoff restarts from 0.5 ms whenever a poll finds new messages, since a step's messages
/// tend to arrive together.
///
/// Writes are atomic ([`Store::put`]), so a collector never reads a half-written message.
#[derive(Clone, Debug)]
pub struct ObjectStoreChannel {
    /// The job's namespace: `{store}/{job_id}`.
    job: Store,
    job_id: String,
    max_backoff: Duration,
}

/// First sleep of a collect that finds messages missing.
pub const INITIAL_BACKOFF: Duration = Duration::from_micros(500);
/// Default backoff cap on a local or in-memory store.
pub const DEFAULT_MAX_BACKOFF_LOCAL: Duration = Duration::from_millis(20);
/// Default backoff cap on a remote store (S3), where every poll is a billed GET request per
/// missing message.
pub const DEFAULT_MAX_BACKOFF_REMOTE: Duration = Duration::from_millis(100);
/// How many GETs a collect runs at once.
const GET_CONCURRENCY: usize = 32;
/// The segment under which keys live; not usable as a topic.
const KEYS_SEGMENT: &str = "keys";

impl ObjectStoreChannel {
    /// A channel for job `job_id` on `store`. The job id must be one valid key segment (no `/`,
    /// not empty, no forbidden character), so that no job's namespace contains another's.
    pub fn new(store: Store, job_id: &str) -> Result<Self, ChannelError> {
        check_segment(job_id).map_err(|reason| ChannelError::InvalidName {
            what: "job id",
            name: job_id.to_string(),
            reason,
            endpoint: store.url().to_string(),
        })?;
        let max_backoff = if store.kind().is_remote() {
            DEFAULT_MAX_BACKOFF_REMOTE
        } else {
            DEFAULT_MAX_BACKOFF_LOCAL
        };
        Ok(Self {
            job: store.child(job_id),
            job_id: job_id.to_string(),
            max_backoff,
        })
    }

    /// Sets the cap of the collect backoff (default 20 ms for a local or in-memory store, 100 ms
    /// for S3). A lower cap reacts faster; a higher one sends fewer LIST requests while waiting.
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff.max(INITIAL_BACKOFF);
        self
    }

    /// The job id this channel is namespaced by.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The store handle on this job's namespace.
    pub fn store(&self) -> &Store {
        &self.job
    }

    /// The cap of the collect backoff.
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    fn check_topic(&self, topic: &str) -> Result<(), ChannelError> {
        let reason = if topic == KEYS_SEGMENT {
            Some(format!("{KEYS_SEGMENT:?} is reserved for keys"))
        } else {
            check_segment(topic).err()
        };
        match reason {
            None => Ok(()),
            Some(reason) => Err(ChannelError::InvalidName {
                what: "topic",
                name: topic.to_string(),
                reason,
                endpoint: self.describe(),
            }),
        }
    }

    fn step_prefix(topic: &str, step: u64) -> String {
        format!("{topic}/{step:012}")
    }

    fn worker_name(worker: WorkerId) -> String {
        format!("{worker:05}")
    }

    fn message_key(topic: &str, step: u64, worker: WorkerId) -> String {
        format!(
            "{}/{}",
            Self::step_prefix(topic, step),
            Self::worker_name(worker)
        )
    }

    fn key_key(key: &str) -> String {
        format!("{KEYS_SEGMENT}/{}", key.trim_start_matches('/'))
    }

    /// One poll of a collect: lists the step and fetches the messages of the missing workers
    /// that are now present. Returns whether it found any.
    async fn poll_step(
        &self,
        prefix: &str,
        from: &[WorkerId],
        slots: &mut [Option<Bytes>],
    ) -> Result<bool, ChannelError> {
        // GET each missing message directly rather than LIST the step first: one round trip
        // fewer, O(1) on every backend, and on S3 a GET costs a twelfth of a LIST.
        let mut wanted: Vec<WorkerId> = Vec::new();
        for (worker, slot) in from.iter().zip(slots.iter()) {
            if slot.is_none() && !wanted.contains(worker) {
                wanted.push(*worker);
            }
        }
        let job = &self.job;
        let fetched: Vec<(WorkerId, Result<Option<Bytes>, StoreError>)> =
            futures::stream::iter(wanted)
                .map(|worker| async move {
                    let key = format!("{prefix}/{}", Self::worker_name(worker));
                    (worker, job.get_opt(&key).await)
                })
                .buffer_unordered(GET_CONCURRENCY)
                .collect()
                .await;
        let mut found = false;
        for (worker, payload) in fetched {
            // Not published yet: still missing.
            let Some(payload) = payload? else { continue };
            found = true;
            for (w, slot) in from.iter().zip(slots.iter_mut()) {
                if *w == worker {
                    *slot = Some(payload.clone());
                }
            }
        }
        Ok(found)
    }
}

#[async_trait::async_trait]
impl Channel for ObjectStoreChannel {
    async fn publish(
        &self,
        topic: &str,
        step: u64,
        from: WorkerId,
        payload: Bytes,
    ) -> Result<(), ChannelError> {
        self.check_topic(topic)?;
        trace!(channel = %self.job.url(), topic, step, from, len = payload.len(), "publish");
        self.job
            .put(&Self::message_key(topic, step, from), payload)
            .await?;
        Ok(())
    }

    async fn poll(
        &self,
        topic: &str,
        step: u64,
        from: &[WorkerId],
    ) -> Result<Vec<Option<Bytes>>, ChannelError> {
        self.check_topic(topic)?;
        let mut slots: Vec<Option<Bytes>> = vec![None; from.len()];
        self.poll_step(&Self::step_prefix(topic, step), from, &mut slots)
            .await?;
        Ok(slots)
    }

    async fn collect(
        &self,
        topic: &str,
        step: u64,
        from: &[WorkerId],
        timeout: Duration,
    ) -> Result<Vec<Bytes>, ChannelError> {
        self.check_topic(topic)?;
        let start = Instant::now();
        let deadline = start + timeout;
        // A poll still running at the deadline may finish, but not past this: a hung backend
        // request must not turn a timeout into a hang.
        let hard_deadline = deadline + timeout.max(Duration::from_millis(100));
        let prefix = Self::step_prefix(topic, step);
        let mut slots: Vec<Option<Bytes>> = vec![None; from.len()];
        let mut backoff = INITIAL_BACKOFF;
        let mut polls = 0u32;
        loop {
            polls += 1;
            let poll = self.poll_step(&prefix, from, &mut slots);
            let found = match tokio::time::timeout_at(hard_deadline.into(), poll).await {
                Ok(found) => found?,
                Err(_) => {
                    debug!(channel = %self.job.url(), topic, step, "poll overran the deadline");
                    return Err(timeout_error(
                        self.describe(),
                        topic,
                        step,
                        from,
                        &slots,
                        start.elapsed(),
                    ));
                }
            };
            if slots.iter().all(Option::is_some) {
                trace!(channel = %self.job.url(), topic, step, polls, waited = ?start.elapsed(), "collected");
                return Ok(slots.into_iter().flatten().collect());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(timeout_error(
                    self.describe(),
                    topic,
                    step,
                    from,
                    &slots,
                    now - start,
                ));
            }
            if found {
                backoff = INITIAL_BACKOFF;
            }
            let sleep = backoff.min(deadline - now);
            debug!(
                channel = %self.job.url(),
                topic,
                step,
                missing = slots.iter().filter(|s| s.is_none()).count(),
                backoff = ?sleep,
                "messages missing, backing off"
            );
            backoff_sleep(sleep).await;
            backoff = (backoff * 2).min(self.max_backoff);
        }
    }

    async fn discard(&self, topic: &str, step: u64, from: &[WorkerId]) -> Result<(), ChannelError> {
        self.check_topic(topic)?;
        let keys: Vec<String> = from
            .iter()
            .map(|w| Self::message_key(topic, step, *w))
            .collect();
        self.job.delete_many(keys).await?;
        Ok(())
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<(), ChannelError> {
        self.job.put(&Self::key_key(key), value).await?;
        Ok(())
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>, ChannelError> {
        Ok(self.job.get_opt(&Self::key_key(key)).await?)
    }

    async fn cleanup(&self) -> Result<(), ChannelError> {
        debug!(channel = %self.job.url(), "cleanup");
        self.job.delete_prefix("").await?;
        Ok(())
    }

    fn describe(&self) -> String {
        self.job.url().to_string()
    }
}

/// The [`ChannelError::Timeout`] of a collect that gave up: the workers of `from` whose slot is
/// still empty, each named once.
pub(crate) fn timeout_error(
    endpoint: String,
    topic: &str,
    step: u64,
    from: &[WorkerId],
    slots: &[Option<Bytes>],
    waited: Duration,
) -> ChannelError {
    let mut missing: Vec<WorkerId> = Vec::new();
    for (worker, slot) in from.iter().zip(slots) {
        if slot.is_none() && !missing.contains(worker) {
            missing.push(*worker);
        }
    }
    ChannelError::Timeout {
        topic: topic.to_string(),
        step,
        missing,
        waited,
        endpoint,
    }
}

/// Sleeps for `duration`. Tokio's timer has a resolution of 1 ms, which would round the first,
/// sub-millisecond backoffs up to 1 ms or more; those short sleeps happen on the blocking pool
/// instead, where a thread sleep is precise to tens of microseconds.
pub(crate) async fn backoff_sleep(duration: Duration) {
    if duration >= Duration::from_millis(1) {
        tokio::time::sleep(duration).await;
        return;
    }
    let sleeper = tokio::task::spawn_blocking(move || std::thread::sleep(duration));
    if sleeper.await.is_err() {
        // The blocking pool is shutting down: fall back to the timer.
        tokio::time::sleep(duration).await;
    }
}

/// Opens the channel of job `job_id`, with the default [`ChannelOptions`] (an outage of a remote
/// channel is ridden out for [`DEFAULT_CHANNEL_GRACE`](crate::DEFAULT_CHANNEL_GRACE)); see
/// [`open_channel_with`].
pub async fn open_channel(
    url: Option<&str>,
    store: &Store,
    job_id: &str,
) -> Result<Arc<dyn Channel>, ChannelError> {
    open_channel_with(url, store, job_id, ChannelOptions::default()).await
}

/// Refuses a "directory path" that is a mistyped server URL (`redis:/host`, `redis:host`,
/// `:password@host`): opened as a directory, it would silently run the job on the local
/// filesystem — and put the password in a directory name and in every message that names it.
fn check_not_a_mistyped_url(url: &str) -> Result<(), ChannelError> {
    let invalid = |reason: String| ChannelError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    if let Some((prefix, _)) = url.split_once(':') {
        let prefix = prefix.to_ascii_lowercase();
        if matches!(
            prefix.as_str(),
            "redis" | "rediss" | "memcached" | "s3" | "s3a" | "file" | "memory"
        ) {
            return Err(invalid(format!(
                "looks like a {prefix}:// URL without its \"//\"; supported: \
                 {SUPPORTED_CHANNEL_URLS}"
            )));
        }
    }
    if redact_url(url) != url {
        return Err(invalid(format!(
            "looks like credentials without a scheme (redis://[user]:password@host:port); \
             supported: {SUPPORTED_CHANNEL_URLS}"
        )));
    }
    Ok(())
}

/// Opens the channel of job `job_id`.
///
/// `url`:
/// - `None` or `"store"`: an [`ObjectStoreChannel`] on `store.child("channel")` — the channel
///   lives wherever the run's data is (the default; no server needed);
/// - a directory path, `file://`, `memory://` or `s3://` URL: an [`ObjectStoreChannel`] on that
///   store (see [`Store::open`]);
/// - `redis://` / `rediss://` (a comma-separated list shards the exchange): a
///   [`RedisChannel`](crate::RedisChannel);
/// - `memcached://host:port`: a [`MemcachedChannel`](crate::MemcachedChannel);
/// - anything else is [`ChannelError::InvalidUrl`] listing the supported forms.
///
/// Channels on a server (Redis, Memcached, and object-store channels on S3) are wrapped in a
/// [`RetryingChannel`] with `options.grace`: operations that fail on the connection are retried
/// with backoff, and fail with [`ChannelError::Unavailable`] once the outage outlasts the grace.
/// Local and in-memory channels are not wrapped. Connecting itself is not retried: a server that
/// cannot be reached when the channel is opened is [`ChannelError::InvalidUrl`] at once.
pub async fn open_channel_with(
    url: Option<&str>,
    store: &Store,
    job_id: &str,
    options: ChannelOptions,
) -> Result<Arc<dyn Channel>, ChannelError> {
    let channel_store = match url.map(str::trim) {
        None | Some("store") => store.child("channel"),
        Some("") => {
            return Err(ChannelError::InvalidUrl {
                url: String::new(),
                reason: format!("empty channel URL; supported: {SUPPORTED_CHANNEL_URLS}"),
            });
        }
        Some(url) => {
            let scheme = url.split_once("://").map(|(scheme, _)| scheme);
            if scheme.is_none() {
                check_not_a_mistyped_url(url)?;
            }
            match scheme {
                None | Some("file" | "memory" | "s3" | "s3a") => Store::open(url)?,
                Some("redis" | "rediss") => {
                    let channel = crate::RedisChannel::connect(url, job_id).await?;
                    debug!(channel = %channel.describe(), grace = ?options.grace, "channel opened");
                    return Ok(Arc::new(RetryingChannel::new(channel, options.grace)));
                }
                Some("memcached") => {
                    let channel = crate::MemcachedChannel::connect(url, job_id).await?;
                    debug!(channel = %channel.describe(), grace = ?options.grace, "channel opened");
                    return Ok(Arc::new(RetryingChannel::new(channel, options.grace)));
                }
                Some(scheme) => {
                    return Err(ChannelError::InvalidUrl {
                        url: redact_url(url),
                        reason: format!(
                            "unsupported channel scheme {scheme}://; supported: \
                             {SUPPORTED_CHANNEL_URLS}"
                        ),
                    });
                }
            }
        }
    };
    let channel = ObjectStoreChannel::new(channel_store, job_id)?;
    debug!(channel = %channel.describe(), kind = ?channel.store().kind(), "channel opened");
    if channel.store().kind().is_remote() {
        return Ok(Arc::new(RetryingChannel::new(channel, options.grace)));
    }
    Ok(Arc::new(channel))
}
