//! Faults to inject for tests of the recovery (`--fault`).

use serde::{Deserialize, Serialize};

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
    /// Worker `worker` pauses at the start of `step`: it writes [`pause_reached_key`] in the
    /// run and waits until [`pause_release_key`] appears there or the run is asked to stop (a
    /// cancel then lands at that step: the worker has seen the stop). A test uses it to act at
    /// a step (a signal, a second driver), not after a time a faster build would beat.
    Pause {
        /// The worker.
        worker: u32,
        /// The step.
        step: u64,
    },
}

/// The key, below the run, that worker `worker` writes when a [`Fault::Pause`] stops it at
/// `step`.
pub fn pause_reached_key(worker: u32, step: u64) -> String {
    format!("faults/paused-{worker}-{step}")
}

/// The key, below the run, whose appearance lets worker `worker` go on from its
/// [`Fault::Pause`] at `step`.
pub fn pause_release_key(worker: u32, step: u64) -> String {
    format!("faults/go-{worker}-{step}")
}

/// `kill-worker:W@T`, `kill-supervisor@T`, `drop:W@T`, `delay:W@T:MS`, `oom:W@T`,
/// `pause:W@T`.
impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let bad = || {
            format!(
                "bad --fault {text:?}: expected kill-worker:W@T, kill-supervisor@T, drop:W@T, \
                 delay:W@T:MS, oom:W@T or pause:W@T"
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
            "pause" => Ok(Self::Pause {
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
            "pause:0@25".parse(),
            Ok(Fault::Pause {
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
        assert_eq!("pause:0@2".parse(), Ok(Fault::Pause { worker: 0, step: 2 }));
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
