//! The text-protocol client: a small pool of connections to one Memcached server, bounded
//! timeouts on every exchange, pipelined commands.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::sync::Semaphore;
use tracing::{debug, trace};

use super::url::Settings;

/// Most connections one channel (and the channels of other jobs made from it) opens at once.
pub(super) const MAX_CONNECTIONS: usize = 8;
/// Longest reply line accepted (a `VALUE` line has a key of at most 250 bytes).
const MAX_LINE: usize = 8 << 10;
/// Largest value accepted in a reply, against a corrupt length.
const MAX_VALUE: usize = 1 << 30;

/// What went wrong talking to Memcached: the source of the
/// [`ChannelError`](crate::ChannelError)s of a [`MemcachedChannel`](super::MemcachedChannel)
/// (wrapped in [`ChannelError::Backend`](crate::ChannelError::Backend), which names the server
/// and the item).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemcachedError {
    /// The connection failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The server closed the connection in the middle of a reply.
    #[error("the server closed the connection")]
    Closed,
    /// No reply within the operation timeout.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The server's reply could not be understood.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server refused a command (`SERVER_ERROR`, `CLIENT_ERROR`, `ERROR`, …).
    #[error("server replied {0:?}{hint}", hint = server_hint(.0))]
    Server(String),
    /// A chunked value does not match its manifest (length or CRC-32).
    #[error("corrupt value: {0}")]
    Corrupt(String),
}

/// What to do about a refusal, where the reply tells: a server out of memory is too small for
/// the job.
fn server_hint(reply: &str) -> &'static str {
    if reply.contains("out of memory") {
        " (memcached is full: give it more memory, memcached -m MB, or use Redis)"
    } else {
        ""
    }
}

impl MemcachedError {
    /// Whether the exchange failed on the connection (an I/O error, a connection the server
    /// closed, no reply in time), so that another attempt may succeed once the server is back;
    /// not a refused command, an unreadable reply or a corrupt value.
    pub fn is_transient(&self) -> bool {
        match self {
            MemcachedError::Io(_) | MemcachedError::Closed | MemcachedError::Timeout(_) => true,
            MemcachedError::Protocol(_)
            | MemcachedError::Server(_)
            | MemcachedError::Corrupt(_) => false,
        }
    }
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Resolves the host and connects to the first address that accepts.
pub(super) async fn open_first(settings: &Settings) -> Result<(SocketAddr, Conn), String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((settings.host.as_str(), settings.port))
        .await
        .map_err(|e| format!("cannot resolve {}: {e}", settings.authority))?
        .collect();
    let mut errors = Vec::new();
    for addr in addrs {
        match Conn::open(addr).await {
            Ok(conn) => return Ok((addr, conn)),
            Err(e) => errors.push(format!("{addr}: {e}")),
        }
    }
    Err(format!(
        "cannot connect to memcached at {} ({})",
        settings.authority,
        if errors.is_empty() {
            "no address".to_string()
        } else {
            errors.join("; ")
        }
    ))
}

/// A command of the text protocol.
#[derive(Debug)]
pub(super) enum Cmd {
    Get(Vec<String>),
    Store {
        op: StoreOp,
        key: String,
        flags: u32,
        ttl: u32,
        data: Bytes,
    },
    Delete(String),
    Touch(String, u32),
    StatsSettings,
    /// `stats`: the server's counters (`evictions`, …).
    Stats,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum StoreOp {
    Set,
    Add,
    Append,
}

impl StoreOp {
    pub(super) fn name(self) -> &'static str {
        match self {
            StoreOp::Set => "set",
            StoreOp::Add => "add",
            StoreOp::Append => "append",
        }
    }
}

/// A reply to one command.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reply {
    Values(Vec<Value>),
    Stored,
    NotStored,
    Deleted,
    NotFound,
    Touched,
    Stats(Vec<(String, String)>),
    /// `SERVER_ERROR …`: the server refused this command; the connection is still usable.
    ServerError(String),
}

/// One item of a `get` reply.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Value {
    pub(super) key: String,
    pub(super) flags: u32,
    pub(super) data: Bytes,
}

/// A pool of connections to one server.
pub(super) struct Client {
    pub(super) addr: SocketAddr,
    /// `memcached://host:port`.
    pub(super) endpoint: String,
    pub(super) chunk_size: usize,
    pub(super) connect_timeout: Duration,
    pub(super) op_timeout: Duration,
    pub(super) idle: Mutex<Vec<Conn>>,
    pub(super) permits: Semaphore,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("addr", &self.addr)
            .field("chunk_size", &self.chunk_size)
            .field("op_timeout", &self.op_timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    async fn open(&self) -> Result<Conn, MemcachedError> {
        trace!(channel = %self.endpoint, "opening a connection");
        match tokio::time::timeout(self.connect_timeout, Conn::open(self.addr)).await {
            Ok(conn) => conn,
            Err(_) => Err(MemcachedError::Timeout(self.connect_timeout)),
        }
    }

    /// Sends `cmds` on one connection and reads their replies, all within the operation
    /// timeout. A connection whose exchange failed, timed out, or was cancelled is closed; if it
    /// was a pooled one and `replace_stale`, the commands are sent once more on a new one.
    ///
    /// # Cancel safety
    ///
    /// The commands may have been carried out in part when the future is dropped; the
    /// connection, in an unknown state, is dropped with it (it is out of the pool while in use),
    /// never reused.
    pub(super) async fn exchange(
        &self,
        cmds: &[Cmd],
        replace_stale: bool,
    ) -> Result<Vec<Reply>, MemcachedError> {
        let work = async {
            let _permit = self
                .permits
                .acquire()
                .await
                .map_err(|_| MemcachedError::Protocol("connection pool closed".into()))?;
            let idle = lock(&self.idle).pop();
            let (mut conn, reused) = match idle {
                Some(conn) => (conn, true),
                None => match self.open().await {
                    Ok(conn) => (conn, false),
                    Err(e) => {
                        lock(&self.idle).clear();
                        return Err(e);
                    }
                },
            };
            let replies = match conn.exchange(cmds).await {
                Ok(replies) => replies,
                // A pooled connection the server (or a middlebox) closed while idle: once more
                // on a fresh one. Every command this module sends may be repeated: gets, sets,
                // deletes and touches are idempotent, a repeated `add` finds its own item
                // (publish handles that), and a repeated index line is harmless.
                Err(e @ (MemcachedError::Closed | MemcachedError::Io(_)))
                    if reused && replace_stale =>
                {
                    debug!(channel = %self.endpoint, error = %e, "stale connection; reconnecting");
                    drop(conn);
                    conn = match self.open().await {
                        Ok(conn) => conn,
                        Err(e) => {
                            // The server is away: the other idle connections died with it.
                            lock(&self.idle).clear();
                            return Err(e);
                        }
                    };
                    conn.exchange(cmds).await?
                }
                Err(e) => return Err(e),
            };
            lock(&self.idle).push(conn);
            Ok(replies)
        };
        match tokio::time::timeout(self.op_timeout, work).await {
            Ok(result) => result,
            Err(_) => Err(MemcachedError::Timeout(self.op_timeout)),
        }
    }
}

/// One connection, with the bytes read past the last reply (none between exchanges).
pub(super) struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    pub(super) async fn open(addr: SocketAddr) -> Result<Self, MemcachedError> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(16 << 10),
        })
    }

    /// Writes every command while reading the replies (concurrently, so that a pipeline of
    /// large values cannot fill both sides' socket buffers and deadlock).
    pub(super) async fn exchange(&mut self, cmds: &[Cmd]) -> Result<Vec<Reply>, MemcachedError> {
        let (read_half, mut write_half) = self.stream.split();
        let write = async {
            write_commands(&mut write_half, cmds)
                .await
                .map_err(MemcachedError::Io)
        };
        let mut reader = Reader {
            half: read_half,
            buf: &mut self.buf,
        };
        let read = async {
            let mut replies = Vec::with_capacity(cmds.len());
            for cmd in cmds {
                replies.push(reader.reply(cmd).await?);
            }
            Ok::<_, MemcachedError>(replies)
        };
        let ((), replies) = futures::future::try_join(write, read).await?;
        if !self.buf.is_empty() {
            return Err(MemcachedError::Protocol(format!(
                "{} unexpected bytes after the replies",
                self.buf.len()
            )));
        }
        Ok(replies)
    }
}

async fn write_commands(w: &mut WriteHalf<'_>, cmds: &[Cmd]) -> std::io::Result<()> {
    /// Payloads below this are copied into the staging buffer; larger ones are written as is.
    const COPY_BELOW: usize = 16 << 10;
    let mut staged: Vec<u8> = Vec::with_capacity(1024);
    for cmd in cmds {
        match cmd {
            Cmd::Get(keys) => {
                staged.extend_from_slice(b"get");
                for key in keys {
                    staged.push(b' ');
                    staged.extend_from_slice(key.as_bytes());
                }
                staged.extend_from_slice(b"\r\n");
            }
            Cmd::Store {
                op,
                key,
                flags,
                ttl,
                data,
            } => {
                staged.extend_from_slice(
                    format!("{} {key} {flags} {ttl} {}\r\n", op.name(), data.len()).as_bytes(),
                );
                if data.len() < COPY_BELOW {
                    staged.extend_from_slice(data);
                } else {
                    w.write_all(&staged).await?;
                    staged.clear();
                    w.write_all(data).await?;
                }
                staged.extend_from_slice(b"\r\n");
            }
            Cmd::Delete(key) => {
                staged.extend_from_slice(format!("delete {key}\r\n").as_bytes());
            }
            Cmd::Touch(key, ttl) => {
                staged.extend_from_slice(format!("touch {key} {ttl}\r\n").as_bytes());
            }
            Cmd::StatsSettings => staged.extend_from_slice(b"stats settings\r\n"),
            Cmd::Stats => staged.extend_from_slice(b"stats\r\n"),
        }
        if staged.len() >= 64 << 10 {
            w.write_all(&staged).await?;
            staged.clear();
        }
    }
    w.write_all(&staged).await?;
    w.flush().await
}

/// Reads replies from one connection.
struct Reader<'a> {
    half: ReadHalf<'a>,
    buf: &'a mut BytesMut,
}

impl Reader<'_> {
    async fn fill(&mut self) -> Result<(), MemcachedError> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 << 10);
        }
        if self.half.read_buf(self.buf).await? == 0 {
            return Err(MemcachedError::Closed);
        }
        Ok(())
    }

    /// The next line, without its `\r\n`.
    async fn line(&mut self) -> Result<String, MemcachedError> {
        let mut scanned = 0;
        loop {
            if let Some(pos) = self.buf[scanned..].iter().position(|&b| b == b'\n') {
                let end = scanned + pos;
                let line = self.buf.split_to(end + 1);
                let line = line.strip_suffix(b"\r\n").unwrap_or(&line[..end]);
                return Ok(String::from_utf8_lossy(line).into_owned());
            }
            scanned = self.buf.len();
            if scanned > MAX_LINE {
                return Err(MemcachedError::Protocol(format!(
                    "reply line longer than {MAX_LINE} bytes"
                )));
            }
            self.fill().await?;
        }
    }

    /// The next `len` bytes of data and their `\r\n`.
    async fn data(&mut self, len: usize) -> Result<Bytes, MemcachedError> {
        let total = len + 2;
        let mut data = if self.buf.len() >= total {
            self.buf.split_to(total)
        } else {
            let mut data = BytesMut::with_capacity(total);
            data.extend_from_slice(&self.buf.split());
            while data.len() < total {
                // The spare capacity is exactly what is missing: never reads past this value.
                if self.half.read_buf(&mut data).await? == 0 {
                    return Err(MemcachedError::Closed);
                }
            }
            data
        };
        if !data.ends_with(b"\r\n") {
            return Err(MemcachedError::Protocol(
                "data block not terminated by \\r\\n".into(),
            ));
        }
        data.truncate(len);
        Ok(data.freeze())
    }

    async fn reply(&mut self, cmd: &Cmd) -> Result<Reply, MemcachedError> {
        match cmd {
            Cmd::Get(_) => {
                let mut values = Vec::new();
                loop {
                    let line = self.line().await?;
                    if line == "END" {
                        return Ok(Reply::Values(values));
                    }
                    let Some(header) = line.strip_prefix("VALUE ") else {
                        return error_reply(line);
                    };
                    let fields: Vec<&str> = header.split(' ').collect();
                    let (key, flags, len) = match fields.as_slice() {
                        [key, flags, len] | [key, flags, len, _] => (*key, *flags, *len),
                        _ => return Err(MemcachedError::Protocol(format!("bad line {line:?}"))),
                    };
                    let (Ok(flags), Ok(len)) = (flags.parse::<u32>(), len.parse::<usize>()) else {
                        return Err(MemcachedError::Protocol(format!("bad line {line:?}")));
                    };
                    if len > MAX_VALUE {
                        return Err(MemcachedError::Protocol(format!("value of {len} bytes")));
                    }
                    let key = key.to_string();
                    let data = self.data(len).await?;
                    values.push(Value { key, flags, data });
                }
            }
            Cmd::StatsSettings | Cmd::Stats => {
                let mut stats = Vec::new();
                loop {
                    let line = self.line().await?;
                    if line == "END" {
                        return Ok(Reply::Stats(stats));
                    }
                    let Some(stat) = line.strip_prefix("STAT ") else {
                        return error_reply(line);
                    };
                    let (name, value) = stat.split_once(' ').unwrap_or((stat, ""));
                    stats.push((name.to_string(), value.to_string()));
                }
            }
            Cmd::Store { .. } | Cmd::Delete(_) | Cmd::Touch(..) => {
                let line = self.line().await?;
                match line.as_str() {
                    "STORED" => Ok(Reply::Stored),
                    "NOT_STORED" => Ok(Reply::NotStored),
                    "DELETED" => Ok(Reply::Deleted),
                    "NOT_FOUND" => Ok(Reply::NotFound),
                    "TOUCHED" => Ok(Reply::Touched),
                    _ => error_reply(line),
                }
            }
        }
    }
}

/// `SERVER_ERROR` refuses one command and leaves the connection usable; anything else
/// (`ERROR`, `CLIENT_ERROR`, garbage) is fatal for the connection.
fn error_reply(line: String) -> Result<Reply, MemcachedError> {
    if line.starts_with("SERVER_ERROR") {
        Ok(Reply::ServerError(line))
    } else if line == "ERROR" || line.starts_with("CLIENT_ERROR") {
        Err(MemcachedError::Server(line))
    } else {
        let shown: String = line.chars().take(80).collect();
        Err(MemcachedError::Protocol(format!(
            "unexpected line {shown:?}"
        )))
    }
}
