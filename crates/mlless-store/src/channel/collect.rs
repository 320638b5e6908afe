//! The collect loop of the backends that have no blocking read (the object store, Memcached):
//! poll what is missing, sleep with exponential backoff (or until told a message landed), until
//! every message is there or the timeout passes. One copy, so that a fix to the deadline or the
//! backoff lands in every backend. Its deadline, timeout error and precise sleep serve the
//! in-process channel and the latency decorator too.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;
use tracing::{debug, trace};

use super::{ChannelError, StepMessages, WorkerId};
use crate::channel::Result;

/// What a collect waits for and how it backs off, for [`collect_with_backoff`].
pub(crate) struct CollectPlan<'a> {
    /// Where the channel is ([`Channel::describe`](super::Channel::describe)), for logs and
    /// the timeout error.
    pub(crate) endpoint: &'a str,
    /// The messages wanted, in the order of the result.
    pub(crate) messages: StepMessages<'a>,
    /// How long to wait for all of them.
    pub(crate) timeout: Duration,
    /// The first sleep after a poll that left messages missing; also where the backoff
    /// restarts after a poll that found some (a step's messages tend to arrive together).
    pub(crate) initial_backoff: Duration,
    /// The cap of the doubling sleep.
    pub(crate) max_backoff: Duration,
    /// Notified when a message may have landed: a sleep ends early when it is. `None`: the
    /// collect only polls.
    pub(crate) landed: Option<&'a Notify>,
}

impl<'a> CollectPlan<'a> {
    /// A collect of `messages` on `endpoint` within `timeout`, polling with sleeps from
    /// `initial_backoff` doubling up to `max_backoff`, woken by nothing
    /// ([`woken_by`](Self::woken_by) sets it).
    pub(crate) fn polling(
        endpoint: &'a str,
        messages: StepMessages<'a>,
        timeout: Duration,
        (initial_backoff, max_backoff): (Duration, Duration),
    ) -> Self {
        CollectPlan {
            endpoint,
            messages,
            timeout,
            initial_backoff,
            max_backoff,
            landed: None,
        }
    }

    /// Sleeps end early when `landed` is notified.
    pub(crate) fn woken_by(mut self, landed: Option<&'a Notify>) -> Self {
        self.landed = landed;
        self
    }
}

/// Collects `plan.messages` by calling `poll` until every slot is filled.
///
/// `poll` is one look at the step: it is given the slots (one per message wanted, `None`
/// where the message has not been read yet), fills those whose message is now present, and
/// returns them with whether it found any. A poll still running at the deadline may finish, but
/// not past the deadline plus the timeout (at least 100 ms): a hung backend request must not turn
/// a timeout into a hang. Gives up with [`ChannelError::Timeout`] naming the missing workers.
///
/// # Cancel safety
///
/// Cancel-safe in the sense that dropping the future loses nothing that was published: a
/// collect only reads. The messages read so far are dropped with it; a new collect reads them
/// again.
pub(crate) async fn collect_with_backoff<F, Fut>(
    plan: CollectPlan<'_>,
    mut poll: F,
) -> Result<Vec<Bytes>>
where
    F: FnMut(Vec<Option<Bytes>>) -> Fut,
    Fut: Future<Output = Result<(Vec<Option<Bytes>>, bool)>>,
{
    let (endpoint, timeout) = (plan.endpoint, plan.timeout);
    let StepMessages { topic, step, from } = plan.messages;
    let (initial_backoff, max_backoff) = (plan.initial_backoff, plan.max_backoff);
    if from.is_empty() {
        return Ok(Vec::new());
    }
    let start = Instant::now();
    let deadline = deadline_after(start, timeout);
    let hard_deadline = deadline
        .checked_add(timeout.max(Duration::from_millis(100)))
        .unwrap_or(deadline);
    let mut slots: Vec<Option<Bytes>> = vec![None; from.len()];
    let mut backoff = initial_backoff;
    let mut polls = 0u32;
    let give_up = |present: &[bool], waited: Duration| {
        timeout_error(endpoint.to_string(), plan.messages, present, waited)
    };
    loop {
        polls += 1;
        // Registered before the poll looks, so that a message landing after the look wakes the
        // sleep after it.
        let woken = std::pin::pin!(plan.landed.map(Notify::notified));
        let mut woken = woken.as_pin_mut();
        if let Some(woken) = woken.as_mut() {
            woken.as_mut().enable();
        }
        // What was present before this poll: all a poll cut off at the hard deadline leaves.
        let present: Vec<bool> = slots.iter().map(Option::is_some).collect();
        let found = match tokio::time::timeout_at(hard_deadline.into(), poll(slots)).await {
            Ok(polled) => {
                let (polled, found) = polled?;
                slots = polled;
                found
            }
            Err(_) => {
                debug!(channel = %endpoint, topic, step, "poll overran the deadline");
                return Err(give_up(&present, start.elapsed()));
            }
        };
        if slots.iter().all(Option::is_some) {
            trace!(channel = %endpoint, topic, step, polls, waited = ?start.elapsed(), "collected");
            return Ok(slots.into_iter().flatten().collect());
        }
        let now = Instant::now();
        if now >= deadline {
            let present: Vec<bool> = slots.iter().map(Option::is_some).collect();
            return Err(give_up(&present, now - start));
        }
        if found {
            backoff = initial_backoff;
        }
        let sleep = backoff.min(deadline - now);
        debug!(
            channel = %endpoint,
            topic,
            step,
            missing = slots.iter().filter(|s| s.is_none()).count(),
            backoff = ?sleep,
            "messages missing, backing off"
        );
        match woken {
            Some(woken) => {
                tokio::select! {
                    () = woken => trace!(channel = %endpoint, topic, step, "woken"),
                    () = backoff_sleep(sleep) => {}
                }
            }
            None => backoff_sleep(sleep).await,
        }
        backoff = (backoff * 2).min(max_backoff);
    }
}

/// The [`ChannelError::Timeout`] of a collect of `messages` that gave up: the workers whose
/// message is not `present` (one flag per worker of `messages.from`), each named once.
pub(crate) fn timeout_error(
    endpoint: String,
    messages: StepMessages<'_>,
    present: &[bool],
    waited: Duration,
) -> ChannelError {
    let StepMessages { topic, step, from } = messages;
    let mut missing: Vec<WorkerId> = Vec::new();
    for (worker, present) in from.iter().zip(present) {
        if !present && !missing.contains(worker) {
            missing.push(*worker);
        }
    }
    ChannelError::Timeout {
        topic: topic.to_string(),
        step,
        missing,
        waited,
        endpoint,
    }
}

/// Sleeps for `duration`. Tokio's timer has a resolution of 1 ms, which would round the first,
/// sub-millisecond backoffs up to 1 ms or more; those short sleeps happen on the blocking pool
/// instead, where a thread sleep is precise to tens of microseconds.
async fn backoff_sleep(duration: Duration) {
    if duration >= Duration::from_millis(1) {
        tokio::time::sleep(duration).await;
        return;
    }
    thread_sleep(duration).await;
}

/// Sleeps for `duration` on a thread of the blocking pool, precise to tens of microseconds
/// (tokio's timer rounds up to whole milliseconds); on the timer if the pool is shutting down.
pub(crate) async fn thread_sleep(duration: Duration) {
    let sleeper = tokio::task::spawn_blocking(move || std::thread::sleep(duration));
    if sleeper.await.is_err() {
        tokio::time::sleep(duration).await;
    }
}

/// `timeout` after `start`; a timeout too large to add (`Duration::MAX`) means a century. Every
/// backend's collect computes its deadline here.
pub(crate) fn deadline_after(start: Instant, timeout: Duration) -> Instant {
    start
        .checked_add(timeout)
        .unwrap_or_else(|| start + Duration::from_secs(100 * 365 * 24 * 3600))
}
