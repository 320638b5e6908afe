//! Reading Redis's replies: a stream read's entries and what it says of the stream.

use super::*;

/// What a collect has read of one shard's stream: the payloads found, by worker, and the id
/// of the last entry read, which the next read starts after.
pub(super) struct StreamRead {
    pub(super) found: HashMap<WorkerId, Bytes>,
    pub(super) last_id: String,
}

impl Default for StreamRead {
    fn default() -> Self {
        StreamRead {
            found: HashMap::new(),
            last_id: String::from("0-0"),
        }
    }
}

impl StreamRead {
    /// What an `XRANGE` reply (or [`PUBLISH_AND_READ_SCRIPT`]'s) holds; the first payload of a
    /// worker counts.
    pub(super) fn of_range(reply: Value) -> StreamRead {
        let mut read = StreamRead::default();
        for (id, worker, payload) in range_entries(reply) {
            read.last_id = id;
            if let Some(worker) = worker {
                read.found.entry(worker).or_insert(payload);
            }
        }
        read
    }
}

/// The entries of an `XREAD` reply (RESP2 or RESP3) as (entry id, worker, payload), in order.
/// Entries without a valid worker field still advance the last id read.
pub(super) fn stream_entries(reply: Value) -> Vec<(String, Option<WorkerId>, Bytes)> {
    let streams: Vec<Value> = match reply {
        Value::Array(streams) => streams
            .into_iter()
            .filter_map(|s| match s {
                Value::Array(mut pair) if pair.len() == 2 => pair.pop(),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.into_iter().map(|(_, entries)| entries).collect(),
        _ => Vec::new(),
    };
    streams.into_iter().flat_map(range_entries).collect()
}

/// The entries of one stream's part of a reply (an `XRANGE` reply, or one stream of an
/// `XREAD`'s) as (entry id, worker, payload), in order.
pub(super) fn range_entries(entries: Value) -> Vec<(String, Option<WorkerId>, Bytes)> {
    let Value::Array(entries) = entries else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(mut parts) = entry else {
            continue;
        };
        if parts.len() != 2 {
            continue;
        }
        let fields = parts.pop();
        let id = match parts.pop() {
            Some(Value::BulkString(id)) => String::from_utf8_lossy(&id).into_owned(),
            Some(Value::SimpleString(id)) => id,
            _ => continue,
        };
        let mut worker = None;
        let mut payload = Bytes::new();
        let fields: Vec<Value> = match fields {
            Some(Value::Array(fields)) => fields,
            Some(Value::Map(pairs)) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            _ => Vec::new(),
        };
        let mut fields = fields.into_iter();
        while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
            let Value::BulkString(value) = value else {
                continue;
            };
            match name {
                Value::BulkString(n) if n == b"w" => {
                    worker = std::str::from_utf8(&value)
                        .ok()
                        .and_then(|s| s.parse().ok());
                }
                Value::BulkString(n) if n == b"p" => payload = Bytes::from(value),
                _ => {}
            }
        }
        out.push((id, worker, payload));
    }
    out
}
