//! [`MemcachedChannel`]: the [`Channel`] on a Memcached server (LambdaML's fastest channel).
//!
//! # Layout
//!
//! Every item of job `J` lives below `mlless:J:`, with a kind segment so that no topic or key
//! name is reserved and no two kinds of item can collide:
//!
//! | item | key | value |
//! | --- | --- | --- |
//! | message of (topic, step, worker) | `mlless:J:m:{topic}:{step}:{worker}` | a *head* |
//! | key | `mlless:J:k:{key}` | a *head* |
//! | chunk `i` of a large value | `mlless:J:c:{nonce:016x}:{i}` | raw bytes |
//! | index of what the job wrote | `mlless:J:index` | text lines, see *Cleanup* |
//!
//! A *head* is either the payload itself (item flags `FLAG_INLINE` = 0, when the
//! payload fits in one item) or a small manifest (flags `FLAG_CHUNKED` = 1):
//! `mlless-chunks v1 {nonce:016x} {count} {total length} {crc32:08x}`.
//!
//! # Large values
//!
//! Memcached refuses items above its `item_size_max` (1 MiB by default; read from
//! `stats settings` at connect). A larger payload is split into chunks of at most
//! [`chunk_size`](MemcachedChannel::chunk_size) bytes, written first under a fresh random nonce;
//! its manifest is written *last*, once every chunk is stored. A reader only ever looks at heads,
//! so a half-written message (chunks without a head) is invisible, and a complete one is
//! reassembled and checked against the manifest's length and CRC-32. Because chunk names carry a
//! nonce rather than the message's name, two writers of the same name never mix their chunks: a
//! re-invoked worker that publishes again, or two concurrent `put_key`s of large values, each
//! write their own chunks and the head decides which set is the value.
//!
//! # Idempotent publish
//!
//! A message head is written with `add`, so the first publish of a (topic, step, worker) wins
//! and a second one stores nothing (a chunked one deletes its unused chunks): a re-invoked
//! worker never changes a message a collector may have read. Keys are `set`: the last one wins.
//!
//! # Collect
//!
//! A collect multi-gets (`get k1 k2 …`) the heads of the workers still missing, then multi-gets
//! the chunks of the chunked ones, and sleeps with exponential backoff — 0.2 ms doubling up to
//! [`with_max_backoff`](MemcachedChannel::with_max_backoff) (10 ms by default) — until every
//! worker's message is there or the timeout passes. A head whose chunks are not all there (a
//! concurrent discard, or an eviction) counts as missing.
//!
//! # Cleanup
//!
//! Memcached cannot list keys, so each job keeps an *index* item that names every key the job
//! may have written, compactly: one line `m {topic} {first step} {last step} {max worker}` per
//! range of steps (ranges grow geometrically, so a channel appends O(log steps) lines per topic)
//! and one line `k {key}` per key name. A channel appends (`append`, plus `touch` to keep the
//! index alive as long as the newest item) before it writes an item the index does not cover
//! yet, and remembers what it recorded so that most writes cost no index traffic. [`cleanup`]
//! reads the index, multi-gets every head it names (absent ones cost a few bytes each), deletes
//! the heads it finds and their chunks, and deletes the index last (so an interrupted cleanup can
//! be run again).
//!
//! Items that no index line names — chunks orphaned by a crash or a failed exchange between
//! writing chunks and head, the chunks of a key value replaced by a concurrent writer, anything
//! written if an index append failed — are not deleted by cleanup; every item therefore also
//! carries an expiration ([`DEFAULT_TTL`](MemcachedChannel::DEFAULT_TTL), 24 h, or
//! `?ttl=SECONDS`), after which Memcached drops it. Size the server's memory (`-m`) for the data
//! in flight: Memcached evicts least-recently-used items when full, and an evicted message shows
//! up as a collect timeout.
//!
//! # Client
//!
//! The module speaks Memcached's text protocol itself over a small pool of
//! [`tokio::net::TcpStream`]s rather than use a client crate: the async crates available
//! (`async-memcached`, `memcache-async`) are single-connection `&mut self` clients without
//! timeouts, and do not pipeline mixed commands; the protocol is small, and owning it gives
//! bounded timeouts on every exchange (a connection whose exchange failed or timed out is
//! closed, never reused), pipelining (a `get` and a `set`, or a `get` and its `delete`s, in one
//! round trip), and flags, which tell inline values from manifests. Writes and reads of an
//! exchange run concurrently, so a pipeline of large values cannot deadlock on full socket
//! buffers.
//!
//! After a server restart, an idle connection that fails is replaced by a new one once (when the
//! channel's [`RetryPolicy`] retries: [`RetryPolicy::reconnect`], the default), and when no new
//! connection can be opened (the server is away) every idle connection is dropped, so the
//! client reconnects as soon as the server is back. Riding out the outage itself is the job of
//! [`RetryingChannel`](crate::RetryingChannel), which [`open_channel`](crate::open_channel)
//! wraps the channel in, with [`RetryPolicy::none`] for the channel's own policy
//! ([`with_retry`](MemcachedChannel::with_retry)), so that a failed exchange is retried by the
//! decorator alone.
//!
//! [`cleanup`]: Channel::cleanup

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Semaphore;
use tracing::{debug, trace};

use crate::channel::Result;
use crate::channel::collect::{CollectPlan, collect_with_backoff};
use crate::channel::retry::RetryPolicy;
use crate::channel::{Channel, ChannelError, MessageId, StepMessages, WorkerId, check_name};
use crate::redact::{redact_url, scrub, url_secrets};

mod chunks;
mod client;
mod index;
#[cfg(test)]
mod tests;
mod url;

use chunks::{FLAG_CHUNKED, FLAG_INLINE, Head};
pub use client::MemcachedError;
use client::{Client, Cmd, MAX_CONNECTIONS, Reply, StoreOp, Value, lock, open_first};
use index::{IndexCache, ParsedIndex};
use url::{parse_url, ttl_secs};

/// Longest key Memcached accepts.
const MAX_KEY_LEN: usize = 250;
/// Room left in an item for Memcached's own header, the key and the CAS value.
const ITEM_OVERHEAD: usize = 2048;
/// `item_size_max` assumed when the server does not report it.
const DEFAULT_ITEM_SIZE_MAX: usize = 1 << 20;
/// Most keys in one `get` command.
const KEYS_PER_GET: usize = 100;
/// Heads probed per exchange by cleanup.
const CLEANUP_BATCH: usize = 10_000;
/// First sleep of a collect that finds messages missing.
const INITIAL_BACKOFF: Duration = Duration::from_micros(200);

/// The Memcached channel (DESIGN §3; LambdaML's Memcached channel); see the [module
/// docs](self) for the layout of items, chunking, and cleanup.
///
/// ```no_run
/// # async fn example() -> Result<(), mlless_store::ChannelError> {
/// use std::time::Duration;
/// use bytes::Bytes;
/// use mlless_store::{Channel, MemcachedChannel, MessageId, StepMessages};
///
/// let channel = MemcachedChannel::connect("memcached://127.0.0.1:11211", "job-1").await?;
/// channel.publish(MessageId::new("updates", 0, 0), Bytes::from_static(b"hello")).await?;
/// let step = StepMessages::new("updates", 0, &[0]);
/// let got = channel.collect(step, Duration::from_secs(5)).await?;
/// assert_eq!(got, [&b"hello"[..]]);
/// channel.cleanup().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MemcachedChannel {
    client: Arc<Client>,
    job_id: String,
    ttl_secs: u32,
    max_backoff: Duration,
    /// Whether an exchange that failed on a pooled connection found dead is sent again on a
    /// new one ([`RetryPolicy::retries`]).
    retry: RetryPolicy,
    /// What this channel already recorded in the job's index.
    index: Arc<Mutex<IndexCache>>,
    /// The server's `evictions` counter when this channel connected.
    evictions_at_connect: u64,
}

impl MemcachedChannel {
    /// Default expiration of every item a channel writes (24 h); `?ttl=SECONDS` in the URL or
    /// [`with_ttl`](Self::with_ttl) changes it.
    pub const DEFAULT_TTL: Duration = url::DEFAULT_TTL;
    /// Default bound on connecting (resolving, connecting, and the first exchange);
    /// `?connect_timeout_ms=` changes it.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = url::DEFAULT_CONNECT_TIMEOUT;
    /// Default bound on one exchange with the server (including waiting for a free connection);
    /// `?op_timeout_ms=` changes it.
    pub const DEFAULT_OP_TIMEOUT: Duration = url::DEFAULT_OP_TIMEOUT;
    /// Default cap of the collect backoff.
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_millis(10);
    /// Port used when the URL names none.
    pub const DEFAULT_PORT: u16 = url::DEFAULT_PORT;

    /// Connects to the Memcached server of `url` for job `job_id`.
    ///
    /// `url` is `memcached://host[:port][?ttl=SECONDS&connect_timeout_ms=MS&op_timeout_ms=MS]`
    /// (port 11211 by default). Connecting resolves the host, opens a connection and reads the
    /// server's `item_size_max`, all within the connect timeout: a server that is down, refuses,
    /// or does not answer gives [`ChannelError::InvalidUrl`] naming the address, not a hang.
    /// The job id must be non-empty, without `:`, whitespace or control characters.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: connecting writes nothing; a cancelled connect drops its connection.
    pub async fn connect(url: &str, job_id: &str) -> Result<Self> {
        let settings = parse_url(url)?;
        let endpoint = format!("memcached://{}", settings.authority);
        check_job_id(job_id, &endpoint)?;
        let invalid = |reason: String| ChannelError::InvalidUrl {
            url: redact_url(url),
            reason: scrub(&reason, &url_secrets(url)),
        };
        let started = Instant::now();
        let connecting = open_first(&settings);
        let (addr, mut conn) =
            match tokio::time::timeout(settings.connect_timeout, connecting).await {
                Ok(Ok(found)) => found,
                Ok(Err(reason)) => return Err(invalid(reason)),
                Err(_) => {
                    return Err(invalid(format!(
                        "no answer from memcached at {} within {:?}",
                        settings.authority, settings.connect_timeout
                    )));
                }
            };
        let remaining = settings.connect_timeout.saturating_sub(started.elapsed());
        let probe =
            tokio::time::timeout(remaining, conn.exchange(&[Cmd::StatsSettings, Cmd::Stats])).await;
        let (stats, evictions) = match probe {
            Ok(Ok(replies)) => match replies.as_slice() {
                [Reply::Stats(stats), Reply::Stats(counters)] => {
                    (stats.clone(), evictions(counters))
                }
                other => {
                    return Err(invalid(format!(
                        "{} ({addr}) does not look like a memcached server: it replied \
                         {other:?} to \"stats settings\"",
                        settings.authority
                    )));
                }
            },
            Ok(Err(e)) => {
                return Err(invalid(format!(
                    "{} ({addr}) does not look like a memcached server: {e}",
                    settings.authority
                )));
            }
            Err(_) => {
                return Err(invalid(format!(
                    "memcached at {} ({addr}) accepted the connection but did not answer within \
                     {:?}",
                    settings.authority, settings.connect_timeout
                )));
            }
        };
        let item_size_max = stats
            .iter()
            .find(|(name, _)| name == "item_size_max")
            .and_then(|(_, value)| value.parse::<usize>().ok())
            .unwrap_or(DEFAULT_ITEM_SIZE_MAX);
        let chunk_size = item_size_max.saturating_sub(ITEM_OVERHEAD).max(1024);
        let client = Client {
            addr,
            endpoint,
            chunk_size,
            connect_timeout: settings.connect_timeout,
            op_timeout: settings.op_timeout,
            idle: Mutex::new(vec![conn]),
            permits: Semaphore::new(MAX_CONNECTIONS),
        };
        debug!(
            channel = %client.endpoint,
            %addr,
            item_size_max,
            chunk_size,
            job_id,
            "memcached channel connected"
        );
        Ok(Self {
            client: Arc::new(client),
            job_id: job_id.to_string(),
            ttl_secs: settings.ttl_secs,
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
            retry: RetryPolicy::reconnect(),
            index: Arc::default(),
            evictions_at_connect: evictions,
        })
    }

    /// The channel of another job on the same server, sharing this channel's connections and
    /// settings (no network traffic).
    pub fn for_job(&self, job_id: &str) -> Result<Self> {
        check_job_id(job_id, &self.client.endpoint)?;
        Ok(Self {
            client: Arc::clone(&self.client),
            job_id: job_id.to_string(),
            ttl_secs: self.ttl_secs,
            max_backoff: self.max_backoff,
            retry: self.retry,
            index: Arc::default(),
            evictions_at_connect: self.evictions_at_connect,
        })
    }

    /// Sets whether an exchange that failed on a pooled connection found dead is sent again on
    /// a new one (default [`RetryPolicy::reconnect`]: yes); [`RetryPolicy::none`] under a
    /// [`RetryingChannel`](crate::RetryingChannel), so that a request is retried at one level.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets the cap of the collect backoff (default 10 ms; at least 0.2 ms).
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff.max(INITIAL_BACKOFF);
        self
    }

    /// Sets the expiration of the items this channel writes from now on (1 s to 30 days).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl_secs = ttl_secs(ttl.as_secs());
        self
    }

    /// The job id this channel is namespaced by.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The expiration of the items this channel writes.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.ttl_secs))
    }

    /// The cap of the collect backoff.
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    /// The largest payload stored as one item; larger ones are chunked. Derived from the
    /// server's `item_size_max` less room for the item's header and key.
    pub fn chunk_size(&self) -> usize {
        self.client.chunk_size
    }

    fn prefix(&self) -> String {
        format!("mlless:{}", self.job_id)
    }

    /// The items of `messages`, in their order.
    fn message_keys(&self, messages: StepMessages<'_>) -> Vec<String> {
        messages
            .ids()
            .map(|id| self.message_key(id.topic, id.step, id.from))
            .collect()
    }

    fn message_key(&self, topic: &str, step: u64, worker: WorkerId) -> String {
        format!("{}:m:{topic}:{step}:{worker}", self.prefix())
    }

    fn key_key(&self, key: &str) -> String {
        format!("{}:k:{key}", self.prefix())
    }

    fn chunk_key(&self, nonce: u64, index: u32) -> String {
        format!("{}:c:{nonce:016x}:{index}", self.prefix())
    }

    fn index_key(&self) -> String {
        format!("{}:index", self.prefix())
    }

    fn check_topic(&self, topic: &str) -> Result<()> {
        let longest = self.message_key(topic, u64::MAX, WorkerId::MAX).len();
        check_name(
            "topic",
            topic,
            || self.describe(),
            |t| name_rule(t, true, longest),
        )
    }

    fn check_key(&self, key: &str) -> Result<()> {
        let full = self.key_key(key).len();
        check_name(
            "key",
            key,
            || self.describe(),
            |k| name_rule(k, false, full),
        )
    }

    /// The error of a failed exchange about item `key`.
    fn backend_error(&self, key: &str, err: MemcachedError) -> ChannelError {
        backend_error(&self.client.endpoint, key, err)
    }

    /// One exchange; errors name `what` (an item key).
    async fn exchange(&self, what: &str, cmds: &[Cmd]) -> Result<Vec<Reply>> {
        self.client
            .exchange(cmds, self.retry.retries())
            .await
            .map_err(|e| self.backend_error(what, e))
    }

    /// Multi-gets `keys` (in as many `get` commands as needed, one exchange).
    async fn get_many(&self, keys: &[String]) -> Result<HashMap<String, Value>> {
        let mut found = HashMap::new();
        if keys.is_empty() {
            return Ok(found);
        }
        let cmds: Vec<Cmd> = keys
            .chunks(KEYS_PER_GET)
            .map(|batch| Cmd::Get(batch.to_vec()))
            .collect();
        for reply in self.exchange(&keys[0], &cmds).await? {
            let Reply::Values(values) = reply else {
                return Err(self.unexpected(&keys[0], "get", &reply));
            };
            for value in values {
                found.insert(value.key.clone(), value);
            }
        }
        Ok(found)
    }

    /// Deletes `keys` in one exchange; absent keys are fine.
    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        let Some(first) = keys.first() else {
            return Ok(());
        };
        let cmds: Vec<Cmd> = keys.iter().cloned().map(Cmd::Delete).collect();
        for reply in self.exchange(first, &cmds).await? {
            if !matches!(reply, Reply::Deleted | Reply::NotFound) {
                return Err(self.unexpected(first, "delete", &reply));
            }
        }
        Ok(())
    }

    fn unexpected(&self, key: &str, command: &str, reply: &Reply) -> ChannelError {
        let err = match reply {
            Reply::ServerError(line) => MemcachedError::Server(line.clone()),
            other => MemcachedError::Protocol(format!("unexpected reply {other:?} to {command}")),
        };
        self.backend_error(key, err)
    }

    /// One poll of a collect: fetches the heads of the missing workers and the chunks of the
    /// chunked ones. Returns whether it found any.
    async fn poll_step(&self, keys: &[String], slots: &mut [Option<Bytes>]) -> Result<bool> {
        let mut wanted: Vec<String> = Vec::new();
        for (key, slot) in keys.iter().zip(slots.iter()) {
            if slot.is_none() && !wanted.contains(key) {
                wanted.push(key.clone());
            }
        }
        let mut heads = self.get_many(&wanted).await?;
        let heads: Vec<(String, Value)> = wanted
            .into_iter()
            .filter_map(|key| heads.remove(&key).map(|v| (key, v)))
            .collect();
        if heads.is_empty() {
            return Ok(false);
        }
        let names: Vec<String> = heads.iter().map(|(key, _)| key.clone()).collect();
        let mut found = false;
        for (name, payload) in names.iter().zip(self.resolve(heads).await?) {
            let Some(payload) = payload else { continue };
            found = true;
            for (key, slot) in keys.iter().zip(slots.iter_mut()) {
                if key == name {
                    *slot = Some(payload.clone());
                }
            }
        }
        Ok(found)
    }
}

#[async_trait::async_trait]
impl Channel for MemcachedChannel {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<()> {
        let MessageId { topic, step, from } = id;
        self.check_topic(topic)?;
        let key = self.message_key(topic, step, from);
        trace!(channel = %self.client.endpoint, key, len = payload.len(), "publish");
        self.index_message(topic, step, from).await?;
        let (flags, head, manifest) = if payload.len() <= self.client.chunk_size {
            (FLAG_INLINE, payload, None)
        } else {
            let manifest = self.write_chunks(&payload).await?;
            (FLAG_CHUNKED, manifest.encode(), Some(manifest))
        };
        let add = Cmd::Store {
            op: StoreOp::Add,
            key: key.clone(),
            flags,
            ttl: self.ttl_secs,
            data: head,
        };
        // If the exchange fails, the head may still have been stored (a lost reply): the
        // chunks stay (they expire), since deleting them could break a stored message.
        let reply = self.exchange(&key, &[add]).await?.pop();
        match reply {
            Some(Reply::Stored) => Ok(()),
            Some(Reply::NotStored) => {
                debug!(channel = %self.client.endpoint, key, "already published; kept the first");
                let Some(manifest) = manifest else {
                    return Ok(());
                };
                // Our chunks are unused unless the stored head is ours (a retried add).
                let stored = self
                    .get_many(std::slice::from_ref(&key))
                    .await?
                    .remove(&key);
                let ours = matches!(
                    stored.map(|v| Head::decode(v, self.client.chunk_size)),
                    Some(Ok(Head::Chunked(m))) if m.nonce == manifest.nonce
                );
                if !ours {
                    self.delete_quietly(&manifest.chunk_keys(self)).await;
                }
                Ok(())
            }
            other => {
                if let Some(manifest) = &manifest {
                    self.delete_quietly(&manifest.chunk_keys(self)).await;
                }
                let other = other.unwrap_or(Reply::Values(Vec::new()));
                Err(self.unexpected(&key, "add", &other))
            }
        }
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>> {
        self.check_topic(messages.topic)?;
        let keys = self.message_keys(messages);
        let mut slots: Vec<Option<Bytes>> = vec![None; keys.len()];
        self.poll_step(&keys, &mut slots).await?;
        Ok(slots)
    }

    async fn collect(&self, messages: StepMessages<'_>, timeout: Duration) -> Result<Vec<Bytes>> {
        self.check_topic(messages.topic)?;
        let keys = self.message_keys(messages);
        let backoff = (INITIAL_BACKOFF, self.max_backoff);
        let endpoint = &self.client.endpoint;
        let plan = CollectPlan::polling(endpoint, messages, timeout, backoff);
        collect_with_backoff(plan, |mut slots| {
            let keys = &keys;
            async move {
                let found = self.poll_step(keys, &mut slots).await?;
                Ok((slots, found))
            }
        })
        .await
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<()> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let mut keys: Vec<String> = Vec::with_capacity(from.len());
        for &w in from {
            let key = self.message_key(topic, step, w);
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        self.delete_heads(&keys).await
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<()> {
        self.check_key(key)?;
        let item = self.key_key(key);
        self.index_key_name(key).await?;
        let (flags, head, nonce) = if value.len() <= self.client.chunk_size {
            (FLAG_INLINE, value, None)
        } else {
            let manifest = self.write_chunks(&value).await?;
            (FLAG_CHUNKED, manifest.encode(), Some(manifest))
        };
        // Read the previous head in the same round trip, to delete its chunks if it had any.
        let cmds = [
            Cmd::Get(vec![item.clone()]),
            Cmd::Store {
                op: StoreOp::Set,
                key: item.clone(),
                flags,
                ttl: self.ttl_secs,
                data: head,
            },
        ];
        // As in publish: after a failed exchange the new chunks stay, since the head may be set.
        let mut replies = self.exchange(&item, &cmds).await?.into_iter();
        let previous = match replies.next() {
            Some(Reply::Values(mut values)) => values.pop(),
            _ => None,
        };
        match replies.next() {
            Some(Reply::Stored) => {}
            other => {
                if let Some(manifest) = &nonce {
                    self.delete_quietly(&manifest.chunk_keys(self)).await;
                }
                let other = other.unwrap_or(Reply::Values(Vec::new()));
                return Err(self.unexpected(&item, "set", &other));
            }
        }
        if let Some(Ok(Head::Chunked(old))) =
            previous.map(|v| Head::decode(v, self.client.chunk_size))
            && nonce.as_ref().is_none_or(|new| new.nonce != old.nonce)
        {
            self.delete_quietly(&old.chunk_keys(self)).await;
        }
        Ok(())
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>> {
        self.check_key(key)?;
        let item = self.key_key(key);
        let mut last_nonce = None;
        // A concurrent put_key may delete the chunks of the value just read: read again.
        for _ in 0..4 {
            let Some(value) = self
                .get_many(std::slice::from_ref(&item))
                .await?
                .remove(&item)
            else {
                return Ok(None);
            };
            let head = Head::decode(value, self.client.chunk_size)
                .map_err(|e| self.backend_error(&item, e))?;
            let manifest = match head {
                Head::Inline(data) => return Ok(Some(data)),
                Head::Chunked(manifest) => manifest,
            };
            if last_nonce == Some(manifest.nonce) {
                break;
            }
            if let Some(Some(data)) = self.read_chunked(&[&manifest]).await?.pop() {
                return Ok(Some(data));
            }
            last_nonce = Some(manifest.nonce);
        }
        Err(self.backend_error(
            &item,
            MemcachedError::Corrupt(
                "chunks of the value are missing (evicted? raise the server's memory)".into(),
            ),
        ))
    }

    async fn cleanup(&self) -> Result<()> {
        let index_key = self.index_key();
        let index = self.get_many(std::slice::from_ref(&index_key)).await?;
        let Some(index) = index.get(&index_key) else {
            debug!(channel = %self.client.endpoint, job = self.job_id, "cleanup: no index");
            *lock(&self.index) = IndexCache::default();
            return Ok(());
        };
        let parsed = ParsedIndex::parse(&index.data);
        let candidates = parsed.candidates();
        debug!(
            channel = %self.client.endpoint,
            job = self.job_id,
            topics = parsed.topics.len(),
            keys = parsed.keys.len(),
            candidates,
            "cleanup"
        );
        // Probe in batches (plain loops: the candidates can be many more than fit in memory).
        let mut deleted = 0;
        let mut batch: Vec<String> = Vec::with_capacity(CLEANUP_BATCH);
        for (topic, (ranges, max_worker)) in &parsed.topics {
            for &(lo, hi) in ranges {
                for step in lo..=hi {
                    for worker in 0..=*max_worker {
                        batch.push(self.message_key(topic, step, worker));
                        if batch.len() >= CLEANUP_BATCH {
                            deleted += self.delete_existing(&batch).await?;
                            batch.clear();
                        }
                    }
                }
            }
        }
        batch.extend(parsed.keys.iter().map(|key| self.key_key(key)));
        for keys in batch.chunks(CLEANUP_BATCH) {
            deleted += self.delete_existing(keys).await?;
        }
        self.delete_many(std::slice::from_ref(&index_key)).await?;
        *lock(&self.index) = IndexCache::default();
        debug!(channel = %self.client.endpoint, job = self.job_id, deleted, "cleanup done");
        Ok(())
    }

    fn describe(&self) -> String {
        self.client.endpoint.clone()
    }

    /// The items the server evicted since this channel connected, if any: a full Memcached
    /// drops the least recently used items, a job's messages among them.
    async fn explain_missing(&self) -> Result<Option<String>> {
        let replies = self.exchange("stats", &[Cmd::Stats]).await?;
        let Some(Reply::Stats(counters)) = replies.first() else {
            return Ok(None);
        };
        let evicted = evictions(counters).saturating_sub(self.evictions_at_connect);
        Ok((evicted > 0).then(|| {
            format!(
                "memcached at {} evicted {evicted} items since this function connected: it is \
                 full, and the job's messages were among what it dropped; give it more memory \
                 (memcached -m MB) or use Redis",
                self.client.endpoint
            )
        }))
    }
}

/// The `evictions` counter of a `stats` reply (0 if absent).
fn evictions(counters: &[(String, String)]) -> u64 {
    counters
        .iter()
        .find(|(name, _)| name == "evictions")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

/// A failed exchange with the server at `endpoint` about item `key`, as a
/// [`ChannelError::Backend`] marked transient by [`MemcachedError::is_transient`].
fn backend_error(endpoint: &str, key: &str, err: MemcachedError) -> ChannelError {
    ChannelError::Backend {
        endpoint: endpoint.to_string(),
        operation: format!("exchange about item {key}"),
        transient: err.is_transient(),
        source: Box::new(err),
    }
}

fn check_job_id(job_id: &str, endpoint: &str) -> Result<()> {
    check_name(
        "job id",
        job_id,
        || endpoint.to_string(),
        |job_id| {
            // The longest key of a job is a message key; leave room for topic, step and worker.
            if job_id.len() > 128 {
                return Err("longer than 128 bytes".to_string());
            }
            name_rule(job_id, true, 0)
        },
    )
}

/// Validates a name used in an item key: non-empty, no whitespace or control characters (the
/// text protocol separates with spaces), no `:` where it would make keys ambiguous, and the full
/// key within Memcached's 250 bytes.
fn name_rule(name: &str, no_colon: bool, full_len: usize) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || (no_colon && *c == ':'))
    {
        return Err(format!("character {c:?} is not allowed"));
    }
    if full_len > MAX_KEY_LEN {
        return Err(format!(
            "too long: its memcached key would be {full_len} bytes, at most {MAX_KEY_LEN} are allowed"
        ));
    }
    Ok(())
}

/// Entry points for the fuzz targets (`fuzz/` at the repository root).
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Decodes a Memcached item head as a channel with `chunk_size`-byte chunks would: the
    /// chunk manifest of a chunked item (flags 1) is parsed and checked. Returns the number of
    /// chunk keys it names, or `None` if the item is refused.
    pub fn decode_head(flags: u32, data: &[u8], chunk_size: usize) -> Option<u32> {
        let value = Value {
            key: "fuzz".into(),
            flags,
            data: Bytes::copy_from_slice(data),
        };
        match Head::decode(value, chunk_size).ok()? {
            Head::Inline(_) => Some(0),
            Head::Chunked(manifest) => Some(manifest.count),
        }
    }

    /// Parses a channel index item (what cleanup reads) and returns how many keys it names.
    pub fn parse_index(data: &[u8]) -> u128 {
        ParsedIndex::parse(data).candidates()
    }
}
