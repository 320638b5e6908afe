//! Parsing a channel URL ([`ChannelScheme::parse`]): the backend it names, checked as far as it
//! can be without connecting, or an [`InvalidUrl`] that lists the forms a channel URL may take
//! ([`supported_channel_urls`]).

use crate::redact::redact_url;
use crate::scheme::{ChannelScheme, list_forms};

/// A channel URL that names no channel ([`ChannelScheme::parse`]): empty, of an unknown scheme,
/// or a mistyped server URL. `mlless_store::ChannelError::InvalidUrl` carries the same fields.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot open channel {url}: {reason}")]
pub struct InvalidUrl {
    /// The URL, redacted ([`redact_url`]).
    pub url: String,
    /// What is wrong with it, and the forms that are supported.
    pub reason: String,
}

/// What a channel URL may be (what `mlless_store::open_channel` accepts), for error messages:
/// every [`ChannelScheme::url_forms`].
pub fn supported_channel_urls() -> String {
    list_forms(ChannelScheme::ALL.map(ChannelScheme::url_forms))
}

impl ChannelScheme {
    /// The backend `url` names (`--channel`; `None` is the default, the run's store), checked
    /// as far as it can be without connecting: an empty URL, an unknown scheme, and a
    /// "directory path" that is a mistyped server URL (`redis:/host`, `redis:host`,
    /// `:password@host`) are [`InvalidUrl`] listing the supported forms. Only the
    /// scheme is looked at otherwise; connecting checks the rest.
    ///
    /// ```
    /// use mlless_io_types::{ChannelScheme, StoreKind};
    ///
    /// assert_eq!(ChannelScheme::parse(None)?, ChannelScheme::RunStore);
    /// assert_eq!(
    ///     ChannelScheme::parse(Some("s3://bucket/x"))?,
    ///     ChannelScheme::ObjectStore(StoreKind::S3)
    /// );
    /// assert_eq!(
    ///     ChannelScheme::parse(Some("redis://a:6379,redis://b:6379"))?,
    ///     ChannelScheme::Redis { shards: 2 }
    /// );
    /// assert!(ChannelScheme::parse(Some("amqp://h")).is_err());
    /// # Ok::<(), mlless_io_types::InvalidUrl>(())
    /// ```
    pub fn parse(url: Option<&str>) -> Result<ChannelScheme, InvalidUrl> {
        let url = match url.map(str::trim) {
            None | Some("store") => return Ok(ChannelScheme::RunStore),
            Some("") => {
                return Err(InvalidUrl {
                    url: String::new(),
                    reason: format!("empty channel URL; supported: {}", supported_channel_urls()),
                });
            }
            Some(url) => url,
        };
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if scheme.is_none() {
            check_not_a_mistyped_url(url)?;
        }
        ChannelScheme::of_scheme(scheme, url).ok_or_else(|| InvalidUrl {
            url: redact_url(url),
            reason: format!(
                "unsupported channel scheme {}://; supported: {}",
                scheme.unwrap_or_default(),
                supported_channel_urls()
            ),
        })
    }
}

/// Refuses a "directory path" that is a mistyped server URL (`redis:/host`, `redis:host`,
/// `:password@host`): opened as a directory, it would silently run the job on the local
/// filesystem — and put the password in a directory name and in every message that names it.
fn check_not_a_mistyped_url(url: &str) -> Result<(), InvalidUrl> {
    let invalid = |reason: String| InvalidUrl {
        url: redact_url(url),
        reason,
    };
    if let Some((prefix, _)) = url.split_once(':') {
        let prefix = prefix.to_ascii_lowercase();
        if ChannelScheme::of_scheme(Some(&prefix), url).is_some() {
            return Err(invalid(format!(
                "looks like a {prefix}:// URL without its \"//\"; supported: {}",
                supported_channel_urls()
            )));
        }
    }
    if redact_url(url) != url {
        return Err(invalid(format!(
            "looks like credentials without a scheme (redis://[user]:password@host:port); \
             supported: {}",
            supported_channel_urls()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::{StoreKind, supported_store_urls};

    #[test]
    fn every_backend_parses_back_from_its_schemes_and_is_listed() {
        let supported = supported_channel_urls();
        for backend in ChannelScheme::ALL {
            for scheme in backend.schemes() {
                let url = format!("{scheme}://host");
                let parsed = ChannelScheme::parse(Some(&url)).expect(&url);
                assert_eq!(parsed.index(), backend.index(), "{url}");
            }
            if let Some(first) = backend.schemes().first() {
                assert!(supported.contains(&format!("{first}://")), "{first}");
            }
            assert_eq!(
                backend.url_forms().is_some(),
                backend != ChannelScheme::ObjectStore(StoreKind::Other)
            );
        }
        assert_eq!(
            ChannelScheme::parse(Some("/a/path")),
            Ok(ChannelScheme::ObjectStore(StoreKind::Local))
        );
        assert_eq!(StoreKind::of_scheme(Some("s3a")), Some(StoreKind::S3));
        assert_eq!(StoreKind::of_scheme(Some("ftp")), None);
        assert!(supported_store_urls().starts_with("a directory path, file:///abs/path"));
    }
}
