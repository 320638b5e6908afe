//! How a run's channel is billed: the kind of channel a URL is ([`channel_kind`], what the
//! cost model prices) and the requests a bill charges ([`billed_requests`]). Apart from the
//! record and the configuration, which both ask it.

use mlless_cost::{ChannelKind, ObjectRequests};
use mlless_io_types::ChannelScheme;

/// The kind of channel a run with channel URL `channel` (the spec's, as `mlless train
/// --channel` takes it) is billed as: its servers per instance, or the object store's requests.
///
/// The `match` is exhaustive on purpose: a new channel backend does not compile until it says
/// here how it is billed. A URL no channel accepts ([`ChannelScheme::parse`] fails), which only
/// a hand-made record can hold since the driver opens the channel before anything runs, is
/// priced as the object store: no server of its own to bill.
pub fn channel_kind(channel: Option<&str>) -> ChannelKind {
    match ChannelScheme::parse(channel) {
        Ok(ChannelScheme::RunStore | ChannelScheme::ObjectStore(_)) | Err(_) => {
            ChannelKind::ObjectStore
        }
        Ok(ChannelScheme::Redis { shards }) => ChannelKind::Redis { instances: shards },
        Ok(ChannelScheme::Memcached) => ChannelKind::Memcached { instances: 1 },
        Ok(ChannelScheme::Ps { servers }) => ChannelKind::ParameterServer { instances: servers },
        Ok(ChannelScheme::DynamoDb) => ChannelKind::DynamoDb,
    }
}

/// The requests and request units of `counts` as a bill charges them: PUTs and LIST pages at the
/// object store's write rate, GETs, misses and HEADs at its read rate, and the DynamoDB
/// channel's write and read request units at DynamoDB's.
pub fn billed_requests(counts: &mlless_io_types::RequestCounts) -> ObjectRequests {
    ObjectRequests {
        writes: counts.writes(),
        reads: counts.reads(),
        table_write_units: counts.table_write_units,
        table_read_units: counts.table_read_units,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlless_io_types::StoreKind;

    #[test]
    fn channels_are_billed_by_their_scheme() {
        assert_eq!(channel_kind(None), ChannelKind::ObjectStore);
        assert_eq!(channel_kind(Some("store")), ChannelKind::ObjectStore);
        assert_eq!(
            channel_kind(Some("s3://bucket/x")),
            ChannelKind::ObjectStore
        );
        assert_eq!(
            channel_kind(Some("redis://a:6379,redis://b:6379")),
            ChannelKind::Redis { instances: 2 }
        );
        assert_eq!(
            channel_kind(Some("rediss://:secret@a:6380")),
            ChannelKind::Redis { instances: 1 }
        );
        assert_eq!(
            channel_kind(Some("memcached://127.0.0.1:11211")),
            ChannelKind::Memcached { instances: 1 }
        );
        assert_eq!(
            channel_kind(Some("ps://:pw@a:7450,ps://:pw@b:7450")),
            ChannelKind::ParameterServer { instances: 2 }
        );
        assert_eq!(
            channel_kind(Some("dynamodb://mlless-updates?create=true")),
            ChannelKind::DynamoDb
        );
        // As the record shows them: redacted.
        assert_eq!(
            channel_kind(Some("redis://:***@a:1,redis://:***@b:2")),
            ChannelKind::Redis { instances: 2 }
        );
        assert_eq!(
            ChannelScheme::parse(Some("s3://bucket/x")).ok(),
            Some(ChannelScheme::ObjectStore(StoreKind::S3))
        );
    }
}
