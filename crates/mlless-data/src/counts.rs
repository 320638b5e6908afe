//! The rating counts of a ratings data set: how many training ratings each user and item has.
//!
//! `prepare` counts the training split (not the validation or test split) and stores the
//! counts beside the manifest as `counts.bin` ([`COUNTS_KEY`], a frame with magic
//! [`COUNTS_MAGIC`]); matrix factorisation's count-aware prior divides by them
//! ([`mlless_core::MatrixFactorization::with_prior`]).
//!
//! ```
//! use mlless_data::{RatingBatch, RatingCounts, decode_counts, encode_counts};
//! let mut counts = RatingCounts::new(2, 3);
//! let mut batch = RatingBatch::default();
//! batch.push(1, 2, 4.0);
//! batch.push(1, 0, 3.5);
//! counts.add(&batch);
//! let back = decode_counts(&encode_counts(&counts), 2, 3)?;
//! assert_eq!(back.users, [0, 2]);
//! assert_eq!(back.items, [1, 0, 1]);
//! # Ok::<(), mlless_data::CodecError>(())
//! ```

use mlless_core::RatingCounts;
use serde::{Deserialize, Serialize};

use crate::codec::{CodecError, decode_framed, encode_framed};

/// Key of the rating counts, relative to the data set prefix.
pub const COUNTS_KEY: &str = "counts.bin";

/// Magic of encoded [`RatingCounts`].
pub const COUNTS_MAGIC: [u8; 4] = *b"MLLC";

/// Where a ratings data set's [`RatingCounts`] are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CountsInfo {
    /// Key relative to the data set prefix ([`COUNTS_KEY`]).
    pub key: String,
    /// CRC-32 of the whole encoded object.
    pub crc32: u32,
}

/// The framed encoding of `counts` (magic [`COUNTS_MAGIC`]).
pub fn encode_counts(counts: &RatingCounts) -> Vec<u8> {
    encode_framed(COUNTS_MAGIC, counts)
}

/// Decodes framed rating counts and checks that they hold one count per user and item of a
/// data set of `users` users and `items` items.
pub fn decode_counts(bytes: &[u8], users: u32, items: u32) -> Result<RatingCounts, CodecError> {
    let counts: RatingCounts = decode_framed(COUNTS_MAGIC, bytes)?;
    if counts.users.len() != users as usize || counts.items.len() != items as usize {
        return Err(CodecError::Malformed(format!(
            "counts for {} users and {} items, the data set has {users} and {items}",
            counts.users.len(),
            counts.items.len()
        )));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_of_another_shape_or_a_damaged_frame_are_refused() {
        let counts = RatingCounts {
            users: vec![1, 2],
            items: vec![3],
        };
        let bytes = encode_counts(&counts);
        assert_eq!(decode_counts(&bytes, 2, 1).unwrap(), counts);
        assert!(matches!(
            decode_counts(&bytes, 3, 1),
            Err(CodecError::Malformed(m)) if m.contains("3 and 1")
        ));
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        assert!(decode_counts(&damaged, 2, 1).is_err());
        assert!(decode_counts(&bytes[..bytes.len() - 1], 2, 1).is_err());
    }
}
