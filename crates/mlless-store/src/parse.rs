//! URL schemes: the one place a store or channel URL's scheme is matched (in the manner of
//! `object_store`'s `parse.rs`).
//!
//! [`StoreKind`] says which object store a URL names, [`ChannelScheme`] which channel backend;
//! opening ([`Store::open`](crate::Store::open), [`open_channel`](crate::open_channel)),
//! redaction, billing and the CLI's checks all ask these two, so a new backend is one variant
//! here and the compiler lists every `match` that must say what it means.
//!
//! Every scheme is recognised whatever backends this build has: a backend that a cargo feature
//! left out still parses, and [`StoreKind::is_built`] / [`ChannelScheme::is_built`] say whether
//! it can be opened (opening it is then a typed error naming the feature, not an "unsupported
//! scheme"). This module is also the one place that knows which feature builds which backend.
//!
//! This module depends on no other module of the crate, so that every one of them may use it.

/// The cargo features of this crate that build a backend and are on in this build, of
/// `redis`, `memcached`, `s3`, `ps` and `dynamodb` (see the crate's "Features").
pub const BUILT_FEATURES: &[&str] = &[
    #[cfg(feature = "redis")]
    "redis",
    #[cfg(feature = "memcached")]
    "memcached",
    #[cfg(feature = "s3")]
    "s3",
    #[cfg(feature = "ps")]
    "ps",
    #[cfg(feature = "dynamodb")]
    "dynamodb",
];

/// Whether `feature` (`None`: no feature needed) is on in this build.
fn is_built(feature: Option<&str>) -> bool {
    feature.is_none_or(|feature| BUILT_FEATURES.contains(&feature))
}

/// Splits `scheme://rest` where `scheme` is a valid URL scheme (a letter, then letters, digits,
/// `+`, `-` or `.`); `None` for a plain path.
pub(crate) fn split_scheme(url: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    valid.then_some((scheme, rest))
}

/// Which kind of backend a [`Store`](crate::Store) talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreKind {
    /// A directory of the local filesystem.
    Local,
    /// A process-wide in-memory store (`memory://NAME`), for tests.
    Memory,
    /// Amazon S3 or an S3-compatible endpoint.
    S3,
    /// Any other [`ObjectStore`](object_store::ObjectStore) given to
    /// [`Store::from_object_store`](crate::Store::from_object_store) (e.g. a throttled wrapper).
    Other,
}

impl StoreKind {
    /// True for backends reached over the network, whose requests cost tens of milliseconds.
    pub fn is_remote(self) -> bool {
        matches!(self, StoreKind::S3)
    }

    /// The cargo feature of this crate that builds the backend (`s3` for S3), or `None` for the
    /// ones always built.
    pub fn required_feature(self) -> Option<&'static str> {
        match self {
            StoreKind::S3 => Some("s3"),
            StoreKind::Local | StoreKind::Memory | StoreKind::Other => None,
        }
    }

    /// Whether this build can open the backend: its [`required_feature`](Self::required_feature)
    /// is on.
    pub fn is_built(self) -> bool {
        is_built(self.required_feature())
    }

    /// The store a URL's scheme names (`None`: a plain directory path): `file` and a path are
    /// local, `memory` in memory, `s3` and `s3a` S3; `None` for any other scheme.
    pub(crate) fn of_scheme(scheme: Option<&str>) -> Option<StoreKind> {
        match scheme {
            None | Some("file") => Some(StoreKind::Local),
            Some("memory") => Some(StoreKind::Memory),
            Some("s3" | "s3a") => Some(StoreKind::S3),
            Some(_) => None,
        }
    }
}

/// The channel backend a channel URL names, as `mlless train --channel` takes it.
///
/// Parsed by [`ChannelScheme::parse`], which checks the URL as far as it can without
/// connecting; used to open the channel ([`open_channel`](crate::open_channel)), to bill its
/// servers (the runtime converts it into `mlless_cost::ChannelKind`), to redact URLs and to tell
/// whether functions on other machines can reach it ([`is_remote`](Self::is_remote)).
///
/// Deliberately not `#[non_exhaustive]`: a new backend is a new variant, and every `match` on
/// this enum — in this crate and in the crates that bill or check channels — must then fail to
/// compile until it says what the new backend means, rather than fall through to a default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelScheme {
    /// `None` or `"store"`: an [`ObjectStoreChannel`](crate::ObjectStoreChannel) in the run's
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
    /// The backend of a URL whose scheme is `scheme` (`None`: a plain path), or `None` if no
    /// backend has that scheme. Only the scheme is looked at (and, for Redis, the number of
    /// comma-separated URLs).
    pub(crate) fn of_scheme(scheme: Option<&str>, url: &str) -> Option<ChannelScheme> {
        match scheme {
            Some("redis" | "rediss") => Some(ChannelScheme::Redis {
                shards: list_len(url),
            }),
            Some("memcached") => Some(ChannelScheme::Memcached),
            Some("ps") => Some(ChannelScheme::Ps {
                servers: list_len(url),
            }),
            Some("dynamodb") => Some(ChannelScheme::DynamoDb),
            store => StoreKind::of_scheme(store).map(ChannelScheme::ObjectStore),
        }
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

    /// The cargo feature of this crate that builds the backend (`redis`, `memcached`, `ps`,
    /// `dynamodb`, or `s3` for an S3 store of its own), or `None` for the ones always built.
    pub fn required_feature(self) -> Option<&'static str> {
        match self {
            ChannelScheme::RunStore => None,
            ChannelScheme::ObjectStore(kind) => kind.required_feature(),
            ChannelScheme::Redis { .. } => Some("redis"),
            ChannelScheme::Memcached => Some("memcached"),
            ChannelScheme::Ps { .. } => Some("ps"),
            ChannelScheme::DynamoDb => Some("dynamodb"),
        }
    }

    /// Whether this build can open the channel: its
    /// [`required_feature`](Self::required_feature) is on. The run's own store
    /// ([`ChannelScheme::RunStore`]) is whatever store the run opened, so it is always built.
    ///
    /// ```
    /// use mlless_store::ChannelScheme;
    ///
    /// let redis = ChannelScheme::parse(Some("redis://127.0.0.1:6379"))?;
    /// assert_eq!(redis.required_feature(), Some("redis"));
    /// assert_eq!(redis.is_built(), cfg!(feature = "redis"));
    /// # Ok::<(), mlless_store::ChannelError>(())
    /// ```
    pub fn is_built(self) -> bool {
        is_built(self.required_feature())
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
pub(crate) fn url_list(urls: &str) -> Vec<&str> {
    urls.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect()
}

/// Whether `scheme` (any case) is that of a server URL, with no path that could hold an `@`
/// ([`ChannelScheme::is_server`]); also the Redis forms no channel opens but a user may paste
/// (`redis+unix`, `valkey`, `valkeys`), so that their passwords are found too.
pub(crate) fn is_server_scheme(scheme: &str) -> bool {
    let scheme = scheme.to_ascii_lowercase();
    matches!(scheme.as_str(), "redis+unix" | "valkey" | "valkeys")
        || ChannelScheme::of_scheme(Some(&scheme), "").is_some_and(ChannelScheme::is_server)
}

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
    fn features_are_named_and_known() {
        assert_eq!(StoreKind::S3.required_feature(), Some("s3"));
        assert_eq!(StoreKind::Local.required_feature(), None);
        assert!(StoreKind::Memory.is_built() && StoreKind::Local.is_built());
        assert_eq!(StoreKind::S3.is_built(), cfg!(feature = "s3"));
        let redis = ChannelScheme::Redis { shards: 2 };
        assert_eq!(redis.required_feature(), Some("redis"));
        assert_eq!(redis.is_built(), cfg!(feature = "redis"));
        assert_eq!(
            ChannelScheme::Memcached.is_built(),
            cfg!(feature = "memcached")
        );
        assert_eq!(
            ChannelScheme::ObjectStore(StoreKind::S3).required_feature(),
            Some("s3")
        );
        assert!(ChannelScheme::RunStore.is_built());
        assert_eq!(ChannelScheme::DynamoDb.required_feature(), Some("dynamodb"));
        assert_eq!(
            ChannelScheme::DynamoDb.is_built(),
            cfg!(feature = "dynamodb")
        );
        for feature in BUILT_FEATURES {
            assert!(
                ["redis", "memcached", "s3", "ps", "dynamodb"].contains(feature),
                "{feature}"
            );
        }
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
