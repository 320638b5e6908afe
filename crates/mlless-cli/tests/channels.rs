//! The foundation's convergence runs through every channel backend: the object store on the
//! local filesystem, Redis with one and two shards, Memcached, and S3 — the servers that
//! `scripts/test.sh` starts on loopback. BSP applies the same updates in the same order whatever
//! carries them, so every channel must also yield the very same model.

mod common;

use common::*;

/// The channels to test: (name, URL); `None` is the default (the run's object store).
fn channels() -> Vec<(&'static str, Option<String>)> {
    let mut out = vec![("file", None)];
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
    out
}

fn train_on_every_channel(
    dir: &std::path::Path,
    data: &str,
    args: &[&str],
) -> Vec<(&'static str, mlless_job::RunRecord, Vec<f32>)> {
    channels()
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
    let runs = train_on_every_channel(dir.path(), &s(&data), &["--model", "lr"]);
    let (_, _, first) = &runs[0];
    for (name, record, params) in &runs {
        let loss = metric(record, "test_logloss");
        assert!(
            loss <= 1.02 * reference,
            "{name}: test log loss {loss} vs truth {reference}"
        );
        assert!(
            params == first,
            "{name}: the model differs from the file channel's"
        );
    }
}

/// Synthetic ratings, 2,000 users × 1,500 items, rank 10: test RMSE ≤ 1.1 σ with 4 workers.
#[test]
fn ratings_converge_identically_through_every_channel() {
    let dir = tempdir();
    let (data, noise) = ratings_data(dir.path());
    let runs = train_on_every_channel(dir.path(), &s(&data), &["--model", "pmf"]);
    let (_, _, first) = &runs[0];
    for (name, record, params) in &runs {
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
