//! The lease of a run: which driver drives it. A driver takes it create-if-absent (as `train`
//! takes the spec) before it invokes anything, renews it with its heartbeat and releases it at
//! the end, so that a second driver (`mlless train --resume` of a run still running) is refused
//! instead of sharing the run's channel with the first. A lease not renewed for
//! [`LEASE_STALE`] is a crashed or lost driver's, and `--resume` takes it over.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use mlless_faas::clock::{UtcTime, unix_ms};
use mlless_store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::error::{Result, RuntimeError};
use crate::runs::HEARTBEAT_EVERY;

/// Key of the lease below the run's location.
pub const LEASE_KEY: &str = "lease.json";

/// How long a lease not renewed still holds the run: three heartbeats. After that its driver
/// is taken as crashed or lost, and `--resume` may take the run over.
pub const LEASE_STALE: Duration = Duration::from_secs(3 * HEARTBEAT_EVERY.as_secs());

/// The lease of a run ([`LEASE_KEY`]): the driver that holds it and when it last said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// When its driver took it, milliseconds since the Unix epoch.
    pub started_at_unix_ms: u64,
    /// When its driver last renewed it.
    pub renewed_at_unix_ms: u64,
    /// The driver's process id, on its machine.
    pub pid: u32,
    /// This driver's own token, so that it renews and releases only its own lease.
    pub token: String,
}

impl Lease {
    /// Whether the lease has not been renewed for longer than [`LEASE_STALE`] at `now_unix_ms`.
    pub fn is_stale(&self, now_unix_ms: u64) -> bool {
        now_unix_ms.saturating_sub(self.renewed_at_unix_ms) > LEASE_STALE.as_millis() as u64
    }

    /// Takes the lease of the run in `run` for this driver: created if absent; one that is
    /// held and fresh is [`RuntimeError::RunInUse`]; a stale or unreadable one is taken over.
    pub(crate) async fn take(run: &Store) -> Result<Lease> {
        let now = unix_ms(SystemTime::now());
        let lease = Lease {
            started_at_unix_ms: now,
            renewed_at_unix_ms: now,
            pid: std::process::id(),
            token: uuid::Uuid::now_v7().to_string(),
        };
        let json = lease.to_json(run)?;
        // Twice: a stale lease deleted here may be taken by another driver first.
        for _ in 0..2 {
            match run.put_if_absent(LEASE_KEY, json.clone()).await {
                Ok(()) => return Ok(lease),
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let Some(bytes) = run.get_opt(LEASE_KEY).await? else {
                continue; // released meanwhile
            };
            match serde_json::from_slice::<Lease>(&bytes) {
                Ok(held) if !held.is_stale(now) => return Err(held.in_use(run, now)),
                Ok(held) => warn!(
                    pid = held.pid,
                    "taking over the run from a driver not heard of since {} (a crash?)",
                    utc(held.renewed_at_unix_ms)
                ),
                Err(e) => warn!("taking over an unreadable lease ({e})"),
            }
            run.delete(LEASE_KEY).await?;
        }
        match run.get_opt(LEASE_KEY).await? {
            Some(bytes) => match serde_json::from_slice::<Lease>(&bytes) {
                Ok(held) => Err(held.in_use(run, now)),
                Err(e) => Err(RuntimeError::LeaseRace {
                    location: run.location(LEASE_KEY),
                    source: Some(e),
                }),
            },
            None => Err(RuntimeError::LeaseRace {
                location: run.location(LEASE_KEY),
                source: None,
            }),
        }
    }

    /// Renews this driver's lease (with its heartbeat). A lease another driver took over
    /// (this one was not heard of for [`LEASE_STALE`]) is left to it, with a warning.
    pub(crate) async fn renew(&mut self, run: &Store) -> Result<()> {
        if !self.is_held(run).await? {
            warn!("another driver took over this run's lease: it is no longer renewed here");
            return Ok(());
        }
        self.renewed_at_unix_ms = unix_ms(SystemTime::now());
        run.put(LEASE_KEY, self.to_json(run)?).await?;
        Ok(())
    }

    /// Releases this driver's lease, if it still holds it; a failure is a warning (the lease
    /// goes stale by itself).
    pub(crate) async fn release(&self, run: &Store) {
        let released = match self.is_held(run).await {
            Ok(true) => run.delete(LEASE_KEY).await.map_err(RuntimeError::from),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = released {
            warn!("could not release the run's lease (it goes stale by itself): {e}");
        }
    }

    /// Whether the lease in `run` is this one.
    async fn is_held(&self, run: &Store) -> Result<bool> {
        Ok(run
            .get_opt(LEASE_KEY)
            .await?
            .and_then(|bytes| serde_json::from_slice::<Lease>(&bytes).ok())
            .is_some_and(|held| held.token == self.token))
    }

    fn to_json(&self, run: &Store) -> Result<Bytes> {
        serde_json::to_vec(self)
            .map(Bytes::from)
            .map_err(|source| RuntimeError::Json {
                location: run.location(LEASE_KEY),
                source,
            })
    }

    /// The refusal of a second driver while this lease holds.
    fn in_use(&self, run: &Store, now_unix_ms: u64) -> RuntimeError {
        RuntimeError::RunInUse {
            run_url: run.url().to_owned(),
            started_at: utc(self.started_at_unix_ms),
            pid: self.pid,
            renewed_s_ago: now_unix_ms.saturating_sub(self.renewed_at_unix_ms) / 1000,
        }
    }
}

/// `unix_ms` as a UTC time, `2026-12-05 06:10:03 UTC`.
pub fn utc(unix_ms: u64) -> String {
    let t = UtcTime::of_unix_s(unix_ms / 1000);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_read_as_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_796_451_003_000), "2026-12-05 06:10:03 UTC");
    }

    #[test]
    fn a_lease_goes_stale_after_three_heartbeats_without_renewal() {
        let lease = Lease {
            started_at_unix_ms: 1_000,
            renewed_at_unix_ms: 10_000,
            pid: 1,
            token: "t".into(),
        };
        let stale_after = LEASE_STALE.as_millis() as u64;
        assert!(!lease.is_stale(10_000 + stale_after));
        assert!(lease.is_stale(10_000 + stale_after + 1));
    }

    #[tokio::test]
    async fn a_second_driver_is_refused_until_the_first_releases_or_goes_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = Store::open(&dir.path().display().to_string()).expect("store");
        let mut first = Lease::take(&run).await.expect("the first takes it");
        let err = Lease::take(&run).await.expect_err("the second is refused");
        assert!(err.to_string().contains("still being driven"), "{err}");
        first.renew(&run).await.expect("renews");
        first.release(&run).await;
        let second = Lease::take(&run).await.expect("taken once released");
        // A lease of a driver not heard of for longer than LEASE_STALE is taken over.
        let mut stale = second.clone();
        stale.renewed_at_unix_ms = 0;
        run.put(LEASE_KEY, stale.to_json(&run).expect("json"))
            .await
            .expect("put");
        let third = Lease::take(&run)
            .await
            .expect("a stale lease is taken over");
        assert_ne!(third.token, second.token);
        // The driver that lost it neither renews nor releases the new holder's.
        let mut lost = second;
        lost.renew(&run).await.expect("renew");
        lost.release(&run).await;
        assert!(third.is_held(&run).await.expect("read"));
    }
}
