//! [`StoreError`]: what a store operation can fail with, and which failures are worth another
//! attempt.

use super::*;

/// Errors of the object store; every message names the full location (store URL + key) and
/// never a credential.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The URL given to [`Store::open`] cannot be opened.
    #[error("cannot open object store {url}: {reason}")]
    InvalidUrl {
        /// The URL (credentials, if any were embedded, are redacted).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The URL names a backend that this build left out: the cargo feature of `mlless-store`
    /// that builds it ([`BuiltBackend::required_feature`](crate::BuiltBackend::required_feature)) was off.
    #[error(
        "cannot open object store {url}: this mlless was built without the `{feature}` feature \
         (of mlless-store, on by default), which this backend needs"
    )]
    NotBuilt {
        /// The URL (credentials, if any were embedded, are redacted).
        url: String,
        /// The feature that builds the backend: `s3`.
        feature: &'static str,
    },
    /// A key is not a valid object name (empty, empty segment, `.`/`..`, forbidden character).
    #[error("invalid object key {location}: {reason}")]
    InvalidKey {
        /// Store URL + key.
        location: String,
        /// What is wrong with the key.
        reason: String,
    },
    /// The object does not exist.
    #[error("object not found: {location}")]
    NotFound {
        /// Store URL + key.
        location: String,
    },
    /// [`Store::put_if_absent`] found an object at the key already (and left it as it was).
    #[error("object exists already: {location}")]
    AlreadyExists {
        /// Store URL + key.
        location: String,
    },
    /// The store refused a probe write ([`Store::check_writable`]).
    #[error("object store {location} is not writable: {source}")]
    NotWritable {
        /// Store URL of the handle that was probed.
        location: String,
        /// What the backend said.
        #[source]
        source: object_store::Error,
    },
    /// Any other failure of the backend (I/O error, network, permissions, …).
    #[error("object store error at {location}: {source}")]
    Backend {
        /// Store URL + key (or prefix) of the operation that failed.
        location: String,
        /// What the backend said.
        #[source]
        source: object_store::Error,
    },
}

impl StoreError {
    /// Whether the error says the store could not be reached (worth another attempt once it is
    /// back) rather than something about the request: a [`StoreError::Backend`] whose chain
    /// holds an I/O error of a connection kind (refused, reset, aborted, broken pipe, timed out,
    /// not connected, unexpected end of file, unreachable) or an HTTP request that failed to
    /// connect, timed out, was interrupted, or could not be sent.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Backend { source, .. } => chain_has_connection_error(source),
            StoreError::InvalidUrl { .. }
            | StoreError::NotBuilt { .. }
            | StoreError::InvalidKey { .. }
            | StoreError::NotFound { .. }
            | StoreError::AlreadyExists { .. }
            | StoreError::NotWritable { .. } => false,
        }
    }
}

/// Whether `error` or one of its sources is an I/O or HTTP error of a connection kind.
pub(super) fn chain_has_connection_error(error: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && is_connection_io(io.kind())
        {
            return true;
        }
        // The HTTP client of object_store's cloud stores is built with them (feature `s3`).
        #[cfg(feature = "s3")]
        if let Some(http) = e.downcast_ref::<object_store::client::HttpError>() {
            use object_store::client::HttpErrorKind;
            if matches!(
                http.kind(),
                HttpErrorKind::Connect
                    | HttpErrorKind::Request
                    | HttpErrorKind::Timeout
                    | HttpErrorKind::Interrupted
            ) {
                return true;
            }
        }
        next = e.source();
    }
    false
}

/// I/O error kinds that say the connection (not the request) failed.
pub(super) fn is_connection_io(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::BrokenPipe
            | K::NotConnected
            | K::TimedOut
            | K::UnexpectedEof
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::NetworkDown
            | K::AddrNotAvailable
            | K::Interrupted
    )
}
