//! The channel conformance suite against a Memcached server, plus Memcached-specific checks
//! (unreachable servers, chunked messages whose head or chunks are missing, cleanup of chunks).
//!
//! The server comes from `MLLESS_TEST_MEMCACHED_URL=memcached://127.0.0.1:PORT` (started with
//! `-m 256` or more: the suite stores 8 and 9 MiB values); without it the tests that need a
//! server print that they were skipped and pass. The tests that need no server always run.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_store::{Channel, ChannelError, MemcachedChannel, MessageId, StepMessages, conformance};

fn server_url() -> Option<String> {
    let url = std::env::var("MLLESS_TEST_MEMCACHED_URL").ok()?;
    (!url.trim().is_empty()).then_some(url)
}

macro_rules! server_or_skip {
    () => {
        match server_url() {
            Some(url) => url,
            None => {
                eprintln!("MLLESS_TEST_MEMCACHED_URL not set: skipped");
                return;
            }
        }
    };
}

async fn connect(url: &str, job: &str) -> MemcachedChannel {
    match MemcachedChannel::connect(url, job).await {
        Ok(channel) => channel,
        Err(e) => panic!("connect to {url}: {e}"),
    }
}

/// A blocking, minimal text-protocol session, to look at and tamper with raw items.
struct Raw {
    reader: BufReader<std::net::TcpStream>,
}

impl Raw {
    fn open(url: &str) -> Raw {
        let authority = url
            .trim_start_matches("memcached://")
            .split(['/', '?'])
            .next()
            .expect("authority");
        let stream = std::net::TcpStream::connect(authority).expect("raw connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        Raw {
            reader: BufReader::new(stream),
        }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read line");
        line.trim_end().to_string()
    }

    fn send(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("write");
    }

    /// (flags, data) of `key`, if present.
    fn get(&mut self, key: &str) -> Option<(u32, Vec<u8>)> {
        self.send(format!("get {key}\r\n").as_bytes());
        let line = self.line();
        if line == "END" {
            return None;
        }
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(fields[0], "VALUE", "{line}");
        let flags: u32 = fields[2].parse().expect("flags");
        let len: usize = fields[3].parse().expect("len");
        let mut data = vec![0; len + 2];
        self.reader.read_exact(&mut data).expect("data");
        data.truncate(len);
        assert_eq!(self.line(), "END");
        Some((flags, data))
    }

    fn set(&mut self, key: &str, flags: u32, data: &[u8]) {
        self.send(format!("set {key} {flags} 60 {}\r\n", data.len()).as_bytes());
        self.send(data);
        self.send(b"\r\n");
        assert_eq!(self.line(), "STORED");
    }

    fn delete(&mut self, key: &str) -> bool {
        self.send(format!("delete {key}\r\n").as_bytes());
        self.line() == "DELETED"
    }

    /// The chunk keys named by the manifest at `head` (which must be chunked).
    fn chunk_keys(&mut self, job: &str, head: &str) -> Vec<String> {
        let (flags, manifest) = self.get(head).expect("head present");
        assert_eq!(flags, 1, "{head} is not chunked");
        let manifest = String::from_utf8(manifest).expect("utf-8 manifest");
        let fields: Vec<&str> = manifest.split(' ').collect();
        assert_eq!(&fields[..2], ["mlless-chunks", "v1"], "{manifest}");
        let count: u32 = fields[3].parse().expect("count");
        (0..count)
            .map(|i| format!("mlless:{job}:c:{}:{i}", fields[2]))
            .collect()
    }
}

fn big(seed: u8, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect::<Vec<u8>>(),
    )
}

fn assert_timeout(result: Result<Vec<Bytes>, ChannelError>, missing: &[u32]) {
    match result {
        Err(ChannelError::Timeout { missing: m, .. }) => assert_eq!(m, missing),
        Err(e) => panic!("expected a timeout, got {e}"),
        Ok(v) => panic!("expected a timeout, got {} messages", v.len()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_conformance_memcached() {
    let url = server_or_skip!();
    let base = connect(&url, "conformance").await;
    assert!(base.describe().starts_with("memcached://"));
    let factory = move |job: &str| -> Arc<dyn Channel> {
        Arc::new(base.for_job(job).expect("channel of a job"))
    };
    conformance::run_all(&factory).await;
}

/// Separate connections per channel, as separate functions would have.
#[tokio::test(flavor = "current_thread")]
async fn channel_conformance_memcached_single_thread_own_connections() {
    let url = server_or_skip!();
    // Connect eagerly so that the synchronous factory can hand out channels.
    let mut channels = std::collections::HashMap::new();
    for job in conformance::JOB_IDS {
        let channel = connect(&url, &format!("st-{job}")).await;
        channels.insert(job.to_string(), Arc::new(channel) as Arc<dyn Channel>);
    }
    let factory = move |job: &str| -> Arc<dyn Channel> {
        Arc::clone(channels.get(job).expect("a job the suite uses"))
    };
    conformance::run_all(&factory).await;
}

#[tokio::test]
async fn a_down_server_is_a_clear_error_within_seconds() {
    // A free port with nothing listening.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let url = format!("memcached://127.0.0.1:{port}");
    let started = Instant::now();
    let result = MemcachedChannel::connect(&url, "job").await;
    let elapsed = started.elapsed();
    match result {
        Err(e @ ChannelError::InvalidUrl { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains(&format!("127.0.0.1:{port}")),
                "{message} does not name the address"
            );
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(c) => panic!("connected to nothing: {c:?}"),
    }
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    // Accepts connections (the kernel does, from the backlog) but never replies.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let url = format!("memcached://127.0.0.1:{port}?connect_timeout_ms=300");
    let started = Instant::now();
    let result = MemcachedChannel::connect(&url, "job").await;
    let elapsed = started.elapsed();
    match result {
        Err(e @ ChannelError::InvalidUrl { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
            assert!(message.contains("did not answer"), "{message}");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(c) => panic!("connected to a mute server: {c:?}"),
    }
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    drop(listener);
}

#[tokio::test]
async fn invalid_urls_and_names_are_rejected() {
    for url in [
        "redis://127.0.0.1:6379",
        "memcached://",
        "memcached://host:notaport",
        "memcached://user:pw@host:1",
        "memcached://host:1?ttl=-1",
        "memcached://host:1?nope=1",
    ] {
        match MemcachedChannel::connect(url, "job").await {
            Err(ChannelError::InvalidUrl { url: shown, .. }) => {
                assert!(!shown.contains("pw"), "{shown} shows a password");
            }
            Err(e) => panic!("{url}: unexpected error {e}"),
            Ok(_) => panic!("{url}: accepted"),
        }
    }
    for job in ["", "a:b", "has space", "tab\t", &"j".repeat(200)] {
        match MemcachedChannel::connect("memcached://127.0.0.1:1", job).await {
            Err(ChannelError::InvalidName { what, .. }) => assert_eq!(what, "job id"),
            Err(e) => panic!("job {job:?}: unexpected error {e}"),
            Ok(_) => panic!("job {job:?}: accepted"),
        }
    }
}

#[tokio::test]
async fn invalid_topics_and_keys_are_rejected() {
    let url = server_or_skip!();
    let channel = connect(&url, "names").await;
    for topic in ["", "a:b", "a b", &"t".repeat(240)] {
        match channel
            .publish(MessageId::new(topic, 0, 0), Bytes::new())
            .await
        {
            Err(ChannelError::InvalidName { what, .. }) => assert_eq!(what, "topic"),
            other => panic!("topic {topic:?}: {other:?}"),
        }
    }
    for key in ["", "a b", "new\nline", &"k".repeat(250)] {
        match channel.put_key(key, Bytes::new()).await {
            Err(ChannelError::InvalidName { what, .. }) => assert_eq!(what, "key"),
            other => panic!("key {key:?}: {other:?}"),
        }
    }
    // Colons and slashes are fine in keys (they come last in the item key).
    channel
        .put_key("progress/0:x", Bytes::from_static(b"1"))
        .await
        .expect("put");
    let got = channel.get_key("progress/0:x").await.expect("get");
    assert_eq!(got.as_deref(), Some(&b"1"[..]));
    channel.cleanup().await.expect("cleanup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_messages_without_head_or_chunks_are_not_collected() {
    let url = server_or_skip!();
    let job = "headless";
    let channel = connect(&url, job).await;
    channel.cleanup().await.expect("cleanup");
    let size = channel.chunk_size() * 2 + 12345;
    let mut raw = Raw::open(&url);

    // A publisher that died after its chunks, before its head: nothing to collect.
    channel
        .publish(MessageId::new("updates", 1, 0), big(1, size))
        .await
        .expect("publish");
    let head = format!("mlless:{job}:m:updates:1:0");
    let chunks = raw.chunk_keys(job, &head);
    assert_eq!(chunks.len(), 3);
    assert!(raw.delete(&head));
    for chunk in &chunks {
        assert!(raw.get(chunk).is_some(), "chunk {chunk} gone with the head");
    }
    let result = channel
        .collect(
            StepMessages::new("updates", 1, &[0]),
            Duration::from_millis(200),
        )
        .await;
    assert_timeout(result, &[0]);

    // A head whose chunk is missing (evicted, or being discarded) counts as missing.
    channel
        .publish(MessageId::new("updates", 2, 1), big(2, size))
        .await
        .expect("publish");
    let chunks = raw.chunk_keys(job, &format!("mlless:{job}:m:updates:2:1"));
    assert!(raw.delete(&chunks[1]));
    let result = channel
        .collect(
            StepMessages::new("updates", 2, &[1]),
            Duration::from_millis(200),
        )
        .await;
    assert_timeout(result, &[1]);

    // A chunk whose bytes changed is an error, never a wrong payload.
    channel
        .publish(MessageId::new("updates", 3, 2), big(3, size))
        .await
        .expect("publish");
    let chunks = raw.chunk_keys(job, &format!("mlless:{job}:m:updates:3:2"));
    let (_, mut data) = raw.get(&chunks[0]).expect("chunk");
    data[100] ^= 0xff;
    raw.set(&chunks[0], 0, &data);
    match channel
        .collect(
            StepMessages::new("updates", 3, &[2]),
            Duration::from_secs(5),
        )
        .await
    {
        Err(e @ ChannelError::Backend { .. }) => {
            let message = format!("{e} {:?}", std::error::Error::source(&e));
            assert!(message.contains("CRC-32"), "{message}");
            assert!(message.contains(&channel.describe()), "{message}");
        }
        other => panic!("corrupt chunk: {other:?}"),
    }

    // Republishing a chunked message keeps the first and leaves no stray chunks.
    channel
        .publish(MessageId::new("updates", 4, 0), big(4, size))
        .await
        .expect("publish");
    channel
        .publish(MessageId::new("updates", 4, 0), big(5, size))
        .await
        .expect("republish");
    let got = channel
        .collect(
            StepMessages::new("updates", 4, &[0]),
            Duration::from_secs(5),
        )
        .await
        .expect("collect");
    assert!(got[0] == big(4, size), "the first publish did not win");

    // Cleanup removes heads, chunks, keys (chunked too) and the index.
    channel
        .put_key("large", big(6, size))
        .await
        .expect("put_key");
    channel
        .put_key("large", big(7, size))
        .await
        .expect("put_key over a chunked value");
    let key_chunks = raw.chunk_keys(job, &format!("mlless:{job}:k:large"));
    let got = channel.get_key("large").await.expect("get_key");
    assert!(got == Some(big(7, size)));
    let heads = [
        format!("mlless:{job}:m:updates:2:1"),
        format!("mlless:{job}:m:updates:3:2"),
        format!("mlless:{job}:m:updates:4:0"),
    ];
    let mut all_chunks: Vec<String> = key_chunks;
    for head in &heads[1..] {
        all_chunks.extend(raw.chunk_keys(job, head));
    }
    channel.cleanup().await.expect("cleanup");
    for key in heads.iter().chain(&all_chunks) {
        assert!(raw.get(key).is_none(), "{key} survived cleanup");
    }
    assert!(raw.get(&format!("mlless:{job}:index")).is_none());
    assert!(channel.get_key("large").await.expect("get_key").is_none());
    // The orphaned chunks of the first test expire; delete them here.
    for chunk in &chunks {
        raw.delete(chunk);
    }
}

#[tokio::test]
async fn small_values_are_single_items_with_an_expiration() {
    let url = server_or_skip!();
    let job = "inline";
    let channel = connect(&format!("{url}?ttl=120"), job).await;
    assert_eq!(channel.ttl(), Duration::from_secs(120));
    channel.cleanup().await.expect("cleanup");
    channel
        .publish(MessageId::new("stats", 0, 3), Bytes::from_static(b"hi"))
        .await
        .expect("publish");
    let mut raw = Raw::open(&url);
    assert_eq!(
        raw.get(&format!("mlless:{job}:m:stats:0:3")),
        Some((0, b"hi".to_vec()))
    );
    let (_, index) = raw.get(&format!("mlless:{job}:index")).expect("index");
    assert_eq!(String::from_utf8_lossy(&index), "m stats 0 63 3\n");
    channel.cleanup().await.expect("cleanup");
    assert!(raw.get(&format!("mlless:{job}:m:stats:0:3")).is_none());
}

/// A scripted stand-in for memcached: answers `stats settings`, `stats` and `get` (always a
/// miss), and after answering `answers` commands on a connection (`stats` not counted) either
/// closes it or goes silent.
async fn fake_server(answers: usize, then_close: bool) -> (u16, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = tokio::io::BufReader::new(read).lines();
                let mut answered = 0;
                while let Ok(Some(line)) = lines.next_line().await {
                    // The counters the connect probe reads with `stats settings`: answered
                    // with it, not counted apart.
                    if line == "stats" {
                        if write
                            .write_all(b"STAT evictions 0\r\nEND\r\n")
                            .await
                            .is_err()
                        {
                            return;
                        }
                        continue;
                    }
                    if answered == answers {
                        if then_close {
                            return;
                        }
                        // Silent: keep the connection open, answer nothing.
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        return;
                    }
                    let reply: &[u8] = if line.starts_with("stats settings") {
                        b"STAT item_size_max 1048576\r\nEND\r\n"
                    } else if line.starts_with("get ") {
                        b"END\r\n"
                    } else {
                        b"ERROR\r\n"
                    };
                    if write.write_all(reply).await.is_err() {
                        return;
                    }
                    answered += 1;
                }
            });
        }
    });
    (port, server)
}

#[tokio::test]
async fn a_pooled_connection_closed_by_the_server_is_replaced() {
    // Every connection answers one command, then is closed by the server: the probe's
    // connection is pooled, found dead at the next exchange, and replaced.
    let (port, server) = fake_server(1, true).await;
    let channel = MemcachedChannel::connect(&format!("memcached://127.0.0.1:{port}"), "job")
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let got = channel
        .get_key("absent")
        .await
        .expect("get_key after a reconnect");
    assert!(got.is_none());
    server.abort();
}

#[tokio::test]
async fn a_server_that_stops_answering_fails_within_the_op_timeout() {
    let (port, server) = fake_server(1, false).await;
    let url = format!("memcached://127.0.0.1:{port}?op_timeout_ms=300");
    let channel = MemcachedChannel::connect(&url, "job")
        .await
        .expect("connect");
    let started = Instant::now();
    let result = channel.get_key("k").await;
    let elapsed = started.elapsed();
    match result {
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains(&format!("memcached://127.0.0.1:{port}")),
                "{message}"
            );
            assert!(message.contains("no reply within"), "{message}");
        }
        Ok(v) => panic!("a silent server answered {v:?}"),
    }
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    // A collect is bounded by its own timeout even when every poll hangs.
    let started = Instant::now();
    let result = channel
        .collect(
            StepMessages::new("updates", 0, &[0]),
            Duration::from_millis(100),
        )
        .await;
    assert!(result.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
    server.abort();
}

/// A memcached too small for what is written evicts items, and the channel says so, naming the
/// server and the way out; before that it has nothing to explain.
#[tokio::test]
async fn a_full_memcached_that_evicted_items_says_so() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut command = std::process::Command::new("memcached");
    command.args([
        "-l",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-m",
        "2",
        "-U",
        "0",
    ]);
    // memcached refuses to run as root without -u.
    if std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"))
    {
        command.args(["-u", "root"]);
    }
    let Ok(mut server) = command.spawn() else {
        eprintln!("memcached is not on PATH: skipped");
        return;
    };
    let url = format!("memcached://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let channel = loop {
        match MemcachedChannel::connect(&url, "evicted").await {
            Ok(channel) => break channel,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("memcached at {url} did not come up: {e}"),
        }
    };
    assert_eq!(channel.explain_missing().await.expect("stats"), None);
    // 400 updates of 50 kB: 20 MB into 2 MB.
    let payload = Bytes::from(vec![7u8; 50_000]);
    for step in 0..400 {
        channel
            .publish(MessageId::new("updates", step, 0), payload.clone())
            .await
            .expect("publish");
    }
    let explained = channel
        .explain_missing()
        .await
        .expect("stats")
        .expect("evictions are explained");
    assert!(explained.contains("evicted"), "{explained}");
    assert!(explained.contains(&url), "{explained}");
    assert!(explained.contains("-m"), "{explained}");
    let _ = server.kill();
    let _ = server.wait();
}
