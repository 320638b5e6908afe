//! The channel conformance suite against DynamoDB, plus DynamoDB-specific checks: chunked
//! messages (a 2 MB one crosses intact; a head whose chunks are missing, or chunks without a
//! head, are never taken as a whole message), cleanup leaves no item, a missing table and an
//! unreachable endpoint are clear errors, a table deleted under a run is a clear error at once,
//! throttling is transient and ridden out by the retry decorator, request units are counted.
//!
//! The table comes from `MLLESS_TEST_DYNAMODB_URL=dynamodb://TABLE?create=true` with the usual
//! `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_DYNAMODB`), `AWS_REGION`, `AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY` (`scripts/test.sh` runs a moto_server, which serves DynamoDB on the
//! port it serves S3 on); without the variable the tests print that they were skipped and pass.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mlless_store::{
    Channel, ChannelError, DynamoDbChannel, MessageId, RequestCounter, RetryingChannel,
    StepMessages, conformance,
};
use serde_json::{Value, json};

fn table_url() -> Option<String> {
    let url = std::env::var("MLLESS_TEST_DYNAMODB_URL").ok()?;
    (!url.trim().is_empty()).then_some(url)
}

macro_rules! table_or_skip {
    () => {
        match table_url() {
            Some(url) => url,
            None => {
                eprintln!("MLLESS_TEST_DYNAMODB_URL not set: skipped");
                return;
            }
        }
    };
}

async fn connect(url: &str, job: &str) -> DynamoDbChannel {
    match DynamoDbChannel::connect(url, job).await {
        Ok(channel) => channel,
        Err(e) => panic!("connect to {url}: {e}"),
    }
}

/// Deterministic bytes, distinct per seed.
fn big(seed: u8, len: usize) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

/// Every item of `channel`'s job, as (sort key, item).
async fn items(channel: &DynamoDbChannel) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let mut start: Option<Value> = None;
    loop {
        let mut body = json!({
            "TableName": channel.table(),
            "ConsistentRead": true,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": { ":p": { "S": channel.job_id() } },
        });
        if let Some(start) = start.take() {
            body["ExclusiveStartKey"] = start;
        }
        let answer = channel.call_api("Query", &body).await.expect("query");
        for item in answer["Items"].as_array().cloned().unwrap_or_default() {
            let sk = item["sk"]["S"].as_str().unwrap_or_default().to_string();
            out.push((sk, item));
        }
        match answer.get("LastEvaluatedKey") {
            Some(next) if next.is_object() => start = Some(next.clone()),
            _ => return out,
        }
    }
}

async fn delete_item(channel: &DynamoDbChannel, sk: &str) {
    let body = json!({
        "TableName": channel.table(),
        "Key": { "pk": { "S": channel.job_id() }, "sk": { "S": sk } },
    });
    channel.call_api("DeleteItem", &body).await.expect("delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_conformance_dynamodb() {
    let url = table_or_skip!();
    let base = connect(&url, "conformance").await;
    assert!(
        base.describe().starts_with("dynamodb://"),
        "{}",
        base.describe()
    );
    let factory = move |job: &str| -> Arc<dyn Channel> {
        Arc::new(base.for_job(job).expect("channel of a job"))
    };
    conformance::run_all(&factory).await;
}

#[tokio::test]
async fn a_2mb_message_crosses_intact_in_chunks_and_its_units_are_counted() {
    let url = table_or_skip!();
    let counter = RequestCounter::new();
    let channel = connect(&url, "dynamodb-2mb")
        .await
        .with_request_counter(counter.clone());
    channel.cleanup().await.expect("cleanup");
    let before = counter.counts();
    let payload = big(3, 2 << 20);
    channel
        .publish(MessageId::new("updates", 1, 0), payload.clone())
        .await
        .expect("publish");
    let written = counter.counts().since(&before);
    // 2 MiB in chunks of at most 400 KB: at least 2,048 write units, one per KB.
    assert!(
        written.table_write_units >= 2048 && written.table_write_units < 2100,
        "{written:?}"
    );
    let stored = items(&channel).await;
    let chunks = stored.iter().filter(|(sk, _)| sk.starts_with("c#")).count();
    let expected = (2usize << 20).div_ceil(DynamoDbChannel::CHUNK_SIZE);
    assert_eq!(
        chunks,
        expected,
        "{:?}",
        stored.iter().map(|(sk, _)| sk).collect::<Vec<_>>()
    );
    let heads: Vec<&Value> = stored
        .iter()
        .filter(|(sk, _)| sk.starts_with("m#"))
        .map(|(_, item)| item)
        .collect();
    assert_eq!(heads.len(), 1);
    assert_eq!(heads[0]["chunks"]["N"], json!(expected.to_string()));
    assert!(
        stored.iter().all(|(_, item)| item["ttl"]["N"].is_string()),
        "every item has a TTL"
    );

    let before = counter.counts();
    let got = channel
        .collect(
            StepMessages::new("updates", 1, &[0]),
            Duration::from_secs(20),
        )
        .await
        .expect("collect");
    assert!(got[0] == payload, "the 2 MB message came back different");
    let read = counter.counts().since(&before);
    assert!(read.table_read_units >= 512, "{read:?}");
    channel.cleanup().await.expect("cleanup");
}

#[tokio::test]
async fn a_head_whose_chunks_are_missing_is_never_taken_as_whole() {
    let url = table_or_skip!();
    let channel = connect(&url, "dynamodb-torn").await;
    channel.cleanup().await.expect("cleanup");
    let payload = big(5, 1 << 20);
    channel
        .publish(MessageId::new("updates", 2, 0), payload.clone())
        .await
        .expect("publish");
    let chunk = items(&channel)
        .await
        .into_iter()
        .map(|(sk, _)| sk)
        .find(|sk| sk.starts_with("c#"))
        .expect("a chunk");
    delete_item(&channel, &chunk).await;
    // Its head is still there: the message is lost, which a read says at once.
    for result in [
        channel
            .collect(
                StepMessages::new("updates", 2, &[0]),
                Duration::from_secs(5),
            )
            .await
            .map(|_| ()),
        channel
            .poll(StepMessages::new("updates", 2, &[0]))
            .await
            .map(|_| ()),
    ] {
        match result {
            Err(e @ ChannelError::Backend { .. }) => {
                assert!(!e.is_transient(), "{e}");
                let text = e.to_string();
                assert!(text.contains("lost") && text.contains("chunks"), "{text}");
            }
            Err(e) => panic!("expected a corrupt-message error, got {e}"),
            Ok(()) => panic!("a message with a missing chunk was read as whole"),
        }
    }
    channel.cleanup().await.expect("cleanup");
}

#[tokio::test]
async fn chunks_without_their_head_are_not_a_message() {
    let url = table_or_skip!();
    let channel = connect(&url, "dynamodb-headless").await;
    channel.cleanup().await.expect("cleanup");
    channel
        .publish(MessageId::new("updates", 4, 1), big(7, 1 << 20))
        .await
        .expect("publish");
    // A publish cut off before its head: the chunks are there, the head is not.
    let head = items(&channel)
        .await
        .into_iter()
        .map(|(sk, _)| sk)
        .find(|sk| sk.starts_with("m#"))
        .expect("a head");
    delete_item(&channel, &head).await;
    let polled = channel
        .poll(StepMessages::new("updates", 4, &[1]))
        .await
        .expect("poll");
    assert_eq!(polled, vec![None]);
    match channel
        .collect(
            StepMessages::new("updates", 4, &[1]),
            Duration::from_millis(200),
        )
        .await
    {
        Err(ChannelError::Timeout { missing, .. }) => assert_eq!(missing, [1]),
        other => panic!("expected a timeout naming worker 1, got {other:?}"),
    }
    // Publishing again stores the message whole.
    let payload = big(8, 1 << 20);
    channel
        .publish(MessageId::new("updates", 4, 1), payload.clone())
        .await
        .expect("publish");
    let got = channel
        .collect(
            StepMessages::new("updates", 4, &[1]),
            Duration::from_secs(20),
        )
        .await
        .expect("collect");
    assert!(got[0] == payload);
    channel.cleanup().await.expect("cleanup");
}

#[tokio::test]
async fn cleanup_leaves_no_item_of_the_job_and_spares_other_jobs() {
    let url = table_or_skip!();
    let channel = connect(&url, "dynamodb-cleanup").await;
    let other = channel.for_job("dynamodb-cleanup-other").expect("job");
    channel.cleanup().await.expect("cleanup");
    other.cleanup().await.expect("cleanup");
    for step in 0..3 {
        for worker in 0..2 {
            channel
                .publish(
                    MessageId::new("updates", step, worker),
                    big(step as u8, 1000 + worker as usize),
                )
                .await
                .expect("publish");
        }
    }
    channel
        .publish(MessageId::new("updates", 9, 0), big(1, 900_000))
        .await
        .expect("publish");
    channel
        .put_key("stop", Bytes::from_static(b"1"))
        .await
        .expect("put_key");
    channel
        .put_key("big", big(2, 700_000))
        .await
        .expect("put_key");
    // A chunk no head names (a publish that failed after its chunks).
    channel
        .call_api(
            "PutItem",
            &json!({
                "TableName": channel.table(),
                "Item": {
                    "pk": { "S": channel.job_id() },
                    "sk": { "S": "c#00000000000000aa#000000" },
                    "v": { "B": "AAEC" },
                },
            }),
        )
        .await
        .expect("orphan chunk");
    other
        .put_key("stop", Bytes::from_static(b"other"))
        .await
        .expect("put_key");
    assert!(items(&channel).await.len() > 10);
    channel.cleanup().await.expect("cleanup");
    assert_eq!(items(&channel).await, Vec::new());
    assert_eq!(
        other.get_key("stop").await.expect("get_key").as_deref(),
        Some(&b"other"[..])
    );
    other.cleanup().await.expect("cleanup");
    assert_eq!(items(&other).await, Vec::new());
}

#[tokio::test]
async fn a_missing_table_without_create_is_named_in_the_error() {
    let url = table_or_skip!();
    let base = connect(&url, "dynamodb-missing").await;
    let missing = format!("mlless-missing-{}", std::process::id());
    let result = DynamoDbChannel::connect(&format!("dynamodb://{missing}"), "job").await;
    match result {
        Err(ChannelError::InvalidUrl { reason, .. }) => {
            assert!(reason.contains(&missing), "{reason}");
            assert!(reason.contains("does not exist"), "{reason}");
            assert!(reason.contains("create=true"), "{reason}");
            let endpoint = base.describe();
            let endpoint = endpoint
                .split_once(" (")
                .map(|(_, e)| e.trim_end_matches(')'))
                .expect("endpoint in describe");
            assert!(reason.contains(endpoint), "{reason} names no {endpoint}");
        }
        other => panic!("expected an error naming table {missing}, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_is_named_in_the_error() {
    let _url = table_or_skip!();
    // A free port with nothing listening.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let url = format!("dynamodb://mlless-test?endpoint=http://127.0.0.1:{port}");
    match DynamoDbChannel::connect(&url, "job").await {
        Err(ChannelError::InvalidUrl { reason, .. }) => {
            assert!(reason.contains(&format!("127.0.0.1:{port}")), "{reason}");
            assert!(reason.contains("mlless-test"), "{reason}");
        }
        other => panic!("expected an error naming 127.0.0.1:{port}, got {other:?}"),
    }
}

#[tokio::test]
async fn describe_names_table_and_endpoint_and_nothing_else() {
    let url = table_or_skip!();
    let channel = connect(&url, "dynamodb-describe").await;
    let Ok(endpoint) =
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
    else {
        eprintln!("no AWS_ENDPOINT_URL: skipped");
        return;
    };
    // The table and the endpoint, nothing else (the credentials are the AWS chain's and never
    // part of it).
    assert_eq!(
        channel.describe(),
        format!(
            "dynamodb://{} ({})",
            channel.table(),
            endpoint.trim_end_matches('/')
        )
    );
}

#[tokio::test]
async fn a_table_deleted_under_a_run_is_a_clear_error_not_retried() {
    let _url = table_or_skip!();
    let table = format!("mlless-lost-{}", std::process::id());
    let channel = connect(&format!("dynamodb://{table}?create=true"), "job").await;
    channel
        .publish(MessageId::new("updates", 0, 0), Bytes::from_static(b"x"))
        .await
        .expect("publish");
    channel
        .call_api("DeleteTable", &json!({ "TableName": table }))
        .await
        .expect("delete the table");
    // Within a grace of an hour: an error that were retried would not come back at all.
    let retrying = RetryingChannel::new(channel, Duration::from_secs(3600));
    match retrying
        .publish(MessageId::new("updates", 1, 0), Bytes::from_static(b"y"))
        .await
    {
        Err(e @ ChannelError::Backend { .. }) => {
            assert!(!e.is_transient(), "{e}");
            let text = e.to_string();
            assert!(text.contains(&table), "{text}");
            assert!(text.contains("ResourceNotFoundException"), "{text}");
        }
        other => panic!("expected a clear error naming table {table}, got {other:?}"),
    }
}

/// A loopback DynamoDB that answers `DescribeTable` with the channel's table and throttles the
/// first `throttled` `PutItem`s (`ThrottlingException`, as DynamoDB does), then accepts them;
/// returns its address and the count of `PutItem`s it received.
fn throttling_server(throttled: usize) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = format!("http://{}", listener.local_addr().expect("addr"));
    let puts = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&puts);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let (mut target, mut length) = (String::new(), 0usize);
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let line = line.trim_end().to_ascii_lowercase();
                        if line.is_empty() {
                            break;
                        }
                        if let Some(v) = line.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if let Some(v) = line.strip_prefix("x-amz-target:") {
                            target = v.trim().to_string();
                        }
                    }
                    let mut body = vec![0u8; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let (status, answer) = if target.ends_with(".describetable") {
                        (
                            "200 OK",
                            json!({ "Table": {
                                "TableStatus": "ACTIVE",
                                "KeySchema": [
                                    { "AttributeName": "pk", "KeyType": "HASH" },
                                    { "AttributeName": "sk", "KeyType": "RANGE" },
                                ],
                                "AttributeDefinitions": [
                                    { "AttributeName": "pk", "AttributeType": "S" },
                                    { "AttributeName": "sk", "AttributeType": "S" },
                                ],
                            }}),
                        )
                    } else if target.ends_with(".putitem")
                        && seen.fetch_add(1, Ordering::SeqCst) < throttled
                    {
                        (
                            "400 Bad Request",
                            json!({
                                "__type": "com.amazon.coral.availability#ThrottlingException",
                                "message": "Rate of requests exceeds the allowed throughput.",
                            }),
                        )
                    } else {
                        ("200 OK", json!({}))
                    };
                    let answer = answer.to_string();
                    let response = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/x-amz-json-1.0\r\n\
                         content-length: {}\r\n\r\n{answer}",
                        answer.len()
                    );
                    if reader.get_mut().write_all(response.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (address, puts)
}

#[tokio::test]
async fn throttling_is_transient_and_ridden_out_by_the_retry_decorator() {
    let _url = table_or_skip!();
    let (endpoint, puts) = throttling_server(2);
    let url = format!("dynamodb://throttled?endpoint={endpoint}");
    let channel = connect(&url, "job").await;
    match channel
        .publish(MessageId::new("updates", 0, 0), Bytes::from_static(b"x"))
        .await
    {
        Err(e @ ChannelError::Backend { .. }) => {
            assert!(e.is_transient(), "{e}");
            assert!(e.to_string().contains("ThrottlingException"), "{e}");
        }
        other => panic!("expected a throttled publish, got {other:?}"),
    }
    // The second throttled attempt and a third that succeeds, within the grace.
    let retrying = RetryingChannel::new(channel, Duration::from_secs(3600));
    retrying
        .publish(MessageId::new("updates", 0, 0), Bytes::from_static(b"x"))
        .await
        .expect("published once the throttling ends");
    assert_eq!(puts.load(std::sync::atomic::Ordering::SeqCst), 3);
}
