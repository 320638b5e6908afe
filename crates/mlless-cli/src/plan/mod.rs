//! `mlless plan`: the fleet size, memory and channel that reach a validation target within a
//! deadline (the cheapest) or a budget (the fastest), from short profile runs on the real data
//! with the chosen cloud's latencies; `--run` then trains with it and compares.
//!
//! The maths (steps to the target, time and bill of each configuration, the ranking, the
//! refusals) is `mlless_cost::plan`; this module runs the profile, reads its records and
//! prints the plan.

use anyhow::Context;
use clap::Args;
use mlless_core::MetricTarget;
use mlless_cost::VmPrice;
use mlless_cost::plan::{self, Candidate, Goal, PlanError, Profile, StepsEstimate};
use mlless_job::{ModelChoice, RunRecord};
use mlless_runtime::dataset::{Dataset, Split};
use mlless_store::ChannelScheme;

use crate::train::TrainArgs;

mod output;

/// Evaluations of the validation set a profile's curve run aims at.
const PROFILE_EVALUATIONS: u64 = 12;

/// Options of `mlless plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The prepared data set; it needs a validation split (`prepare --validation-fraction`).
    #[arg(long)]
    pub data: String,
    /// The model.
    #[arg(long, value_parser = crate::train::model_parser())]
    pub model: ModelChoice,
    /// The validation target to reach, e.g. rmse<=0.8, logloss<=0.35, auc>=0.8.
    #[arg(long, value_name = "METRIC<=X")]
    pub target_metric: MetricTarget,
    /// Reach the target within this many seconds, as cheaply as possible.
    #[arg(
        long,
        value_name = "SECONDS",
        required_unless_present = "budget_usd",
        conflicts_with = "budget_usd",
        value_parser = crate::seconds("--deadline", mlless_job::config::SecondsRange::Positive)
    )]
    pub deadline: Option<f64>,
    /// Reach the target within this many dollars, as fast as possible.
    #[arg(long, value_name = "USD")]
    pub budget_usd: Option<f64>,
    /// Prices: aws-lambda, ibm-cf or a TOML price table (see `mlless cost`).
    #[arg(long, default_value = "aws-lambda")]
    pub platform: String,
    /// Channels to consider, comma-separated: `store` (the run's object store, with S3's
    /// latency) or a channel URL (redis:// and memcached:// with ElastiCache's latency, ps://
    /// with a parameter server's, dynamodb:// with DynamoDB's).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "store",
        value_name = "CHANNEL[,…]"
    )]
    pub channels: Vec<String>,
    /// Exchange patterns to consider, comma-separated (broadcast, allreduce, scatter-reduce,
    /// server; under BSP they give the same model, so only the time differs) [default:
    /// `train`'s choice by P].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "PATTERN[,…]")]
    pub patterns: Vec<mlless_job::Pattern>,
    /// The largest fleet to consider; the profile runs the three largest powers of two up to
    /// it (and it).
    #[arg(long, default_value_t = 8)]
    pub max_workers: u32,
    /// Epochs of the profile's curve run (fewer if it reaches the target).
    #[arg(long, default_value_t = 5)]
    pub profile_epochs: u32,
    /// Seconds each other profile run may take at most.
    #[arg(long, default_value_t = 5.0, value_parser = crate::seconds("--profile-seconds", mlless_job::config::SecondsRange::Positive))]
    pub profile_seconds: f64,
    /// The most epochs a planned run may take: a target the fitted curve reaches later is
    /// refused.
    #[arg(long, default_value_t = 100)]
    pub max_epochs: u32,
    /// Where runs (the profile's and the planned one) are written [default: DATA/runs].
    #[arg(long)]
    pub runs: Option<String>,
    /// Seed of every run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Train with the chosen configuration and report predicted against actual.
    #[arg(long)]
    pub run: bool,
    /// Print the plan as one JSON document on standard output.
    #[arg(long)]
    pub json: bool,
    /// Also write the plan to this local directory: `plan.json` (the document of --json) and
    /// `plan.svg` (the candidates on a time-vs-cost plane, the chosen one ringed).
    #[arg(long, value_name = "DIR")]
    pub out: Option<std::path::PathBuf>,
}

/// A channel to profile: its `--channel` (`None`: the run's store), its label and the cloud
/// whose latency it gets.
#[derive(Debug, Clone)]
struct ChannelChoice {
    flag: Option<String>,
    label: String,
    cloud: &'static str,
}

/// The channel of `--channels` `text`, and the cloud whose latency it is profiled with.
fn channel_choice(text: &str) -> anyhow::Result<ChannelChoice> {
    let text = text.trim();
    if ["redis", "memcached", "ps", "dynamodb", "s3"].contains(&text) {
        anyhow::bail!(
            "--channels {text}: give the channel's URL (e.g. redis://HOST:PORT), or store for \
             the run's object store"
        );
    }
    let scheme = ChannelScheme::parse(Some(text)).with_context(|| format!("--channels {text}"))?;
    let cloud = match scheme {
        ChannelScheme::RunStore | ChannelScheme::ObjectStore(_) => "s3",
        ChannelScheme::Redis { .. } | ChannelScheme::Memcached => "elasticache",
        ChannelScheme::Ps { .. } => "ps",
        ChannelScheme::DynamoDb => "dynamodb",
    };
    Ok(match scheme {
        ChannelScheme::RunStore => ChannelChoice {
            flag: None,
            label: "store".into(),
            cloud,
        },
        _ => ChannelChoice {
            flag: Some(text.to_string()),
            label: mlless_store::redact_url(text),
            cloud,
        },
    })
}

/// The fleet sizes the profile runs: the three largest powers of two up to `max` (and `max`).
fn fleet_sizes(max: u32) -> anyhow::Result<Vec<u32>> {
    if max == 0 || max > mlless_job::config::MAX_WORKERS {
        anyhow::bail!(
            "--max-workers {max}: a fleet has 1 to {} workers",
            mlless_job::config::MAX_WORKERS
        );
    }
    let mut sizes: Vec<u32> = std::iter::successors(Some(1u32), |n| n.checked_mul(2))
        .take_while(|&n| n <= max)
        .collect();
    sizes.push(max);
    sizes.dedup();
    let keep = sizes.len().saturating_sub(3);
    Ok(sizes.split_off(keep))
}

/// `mlless train` options parsed from `flags`, as the user would type them.
fn train_args(flags: &[String]) -> anyhow::Result<TrainArgs> {
    use clap::FromArgMatches;
    let command = <TrainArgs as Args>::augment_args(clap::Command::new("train"));
    let matches = command
        .try_get_matches_from(std::iter::once("train".to_string()).chain(flags.iter().cloned()))
        .with_context(|| format!("the train options {}", flags.join(" ")))?;
    Ok(TrainArgs::from_arg_matches(&matches)?)
}

/// Trains with `flags` (quietly) and returns the record; a run that failed is an error, and so
/// is one the user cancelled ([`crate::train::Cancelled`]: the plan stops there).
fn train(flags: &[String]) -> anyhow::Result<RunRecord> {
    let mut args = train_args(flags)?;
    args.quiet = true;
    let record = crate::train::train_with_progress(&args)?;
    if record.was_cancelled() {
        return Err(crate::train::Cancelled {
            message: format!(
                "cancelled job {} of the plan: plan again to continue",
                record.spec.job_id
            ),
        }
        .into());
    }
    Ok(record)
}

/// What a plan is for: the data, the model, the target and where runs go.
struct Job<'a> {
    args: &'a PlanArgs,
    eval_every: u64,
}

impl Job<'_> {
    /// The `train` flags of `workers` on `channel`, as every run of the plan shares them.
    fn flags(&self, workers: u32, channel: &ChannelChoice, pattern: Option<&str>) -> Vec<String> {
        let a = self.args;
        let mut flags: Vec<String> = [
            "--data",
            &a.data,
            "--model",
            a.model.name(),
            "--workers",
            &workers.to_string(),
        ]
        .map(String::from)
        .to_vec();
        if let Some(url) = &channel.flag {
            flags.extend(["--channel".to_string(), url.clone()]);
        }
        if let Some(pattern) = pattern {
            flags.extend(["--pattern".to_string(), pattern.to_string()]);
        }
        if let Some(runs) = &a.runs {
            flags.extend(["--runs".to_string(), runs.clone()]);
        }
        flags.extend(
            [
                "--emulate",
                channel.cloud,
                "--eval-every",
                &self.eval_every.to_string(),
                "--early-stop",
                "0",
                "--target-metric",
                &a.target_metric.to_string(),
                "--platform",
                &a.platform,
                "--seed",
                &a.seed.to_string(),
            ]
            .map(String::from),
        );
        flags
    }
}

/// A profile run and what it measured.
struct ProfileRun {
    profile: Profile,
    record: RunRecord,
}

/// The profile of `record`, a run on `channel` evaluated every `eval_every` steps: its first
/// `2·eval_every + 1` steps (at most a third of them) are its warm-up.
fn profile_of(
    record: &RunRecord,
    channel: &ChannelChoice,
    eval_every: u64,
) -> anyhow::Result<Profile> {
    let m = mlless_report::measurements(record, None);
    let steps = record.steps.len() as u64;
    if steps == 0 {
        anyhow::bail!("the profile run {} made no step", record.spec.run_url);
    }
    // The end of each step, seconds since the run started.
    let offset = record.time_offset_s();
    let end = |i: u64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| record.steps.get(i))
            .map_or(m.startup_s, |s| offset + s.time_s)
    };
    let warmup_steps = (2 * eval_every + 1).min(steps / 3);
    let warmed = if warmup_steps > 0 {
        end(warmup_steps - 1)
    } else {
        m.startup_s
    };
    let requests = record.billed_requests().0;
    let per = |n: u64| n as f64 / steps as f64;
    Ok(Profile {
        workers: record.spec.training.workers,
        channel: channel.label.clone(),
        channel_kind: mlless_job::billing::channel_kind(record.spec.training.channel.as_deref()),
        emulate: channel.cloud.to_string(),
        pattern: record.spec.training.exchange_pattern().name().to_string(),
        other_functions: m.other_invocations,
        startup_s: m.startup_s,
        teardown_s: m.teardown_s,
        warmup_steps,
        warmup_s: (warmed - m.startup_s).max(0.0),
        step_ms: (end(steps - 1) - warmed).max(0.0) * 1000.0 / (steps - warmup_steps) as f64,
        requests_per_step: [
            per(requests.writes),
            per(requests.reads),
            per(requests.table_write_units),
            per(requests.table_read_units),
        ],
        peak_rss_mb: record
            .invocations
            .iter()
            .map(|i| i.peak_rss_mb)
            .fold(0.0, f64::max),
    })
}

/// The evaluations of the target's metric in `record`: (steps done, value).
fn curve_points(record: &RunRecord, target: &MetricTarget) -> anyhow::Result<Vec<(u64, f64)>> {
    let validation = record.validation.as_ref().ok_or(PlanError::NoValidation)?;
    let points: Vec<(u64, f64)> = validation
        .points
        .iter()
        .filter(|p| !p.last)
        .filter_map(|p| Some((p.step + 1, *p.metrics.get(&target.metric)?)))
        .collect();
    if points.is_empty()
        && let Some(first) = validation.points.first()
    {
        return Err(PlanError::UnknownMetric {
            metric: target.metric.clone(),
            reported: first
                .metrics
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        }
        .into());
    }
    Ok(points)
}

/// A fleet size's curve run and the steps to the target it estimates.
struct Curve {
    workers: u32,
    record: RunRecord,
    evaluations: usize,
    steps_per_epoch: f64,
    estimate: Result<StepsEstimate, PlanError>,
}

impl Curve {
    /// The curve of `record`, evaluated every `eval_every` steps, for `args`' target.
    fn of(record: RunRecord, args: &PlanArgs, eval_every: u64) -> anyhow::Result<Self> {
        let points = curve_points(&record, &args.target_metric)?;
        let steps_per_epoch = if record.epochs > 0.0 {
            record.steps.len() as f64 / record.epochs
        } else {
            f64::from(record.spec.train_batches) / 4.0
        }
        .max(1.0);
        let max_steps = (steps_per_epoch * f64::from(args.max_epochs)).floor() as u64;
        let estimate = plan::estimate_steps(&points, &args.target_metric, eval_every, max_steps);
        Ok(Self {
            workers: record.spec.training.workers,
            evaluations: points.len(),
            steps_per_epoch,
            estimate,
            record,
        })
    }

    /// The steps the run took after the evaluation that met its target, if it met it.
    fn stop_lag(&self) -> Option<u64> {
        let validation = self.record.validation.as_ref()?;
        let reached = validation.reached(validation.targets.first()?)?;
        Some((self.record.steps.len() as u64).saturating_sub(reached.step + 1))
    }
}

/// Everything the plan found, printed as text or JSON.
struct Plan {
    goal: Goal,
    eval_every: u64,
    /// Steps a run takes after the evaluation that meets its target (`None`: no profile run
    /// met it, and none are added).
    stop_lag: Option<u64>,
    curves: Vec<Curve>,
    profile: Vec<ProfileRun>,
    ranked: Vec<Candidate>,
    flags: Vec<String>,
    vms: Vec<(VmPrice, mlless_cost::Projection)>,
    actual: Option<RunRecord>,
}

/// The profile: on the first channel (with the first pattern of `--patterns`) every fleet
/// size is a curve run of the profile's epochs, on the other channels and patterns a timing run
/// of at most `--profile-seconds` (neither changes the steps of a BSP run). Returns every run
/// and, per fleet size, its curve.
fn profile_runs(
    job: &Job,
    channels: &[ChannelChoice],
    fleets: &[u32],
) -> anyhow::Result<(Vec<ProfileRun>, Vec<Curve>)> {
    let args = job.args;
    let patterns: Vec<Option<&str>> = if args.patterns.is_empty() {
        vec![None]
    } else {
        args.patterns.iter().map(|&p| Some(p.name())).collect()
    };
    let variants: Vec<(&ChannelChoice, Option<&str>)> = channels
        .iter()
        .flat_map(|c| patterns.iter().map(move |&p| (c, p)))
        .collect();
    let mut profile = Vec::new();
    let mut curves: Vec<Curve> = Vec::new();
    let total = variants.len() * fleets.len();
    for (v, &(channel, pattern)) in variants.iter().enumerate() {
        for &workers in fleets {
            let is_curve = v == 0;
            let mut flags = job.flags(workers, channel, pattern);
            flags.extend(["--max-epochs".into(), args.profile_epochs.to_string()]);
            if !is_curve {
                flags.extend(["--max-time".into(), args.profile_seconds.to_string()]);
            }
            let record = train(&flags).with_context(|| {
                format!(
                    "profiling P = {workers} on {} ({}){}",
                    channel.label,
                    channel.cloud,
                    pattern.map_or_else(String::new, |p| format!(" with --pattern {p}"))
                )
            })?;
            let p = profile_of(&record, channel, job.eval_every)?;
            eprintln!(
                "profile {}/{total}: P = {workers} on {} ({}), {}: {} steps, {:.1} ms a step, \
                 {:.1} s, ${:.6}",
                profile.len() + 1,
                channel.label,
                channel.cloud,
                p.pattern,
                record.steps.len(),
                p.step_ms,
                record.wall_s,
                billed(&record)
            );
            if is_curve {
                curves.push(Curve::of(record.clone(), args, job.eval_every)?);
            }
            profile.push(ProfileRun { profile: p, record });
        }
    }
    Ok((profile, curves))
}

/// Runs `mlless plan`.
pub fn run(args: PlanArgs) -> anyhow::Result<()> {
    let prices = crate::cost::price_table(&args.platform)?;
    let goal = match (args.deadline, args.budget_usd) {
        (Some(s), _) => Goal::Deadline(s),
        (None, Some(usd)) if usd.is_finite() && usd > 0.0 => Goal::Budget(usd),
        (None, Some(usd)) => anyhow::bail!("--budget-usd {usd}: a budget is dollars, above 0"),
        (None, None) => anyhow::bail!("give --deadline SECONDS or --budget-usd USD"),
    };
    if args.profile_epochs == 0 || args.max_epochs == 0 {
        anyhow::bail!("--profile-epochs and --max-epochs are 1 or more");
    }
    let fleets = fleet_sizes(args.max_workers)?;
    let channels = args
        .channels
        .iter()
        .map(|c| channel_choice(c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (train_batches, validation_batches) = crate::runtime()?
        .block_on(async {
            let dataset = Dataset::open(&args.data).await?;
            anyhow::Ok((
                dataset.batches(Split::Train),
                dataset.batches(Split::Validation),
            ))
        })
        .with_context(|| format!("opening the data set {}", args.data))?;
    if validation_batches == 0 {
        return Err(PlanError::NoValidation).with_context(|| format!("--data {}", args.data));
    }
    // A step reads 4 minibatches by default: the curve run evaluates about
    // PROFILE_EVALUATIONS times.
    let profile_steps = (train_batches as u64 * u64::from(args.profile_epochs)).div_ceil(4);
    let eval_every = (profile_steps / PROFILE_EVALUATIONS).max(1);
    let job = Job {
        args: &args,
        eval_every,
    };

    let (profile, mut curves) = profile_runs(&job, &channels, &fleets)?;
    // A run stops a few steps after the evaluation that met its target: as many as the
    // profile's runs that reached it took, at most.
    let stop_lag = curves.iter().filter_map(Curve::stop_lag).max();
    for curve in &mut curves {
        if let Ok(e) = &curve.estimate {
            curve.estimate = Ok(e.clone().with_stop_lag(stop_lag.unwrap_or(0)));
        }
    }
    let pairs: Vec<(Profile, StepsEstimate)> = profile
        .iter()
        .filter_map(|run| {
            let curve = curves.iter().find(|c| c.workers == run.profile.workers)?;
            Some((run.profile.clone(), curve.estimate.clone().ok()?))
        })
        .collect();
    if pairs.is_empty() {
        // No fleet size can reach the target: the largest fleet's reason.
        let reason = curves
            .iter()
            .rev()
            .find_map(|c| c.estimate.clone().err())
            .unwrap_or(PlanError::NoCandidates);
        return Err(reason).with_context(|| format!("--target-metric {}", args.target_metric));
    }
    let startup_s = pairs
        .iter()
        .map(|p| p.0.time_s(0))
        .fold(f64::INFINITY, f64::min);
    let ranked = plan::rank(plan::candidates(&pairs, &prices), goal, startup_s)
        .context("choosing a configuration")?;
    let chosen = ranked.first().ok_or(PlanError::NoCandidates)?;
    let channel = channels
        .iter()
        .find(|c| c.label == chosen.channel)
        .ok_or(PlanError::NoCandidates)?;
    let curve = curves
        .iter()
        .find(|c| c.workers == chosen.workers)
        .ok_or(PlanError::NoCandidates)?;
    let estimate = curve.estimate.clone()?;
    let steps_per_epoch = curve.steps_per_epoch;
    // The pattern said outright, whether the profile named it or took the default by P.
    let mut flags = job.flags(chosen.workers, channel, Some(&chosen.pattern));
    // Epochs enough for the high end of the estimate, with room.
    let high = estimate.high.unwrap_or(2 * estimate.steps) as f64;
    let epochs = ((1.5 * high / steps_per_epoch).ceil() as u32 + 1).min(args.max_epochs);
    flags.extend([
        "--memory-mb".into(),
        chosen.memory_mb.to_string(),
        "--max-epochs".into(),
        epochs.to_string(),
    ]);
    let vms = vm_figures(&curve.record, &estimate, steps_per_epoch, chosen.workers);
    let actual = if args.run {
        Some(train(&flags).context("training with the chosen configuration")?)
    } else {
        None
    };
    let plan = Plan {
        goal,
        eval_every,
        stop_lag,
        curves,
        profile,
        ranked,
        flags,
        vms,
        actual,
    };
    let json = serde_json::to_string_pretty(&output::document(&plan, &args.target_metric, &prices))
        .context("writing the plan as JSON")?;
    if let Some(dir) = &args.out {
        output::write_out(dir, &json, &plan)?;
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{}", output::render(&plan, &args.target_metric, &prices));
    }
    Ok(())
}

/// The same work on a VM cluster of `machines` of each built-in type, by `mlless cost`'s model
/// of the curve run, for the estimated steps.
fn vm_figures(
    curve: &RunRecord,
    estimate: &StepsEstimate,
    steps_per_epoch: f64,
    machines: u32,
) -> Vec<(VmPrice, mlless_cost::Projection)> {
    let mut m = mlless_report::measurements(curve, mlless_report::default_cores(curve));
    m.epochs = estimate.steps as f64 / steps_per_epoch.max(f64::MIN_POSITIVE);
    VmPrice::builtins()
        .into_iter()
        .map(|vm| {
            let p = m.project_vm(&vm, machines);
            (vm, p)
        })
        .collect()
}

/// The run's billed cost, dollars.
fn billed(record: &RunRecord) -> f64 {
    record.bill.as_ref().map_or(0.0, |b| b.total_usd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleets_and_channels() {
        assert_eq!(fleet_sizes(8).unwrap(), vec![2, 4, 8]);
        assert_eq!(fleet_sizes(6).unwrap(), vec![2, 4, 6]);
        assert_eq!(fleet_sizes(2).unwrap(), vec![1, 2]);
        assert_eq!(fleet_sizes(1).unwrap(), vec![1]);
        assert!(fleet_sizes(0).is_err());
        let store = channel_choice("store").unwrap();
        assert_eq!((store.flag, store.cloud), (None, "s3"));
        let redis = channel_choice("redis://:secret@127.0.0.1:6379").unwrap();
        assert_eq!(redis.cloud, "elasticache");
        assert!(!redis.label.contains("secret"), "{}", redis.label);
        let e = channel_choice("redis").unwrap_err().to_string();
        assert!(e.contains("redis://HOST:PORT"), "{e}");
        assert!(channel_choice("amqp://h").is_err());
    }
}
