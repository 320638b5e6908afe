//! Fault injection (`--fault`, a test aid): a crash or a memory hog at the start of a step,
//! a dropped or delayed own message.

use std::time::Duration;

use super::Worker;
use crate::exchange::PublishFault;
use crate::spec::Fault;

impl Worker {
    /// Injects the faults due at the start of `step` (test aid).
    pub(super) fn inject_faults(&self, step: u64) {
        for fault in &self.faults {
            match *fault {
                Fault::KillWorker { worker, step: at } if worker == self.id && at == step => {
                    tracing::error!(worker, step, "fault injection: killing this worker");
                    std::process::abort();
                }
                Fault::ExceedMemory { worker, step: at } if worker == self.id && at == step => {
                    tracing::error!(worker, step, "fault injection: exceeding the memory cap");
                    let bytes = (self.ctx.spec.limits.memory_mb as usize + 256) << 20;
                    let hog = vec![1u8; bytes];
                    // Touch it, so that it is resident, and keep it while the invoker notices.
                    std::hint::black_box(&hog);
                    std::thread::sleep(Duration::from_secs(30));
                }
                _ => {}
            }
        }
    }

    /// How this worker's own message of `step` is to be published (test aid: dropped or
    /// delayed).
    pub(super) fn publish_fault(&self, step: u64) -> Option<PublishFault> {
        self.faults.iter().find_map(|fault| match *fault {
            Fault::DropMessage { worker, step: at } if worker == self.id && at == step => {
                Some(PublishFault::Drop)
            }
            Fault::DelayMessage {
                worker,
                step: at,
                ms,
            } if worker == self.id && at == step => {
                Some(PublishFault::Delay(Duration::from_millis(ms)))
            }
            _ => None,
        })
    }
}
