//! The conformance of the operations beside publishing and collecting a step: keys (the last
//! write wins), discard, and poll (what is there, without waiting).

use std::time::Instant;

use bytes::Bytes;

use super::{PATIENT, SHORT, assert_timeout, must, pattern, payload};
use crate::channel::{Channel, MessageId, StepMessages};

/// Keys: the last write wins, absent keys are `None`, empty values are `Some(empty)`, and
/// concurrent writers leave one of their values, whole.
pub async fn keys_last_write_wins(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    let absent = must(channel, "get_key", channel.get_key("absent")).await;
    assert!(
        absent.is_none(),
        "{}: absent key is present",
        channel.describe()
    );
    must(
        channel,
        "put_key",
        channel.put_key("k", Bytes::from_static(b"one")),
    )
    .await;
    must(
        channel,
        "put_key",
        channel.put_key("k", Bytes::from_static(b"two")),
    )
    .await;
    let value = must(channel, "get_key", channel.get_key("k")).await;
    assert_eq!(
        value.as_deref(),
        Some(&b"two"[..]),
        "{}: last write lost",
        channel.describe()
    );
    must(channel, "put_key", channel.put_key("empty", Bytes::new())).await;
    let value = must(channel, "get_key", channel.get_key("empty")).await;
    assert_eq!(
        value.as_deref(),
        Some(&b""[..]),
        "{}: empty value lost",
        channel.describe()
    );

    let values: Vec<Bytes> = (0..8).map(|i| pattern(100 + i, 64 << 10)).collect();
    let writes = values.iter().map(|v| channel.put_key("raced", v.clone()));
    must(channel, "put_key", futures::future::try_join_all(writes)).await;
    let value = must(channel, "get_key", channel.get_key("raced")).await;
    assert!(
        value.is_some_and(|v| values.contains(&v)),
        "{}: concurrent writes left a value none of them wrote",
        channel.describe()
    );
    must(channel, "cleanup", channel.cleanup()).await;
}

/// Discard removes exactly the given workers' messages of the given step; discarding a message
/// that is already gone is not an error.
pub async fn discard_removes_messages(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    let topic = "updates";
    for w in 0..3 {
        must(
            channel,
            "publish",
            channel.publish(MessageId::new(topic, 5, w), payload(5, w)),
        )
        .await;
    }
    must(
        channel,
        "publish",
        channel.publish(MessageId::new(topic, 6, 0), payload(6, 0)),
    )
    .await;
    must(
        channel,
        "collect",
        channel.collect(StepMessages::new(topic, 5, &[0, 1, 2]), PATIENT),
    )
    .await;
    must(
        channel,
        "discard",
        channel.discard(StepMessages::new(topic, 5, &[0, 1])),
    )
    .await;
    let kept = must(
        channel,
        "collect",
        channel.collect(StepMessages::new(topic, 5, &[2]), PATIENT),
    )
    .await;
    assert!(
        kept == vec![payload(5, 2)],
        "{}: discard removed too much",
        channel.describe()
    );
    let result = channel
        .collect(StepMessages::new(topic, 5, &[0, 2, 1]), SHORT)
        .await;
    assert_timeout(channel, result, topic, 5, &[0, 1]);
    let next = must(
        channel,
        "collect",
        channel.collect(StepMessages::new(topic, 6, &[0]), PATIENT),
    )
    .await;
    assert!(
        next == vec![payload(6, 0)],
        "{}: discard touched another step",
        channel.describe()
    );
    must(
        channel,
        "discard",
        channel.discard(StepMessages::new(topic, 5, &[0, 1, 2])),
    )
    .await;
    must(
        channel,
        "discard",
        channel.discard(StepMessages::new(topic, 5, &[0, 1, 2])),
    )
    .await;
    must(
        channel,
        "discard",
        channel.discard(StepMessages::new(topic, 5, &[])),
    )
    .await;
    let result = channel
        .collect(StepMessages::new(topic, 5, &[2]), SHORT)
        .await;
    assert_timeout(channel, result, topic, 5, &[2]);
    must(channel, "cleanup", channel.cleanup()).await;
}

/// Poll returns at once what has arrived, in the order asked, `None` for the rest, and never
/// waits for the missing messages.
pub async fn poll_returns_what_is_there(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    let topic = "updates";
    let none = must(
        channel,
        "poll",
        channel.poll(StepMessages::new(topic, 3, &[0, 1])),
    )
    .await;
    assert!(
        none == vec![None, None],
        "{}: poll of an empty step found messages",
        channel.describe()
    );
    for w in [0, 2, 5] {
        must(
            channel,
            "publish",
            channel.publish(MessageId::new(topic, 3, w), payload(3, w)),
        )
        .await;
    }
    must(
        channel,
        "publish",
        channel.publish(MessageId::new(topic, 4, 1), payload(4, 1)),
    )
    .await;
    let started = Instant::now();
    let got = must(
        channel,
        "poll",
        channel.poll(StepMessages::new(topic, 3, &[5, 1, 0, 2])),
    )
    .await;
    assert!(
        started.elapsed() < PATIENT / 4,
        "{}: poll waited {:?}",
        channel.describe(),
        started.elapsed()
    );
    let expected = vec![
        Some(payload(3, 5)),
        None,
        Some(payload(3, 0)),
        Some(payload(3, 2)),
    ];
    assert!(
        got == expected,
        "{}: poll returned the wrong messages",
        channel.describe()
    );
    must(
        channel,
        "discard",
        channel.discard(StepMessages::new(topic, 3, &[0])),
    )
    .await;
    let after = must(
        channel,
        "poll",
        channel.poll(StepMessages::new(topic, 3, &[0, 2])),
    )
    .await;
    assert!(
        after == vec![None, Some(payload(3, 2))],
        "{}: poll after discard",
        channel.describe()
    );
    let empty = must(
        channel,
        "poll",
        channel.poll(StepMessages::new(topic, 3, &[])),
    )
    .await;
    assert!(empty.is_empty(), "{}: poll of nobody", channel.describe());
    must(channel, "cleanup", channel.cleanup()).await;
}
