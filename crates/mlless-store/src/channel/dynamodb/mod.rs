//! [`DynamoDbChannel`]: the [`Channel`] on a DynamoDB table (LambdaML's DynamoDB channel).
//!
//! # Layout
//!
//! One table holds the items of every job; each item has the job id as its partition key `pk`
//! (a string) and a sort key `sk` (a string) naming what it is:
//!
//! | item | `sk` | attributes |
//! | --- | --- | --- |
//! | message of (topic, step, worker) | `m#{topic}#{step:020}#{worker:010}` | a *head* |
//! | key | `k#{key}` | a *head* |
//! | chunk `i` of a large value | `c#{nonce:016x}#{i:06}` | `v`: the chunk's bytes |
//!
//! A *head* is either the payload itself (`v`, binary) or a manifest of chunks (`nonce`,
//! `chunks`, `len`, `crc`: the chunks' nonce and count, the payload's length and CRC-32). Every
//! item carries `ttl`, its expiry in Unix seconds (one day after it is written, `?ttl=SECONDS`
//! changes it), the table's TTL attribute: DynamoDB deletes what a crashed job left behind.
//!
//! A step's messages share a sort-key prefix (step and worker are zero-padded), so one
//! strongly consistent `Query` (`begins_with`, paginated by `LastEvaluatedKey`) reads all of
//! them; a collect that already has some of them asks for the rest with `BatchGetItem`.
//! Keeping every item of a job in one partition lets [`cleanup`](Channel::cleanup) find them
//! with one `Query` instead of a `Scan` or an index; its cost is DynamoDB's throughput limit
//! per partition (1,000 write and 3,000 read units a second, which DynamoDB raises by splitting
//! a hot partition on its sort keys): a job that exceeds it is throttled, which is transient.
//!
//! # Large values
//!
//! DynamoDB refuses items above 400 KB. A payload larger than
//! [`CHUNK_SIZE`](DynamoDbChannel::CHUNK_SIZE) is cut into chunks written first (`BatchWriteItem`,
//! under a fresh random nonce), and its manifest is written *last*, once every chunk is stored:
//! a reader only looks at heads, so a half-written message (chunks without a head) is invisible,
//! and a complete one is reassembled and checked against the manifest's length and CRC-32.
//!
//! A head whose chunks are not all there cannot be a message being written (its chunks were
//! stored before it, and reads are strongly consistent). The reader reads the head again: if it
//! is gone, the message was discarded while it was read, and counts as not there (a collect
//! waits on; a poll says `None`); if it is still there, its chunks were deleted or expired, the
//! message is lost, and the read fails with a non-transient error saying so (`Corrupt`), rather
//! than a collect timing out on a message that will never come.
//!
//! # Idempotent publish
//!
//! A message head is written with `PutItem` on the condition `attribute_not_exists(sk)`, so the
//! first publish of a (topic, step, worker) wins; a second one stores nothing and deletes its
//! own, unused chunks. Keys are written unconditionally (the last write wins), and the chunks
//! of the value a key had are deleted once the new head is written.
//!
//! # Errors and retries
//!
//! Throttling (`ProvisionedThroughputExceededException`, `ThrottlingException`,
//! `RequestLimitExceeded`), HTTP 5xx and requests that got no answer are
//! [`ChannelError::Backend`] with `transient: true`, which [`RetryingChannel`](crate::RetryingChannel)
//! retries; this module has no retry loop of its own. The one repeat here is part of the batch
//! API: a `BatchWriteItem` or `BatchGetItem` that answers with `UnprocessedItems` /
//! `UnprocessedKeys` (DynamoDB's partial success under throttling) is sent again for those,
//! with a short backoff, a bounded number of times, and then fails as throttled (transient). A
//! missing table, bad credentials and refused requests are not transient: a clear error naming
//! the table and the endpoint.
//!
//! # Cost
//!
//! DynamoDB on-demand bills request units: a write unit per started KB of each item written or
//! deleted, a read unit per started 4 KB of a strongly consistent read (of each item for
//! `GetItem` and `BatchGetItem`, a missing one costing one; of a `Query` page's items together).
//! The channel counts them, by those rules, in the [`RequestCounter`] of
//! [`with_request_counter`](DynamoDbChannel::with_request_counter), which is how a run's bill
//! gets them (DynamoDB's own `ConsumedCapacity` is not asked for: emulators such as moto do not
//! compute it by item size).
//!
//! # Endpoint, region, credentials
//!
//! From the AWS chain the S3 store and the Lambda invoker use ([`mlless_aws::shared`]): the
//! region (`AWS_REGION`, the profile), the credentials (environment, profile, SSO, web identity,
//! instance metadata); the endpoint from the URL's `?endpoint=URL` (DynamoDB Local, an
//! emulator), else `AWS_ENDPOINT_URL_DYNAMODB`, else `AWS_ENDPOINT_URL`, else
//! `https://dynamodb.{region}.amazonaws.com`. Requests are JSON over HTTP signed with
//! SigV4 (see `client.rs` for why not the SDK).
//!
//! # Files
//!
//! This one: the channel's operations; `client.rs` the signed calls and their errors;
//! `item.rs` the item layout; `table.rs` the table checked or created; `batch.rs` batched
//! writes, deletes and reads; `url.rs` the URL.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tracing::{debug, trace, warn};

use crate::channel::Result;
use crate::channel::collect::{CollectPlan, collect_with_backoff};
use crate::channel::{Channel, ChannelError, MessageId, StepMessages, WorkerId, check_name};
use crate::redact::redact_url;
use crate::requests::{Request, RequestCounter};

mod batch;
mod client;
mod item;
mod table;
mod url;

pub use client::DynamoDbError;
use client::{CONNECT_TIMEOUT, Client, REQUEST_TIMEOUT, Units};
use item::{
    CHUNK_SIZE, Head, Manifest, PK, SK, TTL, chunk_bytes, get_s, is_chunk, item_size, key, key_sk,
    message_sk, s, step_prefix, value_item, value_size, worker_of,
};
use url::parse_url;

/// Chunks per `BatchWriteItem` (DynamoDB takes 25 items and 16 MB; 16 chunks are 4.8 MB).
const CHUNKS_PER_WRITE: usize = 16;
/// Deletes per `BatchWriteItem` (DynamoDB's most).
const DELETES_PER_WRITE: usize = 25;
/// Keys per `BatchGetItem` (DynamoDB takes 100 keys and answers at most 16 MB: 32 chunks are
/// 9.6 MB).
const KEYS_PER_GET: usize = 32;
/// Rounds of a batch whose items DynamoDB left unprocessed before it fails as throttled.
const UNPROCESSED_ROUNDS: u32 = 8;
/// First pause before a batch's unprocessed items are sent again; it doubles each round.
const UNPROCESSED_BACKOFF: Duration = Duration::from_millis(20);
/// First sleep of a collect that finds messages missing.
const INITIAL_BACKOFF: Duration = Duration::from_millis(1);
/// How long opening waits for a table it created (or found being created) to become active.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest job id (the partition key may have 2,048 bytes; every item repeats it).
const MAX_JOB_ID_LEN: usize = 256;
/// Longest sort key DynamoDB accepts.
const MAX_SK_LEN: usize = 1024;

/// The DynamoDB channel; see the [module docs](self) for the item layout, chunking, errors and
/// request units.
///
/// ```no_run
/// # async fn example() -> Result<(), mlless_store::ChannelError> {
/// use std::time::Duration;
/// use bytes::Bytes;
/// use mlless_store::{Channel, DynamoDbChannel, MessageId, StepMessages};
///
/// let channel = DynamoDbChannel::connect("dynamodb://mlless-updates?create=true", "job-1").await?;
/// channel.publish(MessageId::new("updates", 0, 0), Bytes::from_static(b"hello")).await?;
/// let step = StepMessages::new("updates", 0, &[0]);
/// let got = channel.collect(step, Duration::from_secs(5)).await?;
/// assert_eq!(got, [&b"hello"[..]]);
/// channel.cleanup().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct DynamoDbChannel {
    client: Arc<Client>,
    table: String,
    job_id: String,
    ttl_secs: u64,
    max_backoff: Duration,
    units: Units,
    /// `dynamodb://TABLE (ENDPOINT)`, for messages.
    endpoint: String,
}

impl DynamoDbChannel {
    /// The largest payload stored in one item; larger ones are chunked: 300,000 bytes, within
    /// DynamoDB's 400 KB item limit as DynamoDB and as moto count it (moto counts binary values
    /// by their base64 text).
    pub const CHUNK_SIZE: usize = CHUNK_SIZE;
    /// Default time to live of every item (1 day); `?ttl=SECONDS` changes it.
    pub const DEFAULT_TTL: Duration = url::DEFAULT_TTL;
    /// Default cap of the collect backoff.
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_millis(20);

    /// Opens table `TABLE` of `url` for job `job_id`.
    ///
    /// `url` is `dynamodb://TABLE[?create=true&ttl=SECONDS&endpoint=URL]`; the region and
    /// credentials come from the AWS environment, and so does the endpoint unless the URL
    /// names one (see the [module docs](self)). Opening describes
    /// the table: one that does not exist is created with `?create=true` (on-demand billing,
    /// partition key `pk` and sort key `sk`, both strings; opening waits until it is active and
    /// turns on TTL on `ttl`), and is otherwise [`ChannelError::InvalidUrl`] naming the table
    /// and the endpoint, as is a table with another key schema, an endpoint that does not
    /// answer, and credentials DynamoDB refuses. The job id must be non-empty, at most 256
    /// bytes, without control characters.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe apart from table creation: a cancelled open may have created the table
    /// (without its TTL turned on when cancelled before that).
    pub async fn connect(url: &str, job_id: &str) -> Result<Self> {
        let settings = parse_url(url)?;
        let invalid = |reason: String| ChannelError::InvalidUrl {
            url: redact_url(url),
            reason,
        };
        let chain = mlless_aws::shared();
        let mlless_aws::Endpoint {
            url: endpoint,
            region,
        } = chain
            .endpoint("dynamodb", settings.endpoint.clone())
            .map_err(|e| invalid(e.to_string()))?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| invalid(format!("cannot build the HTTP client: {e}")))?;
        let client = Client {
            http,
            endpoint,
            region,
            chain,
        };
        let channel = DynamoDbChannel {
            endpoint: format!(
                "dynamodb://{} ({})",
                settings.table,
                redact_url(&client.endpoint)
            ),
            client: Arc::new(client),
            table: settings.table,
            job_id: String::new(),
            ttl_secs: settings.ttl_secs,
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
            units: Units::default(),
        };
        let channel = channel.for_job(job_id)?;
        channel.ensure_table(settings.create, url).await?;
        debug!(channel = %channel.endpoint, job_id, "dynamodb channel opened");
        Ok(channel)
    }

    /// The channel of another job on the same table, sharing this channel's HTTP client,
    /// settings and request counter (no network traffic).
    pub fn for_job(&self, job_id: &str) -> Result<Self> {
        check_name(
            "job id",
            job_id,
            || self.endpoint.clone(),
            |id| {
                if id.len() > MAX_JOB_ID_LEN {
                    return Err(format!("longer than {MAX_JOB_ID_LEN} bytes"));
                }
                name_rule(id, false)
            },
        )?;
        Ok(DynamoDbChannel {
            job_id: job_id.to_string(),
            ..self.clone()
        })
    }

    /// Counts the request units of this channel (and of the channels [`for_job`](Self::for_job)
    /// makes from it) in `counter`, as [`Request::TableWrite`] and [`Request::TableRead`].
    pub fn with_request_counter(mut self, counter: RequestCounter) -> Self {
        self.units = Units {
            counter: Some(counter),
        };
        self
    }

    /// Sets the cap of the collect backoff (default 20 ms; at least 1 ms).
    pub fn with_max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff.max(INITIAL_BACKOFF);
        self
    }

    /// Calls DynamoDB operation `op` with `body` as this channel does (signed, on its
    /// endpoint), for tests that look at or tamper with the table's items.
    #[doc(hidden)]
    pub async fn call_api(&self, op: &str, body: &Value) -> Result<Value, DynamoDbError> {
        self.client.call(op, body).await
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The job id this channel is namespaced by (its items' partition key).
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// How long after it is written an item expires.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs)
    }

    /// The expiry of an item written now.
    fn expiry(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        now + self.ttl_secs
    }

    /// A failed `operation` as a [`ChannelError::Backend`], transient as
    /// [`DynamoDbError::is_transient`] says.
    fn backend(&self, operation: String, e: DynamoDbError) -> ChannelError {
        ChannelError::Backend {
            endpoint: self.endpoint.clone(),
            operation,
            transient: e.is_transient(),
            source: Box::new(e),
        }
    }

    /// Calls `op` about `what` (an item's sort key, for the error).
    async fn call(&self, op: &str, what: &str, body: &Value) -> Result<Value> {
        self.client
            .call(op, body)
            .await
            .map_err(|e| self.backend(format!("{op} of {what} in job {}", self.job_id), e))
    }

    fn check_topic(&self, topic: &str) -> Result<()> {
        let longest = message_sk(topic, u64::MAX, WorkerId::MAX).len();
        check_name(
            "topic",
            topic,
            || self.endpoint.clone(),
            |t| {
                name_rule(t, true)?;
                sk_len_rule(longest)
            },
        )
    }

    fn check_key(&self, key: &str) -> Result<()> {
        let full = key_sk(key).len();
        check_name(
            "key",
            key,
            || self.endpoint.clone(),
            |k| {
                name_rule(k, false)?;
                sk_len_rule(full)
            },
        )
    }

    /// The head item of `payload` at `sk`: the payload itself if it fits in an item, else a
    /// manifest of chunks, which are written first.
    async fn head_item(&self, sk: &str, payload: &Bytes) -> Result<(Value, Option<Manifest>)> {
        let ttl = self.expiry();
        if payload.len() <= CHUNK_SIZE {
            return Ok((value_item(&self.job_id, sk, payload, ttl), None));
        }
        let manifest = Manifest::of(payload, format!("{:016x}", rand::random::<u64>()));
        let puts: Vec<(Value, u64)> = manifest
            .chunk_sks()
            .iter()
            .zip(payload.chunks(CHUNK_SIZE))
            .map(|(chunk_sk, chunk)| {
                let item = value_item(&self.job_id, chunk_sk, chunk, ttl);
                let units = Units::write(value_size(&item));
                (json!({ "PutRequest": { "Item": item } }), units)
            })
            .collect();
        trace!(channel = %self.endpoint, sk, chunks = manifest.count, "writing chunks");
        let batches = puts
            .chunks(CHUNKS_PER_WRITE)
            .map(|batch| self.batch_write(batch.to_vec(), sk));
        futures::future::try_join_all(batches).await?;
        Ok((manifest.item(&self.job_id, sk, ttl), Some(manifest)))
    }

    /// One page of the job's items whose sort key begins with `prefix` (all of them: `None`),
    /// strongly consistent, from `start`; with where the next page starts.
    async fn query_page(
        &self,
        prefix: Option<&str>,
        start: Option<Value>,
    ) -> Result<(Vec<Map<String, Value>>, Option<Value>)> {
        let mut body = json!({
            "TableName": self.table,
            "ConsistentRead": true,
            "KeyConditionExpression": "#p = :p",
            "ExpressionAttributeNames": { "#p": PK },
            "ExpressionAttributeValues": { ":p": s(&self.job_id) },
        });
        if let Some(prefix) = prefix {
            body["KeyConditionExpression"] = json!("#p = :p AND begins_with(#s, :s)");
            body["ExpressionAttributeNames"]["#s"] = json!(SK);
            body["ExpressionAttributeValues"][":s"] = s(prefix);
        }
        if let Some(start) = start {
            body["ExclusiveStartKey"] = start;
        }
        let answer = self.call("Query", prefix.unwrap_or("*"), &body).await?;
        let items: Vec<Map<String, Value>> = answer["Items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_object().cloned())
                    .collect()
            })
            .unwrap_or_default();
        let bytes: usize = items.iter().map(item_size).sum();
        self.units.add(Request::TableRead, Units::read(bytes));
        let next = answer
            .get("LastEvaluatedKey")
            .filter(|k| k.is_object())
            .cloned();
        Ok((items, next))
    }

    /// The heads present among the messages of `step` on `topic` from `wanted` (distinct),
    /// by worker: one `Query` of the step when `all`, else a `BatchGetItem` of their items.
    async fn message_heads(
        &self,
        topic: &str,
        step: u64,
        wanted: &[WorkerId],
        all: bool,
    ) -> Result<Vec<(WorkerId, String, Map<String, Value>)>> {
        let prefix = step_prefix(topic, step);
        let mut heads = Vec::new();
        if all {
            let mut start = None;
            loop {
                let (items, next) = self.query_page(Some(&prefix), start).await?;
                for item in items {
                    let Some(worker) = get_s(&item, SK).and_then(|sk| worker_of(sk, &prefix))
                    else {
                        continue;
                    };
                    if wanted.contains(&worker) {
                        heads.push((worker, message_sk(topic, step, worker), item));
                    }
                }
                match next {
                    Some(next) => start = Some(next),
                    None => break,
                }
            }
        } else {
            let sks: Vec<String> = wanted.iter().map(|&w| message_sk(topic, step, w)).collect();
            let mut found = self.batch_get(&sks, &prefix).await?;
            for (&worker, sk) in wanted.iter().zip(sks) {
                if let Some(item) = found.remove(&sk) {
                    heads.push((worker, sk, item));
                }
            }
        }
        Ok(heads)
    }

    /// The payloads of message heads: inline ones as they are, chunked ones from their chunks
    /// (one `BatchGetItem` for all). A head whose chunks are missing is read again: gone, it
    /// was discarded meanwhile and is left out; still there, the message is lost (its chunks
    /// were deleted or expired), a non-transient error.
    async fn payloads(
        &self,
        heads: Vec<(WorkerId, String, Map<String, Value>)>,
    ) -> Result<Vec<(WorkerId, Bytes)>> {
        let mut out = Vec::with_capacity(heads.len());
        let mut chunked = Vec::new();
        for (worker, sk, item) in heads {
            match Head::decode(&item).map_err(|e| self.backend(format!("read of {sk}"), e))? {
                Head::Inline(payload) => out.push((worker, payload)),
                Head::Chunked(manifest) => chunked.push((worker, sk, manifest)),
            }
        }
        if chunked.is_empty() {
            return Ok(out);
        }
        let all: Vec<String> = chunked.iter().flat_map(|(_, _, m)| m.chunk_sks()).collect();
        let found = self.batch_get(&all, "chunks").await?;
        for (worker, sk, manifest) in chunked {
            match self.assemble(&manifest, &found, &sk)? {
                Some(payload) => out.push((worker, payload)),
                None => match self.get_item(&sk).await? {
                    None => debug!(channel = %self.endpoint, sk, "discarded while read"),
                    Some(item)
                        if Head::decode(&item).ok() == Some(Head::Chunked(manifest.clone())) =>
                    {
                        let missing = manifest
                            .chunk_sks()
                            .iter()
                            .filter(|c| !found.contains_key(*c))
                            .count();
                        return Err(self.backend(
                            format!("read of {sk}"),
                            DynamoDbError::Corrupt(format!(
                                "message {sk} of job {} names {} chunks and {missing} of them \
                                 are gone (deleted by a discard or cleanup of its step, or \
                                 expired: the channel's ttl is {} s): the message is lost",
                                self.job_id, manifest.count, self.ttl_secs
                            )),
                        ));
                    }
                    Some(_) => debug!(channel = %self.endpoint, sk, "replaced while read"),
                },
            }
        }
        Ok(out)
    }

    /// The payload of `manifest` from the chunks `found`; `None` if any is missing.
    fn assemble(
        &self,
        manifest: &Manifest,
        found: &HashMap<String, Map<String, Value>>,
        sk: &str,
    ) -> Result<Option<Bytes>> {
        let corrupt = |e| self.backend(format!("read of {sk}"), e);
        let mut chunks = Vec::with_capacity(manifest.count as usize);
        for chunk_sk in manifest.chunk_sks() {
            let Some(item) = found.get(&chunk_sk) else {
                return Ok(None);
            };
            chunks.push(chunk_bytes(item).map_err(corrupt)?);
        }
        manifest.assemble(chunks).map(Some).map_err(corrupt)
    }

    /// One look at a step for the slots still empty; whether it found any.
    async fn poll_step(
        &self,
        topic: &str,
        step: u64,
        from: &[WorkerId],
        slots: &mut [Option<Bytes>],
    ) -> Result<bool> {
        let mut wanted: Vec<WorkerId> = Vec::new();
        for (&worker, slot) in from.iter().zip(slots.iter()) {
            if slot.is_none() && !wanted.contains(&worker) {
                wanted.push(worker);
            }
        }
        if wanted.is_empty() {
            return Ok(false);
        }
        // Nothing read yet: the step's Query reads what is there in one request; else only the
        // missing ones.
        let all = slots.iter().all(Option::is_none);
        let heads = self.message_heads(topic, step, &wanted, all).await?;
        let payloads = self.payloads(heads).await?;
        let found = !payloads.is_empty();
        for (worker, payload) in payloads {
            for (&w, slot) in from.iter().zip(slots.iter_mut()) {
                if w == worker {
                    *slot = Some(payload.clone());
                }
            }
        }
        Ok(found)
    }
}

#[async_trait::async_trait]
impl Channel for DynamoDbChannel {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<()> {
        let MessageId { topic, step, from } = id;
        self.check_topic(topic)?;
        let sk = message_sk(topic, step, from);
        trace!(channel = %self.endpoint, sk, len = payload.len(), "publish");
        let (item, manifest) = self.head_item(&sk, &payload).await?;
        let units = Units::write(value_size(&item));
        let body = json!({
            "TableName": self.table,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#s)",
            "ExpressionAttributeNames": { "#s": SK },
        });
        match self.client.call("PutItem", &body).await {
            Ok(_) => {
                self.units.add(Request::TableWrite, units);
                Ok(())
            }
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => {
                // A refused conditional write is billed too.
                self.units.add(Request::TableWrite, units);
                debug!(channel = %self.endpoint, sk, "already published; kept the first");
                if let Some(manifest) = manifest {
                    let stored = self.get_item(&sk).await?;
                    let ours = stored.and_then(|item| Head::decode(&item).ok())
                        == Some(Head::Chunked(manifest.clone()));
                    if !ours {
                        self.delete_chunks_quietly(&manifest).await;
                    }
                }
                Ok(())
            }
            // The chunks of a failed publish stay: the head may have been stored (an answer
            // lost), and cleanup or their TTL removes them otherwise.
            Err(e) => Err(self.backend(format!("PutItem of {sk} in job {}", self.job_id), e)),
        }
    }

    async fn collect(&self, messages: StepMessages<'_>, timeout: Duration) -> Result<Vec<Bytes>> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let backoff = (INITIAL_BACKOFF, self.max_backoff);
        let plan = CollectPlan::polling(&self.endpoint, messages, timeout, backoff);
        collect_with_backoff(plan, |mut slots| async move {
            let found = self.poll_step(topic, step, from, &mut slots).await?;
            Ok((slots, found))
        })
        .await
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let mut slots = vec![None; from.len()];
        self.poll_step(topic, step, from, &mut slots).await?;
        Ok(slots)
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<()> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let mut sks: Vec<String> = Vec::with_capacity(from.len());
        for &worker in from {
            let sk = message_sk(topic, step, worker);
            if !sks.contains(&sk) {
                sks.push(sk);
            }
        }
        let heads = self.batch_get(&sks, &step_prefix(topic, step)).await?;
        let mut chunks = Vec::new();
        let mut deletes = Vec::with_capacity(heads.len());
        for (sk, item) in heads {
            if let Ok(Head::Chunked(manifest)) = Head::decode(&item) {
                chunks.extend(manifest.chunk_sks().into_iter().map(|c| (c, CHUNK_SIZE)));
            }
            deletes.push((sk, item_size(&item)));
        }
        // Heads first, so that no head is left naming deleted chunks.
        self.delete(&deletes, "discarded messages").await?;
        self.delete(&chunks, "chunks of discarded messages").await
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<()> {
        self.check_key(key)?;
        let sk = key_sk(key);
        let (item, manifest) = self.head_item(&sk, &value).await?;
        let size = value_size(&item);
        let body = json!({
            "TableName": self.table,
            "Item": item,
            "ReturnValues": "ALL_OLD",
        });
        let answer = self.call("PutItem", &sk, &body).await?;
        let old = answer.get("Attributes").and_then(Value::as_object);
        // A write is billed by the larger of the old and the new item.
        let old_size = old.map_or(0, item_size);
        self.units
            .add(Request::TableWrite, Units::write(size.max(old_size)));
        if let Some(Ok(Head::Chunked(old))) = old.map(Head::decode)
            && manifest.as_ref().is_none_or(|new| new.nonce != old.nonce)
        {
            self.delete_chunks_quietly(&old).await;
        }
        Ok(())
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>> {
        self.check_key(key)?;
        let sk = key_sk(key);
        let mut last_nonce = None;
        // A concurrent put_key may delete the chunks of the value just read: read again.
        for _ in 0..4 {
            let Some(item) = self.get_item(&sk).await? else {
                return Ok(None);
            };
            let head = Head::decode(&item).map_err(|e| self.backend(format!("read of {sk}"), e))?;
            let manifest = match head {
                Head::Inline(value) => return Ok(Some(value)),
                Head::Chunked(manifest) => manifest,
            };
            if last_nonce.as_ref() == Some(&manifest.nonce) {
                break;
            }
            let found = self.batch_get(&manifest.chunk_sks(), &sk).await?;
            if let Some(value) = self.assemble(&manifest, &found, &sk)? {
                return Ok(Some(value));
            }
            last_nonce = Some(manifest.nonce);
        }
        Err(self.backend(
            format!("read of {sk}"),
            DynamoDbError::Corrupt(format!(
                "the chunks of key {key:?} of job {} are gone (expired? the channel's ttl is {} s)",
                self.job_id, self.ttl_secs
            )),
        ))
    }

    async fn cleanup(&self) -> Result<()> {
        let mut chunks: Vec<(String, usize)> = Vec::new();
        let mut deleted = 0;
        let mut start = None;
        loop {
            let (items, next) = self.query_page(None, start).await?;
            let mut heads = Vec::new();
            for item in &items {
                let Some(sk) = get_s(item, SK) else { continue };
                let entry = (sk.to_string(), item_size(item));
                if is_chunk(sk) {
                    chunks.push(entry);
                } else {
                    heads.push(entry);
                }
            }
            deleted += heads.len();
            self.delete(&heads, "the job's items").await?;
            match next {
                Some(next) => start = Some(next),
                None => break,
            }
        }
        // Chunks last, so that no head is left naming deleted chunks.
        deleted += chunks.len();
        self.delete(&chunks, "the job's chunks").await?;
        debug!(channel = %self.endpoint, job = self.job_id, deleted, "cleanup done");
        Ok(())
    }

    fn describe(&self) -> String {
        self.endpoint.clone()
    }

    async fn explain_missing(&self) -> Result<Option<String>> {
        Ok(None)
    }
}

/// A name in a sort or partition key: non-empty, no control characters, and no `#` where it
/// would make sort keys ambiguous (topics, which a step's prefix ends).
fn name_rule(name: &str, no_hash: bool) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_control() || (no_hash && *c == '#'))
    {
        return Err(format!("character {c:?} is not allowed"));
    }
    Ok(())
}

/// A sort key of `len` bytes is within DynamoDB's limit.
fn sk_len_rule(len: usize) -> Result<(), String> {
    if len > MAX_SK_LEN {
        return Err(format!(
            "too long: its sort key would be {len} bytes, DynamoDB allows {MAX_SK_LEN}"
        ));
    }
    Ok(())
}
