//! Which cargo feature of this crate builds each backend, and whether this build has it: the
//! URL schemes themselves ([`StoreKind`], [`ChannelScheme`]) are plain data in
//! `mlless-io-types`, and [`BuiltBackend`] adds what only this crate can know.
//!
//! Every scheme parses whatever backends this build has: a backend that a cargo feature left
//! out is opened as a typed error naming the feature, not an "unsupported scheme".

pub use mlless_io_types::scheme::{
    ChannelScheme, StoreKind, is_server_scheme, split_scheme, url_list,
};

/// A cargo feature of this crate that builds a backend: its name and whether it is on in this
/// build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feature {
    /// The feature's name in `Cargo.toml`.
    pub name: &'static str,
    /// Whether this build has it.
    pub on: bool,
}

/// What a backend needs of this build: the cargo feature of this crate that builds it, and
/// whether it is on. [`feature`](Self::feature) is an exhaustive `match` naming each feature
/// beside its `cfg!`, so a new backend does not compile until it names its feature, and a
/// misspelt one is an unexpected `cfg` (a warning, an error under CI's `-D warnings`).
pub trait BuiltBackend: Copy {
    /// The feature that builds the backend, or `None` for the ones always built.
    fn feature(self) -> Option<Feature>;

    /// The name of the cargo feature that builds the backend, or `None` for the ones always
    /// built.
    fn required_feature(self) -> Option<&'static str> {
        self.feature().map(|feature| feature.name)
    }

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
        self.feature().is_none_or(|feature| feature.on)
    }
}

impl BuiltBackend for StoreKind {
    /// `s3` for S3; the local, in-memory and other stores are always built.
    fn feature(self) -> Option<Feature> {
        match self {
            StoreKind::S3 => Some(Feature {
                name: "s3",
                on: cfg!(feature = "s3"),
            }),
            StoreKind::Local | StoreKind::Memory | StoreKind::Other => None,
        }
    }
}

impl BuiltBackend for ChannelScheme {
    /// `redis`, `memcached`, `ps`, `dynamodb`, or `s3` for an S3 store of its own; the run's own
    /// store is whatever store the run opened, so it is always built.
    fn feature(self) -> Option<Feature> {
        let (name, on) = match self {
            ChannelScheme::RunStore => return None,
            ChannelScheme::ObjectStore(kind) => return kind.feature(),
            ChannelScheme::Redis { .. } => ("redis", cfg!(feature = "redis")),
            ChannelScheme::Memcached => ("memcached", cfg!(feature = "memcached")),
            ChannelScheme::Ps { .. } => ("ps", cfg!(feature = "ps")),
            ChannelScheme::DynamoDb => ("dynamodb", cfg!(feature = "dynamodb")),
        };
        Some(Feature { name, on })
    }
}

/// The cargo features of this crate that build a backend and are on in this build (see the
/// crate's "Features"), in the order of [`ChannelScheme::ALL`].
pub fn built_features() -> Vec<&'static str> {
    ChannelScheme::ALL
        .into_iter()
        .filter_map(BuiltBackend::feature)
        .filter(|feature| feature.on)
        .map(|feature| feature.name)
        .collect()
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
        for feature in built_features() {
            assert!(
                ["redis", "memcached", "s3", "ps", "dynamodb"].contains(&feature),
                "{feature}"
            );
        }
    }
}
