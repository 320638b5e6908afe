//! Framed binary objects: every object mlless stores or sends (minibatches, models, updates).
//!
//! A frame is a fixed 20-byte header followed by a [postcard] payload:
//!
//! | bytes  | field                                           |
//! |--------|-------------------------------------------------|
//! | 0..4   | magic, naming the kind of object (`MLLB`, ...)  |
//! | 4..6   | format version, `u16` LE ([`FORMAT_VERSION`])   |
//! | 6..8   | reserved, written as 0 and checked to be 0      |
//! | 8..16  | payload length in bytes, `u64` LE               |
//! | 16..20 | CRC-32 (IEEE) of the payload, `u32` LE          |
//! | 20..   | postcard payload                                |
//!
//! Decoding checks the header before it allocates anything, so a corrupt or hostile frame (a
//! flipped bit, a truncated upload, a length of 2^40) is a [`CodecError`], never a panic or a
//! huge allocation. [`decode_batch`] also checks that the arrays of a [`Batch`] agree with each
//! other, and [`decode_batch_checked`] that its ids fit the dataset, so a model indexing its
//! parameters with them cannot go out of bounds.

use mlless_core::{Batch, RatingBatch, SparseBatch};
use serde::{Serialize, de::DeserializeOwned};

use crate::manifest::DatasetKind;

/// Version of the frame layout written by [`encode_framed`] and accepted by [`decode_framed`].
pub const FORMAT_VERSION: u16 = 1;

/// Length of the frame header in bytes.
pub const HEADER_LEN: usize = 20;

/// Magic of an encoded minibatch ([`encode_batch`]).
pub const BATCH_MAGIC: [u8; 4] = *b"MLLB";

/// Why bytes are not a valid frame, or not a valid minibatch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// Fewer bytes than the header, or than the header says the payload holds.
    #[error("truncated object: {found} bytes, expected {expected}")]
    Truncated {
        /// Bytes needed (header, or header plus declared payload).
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The magic names another kind of object.
    #[error("bad magic {found:?}, expected {expected:?}", found = Magic(*found), expected = Magic(*expected))]
    BadMagic {
        /// The magic the caller asked for.
        expected: [u8; 4],
        /// The magic in the frame.
        found: [u8; 4],
    },
    /// The frame was written by a format version this build does not read.
    #[error("unsupported format version {0} (this build reads version {FORMAT_VERSION})")]
    UnsupportedVersion(u16),
    /// The reserved header bytes are not 0.
    #[error("reserved header bytes are {0:#06x}, not 0")]
    Reserved(u16),
    /// More bytes follow the payload than the header declares.
    #[error("length mismatch: header declares a {declared}-byte payload, {actual} bytes follow")]
    LengthMismatch {
        /// Payload length in the header.
        declared: u64,
        /// Bytes after the header.
        actual: u64,
    },
    /// The payload does not match its checksum.
    #[error("checksum mismatch: header says {expected:#010x}, payload has {actual:#010x}")]
    ChecksumMismatch {
        /// CRC-32 in the header.
        expected: u32,
        /// CRC-32 of the payload as read.
        actual: u32,
    },
    /// The payload passed its checksum but is not a valid encoding of the expected type.
    #[error("malformed payload: {0}")]
    Malformed(String),
    /// A decoded batch whose arrays disagree, or whose ids do not fit the dataset.
    #[error("inconsistent batch: {0}")]
    InconsistentBatch(String),
}

/// Shows a magic as text when it is printable ASCII, else as bytes.
struct Magic([u8; 4]);

impl std::fmt::Debug for Magic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.iter().all(|b| b.is_ascii_graphic()) {
            write!(f, "\"{}\"", self.0.escape_ascii())
        } else {
            write!(f, "{:02x?}", self.0)
        }
    }
}

/// Encodes `value` as a frame with the given magic.
///
/// # Panics
/// Panics if `value` cannot be serialised by postcard, which only happens for types whose
/// `Serialize` implementation fails or emits sequences of unknown length: a programming error,
/// never a property of the data.
pub fn encode_framed<T: Serialize>(magic: [u8; 4], value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&magic);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&[0; 12]); // length and checksum, filled in below
    let mut out = postcard::to_extend(value, out)
        .unwrap_or_else(|e| panic!("encode_framed: cannot serialise value: {e}"));
    let payload_len = (out.len() - HEADER_LEN) as u64;
    let crc = crc32fast::hash(&out[HEADER_LEN..]);
    out[8..16].copy_from_slice(&payload_len.to_le_bytes());
    out[16..20].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a frame written by [`encode_framed`] with the same magic.
///
/// Checks, in order and before allocating: length of the header, magic, version, reserved
/// bytes, declared payload length against the bytes present, checksum; then decodes the payload, which must be
/// consumed exactly.
pub fn decode_framed<T: DeserializeOwned>(magic: [u8; 4], bytes: &[u8]) -> Result<T, CodecError> {
    let payload = check_frame(magic, bytes)?;
    let (value, rest) =
        postcard::take_from_bytes(payload).map_err(|e| CodecError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CodecError::Malformed(format!(
            "{} bytes left over after the value",
            rest.len()
        )));
    }
    Ok(value)
}

/// Checks a whole frame as [`decode_framed`] does (header, length, checksum), then decodes
/// only the value that opens its payload and ignores what follows: the header of an object
/// whose rest only its owner decodes (a checkpoint's stamp before the role's state).
pub fn decode_framed_prefix<T: DeserializeOwned>(
    magic: [u8; 4],
    bytes: &[u8],
) -> Result<T, CodecError> {
    let payload = check_frame(magic, bytes)?;
    let (value, _rest) =
        postcard::take_from_bytes(payload).map_err(|e| CodecError::Malformed(e.to_string()))?;
    Ok(value)
}

/// The payload of a frame, once its header, declared length and checksum are checked.
fn check_frame(magic: [u8; 4], bytes: &[u8]) -> Result<&[u8], CodecError> {
    if bytes.len() < HEADER_LEN {
        return Err(CodecError::Truncated {
            expected: HEADER_LEN as u64,
            found: bytes.len() as u64,
        });
    }
    let found: [u8; 4] = bytes[0..4].try_into().expect("4 bytes");
    if found != magic {
        return Err(CodecError::BadMagic {
            expected: magic,
            found,
        });
    }
    let version = u16::from_le_bytes(bytes[4..6].try_into().expect("2 bytes"));
    if version != FORMAT_VERSION {
        return Err(CodecError::UnsupportedVersion(version));
    }
    let reserved = u16::from_le_bytes(bytes[6..8].try_into().expect("2 bytes"));
    if reserved != 0 {
        return Err(CodecError::Reserved(reserved));
    }
    let declared = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let expected_crc = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    let payload = &bytes[HEADER_LEN..];
    let actual = payload.len() as u64;
    if declared > actual {
        return Err(CodecError::Truncated {
            expected: (HEADER_LEN as u64).saturating_add(declared),
            found: bytes.len() as u64,
        });
    }
    if declared < actual {
        return Err(CodecError::LengthMismatch { declared, actual });
    }
    let actual_crc = crc32fast::hash(payload);
    if actual_crc != expected_crc {
        return Err(CodecError::ChecksumMismatch {
            expected: expected_crc,
            actual: actual_crc,
        });
    }
    Ok(payload)
}

/// Encodes a minibatch (magic [`BATCH_MAGIC`]).
pub fn encode_batch(batch: &Batch) -> Vec<u8> {
    encode_framed(BATCH_MAGIC, batch)
}

/// Decodes a minibatch and checks its structure with [`check_batch`].
pub fn decode_batch(bytes: &[u8]) -> Result<Batch, CodecError> {
    let batch: Batch = decode_framed(BATCH_MAGIC, bytes)?;
    check_batch(&batch)?;
    Ok(batch)
}

/// Decodes a minibatch, checks its structure, and checks that its ids fit `kind`
/// ([`check_batch_fits`]): the decoder to use before a model touches the batch.
pub fn decode_batch_checked(bytes: &[u8], kind: &DatasetKind) -> Result<Batch, CodecError> {
    let batch = decode_batch(bytes)?;
    check_batch_fits(&batch, kind)?;
    Ok(batch)
}

fn inconsistent(message: String) -> CodecError {
    CodecError::InconsistentBatch(message)
}

/// Checks that the arrays of a batch agree with each other.
///
/// Sparse: `offsets` has `rows + 1` entries, starts at 0, never decreases and ends at
/// `indices.len()`; `indices` and `values` have the same length; indices ascend strictly within
/// each row; labels and values are finite. Ratings: the three arrays have the same length and
/// ratings are finite.
pub fn check_batch(batch: &Batch) -> Result<(), CodecError> {
    match batch {
        Batch::Sparse(b) => check_sparse(b),
        Batch::Ratings(b) => check_ratings(b),
    }
}

fn check_sparse(b: &SparseBatch) -> Result<(), CodecError> {
    let rows = b.labels.len();
    if b.offsets.len() != rows + 1 {
        return Err(inconsistent(format!(
            "{} offsets for {rows} rows (expected {})",
            b.offsets.len(),
            rows + 1
        )));
    }
    if b.offsets[0] != 0 {
        return Err(inconsistent(format!(
            "offsets start at {}, not 0",
            b.offsets[0]
        )));
    }
    if b.indices.len() != b.values.len() {
        return Err(inconsistent(format!(
            "{} indices but {} values",
            b.indices.len(),
            b.values.len()
        )));
    }
    let last = *b.offsets.last().expect("rows + 1 >= 1 offsets") as usize;
    if last != b.indices.len() {
        return Err(inconsistent(format!(
            "offsets end at {last} but there are {} indices",
            b.indices.len()
        )));
    }
    for (r, pair) in b.offsets.windows(2).enumerate() {
        let (start, end) = (pair[0] as usize, pair[1] as usize);
        if end < start {
            return Err(inconsistent(format!(
                "offsets decrease at row {r} ({start} then {end})"
            )));
        }
        // Every later offset is at least `start` and the last one is `indices.len()`, so once
        // offsets are checked to be non-decreasing up to here `end <= indices.len()` holds.
        if end > b.indices.len() {
            return Err(inconsistent(format!(
                "row {r} ends at {end}, past the {} indices",
                b.indices.len()
            )));
        }
        let row = &b.indices[start..end];
        if let Some(k) = row.windows(2).position(|w| w[1] <= w[0]) {
            return Err(inconsistent(format!(
                "indices of row {r} do not ascend ({} then {})",
                row[k],
                row[k + 1]
            )));
        }
    }
    if let Some(r) = b.labels.iter().position(|l| !l.is_finite()) {
        return Err(inconsistent(format!("label of row {r} is not finite")));
    }
    if let Some(k) = b.values.iter().position(|v| !v.is_finite()) {
        return Err(inconsistent(format!("value {k} is not finite")));
    }
    Ok(())
}

fn check_ratings(b: &RatingBatch) -> Result<(), CodecError> {
    if b.users.len() != b.ratings.len() || b.items.len() != b.ratings.len() {
        return Err(inconsistent(format!(
            "{} users, {} items and {} ratings",
            b.users.len(),
            b.items.len(),
            b.ratings.len()
        )));
    }
    if let Some(k) = b.ratings.iter().position(|r| !r.is_finite()) {
        return Err(inconsistent(format!("rating {k} is not finite")));
    }
    Ok(())
}

/// Checks that a structurally valid batch (see [`check_batch`]) fits a dataset: the batch is of
/// the dataset's kind, feature indices are below `features`, user and item ids below `users` and
/// `items`.
pub fn check_batch_fits(batch: &Batch, kind: &DatasetKind) -> Result<(), CodecError> {
    match (batch, kind) {
        (Batch::Sparse(b), DatasetKind::Sparse { features }) => match b.indices.iter().max() {
            Some(&max) if max >= *features => Err(inconsistent(format!(
                "feature {max}, the dataset has {features} features"
            ))),
            _ => Ok(()),
        },
        (Batch::Ratings(b), DatasetKind::Ratings { users, items, .. }) => {
            if let Some(&u) = b.users.iter().find(|&&u| u >= *users) {
                return Err(inconsistent(format!(
                    "user {u}, the dataset has {users} users"
                )));
            }
            if let Some(&i) = b.items.iter().find(|&&i| i >= *items) {
                return Err(inconsistent(format!(
                    "item {i}, the dataset has {items} items"
                )));
            }
            Ok(())
        }
        (Batch::Sparse(_), DatasetKind::Ratings { .. }) => {
            Err(inconsistent("sparse rows in a ratings dataset".to_string()))
        }
        (Batch::Ratings(_), DatasetKind::Sparse { .. }) => {
            Err(inconsistent("ratings in a sparse dataset".to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sparse_batch() -> Batch {
        let mut b = SparseBatch::new();
        b.push_row(1.0, &[0, 3, 7], &[0.5, 1.0, -2.0]);
        b.push_row(0.0, &[], &[]);
        b.push_row(0.0, &[2], &[4.0]);
        Batch::Sparse(b)
    }

    fn ratings_batch() -> Batch {
        let mut b = RatingBatch::default();
        b.push(0, 1, 4.5);
        b.push(2, 0, 1.0);
        Batch::Ratings(b)
    }

    /// Re-frames a batch without the structural check, as a hostile writer would.
    fn frame_raw(batch: &Batch) -> Vec<u8> {
        encode_framed(BATCH_MAGIC, batch)
    }

    /// A well-formed frame of this version, with a valid checksum, around any `payload`.
    fn frame_payload(magic: [u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&magic);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&0u16.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        bytes.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    #[test]
    fn round_trips_both_kinds() {
        for batch in [
            sparse_batch(),
            ratings_batch(),
            Batch::Sparse(SparseBatch::new()),
        ] {
            let bytes = encode_batch(&batch);
            assert_eq!(&bytes[0..4], b"MLLB");
            assert_eq!(
                bytes.len() - HEADER_LEN,
                u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize
            );
            assert_eq!(decode_batch(&bytes).unwrap(), batch);
        }
    }

    #[test]
    fn generic_frames_round_trip() {
        let value = (7u64, String::from("hello"), vec![1.5f32, -2.0]);
        let bytes = encode_framed(*b"TEST", &value);
        let back: (u64, String, Vec<f32>) = decode_framed(*b"TEST", &bytes).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn every_flipped_payload_byte_is_a_checksum_error() {
        let bytes = encode_batch(&sparse_batch());
        for i in HEADER_LEN..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(
                matches!(decode_batch(&bad), Err(CodecError::ChecksumMismatch { .. })),
                "byte {i}"
            );
        }
        // A flipped checksum byte is also a mismatch.
        let mut bad = bytes.clone();
        bad[17] ^= 1;
        assert!(matches!(
            decode_batch(&bad),
            Err(CodecError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn every_flipped_byte_anywhere_is_an_error() {
        for batch in [sparse_batch(), ratings_batch()] {
            let bytes = encode_batch(&batch);
            for i in 0..bytes.len() {
                for bit in 0..8 {
                    let mut bad = bytes.clone();
                    bad[i] ^= 1 << bit;
                    assert!(decode_batch(&bad).is_err(), "byte {i} bit {bit}");
                }
            }
        }
        let mut bad = encode_batch(&sparse_batch());
        bad[7] = 1;
        assert_eq!(decode_batch(&bad), Err(CodecError::Reserved(0x100)));
    }

    #[test]
    fn a_checksummed_payload_declaring_2_pow_40_floats_is_an_error_without_allocating() {
        // `Vec<f32>` of 2^40 elements: varint 2^40, then 4 floats. Postcard caps what it
        // reserves ahead of reading, so this fails on the missing bytes; were it to allocate
        // the declared length (4 TiB) the test would abort.
        let mut payload = Vec::new();
        let mut n = 1u64 << 40;
        while n >= 0x80 {
            payload.push((n as u8) | 0x80);
            n >>= 7;
        }
        payload.push(n as u8);
        payload.extend_from_slice(&[0; 16]);
        let bytes = frame_payload(*b"TEST", &payload);
        let err = decode_framed::<Vec<f32>>(*b"TEST", &bytes).unwrap_err();
        assert!(matches!(err, CodecError::Malformed(_)), "{err}");
        // The same inside a batch: ratings whose user array declares 2^40 ids.
        let mut payload = vec![1u8];
        payload.extend_from_slice(&bytes[HEADER_LEN..HEADER_LEN + 6]);
        assert!(matches!(
            decode_batch(&frame_payload(BATCH_MAGIC, &payload)),
            Err(CodecError::Malformed(_))
        ));
    }

    #[test]
    fn wrong_magic_and_version_are_rejected() {
        let bytes = encode_batch(&sparse_batch());
        let err = decode_framed::<Batch>(*b"MLLM", &bytes).unwrap_err();
        assert!(matches!(err, CodecError::BadMagic { found, .. } if &found == b"MLLB"));
        assert!(err.to_string().contains("\"MLLB\""), "{err}");
        let mut bad = bytes.clone();
        bad[4] = 2;
        assert_eq!(decode_batch(&bad), Err(CodecError::UnsupportedVersion(2)));
        assert!(
            decode_batch(&bad)
                .unwrap_err()
                .to_string()
                .contains("version 2")
        );
    }

    #[test]
    fn truncation_and_length_mismatch_are_rejected() {
        let bytes = encode_batch(&sparse_batch());
        for cut in [0, 3, HEADER_LEN - 1, HEADER_LEN, bytes.len() - 1] {
            assert!(
                matches!(
                    decode_batch(&bytes[..cut]),
                    Err(CodecError::Truncated { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode_batch(&longer),
            Err(CodecError::LengthMismatch { declared, actual }) if actual == declared + 1
        ));
    }

    #[test]
    fn huge_declared_length_is_an_error_not_an_allocation() {
        let mut bytes = encode_batch(&sparse_batch());
        bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(
            decode_batch(&bytes),
            Err(CodecError::Truncated { expected, .. }) if expected == (1 << 40) + HEADER_LEN as u64
        ));
        bytes[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode_batch(&bytes).is_err());
    }

    #[test]
    fn valid_checksum_over_garbage_is_malformed() {
        // Payloads that pass the checksum but are not a Batch: variant tag 9, and a sequence
        // claiming 2^31 elements with no data (which fails without allocating them).
        for payload in [&[9u8, 0, 0][..], &[0, 0x80, 0x80, 0x80, 0x80, 0x08]] {
            assert!(matches!(
                decode_batch(&frame_payload(BATCH_MAGIC, payload)),
                Err(CodecError::Malformed(_))
            ));
        }
    }

    #[test]
    fn inconsistent_sparse_batches_are_rejected() {
        let Batch::Sparse(good) = sparse_batch() else {
            unreachable!()
        };
        type Corruption = Box<dyn Fn(&mut SparseBatch)>;
        let cases: Vec<(&str, Corruption)> = vec![
            ("offsets not from 0", Box::new(|b| b.offsets[0] = 1)),
            ("decreasing offsets", Box::new(|b| b.offsets[2] = 1)),
            (
                "last offset past indices",
                Box::new(|b| *b.offsets.last_mut().unwrap() = 9),
            ),
            (
                "last offset short",
                Box::new(|b| *b.offsets.last_mut().unwrap() = 3),
            ),
            (
                "missing offset",
                Box::new(|b| {
                    b.offsets.pop();
                }),
            ),
            ("extra label", Box::new(|b| b.labels.push(1.0))),
            (
                "fewer values",
                Box::new(|b| {
                    b.values.pop();
                }),
            ),
            ("descending indices", Box::new(|b| b.indices.swap(0, 1))),
            ("repeated index", Box::new(|b| b.indices[1] = 0)),
            ("NaN value", Box::new(|b| b.values[0] = f32::NAN)),
            ("infinite label", Box::new(|b| b.labels[0] = f32::INFINITY)),
            ("no offsets at all", Box::new(|b| b.offsets.clear())),
        ];
        for (name, corrupt) in cases {
            let mut b = good.clone();
            corrupt(&mut b);
            let bytes = frame_raw(&Batch::Sparse(b));
            assert!(
                matches!(decode_batch(&bytes), Err(CodecError::InconsistentBatch(_))),
                "{name}: {:?}",
                decode_batch(&bytes)
            );
        }
    }

    #[test]
    fn inconsistent_rating_batches_are_rejected() {
        let Batch::Ratings(good) = ratings_batch() else {
            unreachable!()
        };
        let mut b = good.clone();
        b.users.push(3);
        assert!(matches!(
            decode_batch(&frame_raw(&Batch::Ratings(b))),
            Err(CodecError::InconsistentBatch(_))
        ));
        let mut b = good.clone();
        b.ratings[1] = f32::NAN;
        assert!(matches!(
            decode_batch(&frame_raw(&Batch::Ratings(b))),
            Err(CodecError::InconsistentBatch(_))
        ));
    }

    #[test]
    fn checked_decoding_bounds_ids_by_the_dataset() {
        let bytes = encode_batch(&sparse_batch());
        assert!(decode_batch_checked(&bytes, &DatasetKind::Sparse { features: 8 }).is_ok());
        let err = decode_batch_checked(&bytes, &DatasetKind::Sparse { features: 7 }).unwrap_err();
        assert!(err.to_string().contains("feature 7"), "{err}");
        let ratings = encode_batch(&ratings_batch());
        let kind = |users, items| DatasetKind::Ratings {
            users,
            items,
            mean: 3.0,
        };
        assert!(decode_batch_checked(&ratings, &kind(3, 2)).is_ok());
        assert!(decode_batch_checked(&ratings, &kind(2, 2)).is_err());
        assert!(decode_batch_checked(&ratings, &kind(3, 1)).is_err());
        assert!(decode_batch_checked(&ratings, &DatasetKind::Sparse { features: 9 }).is_err());
        assert!(decode_batch_checked(&bytes, &kind(9, 9)).is_err());
    }
}
