//! Replay: a replacement worker recomputes the steps its predecessor had published and takes
//! their flags, so that it decides as its peers did.

use tracing::debug;

use super::Worker;
use crate::error::Result;
use crate::messages::UpdateMessage;

impl Worker {
    /// While replaying, gives `message` the flags of the message published for its step
    /// before the failure, so that the replacement decides as its peers did; the replay ends
    /// at the first step it had not published.
    pub(super) async fn replay_flags(
        &mut self,
        message: &mut UpdateMessage,
        workers: &[u32],
    ) -> Result<()> {
        if !self.replaying {
            return Ok(());
        }
        match self.exchange(workers).published(message.step).await? {
            Some(before) => {
                message.stop = before.stop;
                message.removal = before.removal;
            }
            None => {
                debug!(worker = self.id, step = message.step, "replay done");
                self.replaying = false;
            }
        }
        Ok(())
    }
}
