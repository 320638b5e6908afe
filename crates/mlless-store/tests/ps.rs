//! The channel conformance suite against one and two parameter servers started here on
//! loopback, and what makes the server safe to leave running: its secret, its limits, malformed
//! frames, and what a client sees when a server dies or comes back empty.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mlless_store::ps::wire::{self, Request, Response};
use mlless_store::ps::{PsLimits, PsServer};
use mlless_store::{
    Channel, ChannelError, MessageId, PsChannel, RetryingChannel, StepExchange, StepMessages,
    conformance,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

const SECRET: &str = "test-secret-0123";
const PATIENT: Duration = Duration::from_secs(30);

/// A server serving on a task of this test.
struct Running {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Running {
    async fn start(addr: &str, limits: PsLimits) -> Running {
        let server = PsServer::bind(addr, SECRET, limits).await.expect("bind");
        let addr = server.local_addr();
        let task = tokio::spawn(async move {
            if let Err(e) = server.serve().await {
                panic!("server failed: {e}");
            }
        });
        Running { addr, task }
    }

    /// Stops the server: its task is aborted, which closes every connection.
    async fn kill(self) -> SocketAddr {
        self.task.abort();
        let _ = self.task.await;
        self.addr
    }

    fn url(&self) -> String {
        format!("ps://:{SECRET}@{}", self.addr)
    }
}

fn urls(servers: &[&Running]) -> String {
    servers
        .iter()
        .map(|s| s.url())
        .collect::<Vec<_>>()
        .join(",")
}

async fn connect(url: &str, job: &str) -> PsChannel {
    match PsChannel::connect(url, job).await {
        Ok(channel) => channel,
        Err(e) => panic!("connect to {url}: {e}"),
    }
}

async fn conformance_on(url: &str) {
    let base = connect(url, "conformance-base").await;
    let factory =
        move |job: &str| -> Arc<dyn Channel> { Arc::new(base.for_job(job).expect("valid job id")) };
    conformance::run_all(&factory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_one_server() {
    let server = Running::start("127.0.0.1:0", PsLimits::default()).await;
    conformance_on(&server.url()).await;
    server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_two_servers() {
    let a = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let b = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let url = urls(&[&a, &b]);
    conformance_on(&url).await;
    // Both servers hold messages of a step of 16 workers.
    let channel = connect(&url, "spread").await;
    for w in 0..16 {
        channel
            .publish(MessageId::new("updates", 0, w), Bytes::from(vec![w as u8]))
            .await
            .expect("publish");
    }
    for server in [&a, &b] {
        let alone = connect(&server.url(), "spread").await;
        let polled = alone
            .poll(StepMessages::new(
                "updates",
                0,
                &(0..16).collect::<Vec<_>>(),
            ))
            .await;
        let present = polled.expect("poll").iter().flatten().count();
        assert!(
            (1..16).contains(&present),
            "{present} of 16 on {}",
            server.addr
        );
    }
    channel.cleanup().await.expect("cleanup");
    a.kill().await;
    b.kill().await;
}

/// The servers average: with 8 workers whose updates touch the same 4,000 parameters, each
/// worker receives about one update's bytes (the mean, in one message per server), where on a
/// channel that only carries messages it receives its 7 peers' updates; both means are the
/// same bits. With two servers each averages its half of the parameters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_average_so_a_worker_receives_one_mean() {
    use mlless_core::{SparseVector, WireDelta};
    use mlless_store::{InProcessChannel, Share};
    let a = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let b = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let (dim, peers): (usize, Vec<u32>) = (50_000, (0..8).collect());
    let share = |w: u32| {
        let indices: Vec<u32> = (0..4_000).map(|i| i * 12 + 1).collect();
        let values = indices.iter().map(|&i| ((i + w) as f32).cos()).collect();
        Share {
            header: Bytes::from(vec![w as u8; 10]),
            delta: WireDelta::Sparse(SparseVector::from_parts(indices, values).expect("ascending")),
            dim,
        }
    };
    let average_all = |channel: Arc<dyn Channel>| {
        let peers = peers.clone();
        async move {
            let calls = peers.iter().map(|&w| {
                let channel = channel.clone();
                let peers = peers.clone();
                async move {
                    let exchange = StepExchange {
                        topic: "means",
                        step: 0,
                        from: w,
                        peers: &peers,
                        timeout: PATIENT,
                    };
                    channel
                        .publish_and_average(exchange, share(w))
                        .await
                        .expect("average")
                }
            });
            futures::future::join_all(calls).await
        }
    };
    let workers_average = average_all(Arc::new(InProcessChannel::new("averaging"))).await;
    let one_share = workers_average[0].bytes_sent;
    for (name, url, servers) in [
        ("one server", a.url(), 1),
        ("two servers", urls(&[&a, &b]), 2),
    ] {
        let channel: Arc<dyn Channel> = Arc::new(connect(&url, "averaging").await);
        let averaged = average_all(channel.clone()).await;
        for (w, (here, there)) in averaged.iter().zip(&workers_average).enumerate() {
            assert!(here.mean == there.mean, "{name}: worker {w}'s mean differs");
            assert_eq!(here.headers, there.headers, "{name}: worker {w}");
            assert_eq!(here.messages_received, servers, "{name}: worker {w}");
            assert!(
                here.bytes_received < 2 * one_share && there.bytes_received >= 7 * one_share,
                "{name}: worker {w} received {} bytes through the servers, {} averaging \
                 itself ({one_share} a share)",
                here.bytes_received,
                there.bytes_received
            );
        }
        channel.cleanup().await.expect("cleanup");
    }
    a.kill().await;
    b.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_without_the_secret_are_refused() {
    let server = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let wrong = format!("ps://:not-the-secret@{}", server.addr);
    let error = PsChannel::connect(&wrong, "job")
        .await
        .expect_err("refused");
    let text = error.to_string();
    assert!(matches!(error, ChannelError::InvalidUrl { .. }), "{text}");
    assert!(text.contains("wrong secret"), "{text}");
    assert!(!text.contains("not-the-secret"), "secret shown: {text}");
    assert!(text.contains(&server.addr.to_string()), "{text}");

    let missing = format!("ps://{}", server.addr);
    let error = PsChannel::connect(&missing, "job")
        .await
        .expect_err("refused");
    assert!(error.to_string().contains("no secret"), "{error}");

    // A raw client that skips the hello gets nothing but a refusal.
    let mut raw = TcpStream::connect(server.addr).await.expect("connect");
    let request = Request::GetKey { key: "k".into() };
    wire::write_frame(&mut raw, &request).await.expect("write");
    let answer: Response = wire::read_frame(&mut raw, 1 << 20).await.expect("answer");
    assert!(matches!(answer, Response::Refused(_)), "{answer:?}");
    server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_kept_apart() {
    let server = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let a = connect(&server.url(), "job-a").await;
    let b = connect(&server.url(), "job-b").await;
    a.publish(MessageId::new("updates", 1, 0), Bytes::from_static(b"a"))
        .await
        .expect("publish");
    a.put_key("stop", Bytes::from_static(b"a"))
        .await
        .expect("put");
    assert_eq!(
        b.poll(StepMessages::new("updates", 1, &[0]))
            .await
            .expect("poll"),
        [None]
    );
    assert_eq!(b.get_key("stop").await.expect("get"), None);
    b.cleanup().await.expect("cleanup");
    assert_eq!(
        a.collect(StepMessages::new("updates", 1, &[0]), PATIENT)
            .await
            .expect("collect"),
        [Bytes::from_static(b"a")]
    );
    server.kill().await;
}

/// Reads until the server closes the connection; fails if it answers anything.
async fn closed_by_server(raw: &mut TcpStream) {
    let mut rest = Vec::new();
    let read = tokio::time::timeout(PATIENT, raw.read_to_end(&mut rest)).await;
    match read {
        Ok(Ok(_)) | Ok(Err(_)) => {}
        Err(_) => panic!("the server kept a bad connection open"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_and_greedy_clients_harm_nobody_else() {
    let limits = PsLimits {
        max_frame_bytes: 1 << 20,
        max_job_bytes: 4 << 20,
        ..PsLimits::default()
    };
    let server = Running::start("127.0.0.1:0", limits).await;
    let good = connect(&server.url(), "good").await;
    good.publish(MessageId::new("updates", 0, 0), Bytes::from_static(b"kept"))
        .await
        .expect("publish");

    // Garbage instead of a hello.
    let mut raw = TcpStream::connect(server.addr).await.expect("connect");
    raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789")
        .await
        .expect("write");
    closed_by_server(&mut raw).await;

    // A truncated frame after a good hello: the header promises more than comes.
    let mut raw = TcpStream::connect(server.addr).await.expect("connect");
    let hello = Request::Hello {
        secret: SECRET.into(),
        job: "greedy".into(),
    };
    wire::write_frame(&mut raw, &hello).await.expect("hello");
    let welcome: Response = wire::read_frame(&mut raw, 1 << 20).await.expect("welcome");
    assert!(matches!(welcome, Response::Welcome { .. }), "{welcome:?}");
    let frame = wire::encode(&Request::Cleanup).expect("encode");
    raw.write_all(&frame[..frame.len() - 1])
        .await
        .expect("write");
    raw.shutdown().await.expect("shutdown");
    closed_by_server(&mut raw).await;

    // An oversized frame: refused from its header, before its body is read.
    let mut raw = TcpStream::connect(server.addr).await.expect("connect");
    wire::write_frame(&mut raw, &hello).await.expect("hello");
    let _: Response = wire::read_frame(&mut raw, 1 << 20).await.expect("welcome");
    let mut header = frame[..wire::HEADER_LEN].to_vec();
    header[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    raw.write_all(&header).await.expect("write");
    let refusal: Response = wire::read_frame(&mut raw, 1 << 20).await.expect("refusal");
    assert!(
        matches!(&refusal, Response::Refused(r) if r.contains("--max-frame-bytes")),
        "{refusal:?}"
    );
    closed_by_server(&mut raw).await;

    // A client that publishes more than its job may hold is refused, clearly and for good.
    let greedy = connect(&server.url(), "greedy").await;
    let mut refusal = None;
    for w in 0..8 {
        let payload = Bytes::from(vec![7u8; 900 << 10]);
        if let Err(e) = greedy
            .publish(MessageId::new("updates", 0, w), payload)
            .await
        {
            refusal = Some(e);
            break;
        }
    }
    let refusal = refusal.expect("the job's limit was never reached");
    assert!(!refusal.is_transient(), "{refusal}");
    assert!(refusal.to_string().contains("--max-job-bytes"), "{refusal}");
    let big = greedy
        .publish(MessageId::new("big", 0, 0), Bytes::from(vec![0u8; 2 << 20]))
        .await;
    let big = big.expect_err("a frame over the limit");
    assert!(!big.is_transient(), "{big}");
    assert!(big.to_string().contains("--max-frame-bytes"), "{big}");

    // The good client was not disturbed.
    assert_eq!(
        good.collect(StepMessages::new("updates", 0, &[0]), PATIENT)
            .await
            .expect("collect"),
        [Bytes::from_static(b"kept")]
    );
    greedy.cleanup().await.expect("cleanup frees the job");
    greedy
        .publish(
            MessageId::new("updates", 1, 0),
            Bytes::from(vec![7u8; 900 << 10]),
        )
        .await
        .expect("room again after cleanup");
    server.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_named_within_the_grace() {
    let a = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let b = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let url = urls(&[&a, &b]);
    let channel = RetryingChannel::new(connect(&url, "killed").await, Duration::from_millis(300));
    channel
        .put_key("k", Bytes::from_static(b"v"))
        .await
        .expect("put");
    let dead = b.kill().await;
    let all: Vec<u32> = (0..8).collect();
    let error = channel
        .collect(StepMessages::new("updates", 0, &all), PATIENT)
        .await
        .expect_err("a server is down");
    let text = error.to_string();
    assert!(matches!(error, ChannelError::Unavailable { .. }), "{text}");
    assert!(text.contains(&format!("ps://{dead}")), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    a.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_is_an_error_not_an_empty_model() {
    let server = Running::start("127.0.0.1:0", PsLimits::default()).await;
    let channel = RetryingChannel::new(connect(&server.url(), "restarted").await, PATIENT);
    channel
        .publish(
            MessageId::new("model", 0, 0),
            Bytes::from_static(b"weights"),
        )
        .await
        .expect("publish");
    let addr = server.kill().await;
    let again = Running::start(&addr.to_string(), PsLimits::default()).await;
    let error = channel
        .poll(StepMessages::new("model", 0, &[0]))
        .await
        .expect_err("the messages are gone");
    let text = error.to_string();
    assert!(!error.is_transient(), "{text}");
    assert!(text.contains("restarted"), "{text}");
    assert!(text.contains(&format!("ps://{addr}")), "{text}");
    again.kill().await;
}
