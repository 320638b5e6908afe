//! Channel outages: a server restarted within the grace is ridden out, one that stays away longer
//! fails with `ChannelError::Unavailable` naming its address.
//!
//! Every test starts its own `redis-server` or `memcached` on a free loopback port (with its own
//! temporary directory) and stops and restarts it; a test whose server binary is not on `PATH`
//! prints that it was skipped and passes. The conformance suite through the decorator, which
//! needs no server, is in `tests/channel.rs`.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlless_store::{
    Channel, ChannelError, ChannelOptions, MessageId, StepMessages, Store, open_channel_with,
};

/// A loopback port with nothing listening.
fn free_port() -> u16 {
    let socket = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    socket.local_addr().expect("addr").port()
}

fn on_path(binary: &str) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Redis,
    Memcached,
}

/// A server this test started, on its own port and directory; stopped when dropped.
struct Server {
    kind: Kind,
    port: u16,
    dir: tempfile::TempDir,
    child: Mutex<Option<Child>>,
}

impl Server {
    /// Starts a server of `kind`, or `None` (after a skip notice) if its binary is missing.
    fn start(kind: Kind, test: &str) -> Option<Arc<Server>> {
        let binary = match kind {
            Kind::Redis => "redis-server",
            Kind::Memcached => "memcached",
        };
        if !on_path(binary) {
            eprintln!("skipped {test}: {binary} is not on PATH");
            return None;
        }
        let server = Arc::new(Server {
            kind,
            port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            child: Mutex::new(None),
        });
        server.up();
        Some(server)
    }

    fn url(&self) -> String {
        match self.kind {
            Kind::Redis => format!("redis://127.0.0.1:{}", self.port),
            Kind::Memcached => format!("memcached://127.0.0.1:{}", self.port),
        }
    }

    /// Starts the server process and waits until it accepts connections.
    fn up(&self) {
        let port = self.port.to_string();
        let dir: &Path = self.dir.path();
        let mut cmd = match self.kind {
            Kind::Redis => {
                let mut cmd = Command::new("redis-server");
                cmd.args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
                    .args(["--appendonly", "no", "--dbfilename", "dump.rdb"])
                    .arg("--dir")
                    .arg(dir);
                cmd
            }
            Kind::Memcached => {
                let mut cmd = Command::new("memcached");
                cmd.args(["-p", &port, "-l", "127.0.0.1", "-U", "0", "-m", "64"]);
                if is_root() {
                    cmd.args(["-u", "root"]);
                }
                cmd
            }
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server");
        *self.child.lock().expect("lock") = Some(child);
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the server on port {} did not come up",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the server: Redis saves its data set first (so it is back after [`up`]);
    /// Memcached loses everything.
    fn down(&self) {
        let Some(mut child) = self.child.lock().expect("lock").take() else {
            return;
        };
        if self.kind == Kind::Redis {
            let saved = Command::new("redis-cli")
                .args(["-p", &self.port.to_string(), "shutdown", "save"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !saved.is_ok_and(|s| s.success()) {
                let _ = child.kill();
            }
        } else {
            let _ = child.kill();
        }
        let _ = child.wait();
    }

    /// Restarts the server after `delay`, in the background.
    fn restart_after(self: &Arc<Self>, delay: Duration) -> std::thread::JoinHandle<()> {
        let server = Arc::clone(self);
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            server.up();
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.lock().ok().and_then(|mut c| c.take()) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.trim_ascii() == b"0")
}

async fn open(server: &Server, job: &str, grace: Duration) -> Arc<dyn Channel> {
    let store = Store::open(&format!("memory://outage-{job}")).expect("store");
    let options = ChannelOptions::default().with_grace(grace);
    open_channel_with(Some(&server.url()), &store, job, options)
        .await
        .expect("open the channel")
}

/// Checks `result` is the `Unavailable` error of `server`, and when it came.
fn assert_unavailable<T: std::fmt::Debug>(
    result: Result<T, ChannelError>,
    server: &Server,
    started: Instant,
    grace: Duration,
) {
    let elapsed = started.elapsed();
    let address = format!("127.0.0.1:{}", server.port);
    match result {
        Err(e @ ChannelError::Unavailable { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&address), "{text}");
            assert!(text.contains("--channel-grace 1 s"), "{text}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(
        elapsed >= grace,
        "gave up after {elapsed:?}, before the grace"
    );
    // The grace, plus one attempt (a connection refused fails at once) and some slack.
    assert!(
        elapsed < grace + Duration::from_secs(8),
        "gave up only after {elapsed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_within_the_grace_is_survived() {
    let Some(server) = Server::start(Kind::Redis, "redis_restart_within_the_grace_is_survived")
    else {
        return;
    };
    let channel = open(&server, "restart", Duration::from_secs(10)).await;
    channel
        .publish(MessageId::new("u", 0, 0), Bytes::from_static(b"before"))
        .await
        .expect("publish");

    // The server goes away between a publish and the collect, and comes back with its data.
    let start = Instant::now();
    server.down();
    let restarted = server.restart_after(Duration::from_secs(1));
    let got = channel
        .collect(StepMessages::new("u", 0, &[0]), Duration::from_secs(8))
        .await
        .expect("collect across the restart");
    assert_eq!(got, [&b"before"[..]]);
    assert!(start.elapsed() >= Duration::from_millis(900));
    restarted.join().expect("restart");

    // A publish while the server is down goes through once it is back.
    server.down();
    let restarted = server.restart_after(Duration::from_secs(1));
    channel
        .publish(MessageId::new("u", 1, 1), Bytes::from_static(b"during"))
        .await
        .expect("publish across the restart");
    restarted.join().expect("restart");
    let got = channel
        .collect(StepMessages::new("u", 1, &[1]), Duration::from_secs(2))
        .await
        .expect("collect");
    assert_eq!(got, [&b"during"[..]]);

    // A collect whose timeout runs out during the outage says what is missing once the
    // server answers again (it does not extend the wait for messages beyond the outage).
    server.down();
    let restarted = server.restart_after(Duration::from_secs(1));
    let start = Instant::now();
    match channel
        .collect(
            StepMessages::new("u", 1, &[1, 2]),
            Duration::from_millis(200),
        )
        .await
    {
        Err(ChannelError::Timeout { missing, .. }) => assert_eq!(missing, [2]),
        other => panic!("expected a timeout, got {other:?}"),
    }
    // It answers once the server is back, not after the whole grace (10 s).
    assert!(start.elapsed() < Duration::from_secs(10));
    restarted.join().expect("restart");

    // Keys and the rest work on the new connections.
    channel
        .put_key("stop", Bytes::from_static(b"1"))
        .await
        .expect("put_key");
    assert_eq!(
        channel.get_key("stop").await.expect("get_key").as_deref(),
        Some(&b"1"[..])
    );
    channel
        .discard(StepMessages::new("u", 0, &[0]))
        .await
        .expect("discard");
    channel.cleanup().await.expect("cleanup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_longer_than_the_grace_fails_naming_the_server() {
    let Some(server) = Server::start(
        Kind::Redis,
        "redis_outage_longer_than_the_grace_fails_naming_the_server",
    ) else {
        return;
    };
    let grace = Duration::from_secs(1);
    let channel = open(&server, "long", grace).await;
    channel
        .publish(MessageId::new("u", 0, 0), Bytes::from_static(b"x"))
        .await
        .expect("publish");
    // A collect that blocks in XREAD when the server goes away.
    let reader = {
        let channel = Arc::clone(&channel);
        tokio::spawn(async move {
            let start = Instant::now();
            let result = channel
                .collect(StepMessages::new("u", 0, &[0, 1]), Duration::from_secs(30))
                .await;
            (start, result)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.down();

    let start = Instant::now();
    let result = channel
        .publish(MessageId::new("u", 1, 0), Bytes::from_static(b"y"))
        .await;
    assert_unavailable(result, &server, start, grace);
    let start = Instant::now();
    let result = channel.get_key("k").await;
    assert_unavailable(result, &server, start, grace);
    let (_, result) = reader.await.expect("reader");
    match result {
        Err(e @ ChannelError::Unavailable { .. }) => {
            assert!(
                e.to_string()
                    .contains(&format!("127.0.0.1:{}", server.port))
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    // Request errors are not retried.
    let start = Instant::now();
    match channel
        .publish(MessageId::new("a:b", 0, 0), Bytes::new())
        .await
    {
        Err(ChannelError::InvalidName { .. }) => {}
        other => panic!("expected InvalidName, got {other:?}"),
    }
    // (Retried, it would have ended in `Unavailable` after the grace.)
    let _ = start;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_restart_within_the_grace_is_survived() {
    let Some(server) = Server::start(
        Kind::Memcached,
        "memcached_restart_within_the_grace_is_survived",
    ) else {
        return;
    };
    let channel = open(&server, "restart", Duration::from_secs(10)).await;
    channel
        .publish(MessageId::new("u", 0, 0), Bytes::from_static(b"before"))
        .await
        .expect("publish");
    assert_eq!(
        channel
            .collect(StepMessages::new("u", 0, &[0]), Duration::from_secs(2))
            .await
            .expect("collect"),
        [&b"before"[..]]
    );

    // Memcached loses its items with the restart: only operations after it are checked.
    let start = Instant::now();
    server.down();
    let restarted = server.restart_after(Duration::from_secs(1));
    // Larger than an item: chunks, then the head, across the outage.
    let big = Bytes::from(vec![7u8; 3 << 20]);
    channel
        .publish(MessageId::new("u", 1, 0), big.clone())
        .await
        .expect("publish across the restart");
    assert!(start.elapsed() >= Duration::from_millis(900));
    restarted.join().expect("restart");
    let got = channel
        .collect(StepMessages::new("u", 1, &[0]), Duration::from_secs(2))
        .await
        .expect("collect");
    assert_eq!(got, [big]);

    server.down();
    let restarted = server.restart_after(Duration::from_secs(1));
    assert_eq!(channel.get_key("k").await.expect("get_key"), None);
    restarted.join().expect("restart");
    channel
        .put_key("k", Bytes::from_static(b"v"))
        .await
        .expect("put_key");
    assert_eq!(
        channel.get_key("k").await.expect("get_key").as_deref(),
        Some(&b"v"[..])
    );
    channel.cleanup().await.expect("cleanup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memcached_outage_longer_than_the_grace_fails_naming_the_server() {
    let Some(server) = Server::start(
        Kind::Memcached,
        "memcached_outage_longer_than_the_grace_fails_naming_the_server",
    ) else {
        return;
    };
    let grace = Duration::from_secs(1);
    let channel = open(&server, "long", grace).await;
    channel
        .put_key("k", Bytes::from_static(b"v"))
        .await
        .expect("put_key");
    server.down();
    let start = Instant::now();
    let result = channel
        .publish(MessageId::new("u", 0, 0), Bytes::from_static(b"x"))
        .await;
    assert_unavailable(result, &server, start, grace);
    let start = Instant::now();
    let result = channel
        .collect(StepMessages::new("u", 0, &[0]), Duration::from_secs(30))
        .await;
    assert_unavailable(result, &server, start, grace);
}
