//! Where there is no inotify (not Linux), a collect on a local directory polls with backoff, as
//! on every other store: the watcher of [`wake`](super::wake) cannot be made.

use std::path::Path;

use tokio::sync::Notify;

/// No watcher can be made here.
#[derive(Debug)]
pub(crate) enum DirWatcher {}

/// No directory is watched here.
pub(crate) enum Watching {}

impl DirWatcher {
    /// Always `None`: the collects poll.
    pub(crate) fn new() -> Option<DirWatcher> {
        None
    }

    /// Never called: there is no watcher.
    pub(crate) fn watch(&self, _dir: &Path) -> Option<Watching> {
        match *self {}
    }

    /// Never called: there is no watcher.
    pub(crate) fn landed(&self) -> &Notify {
        match *self {}
    }
}
