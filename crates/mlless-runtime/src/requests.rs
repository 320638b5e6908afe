//! The object-store requests of a run, counted where they are made: each worker and supervisor
//! invocation leaves its count in the run store when it ends (`requests/{name}.json`), and the
//! driver adds them up with its own for the run's record and bill.

use bytes::Bytes;
use mlless_store::requests::Request;
use mlless_store::{RequestCounts, Store};
use tracing::warn;

use crate::error::Result;
use crate::task::Start;

/// Where in the run store the invocations leave their counts.
pub(crate) const REQUESTS_PREFIX: &str = "requests";

/// Leaves the requests counted in `store`'s counter (this one's PUT included) as
/// `requests/{role}-g{generation}-r{recovery}-{unix ms}.json`. A failure to write is logged,
/// not returned: it must not fail a function whose work is done.
pub(crate) async fn leave(store: &Store, role: &str, start: Start) {
    let Some(counter) = store.request_counter() else {
        return;
    };
    counter.add(Request::Put, 1);
    let counts = counter.counts();
    let key = format!(
        "{REQUESTS_PREFIX}/{role}-g{}-r{}-{}.json",
        start.generation,
        start.recovery,
        mlless_faas::clock::now_unix_ms_f64() as u64
    );
    let json = match serde_json::to_vec(&counts) {
        Ok(json) => json,
        Err(error) => {
            warn!(%error, "the request counts of {role} could not be encoded");
            return;
        }
    };
    if let Err(error) = store.put(&key, Bytes::from(json)).await {
        warn!(%error, "the request counts of {role} could not be left in the run store");
    }
}

/// The sum of the counts the invocations of the run at `store` left; an object that is not a
/// count is skipped with a warning.
pub(crate) async fn left_by_functions(store: &Store) -> Result<RequestCounts> {
    let mut total = RequestCounts::default();
    for key in store.list(REQUESTS_PREFIX).await? {
        let bytes = store.get(&key).await?;
        match serde_json::from_slice::<RequestCounts>(&bytes) {
            Ok(counts) => total += counts,
            Err(error) => {
                warn!(location = %store.location(&key), %error, "not a request count, skipped")
            }
        }
    }
    Ok(total)
}
