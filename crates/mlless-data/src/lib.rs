//! Data formats of mlless: input parsers, synthetic generators, the minibatch codec, the dataset
//! manifest, and the pure building blocks of `mlless prepare`.
//!
//! Everything here is synchronous and touches only local files; the runtime moves objects to
//! and from the object store.
//!
//! * [`parse`]: LIBSVM, CSV, MovieLens and Criteo input into [`Parsed`] samples.
//! * [`external_shuffle`]: the shuffle of `prepare` in bounded memory, through temporary files.
//! * [`prepare`]: shuffle, train/test split, minibatches, min-max normalisation (map-reduce).
//! * [`codec`]: framed, checksummed binary objects ([`encode_batch`], [`decode_batch`]).
//! * [`manifest`]: the JSON description of a prepared dataset ([`Manifest`]).
//! * [`generate`]: synthetic data with known ground truth: sparse and dense LR, Criteo-shaped
//!   click data, rings, blobs, ratings.
//!
//! ```
//! use std::path::Path;
//! use mlless_data::{
//!     InputFormat, ParseOptions, Parsed, decode_batch, encode_batch, into_batches, parse_reader,
//!     shuffle_split,
//! };
//!
//! let text = "+1 1:0.5 3:1\n-1 2:1\n+1 1:1\n-1 3:0.5\n";
//! let parsed = parse_reader(
//!     text.as_bytes(),
//!     Path::new("toy.libsvm"),
//!     InputFormat::Libsvm,
//!     &ParseOptions::default(),
//! )?;
//! let Parsed::Sparse { features, label_map, .. } = &parsed else { unreachable!() };
//! assert_eq!(*features, 3);
//! assert_eq!(label_map.unwrap().negative, -1.0); // -1 became 0, +1 became 1
//!
//! let (train, test) = shuffle_split(parsed, 0.25, 42)?;
//! assert_eq!((train.samples(), test.samples()), (3, 1));
//! for batch in into_batches(&train, 2)? {
//!     let bytes = encode_batch(&batch);
//!     assert_eq!(decode_batch(&bytes)?, batch);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// The batch types this crate reads and writes, from `mlless-core`.
pub use mlless_core::{Batch, RatingBatch, RatingCounts, SparseBatch};

pub mod codec;
pub mod counts;
pub mod external_shuffle;
pub mod generate;
pub mod ids;
pub mod manifest;
pub mod parse;
pub mod prepare;

pub use codec::{
    BATCH_MAGIC, CodecError, FORMAT_VERSION, HEADER_LEN, check_batch, check_batch_fits,
    decode_batch, decode_batch_checked, decode_framed, decode_framed_prefix, encode_batch,
    encode_framed,
};
pub use counts::{COUNTS_KEY, COUNTS_MAGIC, CountsInfo, decode_counts, encode_counts};
pub use generate::{
    BlobsSpec, BlobsTruth, CategoricalColumn, CriteoSpec, CriteoTruth, DenseLrSpec, DenseLrTruth,
    FeatureValues, IntegerColumn, RatingsSpec, RatingsTruth, RingsSpec, RingsTruth, SparseLrSpec,
    SparseLrTruth, criteo_truth, sparse_lr_truth, write_blobs, write_criteo, write_dense_lr,
    write_ratings, write_rings, write_sparse_lr,
};
pub use ids::{IDS_KEY, IDS_MAGIC, IdMap};
pub use manifest::{
    BatchInfo, CsvDialect, CsvHeader, DatasetKind, IdsInfo, InputSchema, LabelAt, LabelMap,
    LabelRange, MANIFEST_KEY, MANIFEST_VERSION, Manifest, ManifestError, Normalization, SourceInfo,
    SplitInfo, batch_key,
};
pub use parse::{
    Compression, CsvOptions, InputFormat, InputLayout, LabelColumn, LineRange, ParseError,
    ParseOptions, Parsed, RangeSchema, RowSink, STDIN_NAME, STDIN_PATH, ScoringInput,
    ScoringLayout, ScoringRows, SparseSchema, UnknownFormat, decompressed, input_name,
    merge_ranges, open_input, parse_delimiter, parse_file, parse_files, parse_files_with_layout,
    parse_reader, parse_readers_with_layout, read_for_scoring, read_reader_for_scoring,
    stream_range, stream_sparse,
};
pub use prepare::{
    FeatureRange, PrepareError, batches, into_batches, shuffle, shuffle_split, split_point,
    split_tail,
};
