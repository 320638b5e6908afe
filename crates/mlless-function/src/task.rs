//! What a function invocation is asked to do, as plain data: the [`Payload`] every invocation
//! carries (as JSON) and the tasks of the roles that are not a training job's — the map and
//! reduce tasks of a preparation, a worker of the channel benchmark. It sits below both the
//! roles, which build payloads (the driver, the preparation, the benchmark), and the dispatch
//! that runs them (`mlless_runtime::run_function`), and imports neither.

use serde::{Deserialize, Serialize};

use crate::error::{Result, RuntimeError};
use mlless_data::LabelMap;
use mlless_job::Pattern;
use mlless_job::config::SecretUrl;
use mlless_store::CloudLatency;

/// What a function invocation is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Payload {
    /// Train as worker `worker` of the job whose spec is at `run_url`.
    Worker {
        /// Location of the job's spec.
        run_url: String,
        /// Worker id, `0..P`.
        worker: u32,
        /// Where this invocation starts.
        #[serde(flatten)]
        start: Start,
    },
    /// Supervise the job whose spec is at `run_url`.
    Supervisor {
        /// Location of the job's spec.
        run_url: String,
        /// Where this invocation starts.
        #[serde(flatten)]
        start: Start,
    },
    /// Map step of min-max normalisation: compute the feature ranges of some minibatches.
    RangeMap(RangeMapTask),
    /// Second map step of min-max normalisation: scale some minibatches.
    ScaleMap(ScaleMapTask),
    /// Map step of a distributed preparation: parse a byte range of the input into buckets.
    SplitMap(SplitMapTask),
    /// Reduce step of a distributed preparation: shuffle buckets into minibatches.
    ShuffleReduce(ShuffleReduceTask),
    /// One worker of the channel benchmark.
    ChannelBench(ChannelBenchTask),
    /// Return at once: what `mlless bench invoke` times (the invocation path alone).
    Ping,
}

impl Payload {
    /// The payload as the JSON an invocation carries.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        serde_json::to_vec(self).map_err(|source| RuntimeError::Json {
            location: "function payload".into(),
            source,
        })
    }
}

/// Where a worker's or the supervisor's invocation starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Start {
    /// 0 for the first invocation; n after n hand-offs at the lifetime limit.
    #[serde(default)]
    pub generation: u32,
    /// 0 for the role's original invocation; n for its n-th replacement after a failure (which
    /// replays the steps after its checkpoint that the others have gone past, and injects no
    /// faults).
    #[serde(default)]
    pub recovery: u32,
    /// The checkpoint to resume from (the step it is ready to run); `None`: from the start.
    #[serde(default)]
    pub resume_step: Option<u64>,
}

/// Map task: the feature ranges of some minibatches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeMapTask {
    /// The data set's location.
    pub data_url: String,
    /// Number of features.
    pub features: u32,
    /// Staged minibatches to read.
    pub keys: Vec<String>,
    /// Where to write the ranges.
    pub out_key: String,
    /// The object whose presence asks the task to stop before its next minibatch, without
    /// writing `out_key` (`mlless_prepare::STOP_KEY`; none in payloads from before it existed).
    #[serde(default)]
    pub stop_key: Option<String>,
}

/// Map task: scale some minibatches with the merged ranges and write them to their final keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleMapTask {
    /// The data set's location.
    pub data_url: String,
    /// Where the merged ranges are.
    pub range_key: String,
    /// `(staged key, final key)` pairs.
    pub items: Vec<(String, String)>,
    /// Where to write the [`BatchInfo`](mlless_data::BatchInfo)s of the written minibatches (JSON).
    pub out_key: String,
    /// The object whose presence asks the task to stop before its next minibatch, without
    /// writing `out_key` (`mlless_prepare::STOP_KEY`; none in payloads from before it existed).
    #[serde(default)]
    pub stop_key: Option<String>,
}

/// Map task of a distributed preparation: one byte range of the input, its rows dealt into
/// buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitMapTask {
    /// The data set's location (the buckets and the report go under its `staging/`).
    pub data_url: String,
    /// The store the input's part files are on.
    pub input_url: String,
    /// The input's format (`libsvm` or `criteo`).
    pub format: String,
    /// Feature-space size (`--features`).
    pub features: Option<u32>,
    /// The byte ranges whose lines this task reads, in input order.
    pub segments: Vec<InputSegment>,
    /// Seed of the shuffle.
    pub seed: u64,
    /// Number of buckets.
    pub buckets: u32,
    /// Bytes of rows held before they are written as chunks.
    pub budget: u64,
    /// This task's index, in input order.
    pub task: u32,
    /// The object whose presence asks the task to stop without writing its report.
    pub stop_key: Option<String>,
}

/// A byte range of one part file of the input: the lines that start in `start..end` of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSegment {
    /// The part's place among the input's part files (0 for an input of one file).
    pub part: u32,
    /// The part's key in the input's store.
    pub key: String,
    /// The first byte of the range.
    pub start: u64,
    /// The byte after the range.
    pub end: u64,
}

/// Reduce task of a distributed preparation: consecutive buckets shuffled and cut into
/// minibatches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShuffleReduceTask {
    /// The data set's location.
    pub data_url: String,
    /// Seed of the shuffle.
    pub seed: u64,
    /// Bytes of rows the shuffle holds in memory.
    pub budget: u64,
    /// The chunks of each of its buckets, in bucket order; a bucket's in input order.
    pub buckets: Vec<Vec<String>>,
    /// The place of its first row in the shuffled order.
    pub first_row: u64,
    /// Where the training rows end, where the validation rows end and where the test rows end
    /// (the number of rows), in the shuffled order.
    pub bounds: [u64; 3],
    /// Samples per minibatch.
    pub batch_size: u32,
    /// How labels are mapped to 0/1, if they are.
    pub label_map: Option<LabelMap>,
    /// Whether the indices as read are 1-based.
    pub one_based: bool,
    /// Written before each minibatch's key: `staging/` when the scale round follows.
    pub prefix: String,
    /// With the normalisation: the number of features, and where to write the feature ranges
    /// of its training rows.
    pub ranges: Option<(u32, String)>,
    /// Where to write its report (JSON).
    pub out_key: String,
    /// The object whose presence asks the task to stop without writing its report.
    pub stop_key: Option<String>,
}

/// One worker's part of the channel benchmark. `Debug` shows the URLs redacted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelBenchTask {
    /// Channel URL (`None`: the object store at `store_url`).
    pub channel: Option<SecretUrl>,
    /// Store of the default channel.
    pub store_url: SecretUrl,
    /// Job id that namespaces the benchmark.
    pub job_id: String,
    /// This worker.
    pub worker: u32,
    /// All workers.
    pub workers: u32,
    /// Bytes of each update.
    pub update_bytes: usize,
    /// Steps to run.
    pub steps: u64,
    /// With a pattern, the workers exchange dense model updates of `params` parameters through
    /// the training exchange (`update_bytes` is then ignored); without, raw messages of
    /// `update_bytes` bytes, all to all.
    #[serde(default)]
    pub pattern: Option<Pattern>,
    /// Parameters of each update, with a pattern.
    #[serde(default)]
    pub params: usize,
    /// A cloud's latency added to every request of the channel
    /// ([`EmulatedChannel`](mlless_store::EmulatedChannel)).
    #[serde(default)]
    pub emulate: Option<CloudLatency>,
}
