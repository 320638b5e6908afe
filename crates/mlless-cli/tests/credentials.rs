//! Credentials never leave the places that need them: a run through a password-protected Redis
//! with S3 credentials in the environment, logging at debug level, shows neither the password
//! nor the S3 secrets in the CLI's output, the run record, the report's files or the functions'
//! logs (which the local invoker forwards to the driver's standard error). Only the run's
//! `spec.json` keeps the channel URL as given, since the functions connect with it.
//!
//! Needs `MLLESS_TEST_REDIS_PASSWORD_URL` (`scripts/test.sh` starts the server): the URL of a
//! server started with `--requirepass mlless-test-secret`, without the password (or with it, in
//! which case it is used as given). Skipped, with a notice, when it is not set.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;
use mlless_data::SparseLrSpec;

/// The password of `scripts/test.sh`'s protected server.
const PASSWORD: &str = "mlless-test-secret";
/// Fake S3 credentials, set in the environment of the run (S3 is not used).
const AWS_SECRET: &str = "fakeSecretKey-9Qz7-wJalrXUtnFEMI";
const AWS_TOKEN: &str = "fakeSessionToken-IQoJb3JpZ2luX2Vj-4711";

/// The password-protected Redis URL with its password, and the password.
fn protected_url() -> Option<(String, String)> {
    let Ok(url) = std::env::var("MLLESS_TEST_REDIS_PASSWORD_URL") else {
        eprintln!("skipped: MLLESS_TEST_REDIS_PASSWORD_URL is not set (scripts/test.sh sets it)");
        return None;
    };
    let url = url.trim().to_string();
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    match rest.rsplit_once('@') {
        Some((userinfo, _)) => {
            let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
            Some((url.clone(), password.to_string()))
        }
        None => Some((
            format!("{scheme}://:{PASSWORD}@{rest}"),
            PASSWORD.to_string(),
        )),
    }
}

/// Runs `mlless ARGS` with debug logging and the fake AWS credentials; asserts success.
fn run_logged(args: &[&str]) -> Output {
    let output = mlless()
        .args(args)
        .env("RUST_LOG", "debug")
        .env("AWS_ACCESS_KEY_ID", "AKIAFAKEACCESSKEY123")
        .env("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        .env("AWS_SESSION_TOKEN", AWS_TOKEN)
        .output()
        .expect("the mlless binary runs");
    assert!(
        output.status.success(),
        "mlless {:?} failed:\n{}",
        args,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Asserts that none of `secrets` occurs in `text` (named `what` in the message).
fn assert_clean(what: &str, text: &str, secrets: &[&str]) {
    for secret in secrets {
        assert!(
            !text.contains(secret),
            "{what} shows the secret {secret:?}:\n{}",
            excerpt(text, secret)
        );
    }
}

/// The lines of `text` that contain `needle`.
fn excerpt(text: &str, needle: &str) -> String {
    text.lines()
        .filter(|l| l.contains(needle))
        .take(5)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every file below `dir`, recursively.
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn credentials_appear_in_no_output_record_report_or_log() {
    let Some((url, password)) = protected_url() else {
        return;
    };
    let secrets = [password.as_str(), AWS_SECRET, AWS_TOKEN];
    let dir = tempdir();
    let (input, _) = write_sparse_lr(dir.path(), &SparseLrSpec::new(1_000, 200, 5, 3));
    let data = dir.path().join("store/lr");
    prepare_libsvm(&input, &data, 100);
    let record = dir.path().join("run.json");

    // Not --quiet: the progress line is drawn too (on a pipe, indicatif draws nothing, but
    // whatever it would draw goes through the same code).
    let train = run_logged(&[
        "train",
        "--data",
        &s(&data),
        "--model",
        "lr",
        "--workers",
        "2",
        "--max-epochs",
        "1",
        "--channel",
        &url,
        "--record",
        &s(&record),
    ]);
    let stdout = String::from_utf8_lossy(&train.stdout);
    let stderr = String::from_utf8_lossy(&train.stderr);
    // The test means something: the functions' debug logs reached the driver's stderr, and the
    // summary names the channel (redacted).
    assert!(
        stderr.contains("worker-0") && stderr.contains("supervisor"),
        "the functions' logs are not in the driver's stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("Redis") || stderr.contains("redis"),
        "no debug line about the Redis channel:\n{stderr}"
    );
    assert!(stdout.contains("channel redis"), "{stdout}");
    assert!(
        stdout.contains("***"),
        "the channel is not shown redacted:\n{stdout}"
    );
    assert_clean("mlless train's stdout", &stdout, &secrets);
    assert_clean("mlless train's stderr", &stderr, &secrets);

    let record_text = std::fs::read_to_string(&record).expect("record written");
    assert_clean("the run record (--record)", &record_text, &secrets);
    let parsed = read_record(&record);
    let channel = parsed
        .spec
        .training
        .channel
        .clone()
        .expect("the record names the channel");
    assert!(
        channel.starts_with("redis://") && channel.contains("***"),
        "{channel}"
    );

    // The run's own record.json too; its spec.json is the one place that keeps the URL.
    let run_dir = Path::new(parsed.spec.run_url.as_str());
    let run_record = std::fs::read_to_string(run_dir.join("record.json")).expect("record.json");
    assert_clean("{run}/record.json", &run_record, &secrets);
    let spec = std::fs::read_to_string(run_dir.join("spec.json")).expect("spec.json");
    assert!(
        spec.contains(&password),
        "spec.json must keep the channel URL the functions connect with"
    );
    assert_clean("{run}/spec.json", &spec, &[AWS_SECRET, AWS_TOKEN]);

    // `mlless report` (stdout, stderr, the HTML page and the SVG plots) and `mlless cost`.
    let out = dir.path().join("report");
    let report = run_logged(&["report", &s(&record), "--out", &s(&out)]);
    assert_clean(
        "mlless report's stdout",
        &String::from_utf8_lossy(&report.stdout),
        &secrets,
    );
    assert_clean(
        "mlless report's stderr",
        &String::from_utf8_lossy(&report.stderr),
        &secrets,
    );
    let written = files(&out);
    assert!(
        written
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == "html"))
            && written
                .iter()
                .any(|p| p.extension().is_some_and(|e| e == "svg")),
        "{written:?}"
    );
    for path in &written {
        let text = std::fs::read_to_string(path).expect("report file");
        assert_clean(&path.display().to_string(), &text, &secrets);
    }
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("redis://"), "the report names the channel");

    let cost = run_logged(&["cost", &s(&record)]);
    assert_clean(
        "mlless cost's output",
        &format!(
            "{}{}",
            String::from_utf8_lossy(&cost.stdout),
            String::from_utf8_lossy(&cost.stderr)
        ),
        &secrets,
    );
}

/// A record written before records were redacted (holding the password) is reported redacted.
#[test]
fn an_old_record_with_a_password_is_reported_redacted() {
    let dir = tempdir();
    let (input, _) = write_sparse_lr(dir.path(), &SparseLrSpec::new(600, 100, 5, 4));
    let data = dir.path().join("store/lr");
    prepare_libsvm(&input, &data, 100);
    let mut record = train(
        dir.path(),
        "run",
        &[
            "--data",
            &s(&data),
            "--model",
            "lr",
            "--workers",
            "2",
            "--max-epochs",
            "1",
        ],
    );
    let secret = "old-record-pw-5521";
    record.spec.training.channel = Some(format!("redis://user:{secret}@127.0.0.1:6379").into());
    let path = dir.path().join("old.json");
    std::fs::write(&path, serde_json::to_vec(&record).expect("json")).expect("write");
    let out = dir.path().join("old-report");
    let report = ok(&["report", &s(&path), "--out", &s(&out)]);
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert!(
        stdout.contains("channel redis://user:***@127.0.0.1:6379"),
        "{stdout}"
    );
    assert_clean("mlless report's stdout", &stdout, &[secret]);
    for file in files(&out) {
        let text = std::fs::read_to_string(&file).expect("report file");
        assert_clean(&file.display().to_string(), &text, &[secret]);
    }
}
