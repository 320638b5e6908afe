//! Tests of Store: local and in-memory locations, keys, listing, conditional puts.

use super::error::chain_has_connection_error;
use super::*;

#[test]
fn local_path_resolves_local_locations_without_creating_them() {
    assert_eq!(local_path("data/k"), Some(PathBuf::from("data/k")));
    assert_eq!(
        local_path("file:///tmp/a%20b"),
        Some(PathBuf::from("/tmp/a b"))
    );
    assert_eq!(
        local_path("file://localhost/tmp/x"),
        Some(PathBuf::from("/tmp/x"))
    );
    for other in ["s3://bucket/k", "memory://m/k", "file://relative", ""] {
        assert_eq!(local_path(other), None, "{other}");
    }
    let dir = std::env::temp_dir().join(format!("mlless-local-path-{}", std::process::id()));
    assert_eq!(local_path(&dir.display().to_string()), Some(dir.clone()));
    assert!(!dir.exists(), "resolving creates nothing");
}

#[tokio::test]
async fn local_leftovers_of_a_killed_upload_go_with_the_empty_directories() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().display().to_string()).expect("local store");
    store
        .put("staging/ranges/0000.bin", Bytes::from_static(b"done"))
        .await
        .expect("put");
    store
        .put("staging/kept.bin", Bytes::from_static(b"an object"))
        .await
        .expect("put");
    // What a process killed while uploading leaves: the backend's staged file, never listed.
    let abandoned = dir.path().join("staging/ranges/0001.bin#3");
    std::fs::write(&abandoned, b"half").expect("staged file");
    store
        .delete_prefix("staging/ranges/")
        .await
        .expect("delete");
    assert!(abandoned.exists(), "deleting objects does not reach it");

    remove_local_leftovers(&dir.path().join("staging"));
    assert!(!dir.path().join("staging/ranges").exists());
    // A file that is an object stays, and so does its directory.
    assert!(store.exists("staging/kept.bin").await.expect("exists"));
}

#[test]
fn keys_are_validated() {
    assert!(check_key("a/b/c.bin").is_ok());
    assert!(check_key("").is_err());
    assert!(check_key("a//b").is_err());
    assert!(check_key("../x").is_err());
    assert!(check_key("a/./b").is_err());
    assert!(check_key("a#1").is_err());
    assert!(check_key("a\nb").is_err());
}

#[test]
fn schemes_are_split() {
    assert_eq!(split_scheme("s3://b/p"), Some(("s3", "b/p")));
    assert_eq!(split_scheme("/tmp/a"), None);
    assert_eq!(split_scheme("./x://y"), None);
    assert_eq!(percent_decode("/a%20b").as_deref(), Ok("/a b"));
    assert!(percent_decode("/a%2").is_err());
}

#[derive(Debug, thiserror::Error)]
#[error("wrapper")]
struct Wrapper(#[source] std::io::Error);

fn io(kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::new(kind, "test")
}

#[test]
fn io_errors_in_a_chain_are_found() {
    assert!(chain_has_connection_error(&Wrapper(io(
        std::io::ErrorKind::ConnectionReset
    ))));
    assert!(!chain_has_connection_error(&Wrapper(io(
        std::io::ErrorKind::PermissionDenied
    ))));
    let store = StoreError::Backend {
        location: "s3://b/k".into(),
        source: object_store::Error::Generic {
            store: "S3",
            source: Box::new(Wrapper(io(std::io::ErrorKind::ConnectionRefused))),
        },
    };
    assert!(store.is_transient());
    let not_found = StoreError::NotFound {
        location: "s3://b/k".into(),
    };
    assert!(!not_found.is_transient());
}
