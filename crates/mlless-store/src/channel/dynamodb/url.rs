//! The URL of a DynamoDB channel: `dynamodb://TABLE[?create=true&ttl=SECONDS&endpoint=URL]`.

use std::time::Duration;

use crate::channel::ChannelError;
use crate::channel::Result;
use crate::redact::redact_url;

/// Default time to live of every item (1 day).
pub(super) const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
/// Longest time to live `?ttl=` accepts (365 days).
const MAX_TTL_SECS: u64 = 365 * 24 * 3600;

/// What a URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    /// The table's name.
    pub(super) table: String,
    /// Whether to create the table if it does not exist.
    pub(super) create: bool,
    /// Items expire this long after they are written.
    pub(super) ttl_secs: u64,
    /// The API's URL, if the channel URL names one (else the environment's).
    pub(super) endpoint: Option<String>,
}

/// Parses `dynamodb://TABLE[?create=true|false&ttl=SECONDS&endpoint=URL]`; the table name is
/// DynamoDB's: 3 to 255 letters, digits, `_`, `-` and `.`; the endpoint an `http://` or
/// `https://` URL.
pub(super) fn parse_url(url: &str) -> Result<Settings> {
    let invalid = |reason: String| ChannelError::InvalidUrl {
        url: redact_url(url),
        reason,
    };
    let Some(rest) = url.trim().strip_prefix("dynamodb://") else {
        return Err(invalid(
            "expected dynamodb://TABLE[?create=true&ttl=SECONDS&endpoint=URL]".into(),
        ));
    };
    let (table, query) = match rest.split_once('?') {
        Some((table, query)) => (table, query),
        None => (rest, ""),
    };
    let table = table.strip_suffix('/').unwrap_or(table);
    let valid = (3..=255).contains(&table.len())
        && table
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid {
        return Err(invalid(format!(
            "{table:?} is not a DynamoDB table name (3 to 255 letters, digits, '_', '-' and '.'; \
             the region and endpoint come from the AWS environment)"
        )));
    }
    let mut settings = Settings {
        table: table.to_string(),
        create: false,
        ttl_secs: DEFAULT_TTL.as_secs(),
        endpoint: None,
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "create" => {
                settings.create = match value {
                    "true" | "1" | "" => true,
                    "false" | "0" => false,
                    _ => return Err(invalid(format!("create is true or false, not {value:?}"))),
                }
            }
            "ttl" => {
                settings.ttl_secs = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (1..=MAX_TTL_SECS).contains(n))
                    .ok_or_else(|| {
                        invalid(format!(
                            "ttl is a number of seconds from 1 to {MAX_TTL_SECS}, not {value:?}"
                        ))
                    })?;
            }
            "endpoint" if value.starts_with("http://") || value.starts_with("https://") => {
                settings.endpoint = Some(value.to_string());
            }
            "endpoint" => {
                return Err(invalid(format!(
                    "endpoint is an http:// or https:// URL, not {value:?}"
                )));
            }
            _ => {
                return Err(invalid(format!(
                    "unknown parameter {name:?}; supported: create, ttl, endpoint"
                )));
            }
        }
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let plain = parse_url("dynamodb://mlless-updates").ok();
        assert_eq!(
            plain,
            Some(Settings {
                table: "mlless-updates".into(),
                create: false,
                ttl_secs: 86_400,
                endpoint: None,
            })
        );
        let full =
            parse_url("dynamodb://t_1.x/?create=true&ttl=60&endpoint=http://127.0.0.1:8000").ok();
        assert_eq!(
            full,
            Some(Settings {
                table: "t_1.x".into(),
                create: true,
                ttl_secs: 60,
                endpoint: Some("http://127.0.0.1:8000".into()),
            })
        );
        for bad in [
            "dynamodb://",
            "dynamodb://ab",
            "dynamodb://a/b",
            "dynamodb://tab le",
            "dynamodb://table?ttl=0",
            "dynamodb://table?create=maybe",
            "dynamodb://table?region=x",
            "dynamodb://table?endpoint=127.0.0.1:8000",
            "redis://table",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }
}
