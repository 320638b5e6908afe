//! The message files of an [`ObjectStoreChannel`](super::ObjectStoreChannel) on a local
//! directory, read and written with the file system's own calls on the calling thread.
//!
//! Written by hand rather than through `object_store`'s `LocalFileSystem`, which runs every
//! request on tokio's blocking pool: a step's messages are a few small files in the page cache,
//! and the two thread hand-offs of each request cost more than the request (at P = 4 on two
//! cores, most of a step). The files are the store's own — a message is written to a staging
//! file `key#N` (which listings do not show) and renamed into place, so a reader sees it whole
//! or not at all — so the store's listing and `delete_prefix` (the channel's cleanup) see them
//! as objects.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::store::StoreError;

/// Attempts at creating a staging file whose directories other workers remove meanwhile (an
/// emptied step's directory is removed, and the topic's and job's above it if they empty too; a
/// publisher makes them again).
const ATTEMPTS: u32 = 32;

/// Writes `bytes` as the file `path`, atomically: to a staging file beside it, renamed over it.
pub(crate) fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("a message file needs a name"))?;
    // Digits only after the '#': what marks a staging file, hidden from listings.
    let staging = path.with_file_name(format!(
        "{}#{}{:012}",
        name.to_string_lossy(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let mut attempt = 1;
    let mut file = loop {
        match std::fs::File::create_new(&staging) {
            Ok(file) => break file,
            Err(e) if e.kind() == io::ErrorKind::NotFound && attempt < ATTEMPTS => {
                attempt += 1;
                // Fails too when a directory it made is removed before the next is made in it:
                // the next attempt makes it again.
                if let Some(dir) = path.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
            }
            Err(e) => return Err(e),
        }
    };
    let written = file
        .write_all(bytes)
        .and_then(|()| std::fs::rename(&staging, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&staging);
    }
    written
}

/// The file `path`, or `None` if it is not there (yet).
pub(crate) fn read(path: &Path) -> io::Result<Option<Bytes>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(Bytes::from(bytes))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes the files `paths` (those already gone are not an error), then the directories they
/// leave empty, from the innermost up to `top` at most.
pub(crate) fn remove(paths: &[PathBuf], top: &Path) -> io::Result<()> {
    for path in paths {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let mut dirs: Vec<&Path> = paths.iter().filter_map(|p| p.parent()).collect();
    dirs.dedup();
    for dir in dirs {
        for empty in dir.ancestors().take_while(|d| d.starts_with(top)) {
            // Fails once a directory holds something: the ones above it hold it too.
            if std::fs::remove_dir(empty).is_err() {
                break;
            }
        }
    }
    Ok(())
}

/// A failure of a message file, as the store reports its own.
pub(crate) fn store_error(location: String, error: io::Error) -> StoreError {
    StoreError::Backend {
        location,
        source: object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_file_is_written_whole_and_removed_with_its_empty_directories() {
        let root = tempfile::tempdir().expect("tempdir");
        let job = root.path().join("job");
        let path = job.join("topic").join("000001").join("00002");
        assert_eq!(read(&path).expect("read"), None);
        write(&path, b"first").expect("write");
        write(&path, b"second").expect("overwrite");
        assert_eq!(read(&path).expect("read").as_deref(), Some(&b"second"[..]));
        let left: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .collect();
        assert_eq!(left.len(), 1, "no staging file is left: {left:?}");
        remove(std::slice::from_ref(&path), &job).expect("remove");
        remove(std::slice::from_ref(&path), &job).expect("gone already");
        assert!(!job.exists(), "the emptied directories are removed");
        assert!(root.path().is_dir(), "not above the top");

        // Empty directories left by a collect that was stopped go; one with a file stays.
        let kept = job.join("keys").join("stop");
        std::fs::create_dir_all(job.join("stats").join("000033")).expect("mkdir");
        write(&kept, b"s").expect("write");
        crate::store::remove_local_leftovers(&job);
        assert!(!job.join("stats").exists(), "empty directories removed");
        assert!(kept.is_file(), "a file and its directories stay");
        std::fs::remove_file(&kept).expect("remove");
        // The staging file of a writer killed before its rename goes too.
        let staged = job.join("updates").join("000034");
        std::fs::create_dir_all(&staged).expect("mkdir");
        std::fs::write(staged.join("00001#4242000000000007"), b"half").expect("staged");
        crate::store::remove_local_leftovers(&job);
        assert!(!job.exists());
    }
}
