//! The id map of a ratings data set: which original MovieLens user and item id each dense model
//! id stands for.
//!
//! The MovieLens parser renumbers users and items `0..n` in ascending order of their original
//! ids, so the map is two ascending lists of original ids: model user `u` is original user
//! `users[u]`. `prepare` stores it beside the manifest as `ids.bin` ([`IDS_KEY`], a frame with
//! magic [`IDS_MAGIC`]), and `mlless predict` uses it to read and write original ids.
//!
//! ```
//! use mlless_data::IdMap;
//! let ids = IdMap { users: vec![7, 1007, 2007], items: vec![42, 1_000_000] };
//! let back = IdMap::decode(&ids.encode())?;
//! assert_eq!(back.user(1007), Some(1));
//! assert_eq!(back.item(43), None);
//! # Ok::<(), mlless_data::CodecError>(())
//! ```

use serde::{Deserialize, Serialize};

use crate::codec::{CodecError, decode_framed, encode_framed};

/// Key of the id map, relative to the data set prefix.
pub const IDS_KEY: &str = "ids.bin";

/// Magic of an encoded [`IdMap`].
pub const IDS_MAGIC: [u8; 4] = *b"MLLI";

/// The original ids of a ratings data set's dense user and item ids.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    /// Original user ids, strictly ascending: model user `u` is `users[u]`.
    pub users: Vec<u32>,
    /// Original item ids, strictly ascending: model item `i` is `items[i]`.
    pub items: Vec<u32>,
}

impl IdMap {
    /// The model id of original user `original`, if the data set has it.
    pub fn user(&self, original: u32) -> Option<u32> {
        self.users.binary_search(&original).ok().map(|u| u as u32)
    }

    /// The model id of original item `original`, if the data set has it.
    pub fn item(&self, original: u32) -> Option<u32> {
        self.items.binary_search(&original).ok().map(|i| i as u32)
    }

    /// The framed encoding (magic [`IDS_MAGIC`]).
    pub fn encode(&self) -> Vec<u8> {
        encode_framed(IDS_MAGIC, self)
    }

    /// Decodes and checks a framed id map: both lists strictly ascending.
    pub fn decode(bytes: &[u8]) -> Result<Self, CodecError> {
        let ids: IdMap = decode_framed(IDS_MAGIC, bytes)?;
        for (name, list) in [("user", &ids.users), ("item", &ids.items)] {
            if let Some(w) = list.windows(2).find(|w| w[0] >= w[1]) {
                return Err(CodecError::Malformed(format!(
                    "{name} ids are not strictly ascending: {} then {}",
                    w[0], w[1]
                )));
            }
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_lookup_and_corruption() {
        let ids = IdMap {
            users: vec![7, 1007, 2007],
            items: vec![0, 5, 1_000_000],
        };
        let bytes = ids.encode();
        let back = IdMap::decode(&bytes).unwrap();
        assert_eq!(back, ids);
        assert_eq!(
            (back.user(7), back.user(2007), back.user(8)),
            (Some(0), Some(2), None)
        );
        assert_eq!((back.item(1_000_000), back.item(6)), (Some(2), None));
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(IdMap::decode(&bad).is_err(), "byte {i} bit {bit}");
            }
        }
        let unsorted = IdMap {
            users: vec![3, 3],
            items: vec![],
        };
        let err = IdMap::decode(&unsorted.encode()).unwrap_err();
        assert!(
            err.to_string()
                .contains("user ids are not strictly ascending")
        );
    }
}
