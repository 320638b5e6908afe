//! Waking a collect on a local directory when a message lands, instead of on a backoff timer:
//! the embedded default channel's workers are processes of one machine, whose kernel can tell
//! them (inotify on Linux, FSEvents on macOS, through the `notify` crate) the moment a message is
//! renamed into the step's directory.
//!
//! Polling stays the fallback, and stays correct on its own: a collect registers for the
//! wake-up before it looks, so a message that lands between its look and its sleep still wakes
//! it; one that the platform does not report (a watch that could not be set, a directory
//! removed and made again) costs at most one backoff.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use notify::event::{EventKind, ModifyKind, RenameMode};
use notify::{RecursiveMode, Watcher};
use tokio::sync::Notify;
use tracing::debug;

/// One watcher per channel handle: the directories its collects wait on, and the wake-up they
/// wait for.
pub(crate) struct DirWatcher {
    watcher: Mutex<notify::RecommendedWatcher>,
    landed: Arc<Notify>,
}

impl std::fmt::Debug for DirWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirWatcher").finish_non_exhaustive()
    }
}

impl DirWatcher {
    /// A watcher, or `None` if the platform gives none (the collects then poll).
    pub(crate) fn new() -> Option<DirWatcher> {
        let landed = Arc::new(Notify::new());
        let wake = Arc::clone(&landed);
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|event| is_landing(&event)) {
                wake.notify_waiters();
            }
        });
        match watcher {
            Ok(watcher) => Some(DirWatcher {
                watcher: Mutex::new(watcher),
                landed,
            }),
            Err(error) => {
                debug!(%error, "no file watcher: collects poll with backoff");
                None
            }
        }
    }

    /// Watches `dir` (made if missing) until the guard is dropped; `None` if it cannot be
    /// watched (the collect then polls).
    pub(crate) fn watch(&self, dir: &Path) -> Option<Watching<'_>> {
        // The directories it makes, deepest first: removed again if they stay empty.
        let made: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| !d.exists())
            .map(Path::to_path_buf)
            .collect();
        if let Err(error) = std::fs::create_dir_all(dir) {
            debug!(dir = %dir.display(), %error, "cannot make the directory to watch");
            return None;
        }

        let mut watcher = self.watcher.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(error) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            debug!(dir = %dir.display(), %error, "cannot watch: polling with backoff");
            remove_empty(&made);
            return None;
        }
        Some(Watching {
            watcher: self,
            dir: dir.to_path_buf(),
            made,
        })
    }

    /// What a collect waits on: notified whenever a message may have landed in a watched
    /// directory.
    pub(crate) fn landed(&self) -> &Notify {
        &self.landed
    }
}

/// A directory being watched; dropped, it is no longer watched, and the directories made for it
/// are removed if they are empty (a collect that gave up leaves no directory behind).
pub(crate) struct Watching<'a> {
    watcher: &'a DirWatcher,
    dir: PathBuf,
    made: Vec<PathBuf>,
}

/// Removes the directories `made` for a watch, deepest first, up to the first that is not
/// empty (once a message is in one). A publisher that finds a directory gone makes it again (the
/// store's write creates missing parents).
fn remove_empty(made: &[PathBuf]) {
    for dir in made {
        if std::fs::remove_dir(dir).is_err() {
            break;
        }
    }
}

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        let mut watcher = self
            .watcher
            .watcher
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // The directory may be gone already (the watch with it): nothing to undo then.
        let _ = watcher.unwatch(&self.dir);
        drop(watcher);
        remove_empty(&self.made);
    }
}

/// Whether `event` may be a message landing: an object renamed into place or created, not the
/// store's staging file (`key#N`) that becomes it.
fn is_landing(event: &notify::Event) -> bool {
    let kind = matches!(
        event.kind,
        EventKind::Create(_)
            | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Any))
            | EventKind::Any
    );
    kind && event.paths.iter().any(|path| {
        path.file_name()
            .is_some_and(|name| !name.to_string_lossy().contains('#'))
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_renamed_into_a_watched_directory_wakes_the_waiter() {
        let Some(watcher) = DirWatcher::new() else {
            eprintln!("no watcher on this platform: skipped");
            return;
        };
        let root = tempfile::tempdir().expect("tempdir");
        let dir = root.path().join("step");
        let watching = watcher.watch(&dir).expect("watch");
        assert!(dir.is_dir(), "made");
        // A staging file is not a landing; its rename into place is.
        let staged = dir.join("00001#1");
        std::fs::write(&staged, b"m").expect("write");
        let notified = watcher.landed().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        std::fs::rename(&staged, dir.join("00001")).expect("rename");
        tokio::time::timeout(Duration::from_secs(5), notified)
            .await
            .expect("woken by the rename");
        drop(watching);
        assert!(dir.is_dir(), "a directory with a message stays");

        let empty = root.path().join("topic").join("empty");
        drop(watcher.watch(&empty).expect("watch"));
        assert!(
            !root.path().join("topic").exists(),
            "the empty directories it made are removed"
        );
        assert!(root.path().is_dir(), "not the ones it found");
    }
}
