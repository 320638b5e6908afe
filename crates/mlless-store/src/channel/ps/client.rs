//! The client of one parameter server: its address and secret, a pool of connections that have
//! said hello, and the boot id it first saw.

use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{debug, trace};

use super::wire::{self, Request, Response, WireError};
use crate::channel::ChannelError;
use crate::channel::Result;
use crate::redact::redact_url;

/// Bound on connecting (and the hello).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on one exchange other than a collect's wait.
pub(super) const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response read (a collect of many large messages), against a corrupt length.
const MAX_RESPONSE_BYTES: u64 = 1 << 31;
/// Most idle connections kept per server.
const MAX_IDLE: usize = 16;

/// What went wrong talking to a parameter server: the source of a [`ChannelError::Backend`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PsClientError {
    /// The frame could not be sent or read (an I/O error is a connection failure).
    #[error("{0}")]
    Wire(#[from] WireError),
    /// No answer within the bound.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server refused the request and said why.
    #[error("the server refused: {0}")]
    Refused(String),
    /// The server answered something that is not an answer to the request.
    #[error("unexpected answer {0}")]
    Unexpected(String),
    /// The server's boot id changed: it restarted and lost what it held.
    #[error(
        "the server restarted (boot id {seen:016x}, was {first:016x}) and lost the messages and \
         keys it held: the run cannot go on from an empty server; resume it from its checkpoint"
    )]
    Restarted {
        /// The boot id this client first saw.
        first: u64,
        /// The one it sees now.
        seen: u64,
    },
}

impl PsClientError {
    /// Whether the failure was on the connection (refused, reset, closed, timed out).
    pub fn is_transient(&self) -> bool {
        match self {
            PsClientError::Wire(e) => e.is_transient(),
            PsClientError::Timeout(_) => true,
            PsClientError::Refused(_)
            | PsClientError::Unexpected(_)
            | PsClientError::Restarted { .. } => false,
        }
    }
}

/// The bytes of one request's frame and of its answer's.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FrameBytes {
    /// Sent.
    pub(super) sent: u64,
    /// Received.
    pub(super) received: u64,
}

/// One server of a `ps://` channel.
#[derive(Debug)]
pub(super) struct Server {
    /// `ps://host:port`, without the secret.
    pub(super) endpoint: String,
    /// `host:port` as written.
    authority: String,
    addr: SocketAddr,
    secret: String,
    job: String,
    /// The boot id seen when the channel was opened.
    boot_id: u64,
    /// The largest request the server reads.
    max_frame_bytes: u64,
    idle: Mutex<Vec<TcpStream>>,
}

impl Server {
    /// Connects to the server at `authority` with `secret` for `job`: resolves it, says hello,
    /// notes its boot id. A server that cannot be reached or refuses is
    /// [`ChannelError::InvalidUrl`] naming it (`url` redacted).
    pub(super) async fn connect(
        url: &str,
        authority: &str,
        secret: &str,
        job: &str,
    ) -> Result<Server> {
        let invalid = |reason: String| ChannelError::InvalidUrl {
            url: redact_url(url),
            reason,
        };
        let addr = tokio::net::lookup_host(authority)
            .await
            .map_err(|e| invalid(format!("cannot resolve {authority}: {e}")))?
            .next()
            .ok_or_else(|| invalid(format!("{authority} has no address")))?;
        let mut server = Server {
            endpoint: format!("ps://{authority}"),
            authority: authority.to_string(),
            addr,
            secret: secret.to_string(),
            job: job.to_string(),
            boot_id: 0,
            max_frame_bytes: 0,
            idle: Mutex::default(),
        };
        let (stream, welcome) = server.open().await.map_err(|e| {
            invalid(format!(
                "cannot connect to the parameter server at {authority}: {e}"
            ))
        })?;
        (server.boot_id, server.max_frame_bytes) = welcome;
        server.put_back(stream);
        Ok(server)
    }

    /// The same server for another job: a new pool, the same boot id.
    pub(super) fn for_job(&self, job: &str) -> Server {
        Server {
            endpoint: self.endpoint.clone(),
            authority: self.authority.clone(),
            addr: self.addr,
            secret: self.secret.clone(),
            job: job.to_string(),
            boot_id: self.boot_id,
            max_frame_bytes: self.max_frame_bytes,
            idle: Mutex::default(),
        }
    }

    /// A new connection, past its hello: the stream, the server's boot id and its largest
    /// request.
    async fn open(&self) -> Result<(TcpStream, (u64, u64)), PsClientError> {
        trace!(server = %self.endpoint, "connecting");
        let hello = async {
            let mut stream = TcpStream::connect(self.addr).await.map_err(WireError::Io)?;
            let _ = stream.set_nodelay(true);
            let hello = Request::Hello {
                secret: self.secret.clone(),
                job: self.job.clone(),
            };
            wire::write_frame(&mut stream, &hello).await?;
            match wire::read_frame(&mut stream, MAX_RESPONSE_BYTES).await? {
                Response::Welcome {
                    boot_id,
                    max_frame_bytes,
                } => Ok((stream, (boot_id, max_frame_bytes))),
                Response::Refused(reason) => Err(PsClientError::Refused(reason)),
                other => Err(unexpected(&other)),
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT, hello)
            .await
            .map_err(|_| PsClientError::Timeout(CONNECT_TIMEOUT))?
    }

    /// An idle connection, or a new one whose server must be the one first seen.
    async fn connection(&self) -> Result<TcpStream, PsClientError> {
        if let Some(stream) = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            return Ok(stream);
        }
        let (stream, (boot_id, _)) = self.open().await?;
        if boot_id != self.boot_id {
            return Err(PsClientError::Restarted {
                first: self.boot_id,
                seen: boot_id,
            });
        }
        Ok(stream)
    }

    fn put_back(&self, stream: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push(stream);
        }
    }

    /// Sends `request` and reads its answer within `wait` plus [`OP_TIMEOUT`]. A refusal is
    /// [`PsClientError::Refused`]. A connection whose exchange failed, timed out or was
    /// cancelled is dropped, never reused.
    ///
    /// # Cancel safety
    ///
    /// The request may or may not have been carried out when the future is dropped; its
    /// connection is dropped with it.
    pub(super) async fn call(
        &self,
        request: &Request,
        wait: Duration,
    ) -> Result<Response, PsClientError> {
        self.call_counted(request, wait)
            .await
            .map(|(response, _)| response)
    }

    /// [`call`](Self::call), with the bytes of the frames sent and received.
    ///
    /// # Cancel safety
    ///
    /// As [`call`](Self::call).
    pub(super) async fn call_counted(
        &self,
        request: &Request,
        wait: Duration,
    ) -> Result<(Response, FrameBytes), PsClientError> {
        let bound = wait.saturating_add(OP_TIMEOUT);
        let frame = wire::encode(request)?;
        let len = (frame.len() - wire::HEADER_LEN) as u64;
        if len > self.max_frame_bytes {
            return Err(PsClientError::Refused(format!(
                "a request of {len} bytes is over the server's limit of {} bytes \
                 (mlless ps --max-frame-bytes)",
                self.max_frame_bytes
            )));
        }
        let mut stream = self.connection().await?;
        let exchange = async {
            stream.write_all(&frame).await.map_err(WireError::Io)?;
            match wire::read_header(&mut stream, MAX_RESPONSE_BYTES).await? {
                Some((len, crc)) => wire::read_body::<_, Response>(&mut stream, len, crc)
                    .await
                    .map(|response| (response, len)),
                None => Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into())),
            }
        };
        let (response, received) = tokio::time::timeout(bound, exchange)
            .await
            .map_err(|_| PsClientError::Timeout(bound))??;
        self.put_back(stream);
        match response {
            Response::Refused(reason) => {
                debug!(server = %self.endpoint, %reason, "request refused");
                Err(PsClientError::Refused(reason))
            }
            response => Ok((
                response,
                FrameBytes {
                    sent: frame.len() as u64,
                    received: (received + wire::HEADER_LEN) as u64,
                },
            )),
        }
    }

    /// The [`ChannelError::Backend`] of a failed `operation`.
    pub(super) fn error(&self, operation: String, error: PsClientError) -> ChannelError {
        ChannelError::Backend {
            endpoint: self.endpoint.clone(),
            operation,
            transient: error.is_transient(),
            source: Box::new(error),
        }
    }
}

/// The error for an answer that does not fit its request.
pub(super) fn unexpected(response: &Response) -> PsClientError {
    let name = match response {
        Response::Welcome { .. } => "welcome",
        Response::Done => "done",
        Response::Messages(_) => "messages",
        Response::Mean { .. } => "mean",
        Response::TimedOut { .. } => "timed out",
        Response::Polled(_) => "polled",
        Response::Key(_) => "key",
        Response::Refused(_) => "refused",
    };
    PsClientError::Unexpected(name.to_string())
}
