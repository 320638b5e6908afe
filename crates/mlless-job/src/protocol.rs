//! The protocols of a job: how the workers keep their replicas in step ([`SyncMode`]), how
//! they combine their work ([`Algorithm`]), and how an exchange aggregates ([`Pattern`]).

use mlless_core::SignificanceScale;
use serde::{Deserialize, Serialize};

/// How the workers keep their replicas in step (`--sync`, DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SyncMode {
    /// Bulk synchronous: every worker applies every update of step t before step t + 1.
    #[default]
    Bsp,
    /// Insignificance-bounded synchronous (MLLess): BSP's barrier, but each worker sends only
    /// the accumulated updates that are significant relative to the parameter, and keeps
    /// accumulating the rest.
    Isp {
        /// The threshold `V`; an accumulated update `a_j` is sent once
        /// `|a_j / x_j| > V / sqrt(t + 1)` (see `scale`).
        significance: f32,
        /// What `a_j` is measured against: `x_j` (DESIGN §4), or the larger of `|x_j|` and the
        /// mean magnitude of the parameters (`--significance-scale mean`).
        #[serde(default)]
        scale: SignificanceScale,
    },
    /// Stale synchronous: a worker starts step t + 1 only once it has applied every worker's
    /// updates up to step t − slack, and applies whatever else has arrived.
    Ssp {
        /// How many steps a worker may run ahead of the slowest; 0 is BSP.
        slack: u32,
    },
    /// Asynchronous: no barrier; every update is applied, once, when it arrives.
    Asp,
}

impl SyncMode {
    /// The steps a worker may run ahead of the slowest: `Some(0)` for the synchronous modes,
    /// `None` (unbounded) for ASP.
    pub fn slack(&self) -> Option<u64> {
        match self {
            Self::Bsp | Self::Isp { .. } => Some(0),
            Self::Ssp { slack } => Some(u64::from(*slack)),
            Self::Asp => None,
        }
    }

    /// Whether every worker applies every step's updates at the same point (BSP, ISP).
    pub fn is_synchronous(&self) -> bool {
        match self {
            Self::Bsp | Self::Isp { .. } => true,
            Self::Ssp { .. } | Self::Asp => false,
        }
    }

    /// Whether every worker applies every step's whole updates at the same point (BSP alone):
    /// what averaging models (MA-SGD, ADMM) and k-means's Lloyd steps need.
    pub fn applies_whole_updates_in_step(&self) -> bool {
        match self {
            Self::Bsp => true,
            Self::Isp { .. } | Self::Ssp { .. } | Self::Asp => false,
        }
    }

    /// The mode's name as `--sync` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Bsp => "bsp",
            Self::Isp { .. } => "isp",
            Self::Ssp { .. } => "ssp",
            Self::Asp => "asp",
        }
    }
}

impl std::fmt::Display for SyncMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bsp | Self::Asp => f.write_str(self.name()),
            Self::Isp {
                significance,
                scale: SignificanceScale::Parameter,
            } => write!(f, "isp (V = {significance})"),
            Self::Isp {
                significance,
                scale: SignificanceScale::Mean,
            } => write!(f, "isp (V = {significance}, relative to the mean weight)"),
            Self::Ssp { slack } => write!(f, "ssp (slack {slack})"),
        }
    }
}

/// How the workers combine their work (`--algorithm`, DESIGN §5, LambdaML's algorithms).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Algorithm {
    /// Gradient averaging (GA-SGD): every step, each worker's update is averaged over the fleet.
    #[default]
    Ga,
    /// Model averaging (MA-SGD): each worker takes local steps on its own replica, and every
    /// `every` steps (`None`: every epoch) the replicas are averaged.
    Ma {
        /// Local steps between two averagings; `None`: one epoch's worth.
        every: Option<u32>,
    },
    /// Consensus ADMM: each worker minimises its shard's loss plus `ρ/2·‖w − z + u‖²` for
    /// `local_epochs` passes over its shard, then `z = mean(w_i + u_i)` and `u_i += w_i − z`.
    Admm {
        /// The penalty ρ.
        rho: f32,
        /// Passes over the worker's shard between two rounds.
        local_epochs: u32,
    },
}

impl Algorithm {
    /// The algorithm's name as `--algorithm` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ga => "ga",
            Self::Ma { .. } => "ma",
            Self::Admm { .. } => "admm",
        }
    }

    /// Steps between two exchanges, with `steps_per_epoch` steps an epoch: 1 for GA-SGD.
    pub fn round_steps(&self, steps_per_epoch: u64) -> u64 {
        let epoch = steps_per_epoch.max(1);
        match *self {
            Self::Ga => 1,
            Self::Ma { every } => every.map_or(epoch, |k| u64::from(k.max(1))),
            Self::Admm { local_epochs, .. } => epoch * u64::from(local_epochs.max(1)),
        }
    }
}

/// ADMM's penalty ρ when `--algorithm admm` does not give one. The proximal step pulls a
/// local model towards `z − u` by `lr · ρ` per step; with sparse LR's per-sample rate (twice
/// the former 0.5 at 4 workers × 500 samples) 0.05 keeps that pull where 0.1 had it, and
/// reaches GA's test log loss (within 0.5%) in 5 epochs on the tests' set, where 0.1 stays
/// 0.7% above.
pub const DEFAULT_ADMM_RHO: f32 = 0.05;

/// `ga`, `ma`, `ma:K`, `admm`, `admm:RHO` or `admm:RHO:LOCAL_EPOCHS`.
impl std::str::FromStr for Algorithm {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let mut parts = text.split(':');
        let name = parts.next().unwrap_or_default();
        let args: Vec<&str> = parts.collect();
        let bad = |what: &str| format!("{what} in --algorithm {text:?}");
        let number = |s: &str, what: &str| -> std::result::Result<f64, String> {
            s.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| bad(&format!("{what} must be a positive number, got {s:?}")))
        };
        let count = |s: &str, what: &str| -> std::result::Result<u32, String> {
            s.parse::<u32>()
                .ok()
                .filter(|&k| k > 0)
                .ok_or_else(|| bad(&format!("{what} must be a whole number >= 1, got {s:?}")))
        };
        match (name, args.as_slice()) {
            ("ga", []) => Ok(Self::Ga),
            ("ma", []) => Ok(Self::Ma { every: None }),
            ("ma", [k]) => Ok(Self::Ma {
                every: Some(count(k, "K")?),
            }),
            ("admm", rest) if rest.len() <= 2 => Ok(Self::Admm {
                rho: match rest.first() {
                    Some(r) => number(r, "RHO")? as f32,
                    None => DEFAULT_ADMM_RHO,
                },
                local_epochs: match rest.get(1) {
                    Some(e) => count(e, "LOCAL_EPOCHS")?,
                    None => 1,
                },
            }),
            _ => Err(format!(
                "unknown --algorithm {text:?}: expected ga, ma[:K] or admm[:RHO[:LOCAL_EPOCHS]]"
            )),
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Ga => f.write_str("ga"),
            Self::Ma { every: None } => f.write_str("ma (every epoch)"),
            Self::Ma { every: Some(k) } => write!(f, "ma (every {k} steps)"),
            Self::Admm { rho, local_epochs } => {
                write!(f, "admm (rho {rho}, {local_epochs} local epochs)")
            }
        }
    }
}

/// How an exchange aggregates the workers' vectors (`--pattern`, DESIGN §5: with the feature
/// `clap`, the CLI's value, named as by [`Pattern::name`], with the help of `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// Every worker reads every other worker's update (MLLess).
    ///
    /// Each averages them itself.
    #[default]
    Broadcast,
    /// A leader averages everyone's update and publishes the mean (LambdaML's AllReduce).
    ///
    /// The others read the mean.
    #[cfg_attr(feature = "clap", value(name = "allreduce"))]
    AllReduce,
    /// Worker k averages chunk k of everyone's update; everyone reads the chunks (LambdaML's
    /// ScatterReduce).
    ///
    /// The vector is cut into one chunk per worker.
    ScatterReduce,
    /// The parameter servers average everyone's update; everyone reads the mean (a ps://
    /// channel; its default there).
    ///
    /// LambdaML's hybrid parameter server; `ps://` channels only.
    Server,
}

/// The largest fleet for which a job on the object store (or DynamoDB, whose reads are billed
/// too) broadcasts when `--pattern` is not given ([`Pattern::for_fleet`]).
pub const BROADCAST_MAX_ON_STORE: u32 = 16;

/// The largest fleet for which a job on a server channel (Redis, Memcached) broadcasts when
/// `--pattern` is not given ([`Pattern::for_fleet`]).
pub const BROADCAST_MAX_ON_SERVER: u32 = 64;

impl Pattern {
    /// The pattern of a job of `workers` workers on a channel of kind `channel` under `sync`
    /// that did not name one, and why. Broadcast reads every peer's update: P² requests a step
    /// on the object store (a GET each), P on a server (one read returns a step's messages),
    /// but every worker reads P − 1 updates and sums them. All-reduce through a leader takes
    /// 2P + 1 requests and a second round trip. Measured with `mlless bench cloud` (a9a-shaped
    /// sparse LR and ML-100k-shaped PMF, BSP): on S3's latency broadcast was 1.2–2x faster a
    /// step but cost 1.6x (P = 16), 4x (64) and 11x (256) more an epoch; on ElastiCache's,
    /// broadcast was faster up to P = 64 (LR 0.8 against 1.4 ms at 16) and all-reduce beyond
    /// (LR 4.2 against 16.4 ms at 256). Synchronisations without a barrier (SSP, ASP) can only
    /// broadcast.
    ///
    /// On parameter servers the servers average ([`Pattern::Server`]) at every P: a worker
    /// sends its update once and receives one mean whatever the fleet.
    pub fn for_fleet(
        workers: u32,
        channel: mlless_cost::ChannelKind,
        sync: SyncMode,
    ) -> (Pattern, String) {
        if !sync.is_synchronous() {
            return (
                Pattern::Broadcast,
                format!("{} has no barrier for a leader to reduce at", sync.name()),
            );
        }
        let (max, on) = match channel {
            mlless_cost::ChannelKind::ParameterServer { .. } => {
                return (
                    Pattern::Server,
                    "the parameter servers average: each worker sends its update and receives \
                     the mean, whatever the fleet"
                        .to_string(),
                );
            }
            mlless_cost::ChannelKind::ObjectStore => (
                BROADCAST_MAX_ON_STORE,
                "the object store, where broadcast's P² reads a step are billed",
            ),
            mlless_cost::ChannelKind::DynamoDb => (
                BROADCAST_MAX_ON_STORE,
                "DynamoDB, where broadcast's P² reads of updates a step are billed by the KB",
            ),
            mlless_cost::ChannelKind::Redis { .. } | mlless_cost::ChannelKind::Memcached { .. } => {
                (
                    BROADCAST_MAX_ON_SERVER,
                    "a server channel, where every worker reading P − 1 updates outgrows a leader's \
                 extra round trip",
                )
            }
        };
        if workers <= max {
            (
                Pattern::Broadcast,
                format!("{workers} workers, at most {max} broadcast on {on}"),
            )
        } else {
            (
                Pattern::AllReduce,
                format!("{workers} workers, more than {max} on {on}"),
            )
        }
    }

    /// The patterns [`Pattern::for_fleet`] chooses at every P on a channel of kind `channel`
    /// under `sync`, for the cost model's projection to other fleets.
    pub fn by_fleet(
        channel: mlless_cost::ChannelKind,
        sync: SyncMode,
    ) -> mlless_cost::ProjectedPattern {
        use mlless_cost::{ChannelKind, PatternShape, ProjectedPattern};
        if !sync.is_synchronous() {
            return ProjectedPattern::Fixed(PatternShape::Broadcast);
        }
        match channel {
            ChannelKind::ParameterServer { .. } => ProjectedPattern::Fixed(PatternShape::Server),
            ChannelKind::ObjectStore | ChannelKind::DynamoDb => {
                ProjectedPattern::BroadcastUpTo(BROADCAST_MAX_ON_STORE)
            }
            ChannelKind::Redis { .. } | ChannelKind::Memcached { .. } => {
                ProjectedPattern::BroadcastUpTo(BROADCAST_MAX_ON_SERVER)
            }
        }
    }

    /// Whether the pattern runs on a channel of kind `channel`: the server pattern needs
    /// parameter servers, which average; the others run on every channel.
    pub fn runs_on(self, channel: mlless_cost::ChannelKind) -> bool {
        match self {
            Self::Server => matches!(channel, mlless_cost::ChannelKind::ParameterServer { .. }),
            Self::Broadcast | Self::AllReduce | Self::ScatterReduce => true,
        }
    }

    /// The pattern as the cost model's exchange sees it.
    pub fn shape(self) -> mlless_cost::PatternShape {
        match self {
            Self::Broadcast => mlless_cost::PatternShape::Broadcast,
            Self::AllReduce => mlless_cost::PatternShape::AllReduce,
            Self::ScatterReduce => mlless_cost::PatternShape::ScatterReduce,
            Self::Server => mlless_cost::PatternShape::Server,
        }
    }

    /// The pattern's name as `--pattern` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Broadcast => "broadcast",
            Self::AllReduce => "allreduce",
            Self::ScatterReduce => "scatter-reduce",
            Self::Server => "server",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_pattern_follows_the_fleet_and_the_channel() {
        use mlless_cost::ChannelKind;
        let store = ChannelKind::ObjectStore;
        let redis = ChannelKind::Redis { instances: 1 };
        let pick = |p, channel, sync| Pattern::for_fleet(p, channel, sync).0;
        assert_eq!(pick(16, store, SyncMode::Bsp), Pattern::Broadcast);
        assert_eq!(pick(17, store, SyncMode::Bsp), Pattern::AllReduce);
        assert_eq!(pick(64, redis, SyncMode::Bsp), Pattern::Broadcast);
        assert_eq!(pick(65, redis, SyncMode::Bsp), Pattern::AllReduce);
        let asp = SyncMode::Ssp { slack: 3 };
        let (pattern, why) = Pattern::for_fleet(256, store, asp);
        assert_eq!(pattern, Pattern::Broadcast);
        assert!(why.contains("no barrier"), "{why}");
        let (_, why) = Pattern::for_fleet(100, store, SyncMode::Bsp);
        assert!(why.starts_with("100 workers, more than 16"), "{why}");
    }

    #[test]
    fn algorithms_parse_with_defaults() {
        assert_eq!("ga".parse(), Ok(Algorithm::Ga));
        assert_eq!("ma".parse(), Ok(Algorithm::Ma { every: None }));
        assert_eq!("ma:8".parse(), Ok(Algorithm::Ma { every: Some(8) }));
        assert_eq!(
            "admm".parse(),
            Ok(Algorithm::Admm {
                rho: DEFAULT_ADMM_RHO,
                local_epochs: 1
            })
        );
        assert_eq!(
            "admm:0.5:3".parse(),
            Ok(Algorithm::Admm {
                rho: 0.5,
                local_epochs: 3
            })
        );
        for bad in [
            "sgd",
            "ma:0",
            "ma:x",
            "admm:-1",
            "admm:1:0",
            "admm:1:2:3",
            "ga:1",
        ] {
            assert!(bad.parse::<Algorithm>().is_err(), "{bad}");
        }
        assert_eq!(Algorithm::Ga.round_steps(3), 1);
        assert_eq!(Algorithm::Ma { every: None }.round_steps(3), 3);
        assert_eq!(Algorithm::Ma { every: Some(5) }.round_steps(3), 5);
        let admm = Algorithm::Admm {
            rho: 1.0,
            local_epochs: 2,
        };
        assert_eq!(admm.round_steps(3), 6);
    }
}
