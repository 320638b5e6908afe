//! The conformance suites every backend must pass, in the manner of `object_store`'s
//! `integration.rs`: plain async functions that take any [`Channel`] (or a factory of channels,
//! one per job id) or any [`Store`], and panic with a message naming the backend when it
//! misbehaves. A new backend is done when its tests call [`run_all`] (channels) or
//! [`store_conformance`] (stores) and pass.
//!
//! ```no_run
//! # async fn example() {
//! use std::sync::Arc;
//! use mlless_store::{Channel, ObjectStoreChannel, Store, conformance};
//!
//! let store = Store::open("memory://conformance-doc").expect("open");
//! conformance::store_conformance(&store).await;
//! let factory = |job: &str| -> Arc<dyn Channel> {
//!     Arc::new(ObjectStoreChannel::new(store.clone(), job).expect("channel"))
//! };
//! conformance::run_all(&factory).await;
//! # }
//! ```
//!
//! The functions run on any tokio runtime; [`store_conformance`] spawns tasks, so a
//! multi-threaded runtime exercises its concurrency check best.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::channel::{Channel, ChannelError, MessageId, StepExchange, StepMessages, WorkerId};
use crate::store::{Store, StoreError};

mod average;
mod other_operations;
mod store;
pub use average::{average_refuses_what_does_not_fit, publish_and_average_step};
pub use other_operations::{
    discard_removes_messages, keys_last_write_wins, poll_returns_what_is_there,
};
pub use store::store_conformance;

/// A factory of channels of one backend: given a job id, the channel of that job.
pub type ChannelFactory<'a> = &'a dyn Fn(&str) -> Arc<dyn Channel>;

/// Timeout of the collects that are expected to succeed (generous: slow CI machines).
const PATIENT: Duration = Duration::from_secs(20);
/// Timeout of the collects that are expected to time out.
const SHORT: Duration = Duration::from_millis(200);

/// Deterministic pseudo-random bytes, distinct for every seed.
fn pattern(seed: u64, len: usize) -> Bytes {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}

/// Worker `from`'s side of the exchange of `step` on `topic` with `peers` within `timeout`.
fn exchange<'a>(
    topic: &'a str,
    step: u64,
    from: WorkerId,
    peers: &'a [WorkerId],
    timeout: Duration,
) -> StepExchange<'a> {
    StepExchange {
        topic,
        step,
        from,
        peers,
        timeout,
    }
}

/// A payload distinct per (step, worker), of a length that varies with the worker.
fn payload(step: u64, worker: WorkerId) -> Bytes {
    let len = 16 + (worker as usize * 37) % 1000;
    let mut bytes = format!("step {step} worker {worker}:").into_bytes();
    bytes.extend_from_slice(&pattern(step << 32 | u64::from(worker), len));
    Bytes::from(bytes)
}

/// Asserts that `result` is a timeout naming `topic`, `step` and exactly `missing`.
fn assert_timeout(
    channel: &dyn Channel,
    result: Result<Vec<Bytes>, ChannelError>,
    topic: &str,
    step: u64,
    missing: &[WorkerId],
) {
    match result {
        Err(ChannelError::Timeout {
            topic: t,
            step: s,
            missing: m,
            ..
        }) => {
            assert_eq!(
                t,
                topic,
                "{}: timeout names the wrong topic",
                channel.describe()
            );
            assert_eq!(
                s,
                step,
                "{}: timeout names the wrong step",
                channel.describe()
            );
            assert_eq!(
                m,
                missing,
                "{}: timeout names the wrong missing workers",
                channel.describe()
            );
        }
        Err(e) => panic!(
            "{}: expected a timeout for step {step} of {topic}, got error: {e}",
            channel.describe()
        ),
        Ok(v) => panic!(
            "{}: expected a timeout for step {step} of {topic}, got {} messages",
            channel.describe(),
            v.len()
        ),
    }
}

async fn must<T, E: std::fmt::Display>(
    channel: &dyn Channel,
    what: &str,
    f: impl Future<Output = Result<T, E>>,
) -> T {
    match f.await {
        Ok(v) => v,
        Err(e) => panic!("{}: {what} failed: {e}", channel.describe()),
    }
}

/// Publishes a step from P = 1, 4 and 32 workers (concurrently, with a collector already
/// waiting) and collects it in order, in reverse order, and for a subset of the workers.
pub async fn publish_collect_step(channel: &dyn Channel) {
    let topic = "updates";
    must(channel, "cleanup", channel.cleanup()).await;
    for (step, workers) in [(0u64, 1u32), (1, 4), (2, 32)] {
        let from: Vec<WorkerId> = (0..workers).collect();
        // A collector starts first and must wait for the late publishers.
        let collect = channel.collect(StepMessages::new(topic, step, &from), PATIENT);
        let publish = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let publishes = from
                .iter()
                .map(|&w| channel.publish(MessageId::new(topic, step, w), payload(step, w)));
            futures::future::try_join_all(publishes).await
        };
        let (collected, published) = futures::future::join(collect, publish).await;
        must(channel, "publish", async { published }).await;
        let collected = must(channel, "collect", async { collected }).await;
        let expected: Vec<Bytes> = from.iter().map(|&w| payload(step, w)).collect();
        assert!(
            collected == expected,
            "{}: collect of step {step} from {workers} workers returned wrong payloads",
            channel.describe()
        );

        // The order of `from` decides the order of the payloads.
        let reversed: Vec<WorkerId> = from.iter().rev().copied().collect();
        let collected = must(
            channel,
            "collect",
            channel.collect(StepMessages::new(topic, step, &reversed), PATIENT),
        )
        .await;
        let expected: Vec<Bytes> = reversed.iter().map(|&w| payload(step, w)).collect();
        assert!(
            collected == expected,
            "{}: collect in reverse order returned payloads out of order",
            channel.describe()
        );

        // Collecting a subset ignores the other workers' messages.
        let subset: Vec<WorkerId> = from.iter().copied().step_by(3).collect();
        let collected = must(
            channel,
            "collect",
            channel.collect(StepMessages::new(topic, step, &subset), PATIENT),
        )
        .await;
        let expected: Vec<Bytes> = subset.iter().map(|&w| payload(step, w)).collect();
        assert!(
            collected == expected,
            "{}: collect of a subset returned wrong payloads",
            channel.describe()
        );
    }
    // A timeout too large to add to an instant (Duration::MAX) waits as long as it takes.
    let all: Vec<WorkerId> = (0..4).collect();
    let collected = must(
        channel,
        "collect",
        channel.collect(StepMessages::new(topic, 1, &all), Duration::MAX),
    )
    .await;
    assert_eq!(collected.len(), 4, "{}", channel.describe());
    // Collecting from nobody returns nothing, at once.
    let none = must(
        channel,
        "collect",
        channel.collect(StepMessages::new(topic, 99, &[]), Duration::ZERO),
    )
    .await;
    assert!(none.is_empty());
    must(channel, "cleanup", channel.cleanup()).await;
}

/// A step exchanged with `publish_and_collect`: 4 and 16 workers at once, each publishing its
/// own and collecting everyone's (in the order asked); a repeat stores nothing new; a worker
/// collecting only others; and a missing peer's timeout, after which the caller's own message
/// is there.
pub async fn publish_and_collect_step(channel: &dyn Channel) {
    let topic = "exchange";
    must(channel, "cleanup", channel.cleanup()).await;
    for (step, workers) in [(0u64, 4u32), (1, 16)] {
        let from: Vec<WorkerId> = (0..workers).rev().collect();
        let exchanges = (0..workers).map(|w| {
            let from = &from;
            async move {
                // Spread the arrivals, so that some wait for the others.
                tokio::time::sleep(Duration::from_millis(u64::from(w % 3))).await;
                let exchange = exchange(topic, step, w, from, PATIENT);
                channel
                    .publish_and_collect(exchange, payload(step, w))
                    .await
            }
        });
        let results = futures::future::join_all(exchanges).await;
        let expected: Vec<Bytes> = from.iter().map(|&w| payload(step, w)).collect();
        for (w, result) in results.into_iter().enumerate() {
            let collected = must(channel, "publish_and_collect", async { result }).await;
            assert!(
                collected == expected,
                "{}: worker {w} of {workers} collected the wrong payloads",
                channel.describe()
            );
        }
        // Again: the same messages, one each.
        let again = must(
            channel,
            "publish_and_collect",
            channel.publish_and_collect(exchange(topic, step, 0, &from, PATIENT), payload(step, 0)),
        )
        .await;
        assert!(again == expected, "{}: a repeat", channel.describe());
    }
    let others = must(
        channel,
        "publish_and_collect",
        channel.publish_and_collect(exchange(topic, 0, 3, &[1, 2], PATIENT), payload(0, 3)),
    )
    .await;
    assert!(
        others == vec![payload(0, 1), payload(0, 2)],
        "{}: collecting only others",
        channel.describe()
    );
    let result = channel
        .publish_and_collect(exchange(topic, 5, 0, &[0, 1], SHORT), payload(5, 0))
        .await;
    assert_timeout(channel, result, topic, 5, &[1]);
    let own = must(
        channel,
        "poll",
        channel.poll(StepMessages::new(topic, 5, &[0])),
    )
    .await;
    assert!(
        own == vec![Some(payload(5, 0))],
        "{}: the own message of a timed-out exchange",
        channel.describe()
    );
    must(channel, "cleanup", channel.cleanup()).await;
}

/// Zero-byte payloads are delivered (as empty payloads, not as missing messages).
pub async fn empty_messages(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    for w in 0..3 {
        must(
            channel,
            "publish",
            channel.publish(MessageId::new("empty", 7, w), Bytes::new()),
        )
        .await;
    }
    let collected = must(
        channel,
        "collect",
        channel.collect(StepMessages::new("empty", 7, &[0, 1, 2]), PATIENT),
    )
    .await;
    assert_eq!(collected.len(), 3, "{}: wrong count", channel.describe());
    assert!(
        collected.iter().all(Bytes::is_empty),
        "{}: empty payloads came back non-empty",
        channel.describe()
    );
    must(channel, "cleanup", channel.cleanup()).await;
}

/// Publishing the same (topic, step, worker) twice stores one message: a collect sees it once,
/// and one discard removes it.
pub async fn republish_is_idempotent(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    let (topic, step) = ("again", 3);
    must(
        channel,
        "publish",
        channel.publish(MessageId::new(topic, step, 0), payload(step, 0)),
    )
    .await;
    must(
        channel,
        "publish",
        channel.publish(MessageId::new(topic, step, 0), payload(step, 0)),
    )
    .await;
    must(
        channel,
        "publish",
        channel.publish(MessageId::new(topic, step, 1), payload(step, 1)),
    )
    .await;
    let collected = must(
        channel,
        "collect",
        channel.collect(StepMessages::new(topic, step, &[0, 1]), PATIENT),
    )
    .await;
    assert!(
        collected == vec![payload(step, 0), payload(step, 1)],
        "{}: republished message came back wrong",
        channel.describe()
    );
    must(
        channel,
        "discard",
        channel.discard(StepMessages::new(topic, step, &[0])),
    )
    .await;
    let result = channel
        .collect(StepMessages::new(topic, step, &[0, 1]), SHORT)
        .await;
    assert_timeout(channel, result, topic, step, &[0]);
    must(channel, "cleanup", channel.cleanup()).await;
}

/// 8 MiB and 9 MiB payloads (above Memcached's default 1 MiB item size) round-trip exactly, as
/// messages and as keys.
pub async fn large_values(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    let big = [pattern(8, 8 << 20), pattern(9, 9 << 20)];
    for (w, value) in big.iter().enumerate() {
        let w = w as WorkerId;
        must(
            channel,
            "publish",
            channel.publish(MessageId::new("large", 1, w), value.clone()),
        )
        .await;
    }
    let collected = must(
        channel,
        "collect",
        channel.collect(StepMessages::new("large", 1, &[0, 1]), PATIENT),
    )
    .await;
    for (got, want) in collected.iter().zip(&big) {
        assert!(
            got == want,
            "{}: a {} byte message came back as {} different bytes",
            channel.describe(),
            want.len(),
            got.len()
        );
    }
    must(channel, "put_key", channel.put_key("large", big[1].clone())).await;
    let got = must(channel, "get_key", channel.get_key("large")).await;
    assert!(
        got.as_ref() == Some(&big[1]),
        "{}: a 9 MiB key did not round-trip",
        channel.describe()
    );
    must(channel, "cleanup", channel.cleanup()).await;
}

/// Two job ids on the same backend see neither each other's messages nor keys, and cleaning
/// up one leaves the other alone.
pub async fn jobs_are_isolated(factory: ChannelFactory<'_>) {
    let a = factory("conformance-isolated-a");
    let b = factory("conformance-isolated-b");
    let (a, b) = (a.as_ref(), b.as_ref());
    must(a, "cleanup", a.cleanup()).await;
    must(b, "cleanup", b.cleanup()).await;
    must(
        a,
        "publish",
        a.publish(MessageId::new("updates", 0, 0), payload(0, 0)),
    )
    .await;
    must(a, "put_key", a.put_key("stop", Bytes::from_static(b"a"))).await;

    let result = b
        .collect(StepMessages::new("updates", 0, &[0]), SHORT)
        .await;
    assert_timeout(b, result, "updates", 0, &[0]);
    let key = must(b, "get_key", b.get_key("stop")).await;
    assert!(key.is_none(), "{}: sees another job's key", b.describe());

    must(b, "put_key", b.put_key("stop", Bytes::from_static(b"b"))).await;
    must(
        b,
        "publish",
        b.publish(MessageId::new("updates", 0, 0), payload(1, 1)),
    )
    .await;
    let key = must(a, "get_key", a.get_key("stop")).await;
    assert_eq!(
        key.as_deref(),
        Some(&b"a"[..]),
        "{}: key overwritten by another job",
        a.describe()
    );

    must(b, "cleanup", b.cleanup()).await;
    let collected = must(
        a,
        "collect",
        a.collect(StepMessages::new("updates", 0, &[0]), PATIENT),
    )
    .await;
    assert!(
        collected == vec![payload(0, 0)],
        "{}: message changed by another job",
        a.describe()
    );
    let key = must(a, "get_key", a.get_key("stop")).await;
    assert_eq!(
        key.as_deref(),
        Some(&b"a"[..]),
        "{}: another job's cleanup removed a key",
        a.describe()
    );
    must(a, "cleanup", a.cleanup()).await;
}

/// After cleanup the job's keys are gone and a collect of a previously published step times out.
pub async fn cleanup_leaves_nothing(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    for w in 0..2 {
        must(
            channel,
            "publish",
            channel.publish(MessageId::new("updates", 3, w), payload(3, w)),
        )
        .await;
        must(
            channel,
            "publish",
            channel.publish(MessageId::new("stats", 3, w), payload(4, w)),
        )
        .await;
    }
    must(
        channel,
        "put_key",
        channel.put_key("stop", Bytes::from_static(b"1")),
    )
    .await;
    must(
        channel,
        "put_key",
        channel.put_key("progress/0", Bytes::from_static(b"3")),
    )
    .await;
    must(channel, "cleanup", channel.cleanup()).await;
    for key in ["stop", "progress/0"] {
        let value = must(channel, "get_key", channel.get_key(key)).await;
        assert!(
            value.is_none(),
            "{}: key {key} survived cleanup",
            channel.describe()
        );
    }
    let result = channel
        .collect(StepMessages::new("updates", 3, &[0, 1]), SHORT)
        .await;
    assert_timeout(channel, result, "updates", 3, &[0, 1]);
    let result = channel
        .collect(StepMessages::new("stats", 3, &[1]), SHORT)
        .await;
    assert_timeout(channel, result, "stats", 3, &[1]);
    // Cleaning up an empty job is fine.
    must(channel, "cleanup", channel.cleanup()).await;
}

/// A collect missing one worker fails with a timeout naming that worker, no sooner than the
/// timeout and within twice the timeout; the message names the channel.
pub async fn collect_times_out(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    let (topic, step) = ("updates", 11);
    must(
        channel,
        "publish",
        channel.publish(MessageId::new(topic, step, 0), payload(step, 0)),
    )
    .await;
    must(
        channel,
        "publish",
        channel.publish(MessageId::new(topic, step, 2), payload(step, 2)),
    )
    .await;
    let timeout = Duration::from_millis(400);
    let started = Instant::now();
    let result = channel
        .collect(StepMessages::new(topic, step, &[0, 1, 2]), timeout)
        .await;
    let elapsed = started.elapsed();
    let message = match &result {
        Err(e) => e.to_string(),
        Ok(_) => String::new(),
    };
    assert_timeout(channel, result, topic, step, &[1]);
    assert!(
        elapsed >= timeout,
        "{}: gave up after {elapsed:?}, before the {timeout:?} timeout",
        channel.describe()
    );
    assert!(
        elapsed < timeout * 2,
        "{}: a {timeout:?} timeout took {elapsed:?}",
        channel.describe()
    );
    for needle in [topic, &step.to_string(), &channel.describe()] {
        assert!(
            message.contains(needle),
            "{}: timeout message {message:?} does not name {needle:?}",
            channel.describe()
        );
    }
    // A zero timeout polls once and fails at once.
    let started = Instant::now();
    let result = channel
        .collect(StepMessages::new(topic, step, &[1]), Duration::ZERO)
        .await;
    assert_timeout(channel, result, topic, step, &[1]);
    assert!(started.elapsed() < Duration::from_secs(2));
    // The message is missing because it was never published: the channel lost nothing, and
    // has nothing to explain.
    let explained = must(channel, "explain_missing", channel.explain_missing()).await;
    assert_eq!(
        explained,
        None,
        "{}: a channel that lost nothing explains nothing",
        channel.describe()
    );
    must(channel, "cleanup", channel.cleanup()).await;
}

/// The job ids [`run_all`] asks its factory for (a factory that connects ahead of time needs
/// them).
pub const JOB_IDS: &[&str] = &[
    "conformance-publish",
    "conformance-exchange",
    "conformance-empty",
    "conformance-republish",
    "conformance-large",
    "conformance-isolated-a",
    "conformance-isolated-b",
    "conformance-cleanup",
    "conformance-timeout",
    "conformance-keys",
    "conformance-discard",
    "conformance-poll",
    "conformance-average",
    "conformance-average-bad",
];

/// Runs every channel conformance test, each on its own job id (one of [`JOB_IDS`]).
pub async fn run_all(factory: ChannelFactory<'_>) {
    publish_collect_step(factory("conformance-publish").as_ref()).await;
    publish_and_collect_step(factory("conformance-exchange").as_ref()).await;
    empty_messages(factory("conformance-empty").as_ref()).await;
    republish_is_idempotent(factory("conformance-republish").as_ref()).await;
    large_values(factory("conformance-large").as_ref()).await;
    jobs_are_isolated(factory).await;
    cleanup_leaves_nothing(factory("conformance-cleanup").as_ref()).await;
    collect_times_out(factory("conformance-timeout").as_ref()).await;
    keys_last_write_wins(factory("conformance-keys").as_ref()).await;
    discard_removes_messages(factory("conformance-discard").as_ref()).await;
    poll_returns_what_is_there(factory("conformance-poll").as_ref()).await;
    publish_and_average_step(factory("conformance-average").as_ref()).await;
    average_refuses_what_does_not_fit(factory("conformance-average-bad").as_ref()).await;
}
