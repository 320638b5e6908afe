//! Job ids: `job-` and a UUIDv7 in its simple form (32 hex digits), e.g.
//! `job-019ad8c45e3b7c2a8f310a1b2c3d4e5f`.
//!
//! A UUIDv7 begins with its creation time in Unix milliseconds (48 bits) and carries 74 random
//! bits, so ids sort by their start and two runs practically never draw the same one (the
//! ids of one process are also strictly increasing). The id names everything of a job that
//! others could share: its run (`{runs}/{job}`), its channel's keys (`mlless:{job}:…`) and its
//! checkpoints, which carry it ([`crate::checkpoint`]). The driver also writes the job's spec
//! only if none is there ([`mlless_store::Store::put_if_absent`]), so that not even a given
//! id (`mlless train --job-id`, a test aid) can make two runs share a run.
//!
//! Ids of runs written before (`job-{unix seconds}-{8 hex digits}`) are still read:
//! [`started_unix_ms`] knows both forms.

/// The prefix of every job id.
pub const PREFIX: &str = "job-";

/// The longest job id [`check`] accepts.
pub const MAX_LEN: usize = 64;

/// A new job id: [`PREFIX`] and a UUIDv7 (time-ordered, random), e.g.
/// `job-019ad8c45e3b7c2a8f310a1b2c3d4e5f`.
pub fn new() -> String {
    format!("{PREFIX}{}", uuid::Uuid::now_v7().simple())
}

/// When the job of `job_id` started, in Unix milliseconds, as its id says: the timestamp of
/// its UUIDv7, or the seconds of an id of the older form `job-{seconds}-{hex}`; `None` for any
/// other id (one given with `--job-id`).
pub fn started_unix_ms(job_id: &str) -> Option<u64> {
    let rest = job_id.strip_prefix(PREFIX)?;
    if let Some((seconds, _random)) = rest.split_once('-') {
        // The older form (read as `mlless runs` always read it: the seconds alone).
        return seconds.parse::<u64>().ok()?.checked_mul(1000);
    }
    let id = uuid::Uuid::try_parse(rest).ok()?;
    if id.get_version_num() != 7 || rest.len() != 32 {
        return None;
    }
    let (seconds, nanos) = id.get_timestamp()?.to_unix();
    seconds
        .checked_mul(1000)?
        .checked_add(u64::from(nanos) / 1_000_000)
}

/// Checks a job id given by the user (`--job-id`): 1 to [`MAX_LEN`] ASCII letters, digits,
/// `-`, `_` and `.`, not starting with `.` — one segment of an object key and of a channel's
/// key on every backend. The error says what is wrong.
pub fn check(job_id: &str) -> Result<(), String> {
    if job_id.is_empty() || job_id.len() > MAX_LEN {
        return Err(format!(
            "a job id has 1 to {MAX_LEN} characters, not {}",
            job_id.len()
        ));
    }
    if job_id.starts_with('.') {
        return Err("a job id does not start with '.'".into());
    }
    if let Some(c) = job_id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "a job id has only ASCII letters, digits, '-', '_' and '.', not {c:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn now_ms() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    /// 100,000 ids drawn at once are all different, strictly increasing (so sorted by their
    /// start), valid, and say when they were drawn.
    #[test]
    fn ids_are_unique_ordered_and_dated() {
        let before = now_ms();
        let ids: Vec<String> = (0..100_000).map(|_| new()).collect();
        let after = now_ms();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "not increasing");
        assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
        for id in [&ids[0], &ids[ids.len() - 1]] {
            assert_eq!(id.len(), PREFIX.len() + 32, "{id}");
            check(id).expect("a new id is valid");
            let started = started_unix_ms(id).expect("dated");
            assert!((before..=after).contains(&started), "{id}: {started}");
        }
        // Ids of other threads too.
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..10_000).map(|_| new()).collect::<Vec<_>>()))
            .collect();
        let mut all: HashSet<String> = ids.into_iter().collect();
        for thread in threads {
            for id in thread.join().expect("thread") {
                assert!(all.insert(id), "a duplicate id");
            }
        }
    }

    #[test]
    fn older_ids_and_given_ids_are_read() {
        assert_eq!(
            started_unix_ms("job-1764620000-0a1b2c3d"),
            Some(1_764_620_000_000)
        );
        assert_eq!(
            started_unix_ms("job-019ad8c45e3b7c2a8f310a1b2c3d4e5f"),
            Some(0x019a_d8c4_5e3b)
        );
        assert_eq!(started_unix_ms("job-1-lost"), Some(1000));
        for other in [
            "job-1",
            "job-x-0a",
            "run-1764620000-0a1b2c3d",
            // A UUID of another version.
            "job-f47ac10b58cc4372a5670e02b2c3d479",
            "my-test-job",
        ] {
            assert_eq!(started_unix_ms(other), None, "{other}");
        }
    }

    #[test]
    fn given_ids_are_checked() {
        for good in ["job-1", "a", "my_job.2", &"x".repeat(MAX_LEN)] {
            assert_eq!(check(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            ".hidden",
            "a/b",
            "a:b",
            "a b",
            "é",
            &"x".repeat(MAX_LEN + 1),
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }
}
