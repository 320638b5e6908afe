//! What a step of p workers costs: [`StepCost`] (see the
//! [tuner's docs](crate::scale_in#the-bill-in-the-decision)).

use serde::{Deserialize, Serialize};

/// The bill of one step of `p` workers lasting `d` seconds:
/// `p·d·worker + d·services + r0 + r1·p + r2·p²` dollars.
///
/// The driver fills it from its price table: `worker` is a worker's GB-s price times its
/// memory, `services` the always-on servers of the channel, `r` the channel's requests per step
/// (on the object store, broadcast makes every worker read every other's update: `r2 > 0`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepCost {
    /// Dollars per second of one worker.
    pub worker_usd_per_s: f64,
    /// Dollars per second of the always-on services.
    pub services_usd_per_s: f64,
    /// Dollars of channel requests per step: `[constant, per worker, per worker²]`.
    pub request_usd: [f64; 3],
}

impl Default for StepCost {
    /// A worker-second as the unit of cost: what the tuner uses when no prices are known.
    fn default() -> Self {
        Self {
            worker_usd_per_s: 1.0,
            services_usd_per_s: 0.0,
            request_usd: [0.0; 3],
        }
    }
}

impl StepCost {
    /// The bill of one step of `workers` workers lasting `duration_s` seconds.
    pub fn step_usd(&self, workers: u32, duration_s: f64) -> f64 {
        let p = f64::from(workers);
        let [r0, r1, r2] = self.request_usd;
        p * duration_s * self.worker_usd_per_s
            + duration_s * self.services_usd_per_s
            + r0
            + r1 * p
            + r2 * p * p
    }

    /// Dollars per second of a fleet of `workers` whose steps last `duration_s`.
    pub fn usd_per_s(&self, workers: u32, duration_s: f64) -> f64 {
        if duration_s > 0.0 {
            self.step_usd(workers, duration_s) / duration_s
        } else {
            f64::INFINITY
        }
    }

    /// Whether every price is finite and non-negative.
    pub fn is_valid(&self) -> bool {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        ok(self.worker_usd_per_s)
            && ok(self.services_usd_per_s)
            && self.request_usd.iter().all(|&v| ok(v))
    }
}
