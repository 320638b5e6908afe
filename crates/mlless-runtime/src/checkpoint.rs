//! Hand-off at the lifetime limit (DESIGN §7): a worker or the supervisor that nears its
//! function's lifetime cap writes its whole state as a checkpoint and ends; the driver sees the
//! checkpoint of the next generation and invokes the role again, and the new invocation resumes
//! from it — no step lost, none repeated.
//!
//! The driver re-invokes rather than the function itself (LambdaML's self-invocation): the
//! driver already waits for every invocation and meters it, so each generation shows in the
//! run record and the bill, and nothing in a role needs to know how it was invoked.
//!
//! A checkpoint is one framed object, `checkpoints/{role}/{generation:06}.bin` below the run:
//! written in one `put` (atomic on every store) and checked (magic, version, length, CRC) when
//! read, so a half-written checkpoint is never taken for a whole one.

use std::time::{Duration, Instant};

use mlless_store::Store;

use crate::error::Result;
use crate::messages::Message;

/// The key of `role`'s checkpoint for the invocation of `generation` (1 for the first
/// re-invocation).
pub fn checkpoint_key(role: &str, generation: u32) -> String {
    format!("checkpoints/{role}/{generation:06}.bin")
}

/// Writes `state` as `role`'s checkpoint for `generation`, and deletes the one it resumed from.
pub async fn save<T: Message>(store: &Store, role: &str, generation: u32, state: &T) -> Result<()> {
    store
        .put(&checkpoint_key(role, generation), state.encode())
        .await?;
    if let Some(previous) = generation.checked_sub(1).filter(|&g| g > 0) {
        store.delete(&checkpoint_key(role, previous)).await?;
    }
    Ok(())
}

/// Reads `role`'s checkpoint for `generation`.
pub async fn load<T: Message>(store: &Store, role: &str, generation: u32) -> Result<T> {
    let key = checkpoint_key(role, generation);
    let bytes = store.get(&key).await?;
    T::decode(&bytes, || store.location(&key))
}

/// Whether `role` left a checkpoint for `generation`, i.e. asked to be invoked again.
pub async fn exists(store: &Store, role: &str, generation: u32) -> Result<bool> {
    Ok(store.exists(&checkpoint_key(role, generation)).await?)
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
    fn keys_sort_by_generation() {
        assert_eq!(
            checkpoint_key("worker-3", 12),
            "checkpoints/worker-3/000012.bin"
        );
    }
}
