//! The plain vocabulary of mlless's I/O layer, with no I/O: which object store or channel a URL
//! names ([`StoreKind`], [`ChannelScheme`]) and how a URL is shown without its secrets
//! ([`redact_url`]), the requests a store counted ([`RequestCounts`]), the latency a cloud
//! service adds ([`CloudLatency`]), and what a function platform is asked for and reports
//! ([`Limits`], [`InvocationReport`]).
//!
//! The job's spec and its run record name these, and so does everything that reads a record
//! (the report, the cost model's callers): they depend on this crate, not on `mlless-store` and
//! `mlless-faas`, whose clients (`object_store`, `tokio`, Redis, HTTP) they do not need. Those
//! two crates re-export every item here under their own names.

use std::time::Duration;

pub mod function;
pub mod latency;
pub mod parse;
pub mod redact;
pub mod requests;
pub mod scheme;

pub use function::{InvocationReport, Limits, Outcome};
pub use latency::{CloudLatency, EmulateError};
pub use parse::{InvalidUrl, supported_channel_urls};
pub use redact::{redact_url, scrub, url_secrets};
pub use requests::{RequestCounter, RequestCounts};
pub use scheme::{ChannelScheme, StoreKind, supported_store_urls};

/// How long an outage of a remote channel is ridden out by default (`--channel-grace`), before
/// an operation fails.
pub const DEFAULT_CHANNEL_GRACE: Duration = Duration::from_secs(30);
