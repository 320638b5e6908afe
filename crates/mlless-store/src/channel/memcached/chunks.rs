//! Large values: chunks under a fresh nonce, and the head (inline payload or manifest) that a
//! reader looks at; reading, checking, and deleting them.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use tracing::{debug, trace};

use super::client::{Cmd, MemcachedError, Reply, StoreOp, Value};
use super::{CLEANUP_BATCH, KEYS_PER_GET, MemcachedChannel};
use crate::channel::Result;

/// Item flags of a head that holds the payload itself.
pub(super) const FLAG_INLINE: u32 = 0;
/// Item flags of a head that holds a chunk manifest.
pub(super) const FLAG_CHUNKED: u32 = 1;
/// Most chunks written or read in one exchange.
const CHUNKS_PER_EXCHANGE: usize = 16;
/// Header of a manifest.
const MANIFEST_MAGIC: &str = "mlless-chunks v1";
/// Largest chunked value accepted, against a manifest that declares a huge length.
const MAX_CHUNKED: u64 = 1 << 32;

/// A unique name for one large value's chunks.
pub(super) fn fresh_nonce() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS's randomness once per thread, then varied.
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.finish()
}

/// The manifest of a chunked value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Manifest {
    pub(super) nonce: u64,
    pub(super) count: u32,
    pub(super) len: u64,
    pub(super) crc: u32,
}

impl Manifest {
    pub(super) fn encode(&self) -> Bytes {
        let Manifest {
            nonce,
            count,
            len,
            crc,
        } = self;
        Bytes::from(format!(
            "{MANIFEST_MAGIC} {nonce:016x} {count} {len} {crc:08x}"
        ))
    }

    pub(super) fn decode(data: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let rest = text.strip_prefix(MANIFEST_MAGIC)?;
        let mut fields = rest.split_whitespace();
        let manifest = Manifest {
            nonce: u64::from_str_radix(fields.next()?, 16).ok()?,
            count: fields.next()?.parse().ok()?,
            len: fields.next()?.parse().ok()?,
            crc: u32::from_str_radix(fields.next()?, 16).ok()?,
        };
        fields.next().is_none().then_some(manifest)
    }

    /// Checks a decoded manifest against the channel's chunk size before anything is fetched
    /// or allocated for it: the length is at most [`MAX_CHUNKED`] and the count is the number
    /// of chunks of that size it takes (so a hostile count cannot make millions of keys).
    pub(super) fn check(&self, chunk_size: usize) -> Result<(), String> {
        let expected = self.len.div_ceil(chunk_size.max(1) as u64);
        if self.len > MAX_CHUNKED || self.count == 0 || u64::from(self.count) != expected {
            return Err(format!(
                "chunk manifest declares {} bytes in {} chunks (chunks of {chunk_size} bytes, at \
                 most {MAX_CHUNKED} bytes)",
                self.len, self.count
            ));
        }
        Ok(())
    }

    pub(super) fn chunk_keys(&self, channel: &MemcachedChannel) -> Vec<String> {
        (0..self.count)
            .map(|i| channel.chunk_key(self.nonce, i))
            .collect()
    }
}

/// What a message or key item holds.
pub(super) enum Head {
    Inline(Bytes),
    Chunked(Manifest),
}

impl Head {
    /// The head of an item, its chunk manifest checked against `chunk_size`
    /// ([`Manifest::check`]).
    pub(super) fn decode(value: Value, chunk_size: usize) -> Result<Self, MemcachedError> {
        match value.flags {
            FLAG_INLINE => Ok(Head::Inline(value.data)),
            FLAG_CHUNKED => {
                let manifest = Manifest::decode(&value.data).ok_or_else(|| {
                    MemcachedError::Corrupt(format!(
                        "item {} has an unreadable chunk manifest",
                        value.key
                    ))
                })?;
                manifest.check(chunk_size).map_err(|reason| {
                    MemcachedError::Corrupt(format!("item {}: {reason}", value.key))
                })?;
                Ok(Head::Chunked(manifest))
            }
            flags => Err(MemcachedError::Corrupt(format!(
                "item {} has flags {flags}, not written by mlless",
                value.key
            ))),
        }
    }
}

impl MemcachedChannel {
    /// Writes the chunks of a large payload under a fresh nonce; returns its manifest.
    pub(super) async fn write_chunks(&self, payload: &Bytes) -> Result<Manifest> {
        let chunk_size = self.client.chunk_size;
        let nonce = fresh_nonce();
        let count = payload.len().div_ceil(chunk_size);
        let manifest = Manifest {
            nonce,
            count: u32::try_from(count).map_err(|_| {
                self.backend_error(
                    &self.chunk_key(nonce, 0),
                    MemcachedError::Protocol(format!("{} bytes is too large", payload.len())),
                )
            })?,
            len: payload.len() as u64,
            crc: crc32fast::hash(payload),
        };
        let keys = manifest.chunk_keys(self);
        let batches: Vec<Vec<Cmd>> = keys
            .chunks(CHUNKS_PER_EXCHANGE)
            .enumerate()
            .map(|(b, batch)| {
                batch
                    .iter()
                    .enumerate()
                    .map(|(i, key)| {
                        let start = (b * CHUNKS_PER_EXCHANGE + i) * chunk_size;
                        let end = (start + chunk_size).min(payload.len());
                        Cmd::Store {
                            op: StoreOp::Set,
                            key: key.clone(),
                            flags: 0,
                            ttl: self.ttl_secs,
                            data: payload.slice(start..end),
                        }
                    })
                    .collect()
            })
            .collect();
        // At most MAX_CONNECTIONS exchanges run at once (the pool's limit).
        let written =
            futures::future::try_join_all(batches.into_iter().map(|cmds| self.store_all(cmds)))
                .await;
        if let Err(e) = written {
            self.delete_quietly(&keys).await;
            return Err(e);
        }
        trace!(channel = %self.client.endpoint, nonce, count, "chunks written");
        Ok(manifest)
    }

    /// Runs storage commands in one exchange; every one must be stored.
    async fn store_all(&self, cmds: Vec<Cmd>) -> Result<()> {
        let Some(Cmd::Store { key, .. }) = cmds.first() else {
            return Ok(());
        };
        for reply in self.exchange(key, &cmds).await? {
            if reply != Reply::Stored {
                return Err(self.unexpected(key, "store", &reply));
            }
        }
        Ok(())
    }

    /// Deletes chunks that nothing refers to; failures are only logged (the items expire).
    pub(super) async fn delete_quietly(&self, keys: &[String]) {
        if let Err(e) = self.delete_many(keys).await {
            debug!(channel = %self.client.endpoint, error = %e, "could not delete unused chunks");
        }
    }

    /// Reads and checks the values of `manifests`; `None` for those with a chunk missing.
    pub(super) async fn read_chunked(&self, manifests: &[&Manifest]) -> Result<Vec<Option<Bytes>>> {
        let keys: Vec<String> = manifests.iter().flat_map(|m| m.chunk_keys(self)).collect();
        let batches: Vec<&[String]> = keys.chunks(CHUNKS_PER_EXCHANGE).collect();
        let fetched: Vec<HashMap<String, Value>> =
            futures::future::try_join_all(batches.into_iter().map(|batch| self.get_many(batch)))
                .await?;
        let mut chunks: HashMap<String, Bytes> = fetched
            .into_iter()
            .flatten()
            .map(|(key, value)| (key, value.data))
            .collect();
        let mut out = Vec::with_capacity(manifests.len());
        'manifests: for manifest in manifests {
            let mut parts = Vec::with_capacity(manifest.count as usize);
            for key in manifest.chunk_keys(self) {
                let Some(chunk) = chunks.remove(&key) else {
                    debug!(channel = %self.client.endpoint, chunk = key, "chunk missing");
                    out.push(None);
                    continue 'manifests;
                };
                parts.push(chunk);
            }
            let first = self.chunk_key(manifest.nonce, 0);
            // Allocated by what arrived, after checking it against the manifest.
            let total: u64 = parts.iter().map(|c| c.len() as u64).sum();
            if total != manifest.len {
                let reason = format!(
                    "chunks add up to {total} bytes, the manifest says {}",
                    manifest.len
                );
                return Err(self.backend_error(&first, MemcachedError::Corrupt(reason)));
            }
            let mut whole = BytesMut::with_capacity(total as usize);
            parts.iter().for_each(|c| whole.extend_from_slice(c));
            let crc = crc32fast::hash(&whole);
            if crc != manifest.crc {
                let reason = format!("CRC-32 {crc:08x}, the manifest says {:08x}", manifest.crc);
                return Err(self.backend_error(&first, MemcachedError::Corrupt(reason)));
            }
            out.push(Some(whole.freeze()));
        }
        Ok(out)
    }

    /// Turns heads into payloads (reading chunks where needed); `None` where incomplete.
    pub(super) async fn resolve(&self, heads: Vec<(String, Value)>) -> Result<Vec<Option<Bytes>>> {
        let mut out: Vec<Option<Bytes>> = vec![None; heads.len()];
        let mut chunked: Vec<(usize, Manifest)> = Vec::new();
        for (i, (key, value)) in heads.into_iter().enumerate() {
            match Head::decode(value, self.client.chunk_size)
                .map_err(|e| self.backend_error(&key, e))?
            {
                Head::Inline(data) => out[i] = Some(data),
                Head::Chunked(manifest) => chunked.push((i, manifest)),
            }
        }
        if !chunked.is_empty() {
            let manifests: Vec<&Manifest> = chunked.iter().map(|(_, m)| m).collect();
            let payloads = self.read_chunked(&manifests).await?;
            for ((i, _), payload) in chunked.iter().zip(payloads) {
                out[*i] = payload;
            }
        }
        Ok(out)
    }

    /// Deletes the given heads and the chunks of those that are chunked, if present.
    pub(super) async fn delete_heads(&self, heads: &[String]) -> Result<()> {
        let Some(first) = heads.first() else {
            return Ok(());
        };
        let mut cmds: Vec<Cmd> = heads
            .chunks(KEYS_PER_GET)
            .map(|batch| Cmd::Get(batch.to_vec()))
            .collect();
        cmds.extend(heads.iter().cloned().map(Cmd::Delete));
        let mut chunks: Vec<String> = Vec::new();
        for reply in self.exchange(first, &cmds).await? {
            match reply {
                Reply::Values(values) => {
                    for value in values {
                        if let Ok(Head::Chunked(manifest)) =
                            Head::decode(value, self.client.chunk_size)
                        {
                            chunks.extend(manifest.chunk_keys(self));
                        }
                    }
                }
                Reply::Deleted | Reply::NotFound => {}
                other => return Err(self.unexpected(first, "delete", &other)),
            }
        }
        for batch in chunks.chunks(CLEANUP_BATCH) {
            self.delete_many(batch).await?;
        }
        Ok(())
    }

    /// Deletes every head of `batch` that exists, with its chunks; returns how many.
    pub(super) async fn delete_existing(&self, batch: &[String]) -> Result<usize> {
        let found = self.get_many(batch).await?;
        let heads: Vec<String> = found.into_keys().collect();
        self.delete_heads(&heads).await?;
        Ok(heads.len())
    }
}
