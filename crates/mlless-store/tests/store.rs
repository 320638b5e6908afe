//! The store conformance suite on every local backend, and how `Store::open` treats its URLs.

use bytes::Bytes;
use mlless_store::{Store, StoreError, StoreKind, conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path().to_str().expect("utf-8 path")).expect("open");
    assert_eq!(store.kind(), StoreKind::Local);
    conformance::store_conformance(&store).await;
    // The suite leaves nothing behind, not even empty directories.
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "left {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory() {
    let store = Store::open("memory://store-conformance").expect("open");
    assert_eq!(store.kind(), StoreKind::Memory);
    conformance::store_conformance(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_file_below_a_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}/runs/r1", dir.path().display());
    let store = Store::open(&url).expect("open");
    assert!(store.url().ends_with("/runs/r1"), "{}", store.url());
    conformance::store_conformance(&store.child("deeper/still")).await;
}

#[tokio::test]
async fn file_url_and_path_open_the_same_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let by_path = Store::open(dir.path().to_str().expect("utf-8")).expect("open path");
    let url = format!("file://{}", dir.path().display());
    let by_url = Store::open(&url).expect("open url");
    by_path
        .put("x/y", Bytes::from_static(b"hi"))
        .await
        .expect("put");
    assert_eq!(&by_url.get("x/y").await.expect("get")[..], b"hi");
    assert!(dir.path().join("x/y").is_file());
    assert!(by_url.url().starts_with("file:///"), "{}", by_url.url());
}

#[tokio::test]
async fn relative_path_is_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cwd = std::env::current_dir().expect("cwd");
    // A relative path, resolved from the current directory (not changed: tests run in parallel).
    let abs = dir.path().join("new/sub/dir");
    let rel = pathdiff(&abs, &cwd);
    let store = Store::open(&rel).expect("open relative");
    assert!(abs.is_dir());
    assert!(store.url().starts_with("file:///"), "{}", store.url());
    store.put("k", Bytes::from_static(b"v")).await.expect("put");
    assert!(abs.join("k").is_file());
}

/// `target` relative to `base` as `../../..{target}` (both absolute).
fn pathdiff(target: &std::path::Path, base: &std::path::Path) -> String {
    let ups = base.components().count().saturating_sub(1);
    let mut rel = "../".repeat(ups);
    rel.push_str(target.to_str().expect("utf-8").trim_start_matches('/'));
    rel
}

#[tokio::test]
async fn memory_stores_are_shared_by_name() {
    let a = Store::open("memory://shared-by-name").expect("open");
    let b = Store::open("memory://shared-by-name").expect("open");
    let other = Store::open("memory://another-name").expect("open");
    a.put("k", Bytes::from_static(b"v")).await.expect("put");
    assert_eq!(
        b.get_opt("k").await.expect("get").as_deref(),
        Some(&b"v"[..])
    );
    assert!(other.get_opt("k").await.expect("get").is_none());
    let prefixed = Store::open("memory://shared-by-name/sub").expect("open");
    assert_eq!(prefixed.url(), "memory://shared-by-name/sub");
    prefixed.put("k2", Bytes::new()).await.expect("put");
    assert_eq!(a.list("").await.expect("list"), ["k", "sub/k2"]);
}

#[test]
fn a_path_below_a_regular_file_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").expect("write");
    let below = file.join("store");
    for url in [
        below.display().to_string(),
        format!("file://{}", below.display()),
        file.display().to_string(),
    ] {
        match Store::open(&url) {
            Err(e @ StoreError::InvalidUrl { .. }) => {
                let message = e.to_string();
                assert!(message.contains(&url), "{message}");
            }
            other => panic!("open({url}) gave {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_unwritable_store_fails_check_writable_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let store = Store::open(root.to_str().expect("utf-8")).expect("open");
    store.check_writable().await.expect("writable at first");
    // Replace the directory by a regular file: every write below it fails, even for root.
    std::fs::remove_dir_all(&root).expect("rm");
    std::fs::write(&root, b"not a directory").expect("write");
    match store.check_writable().await {
        Err(e @ StoreError::NotWritable { .. }) => {
            let message = e.to_string();
            assert!(message.contains(store.url()), "{message}");
        }
        other => panic!("check_writable gave {other:?}"),
    }
    match store.put("k", Bytes::new()).await {
        Err(e @ StoreError::Backend { .. }) => {
            assert!(e.to_string().contains(&format!("{}/k", store.url())), "{e}");
        }
        other => panic!("put gave {other:?}"),
    }
    // Reads below a file are "not found", as on any other backend.
    assert!(store.get_opt("k").await.expect("get_opt").is_none());
}

#[test]
fn unsupported_schemes_are_rejected_listing_the_supported_ones() {
    for url in [
        "redis://localhost:6379",
        "gs://bucket/x",
        "http://example.com/x",
    ] {
        match Store::open(url) {
            Err(e @ StoreError::InvalidUrl { .. }) => {
                let message = e.to_string();
                assert!(
                    message.contains("s3://") && message.contains("memory://"),
                    "{message}"
                );
            }
            other => panic!("open({url}) gave {other:?}"),
        }
    }
    assert!(matches!(
        Store::open(""),
        Err(StoreError::InvalidUrl { .. })
    ));
    assert!(matches!(
        Store::open("file://relative/x"),
        Err(StoreError::InvalidUrl { .. })
    ));
}

#[cfg(feature = "s3")]
#[test]
fn s3_urls_open_without_contacting_the_server() {
    let store = Store::open("s3://some-bucket/runs/r1").expect("open");
    assert_eq!(store.kind(), StoreKind::S3);
    assert_eq!(store.url(), "s3://some-bucket/runs/r1");
    assert_eq!(
        store.child("channel").url(),
        "s3://some-bucket/runs/r1/channel"
    );
    assert!(!format!("{store:?}").contains("secret"));
    assert!(matches!(
        Store::open("s3:///no-bucket"),
        Err(StoreError::InvalidUrl { .. })
    ));
}

/// Without the `s3` feature an S3 URL is a typed error naming it, not an "unsupported scheme".
#[cfg(not(feature = "s3"))]
#[test]
fn s3_urls_without_the_s3_feature_are_typed_errors() {
    for url in ["s3://some-bucket/runs/r1", "s3a://some-bucket"] {
        match Store::open(url) {
            Err(e @ StoreError::NotBuilt { feature: "s3", .. }) => {
                let message = e.to_string();
                assert!(message.contains(url), "{message}");
                assert!(
                    message.contains("built without the `s3` feature"),
                    "{message}"
                );
                assert!(!e.is_transient());
            }
            other => panic!("open({url}) gave {other:?}"),
        }
    }
}

/// With or without the `s3` feature (then refused as not built, the URL redacted).
#[test]
fn credentials_in_urls_are_refused_and_never_echoed() {
    match Store::open("s3://AKIDEXAMPLE:supersecret@bucket/x") {
        Err(e) => {
            let message = e.to_string();
            assert!(!message.contains("supersecret"), "{message}");
            assert!(!format!("{e:?}").contains("supersecret"));
        }
        Ok(s) => panic!("opened {s:?}"),
    }
}
