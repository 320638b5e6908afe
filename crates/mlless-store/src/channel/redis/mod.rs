//! [`RedisChannel`]: the [`Channel`] on one or several Redis servers (MLLess's channel, DESIGN
//! §3), with no second broker.
//!
//! # Layout
//!
//! With K shards (one Redis server, or database, per URL), worker `w`'s messages live on shard
//! `w % K`. On every shard, each (topic, step) has
//! - one **stream** `mlless:{job}:{topic}:{step}` whose entries are the messages of that step
//!   from the shard's workers: fields `w` (the worker id, decimal) and `p` (the payload bytes);
//! - one **index** hash `mlless:{job}:{topic}:{step}:idx`, worker id → stream entry id, which
//!   makes publishing idempotent and lets a discard remove exactly one worker's entry.
//!
//! Keys live at `mlless:{job}:keys:{key}` on shard 0. Every key the job writes carries a TTL
//! ([`DEFAULT_TTL`], refreshed by every write), so a job that dies leaves nothing behind for
//! good; [`Channel::cleanup`] deletes the job's keys on every shard at once.
//!
//! # Why a stream per step
//!
//! A collect of step t is one `XREAD BLOCK … STREAMS mlless:{job}:{topic}:{t} {last id}` per
//! shard: the reply carries exactly the step's payloads, the server wakes the reader as soon as
//! a message arrives (no polling), and the last id read is kept so no entry is read twice. With
//! one stream per topic instead, a reader would also receive every other step's messages (a
//! worker ahead under SSP, a slow reader behind), payloads of megabytes it must skip.
//!
//! # Operations
//!
//! - [`publish`](Channel::publish): one `EVALSHA` of a small Lua script on the worker's shard:
//!   if the index has no entry for the worker, `XADD` the message, record its id, and set the
//!   TTLs — atomically, in one round trip. A second publish of the same (topic, step, worker)
//!   finds the index entry and stores nothing.
//! - [`collect`](Channel::collect): per shard holding wanted workers, concurrently, `XREAD BLOCK`
//!   on a connection of its own (a blocked command stalls every other command of its
//!   connection, so blocking reads never share the connection that publishes) until every
//!   wanted worker's entry was seen or the timeout passes.
//! - [`discard`](Channel::discard): a script that `XDEL`s exactly the given workers' entries
//!   (found through the index) — never another worker's message that a slower reader may still
//!   need. A stream left empty expires after [`EMPTY_STREAM_LINGER`] rather than at once: a
//!   stream keeps its last entry id while it exists, so a late publish into it gets an id above
//!   everything a blocked reader has already seen.
//! - keys: `SET … EX` and `GET` on shard 0.
//! - [`cleanup`](Channel::cleanup): `SCAN MATCH mlless:{job}:*` + `UNLINK` on every shard.
//!
//! The shared connection of each shard reconnects by itself, and a blocking-read connection that
//! failed is dropped with every idle one (they died in the same outage), so the next read opens
//! a new one. Used bare, the channel retries a command that failed on a dropped connection or a
//! timeout under [`RetryPolicy::reconnect`] (a few attempts; all commands are idempotent). A
//! longer outage — a server restart — is ridden out by a
//! [`RetryingChannel`](crate::RetryingChannel), as [`open_channel`](crate::open_channel)
//! opens it: then the channel's policy is [`RetryPolicy::none`]
//! ([`with_retry`](RedisChannel::with_retry)), so that a failed command is retried by the
//! decorator alone.
//!
//! `shard.rs` holds one server's connections, retries and errors; `reply.rs` reads the replies
//! of the stream commands.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redis::aio::MultiplexedConnection;
use redis::{RedisError, Script, Value};
use tracing::{debug, trace};

use crate::channel::Result;
use crate::channel::retry::RetryPolicy;
use crate::channel::{
    Channel, ChannelError, KEYS_SEGMENT, MessageId, StepExchange, StepMessages, WorkerId,
    check_name, segment_topic_rule, server_urls,
};
use crate::redact::{redact_url, scrub};
use crate::store::check_segment;

mod reply;
mod shard;
use reply::*;

pub use shard::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use shard::{Shard, is_transient};

/// Default lifetime of every key the channel writes, refreshed on each write: what a job that
/// never calls [`Channel::cleanup`] leaves behind is gone after this.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
/// How long a step's stream lingers once every message in it was discarded.
pub const EMPTY_STREAM_LINGER: Duration = Duration::from_secs(60);
/// The prefix of every key of the channel: `mlless:{job}:…`.
pub const KEY_PREFIX: &str = "mlless";

/// How long a blocking read may overrun the collect's deadline before the connection is
/// considered hung (the reply of a read may carry many large payloads).
const BLOCKED_READ_GRACE: Duration = Duration::from_secs(10);
/// Keys removed per `UNLINK` (and asked per `SCAN`) by a cleanup.
const CLEANUP_BATCH: usize = 500;

/// The Lua that appends one message unless the worker's message of that step is already there,
/// records its id in the index and sets the TTLs, leaving `stored` 1 if it stored it, 0 if not.
/// KEYS: stream, index. ARGV: worker, payload, TTL in seconds. The body of both publish
/// scripts.
const PUBLISH_LUA: &str = r"
local stored = 0
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  local id = redis.call('XADD', KEYS[1], '*', 'w', ARGV[1], 'p', ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[1], id)
  redis.call('EXPIRE', KEYS[1], ARGV[3])
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  stored = 1
end
";

/// Publishes one message ([`PUBLISH_LUA`]). Returns 1 if stored, 0 if not.
static PUBLISH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{PUBLISH_LUA}return stored\n")));

/// Publishes one message as [`PUBLISH_SCRIPT`] does, then returns every entry of the step's
/// stream (`XRANGE - +`): the publish and the first read of a step in one round trip.
static PUBLISH_AND_READ_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{PUBLISH_LUA}return redis.call('XRANGE', KEYS[1], '-', '+')\n"
    ))
});

/// Removes the given workers' messages of one step.
/// KEYS: stream, index. ARGV: linger of an emptied stream in ms, then the workers.
/// Returns how many messages were removed.
static DISCARD_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local removed = 0
for i = 2, #ARGV do
  local id = redis.call('HGET', KEYS[2], ARGV[i])
  if id then
    removed = removed + redis.call('XDEL', KEYS[1], id)
    redis.call('HDEL', KEYS[2], ARGV[i])
  end
end
if removed > 0 and redis.call('XLEN', KEYS[1]) == 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return removed
",
    )
});

/// What the shards of a channel share, across the jobs of [`RedisChannel::for_job`].
struct Shards {
    shards: Vec<Shard>,
    describe: String,
}

/// The Redis channel (DESIGN §3, MLLess's channel): messages in one stream per (topic, step) on
/// each of K shards, worker `w` on shard `w % K`; blocking reads to collect; keys on shard 0.
/// See the [module documentation](self) for the layout and why.
///
/// Cloning is cheap and shares the connections.
#[derive(Clone)]
pub struct RedisChannel {
    shared: Arc<Shards>,
    job_id: String,
    /// `mlless:{job}:`
    prefix: String,
    ttl: Duration,
    /// How a command that failed on the connection is attempted again.
    retry: RetryPolicy,
}

impl std::fmt::Debug for RedisChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the clients: their connection info holds the password.
        f.debug_struct("RedisChannel")
            .field("endpoint", &self.shared.describe)
            .field("job_id", &self.job_id)
            .field("ttl", &self.ttl)
            .field("retry", &self.retry)
            .finish()
    }
}

impl RedisChannel {
    /// Connects to the Redis shards in `urls` for job `job_id`.
    ///
    /// `urls` is one URL or a comma-separated list of K URLs, one per shard:
    /// `redis://host[:port][/db]`, `rediss://…` (TLS), with credentials as
    /// `redis://:password@host` or `redis://user:password@host`. Every shard is connected (and
    /// answers `PING`) within [`CONNECT_TIMEOUT`], or this fails with
    /// [`ChannelError::InvalidUrl`] naming the address — never the password — and why: nothing
    /// listening, no answer, a password needed that the URL lacks, or a wrong password.
    ///
    /// The job id must be one path segment without `:` (see [`for_job`](Self::for_job)).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: connecting writes nothing; a cancelled connect drops its connections.
    pub async fn connect(urls: &str, job_id: &str) -> Result<RedisChannel> {
        let list = server_urls(
            urls,
            "no Redis URL given (expected redis://host:port, or a comma-separated list of one \
             URL per shard)",
        )?;
        for (i, url) in list.iter().enumerate() {
            if list[..i].contains(url) {
                return Err(ChannelError::InvalidUrl {
                    url: redact_url(url),
                    reason: "listed twice: every shard must be a distinct server or database"
                        .to_string(),
                });
            }
        }
        let describe = match list.len() {
            1 => redact_url(list[0]),
            2 => format!("{} (+1 shard)", redact_url(list[0])),
            k => format!("{} (+{} shards)", redact_url(list[0]), k - 1),
        };
        check_job_id(job_id, &describe)?;
        let shards =
            futures::future::try_join_all(list.iter().map(|url| Shard::connect(url))).await?;
        debug!(channel = %describe, shards = shards.len(), job = job_id, "Redis channel opened");
        let shared = Arc::new(Shards { shards, describe });
        Ok(Self::with_shared(shared, job_id))
    }

    fn with_shared(shared: Arc<Shards>, job_id: &str) -> RedisChannel {
        RedisChannel {
            shared,
            job_id: job_id.to_string(),
            prefix: format!("{KEY_PREFIX}:{job_id}:"),
            ttl: DEFAULT_TTL,
            retry: RetryPolicy::reconnect(),
        }
    }

    /// The channel of another job on the same shards, sharing this one's connections.
    ///
    /// A job id is one path segment (not empty, no `/`, no control or glob character — the
    /// rules of an object-store key segment) and contains no `:`, so that no job's keys are a
    /// prefix of another's.
    pub fn for_job(&self, job_id: &str) -> Result<RedisChannel> {
        check_job_id(job_id, &self.shared.describe)?;
        Ok(Self::with_shared(Arc::clone(&self.shared), job_id)
            .with_ttl(self.ttl)
            .with_retry(self.retry))
    }

    /// Sets how a command that failed on a dropped connection or a timeout is attempted again
    /// (default [`RetryPolicy::reconnect`]); [`RetryPolicy::none`] under a
    /// [`RetryingChannel`](crate::RetryingChannel), so that a request is retried at one level.
    pub fn with_retry(mut self, retry: RetryPolicy) -> RedisChannel {
        self.retry = retry;
        self
    }

    /// How a command that failed on the connection is attempted again.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// Sets the lifetime of the keys this channel writes (default [`DEFAULT_TTL`], at least one
    /// second); every write refreshes it.
    pub fn with_ttl(mut self, ttl: Duration) -> RedisChannel {
        self.ttl = ttl.max(Duration::from_secs(1));
        self
    }

    /// The job id this channel is namespaced by.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The lifetime of the keys this channel writes.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How many shards (Redis servers or databases) the channel spreads messages over.
    pub fn shard_count(&self) -> usize {
        self.shared.shards.len()
    }

    /// The shard that holds worker `worker`'s messages: `worker % K`.
    pub fn shard_of(&self, worker: WorkerId) -> usize {
        worker as usize % self.shared.shards.len()
    }

    /// The Redis key of the stream of (`topic`, `step`) on every shard.
    pub fn stream_key(&self, topic: &str, step: u64) -> String {
        format!("{}{topic}:{step}", self.prefix)
    }

    /// The Redis key (on shard 0) of the channel key `key`.
    pub fn key_key(&self, key: &str) -> String {
        format!("{}{KEYS_SEGMENT}:{key}", self.prefix)
    }

    fn index_key(&self, topic: &str, step: u64) -> String {
        format!("{}{topic}:{step}:idx", self.prefix)
    }

    fn shard(&self, index: usize) -> &Shard {
        &self.shared.shards[index]
    }

    fn check_topic(&self, topic: &str) -> Result<()> {
        check_name(
            "topic",
            topic,
            || self.describe(),
            |t| segment_topic_rule(t, true),
        )
    }

    fn check_key(&self, key: &str) -> Result<()> {
        check_name(
            "key",
            key,
            || self.describe(),
            |key| {
                if key.is_empty() || key.chars().any(char::is_control) {
                    return Err(
                        "a key must be non-empty and free of control characters".to_string()
                    );
                }
                Ok(())
            },
        )
    }

    /// A failure of Redis on shard `shard` while doing `op` on `key`.
    fn backend_error(&self, shard: &Shard, op: &str, key: &str, e: RedisError) -> ChannelError {
        shard.error(&format!("{op} of key {key}"), e)
    }

    /// Groups `workers` by shard, without duplicates: `(shard, workers)` for every shard with any.
    fn by_shard(&self, workers: &[WorkerId]) -> Vec<(usize, Vec<WorkerId>)> {
        let mut groups: Vec<Vec<WorkerId>> = vec![Vec::new(); self.shard_count()];
        let mut seen = HashSet::new();
        for &w in workers {
            if seen.insert(w) {
                groups[self.shard_of(w)].push(w);
            }
        }
        groups
            .into_iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .collect()
    }

    /// Reads the messages of `from` in stream `key` from every shard concurrently, blocking
    /// until `deadline` for the missing ones; `read` is what was already read of one shard's
    /// stream (by [`PUBLISH_AND_READ_SCRIPT`]), which that shard's reads go on from.
    async fn gather(
        &self,
        key: &str,
        from: &[WorkerId],
        deadline: Instant,
        mut read: Option<(usize, StreamRead)>,
    ) -> Result<HashMap<WorkerId, Bytes>> {
        let groups = self.by_shard(from);
        let reads = groups.iter().map(|(index, wanted)| {
            let start = match read.take_if(|(shard, _)| shard == index) {
                Some((_, start)) => start,
                None => StreamRead::default(),
            };
            self.collect_shard(*index, key, wanted, deadline, start)
        });
        let mut found: HashMap<WorkerId, Bytes> = HashMap::with_capacity(from.len());
        for part in futures::future::try_join_all(reads).await? {
            found.extend(part);
        }
        Ok(found)
    }

    /// Reads the stream `key` on shard `index`, on from `start`, until every worker of
    /// `wanted` was seen or `deadline` passed; returns what it found (a timeout is not an error
    /// here).
    async fn collect_shard(
        &self,
        index: usize,
        key: &str,
        wanted: &[WorkerId],
        deadline: Instant,
        start: StreamRead,
    ) -> Result<HashMap<WorkerId, Bytes>> {
        let shard = self.shard(index);
        let StreamRead {
            mut found,
            mut last_id,
        } = start;
        found.retain(|w, _| wanted.contains(w));
        if found.len() == wanted.len() {
            return Ok(found);
        }
        let mut conn: Option<MultiplexedConnection> = None;
        let mut backoff = self.retry.backoff();
        let mut reads = 0u32;
        // The failed reads in a row, and when the first of them failed.
        let mut failures = 0u32;
        let mut failing_since: Option<Instant> = None;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let attempt = async {
                let mut c = match conn.take() {
                    Some(c) => c,
                    None => shard.reader().await?,
                };
                let mut cmd = redis::cmd("XREAD");
                if !remaining.is_zero() {
                    // Round up: the read must not give up before the deadline.
                    let ms = remaining.as_micros().div_ceil(1000).max(1);
                    cmd.arg("BLOCK").arg(u64::try_from(ms).unwrap_or(u64::MAX));
                }
                cmd.arg("STREAMS").arg(key).arg(&last_id);
                let reply: Value = cmd.query_async(&mut c).await?;
                Ok::<_, RedisError>((c, reply))
            };
            let outcome = tokio::time::timeout(remaining + BLOCKED_READ_GRACE, attempt).await;
            reads += 1;
            let error = match outcome {
                Ok(Ok((c, reply))) => {
                    conn = Some(c);
                    backoff = self.retry.backoff();
                    failures = 0;
                    failing_since = None;
                    for (id, worker, payload) in stream_entries(reply) {
                        last_id = id;
                        if let Some(worker) = worker.filter(|w| wanted.contains(w)) {
                            found.entry(worker).or_insert(payload);
                        }
                    }
                    None
                }
                Ok(Err(e)) => Some(e),
                Err(_) => Some(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("a blocking read overran its deadline by {BLOCKED_READ_GRACE:?}"),
                ))),
            };
            let done = found.len() == wanted.len();
            let expired = Instant::now() >= deadline;
            match error {
                None if done || expired => {
                    if let Some(c) = conn.take() {
                        shard.release(c);
                    }
                    trace!(shard = %shard.address, key, reads, found = found.len(), wanted = wanted.len(), "shard read");
                    return Ok(found);
                }
                None => {}
                Some(e)
                    if is_transient(&e)
                        && !expired
                        && self.retry.allows_another(
                            failures + 1,
                            failing_since.get_or_insert_with(Instant::now).elapsed(),
                        ) =>
                {
                    // `conn` is None: a failed connection is dropped, never reused, and so are
                    // the idle ones, opened before the same outage. A server that stays away
                    // is the caller's to ride out (`RetryingChannel`).
                    failures += 1;
                    shard.forget_readers();
                    let pause = backoff
                        .next_delay()
                        .min(deadline.saturating_duration_since(Instant::now()));
                    debug!(shard = %shard.address, key, error = %scrub(&e.to_string(), &shard.secrets), retry_in = ?pause, "blocking read failed, reconnecting");
                    tokio::time::sleep(pause).await;
                }
                Some(e) => {
                    if is_transient(&e) {
                        shard.forget_readers();
                    }
                    return Err(self.backend_error(shard, "collect (XREAD)", key, e));
                }
            }
        }
    }

    /// Runs `script`, one of the publish scripts ([`PUBLISH_LUA`]), for `from`'s message of
    /// (`topic`, `step`) on `shard`.
    async fn run_publish<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        shard: &Shard,
        topic: &str,
        step: u64,
        from: WorkerId,
        payload: &Bytes,
    ) -> Result<T> {
        let stream = self.stream_key(topic, step);
        let index = self.index_key(topic, step);
        let ttl = self.ttl.as_secs();
        let (stream_ref, index_ref) = (&stream, &index);
        shard
            .retry("publish", &self.retry, |mut conn| async move {
                let mut invocation = script.prepare_invoke();
                invocation
                    .key(stream_ref)
                    .key(index_ref)
                    .arg(from)
                    .arg(payload.as_ref())
                    .arg(ttl);
                invocation.invoke_async(&mut conn).await
            })
            .await
            .map_err(|e| self.backend_error(shard, "publish", &stream, e))
    }

    /// The payloads of `messages` in their order out of what a collect `found`, or the
    /// [`ChannelError::Timeout`] naming the workers missing.
    fn collected(
        &self,
        messages: StepMessages<'_>,
        found: &HashMap<WorkerId, Bytes>,
        start: Instant,
    ) -> Result<Vec<Bytes>> {
        let StepMessages { topic, step, from } = messages;
        let out: Option<Vec<Bytes>> = from.iter().map(|w| found.get(w).cloned()).collect();
        if let Some(out) = out {
            trace!(channel = %self.describe(), topic, step, workers = from.len(), waited = ?start.elapsed(), "collected");
            return Ok(out);
        }
        let present: Vec<bool> = from.iter().map(|w| found.contains_key(w)).collect();
        Err(super::collect::timeout_error(
            self.describe(),
            messages,
            &present,
            start.elapsed(),
        ))
    }
}

fn check_job_id(job_id: &str, endpoint: &str) -> Result<()> {
    check_name(
        "job id",
        job_id,
        || endpoint.to_string(),
        |job_id| {
            if job_id.contains(':') {
                return Err("':' is not allowed here".to_string());
            }
            check_segment(job_id)
        },
    )
}

#[async_trait::async_trait]
impl Channel for RedisChannel {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<()> {
        let MessageId { topic, step, from } = id;
        self.check_topic(topic)?;
        let shard = self.shard(self.shard_of(from));
        let stream = self.stream_key(topic, step);
        let stored: i64 = self
            .run_publish(&PUBLISH_SCRIPT, shard, topic, step, from, &payload)
            .await?;
        trace!(channel = %self.describe(), key = stream, from, len = payload.len(), stored = stored == 1, "publish");
        Ok(())
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        if from.is_empty() {
            return Ok(Vec::new());
        }
        // A deadline already passed: one non-blocking XREAD per shard.
        let key = self.stream_key(topic, step);
        let found = self.gather(&key, from, Instant::now(), None).await?;
        Ok(from.iter().map(|w| found.get(w).cloned()).collect())
    }

    async fn collect(&self, messages: StepMessages<'_>, timeout: Duration) -> Result<Vec<Bytes>> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        if from.is_empty() {
            return Ok(Vec::new());
        }
        let start = Instant::now();
        let deadline = super::collect::deadline_after(start, timeout);
        let key = self.stream_key(topic, step);
        let found = self.gather(&key, from, deadline, None).await?;
        self.collected(messages, &found, start)
    }

    async fn publish_and_collect(
        &self,
        exchange: StepExchange<'_>,
        payload: Bytes,
    ) -> Result<Vec<Bytes>> {
        let MessageId { topic, step, from } = exchange.own();
        self.check_topic(topic)?;
        let start = Instant::now();
        let deadline = super::collect::deadline_after(start, exchange.timeout);
        let own = self.shard_of(from);
        let shard = self.shard(own);
        let stream = self.stream_key(topic, step);
        let entries: Value = self
            .run_publish(&PUBLISH_AND_READ_SCRIPT, shard, topic, step, from, &payload)
            .await?;
        let read = StreamRead::of_range(entries);
        trace!(channel = %self.describe(), key = stream, from, len = payload.len(), present = read.found.len(), "publish and read");
        let peers = exchange.peers;
        if peers.is_empty() {
            return Ok(Vec::new());
        }
        let found = self
            .gather(&stream, peers, deadline, Some((own, read)))
            .await?;
        self.collected(exchange.peers_messages(), &found, start)
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<()> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let stream = self.stream_key(topic, step);
        let index = self.index_key(topic, step);
        let linger = u64::try_from(EMPTY_STREAM_LINGER.as_millis()).unwrap_or(u64::MAX);
        let groups = self.by_shard(from);
        let discards = groups.iter().map(|(i, workers)| {
            let shard = self.shard(*i);
            let (stream, index) = (&stream, &index);
            async move {
                let removed: i64 = shard
                    .retry("discard", &self.retry, |mut conn| async move {
                        let mut invocation = DISCARD_SCRIPT.prepare_invoke();
                        invocation.key(stream).key(index).arg(linger);
                        for w in workers {
                            invocation.arg(*w);
                        }
                        invocation.invoke_async(&mut conn).await
                    })
                    .await
                    .map_err(|e| self.backend_error(shard, "discard", stream, e))?;
                trace!(shard = %shard.address, key = stream, removed, "discard");
                Ok::<_, ChannelError>(())
            }
        });
        futures::future::try_join_all(discards).await?;
        Ok(())
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<()> {
        self.check_key(key)?;
        let shard = self.shard(0);
        let redis_key = self.key_key(key);
        let ttl = self.ttl.as_secs();
        let (k, v) = (&redis_key, &value);
        shard
            .retry("put_key", &self.retry, |mut conn| async move {
                redis::cmd("SET")
                    .arg(k)
                    .arg(v.as_ref())
                    .arg("EX")
                    .arg(ttl)
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
            .map_err(|e| self.backend_error(shard, "put_key (SET)", &redis_key, e))
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>> {
        self.check_key(key)?;
        let shard = self.shard(0);
        let redis_key = self.key_key(key);
        let k = &redis_key;
        shard
            .retry("get_key", &self.retry, |mut conn| async move {
                redis::cmd("GET")
                    .arg(k)
                    .query_async::<Option<Bytes>>(&mut conn)
                    .await
            })
            .await
            .map_err(|e| self.backend_error(shard, "get_key (GET)", &redis_key, e))
    }

    async fn cleanup(&self) -> Result<()> {
        debug!(channel = %self.describe(), job = %self.job_id, "cleanup");
        let pattern = format!("{}*", self.prefix);
        let cleanups = self.shared.shards.iter().map(|shard| {
            let pattern = &pattern;
            async move {
                let mut cursor: u64 = 0;
                let mut removed = 0usize;
                loop {
                    let (next, keys): (u64, Vec<Vec<u8>>) = shard
                        .retry("cleanup (SCAN)", &self.retry, |mut conn| async move {
                            redis::cmd("SCAN")
                                .arg(cursor)
                                .arg("MATCH")
                                .arg(pattern)
                                .arg("COUNT")
                                .arg(CLEANUP_BATCH)
                                .query_async(&mut conn)
                                .await
                        })
                        .await
                        .map_err(|e| self.backend_error(shard, "cleanup (SCAN)", pattern, e))?;
                    for batch in keys.chunks(CLEANUP_BATCH) {
                        shard
                            .retry("cleanup (UNLINK)", &self.retry, |mut conn| async move {
                                redis::cmd("UNLINK")
                                    .arg(batch)
                                    .query_async::<()>(&mut conn)
                                    .await
                            })
                            .await
                            .map_err(|e| {
                                self.backend_error(shard, "cleanup (UNLINK)", pattern, e)
                            })?;
                        removed += batch.len();
                    }
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
                trace!(shard = %shard.address, removed, "cleanup");
                Ok::<_, ChannelError>(())
            }
        });
        futures::future::try_join_all(cleanups).await?;
        Ok(())
    }

    fn describe(&self) -> String {
        self.shared.describe.clone()
    }

    /// Nothing: a restart without persistence loses everything, and the supervisor's
    /// replacements replay what was lost.
    async fn explain_missing(&self) -> Result<Option<String>> {
        Ok(None)
    }
}
