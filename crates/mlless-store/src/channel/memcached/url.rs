//! The URL of a Memcached channel: `memcached://host[:port][?ttl=…&connect_timeout_ms=…&op_timeout_ms=…]`.

use std::time::Duration;

use crate::channel::ChannelError;
use crate::channel::Result;
use crate::redact::{redact_url, scrub, url_secrets};

/// Longest relative expiration Memcached accepts (30 days); longer ones are Unix times.
/// Default expiration of every item ([`MemcachedChannel::DEFAULT_TTL`](super::MemcachedChannel::DEFAULT_TTL)).
pub(super) const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);
/// Default bound on connecting.
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default bound on one exchange.
pub(super) const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Port used when the URL names none.
pub(super) const DEFAULT_PORT: u16 = 11211;
pub(super) const MAX_TTL_SECS: u64 = 30 * 24 * 3600;

/// A URL's settings.
pub(super) struct Settings {
    /// `host:port` as written (IPv6 hosts in brackets).
    pub(super) authority: String,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) ttl_secs: u32,
    pub(super) connect_timeout: Duration,
    pub(super) op_timeout: Duration,
}

pub(super) fn ttl_secs(secs: u64) -> u32 {
    // Bounded by 30 days, so it fits.
    u32::try_from(secs.clamp(1, MAX_TTL_SECS)).unwrap_or(u32::MAX)
}

pub(super) fn parse_url(url: &str) -> Result<Settings> {
    let invalid = |reason: String| ChannelError::InvalidUrl {
        url: redact_url(url),
        reason: scrub(&reason, &url_secrets(url)),
    };
    let Some(rest) = url.trim().strip_prefix("memcached://") else {
        return Err(invalid(
            "expected memcached://host[:port][?ttl=SECONDS&connect_timeout_ms=MS&op_timeout_ms=MS]"
                .into(),
        ));
    };
    let (authority, query) = match rest.split_once('?') {
        Some((authority, query)) => (authority, Some(query)),
        None => (rest, None),
    };
    let authority = authority.strip_suffix('/').unwrap_or(authority);
    if authority.contains('@') {
        return Err(invalid(
            "credentials are not supported (the text protocol has no authentication)".into(),
        ));
    }
    if authority.contains('/') {
        return Err(invalid("a memcached URL has no path".into()));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return Err(invalid("unclosed '[' in the host".into()));
        };
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(invalid(format!("unexpected {after:?} after the host"))),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(invalid("no host".into()));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(invalid(format!("invalid port {port:?}"))),
        },
    };
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut settings = Settings {
        authority,
        host: host.to_string(),
        port,
        ttl_secs: ttl_secs(DEFAULT_TTL.as_secs()),
        connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        op_timeout: DEFAULT_OP_TIMEOUT,
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = value
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid(format!("{name} must be a positive integer, not {value:?}")))?;
        match name {
            "ttl" if number <= MAX_TTL_SECS => settings.ttl_secs = ttl_secs(number),
            "ttl" => {
                return Err(invalid(format!(
                    "ttl is at most {MAX_TTL_SECS} s (30 days)"
                )));
            }
            "connect_timeout_ms" => settings.connect_timeout = Duration::from_millis(number),
            "op_timeout_ms" => settings.op_timeout = Duration::from_millis(number),
            _ => {
                return Err(invalid(format!(
                    "unknown parameter {name:?}; supported: ttl, connect_timeout_ms, op_timeout_ms"
                )));
            }
        }
    }
    Ok(settings)
}
