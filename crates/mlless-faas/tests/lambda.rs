//! The Lambda invoker against a scripted Lambda API on loopback: what it sends (a signed Invoke
//! call), and what it makes of each kind of answer — a success with Lambda's `REPORT` line,
//! throttling, a function error, an emulator's function error, a refused call, no server, and a
//! kill. The whole path through a real emulator is in the CLI's `tests/lambda.rs`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use mlless_faas::{
    FunctionRequest, InvocationReport, InvokeError, Invoker, LambdaConfig, LambdaInvoker, Limits,
    Outcome,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// One scripted answer: status, headers, body, and how long to wait before sending it.
#[derive(Clone)]
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    delay: Duration,
}

fn answer(status: u16, headers: Vec<(&'static str, String)>, body: &str) -> Answer {
    Answer {
        status,
        headers,
        body: body.to_owned(),
        delay: Duration::ZERO,
    }
}

/// A request the fake API received: its request line, headers (lower-case names) and body.
#[derive(Debug, Clone)]
struct Received {
    line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/1.1 server answering each request with the next scripted answer (the last one
/// again when the script runs out). Hand-written: a test needs a server that misbehaves on cue,
/// which no mock-server crate in the build offers.
async fn fake_api(script: Vec<Answer>) -> (String, Arc<Mutex<Vec<Received>>>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("local address");
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = received.clone();
    tokio::spawn(async move {
        let script = Arc::new(script);
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let script = script.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let (reader, mut writer) = stream.into_split();
                let mut reader = BufReader::new(reader);
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let mut headers = Vec::new();
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).await.expect("header line");
                        let header = header.trim_end();
                        if header.is_empty() {
                            break;
                        }
                        let (k, v) = header.split_once(':').expect("header has a colon");
                        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
                    }
                    let length: usize = headers
                        .iter()
                        .find(|(k, _)| k == "content-length")
                        .map_or(0, |(_, v)| v.parse().expect("content length"));
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).await.expect("body");
                    let index = {
                        let mut log = log.lock().expect("log");
                        log.push(Received {
                            line: line.trim_end().to_owned(),
                            headers,
                            body,
                        });
                        log.len() - 1
                    };
                    let answer = script[index.min(script.len() - 1)].clone();
                    tokio::time::sleep(answer.delay).await;
                    let mut response = format!(
                        "HTTP/1.1 {} X\r\ncontent-length: {}\r\ncontent-type: application/json\r\n",
                        answer.status,
                        answer.body.len()
                    );
                    for (k, v) in &answer.headers {
                        response.push_str(&format!("{k}: {v}\r\n"));
                    }
                    response.push_str("\r\n");
                    response.push_str(&answer.body);
                    if writer.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{address}"), received)
}

fn invoker(endpoint: &str) -> LambdaInvoker {
    let config = LambdaConfig::new(endpoint, "eu-west-1", "AKIDTEST", "secret", None);
    LambdaInvoker::new("mlless-fn", config).expect("a valid function name")
}

/// Invokes `payload` through the API at `endpoint` and waits for the end.
async fn invoke(endpoint: &str, payload: &str) -> Result<InvocationReport, InvokeError> {
    invoker(endpoint)
        .invoke(request(payload))
        .await
        .expect("invoked")
        .wait()
        .await
}

fn request(payload: &str) -> FunctionRequest {
    FunctionRequest::new(
        "worker-1",
        payload.as_bytes().to_vec(),
        Limits::new(512, Duration::from_secs(30)),
    )
}

const SUCCESS_BODY: &str = r#"{"duration_ms":2500,"peak_rss_mb":40.0,"memory_mb":512}"#;

fn log_tail(report: &str) -> String {
    base64::engine::general_purpose::STANDARD
        .encode(format!("START RequestId: 1\nEND RequestId: 1\n{report}\n"))
}

#[tokio::test]
async fn a_success_is_signed_and_billed_as_lambda_reports_it() {
    let tail = log_tail(
        "REPORT RequestId: 1\tDuration: 1234.5 ms\tBilled Duration: 1235 ms\t\
         Memory Size: 512 MB\tMax Memory Used: 77 MB\t",
    );
    let (endpoint, received) = fake_api(vec![answer(
        200,
        vec![("x-amz-log-result", tail)],
        SUCCESS_BODY,
    )])
    .await;
    let report = invoke(&endpoint, r#"{"role":"worker"}"#)
        .await
        .expect("a report");
    assert_eq!(report.outcome, Outcome::Succeeded);
    assert_eq!(report.name, "worker-1");
    assert_eq!(
        report.duration_ms, 1235,
        "Lambda's billed duration, not the function's own 2500 ms"
    );
    assert_eq!(report.memory_mb, 512);
    assert_eq!(report.peak_rss_mb, 77.0);

    let received = received.lock().unwrap();
    assert_eq!(received.len(), 1);
    let call = &received[0];
    assert_eq!(
        call.line,
        "POST /2015-03-31/functions/mlless-fn/invocations HTTP/1.1"
    );
    assert_eq!(call.body, br#"{"role":"worker"}"#);
    assert_eq!(
        call.header("x-amz-invocation-type"),
        Some("RequestResponse")
    );
    assert_eq!(call.header("x-amz-log-type"), Some("Tail"));
    let authorization = call.header("authorization").expect("a signed request");
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
            && authorization.contains("/eu-west-1/lambda/aws4_request")
            && authorization.contains("Signature="),
        "{authorization}"
    );
    assert!(call.header("x-amz-date").is_some());
}

#[tokio::test]
async fn without_a_report_line_the_functions_own_figures_count() {
    let (endpoint, _) = fake_api(vec![answer(200, vec![], SUCCESS_BODY)]).await;
    let report = invoke(&endpoint, "{}").await.expect("a report");
    assert_eq!(report.outcome, Outcome::Succeeded);
    assert_eq!(report.duration_ms, 2500);
    assert_eq!(report.peak_rss_mb, 40.0);
}

#[tokio::test]
async fn throttling_is_retried_with_backoff() {
    let throttled = answer(
        429,
        vec![("x-amzn-errortype", "TooManyRequestsException".into())],
        r#"{"Reason":"ReservedFunctionConcurrentInvocationLimitExceeded","message":"Rate Exceeded."}"#,
    );
    let (endpoint, received) = fake_api(vec![
        throttled.clone(),
        throttled,
        answer(200, vec![], SUCCESS_BODY),
    ])
    .await;
    let started = Instant::now();
    let report = invoke(&endpoint, "{}")
        .await
        .expect("a report after the throttling");
    assert_eq!(report.outcome, Outcome::Succeeded);
    assert_eq!(
        received.lock().unwrap().len(),
        3,
        "two throttled calls, one served"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "it backed off between the calls ({:?})",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_function_error_carries_the_functions_message() {
    let body = r#"{"errorType":"mlless.FunctionError","errorMessage":"no such object: data/manifest.json"}"#;
    for (status, headers) in [
        // Lambda: 200 with the function-error header.
        (200, vec![("x-amz-function-error", "Unhandled".to_owned())]),
        // cargo lambda's emulator: a 500 with the same body and no header.
        (500, vec![]),
    ] {
        let (endpoint, _) = fake_api(vec![answer(status, headers, body)]).await;
        let report = invoke(&endpoint, "{}").await.expect("a report");
        assert_eq!(
            report.outcome,
            Outcome::Failed {
                exit_code: Some(1),
                message: "no such object: data/manifest.json".into()
            },
            "status {status}"
        );
        assert_eq!(
            report.describe_failure().as_deref(),
            Some("worker-1 failed (exit code 1): no such object: data/manifest.json")
        );
    }
}

#[tokio::test]
async fn a_dead_function_process_is_a_crash_and_a_timeout_is_a_timeout() {
    let crash = r#"{"errorType":"Runtime.ExitError","errorMessage":"RequestId: 1 Error: Runtime exited with error: signal: aborted (core dumped)"}"#;
    let timeout =
        r#"{"errorMessage":"2026-11-29T10:00:00.000Z 1 Task timed out after 30.00 seconds"}"#;
    let header = || vec![("x-amz-function-error", "Unhandled".to_owned())];
    let (endpoint, _) = fake_api(vec![answer(200, header(), crash)]).await;
    let report = invoke(&endpoint, "{}").await.unwrap();
    assert!(
        matches!(
            report.outcome,
            Outcome::Failed {
                exit_code: None,
                ..
            }
        ),
        "{:?}",
        report.outcome
    );
    let (endpoint, _) = fake_api(vec![answer(200, header(), timeout)]).await;
    let report = invoke(&endpoint, "{}").await.unwrap();
    assert_eq!(report.outcome, Outcome::TimedOut { limit_s: 30.0 });
}

#[tokio::test]
async fn a_refused_call_is_an_invoker_error_with_lambdas_reason() {
    let (endpoint, _) = fake_api(vec![answer(
        404,
        vec![("x-amzn-errortype", "ResourceNotFoundException".into())],
        r#"{"Type":"User","Message":"Function not found: arn:aws:lambda:eu-west-1:1:function:mlless-fn"}"#,
    )])
    .await;
    let error = invoke(&endpoint, "{}").await.expect_err("no such function");
    assert!(matches!(
        error,
        InvokeError::Platform {
            status: Some(404),
            ..
        }
    ));
    assert_eq!(
        error.to_string(),
        "the platform refused to run function worker-1: ResourceNotFoundException: \
         Function not found: arn:aws:lambda:eu-west-1:1:function:mlless-fn"
    );
}

#[tokio::test]
async fn an_unreachable_api_is_named() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let error = invoke(&endpoint, "{}").await.expect_err("nothing listens");
    assert!(
        error
            .to_string()
            .contains(&format!("cannot reach the Lambda API at {endpoint}")),
        "{error}"
    );
}

#[tokio::test]
async fn the_kill_switch_abandons_the_call() {
    let mut slow = answer(200, vec![], SUCCESS_BODY);
    slow.delay = Duration::from_secs(30);
    let (endpoint, _) = fake_api(vec![slow]).await;
    let invocation = invoker(&endpoint).invoke(request("{}")).await.unwrap();
    let kill = invocation.kill_switch();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    kill.kill();
    let report = invocation.wait().await.unwrap();
    assert_eq!(report.outcome, Outcome::Killed);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn configuration_errors_say_what_is_missing() {
    let error = LambdaInvoker::new(
        "my function",
        LambdaConfig::new("http://127.0.0.1:1", "eu-west-1", "a", "b", None),
    )
    .expect_err("a space is not allowed in a function name");
    assert!(
        error.to_string().contains("not a Lambda function name"),
        "{error}"
    );
    let config = LambdaConfig::new("http://x/", "eu-west-1", "AKIDTEST", "very-secret", None);
    let debug = format!("{config:?}");
    assert!(
        debug.contains("AKIDTEST") && !debug.contains("very-secret"),
        "{debug}"
    );
    assert_eq!(config.endpoint(), "http://x");
}
