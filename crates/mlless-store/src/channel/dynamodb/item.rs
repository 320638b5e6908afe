//! The channel's items: sort keys, heads (inline payloads or chunk manifests), chunks, and
//! their sizes as DynamoDB bills them.

use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::client::DynamoDbError;
use crate::channel::WorkerId;

/// The partition key: the job id.
pub(super) const PK: &str = "pk";
/// The sort key: what the item is (see the module docs).
pub(super) const SK: &str = "sk";
/// An inline payload, or a chunk's bytes (binary).
const VALUE: &str = "v";
/// A manifest's chunk count.
const CHUNKS: &str = "chunks";
/// A manifest's total length in bytes.
const LEN: &str = "len";
/// A manifest's CRC-32 of the whole payload.
const CRC: &str = "crc";
/// A manifest's nonce, which names its chunks.
const NONCE: &str = "nonce";
/// Expiry, Unix seconds (the table's TTL attribute).
pub(super) const TTL: &str = "ttl";

/// The largest value one item carries: 300,000 bytes. DynamoDB's item limit is 400 KB
/// (attribute names and values together, a binary value by its bytes); moto's DynamoDB counts a
/// binary value by its base64 text instead (4/3 as long) against a limit of 405,000, so a chunk
/// sized for both is 300,000 bytes (400,000 in base64), leaving 5,000 for the keys (a job id of
/// at most 256 bytes, a sort key of at most 1,024) and the other attributes. On DynamoDB this
/// costs more items per large message than the limit would allow (7 rather than 6 for 2 MB),
/// not more request units, which count kilobytes.
pub(super) const CHUNK_SIZE: usize = 300_000;

/// The largest payload a manifest may announce (what a reader will allocate for): 4 GiB.
const MAX_LEN: u64 = 1 << 32;

/// The sort key of worker `worker`'s message of `step` on `topic`.
pub(super) fn message_sk(topic: &str, step: u64, worker: WorkerId) -> String {
    format!("{}{worker:010}", step_prefix(topic, step))
}

/// The prefix of the sort keys of a step's messages (`begins_with` of the step's `Query`). The
/// step and worker are zero-padded, so a prefix never matches another step's keys.
pub(super) fn step_prefix(topic: &str, step: u64) -> String {
    format!("m#{topic}#{step:020}#")
}

/// The worker whose message has sort key `sk` under `prefix`, if it is one.
pub(super) fn worker_of(sk: &str, prefix: &str) -> Option<WorkerId> {
    let rest = sk.strip_prefix(prefix)?;
    (rest.len() == 10).then(|| rest.parse().ok()).flatten()
}

/// The sort key of key `key`.
pub(super) fn key_sk(key: &str) -> String {
    format!("k#{key}")
}

/// The sort key of chunk `index` of the value whose manifest has `nonce`.
pub(super) fn chunk_sk(nonce: &str, index: u32) -> String {
    format!("c#{nonce}#{index:06}")
}

/// Whether `sk` is a chunk's sort key.
pub(super) fn is_chunk(sk: &str) -> bool {
    sk.starts_with("c#")
}

/// A string attribute value.
pub(super) fn s(text: &str) -> Value {
    json!({ "S": text })
}

/// A number attribute value.
pub(super) fn n(number: u64) -> Value {
    json!({ "N": number.to_string() })
}

/// A binary attribute value.
fn b(bytes: &[u8]) -> Value {
    json!({ "B": base64::engine::general_purpose::STANDARD.encode(bytes) })
}

/// The primary key of item `sk` of job `pk`.
pub(super) fn key(pk: &str, sk: &str) -> Value {
    json!({ PK: s(pk), SK: s(sk) })
}

/// The string attribute `name` of `item`.
pub(super) fn get_s<'a>(item: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    item.get(name)?.get("S")?.as_str()
}

fn get_n(item: &Map<String, Value>, name: &str) -> Option<u64> {
    item.get(name)?.get("N")?.as_str()?.parse().ok()
}

fn get_b(item: &Map<String, Value>, name: &str) -> Result<Option<Bytes>, DynamoDbError> {
    let Some(text) = item
        .get(name)
        .and_then(|v| v.get("B"))
        .and_then(Value::as_str)
    else {
        return Ok(None);
    };
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map(|bytes| Some(Bytes::from(bytes)))
        .map_err(|e| DynamoDbError::Response(format!("attribute {name} is not base64: {e}")))
}

/// An item of job `pk` at `sk` carrying `value` (inline payload or chunk), expiring at `ttl`.
pub(super) fn value_item(pk: &str, sk: &str, value: &[u8], ttl: u64) -> Value {
    json!({ PK: s(pk), SK: s(sk), VALUE: b(value), TTL: n(ttl) })
}

/// The item's size as DynamoDB counts it for the item limit and for request units: the UTF-8
/// length of every attribute name plus its value's (strings: their UTF-8 bytes; binaries: their
/// decoded bytes; numbers: about one byte per two significant digits, plus one).
pub(super) fn item_size(item: &Map<String, Value>) -> usize {
    item.iter()
        .map(|(name, value)| {
            let size = if let Some(text) = value.get("S").and_then(Value::as_str) {
                text.len()
            } else if let Some(text) = value.get("B").and_then(Value::as_str) {
                let padding = text.bytes().rev().take_while(|&c| c == b'=').count();
                (text.len() / 4 * 3).saturating_sub(padding)
            } else if let Some(text) = value.get("N").and_then(Value::as_str) {
                text.trim_start_matches(['-', '0']).len().div_ceil(2) + 1
            } else {
                value.to_string().len()
            };
            name.len() + size
        })
        .sum()
}

/// The size of an item in a JSON `Value` (0 if it is no map).
pub(super) fn value_size(item: &Value) -> usize {
    item.as_object().map_or(0, item_size)
}

/// A chunked value's manifest: its chunks are items `chunk_sk(nonce, 0..count)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Manifest {
    /// Random, so two writers of one name never mix their chunks.
    pub(super) nonce: String,
    /// How many chunks.
    pub(super) count: u32,
    /// The payload's length.
    pub(super) len: u64,
    /// The payload's CRC-32.
    pub(super) crc: u32,
}

impl Manifest {
    /// The manifest of `payload` cut into [`CHUNK_SIZE`] chunks under `nonce`.
    pub(super) fn of(payload: &[u8], nonce: String) -> Manifest {
        Manifest {
            nonce,
            count: u32::try_from(payload.len().div_ceil(CHUNK_SIZE)).unwrap_or(u32::MAX),
            len: payload.len() as u64,
            crc: crc32fast::hash(payload),
        }
    }

    /// The sort keys of its chunks, in order.
    pub(super) fn chunk_sks(&self) -> Vec<String> {
        (0..self.count).map(|i| chunk_sk(&self.nonce, i)).collect()
    }

    /// The head item naming the chunks, of job `pk` at `sk`.
    pub(super) fn item(&self, pk: &str, sk: &str, ttl: u64) -> Value {
        json!({
            PK: s(pk),
            SK: s(sk),
            NONCE: s(&self.nonce),
            CHUNKS: n(u64::from(self.count)),
            LEN: n(self.len),
            CRC: n(u64::from(self.crc)),
            TTL: n(ttl),
        })
    }

    /// The payload from its chunks in order, checked against the length and checksum.
    pub(super) fn assemble(&self, chunks: Vec<Bytes>) -> Result<Bytes, DynamoDbError> {
        let mut payload = Vec::with_capacity(usize::try_from(self.len).unwrap_or(0));
        for chunk in chunks {
            payload.extend_from_slice(&chunk);
        }
        if payload.len() as u64 != self.len || crc32fast::hash(&payload) != self.crc {
            return Err(DynamoDbError::Corrupt(format!(
                "the {} chunks of value {} hold {} bytes that do not match its manifest ({} \
                 bytes, CRC-32 {:08x})",
                self.count,
                self.nonce,
                payload.len(),
                self.len,
                self.crc
            )));
        }
        Ok(Bytes::from(payload))
    }
}

/// What a message or key item holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Head {
    /// The payload itself.
    Inline(Bytes),
    /// A manifest of chunks.
    Chunked(Manifest),
}

impl Head {
    /// Reads a head item, checking a manifest (its count must be that of its length, so a
    /// tampered item cannot make a reader allocate or fetch without bound).
    pub(super) fn decode(item: &Map<String, Value>) -> Result<Head, DynamoDbError> {
        let sk = get_s(item, SK).unwrap_or_default();
        if let Some(value) = get_b(item, VALUE)? {
            return Ok(Head::Inline(value));
        }
        let corrupt = |what: &str| DynamoDbError::Corrupt(format!("item {sk}: {what}"));
        let nonce = get_s(item, NONCE).ok_or_else(|| corrupt("neither a value nor a manifest"))?;
        let count = get_n(item, CHUNKS).ok_or_else(|| corrupt("manifest without a count"))?;
        let len = get_n(item, LEN).ok_or_else(|| corrupt("manifest without a length"))?;
        let crc = get_n(item, CRC).ok_or_else(|| corrupt("manifest without a checksum"))?;
        if len > MAX_LEN || count != len.div_ceil(CHUNK_SIZE as u64) || count == 0 {
            return Err(corrupt(&format!(
                "manifest of {count} chunks for {len} bytes (chunks of {CHUNK_SIZE} bytes, at \
                 most {MAX_LEN} bytes)"
            )));
        }
        let valid_nonce = nonce.len() == 16 && nonce.chars().all(|c| c.is_ascii_hexdigit());
        if !valid_nonce {
            return Err(corrupt("manifest with an invalid nonce"));
        }
        Ok(Head::Chunked(Manifest {
            nonce: nonce.to_string(),
            count: u32::try_from(count).map_err(|_| corrupt("too many chunks"))?,
            len,
            crc: u32::try_from(crc).map_err(|_| corrupt("checksum out of range"))?,
        }))
    }
}

/// A chunk item's bytes.
pub(super) fn chunk_bytes(item: &Map<String, Value>) -> Result<Bytes, DynamoDbError> {
    get_b(item, VALUE)?.ok_or_else(|| {
        DynamoDbError::Corrupt(format!(
            "chunk {} has no value",
            get_s(item, SK).unwrap_or_default()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn sort_keys_of_a_step_share_a_prefix_no_other_step_has() {
        let prefix = step_prefix("updates", 3);
        assert_eq!(worker_of(&message_sk("updates", 3, 7), &prefix), Some(7));
        assert!(!message_sk("updates", 30, 7).starts_with(&prefix));
        assert!(!message_sk("updates2", 3, 7).starts_with(&prefix));
        assert_eq!(worker_of("m#updates#x", &prefix), None);
        assert!(is_chunk(&chunk_sk("00000000000000ff", 2)));
        assert!(!is_chunk(&key_sk("c")));
    }

    #[test]
    fn heads_round_trip_and_bad_manifests_are_refused() {
        let inline = map(value_item("j", "k#a", b"hello", 9));
        assert_eq!(
            Head::decode(&inline).ok(),
            Some(Head::Inline(Bytes::from_static(b"hello")))
        );
        let payload = vec![7u8; CHUNK_SIZE * 2 + 1];
        let manifest = Manifest::of(&payload, "0123456789abcdef".into());
        assert_eq!(manifest.count, 3);
        let head = map(manifest.item("j", "m#t#1#2", 9));
        assert_eq!(
            Head::decode(&head).ok(),
            Some(Head::Chunked(manifest.clone()))
        );
        let chunks: Vec<Bytes> = payload
            .chunks(CHUNK_SIZE)
            .map(Bytes::copy_from_slice)
            .collect();
        assert_eq!(
            manifest.assemble(chunks.clone()).ok(),
            Some(Bytes::from(payload))
        );
        assert!(manifest.assemble(chunks[..2].to_vec()).is_err());
        let mut lying = head.clone();
        lying.insert(CHUNKS.into(), n(1_000_000));
        assert!(Head::decode(&lying).is_err());
        let mut huge = head;
        huge.insert(LEN.into(), n(u64::MAX));
        assert!(Head::decode(&huge).is_err());
    }

    #[test]
    fn sizes_count_names_and_values() {
        let item = map(value_item("job", "k#a", &[0u8; 3000], 1_700_000_000));
        // pk 2+3, sk 2+3, v 1+3000, ttl 3+6.
        assert_eq!(item_size(&item), 5 + 5 + 3001 + 9);
        let full = map(value_item(
            "job",
            "c#x",
            &vec![0u8; CHUNK_SIZE],
            1_700_000_000,
        ));
        assert!(item_size(&full) <= 400 * 1024);
    }
}
