//! URL schemes: the one place a store or channel URL's scheme is matched (in the manner of
//! `object_store`'s `parse.rs`).
//!
//! [`StoreKind`] says which object store a URL names, [`ChannelScheme`] which channel backend;
//! opening (`mlless_store`'s `Store::open` and `open_channel`), redaction, billing and the CLI's
//! checks all ask these two, so a new backend is one variant here and the compiler lists every
//! `match` that must say what it means.
//!
//! Every scheme is recognised whatever backends a build has: which cargo feature of
//! `mlless-store` builds a backend, and whether this build has it, is that crate's
//! `BuiltBackend`.
//!
//! This module depends on no other module of the crate, so that every one of them may use it.

/// Splits `scheme://rest` where `scheme` is a valid URL scheme (a letter, then letters, digits,
/// `+`, `-` or `.`); `None` for a plain path.
pub fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some((scheme, rest))
}

/// Which kind of backend an object store (`mlless_store::Store`) talks to.
///
/// Not `#[non_exhaustive]`, as [`ChannelScheme`]: a new store is a new variant that every
/// `match` on it must then say what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    /// A directory of the local filesystem.
    Local,
    /// A process-wide in-memory store (`memory://NAME`), for tests.
    Memory,
    /// Amazon S3 or an S3-compatible endpoint.
    S3,
    /// Any other `object_store::ObjectStore` given to `mlless_store`'s
    /// `Store::from_object_store` (e.g. a throttled wrapper).
    Other,
}

impl StoreKind {
    /// Every kind, in the order of [`index`](Self::index).
    pub const ALL: [StoreKind; 4] = [
        StoreKind::Local,
        StoreKind::Memory,
        StoreKind::S3,
        StoreKind::Other,
    ];

    /// This kind's place in [`ALL`](Self::ALL): an exhaustive `match`, so a new store is
    /// flagged here, and then by the check that `ALL` lists it there.
    pub const fn index(self) -> usize {
        match self {
            StoreKind::Local => 0,
            StoreKind::Memory => 1,
            StoreKind::S3 => 2,
            StoreKind::Other => 3,
        }
    }

    /// True for backends reached over the network, whose requests cost tens of milliseconds.
    pub fn is_remote(self) -> bool {
        match self {
            StoreKind::S3 => true,
            StoreKind::Local | StoreKind::Memory | StoreKind::Other => false,
        }
    }

    /// The URL schemes that name this store (a plain path names a local one too); none for
    /// [`Other`](Self::Other), which no URL names.
    pub fn schemes(self) -> &'static [&'static str] {
        match self {
            StoreKind::Local => &["file"],
            StoreKind::Memory => &["memory"],
            StoreKind::S3 => &["s3", "s3a"],
            StoreKind::Other => &[],
        }
    }

    /// How a URL of this store is written, for the messages that list them
    /// ([`supported_store_urls`]); `None` for [`Other`](Self::Other).
    pub fn url_forms(self) -> Option<&'static str> {
        match self {
            StoreKind::Local => Some("a directory path, file:///abs/path"),
            StoreKind::Memory => Some("memory://NAME"),
            StoreKind::S3 => Some("s3://bucket/prefix"),
            StoreKind::Other => None,
        }
    }

    /// The store a URL's scheme names (`None`: a plain directory path): the kind whose
    /// [`schemes`](Self::schemes) hold it, local for a path; `None` for any other scheme.
    pub fn of_scheme(scheme: Option<&str>) -> Option<StoreKind> {
        let Some(scheme) = scheme else {
            return Some(StoreKind::Local);
        };
        StoreKind::ALL
            .into_iter()
            .find(|kind| kind.schemes().contains(&scheme))
    }
}

mlless_core::assert_all_in_place!(StoreKind);

/// The URLs a store may be opened at (`mlless_store::Store::open`), for error messages: every
/// [`StoreKind::url_forms`].
pub fn supported_store_urls() -> String {
    list_forms(StoreKind::ALL.map(StoreKind::url_forms))
}

/// The URL forms that are there, comma-separated, for the messages that list them.
pub(crate) fn list_forms<const N: usize>(forms: [Option<&str>; N]) -> String {
    forms.into_iter().flatten().collect::<Vec<_>>().join(", ")
}

/// The channel backend a channel URL names, as `mlless train --channel` takes it.
///
/// Parsed by [`ChannelScheme::parse`], which checks the URL as far as it can without
/// connecting; used to open the channel (`mlless_store::open_channel`), to bill its servers
/// (`mlless_job::billing` converts it into `mlless_cost::ChannelKind`), to redact URLs and to tell
/// whether functions on other machines can reach it ([`is_remote`](Self::is_remote)).
///
/// Deliberately not `#[non_exhaustive]`: a new backend is a new variant, and every `match` on
/// this enum — in this crate and in the crates that bill or check channels — must then fail to
/// compile until it says what the new backend means, rather than fall through to a default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelScheme {
    /// `None` or `"store"`: an `ObjectStoreChannel` (`mlless_store`) in the run's
    /// own store, below `channel/` (the default; no server needed).
    RunStore,
    /// An object store of its own: a directory path, `file://`, `memory://`, `s3://` or
    /// `s3a://`; the [`StoreKind`] says which.
    ObjectStore(StoreKind),
    /// Redis (`redis://`, `rediss://` for TLS), one URL per shard, comma-separated.
    Redis {
        /// How many shards (URLs) the list names, at least 1.
        shards: u32,
    },
    /// Memcached (`memcached://host:port`).
    Memcached,
    /// Parameter servers of `mlless ps` (`ps://:SECRET@host:port`), one URL per server,
    /// comma-separated.
    Ps {
        /// How many servers the list names, at least 1.
        servers: u32,
    },
    /// A DynamoDB table (`dynamodb://TABLE`), billed by request units.
    DynamoDb,
}

impl ChannelScheme {
    /// One of each backend, the object stores each on their own, in the order of
    /// [`index`](Self::index) (a Redis and a parameter-server list of one URL).
    pub const ALL: [ChannelScheme; 5 + StoreKind::ALL.len()] = [
        ChannelScheme::RunStore,
        ChannelScheme::ObjectStore(StoreKind::Local),
        ChannelScheme::ObjectStore(StoreKind::Memory),
        ChannelScheme::ObjectStore(StoreKind::S3),
        ChannelScheme::ObjectStore(StoreKind::Other),
        ChannelScheme::Redis { shards: 1 },
        ChannelScheme::Memcached,
        ChannelScheme::Ps { servers: 1 },
        ChannelScheme::DynamoDb,
    ];

    /// This backend's place in [`ALL`](Self::ALL): an exhaustive `match`, so a new backend is
    /// flagged here, and then by the check that `ALL` lists it there.
    pub const fn index(self) -> usize {
        let stores = StoreKind::ALL.len();
        match self {
            ChannelScheme::RunStore => 0,
            ChannelScheme::ObjectStore(kind) => 1 + kind.index(),
            ChannelScheme::Redis { .. } => 1 + stores,
            ChannelScheme::Memcached => 2 + stores,
            ChannelScheme::Ps { .. } => 3 + stores,
            ChannelScheme::DynamoDb => 4 + stores,
        }
    }

    /// The URL schemes that name this backend (the run's store is `"store"` or no URL, not a
    /// scheme).
    pub fn schemes(self) -> &'static [&'static str] {
        match self {
            ChannelScheme::RunStore => &[],
            ChannelScheme::ObjectStore(kind) => kind.schemes(),
            ChannelScheme::Redis { .. } => &["redis", "rediss"],
            ChannelScheme::Memcached => &["memcached"],
            ChannelScheme::Ps { .. } => &["ps"],
            ChannelScheme::DynamoDb => &["dynamodb"],
        }
    }

    /// How a channel URL of this backend is written, for the messages that list them
    /// ([`supported_channel_urls`](crate::supported_channel_urls)); `None` for an object store no URL names.
    pub fn url_forms(self) -> Option<&'static str> {
        match self {
            ChannelScheme::RunStore => Some("\"store\" (the run's object store, the default)"),
            ChannelScheme::ObjectStore(kind) => kind.url_forms(),
            ChannelScheme::Redis { .. } => Some(
                "redis://host:port[,redis://host2:port…] (also rediss:// and a password in the URL)",
            ),
            ChannelScheme::Memcached => Some("memcached://host:port"),
            ChannelScheme::Ps { .. } => Some("ps://:SECRET@host:port[,ps://:SECRET@host2:port…]"),
            ChannelScheme::DynamoDb => {
                Some("dynamodb://TABLE[?create=true&ttl=SECONDS&endpoint=URL]")
            }
        }
    }

    /// The backend of a URL whose scheme is `scheme` (`None`: a plain path), or `None` if no
    /// backend has that scheme. Only the scheme is looked at (and, for Redis and the parameter
    /// servers, the number of comma-separated URLs).
    pub fn of_scheme(scheme: Option<&str>, url: &str) -> Option<ChannelScheme> {
        let Some(scheme) = scheme else {
            return Some(ChannelScheme::ObjectStore(StoreKind::Local));
        };
        let backend = ChannelScheme::ALL
            .into_iter()
            .find(|backend| backend.schemes().contains(&scheme))?;
        Some(match backend {
            ChannelScheme::Redis { .. } => ChannelScheme::Redis {
                shards: list_len(url),
            },
            ChannelScheme::Ps { .. } => ChannelScheme::Ps {
                servers: list_len(url),
            },
            ChannelScheme::RunStore
            | ChannelScheme::ObjectStore(_)
            | ChannelScheme::Memcached
            | ChannelScheme::DynamoDb => backend,
        })
    }

    /// Whether the channel is a server whose URL is `scheme://[userinfo@]host[:port][/db]`,
    /// with no path that could hold an `@`: there a URL's userinfo ends at its last `@`, even
    /// when a password holds a `/` (what [`redact_url`](crate::redact_url) relies on).
    /// A DynamoDB URL names a table, not a host, and holds no credentials.
    pub fn is_server(self) -> bool {
        match self {
            ChannelScheme::RunStore | ChannelScheme::ObjectStore(_) | ChannelScheme::DynamoDb => {
                false
            }
            ChannelScheme::Redis { .. } | ChannelScheme::Memcached | ChannelScheme::Ps { .. } => {
                true
            }
        }
    }

    /// Whether functions on other machines (AWS Lambda) can reach the channel: a server, or an
    /// object store on the network (S3). The run's own store is not a place of its own: it is
    /// wherever the run is, and the caller checks the run's location itself.
    pub fn is_remote(self) -> bool {
        match self {
            ChannelScheme::RunStore => false,
            ChannelScheme::ObjectStore(kind) => kind.is_remote(),
            ChannelScheme::Redis { .. }
            | ChannelScheme::Memcached
            | ChannelScheme::Ps { .. }
            | ChannelScheme::DynamoDb => true,
        }
    }
}

/// How many non-empty URLs a comma-separated list holds, at least 1.
fn list_len(url: &str) -> u32 {
    u32::try_from(url_list(url).len().max(1)).unwrap_or(u32::MAX)
}

/// The URLs of a comma-separated list (Redis shards, parameter servers), trimmed, the empty
/// ones left out.
pub fn url_list(urls: &str) -> Vec<&str> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect()
}

/// Whether `scheme` (any case) is that of a server URL, with no path that could hold an `@`
/// ([`ChannelScheme::is_server`]); also the Redis forms no channel opens but a user may paste
/// (`redis+unix`, `valkey`, `valkeys`), so that their passwords are found too.
pub fn is_server_scheme(scheme: &str) -> bool {
    let scheme = scheme.to_ascii_lowercase();
    matches!(scheme.as_str(), "redis+unix" | "valkey" | "valkeys")
        || ChannelScheme::of_scheme(Some(&scheme), "").is_some_and(ChannelScheme::is_server)
}

mlless_core::assert_all_in_place!(ChannelScheme);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_split() {
        assert_eq!(split_scheme("s3://b/p"), Some(("s3", "b/p")));
        assert_eq!(split_scheme("/tmp/a"), None);
        assert_eq!(split_scheme("./x://y"), None);
        assert_eq!(split_scheme("1redis://h"), None);
    }

    #[test]
    fn server_schemes() {
        for scheme in [
            "redis",
            "REDIS",
            "rediss",
            "redis+unix",
            "memcached",
            "valkeys",
            "ps",
        ] {
            assert!(is_server_scheme(scheme), "{scheme}");
        }
        for scheme in ["s3", "s3a", "file", "memory", "https", "amqp", "dynamodb"] {
            assert!(!is_server_scheme(scheme), "{scheme}");
        }
    }
}
