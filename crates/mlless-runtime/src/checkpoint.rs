//! Checkpoints of a function's whole state (DESIGN §7): taken every `--checkpoint-every` steps,
//! and at the hand-off before the lifetime limit.
//!
//! - **Hand-off**: a worker or the supervisor that nears its function's lifetime cap writes its
//!   state and a hand-off marker, and ends; the driver sees the marker of the next generation
//!   and invokes the role again, which resumes from the checkpoint — no step lost, none
//!   repeated. The driver re-invokes rather than the function itself (LambdaML's
//!   self-invocation): it already waits for every invocation and meters it, so each generation
//!   shows in the run record and the bill, and nothing in a role knows how it was invoked.
//! - **Recovery**: a replacement for a dead worker, a re-invoked supervisor, and
//!   `mlless train --resume` start from the role's latest intact checkpoint.
//!
//! A checkpoint is one framed object, `checkpoints/{role}/step-{step:012}.bin` below the run
//! (`step` is the step the state is ready to run), written in one `put` (atomic on every store)
//! and checked (magic, version, length, CRC) when read, so a half-written checkpoint is never
//! taken for a whole one. Its payload begins with its [`Stamp`] — the job, the role and the
//! step it is of — and a checkpoint whose stamp is not the one its reader expects (copied from
//! another run, or renamed) is refused ([`RuntimeError::ForeignCheckpoint`]). A role keeps its
//! checkpoints from the last step that is a multiple of the checkpoint interval before its
//! newest one on, so the roles always share one step to resume from together, and an older one
//! when the newest of some role is damaged ([`newest_intact_step`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use tracing::warn;

use crate::error::{Result, RuntimeError};
use crate::messages::Message;

/// The prefix below a run of every checkpoint and hand-off marker.
pub const CHECKPOINTS: &str = "checkpoints";

/// The magic of a worker's checkpoint (`WorkerCheckpoint`).
pub const WORKER_MAGIC: [u8; 4] = *b"MLLW";

/// The magic of the supervisor's checkpoint (`SupervisorState`).
pub const SUPERVISOR_MAGIC: [u8; 4] = *b"MLLV";

/// The magic of `role`'s checkpoints.
fn magic_of(role: &str) -> [u8; 4] {
    if role == mlless_job::SUPERVISOR_ROLE {
        SUPERVISOR_MAGIC
    } else {
        WORKER_MAGIC
    }
}

/// What a checkpoint is of, written at the start of its payload before the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The job ([`mlless_job::JobSpec::job_id`]).
    pub job_id: String,
    /// The role (`supervisor`, `worker-3`).
    pub role: String,
    /// The step the state is ready to run.
    pub step: u64,
}

impl Stamp {
    /// The stamp of `role`'s checkpoint of `step` in job `job_id`.
    pub fn new(job_id: &str, role: &str, step: u64) -> Self {
        Self {
            job_id: job_id.to_owned(),
            role: role.to_owned(),
            step,
        }
    }
}

impl std::fmt::Display for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {}, {} at step {}",
            self.job_id, self.role, self.step
        )
    }
}

/// The payload of a checkpoint as written: the stamp, then the state.
#[derive(Serialize)]
struct Stamped<'a, T> {
    stamp: &'a Stamp,
    state: &'a T,
}

/// The payload of a checkpoint as read.
#[derive(Deserialize)]
struct StampedState<T> {
    stamp: Stamp,
    state: T,
}

/// Encodes `state` as the checkpoint `stamp` says (a frame with `T`'s magic).
pub fn encode<T: Message>(stamp: &Stamp, state: &T) -> Bytes {
    Bytes::from(mlless_data::encode_framed(
        T::MAGIC,
        &Stamped { stamp, state },
    ))
}

/// Decodes a checkpoint whatever its stamp says, and returns both (the fuzz targets' and the
/// tests' decoder; [`load`] also checks the stamp); `location` names it in the error.
pub fn decode_any<T: Message>(
    bytes: &[u8],
    location: impl FnOnce() -> String,
) -> Result<(Stamp, T)> {
    let read: StampedState<T> =
        mlless_data::decode_framed(T::MAGIC, bytes).map_err(|source| RuntimeError::Corrupt {
            location: location(),
            source,
        })?;
    Ok((read.stamp, read.state))
}

/// The key of `role`'s checkpoint of the state ready to run `step`.
pub fn checkpoint_key(role: &str, step: u64) -> String {
    format!("{CHECKPOINTS}/{role}/step-{step:012}.bin")
}

/// The key of the marker that `role`'s invocation of `generation` is to resume from a hand-off.
pub fn handoff_key(role: &str, generation: u32) -> String {
    format!("{CHECKPOINTS}/{role}/handoff-{generation:06}.json")
}

/// The step below which checkpoints (and the messages a replay needs) may go, once a checkpoint
/// of `step` exists: the last multiple of `every` before it (`step` itself without periodic
/// checkpoints).
pub fn keep_from(step: u64, every: u64) -> u64 {
    match every {
        0 => step,
        n => (step.saturating_sub(1) / n) * n,
    }
}

/// Writes `state` as `role`'s checkpoint of `step` in job `job_id`, and deletes its
/// checkpoints before [`keep_from`]`(step, every)`.
pub async fn save<T: Message>(
    store: &Store,
    job_id: &str,
    role: &str,
    step: u64,
    every: u64,
    state: &T,
) -> Result<()> {
    let stamp = Stamp::new(job_id, role, step);
    store
        .put(&checkpoint_key(role, step), encode(&stamp, state))
        .await?;
    let keep = keep_from(step, every);
    for old in steps(store, role).await? {
        if old < keep {
            store.delete(&checkpoint_key(role, old)).await?;
        }
    }
    Ok(())
}

/// Writes `state` as `role`'s checkpoint of `step` and the marker that tells the driver to
/// invoke `generation` from it.
pub async fn hand_off<T: Message>(
    store: &Store,
    job_id: &str,
    role: &str,
    generation: u32,
    step: u64,
    every: u64,
    state: &T,
) -> Result<()> {
    save(store, job_id, role, step, every, state).await?;
    store
        .put(
            &handoff_key(role, generation),
            Bytes::from(step.to_string()),
        )
        .await?;
    Ok(())
}

/// The step `role` handed off at for `generation`, if it did.
pub async fn handoff_step(store: &Store, role: &str, generation: u32) -> Result<Option<u64>> {
    let key = handoff_key(role, generation);
    let Some(bytes) = store.get_opt(&key).await? else {
        return Ok(None);
    };
    let step = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| {
            RuntimeError::FunctionFailed(format!("{} is not a step number", store.location(&key)))
        })?;
    Ok(Some(step))
}

/// Reads `role`'s checkpoint of `step` in job `job_id`: an error if it is damaged
/// ([`RuntimeError::Corrupt`]) or is not of that job, role and step
/// ([`RuntimeError::ForeignCheckpoint`]).
pub async fn load<T: Message>(store: &Store, job_id: &str, role: &str, step: u64) -> Result<T> {
    let key = checkpoint_key(role, step);
    let bytes = store.get(&key).await?;
    let (stamp, state) = decode_any::<T>(&bytes, || store.location(&key))?;
    check_stamp(store, &key, stamp, &Stamp::new(job_id, role, step))?;
    Ok(state)
}

/// `Ok` if `found` is `expected`; otherwise the [`RuntimeError::ForeignCheckpoint`] of `key`.
fn check_stamp(store: &Store, key: &str, found: Stamp, expected: &Stamp) -> Result<()> {
    if found == *expected {
        return Ok(());
    }
    Err(RuntimeError::ForeignCheckpoint {
        location: store.location(key),
        expected: expected.to_string(),
        found: found.to_string(),
    })
}

/// What [`inspect`] found of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspection {
    /// Whole (frame, length and checksum hold), with this stamp.
    Intact(Stamp),
    /// Missing, half-written or otherwise unreadable: why.
    Damaged(String),
}

/// Reads `role`'s checkpoint of `step` and checks its frame (magic, version, length, CRC) and
/// its stamp, without decoding the state (which only the role's own code knows). A store
/// that cannot be read is an error; an object that is not there or not whole is
/// [`Inspection::Damaged`].
pub async fn inspect(store: &Store, role: &str, step: u64) -> Result<Inspection> {
    let key = checkpoint_key(role, step);
    let bytes = match store.get(&key).await {
        Ok(bytes) => bytes,
        Err(StoreError::NotFound { .. }) => return Ok(Inspection::Damaged("missing".into())),
        Err(e) => return Err(e.into()),
    };
    // The stamp opens the payload; the frame is checked whole (length, checksum) first.
    Ok(
        match mlless_data::decode_framed_prefix::<Stamp>(magic_of(role), &bytes) {
            Ok(stamp) => Inspection::Intact(stamp),
            Err(e) => Inspection::Damaged(e.to_string()),
        },
    )
}

/// The newest step of which every role of `roles` has an intact checkpoint of job `job_id`
/// ([`inspect`]): what `--resume` starts every role from, and a replacement its role. A
/// step at which some role's checkpoint is damaged (a half-written or truncated object) is
/// passed over, with a warning, for an older one; a checkpoint that is whole but of another
/// job, role or step (copied from another run) is an error, never passed over. `Ok(None)`
/// when no step is left; `damaged` then holds what was wrong with each step tried.
pub async fn newest_intact_step(
    store: &Store,
    job_id: &str,
    roles: &[String],
    damaged: &mut Vec<String>,
) -> Result<Option<u64>> {
    newest_intact_step_at_most(store, job_id, roles, u64::MAX, damaged).await
}

/// [`newest_intact_step`] among the steps up to `at_most`: where a replacement that must replay
/// step `at_most` (the supervisor still waits for its statistics) starts.
pub async fn newest_intact_step_at_most(
    store: &Store,
    job_id: &str,
    roles: &[String],
    at_most: u64,
    damaged: &mut Vec<String>,
) -> Result<Option<u64>> {
    let mut common: Option<BTreeSet<u64>> = None;
    for role in roles {
        let steps: BTreeSet<u64> = steps(store, role).await?.into_iter().collect();
        common = Some(match common {
            None => steps,
            Some(c) => c.intersection(&steps).copied().collect(),
        });
    }
    for &step in common.unwrap_or_default().range(..=at_most).rev() {
        let mut intact = true;
        for role in roles {
            match inspect(store, role, step).await? {
                Inspection::Intact(stamp) => {
                    let key = checkpoint_key(role, step);
                    check_stamp(store, &key, stamp, &Stamp::new(job_id, role, step))?;
                }
                Inspection::Damaged(why) => {
                    let location = store.location(&checkpoint_key(role, step));
                    warn!(%location, step, reason = %why, "damaged checkpoint: passed over for an older step");
                    damaged.push(format!("{location}: {why}"));
                    intact = false;
                }
            }
        }
        if intact {
            return Ok(Some(step));
        }
    }
    Ok(None)
}

/// The steps `role` has checkpoints of, ascending.
pub async fn steps(store: &Store, role: &str) -> Result<Vec<u64>> {
    let prefix = format!("{CHECKPOINTS}/{role}/");
    let mut steps: Vec<u64> = store
        .list(&prefix)
        .await?
        .iter()
        .filter_map(|key| {
            key.strip_prefix(&prefix)?
                .strip_prefix("step-")?
                .strip_suffix(".bin")?
                .parse()
                .ok()
        })
        .collect();
    steps.sort_unstable();
    Ok(steps)
}

/// The time a function has left, and whether it should hand off before its next step.
#[derive(Debug)]
pub struct Lifetime {
    started: Instant,
    timeout: Duration,
    longest_step: Duration,
}

impl Lifetime {
    /// A function that started now and is stopped after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self {
            started: Instant::now(),
            timeout,
            longest_step: Duration::ZERO,
        }
    }

    /// Notes how long a step took.
    pub fn observe_step(&mut self, duration: Duration) {
        self.longest_step = self.longest_step.max(duration);
    }

    /// Whether the next step might not end in time: less than twice the longest step so far,
    /// plus a tenth of the lifetime (at least 500 ms, for the checkpoint and the exit, which a
    /// loaded machine can slow to a few hundred ms), is left.
    pub fn nearly_over(&self) -> bool {
        let margin = (self.timeout / 10).max(Duration::from_millis(500));
        self.started.elapsed() + 2 * self.longest_step + margin >= self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::ReplicaMessage;

    #[test]
    fn lifetime_leaves_room_for_two_steps_and_a_margin() {
        let mut life = Lifetime::new(Duration::from_secs(100));
        assert!(!life.nearly_over());
        life.observe_step(Duration::from_secs(30));
        assert!(!life.nearly_over(), "0 + 60 + 10 < 100");
        life.observe_step(Duration::from_secs(45));
        assert!(life.nearly_over(), "0 + 90 + 10 >= 100");
        assert!(Lifetime::new(Duration::from_millis(450)).nearly_over());
    }

    #[test]
    fn checkpoints_are_kept_from_the_last_aligned_step_before() {
        assert_eq!(keep_from(200, 100), 100);
        assert_eq!(keep_from(205, 100), 200);
        assert_eq!(keep_from(130, 100), 100);
        assert_eq!(keep_from(100, 100), 0);
        assert_eq!(keep_from(37, 0), 37);
    }

    fn state() -> ReplicaMessage {
        ReplicaMessage {
            worker: 0,
            step: 1,
            params: vec![0.5, -1.0],
        }
    }

    /// Stand-ins of the two checkpoint types, with their magics.
    #[derive(Debug, Serialize, Deserialize)]
    struct WorkerState(Vec<f32>);
    impl Message for WorkerState {
        const MAGIC: [u8; 4] = WORKER_MAGIC;
    }
    #[derive(Debug, Serialize, Deserialize)]
    struct SupervisorState(u64);
    impl Message for SupervisorState {
        const MAGIC: [u8; 4] = SUPERVISOR_MAGIC;
    }

    /// Saves a stand-in checkpoint of `role`'s type (every 100 steps: none of the tests' is
    /// pruned).
    async fn save_role(store: &Store, job_id: &str, role: &str, step: u64) {
        let saved = if role == mlless_job::SUPERVISOR_ROLE {
            save(store, job_id, role, step, 100, &SupervisorState(step)).await
        } else {
            save(store, job_id, role, step, 100, &WorkerState(vec![0.5; 3])).await
        };
        saved.expect("saved");
    }

    #[tokio::test]
    async fn saved_checkpoints_are_listed_and_pruned() {
        let store = Store::open("memory://checkpoints-test").expect("memory store");
        let state = state();
        for step in [10, 20, 25, 30, 40] {
            save(&store, "job-a", "worker-0", step, 10, &state)
                .await
                .unwrap();
        }
        assert_eq!(steps(&store, "worker-0").await.unwrap(), vec![30, 40]);
        hand_off(&store, "job-a", "worker-0", 3, 43, 10, &state)
            .await
            .unwrap();
        assert_eq!(steps(&store, "worker-0").await.unwrap(), vec![40, 43]);
        assert_eq!(handoff_step(&store, "worker-0", 3).await.unwrap(), Some(43));
        assert_eq!(handoff_step(&store, "worker-0", 4).await.unwrap(), None);
        let back: ReplicaMessage = load(&store, "job-a", "worker-0", 43).await.unwrap();
        assert_eq!(back.params, state.params);
    }

    /// A checkpoint of another job, or put under another role's or step's name, is refused
    /// naming it and both stamps, by `load` and by the driver's `newest_intact_step`.
    #[tokio::test]
    async fn checkpoints_of_another_job_role_or_step_are_refused() {
        let store = Store::open("memory://checkpoints-foreign").expect("memory store");
        save_role(&store, "job-a", "worker-0", 10).await;
        let err = load::<WorkerState>(&store, "job-b", "worker-0", 10)
            .await
            .unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, RuntimeError::ForeignCheckpoint { .. }));
        assert!(
            message.contains("worker-0/step-000000000010.bin")
                && message.contains("job job-a, worker-0 at step 10")
                && message.contains("not of job job-b, worker-0 at step 10"),
            "{message}"
        );
        let roles = ["worker-0".to_string()];
        let err = newest_intact_step(&store, "job-b", &roles, &mut Vec::new())
            .await
            .unwrap_err();
        assert!(
            matches!(err, RuntimeError::ForeignCheckpoint { .. }),
            "{err}"
        );
        // Another role's checkpoint copied under this role's name.
        let bytes = store.get(&checkpoint_key("worker-0", 10)).await.unwrap();
        store
            .put(&checkpoint_key("worker-1", 10), bytes.clone())
            .await
            .unwrap();
        let err = load::<WorkerState>(&store, "job-a", "worker-1", 10)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("not of job job-a, worker-1"),
            "{err}"
        );
        store
            .put(&checkpoint_key("worker-0", 20), bytes)
            .await
            .unwrap();
        let err = load::<WorkerState>(&store, "job-a", "worker-0", 20)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("worker-0 at step 20"), "{err}");
    }

    /// A replacement that must replay step 29 starts from the newest checkpoint up to it (20),
    /// not from the one written after it (30).
    #[tokio::test]
    async fn a_replay_of_a_step_starts_from_a_checkpoint_before_it() {
        let store = Store::open("memory://checkpoints-at-most").expect("memory store");
        let roles = ["worker-1".to_string()];
        for step in [10, 20, 30] {
            save_role(&store, "job-a", &roles[0], step).await;
        }
        for (step, expected) in [
            (29, Some(20)),
            (30, Some(30)),
            (9, None),
            (u64::MAX, Some(30)),
        ] {
            let found = newest_intact_step_at_most(&store, "job-a", &roles, step, &mut Vec::new())
                .await
                .unwrap();
            assert_eq!(found, expected, "at most {step}");
        }
    }

    /// The newest step whose checkpoints are all intact: a truncated (or emptied, or missing)
    /// newest checkpoint of one role makes it the step before; none left is `None`.
    #[tokio::test]
    async fn a_damaged_newest_checkpoint_falls_back_to_the_step_before() {
        let store = Store::open("memory://checkpoints-damaged").expect("memory store");
        let roles = [
            mlless_job::SUPERVISOR_ROLE.to_string(),
            "worker-0".to_string(),
            "worker-1".to_string(),
        ];
        for role in &roles {
            for step in [10, 20, 30] {
                save_role(&store, "job-a", role, step).await;
            }
        }
        let mut damaged = Vec::new();
        let newest = newest_intact_step(&store, "job-a", &roles, &mut damaged).await;
        assert_eq!(newest.unwrap(), Some(30));
        assert!(damaged.is_empty());
        let key = checkpoint_key("worker-1", 30);
        let whole = store.get(&key).await.unwrap();
        for cut in [whole.len() - 1, 21, 20, 3, 0] {
            store.put(&key, whole.slice(..cut)).await.unwrap();
            let mut damaged = Vec::new();
            let newest = newest_intact_step(&store, "job-a", &roles, &mut damaged).await;
            assert_eq!(newest.unwrap(), Some(20), "cut at {cut}");
            assert_eq!(damaged.len(), 1, "{damaged:?}");
            assert!(damaged[0].contains("worker-1/step-000000000030.bin"));
        }
        // Step 20 missing for one role: back to 10; once that goes too, only the damaged 30
        // is shared, and nothing is left.
        store.delete(&checkpoint_key("worker-0", 20)).await.unwrap();
        let mut damaged = Vec::new();
        let newest = newest_intact_step(&store, "job-a", &roles, &mut damaged).await;
        assert_eq!(newest.unwrap(), Some(10));
        store.delete(&checkpoint_key("worker-0", 10)).await.unwrap();
        let mut damaged = Vec::new();
        let newest = newest_intact_step(&store, "job-a", &roles, &mut damaged).await;
        assert_eq!(newest.unwrap(), None);
        assert_eq!(damaged.len(), 1, "{damaged:?}");
    }
}
