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
