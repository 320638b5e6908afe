//! The output of a function: forwarded line by line to `tracing`, and the end of stderr kept to
//! explain a failure.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt};

/// How much of the end of stderr is kept for the failure message.
pub(crate) const TAIL_BYTES: usize = 8 * 1024;

/// Longest line forwarded as one; a longer run without a newline is cut into pieces of this size
/// (so that a function printing megabytes without a newline cannot grow the invoker's memory).
const MAX_LINE_BYTES: usize = 8 * 1024;

/// At most this many lines make up a failure message.
const MESSAGE_MAX_LINES: usize = 6;

/// At most this many characters make up a failure message.
const MESSAGE_MAX_CHARS: usize = 600;

/// Which stream of the function a line came from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// The last lines of a stream, at most [`TAIL_BYTES`] of them.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    lines: VecDeque<String>,
    bytes: usize,
}

impl Tail {
    /// Appends a line, dropping the oldest ones beyond [`TAIL_BYTES`].
    pub(crate) fn push(&mut self, line: String) {
        self.bytes += line.len();
        self.lines.push_back(line);
        while self.bytes > TAIL_BYTES && self.lines.len() > 1 {
            if let Some(old) = self.lines.pop_front() {
                self.bytes -= old.len();
            }
        }
    }

    /// The failure message: the last non-empty line(s), trimmed (see [`failure_message`]).
    pub(crate) fn message(&self) -> Option<String> {
        failure_message(self.lines.iter().map(String::as_str))
    }
}

/// A [`Tail`] shared between the reader of stderr and the watcher.
pub(crate) type SharedTail = Arc<Mutex<Tail>>;

/// Reads `reader` to its end, logs each line at debug level under `function`, and keeps the
/// end in `tail` if given. Read errors end the forwarding (they are logged, not returned: the
/// function's outcome does not depend on its output).
pub(crate) async fn forward<R: AsyncRead + Unpin>(
    mut reader: R,
    function: Arc<str>,
    stream: Stream,
    tail: Option<SharedTail>,
) {
    let mut buf = vec![0u8; 8 * 1024];
    let mut splitter = LineSplitter::default();
    let emit = |raw: &[u8]| {
        let text = clean_line(raw);
        match stream {
            Stream::Stdout => tracing::debug!(function = %function, stream = "stdout", "{text}"),
            Stream::Stderr => tracing::debug!(function = %function, stream = "stderr", "{text}"),
        }
        if let Some(tail) = &tail {
            tail.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(text);
        }
    };
    loop {
        match reader.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => splitter.feed(&buf[..n], &emit),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(function = %function, ?stream, error = %e, "reading output failed");
                break;
            }
        }
    }
    splitter.finish(&emit);
}

/// Cuts a byte stream into lines of at most [`MAX_LINE_BYTES`] (newline excluded).
#[derive(Debug, Default)]
struct LineSplitter {
    line: Vec<u8>,
}

impl LineSplitter {
    /// Feeds a chunk, calling `emit` with each line it completes.
    fn feed(&mut self, mut chunk: &[u8], mut emit: impl FnMut(&[u8])) {
        while !chunk.is_empty() {
            let room = MAX_LINE_BYTES - self.line.len();
            match chunk.iter().take(room).position(|&b| b == b'\n') {
                Some(i) => {
                    self.line.extend_from_slice(&chunk[..i]);
                    emit(&self.line);
                    self.line.clear();
                    chunk = &chunk[i + 1..];
                }
                None => {
                    let take = room.min(chunk.len());
                    self.line.extend_from_slice(&chunk[..take]);
                    chunk = &chunk[take..];
                    if self.line.len() >= MAX_LINE_BYTES {
                        emit(&self.line);
                        self.line.clear();
                    }
                }
            }
        }
    }

    /// Emits the last line if the stream did not end with a newline.
    fn finish(&mut self, mut emit: impl FnMut(&[u8])) {
        if !self.line.is_empty() {
            emit(&self.line);
            self.line.clear();
        }
    }
}

/// Decodes a raw line (lossily), drops a trailing `\r` and ANSI escape sequences (colours of a
/// log formatter).
fn clean_line(raw: &[u8]) -> String {
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    let text = String::from_utf8_lossy(raw);
    if !text.contains('\u{1b}') {
        return text.into_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        // CSI: ESC [ parameters… final byte in '@'..='~'; other escapes: ESC + one char.
        if chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            chars.next();
        }
    }
    out
}

/// The failure message of a stderr tail: its last non-empty line, trimmed, together with the
/// lines it continues — an indented line continues the one above, and a line ending in `:`
/// introduces the one below. So a Rust panic gives "thread 'main' panicked at src/x.rs:3:5: boom"
/// and an `anyhow` error its "Error: … Caused by: …" chain, not just the last line. Rust's
/// "note: run with `RUST_BACKTRACE=1`" hint is skipped. `None` if stderr had nothing.
pub(crate) fn failure_message<'a>(
    lines: impl DoubleEndedIterator<Item = &'a str>,
) -> Option<String> {
    let mut picked: Vec<&str> = Vec::new();
    let mut continues_above = false;
    for raw in lines.rev() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with("note: run with `RUST_BACKTRACE") {
            continue;
        }
        if !picked.is_empty() && !continues_above && !line.ends_with(':') {
            break;
        }
        picked.push(line);
        continues_above = raw.starts_with([' ', '\t']) || line == "Caused by:";
        if picked.len() >= MESSAGE_MAX_LINES {
            break;
        }
    }
    if picked.is_empty() {
        return None;
    }
    picked.reverse();
    let mut message = String::new();
    for (i, line) in picked.iter().enumerate() {
        if i > 0 {
            message.push_str(if picked[i - 1].ends_with(':') {
                " "
            } else {
                " | "
            });
        }
        message.push_str(line);
    }
    if message.chars().count() > MESSAGE_MAX_CHARS {
        // Keep the end: the most specific part of an error chain is last.
        let skip = message.chars().count() - (MESSAGE_MAX_CHARS - 1);
        message = std::iter::once('…')
            .chain(message.chars().skip(skip))
            .collect();
    }
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> Option<String> {
        failure_message(text.lines())
    }

    #[test]
    fn last_line_wins() {
        assert_eq!(
            msg("starting\nloading data\nno such object: x\n\n").as_deref(),
            Some("no such object: x")
        );
        assert_eq!(msg("\n  \n"), None);
        assert_eq!(msg(""), None);
    }

    #[test]
    fn rust_panic_keeps_location_and_message() {
        let stderr = "\nthread 'main' panicked at src/main.rs:2:5:\nboom\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            msg(stderr).as_deref(),
            Some("thread 'main' panicked at src/main.rs:2:5: boom")
        );
    }

    #[test]
    fn anyhow_chain_is_kept() {
        let stderr = "INFO started\nError: cannot run worker 3\n\nCaused by:\n    0: reading minibatch 7\n    1: connection refused\n";
        assert_eq!(
            msg(stderr).as_deref(),
            Some(
                "Error: cannot run worker 3 | Caused by: 0: reading minibatch 7 | 1: connection refused"
            )
        );
    }

    #[test]
    fn long_messages_keep_their_end() {
        let long = format!("{}END", "x".repeat(2000));
        let m = msg(&long).expect("a message");
        assert_eq!(m.chars().count(), MESSAGE_MAX_CHARS);
        assert!(m.starts_with('…') && m.ends_with("END"));
    }

    #[test]
    fn ansi_colours_are_stripped() {
        assert_eq!(
            clean_line(b"\x1b[31mERROR\x1b[0m worker: failed\r"),
            "ERROR worker: failed"
        );
        assert_eq!(clean_line(b"plain \xff"), "plain \u{fffd}");
    }

    #[test]
    fn tail_keeps_the_end() {
        let mut tail = Tail::default();
        for i in 0..10_000 {
            tail.push(format!("line {i}"));
        }
        assert!(tail.bytes <= TAIL_BYTES);
        assert_eq!(tail.message().as_deref(), Some("line 9999"));
    }

    #[test]
    fn splitter_cuts_lines_and_bounds_them() {
        let mut input = b"first\r\nsecond\n".to_vec();
        input.extend(std::iter::repeat_n(b'z', 3 * MAX_LINE_BYTES + 5));
        let mut lines: Vec<Vec<u8>> = Vec::new();
        let mut splitter = LineSplitter::default();
        for chunk in input.chunks(1000) {
            splitter.feed(chunk, |l| lines.push(l.to_vec()));
        }
        splitter.finish(|l| lines.push(l.to_vec()));
        assert_eq!(lines.len(), 2 + 4);
        assert_eq!(&lines[..2], [b"first\r".to_vec(), b"second".to_vec()]);
        assert!(lines[2..5].iter().all(|l| l.len() == MAX_LINE_BYTES));
        assert_eq!(lines[5], b"zzzzz");
    }

    #[tokio::test]
    async fn forward_keeps_the_tail() {
        let tail = SharedTail::default();
        let input = b"one\n\x1b[1mtwo\x1b[0m\r\nthree";
        forward(
            &input[..],
            Arc::from("t"),
            Stream::Stderr,
            Some(tail.clone()),
        )
        .await;
        let tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
        let lines: Vec<&str> = tail.lines.iter().map(String::as_str).collect();
        assert_eq!(lines, ["one", "two", "three"]);
    }
}
