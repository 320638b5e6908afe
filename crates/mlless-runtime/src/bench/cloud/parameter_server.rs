//! The parameter servers of a simulated cloud: the shared in-process channel averaging as they
//! would, so that the server pattern's traffic is theirs.

use std::time::Duration;

use bytes::Bytes;
use mlless_core::WireDelta;
use mlless_store::{Averaged, Channel, ChannelError, MessageId, Share, StepExchange, StepMessages};

use crate::messages::{Message, UpdateMessage};

/// A channel whose [`Channel::publish_and_average`] answers as a parameter server does: one
/// message, the mean and the peers' headers, whatever the fleet. The mean is computed by the
/// channel it wraps (each worker, on the in-process channel: CPU that a server spends once,
/// charged to every worker at once, which is the server's time on the step's critical path).
#[derive(Debug)]
pub(super) struct SimulatedServers<C>(pub(super) C);

#[async_trait::async_trait]
impl<C: Channel> Channel for SimulatedServers<C> {
    async fn publish(&self, id: MessageId<'_>, payload: Bytes) -> Result<(), ChannelError> {
        self.0.publish(id, payload).await
    }

    async fn collect(
        &self,
        messages: StepMessages<'_>,
        timeout: Duration,
    ) -> Result<Vec<Bytes>, ChannelError> {
        self.0.collect(messages, timeout).await
    }

    async fn publish_and_average(
        &self,
        exchange: StepExchange<'_>,
        share: Share,
    ) -> Result<Averaged, ChannelError> {
        let mut averaged = self.0.publish_and_average(exchange, share).await?;
        // What the server sends back: the mean as an update message, and the headers.
        let mean = UpdateMessage {
            step: exchange.step,
            worker: exchange.from,
            loss: Default::default(),
            stop: false,
            last: false,
            applied_through: exchange.step,
            removal: None,
            delta: WireDelta::Sparse(averaged.mean.clone()),
        };
        let headers: usize = averaged.headers.iter().map(Bytes::len).sum();
        averaged.bytes_received = (mean.encode().len() + headers) as u64;
        averaged.messages_received = 1;
        averaged.by_servers = true;
        Ok(averaged)
    }

    async fn poll(&self, messages: StepMessages<'_>) -> Result<Vec<Option<Bytes>>, ChannelError> {
        self.0.poll(messages).await
    }

    async fn discard(&self, messages: StepMessages<'_>) -> Result<(), ChannelError> {
        self.0.discard(messages).await
    }

    async fn put_key(&self, key: &str, value: Bytes) -> Result<(), ChannelError> {
        self.0.put_key(key, value).await
    }

    async fn get_key(&self, key: &str) -> Result<Option<Bytes>, ChannelError> {
        self.0.get_key(key).await
    }

    async fn cleanup(&self) -> Result<(), ChannelError> {
        self.0.cleanup().await
    }

    fn describe(&self) -> String {
        format!("{} (as parameter servers)", self.0.describe())
    }

    async fn explain_missing(&self) -> Result<Option<String>, ChannelError> {
        self.0.explain_missing().await
    }
}
