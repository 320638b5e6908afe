//! What a run costs: price tables for FaaS platforms and the billed cost of invocations.
//!
//! A function invocation is billed per GB-second of configured memory, with its duration rounded
//! up to the platform's granularity (1 ms on AWS Lambda, 100 ms on IBM Cloud Functions), plus a
//! fee per request. A run also pays for the always-on services it uses for its wall time (a
//! Redis for the exchange, say) and for the object-store requests its channel makes (DESIGN §8).
//!
//! ```
//! use mlless_cost::{PriceTable, Usage, ObjectRequests};
//! let aws = PriceTable::aws_lambda();
//! let bill = aws.bill(&[Usage { duration_ms: 1_500, memory_mb: 1024 }], 2.0, ObjectRequests::default());
//! assert_eq!(bill.billed_ms, 1_500);
//! assert!((bill.compute_usd - 1.5 * 0.0000166667).abs() < 1e-12);
//! ```

use serde::{Deserialize, Serialize};

/// Prices of one FaaS platform, as public list prices in US dollars.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    /// Platform name, e.g. `aws-lambda`.
    pub name: String,
    /// Price of one GB-second of configured function memory.
    pub gb_second_usd: f64,
    /// Billing granularity of an invocation's duration, in milliseconds.
    pub granularity_ms: u64,
    /// Fee per invocation request.
    pub request_usd: f64,
    /// Always-on services the run needs (e.g. a Redis for the exchange), per hour of wall time.
    pub services_usd_per_hour: f64,
    /// Object-store PUT, COPY, POST and LIST requests, per 1,000.
    pub object_write_usd_per_1000: f64,
    /// Object-store GET and other read requests, per 1,000.
    pub object_read_usd_per_1000: f64,
}

impl PriceTable {
    /// AWS Lambda (x86, first pricing tier) with S3 standard request prices.
    pub fn aws_lambda() -> Self {
        Self {
            name: "aws-lambda".into(),
            gb_second_usd: 0.000_016_666_7,
            granularity_ms: 1,
            request_usd: 0.20 / 1e6,
            services_usd_per_hour: 0.0,
            object_write_usd_per_1000: 0.005,
            object_read_usd_per_1000: 0.0004,
        }
    }

    /// IBM Cloud Functions, the platform of the MLLess paper (100 ms granularity).
    pub fn ibm_cloud_functions() -> Self {
        Self {
            name: "ibm-cf".into(),
            gb_second_usd: 0.000_017,
            granularity_ms: 100,
            request_usd: 0.0,
            services_usd_per_hour: 0.0,
            object_write_usd_per_1000: 0.005,
            object_read_usd_per_1000: 0.0004,
        }
    }

    /// The built-in table of that name (`aws-lambda` or `ibm-cf`), if there is one.
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "aws-lambda" => Some(Self::aws_lambda()),
            "ibm-cf" => Some(Self::ibm_cloud_functions()),
            _ => None,
        }
    }

    /// The cost of one invocation: its billed GB-seconds plus the request fee.
    pub fn invocation_usd(&self, usage: Usage) -> f64 {
        let billed = billed_duration_ms(usage.duration_ms, self.granularity_ms);
        gb_seconds(billed, usage.memory_mb) * self.gb_second_usd + self.request_usd
    }

    /// The bill of a run: its invocations, its wall time (for always-on services) and the
    /// object-store requests it made.
    pub fn bill(&self, invocations: &[Usage], wall_s: f64, requests: ObjectRequests) -> Bill {
        let mut billed_ms = 0;
        let mut gb_s = 0.0;
        for usage in invocations {
            let billed = billed_duration_ms(usage.duration_ms, self.granularity_ms);
            billed_ms += billed;
            gb_s += gb_seconds(billed, usage.memory_mb);
        }
        let compute_usd = gb_s * self.gb_second_usd;
        let request_usd = invocations.len() as f64 * self.request_usd;
        let services_usd = wall_s.max(0.0) / 3600.0 * self.services_usd_per_hour;
        let storage_usd = requests.writes as f64 / 1000.0 * self.object_write_usd_per_1000
            + requests.reads as f64 / 1000.0 * self.object_read_usd_per_1000;
        Bill {
            platform: self.name.clone(),
            invocations: invocations.len() as u64,
            billed_ms,
            gb_seconds: gb_s,
            compute_usd,
            request_usd,
            services_usd,
            storage_usd,
            total_usd: compute_usd + request_usd + services_usd + storage_usd,
        }
    }
}

/// How long one invocation ran and with how much configured memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Wall duration of the invocation, in milliseconds.
    pub duration_ms: u64,
    /// Configured memory of the function, in MB (billing uses the configured size, not the peak).
    pub memory_mb: u32,
}

/// Object-store requests a run made (its data reads and, on the object-store channel, its
/// exchange).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRequests {
    /// PUT, LIST, COPY and DELETE-class requests.
    pub writes: u64,
    /// GET and HEAD requests.
    pub reads: u64,
}

impl std::ops::AddAssign for ObjectRequests {
    fn add_assign(&mut self, other: Self) {
        self.writes += other.writes;
        self.reads += other.reads;
    }
}

/// The cost of a run, broken down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bill {
    /// Price table used.
    pub platform: String,
    /// Number of invocations billed.
    pub invocations: u64,
    /// Sum of billed durations, rounded per invocation to the platform's granularity.
    pub billed_ms: u64,
    /// Billed GB-seconds.
    pub gb_seconds: f64,
    /// Cost of the GB-seconds.
    pub compute_usd: f64,
    /// Request fees.
    pub request_usd: f64,
    /// Always-on services for the wall time.
    pub services_usd: f64,
    /// Object-store requests.
    pub storage_usd: f64,
    /// Everything together.
    pub total_usd: f64,
}

/// A duration rounded up to the billing granularity; at least one unit is billed.
pub fn billed_duration_ms(duration_ms: u64, granularity_ms: u64) -> u64 {
    let g = granularity_ms.max(1);
    duration_ms.max(1).div_ceil(g) * g
}

/// GB-seconds of `billed_ms` at `memory_mb` (1 GB = 1024 MB, as the platforms bill).
pub fn gb_seconds(billed_ms: u64, memory_mb: u32) -> f64 {
    billed_ms as f64 / 1000.0 * f64::from(memory_mb) / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_up_to_granularity() {
        assert_eq!(billed_duration_ms(1, 100), 100);
        assert_eq!(billed_duration_ms(100, 100), 100);
        assert_eq!(billed_duration_ms(101, 100), 200);
        assert_eq!(billed_duration_ms(0, 1), 1);
        assert_eq!(billed_duration_ms(1234, 1), 1234);
    }

    #[test]
    fn ibm_bills_more_than_aws_for_short_invocations() {
        let short = [Usage {
            duration_ms: 120,
            memory_mb: 2048,
        }; 10];
        let aws = PriceTable::aws_lambda().bill(&short, 1.0, ObjectRequests::default());
        let ibm = PriceTable::ibm_cloud_functions().bill(&short, 1.0, ObjectRequests::default());
        assert_eq!(aws.billed_ms, 1200);
        assert_eq!(ibm.billed_ms, 2000);
        assert!((ibm.gb_seconds - 4.0).abs() < 1e-9);
        assert!(ibm.compute_usd > aws.compute_usd);
    }

    #[test]
    fn bill_adds_every_part() {
        let mut prices = PriceTable::aws_lambda();
        prices.services_usd_per_hour = 0.17;
        let requests = ObjectRequests {
            writes: 2000,
            reads: 10_000,
        };
        let bill = prices.bill(
            &[Usage {
                duration_ms: 1000,
                memory_mb: 1024,
            }],
            3600.0,
            requests,
        );
        let expected_storage = 2.0 * 0.005 + 10.0 * 0.0004;
        assert!((bill.storage_usd - expected_storage).abs() < 1e-12);
        assert!((bill.services_usd - 0.17).abs() < 1e-12);
        assert!((bill.request_usd - 0.2e-6).abs() < 1e-15);
        let sum = bill.compute_usd + bill.request_usd + bill.services_usd + bill.storage_usd;
        assert!((bill.total_usd - sum).abs() < 1e-15);
        assert_eq!(
            PriceTable::by_name("aws-lambda"),
            Some(PriceTable::aws_lambda())
        );
        assert_eq!(PriceTable::by_name("azure"), None);
    }
}
