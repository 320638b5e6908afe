//! Figures of the local invoker, printed rather than asserted (timings depend on the machine):
//! `cargo test -p mlless-faas --test measure -- --ignored --nocapture --test-threads 1`.

use std::time::{Duration, Instant};

use mlless_faas::{FunctionRequest, Invoker, Limits, LocalInvoker};

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// CPU time (user + system) of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "prints figures"]
async fn startup_latency_of_bin_true() {
    const RUNS: usize = 21;
    let invoker = LocalInvoker::new("/bin/true".into(), Vec::new());
    let limits = Limits::new(128, Duration::from_secs(10));
    let mut wall = Vec::new();
    let mut reported = Vec::new();
    for _ in 0..RUNS + 2 {
        let t = Instant::now();
        let report = invoker
            .invoke(FunctionRequest::new("true", Vec::new(), limits))
            .await
            .expect("invoke")
            .wait()
            .await
            .expect("wait");
        wall.push(t.elapsed().as_secs_f64() * 1e3);
        reported.push(report.duration_ms as f64);
    }
    let (wall, reported) = (wall.split_off(2), reported.split_off(2)); // warm-up
    let mut raw = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        tokio::process::Command::new("/bin/true")
            .status()
            .await
            .expect("spawn");
        raw.push(t.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "/bin/true via LocalInvoker: median {:.2} ms invoke..wait (report duration_ms median {:.0}); \
         plain tokio::process::Command: median {:.2} ms",
        median(wall),
        median(reported),
        median(raw)
    );
}

async fn watcher_cpu(program: &str, args: &[&str], interval: Duration) -> Duration {
    let invoker = LocalInvoker::new(program.into(), args.iter().map(|s| s.to_string()).collect())
        .with_memory_sample_interval(interval);
    let limits = Limits::new(1024, Duration::from_secs(60));
    let cpu0 = thread_cpu();
    let report = invoker
        .invoke(FunctionRequest::new("idle", Vec::new(), limits))
        .await
        .expect("invoke")
        .wait()
        .await
        .expect("wait");
    let cpu = thread_cpu() - cpu0;
    assert!(report.outcome.is_success(), "{report:?}");
    cpu
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "prints figures"]
async fn overhead_of_the_rss_watch() {
    let seconds = 5.0;
    let off = Duration::from_secs(3600);
    let on = mlless_faas::DEFAULT_MEMORY_SAMPLE_INTERVAL;
    let samples = seconds / on.as_secs_f64();
    let py_threads = "import threading, time\n\
        ts = [threading.Thread(target=time.sleep, args=(5,)) for _ in range(8)]\n\
        [t.start() for t in ts]\n[t.join() for t in ts]";
    for (what, program, args) in [
        ("a 1-thread process (sleep 5)", "/bin/sleep", vec!["5"]),
        (
            "a 9-thread process (python)",
            "/usr/bin/env",
            vec!["python3", "-c", py_threads],
        ),
        (
            "a shell with 3 children (sleep 5 x3)",
            "/bin/sh",
            vec!["-c", "sleep 5 & sleep 5 & sleep 5; wait"],
        ),
    ] {
        let base = watcher_cpu(program, &args, off).await;
        let watched = watcher_cpu(program, &args, on).await;
        let extra = watched.saturating_sub(base);
        println!(
            "{what}: watcher CPU {:.1} ms with sampling every {on:?} vs {:.1} ms without, \
             i.e. {:.1} µs per sample, {:.2}% of one core",
            watched.as_secs_f64() * 1e3,
            base.as_secs_f64() * 1e3,
            extra.as_secs_f64() * 1e6 / samples,
            extra.as_secs_f64() / seconds * 100.0
        );
    }
}
