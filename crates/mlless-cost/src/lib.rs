//! What a run costs: price tables for FaaS platforms, the billed cost of invocations, and what
//! the same work would take and cost at another fleet size or on rented VMs.
//!
//! A function invocation is billed per GB-second of configured memory, with its duration rounded
//! up to the platform's granularity (1 ms on AWS Lambda, 100 ms on IBM Cloud Functions), plus a
//! fee per request. A run also pays for the always-on services it uses for its wall time (a
//! Redis for the exchange, say) and for the object-store requests it makes (DESIGN §8).
//!
//! ```
//! use mlless_cost::{PriceTable, Usage, ObjectRequests};
//! let aws = PriceTable::aws_lambda();
//! let bill = aws.bill(&[Usage { duration_ms: 1_500, memory_mb: 1024 }], 2.0, ObjectRequests::default());
//! assert_eq!(bill.billed_ms, 1_500);
//! assert!((bill.compute_usd - 1.5 * 0.0000166667).abs() < 1e-12);
//! ```
//!
//! - [`PriceTable`]: a platform's prices, built in ([`PriceTable::by_name`]) or read from TOML
//!   ([`PriceTable::from_toml_str`]); [`PriceTable::for_channel`] adds the always-on services of
//!   a [`ChannelKind`];
//! - [`VmPrice`]: the hourly price of a VM type, for the IaaS comparison;
//! - [`RunMeasurements`]: what a run measured, and its predictions
//!   ([`RunMeasurements::project_faas`], [`RunMeasurements::project_vm`]).

use serde::{Deserialize, Serialize};

pub mod cloud;
pub mod plan;
pub mod projection;
mod vm;

pub use cloud::{PatternShape, ServiceLatency, UpdateSize};
pub use projection::{
    CloudExchange, ExchangeModel, PhaseMeasurement, ProjectedPattern, Projection, RunMeasurements,
};
pub use vm::{DEFAULT_VM_STARTUP_S, VM_MINIMUM_BILLED_S, VmPrice, billed_vm_seconds};

/// Price of one always-on Redis instance for the exchange, per hour (MLLess's estimate, DESIGN
/// §8).
pub const REDIS_USD_PER_HOUR: f64 = 0.17;
/// The price per hour of a parameter server's VM when the run named none: a c5.large, the
/// built-in VM type ([`VmPrice::builtins`]) LambdaML's comparisons used.
pub const PS_USD_PER_HOUR: f64 = 0.085;
/// Price of one always-on Memcached instance, per hour. An ElastiCache node of a given size costs
/// the same whichever engine it runs, so this is MLLess's Redis estimate.
pub const MEMCACHED_USD_PER_HOUR: f64 = 0.17;
/// DynamoDB on-demand (us-east-1, standard table class): one million write request units.
/// AWS's list price since November 2024, when on-demand throughput was halved from $1.25
/// (aws.amazon.com/dynamodb/pricing/on-demand/). A write unit is one started KB of an item
/// written or deleted.
pub const DYNAMODB_WRITE_USD_PER_MILLION: f64 = 0.625;
/// DynamoDB on-demand (us-east-1, standard table class): one million read request units (same
/// source). A read unit is one started 4 KB of a strongly consistent read.
pub const DYNAMODB_READ_USD_PER_MILLION: f64 = 0.125;
/// Price of a RabbitMQ broker, per hour (MLLess's estimate, DESIGN §8).
pub const RABBITMQ_USD_PER_HOUR: f64 = 0.15;

/// Errors of the cost model: a price table or a VM price that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CostError {
    /// The TOML text is not a price table (syntax, a missing or unknown field, a wrong type);
    /// the message says which field and where. (The parser's error is the message, not a
    /// source, so that it is shown once.)
    #[error("invalid price table: {0}")]
    Toml(toml::de::Error),
    /// A price is negative, not a number, or a granularity is zero.
    #[error("invalid price table: {field} = {value} ({reason})")]
    InvalidPrice {
        /// The field.
        field: &'static str,
        /// Its value.
        value: f64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A VM price given as text is not `TYPE:PRICE` (or the name of a built-in type).
    #[error("invalid VM price {input:?}: {reason}")]
    InvalidVm {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Prices of one FaaS platform, as public list prices in US dollars.
///
/// # TOML format
///
/// [`from_toml_str`](Self::from_toml_str) reads a table of this shape (the field names of this
/// struct; `name`, `gb_second_usd` and `granularity_ms` are required, every other price is 0
/// when left out, and unknown fields are refused so that a typo does not go unnoticed):
///
/// ```
/// use mlless_cost::PriceTable;
/// let table = PriceTable::from_toml_str(r#"
///     name = "my-lambda"
///     gb_second_usd = 0.0000133334     # per GB-second of configured memory
///     granularity_ms = 1               # durations are rounded up to this
///     request_usd = 0.0000002          # per invocation
///     services_usd_per_hour = 0.15     # always-on services of every run (a broker, say)
///     redis_usd_per_hour = 0.17        # per Redis instance, when the channel is Redis
///     memcached_usd_per_hour = 0.17    # per Memcached instance, when the channel is Memcached
///     ps_usd_per_hour = 0.085          # per parameter server, when the run named no --ps-instance
///     object_write_usd_per_1000 = 0.005
///     object_read_usd_per_1000 = 0.0004
///     dynamodb_write_usd_per_million = 0.625   # per million write request units (on demand)
///     dynamodb_read_usd_per_million = 0.125    # per million read request units
/// "#)?;
/// assert_eq!(table.name, "my-lambda");
/// assert_eq!(table.granularity_ms, 1);
/// # Ok::<(), mlless_cost::CostError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceTable {
    /// Platform name, e.g. `aws-lambda`.
    pub name: String,
    /// Price of one GB-second of configured function memory.
    pub gb_second_usd: f64,
    /// Billing granularity of an invocation's duration, in milliseconds.
    pub granularity_ms: u64,
    /// Fee per invocation request.
    #[serde(default)]
    pub request_usd: f64,
    /// Always-on services the run needs (e.g. a broker), per hour of wall time. The channel's
    /// own servers are added by [`for_channel`](Self::for_channel).
    #[serde(default)]
    pub services_usd_per_hour: f64,
    /// One Redis instance of a Redis channel, per hour of wall time.
    #[serde(default)]
    pub redis_usd_per_hour: f64,
    /// One Memcached instance of a Memcached channel, per hour of wall time.
    #[serde(default)]
    pub memcached_usd_per_hour: f64,
    /// One VM of a parameter-server channel (`mlless ps`), per hour of wall time, for a run
    /// that did not name its instance type (`--ps-instance`, which prices it from the VM
    /// table instead).
    #[serde(default)]
    pub ps_usd_per_hour: f64,
    /// Object-store PUT, COPY, POST and LIST requests, per 1,000.
    #[serde(default)]
    pub object_write_usd_per_1000: f64,
    /// Object-store GET and other read requests, per 1,000.
    #[serde(default)]
    pub object_read_usd_per_1000: f64,
    /// DynamoDB write request units (on-demand), per million: the DynamoDB channel's writes.
    #[serde(default)]
    pub dynamodb_write_usd_per_million: f64,
    /// DynamoDB read request units (on-demand), per million: the DynamoDB channel's reads.
    #[serde(default)]
    pub dynamodb_read_usd_per_million: f64,
}

impl PriceTable {
    /// AWS Lambda (x86, first pricing tier) with S3 standard request prices, DynamoDB
    /// on-demand request-unit prices (us-east-1) and MLLess's estimate for a Redis or Memcached
    /// instance.
    pub fn aws_lambda() -> Self {
        Self {
            name: "aws-lambda".into(),
            gb_second_usd: 0.000_016_666_7,
            granularity_ms: 1,
            request_usd: 0.20 / 1e6,
            services_usd_per_hour: 0.0,
            redis_usd_per_hour: REDIS_USD_PER_HOUR,
            memcached_usd_per_hour: MEMCACHED_USD_PER_HOUR,
            ps_usd_per_hour: PS_USD_PER_HOUR,
            object_write_usd_per_1000: 0.005,
            object_read_usd_per_1000: 0.0004,
            dynamodb_write_usd_per_million: DYNAMODB_WRITE_USD_PER_MILLION,
            dynamodb_read_usd_per_million: DYNAMODB_READ_USD_PER_MILLION,
        }
    }

    /// IBM Cloud Functions, the platform of the MLLess paper (100 ms granularity); a DynamoDB
    /// channel is billed at AWS's prices (IBM has no DynamoDB).
    pub fn ibm_cloud_functions() -> Self {
        // The services (Redis, Memcached, the parameter servers' VMs, object storage) at the
        // same prices as beside Lambda.
        Self {
            name: "ibm-cf".into(),
            gb_second_usd: 0.000_017,
            granularity_ms: 100,
            request_usd: 0.0,
            ..Self::aws_lambda()
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

    /// Reads a price table from TOML (format in the [type's documentation](Self)) and checks
    /// that every price is a finite non-negative number and the granularity at least 1 ms.
    ///
    /// # Errors
    ///
    /// [`CostError::Toml`] naming the line and the field for a syntax error, a missing or
    /// unknown field or a wrong type; [`CostError::InvalidPrice`] for a price that cannot be.
    pub fn from_toml_str(text: &str) -> Result<Self, CostError> {
        let table: Self = toml::from_str(text).map_err(CostError::Toml)?;
        table.validate()?;
        Ok(table)
    }

    /// The table as TOML, in the format [`from_toml_str`](Self::from_toml_str) reads.
    pub fn to_toml_string(&self) -> String {
        // A struct of strings and numbers always serialises.
        toml::to_string(self).unwrap_or_default()
    }

    /// Checks that every price is finite and non-negative and the granularity at least 1 ms.
    ///
    /// # Errors
    ///
    /// [`CostError::InvalidPrice`] naming the first field that is not.
    pub fn validate(&self) -> Result<(), CostError> {
        let prices = [
            ("gb_second_usd", self.gb_second_usd),
            ("request_usd", self.request_usd),
            ("services_usd_per_hour", self.services_usd_per_hour),
            ("redis_usd_per_hour", self.redis_usd_per_hour),
            ("memcached_usd_per_hour", self.memcached_usd_per_hour),
            ("ps_usd_per_hour", self.ps_usd_per_hour),
            ("object_write_usd_per_1000", self.object_write_usd_per_1000),
            ("object_read_usd_per_1000", self.object_read_usd_per_1000),
            (
                "dynamodb_write_usd_per_million",
                self.dynamodb_write_usd_per_million,
            ),
            (
                "dynamodb_read_usd_per_million",
                self.dynamodb_read_usd_per_million,
            ),
        ];
        for (field, value) in prices {
            if !(value.is_finite() && value >= 0.0) {
                return Err(CostError::InvalidPrice {
                    field,
                    value,
                    reason: "a price must be a finite number of dollars, 0 or more",
                });
            }
        }
        if self.granularity_ms == 0 {
            return Err(CostError::InvalidPrice {
                field: "granularity_ms",
                value: 0.0,
                reason: "the billing granularity must be at least 1 ms",
            });
        }
        Ok(())
    }

    /// The table with one more always-on service of `usd_per_hour` (added to
    /// [`services_usd_per_hour`](Self::services_usd_per_hour)).
    pub fn with_services(mut self, usd_per_hour: f64) -> Self {
        self.services_usd_per_hour += usd_per_hour.max(0.0);
        self
    }

    /// What the servers of a channel of this kind cost per hour at these prices (Redis and
    /// Memcached: per instance; the object store and DynamoDB on demand: nothing, their
    /// requests are billed instead).
    pub fn channel_usd_per_hour(&self, channel: ChannelKind) -> f64 {
        match channel {
            ChannelKind::ObjectStore | ChannelKind::DynamoDb => 0.0,
            ChannelKind::Redis { instances } => f64::from(instances) * self.redis_usd_per_hour,
            ChannelKind::Memcached { instances } => {
                f64::from(instances) * self.memcached_usd_per_hour
            }
            ChannelKind::ParameterServer { instances } => {
                f64::from(instances) * self.ps_usd_per_hour
            }
        }
    }

    /// The table with the always-on servers of `channel` added to its services: what the driver
    /// bills a run with, e.g. `prices.for_channel(ChannelKind::Redis { instances: 2 })`.
    pub fn for_channel(self, channel: ChannelKind) -> Self {
        let extra = self.channel_usd_per_hour(channel);
        self.with_services(extra)
    }

    /// What a training step costs at these prices, as the scale-in tuner weighs it: each
    /// worker's GB-s at `memory_mb`, the services and `channel`'s servers per second, and the
    /// channel's requests per step of [`ObjectRequests::estimate`] (on the object store
    /// `2p` writes and `p² + 2p` reads: broadcast makes the reads grow as p²; on DynamoDB a
    /// write unit and a read unit per worker, at least).
    pub fn step_cost(&self, channel: ChannelKind, memory_mb: u32) -> mlless_core::StepCost {
        let (w, r) = (
            self.object_write_usd_per_1000 / 1000.0,
            self.object_read_usd_per_1000 / 1000.0,
        );
        let table =
            (self.dynamodb_write_usd_per_million + self.dynamodb_read_usd_per_million) / 1e6;
        mlless_core::StepCost {
            worker_usd_per_s: f64::from(memory_mb) / 1024.0 * self.gb_second_usd,
            services_usd_per_s: (self.services_usd_per_hour + self.channel_usd_per_hour(channel))
                / 3600.0,
            request_usd: match channel {
                ChannelKind::ObjectStore => [0.0, 2.0 * w + 2.0 * r, r],
                ChannelKind::Redis { .. }
                | ChannelKind::Memcached { .. }
                | ChannelKind::ParameterServer { .. } => [0.0, r, 0.0],
                ChannelKind::DynamoDb => [0.0, r + table, 0.0],
            },
        }
    }

    /// The cost of one invocation: its billed GB-seconds plus the request fee.
    pub fn invocation_usd(&self, usage: Usage) -> f64 {
        let billed = billed_duration_ms(usage.duration_ms, self.granularity_ms);
        gb_seconds(billed, usage.memory_mb) * self.gb_second_usd + self.request_usd
    }

    /// The bill of a run: its invocations, its wall time (for always-on services), the
    /// object-store requests it made and the DynamoDB request units of its channel.
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
        let table_usd = requests.table_write_units as f64 / 1e6
            * self.dynamodb_write_usd_per_million
            + requests.table_read_units as f64 / 1e6 * self.dynamodb_read_usd_per_million;
        Bill {
            platform: self.name.clone(),
            invocations: invocations.len() as u64,
            billed_ms,
            gb_seconds: gb_s,
            compute_usd,
            request_usd,
            services_usd,
            storage_usd,
            table_usd,
            total_usd: compute_usd + request_usd + services_usd + storage_usd + table_usd,
        }
    }

    /// [`bill`](Self::bill) of `count` invocations that each used `usage`, computed without a
    /// list of them (so that a prediction for a huge fleet allocates nothing by its size).
    pub fn bill_of_many(
        &self,
        usage: Usage,
        count: u64,
        wall_s: f64,
        requests: ObjectRequests,
    ) -> Bill {
        let mut bill = self.bill(&[], wall_s, requests);
        let billed = billed_duration_ms(usage.duration_ms, self.granularity_ms);
        let n = count as f64;
        bill.invocations = count;
        bill.billed_ms = billed.saturating_mul(count);
        bill.gb_seconds = gb_seconds(billed, usage.memory_mb) * n;
        bill.compute_usd = bill.gb_seconds * self.gb_second_usd;
        bill.request_usd = n * self.request_usd;
        bill.total_usd = bill.compute_usd
            + bill.request_usd
            + bill.services_usd
            + bill.storage_usd
            + bill.table_usd;
        bill
    }
}

/// The kind of channel a run exchanges through, as far as its price is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChannelKind {
    /// The object store (files, S3): no server of its own, but every message is a request.
    ObjectStore,
    /// Redis, sharded over `instances` servers.
    Redis {
        /// Number of Redis instances.
        instances: u32,
    },
    /// Memcached over `instances` servers.
    Memcached {
        /// Number of Memcached instances.
        instances: u32,
    },
    /// Parameter servers (`mlless ps`) on `instances` VMs, each billed per hour of the run's
    /// wall time at [`PriceTable::ps_usd_per_hour`].
    ParameterServer {
        /// Number of servers (VMs).
        instances: u32,
    },
    /// A DynamoDB table on demand: no server, its request units billed.
    #[serde(rename = "dynamodb")]
    DynamoDb,
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
/// exchange), and the DynamoDB request units of a DynamoDB channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRequests {
    /// PUT, LIST, COPY and DELETE-class requests.
    pub writes: u64,
    /// GET and HEAD requests.
    pub reads: u64,
    /// DynamoDB write request units.
    #[serde(default)]
    pub table_write_units: u64,
    /// DynamoDB read request units.
    #[serde(default)]
    pub table_read_units: u64,
}

impl ObjectRequests {
    /// The requests a run of `steps` steps on `workers` workers makes at least, by the protocol
    /// of the runtime (ARCHITECTURE "A training job"), in the kinds a run's counted requests
    /// are billed by (PUTs and LIST pages as writes; GETs, misses and HEADs as reads): per worker and step one GET of its minibatch; on the object-store channel also one PUT of
    /// its update, P GETs to collect the step's updates and one PUT of its statistics, and per
    /// step the supervisor's P GETs of the statistics (the DELETEs that clean up are not billed).
    /// A collect that finds a message not there yet reads it again (a GET answered "not found",
    /// billed as a read); those polls, checkpoints, the final replicas and the driver's own
    /// requests are not counted, so this is a lower bound: on the local object store a 4-worker
    /// PMF run's counted requests cost 1.2 times the estimate of its steps. On DynamoDB, per
    /// worker and step, a write unit (its update) and a read unit (the step's `Query`): the
    /// least they can cost, whatever their size.
    pub fn estimate(channel: ChannelKind, workers: u32, steps: u64) -> Self {
        let p = u64::from(workers);
        let worker_steps = p * steps;
        match channel {
            ChannelKind::ObjectStore => Self {
                writes: worker_steps * 2,
                reads: worker_steps * (1 + p) + p * steps,
                ..Self::default()
            },
            ChannelKind::Redis { .. }
            | ChannelKind::Memcached { .. }
            | ChannelKind::ParameterServer { .. } => Self {
                writes: 0,
                reads: worker_steps,
                ..Self::default()
            },
            ChannelKind::DynamoDb => Self {
                writes: 0,
                reads: worker_steps,
                table_write_units: worker_steps,
                table_read_units: worker_steps,
            },
        }
    }
}

/// Where the object-store requests of a bill come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestBasis {
    /// Counted where they were made (the functions' and the driver's store handles).
    Counted,
    /// Estimated from the steps by [`ObjectRequests::estimate`] (a lower bound), where no
    /// count exists.
    Estimated,
}

impl std::fmt::Display for RequestBasis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Counted => "counted",
            Self::Estimated => "estimated",
        })
    }
}

impl std::ops::AddAssign for ObjectRequests {
    fn add_assign(&mut self, other: Self) {
        self.writes += other.writes;
        self.reads += other.reads;
        self.table_write_units += other.table_write_units;
        self.table_read_units += other.table_read_units;
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
    /// DynamoDB request units (a DynamoDB channel's; 0 in records of versions before it).
    #[serde(default)]
    pub table_usd: f64,
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

/// The billed cost of a run at any time of it: what a platform has billed by time `t` (seconds
/// since the run started) for invocations that started at known times and ran for known
/// durations.
///
/// At time `t` an invocation that started at `s` has cost its request fee plus the GB-seconds of
/// `min(t − s, duration)` rounded up to the billing granularity (so the cost steps by one unit
/// of granularity, as the platform bills); always-on services accrue for the time passed, and
/// object-store requests, whose times are not known, are spread evenly up to the end.
#[derive(Debug, Clone)]
pub struct CostClock {
    prices: PriceTable,
    spans: Vec<Span>,
    services_usd_per_s: f64,
    storage_usd: f64,
    end_s: f64,
}

/// One invocation, as a [`CostClock`] sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    /// When it started, seconds since the run started.
    pub start_s: f64,
    /// How long it ran.
    pub duration_ms: u64,
    /// Its memory.
    pub memory_mb: u32,
}

impl CostClock {
    /// The clock of invocations `spans` at `prices`, with always-on services at
    /// `services_usd_per_s` and `storage_usd` of object-store requests over the run, which
    /// ends at `end_s` or with its last invocation, whichever is later.
    pub fn new(
        prices: PriceTable,
        spans: Vec<Span>,
        services_usd_per_s: f64,
        storage_usd: f64,
        end_s: f64,
    ) -> Self {
        let end_s = spans
            .iter()
            .map(|s| s.start_s + s.duration_ms as f64 / 1000.0)
            .fold(end_s.max(0.0), f64::max);
        Self {
            prices,
            spans,
            services_usd_per_s,
            storage_usd,
            end_s,
        }
    }

    /// When the run ended: its end or that of its last invocation, in seconds.
    pub fn end_s(&self) -> f64 {
        self.end_s
    }

    /// The invocations.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// The billed cost by time `t`, in dollars.
    pub fn cost_at(&self, t: f64) -> f64 {
        let mut usd = self.services_usd_per_s * t;
        if self.end_s > 0.0 {
            usd += self.storage_usd * (t / self.end_s).min(1.0);
        }
        for span in &self.spans {
            if t < span.start_s {
                continue;
            }
            let elapsed_ms = (((t - span.start_s) * 1000.0).round() as u64).min(span.duration_ms);
            let billed = billed_duration_ms(elapsed_ms, self.prices.granularity_ms);
            usd += self.prices.request_usd
                + gb_seconds(billed, span.memory_mb) * self.prices.gb_second_usd;
        }
        usd
    }
}

#[cfg(test)]
mod tests;
