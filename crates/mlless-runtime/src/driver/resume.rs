//! `mlless train --resume`: a run that stopped, resumed from its checkpoint under a lease, so
//! that two drivers never drive it at once.

use super::*;

/// What `mlless train --resume` may change: the options that do not change the mathematics of
/// the run, only its limits and when it stops; `None` keeps the run's own.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ResumeOptions {
    /// `--memory-mb`: every function's memory cap.
    pub memory_mb: Option<u32>,
    /// `--timeout-s`: every function's lifetime cap.
    pub timeout: Option<Duration>,
    /// `--worker-deadline`: how long a silent worker is waited for.
    pub worker_deadline_s: Option<f64>,
    /// `--channel-grace`: how long the channel may be unreachable.
    pub channel_grace_s: Option<f64>,
    /// `--max-epochs`.
    pub max_epochs: Option<u32>,
    /// `--max-time` (counted from the run's first start).
    pub max_time_s: Option<f64>,
}

impl ResumeOptions {
    /// Sets these options in `config`; returns what changed, one line each
    /// (`"--memory-mb 256 → 512"`).
    pub(super) fn apply(&self, config: &mut TrainingConfig) -> Vec<String> {
        fn set<T: PartialEq + Copy>(
            changes: &mut Vec<String>,
            flag: &str,
            field: &mut T,
            new: Option<T>,
            show: impl Fn(T) -> String,
        ) {
            if let Some(new) = new
                && new != *field
            {
                changes.push(format!("{flag} {} → {}", show(*field), show(new)));
                *field = new;
            }
        }
        let mut changes = Vec::new();
        let c = &mut changes;
        set(
            c,
            "--memory-mb",
            &mut config.limits.memory_mb,
            self.memory_mb,
            |v| v.to_string(),
        );
        set(
            c,
            "--timeout-s",
            &mut config.limits.timeout,
            self.timeout,
            |v| v.as_secs_f64().to_string(),
        );
        let or_none = |v: Option<f64>| v.map_or("none".to_string(), |v| v.to_string());
        set(
            c,
            "--worker-deadline",
            &mut config.worker_deadline_s,
            self.worker_deadline_s.map(Some),
            or_none,
        );
        set(
            c,
            "--channel-grace",
            &mut config.channel_grace_s,
            self.channel_grace_s,
            |v| v.to_string(),
        );
        set(
            c,
            "--max-epochs",
            &mut config.stop.max_epochs,
            self.max_epochs,
            |v| v.to_string(),
        );
        set(
            c,
            "--max-time",
            &mut config.stop.max_time_s,
            self.max_time_s.map(Some),
            or_none,
        );
        changes
    }
}

/// What a failed run's message ends with to say how to continue it: the step `--resume` would
/// continue from (the newest one whose checkpoints every role has intact), or that there is
/// none yet.
pub(super) async fn resume_hint(spec: &JobSpec, run_store: &Store) -> String {
    let roles = mlless_job::roles(spec.training.workers);
    let mut damaged = Vec::new();
    match checkpoint::newest_intact_step(run_store, &spec.job_id, &roles, &mut damaged).await {
        Ok(Some(step)) => format!(
            " (continue the run from its checkpoints of step {step} with `mlless train \
             --resume {}`)",
            spec.run_url.as_str()
        ),
        Ok(None) => " (it failed before its first checkpoint: nothing to resume from)".into(),
        Err(e) => {
            warn!("could not look for the run's checkpoints: {e}");
            String::new()
        }
    }
}

/// The step `mlless train --resume` would continue the run at `run_url` from: the newest one of
/// which its supervisor and every worker have a checkpoint intact. `None` when there is none
/// (trained without `--checkpoint-every`, or stopped before the first): a cancel then offers
/// no `--resume`, which would be refused.
pub async fn resumable_step(run_url: &str) -> Result<Option<u64>> {
    let run_store = Store::open(run_url)?;
    let bytes = run_store.get(SPEC_KEY).await?;
    let spec: JobSpec = serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
        location: run_store.location(SPEC_KEY),
        source,
    })?;
    let roles = mlless_job::roles(spec.training.workers);
    checkpoint::newest_intact_step(&run_store, &spec.job_id, &roles, &mut Vec::new()).await
}

/// Continues the run at `run_url` (`mlless train --resume`) from the last checkpoint its
/// supervisor and workers all have (`--checkpoint-every`), after a failure or a cancel that
/// stopped it, with the limits and stops of `changes` (kept in the spec's
/// [`resumptions`](JobSpec::resumptions)); returns the complete run record.
pub async fn resume(
    run_url: &str,
    changes: &ResumeOptions,
    prices: &PriceTable,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress) -> Control,
) -> Result<RunRecord> {
    let run_store = Store::open(run_url)?.with_request_counter(RequestCounter::new());
    let bytes = run_store.get(SPEC_KEY).await?;
    let spec: JobSpec = serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
        location: run_store.location(SPEC_KEY),
        source,
    })?;
    // One driver at a time: a run still running (its driver renews the lease) is refused
    // before anything of it is read further or written.
    let mut lease = Lease::take(&run_store).await?;
    let result = resume_leased(
        run_url, spec, &run_store, &mut lease, changes, prices, invoker, observe,
    )
    .await;
    lease.release(&run_store).await;
    result
}

/// [`resume`] once the run's lease is this driver's.
#[allow(clippy::too_many_arguments)]
pub(super) async fn resume_leased(
    run_url: &str,
    mut spec: JobSpec,
    run_store: &Store,
    lease: &mut Lease,
    changes: &ResumeOptions,
    prices: &PriceTable,
    invoker: Arc<dyn Invoker>,
    observe: &mut dyn FnMut(&LiveProgress) -> Control,
) -> Result<RunRecord> {
    if let Some(bytes) = run_store.get_opt(RECORD_KEY).await? {
        let record: RunRecord =
            serde_json::from_slice(&bytes).map_err(|source| RuntimeError::Json {
                location: run_store.location(RECORD_KEY),
                source,
            })?;
        if !record.was_cancelled() {
            return Err(RuntimeError::RunFinished {
                run_url: run_url.to_string(),
                record_key: RECORD_KEY,
            });
        }
    }
    // The data set as it was when the run started: prepared again since, it holds other rows.
    let dataset = Dataset::open(spec.data_url.as_str()).await?;
    dataset.check_prepared_as(spec.dataset_id.as_deref(), run_url, spec.data_url.as_str())?;
    // The fleet as train checked it (the spec may be older than a check, or hand-made), before
    // anything is sized by it, and against what this invoker runs at once.
    spec.training.validate(ModelChoice::of(&spec.model))?;
    spec.training
        .validate_concurrency(invoker.platform(), invoker.max_concurrent())?;
    // The newest step of which every role has an intact checkpoint of this job: a damaged
    // (half-written, truncated) one is passed over for an older step, one of another job is
    // refused.
    let roles = mlless_job::roles(spec.training.workers);
    let mut damaged = Vec::new();
    let step = checkpoint::newest_intact_step(run_store, &spec.job_id, &roles, &mut damaged)
        .await?
        .ok_or_else(|| RuntimeError::NoCheckpoint {
            run_url: run_url.to_string(),
            damaged: damaged.clone(),
        })?;
    if !damaged.is_empty() {
        warn!(
            step,
            damaged = ?damaged,
            "newer checkpoints are damaged: resuming from an older step"
        );
    }
    info!(step, "resuming from the checkpoints of step {step}");
    let changed = changes.apply(&mut spec.training);
    models::check_model_memory(&spec.model, spec.training.limits.memory_mb)?;
    // The functions follow the spec's run location: a run copied or moved since is resumed
    // where it is now, never written back to where it was.
    let here = job_spec::absolute_location(run_url)?;
    let moved = spec.run_url.as_str().trim_end_matches('/') != here.trim_end_matches('/');
    if moved {
        info!(
            from = %spec.run_url.redacted(),
            to = %mlless_store::redact_url(&here),
            "the run is not where its spec says (copied or moved): resuming it where it is"
        );
        spec.run_url = here.into();
    }
    let rewrite = moved || !changed.is_empty();
    if !changed.is_empty() {
        spec.training.validate(ModelChoice::of(&spec.model))?;
        info!(step, changes = ?changed, "resuming with new options");
        spec.resumptions.push(mlless_job::Resumption {
            from_step: step,
            changes: changed,
        });
    }
    if rewrite {
        // The functions read the new location, limits and stops from the spec.
        let json = serde_json::to_vec_pretty(&spec).map_err(|source| RuntimeError::Json {
            location: run_store.location(SPEC_KEY),
            source,
        })?;
        run_store.put(SPEC_KEY, Bytes::from(json)).await?;
    }
    // Refused options leave the run as it was: failed, and resumable.
    run_store.delete(crate::runs::FAILURE_KEY).await?;
    let start = Start {
        generation: 0,
        recovery: 1,
        resume_step: Some(step),
    };
    let starts = vec![start; spec.training.workers as usize + 1];
    run_job(&spec, run_store, lease, prices, starts, invoker, observe).await
}
