//! What `mlless prepare` is asked to do: [`PrepareOptions`], [`TestSet`], [`ValidationSet`].

use super::*;
use mlless_function::Refusal;

/// Where the test set comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum TestSet {
    /// Split this fraction of the input off, after shuffling.
    Fraction(f64),
    /// Read it from its own file, in the same format.
    Input(PathBuf),
}

/// Where the validation set comes from, if there is one.
#[derive(Debug, Clone, PartialEq)]
pub enum ValidationSet {
    /// Hold this fraction of the (shuffled) training samples out.
    Fraction(f64),
    /// Read it from its own file, in the same format.
    Input(PathBuf),
}

/// What `mlless prepare` does.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// Format of the input.
    pub format: InputFormat,
    /// The input file.
    pub input: PathBuf,
    /// Location of the data set to write.
    pub out_url: String,
    /// Samples per minibatch.
    pub batch_size: u32,
    /// Where the test set comes from.
    pub test: TestSet,
    /// Where the validation set comes from (`None`: no validation set).
    pub validation: Option<ValidationSet>,
    /// Seed of the shuffle.
    pub seed: u64,
    /// Whether to min-max normalise the features.
    pub normalize: bool,
    /// Feature-space size (required for Criteo's hashed features).
    pub features: Option<u32>,
    /// How CSV input is read: its delimiter, header and label column (the defaults for other
    /// formats).
    pub csv: mlless_data::CsvOptions,
    /// Number of map tasks of the normalisation (and of each round of a distributed
    /// preparation).
    pub map_tasks: u32,
    /// Parse and shuffle the input in function invocations, reading it from its store, rather
    /// than here (libsvm and criteo input, split by fractions).
    pub distributed: bool,
    /// Limits of each map task; the memory limit also bounds the memory of the shuffle.
    pub limits: Limits,
    /// Where the shuffle writes its temporary files when the input does not fit in memory
    /// (`None`: the system's temporary directory). A disk, not a tmpfs, for large inputs.
    pub temp_dir: Option<PathBuf>,
}

/// The range of a fraction of the input, as the refusal of one outside it says.
const BETWEEN_0_AND_1: &str = "between 0 and 1 (exclusive)";

impl PrepareOptions {
    /// The input files, in the order they are parsed: the input, then the test and the
    /// validation inputs if they are files.
    pub(super) fn input_files(&self) -> Vec<&Path> {
        let mut files = vec![self.input.as_path()];
        if let TestSet::Input(path) = &self.test {
            files.push(path);
        }
        if let Some(ValidationSet::Input(path)) = &self.validation {
            files.push(path);
        }
        files
    }

    /// Checks the options before anything is read or written, each error naming the option of
    /// `mlless prepare`: the minibatch size, the fractions, the map tasks and their limits
    /// (checked whether or not `--normalize` runs any, as `train` checks its own).
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Refusal::AtLeastOne {
                option: "--batch-size",
            }
            .into());
        }
        if let TestSet::Fraction(f) = self.test
            && !(f > 0.0 && f < 1.0)
        {
            return Err(Refusal::OutOfRange {
                option: "--test-fraction",
                range: BETWEEN_0_AND_1,
                value: f,
            }
            .into());
        }
        if let Some(ValidationSet::Fraction(f)) = self.validation
            && !(f > 0.0 && f < 1.0)
        {
            return Err(Refusal::OutOfRange {
                option: "--validation-fraction",
                range: BETWEEN_0_AND_1,
                value: f,
            }
            .into());
        }
        if self.map_tasks == 0 {
            return Err(ConfigError::MapTasks.into());
        }
        if self.format != InputFormat::Csv && self.csv != mlless_data::CsvOptions::default() {
            return Err(Refusal::CsvOptions {
                format: self.format,
            }
            .into());
        }
        let stdin = Path::new(mlless_data::STDIN_PATH);
        if self.input_files().iter().filter(|p| **p == stdin).count() > 1 {
            return Err(Refusal::StdinTwice.into());
        }
        validate_limits(&self.limits)?;
        Ok(())
    }
}
