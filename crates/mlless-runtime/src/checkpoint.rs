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
//!   `mlless train --resume` start from the role's latest checkpoint.
//!
//! A checkpoint is one framed object, `checkpoints/{role}/step-{step:012}.bin` below the run
//! (`step` is the step the state is ready to run), written in one `put` (atomic on every store)
//! and checked (magic, version, length, CRC) when read, so a half-written checkpoint is never
//! taken for a whole one. A role keeps its checkpoints from the last step that is a multiple of
//! the checkpoint interval before its newest one on, so the roles always share one step to
//! resume from together.

use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_store::Store;

use crate::error::{Result, RuntimeError};
use crate::messages::Message;

/// The prefix below a run of every checkpoint and hand-off marker.
pub const CHECKPOINTS: &str = "checkpoints";

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

/// Writes `state` as `role`'s checkpoint of `step`, and deletes its checkpoints before
/// [`keep_from`]`(step, every)`.
pub async fn save<T: Message>(
    store: &Store,
    role: &str,
    step: u64,
    every: u64,
    state: &T,
) -> Result<()> {
    store
        .put(&checkpoint_key(role, step), state.encode())
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
    role: &str,
    generation: u32,
    step: u64,
    every: u64,
    state: &T,
) -> Result<()> {
    save(store, role, step, every, state).await?;
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

/// Reads `role`'s checkpoint of `step`.
pub async fn load<T: Message>(store: &Store, role: &str, step: u64) -> Result<T> {
    let key = checkpoint_key(role, step);
    let bytes = store.get(&key).await?;
    T::decode(&bytes, || store.location(&key))
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
    /// plus a tenth of the lifetime (at least 200 ms, for the checkpoint and the exit), is left.
    pub fn nearly_over(&self) -> bool {
        let margin = (self.timeout / 10).max(Duration::from_millis(200));
        self.started.elapsed() + 2 * self.longest_step + margin >= self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetime_leaves_room_for_two_steps_and_a_margin() {
        let mut life = Lifetime::new(Duration::from_secs(100));
        assert!(!life.nearly_over());
        life.observe_step(Duration::from_secs(30));
        assert!(!life.nearly_over(), "0 + 60 + 10 < 100");
        life.observe_step(Duration::from_secs(45));
        assert!(life.nearly_over(), "0 + 90 + 10 >= 100");
        assert!(Lifetime::new(Duration::from_millis(150)).nearly_over());
    }

    #[test]
    fn checkpoints_are_kept_from_the_last_aligned_step_before() {
        assert_eq!(keep_from(200, 100), 100);
        assert_eq!(keep_from(205, 100), 200);
        assert_eq!(keep_from(130, 100), 100);
        assert_eq!(keep_from(100, 100), 0);
        assert_eq!(keep_from(37, 0), 37);
    }

    #[tokio::test]
    async fn saved_checkpoints_are_listed_and_pruned() {
        use crate::messages::ReplicaMessage;
        let store = Store::open("memory://checkpoints-test").expect("memory store");
        let state = ReplicaMessage {
            worker: 0,
            step: 1,
            params: vec![0.5, -1.0],
        };
        {
            for step in [10, 20, 25, 30, 40] {
                save(&store, "worker-0", step, 10, &state).await.unwrap();
            }
            assert_eq!(steps(&store, "worker-0").await.unwrap(), vec![30, 40]);
            hand_off(&store, "worker-0", 3, 43, 10, &state)
                .await
                .unwrap();
            assert_eq!(steps(&store, "worker-0").await.unwrap(), vec![40, 43]);
            assert_eq!(handoff_step(&store, "worker-0", 3).await.unwrap(), Some(43));
            assert_eq!(handoff_step(&store, "worker-0", 4).await.unwrap(), None);
            let back: ReplicaMessage = load(&store, "worker-0", 43).await.unwrap();
            assert_eq!(back.params, state.params);
        }
    }
}
