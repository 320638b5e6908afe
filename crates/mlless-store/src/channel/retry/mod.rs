//! Retries: the one module that says when a request is attempted again, and
//! [`RetryingChannel`], a [`Channel`] decorator that rides out an outage of the server behind a
//! channel, in the manner of `object_store`'s decorators (`ThrottledStore`, `LimitStore`).
//!
//! # One retry module, one level per request
//!
//! `policy.rs` holds the [`RetryPolicy`] (attempts, backoff with jitter, deadline), the
//! [`Transient`] trait by which each backend says which of its errors are worth another attempt,
//! and [`run`], the one retry loop. Its callers:
//!
//! - [`RetryingChannel`] runs every operation under [`RetryPolicy::grace`] (`--channel-grace`);
//!   [`open_channel_with`](crate::open_channel_with) wraps every remote channel in it.
//! - The backends that reconnect by themselves take a policy (`RedisChannel::with_retry`,
//!   `MemcachedChannel::with_retry`): [`RetryPolicy::reconnect`] when used bare (a few attempts,
//!   enough for a dropped connection), [`RetryPolicy::none`] under the decorator, which
//!   [`open_channel_with`](crate::open_channel_with) sets — so a failed Redis command is retried
//!   by the decorator alone, not by the backend and again by the decorator.
//! - The other backends (parameter server, DynamoDB, the object store) retry nothing
//!   themselves; they mark their errors transient or not.
//!
//! Not retries of a failed request, and therefore not here: the polling of a collect for
//! messages not yet there (`channel::collect`), DynamoDB's batches sent again for the items
//! they left unprocessed (a partial success), and a local put that raced a directory removal.
//! `object_store`'s own retry of S3 requests (its `RetryConfig`: throttling, 5xx, connection
//! errors, per HTTP request) is a store's, for every use of a store — data, checkpoints,
//! records — and is left as it is; an S3 channel's error reaches the decorator only after it.
//!
//! # What it does
//!
//! Every operation of the inner channel that fails with a *transient* error (see
//! [`ChannelError::is_transient`]; each backend marks its own errors: the connection was refused,
//! reset or dropped, the server did not answer in time, Redis is loading its data set after a
//! restart, an S3 request could not be sent) is attempted again with exponential backoff — [`RETRY_INITIAL_BACKOFF`] doubling up to
//! [`RETRY_MAX_BACKOFF`], each pause jittered to between half and all of its nominal value so
//! that the workers of a job do not reconnect in lockstep — until the *grace* has passed since
//! the operation first failed. The last attempt happens when the grace runs out; if it fails
//! too, the operation fails with [`ChannelError::Unavailable`], which names the server (never a
//! secret) and says the outage outlasted the grace. An outage shorter than the grace is
//! therefore invisible to the caller, apart from the time it took.
//!
//! Errors that say something about the request rather than the connection — an invalid name, a
//! corrupt value, a server refusing a command, and the [`ChannelError::Timeout`] of a collect —
//! are returned at once.
//!
//! An outage — a failure that the first retry did not cure — is logged with `warn!` when that
//! retry fails and its end with `info!`, once per outage of the channel (not per attempt, not
//! per operation); the attempts in between, and a failure that one retry cures (a connection
//! the server dropped, which the backends used to retry themselves, silently), are `debug!`.
//!
//! # Collect keeps its timeout
//!
//! A [`collect`](Channel::collect) retried after a failure is given what is left of its
//! timeout, so the wait for messages is not extended by the retries. If the timeout has run out
//! during the outage, the retry is a collect with a zero timeout (one look at what is there): it
//! returns the messages if they all arrived, or the usual [`ChannelError::Timeout`] naming the
//! missing workers, once the server answers again — within the grace.
//!
//! # Why every operation may be repeated
//!
//! An attempt may fail after the server has carried out part or all of it (a reply lost with
//! the connection). Repeating it must not change the outcome:
//!
//! - [`publish`](Channel::publish) is idempotent by contract. On Redis it is one Lua script
//!   (atomic: it ran entirely or not at all) that appends the message only if the step's index
//!   hash has no entry for the worker, so a repeat after a lost reply stores nothing. On
//!   Memcached the chunks of a large payload are written under a fresh nonce, and the head is
//!   written last with `add`: a repeat writes its own chunks, finds the head of the first attempt
//!   (`NOT_STORED`), and deletes its own unused chunks; chunks of an attempt that failed before its
//!   head was stored are never referenced and expire with the item TTL; a repeated index line is
//!   harmless. On DynamoDB the same holds with a conditional `PutItem` of the head
//!   (`attribute_not_exists`): a repeat finds the first attempt's head and deletes its own
//!   chunks, and chunks no head names are deleted by cleanup (they are in the job's partition)
//!   or expire with their TTL. On an object store a message is one atomic `PUT` of the same
//!   payload.
//! - [`discard`](Channel::discard): deleting what is already gone is not an error (the Redis
//!   script looks each worker up in the index first; Memcached `delete`s answer `NOT_FOUND`).
//! - [`cleanup`](Channel::cleanup) is restartable: Redis scans and unlinks what is left,
//!   Memcached deletes its index item last so a repeat finds it again, DynamoDB queries the
//!   job's partition again.
//! - [`put_key`](Channel::put_key) is last-write-wins with the same value; reads
//!   ([`get_key`](Channel::get_key), [`poll`](Channel::poll), [`collect`](Channel::collect))
//!   change nothing.
//!
//! # What an outage costs
//!
//! Redis keeps its data across a restart only if it persists it (RDB or AOF); Memcached never
//! does. Messages lost with the server show up as a collect timeout, not as an error of this
//! decorator. Memcached's cleanup index is lost too: the job's items then expire with their TTL
//! instead of being deleted by [`cleanup`](Channel::cleanup).
//!
//! Each attempt is bounded by the backend's own timeouts (Redis: connect 5 s, reply 30 s;
//! Memcached: connect 3 s, exchange 10 s; DynamoDB: connect 5 s, request 60 s; S3:
//! `object_store`'s retry policy, which retries requests itself before an error reaches this
//! decorator), so an operation that gives up does so within the grace plus one attempt.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, info, warn};

use super::average::{Averaged, Share};
use super::{Channel, ChannelError, MessageId, StepExchange, StepMessages};
use crate::channel::Result;

mod policy;
pub use policy::{
    Attempts, RECONNECT_ATTEMPTS, RECONNECT_MAX_BACKOFF, RETRY_INITIAL_BACKOFF, RETRY_MAX_BACKOFF,
    RetryPolicy, Transient, run,
};

pub use mlless_io_types::DEFAULT_CHANNEL_GRACE;

/// How [`open_channel_with`](crate::open_channel_with) opens a channel.
///
/// ```
/// use std::time::Duration;
/// use mlless_store::ChannelOptions;
///
/// let options = ChannelOptions::default().with_grace(Duration::from_secs(10));
/// assert_eq!(options.grace(), Duration::from_secs(10));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelOptions {
    /// How long an outage of a remote channel (Redis, Memcached, S3) is ridden out before an
    /// operation fails with [`ChannelError::Unavailable`] (`--channel-grace`).
    pub grace: Duration,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            grace: DEFAULT_CHANNEL_GRACE,
        }
    }
}

impl ChannelOptions {
    /// Sets the grace (default [`DEFAULT_CHANNEL_GRACE`]); zero means one attempt only.
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How long an outage is ridden out.
    pub fn grace(&self) -> Duration {
        self.grace
    }
}

/// A [`Channel`] that retries the operations of `C` that fail with a transient error,
/// with exponential backoff, for up to a grace period; see the [module documentation](self).
///
/// ```no_run
/// # #[cfg(feature = "redis")]
/// # async fn example() -> Result<(), mlless_store::ChannelError> {
/// use std::time::Duration;
/// use mlless_store::{RedisChannel, RetryingChannel};
///
/// use mlless_store::retry::RetryPolicy;
///
/// // The decorator retries: the channel's own attempts are turned off (one level per request).
/// let redis = RedisChannel::connect("redis://127.0.0.1:6379", "job-1")
///     .await?
///     .with_retry(RetryPolicy::none());
/// let channel = RetryingChannel::new(redis, Duration::from_secs(10));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RetryingChannel<C> {
    inner: C,
    grace: Duration,
    /// How the grace is ridden out ([`RetryPolicy::grace`]).
    policy: RetryPolicy,
    /// When the current outage was first noticed, shared by every operation (for the logs).
    outage: Arc<Mutex<Option<Instant>>>,
}

impl<C: Clone> Clone for RetryingChannel<C> {
    fn clone(&self) -> Self {
        RetryingChannel {
            inner: self.inner.clone(),
            grace: self.grace,
            policy: self.policy,
            outage: Arc::clone(&self.outage),
        }
    }
}

impl<C: Channel> RetryingChannel<C> {
    /// Wraps `inner`, riding out outages shorter than `grace`.
    pub fn new(inner: C, grace: Duration) -> Self {
        RetryingChannel {
            inner,
            grace,
            policy: RetryPolicy::grace(grace),
            outage: Arc::default(),
        }
    }

    /// The wrapped channel.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// How long an outage is ridden out.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// [`run`](Self::run) for an operation that waits at most `timeout` (a collect): each
    /// attempt is given what is left of it, so the retries do not extend the wait.
    async fn run_within<T, F, Fut>(
        &self,
        operation: &str,
        timeout: Duration,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        // `None`: a timeout too large to add to now, which never runs out.
        let deadline = Instant::now().checked_add(timeout);
        self.run(operation, || {
            attempt(match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => timeout,
            })
        })
        .await
    }

    /// Runs `attempt` under the grace's [`RetryPolicy`] until it succeeds, fails with an error
    /// that is not transient, or has kept failing for the grace.
    async fn run<T, F, Fut>(&self, operation: &str, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let outcome = policy::run(&self.policy, attempt, |error, attempts, pause| {
            if attempts > 1 {
                self.outage_noticed(operation, error);
            }
            if let Some(pause) = pause {
                debug!(
                    channel = %self.inner.describe(),
                    operation,
                    attempt = attempts,
                    error = %error,
                    retry_in = ?pause,
                    "channel operation failed on the connection, retrying"
                );
            }
        })
        .await;
        let exhausted = outcome.exhausted();
        let Attempts {
            result,
            attempts,
            first_failure,
        } = outcome;
        let Some(since) = first_failure else {
            return result;
        };
        match result {
            Err(error) if exhausted => {
                let waited = since.elapsed();
                warn!(
                    channel = %self.inner.describe(),
                    operation,
                    attempts,
                    waited = ?waited,
                    grace = ?self.grace,
                    "channel still unreachable after the grace, giving up"
                );
                Err(self.unavailable(operation, waited, error))
            }
            // A success, or an answer about the request: the connection is back.
            result => {
                self.recovered(operation, since, attempts);
                result
            }
        }
    }

    fn outage_noticed(&self, operation: &str, error: &ChannelError) {
        let mut outage = self.outage.lock().unwrap_or_else(PoisonError::into_inner);
        if outage.is_none() {
            *outage = Some(Instant::now());
            warn!(
                channel = %self.inner.describe(),
                operation,
                error = %error,
                grace = ?self.grace,
                "channel unreachable, reconnecting with backoff for up to the grace"
            );
        }
    }

    fn recovered(&self, operation: &str, since: Instant, attempts: u32) {
        let outage = self
            .outage
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(started) = outage {
            info!(
                channel = %self.inner.describe(),
                operation,
                attempts,
                outage = ?started.elapsed(),
                "channel reachable again"
            );
        } else {
            debug!(channel = %self.inner.describe(), operation, attempts, failing_for = ?since.elapsed(), "operation succeeded after retries");
        }
    }

    fn unavailable(&self, operation: &str, waited: Duration, error: ChannelError) -> ChannelError {
        let endpoint = match &error {
            // The server that failed (one shard of several names only itself).
            ChannelError::Backend { endpoint, .. } => endpoint.clone(),
            _ => self.inner.describe(),
        };
        ChannelError::Unavailable {
            endpoint,
            operation: operation.to_string(),
            grace: self.grace,
            waited,
            source: Box::new(error),
        }
    }
}

#[async_trait::async_trait]
impl<C: Channel> Channel for RetryingChannel<C> {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<()> {
        self.run("publish", || self.inner.publish(id, payload.clone()))
            .await
    }

    async fn collect(&self, messages: StepMessages<'_>, timeout: Duration) -> Result<Vec<Bytes>> {
        self.run_within("collect", timeout, |remaining| {
            self.inner.collect(messages, remaining)
        })
        .await
    }

    async fn publish_and_collect(
        &self,
        exchange: StepExchange<'_>,
        payload: Bytes,
    ) -> Result<Vec<Bytes>> {
        // As `collect`; a repeated publish stores nothing.
        self.run_within("publish_and_collect", exchange.timeout, |timeout| {
            self.inner
                .publish_and_collect(exchange.with_timeout(timeout), payload.clone())
        })
        .await
    }

    async fn publish_and_average(
        &self,
        exchange: StepExchange<'_>,
        share: Share,
    ) -> Result<Averaged> {
        // As `collect`; a repeated share is stored once.
        self.run_within("publish_and_average", exchange.timeout, |timeout| {
            self.inner
                .publish_and_average(exchange.with_timeout(timeout), share.clone())
        })
        .await
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>> {
        self.run("poll", || self.inner.poll(messages)).await
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<()> {
        self.run("discard", || self.inner.discard(messages)).await
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<()> {
        self.run("put_key", || self.inner.put_key(key, value.clone()))
            .await
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>> {
        self.run("get_key", || self.inner.get_key(key)).await
    }

    async fn cleanup(&self) -> Result<()> {
        self.run("cleanup", || self.inner.cleanup()).await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn explain_missing(&self) -> Result<Option<String>> {
        self.inner.explain_missing().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a backend's client might say when the server goes away.
    #[derive(Debug, thiserror::Error)]
    #[error("the server closed the connection")]
    struct Closed;

    fn backend(transient: bool) -> ChannelError {
        ChannelError::Backend {
            endpoint: "redis://127.0.0.1:1".into(),
            operation: "publish".into(),
            transient,
            source: Box::new(Closed),
        }
    }

    #[test]
    fn backends_say_what_is_retried() {
        assert!(backend(true).is_transient());
        assert!(!backend(false).is_transient());
    }

    #[test]
    fn request_errors_are_not_retried() {
        let timeout = ChannelError::Timeout {
            topic: "t".into(),
            step: 0,
            missing: vec![1],
            waited: Duration::from_secs(1),
            endpoint: "redis://127.0.0.1:1".into(),
        };
        assert!(!timeout.is_transient());
        let invalid = ChannelError::InvalidName {
            what: "topic",
            name: "a:b".into(),
            reason: "':'".into(),
            endpoint: "redis://127.0.0.1:1".into(),
        };
        assert!(!invalid.is_transient());
        let unavailable = ChannelError::Unavailable {
            endpoint: "redis://127.0.0.1:1".into(),
            operation: "publish".into(),
            grace: Duration::from_secs(1),
            waited: Duration::from_secs(1),
            source: Box::new(backend(true)),
        };
        assert!(!unavailable.is_transient());
    }

    #[test]
    fn unavailable_names_the_server_and_the_grace() {
        let e = ChannelError::Unavailable {
            endpoint: "redis://127.0.0.1:6379".into(),
            operation: "publish".into(),
            grace: Duration::from_secs(10),
            waited: Duration::from_millis(10_020),
            source: Box::new(backend(true)),
        };
        let text = e.to_string();
        assert!(
            text.starts_with(
                "channel redis://127.0.0.1:6379 unreachable for longer than --channel-grace 10 s"
            ),
            "{text}"
        );
        assert!(text.contains("closed the connection"), "{text}");
        assert_eq!(super::super::seconds(&Duration::from_millis(1500)), "1.5 s");
        assert_eq!(super::super::seconds(&Duration::from_millis(250)), "0.25 s");
    }
}
