//! Each simulated function's clock and bill: its CPU time charged before each request
//! ([`CpuAccount`], [`Metered`]) and the requests and request units a cloud would bill
//! ([`MeteredChannel`]).

use super::*;

/// Waits for `cpu` of one function's CPU time on the simulated clock.
pub(super) async fn sleep_cpu(cpu: Duration) {
    if !cpu.is_zero() {
        tokio::time::sleep(cpu * SLOWDOWN).await;
    }
}

/// The CPU time one task has used and not yet been charged for: the real time of its polls
/// (every task runs on the one thread, so a poll's time is its own).
#[derive(Debug, Default)]
pub(super) struct CpuAccount {
    pub(super) state: Mutex<CpuState>,
}

#[derive(Debug, Default)]
pub(super) struct CpuState {
    /// Used and not yet charged.
    pub(super) owed: Duration,
    /// When the poll under way began (or was last charged).
    pub(super) since: Option<Instant>,
}

impl CpuAccount {
    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, CpuState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn begin_poll(&self) {
        self.state().since = Some(Instant::now());
    }

    pub(super) fn end_poll(&self) {
        let mut state = self.state();
        if let Some(since) = state.since.take() {
            state.owed += since.elapsed();
        }
    }

    /// What is owed up to now, which is then settled.
    pub(super) fn take(&self) -> Duration {
        let mut state = self.state();
        let now = Instant::now();
        let mut owed = std::mem::take(&mut state.owed);
        if let Some(since) = state.since.as_mut() {
            owed += now - *since;
            *since = now;
        }
        owed
    }
}

/// A task's future whose polls are timed into its [`CpuAccount`].
pub(super) struct Metered<F> {
    pub(super) account: Arc<CpuAccount>,
    pub(super) inner: Pin<Box<F>>,
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.account.begin_poll();
        let polled = self.inner.as_mut().poll(cx);
        self.account.end_poll();
        polled
    }
}

/// One worker's handle on the shared channel: charges the worker's CPU time to the simulated
/// clock before each request, and counts the requests an object-store channel would make and
/// the request units DynamoDB would bill (a write unit per started KB published or deleted, a
/// read unit per started 4 KB a collect reads, as `DynamoDbChannel` counts them).
#[derive(Debug)]
pub(super) struct MeteredChannel {
    pub(super) inner: Arc<dyn Channel>,
    pub(super) account: Arc<CpuAccount>,
    /// The fleet's requests, shared by every worker's handle.
    pub(super) requests: RequestCounter,
}

impl MeteredChannel {
    /// Counts `n` requests of `kind` and charges the CPU time owed.
    pub(super) async fn charge(&self, kind: Request, n: u64) {
        self.requests.add(kind, n);
        sleep_cpu(self.account.take()).await;
    }
}

#[async_trait::async_trait]
impl Channel for MeteredChannel {
    async fn publish(
        &self,
        id: MessageId<'_>,
        payload: Bytes,
    ) -> std::result::Result<(), ChannelError> {
        self.requests
            .add(Request::TableWrite, write_units(payload.len()));
        self.charge(Request::Put, 1).await;
        self.inner.publish(id, payload).await
    }

    async fn collect(
        &self,
        messages: StepMessages<'_>,
        timeout: Duration,
    ) -> std::result::Result<Vec<Bytes>, ChannelError> {
        self.charge(Request::Get, messages.from.len() as u64).await;
        let collected = self.inner.collect(messages, timeout).await?;
        let bytes: usize = collected.iter().map(Bytes::len).sum();
        self.requests.add(Request::TableRead, read_units(bytes));
        Ok(collected)
    }

    /// One request to push the share and pull the mean (a request to each server).
    async fn publish_and_average(
        &self,
        exchange: StepExchange<'_>,
        share: Share,
    ) -> std::result::Result<Averaged, ChannelError> {
        self.charge(Request::Put, 1).await;
        let averaged = self.inner.publish_and_average(exchange, share).await?;
        self.requests.add(
            Request::TableWrite,
            write_units(usize::try_from(averaged.bytes_sent).unwrap_or(usize::MAX)),
        );
        self.requests.add(
            Request::TableRead,
            read_units(usize::try_from(averaged.bytes_received).unwrap_or(usize::MAX)),
        );
        self.requests
            .add(Request::Get, u64::from(averaged.messages_received));
        Ok(averaged)
    }

    async fn poll(
        &self,
        messages: StepMessages<'_>,
    ) -> std::result::Result<Vec<Option<Bytes>>, ChannelError> {
        sleep_cpu(self.account.take()).await;
        let found = self.inner.poll(messages).await?;
        let present = found.iter().flatten().count() as u64;
        let bytes: usize = found.iter().flatten().map(Bytes::len).sum();
        self.requests.add(Request::TableRead, read_units(bytes));
        self.requests.add(Request::Get, present);
        self.requests
            .add(Request::Miss, found.len() as u64 - present);
        Ok(found)
    }

    async fn discard(&self, messages: StepMessages<'_>) -> std::result::Result<(), ChannelError> {
        let workers = messages.from.len();
        self.requests.add(Request::TableWrite, workers as u64);
        self.charge(Request::Delete, pages(workers)).await;
        self.inner.discard(messages).await
    }

    async fn put_key(&self, key: &str, value: Bytes) -> std::result::Result<(), ChannelError> {
        self.charge(Request::Put, 1).await;
        self.inner.put_key(key, value).await
    }

    async fn get_key(&self, key: &str) -> std::result::Result<Option<Bytes>, ChannelError> {
        self.charge(Request::Get, 1).await;
        self.inner.get_key(key).await
    }

    async fn cleanup(&self) -> std::result::Result<(), ChannelError> {
        self.inner.cleanup().await
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn explain_missing(&self) -> std::result::Result<Option<String>, ChannelError> {
        self.inner.explain_missing().await
    }
}

/// DynamoDB's write units of writing `bytes`: one per started KB, at least one.
pub(super) fn write_units(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(1024).max(1)
}

/// DynamoDB's read units of a strongly consistent read of `bytes`: one per started 4 KB, at
/// least one.
pub(super) fn read_units(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4096).max(1)
}
