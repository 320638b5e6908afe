//! [`InputError`]: an input or a location that is missing or cannot be listed.

/// An input of `prepare`, or a location `predict` reads, that is missing, empty or cannot be
/// listed.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// An input with nothing to read: no object and no part file below it, or a directory
    /// without part files.
    #[error("{}", empty_input_message(input, *directory))]
    Empty {
        /// The input given, as `--input` named it.
        input: String,
        /// Whether it is a local directory (else an object or a prefix of a store).
        directory: bool,
    },
    /// A local input (the `--input` given, or a file or directory below it) that could not
    /// be listed or read.
    #[error("{}{path}: {source}", if *given { "--input " } else { "" })]
    Io {
        /// The file or directory.
        path: String,
        /// Whether it is the `--input` given (else a file or directory below it).
        given: bool,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A part file of a local input directory that is not below it (a link out of it).
    #[error("--input {input}: {path} is not below {dir}")]
    NotBelow {
        /// The input given.
        input: String,
        /// The part file.
        path: String,
        /// The directory it was listed in.
        dir: String,
    },
    /// A byte range of an input object that could not be read.
    #[error("reading {location}: {error}")]
    Range {
        /// The object.
        location: String,
        /// The failure. Not the error's `source()`: it may wrap the store's error, whose own
        /// causes the message never showed, and the CLI's one-line error adds every cause of
        /// the chain it does not see in the line.
        error: std::io::Error,
    },
    /// A local directory to read that does not exist (opening it would create it).
    #[error("{url}: no such directory")]
    NoSuchDirectory {
        /// The directory.
        url: String,
    },
    /// A model with no run spec beside it to name its data set, and no `--data`.
    #[error("{model_url}: no {key} beside the model names its data set; give --data")]
    NoDataSet {
        /// The model.
        model_url: String,
        /// The run spec's key (`spec.json`).
        key: &'static str,
    },
}

/// The message of [`InputError::Empty`].
fn empty_input_message(input: &str, directory: bool) -> String {
    if directory {
        format!("--input {input} is a directory with no part files")
    } else {
        format!("--input {input}: no such object, and no part files below it")
    }
}
