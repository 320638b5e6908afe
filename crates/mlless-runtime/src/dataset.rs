//! A prepared data set in the object store: its manifest and its minibatches.

use mlless_core::{Batch, RatingCounts};
use mlless_data::{DatasetKind, MANIFEST_KEY, Manifest};
use mlless_store::Store;

use crate::error::{Result, RuntimeError};

/// A prepared data set, opened for reading.
#[derive(Debug, Clone)]
pub struct Dataset {
    store: Store,
    manifest: Manifest,
}

/// The parts of a data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Minibatches to train on.
    Train,
    /// Minibatches to evaluate the final model on.
    Test,
    /// Minibatches held out of training to evaluate the model on as it trains (possibly
    /// none).
    Validation,
}

impl Dataset {
    /// Opens the data set at `url`; fails if it has no manifest (never prepared, or its
    /// preparation did not finish) or the manifest is invalid.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_store(Store::open(url)?).await
    }

    /// Opens the data set at `store` (e.g. a store that counts its requests).
    pub async fn open_store(store: Store) -> Result<Self> {
        let Some(bytes) = store.get_opt(MANIFEST_KEY).await? else {
            return Err(RuntimeError::NotPrepared {
                url: store.url().to_string(),
            });
        };
        let manifest = Manifest::from_json(&bytes).map_err(|source| RuntimeError::Manifest {
            location: format!("{}/{MANIFEST_KEY}", store.url()),
            source,
        })?;
        Ok(Self { store, manifest })
    }

    /// This data set with its validation set moved into its training set (the validation
    /// minibatches after the training ones, no validation set left): what a `--refit` job
    /// trains on. The rating counts of PMF's prior stay the training set's.
    pub fn with_validation_in_training(mut self) -> Self {
        let validation = std::mem::take(&mut self.manifest.validation);
        self.manifest.train.samples += validation.samples;
        self.manifest.train.batches.extend(validation.batches);
        self
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Number of minibatches in a split.
    pub fn batches(&self, split: Split) -> usize {
        self.split(split).batches.len()
    }

    fn split(&self, split: Split) -> &mlless_data::SplitInfo {
        match split {
            Split::Train => &self.manifest.train,
            Split::Test => &self.manifest.test,
            Split::Validation => &self.manifest.validation,
        }
    }

    /// Reads minibatch `index` of a split, checking it against the manifest's checksum.
    pub async fn read_batch(&self, split: Split, index: usize) -> Result<Batch> {
        let info =
            self.split(split)
                .batches
                .get(index)
                .ok_or_else(|| crate::Internal::NoMinibatch {
                    index,
                    data_url: self.store.url().to_string(),
                })?;
        self.read_checked(&info.key, info.crc32, |bytes| {
            mlless_data::decode_batch_checked(bytes, &self.manifest.kind)
        })
        .await
    }

    /// The training ratings of each user and item, if the data set keeps them (ratings data
    /// sets prepared by this version do), checked against the manifest's checksum and shape.
    pub async fn rating_counts(&self) -> Result<Option<RatingCounts>> {
        let (Some(info), DatasetKind::Ratings { users, items, .. }) =
            (&self.manifest.rating_counts, &self.manifest.kind)
        else {
            return Ok(None);
        };
        self.read_checked(&info.key, info.crc32, |bytes| {
            mlless_data::decode_counts(bytes, *users, *items)
        })
        .await
        .map(Some)
    }

    /// Reads the object `key` of the data set, checks it against the CRC-32 the manifest gives
    /// for it, and decodes it; a mismatch or a decoding error is [`RuntimeError::Corrupt`]
    /// naming the object.
    pub(crate) async fn read_checked<T>(
        &self,
        key: &str,
        crc32: u32,
        decode: impl FnOnce(&[u8]) -> std::result::Result<T, mlless_data::CodecError>,
    ) -> Result<T> {
        let bytes = self.store.get(key).await?;
        let location = || format!("{}/{key}", self.store.url());
        let actual = crc32fast::hash(&bytes);
        if actual != crc32 {
            return Err(RuntimeError::Corrupt {
                location: location(),
                source: mlless_data::CodecError::ChecksumMismatch {
                    expected: crc32,
                    actual,
                },
            });
        }
        decode(&bytes).map_err(|source| RuntimeError::Corrupt {
            location: location(),
            source,
        })
    }

    /// Where the data set is.
    pub fn url(&self) -> &str {
        self.store.url()
    }

    /// Refuses this data set for the run at `run_url` that started on the preparation
    /// `expected` (its spec's `dataset_id`; `None`, a run older than the id: not checked), if it
    /// was prepared again since (`data_url` as the spec names it, for the error).
    pub(crate) fn check_prepared_as(
        &self,
        expected: Option<&str>,
        run_url: &str,
        data_url: &str,
    ) -> Result<()> {
        let Some(expected) = expected else {
            return Ok(());
        };
        let manifest = self.manifest();
        if manifest.dataset_id.as_deref() == Some(expected) {
            return Ok(());
        }
        Err(RuntimeError::DatasetChanged {
            run_url: mlless_store::redact_url(run_url),
            data_url: mlless_store::redact_url(data_url),
            expected: expected.to_owned(),
            found: manifest.dataset_id.as_ref().map_or_else(
                || "one without a data set id".to_owned(),
                |id| format!("data set id {id}"),
            ),
        })
    }
}
