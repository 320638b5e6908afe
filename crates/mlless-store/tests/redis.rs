//! The Redis channel: the conformance suite on one shard and on two, plus connection failures
//! (nothing listening, a password missing or wrong, TLS against a plain server), the shard
//! layout, TTLs, cleanup, job isolation, and recovery from dropped connections.
//!
//! The servers come from the environment (`scripts/test.sh` starts them):
//! - `MLLESS_TEST_REDIS_URLS`: comma-separated URLs of at least 2 distinct servers;
//! - `MLLESS_TEST_REDIS_PASSWORD_URL`: a server started with `--requirepass mlless-test-secret`,
//!   URL without the password.
//!
//! - `MLLESS_TEST_REDIS_TLS_URL` (optional): a `rediss://` server whose certificate the machine
//!   trusts (e.g. through `SSL_CERT_FILE=ca.crt`), for the conformance suite over TLS.
//!
//! A test whose variable is not set prints that it was skipped and passes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_store::redis::{CONNECT_TIMEOUT, DEFAULT_TTL};
use mlless_store::{Channel, ChannelError, MessageId, RedisChannel, StepMessages, conformance};

const PASSWORD: &str = "mlless-test-secret";

/// Tests that use the servers run one at a time: the conformance suite uses fixed job ids, and
/// `survives_killed_connections` kills every client connection of a server.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The URLs of `MLLESS_TEST_REDIS_URLS` (at least 2), or `None` after printing a skip notice.
fn redis_urls(test: &str) -> Option<Vec<String>> {
    let Ok(value) = std::env::var("MLLESS_TEST_REDIS_URLS") else {
        eprintln!("skipped {test}: MLLESS_TEST_REDIS_URLS is not set");
        return None;
    };
    let urls: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(String::from)
        .collect();
    assert!(
        urls.len() >= 2,
        "MLLESS_TEST_REDIS_URLS must list at least 2 servers, got {value:?}"
    );
    Some(urls)
}

/// `MLLESS_TEST_REDIS_PASSWORD_URL`, or `None` after printing a skip notice.
fn password_url(test: &str) -> Option<String> {
    match std::env::var("MLLESS_TEST_REDIS_PASSWORD_URL") {
        Ok(url) => Some(url.trim().to_string()),
        Err(_) => {
            eprintln!("skipped {test}: MLLESS_TEST_REDIS_PASSWORD_URL is not set");
            None
        }
    }
}

/// `redis://host:port[/db]` with `userinfo@` inserted after the scheme.
fn with_userinfo(url: &str, userinfo: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    format!("{scheme}://{userinfo}@{rest}")
}

/// `host:port` of a `redis://host:port[/db]` URL.
fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

fn factory(base: RedisChannel) -> impl Fn(&str) -> Arc<dyn Channel> {
    move |job: &str| -> Arc<dyn Channel> { Arc::new(base.for_job(job).expect("for_job")) }
}

/// A direct connection to one server, to look at what the channel left there.
async fn direct(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("direct connection")
}

async fn keys_of(url: &str, pattern: &str) -> Vec<String> {
    let mut conn = direct(url).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    keys.sort();
    keys
}

/// One entry of an `XRANGE` reply: id and field/value pairs.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// A loopback port with nothing listening.
fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    socket.local_addr().expect("addr").port()
}

fn connect_error(result: Result<RedisChannel, ChannelError>) -> ChannelError {
    match result {
        Ok(channel) => panic!("connected to {}, expected an error", channel.describe()),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_one_shard() {
    let Some(urls) = redis_urls("conformance_one_shard") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let base = RedisChannel::connect(&urls[0], "base")
        .await
        .expect("connect");
    assert_eq!(base.shard_count(), 1);
    assert_eq!(base.describe(), urls[0]);
    conformance::run_all(&factory(base)).await;
    assert!(keys_of(&urls[0], "mlless:conformance-*").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_two_shards() {
    let Some(urls) = redis_urls("conformance_two_shards") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let list = format!("{},{}", urls[0], urls[1]);
    let base = RedisChannel::connect(&list, "base").await.expect("connect");
    assert_eq!(base.shard_count(), 2);
    assert_eq!(base.describe(), format!("{} (+1 shard)", urls[0]));
    conformance::run_all(&factory(base)).await;
    for url in &urls[..2] {
        assert!(keys_of(url, "mlless:conformance-*").await.is_empty());
    }
}

#[tokio::test(flavor = "current_thread")]
async fn conformance_single_thread_runtime() {
    let Some(urls) = redis_urls("conformance_single_thread_runtime") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let list = format!("{},{}", urls[1], urls[0]);
    let base = RedisChannel::connect(&list, "base").await.expect("connect");
    conformance::run_all(&factory(base)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_tls() {
    let _serial = SERIAL.lock().await;
    let Ok(url) = std::env::var("MLLESS_TEST_REDIS_TLS_URL") else {
        eprintln!("skipped conformance_tls: MLLESS_TEST_REDIS_TLS_URL is not set");
        return;
    };
    let base = RedisChannel::connect(url.trim(), "base")
        .await
        .expect("connect over TLS");
    conformance::run_all(&factory(base)).await;
}

/// Worker w's message lives on shard w % K, in the step's stream, with a TTL; keys live on
/// shard 0; cleanup removes everything of the job on every shard.
#[tokio::test]
async fn layout_shards_and_ttls() {
    let _serial = SERIAL.lock().await;
    let Some(urls) = redis_urls("layout_shards_and_ttls") else {
        return;
    };
    let list = format!("{},{}", urls[0], urls[1]);
    let channel = RedisChannel::connect(&list, "layout-test")
        .await
        .expect("connect");
    channel.cleanup().await.expect("cleanup");
    for w in 0..4 {
        channel
            .publish(
                MessageId::new("updates", 7, w),
                Bytes::from(vec![w as u8; 10]),
            )
            .await
            .expect("publish");
    }
    channel
        .put_key("stop", Bytes::from_static(b"1"))
        .await
        .expect("put_key");
    let stream = channel.stream_key("updates", 7);
    assert_eq!(stream, "mlless:layout-test:updates:7");
    assert_eq!(channel.key_key("stop"), "mlless:layout-test:keys:stop");
    for (shard, url) in urls[..2].iter().enumerate() {
        let mut conn = direct(url).await;
        let entries: Vec<StreamEntry> = redis::cmd("XRANGE")
            .arg(&stream)
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .expect("XRANGE");
        let workers: Vec<String> = entries
            .iter()
            .map(|(_, fields)| {
                let w = fields.iter().find(|(k, _)| k == "w").expect("worker field");
                String::from_utf8(w.1.clone()).expect("utf-8")
            })
            .collect();
        let expected: Vec<String> = (0..4u32)
            .filter(|w| *w as usize % 2 == shard)
            .map(|w| w.to_string())
            .collect();
        assert_eq!(
            workers, expected,
            "shard {shard} ({url}) holds the wrong workers"
        );
        let keys = keys_of(url, "mlless:layout-test:*").await;
        for key in &keys {
            let ttl: i64 = redis::cmd("TTL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .expect("TTL");
            assert!(
                ttl > 0 && ttl <= DEFAULT_TTL.as_secs() as i64,
                "key {key} on {url} has TTL {ttl}"
            );
        }
        let key_there = keys.contains(&"mlless:layout-test:keys:stop".to_string());
        assert_eq!(key_there, shard == 0, "keys live on shard 0 only");
    }
    // A timeout too large to add to an Instant is fine.
    let collected = channel
        .collect(
            StepMessages::new("updates", 7, &[3, 0, 2, 1]),
            Duration::MAX,
        )
        .await
        .expect("collect");
    let firsts: Vec<u8> = collected.iter().map(|p| p[0]).collect();
    assert_eq!(firsts, [3, 0, 2, 1]);
    channel.cleanup().await.expect("cleanup");
    for url in &urls[..2] {
        assert!(keys_of(url, "mlless:layout-test:*").await.is_empty());
    }
}

/// A discard by one worker removes only its own message; a slower reader still gets the rest,
/// and a message published into an emptied stream still reaches a reader that was waiting.
#[tokio::test]
async fn discard_spares_other_workers() {
    let _serial = SERIAL.lock().await;
    let Some(urls) = redis_urls("discard_spares_other_workers") else {
        return;
    };
    let channel = RedisChannel::connect(&urls[0], "discard-test")
        .await
        .expect("connect");
    channel.cleanup().await.expect("cleanup");
    for w in 0..2 {
        channel
            .publish(MessageId::new("u", 1, w), Bytes::from(format!("m{w}")))
            .await
            .expect("publish");
    }
    // A reader waiting for worker 2, which has already read 0 and 1.
    let reader = {
        let channel = channel.clone();
        tokio::spawn(async move {
            channel
                .collect(
                    StepMessages::new("u", 1, &[0, 1, 2]),
                    Duration::from_secs(10),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    channel
        .discard(StepMessages::new("u", 1, &[0, 1]))
        .await
        .expect("discard");
    channel
        .publish(MessageId::new("u", 1, 2), Bytes::from_static(b"m2"))
        .await
        .expect("publish");
    let got = reader.await.expect("join").expect("collect");
    assert_eq!(got, [&b"m0"[..], b"m1", b"m2"]);
    let left = channel
        .collect(StepMessages::new("u", 1, &[2]), Duration::from_secs(1))
        .await
        .expect("collect");
    assert_eq!(left, [&b"m2"[..]]);
    channel.cleanup().await.expect("cleanup");
}

/// A command the server refuses is an error naming the shard and the key, at once (no retry).
#[tokio::test]
async fn server_errors_name_the_shard_and_key() {
    let _serial = SERIAL.lock().await;
    let Some(urls) = redis_urls("server_errors_name_the_shard_and_key") else {
        return;
    };
    let list = format!("{},{}", urls[0], urls[1]);
    let channel = RedisChannel::connect(&list, "errors-test")
        .await
        .expect("connect");
    channel.cleanup().await.expect("cleanup");
    // Something that is not a stream where worker 1's stream of step 3 goes (shard 1).
    let key = channel.stream_key("u", 3);
    let mut conn = direct(&urls[1]).await;
    redis::cmd("SET")
        .arg(&key)
        .arg("not a stream")
        .query_async::<()>(&mut conn)
        .await
        .expect("SET");
    let started = Instant::now();
    let e = channel
        .publish(MessageId::new("u", 3, 1), Bytes::from_static(b"x"))
        .await
        .expect_err("publish onto a string");
    let message = e.to_string();
    eprintln!("server error: {message}");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(message.contains(host_port(&urls[1])), "{message}");
    assert!(message.contains(&key), "{message}");
    assert!(message.contains("WRONGTYPE"), "{message}");
    let e = channel
        .collect(StepMessages::new("u", 3, &[0, 1]), Duration::from_secs(5))
        .await
        .expect_err("collect from a string");
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    // Worker 0 (shard 0) is unaffected.
    channel
        .publish(MessageId::new("u", 3, 0), Bytes::from_static(b"x"))
        .await
        .expect("publish on shard 0");
    channel.cleanup().await.expect("cleanup");
}

/// Nothing listening: a clear error naming the address, within a few seconds.
#[tokio::test]
async fn down_server_is_a_clear_error() {
    let _serial = SERIAL.lock().await;
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let started = Instant::now();
    let e = connect_error(RedisChannel::connect(&url, "job").await);
    let elapsed = started.elapsed();
    let message = e.to_string();
    assert!(
        matches!(e, ChannelError::InvalidUrl { .. }),
        "unexpected error {message}"
    );
    assert!(
        message.contains(&format!("127.0.0.1:{port}")),
        "{message} does not name the address"
    );
    assert!(
        elapsed < CONNECT_TIMEOUT + Duration::from_secs(1),
        "took {elapsed:?}"
    );
    eprintln!("down server: {message} (after {elapsed:?})");

    // One shard down among several: the error names that one.
    if let Some(urls) = redis_urls("down_server_is_a_clear_error (2 shards)") {
        let list = format!("{},{url}", urls[0]);
        let e = connect_error(RedisChannel::connect(&list, "job").await);
        assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    }
}

/// A server that is not Redis (here an HTTP server on loopback): an error naming the address
/// that says the server does not speak Redis. Needs no Redis server.
#[tokio::test]
async fn a_server_that_is_not_redis_is_named_as_such() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                while let Ok(n) = socket.read(&mut buffer).await {
                    if n == 0 {
                        return;
                    }
                    let reply = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
                    if socket.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    let e = connect_error(RedisChannel::connect(&url, "job").await);
    server.abort();
    let message = e.to_string();
    assert!(matches!(e, ChannelError::InvalidUrl { .. }), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{port}")),
        "{message} does not name the address"
    );
    assert!(
        message.contains("the server does not speak Redis"),
        "{message}"
    );
}

/// A server that wants a password: without one in the URL, a clear error naming the address;
/// with the right one, a working channel; never the password in any message.
#[tokio::test]
async fn password_required() {
    let _serial = SERIAL.lock().await;
    let Some(url) = password_url("password_required") else {
        return;
    };
    let address = host_port(&url).to_string();

    let e = connect_error(RedisChannel::connect(&url, "pw-job").await);
    let message = e.to_string();
    eprintln!("no password: {message}");
    assert!(
        message.contains(&address),
        "{message} does not name {address}"
    );
    assert!(message.contains("password"), "{message} does not say why");

    for userinfo in ["nobody:wrong-secret", ":wrong-secret"] {
        let wrong = with_userinfo(&url, userinfo);
        let e = connect_error(RedisChannel::connect(&wrong, "pw-job").await);
        let message = e.to_string();
        eprintln!("wrong password: {message}");
        assert!(
            message.contains(&address),
            "{message} does not name {address}"
        );
        assert!(
            !message.contains("wrong-secret"),
            "{message} shows the password"
        );
        assert!(
            !format!("{e:?}").contains("wrong-secret"),
            "{e:?} shows the password"
        );
    }

    for userinfo in [format!(":{PASSWORD}"), format!("default:{PASSWORD}")] {
        let good = with_userinfo(&url, &userinfo);
        let channel = RedisChannel::connect(&good, "pw-job")
            .await
            .expect("connect with the password");
        let describe = channel.describe();
        assert!(!describe.contains(PASSWORD), "describe shows the password");
        assert!(describe.contains(&address), "{describe}");
        assert!(
            !format!("{channel:?}").contains(PASSWORD),
            "Debug shows the password"
        );
        channel.cleanup().await.expect("cleanup");
        channel
            .publish(MessageId::new("updates", 0, 0), Bytes::from_static(b"x"))
            .await
            .expect("publish");
        let got = channel
            .collect(
                StepMessages::new("updates", 0, &[0]),
                Duration::from_secs(5),
            )
            .await
            .expect("collect");
        assert_eq!(got, [&b"x"[..]]);
        let e = channel
            .collect(
                StepMessages::new("updates", 0, &[0, 1]),
                Duration::from_millis(50),
            )
            .await
            .expect_err("timeout");
        assert!(!e.to_string().contains(PASSWORD), "{e}");
        channel.cleanup().await.expect("cleanup");
    }

    // Both shards protected, one URL with the password and one without.
    let list = format!(
        "{},{url}",
        with_userinfo(&url.replace("/0", ""), &format!(":{PASSWORD}"))
    );
    if let Err(e) = RedisChannel::connect(&list, "pw-job").await {
        assert!(!e.to_string().contains(PASSWORD), "{e}");
    }
}

/// Two jobs on the same shards, each with its own connections: neither sees the other's
/// messages or keys, and one's cleanup leaves the other's keys alone.
#[tokio::test]
async fn two_jobs_isolated() {
    let _serial = SERIAL.lock().await;
    let Some(urls) = redis_urls("two_jobs_isolated") else {
        return;
    };
    let list = format!("{},{}", urls[0], urls[1]);
    let a = RedisChannel::connect(&list, "iso-a")
        .await
        .expect("connect");
    let b = RedisChannel::connect(&list, "iso-a2")
        .await
        .expect("connect");
    a.cleanup().await.expect("cleanup");
    b.cleanup().await.expect("cleanup");
    for w in 0..3 {
        a.publish(MessageId::new("updates", 1, w), Bytes::from_static(b"a"))
            .await
            .expect("publish");
    }
    a.put_key("stop", Bytes::from_static(b"a"))
        .await
        .expect("put");
    b.publish(MessageId::new("updates", 1, 0), Bytes::from_static(b"b"))
        .await
        .expect("publish");
    match b
        .collect(
            StepMessages::new("updates", 1, &[0, 1, 2]),
            Duration::from_millis(100),
        )
        .await
    {
        Err(ChannelError::Timeout { missing, .. }) => assert_eq!(missing, [1, 2]),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(b.get_key("stop").await.expect("get").is_none());
    b.cleanup().await.expect("cleanup");
    let got = a
        .collect(
            StepMessages::new("updates", 1, &[0, 1, 2]),
            Duration::from_secs(5),
        )
        .await
        .expect("collect");
    assert_eq!(got, [&b"a"[..], b"a", b"a"]);
    assert_eq!(
        a.get_key("stop").await.expect("get").as_deref(),
        Some(&b"a"[..])
    );
    a.cleanup().await.expect("cleanup");
    for url in &urls[..2] {
        assert!(keys_of(url, "mlless:iso-a*").await.is_empty());
    }
}

/// Bad URLs and names are errors that say what is wrong.
#[tokio::test]
async fn invalid_urls_and_names() {
    let _serial = SERIAL.lock().await;
    for (urls, needle) in [
        ("", "no Redis URL"),
        (" , ", "no Redis URL"),
        ("http://127.0.0.1:6379", "not a Redis URL"),
        ("127.0.0.1:6379", "not a Redis URL"),
        ("redis://127.0.0.1:6379/notadb", "invalid Redis URL"),
        (
            "redis://:pw@127.0.0.1:1,redis://:pw@127.0.0.1:1",
            "listed twice",
        ),
    ] {
        let e = connect_error(RedisChannel::connect(urls, "job").await);
        let message = e.to_string();
        assert!(
            matches!(e, ChannelError::InvalidUrl { .. }),
            "{urls}: {message}"
        );
        assert!(message.contains(needle), "{urls}: {message}");
        assert!(!message.contains(":pw@"), "{urls}: {message}");
    }
    let port = free_port();
    for job in ["a:b", "", "a/b", "a*"] {
        let e =
            connect_error(RedisChannel::connect(&format!("redis://127.0.0.1:{port}"), job).await);
        assert!(
            matches!(e, ChannelError::InvalidName { what: "job id", .. }),
            "{job:?}: {e}"
        );
    }
    let Some(urls) = redis_urls("invalid_urls_and_names (names)") else {
        return;
    };
    let channel = RedisChannel::connect(&urls[0], "names")
        .await
        .expect("connect");
    for topic in ["keys", "a:b", "a/b", ""] {
        let e = channel
            .publish(MessageId::new(topic, 0, 0), Bytes::new())
            .await
            .expect_err("invalid topic");
        assert!(
            matches!(e, ChannelError::InvalidName { what: "topic", .. }),
            "{topic:?}: {e}"
        );
    }
    assert!(matches!(
        channel.for_job("x:y"),
        Err(ChannelError::InvalidName { .. })
    ));
    let e = channel
        .put_key("", Bytes::new())
        .await
        .expect_err("empty key");
    assert!(
        matches!(e, ChannelError::InvalidName { what: "key", .. }),
        "{e}"
    );
}

/// `rediss://` against a server that does not speak TLS fails clearly and in bounded time.
#[tokio::test]
async fn tls_against_a_plain_server_fails_clearly() {
    let _serial = SERIAL.lock().await;
    let Some(urls) = redis_urls("tls_against_a_plain_server_fails_clearly") else {
        return;
    };
    let tls = urls[0].replacen("redis://", "rediss://", 1);
    let started = Instant::now();
    let e = connect_error(RedisChannel::connect(&tls, "job").await);
    let elapsed = started.elapsed();
    eprintln!("TLS against plain: {e} (after {elapsed:?})");
    assert!(e.to_string().contains(host_port(&urls[0])), "{e}");
    assert!(e.to_string().contains("TLS"), "{e}");
    assert!(
        elapsed < CONNECT_TIMEOUT + Duration::from_secs(1),
        "{elapsed:?}"
    );
}

/// Connections killed by the server (failover, idle timeout, a function thawed after a long
/// freeze): publish, keys and a collect already waiting all carry on over new connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_killed_connections() {
    let Some(urls) = redis_urls("survives_killed_connections") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let channel = RedisChannel::connect(&urls[0], "kill-test")
        .await
        .expect("connect");
    channel.cleanup().await.expect("cleanup");
    channel
        .publish(MessageId::new("u", 0, 0), Bytes::from_static(b"0"))
        .await
        .expect("publish");
    let reader = {
        let channel = channel.clone();
        tokio::spawn(async move {
            channel
                .collect(StepMessages::new("u", 0, &[0, 1]), Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut admin = direct(&urls[0]).await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut admin)
        .await
        .expect("CLIENT KILL");
    assert!(killed >= 2, "killed {killed} connections");
    tokio::time::sleep(Duration::from_millis(50)).await;
    channel
        .publish(MessageId::new("u", 0, 1), Bytes::from_static(b"1"))
        .await
        .expect("publish after the kill");
    let got = reader
        .await
        .expect("join")
        .expect("collect across the kill");
    assert_eq!(got, [&b"0"[..], b"1"]);
    channel
        .put_key("k", Bytes::from_static(b"v"))
        .await
        .expect("put_key");
    channel.cleanup().await.expect("cleanup");
}

/// `MLLESS_TEST_REDIS_PASSWORD_URL` with its password, and the password: the variable is the
/// URL without it (`scripts/test.sh`, password [`PASSWORD`]) or, if it has one, as given.
fn protected_url(test: &str) -> Option<(String, String)> {
    let url = password_url(test)?;
    let (_, rest) = url.split_once("://").expect("a URL with a scheme");
    match rest.rsplit_once('@') {
        Some((userinfo, _)) => {
            let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
            Some((url.clone(), password.to_string()))
        }
        None => Some((
            with_userinfo(&url, &format!(":{PASSWORD}")),
            PASSWORD.to_string(),
        )),
    }
}

/// Asserts that neither the message nor the `Debug` of `e` contains `secret`.
fn assert_no_secret(e: &ChannelError, secret: &str) {
    let (message, debug) = (e.to_string(), format!("{e:?}"));
    assert!(
        !message.contains(secret),
        "the message shows the secret: {message}"
    );
    assert!(
        !debug.contains(secret),
        "the Debug shows the secret: {debug}"
    );
}

/// Malformed or unreachable URLs with a password: the errors never quote it. Needs no server.
#[tokio::test]
async fn channel_errors_never_show_a_password() {
    let secret = "pw-Zq81-never-shown";
    let store = mlless_store::Store::open("memory://redis-secret-errors").expect("store");
    for url in [
        format!("redis://:{secret}@127.0.0.1:notaport"),
        format!("redis://user:{secret}@127.0.0.1:1"),
        format!("rediss://:{secret}@127.0.0.1:1/0"),
        format!("redis://:{secret}@127.0.0.1:1,redis://:{secret}@127.0.0.1:2"),
        format!("redis://:{secret}@127.0.0.1:1,redis://:{secret}@127.0.0.1:1"),
        format!("redis://:{secret}"),
        format!("redis:/:{secret}@127.0.0.1:1"),
        format!("redis+x://:{secret}@127.0.0.1:1"),
        format!("memcached://u:{secret}@127.0.0.1:1"),
        format!("memcached://127.0.0.1:1?token={secret}"),
        format!("s3://key:{secret}@bucket/x"),
    ] {
        let e = mlless_store::open_channel(Some(&url), &store, "secret-job")
            .await
            .expect_err(&mlless_store::redact_url(&url));
        eprintln!("{e}");
        assert_no_secret(&e, secret);
    }
}

/// A password-protected server: wrong passwords (also percent-encoded ones), a database out of
/// range, an invalid job id and a timeout with the right password — no error text, `Debug`,
/// `describe()` or `Debug` of the channel shows the password.
#[tokio::test]
async fn errors_with_a_password_url_never_show_it() {
    let _serial = SERIAL.lock().await;
    let Some((url, password)) = protected_url("errors_with_a_password_url_never_show_it") else {
        return;
    };
    let server = host_only(&url)
        .split('/')
        .take(3)
        .collect::<Vec<_>>()
        .join("/");
    let (_, rest) = url.split_once("://").expect("a URL with a scheme");
    let (userinfo, _) = rest.rsplit_once('@').expect("a URL with a password");

    // Wrong passwords, as written and percent-encoded ('/' and '@' in them).
    for (wrong, shown) in [
        (
            ":wr0ng%2Fsecret%40x",
            ["wr0ng%2Fsecret%40x", "wr0ng/secret@x"],
        ),
        ("default:wr0ng-secret", ["wr0ng-secret", "wr0ng-secret"]),
    ] {
        let e =
            connect_error(RedisChannel::connect(&with_userinfo(&server, wrong), "pw-errors").await);
        eprintln!("wrong password: {e}");
        for s in shown {
            assert_no_secret(&e, s);
        }
    }

    // A database that does not exist, with the right password.
    let bad_db = with_userinfo(&format!("{server}/999"), userinfo);
    let e = connect_error(RedisChannel::connect(&bad_db, "pw-errors").await);
    eprintln!("bad database: {e}");
    assert_no_secret(&e, &password);

    // An invalid job id.
    let e = connect_error(RedisChannel::connect(&url, "bad:job").await);
    assert_no_secret(&e, &password);

    // Through `open_channel`, as the runtime opens it: describe, Debug, a timeout, a bad key.
    let store = mlless_store::Store::open("memory://redis-secret-errors-2").expect("store");
    let channel = mlless_store::open_channel(Some(&url), &store, "pw-errors")
        .await
        .expect("connect with the password");
    assert!(
        !channel.describe().contains(&password),
        "{}",
        channel.describe()
    );
    assert!(!format!("{channel:?}").contains(&password), "{channel:?}");
    let e = channel
        .collect(
            StepMessages::new("updates", 0, &[0]),
            Duration::from_millis(20),
        )
        .await
        .expect_err("timeout");
    assert_no_secret(&e, &password);
    let e = channel
        .put_key("", Bytes::from_static(b"x"))
        .await
        .expect_err("empty key");
    assert_no_secret(&e, &password);
    channel.cleanup().await.expect("cleanup");
}

/// `redis://host:port[/db]` without any userinfo.
fn host_only(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    format!("{scheme}://{rest}")
}
