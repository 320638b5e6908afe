//! AWS credentials as the AWS tools find them (the default chain, shared by S3 and Lambda): a
//! named profile of a shared credentials file, and a container credentials endpoint that the
//! test serves on loopback, each reaching S3 (the moto_server of `scripts/test.sh`) with no key
//! in the environment; credentials near their expiry are fetched again during a run.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{mlless, s, tempdir};
use mlless_data::SparseLrSpec;

/// `mlless` with no AWS key, region or profile of the test's environment: only what `chain`
/// sets. Instance metadata is off (nothing but loopback is reached).
fn without_aws_env(chain: &[(&str, String)]) -> Command {
    let mut command = mlless();
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
    ] {
        command.env_remove(var);
    }
    command.env("AWS_EC2_METADATA_DISABLED", "true");
    for (name, value) in chain {
        command.env(name, value);
    }
    command
}

/// Runs `command` with `args`; the output, whatever the status.
fn output(mut command: Command, args: &[&str]) -> Output {
    command.args(args).output().expect("mlless runs")
}

/// `prepare` of a small sparse LR set to `data` (on S3).
fn prepare_args(input: &Path, data: &str) -> Vec<String> {
    [
        "prepare",
        "--format",
        "libsvm",
        "--input",
        &s(input),
        "--out",
        data,
        "--batch-size",
        "300",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `command train` of LR with 2 workers on `data` (on S3), its runs there too, and `extra`.
fn train_on_s3(command: Command, data: &str, extra: &[&str]) -> Output {
    let runs = format!("{data}/runs");
    let mut args = vec![
        "train",
        "--data",
        data,
        "--runs",
        &runs,
        "--model",
        "lr",
        "--workers",
        "2",
        "--quiet",
    ];
    args.extend(extra);
    output(command, &args)
}

fn write_input(dir: &Path) -> std::path::PathBuf {
    let input = dir.join("lr.libsvm");
    let file = std::io::BufWriter::new(std::fs::File::create(&input).expect("create"));
    mlless_data::write_sparse_lr(&SparseLrSpec::new(3_000, 500, 10, 4), file).expect("write");
    input
}

fn succeeded(output: &Output) -> bool {
    if !output.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    }
    output.status.success()
}

#[test]
fn a_named_profile_of_the_shared_files_reaches_s3() {
    let Ok(base) = std::env::var("MLLESS_TEST_S3_URL") else {
        eprintln!("MLLESS_TEST_S3_URL not set (scripts/test.sh sets it): skipped");
        return;
    };
    let dir = tempdir();
    let credentials = common::write(
        dir.path(),
        "credentials",
        "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = x\n\n\
         [research]\naws_access_key_id = AKIDRESEARCH\naws_secret_access_key = y\n",
    );
    let config = common::write(
        dir.path(),
        "config",
        "[profile research]\nregion = us-east-1\n",
    );
    let files = |profile: &str| {
        vec![
            ("AWS_SHARED_CREDENTIALS_FILE", s(&credentials)),
            ("AWS_CONFIG_FILE", s(&config)),
            ("AWS_PROFILE", profile.to_owned()),
        ]
    };
    let input = write_input(dir.path());
    let data = format!("{base}/profile-{}", std::process::id());
    let args = prepare_args(&input, &data);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let prepared = output(without_aws_env(&files("research")), &args);
    assert!(succeeded(&prepared), "prepare with profile research");
    // The run's functions find the same profile (the local invoker passes the environment on).
    let trained = train_on_s3(
        without_aws_env(&files("research")),
        &data,
        &["--max-epochs", "1"],
    );
    assert!(succeeded(&trained), "train with profile research");

    // A profile that is not there: an error naming the sources tried and the profile.
    let missing = output(without_aws_env(&files("nobody")), &args);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("no AWS credentials: tried the environment")
            && stderr.contains("profile nobody"),
        "{stderr}"
    );
}

/// An ECS-style container credentials endpoint on loopback: each request gets new credentials
/// (`AKIDECS1`, `AKIDECS2`, …) that expire `lifetime` after they were handed out.
struct CredentialsEndpoint {
    url: String,
    served: Arc<AtomicU32>,
}

impl CredentialsEndpoint {
    fn start(lifetime: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!(
            "http://{}/credentials",
            listener.local_addr().expect("addr")
        );
        let served = Arc::new(AtomicU32::new(0));
        let count = Arc::clone(&served);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let count = Arc::clone(&count);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(&stream);
                    let mut line = String::new();
                    // The request line and headers, up to the blank line.
                    while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                        if line == "\r\n" {
                            break;
                        }
                        line.clear();
                    }
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    let body = format!(
                        "{{\"AccessKeyId\":\"AKIDECS{n}\",\"SecretAccessKey\":\"s{n}\",\
                         \"Token\":\"t{n}\",\"Expiration\":\"{}\"}}",
                        rfc3339(SystemTime::now() + lifetime)
                    );
                    let mut stream = &stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Self { url, served }
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).expect("after 1970").as_secs();
    let t = mlless_faas::clock::UtcTime::of_unix_s(secs);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

#[test]
fn container_credentials_reach_s3_and_are_refreshed_before_they_expire() {
    let Ok(base) = std::env::var("MLLESS_TEST_S3_URL") else {
        eprintln!("MLLESS_TEST_S3_URL not set (scripts/test.sh sets it): skipped");
        return;
    };
    assert_eq!(
        rfc3339(UNIX_EPOCH + Duration::from_secs(1_796_147_633)),
        "2026-12-01T17:53:53Z"
    );
    let dir = tempdir();
    let nowhere = dir.path().join("none");
    // Credentials that are within the refresh margin (5 min) a second after they are fetched.
    let endpoint = CredentialsEndpoint::start(Duration::from_secs(5 * 60 + 1));
    let chain = vec![
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint.url.clone()),
        ("AWS_SHARED_CREDENTIALS_FILE", s(&nowhere)),
        ("AWS_CONFIG_FILE", s(&nowhere)),
        ("AWS_REGION", "us-east-1".to_owned()),
    ];
    let input = write_input(dir.path());
    let data = format!("{base}/ecs-{}", std::process::id());
    let args = prepare_args(&input, &data);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(
        succeeded(&output(without_aws_env(&chain), &args)),
        "prepare"
    );
    let after_prepare = endpoint.served.load(Ordering::SeqCst);
    assert!(after_prepare >= 1, "prepare fetched from the endpoint");

    // Four processes (driver, supervisor, two workers) on S3 for 4 s: without a refresh each
    // would fetch once.
    let trained = train_on_s3(
        without_aws_env(&chain),
        &data,
        &[
            "--max-epochs",
            "1000",
            "--early-stop",
            "0",
            "--max-time",
            "4",
        ],
    );
    assert!(succeeded(&trained), "train");
    let during_train = endpoint.served.load(Ordering::SeqCst) - after_prepare;
    eprintln!("{after_prepare} credential fetches by prepare, {during_train} by a 4 s run");
    assert!(
        during_train > 4,
        "{during_train} fetches by 4 processes in 4 s: credentials were not refreshed"
    );
}
