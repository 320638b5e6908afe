//! The index of what a job wrote, so that cleanup can delete what Memcached cannot list.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use tracing::warn;

use super::MemcachedChannel;
use super::client::{Cmd, Reply, StoreOp, lock};
use crate::channel::Result;
use crate::channel::WorkerId;

/// Smallest range of steps an index line covers.
pub(super) const INDEX_SPAN: u64 = 64;
/// What one channel already recorded in its job's index.
#[derive(Debug, Default)]
pub(super) struct IndexCache {
    /// Per topic: recorded ranges of steps (inclusive) and the largest worker recorded.
    pub(super) topics: HashMap<String, (Vec<(u64, u64)>, WorkerId)>,
    pub(super) keys: HashSet<String>,
}

impl IndexCache {
    /// The range to record (and its index line) for a message not yet covered, if any.
    pub(super) fn message_update(
        &self,
        topic: &str,
        step: u64,
        worker: WorkerId,
    ) -> Option<IndexUpdate> {
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
    pub(super) fn record_message(&mut self, topic: &str, update: &IndexUpdate) {
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
pub(super) struct IndexUpdate {
    pub(super) range: (u64, u64),
    pub(super) max_worker: WorkerId,
    pub(super) line: String,
}

/// The index item, parsed: per topic, merged ranges of steps and the largest worker; key names.
#[derive(Debug, Default)]
pub(super) struct ParsedIndex {
    pub(super) topics: HashMap<String, (Vec<(u64, u64)>, WorkerId)>,
    pub(super) keys: HashSet<String>,
}

impl ParsedIndex {
    pub(super) fn parse(data: &[u8]) -> Self {
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
    pub(super) fn candidates(&self) -> u128 {
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

impl MemcachedChannel {
    /// Records a message in the job's index unless this channel already did.
    pub(super) async fn index_message(
        &self,
        topic: &str,
        step: u64,
        worker: WorkerId,
    ) -> Result<()> {
        let update = lock(&self.index).message_update(topic, step, worker);
        let Some(update) = update else {
            return Ok(());
        };
        self.append_index(&update.line).await?;
        lock(&self.index).record_message(topic, &update);
        Ok(())
    }

    /// Records a key in the job's index unless this channel already did.
    pub(super) async fn index_key_name(&self, key: &str) -> Result<()> {
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
    async fn append_index(&self, line: &str) -> Result<()> {
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
}
