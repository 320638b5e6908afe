//! [`InProcessChannel`]: the channel of functions that run as tasks of one process.
//!
//! Written here rather than taken from a crate: it is a map of messages with a wake-up per
//! message, which no queue crate offers with the [`Channel`] contract (messages addressed by
//! topic, step and worker, read by many, idempotent publish).
//!
//! A collect waits on the wake-up of each message it misses, so it returns the moment the last
//! one is published, with no polling: what `mlless bench cloud` needs to put a cloud's latency
//! ([`EmulatedChannel`](crate::EmulatedChannel)) on top of a channel that adds none of its own,
//! for hundreds of simulated functions on one machine. A step of P workers costs O(P) map look-ups
//! per worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;

use super::collect::{deadline_after, timeout_error};
use super::{Channel, MessageId, StepMessages, WorkerId};
use crate::channel::Result;

/// A message's address: topic, step, worker.
type MessageKey = (String, u64, WorkerId);

/// The job's messages and keys, and the wake-ups of the collects waiting for messages.
#[derive(Debug, Default)]
struct JobState {
    messages: HashMap<MessageKey, Bytes>,
    keys: HashMap<String, Bytes>,
    /// One wake-up per message some collect waits for; removed when the message lands.
    waiting: HashMap<MessageKey, Arc<Notify>>,
}

/// The channel of functions that are tasks of one process (see the [module docs](self)). Its
/// clones share the job's messages; two channels made by [`new`](Self::new) share nothing.
#[derive(Debug, Clone)]
pub struct InProcessChannel {
    job_id: String,
    state: Arc<Mutex<JobState>>,
}

impl InProcessChannel {
    /// An empty channel for job `job_id` (the name shows in messages).
    pub fn new(job_id: &str) -> InProcessChannel {
        InProcessChannel {
            job_id: job_id.to_string(),
            state: Arc::default(),
        }
    }

    /// The state; a panic of another holder leaves it usable (every change is one map call).
    fn state(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The message at `key`, or the wake-up its landing will send, registered before the lock
    /// is let go so that a publish between the look and the wait is not missed.
    fn get_or_wait(&self, key: MessageKey) -> Result<Bytes, Arc<Notify>> {
        let mut state = self.state();
        if let Some(message) = state.messages.get(&key) {
            return Ok(message.clone());
        }
        Err(state.waiting.entry(key).or_default().clone())
    }
}

fn key(id: MessageId<'_>) -> MessageKey {
    (id.topic.to_string(), id.step, id.from)
}

#[async_trait::async_trait]
impl Channel for InProcessChannel {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<()> {
        let key = key(id);
        let woken = {
            let mut state = self.state();
            state.messages.entry(key.clone()).or_insert(payload);
            state.waiting.remove(&key)
        };
        if let Some(woken) = woken {
            woken.notify_waiters();
        }
        Ok(())
    }

    async fn collect(&self, messages: StepMessages<'_>, timeout: Duration) -> Result<Vec<Bytes>> {
        let started = tokio::time::Instant::now();
        let deadline = tokio::time::Instant::from_std(deadline_after(started.into_std(), timeout));
        let mut collected = Vec::with_capacity(messages.from.len());
        for id in messages.ids() {
            loop {
                let wake = match self.get_or_wait(key(id)) {
                    Ok(message) => {
                        collected.push(message);
                        break;
                    }
                    Err(wake) => wake,
                };
                let woken = wake.notified();
                // The message may have landed between the look and the registration above.
                let mut woken = std::pin::pin!(woken);
                woken.as_mut().enable();
                if let Some(message) = self.state().messages.get(&key(id)) {
                    collected.push(message.clone());
                    break;
                }
                if tokio::time::timeout_at(deadline, woken).await.is_err() {
                    let present: Vec<bool> = {
                        let state = self.state();
                        messages
                            .ids()
                            .map(|id| state.messages.contains_key(&key(id)))
                            .collect()
                    };
                    return Err(timeout_error(
                        self.describe(),
                        messages,
                        &present,
                        started.elapsed(),
                    ));
                }
            }
        }
        Ok(collected)
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>> {
        let state = self.state();
        Ok(messages
            .ids()
            .map(|id| state.messages.get(&key(id)).cloned())
            .collect())
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<()> {
        let mut state = self.state();
        for id in messages.ids() {
            state.messages.remove(&key(id));
        }
        Ok(())
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<()> {
        self.state().keys.insert(key.to_string(), value);
        Ok(())
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>> {
        Ok(self.state().keys.get(key).cloned())
    }

    async fn cleanup(&self) -> Result<()> {
        let mut state = self.state();
        state.messages.clear();
        state.keys.clear();
        Ok(())
    }

    fn describe(&self) -> String {
        format!("in-process channel of {}", self.job_id)
    }

    /// Nothing: the map keeps what it was given.
    async fn explain_missing(&self) -> Result<Option<String>> {
        Ok(None)
    }
}
