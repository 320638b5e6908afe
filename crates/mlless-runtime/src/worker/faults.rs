//! Fault injection (`--fault`, a test aid): a crash or a memory hog at the start of a step
//! ([`Worker::inject_faults`]), and a dropped or delayed own message, injected by
//! [`FaultyChannel`], a decorator of the channel the exchange publishes through (like
//! object_store's `ThrottledStore`), so that no protocol or pattern knows of faults.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mlless_store::{Averaged, Channel, ChannelError, MessageId, Share, StepExchange, StepMessages};

use super::Worker;
use crate::exchange::{MEANS, SCATTER};
use crate::messages::{STOP_KEY, UPDATES};
use mlless_job::Fault;

impl Worker {
    /// Injects the faults due at the start of `step` (test aid).
    pub(super) async fn inject_faults(&mut self, step: u64) {
        for fault in &self.faults {
            match *fault {
                Fault::KillWorker { worker, step: at } if worker == self.id && at == step => {
                    tracing::error!(worker, step, "fault injection: killing this worker");
                    std::process::abort();
                }
                Fault::ExceedMemory { worker, step: at } if worker == self.id && at == step => {
                    tracing::error!(worker, step, "fault injection: exceeding the memory cap");
                    let bytes = (self.ctx.spec.training.limits.memory_mb as usize + 256) << 20;
                    let hog = vec![1u8; bytes];
                    // Touch it, so that it is resident, and keep it while the invoker notices.
                    std::hint::black_box(&hog);
                    std::thread::sleep(Duration::from_secs(30));
                }
                _ => {}
            }
        }
        let id = self.id;
        if self.faults.contains(&Fault::Pause { worker: id, step }) {
            // Released by a stop, this worker has seen it: the fleet stops after this very
            // step. Otherwise, paused for who knows how long, what was asked meanwhile is
            // looked up at this step, not after the next poll's interval.
            self.stop_seen |= self.pause(step).await;
            self.last_stop_poll = None;
        }
    }
}

impl Worker {
    /// [`Fault::Pause`]: says it has reached `step` and waits for its release, both objects in
    /// the run, or for the run to be asked to stop (the job's [`STOP_KEY`]). A store or
    /// channel that fails ends the pause (a test aid never fails a run). Returns whether a
    /// stop released it.
    async fn pause(&self, step: u64) -> bool {
        let run = &self.ctx.run_store;
        let reached = mlless_job::fault::pause_reached_key(self.id, step);
        let release = mlless_job::fault::pause_release_key(self.id, step);
        tracing::warn!(
            worker = self.id,
            step,
            "fault injection: pausing until {release} or a stop"
        );
        if let Err(e) = run.put(&reached, Bytes::new()).await {
            tracing::warn!("fault injection: could not write {reached}: {e}");
            return false;
        }
        loop {
            let released = match run.get_opt(&release).await {
                Ok(Some(_)) => Ok(Some(false)),
                Ok(None) => self
                    .ctx
                    .channel
                    .get_key(STOP_KEY)
                    .await
                    .map(|stop| stop.map(|_| true))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match released {
                Ok(Some(by_stop)) => return by_stop,
                Ok(None) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => {
                    tracing::warn!("fault injection: pause at step {step} ended: {e}");
                    return false;
                }
            }
        }
    }
}

/// A fault injected into a worker's own exchange messages of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PublishFault {
    /// The message is never published.
    Drop,
    /// The message is published this late.
    Delay(Duration),
}

/// A channel that drops or delays worker `worker`'s own exchange messages (the first ones of a
/// step: on [`UPDATES`], a scatter-reduce's chunks on [`SCATTER`], or its share on [`MEANS`])
/// of the steps its faults name. Everything else passes through unchanged.
#[derive(Debug)]
pub(super) struct FaultyChannel {
    inner: Arc<dyn Channel>,
    worker: u32,
    faults: Vec<Fault>,
}

impl FaultyChannel {
    /// `inner` with the message faults of `faults` for `worker`; `inner` itself when there are
    /// none.
    pub(super) fn wrap(inner: Arc<dyn Channel>, worker: u32, faults: &[Fault]) -> Arc<dyn Channel> {
        let faults: Vec<Fault> = faults
            .iter()
            .copied()
            .filter(|fault| match *fault {
                Fault::DropMessage { worker: w, .. } | Fault::DelayMessage { worker: w, .. } => {
                    w == worker
                }
                Fault::KillWorker { .. }
                | Fault::KillSupervisor { .. }
                | Fault::ExceedMemory { .. }
                | Fault::Pause { .. } => false,
            })
            .collect();
        if faults.is_empty() {
            return inner;
        }
        Arc::new(Self {
            inner,
            worker,
            faults,
        })
    }

    /// What happens to this worker's own message of `step`.
    fn fault(&self, step: u64) -> Option<PublishFault> {
        self.faults.iter().find_map(|fault| match *fault {
            Fault::DropMessage { step: at, .. } if at == step => Some(PublishFault::Drop),
            Fault::DelayMessage { step: at, ms, .. } if at == step => {
                Some(PublishFault::Delay(Duration::from_millis(ms)))
            }
            _ => None,
        })
    }
}

#[async_trait::async_trait]
impl Channel for FaultyChannel {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<(), ChannelError> {
        let MessageId { topic, step, .. } = id;
        // Cancel safety: dropped during a delay, the message is not published, as if dropped.
        let own = topic == UPDATES || topic == SCATTER;
        match self.fault(step).filter(|_| own) {
            Some(PublishFault::Drop) => {
                tracing::error!(
                    worker = self.worker,
                    step,
                    "fault injection: dropping a message"
                );
                Ok(())
            }
            Some(PublishFault::Delay(delay)) => {
                tracing::warn!(worker = self.worker, step, ?delay, "fault injection: delay");
                tokio::time::sleep(delay).await;
                self.inner.publish(id, payload).await
            }
            None => self.inner.publish(id, payload).await,
        }
    }

    async fn collect(
        &self,
        messages: StepMessages<'_>,
        timeout: Duration,
    ) -> Result<Vec<Bytes>, ChannelError> {
        self.inner.collect(messages, timeout).await
    }

    async fn publish_and_average(
        &self,
        exchange: StepExchange<'_>,
        share: Share,
    ) -> Result<Averaged, ChannelError> {
        // Cancel safety: as `publish`.
        let StepExchange { topic, step, .. } = exchange;
        match self.fault(step).filter(|_| topic == MEANS) {
            Some(PublishFault::Drop) => {
                tracing::error!(
                    worker = self.worker,
                    step,
                    "fault injection: dropping a share"
                );
                // Waits for the peers' shares as the average would, its own never arriving.
                self.inner
                    .collect(exchange.peers_messages(), exchange.timeout)
                    .await?;
            }
            Some(PublishFault::Delay(delay)) => {
                tracing::warn!(worker = self.worker, step, ?delay, "fault injection: delay");
                tokio::time::sleep(delay).await;
            }
            None => {}
        }
        self.inner.publish_and_average(exchange, share).await
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>, ChannelError> {
        self.inner.poll(messages).await
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<(), ChannelError> {
        self.inner.discard(messages).await
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<(), ChannelError> {
        self.inner.put_key(key, value).await
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>, ChannelError> {
        self.inner.get_key(key).await
    }

    async fn cleanup(&self) -> Result<(), ChannelError> {
        self.inner.cleanup().await
    }

    fn describe(&self) -> String {
        format!("{} (with injected faults)", self.inner.describe())
    }

    async fn explain_missing(&self) -> Result<Option<String>, ChannelError> {
        self.inner.explain_missing().await
    }
}

#[cfg(test)]
mod tests {
    use mlless_store::{ObjectStoreChannel, Store};

    use super::*;
    use crate::messages::STATS;

    #[tokio::test]
    async fn only_the_faulted_steps_own_messages_are_dropped_or_delayed() {
        let store = Store::open("memory://faulty-channel").expect("memory store");
        let inner: Arc<dyn Channel> =
            Arc::new(ObjectStoreChannel::new(store, "job").expect("channel"));
        let faults = [
            Fault::DropMessage { worker: 1, step: 3 },
            Fault::DelayMessage {
                worker: 1,
                step: 4,
                ms: 50,
            },
            Fault::DropMessage { worker: 2, step: 5 },
            Fault::KillWorker { worker: 1, step: 9 },
        ];
        let channel = FaultyChannel::wrap(inner.clone(), 1, &faults);
        let payload = || Bytes::from_static(b"m");
        channel
            .publish(MessageId::new(UPDATES, 3, 1), payload())
            .await
            .unwrap();
        channel
            .publish(MessageId::new(SCATTER, 3, 7), payload())
            .await
            .unwrap();
        channel
            .publish(MessageId::new(STATS, 3, 1), payload())
            .await
            .unwrap();
        channel
            .publish(MessageId::new(UPDATES, 5, 1), payload())
            .await
            .unwrap();
        let started = std::time::Instant::now();
        channel
            .publish(MessageId::new(UPDATES, 4, 1), payload())
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(50));
        let found = |topic, step, id| {
            let inner = inner.clone();
            async move {
                inner
                    .poll(StepMessages::new(topic, step, &[id]))
                    .await
                    .unwrap()[0]
                    .is_some()
            }
        };
        assert!(!found(UPDATES, 3, 1).await, "dropped");
        assert!(!found(SCATTER, 3, 7).await, "dropped chunk");
        assert!(found(STATS, 3, 1).await, "statistics pass");
        assert!(found(UPDATES, 4, 1).await, "delayed, then published");
        assert!(found(UPDATES, 5, 1).await, "another worker's fault");
        // No message faults for worker 0: the channel itself.
        let plain = FaultyChannel::wrap(inner.clone(), 0, &faults);
        assert!(Arc::ptr_eq(&plain, &inner));
    }
}
