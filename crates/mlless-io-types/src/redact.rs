//! Redaction of credentials in URLs, for every rendering a user or a record sees.
//!
//! A channel URL may carry a password (`redis://:secret@host`, `redis://user:secret@host`,
//! `rediss://…`) and any URL may carry a key or token in its query (`?token=…`,
//! `X-Amz-Signature=…`). The real URL goes only where a connection needs it (and into the run's
//! `spec.json`, which functions read to connect); messages, logs, run records and reports show
//! [`redact_url`]'s rendering instead.

use crate::scheme::{is_server_scheme, split_scheme};

/// The rendering of `url` for messages, logs, records and reports: the password of a
/// `user:password@` (or a whole `userinfo@` without a `:`, which some clients read as a
/// password) and the value of every query parameter whose name looks like a secret (`key`,
/// `token`, `secret`, `password`, `signature`, `credential`, `auth`…) become `***`.
///
/// A comma-separated list (the shards of a Redis channel) is redacted URL by URL. Text that is
/// not a well-formed URL but might hold a credential (an `@` after something that is not a
/// path) is redacted up to its last `@`; a server URL (`redis`, `rediss`, `memcached`) whose
/// port is not a number is shown without its host and port, since that is where a mistyped
/// password ends up. URLs without credentials are returned unchanged.
///
/// ```
/// use mlless_io_types::redact_url;
/// assert_eq!(redact_url("redis://:pw@h:6379"), "redis://:***@h:6379");
/// assert_eq!(redact_url("rediss://user:pw@h:6380/0"), "rediss://user:***@h:6380/0");
/// assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
/// assert_eq!(redact_url("s3://b/p?token=abc&x=1"), "s3://b/p?token=***&x=1");
/// ```
pub fn redact_url(url: &str) -> String {
    if url.contains(',') {
        return url.split(',').map(redact_one).collect::<Vec<_>>().join(",");
    }
    redact_one(url)
}

/// The secrets embedded in `url` (every URL of a comma-separated list): the password of each
/// `user:password@` (or a lone `userinfo@`), as written and percent-decoded, and the values of
/// secret-looking query parameters. For scrubbing texts that may quote them (a client's error
/// message), with [`scrub`].
pub fn url_secrets(url: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for one in url.split(',') {
        let (before_query, query) = split_query(one);
        if let Some((userinfo, _)) = userinfo_of(before_query) {
            let secret = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
            out.push(secret.to_string());
            out.push(percent_decode_lossy(secret));
        }
        if let Some(query) = query {
            for pair in query.split('&') {
                if let Some((name, value)) = pair.split_once('=')
                    && is_secret_name(name)
                {
                    out.push(value.to_string());
                    out.push(percent_decode_lossy(value));
                }
            }
        }
    }
    out.retain(|s| !s.is_empty());
    out.sort();
    out.dedup();
    // Longest first, so that a secret containing another is replaced whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out
}

/// `text` with every occurrence of every secret replaced by `***`.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "***");
        }
    }
    out
}

/// Redacts one URL (no comma-separated list).
fn redact_one(url: &str) -> String {
    let (before_query, query) = split_query(url);
    let mut out = match split_scheme(before_query) {
        Some((scheme, rest)) => {
            let server = is_server_scheme(scheme);
            match userinfo_split(rest, server) {
                Some((userinfo, host)) => {
                    let userinfo = match userinfo.split_once(':') {
                        Some((user, _)) => format!("{user}:***"),
                        None => "***".to_string(),
                    };
                    format!("{scheme}://{userinfo}@{host}")
                }
                None if server && !port_is_numeric(rest) => format!("{scheme}://***"),
                None => before_query.to_string(),
            }
        }
        None => match before_query.rsplit_once('@') {
            // Not a URL: a path may contain '@', but a `something:secret@` or `secret@host`
            // prefix that is no path may be a mistyped URL's credentials.
            Some((prefix, host)) if prefix.contains(':') || !prefix.contains('/') => {
                format!("***@{host}")
            }
            _ => before_query.to_string(),
        },
    };
    if let Some(query) = query {
        out.push('?');
        out.push_str(&redact_query(query));
    }
    out
}

/// Splits `url` at its first `?` (a `#` fragment stays in the query part, where it is harmless).
fn split_query(url: &str) -> (&str, Option<&str>) {
    match url.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (url, None),
    }
}

/// (userinfo, the rest after its `@`) of the part of a URL after `scheme://`.
fn userinfo_split(rest: &str, server: bool) -> Option<(&str, &str)> {
    let at = if server {
        rest.rfind('@')?
    } else {
        let authority_end = rest.find('/').unwrap_or(rest.len());
        rest[..authority_end].rfind('@')?
    };
    Some((&rest[..at], &rest[at + 1..]))
}

/// (userinfo, the rest) of a whole URL (before its query), as [`redact_one`] finds it.
fn userinfo_of(url: &str) -> Option<(&str, &str)> {
    match split_scheme(url) {
        Some((scheme, rest)) => userinfo_split(rest, is_server_scheme(scheme)),
        None => match url.rsplit_once('@') {
            Some((prefix, host)) if prefix.contains(':') || !prefix.contains('/') => {
                // Everything before the `@` may be secret; drop a mistyped scheme's prefix.
                let userinfo = prefix.rsplit_once('/').map_or(prefix, |(_, u)| u);
                Some((userinfo, host))
            }
            _ => None,
        },
    }
}

/// Whether the authority of `rest` (after `scheme://`, without userinfo) has no port or a
/// numeric one.
fn port_is_numeric(rest: &str) -> bool {
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let after_host = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((_, after)) => after,
            None => return false,
        },
        None => authority.find(':').map_or("", |i| &authority[i..]),
    };
    match after_host.strip_prefix(':') {
        Some(port) => port.chars().all(|c| c.is_ascii_digit()),
        None => after_host.is_empty(),
    }
}

/// A query with the values of secret-looking parameters replaced by `***`.
fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret_name(name) => format!("{name}=***"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Whether a query parameter's name looks like it holds a secret.
fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "pass",
        "pwd",
        "signature",
        "sig",
        "credential",
        "auth",
    ]
    .iter()
    .any(|word| name.contains(word))
}

/// Decodes `%XX` escapes, leaving malformed ones as they are.
fn percent_decode_lossy(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cr3t-pw";

    fn assert_hidden(url: &str) -> String {
        let shown = redact_url(url);
        assert!(!shown.contains(SECRET), "{url} shown as {shown}");
        shown
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            assert_hidden("redis://user:s3cr3t-pw@host:6379"),
            "redis://user:***@host:6379"
        );
        assert_eq!(
            assert_hidden("redis://:s3cr3t-pw@host:6379/2"),
            "redis://:***@host:6379/2"
        );
        assert_eq!(
            assert_hidden("rediss://default:s3cr3t-pw@cache.example.com:6380"),
            "rediss://default:***@cache.example.com:6380"
        );
        // A lone userinfo may be read as a password.
        assert_eq!(assert_hidden("redis://s3cr3t-pw@h"), "redis://***@h");
        // Passwords with the characters that end an authority.
        assert_hidden("redis://:s3cr3t-pw/x@h:1");
        assert_hidden("redis://:s3cr3t-pw@x@h:1");
        assert_hidden("redis://u:a/s3cr3t-pw@h:1");
        assert_hidden("s3://key:s3cr3t-pw@bucket/x");
        assert_eq!(redact_url("s3://key:pw@bucket/x"), "s3://key:***@bucket/x");
    }

    #[test]
    fn shard_lists_are_redacted_url_by_url() {
        let shown = assert_hidden("redis://:s3cr3t-pw@a:1,redis://:s3cr3t-pw@b:2/1");
        assert_eq!(shown, "redis://:***@a:1,redis://:***@b:2/1");
        // The shard count survives (the cost model counts the URLs).
        assert_eq!(shown.split(',').count(), 2);
    }

    #[test]
    fn urls_without_credentials_are_unchanged() {
        for url in [
            "redis://127.0.0.1:6379",
            "redis://h:6379/0,redis://h:6380/0",
            "rediss://cache.example.com:6380/3",
            "redis://[::1]:6379",
            "memcached://h:11211?ttl=60&op_timeout_ms=50",
            "s3://bucket/x@y",
            "s3://bucket/prefix",
            "file:///tmp/run@2",
            "/tmp/data@2/x",
            "./store",
            "memory://x",
            "store",
            "",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn secret_query_values_are_redacted() {
        assert_eq!(
            assert_hidden("s3://b/p?token=s3cr3t-pw&region=eu"),
            "s3://b/p?token=***&region=eu"
        );
        assert_hidden("https://h/o?X-Amz-Signature=s3cr3t-pw&X-Amz-Credential=AKIA");
        assert_hidden("s3://b?aws_secret_access_key=s3cr3t-pw");
        assert_hidden("memcached://h?password=s3cr3t-pw");
        assert_hidden("redis://h:1?apiKey=s3cr3t-pw");
    }

    #[test]
    fn malformed_urls_never_echo_a_secret() {
        for url in [
            "redis:/:s3cr3t-pw@host:6379",
            "redis//user:s3cr3t-pw@host",
            ":s3cr3t-pw@host:6379",
            "s3cr3t-pw@host",
            "redis://:s3cr3t-pw",
            "redis://host:s3cr3t-pw",
            "redis://[::1]:s3cr3t-pw",
            "redis://[::1:s3cr3t-pw",
            "1redis://:s3cr3t-pw@h",
        ] {
            assert_hidden(url);
        }
    }

    #[test]
    fn secrets_are_found_and_scrubbed() {
        let secrets = url_secrets("redis://u:p%40ss@h:1,redis://:other@h:2?token=t0k");
        for s in ["p%40ss", "p@ss", "other", "t0k"] {
            assert!(secrets.iter().any(|x| x == s), "{s} in {secrets:?}");
        }
        assert_eq!(
            scrub("auth with p@ss failed, other, t0k", &secrets),
            "auth with *** failed, ***, ***"
        );
        assert!(url_secrets("redis://h:1").is_empty());
        assert_eq!(scrub("unchanged", &[]), "unchanged");
    }
}
