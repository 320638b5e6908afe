//! The files an input of `prepare` is read from: one file or object, standard input, or the
//! part files of a local directory or of a prefix on a store (`s3://bucket/day0/`), read in name
//! order as one input.
//!
//! A part whose name (or the name of a folder it is in, below the prefix) starts with `_` or
//! `.` is skipped, as are empty ones: the markers and empty partitions that Spark, Hadoop and
//! friends leave beside their part files (`_SUCCESS`, `.part-0.crc`).

use mlless_function::InputError;
use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt};
use mlless_store::{Store, StoreError};

use mlless_function::{Result, RuntimeError};

/// Objects whose sizes are asked for at once.
const HEAD_CONCURRENCY: usize = 16;

/// The parts of one input, in the order they are read.
pub(super) enum InputParts {
    /// Standard input (`-`).
    Stdin,
    /// Local files: a file, or the files of a directory, each's path as the user named it.
    Files(Vec<PathBuf>),
    /// Objects of a store: the store (the prefix's, or the object's folder) and each's key and
    /// size.
    Objects(Store, Vec<(String, u64)>),
}

impl InputParts {
    /// The parts of `input`: `-`, a local file or directory, or a store URL naming an object
    /// or a prefix (a URL ending in `/`, or one that names no object but has objects below it).
    pub(super) async fn resolve(input: &Path) -> Result<InputParts> {
        if input == Path::new(mlless_data::STDIN_PATH) {
            return Ok(InputParts::Stdin);
        }
        match input.to_str().filter(|text| text.contains("://")) {
            Some(url) => resolve_stored(url).await,
            None => resolve_local(input),
        }
    }

    /// How many parts there are.
    pub(super) fn len(&self) -> usize {
        match self {
            InputParts::Stdin => 1,
            InputParts::Files(files) => files.len(),
            InputParts::Objects(_, objects) => objects.len(),
        }
    }

    /// The name each part goes by in errors: the file's path, the object's location.
    pub(super) fn names(&self) -> Vec<PathBuf> {
        match self {
            InputParts::Stdin => vec![PathBuf::from(mlless_data::STDIN_NAME)],
            InputParts::Files(files) => files.clone(),
            InputParts::Objects(store, objects) => objects
                .iter()
                .map(|(key, _)| PathBuf::from(store.location(key)))
                .collect(),
        }
    }

    /// Opens every part for reading on a blocking thread (an object as a stream, never whole in
    /// memory), each with its name; not yet decompressed.
    pub(super) fn open(&self) -> Result<Vec<(InputReader, PathBuf)>> {
        let names = self.names();
        let readers: Vec<InputReader> = match self {
            InputParts::Stdin => vec![mlless_data::open_input(Path::new(mlless_data::STDIN_PATH))?],
            InputParts::Files(files) => files
                .iter()
                .map(|file| mlless_data::open_input(file).map_err(RuntimeError::from))
                .collect::<Result<_>>()?,
            InputParts::Objects(store, objects) => objects
                .iter()
                .map(|(key, _)| stream_object(store, key))
                .collect(),
        };
        Ok(readers.into_iter().zip(names).collect())
    }
}

/// A reader of an input, before it is decompressed.
pub(super) type InputReader = Box<dyn std::io::BufRead + Send>;

/// An object's bytes as a reader, opened when first read: the parser reads synchronously, and
/// pulls the stream through the bridge chunk by chunk (so it must be read on a blocking thread).
fn stream_object(store: &Store, key: &str) -> InputReader {
    let (store, key) = (store.clone(), key.to_string());
    let stream = futures::stream::once(async move { store.get_stream(&key).await })
        .map_ok(|chunks| chunks.map_err(std::io::Error::other))
        .map_err(std::io::Error::other)
        .try_flatten()
        .boxed();
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    Box::new(std::io::BufReader::with_capacity(1 << 20, reader))
}

/// Whether a part at `key` (below the prefix) is a marker or hidden file, not data.
fn is_marker(key: &str) -> bool {
    key.split('/')
        .any(|segment| segment.starts_with('_') || segment.starts_with('.'))
}

/// The parts of an input on a store.
async fn resolve_stored(url: &str) -> Result<InputParts> {
    // The last segment after the scheme's `//`: `s3://bucket` names the whole bucket.
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (parent, name) = match rest.trim_end_matches('/').rsplit_once('/') {
        Some((parent, name)) if !url.ends_with('/') => (format!("{scheme}://{parent}"), name),
        _ => (String::new(), ""),
    };
    if !name.is_empty() {
        let store = Store::open(&parent)?;
        match store.size(name).await {
            Ok(size) => return Ok(InputParts::Objects(store, vec![(name.to_string(), size)])),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let prefix = Store::open(url.trim_end_matches('/'))?;
    let keys: Vec<String> = prefix
        .list("")
        .await?
        .into_iter()
        .filter(|key| !is_marker(key))
        .collect();
    let objects: Vec<(String, u64)> = futures::stream::iter(keys)
        .map(|key| {
            let prefix = &prefix;
            async move { prefix.size(&key).await.map(|size| (key, size)) }
        })
        .buffered(HEAD_CONCURRENCY)
        .try_filter(|(_, size)| std::future::ready(*size > 0))
        .try_collect()
        .await?;
    if objects.is_empty() {
        return Err(InputError::Empty {
            input: url.to_string(),
            directory: false,
        }
        .into());
    }
    Ok(InputParts::Objects(prefix, objects))
}

/// The parts of a local input: the file, or a directory's files in name order (its
/// subdirectories too, as a prefix's folders are).
fn resolve_local(input: &Path) -> Result<InputParts> {
    if !input.is_dir() {
        return Ok(InputParts::Files(vec![input.to_path_buf()]));
    }
    let mut files = Vec::new();
    let mut dirs = vec![input.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let listing = |source| InputError::Io {
            path: dir.display().to_string(),
            given: true,
            source,
        };
        let entries = std::fs::read_dir(&dir).map_err(listing)?;
        for entry in entries {
            let entry = entry.map_err(listing)?;
            let path = entry.path();
            let name = entry.file_name();
            if is_marker(&name.to_string_lossy()) {
                continue;
            }
            let meta = std::fs::metadata(&path).map_err(|source| InputError::Io {
                path: path.display().to_string(),
                given: false,
                source,
            })?;
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.len() > 0 {
                files.push(path);
            }
        }
    }
    // In the order of the names below the directory, as a store lists a prefix.
    files.sort_by(|a, b| a.strip_prefix(input).ok().cmp(&b.strip_prefix(input).ok()));
    if files.is_empty() {
        return Err(InputError::Empty {
            input: input.display().to_string(),
            directory: true,
        }
        .into());
    }
    Ok(InputParts::Files(files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_and_hidden_files_are_not_parts() {
        assert!(is_marker("_SUCCESS") && is_marker(".part-0.crc") && is_marker("_tmp/part-1"));
        assert!(!is_marker("part-00000") && !is_marker("day=1/part-0.gz"));
    }

    #[tokio::test]
    async fn a_directory_and_a_prefix_list_the_same_parts_in_name_order() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path().join("in");
        for (name, text) in [
            ("b/part-1", "x\n"),
            ("a", "y\n"),
            ("b/part-0", "z\n"),
            ("_SUCCESS", ""),
            ("empty", ""),
            (".a.crc", "c"),
        ] {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        let expected = ["a", "b/part-0", "b/part-1"];
        let InputParts::Files(files) = InputParts::resolve(&root).await.expect("dir") else {
            panic!("local files");
        };
        let relative: Vec<_> = files.iter().map(|f| f.strip_prefix(&root).ok()).collect();
        assert_eq!(relative, expected.map(|e| Some(Path::new(e))));

        let url = format!("file://{}", root.display());
        for input in [url.clone(), format!("{url}/")] {
            let parts = InputParts::resolve(Path::new(&input))
                .await
                .expect("prefix");
            let InputParts::Objects(_, objects) = &parts else {
                panic!("objects");
            };
            let keys: Vec<_> = objects.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, expected, "{input}");
            assert_eq!(parts.names()[0], Path::new(&format!("{url}/a")));
        }
        // An object is itself, not the prefix of its name.
        let one = InputParts::resolve(Path::new(&format!("{url}/a")))
            .await
            .expect("object");
        assert_eq!(one.len(), 1);
        let err = InputParts::resolve(Path::new(&format!("{url}/nothing")))
            .await
            .err()
            .expect("missing");
        assert!(err.to_string().contains("no part files below it"), "{err}");
    }
}
