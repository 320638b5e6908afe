//! What functions send each other through the channel, and the objects the supervisor writes.
//!
//! Every message is a framed object (magic, version, length, checksum; see
//! [`mlless_data::codec`]), so a corrupt or foreign message is an error naming it, never a
//! panic.

use bytes::Bytes;
use mlless_core::{BatchLoss, WireDelta};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::error::{Result, RuntimeError};

/// Topic of the workers' model updates.
pub const UPDATES: &str = "updates";
/// Topic of the per-step statistics that workers send the supervisor.
pub const STATS: &str = "stats";
/// Topic of the final replicas that workers send the supervisor.
pub const FINAL: &str = "final";
/// Topic of the leading worker's model at the steps it is evaluated on the validation set
/// ([`ReplicaMessage`]s, id: the worker).
pub const EVAL: &str = "eval";
/// Topic of what the workers' update filters still held when training stopped (one message per
/// worker, at step 0), so that no update is lost.
pub const FLUSH: &str = "flush";
/// Key of the supervisor's stop request.
pub const STOP_KEY: &str = "stop";
/// Key of the supervisor's latest scale-in removal request (a JSON [`Removal`]).
pub const SCALE_IN_KEY: &str = "scale-in";
/// Key of the supervisor's latest request to replace silent workers (a JSON
/// [`ReplaceRequest`]), read by the driver.
pub const REPLACE_KEY: &str = "replace";
/// Key of the supervisor's progress report, read by the driver.
pub const PROGRESS_KEY: &str = "progress";

/// A framed message type: its magic identifies it on the wire.
pub trait Message: Serialize + DeserializeOwned {
    /// Four bytes that open every encoded message of this type.
    const MAGIC: [u8; 4];

    /// Encodes the message as a framed object.
    fn encode(&self) -> Bytes {
        Bytes::from(mlless_data::encode_framed(Self::MAGIC, self))
    }

    /// Decodes a framed message; `location` names it in the error.
    fn decode(bytes: &[u8], location: impl FnOnce() -> String) -> Result<Self> {
        mlless_data::decode_framed(Self::MAGIC, bytes).map_err(|source| RuntimeError::Corrupt {
            location: location(),
            source,
        })
    }
}

/// A worker's update for one step: what its filter lets through of the delta its optimiser
/// computed on its minibatch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateMessage {
    /// The step.
    pub step: u64,
    /// The sender.
    pub worker: u32,
    /// Loss of the sender's minibatch before the update.
    pub loss: BatchLoss,
    /// BSP and ISP: the sender has seen a stop request, so every worker stops after this step.
    pub stop: bool,
    /// SSP and ASP: this is the sender's last step.
    pub last: bool,
    /// SSP and ASP: the sender has applied every peer's updates of the steps before this one,
    /// so the peers may discard their messages of those steps.
    pub applied_through: u64,
    /// Scale-in: the removal request the sender has seen and not applied yet. Every worker
    /// applies it after the step in whose updates it first appears.
    pub removal: Option<Removal>,
    /// The delta to the flat parameter vector.
    pub delta: WireDelta,
}

impl Message for UpdateMessage {
    const MAGIC: [u8; 4] = *b"MLLU";
}

/// What a worker sent and received in one step: counted by its exchange, sent to the supervisor
/// in its [`StatsMessage`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Traffic {
    /// Bytes the worker published (its update; at the last step also its flush).
    pub bytes_sent: u64,
    /// Bytes of the updates the worker received.
    pub bytes_received: u64,
    /// Messages the worker published.
    pub messages_sent: u32,
    /// Messages the worker received from its peers.
    pub messages_received: u32,
    /// Entries of the flat parameter vector the worker sent.
    pub entries_sent: u64,
    /// Entries its filter held back (accumulated, not sent yet).
    pub entries_held: u64,
    /// Updates the worker applied to its replica in this step (its own included; at the last
    /// step also the peers' flushes).
    pub updates_applied: u32,
    /// When the worker started publishing its update, Unix ms.
    pub published_unix_ms: f64,
    /// Whether the worker published its model of this step on [`EVAL`] for validation.
    pub snapshot: bool,
}

/// A worker's statistics for one step, for the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StatsMessage {
    /// The step.
    pub step: u64,
    /// The sender.
    pub worker: u32,
    /// Loss of the sender's minibatch before the update.
    pub loss: BatchLoss,
    /// Time spent reading the minibatch (not hidden by prefetching), in ms.
    pub read_ms: f64,
    /// Time spent computing the gradient and the optimiser step, in ms.
    pub compute_ms: f64,
    /// The CPU time of that computing, in ms (`None` without a thread CPU clock).
    pub compute_cpu_ms: Option<f64>,
    /// Time spent publishing, collecting and applying updates, in ms.
    pub exchange_ms: f64,
    /// Wall time of the whole step, in ms.
    pub step_ms: f64,
    /// What the worker sent and received in the step.
    pub traffic: Traffic,
    /// When the worker started computing the step (after any barrier), Unix ms.
    pub started_unix_ms: f64,
    /// Whether this was the worker's last step.
    pub last: bool,
    /// Whether the worker ends because the scale-in tuner removed it.
    pub removed: bool,
    /// The object-store requests this invocation of the worker has counted so far (its
    /// data, its checkpoints and, on the object-store channel, its exchange), for the live
    /// bill; an invocation's count starts at 0.
    pub requests: mlless_store::RequestCounts,
}

impl Message for StatsMessage {
    const MAGIC: [u8; 4] = *b"MLLS";
}

/// A worker's final replica of the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaMessage {
    /// The sender.
    pub worker: u32,
    /// The last step the replica has applied.
    pub step: u64,
    /// The flat parameter vector.
    pub params: Vec<f32>,
}

impl Message for ReplicaMessage {
    const MAGIC: [u8; 4] = *b"MLLR";
}

/// A trained model as stored at the end of a run (`model.bin` below the run's location).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredModel {
    /// What the parameters mean.
    pub spec: mlless_core::ModelSpec,
    /// The flat parameter vector.
    pub params: Vec<f32>,
}

impl Message for StoredModel {
    const MAGIC: [u8; 4] = *b"MLLM";
}

/// The supervisor's request to remove one worker (scale-in), the `seq`-th of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    /// 1 for the run's first removal, 2 for the second, …
    pub seq: u32,
    /// The worker to remove.
    pub worker: u32,
}

/// Why the supervisor asks the workers to stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopRequest {
    /// A sentence for the run record.
    pub reason: String,
}

/// The supervisor's view of the run, polled by the driver to show progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Last step whose loss the supervisor knows.
    pub step: u64,
    /// Epochs done.
    pub epoch: f64,
    /// Loss of that step.
    pub loss: f64,
    /// Workers active.
    pub workers: u32,
    /// The validation metric, latest and best (`None` before the first evaluation, or
    /// without a validation set).
    #[serde(default)]
    pub validation: Option<ValidationProgress>,
    /// The object-store requests the functions have counted so far, as far as the supervisor
    /// knows them: the supervisor's own and each worker's latest (its statistics'), for the
    /// driver's live bill.
    #[serde(default)]
    pub requests: mlless_store::RequestCounts,
}

/// The validation metric as the live line shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ValidationProgress {
    /// The metric (`logloss`, `rmse`, …).
    pub metric: String,
    /// Its value at the latest evaluation.
    pub latest: f64,
    /// Its best value so far.
    pub best: f64,
    /// Evaluations so far.
    #[serde(default)]
    pub evaluations: u32,
    /// The epochs done at the latest evaluation.
    #[serde(default)]
    pub epoch: f64,
    /// The latest evaluations, oldest first (at most [`RECENT_EVALUATIONS`]), each `[epochs
    /// done, seconds since the supervisor started, value]`, so that a reader that looks less often
    /// than the evaluations come (a search's rungs) misses none of them.
    #[serde(default)]
    pub recent: Vec<[f64; 3]>,
}

/// How many of the latest evaluations a [`ValidationProgress`] carries.
pub const RECENT_EVALUATIONS: usize = 16;

/// The supervisor's request that the driver replace workers that sent nothing in time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaceRequest {
    /// Increases with every request of the run, so that the driver acts on each once.
    pub seq: u32,
    /// The silent workers.
    pub workers: Vec<u32>,
    /// The step whose statistics they did not send.
    pub step: u64,
}

#[cfg(test)]
mod tests {
    use mlless_core::{Compression, FilterConfig, ModelSpec, SparseVector, UpdateFilter};

    use super::*;

    /// Flips every bit of `bytes` in turn: each must be an error naming the object.
    fn assert_every_flip_fails<T: Message + std::fmt::Debug>(bytes: &[u8]) {
        T::decode(bytes, || "the original".into()).expect("the sample decodes");
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.to_vec();
                bad[i] ^= 1 << bit;
                let err = T::decode(&bad, || format!("message {i}.{bit}"))
                    .expect_err(&format!("byte {i} bit {bit} flipped still decodes"));
                assert!(
                    err.to_string().contains(&format!("message {i}.{bit}")),
                    "{err}"
                );
            }
        }
    }

    fn updates() -> Vec<UpdateMessage> {
        let delta = SparseVector::from_pairs(vec![(1, 0.5), (4, -0.25), (9, 2.0)]);
        let mut onebit = UpdateFilter::new(
            10,
            FilterConfig {
                compression: Compression::OneBit,
                ..FilterConfig::default()
            },
        );
        let (signs, _) = onebit.filter(&delta, &[1.0; 10], 0);
        [WireDelta::Sparse(delta), signs]
            .into_iter()
            .map(|delta| UpdateMessage {
                step: 3,
                worker: 2,
                loss: BatchLoss { sum: 1.5, count: 4 },
                stop: false,
                last: true,
                applied_through: 2,
                removal: Some(Removal { seq: 1, worker: 0 }),
                delta,
            })
            .collect()
    }

    #[test]
    fn every_flipped_bit_of_every_message_is_an_error() {
        for update in updates() {
            assert_every_flip_fails::<UpdateMessage>(&update.encode());
        }
        let stats = StatsMessage {
            step: 1,
            worker: 0,
            loss: BatchLoss { sum: 2.0, count: 3 },
            read_ms: 1.0,
            compute_ms: 2.0,
            compute_cpu_ms: Some(1.5),
            exchange_ms: 3.0,
            step_ms: 6.0,
            traffic: Traffic {
                bytes_sent: 100,
                bytes_received: 200,
                messages_sent: 1,
                messages_received: 2,
                entries_sent: 10,
                entries_held: 0,
                updates_applied: 3,
                published_unix_ms: 1e12,
                snapshot: false,
            },
            started_unix_ms: 1e12,
            last: false,
            removed: false,
            requests: mlless_store::RequestCounts {
                puts: 4,
                gets: 9,
                ..Default::default()
            },
        };
        assert_every_flip_fails::<StatsMessage>(&stats.encode());
        let replica = ReplicaMessage {
            worker: 1,
            step: 9,
            params: vec![0.5, -1.0, 2.0],
        };
        assert_every_flip_fails::<ReplicaMessage>(&replica.encode());
        let model = StoredModel {
            spec: ModelSpec::LogisticRegression {
                features: 2,
                l2: 0.0,
                init_bias: 0.0,
            },
            params: vec![0.5, -1.0, 2.0],
        };
        assert_every_flip_fails::<StoredModel>(&model.encode());
    }

    #[test]
    fn a_message_declaring_2_pow_40_bytes_is_an_error_without_allocating() {
        let mut bytes = updates()[0].encode().to_vec();
        bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let err =
            UpdateMessage::decode(&bytes, || "update of worker 2 for step 3".into()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("update of worker 2 for step 3"), "{text}");
        assert!(text.contains("truncated"), "{text}");
    }

    #[test]
    fn a_replica_declaring_2_pow_40_parameters_is_an_error_without_allocating() {
        // worker 1, step 9, then a Vec<f32> whose length varint says 2^40 over 8 bytes.
        let payload = [
            1u8, 9, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&ReplicaMessage::MAGIC);
        bytes.extend_from_slice(&mlless_data::FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&[0, 0]);
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        bytes.extend_from_slice(&payload);
        let err =
            ReplicaMessage::decode(&bytes, || "final replica of worker 1".into()).unwrap_err();
        assert!(
            matches!(
                err,
                RuntimeError::Corrupt {
                    source: mlless_data::CodecError::Malformed(_),
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn hostile_deltas_are_refused_when_decoded_or_applied() {
        // Indices travel as the first one and then the gaps less one, so they always ascend and
        // checking the last against the model bounds them all ([4000000000, 1] cannot be
        // written). A varint cut short leaves the second value without its index: refused.
        let mut update = updates().remove(0);
        update.delta = WireDelta::Sparse(SparseVector::from_pairs(vec![(1, 1.0), (7, 1.0)]));
        let mut bytes = update.encode().to_vec();
        // The indices follow the header and the fixed fields: a 2-byte string of 1, then 5.
        let at = bytes
            .windows(3)
            .rposition(|w| w == [2, 1, 5])
            .expect("the indices");
        bytes[at + 2] = 0x85;
        let crc = crc32fast::hash(&bytes[mlless_data::HEADER_LEN..]);
        bytes[16..20].copy_from_slice(&crc.to_le_bytes());
        let err = UpdateMessage::decode(&bytes, || "the update".into()).unwrap_err();
        assert!(
            matches!(
                &err,
                RuntimeError::Corrupt {
                    location,
                    source: mlless_data::CodecError::Malformed(_),
                } if location == "the update"
            ),
            "{err}"
        );
        // Indices in order but beyond the model: refused by `into_sparse`.
        assert!(updates().remove(0).delta.into_sparse(9).is_err());
        assert!(updates().remove(0).delta.into_sparse(10).is_ok());
    }

    #[test]
    fn control_messages_are_plain_json() {
        let removal: Removal = serde_json::from_str(r#"{"seq":1,"worker":3}"#).unwrap();
        assert_eq!(removal, Removal { seq: 1, worker: 3 });
        for bad in ["", "{", r#"{"seq":-1,"worker":3}"#, r#"{"seq":1}"#, "[1]"] {
            assert!(serde_json::from_str::<Removal>(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<Progress>(bad).is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<StopRequest>(r#"{"reason":"x"}"#).is_ok());
    }
}
