//! A local location's directory: where a path or `file://` URL points, and what deleting its
//! objects leaves behind.

use std::path::{Path, PathBuf};

use crate::parse::{StoreKind, split_scheme};

/// Decodes `%XX` escapes of a file URL's path.
pub(super) fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at byte {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "path is not valid UTF-8 once decoded".to_string())
}

/// Removes what deleting a local store's objects under `dir` leaves behind, bottom up: the
/// staged file of each upload that a killed process abandoned (the local backend, and the
/// local channel's message files, write to `name#N` and rename it when complete; no listing
/// shows such a file, so no delete reaches it) and then every directory left empty, `dir`
/// included. Never removes any other file: a directory holding one stays. For when nothing
/// writes there any more: an upload still under way would lose its staged file.
pub fn remove_local_leftovers(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => remove_local_leftovers(&path),
                Ok(t) if t.is_file() && is_abandoned_upload(&path) => {
                    let _ = std::fs::remove_file(&path);
                }
                _ => {}
            }
        }
    }
    // Fails, as it should, where something is left.
    let _ = std::fs::remove_dir(dir);
}

/// Whether `path` is the local backend's staged file of an upload (`name#N`, N a number): the
/// files `object_store`'s `LocalFileSystem` does not list.
fn is_abandoned_upload(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split_once('#'))
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The directory of a local location (a path, or a `file://` URL), without creating it (as
/// [`Store::open`] does); `None` for any other location or a malformed one.
pub fn local_path(url: &str) -> Option<PathBuf> {
    match split_scheme(url) {
        None if !url.trim().is_empty() => Some(PathBuf::from(url)),
        None => None,
        Some((scheme, rest)) => match StoreKind::of_scheme(Some(scheme)) {
            Some(StoreKind::Local) => {
                let path = rest.strip_prefix("localhost").unwrap_or(rest);
                path.starts_with('/')
                    .then(|| percent_decode(path).ok().map(PathBuf::from))
                    .flatten()
            }
            _ => None,
        },
    }
}
