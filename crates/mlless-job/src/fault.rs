//! Faults to inject for tests of the recovery (`--fault`).

use serde::{Deserialize, Serialize};

/// The object a worker holding at a step ([`Fault::Hold`]) writes in its run's store when it
/// starts to wait: a test waits for it, instead of for a time, to act while the run is held.
pub const HOLD_KEY: &str = "fault-held";

/// The object a test writes in the run's store to release a worker holding at a step
/// ([`Fault::Hold`]).
pub const RELEASE_KEY: &str = "fault-release";

/// A fault to inject, for tests of the recovery (`--fault`; off by default). Each fires once,
/// in the role's first invocation, never in a replacement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Worker `worker` crashes (aborts) at the start of `step`.
    KillWorker {
        /// The worker.
        worker: u32,
        /// The step.
        step: u64,
    },
    /// The supervisor crashes when it has recorded `step`.
    KillSupervisor {
        /// The step.
        step: u64,
    },
    /// Worker `worker` does not publish its update of `step` (and so hangs: the supervisor's
    /// deadline has it replaced).
    DropMessage {
        /// The worker.
        worker: u32,
        /// The step.
        step: u64,
    },
    /// Worker `worker` publishes its update of `step` `ms` milliseconds late.
    DelayMessage {
        /// The worker.
        worker: u32,
        /// The step.
        step: u64,
        /// The delay.
        ms: u64,
    },
    /// Worker `worker` allocates past its memory cap at `step`.
    ExceedMemory {
        /// The worker.
        worker: u32,
        /// The step.
        step: u64,
    },
    /// Worker `worker` waits at the start of `step` until the run's store has [`RELEASE_KEY`]
    /// or the run is asked to stop (a cancel), having written [`HOLD_KEY`]: a test's signal or
    /// stop then lands at that step, whatever the machine's speed.
    Hold {
        /// The worker.
        worker: u32,
        /// The step.
        step: u64,
    },
}

/// `kill-worker:W@T`, `kill-supervisor@T`, `drop:W@T`, `delay:W@T:MS`, `oom:W@T`, `hold:W@T`.
impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let bad = || {
            format!(
                "bad --fault {text:?}: expected kill-worker:W@T, kill-supervisor@T, drop:W@T, \
                 delay:W@T:MS, oom:W@T or hold:W@T"
            )
        };
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let (name, rest) = text.split_once(['@', ':']).ok_or_else(bad)?;
        if name == "kill-supervisor" {
            return Ok(Self::KillSupervisor { step: num(rest)? });
        }
        let (worker, rest) = rest.split_once('@').ok_or_else(bad)?;
        let worker = u32::try_from(num(worker)?).map_err(|_| bad())?;
        match name {
            "kill-worker" => Ok(Self::KillWorker {
                worker,
                step: num(rest)?,
            }),
            "drop" => Ok(Self::DropMessage {
                worker,
                step: num(rest)?,
            }),
            "oom" => Ok(Self::ExceedMemory {
                worker,
                step: num(rest)?,
            }),
            "hold" => Ok(Self::Hold {
                worker,
                step: num(rest)?,
            }),
            "delay" => {
                let (step, ms) = rest.split_once(':').ok_or_else(bad)?;
                Ok(Self::DelayMessage {
                    worker,
                    step: num(step)?,
                    ms: num(ms)?,
                })
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        assert_eq!(
            "kill-worker:2@40".parse(),
            Ok(Fault::KillWorker {
                worker: 2,
                step: 40
            })
        );
        assert_eq!(
            "kill-supervisor@7".parse(),
            Ok(Fault::KillSupervisor { step: 7 })
        );
        assert_eq!(
            "drop:1@3".parse(),
            Ok(Fault::DropMessage { worker: 1, step: 3 })
        );
        assert_eq!(
            "hold:0@25".parse(),
            Ok(Fault::Hold {
                worker: 0,
                step: 25
            })
        );
        assert_eq!(
            "delay:0@5:250".parse(),
            Ok(Fault::DelayMessage {
                worker: 0,
                step: 5,
                ms: 250
            })
        );
        assert_eq!(
            "oom:3@1".parse(),
            Ok(Fault::ExceedMemory { worker: 3, step: 1 })
        );
        for bad in [
            "kill-worker:2",
            "kill",
            "delay:0@5",
            "drop:x@1",
            "explode:1@2",
        ] {
            assert!(bad.parse::<Fault>().is_err(), "{bad}");
        }
    }
}
