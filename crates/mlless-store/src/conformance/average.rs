//! The conformance of [`Channel::publish_and_average`]: whether the worker averages (the
//! default) or the backend does (the parameter server), every worker gets the mean
//! [`mean_of`] computes in the order of the peers, bit for bit.

use std::time::Duration;

use bytes::Bytes;
use mlless_core::{SparseVector, WireDelta, mean_of};

use super::{PATIENT, assert_timeout, exchange, must};
use crate::channel::average::{Share, share_header};
use crate::channel::{Channel, ChannelError, StepMessages, WorkerId};

/// The dimension of the deltas averaged.
const DIM: usize = 1_000;

/// A delta distinct per worker: entries spread over the whole dimension (so that every range
/// of a sharded channel gets some), overlapping the other workers' in part.
fn delta(worker: WorkerId) -> SparseVector {
    let step = 7 + worker as usize;
    let indices: Vec<u32> = (worker as usize..DIM)
        .step_by(step)
        .map(|i| i as u32)
        .collect();
    let values = indices
        .iter()
        .map(|&i| (i as f32 * 0.37 + worker as f32).sin() / 3.0)
        .collect();
    SparseVector::from_parts(indices, values).unwrap_or_default()
}

fn share(worker: WorkerId) -> Share {
    Share {
        header: Bytes::from(format!("header of worker {worker}")),
        delta: WireDelta::Sparse(delta(worker)),
        dim: DIM,
    }
}

/// Three workers average a step at once (and one again: idempotent): each gets the mean of
/// their deltas in the order of the peers, bit for bit, with every header; each share is a
/// message of the step whose header [`share_header`] reads, and [`Channel::discard`] removes
/// it; a peer that never shares times the average out naming it.
pub async fn publish_and_average_step(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    let (topic, step) = ("means", 4);
    let peers: [WorkerId; 3] = [2, 0, 1];
    let deltas: Vec<SparseVector> = peers.iter().map(|&w| delta(w)).collect();
    let expected = mean_of(&deltas.iter().collect::<Vec<_>>());
    let averages = peers
        .iter()
        .map(|&w| channel.publish_and_average(exchange(topic, step, w, &peers, PATIENT), share(w)));
    let results = futures::future::join_all(averages).await;
    let headers: Vec<Bytes> = peers
        .iter()
        .map(|w| Bytes::from(format!("header of worker {w}")))
        .collect();
    for (result, worker) in results.into_iter().zip(peers) {
        let averaged = match result {
            Ok(averaged) => averaged,
            Err(e) => panic!(
                "{}: worker {worker}'s average failed: {e}",
                channel.describe()
            ),
        };
        assert!(
            averaged.mean == expected,
            "{}: worker {worker} got another mean than mean_of's",
            channel.describe()
        );
        assert_eq!(
            averaged.headers,
            headers,
            "{}: worker {worker}'s headers",
            channel.describe()
        );
        assert!(
            averaged.bytes_sent > 0
                && averaged.bytes_received > 0
                && averaged.messages_received > 0,
            "{}: worker {worker} counted no traffic: {averaged:?}",
            channel.describe()
        );
    }
    let again = must(
        channel,
        "publish_and_average again",
        channel.publish_and_average(exchange(topic, step, 0, &peers, PATIENT), share(0)),
    )
    .await;
    assert!(
        again.mean == expected,
        "{}: averaging again gave another mean",
        channel.describe()
    );
    let polled = must(
        channel,
        "poll",
        channel.poll(StepMessages::new(topic, step, &[0])),
    )
    .await;
    let header = polled[0]
        .as_ref()
        .map(|m| share_header(m))
        .unwrap_or_else(|| {
            panic!(
                "{}: a share is not a message of its step",
                channel.describe()
            )
        });
    assert_eq!(
        header.as_deref().ok(),
        Some(&b"header of worker 0"[..]),
        "{}: the header a poll reads",
        channel.describe()
    );
    must(
        channel,
        "discard",
        channel.discard(StepMessages::new(topic, step, &peers)),
    )
    .await;
    let polled = must(
        channel,
        "poll",
        channel.poll(StepMessages::new(topic, step, &peers)),
    )
    .await;
    assert!(
        polled.iter().all(Option::is_none),
        "{}: discarded shares are still there",
        channel.describe()
    );

    let result = channel
        .publish_and_average(
            exchange(topic, step + 1, 0, &[0, 1], Duration::from_millis(300)),
            share(0),
        )
        .await
        .map(|averaged| averaged.headers);
    assert_timeout(channel, result, topic, step + 1, &[1]);
    must(channel, "cleanup", channel.cleanup()).await;
}

/// A share whose delta does not fit the dimension is refused, not averaged.
pub async fn average_refuses_what_does_not_fit(channel: &dyn Channel) {
    must(channel, "cleanup", channel.cleanup()).await;
    let mut bad = share(0);
    bad.delta = WireDelta::Sparse(
        SparseVector::from_parts(vec![3, DIM as u32 + 5], vec![1.0, 1.0]).unwrap_or_default(),
    );
    let result = channel
        .publish_and_average(exchange("means", 1, 0, &[0], PATIENT), bad)
        .await;
    match result {
        Err(e @ (ChannelError::BadShare { .. } | ChannelError::Backend { .. })) => assert!(
            !e.is_transient(),
            "{}: a delta out of bounds is not worth a retry: {e}",
            channel.describe()
        ),
        Err(e) => panic!("{}: out of bounds gave {e}", channel.describe()),
        Ok(_) => panic!(
            "{}: a delta beyond the dimension was averaged",
            channel.describe()
        ),
    }
    must(channel, "cleanup", channel.cleanup()).await;
}
