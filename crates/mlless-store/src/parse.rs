//! Which cargo feature of this crate builds each backend, and whether this build has it: the
//! URL schemes themselves ([`StoreKind`], [`ChannelScheme`]) are plain data in
//! `mlless-io-types`, and [`BuiltBackend`] adds what only this crate can know.
//!
//! Every scheme parses whatever backends this build has: a backend that a cargo feature left
//! out is opened as a typed error naming the feature, not an "unsupported scheme".

pub use mlless_io_types::scheme::{
    ChannelScheme, StoreKind, is_server_scheme, split_scheme, url_list,
};

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

/// What a backend needs of this build: the cargo feature of this crate that builds it, and
/// whether it is on. The `match`es of `required_feature` are exhaustive: a new backend does not
/// compile until it names its feature.
pub trait BuiltBackend: Copy {
    /// The cargo feature of this crate that builds the backend, or `None` for the ones always
    /// built.
    fn required_feature(self) -> Option<&'static str>;

    /// Whether this build can open the backend: its
    /// [`required_feature`](Self::required_feature) is on.
    ///
    /// ```
    /// use mlless_store::{BuiltBackend, ChannelScheme};
    ///
    /// let redis = ChannelScheme::parse(Some("redis://127.0.0.1:6379"))?;
    /// assert_eq!(redis.required_feature(), Some("redis"));
    /// assert_eq!(redis.is_built(), cfg!(feature = "redis"));
    /// # Ok::<(), mlless_store::ChannelError>(())
    /// ```
    fn is_built(self) -> bool {
        is_built(self.required_feature())
    }
}

impl BuiltBackend for StoreKind {
    /// `s3` for S3; the local, in-memory and other stores are always built.
    fn required_feature(self) -> Option<&'static str> {
        match self {
            StoreKind::S3 => Some("s3"),
            StoreKind::Local | StoreKind::Memory | StoreKind::Other => None,
        }
    }
}

impl BuiltBackend for ChannelScheme {
    /// `redis`, `memcached`, `ps`, `dynamodb`, or `s3` for an S3 store of its own; the run's own
    /// store is whatever store the run opened, so it is always built.
    fn required_feature(self) -> Option<&'static str> {
        match self {
            ChannelScheme::RunStore => None,
            ChannelScheme::ObjectStore(kind) => kind.required_feature(),
            ChannelScheme::Redis { .. } => Some("redis"),
            ChannelScheme::Memcached => Some("memcached"),
            ChannelScheme::Ps { .. } => Some("ps"),
            ChannelScheme::DynamoDb => Some("dynamodb"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
