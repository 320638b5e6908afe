//! The invocations of a job's functions: started, handed off at their lifetime limit, replaced
//! after a failure, and what they cost so far.

use std::time::Instant;

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use mlless_cost::{PriceTable, Usage};
use mlless_faas::{FunctionRequest, InvocationReport, Invoker, KillSwitch, Limits, Outcome};
use mlless_store::Store;
use tracing::{info, warn};

use crate::checkpoint;
use crate::error::Result;
use crate::task::Payload;
use crate::task::Start;
use mlless_job::JobSpec;

/// How many times one role is replaced after failures before the run fails.
const MAX_RECOVERIES: u32 = 3;

/// The invocations of a job's roles (supervisor first, then the workers): each role is invoked
/// once, again after each hand-off at its lifetime limit, and replaced after a failure it can
/// recover from.
pub(super) struct Invocations<'a> {
    invoker: &'a dyn Invoker,
    spec: &'a JobSpec,
    run_store: &'a Store,
    names: Vec<String>,
    /// Per role, its current invocation.
    current: Vec<Option<Current>>,
    running: FuturesUnordered<BoxFuture<'static, Ended>>,
    /// Every invocation's name and start, for the cost so far.
    started: Vec<(String, Instant)>,
    /// The reports of the invocations that ended.
    pub(super) reports: Vec<InvocationReport>,
    next_id: u64,
}

/// A role's current invocation.
struct Current {
    id: u64,
    start: Start,
    kill: KillSwitch,
}

/// An invocation's end: its role, its id, its report.
type Ended = (
    usize,
    u64,
    std::result::Result<InvocationReport, mlless_faas::InvokeError>,
);

impl<'a> Invocations<'a> {
    pub(super) fn new(invoker: &'a dyn Invoker, spec: &'a JobSpec, run_store: &'a Store) -> Self {
        let names = mlless_job::roles(spec.training.workers);
        Self {
            invoker,
            spec,
            run_store,
            current: names.iter().map(|_| None).collect(),
            names,
            running: FuturesUnordered::new(),
            started: Vec::new(),
            reports: Vec::new(),
            next_id: 0,
        }
    }

    /// Starts `role` from `start`.
    pub(super) async fn invoke(&mut self, role: usize, start: Start) -> Result<()> {
        let run_url = self.spec.run_url.as_str().to_owned();
        let payload = match role {
            0 => Payload::Supervisor { run_url, start },
            _ => Payload::Worker {
                run_url,
                worker: role as u32 - 1,
                start,
            },
        };
        let mut name = self.names[role].clone();
        if start.generation > 0 {
            name.push_str(&format!("#{}", start.generation));
        }
        if start.recovery > 0 {
            name.push_str(&format!("~{}", start.recovery));
        }
        let invocation = invoke(self.invoker, &name, &payload, self.spec.training.limits).await?;
        info!(
            invocation = %name,
            generation = start.generation,
            recovery = start.recovery,
            resume_step = start.resume_step,
            "invoked"
        );
        let id = self.next_id;
        self.next_id += 1;
        self.current[role] = Some(Current {
            id,
            start,
            kill: invocation.kill_switch(),
        });
        self.started.push((name, Instant::now()));
        self.running
            .push(Box::pin(async move { (role, id, invocation.wait().await) }));
        Ok(())
    }

    pub(super) fn is_running(&self) -> bool {
        !self.running.is_empty()
    }

    pub(super) async fn next(&mut self) -> Option<Ended> {
        self.running.next().await
    }

    pub(super) fn kill_all(&self) {
        for current in self.current.iter().flatten() {
            current.kill.kill();
        }
    }

    /// Handles the end of invocation `id` of `role`: invokes the next generation after a
    /// hand-off, or a replacement after a failure it can recover from. `Err` with the failure
    /// when the run cannot go on.
    pub(super) async fn ended(
        &mut self,
        role: usize,
        id: u64,
        report: &InvocationReport,
    ) -> std::result::Result<(), String> {
        let Some(current) = self.current[role].as_ref().filter(|c| c.id == id) else {
            return Ok(()); // an invocation that was replaced
        };
        let start = current.start;
        let name = self.names[role].clone();
        info!(
            invocation = %report.name,
            outcome = ?report.outcome,
            duration_ms = report.duration_ms,
            peak_rss_mb = report.peak_rss_mb,
            "invocation ended"
        );
        if report.outcome.is_success() {
            self.current[role] = None;
            let next = start.generation + 1;
            let step = checkpoint::handoff_step(self.run_store, &name, next)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(step) = step {
                // It handed off at its lifetime limit: invoke its next generation.
                info!(role = %name, generation = next, step, "invoking again after a hand-off");
                let _ = self
                    .run_store
                    .delete(&checkpoint::handoff_key(&name, next))
                    .await;
                let start = Start {
                    generation: next,
                    recovery: start.recovery,
                    resume_step: Some(step),
                };
                self.invoke(role, start)
                    .await
                    .map_err(|e| format!("could not invoke {name} again: {e}"))?;
            }
            return Ok(());
        }
        let failure = report
            .describe_failure()
            .unwrap_or_else(|| format!("{} failed", report.name));
        if !self.recoverable(role, &report.outcome) {
            return Err(failure);
        }
        warn!(role = %name, "{failure}: replacing it");
        self.replace(role, u64::MAX)
            .await
            .map_err(|e| format!("{failure}, and its replacement could not be invoked: {e}"))
    }

    /// Whether a failure of `role` that ended in `outcome` is survived by a replacement: a
    /// crash or a lost function (not an error the function reported, which would come again),
    /// with checkpoints to resume from, under a synchronous mode (for a worker), and not too
    /// often.
    pub(super) fn recoverable(&self, role: usize, outcome: &Outcome) -> bool {
        let crashed = matches!(
            outcome,
            Outcome::Failed {
                exit_code: None,
                ..
            } | Outcome::TimedOut { .. }
        );
        let recoveries = self.current[role].as_ref().map_or(0, |c| c.start.recovery);
        crashed
            && self.spec.training.checkpoint_every > 0
            && (role == 0 || self.spec.training.sync.is_synchronous())
            && recoveries < MAX_RECOVERIES
    }

    /// Kills `role`'s current invocation, if any, and invokes a replacement that resumes from
    /// the role's latest checkpoint up to step `at_most` (from the start if it has none): a
    /// silent worker's replacement must replay the step whose statistics the supervisor waits
    /// for, which a checkpoint written after it (its statistics still in flight when the
    /// worker died) would skip.
    pub(super) async fn replace(&mut self, role: usize, at_most: u64) -> Result<()> {
        let previous = match self.current[role].take() {
            Some(current) => {
                current.kill.kill();
                current.start
            }
            None => Start::default(),
        };
        let name = &self.names[role];
        // A hand-off marker the killed invocation may have left is stale.
        self.run_store
            .delete(&checkpoint::handoff_key(name, previous.generation + 1))
            .await?;
        // Its newest intact checkpoint (a damaged one is passed over).
        let resume_step = checkpoint::newest_intact_step_at_most(
            self.run_store,
            &self.spec.job_id,
            std::slice::from_ref(name),
            at_most,
            &mut Vec::new(),
        )
        .await?;
        info!(
            role = %name,
            recovery = previous.recovery + 1,
            resume_step,
            "replacing it from its latest checkpoint"
        );
        let start = Start {
            generation: previous.generation,
            recovery: previous.recovery + 1,
            resume_step,
        };
        self.invoke(role, start).await
    }

    /// The billed cost of the invocations so far (running ones up to now).
    pub(super) fn cost_so_far(&self, prices: &PriceTable, memory_mb: u32) -> f64 {
        self.started
            .iter()
            .map(|(name, start)| {
                let duration_ms = self
                    .reports
                    .iter()
                    .find(|r| &r.name == name)
                    .map_or(start.elapsed().as_millis() as u64, |r| r.duration_ms);
                prices.invocation_usd(Usage {
                    duration_ms,
                    memory_mb,
                })
            })
            .sum()
    }
}

/// Starts one invocation of `name` with `payload`.
async fn invoke(
    invoker: &dyn Invoker,
    name: &str,
    payload: &Payload,
    limits: Limits,
) -> Result<mlless_faas::Invocation> {
    Ok(invoker
        .invoke(FunctionRequest {
            name: name.to_string(),
            payload: payload.to_json()?,
            limits,
        })
        .await?)
}
