//! The channel conformance suite on every local backend (also through the retry decorator), and
//! how `open_channel` treats URLs, including those of backends this build left out.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mlless_store::{
    BuiltBackend, Channel, ChannelError, ChannelScheme, CloudLatency, EmulatedChannel,
    InProcessChannel, MessageId, ObjectStoreChannel, RequestCounter, RequestCounts,
    RetryingChannel, StepMessages, Store, conformance, open_channel,
};

fn factory(store: Store) -> impl Fn(&str) -> Arc<dyn Channel> {
    move |job: &str| -> Arc<dyn Channel> {
        Arc::new(ObjectStoreChannel::new(store.clone(), job).expect("channel"))
    }
}

/// On a local directory, woken by file notifications (the default) and polling only: the same
/// suite, and cleanup leaves no files and no empty directories behind either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_file() {
    for wake_ups in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path().to_str().expect("utf-8")).expect("open");
        let factory = move |job: &str| -> Arc<dyn Channel> {
            let channel = ObjectStoreChannel::new(store.clone(), job)
                .expect("channel")
                .with_wake_ups(wake_ups);
            if cfg!(target_os = "linux") {
                assert_eq!(channel.wakes_up(), wake_ups, "inotify is there on Linux");
            }
            Arc::new(channel)
        };
        conformance::run_all(&factory).await;
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
        assert!(left.is_empty(), "wake-ups {wake_ups}: left {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory() {
    let store = Store::open("memory://channel-conformance").expect("open");
    conformance::run_all(&factory(store.clone())).await;
    assert!(store.list("").await.expect("list").is_empty());
}

/// The in-process channel, on both kinds of runtime: a fresh one per job, as its functions
/// would share one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_in_process() {
    let factory = |job: &str| -> Arc<dyn Channel> { Arc::new(InProcessChannel::new(job)) };
    conformance::run_all(&factory).await;
}

#[tokio::test(flavor = "current_thread")]
async fn conformance_in_process_single_thread() {
    let factory = |job: &str| -> Arc<dyn Channel> { Arc::new(InProcessChannel::new(job)) };
    conformance::run_all(&factory).await;
}

#[tokio::test(flavor = "current_thread")]
async fn conformance_memory_single_thread() {
    let store = Store::open("memory://channel-conformance-st").expect("open");
    conformance::run_all(&factory(store)).await;
}

/// The decorator changes nothing while the backend is up: the conformance suite through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_the_decorator() {
    let store = Store::open("memory://outage-conformance").expect("open");
    let factory = move |job: &str| -> Arc<dyn Channel> {
        let inner = ObjectStoreChannel::new(store.clone(), job).expect("channel");
        Arc::new(RetryingChannel::new(inner, Duration::from_secs(1)))
    };
    conformance::run_all(&factory).await;
}

/// The latency decorator changes what a channel takes, not what it does: the suite through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_through_the_latency_decorator() {
    let store = Store::open("memory://emulated-conformance").expect("open");
    let latency = CloudLatency {
        name: "test".into(),
        request_ms: 0.1,
        mb_per_s: 1_000.0,
        reads_at_once: Some(2),
    };
    let factory = move |job: &str| -> Arc<dyn Channel> {
        let inner = ObjectStoreChannel::new(store.clone(), job).expect("channel");
        Arc::new(EmulatedChannel::new(Arc::new(inner), latency.clone()))
    };
    conformance::run_all(&factory).await;
}

/// The decorators add what they are configured to add: a publish of 200 kB at 40 ms a request
/// and 10 MB/s takes 40 + 20 ms; a collect of two such messages 40 + 40 ms; a store GET of the
/// same 200 kB 40 + 20 ms. The sleeps are floors; the bound above (3x) catches a model that
/// pays twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_latency_decorators_add_what_they_are_configured_to_add() {
    let latency = CloudLatency {
        name: "test".into(),
        request_ms: 40.0,
        mb_per_s: 10.0,
        reads_at_once: None,
    };
    let store = Store::open("memory://emulated-timing").expect("open");
    let inner = ObjectStoreChannel::new(store.clone(), "timing").expect("channel");
    let channel = EmulatedChannel::new(Arc::new(inner), latency.clone());
    assert!(channel.describe().ends_with("(emulating test)"));
    let payload = Bytes::from(vec![7u8; 200_000]);
    let within = |took: Duration, ms: u64, what: &str| {
        let want = Duration::from_millis(ms);
        assert!(
            took >= want && took < want * 3,
            "{what} took {took:?}, configured {want:?}"
        );
    };
    let started = std::time::Instant::now();
    channel
        .publish(MessageId::new("u", 0, 0), payload.clone())
        .await
        .expect("publish");
    within(started.elapsed(), 60, "a publish");
    channel
        .publish(MessageId::new("u", 0, 1), payload.clone())
        .await
        .expect("publish");
    let started = std::time::Instant::now();
    let got = channel
        .collect(StepMessages::new("u", 0, &[0, 1]), Duration::from_secs(5))
        .await
        .expect("collect");
    within(started.elapsed(), 80, "a collect of two");
    assert_eq!(got, [payload.clone(), payload.clone()]);
    channel.cleanup().await.expect("cleanup");

    // In memory and on a local directory (whose reads are files, not streams).
    let dir = tempfile::tempdir().expect("tempdir");
    let local = Store::open(dir.path().to_str().expect("utf-8")).expect("open");
    for store in [store, local] {
        let slow = store.with_latency(&latency);
        slow.put("blob", payload.clone()).await.expect("put");
        let started = std::time::Instant::now();
        assert_eq!(slow.get("blob").await.expect("get"), payload);
        within(started.elapsed(), 60, "a store GET");
        slow.delete("blob").await.expect("delete");
    }
}

#[tokio::test]
async fn default_channel_lives_in_the_run_store() {
    let store = Store::open("memory://default-channel").expect("open");
    let channel = open_channel(None, &store, "job-7").await.expect("open");
    assert_eq!(channel.describe(), "memory://default-channel/channel/job-7");
    channel
        .publish(MessageId::new("updates", 1, 2), Bytes::from_static(b"u"))
        .await
        .expect("publish");
    assert_eq!(
        store.list("channel").await.expect("list"),
        ["channel/job-7/updates/000000000001/00002"]
    );
    let same = open_channel(Some("store"), &store, "job-7")
        .await
        .expect("open");
    assert_eq!(same.describe(), channel.describe());
    channel.cleanup().await.expect("cleanup");
}

/// On Linux, the default channel of a run on a local directory lives in shared memory: its
/// files are made and removed at memory speed, and the channel's cleanup removes its job's
/// directory there.
#[tokio::test]
async fn the_default_channel_of_a_local_run_is_in_shared_memory() {
    if !cfg!(target_os = "linux") || !std::path::Path::new("/dev/shm").is_dir() {
        eprintln!("no /dev/shm: skipped");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path().to_str().expect("utf-8")).expect("open");
    let job = format!("job-shm-{}", std::process::id());
    let channel = open_channel(None, &store, &job).await.expect("open");
    let described = channel.describe();
    assert!(
        described.starts_with("file:///dev/shm/mlless-channel/") && described.ends_with(&job),
        "{described}"
    );
    channel
        .publish(MessageId::new("updates", 1, 0), Bytes::from_static(b"u"))
        .await
        .expect("publish");
    let path = described.trim_start_matches("file://").to_string();
    assert!(std::path::Path::new(&path).join("updates").is_dir());
    assert!(
        store.list("").await.expect("list").is_empty(),
        "nothing in the run's store"
    );
    channel.cleanup().await.expect("cleanup");
    assert!(
        !std::path::Path::new(&path).exists(),
        "cleanup removes the job's directory"
    );
}

#[tokio::test]
async fn channel_on_its_own_store() {
    let run = Store::open("memory://run-store").expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("utf-8").to_string();
    for url in [
        path.clone(),
        format!("file://{path}"),
        "memory://own-channel".to_string(),
    ] {
        let channel = open_channel(Some(&url), &run, "j").await.expect("open");
        channel
            .put_key("stop", Bytes::from_static(b"1"))
            .await
            .expect("put_key");
        assert!(channel.describe().ends_with("/j"), "{}", channel.describe());
        channel.cleanup().await.expect("cleanup");
    }
    assert!(run.list("").await.expect("list").is_empty());
}

#[tokio::test]
async fn unsupported_channel_schemes_are_clear_errors() {
    let store = Store::open("memory://unsupported").expect("open");
    for url in ["amqp://127.0.0.1:5672", "kafka://broker:9092", ""] {
        match open_channel(Some(url), &store, "j").await {
            Err(e @ ChannelError::InvalidUrl { .. }) => {
                let message = e.to_string();
                for scheme in [
                    "s3://",
                    "store",
                    "redis://",
                    "memcached://",
                    "ps://",
                    "dynamodb://",
                ] {
                    assert!(message.contains(scheme), "{message}");
                }
            }
            other => panic!("open_channel({url}) gave {other:?}"),
        }
    }
}

/// A backend that a feature left out still parses, and opening it is a typed error naming the
/// feature (no connection attempt, no fallback to another backend, no password shown). With
/// every feature on (the default) there is nothing to refuse: only the parsing is checked.
#[tokio::test]
async fn backends_left_out_are_typed_errors_naming_their_feature() {
    let store = Store::open("memory://not-built").expect("open");
    for (url, feature, built) in [
        (
            "redis://:not-built-pw@127.0.0.1:1,redis://127.0.0.1:2",
            "redis",
            cfg!(feature = "redis"),
        ),
        (
            "memcached://127.0.0.1:1",
            "memcached",
            cfg!(feature = "memcached"),
        ),
        ("s3://some-bucket/channel", "s3", cfg!(feature = "s3")),
    ] {
        let scheme = ChannelScheme::parse(Some(url)).expect("parses whatever the features");
        assert_eq!(scheme.required_feature(), Some(feature));
        assert_eq!(scheme.is_built(), built, "{url}");
        assert_eq!(mlless_store::built_features().contains(&feature), built);
        if built {
            continue;
        }
        match open_channel(Some(url), &store, "j").await {
            Err(e @ ChannelError::NotBuilt { feature: named, .. }) => {
                assert_eq!(named, feature);
                let message = e.to_string();
                assert!(
                    message.contains(&format!("built without the `{feature}` feature")),
                    "{message}"
                );
                assert!(!message.contains("not-built-pw"), "{message}");
                assert!(!e.is_transient());
            }
            other => panic!("open_channel({url}) gave {other:?}"),
        }
    }
    assert!(store.list("").await.expect("list").is_empty());
}

#[tokio::test]
async fn invalid_names_are_errors() {
    let store = Store::open("memory://invalid-names").expect("open");
    for job in ["", "a/b", "..", "x#1"] {
        match open_channel(None, &store, job).await {
            Err(ChannelError::InvalidName { what: "job id", .. }) => {}
            other => panic!("job id {job:?} gave {other:?}"),
        }
    }
    let channel = open_channel(None, &store, "j").await.expect("open");
    for topic in ["", "keys", "a/b"] {
        match channel
            .publish(MessageId::new(topic, 0, 0), Bytes::new())
            .await
        {
            Err(e @ ChannelError::InvalidName { .. }) => {
                assert!(e.to_string().contains(&channel.describe()), "{e}");
            }
            other => panic!("topic {topic:?} gave {other:?}"),
        }
    }
    assert!(matches!(
        channel.put_key("a//b", Bytes::new()).await,
        Err(ChannelError::Store(_))
    ));
}

#[tokio::test]
async fn a_channel_below_a_regular_file_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").expect("write");
    let url = file.join("channel").display().to_string();
    let store = Store::open("memory://below-file").expect("open");
    match open_channel(Some(&url), &store, "j").await {
        Err(e) => assert!(e.to_string().contains(&url), "{e}"),
        Ok(c) => panic!("opened {c:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_exchange_updates_for_many_steps() {
    // Four workers, broadcast pattern, each discarding its own message once the next step is
    // collected (so nobody needs it any more), as the runtime does.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path().to_str().expect("utf-8")).expect("open");
    let job = format!("many-{}", std::process::id());
    let channel: Arc<dyn Channel> = open_channel(None, &store, &job).await.expect("open");
    // Wherever the default channel is (in shared memory on Linux).
    let messages = Store::open(&channel.describe()).expect("the channel's store");
    let workers: Vec<u32> = (0..4).collect();
    let tasks: Vec<_> = workers
        .iter()
        .map(|&id| {
            let (channel, workers) = (Arc::clone(&channel), workers.clone());
            tokio::spawn(async move {
                let mut sum = 0u64;
                for step in 0..30u64 {
                    let update = Bytes::from((step * 10 + u64::from(id)).to_le_bytes().to_vec());
                    channel
                        .publish(MessageId::new("updates", step, id), update)
                        .await?;
                    let got = channel
                        .collect(
                            StepMessages::new("updates", step, &workers),
                            Duration::from_secs(20),
                        )
                        .await?;
                    for bytes in got {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&bytes);
                        sum += u64::from_le_bytes(b);
                    }
                    if step > 0 {
                        channel
                            .discard(StepMessages::new("updates", step - 1, &[id]))
                            .await?;
                    }
                }
                Ok::<u64, ChannelError>(sum)
            })
        })
        .collect();
    let expected: u64 = (0..30u64).map(|s| 4 * s * 10 + 6).sum();
    for task in tasks {
        assert_eq!(task.await.expect("join").expect("worker"), expected);
    }
    // The last step's messages can go only once everyone has collected them.
    assert_eq!(messages.list("").await.expect("list").len(), 4);
    channel
        .discard(StepMessages::new("updates", 29, &workers))
        .await
        .expect("discard");
    assert!(messages.list("").await.expect("list").is_empty());
    channel.cleanup().await.expect("cleanup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_survive_concurrent_discards_of_neighbouring_directories() {
    // On the local backend, discarding a step's last message removes the step's (and possibly
    // the topic's and job's) now-empty directories while other workers create them anew.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path().to_str().expect("utf-8")).expect("open");
    let job = format!("race-{}", std::process::id());
    // In shared memory on Linux.
    let channel: Arc<dyn Channel> = open_channel(None, &store, &job).await.expect("open");
    let messages = Store::open(&channel.describe()).expect("the channel's store");
    let tasks: Vec<_> = (0..4u32)
        .map(|id| {
            let channel = Arc::clone(&channel);
            tokio::spawn(async move {
                for step in 0..300u64 {
                    let topic = if step % 2 == 0 { "even" } else { "odd" };
                    channel
                        .publish(MessageId::new(topic, step, id), Bytes::from_static(b"x"))
                        .await?;
                    channel
                        .discard(StepMessages::new(topic, step, &[id]))
                        .await?;
                }
                Ok::<(), ChannelError>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("join").expect("publish/discard");
    }
    assert!(messages.list("").await.expect("list").is_empty());
    channel.cleanup().await.expect("cleanup");
}

/// The requests of a small exchange, counted by hand: on the memory store (through the store's
/// requests) and on a local directory (through the channel's own files), each counts what S3
/// would bill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_as_a_cloud_store_bills_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    for url in ["memory://counted", dir.path().to_str().expect("utf-8")] {
        let counter = RequestCounter::new();
        let store = Store::open(url)
            .expect("open")
            .with_request_counter(counter.clone());
        let channel = ObjectStoreChannel::new(store.clone(), "counted").expect("channel");
        let workers = [0, 1, 2];
        for w in workers {
            channel
                .publish(
                    MessageId::new("updates", 0, w),
                    Bytes::from(vec![w as u8; 10]),
                )
                .await
                .expect("publish");
        }
        let got = channel
            .collect(
                StepMessages::new("updates", 0, &workers),
                Duration::from_secs(10),
            )
            .await
            .expect("collect");
        assert_eq!(got.len(), 3);
        let after_collect = counter.counts();
        assert_eq!(
            after_collect,
            RequestCounts {
                puts: 3,
                gets: 3,
                ..RequestCounts::default()
            },
            "{url}: 3 publishes and a collect of 3 present messages"
        );
        // A worker that never publishes: every look for it is a miss, nothing else.
        let missing = channel
            .collect(
                StepMessages::new("updates", 0, &[0, 7]),
                Duration::from_millis(50),
            )
            .await;
        assert!(matches!(missing, Err(ChannelError::Timeout { .. })));
        let looked = counter.counts().since(&after_collect);
        assert!(looked.misses >= 1, "{url}: {looked:?}");
        assert_eq!(looked.gets, 1, "{url}: worker 0 read again: {looked:?}");
        assert_eq!(looked.puts + looked.lists + looked.deletes, 0, "{url}");
        let before = counter.counts();
        for w in workers {
            channel
                .discard(StepMessages::new("updates", 0, &[w]))
                .await
                .expect("discard");
        }
        channel
            .put_key("stop", Bytes::from_static(b"1"))
            .await
            .expect("put_key");
        assert!(channel.get_key("stop").await.expect("get_key").is_some());
        assert!(channel.get_key("absent").await.expect("get_key").is_none());
        assert_eq!(
            counter.counts().since(&before),
            RequestCounts {
                puts: 1,
                gets: 1,
                misses: 1,
                deletes: 3,
                ..RequestCounts::default()
            },
            "{url}: 3 discards, a key written, read, and one absent"
        );
        channel.cleanup().await.expect("cleanup");
    }
}

/// A listing counts one LIST a started 1,000 keys, a bulk delete one DELETE a started 1,000,
/// a HEAD and a streamed read one request each; a store without a counter counts nowhere.
#[tokio::test]
async fn store_requests_are_counted_by_page() {
    let counter = RequestCounter::new();
    let plain = Store::open("memory://pages").expect("open");
    let store = plain.clone().with_request_counter(counter.clone());
    for i in 0..2500 {
        plain
            .put(&format!("many/{i:05}"), Bytes::from_static(b"x"))
            .await
            .expect("put");
    }
    assert_eq!(counter.counts(), RequestCounts::default());
    assert_eq!(
        store.child("many").list("").await.expect("list").len(),
        2500
    );
    assert_eq!(counter.counts().lists, 3);
    assert_eq!(store.size("many/00001").await.expect("size"), 1);
    assert!(!store.exists("many/x").await.expect("exists"));
    let _stream = store.get_stream("many/00002").await.expect("stream");
    store.delete_prefix("many").await.expect("delete_prefix");
    assert_eq!(
        counter.counts(),
        RequestCounts {
            gets: 1,
            heads: 2,
            lists: 6,
            deletes: 3,
            ..RequestCounts::default()
        }
    );
    assert!(plain.list("many").await.expect("list").is_empty());
}
