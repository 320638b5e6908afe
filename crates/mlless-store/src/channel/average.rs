//! A step's mean computed by the channel: [`Channel::publish_and_average`]'s types, and its
//! default, which averages on the worker.
//!
//! A worker hands the channel its [`Share`] of a step — a small opaque `header` (the flags its
//! peers read) and its `delta` — and gets back the element-wise mean of every peer's delta and
//! their headers ([`Averaged`]). Where the mean is computed is the backend's business: the
//! parameter server computes it on its side, so that each worker sends one update and receives
//! one mean whatever the fleet ([`PsChannel`](super::ps::PsChannel)); every other backend keeps
//! the default here, which publishes the share as a message, collects the peers' and averages
//! them on the worker (broadcast's traffic). Both average with [`mean_of`] in the order of the
//! peers, so both give the same bits.

use bytes::Bytes;
use mlless_core::{SparseVector, WireDelta, mean_of};
use serde::{Deserialize, Serialize};

use super::{Channel, ChannelError, MessageId, StepExchange, WorkerId};
use crate::channel::Result;

/// One worker's share of a step's mean.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    /// What the peers read besides the mean (opaque to the channel; a few bytes).
    pub header: Bytes,
    /// The worker's delta.
    pub delta: WireDelta,
    /// The dimension of the deltas: every index is below it.
    pub dim: usize,
}

/// What a worker gets back from [`Channel::publish_and_average`].
#[derive(Debug, Clone, PartialEq)]
pub struct Averaged {
    /// The peers' headers, in the order of the peers asked for.
    pub headers: Vec<Bytes>,
    /// The element-wise mean of the peers' deltas ([`mean_of`] in the order of the peers).
    pub mean: SparseVector,
    /// Bytes this worker sent for its share.
    pub bytes_sent: u64,
    /// Bytes this worker received from the others (the mean and headers, or the peers' shares).
    pub bytes_received: u64,
    /// Messages received from the others: one per server that averaged, or one per peer.
    pub messages_received: u32,
    /// Whether servers computed the mean (each answered the share's request with its part of
    /// it: one round trip), rather than the worker from its peers' shares.
    pub by_servers: bool,
}

/// A share as it crosses a channel that only carries messages (the default
/// [`Channel::publish_and_average`]), and as a parameter server keeps a worker's header.
#[derive(Serialize, Deserialize)]
struct Envelope {
    header: Bytes,
    delta: WireDelta,
}

/// The magic of an encoded [`Envelope`].
const MAGIC: [u8; 4] = *b"MLLS";

/// The message of `header` and `delta` as the default [`Channel::publish_and_average`]
/// publishes it (and a parameter server stores a header, with an empty delta).
pub(crate) fn encode_share(header: &Bytes, delta: &WireDelta) -> Result<Bytes, postcard::Error> {
    let envelope = Envelope {
        header: header.clone(),
        delta: delta.clone(),
    };
    postcard::to_extend(&envelope, MAGIC.to_vec()).map(Bytes::from)
}

/// The header and delta of a share's message, or why it is not one.
fn decode_share(message: &[u8]) -> Result<Envelope, String> {
    let Some(body) = message.strip_prefix(&MAGIC) else {
        return Err("not a share of a mean (wrong magic)".to_string());
    };
    postcard::from_bytes(body).map_err(|e| format!("undecodable share of a mean: {e}"))
}

/// The header of a share's message (what [`Channel::poll`] returns on a topic that
/// [`Channel::publish_and_average`] was used on): a replacement looks its old flags up there.
pub fn share_header(message: &[u8]) -> Result<Bytes, String> {
    decode_share(message).map(|envelope| envelope.header)
}

/// The default [`Channel::publish_and_average`]: publishes `share` as a message of the
/// `exchange` and collects the peers' ([`Channel::publish_and_collect`]), then averages their
/// deltas here.
pub(crate) async fn average_on_worker<C: Channel + ?Sized>(
    channel: &C,
    exchange: StepExchange<'_>,
    share: Share,
) -> Result<Averaged> {
    let MessageId { topic, step, from } = exchange.own();
    let bad = |worker: WorkerId, reason: String| ChannelError::BadShare {
        endpoint: channel.describe(),
        topic: topic.to_string(),
        step,
        worker,
        reason,
    };
    let payload = encode_share(&share.header, &share.delta)
        .map_err(|e| bad(from, format!("cannot encode the share: {e}")))?;
    let bytes_sent = payload.len() as u64;
    let messages = channel.publish_and_collect(exchange, payload).await?;
    let mut headers = Vec::with_capacity(messages.len());
    let mut deltas = Vec::with_capacity(messages.len());
    let (mut bytes_received, mut messages_received) = (0, 0);
    for (message, &peer) in messages.iter().zip(exchange.peers) {
        if peer != from {
            bytes_received += message.len() as u64;
            messages_received += 1;
        }
        let envelope = decode_share(message).map_err(|reason| bad(peer, reason))?;
        deltas.push(
            envelope
                .delta
                .into_sparse(share.dim)
                .map_err(|e| bad(peer, e.to_string()))?,
        );
        headers.push(envelope.header);
    }
    let refs: Vec<&SparseVector> = deltas.iter().collect();
    Ok(Averaged {
        headers,
        mean: mean_of(&refs),
        bytes_sent,
        bytes_received,
        messages_received,
        by_servers: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_round_trip_and_refuse_what_they_are_not() {
        let delta = WireDelta::Sparse(
            SparseVector::from_parts(vec![1, 5], vec![0.5, -2.0]).expect("ascending"),
        );
        let message = encode_share(&Bytes::from_static(b"flags"), &delta).expect("encodes");
        let envelope = decode_share(&message).expect("decodes");
        assert_eq!(envelope.delta, delta);
        assert_eq!(share_header(&message).expect("decodes"), &b"flags"[..]);
        assert!(share_header(b"MLLU....").is_err());
        assert!(share_header(&message[..message.len() - 1]).is_err());
    }
}
