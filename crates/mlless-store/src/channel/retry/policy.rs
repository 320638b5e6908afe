//! The one retry loop of the crate: a [`RetryPolicy`] (attempts, backoff with jitter, deadline),
//! [`Transient`] (which errors are worth another attempt), and [`run`], which every level that
//! retries calls — [`RetryingChannel`](super::RetryingChannel) with the grace, and a backend
//! used bare with [`RetryPolicy::reconnect`].

use std::time::{Duration, Instant};

use rand::Rng;

use crate::channel::ChannelError;
use crate::store::StoreError;

/// First pause after a transient failure.
pub const RETRY_INITIAL_BACKOFF: Duration = Duration::from_millis(50);
/// Longest pause between two attempts.
pub const RETRY_MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Attempts in all of [`RetryPolicy::reconnect`].
pub const RECONNECT_ATTEMPTS: u32 = 3;
/// Longest pause of [`RetryPolicy::reconnect`].
pub const RECONNECT_MAX_BACKOFF: Duration = Duration::from_secs(1);

/// When a request that failed with a [`Transient`] error is attempted again: at most
/// `max_attempts` attempts in all, the last one starting no later than `deadline` after the first
/// failure, with pauses from `initial_backoff` doubling up to `max_backoff`, each jittered to
/// between half and all of its nominal value (so that the workers of a job do not retry in
/// lockstep).
///
/// A request is retried at one level only: a backend that retries its own requests
/// ([`RetryPolicy::reconnect`] when used bare) is given [`RetryPolicy::none`] when a
/// [`RetryingChannel`](super::RetryingChannel) retries it, as
/// [`open_channel_with`](crate::open_channel_with) does.
///
/// ```
/// use std::time::Duration;
/// use mlless_store::retry::RetryPolicy;
///
/// assert!(!RetryPolicy::none().retries());
/// assert!(RetryPolicy::grace(Duration::from_secs(30)).retries());
/// assert!(!RetryPolicy::grace(Duration::ZERO).retries());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Most attempts in all; `None`: as many as the deadline allows.
    pub max_attempts: Option<u32>,
    /// How long after the first failure the last attempt may start; `None`: no deadline.
    pub deadline: Option<Duration>,
    /// The first pause.
    pub initial_backoff: Duration,
    /// The longest pause.
    pub max_backoff: Duration,
}

impl RetryPolicy {
    /// One attempt, no retry: for a backend whose requests a decorator retries.
    pub const fn none() -> Self {
        RetryPolicy {
            max_attempts: Some(1),
            deadline: None,
            initial_backoff: RETRY_INITIAL_BACKOFF,
            max_backoff: RETRY_MAX_BACKOFF,
        }
    }

    /// Rides out an outage shorter than `grace` (`--channel-grace`): attempts from
    /// [`RETRY_INITIAL_BACKOFF`] doubling up to [`RETRY_MAX_BACKOFF`], the last one when the
    /// grace runs out. Zero: one attempt. [`RetryingChannel`](super::RetryingChannel)'s.
    pub const fn grace(grace: Duration) -> Self {
        RetryPolicy {
            max_attempts: None,
            deadline: Some(grace),
            initial_backoff: RETRY_INITIAL_BACKOFF,
            max_backoff: RETRY_MAX_BACKOFF,
        }
    }

    /// Rides out a dropped connection, not an outage: [`RECONNECT_ATTEMPTS`] attempts, pauses
    /// from [`RETRY_INITIAL_BACKOFF`] doubling up to [`RECONNECT_MAX_BACKOFF`]. What a backend
    /// that reconnects by itself (Redis, Memcached) does when used bare.
    pub const fn reconnect() -> Self {
        RetryPolicy {
            max_attempts: Some(RECONNECT_ATTEMPTS),
            deadline: None,
            initial_backoff: RETRY_INITIAL_BACKOFF,
            max_backoff: RECONNECT_MAX_BACKOFF,
        }
    }

    /// Whether the policy ever attempts a request twice.
    pub fn retries(&self) -> bool {
        self.max_attempts.is_none_or(|n| n > 1) && self.deadline.is_none_or(|d| !d.is_zero())
    }

    /// Whether another attempt may follow `attempts` attempts, the first failure `failing_for`
    /// ago.
    pub fn allows_another(&self, attempts: u32, failing_for: Duration) -> bool {
        self.max_attempts.is_none_or(|n| attempts < n)
            && self.deadline.is_none_or(|d| failing_for < d)
    }

    /// The pause before the next attempt, `failing_for` after the first failure: the next of
    /// `backoff`, cut so that the last attempt starts when the deadline runs out.
    pub(crate) fn pause(&self, backoff: &mut Backoff, failing_for: Duration) -> Duration {
        let pause = backoff.next_delay();
        match self.deadline {
            Some(deadline) => pause.min(deadline.saturating_sub(failing_for)),
            None => pause,
        }
    }

    /// The pauses of this policy.
    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(self.initial_backoff, self.max_backoff)
    }
}

/// Which errors are worth another attempt: the connection was refused, reset or dropped, the
/// server did not answer in time or is busy — not something about the request. Each backend says
/// it of its client's errors.
pub trait Transient {
    /// Whether another attempt may succeed.
    fn is_transient(&self) -> bool;
}

impl Transient for ChannelError {
    fn is_transient(&self) -> bool {
        ChannelError::is_transient(self)
    }
}

impl Transient for StoreError {
    fn is_transient(&self) -> bool {
        StoreError::is_transient(self)
    }
}

/// How [`run`] ended.
#[derive(Debug)]
pub struct Attempts<T, E> {
    /// The last attempt's result.
    pub result: Result<T, E>,
    /// How many attempts were made.
    pub attempts: u32,
    /// When the first attempt failed transiently, if one did.
    pub first_failure: Option<Instant>,
}

impl<T, E> Attempts<T, E> {
    /// Whether the attempts ended on a transient error: the policy ran out.
    pub fn exhausted(&self) -> bool
    where
        E: Transient,
    {
        matches!(&self.result, Err(e) if e.is_transient())
    }
}

/// Runs `attempt` until it succeeds, fails with an error that is not [`Transient`], or `policy`
/// allows no other attempt. `on_failure` hears of every transient failure: the error, the
/// attempts so far, and the pause before the next one (`None`: the policy ran out).
pub async fn run<T, E, F, Fut>(
    policy: &RetryPolicy,
    mut attempt: F,
    mut on_failure: impl FnMut(&E, u32, Option<Duration>),
) -> Attempts<T, E>
where
    E: Transient,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut backoff = policy.backoff();
    let mut first_failure: Option<Instant> = None;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let result = attempt().await;
        let error = match &result {
            Err(e) if e.is_transient() => e,
            _ => {
                return Attempts {
                    result,
                    attempts,
                    first_failure,
                };
            }
        };
        let failing_for = first_failure.get_or_insert_with(Instant::now).elapsed();
        if !policy.allows_another(attempts, failing_for) {
            on_failure(error, attempts, None);
            return Attempts {
                result,
                attempts,
                first_failure,
            };
        }
        let pause = policy.pause(&mut backoff, failing_for);
        on_failure(error, attempts, Some(pause));
        tokio::time::sleep(pause).await;
    }
}

/// The pauses between attempts: `initial`, doubling up to `max`, each jittered.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Backoff { next: initial, max }
    }

    /// The next nominal pause (before jitter).
    pub(crate) fn next_nominal(&mut self) -> Duration {
        let nominal = self.next.min(self.max);
        self.next = (self.next * 2).min(self.max);
        nominal
    }

    /// The next pause: the nominal one scaled by a random factor in [0.5, 1].
    pub(crate) fn next_delay(&mut self) -> Duration {
        jitter(self.next_nominal(), rand::rng().random_range(0.0..=1.0))
    }
}

/// `nominal` scaled to between half and all of it: `unit` in [0, 1] picks where.
pub(crate) fn jitter(nominal: Duration, unit: f64) -> Duration {
    nominal.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fails(bool);

    impl Transient for Fails {
        fn is_transient(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut b = Backoff::new(RETRY_INITIAL_BACKOFF, RETRY_MAX_BACKOFF);
        let nominal: Vec<u64> = (0..9)
            .map(|_| b.next_nominal().as_millis() as u64)
            .collect();
        assert_eq!(nominal, [50, 100, 200, 400, 800, 1600, 2000, 2000, 2000]);
    }

    #[test]
    fn jitter_stays_between_half_and_all() {
        let d = Duration::from_millis(800);
        assert_eq!(jitter(d, 0.0), Duration::from_millis(400));
        assert_eq!(jitter(d, 1.0), d);
        assert_eq!(jitter(d, 0.5), Duration::from_millis(600));
        let mut b = Backoff::new(RETRY_INITIAL_BACKOFF, RETRY_MAX_BACKOFF);
        for i in 0..20 {
            let nominal = RETRY_INITIAL_BACKOFF
                .saturating_mul(1 << i.min(10))
                .min(RETRY_MAX_BACKOFF);
            let delay = b.next_delay();
            assert!(
                delay >= nominal / 2 && delay <= nominal,
                "{delay:?} vs {nominal:?}"
            );
        }
    }

    #[test]
    fn policies_bound_the_attempts() {
        assert!(!RetryPolicy::none().allows_another(1, Duration::ZERO));
        let reconnect = RetryPolicy::reconnect();
        assert!(reconnect.allows_another(2, Duration::from_secs(100)));
        assert!(!reconnect.allows_another(3, Duration::ZERO));
        let grace = RetryPolicy::grace(Duration::from_secs(1));
        assert!(grace.allows_another(1000, Duration::from_millis(999)));
        assert!(!grace.allows_another(2, Duration::from_secs(1)));
    }

    #[tokio::test]
    async fn run_retries_transient_errors_only() {
        let mut heard = Vec::new();
        let outcome = run(
            &RetryPolicy::reconnect(),
            || std::future::ready(Err::<(), _>(Fails(true))),
            |_, attempts, pause| heard.push((attempts, pause.is_some())),
        )
        .await;
        assert_eq!(outcome.attempts, RECONNECT_ATTEMPTS);
        assert!(outcome.exhausted());
        assert_eq!(heard, [(1, true), (2, true), (3, false)]);
        let outcome = run(
            &RetryPolicy::reconnect(),
            || std::future::ready(Err::<(), _>(Fails(false))),
            |_, _, _| panic!("not transient"),
        )
        .await;
        assert_eq!(outcome.attempts, 1);
        assert!(!outcome.exhausted());
        assert!(outcome.first_failure.is_none());
    }
}
