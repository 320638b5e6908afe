//! [`PsServer`]: the parameter server `mlless ps` runs, holding every job's messages and keys in
//! memory.
//!
//! Each job's data is apart from every other's: a connection says its job once
//! ([`Request::Hello`]) and every later request reads and writes that job's map only. The server
//! has no global lock on the data path: the map of jobs is only locked to find a job, a job's map
//! of steps only to find a (topic, step) entry, and each entry has a lock and a wake-up of its
//! own, so pushes to different steps never wait for each other and pushes to one step wait only
//! for a map insert. A collect waits on its entry's wake-up, never polls.
//!
//! Safe to leave running: it refuses clients without its secret (compared in constant time),
//! reads at most [`PsLimits::max_frame_bytes`] per frame (a small fixed amount before the
//! secret), holds at most [`PsLimits::max_job_bytes`] for a job and [`PsLimits::max_total_bytes`]
//! in all (frames being read included) and refuses what would exceed them; a malformed or
//! truncated frame drops its connection and nothing else.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use super::means::{self, Averaging, MeanEntry};
use super::wire::{self, Request, Response, WireError};
use crate::channel::WorkerId;

/// Largest frame read before a connection has given the secret (a [`Request::Hello`]).
const MAX_HELLO_BYTES: u64 = 4 << 10;
/// How long a new connection has to give the secret.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest job id, topic or key accepted.
pub const MAX_NAME_BYTES: usize = 256;
/// What a stored message or key costs on top of its bytes, for the limits (map entries, name).
const ENTRY_OVERHEAD: u64 = 64;
/// Longest collect the server waits for (a longer timeout is cut to this).
const MAX_COLLECT_WAIT: Duration = Duration::from_secs(24 * 3600);

/// What a client may make the server allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsLimits {
    /// Largest frame (request) read, in bytes; a larger one is refused and its connection closed.
    pub max_frame_bytes: u64,
    /// Most bytes held for one job (its messages and keys).
    pub max_job_bytes: u64,
    /// Most bytes held in all: every job's data and the frames being read.
    pub max_total_bytes: u64,
    /// Most connections open at once; more wait to be accepted.
    pub max_connections: usize,
}

impl Default for PsLimits {
    /// 256 MiB a frame, 2 GiB a job, 4 GiB in all, 1024 connections.
    fn default() -> Self {
        PsLimits {
            max_frame_bytes: 256 << 20,
            max_job_bytes: 2 << 30,
            max_total_bytes: 4 << 30,
            max_connections: 1024,
        }
    }
}

/// Errors of the server itself (not of a client's request, which it refuses in its answer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PsServerError {
    /// The listening address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The secret is not usable in a `ps://:SECRET@host:port` URL.
    #[error(
        "the parameter server's secret (MLLESS_PS_SECRET) must be 8 to 256 characters among letters, digits, '-', \
         '_' and '.' (it goes in ps://:SECRET@host:port)"
    )]
    BadSecret,
    /// Accepting connections failed.
    #[error("accepting connections on {addr} failed: {source}")]
    Accept {
        /// The listening address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// Whether `secret` can be given in a `ps://:SECRET@host:port` URL as it is.
pub fn is_valid_secret(secret: &str) -> bool {
    (8..=256).contains(&secret.len())
        && secret
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A random secret of 32 hex digits (128 bits), for a server started without one.
pub fn random_secret() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}

/// A count of bytes held against a limit.
#[derive(Debug)]
struct Budget {
    used: AtomicU64,
    limit: u64,
}

impl Budget {
    fn new(limit: u64) -> Budget {
        Budget {
            used: AtomicU64::new(0),
            limit,
        }
    }

    /// Takes `n` bytes if they fit under the limit.
    fn try_take(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes.
    fn give(&self, n: u64) {
        // Never below zero, even if a bug gave back more than it took.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(n))
            });
    }

    fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The messages of one (topic, step), and the wake-up of the collects waiting for them.
#[derive(Debug, Default)]
struct StepEntry {
    messages: Mutex<HashMap<WorkerId, Bytes>>,
    landed: Notify,
}

/// One job's data; its bytes are given back to the server's budget when it is dropped.
#[derive(Debug)]
pub(super) struct Job {
    steps: Mutex<HashMap<(String, u64), Arc<StepEntry>>>,
    /// The parts and means of [`Request::Average`], by (topic, step).
    pub(super) means: Mutex<HashMap<(String, u64), Arc<MeanEntry>>>,
    keys: Mutex<HashMap<String, Bytes>>,
    budget: Budget,
    total: Arc<Budget>,
}

impl Drop for Job {
    fn drop(&mut self) {
        self.total.give(self.budget.used());
    }
}

/// What a message or key of `len` bytes under `name` costs against the limits.
pub(super) fn cost(name: &str, len: usize) -> u64 {
    ENTRY_OVERHEAD + name.len() as u64 + len as u64
}

impl Job {
    /// Takes `n` bytes from the job's and the server's budgets, or says which is full.
    pub(super) fn take(&self, n: u64, job: &str) -> Result<(), String> {
        if !self.budget.try_take(n) {
            return Err(format!(
                "job {job:?} would hold more than its limit of {} bytes (--max-job-bytes)",
                self.budget.limit
            ));
        }
        if !self.total.try_take(n) {
            self.budget.give(n);
            return Err(format!(
                "the server would hold more than its limit of {} bytes (--max-total-bytes)",
                self.total.limit
            ));
        }
        Ok(())
    }

    /// Gives `n` bytes back to the job's and the server's budgets.
    pub(super) fn give(&self, n: u64) {
        self.budget.give(n);
        self.total.give(n);
    }

    /// The entry of (topic, step), made if absent.
    fn entry(&self, topic: &str, step: u64) -> Arc<StepEntry> {
        lock(&self.steps)
            .entry((topic.to_string(), step))
            .or_default()
            .clone()
    }

    /// The entry of (topic, step), if present.
    fn existing(&self, topic: &str, step: u64) -> Option<Arc<StepEntry>> {
        lock(&self.steps).get(&(topic.to_string(), step)).cloned()
    }

    /// The messages of (topic, step) from `from`, `None` where absent.
    pub(super) fn messages_of(
        &self,
        topic: &str,
        step: u64,
        from: &[WorkerId],
    ) -> Vec<Option<Bytes>> {
        match self.existing(topic, step) {
            Some(entry) => {
                let messages = lock(&entry.messages);
                from.iter().map(|w| messages.get(w).cloned()).collect()
            }
            None => vec![None; from.len()],
        }
    }

    /// Forgets the entry of (topic, step) if it holds no message and nobody else holds it.
    fn prune(&self, topic: &str, step: u64, entry: Arc<StepEntry>) {
        let mut steps = lock(&self.steps);
        // Ours and the map's: no collect waits on it.
        if Arc::strong_count(&entry) == 2 && lock(&entry.messages).is_empty() {
            steps.remove(&(topic.to_string(), step));
        }
    }
}

/// What every connection shares.
#[derive(Debug)]
struct Shared {
    secret: String,
    boot_id: u64,
    limits: PsLimits,
    total: Arc<Budget>,
    jobs: RwLock<HashMap<String, Arc<Job>>>,
}

impl Shared {
    /// The job's data, made if absent.
    fn job(&self, name: &str) -> Arc<Job> {
        if let Some(job) = self
            .jobs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
        {
            return job.clone();
        }
        self.jobs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_string())
            .or_insert_with(|| {
                Arc::new(Job {
                    steps: Mutex::default(),
                    means: Mutex::default(),
                    keys: Mutex::default(),
                    budget: Budget::new(self.limits.max_job_bytes),
                    total: self.total.clone(),
                })
            })
            .clone()
    }

    /// The job's data, if it has any: what a request that only reads or removes looks at, so
    /// that it makes no job.
    fn existing_job(&self, name: &str) -> Option<Arc<Job>> {
        self.jobs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Forgets a job (its bytes go back when the last request using it ends).
    fn forget(&self, name: &str) {
        self.jobs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// Compares two secrets in time that does not depend on where they differ.
fn same_secret(given: &str, expected: &str) -> bool {
    let (given, expected) = (given.as_bytes(), expected.as_bytes());
    let mut differ = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        differ |= e ^ given.get(i).copied().unwrap_or(!e);
    }
    differ == 0
}

/// The parameter server, bound and ready to [`serve`](Self::serve).
#[derive(Debug)]
pub struct PsServer {
    listener: TcpListener,
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl PsServer {
    /// Binds `addr` (`host:port`; port 0 picks a free one) with `secret` (see
    /// [`is_valid_secret`]) and `limits`. A new boot id is drawn at random.
    pub async fn bind(
        addr: &str,
        secret: &str,
        limits: PsLimits,
    ) -> Result<PsServer, PsServerError> {
        if !is_valid_secret(secret) {
            return Err(PsServerError::BadSecret);
        }
        let bind_error = |source| PsServerError::Bind {
            addr: addr.to_string(),
            source,
        };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local = listener.local_addr().map_err(bind_error)?;
        Ok(PsServer {
            listener,
            addr: local,
            shared: Arc::new(Shared {
                secret: secret.to_string(),
                boot_id: rand::random(),
                limits,
                total: Arc::new(Budget::new(limits.max_total_bytes)),
                jobs: RwLock::default(),
            }),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its boot id (what clients compare to tell a restarted server).
    pub fn boot_id(&self) -> u64 {
        self.shared.boot_id
    }

    /// Accepts and serves connections until accepting fails. Dropping the future (or aborting
    /// its task) stops the server: every connection is closed and its data is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancelling it is how the server is stopped: nothing is left behind.
    pub async fn serve(self) -> Result<(), PsServerError> {
        let PsServer {
            listener,
            addr,
            shared,
        } = self;
        info!(%addr, boot_id = shared.boot_id, "parameter server listening");
        let permits = Arc::new(tokio::sync::Semaphore::new(shared.limits.max_connections));
        let mut connections = JoinSet::new();
        loop {
            let permit = tokio::select! {
                permit = permits.clone().acquire_owned() => permit,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            let Ok(permit) = permit else {
                return Ok(());
            };
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(source) if is_per_connection(&source) => {
                        debug!(%addr, error = %source, "a connection failed before it was accepted");
                        continue;
                    }
                    Err(source) => return Err(PsServerError::Accept { addr, source }),
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            let shared = shared.clone();
            connections.spawn(async move {
                let _permit = permit;
                if let Err(error) = serve_connection(stream, &shared).await {
                    debug!(%peer, %error, "connection dropped");
                }
            });
        }
    }
}

/// Whether an `accept` error is about one connection (reset before it was accepted, out of file
/// descriptors for a moment) rather than the listener.
fn is_per_connection(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted
    ) || error.raw_os_error().is_some_and(|e| e == 24 || e == 23)
}

/// Why a connection ended other than by its client closing it between frames.
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("no hello within {HELLO_TIMEOUT:?}")]
    HelloTimeout,
    #[error("refused: {0}")]
    Refused(String),
    #[error("the client closed the connection or sent bytes while its collect was waiting")]
    LeftDuringCollect,
}

/// Serves one connection: the hello, then requests one at a time until the client closes it or
/// sends something malformed.
async fn serve_connection(mut stream: TcpStream, shared: &Shared) -> Result<(), ConnectionError> {
    let _ = stream.set_nodelay(true);
    let hello = tokio::time::timeout(
        HELLO_TIMEOUT,
        wire::read_frame::<_, Request>(&mut stream, MAX_HELLO_BYTES),
    )
    .await
    .map_err(|_| ConnectionError::HelloTimeout)??;
    let job = match hello {
        Request::Hello { secret, job } if same_secret(&secret, &shared.secret) => {
            if let Err(reason) = check_name("job id", &job) {
                wire::write_frame(&mut stream, &Response::Refused(reason.clone())).await?;
                return Err(ConnectionError::Refused(reason));
            }
            job
        }
        Request::Hello { .. } => {
            let reason = "wrong secret".to_string();
            warn!(peer = ?stream.peer_addr().ok(), "refused a client: wrong secret");
            wire::write_frame(&mut stream, &Response::Refused(reason.clone())).await?;
            return Err(ConnectionError::Refused(reason));
        }
        _ => {
            let reason = "the first request must be a hello with the secret".to_string();
            wire::write_frame(&mut stream, &Response::Refused(reason.clone())).await?;
            return Err(ConnectionError::Refused(reason));
        }
    };
    wire::write_frame(
        &mut stream,
        &Response::Welcome {
            boot_id: shared.boot_id,
            max_frame_bytes: shared.limits.max_frame_bytes,
        },
    )
    .await?;
    loop {
        let (len, crc) = match wire::read_header(&mut stream, shared.limits.max_frame_bytes).await {
            Ok(Some(header)) => header,
            Ok(None) => return Ok(()),
            Err(WireError::TooLarge { len, limit }) => {
                warn!(job, len, limit, "refused a frame over --max-frame-bytes");
                let reason = format!(
                    "a frame of {len} bytes is over the server's limit of {limit} bytes \
                     (--max-frame-bytes)"
                );
                // Its body is not read: the connection is closed after the refusal.
                wire::write_frame(&mut stream, &Response::Refused(reason.clone())).await?;
                return Err(ConnectionError::Refused(reason));
            }
            Err(error) => return Err(error.into()),
        };
        // The frame being read counts against the server's total until it is handled.
        let reading = len as u64;
        if !shared.total.try_take(reading) {
            let reason = format!(
                "a frame of {len} bytes would take the server over its limit of {} bytes \
                 (--max-total-bytes)",
                shared.total.limit
            );
            // Its body is not read: the connection is closed after the refusal.
            wire::write_frame(&mut stream, &Response::Refused(reason.clone())).await?;
            return Err(ConnectionError::Refused(reason));
        }
        let request = wire::read_body::<_, Request>(&mut stream, len, crc).await;
        shared.total.give(reading);
        let request = request?;
        let response = match request {
            Request::Collect {
                topic,
                step,
                from,
                timeout_ms,
            } => {
                let job_data = shared.job(&job);
                let wait = Duration::from_millis(timeout_ms).min(MAX_COLLECT_WAIT);
                let mut probe = [0u8; 1];
                // A client that goes away stops its collect's wait.
                tokio::select! {
                    response = collect(&job_data, &topic, step, &from, wait) => response,
                    _ = stream.read(&mut probe) => {
                        return Err(ConnectionError::LeftDuringCollect);
                    }
                }
            }
            Request::Average {
                topic,
                step,
                from,
                header,
                part,
                range,
                peers,
                timeout_ms,
            } => {
                let job_data = shared.job(&job);
                if let Some(header) = header
                    && let Err(reason) = store_message(&job_data, &job, &topic, step, from, header)
                {
                    Response::Refused(reason)
                } else {
                    let averaging = Averaging {
                        job_name: &job,
                        topic: &topic,
                        step,
                        from,
                        range,
                        peers: &peers,
                    };
                    let wait = Duration::from_millis(timeout_ms).min(MAX_COLLECT_WAIT);
                    let mut probe = [0u8; 1];
                    // A client that goes away stops its wait.
                    tokio::select! {
                        response = means::average(&job_data, averaging, part, wait) => response,
                        _ = stream.read(&mut probe) => {
                            return Err(ConnectionError::LeftDuringCollect);
                        }
                    }
                }
            }
            request => handle(shared, &job, request),
        };
        wire::write_frame(&mut stream, &response).await?;
    }
}

/// Checks a job id, topic or key: not empty and at most [`MAX_NAME_BYTES`].
pub(super) fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("empty {what}"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!("{what} longer than {MAX_NAME_BYTES} bytes"));
    }
    Ok(())
}

/// Answers every request but the hello and collect.
fn handle(shared: &Shared, job_name: &str, request: Request) -> Response {
    let refuse = Response::Refused;
    match request {
        Request::Hello { .. } => refuse("hello twice on one connection".into()),
        Request::Collect { .. } | Request::Average { .. } => {
            refuse("collect and average are served apart".into())
        }
        Request::Publish {
            topic,
            step,
            from,
            payload,
        } => {
            if let Err(reason) = check_name("topic", &topic) {
                return refuse(reason);
            }
            let job = shared.job(job_name);
            match store_message(&job, job_name, &topic, step, from, payload) {
                Ok(()) => Response::Done,
                Err(reason) => refuse(reason),
            }
        }
        Request::Poll { topic, step, from } => {
            let entry = shared
                .existing_job(job_name)
                .and_then(|job| job.existing(&topic, step));
            let Some(entry) = entry else {
                return Response::Polled(vec![None; from.len()]);
            };
            let messages = lock(&entry.messages);
            Response::Polled(from.iter().map(|w| messages.get(w).cloned()).collect())
        }
        Request::Discard { topic, step, from } => {
            let Some(job) = shared.existing_job(job_name) else {
                return Response::Done;
            };
            if let Some(entry) = job.existing(&topic, step) {
                let freed: u64 = {
                    let mut messages = lock(&entry.messages);
                    from.iter()
                        .filter_map(|w| messages.remove(w))
                        .map(|m| cost(&topic, m.len()))
                        .sum()
                };
                job.give(freed);
                job.prune(&topic, step, entry);
            }
            means::discard(&job, &topic, step, &from);
            Response::Done
        }
        Request::PutKey { key, value } => {
            if let Err(reason) = check_name("key", &key) {
                return refuse(reason);
            }
            let job = shared.job(job_name);
            let n = cost(&key, value.len());
            if let Err(reason) = job.take(n, job_name) {
                return refuse(reason);
            }
            if let Some(old) = lock(&job.keys).insert(key.clone(), value) {
                job.give(cost(&key, old.len()));
            }
            Response::Done
        }
        Request::GetKey { key } => Response::Key(
            shared
                .existing_job(job_name)
                .and_then(|job| lock(&job.keys).get(&key).cloned()),
        ),
        Request::Cleanup => {
            shared.forget(job_name);
            Response::Done
        }
    }
}

/// Stores worker `from`'s message of (topic, step) unless it has one (idempotent), waking the
/// collects of the step; a refusal says which limit it would exceed.
fn store_message(
    job: &Job,
    job_name: &str,
    topic: &str,
    step: u64,
    from: WorkerId,
    payload: Bytes,
) -> Result<(), String> {
    check_name("topic", topic)?;
    let entry = job.entry(topic, step);
    let n = cost(topic, payload.len());
    let stored = {
        let mut messages = lock(&entry.messages);
        match messages.entry(from) {
            // Idempotent: the first message stays.
            Entry::Occupied(_) => Ok(false),
            Entry::Vacant(vacant) => job.take(n, job_name).map(|()| {
                vacant.insert(payload);
                true
            }),
        }
    };
    match stored {
        Ok(true) => {
            entry.landed.notify_waiters();
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(reason) => {
            job.prune(topic, step, entry);
            Err(reason)
        }
    }
}

/// Waits until the messages of (topic, step) from every worker of `from` are present, or `wait`
/// passes; woken by each publish to the step, never polling.
async fn collect(job: &Job, topic: &str, step: u64, from: &[WorkerId], wait: Duration) -> Response {
    if from.is_empty() {
        return Response::Messages(Vec::new());
    }
    let deadline = tokio::time::Instant::now() + wait;
    let entry = job.entry(topic, step);
    let found = wait_for(&entry.landed, deadline, || {
        let messages = lock(&entry.messages);
        from.iter().map(|w| messages.get(w).cloned()).collect()
    })
    .await;
    let response = match found {
        Some(messages) => Response::Messages(messages),
        None => {
            let messages = lock(&entry.messages);
            let present = from.iter().map(|w| messages.contains_key(w)).collect();
            Response::TimedOut { present }
        }
    };
    job.prune(topic, step, entry);
    response
}

/// Asks `look` until it finds what is waited for or `deadline` passes (`None`), woken by
/// `landed` after each look that found nothing, never polling.
pub(super) async fn wait_for<T>(
    landed: &Notify,
    deadline: tokio::time::Instant,
    mut look: impl FnMut() -> Option<T>,
) -> Option<T> {
    loop {
        let notified = landed.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered before the look, so that a landing after it wakes the wait.
        notified.as_mut().enable();
        if let Some(found) = look() {
            return Some(found);
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare() {
        assert!(same_secret("abcdefgh", "abcdefgh"));
        assert!(!same_secret("abcdefgx", "abcdefgh"));
        assert!(!same_secret("abcdefg", "abcdefgh"));
        assert!(!same_secret("abcdefghi", "abcdefgh"));
        assert!(!same_secret("", "abcdefgh"));
        assert!(is_valid_secret(&random_secret()));
        assert!(!is_valid_secret("short"));
        assert!(!is_valid_secret("has@an-at-sign"));
    }

    #[test]
    fn budgets_refuse_past_their_limit() {
        let total = Arc::new(Budget::new(300));
        let job = Job {
            steps: Mutex::default(),
            means: Mutex::default(),
            keys: Mutex::default(),
            budget: Budget::new(200),
            total: total.clone(),
        };
        job.take(150, "j").expect("fits");
        let refused = job.take(100, "j").expect_err("over the job's limit");
        assert!(refused.contains("--max-job-bytes"), "{refused}");
        assert!(total.try_take(120));
        let refused = job.take(50, "j").expect_err("over the total");
        assert!(refused.contains("--max-total-bytes"), "{refused}");
        drop(job);
        assert_eq!(total.used(), 120, "a dropped job gives its bytes back");
    }
}
