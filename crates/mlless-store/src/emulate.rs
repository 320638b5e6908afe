//! Emulated cloud latency: [`CloudLatency`], the latency and bandwidth of a cloud service as a
//! function sees them, and the decorators that add it to what runs on one machine —
//! [`EmulatedChannel`] around any [`Channel`] and [`Store::with_latency`] around any store (an
//! `object_store` [`ThrottledStore`]) — so that a benchmark on a laptop shows what the same
//! protocol would take on S3 or ElastiCache (`mlless bench channel --emulate s3`).
//!
//! # The model
//!
//! Every request pays the service's time to first byte, [`CloudLatency::request_ms`], and its
//! bytes at the function's bandwidth, [`CloudLatency::mb_per_s`]:
//!
//! - [`publish`](Channel::publish): one request carrying the payload; the message becomes
//!   visible to the peers when it is over (the decorator waits, then publishes).
//! - [`collect`](Channel::collect): waits for the messages on the inner channel, then the
//!   latency of the requests that read them plus all the collected bytes: one request where
//!   one read returns them all (a Redis stream), `⌈n / k⌉` one after the other where a
//!   function reads `k` objects at once ([`CloudLatency::reads_at_once`]: the object-store
//!   channel's 32 concurrent GETs). The reads are issued once the last message is visible: the
//!   gap a poller leaves between a message landing and its next look is not added, so for a
//!   polled service (S3) this is a lower bound.
//! - [`publish_and_collect`](Channel::publish_and_collect): a publish, then a collect (two
//!   requests: even where a server does both in one script, the last peer's message usually
//!   lands after the first read).
//! - [`publish_and_average`](Channel::publish_and_average): where servers average, one request
//!   that sends the share and brings the mean back; where the worker averages, a publish and a
//!   collect of the peers' shares. Paid once the inner channel has answered (a constant latency
//!   on every share moves the step as much before the wait as after it).
//! - [`poll`](Channel::poll): one request plus the bytes found. [`discard`](Channel::discard),
//!   [`put_key`](Channel::put_key), [`get_key`](Channel::get_key): one request each (plus their
//!   bytes). [`cleanup`](Channel::cleanup) and [`describe`](Channel::describe) add nothing.
//!
//! The store's decorator maps the same two figures onto [`ThrottleConfig`]: a wait per call of
//! every kind, and a wait per byte of what is read.
//!
//! # Defaults, from public figures
//!
//! | name | request | bandwidth | reads at once | source |
//! | --- | --- | --- | --- | --- |
//! | `s3` | 20 ms | 75 MB/s | 32 | small-object GET/PUT from Lambda in the same region: 10–30 ms (Pu et al., *Shuffling, Fast and Slow*, NSDI 2019; Klimovic et al., *Pocket*, OSDI 2018); a Lambda function's network ≈ 600 Mbit/s (Pocket); the object-store channel's concurrent GETs |
//! | `elasticache` | 0.3 ms | 75 MB/s | all | a Redis round trip from Lambda to ElastiCache in the same AZ: 0.2–0.5 ms (AWS ElastiCache documentation, Pocket); the same function network; one `XREAD` returns a step's messages |
//! | `dynamodb` | 5 ms | 75 MB/s | all | a DynamoDB `GetItem`/`PutItem`/`Query` from Lambda in the same region: single-digit milliseconds (AWS's DynamoDB documentation and product page, "single-digit millisecond performance"); LambdaML (Jiang et al., SIGMOD 2021) measured it about 20% faster than S3 a step for LR on Higgs; the same function network; one `Query` returns a step's messages (chunked messages above 400 KB cost more requests, which the model does not count) |
//!
//! A file of the same shape gives other figures (`--emulate my-cloud.toml`):
//!
//! ```toml
//! name = "my-cloud"
//! request_ms = 5.0
//! mb_per_s = 100.0
//! reads_at_once = 32   # optional: without it one request reads all of a collect's messages
//! ```
//!
//! [`ThrottledStore`]: object_store::throttle::ThrottledStore
//! [`ThrottleConfig`]: object_store::throttle::ThrottleConfig

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::throttle::{ThrottleConfig, ThrottledStore};
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use serde::{Deserialize, Serialize};

use crate::channel::average::{Averaged, Share};
use crate::channel::collect::thread_sleep;
use crate::channel::{Channel, ChannelError, MessageId, StepExchange, StepMessages};
use crate::store::Store;

/// The latency and bandwidth of a cloud service, as one function sees them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudLatency {
    /// A name for tables and messages (`s3`, `elasticache`, a file's own).
    pub name: String,
    /// Time to first byte of one request, in milliseconds.
    pub request_ms: f64,
    /// Bandwidth between a function and the service, in MB/s (10⁶ bytes per second).
    pub mb_per_s: f64,
    /// How many messages a function reads with one request's latency when it collects several
    /// (requests in flight at once); `None`: one request reads them all.
    #[serde(default)]
    pub reads_at_once: Option<u32>,
}

/// Why a [`CloudLatency`] could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulateError {
    /// The name is no built-in and no readable file.
    #[error("cannot read the latency file {path}: {source} (built-in: s3, elasticache, dynamodb)")]
    Read {
        /// The file tried.
        path: String,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a latency table.
    #[error("{path} is not a latency table (name, request_ms, mb_per_s): {reason}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl CloudLatency {
    /// S3 as a Lambda function in the same region sees it: 20 ms a request, 75 MB/s.
    pub fn s3() -> CloudLatency {
        CloudLatency {
            name: "s3".into(),
            request_ms: 20.0,
            mb_per_s: 75.0,
            reads_at_once: Some(32),
        }
    }

    /// ElastiCache (Redis) in the same availability zone: 0.3 ms a request, 75 MB/s.
    pub fn elasticache() -> CloudLatency {
        CloudLatency {
            name: "elasticache".into(),
            request_ms: 0.3,
            mb_per_s: 75.0,
            reads_at_once: None,
        }
    }

    /// A parameter server (`mlless ps`) on a VM in the functions' region: 0.3 ms a request (a
    /// round trip within a region), 75 MB/s (a function's network, not the VM's, is the
    /// narrower pipe).
    pub fn ps() -> CloudLatency {
        CloudLatency {
            name: "ps".into(),
            request_ms: 0.3,
            mb_per_s: 75.0,
            reads_at_once: None,
        }
    }

    /// DynamoDB in the same region: 5 ms a request, 75 MB/s; one `Query` reads a step's
    /// messages.
    pub fn dynamodb() -> CloudLatency {
        CloudLatency {
            name: "dynamodb".into(),
            request_ms: 5.0,
            mb_per_s: 75.0,
            reads_at_once: None,
        }
    }

    /// A built-in (`s3`, `elasticache`, `ps`, `dynamodb`) or a TOML file of the same fields.
    pub fn by_name_or_file(name: &str) -> Result<CloudLatency, EmulateError> {
        match name {
            "s3" => return Ok(CloudLatency::s3()),
            "elasticache" => return Ok(CloudLatency::elasticache()),
            "ps" => return Ok(CloudLatency::ps()),
            "dynamodb" => return Ok(CloudLatency::dynamodb()),
            _ => {}
        }
        let text = std::fs::read_to_string(name).map_err(|source| EmulateError::Read {
            path: name.into(),
            source,
        })?;
        CloudLatency::from_toml_str(&text).map_err(|reason| EmulateError::Parse {
            path: name.into(),
            reason,
        })
    }

    /// Parses and checks a latency table in TOML.
    pub fn from_toml_str(text: &str) -> Result<CloudLatency, String> {
        let latency: CloudLatency = toml::from_str(text).map_err(|e| e.to_string())?;
        if !(latency.request_ms.is_finite() && latency.request_ms >= 0.0) {
            return Err(format!(
                "request_ms must be 0 or more, got {}",
                latency.request_ms
            ));
        }
        if !(latency.mb_per_s.is_finite() && latency.mb_per_s > 0.0) {
            return Err(format!(
                "mb_per_s must be more than 0, got {}",
                latency.mb_per_s
            ));
        }
        if latency.reads_at_once == Some(0) {
            return Err("reads_at_once must be 1 or more".into());
        }
        Ok(latency)
    }

    /// The time of one request that moves `bytes`.
    pub fn request(&self, bytes: usize) -> Duration {
        self.requests(1, bytes)
    }

    /// The time of a read of `messages` messages of `bytes` in all: the requests one after the
    /// other that [`reads_at_once`](Self::reads_at_once) makes of them, and the bytes.
    pub fn read(&self, messages: usize, bytes: usize) -> Duration {
        let rounds = match self.reads_at_once {
            Some(k) => messages.div_ceil(k.max(1) as usize).max(1),
            None => 1,
        };
        self.requests(rounds, bytes)
    }

    fn requests(&self, rounds: usize, bytes: usize) -> Duration {
        Duration::from_secs_f64(
            rounds as f64 * self.request_ms / 1e3 + bytes as f64 / (self.mb_per_s * 1e6),
        )
    }

    /// The same cloud on a clock `factor` times slower: every wait `factor` times longer. A
    /// simulation on tokio's timer, which counts whole milliseconds, runs on such a clock so
    /// that its milliseconds stand for microseconds.
    pub fn slowed(&self, factor: f64) -> CloudLatency {
        CloudLatency {
            request_ms: self.request_ms * factor,
            mb_per_s: self.mb_per_s / factor,
            ..self.clone()
        }
    }

    /// The same figures as an `object_store` throttle: a wait per call of every kind, and per
    /// byte read.
    pub fn throttle_config(&self) -> ThrottleConfig {
        let call = Duration::from_secs_f64(self.request_ms / 1e3);
        ThrottleConfig {
            wait_delete_per_call: call,
            wait_get_per_byte: Duration::from_secs_f64(1.0 / (self.mb_per_s * 1e6)),
            wait_get_per_call: call,
            wait_list_per_call: call,
            wait_list_per_entry: Duration::ZERO,
            wait_list_with_delimiter_per_call: call,
            wait_list_with_delimiter_per_entry: Duration::ZERO,
            wait_put_per_call: call,
        }
    }
}

impl Store {
    /// This store with `latency` added to every request (an `object_store` `ThrottledStore`
    /// around its backend). The result is a store of kind
    /// [`StoreKind::Other`](crate::StoreKind::Other): it never takes the local directory's
    /// shortcuts, which would skip the latency.
    pub fn with_latency(&self, latency: &CloudLatency) -> Store {
        let streamed = StreamedReads(self.object_store());
        let throttled = ThrottledStore::new(streamed, latency.throttle_config());
        let url = format!("{} (emulating {})", self.url(), latency.name);
        let mut store = Store::from_object_store(Arc::new(throttled), url);
        if let Some(counter) = self.request_counter() {
            store = store.with_request_counter(counter.clone());
        }
        store
    }
}

/// An object store whose reads hand their bytes over as a stream: a local file system's read
/// returns a file handle, which [`ThrottledStore`] cannot meter (it panics on one).
#[derive(Debug)]
struct StreamedReads(Arc<dyn ObjectStore>);

impl std::fmt::Display for StreamedReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamedReads({})", self.0)
    }
}

#[async_trait::async_trait]
impl ObjectStore for StreamedReads {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.0.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let result = self.0.get_opts(location, options).await?;
        if matches!(result.payload, GetResultPayload::Stream(_)) {
            return Ok(result);
        }
        let (meta, range, attributes, extensions) = (
            result.meta.clone(),
            result.range.clone(),
            result.attributes.clone(),
            result.extensions.clone(),
        );
        Ok(GetResult {
            payload: GetResultPayload::Stream(result.into_stream()),
            meta,
            range,
            attributes,
            extensions,
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.0.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.0.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.0.copy_opts(from, to, options).await
    }
}

/// A [`Channel`] with a cloud's latency added to every request of the channel it wraps (see the
/// [module docs](self) for what each operation pays).
#[derive(Debug)]
pub struct EmulatedChannel {
    inner: Arc<dyn Channel>,
    latency: CloudLatency,
    on_timer: bool,
}

impl EmulatedChannel {
    /// `inner` as if it were behind `latency`. Its waits are thread sleeps on the runtime's
    /// blocking pool, precise to tens of microseconds: tokio's timer rounds a sleep up to whole
    /// milliseconds, more than an ElastiCache request takes.
    pub fn new(inner: Arc<dyn Channel>, latency: CloudLatency) -> EmulatedChannel {
        EmulatedChannel {
            inner,
            latency,
            on_timer: false,
        }
    }

    /// Waits on tokio's timer instead: for a simulation whose clock is tokio's (paused, so
    /// that it moves from timer to timer, and slowed so that its milliseconds stand for
    /// microseconds).
    pub fn on_tokio_timer(mut self) -> EmulatedChannel {
        self.on_timer = true;
        self
    }

    /// Waits for one request moving `bytes`.
    async fn request(&self, bytes: usize) {
        self.wait(self.latency.request(bytes)).await;
    }

    /// `error`, a timeout naming this channel, emulation and all.
    fn renamed(&self, error: ChannelError) -> ChannelError {
        match error {
            ChannelError::Timeout {
                topic,
                step,
                missing,
                waited,
                endpoint: _,
            } => ChannelError::Timeout {
                topic,
                step,
                missing,
                waited,
                endpoint: self.describe(),
            },
            other => other,
        }
    }

    /// Waits for `duration`.
    async fn wait(&self, duration: Duration) {
        if self.on_timer {
            tokio::time::sleep(duration).await;
        } else {
            thread_sleep(duration).await;
        }
    }
}

/// The bytes of some messages.
fn total_len<'a>(messages: impl IntoIterator<Item = &'a Bytes>) -> usize {
    messages.into_iter().map(Bytes::len).sum()
}

#[async_trait::async_trait]
impl Channel for EmulatedChannel {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<(), ChannelError> {
        self.request(payload.len()).await;
        self.inner.publish(id, payload).await
    }

    async fn collect(
        &self,
        messages: StepMessages<'_>,
        timeout: Duration,
    ) -> Result<Vec<Bytes>, ChannelError> {
        let messages = self
            .inner
            .collect(messages, timeout)
            .await
            .map_err(|e| self.renamed(e))?;
        self.wait(self.latency.read(messages.len(), total_len(&messages)))
            .await;
        Ok(messages)
    }

    async fn publish_and_average(
        &self,
        exchange: StepExchange<'_>,
        share: Share,
    ) -> Result<Averaged, ChannelError> {
        let averaged = self
            .inner
            .publish_and_average(exchange, share)
            .await
            .map_err(|e| self.renamed(e))?;
        let sent = usize::try_from(averaged.bytes_sent).unwrap_or(usize::MAX);
        let received = usize::try_from(averaged.bytes_received).unwrap_or(usize::MAX);
        let wait = if averaged.by_servers {
            // The share's request, answered with the mean.
            self.latency.request(sent.saturating_add(received))
        } else {
            let messages = averaged.messages_received.max(1) as usize;
            self.latency.request(sent) + self.latency.read(messages, received)
        };
        self.wait(wait).await;
        Ok(averaged)
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>, ChannelError> {
        let found = self.inner.poll(messages).await?;
        self.wait(
            self.latency
                .read(messages.from.len(), total_len(found.iter().flatten())),
        )
        .await;
        Ok(found)
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<(), ChannelError> {
        self.request(0).await;
        self.inner.discard(messages).await
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<(), ChannelError> {
        self.request(value.len()).await;
        self.inner.put_key(key, value).await
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>, ChannelError> {
        let value = self.inner.get_key(key).await?;
        self.request(value.as_ref().map_or(0, Bytes::len)).await;
        Ok(value)
    }

    async fn cleanup(&self) -> Result<(), ChannelError> {
        self.inner.cleanup().await
    }

    fn describe(&self) -> String {
        format!(
            "{} (emulating {})",
            self.inner.describe(),
            self.latency.name
        )
    }

    async fn explain_missing(&self) -> Result<Option<String>, ChannelError> {
        self.inner.explain_missing().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_pays_its_latency_and_its_bytes() {
        let latency = CloudLatency {
            name: "t".into(),
            request_ms: 2.0,
            mb_per_s: 1.0,
            reads_at_once: Some(32),
        };
        assert_eq!(latency.request(0), Duration::from_millis(2));
        assert_eq!(latency.request(1_000), Duration::from_millis(3));
        assert_eq!(latency.read(32, 0), Duration::from_millis(2));
        assert_eq!(latency.read(33, 1_000), Duration::from_millis(5));
        let all_at_once = CloudLatency {
            reads_at_once: None,
            ..latency.clone()
        };
        assert_eq!(all_at_once.read(255, 0), Duration::from_millis(2));
        let slowed = latency.slowed(1000.0);
        assert_eq!(slowed.request(1_000), Duration::from_secs(3));
        let config = latency.throttle_config();
        assert_eq!(config.wait_get_per_call, Duration::from_millis(2));
        assert_eq!(config.wait_get_per_byte, Duration::from_micros(1));
    }

    #[test]
    fn latency_files_are_checked() {
        let ok = CloudLatency::from_toml_str("name = \"x\"\nrequest_ms = 5\nmb_per_s = 100\n");
        assert_eq!(
            ok,
            Ok(CloudLatency {
                name: "x".into(),
                request_ms: 5.0,
                mb_per_s: 100.0,
                reads_at_once: None,
            })
        );
        let zero = CloudLatency::from_toml_str("name = \"x\"\nrequest_ms = 5\nmb_per_s = 0\n");
        assert!(zero.unwrap_err().contains("mb_per_s"));
        let unknown = CloudLatency::from_toml_str("name = \"x\"\nrequest = 5\nmb_per_s = 1\n");
        let none_at_once = CloudLatency::from_toml_str(
            "name = \"x\"\nrequest_ms = 5\nmb_per_s = 1\nreads_at_once = 0\n",
        );
        assert!(none_at_once.unwrap_err().contains("reads_at_once"));
        assert!(unknown.is_err());
        let missing = CloudLatency::by_name_or_file("/nonexistent/cloud.toml").unwrap_err();
        assert!(missing.to_string().contains("/nonexistent/cloud.toml"));
        assert_eq!(
            CloudLatency::by_name_or_file("s3").ok(),
            Some(CloudLatency::s3())
        );
        let dynamodb = CloudLatency::by_name_or_file("dynamodb").ok();
        assert_eq!(dynamodb, Some(CloudLatency::dynamodb()));
        // Single-digit milliseconds a request; one Query reads a step.
        assert!(dynamodb.is_some_and(|d| d.request_ms == 5.0 && d.reads_at_once.is_none()));
    }
}
