//! [`InputFormat`]: the input formats `prepare` reads, by the name `--format` takes.

use std::fmt;
use std::str::FromStr;

/// A supported input format (`--format`: with the feature `clap`, the CLI's value, named as by
/// [`InputFormat::name`], with the help of `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum InputFormat {
    /// `label index:value …` (LIBSVM; 1-based indices).
    ///
    /// Sparse or dense rows (`libsvm`).
    Libsvm,
    /// Dense numeric rows, the label in one column (--label-column: the first by default); a
    /// header row is detected (--header), fields are separated by --delimiter.
    ///
    /// CSV (`csv`; see [`CsvOptions`](super::CsvOptions)).
    Csv,
    /// MovieLens ratings: `u.data`, `ratings.dat` or `ratings.csv`.
    Movielens,
    /// Criteo display-ads TSV: label, 13 integer and 26 categorical columns.
    Criteo,
}

impl InputFormat {
    /// Every format, in the order of their names in [`InputFormat::NAMES`] (each at its
    /// [`index`](Self::index)).
    pub const ALL: [InputFormat; 4] = [Self::Libsvm, Self::Csv, Self::Movielens, Self::Criteo];

    /// Its place in [`ALL`](Self::ALL): an exhaustive match, so that a new format does not
    /// compile until it has a place here (and in `ALL`, checked by
    /// `mlless_core::assert_all_in_place!`).
    pub const fn index(self) -> usize {
        match self {
            Self::Libsvm => 0,
            Self::Csv => 1,
            Self::Movielens => 2,
            Self::Criteo => 3,
        }
    }

    /// The names accepted by `FromStr` and printed by `Display`.
    pub const NAMES: [&'static str; 4] = ["libsvm", "csv", "movielens", "criteo"];

    /// The format's name (`libsvm`, `csv`, `movielens`, `criteo`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Libsvm => "libsvm",
            Self::Csv => "csv",
            Self::Movielens => "movielens",
            Self::Criteo => "criteo",
        }
    }
}

mlless_core::assert_all_in_place!(InputFormat);

impl fmt::Display for InputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An input format name that is not one of [`InputFormat::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown input format {0:?} (expected libsvm, csv, movielens or criteo)")]
pub struct UnknownFormat(pub String);

impl FromStr for InputFormat {
    type Err = UnknownFormat;

    /// Parses a format name, ignoring ASCII case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}
