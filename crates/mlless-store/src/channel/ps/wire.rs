//! The parameter server's protocol: request and response frames over TCP.
//!
//! A frame is a 14-byte header — magic `MLPS`, the protocol version (`u16`), the body's length
//! (`u32`) and its CRC-32 (`u32`), little-endian — then the body, a [`Request`] or [`Response`]
//! in postcard. One request, then its response, on a connection at a time.
//!
//! Why this and not an RPC crate such as tonic: gRPC needs a protobuf toolchain at build time
//! and brings HTTP/2 (hyper, h2, tower) for what is one small protocol of nine requests between
//! mlless and itself; and LambdaML found the hybrid parameter server's time going to
//! serialisation, so the payloads should cross as raw bytes with nothing in between. Postcard is
//! already how mlless encodes its own structures, its payloads ([`Bytes`]) are written as a
//! length and the raw bytes, and the header's length lets a reader refuse an oversized frame
//! before it allocates it ([`read_frame`]).

use bytes::Bytes;
use mlless_core::{SparseVector, WireDelta};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::channel::WorkerId;

/// The first bytes of every frame.
pub const MAGIC: [u8; 4] = *b"MLPS";
/// The protocol version in every frame's header; a peer speaking another is refused.
pub const VERSION: u16 = 2;
/// Length of a frame's header: magic, version, body length, body CRC-32.
pub const HEADER_LEN: usize = 14;

/// Why a frame could not be read or understood.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The connection failed or closed (a truncated frame ends here too).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The frame does not start with [`MAGIC`].
    #[error("not a parameter-server frame (magic {0:02x?})")]
    BadMagic([u8; 4]),
    /// The peer speaks another version of the protocol.
    #[error("protocol version {0}, expected {VERSION}")]
    BadVersion(u16),
    /// The frame is larger than the reader accepts.
    #[error("frame of {len} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// The length the header announced.
        len: u64,
        /// The reader's limit.
        limit: u64,
    },
    /// The body does not match its CRC-32.
    #[error("frame body fails its checksum")]
    Checksum,
    /// The body is not a valid message.
    #[error("undecodable frame body: {0}")]
    Decode(#[from] postcard::Error),
}

impl WireError {
    /// Whether the failure was on the connection (worth another attempt once the peer is back),
    /// rather than about what it sent.
    pub fn is_transient(&self) -> bool {
        match self {
            WireError::Io(_) => true,
            WireError::BadMagic(_)
            | WireError::BadVersion(_)
            | WireError::TooLarge { .. }
            | WireError::Checksum
            | WireError::Decode(_) => false,
        }
    }
}

/// What a client asks the server; the first request on a connection is [`Request::Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Opens the connection for a job: the server's secret and the job every later request of
    /// the connection is about.
    Hello {
        /// The secret the server was started with.
        secret: String,
        /// The job id (the namespace of the connection's requests).
        job: String,
    },
    /// [`Channel::publish`](crate::Channel::publish).
    Publish {
        /// The topic.
        topic: String,
        /// The step.
        step: u64,
        /// The publishing worker.
        from: WorkerId,
        /// The message.
        payload: Bytes,
    },
    /// [`Channel::collect`](crate::Channel::collect): answered when every message is there or
    /// after `timeout_ms`.
    Collect {
        /// The topic.
        topic: String,
        /// The step.
        step: u64,
        /// The workers whose messages are wanted.
        from: Vec<WorkerId>,
        /// How long the server waits, in milliseconds.
        timeout_ms: u64,
    },
    /// [`Channel::publish_and_average`](crate::Channel::publish_and_average), for the
    /// parameters in `range`: stores the worker's part (and its header, as its message of the
    /// step), then answers with the mean of the parts of every worker in `peers` when all are
    /// there, or after `timeout_ms`.
    Average {
        /// The topic.
        topic: String,
        /// The step.
        step: u64,
        /// The publishing worker.
        from: WorkerId,
        /// Its header, on the server that holds its message of the step (`None` on the others).
        header: Option<Bytes>,
        /// Its delta's entries in `range`.
        part: WireDelta,
        /// The parameters this server averages, `[start, end)`.
        range: (u64, u64),
        /// The workers whose parts make the mean, in the order of the sum.
        peers: Vec<WorkerId>,
        /// How long the server waits, in milliseconds.
        timeout_ms: u64,
    },
    /// [`Channel::poll`](crate::Channel::poll).
    Poll {
        /// The topic.
        topic: String,
        /// The step.
        step: u64,
        /// The workers whose messages are wanted.
        from: Vec<WorkerId>,
    },
    /// [`Channel::discard`](crate::Channel::discard).
    Discard {
        /// The topic.
        topic: String,
        /// The step.
        step: u64,
        /// The workers whose messages go.
        from: Vec<WorkerId>,
    },
    /// [`Channel::put_key`](crate::Channel::put_key).
    PutKey {
        /// The key.
        key: String,
        /// Its new value.
        value: Bytes,
    },
    /// [`Channel::get_key`](crate::Channel::get_key).
    GetKey {
        /// The key.
        key: String,
    },
    /// [`Channel::cleanup`](crate::Channel::cleanup): forget the job.
    Cleanup,
}

/// What the server answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// The secret matched: the server's boot id, drawn at random when it started (a new one
    /// means a server restarted empty).
    Welcome {
        /// The server's boot id.
        boot_id: u64,
        /// The largest request frame it reads (`--max-frame-bytes`), so that a client refuses
        /// a larger message itself, clearly, instead of sending it.
        max_frame_bytes: u64,
    },
    /// Done (publish, discard, put, cleanup).
    Done,
    /// A collect's messages, in the order asked for.
    Messages(Vec<Bytes>),
    /// An average's mean of the range asked for, and the headers this server holds.
    Mean {
        /// The mean of the peers' parts.
        mean: SparseVector,
        /// Per peer, its header if this server holds it.
        headers: Vec<Option<Bytes>>,
    },
    /// A collect or average that timed out: which of the asked-for messages (or parts) were
    /// there.
    TimedOut {
        /// Per worker asked for, whether its message was present.
        present: Vec<bool>,
    },
    /// A poll's messages, `None` where absent.
    Polled(Vec<Option<Bytes>>),
    /// A key's value, `None` if absent.
    Key(Option<Bytes>),
    /// The server refused the request (wrong secret, a limit, a bad name); it says why.
    Refused(String),
}

/// The frame of `body` (postcard of a [`Request`] or [`Response`]): header, then body.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, WireError> {
    let mut frame = vec![0u8; HEADER_LEN];
    let mut frame = postcard::to_extend(message, std::mem::take(&mut frame))?;
    let len = u32::try_from(frame.len() - HEADER_LEN).map_err(|_| WireError::TooLarge {
        len: (frame.len() - HEADER_LEN) as u64,
        limit: u64::from(u32::MAX),
    })?;
    let crc = crc32fast::hash(&frame[HEADER_LEN..]);
    frame[0..4].copy_from_slice(&MAGIC);
    frame[4..6].copy_from_slice(&VERSION.to_le_bytes());
    frame[6..10].copy_from_slice(&len.to_le_bytes());
    frame[10..14].copy_from_slice(&crc.to_le_bytes());
    Ok(frame)
}

/// A frame's header, checked: the body's length (at most `limit`) and CRC-32.
pub fn decode_header(header: &[u8; HEADER_LEN], limit: u64) -> Result<(usize, u32), WireError> {
    let field = |at: usize| [header[at], header[at + 1], header[at + 2], header[at + 3]];
    let magic = field(0);
    if magic != MAGIC {
        return Err(WireError::BadMagic(magic));
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != VERSION {
        return Err(WireError::BadVersion(version));
    }
    let len = u32::from_le_bytes(field(6));
    if u64::from(len) > limit {
        return Err(WireError::TooLarge {
            len: u64::from(len),
            limit,
        });
    }
    let len = usize::try_from(len).map_err(|_| WireError::TooLarge {
        len: u64::from(len),
        limit,
    })?;
    Ok((len, u32::from_le_bytes(field(10))))
}

/// Decodes one whole frame held in memory (header and body, nothing after): what
/// [`read_frame`] does on a socket; the fuzz target's entry.
pub fn decode_frame<T: for<'de> Deserialize<'de>>(
    bytes: &[u8],
    limit: u64,
) -> Result<T, WireError> {
    let Some((header, body)) = bytes.split_first_chunk::<HEADER_LEN>() else {
        return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    };
    let (len, crc) = decode_header(header, limit)?;
    if body.len() != len {
        return Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    decode_body(body, crc)
}

/// The message in `body`, after checking its CRC-32.
fn decode_body<T: for<'de> Deserialize<'de>>(body: &[u8], crc: u32) -> Result<T, WireError> {
    if crc32fast::hash(body) != crc {
        return Err(WireError::Checksum);
    }
    Ok(postcard::from_bytes(body)?)
}

/// Reads one frame's header from `reader`: the body's length (at most `limit`) and CRC-32.
/// `Ok(None)` if the peer closed the connection between frames.
///
/// # Cancel safety
///
/// Not cancel-safe: a cancelled read leaves the connection in the middle of a frame, and the
/// connection must be dropped.
pub async fn read_header<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: u64,
) -> Result<Option<(usize, u32)>, WireError> {
    let mut header = [0u8; HEADER_LEN];
    let first = reader.read(&mut header).await?;
    if first == 0 {
        return Ok(None);
    }
    reader.read_exact(&mut header[first..]).await?;
    decode_header(&header, limit).map(Some)
}

/// Reads the body of `len` bytes a [`read_header`] announced and decodes it.
///
/// # Cancel safety
///
/// Not cancel-safe (see [`read_header`]).
pub async fn read_body<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    reader: &mut R,
    len: usize,
    crc: u32,
) -> Result<T, WireError> {
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).await?;
    decode_body(&body, crc)
}

/// Reads one whole frame of at most `limit` bytes; a connection closed between frames is an
/// [`WireError::Io`] of kind `UnexpectedEof`.
///
/// # Cancel safety
///
/// Not cancel-safe (see [`read_header`]).
pub async fn read_frame<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    reader: &mut R,
    limit: u64,
) -> Result<T, WireError> {
    match read_header(reader, limit).await? {
        Some((len, crc)) => read_body(reader, len, crc).await,
        None => Err(WireError::Io(std::io::ErrorKind::UnexpectedEof.into())),
    }
}

/// Writes a message as one frame.
///
/// # Cancel safety
///
/// Not cancel-safe: a cancelled write may leave half a frame on the connection, which must then
/// be dropped.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    writer: &mut W,
    message: &T,
) -> Result<(), WireError> {
    let frame = encode(message)?;
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let request = Request::Publish {
            topic: "updates".into(),
            step: 7,
            from: 3,
            payload: Bytes::from_static(b"abc"),
        };
        let frame = encode(&request).expect("encode");
        assert_eq!(
            decode_frame::<Request>(&frame, 1 << 20).expect("decode"),
            request
        );
        let response = Response::Polled(vec![None, Some(Bytes::from_static(b"x"))]);
        let frame = encode(&response).expect("encode");
        assert_eq!(
            decode_frame::<Response>(&frame, 1 << 20).expect("decode"),
            response
        );
    }

    #[test]
    fn bad_frames_are_refused() {
        let mut frame = encode(&Request::Cleanup).expect("encode");
        assert!(matches!(
            decode_frame::<Request>(&frame, 0),
            Err(WireError::TooLarge { .. })
        ));
        assert!(matches!(
            decode_frame::<Request>(&frame[..frame.len() - 1], 1 << 20),
            Err(WireError::Io(_))
        ));
        let last = frame.len() - 1;
        frame[last] ^= 0xff;
        assert!(matches!(
            decode_frame::<Request>(&frame, 1 << 20),
            Err(WireError::Checksum)
        ));
        frame[0] = b'X';
        assert!(matches!(
            decode_frame::<Request>(&frame, 1 << 20),
            Err(WireError::BadMagic(_))
        ));
    }
}
