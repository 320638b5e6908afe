//! The conformance suites against an S3-compatible server, when one is configured:
//! `MLLESS_TEST_S3_URL=s3://bucket/prefix` plus the usual `AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (e.g. a local `moto_server`, with the bucket
//! created beforehand). Without `MLLESS_TEST_S3_URL` these tests pass without doing anything.

use std::sync::Arc;

use mlless_store::{Channel, ObjectStoreChannel, Store, StoreKind, conformance};

fn s3_store() -> Option<Store> {
    let url = std::env::var("MLLESS_TEST_S3_URL").ok()?;
    let store = Store::open(&url).expect("open the S3 test store");
    assert_eq!(store.kind(), StoreKind::S3);
    Some(store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_conformance_s3() {
    let Some(store) = s3_store() else {
        eprintln!("MLLESS_TEST_S3_URL not set: skipped");
        return;
    };
    store.check_writable().await.expect("writable");
    conformance::store_conformance(&store.child("store")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_conformance_s3() {
    let Some(store) = s3_store() else {
        eprintln!("MLLESS_TEST_S3_URL not set: skipped");
        return;
    };
    let store = store.child("channel");
    let factory = move |job: &str| -> Arc<dyn Channel> {
        Arc::new(ObjectStoreChannel::new(store.clone(), job).expect("channel"))
    };
    conformance::run_all(&factory).await;
}
