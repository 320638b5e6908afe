//! The manifest of a prepared dataset: what its objects are and how to read them.
//!
//! A prepared dataset lives under a prefix: `manifest.json` ([`MANIFEST_KEY`]) and the encoded
//! minibatches it lists (`train/000000.bin`, ..., `test/000000.bin`, ...; see [`batch_key`]).
//! The manifest is written last, so a dataset without one is incomplete.

use std::collections::HashSet;

use mlless_core::LabelRule;
use serde::{Deserialize, Serialize};

/// Key of the manifest, relative to the dataset prefix.
pub const MANIFEST_KEY: &str = "manifest.json";

/// Version of the manifest layout written by this build; [`Manifest::from_json`] reads only it.
pub const MANIFEST_VERSION: u32 = 1;

/// Describes a prepared dataset: kind, sizes, minibatch objects and how the data was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Manifest layout version ([`MANIFEST_VERSION`]).
    pub format_version: u32,
    /// What the samples are, with the cardinalities a model needs.
    pub kind: DatasetKind,
    /// Samples per minibatch (the last batch of a split may hold fewer).
    pub batch_size: u32,
    /// Training minibatches.
    pub train: SplitInfo,
    /// Test minibatches (no batches if no test set was split off).
    pub test: SplitInfo,
    /// Validation minibatches, held out of the training data to watch the model's progress
    /// and stop on it (no batches if none was held out).
    #[serde(default)]
    pub validation: SplitInfo,
    /// Min-max normalisation applied to the feature values, if any.
    #[serde(default)]
    pub normalization: Option<Normalization>,
    /// How the input's labels were mapped to 0/1, if they were.
    #[serde(default)]
    pub label_map: Option<LabelMap>,
    /// Sparse data: the range of its labels (after the label map) and the input lines they
    /// were read from, which `train` checks the model's label rule against before it starts
    /// (absent from data sets prepared before it was kept, and for ratings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<LabelRange>,
    /// Where the data came from.
    pub source: SourceInfo,
    /// When the dataset was prepared, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// How the input was read, so that `mlless predict` reads new input the same way (absent
    /// from data sets prepared before it was kept).
    #[serde(default)]
    pub schema: Option<InputSchema>,
    /// Ratings: the object holding each user's and item's number of training ratings
    /// ([`RatingCounts`](crate::RatingCounts)); absent from data sets prepared before it was
    /// kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rating_counts: Option<crate::CountsInfo>,
    /// The identity of this preparation: a fresh id each time `prepare` writes the data set,
    /// which a run keeps in its spec, so that it is never resumed on another preparation of
    /// the same location (another split: its test rows may have been training rows). Absent
    /// from data sets prepared before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_id: Option<String>,
}

/// How a data set's input was read: what reading new input like it needs beyond the kind, the
/// normalisation and the label map.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InputSchema {
    /// LIBSVM: whether the feature indices were 0-based (the input had an index 0); else they
    /// were 1-based.
    #[serde(default)]
    pub zero_based: bool,
    /// CSV: columns of a row (the label and the feature columns).
    #[serde(default)]
    pub csv_columns: Option<u32>,
    /// CSV: the delimiter, the header rule and the label column it was read with (absent
    /// from data sets prepared before they were kept, and read then as the defaults: `,`,
    /// a detected header, the label first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csv: Option<CsvDialect>,
    /// Ratings: the object holding the original ids of the users and items
    /// ([`IdMap`](crate::IdMap)).
    #[serde(default)]
    pub ids: Option<IdsInfo>,
}

/// How CSV is read: what `prepare --delimiter --header --label-column` said, with the label
/// column as an index, so that `predict` reads new CSV as `prepare` read the training input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsvDialect {
    /// The byte between fields (`,` by default; one ASCII character, kept as a string).
    #[serde(default = "comma", with = "delimiter_char")]
    pub delimiter: u8,
    /// Whether the first row that is not blank is a header.
    #[serde(default)]
    pub header: CsvHeader,
    /// The label's column, from 0; the features are the other columns, in order.
    #[serde(default)]
    pub label_column: u32,
}

impl Default for CsvDialect {
    /// `,`, a detected header, the label first.
    fn default() -> Self {
        Self {
            delimiter: b',',
            header: CsvHeader::Auto,
            label_column: 0,
        }
    }
}

/// The default delimiter of [`CsvDialect`].
fn comma() -> u8 {
    b','
}

/// A delimiter byte kept as a one-character string (`";"`, `"\t"`), which is how a person
/// reading the manifest expects it.
mod delimiter_char {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(byte: &u8, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_char(char::from(*byte))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
        let text = String::deserialize(d)?;
        match text.as_bytes() {
            [byte] if byte.is_ascii() => Ok(*byte),
            _ => Err(D::Error::custom(format!(
                "a CSV delimiter is one ASCII character, not {text:?}"
            ))),
        }
    }
}

/// Whether a CSV input's first row that is not blank is a header (`--header`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CsvHeader {
    /// It is a header if some field of it is not a number (`auto`, the default).
    #[default]
    Auto,
    /// It is a header, whatever it holds (`true`).
    Present,
    /// There is no header: it is data (`false`).
    Absent,
}

impl std::fmt::Display for CsvHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Present => "true",
            Self::Absent => "false",
        })
    }
}

impl std::str::FromStr for CsvHeader {
    type Err = String;

    /// `auto`, `true` (or `yes`) and `false` (or `no`), in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "true" | "yes" => Ok(Self::Present),
            "false" | "no" => Ok(Self::Absent),
            _ => Err(format!(
                "expected true, false or auto (detect it), not {s:?}"
            )),
        }
    }
}

/// Where a ratings data set's [`IdMap`](crate::IdMap) is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdsInfo {
    /// Key relative to the data set prefix ([`IDS_KEY`](crate::IDS_KEY)).
    pub key: String,
    /// Users it maps (the data set's users).
    pub users: u32,
    /// Items it maps (the data set's items).
    pub items: u32,
    /// CRC-32 of the whole encoded object.
    pub crc32: u32,
}

/// The kind of samples in a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DatasetKind {
    /// Labelled sparse rows (batches are [`mlless_core::Batch::Sparse`]).
    Sparse {
        /// Dimension of the feature space: every index is below it.
        features: u32,
    },
    /// `(user, item, rating)` triples (batches are [`mlless_core::Batch::Ratings`]).
    Ratings {
        /// Number of users: every user id is below it.
        users: u32,
        /// Number of items: every item id is below it.
        items: u32,
        /// Mean training rating (the global bias a factorisation model starts from).
        mean: f32,
    },
}

/// The minibatches of one split.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SplitInfo {
    /// Total samples over the batches.
    pub samples: u64,
    /// The batches, in order.
    pub batches: Vec<BatchInfo>,
}

/// One minibatch object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchInfo {
    /// Key relative to the dataset prefix, e.g. `train/000017.bin`.
    pub key: String,
    /// Samples (rows or ratings) in the batch.
    pub samples: u32,
    /// CRC-32 of the whole encoded object, header included.
    pub crc32: u32,
}

/// Min-max normalisation parameters: `x' = (x - min) / (max - min)` per feature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalization {
    /// Method name; only `"minmax"` exists.
    pub method: String,
    /// Minimum of each feature over the training set.
    pub min: Vec<f32>,
    /// Maximum of each feature over the training set.
    pub max: Vec<f32>,
}

/// Which original label values became 0 and 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LabelMap {
    /// Original label mapped to 0.
    pub negative: f32,
    /// Original label mapped to 1.
    pub positive: f32,
}

/// A label value and where it was first read: the input and its 1-based line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelAt {
    /// The label, as mapped by the data set's label map.
    pub label: f32,
    /// The input file it was read from.
    pub input: String,
    /// The line of the input.
    pub line: u64,
}

/// The labels of a sparse data set over all its inputs: the smallest, the largest and the
/// first that is not an integer, each with the line it was first read from. A model's
/// [`LabelRule`] accepts every label of the set if and only if it accepts these (its accepted
/// labels are the integers of an interval, or all).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelRange {
    /// The smallest label.
    pub min: LabelAt,
    /// The largest label.
    pub max: LabelAt,
    /// The first label that is not an integer, if any.
    pub fractional: Option<LabelAt>,
}

impl LabelRange {
    /// The first label `rule` refuses (the smallest, the largest, then the first fractional
    /// one), or `None` if it accepts all of them.
    ///
    /// ```
    /// use mlless_core::LabelRule;
    /// use mlless_data::{LabelAt, LabelRange};
    /// let at = |label, line| LabelAt { label, input: "a.svm".into(), line };
    /// let range = LabelRange { min: at(0.0, 1), max: at(2.0, 17), fractional: None };
    /// assert_eq!(range.refused_by(LabelRule::Binary).map(|l| l.line), Some(17));
    /// assert!(range.refused_by(LabelRule::Classes(3)).is_none());
    /// ```
    pub fn refused_by(&self, rule: LabelRule) -> Option<&LabelAt> {
        [Some(&self.min), Some(&self.max), self.fractional.as_ref()]
            .into_iter()
            .flatten()
            .find(|at| !rule.accepts(at.label))
    }
}

/// Provenance of a dataset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    /// Input format (`libsvm`, `csv`, `movielens`, `criteo`, or a generator name).
    pub format: String,
    /// Input file or description.
    pub input: String,
    /// Seed of the shuffle and split.
    pub seed: u64,
    /// Fraction of samples split off as the test set, if one was.
    #[serde(default)]
    pub test_fraction: Option<f64>,
    /// Fraction of the training samples held out as the validation set, if one was.
    #[serde(default)]
    pub validation_fraction: Option<f64>,
}

/// Why a manifest cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Not valid JSON, or not the manifest's shape.
    #[error("manifest is not valid JSON: {0}")]
    Json(String),
    /// Written by a newer (or unknown) layout version.
    #[error(
        "unsupported manifest format version {0} (this build reads version {MANIFEST_VERSION}): \
         prepare the data set again with this build, or use the mlless that prepared it"
    )]
    UnsupportedVersion(u32),
    /// Well-formed but self-contradictory or unsafe.
    #[error("invalid manifest: {0}")]
    Invalid(String),
}

/// The key of batch `index` of `split` (`"train"`, `"validation"` or `"test"`):
/// `train/000017.bin`.
pub fn batch_key(split: &str, index: usize) -> String {
    format!("{split}/{index:06}.bin")
}

impl BatchInfo {
    /// Describes an encoded batch object: records its key, sample count and the CRC-32 of
    /// `encoded`.
    pub fn new(key: String, samples: u32, encoded: &[u8]) -> Self {
        Self {
            key,
            samples,
            crc32: crc32fast::hash(encoded),
        }
    }

    /// Whether `encoded` is the object this entry describes (same CRC-32).
    pub fn matches(&self, encoded: &[u8]) -> bool {
        crc32fast::hash(encoded) == self.crc32
    }
}

impl SplitInfo {
    /// Appends a batch and counts its samples.
    pub fn push(&mut self, batch: BatchInfo) {
        self.samples += u64::from(batch.samples);
        self.batches.push(batch);
    }
}

impl Manifest {
    /// Serialises the manifest as pretty-printed JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("a manifest always serialises");
        out.push(b'\n');
        out
    }

    /// Parses and [validates](Self::validate) a manifest.
    pub fn from_json(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        // Read the version first so that a future layout is reported as such, not as bad JSON.
        #[derive(Deserialize)]
        struct Version {
            format_version: u32,
        }
        let version: Version =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Json(e.to_string()))?;
        if version.format_version != MANIFEST_VERSION {
            return Err(ManifestError::UnsupportedVersion(version.format_version));
        }
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Json(e.to_string()))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Checks that the manifest is usable: supported version; positive batch size and
    /// cardinalities; a non-empty training split; per-split sample counts that add up, with
    /// every batch holding between 1 and `batch_size` samples; keys that are relative, unique
    /// and free of `..` components; normalisation only for sparse data, with one min and max
    /// per feature; a label map only for sparse data; a CSV label column among the columns.
    pub fn validate(&self) -> Result<(), ManifestError> {
        let invalid = |m: String| Err(ManifestError::Invalid(m));
        if self.format_version != MANIFEST_VERSION {
            return Err(ManifestError::UnsupportedVersion(self.format_version));
        }
        if self.batch_size == 0 {
            return invalid("batch_size is 0".into());
        }
        match self.kind {
            DatasetKind::Sparse { features } => {
                if features == 0 {
                    return invalid("sparse dataset with 0 features".into());
                }
                if let Some(n) = &self.normalization {
                    if n.method != "minmax" {
                        return invalid(format!("unknown normalization method {:?}", n.method));
                    }
                    if n.min.len() != features as usize || n.max.len() != features as usize {
                        return invalid(format!(
                            "normalization has {} minima and {} maxima for {features} features",
                            n.min.len(),
                            n.max.len()
                        ));
                    }
                }
            }
            DatasetKind::Ratings { users, items, mean } => {
                if users == 0 || items == 0 {
                    return invalid(format!(
                        "ratings dataset with {users} users and {items} items"
                    ));
                }
                if !mean.is_finite() {
                    return invalid("mean rating is not finite".into());
                }
                if self.normalization.is_some() {
                    return invalid("normalization on a ratings dataset".into());
                }
                if self.label_map.is_some() {
                    return invalid("label map on a ratings dataset".into());
                }
            }
        }
        if let Some(ids) = self.schema.as_ref().and_then(|s| s.ids.as_ref()) {
            let DatasetKind::Ratings { users, items, .. } = self.kind else {
                return invalid("an id map on a sparse dataset".into());
            };
            if (ids.users, ids.items) != (users, items) {
                return invalid(format!(
                    "the id map has {} users and {} items, the dataset {users} and {items}",
                    ids.users, ids.items
                ));
            }
            check_key(&ids.key)?;
        }
        if let Some(schema) = &self.schema
            && let (Some(csv), Some(columns)) = (schema.csv, schema.csv_columns)
            && csv.label_column >= columns
        {
            return invalid(format!(
                "the CSV label column {} is beyond the {columns} columns",
                csv.label_column
            ));
        }
        if let Some(counts) = &self.rating_counts {
            if !matches!(self.kind, DatasetKind::Ratings { .. }) {
                return invalid("rating counts on a sparse dataset".into());
            }
            check_key(&counts.key)?;
        }
        if self.train.batches.is_empty() {
            return invalid("no training batches".into());
        }
        let mut keys = HashSet::new();
        for (name, split) in [
            ("train", &self.train),
            ("test", &self.test),
            ("validation", &self.validation),
        ] {
            let mut total = 0u64;
            for b in &split.batches {
                check_key(&b.key)?;
                if !keys.insert(b.key.as_str()) {
                    return invalid(format!("key {:?} is listed twice", b.key));
                }
                if b.samples == 0 || b.samples > self.batch_size {
                    return invalid(format!(
                        "batch {:?} holds {} samples (batch size {})",
                        b.key, b.samples, self.batch_size
                    ));
                }
                total += u64::from(b.samples);
            }
            if total != split.samples {
                return invalid(format!(
                    "{name} split declares {} samples but its batches hold {total}",
                    split.samples
                ));
            }
        }
        Ok(())
    }
}

/// A key must be a non-empty relative path of non-empty, non-`.`/`..` components.
fn check_key(key: &str) -> Result<(), ManifestError> {
    let bad = key.is_empty()
        || key.contains('\\')
        || key.contains('\0')
        || key
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(ManifestError::Invalid(format!("unsafe batch key {key:?}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut train = SplitInfo::default();
        train.push(BatchInfo::new(batch_key("train", 0), 2, b"abc"));
        train.push(BatchInfo::new(batch_key("train", 1), 1, b"de"));
        let mut test = SplitInfo::default();
        test.push(BatchInfo::new(batch_key("test", 0), 1, b"f"));
        Manifest {
            format_version: MANIFEST_VERSION,
            dataset_id: Some("data-test".into()),
            kind: DatasetKind::Sparse { features: 3 },
            batch_size: 2,
            train,
            test,
            validation: SplitInfo::default(),
            normalization: Some(Normalization {
                method: "minmax".into(),
                min: vec![0.0, -1.0, 0.0],
                max: vec![1.0, 2.0, 0.0],
            }),
            label_map: Some(LabelMap {
                negative: -1.0,
                positive: 1.0,
            }),
            labels: None,
            source: SourceInfo {
                format: "libsvm".into(),
                input: "a.libsvm".into(),
                seed: 7,
                test_fraction: Some(0.25),
                validation_fraction: None,
            },
            created_unix_s: 1_700_000_000,
            schema: Some(InputSchema {
                zero_based: true,
                csv_columns: None,
                csv: None,
                ids: None,
            }),
            rating_counts: None,
        }
    }

    #[test]
    fn json_round_trip_and_shape() {
        let m = sample();
        let json = m.to_json();
        assert_eq!(Manifest::from_json(&json).unwrap(), m);
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(value["kind"]["type"], "sparse");
        assert_eq!(value["kind"]["features"], 3);
        assert_eq!(value["train"]["batches"][1]["key"], "train/000001.bin");
        assert_eq!(
            value["train"]["batches"][0]["crc32"],
            crc32fast::hash(b"abc")
        );

        let mut r = m.clone();
        make_ratings(&mut r, 4, crate::IDS_KEY, 9);
        let json = r.to_json();
        let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(value["kind"]["type"], "ratings");
        assert_eq!(Manifest::from_json(&json).unwrap(), r);
    }

    /// Makes `m` a data set of ratings by 4 users of 5 items, whose id map (object `key`, with
    /// checksum `crc32`) has `users` users.
    fn make_ratings(m: &mut Manifest, users: u32, key: &str, crc32: u32) {
        m.kind = DatasetKind::Ratings {
            users: 4,
            items: 5,
            mean: 3.5,
        };
        m.normalization = None;
        m.label_map = None;
        m.schema = Some(InputSchema {
            ids: Some(IdsInfo {
                key: key.into(),
                users,
                items: 5,
                crc32,
            }),
            ..InputSchema::default()
        });
    }

    #[test]
    fn batch_info_matches_its_object() {
        let info = BatchInfo::new("train/000000.bin".into(), 1, b"xyz");
        assert!(info.matches(b"xyz"));
        assert!(!info.matches(b"xyZ"));
    }

    #[test]
    fn rejects_bad_manifests() {
        let check = |f: &dyn Fn(&mut Manifest), want: &str| {
            let mut m = sample();
            f(&mut m);
            let err = Manifest::from_json(&m.to_json()).unwrap_err();
            assert!(
                err.to_string().contains(want),
                "{err} does not mention {want:?}"
            );
        };
        check(&|m| m.format_version = 2, "version 2");
        check(&|m| m.train.batches.clear(), "no training batches");
        check(&|m| m.train.samples = 4, "declares 4 samples");
        check(&|m| m.test.samples = 0, "declares 0 samples");
        check(
            &|m| m.train.batches[1].key = "../etc/passwd".into(),
            "unsafe",
        );
        check(
            &|m| m.train.batches[1].key = "train/../../x".into(),
            "unsafe",
        );
        check(&|m| m.train.batches[1].key = "/abs".into(), "unsafe");
        check(&|m| m.train.batches[1].key = String::new(), "unsafe");
        check(
            &|m| m.test.batches[0].key = "train/000000.bin".into(),
            "twice",
        );
        check(&|m| m.batch_size = 1, "holds 2 samples");
        check(
            &|m| m.kind = DatasetKind::Sparse { features: 4 },
            "3 minima",
        );
        check(
            &|m| m.normalization.as_mut().unwrap().method = "z".into(),
            "method",
        );
        let ids = |users, key: &'static str| move |m: &mut Manifest| make_ratings(m, users, key, 0);
        check(&ids(3, "ids.bin"), "the id map has 3 users");
        check(&ids(4, "../ids.bin"), "unsafe");
        check(
            &|m| {
                m.schema.as_mut().unwrap().ids = Some(IdsInfo {
                    key: "ids.bin".into(),
                    users: 1,
                    items: 1,
                    crc32: 0,
                })
            },
            "id map on a sparse",
        );
        // A manifest written before the schema was kept still reads.
        let mut old: serde_json::Value = serde_json::from_slice(&sample().to_json()).unwrap();
        old.as_object_mut().unwrap().remove("schema");
        let old = Manifest::from_json(&serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(old.schema, None);
        assert!(matches!(
            Manifest::from_json(b"{"),
            Err(ManifestError::Json(_))
        ));
        assert!(matches!(
            Manifest::from_json(br#"{"format_version": 9, "future": true}"#),
            Err(ManifestError::UnsupportedVersion(9))
        ));
    }
}
