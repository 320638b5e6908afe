//! [`RequestCounter`]: the requests a `Store` handle (`mlless_store`) (and the object-store
//! channel on it) made, counted by the kinds a cloud object store bills, so that a run's bill
//! can use what it did rather than an estimate.
//!
//! A request is counted as a cloud store would bill it, whatever the backend: on the local
//! filesystem a message file written is a PUT, a read of one that is not there yet a miss
//! (S3 bills the GET that answers 404 like any other). A listing counts one LIST per 1,000
//! keys it returns (S3's page), at least one; a bulk delete one request per 1,000 keys (S3's
//! `DeleteObjects`); a request retried after a failure counts each attempt.
//!
//! The DynamoDB channel counts here too, in the units DynamoDB on-demand bills rather than in
//! requests: [`Request::TableWrite`] and [`Request::TableRead`] (see
//! `DynamoDbChannel`'s "Cost").

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Keys per page of a listing and per bulk delete, as S3 bills them.
pub const KEYS_PER_REQUEST: u64 = 1000;

/// The kinds of request a [`RequestCounter`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// A write of an object (PUT, conditional or not).
    Put,
    /// A read that found its object (GET, whole or a range).
    Get,
    /// A read of an object that was not there (a GET answered "not found").
    Miss,
    /// A metadata read (HEAD).
    Head,
    /// One page of a listing.
    List,
    /// A delete, of one object or of a batch.
    Delete,
    /// DynamoDB write request units (one per started KB of an item written or deleted).
    TableWrite,
    /// DynamoDB read request units (one per started 4 KB of a strongly consistent read).
    TableRead,
}

/// Counts of requests by kind: what [`RequestCounter::counts`] returns and what a run adds up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RequestCounts {
    /// Writes of objects.
    pub puts: u64,
    /// Reads that found their object.
    pub gets: u64,
    /// Reads of an object that was not there.
    pub misses: u64,
    /// Metadata reads.
    pub heads: u64,
    /// Pages of listings.
    pub lists: u64,
    /// Deletes (single or batched).
    pub deletes: u64,
    /// DynamoDB write request units (not requests; not in [`total`](Self::total)).
    #[serde(default)]
    pub table_write_units: u64,
    /// DynamoDB read request units (not requests; not in [`total`](Self::total)).
    #[serde(default)]
    pub table_read_units: u64,
}

impl RequestCounts {
    /// The requests billed at the write rate: PUTs and LIST pages (S3 bills DELETEs nothing).
    pub fn writes(&self) -> u64 {
        self.puts + self.lists
    }

    /// The requests billed at the read rate: GETs, misses included, and HEADs.
    pub fn reads(&self) -> u64 {
        self.gets + self.misses + self.heads
    }

    /// Every object-store request, of every kind (DynamoDB's request units are not requests
    /// and not counted here).
    pub fn total(&self) -> u64 {
        self.puts + self.gets + self.misses + self.heads + self.lists + self.deletes
    }

    /// The counts of `self` less those of `earlier` (a snapshot taken before), by kind.
    pub fn since(&self, earlier: &RequestCounts) -> RequestCounts {
        RequestCounts {
            puts: self.puts.saturating_sub(earlier.puts),
            gets: self.gets.saturating_sub(earlier.gets),
            misses: self.misses.saturating_sub(earlier.misses),
            heads: self.heads.saturating_sub(earlier.heads),
            lists: self.lists.saturating_sub(earlier.lists),
            deletes: self.deletes.saturating_sub(earlier.deletes),
            table_write_units: self
                .table_write_units
                .saturating_sub(earlier.table_write_units),
            table_read_units: self
                .table_read_units
                .saturating_sub(earlier.table_read_units),
        }
    }
}

impl std::ops::AddAssign for RequestCounts {
    fn add_assign(&mut self, other: Self) {
        self.puts += other.puts;
        self.gets += other.gets;
        self.misses += other.misses;
        self.heads += other.heads;
        self.lists += other.lists;
        self.deletes += other.deletes;
        self.table_write_units += other.table_write_units;
        self.table_read_units += other.table_read_units;
    }
}

/// A shared tally of requests, attached to store handles with
/// `Store::with_request_counter` (their
/// `child`ren count into it too). Cloning shares the tally.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    tally: Arc<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    puts: AtomicU64,
    gets: AtomicU64,
    misses: AtomicU64,
    heads: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
    table_write_units: AtomicU64,
    table_read_units: AtomicU64,
}

impl RequestCounter {
    /// A new tally at zero.
    pub fn new() -> RequestCounter {
        RequestCounter::default()
    }

    /// Counts `n` requests of `kind`.
    pub fn add(&self, kind: Request, n: u64) {
        let t = &self.tally;
        let cell = match kind {
            Request::Put => &t.puts,
            Request::Get => &t.gets,
            Request::Miss => &t.misses,
            Request::Head => &t.heads,
            Request::List => &t.lists,
            Request::Delete => &t.deletes,
            Request::TableWrite => &t.table_write_units,
            Request::TableRead => &t.table_read_units,
        };
        cell.fetch_add(n, Ordering::Relaxed);
    }

    /// What has been counted so far.
    pub fn counts(&self) -> RequestCounts {
        let t = &self.tally;
        RequestCounts {
            puts: t.puts.load(Ordering::Relaxed),
            gets: t.gets.load(Ordering::Relaxed),
            misses: t.misses.load(Ordering::Relaxed),
            heads: t.heads.load(Ordering::Relaxed),
            lists: t.lists.load(Ordering::Relaxed),
            deletes: t.deletes.load(Ordering::Relaxed),
            table_write_units: t.table_write_units.load(Ordering::Relaxed),
            table_read_units: t.table_read_units.load(Ordering::Relaxed),
        }
    }
}

/// The requests of a listing or bulk delete of `keys` keys: one per started 1,000, at least one.
pub fn pages(keys: usize) -> u64 {
    (keys as u64).div_ceil(KEYS_PER_REQUEST).max(1)
}
