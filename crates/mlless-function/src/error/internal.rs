//! [`Internal`]: what failed inside mlless, not in what it was given.

/// A failure inside mlless rather than in what it was given: its temporary files, one of its
/// threads, a report between its own functions that does not add up, a file it builds.
#[derive(Debug, thiserror::Error)]
pub enum Internal {
    /// The temporary files of a shuffle could not be written or read back.
    #[error("{doing}: {error}")]
    TempFiles {
        /// What was being done, and where (`writing shuffled rows to /tmp/…`).
        doing: String,
        /// The failure. Not the error's `source()`: a split-map task's buckets go to the
        /// store, whose error it may wrap with causes the message never showed, and the CLI's
        /// one-line error adds every cause of the chain it does not see in the line.
        error: std::io::Error,
    },
    /// A thread of the preparation (the parser, the cutter) panicked or was cancelled.
    #[error("{task} failed: {source}")]
    Task {
        /// The thread (`the parser`, `cutting minibatches`).
        task: &'static str,
        /// How it ended.
        #[source]
        source: tokio::task::JoinError,
    },
    /// A part of the shuffled input held fewer rows than its count.
    #[error("the shuffled input {part} ended after {taken} of {rows} rows")]
    ShuffledInputShort {
        /// The part.
        part: usize,
        /// The rows read.
        taken: u64,
        /// The rows it should hold.
        rows: u64,
    },
    /// A split-map task reported a part of the input that does not exist.
    #[error("split-map task {task} reported part {part} of {parts}")]
    UnknownPart {
        /// The task.
        task: u32,
        /// The part it reported.
        part: u32,
        /// The input's parts.
        parts: usize,
    },
    /// The shuffle-reduce tasks wrote no minibatch of this index.
    #[error("the shuffle-reduce tasks wrote no {split} minibatch {index}")]
    MissingMinibatch {
        /// The split (`train`).
        split: &'static str,
        /// The minibatch's index.
        index: usize,
    },
    /// The shuffle-reduce tasks reported a minibatch twice, or one out of range.
    #[error("the shuffle-reduce tasks reported {split} minibatch {index} twice or out of range")]
    DuplicateMinibatch {
        /// The split (`?` if out of range).
        split: &'static str,
        /// The minibatch's index.
        index: usize,
    },
    /// A minibatch asked of a data set that has not that many.
    #[error("minibatch {index} does not exist in {data_url}")]
    NoMinibatch {
        /// The minibatch's index.
        index: usize,
        /// The data set.
        data_url: String,
    },
    /// An input format that a map task's payload names and mlless does not know.
    #[error(transparent)]
    Format(mlless_data::UnknownFormat),
    /// The safetensors file could not be built or serialised.
    #[error("{doing} the safetensors file: {source}")]
    Safetensors {
        /// `building` or `writing`.
        doing: &'static str,
        /// The library's error.
        #[source]
        source: safetensors::SafeTensorError,
    },
    /// The cloud benchmark's data could not be generated.
    #[error("cannot generate the {what} data: {source}")]
    BenchData {
        /// The data (`Criteo-shaped`).
        what: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The cloud benchmark's generated data could not be parsed.
    #[error("cannot read the {what} data: {source}")]
    BenchParse {
        /// The data.
        what: String,
        /// The parser's complaint.
        #[source]
        source: mlless_data::ParseError,
    },
    /// The cloud benchmark's async runtime could not start.
    #[error("cannot start a runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// An invariant of mlless's own code does not hold (a bug, not the caller's input).
    /// Free text: each is one fixed sentence of one place that no caller could act on
    /// differently (`parsing returned no data`, `too many minibatches`).
    #[error("{0}")]
    Invariant(&'static str),
}
