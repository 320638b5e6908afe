//! The foundation's convergence runs through every channel backend: the object store on the
//! local filesystem, Redis with one and two shards, Memcached, and S3 — the servers that
//! `scripts/test.sh` starts on loopback — and one and two `mlless ps` servers this test starts;
//! DynamoDB (on moto_server, whose every request takes tens of milliseconds) in the
//! MovieLens-100k-shaped run only. BSP applies the same updates in the same order whatever
//! carries them, so every channel must also yield the very same model.

mod common;

use common::*;
use mlless_store::RequestCounts;

/// `mlless ps` processes of a test, killed when it ends (also when it panics).
struct PsServers(Vec<std::process::Child>);

impl Drop for PsServers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

const PS_SECRET: &str = "channels-test-secret";

impl PsServers {
    /// Starts another `mlless ps` on a free loopback port; its `ps://` URL.
    fn start(&mut self) -> String {
        use std::io::BufRead;
        let mut child = mlless()
            .args(["ps", "--listen", "127.0.0.1:0"])
            .env("MLLESS_PS_SECRET", PS_SECRET)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start mlless ps");
        let stdout = child.stdout.take().expect("its standard output");
        self.0.push(child);
        let mut lines = std::io::BufReader::new(stdout).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("mlless ps said where it listens")
                .expect("a line");
            if let Some(addr) = line.strip_prefix("listening on ") {
                break addr.trim().to_string();
            }
        };
        format!("ps://:{PS_SECRET}@{addr}")
    }
}

/// The channels to test: (name, URL); `None` is the default (the run's object store). The
/// parameter servers they use live as long as the [`PsServers`].
fn channels() -> (Vec<(&'static str, Option<String>)>, PsServers) {
    let mut servers = PsServers(Vec::new());
    let (first, second) = (servers.start(), servers.start());
    let mut out = vec![
        ("file", None),
        ("ps, 1 server", Some(first.clone())),
        ("ps, 2 servers", Some(format!("{first},{second}"))),
    ];
    if let Ok(urls) = std::env::var("MLLESS_TEST_REDIS_URLS") {
        let first = urls.split(',').next().unwrap_or_default().to_string();
        out.push(("redis, 1 shard", Some(first)));
        out.push(("redis, 2 shards", Some(urls)));
    } else {
        eprintln!("MLLESS_TEST_REDIS_URLS not set (scripts/test.sh sets it): Redis skipped");
    }
    if let Ok(url) = std::env::var("MLLESS_TEST_MEMCACHED_URL") {
        out.push(("memcached", Some(url)));
    } else {
        eprintln!("MLLESS_TEST_MEMCACHED_URL not set: Memcached skipped");
    }
    if let Ok(base) = std::env::var("MLLESS_TEST_S3_URL") {
        out.push((
            "s3",
            Some(format!("{base}/channels-{}", std::process::id())),
        ));
    } else {
        eprintln!("MLLESS_TEST_S3_URL not set: S3 skipped");
    }
    (out, servers)
}

/// The DynamoDB channel of the tests (`MLLESS_TEST_DYNAMODB_URL`, on moto_server), if set.
fn dynamodb_url() -> Option<String> {
    let url = std::env::var("MLLESS_TEST_DYNAMODB_URL").ok();
    if url.is_none() {
        eprintln!("MLLESS_TEST_DYNAMODB_URL not set: DynamoDB skipped");
    }
    url
}

fn train_on_every_channel(
    dir: &std::path::Path,
    data: &str,
    args: &[&str],
) -> Vec<(&'static str, mlless_job::RunRecord, Vec<f32>)> {
    let (channels, _servers) = channels();
    channels
        .into_iter()
        .map(|(name, channel)| {
            let mut all = vec!["--data", data, "--workers", "4"];
            all.extend(args);
            if let Some(url) = &channel {
                all.extend(["--channel", url.as_str()]);
            }
            let record = train(dir, &name.replace([' ', ','], "-"), &all);
            let params = stored_params(&record);
            (name, record, params)
        })
        .collect()
}

#[test]
fn sparse_lr_converges_identically_through_every_channel() {
    let dir = tempdir();
    let (data, reference) = sparse_lr_data(dir.path());
    let args = ["--model", "lr", "--ps-instance", "m5.large:0.096"];
    let runs = train_on_every_channel(dir.path(), &s(&data), &args);
    let (_, _, first) = &runs[0];
    for (name, record, params) in &runs {
        assert_parameter_servers_billed(name, record, 0.096);
        let loss = metric(record, "test_logloss");
        assert!(
            loss <= 1.02 * reference,
            "{name}: test log loss {loss} vs truth {reference}"
        );
        assert!(
            params == first,
            "{name}: the model differs from the file channel's"
        );
        assert_requests_counted(name, record);
    }
}

/// A run through `mlless ps` servers pays each server's VM at `usd_per_hour` for its wall time.
fn assert_parameter_servers_billed(name: &str, record: &mlless_job::RunRecord, usd_per_hour: f64) {
    let servers = match name {
        "ps, 1 server" => 1.0,
        "ps, 2 servers" => 2.0,
        _ => return,
    };
    let bill = record.bill.as_ref().expect("a bill");
    let expected = servers * usd_per_hour * record.wall_s / 3600.0;
    assert!(
        expected > 0.0 && (bill.services_usd - expected).abs() <= 1e-9 * expected.max(1.0),
        "{name}: billed {} for its servers, expected {expected}",
        bill.services_usd
    );
}

/// The requests a run counted, against a hand count of what its protocol makes. Each worker
/// invocation left its count in the run (`requests/worker-N-….json`): on the object-store
/// channel a worker PUTs exactly its update and its statistics every step, its final replica,
/// and its count (2 · steps + 2); on a server channel only its count; on both, one checkpoint
/// every `checkpoint_every` steps but after the last. Every worker-step reads
/// its minibatch, and on the object store also the P updates of its step (GETs). The record's
/// total holds at least the workers' counts, and the bill charges exactly the total. On
/// DynamoDB every worker-step writes its update (a write unit at least) and reads the step's
/// (a read unit at least), which the bill charges at DynamoDB's prices.
fn assert_requests_counted(name: &str, record: &mlless_job::RunRecord) {
    let total = record
        .requests
        .unwrap_or_else(|| panic!("{name}: the record has no request counts"));
    let p = u64::from(record.spec.training.workers);
    let on_object_store = matches!(name, "file" | "s3");
    let run_dir = std::path::PathBuf::from(
        record
            .model_url
            .strip_prefix("file://")
            .expect("a local run"),
    )
    .parent()
    .expect("the run's directory")
    .join("requests");
    let mut workers = RequestCounts::default();
    for w in 0..record.spec.training.workers {
        let steps = record
            .steps
            .iter()
            .filter(|s| s.workers.iter().any(|ws| ws.worker == w))
            .count() as u64;
        let prefix = format!("worker-{w}-g0-r0-");
        let files: Vec<_> = std::fs::read_dir(&run_dir)
            .expect("the run's request counts")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .collect();
        assert_eq!(files.len(), 1, "{name}: worker {w} left one count");
        let counts: RequestCounts =
            serde_json::from_slice(&std::fs::read(files[0].path()).expect("read"))
                .expect("a count");
        let every = record.spec.training.checkpoint_every;
        let checkpoints = (steps - 1).checked_div(every).unwrap_or(0);
        let puts = checkpoints + if on_object_store { 2 * steps + 2 } else { 1 };
        assert_eq!(
            counts.puts, puts,
            "{name}: worker {w}, {steps} steps: {counts:?}"
        );
        let reads = if on_object_store {
            steps * (1 + p)
        } else {
            steps
        };
        assert!(
            counts.gets >= reads,
            "{name}: worker {w}, {steps} steps: {counts:?}"
        );
        workers += counts;
    }
    assert!(
        total.puts >= workers.puts && total.gets >= workers.gets,
        "{name}: {total:?}"
    );
    let bill = record.bill.as_ref().expect("a bill");
    let prices = mlless_cost::PriceTable::aws_lambda();
    let storage = total.writes() as f64 / 1000.0 * prices.object_write_usd_per_1000
        + total.reads() as f64 / 1000.0 * prices.object_read_usd_per_1000;
    assert!(
        (bill.storage_usd - storage).abs() <= 1e-12,
        "{name}: billed {} for requests worth {storage}",
        bill.storage_usd
    );
    let worker_steps: u64 = record.steps.iter().map(|s| s.workers.len() as u64).sum();
    if name == "dynamodb" {
        assert!(
            workers.table_write_units >= worker_steps && workers.table_read_units >= worker_steps,
            "{name}: {worker_steps} worker-steps: {workers:?}"
        );
        let table = total.table_write_units as f64 / 1e6 * prices.dynamodb_write_usd_per_million
            + total.table_read_units as f64 / 1e6 * prices.dynamodb_read_usd_per_million;
        assert!(
            table > 0.0 && (bill.table_usd - table).abs() <= 1e-12,
            "{name}: billed {} for request units worth {table}",
            bill.table_usd
        );
    } else {
        assert_eq!(bill.table_usd, 0.0, "{name}: {bill:?}");
    }
}

/// Synthetic ratings, 2,000 users × 1,500 items, rank 10: test RMSE ≤ 1.1 σ with 4 workers.
/// These uniform ratings, where the interaction dominates the noise, want less L2 than PMF's
/// default, chosen for real ratings (README, "Why … PMF's defaults").
#[test]
fn ratings_converge_identically_through_every_channel() {
    let dir = tempdir();
    let (data, noise) = ratings_data(dir.path());
    let runs = train_on_every_channel(dir.path(), &s(&data), &["--model", "pmf", "--l2", "0.05"]);
    let (_, _, first) = &runs[0];
    for (name, record, params) in &runs {
        // No --ps-instance: a c5.large each.
        assert_parameter_servers_billed(name, record, 0.085);
        let rmse = metric(record, "test_rmse");
        assert!(
            rmse <= 1.1 * noise,
            "{name}: test RMSE {rmse} > 1.1 σ = {}",
            1.1 * noise
        );
        assert!(
            params == first,
            "{name}: the model differs from the file channel's"
        );
    }
}

/// MovieLens-100k-shaped PMF (943 users × 1,682 items, about 100,000 ratings, rank 10) with
/// P = 4 reaches the same test RMSE, within 0.5%, through one and two `mlless ps` servers and
/// through DynamoDB as through the default channel: the very same model, as BSP applies the
/// same updates in the same order.
#[test]
fn ml100k_shaped_pmf_reaches_the_default_channels_rmse_through_ps_and_dynamodb() {
    let dir = tempdir();
    let spec = mlless_data::RatingsSpec {
        users: 943,
        items: 1682,
        rank: 10,
        density: 100_000.0 / (943.0 * 1682.0),
        noise: 0.5,
        seed: 11,
        ..Default::default()
    };
    let (data, _) = ratings_prepared(
        dir.path(),
        &spec,
        &["--validation-fraction", "0", "--batch-size", "1000"],
    );
    let data = s(&data);
    let args = ["--data", data.as_str(), "--model", "pmf", "--workers", "4"];
    let default = train(dir.path(), "ml100k-default", &args);
    let mut servers = PsServers(Vec::new());
    let (first, second) = (servers.start(), servers.start());
    let mut channels = vec![
        ("ps, 1 server", first.clone()),
        ("ps, 2 servers", format!("{first},{second}")),
    ];
    if let Some(url) = dynamodb_url() {
        channels.push(("dynamodb", url));
    }
    for (name, url) in &channels {
        let mut through = args.to_vec();
        through.extend(["--channel", url.as_str()]);
        let record = train(dir.path(), &name.replace([' ', ','], "-"), &through);
        let (a, b) = (metric(&default, "test_rmse"), metric(&record, "test_rmse"));
        assert!(
            (a - b).abs() <= 0.005 * a,
            "test RMSE {b} through {name}, {a} through the default channel"
        );
        assert!(
            stored_params(&default) == stored_params(&record),
            "{name}: the model differs from the default channel's"
        );
        assert_requests_counted(name, &record);
    }
}

/// Through two `mlless ps` servers a job uses the server pattern by default: the servers
/// average, so each worker receives one mean a step instead of its peers' updates — fewer
/// bytes than broadcast through the same servers (by the overlap of the updates) — and BSP
/// trains broadcast's model bit for bit, with GA-SGD and MA-SGD. Under ISP the part a worker held back joins the servers' mean: nothing is lost (the
/// replicas agree) and the model reaches broadcast ISP's test log loss.
#[test]
fn the_parameter_servers_average() {
    use mlless_job::{Pattern, RunRecord};
    let dir = tempdir();
    let spec = mlless_data::SparseLrSpec::new(40_000, 10_000, 20, 23);
    let data = sparse_lr_prepared(dir.path(), &spec, &[]);
    let data = s(&data);
    let mut servers = PsServers(Vec::new());
    let url = format!("{},{}", servers.start(), servers.start());
    let base = [
        "--data",
        &data,
        "--model",
        "lr",
        "--workers",
        "4",
        "--max-epochs",
        "2",
        "--channel",
        &url,
    ];
    let run = |name: &str, extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend(extra);
        train(dir.path(), name, &args)
    };
    let received = |r: &RunRecord| -> u64 {
        r.steps
            .iter()
            .flat_map(|s| &s.workers)
            .map(|w| w.bytes_received)
            .sum()
    };
    let averaged = run("servers-average", &[]);
    assert_eq!(
        averaged.spec.training.exchange_pattern(),
        Pattern::Server,
        "the default on parameter servers"
    );
    let broadcast = run("servers-broadcast", &["--pattern", "broadcast"]);
    assert_eq!(averaged.steps.len(), broadcast.steps.len());
    assert!(
        stored_params(&averaged) == stored_params(&broadcast),
        "the servers' mean trained another model than broadcast"
    );
    // Sparse LR updates of 4 workers barely overlap, so their mean is nearly as large as
    // the 3 peers' updates together: the saving is the overlap (about a quarter here) and
    // the messages (one per server, not one per peer).
    assert!(
        (received(&averaged) as f64) < 0.9 * received(&broadcast) as f64,
        "received {} bytes through the servers' mean, {} by broadcast",
        received(&averaged),
        received(&broadcast)
    );

    // MA-SGD averages the replicas through the servers' mean too: broadcast's model.
    let ma = run("servers-ma", &["--algorithm", "ma"]);
    let ma_broadcast = run(
        "servers-ma-broadcast",
        &["--algorithm", "ma", "--pattern", "broadcast"],
    );
    assert!(
        ma.rounds > 0 && ma.rounds == ma_broadcast.rounds,
        "{} rounds",
        ma.rounds
    );
    assert!(
        stored_params(&ma) == stored_params(&ma_broadcast),
        "MA through the servers' mean trained another model than broadcast"
    );

    let isp = run("servers-isp", &["--sync", "isp"]);
    let isp_broadcast = run(
        "servers-isp-broadcast",
        &["--sync", "isp", "--pattern", "broadcast"],
    );
    let (loss, target) = (
        metric(&isp, "test_logloss"),
        metric(&isp_broadcast, "test_logloss"),
    );
    assert!(loss <= target * 1.01, "ISP: {loss} vs broadcast's {target}");
    assert!(isp.replica_spread < 1e-4, "spread {}", isp.replica_spread);
    let held: u64 = isp
        .steps
        .iter()
        .flat_map(|s| &s.workers)
        .map(|w| w.entries_held)
        .sum();
    assert!(held > 0, "ISP held nothing back");
}

/// `--emulate` puts a cloud's latency on every request of the functions' channel: at 25 ms a
/// request each worker's exchange (a publish, then a collect) takes at least 50 ms, where the
/// bare channel takes a few; and the run trains the bare run's model (the latency changes when
/// messages arrive, not what they are).
#[test]
fn emulated_latency_slows_every_exchange_and_changes_nothing_else() {
    let dir = tempdir();
    let spec = mlless_data::SparseLrSpec::new(6_000, 1_000, 10, 3);
    let data = sparse_lr_prepared(dir.path(), &spec, &["--validation-fraction", "0"]);
    let cloud = write(
        dir.path(),
        "cloud.toml",
        "name = \"slow\"\nrequest_ms = 25\nmb_per_s = 100\n",
    );
    let data = s(&data);
    let args = [
        "--data",
        data.as_str(),
        "--model",
        "lr",
        "--workers",
        "2",
        "--max-epochs",
        "1",
    ];
    let bare = train(dir.path(), "bare", &args);
    let mut slow_args = args.to_vec();
    let cloud = s(&cloud);
    slow_args.extend(["--emulate", cloud.as_str()]);
    let slow = train(dir.path(), "slow", &slow_args);
    let exchanges = |record: &mlless_job::RunRecord| -> Vec<f64> {
        let mut ms: Vec<f64> = record
            .steps
            .iter()
            .flat_map(|s| s.workers.iter().map(|w| w.exchange_ms))
            .collect();
        ms.sort_by(f64::total_cmp);
        ms
    };
    let (bare_ms, slow_ms) = (exchanges(&bare), exchanges(&slow));
    assert!(!slow_ms.is_empty() && slow_ms.len() == bare_ms.len());
    assert!(
        slow_ms[0] >= 50.0,
        "an emulated exchange took {} ms, under its two requests of 25 ms",
        slow_ms[0]
    );
    assert!(
        bare_ms[bare_ms.len() / 2] < 25.0,
        "the bare channel's median exchange took {} ms",
        bare_ms[bare_ms.len() / 2]
    );
    assert_eq!(stored_params(&bare), stored_params(&slow));
}
