//! What the work of a measured run would take and cost at another fleet size, or on VMs.
//!
//! # The model
//!
//! A BSP step of a worker is read + compute + exchange (+ a little bookkeeping, "other"). A run
//! holds its global batch ([`BatchPlan`]): `E` epochs over `M` minibatches cut into `S` slices
//! take `ceil(E·M·S / G)` steps for a global batch of `G` slices — the same steps at any P — and
//! a worker's read and compute scale with its share `k(P) = G / P` (measured phases are brought
//! to one slice by the share they read). (A record
//! from before the plan: one minibatch a worker a step, `ceil(E·M/P)` steps.)
//!
//! **CPU contention.** When the functions share `cores` CPUs (local runs: P processes on one
//! machine), everything a step does is slowed by `c(P) = max(1, P/cores)` (the exchange too:
//! decoding and adding P updates is CPU work, and a worker waits for peers that wait for a
//! core). On a FaaS platform every function has its own CPU share: `cores = None`, `c(P) = 1`.
//! Each measured phase is brought back to one uncontended worker by dividing by its
//! `c(P_measured)`. A prediction is for a FaaS platform (`c = 1`: the projection of a cloud,
//! not of this machine), or with `same_machine` for the measured machine, multiplied by
//! `c(P)`. A record does not say how many cores its functions had, so the caller passes it
//! (the CLI: this machine's CPUs for a local run).
//!
//! **Compute from CPU time.** Where the record holds the CPU time of the workers' compute
//! (`compute_cpu_ms`), that is the compute of a function with a core of its own, whatever the
//! wall time of P processes sharing the machine's cores was; older records fall back to the
//! wall time divided by `c(P_measured)`.
//!
//! **Exchange on a cloud channel.** With a [`CloudExchange`] (`mlless cost --emulate s3`, or a
//! run made with `--emulate`), the exchange at P is the analytical one of [`crate::cloud`]:
//! the cloud's request latency and bandwidth, the pattern at that P and the size of the run's
//! updates. Otherwise it is fitted from what the run measured:
//!
//! **Fitted exchange.** The uncontended exchange time of a step is `e(P) = a + b·(P − 1)`: a latency
//! floor `a` (publish, wait for the barrier, collect one message) and a cost `b` per further
//! peer (one more message to fetch, decode and add). With phases at two or more worker counts
//! (the scale-in auto-tuner changes P during a run), `a` and `b` are fitted by least squares
//! weighted by steps (kept non-negative: [`mlless_core::fit::nonneg_line`]). With one worker
//! count `P_m`, the floor is taken to be
//! the cost of one peer, `a = b`, so `e(P) = e(P_m) · P / P_m`: proportional to the messages a
//! worker collects.
//!
//! Why `a = b`: on the local object-store channel the uncontended exchange measured
//! `e(8)/e(4)` = 1.7 to 2.2 over four data sets (sparse LR with 20k and 100k features, PMF),
//! 2 being `a = b`; `a = 0` (2.33) and a larger floor both miss one end. Predicting P = 4 from
//! P = 8 runs on a loaded 2-core machine, this model was within −24 % … +24 % of single P = 4
//! runs, most of it the ±10 % run-to-run noise of such a machine; it is least accurate towards
//! P = 1 and 2, where a worker stops waiting for peers. On the Redis channel (LR and PMF, 3
//! epochs, two runs at each of P = 4 and 8, other jobs compiling) `e(8)/e(4)` was 1.84 to 1.91
//! for three of the four pairs of runs of the same kind and 1.25 for the fourth (PMF), whose
//! P = 4 run was loaded: a tenth of such a run took 12.3 to 25.5 ms a step for the same work,
//! its quiet stretches near the 13.0 ms predicted from P = 8. Measured compute hardly changes
//! from P = 4 to P = 8 (a worker waiting for a core waits in the exchange), but it is a few per
//! cent of a step, and taking it as uncontended made the object-store predictions above worse.
//!
//! **FaaS at P workers:**
//!
//! ```text
//! step(P) = c(P) · (k(P)·(read_u + compute_u) + other_u + e(P))   [ms, _u: uncontended means,
//!                                                                   read and compute per slice;
//!                                                                   c = 1 but on the same machine]
//! time(P) = startup_s + steps(P) · step(P) / 1000 + teardown_s     [s]
//! cost(P) = the bill of P workers and the other functions (the supervisor), each running
//!           time(P), plus the channel's servers for time(P) (PriceTable::for_channel) and the
//!           object-store requests of ceil(E·M/P) steps (ObjectRequests::estimate)
//! ```
//!
//! **VMs (LambdaML's analytical model)**: one worker per machine on `m` machines, the data set
//! loaded once and kept in memory (so no reads per step), no contention:
//!
//! ```text
//! time(m) = vm_startup_s + data_loading_s / m + steps(m) · (k(m)·compute_u + other_u + e(m)) / 1000
//! cost(m) = usd_per_hour / 3600 · m · max(60, ceil(time(m)))
//! ```
//!
//! The VMs' exchange keeps the run's exchange model `e(m)`, a conservative time (machines that
//! talk directly, as LambdaML's all-reduce over the VPC, may exchange faster; the run did not
//! measure that), while the cost counts the machines only (no channel servers or requests).

use mlless_core::fit::{LineFit, nonneg_line};
use serde::{Deserialize, Serialize};

use mlless_core::BatchPlan;

use crate::cloud::{PatternShape, ServiceLatency, UpdateSize, exchange_ms};
use crate::{Bill, ChannelKind, ObjectRequests, PriceTable, Usage, VmPrice};

/// The measured means of the steps a run made at one worker count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PhaseMeasurement {
    /// Number of workers P in these steps.
    pub workers: u32,
    /// Steps made at this worker count.
    pub steps: u64,
    /// Mean time a worker spent reading data per step (not hidden by prefetching), ms.
    pub read_ms: f64,
    /// Mean time a worker spent computing per step, ms.
    pub compute_ms: f64,
    /// Mean CPU time of that computing, ms: what the compute of a function with a core of its
    /// own takes (`None`: a record from before it was measured; the wall time brought back by
    /// the contention is used).
    #[serde(default)]
    pub compute_cpu_ms: Option<f64>,
    /// Mean time a worker spent exchanging per step, ms.
    pub exchange_ms: f64,
    /// Mean wall time of a step, ms (at least read + compute + exchange; the rest is
    /// bookkeeping).
    pub step_ms: f64,
}

impl PhaseMeasurement {
    /// The part of a step that is neither read, compute nor exchange, ms (never negative).
    pub fn other_ms(&self) -> f64 {
        (self.step_ms - self.read_ms - self.compute_ms - self.exchange_ms).max(0.0)
    }
}

/// What a run measured, enough to predict the same work at another fleet size or on VMs.
///
/// Built from a run record by `mlless_report::measurements`; the model is in the [module
/// documentation](crate::projection).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeasurements {
    /// Number of workers the run started with.
    pub workers: u32,
    /// Training minibatches M of the data set (one epoch).
    pub train_batches: u64,
    /// How the run's fleet shared a step ([`BatchPlan`]; `None`: a run from before the global
    /// batch was held, whose workers read one minibatch a step each).
    #[serde(default)]
    pub plan: Option<BatchPlan>,
    /// Passes over the training set the run made.
    pub epochs: f64,
    /// The steps, grouped by worker count.
    pub phases: Vec<PhaseMeasurement>,
    /// Seconds from the start of the run to the start of its first step (invoking the
    /// functions, loading the job).
    pub startup_s: f64,
    /// Seconds from the end of the last step to the end of the run (final model, evaluation).
    pub teardown_s: f64,
    /// Seconds one uncontended worker would take to read the whole training set once.
    pub data_loading_s: f64,
    /// Configured memory of every function, MB.
    pub memory_mb: u32,
    /// Invocations per worker (more than 1 when functions re-invoke themselves).
    pub invocations_per_worker: f64,
    /// Invocations besides the workers' (the supervisor).
    pub other_invocations: u64,
    /// The channel the workers exchanged through.
    pub channel: ChannelKind,
    /// CPUs the functions of the run shared (`None`: each had its own, as on a FaaS platform):
    /// what the measured phases are brought back to one uncontended worker by.
    pub cores: Option<u32>,
    /// Whether FaaS predictions are for the measured machine (its `cores` shared by the
    /// predicted fleet) rather than for a FaaS platform, where every function has its own CPU
    /// share; see the module documentation.
    #[serde(default)]
    pub same_machine: bool,
    /// Seconds rented VMs take to boot and start the job ([`crate::DEFAULT_VM_STARTUP_S`]).
    pub vm_startup_s: f64,
    /// The cloud channel to project the exchange onto ([`crate::cloud`]); `None`: the exchange
    /// the run measured, fitted in P ([`RunMeasurements::exchange_model`]).
    #[serde(default)]
    pub cloud: Option<CloudExchange>,
}

/// The exchange of a projection onto a cloud channel: its latencies, the pattern at each fleet
/// size and the size of the run's updates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudExchange {
    /// The channel's latency and bandwidth.
    pub latency: ServiceLatency,
    /// The pattern at each fleet size.
    pub pattern: ProjectedPattern,
    /// What the run's updates weighed (the mean over its workers and steps; a projection to
    /// another P scales a sparse update by the share of the global batch a worker reads).
    pub update: UpdateSize,
}

/// The communication pattern a projected fleet uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProjectedPattern {
    /// The same pattern at every P (the run's `--pattern`).
    Fixed(PatternShape),
    /// Broadcast up to this many workers, all-reduce beyond (the default choice by P).
    BroadcastUpTo(u32),
}

impl std::fmt::Display for ProjectedPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProjectedPattern::Fixed(shape) => f.write_str(shape.name()),
            ProjectedPattern::BroadcastUpTo(max) => {
                write!(f, "broadcast up to {max} workers, allreduce beyond")
            }
        }
    }
}

impl ProjectedPattern {
    /// The pattern of a fleet of `workers`.
    pub fn at(self, workers: u32) -> PatternShape {
        match self {
            ProjectedPattern::Fixed(shape) => shape,
            ProjectedPattern::BroadcastUpTo(max) if workers <= max => PatternShape::Broadcast,
            ProjectedPattern::BroadcastUpTo(_) => PatternShape::AllReduce,
        }
    }
}

/// A projected run: how long the measured work takes and what it costs at another fleet size
/// or on VMs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    /// The platform or VM type.
    pub platform: String,
    /// Workers (functions) or machines.
    pub workers: u32,
    /// Steps of the run.
    pub steps: u64,
    /// Wall time of one step, ms.
    pub step_ms: f64,
    /// Wall time of the run, s.
    pub time_s: f64,
    /// What it costs, US dollars.
    pub cost_usd: f64,
    /// The FaaS bill behind `cost_usd` (`None` for VMs).
    pub bill: Option<Bill>,
}

/// The exchange time of a step as a function of the number of workers: `a + b·(P − 1)`, ms,
/// uncontended.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExchangeModel {
    /// Latency floor `a`, ms.
    pub floor_ms: f64,
    /// Cost `b` of each peer beyond the first, ms.
    pub per_peer_ms: f64,
}

impl ExchangeModel {
    /// Exchange time at `workers` workers, ms.
    pub fn at(&self, workers: u32) -> f64 {
        self.floor_ms + self.per_peer_ms * f64::from(workers.max(1) - 1)
    }
}

impl RunMeasurements {
    /// `c(P) = max(1, P/cores)`: how much P workers sharing the measured machine's cores slow
    /// each other; 1 without a core count.
    pub fn contention(&self, workers: u32) -> f64 {
        match self.cores {
            Some(cores) if cores > 0 => (f64::from(workers) / f64::from(cores)).max(1.0),
            _ => 1.0,
        }
    }

    /// The positions (minibatch slices) each of `workers` workers read a step in the run: its
    /// plan's share, or one minibatch for a run without a plan.
    pub fn measured_share(&self, workers: u32) -> f64 {
        self.plan
            .map_or(1.0, |plan| plan.share(workers.max(1) as usize) as f64)
    }

    /// The positions each of `workers` workers would read a step doing the same work: the
    /// run's global batch shared by them (a run at that fleet size cuts its minibatches to
    /// fit, [`BatchPlan::of`]), or one minibatch for a run without a plan.
    pub fn share_at(&self, workers: u32) -> f64 {
        self.plan.map_or(1.0, |plan| {
            plan.step_slices as f64 / f64::from(workers.max(1))
        })
    }

    /// Steps the same work takes on `workers` workers: `ceil(epochs · M · S / G)` for
    /// minibatches cut into `S` slices and a global batch of `G` slices — the same at any P —
    /// or `ceil(epochs · M / P)` for a run without a plan, each worker reading a minibatch.
    pub fn steps_at(&self, workers: u32) -> u64 {
        let (slices, per_step) = match self.plan {
            Some(plan) => (
                f64::from(plan.slices.max(1)),
                plan.step_slices.max(1) as f64,
            ),
            None => (1.0, f64::from(workers.max(1))),
        };
        let work = self.epochs.max(0.0) * self.train_batches as f64 * slices;
        // Round first so that 10.000000001 epochs of float noise do not add a step.
        ((work / per_step) - 1e-6).ceil().max(0.0) as u64
    }

    /// How much a fleet of `workers` is slowed in a prediction: by the measured machine's
    /// [`contention`](Self::contention) when predicting for the same machine, not at all on a
    /// FaaS platform.
    fn predicted_contention(&self, workers: u32) -> f64 {
        if self.same_machine {
            self.contention(workers)
        } else {
            1.0
        }
    }

    /// Mean uncontended per-step time of one worker for (read, compute) per position it
    /// reads, and other, ms, weighted by the steps of each phase.
    fn uncontended_parts(&self) -> (f64, f64, f64) {
        let (mut read, mut compute, mut other, mut n) = (0.0, 0.0, 0.0, 0.0);
        for phase in self.phases.iter().filter(|p| p.steps > 0) {
            let w = phase.steps as f64;
            let c = self.contention(phase.workers);
            let share = self.measured_share(phase.workers);
            read += w * phase.read_ms / c / share;
            compute += w * phase.compute_cpu_ms.unwrap_or(phase.compute_ms / c) / share;
            other += w * phase.other_ms() / c;
            n += w;
        }
        if n == 0.0 {
            (0.0, 0.0, 0.0)
        } else {
            (read / n, compute / n, other / n)
        }
    }

    /// The exchange model fitted from the phases (see the module documentation).
    pub fn exchange_model(&self) -> ExchangeModel {
        // Points (P − 1, uncontended exchange) weighted by steps.
        let points: Vec<(f64, f64, f64)> = self
            .phases
            .iter()
            .filter(|p| p.steps > 0 && p.workers > 0)
            .map(|p| {
                (
                    f64::from(p.workers - 1),
                    p.exchange_ms.max(0.0) / self.contention(p.workers),
                    p.steps as f64,
                )
            })
            .collect();
        match nonneg_line(&points) {
            LineFit::Empty => ExchangeModel {
                floor_ms: 0.0,
                per_peer_ms: 0.0,
            },
            LineFit::OneAbscissa { mean_x, mean_y } => {
                // One worker count: a = b, e(P) = e(P_m) · P / P_m.
                let per = mean_y / (mean_x + 1.0);
                ExchangeModel {
                    floor_ms: per,
                    per_peer_ms: per,
                }
            }
            LineFit::Line { intercept, slope } => ExchangeModel {
                floor_ms: intercept,
                per_peer_ms: slope,
            },
        }
    }

    /// The exchange of a step of `workers` workers, ms, uncontended: on the projected cloud
    /// channel where there is one ([`RunMeasurements::cloud`]), else by the fitted
    /// [`ExchangeModel`].
    pub fn exchange_ms_at(&self, workers: u32) -> f64 {
        match &self.cloud {
            Some(cloud) => exchange_ms(
                cloud.pattern.at(workers),
                &cloud.latency,
                workers,
                &self.update_at(cloud.update, workers),
            ),
            None => self.exchange_model().at(workers),
        }
    }

    /// The update of a worker of a fleet of `workers`, from `measured` (the run's mean, at its
    /// starting fleet size): a sparse update has entries in proportion to the samples the
    /// worker reads, its share of the global batch, up to the dense model; a dense one keeps
    /// its size.
    fn update_at(&self, measured: UpdateSize, workers: u32) -> UpdateSize {
        if !measured.sparse {
            return measured;
        }
        let scale = self.share_at(workers) / self.measured_share(self.workers.max(1));
        UpdateSize {
            bytes: (measured.bytes * scale).min(measured.dense_bytes.max(measured.bytes)),
            ..measured
        }
    }

    /// Predicted wall time of one FaaS step at `workers` workers, ms.
    pub fn step_ms_at(&self, workers: u32) -> f64 {
        let (read, compute, other) = self.uncontended_parts();
        let exchange = self.exchange_ms_at(workers);
        let share = self.share_at(workers);
        self.predicted_contention(workers) * (share * (read + compute) + other + exchange)
    }

    /// The same work (same epochs, same per-worker minibatch) on `workers` functions at the
    /// prices of `table`: time and bill (module documentation for the model).
    pub fn project_faas(&self, workers: u32, table: &PriceTable) -> Projection {
        let workers = workers.max(1);
        let steps = self.steps_at(workers);
        let step_ms = self.step_ms_at(workers);
        let time_s =
            self.startup_s.max(0.0) + steps as f64 * step_ms / 1000.0 + self.teardown_s.max(0.0);
        let worker_invocations =
            (self.invocations_per_worker.max(1.0) * f64::from(workers)).ceil() as u64;
        let functions = u64::from(workers) + self.other_invocations;
        // Every function runs for the whole run; re-invocations split that time, so they add
        // requests but (at 1 ms granularity) no GB-seconds.
        let duration_ms = (time_s * 1000.0).ceil() as u64;
        let usage = Usage {
            duration_ms,
            memory_mb: self.memory_mb,
        };
        let prices = table.clone().for_channel(self.channel);
        let mut bill = prices.bill_of_many(
            usage,
            functions,
            time_s,
            ObjectRequests::estimate(self.channel, workers, steps),
        );
        let extra_requests =
            (worker_invocations + self.other_invocations).saturating_sub(functions);
        bill.invocations += extra_requests;
        bill.request_usd += extra_requests as f64 * prices.request_usd;
        bill.total_usd += extra_requests as f64 * prices.request_usd;
        Projection {
            platform: table.name.clone(),
            workers,
            steps,
            step_ms,
            time_s,
            cost_usd: bill.total_usd,
            bill: Some(bill),
        }
    }

    /// The same work on `machines` VMs of type `vm`, one worker per machine, by LambdaML's
    /// analytical model: startup + data loading + epochs × (compute + communication per epoch),
    /// billed per second with a one-minute minimum.
    pub fn project_vm(&self, vm: &VmPrice, machines: u32) -> Projection {
        let machines = machines.max(1);
        let (_, compute, other) = self.uncontended_parts();
        let exchange = self.exchange_ms_at(machines);
        let step_ms = self.share_at(machines) * compute + other + exchange;
        let steps = self.steps_at(machines);
        let time_s = self.vm_startup_s.max(0.0)
            + self.data_loading_s.max(0.0) / f64::from(machines)
            + steps as f64 * step_ms / 1000.0;
        Projection {
            platform: vm.name.clone(),
            workers: machines,
            steps,
            step_ms,
            time_s,
            cost_usd: vm.usd_for(machines, time_s),
            bill: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(workers: u32, steps: u64, compute: f64, exchange: f64) -> PhaseMeasurement {
        PhaseMeasurement {
            workers,
            steps,
            read_ms: 0.2,
            compute_ms: compute,
            compute_cpu_ms: None,
            exchange_ms: exchange,
            step_ms: 0.2 + compute + exchange + 0.1,
        }
    }

    fn measured(phases: Vec<PhaseMeasurement>, cores: Option<u32>) -> RunMeasurements {
        RunMeasurements {
            workers: phases[0].workers,
            train_batches: 270,
            epochs: 10.0,
            phases,
            startup_s: 0.05,
            teardown_s: 0.05,
            data_loading_s: 270.0 * 0.2 / 1000.0,
            memory_mb: 1024,
            invocations_per_worker: 1.0,
            other_invocations: 1,
            channel: ChannelKind::ObjectStore,
            plan: None,
            same_machine: cores.is_some(),
            cores,
            vm_startup_s: crate::DEFAULT_VM_STARTUP_S,
            cloud: None,
        }
    }

    #[test]
    fn a_held_global_batch_keeps_the_steps_and_shares_the_compute() {
        // The plan of a P = 4 run: minibatches in quarters, 4 of them a worker a step.
        let mut m = measured(vec![phase(4, 675, 1.6, 8.0)], None);
        m.plan = Some(BatchPlan::of(4000, 4, 1000, 1000));
        // 270 minibatches × 10 epochs at 4 minibatches a step: 675 steps at any P.
        for p in [1, 4, 16, 64] {
            assert_eq!(m.steps_at(p), 675, "P = {p}");
        }
        // The read and compute of a step are shared: at P = 16 a worker reads a quarter.
        let at = |p| m.step_ms_at(p) - m.exchange_model().at(p) - 0.1;
        assert!((at(4) - 1.8).abs() < 1e-9);
        assert!((at(16) - 1.8 / 4.0).abs() < 1e-9);
        assert!((at(1) - 1.8 * 4.0).abs() < 1e-9);
    }

    #[test]
    fn a_cloud_has_no_contention_and_the_same_machine_has() {
        let mut m = measured(vec![phase(8, 338, 4.0, 16.0)], Some(2));
        let same = m.step_ms_at(64);
        m.same_machine = false;
        let cloud = m.step_ms_at(64);
        // Uncontended at P = 8 on 2 cores: compute 4 / 4, exchange 16 / 4 = 4 (0.5 a worker).
        let expected = (0.2 + 4.0 + 0.1) / 4.0 + 0.5 * 64.0;
        assert!((cloud - expected).abs() < 1e-9, "{cloud}");
        assert!((same - 32.0 * expected).abs() < 1e-9, "{same}");
    }

    #[test]
    fn a_cloud_projection_takes_the_clouds_exchange_and_the_cpu_time() {
        let mut m = measured(vec![phase(4, 675, 1.6, 8.0)], Some(2));
        m.same_machine = false;
        m.plan = Some(BatchPlan::of(4000, 4, 1000, 1000));
        // The workers' compute took 1.6 ms of wall time but 1.0 of CPU: a function with its
        // own core computes in 1.0.
        m.phases[0].compute_cpu_ms = Some(1.0);
        let latency = ServiceLatency {
            name: "s3".into(),
            request_ms: 20.0,
            mb_per_s: 75.0,
            reads_at_once: Some(32),
        };
        let update = UpdateSize {
            bytes: 8_000.0,
            dense_bytes: 4_000_000.0,
            sparse: true,
            cpu_ms_per_byte: 0.0,
            cpu_ms_per_message: 0.0,
        };
        m.cloud = Some(CloudExchange {
            latency: latency.clone(),
            pattern: ProjectedPattern::BroadcastUpTo(16),
            update,
        });
        // P = 64 all-reduces; each worker reads a sixteenth of the run's share, so its sparse
        // update is a sixteenth as large.
        let at_64 = UpdateSize {
            bytes: 500.0,
            ..update
        };
        let exchange = exchange_ms(PatternShape::AllReduce, &latency, 64, &at_64);
        assert!((m.exchange_ms_at(64) - exchange).abs() < 1e-9);
        assert!(exchange >= 5.0 * 20.0, "{exchange}");
        // At the run's own P, broadcast with the measured update.
        let own = exchange_ms(PatternShape::Broadcast, &latency, 4, &update);
        assert!((m.exchange_ms_at(4) - own).abs() < 1e-9);
        // The step: the read (0.2 ms on 2 cores shared by 4: 0.1) and the CPU compute (1.0),
        // a sixteenth of them at P = 64, the bookkeeping (0.1 / 2) and the exchange.
        let expected = (0.1 + 1.0) / 16.0 + 0.05 + exchange;
        assert!(
            (m.step_ms_at(64) - expected).abs() < 1e-9,
            "{}",
            m.step_ms_at(64)
        );
    }

    #[test]
    fn steps_scale_as_m_over_p() {
        let m = measured(vec![phase(4, 675, 1.5, 8.0)], None);
        assert_eq!(m.steps_at(1), 2700);
        assert_eq!(m.steps_at(4), 675);
        assert_eq!(m.steps_at(8), 338);
        assert_eq!(m.steps_at(0), 2700);
    }

    #[test]
    fn one_worker_count_gives_a_proportional_exchange() {
        let m = measured(vec![phase(8, 338, 3.0, 16.0)], None);
        let e = m.exchange_model();
        assert!((e.floor_ms - 2.0).abs() < 1e-12);
        assert!((e.per_peer_ms - 2.0).abs() < 1e-12);
        assert!((e.at(8) - 16.0).abs() < 1e-12);
        assert!((e.at(4) - 8.0).abs() < 1e-12);
        // The prediction at the measured P reproduces the measured step.
        assert!((m.step_ms_at(8) - m.phases[0].step_ms).abs() < 1e-9);
    }

    #[test]
    fn two_worker_counts_fit_floor_and_slope() {
        // e(P) = 1 + 0.5 (P − 1), uncontended.
        let m = measured(vec![phase(8, 100, 1.0, 4.5), phase(4, 200, 1.0, 2.5)], None);
        let e = m.exchange_model();
        assert!((e.floor_ms - 1.0).abs() < 1e-9, "{e:?}");
        assert!((e.per_peer_ms - 0.5).abs() < 1e-9, "{e:?}");
        // Exchange falling with P (noise): no negative slope.
        let m = measured(vec![phase(8, 100, 1.0, 2.0), phase(4, 100, 1.0, 3.0)], None);
        let e = m.exchange_model();
        assert_eq!(e.per_peer_ms, 0.0);
        assert!((e.floor_ms - 2.5).abs() < 1e-9);
        // A negative floor is refitted through the origin.
        let m = measured(vec![phase(8, 100, 1.0, 7.0), phase(4, 100, 1.0, 1.0)], None);
        let e = m.exchange_model();
        assert_eq!(e.floor_ms, 0.0);
        assert!(e.per_peer_ms > 0.0);
    }

    #[test]
    fn contention_inflates_compute_beyond_the_cores() {
        let m = measured(vec![phase(8, 338, 4.0, 16.0)], Some(2));
        assert_eq!(m.contention(1), 1.0);
        assert_eq!(m.contention(2), 1.0);
        assert_eq!(m.contention(8), 4.0);
        // At the measured P the step is reproduced; at P = 4 the step is c(4)/c(8) = 1/2 of
        // the compute part and 1/2 · 4/8 of the exchange part.
        assert!((m.step_ms_at(8) - m.phases[0].step_ms).abs() < 1e-9);
        let expected4 = (0.2 + 4.0 + 0.1) / 2.0 + 16.0 / 4.0;
        assert!((m.step_ms_at(4) - expected4).abs() < 1e-9);
        // Without a core count the compute part does not change with P.
        let free = measured(vec![phase(8, 338, 4.0, 16.0)], None);
        assert!((free.step_ms_at(4) - (0.2 + 4.0 + 0.1 + 8.0)).abs() < 1e-9);
    }

    #[test]
    fn faas_predictions_are_sane_and_monotone() {
        let m = measured(vec![phase(4, 675, 1.5, 8.0)], None);
        let aws = PriceTable::aws_lambda();
        let p4 = m.project_faas(4, &aws);
        let measured_time = 0.1 + 675.0 * m.phases[0].step_ms / 1000.0;
        assert!((p4.time_s - measured_time).abs() < 1e-9);
        let bill = p4.bill.as_ref().unwrap();
        assert_eq!(bill.invocations, 5);
        assert!(p4.cost_usd > 0.0);
        // Here a step is 1.8 ms + e(P) = 2·P ms: time ∝ 1.8/P + 2 falls with P, while the
        // GB-seconds, (P + 1) functions × time, grow.
        let (mut last_time, mut last_gb_s) = (f64::INFINITY, 0.0);
        for p in [1, 2, 4, 8, 16, 32] {
            let pred = m.project_faas(p, &aws);
            let bill = pred.bill.as_ref().unwrap();
            assert!(
                pred.time_s.is_finite() && pred.time_s < last_time,
                "P = {p}: {pred:?}"
            );
            assert!(bill.gb_seconds > last_gb_s, "P = {p}: {pred:?}");
            assert!((pred.cost_usd - bill.total_usd).abs() < 1e-15);
            assert_eq!(bill.invocations, u64::from(p) + 1);
            (last_time, last_gb_s) = (pred.time_s, bill.gb_seconds);
        }
        // The exchange's requests grow as P² per step, so as P over the run (beyond the
        // per-step requests of the supervisor, which fewer steps save).
        let storage = |p| m.project_faas(p, &aws).bill.unwrap().storage_usd;
        assert!(storage(32) > storage(8) && storage(8) > storage(4));
        // IBM's 100 ms granularity never bills less GB-seconds than AWS's 1 ms.
        let ibm = m.project_faas(4, &PriceTable::ibm_cloud_functions());
        assert!(ibm.bill.unwrap().billed_ms >= bill.billed_ms);
        // A Redis channel adds its instance for the run's time.
        let mut redis = m.clone();
        redis.channel = ChannelKind::Redis { instances: 1 };
        let r = redis.project_faas(4, &aws);
        let services = r.bill.unwrap().services_usd;
        assert!((services - r.time_s / 3600.0 * 0.17).abs() < 1e-12);
    }

    /// Measurements of real P = 8 runs on a loaded 2-core machine (local object-store channel),
    /// and the wall times of three P = 4 runs of the same work each.
    #[test]
    fn predicts_p4_from_p8_within_20_percent_on_two_cores() {
        let cases = [
            // sparse LR, 100k features, 270 minibatches, 10 epochs
            (
                270,
                10.015,
                [0.254, 2.907, 34.477, 38.21],
                (0.059, 0.073),
                [6.385, 7.171, 7.480],
            ),
            // PMF, 540 minibatches, 5 epochs
            (
                540,
                5.007,
                [0.321, 0.929, 33.148, 34.878],
                (0.039, 0.047),
                [5.519, 6.890, 6.292],
            ),
        ];
        for (batches, epochs, [read, compute, exchange, step], (startup, teardown), walls) in cases
        {
            let mut m = measured(
                vec![PhaseMeasurement {
                    workers: 8,
                    steps: 338,
                    read_ms: read,
                    compute_ms: compute,
                    compute_cpu_ms: None,
                    exchange_ms: exchange,
                    step_ms: step,
                }],
                Some(2),
            );
            m.train_batches = batches;
            m.epochs = epochs;
            m.startup_s = startup;
            m.teardown_s = teardown;
            let predicted = m.project_faas(4, &PriceTable::aws_lambda()).time_s;
            for wall in walls {
                let error = predicted / wall - 1.0;
                assert!(
                    error.abs() < 0.2,
                    "{predicted} s for {wall} s ({error:+.2})"
                );
            }
        }
    }

    /// The measurements of a real run (sparse LR, 8 workers on 2 shared cores, a Redis channel,
    /// 1013 steps in 46.27 s): at its own fleet size the prediction is the run's bill at the same
    /// prices, every part of it counted once. The minibatch GETs (one per worker and step, 8104)
    /// are not negligible next to steps of 45 ms: $0.0032 against $0.0069 of compute.
    #[test]
    fn the_prediction_at_the_measured_fleet_is_the_runs_bill() {
        let mut m = measured(
            vec![PhaseMeasurement {
                workers: 8,
                steps: 1013,
                read_ms: 0.422_616,
                compute_ms: 2.010_531,
                compute_cpu_ms: None,
                exchange_ms: 42.114_760,
                step_ms: 45.463_219,
            }],
            Some(2),
        );
        m.train_batches = 2700;
        m.epochs = 3.001_481_481_481_481;
        m.startup_s = 0.022_387;
        m.teardown_s = 0.189_289;
        m.channel = ChannelKind::Redis { instances: 1 };
        let aws = PriceTable::aws_lambda();
        let p = m.project_faas(8, &aws);
        assert_eq!(p.steps, 1013);
        let wall_s = 0.022_387 + 1013.0 * 45.463_219 / 1000.0 + 0.189_289;
        assert!((p.time_s - wall_s).abs() < 1e-9, "{p:?}");
        // By hand: 9 functions (8 workers and the supervisor) of 1 GB for the wall time, 9
        // requests, one Redis for the wall time, and 8 × 1013 GETs.
        let compute = 9.0 * (wall_s * 1000.0).ceil() / 1000.0 * 0.000_016_666_7;
        let requests = 9.0 * 0.2e-6;
        let redis = wall_s / 3600.0 * 0.17;
        let gets = 8.0 * 1013.0 / 1000.0 * 0.0004;
        let by_hand = compute + requests + redis + gets;
        let bill = p.bill.as_ref().unwrap();
        assert_eq!(bill.invocations, 9);
        assert_eq!(bill.billed_ms, 9 * (wall_s * 1000.0).ceil() as u64);
        assert!((bill.compute_usd - compute).abs() < 1e-12, "{bill:?}");
        assert!((bill.services_usd - redis).abs() < 1e-12, "{bill:?}");
        assert!((bill.storage_usd - gets).abs() < 1e-12, "{bill:?}");
        assert!((p.cost_usd - by_hand).abs() < 1e-12, "{p:?}");
        assert!((p.cost_usd - 0.012_368).abs() < 1e-6, "{p:?}");
        // The run's own bill as the driver makes it now: the invocations' real durations (414.924
        // GB-s), the same Redis for the 46.266 s wall and the same GETs; within 0.3 %.
        let run_bill = 414.924 * 0.000_016_666_7 + requests + 46.265_917 / 3600.0 * 0.17 + gets;
        assert!((p.cost_usd / run_bill - 1.0).abs() < 0.003, "{run_bill}");
    }

    #[test]
    fn reinvocations_add_requests() {
        let mut m = measured(vec![phase(4, 675, 1.5, 8.0)], None);
        m.invocations_per_worker = 3.0;
        let p = m.project_faas(2, &PriceTable::aws_lambda());
        let bill = p.bill.unwrap();
        assert_eq!(bill.invocations, 7);
        assert!((bill.request_usd - 7.0 * 0.2e-6).abs() < 1e-15);
    }

    #[test]
    fn vm_prediction_follows_lambdaml() {
        let m = measured(vec![phase(4, 675, 1.5, 8.0)], Some(2));
        let vm = VmPrice::new("c5.large", 0.085);
        let one = m.project_vm(&vm, 1);
        // Uncontended at P = 4 on 2 cores: compute 1.5 / 2, exchange 8 / 2, so e(1) = 4 / 4.
        let step = (1.5 + 0.1) / 2.0 + 1.0;
        let expected = 60.0 + m.data_loading_s + 2700.0 * step / 1000.0;
        assert!((one.time_s - expected).abs() < 1e-9, "{one:?}");
        assert!((one.cost_usd - 0.085 / 3600.0 * expected.ceil()).abs() < 1e-12);
        // A short run on 4 machines pays the one-minute minimum on each.
        let mut quick = m.clone();
        quick.vm_startup_s = 0.0;
        let four = quick.project_vm(&vm, 4);
        assert!(four.time_s < 60.0);
        assert!((four.cost_usd - 4.0 * 60.0 * 0.085 / 3600.0).abs() < 1e-12);
        // A dearer type costs more for the same time.
        let big = m.project_vm(&VmPrice::new("c5.4xlarge", 0.68), 4);
        assert!(big.cost_usd > m.project_vm(&vm, 4).cost_usd);
        assert!(big.bill.is_none());
    }
}
