//! Tests of `mlless prepare` on local data: splits, normalisation, cancels, streaming.

use super::*;

/// Two staged sparse minibatches in the in-memory store `name`, and their keys.
async fn staged(name: &str) -> (Store, Vec<String>) {
    let store = Store::open(&format!("memory://{name}")).expect("memory store");
    let mut keys = Vec::new();
    for i in 0..2 {
        let mut rows = mlless_core::SparseBatch::new();
        rows.push_row(1.0, &[0, 2], &[1.0, 4.0 + i as f32]);
        let key = batch_key("staging/train", i);
        put_batch(&store, key.clone(), &Batch::Sparse(rows))
            .await
            .expect("staged");
        keys.push(key);
    }
    (store, keys)
}

#[tokio::test]
async fn map_tasks_asked_to_stop_write_no_result() {
    let (store, keys) = staged("prepare-stop").await;
    let range = RangeMapTask {
        data_url: store.url().to_string(),
        features: 3,
        keys: keys.clone(),
        out_key: "staging/ranges/0000.bin".into(),
        stop_key: Some(STOP_KEY.into()),
    };
    run_range_map(range.clone()).await.expect("ranges");
    assert!(store.exists(&range.out_key).await.expect("exists"));
    let scale = ScaleMapTask {
        data_url: store.url().to_string(),
        range_key: range.out_key.clone(),
        items: keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), batch_key("train", i)))
            .collect(),
        out_key: "staging/written/0000.json".into(),
        stop_key: Some(STOP_KEY.into()),
    };

    store
        .put(STOP_KEY, Bytes::from_static(b"stop"))
        .await
        .expect("stop");
    let stopped = RangeMapTask {
        out_key: "staging/ranges/0001.bin".into(),
        ..range.clone()
    };
    run_range_map(stopped.clone()).await.expect("stops");
    run_scale_map(scale.clone()).await.expect("stops");
    for key in [&stopped.out_key, &scale.out_key, &batch_key("train", 0)] {
        assert!(!store.exists(key).await.expect("exists"), "{key} written");
    }

    // Without the stop object (or without a stop key, as older payloads) they run through.
    store.delete(STOP_KEY).await.expect("delete");
    run_range_map(range).await.expect("ranges");
    let old = ScaleMapTask {
        stop_key: None,
        ..scale
    };
    run_scale_map(old.clone()).await.expect("scaled");
    assert!(store.exists(&old.out_key).await.expect("exists"));
    assert!(store.exists(&batch_key("train", 1)).await.expect("exists"));
}

#[test]
fn a_cancel_says_where_it_stopped_and_what_is_left() {
    let mapping = PrepareStage::Mapping {
        round: MapRound::Scale,
        tasks: 2,
        minibatches: 10,
    };
    assert_eq!(
        mapping.to_string(),
        "2 scale-map tasks scaling 10 minibatches"
    );
    let message = describe_cancel("s3://b/d", &mapping, false);
    assert!(
        message.starts_with("cancelled during the scale-map tasks, which stopped after")
            && message.contains("s3://b/d holds no data set"),
        "{message}"
    );
    assert!(describe_cancel("s3://b/d", &mapping, true).contains("which were killed"));
    let reading = PrepareStage::Reading { rows: 4_096 };
    assert!(
        describe_cancel("s3://b/d", &reading, false)
            .contains("nothing was written, s3://b/d is as it was")
    );
    assert_eq!(
        reading.to_string(),
        "reading and shuffling the input: 4096 rows so far"
    );
    assert!(reading.same_stage(&PrepareStage::Reading { rows: 0 }));
    let writing = |written| PrepareStage::Writing {
        minibatches: 10,
        staged: false,
        written,
    };
    assert_eq!(writing(3).to_string(), "writing 10 minibatches: 3 written");
    assert!(writing(3).same_stage(&writing(0)) && !writing(3).same_stage(&reading));
}

#[test]
fn chunks_are_balanced_and_keep_order() {
    let c = chunks((0..10).collect::<Vec<_>>(), 4);
    assert_eq!(
        c,
        vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7], vec![8, 9]]
    );
    assert_eq!(chunks(vec![1], 4), vec![vec![1]]);
    assert_eq!(chunks(Vec::<u8>::new(), 3), vec![Vec::<u8>::new()]);
}

#[tokio::test]
async fn what_a_failed_preparation_wrote_locally_is_removed_with_killed_uploads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().display().to_string()).expect("local store");
    for key in [batch_key("train", 0), "staging/ranges/0000.bin".to_string()] {
        store
            .put(&key, Bytes::from_static(b"x"))
            .await
            .expect("put");
    }
    // A map task killed (over its memory) while uploading its ranges leaves the local
    // backend's staged file, which no listing shows.
    std::fs::write(dir.path().join("staging/ranges/0001.bin#12"), b"half").expect("staged");
    remove_written(&store).await;
    for part in ["train", "staging"] {
        assert!(!dir.path().join(part).exists(), "{part}/ left behind");
    }
}
