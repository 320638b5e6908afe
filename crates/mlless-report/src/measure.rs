//! What a run record measured: the inputs of the cost model and of the cost plot.

use mlless_cost::{
    ChannelKind, CloudExchange, DEFAULT_VM_STARTUP_S, PhaseMeasurement, PriceTable,
    ProjectedPattern, RunMeasurements, ServiceLatency, UpdateSize, billed_duration_ms,
};
use mlless_job::{Pattern, RunRecord};

use crate::ReportOptions;
use mlless_job::billing::channel_kind;
use mlless_job::record::StepRecord;

/// The CPUs the functions of `record` shared, as far as this machine can tell: when the
/// invocations have process ids the run was made by the local invoker, taken to be on this
/// machine, and this machine's CPU count is returned; otherwise (a FaaS platform, where every
/// function has its own CPU share) `None`.
pub fn default_cores(record: &RunRecord) -> Option<u32> {
    if record.invocations.iter().any(|i| i.pid.is_some()) {
        std::thread::available_parallelism()
            .ok()
            .and_then(|n| u32::try_from(n.get()).ok())
    } else {
        None
    }
}

/// The price table `record` was billed with: the built-in table of its bill's platform, or, for
/// a table of the user's, one rebuilt from the bill (price per GB-second, request fee, services
/// per hour, and the billing granularity among 1, 10, 100 and 1000 ms that gives the billed
/// milliseconds; the object-store request prices, which a bill does not show, are S3's). AWS
/// Lambda's prices when the record has no bill.
pub fn price_table_of(record: &RunRecord) -> PriceTable {
    let Some(bill) = &record.bill else {
        return PriceTable::aws_lambda();
    };
    let channel = channel_kind(record.spec.training.channel.as_deref());
    if let Some(table) = PriceTable::by_name(&bill.platform) {
        return table;
    }
    let mut table = PriceTable::aws_lambda();
    table.name = bill.platform.clone();
    if bill.gb_seconds > 0.0 {
        table.gb_second_usd = bill.compute_usd / bill.gb_seconds;
    }
    if bill.invocations > 0 {
        table.request_usd = bill.request_usd / bill.invocations as f64;
    }
    if record.wall_s > 0.0 {
        // The channel's servers are added back by `for_channel`.
        let hourly = bill.services_usd / record.wall_s * 3600.0;
        table.services_usd_per_hour = (hourly - table.channel_usd_per_hour(channel)).max(0.0);
    }
    if let Some(g) = [1, 10, 100, 1000].into_iter().find(|&g| {
        record
            .invocations
            .iter()
            .map(|i| billed_duration_ms(i.duration_ms, g))
            .sum::<u64>()
            == bill.billed_ms
    }) {
        table.granularity_ms = g;
    }
    table
}

/// The share of a bill above which one part is said to dominate it.
pub const DOMINANT_SHARE: f64 = 0.5;

/// The part of a run's bill that is most of it ([`DOMINANT_SHARE`] or more) and, where that
/// part is the channel's (its servers, or the object-store requests), what the cost model says
/// the same run costs on the other kind of channel.
#[derive(Debug, Clone, PartialEq)]
pub struct DominantPart {
    /// What it is: `compute`, `invocation fees`, `channel servers` or `object-store requests`.
    pub part: &'static str,
    /// Its share of the bill, 0 to 1.
    pub share: f64,
    /// The cost model's figure for the same run on the channel it ran on, and on the other kind
    /// (Redis with one instance for the object store or DynamoDB; the object store for Redis or
    /// Memcached): `(run's channel, its cost, other channel, its cost)`. `None` when the part is
    /// not the channel's.
    pub channels: Option<(ChannelKind, f64, ChannelKind, f64)>,
}

/// The part that dominates the bill of `record` (its own, [`RunRecord::bill`]), if one does,
/// with the cost model's ([`RunMeasurements::project_faas`] at the run's fleet size, at
/// `options`' prices) figures for the run's channel and the other kind.
pub fn dominant_part(record: &RunRecord, options: &ReportOptions) -> Option<DominantPart> {
    let bill = record.bill.as_ref()?;
    let parts = [
        ("compute", bill.compute_usd, false),
        ("invocation fees", bill.request_usd, false),
        ("channel servers", bill.services_usd, true),
        ("object-store requests", bill.storage_usd, true),
        ("DynamoDB request units", bill.table_usd, true),
    ];
    let (part, usd, of_channel) = parts.into_iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let share = usd / bill.total_usd;
    if !(bill.total_usd > 0.0 && share >= DOMINANT_SHARE) {
        return None;
    }
    let channels = of_channel.then(|| {
        let mut m = options.measurements(record);
        let workers = record.spec.training.workers;
        let own = m.channel;
        let own_usd = m.project_faas(workers, &options.prices).cost_usd;
        m.channel = match own {
            ChannelKind::ObjectStore | ChannelKind::DynamoDb => ChannelKind::Redis { instances: 1 },
            ChannelKind::Redis { .. }
            | ChannelKind::Memcached { .. }
            | ChannelKind::ParameterServer { .. } => ChannelKind::ObjectStore,
        };
        let other_usd = m.project_faas(workers, &options.prices).cost_usd;
        (own, own_usd, m.channel, other_usd)
    });
    Some(DominantPart {
        part,
        share,
        channels,
    })
}

/// The billed cost so far at each time of the run: `(seconds since the run started, dollars)`,
/// from the start of the run to the end of its last invocation; see
/// [`RunRecord::cost_clock`] for how it is derived.
pub fn cost_curve(record: &RunRecord, prices: &PriceTable) -> Vec<(f64, f64)> {
    let clock = record.cost_clock(prices);
    let end = clock.end_s();
    let mut times: Vec<f64> = (0..=400).map(|k| end * f64::from(k) / 400.0).collect();
    for span in clock.spans() {
        times.push(span.start_s);
        times.push(span.start_s + span.duration_ms as f64 / 1000.0);
    }
    times.retain(|t| t.is_finite());
    times.sort_by(f64::total_cmp);
    times.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    times.into_iter().map(|t| (t, clock.cost_at(t))).collect()
}

/// What `record` measured, for [`RunMeasurements::project_faas`] and
/// [`RunMeasurements::project_vm`]; `cores` is the number of CPUs its functions shared (`None`
/// on a FaaS platform; see [`default_cores`]).
///
/// - phases: the steps grouped by their number of workers, with the workers' mean read, compute
///   and exchange times, and as step time the mean interval between consecutive steps on the
///   supervisor's clock (the wall time a BSP step takes, bookkeeping included);
/// - start-up: from the start of the run to the start of the first step; teardown: from the end
///   of the last step to the end of the run;
/// - data loading: the uncontended mean read time of a minibatch slice times the slices of an
///   epoch.
pub fn measurements(record: &RunRecord, cores: Option<u32>) -> RunMeasurements {
    let spec = &record.spec;
    let mut phases: Vec<PhaseMeasurement> = Vec::new();
    let mut sums: Vec<[f64; 5]> = Vec::new();
    // Per phase: the summed mean CPU time of compute, and whether every step had one.
    let mut cpu: Vec<Option<f64>> = Vec::new();
    let mut previous_time: Option<f64> = None;
    for step in &record.steps {
        let workers = u32::try_from(step.workers.len()).unwrap_or(u32::MAX);
        let wall_ms = match previous_time {
            Some(t) if step.time_s > t => (step.time_s - t) * 1000.0,
            _ => slowest_step_ms(step),
        };
        previous_time = Some(step.time_s);
        let i = match phases.iter().position(|p| p.workers == workers) {
            Some(i) => i,
            None => {
                phases.push(PhaseMeasurement {
                    workers,
                    steps: 0,
                    read_ms: 0.0,
                    compute_ms: 0.0,
                    compute_cpu_ms: None,
                    exchange_ms: 0.0,
                    step_ms: 0.0,
                });
                sums.push([0.0; 5]);
                cpu.push(Some(0.0));
                phases.len() - 1
            }
        };
        phases[i].steps += 1;
        let n = step.workers.len().max(1) as f64;
        let s = &mut sums[i];
        s[0] += step.workers.iter().map(|w| w.read_ms).sum::<f64>() / n;
        s[1] += step.workers.iter().map(|w| w.compute_ms).sum::<f64>() / n;
        let step_cpu: Option<f64> = step.workers.iter().map(|w| w.compute_cpu_ms).sum();
        cpu[i] = cpu[i].zip(step_cpu).map(|(a, b)| a + b / n);
        s[2] += step.workers.iter().map(|w| w.exchange_ms).sum::<f64>() / n;
        s[3] += wall_ms;
    }
    for ((phase, s), cpu) in phases.iter_mut().zip(&sums).zip(&cpu) {
        let n = phase.steps.max(1) as f64;
        phase.compute_cpu_ms = cpu.map(|c| c / n);
        phase.read_ms = s[0] / n;
        phase.compute_ms = s[1] / n;
        phase.exchange_ms = s[2] / n;
        phase.step_ms = (s[3] / n).max(phase.read_ms + phase.compute_ms + phase.exchange_ms);
    }
    phases.retain(|p| p.workers > 0);

    let offset = record.time_offset_s();
    let (startup_s, teardown_s) = match (record.steps.first(), record.steps.last()) {
        (Some(first), Some(last)) => (
            (offset + first.time_s - slowest_step_ms(first) / 1000.0).max(0.0),
            (record.wall_s - offset - last.time_s).max(0.0),
        ),
        _ => (record.wall_s.max(0.0), 0.0),
    };

    let worker_invocations = record
        .invocations
        .iter()
        .filter(|i| i.name.starts_with("worker"))
        .count();
    let other_invocations = (record.invocations.len() - worker_invocations) as u64;
    let invocations_per_worker = if worker_invocations == 0 {
        1.0
    } else {
        (worker_invocations as f64 / f64::from(spec.training.workers.max(1))).max(1.0)
    };

    let mut m = RunMeasurements {
        workers: spec.training.workers,
        train_batches: u64::from(spec.train_batches),
        epochs: record.epochs,
        phases,
        startup_s,
        teardown_s,
        data_loading_s: 0.0,
        memory_mb: spec.training.limits.memory_mb,
        invocations_per_worker,
        other_invocations: if record.invocations.is_empty() {
            1
        } else {
            other_invocations
        },
        channel: channel_kind(spec.training.channel.as_deref()),
        plan: spec.batch_plan,
        cores,
        same_machine: false,
        vm_startup_s: DEFAULT_VM_STARTUP_S,
        cloud: None,
    };
    // The uncontended read of one position (a minibatch slice) times the positions of an
    // epoch.
    let (read, steps) = m.phases.iter().fold((0.0, 0.0), |(r, n), p| {
        let w = p.steps as f64;
        let per_position = p.read_ms / m.contention(p.workers) / m.measured_share(p.workers);
        (r + w * per_position, n + w)
    });
    if steps > 0.0 {
        m.data_loading_s = read / steps * spec.positions_per_epoch() as f64 / 1000.0;
    }
    m
}

/// The exchange of `record`'s steps projected onto the cloud channel `latency` (billed as
/// `channel`): the pattern the run used at every P if it named one, else the default choice by
/// P on that channel ([`Pattern::by_fleet`]); the update a worker sent a step
/// ([`UpdateSize::measured`] from the mean bytes it sent under the run's pattern).
pub fn cloud_exchange(
    record: &RunRecord,
    channel: ChannelKind,
    latency: ServiceLatency,
) -> CloudExchange {
    let training = &record.spec.training;
    let pattern = match training.pattern {
        Some(pattern) => ProjectedPattern::Fixed(pattern.shape()),
        None => Pattern::by_fleet(channel, training.sync),
    };
    let (sent, n) = record
        .steps
        .iter()
        .flat_map(|s| &s.workers)
        .fold((0.0, 0.0), |(b, n), w| (b + w.bytes_sent as f64, n + 1.0));
    let sent = if n > 0.0 { sent / n } else { 0.0 };
    let dense_bytes = record.spec.model.num_params() as f64 * 4.0;
    let update = UpdateSize::measured(
        dense_bytes,
        training.exchange_pattern().shape(),
        training.workers,
        sent,
    );
    CloudExchange {
        latency,
        pattern,
        update,
    }
}

/// The longest step time any worker reported for `step`, ms.
fn slowest_step_ms(step: &StepRecord) -> f64 {
    step.workers.iter().map(|w| w.step_ms).fold(0.0, f64::max)
}
