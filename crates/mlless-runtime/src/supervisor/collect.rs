//! Collecting the workers' messages of a step: their statistics within a deadline (asking for
//! replacements of the silent ones), and their final replicas.

use super::*;

/// How long the supervisor waits for a step's statistics before it has the late workers
/// replaced.
#[derive(Debug, Clone, Copy)]
pub(super) enum Deadline {
    /// `--worker-deadline`.
    Given(Duration),
    /// The default, from the run's own step times ([`StepTimes::deadline`]).
    Derived(Duration),
}

impl Deadline {
    /// `--worker-deadline` if given, else the one derived from `step_times`.
    pub(super) fn of(spec: &mlless_job::JobSpec, step_times: &StepTimes) -> Self {
        match spec.training.worker_deadline_s {
            Some(seconds) => Self::Given(mlless_job::config::saturating_seconds(seconds)),
            None => Self::Derived(step_times.deadline(spec.training.limits.timeout)),
        }
    }

    pub(super) fn duration(self) -> Duration {
        match self {
            Self::Given(d) | Self::Derived(d) => d,
        }
    }
}

impl std::fmt::Display for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Given(d) => write!(f, "--worker-deadline {} s", d.as_secs_f64()),
            Self::Derived(d) => write!(
                f,
                "{:.1} s ({DEADLINE_STEPS} median steps, at least {} s; set it with \
                 --worker-deadline)",
                d.as_secs_f64(),
                DEADLINE_FLOOR.as_secs()
            ),
        }
    }
}

/// How often the wait for the final replicas asks the channel whether it dropped messages.
pub(super) const FINAL_CHECK_EVERY: Duration = Duration::from_secs(5);

/// The final replicas of `survivors`, waited for up to `wait`. A channel that dropped messages
/// (a full Memcached that evicted items, as
/// [`explain_missing`](mlless_store::Channel::explain_missing) tells) stops the wait at the
/// next check ([`FINAL_CHECK_EVERY`]): the replicas still missing then, published right after
/// their workers' last statistics, are most likely among what it dropped.
pub(super) async fn collect_final(
    ctx: &JobContext,
    survivors: &[u32],
    wait: Duration,
) -> Result<Vec<Bytes>> {
    let started = Instant::now();
    loop {
        let slice = wait
            .saturating_sub(started.elapsed())
            .min(FINAL_CHECK_EVERY);
        match ctx
            .channel
            .collect(StepMessages::new(FINAL, 0, survivors), slice)
            .await
        {
            Ok(payloads) => return Ok(payloads),
            Err(ChannelError::Timeout {
                missing, endpoint, ..
            }) => {
                let cause = ctx.channel.explain_missing().await?;
                if cause.is_none() && started.elapsed() < wait {
                    continue;
                }
                let cause = cause.unwrap_or_else(|| {
                    "the channel lost them (a full Memcached evicts items: give it more memory \
                     with -m, or use Redis; a Redis without persistence loses everything when \
                     it restarts)"
                        .to_string()
                });
                return Err(RuntimeError::FunctionFailed(format!(
                    "the final replicas of worker(s) {missing:?} are not on the channel \
                     {endpoint} {:.0} s after their last statistics: {cause}",
                    started.elapsed().as_secs_f64()
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Collects the statistics of `step` from `active`; asks the driver to replace the workers
/// whose statistics are `deadline` late, and goes on waiting.
///
/// # Cancel safety
///
/// Cancel safe apart from the replacement requests: dropped after a request, the request
/// stands (the driver acts on it) and `state` counts it.
pub(super) async fn collect_stats(
    ctx: &JobContext,
    state: &mut SupervisorState,
    step: u64,
    active: &[u32],
    deadline: Deadline,
) -> Result<Vec<bytes::Bytes>> {
    let spec = &ctx.spec;
    // When this step's first replacements were asked for.
    let mut first_replacement: Option<Instant> = None;
    loop {
        match ctx
            .channel
            .collect(StepMessages::new(STATS, step, active), deadline.duration())
            .await
        {
            Ok(payloads) => return Ok(payloads),
            Err(ChannelError::Timeout {
                missing, endpoint, ..
            }) => {
                // A channel that dropped messages (a full Memcached) would drop the
                // replacements' too: stop, and say why.
                if let Some(cause) = ctx.channel.explain_missing().await? {
                    return Err(RuntimeError::FunctionFailed(format!(
                        "no statistics of step {step} from worker(s) {missing:?} on the channel \
                         {endpoint} within {deadline}: {cause}"
                    )));
                }
                // The workers that wait for a silent one send no statistics either: the silent
                // ones are those that have not published their update of the step (all the
                // late ones, if that tells nothing). If replacing them has not helped for a
                // while (the deadline, at least its floor), the messages the replacements
                // replay from are gone too (a channel that lost its contents): every worker
                // replays from its checkpoint and publishes again.
                let mut silent = Vec::new();
                for &worker in &missing {
                    let (topic, id) = first_message(
                        spec.training.exchange_pattern(),
                        worker,
                        spec.training.workers,
                    )?;
                    if ctx
                        .channel
                        .poll(StepMessages::new(topic, step, &[id]))
                        .await?[0]
                        .is_none()
                    {
                        silent.push(worker);
                    }
                }
                let patience = deadline.duration().max(DEADLINE_FLOOR);
                let missing = if first_replacement.is_some_and(|t| t.elapsed() >= patience) {
                    active.to_vec()
                } else if silent.is_empty() {
                    missing
                } else {
                    silent
                };
                first_replacement.get_or_insert_with(Instant::now);
                for &worker in &missing {
                    let count = state.replacements.entry(worker).or_default();
                    *count += 1;
                    if *count > MAX_REPLACEMENTS {
                        return Err(RuntimeError::FunctionFailed(format!(
                            "worker {worker} sent nothing for step {step} within {deadline}, \
                             even after {MAX_REPLACEMENTS} replacements"
                        )));
                    }
                }
                let seq = state.replacements.values().sum();
                tracing::warn!(
                    ?missing,
                    step,
                    %deadline,
                    "no statistics within the deadline: asking for replacements of the silent \
                     workers"
                );
                let request = ReplaceRequest {
                    seq,
                    workers: missing,
                    step,
                };
                ctx.channel
                    .put_key(REPLACE_KEY, Bytes::from(json(&request)?))
                    .await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
}
