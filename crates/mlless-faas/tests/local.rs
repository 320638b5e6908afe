//! The local invoker: the conformance suite, plus what only a local process can show.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use mlless_faas::conformance::{self, Behaviour};
use mlless_faas::{FunctionRequest, InvokeError, Invoker, Limits, LocalInvoker, Outcome};

fn sh(script: &str) -> LocalInvoker {
    LocalInvoker::new(
        "/bin/sh".into(),
        vec!["-c".into(), script.into(), "test".into()],
    )
}

fn limits() -> Limits {
    Limits::new(256, Duration::from_secs(60))
}

/// A fresh directory of this test run, unique across threads and processes.
fn temp_dir() -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mlless-faas-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

mod conformance_suite {
    use super::*;

    #[tokio::test]
    async fn succeeds_and_reports() {
        conformance::succeeds_and_reports(&conformance::local_sh_invoker()).await;
    }

    #[tokio::test]
    async fn payload_reaches_function() {
        conformance::payload_reaches_function(&conformance::local_sh_invoker()).await;
    }

    #[tokio::test]
    async fn failure_carries_message() {
        conformance::failure_carries_message(&conformance::local_sh_invoker()).await;
    }

    #[tokio::test]
    async fn timeout_is_enforced() {
        conformance::timeout_is_enforced(&conformance::local_sh_invoker()).await;
    }

    #[tokio::test]
    async fn memory_cap_is_enforced() {
        conformance::memory_cap_is_enforced(&conformance::local_sh_invoker()).await;
    }

    #[tokio::test]
    async fn kill_switch_stops() {
        conformance::kill_switch_stops(&conformance::local_sh_invoker()).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn invocations_are_separate_processes() {
        conformance::invocations_are_separate_processes(&conformance::local_sh_invoker()).await;
    }
}

#[tokio::test]
async fn reports_carry_the_pid_and_platform_is_local() {
    let invoker = conformance::local_sh_invoker();
    assert_eq!(invoker.platform(), "local");
    let invocation = invoker
        .invoke(FunctionRequest::new(
            "w",
            Behaviour::Succeed.payload(),
            limits(),
        ))
        .await
        .expect("invoke");
    let pid = invocation.pid().expect("a local invocation has a pid");
    let report = invocation.wait().await.expect("wait");
    assert_eq!(report.pid, Some(pid));
}

#[tokio::test]
async fn payload_is_written_to_stdin_exactly() {
    let dir = temp_dir();
    let out = dir.join("received");
    let invoker = sh(r#"cat > "$OUT""#).with_env("OUT", &out);
    let payload: Vec<u8> = (0..3 * 1024 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    let report = invoker
        .invoke(FunctionRequest::new("w", payload.clone(), limits()))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    assert_eq!(report.outcome, Outcome::Succeeded);
    let received = std::fs::read(&out).expect("read back");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        received == payload,
        "payload differs ({} bytes received)",
        received.len()
    );
}

#[tokio::test]
async fn a_function_may_ignore_a_large_payload() {
    // The pipe fills up, the function exits without reading: no hang, no error.
    let report = sh("exit 0")
        .invoke(FunctionRequest::new("w", vec![b'x'; 4 << 20], limits()))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    assert_eq!(report.outcome, Outcome::Succeeded);
}

#[tokio::test]
async fn a_flood_of_output_does_not_block() {
    let report = sh("head -c 20000000 /dev/zero; head -c 5000000 /dev/zero >&2; exit 0")
        .invoke(FunctionRequest::new("w", Vec::new(), limits()))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    assert_eq!(report.outcome, Outcome::Succeeded);
}

#[tokio::test]
async fn env_and_args_reach_the_function() {
    let invoker = LocalInvoker::new(
        "/bin/sh".into(),
        vec![
            "-c".into(),
            r#"[ "$1" = "function" ] && [ "$MLLESS_TEST_VAR" = "42" ] || { echo "got $1 $MLLESS_TEST_VAR" >&2; exit 1; }"#.into(),
            "sh".into(),
            "function".into(),
        ],
    )
    .with_env("MLLESS_TEST_VAR", "42");
    let report = invoker
        .invoke(FunctionRequest::new("w", Vec::new(), limits()))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    assert_eq!(
        report.outcome,
        Outcome::Succeeded,
        "{:?}",
        report.describe_failure()
    );
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error_naming_it() {
    let err = LocalInvoker::new("/no/such/mlless".into(), Vec::new())
        .invoke(FunctionRequest::new("worker-1", Vec::new(), limits()))
        .await
        .expect_err("cannot spawn");
    match &err {
        InvokeError::Spawn {
            function, program, ..
        } => {
            assert_eq!(function, "worker-1");
            assert_eq!(program, &PathBuf::from("/no/such/mlless"));
        }
        other => panic!("expected Spawn, got {other:?}"),
    }
    assert!(err.to_string().contains("/no/such/mlless"));
}

#[tokio::test]
async fn invalid_limits_are_rejected_before_spawning() {
    let err = sh("exit 0")
        .invoke(FunctionRequest::new(
            "w",
            Vec::new(),
            Limits::new(0, Duration::from_secs(1)),
        ))
        .await
        .expect_err("zero memory");
    assert!(matches!(err, InvokeError::InvalidRequest { .. }), "{err:?}");
}

#[tokio::test]
async fn a_rust_panic_reads_well() {
    let script = r#"
echo "INFO worker 3 starting" >&2
echo "thread 'main' panicked at crates/mlless-runtime/src/worker.rs:42:9:" >&2
echo "minibatch 7 is missing" >&2
echo "note: run with \`RUST_BACKTRACE=1\` environment variable to display a backtrace" >&2
exit 101"#;
    let report = sh(script)
        .invoke(FunctionRequest::new("worker-3", Vec::new(), limits()))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    assert_eq!(
        report.describe_failure().as_deref(),
        Some(
            "worker-3 failed (exit code 101): thread 'main' panicked at \
             crates/mlless-runtime/src/worker.rs:42:9: minibatch 7 is missing"
        )
    );
}

#[tokio::test]
async fn death_by_signal_names_the_signal() {
    let report = sh("echo 'about to crash' >&2; kill -SEGV $$")
        .invoke(FunctionRequest::new("w", Vec::new(), limits()))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    match &report.outcome {
        Outcome::Failed {
            exit_code: None,
            message,
        } => {
            assert!(message.contains("signal 11 (SIGSEGV)"), "{message}");
            assert!(message.contains("about to crash"), "{message}");
        }
        other => panic!("expected a failure by signal, got {other:?}"),
    }
}

#[tokio::test]
async fn memory_of_the_process_itself_is_capped() {
    // python3 as the process itself (exec), not as a child of the shell.
    let invoker = sh(r#"exec python3 -c 'import time; b = b"x" * (400 << 20); time.sleep(60)'"#);
    let report = invoker
        .invoke(FunctionRequest::new(
            "hog",
            Vec::new(),
            Limits::new(100, Duration::from_secs(60)),
        ))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    match report.outcome {
        Outcome::MemoryExceeded { limit_mb, peak_mb } => {
            assert_eq!(limit_mb, 100);
            assert!(peak_mb > 100.0);
        }
        other => panic!("expected MemoryExceeded, got {other:?}"),
    }
}

#[tokio::test]
async fn a_function_within_its_cap_is_left_alone() {
    let report = sh(r#"python3 -c 'import time; b = b"x" * (40 << 20); time.sleep(0.3)'"#)
        .invoke(FunctionRequest::new(
            "w",
            Vec::new(),
            Limits::new(128, Duration::from_secs(60)),
        ))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    assert_eq!(
        report.outcome,
        Outcome::Succeeded,
        "{:?}",
        report.describe_failure()
    );
    assert!(
        report.peak_rss_mb > 40.0 && report.peak_rss_mb < 128.0,
        "peak {} MB",
        report.peak_rss_mb
    );
}

/// Waits up to 3 s for a process to be gone (reaped by whoever adopted it).
async fn gone(pid: u32) -> bool {
    for _ in 0..60 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            // A zombie waiting for its new parent to reap it is gone for our purpose.
            Ok(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|s| s.trim_start().starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    false
}

#[tokio::test]
async fn leftover_children_die_with_the_function() {
    let dir = temp_dir();
    let pidfile = dir.join("pid");
    let invoker = sh(r#"sleep 60 & echo $! > "$PIDFILE"; exit 0"#).with_env("PIDFILE", &pidfile);
    let report = invoker
        .invoke(FunctionRequest::new("w", Vec::new(), limits()))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .expect("pid file")
        .trim()
        .parse()
        .expect("a pid");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(report.outcome, Outcome::Succeeded);
    assert!(
        gone(pid).await,
        "background child {pid} outlived its function"
    );
}

#[tokio::test]
async fn a_timeout_kills_children_that_hold_the_pipes() {
    // The grandchild `sleep` keeps stderr open: the invoker must not wait for it.
    let started = std::time::Instant::now();
    let report = sh("sleep 60 | cat >&2; exit 0")
        .invoke(FunctionRequest::new(
            "w",
            Vec::new(),
            Limits::new(256, Duration::from_millis(500)),
        ))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    assert_eq!(report.outcome, Outcome::TimedOut { limit_s: 0.5 });
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn killing_a_finished_invocation_changes_nothing() {
    let invocation = sh("exit 0")
        .invoke(FunctionRequest::new("w", Vec::new(), limits()))
        .await
        .expect("invoke");
    let switch = invocation.kill_switch();
    for _ in 0..200 {
        if invocation.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    switch.kill();
    let report = invocation.wait().await.expect("wait");
    assert_eq!(report.outcome, Outcome::Succeeded);
}

#[tokio::test]
async fn the_invoker_works_behind_an_arc_dyn() {
    let invoker: std::sync::Arc<dyn Invoker> = std::sync::Arc::new(sh("exit 0"));
    let report = invoker
        .invoke(FunctionRequest::new("w", Vec::new(), limits()))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    assert!(report.outcome.is_success());
}

/// Helper of `functions_die_with_the_invoker`: run in a child process of the test binary.
#[tokio::test]
#[ignore = "run by functions_die_with_the_invoker"]
async fn invoker_that_gets_killed() {
    let Some(pidfile) = std::env::var_os("MLLESS_FAAS_TEST_PIDFILE") else {
        return;
    };
    let invocation = LocalInvoker::new("/bin/sleep".into(), vec!["60".into()])
        .invoke(FunctionRequest::new("orphan", Vec::new(), limits()))
        .await
        .expect("invoke");
    let pid = invocation.pid().expect("pid");
    std::fs::write(&pidfile, pid.to_string()).expect("write pid file");
    let _ = invocation.wait().await; // killed with SIGKILL meanwhile
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn functions_die_with_the_invoker() {
    let dir = temp_dir();
    let pidfile = dir.join("pid");
    let mut invoker_process = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--exact",
            "invoker_that_gets_killed",
            "--ignored",
            "--nocapture",
        ])
        .env("MLLESS_FAAS_TEST_PIDFILE", &pidfile)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run the test binary");
    let mut pid = None;
    for _ in 0..200 {
        pid = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok());
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = invoker_process.kill(); // SIGKILL: no destructor, no kill_on_drop runs
    let _ = invoker_process.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let pid = pid.expect("the helper reported the pid of its function");
    assert!(gone(pid).await, "function {pid} outlived its invoker");
}
