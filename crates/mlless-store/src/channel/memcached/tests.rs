//! Unit tests of the Memcached channel's formats: manifests, URLs, the index.

use std::time::Duration;

use super::backend_error;
use super::chunks::{FLAG_CHUNKED, Head, Manifest};
use super::client::MemcachedError;
use super::client::Value;
use super::index::{INDEX_SPAN, IndexCache, ParsedIndex};
use super::url::parse_url;
use crate::channel::ChannelError;

#[test]
fn manifests_round_trip() {
    let m = Manifest {
        nonce: 0xdead_beef_0123_4567,
        count: 9,
        len: 9 << 20,
        crc: 0x0a0b_0c0d,
    };
    assert_eq!(Manifest::decode(&m.encode()), Some(m));
    assert_eq!(Manifest::decode(b"mlless-chunks v1 12 x 3 4"), None);
    assert_eq!(Manifest::decode(b"hello"), None);
}

#[test]
fn manifests_are_checked_before_use() {
    let m = |count, len| Manifest {
        nonce: 1,
        count,
        len,
        crc: 0,
    };
    let chunk = 1 << 20;
    assert!(m(9, 9 << 20).check(chunk).is_ok());
    assert!(m(10, (9 << 20) + 1).check(chunk).is_ok());
    // A length of 2^40 is refused before any chunk is fetched or buffer allocated.
    let huge = m(1 << 20, 1 << 40).check(chunk).unwrap_err();
    assert!(huge.contains("1099511627776 bytes"), "{huge}");
    // A count that does not match the length would name billions of chunk keys.
    assert!(m(u32::MAX, 10 << 20).check(chunk).is_err());
    assert!(m(0, 0).check(chunk).is_err());
    assert!(m(1, 0).check(chunk).is_err());
    let value = Value {
        key: "head".into(),
        flags: FLAG_CHUNKED,
        data: m(u32::MAX, 1 << 40).encode(),
    };
    let err = Head::decode(value, chunk).err().expect("corrupt");
    assert!(err.to_string().contains("head"), "{err}");
}

#[test]
fn urls() {
    let s = parse_url("memcached://127.0.0.1:11311").expect("parse");
    assert_eq!((s.authority.as_str(), s.port), ("127.0.0.1:11311", 11311));
    let s = parse_url("memcached://cache/?ttl=60&op_timeout_ms=50").expect("parse");
    assert_eq!(s.authority, "cache:11211");
    assert_eq!(s.ttl_secs, 60);
    assert_eq!(s.op_timeout, Duration::from_millis(50));
    let s = parse_url("memcached://[::1]:5").expect("parse");
    assert_eq!((s.host.as_str(), s.authority.as_str()), ("::1", "[::1]:5"));
    for bad in [
        "redis://x",
        "memcached://",
        "memcached://h:0",
        "memcached://h:x",
        "memcached://u:p@h",
        "memcached://h/path",
        "memcached://h?ttl=0",
        "memcached://h?bogus=1",
        "memcached://[::1",
    ] {
        assert!(
            matches!(parse_url(bad), Err(ChannelError::InvalidUrl { .. })),
            "{bad}"
        );
    }
    match parse_url("memcached://u:secret@h") {
        Err(e) => assert!(!e.to_string().contains("secret"), "{e}"),
        Ok(_) => panic!("accepted credentials"),
    }
}

#[test]
fn index_ranges_grow_geometrically_and_merge() {
    let mut cache = IndexCache::default();
    let mut lines = Vec::new();
    for step in 0..10_000u64 {
        for worker in 0..4 {
            if let Some(update) = cache.message_update("updates", step, worker) {
                cache.record_message("updates", &update);
                lines.push(update.line);
            }
        }
    }
    assert!(lines.len() < 20, "{} index lines: {lines:?}", lines.len());
    let parsed = ParsedIndex::parse(lines.concat().as_bytes());
    let (ranges, max_worker) = &parsed.topics["updates"];
    assert_eq!(*max_worker, 3);
    assert_eq!(ranges.len(), 1);
    assert_eq!(ranges[0].0, 0);
    assert!(ranges[0].1 >= 9_999 && ranges[0].1 < 20_000, "{ranges:?}");
    // A far jump starts a new range instead of covering the gap.
    let update = cache.message_update("updates", 1 << 40, 0).expect("update");
    assert_eq!(update.range, (1 << 40, (1 << 40) + INDEX_SPAN - 1));
    let parsed = ParsedIndex::parse(b"m t 0 9 1\nm t 5 20 3\nm t 30 40 0\nk stop\nk a/b\n");
    assert_eq!(parsed.topics["t"], (vec![(0, 20), (30, 40)], 3));
    assert_eq!(parsed.candidates(), 21 * 4 + 11 * 4 + 2);
}

#[test]
fn memcached_connection_errors_are_retried() {
    let backend = |e| backend_error("memcached://127.0.0.1:1", "item", e);
    let retried = [
        MemcachedError::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "test",
        )),
        MemcachedError::Closed,
        MemcachedError::Timeout(Duration::from_secs(1)),
    ];
    for e in retried {
        assert!(backend(e).is_transient());
    }
    let not = [
        MemcachedError::Protocol("garbage".into()),
        MemcachedError::Server("SERVER_ERROR out of memory".into()),
        MemcachedError::Corrupt("crc".into()),
    ];
    for e in not {
        assert!(!backend(e).is_transient());
    }
}
