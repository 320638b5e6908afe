//! [`Store`]: a handle on an object store (local directory, in-memory, S3) below a key prefix.
//!
//! Every byte that functions keep or share goes through a [`Store`]: data sets, checkpoints,
//! final models, run records, and — through the object-store channel — updates. The handle is
//! cheap to clone and to narrow with [`Store::child`]; all handles opened on the same location
//! share one backend client.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
#[cfg(feature = "s3")]
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use tracing::{debug, trace};

pub use crate::parse::StoreKind;
use crate::parse::split_scheme;
use crate::redact::{redact_url, scrub, url_secrets};
use crate::requests::{Request, RequestCounter, pages};
use mlless_io_types::supported_store_urls;

mod error;
mod local;

pub use error::StoreError;
use local::percent_decode;
pub use local::{local_path, remove_local_leftovers};

/// A handle on an object store below a key prefix.
///
/// Keys are `/`-separated strings relative to the handle's prefix, e.g. `"minibatches/000001"`.
/// A key's segments must be non-empty, not `.` or `..`, and free of control characters and of
/// ``\ { } ^ % ` [ ] " < > ~ # | * ?`` (characters some backends encode or reserve), so a key
/// reads back from [`Store::list`] exactly as it was written on every backend.
///
/// On the local filesystem an object is a file and a prefix a directory, so one key cannot also
/// be the prefix of another (`a` and `a/b`); use keys that are leaves.
#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    kind: StoreKind,
    /// Prefix of every key of this handle inside `inner`.
    prefix: Path,
    /// Full location of the handle (root URL + prefix), for messages.
    url: Arc<str>,
    /// The directory of the store's root, for a store on the local filesystem.
    local_root: Option<Arc<std::path::Path>>,
    /// Where this handle counts its requests, if anywhere.
    requests: Option<RequestCounter>,
}

impl fmt::Debug for Store {
    // Not derived: a backend's Debug output may include credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("kind", &self.kind)
            .field("url", &self.url)
            .finish()
    }
}

/// The process-wide registry of `memory://NAME` stores.
fn memory_registry() -> &'static Mutex<HashMap<String, Arc<InMemory>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

impl Store {
    /// Opens an object store.
    ///
    /// Accepts:
    /// - a plain directory path, relative or absolute (the directory is created);
    /// - `file:///abs/path` (likewise created);
    /// - `memory://NAME[/prefix]`: an in-memory store from a process-wide registry, so two
    ///   `open("memory://x")` in one process share the same objects (for tests);
    /// - `s3://bucket[/prefix]`: S3 via [`AmazonS3Builder::from_env`]. Credentials and region come
    ///   from the standard `AWS_*` variables (region defaults to `us-east-1`); the endpoint of an
    ///   S3-compatible server from `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL` or `AWS_ENDPOINT`,
    ///   and plain HTTP is allowed when that endpoint is `http://`. Opening does not contact the
    ///   server; use [`Store::check_writable`] to find out early whether it works. Needs the
    ///   `s3` feature (on by default): without it an S3 URL is [`StoreError::NotBuilt`].
    ///
    /// Any other scheme, or a directory that cannot be created (e.g. below a regular file), is
    /// [`StoreError::InvalidUrl`].
    pub fn open(url: &str) -> Result<Store, StoreError> {
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: redact_url(url),
            reason: scrub(&reason, &url_secrets(url)),
        };
        if url.trim().is_empty() {
            return Err(invalid("empty location".into()));
        }
        match split_scheme(url) {
            None => open_local(url, PathBuf::from(url)),
            Some((scheme, rest)) => match StoreKind::of_scheme(Some(scheme)) {
                Some(StoreKind::Local) => {
                    let path = match rest.strip_prefix("localhost") {
                        Some(p) => p,
                        None => rest,
                    };
                    if !path.starts_with('/') {
                        return Err(invalid(
                            "a file URL needs an absolute path (file:///abs/path)".into(),
                        ));
                    }
                    open_local(url, PathBuf::from(percent_decode(path).map_err(invalid)?))
                }
                Some(StoreKind::Memory) => {
                    let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                    let inner = {
                        let mut registry = memory_registry()
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner());
                        Arc::clone(registry.entry(name.to_string()).or_default())
                    };
                    let store = Store::from_object_store(inner, format!("memory://{name}"));
                    Ok(Store {
                        kind: StoreKind::Memory,
                        ..store
                    }
                    .child(prefix))
                }
                Some(StoreKind::S3) => open_s3(url, rest),
                Some(StoreKind::Other) | None => Err(invalid(format!(
                    "unsupported scheme {scheme}://; supported: {}",
                    supported_store_urls()
                ))),
            },
        }
    }

    /// Wraps any [`ObjectStore`] (e.g. an `object_store::throttle::ThrottledStore` around
    /// another store, for benchmarks) as a [`Store`] at its root. `url` is only shown in
    /// messages and must not contain a secret.
    pub fn from_object_store(inner: Arc<dyn ObjectStore>, url: impl Into<String>) -> Store {
        let url: String = url.into();
        Store {
            inner,
            kind: StoreKind::Other,
            prefix: Path::default(),
            url: url.trim_end_matches('/').into(),
            local_root: None,
            requests: None,
        }
    }

    /// The full location of this handle (root URL + prefix), for messages; never a credential.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Which kind of backend this handle talks to.
    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// The backend client, e.g. to wrap it in a decorator and rebuild a handle with
    /// [`Store::from_object_store`].
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.inner)
    }

    /// A view of this store below `prefix` (relative to this handle); its [`url`](Self::url)
    /// shows the full location. Empty segments are ignored and characters that are not valid in
    /// an object name are percent-encoded, so this never fails.
    pub fn child(&self, prefix: &str) -> Store {
        let sub = Path::from(prefix);
        if sub.parts_count() == 0 {
            return self.clone();
        }
        let prefix: Path = self.prefix.parts().chain(sub.parts()).collect();
        Store {
            inner: Arc::clone(&self.inner),
            kind: self.kind,
            url: format!("{}/{}", self.url, sub).into(),
            prefix,
            local_root: self.local_root.clone(),
            requests: self.requests.clone(),
        }
    }

    /// This handle counting its requests (and those of its [`child`](Self::child)ren, and of
    /// an [`ObjectStoreChannel`](crate::ObjectStoreChannel) on it) in `counter`.
    pub fn with_request_counter(mut self, counter: RequestCounter) -> Store {
        self.requests = Some(counter);
        self
    }

    /// The counter this handle counts its requests in, if any.
    pub fn request_counter(&self) -> Option<&RequestCounter> {
        self.requests.as_ref()
    }

    /// Counts `n` requests of `kind`, where this handle counts.
    pub(crate) fn count(&self, kind: Request, n: u64) {
        if let Some(counter) = &self.requests {
            counter.add(kind, n);
        }
    }

    /// The directory that holds the objects below `prefix` (relative to this handle), for a
    /// store on the local filesystem; `None` for any other. A writer there must keep the
    /// store's rules: a file appears whole (written beside it as `name#N`, renamed into place).
    pub fn local_dir(&self, prefix: &str) -> Option<PathBuf> {
        let root = self.local_root.as_deref()?;
        let mut dir = root.to_path_buf();
        dir.extend(self.prefix.parts().map(|part| part.as_ref().to_string()));
        dir.extend(
            Path::from(prefix)
                .parts()
                .map(|part| part.as_ref().to_string()),
        );
        Some(dir)
    }

    /// The location of `key` for messages: this handle's URL + the key.
    pub fn location(&self, key: &str) -> String {
        let key = key.trim_start_matches('/');
        if key.is_empty() {
            self.url.to_string()
        } else {
            format!("{}/{}", self.url, key)
        }
    }

    /// Writes an object, replacing any previous one.
    ///
    /// Visibility is atomic on every backend: a reader sees either the previous object or the
    /// complete new one, never a partial write. The local backend writes a staging file next to
    /// the target (`key#N`, hidden from listings) and renames it over the target; the in-memory
    /// backend swaps the entry under a lock; an S3 PUT becomes visible only once complete.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StoreError> {
        let path = self.path(key)?;
        trace!(location = %self.location(key), len = bytes.len(), "put");
        let payload = PutPayload::from(bytes);
        self.put_racing_removals(key, || self.inner.put(&path, payload.clone()))
            .await
            .map_err(|e| self.backend(key, e))
    }

    /// Runs `put`, counting each attempt; on the local backend, again when it raced the removal
    /// of its parent directory (at most [`LOCAL_PUT_ATTEMPTS`] times in all). The local backend
    /// removes directories that deletes leave empty; a put that creates its parent directory
    /// while a concurrent delete removes it fails. Rare and harmless: try again. Not a retry of
    /// a failed request ([`crate::retry`]): the put never reached its file.
    async fn put_racing_removals<F, Fut>(&self, key: &str, mut put: F) -> object_store::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = object_store::Result<object_store::PutResult>>,
    {
        let mut attempt = 1;
        loop {
            self.count(Request::Put, 1);
            match put().await {
                Ok(_) => return Ok(()),
                // A create-if-absent that found its target (only `put_if_absent` asks): final.
                Err(e @ object_store::Error::AlreadyExists { .. }) => return Err(e),
                Err(e)
                    if self.kind == StoreKind::Local
                        && attempt < LOCAL_PUT_ATTEMPTS
                        && raced_directory_removal(&e) =>
                {
                    debug!(location = %self.location(key), attempt, error = %e, "put raced a directory removal, retrying");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes an object only if there is none at `key` (`object_store`'s [`PutMode::Create`]):
    /// of two writers of one key, exactly one succeeds and the other gets
    /// [`StoreError::AlreadyExists`], whatever the timing; the object is never replaced.
    ///
    /// Visibility is atomic as for [`Store::put`]. The local backend writes a staging file and
    /// links it to the target, which fails if the target exists; the in-memory backend checks
    /// and inserts under its lock; S3 sends the PUT with `If-None-Match: *` (S3 answers 412
    /// when the object exists; an S3-compatible server without conditional writes makes this
    /// a [`StoreError::Backend`] error, never a silent overwrite).
    pub async fn put_if_absent(&self, key: &str, bytes: Bytes) -> Result<(), StoreError> {
        let path = self.path(key)?;
        trace!(location = %self.location(key), len = bytes.len(), "put if absent");
        let payload = PutPayload::from(bytes);
        let options = PutOptions::from(PutMode::Create);
        // As for `put`; an existing target is `AlreadyExists`, not an I/O error.
        self.put_racing_removals(key, || {
            self.inner.put_opts(&path, payload.clone(), options.clone())
        })
        .await
        .map_err(|e| match e {
            object_store::Error::AlreadyExists { .. } => StoreError::AlreadyExists {
                location: self.location(key),
            },
            e => self.backend(key, e),
        })
    }

    /// Reads an object; a missing object is [`StoreError::NotFound`].
    pub async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        match self.get_opt(key).await? {
            Some(bytes) => Ok(bytes),
            None => Err(StoreError::NotFound {
                location: self.location(key),
            }),
        }
    }

    /// Reads an object; `None` if it is missing.
    pub async fn get_opt(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let path = self.path(key)?;
        trace!(location = %self.location(key), "get");
        let result = match self.inner.get(&path).await {
            Ok(result) => result,
            Err(e) if is_not_found(&e) => {
                self.count(Request::Miss, 1);
                return Ok(None);
            }
            Err(e) => {
                self.count(Request::Get, 1);
                return Err(self.backend(key, e));
            }
        };
        self.count(Request::Get, 1);
        match result.bytes().await {
            Ok(bytes) => Ok(Some(bytes)),
            // Deleted between the open and the read (remote stores stream the body).
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(self.backend(key, e)),
        }
    }

    /// Reads an object as a stream of chunks, so that an object larger than memory can be
    /// read (an input of `mlless prepare` on S3); a missing object is
    /// [`StoreError::NotFound`].
    pub async fn get_stream(
        &self,
        key: &str,
    ) -> Result<futures::stream::BoxStream<'static, Result<Bytes, StoreError>>, StoreError> {
        self.get_stream_from(key, 0).await
    }

    /// Reads an object from byte `offset` to its end as a stream of chunks (what a map task of
    /// a distributed `mlless prepare` reads of its input); an offset at or past the end gives
    /// an empty stream, a missing object is [`StoreError::NotFound`].
    pub async fn get_stream_from(
        &self,
        key: &str,
        offset: u64,
    ) -> Result<futures::stream::BoxStream<'static, Result<Bytes, StoreError>>, StoreError> {
        use futures::StreamExt;
        let path = self.path(key)?;
        trace!(location = %self.location(key), offset, "get (streamed)");
        if offset > 0 && offset >= self.size(key).await? {
            return Ok(futures::stream::empty().boxed());
        }
        let options = object_store::GetOptions {
            range: (offset > 0).then_some(object_store::GetRange::Offset(offset)),
            ..Default::default()
        };
        let outcome = self.inner.get_opts(&path, options).await;
        match &outcome {
            Err(e) if is_not_found(e) => self.count(Request::Miss, 1),
            _ => self.count(Request::Get, 1),
        }
        let result = match outcome {
            Ok(result) => result,
            Err(e) if is_not_found(&e) => {
                return Err(StoreError::NotFound {
                    location: self.location(key),
                });
            }
            Err(e) => return Err(self.backend(key, e)),
        };
        let location = self.location(key);
        Ok(result
            .into_stream()
            .map(move |chunk| {
                chunk.map_err(|source| StoreError::Backend {
                    location: location.clone(),
                    source,
                })
            })
            .boxed())
    }

    /// The size of an object in bytes; a missing object is [`StoreError::NotFound`].
    pub async fn size(&self, key: &str) -> Result<u64, StoreError> {
        let path = self.path(key)?;
        self.count(Request::Head, 1);
        match self.inner.head(&path).await {
            Ok(meta) => Ok(meta.size),
            Err(e) if is_not_found(&e) => Err(StoreError::NotFound {
                location: self.location(key),
            }),
            Err(e) => Err(self.backend(key, e)),
        }
    }

    /// Whether an object exists.
    pub async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        let path = self.path(key)?;
        self.count(Request::Head, 1);
        match self.inner.head(&path).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(self.backend(key, e)),
        }
    }

    /// Lists the keys below `prefix` (recursively), relative to this handle, sorted.
    ///
    /// Prefixes match whole segments, as in `object_store`: `"a"` matches `a/x` and `a/b/y` but
    /// neither `ab/x` nor the object `a` itself. An empty prefix lists the whole handle.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let paths = self.list_paths(prefix).await?;
        let mut keys: Vec<String> = paths
            .iter()
            .filter_map(|path| {
                let rest = path.prefix_match(&self.prefix)?;
                let key = rest
                    .map(|part| part.as_ref().to_string())
                    .collect::<Vec<_>>();
                Some(key.join("/"))
            })
            .collect();
        keys.sort_unstable();
        Ok(keys)
    }

    /// Deletes an object; a missing object is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.path(key)?;
        trace!(location = %self.location(key), "delete");
        self.count(Request::Delete, 1);
        match self.inner.delete(&path).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(self.backend(key, e)),
        }
    }

    /// Deletes several objects (in bulk where the backend can); missing ones are not an error.
    pub fn delete_many<I>(
        &self,
        keys: I,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + use<I>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        // Resolve the keys before the future so that it holds no borrow of the iterator.
        let paths: Result<Vec<Path>, StoreError> =
            keys.into_iter().map(|k| self.path(k.as_ref())).collect();
        let this = self.clone();
        async move { this.delete_paths(paths?, "").await }
    }

    /// Deletes every object below `prefix` (whole segments, as in [`Store::list`]); an empty
    /// prefix empties the whole handle. Objects written while this runs may survive.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<(), StoreError> {
        let paths = self.list_paths(prefix).await?;
        trace!(location = %self.location(prefix), objects = paths.len(), "delete prefix");
        self.delete_paths(paths, prefix).await
    }

    /// Checks that this location accepts writes, by writing, reading back and deleting a small
    /// probe object; a failure is [`StoreError::NotWritable`] naming the location.
    pub async fn check_writable(&self) -> Result<(), StoreError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let key = format!(
            ".mlless-write-probe-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.path(&key)?;
        let not_writable = |source| StoreError::NotWritable {
            location: self.url.to_string(),
            source,
        };
        let probe = Bytes::from_static(b"mlless write probe");
        self.count(Request::Put, 1);
        self.count(Request::Get, 1);
        self.count(Request::Delete, 1);
        self.inner
            .put(&path, PutPayload::from(probe.clone()))
            .await
            .map_err(not_writable)?;
        let read = async { self.inner.get(&path).await?.bytes().await }.await;
        let deleted = self.inner.delete(&path).await;
        if read.map_err(not_writable)? != probe {
            return Err(not_writable(object_store::Error::Generic {
                store: "mlless",
                source: "the probe object read back differs from what was written".into(),
            }));
        }
        match deleted {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(not_writable(e)),
        }
    }

    /// Resolves a key to the backend's path, validating it.
    fn path(&self, key: &str) -> Result<Path, StoreError> {
        let invalid = |reason: String| StoreError::InvalidKey {
            location: self.location(key),
            reason,
        };
        check_key(key).map_err(invalid)?;
        let rel = Path::parse(key).map_err(|e| invalid(e.to_string()))?;
        Ok(self.prefix.parts().chain(rel.parts()).collect())
    }

    async fn list_paths(&self, prefix: &str) -> Result<Vec<Path>, StoreError> {
        // A prefix may end with '/' ("a/" is "a": prefixes match whole segments anyway).
        let trimmed = prefix.trim_matches('/');
        let full = if trimmed.is_empty() {
            self.prefix.clone()
        } else {
            self.path(trimmed)?
        };
        let root = if full.parts_count() == 0 {
            None
        } else {
            Some(&full)
        };
        let paths: Vec<Path> = self
            .inner
            .list(root)
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|source| self.backend(prefix, source))?;
        self.count(Request::List, pages(paths.len()));
        Ok(paths)
    }

    async fn delete_paths(&self, paths: Vec<Path>, what: &str) -> Result<(), StoreError> {
        if paths.is_empty() {
            return Ok(());
        }
        self.count(Request::Delete, pages(paths.len()));
        let locations = futures::stream::iter(paths.into_iter().map(Ok)).boxed();
        let mut results = self.inner.delete_stream(locations);
        while let Some(result) = results.next().await {
            match result {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(self.backend(what, e)),
            }
        }
        Ok(())
    }

    fn backend(&self, key: &str, source: object_store::Error) -> StoreError {
        StoreError::Backend {
            location: self.location(key),
            source,
        }
    }
}

/// How often a local put is tried when it races the removal of its parent directory.
const LOCAL_PUT_ATTEMPTS: u32 = 10;

/// Characters refused in keys: `object_store` percent-encodes them (or the local backend
/// reserves them), so they would not read back identically on every backend.
const FORBIDDEN_KEY_CHARS: &[char] = &[
    '\\', '{', '}', '^', '%', '`', '[', ']', '"', '<', '>', '~', '#', '|', '*', '?',
];

/// Validates a key (or key prefix): non-empty `/`-separated segments, none `.` or `..`, no
/// control or forbidden character.
pub(crate) fn check_key(key: &str) -> Result<(), String> {
    let trimmed = key.trim_start_matches('/');
    if trimmed.is_empty() {
        return Err("empty key".into());
    }
    for segment in trimmed.split('/') {
        check_segment(segment)?;
    }
    Ok(())
}

/// Validates one segment of a key.
pub(crate) fn check_segment(segment: &str) -> Result<(), String> {
    if segment.is_empty() {
        return Err("empty path segment (\"//\")".into());
    }
    if segment == "." || segment == ".." {
        return Err(format!("segment {segment:?} is not allowed"));
    }
    if segment.contains('/') {
        return Err("'/' is not allowed here".into());
    }
    if let Some(c) = segment
        .chars()
        .find(|c| c.is_control() || FORBIDDEN_KEY_CHARS.contains(c))
    {
        return Err(format!("character {c:?} is not allowed"));
    }
    Ok(())
}

/// Whether an error means "no such object", including a local path whose parent is a file
/// (which S3 or memory would also call not found).
fn is_not_found(e: &object_store::Error) -> bool {
    if matches!(e, object_store::Error::NotFound { .. }) {
        return true;
    }
    matches!(
        io_error_kind(e),
        Some(std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory)
    )
}

/// The kind of the I/O error underlying a (local backend's) error, if any.
fn io_error_kind(e: &object_store::Error) -> Option<std::io::ErrorKind> {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        source = err.source();
    }
    None
}

/// Whether a local put failed because a concurrent delete removed (or was removing) the
/// directory it was creating: `create_dir_all` then fails with "not found" or, when the
/// directory vanishes between its `mkdir` and its check, "already exists".
fn raced_directory_removal(e: &object_store::Error) -> bool {
    matches!(
        io_error_kind(e),
        Some(std::io::ErrorKind::NotFound | std::io::ErrorKind::AlreadyExists)
    )
}

fn open_local(url: &str, path: PathBuf) -> Result<Store, StoreError> {
    let invalid = |reason: String| StoreError::InvalidUrl {
        url: redact_url(url),
        reason: scrub(&reason, &url_secrets(url)),
    };
    if path.exists() && !path.is_dir() {
        return Err(invalid(format!(
            "{} exists and is not a directory",
            path.display()
        )));
    }
    std::fs::create_dir_all(&path)
        .map_err(|e| invalid(format!("cannot create directory {}: {e}", path.display())))?;
    let canonical = std::fs::canonicalize(&path)
        .map_err(|e| invalid(format!("cannot resolve {}: {e}", path.display())))?;
    let fs = LocalFileSystem::new_with_prefix(&canonical)
        .map_err(|e| invalid(e.to_string()))?
        // Remove the directories that deletes leave empty, so that a channel's per-step
        // directories do not pile up.
        .with_automatic_cleanup(true);
    let root = canonical.to_string_lossy();
    let store = Store::from_object_store(Arc::new(fs), format!("file://{root}"));
    Ok(Store {
        kind: StoreKind::Local,
        local_root: Some(canonical.into()),
        ..store
    })
}

/// Without the `s3` feature: [`StoreError::NotBuilt`].
#[cfg(not(feature = "s3"))]
fn open_s3(url: &str, _rest: &str) -> Result<Store, StoreError> {
    Err(StoreError::NotBuilt {
        url: redact_url(url),
        feature: "s3",
    })
}

#[cfg(feature = "s3")]
fn open_s3(url: &str, rest: &str) -> Result<Store, StoreError> {
    let invalid = |reason: String| StoreError::InvalidUrl {
        url: redact_url(url),
        reason: scrub(&reason, &url_secrets(url)),
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.contains('@') {
        return Err(invalid(
            "credentials in the URL are not supported; use the AWS_* variables or a profile \
             (AWS_PROFILE)"
                .into(),
        ));
    }
    if bucket.is_empty() {
        return Err(invalid("missing bucket name (s3://bucket/prefix)".into()));
    }
    let chain = mlless_aws::shared();
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_credentials(Arc::new(ChainCredentials(chain)));
    if let Some(region) = chain.region() {
        builder = builder.with_region(region);
    }
    let endpoint = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()));
    if let Some(endpoint) = &endpoint {
        builder = builder.with_endpoint(endpoint.trim());
        if endpoint.trim().starts_with("http://") {
            builder = builder.with_allow_http(true);
        }
    }
    let s3 = builder.build().map_err(|e| invalid(e.to_string()))?;
    let store = Store::from_object_store(Arc::new(s3), format!("s3://{bucket}"));
    Ok(Store {
        kind: StoreKind::S3,
        ..store
    }
    .child(prefix))
}

/// The S3 client's credentials: those of the chain the Lambda invoker uses too
/// ([`mlless_aws::shared`]), refreshed before they expire.
#[cfg(feature = "s3")]
#[derive(Debug)]
struct ChainCredentials(&'static mlless_aws::AwsChain);

#[cfg(feature = "s3")]
#[async_trait::async_trait]
impl object_store::CredentialProvider for ChainCredentials {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        let credentials = self
            .0
            .credentials()
            .await
            .map_err(|e| object_store::Error::Generic {
                store: "S3",
                source: Box::new(e),
            })?;
        Ok(Arc::new(object_store::aws::AwsCredential {
            key_id: credentials.access_key_id().to_owned(),
            secret_key: credentials.secret_access_key().to_owned(),
            token: credentials.session_token().map(str::to_owned),
        }))
    }
}

#[cfg(test)]
mod tests;
