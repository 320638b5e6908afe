//! I/O backends of mlless: the object store that holds data sets, checkpoints and results, and
//! the channel through which functions exchange updates.
//!
//! Functions cannot talk to each other directly: every byte between two functions goes through
//! an external store. This crate is that store, behind two small interfaces with several
//! backends each and one conformance suite per interface, in the manner of `object_store`:
//!
//! - [`Store`]: a handle on an object store below a key prefix — a local directory (default), an
//!   in-memory store (`memory://NAME`, for tests) or S3 (`s3://bucket/prefix`, also any
//!   S3-compatible endpoint). Writes are atomic: an object is visible only once complete.
//! - [`Channel`]: publish a message per (topic, step, worker), collect a step's messages from a
//!   set of workers (blocking, with backoff, up to a timeout), plus last-write-wins keys; all
//!   namespaced by job id. [`ObjectStoreChannel`] implements it on any [`Store`] (LambdaML's S3
//!   channel); [`RedisChannel`], [`MemcachedChannel`] and [`DynamoDbChannel`] on servers;
//!   [`open_channel`] picks a backend from a URL. [`InProcessChannel`] is the channel
//!   of functions that are tasks of one process (the cloud benchmark's), and has no URL.
//! - [`ChannelScheme`]: which backend a channel URL names, parsed once ([`ChannelScheme::parse`])
//!   and used to open, redact, bill and check it; [`parse`] is the one place a URL scheme is
//!   matched.
//! - [`retry`]: the one place a request is attempted again — [`retry::RetryPolicy`] (attempts,
//!   backoff with jitter, deadline), [`retry::Transient`] (which errors are worth it, which each
//!   backend decides for its own), [`retry::run`] — and [`RetryingChannel`], which rides out an
//!   outage of a channel's server shorter than a grace (`--channel-grace`);
//!   [`open_channel_with`] wraps every remote channel in it and turns the backend's own retries
//!   off, so that a request is retried at one level.
//! - [`EmulatedChannel`] and [`Store::with_latency`]: a cloud's request latency and bandwidth
//!   ([`CloudLatency`]: S3, ElastiCache or a file) added to any channel or store, to see on one
//!   machine what a protocol would take in a cloud ([`emulate`]).
//! - [`conformance`]: the suites every backend's tests run.
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use mlless_store::{Channel, MessageId, StepMessages, Store, open_channel};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::open("memory://crate-doc")?;
//! store.put("data/manifest", Bytes::from_static(b"{}")).await?;
//! assert_eq!(store.list("data").await?, ["data/manifest"]);
//!
//! // The default channel lives in the run's store, below `channel/{job_id}` (for a store on a
//! // local directory on Linux, in shared memory: `/dev/shm/mlless-channel/{uid}/{job_id}`).
//! let channel = open_channel(None, &store, "job-1").await?;
//! channel.publish(MessageId::new("updates", 0, 1), Bytes::from_static(b"from 1")).await?;
//! channel.publish(MessageId::new("updates", 0, 0), Bytes::from_static(b"from 0")).await?;
//! let step = StepMessages::new("updates", 0, &[0, 1]);
//! let updates = channel.collect(step, Duration::from_secs(5)).await?;
//! assert_eq!(updates, [&b"from 0"[..], &b"from 1"[..]]);
//! channel.cleanup().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Features
//!
//! Each backend that needs a client of its own is a cargo feature, all on by default. A crate
//! that only needs the interfaces and plain types (to hold an `Arc<dyn Channel>`, parse or
//! redact a URL, test on local or in-memory stores) can depend on this one with
//! `default-features = false` and build neither a Redis client nor an HTTP stack.
//!
//! - `redis` (default): the Redis channel, [`RedisChannel`] and the [`redis`] module
//!   (`redis://`, `rediss://`). Brings in the `redis` crate.
//! - `memcached` (default): the Memcached channel, [`MemcachedChannel`] and the [`memcached`]
//!   module (`memcached://`). Its client is this crate's own, on tokio's sockets; brings in
//!   `crc32fast` and tokio's `net`.
//! - `dynamodb` (default): the DynamoDB channel, [`DynamoDbChannel`] and the [`dynamodb`]
//!   module (`dynamodb://TABLE`). Speaks DynamoDB's JSON API over `reqwest`, signed with
//!   `aws-sigv4`, credentials and region from `mlless-aws`; brings in those, `base64`,
//!   `serde_json` and `crc32fast`.
//! - `s3` (default): S3 and S3-compatible object stores (`s3://`, `s3a://`) for [`Store`] and
//!   therefore for the object-store channel. Turns on `object_store`'s `aws` feature (reqwest,
//!   rustls, the AWS signer). Without it [`StoreError::is_transient`] knows no HTTP errors, as
//!   no store of such a build makes them.
//! - `ps` (default): the hybrid parameter server, [`PsServer`] (`mlless ps`), and its channel
//!   [`PsChannel`] (`ps://:SECRET@host:port`), the [`ps`] module. Its protocol is this crate's
//!   own on tokio's sockets; brings in `postcard`, `crc32fast` and tokio's `net`.
//!
//! Always built: [`Channel`], [`ChannelError`], [`ChannelScheme`] and [`StoreKind`] with every
//! variant (a left-out backend's URL still parses), [`redact_url`], [`Store`] on a local
//! directory and on `memory://`, [`ObjectStoreChannel`], [`RetryingChannel`] and
//! [`conformance`]. Opening a URL whose backend was left out is a typed error naming the
//! feature — [`ChannelError::NotBuilt`], [`StoreError::NotBuilt`] — never a fallback to another
//! backend; [`BuiltBackend::is_built`] and [`built_features`] tell beforehand.

// The links to a backend lead nowhere in a build without it.
#![cfg_attr(
    not(all(
        feature = "redis",
        feature = "memcached",
        feature = "s3",
        feature = "ps",
        feature = "dynamodb"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

pub mod channel;
pub mod conformance;
pub mod emulate;
pub mod parse;
pub use mlless_io_types::{redact, requests};
pub mod store;

pub use channel::average::{Averaged, Share};
#[cfg(feature = "dynamodb")]
pub use channel::dynamodb::{self, DynamoDbChannel};
pub use channel::in_process::InProcessChannel;
#[cfg(feature = "memcached")]
pub use channel::memcached::{self, MemcachedChannel};
pub use channel::object_store::{
    DEFAULT_MAX_BACKOFF_LOCAL, DEFAULT_MAX_BACKOFF_REMOTE, INITIAL_BACKOFF, ObjectStoreChannel,
};
pub use channel::open::{open_channel, open_channel_with};
#[cfg(feature = "ps")]
pub use channel::ps::{self, PsChannel, PsServer};
#[cfg(feature = "redis")]
pub use channel::redis::{self, RedisChannel};
pub use channel::retry::{self, ChannelOptions, DEFAULT_CHANNEL_GRACE, RetryingChannel};
pub use channel::{Channel, ChannelError, MessageId, StepExchange, StepMessages, WorkerId};
pub use emulate::{CloudLatency, EmulatedChannel};
pub use mlless_io_types::{
    ChannelScheme, InvalidUrl, RequestCounter, RequestCounts, StoreKind, redact_url,
    supported_channel_urls, supported_store_urls,
};
pub use parse::{BuiltBackend, Feature, built_features};
pub use store::{Store, StoreError, local_path, remove_local_leftovers};
