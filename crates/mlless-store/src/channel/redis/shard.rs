//! One Redis server (or database) of a [`RedisChannel`](super::RedisChannel): its
//! connections, the attempts of a command (under the channel's
//! [`RetryPolicy`](crate::retry::RetryPolicy)), and what its errors mean.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, ServerErrorKind};
use tracing::{debug, trace};

use crate::channel::ChannelError;
use crate::channel::Result;
use crate::channel::retry::{self, RetryPolicy, Transient};
use crate::redact::{redact_url, scrub, url_secrets};

/// How long [`RedisChannel::connect`](super::RedisChannel::connect) waits for each server
/// (TCP, TLS, authentication, `PING`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a command other than a blocking read may wait for its reply (large payloads on a
/// slow link take time).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// Idle blocking-read connections kept per shard.
const MAX_IDLE_READERS: usize = 16;

/// One Redis server (or database) of a [`RedisChannel`].
pub(super) struct Shard {
    /// The shard's URL with any credentials redacted, for messages.
    pub(super) address: String,
    /// The credentials in the shard's URL, to scrub from the client's error texts.
    pub(super) secrets: Vec<String>,
    client: Client,
    /// The shared, self-reconnecting connection of every non-blocking command.
    commands: ConnectionManager,
    /// Idle connections for blocking reads, one per concurrent collect.
    readers: Mutex<Vec<MultiplexedConnection>>,
}

impl Shard {
    /// Connects to one server and checks that it answers `PING` (which also tells whether it
    /// wants a password the URL lacks), all within [`CONNECT_TIMEOUT`].
    pub(super) async fn connect(url: &str) -> Result<Shard> {
        let address = redact_url(url);
        let secrets = url_secrets(url);
        let fail = |reason: String| ChannelError::InvalidUrl {
            url: address.clone(),
            reason: scrub(&reason, &secrets),
        };
        let tls = match url.split_once("://") {
            Some(("redis", _)) => false,
            Some(("rediss", _)) => true,
            _ => {
                return Err(fail(
                    "not a Redis URL: expected redis://host[:port][/db], rediss://… for TLS, or \
                     redis://[user]:password@host…"
                        .to_string(),
                ));
            }
        };
        let client = Client::open(url).map_err(|e| fail(format!("invalid Redis URL: {e}")))?;
        let attempt = async {
            let mut first = client
                .get_multiplexed_async_connection_with_config(&reader_config())
                .await
                .map_err(|e| fail(connect_failure(&e, tls)))?;
            redis::cmd("PING")
                .query_async::<()>(&mut first)
                .await
                .map_err(|e| fail(connect_failure(&e, tls)))?;
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(CONNECT_TIMEOUT))
                .set_response_timeout(Some(RESPONSE_TIMEOUT))
                // One quick retry of a reconnect: longer outages are ridden out by the caller
                // (`RetryingChannel`), whose grace must not be outrun by the manager's own
                // backoff — a command waits for the reconnect in progress.
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_secs(2));
            let commands = ConnectionManager::new_with_config(client.clone(), manager_config)
                .await
                .map_err(|e| fail(connect_failure(&e, tls)))?;
            Ok::<_, ChannelError>((first, commands))
        };
        let (first, commands) = tokio::time::timeout(CONNECT_TIMEOUT, attempt)
            .await
            .map_err(|_| {
                fail(format!(
                    "no answer within {CONNECT_TIMEOUT:?} (is a Redis server listening there?){}",
                    tls_hint(tls)
                ))
            })??;
        debug!(shard = %address, "connected to Redis");
        Ok(Shard {
            address,
            secrets,
            client,
            commands,
            readers: Mutex::new(vec![first]),
        })
    }

    /// A failure of Redis on this shard while doing `operation` ([`backend_error`]).
    pub(super) fn error(&self, operation: &str, e: RedisError) -> ChannelError {
        backend_error(&self.address, &self.secrets, operation.to_string(), e)
    }

    /// An idle blocking-read connection, or a new one.
    pub(super) async fn reader(&self) -> Result<MultiplexedConnection, RedisError> {
        let idle = match self.readers.lock() {
            Ok(mut readers) => readers.pop(),
            Err(poisoned) => poisoned.into_inner().pop(),
        };
        if let Some(conn) = idle {
            return Ok(conn);
        }
        trace!(shard = %self.address, "opening a connection for blocking reads");
        self.client
            .get_multiplexed_async_connection_with_config(&reader_config())
            .await
    }

    /// Forgets the idle blocking-read connections: after one failed on the connection, the
    /// others (opened before the same outage) are most likely dead too.
    pub(super) fn forget_readers(&self) {
        let mut readers = match self.readers.lock() {
            Ok(readers) => readers,
            Err(poisoned) => poisoned.into_inner(),
        };
        readers.clear();
    }

    /// Returns a blocking-read connection that is idle (its last command completed).
    pub(super) fn release(&self, conn: MultiplexedConnection) {
        let mut readers = match self.readers.lock() {
            Ok(readers) => readers,
            Err(poisoned) => poisoned.into_inner(),
        };
        if readers.len() < MAX_IDLE_READERS {
            readers.push(conn);
        }
    }

    /// Runs `attempt` on the shared connection, again after a pause if it failed on a dropped
    /// connection or a timeout, as `policy` allows ([`RetryPolicy::none`] under a
    /// [`RetryingChannel`](crate::RetryingChannel), which retries instead).
    ///
    /// # Cancel safety
    ///
    /// A cancelled command may or may not have run (every command the channel sends may be
    /// repeated); the multiplexed connection drops its late reply and stays usable.
    pub(super) async fn retry<T, F, Fut>(
        &self,
        op: &str,
        policy: &RetryPolicy,
        mut attempt: F,
    ) -> Result<T, RedisError>
    where
        F: FnMut(ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        retry::run(
            policy,
            || attempt(self.commands.clone()),
            |e, tries, pause| {
                if let Some(pause) = pause {
                    let error = scrub(&e.to_string(), &self.secrets);
                    debug!(shard = %self.address, op, attempt = tries, %error, retry_in = ?pause, "Redis command failed, retrying");
                }
            },
        )
        .await
        .result
    }
}

/// A failure of Redis on `shard` while doing `operation`, as a [`ChannelError::Backend`]
/// marked transient by [`is_transient`]. The client's messages do not quote the URL, but a
/// reconnection's could: never let one carry the password out.
pub(super) fn backend_error(
    address: &str,
    secrets: &[String],
    operation: String,
    e: RedisError,
) -> ChannelError {
    let transient = is_transient(&e);
    let text = e.to_string();
    let source: Box<dyn std::error::Error + Send + Sync> =
        if secrets.iter().any(|s| text.contains(s.as_str())) {
            scrub(&text, secrets).into()
        } else {
            Box::new(e)
        };
    ChannelError::Backend {
        endpoint: address.to_string(),
        operation,
        transient,
        source,
    }
}

/// The configuration of a blocking-read connection: no response timeout of its own (a read
/// blocks as long as the collect allows; the collect bounds it).
fn reader_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(None)
}

impl Transient for RedisError {
    fn is_transient(&self) -> bool {
        is_transient(self)
    }
}

/// Errors worth another attempt: the connection dropped or timed out, or the server is busy.
pub(super) fn is_transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::BusyLoading | ServerErrorKind::TryAgain)
        )
}

/// Why a connection attempt failed, in words that say what to do. `tls`: the URL asked for
/// TLS (`rediss://`).
fn connect_failure(e: &RedisError, tls: bool) -> String {
    let code = e.code().unwrap_or_default();
    let text = e.to_string();
    if code == "NOAUTH" || text.contains("NOAUTH") {
        format!(
            "the server requires a password and the URL gives none (use \
             redis://:PASSWORD@host:port or redis://USER:PASSWORD@host:port): {text}"
        )
    } else if code == "WRONGPASS"
        || text.contains("WRONGPASS")
        || e.kind() == ErrorKind::AuthenticationFailed
    {
        format!("authentication failed (wrong user name or password): {text}")
    } else if speaks_another_protocol(e) {
        format!(
            "the server does not speak Redis: its answer is not in Redis's protocol (RESP); is \
             this the port of another server, e.g. Memcached or HTTP? Give --channel the \
             address of a Redis server: {text}"
        )
    } else if e.is_connection_refusal() {
        format!("connection refused (is a Redis server listening there?): {text}")
    } else if e.is_timeout() {
        format!(
            "no answer within {CONNECT_TIMEOUT:?}{}: {text}",
            tls_hint(tls)
        )
    } else if tls && text.contains("certificate") {
        format!("the server's TLS certificate was rejected: {text}")
    } else {
        format!("cannot connect{}: {text}", tls_hint(tls))
    }
}

/// Whether the server answered something that is not Redis's protocol (RESP): the first byte
/// of a RESP reply is a type marker (`+`, `-`, `:`, `$`, `*`, …), which an HTTP (`HTTP/1.1 …`)
/// or Memcached (`ERROR`) answer is not.
fn speaks_another_protocol(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Parse | ErrorKind::UnexpectedReturnType)
        || e.to_string().contains("Parse error")
}

/// A hint for a connection that failed or timed out: a plain server never completes a TLS
/// handshake.
fn tls_hint(tls: bool) -> &'static str {
    if tls {
        " (the URL asks for TLS with rediss://: does the server speak TLS on that port?)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "test")
    }

    fn backend(e: RedisError) -> ChannelError {
        backend_error("redis://127.0.0.1:1", &[], "publish".into(), e)
    }

    #[test]
    fn redis_connection_errors_are_retried() {
        use std::io::ErrorKind as K;
        for kind in [
            K::ConnectionRefused,
            K::ConnectionReset,
            K::BrokenPipe,
            K::TimedOut,
        ] {
            let e = backend(RedisError::from(io(kind)));
            assert!(e.is_transient(), "{kind:?}: {e}");
        }
        let loading =
            RedisError::from((ErrorKind::Server(ServerErrorKind::BusyLoading), "loading"));
        assert!(backend(loading).is_transient());
        let wrong_type = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "WRONGTYPE",
        ));
        assert!(!backend(wrong_type).is_transient());
        let parse = RedisError::from((ErrorKind::Parse, "bad reply"));
        assert!(!backend(parse).is_transient());
    }

    #[test]
    fn secrets_are_scrubbed_and_transience_kept() {
        let secrets = vec!["s3cr3t".to_string()];
        let e = RedisError::from(io(std::io::ErrorKind::ConnectionReset));
        let text = e.to_string();
        let e = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            format!("{text} s3cr3t"),
        ));
        let e = backend_error("redis://:***@h:1", &secrets, "publish".into(), e);
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        assert!(e.is_transient());
    }
}
