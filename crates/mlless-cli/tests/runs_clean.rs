//! `mlless runs STORE --clean`: a run's leftovers — checkpoints, and whatever its job still has in
//! its channel (objects, Redis keys, Memcached entries) — go; its spec, record and model stay.

mod common;

use std::path::Path;

use common::{block_on, fails, lr_checkpointed_args, ok, read_record, s, tempdir};
use mlless_job::RunRecord;

/// Trains a 2-epoch checkpointed LR run on `channel` (the run's store without one) below
/// `runs`, its record also in `record_path`; returns the record.
fn checkpointed_run(
    data: &Path,
    runs: &Path,
    channel: Option<&str>,
    record_path: &Path,
) -> RunRecord {
    let (d, r) = (s(data), s(runs));
    let rec = s(record_path);
    let mut args = vec!["train"];
    let mut extra = vec!["--runs", r.as_str(), "--record", rec.as_str(), "--quiet"];
    if let Some(channel) = channel {
        extra.extend(["--channel", channel]);
    }
    args.extend(lr_checkpointed_args(&d, "2", &extra));
    ok(&args);
    read_record(record_path)
}

/// Leaves a key in the channel of `record`'s job, as a driver killed mid-run would.
fn leave_key(record: &RunRecord, key: &str) {
    block_on(async {
        let run = mlless_store::Store::open(&record.spec.run_url).expect("run store");
        let channel = mlless_store::open_channel(
            record.spec.training.channel.as_deref(),
            &run,
            &record.spec.job_id,
        )
        .await
        .expect("channel opens");
        channel
            .put_key(key, b"left over".to_vec().into())
            .await
            .expect("put");
    });
}

/// Whether `key` is still in the channel of `record`'s job.
fn has_key(record: &RunRecord, key: &str) -> bool {
    block_on(async {
        let run = mlless_store::Store::open(&record.spec.run_url).expect("run store");
        let channel = mlless_store::open_channel(
            record.spec.training.channel.as_deref(),
            &run,
            &record.spec.job_id,
        )
        .await
        .expect("channel opens");
        channel.get_key(key).await.expect("get").is_some()
    })
}

/// Checkpoint objects below a local run.
fn checkpoint_files(run: &Path) -> usize {
    walk(&run.join("checkpoints"))
}

fn walk(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| {
                if e.path().is_dir() {
                    walk(&e.path())
                } else {
                    1
                }
            })
            .sum()
    })
}

/// A run below `runs` named `job` with `like`'s spec, one checkpoint and nothing else: no
/// record, no failure, no heartbeat.
fn fake_run(runs: &Path, like: &RunRecord, job: &str) -> std::path::PathBuf {
    let run = runs.join(job);
    std::fs::create_dir_all(run.join("checkpoints/supervisor")).expect("mkdir");
    let spec = std::fs::read_to_string(runs.join(&like.spec.job_id).join("spec.json"))
        .expect("spec")
        .replace(&like.spec.job_id, job);
    std::fs::write(run.join("spec.json"), spec).expect("write spec");
    std::fs::write(
        run.join("checkpoints/supervisor/step-000000000010.bin"),
        b"x",
    )
    .expect("write");
    run
}

#[test]
fn clean_removes_checkpoints_and_channel_leftovers_and_keeps_the_record() {
    let dir = tempdir();
    let spec = mlless_data::SparseLrSpec::new(40_000, 2_000, 10, 3);
    let data = common::sparse_lr_prepared(dir.path(), &spec, &[]);
    let runs = dir.path().join("runs");
    let r = s(&runs);

    let mut channels = vec![None];
    channels.extend(common::server_channels().into_iter().map(Some));
    let mut records = Vec::new();
    for (i, channel) in channels.iter().enumerate() {
        let record_path = dir.path().join(format!("run-{i}.json"));
        let record = checkpointed_run(&data, &runs, channel.as_deref(), &record_path);
        leave_key(&record, "left-by-a-killed-driver");
        assert!(has_key(&record, "left-by-a-killed-driver"));
        records.push(record);
    }
    // A run with a spec and nothing else (no record, failure or heartbeat): its driver was lost.
    let lost = fake_run(&runs, &records[0], "job-1-lost");
    // The same with a heartbeat 5 s old: its driver is running it; one 60 s old: lost.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let running = fake_run(&runs, &records[0], "job-2-running");
    let heartbeat = |ms: u64| format!("{{\"unix_ms\":{ms}}}");
    std::fs::write(running.join("heartbeat.json"), heartbeat(now_ms - 5_000)).expect("write");
    let stale = fake_run(&runs, &records[0], "job-3-stale");
    std::fs::write(stale.join("heartbeat.json"), heartbeat(now_ms - 60_000)).expect("write");
    assert!(
        runs.join(&records[0].spec.job_id)
            .join("heartbeat.json")
            .exists(),
        "the driver wrote its heartbeat"
    );

    let before: Vec<usize> = records
        .iter()
        .map(|record| checkpoint_files(&runs.join(&record.spec.job_id)))
        .collect();
    assert!(
        before.iter().all(|n| *n > 0),
        "checkpoints before: {before:?}"
    );

    let out = String::from_utf8_lossy(&ok(&["runs", &r, "--clean"]).stdout).into_owned();
    eprintln!("{out}");
    for (record, n) in records.iter().zip(&before) {
        let job = &record.spec.job_id;
        assert!(
            out.contains(&format!("{job}  cleaned: {n} checkpoint objects")),
            "{out}"
        );
        let run = runs.join(job);
        assert_eq!(checkpoint_files(&run), 0, "{job}'s checkpoints are gone");
        assert!(
            !has_key(record, "left-by-a-killed-driver"),
            "{job}'s channel ({:?}) is clean",
            record.spec.training.channel
        );
        assert!(run.join("record.json").exists() && run.join("model.bin").exists());
    }
    assert!(out.contains("job-1-lost  skipped: lost"), "{out}");
    assert!(out.contains("job-2-running  skipped: running"), "{out}");
    assert!(out.contains("job-3-stale  skipped: lost"), "{out}");
    assert_eq!(
        checkpoint_files(&lost),
        1,
        "a run that may be running is left alone"
    );

    // The runs are still listed as they ended; cleaning again finds nothing left.
    let listed = String::from_utf8_lossy(&ok(&["runs", &r]).stdout).into_owned();
    assert!(listed.contains("job-1-lost  lost"), "{listed}");
    assert!(listed.contains("job-2-running  running"), "{listed}");
    assert!(listed.contains("job-3-stale  lost"), "{listed}");
    for record in &records {
        assert!(
            listed.contains(&format!("{}  finished", record.spec.job_id)),
            "{listed}"
        );
    }
    let job = &records[0].spec.job_id;
    let again =
        String::from_utf8_lossy(&ok(&["runs", &r, "--clean", "--job", job]).stdout).into_owned();
    assert!(
        again.contains(&format!("{job}  cleaned: 0 checkpoint objects")),
        "{again}"
    );
    // Named, a run that may be running is cleaned; an unknown job is an error naming it.
    let named =
        String::from_utf8_lossy(&ok(&["runs", &r, "--clean", "--job", "job-1-lost"]).stdout)
            .into_owned();
    assert!(
        named.contains("job-1-lost  cleaned: 1 checkpoint objects"),
        "{named}"
    );
    assert_eq!(checkpoint_files(&lost), 0);
    let err = fails(&["runs", &r, "--job", "job-2-none"]);
    assert!(err.contains("no run job-2-none in"), "{err}");
}

/// One unreadable `spec.json` hides no other run: the listing, `--job` and `--clean` show the
/// others, and the listing shows that run as unreadable, naming its file.
#[test]
fn an_unreadable_spec_is_shown_as_such_and_hides_no_other_run() {
    let dir = tempdir();
    let spec = mlless_data::SparseLrSpec::new(4_000, 200, 10, 3);
    let data = common::sparse_lr_prepared(dir.path(), &spec, &[]);
    let runs = dir.path().join("runs");
    let r = s(&runs);
    let record = checkpointed_run(&data, &runs, None, &dir.path().join("run.json"));
    let job = record.spec.job_id.as_str();
    let broken = runs.join("job-0-broken");
    std::fs::create_dir_all(&broken).expect("mkdir");
    std::fs::write(broken.join("spec.json"), "{\"job_id\": ").expect("write");
    let stdout = |args: &[&str]| String::from_utf8_lossy(&ok(args).stdout).into_owned();

    let listed = stdout(&["runs", &r]);
    assert!(listed.contains(&format!("{job}  finished")), "{listed}");
    assert!(listed.contains("job-0-broken  unreadable"), "{listed}");
    assert!(
        listed.contains("spec.json: invalid JSON"),
        "the listing names the file: {listed}"
    );
    let other = stdout(&["runs", &r, "--job", job]);
    assert!(other.contains(&format!("{job}  finished")), "{other}");
    assert!(!other.contains("job-0-broken"), "{other}");
    let named = stdout(&["runs", &r, "--job", "job-0-broken"]);
    assert!(named.contains("job-0-broken  unreadable"), "{named}");

    let cleaned = stdout(&["runs", &r, "--clean"]);
    assert!(cleaned.contains(&format!("{job}  cleaned: ")), "{cleaned}");
    assert!(
        cleaned.contains("job-0-broken  skipped: unreadable"),
        "{cleaned}"
    );
    assert_eq!(checkpoint_files(&runs.join(job)), 0);
    let err = fails(&["runs", &r, "--clean", "--job", "job-0-broken"]);
    assert!(err.contains("run job-0-broken cannot be read"), "{err}");
}
