//! [`ObjectStoreChannel`]: the [`Channel`] on any [`Store`] (DESIGN §3, LambdaML's S3 channel).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use tracing::{debug, trace};

use super::collect::{CollectPlan, collect_with_backoff};
use super::local_files;
use super::wake::DirWatcher;
use super::{
    Channel, KEYS_SEGMENT, MessageId, StepMessages, WorkerId, check_name, segment_topic_rule,
};
use crate::channel::Result;
use crate::requests::{Request, pages};
use crate::store::{Store, StoreError, check_segment};

/// The object-store channel (DESIGN §3, LambdaML's S3 channel): every message is an object.
///
/// Layout below the store handle: messages at `{job_id}/{topic}/{step:012}/{worker:05}`, keys at
/// `{job_id}/keys/{key}`. [`Channel::collect`] GETs the messages it has not read yet
/// (concurrently), and sleeps with exponential backoff — from 0.5 ms, doubling, up to
/// [`with_max_backoff`](Self::with_max_backoff) — until every worker's message is there.
/// The backoff restarts from 0.5 ms whenever a poll finds new messages, since a step's messages
/// tend to arrive together.
///
/// On a local directory (the embedded default) the message files are read and written with the
/// file system's calls on the calling thread, not through the store's blocking pool (the same
/// files: a staging file renamed into place), and on Linux a collect does not sleep through its
/// backoff once a message lands: it watches the step's directory and inotify wakes it
/// ([`with_wake_ups`](Self::with_wake_ups)), the backoff (from 2 ms) left as the fallback.
///
/// Writes are atomic ([`Store::put`]), so a collector never reads a half-written message.
#[derive(Clone, Debug)]
pub struct ObjectStoreChannel {
    /// The job's namespace: `{store}/{job_id}`.
    job: Store,
    job_id: String,
    max_backoff: Duration,
    /// On a local directory: what wakes a collect when a message lands (see
    /// [`with_wake_ups`](Self::with_wake_ups)).
    watcher: Option<Arc<DirWatcher>>,
    /// On a local directory: the job's directory, whose message files are read and written
    /// directly ([`local_files`]).
    local: Option<PathBuf>,
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
/// First sleep of a collect woken by the landing of messages: only a fallback, in case the
/// platform does not report one.
const WOKEN_INITIAL_BACKOFF: Duration = Duration::from_millis(2);

impl ObjectStoreChannel {
    /// A channel for job `job_id` on `store`. The job id must be one valid key segment (no `/`,
    /// not empty, no forbidden character), so that no job's namespace contains another's.
    pub fn new(store: Store, job_id: &str) -> Result<Self> {
        check_name("job id", job_id, || store.url().to_string(), check_segment)?;
        let max_backoff = if store.kind().is_remote() {
            DEFAULT_MAX_BACKOFF_REMOTE
        } else {
            DEFAULT_MAX_BACKOFF_LOCAL
        };
        let job = store.child(job_id);
        let local = job.local_dir("");
        let watcher = local.as_ref().and_then(|_| DirWatcher::new()).map(Arc::new);
        Ok(Self {
            local,
            job,
            job_id: job_id.to_string(),
            max_backoff,
            watcher,
        })
    }

    /// Whether a collect on a local directory is woken by inotify (on Linux; elsewhere it polls)
    /// when a message lands in the step's directory (the default, inside a tokio runtime), or
    /// only polls with backoff (`false`; also what every other store does). With wake-ups,
    /// polling stays the fallback, from 2 ms.
    pub fn with_wake_ups(mut self, wake_ups: bool) -> Self {
        if !wake_ups {
            self.watcher = None;
        } else if self.watcher.is_none() && self.local.is_some() {
            self.watcher = DirWatcher::new().map(Arc::new);
        }
        self
    }

    /// Whether collects are woken when messages land (see [`with_wake_ups`](Self::with_wake_ups)).
    pub fn wakes_up(&self) -> bool {
        self.watcher.is_some()
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

    fn check_topic(&self, topic: &str) -> Result<()> {
        check_name(
            "topic",
            topic,
            || self.describe(),
            |t| segment_topic_rule(t, false),
        )
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

    /// Writes the object at `key` below the job: its file, on a local directory (counted as
    /// the PUT it stands for, in the store's [`RequestCounter`](crate::RequestCounter)).
    async fn put_object(&self, key: &str, bytes: Bytes) -> Result<(), StoreError> {
        match &self.local {
            Some(dir) => {
                self.job.count(Request::Put, 1);
                local_files::write(&dir.join(key), &bytes)
                    .map_err(|e| local_files::store_error(self.job.location(key), e))
            }
            None => self.job.put(key, bytes).await,
        }
    }

    /// The object at `key` below the job, if it is there: its file, on a local directory
    /// (counted as the GET it stands for, or the miss).
    async fn get_object(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        match &self.local {
            Some(dir) => {
                let read = local_files::read(&dir.join(key))
                    .map_err(|e| local_files::store_error(self.job.location(key), e));
                let kind = match &read {
                    Ok(None) => Request::Miss,
                    _ => Request::Get,
                };
                self.job.count(kind, 1);
                read
            }
            None => self.job.get_opt(key).await,
        }
    }

    /// One poll of a collect: lists the step and fetches the messages of the missing workers
    /// that are now present. Returns whether it found any.
    async fn poll_step(
        &self,
        prefix: &str,
        from: &[WorkerId],
        slots: &mut [Option<Bytes>],
    ) -> Result<bool> {
        // GET each missing message directly rather than LIST the step first: one round trip
        // fewer, O(1) on every backend, and on S3 a GET costs a twelfth of a LIST.
        let mut wanted: Vec<WorkerId> = Vec::new();
        for (worker, slot) in from.iter().zip(slots.iter()) {
            if slot.is_none() && !wanted.contains(worker) {
                wanted.push(*worker);
            }
        }
        let fetched: Vec<(WorkerId, Result<Option<Bytes>, StoreError>)> =
            futures::stream::iter(wanted)
                .map(|worker| async move {
                    let key = format!("{prefix}/{}", Self::worker_name(worker));
                    (worker, self.get_object(&key).await)
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
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<()> {
        let MessageId { topic, step, from } = id;
        self.check_topic(topic)?;
        trace!(channel = %self.job.url(), topic, step, from, len = payload.len(), "publish");
        self.put_object(&Self::message_key(topic, step, from), payload)
            .await?;
        Ok(())
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let mut slots: Vec<Option<Bytes>> = vec![None; from.len()];
        self.poll_step(&Self::step_prefix(topic, step), from, &mut slots)
            .await?;
        Ok(slots)
    }

    async fn collect(&self, messages: StepMessages<'_>, timeout: Duration) -> Result<Vec<Bytes>> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let prefix = Self::step_prefix(topic, step);
        let endpoint = self.describe();
        let watching = match (&self.watcher, &self.local) {
            (Some(watcher), Some(dir)) => watcher.watch(&dir.join(&prefix)).map(|w| (watcher, w)),
            _ => None,
        };
        let initial_backoff = if watching.is_some() {
            WOKEN_INITIAL_BACKOFF.min(self.max_backoff)
        } else {
            INITIAL_BACKOFF
        };
        let backoff = (initial_backoff, self.max_backoff);
        let plan = CollectPlan::polling(&endpoint, messages, timeout, backoff)
            .woken_by(watching.as_ref().map(|(watcher, _)| watcher.landed()));
        collect_with_backoff(plan, |mut slots| {
            let prefix = &prefix;
            async move {
                let found = self.poll_step(prefix, from, &mut slots).await?;
                Ok((slots, found))
            }
        })
        .await
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<()> {
        let StepMessages { topic, step, from } = messages;
        self.check_topic(topic)?;
        let keys: Vec<String> = from
            .iter()
            .map(|w| Self::message_key(topic, step, *w))
            .collect();
        match &self.local {
            Some(dir) => {
                let files: Vec<PathBuf> = keys.iter().map(|key| dir.join(key)).collect();
                if !files.is_empty() {
                    // The bulk delete it stands for.
                    self.job.count(Request::Delete, pages(files.len()));
                }
                local_files::remove(&files, dir).map_err(|e| {
                    let step = Self::step_prefix(topic, step);
                    local_files::store_error(self.job.location(&step), e)
                })?;
            }
            None => self.job.delete_many(keys).await?,
        }
        Ok(())
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<()> {
        self.put_object(&Self::key_key(key), value).await?;
        Ok(())
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>> {
        Ok(self.get_object(&Self::key_key(key)).await?)
    }

    async fn cleanup(&self) -> Result<()> {
        debug!(channel = %self.job.url(), "cleanup");
        self.job.delete_prefix("").await?;
        if let Some(dir) = &self.local {
            // The directories a collect made to watch and could not remove (its function was
            // stopped while it waited) hold no file, and go too, as does the staging file of a
            // message whose writer was killed before it renamed it.
            crate::store::remove_local_leftovers(dir);
        }
        Ok(())
    }

    fn describe(&self) -> String {
        self.job.url().to_string()
    }

    /// Nothing: an object store keeps what it was given.
    async fn explain_missing(&self) -> Result<Option<String>> {
        Ok(None)
    }
}
