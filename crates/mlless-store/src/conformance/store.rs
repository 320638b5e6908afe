//! The object-store conformance suite: [`store_conformance`].

use super::*;

pub(super) fn store_must<T>(store: &Store, what: &str, result: Result<T, StoreError>) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("{}: {what} failed: {e}", store.url()),
    }
}

/// The object-store conformance suite, run below `store.child("conformance")` (left empty):
/// put/get/get_stream (from an offset too)/size/list/delete/delete_prefix, NotFound, overwrite, zero-byte objects,
/// invalid keys, child handles, atomic visibility under concurrent overwrite, create-if-absent
/// (`put_if_absent`, also raced by concurrent writers), and `check_writable`.
pub async fn store_conformance(store: &Store) {
    let s = store.child("conformance");
    store_must(&s, "delete_prefix", s.delete_prefix("").await);

    // Put, get, overwrite, zero bytes.
    store_must(&s, "put", s.put("a/1", Bytes::from_static(b"one")).await);
    let got = store_must(&s, "get", s.get("a/1").await);
    assert_eq!(&got[..], b"one", "{}: get after put", s.url());
    store_must(&s, "put", s.put("a/1", Bytes::from_static(b"uno")).await);
    let got = store_must(&s, "get", s.get("a/1").await);
    assert_eq!(&got[..], b"uno", "{}: overwrite lost", s.url());
    store_must(&s, "put", s.put("zero", Bytes::new()).await);
    let got = store_must(&s, "get_opt", s.get_opt("zero").await);
    assert_eq!(
        got.as_deref(),
        Some(&b""[..]),
        "{}: zero-byte object",
        s.url()
    );
    assert!(store_must(&s, "exists", s.exists("zero").await));

    // Missing objects.
    match s.get("a/missing").await {
        Err(StoreError::NotFound { location }) => {
            assert!(
                location.starts_with(s.url()) && location.ends_with("a/missing"),
                "{}: NotFound names {location}",
                s.url()
            );
        }
        other => panic!("{}: get of a missing key gave {other:?}", s.url()),
    }
    assert!(store_must(&s, "get_opt", s.get_opt("a/missing").await).is_none());
    assert!(!store_must(&s, "exists", s.exists("a/missing").await));
    // Below an existing object (a file on the local backend).
    assert!(store_must(&s, "get_opt", s.get_opt("a/1/below").await).is_none());

    // Streamed reads: the whole object in order, and NotFound for a missing one.
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    store_must(&s, "put", s.put("big", Bytes::from(big.clone())).await);
    let mut stream = store_must(&s, "get_stream", s.get_stream("big").await);
    let mut streamed = Vec::with_capacity(big.len());
    while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
        streamed.extend_from_slice(&store_must(&s, "get_stream chunk", chunk));
    }
    assert!(streamed == big, "{}: a streamed read differs", s.url());
    // From an offset: the rest of the object, none of it at or past its end; its size.
    assert_eq!(
        store_must(&s, "size", s.size("big").await),
        big.len() as u64
    );
    for offset in [
        1,
        1_234_567,
        big.len() as u64 - 1,
        big.len() as u64,
        5_000_000,
    ] {
        let mut stream = store_must(
            &s,
            "get_stream_from",
            s.get_stream_from("big", offset).await,
        );
        let mut rest = Vec::new();
        while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
            rest.extend_from_slice(&store_must(&s, "get_stream_from chunk", chunk));
        }
        let expected = &big[(offset as usize).min(big.len())..];
        assert!(
            rest == expected,
            "{}: a read from byte {offset} differs",
            s.url()
        );
    }
    assert!(
        matches!(s.size("a/missing").await, Err(StoreError::NotFound { .. })),
        "{}: size of a missing key",
        s.url()
    );
    store_must(&s, "delete", s.delete("big").await);
    assert!(
        matches!(
            s.get_stream("a/missing").await,
            Err(StoreError::NotFound { .. })
        ),
        "{}: get_stream of a missing key",
        s.url()
    );

    // List: recursive, relative, sorted, whole segments.
    for key in ["a/2", "b/c/3", "ab/4"] {
        store_must(&s, "put", s.put(key, Bytes::from(key.to_string())).await);
    }
    let all = store_must(&s, "list", s.list("").await);
    assert_eq!(
        all,
        ["a/1", "a/2", "ab/4", "b/c/3", "zero"],
        "{}: list",
        s.url()
    );
    let a = store_must(&s, "list", s.list("a").await);
    assert_eq!(a, ["a/1", "a/2"], "{}: list a", s.url());
    let a = store_must(&s, "list", s.list("a/").await);
    assert_eq!(a, ["a/1", "a/2"], "{}: list a/", s.url());
    let b = store_must(&s, "list", s.list("b").await);
    assert_eq!(b, ["b/c/3"], "{}: list b", s.url());
    let none = store_must(&s, "list", s.list("nothing/here").await);
    assert!(none.is_empty(), "{}: list of an absent prefix", s.url());

    // Child handles.
    let child = s.child("b");
    assert_eq!(child.url(), format!("{}/b", s.url()));
    let got = store_must(&child, "get", child.get("c/3").await);
    assert_eq!(&got[..], b"b/c/3");
    assert_eq!(store_must(&child, "list", child.list("").await), ["c/3"]);
    assert_eq!(s.child("").url(), s.url());

    // Delete, delete_prefix, delete_many.
    store_must(&s, "delete", s.delete("a/1").await);
    assert!(!store_must(&s, "exists", s.exists("a/1").await));
    store_must(&s, "delete", s.delete("a/1").await);
    store_must(&s, "delete", s.delete("never/was").await);
    store_must(&s, "delete_prefix", s.delete_prefix("b").await);
    store_must(&s, "delete_prefix", s.delete_prefix("no/such/prefix").await);
    let all = store_must(&s, "list", s.list("").await);
    assert_eq!(all, ["a/2", "ab/4", "zero"], "{}: after deletes", s.url());
    store_must(
        &s,
        "delete_many",
        s.delete_many(["a/2", "zero", "absent"]).await,
    );
    let all = store_must(&s, "list", s.list("").await);
    assert_eq!(all, ["ab/4"], "{}: after delete_many", s.url());

    // Invalid keys are errors, not panics, and name the location.
    for key in ["", "a//b", "../x", "a/./b", "x#1", "tab\there"] {
        match s.put(key, Bytes::new()).await {
            Err(StoreError::InvalidKey { location, .. }) => {
                assert!(location.starts_with(s.url()));
            }
            other => panic!("{}: put of invalid key {key:?} gave {other:?}", s.url()),
        }
    }

    atomic_visibility(&s).await;
    put_if_absent(&s).await;

    store_must(&s, "check_writable", s.check_writable().await);
    store_must(&s, "delete_prefix", s.delete_prefix("").await);
    let all = store_must(&s, "list", s.list("").await);
    assert!(all.is_empty(), "{}: left {all:?}", s.url());
}

/// Readers of an object being overwritten with large values see one whole version, never a
/// partial or mixed one.
pub(super) async fn atomic_visibility(s: &Store) {
    const LEN: usize = 4 << 20;
    const VERSIONS: u8 = 12;
    let version = |v: u8| Bytes::from(vec![v; LEN]);
    store_must(s, "put", s.put("atomic", version(1)).await);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (s, done) = (s.clone(), Arc::clone(&done));
            tokio::spawn(async move {
                let mut reads = 0u32;
                loop {
                    let finished = done.load(std::sync::atomic::Ordering::Acquire);
                    let got = store_must(&s, "get", s.get("atomic").await);
                    reads += 1;
                    let first = got.first().copied().unwrap_or(0);
                    assert!(
                        got.len() == LEN && (1..=VERSIONS).contains(&first),
                        "{}: read {} bytes starting with {first} while overwriting",
                        s.url(),
                        got.len()
                    );
                    assert!(
                        got.iter().all(|&b| b == first),
                        "{}: read a mix of two versions",
                        s.url()
                    );
                    if finished {
                        return reads;
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for v in 2..=VERSIONS {
        store_must(s, "put", s.put("atomic", version(v)).await);
        tokio::task::yield_now().await;
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    for reader in readers {
        match reader.await {
            Ok(reads) => assert!(reads > 0),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("{}: reader task failed: {e}", s.url()),
        }
    }
    let last = store_must(s, "get", s.get("atomic").await);
    assert!(last == version(VERSIONS), "{}: last write lost", s.url());
    store_must(s, "delete", s.delete("atomic").await);
}

/// `put_if_absent` writes only where there is nothing: a second write of the key is
/// `AlreadyExists` naming it and changes nothing; after a delete the key can be created again;
/// of writers racing for one key exactly one wins, and the object is the winner's.
pub(super) async fn put_if_absent(s: &Store) {
    store_must(
        s,
        "put_if_absent",
        s.put_if_absent("once/spec", Bytes::from_static(b"first"))
            .await,
    );
    match s
        .put_if_absent("once/spec", Bytes::from_static(b"second"))
        .await
    {
        Err(StoreError::AlreadyExists { location }) => assert!(
            location.starts_with(s.url()) && location.ends_with("once/spec"),
            "{}: AlreadyExists names {location}",
            s.url()
        ),
        other => panic!(
            "{}: put_if_absent of an existing key gave {other:?}",
            s.url()
        ),
    }
    let got = store_must(s, "get", s.get("once/spec").await);
    assert_eq!(&got[..], b"first", "{}: put_if_absent replaced", s.url());
    store_must(s, "delete", s.delete("once/spec").await);
    store_must(
        s,
        "put_if_absent",
        s.put_if_absent("once/spec", Bytes::from_static(b"again"))
            .await,
    );
    let got = store_must(s, "get", s.get("once/spec").await);
    assert_eq!(
        &got[..],
        b"again",
        "{}: put_if_absent after delete",
        s.url()
    );
    match s.put_if_absent("bad//key", Bytes::new()).await {
        Err(StoreError::InvalidKey { .. }) => {}
        other => panic!(
            "{}: put_if_absent of an invalid key gave {other:?}",
            s.url()
        ),
    }

    // Racing writers, each with its own value (large enough that the writes overlap).
    const WRITERS: u8 = 8;
    let writers: Vec<_> = (1..=WRITERS)
        .map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                let value = Bytes::from(vec![w; 1 << 20]);
                (w, s.put_if_absent("once/raced", value).await)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for writer in writers {
        match writer.await {
            Ok((w, Ok(()))) => winners.push(w),
            Ok((_, Err(StoreError::AlreadyExists { .. }))) => {}
            Ok((w, Err(e))) => panic!("{}: racing put_if_absent {w} failed: {e}", s.url()),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("{}: writer task failed: {e}", s.url()),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "{}: racing put_if_absent: writers {winners:?} all succeeded",
        s.url()
    );
    let got = store_must(s, "get", s.get("once/raced").await);
    assert!(
        got.len() == 1 << 20 && got.iter().all(|&b| b == winners[0]),
        "{}: the object is not the winner's",
        s.url()
    );
    store_must(s, "delete_prefix", s.delete_prefix("once").await);
}
