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
//! and a second one stores nothing (if it was chunked, it deletes its own, unused chunks). A
//! re-invoked worker therefore never changes a message that a collector may already have read.
//! Keys are written with `set`: the last write wins.
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
//! `?ttl=SECONDS`), after which Memcached drops it. Size the server's memory (`-m`) for the data in flight: Memcached is a
//! cache and evicts least-recently-used items when full, and an evicted message shows up as a
//! collect timeout.
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
//! After a server restart, an idle connection that fails is replaced by a new one once, and when
//! no new connection can be opened (the server is away) every idle connection is dropped, so
//! the client reconnects as soon as the server is back. Riding out the outage itself is the
//! job of [`RetryingChannel`](crate::RetryingChannel), which [`open_channel`](crate::open_channel)
//! wraps the channel in.
//!
//! [`cleanup`]: Channel::cleanup

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::Semaphore;
use tracing::{debug, trace, warn};

use crate::channel::{Channel, ChannelError, WorkerId, backoff_sleep, timeout_error};
use crate::redact::{redact_url, scrub, url_secrets};

/// Item flags of a head that holds the payload itself.
const FLAG_INLINE: u32 = 0;
/// Item flags of a head that holds a chunk manifest.
const FLAG_CHUNKED: u32 = 1;
/// Longest key Memcached accepts.
const MAX_KEY_LEN: usize = 250;
/// Room left in an item for Memcached's own header, the key and the CAS value.
const ITEM_OVERHEAD: usize = 2048;
/// `item_size_max` assumed when the server does not report it.
const DEFAULT_ITEM_SIZE_MAX: usize = 1 << 20;
/// Most connections one channel (and the channels of other jobs made from it) opens at once.
const MAX_CONNECTIONS: usize = 8;
/// Most keys in one `get` command.
const KEYS_PER_GET: usize = 100;
/// Most chunks written or read in one exchange.
const CHUNKS_PER_EXCHANGE: usize = 16;
/// Heads probed per exchange by cleanup.
const CLEANUP_BATCH: usize = 10_000;
/// Smallest range of steps an index line covers.
const INDEX_SPAN: u64 = 64;
/// First sleep of a collect that finds messages missing.
const INITIAL_BACKOFF: Duration = Duration::from_micros(200);
/// Longest reply line accepted (a `VALUE` line has a key of at most 250 bytes).
const MAX_LINE: usize = 8 << 10;
/// Largest value accepted in a reply, against a corrupt length.
const MAX_VALUE: usize = 1 << 30;
/// Longest relative expiration Memcached accepts (30 days); longer ones are Unix times.
const MAX_TTL_SECS: u64 = 30 * 24 * 3600;
/// Header of a manifest.
const MANIFEST_MAGIC: &str = "mlless-chunks v1";
/// Largest chunked value accepted, against a manifest that declares a huge length.
const MAX_CHUNKED: u64 = 1 << 32;

/// What went wrong talking to Memcached: the source of the [`ChannelError`]s of a
/// [`MemcachedChannel`] (wrapped in [`ChannelError::Backend`], which names the server and the
/// item).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemcachedError {
    /// The connection failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The server closed the connection in the middle of a reply.
    #[error("the server closed the connection")]
    Closed,
    /// No reply within the operation timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The server's reply could not be understood.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server refused a command (`SERVER_ERROR`, `CLIENT_ERROR`, `ERROR`, …).
    #[error("server replied {0:?}")]
    Server(String),
    /// A chunked value does not match its manifest (length or CRC-32).
    #[error("corrupt value: {0}")]
    Corrupt(String),
}

/// The Memcached channel (DESIGN §3; LambdaML's Memcached channel); see the [module
/// docs](self) for the layout of items, chunking, and cleanup.
///
/// ```no_run
/// # async fn example() -> Result<(), mlless_store::ChannelError> {
/// use std::time::Duration;
/// use bytes::Bytes;
/// use mlless_store::{Channel, MemcachedChannel};
///
/// let channel = MemcachedChannel::connect("memcached://127.0.0.1:11211", "job-1").await?;
/// channel.publish("updates", 0, 0, Bytes::from_static(b"hello")).await?;
/// let got = channel.collect("updates", 0, &[0], Duration::from_secs(5)).await?;
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
    /// What this channel already recorded in the job's index.
    index: Arc<Mutex<IndexCache>>,
}

/// A URL's settings.
struct Settings {
    /// `host:port` as written (IPv6 hosts in brackets).
    authority: String,
    host: String,
    port: u16,
    ttl_secs: u32,
    connect_timeout: Duration,
    op_timeout: Duration,
}

impl MemcachedChannel {
    /// Default expiration of every item a channel writes (24 h); `?ttl=SECONDS` in the URL or
    /// [`with_ttl`](Self::with_ttl) changes it.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
    /// Default bound on connecting (resolving, connecting, and the first exchange);
    /// `?connect_timeout_ms=` changes it.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
    /// Default bound on one exchange with the server (including waiting for a free connection);
    /// `?op_timeout_ms=` changes it.
    pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default cap of the collect backoff.
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_millis(10);
    /// Port used when the URL names none.
    pub const DEFAULT_PORT: u16 = 11211;

    /// Connects to the Memcached server of `url` for job `job_id`.
    ///
    /// `url` is `memcached://host[:port][?ttl=SECONDS&connect_timeout_ms=MS&op_timeout_ms=MS]`
    /// (port 11211 by default). Connecting resolves the host, opens a connection and reads the
    /// server's `item_size_max`, all within the connect timeout: a server that is down, refuses,
    /// or does not answer gives [`ChannelError::InvalidUrl`] naming the address, not a hang.
    /// The job id must be non-empty, without `:`, whitespace or control characters.
    pub async fn connect(url: &str, job_id: &str) -> Result<Self, ChannelError> {
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
        let probe = tokio::time::timeout(remaining, conn.exchange(&[Cmd::StatsSettings])).await;
        let stats = match probe {
            Ok(Ok(mut replies)) => match replies.pop() {
                Some(Reply::Stats(stats)) => stats,
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
            index: Arc::default(),
        })
    }

    /// The channel of another job on the same server, sharing this channel's connections and
    /// settings (no network traffic).
    pub fn for_job(&self, job_id: &str) -> Result<Self, ChannelError> {
        check_job_id(job_id, &self.client.endpoint)?;
        Ok(Self {
            client: Arc::clone(&self.client),
            job_id: job_id.to_string(),
            ttl_secs: self.ttl_secs,
            max_backoff: self.max_backoff,
            index: Arc::default(),
        })
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

    /// The items of the messages of `step` on `topic` from `from`, in that order.
    fn message_keys(&self, topic: &str, step: u64, from: &[WorkerId]) -> Vec<String> {
        from.iter()
            .map(|&w| self.message_key(topic, step, w))
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

    fn check_topic(&self, topic: &str) -> Result<(), ChannelError> {
        let longest = self.message_key(topic, u64::MAX, WorkerId::MAX);
        check_name(topic, true, longest.len()).map_err(|reason| ChannelError::InvalidName {
            what: "topic",
            name: topic.to_string(),
            reason,
            endpoint: self.describe(),
        })
    }

    fn check_key(&self, key: &str) -> Result<(), ChannelError> {
        let full = self.key_key(key);
        check_name(key, false, full.len()).map_err(|reason| ChannelError::InvalidName {
            what: "key",
            name: key.to_string(),
            reason,
            endpoint: self.describe(),
        })
    }

    /// The error of a failed exchange about item `key`.
    fn backend_error(&self, key: &str, err: MemcachedError) -> ChannelError {
        ChannelError::Backend {
            endpoint: self.client.endpoint.to_string(),
            operation: format!("exchange about item {key}"),
            source: Box::new(err),
        }
    }

    /// One exchange; errors name `what` (an item key).
    async fn exchange(&self, what: &str, cmds: &[Cmd]) -> Result<Vec<Reply>, ChannelError> {
        self.client
            .exchange(cmds)
            .await
            .map_err(|e| self.backend_error(what, e))
    }

    /// Multi-gets `keys` (in as many `get` commands as needed, one exchange).
    async fn get_many(&self, keys: &[String]) -> Result<HashMap<String, Value>, ChannelError> {
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
    async fn delete_many(&self, keys: &[String]) -> Result<(), ChannelError> {
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

    /// Writes the chunks of a large payload under a fresh nonce; returns its manifest.
    async fn write_chunks(&self, payload: &Bytes) -> Result<Manifest, ChannelError> {
        let chunk_size = self.client.chunk_size;
        let nonce = fresh_nonce();
        let count = payload.len().div_ceil(chunk_size);
        let manifest = Manifest {
            nonce,
            count: u32::try_from(count).map_err(|_| {
                self.backend_error(
                    &self.chunk_key(nonce, 0),
                    MemcachedError::Protocol(format!("{} bytes is too large", payload.len())),
                )
            })?,
            len: payload.len() as u64,
            crc: crc32fast::hash(payload),
        };
        let keys = manifest.chunk_keys(self);
        let batches: Vec<Vec<Cmd>> = keys
            .chunks(CHUNKS_PER_EXCHANGE)
            .enumerate()
            .map(|(b, batch)| {
                batch
                    .iter()
                    .enumerate()
                    .map(|(i, key)| {
                        let start = (b * CHUNKS_PER_EXCHANGE + i) * chunk_size;
                        let end = (start + chunk_size).min(payload.len());
                        Cmd::Store {
                            op: StoreOp::Set,
                            key: key.clone(),
                            flags: 0,
                            ttl: self.ttl_secs,
                            data: payload.slice(start..end),
                        }
                    })
                    .collect()
            })
            .collect();
        // At most MAX_CONNECTIONS exchanges run at once (the pool's limit).
        let written =
            futures::future::try_join_all(batches.into_iter().map(|cmds| self.store_all(cmds)))
                .await;
        if let Err(e) = written {
            self.delete_quietly(&keys).await;
            return Err(e);
        }
        trace!(channel = %self.client.endpoint, nonce, count, "chunks written");
        Ok(manifest)
    }

    /// Runs storage commands in one exchange; every one must be stored.
    async fn store_all(&self, cmds: Vec<Cmd>) -> Result<(), ChannelError> {
        let Some(Cmd::Store { key, .. }) = cmds.first() else {
            return Ok(());
        };
        for reply in self.exchange(key, &cmds).await? {
            if reply != Reply::Stored {
                return Err(self.unexpected(key, "store", &reply));
            }
        }
        Ok(())
    }

    /// Deletes chunks that nothing refers to; failures are only logged (the items expire).
    async fn delete_quietly(&self, keys: &[String]) {
        if let Err(e) = self.delete_many(keys).await {
            debug!(channel = %self.client.endpoint, error = %e, "could not delete unused chunks");
        }
    }

    /// Reads and checks the values of `manifests`; `None` for those with a chunk missing.
    async fn read_chunked(
        &self,
        manifests: &[&Manifest],
    ) -> Result<Vec<Option<Bytes>>, ChannelError> {
        let keys: Vec<String> = manifests.iter().flat_map(|m| m.chunk_keys(self)).collect();
        let batches: Vec<&[String]> = keys.chunks(CHUNKS_PER_EXCHANGE).collect();
        let fetched: Vec<HashMap<String, Value>> =
            futures::future::try_join_all(batches.into_iter().map(|batch| self.get_many(batch)))
                .await?;
        let mut chunks: HashMap<String, Bytes> = fetched
            .into_iter()
            .flatten()
            .map(|(key, value)| (key, value.data))
            .collect();
        let mut out = Vec::with_capacity(manifests.len());
        'manifests: for manifest in manifests {
            let mut parts = Vec::with_capacity(manifest.count as usize);
            for key in manifest.chunk_keys(self) {
                let Some(chunk) = chunks.remove(&key) else {
                    debug!(channel = %self.client.endpoint, chunk = key, "chunk missing");
                    out.push(None);
                    continue 'manifests;
                };
                parts.push(chunk);
            }
            let first = self.chunk_key(manifest.nonce, 0);
            // Allocated by what arrived, after checking it against the manifest.
            let total: u64 = parts.iter().map(|c| c.len() as u64).sum();
            if total != manifest.len {
                let reason = format!(
                    "chunks add up to {total} bytes, the manifest says {}",
                    manifest.len
                );
                return Err(self.backend_error(&first, MemcachedError::Corrupt(reason)));
            }
            let mut whole = BytesMut::with_capacity(total as usize);
            parts.iter().for_each(|c| whole.extend_from_slice(c));
            let crc = crc32fast::hash(&whole);
            if crc != manifest.crc {
                let reason = format!("CRC-32 {crc:08x}, the manifest says {:08x}", manifest.crc);
                return Err(self.backend_error(&first, MemcachedError::Corrupt(reason)));
            }
            out.push(Some(whole.freeze()));
        }
        Ok(out)
    }

    /// Turns heads into payloads (reading chunks where needed); `None` where incomplete.
    async fn resolve(
        &self,
        heads: Vec<(String, Value)>,
    ) -> Result<Vec<Option<Bytes>>, ChannelError> {
        let mut out: Vec<Option<Bytes>> = vec![None; heads.len()];
        let mut chunked: Vec<(usize, Manifest)> = Vec::new();
        for (i, (key, value)) in heads.into_iter().enumerate() {
            match Head::decode(value, self.client.chunk_size)
                .map_err(|e| self.backend_error(&key, e))?
            {
                Head::Inline(data) => out[i] = Some(data),
                Head::Chunked(manifest) => chunked.push((i, manifest)),
            }
        }
        if !chunked.is_empty() {
            let manifests: Vec<&Manifest> = chunked.iter().map(|(_, m)| m).collect();
            let payloads = self.read_chunked(&manifests).await?;
            for ((i, _), payload) in chunked.iter().zip(payloads) {
                out[*i] = payload;
            }
        }
        Ok(out)
    }

    /// One poll of a collect: fetches the heads of the missing workers and the chunks of the
    /// chunked ones. Returns whether it found any.
    async fn poll_step(
        &self,
        keys: &[String],
        slots: &mut [Option<Bytes>],
    ) -> Result<bool, ChannelError> {
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

    /// Records a message in the job's index unless this channel already did.
    async fn index_message(
        &self,
        topic: &str,
        step: u64,
        worker: WorkerId,
    ) -> Result<(), ChannelError> {
        let update = lock(&self.index).message_update(topic, step, worker);
        let Some(update) = update else {
            return Ok(());
        };
        self.append_index(&update.line).await?;
        lock(&self.index).record_message(topic, &update);
        Ok(())
    }

    /// Records a key in the job's index unless this channel already did.
    async fn index_key_name(&self, key: &str) -> Result<(), ChannelError> {
        if lock(&self.index).keys.contains(key) {
            return Ok(());
        }
        self.append_index(&format!("k {key}\n")).await?;
        lock(&self.index).keys.insert(key.to_string());
        Ok(())
    }

    /// Appends a line to the job's index (creating it if needed) and renews its expiration.
    /// If the server refuses (an index above the item size limit), warns and carries on: the
    /// items still expire, and this channel does not try that line again.
    async fn append_index(&self, line: &str) -> Result<(), ChannelError> {
        let key = self.index_key();
        let data = Bytes::copy_from_slice(line.as_bytes());
        for _ in 0..3 {
            let cmds = [
                Cmd::Store {
                    op: StoreOp::Append,
                    key: key.clone(),
                    flags: 0,
                    ttl: 0,
                    data: data.clone(),
                },
                Cmd::Touch(key.clone(), self.ttl_secs),
            ];
            let replies = self.exchange(&key, &cmds).await?;
            match replies.first() {
                Some(Reply::Stored) => return Ok(()),
                Some(Reply::NotStored) => {}
                Some(other) => {
                    warn!(
                        channel = %self.client.endpoint,
                        index = key,
                        reply = ?other,
                        "cannot extend the job's index; cleanup will rely on expiration"
                    );
                    return Ok(());
                }
                None => return Err(self.unexpected(&key, "append", &Reply::Values(Vec::new()))),
            }
            // No index yet: create it (unless another writer just did; then append again).
            let add = Cmd::Store {
                op: StoreOp::Add,
                key: key.clone(),
                flags: 0,
                ttl: self.ttl_secs,
                data: data.clone(),
            };
            match self.exchange(&key, &[add]).await?.first() {
                Some(Reply::Stored) => return Ok(()),
                Some(Reply::NotStored) => {}
                Some(other) => return Err(self.unexpected(&key, "add", other)),
                None => return Err(self.unexpected(&key, "add", &Reply::Values(Vec::new()))),
            }
        }
        warn!(channel = %self.client.endpoint, index = key, "index append kept racing");
        Ok(())
    }

    /// Deletes the given heads and the chunks of those that are chunked, if present.
    async fn delete_heads(&self, heads: &[String]) -> Result<(), ChannelError> {
        let Some(first) = heads.first() else {
            return Ok(());
        };
        let mut cmds: Vec<Cmd> = heads
            .chunks(KEYS_PER_GET)
            .map(|batch| Cmd::Get(batch.to_vec()))
            .collect();
        cmds.extend(heads.iter().cloned().map(Cmd::Delete));
        let mut chunks: Vec<String> = Vec::new();
        for reply in self.exchange(first, &cmds).await? {
            match reply {
                Reply::Values(values) => {
                    for value in values {
                        if let Ok(Head::Chunked(manifest)) =
                            Head::decode(value, self.client.chunk_size)
                        {
                            chunks.extend(manifest.chunk_keys(self));
                        }
                    }
                }
                Reply::Deleted | Reply::NotFound => {}
                other => return Err(self.unexpected(first, "delete", &other)),
            }
        }
        for batch in chunks.chunks(CLEANUP_BATCH) {
            self.delete_many(batch).await?;
        }
        Ok(())
    }

    /// Deletes every head of `batch` that exists, with its chunks; returns how many.
    async fn delete_existing(&self, batch: &[String]) -> Result<usize, ChannelError> {
        let found = self.get_many(batch).await?;
        let heads: Vec<String> = found.into_keys().collect();
        self.delete_heads(&heads).await?;
        Ok(heads.len())
    }
}

#[async_trait::async_trait]
impl Channel for MemcachedChannel {
    async fn publish(
        &self,
        topic: &str,
        step: u64,
        from: WorkerId,
        payload: Bytes,
    ) -> Result<(), ChannelError> {
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

    async fn poll(
        &self,
        topic: &str,
        step: u64,
        from: &[WorkerId],
    ) -> Result<Vec<Option<Bytes>>, ChannelError> {
        self.check_topic(topic)?;
        let keys = self.message_keys(topic, step, from);
        let mut slots: Vec<Option<Bytes>> = vec![None; from.len()];
        self.poll_step(&keys, &mut slots).await?;
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
        if from.is_empty() {
            return Ok(Vec::new());
        }
        let keys = self.message_keys(topic, step, from);
        let start = Instant::now();
        let deadline = start + timeout;
        // A poll still running at the deadline may finish, but not past this.
        let hard_deadline = deadline + timeout.max(Duration::from_millis(100));
        let mut slots: Vec<Option<Bytes>> = vec![None; from.len()];
        let mut backoff = INITIAL_BACKOFF;
        let mut polls = 0u32;
        loop {
            polls += 1;
            let poll = self.poll_step(&keys, &mut slots);
            let found = match tokio::time::timeout_at(hard_deadline.into(), poll).await {
                Ok(found) => found?,
                Err(_) => {
                    debug!(channel = %self.client.endpoint, topic, step, "poll overran the deadline");
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
                trace!(channel = %self.client.endpoint, topic, step, polls, waited = ?start.elapsed(), "collected");
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
                channel = %self.client.endpoint,
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
        let mut keys: Vec<String> = Vec::with_capacity(from.len());
        for &w in from {
            let key = self.message_key(topic, step, w);
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        self.delete_heads(&keys).await
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<(), ChannelError> {
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

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>, ChannelError> {
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

    async fn cleanup(&self) -> Result<(), ChannelError> {
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
}

// ---------------------------------------------------------------------------------------------
// Names, URLs, values.

fn check_job_id(job_id: &str, endpoint: &str) -> Result<(), ChannelError> {
    // The longest key of a job is a message key; leave room for topic, step and worker.
    let reason = if job_id.len() > 128 {
        Some("longer than 128 bytes".to_string())
    } else {
        check_name(job_id, true, 0).err()
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(ChannelError::InvalidName {
            what: "job id",
            name: job_id.to_string(),
            reason,
            endpoint: endpoint.to_string(),
        }),
    }
}

/// Validates a name used in an item key: non-empty, no whitespace or control characters (the
/// text protocol separates with spaces), no `:` where it would make keys ambiguous, and the full
/// key within Memcached's 250 bytes.
fn check_name(name: &str, no_colon: bool, full_len: usize) -> Result<(), String> {
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

fn ttl_secs(secs: u64) -> u32 {
    // Bounded by 30 days, so it fits.
    u32::try_from(secs.clamp(1, MAX_TTL_SECS)).unwrap_or(u32::MAX)
}

fn parse_url(url: &str) -> Result<Settings, ChannelError> {
    let invalid = |reason: String| ChannelError::InvalidUrl {
        url: redact_url(url),
        reason: scrub(&reason, &url_secrets(url)),
    };
    let Some(rest) = url.trim().strip_prefix("memcached://") else {
        return Err(invalid(
            "expected memcached://host[:port][?ttl=SECONDS&connect_timeout_ms=MS&op_timeout_ms=MS]"
                .into(),
        ));
    };
    let (authority, query) = match rest.split_once('?') {
        Some((authority, query)) => (authority, Some(query)),
        None => (rest, None),
    };
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains('@') {
        return Err(invalid(
            "credentials are not supported (the text protocol has no authentication)".into(),
        ));
    }
    if authority.contains('/') {
        return Err(invalid("a memcached URL has no path".into()));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return Err(invalid("unclosed '[' in the host".into()));
        };
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(invalid(format!("unexpected {after:?} after the host"))),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(invalid("no host".into()));
    }
    let port = match port {
        None => MemcachedChannel::DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(invalid(format!("invalid port {port:?}"))),
        },
    };
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut settings = Settings {
        authority,
        host: host.to_string(),
        port,
        ttl_secs: ttl_secs(MemcachedChannel::DEFAULT_TTL.as_secs()),
        connect_timeout: MemcachedChannel::DEFAULT_CONNECT_TIMEOUT,
        op_timeout: MemcachedChannel::DEFAULT_OP_TIMEOUT,
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = value
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid(format!("{name} must be a positive integer, not {value:?}")))?;
        match name {
            "ttl" if number <= MAX_TTL_SECS => settings.ttl_secs = ttl_secs(number),
            "ttl" => {
                return Err(invalid(format!(
                    "ttl is at most {MAX_TTL_SECS} s (30 days)"
                )));
            }
            "connect_timeout_ms" => settings.connect_timeout = Duration::from_millis(number),
            "op_timeout_ms" => settings.op_timeout = Duration::from_millis(number),
            _ => {
                return Err(invalid(format!(
                    "unknown parameter {name:?}; supported: ttl, connect_timeout_ms, op_timeout_ms"
                )));
            }
        }
    }
    Ok(settings)
}

/// Resolves the host and connects to the first address that accepts.
async fn open_first(settings: &Settings) -> Result<(SocketAddr, Conn), String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((settings.host.as_str(), settings.port))
        .await
        .map_err(|e| format!("cannot resolve {}: {e}", settings.authority))?
        .collect();
    let mut errors = Vec::new();
    for addr in addrs {
        match Conn::open(addr).await {
            Ok(conn) => return Ok((addr, conn)),
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    Err(format!(
        "cannot connect to memcached at {} ({})",
        settings.authority,
        if errors.is_empty() {
            "no address".to_string()
        } else {
            errors.join("; ")
        }
    ))
}

/// A unique name for one large value's chunks.
fn fresh_nonce() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS's randomness once per thread, then varied.
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.finish()
}

/// The manifest of a chunked value.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Manifest {
    nonce: u64,
    count: u32,
    len: u64,
    crc: u32,
}

impl Manifest {
    fn encode(&self) -> Bytes {
        let Manifest {
            nonce,
            count,
            len,
            crc,
        } = self;
        Bytes::from(format!(
            "{MANIFEST_MAGIC} {nonce:016x} {count} {len} {crc:08x}"
        ))
    }

    fn decode(data: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let rest = text.strip_prefix(MANIFEST_MAGIC)?;
        let mut fields = rest.split_whitespace();
        let manifest = Manifest {
            nonce: u64::from_str_radix(fields.next()?, 16).ok()?,
            count: fields.next()?.parse().ok()?,
            len: fields.next()?.parse().ok()?,
            crc: u32::from_str_radix(fields.next()?, 16).ok()?,
        };
        fields.next().is_none().then_some(manifest)
    }

    /// Checks a decoded manifest against the channel's chunk size before anything is fetched
    /// or allocated for it: the length is at most [`MAX_CHUNKED`] and the count is the number
    /// of chunks of that size it takes (so a hostile count cannot make millions of keys).
    fn check(&self, chunk_size: usize) -> Result<(), String> {
        let expected = self.len.div_ceil(chunk_size.max(1) as u64);
        if self.len > MAX_CHUNKED || self.count == 0 || u64::from(self.count) != expected {
            return Err(format!(
                "chunk manifest declares {} bytes in {} chunks (chunks of {chunk_size} bytes, at \
                 most {MAX_CHUNKED} bytes)",
                self.len, self.count
            ));
        }
        Ok(())
    }

    fn chunk_keys(&self, channel: &MemcachedChannel) -> Vec<String> {
        (0..self.count)
            .map(|i| channel.chunk_key(self.nonce, i))
            .collect()
    }
}

/// What a message or key item holds.
enum Head {
    Inline(Bytes),
    Chunked(Manifest),
}

impl Head {
    /// The head of an item, its chunk manifest checked against `chunk_size`
    /// ([`Manifest::check`]).
    fn decode(value: Value, chunk_size: usize) -> Result<Self, MemcachedError> {
        match value.flags {
            FLAG_INLINE => Ok(Head::Inline(value.data)),
            FLAG_CHUNKED => {
                let manifest = Manifest::decode(&value.data).ok_or_else(|| {
                    MemcachedError::Corrupt(format!(
                        "item {} has an unreadable chunk manifest",
                        value.key
                    ))
                })?;
                manifest.check(chunk_size).map_err(|reason| {
                    MemcachedError::Corrupt(format!("item {}: {reason}", value.key))
                })?;
                Ok(Head::Chunked(manifest))
            }
            flags => Err(MemcachedError::Corrupt(format!(
                "item {} has flags {flags}, not written by mlless",
                value.key
            ))),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The index of what a job wrote.

/// What one channel already recorded in its job's index.
#[derive(Debug, Default)]
struct IndexCache {
    /// Per topic: recorded ranges of steps (inclusive) and the largest worker recorded.
    topics: HashMap<String, (Vec<(u64, u64)>, WorkerId)>,
    keys: HashSet<String>,
}

impl IndexCache {
    /// The range to record (and its index line) for a message not yet covered, if any.
    fn message_update(&self, topic: &str, step: u64, worker: WorkerId) -> Option<IndexUpdate> {
        let (ranges, max_worker) = match self.topics.get(topic) {
            Some((ranges, max_worker)) => (ranges.as_slice(), *max_worker),
            None => (&[][..], worker),
        };
        let covered = ranges.iter().any(|&(lo, hi)| lo <= step && step <= hi);
        if covered && worker <= max_worker {
            return None;
        }
        let max_worker = max_worker.max(worker);
        // Extend a range that ends just before `step` by at least its length (so that a channel
        // writes O(log steps) lines); otherwise start a new range.
        let range = ranges
            .iter()
            .find(|&&(lo, hi)| lo <= step && step <= hi)
            .copied()
            .or_else(|| {
                ranges.iter().find_map(|&(lo, hi)| {
                    let span = (hi - lo + 1).max(INDEX_SPAN);
                    (step > hi && step - hi <= span).then(|| (lo, step.saturating_add(span - 1)))
                })
            })
            .unwrap_or((step, step.saturating_add(INDEX_SPAN - 1)));
        let line = format!("m {topic} {} {} {max_worker}\n", range.0, range.1);
        Some(IndexUpdate {
            range,
            max_worker,
            line,
        })
    }

    /// Remembers an index line once it is written.
    fn record_message(&mut self, topic: &str, update: &IndexUpdate) {
        let (ranges, max_worker) = self
            .topics
            .entry(topic.to_string())
            .or_insert_with(|| (Vec::new(), update.max_worker));
        let (new_lo, new_hi) = update.range;
        ranges.retain(|&(lo, hi)| !(new_lo <= lo && hi <= new_hi));
        ranges.push(update.range);
        *max_worker = (*max_worker).max(update.max_worker);
    }
}

/// A line to add to the index, and what it covers.
#[derive(Debug)]
struct IndexUpdate {
    range: (u64, u64),
    max_worker: WorkerId,
    line: String,
}

/// The index item, parsed: per topic, merged ranges of steps and the largest worker; key names.
#[derive(Debug, Default)]
struct ParsedIndex {
    topics: HashMap<String, (Vec<(u64, u64)>, WorkerId)>,
    keys: HashSet<String>,
}

impl ParsedIndex {
    fn parse(data: &[u8]) -> Self {
        let mut parsed = ParsedIndex::default();
        for line in String::from_utf8_lossy(data).lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields.as_slice() {
                ["k", key] => {
                    parsed.keys.insert((*key).to_string());
                }
                ["m", topic, lo, hi, worker] => {
                    let (Ok(lo), Ok(hi), Ok(worker)) = (
                        lo.parse::<u64>(),
                        hi.parse::<u64>(),
                        worker.parse::<WorkerId>(),
                    ) else {
                        warn!(line, "unreadable line in a memcached channel index");
                        continue;
                    };
                    let entry = parsed
                        .topics
                        .entry((*topic).to_string())
                        .or_insert_with(|| (Vec::new(), 0));
                    entry.0.push((lo.min(hi), hi.max(lo)));
                    entry.1 = entry.1.max(worker);
                }
                [""] => {}
                _ => warn!(line, "unreadable line in a memcached channel index"),
            }
        }
        for (ranges, _) in parsed.topics.values_mut() {
            ranges.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
            for &(lo, hi) in ranges.iter() {
                match merged.last_mut() {
                    Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                    _ => merged.push((lo, hi)),
                }
            }
            *ranges = merged;
        }
        parsed
    }

    /// How many item keys the index names.
    fn candidates(&self) -> u128 {
        let messages: u128 = self
            .topics
            .values()
            .map(|(ranges, max_worker)| {
                let steps: u128 = ranges.iter().map(|&(lo, hi)| u128::from(hi - lo) + 1).sum();
                steps * (u128::from(*max_worker) + 1)
            })
            .sum();
        messages + self.keys.len() as u128
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// The text-protocol client.

/// A command of the text protocol.
#[derive(Debug)]
enum Cmd {
    Get(Vec<String>),
    Store {
        op: StoreOp,
        key: String,
        flags: u32,
        ttl: u32,
        data: Bytes,
    },
    Delete(String),
    Touch(String, u32),
    StatsSettings,
}

#[derive(Clone, Copy, Debug)]
enum StoreOp {
    Set,
    Add,
    Append,
}

impl StoreOp {
    fn name(self) -> &'static str {
        match self {
            StoreOp::Set => "set",
            StoreOp::Add => "add",
            StoreOp::Append => "append",
        }
    }
}

/// A reply to one command.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    Values(Vec<Value>),
    Stored,
    NotStored,
    Deleted,
    NotFound,
    Touched,
    Stats(Vec<(String, String)>),
    /// `SERVER_ERROR …`: the server refused this command; the connection is still usable.
    ServerError(String),
}

/// One item of a `get` reply.
#[derive(Debug, PartialEq, Eq)]
struct Value {
    key: String,
    flags: u32,
    data: Bytes,
}

/// A pool of connections to one server.
struct Client {
    addr: SocketAddr,
    /// `memcached://host:port`.
    endpoint: String,
    chunk_size: usize,
    connect_timeout: Duration,
    op_timeout: Duration,
    idle: Mutex<Vec<Conn>>,
    permits: Semaphore,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("addr", &self.addr)
            .field("chunk_size", &self.chunk_size)
            .field("op_timeout", &self.op_timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    async fn open(&self) -> Result<Conn, MemcachedError> {
        trace!(channel = %self.endpoint, "opening a connection");
        match tokio::time::timeout(self.connect_timeout, Conn::open(self.addr)).await {
            Ok(conn) => conn,
            Err(_) => Err(MemcachedError::Timeout(self.connect_timeout)),
        }
    }

    /// Sends `cmds` on one connection and reads their replies, all within the operation
    /// timeout. A connection whose exchange failed, timed out, or was cancelled is closed.
    async fn exchange(&self, cmds: &[Cmd]) -> Result<Vec<Reply>, MemcachedError> {
        let work = async {
            let _permit = self
                .permits
                .acquire()
                .await
                .map_err(|_| MemcachedError::Protocol("connection pool closed".into()))?;
            let idle = lock(&self.idle).pop();
            let (mut conn, reused) = match idle {
                Some(conn) => (conn, true),
                None => match self.open().await {
                    Ok(conn) => (conn, false),
                    Err(e) => {
                        lock(&self.idle).clear();
                        return Err(e);
                    }
                },
            };
            let replies = match conn.exchange(cmds).await {
                Ok(replies) => replies,
                // A pooled connection the server (or a middlebox) closed while idle: once more
                // on a fresh one. Every command this module sends may be repeated: gets, sets,
                // deletes and touches are idempotent, a repeated `add` finds its own item
                // (publish handles that), and a repeated index line is harmless.
                Err(e @ (MemcachedError::Closed | MemcachedError::Io(_))) if reused => {
                    debug!(channel = %self.endpoint, error = %e, "stale connection; reconnecting");
                    drop(conn);
                    conn = match self.open().await {
                        Ok(conn) => conn,
                        Err(e) => {
                            // The server is away: the other idle connections died with it.
                            lock(&self.idle).clear();
                            return Err(e);
                        }
                    };
                    conn.exchange(cmds).await?
                }
                Err(e) => return Err(e),
            };
            lock(&self.idle).push(conn);
            Ok(replies)
        };
        match tokio::time::timeout(self.op_timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(MemcachedError::Timeout(self.op_timeout)),
        }
    }
}

/// One connection, with the bytes read past the last reply (none between exchanges).
struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Self, MemcachedError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(16 << 10),
        })
    }

    /// Writes every command while reading the replies (concurrently, so that a pipeline of
    /// large values cannot fill both sides' socket buffers and deadlock).
    async fn exchange(&mut self, cmds: &[Cmd]) -> Result<Vec<Reply>, MemcachedError> {
        let (read_half, mut write_half) = self.stream.split();
        let write = async {
            write_commands(&mut write_half, cmds)
                .await
                .map_err(MemcachedError::Io)
        };
        let mut reader = Reader {
            half: read_half,
            buf: &mut self.buf,
        };
        let read = async {
            let mut replies = Vec::with_capacity(cmds.len());
            for cmd in cmds {
                replies.push(reader.reply(cmd).await?);
            }
            Ok::<_, MemcachedError>(replies)
        };
        let ((), replies) = futures::future::try_join(write, read).await?;
        if !self.buf.is_empty() {
            return Err(MemcachedError::Protocol(format!(
                "{} unexpected bytes after the replies",
                self.buf.len()
            )));
        }
        Ok(replies)
    }
}

async fn write_commands(w: &mut WriteHalf<'_>, cmds: &[Cmd]) -> std::io::Result<()> {
    /// Payloads below this are copied into the staging buffer; larger ones are written as is.
    const COPY_BELOW: usize = 16 << 10;
    let mut staged: Vec<u8> = Vec::with_capacity(1024);
    for cmd in cmds {
        match cmd {
            Cmd::Get(keys) => {
                staged.extend_from_slice(b"get");
                for key in keys {
                    staged.push(b' ');
                    staged.extend_from_slice(key.as_bytes());
                }
                staged.extend_from_slice(b"\r\n");
            }
            Cmd::Store {
                op,
                key,
                flags,
                ttl,
                data,
            } => {
                staged.extend_from_slice(
                    format!("{} {key} {flags} {ttl} {}\r\n", op.name(), data.len()).as_bytes(),
                );
                if data.len() < COPY_BELOW {
                    staged.extend_from_slice(data);
                } else {
                    w.write_all(&staged).await?;
                    staged.clear();
                    w.write_all(data).await?;
                }
                staged.extend_from_slice(b"\r\n");
            }
            Cmd::Delete(key) => {
                staged.extend_from_slice(format!("delete {key}\r\n").as_bytes());
            }
            Cmd::Touch(key, ttl) => {
                staged.extend_from_slice(format!("touch {key} {ttl}\r\n").as_bytes());
            }
            Cmd::StatsSettings => staged.extend_from_slice(b"stats settings\r\n"),
        }
        if staged.len() >= 64 << 10 {
            w.write_all(&staged).await?;
            staged.clear();
        }
    }
    w.write_all(&staged).await?;
    w.flush().await
}

/// Reads replies from one connection.
struct Reader<'a> {
    half: ReadHalf<'a>,
    buf: &'a mut BytesMut,
}

impl Reader<'_> {
    async fn fill(&mut self) -> Result<(), MemcachedError> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 << 10);
        }
        if self.half.read_buf(self.buf).await? == 0 {
            return Err(MemcachedError::Closed);
        }
        Ok(())
    }

    /// The next line, without its `\r\n`.
    async fn line(&mut self) -> Result<String, MemcachedError> {
        let mut scanned = 0;
        loop {
            if let Some(pos) = self.buf[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + pos;
                let line = self.buf.split_to(end + 1);
                let line = line.strip_suffix(b"\r\n").unwrap_or(&line[..end]);
                return Ok(String::from_utf8_lossy(line).into_owned());
            }
            scanned = self.buf.len();
            if scanned > MAX_LINE {
                return Err(MemcachedError::Protocol(format!(
                    "reply line longer than {MAX_LINE} bytes"
                )));
            }
            self.fill().await?;
        }
    }

    /// The next `len` bytes of data and their `\r\n`.
    async fn data(&mut self, len: usize) -> Result<Bytes, MemcachedError> {
        let total = len + 2;
        let mut data = if self.buf.len() >= total {
            self.buf.split_to(total)
        } else {
            let mut data = BytesMut::with_capacity(total);
            data.extend_from_slice(&self.buf.split());
            while data.len() < total {
                // The spare capacity is exactly what is missing: never reads past this value.
                if self.half.read_buf(&mut data).await? == 0 {
                    return Err(MemcachedError::Closed);
                }
            }
            data
        };
        if !data.ends_with(b"\r\n") {
            return Err(MemcachedError::Protocol(
                "data block not terminated by \\r\\n".into(),
            ));
        }
        data.truncate(len);
        Ok(data.freeze())
    }

    async fn reply(&mut self, cmd: &Cmd) -> Result<Reply, MemcachedError> {
        match cmd {
            Cmd::Get(_) => {
                let mut values = Vec::new();
                loop {
                    let line = self.line().await?;
                    if line == "END" {
                        return Ok(Reply::Values(values));
                    }
                    let Some(header) = line.strip_prefix("VALUE ") else {
                        return error_reply(line);
                    };
                    let fields: Vec<&str> = header.split(' ').collect();
                    let (key, flags, len) = match fields.as_slice() {
                        [key, flags, len] | [key, flags, len, _] => (*key, *flags, *len),
                        _ => return Err(MemcachedError::Protocol(format!("bad line {line:?}"))),
                    };
                    let (Ok(flags), Ok(len)) = (flags.parse::<u32>(), len.parse::<usize>()) else {
                        return Err(MemcachedError::Protocol(format!("bad line {line:?}")));
                    };
                    if len > MAX_VALUE {
                        return Err(MemcachedError::Protocol(format!("value of {len} bytes")));
                    }
                    let key = key.to_string();
                    let data = self.data(len).await?;
                    values.push(Value { key, flags, data });
                }
            }
            Cmd::StatsSettings => {
                let mut stats = Vec::new();
                loop {
                    let line = self.line().await?;
                    if line == "END" {
                        return Ok(Reply::Stats(stats));
                    }
                    let Some(stat) = line.strip_prefix("STAT ") else {
                        return error_reply(line);
                    };
                    let (name, value) = stat.split_once(' ').unwrap_or((stat, ""));
                    stats.push((name.to_string(), value.to_string()));
                }
            }
            Cmd::Store { .. } | Cmd::Delete(_) | Cmd::Touch(..) => {
                let line = self.line().await?;
                match line.as_str() {
                    "STORED" => Ok(Reply::Stored),
                    "NOT_STORED" => Ok(Reply::NotStored),
                    "DELETED" => Ok(Reply::Deleted),
                    "NOT_FOUND" => Ok(Reply::NotFound),
                    "TOUCHED" => Ok(Reply::Touched),
                    _ => error_reply(line),
                }
            }
        }
    }
}

/// `SERVER_ERROR` refuses one command and leaves the connection usable; anything else
/// (`ERROR`, `CLIENT_ERROR`, garbage) is fatal for the connection.
fn error_reply(line: String) -> Result<Reply, MemcachedError> {
    if line.starts_with("SERVER_ERROR") {
        Ok(Reply::ServerError(line))
    } else if line == "ERROR" || line.starts_with("CLIENT_ERROR") {
        Err(MemcachedError::Server(line))
    } else {
        let shown: String = line.chars().take(80).collect();
        Err(MemcachedError::Protocol(format!(
            "unexpected line {shown:?}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_round_trip() {
        let m = Manifest {
            nonce: 0xdead_beef_0123_4567,
            count: 9,
            len: 9 << 20,
            crc: 0x0a0b_0c0d,
        };
        assert_eq!(Manifest::decode(&m.encode()), Some(m));
        assert_eq!(Manifest::decode(b"mlless-chunks v1 12 x 3 4"), None);
        assert_eq!(Manifest::decode(b"hello"), None);
    }

    #[test]
    fn manifests_are_checked_before_use() {
        let m = |count, len| Manifest {
            nonce: 1,
            count,
            len,
            crc: 0,
        };
        let chunk = 1 << 20;
        assert!(m(9, 9 << 20).check(chunk).is_ok());
        assert!(m(10, (9 << 20) + 1).check(chunk).is_ok());
        // A length of 2^40 is refused before any chunk is fetched or buffer allocated.
        let huge = m(1 << 20, 1 << 40).check(chunk).unwrap_err();
        assert!(huge.contains("1099511627776 bytes"), "{huge}");
        // A count that does not match the length would name billions of chunk keys.
        assert!(m(u32::MAX, 10 << 20).check(chunk).is_err());
        assert!(m(0, 0).check(chunk).is_err());
        assert!(m(1, 0).check(chunk).is_err());
        let value = Value {
            key: "head".into(),
            flags: FLAG_CHUNKED,
            data: m(u32::MAX, 1 << 40).encode(),
        };
        let err = Head::decode(value, chunk).err().expect("corrupt");
        assert!(err.to_string().contains("head"), "{err}");
    }

    #[test]
    fn urls() {
        let s = parse_url("memcached://127.0.0.1:11311").expect("parse");
        assert_eq!((s.authority.as_str(), s.port), ("127.0.0.1:11311", 11311));
        let s = parse_url("memcached://cache/?ttl=60&op_timeout_ms=50").expect("parse");
        assert_eq!(s.authority, "cache:11211");
        assert_eq!(s.ttl_secs, 60);
        assert_eq!(s.op_timeout, Duration::from_millis(50));
        let s = parse_url("memcached://[::1]:5").expect("parse");
        assert_eq!((s.host.as_str(), s.authority.as_str()), ("::1", "[::1]:5"));
        for bad in [
            "redis://x",
            "memcached://",
            "memcached://h:0",
            "memcached://h:x",
            "memcached://u:p@h",
            "memcached://h/path",
            "memcached://h?ttl=0",
            "memcached://h?bogus=1",
            "memcached://[::1",
        ] {
            assert!(
                matches!(parse_url(bad), Err(ChannelError::InvalidUrl { .. })),
                "{bad}"
            );
        }
        match parse_url("memcached://u:secret@h") {
            Err(e) => assert!(!e.to_string().contains("secret"), "{e}"),
            Ok(_) => panic!("accepted credentials"),
        }
    }

    #[test]
    fn index_ranges_grow_geometrically_and_merge() {
        let mut cache = IndexCache::default();
        let mut lines = Vec::new();
        for step in 0..10_000u64 {
            for worker in 0..4 {
                if let Some(update) = cache.message_update("updates", step, worker) {
                    cache.record_message("updates", &update);
                    lines.push(update.line);
                }
            }
        }
        assert!(lines.len() < 20, "{} index lines: {lines:?}", lines.len());
        let parsed = ParsedIndex::parse(lines.concat().as_bytes());
        let (ranges, max_worker) = &parsed.topics["updates"];
        assert_eq!(*max_worker, 3);
        assert_eq!(ranges.len(), 1);
        assert_eq!(ranges[0].0, 0);
        assert!(ranges[0].1 >= 9_999 && ranges[0].1 < 20_000, "{ranges:?}");
        // A far jump starts a new range instead of covering the gap.
        let update = cache.message_update("updates", 1 << 40, 0).expect("update");
        assert_eq!(update.range, (1 << 40, (1 << 40) + INDEX_SPAN - 1));
        let parsed = ParsedIndex::parse(b"m t 0 9 1\nm t 5 20 3\nm t 30 40 0\nk stop\nk a/b\n");
        assert_eq!(parsed.topics["t"], (vec![(0, 20), (30, 40)], 3));
        assert_eq!(parsed.candidates(), 21 * 4 + 11 * 4 + 2);
    }
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
