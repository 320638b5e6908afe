//! The parameter server's averaging ([`Request::Average`](super::wire::Request::Average)): each
//! (topic, step)'s parts of the workers' deltas, and their mean, computed once for every worker
//! that asks.
//!
//! The server averages rather than applying the mean to a model of its own: the workers keep
//! their replicas, optimiser state and model-specific update rules (DESIGN §4), so the server
//! stays model-agnostic, a worker pulls the mean update (as sparse as the updates) rather than
//! the whole model, and the mean is the very one a worker would compute ([`mean_of`] in the
//! order of the peers: the same bits as broadcast).
//!
//! No global lock: an entry per (topic, step) with a lock and a wake-up of its own, as the
//! messages have. A part is inserted under its entry's lock; the request that finds every
//! peer's part there computes the mean under it (the others of the step are waiting for that
//! very mean) and wakes them; later requests read it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mlless_core::{SparseVector, WireDelta, mean_of};
use tokio::sync::Notify;

use super::server::{Job, check_name, cost, lock, wait_for};
use super::wire::Response;
use crate::channel::WorkerId;

/// Entries a mean or part costs on top of its values: an index and a value.
const ENTRY_BYTES: usize = 8;

/// The parts and the mean of one (topic, step).
#[derive(Debug, Default)]
pub(in crate::channel::ps) struct MeanEntry {
    state: Mutex<MeanState>,
    landed: Notify,
}

#[derive(Debug, Default)]
struct MeanState {
    /// Each worker's part.
    parts: HashMap<WorkerId, SparseVector>,
    /// The last mean computed.
    mean: Option<Computed>,
    /// The bytes charged to the job for the parts and the mean.
    charged: u64,
}

/// A mean, for the peers it is of.
#[derive(Debug)]
struct Computed {
    peers: Vec<WorkerId>,
    mean: SparseVector,
    headers: Vec<Option<Bytes>>,
    charged: u64,
}

/// What an average request is about, besides its part.
pub(in crate::channel::ps) struct Averaging<'a> {
    /// The job's name, for refusals.
    pub job_name: &'a str,
    /// The topic.
    pub topic: &'a str,
    /// The step.
    pub step: u64,
    /// The worker whose part it is.
    pub from: WorkerId,
    /// The parameters averaged here, `[start, end)`.
    pub range: (u64, u64),
    /// The workers whose parts make the mean, in order.
    pub peers: &'a [WorkerId],
}

/// The part as a sparse vector within `range`, or why not.
fn checked_part(part: WireDelta, (start, end): (u64, u64)) -> Result<SparseVector, String> {
    if start > end {
        return Err(format!("empty range [{start}, {end})"));
    }
    let end = usize::try_from(end).map_err(|_| format!("range end {end} too large"))?;
    let part = part
        .into_sparse(end)
        .map_err(|e| format!("a part that does not fit its range: {e}"))?;
    match part.indices().first() {
        Some(&first) if u64::from(first) < start => Err(format!(
            "a part with index {first} below its range's start {start}"
        )),
        _ => Ok(part),
    }
}

/// Stores the part of `what.from` and answers with the mean of every peer's once all are there,
/// or which were there after `wait`.
pub(in crate::channel::ps) async fn average(
    job: &Job,
    what: Averaging<'_>,
    part: WireDelta,
    wait: Duration,
) -> Response {
    if let Err(reason) = check_name("topic", what.topic) {
        return Response::Refused(reason);
    }
    let part = match checked_part(part, what.range) {
        Ok(part) => part,
        Err(reason) => return Response::Refused(reason),
    };
    let deadline = tokio::time::Instant::now() + wait;
    let key = (what.topic.to_string(), what.step);
    let entry = lock(&job.means).entry(key.clone()).or_default().clone();
    let response = match insert(job, &what, &entry, part) {
        Err(reason) => Response::Refused(reason),
        Ok(()) => {
            let found = wait_for(&entry.landed, deadline, || {
                mean_if_complete(job, &what, &entry)
            });
            match found.await {
                Some(response) => response,
                None => {
                    let state = lock(&entry.state);
                    let present = what
                        .peers
                        .iter()
                        .map(|w| state.parts.contains_key(w))
                        .collect();
                    Response::TimedOut { present }
                }
            }
        }
    };
    prune(job, &key, entry);
    response
}

/// Inserts `part` unless the worker has one (idempotent: the first stays), waking the waiters.
fn insert(
    job: &Job,
    what: &Averaging<'_>,
    entry: &MeanEntry,
    part: SparseVector,
) -> Result<(), String> {
    let mut state = lock(&entry.state);
    if state.parts.contains_key(&what.from) {
        return Ok(());
    }
    let n = cost(what.topic, part.nnz() * ENTRY_BYTES);
    job.take(n, what.job_name)?;
    state.charged += n;
    state.parts.insert(what.from, part);
    drop(state);
    entry.landed.notify_waiters();
    Ok(())
}

/// The mean of the peers' parts if they are all there: the one computed before for the same
/// peers, or computed now (and kept, waking the others).
fn mean_if_complete(job: &Job, what: &Averaging<'_>, entry: &MeanEntry) -> Option<Response> {
    let mut state = lock(&entry.state);
    if let Some(computed) = &state.mean
        && computed.peers == what.peers
    {
        return Some(Response::Mean {
            mean: computed.mean.clone(),
            headers: computed.headers.clone(),
        });
    }
    let parts: Vec<&SparseVector> = what
        .peers
        .iter()
        .map(|w| state.parts.get(w))
        .collect::<Option<_>>()?;
    let mean = mean_of(&parts);
    // The peers' headers, those this server holds (a worker's header is stored with its part,
    // so every header sent here is here now).
    let headers: Vec<Option<Bytes>> = job.messages_of(what.topic, what.step, what.peers);
    let charged = cost(
        what.topic,
        mean.nnz() * ENTRY_BYTES + headers.iter().flatten().map(Bytes::len).sum::<usize>(),
    );
    if let Err(reason) = job.take(charged, what.job_name) {
        return Some(Response::Refused(reason));
    }
    let response = Response::Mean {
        mean: mean.clone(),
        headers: headers.clone(),
    };
    if let Some(old) = state.mean.replace(Computed {
        peers: what.peers.to_vec(),
        mean,
        headers,
        charged,
    }) {
        job.give(old.charged);
    }
    drop(state);
    entry.landed.notify_waiters();
    Some(response)
}

/// Forgets the parts of `from` in (topic, step); the entry goes with its last part, once no
/// request waits on it.
pub(in crate::channel::ps) fn discard(job: &Job, topic: &str, step: u64, from: &[WorkerId]) {
    let key = (topic.to_string(), step);
    let Some(entry) = lock(&job.means).get(&key).cloned() else {
        return;
    };
    {
        let mut state = lock(&entry.state);
        let freed: u64 = from
            .iter()
            .filter_map(|w| state.parts.remove(w))
            .map(|part| cost(topic, part.nnz() * ENTRY_BYTES))
            .sum();
        state.charged = state.charged.saturating_sub(freed);
        job.give(freed);
    }
    prune(job, &key, entry);
}

/// Forgets the entry of `key` (giving its bytes back) if it has no part left and nobody else
/// holds it.
fn prune(job: &Job, key: &(String, u64), entry: Arc<MeanEntry>) {
    let mut means = lock(&job.means);
    // Ours and the map's: no request waits on it.
    if Arc::strong_count(&entry) == 2 {
        let mut state = lock(&entry.state);
        if state.parts.is_empty() {
            let charged = state.charged + state.mean.take().map_or(0, |m| m.charged);
            state.charged = 0;
            job.give(charged);
            means.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_must_fit_their_range() {
        let part = |indices: Vec<u32>| {
            WireDelta::Sparse(
                SparseVector::from_parts(indices.clone(), vec![1.0; indices.len()])
                    .expect("ascending"),
            )
        };
        assert!(checked_part(part(vec![10, 19]), (10, 20)).is_ok());
        assert!(checked_part(part(vec![]), (10, 10)).is_ok());
        assert!(checked_part(part(vec![9, 12]), (10, 20)).is_err());
        assert!(checked_part(part(vec![12, 20]), (10, 20)).is_err());
        assert!(checked_part(part(vec![]), (11, 10)).is_err());
    }
}
