//! Emulated cloud latency: the decorators that add a [`CloudLatency`] (the latency and
//! bandwidth of a cloud service as a function sees them, plain data in `mlless-io-types`) that add it to what runs on one machine —
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
//! The services' default figures, and the file format of others, are [`CloudLatency`]'s.
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

use crate::channel::average::{Averaged, Share};
use crate::channel::collect::thread_sleep;
use crate::channel::{Channel, ChannelError, MessageId, StepExchange, StepMessages};
use crate::store::Store;
pub use mlless_io_types::{CloudLatency, EmulateError};

/// The figures of `latency` as an `object_store` throttle: a wait per call of every kind, and
/// per byte read.
fn throttle_config(latency: &CloudLatency) -> ThrottleConfig {
    let call = Duration::from_secs_f64(latency.request_ms / 1e3);
    ThrottleConfig {
        wait_delete_per_call: call,
        wait_get_per_byte: Duration::from_secs_f64(1.0 / (latency.mb_per_s * 1e6)),
        wait_get_per_call: call,
        wait_list_per_call: call,
        wait_list_with_delimiter_per_call: call,
        wait_list_per_entry: Duration::ZERO,
        wait_list_with_delimiter_per_entry: Duration::ZERO,
        wait_put_per_call: call,
    }
}

impl Store {
    /// This store with `latency` added to every request (an `object_store` `ThrottledStore`
    /// around its backend). The result is a store of kind
    /// [`StoreKind::Other`](crate::StoreKind::Other): it never takes the local directory's
    /// shortcuts, which would skip the latency.
    pub fn with_latency(&self, latency: &CloudLatency) -> Store {
        let streamed = StreamedReads(self.object_store());
        let throttled = ThrottledStore::new(streamed, throttle_config(latency));
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
        let config = throttle_config(&latency);
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
